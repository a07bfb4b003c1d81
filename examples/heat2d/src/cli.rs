//! Command-line options, their validation, and progress lines.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use mpi::topology::Communicator;

/// Default `--rows`.
pub const DEFAULT_ROWS: usize = 512;
/// Default `--cols`.
pub const DEFAULT_COLS: usize = 512;
/// Default `--iters`.
pub const DEFAULT_ITERS: u64 = 1000;

/// 2-D heat diffusion (Jacobi iteration) on a grid split into blocks of rows, one per MPI rank.
///
/// The row above the grid is held at 100.0, the row below and both side columns at 0.0.
/// Rank 0 prints a JSON report as its last stdout line.
// A larger option struct (the instrumented binary's) can embed this one with
// `#[command(flatten)]`; see the `given_outer_struct_then_args_flatten` test.
#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(version)]
pub struct Args {
    /// Computed grid rows, split among the ranks (at least one per rank).
    #[arg(long, default_value_t = DEFAULT_ROWS)]
    pub rows: usize,
    /// Grid columns, including the two fixed boundary columns (at least 3).
    #[arg(long, default_value_t = DEFAULT_COLS)]
    pub cols: usize,
    /// Jacobi iterations to run.
    #[arg(long, default_value_t = DEFAULT_ITERS)]
    pub iters: u64,
    /// Print a progress line (iterations/s) to rank 0's stderr every K iterations; 0 = off.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub report_every: u64,
}

/// Options that cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// Fewer rows than ranks: some rank would own no row.
    #[error("--rows {rows} is less than the number of ranks ({ranks}): every rank needs at least one row")]
    TooFewRows {
        /// `--rows`.
        rows: usize,
        /// Number of ranks.
        ranks: usize,
    },
    /// Fewer than 3 columns.
    #[error("--cols {cols} is less than 3: two fixed boundary columns and at least one computed")]
    TooFewCols {
        /// `--cols`.
        cols: usize,
    },
    /// The grid does not fit an MPI count (`i32`), needed to gather it for the checksum.
    #[error("--rows {rows} x --cols {cols} exceeds {max} values, the MPI count limit")]
    TooLarge {
        /// `--rows`.
        rows: usize,
        /// `--cols`.
        cols: usize,
        /// The limit.
        max: usize,
    },
}

impl Args {
    /// Checks the options against the number of ranks. Call it on every rank: all ranks reach
    /// the same verdict, so all can return without waiting for each other.
    ///
    /// # Errors
    /// The first problem found, naming the option.
    pub fn validate(&self, ranks: usize) -> Result<(), ArgsError> {
        let (rows, cols) = (self.rows, self.cols);
        if cols < 3 {
            return Err(ArgsError::TooFewCols { cols });
        }
        if rows < ranks.max(1) {
            return Err(ArgsError::TooFewRows { rows, ranks });
        }
        let max = i32::MAX as usize;
        if rows.checked_mul(cols).is_none_or(|n| n > max) {
            return Err(ArgsError::TooLarge { rows, cols, max });
        }
        Ok(())
    }
}

/// Parses the command line on every rank (they all see the same arguments). On `--help`,
/// `--version` or a parse error, only rank 0 prints, and every rank gets `Err` with the exit
/// code to return after finalizing MPI (so no rank exits without finalizing and none hangs).
///
/// # Errors
/// The exit code for a run that must not start (0 for `--help`).
pub fn parse_on_all_ranks<A: Parser>(comm: &impl Communicator) -> Result<A, ExitCode> {
    A::try_parse().map_err(|e| {
        if comm.rank() == 0 {
            // Nothing useful to do if stderr is gone.
            let _ = e.print();
        }
        ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
    })
}

/// Rate-limited progress lines for `--report-every`.
#[derive(Debug, Clone)]
pub struct Progress {
    every: u64,
    total: u64,
    since: Instant,
    since_iter: u64,
}

impl Progress {
    /// Progress over `total` iterations, a line every `every` iterations (0 = never), with the
    /// rate measured from `now`.
    #[must_use]
    pub fn new(every: u64, total: u64, now: Instant) -> Self {
        Self {
            every,
            total,
            since: now,
            since_iter: 0,
        }
    }

    /// Measures the first rate from iteration `done` (a replacement resuming mid-run).
    #[must_use]
    pub fn starting_at(mut self, done: u64) -> Self {
        self.since_iter = done;
        self
    }

    /// Call after each iteration with the number of iterations done. Returns a line to print
    /// when one is due; reads the clock only then.
    pub fn tick(&mut self, done: u64) -> Option<String> {
        if self.every == 0 || done % self.every != 0 {
            return None;
        }
        Some(self.line(done, Instant::now()))
    }

    /// The progress line at `done` iterations and time `now`, restarting the rate window.
    pub fn line(&mut self, done: u64, now: Instant) -> String {
        let secs = now.saturating_duration_since(self.since).as_secs_f64();
        let iters = done.saturating_sub(self.since_iter);
        let rate = if secs > 0.0 { iters as f64 / secs } else { 0.0 };
        self.since = now;
        self.since_iter = done;
        format!("heat2d: iteration {done}/{} {rate:.1} it/s", self.total)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn args(rows: usize, cols: usize) -> Args {
        Args {
            rows,
            cols,
            iters: 1,
            report_every: 0,
        }
    }

    #[test]
    fn given_defaults_then_they_are_documented_constants() {
        let a = Args::try_parse_from(["heat2d"]).expect("defaults parse");
        assert_eq!(
            a,
            Args {
                rows: DEFAULT_ROWS,
                cols: DEFAULT_COLS,
                iters: DEFAULT_ITERS,
                report_every: 0
            }
        );
        let b = Args::try_parse_from(["x", "--rows", "7", "--cols", "5", "--iters", "3"])
            .expect("parses");
        assert_eq!((b.rows, b.cols, b.iters), (7, 5, 3));
    }

    #[test]
    fn given_bad_shapes_then_validate_names_the_option() {
        assert!(args(4, 3).validate(4).is_ok());
        let e = args(3, 10).validate(4).expect_err("too few rows");
        assert!(e.to_string().contains("--rows 3"), "{e}");
        let e = args(10, 2).validate(1).expect_err("too few cols");
        assert!(e.to_string().contains("--cols 2"), "{e}");
        assert!(args(0, 3).validate(0).is_err());
        let e = args(1 << 16, 1 << 16).validate(1).expect_err("too large");
        assert!(matches!(e, ArgsError::TooLarge { .. }));
    }

    #[test]
    fn given_outer_struct_then_args_flatten() {
        #[derive(Parser, Debug)]
        struct Outer {
            #[command(flatten)]
            heat: Args,
            #[arg(long)]
            extra: bool,
        }
        let o = Outer::try_parse_from(["x", "--rows", "9", "--extra"]).expect("parses");
        assert_eq!(o.heat.rows, 9);
        assert!(o.extra);
    }

    #[test]
    fn given_every_k_then_progress_reports_rate_on_multiples_only() {
        let t0 = Instant::now();
        let mut p = Progress::new(10, 100, t0);
        assert!(p.tick(5).is_none());
        let line = p.line(10, t0 + Duration::from_secs(2));
        assert_eq!(line, "heat2d: iteration 10/100 5.0 it/s");
        let line = p.line(20, t0 + Duration::from_secs(3));
        assert_eq!(line, "heat2d: iteration 20/100 10.0 it/s");
        assert!(Progress::new(0, 100, t0).tick(10).is_none());
    }
}
