//! Interleaved runs of variants of one computation, for the overhead benchmarks (`overhead`,
//! `fig12`, `profiling`): plain MPI against PCM with or without a pcmd, profiling off against
//! on. Each round runs every variant once, in order, so that slow drifts of a shared machine
//! hit all of them alike; every run must print the same checksum and iteration count as the
//! round's first. Two yardsticks per run: the loop time the program reports for itself, and
//! the whole process's wall time (the launcher's start to its exit), which does not depend on
//! which span a program chooses to time.

use std::time::Duration;

use anyhow::{ensure, Context as _, Result};
use mpi_ios_tests::MpiJob;

/// The report heat2d and its C twin print as their last JSON line (the fields the
/// benchmarks read).
#[derive(Debug, serde::Deserialize)]
pub struct HeatReport {
    /// Digest of the final grid.
    pub checksum: String,
    /// The program's own loop time.
    pub seconds: f64,
    /// Iterations run.
    pub iterations: u64,
    /// Migrations done (PCM runs only).
    #[serde(default)]
    pub migrations: Option<u64>,
    /// Global rows of the grid.
    #[serde(default)]
    pub rows: u64,
    /// Columns of the grid.
    #[serde(default)]
    pub cols: u64,
}

impl HeatReport {
    /// Fails when the run went past half its grid's predicted fixed point
    /// ([`mpi_ios_tests::heat2d_safe_iterations`]): there every run ends with the same
    /// checksum, whatever it computed on the way, and comparing checksums proves nothing.
    pub fn check_unsettled(&self) -> Result<()> {
        let safe = mpi_ios_tests::heat2d_safe_iterations(self.rows, self.cols);
        ensure!(
            self.iterations <= safe,
            "{} iterations of a {} x {} grid are more than {safe}, half its predicted fixed point: \
             comparing checksums there cannot fail; use fewer iterations or a larger grid",
            self.iterations,
            self.rows,
            self.cols
        );
        Ok(())
    }
}

/// The last JSON line of `stdout`, as a [`HeatReport`].
pub fn heat_report(stdout: &str) -> Result<HeatReport> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("the run printed no JSON report")?;
    serde_json::from_str(line).with_context(|| format!("bad report line: {line}"))
}

/// The two grid sizes of the overhead benchmarks: about 100 us and about 1 ms per iteration
/// of heat2d on 2 ranks on an idle machine of this kind, each run 2-3 s.
#[derive(Debug, Clone, clap::Args)]
pub struct GridSizes {
    /// Grid side of the ~100 us/iteration size.
    #[arg(long, default_value_t = 576)]
    pub small_size: usize,
    /// Iterations of the small size.
    #[arg(long, default_value_t = 20_000)]
    pub small_iters: u64,
    /// Grid side of the ~1 ms/iteration size.
    #[arg(long, default_value_t = 1448)]
    pub large_size: usize,
    /// Iterations of the large size.
    #[arg(long, default_value_t = 2_500)]
    pub large_iters: u64,
}

/// One grid size of [`GridSizes`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GridCase {
    /// Rows and columns.
    pub side: usize,
    /// Iterations.
    pub iters: u64,
    /// `~100 us` or `~1 ms` (per iteration).
    pub label: &'static str,
}

impl GridCase {
    /// heat2d's arguments for this case.
    pub fn args(&self) -> Vec<String> {
        let side = self.side.to_string();
        let iters = self.iters.to_string();
        ["--rows", &side, "--cols", &side, "--iters", &iters]
            .map(str::to_owned)
            .to_vec()
    }

    /// Microseconds per iteration of each of `seconds`.
    pub fn per_iter_us(&self, seconds: &[f64]) -> Vec<f64> {
        let iters = self.iters as f64;
        seconds.iter().map(|s| s / iters * 1e6).collect()
    }
}

impl GridSizes {
    /// CI sizes: 64x64 for 300 iterations and 128x128 for 100.
    pub fn quick(&mut self) {
        (self.small_size, self.small_iters) = (64, 300);
        (self.large_size, self.large_iters) = (128, 100);
    }

    /// The small case, then the large one.
    pub fn cases(&self) -> [GridCase; 2] {
        [
            GridCase {
                side: self.small_size,
                iters: self.small_iters,
                label: "~100 us",
            },
            GridCase {
                side: self.large_size,
                iters: self.large_iters,
                label: "~1 ms",
            },
        ]
    }
}

