//! Networking of the IOS agent: libp2p with a pool key, discovery through peer servers,
//! RTT measurement and agent messages.
//!
//! MPI/IOS agents (paper 004, section 4.2, Figure 2: the *protocol component*) find each other
//! through one or more peer servers, measure round-trip times to each other (the latency
//! tiers of NSp2p, section 5.2) and exchange [`ios_agent_core::Message`]s. This crate is that
//! I/O: the decision logic lives in `ios-agent-core`, and the `ios-agent` driver connects the
//! two.
//!
//! - [`key`]: [`PoolKey`] (the one pool key type, from `pcm-proto`) as libp2p's pre-shared
//!   key ([`pre_shared_key`]). Every connection (agents and peer
//!   servers) runs over a libp2p private network with it, then noise, then yamux
//!   ([`transport`]). A node without the key cannot connect; such failures end within
//!   [`NetConfig::handshake_timeout`] in an error saying "wrong or missing pool key?".
//! - [`Network::start`]: the swarm (identify, ping on the agent's own schedule
//!   ([`probe`]: a new connection's first pings a second apart, then a bounded number of
//!   pings a second in all, so that an idle agent's upkeep does not grow with the pool),
//!   request-response with a size-capped CBOR
//!   codec on [`PROTOCOL_NAME`](ios_agent_core::message::PROTOCOL_NAME), rendezvous client)
//!   in a tokio task; a [`NetHandle`] to command it and one channel of [`NetEvent`]s, which
//!   the `ios-agent` driver reads as they are.
//! - [`discovery`]: registers with every peer server with a short TTL (renewed at half of
//!   it), discovers from all, dials the agents found and the direct peers, and keeps
//!   connections to them open; failures are retried after [`NetConfig::redial_interval`],
//!   doubling up to [`NetConfig::max_redial_interval`]. A pure store
//!   ([`discovery::Discovery`]: inputs with `now`, actions out, `poll_timeout` for the next
//!   deadline), tested without a swarm; the network task sleeps until its deadline. A peer
//!   whose connection closes, or whose pings time out, is reported [`NetEvent::PeerGone`].
//! - Sending: [`NetHandle::send`] waits for room in the bounded send queue
//!   ([`NetConfig::send_queue`]); [`NetHandle::try_send`] never waits and drops (counted,
//!   warned about at most every 10 s) when it is full.
//! - [`on_request`]: a message queued with [`NetHandle::try_send`] for an agent not connected
//!   dials it (addresses from the peer servers' registrations, or identify), within the
//!   connection cap, a rate limit and a per-agent backoff; the message waits for the
//!   connection a bounded time, or comes back as [`NetEvent::SendFailed`] with the reason
//!   ([`on_request::Undelivered`]).
//! - [`by_host`]: every agent with a host registers under its host's name too, and
//!   [`NetHandle::try_dial_host`] connects to the agent of a host: one lookup at a peer
//!   server, bounded and rested, then a dial as on request.
//! - [`relay`]: a TCP relay that delays each direction, to emulate distance on one machine.
//!
//! # Usage
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use ios_agent_net::{NetConfig, NetEvent, Network, PoolKey};
//!
//! let mut config = NetConfig::new(PoolKey::from_file("pool.key")?);
//! config.peer_servers = vec!["/ip4/127.0.0.1/tcp/4001".parse()?];
//! let (net, mut events, _task) = Network::start(config).await?;
//! while let Some(ev) = events.recv().await {
//!     match ev {
//!         NetEvent::PeerRtt { peer, rtt } => println!("{peer}: {rtt:?}"), // agent.handle_peer_rtt
//!         NetEvent::PeerGone { peer } => println!("{peer} gone"),        // agent.handle_peer_gone
//!         NetEvent::Message { from, message } => println!("{from}: {}", message.kind()),
//!         other => println!("{other:?}"),
//!     }
//! }
//! net.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! # Supported, and not
//!
//! Supported: TCP over IPv4/IPv6; several peer servers (losing one loses nothing); direct
//! peers by address; persistent identities; hostile input (oversized, undecodable or invalid
//! messages are refused and reported as [`NetEvent::BadMessage`]).
//! Not supported: NAT traversal, QUIC, DNS addresses, relaying through other agents.

pub mod by_host;
pub mod codec;
pub mod config;
pub mod discovery;
mod event;
mod handle;
pub mod id;
pub mod key;
pub mod limits;
pub mod network;
pub mod on_request;
pub mod probe;
pub mod relay;
pub mod transport;

pub use codec::Ack;
pub use config::{Identity, NetConfig};
pub use key::{pre_shared_key, KeyError, PoolKey};
pub use libp2p;
pub use network::{NetEvent, NetHandle, Network, PeerSummary};

use std::path::PathBuf;

use ios_agent_core::tier::PeerId as CorePeerId;
use libp2p::Multiaddr;

/// What can go wrong when starting or commanding the network.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A configuration value is out of range.
    #[error("invalid network configuration: {field}: {reason}")]
    Config {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The pool key could not be loaded.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The identity file could not be loaded or created.
    #[error("identity file {path}: {reason}")]
    Identity {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Could not listen on an address.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
    /// Could not start dialing an address.
    #[error("cannot dial {addr}: {reason}")]
    Dial {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
    /// The peer is not connected now.
    #[error("agent {peer} is not connected")]
    NotConnected {
        /// The peer.
        peer: CorePeerId,
    },
    /// The bytes of a core peer id are not a libp2p peer id.
    #[error("{peer} is not a libp2p peer id")]
    InvalidPeer {
        /// The peer.
        peer: CorePeerId,
    },
    /// The send queue is full: the message was dropped (see
    /// [`NetHandle::try_send`]).
    #[error("send queue full: {kind} message to {peer} dropped")]
    QueueFull {
        /// The addressee.
        peer: CorePeerId,
        /// The message kind.
        kind: &'static str,
    },
    /// The network task's command queue is full: the request was not queued.
    #[error("network task busy: {what} not queued")]
    Busy {
        /// The request.
        what: &'static str,
    },
    /// A message too large to send.
    #[error("cannot send {kind} message: {reason}")]
    TooLarge {
        /// The message kind.
        kind: &'static str,
        /// Why.
        reason: String,
    },
    /// The network task has stopped.
    #[error("the network has stopped")]
    Stopped,
}
