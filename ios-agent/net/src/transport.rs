//! The transport every pool connection uses: TCP, then the private-network handshake with the
//! pool key, then noise (authentication and encryption), then yamux (streams).
//!
//! `SwarmBuilder::with_tcp` has no hook for pnet, so the transport is built by hand. A key
//! mismatch produces no error of its own (the pnet handshake only swaps nonces); the
//! connection then fails with garbage or stalls in noise. So the whole handshake runs under a
//! deadline, and [`describe_transport_error`] turns such failures into a message that says
//! "wrong or missing pool key?".

use std::collections::HashSet;
use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use libp2p::core::muxing::StreamMuxerBox;
use libp2p::core::transport::{Boxed, TransportError};
use libp2p::core::upgrade::Version;
use libp2p::futures::StreamExt;
use libp2p::identity::Keypair;
use libp2p::pnet::PnetConfig;
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{noise, tcp, yamux, Multiaddr, PeerId, Swarm, Transport};

use crate::key::PoolKey;

/// Default deadline for a connection's whole handshake (TCP connect, pnet, noise, yamux).
///
/// Why 20 s (5 s before 2026-12-06): a handshake takes several round trips, and when a pool
/// starts at once each waits behind every other agent's on the way. With 300 agents in 4
/// emulated sites (round trips of 33 to 400 ms between sites) the dials across sites missed
/// 5 s by the thousand while a site mate's finished at once; the site mates' connections
/// filled the dial target, and 39 to 101 agents still lacked 2 peers of some tier after 6
/// minutes (0 and 21 at 20 s, with as many connections: docs/results-log.md, 2026-12-06).
/// A wrong pool key hangs the handshake rather than failing it, so a node tells of it
/// sooner, while its dial to a peer server goes on
/// ([`DEFAULT_SLOW_SERVER_DIAL`](crate::config::DEFAULT_SLOW_SERVER_DIAL)). A handshake
/// that never completes holds its pending slot (at most 64, 8 per remote address:
/// [`crate::limits`]) up to this long.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);

/// Builds the pool transport for `identity`, with the given handshake deadline.
pub fn build_transport(
    identity: &Keypair,
    key: &PoolKey,
    handshake_timeout: Duration,
) -> Result<Boxed<(PeerId, StreamMuxerBox)>, noise::Error> {
    let psk = crate::key::pre_shared_key(key);
    let noise = noise::Config::new(identity)?;
    let transport = tcp::tokio::Transport::new(tcp::Config::default().nodelay(true))
        // The pnet stage. It sees only TCP streams that did connect, so its errors (and any
        // later stage's) are handshake failures, told apart from TCP failures below.
        .and_then(move |socket, _| PnetConfig::new(psk).handshake(socket))
        .upgrade(Version::V1Lazy)
        .authenticate(noise)
        .multiplex(yamux::Config::default())
        .timeout(handshake_timeout)
        .map_err(move |e| {
            use either::Either as E;
            use libp2p::core::transport::timeout::TransportTimeoutError as T;
            match e {
                T::Timeout => io::Error::new(
                    io::ErrorKind::TimedOut,
                    Handshake(format!(
                        "no connection or handshake within {} s",
                        handshake_timeout.as_secs_f64()
                    )),
                ),
                T::TimerError(e) => e,
                // TCP itself failed (refused, unreachable): not a key problem.
                T::Other(E::Left(E::Left(E::Left(tcp)))) => tcp,
                T::Other(other) => io::Error::new(
                    io::ErrorKind::InvalidData,
                    Handshake(format!("handshake failed: {}", chain(&other))),
                ),
            }
        })
        .map(|(peer, muxer), _| (peer, StreamMuxerBox::new(muxer)))
        .boxed();
    Ok(transport)
}

/// A failure after the TCP connection was made: the handshake with the pool key, noise or
/// yamux failed or stalled.
#[derive(Debug)]
struct Handshake(String);

