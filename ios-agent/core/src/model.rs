//! The resource sensitive model (RSM) of the paper, section 5, Figure 3.
//!
//! For a group of entities `A` on the local node `l` and a foreign node `f`:
//!
//! ```text
//! Delta_r   = (A_rf - U_rlA) / (A_rf + U_rlA)                       in [-1, 1]
//! gain      = sum_r w_r * Delta_r  -  C_lfA / (10 + log E_A)         sum_r w_r = 1
//! ```
//!
//! where `A_rf` is the availability of resource `r` at `f`, `U_rlA` what the group uses of it
//! at `l`, `C_lfA` the predicted migration cost in seconds and `E_A` the group's average life
//! expectancy in seconds. [`gain`] computes exactly this with [`CostTerm::Paper`];
//! [`GainBreakdown`] shows the terms.
//!
//! The paper's cost term grows only with `log E`, so it does not amortise: a move that stops
//! a job for 5.7 s costs 0.31 whether the job has a minute or a day left, as much as a rank
//! going from half a core to a whole one gains (`Delta` = 0.33). [`CostTerm::Amortized`]
//! (the default) charges the move against the time it saves instead: moving from a rate `U`
//! to `A` saves `E (1 - U / A) = E 2 Delta / (1 + Delta)` seconds, which equals `C` at
//!
//! ```text
//! Delta = C / (2 E - C)                                              (1 when C >= E)
//! ```
//!
//! so that is the term: a gain above 0 is a move that pays for itself within the expected
//! life, and `min_gain` the margin asked beyond that.
//!
//! With [`gain_near`] the gain also has a communication term (not in the paper; zero when the
//! entities' partners are unknown, so the default path is the paper's model):
//!
//! ```text
//! s_n       = sum_p x_p * rtt(n, host_p) / 2          share of time the entity waits on latency at n
//! comm      = (s_l - s_f) / (2 - s_l + s_f)           in (-1, 1]
//! gain      = sum_r w_r * Delta_r  -  C / (10 + log E)  +  comm
//! ```
//!
//! `x_p` is the entity's exchanges per second with partner `p` ([`Partner`]), `rtt(n, h)` what
//! node `n`'s agent measured to host `h` (0 on `n` itself, [`DEFAULT_UNKNOWN_RTT`] when not
//! measured; [`communication`] says which partners count when only one node measured them).
//! `comm` is the paper's `Delta` form applied to the entity's iteration rate: an
//! iteration of length `T` spends `T s_l` on latency at `l` and would spend `T s_f` at `f`, so
//! `T_f = T (1 - s_l + s_f)` and `comm = (T - T_f) / (T + T_f)`.
//!
//! Units: CPU in *speed-normalised cores* (cores times [`NodeProfile::speed`], so a free core
//! on a node twice as fast counts as 2), memory in bytes, network in bytes per second.

use std::fmt;
use std::time::Duration;

use std::collections::HashMap;

use pcm_proto::{HostName, JobId, Rank};
use serde::{Deserialize, Serialize};

/// A resource the model weighs. The set is kept small on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Resource {
    /// Processor time, in speed-normalised cores.
    Cpu,
    /// Main memory, in bytes.
    Memory,
    /// Network bandwidth, in bytes per second.
    Network,
}

impl Resource {
    /// Every resource, in a fixed order.
    pub const ALL: [Resource; 3] = [Resource::Cpu, Resource::Memory, Resource::Network];

    /// Lower-case name, as used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
            Resource::Network => "network",
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Tolerance on the sum of the weights.
pub const WEIGHT_SUM_TOLERANCE: f64 = 1e-9;

/// Weights `w_r` of the resources, validated: each finite and non-negative, summing to 1.
///
/// The default puts all weight on the CPU. A memory term is nearly constant (a node with free
/// memory gives `Delta_memory` close to 1 for any process), so a non-zero memory weight adds
/// the same bonus to every move, including useless ones; memory is instead checked as a
/// feasibility constraint (a move never targets a node without room for the state).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawWeights", into = "RawWeights")]
pub struct Weights {
    cpu: f64,
    memory: f64,
    network: f64,
}

/// Wire form of [`Weights`], checked on the way in.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct RawWeights {
    cpu: f64,
    memory: f64,
    network: f64,
}

impl TryFrom<RawWeights> for Weights {
    type Error = WeightsError;
    fn try_from(raw: RawWeights) -> Result<Self, WeightsError> {
        Weights::new(raw.cpu, raw.memory, raw.network)
    }
}

impl From<Weights> for RawWeights {
    fn from(w: Weights) -> Self {
        RawWeights {
            cpu: w.cpu,
            memory: w.memory,
            network: w.network,
        }
    }
}

/// Why a set of weights was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WeightsError {
    /// One weight is negative, infinite or not a number.
    #[error("weight of {resource} is {value}, must be a finite number >= 0")]
    Invalid {
        /// The resource whose weight is bad.
        resource: Resource,
        /// The value given.
        value: f64,
    },
    /// The weights do not sum to 1.
    #[error("weights sum to {sum}, must sum to 1 (cpu {cpu}, memory {memory}, network {network})")]
    BadSum {
        /// Their sum.
        sum: f64,
        /// CPU weight given.
        cpu: f64,
        /// Memory weight given.
        memory: f64,
        /// Network weight given.
        network: f64,
    },
}

impl Weights {
    /// Validates the weights of CPU, memory and network.
    pub fn new(cpu: f64, memory: f64, network: f64) -> Result<Self, WeightsError> {
        for (resource, value) in [
            (Resource::Cpu, cpu),
            (Resource::Memory, memory),
            (Resource::Network, network),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(WeightsError::Invalid { resource, value });
            }
        }
        let sum = cpu + memory + network;
        if (sum - 1.0).abs() > WEIGHT_SUM_TOLERANCE {
            return Err(WeightsError::BadSum {
                sum,
                cpu,
                memory,
                network,
            });
        }
        Ok(Self {
            cpu,
            memory,
            network,
        })
    }

    /// All weight on the CPU.
    pub const CPU_ONLY: Weights = Weights {
        cpu: 1.0,
        memory: 0.0,
        network: 0.0,
    };

    /// The weight of one resource.
    pub fn get(&self, resource: Resource) -> f64 {
        match resource {
            Resource::Cpu => self.cpu,
            Resource::Memory => self.memory,
            Resource::Network => self.network,
        }
    }
}

impl Default for Weights {
    /// [`Weights::CPU_ONLY`].
    fn default() -> Self {
        Weights::CPU_ONLY
    }
}

/// A profile value that failed validation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid {what}: {field} = {value}, {reason}")]
pub struct InvalidProfile {
    /// Which kind of profile.
    pub what: &'static str,
    /// The offending field.
    pub field: &'static str,
    /// Its value.
    pub value: f64,
    /// What it must be.
    pub reason: &'static str,
}

fn check(
    what: &'static str,
    field: &'static str,
    value: f64,
    positive: bool,
) -> Result<(), InvalidProfile> {
    let fail = |reason| InvalidProfile {
        what,
        field,
        value,
        reason,
    };
    if !value.is_finite() {
        return Err(fail("must be finite"));
    }
    if positive && value <= 0.0 {
        return Err(fail("must be > 0"));
    }
    if value < 0.0 {
        return Err(fail("must be >= 0"));
    }
    Ok(())
}

