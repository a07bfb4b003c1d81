#!/usr/bin/env bash
# Builds PCM's Python package for the selected MPI runtime and installs it: libpcm
# (`cargo build --release -p pcm-capi`, as scripts/build-c.sh does), then the wheel around
# it (python/pcm_build.py) in $CARGO_TARGET_DIR/python/, installed with pip into the
# runtime's Python (.mpi/python-$MPI_IOS_RUNTIME, whose python3 scripts/setup.sh puts first
# on PATH, with numpy and mpi4py built by the runtime's mpicc). Prints the wheel's path.
#   --no-install   build the wheel only
# Run after `source scripts/setup.sh` (it sources it itself otherwise); scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
install=1
for arg in "$@"; do
    case "$arg" in
    --no-install) install=0 ;;
    -h | --help)
        sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "python/build.sh: unknown argument $arg (see --help)" >&2
        exit 2
        ;;
    esac
done
if [ -z "${CARGO_TARGET_DIR:-}" ] || [ -z "${MPICC:-}" ]; then
    source scripts/setup.sh
fi
python="$PWD/.mpi/python-$MPI_IOS_RUNTIME/bin/python3"
if [ ! -x "$python" ]; then
    echo "python/build.sh: $python is missing: source scripts/setup.sh (without MPI_IOS_PYTHON=0) first" >&2
    exit 1
fi
cargo build --release --quiet -p pcm-capi
wheel="$("$python" python/pcm_build.py --libpcm "$CARGO_TARGET_DIR/release/libpcm.so" --out "$CARGO_TARGET_DIR/python")"
if [ "$install" = 1 ]; then
    "$python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"
fi
echo "$wheel"
