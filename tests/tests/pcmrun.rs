//! `pcmrun`, the launcher with automatic recovery, run as a user would on this host: a rank
//! killed with SIGKILL mid-run (the job comes back from its newest checkpoint with the plain
//! run's checksum), an application that fails by itself (never restarted, its status passed
//! on), a lost rank whose checkpoints are gone (a clear error, no loop), Ctrl-C while the job
//! runs and while it waits to be relaunched (stopped, nothing left behind), and `--dry-run`.
//!
//! Jobs are sized by time (a calibration run), and the tests act on pcmrun's typed event
//! stream (`--events FILE`): a rank is killed after the first checkpoint is complete.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use mpi_ios_tests::faults::hit_replacement;
use mpi_ios_tests::netns::Cluster;
use mpi_ios_tests::pcmrun_job::{assert_ended_with, PcmrunCommand, PcmrunJob};
use mpi_ios_tests::{
    bin, heat2d_args_for, heat2d_args_sized, mpi_lock, program, wait_until, Finished, MpiJob,
    Runtime, RuntimeExt as _,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pcm_proto::run::RunEvent;
use pcmrun::EventRecord;

const DEADLINE: Duration = Duration::from_secs(180);
const WAIT: Duration = Duration::from_secs(60);
const SIZE: [&str; 4] = ["--rows", "256", "--cols", "256"];
/// Seconds of the jobs that tests stop, kill or cut into at their first checkpoint or a
/// reconfiguration scheduled about 2 s in (every 0.5 s checkpoint interval): long enough that
/// the job still runs when the test acts, whatever this machine's speed, since the size comes
/// from a rate measured here. One size for them all, so that one plain run gives their
/// reference checksum. (8-10 s before: the longer jobs cost about a minute per run of this
/// file and tested nothing more.) The tests that act later (a pcmd restarted, then a
/// checkpoint of its own; a move, then a power-off; two failures in a row) keep 10 s.
const JOB_SECONDS: f64 = 5.0;

/// heat2d's arguments for a run of about `seconds` on this machine (measured).
fn args_for(seconds: f64) -> Vec<String> {
    sized_args(seconds).0
}

/// [`args_for`], and the measured rate in iterations per second: measured once per test
/// binary, by the first test that asks (a probe of a few seconds each time added up to
/// half a minute per run of this file).
fn sized_args(seconds: f64) -> (Vec<String>, f64) {
    static RATE: OnceLock<f64> = OnceLock::new();
    let rate = *RATE.get_or_init(|| heat2d_args_for(2, 256, 256, 1.0, WAIT).1);
    (heat2d_args_sized(256, 256, rate, seconds), rate)
}

fn plain_checksum(args: &[String]) -> String {
    plain_checksum_of("heat2d-plain", args)
}

/// The checksum of a plain 2-rank run of `program` with `args`: run once per test binary for
/// each program and arguments (most tests here size their job alike, and a plain run of
/// about 10 s in each of them cost over a minute per run of this file).
fn plain_checksum_of(program: &str, args: &[String]) -> String {
    static PLAIN: Mutex<BTreeMap<(String, Vec<String>), String>> = Mutex::new(BTreeMap::new());
    let key = (program.to_owned(), args.to_vec());
    if let Some(known) = PLAIN.lock().unwrap().get(&key) {
        return known.clone();
    }
    let plain_args: Vec<&str> = args.iter().map(String::as_str).collect();
    let checksum = MpiJob::new(2, program, &plain_args)
        .run(DEADLINE)
        .report()
        .reference_checksum()
        .to_owned();
    PLAIN.lock().unwrap().insert(key, checksum.clone());
    checksum
}

/// A pcmrun of heat2d on 2 ranks with its own pcmd, checkpoint directory, event stream and
/// report, all in `dir`.
struct Run {
    job: PcmrunJob,
}

fn start(dir: &Path, args: &[String], options: &[&str]) -> Run {
    start_with(dir, "heat2d", args, options, &[])
}

/// [`start`] of `program`, with extra environment for pcmrun (which forwards `PCM_*` to the
/// ranks).
fn start_with(
    dir: &Path,
    program: &str,
    args: &[String],
    options: &[&str],
    env: &[(&str, String)],
) -> Run {
    start_ranks_with(2, dir, program, args, options, env)
}

/// [`start_with`] of `ranks` ranks.
fn start_ranks_with(
    ranks: u32,
    dir: &Path,
    program: &str,
    args: &[String],
    options: &[&str],
    env: &[(&str, String)],
) -> Run {
    let mut pcmrun = PcmrunCommand::new(dir, ranks);
    pcmrun
        .command()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(["--progress", "1"])
        .args(options);
    Run {
        job: pcmrun.start(program, args, dir, "pcmrun"),
    }
}

impl Run {
    fn events(&self) -> Vec<EventRecord> {
        self.job.events()
    }

    /// Waits for the first event of `launch` that `wanted` accepts.
    fn wait_for(
        &mut self,
        what: &str,
        launch: u32,
        wanted: impl Fn(&RunEvent) -> bool,
    ) -> RunEvent {
        self.job
            .wait_for(what, WAIT, |r| r.launch == launch && wanted(&r.event))
            .unwrap_or_else(|e| panic!("{e}"))
            .event
    }

    /// The pid of `rank`'s first process in `launch`.
    fn pid_of(&mut self, launch: u32, rank: u32) -> Pid {
        let event = self.wait_for(
            &format!("rank {rank} started"),
            launch,
            |e| matches!(e, RunEvent::Started { rank: r, .. } if r.0 == rank),
        );
        let RunEvent::Started { pid, .. } = event else {
            unreachable!()
        };
        Pid::from_raw(pid as i32)
    }

    /// Waits for pcmrun to end.
    fn wait(&mut self, timeout: Duration) -> Finished {
        self.job.wait(timeout)
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.job.pid() as i32)
    }

    fn report(&self) -> serde_json::Value {
        self.job.report().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every process pcmrun saw start (launcher ranks and replacements, all launches).
    fn pids(&self) -> Vec<Pid> {
        let pids = self.job.pids().into_iter();
        pids.map(|pid| Pid::from_raw(pid as i32)).collect()
    }
}

fn alive(pid: Pid) -> bool {
    kill(pid, None).is_ok()
}

/// Nothing of the run is left: no rank process and no pcmd.
fn assert_nothing_left(run: &Run, finished: &Finished) {
    wait_until(Duration::from_secs(10), "every rank process gone", || {
        run.pids().into_iter().all(|p| !alive(p))
    });
    let pcmds = Command::new("pgrep")
        .arg("-f")
        .arg(format!(
            "pcmd --socket .*--checkpoint-dir {}",
            run.job.checkpoints().display()
        ))
        .output()
        .unwrap();
    assert!(
        pcmds.stdout.is_empty(),
        "pcmd still runs: {}\n{}",
        String::from_utf8_lossy(&pcmds.stdout),
        finished.stderr
    );
}

/// pcmrun ended with 0 and the plain run's checksum after exactly one relaunch from a
/// checkpoint; returns its report.
fn assert_recovered_once(run: &Run, finished: &Finished, plain: &str) -> serde_json::Value {
    assert_ended_with(finished, plain);
    let report = run.report();
    assert_eq!(report["launches"], 2, "{report}");
    assert_eq!(
        report["recoveries"][0]["start"], "from_checkpoint",
        "{report}"
    );
    report
}

#[test]
fn given_a_rank_killed_mid_run_then_pcmrun_brings_the_job_back_with_the_plain_checksum() {
    kill_a_rank_and_expect_recovery("heat2d", "heat2d-plain");
}

#[test]
fn given_a_rank_of_the_c_heat2d_killed_mid_run_then_pcmrun_brings_it_back_too() {
    kill_a_rank_and_expect_recovery("heat2d-c", "heat2d-c-plain");
}

/// Runs `program` under pcmrun, kills rank 1 after the first checkpoint, and expects one
/// recovery ending with the checksum of `plain_program`.
fn kill_a_rank_and_expect_recovery(program: &str, plain_program: &str) {
    let _lock = mpi_lock();
    let args = args_for(JOB_SECONDS);
    let plain = plain_checksum_of(plain_program, &args);
    let dir = tempfile::tempdir().unwrap();
    let mut run = start_with(
        dir.path(),
        program,
        &args,
        &["--checkpoint-interval", "0.5", "--retry-delay", "0.2"],
        &[],
    );
    run.wait_for("a checkpoint", 1, |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    });
    let victim = run.pid_of(1, 1);
    kill(victim, Signal::SIGKILL).unwrap();
    let finished = run.wait(DEADLINE);
    let report = assert_recovered_once(&run, &finished, &plain);
    let recovery = &report["recoveries"][0];
    let resumed = recovery["resumed_from"].as_u64().expect("resumed");
    assert!(resumed > 0, "resumed from iteration 0: {report}");
    let to_resume = recovery["seconds_to_resume"].as_f64().unwrap();
    eprintln!(
        "killed rank 1; resumed from iteration {resumed} {to_resume:.2} s after the launch ended, at least {} iterations computed again",
        recovery["iterations_lost"]
    );
    assert!(
        run.events().iter().any(|r| r.launch == 2
            && matches!(r.event, RunEvent::Restarted { iteration } if iteration == resumed)),
        "no restart event in the second launch"
    );
    assert_nothing_left(&run, &finished);
}

