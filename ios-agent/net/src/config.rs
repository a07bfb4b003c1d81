//! [`NetConfig`]: everything [`Network::start`](crate::Network::start) needs, with defaults.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libp2p::identity::Keypair;
use libp2p::Multiaddr;

use crate::key::PoolKey;
use crate::NetError;

/// Default rendezvous namespace of a pool.
pub const DEFAULT_NAMESPACE: &str = "mpi-ios";
/// Default lifetime of a registration at a peer server. Renewed at half of it, so a dead
/// agent stays listed at most this long (connection loss reports it much sooner).
pub const DEFAULT_REGISTRATION_TTL: Duration = Duration::from_secs(20);
/// Default period between discovery requests to each peer server, while they find agents
/// to connect to.
pub const DEFAULT_DISCOVER_INTERVAL: Duration = Duration::from_secs(5);
/// Default longest period between discovery requests: rounds that find nothing new double
/// the wait up to it (see [`crate::discovery`]).
pub const DEFAULT_MAX_DISCOVER_INTERVAL: Duration = Duration::from_secs(60);
/// Default fast ping period: a new connection's first pings, a failed ping's retry, and
/// the shortest time between two pings of a connection (each ping gives one RTT sample;
/// see [`crate::probe`]).
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(1);
/// Default longest time between two pings of a connection. Under the agent core's peer
/// timeout (a minute) by more than a ping timeout and a retry, so that a peer answering
/// pings stays in the peer table.
pub const DEFAULT_MAX_PING_INTERVAL: Duration = Duration::from_secs(45);
/// Default pings a second an agent sends in all once its connections' first pings are done:
/// each connection is pinged every `connections / budget` seconds, within
/// [`DEFAULT_PING_INTERVAL`] and [`DEFAULT_MAX_PING_INTERVAL`] (issue 42: an idle agent's
/// upkeep must not grow with the pool; each ping is a wake-up at both ends, the larger part
/// of an idle agent's cost).
pub const DEFAULT_PING_BUDGET: f64 = 1.5;
/// Default ping timeout: a connection whose ping is not answered within it is closed, and
/// the peer reported gone.
pub const DEFAULT_PING_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a peer server's dial may be under way before the node reports it
/// ("still trying (wrong or missing pool key?)") while it waits on to the handshake deadline
/// ([`NetConfig::handshake_timeout`]): a wrong key hangs the handshake rather than failing it.
pub const DEFAULT_SLOW_SERVER_DIAL: Duration = Duration::from_secs(5);
/// Default wait before dialing a peer server or direct peer again after a failure or loss
/// (and before registering again after a refusal, or dialing a discovered agent again).
pub const DEFAULT_REDIAL_INTERVAL: Duration = Duration::from_secs(3);
/// Default longest wait between attempts: each consecutive failure doubles the wait from
/// [`DEFAULT_REDIAL_INTERVAL`] up to this.
pub const DEFAULT_MAX_REDIAL_INTERVAL: Duration = Duration::from_secs(30);
/// Default deadline of an agent message's delivery (request and acknowledgement).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Default capacity of the event channel.
pub const DEFAULT_EVENT_CAPACITY: usize = 1024;
/// Default capacity of the send queue, in messages.
pub const DEFAULT_SEND_QUEUE: usize = 1024;
/// Default [`NetConfig::dial_agents`]: 64 agents, as many as the simulator's agents keep in
/// their peer tables. An agent also takes the connections other agents open, so in a pool
/// of any size it ends with 64 to about 128; in a pool of up to 65 agents, every agent (a
/// full mesh, as before). Which agents is chance: a tier that holds a tenth of the pool
/// gets 6 to 13 of them, but a small cluster in a large pool (16 nodes of 1,000) about
/// one; the connection rotation and dial on request, not this, find those. Each
/// connection costs an idle agent about 0.002% of a core (docs/results.md, "Real agents at
/// pool scale"): a full mesh's upkeep grows with the pool, this stops growing.
pub const DEFAULT_DIAL_AGENTS: usize = 64;

/// The node's libp2p identity.
#[derive(Debug, Clone)]
pub enum Identity {
    /// A new random ed25519 identity, lost at exit.
    Generate,
    /// This keypair.
    Keypair(Keypair),
    /// Loaded from this file (protobuf encoding), or generated and written there (mode 0600)
    /// if it does not exist, so the node keeps its peer id across restarts.
    File(PathBuf),
}

impl Identity {
    /// The keypair.
    pub fn load(&self) -> Result<Keypair, NetError> {
        match self {
            Identity::Generate => Ok(Keypair::generate_ed25519()),
            Identity::Keypair(k) => Ok(k.clone()),
            Identity::File(path) => load_or_create_identity(path),
        }
    }
}

