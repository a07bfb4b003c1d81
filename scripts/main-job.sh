#!/usr/bin/env bash
# The main job: heat2d on emulated nodes with IOS agents, a node loaded mid-run, an idle node
# joining, and the agents moving the slowed rank by themselves; compared with static MPI under
# the same load and with the unloaded run, checksums checked, throughput plotted.
#
#   scripts/main-job.sh [--quick] [--cooperating] [--size N] [--iters N] [--cap CPUS]
#                       [--load-at S] [--join-at S] [--out DIR]   (see --help)
#
# It installs what is missing (Open MPI, MPICH, clang, fonts; apt and pip, needs root or sudo),
# builds for the runtime MPI_IOS_RUNTIME selects (default mpich; see README), and
# runs `mpi-ios-bench adaptive`, which needs root for the network namespaces and cgroups that
# emulate the nodes (it is started with sudo when you are not root). Results: the summary on
# stdout, results/main-job/throughput.{svg,png}, timeline.csv and the logs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
echo "== building (release)" >&2
cargo build --release --bins --quiet
run=("$CARGO_TARGET_DIR/release/mpi-ios-bench" adaptive --check "$@")
if [ "$(id -u)" -ne 0 ]; then
    run=(sudo --preserve-env=PATH,RUST_LOG,MPI_IOS_RUNTIME "${run[@]}")
fi
exec "${run[@]}"