/// Two failures in a row: rank 1 killed after the first launch's first checkpoint, then
/// rank 0 after a checkpoint of the relaunch; pcmrun recovers twice (3 launches), the second
/// time from a checkpoint the relaunch took, and ends with the plain run's checksum.
#[test]
fn given_two_failures_in_a_row_then_pcmrun_recovers_twice_with_the_plain_checksum() {
    let _lock = mpi_lock();
    let args = args_for(10.0);
    let plain = plain_checksum(&args);
    let dir = tempfile::tempdir().unwrap();
    let mut run = start(
        dir.path(),
        &args,
        &["--checkpoint-interval", "0.5", "--retry-delay", "0.2"],
    );
    run.wait_for("a checkpoint", 1, |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    });
    kill(run.pid_of(1, 1), Signal::SIGKILL).unwrap();
    // The relaunch resumed and took a checkpoint of its own: then its rank 0 goes.
    let resumed = match run.wait_for("the relaunch resumed", 2, |e| {
        matches!(e, RunEvent::Restarted { .. })
    }) {
        RunEvent::Restarted { iteration } => iteration,
        _ => unreachable!(),
    };
    run.wait_for(
        "a checkpoint of the relaunch",
        2,
        |e| matches!(e, RunEvent::Checkpointed { iteration } if *iteration > resumed),
    );
    kill(run.pid_of(2, 0), Signal::SIGKILL).unwrap();
    let finished = run.wait(DEADLINE);
    assert_ended_with(&finished, &plain);
    let report = run.report();
    assert_eq!(report["launches"], 3, "{report}");
    let second = report["recoveries"][1]["resumed_from"]
        .as_u64()
        .expect("the second recovery resumed");
    assert!(
        second > resumed,
        "the second recovery resumed from {second}, not from the relaunch's own checkpoint (after {resumed}): {report}"
    );
    assert_nothing_left(&run, &finished);
}

#[test]
fn given_the_application_fails_by_itself_then_pcmrun_passes_its_status_on_and_does_not_restart() {
    let _lock = mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    // Fewer rows than ranks: heat2d reports the error on every rank and exits with 1.
    let args: Vec<String> = ["--rows", "1", "--cols", "8", "--iters", "10"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut run = start(dir.path(), &args, &[]);
    let finished = run.wait(DEADLINE);
    assert_eq!(finished.code, Some(1), "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .contains("--rows 1 is less than the number of ranks"),
        "the application's own message was not passed on:\n{}",
        finished.stderr
    );
    assert!(
        !finished.stderr.contains("PCMRUN-EVENT"),
        "event lines leaked:\n{}",
        finished.stderr
    );
    let report = run.report();
    assert_eq!(report["launches"], 1, "{report}");
    assert!(
        report["reason"]
            .as_str()
            .unwrap()
            .contains("failed by itself"),
        "{report}"
    );
}

#[test]
fn given_a_lost_rank_and_no_usable_checkpoint_then_a_clear_error_and_no_loop() {
    let _lock = mpi_lock();
    let args = args_for(JOB_SECONDS);
    let dir = tempfile::tempdir().unwrap();
    let mut run = start(
        dir.path(),
        &args,
        &["--checkpoint-interval", "0.5", "--retry-delay", "2"],
    );
    run.wait_for("a checkpoint", 1, |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    });
    let victim = run.pid_of(1, 1);
    kill(victim, Signal::SIGKILL).unwrap();
    // The node's disk loses the checkpoints while pcmrun waits to relaunch.
    std::fs::remove_dir_all(run.job.checkpoints()).unwrap();
    std::fs::create_dir_all(run.job.checkpoints()).unwrap();
    let finished = run.wait(DEADLINE);
    assert_eq!(finished.code, Some(1), "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .contains("cannot restart: PCM_RESTART=require"),
        "no clear error:\n{}",
        finished.stderr
    );
    let report = run.report();
    assert_eq!(report["launches"], 2, "it must try once and stop: {report}");
    // The summary names the cause (it used to blame "a launch error, or a program that does
    // not call Pcm::init").
    let reason = report["reason"].as_str().unwrap_or_default();
    eprintln!("pcmrun's reason: {reason}");
    assert!(
        reason.contains("no complete and intact checkpoint") && !reason.contains("Pcm::init"),
        "{report}"
    );
    assert_nothing_left(&run, &finished);
}

