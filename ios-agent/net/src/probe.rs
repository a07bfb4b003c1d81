//! Round-trip times to connected peers, at a bounded rate: the libp2p ping protocol
//! (`/ipfs/ping/1.0.0`, 32 bytes echoed, so peer servers and other libp2p nodes answer and
//! are answered as before) with this agent's own schedule ([`PingPlan`]).
//!
//! libp2p's ping behaviour pings every connection at one fixed interval, each on its own
//! timer: with a full mesh of N agents, each agent sends N pings a second at the default
//! 1 s and answers N, each a wake-up of its own. Measured with 50 idle agents on loopback
//! (`mpi-ios-bench idle-pool`, issue 42), that upkeep was most of an idle agent's 1.1% of a
//! core, and it grew with the pool. The design needs an RTT per peer for its latency tiers
//! (the least RTT of the last seconds), a sample now and then to keep a peer in the peer
//! table (the core forgets a peer not heard for a minute), and a peer that stops answering
//! found out; none of that needs a ping a second to each of 49 peers. So:
//!
//! - a new connection is pinged at once and [`FAST_PINGS`] times in all at the fast interval
//!   ([`NetConfig::ping_interval`](crate::NetConfig::ping_interval)), which settles its
//!   smoothed RTT and tier as before, then at twice the previous wait up to the steady
//!   interval below, which corrects samples taken while a whole pool dialed at once
//!   ([`PingTiming::after_samples`]);
//! - then each connection is pinged every `connections / budget` seconds
//!   ([`NetConfig::ping_budget`](crate::NetConfig::ping_budget) pings a second in all),
//!   never more often than the fast interval nor less often than
//!   [`NetConfig::max_ping_interval`](crate::NetConfig::max_ping_interval): a pool of up to
//!   `budget x max_ping_interval` connections costs an agent the same whatever its size;
//! - a ping that fails (no answer within the ping timeout, or the stream broke) is retried
//!   at the fast interval, and a second failure in a row reports the peer gone, as
//!   libp2p's ping did. (Waiting also for 30 s of silence was tried against the start of
//!   `mpi-ios-bench pool --agents 300`, whose 300 agents starting on 2 cores time out
//!   every ping for a while: the failing connections' retries then made that storm longer
//!   and it closed twice as many connections, docs/results-log.md, 2026-12-07);
//! - pings are due on a grid of the fast interval, so the pings due together go out in one
//!   wake-up, and timers are tokio's (libp2p's ping keeps a thread of its own for them).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future as _;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use libp2p::core::transport::PortUse;
use libp2p::core::upgrade::ReadyUpgrade;
use libp2p::core::Endpoint;
use libp2p::futures::future::BoxFuture;
use libp2p::futures::{AsyncReadExt as _, AsyncWriteExt as _, FutureExt as _};
use libp2p::swarm::handler::{
    ConnectionEvent, DialUpgradeError, FullyNegotiatedInbound, FullyNegotiatedOutbound,
};
use libp2p::swarm::{
    ConnectionDenied, ConnectionHandler, ConnectionHandlerEvent, ConnectionId, FromSwarm,
    NetworkBehaviour, NotifyHandler, Stream, StreamProtocol, StreamUpgradeError, SubstreamProtocol,
    THandler, THandlerOutEvent, ToSwarm,
};
use libp2p::{Multiaddr, PeerId};

/// The ping protocol (libp2p's, which every libp2p node speaks).
pub const PROTOCOL: StreamProtocol = StreamProtocol::new("/ipfs/ping/1.0.0");
/// Pings of a new connection at the fast interval, the first at once.
pub const FAST_PINGS: u32 = 4;
/// Consecutive failed pings that report a peer gone.
pub const FAILURES_GONE: u32 = 2;
const PING_SIZE: usize = 32;

/// When a connection's pings are due ([`PingPlan`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingTiming {
    /// The fast interval: a new connection's first pings, retries, and the shortest time
    /// between two pings of a connection. Also the grid pings are due on.
    pub interval: Duration,
    /// The longest time between two pings of a connection.
    pub max_interval: Duration,
    /// Pings a second in all, once every connection's first pings are done.
    pub budget: f64,
}

