//! A `pcmrun` job as the tests and the main job's fault act run it: `pcmrun -np N --daemon
//! start` with the runtime's launcher, and its checkpoint directory, typed event stream and
//! report in one directory; then waiting for events, and reading the report.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pcm_proto::run::RunEvent;
use pcmrun::EventRecord;

use crate::{bin, Finished, Group, Runtime, RuntimeExt as _};

/// Why [`PcmrunJob::wait_for`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// pcmrun ended first.
    #[error("pcmrun ended before {what}:\n{stderr}")]
    Ended {
        /// What was waited for.
        what: String,
        /// What pcmrun (and the job) printed on stderr.
        stderr: String,
    },
    /// The deadline passed.
    #[error("no {what} within {timeout:?}:\n{stderr}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The deadline.
        timeout: Duration,
        /// What pcmrun (and the job) printed on stderr so far.
        stderr: String,
    },
}

/// A `pcmrun` command being put together; [`PcmrunCommand::start`] runs it.
#[derive(Debug)]
pub struct PcmrunCommand {
    command: Command,
    events: PathBuf,
    report: PathBuf,
    checkpoints: PathBuf,
    /// `--daemon`'s value.
    daemon: &'static str,
}

impl PcmrunCommand {
    /// `pcmrun -np ranks --daemon start` (unless [`PcmrunCommand::with_node_daemons`]) with this runtime's launcher, checkpoints, events
    /// and report in `dir`; `PCM_DAEMON` and `PCM_CHECKPOINT_INTERVAL` of the caller's
    /// environment are not passed on.
    pub fn new(dir: &Path, ranks: u32) -> PcmrunCommand {
        PcmrunCommand::under(
            Command::new(bin("pcmrun")),
            dir,
            ranks,
            &dir.join("checkpoints"),
        )
    }

    /// As [`PcmrunCommand::new`], with the checkpoint directory `checkpoints` (another
    /// job's, to run a second job in its series) instead of `dir/checkpoints`.
    pub fn with_checkpoints(dir: &Path, ranks: u32, checkpoints: &Path) -> PcmrunCommand {
        PcmrunCommand::under(Command::new(bin("pcmrun")), dir, ranks, checkpoints)
    }

    /// As [`PcmrunCommand::new`], with pcmrun run through `wrapper` (for example `salloc
    /// -N1 -n2`, to which pcmrun's path and arguments are appended).
    pub fn wrapped(mut wrapper: Command, dir: &Path, ranks: u32) -> PcmrunCommand {
        wrapper.arg(bin("pcmrun"));
        PcmrunCommand::under(wrapper, dir, ranks, &dir.join("checkpoints"))
    }

    fn under(mut command: Command, dir: &Path, ranks: u32, checkpoints: &Path) -> PcmrunCommand {
        let events = dir.join("events.jsonl");
        let report = dir.join("report.json");
        let checkpoints = checkpoints.to_owned();
        command
            .env("PCMRUN_LAUNCHER", Runtime::current().launcher())
            .env_remove("PCM_DAEMON")
            .env_remove("PCM_CHECKPOINT_INTERVAL")
            .args(["-np", &ranks.to_string()])
            .arg("--checkpoint-dir")
            .arg(&checkpoints)
            .arg("--events")
            .arg(&events)
            .arg("--report")
            .arg(&report);
        PcmrunCommand {
            command,
            events,
            report,
            checkpoints,
            daemon: "start",
        }
    }

    /// The job uses the nodes' own pcmds (`--daemon auto`), found at `template`
    /// (`PCM_DAEMON`, `{host}` for the host), where the nodes' agents find them too,
    /// instead of pcmds of its own in a private directory.
    pub fn with_node_daemons(&mut self, template: &str) -> &mut PcmrunCommand {
        self.command.env("PCM_DAEMON", template);
        self.daemon = "auto";
        self
    }

    /// The command, for more options and environment before the program.
    pub fn command(&mut self) -> &mut Command {
        &mut self.command
    }

