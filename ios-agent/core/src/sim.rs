//! A deterministic simulator driving many [`Agent`]s (feature `sim`, and in this crate's
//! tests).
//!
//! Time is virtual: the clock jumps to the next wake-up (a message delivery, the end of a
//! migration, a profile or RTT round, or an agent's [`Agent::poll_timeout`], kept in a timer
//! heap that is re-armed after every input to that agent, so a step costs what happens in
//! it, not the pool's size). Round-trip times between node pairs come from a model
//! ([`Sim::with_rtt_model`]) or per-pair settings; a message takes half the RTT. Nodes have
//! cores, a speed and a background load that may vary with time; entities (MPI ranks) want
//! one core each and share an overloaded node's cores equally. The ranks of a job exchange
//! messages every iteration along a [`Pattern`], so that an iteration lasts as long as the
//! slowest rank's compute plus the slowest exchange. A [`Action::Migrate`] moves its
//! entities after a simulated cost (spawn time plus state over bandwidth), during which
//! their job makes no progress. Every run is replayable from its seed; a livelock (many
//! steps without the clock moving) fails loudly.
//!
//! It plays the driver's part exactly as a real one would: the same inputs, in the same
//! order, so a failing scenario here is a failing seed to replay. Besides the agents
//! ([`Balancer::Agents`]) it can run with no balancing at all, or with a central
//! [`Balancer::Oracle`] that sees every node and entity and plans greedily: the baselines
//! of the scale experiment (`mpi-ios-bench scale`).
//!
//! Messages are counted (number and CBOR bytes, per kind), not kept, unless
//! [`Sim::with_message_log`] asks for them.
//!
//! # Malleable jobs
//!
//! A job may be malleable ([`Sim::set_malleable`], with its limits): its profiles say so
//! (`EntityProfile::malleable`), and an [`Action::Resize`] grows or shrinks it as pcm does
//! (docs/malleability.md, "What a resize does"): the sim plays the daemon's and the job's
//! part, refusing what they refuse, and reports the outcome to the agent that asked. Its
//! iteration follows the scaling assumption of [`crate::resize`]: the job's work
//! (`WORK_PER_ITERATION` times its width when it was made malleable) divides among its
//! ranks, the exchanges along its pattern do not. See [`resize`] for the mechanics and the
//! oracle's resizes.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use pcm_proto::{HostName, JobId, Rank};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::agent::{Action, Agent, Config, MigrationOutcome};
use crate::message::{HostRtt, Message, MessageId, MigrationId};
use crate::model::{EntityId, EntityProfile, NodeProfile, Partner};
use crate::resize::ResizeCostModel;
use crate::tier::PeerId;

pub mod resize;
pub use resize::{ResizeKind, ResizeRecord};

/// Background load of a node as a function of simulated time since the start.
pub type LoadFn = Box<dyn Fn(Duration) -> f64>;

/// Round-trip time between two nodes (by index), for pairs without a [`Sim::set_rtt`].
pub type RttFn = Box<dyn Fn(usize, usize) -> Duration>;
/// Whether two nodes' agents are connected ([`Sim::with_links`]).
pub type LinkFn = Box<dyn Fn(usize, usize) -> bool>;

/// A node to add to the simulation.
pub struct NodeSpec {
    cores: f64,
    speed: f64,
    memory: u64,
    background: LoadFn,
}

impl NodeSpec {
    /// A node with `cores` reference-speed cores, 8 GiB of memory and no background load.
    pub fn new(cores: f64) -> Self {
        NodeSpec {
            cores,
            speed: 1.0,
            memory: 8 << 30,
            background: Box::new(|_| 0.0),
        }
    }

    /// Relative core speed.
    pub fn with_speed(mut self, speed: f64) -> Self {
        self.speed = speed;
        self
    }

    /// Background (non-application) load in runnable threads, over time.
    pub fn with_background(mut self, load: impl Fn(Duration) -> f64 + 'static) -> Self {
        self.background = Box::new(load);
        self
    }
}

/// Who moves entities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balancer {
    /// The agents, as configured (the default).
    Agents,
    /// Nobody: entities stay where they were put.
    None,
    /// A central oracle that sees every node and entity. Every `period`, for the slowest
    /// jobs first, it weighs new placements of the job's ranks: one made greedily a rank at
    /// a time (each rank at most once, to the node among the 64 fastest with room, the
    /// job's own and their 16 nearest, that shortens the job's iteration most, or when none
    /// does, that lowers its summed exchange latency most), and for each of the job's nodes
    /// the whole job gathered there and on its nearest nodes. It carries out the one that
    /// adds most to the pool's iterations per second (the job's and those of the jobs
    /// sharing the nodes it leaves or joins), if that is at least a tenth of the job's rate
    /// and, over 10 minutes, more than the job loses standing still while it moves. At most
    /// one rank in 50 moves per period (or one job's plan), with the agents' hold-down
    /// (except off a leaving node). A malleable job may be grown or shrunk instead, within
    /// its limits, when that adds more (see [`resize`]).
    Oracle {
        /// Time between two placements.
        period: Duration,
    },
}

/// How the ranks of a job exchange messages each iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pattern {
    /// No exchange: ranks wait only for the slowest one.
    #[default]
    Independent,
    /// Rank i with i xor 2^d, one round per dimension.
    Hypercube,
    /// A binary tree (rank i with (i-1)/2): a reduction up and a broadcast down.
    Tree,
    /// A ring (rank i with i+1), one round.
    Sparse,
    /// A 2-D grid as square as the rank count allows, the four neighbours in one round.
    Stencil,
}

impl Pattern {
    /// Every pattern with exchanges.
    pub const COMMUNICATING: [Pattern; 4] = [
        Pattern::Hypercube,
        Pattern::Tree,
        Pattern::Sparse,
        Pattern::Stencil,
    ];

    /// Name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Independent => "independent",
            Pattern::Hypercube => "hypercube",
            Pattern::Tree => "tree",
            Pattern::Sparse => "sparse",
            Pattern::Stencil => "stencil",
        }
    }

    /// How `n` ranks exchange each iteration: the pairs of ranks that exchange, each pair's
    /// round, and how many times per iteration each round runs. The rounds follow one
    /// another (each needs the one before), so an iteration waits, round after round, for
    /// the slowest pair of that round ([`Exchanges::seconds`]).
    fn exchanges(self, n: usize) -> Exchanges {
        let log2 = |n: usize| usize::BITS - n.saturating_sub(1).leading_zeros();
        // Depth of rank i in a binary heap (0 for the root).
        let depth = |i: usize| usize::BITS - 1 - (i + 1).leading_zeros();
        let one_round = |pairs: Vec<(usize, usize)>| Exchanges {
            round: vec![0; pairs.len()],
            times: if pairs.is_empty() {
                Vec::new()
            } else {
                vec![1]
            },
            pairs,
        };
        match self {
            Pattern::Independent => one_round(Vec::new()),
            // Recursive doubling: round d exchanges across dimension d.
            Pattern::Hypercube => {
                let mut pairs = Vec::new();
                let mut round = Vec::new();
                for i in 0..n {
                    for d in 0..log2(n) {
                        let j = i ^ (1 << d);
                        if j > i && j < n {
                            pairs.push((i, j));
                            round.push(d);
                        }
                    }
                }
                let times = vec![1; log2(n) as usize];
                Exchanges {
                    pairs,
                    round,
                    times,
                }
            }
            // A reduction up the levels and a broadcast down: each level twice.
            Pattern::Tree => {
                let pairs: Vec<(usize, usize)> = (1..n).map(|i| (i, (i - 1) / 2)).collect();
                let round: Vec<u32> = (1..n).map(|i| depth(i) - 1).collect();
                let levels = if n < 2 { 0 } else { depth(n - 1) as usize };
                Exchanges {
                    pairs,
                    round,
                    times: vec![2; levels],
                }
            }
            // Both neighbours in one round.
            Pattern::Sparse => one_round(if n < 2 {
                Vec::new()
            } else {
                (0..n)
                    .map(|i| (i, (i + 1) % n))
                    .filter(|(a, b)| a != b)
                    .collect()
            }),
            // The four neighbours in one round.
            Pattern::Stencil => {
                let w = ((n as f64).sqrt().floor() as usize).max(1);
                let mut e = Vec::new();
                for i in 0..n {
                    if (i + 1) % w != 0 && i + 1 < n {
                        e.push((i, i + 1));
                    }
                    if i + w < n {
                        e.push((i, i + w));
                    }
                }
                one_round(e)
            }
        }
    }
}

/// A job's exchanges in one iteration ([`Pattern::exchanges`]).
#[derive(Debug, Clone, Default)]
struct Exchanges {
    /// Pairs of ranks (rank positions in [`Pattern::exchanges`], entity indices in a
    /// [`Job`]).
    pairs: Vec<(usize, usize)>,
    /// Each pair's round, parallel to `pairs`.
    round: Vec<u32>,
    /// How many times each round runs per iteration.
    times: Vec<u32>,
}

/// Most rounds an iteration may have: a hypercube or tree of up to 2^32 ranks.
const MAX_ROUNDS: usize = 33;

impl Exchanges {
    /// Seconds an iteration spends exchanging, given each pair's one-way latency: per round,
    /// its slowest pair, times the round's runs. (Before 2026-11-28 the simulator charged
    /// the slowest pair of the whole job in every round: a single far pair of a hypercube
    /// cost three times what recursive doubling pays.)
    fn seconds(&self, latency: impl Fn(usize) -> f64) -> f64 {
        let mut slowest = [0.0_f64; MAX_ROUNDS];
        for (i, &r) in self.round.iter().enumerate() {
            let r = r as usize;
            slowest[r] = slowest[r].max(latency(i));
        }
        self.times
            .iter()
            .zip(slowest)
            .map(|(&t, l)| f64::from(t) * l)
            .sum()
    }
}

/// A simulated node. Its agent id and whether it is alive are kept apart, in
/// [`Sim::ids`] and [`Sim::alive`]: every message and RTT sample reads them for another
/// node than the one it feeds, and a node's own struct (with its agent) spans many cache
/// lines, each a miss at 10,000 nodes.
struct Node {
    host: HostName,
    agent: Agent,
    cores: f64,
    speed: f64,
    memory: u64,
    background: LoadFn,
    leaving: bool,
    /// Indices of the entities on this node.
    entities: Vec<usize>,
    /// The instant the timer heap holds for this node's agent, if any.
    armed: Option<Instant>,
    dirty: bool,
    /// Whether this node's agent ever refused a host announced to it (see
    /// [`Sim::feed_known_rtt`]).
    refused_host: bool,
}

struct Entity {
    id: EntityId,
    job: usize,
    node: usize,
    state_bytes: u64,
    /// `None`: on its node since before the simulation started.
    arrived: Option<Instant>,
    /// The node a move under way takes it to (`None`: not moving).
    moving_to: Option<usize>,
    /// A shrink removed it: it is on no node and in no job's ranks, and its id may name
    /// another entity now (indices stay stable, so the entity stays in
    /// [`Sim::entities`]).
    gone: bool,
}

