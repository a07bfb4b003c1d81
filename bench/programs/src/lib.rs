//! The MPI programs the benchmarks (`mpi-ios-bench`) and the shared-array tests run:
//! `pcm-state` (a PCM application that carries a large state, to time migrations),
//! `pcm-resize` (a malleable one, to time resizes), `mpi-pingpong` and `mpi-calls`. They link
//! an MPI library, so they are built once per runtime; this crate keeps them apart from the
//! benchmarks, whose dependencies (plots, the simulator) need no second build.

use serde::{Deserialize, Serialize};

/// One line of `pcm-state`, `pcm-resize` or `mpi-pingpong`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum BenchLine {
    /// pcm-state: a departing rank stored its state.
    Stored {
        /// The rank.
        rank: u32,
        /// Iteration at which it stored.
        iteration: u64,
        /// Time of the store calls, microseconds.
        store_us: u64,
        /// Bytes stored.
        bytes: u64,
    },
    /// pcm-state: a replacement loaded its state and checked it.
    Loaded {
        /// The rank.
        rank: u32,
        /// Iteration it resumes at.
        iteration: u64,
        /// Time of the load calls, microseconds.
        load_us: u64,
        /// Bytes loaded.
        bytes: u64,
        /// Whether the state checked out (it always does when printed: a bad state stops
        /// the program).
        verified: bool,
    },
    /// pcm-state, rank 0: a reconfiguration completed, with PCM's phase timings (slowest
    /// rank's) and rank 0's own time in `reconfigure`.
    Reconfigured {
        /// Iteration of the reconfiguration.
        iteration: u64,
        /// Agreement, microseconds.
        agree_us: u64,
        /// Spawn, microseconds.
        spawn_us: u64,
        /// Merge and split, microseconds.
        merge_split_us: u64,
        /// State transfer, microseconds.
        state_transfer_us: u64,
        /// Bytes of state moved.
        state_bytes: u64,
        /// Rank 0's wall time in `reconfigure`, microseconds.
        reconfigure_us: u64,
    },
    /// pcm-state, rank 0: a reconfiguration failed (nothing moved).
    ReconfigurationFailed {
        /// Why, in words.
        reason: String,
    },
    /// pcm-state, rank 0: the run ended.
    Done {
        /// Iterations run.
        iterations: u64,
        /// Migrations the job made.
        migrations: u64,
        /// Ranks.
        ranks: u32,
        /// State of each rank, bytes.
        state_bytes_per_rank: u64,
        /// Wall time, seconds.
        seconds: f64,
    },
    /// pcm-resize: a process of the world checked its rows of the distributed array after a
    /// reconfiguration (or at the end): every element held its expected value.
    RowsChecked {
        /// Its rank in the world it checked in.
        rank: u32,
        /// Width of that world.
        size: u32,
        /// First global row it holds.
        first_row: u64,
        /// Rows it holds.
        rows: u64,
        /// Iteration of the reconfiguration (the run's iterations for the final check).
        iteration: u64,
    },
    /// pcm-resize, rank 0: the run ended.
    ResizeDone {
        /// Iterations run.
        iterations: u64,
        /// Resizes the job completed.
        resizes: u64,
        /// Width at the end.
        ranks: u32,
        /// Global rows of the distributed array.
        rows: u64,
        /// Elements (`f64`) per row.
        row_len: u64,
    },
    /// pcm-resize --plain-spawn, rank 0: one plain `MPI_Comm_spawn_multiple` of `processes`
    /// processes from a world of `parents` (the slowest parent's time).
    Spawned {
        /// Width of the spawning world.
        parents: u32,
        /// Processes spawned.
        processes: u32,
        /// From a barrier to the spawn's return and an agreement on its success,
        /// microseconds.
        spawn_us: u64,
    },
    /// mpi-pingpong: one round trip of `bytes` and a one-byte answer.
    Pingpong {
        /// Bytes sent.
        bytes: u64,
        /// Round trip, microseconds.
        us: f64,
        /// Decimal GB/s.
        gb_per_s: f64,
    },
}

impl BenchLine {
    /// The line to print (no newline).
    pub fn to_json(&self) -> String {
        // Plain fields of known types: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// Every line of `stdout` that is one (mpirun may glue a rank's line behind another's
    /// text: each line is read from its first `{`). Other lines are output for people.
    pub fn all_in(stdout: &str) -> Vec<BenchLine> {
        stdout
            .lines()
            .filter_map(|l| serde_json::from_str(&l[l.find('{')?..]).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_back_and_other_output_is_left_out() {
        let lines = [
            BenchLine::Stored {
                rank: 1,
                iteration: 20,
                store_us: 5,
                bytes: 8,
            },
            BenchLine::Done {
                iterations: 60,
                migrations: 2,
                ranks: 4,
                state_bytes_per_rank: 8,
                seconds: 1.5,
            },
            BenchLine::Pingpong {
                bytes: 8,
                us: 2.0,
                gb_per_s: 0.004,
            },
        ];
        let mut stdout = String::from("pcm-state: starting\n");
        for l in &lines {
            stdout.push_str("[proxy] ");
            stdout.push_str(&l.to_json());
            stdout.push('\n');
        }
        stdout.push_str("{\"event\":\"stored\",\"rank\":\"x\"}\n");
        assert_eq!(BenchLine::all_in(&stdout), lines);
    }
}
