#!/bin/bash
# Profiles the idle agents of `mpi-ios-bench pool` (issue 42, item 1): starts the pool,
# waits for its idle window, samples up to 50 agents with `perf record` for 25 s, and prints
# where their CPU went by thread and by library. Needs root (the pool's namespaces), perf
# and a release build (`source scripts/setup.sh && cargo build --release --bins`).
#
#   bench/spikes/pool-perf.sh AGENTS SECONDS OUT_DIR [more pool options...]
#   bench/spikes/pool-perf.sh 100 100 /tmp/pool-perf --dial-agents 0
#
# Then, for example: perf report -i OUT_DIR/perf.data --comm tokio-rt-worker --children \
#   --sort sym --stdio -g none
set -euo pipefail
agents=${1:?agents}
seconds=${2:?seconds}
out=${3:?output directory}
shift 3
bench="${CARGO_TARGET_DIR:-target}/release/mpi-ios-bench"
mkdir -p "$out"
"$bench" pool --agents "$agents" --sites 4 --seconds "$seconds" --out "$out" "$@" \
    > "$out/pool.out" 2> "$out/pool.err" &
pool=$!
for _ in $(seq 1 900); do
    grep -q "idle window of" "$out/pool.err" && break
    kill -0 "$pool" 2>/dev/null || break
    sleep 1
done
sleep 3
pids=$(pgrep -x ios-agent | head -50 | paste -sd, || true)
if [ -n "$pids" ]; then
    perf record -F 1999 -g -o "$out/perf.data" -p "$pids" -- sleep 25 > "$out/perf.log" 2>&1 || true
fi
status=0
wait "$pool" || status=$?
tail -8 "$out/pool.err"
if [ -s "$out/perf.data" ]; then
    for key in comm dso; do
        perf report -i "$out/perf.data" --no-children --sort "$key" --stdio -g none 2>/dev/null \
            | grep -v '^#' | grep -v '^$' | head -8
    done
fi
exit "$status"