/// Profile of a node's resources, as its agent's profiling component measures them
/// (sampled every [`crate::agent::DEFAULT_PROFILE_PERIOD`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NodeProfile {
    /// Logical CPUs of the node (or of the cgroup it is limited to).
    pub cores: f64,
    /// Speed of one core relative to a reference core (1.0); a node twice as fast has 2.0.
    pub speed: f64,
    /// Average number of runnable threads (demand for cores; may exceed `cores`). MPI ranks
    /// that busy-poll count as runnable.
    pub cpu_load: f64,
    /// Free memory, in bytes.
    pub memory_available: u64,
    /// Measured network bandwidth available to the node, bytes per second (0 if unknown).
    pub bandwidth: f64,
    /// CPUs taken by processes other than the application entities (a competing load),
    /// not speed-normalised; 0 when unknown.
    #[serde(default)]
    pub competing: f64,
}

impl NodeProfile {
    /// An idle node with `cores` reference-speed cores, `memory_available` bytes free and
    /// unknown bandwidth.
    pub fn idle(cores: f64, memory_available: u64) -> Self {
        NodeProfile {
            cores,
            speed: 1.0,
            cpu_load: 0.0,
            memory_available,
            bandwidth: 0.0,
            competing: 0.0,
        }
    }

    /// Checks every field: finite, non-negative, `cores` and `speed` positive.
    pub fn validate(&self) -> Result<(), InvalidProfile> {
        check("node profile", "cores", self.cores, true)?;
        check("node profile", "speed", self.speed, true)?;
        check("node profile", "cpu_load", self.cpu_load, false)?;
        check("node profile", "bandwidth", self.bandwidth, false)?;
        check("node profile", "competing", self.competing, false)?;
        Ok(())
    }

    /// Idle cores (`cores - cpu_load`, at least 0), not speed-normalised.
    pub fn free_cores(&self) -> f64 {
        (self.cores - self.cpu_load).max(0.0)
    }

    /// CPU the node gives its application entities together: its cores less the competing
    /// load, speed-normalised.
    pub fn entity_capacity(&self) -> f64 {
        (self.cores - self.competing).max(0.0) * self.speed
    }

    /// This profile with at most `cores` idle cores (the rest shown as busy): what the node
    /// offers entities that can use no more than that.
    pub fn with_idle_at_most(&self, cores: f64) -> NodeProfile {
        let mut p = *self;
        if p.free_cores() > cores {
            p.cpu_load = p.cores - cores.max(0.0);
        }
        p
    }

    /// `A_{r,f}`: availability of `resource` at this node, in the model's units.
    pub fn availability(&self, resource: Resource) -> f64 {
        match resource {
            Resource::Cpu => self.free_cores() * self.speed,
            Resource::Memory => self.memory_available as f64,
            Resource::Network => self.bandwidth,
        }
    }

    /// Whether the node has at least `threshold` idle cores, or at least half its cores idle:
    /// such a node steals work (section 5.2: "have more resources available than are
    /// currently being utilized"). The second clause is for nodes smaller than twice the
    /// threshold: an idle node capped at 0.3 core never has 0.3 core idle (its agent and
    /// daemon use a little), and it sat idle next to an overloaded node until the job ended.
    pub fn is_lightly_loaded(&self, threshold: f64) -> bool {
        self.free_cores() >= threshold.min(self.cores / 2.0)
    }

    /// The profile a node shows while its agent drains it before leaving the pool: no CPU
    /// for application entities and none idle. Used as the local node `l` of the model its
    /// entities then leave, it makes every destination with room a gain and keeps the node
    /// from stealing or being chosen; a destination without room still shows no gain, so a
    /// leaving node never pushes work onto a loaded one.
    pub fn departing(&self) -> NodeProfile {
        NodeProfile {
            competing: self.cores,
            cpu_load: self.cpu_load.max(self.cores),
            ..*self
        }
    }

    /// What this node offers one more entity of each job it already runs entities of
    /// ([`JobOffer`]), from its profile and its entities' profiles.
    ///
    /// The profile counts a rank only for the share of its iteration it computes (a rank
    /// that waits for a slow peer would otherwise make its node look busy; the sampler's
    /// `load_without_waiting`). That idle time is not free for the peer it waits for: once
    /// that peer runs here at speed, the waiting ranks compute again. So for a job with `n`
    /// entities here the node counts them as `n` busy threads, the rest of its load (what
    /// the profile shows less what the job's entities use) as `others`, and offers the newcomer what is left, or its fair share of the
    /// node when that is more (`cores / (others + n + 1)`: the scheduler shares an
    /// overloaded node among its runnable threads), never more than the plain profile shows.
    /// Measured case: a 0.6-core node whose rank waited for a peer slowed to 0.3 core showed
    /// 0.42 core idle and took that peer, which then got 0.3 core there as well (a move that
    /// gained nothing); with this offer it shows 0.3.
    pub fn job_offers(&self, entities: &[EntityProfile]) -> Vec<JobOffer> {
        let mut jobs: Vec<&JobId> = entities.iter().map(|e| &e.id.job).collect();
        jobs.sort();
        jobs.dedup();
        jobs.into_iter()
            .map(|job| {
                let same = entities.iter().filter(|e| &e.id.job == job);
                let (count, used) = same.fold((0.0, 0.0), |(n, cpu), e| (n + 1.0, cpu + e.cpu));
                // The profile may count these entities in full or only while they compute:
                // taking out all they use leaves at least the rest of the node's load.
                let others = (self.cpu_load - used).max(0.0);
                let busy = others + count;
                let left = self.cores - busy;
                let fair = self.cores / (busy + 1.0);
                JobOffer {
                    job: job.clone(),
                    cores: left.max(fair).min(self.free_cores()).max(0.0),
                    ranks: count as u32,
                    place_ranks: 0,
                    place_room: 0.0,
                }
            })
            .collect()
    }

    /// This profile as an entity of `job` sees it, given the node's [`JobOffer`]s: at most
    /// the job's offer idle (see [`NodeProfile::job_offers`]); as it is for other jobs.
    pub fn for_job(&self, job: &JobId, offers: &[JobOffer]) -> NodeProfile {
        match offers.iter().find(|o| &o.job == job) {
            Some(o) if o.cores < self.free_cores() => NodeProfile {
                cpu_load: self.cores - o.cores.max(0.0),
                ..*self
            },
            _ => *self,
        }
    }

    /// What the node offers to application entities: its availability if the given entities
    /// were not there (their CPU and memory added back). Used by NSc2c for the `r_{i,j}` of
    /// the intra-cluster ratio.
    pub fn availability_without(&self, resource: Resource, entities: &[EntityProfile]) -> f64 {
        match resource {
            Resource::Cpu => {
                // On an overloaded node each runnable thread gets cores / load of a core, so an
                // entity's demand is what it gets scaled back up.
                let scale = if self.cpu_load > self.cores {
                    self.cpu_load / self.cores
                } else {
                    1.0
                };
                let demand: f64 = entities.iter().map(|e| e.cpu * scale).sum();
                let background = (self.cpu_load - demand).max(0.0);
                (self.cores - background).max(0.0) * self.speed
            }
            Resource::Memory => {
                self.memory_available as f64 + entities.iter().map(|e| e.memory as f64).sum::<f64>()
            }
            Resource::Network => self.bandwidth + entities.iter().map(|e| e.network).sum::<f64>(),
        }
    }
}