    /// Starts pcmrun on `program` (a binary of this build) with `args`, output to
    /// `dir/label.{out,err}`.
    pub fn start(mut self, program: &str, args: &[String], dir: &Path, label: &str) -> PcmrunJob {
        if let Err(e) = std::fs::create_dir_all(&self.checkpoints) {
            panic!("cannot create {}: {e}", self.checkpoints.display());
        }
        self.command
            .args(["--daemon", self.daemon])
            .arg(crate::program(program))
            .args(args);
        PcmrunJob {
            group: Some(Group::start(self.command, dir, label)),
            events: self.events,
            report: self.report,
            checkpoints: self.checkpoints,
        }
    }
}

/// A running (or finished) pcmrun job.
#[derive(Debug)]
pub struct PcmrunJob {
    group: Option<Group>,
    events: PathBuf,
    report: PathBuf,
    checkpoints: PathBuf,
}

impl PcmrunJob {
    /// The checkpoint directory.
    pub fn checkpoints(&self) -> &Path {
        &self.checkpoints
    }

    /// The events written so far.
    pub fn events(&self) -> Vec<EventRecord> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Waits, at most `timeout`, for the first event that `wanted` accepts.
    pub fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        wanted: impl Fn(&EventRecord) -> bool,
    ) -> Result<EventRecord, WaitError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.events().into_iter().find(|r| wanted(r)) {
                return Ok(r);
            }
            if !self.running() {
                return Err(WaitError::Ended {
                    what: what.to_owned(),
                    stderr: self.stderr_so_far(),
                });
            }
            if Instant::now() > deadline {
                return Err(WaitError::Timeout {
                    what: what.to_owned(),
                    timeout,
                    stderr: self.stderr_so_far(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// pcmrun's process group.
    ///
    /// # Panics
    /// After [`PcmrunJob::wait`].
    pub fn group(&mut self) -> &mut Group {
        self.group.as_mut().expect("pcmrun still runs")
    }

    /// Whether pcmrun still runs.
    pub fn running(&mut self) -> bool {
        self.group.as_mut().is_some_and(Group::running)
    }

    /// What pcmrun and the job printed on stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.group
            .as_ref()
            .map(Group::stderr_so_far)
            .unwrap_or_default()
    }

    /// pcmrun's process id (its process group's too).
    ///
    /// # Panics
    /// After [`PcmrunJob::wait`].
    pub fn pid(&self) -> u32 {
        self.group
            .as_ref()
            .map(Group::pid)
            .expect("pcmrun still runs")
    }

    /// Waits for pcmrun to end, at most `timeout` (then kills it and panics).
    ///
    /// # Panics
    /// If called twice, or on timeout.
    pub fn wait(&mut self, timeout: Duration) -> Finished {
        self.group
            .take()
            .expect("pcmrun was already waited for")
            .wait(timeout)
    }

    /// pcmrun's report (written when it ends), or why there is none.
    pub fn report(&self) -> Result<serde_json::Value, String> {
        let text = std::fs::read_to_string(&self.report)
            .map_err(|e| format!("no report at {}: {e}", self.report.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| format!("a report that does not parse ({e}): {text:?}"))
    }

    /// Every process pcmrun saw start (the launcher's ranks and replacements, in every
    /// launch), by pid.
    pub fn pids(&self) -> Vec<u32> {
        self.events()
            .into_iter()
            .filter_map(|r| match r.event {
                RunEvent::Started { pid, .. } => Some(pid),
                _ => None,
            })
            .collect()
    }
}

/// Prints pcmrun's own lines of `finished` (its summary of the run), then checks that it
/// ended with status 0 and the plain run's checksum `plain`.
pub fn assert_ended_with(finished: &Finished, plain: &str) {
    let said: Vec<&str> = finished
        .stderr
        .lines()
        .filter(|l| l.starts_with("pcmrun:"))
        .collect();
    eprintln!("{}", said.join("\n"));
    assert_eq!(
        finished.code,
        Some(0),
        "pcmrun failed:\n{}",
        finished.stderr
    );
    assert_eq!(
        finished.report().checksum,
        plain,
        "the job computed something else than the plain run"
    );
}
