//! NSp2p work stealing (section 5.2, "Peer-to-peer load balancing"; section 6.2): a lightly
//! loaded agent steals work for itself with TTL-forwarded packets, escalating through the
//! latency tiers, and partner steals to the agents of its ranks' far partners gather a
//! spread job ([`Config::with_gather`]); a loaded agent decides what to give. An
//! NSc2c manager steals the same way on behalf of a member of its cluster, and answers
//! steals for its members ([`super::c2c`]); a light member sends partner steals for its
//! own ranks too. What stealing asks of the cluster goes through [`ClusterRole`], so this
//! module knows nothing of it. Everything else it reads and moves is in [`Shared`].

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pcm_proto::{HostName, JobId};

use super::config::{Config, Topology};
use super::resizing::{self, Resizing};
use super::shared::{Beneficiary, Shared, MAX_LEAVE_CALLS};
use crate::decision::{self, Policy};
use crate::message::{HostRtt, Message, MessageId, MigrationId, MAX_RTTS};
use crate::model::{EntityId, EntityProfile, RttLookup, RttView, Unmeasured, DEFAULT_UNKNOWN_RTT};
use crate::tier::{LatencyTier, PeerId, LOCAL_MAX_RTT};

/// Work-steal ids remembered to recognise a packet seen before.
const MAX_SEEN: usize = 1024;

/// Why a work steal is not acted on (it is dropped, and counted in
/// [`Stats::steals_refused`](super::shared::Stats::steals_refused); a
/// [`StealRefusal::Forwarded`] one is answered with a hint instead).
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

/// Most refused thieves remembered for a later [`Message::WorkAvailable`] hint.
const REFUSED_THIEVES_KEPT: usize = 8;
/// How long a refused thief is remembered: its profile is stale after that, and it will
/// have stolen again on its own.
const REFUSED_THIEF_MEMORY: Duration = Duration::from_secs(30);
/// How long before a partner steal goes to the same partner host again: its agent said no,
/// and a node's entities and loads change over tens of seconds, not between two rounds.
const PARTNER_STEAL_RETRY: Duration = Duration::from_secs(30);

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
        /// Entities the giver moves within their hold-down (`within_hold_down` of
        /// [`Message::StealAccepted`]): held for a hold-down once they arrive.
        hold: Vec<EntityId>,
    },
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
    pub(crate) fn into_message(self) -> Message {
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
/// the giver's measured RTTs (`Agent::rtt_to_host`), and those the thief's steal carried.
pub(crate) struct StealLatencies<'a> {
    here: GiverRtts<'a>,
    there: ThiefRtts<'a>,
    /// A partner steal (the thief is not in our peer table): see [`RttView::unmeasured`].
    partner_steal: bool,
}

/// `Agent::rtt_to_host` as an [`RttLookup`].
struct GiverRtts<'a>(&'a Shared);

impl RttLookup for GiverRtts<'_> {
    fn rtt_to(&self, host: &HostName) -> Option<f64> {
        self.0.rtt_to_host(host)
    }
}

/// NSc2c: what a manager knows of a member's RTTs, the hosts the member measured within the
/// local tier (its `near_hosts`), each taken at half the tier's bound; other hosts unknown
/// (assumed far). Why not the manager's own RTTs, as before 2026-12-04: on a network
/// without structure (pairs' RTTs drawn independently) a member within local latency of the
/// manager is as likely far as near from the manager's near hosts, so a rank the manager
/// took for near its partners went further from them.
pub(crate) struct MemberRtts<'a> {
    pub(crate) near: &'a [HostName],
}

impl RttLookup for MemberRtts<'_> {
    fn rtt_to(&self, host: &HostName) -> Option<f64> {
        self.near
            .contains(host)
            .then(|| crate::tier::LOCAL_MAX_RTT.as_secs_f64() / 2.0)
    }
}

/// A steal's RTTs by host (at most [`crate::message::MAX_RTTS`]): the last entry of a host
/// counts, as it would in a map built from the list.
struct ThiefRtts<'a>(&'a [HostRtt]);

impl RttLookup for ThiefRtts<'_> {
    fn rtt_to(&self, host: &HostName) -> Option<f64> {
        HostRtt::find_in(self.0, host)
    }
}

