//! The decisions of `pcmrun`, as a pure state machine: fed the run events of the job's
//! processes and the launcher's end, it says whether the job is done, with which exit
//! status, or must be relaunched from its newest checkpoint; it keeps what the progress
//! lines and the final report show. No I/O and no clock of its own: callers pass the time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pcm_proto::run::RunEvent;
use pcm_proto::{HostName, Rank};
use serde::Serialize;

use crate::runtime::LauncherReportedEnd;

/// Exit status of a job ended by PCM because a reconfiguration missed its deadline: a
/// temporary failure, worth a restart (the value `pcm` passes to `MPI_Abort`).
pub const RECONFIGURE_TIMEOUT_EXIT: i32 = 75;

/// Exit status of `pcmrun` when the user interrupted it (SIGINT, SIGTERM, or SIGHUP when
/// its terminal closed).
pub const INTERRUPTED_EXIT: i32 = 130;

/// A signal's name for people, with what it usually means (`SIGHUP (the terminal closed)`).
pub fn signal_name(signal: i32) -> String {
    match signal {
        1 => "SIGHUP (the terminal closed)".to_owned(),
        2 => "SIGINT (Ctrl-C)".to_owned(),
        15 => "SIGTERM".to_owned(),
        other => format!("signal {other}"),
    }
}

/// Why `pcmrun` stops after the signal `signal` (`during_recovery`: while it waited to
/// relaunch): the job is not restarted, and its checkpoints stay for a rerun.
pub fn interrupted_reason(signal: i32, during_recovery: bool) -> String {
    let when = if during_recovery {
        "during recovery: the job is not relaunched"
    } else {
        "the job was stopped and is not restarted"
    };
    format!(
        "interrupted by {} {when}; its checkpoints are kept (the same command resumes it)",
        signal_name(signal)
    )
}

/// What the user asked for about recovery.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Whether the job takes checkpoints (without them a lost process cannot be recovered).
    pub checkpoints: bool,
    /// Most relaunches after failures in one `pcmrun`.
    pub max_restarts: u32,
    /// Wait before the first relaunch; doubled for each further one, at most [`MAX_DELAY`].
    pub first_delay: Duration,
    /// How the first launch starts: [`Start::FromCheckpoint`] with `--restart`,
    /// [`Start::IfAny`] for the rerun of a run that did not finish.
    pub first: Start,
    /// How long a launch may go without any sign (progress, a checkpoint, any run event)
    /// before it counts as stalled: stopped and relaunched from the newest checkpoint.
    pub stall_timeout: Duration,
}

/// How much later than the first process seen gone another must be seen gone to count as
/// ended by the launcher because of it, rather than lost too: two polls of the driver (5 ms
/// apart), so that the order of two deaths in one poll never decides.
pub const FOLLOWED_AFTER: Duration = Duration::from_millis(10);

/// How old the newest progress may be before the progress line says "no progress for N s"
/// instead of a rate (rank 0 reports progress about once a second).
pub const STALE_PROGRESS: Duration = Duration::from_secs(2);

/// Longest wait between relaunches.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// How a launch is to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Start {
    /// From iteration 0.
    Fresh,
    /// From the newest complete checkpoint; failing if there is none (`PCM_RESTART=require`).
    FromCheckpoint,
    /// From the newest complete checkpoint if one is intact, else from iteration 0
    /// (`PCM_RESTART=1`): the rerun of a run of the same command that did not finish.
    IfAny,
}

/// How the launcher ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LauncherEnd {
    /// It exited with this status.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
}

impl LauncherEnd {
    /// The status a shell would report (128 + signal for a killed launcher).
    pub fn code(self) -> i32 {
        match self {
            LauncherEnd::Exited(code) => code,
            LauncherEnd::Signaled(signal) => 128 + signal,
        }
    }
}

/// What to do after a launch ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Stop with this exit status; `reason` says why when it is not a plain success.
    Done {
        /// `pcmrun`'s exit status.
        code: i32,
        /// For people, when there is something to say.
        reason: Option<String>,
    },
    /// Start the job again after `delay`.
    Relaunch {
        /// From where.
        start: Start,
        /// How long to wait first.
        delay: Duration,
        /// What was lost, for people.
        reason: String,
    },
}

/// One process of the current launch.
#[derive(Debug, Clone)]
struct Process {
    rank: Rank,
    exited: Option<i32>,
    /// When the driver saw it gone (on this host only).
    gone: Option<Instant>,
}

/// One recovery, for the final report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recovery {
    /// What was lost, for people.
    pub reason: String,
    /// Seconds since `pcmrun` started when the failed launch ended.
    pub failed_at_s: f64,
    /// The last iteration rank 0 reported before the failure.
    pub last_iteration: u64,
    /// How the relaunch started.
    pub start: Start,
    /// Iteration the relaunch resumed from, once it did.
    pub resumed_from: Option<u64>,
    /// Iterations computed again: `last_iteration - resumed_from` (at least; rank 0 reports
    /// about once a second).
    pub iterations_lost: Option<u64>,
    /// Seconds from the end of the failed launch to the resumed job's first iteration.
    pub seconds_to_resume: Option<f64>,
    /// Hosts of the hostfile that no longer answered, left out of the relaunch.
    pub hosts_lost: Vec<HostName>,
    /// Hosts of the agents' pool the relaunch used instead (`--hosts-from-pool`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts_added: Vec<HostName>,
    /// The relaunch's width, when it differs from the failed launch's (`--np-min`: fewer
    /// slots left; or the width the job had been resized to).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<u32>,
}

/// The typed summary of a `pcmrun` (`--report FILE`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `pcmrun`'s exit status.
    pub exit_code: i32,
    /// Why it stopped, when not a plain success.
    pub reason: Option<String>,
    /// Launches made (1 + relaunches).
    pub launches: u32,
    /// Each recovery.
    pub recoveries: Vec<Recovery>,
    /// Migrations seen (all launches).
    pub migrations: u64,
    /// Resizes seen (all launches).
    pub resizes: u64,
    /// Checkpoints committed (all launches).
    pub checkpoints: u64,
    /// The newest committed checkpoint's iteration.
    pub last_checkpoint: Option<u64>,
    /// The iteration the first launch resumed from: an earlier run's checkpoint (`--restart`,
    /// or the rerun of a run of the same command that did not finish).
    pub resumed_at_start: Option<u64>,
    /// Hosts that stopped answering while no rank of the job ran there any more (every
    /// rank had moved away): the job carried on without them, and later launches leave
    /// them out.
    pub hosts_lost_unused: Vec<HostName>,
    /// Hosts of the hostfile that their owner had given back to the pool (`ios-agent
    /// leave`), left out of the launches from then on.
    pub hosts_given_back: Vec<HostName>,
    /// The last iteration rank 0 reported.
    pub last_iteration: Option<u64>,
    /// Seconds from start to end.
    pub seconds: f64,
    /// When pcmrun started, seconds since the Unix epoch (the origin of every `*_s` time
    /// here and of the `--events` records), so that other programs can line up their own
    /// clocks with them.
    pub started_unix_s: f64,
}

