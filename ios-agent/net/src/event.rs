//! [`NetEvent`]: what the network reports, on one channel, straight to the agent's driver;
//! and [`PeerSummary`], what [`NetHandle::peers`](crate::NetHandle::peers) lists.

use std::time::Duration;

use ios_agent_core::tier::PeerId as CorePeerId;
use ios_agent_core::Message;
use libp2p::{Multiaddr, PeerId};
use pcm_proto::HostName;

#[cfg(doc)]
use crate::{NetConfig, NetHandle};

/// An agent peer as the network sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSummary {
    /// The peer, as the agent core names it.
    pub peer: CorePeerId,
    /// The same peer as libp2p names it.
    pub libp2p_id: PeerId,
    /// Remote address of the connection in use.
    pub addr: Multiaddr,
    /// Latest ping round-trip time, if any yet.
    pub rtt: Option<Duration>,
}

/// What the network reports to the driver. Peer ids are the agent core's
/// ([`CorePeerId`], the bytes of the libp2p peer id), so they go straight into
/// `Agent::handle_*`.
#[derive(Debug, Clone)]
pub enum NetEvent {
    /// Listening on this address (also announced to peer servers unless
    /// `external_addrs` is set).
    Listening {
        /// The address.
        addr: Multiaddr,
    },
    /// An agent is connected (identify says it speaks the agent protocol).
    PeerUp {
        /// The agent.
        peer: CorePeerId,
        /// Its address on this connection.
        addr: Multiaddr,
        /// The host it announced over this connection ([`NetConfig::host`]), if any:
        /// feed to `Agent::handle_peer_host`.
        host: Option<HostName>,
    },
    /// A ping round trip to an agent: feed to `Agent::handle_peer_rtt`.
    PeerRtt {
        /// The agent.
        peer: CorePeerId,
        /// The round-trip time.
        rtt: Duration,
    },
    /// The last connection to an agent closed (or its pings timed out): feed to
    /// `Agent::handle_peer_gone`.
    PeerGone {
        /// The agent.
        peer: CorePeerId,
    },
    /// A valid agent message: feed to `Agent::handle_message`.
    Message {
        /// The sender.
        from: CorePeerId,
        /// The message, already checked with `Message::validate`.
        message: Message,
    },
    /// A peer sent something that is not a valid agent message (too long, undecodable or
    /// invalid). It was refused and the sender told why; nothing else happens.
    BadMessage {
        /// The sender.
        from: CorePeerId,
        /// What was wrong.
        reason: String,
    },
    /// A message sent with [`NetHandle::send`] was not delivered or was refused; or one
    /// queued with [`NetHandle::try_send`] found its addressee not connected.
    SendFailed {
        /// The addressee.
        to: CorePeerId,
        /// What the message was (`Message::kind`).
        kind: &'static str,
        /// Why.
        reason: String,
    },
    /// Registered with a peer server (the first time, and again after an error).
    PeerServerUp {
        /// The address configured.
        addr: Multiaddr,
        /// The server's libp2p peer id.
        server: PeerId,
    },
    /// A peer server cannot be reached, refused us, or the connection to it was lost. The
    /// network keeps running and tries again after `redial_interval`, doubling the wait up to
    /// `max_redial_interval` while it keeps failing; the same reason twice in a row is
    /// reported once.
    PeerServerError {
        /// The address configured.
        addr: Multiaddr,
        /// Why, in one line. Contains "wrong or missing pool key?" when TCP connected but the
        /// pool handshake failed or stalled.
        reason: String,
    },
    /// Dialing an agent (direct or discovered) failed.
    DialError {
        /// The address, or the peer when it was dialed by peer id.
        addr: String,
        /// The agent, if known.
        peer: Option<CorePeerId>,
        /// Why; contains "wrong or missing pool key?" as for [`NetEvent::PeerServerError`].
        reason: String,
    },
    /// The agent of a host asked for with [`NetHandle::try_dial_host`] was not found, or not
    /// dialed. It is looked up again when asked again after its rest.
    HostUnknown {
        /// The host.
        host: HostName,
        /// Why, in one line.
        reason: String,
    },
    /// A connection from outside failed during the handshake.
    IncomingError {
        /// The remote address.
        from: Multiaddr,
        /// Why; contains "wrong or missing pool key?" as for [`NetEvent::PeerServerError`].
        reason: String,
    },
}