/// What a node offers one more entity of a job that already has entities on it: idle cores,
/// not speed-normalised, at most the node's idle cores ([`NodeProfile::job_offers`]). Sent
/// with work steals so that the giver sees the thief as the job's moved entity would.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobOffer {
    /// The job.
    pub job: JobId,
    /// Idle cores the node offers one more of its entities.
    pub cores: f64,
    /// The job's entities on the node (0 in older agents' steals).
    #[serde(default)]
    pub ranks: u32,
    /// NSc2c: the job's entities in the node's whole cluster (0: not given, as `ranks`).
    #[serde(default)]
    pub place_ranks: u32,
    /// NSc2c: idle cores in the node's whole cluster, its members that are not leaving
    /// (0: not given, as `cores`).
    #[serde(default)]
    pub place_room: f64,
}

impl JobOffer {
    /// Where the job would gather ([`crate::decision`]): its entities there and the idle
    /// cores there for the others, the node's own or, in NSc2c, its cluster's.
    pub fn place(&self) -> (usize, f64) {
        (
            self.ranks.max(self.place_ranks) as usize,
            self.cores.max(self.place_room),
        )
    }
}

/// An application entity: one registered MPI process, named by its job and rank.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EntityId {
    /// The job (one run of a PCM application).
    pub job: JobId,
    /// The rank in the job's world.
    pub rank: Rank,
}

impl fmt::Display for EntityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.job, self.rank)
    }
}

/// Profile of one entity on the local node, from pcmd.
///
/// Open MPI ranks busy-poll while they wait, so `cpu` alone does not tell a slow rank from a
/// waiting one; `compute` and `mpi_wait` per iteration do. The model uses `cpu` as `U_cpu`
/// (what the entity gets now) and the compute share to rank candidates: the rank that
/// computes most of its iteration is the straggler the others wait for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntityProfile {
    /// Which process.
    pub id: EntityId,
    /// Cores the process uses now (0.5 = half a core), not speed-normalised.
    pub cpu: f64,
    /// Resident memory, bytes.
    pub memory: u64,
    /// Network traffic of the process, bytes per second.
    pub network: f64,
    /// Bytes of state a migration must transfer.
    pub state_bytes: u64,
    /// Time per iteration spent computing.
    pub compute: Duration,
    /// Time per iteration spent inside MPI (waiting or communicating).
    pub mpi_wait: Duration,
    /// Iterations per second.
    pub iteration_rate: f64,
    /// How long the job has been running (a process that has run long is expected to run
    /// about as long again when nothing better is known).
    pub age: Duration,
    /// Remaining running time, when the application can tell (iterations left / rate).
    pub remaining: Option<Duration>,
    /// How long this process has been on this node (0 right after it arrived by migration).
    pub resident: Duration,
    /// The processes this one exchanges with, by host, when known (empty: the model's
    /// communication term is 0). Absent in older agents' profiles.
    #[serde(default)]
    pub partners: Vec<Partner>,
    /// Ranks in the entity's whole job (its MPI world size), 0 when unknown (older agents'
    /// profiles). Lets the model weigh gathering the whole job on one node
    /// ([`crate::decision`]).
    #[serde(default)]
    pub job_ranks: u32,
    /// The job's resize limits when it is malleable (docs/malleability.md): the model may
    /// then grow it onto idle nodes or shrink it off a node that must be given back
    /// ([`crate::resize::resize_gain`]). `None`: a job of fixed width, or an older agent's
    /// profile.
    #[serde(default)]
    pub malleable: Option<pcm_proto::Malleability>,
    /// Where the job's rank 0 runs (the node whose agent decides the job's resizes,
    /// docs/agents.md), when known; `None` for an older agent's or rank's profile.
    #[serde(default)]
    pub home: Option<HostName>,
    /// The job's slowest rank's computing time per iteration, when its ranks report it
    /// (PCM agrees on it at each status check): against `compute`, whether a rank elsewhere
    /// holds the job back, and the job's true exchange time (the slowest rank's time inside
    /// MPI, which is not waiting). `None` when unknown (an older rank or agent, profiling
    /// off): the resize model then takes this rank as the slowest.
    #[serde(default)]
    pub job_slowest_compute: Option<Duration>,
    /// How long the job has had its current width (since it started or last resized), as
    /// its rank reports it ([`pcm_proto::RankProfile::width_age_us`]): the width
    /// hold-down of a job whose rank 0 moved here after a resize that only the agents it
    /// left saw ([`crate::agent`]'s resizing). `None` when unknown (an older rank or
    /// agent): the agent then holds a job's grows while rank 0 is new on its node.
    #[serde(default)]
    pub width_age: Option<Duration>,
}

/// Most partners of one entity carried in a profile.
pub const MAX_PARTNERS: usize = 64;

/// A communication partner of an entity: the host of a process it exchanges with, and how
/// often. Two partners on one host may be given as one with the summed rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Partner {
    /// Where the partner runs.
    pub host: HostName,
    /// Exchanges per second with it (a send and its answer count as one): each costs about
    /// half the round-trip time between the two hosts.
    pub exchanges_per_sec: f64,
}

/// RTT assumed to a host a node has not measured: its agent keeps its nearest peers, so an
/// unmeasured host is likely far (the middle of the slow tiers, 101-400 ms).
pub const DEFAULT_UNKNOWN_RTT: Duration = Duration::from_millis(200);

/// Where an [`RttView`] reads a node's measured RTTs. The agent answers from its own tables
/// and a work steal's list, without building a map for every steal (at 10,000 simulated
/// nodes that was most of the cost of a steal).
pub trait RttLookup {
    /// The measured RTT to `host`, seconds, if there is one.
    fn rtt_to(&self, host: &HostName) -> Option<f64>;
}

impl RttLookup for HashMap<HostName, f64> {
    fn rtt_to(&self, host: &HostName) -> Option<f64> {
        self.get(host).copied()
    }
}

/// What one node knows of its latency to other hosts, for the communication term.
#[derive(Clone, Copy)]
pub struct RttView<'a> {
    /// The node's own host (latency 0).
    pub host: &'a HostName,
    /// Measured RTTs, seconds, by host.
    pub rtts: &'a dyn RttLookup,
    /// RTT assumed to other hosts, seconds.
    pub unknown: f64,
    /// How [`communication`] counts, on this node's side, a partner that it has not
    /// measured and that is far from the other node.
    pub unmeasured: Unmeasured,
}

/// How a node's view counts a partner far from the other node that it has not measured
/// ([`RttView::unmeasured`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmeasured {
    /// At the assumed RTT ([`RttView::unknown`]): a thief met through the peer table is
    /// near the giver, and a rank placed near its partners would only lose by going to a
    /// node that has not met them (ranks sit where they are largely because of those
    /// partners).
    Assumed,
    /// Not counted on either side: the node is the destination of a partner steal. It
    /// runs a partner of the rank it asks for, and has seldom measured the rank's other
    /// partners; charging them the assumed RTT kept most such ranks from going next to
    /// the partner that asked (docs/results-log.md, "Scale").
    Neutral,
}