/// One variant of the computation: a name for tables and logs, and its job.
#[derive(Debug, Clone)]
pub struct Variant {
    /// Shown in logs and errors.
    pub label: String,
    /// The run.
    pub job: MpiJob,
}

impl Variant {
    /// A variant named `label`.
    pub fn new(label: impl Into<String>, job: MpiJob) -> Variant {
        Variant {
            label: label.into(),
            job,
        }
    }
}

/// One run's times, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measure {
    /// The loop time the program reported.
    pub loop_s: f64,
    /// The whole process's wall time.
    pub wall_s: f64,
}

/// The measured (not warm-up) runs of each variant, in the order given, one per round.
#[derive(Debug, Clone)]
pub struct Series {
    /// Per variant, per round.
    pub runs: Vec<Vec<Measure>>,
}

impl Series {
    /// Loop times of variant `v`.
    pub fn loop_s(&self, v: usize) -> Vec<f64> {
        self.runs[v].iter().map(|m| m.loop_s).collect()
    }

    /// Per-round ratios of variant `v` over variant 0 by `time` (loop or wall).
    pub fn ratios(&self, v: usize, time: fn(&Measure) -> f64) -> Vec<f64> {
        self.runs[v]
            .iter()
            .zip(&self.runs[0])
            .map(|(m, base)| time(m) / time(base))
            .collect()
    }
}

/// Runs `warmup + rounds` rounds of `variants` (each `iters` iterations), checking that
/// they all compute the same grid; logs each round as `[what] ...` on stderr.
pub fn interleave(
    what: &str,
    variants: &[Variant],
    iters: u64,
    warmup: usize,
    rounds: usize,
    timeout: Duration,
) -> Result<Series> {
    ensure!(!variants.is_empty(), "{what}: no variant to run");
    ensure!(rounds >= 1, "{what}: at least one measured round is needed");
    let mut runs: Vec<Vec<Measure>> = vec![Vec::new(); variants.len()];
    for round in 0..warmup + rounds {
        let warm = round < warmup;
        let mut first: Option<String> = None;
        let mut line = format!(
            "[{what}] {} {}/{}:",
            if warm { "warm-up" } else { "round" },
            if warm { round + 1 } else { round + 1 - warmup },
            if warm { warmup } else { rounds }
        );
        let mut measured = Vec::with_capacity(variants.len());
        for v in variants {
            let finished = v.job.run_within(timeout)?.check(&v.label)?;
            let report = heat_report(&finished.stdout)
                .with_context(|| format!("{}: no usable report", v.label))?;
            ensure!(
                report.iterations == iters,
                "{}: {} iterations reported, {iters} asked for",
                v.label,
                report.iterations
            );
            report.check_unsettled()?;
            match &first {
                None => first = Some(report.checksum.clone()),
                Some(c) => ensure!(
                    *c == report.checksum,
                    "{what}: {} computed another grid ({}) than {} ({c})",
                    v.label,
                    report.checksum,
                    variants[0].label
                ),
            }
            let m = Measure {
                loop_s: report.seconds,
                wall_s: finished.elapsed.as_secs_f64(),
            };
            line.push_str(&format!(
                " {} {:.4} s (whole {:.3} s);",
                v.label, m.loop_s, m.wall_s
            ));
            measured.push(m);
        }
        eprintln!("{}", line.trim_end_matches(';'));
        if !warm {
            for (series, m) in runs.iter_mut().zip(measured) {
                series.push(m);
            }
        }
    }
    Ok(Series { runs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_per_round_against_the_first_variant() {
        let m = |loop_s, wall_s| Measure { loop_s, wall_s };
        let series = Series {
            runs: vec![
                vec![m(1.0, 2.0), m(2.0, 4.0)],
                vec![m(1.1, 2.0), m(1.8, 5.0)],
            ],
        };
        let loops = series.ratios(1, |m| m.loop_s);
        assert!((loops[0] - 1.1).abs() < 1e-12 && (loops[1] - 0.9).abs() < 1e-12);
        assert_eq!(series.ratios(1, |m| m.wall_s), vec![1.0, 1.25]);
        assert_eq!(series.loop_s(0), vec![1.0, 2.0]);
    }

    #[test]
    fn the_report_is_the_last_json_line() {
        let out = "progress\n{\"checksum\":\"a\",\"seconds\":1.5,\"iterations\":3}\n";
        let r = heat_report(out).unwrap();
        assert_eq!((r.checksum.as_str(), r.iterations), ("a", 3));
        assert!(heat_report("no report").is_err());
    }
}
