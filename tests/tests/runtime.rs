//! The MPI runtime: the reports name the library in use, a program refuses to start on
//! another MPI library than the one it was built against, and a departed process leaves as
//! promptly as its runtime allows (at once on MPICH; at the end of its launch on Open MPI 4).
//!
//! Runs on the runtime the binaries were built for ([`Runtime::current`]); `scripts/test.sh`
//! runs it on both.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mpi_ios_tests::{
    heat2d_args_for, mpi_lock, program, read_events, wait_until, MpiJob, Runtime, RuntimeExt as _,
};
use pcm_proto::run::RunEvent;

const SHORT: &[&str] = &["--rows", "90", "--cols", "48", "--iters", "120"];
/// How long the test watches after the move; the contract is one second.
const WATCH: Duration = Duration::from_millis(1500);
const DEADLINE: Duration = Duration::from_secs(120);
/// Environment variable that marks the processes of one test's job (replacements inherit
/// it), so that heat2d processes of other jobs on the machine are not counted.
const TAG: &str = "MPI_IOS_TEST_TAG";

fn expected_prefix() -> &'static str {
    match Runtime::current() {
        Runtime::OpenMpi => "Open MPI v4.",
        Runtime::Mpich => "MPICH Version:",
    }
}

#[test]
fn given_a_run_then_both_reports_name_the_mpi_library_in_use() {
    let _lock = mpi_lock();
    for program in ["heat2d-plain", "heat2d"] {
        let finished = MpiJob::new(2, program, SHORT).run(DEADLINE);
        let library = finished.mpi_library();
        assert!(
            library.starts_with(expected_prefix()),
            "{program} reported mpi_library {library:?} on {:?}",
            Runtime::current()
        );
        assert!(!library.contains('\n'), "{library:?}");
    }
}

#[test]
fn given_the_built_binaries_then_the_loader_finds_their_runtimes_library_and_no_other() {
    let output = Command::new("ldd").arg(program("heat2d")).output().unwrap();
    let libraries = String::from_utf8_lossy(&output.stdout);
    let (wanted, unwanted) = match Runtime::current() {
        Runtime::OpenMpi => ("libmpi.so.40 => /", "libmpi.so.12"),
        // Found through the rpath setup.sh adds: rsmpi drops the one `mpicc -show` prints.
        Runtime::Mpich => ("libmpi.so.12 => ", "libmpi.so.40"),
    };
    let line = libraries
        .lines()
        .find(|l| l.trim_start().starts_with(wanted))
        .unwrap_or_else(|| panic!("heat2d does not load {wanted}...:\n{libraries}"));
    assert!(!libraries.contains(unwanted), "{libraries}");
    assert!(!libraries.contains("not found"), "{libraries}");
    if Runtime::current() == Runtime::Mpich {
        let venv = Runtime::mpich_prefix().canonicalize().unwrap();
        assert!(
            line.contains(&venv.join("lib").display().to_string()),
            "libmpi.so.12 not from {}: {line}",
            venv.display()
        );
    }
}

/// Builds a library that answers `MPI_Get_library_version` like another MPI would, to be
/// preloaded in front of the real one.
fn impostor_library(dir: &Path) -> std::path::PathBuf {
    let source = dir.join("impostor.c");
    std::fs::write(
        &source,
        "#include <string.h>\n\
         int MPI_Get_library_version(char *version, int *len) {\n\
           strcpy(version, \"Open MPI v9.9.9, package: impostor\");\n\
           *len = (int) strlen(version);\n\
           return 0;\n\
         }\n",
    )
    .unwrap();
    let library = dir.join("libimpostor.so");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .unwrap();
    assert!(status.success(), "cc could not build the impostor library");
    library
}

#[test]
fn given_another_mpi_library_loaded_then_both_programs_refuse_to_start_and_name_both() {
    let dir = tempfile::tempdir().unwrap();
    let impostor = impostor_library(dir.path());
    for program in ["heat2d-plain", "heat2d"] {
        // The check runs before MPI_Init, so no launcher is needed to reach it.
        let output = Command::new(mpi_ios_tests::program(program))
            .args(SHORT)
            .env("LD_PRELOAD", &impostor)
            .env("PCM_DAEMON", "none")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{program} started: {stderr}");
        let built_for = match Runtime::current() {
            Runtime::OpenMpi => "built for Open MPI 4.",
            Runtime::Mpich => "built for MPICH 5.0.2",
        };
        assert!(
            stderr.contains(built_for) && stderr.contains("Open MPI v9.9.9, package: impostor"),
            "{program}: {stderr}"
        );
    }
}

