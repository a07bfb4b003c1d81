//! Discovery, redial and registration renewal as a pure state machine, driven by the network
//! task ([`crate::network`]) and tested here without a swarm.
//!
//! The [`Discovery`] store knows the peer servers (their connection, registration and its
//! renewal at half the TTL granted, discovery rounds), the direct peers (kept connected, but
//! not redialed while the peer stays connected through a connection it dialed itself) and
//! the agents discovered through the servers (dialed once, again after a failure only when
//! their backoff ends, and only while fewer than the dial target are connected:
//! [`Discovery::with_dial_agents`]). It does no I/O and reads no clock, in the style of `quinn-proto`:
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
//!
//! Discovery rounds back off too: a round that finds no agent this node is not connected to
//! doubles the wait before the next one, from `discover_interval` up to
//! `max_discover_interval`; a round that finds one, a new connection to the server, and an
//! agent's last connection closing bring it back to `discover_interval`. An agent that joins
//! finds the others in its first rounds and dials them, so the others need not look often:
//! in a pool that does not change, each round's answer (every agent that renewed its
//! registration since the last round, each a signed record to check) no longer comes every
//! few seconds to every agent (issue 42: an idle agent's upkeep must not grow with the pool).
//! A node connected to its dial target ([`Discovery::with_dial_agents`]) asks for no rounds
//! at all, since it would dial none of the agents they found: at 300 agents, rounds every
//! 60 s still brought every agent's renewed record from each of two servers, and checking
//! their signatures was a fifth of an idle agent's CPU (`perf record` over the pool's idle
//! window). Room made by a connection lost or a dial failed brings the rounds back.

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
    /// Period of discovery requests to each connected peer server while rounds find agents
    /// to dial.
    pub discover_interval: Duration,
    /// Longest period of discovery requests, reached by doubling after rounds that find
    /// nothing new.
    pub max_discover_interval: Duration,
    /// Wait after a first failure before trying again.
    pub redial_interval: Duration,
    /// Longest wait after repeated failures.
    pub max_redial_interval: Duration,
    /// A peer server's dial still under way this long is reported
    /// ([`Action::ServerError`], the dial goes on): see
    /// [`DEFAULT_SLOW_SERVER_DIAL`](crate::config::DEFAULT_SLOW_SERVER_DIAL). `None`: never
    /// (a handshake deadline no longer than that reports the failure itself).
    pub slow_server_dial: Option<Duration>,
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
    /// (Direct peers only.) Our connection was closed but the peer stays connected through
    /// another: two agents that dial each other keep one connection, and redialing the
    /// other would only be closed again.
    Shared,
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
    /// Wait from one discovery round to the next (see the module docs).
    discover_wait: Duration,
    cookie: Option<Cookie>,
    /// Registered and not failed since ([`Action::ServerUp`] sent).
    registered: bool,
    /// The last error reported, so a failing server is reported once per change.
    last_error: Option<String>,
    backoff: Backoff,
    /// When the dial under way, if still under way, is reported slow.
    slow_at: Option<Instant>,
}

impl Server {
    /// Whether this server's discovery rounds are asked for: always the first (no cookie
    /// yet), then only while the node has room to dial (`Discovery::dial_room`).
    fn asks_rounds(&self, room: bool) -> bool {
        room || self.cookie.is_none()
    }
}

