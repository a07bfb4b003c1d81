#!/usr/bin/env bash
# The main job: heat2d on emulated nodes with IOS agents, a node loaded mid-run, an idle node
# joining, and the agents moving the slowed rank by themselves; compared with static MPI under
# the same load and with the unloaded run, checksums checked, throughput plotted.
#
#   scripts/main-job.sh [--quick] [--cooperating] [--size N] [--iters N] [--cap CPUS]
#                       [--load-at S] [--join-at S] [--out DIR]   (see --help)
#
# The malleable act (issue 38) instead: heat2d on node-a and node-b of four nodes, node-b
# loaded, node-c and node-d joining idle; the agents move and grow the job, then node-c's
# agent leaves and they shrink it; beside agents that only migrate, the best fixed-width
# placement and static MPI. results/main-job/summary.json then has the typed events (grows,
# shrinks, moves) and a `malleable` section (both runs' times, heat2d's speed at 1-4 ranks).
#
#   scripts/main-job.sh --malleable [--quick] [--size N] [--leave-at S] [--scaling-only]
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
