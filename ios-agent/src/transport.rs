//! What the driver needs from the network, so that the libp2p transport and the in-process
//! test transport are interchangeable: [`Transport`] to send, and a channel of `ios-agent-net`'s
//! [`NetEvent`]s to receive (one enum for the network's events, from the network task
//! straight to the driver; a test transport makes the same events).

use ios_agent_core::{Message, PeerId};
pub use ios_agent_net::NetEvent;

/// Sends agent messages. Must not block: the driver calls it from its event loop.
pub trait Transport: Send + 'static {
    /// Queues `message` for `to`. Delivery is best effort: the protocol tolerates loss.
    fn send(&self, to: &PeerId, message: Message);
}
