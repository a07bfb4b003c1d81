//! A restart of a job that finished (docs/checkpoints.md, "A restart never resumes something
//! else"): refused with "already finished" while the finished job's checkpoint is there;
//! after a `PCM_RESTART=force` run that ended before its first checkpoint there is nothing
//! to resume, and `PCM_RESTART=1` starts from iteration 0 with a warning, computing what the
//! command asks for (the plain checksum), while `PCM_RESTART=require` fails.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mpi_ios_tests::{complete_checkpoints, mpi_lock, wait_until, Finished, MpiJob};
use pcm_proto::checkpoint as ckpt;

/// Half a second to two seconds of heat2d, depending on the machine: several checkpoints at
/// an interval of a tenth of the plain run's loop.
const ARGS: &[&str] = &["--rows", "400", "--cols", "400", "--iters", "20000"];
const DEADLINE: Duration = Duration::from_secs(120);

/// The harness's `pcmd serve` with its own checkpoint directory, killed on drop.
struct Pcmd {
    daemon: mpi_ios_tests::Pcmd,
    store: PathBuf,
}

impl Pcmd {
    fn start(dir: &Path) -> Pcmd {
        let store = dir.join("a-store");
        let daemon = mpi_ios_tests::Pcmd::start_with(&[
            "--checkpoint-dir",
            store.to_str().expect("a UTF-8 temporary path"),
        ]);
        let ckpt_socket = ckpt::socket_path(&daemon.socket);
        wait_until(Duration::from_secs(60), "pcmd to listen", || {
            UnixStream::connect(&ckpt_socket).is_ok()
        });
        Pcmd { daemon, store }
    }

    fn run(&self, interval: &str, restart: Option<&str>) -> Finished {
        let mut job = MpiJob::new(2, "heat2d", ARGS)
            .env("PCM_DAEMON", &self.daemon.daemon_env)
            .env("PCM_CHECKPOINT_INTERVAL", interval);
        if let Some(mode) = restart {
            job = job.env("PCM_RESTART", mode);
        }
        job.run(DEADLINE)
    }
}

#[test]
fn given_a_forced_restart_that_took_no_checkpoint_then_restart_1_starts_over_and_require_fails() {
    let _lock = mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    let pcmd = Pcmd::start(dir.path());
    let plain = MpiJob::new(2, "heat2d-plain", ARGS).run(DEADLINE).report();
    // A tenth of the plain run's loop (at most the 0.25 s this test was written with), so
    // that the runs that must leave checkpoints write several on any machine: a fixed 0.25 s
    // leaves none once 20,000 iterations take less than that (CI's machine did them in
    // 0.55 s on Open MPI, checkpoint.rs).
    let interval = format!("{:.3}", (plain.seconds / 10.0).clamp(0.02, 0.25));
    let interval = interval.as_str();
    let plain = plain.reference_checksum().to_owned();

    let done = pcmd.run(interval, None);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let mark = pcmd.store.join("heat2d-2r").join("finished");
    assert!(!complete_checkpoints(&pcmd.store, "heat2d-2r").is_empty());
    assert!(mark.exists());
    // Its checkpoint is there: the restart is refused.
    let refused = pcmd.run(interval, Some("1"));
    assert_ne!(refused.code, Some(0), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("already finished"),
        "{}",
        refused.stderr
    );

    // Forced, with no checkpoint due before its end: it resumes and ends, retiring the
    // checkpoints it resumed from and their mark, and leaves its own mark alone.
    let forced = pcmd.run("1000", Some("force"));
    assert_eq!(forced.report().checksum, plain);
    assert!(
        complete_checkpoints(&pcmd.store, "heat2d-2r").is_empty(),
        "the forced run's end retires the checkpoints it resumed"
    );
    assert!(mark.exists(), "the forced run's end is recorded");

    // Nothing to resume: starting over, said, computes what was asked.
    let again = pcmd.run(interval, Some("1"));
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(
        again.stderr.contains("starting from the beginning"),
        "{}",
        again.stderr
    );
    assert!(
        !again.stderr.contains("already finished"),
        "{}",
        again.stderr
    );
    assert_eq!(again.report().checksum, plain);

    // `require` fails instead. (The run above took checkpoints and finished: its own are
    // refused as finished, so first a forced run with none leaves nothing again.)
    let forced = pcmd.run("1000", Some("force"));
    assert_eq!(forced.code, Some(0), "{}", forced.stderr);
    let required = pcmd.run(interval, Some("require"));
    assert_ne!(required.code, Some(0), "{}", required.stderr);
    assert!(
        required
            .stderr
            .contains("cannot restart: PCM_RESTART=require"),
        "{}",
        required.stderr
    );
}