impl Default for PingTiming {
    /// `ios-agent join`'s: [`NetConfig`](crate::NetConfig)'s defaults.
    fn default() -> Self {
        PingTiming {
            interval: crate::config::DEFAULT_PING_INTERVAL,
            max_interval: crate::config::DEFAULT_MAX_PING_INTERVAL,
            budget: crate::config::DEFAULT_PING_BUDGET,
        }
    }
}

impl PingTiming {
    /// Time between two pings of one connection among `connections` once its first pings
    /// are done.
    pub fn steady(&self, connections: usize) -> Duration {
        let spread = Duration::from_secs_f64(connections as f64 / self.budget.max(1e-3));
        spread.clamp(self.interval, self.max_interval.max(self.interval))
    }

    /// Time from a connection's ping that gave its `samples`-th RTT sample to its next ping,
    /// among `connections`: the fast interval for the first [`FAST_PINGS`], then twice as
    /// long after each sample up to [`PingTiming::steady`]. Why the ramp: a pool that starts
    /// at once (or a site that joins) takes its fast samples while every agent dials and
    /// identifies, and the queues on the way inflate them (measured with 100 agents in
    /// emulated sites: regional round trips of 33 ms read as 150-210 ms at a 43 s steady
    /// interval, and 5% of the pairs in the wrong tier); samples a few, then tens of
    /// seconds later correct them long before a steady interval has passed.
    pub fn after_samples(&self, samples: u32, connections: usize) -> Duration {
        let steady = self.steady(connections);
        match samples.checked_sub(FAST_PINGS) {
            None => self.interval,
            Some(doublings) => self
                .interval
                .checked_mul(2u32.saturating_pow(doublings.saturating_add(1)))
                .map_or(steady, |ramp| ramp.min(steady)),
        }
    }

    /// Time from a connection's first ping until its pings are `steady` apart, among
    /// `connections` whose pings are answered at once: the fast pings and the ramp of
    /// [`PingTiming::after_samples`]. Until then the connection costs more than its share of
    /// the budget (a measurement of an idle agent's upkeep starts after it).
    pub fn start_up(&self, connections: usize) -> Duration {
        let steady = self.steady(connections);
        let mut total = Duration::ZERO;
        // The ramp doubles from the fast interval: a few dozen steps reach any steady one.
        for samples in 1..=64 {
            let wait = self.after_samples(samples, connections);
            if wait >= steady {
                break;
            }
            total += wait;
        }
        total
    }
}

/// What a ping's outcome means for its connection ([`PingPlan::on_outcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// An RTT sample: report it.
    Sample,
    /// A failure, retried soon.
    Retry,
    /// [`FAILURES_GONE`] failures in a row: the peer is gone.
    Gone,
}

#[derive(Debug, Clone)]
struct Planned {
    /// When the next ping is due; `None` while one is in flight.
    due: Option<Instant>,
    /// When the last ping went out (the next is due an interval after it).
    sent: Instant,
    samples: u32,
    failures: u32,
}

/// The schedule of pings over a node's connections, keyed by `K` (a connection id): a pure
/// store, with `now` passed in, tested without a swarm.
#[derive(Debug, Clone)]
pub struct PingPlan<K> {
    timing: PingTiming,
    epoch: Instant,
    connections: HashMap<K, Planned>,
}

impl<K: Hash + Eq + Copy> PingPlan<K> {
    /// An empty plan; due times fall on a grid of `timing.interval` from `now`.
    pub fn new(timing: PingTiming, now: Instant) -> Self {
        PingPlan {
            timing,
            epoch: now,
            connections: HashMap::new(),
        }
    }

    /// Connections planned.
    pub fn len(&self) -> usize {
        self.connections.len()
    }

