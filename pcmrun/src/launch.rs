//! One launch, driven to its end: the launcher started in its own process group, its output
//! passed on with the run events taken out and fed to the [`Supervisor`], the local ranks
//! and the remote hosts watched, progress shown, and the launch stopped on a signal, a lost
//! host or a stall. The decisions are the supervisor's; this module moves bytes, runs the
//! launcher and keeps time.

use std::io::{BufRead as _, BufReader, Read, Write as _};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use pcm_proto::run::{RunEvent, Stamped};
use pcm_proto::{HostName, Rank};

use crate::daemon::{HostDaemons, LocalDaemon};
use crate::hosts::{ProbePlan, RemoteLauncher, PROBE_TIMEOUT};
use crate::runtime::{LauncherNamedFailure, LauncherReportedEnd};
use crate::series::SeriesLock;
use crate::supervisor::{signal_name, LauncherEnd, Supervisor};
use crate::{say, Launch};

/// How long the launcher may take to end after SIGTERM before its group is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long to wait for the last output after the launcher ended (a process that outlives
/// it may hold the pipe open).
const DRAIN: Duration = Duration::from_secs(2);

/// What arrives from the launcher's standard error.
enum Output {
    Event(RunEvent, Instant),
    /// A process of this host is gone (no longer exists, or a zombie).
    Gone(u32, Instant),
    /// The launcher named the process whose failure ended the launch.
    Named(LauncherNamedFailure, Instant),
    /// The launcher said how the process it named ended (hydra: the line after).
    NamedEnded(LauncherReportedEnd),
    /// The launcher's standard error ended.
    End,
    /// The launcher's standard output ended.
    StdoutEnd,
}

/// Which of the launcher's two output streams have not ended yet. Their ends may come
/// while the launch runs (the usual case: the pipes close as the launcher exits, before
/// its exit is seen), so the launch's loop keeps count, and the drain after it waits only
/// for what is still open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OpenStreams {
    stderr: bool,
    stdout: bool,
}

impl OpenStreams {
    const BOTH: OpenStreams = OpenStreams {
        stderr: true,
        stdout: true,
    };

    /// Notes the end that `output` reports, if it is one.
    fn note(&mut self, output: &Output) {
        match output {
            Output::End => self.stderr = false,
            Output::StdoutEnd => self.stdout = false,
            Output::Event(..) | Output::Gone(..) | Output::Named(..) | Output::NamedEnded(..) => {}
        }
    }

    fn any(self) -> bool {
        self.stderr || self.stdout
    }
}

/// The stop signals that came: how many, and the newest.
#[derive(Debug, Default)]
pub(crate) struct Signals {
    count: AtomicUsize,
    last: AtomicI32,
}

impl Signals {
    fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// The newest stop signal, if one came.
    pub(crate) fn last(&self) -> Option<i32> {
        (self.count() > 0).then(|| self.last.load(Ordering::SeqCst))
    }
}

pub(crate) fn libc_sigterm() -> i32 {
    Signal::SIGTERM as i32
}

/// Counts SIGINT, SIGTERM and SIGHUP (a closed terminal stops the job as SIGTERM does:
/// the job is stopped, the report written, the checkpoints kept).
pub(crate) fn watch_signals(seen: Arc<Signals>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("cannot watch SIGINT, SIGTERM and SIGHUP")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                seen.last.store(signal, Ordering::SeqCst);
                seen.count.fetch_add(1, Ordering::SeqCst);
            }
        })?;
    Ok(())
}