impl fmt::Debug for RttView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RttView")
            .field("host", self.host)
            .field("unknown", &self.unknown)
            .field("unmeasured", &self.unmeasured)
            .finish_non_exhaustive()
    }
}

impl RttView<'_> {
    /// RTT in seconds from this node to `host`.
    pub fn rtt(&self, host: &HostName) -> f64 {
        if host == self.host {
            0.0
        } else {
            self.rtts.rtt_to(host).unwrap_or(self.unknown)
        }
    }

    /// Whether this node has a figure for `host` (its own, or a measured RTT) rather than
    /// the assumed one.
    pub fn knows(&self, host: &HostName) -> bool {
        host == self.host || self.rtts.rtt_to(host).is_some()
    }

    /// `s_n`: the share of its time `e` would wait on latency to its partners at this node
    /// (`sum_p x_p rtt / 2`), at least 0.
    pub fn latency_share(&self, e: &EntityProfile) -> f64 {
        self.latency_share_over(e.partners.iter())
    }

    /// [`Self::latency_share`] over some of the partners.
    fn latency_share_over<'p>(&self, partners: impl Iterator<Item = &'p Partner>) -> f64 {
        let s: f64 = partners
            .filter(|p| p.exchanges_per_sec.is_finite() && p.exchanges_per_sec > 0.0)
            .map(|p| p.exchanges_per_sec * self.rtt(&p.host) / 2.0)
            .sum();
        if s.is_finite() {
            s.max(0.0)
        } else {
            0.0
        }
    }
}

/// The communication term of moving `e` from `l` to `f`: `(s_l - s_f) / (2 - s_l + s_f)`,
/// with `s_l` at most 1 (it is a share of the time `e` already takes). 0 without partners.
pub fn communication(e: &EntityProfile, l: &RttView<'_>, f: &RttView<'_>) -> f64 {
    if e.partners.is_empty() {
        return 0.0;
    }
    // Each partner, by what the two nodes know of it:
    // - on `f` itself: 0 there, so moving next to it cannot be wrong (at `l`, measured or
    //   assumed);
    // - not measured from `l`: not counted. Charged the assumed RTT at `l`, any `f` that
    //   measured it would look nearer whatever the truth (a node that has not yet met its
    //   own cluster mates would send ranks out of the cluster to anyone who has);
    // - measured from both: both figures;
    // - measured from `l` only, and on `l` or within local latency of it: from `f` it is
    //   about as far as `l` is (the triangle inequality, with a small slack), so `f` is
    //   charged `l`'s RTT to `f` (measured, or assumed). A rank is not sent out of its
    //   cluster, away from partners next to it, by a thief that never met them;
    // - measured from `l` only, and far from it: as `f.unmeasured` says (the assumed RTT,
    //   or not counted for the thief of a partner steal).
    let local = crate::tier::LOCAL_MAX_RTT.as_secs_f64();
    let mut s_l = 0.0;
    let mut s_f = 0.0;
    for p in &e.partners {
        let x = p.exchanges_per_sec;
        if !(x.is_finite() && x > 0.0) {
            continue;
        }
        let (at_l, at_f) = if p.host == *f.host {
            (l.rtt(&p.host), 0.0)
        } else if !l.knows(&p.host) {
            continue;
        } else if f.knows(&p.host) {
            (l.rtt(&p.host), f.rtt(&p.host))
        } else {
            let at_l = l.rtt(&p.host);
            if at_l <= local {
                (at_l, l.rtt(f.host).max(at_l))
            } else {
                match f.unmeasured {
                    Unmeasured::Assumed => (at_l, f.unknown),
                    Unmeasured::Neutral => continue,
                }
            }
        };
        s_l += x * at_l / 2.0;
        s_f += x * at_f / 2.0;
    }
    let s_l = if s_l.is_finite() {
        s_l.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let c = (s_l - s_f) / (2.0 - s_l + s_f);
    if c.is_finite() {
        c.clamp(-1.0, 1.0)
    } else if s_f.is_infinite() {
        -1.0
    } else {
        0.0
    }
}

impl EntityProfile {
    /// A profile with the given id and CPU use, 1 s of age and residence, no state,
    /// all compute: a starting point for tests and simulations.
    pub fn new(id: EntityId, cpu: f64) -> Self {
        EntityProfile {
            id,
            cpu,
            memory: 0,
            network: 0.0,
            state_bytes: 0,
            compute: Duration::from_millis(100),
            mpi_wait: Duration::ZERO,
            iteration_rate: 10.0,
            age: Duration::from_secs(1),
            remaining: None,
            resident: Duration::from_secs(1),
            partners: Vec::new(),
            job_ranks: 0,
            malleable: None,
            home: None,
            job_slowest_compute: None,
            width_age: None,
        }
    }

    /// Checks the floating-point fields: finite and non-negative.
    pub fn validate(&self) -> Result<(), InvalidProfile> {
        check("entity profile", "cpu", self.cpu, false)?;
        check("entity profile", "network", self.network, false)?;
        check(
            "entity profile",
            "iteration_rate",
            self.iteration_rate,
            false,
        )?;
        if self.partners.len() > MAX_PARTNERS {
            return Err(InvalidProfile {
                what: "entity profile",
                field: "partners",
                value: self.partners.len() as f64,
                reason: "too many partners",
            });
        }
        for p in &self.partners {
            check(
                "entity profile",
                "partners.exchanges_per_sec",
                p.exchanges_per_sec,
                false,
            )?;
        }
        Ok(())
    }

    /// `U_{r,l,{e}}`: what the entity uses of `resource` on a node of speed `speed`.
    pub fn usage(&self, resource: Resource, speed: f64) -> f64 {
        match resource {
            Resource::Cpu => self.cpu * speed,
            Resource::Memory => self.memory as f64,
            Resource::Network => self.network,
        }
    }

    /// Share of an iteration spent computing, in [0, 1]; 1 when nothing is measured.
    pub fn compute_share(&self) -> f64 {
        let total = self.compute + self.mpi_wait;
        if total.is_zero() {
            1.0
        } else {
            self.compute.as_secs_f64() / total.as_secs_f64()
        }
    }

    /// `E`: expected remaining life, in seconds: `remaining` when known, else `age`.
    pub fn life_expectancy(&self) -> f64 {
        self.remaining.unwrap_or(self.age).as_secs_f64()
    }
}

/// Default time to start a replacement process (spawn, `MPI_Init`, merge, split): measured
/// 250-285 ms plus merge and split on the project's machines, rounded up.
pub const DEFAULT_SPAWN_TIME: Duration = Duration::from_millis(300);
/// Bandwidth assumed when neither node has measured one: 100 Mbit/s, in bytes per second.
pub const DEFAULT_BANDWIDTH: f64 = 12.5e6;

/// How the gain charges a migration's cost `C` against the group's life expectancy `E`
/// ([module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CostTerm {
    /// Figure 3: `C / (10 + log E)` ([`cost_term`]).
    Paper,
    /// The `Delta` at which the move saves as much time as it costs: `C / (2 E - C)`, 1 when
    /// `C >= E` ([`amortized_cost_term`]).
    #[default]
    Amortized,
}

