//! The agent state machine: NSp2p work stealing (section 5.2) and, with
//! [`Topology::ClusterToCluster`], the NSc2c logic of [`crate::c2c`] on the same type.
//!
//! Methods come in four kinds, in this order: getters, `handle_*` inputs (each takes `now`),
//! and the `#[must_use]` outputs [`Agent::poll_action`] and [`Agent::poll_timeout`].

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pcm_proto::{HostName, JobId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod resizing;

use crate::c2c::Cluster;
use crate::decision::{self, Destination, Policy};
use crate::message::{HostRtt, Message, MessageId, MigrationId, MAX_ENTITIES, MAX_RTTS, MAX_TTL};
use crate::model::{
    EntityId, EntityProfile, JobOffer, MigrationCostModel, NodeProfile, Resource, RttLookup,
    RttView, Unmeasured, Weights, DEFAULT_UNKNOWN_RTT,
};
use crate::resize::ResizeCostModel;
use crate::tier::{IdMap, LatencyTier, PeerId, PeerTable, LOCAL_MAX_RTT};

/// How often the driver should sample the node and its entities, and how often an NSc2c
/// manager polls its members: 2 s (Brunner and Kale sample every 2 s).
pub const DEFAULT_PROFILE_PERIOD: Duration = Duration::from_secs(2);
/// Pause between two work-steal rounds of a lightly loaded agent.
pub const DEFAULT_STEAL_PERIOD: Duration = Duration::from_secs(2);
/// How long the origin of a work steal waits for an answer before trying the next tier.
pub const DEFAULT_STEAL_TIMEOUT: Duration = Duration::from_secs(2);
/// Hops a work-steal packet makes before it is given up.
pub const DEFAULT_RRP_TTL: u8 = 4;
/// Furthest tier a work steal escalates to.
pub const DEFAULT_MAX_TIER: LatencyTier = LatencyTier::Global;
/// Pause after a round in which no tier gave work; doubles after each such round.
///
/// Short on purpose: an idle node learns that work appeared elsewhere only by asking, so the
/// pause bounds how fast the pool reacts to load onset (target: a migration within 5 s),
/// while a round costs a few packets of about 200 bytes.
pub const DEFAULT_STEAL_BACKOFF: Duration = Duration::from_secs(2);
/// Longest pause between rounds (see [`DEFAULT_STEAL_BACKOFF`]).
pub const DEFAULT_MAX_STEAL_BACKOFF: Duration = Duration::from_secs(4);
/// Damping: an entity that moved (or was ordered to) does not move again for this long.
pub const DEFAULT_HOLD_DOWN: Duration = Duration::from_secs(60);
/// A malleable job's ranks slowed by competing load here, and taken by no idle node for
/// this long, are shed by shrinking the job: three of the longest steal back-offs, so that
/// every light node of the pool has had a round to ask for them first.
pub const DEFAULT_SHED_AFTER: Duration = Duration::from_secs(12);
/// A node with at least this many idle cores is lightly loaded and steals work.
pub const DEFAULT_LIGHT_THRESHOLD: f64 = 0.5;
/// Smallest gain (Figure 3) worth a migration.
pub const DEFAULT_MIN_GAIN: f64 = 0.1;
/// Largest group moved at once; 1 is single migration (group migration can thrash under
/// fluctuating load, section 5.2).
pub const DEFAULT_MAX_GROUP: usize = 1;
/// Cores one entity can use at most, in the model ([`Config::with_entity_cores`]): one, an
/// MPI rank with one thread. Without this cap (the paper's model) every rank of the scale
/// experiment moved once per hold-down, drawn on by the next idle many-core node.
pub const DEFAULT_ENTITY_CORES: Option<f64> = Some(1.0);
/// How long a migration may take before the agent stops waiting for its outcome.
pub const DEFAULT_MIGRATION_TIMEOUT: Duration = Duration::from_secs(60);
/// NSc2c heartbeat period.
pub const DEFAULT_HEARTBEAT_PERIOD: Duration = Duration::from_secs(1);
/// NSc2c: a cluster member unheard for this long is taken as dead (the manager too).
pub const DEFAULT_MEMBER_TIMEOUT: Duration = Duration::from_secs(5);
/// A peer without an RTT sample for this long is forgotten.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(60);
/// Most peers kept in the peer table.
pub const DEFAULT_MAX_PEERS: usize = 256;
/// Most actions queued before further sends are dropped (migrations are never dropped).
pub const MAX_PENDING_ACTIONS: usize = 1024;
/// Work-steal ids remembered to recognise a packet seen before.
const MAX_SEEN: usize = 1024;

/// Virtual topology of the agents of a pool (section 5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Topology {
    /// NSp2p: every agent steals work from peers, nearest tier first.
    #[default]
    PeerToPeer,
    /// NSc2c: agents with local latency form a cluster with an elected manager, which
    /// balances inside the cluster and acts as an NSp2p peer towards other clusters.
    ClusterToCluster,
}

/// Agent settings. Every default is a named constant of this module.
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) topology: Topology,
    pub(crate) weights: Weights,
    pub(crate) cost: MigrationCostModel,
    pub(crate) min_gain: f64,
    pub(crate) max_group: usize,
    pub(crate) profile_period: Duration,
    pub(crate) steal_period: Duration,
    pub(crate) steal_timeout: Duration,
    pub(crate) rrp_ttl: u8,
    pub(crate) max_tier: LatencyTier,
    pub(crate) steal_backoff: Duration,
    pub(crate) max_steal_backoff: Duration,
    pub(crate) hold_down: Duration,
    pub(crate) light_threshold: f64,
    pub(crate) migration_timeout: Duration,
    pub(crate) heartbeat_period: Duration,
    pub(crate) member_timeout: Duration,
    pub(crate) peer_timeout: Duration,
    pub(crate) max_peers: usize,
    pub(crate) entity_cores: Option<f64>,
    pub(crate) gather: bool,
    pub(crate) resizes: bool,
    pub(crate) resize_cost: ResizeCostModel,
    pub(crate) shed_after: Duration,
    pub(crate) seed: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            topology: Topology::PeerToPeer,
            weights: Weights::default(),
            cost: MigrationCostModel::default(),
            min_gain: DEFAULT_MIN_GAIN,
            max_group: DEFAULT_MAX_GROUP,
            profile_period: DEFAULT_PROFILE_PERIOD,
            steal_period: DEFAULT_STEAL_PERIOD,
            steal_timeout: DEFAULT_STEAL_TIMEOUT,
            rrp_ttl: DEFAULT_RRP_TTL,
            max_tier: DEFAULT_MAX_TIER,
            steal_backoff: DEFAULT_STEAL_BACKOFF,
            max_steal_backoff: DEFAULT_MAX_STEAL_BACKOFF,
            hold_down: DEFAULT_HOLD_DOWN,
            light_threshold: DEFAULT_LIGHT_THRESHOLD,
            migration_timeout: DEFAULT_MIGRATION_TIMEOUT,
            heartbeat_period: DEFAULT_HEARTBEAT_PERIOD,
            member_timeout: DEFAULT_MEMBER_TIMEOUT,
            peer_timeout: DEFAULT_PEER_TIMEOUT,
            max_peers: DEFAULT_MAX_PEERS,
            entity_cores: DEFAULT_ENTITY_CORES,
            gather: true,
            resizes: true,
            resize_cost: ResizeCostModel::default(),
            shed_after: DEFAULT_SHED_AFTER,
            seed: None,
        }
    }
}

/// A setting out of range, named.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A period or timeout is zero.
    #[error("{name} must be longer than 0")]
    ZeroDuration {
        /// The setting.
        name: &'static str,
    },
    /// A number is out of its range.
    #[error("{name} = {value} out of range: {range}")]
    OutOfRange {
        /// The setting.
        name: &'static str,
        /// Its value.
        value: f64,
        /// The accepted range.
        range: &'static str,
    },
}