/// The supervisor of one `pcmrun`.
#[derive(Debug)]
pub struct Supervisor {
    policy: Policy,
    started: Instant,
    launches: u32,
    /// Processes of the current launch, by host and pid.
    processes: BTreeMap<(HostName, u32), Process>,
    /// Where each rank's newest process runs (a replacement overrides its predecessor).
    placement: BTreeMap<Rank, HostName>,
    /// Each rank's newest process (host, pid): the one that must end the job.
    newest: BTreeMap<Rank, (HostName, u32)>,
    /// A process said it is ending the job with this status.
    aborting: Option<(i32, String)>,
    /// Last progress of the current launch: (time, iteration).
    progress: Option<(Instant, u64)>,
    /// The progress before it, for the rate.
    previous_progress: Option<(Instant, u64)>,
    migrations: u64,
    checkpoints: u64,
    last_checkpoint: Option<u64>,
    last_iteration: Option<u64>,
    /// Whether a checkpoint exists to resume from (committed in this run, or resumed from).
    resumable: bool,
    recoveries: Vec<Recovery>,
    /// When the failed launch ended, while its relaunch has not resumed yet.
    failed_at: Option<Instant>,
    /// The iteration the first launch resumed from (an earlier run's checkpoint).
    resumed_at_start: Option<u64>,
    /// The application failed by itself.
    failed_by_itself: bool,
    /// Why the current launch is being stopped as stalled.
    stalled: Option<String>,
    /// How the current (or next) launch starts.
    launch_start: Start,
    /// See [`Report::hosts_lost_unused`].
    hosts_lost_unused: Vec<HostName>,
    /// See [`Report::hosts_given_back`].
    hosts_given_back: Vec<HostName>,
    /// The process the launcher named as failed, in the current launch.
    named_by_launcher: Option<(HostName, u32)>,
    /// How the launcher says that process ended.
    named_ended: Option<LauncherReportedEnd>,
    /// The host found lost, for which pcmrun stopped the current launch.
    host_lost: Option<HostName>,
    /// The width the last resize of the current launch left the job at.
    resized_to: Option<u32>,
    /// Resizes seen (all launches).
    resizes: u64,
}

impl Supervisor {
    /// A supervisor for a run that starts at `now`.
    pub fn new(policy: Policy, now: Instant) -> Self {
        Supervisor {
            policy,
            started: now,
            launches: 0,
            processes: BTreeMap::new(),
            placement: BTreeMap::new(),
            newest: BTreeMap::new(),
            aborting: None,
            progress: None,
            previous_progress: None,
            migrations: 0,
            checkpoints: 0,
            last_checkpoint: None,
            last_iteration: None,
            resumable: policy.first != Start::Fresh,
            resumed_at_start: None,
            failed_by_itself: false,
            stalled: None,
            launch_start: policy.first,
            recoveries: Vec::new(),
            failed_at: None,
            hosts_lost_unused: Vec::new(),
            hosts_given_back: Vec::new(),
            named_by_launcher: None,
            named_ended: None,
            host_lost: None,
            resized_to: None,
            resizes: 0,
        }
    }

    /// Launches made so far.
    pub fn launches(&self) -> u32 {
        self.launches
    }

    /// How the first launch starts.
    pub fn first_start(&self) -> Start {
        self.policy.first
    }

    /// Whether the job ended because the application failed by itself (its checkpoints are
    /// then not worth resuming).
    pub fn failed_by_itself(&self) -> bool {
        self.failed_by_itself
    }

    /// A launch begins: forget the processes of the one before.
    pub fn launching(&mut self) {
        self.launches += 1;
        self.processes.clear();
        self.placement.clear();
        self.newest.clear();
        self.aborting = None;
        self.named_by_launcher = None;
        self.named_ended = None;
        self.host_lost = None;
        self.resized_to = None;
        self.stalled = None;
        self.progress = None;
        self.previous_progress = None;
    }

    /// Takes one event of the current launch; returns a line for people when it is worth
    /// one (a migration, a resumed job).
    pub fn on_event(&mut self, event: RunEvent, now: Instant) -> Option<String> {
        match event {
            RunEvent::Started {
                rank, pid, host, ..
            } => {
                self.placement.insert(rank, host.clone());
                self.newest.insert(rank, (host.clone(), pid));
                self.processes.insert(
                    (host, pid),
                    Process {
                        rank,
                        exited: None,
                        gone: None,
                    },
                );
                None
            }
            RunEvent::Exited { pid, host, code } => {
                if let Some(process) = self.processes.get_mut(&(host, pid)) {
                    process.exited = Some(code);
                }
                None
            }
            RunEvent::Aborting { code, reason } => {
                self.aborting = Some((code, reason));
                None
            }
            RunEvent::Progress { iteration } => {
                self.progressed(iteration, now);
                if self.launches == 1
                    && self.policy.first == Start::IfAny
                    && self.resumed_at_start.is_none()
                    && self.last_checkpoint.is_none()
                {
                    // The rerun found no intact checkpoint and started from iteration 0.
                    self.resumable = false;
                }
                if self.failed_at.is_some() {
                    // A fresh relaunch resumes at its first progress.
                    return self.resumed(0, now);
                }
                None
            }
            RunEvent::Checkpointed { iteration } => {
                self.checkpoints += 1;
                self.last_checkpoint = Some(iteration);
                self.resumable = true;
                self.progressed(iteration, now);
                None
            }
            RunEvent::Restarted { iteration } => {
                self.resumable = true;
                self.progressed(iteration, now);
                if self.launches == 1 && self.failed_at.is_none() {
                    self.resumed_at_start = Some(iteration);
                    return Some(format!(
                        "resumed from the checkpoint at iteration {iteration}"
                    ));
                }
                self.resumed(iteration, now)
            }
            // Facts for benchmarks and tests: the progress events serve pcmrun.
            RunEvent::LoopStarted { .. }
            | RunEvent::Stored { .. }
            | RunEvent::Loaded { .. }
            | RunEvent::HostProbed { .. } => None,
            RunEvent::Migrated {
                iteration, placed, ..
            } => {
                self.migrations += 1;
                self.progressed(iteration, now);
                for (rank, host) in &placed {
                    self.placement.insert(*rank, host.clone());
                }
                let moves: Vec<String> = placed
                    .iter()
                    .map(|(rank, host)| format!("rank {rank} to {host}"))
                    .collect();
                Some(format!("iteration {iteration}: moved {}", moves.join(", ")))
            }
            RunEvent::Resized {
                iteration,
                from,
                to,
                hosts,
                ..
            } => {
                self.progressed(iteration, now);
                self.resizes += 1;
                self.resized_to = Some(to);
                self.placement = (0..).map(Rank).zip(hosts).collect();
                Some(format!(
                    "iteration {iteration}: resized from {from} to {to} ranks"
                ))
            }
        }
    }

