//! What the driver needs from the network, so that the libp2p transport and the in-process
//! test transport are interchangeable: [`Transport`] to send, and a channel of `ios-agent-net`'s
//! [`NetEvent`]s to receive (one enum for the network's events, from the network task
//! straight to the driver; a test transport makes the same events).

use ios_agent_core::{Message, PeerId};
pub use ios_agent_net::NetEvent;
use pcm_proto::HostName;

/// Sends agent messages. Must not block: the driver calls it from its event loop.
pub trait Transport: Send + 'static {
    /// Queues `message` for `to`. Delivery is best effort: the protocol tolerates loss.
    fn send(&self, to: &PeerId, message: Message);

    /// How many connections the transport holds at most, if it holds connections at all
    /// (the driver closes some when nearly full, [`crate::connections`]). Default: none,
    /// for a transport without connections (an in-process one).
    fn max_connections(&self) -> Option<usize> {
        None
    }

    /// Closes the connection to the agent `peer` to make room for others. Must not block.
    /// Only called when [`Transport::max_connections`] is some.
    fn disconnect(&self, _peer: &PeerId) {}

    /// Connects to the agent of `host` if it can find it, so that the host's RTT is
    /// measured (the agent's ranks exchange with it). Must not block; called at every sample
    /// while the host has no connected agent, so the transport bounds what it does.
    /// Default: nothing, for a transport whose agents are all reachable.
    fn dial_host(&self, _host: &HostName) {}
}
