//! What the main job and the figures conclude, as a typed file next to their plots
//! (`summary.json` for the main job, `<figure>.summary.json` for a figure): the tests and
//! any program read this, never the lines printed for people.

use std::path::Path;

use anyhow::{Context as _, Result};
use mpi_ios_tests::scenario::{Event, EventKind, Move, Outcome};
use serde::{Deserialize, Serialize};

use crate::yardstick::{ReferenceRate, Yardsticks};

/// Name of the main job's summary in its `--out` directory.
pub const MAIN_JOB_FILE: &str = "summary.json";

/// Name of a figure's summary in the figures' `--out` directory.
pub fn figure_file(figure: &str) -> String {
    format!("{figure}.summary.json")
}

/// One run of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// `adaptive`, `static`, `unloaded` or `best`.
    pub mode: String,
    /// The program that ran.
    pub program: String,
    /// The loop's time, seconds (the program's own report).
    pub seconds: f64,
    /// Checksum of the final grid.
    pub checksum: String,
}

/// A rank's move during the adaptive run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveAt {
    /// Seconds since the job started, in milliseconds (whole, so that the file reads back
    /// exactly).
    pub at_ms: u64,
    /// The move.
    pub moved: Move,
}

/// Something that happened during the adaptive run, typed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunEvent {
    /// A CPU hog started on `host`.
    LoadOnset {
        /// The loaded node.
        host: String,
    },
    /// `host`'s agent joined the pool.
    NodeJoin {
        /// The node.
        host: String,
    },
    /// `ios-agent leave` returned on `host`: `left` when the node was drained and given
    /// back.
    NodeLeave {
        /// The node.
        host: String,
        /// Whether it left (the command succeeded).
        left: bool,
    },
    /// A rank moved.
    Moved(Move),
    /// The job grew from `from` to `to` ranks, now on `hosts` (by rank).
    Grew {
        /// Ranks before.
        from: u32,
        /// Ranks after.
        to: u32,
        /// Host of every rank after.
        hosts: Vec<String>,
    },
    /// The job shrank from `from` to `to` ranks, now on `hosts` (by rank).
    Shrank {
        /// Ranks before.
        from: u32,
        /// Ranks after.
        to: u32,
        /// Host of every rank after.
        hosts: Vec<String>,
    },
}

impl RunEvent {
    /// The typed form of a run's event, `None` when it says too little.
    pub fn of(e: &Event) -> Option<RunEvent> {
        let host = || e.host.clone();
        Some(match e.kind {
            EventKind::LoadOnset => RunEvent::LoadOnset { host: host()? },
            EventKind::NodeJoin => RunEvent::NodeJoin { host: host()? },
            EventKind::NodeLeave => RunEvent::NodeLeave {
                host: host()?,
                left: e.what.contains("left the pool"),
            },
            EventKind::Migration => RunEvent::Moved(e.moved.clone()?),
            EventKind::Resize => {
                let r = e.resized.clone()?;
                if r.grew() {
                    RunEvent::Grew {
                        from: r.from,
                        to: r.to,
                        hosts: r.hosts,
                    }
                } else {
                    RunEvent::Shrank {
                        from: r.from,
                        to: r.to,
                        hosts: r.hosts,
                    }
                }
            }
        })
    }
}

/// An event of the adaptive run and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventAt {
    /// Seconds since the job started, in milliseconds.
    pub at_ms: u64,
    /// What happened.
    pub event: RunEvent,
}

/// heat2d-plain's speed at one width, one rank per emulated node, unloaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingPoint {
    /// Ranks (= nodes).
    pub ranks: u32,
    /// Iterations per second (median of the rounds).
    pub it_per_s: f64,
    /// Milliseconds per iteration (1000 / `it_per_s`).
    pub ms_per_iteration: f64,
    /// Rounds measured.
    pub rounds: u32,
}