    /// Whether no connection is planned.
    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }

    /// A new connection: its first ping is due at once.
    pub fn add(&mut self, id: K, now: Instant) {
        self.connections.insert(
            id,
            Planned {
                due: Some(now),
                sent: now,
                samples: 0,
                failures: 0,
            },
        );
    }

    /// A connection closed, or its peer does not speak ping: no more pings.
    pub fn remove(&mut self, id: &K) {
        self.connections.remove(id);
    }

    /// The connections whose ping is due at `now`; each is then in flight until
    /// [`PingPlan::on_outcome`].
    pub fn take_due(&mut self, now: Instant) -> Vec<K> {
        let mut due = Vec::new();
        for (id, p) in &mut self.connections {
            if p.due.is_some_and(|d| d <= now) {
                p.due = None;
                p.sent = now;
                due.push(*id);
            }
        }
        due
    }

    /// How many pings of `id` were answered, if it is planned.
    pub fn answered(&self, id: &K) -> Option<u32> {
        self.connections.get(id).map(|p| p.samples)
    }

    /// The earliest due time, if a connection waits for one.
    pub fn next_due(&self) -> Option<Instant> {
        self.connections.values().filter_map(|p| p.due).min()
    }

    /// A ping of `id` ended (`ok`: an answer came), at `now`: plans its next one.
    pub fn on_outcome(&mut self, id: &K, ok: bool, now: Instant) -> Verdict {
        let n = self.connections.len();
        let timing = self.timing;
        let epoch = self.epoch;
        let Some(p) = self.connections.get_mut(id) else {
            return if ok { Verdict::Sample } else { Verdict::Retry };
        };
        let (verdict, wait) = if ok {
            p.samples = p.samples.saturating_add(1);
            p.failures = 0;
            let wait = timing.after_samples(p.samples, n);
            (Verdict::Sample, wait)
        } else {
            p.failures += 1;
            if p.failures >= FAILURES_GONE {
                (Verdict::Gone, timing.interval)
            } else {
                (Verdict::Retry, timing.interval)
            }
        };
        // An interval after the ping went out, or at once if its answer took longer.
        p.due = Some(on_grid(epoch, timing.interval, (p.sent + wait).max(now)));
        verdict
    }
}

/// The first point of the grid `epoch + k * step` at or after `t`.
fn on_grid(epoch: Instant, step: Duration, t: Instant) -> Instant {
    let step_ns = step.as_nanos().max(1);
    let since = t.saturating_duration_since(epoch).as_nanos();
    let k = since.div_ceil(step_ns);
    let offset = u64::try_from(k * step_ns).unwrap_or(u64::MAX);
    epoch + Duration::from_nanos(offset)
}

/// Why a ping failed.
#[derive(Debug, Clone)]
pub enum ProbeFailure {
    /// No answer within the ping timeout.
    Timeout,
    /// The peer does not speak the ping protocol.
    Unsupported,
    /// The stream broke, or the answer was not the ping sent.
    Other(String),
}

impl fmt::Display for ProbeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeFailure::Timeout => f.write_str("ping timeout"),
            ProbeFailure::Unsupported => f.write_str("ping protocol not supported"),
            ProbeFailure::Other(e) => write!(f, "ping error: {e}"),
        }
    }
}

/// What the behaviour reports: an RTT sample of a connection, or that its peer stopped
/// answering ([`FAILURES_GONE`] failures in a row) or does not speak ping.
#[derive(Debug)]
pub struct ProbeEvent {
    /// The peer.
    pub peer: PeerId,
    /// The connection pinged.
    pub connection: ConnectionId,
    /// The RTT, or why the peer counts as gone (or unpingable).
    pub result: Result<Duration, ProbeFailure>,
    /// Pings of the connection answered so far: for a gone peer, whether it ever answered
    /// (a peer that died, or a path or machine too slow from the start).
    pub answered: u32,
}

/// The ping behaviour: answers every ping, and pings each connection when its plan says.
pub struct Probe {
    plan: PingPlan<ConnectionId>,
    peers: HashMap<ConnectionId, PeerId>,
    timeout: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// When `sleep` ends.
    sleep_until: Option<Instant>,
    out: VecDeque<ToSwarm<ProbeEvent, PingNow>>,
}

