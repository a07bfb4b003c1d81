//! The MPI/IOS peer server: a registry where IOS agents register and discover each other.
//!
//! It is a libp2p rendezvous server (paper 004, section 4.2: agents contact peer servers to
//! register and to receive a list of peers) that accepts short registrations, so a dead
//! agent drops out of its list within the agents' TTL (about 20 s by default; connection
//! loss tells connected agents much sooner). Several can run side by side: agents register
//! with all of them, so losing one loses nothing. Connections run over the pool's private
//! network ([`ios_agent_net::PoolKey`]): only holders of the pool key can register or look.
//!
//! The binary (`peer-server --listen ADDR --pool-key FILE [--min-ttl S]`) is a thin `main`
//! around [`PeerServer::start`]. On startup it prints one machine-readable line:
//! `{"event":"listening","peer_id":ID,"addrs":[ADDR/p2p/ID,...]}`.
//!
//! Its identity (and so its peer id, which agents pin in the `/p2p/ID` part of its address)
//! survives restarts: it is kept in a private state directory ([`default_state_dir`], or
//! `--state-dir`), created mode 0700 and refused if it is a symbolic link, another user's,
//! or writable by others; the key file is created 0600 and never adopted from another user
//! or through a link (issue 12, item 9). Agents redial a lost peer server every few seconds,
//! so a restarted one is back in use within seconds.
//!
//! Bounded against a flood of connections (issue 12, item 7): [`DEFAULT_MAX_CONNECTIONS`]
//! established connections, [`DEFAULT_MAX_PENDING`] handshakes under way, and
//! [`DEFAULT_MAX_PER_PEER`] connections per peer id, and
//! [`DEFAULT_MAX_PENDING_PER_ADDRESS`](ios_agent_net::limits::DEFAULT_MAX_PENDING_PER_ADDRESS)
//! handshakes per remote IP address; repeated warnings (a failed handshake
//! per garbage connection) are summarised rather than written each time.

use std::path::PathBuf;
use std::time::Duration;

use pcm_proto::UserDirs;

use ios_agent_net::libp2p::futures::StreamExt;
use ios_agent_net::libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use ios_agent_net::libp2p::{
    self, identify, ping, rendezvous, swarm::ListenError, Multiaddr, PeerId, Swarm,
};
use ios_agent_net::limits;
use ios_agent_net::transport::{build_transport, describe_transport_error, listen_all};
use ios_agent_net::{Identity, PoolKey};

pub use ios_agent_net::limits::{
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_PENDING, DEFAULT_MAX_PER_PEER,
};
use tokio::task::JoinHandle;

/// Default smallest registration lifetime accepted, in seconds.
pub const DEFAULT_MIN_TTL: u64 = 10;
/// Default largest registration lifetime accepted, in seconds.
pub const DEFAULT_MAX_TTL: u64 = 24 * 3600;

/// Command-line options of `peer-server`.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    version,
    about = "MPI/IOS peer server: a registry where IOS agents register and find each other",
    long_about = "MPI/IOS peer server: a registry (libp2p rendezvous) where the IOS agents of a pool \
register and find each other. Only nodes holding the pool key can connect. Run several for \
redundancy; agents register with all of them. Registrations are short (the agents choose their \
TTL, at least --min-ttl) so dead agents drop out quickly.\n\nOn startup prints one JSON line: \
{\"event\":\"listening\",\"peer_id\":ID,\"addrs\":[ADDR/p2p/ID,...]}. Logs go to stderr \
(RUST_LOG=info for more)."
)]
pub struct Args {
    /// Address to listen on (repeatable), e.g. /ip4/127.0.0.1/tcp/4001 (port 0: any).
    #[arg(long, required = true)]
    pub listen: Vec<Multiaddr>,
    /// The pool key file (standard form: /key/swarm/psk/1.0.0/, /base16/, 64 hex digits).
    #[arg(long, value_name = "FILE")]
    pub pool_key: PathBuf,
    /// Smallest registration lifetime accepted, in seconds.
    #[arg(long, default_value_t = DEFAULT_MIN_TTL)]
    pub min_ttl: u64,
    /// Largest registration lifetime accepted, in seconds.
    #[arg(long, default_value_t = DEFAULT_MAX_TTL)]
    pub max_ttl: u64,
    /// Identity file (created if missing, mode 0600). Default: `identity.key` in the state
    /// directory.
    #[arg(long, value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// Private directory for the server's identity, so that its peer id (the /p2p/ part of
    /// the address agents are given) survives restarts. Default: see `default_state_dir`:
    /// $XDG_STATE_HOME/mpi-ios/peer-server-PORT, else ~/.local/state/mpi-ios/peer-server-PORT
    /// (PORT: of the first --listen address); none with port 0 (a new identity each run).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Most connections established at once (agents); further ones are refused.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: u32,
    /// Most incoming connections in their handshake at once; further ones are closed at once.
    #[arg(long, default_value_t = DEFAULT_MAX_PENDING)]
    pub max_pending: u32,
}

