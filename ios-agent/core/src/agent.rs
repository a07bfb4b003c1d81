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
mod tests {
    use super::*;
    use crate::model::EntityProfile;
    use pcm_proto::{JobId, Rank};

    pub(super) fn peer(s: &str) -> PeerId {
        PeerId::new(s.as_bytes()).expect("valid")
    }

    pub(super) fn host(s: &str) -> HostName {
        HostName::new(s).expect("valid")
    }

    pub(super) fn agent(name: &str, now: Instant) -> Agent {
        Agent::new(peer(name), host(name), Config::default().with_seed(1), now)
            .expect("valid config")
    }

    pub(super) fn entity(rank: u32, cpu: f64) -> EntityProfile {
        let mut e = EntityProfile::new(
            EntityId {
                job: JobId::new("heat").expect("valid"),
                rank: Rank(rank),
            },
            cpu,
        );
        e.resident = Duration::from_secs(3600);
        e.age = Duration::from_secs(3600);
        e
    }

    /// `a` meets agent `name` (on host `name`): its announced host, then an RTT sample.
    pub(super) fn meet(a: &mut Agent, now: Instant, name: &str, rtt: Duration) {
        a.handle_peer_host(now, peer(name), host(name))
            .expect("host accepted");
        a.handle_peer_rtt(now, peer(name), rtt);
    }

    pub(super) fn drain(a: &mut Agent) -> Vec<Action> {
        std::iter::from_fn(|| a.poll_action()).collect()
    }

    #[test]
    fn config_errors_name_the_setting() {
        let err = Config::default()
            .with_rrp_ttl(0)
            .validate()
            .expect_err("bad");
        assert!(err.to_string().contains("rrp_ttl"));
        let err = Config::default().with_hold_down(Duration::ZERO).validate();
        assert!(
            err.is_ok(),
            "a zero hold-down disables damping and is allowed"
        );
        let err = Config::default()
            .with_steal_period(Duration::ZERO)
            .validate()
            .expect_err("bad");
        assert!(err.to_string().contains("steal_period"));
        let err = Config::default()
            .with_min_gain(-0.1)
            .validate()
            .expect_err("bad");
        assert!(err.to_string().contains("min_gain"));
    }

    #[test]
    fn loaded_agent_sends_nothing() {
        let t0 = Instant::now();
        let mut a = agent("a", t0);
        meet(&mut a, t0, "b", Duration::from_millis(1));
        a.handle_node_profile(
            t0,
            NodeProfile {
                cpu_load: 1.0,
                ..NodeProfile::idle(1.0, 1 << 30)
            },
        );
        assert_eq!(a.poll_timeout(), Some(t0 + DEFAULT_PEER_TIMEOUT));
        a.handle_timeout(t0 + Duration::from_secs(1));
        assert!(drain(&mut a).is_empty());
    }

    #[test]
    fn light_agent_steals_locally_and_escalates_on_exhaustion() {
        let t0 = Instant::now();
        let mut a = agent("a", t0);
        meet(&mut a, t0, "l", Duration::from_millis(1));
        meet(&mut a, t0, "r", Duration::from_millis(50));
        a.handle_node_profile(t0, NodeProfile::idle(2.0, 1 << 30));
        assert_eq!(a.poll_timeout(), Some(t0));
        a.handle_timeout(t0);
        let actions = drain(&mut a);
        let [Action::Send {
            to,
            message: Message::WorkSteal { id, tier, ttl, .. },
        }] = actions.as_slice()
        else {
            panic!("one work steal expected, got {actions:?}");
        };
        assert_eq!(
            (to, *tier, *ttl),
            (&peer("l"), LatencyTier::Local, DEFAULT_RRP_TTL)
        );
        a.handle_message(t0, peer("l"), Message::StealExhausted { id: *id });
        let actions = drain(&mut a);
        let [Action::Send {
            to,
            message: Message::WorkSteal { tier, .. },
        }] = actions.as_slice()
        else {
            panic!("one work steal expected, got {actions:?}");
        };
        assert_eq!((to, *tier), (&peer("r"), LatencyTier::Regional));
        // No national or global peers: the round ends, and the next waits for the backoff.
        let t1 = t0 + DEFAULT_STEAL_TIMEOUT;
        a.handle_timeout(t1);
        assert!(drain(&mut a).is_empty());
        assert_eq!(a.stats().steal_rounds_failed, 1);
        assert_eq!(a.poll_timeout(), Some(t1 + DEFAULT_STEAL_BACKOFF));
    }

    pub(super) fn steal_from(thief: &str, id: u64, profile: NodeProfile) -> Message {
        Message::WorkSteal {
            id: MessageId(id),
            origin: peer(thief),
            source: peer(thief),
            source_host: host(thief),
            source_profile: profile,
            ttl: 3,
            tier: LatencyTier::Local,
            rtts: Default::default(),
            job_offers: Vec::new(),
            departed: Vec::new(),
        }
    }