fn load_or_create_identity(path: &Path) -> Result<Keypair, NetError> {
    let err = |reason: String| NetError::Identity {
        path: path.to_owned(),
        reason,
    };
    match pcm_proto::read_private_file(path).map_err(err)? {
        Some(bytes) => Keypair::from_protobuf_encoding(&bytes)
            .map_err(|e| err(format!("not a libp2p keypair: {e}"))),
        None => {
            let key = Keypair::generate_ed25519();
            let bytes = key
                .to_protobuf_encoding()
                .map_err(|e| err(format!("cannot encode: {e}")))?;
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| err(format!("cannot create: {e}")))?;
            f.write_all(&bytes)
                .map_err(|e| err(format!("cannot write: {e}")))?;
            Ok(key)
        }
    }
}

/// Configuration of an agent's network. Build with [`NetConfig::new`] and adjust the fields.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// The pool key; every connection runs over the private network it defines.
    pub key: PoolKey,
    /// The node's identity. Default: [`Identity::Generate`].
    pub identity: Identity,
    /// Addresses to listen on. Default: `/ip4/127.0.0.1/tcp/0` (loopback, any port).
    pub listen: Vec<Multiaddr>,
    /// Addresses announced to peer servers. Default (empty): every address listened on.
    /// Set it when others must reach this node through another address (a relay, NAT).
    pub external_addrs: Vec<Multiaddr>,
    /// Peer servers to register with and discover from. Default: none.
    pub peer_servers: Vec<Multiaddr>,
    /// Agents to dial directly and keep connected. Default: none.
    pub direct_peers: Vec<Multiaddr>,
    /// Rendezvous namespace of the pool. Default: [`DEFAULT_NAMESPACE`].
    pub namespace: String,
    /// Registration lifetime; peer servers must accept it (their minimum TTL).
    /// Default: [`DEFAULT_REGISTRATION_TTL`].
    pub registration_ttl: Duration,
    /// Default: [`DEFAULT_DISCOVER_INTERVAL`].
    pub discover_interval: Duration,
    /// Default: [`DEFAULT_MAX_DISCOVER_INTERVAL`].
    pub max_discover_interval: Duration,
    /// Default: [`DEFAULT_PING_INTERVAL`].
    pub ping_interval: Duration,
    /// Default: [`DEFAULT_MAX_PING_INTERVAL`].
    pub max_ping_interval: Duration,
    /// Pings a second in all at steady state. Default: [`DEFAULT_PING_BUDGET`].
    pub ping_budget: f64,
    /// Default: [`DEFAULT_PING_TIMEOUT`].
    pub ping_timeout: Duration,
    /// Deadline of a connection's whole handshake. Default:
    /// [`DEFAULT_HANDSHAKE_TIMEOUT`](crate::transport::DEFAULT_HANDSHAKE_TIMEOUT).
    pub handshake_timeout: Duration,
    /// Wait before the first retry after a failure. Default: [`DEFAULT_REDIAL_INTERVAL`].
    pub redial_interval: Duration,
    /// Longest wait between retries, reached by doubling `redial_interval` at each
    /// consecutive failure; at least `redial_interval`. Default:
    /// [`DEFAULT_MAX_REDIAL_INTERVAL`].
    pub max_redial_interval: Duration,
    /// Default: [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    /// Capacity of the event channel. Default: [`DEFAULT_EVENT_CAPACITY`].
    pub event_capacity: usize,
    /// Capacity of the send queue, in messages: what
    /// [`NetHandle::try_send`](crate::NetHandle::try_send) drops beyond and
    /// [`NetHandle::send`](crate::NetHandle::send) waits for. Default: [`DEFAULT_SEND_QUEUE`].
    pub send_queue: usize,
    /// The host this node runs on, as the MPI runtime names it, announced to every peer over
    /// the authenticated connection (identify's agent version). Peers move work only to a
    /// host announced this way ([`NetEvent::PeerUp`](crate::NetEvent::PeerUp)). Default:
    /// none (a node that takes no work, like a test node).
    pub host: Option<pcm_proto::HostName>,
    /// Discovered agents are dialed while this node is connected to (or dialing) fewer
    /// agents than this; `None`: every agent discovered. Agents that dial this node are
    /// accepted beyond it, up to [`max_connections`](Self::max_connections). Default:
    /// [`DEFAULT_DIAL_AGENTS`].
    pub dial_agents: Option<std::num::NonZeroUsize>,
    /// Most established connections. Default:
    /// [`DEFAULT_MAX_CONNECTIONS`](crate::limits::DEFAULT_MAX_CONNECTIONS).
    pub max_connections: u32,
    /// Most incoming connections in their handshake. Default:
    /// [`DEFAULT_MAX_PENDING`](crate::limits::DEFAULT_MAX_PENDING).
    pub max_pending: u32,
}

