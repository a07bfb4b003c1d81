#!/usr/bin/env bash
# Installs what MPI/IOS needs on a fresh Debian machine: Open MPI (the MPI we build on),
# clang for rsmpi's bindings, iproute2 and util-linux for the emulated-host tests, and
# fonts-dejavu-core for the plots.
# Safe to run again: installs only what is missing. Sourced by the other scripts.
set -euo pipefail

missing=()
command -v mpicc.openmpi >/dev/null 2>&1 || missing+=(openmpi-bin libopenmpi-dev)
command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
# bindgen needs libclang itself; libclang-cpp (present on some images) does not do.
compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null ||
    compgen -G '/usr/lib/llvm-*/lib/libclang-[0-9]*.so*' >/dev/null || missing+=(libclang-dev clang)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
# The plots (mpi-ios-plots) lay out text with a TrueType font; $MPI_IOS_PLOT_FONT overrides.
[ -n "${MPI_IOS_PLOT_FONT:-}" ] || [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null 2>&1 || {
    echo "setup: cargo not found: install a Rust toolchain (1.85 or newer) first" >&2
    exit 1
}

# The Open MPI settings PCM jobs need (see README, "Running your own job").
export OMPI_MCA_rmaps_base_oversubscribe=1 # spawning a replacement needs a free slot
export OMPI_MCA_mpi_yield_when_idle=1      # co-located ranks must not spin on each other's CPU
export OMPI_MCA_btl=self,vader,tcp
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export MPICC=mpicc.openmpi