/// What becomes of an agent's move of a job that already stands still for another move
/// (pcm carries out one reconfiguration of a job at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WhileMoving {
    /// The default, as pcm does since 2026-11-30: it joins the next reconfiguration, which
    /// begins when the one under way ends (at its next status check the job agrees on every
    /// request its ranks hold and carries out together those whose ranks no other moves),
    /// unless the daemon of the node it leaves has a request of the job in flight already:
    /// that daemon answers busy, and the move fails at once (`pcmd/src/registry.rs`).
    Batched,
    /// As pcm did from 2026-11-29 (late night) to 2026-11-30: it begins when the moves under
    /// way or queued end, one reconfiguration each (the job agreed on one request per
    /// check); busy as above ([`Sim::with_one_request_per_reconfiguration`]).
    Queued,
    /// It fails then, and nothing moves ([`Sim::with_requests_refused_while_moving`]).
    Refused,
}

/// One move of a plan: the entity, the node it leaves and the node it goes to (indices).
type PlannedMove = (usize, usize, usize);

struct Job {
    /// The job's id.
    id: JobId,
    pattern: Pattern,
    /// Seconds of reference-core compute per iteration of each rank: [`WORK_PER_ITERATION`]
    /// until a resize, then the job's work divided by its new width (its work divides
    /// among its ranks, [`crate::resize`]).
    rank_work: f64,
    /// Its resize limits, if it is malleable ([`Sim::set_malleable`]).
    malleable: Option<pcm_proto::Malleability>,
    /// When the resize under way ends, if one is.
    resizing: Option<Instant>,
    /// When its last resize completed.
    last_resize: Option<Instant>,
    /// Entity indices, by rank order of addition.
    ranks: Vec<usize>,
    /// The pattern's exchanges, pairs as entity indices (rebuilt when ranks change).
    exchanges: Exchanges,
    /// Seconds per iteration at the last profile round (infinite while nothing runs).
    iteration: f64,
    /// Iterations done so far.
    done: f64,
    /// Seconds the job stood still in the current profile interval, from pauses that ended
    /// before the current one ([`Job::pause`]) began.
    paused: f64,
    /// The job's current stand-still: from the start of a move of its ranks to the end of
    /// the last move begun while it lasted (an agent's move waits for the one under way,
    /// [`Sim::begin_move`]). A move stops the whole job for its duration, once, however
    /// many of its ranks it carries and however many profile rounds it spans.
    pause: Option<(Instant, Instant)>,
    /// The next reconfiguration ([`WhileMoving::Batched`]), waiting for the one under way
    /// to end: when it starts, and its moves `(entity, from, to)`.
    next: Option<(Instant, Vec<PlannedMove>)>,
    /// The nodes whose daemon has a request of this job in flight (an agent's move under
    /// way or waiting), with when it ends: a daemon answers busy to a second one
    /// ([`WhileMoving::Batched`] and [`WhileMoving::Queued`]).
    requests_in_flight: Vec<(usize, Instant)>,
}

/// Seconds of `[start, end]` within `[from, to]`.
fn overlap(start: Instant, end: Instant, from: Instant, to: Instant) -> f64 {
    end.min(to)
        .saturating_duration_since(start.max(from))
        .as_secs_f64()
}

/// Nodes with the most CPU per rank the oracle also tries to gather each job around.
const ORACLE_FAST_SEEDS: usize = 4;
/// Memory of one simulated rank.
const ENTITY_MEMORY: u64 = 100 << 20;
/// Seconds of reference-core compute per iteration.
pub const WORK_PER_ITERATION: f64 = 0.1;
/// Age of entities that exist at the start of the simulation.
const INITIAL_AGE: Duration = Duration::from_secs(3600);
/// Steps at one instant before the simulation is taken as livelocked.
const MAX_STEPS_AT_ONE_INSTANT: u64 = 100_000;

/// One job's iteration, split (see [`Sim::job_breakdown`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobBreakdown {
    /// The job's pattern.
    pub pattern: Pattern,
    /// Distinct nodes its ranks are on.
    pub nodes: usize,
    /// Seconds its slowest rank computes per iteration.
    pub compute: f64,
    /// Seconds per iteration its exchanges wait for latency.
    pub exchange: f64,
}

/// One completed migration.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationRecord {
    /// Simulated time since the start.
    pub at: Duration,
    /// The entity.
    pub entity: EntityId,
    /// The entity's index in the simulation: stable where its id is not (a resize
    /// renumbers the ranks of its job).
    pub entity_index: usize,
    /// Source node index.
    pub from: usize,
    /// Destination node index.
    pub to: usize,
}

/// One message put on the simulated network (kept only with [`Sim::with_message_log`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SentRecord {
    /// Simulated time since the start.
    pub at: Duration,
    /// Sender node index.
    pub from: usize,
    /// Receiver node index.
    pub to: usize,
    /// The message.
    pub message: Message,
}

/// Messages put on the simulated network so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageCounts {
    /// Messages sent.
    pub messages: u64,
    /// Their size in CBOR, as the libp2p driver frames them.
    pub bytes: u64,
    /// Messages and bytes by [`Message::kind`].
    pub by_kind: BTreeMap<&'static str, (u64, u64)>,
}

enum EventKind {
    Deliver {
        to: usize,
        from: usize,
        message: Message,
    },
    MigrationDone {
        id: MigrationId,
        from: usize,
        to: usize,
        entities: Vec<usize>,
        /// Whether an agent started it (and gets its outcome).
        by_agent: bool,
    },
    /// The end of a resize (or of the wait of one refused as superseded).
    ResizeDone(resize::Pending),
}

/// A pending event in the queue: when, its sequence number (events at one instant happen
/// in the order they were scheduled), and its slot in [`Sim::payloads`]. The payload (a
/// whole message) stays in its slot: the heap moves only these 32 bytes when it sifts, where
/// moving each event with its message was 7% of the simulator's time at 10,000 nodes.
type Event = (Instant, u64, usize);

struct CountingWriter(u64);

impl std::io::Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn cbor_len(message: &Message) -> u64 {
    let mut w = CountingWriter(0);
    match ciborium::into_writer(message, &mut w) {
        Ok(()) => w.0,
        Err(_) => 0,
    }
}

