//! `pcmrun`: see the library's documentation and `pcmrun --help`.

use std::io::{BufRead as _, BufReader, Read, Write as _};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser as _;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use pcm_proto::run::{RunEvent, EVENTS_ENV};
use pcmrun::cli::{normalize_args, Options};
use pcmrun::daemon::{self, Daemon};
use pcmrun::supervisor::{LauncherEnd, Policy, Start, Supervisor, Verdict, INTERRUPTED_EXIT};
use pcmrun::{Launch, Runtime};

/// Settings pcmrun sets itself from its options, never taken from its environment.
const CONTROLLED: &[&str] = &[
    "PCM_RESTART",
    "PCM_DAEMON",
    "PCM_CHECKPOINT_INTERVAL",
    "PCM_JOB_NAME",
];

/// How long the launcher may take to end after SIGTERM before its group is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long to wait for the last output after the launcher ended (a process that outlives
/// it may hold the pipe open).
const DRAIN: Duration = Duration::from_secs(2);

fn main() {
    let options = match Options::try_parse_from(normalize_args(std::env::args_os())) {
        Ok(options) => options,
        Err(e) => e.exit(),
    };
    if let Err(message) = options.validate() {
        eprintln!("pcmrun: {message}");
        std::process::exit(2);
    }
    match run(&options) {
        Ok(code) => std::process::exit(code.clamp(0, 255)),
        Err(e) => {
            eprintln!("pcmrun: {e:#}");
            std::process::exit(1);
        }
    }
}

/// What arrives from the launcher's standard error.
enum Output {
    Event(RunEvent, Instant),
    End,
}

fn say(line: &str) {
    eprintln!("pcmrun: {line}");
}

fn run(options: &Options) -> anyhow::Result<i32> {
    let runtime = Runtime::detect(&options.launcher)?;
    let hostfile = match &options.hostfile {
        Some(path) => Some(
            std::fs::canonicalize(path)
                .with_context(|| format!("--hostfile {}", path.display()))?,
        ),
        None => None,
    };
    let pcmd = sibling_binary("pcmd");
    let daemon = daemon::choose(
        &options.daemon,
        &pcmd,
        options.checkpoint_dir.as_deref(),
        options.dry_run,
    )?;
    let checkpoints = options.checkpoint_interval > 0.0 && daemon.keeps_checkpoints();
    if options.checkpoint_interval > 0.0 && !daemon.keeps_checkpoints() {
        say("no pcmd (--daemon none): no checkpoints are taken, and a lost rank ends the job");
    }
    let launch_for = |start: Start| -> Launch {
        let mut env = std::collections::BTreeMap::new();
        env.insert(EVENTS_ENV.to_owned(), "stderr".to_owned());
        if checkpoints {
            env.insert(
                "PCM_CHECKPOINT_INTERVAL".to_owned(),
                options.checkpoint_interval.to_string(),
            );
        }
        // The user's PCM settings and log filter reach every rank on every runtime (Open
        // MPI passes only what `-x` names); those pcmrun decides are set below.
        for (key, value) in std::env::vars() {
            let forwarded = (key.starts_with("PCM_") || key == "RUST_LOG")
                && !CONTROLLED.contains(&key.as_str());
            if forwarded {
                env.insert(key, value);
            }
        }
        // Moves may target the hosts of the hostfile: PCM learns them from PCM_HOSTFILE.
        if let Some(hostfile) = &hostfile {
            env.entry("PCM_HOSTFILE".to_owned())
                .or_insert_with(|| hostfile.display().to_string());
        }
        if let Some(value) = daemon.env_value() {
            env.insert(pcm_proto::DAEMON_ENV.to_owned(), value.to_owned());
        }
        if let Some(name) = &options.job_name {
            env.insert("PCM_JOB_NAME".to_owned(), name.clone());
        }
        if start == Start::FromCheckpoint {
            env.insert("PCM_RESTART".to_owned(), "require".to_owned());
        }
        Launch {
            runtime,
            launcher: options.launcher.clone(),
            ranks: options.ranks as usize,
            hostfile: hostfile.clone(),
            env,
            options: options.launcher_args.clone(),
            program: options.program.clone(),
        }
    };
    let policy = Policy {
        checkpoints,
        max_restarts: options.max_restarts,
        first_delay: Duration::from_secs_f64(options.retry_delay),
        resume_first: options.restart,
    };
    let started = Instant::now();
    let started_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut supervisor = Supervisor::new(policy, started);
    if options.dry_run {
        println!("{}", launch_for(supervisor.first_start()).shell_line());
        return Ok(0);
    }
    if let Daemon::Started(d) = &daemon {
        say(&format!(
            "started a pcmd for this job (PCM_DAEMON={}, log {})",
            d.daemon_env,
            d.log.display()
        ));
    }
    let mut events = match &options.events {
        Some(path) => Some(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create the events file {}", path.display()))?,
        ),
        None => None,
    };
    let signals = Arc::new(AtomicUsize::new(0));
    watch_signals(Arc::clone(&signals))?;
    let progress_every =
        (options.progress > 0.0).then(|| Duration::from_secs_f64(options.progress));
    let mut start = supervisor.first_start();
    let (code, reason) = loop {
        let launch = launch_for(start);
        supervisor.launching();
        let mut sink = Sink {
            supervisor: &mut supervisor,
            events: events.as_mut(),
            started,
        };
        let end = run_launch(&launch, &mut sink, &signals, progress_every)?;
        let interrupted = signals.load(Ordering::SeqCst) > 0;
        match supervisor.on_launcher_end(end, interrupted, Instant::now()) {
            Verdict::Done { code, reason } => break (code, reason),
            Verdict::Relaunch {
                start: next,
                delay,
                reason,
            } => {
                say(&reason);
                if !sleep_unless_signalled(delay, &signals) {
                    break (
                        INTERRUPTED_EXIT,
                        Some("interrupted during recovery: the job is not relaunched".into()),
                    );
                }
                start = next;
            }
        }
    };
    let mut report = supervisor.report(code, reason.clone(), Instant::now());
    report.started_unix_s = started_unix_s;
    if let Some(reason) = &reason {
        say(reason);
    }
    say(&format!(
        "exit status {code} after {:.1} s: {} launches, {} recoveries, {} migrations, {} checkpoints",
        report.seconds,
        report.launches,
        report.recoveries.len(),
        report.migrations,
        report.checkpoints
    ));
    if let Some(path) = &options.report {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write the report to {}", path.display()))?;
    }
    drop(daemon);
    Ok(code)
}