/// The state directory used when `--state-dir` is not given, for a server whose first
/// listen address is `listen`: `mpi-ios/peer-server-PORT` in the user's state directory
/// ([`UserDirs::state`]: `$XDG_STATE_HOME`, else `$HOME/.local/state`). One per port, so that
/// two servers of one user on one machine keep distinct identities. `None` when the user
/// has no state directory.
pub fn default_state_dir(listen: &Multiaddr, dirs: &UserDirs) -> Option<PathBuf> {
    let port = listen
        .iter()
        .find_map(|p| match p {
            libp2p::multiaddr::Protocol::Tcp(port) => Some(port),
            _ => None,
        })
        .unwrap_or(0);
    let state = dirs.state.as_ref()?;
    Some(state.join("mpi-ios").join(format!("peer-server-{port}")))
}

/// The identity file of a server started with `args`: `--identity`, else `identity.key` in
/// the state directory (`--state-dir`, else [`default_state_dir`] in `dirs`), which is
/// created private (0700) or refused if unsafe. `None` (a new identity each run) when
/// neither is given and the first listen port is 0: an ephemeral port changes at each start
/// anyway, and two such servers must not share one identity.
pub fn identity_file(args: &Args, dirs: &UserDirs) -> Result<Option<PathBuf>, ServerError> {
    if let Some(f) = &args.identity {
        return Ok(Some(f.clone()));
    }
    let ephemeral = args.listen[0]
        .iter()
        .any(|p| matches!(p, libp2p::multiaddr::Protocol::Tcp(0)));
    let dir = match &args.state_dir {
        Some(d) => d.clone(),
        None if ephemeral => return Ok(None),
        None => default_state_dir(&args.listen[0], dirs).ok_or_else(|| {
            ServerError::Config(
                "no state directory for the identity: set --state-dir (or HOME)".into(),
            )
        })?,
    };
    pcm_proto::ensure_private_dir(&dir).map_err(|e| ServerError::Config(e.to_string()))?;
    Ok(Some(dir.join("identity.key")))
}

/// What can stop the peer server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Bad configuration.
    #[error("{0}")]
    Config(String),
    /// The pool key could not be loaded.
    #[error(transparent)]
    Key(#[from] ios_agent_net::KeyError),
    /// Identity problem.
    #[error(transparent)]
    Net(#[from] ios_agent_net::NetError),
    /// Could not listen.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
}

#[derive(NetworkBehaviour)]
struct Behaviour {
    per_address: limits::PendingPerAddress,
    limits: libp2p::connection_limits::Behaviour,
    rendezvous: rendezvous::server::Behaviour,
    identify: identify::Behaviour,
    ping: ping::Behaviour,
}

/// A started peer server.
#[derive(Debug)]
pub struct PeerServer {
    /// Its peer id.
    pub peer_id: PeerId,
    /// Its listen addresses, each ending in `/p2p/<peer id>`.
    pub addrs: Vec<Multiaddr>,
    /// The task serving; abort it to stop.
    pub task: JoinHandle<()>,
}

impl PeerServer {
    /// Loads the key, listens, and spawns the server on the current tokio runtime; `dirs`
    /// give the default state directory ([`identity_file`]).
    pub async fn start(args: &Args, dirs: &UserDirs) -> Result<PeerServer, ServerError> {
        if args.min_ttl == 0 || args.min_ttl > args.max_ttl {
            return Err(ServerError::Config(format!(
                "--min-ttl {} must be at least 1 and at most --max-ttl {}",
                args.min_ttl, args.max_ttl
            )));
        }
        let key = PoolKey::from_file(&args.pool_key)?;
        tracing::info!(fingerprint = %key.fingerprint(), "pool key from {}", args.pool_key.display());
        let identity = match identity_file(args, dirs)? {
            Some(file) => {
                tracing::info!("identity from {}", file.display());
                Identity::File(file)
            }
            None => Identity::Generate,
        }
        .load()?;
        let transport = build_transport(
            &identity,
            &key,
            ios_agent_net::transport::DEFAULT_HANDSHAKE_TIMEOUT,
        )
        .map_err(|e| ServerError::Config(format!("noise: {e}")))?;
        if args.max_connections == 0 || args.max_pending == 0 {
            return Err(ServerError::Config(
                "--max-connections and --max-pending must be at least 1".into(),
            ));
        }
        let behaviour = Behaviour {
            per_address: limits::PendingPerAddress::new(limits::DEFAULT_MAX_PENDING_PER_ADDRESS),
            limits: limits::connection_limits(
                args.max_connections,
                args.max_pending,
                DEFAULT_MAX_PER_PEER,
            ),
            rendezvous: rendezvous::server::Behaviour::new(
                rendezvous::server::Config::default()
                    .with_min_ttl(args.min_ttl)
                    .with_max_ttl(args.max_ttl),
            ),
            identify: identify::Behaviour::new(
                identify::Config::new(
                    ios_agent_net::network::IDENTIFY_PROTOCOL.into(),
                    identity.public(),
                )
                .with_agent_version(format!("peer-server/{}", env!("CARGO_PKG_VERSION"))),
            ),
            ping: ping::Behaviour::new(ping::Config::new().with_timeout(Duration::from_secs(10))),
        };
        let peer_id = identity.public().to_peer_id();
        // Agents keep their connection to the server; it is closed when they go or their
        // pings stop.
        let mut swarm = Swarm::new(
            transport,
            behaviour,
            peer_id,
            libp2p::swarm::Config::with_tokio_executor()
                .with_idle_connection_timeout(Duration::from_secs(600)),
        );
        let addrs = listen_all(&mut swarm, &args.listen)
            .await
            .map_err(|f| ServerError::Listen {
                addr: f.addr,
                reason: f.reason,
            })?
            .into_iter()
            .map(|address| address.with_p2p(peer_id).unwrap_or_else(|a| a))
            .collect();
        let task = tokio::spawn(serve(swarm));
        Ok(PeerServer {
            peer_id,
            addrs,
            task,
        })
    }

    /// The startup line: `{"event":"listening","peer_id":ID,"addrs":[...]}`.
    pub fn startup_line(&self) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(|a| format!("\"{a}\"")).collect();
        format!(
            "{{\"event\":\"listening\",\"peer_id\":\"{}\",\"addrs\":[{}]}}",
            self.peer_id,
            addrs.join(",")
        )
    }
}

