#!/usr/bin/env bash
# Installs MPI/IOS under a prefix (default /usr/local), built for the runtime scripts/setup.sh
# selects (MPI_IOS_RUNTIME):
#   PREFIX/bin/pcmd, pcmrun, ios-agent, peer-server   the programs (release builds)
#   PREFIX/lib/libpcm.so, PREFIX/lib/libpcm.a, PREFIX/include/pcm.h   PCM's C interface
#   PREFIX/lib/pkgconfig/pcm.pc                       for pkg-config
#   PREFIX/lib/cmake/PCM/PCMConfig.cmake (and PCMConfigVersion.cmake)   for CMake:
#       find_package(PCM REQUIRED) gives PCM::pcm (and PCM::pcm_fortran with the module)
# and, when the runtime has a Fortran compiler wrapper (Open MPI's mpif90, or the one
# scripts/setup.sh installs for MPICH), the Fortran
# module: PREFIX/include/pcm.mod, PREFIX/lib/libpcmf.a, PREFIX/lib/pkgconfig/pcm-fortran.pc
# (mpif90 app.f90 $(pkg-config --cflags --libs pcm-fortran)). Then, anywhere,
#   PKG_CONFIG_PATH=PREFIX/lib/pkgconfig mpicc app.c $(pkg-config --cflags --libs pcm)
# or cmake -DCMAKE_PREFIX_PATH=PREFIX builds a PCM program with that runtime's MPI.
#
# usage: scripts/install.sh [--prefix DIR] [--from TARGET_PROFILE_DIR] [--programs-from DIR]
#   --from DIR           install the libraries (and the programs, when there) already built
#                        in DIR (e.g. target/release) instead of building them first
#   --programs-from DIR  take the programs from DIR instead (they link no MPI library: one
#                        build serves both runtimes); they must be there
set -euo pipefail
caller="$PWD"
cd "$(dirname "$0")/.."
prefix=/usr/local
from=""
programs_from=""
while [ $# -gt 0 ]; do
    case "$1" in
    --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
    --prefix=*) prefix="${1#--prefix=}"; shift ;;
    --from) from="${2:?--from needs a directory}"; shift 2 ;;
    --from=*) from="${1#--from=}"; shift ;;
    --programs-from) programs_from="${2:?--programs-from needs a directory}"; shift 2 ;;
    --programs-from=*) programs_from="${1#--programs-from=}"; shift ;;
    -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
