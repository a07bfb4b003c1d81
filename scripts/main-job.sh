#!/usr/bin/env bash
# The main job: a heat2d run whose ranks are moved while it runs, checked against the same
# run without PCM.
#
#   scripts/main-job.sh [--ranks N] [--rows R] [--cols C] [--iters N]
#
# It installs what is missing, builds, starts this node's pcmd, runs heat2d-plain for the
# reference checksum, then runs heat2d with live progress and asks pcmd to move rank 1 and,
# later, rank 0 while it computes. It ends by comparing the two checksums.
set -euo pipefail
cd "$(dirname "$0")/.."

ranks=4 rows=400 cols=400 iters=120000
while (($#)); do
    case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --cols) cols=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "main-job: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
((ranks >= 2)) || { echo "main-job: --ranks must be at least 2" >&2; exit 2; }

source scripts/setup.sh
echo "== building (release)" >&2
cargo build --release --bins --quiet
bin=target/release

work=$(mktemp -d -t mpi-ios-main.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

export PCM_DAEMON="$work/{host}.sock"
socket="$work/$(hostname).sock"
setsid "$bin/pcmd" serve 2>"$work/pcmd.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.05; done
[ -S "$socket" ] || { echo "main-job: pcmd did not start:" >&2; cat "$work/pcmd.log" >&2; exit 1; }

args=(--rows "$rows" --cols "$cols" --iters "$iters")
echo "== reference: heat2d-plain on $ranks ranks, ${rows}x${cols}, $iters iterations" >&2
plain=$(mpirun -np "$ranks" -x PCM_DAEMON "$bin/heat2d-plain" "${args[@]}" | tail -n 1)
echo "   $plain" >&2

echo "== adaptive: heat2d with PCM; pcmd will move rank 1, then rank 0, while it runs" >&2
setsid mpirun -np "$ranks" -x PCM_DAEMON "$bin/heat2d" "${args[@]}" --report-every $((iters / 20)) \
    >"$work/heat2d.out" 2> >(sed 's/^/   /' >&2) &
job=$!
pids+=($job)

running() { kill -0 "$job" 2>/dev/null; }
registered() { "$bin/pcmd" status --json 2>/dev/null | grep -o '"iteration": *[1-9]' | wc -l; }
until [ "$(registered)" -ge "$ranks" ]; do
    running || { echo "main-job: heat2d ended before registering with pcmd" >&2; exit 1; }
    sleep 0.2
done
"$bin/pcmd" status | sed 's/^/   /' >&2
sleep 1
echo "== pcmd migrate --rank 1" >&2
"$bin/pcmd" migrate --rank 1 | sed 's/^/   /' >&2
sleep 1
if running; then
    echo "== pcmd migrate --rank 0" >&2
    "$bin/pcmd" migrate --rank 0 | sed 's/^/   /' >&2
    "$bin/pcmd" status | sed 's/^/   /' >&2
fi
wait "$job"
adaptive=$(tail -n 1 "$work/heat2d.out")
echo "   $adaptive" >&2

field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p" <<<"$2"; }
plain_sum=$(field checksum "$plain")
adaptive_sum=$(field checksum "$adaptive")
echo
echo "heat2d-plain: $(field seconds "$plain") s, checksum $plain_sum"
echo "heat2d (PCM): $(field seconds "$adaptive") s, checksum $adaptive_sum, migrations $(field migrations "$adaptive")"
if [ "$plain_sum" = "$adaptive_sum" ] && [ -n "$plain_sum" ]; then
    echo "RESULT: checksums match bit for bit after $(field migrations "$adaptive") live migrations"
else
    echo "RESULT: CHECKSUM MISMATCH" >&2
    exit 1
fi
