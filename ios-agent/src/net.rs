//! The libp2p side of the agent: starts `ios-agent-net` from `join`'s options; its
//! [`NetEvent`]s go straight to the driver. What the core has no use for (peer-server
//! trouble, refused handshakes, hostile messages) is logged by [`log_event`], so that a user
//! sees e.g. "wrong or missing pool key?" without the driver knowing about libp2p.

use std::path::Path;

use anyhow::{Context as _, Result};
use ios_agent_core::{Message, PeerId};
use ios_agent_net::libp2p::Multiaddr;
use ios_agent_net::{Identity, NetConfig, NetError, NetEvent, NetHandle, Network, PoolKey};
use pcm_proto::HostName;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::cli::JoinArgs;
use crate::transport::Transport;

/// The running network of one agent.
#[derive(Debug)]
pub struct AgentNet {
    handle: NetHandle,
    task: JoinHandle<()>,
    max_connections: usize,
}

/// Writes a new pool key to `file` (mode 0600); refuses to overwrite one.
pub fn write_new_pool_key(file: &Path) -> Result<PoolKey> {
    Ok(PoolKey::generate_to_file(file)?)
}

fn parse_addrs(what: &str, addrs: &[String]) -> Result<Vec<Multiaddr>> {
    addrs
        .iter()
        .map(|a| {
            a.parse::<Multiaddr>().with_context(|| {
                format!("{what} {a:?} is not a multiaddr (example: /ip4/10.0.0.1/tcp/7000)")
            })
        })
        .collect()
}

/// Starts the network for `join`: the pool key, an identity kept in `state_dir` (so the
/// agent's peer id survives restarts), the listen address, peer servers and direct peers.
pub async fn start(
    args: &JoinArgs,
    host: &HostName,
    state_dir: &Path,
) -> Result<(AgentNet, mpsc::Receiver<NetEvent>)> {
    let key = PoolKey::from_file(&args.pool_key)?;
    tracing::info!(fingerprint = %key.fingerprint(), "pool key from {}", args.pool_key.display());
    let mut config = NetConfig::new(key);
    config.identity = Identity::File(state_dir.join("identity.key"));
    config.listen = parse_addrs("--listen", std::slice::from_ref(&args.listen))?;
    config.external_addrs = parse_addrs("--external", args.external.as_slice())?;
    config.peer_servers = parse_addrs("--peer-server", &args.peer_servers)?;
    config.direct_peers = parse_addrs("--peer", &args.peers)?;
    config.host = Some(host.clone());
    config.dial_agents = std::num::NonZeroUsize::new(args.dial_agents);
    if config.peer_servers.is_empty() && config.direct_peers.is_empty() {
        tracing::warn!("no --peer-server and no --peer given: this agent can only be found by others that know its address");
    }
    // The network's events go straight to the driver: one channel, one enum.
    let max_connections = usize::try_from(config.max_connections).unwrap_or(usize::MAX);
    let (handle, events, task) = Network::start(config).await?;
    Ok((
        AgentNet {
            handle,
            task,
            max_connections,
        },
        events,
    ))
}

/// Logs an event the core has no use for. Everything the network reports besides RTTs, hosts,
/// departures and messages is for the user: e.g. "wrong or missing pool key?".
pub fn log_event(event: &NetEvent) {
    match event {
        NetEvent::Listening { addr } => tracing::info!(%addr, "listening for agents"),
        NetEvent::PeerServerUp { addr, server } => {
            tracing::info!(%addr, %server, "registered with peer server");
        }
        NetEvent::PeerServerError { addr, reason } => {
            tracing::warn!(%addr, "peer server: {reason}");
        }
        NetEvent::DialError { addr, reason, .. } => {
            tracing::warn!(%addr, "cannot reach agent: {reason}");
        }
        NetEvent::IncomingError { from, reason } => {
            tracing::warn!(%from, "refused incoming connection: {reason}");
        }
        NetEvent::BadMessage { from, reason } => {
            tracing::warn!(%from, "refused message: {reason}");
        }
        NetEvent::SendFailed { to, kind, reason } => {
            tracing::debug!(%to, kind, "message not delivered: {reason}");
        }
        NetEvent::PeerUp { peer, addr, host } => {
            tracing::info!(%peer, %addr, ?host, "agent connected");
        }
        NetEvent::HostUnknown { host, reason } => {
            tracing::debug!(%host, "no connection to the agent of a partner host: {reason}");
        }
        NetEvent::PeerRtt { .. } | NetEvent::PeerGone { .. } | NetEvent::Message { .. } => {}
    }
}

impl AgentNet {
    /// This agent's id.
    pub fn local_peer_id(&self) -> PeerId {
        self.handle.local_peer_id()
    }

    /// A transport for the driver.
    pub fn transport(&self) -> NetTransport {
        NetTransport {
            handle: self.handle.clone(),
            max_connections: self.max_connections,
        }
    }

    /// Closes every connection and stops the network task.
    pub async fn shutdown(self) {
        if let Err(e) = self.handle.shutdown().await {
            tracing::debug!("network shutdown: {e}");
        }
        let _ = self.task.await;
    }
}

/// [`Transport`] over `ios-agent-net`.
#[derive(Debug, Clone)]
pub struct NetTransport {
    handle: NetHandle,
    max_connections: usize,
}

impl Transport for NetTransport {
    fn send(&self, to: &PeerId, message: Message) {
        let kind = message.kind();
        // Never waits: a full send queue drops the message (counted and warned about by
        // `try_send`); later failures come as `NetEvent::SendFailed`.
        match self.handle.try_send(to, message) {
            Ok(()) | Err(NetError::QueueFull { .. }) => {}
            Err(e) => tracing::debug!(%to, kind, "send failed: {e}"),
        }
    }

    fn max_connections(&self) -> Option<usize> {
        Some(self.max_connections)
    }

    fn disconnect(&self, peer: &PeerId) {
        if let Err(e) = self.handle.try_disconnect(peer) {
            tracing::debug!(%peer, "connection not closed: {e}");
        }
    }

    fn dial_host(&self, host: &HostName) {
        if let Err(e) = self.handle.try_dial_host(host) {
            tracing::debug!(%host, "host not looked up: {e}");
        }
    }
}