    fn progressed(&mut self, iteration: u64, now: Instant) {
        if self.progress.is_some_and(|(_, i)| i == iteration) {
            return;
        }
        self.previous_progress = self.progress;
        self.progress = Some((now, iteration));
        self.last_iteration = Some(iteration);
    }

    /// The relaunch after a failure resumed from `iteration`.
    fn resumed(&mut self, iteration: u64, now: Instant) -> Option<String> {
        let failed_at = self.failed_at.take()?;
        let recovery = self.recoveries.last_mut()?;
        let seconds = now.duration_since(failed_at).as_secs_f64();
        let lost = recovery.last_iteration.saturating_sub(iteration);
        recovery.resumed_from = Some(iteration);
        recovery.iterations_lost = Some(lost);
        recovery.seconds_to_resume = Some(seconds);
        Some(format!(
            "resumed at iteration {iteration}, {seconds:.1} s after the failure; at least {lost} iterations are computed again"
        ))
    }

    /// The launch ended as `end`; `interrupted` is the signal by which the user asked
    /// `pcmrun` to stop, if one came.
    pub fn on_launcher_end(
        &mut self,
        end: LauncherEnd,
        interrupted: Option<i32>,
        now: Instant,
    ) -> Verdict {
        let code = end.code();
        if let Some(signal) = interrupted {
            return Verdict::Done {
                code: INTERRUPTED_EXIT,
                reason: Some(interrupted_reason(signal, false)),
            };
        }
        // A launcher's 0 is trusted only if every rank's newest process said it exited:
        // hydra has been seen exiting 0 after a replacement was killed while starting, its
        // proxy failing an assertion and the other ranks killed in the clean-up.
        let never_exited: Vec<String> = self
            .newest
            .iter()
            .filter(|(_, key)| self.processes.get(key).is_some_and(|p| p.exited.is_none()))
            .map(|(rank, (host, pid))| format!("rank {rank} (pid {pid} on {host})"))
            .collect();
        if end == LauncherEnd::Exited(0) && never_exited.is_empty() && self.stalled.is_none() {
            return Verdict::Done {
                code: 0,
                reason: None,
            };
        }
        let judged = if self.stalled.is_some() {
            // pcmrun stopped it: its processes' statuses say nothing of their own.
            None
        } else {
            self.processes.iter().find_map(|((host, pid), p)| {
                p.exited
                    .filter(|&c| c != 0 && c != RECONFIGURE_TIMEOUT_EXIT && !is_mpi_abort(c))
                    .map(|c| (host.clone(), *pid, p.rank, c))
            })
        };
        if let Some((host, pid, rank, own)) = judged {
            self.failed_by_itself = true;
            return Verdict::Done {
                code: if code == 0 { own } else { code },
                reason: Some(format!(
                    "rank {rank} (pid {pid} on {host}) ended with exit status {own}: the application failed by itself, so the job is not restarted"
                )),
            };
        }
        // The first processes seen gone without an exit are the lost ones; those seen gone
        // later were ended by the launcher because of them.
        let first_gone = self
            .processes
            .values()
            .filter(|p| p.exited.is_none())
            .filter_map(|p| p.gone)
            .min();
        let named = self.named_by_launcher.as_ref();
        let host_lost = self.host_lost.as_ref();
        // A process off the host found lost, when pcmrun stopped the launch for one; else
        // one the launcher did not name, when it named one; or one seen gone after the
        // first seen gone: each was stopped because of the lost one.
        let followed = |key: &(HostName, u32), p: &Process| match host_lost {
            Some(lost) => key.0 != *lost,
            None => {
                named.is_some_and(|n| n != key)
                    || matches!((p.gone, first_gone), (Some(g), Some(f)) if g > f + FOLLOWED_AFTER)
            }
        };
        // A process that is no longer its rank's newest left the rank to a replacement
        // (a move) and stays only until the launch ends (Open MPI 4): named as such.
        let who = |(host, pid): &(HostName, u32), p: &Process| {
            let departed = self.newest.get(&p.rank) != Some(&(host.clone(), *pid));
            match departed {
                true => format!(
                    "the departed process of rank {} (pid {pid} on {host})",
                    p.rank
                ),
                false => format!("rank {} (pid {pid} on {host})", p.rank),
            }
        };
        // A lost process the launcher named, with how it says it ended: a crash of its own
        // (hydra's exit code 11, SIGSEGV) reads differently from a kill (9). (Not for one
        // it named among those stopped because of a lost host: SIGTERM, 15.)
        let lost_who = |key: &(HostName, u32), p: &Process| match self.named_ended {
            Some(ended) if named == Some(key) => {
                format!(
                    "{}, ended with {ended} as the launcher reports",
                    who(key, p)
                )
            }
            _ => who(key, p),
        };
        let followers: Vec<String> = self
            .processes
            .iter()
            .filter(|(key, p)| p.exited.is_none() && followed(key, p))
            .map(|(key, p)| who(key, p))
            .collect();
        let lost: Vec<String> = self
            .processes
            .iter()
            .filter_map(|(key, p)| match p.exited {
                None if followed(key, p) => None,
                None => Some(lost_who(key, p)),
                Some(code) if is_mpi_abort(code) => Some(format!(
                    "{}, ended by an MPI error, code {code}",
                    who(key, p)
                )),
                Some(_) => None,
            })
            .collect();
        let stalled = self
            .aborting
            .as_ref()
            .filter(|(c, _)| *c == RECONFIGURE_TIMEOUT_EXIT)
            .map(|(_, reason)| reason.clone())
            .or_else(|| {
                self.processes
                    .values()
                    .any(|p| p.exited == Some(RECONFIGURE_TIMEOUT_EXIT))
                    .then(|| "a reconfiguration missed its deadline".to_owned())
            });
        let stalled = self
            .stalled
            .clone()
            .map(|r| format!("{r}; pcmrun stopped it"))
            .or(stalled.map(|r| format!("PCM ended the job: {r}")));
        let what = match (stalled, lost.is_empty()) {
            (Some(reason), _) => reason,
            (None, false) if code == 0 => format!(
                "lost {} (the launcher exited with 0, but {} never exited)",
                lost.join(", "),
                never_exited.join(", ")
            ),
            (None, false) if !followers.is_empty() => format!(
                "lost {} ({} then stopped by the launcher)",
                lost.join(", "),
                followers.join(", ")
            ),
            (None, false) => format!("lost {}", lost.join(", ")),
            (None, true) if host_lost.is_some() => format!(
                "lost host {}, which no rank used any more; the launch could not end without it ({} stopped with it)",
                host_lost.map_or("", HostName::as_str),
                followers.join(", ")
            ),
            (None, true)
                if self.processes.is_empty() && self.launch_start == Start::FromCheckpoint =>
            {
                let what = if self.launches > 1 {
                    "the relaunch from the newest checkpoint"
                } else {
                    "the launch with --restart"
                };
                return Verdict::Done {
                    code: nonzero(code),
                    reason: Some(format!(
                        "{what} ended with status {code} before the job started: PCM found no complete and intact checkpoint to resume (lost, corrupted or quarantined, or its pcmd could not be reached: see the ranks' `cannot restart` messages above); not restarted"
                    )),
                };
            }
            (None, true) if self.processes.is_empty() => {
                return Verdict::Done {
                    code,
                    reason: Some(format!(
                        "the launcher ended with status {code} before any PCM process started (a launch error, or a program that does not call Pcm::init); not restarted"
                    )),
                };
            }
            (None, true) => {
                return Verdict::Done {
                    code,
                    reason: Some(format!(
                        "the launcher ended with status {code} although every process exited normally; not restarted"
                    )),
                };
            }
        };
        let last_iteration = self.last_iteration.unwrap_or(0);
        if !self.policy.checkpoints {
            return Verdict::Done {
                code: nonzero(code),
                reason: Some(format!(
                    "{what}; checkpoints are off (--checkpoint-interval 0), so the job cannot be recovered"
                )),
            };
        }
        let used = self.recoveries.len() as u32;
        if used >= self.policy.max_restarts {
            return Verdict::Done {
                code: nonzero(code),
                reason: Some(format!(
                    "{what}; giving up after {used} recoveries (--max-restarts {})",
                    self.policy.max_restarts
                )),
            };
        }
        let start = if self.resumable {
            Start::FromCheckpoint
        } else {
            Start::Fresh
        };
        let delay = self
            .policy
            .first_delay
            .saturating_mul(1 << used.min(16))
            .min(MAX_DELAY);
        self.recoveries.push(Recovery {
            reason: what.clone(),
            failed_at_s: now.duration_since(self.started).as_secs_f64(),
            last_iteration,
            start,
            resumed_from: None,
            iterations_lost: None,
            seconds_to_resume: None,
            hosts_lost: Vec::new(),
            hosts_added: Vec::new(),
            ranks: None,
        });
        self.failed_at = Some(now);
        self.launch_start = start;
        let from = match (start, self.last_checkpoint) {
            (Start::Fresh, _) => "from the start (no checkpoint was taken yet)".to_owned(),
            (Start::FromCheckpoint | Start::IfAny, Some(i)) => {
                format!("from the newest checkpoint (iteration {i})")
            }
            (Start::FromCheckpoint | Start::IfAny, None) => "from the newest checkpoint".to_owned(),
        };
        Verdict::Relaunch {
            start,
            delay,
            reason: format!(
                "{what} at about iteration {last_iteration}; restarting {from} in {:.1} s (recovery {} of at most {})",
                delay.as_secs_f64(),
                used + 1,
                self.policy.max_restarts
            ),
        }
    }

