//! Dial on request: a message for an agent this node is not connected to opens a connection
//! to it, bounded and rate-limited, as a pure store tested without a swarm.
//!
//! Why: the network keeps connections to the agents discovery found, up to its cap
//! ([`crate::limits::DEFAULT_MAX_CONNECTIONS`]); in a larger pool, and after the driver closed
//! connections of no use to make room (`ios-agent`'s `connections.rs`), the agent core still
//! names agents it is not connected to: the origin of a steal forwarded to it (its answer,
//! `StealAccepted` or `StealExhausted`), the manager a member names (`StealRedirect`), the
//! destination of an NSc2c move order whose host is unknown (`Introduce`). Before this store
//! such a message was dropped ("not connected"). Whom to talk to and when stays the core's
//! decision (an `Action::Send`); this store decides only the mechanics: whether a dial may
//! start now, what waits for it, and when the wait ends.
//!
//! Rules, all of them bounds:
//! - **Addresses** come from the peer servers' registrations and, for an agent that dialed
//!   this node and is not registered where it looks, identify ([`OnRequest::learn`]); at most [`DialPolicy::max_known`] agents are kept
//!   (the least recently learnt goes), [`MAX_ADDRS_PER_AGENT`] addresses each. An agent with
//!   no known address is refused ([`Undelivered::NoAddress`]).
//! - **The cap**: no dial when the node's established connections have reached its cap
//!   ([`Undelivered::AtCap`]). No eviction here: the driver's rotation closes connections of
//!   no use once within its reserve of the cap, so a later request finds room; closing a
//!   connection in use for one that may never answer would trade a sure peer for a maybe.
//! - **Rate**: a token bucket, [`DialPolicy::burst`] dials at once and one more every
//!   [`DialPolicy::refill`] ([`Undelivered::RateLimited`]); at most
//!   [`DialPolicy::max_dialing`] agents dialed on request at a time
//!   ([`Undelivered::TooManyDialing`]).
//! - **The wait**: messages for an agent being dialed wait, at most
//!   [`DialPolicy::max_queued`] per agent ([`Undelivered::QueueFull`]) and at most
//!   [`DialPolicy::max_wait`] ([`Undelivered::TimedOut`]); they go out on connection
//!   ([`OnRequest::on_connected`]) or come back with the dial's failure
//!   ([`Undelivered::DialFailed`]), never kept longer.
//! - **Backoff**: an agent whose dial failed (refused: another pool key; dead; unreachable)
//!   is not dialed again before its backoff ends, [`DialPolicy::backoff`] doubling up to
//!   [`DialPolicy::max_backoff`] with each failure in a row ([`Undelivered::BackingOff`]); a
//!   connection resets it.
//!
//! Generic over what waits (`T`): the network task queues its outgoing requests, the tests
//! plain numbers.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};

/// Addresses kept per agent (registrations list one per listen address).
pub const MAX_ADDRS_PER_AGENT: usize = 8;

/// The bounds of dials on request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DialPolicy {
    /// Dials that may start at once.
    pub burst: u32,
    /// One more dial allowed after each such interval.
    pub refill: Duration,
    /// Agents dialed on request at the same time.
    pub max_dialing: usize,
    /// Messages waiting per agent being dialed.
    pub max_queued: usize,
    /// Longest wait of a message for its agent's connection.
    pub max_wait: Duration,
    /// Wait after a first failed dial before the agent may be dialed again.
    pub backoff: Duration,
    /// Longest wait after failures in a row.
    pub max_backoff: Duration,
    /// Agents whose addresses are kept.
    pub max_known: usize,
}

impl Default for DialPolicy {
    /// 8 dials at once, then 4 a second; 16 agents dialed at a time, 16 messages waiting
    /// for each, at most 10 s (a dial over 150 ms takes well under a second; a handshake that
    /// stalls is cut by the 10 s handshake timeout); a failed agent left alone 3 s, doubling
    /// to 60 s; the addresses of 4,096 agents (under 1 MB).
    fn default() -> Self {
        DialPolicy {
            burst: 8,
            refill: Duration::from_millis(250),
            max_dialing: 16,
            max_queued: 16,
            max_wait: Duration::from_secs(10),
            backoff: Duration::from_secs(3),
            max_backoff: Duration::from_secs(60),
            max_known: 4096,
        }
    }
}