impl CostTerm {
    /// The term for a move costing `cost_secs` of a group expected to live
    /// `life_expectancy_secs`, in [0, 1].
    pub fn of(self, cost_secs: f64, life_expectancy_secs: f64) -> f64 {
        match self {
            CostTerm::Paper => cost_term(cost_secs, life_expectancy_secs),
            CostTerm::Amortized => amortized_cost_term(cost_secs, life_expectancy_secs),
        }
    }
}

/// Predicts `C_{l,f,A}`, the cost of a migration in seconds: one spawn (the moves of a group
/// are carried out in one reconfiguration) plus the group's state over the slower of the two
/// nodes' measured bandwidths; and how the gain charges it ([`CostTerm`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MigrationCostModel {
    /// Fixed part of every migration.
    pub spawn: Duration,
    /// Bandwidth used when neither profile has one, bytes per second.
    pub default_bandwidth: f64,
    /// How the predicted cost enters the gain.
    pub term: CostTerm,
}

impl Default for MigrationCostModel {
    /// [`DEFAULT_SPAWN_TIME`], [`DEFAULT_BANDWIDTH`] and [`CostTerm::Amortized`].
    fn default() -> Self {
        MigrationCostModel {
            spawn: DEFAULT_SPAWN_TIME,
            default_bandwidth: DEFAULT_BANDWIDTH,
            term: CostTerm::default(),
        }
    }
}

impl MigrationCostModel {
    /// The paper's model: the default prediction of `C`, charged by [`CostTerm::Paper`].
    pub fn paper() -> Self {
        MigrationCostModel {
            term: CostTerm::Paper,
            ..MigrationCostModel::default()
        }
    }
}

impl MigrationCostModel {
    /// Predicted seconds to move `state_bytes` from `l` to `f`.
    pub fn cost(&self, state_bytes: u64, l: &NodeProfile, f: &NodeProfile) -> f64 {
        let known = [l.bandwidth, f.bandwidth]
            .into_iter()
            .filter(|b| b.is_finite() && *b > 0.0)
            .fold(f64::INFINITY, f64::min);
        let bandwidth = if known.is_finite() {
            known
        } else {
            self.default_bandwidth.max(1.0)
        };
        self.spawn.as_secs_f64() + state_bytes as f64 / bandwidth
    }
}

/// `Delta_{r,l,f,A} = (A - U) / (A + U)`, in [-1, 1].
///
/// Edge cases: when `A + U = 0` (nothing available and nothing used) the move changes
/// nothing and Delta is 0; negative or non-finite inputs are treated as 0.
pub fn delta(available: f64, used: f64) -> f64 {
    let a = if available.is_finite() {
        available.max(0.0)
    } else {
        0.0
    };
    let u = if used.is_finite() { used.max(0.0) } else { 0.0 };
    if a + u <= 0.0 {
        0.0
    } else {
        ((a - u) / (a + u)).clamp(-1.0, 1.0)
    }
}

/// The cost terms' inputs made usable: a NaN or negative cost counts as 0, a life under 1 s
/// (0, negative and NaN included) as 1 s.
fn cost_inputs(cost_secs: f64, life_expectancy_secs: f64) -> (f64, f64) {
    let cost = if cost_secs.is_nan() {
        0.0
    } else {
        cost_secs.max(0.0)
    };
    let life = if life_expectancy_secs.is_nan() {
        1.0
    } else {
        life_expectancy_secs.max(1.0)
    };
    (cost, life)
}

/// The cost term `C / (10 + log E)`, clamped to [0, 1] as Figure 3 states.
///
/// `log` is the natural logarithm. Life expectancies below 1 s (including 0, negative and
/// NaN) are taken as 1 s, so `log E >= 0` and the denominator is at least 10: a process
/// about to end is never *rewarded* by a small or negative denominator. An infinite `E`
/// makes the term 0; a negative or NaN cost counts as 0.
pub fn cost_term(cost_secs: f64, life_expectancy_secs: f64) -> f64 {
    let (cost, e) = cost_inputs(cost_secs, life_expectancy_secs);
    let term = cost / (10.0 + e.ln());
    if term.is_nan() {
        // inf / inf: an infinite cost against an infinite life: count the move as too costly.
        1.0
    } else {
        term.clamp(0.0, 1.0)
    }
}

/// The amortised cost term ([`CostTerm::Amortized`]): the `Delta` at which a move saves as
/// much time over the expected life `E` as it costs, `C / (2 E - C)`, in [0, 1].
///
/// Inputs are cleaned as for [`cost_term`] (a NaN or negative cost counts as 0, a life
/// under 1 s as 1 s). A move that costs its whole expected life or more (an infinite cost
/// included) counts 1; an infinite life with a finite cost, 0.
pub fn amortized_cost_term(cost_secs: f64, life_expectancy_secs: f64) -> f64 {
    let (cost, e) = cost_inputs(cost_secs, life_expectancy_secs);
    if cost >= e {
        1.0
    } else {
        (cost / (2.0 * e - cost)).clamp(0.0, 1.0)
    }
}

/// Terms of one evaluation of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GainBreakdown {
    /// `Delta_r` for CPU, memory and network, in [`Resource::ALL`] order.
    pub deltas: [f64; 3],
    /// `sum_r w_r * Delta_r`, in [-1, 1].
    pub improvement: f64,
    /// Predicted migration cost `C`, seconds.
    pub cost_secs: f64,
    /// Average life expectancy `E` of the group, seconds.
    pub life_expectancy_secs: f64,
    /// The cost term ([`CostTerm`]), in [0, 1].
    pub cost_term: f64,
    /// The communication term, mean over the group, in [-1, 1]; 0 with [`gain`].
    pub communication: f64,
    /// `improvement - cost_term + communication`, in [-3, 2].
    pub gain: f64,
}

/// `gain(l, f, A)` of Figure 3: moving the `group` of entities from the local node `l` to
/// the foreign node `f`.
///
/// `U_{r,l,A}` is the sum of the group's usages; `E_A` the mean of their life expectancies;
/// `C_{l,f,A}` from `cost` over the group's total state, charged as `cost.term` says
/// ([`CostTerm::Paper`] is Figure 3). An empty group has gain 0.
pub fn gain(
    l: &NodeProfile,
    f: &NodeProfile,
    group: &[&EntityProfile],
    weights: &Weights,
    cost: &MigrationCostModel,
) -> GainBreakdown {
    if group.is_empty() {
        return GainBreakdown {
            deltas: [0.0; 3],
            improvement: 0.0,
            cost_secs: 0.0,
            life_expectancy_secs: 0.0,
            cost_term: 0.0,
            communication: 0.0,
            gain: 0.0,
        };
    }
    let mut deltas = [0.0; 3];
    let mut improvement = 0.0;
    for (i, r) in Resource::ALL.into_iter().enumerate() {
        let used: f64 = group.iter().map(|e| e.usage(r, l.speed)).sum();
        deltas[i] = delta(f.availability(r), used);
        improvement += weights.get(r) * deltas[i];
    }
    let state: u64 = group
        .iter()
        .map(|e| e.state_bytes)
        .fold(0, u64::saturating_add);
    let cost_secs = cost.cost(state, l, f);
    let life_expectancy_secs =
        group.iter().map(|e| e.life_expectancy()).sum::<f64>() / group.len() as f64;
    let cost_term = cost.term.of(cost_secs, life_expectancy_secs);
    GainBreakdown {
        deltas,
        improvement,
        cost_secs,
        life_expectancy_secs,
        cost_term,
        communication: 0.0,
        gain: improvement - cost_term,
    }
}

