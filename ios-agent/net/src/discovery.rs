//! Discovery, redial and registration renewal as a pure state machine, driven by the network
//! task ([`crate::network`]) and tested here without a swarm.
//!
//! The [`Discovery`] store knows the peer servers (their connection, registration and its
//! renewal at half the TTL granted, discovery rounds), the direct peers (kept connected) and
//! the agents discovered through the servers (dialed once, again after a failure only when
//! their backoff ends). It does no I/O and reads no clock, in the style of `quinn-proto`:
//!
//! - inputs are `on_*` methods that take `now`: what the swarm reported (a connection, a
//!   failed dial, a registration answer, a discovery answer);
//! - outputs are [`Action`]s drained with [`Discovery::poll_action`] after every input and
//!   whenever [`Discovery::poll_timeout`] passes: dial, register, discover, or report.
//!
//! Every returned action changes the state so that it is not returned again until its outcome
//! is reported (a dial in flight is not repeated, a registration in flight is not renewed).
//! Failures back off: the first retry comes after `redial_interval`, each further consecutive
//! failure doubles the wait up to `max_redial_interval`; a success resets it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use libp2p::multiaddr::Protocol;
use libp2p::rendezvous::Cookie;
use libp2p::swarm::ConnectionId;
use libp2p::{Multiaddr, PeerId};

/// Wait before asking the swarm again to send a registration it could not send (it has no
/// external address yet; one comes with the first listen address).
pub const REGISTER_RETRY: Duration = Duration::from_millis(500);

/// The timings of a [`Discovery`] store (from [`NetConfig`](crate::NetConfig)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Period of discovery requests to each connected peer server.
    pub discover_interval: Duration,
    /// Wait after a first failure before trying again.
    pub redial_interval: Duration,
    /// Longest wait after repeated failures.
    pub max_redial_interval: Duration,
}

/// A peer server, by its position in the configured list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServerId(pub usize);

/// A direct peer, by its position in the configured list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirectId(pub usize);

/// What a dial asked by the store is for; given back with its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// A peer server.
    Server(ServerId),
    /// A direct peer.
    Direct(DirectId),
    /// An agent found at a peer server.
    Discovered(PeerId),
}

/// What the store asks the network task to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Dial an address without knowing the peer behind it (a peer server or direct peer).
    /// Report the outcome with [`Discovery::on_connected`] or [`Discovery::on_dial_failed`].
    DialAddress {
        /// What for.
        target: Target,
        /// The configured address.
        addr: Multiaddr,
    },
    /// Dial a discovered agent unless already connected or dialing. Report the outcome with
    /// [`Discovery::on_connected`], [`Discovery::on_dial_failed`] or, when the swarm did not
    /// dial at all, [`Discovery::on_dial_skipped`].
    DialPeer {
        /// The agent.
        peer: PeerId,
        /// Its registered addresses.
        addrs: Vec<Multiaddr>,
    },
    /// Register (or renew) with a connected peer server. If the swarm cannot send it, report
    /// [`Discovery::on_register_not_sent`]; the answer comes as
    /// [`Discovery::on_registered`] or [`Discovery::on_register_failed`].
    Register {
        /// The server.
        server: ServerId,
        /// Its peer id.
        peer: PeerId,
    },
    /// Ask a connected peer server who is registered; the answer comes as
    /// [`Discovery::on_discovered`] or [`Discovery::on_discover_failed`].
    Discover {
        /// The server.
        server: ServerId,
        /// Its peer id.
        peer: PeerId,
        /// Where the previous answer ended, to get only what is new.
        cookie: Option<Cookie>,
    },
    /// Report: registered with a peer server (the first time, and again after an error).
    ServerUp {
        /// The configured address.
        addr: Multiaddr,
        /// The server's peer id.
        server: PeerId,
        /// The lifetime granted, in seconds.
        ttl: u64,
    },
    /// Report: a peer server failed; sent once per distinct reason in a row, so a server that
    /// stays down is reported once.
    ServerError {
        /// The configured address.
        addr: Multiaddr,
        /// Why, in one line.
        reason: String,
    },
    /// Report: dialing a direct peer or a discovered agent failed.
    DialError {
        /// The address, or the agent when it was dialed by peer id.
        addr: String,
        /// The agent, if known.
        peer: Option<PeerId>,
        /// Why.
        reason: String,
    },
}