impl<'a> StealLatencies<'a> {
    /// `agent`'s RTTs and `steal`'s. In NSc2c they are the manager's node's; a manager
    /// weighing a member's entities puts [`MemberRtts`] in the giver's view instead.
    pub(crate) fn new(agent: &'a Shared, steal: &'a Steal) -> Self {
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

/// A work steal for an NSc2c agent's cluster to answer, as work stealing received and
/// checked it.
pub(crate) struct ClusterSteal {
    /// The agent it came from.
    pub(crate) from: PeerId,
    pub(crate) steal: Steal,
    /// Not seen here before.
    pub(crate) first_time: bool,
    /// Its origin sent it itself ([`check_steal`] passed): work may move on it.
    pub(crate) direct: bool,
}

/// What NSp2p work stealing asks of the NSc2c cluster, on whose members' behalf a manager
/// steals ([`super::c2c::Cluster`] implements it; in NSp2p none of it is asked).
pub(crate) trait ClusterRole {
    /// Whether this agent manages its cluster.
    fn is_manager(&self, s: &Shared) -> bool;
    /// The member a manager steals for, if one is light and nothing is balanced inside.
    fn lightest_member(&self, s: &Shared, now: Instant) -> Option<Beneficiary>;
    /// The member a manager's partner steal would gather a job onto, with the partner host.
    fn partner_steal_target(
        &self,
        s: &Shared,
        stealing: &Stealing,
        now: Instant,
    ) -> Option<(HostName, Beneficiary)>;
    /// Whether an entity of a member this manager manages exchanges with a process on
    /// `host`.
    fn members_exchange_with(&self, s: &Shared, host: &HostName) -> bool;
}

/// One agent's work stealing: its round as a thief, the packets it has seen, and the
/// thieves it refused.
#[derive(Debug)]
pub(crate) struct Stealing {
    /// Partner hosts sent a partner steal, and when (asked again only after
    /// [`PARTNER_STEAL_RETRY`]).
    partners_asked: HashMap<HostName, Instant>,
    /// NSc2c: the partner steal under way, to send again to the manager a member names
    /// ([`Message::StealRedirect`]).
    redirectable: Option<Steal>,
    thief: Thief,
    backoff: Duration,
    seen: VecDeque<(PeerId, MessageId)>,
    seen_set: HashSet<(PeerId, MessageId)>,
    /// NSp2p: thieves refused here (no gain then), newest last, with when; if this node gets
    /// loaded, one of them is told at once instead of waiting for its next steal round.
    refused: VecDeque<(Beneficiary, Instant)>,
    /// When a hint last made this agent steal (hints are obeyed at most once per steal period).
    hinted_at: Option<Instant>,
}

impl Stealing {
    /// An agent's work stealing at its start: an NSc2c agent lets one failure timeout of
    /// heartbeats settle the election before it steals as a manager.
    pub(crate) fn new(config: &Config, now: Instant) -> Self {
        Stealing {
            thief: Thief::Idle {
                next_round: match config.topology {
                    Topology::PeerToPeer => now,
                    Topology::ClusterToCluster => now + config.member_timeout,
                },
            },
            backoff: config.steal_backoff,
            seen: VecDeque::new(),
            seen_set: HashSet::new(),
            refused: VecDeque::new(),
            hinted_at: None,
            redirectable: None,
            partners_asked: HashMap::new(),
        }
    }

    /// Whether a work-steal round is waiting for an answer or for the promised work.
    pub(crate) fn is_stealing(&self) -> bool {
        !matches!(self.thief, Thief::Idle { .. })
    }

    /// The node starts its drain: a round under way ends (a leaving node steals nothing),
    /// and NSp2p calls for thieves.
    pub(crate) fn on_leave(&mut self, s: &mut Shared, now: Instant) {
        if matches!(self.thief, Thief::Stealing { .. }) {
            self.thief = Thief::Idle { next_round: now };
        }
        self.call_for_thieves(s, now);
    }

    /// The node gave up its drain: stealing starts again at once.
    pub(crate) fn on_stay(&mut self, now: Instant) {
        self.thief = Thief::Idle { next_round: now };
    }

    /// The thief's timers: a new round when one is due, the next tier when a steal was not
    /// answered, and no more waiting for promised work that did not come.
    pub(crate) fn on_timeout(&mut self, s: &mut Shared, cluster: &impl ClusterRole, now: Instant) {
        match self.thief {
            Thief::Idle { next_round } if now >= next_round => {
                if self.gathers_for_itself(s, cluster) {
                    // Partner steals only: a steal that gets nothing ends the round
                    // (`escalate` finds no beneficiary for a member), and the next comes a
                    // steal period later.
                    match self.partner_steal_target(s, cluster, now) {
                        Some((to, host, b)) => self.partner_steal(s, now, b, to, host),
                        None => {
                            self.thief = Thief::Idle {
                                next_round: now + s.config.steal_period,
                            }
                        }
                    }
                } else if let Some(b) = self.beneficiary(s, cluster, now) {
                    let first = match s.config.topology {
                        Topology::PeerToPeer => LatencyTier::Local,
                        Topology::ClusterToCluster => LatencyTier::Regional,
                    };
                    // A round starts with a partner steal when one is due, then goes
                    // through the tiers.
                    match self.partner_steal_target(s, cluster, now) {
                        Some((to, host, partner_b)) => {
                            self.partner_steal(s, now, partner_b, to, host)
                        }
                        None => self.send_steal(s, now, b, Some(first)),
                    }
                } else {
                    self.thief = Thief::Idle {
                        next_round: now + s.config.steal_period,
                    };
                }
            }
            Thief::Stealing { deadline, .. } if now >= deadline => self.escalate(s, cluster, now),
            Thief::Receiving { deadline, .. } if now >= deadline => {
                self.thief = Thief::Idle { next_round: now };
            }
            _ => {}
        }
    }

    /// When [`Stealing::on_timeout`] must next run, if it must.
    pub(crate) fn timeout(&self, s: &Shared, cluster: &impl ClusterRole) -> Option<Instant> {
        match self.thief {
            Thief::Idle { next_round } => self.may_steal(s, cluster).then_some(next_round),
            Thief::Stealing { deadline, .. } | Thief::Receiving { deadline, .. } => Some(deadline),
        }
    }

    /// A steal of ours was accepted: wait for the work, and bar the entities from going
    /// back to the giver. Entities moved `within_hold_down` (a step of gathering) are
    /// held for a hold-down once they arrive ([`Stealing::on_migration_finished`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_steal_accepted(
        &mut self,
        s: &mut Shared,
        now: Instant,
        from: &PeerId,
        id: MessageId,
        migration: MigrationId,
        entities: Vec<EntityId>,
        from_host: Option<HostName>,
        within_hold_down: bool,
    ) {
        if matches!(self.thief, Thief::Stealing { id: current, .. } if current == id) {
            tracing::debug!(agent = %s.me, %from, %migration, within_hold_down, "steal accepted");
            // Until they arrive, held as long as the move may take, and a hold-down more.
            let hold = if within_hold_down {
                s.hold_moved_within(now, &entities);
                entities.clone()
            } else {
                Vec::new()
            };
            if let Some(giver) = from_host.or_else(|| s.hosts.get(from).cloned()) {
                s.bar_return(now, entities, giver);
            }
            self.thief = Thief::Receiving {
                migration,
                deadline: now + s.config.migration_timeout,
                hold,
            };
            self.backoff = s.config.steal_backoff;
        }
    }

    /// A steal of ours went its whole way without work: the next tier.
    pub(crate) fn on_steal_exhausted(
        &mut self,
        s: &mut Shared,
        cluster: &impl ClusterRole,
        now: Instant,
        id: MessageId,
    ) {
        if matches!(self.thief, Thief::Stealing { id: current, .. } if current == id) {
            self.escalate(s, cluster, now);
        }
    }

    /// A migration ended that this agent waited for: the stolen work arrived (or not), and
    /// the next round waits a steal period.
    pub(crate) fn on_migration_finished(
        &mut self,
        s: &mut Shared,
        now: Instant,
        migration: MigrationId,
        completed: bool,
    ) {
        if let Thief::Receiving {
            migration: m, hold, ..
        } = &mut self.thief
        {
            if *m != migration {
                return;
            }
            tracing::debug!(agent = %s.me, %migration, completed, "stolen work arrived");
            // A step of gathering within the hold-down was this entity's second move
            // within one at most: its next waits a whole hold-down from its arrival.
            for e in std::mem::take(hold) {
                if completed {
                    s.held.insert(e, now + s.config.hold_down);
                } else {
                    s.held.remove(&e);
                }
            }
            s.settle_after = Some(now);
            self.thief = Thief::Idle {
                next_round: now + s.config.steal_period,
            };
        }
    }

    /// Whether a leaving NSp2p node still calls peers to take its entities.
    pub(crate) fn calls_for_thieves(&self, s: &Shared) -> bool {
        s.config.topology == Topology::PeerToPeer
            && s.leaving.is_some()
            && s.outgoing.is_none()
            && !s.entities.is_empty()
    }

    /// NSp2p, leaving: once per steal period while entities are left and none is moving,
    /// tells the nearest peers (up to [`MAX_LEAVE_CALLS`]) that work is available. Each may
    /// answer with a work steal, decided here like any other.
    pub(crate) fn call_for_thieves(&mut self, s: &mut Shared, now: Instant) {
        if !self.calls_for_thieves(s) {
            return;
        }
        let Some(leaving) = s.leaving.as_mut() else {
            return;
        };
        if now < leaving.next_call {
            return;
        }
        leaving.next_call = now + s.config.steal_period;
        let mut tier = Some(LatencyTier::Local);
        let mut called: Vec<PeerId> = Vec::new();
        while let Some(t) = tier.filter(|t| *t <= s.config.max_tier) {
            called.extend(s.peers.in_tier(t).into_iter().cloned());
            tier = t.next();
        }
        called.truncate(MAX_LEAVE_CALLS);
        tracing::debug!(agent = %s.me, peers = called.len(), "leaving: calling for thieves");
        for to in called {
            s.stats.work_hints_sent += 1;
            s.send(to, Message::WorkAvailable);
        }
    }

    /// Whether this agent steals at all now (NSp2p: its node is lightly loaded; NSc2c: it is
    /// a manager, or a member that gathers for itself). A fully loaded NSp2p pool therefore
    /// sends nothing.
    fn may_steal(&self, s: &Shared, cluster: &impl ClusterRole) -> bool {
        if s.leaving.is_some() {
            return false;
        }
        match s.config.topology {
            Topology::PeerToPeer => node_is_light(s),
            Topology::ClusterToCluster => {
                (cluster.is_manager(s) && !s.peers.is_empty())
                    || self.gathers_for_itself(s, cluster)
            }
        }
    }

    /// NSc2c, gathering ([`Config::with_gather`]): a member whose node is lightly loaded
    /// sends partner steals for its own ranks, as an NSp2p agent does, beside its manager's
    /// for the cluster; the partner's manager decides and orders the move as for any
    /// steal. Work steals between clusters stay the managers'.
    ///
    /// Why: a manager sends one steal at a time for its whole cluster, so a pool whose
    /// jobs start spread over far nodes gathered slowly: at 100 simulated nodes on the
    /// Internet-like network (seeds 1-32) the jobs' latency an iteration fell from about
    /// 250 ms to 100 ms in 4 minutes under NSc2c and to 20 ms under NSp2p, and NSc2c
    /// reached 0.61 of the oracle in the first ten minutes (NSp2p 0.86). With its members
    /// asking too: 0.838 -> 0.873 over the hour, and 0.829 -> 0.903 at 1,000 nodes (seeds
    /// 1-4), with as many messages (docs/results-log.md, 2026-12-07).
    fn gathers_for_itself(&self, s: &Shared, cluster: &impl ClusterRole) -> bool {
        s.config.gather
            && s.config.topology == Topology::ClusterToCluster
            && s.leaving.is_none()
            && !cluster.is_manager(s)
            && node_is_light(s)
    }

    fn beneficiary(
        &self,
        s: &Shared,
        cluster: &impl ClusterRole,
        now: Instant,
    ) -> Option<Beneficiary> {
        if !self.may_steal(s, cluster) {
            return None;
        }
        match s.config.topology {
            Topology::PeerToPeer => s.myself(),
            Topology::ClusterToCluster => cluster.lightest_member(s, now),
        }
    }

    /// Sends a work steal for `b` to a random peer of the first tier from `from` on (up to
    /// the configured limit) that has peers; ends the round when none has.
    fn send_steal(
        &mut self,
        s: &mut Shared,
        now: Instant,
        b: Beneficiary,
        from: Option<LatencyTier>,
    ) {
        let mut tier = from;
        while let Some(t) = tier.filter(|t| *t <= s.config.max_tier) {
            let to = s
                .peers
                .choose_in_tier_except(t, &[&b.peer], &mut s.rng)
                .cloned();
            if let Some(to) = to {
                self.steal_from(s, now, b, to, t);
                return;
            }
            tier = t.next();
        }
        // No tier gave work (or had peers): wait, longer each time.
        s.stats.steal_rounds_failed += 1;
        self.thief = Thief::Idle {
            next_round: now + self.backoff,
        };
        self.backoff = (self.backoff * 2).min(s.config.max_steal_backoff);
    }

    /// Sends one work steal for `b` to `to`, a peer of tier `tier`.
    fn steal_from(
        &mut self,
        s: &mut Shared,
        now: Instant,
        b: Beneficiary,
        to: PeerId,
        tier: LatencyTier,
    ) {
        let id = MessageId(s.fresh_id());
        tracing::debug!(agent = %s.me, %to, ?tier, %id, "work steal");
        self.thief = Thief::Stealing {
            id,
            next: tier.next(),
            deadline: now + s.config.steal_timeout,
        };
        s.stats.steals_sent += 1;
        // Our RTTs go with the packet only when we steal for ourselves (an NSc2c manager
        // does not know its member's).
        let rtts = if b.peer == s.me {
            s.host_rtts()
        } else {
            Arc::default()
        };
        let steal = Steal {
            id,
            origin: s.me.clone(),
            source: b,
            ttl: s.config.rrp_ttl,
            tier,
            rtts,
        };
        s.send(to, steal.into_message());
    }

    /// Gathering a job ([`Config::with_gather`]): the agent to send this round's partner
    /// steal to, its host, and the node that would receive the work (NSp2p and an NSc2c
    /// member: this node; an NSc2c manager: the member of its cluster whose ranks' partner
    /// it is, see `Cluster::partner_steal_target`). `None` when no partner steal is due.
    ///
    /// Why: work steals go to peers of the thief's table, which holds its nearest agents,
    /// and givers give only to those of theirs. A job whose ranks started on far nodes
    /// therefore never gathers: a node near one rank is seldom near the others, and a far
    /// partner's node never hears the steals of a light node that runs a rank of its job
    /// (docs/results-log.md, "Scale": the oracle that gathers jobs led NSp2p by 0.46 to 0.88 on
    /// the Internet-like network).
    fn partner_steal_target(
        &mut self,
        s: &Shared,
        cluster: &impl ClusterRole,
        now: Instant,
    ) -> Option<(PeerId, HostName, Beneficiary)> {
        if !s.config.gather {
            return None;
        }
        self.partners_asked
            .retain(|_, at| now.saturating_duration_since(*at) < PARTNER_STEAL_RETRY);
        let (host, b) = if cluster.is_manager(s) {
            cluster.partner_steal_target(s, self, now)?
        } else {
            let gathering = match (s.node, s.config.entity_cores) {
                (Some(node), Some(cores)) => decision::gathering_jobs(&node, &s.entities, cores),
                _ => Vec::new(),
            };
            let (_, host) =
                self.farthest_partner(s, &s.entities, &gathering, |h| s.rtt_to_host(h))?;
            (host.clone(), s.myself()?)
        };
        let peer = s.hosts.holder(&host)?.clone();
        Some((peer, host, b))
    }

    /// Of the hosts `entities` exchange with, those beyond the local tier (as
    /// `rtt_to_host` gives them: this agent's RTTs for its own entities, a member's own for
    /// an NSc2c member's; at any latency for entities of the jobs in `gathering`) whose agent
    /// announced its host here and was not asked within [`PARTNER_STEAL_RETRY`]: the one
    /// whose latency costs its entity most (exchanges per second times RTT), with that cost.
    ///
    /// A node that gathers a job ([`decision::gathering_jobs`]) asks near partners too:
    /// the job's far pairs may be between other nodes, all near this one (traced at 1,000
    /// nodes: gatherers with every partner within 10 ms never asked, and their jobs stayed
    /// split over nodes 300 ms apart).
    pub(crate) fn farthest_partner<'e>(
        &self,
        s: &Shared,
        entities: &'e [EntityProfile],
        gathering: &[JobId],
        rtt_to_host: impl Fn(&HostName) -> Option<f64>,
    ) -> Option<(f64, &'e HostName)> {
        let local = LOCAL_MAX_RTT.as_secs_f64();
        let mut best: Option<(f64, &HostName)> = None;
        for (e, p) in entities
            .iter()
            .flat_map(|e| e.partners.iter().map(move |p| (e, p)))
        {
            if p.host == s.host || self.partners_asked.contains_key(&p.host) {
                continue;
            }
            let near_counts = gathering.contains(&e.id.job);
            let Some(rtt) = rtt_to_host(&p.host).filter(|r| near_counts || *r > local) else {
                continue;
            };
            let cost = p.exchanges_per_sec * rtt;
            // NaN and 0 rates are skipped; ties go to the first host in name order.
            let better =
                cost > 0.0 && best.is_none_or(|(c, h)| cost > c || (cost == c && p.host < *h));
            if better && s.hosts.holder(&p.host).is_some() {
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
    fn partner_steal(
        &mut self,
        s: &mut Shared,
        now: Instant,
        b: Beneficiary,
        to: PeerId,
        host: HostName,
    ) {
        let id = MessageId(s.fresh_id());
        tracing::debug!(agent = %s.me, %to, %host, %id, "partner steal");
        let next = match s.config.topology {
            Topology::PeerToPeer => LatencyTier::Local,
            Topology::ClusterToCluster => LatencyTier::Regional,
        };
        self.thief = Thief::Stealing {
            id,
            next: Some(next),
            deadline: now + s.config.steal_timeout,
        };
        s.stats.steals_sent += 1;
        s.stats.partner_steals_sent += 1;
        self.partners_asked.insert(host, now);
        let peers = s.host_rtts();
        let mut rtts: Vec<HostRtt> = peers.iter().cloned().collect();
        let mut partners: Vec<(&HostName, &f64)> = s
            .partner_rtts
            .iter()
            .filter(|(h, _)| !peers.iter().any(|r| r.host == **h))
            .collect();
        // Nearest first, as the peers' (the list is cut at its bound).
        partners.sort_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(b.0)));
        rtts.extend(
            partners
                .into_iter()
                .map(|(host, rtt)| HostRtt::from_secs(host.clone(), *rtt)),
        );
        rtts.truncate(MAX_RTTS);
        let steal = Steal {
            id,
            origin: s.me.clone(),
            source: b,
            ttl: 1,
            tier: LatencyTier::Local,
            rtts: rtts.into(),
        };
        if s.config.topology == Topology::ClusterToCluster {
            self.redirectable = Some(steal.clone());
        }
        s.send(to, steal.into_message());
    }

    /// NSc2c: the member a partner steal of ours went to names its manager: send the same
    /// steal there (once per partner steal), if we still wait for its answer.
    pub(crate) fn on_steal_redirect(
        &mut self,
        s: &mut Shared,
        now: Instant,
        from: &PeerId,
        id: MessageId,
        manager: PeerId,
    ) {
        let waiting = matches!(self.thief, Thief::Stealing { id: current, .. } if current == id);
        let Some(steal) = self.redirectable.take_if(|s| s.id == id) else {
            return;
        };
        if !waiting || manager == s.me || manager == *from {
            return;
        }
        tracing::debug!(agent = %s.me, %from, %manager, %id, "partner steal redirected to the member's manager");
        if let Thief::Stealing { deadline, .. } = &mut self.thief {
            *deadline = now + s.config.steal_timeout;
        }
        s.stats.steals_sent += 1;
        s.send(manager, steal.into_message());
    }

    /// NSp2p: a peer that refused our steal now has work. Steal from it at once if we are
    /// between rounds and still light; the back-off restarts from its shortest pause.
    ///
    /// Also the answer to a steal of ours that reached a giver through another agent
    /// ([`StealRefusal::Forwarded`]): then we are still stealing, and ask the giver directly.
    /// NSc2c managers take hints too (managers steal on behalf of their members).
    pub(crate) fn on_work_available(
        &mut self,
        s: &mut Shared,
        cluster: &impl ClusterRole,
        now: Instant,
        from: PeerId,
    ) {
        let may_take_hints = match s.config.topology {
            Topology::PeerToPeer => true,
            Topology::ClusterToCluster => cluster.is_manager(s),
        };
        if !may_take_hints
            || matches!(self.thief, Thief::Receiving { .. })
            || self
                .hinted_at
                .is_some_and(|at| now < at + s.config.steal_period)
        {
            return;
        }
        let Some(tier) = s.peers.tier(&from) else {
            return;
        };
        if tier > s.config.max_tier {
            return;
        }
        let Some(b) = self.beneficiary(s, cluster, now) else {
            return;
        };
        tracing::debug!(agent = %s.me, %from, "work available: stealing now");
        self.hinted_at = Some(now);
        self.backoff = s.config.steal_backoff;
        self.steal_from(s, now, b, from, tier);
    }

    /// NSp2p: if a thief refused here lately would now get work (this node got loaded), tell
    /// it, so it steals at once rather than after its back-off. One hint per refusal, to the
    /// newest such thief: the steal it sends is decided afresh like any other.
    pub(crate) fn offer_work(&mut self, s: &mut Shared, now: Instant) {
        if s.config.topology != Topology::PeerToPeer
            || s.leaving.is_some()
            || s.outgoing.is_some()
            || self.refused.is_empty()
            || !s.node_is_fresh()
        {
            return;
        }
        let Some(node) = s.node else {
            return;
        };
        self.refused
            .retain(|(_, at)| now.saturating_duration_since(*at) < REFUSED_THIEF_MEMORY);
        let policy = s.policy(now);
        let pick = self.refused.iter().rposition(|(thief, _)| {
            decision::select(
                &policy,
                &node,
                &s.entities,
                thief.destination(),
                s.config.max_group,
            )
            .is_some()
        });
        if let Some((thief, _)) = pick.and_then(|i| self.refused.remove(i)) {
            tracing::debug!(agent = %s.me, to = %thief.peer, "telling a refused thief that work is available");
            s.stats.work_hints_sent += 1;
            s.send(thief.peer, Message::WorkAvailable);
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
    fn escalate(&mut self, s: &mut Shared, cluster: &impl ClusterRole, now: Instant) {
        let Thief::Stealing { next, .. } = self.thief else {
            return;
        };
        match self.beneficiary(s, cluster, now) {
            Some(b) => self.send_steal(s, now, b, next),
            None => {
                self.thief = Thief::Idle {
                    next_round: now + s.config.steal_period,
                }
            }
        }
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

    /// A work steal from `from`: its own packet back (the next tier), or a forged one
    /// (refused); in NSp2p, work given if this node gains by it (or a malleable job grown
    /// onto the thief), else passed on. In NSc2c the checked steal is returned for the
    /// cluster to answer ([`super::c2c::Cluster::work_steal`]).
    pub(crate) fn on_work_steal(
        &mut self,
        s: &mut Shared,
        resizing: &mut Resizing,
        cluster: &impl ClusterRole,
        now: Instant,
        from: PeerId,
        steal: Steal,
    ) -> Option<ClusterSteal> {
        if steal.origin == s.me {
            // Our own packet came back round: nobody on the way gave work.
            if matches!(self.thief, Thief::Stealing { id, .. } if id == steal.id) {
                self.escalate(s, cluster, now);
            }
            return None;
        }
        let checked = check_steal(s, cluster, &from, &steal);
        if let Err(why) = &checked {
            if !matches!(why, StealRefusal::Forwarded { .. }) {
                // A forged request: neither acted on nor passed on.
                refuse_steal(s, &from, why);
                return None;
            }
        } else {
            // Its origin sent it (for itself, or as the NSc2c manager of the source), for
            // the host the source announced: what `ios-agent status` shows of that node.
            s.learn_load(
                now,
                &steal.source.peer,
                &steal.source.host,
                steal.source.profile,
                false,
            );
        }
        let first_time = self.remember(&steal.origin, steal.id);
        match s.config.topology {
            Topology::PeerToPeer => {
                if first_time && steal.source.peer != s.me && s.outgoing.is_none() {
                    if let Some(node) = s.own_profile() {
                        // The communication term, when our entities' partners are known: our
                        // RTTs against those the thief sent.
                        let near = s.knows_partners().then(|| StealLatencies::new(s, &steal));
                        let views = near.as_ref().map(|n| n.views(&s.host, &steal.source.host));
                        // Not back where it came from, unless this node is leaving; only
                        // ranks with partners there for a partner steal.
                        let leaving = s.leaving.is_some();
                        let may_go = for_thief(
                            s,
                            s.may_go_to(now, &s.entities, &steal.source.host, leaving),
                            &steal.source,
                            leaving,
                        );
                        let in_table = s.peers.get(&steal.source.peer).is_some();
                        let jobs_here = node.job_offers(&s.entities);
                        let plan = decision::select_near(
                            &Policy {
                                jobs_here: &jobs_here,
                                gather_in_one_move: true,
                                keep_near_partners: s.config.resizes,
                                ..s.policy(now)
                            },
                            &node,
                            &may_go,
                            steal.source.destination(),
                            s.config.max_group,
                            views.as_ref().map(|(a, b)| (a, b)),
                        );
                        // Not a thief refused only by the rules of the communication term
                        // (a job held together here, malleable ranks kept near their
                        // partners): `offer_work`, which weighs without the partners, would
                        // hint it at every profile and refuse its steal again (at 100
                        // simulated nodes the work-available hints tripled with malleable
                        // jobs kept near their partners).
                        let held_near_partners = plan.is_none()
                            && views.is_some()
                            && decision::select(
                                &s.policy(now),
                                &node,
                                &s.entities,
                                steal.source.destination(),
                                s.config.max_group,
                            )
                            .is_some();
                        // A malleable job whose rank 0 runs here may grow onto the thief
                        // instead, when that gains more than the move.
                        if let Some(grow) = resizing
                            .grow_for_steal(s, now, &steal.source, &steal.rtts)
                            .filter(|g| g.beats_move(plan.as_ref()))
                        {
                            if checked.is_err() {
                                s.stats.grow_offers_refused += 1;
                                if hint_origin(s, &steal) {
                                    return None;
                                }
                                forward(s, from, steal, LatencyTier::Local);
                                return None;
                            }
                            // The best offer of a steal period, not the first.
                            match resizing.weigh_offer(s, now, &steal.source, &grow) {
                                resizing::OfferChoice::Grow => {
                                    resizing::start_grow(
                                        s,
                                        now,
                                        grow,
                                        &steal.source.host,
                                        steal.origin,
                                        steal.id,
                                    );
                                }
                                resizing::OfferChoice::Hold(hint) => {
                                    if let Some(best) = hint {
                                        s.stats.work_hints_sent += 1;
                                        s.send(best, Message::WorkAvailable);
                                    }
                                    forward(s, from, steal, LatencyTier::Local);
                                }
                            }
                            return None;
                        }
                        if let Some(plan) = plan {
                            if checked.is_err() {
                                if hint_origin(s, &steal) {
                                    return None;
                                }
                                forward(s, from, steal, LatencyTier::Local);
                                return None;
                            }
                            tracing::info!(
                                agent = %s.me,
                                to = %steal.source.peer,
                                gain = plan.gain.gain,
                                thief_idle = steal.source.profile.free_cores(),
                                thief_job_offers = ?steal.source.job_offers,
                                "giving work"
                            );
                            let migration = MigrationId(s.fresh_id());
                            let within_hold_down = s.within_hold_down(&s.entities, &plan, leaving);
                            s.start_migration(
                                now,
                                migration,
                                plan.entities.clone(),
                                &steal.source,
                                Some(steal.origin.clone()),
                            );
                            s.send(
                                steal.origin,
                                Message::StealAccepted {
                                    id: steal.id,
                                    migration,
                                    entities: plan.entities,
                                    from_host: Some(s.host.clone()),
                                    within_hold_down,
                                },
                            );
                            return None;
                        }
                        // The thief is its own beneficiary in NSp2p: hint it if this node
                        // gets loaded later (only a thief that asked itself, and of the peer
                        // table: a hint from elsewhere is not taken).
                        if checked.is_ok() && in_table && !held_near_partners {
                            self.remember_refusal(now, &steal.source);
                        }
                        // A home agent re-tells an idle thief when a grow onto it passes
                        // later, also one whose steal a rank's agent passed here: it is a
                        // peer of ours (a forwarded steal's origin is, or it was refused
                        // above), and a hint only makes it ask over its own connection.
                        if steal.source.peer == steal.origin {
                            resizing.note_refused_thief(s, now, &steal.source, &steal.rtts);
                        }
                    }
                }
                forward(s, from, steal, LatencyTier::Local);
                None
            }
            Topology::ClusterToCluster => Some(ClusterSteal {
                from,
                steal,
                first_time,
                direct: checked.is_ok(),
            }),
        }
    }
}

/// Whether an entity here, or of a member this NSc2c manager manages, exchanges with a
/// process on `host`.
pub(crate) fn is_partner_host(s: &Shared, cluster: &impl ClusterRole, host: &HostName) -> bool {
    s.entities
        .iter()
        .any(|e| e.partners.iter().any(|p| p.host == *host))
        || cluster.members_exchange_with(s, host)
}

/// Whether this agent's node is lightly loaded, by a fresh profile.
fn node_is_light(s: &Shared) -> bool {
    s.node_is_fresh()
        && s.node
            .is_some_and(|n| n.is_lightly_loaded(s.config.light_threshold))
}

/// Of `entities`, those a steal for `thief` may take: none that left the thief's node
/// lately (its steal lists them), unless their node is `leaving`, and for a partner
/// steal from an agent outside our peer table only those with partners on its node
/// (`Agent::check_steal`).
pub(crate) fn for_thief<'e>(
    s: &Shared,
    entities: Cow<'e, [EntityProfile]>,
    thief: &Beneficiary,
    leaving: bool,
) -> Cow<'e, [EntityProfile]> {
    let partner_steal = s.peers.get(&thief.peer).is_none();
    let may = |e: &EntityProfile| {
        (leaving || !thief.departed.contains(&e.id))
            && (!partner_steal || e.partners.iter().any(|p| p.host == thief.host))
    };
    if entities.iter().all(may) {
        return entities;
    }
    Cow::Owned(entities.iter().filter(|e| may(e)).cloned().collect())
}

/// Checks that work may move on `steal`, received from `from`: it comes from its origin
/// itself (the transport authenticated `from`), its beneficiary is the origin (NSp2p) or
/// a known agent (NSc2c: a member the origin manages), and the host it names is the one
/// that agent announced itself (`Agent::handle_peer_host`).
pub(crate) fn check_steal(
    s: &Shared,
    cluster: &impl ClusterRole,
    from: &PeerId,
    steal: &Steal,
) -> Result<(), StealRefusal> {
    if *from != steal.origin {
        if s.peers.get(&steal.origin).is_none() {
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
    if s.config.topology == Topology::PeerToPeer && source.peer != steal.origin {
        return Err(StealRefusal::NotOrigin {
            beneficiary: source.peer.clone(),
            origin: steal.origin.clone(),
        });
    }
    // A partner steal comes from outside the peer table: for a host where a partner of
    // an entity here (or of a member's, for an NSc2c manager) runs, which wants that
    // entity nearer (only such entities are weighed for it, see `for_thief`).
    let partner_steal = || is_partner_host(s, cluster, &source.host);
    if s.peers.get(&source.peer).is_none() && !partner_steal() {
        return Err(StealRefusal::UnknownAgent {
            beneficiary: source.peer.clone(),
        });
    }
    match s.hosts.get(&source.peer) {
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
pub(crate) fn hint_origin(s: &mut Shared, steal: &Steal) -> bool {
    if s.peers.get(&steal.origin).is_none() {
        return false;
    }
    tracing::debug!(agent = %s.me, origin = %steal.origin, "forwarded steal: telling its origin to ask here");
    s.stats.work_hints_sent += 1;
    s.send(steal.origin.clone(), Message::WorkAvailable);
    true
}

/// Counts and logs a refused steal (debug level: a hostile peer must not fill the log).
pub(crate) fn refuse_steal(s: &mut Shared, from: &PeerId, why: &StealRefusal) {
    tracing::debug!(agent = %s.me, %from, "work steal refused: {why}");
    s.stats.steals_refused += 1;
}

/// Passes a work steal on to a random peer of `tier` (TTL decremented), or tells the
/// origin it is exhausted. An idle thief's steal goes to the home agent of a malleable
/// job with a rank here instead, when there is one (`Agent::grow_home`).
pub(crate) fn forward(s: &mut Shared, from: PeerId, steal: Steal, tier: LatencyTier) {
    let exclude = [&from, &steal.origin, &steal.source.peer, &s.me];
    let next = resizing::grow_home(s, &steal.source, &exclude).or_else(|| {
        s.peers
            .choose_in_tier_except(tier, &exclude, &mut s.rng)
            .cloned()
    });
    pass_on(s, steal, next);
}

/// Sends the steal on to `next` with its TTL decremented, or reports exhaustion.
pub(crate) fn pass_on(s: &mut Shared, steal: Steal, next: Option<PeerId>) {
    match next {
        Some(to) if steal.ttl > 1 => {
            s.stats.steals_forwarded += 1;
            let steal = Steal {
                ttl: steal.ttl - 1,
                ..steal
            };
            s.send(to, steal.into_message());
        }
        _ => s.send(steal.origin, Message::StealExhausted { id: steal.id }),
    }
}
