#!/usr/bin/env bash
# Builds PCM's C interface (libpcm.so, libpcm.a) and the C examples (heat2d-c,
# heat2d-c-plain) into the selected runtime's target directory, next to the Rust binaries,
# and on Open MPI the Fortran example (jacobi-f90, jacobi-f90-plain): the MPICH wheel this
# project uses has no Fortran bindings.
# Run after `source scripts/setup.sh` (it sources it itself otherwise); scripts/test.sh runs
# it for both runtimes.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${CARGO_TARGET_DIR:-}" ] || [ -z "${MPICC:-}" ]; then
    source scripts/setup.sh
fi
cargo build --release --quiet -p pcm-capi
make --no-print-directory -s -C examples/heat2d-c TARGET_DIR="$CARGO_TARGET_DIR/release" MPICC="$MPICC"
if [ "$MPI_IOS_RUNTIME" = openmpi ]; then
    make --no-print-directory -s -C examples/jacobi-f90 TARGET_DIR="$CARGO_TARGET_DIR/release" \
        MPICC="$MPICC" MPIF90=mpif90.openmpi
else
    echo "build-c.sh: jacobi-f90 not built: $MPI_IOS_RUNTIME has no Fortran bindings here" >&2
fi