/// Why a message for an agent not connected was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Undelivered {
    /// The agent is not connected and no address of it is known (it did not register with a
    /// peer server this node asked, nor connected to this node lately).
    #[error("agent not connected, and no address of it known")]
    NoAddress,
    /// The node's connections are at their cap.
    #[error("agent not connected, and the connection cap ({cap}) is reached")]
    AtCap {
        /// The cap.
        cap: usize,
    },
    /// Too many dials on request lately.
    #[error("agent not connected, and too many dials on request lately (at most {burst} at once, then one every {refill:?})")]
    RateLimited {
        /// The policy's burst.
        burst: u32,
        /// The policy's refill interval.
        refill: Duration,
    },
    /// Too many agents being dialed on request now.
    #[error("agent not connected, and {0} agents are being dialed on request already")]
    TooManyDialing(usize),
    /// Too many messages already wait for this agent.
    #[error("agent being dialed, and {0} messages already wait for it")]
    QueueFull(usize),
    /// A dial to the agent failed lately: not tried again yet.
    #[error("agent not connected; its last dial failed ({reason}): not dialed again for {left:?}")]
    BackingOff {
        /// What is left of the backoff.
        left: Duration,
        /// Why the last dial failed.
        reason: String,
    },
    /// The dial failed.
    #[error("dial on request failed: {0}")]
    DialFailed(String),
    /// No connection came within the bound.
    #[error("agent not connected within {0:?} of the dial on request")]
    TimedOut(Duration),
}

/// What to do with a message for an agent not connected.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict<T> {
    /// Dial the agent at these addresses (the message waits; report the dial's outcome
    /// with [`OnRequest::on_connected`], [`OnRequest::on_dial_failed`] or
    /// [`OnRequest::on_dial_skipped`]).
    Dial(Vec<Multiaddr>),
    /// A dial is under way: the message waits for it.
    Waits,
    /// Not delivered.
    Refused(T, Undelivered),
}

#[derive(Debug)]
struct Known {
    addrs: Vec<Multiaddr>,
    learnt: Instant,
}

#[derive(Debug)]
struct Waiting<T> {
    /// The messages and until when each may wait.
    queue: VecDeque<(T, Instant)>,
    /// For a dial asked with no message ([`OnRequest::connect`]): until when it counts as
    /// under way with nothing waiting.
    held_until: Option<Instant>,
}

#[derive(Debug)]
struct Failed {
    until: Instant,
    failures: u32,
    reason: String,
}

/// Dials on request; see the module documentation.
#[derive(Debug)]
pub struct OnRequest<T> {
    policy: DialPolicy,
    known: HashMap<PeerId, Known>,
    dialing: HashMap<PeerId, Waiting<T>>,
    failed: HashMap<PeerId, Failed>,
    tokens: u32,
    /// When the bucket last gained a token (or was full).
    refilled: Instant,
}