macro_rules! setter {
    ($(#[$doc:meta])* $name:ident, $field:ident: $ty:ty) => {
        $(#[$doc])*
        pub fn $name(mut self, $field: $ty) -> Self {
            self.$field = $field;
            self
        }
    };
}

impl Config {
    setter!(
        /// Virtual topology; default [`Topology::PeerToPeer`].
        with_topology, topology: Topology);
    setter!(
        /// Resource weights; default [`Weights::CPU_ONLY`].
        with_weights, weights: Weights);
    setter!(
        /// Migration cost predictor; default [`MigrationCostModel::default`].
        with_cost_model, cost: MigrationCostModel);
    setter!(
        /// Smallest gain worth a move; default [`DEFAULT_MIN_GAIN`]. Must be in [0, 1].
        with_min_gain, min_gain: f64);
    setter!(
        /// Largest group per migration; default [`DEFAULT_MAX_GROUP`] (single migration).
        with_max_group, max_group: usize);
    setter!(
        /// Profile sampling and NSc2c poll period; default [`DEFAULT_PROFILE_PERIOD`].
        with_profile_period, profile_period: Duration);
    setter!(
        /// Pause between steal rounds; default [`DEFAULT_STEAL_PERIOD`].
        with_steal_period, steal_period: Duration);
    setter!(
        /// Wait per tier for an answer; default [`DEFAULT_STEAL_TIMEOUT`].
        with_steal_timeout, steal_timeout: Duration);
    setter!(
        /// TTL of work-steal packets; default [`DEFAULT_RRP_TTL`], at most [`MAX_TTL`].
        with_rrp_ttl, rrp_ttl: u8);
    setter!(
        /// Furthest tier of escalation; default [`DEFAULT_MAX_TIER`].
        with_max_tier, max_tier: LatencyTier);
    setter!(
        /// First pause after a fruitless round; default [`DEFAULT_STEAL_BACKOFF`].
        with_steal_backoff, steal_backoff: Duration);
    setter!(
        /// Longest pause between rounds; default [`DEFAULT_MAX_STEAL_BACKOFF`].
        with_max_steal_backoff, max_steal_backoff: Duration);
    setter!(
        /// Damping time per entity; default [`DEFAULT_HOLD_DOWN`].
        with_hold_down, hold_down: Duration);
    setter!(
        /// Idle cores that make a node lightly loaded; default [`DEFAULT_LIGHT_THRESHOLD`].
        with_light_threshold, light_threshold: f64);
    setter!(
        /// Wait for a migration's outcome; default [`DEFAULT_MIGRATION_TIMEOUT`].
        with_migration_timeout, migration_timeout: Duration);
    setter!(
        /// NSc2c heartbeat period; default [`DEFAULT_HEARTBEAT_PERIOD`].
        with_heartbeat_period, heartbeat_period: Duration);
    setter!(
        /// NSc2c failure timeout; default [`DEFAULT_MEMBER_TIMEOUT`].
        with_member_timeout, member_timeout: Duration);
    setter!(
        /// Peer expiry; default [`DEFAULT_PEER_TIMEOUT`].
        with_peer_timeout, peer_timeout: Duration);
    setter!(
        /// Peer table size; default [`DEFAULT_MAX_PEERS`].
        with_max_peers, max_peers: usize);
    setter!(
        /// Whether a lightly loaded agent (in NSc2c: a manager, for a light member) also
        /// steals from the agents of its ranks' far partners (a *partner steal*, see
        /// [`Agent::handle_timeout`]), so that a job spread over far nodes gathers near its
        /// own ranks; default on. Off, work goes only between agents of one peer table.
        with_gather, gather: bool);
    setter!(
        /// Whether the agent grows and shrinks malleable jobs ([`crate::resize`]): grows a
        /// job whose rank 0 runs here onto an idle node that asks for work, and shrinks a
        /// job off this node when it is loaded or leaving and no idle node takes its
        /// ranks. Default on; off, malleable jobs are only migrated, as the others.
        with_resizes, resizes: bool);
    setter!(
        /// Resize cost predictor; default [`ResizeCostModel::default`].
        with_resize_cost_model, resize_cost: ResizeCostModel);
    setter!(
        /// How long competing load must slow a malleable job's ranks here, with no idle
        /// node taking them, before the agent sheds them by shrinking the job; default
        /// [`DEFAULT_SHED_AFTER`].
        with_shed_after, shed_after: Duration);

    /// Cores one entity can use at most (an MPI rank with one thread: 1.0): a
    /// destination's idle CPU then counts only up to that much per entity moved
    /// ([`crate::decision::Policy::entity_cores`]). Default [`DEFAULT_ENTITY_CORES`], one
    /// core; `None` is the paper's model, in which an idle many-core node draws a rank away
    /// from a core it has to itself (the scale experiment measured the thrashing that causes;
    /// docs/results-log.md, "Scale").
    pub fn with_entity_cores(mut self, cores: Option<f64>) -> Self {
        self.entity_cores = cores;
        self
    }

    /// Seeds the random choices (peer picks, message ids) so that a run can be replayed;
    /// by default the RNG is seeded from the operating system.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The virtual topology.
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// The profile period the driver should sample at.
    pub fn profile_period(&self) -> Duration {
        self.profile_period
    }

    /// The damping time.
    pub fn hold_down(&self) -> Duration {
        self.hold_down
    }

    /// Checks every setting; [`Agent::new`] calls it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, d) in [
            ("profile_period", self.profile_period),
            ("steal_period", self.steal_period),
            ("steal_timeout", self.steal_timeout),
            ("steal_backoff", self.steal_backoff),
            ("max_steal_backoff", self.max_steal_backoff),
            ("migration_timeout", self.migration_timeout),
            ("heartbeat_period", self.heartbeat_period),
            ("member_timeout", self.member_timeout),
            ("peer_timeout", self.peer_timeout),
            ("shed_after", self.shed_after),
        ] {
            if d.is_zero() {
                return Err(ConfigError::ZeroDuration { name });
            }
        }
        let range = |name, value: f64, ok: bool, range| {
            if ok {
                Ok(())
            } else {
                Err(ConfigError::OutOfRange { name, value, range })
            }
        };
        range(
            "min_gain",
            self.min_gain,
            (0.0..=1.0).contains(&self.min_gain),
            "0 to 1",
        )?;
        range(
            "light_threshold",
            self.light_threshold,
            self.light_threshold.is_finite() && self.light_threshold > 0.0,
            "> 0 cores",
        )?;
        range(
            "rrp_ttl",
            f64::from(self.rrp_ttl),
            (1..=MAX_TTL).contains(&self.rrp_ttl),
            "1 to 32",
        )?;
        if let Some(c) = self.entity_cores {
            range("entity_cores", c, c.is_finite() && c > 0.0, "> 0 cores")?;
        }
        range(
            "max_group",
            self.max_group as f64,
            (1..=MAX_ENTITIES).contains(&self.max_group),
            "1 to 1024",
        )?;
        range(
            "max_peers",
            self.max_peers as f64,
            self.max_peers >= 1,
            ">= 1",
        )?;
        range(
            "member_timeout",
            self.member_timeout.as_secs_f64(),
            self.member_timeout > self.heartbeat_period,
            "longer than heartbeat_period",
        )?;
        Ok(())
    }
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send `message` to the agent `to`.
    Send {
        /// Destination agent.
        to: PeerId,
        /// The message.
        message: Message,
    },
    /// Ask the local pcmd to move these registered entities (all of one job) to `to_host`;
    /// report the end with [`Agent::handle_migration_outcome`] and the same `id`.
    Migrate {
        /// Migration id; pass it to pcmd so that a repeated request is carried out once.
        id: MigrationId,
        /// The entities, all of one job.
        entities: Vec<EntityId>,
        /// Destination agent.
        to: PeerId,
        /// Destination host, as the MPI runtime knows it.
        to_host: HostName,
    },
    /// Ask the local pcmd to resize `job` (a malleable job with a rank on this node) to
    /// `ranks` ranks (docs/malleability.md): growing, the added processes go to `hosts`;
    /// shrinking, the ranks on `hosts` leave. Report the end with
    /// [`Agent::handle_migration_outcome`] and the same `id`.
    Resize {
        /// Id of the reconfiguration; pass it to pcmd as a migration's.
        id: MigrationId,
        /// The job.
        job: JobId,
        /// Its width now, as this agent knows it.
        from: u32,
        /// Its width after.
        ranks: u32,
        /// Hosts of the added processes (growing) or given back (shrinking).
        hosts: Vec<HostName>,
        /// Why: what the model predicted, for logs and `ios-agent status`.
        reason: ResizeReason,
    },
}

/// Why an agent resizes a job ([`Action::Resize`]); `ios-agent status` shows it with its
/// decisions.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResizeReason {
    /// An idle node asked for work (a work steal) and the job runs faster wider
    /// ([`crate::resize`]); the added ranks go to that node.
    Grow {
        /// The model's gain.
        gain: f64,
    },
    /// Competing load on this node slows the job's ranks here and no idle node took them
    /// within [`Config::shed_after`]: the job runs faster without them.
    Shed {
        /// The model's gain.
        gain: f64,
    },
    /// This node is leaving the pool and no idle node took the job's ranks here.
    Leave,
}

impl std::fmt::Display for ResizeReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResizeReason::Grow { gain } => {
                write!(f, "an idle node asked for work; gain {gain:.2}")
            }
            ResizeReason::Shed { gain } => {
                write!(f, "competing load on this node; gain {gain:.2}")
            }
            ResizeReason::Leave => f.write_str("this node is leaving the pool"),
        }
    }
}

/// How a migration ended, as pcmd reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrationOutcome {
    /// The entities run at the destination.
    Completed,
    /// Nothing moved.
    Failed {
        /// Why.
        reason: String,
    },
}

/// Counters, for tests, status output and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages queued for sending.
    pub messages_sent: u64,
    /// Work-steal packets this agent started (one per tier tried).
    pub steals_sent: u64,
    /// Work-steal packets forwarded or relayed.
    pub steals_forwarded: u64,
    /// Partner steals this agent started (included in `steals_sent`): steals sent straight
    /// to the agent of a far partner's host ([`Config::with_gather`]).
    pub partner_steals_sent: u64,
    /// Steal rounds that ended with no work in any tier.
    pub steal_rounds_failed: u64,
    /// Migrations this agent started (Migrate actions).
    pub migrations_started: u64,
    /// Migrations reported completed.
    pub migrations_completed: u64,
    /// Migrations reported failed or timed out.
    pub migrations_failed: u64,
    /// Messages dropped as invalid or not allowed (for example a move order from a
    /// non-manager).
    pub messages_refused: u64,
    /// Times this agent's view of its cluster manager changed.
    pub manager_changes: u64,
    /// [`Message::WorkAvailable`] hints sent to agents whose steal was refused earlier.
    pub work_hints_sent: u64,
    /// Work steals dropped because they did not come from the agent they name, or named a
    /// beneficiary or host this agent cannot tie to an agent of the pool (see
    /// [`StealRefusal`]).
    pub steals_refused: u64,
    /// Hosts dropped from the full table of hosts to make room for a new one
    /// ([`Agent::handle_peer_host`]).
    pub hosts_evicted: u64,
    /// Host announcements refused ([`Agent::handle_peer_host`]).
    pub hosts_refused: u64,
    /// Resizes of malleable jobs this agent asked its pcmd for ([`Action::Resize`]).
    pub resizes_started: u64,
    /// Resizes reported completed.
    pub resizes_completed: u64,
    /// Resizes reported failed or timed out (nothing changed).
    pub resizes_failed: u64,
    /// Offers to grow a malleable job that this agent refused: work steals that reached
    /// the agent of the job's rank 0 from a node that is not idle (its profile shows less
    /// than the light threshold idle), or that its origin did not send itself. Counted
    /// once per steal; nothing changes.
    pub grow_offers_refused: u64,
}

/// Why a work steal is not acted on (it is dropped, and counted in
/// [`Stats::steals_refused`]; a [`StealRefusal::Forwarded`] one is answered with a hint
/// instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StealRefusal {
    /// The packet was passed on by another agent: its origin is a claim nobody
    /// authenticated, so no work moves on it. The giver tells the origin directly
    /// ([`Message::WorkAvailable`]), and the origin asks again, over its own connection.
    #[error("forwarded by {from}, not sent by its origin {origin}")]
    Forwarded {
        /// The agent that passed the packet on.
        from: PeerId,
        /// The origin the packet names.
        origin: PeerId,
    },
    /// A packet passed on by another agent names an origin this agent does not know: it is
    /// made up (every agent of a pool knows the others), so it is not passed on.
    #[error("origin {origin} is not a known agent of the pool")]
    UnknownOrigin {
        /// The origin named.
        origin: PeerId,
    },
    /// NSp2p: the beneficiary named is not the agent asking.
    #[error("beneficiary {beneficiary} is not the agent asking ({origin})")]
    NotOrigin {
        /// The beneficiary named.
        beneficiary: PeerId,
        /// The agent asking.
        origin: PeerId,
    },
    /// The beneficiary is not an agent this one knows (no RTT sample of it), nor the agent of
    /// a host where a partner of an entity here (or of a member's, for an NSc2c manager)
    /// runs (a partner steal).
    #[error("beneficiary {beneficiary} is not a known agent of the pool")]
    UnknownAgent {
        /// The beneficiary named.
        beneficiary: PeerId,
    },
    /// The host named is not the one the beneficiary announced over its own connection.
    #[error("host {claimed} is not the host agent {beneficiary} announced ({announced})")]
    HostMismatch {
        /// The beneficiary.
        beneficiary: PeerId,
        /// The host in the packet.
        claimed: HostName,
        /// The host the beneficiary announced, if any.
        announced: String,
    },
}

/// Why a host announcement is refused ([`Agent::handle_peer_host`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostRefusal {
    /// A loopback name means "this machine" to whoever resolves it: a move there would land
    /// on the giver's own node, not on the announcing agent's.
    #[error("{host} is a loopback name")]
    Loopback {
        /// The name.
        host: HostName,
    },
    /// This agent's own host: another agent cannot run there in its place.
    #[error("{host} is this agent's own host")]
    OwnHost {
        /// The name.
        host: HostName,
    },
    /// Another connected agent announced this host first.
    #[error("{host} is already the host of agent {holder}")]
    Taken {
        /// The name.
        host: HostName,
        /// The agent that announced it first.
        holder: PeerId,
    },
    /// The table of hosts is full.
    #[error("too many hosts known ({max})")]
    Full {
        /// The bound.
        max: usize,
    },
}

