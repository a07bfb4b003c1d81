#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine: installs MPI and the other system
# packages if missing, builds every binary, then runs formatting and lint checks, unit tests,
# and the end-to-end tests (real mpirun jobs, pcmd daemons, emulated hosts in network
# namespaces when run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

echo "== build" >&2
cargo build --release --bins --quiet
echo "== format and lints" >&2
cargo fmt --all -- --check
cargo clippy --release --quiet --all-targets -- -D warnings
echo "== tests" >&2
cargo test --release --workspace --no-fail-fast