impl NetConfig {
    /// Defaults (see each field) with this pool key.
    pub fn new(key: PoolKey) -> Self {
        NetConfig {
            key,
            identity: Identity::Generate,
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().expect("valid multiaddr")],
            external_addrs: Vec::new(),
            peer_servers: Vec::new(),
            direct_peers: Vec::new(),
            namespace: DEFAULT_NAMESPACE.to_owned(),
            registration_ttl: DEFAULT_REGISTRATION_TTL,
            discover_interval: DEFAULT_DISCOVER_INTERVAL,
            max_discover_interval: DEFAULT_MAX_DISCOVER_INTERVAL,
            ping_interval: DEFAULT_PING_INTERVAL,
            max_ping_interval: DEFAULT_MAX_PING_INTERVAL,
            ping_budget: DEFAULT_PING_BUDGET,
            ping_timeout: DEFAULT_PING_TIMEOUT,
            handshake_timeout: crate::transport::DEFAULT_HANDSHAKE_TIMEOUT,
            redial_interval: DEFAULT_REDIAL_INTERVAL,
            max_redial_interval: DEFAULT_MAX_REDIAL_INTERVAL,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            event_capacity: DEFAULT_EVENT_CAPACITY,
            send_queue: DEFAULT_SEND_QUEUE,
            host: None,
            dial_agents: std::num::NonZeroUsize::new(DEFAULT_DIAL_AGENTS),
            max_connections: crate::limits::DEFAULT_MAX_CONNECTIONS,
            max_pending: crate::limits::DEFAULT_MAX_PENDING,
        }
    }

    /// The schedule of the connections' pings.
    pub fn ping_timing(&self) -> crate::probe::PingTiming {
        crate::probe::PingTiming {
            interval: self.ping_interval,
            max_interval: self.max_ping_interval,
            budget: self.ping_budget,
        }
    }

    /// Checks ranges; errors name the field.
    pub fn validate(&self) -> Result<(), NetError> {
        let bad = |field: &'static str, reason: String| Err(NetError::Config { field, reason });
        if self.listen.is_empty() {
            return bad("listen", "no address to listen on".into());
        }
        if self.registration_ttl < Duration::from_secs(2) {
            return bad(
                "registration_ttl",
                format!("{:?} is below 2 s", self.registration_ttl),
            );
        }
        for (field, d) in [
            ("discover_interval", self.discover_interval),
            ("ping_interval", self.ping_interval),
            ("ping_timeout", self.ping_timeout),
            ("handshake_timeout", self.handshake_timeout),
            ("redial_interval", self.redial_interval),
            ("request_timeout", self.request_timeout),
        ] {
            if d < Duration::from_millis(10) {
                return bad(field, format!("{d:?} is below 10 ms"));
            }
        }
        if self.max_discover_interval < self.discover_interval {
            return bad(
                "max_discover_interval",
                format!(
                    "{:?} is below discover_interval ({:?})",
                    self.max_discover_interval, self.discover_interval
                ),
            );
        }
        if self.max_ping_interval < self.ping_interval {
            return bad(
                "max_ping_interval",
                format!(
                    "{:?} is below ping_interval ({:?})",
                    self.max_ping_interval, self.ping_interval
                ),
            );
        }
        if !(self.ping_budget.is_finite() && self.ping_budget > 0.0) {
            return bad(
                "ping_budget",
                format!(
                    "{} is not a positive number of pings a second",
                    self.ping_budget
                ),
            );
        }
        if self.max_connections == 0 || self.max_pending == 0 {
            return bad(
                "max_connections",
                "connection caps must be at least 1".into(),
            );
        }
        if self.max_redial_interval < self.redial_interval {
            return bad(
                "max_redial_interval",
                format!(
                    "{:?} is below redial_interval ({:?})",
                    self.max_redial_interval, self.redial_interval
                ),
            );
        }
        if self.event_capacity == 0 {
            return bad("event_capacity", "must be at least 1".into());
        }
        if self.send_queue == 0 {
            return bad("send_queue", "must be at least 1".into());
        }
        libp2p::rendezvous::Namespace::new(self.namespace.clone()).map_err(|e| {
            NetError::Config {
                field: "namespace",
                reason: e.to_string(),
            }
        })?;
        Ok(())
    }
}