/// Whether `host` names the local machine whoever resolves it (`localhost`, `localhost.*`,
/// `*.localhost`, `ip6-localhost`, 127.0.0.0/8, `::1`, `0.0.0.0`).
pub fn is_loopback_name(host: &HostName) -> bool {
    let h = host.as_str().to_ascii_lowercase();
    let h = h.trim_end_matches('.');
    h == "localhost"
        || h.starts_with("localhost.")
        || h.ends_with(".localhost")
        || h == "ip6-localhost"
        || h == "ip6-loopback"
        || h == "::1"
        || h == "0.0.0.0"
        || h.parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

/// Most refused thieves remembered for a later [`Message::WorkAvailable`] hint.
const REFUSED_THIEVES_KEPT: usize = 8;
/// How long a refused thief is remembered: its profile is stale after that, and it will
/// have stolen again on its own.
const REFUSED_THIEF_MEMORY: Duration = Duration::from_secs(30);
/// How long before a partner steal goes to the same partner host again: its agent said no,
/// and a node's entities and loads change over tens of seconds, not between two rounds.
const PARTNER_STEAL_RETRY: Duration = Duration::from_secs(30);

/// A node that would receive work.
#[derive(Debug, Clone)]
pub(crate) struct Beneficiary {
    pub(crate) peer: PeerId,
    pub(crate) host: HostName,
    pub(crate) profile: NodeProfile,
    /// What the node offers entities of the jobs it runs ([`NodeProfile::job_offers`]).
    pub(crate) job_offers: Vec<JobOffer>,
    /// Entities that left the node within the last two hold-downs: not to be sent back.
    pub(crate) departed: Vec<EntityId>,
}

impl Beneficiary {
    /// The node as a destination of the model's decisions.
    pub(crate) fn destination(&self) -> Destination<'_> {
        Destination {
            node: &self.profile,
            job_offers: &self.job_offers,
        }
    }
}

#[derive(Debug)]
enum Thief {
    Idle {
        next_round: Instant,
    },
    Stealing {
        id: MessageId,
        /// The tier the round goes on with if this steal gives nothing (`None`: the round
        /// ends).
        next: Option<LatencyTier>,
        deadline: Instant,
    },
    Receiving {
        migration: MigrationId,
        deadline: Instant,
    },
}

#[derive(Debug)]
struct Outgoing {
    id: MigrationId,
    notify: Option<PeerId>,
    deadline: Instant,
    /// The entities that leave this node.
    entities: Vec<EntityId>,
    /// Set when this reconfiguration is a resize ([`Action::Resize`]), not a migration.
    resize: Option<resizing::OutgoingResize>,
}

/// The fields of a work-steal packet.
#[derive(Debug, Clone)]
pub(crate) struct Steal {
    pub(crate) id: MessageId,
    pub(crate) origin: PeerId,
    pub(crate) source: Beneficiary,
    pub(crate) ttl: u8,
    pub(crate) tier: LatencyTier,
    /// The source's RTTs to hosts, seconds (the packet's [`HostRtt`]s).
    pub(crate) rtts: Arc<[HostRtt]>,
}

impl Steal {
    fn into_message(self) -> Message {
        Message::WorkSteal {
            id: self.id,
            origin: self.origin,
            source: self.source.peer,
            source_host: self.source.host,
            source_profile: self.source.profile,
            ttl: self.ttl,
            tier: self.tier,
            rtts: self.rtts,
            job_offers: self.source.job_offers,
            departed: self.source.departed,
        }
    }
}

/// What a giver and a thief know of their latencies, for the model's communication term:
/// the giver's measured RTTs ([`Agent::rtt_to_host`]), and those the thief's steal carried.
pub(crate) struct StealLatencies<'a> {
    here: GiverRtts<'a>,
    there: ThiefRtts<'a>,
    /// A partner steal (the thief is not in our peer table): see [`RttView::unmeasured`].
    partner_steal: bool,
}

/// [`Agent::rtt_to_host`] as an [`RttLookup`].
struct GiverRtts<'a>(&'a Agent);

impl RttLookup for GiverRtts<'_> {
    fn rtt_to(&self, host: &HostName) -> Option<f64> {
        self.0.rtt_to_host(host)
    }
}

/// A steal's RTTs by host (at most [`crate::message::MAX_RTTS`]): the last entry of a host
/// counts, as it would in a map built from the list.
struct ThiefRtts<'a>(&'a [HostRtt]);

impl RttLookup for ThiefRtts<'_> {
    fn rtt_to(&self, host: &HostName) -> Option<f64> {
        self.0
            .iter()
            .rev()
            .find(|r| r.host == *host)
            .map(|r| f64::from(r.rtt_us) / 1e6)
    }
}

impl<'a> StealLatencies<'a> {
    /// `agent`'s RTTs and `steal`'s. In NSc2c the manager's RTTs stand for its members':
    /// they are within local latency of it.
    pub(crate) fn new(agent: &'a Agent, steal: &'a Steal) -> Self {
        StealLatencies {
            here: GiverRtts(agent),
            there: ThiefRtts(&steal.rtts),
            partner_steal: agent.peers.get(&steal.source.peer).is_none(),
        }
    }

    /// The views of the giver's node on `giver` and of the thief's on `thief`.
    pub(crate) fn views(
        &'a self,
        giver: &'a HostName,
        thief: &'a HostName,
    ) -> (RttView<'a>, RttView<'a>) {
        let unknown = DEFAULT_UNKNOWN_RTT.as_secs_f64();
        (
            RttView {
                host: giver,
                rtts: &self.here,
                unknown,
                unmeasured: Unmeasured::Assumed,
            },
            RttView {
                host: thief,
                rtts: &self.there,
                unknown,
                // The thief hosts a partner of the rank it asks for, and the rank's other
                // partners are seldom its own: it has not measured them, and that says
                // nothing about whether they are far from it.
                unmeasured: if self.partner_steal {
                    Unmeasured::Neutral
                } else {
                    Unmeasured::Assumed
                },
            },
        )
    }
}

/// The hosts announced by peers ([`Agent::handle_peer_host`]), by peer and by host: an
/// announcement is checked against every other peer's host, and at 10,000 simulated nodes
/// that scan of the whole table (up to `2 * max_peers` names) for every sample of a peer
/// whose host was not taken showed in the profiles. A host has at most one holder (a claim
/// of a held host is refused), so the reverse index is exact.
///
/// The table is bounded, and a full table makes room by dropping the oldest announcement it
/// may drop ([`Hosts::evict_oldest`]): refusing every new host instead kept the first
/// `2 * max_peers` hosts an agent ever heard of, so in a large pool a nearer peer met later,
/// or the destination a cluster manager chose, had no host and could not be given work
/// (issue 15: most of NSc2c's move orders failed so at 10,000 simulated nodes).
#[derive(Debug, Default)]
struct Hosts {
    /// Each peer's host, with the sequence number of its announcement.
    by_peer: IdMap<PeerId, (HostName, u64)>,
    by_host: IdMap<HostName, PeerId>,
    /// What some of these peers last told this agent of their node's load
    /// ([`Hosts::learn`]), for [`Agent::pool_hosts`]: only peers in `by_peer`, forgotten with
    /// their host, so bounded by the table. Apart from `by_peer` because few peers of a
    /// large table ever send a profile here.
    loads: IdMap<PeerId, Learned>,
    /// Announcements, oldest first, as (peer, sequence number); an entry whose number is no
    /// longer the peer's is stale and skipped.
    order: VecDeque<(PeerId, u64)>,
    /// Bumped on every change: the announcements' sequence numbers.
    version: u64,
}

impl Hosts {
    fn get(&self, peer: &PeerId) -> Option<&HostName> {
        self.by_peer.get(peer).map(|(host, _)| host)
    }

    fn contains_key(&self, peer: &PeerId) -> bool {
        self.by_peer.contains_key(peer)
    }

    fn len(&self) -> usize {
        self.by_peer.len()
    }

    /// The peer that holds `host`, if any.
    fn holder(&self, host: &HostName) -> Option<&PeerId> {
        self.by_host.get(host)
    }

    /// `peer` now holds `host` (a host nobody else holds), instead of its old one if any.
    fn insert(&mut self, peer: PeerId, host: HostName) {
        self.version += 1;
        if let Some((old, _)) = self
            .by_peer
            .insert(peer.clone(), (host.clone(), self.version))
        {
            self.by_host.remove(&old);
            // What the peer said of its old host's load is not its new host's.
            self.loads.remove(&peer);
        }
        self.by_host.insert(host, peer.clone());
        self.order.push_back((peer, self.version));
        // Stale entries are dropped as eviction meets them; a table that never fills would
        // keep them, so they are swept once they outnumber the live ones.
        if self.order.len() > 2 * self.by_peer.len() + 16 {
            let by_peer = &self.by_peer;
            self.order
                .retain(|(p, seq)| by_peer.get(p).is_some_and(|(_, s)| s == seq));
        }
    }

    fn remove(&mut self, peer: &PeerId) -> Option<HostName> {
        let (host, _) = self.by_peer.remove(peer)?;
        self.version += 1;
        self.by_host.remove(&host);
        self.loads.remove(peer);
        Some(host)
    }

    /// `peer` told of the load of `host`'s node: kept if `host` is the one it announced
    /// (one look-up when its last report is kept already).
    fn learn(&mut self, peer: &PeerId, host: &HostName, load: Learned) {
        if self.get(peer) != Some(host) {
            return;
        }
        match self.loads.get_mut(peer) {
            Some(known) => *known = load,
            None => {
                self.loads.insert(peer.clone(), load);
            }
        }
    }

    /// Drops the oldest announcement whose peer `keep` does not protect, and returns that
    /// peer; `None` if every peer is protected. A protected entry met on the way goes to
    /// the back of the queue, as if announced again: left at the front, the peer table's
    /// own peers were scanned again at every eviction (a tenth of the simulator's time at
    /// 10,000 nodes).
    fn evict_oldest(&mut self, keep: impl Fn(&PeerId, &HostName) -> bool) -> Option<PeerId> {
        for _ in 0..self.order.len() {
            let (peer, seq) = self.order.pop_front()?;
            let Some((host, _)) = self.by_peer.get(&peer).filter(|(_, s)| *s == seq) else {
                continue;
            };
            if keep(&peer, host) {
                self.order.push_back((peer, seq));
                continue;
            }
            self.remove(&peer);
            return Some(peer);
        }
        None
    }
}

/// What an agent last heard of another node's load, and when ([`Hosts::learn`]).
#[derive(Debug, Clone, Copy)]
struct Learned {
    profile: NodeProfile,
    at: Instant,
    leaving: bool,
}

/// Another agent's host as this agent knows it ([`Agent::pool_hosts`]): the hosts of the
/// pool work could go to, with what is known of their load.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownHost {
    /// The agent.
    pub peer: PeerId,
    /// The host it announced over its own connection ([`Agent::handle_peer_host`]).
    pub host: HostName,
    /// Its tier, if it is in the peer table.
    pub tier: Option<LatencyTier>,
    /// Its smoothed RTT, if it is in the peer table.
    pub srtt: Option<Duration>,
    /// What it last reported of its node, if it did.
    pub load: Option<KnownLoad>,
}

/// What an agent last learned of another node's load: the profile the node sent with a
/// work steal of its own (NSp2p and NSc2c: the thief's, or a manager's for the member it
/// steals for) or, to an NSc2c manager, in a member's profile reply. Only what came over
/// the reporting agent's own connection (a steal forwarded by another agent is not taken),
/// and only for the host that agent announced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KnownLoad {
    /// The node's profile as it reported it (a leaving node reports
    /// [`NodeProfile::departing`]: no idle CPU).
    pub profile: NodeProfile,
    /// How long ago this agent received it.
    pub age: Duration,
    /// The node said it is leaving the pool (NSc2c profile replies; NSp2p tells nothing of
    /// it, so false there).
    pub leaving: bool,
}

impl KnownLoad {
    /// Idle CPUs, speed-normalised: the model's CPU availability
    /// ([`NodeProfile::availability`]).
    pub fn idle_cpus(&self) -> f64 {
        self.profile.availability(Resource::Cpu)
    }
}