impl<T> OnRequest<T> {
    /// A store with a full bucket at `now`.
    pub fn new(policy: DialPolicy, now: Instant) -> Self {
        OnRequest {
            policy,
            known: HashMap::new(),
            dialing: HashMap::new(),
            failed: HashMap::new(),
            tokens: policy.burst,
            refilled: now,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &DialPolicy {
        &self.policy
    }

    /// Addresses of `peer` (a registration, or identify's listen addresses). Only
    /// TCP addresses over IP are kept, at most [`MAX_ADDRS_PER_AGENT`]; they replace the
    /// ones known. When the book is full, the agent learnt longest ago makes room.
    pub fn learn(
        &mut self,
        peer: PeerId,
        addrs: impl IntoIterator<Item = Multiaddr>,
        now: Instant,
    ) {
        let addrs: Vec<Multiaddr> = addrs
            .into_iter()
            .filter(dialable)
            .take(MAX_ADDRS_PER_AGENT)
            .collect();
        if addrs.is_empty() || self.policy.max_known == 0 {
            return;
        }
        if !self.known.contains_key(&peer) && self.known.len() >= self.policy.max_known {
            if let Some(oldest) = self
                .known
                .iter()
                .min_by_key(|(p, k)| (k.learnt, **p))
                .map(|(p, _)| *p)
            {
                self.known.remove(&oldest);
            }
        }
        self.known.insert(peer, Known { addrs, learnt: now });
    }

    /// The addresses known of `peer`.
    pub fn addresses(&self, peer: &PeerId) -> Option<&[Multiaddr]> {
        self.known.get(peer).map(|k| k.addrs.as_slice())
    }

    /// How many agents' addresses are known.
    pub fn known_len(&self) -> usize {
        self.known.len()
    }

    /// A message for `peer`, which is not connected; the node holds `established`
    /// connections of at most `cap`.
    pub fn request(
        &mut self,
        peer: PeerId,
        message: T,
        established: usize,
        cap: usize,
        now: Instant,
    ) -> Verdict<T> {
        let deadline = now + self.policy.max_wait;
        if let Some(w) = self.dialing.get_mut(&peer) {
            if w.queue.len() >= self.policy.max_queued {
                return Verdict::Refused(message, Undelivered::QueueFull(w.queue.len()));
            }
            w.queue.push_back((message, deadline));
            return Verdict::Waits;
        }
        match self.admit(&peer, established, cap, now) {
            Err(why) => Verdict::Refused(message, why),
            Ok(addrs) => {
                self.dialing.insert(
                    peer,
                    Waiting {
                        queue: VecDeque::from([(message, deadline)]),
                        held_until: None,
                    },
                );
                Verdict::Dial(addrs)
            }
        }
    }

    /// A connection to `peer` wanted with no message to send (an agent found by its host,
    /// [`crate::by_host`]): the addresses to dial now, `None` when a dial to it is under
    /// way, or why not (the same bounds as [`OnRequest::request`]: backoff, known address,
    /// cap, agents dialed at a time, rate). Report the outcome as for a message's dial.
    pub fn connect(
        &mut self,
        peer: PeerId,
        established: usize,
        cap: usize,
        now: Instant,
    ) -> Result<Option<Vec<Multiaddr>>, Undelivered> {
        if self.dialing.contains_key(&peer) {
            return Ok(None);
        }
        let addrs = self.admit(&peer, established, cap, now)?;
        self.dialing.insert(
            peer,
            Waiting {
                queue: VecDeque::new(),
                held_until: Some(now + self.policy.max_wait),
            },
        );
        Ok(Some(addrs))
    }

    /// Whether a dial to `peer`, not under way, may start now; takes its rate token.
    fn admit(
        &mut self,
        peer: &PeerId,
        established: usize,
        cap: usize,
        now: Instant,
    ) -> Result<Vec<Multiaddr>, Undelivered> {
        if let Some(f) = self.failed.get(peer) {
            if now < f.until {
                let why = Undelivered::BackingOff {
                    left: f.until - now,
                    reason: f.reason.clone(),
                };
                return Err(why);
            }
        }
        let Some(addrs) = self.known.get(peer).map(|k| k.addrs.clone()) else {
            return Err(Undelivered::NoAddress);
        };
        if established >= cap {
            return Err(Undelivered::AtCap { cap });
        }
        if self.dialing.len() >= self.policy.max_dialing {
            return Err(Undelivered::TooManyDialing(self.dialing.len()));
        }
        self.refill(now);
        if self.tokens == 0 {
            let why = Undelivered::RateLimited {
                burst: self.policy.burst,
                refill: self.policy.refill,
            };
            return Err(why);
        }
        self.tokens -= 1;
        Ok(addrs)
    }

    /// `peer` is connected (by any dial, or it dialed this node): the messages that waited
    /// for it, oldest first, to send now. Its backoff is over.
    pub fn on_connected(&mut self, peer: &PeerId) -> Vec<T> {
        self.failed.remove(peer);
        self.dialing
            .remove(peer)
            .map(|w| w.queue.into_iter().map(|(m, _)| m).collect())
            .unwrap_or_default()
    }

    /// The dial to `peer` failed: the messages that waited, to report undelivered; the
    /// agent backs off.
    pub fn on_dial_failed(&mut self, peer: &PeerId, reason: &str, now: Instant) -> Vec<T> {
        let failures = self.failed.get(peer).map_or(0, |f| f.failures);
        let wait = self
            .policy
            .backoff
            .saturating_mul(1u32 << failures.min(20))
            .min(self.policy.max_backoff.max(self.policy.backoff));
        self.failed.insert(
            *peer,
            Failed {
                until: now + wait,
                failures: failures.saturating_add(1),
                reason: reason.to_owned(),
            },
        );
        self.forget_failures(now);
        self.dialing
            .remove(peer)
            .map(|w| w.queue.into_iter().map(|(m, _)| m).collect())
            .unwrap_or_default()
    }

    /// The swarm did not dial `peer` because another dial to it is under way: the messages
    /// keep waiting for that one (or their bound). Nothing failed, so no backoff, and the
    /// rate token is given back.
    pub fn on_dial_skipped(&mut self, _peer: &PeerId) {
        self.tokens = (self.tokens + 1).min(self.policy.burst);
    }

    /// Whether a dial on request to `peer` is under way.
    pub fn is_dialing(&self, peer: &PeerId) -> bool {
        self.dialing.contains_key(peer)
    }

    /// The messages whose wait ended by `now`, with their agent. An agent none of whose
    /// messages wait any more is no longer counted as dialed on request (its dial may still
    /// end later: a connection then simply finds nothing waiting).
    pub fn expire(&mut self, now: Instant) -> Vec<(PeerId, T)> {
        let mut out = Vec::new();
        self.dialing.retain(|peer, w| {
            while w.queue.front().is_some_and(|(_, until)| *until <= now) {
                if let Some((m, _)) = w.queue.pop_front() {
                    out.push((*peer, m));
                }
            }
            !w.queue.is_empty() || w.held_until.is_some_and(|t| now < t)
        });
        out
    }

    /// When the next message's wait ends, if any waits.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.dialing
            .values()
            .filter_map(|w| w.queue.front().map(|(_, until)| *until).or(w.held_until))
            .min()
    }

    /// Adds the tokens earned since the last refill.
    fn refill(&mut self, now: Instant) {
        if self.tokens >= self.policy.burst {
            self.refilled = now;
            return;
        }
        let refill = self.policy.refill.max(Duration::from_millis(1));
        let earned = now.saturating_duration_since(self.refilled).as_nanos() / refill.as_nanos();
        if earned == 0 {
            return;
        }
        let earned = u32::try_from(earned).unwrap_or(u32::MAX);
        self.tokens = self.tokens.saturating_add(earned).min(self.policy.burst);
        self.refilled = if self.tokens >= self.policy.burst {
            now
        } else {
            self.refilled + refill * earned
        };
    }

    /// Forgets failures whose backoff ended long ago, so the table stays as small as the
    /// agents dialed lately.
    fn forget_failures(&mut self, now: Instant) {
        let rest = self.policy.max_backoff.max(self.policy.backoff);
        self.failed.retain(|_, f| now < f.until + rest);
    }
}

/// Whether the swarm can dial this address: TCP over an IP address (no DNS, no relay).
fn dialable(addr: &Multiaddr) -> bool {
    let mut parts = addr.iter();
    matches!(parts.next(), Some(Protocol::Ip4(_) | Protocol::Ip6(_)))
        && matches!(parts.next(), Some(Protocol::Tcp(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> Multiaddr {
        format!("/ip4/10.0.0.1/tcp/{port}").parse().expect("valid")
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// A store with `n` agents known, and those agents.
    fn store(n: u16, policy: DialPolicy, now: Instant) -> (OnRequest<u32>, Vec<PeerId>) {
        let mut d = OnRequest::new(policy, now);
        let peers: Vec<PeerId> = (0..n).map(|_| PeerId::random()).collect();
        for (i, p) in peers.iter().enumerate() {
            d.learn(*p, [addr(7000 + i as u16)], now);
        }
        (d, peers)
    }

    #[test]
    fn a_known_agent_is_dialed_and_its_messages_go_out_on_connection() {
        let t0 = Instant::now();
        let (mut d, peers) = store(1, DialPolicy::default(), t0);
        let b = peers[0];
        assert_eq!(
            d.request(b, 1, 10, 512, t0),
            Verdict::Dial(vec![addr(7000)])
        );
        // A second message waits for the same dial: no second dial.
        assert_eq!(d.request(b, 2, 10, 512, t0), Verdict::Waits);
        assert!(d.is_dialing(&b));
        assert_eq!(d.poll_timeout(), Some(t0 + secs(10.0)));
        assert_eq!(d.on_connected(&b), vec![1, 2]);
        assert!(!d.is_dialing(&b));
        assert_eq!(d.poll_timeout(), None);
    }

    #[test]
    fn a_connection_wanted_with_no_message_is_dialed_once_held_for_the_wait_and_bounded_alike() {
        let t0 = Instant::now();
        let (mut d, peers) = store(2, DialPolicy::default(), t0);
        let b = peers[0];
        assert_eq!(d.connect(b, 10, 512, t0), Ok(Some(vec![addr(7000)])));
        // Under way: not dialed again, and a message for it waits for that dial.
        assert_eq!(d.connect(b, 10, 512, t0), Ok(None));
        assert_eq!(d.request(b, 1, 10, 512, t0), Verdict::Waits);
        assert_eq!(d.on_connected(&b), vec![1]);
        // Held while its dial may still end, then no longer counted as under way.
        let c = peers[1];
        assert!(matches!(d.connect(c, 10, 512, t0), Ok(Some(_))));
        assert_eq!(d.poll_timeout(), Some(t0 + secs(10.0)));
        assert!(d.expire(t0 + secs(9.9)).is_empty());
        assert!(d.is_dialing(&c));
        assert!(d.expire(t0 + secs(10.0)).is_empty());
        assert!(!d.is_dialing(&c));
        // The same bounds as a message's dial: unknown, at the cap, backing off.
        assert_eq!(
            d.connect(PeerId::random(), 10, 512, t0),
            Err(Undelivered::NoAddress)
        );
        assert_eq!(
            d.connect(c, 512, 512, t0),
            Err(Undelivered::AtCap { cap: 512 })
        );
        assert!(d.on_dial_failed(&c, "refused", t0).is_empty());
        assert!(matches!(
            d.connect(c, 10, 512, t0 + secs(1.0)),
            Err(Undelivered::BackingOff { .. })
        ));
    }

    #[test]
    fn an_unknown_agent_is_refused_with_no_address() {
        let t0 = Instant::now();
        let (mut d, _) = store(0, DialPolicy::default(), t0);
        let stranger = PeerId::random();
        assert_eq!(
            d.request(stranger, 7, 0, 512, t0),
            Verdict::Refused(7, Undelivered::NoAddress)
        );
        // Addresses the swarm cannot dial are not learnt.
        d.learn(
            stranger,
            ["/dns4/example.org/tcp/1".parse().expect("valid")],
            t0,
        );
        assert_eq!(d.known_len(), 0);
    }

    #[test]
    fn at_the_connection_cap_the_dial_is_refused_and_nothing_waits() {
        let t0 = Instant::now();
        let (mut d, peers) = store(1, DialPolicy::default(), t0);
        assert_eq!(
            d.request(peers[0], 1, 512, 512, t0),
            Verdict::Refused(1, Undelivered::AtCap { cap: 512 })
        );
        assert!(!d.is_dialing(&peers[0]));
        // One below the cap: dialed.
        assert!(matches!(
            d.request(peers[0], 2, 511, 512, t0),
            Verdict::Dial(_)
        ));
    }

    #[test]
    fn the_rate_limit_allows_a_burst_then_one_dial_per_refill() {
        let t0 = Instant::now();
        let policy = DialPolicy {
            burst: 3,
            refill: secs(1.0),
            max_dialing: 100,
            ..DialPolicy::default()
        };
        let (mut d, peers) = store(10, policy, t0);
        for p in &peers[..3] {
            assert!(matches!(d.request(*p, 0, 0, 512, t0), Verdict::Dial(_)));
        }
        assert!(matches!(
            d.request(peers[3], 0, 0, 512, t0),
            Verdict::Refused(0, Undelivered::RateLimited { burst: 3, .. })
        ));
        // Half a refill later: still none.
        assert!(matches!(
            d.request(peers[3], 0, 0, 512, t0 + secs(0.5)),
            Verdict::Refused(_, Undelivered::RateLimited { .. })
        ));
        // One refill: one dial, not two.
        assert!(matches!(
            d.request(peers[3], 0, 0, 512, t0 + secs(1.0)),
            Verdict::Dial(_)
        ));
        assert!(matches!(
            d.request(peers[4], 0, 0, 512, t0 + secs(1.2)),
            Verdict::Refused(_, Undelivered::RateLimited { .. })
        ));
        // A long quiet refills the bucket to its burst, not beyond.
        let later = t0 + secs(100.0);
        for p in &peers[4..7] {
            assert!(matches!(d.request(*p, 0, 0, 512, later), Verdict::Dial(_)));
        }
        assert!(matches!(
            d.request(peers[7], 0, 0, 512, later),
            Verdict::Refused(_, Undelivered::RateLimited { .. })
        ));
    }

    #[test]
    fn the_agents_dialed_at_a_time_and_the_messages_waiting_are_bounded() {
        let t0 = Instant::now();
        let policy = DialPolicy {
            max_dialing: 2,
            max_queued: 3,
            ..DialPolicy::default()
        };
        let (mut d, peers) = store(3, policy, t0);
        assert!(matches!(
            d.request(peers[0], 0, 0, 512, t0),
            Verdict::Dial(_)
        ));
        assert!(matches!(
            d.request(peers[1], 0, 0, 512, t0),
            Verdict::Dial(_)
        ));
        assert_eq!(
            d.request(peers[2], 9, 0, 512, t0),
            Verdict::Refused(9, Undelivered::TooManyDialing(2))
        );
        assert_eq!(d.request(peers[0], 1, 0, 512, t0), Verdict::Waits);
        assert_eq!(d.request(peers[0], 2, 0, 512, t0), Verdict::Waits);
        assert_eq!(
            d.request(peers[0], 3, 0, 512, t0),
            Verdict::Refused(3, Undelivered::QueueFull(3))
        );
        // A connection frees the slot.
        assert_eq!(d.on_connected(&peers[0]), vec![0, 1, 2]);
        assert!(matches!(
            d.request(peers[2], 9, 0, 512, t0),
            Verdict::Dial(_)
        ));
    }

    #[test]
    fn a_message_waits_at_most_max_wait() {
        let t0 = Instant::now();
        let (mut d, peers) = store(1, DialPolicy::default(), t0);
        let b = peers[0];
        assert!(matches!(d.request(b, 1, 0, 512, t0), Verdict::Dial(_)));
        assert_eq!(d.request(b, 2, 0, 512, t0 + secs(4.0)), Verdict::Waits);
        assert!(d.expire(t0 + secs(9.9)).is_empty());
        assert_eq!(d.expire(t0 + secs(10.0)), vec![(b, 1)]);
        assert_eq!(d.poll_timeout(), Some(t0 + secs(14.0)));
        assert_eq!(d.expire(t0 + secs(14.0)), vec![(b, 2)]);
        // Nothing waits: the agent is no longer counted as dialed, and a late connection
        // finds nothing.
        assert!(!d.is_dialing(&b));
        assert!(d.on_connected(&b).is_empty());
    }

    #[test]
    fn a_refusing_agent_backs_off_doubling_and_is_not_redialed_meanwhile() {
        let t0 = Instant::now();
        let policy = DialPolicy {
            backoff: secs(3.0),
            max_backoff: secs(10.0),
            ..DialPolicy::default()
        };
        let (mut d, peers) = store(1, policy, t0);
        let b = peers[0];
        let refused = "wrong or missing pool key?";
        let mut now = t0;
        // Failures in a row wait 3, 6, then 10 s (the cap), 10 s.
        for wait in [3.0, 6.0, 10.0, 10.0] {
            assert!(matches!(d.request(b, 1, 0, 512, now), Verdict::Dial(_)));
            assert_eq!(d.request(b, 2, 0, 512, now), Verdict::Waits);
            assert_eq!(d.on_dial_failed(&b, refused, now), vec![1, 2]);
            // Every request during the backoff is refused at once, with the reason.
            let just_before = now + secs(wait - 0.01);
            match d.request(b, 3, 0, 512, just_before) {
                Verdict::Refused(3, Undelivered::BackingOff { reason, left }) => {
                    assert_eq!(reason, refused);
                    assert!(left <= secs(0.011), "{left:?}");
                }
                other => panic!("during the backoff: {other:?}"),
            }
            now += secs(wait);
        }
        // A connection (it dialed us, say) ends the backoff.
        assert!(matches!(d.request(b, 1, 0, 512, now), Verdict::Dial(_)));
        d.on_connected(&b);
        assert!(matches!(d.request(b, 1, 0, 512, now), Verdict::Dial(_)));
    }

    #[test]
    fn a_skipped_dial_gives_its_token_back_and_the_messages_keep_waiting() {
        let t0 = Instant::now();
        let policy = DialPolicy {
            burst: 1,
            refill: secs(60.0),
            ..DialPolicy::default()
        };
        let (mut d, peers) = store(2, policy, t0);
        assert!(matches!(
            d.request(peers[0], 1, 0, 512, t0),
            Verdict::Dial(_)
        ));
        d.on_dial_skipped(&peers[0]);
        assert!(d.is_dialing(&peers[0]));
        assert!(matches!(
            d.request(peers[1], 1, 0, 512, t0),
            Verdict::Dial(_)
        ));
        assert_eq!(d.on_connected(&peers[0]), vec![1]);
    }

    #[test]
    fn the_address_book_is_bounded_and_drops_the_oldest() {
        let t0 = Instant::now();
        let policy = DialPolicy {
            max_known: 2,
            ..DialPolicy::default()
        };
        let mut d: OnRequest<u32> = OnRequest::new(policy, t0);
        let (a, b, c) = (PeerId::random(), PeerId::random(), PeerId::random());
        d.learn(a, [addr(1)], t0);
        d.learn(b, [addr(2)], t0 + secs(1.0));
        // a learnt again: now b is the oldest.
        d.learn(a, [addr(3)], t0 + secs(2.0));
        d.learn(c, [addr(4)], t0 + secs(3.0));
        assert_eq!(d.known_len(), 2);
        assert_eq!(d.addresses(&a), Some(&[addr(3)][..]));
        assert_eq!(d.addresses(&b), None);
        assert!(d.addresses(&c).is_some());
        // At most MAX_ADDRS_PER_AGENT addresses each.
        d.learn(c, (0..20).map(addr), t0 + secs(4.0));
        assert_eq!(
            d.addresses(&c).map(<[Multiaddr]>::len),
            Some(MAX_ADDRS_PER_AGENT)
        );
    }
}