/// Live (not zombie) heat2d processes on this machine that carry `TAG=tag`.
fn tagged_processes(tag: &str) -> BTreeSet<u32> {
    let wanted = format!("{TAG}={tag}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| Some((e.file_name().to_string_lossy().parse::<u32>().ok()?, e)))
        .filter(|(_, e)| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // "PID (comm) STATE ...": heat2d, not a zombie.
            stat.contains("(heat2d) ") && !stat.contains(") Z ")
        })
        .filter(|(_, e)| {
            std::fs::read(e.path().join("environ"))
                .unwrap_or_default()
                .split(|&b| b == 0)
                .any(|var| var == wanted.as_bytes())
        })
        .map(|(pid, _)| pid)
        .collect()
}

#[test]
fn given_a_rank_moved_early_then_its_old_process_leaves_as_the_runtime_allows() {
    let _lock = mpi_lock();
    let ranks = 3;
    // About 5 s of heat2d, the move half a second in: the job must still run well after the
    // move for the count of processes to mean anything, however fast the machine (a fixed
    // 40,000 iterations, moved at 2,000, could move before the ranks were counted, or end
    // within the watch, on a machine a few times faster than this one).
    let (long, rate) = heat2d_args_for(ranks, 400, 400, 5.0, DEADLINE);
    let long: Vec<&str> = long.iter().map(String::as_str).collect();
    let move_at = ((rate * 0.5) as u64).max(2000);
    let reference = MpiJob::new(ranks, "heat2d-plain", &long)
        .run(DEADLINE)
        .report();
    let tag = format!("departure-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let mut group = MpiJob::new(ranks, "heat2d", &long)
        .env("PCM_SCHEDULE", format!("{move_at}:1"))
        .env(TAG, tag.clone())
        .env("PCM_EVENTS", events.display().to_string())
        .start(dir.path(), "job");
    // The moving rank's store of its state is the first sign of the move.
    let move_begun = || {
        read_events(&events)
            .iter()
            .any(|e| matches!(e.event, RunEvent::Stored { .. } | RunEvent::Migrated { .. }))
    };
    wait_until(Duration::from_secs(60), "the ranks to start", || {
        tagged_processes(&tag).len() == ranks || move_begun()
    });
    let originals = tagged_processes(&tag);
    assert!(
        !move_begun() && originals.len() == ranks,
        "the move came before the ranks could be counted: move later"
    );
    // Rank 0 reports the migration once the new world exists: the departing process is past
    // the split.
    wait_until(Duration::from_secs(60), "the move", || {
        read_events(&events).iter().any(|e| {
            matches!(
                e.event,
                RunEvent::Migrated { iteration, .. } if iteration == move_at
            )
        })
    });
    let moved = Instant::now();
    let mut back_after = None;
    while moved.elapsed() < WATCH {
        if tagged_processes(&tag).len() == ranks {
            back_after = Some(moved.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Still running, so that the count is not the end of the job.
    let running = group.running();
    let now = tagged_processes(&tag);
    assert!(
        running,
        "the run ended within {WATCH:?} of the move: too short to tell (size the run longer)"
    );
    let replacements = now.difference(&originals).count();
    let gone = originals.difference(&now).count();
    match Runtime::current() {
        Runtime::Mpich => {
            let back_after = back_after
                .unwrap_or_else(|| panic!("still {} heat2d processes {WATCH:?} after the move", now.len()));
            assert!(
                back_after <= Duration::from_secs(1),
                "{ranks} heat2d processes only {back_after:?} after the move"
            );
            assert_eq!((replacements, gone), (1, 1), "{originals:?} became {now:?}");
            eprintln!("back to {ranks} heat2d processes {back_after:?} after the move");
        }
        // Open MPI 4 finalizes a process only with the rest of its launch: the departed
        // process waits, asleep, for the end of the job (docs/architecture.md).
        Runtime::OpenMpi => assert_eq!(
            (back_after, replacements, gone),
            (None, 1, 0),
            "the departed process should wait for its launch on Open MPI 4: {originals:?} became {now:?}"
        ),
    }
    let report = group.wait(DEADLINE).report();
    assert_eq!(report.checksum, reference.reference_checksum());
    assert_eq!(report.migrations, Some(1));
}