/// Sleeps `delay`; false if a signal came meanwhile.
pub(crate) fn sleep_unless_signalled(delay: Duration, signals: &Signals) -> bool {
    let until = Instant::now() + delay;
    while Instant::now() < until {
        if signals.count() > 0 {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    signals.count() == 0
}

/// Runs one launch to its end: passes output on, feeds events to `supervisor`, prints
/// progress, and stops the launch on a signal.
pub(crate) fn run_launch(
    launch: &Launch,
    sink: &mut Sink<'_>,
    signals: &Signals,
    progress_every: Option<Duration>,
    watch: &mut HostWatch<'_>,
) -> anyhow::Result<LauncherEnd> {
    let mut command = launch.command();
    if !launch.env.contains_key("PCM_RESTART") {
        // The launcher passes its environment on: a PCM_RESTART of the user's shell would
        // make every launch a restart.
        command.env_remove("PCM_RESTART");
    }
    command
        .stdin(Stdio::null())
        // Read to find the launcher's word on a failed process (hydra prints it there),
        // and copied on unchanged.
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that the whole launch (launcher, proxies, local ranks)
        // can be stopped together, and Ctrl-C reaches pcmrun first.
        .process_group(0);
    crate::end_with_parent(&mut command);
    watch.keep_pcmd(Instant::now());
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start {}", launch.launcher.display()))?;
    let group = Pid::from_raw(child.id() as i32);
    let stderr = child
        .stderr
        .take()
        .context("no pipe for the launcher's stderr")?;
    let stdout = child
        .stdout
        .take()
        .context("no pipe for the launcher's stdout")?;
    let (sender, receiver) = mpsc::channel();
    // The local ranks, watched closely: the first one gone is the one lost, the ones gone
    // after it were ended by the launcher.
    let local_ranks: Arc<std::sync::Mutex<Vec<u32>>> = Arc::default();
    {
        let sender = sender.clone();
        let pids = Arc::clone(&local_ranks);
        std::thread::Builder::new()
            .name("rank-watch".into())
            .spawn(move || watch_gone(&pids, &sender))?;
    }
    {
        let sender = sender.clone();
        std::thread::Builder::new()
            .name("launcher-stdout".into())
            .spawn(move || copy_stdout(stdout, &sender))?;
    }
    std::thread::Builder::new()
        .name("launcher-stderr".into())
        .spawn(move || forward(stderr, &sender))?;
    let mut next_progress = progress_every.map(|d| Instant::now() + d);
    let mut stopping: Option<(usize, Instant)> = None;
    let mut open = OpenStreams::BOTH;
    let end = loop {
        match receiver.recv_timeout(Duration::from_millis(100)) {
            Ok(Output::Event(event, at)) => sink.take(event, at),
            Ok(Output::Gone(pid, at)) => sink.supervisor.on_gone(watch.local, pid, at),
            Ok(Output::Named(named, at)) => sink.named(&named, watch.local, at),
            Ok(Output::NamedEnded(ended)) => sink.supervisor.on_launcher_reported_end(ended),
            Ok(output @ (Output::End | Output::StdoutEnd)) => open.note(&output),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
        }
        if let Ok(mut pids) = local_ranks.lock() {
            *pids = sink
                .supervisor
                .running_on(watch.local)
                .into_iter()
                .map(|(_, pid)| pid)
                .collect();
        }
        if let Some(status) = child.try_wait()? {
            break match status.code() {
                Some(code) => LauncherEnd::Exited(code),
                None => LauncherEnd::Signaled(status.signal().unwrap_or(0)),
            };
        }
        watch.keep_pcmd(Instant::now());
        let seen = signals.count();
        match stopping {
            None if seen > 0 => {
                let signal = signals.last().unwrap_or(libc_sigterm());
                say(&format!(
                    "{}: stopping the job (a second Ctrl-C kills it at once)",
                    signal_name(signal)
                ));
                let _ = killpg(group, Signal::SIGTERM);
                stopping = Some((seen, Instant::now()));
            }
            None => {
                if let Some(why) = watch.lost_host(sink.supervisor, sink.last_sign, Instant::now())
                {
                    say(&format!(
                        "{why}: stopping the launch to relaunch without it"
                    ));
                    let _ = killpg(group, Signal::SIGTERM);
                    stopping = Some((seen, Instant::now()));
                } else {
                    let local = watch.local;
                    let stopped: Vec<(u32, String)> = sink
                        .supervisor
                        .running_on(local)
                        .into_iter()
                        .filter(|(_, pid)| is_stopped(*pid))
                        .map(|(rank, pid)| (pid, format!("rank {rank} (pid {pid} on {local})")))
                        .collect();
                    let names: Vec<String> = stopped.iter().map(|(_, n)| n.clone()).collect();
                    if let Some(why) =
                        sink.supervisor
                            .check_stall(Instant::now(), sink.last_sign, &names)
                    {
                        say(&format!(
                            "{why}: stopping the launch (SIGTERM, then SIGKILL) to relaunch it from the newest checkpoint"
                        ));
                        let _ = killpg(group, Signal::SIGTERM);
                        // A stopped process takes its SIGTERM only once continued.
                        let _ = killpg(group, Signal::SIGCONT);
                        for (pid, _) in &stopped {
                            let _ =
                                nix::sys::signal::kill(Pid::from_raw(*pid as i32), Signal::SIGCONT);
                        }
                        stopping = Some((seen, Instant::now()));
                    }
                }
            }
            Some((first, since)) if seen > first || since.elapsed() > STOP_GRACE => {
                let _ = killpg(group, Signal::SIGKILL);
            }
            _ => {}
        }
        if let Some(at) = next_progress {
            if Instant::now() >= at {
                say(&sink.supervisor.progress_line(Instant::now()));
                next_progress = progress_every.map(|d| Instant::now() + d);
            }
        }
    };
    drain(&receiver, open, sink, watch.local);
    // Whatever of the launch is left on this host (a proxy, an orphaned rank) goes too.
    let _ = killpg(group, Signal::SIGKILL);
    reap(&mut child);
    Ok(end)
}

/// Reports the processes of `pids` as they go (every 5 ms), until the launch's loop lets
/// go of the list.
fn watch_gone(pids: &Arc<std::sync::Mutex<Vec<u32>>>, sender: &mpsc::Sender<Output>) {
    let mut reported = std::collections::BTreeSet::new();
    // The launch's loop holds the other reference until the launch has ended.
    while Arc::strong_count(pids) > 1 {
        let watched = match pids.lock() {
            Ok(list) => list.clone(),
            Err(_) => return,
        };
        let now = Instant::now();
        for pid in watched {
            if !reported.contains(&pid) && is_gone(pid) {
                reported.insert(pid);
                if sender.send(Output::Gone(pid, now)).is_err() {
                    return;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether the process `pid` of this host no longer runs (gone, or a zombie).
fn is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// Whether the process `pid` of this host is stopped (state `T`, SIGSTOP or job control;
/// `t`, a debugger), from `/proc/PID/stat`.
fn is_stopped(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `PID (COMM) STATE ...`: COMM may hold spaces and parentheses; the state follows the
    // last `)`.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state == "T" || state == "t")
}

/// Watches a launch on several hosts for a host that died. A job that loses a host may not
/// end by itself: a host that loses power sends no TCP end, so the ranks and the launcher
/// wait on it. The hosts [`ProbePlan`] names are probed through the remote launcher; one
/// that does not answer ends the launch (and the relaunch leaves it out).
pub(crate) struct HostWatch<'a> {
    pub(crate) launcher: &'a RemoteLauncher,
    pub(crate) daemons: Option<&'a mut HostDaemons>,
    /// The pcmd pcmrun started on this host for a job on this host only.
    pub(crate) local_pcmd: Option<&'a mut LocalDaemon>,
    pub(crate) local: &'a HostName,
    pub(crate) series: Option<&'a SeriesLock>,
    /// After a failed restart of the local pcmd: when to try again.
    pub(crate) pcmd_retry: Option<Instant>,
    pub(crate) plan: ProbePlan,
    /// [`Runtime::lets_a_left_host_go`].
    pub(crate) lets_a_left_host_go: bool,
}

/// How long to wait before trying again to start a pcmd that failed to start.
const PCMD_RETRY: Duration = Duration::from_secs(5);

impl HostWatch<'_> {
    /// Starts this host's pcmd again if it ended (killed, crashed): without it no
    /// checkpoint is written and a relaunch finds none. Says what happened.
    fn keep_pcmd(&mut self, now: Instant) {
        if self.pcmd_retry.is_some_and(|at| now < at) {
            return;
        }
        let newest = || match self.series.and_then(SeriesLock::newest_complete) {
            Some(i) => format!("; newest complete checkpoint: iteration {i}"),
            None => "; no complete checkpoint yet".to_owned(),
        };
        if let Some(pcmd) = self.local_pcmd.as_deref_mut() {
            let Some((which, status, restarted)) = pcmd.restart_if_ended(now) else {
                return;
            };
            match (restarted, pcmd.pid()) {
                (Ok(()), Some(pid)) => {
                    self.pcmd_retry = None;
                    say(&format!(
                        "the job's pcmd ({which}) ended ({status}); started it again at the same socket and checkpoint directory (pid {pid}, log {}){}",
                        pcmd.log.display(),
                        newest()
                    ));
                }
                (Ok(()), None) => {
                    self.pcmd_retry = None;
                    say(&format!(
                        "the job's pcmd ({which}) ended ({status}); another pcmd answers at its socket now: the job uses it{}",
                        newest()
                    ));
                }
                (Err(e), _) => {
                    self.pcmd_retry = Some(now + PCMD_RETRY);
                    say(&format!(
                        "the job's pcmd ({which}) ended ({status}) and cannot be started again (trying again in {} s): {e:#}",
                        PCMD_RETRY.as_secs()
                    ));
                }
            }
        }
        if let Some(daemons) = self.daemons.as_deref_mut() {
            if !daemons.ended().contains(self.local) {
                return;
            }
            let ensured = daemons.ensure(std::slice::from_ref(self.local));
            for host in &ensured.restarted {
                say(&format!(
                    "the pcmd on {host} had ended; started it again (log {}){}",
                    daemons
                        .log(host)
                        .map_or(String::new(), |l| l.display().to_string()),
                    newest()
                ));
            }
            for (host, why) in &ensured.failed {
                self.pcmd_retry = Some(now + PCMD_RETRY);
                say(&format!(
                    "the pcmd on {host} had ended and cannot be started again: {why}"
                ));
            }
        }
    }

    /// Why the launch must stop (a host that holds a rank is lost), if it must; `last_sign`
    /// is when the job last said anything. A lost host that holds no rank any more (every
    /// rank moved away) does not stop the launch: it is said, recorded, and no longer
    /// watched.
    fn lost_host(
        &mut self,
        supervisor: &mut Supervisor,
        last_sign: Instant,
        now: Instant,
    ) -> Option<String> {
        let ended: Vec<HostName> = match self.daemons.as_deref_mut() {
            Some(daemons) => daemons.ended(),
            None => Vec::new(),
        };
        let to_probe = self.plan.due(&ended, last_sign, now);
        if to_probe.is_empty() {
            return None;
        }
        let lost = crate::hosts::lost_hosts(self.launcher, &to_probe, PROBE_TIMEOUT);
        let (mut in_use, unused): (Vec<_>, Vec<_>) = lost
            .into_iter()
            .partition(|(host, _)| supervisor.holds_ranks(host));
        for (host, why) in unused {
            if !self.lets_a_left_host_go {
                // The launch could not end without the host: relaunch without it now.
                let why = format!("{why}; no rank runs there any more, but this runtime's launcher cannot end a launch that lost one of its hosts");
                in_use.push((host, why));
                continue;
            }
            say(&format!(
                "host {host} is lost ({why}), but no rank of the job runs there any more: carrying on without it"
            ));
            self.plan.forget(&host);
            if let Some(daemons) = self.daemons.as_deref_mut() {
                daemons.forget(&host);
            }
            supervisor.host_lost_unused(host);
        }
        let (host, why) = in_use.into_iter().next()?;
        let line = format!("host {host} is lost ({why})");
        supervisor.stopping_for_lost_host(host);
        Some(line)
    }
}

/// Where the events of a launch go: the supervisor, and the `--events` file.
pub(crate) struct Sink<'a> {
    pub(crate) supervisor: &'a mut Supervisor,
    pub(crate) events: Option<&'a mut std::fs::File>,
    pub(crate) started: Instant,
    /// When the launch last said anything (any run event), or began.
    pub(crate) last_sign: Instant,
}

impl Sink<'_> {
    /// The launcher's word on which process failed, taken for a process of another host
    /// (those of this host are watched more closely, [`watch_gone`]).
    fn named(&mut self, named: &LauncherNamedFailure, local: &HostName, at: Instant) {
        let Ok(host) = HostName::new(named.host.as_str()) else {
            return;
        };
        if host != *local {
            self.supervisor
                .on_launcher_named(&host, named.pid, named.rank.map(Rank), at);
            if let Some(ended) = named.ended {
                self.supervisor.on_launcher_reported_end(ended);
            }
        }
    }

    fn take(&mut self, event: RunEvent, at: Instant) {
        self.last_sign = self.last_sign.max(at);
        if let Some(file) = self.events.as_deref_mut() {
            let record = crate::EventRecord {
                seconds: at.duration_since(self.started).as_secs_f64(),
                launch: self.supervisor.launches(),
                event: event.clone(),
            };
            if let Ok(mut line) = serde_json::to_string(&record) {
                line.push('\n');
                let _ = file.write_all(line.as_bytes());
            }
        }
        if let Some(line) = self.supervisor.on_event(event, at) {
            say(&line);
        }
    }
}

/// Takes the events still in the pipes after the launcher ended, until both its output
/// and its error stream have ended (or [`DRAIN`] has passed: a process that outlives the
/// launcher may hold them open).
fn drain(receiver: &Receiver<Output>, open: OpenStreams, sink: &mut Sink<'_>, local: &HostName) {
    drain_until(
        receiver,
        open,
        Instant::now() + DRAIN,
        |output| match output {
            Output::Event(event, at) => sink.take(event, at),
            Output::Named(named, at) => sink.named(&named, local, at),
            Output::NamedEnded(ended) => sink.supervisor.on_launcher_reported_end(ended),
            Output::Gone(..) | Output::End | Output::StdoutEnd => {}
        },
    );
}

/// How a drain ended.
#[derive(Debug, PartialEq, Eq)]
enum Drained {
    /// Both streams ended: everything the launch wrote was taken.
    Ended,
    /// The time ran out (or the readers went) with a stream still open.
    TimedOut(OpenStreams),
}

/// Hands `take` what arrives until the streams still `open` have ended or `until` passes.
fn drain_until(
    receiver: &Receiver<Output>,
    mut open: OpenStreams,
    until: Instant,
    mut take: impl FnMut(Output),
) -> Drained {
    while open.any() {
        let left = until.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(left) {
            Ok(output) => {
                open.note(&output);
                take(output);
            }
            Err(_) => return Drained::TimedOut(open),
        }
    }
    Drained::Ended
}

fn reap(child: &mut Child) {
    let _ = child.wait();
}

/// Calls `each` with every line `reader` gives (the last one may lack its newline), until
/// its end, a read error, or `each` says stop.
fn for_each_line(reader: impl Read, mut each: impl FnMut(&[u8]) -> bool) {
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !each(&line) {
            return;
        }
    }
}

/// The launcher's word on a failed process in `line`, if any, sent on.
fn note_named_failure(line: &[u8], sender: &mpsc::Sender<Output>) {
    let line = String::from_utf8_lossy(line);
    if let Some(named) = LauncherNamedFailure::find_in(&line) {
        let _ = sender.send(Output::Named(named, Instant::now()));
    } else if let Some(ended) = LauncherReportedEnd::hydra_exit_code_in(&line) {
        let _ = sender.send(Output::NamedEnded(ended));
    }
}

/// Copies the launcher's standard error to ours, line by line, taking out the run events.
fn forward(stderr: impl Read, sender: &mpsc::Sender<Output>) {
    for_each_line(stderr, |line| match Stamped::find_in_output(line) {
        Some((at, stamped)) => {
            // What came before the event is the start of another rank's line, which the
            // next line read goes on with.
            let _ = std::io::stderr().lock().write_all(&line[..at]);
            sender
                .send(Output::Event(stamped.event, Instant::now()))
                .is_ok()
        }
        None => {
            let _ = std::io::stderr().lock().write_all(line);
            note_named_failure(line, sender);
            true
        }
    });
    let _ = sender.send(Output::End);
}

/// Copies the launcher's standard output to ours unchanged, line by line, noting the
/// failures it names.
fn copy_stdout(stdout: impl Read, sender: &mpsc::Sender<Output>) {
    for_each_line(stdout, |line| {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(line);
        let _ = out.flush();
        drop(out);
        note_named_failure(line, sender);
        true
    });
    let _ = sender.send(Output::StdoutEnd);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launcher's pipes usually close before its exit is seen: the launch's loop takes
    /// both ends, and the drain must not then wait its whole time for them again (every
    /// pcmrun run ended 2 s late, a 0.2 s job took 2.3 s).
    #[test]
    fn given_both_ends_taken_by_the_launch_loop_then_the_drain_waits_for_nothing() {
        let (sender, receiver) = mpsc::channel();
        let mut open = OpenStreams::BOTH;
        open.note(&Output::End);
        open.note(&Output::StdoutEnd);
        // A reader still alive: a drain that waited would wait its whole time.
        let _reader = sender;
        let far = Instant::now() + Duration::from_secs(3600);
        assert_eq!(drain_until(&receiver, open, far, |_| {}), Drained::Ended);
    }

    #[test]
    fn given_one_end_taken_by_the_loop_then_the_drain_takes_events_until_the_other() {
        let (sender, receiver) = mpsc::channel();
        let mut open = OpenStreams::BOTH;
        open.note(&Output::StdoutEnd);
        sender
            .send(Output::Gone(7, Instant::now()))
            .expect("the receiver is alive");
        sender.send(Output::End).expect("the receiver is alive");
        sender
            .send(Output::Gone(8, Instant::now()))
            .expect("the receiver is alive");
        let far = Instant::now() + Duration::from_secs(3600);
        let mut taken = Vec::new();
        let drained = drain_until(&receiver, open, far, |output| {
            if let Output::Gone(pid, _) = output {
                taken.push(pid);
            }
        });
        assert_eq!(drained, Drained::Ended);
        assert_eq!(taken, [7], "what comes after both ends is not the launch's");
    }

    #[test]
    fn given_a_stream_held_open_then_the_drain_gives_up_at_its_time_and_says_which() {
        let (sender, receiver) = mpsc::channel();
        sender.send(Output::End).expect("the receiver is alive");
        let drained = drain_until(&receiver, OpenStreams::BOTH, Instant::now(), |_| {});
        assert_eq!(
            drained,
            Drained::TimedOut(OpenStreams {
                stderr: false,
                stdout: true
            })
        );
    }
}