    /// The relaunch just decided leaves out `hosts`, which no longer answer (recorded in
    /// the report's recovery).
    pub fn hosts_lost(&mut self, hosts: Vec<HostName>) {
        if let Some(recovery) = self.recoveries.last_mut() {
            recovery.hosts_lost.extend(hosts);
        }
    }

    /// Whether a rank of the current launch may run on `host`: the host of some rank's
    /// newest process, as the events tell (moves included). Before the launch has said
    /// where its ranks run, any host may.
    pub fn holds_ranks(&self, host: &HostName) -> bool {
        self.placement.is_empty() || self.placement.values().any(|h| h == host)
    }

    /// `host` stopped answering while it held no rank ([`Supervisor::holds_ranks`]): the
    /// launch carries on without it (recorded in the report).
    pub fn host_lost_unused(&mut self, host: HostName) {
        if !self.hosts_lost_unused.contains(&host) {
            self.hosts_lost_unused.push(host);
        }
    }

    /// The relaunch just decided uses `hosts` of the agents' pool in place of those it
    /// leaves out (recorded in the report's recovery).
    pub fn hosts_added(&mut self, hosts: Vec<HostName>) {
        if let Some(recovery) = self.recoveries.last_mut() {
            recovery.hosts_added.extend(hosts);
        }
    }

    /// Records that the relaunch runs with `ranks` ranks, another width than the last launch.
    pub fn relaunch_width(&mut self, ranks: u32) {
        if let Some(recovery) = self.recoveries.last_mut() {
            recovery.ranks = Some(ranks);
        }
    }

    /// The job's width at the end of the launch that just ended, if a resize changed it.
    pub fn resized_to(&self) -> Option<u32> {
        self.resized_to
    }

    /// How many ranks of the launch that just ended ran on `hosts` last (moves included).
    pub fn ranks_on(&self, hosts: &[HostName]) -> u32 {
        self.placement
            .values()
            .filter(|h| hosts.contains(h))
            .count() as u32
    }