/// [`gain`] plus the communication term ([module docs](self)) when `rtts` gives what `l` and
/// `f` know of their latencies: the mean of [`communication`] over the group. Without
/// `rtts`, or for entities without partners, exactly [`gain`].
pub fn gain_near(
    l: &NodeProfile,
    f: &NodeProfile,
    group: &[&EntityProfile],
    weights: &Weights,
    cost: &MigrationCostModel,
    rtts: Option<(&RttView<'_>, &RttView<'_>)>,
) -> GainBreakdown {
    let mut g = gain(l, f, group, weights, cost);
    if let Some((at_l, at_f)) = rtts {
        if !group.is_empty() {
            let c = group
                .iter()
                .map(|e| communication(e, at_l, at_f))
                .sum::<f64>()
                / group.len() as f64;
            g.communication = c;
            g.gain += c;
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entity(rank: u32, cpu: f64) -> EntityProfile {
        EntityProfile::new(
            EntityId {
                job: JobId::new("job").expect("valid"),
                rank: Rank(rank),
            },
            cpu,
        )
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn a_small_idle_node_is_lightly_loaded() {
        let node = |cores: f64, cpu_load: f64| NodeProfile {
            cpu_load,
            ..NodeProfile::idle(cores, 1 << 30)
        };
        // Measured: a node capped at 0.3 core with only its agent and daemon running.
        assert!(node(0.3, 0.0095).is_lightly_loaded(0.3));
        // A large node needs the full threshold idle, not half its cores.
        assert!(!node(4.0, 3.75).is_lightly_loaded(0.3));
        assert!(node(4.0, 3.6).is_lightly_loaded(0.3));
        // A small node more than half busy is not light.
        assert!(!node(0.3, 0.2).is_lightly_loaded(0.3));
    }

    #[test]
    fn weights_are_validated_and_errors_name_the_bad_weight() {
        assert!(Weights::new(0.5, 0.3, 0.2).is_ok());
        assert!(Weights::new(1.0 - 1e-10, 0.0, 0.0).is_ok());
        let err = Weights::new(1.2, -0.2, 0.0).expect_err("negative");
        assert_eq!(
            err,
            WeightsError::Invalid {
                resource: Resource::Memory,
                value: -0.2
            }
        );
        assert!(err.to_string().contains("memory"));
        let err = Weights::new(0.5, 0.0, f64::NAN).expect_err("nan");
        assert!(err.to_string().contains("network"));
        let err = Weights::new(0.5, 0.4, 0.0).expect_err("sum");
        assert!(matches!(err, WeightsError::BadSum { sum, .. } if close(sum, 0.9)));
    }

    #[test]
    fn delta_matches_hand_computed_values_and_bounds() {
        // (3 - 1) / (3 + 1)
        assert!(close(delta(3.0, 1.0), 0.5));
        assert!(close(delta(1.0, 1.0), 0.0));
        // (0 - 2) / (0 + 2)
        assert!(close(delta(0.0, 2.0), -1.0));
        assert!(close(delta(2.0, 0.0), 1.0));
        // A + U = 0: no change.
        assert!(close(delta(0.0, 0.0), 0.0));
        assert!(close(delta(f64::NAN, 1.0), -1.0));
        assert!(close(delta(-5.0, 1.0), -1.0));
    }

    #[test]
    fn cost_term_matches_hand_computed_values_and_is_clamped() {
        // 2 / (10 + ln 1000) = 2 / 16.907755278982137
        assert!(close(cost_term(2.0, 1000.0), 2.0 / (10.0 + 1000f64.ln())));
        assert!(close(cost_term(2.0, 1000.0), 0.118_288_913_400_951_59));
        // E <= 1: log taken as 0, denominator 10.
        assert!(close(cost_term(3.0, 1.0), 0.3));
        assert!(close(cost_term(3.0, 0.0), 0.3));
        assert!(close(cost_term(3.0, -7.0), 0.3));
        assert!(close(cost_term(3.0, f64::NAN), 0.3));
        // Clamped to 1.
        assert!(close(cost_term(50.0, 100.0), 1.0));
        assert!(close(cost_term(f64::INFINITY, 100.0), 1.0));
        assert!(close(cost_term(f64::INFINITY, f64::INFINITY), 1.0));
        // Clamped to 0.
        assert!(close(cost_term(-1.0, 100.0), 0.0));
        assert!(close(cost_term(1.0, f64::INFINITY), 0.0));
    }

    #[test]
    fn amortized_cost_term_matches_hand_computed_values_and_is_clamped() {
        // The scale runs' move (64 MiB at 100 Mbit/s plus a spawn) against an hour.
        assert!(close(amortized_cost_term(5.7, 3600.0), 5.7 / 7194.3));
        // The paper's term for the same move: 0.31, as much as half a core to a whole one.
        assert!(cost_term(5.7, 3600.0) > 0.3);
        // An emulated-node move (0.3 s) of a process 8 s old: about the paper's 0.025.
        assert!(close(amortized_cost_term(0.3, 8.0), 0.3 / 15.7));
        assert!(close(amortized_cost_term(0.0, 100.0), 0.0));
        // A move that costs its whole expected life or more never pays.
        assert!(close(amortized_cost_term(100.0, 100.0), 1.0));
        assert!(close(amortized_cost_term(150.0, 100.0), 1.0));
        assert!(close(amortized_cost_term(f64::INFINITY, 100.0), 1.0));
        assert!(close(
            amortized_cost_term(f64::INFINITY, f64::INFINITY),
            1.0
        ));
        // Lives under 1 s count as 1 s; bad costs as 0.
        assert!(close(amortized_cost_term(0.5, 0.0), 0.5 / 1.5));
        assert!(close(amortized_cost_term(0.5, f64::NAN), 0.5 / 1.5));
        assert!(close(amortized_cost_term(-1.0, 100.0), 0.0));
        assert!(close(amortized_cost_term(f64::NAN, 100.0), 0.0));
        assert!(close(amortized_cost_term(1.0, f64::INFINITY), 0.0));
        assert_eq!(MigrationCostModel::default().term, CostTerm::Amortized);
        assert_eq!(MigrationCostModel::paper().term, CostTerm::Paper);
    }

    proptest! {
        /// At `Delta` equal to the amortised term, a move from rate `U` to `A` saves over the
        /// expected life exactly what it costs: `E (1 - U / A) = C`.
        #[test]
        fn the_amortized_term_is_where_a_move_breaks_even(
            life in 1.0f64..1e7,
            fraction in 0.0f64..0.999,
        ) {
            let cost = life * fraction;
            let d = amortized_cost_term(cost, life);
            prop_assert!((0.0..1.0).contains(&d));
            // Delta = (A - U) / (A + U) gives U / A = (1 - Delta) / (1 + Delta).
            let saved = life * (1.0 - (1.0 - d) / (1.0 + d));
            prop_assert!((saved - cost).abs() <= 1e-9 * life.max(1.0));
        }
    }

    #[test]
    fn gain_matches_hand_computed_value() {
        // l: 1 core, 2 ranks, each gets 0.5 core; f: 2 free cores, speed 1.
        let l = NodeProfile {
            cores: 1.0,
            speed: 1.0,
            cpu_load: 2.0,
            memory_available: 1 << 30,
            bandwidth: 10e6,
            competing: 0.0,
        };
        let f = NodeProfile {
            cores: 2.0,
            speed: 1.0,
            cpu_load: 0.0,
            memory_available: 3 << 20,
            bandwidth: 5e6,
            competing: 0.0,
        };
        let mut e = entity(0, 0.5);
        e.memory = 1 << 20;
        e.state_bytes = 10_000_000;
        e.age = Duration::from_secs(1000);
        let w = Weights::new(0.6, 0.4, 0.0).expect("valid");
        let g = gain(&l, &f, &[&e], &w, &MigrationCostModel::paper());
        // cpu: (2 - 0.5) / 2.5 = 0.6; memory: (3 MiB - 1 MiB) / 4 MiB = 0.5; network: 0.
        assert!(close(g.deltas[0], 0.6));
        assert!(close(g.deltas[1], 0.5));
        // network: nothing used, 5 MB/s available: (5e6 - 0) / 5e6 = 1 (weight 0).
        assert!(close(g.deltas[2], 1.0));
        assert!(close(g.improvement, 0.6 * 0.6 + 0.4 * 0.5));
        // cost: 0.3 s + 10 MB / 5 MB/s = 2.3 s; term 2.3 / (10 + ln 1000).
        assert!(close(g.cost_secs, 2.3));
        let term = 2.3 / (10.0 + 1000f64.ln());
        assert!(close(g.cost_term, term));
        assert!(close(g.gain, 0.56 - term));
        // The default charges the 2.3 s against the 1,000 s it is expected to live on.
        let g = gain(&l, &f, &[&e], &w, &MigrationCostModel::default());
        let term = 2.3 / (2000.0 - 2.3);
        assert!(close(g.cost_term, term));
        assert!(close(g.gain, 0.56 - term));
    }

    #[test]
    fn gain_of_a_group_sums_usage_and_averages_life() {
        let l = NodeProfile::idle(1.0, 0);
        let f = NodeProfile {
            speed: 2.0,
            ..NodeProfile::idle(2.0, 0)
        };
        let mut a = entity(0, 1.0);
        let mut b = entity(1, 0.5);
        a.age = Duration::from_secs(100);
        b.age = Duration::from_secs(300);
        let g = gain(&l, &f, &[&a, &b], &Weights::CPU_ONLY, &Default::default());
        // A = 2 cores * speed 2 = 4; U = 1.5; (4 - 1.5) / 5.5.
        assert!(close(g.deltas[0], 2.5 / 5.5));
        assert!(close(g.life_expectancy_secs, 200.0));
        assert!(close(g.cost_term, 0.3 / (400.0 - 0.3)));
        let paper = gain(
            &l,
            &f,
            &[&a, &b],
            &Weights::CPU_ONLY,
            &MigrationCostModel::paper(),
        );
        assert!(close(paper.cost_term, 0.3 / (10.0 + 200f64.ln())));
        let empty = gain(&l, &f, &[], &Weights::CPU_ONLY, &Default::default());
        assert!(close(empty.gain, 0.0));
    }

    #[test]
    fn speed_normalises_cpu() {
        // A full core at speed 1 vs a free core at speed 2: (2 - 1) / 3.
        let l = NodeProfile {
            cpu_load: 1.0,
            ..NodeProfile::idle(1.0, 0)
        };
        let f = NodeProfile {
            speed: 2.0,
            ..NodeProfile::idle(1.0, 0)
        };
        let e = entity(0, 1.0);
        let g = gain(&l, &f, &[&e], &Weights::CPU_ONLY, &Default::default());
        assert!(close(g.deltas[0], 1.0 / 3.0));
        // And back to an idle reference node: (1 - 2) / 3.
        let idle = NodeProfile::idle(1.0, 0);
        let g = gain(&f, &idle, &[&e], &Weights::CPU_ONLY, &Default::default());
        assert!(close(g.deltas[0], -1.0 / 3.0));
    }

    fn host(s: &str) -> HostName {
        HostName::new(s).expect("valid")
    }

    fn partner(h: &str, x: f64) -> Partner {
        Partner {
            host: host(h),
            exchanges_per_sec: x,
        }
    }

    #[test]
    fn communication_term_matches_hand_computed_values() {
        let (a, b, c) = (host("a"), host("b"), host("c"));
        // a knows c at 100 ms; b knows c at 10 ms; neither knows d (200 ms assumed).
        let at_a_rtts = HashMap::from([(c.clone(), 0.1)]);
        let at_b_rtts = HashMap::from([(c.clone(), 0.01)]);
        let unknown = DEFAULT_UNKNOWN_RTT.as_secs_f64();
        let at_a = RttView {
            host: &a,
            rtts: &at_a_rtts,
            unknown,
            unmeasured: Unmeasured::Assumed,
        };
        let at_b = RttView {
            host: &b,
            rtts: &at_b_rtts,
            unknown,
            unmeasured: Unmeasured::Assumed,
        };
        let mut e = entity(0, 1.0);
        // No partners: no term, and gain_near is gain.
        assert!(close(communication(&e, &at_a, &at_b), 0.0));
        // 2 exchanges/s with c: s_a = 2 * 0.1 / 2 = 0.1, s_b = 2 * 0.01 / 2 = 0.01.
        e.partners = vec![partner("c", 2.0)];
        assert!(close(at_a.latency_share(&e), 0.1));
        assert!(close(communication(&e, &at_a, &at_b), 0.09 / 1.91));
        // And back: the same value, negative.
        assert!(close(communication(&e, &at_b, &at_a), -0.09 / 2.09));
        // A partner on the destination itself: its latency becomes 0.
        e.partners = vec![partner("b", 4.0)];
        // s_a = 4 * 0.2 / 2 = 0.4 (b unknown at a), s_b = 0.
        assert!(close(communication(&e, &at_a, &at_b), 0.4 / 1.6));
        // Leaving a partner on the local node: s_b = 0 at b, s_a at a unknown 0.4.
        assert!(close(communication(&e, &at_b, &at_a), -0.4 / 2.4));
        // Known at the destination only: not counted (the giver's assumed 200 ms would make
        // any destination that measured it look nearer).
        let none = HashMap::new();
        let at_a_blind = RttView {
            host: &a,
            rtts: &none,
            unknown,
            unmeasured: Unmeasured::Assumed,
        };
        e.partners = vec![partner("c", 2.0)];
        assert!(close(communication(&e, &at_a_blind, &at_b), 0.0));
        // Known at the giver only, and far from it: the destination is charged the assumed
        // RTT ...
        assert!(close(
            communication(&e, &at_a, &at_a_blind),
            (0.1 - 0.2) / (2.0 - 0.1 + 0.2)
        ));
        // ... unless it asked in a partner steal: then nothing says the partner is nearer
        // to one node than to the other, and it is not counted.
        let at_a_partner_thief = RttView {
            unmeasured: Unmeasured::Neutral,
            ..at_a_blind
        };
        assert!(close(communication(&e, &at_a, &at_a_partner_thief), 0.0));
        // Known at the giver only, next to it (10 ms), the destination's RTT unknown at
        // the giver: the destination is charged the assumed RTT (partner steal or not).
        for thief in [&at_a_blind, &at_a_partner_thief] {
            assert!(close(
                communication(&e, &at_b, thief),
                (0.01 - 0.2) / (2.0 - 0.01 + 0.2)
            ));
        }
        // ... and with the destination measured at 150 ms from the giver: the partner is
        // about as far from the destination, so the destination is charged 150 ms.
        let at_b_rtts_a = HashMap::from([(c.clone(), 0.01), (a.clone(), 0.15)]);
        let at_b_knows_a = RttView {
            host: &b,
            rtts: &at_b_rtts_a,
            unknown,
            unmeasured: Unmeasured::Assumed,
        };
        for thief in [&at_a_blind, &at_a_partner_thief] {
            assert!(close(
                communication(&e, &at_b_knows_a, thief),
                (0.01 - 0.15) / (2.0 - 0.01 + 0.15)
            ));
        }
        // A partner steal: the rank goes next to its partner on the destination (4
        // exchanges/s at 150 ms), and its other partner, 100 ms from the giver and
        // unmeasured at the destination, does not count against it: s_b = 4 * 0.15 / 2.
        // Charged the assumed 200 ms it would: s_b = (4 * 0.15 + 2 * 0.1) / 2 = 0.4 against
        // s_a = 2 * 0.2 / 2 = 0.2.
        let at_b_far = HashMap::from([(c.clone(), 0.1), (a.clone(), 0.15)]);
        let at_b_far = RttView {
            host: &b,
            rtts: &at_b_far,
            unknown,
            unmeasured: Unmeasured::Assumed,
        };
        e.partners = vec![partner("a", 4.0), partner("c", 2.0)];
        assert!(close(
            communication(&e, &at_b_far, &at_a_partner_thief),
            0.3 / (2.0 - 0.3)
        ));
        assert!(close(
            communication(&e, &at_b_far, &at_a_blind),
            0.2 / (2.0 - 0.4 + 0.2)
        ));
        // Unknown on both sides: no change, however busy the partner.
        e.partners = vec![partner("d", 3.0)];
        assert!(close(communication(&e, &at_a, &at_b), 0.0));
        e.partners = vec![partner("d", 1000.0)];
        assert!(close(communication(&e, &at_a, &at_b), 0.0));
        // ... and it does not dilute a known one.
        e.partners = vec![partner("c", 2.0), partner("d", 1000.0)];
        assert!(close(communication(&e, &at_a, &at_b), 0.09 / 1.91));
        // A local share above 1 counts as 1.
        e.partners = vec![partner("b", 100.0)];
        assert!(close(communication(&e, &at_a, &at_b), 1.0));
    }

    #[test]
    fn gain_near_adds_the_mean_communication_term_and_is_gain_without_rtts() {
        let (a, b) = (host("a"), host("b"));
        let none = HashMap::new();
        let at_a = RttView {
            host: &a,
            rtts: &none,
            unknown: 0.2,
            unmeasured: Unmeasured::Assumed,
        };
        let at_b = RttView {
            host: &b,
            rtts: &none,
            unknown: 0.2,
            unmeasured: Unmeasured::Assumed,
        };
        let l = NodeProfile {
            cpu_load: 2.0,
            ..NodeProfile::idle(1.0, 0)
        };
        let f = NodeProfile::idle(2.0, 0);
        let mut x = entity(0, 0.5);
        let y = entity(1, 0.5);
        // x exchanges 4 times a second with a rank on b: s_l = 0.4, s_f = 0.
        x.partners = vec![partner("b", 4.0)];
        let plain = gain(&l, &f, &[&x, &y], &Weights::CPU_ONLY, &Default::default());
        let without = gain_near(
            &l,
            &f,
            &[&x, &y],
            &Weights::CPU_ONLY,
            &Default::default(),
            None,
        );
        assert_eq!(plain, without);
        let near = gain_near(
            &l,
            &f,
            &[&x, &y],
            &Weights::CPU_ONLY,
            &Default::default(),
            Some((&at_a, &at_b)),
        );
        // Mean of 0.25 (x) and 0 (y, no partners).
        assert!(close(near.communication, 0.125));
        assert!(close(near.gain, plain.gain + 0.125));
        assert!(close(near.improvement, plain.improvement));
    }

    #[test]
    fn profiles_are_validated() {
        let mut p = NodeProfile::idle(2.0, 0);
        assert!(p.validate().is_ok());
        p.speed = 0.0;
        assert!(p
            .validate()
            .expect_err("zero")
            .to_string()
            .contains("speed"));
        p.speed = 1.0;
        p.cpu_load = f64::NAN;
        assert!(p
            .validate()
            .expect_err("nan")
            .to_string()
            .contains("cpu_load"));
        let mut e = entity(0, 1.0);
        e.cpu = -1.0;
        assert!(e.validate().is_err());
    }

    fn arb_profile() -> impl Strategy<Value = NodeProfile> {
        (
            0.1f64..64.0,
            0.1f64..4.0,
            0.0f64..80.0,
            0u64..1 << 40,
            0.0f64..1e10,
        )
            .prop_map(|(cores, speed, cpu_load, memory_available, bandwidth)| {
                NodeProfile {
                    cores,
                    speed,
                    cpu_load,
                    memory_available,
                    bandwidth,
                    competing: 0.0,
                }
            })
    }

    proptest! {
        #[test]
        fn gain_never_positive_when_cost_exceeds_improvement(
            l in arb_profile(),
            f in arb_profile(),
            cpu in 0.0f64..8.0,
            memory in 0u64..1 << 36,
            state in 0u64..1 << 40,
            age in 0u64..1_000_000,
            spawn_ms in 0u64..100_000,
            wc in 0.0f64..1.0,
            wm in 0.0f64..1.0,
        ) {
            let mut e = entity(0, cpu);
            e.memory = memory;
            e.state_bytes = state;
            e.age = Duration::from_secs(age);
            let weights = Weights::new(wc * (1.0 - wm), wm, (1.0 - wc) * (1.0 - wm))
                .expect("valid by construction");
            let cost = MigrationCostModel { spawn: Duration::from_millis(spawn_ms), ..Default::default() };
            let g = gain(&l, &f, &[&e], &weights, &cost);
            prop_assert!((-1.0..=1.0).contains(&g.improvement));
            prop_assert!((0.0..=1.0).contains(&g.cost_term));
            for d in g.deltas {
                prop_assert!((-1.0..=1.0).contains(&d));
            }
            if g.cost_term >= g.improvement {
                prop_assert!(g.gain <= 0.0);
            }
            prop_assert!(g.gain <= g.improvement);
        }
    }
}
