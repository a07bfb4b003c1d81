//! A replacement that stalls or dies while starting does not hang the job (issue 10, item 7).
//!
//! The test watches the job's process tree, and the moment the replacement process appears
//! it stops it (SIGSTOP: a replacement stuck in start-up) or kills it (SIGKILL). Nothing in
//! PCM knows about the fault: production code has no test hooks. The job is sized to run for
//! hours, so it can only end in time because of what PCM or the runtime did about the fault.
//!
//! Expected: a stalled replacement makes PCM's reconfiguration watchdog end the job after
//! `PCM_RECONFIGURE_TIMEOUT` with exit status 75, naming the migration, the rank, the host
//! and the phase (and, for a pcmd request, the requester gets a failed outcome with that
//! reason); a killed one ends the job too, through the runtime or the watchdog, whichever
//! comes first.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::time::{Duration, Instant};

use mpi_ios_tests::faults::hit_replacement;
use mpi_ios_tests::{bin, heat2d_args_for, mpi_lock, wait_until, Group, MpiJob, Pcmd};
use nix::sys::signal::Signal;

/// Hours of work: the job never ends by itself within any bound used here.
const ENDLESS_ARGS: &[&str] = &["--rows", "240", "--cols", "240", "--iters", "2000000000"];
/// `PCM_RECONFIGURE_TIMEOUT` for these jobs, in seconds.
const TIMEOUT_S: u64 = 4;
/// What the end of the job may take after the deadline: the reporter's head start (2 s), the
/// runtime tearing the job down, and a loaded machine.
const SLACK: Duration = Duration::from_secs(30);
/// How long to wait for the job to start and for the replacement to appear.
const WAIT: Duration = Duration::from_secs(60);
/// `pcm::RECONFIGURE_TIMEOUT_EXIT` (the tests do not link pcm, which links MPI).
const TIMEOUT_EXIT: i32 = 75;

fn host_name() -> String {
    nix::unistd::gethostname().unwrap().into_string().unwrap()
}

/// Waits for the job to end, at most the deadline plus [`SLACK`] after `hit`; returns its
/// exit code and stderr, and how long after `hit` it ended.
fn wait_end(job: Group, hit: Instant) -> (Option<i32>, String, Duration) {
    let bound = Duration::from_secs(TIMEOUT_S) + SLACK;
    let finished = job.wait(bound.saturating_sub(hit.elapsed()));
    let took = hit.elapsed();
    eprintln!(
        "job ended {took:.1?} after the fault with exit code {:?}",
        finished.code
    );
    (finished.code, finished.stderr, took)
}

/// The watchdog's line names the reconfiguration, the moved rank and target host, and the
/// phase the parents were in.
fn assert_names_the_stall(stderr: &str, host: &str) {
    let line = stderr
        .lines()
        .find(|l| l.contains("did not finish within"))
        .unwrap_or_else(|| panic!("no watchdog error in stderr:\n{stderr}"));
    eprintln!("watchdog said: {line}");
    assert!(line.contains(&format!("rank 1 to {host}")), "{line}");
    assert!(line.contains(&format!("on host {host}")), "{line}");
    assert!(
        ["spawn", "merge"]
            .iter()
            .any(|phase| line.contains(&format!("in the {phase} phase"))),
        "{line}"
    );
    assert!(line.contains("exit status 75"), "{line}");
}

#[test]
fn given_a_replacement_stopped_while_starting_then_the_job_ends_after_the_deadline_naming_it() {
    let _lock = mpi_lock();
    let host = host_name();
    let dir = tempfile::tempdir().unwrap();
    let mut job = MpiJob::new(3, "heat2d", ENDLESS_ARGS)
        .env("PCM_SCHEDULE", format!("1:1@{host}"))
        .env("PCM_RECONFIGURE_TIMEOUT", TIMEOUT_S.to_string())
        .start(dir.path(), "job");
    let (victim, hit) = hit_replacement(&mut job, 3, Signal::SIGSTOP);
    let (code, stderr, took) = wait_end(job, hit);
    // Informative only: the guard kills it either way.
    eprintln!(
        "stopped replacement left behind by the runtime: {}",
        victim.left_behind()
    );

    assert_eq!(code, Some(TIMEOUT_EXIT), "stderr:\n{stderr}");
    assert!(
        took >= Duration::from_secs(TIMEOUT_S) - Duration::from_millis(500),
        "ended {took:?} after the fault, before the deadline: stderr:\n{stderr}"
    );
    assert_names_the_stall(&stderr, &host);
    assert!(stderr.contains("scheduled reconfiguration"), "{stderr}");
}

#[test]
fn given_a_replacement_killed_while_starting_then_the_job_ends() {
    let _lock = mpi_lock();
    let host = host_name();
    let dir = tempfile::tempdir().unwrap();
    let mut job = MpiJob::new(3, "heat2d", ENDLESS_ARGS)
        .env("PCM_SCHEDULE", format!("1:1@{host}"))
        .env("PCM_RECONFIGURE_TIMEOUT", TIMEOUT_S.to_string())
        .start(dir.path(), "job");
    let (_victim, hit) = hit_replacement(&mut job, 3, Signal::SIGKILL);
    let (code, stderr, _took) = wait_end(job, hit);

    // The job ends (wait_end bounds it). Its status is the runtime's: hydra exits 255 here,
    // but once in CI (2026-11-26) it exited 0 after its proxy failed `assert (!closed)`;
    // pcmrun therefore trusts a launcher's 0 only when every rank's newest process said it
    // exited (`pcmrun::supervisor`, tested there).
    if code == Some(0) {
        eprintln!("the runtime reported success although a process was killed:\n{stderr}");
    }
    // Either the runtime noticed the death and aborted the job first (Open MPI and MPICH
    // both do), or the parents were left waiting and the watchdog named the stall.
    if code == Some(TIMEOUT_EXIT) {
        assert_names_the_stall(&stderr, &host);
    }
}