    /// The launches leave out `hosts`, which their owner gave back to the pool.
    pub fn hosts_given_back(&mut self, hosts: impl IntoIterator<Item = HostName>) {
        for host in hosts {
            if !self.hosts_given_back.contains(&host) {
                self.hosts_given_back.push(host);
            }
        }
    }

    /// The launcher named the process whose failure ended the launch: on `host`, with
    /// `pid` or (when the launcher gives no pid) the launch's `rank`. For a process of
    /// another host, which pcmrun cannot watch, it is the one lost; the others that did
    /// not exit were stopped by the launcher because of it. The first one named counts.
    pub fn on_launcher_named(
        &mut self,
        host: &HostName,
        pid: Option<u32>,
        rank: Option<Rank>,
        at: Instant,
    ) {
        if self.named_by_launcher.is_some() {
            return;
        }
        let found = self.processes.iter().find(|((h, p), process)| {
            h == host
                && match (pid, rank) {
                    (Some(pid), _) => *p == pid,
                    (None, Some(rank)) => process.rank == rank,
                    (None, None) => false,
                }
        });
        if let Some(((h, p), _)) = found {
            let key = (h.clone(), *p);
            if let Some(process) = self.processes.get_mut(&key) {
                process.gone.get_or_insert(at);
            }
            self.named_by_launcher = Some(key);
        }
    }

    /// The launcher said how the process it named ([`Supervisor::on_launcher_named`])
    /// ended: the reason for the relaunch says so. Ignored when no process of this launch
    /// was named, or its end was told already.
    pub fn on_launcher_reported_end(&mut self, ended: LauncherReportedEnd) {
        if self.named_by_launcher.is_some() && self.named_ended.is_none() {
            self.named_ended = Some(ended);
        }
    }

    /// pcmrun stops the current launch because `host`, which holds ranks, is lost: the
    /// processes there are the lost ones, the others were stopped because of it.
    pub fn stopping_for_lost_host(&mut self, host: HostName) {
        self.host_lost.get_or_insert(host);
    }

    /// The driver saw the process `pid` of `host` gone at `at` (without an exit event: killed,
    /// crashed). Processes seen gone later than the first are not counted as lost: the
    /// launcher ended them after the first was lost.
    pub fn on_gone(&mut self, host: &HostName, pid: u32, at: Instant) {
        if let Some(process) = self.processes.get_mut(&(host.clone(), pid)) {
            process.gone.get_or_insert(at);
        }
    }

    /// The processes of the current launch on `host` that have not said they exited (each
    /// rank's newest), for the driver to look at (a stopped process, for example).
    pub fn running_on(&self, host: &HostName) -> Vec<(Rank, u32)> {
        self.newest
            .iter()
            .filter(|(_, (h, pid))| {
                h == host
                    && self
                        .processes
                        .get(&(h.clone(), *pid))
                        .is_some_and(|p| p.exited.is_none())
            })
            .map(|(rank, (_, pid))| (*rank, *pid))
            .collect()
    }

    /// Whether the current launch has stalled at `now`: no sign of it since `last_sign` for
    /// longer than the stall timeout. `stopped` are its processes found stopped (SIGSTOP, a
    /// debugger), as `rank (pid P on HOST)`. When it has, returns why (for people) and
    /// remembers it: the launch is to be stopped, and its end is then a stall to recover
    /// from, whatever its processes' exit statuses say. Once per launch.
    pub fn check_stall(
        &mut self,
        now: Instant,
        last_sign: Instant,
        stopped: &[String],
    ) -> Option<String> {
        if self.stalled.is_some() {
            return None;
        }
        let silent = now.saturating_duration_since(last_sign);
        if silent <= self.policy.stall_timeout {
            return None;
        }
        let who = if stopped.is_empty() {
            String::new()
        } else {
            format!("{} stopped (SIGSTOP or a debugger), ", stopped.join(", "))
        };
        let last = match self.last_iteration {
            Some(i) => format!("last progress at iteration {i}"),
            None => "no progress yet".to_owned(),
        };
        let reason = format!(
            "the job stalled: {who}no sign of it for {:.1} s ({last}; --stall-timeout {})",
            silent.as_secs_f64(),
            self.policy.stall_timeout.as_secs_f64()
        );
        self.stalled = Some(reason.clone());
        Some(reason)
    }

    /// A progress line for people at `now`. A rate is shown only while progress is fresh
    /// (newer than [`STALE_PROGRESS`]); otherwise the line says for how long there was none.
    pub fn progress_line(&self, now: Instant) -> String {
        let mut parts = Vec::new();
        let stale = self
            .progress
            .map(|(t, _)| now.saturating_duration_since(t))
            .filter(|age| *age > STALE_PROGRESS);
        match (self.progress, self.previous_progress) {
            (Some((_, i)), _) if stale.is_some() => parts.push(format!(
                "iteration {i}, no progress for {:.0} s",
                stale.unwrap_or_default().as_secs_f64()
            )),
            (Some((t1, i1)), Some((t0, i0))) if t1 > t0 => {
                let rate = i1.saturating_sub(i0) as f64 / t1.duration_since(t0).as_secs_f64();
                parts.push(format!("iteration {i1} ({rate:.1} it/s)"));
            }
            (Some((_, i)), _) => parts.push(format!("iteration {i}")),
            (None, _) => parts.push("starting".to_owned()),
        }
        if !self.placement.is_empty() {
            let hosts: Vec<String> = self
                .placement
                .iter()
                .map(|(rank, host)| format!("{rank}@{host}"))
                .collect();
            parts.push(format!("ranks {}", hosts.join(" ")));
        }
        parts.push(format!("{} migrations", self.migrations));
        parts.push(match self.last_checkpoint {
            Some(i) => format!("{} checkpoints (newest at {i})", self.checkpoints),
            None => format!("{} checkpoints", self.checkpoints),
        });
        parts.push(format!("{} recoveries", self.recoveries.len()));
        parts.join(", ")
    }

    /// The final report for a run that ended with `verdict` at `now`.
    pub fn report(&self, code: i32, reason: Option<String>, now: Instant) -> Report {
        Report {
            exit_code: code,
            reason,
            launches: self.launches,
            recoveries: self.recoveries.clone(),
            migrations: self.migrations,
            resizes: self.resizes,
            checkpoints: self.checkpoints,
            last_checkpoint: self.last_checkpoint,
            resumed_at_start: self.resumed_at_start,
            hosts_lost_unused: self.hosts_lost_unused.clone(),
            hosts_given_back: self.hosts_given_back.clone(),
            last_iteration: self.last_iteration,
            seconds: now.duration_since(self.started).as_secs_f64(),
            started_unix_s: 0.0,
        }
    }
}