    pub(super) fn migrations(actions: &[Action]) -> Vec<(MigrationId, Vec<EntityId>, PeerId)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Migrate {
                    id, entities, to, ..
                } => Some((*id, entities.clone(), to.clone())),
                Action::Send { .. } | Action::Resize { .. } => None,
            })
            .collect()
    }

    #[test]
    fn a_leaving_agent_calls_its_peers_and_gives_every_entity_to_idle_thieves_one_by_one() {
        let t0 = Instant::now();
        let mut a = agent("a", t0);
        meet(&mut a, t0, "b", Duration::from_millis(1));
        meet(&mut a, t0, "c", Duration::from_millis(50));
        // An idle, uncontended node: nothing would move if it were not leaving. Its entities
        // arrived a moment ago, within the hold-down.
        a.handle_node_profile(t0, NodeProfile::idle(2.0, 1 << 30));
        let mut fresh = [entity(0, 0.9), entity(1, 0.9)];
        for e in &mut fresh {
            e.resident = Duration::from_secs(1);
        }
        a.handle_entities(t0, fresh.to_vec());
        drain(&mut a);
        assert!(a.leave_progress().is_none());
        a.handle_leave(t0);
        let calls: Vec<PeerId> = drain(&mut a)
            .into_iter()
            .filter_map(|x| match x {
                Action::Send {
                    to,
                    message: Message::WorkAvailable,
                } => Some(to),
                _ => None,
            })
            .collect();
        assert_eq!(calls, vec![peer("b"), peer("c")], "nearest tier first");
        // It does not steal, even though its node is idle.
        a.handle_timeout(t0 + Duration::from_secs(1));
        assert!(drain(&mut a).iter().all(|x| !matches!(
            x,
            Action::Send {
                message: Message::WorkSteal { .. },
                ..
            }
        )));

        a.handle_message(
            t0,
            peer("b"),
            steal_from("b", 1, NodeProfile::idle(1.0, 1 << 30)),
        );
        let moves = migrations(&drain(&mut a));
        assert_eq!(moves.len(), 1, "one entity at a time");
        let (first, entities, to) = moves[0].clone();
        assert_eq!((entities.len(), to), (1, peer("b")));
        let progress = a.leave_progress().expect("leaving");
        assert_eq!((progress.entities_left, progress.moving), (2, Some(first)));
        // While it moves, another thief gets nothing.
        a.handle_message(
            t0,
            peer("c"),
            steal_from("c", 2, NodeProfile::idle(1.0, 1 << 30)),
        );
        assert!(migrations(&drain(&mut a)).is_empty());

        let t1 = t0 + Duration::from_secs(1);
        a.handle_migration_outcome(t1, first, MigrationOutcome::Completed);
        // The peers are called again at once for the entity left.
        assert_eq!(a.poll_timeout(), Some(t1));
        a.handle_timeout(t1);
        assert!(drain(&mut a).iter().any(|x| matches!(
            x,
            Action::Send {
                message: Message::WorkAvailable,
                ..
            }
        )));
        a.handle_message(
            t1,
            peer("c"),
            steal_from("c", 3, NodeProfile::idle(1.0, 1 << 30)),
        );
        let moves = migrations(&drain(&mut a));
        assert_eq!(moves.len(), 1);
        a.handle_migration_outcome(t1, moves[0].0, MigrationOutcome::Completed);
        let progress = a.leave_progress().expect("leaving");
        assert!(progress.is_drained(), "{progress:?}");
        assert_eq!((progress.moved, progress.failed), (2, 0));
        // Drained: no more calls.
        a.handle_timeout(t1 + Duration::from_secs(10));
        assert!(drain(&mut a).iter().all(|x| !matches!(
            x,
            Action::Send {
                message: Message::WorkAvailable,
                ..
            }
        )));
    }

    #[test]
    fn a_leaving_agent_gives_a_rank_to_an_idle_thief_even_with_less_room_than_it_uses() {
        // Seen on emulated nodes capped at 0.6 CPU: the last rank of a leaving node used the
        // whole cap, the idle thief had 0.55 free, and a gain above 0 was never reached.
        let t0 = Instant::now();
        let thief = NodeProfile {
            cpu_load: 0.05,
            ..NodeProfile::idle(0.6, 1 << 30)
        };
        for leaving in [false, true] {
            let mut a = agent("a", t0);
            meet(&mut a, t0, "b", Duration::from_millis(1));
            a.handle_node_profile(
                t0,
                NodeProfile {
                    cpu_load: 0.6,
                    ..NodeProfile::idle(0.6, 1 << 30)
                },
            );
            a.handle_entities(t0, vec![entity(0, 0.6)]);
            if leaving {
                a.handle_leave(t0);
            }
            drain(&mut a);
            a.handle_message(t0, peer("b"), steal_from("b", 1, thief));
            assert_eq!(
                migrations(&drain(&mut a)).len(),
                usize::from(leaving),
                "leaving: {leaving}"
            );
        }
    }

    #[test]
    fn a_leaving_agent_gives_nothing_to_a_loaded_thief() {
        let t0 = Instant::now();
        let mut a = agent("a", t0);
        meet(&mut a, t0, "b", Duration::from_millis(1));
        a.handle_node_profile(t0, NodeProfile::idle(2.0, 1 << 30));
        a.handle_entities(t0, vec![entity(0, 0.9)]);
        a.handle_leave(t0);
        drain(&mut a);
        let busy = NodeProfile {
            cpu_load: 1.0,
            ..NodeProfile::idle(1.0, 1 << 30)
        };
        a.handle_message(t0, peer("b"), steal_from("b", 1, busy));
        assert!(migrations(&drain(&mut a)).is_empty());
        assert_eq!(a.leave_progress().map(|p| p.entities_left), Some(1));
    }

    #[test]
    fn a_departing_profile_offers_nothing_and_does_not_steal() {
        let idle = NodeProfile::idle(2.0, 1 << 30);
        let gone = idle.departing();
        assert_eq!(gone.entity_capacity(), 0.0);
        assert_eq!(gone.availability(crate::model::Resource::Cpu), 0.0);
        assert!(!gone.is_lightly_loaded(DEFAULT_LIGHT_THRESHOLD));
        assert!(gone.validate().is_ok());
    }

    #[test]
    fn overloaded_agent_gives_work_then_holds_it_down() {
        let t0 = Instant::now();
        let mut a = agent("a", t0);
        meet(&mut a, t0, "b", Duration::from_millis(1));
        a.handle_node_profile(
            t0,
            NodeProfile {
                cpu_load: 2.0,
                ..NodeProfile::idle(1.0, 1 << 30)
            },
        );
        a.handle_entities(t0, vec![entity(0, 0.5), entity(1, 0.5)]);
        let steal = Message::WorkSteal {
            id: MessageId(9),
            origin: peer("b"),
            source: peer("b"),
            source_host: host("b"),
            source_profile: NodeProfile::idle(1.0, 1 << 30),
            ttl: 3,
            tier: LatencyTier::Local,
            rtts: Default::default(),
            job_offers: Vec::new(),
            departed: Vec::new(),
        };
        a.handle_message(t0, peer("b"), steal.clone());
        let actions = drain(&mut a);
        let [Action::Migrate {
            id,
            entities,
            to_host,
            ..
        }, Action::Send {
            message: Message::StealAccepted { migration, .. },
            ..
        }] = actions.as_slice()
        else {
            panic!("migrate and accept expected, got {actions:?}");
        };
        assert_eq!((id, entities.len(), to_host), (migration, 1, &host("b")));
        // The same packet again (a duplicate) is not acted on twice: it is passed on.
        a.handle_message(t0, peer("b"), steal);
        assert!(drain(&mut a).iter().all(|x| matches!(
            x,
            Action::Send {
                message: Message::StealExhausted { .. },
                ..
            }
        )));
        a.handle_migration_outcome(
            t0 + Duration::from_secs(1),
            *id,
            MigrationOutcome::Completed,
        );
        let actions = drain(&mut a);
        assert!(matches!(
            actions.as_slice(),
            [Action::Send {
                message: Message::MigrationFinished {
                    completed: true,
                    ..
                },
                ..
            }]
        ));
        assert_eq!(a.entities().len(), 1);
        assert!(a.held_until(&entities[0]).is_some());
    }

    /// Two ranks at half a core each, both exchanging 10 times a second with a partner on
    /// host `p`, which the giver `a` has not met as a peer; a far thief `b` (150 ms) offers a
    /// whole core and has not measured `p` either. Unmeasured at the giver, the partner does
    /// not count and the rank goes; once `a` measures `p` (1 ms) as `hosts_to_measure` asks,
    /// the move would take the rank 200 ms (assumed) from its partner and it stays.
    #[test]
    fn given_its_ranks_partners_measured_near_then_a_giver_keeps_them_from_a_far_thief() {
        let t0 = Instant::now();
        let loaded = NodeProfile {
            cpu_load: 2.0,
            ..NodeProfile::idle(1.0, 1 << 30)
        };
        let ranks = || {
            [entity(0, 0.5), entity(1, 0.5)]
                .into_iter()
                .map(|mut e| {
                    e.partners = vec![crate::model::Partner {
                        host: host("p"),
                        exchanges_per_sec: 10.0,
                    }];
                    e
                })
                .collect::<Vec<_>>()
        };
        let giver = |measure: bool| {
            let mut a = agent("a", t0);
            meet(&mut a, t0, "b", Duration::from_millis(150));
            a.handle_node_profile(t0, loaded);
            a.handle_entities(t0, ranks());
            assert_eq!(a.hosts_to_measure(), vec![host("p")]);
            // Only the hosts asked for are kept.
            a.handle_partner_rtt(&host("q"), Duration::from_millis(1));
            if measure {
                a.handle_partner_rtt(&host("p"), Duration::from_millis(1));
            }
            assert!(a.rtt_to_host(&host("b")).is_some());
            assert_eq!(a.rtt_to_host(&host("p")).is_some(), measure);
            assert!(a.rtt_to_host(&host("q")).is_none());
            drain(&mut a);
            a.handle_message(
                t0,
                peer("b"),
                steal_from("b", 1, NodeProfile::idle(1.0, 1 << 30)),
            );
            migrations(&drain(&mut a)).len()
        };
        assert_eq!(giver(false), 1, "no partner measured: the CPU gain decides");
        assert_eq!(giver(true), 0, "the partner is near here and unknown there");
        // Hosts no longer partners are forgotten.
        let mut a = agent("a", t0);
        a.handle_entities(t0, ranks());
        a.hosts_to_measure();
        a.handle_partner_rtt(&host("p"), Duration::from_millis(1));
        a.handle_entities(t0, vec![entity(0, 0.5)]);
        assert!(a.hosts_to_measure().is_empty());
        assert!(a.rtt_to_host(&host("p")).is_none());
    }

    /// Partner steals ([`Config::with_gather`]): a light node that runs a rank whose partner
    /// is on a far node outside its peer table asks that node's agent directly, and gets the
    /// partner (it computes as fast here and waits less); the far agent gives only ranks with
    /// partners on the thief's node, and refuses the same steal from a node that runs none of
    /// its ranks' partners. Without gathering the thief asks only its table.
    #[test]
    fn given_a_far_partner_outside_the_peer_table_then_a_light_node_steals_it_to_itself() {
        let t0 = Instant::now();
        let far = Duration::from_millis(300);
        let with_partner = |rank: u32, on: &str| {
            let mut e = entity(rank, 1.0);
            e.partners = vec![crate::model::Partner {
                host: host(on),
                exchanges_per_sec: 2.0,
            }];
            e
        };
        // x: four cores, one rank of the job; its table holds only a near peer.
        let thief = |gather: bool| {
            let config = Config::default().with_seed(1).with_gather(gather);
            let mut x = Agent::new(peer("x"), host("x"), config, t0).expect("valid config");
            meet(&mut x, t0, "near", Duration::from_millis(2));
            // The driver measured the partner's host over a connection to its agent.
            x.handle_peer_host(t0, peer("y"), host("y"))
                .expect("host accepted");
            x.handle_node_profile(
                t0,
                NodeProfile {
                    cpu_load: 1.0,
                    ..NodeProfile::idle(4.0, 1 << 30)
                },
            );
            x.handle_entities(t0, vec![with_partner(0, "y")]);
            assert_eq!(x.hosts_to_measure(), vec![host("y")]);
            x.handle_partner_rtt(&host("y"), far);
            x
        };
        // y: one core, the partner rank and a rank of another job.
        let giver = |partner_here: bool| {
            let mut y = agent("y", t0);
            meet(&mut y, t0, "near-y", Duration::from_millis(2));
            y.handle_peer_host(t0, peer("x"), host("x"))
                .expect("host accepted");
            y.handle_node_profile(
                t0,
                NodeProfile {
                    cpu_load: 1.0,
                    ..NodeProfile::idle(1.0, 1 << 30)
                },
            );
            let mut other = entity(7, 1.0);
            other.id.job = JobId::new("other").expect("valid");
            let mut ranks = vec![other];
            if partner_here {
                ranks.push(with_partner(1, "x"));
            }
            y.handle_entities(t0, ranks);
            y.hosts_to_measure();
            y.handle_partner_rtt(&host("x"), far);
            y
        };
        let mut x = thief(true);
        x.handle_timeout(t0);
        let actions = drain(&mut x);
        let [Action::Send {
            to,
            message: steal @ Message::WorkSteal { ttl: 1, rtts, .. },
        }] = actions.as_slice()
        else {
            panic!("one partner steal expected, got {actions:?}");
        };
        assert_eq!(to, &peer("y"));
        assert!(
            rtts.iter().any(|r| r.host == host("y")),
            "the steal carries the thief's partner RTTs: {rtts:?}"
        );
        assert_eq!(x.stats().partner_steals_sent, 1);
        let mut y = giver(true);
        y.handle_message(t0, peer("x"), steal.clone());
        let moved = migrations(&drain(&mut y));
        assert_eq!(moved.len(), 1, "the partner goes to the thief");
        assert_eq!(moved[0].1, vec![with_partner(1, "x").id]);
        assert_eq!(moved[0].2, peer("x"));
        // A node that runs no partner of y's ranks gets nothing from outside y's table.
        let mut y = giver(false);
        y.handle_message(t0, peer("x"), steal.clone());
        assert!(migrations(&drain(&mut y)).is_empty());
        assert_eq!(y.stats().steals_refused, 1);
        // The partner host is not asked again at once: the round goes on through the tiers.
        x.handle_timeout(t0 + DEFAULT_STEAL_TIMEOUT);
        let actions = drain(&mut x);
        assert!(
            matches!(actions.as_slice(), [Action::Send { to, message: Message::WorkSteal { ttl, .. } }]
                if *to == peer("near") && *ttl == DEFAULT_RRP_TTL),
            "{actions:?}"
        );
        // Without gathering, the thief asks its table only.
        let mut x = thief(false);
        x.handle_timeout(t0);
        let actions = drain(&mut x);
        assert!(
            matches!(actions.as_slice(), [Action::Send { to, .. }] if *to == peer("near")),
            "{actions:?}"
        );
        assert_eq!(x.stats().partner_steals_sent, 0);
    }

    /// A node's steals list the entities that left it within two hold-downs, and a giver
    /// sends none of them back, whatever its own records say (an NSc2c cluster whose
    /// manager changed keeps none: a ping-pong at 100 simulated nodes came so).
    #[test]
    fn given_a_rank_that_left_the_thief_lately_then_no_giver_sends_it_back() {
        let t0 = Instant::now();
        let overloaded = NodeProfile {
            cpu_load: 2.0,
            ..NodeProfile::idle(1.0, 1 << 30)
        };
        // b gives rank 0 away...
        let mut b = agent("b", t0);
        meet(&mut b, t0, "c", Duration::from_millis(1));
        b.handle_node_profile(t0, overloaded);
        b.handle_entities(t0, vec![entity(0, 0.5), entity(1, 0.5)]);
        b.handle_message(
            t0,
            peer("c"),
            steal_from("c", 1, NodeProfile::idle(1.0, 1 << 30)),
        );
        let moved = migrations(&drain(&mut b));
        assert_eq!(moved.len(), 1);
        let gone = moved[0].1.clone();
        // The move takes 2 s.
        let arrived = t0 + Duration::from_secs(2);
        b.handle_migration_outcome(arrived, moved[0].0, MigrationOutcome::Completed);
        // ...and once idle, its steals name it.
        let t1 = t0 + Duration::from_secs(3);
        b.handle_entities(t1, vec![entity(1, 0.5)]);
        b.handle_node_profile(t1, NodeProfile::idle(2.0, 1 << 30));
        b.handle_timeout(t1);
        let sent = drain(&mut b);
        let departed = sent.iter().find_map(|a| match a {
            Action::Send {
                message: Message::WorkSteal { departed, .. },
                ..
            } => Some(departed.clone()),
            _ => None,
        });
        assert_eq!(departed, Some(gone.clone()), "{sent:?}");
        // A loaded giver that holds only that rank does not send it back to b; another
        // thief gets it.
        let giver = || {
            let mut a = agent("a", t0);
            meet(&mut a, t0, "b", Duration::from_millis(1));
            meet(&mut a, t0, "d", Duration::from_millis(1));
            a.handle_node_profile(t0, overloaded);
            let mut e = entity(0, 0.5);
            e.id = gone[0].clone();
            a.handle_entities(t0, vec![e, entity(9, 0.5)]);
            a
        };
        let mut steal = steal_from("b", 2, NodeProfile::idle(1.0, 1 << 30));
        if let Message::WorkSteal { departed, .. } = &mut steal {
            departed.clone_from(&gone);
        }
        let mut a = giver();
        a.handle_message(t0, peer("b"), steal);
        let to_b = migrations(&drain(&mut a));
        assert!(to_b.iter().all(|(_, e, _)| *e != gone), "{to_b:?}");
        let mut a = giver();
        a.handle_message(
            t0,
            peer("d"),
            steal_from("d", 3, NodeProfile::idle(1.0, 1 << 30)),
        );
        assert_eq!(migrations(&drain(&mut a)).len(), 1);
        // Two hold-downs after the move started, b still names it; two hold-downs after it
        // ended, no longer.
        b.handle_timeout(t0 + DEFAULT_HOLD_DOWN * 2);
        assert_eq!(b.departed(), gone);
        b.handle_timeout(arrived + DEFAULT_HOLD_DOWN * 2);
        assert!(b.departed().is_empty());
    }

    /// A rank stolen from a node does not go back there within two hold-downs, though it
    /// may go elsewhere; after that it may.
    #[test]
    fn a_stolen_rank_does_not_go_back_to_its_giver_within_two_hold_downs() {
        let t0 = Instant::now();
        // The node's owner takes its one core.
        let owned = NodeProfile {
            cpu_load: 2.0,
            competing: 1.0,
            ..NodeProfile::idle(1.0, 1 << 30)
        };
        let mut b = agent("b", t0);
        meet(&mut b, t0, "a", Duration::from_millis(1));
        meet(&mut b, t0, "c", Duration::from_millis(1));
        b.handle_node_profile(t0, NodeProfile::idle(1.0, 1 << 30));
        b.handle_timeout(t0 + Duration::from_secs(3));
        let (giver, id) = drain(&mut b)
            .into_iter()
            .find_map(|a| match a {
                Action::Send {
                    to,
                    message: Message::WorkSteal { id, .. },
                } => Some((to, id)),
                _ => None,
            })
            .expect("an idle agent steals");
        let other = if giver == peer("a") { "c" } else { "a" };
        let giver_name = String::from_utf8_lossy(giver.as_bytes()).into_owned();
        let stolen = entity(0, 0.5);
        b.handle_message(
            t0 + Duration::from_secs(3),
            giver.clone(),
            Message::StealAccepted {
                id,
                migration: MigrationId(7),
                entities: vec![stolen.id.clone()],
                from_host: None,
            },
        );
        // The rank has arrived (and been here long enough for the hold-down), and the node's
        // owner takes its core.
        let later = t0 + Duration::from_secs(70);
        b.handle_node_profile(later, owned);
        b.handle_entities(later, vec![stolen.clone()]);
        drain(&mut b);
        let idle = NodeProfile::idle(1.0, 1 << 30);
        b.handle_message(later, giver.clone(), steal_from(&giver_name, 1, idle));
        assert!(migrations(&drain(&mut b)).is_empty(), "back to its giver");
        b.handle_message(later, peer(other), steal_from(other, 2, idle));
        assert_eq!(migrations(&drain(&mut b)).len(), 1, "to another thief");
        // Two hold-downs after the steal, it may go back.
        let mut b2 = agent("b", t0);
        meet(&mut b2, t0, "a", Duration::from_millis(1));
        b2.no_return.insert(
            stolen.id.clone(),
            (host("a"), t0 + Duration::from_secs(123)),
        );
        b2.handle_node_profile(later, owned);
        b2.handle_entities(later, vec![stolen.clone()]);
        drain(&mut b2);
        b2.handle_message(later, peer("a"), steal_from("a", 3, idle));
        assert!(
            migrations(&drain(&mut b2)).is_empty(),
            "still barred at 70 s"
        );
        let after = t0 + Duration::from_secs(124);
        b2.handle_node_profile(after, owned);
        b2.handle_message(after, peer("a"), steal_from("a", 4, idle));
        assert_eq!(migrations(&drain(&mut b2)).len(), 1, "free to go back");
    }

    /// A steal refused while the node had no spare work is answered later, when the node
    /// gets loaded, by a hint; the thief then steals from that node at once, back-off or not.
    #[test]
    fn a_refused_thief_is_told_when_work_appears() {
        let t0 = Instant::now();
        let mut victim = agent("v", t0);
        meet(&mut victim, t0, "t", Duration::from_millis(1));
        victim.handle_node_profile(t0, NodeProfile::idle(2.0, 1 << 30));
        victim.handle_entities(t0, vec![entity(0, 0.5), entity(1, 0.5)]);
        let mut thief = agent("t", t0);
        meet(&mut thief, t0, "v", Duration::from_millis(1));
        thief.handle_node_profile(t0, NodeProfile::idle(1.0, 1 << 30));
        thief.handle_timeout(t0);
        let actions = drain(&mut thief);
        let [Action::Send { to, message: steal }] = actions.as_slice() else {
            panic!("one work steal expected, got {actions:?}");
        };
        assert_eq!(to, &peer("v"));
        victim.handle_message(t0, peer("t"), steal.clone());
        let answer = drain(&mut victim);
        let [Action::Send {
            message: exhausted @ Message::StealExhausted { .. },
            ..
        }] = answer.as_slice()
        else {
            panic!("an unloaded node gives no work, got {answer:?}");
        };
        thief.handle_message(t0, peer("v"), exhausted.clone());
        assert!(drain(&mut thief).is_empty());
        assert!(!thief.is_stealing(), "the round ended; the thief backs off");
        let t1 = t0 + Duration::from_millis(500);
        // A competing load takes the victim's node: the refused thief hears of it at once.
        let t2 = t1 + Duration::from_millis(500);
        victim.handle_node_profile(
            t2,
            NodeProfile {
                cpu_load: 3.0,
                competing: 1.0,
                ..NodeProfile::idle(2.0, 1 << 30)
            },
        );
        let hints = drain(&mut victim);
        assert!(
            matches!(hints.as_slice(), [Action::Send { to, message: Message::WorkAvailable }] if to == &peer("t")),
            "one hint to the refused thief expected, got {hints:?}"
        );
        assert_eq!(victim.stats().work_hints_sent, 1);
        // Told once: the next profile sends nothing more.
        victim.handle_node_profile(
            t2 + Duration::from_secs(1),
            NodeProfile {
                cpu_load: 3.0,
                competing: 1.0,
                ..NodeProfile::idle(2.0, 1 << 30)
            },
        );
        assert!(drain(&mut victim).is_empty());
        // The thief steals from the victim now, well before its back-off would end.
        thief.handle_message(t2, peer("v"), Message::WorkAvailable);
        let actions = drain(&mut thief);
        let [Action::Send {
            to,
            message: steal @ Message::WorkSteal { .. },
        }] = actions.as_slice()
        else {
            panic!("a work steal expected after the hint, got {actions:?}");
        };
        assert_eq!(to, &peer("v"));
        victim.handle_message(t2, peer("t"), steal.clone());
        assert!(
            drain(&mut victim)
                .iter()
                .any(|a| matches!(a, Action::Migrate { to_host, .. } if to_host == &host("t"))),
            "the victim gives work to the thief"
        );
        // A second hint within the steal period is ignored (hints cannot make an agent
        // send steals faster than its own rounds would).
        let mut other = agent("o", t0);
        meet(&mut other, t0, "v", Duration::from_millis(1));
        other.handle_node_profile(t0, NodeProfile::idle(1.0, 1 << 30));
        let exhaust = |a: &mut Agent, at: Instant| {
            let sent = drain(a);
            let [Action::Send {
                message: Message::WorkSteal { id, .. },
                ..
            }] = sent.as_slice()
            else {
                panic!("one work steal expected, got {sent:?}");
            };
            a.handle_message(at, peer("v"), Message::StealExhausted { id: *id });
            assert!(!a.is_stealing());
        };
        other.handle_timeout(t0);
        exhaust(&mut other, t0);
        let t3 = t0 + Duration::from_millis(500);
        other.handle_message(t3, peer("v"), Message::WorkAvailable);
        exhaust(&mut other, t3);
        other.handle_message(
            t3 + Duration::from_millis(500),
            peer("v"),
            Message::WorkAvailable,
        );
        assert!(drain(&mut other).is_empty());
        // A hint from an unknown peer is ignored.
        let mut lone = agent("l", t0);
        lone.handle_node_profile(t0, NodeProfile::idle(1.0, 1 << 30));
        lone.handle_message(t0, peer("x"), Message::WorkAvailable);
        assert!(drain(&mut lone).is_empty());
    }

    fn steal_bytes() -> Vec<u8> {
        let m = Message::WorkSteal {
            id: MessageId(1),
            origin: peer("b"),
            source: peer("b"),
            source_host: host("b"),
            source_profile: NodeProfile::idle(2.0, 1 << 30),
            ttl: 3,
            tier: LatencyTier::Local,
            rtts: Default::default(),
            job_offers: Vec::new(),
            departed: Vec::new(),
        };
        let mut out = Vec::new();
        ciborium::into_writer(&m, &mut out).expect("encodes");
        out
    }

    proptest::proptest! {
        /// Mutated wire messages either fail to decode or are handled without panicking,
        /// by a loaded agent in either topology.
        #[test]
        fn hostile_messages_never_panic(edits in proptest::collection::vec((0usize..200, 0u8..=255), 1..6), c2c: bool) {
            let t0 = Instant::now();
            let topology = if c2c { Topology::ClusterToCluster } else { Topology::PeerToPeer };
            let mut a = Agent::new(peer("a"), host("a"), Config::default().with_seed(3).with_topology(topology), t0)
                .expect("valid config");
            meet(&mut a, t0, "b", Duration::from_millis(1));
            a.handle_node_profile(t0, NodeProfile { cpu_load: 3.0, ..NodeProfile::idle(1.0, 1 << 30) });
            a.handle_entities(t0, vec![entity(0, 0.33), entity(1, 0.33), entity(2, 0.33)]);
            let mut bytes = steal_bytes();
            for (pos, b) in edits {
                let i = pos % bytes.len();
                bytes[i] = b;
            }
            if let Ok(m) = ciborium::from_reader::<Message, _>(bytes.as_slice()) {
                a.handle_message(t0, peer("b"), m);
                a.handle_timeout(t0 + Duration::from_secs(1));
                while a.poll_action().is_some() {}
            }
        }
    }

    /// A loaded agent with two ranks that would give one to any idle thief.
    fn loaded_giver(t0: Instant) -> Agent {
        let mut a = agent("a", t0);
        a.handle_node_profile(
            t0,
            NodeProfile {
                cpu_load: 2.0,
                ..NodeProfile::idle(1.0, 1 << 30)
            },
        );
        a.handle_entities(t0, vec![entity(0, 0.5), entity(1, 0.5)]);
        drain(&mut a);
        a
    }

    pub(super) fn forged(origin: &str, source: &str, source_host: &str) -> Message {
        Message::WorkSteal {
            id: MessageId(77),
            origin: peer(origin),
            source: peer(source),
            source_host: host(source_host),
            // A fake idle 64-core node.
            source_profile: NodeProfile::idle(64.0, 1 << 40),
            ttl: 3,
            tier: LatencyTier::Local,
            rtts: Default::default(),
            job_offers: Vec::new(),
            departed: Vec::new(),
        }
    }

    /// Issue 12, item 5: a pool-key holder "k" sends one work steal with a made-up origin
    /// and source, a fake idle 64-core profile and `source_host=localhost`. No work moves,
    /// and the packet goes no further.
    #[test]
    fn given_a_forged_work_steal_then_nothing_moves() {
        let t0 = Instant::now();
        let mut a = loaded_giver(t0);
        a.handle_peer_rtt(t0, peer("k"), Duration::from_millis(1));
        a.handle_peer_rtt(t0, peer("b"), Duration::from_millis(1));
        a.handle_message(t0, peer("k"), forged("x", "y", "localhost"));
        let actions = drain(&mut a);
        assert!(migrations(&actions).is_empty(), "{actions:?}");
        assert!(
            actions.iter().all(|x| !matches!(
                x,
                Action::Send {
                    message: Message::WorkSteal { .. },
                    ..
                }
            )),
            "a forged steal is not passed on: {actions:?}"
        );
        assert_eq!(a.stats().steals_refused, 1);
    }

    /// Each way of pointing a move elsewhere than the host of the agent asking is refused;
    /// the honest request that follows is served.
    #[test]
    fn a_move_goes_only_to_the_announced_host_of_the_agent_that_asked() {
        let t0 = Instant::now();
        let mut a = loaded_giver(t0);
        meet(&mut a, t0, "k", Duration::from_millis(1));
        meet(&mut a, t0, "b", Duration::from_millis(1));
        let cases = [
            // Its own id, a host that is not the one it announced.
            forged("k", "k", "localhost"),
            forged("k", "k", "b"),
            // Work for another agent (b did not ask).
            forged("k", "b", "b"),
            // A beneficiary nobody knows, with a plausible host.
            forged("k", "y", "y"),
        ];
        for (i, m) in cases.into_iter().enumerate() {
            a.handle_message(t0, peer("k"), m);
            let actions = drain(&mut a);
            assert!(migrations(&actions).is_empty(), "case {i}: {actions:?}");
            assert_eq!(a.stats().steals_refused, i as u64 + 1, "case {i}");
        }
        // Claiming to be b: the packet is taken as forwarded. Nothing moves; b (the origin
        // named) is told to ask itself, and nothing else is sent.
        a.handle_message(t0, peer("k"), forged("b", "b", "b"));
        let actions = drain(&mut a);
        assert_eq!(
            actions,
            vec![Action::Send {
                to: peer("b"),
                message: Message::WorkAvailable
            }]
        );
        // k asking for itself, on its announced host, gets work.
        a.handle_message(t0, peer("k"), forged("k", "k", "k"));
        let moves = migrations(&drain(&mut a));
        assert_eq!(moves.len(), 1);
        assert_eq!(moves[0].2, peer("k"));
    }

    #[test]
    fn host_announcements_that_could_redirect_a_move_are_refused() {
        let t0 = Instant::now();
        let mut a = agent("a", t0);
        for name in [
            "localhost",
            "LOCALHOST.",
            "127.0.0.1",
            "127.1.2.3",
            "foo.localhost",
        ] {
            let err = a
                .handle_peer_host(t0, peer("k"), host(name))
                .expect_err(name);
            assert!(matches!(err, HostRefusal::Loopback { .. }), "{name}: {err}");
        }
        assert!(matches!(
            a.handle_peer_host(t0, peer("k"), host("a")),
            Err(HostRefusal::OwnHost { .. })
        ));
        a.handle_peer_host(t0, peer("b"), host("b"))
            .expect("first claim");
        let err = a
            .handle_peer_host(t0, peer("k"), host("b"))
            .expect_err("taken");
        assert!(
            err.to_string().contains("already the host of agent"),
            "{err}"
        );
        assert_eq!(a.peer_host(&peer("k")), None);
        // Once b is gone, the waiting claim of its host (an agent restarted with a new
        // identity, say) is taken up.
        a.handle_peer_gone(t0, &peer("b"));
        assert_eq!(a.peer_host(&peer("k")), Some(&host("b")));
        assert_eq!(a.stats().hosts_refused, 7);
    }

    /// Issue 15: a full table of hosts refused every new host, so an agent kept the first
    /// hosts it ever heard of, and a nearer peer met later could not be given work. Now the
    /// oldest host of a peer outside the peer table makes room; the peer table's own
    /// peers, and holders whose host another agent claims too, keep theirs.
    #[test]
    fn given_a_full_table_of_hosts_then_the_oldest_host_outside_the_peer_table_makes_room() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let config = Config::default().with_seed(1).with_max_peers(2);
        let mut a = Agent::new(peer("a"), host("a"), config, t0).expect("valid config");
        // Bound: 2 * max_peers = 4 hosts. Two peers in the peer table, met first...
        meet(&mut a, t0, "p1", ms(1));
        meet(&mut a, t0, "p2", ms(2));
        // ...then two connected agents never measured.
        for name in ["q1", "q2"] {
            a.handle_peer_host(t0, peer(name), host(name))
                .expect("room left");
        }
        a.handle_peer_host(t0, peer("q3"), host("q3"))
            .expect("q1 makes room");
        assert_eq!(a.peer_host(&peer("q1")), None);
        for name in ["p1", "p2", "q2", "q3"] {
            assert_eq!(a.peer_host(&peer(name)), Some(&host(name)), "{name}");
        }
        assert_eq!(a.stats().hosts_evicted, 1);
        // A peer measured after its host was dropped announces it again (the driver does
        // so on a ping). It pushes the farthest (p2) out of the peer table, but p2's entry
        // went to the back of the queue when the first eviction passed it over: q2 is the
        // oldest outside the peer table now, and makes room.
        a.handle_peer_rtt(t0, peer("q1"), ms(1));
        assert!(a.peers().get(&peer("p2")).is_none());
        a.handle_peer_host(t0, peer("q1"), host("q1"))
            .expect("q2 makes room");
        assert_eq!(a.peer_host(&peer("q2")), None);
        assert_eq!(a.peer_host(&peer("q1")), Some(&host("q1")));
        // Holders of a contested host keep it, and with nothing else to drop the table is
        // full.
        for name in ["p2", "q3"] {
            a.handle_peer_host(t0, peer(&format!("{name}-claimant")), host(name))
                .expect_err("taken");
        }
        assert_eq!(
            a.handle_peer_host(t0, peer("q4"), host("q4")),
            Err(HostRefusal::Full { max: 4 })
        );
        for name in ["p1", "p2", "q1", "q3"] {
            assert_eq!(a.peer_host(&peer(name)), Some(&host(name)), "{name}");
        }
        assert_eq!(a.stats().hosts_evicted, 2);
    }

    /// Issue 15: a member ordered to move work to a cluster mate whose host it does not
    /// know (never connected, or dropped from a full table) refused the order; at 10,000
    /// simulated nodes most orders failed so. It now introduces itself to the destination
    /// and obeys once the host is announced, or refuses if it is not in time.
    #[test]
    fn given_a_move_order_to_an_unannounced_host_then_the_member_waits_for_the_announcement() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let order = |migration: u64| Message::MoveOrder {
            migration: MigrationId(migration),
            entities: vec![entity(0, 0.5).id],
            to: peer("d"),
            to_host: host("d"),
            notify: peer("m"),
        };
        let (mut p, t) = loaded_member_of_m(t0, 10);

        // d's host is unknown: p introduces itself to d, and moves nothing yet.
        p.handle_message(t, peer("m"), order(1));
        let actions = drain(&mut p);
        assert!(migrations(&actions).is_empty(), "{actions:?}");
        assert!(
            matches!(actions.as_slice(), [Action::Send { to, message: Message::Introduce }] if *to == peer("d")),
            "{actions:?}"
        );
        // The connection announces d's host: the order is carried out.
        p.handle_peer_host(t + ms(50), peer("d"), host("d"))
            .expect("host accepted");
        let actions = drain(&mut p);
        assert!(
            matches!(actions.as_slice(), [Action::Migrate { id: MigrationId(1), to_host, .. }] if *to_host == host("d")),
            "{actions:?}"
        );
        p.handle_migration_outcome(t + ms(100), MigrationId(1), MigrationOutcome::Completed);
        drain(&mut p);

        // Another order to an agent that never announces its host: refused after the
        // member timeout, and the manager is told.
        let t = t + Duration::from_secs(2);
        p.handle_entities(t, vec![entity(1, 0.5)]);
        let mut unheard = order(2);
        if let Message::MoveOrder {
            entities,
            to,
            to_host,
            ..
        } = &mut unheard
        {
            *entities = vec![entity(1, 0.5).id];
            *to = peer("e");
            *to_host = host("e");
        }
        p.handle_message(t, peer("m"), unheard);
        drain(&mut p);
        let deadline = p.poll_timeout().expect("a timer");
        assert!(deadline <= t + crate::agent::DEFAULT_MEMBER_TIMEOUT);
        let late = t + crate::agent::DEFAULT_MEMBER_TIMEOUT;
        p.handle_message(late, peer("m"), heartbeat("m"));
        p.handle_timeout(late);
        let actions = drain(&mut p);
        assert!(migrations(&actions).is_empty(), "{actions:?}");
        assert!(
            actions.iter().any(|a| matches!(a, Action::Send { to, message: Message::MigrationFinished { migration: MigrationId(2), completed: false } } if *to == peer("m"))),
            "{actions:?}"
        );
        // The host announced after that does not revive the order.
        p.handle_peer_host(late, peer("e"), host("e"))
            .expect("host accepted");
        assert!(migrations(&drain(&mut p)).is_empty());
    }

    fn c2c_agent(name: &str, now: Instant) -> Agent {
        let config = Config::default()
            .with_seed(1)
            .with_topology(Topology::ClusterToCluster);
        Agent::new(peer(name), host(name), config, now).expect("valid config")
    }

    fn heartbeat(vote: &str) -> Message {
        Message::Heartbeat {
            id: MessageId(1),
            manager: peer(vote),
            successor: None,
            members: 0,
        }
    }

    /// Agent "p", loaded (two ranks on one core), that has heard "m" vote for itself every
    /// second for `seconds` and follows it; returns it and the time reached.
    fn loaded_member_of_m(t0: Instant, seconds: u32) -> (Agent, Instant) {
        let mut p = c2c_agent("p", t0);
        p.handle_node_profile(
            t0,
            NodeProfile {
                cpu_load: 2.0,
                ..NodeProfile::idle(1.0, 1 << 30)
            },
        );
        p.handle_entities(t0, vec![entity(0, 0.5), entity(1, 0.5)]);
        meet(&mut p, t0, "m", Duration::from_millis(1));
        let mut t = t0;
        for _ in 0..seconds {
            p.handle_message(t, peer("m"), heartbeat("m"));
            p.handle_timeout(t);
            drain(&mut p);
            t += Duration::from_secs(1);
        }
        assert_eq!(p.manager(), Some(&peer("m")));
        (p, t)
    }

    /// Issue 12, item 6: a key holder that generated keys until one sorts lowest ("a")
    /// joins a running cluster. It does not become anyone's manager, its move orders are
    /// refused, and an honest newcomer with the lowest id follows the existing manager too.
    #[test]
    fn given_a_running_cluster_then_a_newcomer_with_the_lowest_id_does_not_become_manager() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (mut p, mut t) = loaded_member_of_m(t0, 30);
        // The grinder arrives, votes for itself, and orders a move to itself.
        meet(&mut p, t, "a", ms(1));
        for _ in 0..30 {
            p.handle_message(t, peer("m"), heartbeat("m"));
            p.handle_message(t, peer("a"), heartbeat("a"));
            p.handle_timeout(t);
            drain(&mut p);
            t += Duration::from_secs(1);
        }
        assert_eq!(p.manager(), Some(&peer("m")), "the newcomer took over");
        assert_eq!(p.stats().manager_changes, 1, "only the first election");
        p.handle_message(
            t,
            peer("a"),
            Message::MoveOrder {
                migration: MigrationId(9),
                entities: vec![entity(0, 0.5).id],
                to: peer("a"),
                to_host: host("a"),
                notify: peer("a"),
            },
        );
        assert!(migrations(&drain(&mut p)).is_empty());

        // An honest newcomer with the lowest id hears m and p (who votes for m): it follows m.
        let mut a = c2c_agent("a", t);
        meet(&mut a, t, "m", ms(1));
        meet(&mut a, t, "p", ms(1));
        for _ in 0..10 {
            a.handle_message(t, peer("m"), heartbeat("m"));
            a.handle_message(t, peer("p"), heartbeat("m"));
            a.handle_timeout(t);
            drain(&mut a);
            t += Duration::from_secs(1);
        }
        assert_eq!(a.manager(), Some(&peer("m")));
    }

    /// When the manager dies, its most senior member takes over, as the manager named it:
    /// a key holder with the lowest id that joined later ("a") does not, even in the eyes
    /// of a member that arrived after both and cannot order them itself.
    #[test]
    fn given_the_manager_dies_then_the_successor_it_named_takes_over() {
        let t0 = Instant::now();
        let mut y = c2c_agent("y", t0);
        for name in ["m", "q", "a"] {
            meet(&mut y, t0, name, Duration::from_millis(1));
        }
        let mut t = t0;
        let named = Message::Heartbeat {
            id: MessageId(2),
            manager: peer("m"),
            successor: Some(peer("q")),
            members: 2,
        };
        for _ in 0..10 {
            y.handle_message(t, peer("m"), named.clone());
            y.handle_message(t, peer("q"), heartbeat("m"));
            y.handle_message(t, peer("a"), heartbeat("m"));
            y.handle_timeout(t);
            drain(&mut y);
            t += Duration::from_secs(1);
        }
        assert_eq!(y.manager(), Some(&peer("m")));
        // m dies; q and a each vote for themselves.
        for _ in 0..30 {
            y.handle_message(t, peer("q"), heartbeat("q"));
            y.handle_message(t, peer("a"), heartbeat("a"));
            y.handle_timeout(t);
            drain(&mut y);
            t += Duration::from_secs(1);
        }
        assert_eq!(y.manager(), Some(&peer("q")));
    }

    /// Two agents that start together agree on one manager (the lower id), and one that
    /// starts alone keeps managing when a later agent with a lower id arrives.
    #[test]
    fn c2c_pairs_agree_on_one_manager() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        fn step(a: &mut Agent, b: &mut Agent, t: Instant) {
            a.handle_timeout(t);
            for action in drain(a) {
                if let Action::Send { message, .. } = action {
                    b.handle_message(t, a.id().clone(), message);
                }
            }
        }
        let run = |x: &mut Agent, y: &mut Agent, from: Instant, secs: u64| {
            let mut t = from;
            for _ in 0..secs {
                step(x, y, t);
                step(y, x, t);
                t += Duration::from_secs(1);
            }
        };
        let (mut x, mut y) = (c2c_agent("x", t0), c2c_agent("y", t0));
        meet(&mut x, t0, "y", ms(1));
        meet(&mut y, t0, "x", ms(1));
        run(&mut x, &mut y, t0, 10);
        assert_eq!(
            (x.manager(), y.manager()),
            (Some(&peer("x")), Some(&peer("x")))
        );
        // "z" runs alone for a minute; "b" (lower id) comes later.
        let mut z = c2c_agent("z", t0);
        let t1 = t0 + Duration::from_secs(60);
        let mut b = c2c_agent("b", t1);
        meet(&mut z, t1, "b", ms(1));
        meet(&mut b, t1, "z", ms(1));
        run(&mut z, &mut b, t1, 10);
        assert_eq!(
            (z.manager(), b.manager()),
            (Some(&peer("z")), Some(&peer("z")))
        );
    }

    /// Issue 36 (`pcmrun --hosts-from-pool`): the hosts of the pool an agent knows, with
    /// the load each last reported in a work steal of its own, and none invented for a
    /// host that reported nothing (nor for one whose steal another agent forwarded).
    #[test]
    fn given_a_steal_from_a_peer_then_its_host_is_listed_with_its_idle_cpus_and_their_age() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut a = agent("a", t0);
        for name in ["b", "c", "d"] {
            meet(&mut a, t0, name, ms(1));
        }
        let b_node = NodeProfile {
            speed: 1.5,
            cpu_load: 1.0,
            ..NodeProfile::idle(4.0, 1 << 30)
        };
        a.handle_message(t0, peer("b"), steal_from("b", 1, b_node));
        // d's steal, passed on by c: c could have changed d's profile, so it is not taken.
        a.handle_message(
            t0,
            peer("c"),
            steal_from("d", 2, NodeProfile::idle(8.0, 1 << 30)),
        );
        drain(&mut a);

        let t1 = t0 + Duration::from_secs(3);
        let pool = a.pool_hosts(t1);
        let hosts: Vec<&str> = pool.iter().map(|h| h.host.as_str()).collect();
        assert_eq!(hosts, ["b", "c", "d"]);
        let b = &pool[0];
        assert_eq!(b.peer, peer("b"));
        assert_eq!(b.tier, Some(LatencyTier::Local));
        assert_eq!(b.srtt, Some(ms(1)));
        let load = b.load.expect("b reported its load");
        assert_eq!(load.profile, b_node);
        assert!((load.idle_cpus() - 4.5).abs() < 1e-9, "{load:?}");
        assert_eq!(load.age, Duration::from_secs(3));
        assert!(!load.leaving);
        assert_eq!(pool[1].load, None, "c reported nothing");
        assert_eq!(pool[2].load, None, "d reported nothing itself");

        // A newer steal replaces the figure; another host announced by b forgets it; a peer
        // gone leaves the list.
        let busier = NodeProfile {
            cpu_load: 3.5,
            ..b_node
        };
        a.handle_message(t1, peer("b"), steal_from("b", 3, busier));
        let load = a.pool_hosts(t1).remove(0).load.expect("known");
        assert!((load.idle_cpus() - 0.75).abs() < 1e-9, "{load:?}");
        assert_eq!(load.age, Duration::ZERO);
        a.handle_peer_host(t1, peer("b"), host("b2"))
            .expect("accepted");
        assert_eq!(a.pool_hosts(t1)[0].host.as_str(), "b2");
        assert_eq!(a.pool_hosts(t1)[0].load, None);
        a.handle_peer_gone(t1, &peer("c"));
        let hosts: Vec<String> = a
            .pool_hosts(t1)
            .iter()
            .map(|h| h.host.to_string())
            .collect();
        assert_eq!(hosts, ["b2", "d"]);
    }

    /// An NSc2c manager lists its members' hosts with the load of their last profile reply,
    /// and a member leaving the pool as leaving, with no idle CPU.
    #[test]
    fn given_a_c2c_member_leaving_then_its_manager_lists_its_host_as_leaving() {
        let t0 = Instant::now();
        fn step(a: &mut Agent, b: &mut Agent, t: Instant) {
            a.handle_timeout(t);
            for action in drain(a) {
                if let Action::Send { message, .. } = action {
                    b.handle_message(t, a.id().clone(), message);
                }
            }
        }
        let (mut x, mut y) = (c2c_agent("x", t0), c2c_agent("y", t0));
        meet(&mut x, t0, "y", Duration::from_millis(1));
        meet(&mut y, t0, "x", Duration::from_millis(1));
        let y_node = NodeProfile::idle(2.0, 1 << 30);
        let mut t = t0;
        let mut run = |x: &mut Agent, y: &mut Agent, secs: u64| {
            for _ in 0..secs {
                x.handle_node_profile(t, NodeProfile::idle(2.0, 1 << 30));
                y.handle_node_profile(t, y_node);
                step(x, y, t);
                step(y, x, t);
                t += Duration::from_secs(1);
            }
            t
        };
        let now = run(&mut x, &mut y, 10);
        assert_eq!(x.manager(), Some(&peer("x")));
        let pool = x.pool_hosts(now);
        assert_eq!(pool.len(), 1);
        assert_eq!(pool[0].host.as_str(), "y");
        let load = pool[0].load.expect("y replied to the polls");
        assert!(load.age <= Duration::from_secs(2), "{load:?}");
        assert!((load.idle_cpus() - 2.0).abs() < 1e-9, "{load:?}");
        assert!(!load.leaving);

        y.handle_leave(now);
        let now = run(&mut x, &mut y, 3);
        let load = x.pool_hosts(now)[0].load.expect("known");
        assert!(load.leaving, "{load:?}");
        assert_eq!(load.idle_cpus(), 0.0);
        // y itself lists its manager's host, but x never sent it a profile.
        assert_eq!(y.pool_hosts(now)[0].host.as_str(), "x");
        assert_eq!(y.pool_hosts(now)[0].load, None);
    }

    #[test]
    fn move_orders_from_a_non_manager_are_refused() {
        let t0 = Instant::now();
        let config = Config::default()
            .with_seed(1)
            .with_topology(Topology::ClusterToCluster);
        let mut a = Agent::new(peer("b"), host("b"), config, t0).expect("valid config");
        a.handle_node_profile(
            t0,
            NodeProfile {
                cpu_load: 2.0,
                ..NodeProfile::idle(1.0, 1 << 30)
            },
        );
        a.handle_entities(t0, vec![entity(0, 0.5), entity(1, 0.5)]);
        // "c" is not b's manager (b has heard of nobody lower than itself).
        a.handle_message(
            t0,
            peer("c"),
            Message::MoveOrder {
                migration: MigrationId(1),
                entities: vec![entity(0, 0.5).id],
                to: peer("c"),
                to_host: host("c"),
                notify: peer("c"),
            },
        );
        assert!(drain(&mut a).is_empty());
        assert_eq!(a.stats().messages_refused, 1);
    }

    #[test]
    fn invalid_messages_are_refused() {
        let t0 = Instant::now();
        let mut a = agent("a", t0);
        a.handle_message(
            t0,
            peer("b"),
            Message::WorkSteal {
                id: MessageId(1),
                origin: peer("b"),
                source: peer("b"),
                source_host: host("b"),
                source_profile: NodeProfile::idle(f64::NAN, 0),
                ttl: 3,
                tier: LatencyTier::Local,
                rtts: Default::default(),
                job_offers: Vec::new(),
                departed: Vec::new(),
            },
        );
        assert_eq!(a.stats().messages_refused, 1);
        assert!(a.poll_action().is_none());
    }
}