/// One IOS agent's decision and protocol logic. See the [crate docs](crate) for how a
/// driver runs it.
#[derive(Debug)]
pub struct Agent {
    pub(crate) config: Config,
    pub(crate) me: PeerId,
    pub(crate) host: HostName,
    rng: StdRng,
    pub(crate) peers: PeerTable,
    /// The host each connected agent announced over its own connection
    /// ([`Agent::handle_peer_host`]): the only hosts work is ever moved to.
    hosts: Hosts,
    /// What [`Agent::host_rtts`] last built, with the versions of the peer table and of its
    /// peers' hosts it was built from: a thief sends it with every steal, and rebuilding it
    /// (a look-up and a copied host name per peer) was most of the simulator's time per
    /// steal at 10,000 nodes, while the peers and their RTTs change far less often than
    /// steals go.
    rtts_cache: Option<(u64, u64, Arc<[HostRtt]>)>,
    /// Bumped when the host of a peer in the peer table changes: what
    /// [`Agent::host_rtts`] is built from. Hosts of peers outside the table come and go
    /// all the time in a large pool (a full table's evictions), and keying the cache on
    /// every change of the table of hosts rebuilt it for nearly every steal (a fifth of
    /// the simulator's time at 10,000 nodes, Grid-like).
    measured_hosts_version: u64,
    /// Announcements refused because another agent held the host: the newest claim of each
    /// host is promoted when the holder goes (an agent restarted with a new identity while
    /// its old connection had not yet timed out).
    contested: HashMap<HostName, PeerId>,
    pub(crate) node: Option<NodeProfile>,
    /// When `node` was sampled.
    pub(crate) node_at: Option<Instant>,
    /// Profiles taken before this instant predate a migration that involved this agent (or
    /// its cluster) and are not acted on.
    pub(crate) settle_after: Option<Instant>,
    pub(crate) entities: Vec<EntityProfile>,
    /// RTTs, seconds, to the hosts this node's entities' partners run on, as the driver
    /// measured them on request ([`Agent::hosts_to_measure`], [`Agent::handle_partner_rtt`]).
    /// Kept apart from the peer table, which keeps only the nearest peers: the model counts
    /// only partners the giver has measured ([`crate::model::communication`]), wherever they
    /// are.
    partner_rtts: HashMap<HostName, f64>,
    /// The hosts of the last [`Agent::hosts_to_measure`], sorted.
    partner_wanted: Vec<HostName>,
    /// Partner hosts sent a partner steal, and when (asked again only after
    /// [`PARTNER_STEAL_RETRY`]).
    partners_asked: HashMap<HostName, Instant>,
    /// NSc2c: the partner steal under way, to send again to the manager a member names
    /// ([`Message::StealRedirect`]).
    redirectable: Option<Steal>,
    /// Entities that left this node, oldest first, each with the end of the two hold-downs
    /// during which no giver should send it back here: this node's steals carry them
    /// ([`Message::WorkSteal`]'s `departed`), so the rule does not depend on which agent
    /// decided the departure or keeps a record of it (an NSc2c cluster whose manager
    /// changed loses the old manager's `no_return`).
    departed: VecDeque<(EntityId, Instant)>,
    /// Entities stolen here, or moved by this NSc2c manager's order, with the host they came
    /// from and until when they may not go back there (two hold-downs after the steal was
    /// accepted or the order given). The hold-down alone does not stop a rank going back
    /// once it is over: in the simulated pools, with moves the amortised cost term finds
    /// cheap, nodes of one cluster with no load change passed ranks back and forth (1,000
    /// nodes, Grid-like, 20 minutes: 15 returns within two hold-downs, 2026-11-27).
    no_return: HashMap<EntityId, (HostName, Instant)>,
    actions: VecDeque<Action>,
    next_id: u64,
    thief: Thief,
    backoff: Duration,
    seen: VecDeque<(PeerId, MessageId)>,
    seen_set: HashSet<(PeerId, MessageId)>,
    pub(crate) held: HashMap<EntityId, Instant>,
    /// NSp2p: thieves refused here (no gain then), newest last, with when; if this node gets
    /// loaded, one of them is told at once instead of waiting for its next steal round.
    refused: VecDeque<(Beneficiary, Instant)>,
    /// When a hint last made this agent steal (hints are obeyed at most once per steal period).
    hinted_at: Option<Instant>,
    outgoing: Option<Outgoing>,
    /// Set by [`Agent::handle_leave`]: the node is being drained.
    leaving: Option<Leaving>,
    pub(crate) cluster: Cluster,
    /// The widths of the malleable jobs run here, and since when load slows them.
    resizing: resizing::Resizing,
    pub(crate) stats: Stats,
}

/// The drain of a node whose agent leaves the pool.
#[derive(Debug, Clone, Copy)]
struct Leaving {
    started: Instant,
    /// When peers are next told that this node has work to give.
    next_call: Instant,
    moved: u64,
    failed: u64,
    /// When the last move off this node completed: the pool is relieving the node, and
    /// the wait before a shrink starts again from there ([`resizing::leave_shrink_wait`]).
    last_moved: Option<Instant>,
}

impl Leaving {
    /// Since when the leaving node has waited for idle nodes to take its ranks: the start
    /// of the drain or the last completed move, whichever is later.
    fn waiting_since(&self) -> Instant {
        self.last_moved
            .map_or(self.started, |at| at.max(self.started))
    }
}

/// How far the drain started by [`Agent::handle_leave`] has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaveProgress {
    /// When the drain started.
    pub started: Instant,
    /// Registered entities still on the node.
    pub entities_left: usize,
    /// The move under way, if any.
    pub moving: Option<MigrationId>,
    /// Moves that completed since the drain started.
    pub moved: u64,
    /// Moves that failed or timed out since the drain started.
    pub failed: u64,
}

impl LeaveProgress {
    /// Whether nothing of any job is registered on the node and no move is under way.
    pub fn is_drained(&self) -> bool {
        self.entities_left == 0 && self.moving.is_none()
    }
}

/// Most peers a leaving node calls at once (nearest tiers first).
pub const MAX_LEAVE_CALLS: usize = 32;

impl Agent {
    /// An agent with identity `me` on host `host`, starting at `now`.
    pub fn new(
        me: PeerId,
        host: HostName,
        config: Config,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut rng = match config.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        let next_id = rng.random::<u64>() >> 1;
        Ok(Agent {
            peers: PeerTable::new(config.max_peers),
            backoff: config.steal_backoff,
            cluster: Cluster::new(me.clone(), now, config.heartbeat_period),
            // In NSc2c, let one failure timeout of heartbeats settle the election before any
            // agent steals as a manager.
            thief: Thief::Idle {
                next_round: match config.topology {
                    Topology::PeerToPeer => now,
                    Topology::ClusterToCluster => now + config.member_timeout,
                },
            },
            config,
            me,
            host,
            rng,
            hosts: Hosts::default(),
            rtts_cache: None,
            measured_hosts_version: 0,
            contested: HashMap::new(),
            node: None,
            node_at: None,
            settle_after: None,
            entities: Vec::new(),
            partner_rtts: HashMap::new(),
            partner_wanted: Vec::new(),
            partners_asked: HashMap::new(),
            redirectable: None,
            departed: VecDeque::new(),
            no_return: HashMap::new(),
            actions: VecDeque::new(),
            next_id,
            seen: VecDeque::new(),
            seen_set: HashSet::new(),
            held: HashMap::new(),
            refused: VecDeque::new(),
            hinted_at: None,
            outgoing: None,
            leaving: None,
            resizing: resizing::Resizing::default(),
            stats: Stats::default(),
        })
    }

    // ---- getters ----

    /// This agent's identity.
    pub fn id(&self) -> &PeerId {
        &self.me
    }

