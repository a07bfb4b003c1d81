//! `ios-agent join`: the agent of this node, run in the foreground until `ios-agent leave`
//! or a signal. It attaches to (or starts) the node's pcmd, joins the pool and drives the
//! sans-I/O [`Agent`] with [`driver::run_with`].

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use ios_agent_core::{Agent, Config, Topology};
use tokio::sync::mpsc;

use crate::cli::{JoinArgs, TopologyArg};
use crate::control;
use crate::driver::{self, Inputs};
use crate::node_daemon::{NodeDaemon, PcmdMigrator};
use crate::settings::{self, Settings};

/// The agent core's settings `join` runs with (also the simulator's, when it replays a
/// pool of real agents: `mpi-ios-bench pool`).
pub fn agent_config(args: &JoinArgs) -> Result<Config> {
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
    Ok(config)
}

/// Joins the pool with `args` and runs the agent until it leaves.
pub fn join(settings: &Settings, args: &JoinArgs) -> Result<()> {
    let host = settings::host_name(args.host.as_deref())?;
    let control_path = settings.control_socket(Some(&host))?;
    let state_dir = settings::state_dir(args.state_dir.as_deref(), &control_path, &host);
    // Private, like the control socket's directory it usually sits in (and creates first):
    // it holds the agent's identity key and logs.
    if let Some(parent) = state_dir.parent().filter(|d| !d.as_os_str().is_empty()) {
        pcm_proto::ensure_private_dir(parent).context("the directory of the state directory")?;
    }
    pcm_proto::ensure_private_dir(&state_dir).context("the state directory")?;
    let config = agent_config(args)?;

    // Before pcmd is started with the same --node-cgroup: a bad one stops join at once.
    let sensor = crate::sampler::node_sensor(args.node_cgroup.clone())?;
    let pcmd_socket = settings.pcmd_socket(args.pcmd_socket.as_deref(), &host);
    let daemon = NodeDaemon::attach_or_start(
        &pcmd_socket,
        &host,
        &settings::pcmd_program(args.pcmd.as_deref()),
        &state_dir.join("pcmd.log"),
        args.profile_period,
        args.node_cgroup.as_ref(),
    )?;

    // One thread runs the driver, the network and the control socket: an idle agent's cost
    // is its wake-ups (issue 42), and with a worker thread beside the driver every message
    // crossed threads (a futex wake and a task switch each). Nothing here blocks: pcmd's
    // requests run on tokio's blocking threads, the sampler on a thread of its own.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(async {
        let listener = control::bind(&control_path)?;
        let (net, peer_events) = crate::net::start(args, &host, &state_dir).await?;
        let agent = Agent::new(net.local_peer_id(), host.clone(), config, Instant::now())
            .context("creating the agent")?;
        let (control_tx, control_rx) = mpsc::channel(8);
        tokio::spawn(control::serve(listener, control_tx.clone()));
        let samples = crate::sampler::spawn(
            sensor,
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
