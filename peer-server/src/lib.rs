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

use std::path::PathBuf;
use std::time::Duration;

use ios_agent_net::libp2p::futures::StreamExt;
use ios_agent_net::libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use ios_agent_net::libp2p::{
    self, identify, ping, rendezvous, swarm::ListenError, Multiaddr, PeerId, Swarm,
};
use ios_agent_net::transport::{build_transport, describe_transport_error};
use ios_agent_net::{Identity, PoolKey};
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
    /// Identity file (created if missing), so the peer id survives restarts. Default: a new
    /// identity each run.
    #[arg(long, value_name = "FILE")]
    pub identity: Option<PathBuf>,
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
    /// Loads the key, listens, and spawns the server on the current tokio runtime.
    pub async fn start(args: &Args) -> Result<PeerServer, ServerError> {
        if args.min_ttl == 0 || args.min_ttl > args.max_ttl {
            return Err(ServerError::Config(format!(
                "--min-ttl {} must be at least 1 and at most --max-ttl {}",
                args.min_ttl, args.max_ttl
            )));
        }
        let key = PoolKey::from_file(&args.pool_key)?;
        let identity = match &args.identity {
            Some(f) => Identity::File(f.clone()),
            None => Identity::Generate,
        }
        .load()?;
        let transport = build_transport(
            &identity,
            &key,
            ios_agent_net::transport::DEFAULT_HANDSHAKE_TIMEOUT,
        )
        .map_err(|e| ServerError::Config(format!("noise: {e}")))?;
        let behaviour = Behaviour {
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
        for addr in &args.listen {
            swarm
                .listen_on(addr.clone())
                .map_err(|e| ServerError::Listen {
                    addr: addr.clone(),
                    reason: e.to_string(),
                })?;
        }
        let mut addrs = Vec::new();
        let mut bound = std::collections::HashSet::new();
        while bound.len() < args.listen.len() {
            let ev = tokio::time::timeout(Duration::from_secs(5), swarm.select_next_some())
                .await
                .map_err(|_| ServerError::Listen {
                    addr: args.listen[0].clone(),
                    reason: "no address within 5 s".into(),
                })?;
            match ev {
                SwarmEvent::NewListenAddr {
                    listener_id,
                    address,
                } => {
                    bound.insert(listener_id);
                    addrs.push(address.with_p2p(peer_id).unwrap_or_else(|a| a));
                }
                SwarmEvent::ListenerClosed {
                    addresses, reason, ..
                } => {
                    return Err(ServerError::Listen {
                        addr: addresses
                            .first()
                            .cloned()
                            .unwrap_or_else(|| args.listen[0].clone()),
                        reason: format!("{reason:?}"),
                    })
                }
                _ => {}
            }
        }
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
                let reason = match &error {
                    ListenError::Transport(e) => describe_transport_error(e).message,
                    other => other.to_string(),
                };
                tracing::warn!("connection from {send_back_addr} failed: {reason}");
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
