#!/usr/bin/env bash
# Builds PCM's C interface (libpcm.so, libpcm.a) and the C examples (heat2d-c,
# heat2d-c-plain) and the Fortran example (jacobi-f90, jacobi-f90-plain) into the selected
# runtime's target directory, next to the Rust binaries. Fortran on MPICH uses the mpif90
# that setup.sh installs in MPICH's prefix (scripts/setup-mpich-fortran.sh).
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
    mpif90=mpif90.openmpi
else
    mpif90="$(dirname "$MPICC")/mpif90"
fi
make --no-print-directory -s -C examples/jacobi-f90 TARGET_DIR="$CARGO_TARGET_DIR/release" \
    MPICC="$MPICC" MPIF90="$mpif90"