/// Bytes of a CBOR head (major type and argument) for the argument `n`.
fn cbor_head_len(n: u64) -> u64 {
    match n {
        0..=23 => 1,
        24..=0xff => 2,
        0x100..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

/// [`cbor_len`] of one [`HostRtt`], without encoding it: a map of two entries (one head
/// byte), the keys `host` (5 bytes) and `rtt_us` (7 bytes), the host as a text string (a
/// `HostName` serializes as its `String`) and the RTT as an unsigned integer. A unit test
/// checks it against ciborium.
fn host_rtt_cbor_len(r: &HostRtt) -> u64 {
    let host = r.host.as_str().len() as u64;
    1 + 5 + cbor_head_len(host) + host + 7 + cbor_head_len(u64::from(r.rtt_us))
}

/// [`cbor_len`] of a peer id: serde sees its bytes as a `Vec<u8>`, a sequence, which CBOR
/// writes as an array of unsigned integers.
fn peer_id_cbor_len(peer: &PeerId) -> u64 {
    peer.with_bytes(|bytes| {
        cbor_head_len(bytes.len() as u64)
            + bytes
                .iter()
                .map(|&b| cbor_head_len(u64::from(b)))
                .sum::<u64>()
    })
}

/// [`cbor_len`] of a [`Message::Heartbeat`], without encoding it: heartbeats are most NSc2c
/// messages (10 million per 10 simulated minutes at 10,000 nodes), and encoding each just
/// to count its bytes was 2% of the simulator's time. An enum variant is a map of one entry,
/// its name (`Heartbeat`, a text of 9 bytes) to a map of its four fields: `id` (2 bytes of
/// name) an unsigned integer, `manager` (7) a peer id, `successor` (9) a peer id or null (one
/// byte), `members` (7) an unsigned integer. A unit test checks it against ciborium.
fn heartbeat_cbor_len(
    id: MessageId,
    manager: &PeerId,
    successor: Option<&PeerId>,
    members: u32,
) -> u64 {
    let text = |n: u64| cbor_head_len(n) + n;
    1 + text(9)
        + 1
        + text(2)
        + cbor_head_len(id.0)
        + text(7)
        + peer_id_cbor_len(manager)
        + text(9)
        + successor.map_or(1, peer_id_cbor_len)
        + text(7)
        + cbor_head_len(u64::from(members))
}

/// [`cbor_len`] of a message the simulator sends, taking ownership to size work steals
/// quickly: a steal carries up to [`crate::message::MAX_RTTS`] RTTs by host, which ciborium
/// encodes one copied host name at a time (`HostName` serializes through a `String` copy).
/// At 10,000 nodes steals are most NSc2c messages, and encoding them just to count their
/// bytes was 6 to 9% of the simulator's time. The RTTs are sized by
/// [`host_rtt_cbor_len`] instead, and the rest of the message by ciborium with no RTTs (an
/// empty array is one head byte), which gives the same count.
fn message_cbor_len(mut message: Message) -> (Message, u64) {
    if let Message::Heartbeat {
        id,
        manager,
        successor,
        members,
    } = &message
    {
        let n = heartbeat_cbor_len(*id, manager, successor.as_ref(), *members);
        return (message, n);
    }
    let Message::WorkSteal { rtts, .. } = &mut message else {
        let n = cbor_len(&message);
        return (message, n);
    };
    let taken = std::mem::take(rtts);
    let base = cbor_len(&message);
    let n = base - cbor_head_len(0)
        + cbor_head_len(taken.len() as u64)
        + taken.iter().map(host_rtt_cbor_len).sum::<u64>();
    if let Message::WorkSteal { rtts, .. } = &mut message {
        *rtts = taken;
    }
    (message, n)
}

/// Which agents hold a host for which peers, one bit per (agent, peer) pair of nodes: a
/// mirror of every agent's table of hosts, kept by [`Sim::announce`] through which every
/// change to those tables goes here (an announcement adds its host, or makes room by
/// dropping another peer's, which the agent reports). The simulator asks whether an agent
/// holds a peer's host for every message (both ends: the connection announces both hosts)
/// and RTT sample; asking the agent was a hash look-up in a cold table of another agent
/// each time, a tenth of the simulator's time at 10,000 nodes.
///
/// The two bits of a pair of nodes, `a` holding `b`'s host and `b` holding `a`'s, sit side
/// by side (in row `min(a, b)`, at column `max(a, b)`): a message and a discovered pair ask
/// both, and the bits are a cache miss each otherwise. Rows are as long as the pool, so
/// half the table is unused: `nodes² / 4` bytes (25 MB at 10,000 nodes, and room to grow).
#[derive(Debug, Default)]
struct HeldHosts {
    /// Words per row: room for this many times 32 nodes.
    stride: usize,
    bits: Vec<u64>,
}

impl HeldHosts {
    /// Makes room for `nodes` nodes; new pairs hold nothing.
    fn grow(&mut self, nodes: usize) {
        let words = nodes.div_ceil(32);
        if words > self.stride {
            // The rows get longer: lay them out again, with room for a quarter more nodes.
            let stride = words.max(self.stride + self.stride / 4);
            let rows = self.bits.len().checked_div(self.stride).unwrap_or(0);
            let mut bits = vec![0; rows * stride];
            for (new, old) in bits
                .chunks_mut(stride)
                .zip(self.bits.chunks(self.stride.max(1)))
            {
                new[..old.len()].copy_from_slice(old);
            }
            self.bits = bits;
            self.stride = stride;
        }
        self.bits.resize(nodes * self.stride, 0);
    }

    /// The word and the bit of `agent` holding `peer`'s host.
    fn position(&self, agent: usize, peer: usize) -> (usize, u32) {
        let (row, column) = (agent.min(peer), agent.max(peer));
        let bit = 2 * (column % 32) + usize::from(agent > peer);
        (row * self.stride + column / 32, bit as u32)
    }

    fn get(&self, agent: usize, peer: usize) -> bool {
        let (word, bit) = self.position(agent, peer);
        self.bits[word] & (1 << bit) != 0
    }

    fn set(&mut self, agent: usize, peer: usize, held: bool) {
        let (word, bit) = self.position(agent, peer);
        if held {
            self.bits[word] |= 1 << bit;
        } else {
            self.bits[word] &= !(1 << bit);
        }
    }
}

/// Each node's armed timer ([`Node::armed`]), soonest first: a binary heap indexed by
/// node, so that re-arming a node moves its one entry. The heap of (instant, node) it
/// replaces pushed a new entry at every re-arm and dropped the stale ones as they came up
/// (checking each against its node, a cache miss into the node): it held many times the
/// pool's size, and popping it was 4% of the simulator's time at 10,000 nodes. The same
/// nodes are due at the same instants (each node's entry is its armed instant).
#[derive(Debug, Default)]
struct Timers {
    heap: Vec<(Instant, usize)>,
    /// Each node's index in `heap`, or [`Timers::ABSENT`].
    position: Vec<usize>,
}

impl Timers {
    const ABSENT: usize = usize::MAX;

    /// The soonest timer: (instant, node).
    fn peek(&self) -> Option<(Instant, usize)> {
        self.heap.first().copied()
    }

    fn pop(&mut self) {
        if let Some(&(_, node)) = self.heap.first() {
            self.remove(node);
        }
    }

    /// Arms `node`'s timer at `at`, or disarms it (`None`).
    fn set(&mut self, node: usize, at: Option<Instant>) {
        if node >= self.position.len() {
            self.position.resize(node + 1, Self::ABSENT);
        }
        match (self.position[node], at) {
            (Self::ABSENT, None) => {}
            (_, None) => self.remove(node),
            (Self::ABSENT, Some(at)) => {
                self.heap.push((at, node));
                let k = self.heap.len() - 1;
                self.position[node] = k;
                self.up(k);
            }
            (k, Some(at)) => {
                self.heap[k].0 = at;
                let k = self.up(k);
                self.down(k);
            }
        }
    }

    fn remove(&mut self, node: usize) {
        let k = self.position[node];
        if k == Self::ABSENT {
            return;
        }
        self.position[node] = Self::ABSENT;
        let last = self.heap.len() - 1;
        if k != last {
            self.heap.swap(k, last);
            self.position[self.heap[k].1] = k;
        }
        self.heap.pop();
        if k < self.heap.len() {
            let k = self.up(k);
            self.down(k);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.position[self.heap[a].1] = a;
        self.position[self.heap[b].1] = b;
    }

    /// Moves the entry at `k` up to its place; returns where it ends.
    fn up(&mut self, mut k: usize) -> usize {
        while k > 0 {
            let parent = (k - 1) / 2;
            if self.heap[parent] <= self.heap[k] {
                break;
            }
            self.swap(parent, k);
            k = parent;
        }
        k
    }

    fn down(&mut self, mut k: usize) {
        loop {
            let left = 2 * k + 1;
            if left >= self.heap.len() {
                return;
            }
            let right = left + 1;
            let child = if right < self.heap.len() && self.heap[right] < self.heap[left] {
                right
            } else {
                left
            };
            if self.heap[k] <= self.heap[child] {
                return;
            }
            self.swap(k, child);
            k = child;
        }
    }
}

/// The simulator.
pub struct Sim {
    seed: u64,
    config: Config,
    balancer: Balancer,
    epoch: Instant,
    now: Instant,
    nodes: Vec<Node>,
    /// Each node's agent id, by node index (see [`Node`]).
    ids: Vec<PeerId>,
    /// Whether each node is alive (not killed), by node index.
    alive: Vec<bool>,
    /// Which agents hold a host for which peers (see [`HeldHosts`]).
    held_hosts: HeldHosts,
    entities: Vec<Entity>,
    by_entity: HashMap<EntityId, usize>,
    jobs: Vec<Job>,
    by_job: HashMap<JobId, usize>,
    rtt: HashMap<(usize, usize), Duration>,
    rtt_model: Option<RttFn>,
    default_rtt: Duration,
    reported_rtt: Option<Duration>,
    discovery: Option<usize>,
    links: Option<LinkFn>,
    rng: StdRng,
    events: BinaryHeap<Reverse<Event>>,
    /// What each queued event does, by slot; `None` for a free slot (listed in `free_payloads`).
    payloads: Vec<Option<EventKind>>,
    free_payloads: Vec<usize>,
    timers: Timers,
    dirty: Vec<usize>,
    seq: u64,
    profile_period: Duration,
    rtt_period: Duration,
    next_profile: Instant,
    next_rtt: Instant,
    next_oracle: Instant,
    last_profile: Instant,
    steps: u64,
    steps_now: u64,
    max_steps: u64,
    spawn: Duration,
    bandwidth: f64,
    counts: MessageCounts,
    log: Option<Vec<SentRecord>>,
    waiting_as_idle: bool,
    while_moving: WhileMoving,
    partners: bool,
    migrations: Vec<MigrationRecord>,
    /// Every move an agent asked for, when it asked (its `at`).
    asked: Vec<MigrationRecord>,
    oracle_ids: u64,
    /// Predicts what a resize costs; the simulation charges what it predicts.
    resize_cost: ResizeCostModel,
    /// Every resize asked for, carried out or refused.
    resizes: Vec<ResizeRecord>,
    /// Ids of resizes asked through [`Sim::request_resize`].
    hook_ids: u64,
    /// Entities removed by shrinks.
    gone: usize,
    /// Each node's nearest nodes by RTT, for the oracle, computed on first use (nodes that
    /// join later are not in the lists made before: the oracle finds them among the
    /// fastest).
    oracle_near: Vec<Option<Vec<usize>>>,
}

impl Sim {
    /// An empty simulation whose agents use `config`, each seeded from `seed` and its index.
    pub fn new(seed: u64, config: Config) -> Self {
        let epoch = Instant::now();
        let profile_period = config.profile_period();
        Sim {
            seed,
            config,
            balancer: Balancer::Agents,
            epoch,
            now: epoch,
            nodes: Vec::new(),
            ids: Vec::new(),
            alive: Vec::new(),
            held_hosts: HeldHosts::default(),
            entities: Vec::new(),
            by_entity: HashMap::new(),
            jobs: Vec::new(),
            by_job: HashMap::new(),
            rtt: HashMap::new(),
            rtt_model: None,
            default_rtt: Duration::from_millis(1),
            reported_rtt: None,
            discovery: None,
            links: None,
            rng: StdRng::seed_from_u64(seed ^ 0x005e_ed0f_5171),
            events: BinaryHeap::new(),
            payloads: Vec::new(),
            free_payloads: Vec::new(),
            timers: Timers::default(),
            dirty: Vec::new(),
            seq: 0,
            profile_period,
            rtt_period: Duration::from_secs(5),
            next_profile: epoch,
            next_rtt: epoch,
            next_oracle: epoch,
            last_profile: epoch,
            steps: 0,
            steps_now: 0,
            max_steps: u64::MAX,
            spawn: Duration::from_millis(300),
            bandwidth: 12.5e6,
            counts: MessageCounts::default(),
            log: None,
            waiting_as_idle: false,
            while_moving: WhileMoving::Batched,
            partners: false,
            migrations: Vec::new(),
            asked: Vec::new(),
            oracle_ids: 0,
            resize_cost: ResizeCostModel::default(),
            resizes: Vec::new(),
            hook_ids: 1 << 63,
            gone: 0,
            oracle_near: Vec::new(),
        }
    }

    /// Round-trip time between nodes not given one with [`Sim::set_rtt`] nor by a model
    /// (default 1 ms).
    pub fn with_default_rtt(mut self, rtt: Duration) -> Self {
        self.default_rtt = rtt;
        self
    }

    /// Round-trip times of pairs not given one with [`Sim::set_rtt`], as a function of
    /// the two node indices (called with the lower index first); for pools too large to
    /// list every pair.
    pub fn with_rtt_model(mut self, model: impl Fn(usize, usize) -> Duration + 'static) -> Self {
        self.rtt_model = Some(Box::new(model));
        self
    }

    /// Agents are told this RTT for every peer (so all are in one tier: stealing without
    /// tiers), while messages and exchanges still take the real one.
    pub fn with_reported_rtt(mut self, rtt: Duration) -> Self {
        self.reported_rtt = Some(rtt);
        self
    }

    /// Peer discovery as in a large pool: each RTT round, an agent measures the peers in
    /// its table plus `per_round` others drawn at random (both ends of such a new pair get
    /// the sample). Without it (the default), every agent measures every other node each
    /// round.
    pub fn with_discovery(mut self, per_round: usize) -> Self {
        self.discovery = Some(per_round);
        self
    }

    /// Agents measure (and so know) only the nodes `linked` to theirs (called with the lower
    /// index first), as the real agents know only those they are connected to when each
    /// dials a few of the pool (`ios-agent --dial-agents`); without it, every node.
    /// Ignored with [`Sim::with_discovery`], whose rounds decide whom an agent meets.
    /// Messages still reach any node.
    pub fn with_links(mut self, linked: impl Fn(usize, usize) -> bool + 'static) -> Self {
        self.links = Some(Box::new(linked));
        self
    }

    /// Time between two RTT rounds (default 5 s).
    pub fn with_rtt_period(mut self, period: Duration) -> Self {
        self.rtt_period = period;
        self
    }

    /// Who moves entities (default: the agents).
    pub fn with_balancer(mut self, balancer: Balancer) -> Self {
        self.balancer = balancer;
        self
    }

    /// Node profiles count a rank only for the share of its iteration it computes, not the
    /// time it waits for its partners: what the real sampler reports
    /// (`load_without_waiting`, docs/agents.md). Default off: every rank counts as one
    /// runnable thread.
    pub fn with_waiting_as_idle(mut self) -> Self {
        self.waiting_as_idle = true;
        self
    }

    /// An agent's move of a job that is already moving waits for the moves under way or
    /// waiting and then stops the job again, one reconfiguration per move, as pcm did from
    /// 2026-11-29 (late night) to 2026-11-30, when it agreed on one request per status
    /// check. Default off: pcm now carries out all the requests its ranks hold at a check
    /// in one reconfiguration (`WhileMoving::Batched`). Replaces
    /// [`Sim::with_requests_refused_while_moving`].
    pub fn with_one_request_per_reconfiguration(mut self) -> Self {
        self.while_moving = WhileMoving::Queued;
        self
    }

    /// An agent's move of a job that is already moving fails when the move under way ends,
    /// and nothing moves, as pcm did until 2026-11-29 (late night): another daemon's
    /// request, agreed after the move, was refused as superseded because the job's epoch
    /// had moved on, whichever ranks it named. Default off: pcm now refuses it only if a
    /// move since moved one of its ranks (`WhileMoving::Batched`). With this on the
    /// agents ask for moves the job will refuse, as nothing tells an agent that a job is
    /// reconfiguring. Replaces [`Sim::with_one_request_per_reconfiguration`].
    pub fn with_requests_refused_while_moving(mut self) -> Self {
        self.while_moving = WhileMoving::Refused;
        self
    }

    /// Entity profiles carry their communication partners (the hosts of the ranks they
    /// exchange with along their job's pattern, and the exchanges per second), so the
    /// agents' model has its communication term. Default off: no partners, the paper's model.
    pub fn with_partners(mut self) -> Self {
        self.partners = true;
        self
    }

    /// Keeps every message sent, for [`Sim::sent`] (tests; unbounded).
    pub fn with_message_log(mut self) -> Self {
        self.log = Some(Vec::new());
        self
    }

    /// Most steps before [`Sim::run_for`] panics (default: no bound; a run panics anyway
    /// after 100,000 steps at one instant).
    pub fn with_max_steps(mut self, max_steps: u64) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Adds a node (its agent is named `nNN`, so ids order like indices); returns its index.
    pub fn add_node(&mut self, spec: NodeSpec) -> usize {
        let index = self.nodes.len();
        let name = format!("n{index:02}");
        let peer = PeerId::new(name.as_bytes()).expect("short ascii id");
        let host = HostName::new(&name).expect("valid host name");
        let config = self
            .config
            .clone()
            .with_seed(self.seed.wrapping_mul(1000).wrapping_add(index as u64));
        let agent = Agent::new(peer.clone(), host.clone(), config, self.now).expect("valid config");
        self.ids.push(peer);
        self.alive.push(true);
        self.held_hosts.grow(self.ids.len());
        self.nodes.push(Node {
            host,
            agent,
            cores: spec.cores,
            speed: spec.speed,
            memory: spec.memory,
            background: spec.background,
            leaving: false,
            entities: Vec::new(),
            armed: None,
            dirty: false,
            refused_host: false,
        });
        self.mark(index);
        match self.discovery {
            // Let the newcomer (and the others) measure RTTs right away.
            None => self.next_rtt = self.now,
            // In a large pool the newcomer discovers a few peers at once, and they it.
            Some(k) => {
                if self.balancer == Balancer::Agents && self.now > self.epoch {
                    self.discover(index, k.max(1));
                    self.rearm();
                }
            }
        }
        self.next_profile = self.next_profile.min(self.now);
        index
    }

    /// Sets the RTT between two nodes (both directions).
    pub fn set_rtt(&mut self, a: usize, b: usize, rtt: Duration) {
        self.rtt.insert((a.min(b), a.max(b)), rtt);
    }

    /// Adds an entity (one rank of `job`) on `node`: resident there since before the start
    /// when added at the start, else since now.
    pub fn add_entity(&mut self, node: usize, job: &str, rank: u32, state_bytes: u64) -> EntityId {
        let id = EntityId {
            job: JobId::new(job).expect("valid job id"),
            rank: Rank(rank),
        };
        let j = match self.by_job.get(&id.job) {
            Some(&j) => j,
            None => {
                self.jobs.push(Job {
                    id: id.job.clone(),
                    pattern: Pattern::Independent,
                    rank_work: WORK_PER_ITERATION,
                    malleable: None,
                    resizing: None,
                    last_resize: None,
                    ranks: Vec::new(),
                    exchanges: Exchanges::default(),
                    iteration: f64::INFINITY,
                    done: 0.0,
                    paused: 0.0,
                    pause: None,
                    next: None,
                    requests_in_flight: Vec::new(),
                });
                self.by_job.insert(id.job.clone(), self.jobs.len() - 1);
                self.jobs.len() - 1
            }
        };
        let e = self.entities.len();
        self.entities.push(Entity {
            id: id.clone(),
            job: j,
            node,
            state_bytes,
            // A rank that starts after the simulation did is new on its node, as a real
            // rank's profile says (its agent moves nothing resident for less than its
            // hold-down); those there at the start have run for a while.
            arrived: (self.now > self.epoch).then_some(self.now),
            moving_to: None,
            gone: false,
        });
        self.by_entity.insert(id.clone(), e);
        self.nodes[node].entities.push(e);
        self.jobs[j].ranks.push(e);
        self.rebuild_exchanges(j);
        id
    }

    /// Sets how the ranks of `job` exchange messages (default [`Pattern::Independent`]).
    pub fn set_pattern(&mut self, job: &str, pattern: Pattern) {
        let id = JobId::new(job).expect("valid job id");
        if let Some(&j) = self.by_job.get(&id) {
            self.jobs[j].pattern = pattern;
            self.rebuild_exchanges(j);
        }
    }

    fn rebuild_exchanges(&mut self, j: usize) {
        let job = &mut self.jobs[j];
        let mut exchanges = job.pattern.exchanges(job.ranks.len());
        for pair in &mut exchanges.pairs {
            *pair = (job.ranks[pair.0], job.ranks[pair.1]);
        }
        job.exchanges = exchanges;
    }

    /// Stops a node silently: it no longer sends, receives or answers pings.
    pub fn kill(&mut self, node: usize) {
        self.alive[node] = false;
    }

    /// The node starts leaving the pool now: its agent drains it ([`Agent::handle_leave`]);
    /// the oracle moves its entities first and sends none there; with no balancer they stay.
    pub fn leave(&mut self, node: usize) {
        let now = self.now;
        self.nodes[node].leaving = true;
        if self.balancer == Balancer::Agents {
            self.nodes[node].agent.handle_leave(now);
            self.drain(node);
            self.rearm();
        }
    }

    /// The agent of a node.
    pub fn agent(&self, node: usize) -> &Agent {
        &self.nodes[node].agent
    }

    /// Number of nodes added so far.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Number of nodes alive and not leaving.
    pub fn active_nodes(&self) -> usize {
        self.nodes
            .iter()
            .zip(&self.alive)
            .filter(|(n, alive)| **alive && !n.leaving)
            .count()
    }

    /// Number of entities (shrinks take theirs away, grows add theirs).
    pub fn entity_count(&self) -> usize {
        self.entities.len() - self.gone
    }

    /// Indices of the entities' nodes, by entity.
    pub fn node_of(&self, entity: &EntityId) -> Option<usize> {
        self.by_entity.get(entity).map(|&e| self.entities[e].node)
    }

    /// Number of entities on a node.
    pub fn count_on(&self, node: usize) -> usize {
        self.nodes[node].entities.len()
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.epoch
    }

    /// The simulated clock, as the agents are told it (for their time-taking queries, such
    /// as [`Agent::cluster_members`]).
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Every message sent so far.
    ///
    /// # Panics
    /// Without [`Sim::with_message_log`]: messages are only counted then ([`Sim::messages`]).
    pub fn sent(&self) -> &[SentRecord] {
        self.log
            .as_deref()
            .expect("Sim::sent needs Sim::with_message_log")
    }

    /// Messages sent so far, counted.
    pub fn messages(&self) -> &MessageCounts {
        &self.counts
    }

    /// Every completed migration so far.
    pub fn migrations(&self) -> &[MigrationRecord] {
        &self.migrations
    }

    /// Every move of an entity an agent asked for so far (and the simulated daemon took
    /// up), timed when the agent asked: what the real agents' status lists as a migration
    /// started.
    pub fn migrations_asked(&self) -> &[MigrationRecord] {
        &self.asked
    }

    /// Iterations done so far, summed over all jobs (updated every profile period).
    pub fn iterations(&self) -> f64 {
        self.jobs.iter().map(|j| j.done).sum()
    }

    /// Iterations done so far by each job whose pattern is `pattern`, summed.
    pub fn iterations_of(&self, pattern: Pattern) -> f64 {
        self.jobs
            .iter()
            .filter(|j| j.pattern == pattern)
            .map(|j| j.done)
            .sum()
    }

    /// Each job's last computed iteration: its pattern, the distinct nodes its ranks are
    /// on, and the seconds its slowest rank computes and its exchanges wait (infinite
    /// compute while a rank is on no usable node). For reports of why a placement is slow.
    pub fn job_breakdown(&self) -> Vec<JobBreakdown> {
        let bg: Vec<f64> = (0..self.nodes.len()).map(|i| self.background(i)).collect();
        self.jobs
            .iter()
            .map(|job| {
                let mut nodes: Vec<usize> =
                    job.ranks.iter().map(|&e| self.entities[e].node).collect();
                let compute = job
                    .ranks
                    .iter()
                    .map(|&e| {
                        let i = self.entities[e].node;
                        let n = &self.nodes[i];
                        job.rank_work / (Self::share(n.cores, bg[i], n.entities.len()) * n.speed)
                    })
                    .fold(0.0, f64::max);
                let exchange = self.exchange_seconds(job, |e| self.entities[e].node);
                nodes.sort_unstable();
                nodes.dedup();
                JobBreakdown {
                    pattern: job.pattern,
                    nodes: nodes.len(),
                    compute,
                    exchange,
                }
            })
            .collect()
    }

    /// Steps taken so far (each one a distinct instant, or more inputs at the same one).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The node of an agent id (`nNN`, the node's index), without a map lookup.
    fn index_of(&self, peer: &PeerId) -> Option<usize> {
        // From the id's inline copy of its bytes (the shared ones are another node's, cold).
        peer.with_bytes(|bytes| self.index_of_name(bytes))
    }

    /// The node whose host is `host` (hosts are named as the agents).
    fn index_of_host(&self, host: &HostName) -> Option<usize> {
        self.index_of_name(host.as_str().as_bytes())
    }

    fn index_of_name(&self, name: &[u8]) -> Option<usize> {
        let digits = name.strip_prefix(b"n")?;
        let mut i: usize = 0;
        for &d in digits {
            if !d.is_ascii_digit() {
                return None;
            }
            i = i.checked_mul(10)?.checked_add(usize::from(d - b'0'))?;
        }
        // Node i's id is `format!("n{i:02}")`: digits of that value and that length are
        // exactly its id (zero padding fixes the rest), so no bytes need comparing (this
        // runs for every peer of every agent each RTT round).
        let canonical = i.checked_ilog10().map_or(1, |l| l as usize + 1).max(2);
        (digits.len() == canonical && i < self.nodes.len()).then_some(i)
    }

    fn rtt_between(&self, a: usize, b: usize) -> Duration {
        if a == b {
            return Duration::ZERO;
        }
        let key = (a.min(b), a.max(b));
        if let Some(r) = self.rtt.get(&key) {
            return *r;
        }
        match &self.rtt_model {
            Some(model) => model(key.0, key.1),
            None => self.default_rtt,
        }
    }

    fn push(&mut self, at: Instant, kind: EventKind) {
        self.seq += 1;
        let slot = match self.free_payloads.pop() {
            Some(slot) => {
                self.payloads[slot] = Some(kind);
                slot
            }
            None => {
                self.payloads.push(Some(kind));
                self.payloads.len() - 1
            }
        };
        self.events.push(Reverse((at, self.seq, slot)));
    }

    fn mark(&mut self, node: usize) {
        if !self.nodes[node].dirty {
            self.nodes[node].dirty = true;
            self.dirty.push(node);
        }
    }

    /// Re-arms the timers of the agents that got an input since the last call.
    fn rearm(&mut self) {
        for i in std::mem::take(&mut self.dirty) {
            let n = &mut self.nodes[i];
            n.dirty = false;
            let t = if self.alive[i] && self.balancer == Balancer::Agents {
                n.agent.poll_timeout()
            } else {
                None
            };
            if t != n.armed {
                n.armed = t;
                self.timers.set(i, t);
            }
        }
    }

    /// Background load of a node now.
    fn background(&self, node: usize) -> f64 {
        (self.nodes[node].background)(self.elapsed()).max(0.0)
    }

    /// Share of a core each entity gets on `node` with `count` entities and background `bg`.
    fn share(cores: f64, bg: f64, count: usize) -> f64 {
        let load = bg + count as f64;
        if load > cores {
            cores / load
        } else {
            1.0
        }
    }

    /// Seconds of one iteration of `job`, from per-node compute seconds and node placement.
    fn job_iteration(
        &self,
        job: &Job,
        compute: impl Fn(usize) -> f64,
        node: impl Fn(usize) -> usize,
    ) -> f64 {
        Self::slowest_compute(job, compute) + self.exchange_seconds(job, node)
    }

    /// Seconds per iteration `job`'s slowest rank computes, each rank `e` taking `compute(e)`.
    fn slowest_compute(job: &Job, compute: impl Fn(usize) -> f64) -> f64 {
        job.ranks.iter().map(|&e| compute(e)).fold(0.0, f64::max)
    }

    /// Seconds per iteration `job`'s exchanges wait on latency, its entities on `node(e)`.
    fn exchange_seconds(&self, job: &Job, node: impl Fn(usize) -> usize) -> f64 {
        let pairs = &job.exchanges.pairs;
        job.exchanges.seconds(|i| {
            let (a, b) = pairs[i];
            (self.rtt_between(node(a), node(b)) / 2).as_secs_f64()
        })
    }

    /// Runnable threads of node `i`'s entities as its profile shows them: one each, or with
    /// [`Sim::with_waiting_as_idle`] only the share of its iteration each one computes.
    fn entity_load(&self, i: usize, share: f64, iterations: &[f64]) -> f64 {
        let n = &self.nodes[i];
        if !self.waiting_as_idle {
            return n.entities.len() as f64;
        }
        n.entities
            .iter()
            .map(|&e| {
                let job = self.entities[e].job;
                let compute = self.jobs[job].rank_work / (share * n.speed);
                let iter = iterations[job].max(compute);
                compute / iter
            })
            .sum()
    }

    /// A profile round: the jobs' progress since the last one, then every node's profile.
    fn profile_round(&mut self, now: Instant) {
        let since = self.last_profile;
        let dt = (now - since).as_secs_f64();
        self.last_profile = now;
        for job in &mut self.jobs {
            let mut paused = job.paused;
            if let Some((start, end)) = job.pause {
                paused += overlap(start, end, since, now);
                if end <= now {
                    job.pause = None;
                }
            }
            if job.iteration.is_finite() && job.iteration > 0.0 {
                job.done += (dt - paused).max(0.0) / job.iteration;
            }
            job.paused = 0.0;
        }
        let bg: Vec<f64> = (0..self.nodes.len()).map(|i| self.background(i)).collect();
        let shares: Vec<f64> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Self::share(n.cores, bg[i], n.entities.len()))
            .collect();
        let compute = |e: usize| {
            let n = self.entities[e].node;
            self.jobs[self.entities[e].job].rank_work / (shares[n] * self.nodes[n].speed)
        };
        let iterations: Vec<f64> = self
            .jobs
            .iter()
            .map(|job| {
                // A move's pause is charged through `paused`.
                self.job_iteration(job, compute, |e| self.entities[e].node)
            })
            .collect();
        // Each job's slowest rank's compute, which PCM's ranks agree on and report.
        let slowest: Vec<f64> = self
            .jobs
            .iter()
            .map(|job| Self::slowest_compute(job, compute))
            .collect();
        for (job, it) in self.jobs.iter_mut().zip(&iterations) {
            job.iteration = *it;
        }
        if self.balancer != Balancer::Agents {
            return;
        }
        let elapsed = self.elapsed();
        for i in 0..self.nodes.len() {
            if !self.alive[i] {
                continue;
            }
            let n = &self.nodes[i];
            let share = shares[i];
            let profile = NodeProfile {
                cores: n.cores,
                speed: n.speed,
                cpu_load: bg[i] + self.entity_load(i, share, &iterations),
                memory_available: n
                    .memory
                    .saturating_sub(n.entities.len() as u64 * ENTITY_MEMORY),
                bandwidth: self.bandwidth,
                // What the competing processes get, as the real sampler measures it
                // (others' CPU time): under fair sharing, less than their demand when the
                // node is overloaded.
                competing: bg[i] * share,
            };
            let entities = n
                .entities
                .iter()
                .map(|&e| {
                    let e = &self.entities[e];
                    // The job's iteration takes as long as its slowest rank and exchange;
                    // the others wait in MPI.
                    let job = &self.jobs[e.job];
                    let compute = job.rank_work / (share * n.speed);
                    let iter = iterations[e.job].max(compute);
                    let resident = match e.arrived {
                        Some(t) => now - t,
                        None => elapsed + INITIAL_AGE,
                    };
                    let partners = if self.partners {
                        self.partners_of(e, 1.0 / iter)
                    } else {
                        Vec::new()
                    };
                    // Where rank 0 runs, as PCM reports its placement.
                    let home = job
                        .ranks
                        .first()
                        .map(|&r| self.nodes[self.entities[r].node].host.clone());
                    EntityProfile {
                        partners,
                        job_ranks: job.ranks.len() as u32,
                        malleable: job.malleable,
                        home,
                        job_slowest_compute: Some(Duration::from_secs_f64(
                            slowest[e.job].max(compute),
                        )),
                        // As PCM reports it: since the last resize, else the job's age.
                        width_age: Some(match job.last_resize {
                            Some(t) => now - t,
                            None => elapsed + INITIAL_AGE,
                        }),
                        id: e.id.clone(),
                        cpu: share,
                        memory: ENTITY_MEMORY,
                        network: 0.0,
                        state_bytes: e.state_bytes,
                        compute: Duration::from_secs_f64(compute),
                        mpi_wait: Duration::from_secs_f64(iter - compute),
                        iteration_rate: 1.0 / iter,
                        age: elapsed + INITIAL_AGE,
                        remaining: None,
                        resident,
                    }
                })
                .collect();
            let _span = tracing::debug_span!("node", i, t = (now - self.epoch).as_secs()).entered();
            let agent = &mut self.nodes[i].agent;
            agent.handle_node_profile(now, profile);
            agent.handle_entities(now, entities);
            // The driver measures the hosts the agent asks for as soon as it asks: a rank's
            // partners are known before the next steal is weighed (RTTs here do not change,
            // so measuring again each round only costs time).
            self.measure_partners(i);
            self.drain(i);
        }
    }

    /// The partners of entity `e` along its job's pattern, by host, at `rate` iterations
    /// per second: one exchange per iteration and edge (two on a tree: up and down).
    fn partners_of(&self, e: &Entity, rate: f64) -> Vec<Partner> {
        let job = &self.jobs[e.job];
        let exchanges = &job.exchanges;
        let me = self.by_entity.get(&e.id).copied();
        let mut out: Vec<Partner> = Vec::new();
        for (&(a, b), &round) in exchanges.pairs.iter().zip(&exchanges.round) {
            // As often as its round runs (a tree's levels: up and down).
            let per_edge = f64::from(exchanges.times[round as usize]);
            let other = if Some(a) == me {
                b
            } else if Some(b) == me {
                a
            } else {
                continue;
            };
            let host = &self.nodes[self.entities[other].node].host;
            match out.iter_mut().find(|p| &p.host == host) {
                Some(p) => p.exchanges_per_sec += per_edge * rate,
                None => out.push(Partner {
                    host: host.clone(),
                    exchanges_per_sec: per_edge * rate,
                }),
            }
        }
        out.truncate(crate::model::MAX_PARTNERS);
        out
    }

    fn drain(&mut self, node: usize) {
        self.mark(node);
        while let Some(action) = self.nodes[node].agent.poll_action() {
            match action {
                Action::Send { to, message } => {
                    let Some(j) = self.index_of(&to) else {
                        continue;
                    };
                    let (message, bytes) = message_cbor_len(message);
                    self.counts.messages += 1;
                    self.counts.bytes += bytes;
                    let slot = self.counts.by_kind.entry(message.kind()).or_default();
                    slot.0 += 1;
                    slot.1 += bytes;
                    if let Some(log) = self.log.as_mut() {
                        log.push(SentRecord {
                            at: self.now - self.epoch,
                            from: node,
                            to: j,
                            message: message.clone(),
                        });
                    }
                    let at = self.now + self.rtt_between(node, j) / 2;
                    self.push(
                        at,
                        EventKind::Deliver {
                            to: j,
                            from: node,
                            message,
                        },
                    );
                }
                Action::Migrate {
                    id,
                    entities,
                    to,
                    to_host,
                } => {
                    let target = self.index_of(&to);
                    let indices: Option<Vec<usize>> = entities
                        .iter()
                        .map(|id| {
                            self.by_entity.get(id).copied().filter(|&e| {
                                self.entities[e].node == node
                                    && self.entities[e].moving_to.is_none()
                            })
                        })
                        .collect();
                    let ok =
                        target.is_some_and(|j| self.nodes[j].host == to_host) && indices.is_some();
                    let j = target.unwrap_or(node);
                    let indices = if ok {
                        indices.unwrap_or_default()
                    } else {
                        Vec::new()
                    };
                    let at = self.elapsed();
                    self.asked.extend(indices.iter().map(|&e| MigrationRecord {
                        at,
                        entity: self.entities[e].id.clone(),
                        entity_index: e,
                        from: node,
                        to: j,
                    }));
                    self.begin_move(id, node, j, indices, true);
                }
                Action::Resize {
                    id,
                    job,
                    from,
                    ranks,
                    hosts,
                    reason,
                } => {
                    // Hosts outside the pool name no node: refused as a daemon would.
                    let targets: Result<Vec<usize>, HostName> = hosts
                        .iter()
                        .map(|h| self.index_of_host(h).ok_or_else(|| h.clone()))
                        .collect();
                    let request = resize::Request {
                        id,
                        node,
                        job,
                        from,
                        to: ranks,
                        hosts: targets,
                        reason: Some(reason),
                    };
                    self.begin_resize(request, true, None);
                }
            }
        }
    }

    /// `job` stands still from now until `until` (a move of its ranks): a stand-still that
    /// lasts until now or later is extended, a past one is charged to the current profile
    /// interval.
    fn stand_still(&mut self, job: usize, until: Instant) {
        let (now, since) = (self.now, self.last_profile);
        let job = &mut self.jobs[job];
        job.pause = match job.pause {
            Some((start, end)) if now <= end => Some((start, end.max(until))),
            Some((start, end)) => {
                job.paused += overlap(start, end, since, now);
                Some((now, until))
            }
            None => Some((now, until)),
        };
    }

    /// Whether the daemon of node `from` has a request of one of `jobs` in flight (it then
    /// answers busy to another). Forgets the requests that have ended.
    fn daemon_busy(&mut self, jobs: &[usize], from: usize) -> bool {
        let now = self.now;
        jobs.iter().any(|&j| {
            let in_flight = &mut self.jobs[j].requests_in_flight;
            in_flight.retain(|&(_, end)| end > now);
            in_flight.iter().any(|&(node, _)| node == from)
        })
    }

    /// Starts moving `entities` from `from` to `to` (a refused move if empty: it ends now),
    /// a move of their own.
    fn begin_move(
        &mut self,
        id: MigrationId,
        from: usize,
        to: usize,
        entities: Vec<usize>,
        by_agent: bool,
    ) {
        let cost = self.move_cost(&entities);
        self.begin_move_taking(id, from, to, entities, by_agent, cost);
    }

    /// Starts moving `entities` from `from` to `to`, a move that takes `cost` (the oracle's
    /// moves of one plan all take the plan's time).
    fn begin_move_taking(
        &mut self,
        id: MigrationId,
        from: usize,
        to: usize,
        entities: Vec<usize>,
        by_agent: bool,
        cost: Duration,
    ) {
        let mut jobs = Vec::new();
        for &e in &entities {
            if !jobs.contains(&self.entities[e].job) {
                jobs.push(self.entities[e].job);
            }
        }
        // A job carries out one reconfiguration at a time: an agent's move of a job that
        // already stands still for another move joins the next one, which begins when that
        // one ends (see [`WhileMoving`] for the other models). The oracle's moves of one
        // instant are one plan, carried out together.
        let now = self.now;
        let under_way = jobs
            .iter()
            .filter_map(|&j| self.jobs[j].pause)
            .map(|(_, end)| end)
            .filter(|end| *end > now)
            .max();
        // The models in which pcmd's busy rule can refuse a move keep the requests.
        let daemons_tracked = by_agent && self.while_moving != WhileMoving::Refused;
        let busy = daemons_tracked && self.daemon_busy(&jobs, from);
        // A resize renumbers the job: a move asked while one is under way is refused as
        // superseded when it ends, whatever ranks it names (docs/malleability.md).
        let resizing = jobs
            .iter()
            .filter_map(|&j| self.jobs[j].resizing)
            .filter(|end| *end > now)
            .max();
        let (at, entities) = match (by_agent, under_way) {
            _ if entities.is_empty() => (now, entities),
            (true, _) if busy => (now, Vec::new()),
            (true, _) if resizing.is_some() => (resizing.unwrap_or(now), Vec::new()),
            (true, Some(end)) if self.while_moving == WhileMoving::Batched => {
                // Join the next reconfiguration, or open it at the end of the one under way;
                // its moves share the nodes' links (see `plan_cost`).
                let job = self.entities[entities[0]].job;
                let (start, mut moves) = self.jobs[job]
                    .next
                    .take()
                    .filter(|(s, _)| *s > now)
                    .unwrap_or((end, Vec::new()));
                moves.extend(entities.iter().map(|&e| (e, from, to)));
                let at = start + self.plan_cost(&moves);
                self.jobs[job].next = Some((start, moves));
                (at, entities)
            }
            (true, Some(end)) if self.while_moving == WhileMoving::Refused => (end, Vec::new()),
            (true, Some(end)) => (end + cost, entities),
            _ => (now + cost, entities),
        };
        if daemons_tracked && !entities.is_empty() {
            for &job in &jobs {
                self.jobs[job].requests_in_flight.push((from, at));
            }
        }
        if !entities.is_empty() {
            for &e in &entities {
                self.entities[e].moving_to = Some(to);
            }
            for job in jobs {
                self.stand_still(job, at);
            }
        }
        self.push(
            at,
            EventKind::MigrationDone {
                id,
                from,
                to,
                entities,
                by_agent,
            },
        );
    }

    fn next_wakeup(&mut self) -> Instant {
        let mut t = self.next_profile;
        if self.balancer == Balancer::Agents {
            t = t.min(self.next_rtt);
        }
        if let Some(Reverse((at, _, _))) = self.events.peek() {
            t = t.min(*at);
        }
        // Drop the timers of killed nodes (their agents never wake again).
        while let Some((at, i)) = self.timers.peek() {
            if self.alive[i] {
                t = t.min(at);
                break;
            }
            self.timers.pop();
        }
        t.max(self.now)
    }

    /// Runs the simulation for `duration` of simulated time.
    ///
    /// # Panics
    /// When the step bound is exceeded, or the clock does not move for 100,000 steps (a
    /// livelock).
    pub fn run_for(&mut self, duration: Duration) {
        let end = self.now + duration;
        self.rearm();
        loop {
            let next = self.next_wakeup();
            if next > end {
                self.now = end;
                return;
            }
            if next == self.now {
                self.steps_now += 1;
            } else {
                self.steps_now = 0;
            }
            self.now = next;
            self.step();
            self.steps += 1;
            if self.steps == self.max_steps || self.steps_now == MAX_STEPS_AT_ONE_INSTANT {
                for (i, n) in self.nodes.iter().enumerate().take(50) {
                    let timeout = n.agent.poll_timeout().map(|t| t - self.epoch);
                    eprintln!(
                        "node {i}: alive {}, next timeout {timeout:?}",
                        self.alive[i]
                    );
                }
            }
            assert!(
                self.steps <= self.max_steps && self.steps_now < MAX_STEPS_AT_ONE_INSTANT,
                "simulation exceeded {} steps, or {} at one instant, at {:?} (seed {})",
                self.max_steps,
                MAX_STEPS_AT_ONE_INSTANT,
                self.elapsed(),
                self.seed
            );
        }
    }

    /// Node `i`'s agent hears node `j`'s host over their connection (identify, in the real
    /// driver). Returns whether it was new to the agent. An agent that already holds this
    /// very host for this peer would return at once, with no effect: skipping the call
    /// then spares two copied names per sample or message.
    fn announce(&mut self, now: Instant, i: usize, j: usize) -> bool {
        if i == j {
            return false;
        }
        // Any host the agent holds for this peer is this very one: here every agent
        // announces only its own node's host, and no two nodes share one, so no other host
        // is ever held for it (nor promoted to it: nothing here reports a peer gone). So
        // whether it holds one at all tells, and the mirror tells that without touching the
        // agent (see [`HeldHosts`]).
        let held = self.held_hosts.get(i, j);
        #[cfg(test)]
        {
            let host = self.nodes[i].agent.peer_host(&self.ids[j]);
            assert_eq!(
                held,
                host.is_some(),
                "the mirror of agent {i}'s hosts is wrong"
            );
            assert!(
                host.is_none_or(|h| *h == self.nodes[j].host),
                "an agent holds another node's host for a peer"
            );
        }
        if held {
            return false;
        }
        let host = self.nodes[j].host.clone();
        let (accepted, evicted) =
            self.nodes[i]
                .agent
                .peer_host_announced(now, self.ids[j].clone(), host);
        if let Some(k) = evicted.as_ref().and_then(|p| self.index_of(p)) {
            self.held_hosts.set(i, k, false);
        }
        if accepted.is_ok() {
            self.held_hosts.set(i, j, true);
        } else {
            self.nodes[i].refused_host = true;
        }
        true
    }

    /// [`Sim::feed_rtt`] of a peer already in agent `i`'s peer table, for an agent that
    /// never refused a host: then it holds that peer's host, and the announcement that
    /// follows the sample would find it held and do nothing, so it is not made. A peer enters
    /// the table only through a sample here, which is followed by its announcement, and that
    /// one was accepted (the agent refused none); an agent drops a host only to make room,
    /// and never the host of a peer in its table. Reading the mirror's bit for every known
    /// peer every RTT round was a cache miss each (3% of the simulator's time at 10,000
    /// nodes).
    fn feed_known_rtt(&mut self, now: Instant, i: usize, j: usize) {
        if i == j {
            return;
        }
        if self.nodes[i].refused_host {
            self.feed_rtt(now, i, j);
            return;
        }
        let rtt = self.reported_rtt.unwrap_or_else(|| self.rtt_between(i, j));
        let _span = tracing::debug_span!("node", i, t = (now - self.epoch).as_secs()).entered();
        self.nodes[i].agent.peer_rtt(now, &self.ids[j], rtt);
        // Every simulation in this crate's tests checks the claim.
        #[cfg(test)]
        assert!(
            self.held_hosts.get(i, j),
            "agent {i} does not hold the host of peer {j} in its table"
        );
        self.drain(i);
    }

    /// Feeds agent `i` one RTT sample of node `j`.
    fn feed_rtt(&mut self, now: Instant, i: usize, j: usize) {
        if i == j {
            return;
        }
        let rtt = self.reported_rtt.unwrap_or_else(|| self.rtt_between(i, j));
        let _span = tracing::debug_span!("node", i, t = (now - self.epoch).as_secs()).entered();
        self.nodes[i].agent.peer_rtt(now, &self.ids[j], rtt);
        // The host comes after the sample (as the real driver re-announces a host on a
        // ping when its table had no room at the connection): a peer the sample puts in
        // the peer table may then take a full host table's place of one outside it.
        self.announce(now, i, j);
        self.drain(i);
    }

    /// A message from node `from` reached node `to`: in the real driver it went over a
    /// connection between them, which announced each agent's host to the other (identify).
    /// Returns whether `from`'s agent learnt a host (it may then have acted: drain it).
    fn connect(&mut self, now: Instant, from: usize, to: usize) -> bool {
        self.announce(now, to, from);
        self.announce(now, from, to)
    }

    /// Node `i` measures `k` random other alive nodes, and they it.
    fn discover(&mut self, i: usize, k: usize) {
        let n = self.nodes.len();
        if n < 2 {
            return;
        }
        let now = self.now;
        for _ in 0..k {
            let j = self.rng.random_range(0..n);
            if j != i && self.alive[j] {
                self.feed_rtt(now, i, j);
                self.feed_rtt(now, j, i);
            }
        }
    }

    /// Agent `i` measures the hosts it asks for ([`Agent::hosts_to_measure`]: its ranks'
    /// partners', and an NSc2c manager's members' ranks' partners'), after each profile
    /// round.
    ///
    /// The driver measures a host over a connection to its agent, which announces each
    /// agent's host to the other (as any connection does, [`Sim::connect`]): the agent then
    /// knows the partner's agent, and may send it a partner steal.
    fn measure_partners(&mut self, i: usize) {
        let now = self.now;
        let hosts = self.nodes[i].agent.hosts_to_measure();
        for host in hosts {
            let Some(j) = self.index_of_host(&host).filter(|&j| self.alive[j]) else {
                continue;
            };
            let rtt = self.reported_rtt.unwrap_or_else(|| self.rtt_between(i, j));
            self.nodes[i].agent.handle_partner_rtt(&host, rtt);
            if self.connect(now, j, i) {
                self.drain(j);
            }
        }
    }

    fn rtt_round(&mut self, now: Instant) {
        match self.discovery {
            None => {
                for i in 0..self.nodes.len() {
                    for j in 0..self.nodes.len() {
                        let linked = self
                            .links
                            .as_ref()
                            .is_none_or(|linked| linked(i.min(j), i.max(j)));
                        if i != j && self.alive[i] && self.alive[j] && linked {
                            self.feed_rtt(now, i, j);
                        }
                    }
                }
            }
            Some(k) => {
                for i in 0..self.nodes.len() {
                    if !self.alive[i] {
                        continue;
                    }
                    let known: Vec<usize> = self.nodes[i]
                        .agent
                        .peers()
                        .by_rtt()
                        .filter_map(|(p, _)| self.index_of(p))
                        .filter(|&j| self.alive[j])
                        .collect();
                    for j in known {
                        self.feed_known_rtt(now, i, j);
                    }
                    self.discover(i, k);
                }
            }
        }
    }

    fn step(&mut self) {
        let now = self.now;
        if self.balancer == Balancer::Agents && now >= self.next_rtt {
            self.next_rtt = now + self.rtt_period;
            self.rtt_round(now);
        }
        if now >= self.next_profile {
            self.next_profile = now + self.profile_period;
            self.profile_round(now);
            if let Balancer::Oracle { period } = self.balancer {
                if now >= self.next_oracle {
                    self.next_oracle = now + period;
                    self.oracle(now);
                }
            }
        }
        while self
            .events
            .peek()
            .is_some_and(|Reverse((at, _, _))| *at <= now)
        {
            let Some(Reverse((_, _, slot))) = self.events.pop() else {
                break;
            };
            let Some(kind) = self.payloads[slot].take() else {
                continue;
            };
            self.free_payloads.push(slot);
            match kind {
                EventKind::Deliver { to, from, message } => {
                    if self.alive[to] && self.alive[from] {
                        let _span =
                            tracing::debug_span!("node", i = to, t = (now - self.epoch).as_secs())
                                .entered();
                        let from_learnt = self.connect(now, from, to);
                        let peer = self.ids[from].clone();
                        self.nodes[to].agent.handle_message(now, peer, message);
                        self.drain(to);
                        if from_learnt {
                            self.drain(from);
                        }
                    }
                }
                EventKind::MigrationDone {
                    id,
                    from,
                    to,
                    entities,
                    by_agent,
                } => self.finish_migration(id, from, to, entities, by_agent),
                EventKind::ResizeDone(pending) => self.finish_resize(pending),
            }
        }
        self.rearm();
        // Agents whose timer is due, in index order.
        let mut due = Vec::new();
        while let Some((at, i)) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            self.nodes[i].armed = None;
            due.push(i);
        }
        due.sort_unstable();
        for i in due {
            if self.alive[i] && self.nodes[i].agent.poll_timeout().is_some_and(|t| t <= now) {
                let _span =
                    tracing::debug_span!("node", i, t = (now - self.epoch).as_secs()).entered();
                self.nodes[i].agent.handle_timeout(now);
                self.drain(i);
            } else {
                self.mark(i);
            }
        }
        self.rearm();
    }

    fn finish_migration(
        &mut self,
        id: MigrationId,
        from: usize,
        to: usize,
        entities: Vec<usize>,
        by_agent: bool,
    ) {
        let now = self.now;
        let at = self.elapsed();
        let ok = !entities.is_empty() && self.alive[to];
        for &e in &entities {
            self.entities[e].moving_to = None;
            if ok {
                let old = self.entities[e].node;
                self.nodes[old].entities.retain(|&x| x != e);
                self.nodes[to].entities.push(e);
                let entity = &mut self.entities[e];
                entity.node = to;
                entity.arrived = Some(now);
                self.migrations.push(MigrationRecord {
                    at,
                    entity_index: e,
                    entity: entity.id.clone(),
                    from,
                    to,
                });
            }
        }
        if by_agent && self.alive[from] {
            let outcome = if ok {
                MigrationOutcome::Completed
            } else {
                MigrationOutcome::Failed {
                    reason: "refused or destination gone".into(),
                }
            };
            self.nodes[from]
                .agent
                .handle_migration_outcome(now, id, outcome);
            self.drain(from);
        }
    }

    /// The central oracle: see [`Balancer::Oracle`].
    fn oracle(&mut self, now: Instant) {
        const CANDIDATES: usize = 64;
        let hold_down = self.config.hold_down();
        let bg: Vec<f64> = (0..self.nodes.len()).map(|i| self.background(i)).collect();
        let mut counts: Vec<usize> = self.nodes.iter().map(|n| n.entities.len()).collect();
        // Ranks under way count where they go: a plan that gathers a job onto a node takes
        // longer than a period, and the next periods must not fill that node meanwhile.
        for e in &self.entities {
            if let Some(to) = e.moving_to {
                counts[e.node] -= 1;
                counts[to] += 1;
            }
        }
        // A copy, as `nodes` is passed to the closures below: they outlive moves begun.
        let alive = self.alive.clone();
        let usable = |nodes: &[Node], i: usize| alive[i] && !nodes[i].leaving;
        // Compute speed each entity gets on node `i` holding `k` entities.
        let eff = |nodes: &[Node], i: usize, k: usize| -> f64 {
            let n = &nodes[i];
            if !usable(nodes, i) {
                return 1e-9;
            }
            n.speed * Self::share(n.cores, bg[i], k)
        };
        let mut candidates: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| usable(&self.nodes, i))
            .collect();
        let rank_nodes = |c: &mut Vec<usize>, counts: &[usize], nodes: &[Node]| {
            c.sort_by(|&a, &b| {
                eff(nodes, b, counts[b] + 1)
                    .total_cmp(&eff(nodes, a, counts[a] + 1))
                    .then(a.cmp(&b))
            });
        };
        rank_nodes(&mut candidates, &counts, &self.nodes);
        candidates.truncate(CANDIDATES);
        let mut order: Vec<usize> = (0..self.jobs.len()).collect();
        order.sort_by(|&a, &b| {
            self.jobs[b]
                .iteration
                .total_cmp(&self.jobs[a].iteration)
                .then(a.cmp(&b))
        });
        let budget = (self.entities.len() / 50).max(1);
        let mut moves = 0;
        for j in order {
            if moves >= budget {
                break;
            }
            if self.jobs[j].resizing.is_some()
                || self.jobs[j]
                    .ranks
                    .iter()
                    .any(|&e| self.entities[e].moving_to.is_some())
            {
                continue;
            }
            let start: Vec<usize> = self.jobs[j]
                .ranks
                .iter()
                .map(|&e| self.entities[e].node)
                .collect();
            let mut options: Vec<usize> = candidates.clone();
            options.extend(&start);
            let mut seeds = start.clone();
            // Also the whole job gathered around the nodes with the most CPU per rank: on
            // the Grid-like network a job that starts in a slow cluster gains most there,
            // and no move of one rank out of its cluster pays for the latency it adds.
            seeds.extend(candidates.iter().take(ORACLE_FAST_SEEDS));
            seeds.sort_unstable();
            seeds.dedup();
            let mut groups: Vec<Vec<usize>> = Vec::with_capacity(seeds.len());
            for &seed in &seeds {
                let mut group = vec![seed];
                group.extend(self.near(seed));
                group.retain(|&m| usable(&self.nodes, m));
                options.extend(&group);
                groups.push(group);
            }
            options.sort_unstable();
            options.dedup();
            options.retain(|&m| usable(&self.nodes, m));
            let job = &self.jobs[j];
            // Held ranks stay, unless their node is going.
            let movable: Vec<bool> = job
                .ranks
                .iter()
                .zip(&start)
                .map(|(&e, &node)| {
                    !usable(&self.nodes, node)
                        || self.entities[e]
                            .arrived
                            .is_none_or(|t| now >= t + hold_down)
                })
                .collect();
            let rank_work = job.rank_work;
            let compute = |k: usize, place: &[usize], counts: &[usize]| {
                rank_work / eff(&self.nodes, place[k], counts[place[k]])
            };
            let mut plan = OraclePlan::new(self, job, start.clone(), &counts, compute);
            let current = plan.cost.0;
            plan.improve(self, &movable, &options, &mut counts, compute);
            shift(&mut counts, &plan.place, &start);
            // What a placement of this job adds to the pool's iterations per second: its own
            // rate, and that of the jobs sharing the nodes it leaves or joins.
            let gain = |place: &[usize], counts: &mut [usize]| -> f64 {
                let mut touched: Vec<usize> = Vec::new();
                for (&a, &b) in start.iter().zip(place) {
                    if a != b {
                        for n in [a, b] {
                            touched.extend(
                                self.nodes[n].entities.iter().map(|&e| self.entities[e].job),
                            );
                        }
                    }
                }
                touched.sort_unstable();
                touched.dedup();
                touched.retain(|&o| o != j);
                let others = |counts: &[usize]| -> f64 {
                    touched
                        .iter()
                        .map(|&o| {
                            let t = self.job_iteration(
                                &self.jobs[o],
                                |e| {
                                    let n = self.entities[e].node;
                                    self.jobs[o].rank_work / eff(&self.nodes, n, counts[n])
                                },
                                |e| self.entities[e].node,
                            );
                            1.0 / t
                        })
                        .sum()
                };
                let before = others(counts) + 1.0 / current;
                shift(counts, &start, place);
                let t = OraclePlan::new(self, job, place.to_vec(), counts, compute)
                    .cost
                    .0;
                let after = others(counts) + 1.0 / t;
                shift(counts, place, &start);
                after - before
            };
            let moves_of = |p: &[usize]| p.iter().zip(&start).filter(|(a, b)| a != b).count();
            let mut best = (gain(&plan.place, &mut counts), plan.place.clone());
            // Rank-by-rank moves rarely pull a job out of a far cluster whose nodes are
            // busy: the first moves lengthen the iteration. So also the whole job gathered
            // near each of its nodes, weighed as one plan.
            for (group, tight) in groups.iter().flat_map(|g| [(g, false), (g, true)]) {
                let place = gather(&start, &movable, group, &mut counts, tight, |m, k| {
                    eff(&self.nodes, m, k)
                });
                shift(&mut counts, &place, &start);
                let g = gain(&place, &mut counts);
                if g > best.0 || (g == best.0 && moves_of(&place) < moves_of(&best.1)) {
                    best = (g, place);
                }
            }
            let (gain, place) = best;
            let moved: Vec<(usize, usize, usize)> = (0..start.len())
                .filter(|&k| place[k] != start[k])
                .map(|k| (job.ranks[k], start[k], place[k]))
                .collect();
            let cost = self.plan_cost(&moved);
            let pause = cost.as_secs_f64();
            // At least a tenth of this job's rate, and over the horizon more iterations than
            // the job loses standing still.
            let worth = !moved.is_empty()
                && gain >= 0.1 / current
                && gain * ORACLE_HORIZON.as_secs_f64() >= pause / current
                && (moves == 0 || moves + moved.len() <= budget);
            // A malleable job may be resized instead (see [`resize`]), under the same rule.
            let resize = if job.malleable.is_some()
                && job.last_resize.is_none_or(|t| now >= t + hold_down)
            {
                let room = |m: usize, k: usize| {
                    usable(&self.nodes, m) && bg[m] + k as f64 <= self.nodes[m].cores
                };
                self.oracle_resize(
                    j,
                    &start,
                    current,
                    &options,
                    &candidates,
                    &mut counts,
                    &eff,
                    &room,
                )
                .filter(|r| {
                    let steps = r.added.len() + r.departing.len();
                    r.gain >= 0.1 / current
                        && r.gain * ORACLE_HORIZON.as_secs_f64() >= r.pause / current
                        && (moves == 0 || moves + steps <= budget)
                        && (!worth || r.gain > gain)
                })
            } else {
                None
            };
            if let Some(r) = resize {
                moves += r.added.len() + r.departing.len();
                self.begin_oracle_resize(j, r, &mut counts);
                rank_nodes(&mut candidates, &counts, &self.nodes);
                continue;
            }
            if !worth {
                continue;
            }
            shift(&mut counts, &start, &place);
            for (e, from, to) in moved {
                moves += 1;
                self.oracle_ids += 1;
                let id = MigrationId(self.oracle_ids);
                self.begin_move_taking(id, from, to, vec![e], false, cost);
            }
            rank_nodes(&mut candidates, &counts, &self.nodes);
        }
    }

    /// The oracle's nearest nodes to `node` by RTT (computed once, then kept).
    fn near(&mut self, node: usize) -> Vec<usize> {
        const NEAR: usize = 16;
        if self.oracle_near.len() < self.nodes.len() {
            self.oracle_near.resize(self.nodes.len(), None);
        }
        if let Some(near) = &self.oracle_near[node] {
            return near.clone();
        }
        let mut by_rtt: Vec<(Duration, usize)> = (0..self.nodes.len())
            .filter(|&j| j != node)
            .map(|j| (self.rtt_between(node, j), j))
            .collect();
        let keep = NEAR.min(by_rtt.len());
        if keep > 0 {
            by_rtt.select_nth_unstable(keep - 1);
        }
        by_rtt.truncate(keep);
        by_rtt.sort_unstable();
        let near: Vec<usize> = by_rtt.into_iter().map(|(_, j)| j).collect();
        self.oracle_near[node] = Some(near.clone());
        near
    }

    /// Seconds a move of `entities` from one node to another takes (and their job stands
    /// still): every state crosses both nodes' links.
    fn move_cost(&self, entities: &[usize]) -> Duration {
        let bytes: u64 = entities.iter().map(|&e| self.entities[e].state_bytes).sum();
        self.spawn + Duration::from_secs_f64(bytes as f64 / self.bandwidth)
    }

    /// Seconds a plan of moves `(entity, from, to)` carried out together takes: the
    /// replacements start at once, and the states cross the nodes' links in parallel, so
    /// the busiest link sets the time. Ranks gathered from several nodes onto one all
    /// enter through its link, one after another.
    fn plan_cost(&self, moved: &[PlannedMove]) -> Duration {
        let mut through: HashMap<usize, u64> = HashMap::new();
        for &(e, from, to) in moved {
            for node in [from, to] {
                *through.entry(node).or_default() += self.entities[e].state_bytes;
            }
        }
        let busiest = through.values().copied().max().unwrap_or(0);
        self.spawn + Duration::from_secs_f64(busiest as f64 / self.bandwidth)
    }
}

