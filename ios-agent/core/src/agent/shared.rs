//! What both strategies share: the agent's identity and settings, its peers and the hosts
//! they announced, its node's and entities' profiles, the entities held down, gone or barred
//! from going back, the move under way, the drain, the queue of actions and the counters,
//! with the moves and gates both strategies make from them ([`Shared`]). Work stealing
//! ([`super::stealing`]), the cluster ([`super::c2c`]) and the resizing policy
//! ([`super::resizing`]) each take it as `&mut Shared`; nothing here knows them.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pcm_proto::{HostName, JobId};
use rand::rngs::StdRng;

use super::config::Config;
use crate::decision::{self, Destination, Plan, Policy};
use crate::message::{HostRtt, Message, MigrationId, MAX_ENTITIES, MAX_RTTS};
use crate::model::{EntityId, EntityProfile, JobOffer, NodeProfile, Resource};
use crate::tier::{IdMap, LatencyTier, PeerId, PeerTable};

/// Most actions queued before further sends are dropped (migrations are never dropped).
pub const MAX_PENDING_ACTIONS: usize = 1024;

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
    /// report the end with `Agent::handle_migration_outcome` and the same `id`.
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
    /// `Agent::handle_migration_outcome` and the same `id`.
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
    /// within `Config::shed_after`: the job runs faster without them.
    Shed {
        /// The model's gain.
        gain: f64,
    },
    /// This node is rank 0's, and the job's slowest rank runs on another node and has held
    /// the job back for a while with nobody moving it: the job runs faster on the ranks
    /// here alone, and the ranks elsewhere leave it.
    Straggler {
        /// The model's gain.
        gain: f64,
    },
    /// The job's ranks here exchange with a partner beyond the local tier and have for a
    /// while, its rank 0 running elsewhere: the job runs faster without them.
    Distant {
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
            ResizeReason::Straggler { gain } => {
                write!(f, "a slow rank elsewhere held the job back; gain {gain:.2}")
            }
            ResizeReason::Distant { gain } => {
                write!(
                    f,
                    "the ranks here exchange beyond the local tier; gain {gain:.2}"
                )
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
    /// `StealRefusal`).
    pub steals_refused: u64,
    /// Hosts dropped from the full table of hosts to make room for a new one
    /// (`Agent::handle_peer_host`).
    pub hosts_evicted: u64,
    /// Host announcements refused (`Agent::handle_peer_host`).
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

/// Why a host announcement is refused (`Agent::handle_peer_host`).
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
pub(crate) struct Outgoing {
    pub(crate) id: MigrationId,
    pub(crate) notify: Option<PeerId>,
    pub(crate) deadline: Instant,
    /// The entities that leave this node.
    pub(crate) entities: Vec<EntityId>,
    /// Set when this reconfiguration is a resize ([`Action::Resize`]), not a migration.
    pub(crate) resize: Option<OutgoingResize>,
}

/// The hosts announced by peers (`Agent::handle_peer_host`), by peer and by host: an
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
pub(crate) struct Hosts {
    /// Each peer's host, with the sequence number of its announcement.
    pub(crate) by_peer: IdMap<PeerId, (HostName, u64)>,
    pub(crate) by_host: IdMap<HostName, PeerId>,
    /// What some of these peers last told this agent of their node's load
    /// ([`Hosts::learn`]), for `Agent::pool_hosts`: only peers in `by_peer`, forgotten with
    /// their host, so bounded by the table. Apart from `by_peer` because few peers of a
    /// large table ever send a profile here.
    pub(crate) loads: IdMap<PeerId, Learned>,
    /// Announcements, oldest first, as (peer, sequence number); an entry whose number is no
    /// longer the peer's is stale and skipped.
    pub(crate) order: VecDeque<(PeerId, u64)>,
    /// Bumped on every change: the announcements' sequence numbers.
    pub(crate) version: u64,
}

impl Hosts {
    pub(crate) fn get(&self, peer: &PeerId) -> Option<&HostName> {
        self.by_peer.get(peer).map(|(host, _)| host)
    }

    pub(crate) fn contains_key(&self, peer: &PeerId) -> bool {
        self.by_peer.contains_key(peer)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_peer.len()
    }

    /// The peer that holds `host`, if any.
    pub(crate) fn holder(&self, host: &HostName) -> Option<&PeerId> {
        self.by_host.get(host)
    }

    /// `peer` now holds `host` (a host nobody else holds), instead of its old one if any.
    pub(crate) fn insert(&mut self, peer: PeerId, host: HostName) {
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

    pub(crate) fn remove(&mut self, peer: &PeerId) -> Option<HostName> {
        let (host, _) = self.by_peer.remove(peer)?;
        self.version += 1;
        self.by_host.remove(&host);
        self.loads.remove(peer);
        Some(host)
    }

    /// `peer` told of the load of `host`'s node: kept if `host` is the one it announced
    /// (one look-up when its last report is kept already).
    pub(crate) fn learn(&mut self, peer: &PeerId, host: &HostName, load: Learned) {
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
    pub(crate) fn evict_oldest(
        &mut self,
        keep: impl Fn(&PeerId, &HostName) -> bool,
    ) -> Option<PeerId> {
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
pub(crate) struct Learned {
    pub(crate) profile: NodeProfile,
    pub(crate) at: Instant,
    pub(crate) leaving: bool,
}

/// Another agent's host as this agent knows it (`Agent::pool_hosts`): the hosts of the
/// pool work could go to, with what is known of their load.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownHost {
    /// The agent.
    pub peer: PeerId,
    /// The host it announced over its own connection (`Agent::handle_peer_host`).
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

/// The drain of a node whose agent leaves the pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leaving {
    pub(crate) started: Instant,
    /// When peers are next told that this node has work to give.
    pub(crate) next_call: Instant,
    pub(crate) moved: u64,
    pub(crate) failed: u64,
    /// When the last move off this node completed: the pool is relieving the node, and
    /// the wait before a shrink starts again from there ([`resizing::leave_shrink_wait`]).
    pub(crate) last_moved: Option<Instant>,
}

impl Leaving {
    /// Since when the leaving node has waited for idle nodes to take its ranks: the start
    /// of the drain or the last completed move, whichever is later.
    pub(crate) fn waiting_since(&self) -> Instant {
        self.last_moved
            .map_or(self.started, |at| at.max(self.started))
    }
}

/// How far the drain started by `Agent::handle_leave` has come.
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

/// A resize under way, kept with the [`Outgoing`] reconfiguration that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutgoingResize {
    /// The job grows onto another node.
    Grow(JobId),
    /// The job's ranks here leave it.
    Shrink(JobId),
    /// The job's ranks on other nodes leave it ([`ResizeReason::Straggler`]).
    ShrinkElsewhere(JobId),
}

impl OutgoingResize {
    /// The job resized.
    pub(crate) fn job(&self) -> &JobId {
        match self {
            OutgoingResize::Grow(job)
            | OutgoingResize::Shrink(job)
            | OutgoingResize::ShrinkElsewhere(job) => job,
        }
    }
}

/// The state both strategies share (see the module docs).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) me: PeerId,
    pub(crate) host: HostName,
    pub(crate) rng: StdRng,
    pub(crate) peers: PeerTable,
    /// The host each connected agent announced over its own connection
    /// (`Agent::handle_peer_host`): the only hosts work is ever moved to.
    pub(crate) hosts: Hosts,
    /// What `Agent::host_rtts` last built, with the versions of the peer table and of its
    /// peers' hosts it was built from: a thief sends it with every steal, and rebuilding it
    /// (a look-up and a copied host name per peer) was most of the simulator's time per
    /// steal at 10,000 nodes, while the peers and their RTTs change far less often than
    /// steals go.
    pub(crate) rtts_cache: Option<(u64, u64, Arc<[HostRtt]>)>,
    /// Bumped when the host of a peer in the peer table changes: what
    /// `Agent::host_rtts` is built from. Hosts of peers outside the table come and go
    /// all the time in a large pool (a full table's evictions), and keying the cache on
    /// every change of the table of hosts rebuilt it for nearly every steal (a fifth of
    /// the simulator's time at 10,000 nodes, Grid-like).
    pub(crate) measured_hosts_version: u64,
    /// Announcements refused because another agent held the host: the newest claim of each
    /// host is promoted when the holder goes (an agent restarted with a new identity while
    /// its old connection had not yet timed out).
    pub(crate) contested: HashMap<HostName, PeerId>,
    pub(crate) node: Option<NodeProfile>,
    /// When `node` was sampled.
    pub(crate) node_at: Option<Instant>,
    /// Profiles taken before this instant predate a migration that involved this agent (or
    /// its cluster) and are not acted on.
    pub(crate) settle_after: Option<Instant>,
    pub(crate) entities: Vec<EntityProfile>,
    /// RTTs, seconds, to the hosts this node's entities' partners run on, as the driver
    /// measured them on request (`Agent::hosts_to_measure`, `Agent::handle_partner_rtt`).
    /// Kept apart from the peer table, which keeps only the nearest peers: the model counts
    /// only partners the giver has measured ([`crate::model::communication`]), wherever they
    /// are.
    pub(crate) partner_rtts: HashMap<HostName, f64>,
    /// The hosts of the last `Agent::hosts_to_measure`, sorted.
    pub(crate) partner_wanted: Vec<HostName>,
    /// Entities that left this node, oldest first, each with the end of the two hold-downs
    /// during which no giver should send it back here: this node's steals carry them
    /// ([`Message::WorkSteal`]'s `departed`), so the rule does not depend on which agent
    /// decided the departure or keeps a record of it (an NSc2c cluster whose manager
    /// changed loses the old manager's `no_return`).
    pub(crate) departed: VecDeque<(EntityId, Instant)>,
    /// Entities stolen here, or moved by this NSc2c manager's order, with the host they came
    /// from and until when they may not go back there (two hold-downs after the steal was
    /// accepted or the order given). The hold-down alone does not stop a rank going back
    /// once it is over: in the simulated pools, with moves the amortised cost term finds
    /// cheap, nodes of one cluster with no load change passed ranks back and forth (1,000
    /// nodes, Grid-like, 20 minutes: 15 returns within two hold-downs, 2026-11-27).
    pub(crate) no_return: HashMap<EntityId, (HostName, Instant)>,
    pub(crate) actions: VecDeque<Action>,
    pub(crate) next_id: u64,
    pub(crate) held: HashMap<EntityId, Instant>,
    pub(crate) outgoing: Option<Outgoing>,
    /// Set by `Agent::handle_leave`: the node is being drained.
    pub(crate) leaving: Option<Leaving>,
    pub(crate) stats: Stats,
}

impl Shared {
    /// This agent's shared state at its start.
    pub(crate) fn new(
        me: PeerId,
        host: HostName,
        config: Config,
        rng: StdRng,
        next_id: u64,
    ) -> Self {
        Shared {
            peers: PeerTable::new(config.max_peers),
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
            departed: VecDeque::new(),
            no_return: HashMap::new(),
            actions: VecDeque::new(),
            next_id,
            held: HashMap::new(),
            outgoing: None,
            leaving: None,
            stats: Stats::default(),
        }
    }

    /// The host `peer` announced, if it did and the announcement was accepted.
    pub(crate) fn peer_host(&self, peer: &PeerId) -> Option<&HostName> {
        self.hosts.get(peer)
    }

    /// Whether the node is being drained.
    pub(crate) fn is_leaving(&self) -> bool {
        self.leaving.is_some()
    }

    /// Whether a migration or resize decided here is under way.
    pub(crate) fn is_migrating(&self) -> bool {
        self.outgoing.is_some()
    }

    /// Every other agent whose host this agent knows (its table of hosts: connected agents
    /// that announced one), with its tier and RTT if it is in the peer table and what it
    /// last reported of its load ([`KnownLoad`]), if anything; nearest tier first, then by
    /// host name. Built on demand (for `ios-agent status`), nothing kept for it.
    pub(crate) fn pool_hosts(&self, now: Instant) -> Vec<KnownHost> {
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

    pub(crate) fn measured_host_changed(&mut self, peer: &PeerId) {
        if self.peers.get(peer).is_some() {
            self.measured_hosts_version += 1;
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
    /// if their node is `leaving`, else those `Agent::may_return` does not bar from it.
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

    // ---- internals shared with c2c ----

    /// Whether `entity` is held back from moving at `now`: an entry past its time stays in
    /// [`Shared::held`] until the next timer prunes it, and a busy node's agent may see
    /// no timer for a long time (in the simulator, a node running 8 ranks of a job kept two
    /// of them "held" for the last 50 minutes of an hour).
    pub(crate) fn is_held(&self, entity: &EntityId, now: Instant) -> bool {
        self.held.get(entity).is_some_and(|until| now < *until)
    }

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

    /// `Agent::policy` for the entities of a node that is leaving or not (an NSc2c manager
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
            keep_near_partners: false,
            gather_within_hold_down: self.config.gather_within_hold_down,
        }
    }

    /// This agent's measured RTTs to the hosts of its peers (each peer's least RTT seen
    /// lately, [`crate::tier::PeerInfo::min_rtt`]), nearest first, at most
    /// [`Config::max_peers`] (and [`MAX_RTTS`]): what a work steal carries.
    ///
    /// The least RTT, not the smoothed one: the home agent of a malleable job sets the
    /// thief's RTTs against its own least RTT to the job's partners
    /// (`Shared::rtt_to_host`), and a smoothed RTT to a busy capped node holds its
    /// scheduling delays (in CI, a thief's 3.7 ms to the node running the job's other rank,
    /// where the path's least was about 0.1 ms, sank the only grow that would have come
    /// before a leave).
    pub(crate) fn host_rtts(&mut self) -> Arc<[HostRtt]> {
        let versions = (self.peers.version(), self.measured_hosts_version);
        if let Some((p, h, rtts)) = &self.rtts_cache {
            if (*p, *h) == versions {
                return rtts.clone();
            }
        }
        let mut least: Vec<(Duration, &PeerId)> = self
            .peers
            .by_rtt()
            .filter_map(|(peer, _)| self.peers.get(peer).map(|info| (info.min_rtt, peer)))
            .collect();
        least.sort_by_key(|(rtt, _)| *rtt);
        let rtts: Arc<[HostRtt]> = least
            .into_iter()
            .filter_map(|(rtt, peer)| {
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

    /// This agent's measured RTT to `host`, seconds, for the model's communication term and
    /// a grow's exchange: the round trip of the path, its peer's least RTT seen lately on
    /// that host ([`crate::tier::PeerInfo::min_rtt`]), else the partner RTT it asked for
    /// (`Agent::hosts_to_measure`).
    ///
    /// The least RTT, as the RTTs a work steal carries (`Shared::host_rtts`), so that the
    /// giver's and the thief's are alike: what a halo exchange pays. The smoothed RTT between
    /// two agents on busy capped nodes adds their scheduling, 0.8 to 4.5 ms where the path's
    /// is a tenth of a millisecond in the main job's act.
    pub(crate) fn rtt_to_host(&self, host: &HostName) -> Option<f64> {
        self.hosts
            .holder(host)
            .and_then(|peer| self.peers.get(peer))
            .map(|info| info.min_rtt.as_secs_f64())
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

    /// Whether `plan` moves an entity of `entities` (a node's that is not `leaving`) within
    /// the entity's hold-down: a step of gathering ([`Policy::gather_within_hold_down`]),
    /// which the receiving side answers by holding it a hold-down from its arrival
    /// ([`Message::StealAccepted`]'s `within_hold_down`). A leaving node's moves are forced
    /// and count for nothing.
    pub(crate) fn within_hold_down(
        &self,
        entities: &[EntityProfile],
        plan: &Plan,
        leaving: bool,
    ) -> bool {
        !leaving
            && entities
                .iter()
                .any(|e| plan.entities.contains(&e.id) && e.resident < self.config.hold_down)
    }

    /// An NSc2c manager's order of `entities` within their hold-down: held until a
    /// hold-down after the latest the move may end (the migration timeout), so that their
    /// next move waits a hold-down from their arrival, as [`Message::StealAccepted`]'s
    /// `within_hold_down` has the thief hold them.
    pub(crate) fn hold_moved_within(&mut self, now: Instant, entities: &[EntityId]) {
        let until = now + self.config.migration_timeout + self.config.hold_down;
        for e in entities {
            self.held.insert(e.clone(), until);
        }
    }

    /// Lists `entities` in `departed` for two hold-downs from `now` (`gone`), or no longer
    /// (a move that failed: they never left).
    pub(crate) fn mark_departed(&mut self, now: Instant, entities: &[EntityId], gone: bool) {
        self.departed
            .retain(|(e, until)| *until > now && !entities.contains(e));
        if gone {
            let until = now + self.config.hold_down * 2;
            self.departed
                .extend(entities.iter().map(|e| (e.clone(), until)));
        }
    }
}
