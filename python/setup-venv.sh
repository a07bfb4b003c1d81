#!/usr/bin/env bash
# The Python of the selected MPI runtime, for PCM's Python package (python/pcm) and
# examples/heat2d-py: a virtual environment in .mpi/python-$MPI_IOS_RUNTIME with numpy, and
# mpi4py built from source by the runtime's mpicc ($MPICC: mpi4py must call the MPI library
# libpcm links), and `python3` and `python` in .mpi/bin-$MPI_IOS_RUNTIME, first on the PATH
# scripts/setup.sh sets, that run it. scripts/setup.sh runs this (MPI_IOS_PYTHON=0 skips it);
# it installs only what is missing. python/build.sh then installs the pcm wheel there.
#
# The environment is made of copies (`venv --copies`), not symlinks: PCM starts a
# replacement with the executable of the process it replaces (/proc/self/exe), and in a
# venv of symlinks that is the base interpreter, outside the venv, where neither mpi4py nor
# pcm is installed. A copy is the venv's own executable, and finds the venv.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runtime="${MPI_IOS_RUNTIME:?run through scripts/setup.sh}"
mpicc="${MPICC:?run through scripts/setup.sh}"
venv="$root/.mpi/python-$runtime"
bin="$root/.mpi/bin-$runtime"
stamp="$venv/.mpi-ios-mpicc"

# Ready: the stamp, written last, names this mpicc (setup.sh is sourced often: no Python
# is started to check).
ready() {
    [ -x "$venv/bin/python3" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$mpicc" ]
}

if ! ready; then
    # One installer at a time (shells sourcing setup.sh at once); the others wait for it.
    mkdir -p "$root/.mpi"
    exec 9>"$root/.mpi/python-$runtime.lock"
    flock 9
fi
if ! ready; then
    # Our own python3 (from an earlier run) would be the broken environment's: use the one
    # further down the PATH.
    rm -f "$bin/python3" "$bin/python"
    base="$(command -v python3)"
    echo "setup: installing numpy and mpi4py (built by $mpicc) into $venv" >&2
    rm -rf "$venv"
    "$base" -m venv --copies "$venv"
    "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check numpy
    # The runtime's library directories first on the link line: with Debian's python3 the
    # link otherwise found Open MPI's libmpi.so in the system directory before MPICH's
    # (mpi4py then needed libmpi.so.40 and failed to import: undefined MPI_UNWEIGHTED).
    link_dirs="$("$mpicc" -show 2>/dev/null | tr ' ' '\n' | grep '^-L' | tr '\n' ' ' || true)"
    # From source, and never from pip's cache of built wheels, whose key is not the mpicc.
    LDFLAGS="$link_dirs${LDFLAGS:-}" MPICC="$mpicc" "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check \
        --no-cache-dir --no-binary=mpi4py mpi4py
    echo "$mpicc" >"$stamp"
fi
mkdir -p "$bin"
script="$(printf '#!/bin/sh\nexec %q "$@"\n' "$venv/bin/python3")"
for name in python3 python; do
    if [ "$(cat "$bin/$name" 2>/dev/null)" != "$script" ]; then
        rm -f "$bin/$name"
        printf '%s\n' "$script" >"$bin/$name"
        chmod 755 "$bin/$name"
    fi
done