/// Moves one count per rank from its node in `from` to its node in `to`.
fn shift(counts: &mut [usize], from: &[usize], to: &[usize]) {
    for (&a, &b) in from.iter().zip(to) {
        if a != b {
            counts[a] -= 1;
            counts[b] += 1;
        }
    }
}

/// A job's ranks gathered onto `group` (its seed first, then the nodes nearest the seed):
/// the movable ranks outside the group go one at a time to the group's node where they
/// compute fastest (`eff(node, count)`), the nearer to the seed on a tie. With `tight`, a
/// movable rank inside the group but off the seed also goes to the seed if it computes
/// there at least as fast: ranks on one node exchange at no latency, where two nodes near
/// the seed may be far from each other. `counts` are left as the placement has them.
fn gather(
    start: &[usize],
    movable: &[bool],
    group: &[usize],
    counts: &mut [usize],
    tight: bool,
    eff: impl Fn(usize, usize) -> f64,
) -> Vec<usize> {
    let mut place = start.to_vec();
    let Some(&seed) = group.first() else {
        return place;
    };
    for k in 0..start.len() {
        if !movable[k] || start[k] == seed {
            continue;
        }
        if group.contains(&start[k]) {
            if tight && eff(seed, counts[seed] + 1) >= eff(start[k], counts[start[k]]) {
                counts[start[k]] -= 1;
                counts[seed] += 1;
                place[k] = seed;
            }
            continue;
        }
        // `group` is in order of nearness: the first of the fastest.
        let Some(&m) = group
            .iter()
            .rev()
            .max_by(|&&a, &&b| eff(a, counts[a] + 1).total_cmp(&eff(b, counts[b] + 1)))
        else {
            continue;
        };
        counts[start[k]] -= 1;
        counts[m] += 1;
        place[k] = m;
    }
    place
}