#[derive(Debug)]
struct Direct {
    addr: Multiaddr,
    link: Link,
    /// The peer at the address, learnt on connection.
    peer: Option<PeerId>,
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
    /// Discovered agents are dialed only while fewer agents than this are connected or being
    /// dialed ([`Discovery::with_dial_agents`]); `None`: all of them.
    dial_agents: Option<usize>,
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
                    discover_wait: timing.discover_interval,
                    cookie: None,
                    registered: false,
                    last_error: None,
                    slow_at: None,
                    backoff: Backoff::default(),
                })
                .collect(),
            direct: direct
                .iter()
                .map(|addr| Direct {
                    addr: addr.clone(),
                    link: Link::Idle { next_dial: now },
                    peer: None,
                    backoff: Backoff::default(),
                })
                .collect(),
            connected: HashSet::new(),
            dialing: HashSet::new(),
            retry: HashMap::new(),
            dial_agents: None,
            queue: VecDeque::new(),
        }
    }

    /// Dials discovered agents only while fewer than `n` agents (peer servers not counted)
    /// are connected or being dialed; `None` (the default): every agent discovered. While
    /// the node has its `n`, it asks for no discovery rounds (see the module docs). Which
    /// agents a node dials when it has room is its own order of the round's answer (a hash
    /// of both ids), so that the pool's nodes do not all dial the first agents of the
    /// servers' lists.
    pub fn with_dial_agents(mut self, n: Option<std::num::NonZeroUsize>) -> Self {
        self.dial_agents = n.map(std::num::NonZeroUsize::get);
        self
    }

    /// How many more discovered agents may be dialed now (`usize::MAX`: no bound).
    fn dial_room(&self) -> usize {
        let Some(n) = self.dial_agents else {
            return usize::MAX;
        };
        let agents = self.connected.iter().filter(|p| !self.is_server(p)).count();
        n.saturating_sub(agents + self.dialing.len())
    }

    /// This node's order of discovered agents (see [`Self::with_dial_agents`]).
    fn dial_order(&self, peer: &PeerId) -> u64 {
        use std::hash::{Hash as _, Hasher as _};
        // SipHash with fixed keys: the same order at every round and in every run.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.local.hash(&mut h);
        peer.hash(&mut h);
        h.finish()
    }

    /// The next thing to do at `now`, if any. Call until `None` after every input and when
    /// [`poll_timeout`](Self::poll_timeout) has passed.
    pub fn poll_action(&mut self, now: Instant) -> Option<Action> {
        if let Some(action) = self.queue.pop_front() {
            return Some(action);
        }
        // Each pass clears one server's report time, so the loop ends.
        while let Some(i) = self
            .servers
            .iter()
            .position(|s| s.link == Link::Dialing && s.slow_at.is_some_and(|at| now >= at))
        {
            if let Some(report) = self.report_slow_dial(i) {
                return Some(report);
            }
        }
        let rounds_wanted = self.dial_room() > 0;
        for (i, s) in self.servers.iter_mut().enumerate() {
            match s.link {
                Link::Idle { next_dial } if now >= next_dial => {
                    s.link = Link::Dialing;
                    s.slow_at = self.timing.slow_server_dial.map(|d| now + d);
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
                    if now >= s.next_discover && s.asks_rounds(rounds_wanted) {
                        s.next_discover = now + s.discover_wait;
                        return Some(Action::Discover {
                            server: ServerId(i),
                            peer,
                            cookie: s.cookie.clone(),
                        });
                    }
                }
                Link::Idle { .. } | Link::Dialing | Link::Shared => {}
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
        let rounds_wanted = self.dial_room() > 0;
        let servers = self.servers.iter().flat_map(|s| {
            let (dial, register, discover) = match s.link {
                Link::Idle { next_dial } => (Some(next_dial), None, None),
                Link::Dialing => (s.slow_at, None, None),
                Link::Shared => (None, None, None),
                Link::Connected(_) if s.peer.is_none() => (None, None, None),
                Link::Connected(_) => (
                    None,
                    match s.registration {
                        Registration::At(t) => Some(t),
                        Registration::Off | Registration::InFlight => None,
                    },
                    s.asks_rounds(rounds_wanted).then_some(s.next_discover),
                ),
            };
            [dial, register, discover]
        });
        let direct = self.direct.iter().map(|d| match d.link {
            Link::Idle { next_dial } => Some(next_dial),
            Link::Dialing | Link::Connected(_) | Link::Shared => None,
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
                s.slow_at = None;
                // Register and look at once.
                s.registration = Registration::At(now);
                s.next_discover = now;
                s.discover_wait = self.timing.discover_interval;
                s.cookie = None;
            }
            Some(Target::Direct(DirectId(i))) => {
                if let Some(d) = self.direct.get_mut(i) {
                    d.link = Link::Connected(id);
                    d.peer = Some(peer);
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
                    s.slow_at = None;
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
            if !self.is_server(&peer) {
                // An agent lost: look again soon, in case it comes back elsewhere.
                let base = self.timing.discover_interval;
                for s in &mut self.servers {
                    s.discover_wait = base;
                    s.next_discover = s.next_discover.min(now + base);
                }
            }
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
        for d in &mut self.direct {
            let lost = match d.link {
                Link::Connected(c) if c == id => {
                    if remaining > 0 && d.peer == Some(peer) {
                        d.link = Link::Shared;
                        false
                    } else {
                        true
                    }
                }
                Link::Shared => remaining == 0 && d.peer == Some(peer),
                Link::Idle { .. } | Link::Dialing | Link::Connected(_) => false,
            };
            if lost {
                d.link = Link::Idle {
                    next_dial: now + d.backoff.fail(&self.timing),
                };
            }
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
            // Look at once for who is there (a renewal changes nothing of that).
            s.next_discover = now;
        }
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
        // Forget failures long past, so the table stays as small as the pool.
        let forget = self
            .timing
            .max_redial_interval
            .max(self.timing.redial_interval);
        self.retry.retain(|_, r| now < r.until + forget);
        // The agents of the round this node is not connected to, in its own order.
        let mut unknown: Vec<(PeerId, Vec<Multiaddr>)> = registrations
            .into_iter()
            .filter(|(peer, _)| {
                *peer != self.local
                    && !self.connected.contains(peer)
                    && self.server_index(peer).is_none()
            })
            .collect();
        if self.dial_agents.is_some() {
            unknown.sort_by_cached_key(|(peer, _)| self.dial_order(peer));
        }
        // Whether the round found an agent this node would connect to (dialed now, being
        // dialed, or backing off after a failed dial): not when it has all it dials.
        let mut room = self.dial_room();
        let unconnected = !unknown.is_empty() && room > 0;
        for (peer, addrs) in unknown {
            if room == 0 {
                break;
            }
            if self.dialing.contains(&peer) || self.retry.get(&peer).is_some_and(|r| now < r.until)
            {
                continue;
            }
            self.dialing.insert(peer);
            room -= 1;
            self.queue.push_back(Action::DialPeer { peer, addrs });
        }
        if let Some(i) = self.server_index(&server) {
            let (base, max) = (
                self.timing.discover_interval,
                self.timing
                    .max_discover_interval
                    .max(self.timing.discover_interval),
            );
            let s = &mut self.servers[i];
            s.cookie = Some(cookie);
            if unconnected {
                s.discover_wait = base;
                s.next_discover = s.next_discover.min(now + base);
            } else {
                s.discover_wait = (s.discover_wait * 2).min(max);
            }
        }
    }

    /// The agent asks to close its connection to `peer` to make room for others (the
    /// driver's connection rotation): refused (false) for a peer server or a direct peer,
    /// which are kept connected. Otherwise the peer is not dialed again, when discovered
    /// anew, for the longest redial wait: it was left on purpose.
    pub fn on_dropped(&mut self, peer: PeerId, now: Instant) -> bool {
        if peer == self.local
            || self.is_server(&peer)
            || self.direct.iter().any(|d| d.peer == Some(peer))
        {
            return false;
        }
        let rest = self
            .timing
            .max_redial_interval
            .max(self.timing.redial_interval);
        self.retry.insert(
            peer,
            Retry {
                until: now + rest,
                backoff: Backoff::default(),
            },
        );
        true
    }

    /// Peer server `server` refused a discovery: start over without a cookie next round, and
    /// from the shortest wait after it. Returns the server's address, for the log line.
    pub fn on_discover_failed(&mut self, server: PeerId) -> Option<&Multiaddr> {
        let i = self.server_index(&server)?;
        let s = &mut self.servers[i];
        s.cookie = None;
        s.discover_wait = self.timing.discover_interval;
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

    /// Reports that server `i`'s dial is still under way after
    /// [`Timing::slow_server_dial`] (once per dial, and not again while the report is the
    /// last one sent). The dial goes on, to its handshake deadline.
    ///
    /// Why: a wrong pool key does not fail the handshake, it hangs it until the deadline
    /// (docs/results-log.md, 2026-12-06), and the deadline is long enough for a dial across
    /// slow links in a pool's start-up; the user hears of the likely cause at once.
    fn report_slow_dial(&mut self, i: usize) -> Option<Action> {
        let s = self.servers.get_mut(i)?;
        s.slow_at = None;
        let reason = format!(
            "no connection or handshake within {} s, still trying ({})",
            self.timing
                .slow_server_dial
                .unwrap_or_default()
                .as_secs_f64(),
            crate::transport::KEY_HINT
        );
        if s.last_error.as_deref() == Some(reason.as_str()) {
            return None;
        }
        s.last_error = Some(reason.clone());
        Some(Action::ServerError {
            addr: s.addr.clone(),
            reason,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: u64 = 20;

    fn timing() -> Timing {
        Timing {
            discover_interval: Duration::from_secs(5),
            max_discover_interval: Duration::from_secs(60),
            redial_interval: Duration::from_secs(3),
            max_redial_interval: Duration::from_secs(30),
            slow_server_dial: Some(Duration::from_secs(5)),
        }
    }

    fn addr(port: u16) -> Multiaddr {
        format!("/ip4/10.0.0.1/tcp/{port}").parse().unwrap()
    }

    fn conn(n: usize) -> ConnectionId {
        ConnectionId::new_unchecked(n)
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// Every action due at `now`.
    fn drain(d: &mut Discovery, now: Instant) -> Vec<Action> {
        std::iter::from_fn(|| d.poll_action(now)).collect()
    }

    /// A store with `servers` peer servers and `direct` direct peers, at `t0`.
    fn store(servers: u16, direct: u16, t0: Instant) -> Discovery {
        let servers: Vec<Multiaddr> = (0..servers).map(|i| addr(4000 + i)).collect();
        let direct: Vec<Multiaddr> = (0..direct).map(|i| addr(7000 + i)).collect();
        Discovery::new(timing(), PeerId::random(), &servers, &direct, t0)
    }

    /// Dials server `i` at `now` and connects it as `peer` over `id`; returns what followed.
    fn connect_server(
        d: &mut Discovery,
        i: usize,
        peer: PeerId,
        id: ConnectionId,
        now: Instant,
    ) -> Vec<Action> {
        d.on_connected(Some(Target::Server(ServerId(i))), peer, id, now);
        drain(d, now)
    }

    /// A store with one peer server, connected at `t0`: the store, the server, and what
    /// followed the connection.
    fn one_server_connected(t0: Instant) -> (Discovery, PeerId, Vec<Action>) {
        let mut d = store(1, 0, t0);
        drain(&mut d, t0);
        let server = PeerId::random();
        let after = connect_server(&mut d, 0, server, conn(1), t0);
        (d, server, after)
    }

    fn registers(actions: &[Action], server: usize) -> bool {
        actions
            .iter()
            .any(|a| matches!(a, Action::Register { server: ServerId(s), .. } if *s == server))
    }

    fn discovers(actions: &[Action], server: usize) -> bool {
        actions
            .iter()
            .any(|a| matches!(a, Action::Discover { server: ServerId(s), .. } if *s == server))
    }

    fn dials(actions: &[Action]) -> Vec<Target> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::DialAddress { target, .. } => Some(*target),
                Action::DialPeer { peer, .. } => Some(Target::Discovered(*peer)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_peer_server_dial_still_under_way_is_reported_once_and_goes_on() {
        let t0 = Instant::now();
        let mut d = store(1, 0, t0);
        assert_eq!(dials(&drain(&mut d, t0)), vec![Target::Server(ServerId(0))]);
        // Not before the slow-dial time, which is the next timeout.
        assert_eq!(d.poll_timeout(), Some(t0 + Duration::from_secs(5)));
        assert!(drain(&mut d, t0 + Duration::from_millis(4_999)).is_empty());
        let slow = drain(&mut d, t0 + Duration::from_secs(5));
        assert!(
            matches!(&slow[..], [Action::ServerError { reason, .. }]
                if reason.contains("still trying") && reason.contains(crate::transport::KEY_HINT)),
            "{slow:?}"
        );
        // Once: nothing more while the dial goes on, and no redial.
        assert_eq!(d.poll_timeout(), None);
        assert!(drain(&mut d, t0 + Duration::from_secs(15)).is_empty());
        // The dial then ends at its deadline: reported as a failure, redialed later, and
        // the next dial reported slow again only if the report changed in between.
        d.on_dial_failed(
            Target::Server(ServerId(0)),
            "timed out".into(),
            t0 + Duration::from_secs(20),
        );
        let failed = drain(&mut d, t0 + Duration::from_secs(20));
        assert!(
            matches!(&failed[..], [Action::ServerError { reason, .. }] if reason.contains("timed out"))
        );
        let redial = t0 + Duration::from_secs(23);
        assert_eq!(
            dials(&drain(&mut d, redial)),
            vec![Target::Server(ServerId(0))]
        );
        assert_eq!(drain(&mut d, redial + Duration::from_secs(5)).len(), 1);
        // A dial that connects in time is not reported.
        let mut quick = store(1, 0, t0);
        drain(&mut quick, t0);
        connect_server(&mut quick, 0, PeerId::random(), conn(1), t0 + secs(1.0));
        let later = drain(&mut quick, t0 + secs(6.0));
        assert!(
            !later
                .iter()
                .any(|a| matches!(a, Action::ServerError { .. })),
            "{later:?}"
        );
    }

    #[test]
    fn at_start_every_server_and_direct_peer_is_dialed_once() {
        let t0 = Instant::now();
        let mut d = store(2, 1, t0);
        let first = drain(&mut d, t0);
        assert_eq!(
            dials(&first),
            vec![
                Target::Server(ServerId(0)),
                Target::Server(ServerId(1)),
                Target::Direct(DirectId(0)),
            ]
        );
        // Later only the servers' dials are reported slow, once each.
        let later = drain(&mut d, t0 + secs(100.0));
        assert!(dials(&later).is_empty(), "dialed twice: {later:?}");
        assert_eq!(later.len(), 2, "{later:?}");
        assert_eq!(
            d.poll_timeout(),
            None,
            "nothing more is timed while dials are in flight"
        );
    }

    #[test]
    fn a_connected_server_is_registered_with_and_asked_at_once_then_renewed_at_half_the_ttl() {
        let t0 = Instant::now();
        let mut d = store(1, 0, t0);
        drain(&mut d, t0);
        let server = PeerId::random();
        let after = connect_server(&mut d, 0, server, conn(1), t0);
        assert!(registers(&after, 0) && discovers(&after, 0), "{after:?}");
        assert!(drain(&mut d, t0).is_empty());

        let t1 = t0 + secs(0.1);
        d.on_registered(server, TTL, t1);
        let after = drain(&mut d, t1);
        assert!(
            after.contains(&Action::ServerUp {
                addr: addr(4000),
                server,
                ttl: TTL
            }),
            "{after:?}"
        );
        // Registered: look at once for who is there.
        assert!(discovers(&after, 0), "{after:?}");
        // Next: the discovery round at +5 s, before the renewal at +10 s.
        assert_eq!(d.poll_timeout(), Some(t1 + secs(5.0)));
        assert!(
            !registers(&drain(&mut d, t1 + secs(9.9)), 0),
            "renewed early"
        );
        let renewal = drain(&mut d, t1 + secs(10.0));
        assert!(
            registers(&renewal, 0),
            "not renewed at half the TTL: {renewal:?}"
        );
        // In flight: not sent again, however late the answer.
        assert!(!registers(&drain(&mut d, t1 + secs(60.0)), 0));
        d.on_registered(server, TTL, t1 + secs(60.0));
        let again = drain(&mut d, t1 + secs(60.0));
        assert!(
            !again.iter().any(|a| matches!(a, Action::ServerUp { .. })),
            "a renewal is reported as a new registration: {again:?}"
        );
    }

    #[test]
    fn a_failing_server_backs_off_doubling_up_to_the_cap_and_a_registration_resets_it() {
        let t0 = Instant::now();
        let mut d = store(1, 0, t0);
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..7 {
            assert_eq!(
                dials(&drain(&mut d, now)),
                vec![Target::Server(ServerId(0))]
            );
            d.on_dial_failed(Target::Server(ServerId(0)), "refused".into(), now);
            drain(&mut d, now);
            let next = d.poll_timeout().unwrap();
            waits.push((next - now).as_secs());
            assert!(
                dials(&drain(&mut d, next - secs(0.001))).is_empty(),
                "redialed early"
            );
            now = next;
        }
        assert_eq!(waits, vec![3, 6, 12, 24, 30, 30, 30]);

        // Connected and registered: the next loss is retried after the first wait again.
        assert_eq!(dials(&drain(&mut d, now)).len(), 1);
        let server = PeerId::random();
        connect_server(&mut d, 0, server, conn(1), now);
        d.on_registered(server, TTL, now);
        drain(&mut d, now);
        d.on_connection_closed(server, conn(1), 0, "reset", now);
        drain(&mut d, now);
        assert_eq!(d.poll_timeout(), Some(now + secs(3.0)));
    }

    #[test]
    fn a_server_that_stays_down_is_reported_once_per_reason() {
        let t0 = Instant::now();
        let mut d = store(1, 0, t0);
        let mut now = t0;
        let mut reports = Vec::new();
        for reason in ["refused", "refused", "timeout", "timeout"] {
            drain(&mut d, now);
            d.on_dial_failed(Target::Server(ServerId(0)), reason.into(), now);
            reports.extend(drain(&mut d, now));
            now = d.poll_timeout().unwrap();
        }
        assert_eq!(
            reports,
            vec![
                Action::ServerError {
                    addr: addr(4000),
                    reason: "cannot connect: refused".into()
                },
                Action::ServerError {
                    addr: addr(4000),
                    reason: "cannot connect: timeout".into()
                },
            ]
        );
    }

    #[test]
    fn a_failed_server_does_not_hold_up_the_others() {
        let t0 = Instant::now();
        let mut d = store(2, 0, t0);
        drain(&mut d, t0);
        d.on_dial_failed(Target::Server(ServerId(0)), "refused".into(), t0);
        let server = PeerId::random();
        let after = connect_server(&mut d, 1, server, conn(1), t0);
        assert!(registers(&after, 1) && discovers(&after, 1), "{after:?}");
        assert!(!registers(&after, 0));
        d.on_registered(server, TTL, t0);
        drain(&mut d, t0);
        // The failed one is redialed on its own schedule, the other keeps its rounds.
        assert_eq!(d.poll_timeout(), Some(t0 + secs(3.0)));
        assert_eq!(
            dials(&drain(&mut d, t0 + secs(3.0))),
            vec![Target::Server(ServerId(0))]
        );
        assert!(discovers(&drain(&mut d, t0 + secs(5.0)), 1));
    }

    #[test]
    fn a_refused_registration_keeps_the_connection_and_is_retried_after_the_backoff() {
        let t0 = Instant::now();
        let (mut d, server, _) = one_server_connected(t0);
        d.on_register_failed(server, "registration refused (InvalidTtl)".into(), t0);
        let after = drain(&mut d, t0);
        assert!(
            matches!(&after[..], [Action::ServerError { reason, .. }] if reason.contains("InvalidTtl")),
            "{after:?}"
        );
        assert!(dials(&drain(&mut d, t0 + secs(2.9))).is_empty());
        assert!(!registers(&drain(&mut d, t0 + secs(2.9)), 0));
        assert!(registers(&drain(&mut d, t0 + secs(3.0)), 0));
    }

    #[test]
    fn a_registration_the_swarm_could_not_send_is_asked_again_shortly() {
        let t0 = Instant::now();
        let (mut d, _, after) = one_server_connected(t0);
        assert!(registers(&after, 0));
        d.on_register_not_sent(ServerId(0), t0);
        assert_eq!(d.poll_timeout(), Some(t0 + REGISTER_RETRY));
        assert!(registers(&drain(&mut d, t0 + REGISTER_RETRY), 0));
    }

    #[test]
    fn a_late_answer_on_a_lost_connection_registers_nothing() {
        let t0 = Instant::now();
        let (mut d, server, _) = one_server_connected(t0);
        d.on_connection_closed(server, conn(1), 0, "reset", t0);
        drain(&mut d, t0);
        d.on_registered(server, TTL, t0);
        assert!(drain(&mut d, t0).is_empty());
        assert_eq!(
            d.poll_timeout(),
            Some(t0 + secs(3.0)),
            "only the redial is timed"
        );
    }

    #[test]
    fn a_server_that_is_not_one_is_reported_and_not_registered_with() {
        let t0 = Instant::now();
        let mut d = store(1, 0, t0);
        drain(&mut d, t0);
        let server = PeerId::random();
        d.on_connected(Some(Target::Server(ServerId(0))), server, conn(1), t0);
        assert!(d.is_server(&server));
        d.on_server_error(server, "not a peer server".into());
        let after = drain(&mut d, t0);
        assert!(!registers(&after, 0), "{after:?}");
        assert!(
            matches!(&after[..], [Action::ServerError { .. }, ..]),
            "{after:?}"
        );
        assert_eq!(d.connected_servers().collect::<Vec<_>>(), vec![server]);
    }

    #[test]
    fn a_lost_direct_peer_is_redialed_with_backoff() {
        let t0 = Instant::now();
        let mut d = store(0, 1, t0);
        let direct = Target::Direct(DirectId(0));
        assert_eq!(dials(&drain(&mut d, t0)), vec![direct]);
        let peer = PeerId::random();
        d.on_connected(Some(direct), peer, conn(1), t0);
        assert_eq!(d.poll_timeout(), None, "connected: nothing to do");

        let t1 = t0 + secs(100.0);
        d.on_connection_closed(peer, conn(1), 0, "ping timeout", t1);
        assert_eq!(d.poll_timeout(), Some(t1 + secs(3.0)));
        assert_eq!(dials(&drain(&mut d, t1 + secs(3.0))), vec![direct]);
        d.on_dial_failed(direct, "refused".into(), t1 + secs(3.0));
        assert_eq!(
            drain(&mut d, t1 + secs(3.0)),
            vec![Action::DialError {
                addr: addr(7000).to_string(),
                peer: None,
                reason: "refused".into()
            }]
        );
        assert_eq!(d.poll_timeout(), Some(t1 + secs(3.0 + 6.0)), "no growth");
        assert_eq!(dials(&drain(&mut d, t1 + secs(9.0))), vec![direct]);
        d.on_connected(Some(direct), peer, conn(2), t1 + secs(9.0));
        d.on_connection_closed(peer, conn(2), 0, "closed", t1 + secs(10.0));
        assert_eq!(
            d.poll_timeout(),
            Some(t1 + secs(13.0)),
            "a connection resets the backoff"
        );
    }

    #[test]
    fn a_direct_peer_still_connected_through_its_own_dial_is_not_redialed() {
        let t0 = Instant::now();
        let mut d = store(0, 1, t0);
        let direct = Target::Direct(DirectId(0));
        drain(&mut d, t0);
        let peer = PeerId::random();
        d.on_connected(Some(direct), peer, conn(1), t0);
        d.on_connected(None, peer, conn(2), t0);
        // Ours is closed as the duplicate; theirs stays.
        d.on_connection_closed(peer, conn(1), 1, "duplicate", t0);
        assert_eq!(d.poll_timeout(), None);
        assert!(drain(&mut d, t0 + secs(100.0)).is_empty());
        // Another peer's connections do not count.
        d.on_connection_closed(PeerId::random(), conn(3), 0, "closed", t0 + secs(100.0));
        assert_eq!(d.poll_timeout(), None);
        d.on_connection_closed(peer, conn(2), 0, "closed", t0 + secs(100.0));
        assert_eq!(d.poll_timeout(), Some(t0 + secs(103.0)));
    }

    #[test]
    fn poll_timeout_is_the_earliest_deadline() {
        let t0 = Instant::now();
        let mut d = store(2, 1, t0);
        drain(&mut d, t0);
        // Server 0 registered (renewal +10 s, discovery +5 s), server 1 failed at +1 s
        // (redial +4 s), the direct peer failed at +0.5 s (redial +3.5 s).
        let s0 = PeerId::random();
        connect_server(&mut d, 0, s0, conn(1), t0);
        d.on_registered(s0, TTL, t0);
        drain(&mut d, t0);
        assert_eq!(d.poll_timeout(), Some(t0 + secs(5.0)));
        d.on_dial_failed(
            Target::Server(ServerId(1)),
            "refused".into(),
            t0 + secs(1.0),
        );
        assert_eq!(d.poll_timeout(), Some(t0 + secs(4.0)));
        d.on_dial_failed(
            Target::Direct(DirectId(0)),
            "refused".into(),
            t0 + secs(0.5),
        );
        assert_eq!(d.poll_timeout(), Some(t0 + secs(3.5)));
        drain(&mut d, t0 + secs(1.0));
        // Each deadline in turn, and nothing between them; dials stay in flight (server 1's
        // redial at 4 s is reported slow at 9 s).
        let mut seen = Vec::new();
        while let Some(next) = d.poll_timeout() {
            if next > t0 + secs(10.0) {
                break;
            }
            assert!(drain(&mut d, next - secs(0.001)).is_empty());
            let actions = drain(&mut d, next);
            assert!(!actions.is_empty(), "woken at {next:?} for nothing");
            seen.push((next - t0).as_secs_f64());
        }
        assert_eq!(seen, vec![3.5, 4.0, 5.0, 9.0, 10.0]);
    }

    #[test]
    fn a_discovered_agent_is_dialed_once_and_after_a_failure_only_when_its_backoff_ends() {
        let t0 = Instant::now();
        let mut d = store(2, 0, t0);
        drain(&mut d, t0);
        let (s0, s1) = (PeerId::random(), PeerId::random());
        connect_server(&mut d, 0, s0, conn(1), t0);
        connect_server(&mut d, 1, s1, conn(2), t0);
        let local = d.local;
        let agent = PeerId::random();
        let cookie = || Cookie::for_all_namespaces();
        let regs = |peers: &[PeerId]| -> Vec<(PeerId, Vec<Multiaddr>)> {
            peers.iter().map(|p| (*p, vec![addr(9000)])).collect()
        };
        // Itself, a server, and the same agent twice from two servers: one dial.
        d.on_discovered(s0, cookie(), regs(&[local, s1, agent, agent]), t0);
        d.on_discovered(s1, cookie(), regs(&[agent]), t0);
        assert_eq!(dials(&drain(&mut d, t0)), vec![Target::Discovered(agent)]);

        d.on_dial_failed(Target::Discovered(agent), "refused".into(), t0);
        assert!(matches!(
            &drain(&mut d, t0)[..],
            [Action::DialError { peer: Some(p), .. }] if *p == agent
        ));
        d.on_discovered(s0, cookie(), regs(&[agent]), t0 + secs(2.9));
        assert!(
            dials(&drain(&mut d, t0 + secs(2.9))).is_empty(),
            "dialed while backing off"
        );
        d.on_discovered(s0, cookie(), regs(&[agent]), t0 + secs(3.0));
        assert_eq!(
            dials(&drain(&mut d, t0 + secs(3.0))),
            vec![Target::Discovered(agent)]
        );
        // A second failure waits twice as long.
        d.on_dial_failed(Target::Discovered(agent), "refused".into(), t0 + secs(3.0));
        drain(&mut d, t0 + secs(3.0));
        d.on_discovered(s0, cookie(), regs(&[agent]), t0 + secs(8.9));
        assert!(dials(&drain(&mut d, t0 + secs(8.9))).is_empty());
        d.on_discovered(s0, cookie(), regs(&[agent]), t0 + secs(9.0));
        assert_eq!(dials(&drain(&mut d, t0 + secs(9.0))).len(), 1);

        // Connected (even by its own dial to us): not dialed while a connection remains.
        d.on_connected(None, agent, conn(3), t0 + secs(9.5));
        d.on_dial_skipped(agent);
        d.on_connected(None, agent, conn(4), t0 + secs(9.5));
        d.on_connection_closed(agent, conn(3), 1, "duplicate", t0 + secs(9.6));
        d.on_discovered(s0, cookie(), regs(&[agent]), t0 + secs(10.0));
        assert!(
            dials(&drain(&mut d, t0 + secs(10.0))).is_empty(),
            "dialed a connected agent"
        );
        d.on_connection_closed(agent, conn(4), 0, "closed", t0 + secs(11.0));
        d.on_discovered(s0, cookie(), regs(&[agent]), t0 + secs(11.0));
        assert_eq!(
            dials(&drain(&mut d, t0 + secs(11.0))),
            vec![Target::Discovered(agent)],
            "a connection clears the backoff"
        );
    }

    /// The driver's rotation closes the connection to a far agent: the agent is not dialed
    /// again when discovered anew until the longest redial wait (30 s here) has passed. Peer
    /// servers and direct peers are never dropped.
    #[test]
    fn a_dropped_agent_rests_before_it_is_dialed_again_and_servers_and_direct_peers_stay() {
        let t0 = Instant::now();
        let mut d = store(1, 1, t0);
        drain(&mut d, t0);
        let s0 = PeerId::random();
        connect_server(&mut d, 0, s0, conn(1), t0);
        let direct = PeerId::random();
        d.on_connected(Some(Target::Direct(DirectId(0))), direct, conn(2), t0);
        drain(&mut d, t0);
        assert!(!d.on_dropped(s0, t0), "a peer server was dropped");
        assert!(!d.on_dropped(direct, t0), "a direct peer was dropped");
        assert!(!d.on_dropped(d.local, t0));

        let agent = PeerId::random();
        let regs = || vec![(agent, vec![addr(9000)])];
        d.on_connected(None, agent, conn(3), t0);
        assert!(d.on_dropped(agent, t0 + secs(1.0)));
        d.on_connection_closed(agent, conn(3), 0, "dropped", t0 + secs(1.0));
        d.on_discovered(s0, Cookie::for_all_namespaces(), regs(), t0 + secs(30.9));
        assert!(
            dials(&drain(&mut d, t0 + secs(30.9))).is_empty(),
            "redialed while resting"
        );
        d.on_discovered(s0, Cookie::for_all_namespaces(), regs(), t0 + secs(31.0));
        assert_eq!(
            dials(&drain(&mut d, t0 + secs(31.0))),
            vec![Target::Discovered(agent)]
        );
    }

    #[test]
    fn a_skipped_dial_leaves_no_backoff() {
        let t0 = Instant::now();
        let (mut d, s0, _) = one_server_connected(t0);
        let agent = PeerId::random();
        let regs = vec![(agent, vec![addr(9000)])];
        d.on_discovered(s0, Cookie::for_all_namespaces(), regs.clone(), t0);
        assert_eq!(dials(&drain(&mut d, t0)).len(), 1);
        d.on_dial_skipped(agent);
        d.on_discovered(s0, Cookie::for_all_namespaces(), regs, t0);
        assert_eq!(dials(&drain(&mut d, t0)), vec![Target::Discovered(agent)]);
    }

    /// Issue 42: with a dial target of 3, a round of 10 agents dials 3 (the same 3 at every
    /// round for this node, another 3 for another node), no round comes at the target, and
    /// a lost agent opens room for one more. Agents that dial in count.
    #[test]
    fn with_a_dial_target_only_that_many_agents_are_dialed_in_the_nodes_own_order() {
        let t0 = Instant::now();
        let target = std::num::NonZeroUsize::new(3);
        let (d, s0, _) = one_server_connected(t0);
        let mut d = d.with_dial_agents(target);
        let pool: Vec<PeerId> = (0..10).map(|_| PeerId::random()).collect();
        let cookie = Cookie::for_all_namespaces();
        d.on_discovered(s0, cookie.clone(), regs_of(&pool), t0);
        let first = dials(&drain(&mut d, t0));
        assert_eq!(first.len(), 3, "{first:?}");
        // The same three from a store of the same node given the list in another order.
        let (again, s0b, _) = one_server_connected(t0);
        let mut again = again.with_dial_agents(target);
        again.local = d.local;
        let reversed: Vec<PeerId> = pool.iter().rev().copied().collect();
        again.on_discovered(s0b, cookie.clone(), regs_of(&reversed), t0);
        assert_eq!(dials(&drain(&mut again, t0)), first);
        // Another node's three differ (10 choose 3: equal by chance once in 120; the ids
        // are random, so try a few nodes).
        let differs = (0..4).any(|_| {
            let (other, s, _) = one_server_connected(t0);
            let mut other = other.with_dial_agents(target);
            other.on_discovered(s, cookie.clone(), regs_of(&pool), t0);
            dials(&drain(&mut other, t0)) != first
        });
        assert!(differs, "every node dials the same agents");

        // Two connect, one more dials in: 4 agents, above the target; the third dial is
        // skipped by the swarm. No round comes while the node has its target (it could
        // dial nobody it found).
        let ids: Vec<PeerId> = first
            .iter()
            .map(|t| match t {
                Target::Discovered(p) => *p,
                other => panic!("not an agent: {other:?}"),
            })
            .collect();
        d.on_connected(Some(Target::Discovered(ids[0])), ids[0], conn(10), t0);
        d.on_connected(Some(Target::Discovered(ids[1])), ids[1], conn(11), t0);
        d.on_dial_skipped(ids[2]);
        let incoming: Vec<PeerId> = pool
            .iter()
            .filter(|p| !ids.contains(p))
            .take(2)
            .copied()
            .collect();
        d.on_connected(None, incoming[0], conn(12), t0);
        d.on_connected(None, incoming[1], conn(13), t0);
        drain(&mut d, t0);
        let mut t = t0;
        let mut rounds = Vec::new();
        while t < t0 + secs(40.0) {
            let actions = drain(&mut d, t);
            if discovers(&actions, 0) {
                rounds.push((t - t0).as_secs_f64());
                d.on_discovered(s0, cookie.clone(), regs_of(&pool), t);
            }
            assert!(dials(&drain(&mut d, t)).is_empty(), "dialed at the target");
            t += secs(0.5);
        }
        assert_eq!(rounds, Vec::<f64>::new());

        // Two agents go: room for one (3 - 2 connected); the next round, soon, dials one.
        d.on_connection_closed(ids[0], conn(10), 0, "gone", t);
        d.on_connection_closed(incoming[0], conn(12), 0, "gone", t);
        let mut dialed = Vec::new();
        let until = t + secs(6.0);
        while t < until && dialed.is_empty() {
            let actions = drain(&mut d, t);
            if discovers(&actions, 0) {
                d.on_discovered(s0, cookie.clone(), regs_of(&pool), t);
                dialed = dials(&drain(&mut d, t));
            }
            t += secs(0.5);
        }
        assert_eq!(dialed.len(), 1, "{dialed:?}");
    }

    /// Issue 42: rounds that find no agent to connect to come ever less often (5, 10, 20,
    /// 40, then every 60 s), renewals do not bring them back, and a round that finds one,
    /// or an agent's connection lost, brings them back to every 5 s.
    #[test]
    fn discovery_rounds_that_find_nothing_new_back_off() {
        let t0 = Instant::now();
        let (mut d, s0, first) = one_server_connected(t0);
        assert!(discovers(&first, 0));
        let known = PeerId::random();
        d.on_connected(None, known, conn(9), t0);
        let cookie = Cookie::for_all_namespaces();
        // Each round answers only the agent already connected (it renewed).
        let mut rounds = Vec::new();
        let mut t = t0;
        while t < t0 + secs(300.0) {
            let actions = drain(&mut d, t);
            if discovers(&actions, 0) {
                rounds.push((t - t0).as_secs_f64());
                d.on_discovered(s0, cookie.clone(), regs_of(&[known]), t);
            }
            if registers(&actions, 0) {
                d.on_registered(s0, TTL, t);
            }
            assert!(dials(&drain(&mut d, t)).is_empty());
            t += secs(0.5);
        }
        let gaps: Vec<f64> = rounds.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(&gaps[..5], &[5.0, 10.0, 20.0, 40.0, 60.0], "{rounds:?}");
        assert!(gaps[5..].iter().all(|g| *g == 60.0), "{rounds:?}");
        // A round that finds a new agent: dialed, and the next round 5 s later.
        let newcomer = PeerId::random();
        let t1 = rounds.last().map_or(t0, |r| t0 + secs(*r));
        d.on_discovered(s0, cookie.clone(), regs_of(&[known, newcomer]), t1);
        assert_eq!(
            dials(&drain(&mut d, t1)),
            vec![Target::Discovered(newcomer)]
        );
        d.on_connected(Some(Target::Discovered(newcomer)), newcomer, conn(10), t1);
        // The next round 5 s later; quiet again, backing off from 5 s; then an agent's last
        // connection closes.
        assert!(!discovers(&drain(&mut d, t1 + secs(4.9)), 0));
        assert!(discovers(&drain(&mut d, t1 + secs(5.0)), 0));
        d.on_discovered(s0, cookie.clone(), regs_of(&[known]), t1 + secs(5.0));
        assert!(discovers(&drain(&mut d, t1 + secs(15.0)), 0));
        d.on_discovered(s0, cookie, regs_of(&[known]), t1 + secs(15.0));
        d.on_connection_closed(known, conn(9), 0, "reset", t1 + secs(16.0));
        // Not at +35 s (20 s after the last round) but 5 s after the loss.
        assert!(!discovers(&drain(&mut d, t1 + secs(20.9)), 0));
        assert!(discovers(&drain(&mut d, t1 + secs(21.0)), 0));
    }

    /// Issue 42, an idle agent's upkeep: a node connected to its dial target asks for no
    /// rounds at all (each answer is a signed record per agent that renewed, checked for
    /// nothing it could dial), nor wakes for one; a connection lost, or a dial that fails,
    /// brings them back.
    #[test]
    fn a_node_at_its_dial_target_asks_for_no_discovery_rounds_until_it_has_room() {
        let t0 = Instant::now();
        let (d, s0, first) = one_server_connected(t0);
        let mut d = d.with_dial_agents(std::num::NonZeroUsize::new(2));
        assert!(discovers(&first, 0), "the first round goes out: {first:?}");
        assert!(registers(&first, 0));
        d.on_registered(s0, TTL, t0);
        let (a, b, c) = (PeerId::random(), PeerId::random(), PeerId::random());
        let cookie = Cookie::for_all_namespaces();
        d.on_discovered(s0, cookie.clone(), regs_of(&[a, b]), t0);
        assert_eq!(
            dials(&drain(&mut d, t0)).len(),
            2,
            "room for two: both dialed"
        );
        d.on_connected(Some(Target::Discovered(a)), a, conn(10), t0);
        d.on_connected(Some(Target::Discovered(b)), b, conn(11), t0);
        // Full: no round for ten minutes, and no timer for one (registrations renew).
        let mut t = t0;
        while t < t0 + secs(600.0) {
            t += secs(0.5);
            let actions = drain(&mut d, t);
            assert!(!discovers(&actions, 0), "a round at {:?}", t - t0);
            if registers(&actions, 0) {
                d.on_registered(s0, TTL, t);
            }
        }
        let next = d.poll_timeout();
        assert!(
            next.is_some_and(|n| n > t),
            "only the renewal is timed: {next:?}"
        );
        // b's connection is lost: a round at once (the last one is long past), and c is
        // dialed.
        d.on_connection_closed(b, conn(11), 0, "reset", t);
        assert!(discovers(&drain(&mut d, t), 0));
        d.on_discovered(s0, cookie.clone(), regs_of(&[a, c]), t);
        assert_eq!(dials(&drain(&mut d, t)), vec![Target::Discovered(c)]);
        // Full again while c is dialed; c's dial fails: room again, and the next round
        // comes when due (5 s after the last).
        assert!(!discovers(&drain(&mut d, t + secs(5.0)), 0));
        d.on_dial_failed(Target::Discovered(c), "refused".into(), t + secs(6.0));
        assert!(discovers(&drain(&mut d, t + secs(6.0)), 0));
    }

    fn regs_of(peers: &[PeerId]) -> Vec<(PeerId, Vec<Multiaddr>)> {
        peers.iter().map(|p| (*p, vec![addr(9000)])).collect()
    }

    #[test]
    fn discovery_rounds_use_the_last_cookie_until_a_failure() {
        let t0 = Instant::now();
        let (mut d, s0, first) = one_server_connected(t0);
        assert!(first
            .iter()
            .any(|a| matches!(a, Action::Discover { cookie: None, .. })));
        let cookie = Cookie::for_all_namespaces();
        d.on_discovered(s0, cookie.clone(), Vec::new(), t0);
        let next = drain(&mut d, t0 + secs(5.0));
        assert!(
            next.iter()
                .any(|a| matches!(a, Action::Discover { cookie: Some(c), .. } if *c == cookie)),
            "{next:?}"
        );
        assert_eq!(d.on_discover_failed(s0), Some(&addr(4000)));
        // The round after the empty one came 10 s later (rounds that find nothing back off).
        assert!(drain(&mut d, t0 + secs(14.9)).is_empty());
        let after = drain(&mut d, t0 + secs(15.0));
        assert!(
            after
                .iter()
                .any(|a| matches!(a, Action::Discover { cookie: None, .. })),
            "{after:?}"
        );
    }
}
