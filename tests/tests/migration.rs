//! The correctness oracle for migration: a heat2d run with migrations ends with exactly the
//! checksum of heat2d-plain run with the same arguments.
//!
//! Migrations are scripted with `PCM_SCHEDULE` so that they happen at chosen iterations;
//! the mechanism is the same as for requests from a daemon (see `daemon.rs` for those).

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::time::Duration;

use mpi_ios_tests::{mpi_lock, MpiJob, Report};

const ARGS: &[&str] = &["--rows", "90", "--cols", "48", "--iters", "120"];
const DEADLINE: Duration = Duration::from_secs(90);

fn plain(ranks: usize) -> Report {
    MpiJob::new(ranks, "heat2d-plain", ARGS)
        .run(DEADLINE)
        .report()
}

fn with_schedule(ranks: usize, schedule: &str) -> Report {
    MpiJob::new(ranks, "heat2d", ARGS)
        .env("PCM_SCHEDULE", schedule)
        .run(DEADLINE)
        .report()
}

fn assert_same_result(ranks: usize, schedule: &str, migrations: u64) {
    let _lock = mpi_lock();
    let reference = plain(ranks);
    let migrated = with_schedule(ranks, schedule);
    assert_eq!(
        migrated.checksum, reference.checksum,
        "checksum differs after PCM_SCHEDULE={schedule}"
    );
    assert_eq!(
        migrated.migrations,
        Some(migrations),
        "PCM_SCHEDULE={schedule}"
    );
    assert_eq!(migrated.iterations, reference.iterations);
    assert_eq!(migrated.ranks, ranks);
}

#[test]
fn given_no_migration_then_instrumented_equals_plain() {
    assert_same_result(3, "", 0);
}

#[test]
fn given_rank_0_migrates_then_checksum_equals_plain() {
    assert_same_result(3, "40:0", 1);
}

#[test]
fn given_a_middle_rank_migrates_then_checksum_equals_plain() {
    assert_same_result(3, "40:1", 1);
}

#[test]
fn given_the_last_rank_migrates_then_checksum_equals_plain() {
    assert_same_result(3, "40:2", 1);
}

#[test]
fn given_migration_at_the_first_iteration_then_checksum_equals_plain() {
    assert_same_result(3, "0:1", 1);
}

#[test]
fn given_migration_at_the_last_iteration_then_checksum_equals_plain() {
    assert_same_result(3, "119:2", 1);
}

#[test]
fn given_two_ranks_in_one_reconfiguration_then_checksum_equals_plain() {
    assert_same_result(4, "50:0+3", 1);
}

#[test]
fn given_twenty_migrations_in_one_run_then_checksum_equals_plain() {
    // Every rank moves several times, rank 0 included, replacements of replacements too.
    let schedule: Vec<String> = (0..20)
        .map(|i| format!("{}:{}", 5 + i * 5, i % 3))
        .collect();
    assert_same_result(3, &schedule.join(","), 20);
}

#[test]
fn given_one_rank_then_it_can_migrate_too() {
    assert_same_result(1, "10:0", 1);
}

#[test]
fn given_a_request_for_a_missing_rank_then_it_is_refused_and_the_run_is_unchanged() {
    let _lock = mpi_lock();
    let reference = plain(3);
    let finished = MpiJob::new(3, "heat2d", ARGS)
        .env("PCM_SCHEDULE", "30:7")
        .run(DEADLINE);
    let report = finished.report();
    assert_eq!(report.checksum, reference.checksum);
    assert_eq!(report.migrations, Some(0));
    assert!(
        finished
            .stderr
            .contains("rank 7 does not exist: the job has 3 ranks (0-2)"),
        "{}",
        finished.stderr
    );
}

#[test]
fn given_a_malformed_schedule_then_every_rank_fails_clearly_without_hanging() {
    let _lock = mpi_lock();
    let finished = MpiJob::new(2, "heat2d", ARGS)
        .env("PCM_SCHEDULE", "30:one")
        .run(DEADLINE);
    assert_ne!(finished.code, Some(0));
    assert!(
        finished
            .stderr
            .contains("invalid PCM_SCHEDULE=\"30:one\": \"one\" is not a rank number"),
        "{}",
        finished.stderr
    );
}
