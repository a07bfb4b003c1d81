#!/usr/bin/env bash
# Measures, on each MPI runtime, what the per-runtime table of the README reports for one
# host: spawn time of a replacement, how soon a departed process exits, and the halo
# exchange before and after a move onto the same host (shared memory or not).
#
#   scripts/compare-runtimes.sh [openmpi|mpich ...]     (default: both)
#
# Needs the binaries of each runtime built (`source scripts/setup.sh; cargo build --release`,
# and the same with MPI_IOS_RUNTIME=mpich). Prints one block per runtime. Host reclaim needs
# emulated hosts: tests/tests/hosts.rs covers it.
set -euo pipefail
cd "$(dirname "$0")/.."
runtimes=("$@")
((${#runtimes[@]})) || runtimes=(openmpi mpich)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "n/a" }'; }
epoch_of_log() { date -d "$(printf '%s' "$1" | cut -c1-26)Z" +%s.%N; }

# Live (not zombie) heat2d processes carrying TAG=$1 in their environment.
tagged() {
    local n=0 pid
    for pid in $(pgrep -x heat2d || true); do
        [ "$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)" = Z ] && continue
        tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx "MPI_IOS_TAG=$1" && n=$((n + 1))
    done
    echo "$n"
}

for runtime in "${runtimes[@]}"; do
    (
        MPI_IOS_RUNTIME="$runtime" source scripts/setup.sh
        bin="$CARGO_TARGET_DIR/release"
        export PCM_DAEMON=none RUST_LOG=warn,pcm=info
        echo "== $runtime: $(mpiexec --version 2>&1 | grep -m1 -E 'Open MPI|OpenRTE|Version' | tr -s ' ')"

        # Spawn: 20 moves of 3 ranks on this host, PCM's own phase times.
        schedule="$(seq 0 19 | awk '{ printf "%s%d:%d", (NR > 1 ? "," : ""), 100 + 100 * $1, $1 % 3 }')"
        PCM_SCHEDULE="$schedule" mpiexec -n 3 "$bin/heat2d" --rows 90 --cols 48 --iters 2200 \
            >"$work/spawn.out" 2>"$work/spawn.err"
        spawn="$(grep -o 'spawn [0-9.]*' "$work/spawn.err" | awk '{ print $2 }')"
        echo "spawn (ms, 20 moves): median $(median <<<"$spawn"), min $(sort -g <<<"$spawn" | head -1), max $(sort -g <<<"$spawn" | tail -1)"
        merge="$(grep -o 'merge+split [0-9.]*' "$work/spawn.err" | awk '{ print $2 }')"
        echo "merge+split (ms): median $(median <<<"$merge")"

        # Departure: rank 1 moves at iteration 2000 of a long run; when is its old process gone?
        tag="cmp-$runtime-$$"
        MPI_IOS_TAG="$tag" PCM_SCHEDULE=2000:1 mpiexec -n 3 "$bin/heat2d" --rows 400 --cols 400 \
            --iters 40000 >"$work/exit.out" 2>"$work/exit.err" &
        job=$!
        gone=""
        while kill -0 "$job" 2>/dev/null; do
            if grep -q 'reconfigured in' "$work/exit.err" && [ "$(tagged "$tag")" -le 3 ]; then
                gone="$(date +%s.%N)"
                # Fewer processes at the end of the job says nothing about the departure.
                sleep 0.5
                kill -0 "$job" 2>/dev/null || gone=""
                break
            fi
            sleep 0.01
        done
        wait "$job" || true
        ended="$(date +%s.%N)"
        line="$(grep -m1 'reconfigured in' "$work/exit.err" | awk '{ print $1 }')"
        moved="$(epoch_of_log "$line")"
        if [ -n "$gone" ]; then
            echo "departed process gone: $(awk -v a="$moved" -v b="$gone" 'BEGIN { printf "%.0f", (b - a) * 1000 }') ms after the move"
        else
            echo "departed process gone: only with the job, $(awk -v a="$moved" -v b="$ended" 'BEGIN { printf "%.1f", b - a }') s after the move"
        fi

        # Same-host exchange: 2 ranks, a small grid (the time per iteration is mostly the
        # halo exchange), rank 1 moved onto this same host halfway.
        mpiexec -n 2 "$bin/heat2d" --rows 64 --cols 64 --iters 60000 --report-every 5000 \
            >"$work/shm.out" 2>"$work/shm.err" && PCM_SCHEDULE=30000:1 mpiexec -n 2 "$bin/heat2d" \
            --rows 64 --cols 64 --iters 60000 --report-every 5000 >"$work/shm2.out" 2>"$work/shm2.err"
        rate() { grep -o "iteration [0-9]*/60000 [0-9.]* it/s" "$1" | awk -v lo="$2" -v hi="$3" '{ split($2, a, "/"); if (a[1] > lo && a[1] <= hi) print $3 }' | median; }
        before="$(rate "$work/shm2.err" 5000 30000)"
        after="$(rate "$work/shm2.err" 35000 60000)"
        unmoved="$(rate "$work/shm.err" 35000 60000)"
        awk -v b="$before" -v a="$after" -v u="$unmoved" 'BEGIN {
            printf "exchange, 2 ranks 64x64: %.1f us/iteration before the move, %.1f after (%+.0f%%); without a move %.1f\n",
                1e6 / b, 1e6 / a, (b / a - 1) * 100, 1e6 / u }'
    )
done
