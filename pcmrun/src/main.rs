//! `pcmrun`: see the library's documentation and `pcmrun --help`.

use std::io::{BufRead as _, BufReader, Read, Write as _};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Parser as _;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use pcm_proto::run::{RunEvent, Stamped, EVENTS_ENV};
use pcm_proto::{HostName, Rank};
use pcmrun::cli::{normalize_args, Options};
use pcmrun::daemon::{self, Daemon, HostDaemons, LocalDaemon};
use pcmrun::hosts::{Hostfile, ProbePlan, RemoteLauncher, PROBE_TIMEOUT};
use pcmrun::runtime::LauncherNamedFailure;
use pcmrun::series::{decide_first_start, series_name, Ended, FirstStart, Holder, SeriesLock};
use pcmrun::supervisor::{
    interrupted_reason, signal_name, LauncherEnd, Policy, Start, Supervisor, Verdict,
    INTERRUPTED_EXIT,
};
use pcmrun::{Launch, Runtime};

/// Settings pcmrun sets itself from its options, never taken from its environment.
const CONTROLLED: &[&str] = &[
    "PCM_RESTART",
    "PCM_DAEMON",
    "PCM_CHECKPOINT_INTERVAL",
    "PCM_CHECKPOINT_DIR",
    "PCM_JOB_NAME",
    pcm_proto::checkpoint::LOCKED_SERIES_ENV,
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
    /// A process of this host is gone (no longer exists, or a zombie).
    Gone(u32, Instant),
    /// The launcher named the process whose failure ended the launch.
    Named(LauncherNamedFailure, Instant),
    /// The launcher's standard error ended.
    End,
    /// The launcher's standard output ended.
    StdoutEnd,
}

/// A line for people on standard error. A failed write is ignored: after SIGHUP the
/// terminal may be gone, and pcmrun must still stop the job and write its report.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "pcmrun: {line}");
}

