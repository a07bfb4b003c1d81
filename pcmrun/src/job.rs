//! One job from its first launch to its report: the hosts and the pcmds it uses, its
//! checkpoint series, the launches the [`Supervisor`] asks for, and the report.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use pcm_proto::run::EVENTS_ENV;
use pcm_proto::HostName;

use crate::daemon::{self, Daemon, HostDaemons};
use crate::hosts::{Hostfile, ProbePlan};
use crate::launch::{
    libc_sigterm, run_launch, sleep_unless_signalled, watch_signals, HostWatch, Signals, Sink,
};
use crate::relaunch::{hosts_still_alive, relaunch_width, FromPool};
use crate::series::{decide_first_start, series_name, Ended, FirstStart, Holder, SeriesLock};
use crate::settings::Settings;
use crate::supervisor::{interrupted_reason, Policy, Start, Supervisor, Verdict, INTERRUPTED_EXIT};
use crate::{names, say, Launch, Runtime};

/// Runs the job `settings` describe to its end; returns pcmrun's exit status.
pub fn run(settings: &Settings) -> anyhow::Result<i32> {
    let options = &settings.options;
    let places = &settings.places;
    let environment = &settings.env;
    if !options.dry_run {
        let removed = crate::remove_stale_private_dirs(&places.private_dir_base);
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
        None => crate::hosts::slurm::hostfile_text(
            |key| environment.get(key),
            |host, slots| runtime.hostfile_line(host, slots),
        )
        .transpose()?
        .map(|text| -> anyhow::Result<(tempfile::TempDir, PathBuf)> {
            let dir = crate::private_dir(&places.private_dir_base, "slurm")?;
            let path = dir.path().join("hosts");
            std::fs::write(&path, &text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            say(&format!(
                "inside a Slurm allocation: hosts {} (from {})",
                text.lines().collect::<Vec<_>>().join(", "),
                crate::hosts::slurm::NODELIST_ENV.join(" or ")
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
    let remote_launcher = environment.remote_launcher();
    // Hosts their owner gave back to the pool (`ios-agent leave`) are not used; the
    // hostfile without them lives in a private directory as long as pcmrun.
    let mut given_back_at_start = Vec::new();
    let mut kept_hostfile_dir = None;
    let hostfile = match hostfile {
        Some((path, file)) if !options.dry_run => {
            let given = daemon::given_back(
                &file.hosts(),
                &local,
                &remote_launcher,
                &places.node_socket_template,
            );
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
                    let dir = crate::private_dir(&places.private_dir_base, "hosts")?;
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
    let inherited_none = places.daemon_off() && options.daemon == "auto";
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
        None if per_host => places.shared_checkpoint_dir.clone(),
        None => places.dirs.pcmd_checkpoint_dir(&local),
    };
    let mut series_lock = match wants_checkpoints && !options.dry_run {
        true => {
            let dir = checkpoint_dir.clone();
            let series = series_name(&program_line, options.ranks, options.job_name.as_deref());
            let holder = Holder {
                pid: std::process::id(),
                host: local.to_string(),
                command: program_line.clone(),
                started_unix_s: crate::unix_now(),
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
        let node_template = (options.daemon == "auto").then(|| places.node_socket_template.clone());
        let daemons = HostDaemons::start(
            &pcmd,
            &checkpoint_dir,
            remote_launcher.clone(),
            &hosts,
            node_template,
            places,
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
            places,
        )?
    };
    // Hostfiles of relaunches that leave lost hosts out.
    let relaunch_dir = match several_hosts {
        true => Some(crate::private_dir(&places.private_dir_base, "relaunch")?),
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
        for (key, value) in environment.forwarded() {
            env.insert(key.to_owned(), value.to_owned());
        }
        // The runtime's defaults, where the user chose nothing (a value that is not UTF-8
        // counts as a choice).
        for &(key, value) in runtime.default_env() {
            if !environment.is_set(key) {
                env.insert(key.to_owned(), value.to_owned());
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
        node_template: places.node_socket_template.clone(),
    });
    let policy = Policy {
        checkpoints,
        max_restarts: options.max_restarts,
        first_delay: Duration::from_secs_f64(options.retry_delay),
        first: first.start,
        stall_timeout: Duration::from_secs_f64(options.stall_timeout),
    };
    let started = Instant::now();
    let started_unix_s = crate::unix_now();
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
                        &places.node_socket_template,
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

/// A binary installed next to pcmrun, else found on PATH.
pub(crate) fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}