    /// This agent's host name.
    pub fn host(&self) -> &HostName {
        &self.host
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Known peers and their tiers.
    pub fn peers(&self) -> &PeerTable {
        &self.peers
    }

    /// The host `peer` announced, if it did and the announcement was accepted.
    pub fn peer_host(&self, peer: &PeerId) -> Option<&HostName> {
        self.hosts.get(peer)
    }

    /// Every other agent whose host this agent knows (its table of hosts: connected agents
    /// that announced one), with its tier and RTT if it is in the peer table and what it
    /// last reported of its load ([`KnownLoad`]), if anything; nearest tier first, then by
    /// host name. Built on demand (for `ios-agent status`), nothing kept for it.
    pub fn pool_hosts(&self, now: Instant) -> Vec<KnownHost> {
        let mut out: Vec<KnownHost> = self
            .hosts
            .by_peer
            .iter()
            .map(|(peer, (host, _))| {
                let info = self.peers.get(peer);
                KnownHost {
                    peer: peer.clone(),
                    host: host.clone(),
                    tier: info.map(|i| i.tier),
                    srtt: info.map(|i| i.srtt),
                    load: self.hosts.loads.get(peer).map(|l| KnownLoad {
                        profile: l.profile,
                        age: now.saturating_duration_since(l.at),
                        leaving: l.leaving,
                    }),
                }
            })
            .collect();
        // Peers outside the table (no tier) last.
        out.sort_by(|a, b| {
            (a.tier.is_none(), a.tier, &a.host).cmp(&(b.tier.is_none(), b.tier, &b.host))
        });
        out
    }

    /// What a peer reported of its node's load ([`KnownLoad`]): `host` must be the one
    /// `peer` announced.
    pub(crate) fn learn_load(
        &mut self,
        now: Instant,
        peer: &PeerId,
        host: &HostName,
        profile: NodeProfile,
        leaving: bool,
    ) {
        self.hosts.learn(
            peer,
            host,
            Learned {
                profile,
                at: now,
                leaving,
            },
        );
    }

    /// The latest node profile.
    pub fn node_profile(&self) -> Option<&NodeProfile> {
        self.node.as_ref()
    }

    /// The latest entity profiles.
    pub fn entities(&self) -> &[EntityProfile] {
        &self.entities
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Whether a work-steal round is waiting for an answer or for the promised work.
    pub fn is_stealing(&self) -> bool {
        !matches!(self.thief, Thief::Idle { .. })
    }

    /// Whether a migration decided here is under way.
    pub fn is_migrating(&self) -> bool {
        self.outgoing.is_some()
    }

    /// Whether the node is being drained ([`Agent::handle_leave`]).
    pub fn is_leaving(&self) -> bool {
        self.leaving.is_some()
    }

    /// The drain's progress, once [`Agent::handle_leave`] was called.
    pub fn leave_progress(&self) -> Option<LeaveProgress> {
        self.leaving.map(|l| LeaveProgress {
            started: l.started,
            entities_left: self.entities.len(),
            moving: self.outgoing.as_ref().map(|o| o.id),
            moved: l.moved,
            failed: l.failed,
        })
    }

    /// Until when an entity is held back from moving, if it is.
    pub fn held_until(&self, entity: &EntityId) -> Option<Instant> {
        self.held.get(entity).copied()
    }

    // ---- inputs ----

    /// A round-trip time measured to `peer` (for example by libp2p ping).
    pub fn handle_peer_rtt(&mut self, now: Instant, peer: PeerId, rtt: Duration) {
        self.peer_rtt(now, &peer, rtt);
    }

    /// [`Agent::handle_peer_rtt`] with a borrowed id (the simulator feeds every agent's
    /// peers every RTT round, and copying each id was a tenth of that).
    pub(crate) fn peer_rtt(&mut self, now: Instant, peer: &PeerId, rtt: Duration) {
        if *peer == self.me {
            return;
        }
        // A sample that changes neither the set of peers nor a tier changes no cluster
        // (member timeouts are the timer's business).
        if let Some(evicted) = self.peers.record_rtt_evicting(now, peer, rtt) {
            self.c2c_peer_changed(now, peer, evicted.as_ref());
        }
    }

    /// `peer` announced, over its own authenticated connection, the host it runs on (as the
    /// MPI runtime names it). Work is only ever moved to a host announced this way, and only
    /// when the agent of that host asks for it. Refused (and counted in
    /// [`Stats::hosts_refused`]): loopback names, this agent's own host, a host another
    /// connected agent announced first, and new hosts beyond the table's bound. A second
    /// announcement by the same agent replaces its first.
    pub fn handle_peer_host(
        &mut self,
        now: Instant,
        peer: PeerId,
        host: HostName,
    ) -> Result<(), HostRefusal> {
        self.peer_host_announced(now, peer, host).0
    }

    /// [`Agent::handle_peer_host`], also returning the peer whose host was dropped to make
    /// room, if one was: the simulator mirrors which peers' hosts each agent holds.
    pub(crate) fn peer_host_announced(
        &mut self,
        now: Instant,
        peer: PeerId,
        host: HostName,
    ) -> (Result<(), HostRefusal>, Option<PeerId>) {
        if peer == self.me || self.hosts.get(&peer) == Some(&host) {
            return (Ok(()), None);
        }
        let mut evicted = None;
        let refusal = if is_loopback_name(&host) {
            Some(HostRefusal::Loopback { host })
        } else if host == self.host {
            Some(HostRefusal::OwnHost { host })
        } else if let Some(holder) = self.hosts.holder(&host).filter(|p| **p != peer) {
            let holder = holder.clone();
            if self.contested.len() < self.config.max_peers || self.contested.contains_key(&host) {
                self.contested.insert(host.clone(), peer);
            }
            Some(HostRefusal::Taken { host, holder })
        } else if !self.hosts.contains_key(&peer)
            && self.hosts.len() >= 2 * self.config.max_peers
            && {
                evicted = self.evict_host();
                evicted.is_none()
            }
        {
            Some(HostRefusal::Full {
                max: 2 * self.config.max_peers,
            })
        } else {
            self.hosts.insert(peer.clone(), host);
            self.measured_host_changed(&peer);
            self.c2c_host_known(now, &peer);
            None
        };
        let result = match refusal {
            Some(r) => {
                self.stats.hosts_refused += 1;
                Err(r)
            }
            None => Ok(()),
        };
        (result, evicted)
    }

    /// Makes room in the full table of hosts: drops the oldest announcement of a peer that
    /// is not in the peer table (only peers there are stolen from, given work or measured),
    /// holds no host another agent claims too (its successor is chosen on its departure) and
    /// is not the destination of a move order waiting for its host. `None` if every entry
    /// is protected so.
    fn evict_host(&mut self) -> Option<PeerId> {
        let awaited = self.c2c_awaited_host().cloned();
        let peers = &self.peers;
        let contested = &self.contested;
        let evicted = self.hosts.evict_oldest(|peer, host| {
            peers.get(peer).is_some()
                || awaited.as_ref() == Some(peer)
                || contested.contains_key(host)
        });
        if let Some(peer) = &evicted {
            tracing::debug!(agent = %self.me, %peer, "host of a peer outside the peer table dropped: table full");
            self.stats.hosts_evicted += 1;
        }
        evicted
    }

    fn measured_host_changed(&mut self, peer: &PeerId) {
        if self.peers.get(peer).is_some() {
            self.measured_hosts_version += 1;
        }
    }

    /// `peer` disconnected or left.
    pub fn handle_peer_gone(&mut self, now: Instant, peer: &PeerId) {
        self.contested.retain(|_, claimant| claimant != peer);
        if let Some(host) = self.hosts.remove(peer) {
            if let Some(next) = self.contested.remove(&host) {
                tracing::info!(agent = %self.me, %host, peer = %next, "host now announced by another agent");
                self.measured_host_changed(&next);
                self.hosts.insert(next, host);
            }
        }
        self.peers.remove(peer);
        self.cluster_forget(peer);
        self.c2c_peers_changed(now);
    }

    /// The node's resources, sampled every [`Config::profile_period`]. Invalid profiles are
    /// dropped.
    pub fn handle_node_profile(&mut self, now: Instant, profile: NodeProfile) {
        match profile.validate() {
            Ok(()) => {
                self.node = Some(profile);
                self.node_at = Some(now);
                self.offer_work(now);
            }
            Err(e) => tracing::warn!(agent = %self.me, "node profile dropped: {e}"),
        }
    }

    /// The local entities, from pcmd (all of them, each time). Invalid profiles are dropped;
    /// at most [`MAX_ENTITIES`] are kept.
    pub fn handle_entities(&mut self, now: Instant, mut entities: Vec<EntityProfile>) {
        entities.retain(|e| e.validate().is_ok());
        entities.truncate(MAX_ENTITIES);
        self.entities = entities;
        self.observe_widths(now);
        self.offer_work(now);
        self.shrink_if_due(now);
    }

    /// The hosts the driver should measure the RTT to this round, besides its peers, and
    /// give back with [`Agent::handle_partner_rtt`]: those the entities here exchange with
    /// (their profiles' partners), and for an NSc2c manager its members' entities' too (the
    /// manager's latency stands for its members': they are within local latency of it).
    /// Sorted. RTTs of hosts no longer on the list are forgotten.
    pub fn hosts_to_measure(&mut self) -> Vec<HostName> {
        // Sorted and deduplicated by reference, then copied once: the set of names this was
        // collected into hashed each name with SipHash, on every node each profile round
        // (3% of the simulator's time at 10,000 nodes). Same hosts, same order.
        let mut wanted: Vec<&HostName> = self
            .entities
            .iter()
            .chain(self.member_entities())
            .flat_map(|e| e.partners.iter().map(|p| &p.host))
            .filter(|h| **h != self.host)
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let hosts: Vec<HostName> = wanted.into_iter().cloned().collect();
        self.partner_rtts
            .retain(|h, _| hosts.binary_search(h).is_ok());
        self.partner_wanted.clone_from(&hosts);
        hosts
    }

    /// An RTT sample to `host`, one of the last [`Agent::hosts_to_measure`]. Samples of
    /// other hosts are ignored (they would grow the table without bound).
    pub fn handle_partner_rtt(&mut self, host: &HostName, rtt: Duration) {
        if self.partner_wanted.binary_search(host).is_ok() {
            self.partner_rtts.insert(host.clone(), rtt.as_secs_f64());
        }
    }

    /// `entities` may not go back to `host` within two hold-downs (see `no_return`).
    pub(crate) fn bar_return(&mut self, now: Instant, entities: Vec<EntityId>, host: HostName) {
        let until = now + self.config.hold_down * 2;
        self.no_return.retain(|_, (_, t)| *t > now);
        for e in entities {
            self.no_return.insert(e, (host.clone(), until));
        }
    }

    /// Whether `entity` may go to `host` now (not barred by `no_return`).
    pub(crate) fn may_return(&self, now: Instant, entity: &EntityId, host: &HostName) -> bool {
        !self
            .no_return
            .get(entity)
            .is_some_and(|(barred, until)| now < *until && barred == host)
    }

    /// Those of `entities` (this node's or a member's) that may go to `host` now: all of them
    /// if their node is `leaving`, else those [`Agent::may_return`] does not bar from it.
    pub(crate) fn may_go_to<'e>(
        &self,
        now: Instant,
        entities: &'e [EntityProfile],
        host: &HostName,
        leaving: bool,
    ) -> Cow<'e, [EntityProfile]> {
        let barred = |e: &EntityProfile| !leaving && !self.may_return(now, &e.id, host);
        if entities.iter().any(barred) {
            Cow::Owned(entities.iter().filter(|e| !barred(e)).cloned().collect())
        } else {
            Cow::Borrowed(entities)
        }
    }

    /// A message from agent `from` (as the transport authenticated it).
    pub fn handle_message(&mut self, now: Instant, from: PeerId, message: Message) {
        if let Err(e) = message.validate() {
            tracing::debug!(agent = %self.me, %from, "invalid {}: {e}", message.kind());
            self.stats.messages_refused += 1;
            return;
        }
        match message {
            Message::WorkSteal {
                id,
                origin,
                source,
                source_host,
                source_profile,
                ttl,
                tier,
                rtts,
                job_offers,
                departed,
            } => {
                let steal = Steal {
                    id,
                    origin,
                    source: Beneficiary {
                        peer: source,
                        host: source_host,
                        profile: source_profile,
                        job_offers,
                        departed,
                    },
                    ttl,
                    tier,
                    rtts,
                };
                self.on_work_steal(now, from, steal);
            }
            Message::StealAccepted {
                id,
                migration,
                entities,
                from_host,
            } => {
                if matches!(self.thief, Thief::Stealing { id: current, .. } if current == id) {
                    tracing::debug!(agent = %self.me, %from, %migration, "steal accepted");
                    if let Some(giver) = from_host.or_else(|| self.hosts.get(&from).cloned()) {
                        self.bar_return(now, entities, giver);
                    }
                    self.thief = Thief::Receiving {
                        migration,
                        deadline: now + self.config.migration_timeout,
                    };
                    self.backoff = self.config.steal_backoff;
                }
            }
            Message::StealExhausted { id } => {
                if matches!(self.thief, Thief::Stealing { id: current, .. } if current == id) {
                    self.escalate(now);
                }
            }
            Message::WorkAvailable => self.on_work_available(now, from),
            // Its connection did its work: the hosts are announced over it.
            Message::Introduce => {}
            Message::StealRedirect { id, manager } => {
                self.on_steal_redirect(now, &from, id, manager)
            }
            Message::MigrationFinished {
                migration,
                completed,
            } => self.on_migration_finished(now, migration, completed),
            Message::Heartbeat {
                manager,
                successor,
                members,
                ..
            } => self.on_heartbeat(now, from, manager, successor, members),
            Message::ProfileRequest { id } => self.on_profile_request(now, from, id),
            Message::ProfileReply {
                id,
                host,
                node,
                entities,
                leaving,
                departed,
                near_hosts,
            } => self.on_profile_reply(
                now,
                from,
                id,
                crate::c2c::MemberView {
                    host,
                    node,
                    entities,
                    leaving,
                    departed,
                    near_hosts,
                },
            ),
            Message::MoveOrder {
                migration,
                entities,
                to,
                to_host,
                notify,
            } => self.on_move_order(
                now,
                from,
                crate::c2c::Order {
                    migration,
                    entities,
                    to,
                    to_host,
                    notify,
                },
            ),
        }
    }

    /// The node leaves the pool: from now on the agent moves every registered entity of its
    /// node to other nodes, one move at a time, each destination chosen by the same model as
    /// any move but with this node offering nothing ([`NodeProfile::departing`]) and with no
    /// hold-down (an entity that just arrived must leave too). It stops stealing and taking
    /// work. NSp2p: peers are told that work is available every steal period, and a lightly
    /// loaded one steals it as usual. NSc2c: the node tells its manager it is leaving (with
    /// the departing profile), and the manager moves its entities one at a time to the
    /// member with the most idle CPU, under the same rules. Follow the drain with
    /// [`Agent::leave_progress`]; calling this again changes nothing.
    pub fn handle_leave(&mut self, now: Instant) {
        if self.leaving.is_some() {
            return;
        }
        tracing::info!(agent = %self.me, entities = self.entities.len(), "leaving: draining the node");
        self.leaving = Some(Leaving {
            started: now,
            next_call: now,
            moved: 0,
            failed: 0,
            last_moved: None,
        });
        if matches!(self.thief, Thief::Stealing { .. }) {
            self.thief = Thief::Idle { next_round: now };
        }
        self.call_for_thieves(now);
    }

    /// The drain is given up (it did not finish in time and the node stays): the agent goes
    /// back to normal work. Entities already moved stay where they went.
    pub fn handle_stay(&mut self, now: Instant) {
        if self.leaving.take().is_some() {
            tracing::info!(agent = %self.me, entities = self.entities.len(), "staying in the pool");
            self.thief = Thief::Idle { next_round: now };
        }
    }