#[test]
fn given_a_pcmd_migration_whose_replacement_stalls_then_the_requester_gets_the_failure() {
    let _lock = mpi_lock();
    let host = host_name();
    let pcmd = Pcmd::start();
    let dir = tempfile::tempdir().unwrap();
    let mut job = MpiJob::new(3, "heat2d", ENDLESS_ARGS)
        .env("PCM_DAEMON", pcmd.daemon_env.clone())
        .env("PCM_RECONFIGURE_TIMEOUT", TIMEOUT_S.to_string())
        .start(dir.path(), "job");
    wait_until(WAIT, "3 ranks registered and running", || {
        pcmd.status()
            .jobs
            .iter()
            .flat_map(|j| j.ranks.iter())
            .filter(|r| r.iteration > 0)
            .count()
            == 3
    });

    let (migrated, code, stderr, took) = std::thread::scope(|scope| {
        // The CLI waits for the outcome; the replacement is hit meanwhile.
        let cli = scope.spawn(|| pcmd.cli(&["migrate", "--rank", "1", "--to", &host]));
        let (victim, hit) = hit_replacement(&mut job, 3, Signal::SIGSTOP);
        let (code, stderr, took) = wait_end(job, hit);
        drop(victim);
        (cli.join().unwrap(), code, stderr, took)
    });

    assert_eq!(code, Some(TIMEOUT_EXIT), "stderr:\n{stderr}");
    assert!(took >= Duration::from_secs(TIMEOUT_S) - Duration::from_millis(500));
    assert_names_the_stall(&stderr, &host);
    assert!(stderr.contains("migration #"), "{stderr}");

    let out = String::from_utf8_lossy(&migrated.stdout);
    assert!(!migrated.status.success(), "pcmd migrate succeeded: {out}");
    assert!(
        out.contains("failed") && out.contains("did not finish within"),
        "pcmd migrate printed: {out}{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let log = pcmd.log();
    assert!(
        log.contains("did not finish within") && log.contains("phase"),
        "pcmd log:\n{log}"
    );
}

/// Checkpoints taken before a stalled reconfiguration ended the job still restart it: the
/// restart resumes from one of them and ends with heat2d-plain's checksum.
#[test]
fn given_checkpoints_before_a_stalled_migration_then_a_restart_resumes_from_them() {
    const RUN: Duration = Duration::from_secs(180);
    let _lock = mpi_lock();
    // About 4 s of work, sized by time: the job is stalled right after its first checkpoint
    // (0.25 s), and the reference and the restart must still run to the end. (A fixed 30,000
    // iterations could end before the move on a machine a few times faster than this one.)
    let (args, _) = heat2d_args_for(3, 240, 240, 4.0, WAIT);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let args = args.as_slice();
    let host = host_name();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("node.sock");
    let store = dir.path().join("store");
    let mut command = std::process::Command::new(bin("pcmd"));
    command
        .arg("--socket")
        .arg(&socket)
        .arg("serve")
        .arg("--checkpoint-dir")
        .arg(&store)
        .env("RUST_LOG", "info");
    let _pcmd = Group::start(command, dir.path(), "pcmd");
    wait_until(WAIT, "pcmd to listen", || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    let job = || {
        MpiJob::new(3, "heat2d", args)
            .env("PCM_DAEMON", socket.display().to_string())
            .env("PCM_CHECKPOINT_INTERVAL", "0.25")
            .env("PCM_RECONFIGURE_TIMEOUT", TIMEOUT_S.to_string())
    };
    let complete = || {
        std::fs::read_dir(store.join("heat2d-3r"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("manifest").exists())
            .count()
    };

    let mut run = job().start(dir.path(), "stalled");
    wait_until(WAIT, "a complete checkpoint", || {
        assert!(run.running(), "ended early: {}", run.stderr_so_far());
        complete() > 0
    });
    let migrate = std::process::Command::new(bin("pcmd"))
        .arg("--socket")
        .arg(&socket)
        .args(["migrate", "--rank", "1", "--to", &host, "--no-wait"])
        .output()
        .unwrap();
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    let (victim, hit) = hit_replacement(&mut run, 3, Signal::SIGSTOP);
    let (code, stderr, _) = wait_end(run, hit);
    drop(victim);
    assert_eq!(code, Some(TIMEOUT_EXIT), "stderr:\n{stderr}");
    assert!(complete() > 0);

    let reference = MpiJob::new(3, "heat2d-plain", args)
        .run(RUN)
        .report()
        .reference_checksum()
        .to_owned();
    let restarted = job().env("PCM_RESTART", "require").run(RUN);
    let report = restarted.report();
    assert!(
        restarted
            .stderr
            .contains("restarted from the checkpoint at iteration"),
        "{}",
        restarted.stderr
    );
    assert_eq!(report.checksum, reference);
}