impl Probe {
    /// A behaviour with this timing; a ping unanswered within `timeout` fails.
    pub fn new(timing: PingTiming, timeout: Duration) -> Self {
        Probe {
            plan: PingPlan::new(timing, Instant::now()),
            peers: HashMap::new(),
            timeout,
            sleep: None,
            sleep_until: None,
            out: VecDeque::new(),
        }
    }

    fn established(&mut self, connection: ConnectionId, peer: PeerId) -> ProbeHandler {
        self.peers.insert(connection, peer);
        self.plan.add(connection, Instant::now());
        ProbeHandler::new(self.timeout)
    }
}

impl NetworkBehaviour for Probe {
    type ConnectionHandler = ProbeHandler;
    type ToSwarm = ProbeEvent;

    fn handle_established_inbound_connection(
        &mut self,
        connection: ConnectionId,
        peer: PeerId,
        _: &Multiaddr,
        _: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(self.established(connection, peer))
    }

    fn handle_established_outbound_connection(
        &mut self,
        connection: ConnectionId,
        peer: PeerId,
        _: &Multiaddr,
        _: Endpoint,
        _: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(self.established(connection, peer))
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        if let FromSwarm::ConnectionClosed(c) = event {
            self.plan.remove(&c.connection_id);
            self.peers.remove(&c.connection_id);
        }
    }

    fn on_connection_handler_event(
        &mut self,
        peer: PeerId,
        connection: ConnectionId,
        result: THandlerOutEvent<Self>,
    ) {
        let now = Instant::now();
        let result = match result {
            Err(ProbeFailure::Unsupported) => {
                self.plan.remove(&connection);
                Err(ProbeFailure::Unsupported)
            }
            Ok(rtt) => {
                self.plan.on_outcome(&connection, true, now);
                Ok(rtt)
            }
            Err(e) => match self.plan.on_outcome(&connection, false, now) {
                Verdict::Gone => Err(e),
                Verdict::Sample | Verdict::Retry => {
                    tracing::debug!(%peer, "ping failed ({e}): retrying");
                    return;
                }
            },
        };
        let answered = self.plan.answered(&connection).unwrap_or(0);
        self.out.push_back(ToSwarm::GenerateEvent(ProbeEvent {
            peer,
            connection,
            result,
            answered,
        }));
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<ToSwarm<ProbeEvent, PingNow>> {
        loop {
            if let Some(ev) = self.out.pop_front() {
                return Poll::Ready(ev);
            }
            let now = Instant::now();
            for connection in self.plan.take_due(now) {
                if let Some(&peer_id) = self.peers.get(&connection) {
                    self.out.push_back(ToSwarm::NotifyHandler {
                        peer_id,
                        handler: NotifyHandler::One(connection),
                        event: PingNow,
                    });
                }
            }
            if !self.out.is_empty() {
                continue;
            }
            let Some(due) = self.plan.next_due() else {
                self.sleep = None;
                self.sleep_until = None;
                return Poll::Pending;
            };
            if self.sleep_until != Some(due) {
                self.sleep = Some(Box::pin(tokio::time::sleep_until(due.into())));
                self.sleep_until = Some(due);
            }
            match self.sleep.as_mut().map(|s| s.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => {
                    self.sleep = None;
                    self.sleep_until = None;
                }
                _ => return Poll::Pending,
            }
        }
    }
}

/// The behaviour's order to a connection's handler: ping now.
#[derive(Debug, Clone, Copy)]
pub struct PingNow;

type PingFuture = BoxFuture<'static, Result<(Stream, Duration), ProbeFailure>>;
type PongFuture = BoxFuture<'static, std::io::Result<Stream>>;

enum Outbound {
    /// Asked for a stream, to ping on once it is open.
    Opening,
    /// A stream to ping on.
    Idle(Stream),
    /// A ping under way.
    Ping(PingFuture),
}

/// One connection's pings: answers the peer's, and sends one when the behaviour says.
pub struct ProbeHandler {
    timeout: Duration,
    outbound: Option<Outbound>,
    inbound: Option<PongFuture>,
    /// A ping was ordered with no stream open yet.
    wanted: bool,
    /// The peer does not speak ping: reported once, then nothing more.
    unsupported: Option<bool>,
    results: VecDeque<Result<Duration, ProbeFailure>>,
}

impl ProbeHandler {
    fn new(timeout: Duration) -> Self {
        ProbeHandler {
            timeout,
            outbound: None,
            inbound: None,
            wanted: false,
            unsupported: None,
            results: VecDeque::new(),
        }
    }
}

async fn send_ping(
    mut stream: Stream,
    timeout: Duration,
) -> Result<(Stream, Duration), ProbeFailure> {
    let payload = payload();
    let exchange = async {
        stream.write_all(&payload).await?;
        stream.flush().await?;
        let started = Instant::now();
        let mut echo = [0u8; PING_SIZE];
        stream.read_exact(&mut echo).await?;
        Ok::<_, std::io::Error>((echo, started.elapsed()))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Err(ProbeFailure::Timeout),
        Ok(Err(e)) => Err(ProbeFailure::Other(e.to_string())),
        Ok(Ok((echo, _))) if echo != payload => Err(ProbeFailure::Other(
            "the answer is not the ping sent".into(),
        )),
        Ok(Ok((_, rtt))) => Ok((stream, rtt)),
    }
}

async fn answer_ping(mut stream: Stream) -> std::io::Result<Stream> {
    let mut payload = [0u8; PING_SIZE];
    stream.read_exact(&mut payload).await?;
    stream.write_all(&payload).await?;
    stream.flush().await?;
    Ok(stream)
}

/// 32 bytes that differ from ping to ping (the answer must echo them; they need not be
/// secret).
fn payload() -> [u8; PING_SIZE] {
    use std::hash::{BuildHasher as _, Hasher as _};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut out = [0u8; PING_SIZE];
    let state = std::collections::hash_map::RandomState::new();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = state.build_hasher();
        h.write_u64(n);
        h.write_usize(i);
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}

impl ConnectionHandler for ProbeHandler {
    type FromBehaviour = PingNow;
    type ToBehaviour = Result<Duration, ProbeFailure>;
    type InboundProtocol = ReadyUpgrade<StreamProtocol>;
    type OutboundProtocol = ReadyUpgrade<StreamProtocol>;
    type InboundOpenInfo = ();
    type OutboundOpenInfo = ();