#[test]
fn given_ctrl_c_while_the_job_runs_or_waits_for_its_relaunch_then_pcmrun_stops_and_leaves_nothing()
{
    let _lock = mpi_lock();
    let args = args_for(30.0);
    for during_recovery in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut run = start(
            dir.path(),
            &args,
            &["--checkpoint-interval", "0.5", "--retry-delay", "60"],
        );
        run.wait_for("a checkpoint", 1, |e| {
            matches!(e, RunEvent::Checkpointed { .. })
        });
        if during_recovery {
            let victim = run.pid_of(1, 1);
            let rank0 = run.pid_of(1, 0);
            kill(victim, Signal::SIGKILL).unwrap();
            // The launch is over when its other rank is gone; pcmrun then waits 60 s.
            wait_until(WAIT, "the failed launch to end", || !alive(rank0));
            std::thread::sleep(Duration::from_millis(500));
        }
        let interrupted = Instant::now();
        kill(run.pid(), Signal::SIGINT).unwrap();
        let finished = run.wait(Duration::from_secs(30));
        let took = interrupted.elapsed();
        eprintln!(
            "Ctrl-C (during recovery: {during_recovery}): pcmrun ended in {:.2} s",
            took.as_secs_f64()
        );
        assert_eq!(finished.code, Some(130), "{}", finished.stderr);
        assert!(
            took < Duration::from_secs(15),
            "pcmrun took {took:?} to stop"
        );
        let report = run.report();
        assert_eq!(report["launches"], 1, "relaunched after Ctrl-C: {report}");
        assert_nothing_left(&run, &finished);
    }
}

/// The complete checkpoints in a checkpoint directory: every `SERIES/ITERATION/manifest`.
fn complete_checkpoints(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for series in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for checkpoint in std::fs::read_dir(series.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let manifest = checkpoint.path().join("manifest");
            if manifest.is_file() {
                found.push(manifest);
            }
        }
    }
    found.sort();
    found
}

/// The terminal pcmrun runs in closes (SIGHUP): pcmrun stops the job as for SIGTERM, says
/// so, writes its report (exit 130), keeps the checkpoints and leaves nothing running.
#[test]
fn given_sighup_while_the_job_runs_then_pcmrun_stops_it_like_sigterm_and_keeps_the_checkpoints() {
    let _lock = mpi_lock();
    let args = args_for(30.0);
    let dir = tempfile::tempdir().unwrap();
    let mut run = start(dir.path(), &args, &["--checkpoint-interval", "0.5"]);
    run.wait_for("a checkpoint", 1, |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    });
    let hung_up = Instant::now();
    kill(run.pid(), Signal::SIGHUP).unwrap();
    let finished = run.wait(Duration::from_secs(30));
    let took = hung_up.elapsed();
    eprintln!("SIGHUP: pcmrun ended in {:.2} s", took.as_secs_f64());
    assert_eq!(finished.code, Some(130), "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .contains("pcmrun: SIGHUP (the terminal closed): stopping the job"),
        "no message:\n{}",
        finished.stderr
    );
    let report = run.report();
    assert_eq!(report["launches"], 1, "relaunched after SIGHUP: {report}");
    let reason = report["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("SIGHUP") && reason.contains("checkpoints are kept"),
        "{report}"
    );
    assert!(
        !complete_checkpoints(run.job.checkpoints()).is_empty(),
        "no complete checkpoint left in {}",
        run.job.checkpoints().display()
    );
    assert_nothing_left(&run, &finished);
}

/// A second pcmrun of heat2d on 2 ranks in `dir` (its own events, report and output) with
/// the checkpoint directory of `first`: the same checkpoint series.
fn start_sharing(first: &Run, dir: &Path, args: &[String], options: &[&str]) -> Run {
    let checkpoints = first.job.checkpoints().to_owned();
    let mut pcmrun = PcmrunCommand::with_checkpoints(dir, 2, &checkpoints);
    pcmrun.command().args(["--progress", "1"]).args(options);
    Run {
        job: pcmrun.start("heat2d", args, dir, "pcmrun"),
    }
}

/// Two pcmruns of one program and rank count in one checkpoint directory: the second stops
/// at once, naming the series, the first pcmrun's pid and the job-name option; the first
/// keeps its checkpoints, recovers a rank killed afterwards from them, and ends with the
/// plain run's checksum. (Before the lock, the second job's first checkpoint deleted the
/// first's, and the kill then lost all its progress.)
#[test]
fn given_a_second_pcmrun_of_the_same_series_then_it_is_refused_and_the_first_keeps_its_checkpoints()
{
    let _lock = mpi_lock();
    let args = args_for(JOB_SECONDS);
    let plain = plain_checksum(&args);
    let dir = tempfile::tempdir().unwrap();
    let mut first = start(
        dir.path(),
        &args,
        &["--checkpoint-interval", "0.5", "--retry-delay", "0.2"],
    );
    first.wait_for("a checkpoint", 1, |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    });
    let second_dir = tempfile::tempdir().unwrap();
    let refused_at = Instant::now();
    let mut second = start_sharing(
        &first,
        second_dir.path(),
        &args,
        &["--checkpoint-interval", "0.5"],
    );
    let refused = second.wait(Duration::from_secs(30));
    eprintln!(
        "second pcmrun refused in {:.2} s: {}",
        refused_at.elapsed().as_secs_f64(),
        refused.stderr.trim()
    );
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
    let expected = format!("is in use by pcmrun pid {}", first.pid());
    for part in [
        "checkpoint series heat2d-2r",
        expected.as_str(),
        "--job-name",
    ] {
        assert!(
            refused.stderr.contains(part),
            "{part:?} missing:\n{}",
            refused.stderr
        );
    }
    assert!(
        second.events().is_empty(),
        "the second pcmrun launched something"
    );
    assert!(!complete_checkpoints(first.job.checkpoints()).is_empty());
    // The first job still has its checkpoints to come back from.
    kill(first.pid_of(1, 1), Signal::SIGKILL).unwrap();
    let finished = first.wait(DEADLINE);
    let report = assert_recovered_once(&first, &finished, &plain);
    let resumed = report["recoveries"][0]["resumed_from"].as_u64();
    assert!(resumed.is_some_and(|i| i > 0), "{report}");
    assert_nothing_left(&first, &finished);
}