impl std::fmt::Display for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Handshake {}

/// What a transport failure means for the operator, in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureReport {
    /// True when TCP connected but the pool handshake failed or stalled: most likely the
    /// other side has another pool key, or none.
    pub key_suspected: bool,
    /// The message, naming what failed.
    pub message: String,
}

/// The hint appended to every handshake failure.
pub const KEY_HINT: &str = "wrong or missing pool key?";

/// Describes an `io::Error` that came out of [`build_transport`].
pub fn describe_io_error(e: &io::Error) -> FailureReport {
    // Walk the chain: boxing wraps the error in further io::Errors.
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<Handshake>() {
            return FailureReport {
                key_suspected: true,
                message: format!("{h} ({KEY_HINT})"),
            };
        }
        cur = match err.downcast_ref::<io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
            None => err.source(),
        };
    }
    let message = match e.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused: nothing listens there".to_owned(),
        _ => chain(e),
    };
    FailureReport {
        key_suspected: false,
        message,
    }
}

/// Describes one `TransportError` of a dial or an incoming connection.
pub fn describe_transport_error(e: &TransportError<io::Error>) -> FailureReport {
    match e {
        TransportError::MultiaddrNotSupported(a) => FailureReport {
            key_suspected: false,
            message: format!("address {a} not supported (expected /ip4/A/tcp/P or /ip6/A/tcp/P)"),
        },
        TransportError::Other(e) => describe_io_error(e),
    }
}

/// How long [`listen_all`] waits for the listeners to report their addresses.
pub const LISTEN_TIMEOUT: Duration = Duration::from_secs(5);

/// An address [`listen_all`] could not listen on, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenFailure {
    /// The address (the first asked for when the failure names none).
    pub addr: Multiaddr,
    /// Why.
    pub reason: String,
}

/// Starts a listener on each of `addrs` (at least one) and waits, at most
/// [`LISTEN_TIMEOUT`], until every one reports the address it is bound to: returns those, in
/// the order they came, so that what a node announces is complete before it runs. Used by
/// the agents' network and the peer server alike.
pub async fn listen_all<B: NetworkBehaviour>(
    swarm: &mut Swarm<B>,
    addrs: &[Multiaddr],
) -> Result<Vec<Multiaddr>, ListenFailure> {
    let Some(first) = addrs.first() else {
        return Err(ListenFailure {
            addr: Multiaddr::empty(),
            reason: "no address to listen on".into(),
        });
    };
    let failure = |addr: &Multiaddr, reason: String| ListenFailure {
        addr: addr.clone(),
        reason,
    };
    for addr in addrs {
        swarm
            .listen_on(addr.clone())
            .map_err(|e| failure(addr, chain(&e)))?;
    }
    let mut listening = Vec::new();
    let mut bound = HashSet::new();
    let deadline = tokio::time::Instant::now() + LISTEN_TIMEOUT;
    while bound.len() < addrs.len() {
        let event = tokio::time::timeout_at(deadline, swarm.select_next_some())
            .await
            .map_err(|_| {
                failure(
                    &addrs[bound.len().min(addrs.len() - 1)],
                    format!("no address within {} s", LISTEN_TIMEOUT.as_secs()),
                )
            })?;
        match event {
            SwarmEvent::NewListenAddr {
                listener_id,
                address,
            } => {
                bound.insert(listener_id);
                listening.push(address);
            }
            SwarmEvent::ListenerClosed {
                addresses, reason, ..
            } => {
                let reason = match reason {
                    Ok(()) => "listener closed".into(),
                    Err(e) => chain(&e),
                };
                return Err(failure(addresses.first().unwrap_or(first), reason));
            }
            SwarmEvent::ListenerError { error, .. } => return Err(failure(first, chain(&error))),
            _ => {}
        }
    }
    Ok(listening)
}

/// An error and its sources on one line.
pub(crate) fn chain(e: &dyn StdError) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = inner.source();
    }
    s
}