/// Consecutive failures, and the wait they call for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    /// The wait after one more failure: `base`, then doubling, at most `cap`.
    fn fail(&mut self, timing: &Timing) -> Duration {
        let base = timing.redial_interval;
        // The shift is bounded so the multiplication cannot overflow into nonsense; the cap
        // is reached long before.
        let wait = base
            .saturating_mul(1u32 << self.failures.min(20))
            .min(timing.max_redial_interval.max(base));
        self.failures = self.failures.saturating_add(1);
        wait
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// The state of a configured address's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// Not connected; dial at this time.
    Idle { next_dial: Instant },
    /// A dial is in flight.
    Dialing,
    /// Connected over this connection.
    Connected(ConnectionId),
}

/// The registration with one connected peer server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Registration {
    /// Not wanted (not connected, or the server is not a peer server).
    Off,
    /// To be sent (first time, renewal or retry) at this time.
    At(Instant),
    /// Sent; the answer is awaited.
    InFlight,
}

#[derive(Debug)]
struct Server {
    addr: Multiaddr,
    /// Known from the address's /p2p/ part, or learnt on connection.
    peer: Option<PeerId>,
    link: Link,
    registration: Registration,
    next_discover: Instant,
    cookie: Option<Cookie>,
    /// Registered and not failed since ([`Action::ServerUp`] sent).
    registered: bool,
    /// The last error reported, so a failing server is reported once per change.
    last_error: Option<String>,
    backoff: Backoff,
}

#[derive(Debug)]
struct Direct {
    addr: Multiaddr,
    link: Link,
    backoff: Backoff,
}

/// A discovered agent whose dial failed.
#[derive(Debug, Clone, Copy)]
struct Retry {
    /// Not dialed again before this time.
    until: Instant,
    backoff: Backoff,
}

/// Peer servers, direct peers and discovered agents; see the module documentation.
#[derive(Debug)]
pub struct Discovery {
    timing: Timing,
    local: PeerId,
    servers: Vec<Server>,
    direct: Vec<Direct>,
    /// Agents with at least one established connection.
    connected: HashSet<PeerId>,
    /// Discovered agents being dialed.
    dialing: HashSet<PeerId>,
    /// Discovered agents whose last dial failed.
    retry: HashMap<PeerId, Retry>,
    /// Actions decided by an input, returned before any timed one.
    queue: VecDeque<Action>,
}

impl Discovery {
    /// A store for the node `local` with these peer servers and direct peers, all to be
    /// dialed at once.
    pub fn new(
        timing: Timing,
        local: PeerId,
        servers: &[Multiaddr],
        direct: &[Multiaddr],
        now: Instant,
    ) -> Self {
        Discovery {
            timing,
            local,
            servers: servers
                .iter()
                .map(|addr| Server {
                    addr: addr.clone(),
                    peer: addr.iter().find_map(|p| match p {
                        Protocol::P2p(id) => Some(id),
                        _ => None,
                    }),
                    link: Link::Idle { next_dial: now },
                    registration: Registration::Off,
                    next_discover: now,
                    cookie: None,
                    registered: false,
                    last_error: None,
                    backoff: Backoff::default(),
                })
                .collect(),
            direct: direct
                .iter()
                .map(|addr| Direct {
                    addr: addr.clone(),
                    link: Link::Idle { next_dial: now },
                    backoff: Backoff::default(),
                })
                .collect(),
            connected: HashSet::new(),
            dialing: HashSet::new(),
            retry: HashMap::new(),
            queue: VecDeque::new(),
        }
    }

    /// The next thing to do at `now`, if any. Call until `None` after every input and when
    /// [`poll_timeout`](Self::poll_timeout) has passed.
    pub fn poll_action(&mut self, now: Instant) -> Option<Action> {
        if let Some(action) = self.queue.pop_front() {
            return Some(action);
        }
        for (i, s) in self.servers.iter_mut().enumerate() {
            match s.link {
                Link::Idle { next_dial } if now >= next_dial => {
                    s.link = Link::Dialing;
                    return Some(Action::DialAddress {
                        target: Target::Server(ServerId(i)),
                        addr: s.addr.clone(),
                    });
                }
                Link::Connected(_) => {
                    let Some(peer) = s.peer else { continue };
                    if let Registration::At(t) = s.registration {
                        if now >= t {
                            s.registration = Registration::InFlight;
                            return Some(Action::Register {
                                server: ServerId(i),
                                peer,
                            });
                        }
                    }
                    if now >= s.next_discover {
                        s.next_discover = now + self.timing.discover_interval;
                        return Some(Action::Discover {
                            server: ServerId(i),
                            peer,
                            cookie: s.cookie.clone(),
                        });
                    }
                }
                Link::Idle { .. } | Link::Dialing => {}
            }
        }
        for (i, d) in self.direct.iter_mut().enumerate() {
            if let Link::Idle { next_dial } = d.link {
                if now >= next_dial {
                    d.link = Link::Dialing;
                    return Some(Action::DialAddress {
                        target: Target::Direct(DirectId(i)),
                        addr: d.addr.clone(),
                    });
                }
            }
        }
        None
    }