/// pcmrun killed outright (SIGKILL: no report, no clean-up of its own) after a checkpoint;
/// the same command run again resumes the job from its newest complete checkpoint by
/// default, says so, and ends with the plain run's checksum. (Before: it started from
/// iteration 0 without a word and deleted the old job's checkpoints.)
#[test]
fn given_pcmrun_killed_then_the_same_command_again_resumes_from_the_newest_checkpoint() {
    let _lock = mpi_lock();
    let args = args_for(JOB_SECONDS);
    let plain = plain_checksum(&args);
    let dir = tempfile::tempdir().unwrap();
    let options = ["--checkpoint-interval", "0.5"];
    let mut first = start(dir.path(), &args, &options);
    let checkpointed = match first.wait_for(
        "a checkpoint",
        1,
        |e| matches!(e, RunEvent::Checkpointed { iteration } if *iteration > 0),
    ) {
        RunEvent::Checkpointed { iteration } => iteration,
        _ => unreachable!(),
    };
    kill(first.pid(), Signal::SIGKILL).unwrap();
    let killed = first.wait(Duration::from_secs(30));
    assert_eq!(
        killed.code, None,
        "pcmrun was not killed: {}",
        killed.stderr
    );
    // Its launch and pcmd end with it (they get SIGTERM when pcmrun dies).
    assert_nothing_left(&first, &killed);
    let kept = complete_checkpoints(first.job.checkpoints());
    assert!(!kept.is_empty(), "no complete checkpoint after the kill");
    let second_dir = tempfile::tempdir().unwrap();
    let mut again = start_sharing(&first, second_dir.path(), &args, &options);
    let finished = again.wait(DEADLINE);
    eprintln!(
        "{}",
        finished
            .stderr
            .lines()
            .filter(|l| l.starts_with("pcmrun:"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .contains("an earlier run of this command did not finish")
            && finished
                .stderr
                .contains("resumed from the checkpoint at iteration"),
        "the rerun did not say that it resumes:\n{}",
        finished.stderr
    );
    assert_eq!(
        finished.report().checksum,
        plain,
        "the resumed run computed something else"
    );
    let report = again.report();
    let resumed = report["resumed_at_start"].as_u64();
    assert!(
        resumed.is_some_and(|i| i >= checkpointed),
        "not resumed from the killed run's newest checkpoint (at least {checkpointed}): {report}"
    );
    assert_eq!(report["launches"], 1, "{report}");
    assert_nothing_left(&again, &finished);
}

/// The pcmd pcmrun started for `run` (by its command line).
fn pcmd_of(run: &Run) -> Pid {
    let output = Command::new("pgrep")
        .arg("-f")
        .arg(format!(
            "pcmd --socket .*--checkpoint-dir {}",
            run.job.checkpoints().display()
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(pids.len(), 1, "not one pcmd: {text:?}");
    Pid::from_raw(pids[0])
}

/// The pcmd pcmrun started for the job is killed: pcmrun starts it again (same socket, same
/// checkpoint directory) and says so, the next checkpoints are written, and a rank killed
/// afterwards is relaunched from a checkpoint taken after the pcmd came back; plain
/// checksum. (Before: every later checkpoint was "not written", and the relaunch found no
/// complete checkpoint although one was on disk.)
#[test]
fn given_the_jobs_pcmd_killed_then_pcmrun_restarts_it_and_a_later_lost_rank_still_recovers() {
    let _lock = mpi_lock();
    let args = args_for(10.0);
    let plain = plain_checksum(&args);
    let dir = tempfile::tempdir().unwrap();
    let mut run = start(
        dir.path(),
        &args,
        &["--checkpoint-interval", "0.5", "--retry-delay", "0.2"],
    );
    run.wait_for("a checkpoint", 1, |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    });
    let pcmd = pcmd_of(&run);
    kill(pcmd, Signal::SIGKILL).unwrap();
    let killed_at = Instant::now();
    wait_until(WAIT, "pcmrun to start a new pcmd", || {
        run.job
            .stderr_so_far()
            .contains(&format!("the job's pcmd (pid {pcmd}) ended"))
    });
    eprintln!(
        "pcmd started again {:.2} s after the kill",
        killed_at.elapsed().as_secs_f64()
    );
    // Checkpoints are written again: one committed after the new pcmd came up.
    let since = run.events().last().map_or(0.0, |r| r.seconds);
    let after = run
        .job
        .wait_for("a checkpoint through the new pcmd", WAIT, |r| {
            r.seconds > since && matches!(r.event, RunEvent::Checkpointed { .. })
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let RunEvent::Checkpointed { iteration: written } = after.event else {
        unreachable!()
    };
    kill(run.pid_of(1, 1), Signal::SIGKILL).unwrap();
    let finished = run.wait(DEADLINE);
    let report = assert_recovered_once(&run, &finished, &plain);
    let resumed = report["recoveries"][0]["resumed_from"].as_u64();
    assert!(
        resumed.is_some_and(|i| i >= written),
        "not resumed from a checkpoint the new pcmd wrote (at {written} or later): {report}"
    );
    assert_nothing_left(&run, &finished);
}

/// A rank stopped with SIGSTOP on this host: the job makes no progress; the progress lines
/// say for how long instead of repeating the last rate; after --stall-timeout pcmrun names
/// the stopped rank, stops the launch and relaunches it from the newest checkpoint; plain
/// checksum. (Before: no action, the same stale rate printed every 2 s.)
#[test]
fn given_a_rank_stopped_with_sigstop_then_pcmrun_finds_it_within_the_stall_timeout_and_relaunches()
{
    let _lock = mpi_lock();
    let args = args_for(JOB_SECONDS);
    let plain = plain_checksum(&args);
    let dir = tempfile::tempdir().unwrap();
    let timeout = 4.0;
    let mut run = start(
        dir.path(),
        &args,
        &[
            "--checkpoint-interval",
            "0.5",
            "--retry-delay",
            "0.2",
            "--stall-timeout",
            "4",
        ],
    );
    run.wait_for("a checkpoint", 1, |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    });
    let victim = run.pid_of(1, 1);
    kill(victim, Signal::SIGSTOP).unwrap();
    let stopped_at = Instant::now();
    run.wait_for("the relaunch", 2, |e| matches!(e, RunEvent::Started { .. }));
    let acted = stopped_at.elapsed().as_secs_f64();
    eprintln!("rank 1 stopped; relaunched {acted:.1} s later (--stall-timeout {timeout})");
    let finished = run.wait(DEADLINE);
    let report = assert_recovered_once(&run, &finished, &plain);
    let reason = report["recoveries"][0]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains(&format!("the job stalled: rank 1 (pid {victim} on "))
            && reason.contains("stopped (SIGSTOP"),
        "the stopped rank is not named: {report}"
    );
    assert!(
        acted < timeout + 6.0,
        "pcmrun took {acted:.1} s to act on a stall of --stall-timeout {timeout}"
    );
    assert!(
        report["recoveries"][0]["resumed_from"]
            .as_u64()
            .is_some_and(|i| i > 0),
        "{report}"
    );
    assert!(
        finished.stderr.contains(", no progress for "),
        "the progress lines never said that the job made no progress:\n{}",
        finished.stderr
    );
    assert_nothing_left(&run, &finished);
}

#[test]
fn given_dry_run_then_the_launch_command_is_printed_with_the_runtimes_settings() {
    let output = Command::new(bin("pcmrun"))
        .env("PCMRUN_LAUNCHER", Runtime::current().launcher())
        .args([
            "--dry-run",
            "-np",
            "3",
            "--daemon",
            "none",
            "--checkpoint-interval",
            "5",
        ])
        .arg(program("heat2d"))
        .args(["--rows", "64"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let line = String::from_utf8(output.stdout).unwrap();
    let ranks = Runtime::current().ranks_args(3).join(" ");
    for part in [
        ranks.as_str(),
        "PCMRUN_EVENTS",
        "PCM_DAEMON=none",
        "heat2d --rows 64",
    ] {
        assert!(line.contains(part), "{part:?} missing from {line}");
    }
    // Without a pcmd there are no checkpoints, whatever the interval says.
    assert!(!line.contains("PCM_CHECKPOINT_INTERVAL"), "{line}");
}

/// UCX's memory hooks cost every MPICH process ~40 ms at load, replacements included:
/// pcmrun turns them off, unless the user set them either way (RDMA networks need them).
#[test]
fn given_mpich_then_pcmrun_turns_ucx_memory_hooks_off_unless_the_user_chose() {
    let dry_run = |mem_events: Option<&str>| {
        let mut command = Command::new(bin("pcmrun"));
        command
            .env("PCMRUN_LAUNCHER", Runtime::current().launcher())
            .env_remove("UCX_MEM_EVENTS")
            .args(["--dry-run", "-np", "2", "--daemon", "none"])
            .arg(program("heat2d"));
        if let Some(value) = mem_events {
            command.env("UCX_MEM_EVENTS", value);
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let unset = dry_run(None);
    let chosen = dry_run(Some("yes"));
    assert!(!chosen.contains("UCX_MEM_EVENTS=no"), "{chosen}");
    match Runtime::current() {
        Runtime::Mpich => assert!(unset.contains("UCX_MEM_EVENTS=no"), "{unset}"),
        Runtime::OpenMpi => assert!(!unset.contains("UCX_MEM_EVENTS"), "{unset}"),
    }
}

#[test]
fn given_a_replacement_killed_while_starting_then_pcmrun_recovers_with_the_plain_checksum() {
    kill_a_spawned_process_and_expect_recovery(|at, host| format!("{at}:1@{host}"));
}

/// The same while a malleable job grows: the process added to make rank 2 dies in
/// start-up, the job ends, and the relaunch (at the launch's width: the grow never
/// completed) resumes from the checkpoint PCM took right before the resize.
#[test]
fn given_a_process_killed_while_the_job_grows_then_pcmrun_recovers_with_the_plain_checksum() {
    kill_a_spawned_process_and_expect_recovery(|at, host| format!("{at}:size=3@{host}"));
}

/// Runs a 2-rank heat2d under pcmrun with the reconfiguration `schedule(at, host)` after
/// about 2 s, kills the process it spawns while it starts, and expects one recovery from
/// the checkpoint taken right before the reconfiguration, with the plain checksum.
fn kill_a_spawned_process_and_expect_recovery(schedule: impl Fn(u64, &str) -> String) {
    let _lock = mpi_lock();
    let (args, rate) = sized_args(JOB_SECONDS);
    let plain = plain_checksum(&args);
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    // After about 2 s; no periodic checkpoint comes before the end, only the one PCM takes
    // right before the reconfiguration.
    let at = (rate * 2.0) as u64;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("PCM_SCHEDULE", schedule(at, &host)),
        ("PCM_RECONFIGURE_TIMEOUT", "4".to_owned()),
    ];
    let mut run = start_with(
        dir.path(),
        "heat2d",
        &args,
        &["--checkpoint-interval", "600", "--retry-delay", "0.2"],
        &env,
    );
    // The spawned process dies in start-up and the job ends; the relaunch resumes from the
    // checkpoint taken when the reconfiguration began, so nothing computed before it is lost.
    let (victim, _) = hit_replacement(run.job.group(), 2, Signal::SIGKILL);
    let finished = run.wait(DEADLINE);
    drop(victim);
    let report = assert_recovered_once(&run, &finished, &plain);
    assert_eq!(
        report["recoveries"][0]["resumed_from"].as_u64(),
        Some(at),
        "not resumed from the checkpoint taken right before the reconfiguration: {report}"
    );
    assert_nothing_left(&run, &finished);
}

#[test]
fn given_a_hostfile_then_the_launch_uses_it_and_a_missing_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let hostfile = dir.path().join("hosts");
    std::fs::write(&hostfile, "localhost:2\n").unwrap();
    let dry_run = |hostfile: &Path| {
        Command::new(bin("pcmrun"))
            .env("PCMRUN_LAUNCHER", Runtime::current().launcher())
            .env_remove("PCM_HOSTFILE")
            .args(["--dry-run", "-np", "2", "--daemon", "none", "--hostfile"])
            .arg(hostfile)
            .arg(program("heat2d"))
            .output()
            .unwrap()
    };
    let output = dry_run(&hostfile);
    assert!(output.status.success(), "{output:?}");
    let line = String::from_utf8(output.stdout).unwrap();
    let flag = Runtime::current().hostfile_args(&hostfile);
    let flag = format!(
        "{} {}",
        flag[0].to_string_lossy(),
        flag[1].to_string_lossy()
    );
    assert!(line.contains(&flag), "{flag:?} missing from {line}");
    // PCM learns the hosts it may move ranks to from the same file.
    assert!(
        line.contains(&format!("PCM_HOSTFILE={}", hostfile.display())),
        "{line}"
    );
    let missing = dir.path().join("no-such-hosts");
    let output = dry_run(&missing);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--hostfile") && stderr.contains("no-such-hosts"),
        "{stderr}"
    );
}

#[test]
fn given_moves_scheduled_at_consecutive_iterations_then_each_waits_for_its_checkpoint_and_none_is_lost(
) {
    let _lock = mpi_lock();
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let args: Vec<String> = SIZE
        .iter()
        .map(|s| s.to_string())
        .chain(["--iters".into(), "400".into()])
        .collect();
    let plain = plain_checksum(&args);
    let dir = tempfile::tempdir().unwrap();
    // Each move is preceded by a checkpoint (PCM_CHECKPOINT_BEFORE_MOVE's default), which
    // takes the iteration of the next scripted move: that one must be made one check later.
    let env = [(
        "PCM_SCHEDULE",
        format!("100:1@{host},101:0@{host},102:1@{host}"),
    )];
    let mut run = start_with(
        dir.path(),
        "heat2d",
        &args,
        &["--checkpoint-interval", "600"],
        &env,
    );
    let finished = run.wait(DEADLINE);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert_eq!(finished.report().checksum, plain);
    // The postponed move joins the one scripted for the next check: 3 ranks moved in 2
    // reconfigurations, each after its checkpoint.
    let moved: usize = run
        .events()
        .iter()
        .map(|r| match &r.event {
            RunEvent::Migrated { placed, .. } => placed.len(),
            _ => 0,
        })
        .sum();
    let report = run.report();
    assert_eq!(moved, 3, "a scheduled move was lost: {report}");
    assert_eq!(
        report["checkpoints"], report["migrations"],
        "one checkpoint before each reconfiguration: {report}"
    );
}

/// A host that runs a rank dies outright (emulated: its link goes down, the launcher can no
/// longer reach it, and everything on it is killed). pcmrun, which started a pcmd on every
/// host of the hostfile with one checkpoint directory, finds the host gone, relaunches on
/// the hosts still alive (the spare node-c takes rank 1), and the job ends with the plain
/// run's checksum; nothing is left on the nodes.
#[test]
fn given_a_host_that_runs_a_rank_dies_then_pcmrun_relaunches_on_the_hosts_still_alive() {
    lose_node_b(true);
}

/// Everything on a host that runs a rank is killed (its owner took it back, or the OOM
/// killer), but the host still answers: pcmrun starts its pcmd there again and relaunches on
/// the same hosts; the job ends with the plain run's checksum.
#[test]
fn given_every_process_of_a_host_killed_then_pcmrun_restarts_its_pcmd_and_relaunches_there() {
    lose_node_b(false);
}

/// Runs heat2d under pcmrun with rank 0 on node-a, rank 1 on node-b and node-c a spare, and
/// after the first checkpoint powers node-b off (`power_off`) or kills everything on it.
fn lose_node_b(power_off: bool) {
    if let Err(why) = Cluster::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let _lock = mpi_lock();
    // Long enough for a checkpoint, the loss and a relaunch well before the end.
    let args = args_for(JOB_SECONDS);
    let plain = plain_checksum(&args);
    let cluster = Cluster::new(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut run = start_on_nodes(&cluster, dir.path(), &args, &[]);
    run.wait_for("a checkpoint", 1, |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    });
    let started = Instant::now();
    if power_off {
        cluster.power_off("node-b");
    } else {
        cluster.kill_everything_on("node-b");
    }
    let finished = run.wait(DEADLINE);
    let report = assert_recovered_once(&run, &finished, &plain);
    eprintln!(
        "pcmrun ended {:.1} s after node-b went; the recovery: {}",
        started.elapsed().as_secs_f64(),
        report["recoveries"][0]
    );
    let (lost, ended_on) = if power_off {
        (serde_json::json!(["node-b"]), ["node-a", "node-c"])
    } else {
        (serde_json::json!([]), ["node-a", "node-b"])
    };
    assert_eq!(report["recoveries"][0]["hosts_lost"], lost, "{report}");
    // Only rank 1 was on node-b; rank 0 was stopped because of its loss (a powered-off
    // host is found lost; when everything on it is killed, the launcher may name no
    // process, hydra's proxy dying with it).
    let reason = report["recoveries"][0]["reason"].as_str().unwrap();
    if power_off {
        assert!(
            reason.starts_with("lost rank 1 (pid ") && reason.contains(" on node-b)"),
            "{reason}"
        );
    }
    let hosts = finished
        .report()
        .hosts
        .expect("heat2d names the ranks' hosts");
    assert_eq!(hosts, ended_on, "where the relaunched ranks ran");
    for node in ["node-a", "node-b", "node-c"] {
        wait_until(Duration::from_secs(10), &format!("{node} empty"), || {
            cluster.processes_on(node).is_empty()
        });
    }
    assert_nothing_left(&run, &finished);
}

/// A malleable job (heat2d) on three hosts and no spare, under `pcmrun --np-min 2`: after
/// the first checkpoint node-c loses power. pcmrun relaunches the job narrower, 3 -> 2 ranks
/// on node-a and node-b, from the newest checkpoint (whose rows are spread over the two
/// ranks, docs/malleability.md) instead of doubling ranks up, says so, and the job ends with
/// the plain checksum.
#[test]
fn given_a_host_powered_off_and_no_spare_then_a_malleable_job_is_relaunched_narrower() {
    if let Err(why) = Cluster::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let _lock = mpi_lock();
    let args = args_for(JOB_SECONDS);
    let plain = plain_checksum(&args);
    let cluster = Cluster::new(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hostfile = cluster.hostfile_without_spares(&["node-a", "node-b", "node-c"]);
    let mut run = start_on_hostfile(
        &cluster,
        &hostfile,
        3,
        dir.path(),
        &args,
        &[],
        &["--np-min", "2"],
    );
    run.wait_for("a checkpoint", 1, |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    });
    cluster.power_off("node-c");
    let finished = run.wait(DEADLINE);
    let report = assert_recovered_once(&run, &finished, &plain);
    assert_eq!(
        report["recoveries"][0]["hosts_lost"],
        serde_json::json!(["node-c"]),
        "{report}"
    );
    assert_eq!(report["recoveries"][0]["ranks"], 2, "{report}");
    assert!(
        finished
            .stderr
            .contains("relaunched narrower: 3 -> 2 ranks (the hosts left have 2 slots)"),
        "{}",
        finished.stderr
    );
    let hosts = finished
        .report()
        .hosts
        .expect("heat2d names the ranks' hosts");
    assert_eq!(
        hosts,
        ["node-a", "node-b"],
        "where the relaunched ranks ran"
    );
}

/// The ranks registered with the pcmd at `socket`, as (rank, pid); `None` when none answers.
fn registered_at(socket: &Path) -> Option<Vec<(u32, u32)>> {
    let status = pcm_proto::client::Client::connect(socket)
        .and_then(|mut c| c.status())
        .ok()?;
    let ranks = status.jobs.iter().flat_map(|j| &j.ranks);
    Some(ranks.map(|r| (r.rank.0, r.pid)).collect())
}

/// `--daemon auto` (pcmrun's default): the job's ranks register with the node's own pcmd,
/// at the socket every tool finds (here `PCM_DAEMON=DIR/{host}.sock`), which is where the
/// node's IOS agent looks. With none running, pcmrun starts one there and stops it at the
/// end. With one running already (the agent's, keeping checkpoints elsewhere), the job uses
/// it, keeps its checkpoints in the job's own directory all the same, and leaves it running.
#[test]
fn given_daemon_auto_then_the_job_registers_with_the_nodes_pcmd_where_an_agent_looks() {
    let _lock = mpi_lock();
    let args = args_for(4.0);
    let plain = plain_checksum(&args);
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("{host}.sock").display().to_string();
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let socket = dir.path().join(format!("{host}.sock"));
    let run_auto = |label: &str| {
        let sub = dir.path().join(label);
        std::fs::create_dir_all(&sub).unwrap();
        let mut pcmrun = PcmrunCommand::new(&sub, 2);
        pcmrun
            .with_node_daemons(&template)
            .command()
            .args(["--checkpoint-interval", "0.5"]);
        let mut run = Run {
            job: pcmrun.start("heat2d", &args, &sub, "pcmrun"),
        };
        run.wait_for("a checkpoint", 1, |e| {
            matches!(e, RunEvent::Checkpointed { .. })
        });
        let ranks = registered_at(&socket).expect("a pcmd answers at the node's socket");
        let pids: Vec<u32> = run.pids().iter().map(|p| p.as_raw() as u32).collect();
        assert_eq!(ranks.len(), 2, "ranks at the node's pcmd: {ranks:?}");
        assert!(
            ranks.iter().all(|(_, pid)| pids.contains(pid)),
            "{ranks:?} vs {pids:?}"
        );
        let finished = run.wait(DEADLINE);
        assert_eq!(finished.code, Some(0), "{}", finished.stderr);
        assert_eq!(finished.report().checksum, plain);
        assert!(
            !complete_checkpoints(run.job.checkpoints()).is_empty(),
            "no checkpoint in the job's directory {}",
            run.job.checkpoints().display()
        );
        finished
    };
    // No pcmd runs: pcmrun starts the node's, and stops it at the end.
    let finished = run_auto("first");
    assert!(
        finished.stderr.contains("started the node's pcmd at"),
        "{}",
        finished.stderr
    );
    assert!(
        registered_at(&socket).is_none(),
        "the pcmd pcmrun started still runs"
    );
    // The node's pcmd runs already, with another checkpoint directory (an agent's).
    let elsewhere = dir.path().join("agent-checkpoints");
    let mut pcmd = Command::new(bin("pcmd"));
    pcmd.arg("--socket")
        .arg(&socket)
        .arg("serve")
        .arg("--checkpoint-dir")
        .arg(&elsewhere);
    let _pcmd = mpi_ios_tests::Group::start(pcmd, dir.path(), "node-pcmd");
    wait_until(Duration::from_secs(10), "the node's pcmd answers", || {
        registered_at(&socket).is_some()
    });
    let finished = run_auto("second");
    assert!(
        finished.stderr.contains("using the node's pcmd at"),
        "{}",
        finished.stderr
    );
    assert!(
        registered_at(&socket).is_some(),
        "pcmrun stopped the node's pcmd"
    );
    assert!(
        complete_checkpoints(&elsewhere).is_empty(),
        "the job's checkpoints went to the pcmd's own directory"
    );
}

/// heat2d under pcmrun on `cluster`, rank 0 on node-a, rank 1 on node-b, the other nodes
/// spares of the hostfile, a checkpoint every half second; `env` goes to pcmrun (and, for
/// `PCM_*`, to the ranks).
fn start_on_nodes(cluster: &Cluster, dir: &Path, args: &[String], env: &[(&str, String)]) -> Run {
    start_on_nodes_with(cluster, dir, args, env, &[])
}

/// [`start_on_nodes`] with more pcmrun `options`.
fn start_on_nodes_with(
    cluster: &Cluster,
    dir: &Path,
    args: &[String],
    env: &[(&str, String)],
    more: &[&str],
) -> Run {
    let hostfile = cluster.hostfile_for(&["node-a", "node-b"]);
    start_on_hostfile(cluster, &hostfile, 2, dir, args, env, more)
}

/// heat2d under pcmrun with `ranks` ranks on the cluster's `hostfile`, checkpoints every
/// 0.5 s, `env` and the pcmrun options `more`.
fn start_on_hostfile(
    cluster: &Cluster,
    hostfile: &Path,
    ranks: u32,
    dir: &Path,
    args: &[String],
    env: &[(&str, String)],
    more: &[&str],
) -> Run {
    let mut options = cluster.pcmrun_args(hostfile);
    options.extend(["--checkpoint-interval", "0.5", "--retry-delay", "0.2"].map(String::from));
    options.extend(more.iter().map(|o| (*o).to_owned()));
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    let cluster_env = cluster.pcmrun_env(hostfile);
    let env: Vec<(&str, String)> = cluster_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .chain(env.iter().cloned())
        .collect();
    start_ranks_with(ranks, dir, "heat2d", args, &options, &env)
}

/// pcmrun on three hosts is killed with SIGKILL (it can clean nothing up): the launch ends
/// with it, and so do the pcmds it started on the hosts (their standard input, the
/// launcher's connection, closes); nothing of the job is left on any node, and the next
/// pcmrun removes the private directory the killed one left.
#[test]
fn given_pcmrun_killed_on_several_hosts_then_nothing_of_the_job_is_left_on_them() {
    if let Err(why) = Cluster::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let _lock = mpi_lock();
    let args = args_for(20.0);
    let cluster = Cluster::new(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut run = start_on_nodes(&cluster, dir.path(), &args, &[]);
    run.wait_for("a checkpoint", 1, |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    });
    for node in ["node-a", "node-b", "node-c"] {
        assert!(
            !cluster.processes_on(node).is_empty(),
            "{node} runs nothing of the job (a pcmd at least)"
        );
    }
    let killed = run.pid();
    kill(killed, Signal::SIGKILL).unwrap();
    let finished = run.wait(DEADLINE);
    assert_eq!(
        finished.code, None,
        "pcmrun was not killed:\n{}",
        finished.stderr
    );
    for node in ["node-a", "node-b", "node-c"] {
        wait_until(Duration::from_secs(15), &format!("{node} empty"), || {
            cluster.processes_on(node).is_empty()
        });
    }
    let left = |pid: Pid| {
        let base = std::env::var_os("XDG_RUNTIME_DIR")
            .map(std::path::PathBuf::from)
            .filter(|d| d.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        std::fs::read_dir(base)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("pcmrun-{pid}-"))
            })
            .count()
    };
    assert!(
        left(killed) > 0,
        "the killed pcmrun left no private directory"
    );
    let dry = Command::new(bin("pcmrun"))
        .args(["-np", "1", "--daemon", "none", "--checkpoint-interval", "0"])
        .arg(program("heat2d-plain"))
        .args(["--rows", "16", "--cols", "16", "--iters", "10"])
        .env("PCMRUN_LAUNCHER", Runtime::current().launcher())
        .envs(Runtime::current().test_env())
        .output()
        .unwrap();
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    assert_eq!(
        left(killed),
        0,
        "the next pcmrun did not remove the killed one's directory"
    );
}

/// Rank 1, on node-b (another host than pcmrun's), is stopped with SIGSTOP after a
/// checkpoint; pcmrun cannot see the stopped process there, but the job's silence past
/// `--stall-timeout` makes it probe the hosts (all answer) and stop the launch; it relaunches
/// from the newest checkpoint and the job ends with the plain run's checksum, nothing left
/// on the nodes (seen from outside before: no action in 67 s on three hosts).
#[test]
fn given_a_rank_on_another_host_stopped_with_sigstop_then_pcmrun_relaunches_within_the_stall_timeout(
) {
    if let Err(why) = Cluster::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let _lock = mpi_lock();
    let args = args_for(JOB_SECONDS);
    let plain = plain_checksum(&args);
    let cluster = Cluster::new(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let timeout = 4.0;
    let mut run = start_on_nodes_with(&cluster, dir.path(), &args, &[], &["--stall-timeout", "4"]);
    run.wait_for("a checkpoint", 1, |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    });
    let victim = run.pid_of(1, 1);
    kill(victim, Signal::SIGSTOP).unwrap();
    let stopped_at = Instant::now();
    run.wait_for("the relaunch", 2, |e| matches!(e, RunEvent::Started { .. }));
    let acted = stopped_at.elapsed().as_secs_f64();
    eprintln!(
        "rank 1 stopped on node-b; relaunched {acted:.1} s later (--stall-timeout {timeout})"
    );
    let finished = run.wait(DEADLINE);
    let report = assert_recovered_once(&run, &finished, &plain);
    let reason = report["recoveries"][0]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("the job stalled"), "{report}");
    // The stall timeout, the launch's SIGTERM grace (10 s) for a stopped process, the
    // retry delay and the start of the relaunch.
    assert!(
        acted < timeout + 10.0 + 6.0,
        "pcmrun took {acted:.1} s to act on a stall of --stall-timeout {timeout}"
    );
    for node in ["node-a", "node-b", "node-c"] {
        wait_until(Duration::from_secs(15), &format!("{node} empty"), || {
            cluster.processes_on(node).is_empty()
        });
    }
    assert_nothing_left(&run, &finished);
}

/// Rank 1 moves from node-b to node-c (a scripted move), and node-b is then powered off. No
/// rank runs there any more, so the job must not be touched: under MPICH, whose launcher
/// lets a host go once its ranks have left, pcmrun says node-b is lost but unused and the
/// job ends in its first launch with the plain run's checksum (before, pcmrun stopped the
/// launch and killed the healthy ranks). Open MPI 4's launcher keeps a daemon on every host
/// of the launch, and a launch that lost one computes on but never ends, so there pcmrun
/// relaunches from a checkpoint without node-b at once.
#[test]
fn given_rank_1_moved_off_node_b_then_powering_node_b_off_does_not_stop_the_job() {
    if let Err(why) = Cluster::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let _lock = mpi_lock();
    let (args, rate) = sized_args(10.0);
    let plain = plain_checksum(&args);
    let cluster = Cluster::new(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // About two seconds in: after the first checkpoints, well before the end.
    let move_at = (rate * 2.0).max(100.0) as u64;
    let schedule = ("PCM_SCHEDULE", format!("{move_at}:1@node-c"));
    let mut run = start_on_nodes(&cluster, dir.path(), &args, &[schedule]);
    run.wait_for("rank 1 moved to node-c", 1, |e| {
        matches!(e, RunEvent::Migrated { placed, .. } if placed.iter().any(|(r, h)| r.0 == 1 && h.as_str() == "node-c"))
    });
    // The departed process ends by itself (MPICH: within a second).
    let departed_gone = || {
        cluster.processes_on("node-b").into_iter().all(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .map(|c| !c.contains("heat2d") && !c.contains("hydra_pmi_proxy"))
                .unwrap_or(true)
        })
    };
    if Runtime::current() == Runtime::Mpich {
        wait_until(
            Duration::from_secs(10),
            "the departed rank gone from node-b",
            departed_gone,
        );
    }
    cluster.power_off("node-b");
    let finished = run.wait(DEADLINE);
    assert_ended_with(&finished, &plain);
    let report = run.report();
    match Runtime::current() {
        Runtime::Mpich => {
            assert_eq!(report["launches"], 1, "the job was relaunched: {report}");
            assert_eq!(report["recoveries"], serde_json::json!([]), "{report}");
            assert_eq!(
                report["hosts_lost_unused"],
                serde_json::json!(["node-b"]),
                "{report}"
            );
        }
        Runtime::OpenMpi => {
            // Its launch cannot end without node-b: relaunched at once, without node-b.
            assert_eq!(report["launches"], 2, "{report}");
            let recovery = &report["recoveries"][0];
            assert_eq!(recovery["start"], "from_checkpoint", "{report}");
            assert_eq!(
                recovery["hosts_lost"],
                serde_json::json!(["node-b"]),
                "{report}"
            );
            // What node-b still held: rank 1's departed process, which Open MPI 4 keeps
            // until the launch ends.
            assert!(
                recovery["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("lost the departed process of rank 1 (pid "),
                "{report}"
            );
        }
    }
    let hosts = finished
        .report()
        .hosts
        .expect("heat2d names the ranks' hosts");
    assert_eq!(hosts, ["node-a", "node-c"], "where the ranks ended");
    for node in ["node-a", "node-c"] {
        wait_until(Duration::from_secs(10), &format!("{node} empty"), || {
            cluster.processes_on(node).is_empty()
        });
    }
    assert_nothing_left(&run, &finished);
}

/// Inside a Slurm allocation (its variables, as `salloc` and `sbatch` set them) and without
/// `--hostfile`, pcmrun takes the allocation's hosts: the launch gets them as a hostfile in
/// the runtime's form, and PCM gets the same file. A malformed host list is named.
#[test]
fn given_a_slurm_allocation_then_its_hosts_are_the_launchs() {
    let dry_run = |nodelist: &str| {
        Command::new(bin("pcmrun"))
            .env("PCMRUN_LAUNCHER", Runtime::current().launcher())
            .env("SLURM_JOB_ID", "4242")
            .env("SLURM_JOB_NODELIST", nodelist)
            .env("SLURM_TASKS_PER_NODE", "2,1(x2)")
            .args(["--dry-run", "-np", "4", "--daemon", "none"])
            .arg(program("heat2d"))
            .output()
            .unwrap()
    };
    let output = dry_run("cn[07-09]");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stderr}");
    let line = |host: &str, slots: u32| Runtime::current().hostfile_line(host, slots);
    let expected = format!(
        "{}, {}, {}",
        line("cn07", 2),
        line("cn08", 1),
        line("cn09", 1)
    );
    assert!(stderr.contains(&expected), "hosts not taken: {stderr}");
    let flag = Runtime::current().hostfile_args(Path::new("x"))[0]
        .to_string_lossy()
        .into_owned();
    assert!(
        stdout.contains(&format!("{flag} ")) && stdout.contains("PCM_HOSTFILE="),
        "the launch does not get the allocation's hostfile: {stdout}"
    );
    let output = dry_run("cn[07-");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("SLURM_JOB_NODELIST") && stderr.contains("unbalanced"),
        "{stderr}"
    );
}
