//! The agent's settings ([`Config`]), their defaults and the two topologies.

use std::time::Duration;

use crate::message::{MAX_ENTITIES, MAX_TTL};
use crate::model::{MigrationCostModel, Weights};
use crate::resize::ResizeCostModel;
use crate::tier::LatencyTier;

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
/// Short on purpose: an idle node that nobody refused lately learns that work appeared
/// elsewhere only by asking, so the pause bounds how fast it helps with new load (target: a
/// migration within 5 s; a node that refused it tells it at once, `offer_work`), while a
/// round costs a few packets of about 200 bytes.
pub const DEFAULT_STEAL_BACKOFF: Duration = Duration::from_secs(2);
/// Longest pause between rounds (see [`DEFAULT_STEAL_BACKOFF`]). 8 s, not 4 (until
/// 2026-12-04): an idle pool's rounds are most of its messages and of an idle agent's CPU,
/// and a node that gets loaded tells the thieves it refused lately (`offer_work`) rather
/// than waiting for their next round. Simulated, 100 nodes, Internet-like, seeds 1-32:
/// NSp2p 0.952 -> 0.950 of the oracle, seeds under 0.90 3 -> 0, messages per node and
/// second 0.779 -> 0.543; 1,000 nodes (seeds 1-3) 1.022 -> 1.020, 0.272 -> 0.174; 100 idle
/// agents dialing 64 (the pool's replay) 2.23 -> 1.44 messages per agent and second.
pub const DEFAULT_MAX_STEAL_BACKOFF: Duration = Duration::from_secs(8);
/// Damping: an entity that moved (or was ordered to) does not move again for this long.
pub const DEFAULT_HOLD_DOWN: Duration = Duration::from_secs(60);
/// A malleable job's ranks slowed by competing load here, and taken by no idle node for
/// this long, are shed by shrinking the job: longer than the longest steal back-off and a
/// round after it, so that every light node of the pool has had a round to ask for them
/// first (three back-offs when the longest was 4 s).
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
    pub(crate) gather_within_hold_down: bool,
    pub(crate) resizes: bool,
    pub(crate) resize_cost: ResizeCostModel,
    pub(crate) shed_after: Duration,
    pub(crate) grow_offer_window: Option<Duration>,
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
            gather_within_hold_down: true,
            resizes: true,
            resize_cost: ResizeCostModel::default(),
            shed_after: DEFAULT_SHED_AFTER,
            grow_offer_window: None,
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
    /// NSp2p: how long the home agent of a malleable job collects grow offers (idle
    /// nodes' steals a grow would take) before it grows onto the best; default one steal
    /// period ([`Config::with_steal_period`]); zero grows onto the first that gains
    /// enough.
    pub fn with_grow_offer_window(mut self, window: Duration) -> Self {
        self.grow_offer_window = Some(window);
        self
    }

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
        /// `Agent::handle_timeout`), so that a job spread over far nodes gathers near its
        /// own ranks; default on. Off, work goes only between agents of one peer table.
        with_gather, gather: bool);
    setter!(
        /// Whether a rank that arrived within its hold-down may still take a step of
        /// gathering to a place that holds more of its job than its own
        /// ([`crate::decision::Policy::gather_within_hold_down`]); default on. The rank's
        /// receiver then holds it a whole hold-down from its arrival
        /// ([`crate::Message::StealAccepted`]'s `within_hold_down`), so that no entity
        /// moves more than twice within a hold-down, the second move a step of
        /// gathering. On, NSp2p reached 0.86 of the oracle in the first ten simulated
        /// minutes instead of 0.66 (100 nodes, Internet-like, 32 seeds, 2026-12-04); off,
        /// an entity moves at most once per hold-down.
        with_gather_within_hold_down, gather_within_hold_down: bool);
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

    /// The free cores (or half the node's) from which a node counts as lightly loaded
    /// ([`crate::model::NodeProfile::is_lightly_loaded`]).
    pub fn light_threshold(&self) -> f64 {
        self.light_threshold
    }

    /// The damping time.
    pub fn hold_down(&self) -> Duration {
        self.hold_down
    }

    /// Checks every setting; `Agent::new` calls it.
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