    /// When [`poll_action`](Self::poll_action) has something timed to do next: the earliest
    /// redial, registration (renewal) or discovery round. `None`: nothing until an input.
    /// Actions decided by inputs are not counted: drain them right after the input.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let servers = self.servers.iter().flat_map(|s| {
            let (dial, register, discover) = match s.link {
                Link::Idle { next_dial } => (Some(next_dial), None, None),
                Link::Dialing => (None, None, None),
                Link::Connected(_) if s.peer.is_none() => (None, None, None),
                Link::Connected(_) => (
                    None,
                    match s.registration {
                        Registration::At(t) => Some(t),
                        Registration::Off | Registration::InFlight => None,
                    },
                    Some(s.next_discover),
                ),
            };
            [dial, register, discover]
        });
        let direct = self.direct.iter().map(|d| match d.link {
            Link::Idle { next_dial } => Some(next_dial),
            Link::Dialing | Link::Connected(_) => None,
        });
        servers.chain(direct).flatten().min()
    }

    /// A connection was established: to `target` if the store asked for it, else `None`
    /// (incoming, or dialed by hand).
    pub fn on_connected(
        &mut self,
        target: Option<Target>,
        peer: PeerId,
        id: ConnectionId,
        now: Instant,
    ) {
        self.connected.insert(peer);
        self.retry.remove(&peer);
        match target {
            Some(Target::Server(ServerId(i))) => {
                let Some(s) = self.servers.get_mut(i) else {
                    return;
                };
                if s.peer.is_some_and(|p| p != peer) {
                    tracing::warn!("peer server {} answered as {peer}", s.addr);
                }
                s.peer = Some(peer);
                s.link = Link::Connected(id);
                // Register and look at once.
                s.registration = Registration::At(now);
                s.next_discover = now;
                s.cookie = None;
            }
            Some(Target::Direct(DirectId(i))) => {
                if let Some(d) = self.direct.get_mut(i) {
                    d.link = Link::Connected(id);
                    d.backoff.reset();
                }
            }
            Some(Target::Discovered(p)) => {
                self.dialing.remove(&p);
            }
            None => {}
        }
    }

    /// A dial asked by the store failed, or could not start.
    pub fn on_dial_failed(&mut self, target: Target, reason: String, now: Instant) {
        match target {
            Target::Server(ServerId(i)) => {
                if self.servers.get(i).is_none_or(|s| s.link != Link::Dialing) {
                    return;
                }
                let wait = self.server_failed(i, format!("cannot connect: {reason}"));
                if let Some(s) = self.servers.get_mut(i) {
                    s.link = Link::Idle {
                        next_dial: now + wait,
                    };
                }
            }
            Target::Direct(DirectId(i)) => {
                let Some(d) = self.direct.get_mut(i) else {
                    return;
                };
                if d.link != Link::Dialing {
                    return;
                }
                d.link = Link::Idle {
                    next_dial: now + d.backoff.fail(&self.timing),
                };
                self.queue.push_back(Action::DialError {
                    addr: d.addr.to_string(),
                    peer: None,
                    reason,
                });
            }
            Target::Discovered(peer) => {
                self.dialing.remove(&peer);
                let retry = self.retry.entry(peer).or_insert(Retry {
                    until: now,
                    backoff: Backoff::default(),
                });
                retry.until = now + retry.backoff.fail(&self.timing);
                self.queue.push_back(Action::DialError {
                    addr: peer.to_string(),
                    peer: Some(peer),
                    reason,
                });
            }
        }
    }

    /// The swarm did not dial a discovered agent (already connected or being dialed, or no
    /// usable address): nothing failed, so no backoff.
    pub fn on_dial_skipped(&mut self, peer: PeerId) {
        self.dialing.remove(&peer);
    }

    /// A connection closed; `remaining` connections to `peer` are left. `cause` is one line.
    pub fn on_connection_closed(
        &mut self,
        peer: PeerId,
        id: ConnectionId,
        remaining: u32,
        cause: &str,
        now: Instant,
    ) {
        if remaining == 0 {
            self.connected.remove(&peer);
        }
        if let Some(i) = self
            .servers
            .iter()
            .position(|s| s.link == Link::Connected(id))
        {
            let wait = self.server_failed(i, format!("connection lost: {cause}"));
            if let Some(s) = self.servers.get_mut(i) {
                s.link = Link::Idle {
                    next_dial: now + wait,
                };
            }
        }
        if let Some(d) = self
            .direct
            .iter_mut()
            .find(|d| d.link == Link::Connected(id))
        {
            d.link = Link::Idle {
                next_dial: now + d.backoff.fail(&self.timing),
            };
        }
    }

    /// Peer server `server` accepted the registration for `ttl` seconds: renew at half of it.
    pub fn on_registered(&mut self, server: PeerId, ttl: u64, now: Instant) {
        let Some(i) = self.server_index(&server) else {
            return;
        };
        let s = &mut self.servers[i];
        if !matches!(s.link, Link::Connected(_)) {
            // A late answer on a connection since lost: the next connection registers anew.
            return;
        }
        s.registration = Registration::At(now + Duration::from_secs(ttl.max(2)) / 2);
        s.last_error = None;
        s.backoff.reset();
        if !s.registered {
            s.registered = true;
            self.queue.push_back(Action::ServerUp {
                addr: s.addr.clone(),
                server,
                ttl,
            });
        }
        // Look at once for who is there.
        s.next_discover = now;
    }

    /// Peer server `server` refused the registration: keep the connection, try again after
    /// the backoff.
    pub fn on_register_failed(&mut self, server: PeerId, reason: String, now: Instant) {
        let Some(i) = self.server_index(&server) else {
            return;
        };
        let wait = self.server_failed(i, reason);
        let s = &mut self.servers[i];
        if matches!(s.link, Link::Connected(_)) {
            s.registration = Registration::At(now + wait);
        }
    }

    /// The swarm could not send the registration to `server` (no external address yet): try
    /// again in [`REGISTER_RETRY`].
    pub fn on_register_not_sent(&mut self, server: ServerId, now: Instant) {
        if let Some(s) = self.servers.get_mut(server.0) {
            if s.registration == Registration::InFlight {
                s.registration = Registration::At(now + REGISTER_RETRY);
            }
        }
    }

    /// Peer server `server` is unusable over its current connection (e.g. it does not speak
    /// rendezvous): report it and stop registering until the connection is replaced.
    pub fn on_server_error(&mut self, server: PeerId, reason: String) {
        if let Some(i) = self.server_index(&server) {
            self.server_failed(i, reason);
        }
    }

    /// Peer server `server` answered a discovery: dial the agents found that are neither this
    /// node, a peer server, connected, being dialed nor backing off.
    pub fn on_discovered(
        &mut self,
        server: PeerId,
        cookie: Cookie,
        registrations: impl IntoIterator<Item = (PeerId, Vec<Multiaddr>)>,
        now: Instant,
    ) {
        if let Some(i) = self.server_index(&server) {
            self.servers[i].cookie = Some(cookie);
        }
        // Forget failures long past, so the table stays as small as the pool.
        let forget = self.timing.max_redial_interval.max(self.timing.redial_interval);
        self.retry.retain(|_, r| now < r.until + forget);
        for (peer, addrs) in registrations {
            if peer == self.local
                || self.connected.contains(&peer)
                || self.dialing.contains(&peer)
                || self.retry.get(&peer).is_some_and(|r| now < r.until)
                || self.server_index(&peer).is_some()
            {
                continue;
            }
            self.dialing.insert(peer);
            self.queue.push_back(Action::DialPeer { peer, addrs });
        }
    }

    /// Peer server `server` refused a discovery: start over without a cookie next round.
    /// Returns the server's address, for the log line.
    pub fn on_discover_failed(&mut self, server: PeerId) -> Option<&Multiaddr> {
        let i = self.server_index(&server)?;
        let s = &mut self.servers[i];
        s.cookie = None;
        Some(&s.addr)
    }

    /// Whether `peer` is one of the peer servers.
    pub fn is_server(&self, peer: &PeerId) -> bool {
        self.server_index(peer).is_some()
    }

    /// The peer servers connected now, to unregister from at shutdown.
    pub fn connected_servers(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.servers
            .iter()
            .filter(|s| matches!(s.link, Link::Connected(_)))
            .filter_map(|s| s.peer)
    }

    fn server_index(&self, peer: &PeerId) -> Option<usize> {
        self.servers.iter().position(|s| s.peer == Some(*peer))
    }

    /// Marks server `i` failed, reports it if the reason changed, and returns the backoff.
    fn server_failed(&mut self, i: usize, reason: String) -> Duration {
        let Some(s) = self.servers.get_mut(i) else {
            return self.timing.redial_interval;
        };
        let wait = s.backoff.fail(&self.timing);
        s.registration = Registration::Off;
        s.registered = false;
        if s.last_error.as_deref() != Some(reason.as_str()) {
            s.last_error = Some(reason.clone());
            self.queue.push_back(Action::ServerError {
                addr: s.addr.clone(),
                reason,
            });
        }
        wait
    }
}