/// How far ahead the oracle looks when it weighs a plan's pauses against its gain.
const ORACLE_HORIZON: Duration = Duration::from_secs(600);

/// The oracle's placement of one job's ranks while it plans (ranks by position in the job).
struct OraclePlan<'j> {
    place: Vec<usize>,
    /// For each rank, the edges it is on, as (edge index, partner position).
    incident: Vec<Vec<(usize, usize)>>,
    /// One-way latency of each edge under `place`, seconds.
    latency: Vec<f64>,
    /// The job's exchanges (the edges' rounds).
    exchanges: &'j Exchanges,
    /// (iteration seconds, summed edge latency): the plan lowers the first, and the second
    /// when the first does not move, so that a job spread far can be gathered a rank at a
    /// time although one move alone seldom shortens its longest exchange.
    cost: (f64, f64),
}

impl<'j> OraclePlan<'j> {
    fn new(
        sim: &Sim,
        job: &'j Job,
        place: Vec<usize>,
        counts: &[usize],
        compute: impl Fn(usize, &[usize], &[usize]) -> f64,
    ) -> Self {
        let position = |e: usize| job.ranks.iter().position(|&x| x == e).unwrap_or(0);
        let mut incident = vec![Vec::new(); place.len()];
        let mut latency = Vec::with_capacity(job.exchanges.pairs.len());
        for (i, &(a, b)) in job.exchanges.pairs.iter().enumerate() {
            let (pa, pb) = (position(a), position(b));
            incident[pa].push((i, pb));
            incident[pb].push((i, pa));
            latency.push((sim.rtt_between(place[pa], place[pb]) / 2).as_secs_f64());
        }
        let mut plan = Self {
            place,
            incident,
            latency,
            exchanges: &job.exchanges,
            cost: (0.0, 0.0),
        };
        plan.cost = plan.evaluate(counts, &compute, None);
        plan
    }