/// The malleable act's own figures (`adaptive --malleable`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MalleableAct {
    /// The malleable run's loop time, seconds.
    pub malleable_s: f64,
    /// The migration-only run's loop time, seconds.
    pub migration_only_s: f64,
    /// How much shorter the malleable run was, % of the migration-only run (target: 25).
    pub shorter_pct: f64,
    /// Grows of the malleable run.
    pub grows: u32,
    /// Shrinks of the malleable run.
    pub shrinks: u32,
    /// Moves of the migration-only run.
    pub migration_only_moves: u32,
    /// Resizes of the migration-only run (its agents run with `--no-resize`: 0).
    pub migration_only_resizes: u32,
    /// The malleable run's mean iterations per second from the joins to the leave.
    pub joins_to_leave_it_per_s: Option<f64>,
    /// The migration-only run's, over the same seconds.
    pub joins_to_leave_migration_only_it_per_s: Option<f64>,
    /// Whether node-c's agent left (drained and given back) during the malleable run.
    pub node_c_left: bool,
    /// heat2d-plain's speed by width, measured before the runs.
    pub scaling: Vec<ScalingPoint>,
    /// 4 ranks' speed over 2 ranks', when both were measured (premise: at least 1.6).
    pub speedup_4_over_2: Option<f64>,
    /// The act's limit (`malleable_act::Limit`): the malleable run's loop time if moves and
    /// resizes were free and came at once, at the measured rates.
    #[serde(default)]
    pub limit_malleable_s: Option<f64>,
    /// The migration-only run's, alike.
    #[serde(default)]
    pub limit_migration_only_s: Option<f64>,
    /// How much shorter the malleable run is at the limit, %: the most this act can show.
    #[serde(default)]
    pub limit_shorter_pct: Option<f64>,
}

/// The conclusion of one experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// `main-job`, `fig13`, ...
    pub experiment: String,
    /// Every run made, adaptive first.
    pub runs: Vec<RunResult>,
    /// Whether every run's checksum is the same.
    pub checksums_match: bool,
    /// The adaptive run's moves.
    pub moves: Vec<MoveAt>,
    /// The adaptive run's events, typed: load onsets, joins, leaves, moves, grows and
    /// shrinks.
    #[serde(default)]
    pub events: Vec<EventAt>,
    /// Where the adaptive run's ranks ended, by rank.
    pub final_hosts: Vec<String>,
    /// The physical limit (the best any placement could do), seconds, when an unloaded or
    /// best run gives it.
    pub limit_s: Option<f64>,
    /// Adaptive time over the physical limit.
    pub adaptive_over_limit: Option<f64>,
    /// The rates the yardsticks stand on (the best placement's, the unloaded run's), each
    /// with the window it was measured over and whether the load ran during all of it.
    #[serde(default)]
    pub reference_rates: Vec<ReferenceRate>,
    /// Why there is no limit although the runs were made: its rate was measured without
    /// the experiment's load.
    #[serde(default)]
    pub limit_refused: Option<String>,
    /// The adaptive run's rate after its last move over the best placement's run plain
    /// under the same load (target: at least 0.97).
    #[serde(default)]
    pub settled_over_best: Option<f64>,
    /// Why the best placement was run twice (the adaptive run, once settled, beat the first
    /// run by more than the noise), the faster run used, when it was.
    #[serde(default)]
    pub best_repeated: Option<String>,
    /// Seconds from the load onset (or the join) until the adaptive run kept 90% of the
    /// reference throughput (the unloaded run's after a load onset: on a machine whose
    /// cores the load shares, even the best placement may stay below it).
    pub recovered_after_s: Option<f64>,
    /// Seconds from the load onset until the adaptive run kept 90% of the best placement's
    /// throughput under the same load (none without a best-placement run or its limit).
    #[serde(default)]
    pub recovered_to_best_after_s: Option<f64>,
    /// The main job's fault act, when run: whether the job came back by itself with the
    /// plain checksum.
    pub fault_recovered: Option<bool>,
    /// The malleable act's figures, when it ran (`adaptive --malleable`).
    #[serde(default)]
    pub malleable: Option<MalleableAct>,
    /// Whether the experiment passed its own check (`--check`).
    pub passed: bool,
}