fn run(options: &Options) -> anyhow::Result<i32> {
    if !options.dry_run {
        let removed = pcmrun::remove_stale_private_dirs();
        if removed > 0 {
            say(&format!(
                "removed {removed} private directories of earlier pcmruns that were killed"
            ));
        }
    }
    let runtime = Runtime::detect(&options.launcher)?;
    // Inside a Slurm allocation without --hostfile: the allocation's hosts, written as a
    // hostfile in the runtime's form (the launch stays within the allocation either way), in
    // a private directory that lives as long as pcmrun.
    let slurm_hostfile = match &options.hostfile {
        Some(_) => None,
        None => pcmrun::hosts::slurm::hostfile_text(
            |key| std::env::var(key).ok(),
            |host, slots| runtime.hostfile_line(host, slots),
        )
        .transpose()?
        .map(|text| -> anyhow::Result<(tempfile::TempDir, PathBuf)> {
            let dir = pcmrun::private_dir("slurm")?;
            let path = dir.path().join("hosts");
            std::fs::write(&path, &text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            say(&format!(
                "inside a Slurm allocation: hosts {} (from {})",
                text.lines().collect::<Vec<_>>().join(", "),
                pcmrun::hosts::slurm::NODELIST_ENV.join(" or ")
            ));
            Ok((dir, path))
        })
        .transpose()?,
    };
    let hostfile = match options
        .hostfile
        .as_ref()
        .or(slurm_hostfile.as_ref().map(|(_, path)| path))
    {
        Some(path) => {
            let path = std::fs::canonicalize(path)
                .with_context(|| format!("--hostfile {}", path.display()))?;
            let hosts = Hostfile::read(&path)?;
            Some((path, hosts))
        }
        None => None,
    };
    let pcmd = sibling_binary("pcmd");
    let local = daemon::local_host()?;
    let remote_launcher = RemoteLauncher::from_env(|key| std::env::var(key).ok());
    // Hosts their owner gave back to the pool (`ios-agent leave`) are not used; the
    // hostfile without them lives in a private directory as long as pcmrun.
    let mut given_back_at_start = Vec::new();
    let mut kept_hostfile_dir = None;
    let hostfile = match hostfile {
        Some((path, file)) if !options.dry_run => {
            let given = daemon::given_back(&file.hosts(), &local, &remote_launcher);
            for (host, why) in &given {
                say(&format!("host {host} was {why}: the job does not use it"));
            }
            given_back_at_start = given.into_iter().map(|(h, _)| h).collect::<Vec<_>>();
            let kept = file.without(&given_back_at_start);
            if kept.lines.is_empty() {
                bail!(
                    "every host of {} was given back to the pool by its owner",
                    path.display()
                );
            }
            match given_back_at_start.is_empty() {
                true => Some((path, file)),
                false => {
                    let dir = pcmrun::private_dir("hosts")?;
                    let kept_path = dir.path().join("hosts");
                    std::fs::write(&kept_path, kept.text()).with_context(|| {
                        format!("cannot write the hostfile {}", kept_path.display())
                    })?;
                    kept_hostfile_dir = Some(dir);
                    Some((kept_path, kept))
                }
            }
        }
        other => other,
    };
    // Hosts other than this one: a pcmd on each, and the hosts probed before a relaunch.
    let several_hosts = hostfile
        .as_ref()
        .is_some_and(|(_, file)| file.hosts().iter().any(|h| *h != local));
    let per_host = several_hosts && matches!(options.daemon.as_str(), "auto" | "start");
    // The job's checkpoint series, held for pcmrun's life: a second pcmrun of it stops here,
    // and the rerun of a run that did not finish resumes it.
    let inherited_none =
        std::env::var(pcm_proto::DAEMON_ENV).is_ok_and(|v| v == "none") && options.daemon == "auto";
    let wants_checkpoints =
        options.checkpoint_interval > 0.0 && options.daemon != "none" && !inherited_none;
    let program_line: Vec<String> = options
        .program
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // The job's checkpoint directory, which every rank names to its pcmd: on several hosts
    // one that every host sees.
    let checkpoint_dir = match &options.checkpoint_dir {
        Some(dir) => std::path::absolute(dir)
            .with_context(|| format!("--checkpoint-dir {}", dir.display()))?,
        None if per_host => shared_checkpoint_dir(),
        None => pcm_proto::default_checkpoint_dir(&local),
    };
    let mut series_lock = match wants_checkpoints && !options.dry_run {
        true => {
            let dir = checkpoint_dir.clone();
            let series = series_name(&program_line, options.ranks, options.job_name.as_deref());
            let holder = Holder {
                pid: std::process::id(),
                host: local.to_string(),
                command: program_line.clone(),
                started_unix_s: pcmrun::unix_now(),
                ended: None,
            };
            Some(SeriesLock::take(&dir, &series, holder)?)
        }
        false => None,
    };
    let first = match &series_lock {
        Some(lock) => decide_first_start(
            &lock.series,
            lock.previous.as_ref(),
            lock.newest_complete(),
            &program_line,
            options.restart,
            options.fresh,
        ),
        None => FirstStart {
            start: if options.restart {
                Start::FromCheckpoint
            } else {
                Start::Fresh
            },
            note: None,
        },
    };
    if let Some(note) = &first.note {
        say(note);
    }
    let mut daemon = if per_host && !options.dry_run {
        let hosts = hostfile
            .as_ref()
            .map(|(_, file)| file.hosts())
            .unwrap_or_default();
        let node_template = (options.daemon == "auto").then(daemon::node_socket_template);
        let daemons = HostDaemons::start(
            &pcmd,
            &checkpoint_dir,
            remote_launcher.clone(),
            &hosts,
            node_template,
        )?;
        let (attached, started) = daemons.attached_and_started();
        let mut used = Vec::new();
        if !attached.is_empty() {
            used.push(format!("the nodes' own pcmd on {}", names(&attached)));
        }
        if !started.is_empty() {
            used.push(format!("started a pcmd on {}", names(&started)));
        }
        say(&format!(
            "{} (PCM_DAEMON={}, checkpoints in {}, logs in {})",
            used.join("; "),
            daemons.daemon_env,
            daemons.checkpoint_dir.display(),
            daemons.dir().display()
        ));
        for (host, why) in daemons.hosts_not_sharing(&hosts) {
            say(&format!(
                "warning: {why}: the ranks of {host} cannot resume on another host if {host} is lost (give --checkpoint-dir a directory every host sees)"
            ));
        }
        Daemon::PerHost(daemons)
    } else {
        daemon::choose(
            &options.daemon,
            &pcmd,
            options.checkpoint_dir.as_deref(),
            options.dry_run,
        )?
    };
    // Hostfiles of relaunches that leave lost hosts out.
    let relaunch_dir = match several_hosts {
        true => Some(pcmrun::private_dir("relaunch")?),
        false => None,
    };
    let checkpoints = options.checkpoint_interval > 0.0 && daemon.keeps_checkpoints();
    if options.checkpoint_interval > 0.0 && !daemon.keeps_checkpoints() {
        say("no pcmd (--daemon none): no checkpoints are taken, and a lost rank ends the job");
    }
    let daemon_env = daemon.env_value().to_owned();
    let launch_for = |start: Start, hostfile: Option<&PathBuf>, ranks: u32| -> Launch {
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
        if let Some(hostfile) = hostfile {
            env.insert("PCM_HOSTFILE".to_owned(), hostfile.display().to_string());
        }
        env.insert(pcm_proto::DAEMON_ENV.to_owned(), daemon_env.clone());
        if checkpoints {
            env.insert(
                "PCM_CHECKPOINT_DIR".to_owned(),
                checkpoint_dir.display().to_string(),
            );
        }
        if let Some(name) = &options.job_name {
            env.insert("PCM_JOB_NAME".to_owned(), name.clone());
        }
        if let Some(lock) = &series_lock {
            env.insert(
                pcm_proto::checkpoint::LOCKED_SERIES_ENV.to_owned(),
                lock.series.clone(),
            );
        }
        match start {
            Start::FromCheckpoint => {
                env.insert("PCM_RESTART".to_owned(), "require".to_owned());
            }
            Start::IfAny => {
                env.insert("PCM_RESTART".to_owned(), "1".to_owned());
            }
            Start::Fresh => {}
        }
        Launch {
            runtime,
            launcher: options.launcher.clone(),
            ranks: ranks as usize,
            hostfile: hostfile.cloned(),
            env,
            options: options.launcher_args.clone(),
            program: options.program.clone(),
        }
    };
    let from_pool = options.hosts_from_pool.then(|| FromPool {
        ios_agent: sibling_binary("ios-agent"),
        runtime,
    });
    let policy = Policy {
        checkpoints,
        max_restarts: options.max_restarts,
        first_delay: Duration::from_secs_f64(options.retry_delay),
        first: first.start,
        stall_timeout: Duration::from_secs_f64(options.stall_timeout),
    };
    let started = Instant::now();
    let started_unix_s = pcmrun::unix_now();
    let mut supervisor = Supervisor::new(policy, started);
    supervisor.hosts_given_back(given_back_at_start);
    if options.dry_run {
        let hostfile = hostfile.as_ref().map(|(path, _)| path);
        println!(
            "{}",
            launch_for(supervisor.first_start(), hostfile, options.ranks).shell_line()
        );
        return Ok(0);
    }
    if let Daemon::Local(d) = &daemon {
        say(&d.describe());
    }
    let mut events = match &options.events {
        Some(path) => Some(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create the events file {}", path.display()))?,
        ),
        None => None,
    };
    let signals = Arc::new(Signals::default());
    watch_signals(Arc::clone(&signals))?;
    let progress_every =
        (options.progress > 0.0).then(|| Duration::from_secs_f64(options.progress));
    let mut start = supervisor.first_start();
    let mut hosts = hostfile.clone();
    let mut width = options.ranks;
    let (code, reason) = loop {
        let launch = launch_for(start, hosts.as_ref().map(|(path, _)| path), width);
        supervisor.launching();
        let mut sink = Sink {
            supervisor: &mut supervisor,
            events: events.as_mut(),
            started,
            last_sign: Instant::now(),
        };
        let watched: Vec<HostName> = match (&hosts, several_hosts) {
            (Some((_, file)), true) => file.hosts().into_iter().filter(|h| *h != local).collect(),
            _ => Vec::new(),
        };
        let (daemons, local_pcmd) = match &mut daemon {
            Daemon::PerHost(d) => (Some(d), None),
            Daemon::Local(d) => (None, Some(d)),
            _ => (None, None),
        };
        let mut watch = HostWatch {
            launcher: &remote_launcher,
            daemons,
            local_pcmd,
            local: &local,
            series: series_lock.as_ref(),
            pcmd_retry: None,
            plan: ProbePlan::new(watched, Duration::from_secs_f64(options.stall_timeout)),
            lets_a_left_host_go: runtime.lets_a_left_host_go(),
        };
        let end = run_launch(&launch, &mut sink, &signals, progress_every, &mut watch)?;
        match supervisor.on_launcher_end(end, signals.last(), Instant::now()) {
            Verdict::Done { code, reason } => break (code, reason),
            Verdict::Relaunch {
                start: next,
                delay,
                reason,
            } => {
                say(&reason);
                if !sleep_unless_signalled(delay, &signals) {
                    let signal = signals.last().unwrap_or(libc_sigterm());
                    break (INTERRUPTED_EXIT, Some(interrupted_reason(signal, true)));
                }
                if let (Some((_, file)), Some(dir)) = (hosts.clone(), &relaunch_dir) {
                    let daemons = match &mut daemon {
                        Daemon::PerHost(d) => Some(d),
                        _ => None,
                    };
                    match hosts_still_alive(
                        &file,
                        &local,
                        &remote_launcher,
                        daemons,
                        &mut supervisor,
                        from_pool.as_ref(),
                    ) {
                        Some(alive) => {
                            let path = dir
                                .path()
                                .join(format!("hosts-launch-{}", supervisor.launches() + 1));
                            std::fs::write(&path, alive.text()).with_context(|| {
                                format!("cannot write the hostfile {}", path.display())
                            })?;
                            hosts = Some((path, alive));
                        }
                        None => {
                            break (
                                1,
                                Some(format!(
                                    "no host of the hostfile answers any more ({}): the job cannot be relaunched",
                                    names(&file.hosts())
                                )),
                            );
                        }
                    }
                }
                let next_width = relaunch_width(
                    options,
                    width,
                    supervisor.resized_to(),
                    hosts.as_ref().map(|(_, file)| file.slots()),
                );
                if next_width != width {
                    say(&format!(
                        "relaunched {}: {width} -> {next_width} ranks{}",
                        if next_width < width {
                            "narrower"
                        } else {
                            "wider"
                        },
                        match hosts.as_ref().map(|(_, file)| file.slots()) {
                            Some(slots) if slots < width =>
                                format!(" (the hosts left have {slots} slots)"),
                            _ => String::new(),
                        }
                    ));
                    supervisor.relaunch_width(next_width);
                    width = next_width;
                }
                start = next;
            }
        }
    };
    let mut report = supervisor.report(code, reason.clone(), Instant::now());
    if let Some(lock) = &mut series_lock {
        // A job that finished, or failed by itself, is not resumed by a rerun.
        let ended = Ended {
            code,
            resumable: code != 0 && !supervisor.failed_by_itself(),
        };
        if let Err(e) = lock.ended(ended) {
            say(&format!("warning: {e:#}"));
        }
    }
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
    drop(kept_hostfile_dir);
    Ok(code)
}

/// The width of a relaunch of a job last launched with `width` ranks: the same, unless the
/// job is malleable (`--np-min`): then the width it was resized to if any (at most
/// `--np-max`, default `--np`), and no more than the `slots` of the hosts left, never under
/// `--np-min`.
fn relaunch_width(
    options: &Options,
    width: u32,
    resized_to: Option<u32>,
    slots: Option<u32>,
) -> u32 {
    let Some(min) = options.np_min else {
        return width;
    };
    let max = options.np_max.unwrap_or(options.ranks);
    let wanted = resized_to.unwrap_or(width).min(max);
    slots.map_or(wanted, |slots| wanted.min(slots)).max(min)
}

/// The hostfile `file` without its hosts that no longer answer through the launcher (or,
/// with `daemons`, whose pcmd cannot be started again), each said and recorded in the
/// report; `None` when no host is left.
fn hosts_still_alive(
    file: &Hostfile,
    local: &HostName,
    launcher: &RemoteLauncher,
    mut daemons: Option<&mut HostDaemons>,
    supervisor: &mut Supervisor,
    pool: Option<&FromPool>,
) -> Option<Hostfile> {
    let remote: Vec<HostName> = file.hosts().into_iter().filter(|h| h != local).collect();
    let mut lost = pcmrun::hosts::lost_hosts(launcher, &remote, PROBE_TIMEOUT);
    let answering: Vec<HostName> = file
        .hosts()
        .into_iter()
        .filter(|h| !lost.iter().any(|(l, _)| l == h))
        .collect();
    let given = daemon::given_back(&answering, local, launcher);
    for (host, why) in &given {
        say(&format!(
            "host {host} was {why}: the relaunch leaves it out"
        ));
    }
    let given: Vec<HostName> = given.into_iter().map(|(h, _)| h).collect();
    supervisor.hosts_given_back(given.iter().cloned());
    if let Some(daemons) = daemons.as_deref_mut() {
        let alive: Vec<HostName> = answering
            .into_iter()
            .filter(|h| !given.contains(h))
            .collect();
        let ensured = daemons.ensure(&alive);
        for host in &ensured.restarted {
            say(&format!(
                "the pcmd on {host} had ended; started it again (log {})",
                daemons
                    .log(host)
                    .map_or(String::new(), |l| l.display().to_string())
            ));
        }
        lost.extend(ensured.failed);
    }
    for (host, why) in &lost {
        say(&format!(
            "host {host} is lost ({why}): the relaunch leaves it out"
        ));
    }
    let lost: Vec<HostName> = lost.into_iter().map(|(h, _)| h).collect();
    let mut alive = file.without(&lost).without(&given);
    let left_out: Vec<HostName> = lost.iter().chain(&given).cloned().collect();
    supervisor.hosts_lost(lost);
    if let Some(pool) = pool {
        let ranks = supervisor.ranks_on(&left_out);
        if ranks > 0 {
            let added = pool.refill(&mut alive, file, &left_out, ranks, local, launcher, daemons);
            supervisor.hosts_added(added);
        }
    }
    if alive.lines.is_empty() {
        return None;
    }
    if alive.lines.len() < file.lines.len() {
        say(&format!("relaunching on {}", names(&alive.hosts())));
    }
    Some(alive)
}

/// `--hosts-from-pool`: idle hosts of the agents' pool take the ranks of hosts a relaunch
/// leaves out.
struct FromPool {
    /// The `ios-agent` program that asks the agent on this host.
    ios_agent: PathBuf,
    runtime: Runtime,
}

impl FromPool {
    /// Adds to `alive` hosts of the pool for `ranks` ranks of the hosts `left_out` of
    /// `file`, each probed and given a pcmd first; returns those added. Says what it does,
    /// and why not when it cannot.
    #[allow(clippy::too_many_arguments)]
    fn refill(
        &self,
        alive: &mut Hostfile,
        file: &Hostfile,
        left_out: &[HostName],
        ranks: u32,
        local: &HostName,
        launcher: &RemoteLauncher,
        daemons: Option<&mut HostDaemons>,
    ) -> Vec<HostName> {
        let pool = match pcmrun::hosts::pool::hosts(&self.ios_agent) {
            Ok(pool) => pool,
            Err(why) => {
                say(&format!(
                    "--hosts-from-pool: no host of the pool to use ({why}); relaunching on the hosts left"
                ));
                return Vec::new();
            }
        };
        let excluded: Vec<HostName> = file
            .hosts()
            .into_iter()
            .chain(left_out.iter().cloned())
            .collect();
        let chosen = pcmrun::hosts::pool::choose(&pool, &excluded, ranks);
        let candidates: Vec<HostName> = chosen.iter().map(|(h, _)| h.clone()).collect();
        let remote: Vec<HostName> = candidates.iter().filter(|h| *h != local).cloned().collect();
        let mut refused = pcmrun::hosts::lost_hosts(launcher, &remote, PROBE_TIMEOUT);
        refused.extend(daemon::given_back(&candidates, local, launcher));
        if let Some(daemons) = daemons {
            let answering: Vec<HostName> = candidates
                .iter()
                .filter(|h| !refused.iter().any(|(r, _)| r == *h))
                .cloned()
                .collect();
            refused.extend(daemons.ensure(&answering).failed);
        }
        for (host, why) in &refused {
            say(&format!("--hosts-from-pool: not using {host} ({why})"));
        }
        let mut added = Vec::new();
        for (host, slots) in chosen {
            if refused.iter().any(|(r, _)| *r == host) {
                continue;
            }
            alive.lines.push(pcmrun::hosts::HostLine {
                line: self.runtime.hostfile_line(host.as_str(), slots),
                host: host.clone(),
            });
            added.push(host);
        }
        if added.is_empty() {
            say(&format!(
                "--hosts-from-pool: the agent knows no idle host of the pool for the {ranks} rank(s) of {}; relaunching on the hosts left",
                names(left_out)
            ));
        } else {
            say(&format!(
                "--hosts-from-pool: the {ranks} rank(s) of {} go to {}, idle hosts of the pool",
                names(left_out),
                names(&added)
            ));
        }
        added
    }
}

/// Host names for people: `a, b, c`.
fn names(hosts: &[HostName]) -> String {
    hosts
        .iter()
        .map(HostName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The checkpoint directory of jobs on several hosts when `--checkpoint-dir` is not given:
/// `$XDG_STATE_HOME/pcmrun/checkpoints`, else `~/.local/state/pcmrun/checkpoints` (home
/// directories are shared by the hosts of most clusters; pcmrun checks it).
fn shared_checkpoint_dir() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    state.join("pcmrun").join("checkpoints")
}

/// A binary installed next to pcmrun, else found on PATH.
fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// The stop signals that came: how many, and the newest.
#[derive(Debug, Default)]
struct Signals {
    count: AtomicUsize,
    last: AtomicI32,
}

impl Signals {
    fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// The newest stop signal, if one came.
    fn last(&self) -> Option<i32> {
        (self.count() > 0).then(|| self.last.load(Ordering::SeqCst))
    }
}

fn libc_sigterm() -> i32 {
    Signal::SIGTERM as i32
}

/// Counts SIGINT, SIGTERM and SIGHUP (a closed terminal stops the job as SIGTERM does:
/// the job is stopped, the report written, the checkpoints kept).
fn watch_signals(seen: Arc<Signals>) -> anyhow::Result<()> {
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
fn sleep_unless_signalled(delay: Duration, signals: &Signals) -> bool {
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
fn run_launch(
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
    pcmrun::end_with_parent(&mut command);
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
    let end = loop {
        match receiver.recv_timeout(Duration::from_millis(100)) {
            Ok(Output::Event(event, at)) => sink.take(event, at),
            Ok(Output::Gone(pid, at)) => sink.supervisor.on_gone(watch.local, pid, at),
            Ok(Output::Named(named, at)) => sink.named(&named, watch.local, at),
            Ok(Output::End | Output::StdoutEnd)
            | Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
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
    drain(&receiver, sink, watch.local);
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
struct HostWatch<'a> {
    launcher: &'a RemoteLauncher,
    daemons: Option<&'a mut HostDaemons>,
    /// The pcmd pcmrun started on this host for a job on this host only.
    local_pcmd: Option<&'a mut LocalDaemon>,
    local: &'a HostName,
    series: Option<&'a SeriesLock>,
    /// After a failed restart of the local pcmd: when to try again.
    pcmd_retry: Option<Instant>,
    plan: ProbePlan,
    /// [`Runtime::lets_a_left_host_go`].
    lets_a_left_host_go: bool,
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
        let lost = pcmrun::hosts::lost_hosts(self.launcher, &to_probe, PROBE_TIMEOUT);
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
struct Sink<'a> {
    supervisor: &'a mut Supervisor,
    events: Option<&'a mut std::fs::File>,
    started: Instant,
    /// When the launch last said anything (any run event), or began.
    last_sign: Instant,
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
        }
    }

    fn take(&mut self, event: RunEvent, at: Instant) {
        self.last_sign = self.last_sign.max(at);
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

/// Takes the events still in the pipes after the launcher ended, until both its output
/// and its error stream have ended (or [`DRAIN`] has passed: a process that outlives the
/// launcher may hold them open).
fn drain(receiver: &Receiver<Output>, sink: &mut Sink<'_>, local: &HostName) {
    let until = Instant::now() + DRAIN;
    let (mut stderr_open, mut stdout_open) = (true, true);
    while stderr_open || stdout_open {
        let left = until.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(left) {
            Ok(Output::Event(event, at)) => sink.take(event, at),
            Ok(Output::Named(named, at)) => sink.named(&named, local, at),
            Ok(Output::Gone(..)) => {}
            Ok(Output::End) => stderr_open = false,
            Ok(Output::StdoutEnd) => stdout_open = false,
            Err(_) => return,
        }
    }
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
    if let Some(named) = LauncherNamedFailure::find_in(&String::from_utf8_lossy(line)) {
        let _ = sender.send(Output::Named(named, Instant::now()));
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
