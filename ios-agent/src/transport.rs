//! What the driver needs from the network, so that the libp2p transport and the in-process
//! test transport are interchangeable.

use std::time::Duration;

use ios_agent_core::{Message, PeerId};

/// Something that happened on the network, in the core's terms.
#[derive(Debug, Clone)]
pub enum PeerEvent {
    /// A round-trip time was measured to `peer`.
    Rtt {
        /// The peer.
        peer: PeerId,
        /// The measured round trip.
        rtt: Duration,
    },
    /// `peer` announced over its connection the host it runs on.
    Host {
        /// The peer.
        peer: PeerId,
        /// Its host, as the MPI runtime names it.
        host: pcm_proto::HostName,
    },
    /// `peer` disconnected or its registration expired.
    Gone {
        /// The peer.
        peer: PeerId,
    },
    /// `from` sent a message that decoded and validated.
    Message {
        /// The sender, as the transport authenticated it.
        from: PeerId,
        /// The message.
        message: Message,
    },
}

/// Sends agent messages. Must not block: the driver calls it from its event loop.
pub trait Transport: Send + 'static {
    /// Queues `message` for `to`. Delivery is best effort: the protocol tolerates loss.
    fn send(&self, to: &PeerId, message: Message);
}