impl Summary {
    /// The runs' results and the adaptive run's moves and placement, from the runs as
    /// (name, outcome, program), the adaptive one first; the rest is left for the caller.
    pub fn of(experiment: &str, outcomes: &[(&str, &Outcome, &str)]) -> Summary {
        let runs: Vec<RunResult> = outcomes
            .iter()
            .map(|(name, o, program)| RunResult {
                mode: (*name).to_owned(),
                program: (*program).to_owned(),
                seconds: o.report.seconds,
                checksum: o.report.checksum.clone(),
            })
            .collect();
        let adaptive = outcomes.first().map(|(_, o, _)| *o);
        Summary {
            experiment: experiment.to_owned(),
            checksums_match: runs.windows(2).all(|w| w[0].checksum == w[1].checksum),
            runs,
            moves: adaptive
                .map(|a| {
                    a.migrations()
                        .filter_map(|m| {
                            Some(MoveAt {
                                at_ms: (m.t * 1e3).round() as u64,
                                moved: m.moved.clone()?,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
            events: adaptive
                .map(|a| {
                    a.events
                        .iter()
                        .filter_map(|e| {
                            Some(EventAt {
                                at_ms: (e.t * 1e3).round() as u64,
                                event: RunEvent::of(e)?,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
            final_hosts: adaptive
                .and_then(|a| a.report.hosts.clone())
                .unwrap_or_default(),
            limit_s: None,
            adaptive_over_limit: None,
            reference_rates: Vec::new(),
            limit_refused: None,
            settled_over_best: None,
            best_repeated: None,
            recovered_after_s: None,
            recovered_to_best_after_s: None,
            fault_recovered: None,
            malleable: None,
            passed: false,
        }
    }

    /// Records the yardsticks: the limit (or why it was refused), the reference rates with
    /// their windows, the settled rate against the best placement's and the recovery.
    pub fn record(&mut self, y: &Yardsticks) {
        self.limit_s = y.limit_s;
        self.adaptive_over_limit = y.limit_ratio();
        self.limit_refused = y.limit_refused.clone();
        self.reference_rates = vec![y.best_window.clone()];
        if y.unloaded_window != y.best_window {
            self.reference_rates.push(y.unloaded_window.clone());
        }
        self.settled_over_best = y.settled_over_best();
        self.best_repeated.clone_from(&y.best_repeated);
        self.recovered_after_s = y.recovery_s;
        self.recovered_to_best_after_s = y.recovery_best_s;
    }

    /// The grows among the events.
    pub fn grows(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e.event, RunEvent::Grew { .. }))
            .count()
    }

    /// The shrinks among the events.
    pub fn shrinks(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e.event, RunEvent::Shrank { .. }))
            .count()
    }

    /// Writes it as `dir/name`.
    pub fn write(&self, dir: &Path, name: &str) -> Result<()> {
        let path = dir.join(name);
        let json = serde_json::to_string_pretty(self).context("serialising the summary")?;
        std::fs::write(&path, json + "\n").with_context(|| format!("writing {}", path.display()))
    }

    /// Reads `dir/name`.
    pub fn read(dir: &Path, name: &str) -> Result<Summary> {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} does not read", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_reads_back_as_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        let summary = Summary {
            experiment: "main-job".into(),
            runs: vec![RunResult {
                mode: "adaptive".into(),
                program: "heat2d-c".into(),
                seconds: 7.25,
                checksum: "ab".into(),
            }],
            checksums_match: true,
            moves: vec![MoveAt {
                at_ms: 4900,
                moved: Move {
                    rank: 1,
                    from: "node-b".into(),
                    to: "node-c".into(),
                },
            }],
            events: vec![
                EventAt {
                    at_ms: 2000,
                    event: RunEvent::LoadOnset {
                        host: "node-b".into(),
                    },
                },
                EventAt {
                    at_ms: 4000,
                    event: RunEvent::Grew {
                        from: 2,
                        to: 3,
                        hosts: vec!["node-a".into(), "node-c".into(), "node-d".into()],
                    },
                },
                EventAt {
                    at_ms: 8500,
                    event: RunEvent::Shrank {
                        from: 3,
                        to: 2,
                        hosts: vec!["node-a".into(), "node-d".into()],
                    },
                },
            ],
            final_hosts: vec!["node-a".into(), "node-c".into()],
            limit_s: Some(7.0),
            adaptive_over_limit: Some(1.036),
            reference_rates: vec![ReferenceRate {
                run: "best".into(),
                it_per_s: 1250.5,
                from_s: 0.0,
                to_s: 5.5,
                under_load: true,
            }],
            limit_refused: None,
            settled_over_best: Some(0.96),
            best_repeated: None,
            recovered_after_s: None,
            recovered_to_best_after_s: Some(2.5),
            fault_recovered: Some(true),
            malleable: None,
            passed: true,
        };
        summary.write(dir.path(), MAIN_JOB_FILE).expect("written");
        let back = Summary::read(dir.path(), MAIN_JOB_FILE).expect("read");
        assert_eq!(back, summary);
        assert_eq!((back.grows(), back.shrinks()), (1, 1));
        assert!(Summary::read(dir.path(), "missing.json").is_err());
        let text = std::fs::read_to_string(dir.path().join(MAIN_JOB_FILE)).expect("written");
        assert!(
            text.contains(r#""kind": "grew""#) && text.contains(r#""kind": "shrank""#),
            "{text}"
        );
    }

    #[test]
    fn a_summary_written_before_events_and_the_malleable_act_still_reads() {
        let dir = tempfile::tempdir().expect("temp dir");
        let old = r#"{"experiment": "fig13", "runs": [], "checksums_match": true, "moves": [],
            "final_hosts": [], "limit_s": null, "adaptive_over_limit": null,
            "recovered_after_s": null, "fault_recovered": null, "passed": true}"#;
        std::fs::write(dir.path().join("old.json"), old).expect("written");
        let back = Summary::read(dir.path(), "old.json").expect("read");
        assert!(back.events.is_empty() && back.malleable.is_none() && back.passed);
    }
}
