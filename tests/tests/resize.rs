//! Malleable jobs (docs/malleability.md): heat2d grows and shrinks at iteration boundaries
//! and ends with exactly the checksum of heat2d-plain run with the same arguments, which
//! does not depend on the number of ranks. Resizes are scripted with `PCM_SCHEDULE`
//! (`ITER:size=M`); refused ones leave the job running at its width, unchanged.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::time::Duration;

use mpi_ios_tests::{mpi_lock, MpiJob, Report};

/// Far from the grid's fixed point (the plain run's `last_change` is checked).
const ARGS: &[&str] = &["--rows", "90", "--cols", "48", "--iters", "120"];
const DEADLINE: Duration = Duration::from_secs(90);

fn plain() -> Report {
    MpiJob::new(2, "heat2d-plain", ARGS)
        .env("PCM_DAEMON", "none")
        .run(DEADLINE)
        .report()
}

/// heat2d from `ranks` ranks with `schedule`: its report and its standard error.
fn resized(ranks: usize, schedule: &str) -> (Report, String) {
    let finished = MpiJob::new(ranks, "heat2d", ARGS)
        .env("PCM_DAEMON", "none")
        .env("PCM_SCHEDULE", schedule)
        .run(DEADLINE);
    (finished.report(), finished.stderr.clone())
}

/// Runs heat2d from `ranks` ranks through `schedule` and checks the plain checksum, the
/// number of resizes and the final width.
fn assert_resized(ranks: usize, schedule: &str, resizes: u64, final_ranks: usize) -> String {
    let _lock = mpi_lock();
    let reference = plain();
    let (report, stderr) = resized(ranks, schedule);
    assert_eq!(
        report.checksum,
        reference.reference_checksum(),
        "checksum differs after PCM_SCHEDULE={schedule}\n{stderr}"
    );
    assert_eq!(
        report.resizes,
        Some(resizes),
        "PCM_SCHEDULE={schedule}\n{stderr}"
    );
    assert_eq!(report.ranks, final_ranks, "PCM_SCHEDULE={schedule}");
    assert_eq!(report.hosts.map(|h| h.len()), Some(final_ranks));
    assert_eq!(report.iterations, reference.iterations);
    stderr
}

#[test]
fn given_a_grow_from_2_to_3_then_the_checksum_is_plain() {
    assert_resized(2, "40:size=3", 1, 3);
}

#[test]
fn given_a_grow_from_2_to_4_then_the_checksum_is_plain() {
    assert_resized(2, "40:size=4", 1, 4);
}

#[test]
fn given_a_grow_from_1_to_4_then_the_checksum_is_plain() {
    assert_resized(1, "10:size=4", 1, 4);
}

#[test]
fn given_a_shrink_from_4_to_2_then_the_checksum_is_plain() {
    assert_resized(4, "30:size=2", 1, 2);
}

#[test]
fn given_a_shrink_from_3_to_2_then_the_checksum_is_plain() {
    assert_resized(3, "70:size=2", 1, 2);
}

/// The observable contract's sequence, and ten resizes in one run, down to one rank and
/// back.
#[test]
fn given_ten_resizes_in_one_run_then_the_checksum_is_plain() {
    assert_resized(2, "20:size=3,50:size=4,80:size=2", 3, 2);
    assert_resized(
        2,
        "5:size=3,10:size=1,20:size=4,30:size=2,40:size=5,50:size=3,60:size=1,70:size=2,80:size=4,90:size=3",
        10,
        3,
    );
}

/// A move and a resize at one check are one reconfiguration: one spawn carries the
/// replacement and the added process.
#[test]
fn given_a_resize_and_a_migration_at_one_check_then_one_reconfiguration_does_both() {
    let stderr = assert_resized(3, "40:1+size=4", 1, 4);
    let reconfigured = stderr.matches("reconfigured in").count();
    assert_eq!(reconfigured, 1, "{stderr}");
    assert!(
        stderr.contains("resize from 3 to 4 ranks: moving rank 1"),
        "{stderr}"
    );
}

/// Refused resizes: each is named with its reason, and the job ends at its width with the
/// plain checksum.
#[test]
fn given_resizes_the_job_cannot_take_then_each_is_refused_and_the_job_runs_on() {
    for (schedule, reason) in [
        ("40:size=0", "a job cannot run with 0 ranks"),
        ("40:size=91", "91 ranks is above the job's maximum of 90"),
        (
            "40:size=3@nosuch",
            "host nosuch is not in the job's allocation",
        ),
        ("40:size=1@nosuch", "no rank of the job runs on nosuch"),
    ] {
        let stderr = assert_resized(2, schedule, 0, 2);
        assert!(
            stderr.contains("ignoring scheduled (PCM_SCHEDULE)") && stderr.contains(reason),
            "PCM_SCHEDULE={schedule}: {stderr}"
        );
    }
}

/// A job that never declared itself malleable refuses a resize with a clear reason and runs
/// on unchanged (the CG example is not malleable).
#[test]
fn given_a_job_that_is_not_malleable_then_a_resize_is_refused_and_it_runs_on() {
    let _lock = mpi_lock();
    let args = &["200", "30"];
    let plain = MpiJob::new(2, "cg-plain", args).run(DEADLINE).report();
    let finished = MpiJob::new(2, "cg", args)
        .env("PCM_DAEMON", "none")
        .env("PCM_SCHEDULE", "10:size=3")
        .run(DEADLINE);
    let report = finished.report();
    assert_eq!(report.checksum, plain.checksum);
    assert_eq!(report.ranks, 2);
    assert!(
        finished.stderr.contains("the job is not malleable"),
        "{}",
        finished.stderr
    );
}

/// Limits a job declared: below its minimum and breaking its rule are refused, each named,
/// and a width within both is carried out (pcm-resize, malleable from 2 to 8 ranks in
/// multiples of 2, checks every row of its array after each reconfiguration).
#[test]
fn given_resizes_below_the_minimum_or_breaking_the_rule_then_they_are_refused_and_a_good_one_runs()
{
    let _lock = mpi_lock();
    let finished = MpiJob::new(
        2,
        "pcm-resize",
        &[
            "--mb",
            "1",
            "--iters",
            "40",
            "--min",
            "2",
            "--max",
            "8",
            "--multiple-of",
            "2",
        ],
    )
    .env("PCM_DAEMON", "none")
    .env("PCM_SCHEDULE", "10:size=1,20:size=3,30:size=4")
    .run(DEADLINE);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    for reason in [
        "1 ranks is below the job's minimum of 2",
        "3 ranks breaks the job's rule: the width must be a multiple of 2",
        "resize from 2 to 4 ranks",
    ] {
        assert!(
            finished.stderr.contains(reason),
            "{reason:?} missing:\n{}",
            finished.stderr
        );
    }
}
