//! What the main job and the figures conclude, as a typed file next to their plots
//! (`summary.json` for the main job, `<figure>.summary.json` for a figure): the tests and
//! any program read this, never the lines printed for people.

use std::path::Path;

use anyhow::{Context as _, Result};
use mpi_ios_tests::scenario::{Move, Outcome};
use serde::{Deserialize, Serialize};

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
    /// Where the adaptive run's ranks ended, by rank.
    pub final_hosts: Vec<String>,
    /// The physical limit (the best any placement could do), seconds, when an unloaded or
    /// best run gives it.
    pub limit_s: Option<f64>,
    /// Adaptive time over the physical limit.
    pub adaptive_over_limit: Option<f64>,
    /// Seconds from the load onset (or the join) until the adaptive run kept 90% of the
    /// reference throughput.
    pub recovered_after_s: Option<f64>,
    /// The main job's fault act, when run: whether the job came back by itself with the
    /// plain checksum.
    pub fault_recovered: Option<bool>,
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
            final_hosts: adaptive
                .and_then(|a| a.report.hosts.clone())
                .unwrap_or_default(),
            limit_s: None,
            adaptive_over_limit: None,
            recovered_after_s: None,
            fault_recovered: None,
            passed: false,
        }
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
            final_hosts: vec!["node-a".into(), "node-c".into()],
            limit_s: Some(7.0),
            adaptive_over_limit: Some(1.036),
            recovered_after_s: None,
            fault_recovered: Some(true),
            passed: true,
        };
        summary.write(dir.path(), MAIN_JOB_FILE).expect("written");
        let back = Summary::read(dir.path(), MAIN_JOB_FILE).expect("read");
        assert_eq!(back, summary);
        assert!(Summary::read(dir.path(), "missing.json").is_err());
    }
}
