//! `ios-agent`: see `ios-agent --help`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::Parser as _;
use ios_agent::cli::{Cli, Command, JoinArgs, TopologyArg};
use ios_agent::control::{self, ControlError, ControlMessage, ControlReply, CONTROL_ENV};
use ios_agent::driver::{self, Inputs};
use ios_agent::node_daemon::{NodeDaemon, PcmdMigrator};
use ios_agent_core::{Agent, Config, Topology};
use pcm_proto::HostName;
use tokio::sync::mpsc;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ios-agent: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Join(args) => join(cli.control.as_deref(), *args),
        Command::Leave(args) => {
            let path = control_socket(cli.control.as_deref(), None)?;
            println!(
                "draining this node (agent at {}), at most {:.0} s",
                path.display(),
                args.within.as_secs_f64()
            );
            let reply = control::leave(&path, args.within, args.force, |report| {
                println!("  {}", report.summary());
            })
            .map_err(|e| with_sockets_beside(e, cli.control.as_deref()))?;
            match reply {
                ControlReply::Left(report) if report.is_empty() => {
                    println!(
                        "left the pool: {} rank(s) moved in {:.1} s; no process of any job is left on this node",
                        report.moved, report.elapsed_s
                    );
                    Ok(())
                }
                ControlReply::Left(report) => {
                    println!("left the pool WITHOUT a full drain (--force): {}", report.summary());
                    println!("what is listed above still runs on this node");
                    Ok(())
                }
                ControlReply::Stayed(report) => bail!(
                    "the node could not be drained within {:.0} s, so the agent stays in the pool: {}{}. \
                     `ios-agent leave --force` stops the agent anyway",
                    args.within.as_secs_f64(),
                    report.summary(),
                    why_not_drained(&report)
                ),
                ControlReply::Error(e) => bail!("the agent refused: {e}"),
                other => bail!("unexpected reply from the agent: {other:?}"),
            }
        }
        Command::Status { json } => {
            let path = control_socket(cli.control.as_deref(), None)?;
            let reply = control::request(&path, ControlMessage::Status, Duration::from_secs(10))
                .map_err(|e| with_sockets_beside(e, cli.control.as_deref()))?;
            match reply {
                ControlReply::Status(status) if json => {
                    println!("{}", serde_json::to_string_pretty(&status)?);
                    Ok(())
                }
                ControlReply::Status(status) => {
                    print!("{}", status.to_text());
                    Ok(())
                }
                ControlReply::Error(e) => bail!("the agent refused: {e}"),
                other => bail!("unexpected reply from the agent: {other:?}"),
            }
        }
        Command::Keygen { file } => {
            let key = ios_agent::net::write_new_pool_key(&file)?;
            println!(
                "wrote a new pool key to {} (fingerprint {})",
                file.display(),
                key.fingerprint()
            );
            Ok(())
        }
    }
}

/// The likely reason a drain did not finish, for the person who asked.
fn why_not_drained(report: &ios_agent::driver::LeaveReport) -> String {
    if !report.ranks_left.is_empty() && report.peers == 0 {
        " (this agent knows no other node of the pool)".to_owned()
    } else if !report.ranks_left.is_empty() {
        format!(
            " (none of the {} known nodes had room for the ranks left)",
            report.peers
        )
    } else if report.processes.is_empty() {
        String::new()
    } else if report
        .processes
        .iter()
        .any(|p| p.role == ios_agent::job_processes::Role::Rank)
    {
        " (every rank moved, but a departed rank still runs: Open MPI 4 keeps a departed \
         process until its job ends; see README, \"MPI runtimes\")"
            .to_owned()
    } else {
        " (every rank moved, but the launcher's proxy stays: Open MPI 4's orted lives as long \
         as its job, and killing it would end the job; see README, \"MPI runtimes\")"
            .to_owned()
    }
}

fn host_name(given: Option<&str>) -> Result<HostName> {
    let name = match given {
        Some(h) => h.to_owned(),
        None => nix::unistd::gethostname()
            .context("reading the host name")?
            .to_string_lossy()
            .into_owned(),
    };
    HostName::new(&name).with_context(|| format!("host name {name:?} (set --host)"))
}

fn control_socket(given: Option<&str>, host: Option<&HostName>) -> Result<PathBuf> {
    let host = match host {
        Some(h) => h.clone(),
        None => host_name(None)?,
    };
    let env = std::env::var(CONTROL_ENV).ok();
    Ok(control::control_path(
        given.or(env.as_deref()),
        nix::unistd::getuid().as_raw(),
        &host,
    ))
}

/// `e`; when no agent answers at the default control socket (neither `--control` nor
/// `IOS_AGENT_CONTROL` given), with the sockets beside it: an agent joined with
/// `--host NAME`, NAME not the machine's name, listens at `NAME.sock`.
fn with_sockets_beside(e: ControlError, given: Option<&str>) -> anyhow::Error {
    let defaulted = given.is_none() && std::env::var(CONTROL_ENV).map_or(true, |v| v.is_empty());
    if let ControlError::NotRunning { path } = &e {
        let others = control::sockets_beside(path);
        if defaulted && !others.is_empty() {
            let names: Vec<String> = others.iter().map(|p| p.display().to_string()).collect();
            return anyhow!(
                "{e}. Control sockets beside it: {} (an agent joined with --host NAME listens at NAME.sock; give it with --control)",
                names.join(", ")
            );
        }
    }
    e.into()
}

