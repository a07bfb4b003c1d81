#!/usr/bin/env bash
# Installs what MPI/IOS needs on a fresh Debian machine and selects the MPI runtime.
#
# Installs: Open MPI 4 (Debian), MPICH 5.0.2 (from the Python package index, into the
# project-local virtual environment .mpi/mpich-5.0.2; Debian's own MPICH cannot spawn) and
# its Fortran bindings (scripts/setup-mpich-fortran.sh: the wheel has none), clang
# for rsmpi's bindings, iproute2 and util-linux for the emulated-host tests, and
# fonts-dejavu-core for the plots. Safe to run again: installs only what is missing.
#
# Source it (the other scripts do): `source scripts/setup.sh`. The runtime is chosen by
# MPI_IOS_RUNTIME=mpich (default) or openmpi. For that runtime it exports:
#   PATH              the runtime's launcher first, as `mpiexec` (and `mpirun`, `mpicc`)
#   MPICC             the runtime's compiler wrapper, which rsmpi's build script reads
#   CARGO_TARGET_DIR  target/ for MPICH, target/openmpi for Open MPI: rsmpi's build script
#                     does not rerun when MPICC changes, so two runtimes never share one
#                     (a directory built for the other runtime gets its MPI detection redone)
#   RUSTFLAGS         MPICH only: an rpath to the venv's lib/ (rsmpi drops the one that
#                     `mpicc -show` prints, and libmpi.so.12 is not on the default path)
#   the runtime's settings for PCM jobs (OMPI_* for Open MPI; MPIR_CVAR_* and UCX_* for MPICH)
#   MPI_IOS_RUNTIME   the runtime chosen, which the test harness reads
# It runs with `set -euo pipefail` and gives the caller's shell its own options back when it
# ends, failed or not: sourced in a terminal, the strict options would otherwise stay on and
# the next failing command would close it.
# (Read here from `$-` and `shopt -o`: a command substitution does not see `-e`.)
mpi_ios_caller_options="set +e +u +o pipefail"
if [[ $- == *e* ]]; then mpi_ios_caller_options+=" -e"; fi
if [[ $- == *u* ]]; then mpi_ios_caller_options+=" -u"; fi
if shopt -qo pipefail; then mpi_ios_caller_options+=" -o pipefail"; fi
set -euo pipefail
# Prints why setup stops and puts the caller's options back; then `return 1` (or `exit 1`
# when run rather than sourced).
mpi_ios_fail() {
    echo "$1" >&2
    eval "$mpi_ios_caller_options"
    unset mpi_ios_caller_options
    unset -f mpi_ios_fail mpi_ios_links mpi_ios_wrappers
}

MPI_IOS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MPI_IOS_RUNTIME="${MPI_IOS_RUNTIME:-mpich}"
MPICH_VERSION=5.0.2
MPICH_PREFIX="$MPI_IOS_ROOT/.mpi/mpich-$MPICH_VERSION"
case "$MPI_IOS_RUNTIME" in
openmpi | mpich) ;;
*)
    mpi_ios_fail "setup: MPI_IOS_RUNTIME=$MPI_IOS_RUNTIME is not a runtime: use openmpi or mpich"
    return 1 2>/dev/null || exit 1
    ;;
esac

missing=()
command -v mpicc.openmpi >/dev/null 2>&1 || missing+=(openmpi-bin libopenmpi-dev)
command -v mpirun.openmpi >/dev/null 2>&1 || missing+=(openmpi-bin)
# bindgen needs libclang itself; libclang-cpp (present on some images) does not do.
compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null ||
    compgen -G '/usr/lib/llvm-*/lib/libclang-[0-9]*.so*' >/dev/null || missing+=(libclang-dev clang)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
