//! Deterministic reductions: `cg` (conjugate gradient, two `f64` sum all-reduces per
//! iteration) ends, with or without moves, with exactly the checksum of `cg-plain` at the
//! same rank count. Unlike heat2d's, cg's result depends on the order in which the MPI
//! library adds the ranks' partial sums, so this fails if PCM's communicator, before or
//! after a reconfiguration, reduces in another order than the plain program's
//! MPI_COMM_WORLD (docs/architecture.md, "Reductions").
//!
//! On MPICH the plain run has `MPIR_CVAR_DEVICE_COLLECTIVES=none`, the setting PCM applies
//! to its own processes: with MPICH's default, its shared-memory collectives, the plain
//! program's sums cannot be reproduced once a replacement from another launch has joined.
//! Open MPI 4 ignores the variable and needs none.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::time::Duration;

use mpi_ios_tests::{mpi_lock, Finished, MpiJob};
use serde::Deserialize;

/// Grid side and iterations: about 1 s of work per run at 4 ranks on two cores, and far
/// from converged (the residual is checked), so every iteration still changes `x`.
const ARGS: &[&str] = &["48", "120"];
/// The iteration at which the moves happen.
const MOVE_AT: u64 = 40;
const DEADLINE: Duration = Duration::from_secs(90);
/// The setting PCM applies on MPICH (`pcm::deterministic_reductions_env`), given to the
/// plain run too.
const DEVICE_COLLECTIVES: (&str, &str) = ("MPIR_CVAR_DEVICE_COLLECTIVES", "none");

/// The fields of cg's report the test reads.
#[derive(Debug, Deserialize)]
struct CgReport {
    checksum: String,
    residual: f64,
    iterations: u64,
    ranks: usize,
    migrations: Option<u64>,
}

fn report(run: &Finished) -> CgReport {
    assert_eq!(
        run.code,
        Some(0),
        "run failed\n--- stdout\n{}\n--- stderr\n{}",
        run.stdout,
        run.stderr
    );
    let last = run.stdout.lines().rev().find(|l| !l.trim().is_empty());
    serde_json::from_str(last.unwrap_or(""))
        .unwrap_or_else(|e| panic!("last stdout line is not cg's report ({e}): {last:?}"))
}

/// Whether rank 0's start-up log promises bit-identical reductions, with no warning.
fn promised(stderr: &str) -> bool {
    stderr.contains("reductions: ") && !stderr.contains("WARN")
}

/// The schedules of one reconfiguration that moves one rank, two ranks and all ranks.
fn schedules(ranks: usize) -> Vec<String> {
    let last = ranks - 1;
    let all: Vec<String> = (0..ranks).map(|r| r.to_string()).collect();
    let mut schedules = vec![
        format!("{MOVE_AT}:{last}"),
        format!("{MOVE_AT}:0+{last}"),
        format!("{MOVE_AT}:{}", all.join("+")),
    ];
    schedules.dedup();
    schedules
}

/// Plain, then PCM without moves and with each of [`schedules`]; every checksum must be
/// the plain one. All cases run before the verdict, which names every mismatch.
fn assert_reductions_match(ranks: usize) {
    let _lock = mpi_lock();
    let plain = MpiJob::new(ranks, "cg-plain", ARGS)
        .env(DEVICE_COLLECTIVES.0, DEVICE_COLLECTIVES.1)
        .run(DEADLINE);
    let plain = report(&plain);
    assert!(
        plain.residual.is_normal() && plain.residual > 1e-6,
        "the plain run converged (residual {}): a comparison there could not fail",
        plain.residual
    );
    assert_eq!((plain.ranks, plain.iterations), (ranks, 120));

    let mut mismatches = Vec::new();
    let cases = std::iter::once(String::new()).chain(schedules(ranks));
    for schedule in cases {
        let run = MpiJob::new(ranks, "cg", ARGS)
            .env("PCM_DAEMON", "none")
            .env("PCM_SCHEDULE", schedule.as_str())
            .run(DEADLINE);
        let moved = report(&run);
        let expected = u64::from(!schedule.is_empty());
        assert_eq!(moved.migrations, Some(expected), "PCM_SCHEDULE={schedule}");
        if schedule.is_empty() && !promised(&run.stderr) {
            // Rank 0's start-up log says what the job's reductions promise.
            mismatches.push(format!(
                "no promise about reductions in the start-up log, or a warning:\n{}",
                run.stderr
            ));
        }
        if moved.checksum != plain.checksum {
            mismatches.push(format!(
                "PCM_SCHEDULE={schedule:?}: {} (residual {:e})",
                moved.checksum, moved.residual
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{ranks} ranks: cg-plain gave {} (residual {:e}); cg differs:\n{}",
        plain.checksum,
        plain.residual,
        mismatches.join("\n")
    );
}

#[test]
fn given_2_ranks_then_cg_with_moves_of_one_and_all_ranks_equals_plain() {
    assert_reductions_match(2);
}

#[test]
fn given_3_ranks_then_cg_with_moves_of_one_two_and_all_ranks_equals_plain() {
    assert_reductions_match(3);
}

#[test]
fn given_4_ranks_then_cg_with_moves_of_one_two_and_all_ranks_equals_plain() {
    assert_reductions_match(4);
}