/// Whether `code`, passed to `exit`, is an MPI library's error code rather than an exit
/// status the application chose. The kernel keeps only the low 8 bits of a status, so a
/// program that means one uses 0-255; MPICH's fatal-error handler passes its error code
/// (e.g. 807612431 when a peer died in the middle of a transfer: `process_vm_readv failed
/// (errno 3)`) to `exit` through `MPI_Abort`. Such an end is counted with the lost
/// processes: it is what a process does when a peer is lost under it.
pub fn is_mpi_abort(code: i32) -> bool {
    !(0..=255).contains(&code)
}

/// A failure must not exit 0 even when the launcher did.
fn nonzero(code: i32) -> i32 {
    if code == 0 {
        1
    } else {
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str) -> HostName {
        HostName::new(name).unwrap()
    }

    fn policy() -> Policy {
        Policy {
            checkpoints: true,
            max_restarts: 2,
            first_delay: Duration::from_secs(1),
            first: Start::Fresh,
            stall_timeout: Duration::from_secs(10),
        }
    }

    fn started(s: &mut Supervisor, rank: u32, pid: u32, now: Instant) {
        s.on_event(
            RunEvent::Started {
                rank: Rank(rank),
                pid,
                host: host("a"),
                replacement: false,
            },
            now,
        );
    }

    /// A supervisor whose launch started ranks 0 (pid 10) and 1 (pid 11) on host a, which
    /// checkpointed iteration 5.
    fn two_ranks_checkpointed(t: Instant) -> Supervisor {
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 0, 10, t);
        started(&mut s, 1, 11, t);
        s.on_event(RunEvent::Checkpointed { iteration: 5 }, t);
        s
    }

    fn exited(s: &mut Supervisor, pid: u32, code: i32, now: Instant) {
        s.on_event(
            RunEvent::Exited {
                pid,
                host: host("a"),
                code,
            },
            now,
        );
    }

    #[test]
    fn given_a_clean_end_then_done_with_zero() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 0, 10, t);
        exited(&mut s, 10, 0, t);
        assert_eq!(
            s.on_launcher_end(LauncherEnd::Exited(0), None, t),
            Verdict::Done {
                code: 0,
                reason: None
            }
        );
    }

    #[test]
    fn given_a_launcher_that_exits_0_while_a_rank_never_exited_then_relaunch() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 0, 10, t);
        started(&mut s, 1, 11, t);
        s.on_event(RunEvent::Checkpointed { iteration: 100 }, t);
        exited(&mut s, 11, 0, t);
        let verdict = s.on_launcher_end(LauncherEnd::Exited(0), None, t);
        let Verdict::Relaunch { start, reason, .. } = verdict else {
            panic!("{verdict:?}")
        };
        assert_eq!(start, Start::FromCheckpoint);
        assert!(
            reason.contains("the launcher exited with 0, but rank 0 (pid 10 on a) never exited"),
            "{reason}"
        );
    }

    #[test]
    fn given_a_departed_process_without_an_exit_then_its_replacements_exit_counts() {
        // A rank moved (its first process never said it exited, as a departed process that
        // the runtime ends may not): the replacement's exit is what counts.
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 0, 10, t);
        started(&mut s, 1, 11, t);
        s.on_event(
            RunEvent::Started {
                rank: Rank(1),
                pid: 12,
                host: host("a"),
                replacement: true,
            },
            t,
        );
        exited(&mut s, 10, 0, t);
        exited(&mut s, 12, 0, t);
        assert_eq!(
            s.on_launcher_end(LauncherEnd::Exited(0), None, t),
            Verdict::Done {
                code: 0,
                reason: None
            }
        );
    }

    #[test]
    fn given_a_rank_killed_after_a_checkpoint_then_relaunch_from_it_and_count_the_loss() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 0, 10, t);
        started(&mut s, 1, 11, t);
        s.on_event(RunEvent::Checkpointed { iteration: 100 }, t);
        s.on_event(RunEvent::Progress { iteration: 150 }, t);
        // Rank 1 killed: no exit event; hydra exits with the signal number.
        let verdict = s.on_launcher_end(LauncherEnd::Exited(9), None, t);
        let Verdict::Relaunch {
            start,
            delay,
            reason,
        } = verdict
        else {
            panic!("{verdict:?}")
        };
        assert_eq!(
            (start, delay),
            (Start::FromCheckpoint, Duration::from_secs(1))
        );
        assert!(
            reason.contains("rank 0 (pid 10 on a), rank 1 (pid 11 on a)"),
            "{reason}"
        );
        assert!(reason.contains("iteration 100"), "{reason}");
        s.launching();
        let later = t + Duration::from_secs(3);
        let line = s.on_event(RunEvent::Restarted { iteration: 100 }, later);
        assert!(line.is_some_and(|l| l.contains("at least 50 iterations")));
        let report = s.report(0, None, later);
        assert_eq!(report.launches, 2);
        assert_eq!(report.recoveries[0].iterations_lost, Some(50));
        assert_eq!(report.recoveries[0].seconds_to_resume, Some(3.0));
    }

    #[test]
    fn given_an_application_error_then_never_restart_and_pass_its_status_on() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 0, 10, t);
        started(&mut s, 1, 11, t);
        exited(&mut s, 11, 3, t);
        // Rank 0 was killed by the launcher after rank 1 failed.
        let verdict = s.on_launcher_end(LauncherEnd::Exited(3), None, t);
        let Verdict::Done {
            code: 3,
            reason: Some(reason),
        } = verdict
        else {
            panic!("{verdict:?}")
        };
        assert!(
            reason.contains("rank 1 (pid 11 on a) ended with exit status 3"),
            "{reason}"
        );
    }

    #[test]
    fn given_a_rank_killed_and_its_peer_aborted_by_an_mpi_error_then_restart() {
        let t = Instant::now();
        let mut s = two_ranks_checkpointed(t);
        // Rank 1 killed; rank 0's MPI_Wait fails and MPICH aborts it with the error code.
        exited(&mut s, 10, 807_612_431, t);
        let verdict = s.on_launcher_end(LauncherEnd::Exited(9), None, t);
        assert!(
            matches!(&verdict, Verdict::Relaunch { start: Start::FromCheckpoint, reason, .. }
                if reason.contains("ended by an MPI error, code 807612431") && reason.contains("rank 1 (pid 11 on a)")),
            "{verdict:?}"
        );
    }

    #[test]
    fn given_a_stalled_reconfiguration_then_restart() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 0, 10, t);
        s.on_event(
            RunEvent::Aborting {
                code: RECONFIGURE_TIMEOUT_EXIT,
                reason: "migration #3 stalled".into(),
            },
            t,
        );
        exited(&mut s, 10, RECONFIGURE_TIMEOUT_EXIT, t);
        let verdict = s.on_launcher_end(LauncherEnd::Exited(75), None, t);
        assert!(
            matches!(&verdict, Verdict::Relaunch { start: Start::Fresh, reason, .. } if reason.contains("migration #3 stalled") && reason.contains("no checkpoint was taken yet")),
            "{verdict:?}"
        );
    }

    #[test]
    fn given_failures_past_the_limit_then_give_up_with_a_nonzero_status() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        let mut delays = Vec::new();
        for _ in 0..3 {
            s.launching();
            started(&mut s, 0, 10, t);
            match s.on_launcher_end(LauncherEnd::Signaled(9), None, t) {
                Verdict::Relaunch { delay, .. } => delays.push(delay),
                Verdict::Done { code, reason } => {
                    assert_eq!(code, 137);
                    assert!(reason.unwrap().contains("giving up after 2 recoveries"));
                }
            }
        }
        assert_eq!(delays, [Duration::from_secs(1), Duration::from_secs(2)]);
    }

    #[test]
    fn given_no_checkpoints_or_an_interrupt_or_no_pcm_process_then_done() {
        let t = Instant::now();
        let mut s = Supervisor::new(
            Policy {
                checkpoints: false,
                ..policy()
            },
            t,
        );
        s.launching();
        started(&mut s, 0, 10, t);
        let verdict = s.on_launcher_end(LauncherEnd::Exited(0), Some(1), t);
        assert!(
            matches!(&verdict, Verdict::Done { code: INTERRUPTED_EXIT, reason: Some(r) }
                if r.contains("SIGHUP (the terminal closed)") && r.contains("checkpoints are kept")),
            "{verdict:?}"
        );
        let verdict = s.on_launcher_end(LauncherEnd::Exited(9), None, t);
        assert!(
            matches!(&verdict, Verdict::Done { code: 9, reason: Some(r) } if r.contains("checkpoints are off")),
            "{verdict:?}"
        );
        s.launching();
        let verdict = s.on_launcher_end(LauncherEnd::Exited(127), None, t);
        assert!(
            matches!(&verdict, Verdict::Done { code: 127, reason: Some(r) } if r.contains("before any PCM process started")),
            "{verdict:?}"
        );
    }

    #[test]
    fn given_a_silent_launch_past_the_stall_timeout_then_it_is_stopped_and_relaunched() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 0, 10, t);
        started(&mut s, 1, 11, t);
        s.on_event(RunEvent::Checkpointed { iteration: 100 }, t);
        s.on_event(RunEvent::Progress { iteration: 120 }, t);
        assert_eq!(s.running_on(&host("a")), [(Rank(0), 10), (Rank(1), 11)]);
        // Within the timeout: nothing; the progress line stops showing a rate.
        let later = t + Duration::from_secs(9);
        assert_eq!(s.check_stall(later, t, &[]), None);
        let line = s.progress_line(later);
        assert!(
            line.starts_with("iteration 120, no progress for 9 s"),
            "{line}"
        );
        let stopped = ["rank 1 (pid 11 on a)".to_owned()];
        let reason = s
            .check_stall(t + Duration::from_secs(11), t, &stopped)
            .unwrap();
        assert!(
            reason.contains("rank 1 (pid 11 on a) stopped") && reason.contains("11.0 s"),
            "{reason}"
        );
        assert_eq!(
            s.check_stall(t + Duration::from_secs(12), t, &stopped),
            None
        );
        // pcmrun's SIGTERM ends the ranks with statuses of their own: still a stall.
        exited(&mut s, 10, 143, t);
        let verdict = s.on_launcher_end(LauncherEnd::Exited(143), None, t);
        assert!(
            matches!(&verdict, Verdict::Relaunch { start: Start::FromCheckpoint, reason, .. }
                if reason.starts_with("the job stalled: rank 1") && reason.contains("iteration 100")),
            "{verdict:?}"
        );
    }

    #[test]
    fn given_a_relaunch_that_finds_no_checkpoint_then_the_summary_says_so() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 0, 10, t);
        s.on_event(RunEvent::Checkpointed { iteration: 100 }, t);
        let verdict = s.on_launcher_end(LauncherEnd::Exited(9), None, t);
        assert!(matches!(verdict, Verdict::Relaunch { .. }), "{verdict:?}");
        // Every rank fails in Pcm::init (PCM_RESTART=require, nothing intact): no process
        // started.
        s.launching();
        let verdict = s.on_launcher_end(LauncherEnd::Exited(1), None, t);
        assert!(
            matches!(&verdict, Verdict::Done { code: 1, reason: Some(r) }
                if r.contains("the relaunch from the newest checkpoint ended with status 1 before the job started")
                    && r.contains("no complete and intact checkpoint")
                    && !r.contains("Pcm::init")),
            "{verdict:?}"
        );
    }

    #[test]
    fn given_one_rank_seen_gone_before_the_other_then_only_it_counts_as_lost() {
        let t = Instant::now();
        let mut s = two_ranks_checkpointed(t);
        s.on_gone(&host("a"), 11, t + Duration::from_millis(5));
        s.on_gone(&host("a"), 10, t + Duration::from_millis(40));
        let verdict = s.on_launcher_end(LauncherEnd::Exited(9), None, t);
        assert!(
            matches!(&verdict, Verdict::Relaunch { reason, .. }
                if reason.starts_with("lost rank 1 (pid 11 on a) (rank 0 (pid 10 on a) then stopped by the launcher)")),
            "{verdict:?}"
        );
    }

    #[test]
    fn given_the_launcher_names_the_failed_process_of_another_host_then_only_it_counts_as_lost() {
        let t = Instant::now();
        for (pid, rank) in [(Some(11), None), (None, Some(Rank(1)))] {
            let mut s = two_ranks_checkpointed(t);
            // Neither process is seen gone (another host): the launcher's word decides.
            s.on_launcher_named(&host("a"), pid, rank, t);
            s.on_launcher_named(&host("a"), Some(10), None, t);
            let verdict = s.on_launcher_end(LauncherEnd::Exited(9), None, t);
            assert!(
                matches!(&verdict, Verdict::Relaunch { reason, .. }
                    if reason.starts_with("lost rank 1 (pid 11 on a) (rank 0 (pid 10 on a) then stopped by the launcher)")),
                "{verdict:?}"
            );
        }
        // A process the launch does not know changes nothing.
        let mut s = two_ranks_checkpointed(t);
        s.on_launcher_named(&host("z"), Some(11), None, t);
        let verdict = s.on_launcher_end(LauncherEnd::Exited(9), None, t);
        assert!(
            matches!(&verdict, Verdict::Relaunch { reason, .. }
                if reason.starts_with("lost rank 0 (pid 10 on a), rank 1 (pid 11 on a)")),
            "{verdict:?}"
        );
    }

    /// How the launcher says the named process ended goes into the reason (hydra's exit
    /// code 11: rank 0 crashed, SIGSEGV, rather than being killed); a code with no process
    /// named, or a second one, changes nothing.
    #[test]
    fn given_the_launcher_says_how_the_named_process_ended_then_the_reason_says_so() {
        let t = Instant::now();
        let mut s = two_ranks_checkpointed(t);
        s.on_launcher_reported_end(LauncherReportedEnd::ExitCode(9));
        s.on_launcher_named(&host("a"), Some(10), None, t);
        s.on_launcher_reported_end(LauncherReportedEnd::ExitCode(11));
        s.on_launcher_reported_end(LauncherReportedEnd::ExitCode(9));
        let verdict = s.on_launcher_end(LauncherEnd::Exited(11), None, t);
        assert!(
            matches!(&verdict, Verdict::Relaunch { reason, .. }
                if reason.starts_with("lost rank 0 (pid 10 on a), ended with exit code 11 as the launcher reports (rank 1 (pid 11 on a) then stopped by the launcher)")),
            "{verdict:?}"
        );
        // The next launch starts with nothing named.
        s.launching();
        started(&mut s, 0, 20, t);
        s.on_launcher_reported_end(LauncherReportedEnd::Signal(9));
        s.on_gone(&host("a"), 20, t);
        let verdict = s.on_launcher_end(LauncherEnd::Exited(9), None, t);
        assert!(
            matches!(&verdict, Verdict::Relaunch { reason, .. }
                if reason.starts_with("lost rank 0 (pid 20 on a)") && !reason.contains("reports")),
            "{verdict:?}"
        );
    }

    #[test]
    fn given_pcmrun_stopped_the_launch_for_a_lost_host_then_its_ranks_count_as_lost() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 0, 10, t);
        s.on_event(
            RunEvent::Started {
                rank: Rank(1),
                pid: 11,
                host: host("b"),
                replacement: false,
            },
            t,
        );
        s.on_event(RunEvent::Checkpointed { iteration: 5 }, t);
        s.stopping_for_lost_host(host("b"));
        // The launcher then names rank 0, which it stopped (SIGTERM): it stays a follower,
        // without the launcher's code.
        s.on_launcher_named(&host("a"), Some(10), None, t);
        s.on_launcher_reported_end(LauncherReportedEnd::ExitCode(15));
        let verdict = s.on_launcher_end(LauncherEnd::Signaled(15), None, t);
        assert!(
            matches!(&verdict, Verdict::Relaunch { reason, .. }
                if reason.starts_with("lost rank 1 (pid 11 on b) (rank 0 (pid 10 on a) then stopped by the launcher)")),
            "{verdict:?}"
        );
    }

    #[test]
    fn given_pcmrun_stopped_the_launch_for_a_lost_host_its_ranks_had_left_then_relaunch() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 0, 10, t);
        s.on_event(RunEvent::Checkpointed { iteration: 5 }, t);
        s.stopping_for_lost_host(host("b"));
        let verdict = s.on_launcher_end(LauncherEnd::Signaled(15), None, t);
        assert!(
            matches!(&verdict, Verdict::Relaunch { reason, .. }
                if reason.starts_with("lost host b, which no rank used any more; the launch could not end without it (rank 0 (pid 10 on a) stopped with it)")),
            "{verdict:?}"
        );
    }

    #[test]
    fn given_events_then_the_progress_line_shows_rate_placement_and_counts() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        started(&mut s, 1, 11, t);
        started(&mut s, 0, 10, t);
        s.on_event(RunEvent::Progress { iteration: 10 }, t);
        s.on_event(
            RunEvent::Progress { iteration: 30 },
            t + Duration::from_secs(2),
        );
        let line = s.on_event(
            RunEvent::Migrated {
                iteration: 30,
                placed: vec![(Rank(1), host("c"))],
                timings: pcm_proto::PhaseTimings::default(),
            },
            t,
        );
        assert_eq!(line.as_deref(), Some("iteration 30: moved rank 1 to c"));
        assert_eq!(
            s.progress_line(t + Duration::from_secs(2)),
            "iteration 30 (10.0 it/s), ranks 0@a 1@c, 1 migrations, 0 checkpoints, 0 recoveries"
        );
    }

    #[test]
    fn given_every_rank_moved_off_a_host_then_it_holds_no_rank_and_a_relaunch_forgets_that() {
        let t = Instant::now();
        let mut s = Supervisor::new(policy(), t);
        s.launching();
        // Before any rank said where it runs, every host may hold one.
        assert!(s.holds_ranks(&host("b")));
        started(&mut s, 0, 10, t);
        assert!(s.holds_ranks(&host("a")));
        assert!(!s.holds_ranks(&host("b")));
        s.on_event(
            RunEvent::Started {
                rank: Rank(1),
                pid: 11,
                host: host("b"),
                replacement: false,
            },
            t,
        );
        assert!(s.holds_ranks(&host("b")));
        s.on_event(
            RunEvent::Migrated {
                iteration: 30,
                placed: vec![(Rank(1), host("c"))],
                timings: pcm_proto::PhaseTimings::default(),
            },
            t,
        );
        assert!(!s.holds_ranks(&host("b")));
        assert!(s.holds_ranks(&host("c")));
        s.host_lost_unused(host("b"));
        s.host_lost_unused(host("b"));
        assert_eq!(s.report(0, None, t).hosts_lost_unused, [host("b")]);
        s.launching();
        assert!(s.holds_ranks(&host("b")));
    }
}