async fn serve(mut swarm: Swarm<Behaviour>) {
    // One failed or refused connection is one line at most; a flood is a few per window.
    let mut incoming_failures = pcm_proto::log_limit::LogLimit::default();
    loop {
        match swarm.select_next_some().await {
            SwarmEvent::Behaviour(BehaviourEvent::Rendezvous(ev)) => {
                use rendezvous::server::Event as E;
                match ev {
                    E::PeerRegistered { peer, registration } => tracing::info!(
                        "registered {peer} in {} for {} s at {:?}",
                        registration.namespace,
                        registration.ttl,
                        registration.record.addresses()
                    ),
                    E::PeerNotRegistered {
                        peer,
                        namespace,
                        error,
                    } => tracing::warn!("refused registration of {peer} in {namespace}: {error:?}"),
                    E::RegistrationExpired(r) => {
                        tracing::info!("registration of {} expired", r.record.peer_id())
                    }
                    E::PeerUnregistered { peer, .. } => tracing::info!("{peer} unregistered"),
                    E::DiscoverServed {
                        enquirer,
                        registrations,
                    } => tracing::debug!("{enquirer} discovered {} peers", registrations.len()),
                    E::DiscoverNotServed { enquirer, error } => {
                        tracing::debug!("discovery by {enquirer} failed: {error:?}")
                    }
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Ping(ping::Event {
                peer,
                connection,
                result: Err(e),
            })) if !matches!(e, ping::Failure::Unsupported) => {
                tracing::info!("ping to {peer} failed ({e}): closing");
                swarm.close_connection(connection);
            }
            SwarmEvent::IncomingConnectionError {
                send_back_addr,
                error,
                ..
            } => {
                if let Some(suppressed) =
                    incoming_failures.check("incoming", std::time::Instant::now())
                {
                    let reason = match &error {
                        ListenError::Transport(e) => describe_transport_error(e).message,
                        ListenError::Denied { .. } => "refused: too many connections".to_owned(),
                        other => other.to_string(),
                    };
                    tracing::warn!(
                        "connection from {send_back_addr} failed: {reason}{}",
                        pcm_proto::log_limit::suffix(suppressed)
                    );
                }
            }
            SwarmEvent::ConnectionEstablished {
                peer_id, endpoint, ..
            } => {
                tracing::debug!("{peer_id} connected from {}", endpoint.get_remote_address())
            }
            SwarmEvent::ConnectionClosed { peer_id, .. } => {
                tracing::debug!("{peer_id} disconnected")
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_the_user_state_dir_then_each_port_has_its_own_state_dir() {
        let listen: Multiaddr = "/ip4/127.0.0.1/tcp/7000".parse().expect("an address");
        let dirs = |state: Option<&str>| UserDirs {
            uid: 7,
            runtime: None,
            state: state.map(PathBuf::from),
        };
        assert_eq!(
            default_state_dir(&listen, &dirs(Some("/s"))),
            Some(PathBuf::from("/s/mpi-ios/peer-server-7000"))
        );
        assert_eq!(default_state_dir(&listen, &dirs(None)), None);
    }
}