    /// Timers: call when [`Agent::poll_timeout`]'s instant has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(deadline) = now.checked_sub(self.config.peer_timeout) {
            if self.peers.expire(deadline) > 0 {
                self.c2c_peers_changed(now);
            }
        }
        self.held.retain(|_, until| *until > now);
        while self
            .departed
            .front()
            .is_some_and(|(_, until)| *until <= now)
        {
            self.departed.pop_front();
        }
        if let Some(out) = &self.outgoing {
            if now >= out.deadline {
                tracing::warn!(agent = %self.me, migration = %out.id, "migration timed out");
                self.finish_outgoing(now, false);
            }
        }
        self.c2c_tick(now);
        self.call_for_thieves(now);
        self.shrink_if_due(now);
        match self.thief {
            Thief::Idle { next_round } if now >= next_round => {
                if let Some(b) = self.beneficiary(now) {
                    let first = match self.config.topology {
                        Topology::PeerToPeer => LatencyTier::Local,
                        Topology::ClusterToCluster => LatencyTier::Regional,
                    };
                    // A round starts with a partner steal when one is due, then goes
                    // through the tiers.
                    match self.partner_steal_target(now) {
                        Some((to, host, partner_b)) => self.partner_steal(now, partner_b, to, host),
                        None => self.send_steal(now, b, Some(first)),
                    }
                } else {
                    self.thief = Thief::Idle {
                        next_round: now + self.config.steal_period,
                    };
                }
            }
            Thief::Stealing { deadline, .. } if now >= deadline => self.escalate(now),
            Thief::Receiving { deadline, .. } if now >= deadline => {
                self.thief = Thief::Idle { next_round: now };
            }
            _ => {}
        }
    }

    /// The end of a migration started with [`Action::Migrate`].
    pub fn handle_migration_outcome(
        &mut self,
        now: Instant,
        id: MigrationId,
        outcome: MigrationOutcome,
    ) {
        if self.outgoing.as_ref().is_some_and(|o| o.id == id) {
            if let MigrationOutcome::Failed { reason } = &outcome {
                tracing::info!(agent = %self.me, migration = %id, "migration failed: {reason}");
            }
            self.finish_outgoing(now, outcome == MigrationOutcome::Completed);
        }
    }

    // ---- outputs ----

    /// The next thing the driver must do.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`Agent::handle_timeout`] must next be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut add = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        match self.thief {
            Thief::Idle { next_round } => {
                if self.may_steal() {
                    add(next_round);
                }
            }
            Thief::Stealing { deadline, .. } | Thief::Receiving { deadline, .. } => add(deadline),
        }
        if let Some(o) = &self.outgoing {
            add(o.deadline);
        }
        if let Some(l) = self.leaving.filter(|_| self.calls_for_thieves()) {
            add(l.next_call);
        }
        if let Some(oldest) = self.peers.oldest_seen() {
            add(oldest + self.config.peer_timeout);
        }
        if let Some(c) = self.c2c_timeout() {
            add(c);
        }
        if let Some(r) = self.resize_deadline() {
            add(r);
        }
        t
    }

    // ---- internals shared with c2c ----

    pub(crate) fn fresh_id(&mut self) -> u64 {
        self.next_id = self.next_id.wrapping_add(1);
        self.next_id
    }

    pub(crate) fn send(&mut self, to: PeerId, message: Message) {
        if self.actions.len() >= MAX_PENDING_ACTIONS {
            tracing::warn!(agent = %self.me, "action queue full, {} dropped", message.kind());
            return;
        }
        self.stats.messages_sent += 1;
        self.actions.push_back(Action::Send { to, message });
    }

    /// The gates of a move of this node's entities. A leaving node's entities must go: no
    /// hold-down (however recently they came), and any destination with free CPU takes them
    /// ([`Policy::leaving`]).
    pub(crate) fn policy(&self, now: Instant) -> Policy<'_> {
        self.policy_for(now, self.leaving.is_some())
    }

    /// [`Agent::policy`] for the entities of a node that is leaving or not (an NSc2c manager
    /// also decides for its members' nodes).
    pub(crate) fn policy_for(&self, now: Instant, leaving: bool) -> Policy<'_> {
        static NONE_HELD: std::sync::OnceLock<HashMap<EntityId, Instant>> =
            std::sync::OnceLock::new();
        Policy {
            weights: &self.config.weights,
            cost: &self.config.cost,
            min_gain: self.config.min_gain,
            max_group: self.config.max_group,
            hold_down: if leaving {
                Duration::ZERO
            } else {
                self.config.hold_down
            },
            held: if leaving {
                NONE_HELD.get_or_init(HashMap::new)
            } else {
                &self.held
            },
            now,
            leaving,
            entity_cores: self.config.entity_cores,
            max_move_time: self.config.migration_timeout,
            jobs_here: &[],
            gather_in_one_move: false,
        }
    }

    /// This agent's measured RTTs to the hosts of its peers, nearest first, at most
    /// [`Config::max_peers`] (and [`MAX_RTTS`]): what a work steal carries.
    pub(crate) fn host_rtts(&mut self) -> Arc<[HostRtt]> {
        let versions = (self.peers.version(), self.measured_hosts_version);
        if let Some((p, h, rtts)) = &self.rtts_cache {
            if (*p, *h) == versions {
                return rtts.clone();
            }
        }
        let rtts: Arc<[HostRtt]> = self
            .peers
            .by_rtt()
            .filter_map(|(peer, rtt)| {
                self.hosts.get(peer).map(|host| HostRtt {
                    host: host.clone(),
                    rtt_us: u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX),
                })
            })
            .take(self.config.max_peers.min(MAX_RTTS))
            .collect();
        self.rtts_cache = Some((versions.0, versions.1, rtts.clone()));
        rtts
    }

    /// This agent's measured RTT to `host`, seconds, for the model's communication term: its
    /// peer's on that host (the smoothed RTT the peer table orders by), else the partner
    /// RTT it asked for ([`Agent::hosts_to_measure`]).
    pub fn rtt_to_host(&self, host: &HostName) -> Option<f64> {
        self.hosts
            .holder(host)
            .and_then(|peer| self.peers.get(peer))
            .map(|info| info.srtt.as_secs_f64())
            .or_else(|| self.partner_rtts.get(host).copied())
    }

    /// Whether any entity here has known communication partners (the model's communication
    /// term applies).
    pub(crate) fn knows_partners(&self) -> bool {
        self.entities.iter().any(|e| !e.partners.is_empty())
    }

    /// This node's profile as the model and other agents see it: the sampled one, or
    /// [`NodeProfile::departing`] while the node is drained.
    pub(crate) fn own_profile(&self) -> Option<NodeProfile> {
        let node = self.node?;
        Some(if self.leaving.is_some() {
            node.departing()
        } else {
            node
        })
    }

    /// Whether a leaving NSp2p node still calls peers to take its entities.
    fn calls_for_thieves(&self) -> bool {
        self.config.topology == Topology::PeerToPeer
            && self.leaving.is_some()
            && self.outgoing.is_none()
            && !self.entities.is_empty()
    }

    /// NSp2p, leaving: once per steal period while entities are left and none is moving,
    /// tells the nearest peers (up to [`MAX_LEAVE_CALLS`]) that work is available. Each may
    /// answer with a work steal, decided here like any other.
    fn call_for_thieves(&mut self, now: Instant) {
        if !self.calls_for_thieves() {
            return;
        }
        let Some(leaving) = self.leaving.as_mut() else {
            return;
        };
        if now < leaving.next_call {
            return;
        }
        leaving.next_call = now + self.config.steal_period;
        let mut tier = Some(LatencyTier::Local);
        let mut called: Vec<PeerId> = Vec::new();
        while let Some(t) = tier.filter(|t| *t <= self.config.max_tier) {
            called.extend(self.peers.in_tier(t).into_iter().cloned());
            tier = t.next();
        }
        called.truncate(MAX_LEAVE_CALLS);
        tracing::debug!(agent = %self.me, peers = called.len(), "leaving: calling for thieves");
        for to in called {
            self.stats.work_hints_sent += 1;
            self.send(to, Message::WorkAvailable);
        }
    }

    /// Whether a profile sampled at `at` was taken after the last migration settled.
    pub(crate) fn is_fresh(&self, at: Instant) -> bool {
        self.settle_after.is_none_or(|s| at > s)
    }

    /// Whether the node profile postdates the last migration.
    pub(crate) fn node_is_fresh(&self) -> bool {
        self.node_at.is_some_and(|at| self.is_fresh(at))
    }

    pub(crate) fn myself(&self) -> Option<Beneficiary> {
        let (profile, job_offers) = self.as_thief(self.own_profile()?, &self.entities);
        Some(Beneficiary {
            peer: self.me.clone(),
            host: self.host.clone(),
            job_offers,
            profile,
            departed: self.departed(),
        })
    }

    /// A node with `entities` as a thief shows it to givers: its profile and job offers,
    /// with the cores the jobs it gathers need kept for them
    /// ([`decision::keep_for_gathering`]; only with the communication term, when the
    /// entities name their partners, is anything gathered).
    pub(crate) fn as_thief(
        &self,
        node: NodeProfile,
        entities: &[EntityProfile],
    ) -> (NodeProfile, Vec<JobOffer>) {
        let offers = node.job_offers(entities);
        let partners = entities.iter().any(|e| !e.partners.is_empty());
        match self.config.entity_cores.filter(|_| partners) {
            Some(cores) => decision::keep_for_gathering(node, offers, entities, cores),
            None => (node, offers),
        }
    }

    /// The entities that left this node within the last two hold-downs, oldest first (at
    /// most [`MAX_ENTITIES`]).
    pub(crate) fn departed(&self) -> Vec<EntityId> {
        let skip = self.departed.len().saturating_sub(MAX_ENTITIES);
        self.departed
            .iter()
            .skip(skip)
            .map(|(e, _)| e.clone())
            .collect()
    }

    /// Whether this agent steals at all now (NSp2p: its node is lightly loaded; NSc2c: it is
    /// a manager). A fully loaded NSp2p pool therefore sends nothing.
    fn may_steal(&self) -> bool {
        if self.leaving.is_some() {
            return false;
        }
        match self.config.topology {
            Topology::PeerToPeer => {
                self.node_is_fresh()
                    && self
                        .node
                        .is_some_and(|n| n.is_lightly_loaded(self.config.light_threshold))
            }
            Topology::ClusterToCluster => self.is_manager() && !self.peers.is_empty(),
        }
    }

    fn beneficiary(&self, now: Instant) -> Option<Beneficiary> {
        if !self.may_steal() {
            return None;
        }
        match self.config.topology {
            Topology::PeerToPeer => self.myself(),
            Topology::ClusterToCluster => self.lightest_member(now),
        }
    }

    /// Sends a work steal for `b` to a random peer of the first tier from `from` on (up to
    /// the configured limit) that has peers; ends the round when none has.
    fn send_steal(&mut self, now: Instant, b: Beneficiary, from: Option<LatencyTier>) {
        let mut tier = from;
        while let Some(t) = tier.filter(|t| *t <= self.config.max_tier) {
            let to = self
                .peers
                .choose_in_tier_except(t, &[&b.peer], &mut self.rng)
                .cloned();
            if let Some(to) = to {
                self.steal_from(now, b, to, t);
                return;
            }
            tier = t.next();
        }
        // No tier gave work (or had peers): wait, longer each time.
        self.stats.steal_rounds_failed += 1;
        self.thief = Thief::Idle {
            next_round: now + self.backoff,
        };
        self.backoff = (self.backoff * 2).min(self.config.max_steal_backoff);
    }

    /// Sends one work steal for `b` to `to`, a peer of tier `tier`.
    fn steal_from(&mut self, now: Instant, b: Beneficiary, to: PeerId, tier: LatencyTier) {
        let id = MessageId(self.fresh_id());
        tracing::debug!(agent = %self.me, %to, ?tier, %id, "work steal");
        self.thief = Thief::Stealing {
            id,
            next: tier.next(),
            deadline: now + self.config.steal_timeout,
        };
        self.stats.steals_sent += 1;
        // Our RTTs go with the packet only when we steal for ourselves (an NSc2c manager
        // does not know its member's).
        let rtts = if b.peer == self.me {
            self.host_rtts()
        } else {
            Arc::default()
        };
        let steal = Steal {
            id,
            origin: self.me.clone(),
            source: b,
            ttl: self.config.rrp_ttl,
            tier,
            rtts,
        };
        self.send(to, steal.into_message());
    }

    /// Gathering a job ([`Config::with_gather`]): the agent to send this round's partner
    /// steal to, its host, and the node that would receive the work (NSp2p: this node; NSc2c:
    /// the light member of this manager's cluster whose ranks' partner it is, see
    /// `c2c_partner_steal_target`). `None` when no partner steal is due.
    ///
    /// Why: work steals go to peers of the thief's table, which holds its nearest agents,
    /// and givers give only to those of theirs. A job whose ranks started on far nodes
    /// therefore never gathers: a node near one rank is seldom near the others, and a far
    /// partner's node never hears the steals of a light node that runs a rank of its job
    /// (docs/results-log.md, "Scale": the oracle that gathers jobs led NSp2p by 0.46 to 0.88 on
    /// the Internet-like network).
    fn partner_steal_target(&mut self, now: Instant) -> Option<(PeerId, HostName, Beneficiary)> {
        if !self.config.gather {
            return None;
        }
        self.partners_asked
            .retain(|_, at| now.saturating_duration_since(*at) < PARTNER_STEAL_RETRY);
        let (host, b) = match self.config.topology {
            Topology::PeerToPeer => {
                let gathering = match (self.node, self.config.entity_cores) {
                    (Some(node), Some(cores)) => {
                        decision::gathering_jobs(&node, &self.entities, cores)
                    }
                    _ => Vec::new(),
                };
                let (_, host) = self.farthest_partner(&self.entities, &gathering)?;
                (host.clone(), self.myself()?)
            }
            Topology::ClusterToCluster => self.c2c_partner_steal_target(now)?,
        };
        let peer = self.hosts.holder(&host)?.clone();
        Some((peer, host, b))
    }

    /// Of the hosts `entities` exchange with, those beyond the local tier (as this agent
    /// measured them; at any latency for entities of the jobs in `gathering`) whose agent
    /// announced its host here and was not asked within [`PARTNER_STEAL_RETRY`]: the one
    /// whose latency costs its entity most (exchanges per second times RTT), with that cost.
    ///
    /// A node that gathers a job ([`decision::gathering_jobs`]) asks near partners too:
    /// the job's far pairs may be between other nodes, all near this one (traced at 1,000
    /// nodes: gatherers with every partner within 10 ms never asked, and their jobs stayed
    /// split over nodes 300 ms apart).
    pub(crate) fn farthest_partner<'e>(
        &self,
        entities: &'e [EntityProfile],
        gathering: &[JobId],
    ) -> Option<(f64, &'e HostName)> {
        let local = LOCAL_MAX_RTT.as_secs_f64();
        let mut best: Option<(f64, &HostName)> = None;
        for (e, p) in entities
            .iter()
            .flat_map(|e| e.partners.iter().map(move |p| (e, p)))
        {
            if p.host == self.host || self.partners_asked.contains_key(&p.host) {
                continue;
            }
            let near_counts = gathering.contains(&e.id.job);
            let Some(rtt) = self
                .rtt_to_host(&p.host)
                .filter(|r| near_counts || *r > local)
            else {
                continue;
            };
            let cost = p.exchanges_per_sec * rtt;
            // NaN and 0 rates are skipped; ties go to the first host in name order.
            let better =
                cost > 0.0 && best.is_none_or(|(c, h)| cost > c || (cost == c && p.host < *h));
            if better && self.hosts.holder(&p.host).is_some() {
                best = Some((cost, &p.host));
            }
        }
        best
    }

    /// Sends a partner steal for `b` to `to`, the agent of `host`, where a partner of an
    /// entity on `b`'s node runs: a work steal with a TTL of 1 (the partner's agent gives or
    /// says no, and passes nothing on; in NSc2c a member names its manager instead,
    /// [`Message::StealRedirect`]), carrying this node's RTTs to its peers and to its
    /// entities' partners (the giver weighs the communication term with them; an NSc2c
    /// manager's stand for its members'). If it gives nothing, the round goes on through the
    /// tiers as usual.
    fn partner_steal(&mut self, now: Instant, b: Beneficiary, to: PeerId, host: HostName) {
        let id = MessageId(self.fresh_id());
        tracing::debug!(agent = %self.me, %to, %host, %id, "partner steal");
        let next = match self.config.topology {
            Topology::PeerToPeer => LatencyTier::Local,
            Topology::ClusterToCluster => LatencyTier::Regional,
        };
        self.thief = Thief::Stealing {
            id,
            next: Some(next),
            deadline: now + self.config.steal_timeout,
        };
        self.stats.steals_sent += 1;
        self.stats.partner_steals_sent += 1;
        self.partners_asked.insert(host, now);
        let peers = self.host_rtts();
        let mut rtts: Vec<HostRtt> = peers.iter().cloned().collect();
        let mut partners: Vec<(&HostName, &f64)> = self
            .partner_rtts
            .iter()
            .filter(|(h, _)| !peers.iter().any(|r| r.host == **h))
            .collect();
        // Nearest first, as the peers' (the list is cut at its bound).
        partners.sort_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(b.0)));
        rtts.extend(partners.into_iter().map(|(host, rtt)| HostRtt {
            host: host.clone(),
            // Seconds to whole microseconds, saturating (a measured RTT is finite and >= 0).
            rtt_us: (*rtt * 1e6).clamp(0.0, f64::from(u32::MAX)) as u32,
        }));
        rtts.truncate(MAX_RTTS);
        let steal = Steal {
            id,
            origin: self.me.clone(),
            source: b,
            ttl: 1,
            tier: LatencyTier::Local,
            rtts: rtts.into(),
        };
        if self.config.topology == Topology::ClusterToCluster {
            self.redirectable = Some(steal.clone());
        }
        self.send(to, steal.into_message());
    }

    /// NSc2c: the member a partner steal of ours went to names its manager: send the same
    /// steal there (once per partner steal), if we still wait for its answer.
    fn on_steal_redirect(&mut self, now: Instant, from: &PeerId, id: MessageId, manager: PeerId) {
        let waiting = matches!(self.thief, Thief::Stealing { id: current, .. } if current == id);
        let Some(steal) = self.redirectable.take_if(|s| s.id == id) else {
            return;
        };
        if !waiting || manager == self.me || manager == *from {
            return;
        }
        tracing::debug!(agent = %self.me, %from, %manager, %id, "partner steal redirected to the member's manager");
        if let Thief::Stealing { deadline, .. } = &mut self.thief {
            *deadline = now + self.config.steal_timeout;
        }
        self.stats.steals_sent += 1;
        self.send(manager, steal.into_message());
    }

    /// Whether an entity here, or of a member this NSc2c manager manages, exchanges with a
    /// process on `host`.
    pub(crate) fn is_partner_host(&self, host: &HostName) -> bool {
        self.entities
            .iter()
            .chain(self.member_entities())
            .any(|e| e.partners.iter().any(|p| p.host == *host))
    }

    /// Of `entities`, those a steal for `thief` may take: none that left the thief's node
    /// lately (its steal lists them), unless their node is `leaving`, and for a partner
    /// steal from an agent outside our peer table only those with partners on its node
    /// ([`Agent::check_steal`]).
    pub(crate) fn for_thief<'e>(
        &self,
        entities: Cow<'e, [EntityProfile]>,
        thief: &Beneficiary,
        leaving: bool,
    ) -> Cow<'e, [EntityProfile]> {
        let partner_steal = self.peers.get(&thief.peer).is_none();
        let may = |e: &EntityProfile| {
            (leaving || !thief.departed.contains(&e.id))
                && (!partner_steal || e.partners.iter().any(|p| p.host == thief.host))
        };
        if entities.iter().all(may) {
            return entities;
        }
        Cow::Owned(entities.iter().filter(|e| may(e)).cloned().collect())
    }

    /// NSp2p: a peer that refused our steal now has work. Steal from it at once if we are
    /// between rounds and still light; the back-off restarts from its shortest pause.
    ///
    /// Also the answer to a steal of ours that reached a giver through another agent
    /// ([`StealRefusal::Forwarded`]): then we are still stealing, and ask the giver directly.
    /// NSc2c managers take hints too (managers steal on behalf of their members).
    fn on_work_available(&mut self, now: Instant, from: PeerId) {
        let may_take_hints = match self.config.topology {
            Topology::PeerToPeer => true,
            Topology::ClusterToCluster => self.is_manager(),
        };
        if !may_take_hints
            || matches!(self.thief, Thief::Receiving { .. })
            || self
                .hinted_at
                .is_some_and(|at| now < at + self.config.steal_period)
        {
            return;
        }
        let Some(tier) = self.peers.tier(&from) else {
            return;
        };
        if tier > self.config.max_tier {
            return;
        }
        let Some(b) = self.beneficiary(now) else {
            return;
        };
        tracing::debug!(agent = %self.me, %from, "work available: stealing now");
        self.hinted_at = Some(now);
        self.backoff = self.config.steal_backoff;
        self.steal_from(now, b, from, tier);
    }

    /// NSp2p: if a thief refused here lately would now get work (this node got loaded), tell
    /// it, so it steals at once rather than after its back-off. One hint per refusal, to the
    /// newest such thief: the steal it sends is decided afresh like any other.
    fn offer_work(&mut self, now: Instant) {
        if self.config.topology != Topology::PeerToPeer
            || self.leaving.is_some()
            || self.outgoing.is_some()
            || self.refused.is_empty()
            || !self.node_is_fresh()
        {
            return;
        }
        let Some(node) = self.node else {
            return;
        };
        self.refused
            .retain(|(_, at)| now.saturating_duration_since(*at) < REFUSED_THIEF_MEMORY);
        let policy = self.policy(now);
        let pick = self.refused.iter().rposition(|(thief, _)| {
            decision::select(
                &policy,
                &node,
                &self.entities,
                thief.destination(),
                self.config.max_group,
            )
            .is_some()
        });
        if let Some((thief, _)) = pick.and_then(|i| self.refused.remove(i)) {
            tracing::debug!(agent = %self.me, to = %thief.peer, "telling a refused thief that work is available");
            self.stats.work_hints_sent += 1;
            self.send(thief.peer, Message::WorkAvailable);
        }
    }

    /// Remembers a thief refused here, replacing an older refusal of the same one.
    fn remember_refusal(&mut self, now: Instant, thief: &Beneficiary) {
        self.refused.retain(|(b, _)| b.peer != thief.peer);
        if self.refused.len() >= REFUSED_THIEVES_KEPT {
            self.refused.pop_front();
        }
        self.refused.push_back((thief.clone(), now));
    }

    /// The current tier gave nothing: try the next one, with a fresh profile.
    fn escalate(&mut self, now: Instant) {
        let Thief::Stealing { next, .. } = self.thief else {
            return;
        };
        match self.beneficiary(now) {
            Some(b) => self.send_steal(now, b, next),
            None => {
                self.thief = Thief::Idle {
                    next_round: now + self.config.steal_period,
                }
            }
        }
    }

    fn on_migration_finished(&mut self, now: Instant, migration: MigrationId, completed: bool) {
        if matches!(self.thief, Thief::Receiving { migration: m, .. } if m == migration) {
            tracing::debug!(agent = %self.me, %migration, completed, "stolen work arrived");
            self.settle_after = Some(now);
            self.thief = Thief::Idle {
                next_round: now + self.config.steal_period,
            };
        }
        self.c2c_order_finished(now, migration);
    }

    /// Records a work-steal packet; returns whether it is new.
    fn remember(&mut self, origin: &PeerId, id: MessageId) -> bool {
        let key = (origin.clone(), id);
        if self.seen_set.contains(&key) {
            return false;
        }
        if self.seen.len() >= MAX_SEEN {
            if let Some(old) = self.seen.pop_front() {
                self.seen_set.remove(&old);
            }
        }
        self.seen.push_back(key.clone());
        self.seen_set.insert(key);
        true
    }

    /// Checks that work may move on `steal`, received from `from`: it comes from its origin
    /// itself (the transport authenticated `from`), its beneficiary is the origin (NSp2p) or
    /// a known agent (NSc2c: a member the origin manages), and the host it names is the one
    /// that agent announced itself ([`Agent::handle_peer_host`]).
    pub(crate) fn check_steal(&self, from: &PeerId, steal: &Steal) -> Result<(), StealRefusal> {
        if *from != steal.origin {
            if self.peers.get(&steal.origin).is_none() {
                return Err(StealRefusal::UnknownOrigin {
                    origin: steal.origin.clone(),
                });
            }
            return Err(StealRefusal::Forwarded {
                from: from.clone(),
                origin: steal.origin.clone(),
            });
        }
        let source = &steal.source;
        if self.config.topology == Topology::PeerToPeer && source.peer != steal.origin {
            return Err(StealRefusal::NotOrigin {
                beneficiary: source.peer.clone(),
                origin: steal.origin.clone(),
            });
        }
        // A partner steal comes from outside the peer table: for a host where a partner of
        // an entity here (or of a member's, for an NSc2c manager) runs, which wants that
        // entity nearer (only such entities are weighed for it, see `for_thief`).
        let partner_steal = || self.is_partner_host(&source.host);
        if self.peers.get(&source.peer).is_none() && !partner_steal() {
            return Err(StealRefusal::UnknownAgent {
                beneficiary: source.peer.clone(),
            });
        }
        match self.hosts.get(&source.peer) {
            Some(h) if *h == source.host => Ok(()),
            other => Err(StealRefusal::HostMismatch {
                beneficiary: source.peer.clone(),
                claimed: source.host.clone(),
                announced: other.map_or_else(|| "none".to_owned(), ToString::to_string),
            }),
        }
    }

    /// A steal that would get work here but reached us through another agent: tell its
    /// origin directly, so that it asks over its own connection. Returns false (nothing
    /// sent) when the origin is not a peer of ours; the packet then goes on as usual.
    pub(crate) fn hint_origin(&mut self, steal: &Steal) -> bool {
        if self.peers.get(&steal.origin).is_none() {
            return false;
        }
        tracing::debug!(agent = %self.me, origin = %steal.origin, "forwarded steal: telling its origin to ask here");
        self.stats.work_hints_sent += 1;
        self.send(steal.origin.clone(), Message::WorkAvailable);
        true
    }

    /// Counts and logs a refused steal (debug level: a hostile peer must not fill the log).
    pub(crate) fn refuse_steal(&mut self, from: &PeerId, why: &StealRefusal) {
        tracing::debug!(agent = %self.me, %from, "work steal refused: {why}");
        self.stats.steals_refused += 1;
    }

    fn on_work_steal(&mut self, now: Instant, from: PeerId, steal: Steal) {
        if steal.origin == self.me {
            // Our own packet came back round: nobody on the way gave work.
            if matches!(self.thief, Thief::Stealing { id, .. } if id == steal.id) {
                self.escalate(now);
            }
            return;
        }
        let checked = self.check_steal(&from, &steal);
        if let Err(why) = &checked {
            if !matches!(why, StealRefusal::Forwarded { .. }) {
                // A forged request: neither acted on nor passed on.
                self.refuse_steal(&from, why);
                return;
            }
        } else {
            // Its origin sent it (for itself, or as the NSc2c manager of the source), for
            // the host the source announced: what `ios-agent status` shows of that node.
            self.learn_load(
                now,
                &steal.source.peer,
                &steal.source.host,
                steal.source.profile,
                false,
            );
        }
        let first_time = self.remember(&steal.origin, steal.id);
        match self.config.topology {
            Topology::PeerToPeer => {
                if first_time && steal.source.peer != self.me && self.outgoing.is_none() {
                    if let Some(node) = self.own_profile() {
                        // The communication term, when our entities' partners are known: our
                        // RTTs against those the thief sent.
                        let near = self
                            .knows_partners()
                            .then(|| StealLatencies::new(self, &steal));
                        let views = near
                            .as_ref()
                            .map(|n| n.views(&self.host, &steal.source.host));
                        // Not back where it came from, unless this node is leaving; only
                        // ranks with partners there for a partner steal.
                        let leaving = self.leaving.is_some();
                        let may_go = self.for_thief(
                            self.may_go_to(now, &self.entities, &steal.source.host, leaving),
                            &steal.source,
                            leaving,
                        );
                        let in_table = self.peers.get(&steal.source.peer).is_some();
                        let jobs_here = node.job_offers(&self.entities);
                        let plan = decision::select_near(
                            &Policy {
                                jobs_here: &jobs_here,
                                gather_in_one_move: true,
                                ..self.policy(now)
                            },
                            &node,
                            &may_go,
                            steal.source.destination(),
                            self.config.max_group,
                            views.as_ref().map(|(a, b)| (a, b)),
                        );
                        // A malleable job whose rank 0 runs here may grow onto the thief
                        // instead, when that gains more than the move.
                        if let Some(grow) = self
                            .grow_for_steal(now, &steal)
                            .filter(|g| g.beats_move(plan.as_ref()))
                        {
                            if checked.is_err() {
                                self.stats.grow_offers_refused += 1;
                                if self.hint_origin(&steal) {
                                    return;
                                }
                                self.forward(from, steal, LatencyTier::Local);
                                return;
                            }
                            self.start_grow(now, grow, steal);
                            return;
                        }
                        if let Some(plan) = plan {
                            if checked.is_err() {
                                if self.hint_origin(&steal) {
                                    return;
                                }
                                self.forward(from, steal, LatencyTier::Local);
                                return;
                            }
                            tracing::info!(
                                agent = %self.me,
                                to = %steal.source.peer,
                                gain = plan.gain.gain,
                                thief_idle = steal.source.profile.free_cores(),
                                thief_job_offers = ?steal.source.job_offers,
                                "giving work"
                            );
                            let migration = MigrationId(self.fresh_id());
                            self.start_migration(
                                now,
                                migration,
                                plan.entities.clone(),
                                &steal.source,
                                Some(steal.origin.clone()),
                            );
                            self.send(
                                steal.origin,
                                Message::StealAccepted {
                                    id: steal.id,
                                    migration,
                                    entities: plan.entities,
                                    from_host: Some(self.host.clone()),
                                },
                            );
                            return;
                        }
                        // The thief is its own beneficiary in NSp2p: hint it if this node
                        // gets loaded later (only a thief that asked itself, and of the peer
                        // table: a hint from elsewhere is not taken).
                        if checked.is_ok() && in_table {
                            self.remember_refusal(now, &steal.source);
                        }
                    }
                }
                self.forward(from, steal, LatencyTier::Local);
            }
            Topology::ClusterToCluster => {
                self.c2c_work_steal(now, from, steal, first_time, checked.is_ok())
            }
        }
    }

    /// Passes a work steal on to a random peer of `tier` (TTL decremented), or tells the
    /// origin it is exhausted. An idle thief's steal goes to the home agent of a malleable
    /// job with a rank here instead, when there is one ([`Agent::grow_home`]).
    pub(crate) fn forward(&mut self, from: PeerId, steal: Steal, tier: LatencyTier) {
        let exclude = [&from, &steal.origin, &steal.source.peer, &self.me];
        let next = self.grow_home(&steal.source, &exclude).or_else(|| {
            self.peers
                .choose_in_tier_except(tier, &exclude, &mut self.rng)
                .cloned()
        });
        self.pass_on(steal, next);
    }

    /// Sends the steal on to `next` with its TTL decremented, or reports exhaustion.
    pub(crate) fn pass_on(&mut self, steal: Steal, next: Option<PeerId>) {
        match next {
            Some(to) if steal.ttl > 1 => {
                self.stats.steals_forwarded += 1;
                let steal = Steal {
                    ttl: steal.ttl - 1,
                    ..steal
                };
                self.send(to, steal.into_message());
            }
            _ => self.send(steal.origin, Message::StealExhausted { id: steal.id }),
        }
    }

    pub(crate) fn start_migration(
        &mut self,
        now: Instant,
        id: MigrationId,
        entities: Vec<EntityId>,
        to: &Beneficiary,
        notify: Option<PeerId>,
    ) {
        for e in &entities {
            self.held.insert(e.clone(), now + self.config.hold_down);
        }
        self.mark_departed(now, &entities, true);
        self.stats.migrations_started += 1;
        self.outgoing = Some(Outgoing {
            id,
            notify,
            deadline: now + self.config.migration_timeout,
            entities: entities.clone(),
            resize: None,
        });
        // Never dropped: the queue bound applies to sends only.
        self.actions.push_back(Action::Migrate {
            id,
            entities,
            to: to.peer.clone(),
            to_host: to.host.clone(),
        });
    }

    /// Lists `entities` in `departed` for two hold-downs from `now` (`gone`), or no longer
    /// (a move that failed: they never left).
    fn mark_departed(&mut self, now: Instant, entities: &[EntityId], gone: bool) {
        self.departed
            .retain(|(e, until)| *until > now && !entities.contains(e));
        if gone {
            let until = now + self.config.hold_down * 2;
            self.departed
                .extend(entities.iter().map(|e| (e.clone(), until)));
        }
    }

    fn finish_outgoing(&mut self, now: Instant, completed: bool) {
        let Some(out) = self.outgoing.take() else {
            return;
        };
        self.settle_after = Some(now);
        // The hold-down counts from the end of the move, and so do the two hold-downs in
        // which the entities may not come back: counted from its start, a move that took a
        // few seconds let a rank back just inside two hold-downs of its arrival (1,000
        // simulated nodes, NSp2p, seed 3: 118.6 s after).
        for e in &out.entities {
            self.held.insert(e.clone(), now + self.config.hold_down);
        }
        self.mark_departed(now, &out.entities, completed);
        match &out.resize {
            Some(resize) => self.finish_resize(now, resize, completed),
            None if completed => self.stats.migrations_completed += 1,
            None => self.stats.migrations_failed += 1,
        }
        if completed {
            self.entities.retain(|e| !out.entities.contains(&e.id));
        }
        if let Some(leaving) = self.leaving.as_mut() {
            if completed {
                leaving.moved += 1;
                leaving.last_moved = Some(now);
            } else {
                leaving.failed += 1;
            }
            // The next entity goes at once.
            leaving.next_call = now;
        }
        match out.notify {
            Some(n) if n == self.me => self.on_migration_finished(now, out.id, completed),
            Some(n) => self.send(
                n,
                Message::MigrationFinished {
                    migration: out.id,
                    completed,
                },
            ),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests;