    /// The cost of the plan, or with rank `trial.0` on `trial.1` (counts already moved) and
    /// `trial.2` its edges' latencies.
    fn evaluate(
        &self,
        counts: &[usize],
        compute: &impl Fn(usize, &[usize], &[usize]) -> f64,
        trial: Option<(usize, &[f64])>,
    ) -> (f64, f64) {
        let slowest = (0..self.place.len())
            .map(|k| compute(k, &self.place, counts))
            .fold(0.0, f64::max);
        let latency = |i: usize| {
            let l = self.latency[i];
            match trial {
                Some((k, new)) => self.incident[k]
                    .iter()
                    .position(|&(edge, _)| edge == i)
                    .map_or(l, |n| new[n]),
                None => l,
            }
        };
        let sum = (0..self.latency.len()).map(latency).sum();
        (slowest + self.exchanges.seconds(latency), sum)
    }

    /// Moves one rank at a time, each at most once, while the cost falls.
    fn improve(
        &mut self,
        sim: &Sim,
        movable: &[bool],
        options: &[usize],
        counts: &mut [usize],
        compute: impl Fn(usize, &[usize], &[usize]) -> f64,
    ) {
        let mut moved = vec![false; self.place.len()];
        let mut new_latency = Vec::new();
        loop {
            let mut best: Option<((f64, f64), usize, usize)> = None;
            for k in 0..self.place.len() {
                if moved[k] || !movable[k] {
                    continue;
                }
                let from = self.place[k];
                for &m in options {
                    if m == from {
                        continue;
                    }
                    new_latency.clear();
                    new_latency.extend(self.incident[k].iter().map(|&(_, partner)| {
                        (sim.rtt_between(m, self.place[partner]) / 2).as_secs_f64()
                    }));
                    counts[from] -= 1;
                    counts[m] += 1;
                    self.place[k] = m;
                    let cost = self.evaluate(counts, &compute, Some((k, &new_latency)));
                    self.place[k] = from;
                    counts[m] -= 1;
                    counts[from] += 1;
                    if best.is_none_or(|(b, _, _)| cost < b) {
                        best = Some((cost, k, m));
                    }
                }
            }
            let Some((cost, k, m)) = best.filter(|&(cost, _, _)| cost < self.cost) else {
                return;
            };
            let from = self.place[k];
            counts[from] -= 1;
            counts[m] += 1;
            self.place[k] = m;
            for &(edge, partner) in &self.incident[k] {
                self.latency[edge] = (sim.rtt_between(m, self.place[partner]) / 2).as_secs_f64();
            }
            moved[k] = true;
            self.cost = cost;
        }
    }
}

#[cfg(test)]
mod tests;