# Directories given relative to where the script was called from.
absolute() { case "$1" in /* | "") echo "$1" ;; *) echo "$caller/$1" ;; esac; }
prefix="$(absolute "$prefix")" from="$(absolute "$from")" programs_from="$(absolute "$programs_from")"
if [ -z "$from" ]; then
    source scripts/setup.sh
    cargo build --release --quiet -p pcm-capi -p pcmd -p pcmrun -p ios-agent -p peer-server
    from="$CARGO_TARGET_DIR/release"
fi
programs=(pcmd pcmrun ios-agent peer-server)
# The programs come from --programs-from, which must hold them all, or else from the
# libraries' directory, where a --from build of the libraries alone (scripts/build-c.sh for a
# second runtime) may lack them: then only the libraries are installed, and this says so.
programs_required=1
if [ -z "$programs_from" ]; then
    programs_from="$from"
    programs_required=0
fi
programs_missing=()
for p in "${programs[@]}"; do
    [ -x "$programs_from/$p" ] || programs_missing+=("$p")
done
if ((${#programs_missing[@]})) && ((programs_required)); then
    echo "install.sh: ${programs_missing[*]} missing in $programs_from (cargo build --release --bins)" >&2
    exit 1
fi
for f in libpcm.so libpcm.a; do
    if [ ! -f "$from/$f" ]; then
        echo "install.sh: $from/$f is missing (cargo build --release -p pcm-capi)" >&2
        exit 1
    fi
done
runtime="$(cat "$from/../.mpi-runtime" 2>/dev/null || true)"
if [ -z "$runtime" ]; then
    # No stamp (a CARGO_TARGET_DIR set after sourcing setup.sh): the MPI library libpcm
    # links names the runtime (Open MPI's libmpi.so.40, MPICH's libmpi.so.12).
    case "$(readelf -d "$from/libpcm.so" 2>/dev/null)" in
    *"libmpi.so.40"*) runtime=openmpi ;;
    *"libmpi.so.12"*) runtime=mpich ;;
    *) runtime=unknown ;;
    esac
fi
# The runtime's compiler wrappers and launcher, which PCMConfig.cmake hands to find_package(MPI)
# while they exist (the same ones scripts/setup.sh puts on PATH).
mpi_c="" mpi_cxx="" mpi_fortran="" mpiexec=""
case "$runtime" in
mpich)
    mpich="$PWD/.mpi/mpich-$(sed -n 's/^MPICH_VERSION=//p' scripts/setup.sh)/bin"
    mpi_c="$mpich/mpicc" mpi_cxx="$mpich/mpicxx" mpiexec="$mpich/mpiexec.hydra"
    # The mpif90 that setup.sh installs for MPICH (scripts/setup-mpich-fortran.sh).
    [ -x "$mpich/mpif90" ] && mpi_fortran="$mpich/mpif90"
    ;;
openmpi)
    mpi_c="$(command -v mpicc.openmpi || true)"
    mpi_cxx="$(command -v mpicxx.openmpi || true)"
    mpi_fortran="$(command -v mpif90.openmpi || true)"
    mpiexec="$(command -v mpiexec.openmpi || true)"
    ;;
*) mpi_c="$(command -v "${MPICC:-mpicc}" || true)" ;;
esac
mkdir -p "$prefix/bin" "$prefix/lib/pkgconfig" "$prefix/lib/cmake/PCM" "$prefix/include"
prefix="$(cd "$prefix" && pwd)"
install -m 0755 "$from/libpcm.so" "$prefix/lib/libpcm.so"
install -m 0644 "$from/libpcm.a" "$prefix/lib/libpcm.a"
install -m 0644 pcm/capi/include/pcm.h "$prefix/include/pcm.h"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@RUNTIME@|$runtime|" \
    pcm/capi/pcm.pc.in >"$prefix/lib/pkgconfig/pcm.pc"
sed -e "s|@VERSION@|$version|g" -e "s|@RUNTIME@|$runtime|g" -e "s|@MPI_C_COMPILER@|$mpi_c|g" \
    -e "s|@MPI_CXX_COMPILER@|$mpi_cxx|g" -e "s|@MPI_Fortran_COMPILER@|$mpi_fortran|g" \
    -e "s|@MPIEXEC@|$mpiexec|g" cmake/PCMConfig.cmake.in >"$prefix/lib/cmake/PCM/PCMConfig.cmake"
sed -e "s|@VERSION@|$version|g" \
    cmake/PCMConfigVersion.cmake.in >"$prefix/lib/cmake/PCM/PCMConfigVersion.cmake"
installed_programs=()
for p in "${programs[@]}"; do
    if [ -x "$programs_from/$p" ]; then
        install -m 0755 "$programs_from/$p" "$prefix/bin/$p"
        installed_programs+=("$p")
    fi
done
if ((${#programs_missing[@]})); then
    echo "install.sh: not installed, not built in $programs_from: ${programs_missing[*]} (cargo build --release --bins, or --programs-from DIR)" >&2
fi
mpif90=""
case "$runtime" in
openmpi) command -v mpif90.openmpi >/dev/null 2>&1 && mpif90=mpif90.openmpi ;;
mpich) mpif90="$mpi_fortran" ;;
esac
if [ -n "$mpif90" ]; then
    # The module and its wrappers, compiled by the runtime's Fortran compiler: a .mod file
    # is only readable by the compiler (and version) that wrote it.
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    "$mpif90" -O2 -c -J"$work" -o "$work/pcm.o" pcm/capi/fortran/pcm.f90
    install -m 0644 "$work/pcm.mod" "$prefix/include/pcm.mod"
    rm -f "$prefix/lib/libpcmf.a"
    ar rcs "$prefix/lib/libpcmf.a" "$work/pcm.o"
    sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@RUNTIME@|$runtime|" \
        pcm/capi/pcm-fortran.pc.in >"$prefix/lib/pkgconfig/pcm-fortran.pc"
    echo "installed the Fortran module ($mpif90)" >&2
else
    echo "install.sh: no Fortran module: $runtime has no Fortran compiler wrapper here" >&2
fi
echo "installed libpcm ($runtime)${installed_programs[*]:+ and ${installed_programs[*]}} under $prefix" >&2
