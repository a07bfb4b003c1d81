#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine: installs both MPI runtimes and the other
# system packages if missing, builds every binary, then runs formatting and lint checks, unit
# tests, and the end-to-end tests (real MPI jobs, pcmd daemons, emulated hosts in network
# namespaces when run as root) on the default runtime (MPI_IOS_RUNTIME, default mpich).
# Then the runtime-dependent tests (migration, checkpoints, the runtime checks, stalled starts,
# emulated hosts, node leave, pcmrun, the C interface) run again on the other runtime, built
# in its own target directory.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
default_runtime="$MPI_IOS_RUNTIME"

# A one-node Slurm for tests/tests/slurm.rs, which starts it (as root; without it that test
# is skipped and says why).
if [ "$(id -u)" -eq 0 ] && ! command -v slurmctld >/dev/null 2>&1; then
    echo "test.sh: installing slurmctld slurmd slurm-client munge for the Slurm test" >&2
    { apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            slurmctld slurmd slurm-client munge >/dev/null; } ||
        echo "test.sh: Slurm could not be installed; its test will be skipped" >&2
fi

echo "== $(date +%T) build ($default_runtime)" >&2
cargo build --release --bins --quiet
# The C interface (libpcm) and the C examples, which the capi tests run.
scripts/build-c.sh
echo "== $(date +%T) format and lints" >&2
cargo fmt --all -- --check
cargo clippy --release --quiet --all-targets -- -D warnings
echo "== $(date +%T) tests ($default_runtime)" >&2
cargo test --release --workspace --no-fail-fast
# clap checks a command line's definition in debug builds only.
cargo test --quiet -p pcmd --lib the_command_line_definition_is_valid

case "$default_runtime" in
openmpi) other_runtime=mpich ;;
*) other_runtime=openmpi ;;
esac
# The agents' scenario tests (agents_e2e, c2c_e2e) run on the default runtime only, for
# CI's time: they passed on Open MPI 4 in full runs (docs/agents.md, README).
echo "== $(date +%T) migration, checkpoint, runtime, stall, emulated-host, leave, pcmrun and C interface tests ($other_runtime)" >&2
(
    MPI_IOS_RUNTIME="$other_runtime" source scripts/setup.sh
    # The crates whose code depends on the MPI library, and the tests that run jobs: the
    # programs these tests start (the agent tests start ios-agent and peer-server from this
    # target too), not the benchmarks'.
    cargo build --release --quiet --bins -p heat2d -p pcmd -p pcmrun -p ios-agent -p peer-server
    # pcm-state, the benchmarks' application, which the shared-array tests of migration and
    # hosts run.
    cargo build --release --quiet -p mpi-ios-bench --bin pcm-state
    scripts/build-c.sh
    cargo clippy --release --quiet -p pcm -p pcm-capi -p heat2d -p mpi-ios-tests --all-targets -- -D warnings
    cargo test --release -p pcm --lib
    cargo test --release --no-fail-fast -p mpi-ios-tests --test migration --test checkpoint --test runtime --test hosts --test stall --test leave --test pcmrun --test capi
)
