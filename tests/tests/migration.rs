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
        migrated.checksum,
        reference.reference_checksum(),
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
    assert_eq!(report.checksum, reference.reference_checksum());
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

/// The processes that hold a PCM shared array whose memfd name contains `marker`, by a
/// descriptor or a mapping (a memfd has no directory entry: these are all that keep it).
fn segment_holders(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let mapped = std::fs::read_to_string(dir.join("maps")).is_ok_and(|m| m.contains(marker));
        let open = std::fs::read_dir(dir.join("fd")).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| target.to_string_lossy().contains(marker))
            })
        });
        if mapped || open {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    pids
}

/// pcm-state keeps its state in a PCM shared array (`--shared`); ranks 1 and 2 move within
/// the host. Each replacement takes the departing rank's pages over (the departing side
/// logs every byte as handed over, none sent) and finds them bit-exact (pcm-state checks
/// its checksum after loading and at the end, and aborts the job otherwise); the departed
/// process lets go of its segment at once (only the three ranks hold one each), and no
/// segment outlives the job.
#[test]
fn given_a_shared_array_then_a_same_host_move_hands_its_pages_over_and_nothing_outlives_the_job() {
    let _lock = mpi_lock();
    let marker = "memfd:pcm-array:pcm-state-";
    assert_eq!(
        segment_holders(marker),
        Vec::<u32>::new(),
        "left over before the test"
    );
    let shm_before: Vec<_> = std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let args = [
        "--state-mb",
        "8",
        "--iters",
        "300",
        "--shared",
        "--sleep-us",
        "10000",
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut group = MpiJob::new(3, "pcm-state", &args)
        .env("PCM_SCHEDULE", "20:1,40:2")
        .env("RUST_LOG", "warn,pcm::timing=debug")
        .start(dir.path(), "pcm-state");
    let loaded = |g: &mpi_ios_tests::Group| {
        std::fs::read_to_string(&g.stdout)
            .unwrap_or_default()
            .matches("\"event\":\"loaded\"")
            .count()
    };
    let deadline = std::time::Instant::now() + DEADLINE;
    while loaded(&group) < 2 && group.running() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(loaded(&group), 2, "{}", group.stderr_so_far());
    // Both moves are over: within a few seconds, only the three ranks hold a segment.
    let settle = std::time::Instant::now() + Duration::from_secs(5);
    let mut holders = segment_holders(marker);
    while holders.len() != 3 && std::time::Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(20));
        holders = segment_holders(marker);
    }
    assert!(
        group.running(),
        "the job ended before the check: make it longer"
    );
    assert_eq!(holders.len(), 3, "processes holding a segment: {holders:?}");
    let finished = group.wait(DEADLINE);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert!(finished.stdout.contains("\"event\":\"done\""));
    assert_eq!(
        finished.stdout.matches("\"verified\":true").count(),
        2,
        "{}",
        finished.stdout
    );
    let state_bytes = 8 << 20;
    assert_eq!(
        finished
            .stderr
            .matches(&format!("\"handed_over\":{state_bytes}"))
            .count(),
        2,
        "both moves hand the array over:\n{}",
        finished.stderr
    );
    assert_eq!(
        segment_holders(marker),
        Vec::<u32>::new(),
        "outlived the job"
    );
    let shm_after: Vec<_> = std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let new: Vec<_> = shm_after
        .iter()
        .filter(|n| !shm_before.contains(n) && n.to_string_lossy().contains("pcm"))
        .collect();
    assert!(new.is_empty(), "left in /dev/shm: {new:?}");
}

/// heat2d's 64 x 64 grid reaches its bit-exact fixed point at iteration 26,466
/// (docs/results-log.md): from there every run ends with the same checksum, one that skipped
/// thousands of iterations too, so the plain run's report refuses to serve as a reference.
#[test]
fn given_a_plain_run_past_its_grids_fixed_point_then_comparing_with_it_is_refused() {
    let _lock = mpi_lock();
    let run = |iters: &str| {
        MpiJob::new(
            2,
            "heat2d-plain",
            &["--rows", "64", "--cols", "64", "--iters", iters],
        )
        .run(DEADLINE)
        .report()
    };
    let (changing, settled, wrong) = (run("20000"), run("40000"), run("30000"));
    assert_eq!(changing.settled(), None, "{changing:?}");
    assert_eq!(changing.last_change, Some(20_000));
    // The run that computed 10,000 iterations fewer ends with the same grid.
    assert_eq!(wrong.checksum, settled.checksum);
    let why = settled.settled().expect("a settled run is refused");
    assert!(
        why.contains("stopped changing at iteration 264") && why.contains("of 40000"),
        "{why}"
    );
}

/// The numbers `world-helper` prints, after the colon of its result line (tests/programs: a helper that takes
/// `SimpleCommunicator::world()`, rsmpi's MPI_COMM_WORLD, itself), after checking that it
/// ended well within `DEADLINE`: a call on the launch's world that waited for a departed
/// process would hang until then.
fn world_helper(args: &[&str], schedule: &str) -> String {
    let job = MpiJob::new(3, "world-helper", args).env("PCM_SCHEDULE", schedule);
    let finished = job.run(DEADLINE);
    assert_eq!(
        finished.code,
        Some(0),
        "{} failed\n--- stdout\n{}\n--- stderr\n{}",
        job.what(),
        finished.stdout,
        finished.stderr
    );
    let line = finished.stdout.lines().find(|l| l.starts_with("result "));
    let line = line.unwrap_or_else(|| panic!("no result line\n{}", finished.stdout));
    assert!(line.starts_with("result ranks 3 "), "{line}");
    let values = line.split_once(':').map_or(line, |(_, values)| values);
    values.trim().to_owned()
}

#[test]
fn given_a_helper_on_mpi_comm_world_when_every_rank_moves_then_the_result_equals_plain() {
    let _lock = mpi_lock();
    let reference = world_helper(&["100", "--plain"], "");
    // The numbers depend on every step: one step fewer changes them.
    assert_ne!(world_helper(&["99", "--plain"], ""), reference);
    // Every rank of 3 moves at least once, the last time all at once.
    for schedule in ["", "15:1,30:0+2,50:0+1+2"] {
        assert_eq!(
            world_helper(&["100"], schedule),
            reference,
            "PCM_SCHEDULE={schedule}"
        );
    }
}
