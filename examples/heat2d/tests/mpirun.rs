//! Runs `heat2d-plain` under `mpirun` on 1, 2 and 3 ranks: same checksum, required report fields,
//! clear failure on bad options. Every run has a hard timeout and is killed (its own process
//! group only) if it overruns.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use heat2d::{hash_grid, Block};
use mpi_ios_tests::{Finished, MpiJob};
use pcm::events::RunEvent;

/// Hard limit for one mpirun.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The machine has 2 shared cores: one mpirun at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `heat2d-plain <args>` on `np` ranks with the project's launcher for the runtime it
/// was built for, panicking on timeout (after killing its process group).
fn mpirun(np: usize, args: &[&str]) -> Finished {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let program = Path::new(env!("CARGO_BIN_EXE_heat2d-plain"));
    MpiJob::of(np, program, &args)
        .run_within(TIMEOUT)
        .unwrap_or_else(|e| panic!("mpirun -np {np} {args:?}: {e}"))
}

/// The report line: the last non-empty stdout line, as JSON.
fn report(o: &Finished) -> serde_json::Value {
    assert_eq!(o.code, Some(0), "stderr:\n{}", o.stderr);
    let last = o.stdout.lines().rev().find(|l| !l.trim().is_empty());
    let last = last.unwrap_or_else(|| panic!("no stdout; stderr:\n{}", o.stderr));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line {last:?} is not JSON: {e}"))
}

/// The checksum a single in-process block gives (no MPI).
fn serial_checksum(rows: usize, cols: usize, iters: u64) -> String {
    let mut block = Block::new(rows, cols, 0, 1).expect("valid");
    for _ in 0..iters {
        block.relax();
    }
    hash_grid(block.owned())
}

#[test]
fn given_1_2_3_ranks_then_checksums_are_identical_and_reports_complete() {
    let (rows, cols, iters) = (13, 11, 40);
    let expected = serial_checksum(rows, cols, iters);
    let args = ["--rows", "13", "--cols", "11", "--iters", "40"];
    for np in 1..=3 {
        let r = report(&mpirun(np, &args));
        let checksum = r["checksum"].as_str().expect("checksum is a string");
        assert_eq!(checksum.len(), 64);
        assert!(checksum.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(checksum, expected, "np={np}: report {r}");
        assert_eq!(r["iterations"], 40, "{r}");
        assert_eq!(r["ranks"], np, "{r}");
        assert_eq!(r["rows"], rows, "{r}");
        assert_eq!(r["cols"], cols, "{r}");
        assert!(r["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{r}");
        assert!(r.get("migrations").is_none(), "{r}");
    }
}

#[test]
fn given_blocks_of_one_and_two_rows_then_checksum_matches_serial() {
    // 4 rows on 3 ranks: blocks of 2, 1, 1 rows (the overlapped step's edge cases).
    let expected = serial_checksum(4, 7, 25);
    for np in [2, 3] {
        let r = report(&mpirun(
            np,
            &["--rows", "4", "--cols", "7", "--iters", "25"],
        ));
        assert_eq!(
            r["checksum"].as_str(),
            Some(expected.as_str()),
            "np={np}: {r}"
        );
    }
}

/// With `PCM_EVENTS`, both binaries write the loop start and the progress as typed events
/// (heat2d-plain through `pcm::events`, heat2d through PCM), timestamped, in order.
#[test]
fn given_pcm_events_then_both_binaries_write_loop_start_and_progress() {
    let dir = tempfile::tempdir().expect("temporary directory");
    for (name, program) in [
        ("heat2d-plain", env!("CARGO_BIN_EXE_heat2d-plain")),
        ("heat2d", env!("CARGO_BIN_EXE_heat2d")),
    ] {
        let path = dir.path().join(format!("{name}.jsonl"));
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let args: Vec<String> = ["--rows", "64", "--cols", "64", "--iters", "300"]
            .map(str::to_owned)
            .to_vec();
        let o = MpiJob::of(2, Path::new(program), &args)
            .env("PCM_EVENTS", path.display().to_string())
            .env("PCM_PROGRESS_PERIOD", "0.001")
            .run_within(TIMEOUT)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(report(&o)["iterations"], 300, "{name}");
        let events = mpi_ios_tests::read_events(&path);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(events.len(), text.lines().count(), "{name}: {text}");
        // Rank 0's loop start and progress, in time order, iterations never going back.
        let progress: Vec<(f64, u64)> = events
            .iter()
            .filter_map(|e| match e.event {
                RunEvent::LoopStarted { iteration } | RunEvent::Progress { iteration } => {
                    assert_eq!(e.rank.map(|r| r.0), Some(0), "{name}: {e:?}");
                    Some((e.time(), iteration))
                }
                _ => None,
            })
            .collect();
        let starts = events
            .iter()
            .filter(|e| matches!(e.event, RunEvent::LoopStarted { iteration: 0 }))
            .count();
        assert_eq!(starts, 1, "{name}: {text}");
        assert!(progress.len() >= 2, "{name}: no progress event\n{text}");
        assert!(
            progress
                .windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1 && w[1].1 <= 300),
            "{name}: {progress:?}"
        );
        if name == "heat2d" {
            // PCM also reports each process's start and exit.
            for kind in ["started", "exited"] {
                let n = events
                    .iter()
                    .filter(|e| match e.event {
                        RunEvent::Started { .. } => kind == "started",
                        RunEvent::Exited { code: 0, .. } => kind == "exited",
                        _ => false,
                    })
                    .count();
                assert_eq!(n, 2, "{name}: {kind} events\n{text}");
            }
        }
    }
}

#[test]
fn given_report_every_then_progress_goes_to_stderr_and_report_stays_last() {
    let o = mpirun(
        2,
        &[
            "--rows",
            "8",
            "--cols",
            "6",
            "--iters",
            "20",
            "--report-every",
            "5",
        ],
    );
    let r = report(&o);
    assert_eq!(
        r["checksum"].as_str(),
        Some(serial_checksum(8, 6, 20).as_str())
    );
    let progress = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("heat2d: iteration"))
        .count();
    assert_eq!(progress, 4, "stderr:\n{}", o.stderr);
    assert_eq!(o.stdout.lines().count(), 1, "stdout:\n{}", o.stdout);
}

#[test]
fn given_fewer_rows_than_ranks_then_every_rank_exits_nonzero_naming_rows() {
    let start = Instant::now();
    let o = mpirun(3, &["--rows", "2", "--cols", "8", "--iters", "5"]);
    assert_ne!(o.code, Some(0));
    assert!(o.stderr.contains("--rows 2"), "stderr:\n{}", o.stderr);
    assert_eq!(
        o.stderr.matches("heat2d-plain: --rows").count(),
        1,
        "{}",
        o.stderr
    );
    assert!(o.stdout.trim().is_empty(), "stdout:\n{}", o.stdout);
    assert!(start.elapsed() < TIMEOUT);
}

#[test]
fn given_unknown_option_then_exits_nonzero_without_hanging() {
    let o = mpirun(2, &["--rowz", "4"]);
    assert_ne!(o.code, Some(0));
    assert!(o.stderr.contains("--rowz"), "stderr:\n{}", o.stderr);
}