/// A binary installed next to pcmrun, else found on PATH.
fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Counts SIGINT and SIGTERM.
fn watch_signals(count: Arc<AtomicUsize>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("cannot watch SIGINT and SIGTERM")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for _ in signals.forever() {
                count.fetch_add(1, Ordering::SeqCst);
            }
        })?;
    Ok(())
}

/// Sleeps `delay`; false if a signal came meanwhile.
fn sleep_unless_signalled(delay: Duration, signals: &AtomicUsize) -> bool {
    let until = Instant::now() + delay;
    while Instant::now() < until {
        if signals.load(Ordering::SeqCst) > 0 {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    signals.load(Ordering::SeqCst) == 0
}

/// Runs one launch to its end: passes output on, feeds events to `supervisor`, prints
/// progress, and stops the launch on a signal.
fn run_launch(
    launch: &Launch,
    sink: &mut Sink<'_>,
    signals: &AtomicUsize,
    progress_every: Option<Duration>,
) -> anyhow::Result<LauncherEnd> {
    let mut command = launch.command();
    if !launch.env.contains_key("PCM_RESTART") {
        // The launcher passes its environment on: a PCM_RESTART of the user's shell would
        // make every launch a restart.
        command.env_remove("PCM_RESTART");
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        // Its own process group, so that the whole launch (launcher, proxies, local ranks)
        // can be stopped together, and Ctrl-C reaches pcmrun first.
        .process_group(0);
    pcmrun::end_with_parent(&mut command);
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start {}", launch.launcher.display()))?;
    let group = Pid::from_raw(child.id() as i32);
    let stderr = child
        .stderr
        .take()
        .context("no pipe for the launcher's stderr")?;
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new()
        .name("launcher-stderr".into())
        .spawn(move || forward(stderr, &sender))?;
    let mut next_progress = progress_every.map(|d| Instant::now() + d);
    let mut stopping: Option<(usize, Instant)> = None;
    let end = loop {
        match receiver.recv_timeout(Duration::from_millis(100)) {
            Ok(Output::Event(event, at)) => sink.take(event, at),
            Ok(Output::End) | Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
        }
        if let Some(status) = child.try_wait()? {
            break match status.code() {
                Some(code) => LauncherEnd::Exited(code),
                None => LauncherEnd::Signaled(status.signal().unwrap_or(0)),
            };
        }
        let seen = signals.load(Ordering::SeqCst);
        match stopping {
            None if seen > 0 => {
                say("stopping the job (a second Ctrl-C kills it at once)");
                let _ = killpg(group, Signal::SIGTERM);
                stopping = Some((seen, Instant::now()));
            }
            Some((first, since)) if seen > first || since.elapsed() > STOP_GRACE => {
                let _ = killpg(group, Signal::SIGKILL);
            }
            _ => {}
        }
        if let Some(at) = next_progress {
            if Instant::now() >= at {
                say(&sink.supervisor.progress_line());
                next_progress = progress_every.map(|d| Instant::now() + d);
            }
        }
    };
    drain(&receiver, sink);
    // Whatever of the launch is left on this host (a proxy, an orphaned rank) goes too.
    let _ = killpg(group, Signal::SIGKILL);
    reap(&mut child);
    Ok(end)
}

/// Where the events of a launch go: the supervisor, and the `--events` file.
struct Sink<'a> {
    supervisor: &'a mut Supervisor,
    events: Option<&'a mut std::fs::File>,
    started: Instant,
}

impl Sink<'_> {
    fn take(&mut self, event: RunEvent, at: Instant) {
        if let Some(file) = self.events.as_deref_mut() {
            let record = pcmrun::EventRecord {
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

/// Takes the events still in the pipe after the launcher ended.
fn drain(receiver: &Receiver<Output>, sink: &mut Sink<'_>) {
    let until = Instant::now() + DRAIN;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(left) {
            Ok(Output::Event(event, at)) => sink.take(event, at),
            Ok(Output::End) | Err(_) => return,
        }
    }
}

fn reap(child: &mut Child) {
    let _ = child.wait();
}

/// Copies the launcher's standard error to ours, line by line, taking out the run events.
fn forward(stderr: impl Read, sender: &mpsc::Sender<Output>) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let event = std::str::from_utf8(&line)
            .ok()
            .and_then(RunEvent::from_line);
        match event {
            Some(event) => {
                if sender.send(Output::Event(event, Instant::now())).is_err() {
                    break;
                }
            }
            None => {
                let _ = std::io::stderr().lock().write_all(&line);
            }
        }
    }
    let _ = sender.send(Output::End);
}