fn pcmd_program(given: Option<&Path>) -> PathBuf {
    if let Some(p) = given {
        return p.to_owned();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("pcmd")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("pcmd"))
}

fn join(control_given: Option<&str>, args: JoinArgs) -> Result<()> {
    let host = host_name(args.host.as_deref())?;
    let control_path = control_socket(control_given, Some(&host))?;
    let state_dir = match &args.state_dir {
        Some(d) => d.clone(),
        None => control_path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
            .join(format!("{host}.state")),
    };
    // Private, like the control socket's directory it usually sits in (and creates first):
    // it holds the agent's identity key and logs.
    if let Some(parent) = state_dir.parent().filter(|d| !d.as_os_str().is_empty()) {
        pcm_proto::ensure_private_dir(parent).context("the directory of the state directory")?;
    }
    pcm_proto::ensure_private_dir(&state_dir).context("the state directory")?;
    if !(0.0..=1.0).contains(&args.min_gain) {
        bail!("--min-gain {} must be between 0 and 1", args.min_gain);
    }
    let config = Config::default()
        .with_topology(match args.topology {
            TopologyArg::P2p => Topology::PeerToPeer,
            TopologyArg::C2c => Topology::ClusterToCluster,
        })
        .with_profile_period(args.profile_period)
        .with_hold_down(args.hold_down)
        .with_min_gain(args.min_gain)
        .with_light_threshold(args.light_threshold)
        .with_resizes(!args.no_resize);
    config.validate().context("agent settings")?;

    let pcmd_socket = match &args.pcmd_socket {
        Some(s) => s.clone(),
        None => pcm_proto::socket_path(
            std::env::var(pcm_proto::DAEMON_ENV).ok().as_deref(),
            std::env::var("XDG_RUNTIME_DIR").ok().as_deref(),
            nix::unistd::getuid().as_raw(),
            &host,
        ),
    };
    let daemon = NodeDaemon::attach_or_start(
        &pcmd_socket,
        &host,
        &pcmd_program(args.pcmd.as_deref()),
        &state_dir.join("pcmd.log"),
        args.profile_period,
    )?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(async {
        let listener = control::bind(&control_path)?;
        let (net, peer_events) = ios_agent::net::start(&args, &host, &state_dir).await?;
        let agent = Agent::new(net.local_peer_id(), host.clone(), config, Instant::now())
            .context("creating the agent")?;
        let (control_tx, control_rx) = mpsc::channel(8);
        tokio::spawn(control::serve(listener, control_tx.clone()));
        let samples = ios_agent::sampler::spawn(
            daemon.clone(),
            args.profile_period,
            args.communication_term,
        );
        shutdown_on_signal(control_tx);
        // The node is offered again: a relaunch may use it.
        match pcm_proto::given_back::remove(daemon.socket()) {
            Ok(true) => tracing::info!(
                path = %pcm_proto::given_back::path_for(daemon.socket()).display(),
                "removed the mark of this node as given back: it is offered again"
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                "cannot remove the mark of this node as given back ({}): {e}; a relaunch of a job will not place ranks here",
                pcm_proto::given_back::path_for(daemon.socket()).display()
            ),
        }
        tracing::info!(%host, control = %control_path.display(), pcmd = %daemon.socket().display(), "joined the pool");
        let agent = driver::run_with(
            agent,
            net.transport(),
            PcmdMigrator::new(daemon.socket().to_owned()),
            Inputs {
                peers: peer_events,
                samples,
                control: control_rx,
            },
            driver::Options {
                given_back_mark: Some(daemon.socket().to_owned()),
                ..driver::Options::default()
            },
        )
        .await;
        net.shutdown().await;
        tracing::info!(stats = ?agent.stats(), "left the pool");
        anyhow::Ok(())
    });
    let _ = std::fs::remove_file(&control_path);
    if let Some(why) = daemon.stop_if_idle() {
        eprintln!("ios-agent: {why}");
    }
    result
}

/// How long a drain started by a stop signal may take before the agent stops anyway.
const SIGNAL_LEAVE_WITHIN: Duration = Duration::from_secs(60);

/// SIGINT and SIGTERM leave the pool as `ios-agent leave --force --within 60` does (the
/// drain's progress goes to the log); a second signal stops the agent at once.
fn shutdown_on_signal(control: mpsc::Sender<driver::ControlRequest>) {
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        let signal = tokio::select! {
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        };
        tracing::info!(
            "stop signal ({signal}): draining the node before leaving (a second signal stops at once)"
        );
        // The driver logs the progress itself; nobody reads these updates.
        let (updates, _ignored) = mpsc::unbounded_channel();
        let order = driver::LeaveOrder {
            within: SIGNAL_LEAVE_WITHIN,
            force: true,
            updates,
            origin: driver::LeaveOrigin::Signal(signal),
        };
        if control
            .send(driver::ControlRequest::Leave(order))
            .await
            .is_err()
        {
            return;
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        let _ = control.send(driver::ControlRequest::Stop).await;
    });
}