# The C interface: make builds the C examples, pkg-config finds an installed libpcm.
command -v make >/dev/null 2>&1 || missing+=(make)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
# CMake finds an installed PCM through its package config (scripts/install.sh, PCMConfig.cmake).
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
# The Fortran module and example (Open MPI's Fortran bindings come with libopenmpi-dev;
# MPICH's are set up below).
command -v gfortran >/dev/null 2>&1 || missing+=(gfortran)
# overhead --instructions (bench/tests/overhead.rs) counts instructions with callgrind.
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
# MPICH comes as a wheel: a virtual environment with pip (Debian splits venv out of python3).
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
# mpi4py is built from source for the runtime (python/setup-venv.sh): Python's headers.
python3 -c 'import os, sysconfig; os.stat(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' >/dev/null 2>&1 || missing+=(python3-dev)
# The plots (mpi-ios-plots) lay out text with a TrueType font; $MPI_IOS_PLOT_FONT overrides.
[ -n "${MPI_IOS_PLOT_FONT:-}" ] || [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    if ! { $sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
        mpi_ios_fail "setup: apt-get could not install ${missing[*]} (see above)"
        return 1 2>/dev/null || exit 1
    fi
fi
command -v cargo >/dev/null 2>&1 || {
    mpi_ios_fail "setup: cargo not found: install a Rust toolchain (1.85 or newer) first"
    return 1 2>/dev/null || exit 1
}

# MPICH, pinned, in its own venv. Checked by what mpichversion reports, so that a half-done
# install (interrupted pip) is redone rather than trusted.
if ! "$MPICH_PREFIX/bin/mpichversion" 2>/dev/null | grep -q "^MPICH Version: *$MPICH_VERSION\$"; then
    echo "setup: installing MPICH $MPICH_VERSION into $MPICH_PREFIX" >&2
    if ! { python3 -m venv "$MPICH_PREFIX" &&
        "$MPICH_PREFIX/bin/pip" install --quiet --disable-pip-version-check "mpich==$MPICH_VERSION"; }; then
        mpi_ios_fail "setup: could not install MPICH $MPICH_VERSION from the Python package index (see above)"
        return 1 2>/dev/null || exit 1
    fi
fi
# Fortran for MPICH: Intel MPI's Fortran layer over MPICH's libmpi, as mpif90 in MPICH's
# prefix (about 5 s and a 132 MB download once; then a grep).
if ! "$MPI_IOS_ROOT/scripts/setup-mpich-fortran.sh" "$MPICH_PREFIX"; then
    mpi_ios_fail "setup: could not install Fortran bindings for MPICH (see above)"
    return 1 2>/dev/null || exit 1
fi

# One directory of launcher and compiler links per runtime, put first on PATH: the venv's
# bin/ itself would also put its python and pip first, and Debian's /usr/bin/mpiexec is
# whatever the alternatives system points to.
mpi_ios_links() {
    local dir="$MPI_IOS_ROOT/.mpi/bin-$1"
    shift
    mkdir -p "$dir"
    while (($#)); do
        ln -sfn "$2" "$dir/$1"
        shift 2
    done
}
# MPICH's compiler wrappers find their headers and libraries from where they are run: a link
# to one would send the compiler to .mpi/include. They get a small script that runs them
# where they are instead.
mpi_ios_wrappers() {
    local dir="$MPI_IOS_ROOT/.mpi/bin-$1" script
    shift
    mkdir -p "$dir"
    while (($#)); do
        script="$(printf '#!/bin/sh\nexec %q "$@"\n' "$2")"
        [ "$(cat "$dir/$1" 2>/dev/null)" = "$script" ] || {
            rm -f "$dir/$1"
            printf '%s\n' "$script" >"$dir/$1"
            chmod 755 "$dir/$1"
        }
        shift 2
    done
}
mpi_ios_links openmpi mpiexec /usr/bin/mpiexec.openmpi mpirun /usr/bin/mpirun.openmpi \
    mpicc /usr/bin/mpicc.openmpi mpicxx /usr/bin/mpicxx.openmpi mpic++ /usr/bin/mpicxx.openmpi \
    mpif90 /usr/bin/mpif90.openmpi mpifort /usr/bin/mpifort.openmpi
mpi_ios_links mpich mpiexec "$MPICH_PREFIX/bin/mpiexec.hydra" \
    mpirun "$MPICH_PREFIX/bin/mpiexec.hydra" \
    mpichversion "$MPICH_PREFIX/bin/mpichversion" hydra_pmi_proxy "$MPICH_PREFIX/bin/hydra_pmi_proxy"
mpi_ios_wrappers mpich mpicc "$MPICH_PREFIX/bin/mpicc" mpicxx "$MPICH_PREFIX/bin/mpicxx" \
    mpic++ "$MPICH_PREFIX/bin/mpicxx" mpif90 "$MPICH_PREFIX/bin/mpif90" \
    mpifort "$MPICH_PREFIX/bin/mpifort"

# Undo what an earlier `source` with the other runtime put in this shell.
mpi_ios_rpath="-C link-arg=-Wl,-rpath,$MPICH_PREFIX/lib"
RUSTFLAGS="${RUSTFLAGS:-}"
RUSTFLAGS="${RUSTFLAGS//$mpi_ios_rpath/}"
RUSTFLAGS="$(echo "$RUSTFLAGS" | tr -s ' ' | sed 's/^ //; s/ $//')"
PATH=":$PATH:"
PATH="${PATH//:$MPI_IOS_ROOT\/.mpi\/bin-openmpi:/:}"
PATH="${PATH//:$MPI_IOS_ROOT\/.mpi\/bin-mpich:/:}"
PATH="${PATH#:}"
PATH="${PATH%:}"

# `MPI_IOS_RUNTIME=mpich source scripts/setup.sh` makes the variable temporary: bash would
# drop it (export included) once `source` returns. Unset that one and export a lasting one.
mpi_ios_runtime="$MPI_IOS_RUNTIME"
unset MPI_IOS_RUNTIME
export MPI_IOS_RUNTIME="$mpi_ios_runtime"
unset mpi_ios_runtime
export PATH="$MPI_IOS_ROOT/.mpi/bin-$MPI_IOS_RUNTIME:$PATH"
if [ "$MPI_IOS_RUNTIME" = openmpi ]; then
    # The Open MPI settings PCM jobs need (see README, "Running your own job").
    export OMPI_MCA_rmaps_base_oversubscribe=1 # spawning a replacement needs a free slot
    export OMPI_MCA_mpi_yield_when_idle=1      # co-located ranks must not spin on each other's CPU
    export OMPI_MCA_btl=self,vader,tcp
    if [ "$(id -u)" -eq 0 ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    export MPICC=mpicc.openmpi
    # The same directory as .cargo/config.toml's fallback, which is pinned to Open MPI too.
    export CARGO_TARGET_DIR="$MPI_IOS_ROOT/target/openmpi"
else
    # A departed process finalizes alone (no fence with the rest of its launch) and exits.
    export MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1
    # Collectives in MPIR's algorithms, which add the ranks' partial sums in an order set by
    # rank order alone: PCM jobs set it themselves (MPICH's shared-memory collectives never
    # include a replacement), and plain programs run from this shell then round bit for bit
    # as PCM jobs do, before and after moves (docs/architecture.md, "Reductions").
    export MPIR_CVAR_DEVICE_COLLECTIVES=none
    # UCX prints its warnings on stdout, where they would follow heat2d's JSON report: only
    # errors, on stderr (the one a job that lost a member to a move logs at MPI_Finalize, the
    # flush of that member's endpoint, which PCM forgives: pcm/src/departed_peers.rs). UCX
    # reads these when it is loaded, so PCM cannot set them itself.
    export UCX_LOG_LEVEL=error UCX_LOG_FILE=stderr
    # UCX's memory hooks cost every process ~40 ms at load (a replacement's spawn 80-100 ->
    # 35-60 ms without them) and serve only RDMA registration caches: off unless the user
    # chose (pcmrun does the same; docs/benchmarks.md, "Towards a 50 ms move").
    export UCX_MEM_EVENTS="${UCX_MEM_EVENTS:-no}"
    export MPICC="$MPICH_PREFIX/bin/mpicc"
    export CARGO_TARGET_DIR="$MPI_IOS_ROOT/target"
    RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }$mpi_ios_rpath"
fi
# PCM's Python package and examples/heat2d-py: numpy and mpi4py built by this runtime's mpicc,
# in .mpi/python-$MPI_IOS_RUNTIME, whose python3 comes first on PATH (MPI_IOS_PYTHON=0: skipped).
if [ "${MPI_IOS_PYTHON:-1}" != 0 ] && ! "$MPI_IOS_ROOT/python/setup-venv.sh"; then
    mpi_ios_fail "setup: could not install numpy and mpi4py for $MPI_IOS_RUNTIME (see above)"
    return 1 2>/dev/null || exit 1
fi
if [ -n "$RUSTFLAGS" ]; then export RUSTFLAGS; else unset RUSTFLAGS; fi
# A target directory records the runtime it was built for. One built for another runtime
# (target/ before MPICH became the default held Open MPI builds) would keep rsmpi's and
# pcm's MPI detection, which do not rerun when MPICC changes: remove those build outputs so
# that they rerun and everything linked to MPI is rebuilt.
mpi_ios_stamp="$CARGO_TARGET_DIR/.mpi-runtime"
if [ "$(cat "$mpi_ios_stamp" 2>/dev/null)" != "$MPI_IOS_RUNTIME" ] &&
    compgen -G "$CARGO_TARGET_DIR/*/build/mpi-sys-*" >/dev/null; then
    echo "setup: $CARGO_TARGET_DIR was built for another MPI runtime; redoing its MPI detection" >&2
    rm -rf "$CARGO_TARGET_DIR"/*/build/mpi-sys-* "$CARGO_TARGET_DIR"/*/.fingerprint/mpi-sys-* \
        "$CARGO_TARGET_DIR"/*/build/pcm-* "$CARGO_TARGET_DIR"/*/.fingerprint/pcm-*
fi
mkdir -p "$CARGO_TARGET_DIR"
echo "$MPI_IOS_RUNTIME" >"$mpi_ios_stamp"
unset mpi_ios_stamp
unset mpi_ios_rpath
eval "$mpi_ios_caller_options"
unset mpi_ios_caller_options
unset -f mpi_ios_fail mpi_ios_links mpi_ios_wrappers