    fn listen_protocol(&self) -> SubstreamProtocol<Self::InboundProtocol> {
        SubstreamProtocol::new(ReadyUpgrade::new(PROTOCOL), ())
    }

    fn on_behaviour_event(&mut self, PingNow: PingNow) {
        if self.unsupported.is_some() {
            return;
        }
        match self.outbound.take() {
            Some(Outbound::Idle(stream)) => {
                self.outbound = Some(Outbound::Ping(send_ping(stream, self.timeout).boxed()));
            }
            Some(other) => self.outbound = Some(other),
            None => self.wanted = true,
        }
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<ConnectionHandlerEvent<Self::OutboundProtocol, (), Self::ToBehaviour>> {
        if let Some(reported) = &mut self.unsupported {
            if !*reported {
                *reported = true;
                return Poll::Ready(ConnectionHandlerEvent::NotifyBehaviour(Err(
                    ProbeFailure::Unsupported,
                )));
            }
            return Poll::Pending;
        }
        if let Some(result) = self.results.pop_front() {
            return Poll::Ready(ConnectionHandlerEvent::NotifyBehaviour(result));
        }
        while let Some(pong) = self.inbound.as_mut() {
            match pong.poll_unpin(cx) {
                Poll::Pending => break,
                Poll::Ready(Err(e)) => {
                    tracing::debug!("inbound ping: {e}");
                    self.inbound = None;
                }
                // Answered: wait for the next ping on the same stream.
                Poll::Ready(Ok(stream)) => self.inbound = Some(answer_ping(stream).boxed()),
            }
        }
        if let Some(Outbound::Ping(ping)) = self.outbound.as_mut() {
            if let Poll::Ready(result) = ping.poll_unpin(cx) {
                let (next, report) = match result {
                    Ok((stream, rtt)) => (Some(Outbound::Idle(stream)), Ok(rtt)),
                    // A broken stream is not used again: the next ping opens another.
                    Err(e) => (None, Err(e)),
                };
                self.outbound = next;
                return Poll::Ready(ConnectionHandlerEvent::NotifyBehaviour(report));
            }
        }
        if self.wanted && self.outbound.is_none() {
            self.wanted = false;
            self.outbound = Some(Outbound::Opening);
            return Poll::Ready(ConnectionHandlerEvent::OutboundSubstreamRequest {
                protocol: SubstreamProtocol::new(ReadyUpgrade::new(PROTOCOL), ()),
            });
        }
        Poll::Pending
    }

    fn on_connection_event(
        &mut self,
        event: ConnectionEvent<Self::InboundProtocol, Self::OutboundProtocol>,
    ) {
        match event {
            ConnectionEvent::FullyNegotiatedInbound(FullyNegotiatedInbound {
                protocol: mut stream,
                ..
            }) => {
                stream.ignore_for_keep_alive();
                self.inbound = Some(answer_ping(stream).boxed());
            }
            ConnectionEvent::FullyNegotiatedOutbound(FullyNegotiatedOutbound {
                protocol: mut stream,
                ..
            }) => {
                stream.ignore_for_keep_alive();
                self.outbound = Some(Outbound::Ping(send_ping(stream, self.timeout).boxed()));
            }
            ConnectionEvent::DialUpgradeError(DialUpgradeError { error, .. }) => {
                self.outbound = None;
                match error {
                    StreamUpgradeError::NegotiationFailed => self.unsupported = Some(false),
                    StreamUpgradeError::Timeout => self.results.push_back(Err(
                        ProbeFailure::Other("ping protocol negotiation timed out".into()),
                    )),
                    StreamUpgradeError::Apply(never) => match never {},
                    StreamUpgradeError::Io(e) => {
                        self.results
                            .push_back(Err(ProbeFailure::Other(e.to_string())));
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMING: PingTiming = PingTiming {
        interval: Duration::from_secs(1),
        max_interval: Duration::from_secs(30),
        budget: 2.0,
    };

    /// Runs a plan of `n` connections whose pings are all answered, from `t0` for
    /// `seconds`, one step a millisecond apart from each due time; returns the pings sent
    /// in each second.
    fn pings_per_second(n: usize, seconds: u64) -> Vec<usize> {
        let t0 = Instant::now();
        let mut plan = PingPlan::new(TIMING, t0);
        for id in 0..n {
            plan.add(id, t0);
        }
        let mut per_second = vec![0; seconds as usize];
        let mut now = t0;
        while let Some(due) = plan.next_due() {
            now = now.max(due);
            let s = now.duration_since(t0).as_secs();
            if s >= seconds {
                break;
            }
            let due = plan.take_due(now);
            per_second[s as usize] += due.len();
            let answered = now + Duration::from_millis(1);
            for id in due {
                assert_eq!(plan.on_outcome(&id, true, answered), Verdict::Sample);
            }
        }
        per_second
    }

    /// Issue 42: once their first pings are done, n connections cost the budget (2 pings a
    /// second) whatever n, up to budget x max interval connections (60); beyond, one ping
    /// each per max interval.
    #[test]
    fn the_steady_ping_rate_is_the_budget_whatever_the_number_of_connections() {
        // Pings due together go out together: count over 1000 s, many rounds of each.
        for n in [1usize, 2, 10, 25, 49, 120] {
            let per_second = pings_per_second(n, 1200);
            // The first ping of each at once, then the fast ones a second apart.
            assert_eq!(per_second[0], n, "n = {n}");
            let steady: usize = per_second[200..1200].iter().sum();
            // At most 2 a second, or one per connection every 30 s beyond 60 connections.
            let expected = (n as f64).min(TIMING.budget.max(n as f64 / 30.0)) * 1000.0;
            assert!(
                (steady as f64) <= expected * 1.05 && steady as f64 >= expected * 0.9,
                "n = {n}: {steady} pings in 1000 s, expected about {expected}"
            );
        }
        assert_eq!(TIMING.steady(1), Duration::from_secs(1));
        assert_eq!(TIMING.steady(49), Duration::from_secs_f64(24.5));
        assert_eq!(TIMING.steady(500), Duration::from_secs(30));
    }

    /// A new connection gets its first pings at the fast interval (its RTT and tier settle
    /// as fast as before), then pings twice as far apart up to the steady interval, and
    /// pings due together go out together (one wake-up).
    #[test]
    fn a_new_connection_is_pinged_fast_then_on_the_grid() {
        let t0 = Instant::now();
        let mut plan = PingPlan::new(TIMING, t0);
        for id in 0..40 {
            plan.add(id, t0);
        }
        let ms = Duration::from_millis;
        assert_eq!(plan.take_due(t0).len(), 40);
        assert_eq!(plan.next_due(), None, "all in flight");
        let mut t = t0;
        for k in 1..FAST_PINGS {
            for id in 0..40 {
                plan.on_outcome(&id, true, t + ms(3));
            }
            // The next ones are due together, on the grid: one second later.
            t = t0 + Duration::from_secs(u64::from(k));
            assert_eq!(plan.next_due(), Some(t));
            assert_eq!(plan.take_due(t).len(), 40);
        }
        // Then 2, 4, 8 and 16 s after the last went out, then every 20 s (40 connections,
        // 2 a second).
        for wait in [2, 4, 8, 16, 20, 20] {
            for id in 0..40 {
                plan.on_outcome(&id, true, t + ms(3));
            }
            t += Duration::from_secs(wait);
            assert_eq!(plan.next_due(), Some(t), "after {wait} s");
            assert_eq!(plan.take_due(t).len(), 40);
        }
    }

    /// The start-up ends when the ramp reaches the steady interval: 3 fast waits and the
    /// ramp's 2, 4, 8 and 16 s before 20 s (40 connections); none with one connection.
    #[test]
    fn the_start_up_is_the_fast_pings_and_the_ramp() {
        assert_eq!(TIMING.start_up(40), Duration::from_secs(3 + 2 + 4 + 8 + 16));
        assert_eq!(TIMING.start_up(1), Duration::ZERO);
        assert_eq!(
            TIMING.start_up(500),
            Duration::from_secs(3 + 2 + 4 + 8 + 16)
        );
        assert_eq!(TIMING.after_samples(8, 500), Duration::from_secs(30));
    }

    /// A failed ping is retried at the fast interval; two in a row report the peer gone;
    /// an answer in between starts the count again.
    #[test]
    fn two_failures_in_a_row_report_the_peer_gone() {
        let t0 = Instant::now();
        let mut plan = PingPlan::new(TIMING, t0);
        plan.add(7, t0);
        assert_eq!(plan.take_due(t0), vec![7]);
        for _ in 0..FAST_PINGS {
            let now = plan.next_due().unwrap_or(t0);
            plan.take_due(now);
            assert_eq!(plan.on_outcome(&7, true, now), Verdict::Sample);
        }
        let now = plan.next_due().expect("due");
        plan.take_due(now);
        assert_eq!(plan.on_outcome(&7, false, now), Verdict::Retry);
        assert_eq!(plan.next_due(), Some(now + Duration::from_secs(1)));
        let now = now + Duration::from_secs(1);
        plan.take_due(now);
        assert_eq!(plan.on_outcome(&7, true, now), Verdict::Sample);
        let now = plan.next_due().expect("due");
        plan.take_due(now);
        assert_eq!(plan.on_outcome(&7, false, now), Verdict::Retry);
        let now = now + Duration::from_secs(1);
        plan.take_due(now);
        assert_eq!(plan.on_outcome(&7, false, now), Verdict::Gone);
        // What the log line of a gone peer tells: it answered before (the fast pings and
        // one more).
        assert_eq!(plan.answered(&7), Some(FAST_PINGS + 1));
        plan.remove(&7);
        assert_eq!(plan.answered(&7), None);
        assert!(plan.is_empty());
        assert_eq!(plan.next_due(), None);
    }
}
