//! Bounds against a flood of connections (issue 12, item 7), shared by agents and peer
//! servers: caps on connections ([`connection_limits()`]); repeated log lines are limited by
//! [`pcm_proto::log_limit`], the one limiter pcmd uses too.
//!
//! Without them a key holder (or anyone, for handshakes that never finish) could hold open
//! more connections than the process has file descriptors, so that a legitimate agent's
//! connection failed, and a stream of garbage connections wrote one warning line each
//! (megabytes of log per few thousand connections).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::task::{Context, Poll};

use libp2p::connection_limits::{self, ConnectionLimits};
use libp2p::core::transport::PortUse;
use libp2p::core::Endpoint;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::behaviour::ListenFailure;
use libp2p::swarm::{
    dummy, ConnectionDenied, ConnectionId, FromSwarm, NetworkBehaviour, THandler, THandlerInEvent,
    THandlerOutEvent, ToSwarm,
};
use libp2p::{Multiaddr, PeerId};

/// Default cap on established connections of a node (agents: peers plus peer servers; peer
/// servers: agents). Below the common 1024 file-descriptor limit, with room for the rest.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 512;
/// Default cap on incoming connections still in their handshake. A connection that never
/// completes the handshake holds a slot until the handshake timeout; those above the cap
/// are closed at once.
pub const DEFAULT_MAX_PENDING: u32 = 64;
/// Default cap on incoming connections in their handshake from one IP address: a flood from
/// a few addresses then cannot take every pending slot ([`DEFAULT_MAX_PENDING`]) from the
/// others.
pub const DEFAULT_MAX_PENDING_PER_ADDRESS: u32 = 8;
/// Default cap on established connections with one peer id (two agents that dial each
/// other at once hold two for a moment).
pub const DEFAULT_MAX_PER_PEER: u32 = 4;

/// The connection-limits behaviour with these caps.
pub fn connection_limits(
    max_connections: u32,
    max_pending: u32,
    max_per_peer: u32,
) -> connection_limits::Behaviour {
    connection_limits::Behaviour::new(
        ConnectionLimits::default()
            .with_max_established(Some(max_connections))
            .with_max_pending_incoming(Some(max_pending))
            .with_max_established_per_peer(Some(max_per_peer)),
    )
}

/// Caps the incoming connections in their handshake per remote IP address; those above the
/// cap are refused at once. (Stock `connection_limits` caps them only in total.)
#[derive(Debug)]
pub struct PendingPerAddress {
    max: u32,
    pending: HashMap<IpAddr, u32>,
    by_connection: HashMap<ConnectionId, IpAddr>,
}

/// A connection refused by [`PendingPerAddress`].
#[derive(Debug, thiserror::Error)]
#[error("{max} handshakes already under way from {ip}")]
pub struct TooManyPending {
    /// The remote address.
    pub ip: IpAddr,
    /// The cap.
    pub max: u32,
}

impl PendingPerAddress {
    /// At most `max` handshakes under way per remote IP address.
    pub fn new(max: u32) -> Self {
        PendingPerAddress {
            max,
            pending: HashMap::new(),
            by_connection: HashMap::new(),
        }
    }

    /// Handshakes under way from `ip` now.
    pub fn pending_from(&self, ip: &IpAddr) -> u32 {
        self.pending.get(ip).copied().unwrap_or(0)
    }

    /// Counts a new incoming connection from `remote`, or refuses it.
    pub fn admit(
        &mut self,
        connection: ConnectionId,
        remote: &Multiaddr,
    ) -> Result<(), TooManyPending> {
        let Some(ip) = remote.iter().find_map(|p| match p {
            Protocol::Ip4(a) => Some(IpAddr::V4(a)),
            Protocol::Ip6(a) => Some(IpAddr::V6(a)),
            _ => None,
        }) else {
            return Ok(());
        };
        let n = self.pending.entry(ip).or_insert(0);
        if *n >= self.max {
            return Err(TooManyPending { ip, max: self.max });
        }
        *n += 1;
        self.by_connection.insert(connection, ip);
        Ok(())
    }

    /// The handshake of `connection` ended (established or failed).
    pub fn release(&mut self, connection: ConnectionId) {
        if let Some(ip) = self.by_connection.remove(&connection) {
            if let Some(n) = self.pending.get_mut(&ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.pending.remove(&ip);
                }
            }
        }
    }
}

impl NetworkBehaviour for PendingPerAddress {
    type ConnectionHandler = dummy::ConnectionHandler;
    type ToSwarm = Infallible;

    fn handle_pending_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        _local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<(), ConnectionDenied> {
        self.admit(connection_id, remote_addr)
            .map_err(ConnectionDenied::new)
    }

    fn handle_established_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        _peer: PeerId,
        _local_addr: &Multiaddr,
        _remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.release(connection_id);
        Ok(dummy::ConnectionHandler)
    }

    fn handle_established_outbound_connection(
        &mut self,
        _connection_id: ConnectionId,
        _peer: PeerId,
        _addr: &Multiaddr,
        _role_override: Endpoint,
        _port_use: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(dummy::ConnectionHandler)
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        if let FromSwarm::ListenFailure(ListenFailure { connection_id, .. }) = event {
            self.release(connection_id);
        }
    }

    fn on_connection_handler_event(
        &mut self,
        _peer: PeerId,
        _connection: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        match event {}
    }

    fn poll(&mut self, _: &mut Context<'_>) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_handshakes_are_capped_per_address_and_released() {
        let mut p = PendingPerAddress::new(2);
        let from =
            |ip: &str| -> Multiaddr { format!("/ip4/{ip}/tcp/5000").parse().expect("valid") };
        let (c1, c2, c3, c4) = (
            ConnectionId::new_unchecked(1),
            ConnectionId::new_unchecked(2),
            ConnectionId::new_unchecked(3),
            ConnectionId::new_unchecked(4),
        );
        p.admit(c1, &from("127.0.0.2")).expect("first");
        p.admit(c2, &from("127.0.0.2")).expect("second");
        let err = p.admit(c3, &from("127.0.0.2")).expect_err("third");
        assert!(err.to_string().contains("127.0.0.2"), "{err}");
        // Another address is not affected.
        p.admit(c4, &from("127.0.0.1")).expect("other address");
        p.release(c1);
        p.admit(c3, &from("127.0.0.2")).expect("a slot freed");
        p.release(c2);
        p.release(c3);
        p.release(c3);
        assert_eq!(p.pending_from(&"127.0.0.2".parse().expect("ip")), 0);
    }
}
