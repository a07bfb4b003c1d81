//! NSc2c (section 5.1 and 5.2, "Cluster-to-cluster load balancing"), enabled by
//! [`Topology::ClusterToCluster`]: the `Cluster` of an agent, which takes what both
//! strategies share as `&mut Shared` and uses work stealing (`agent/stealing.rs`) between
//! clusters.
//!
//! - **Clusters** are latency-defined: an agent's cluster is itself plus its alive peers of
//!   the local tier. Clusters merge when a peer comes within local latency and split when
//!   one drifts out of it or dies.
//! - **Election** by seniority, then votes (issue 12, item 6: the lowest peer id could be
//!   won by generating keys until one sorts low). Every [`Message::Heartbeat`] carries the
//!   sender's vote, the manager it elected. Each agent ranks the candidates (itself and the
//!   alive local peers) by what it observed itself: its own start, and when it first heard
//!   each peer (continuously since). Only the *senior generation* may win: candidates first
//!   seen within `Agent::seniority_grace` of the earliest. Among them wins the one with the
//!   most votes (the alive peers' and this agent's own), then a peer that votes for itself
//!   (it does not take this agent as its senior, and may have been there first: a peer heard
//!   from this agent's first moment cannot be ordered by this agent), then the lowest id. A
//!   newcomer is junior in the eyes of every agent that was there before it, whatever its
//!   id, so it cannot take over an existing cluster; ids decide only among agents that
//!   started together. A candidate outside the senior generation wins only with strictly
//!   more votes than the best senior one: so a larger cluster absorbs a smaller one that
//!   comes within local latency. Agents alone that meet after their first seconds pair up
//!   instead of tying forever at one vote each: an agent alone (it manages nobody and no
//!   senior peer beats it) follows the lowest junior id below its own among juniors alone
//!   too, as their heartbeats say (a heartbeat carries how many peers vote for its sender,
//!   near the receiver or not: a junior whose members the receiver does not hear has them
//!   elsewhere, maybe far). The election is asked on every heartbeat, but re-runs only
//!   when one of its inputs changed since its last run (a peer heard anew or again after
//!   timing out, a vote, a tier, the manager), or when a peer it counted or the manager may
//!   have timed out (its only dependence on time): otherwise it would keep the manager and
//!   change nothing, and re-running it over up to 64 peers on every heartbeat was most of
//!   the simulator's time at 10,000 nodes.
//! - **Upkeep bounded per node** (issue 15). Heartbeating every local peer every period cost
//!   each node one message per local peer and second (about 40 in a cluster of 40, up to
//!   the peer table's size), so the cost grew with the cluster. Instead, each heartbeat
//!   period:
//!   - a member sends a heartbeat to its manager, and the manager one to each member that
//!     votes for it; a manager's poll ([`Message::ProfileRequest`]) and a member's reply
//!     stand in for them in the period they go. These links carry the member timeout:
//!     failover is as fast as before (the member timeout plus a period);
//!   - every agent sends one heartbeat to [`GOSSIP_FANOUT`] other local peers, in id order,
//!     so every local peer hears its vote at least once per round of at most
//!     `max_peers / GOSSIP_FANOUT` periods. Votes and seniority of peers outside an agent's
//!     own links are kept for `Agent::gossip_timeout`, which covers a round;
//!   - in an agent's first seniority grace it still heartbeats every local peer each period,
//!     once per agent's life, so that agents that start together see all votes at once and
//!     elect as the rules say, and a newcomer learns the votes around it at once;
//!   - a heartbeat from a peer not heard yet is answered at once, a vote for a local peer
//!     not heard yet makes the agent call it (once per member timeout), and an agent that
//!     changes its vote tells its new and its old manager at once.
//!
//!   So a node sends about 1 + 1 + [`GOSSIP_FANOUT`] messages per period (to or from its
//!   manager, the poll and its reply, the gossip turn) whatever the size of its cluster: 2.9
//!   per second in a cluster of 40, 2.7 in a cluster of 10 (the unit tests). Chosen over a
//!   bounded *random* gossip, whose gaps between two heartbeats of one peer have no bound
//!   (so timeouts, hence failover, would grow with the cluster), and over a heartbeat period
//!   that grows with the cluster (failover would too). The price: a vote of a peer outside
//!   an agent's links may be up to a round old, so merges of clusters and votes moving after
//!   a failover take up to a round to be seen by everyone (about a minute with 64 peers), and
//!   a gone peer's vote lingers up to the gossip timeout or until the peer table drops it.
//!   It assumes the agents of a pool share `max_peers` and the heartbeat period.
//! - **Succession**: a manager names in its heartbeats its successor: among its members of
//!   the senior generation (as it heard them arrive), the lowest id. A manager unheard for
//!   the member timeout is gone for its members, and every member that followed it takes
//!   the successor it named, if alive: members that arrived later cannot order the older
//!   ones themselves, the manager could.
//! - **Intra-cluster balancing**: the manager polls the members that vote for it
//!   ([`Message::ProfileRequest`]) each profile period, and from the replies moves entities
//!   from the node furthest above its share to the node furthest below, towards
//!   `n_1 / n_2 = sum_i w_i r_{i,1} / sum_i w_i r_{i,2}` ([`crate::decision::balance`]),
//!   one [`Message::MoveOrder`] at a time.
//! - **Inter-cluster balancing**: managers are NSp2p peers of each other. A manager with a
//!   lightly loaded member (and nothing to balance inside) steals work on the member's behalf
//!   from regional, then national, then global peers; a member receiving such a packet
//!   relays it to its manager, which compares its heaviest nodes with the packet's source
//!   ([`crate::decision::select`]) and orders the move, or forwards the packet.
//! - **Gathering** ([`Config::with_gather`](super::config::Config::with_gather)): a manager
//!   sends partner steals for its members' ranks to the agents of their far partners, and a
//!   light member sends its own for its ranks as well (`Stealing::gathers_for_itself`): one
//!   steal at a time per cluster gathered a pool of spread jobs too slowly. Either way the
//!   partner's manager decides and orders the move.

mod election;

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use pcm_proto::{HostName, JobId};

use super::config::Topology;
use super::resizing::{self, Resizing};
use super::shared::{Beneficiary, Shared};
use super::stealing::{self, ClusterRole, ClusterSteal, StealLatencies, Stealing};
use crate::decision::{self, Destination, NodeView, Policy};
use crate::message::{HostRtt, Message, MessageId, MigrationId, MAX_ENTITIES, MAX_RTTS};
use crate::model::{
    EntityId, EntityProfile, JobOffer, NodeProfile, RttLookup, RttView, Unmeasured,
    DEFAULT_UNKNOWN_RTT,
};
use crate::tier::{IdMap, LatencyTier, PeerId, LOCAL_MAX_RTT};

#[derive(Debug)]
struct Heard {
    /// Last message of the peer's that proves it alive: a heartbeat, and between a member
    /// and its manager also a poll or its reply.
    at: Instant,
    /// First heartbeat of the current run of heartbeats (reset when the peer times out):
    /// the peer's seniority as this agent saw it, which nobody can claim or choose.
    first: Instant,
    vote: PeerId,
    /// Whether the peer is in the local tier of the peer table. Every heard peer was local
    /// when first heard (heartbeats of others are ignored), and a peer's tier changes only
    /// with the peer table, which tells the cluster (`Agent::peers_changed` refreshes
    /// this). Kept here because the election checks every heard peer on every heartbeat,
    /// and a peer-table look-up each was a third of the simulator's time with NSc2c on the
    /// Internet-like network at 1,000 nodes (up to 64 local peers each).
    local: bool,
    /// How many peers vote for it, as its last heartbeat said (near this agent or not).
    members: u32,
}

#[derive(Debug)]
struct View {
    member: MemberView,
    at: Instant,
}

/// What a member reports of itself ([`Message::ProfileReply`]).
#[derive(Debug)]
pub(crate) struct MemberView {
    pub(crate) host: HostName,
    pub(crate) node: NodeProfile,
    pub(crate) entities: Vec<EntityProfile>,
    pub(crate) leaving: bool,
    /// Entities that left the member's node lately (`Agent::departed`).
    pub(crate) departed: Vec<EntityId>,
    /// Hosts the member measured within the local tier (`Agent::near_hosts`).
    pub(crate) near_hosts: Vec<HostName>,
    /// The member's RTTs to its entities' partner hosts.
    pub(crate) partner_rtts: Vec<HostRtt>,
}

/// One node of the manager's cluster, as it decides with it (its own node included).
struct ClusterNode<'a> {
    peer: PeerId,
    host: HostName,
    node: NodeProfile,
    entities: &'a [EntityProfile],
    leaving: bool,
    departed: Vec<EntityId>,
    /// Hosts the node measured within the local tier.
    near_hosts: Cow<'a, [HostName]>,
    /// A member's RTTs to its entities' partner hosts, as it reported them; none for the
    /// manager's own node (its own RTTs are at hand).
    partner_rtts: &'a [HostRtt],
}

/// Which nodes of a cluster are near each other: one of the two measured the other within
/// the local tier (its `near_hosts`), indexed as the views. Built once per decision, one
/// look-up per reported host.
struct Nearness(Vec<Vec<bool>>, HashMap<HostName, usize>);

impl Nearness {
    fn of(cluster: &[ClusterNode<'_>]) -> Self {
        let index: HashMap<&HostName, usize> = cluster
            .iter()
            .enumerate()
            .map(|(i, v)| (&v.host, i))
            .collect();
        let mut near = vec![vec![false; cluster.len()]; cluster.len()];
        for (i, v) in cluster.iter().enumerate() {
            near[i][i] = true;
            for &j in v.near_hosts.iter().filter_map(|h| index.get(h)) {
                near[i][j] = true;
                near[j][i] = true;
            }
        }
        let index = index.into_iter().map(|(h, i)| (h.clone(), i)).collect();
        Nearness(near, index)
    }

    /// Whether the `i`th and the `j`th node are near each other.
    fn near(&self, i: usize, j: usize) -> bool {
        self.0[i][j]
    }

    /// Whether the `i`th node is near each of the nodes of the cluster that `hosts` names
    /// (hosts outside the cluster are not known here).
    fn near_all<'h>(&self, i: usize, mut hosts: impl Iterator<Item = &'h HostName>) -> bool {
        hosts.all(|h| self.1.get(h).is_none_or(|&j| self.0[i][j]))
    }
}

/// Where each member of a cluster would gather a job ([`JobOffer::place`]): the member and
/// the members near it ([`Nearness`]), with the job's entities on them and the
/// idle cores of those not leaving. Counted once per decision, then given to each member's
/// offers ([`ClusterJobs::offers`]).
///
/// Why near members and not the whole cluster: a cluster is the members within the local
/// tier of its manager, and on a network without structure two of them may be far apart
/// (docs/results-log.md, "Scale", 2026-11-29: with the whole cluster as the place, NSc2c fell
/// from 0.65 to 0.57 of the oracle at 1,000 nodes on the Internet-like network).
struct ClusterJobs<'a> {
    /// Per member, in the order of the views: each job's entities in its place, and the
    /// place's idle cores.
    places: Vec<(std::collections::BTreeMap<&'a JobId, u32>, f64)>,
}

impl<'a> ClusterJobs<'a> {
    fn of(cluster: &[ClusterNode<'a>]) -> Self {
        let near = Nearness::of(cluster);
        let places = (0..cluster.len())
            .map(|i| {
                let mut counts = std::collections::BTreeMap::new();
                let mut room = 0.0;
                let place = cluster.iter().enumerate().filter(|(j, _)| near.near(i, *j));
                for (_, u) in place {
                    for e in u.entities {
                        *counts.entry(&e.id.job).or_default() += 1;
                    }
                    if !u.leaving {
                        room += u.node.free_cores();
                    }
                }
                (counts, room)
            })
            .collect();
        ClusterJobs { places }
    }

    /// What `member` (the `index`th of the views) offers jobs ([`NodeProfile::job_offers`]),
    /// with its place's share in gathering each, also for the jobs its place runs and the
    /// member does not (those offered the member's idle cores). A job split between
    /// clusters then gathers in the place with room for all of it, on any of its members
    /// (traced at 1,000 nodes, Grid-like: jobs half in one fast cluster and half in another,
    /// no node of either with cores for all eight ranks).
    fn offers(&self, index: usize, member: &ClusterNode<'_>) -> Vec<JobOffer> {
        let mut offers = member.node.job_offers(member.entities);
        let Some((counts, room)) = self.places.get(index) else {
            return offers;
        };
        for (&job, &n) in counts {
            match offers.iter_mut().find(|o| o.job == *job) {
                Some(o) => {
                    o.place_ranks = n;
                    o.place_room = *room;
                }
                None => offers.push(JobOffer {
                    job: job.clone(),
                    cores: member.node.free_cores(),
                    ranks: 0,
                    place_ranks: n,
                    place_room: *room,
                }),
            }
        }
        offers.truncate(MAX_ENTITIES);
        offers
    }
}

/// A move order as received.
#[derive(Debug)]
pub(crate) struct Order {
    pub(crate) migration: MigrationId,
    pub(crate) entities: Vec<EntityId>,
    pub(crate) to: PeerId,
    pub(crate) to_host: HostName,
    pub(crate) notify: PeerId,
}

/// Local peers outside its own manager-member links that an agent sends a heartbeat to each
/// heartbeat period, in turn (`Agent::gossip_timeout`).
pub const GOSSIP_FANOUT: usize = 1;

/// NSc2c state of one agent.
#[derive(Debug)]
pub(crate) struct Cluster {
    /// When this agent started: its own seniority.
    joined: Instant,
    /// The successor the manager last named in its heartbeats.
    successor: Option<PeerId>,
    heard: IdMap<PeerId, Heard>,
    /// How many heard peers vote for this agent. Only a manager has any; the others (nearly
    /// every agent) then know that they have no members without reading every heard peer,
    /// which each heartbeat period's `Agent::cluster_members` did on every agent (5% of
    /// the simulator's time at 10,000 nodes). Kept by every change to `heard`
    /// (`Agent::heard_changed`).
    voters: usize,
    /// No heard peer times out before this instant (a lower bound of the earliest
    /// `at + gossip_timeout`; `None` while nobody is heard): a heard peer's `at` only moves
    /// forward. The heartbeat tick drops timed-out peers only once it has come, instead of
    /// reading every heard peer each period (most of `handle_timeout`'s own time at 10,000
    /// nodes, each entry a cache miss).
    heard_until: Option<Instant>,
    manager: PeerId,
    /// When this agent took its current manager: a manager it had heard only in gossip is
    /// given one member timeout from then to start its heartbeats.
    manager_since: Instant,
    /// The last local peer sent a gossip heartbeat: the round goes on after it, in id order.
    gossip_after: Option<PeerId>,
    /// Peers named in votes but not heard yet, and when this agent last called them: one
    /// call per member timeout at most.
    called: IdMap<PeerId, Instant>,
    /// Manager: when it last polled its members (the poll is their manager's heartbeat).
    polled: Option<Instant>,
    /// Member: when it last answered its manager's poll (the reply is its heartbeat).
    replied: Option<Instant>,
    next_heartbeat: Instant,
    next_poll: Instant,
    poll: Option<MessageId>,
    views: IdMap<PeerId, View>,
    pending_order: Option<(MigrationId, Instant)>,
    /// Member: a move order to an agent whose host this agent does not know yet, the
    /// manager that sent it, and until when it waits for the host (see
    /// `Agent::on_move_order`).
    awaiting_host: Option<(Order, PeerId, Instant)>,
    balancing: bool,
    standing: Standing,
    /// This agent's cluster mates within the local tier (`Agent::near_hosts`), and when
    /// they were last listed (a manager's and each member's list is refreshed at most every
    /// [`NEAR_HOSTS_REFRESH`]: listing them reads the peer table and the heard votes).
    near_hosts: (Vec<HostName>, Option<Instant>),
}

/// How often an agent lists its near cluster mates again (`Agent::near_hosts`): cluster
/// membership and RTTs change over minutes.
pub const NEAR_HOSTS_REFRESH: Duration = Duration::from_secs(30);

/// What the last election saw, so that the next one runs only if its result could differ
/// (`Agent::elect`).
#[derive(Debug)]
struct Standing {
    /// An input of the election changed since it last ran (a peer heard anew, or again after
    /// timing out, a vote, a tier, the successor named, a peer forgotten), or its last run
    /// changed the manager (and so this agent's own vote: the next run may differ).
    stale: bool,
    /// When it last ran, or was last found to stand.
    at: Instant,
    /// How many heard peers were alive then (`Agent::alive`).
    alive: usize,
    /// Before this instant none of them, nor the manager, can time out (`None`: nobody
    /// can).
    until: Option<Instant>,
}

impl Cluster {
    pub(crate) fn new(me: PeerId, now: Instant, heartbeat_period: Duration) -> Self {
        Cluster {
            joined: now,
            successor: None,
            heard: IdMap::default(),
            voters: 0,
            heard_until: None,
            manager: me,
            manager_since: now,
            gossip_after: None,
            called: IdMap::default(),
            near_hosts: (Vec::new(), None),
            polled: None,
            replied: None,
            next_heartbeat: now,
            // Heartbeats first, so that the first poll reaches the members.
            next_poll: now + heartbeat_period * 2,
            poll: None,
            views: IdMap::default(),
            pending_order: None,
            awaiting_host: None,
            balancing: false,
            standing: Standing {
                stale: true,
                at: now,
                alive: 0,
                until: None,
            },
        }
    }
}

impl Cluster {
    fn c2c(&self, s: &Shared) -> bool {
        s.config.topology == Topology::ClusterToCluster
    }

    /// NSc2c: the manager of this agent's cluster as this agent sees it (`None` in NSp2p).
    pub(crate) fn manager(&self, s: &Shared) -> Option<&PeerId> {
        self.c2c(s).then_some(&self.manager)
    }

    /// NSc2c: whether this agent is its cluster's manager.
    pub(crate) fn is_manager(&self, s: &Shared) -> bool {
        self.c2c(s) && self.manager == s.me
    }

    /// The entities of the members this manager keeps views of (none unless it manages).
    pub(crate) fn member_entities<'a>(
        &'a self,
        s: &'a Shared,
    ) -> impl Iterator<Item = &'a EntityProfile> {
        self.views
            .values()
            .filter(|_| self.is_manager(s))
            .flat_map(|v| v.member.entities.iter())
    }

    /// NSc2c: the local peers that vote for this agent as manager and were heard within the
    /// member timeout (members send to their manager every heartbeat period), sorted.
    pub(crate) fn cluster_members(&self, s: &Shared, now: Instant) -> Vec<&PeerId> {
        self.check_voters(s);
        if self.voters == 0 {
            return Vec::new();
        }
        let mut v: Vec<&PeerId> = self
            .heard
            .iter()
            .filter(|(_, h)| h.vote == s.me && self.linked(s, now, h))
            .map(|(p, _)| p)
            .collect();
        v.sort();
        v
    }

    /// NSc2c: how long a local peer that is neither this agent's manager nor its member may
    /// stay silent before it is taken as gone (its vote dropped, its seniority reset): the
    /// member timeout plus one whole gossip round of an agent with a full peer table,
    /// `max_peers / GOSSIP_FANOUT` heartbeat periods, plus one period for a peer that joins
    /// the round just behind the turn. Gone peers leave earlier when the peer table drops
    /// them (no RTT sample for the peer timeout, or a lost connection).
    pub(crate) fn gossip_timeout(&self, s: &Shared) -> Duration {
        let periods = s.config.max_peers.div_ceil(GOSSIP_FANOUT) + 1;
        let periods = u32::try_from(periods).unwrap_or(u32::MAX);
        s.config.member_timeout + s.config.heartbeat_period.saturating_mul(periods)
    }

    fn send_heartbeat(&mut self, s: &mut Shared, to: PeerId, successor: Option<PeerId>) {
        let id = MessageId(s.fresh_id());
        let manager = self.manager.clone();
        let members = u32::try_from(self.voters).unwrap_or(u32::MAX);
        s.send(
            to,
            Message::Heartbeat {
                id,
                manager,
                successor,
                members,
            },
        );
    }

    pub(crate) fn peers_changed(&mut self, s: &mut Shared, now: Instant) {
        if !self.c2c(s) {
            return;
        }
        let peers = &s.peers;
        let me = &s.me;
        let mut changed = false;
        let mut voters_gone = 0;
        self.heard.retain(|p, h| match peers.tier(p) {
            Some(tier) => {
                let local = tier == LatencyTier::Local;
                changed |= h.local != local;
                h.local = local;
                true
            }
            None => {
                changed = true;
                voters_gone += usize::from(h.vote == *me);
                false
            }
        });
        self.voters -= voters_gone;
        self.standing.stale |= changed;
        self.views.retain(|p, _| peers.get(p).is_some());
        self.elect(s, now);
    }

    /// `Agent::peers_changed` after one RTT sample that changed the peer table: only
    /// `peer` (added, or of a new tier) and the peer it `evicted` can have changed, and every
    /// other heard peer and view already agrees with the table (each change to it tells the
    /// cluster). So only those two are looked at, in place of a pass over every heard peer
    /// with a peer-table look-up each (3.5% of the simulator's time with NSc2c at 10,000
    /// nodes); the entries, the count of voters and the standing of the election end as
    /// that pass would leave them, and the election runs the same.
    pub(crate) fn peer_changed(
        &mut self,
        s: &mut Shared,
        now: Instant,
        peer: &PeerId,
        evicted: Option<&PeerId>,
    ) {
        if !self.c2c(s) {
            return;
        }
        let mut changed = false;
        if let Some(h) = self.heard.get_mut(peer) {
            let local = s.peers.tier(peer) == Some(LatencyTier::Local);
            changed |= h.local != local;
            h.local = local;
        }
        if let Some(gone) = evicted {
            if let Some(h) = self.heard.remove(gone) {
                changed = true;
                self.voters -= usize::from(h.vote == s.me);
            }
            self.views.remove(gone);
        }
        self.standing.stale |= changed;
        // Every simulation in this crate's tests checks that the two were all that changed.
        #[cfg(test)]
        {
            for (p, h) in &self.heard {
                assert_eq!(
                    Some(h.local),
                    s.peers.tier(p).map(|t| t == LatencyTier::Local),
                    "{}: heard peer {p} disagrees with the peer table",
                    s.me
                );
            }
            for p in self.views.keys() {
                assert!(s.peers.get(p).is_some(), "{}: a view of a gone peer", s.me);
            }
        }
        self.elect(s, now);
    }

    pub(crate) fn forget(&mut self, s: &mut Shared, peer: &PeerId) {
        if let Some(h) = self.heard.remove(peer) {
            self.heard_changed(s, Some(&h.vote), None);
            self.standing.stale = true;
        }
        self.views.remove(peer);
        self.called.remove(peer);
    }

    pub(crate) fn timeout(&self, s: &Shared) -> Option<Instant> {
        if !self.c2c(s) {
            return None;
        }
        // Every heartbeat period ticks, which also notices timeouts (within one period).
        let mut t = self.next_heartbeat;
        if self.is_manager(s) {
            t = t.min(self.next_poll);
        }
        if let Some((_, deadline)) = self.pending_order {
            t = t.min(deadline);
        }
        if let Some((_, _, deadline)) = &self.awaiting_host {
            t = t.min(*deadline);
        }
        Some(t)
    }

    pub(crate) fn tick(&mut self, s: &mut Shared, now: Instant) {
        if !self.c2c(s) {
            return;
        }
        let timeout = self.gossip_timeout(s);
        let heard = self.heard.len();
        // Before `heard_until` the sweep would keep every entry.
        if self.heard_until.is_some_and(|until| now >= until) {
            let me = &s.me;
            let mut voters_gone = 0;
            self.heard.retain(|_, h| {
                let keep = now < h.at + timeout;
                voters_gone += usize::from(!keep && h.vote == *me);
                keep
            });
            self.voters -= voters_gone;
            self.heard_until = self.heard.values().map(|h| h.at + timeout).min();
        } else {
            // Every simulation in this crate's tests checks the bound.
            #[cfg(test)]
            assert!(
                self.heard.values().all(|h| now < h.at + timeout),
                "{}: a heard peer timed out before `heard_until`",
                s.me
            );
        }
        // Only peers no longer alive go, but one may be the manager, whose time-out counts
        // from when this agent took it.
        self.standing.stale |= self.heard.len() != heard;
        let call_again = s.config.member_timeout;
        self.called.retain(|_, at| now < *at + call_again);
        self.elect(s, now);
        if self
            .pending_order
            .is_some_and(|(_, deadline)| now >= deadline)
        {
            self.pending_order = None;
        }
        if self
            .awaiting_host
            .as_ref()
            .is_some_and(|(_, _, deadline)| now >= *deadline)
        {
            if let Some((order, _, _)) = self.awaiting_host.take() {
                tracing::info!(agent = %s.me, to = %order.to, "move order refused: the destination's host was not announced in time");
                self.refuse_order(s, order);
            }
        }
        if self.is_manager(s) && now >= self.next_poll {
            self.next_poll = now + s.config.profile_period;
            // The manager's own place, as its members tell theirs.
            self.near_hosts(s, now);
            self.balance_cluster(s, now);
            let id = MessageId(s.fresh_id());
            self.poll = Some(id);
            let members: Vec<PeerId> = self.cluster_members(s, now).into_iter().cloned().collect();
            if !members.is_empty() {
                self.polled = Some(now);
            }
            for to in members {
                s.send(to, Message::ProfileRequest { id });
            }
        }
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + s.config.heartbeat_period;
            self.heartbeats(s, now);
        }
    }

    /// One heartbeat period's sends: a member to its manager, a manager to its members
    /// (each unless a poll or its reply already went this period), and every agent to
    /// [`GOSSIP_FANOUT`] other local peers in turn.
    fn heartbeats(&mut self, s: &mut Shared, now: Instant) {
        let period = s.config.heartbeat_period;
        let recent = |at: Option<Instant>| at.is_some_and(|at| now < at + period);
        let members: Vec<PeerId> = self.cluster_members(s, now).into_iter().cloned().collect();
        let manager = self.manager.clone();
        let successor = self.is_manager(s).then(|| self.successor(s, now)).flatten();
        if self.is_manager(s) {
            if !recent(self.polled) {
                for to in &members {
                    self.send_heartbeat(s, to.clone(), successor.clone());
                }
            }
        } else if !recent(self.replied) {
            self.send_heartbeat(s, manager.clone(), None);
        }
        // The gossip round: the local peers outside this agent's manager-member links, in id
        // order from where the last turn stopped. Walked lazily from there, so that a turn
        // of one compares a few ids, not every local peer's (up to 64, each period on
        // every node: collecting and filtering the whole round was a seventh of the
        // simulator's time at 10,000 nodes).
        //
        // In its first seniority grace an agent heartbeats every local peer each period,
        // as all agents did before: agents that start together then see all of one another's
        // votes at once and agree as the election rules say (the lowest id among equals),
        // and a newcomer learns every vote around it. Once per agent's life, L messages a
        // period for a few periods.
        let fanout = if now < self.joined + self.seniority_grace(s) {
            usize::MAX
        } else {
            GOSSIP_FANOUT
        };
        let turn: Vec<PeerId> = s
            .peers
            .in_tier_after(LatencyTier::Local, self.gossip_after.as_ref())
            .filter(|p| **p != manager && members.binary_search(p).is_err())
            .take(fanout)
            .cloned()
            .collect();
        if turn.is_empty() {
            return;
        }
        self.gossip_after = turn.last().cloned();
        for to in turn {
            self.send_heartbeat(s, to, successor.clone());
        }
    }

    pub(crate) fn on_heartbeat(
        &mut self,
        s: &mut Shared,
        now: Instant,
        from: PeerId,
        vote: PeerId,
        successor: Option<PeerId>,
        members: u32,
    ) {
        if !self.c2c(s) {
            return;
        }
        // Whether the sender is a local peer: a heard peer's entry says so (every change to
        // the peer table refreshes it, see `Heard::local`), and it is read next anyway; the
        // peer table's own look-up was a further cache miss or two per heartbeat.
        let local = match self.heard.get(&from) {
            Some(h) => {
                #[cfg(test)]
                assert_eq!(
                    h.local,
                    s.peers.tier(&from) == Some(LatencyTier::Local),
                    "{}: a heard peer's locality is stale",
                    s.me
                );
                h.local
            }
            None => s.peers.tier(&from) == Some(LatencyTier::Local),
        };
        if !local {
            return;
        }
        if from == self.manager && vote == from && self.successor != successor {
            self.successor = successor;
            self.standing.stale = true;
        }
        let timeout = self.gossip_timeout(s);
        // A known peer's entry is updated in place (its seniority kept), so that the ids are
        // copied only for a new peer or a changed vote: heartbeats are most NSc2c messages.
        // The election stands if the peer was alive and its vote is the same: the heartbeat
        // only puts off its time-out.
        let new = match self.heard.get_mut(&from) {
            Some(h) => {
                let alive = now < h.at + timeout && h.local;
                h.at = now;
                // Checked above.
                h.local = true;
                let recounted = std::mem::replace(&mut h.members, members) != members;
                let old_vote =
                    (h.vote != vote).then(|| std::mem::replace(&mut h.vote, vote.clone()));
                if let Some(old) = old_vote {
                    self.heard_changed(s, Some(&old), Some(&vote));
                    self.standing.stale = true;
                }
                self.standing.stale |= !alive || recounted;
                false
            }
            None => {
                let until = now + timeout;
                self.heard_until = Some(self.heard_until.map_or(until, |u| u.min(until)));
                self.heard.insert(
                    from.clone(),
                    Heard {
                        at: now,
                        first: now,
                        vote: vote.clone(),
                        local: true,
                        members,
                    },
                );
                self.heard_changed(s, None, Some(&vote));
                self.standing.stale = true;
                true
            }
        };
        self.called.remove(&from);
        let before = self.manager.clone();
        self.elect(s, now);
        let told = self.manager != before && self.manager == from;
        // First contact: answer at once, so that a newcomer learns the votes around it
        // without waiting for everyone's gossip turn. The sender is heard now, so its answer
        // to this answer (if it had not heard this agent either) ends the exchange.
        if new && !told {
            let successor = self.is_manager(s).then(|| self.successor(s, now)).flatten();
            self.send_heartbeat(s, from, successor);
        }
        // A vote for a local peer this agent has not heard: call it (once per member
        // timeout), so that the candidate others follow is heard soon.
        let unheard = vote != s.me
            && !self.heard.contains_key(&vote)
            && !self.called.contains_key(&vote)
            && s.peers.tier(&vote) == Some(LatencyTier::Local);
        if unheard {
            self.called.insert(vote.clone(), now);
            self.send_heartbeat(s, vote, None);
        }
    }

    /// A known peer proved alive without a heartbeat (a poll or its reply).
    fn heard_from(&mut self, s: &mut Shared, now: Instant, from: &PeerId) {
        let timeout = self.gossip_timeout(s);
        if let Some(h) = self.heard.get_mut(from) {
            // A peer that had timed out counts again in the next election.
            self.standing.stale |= !(now < h.at + timeout && h.local);
            h.at = now;
        }
    }

    pub(crate) fn on_profile_request(
        &mut self,
        s: &mut Shared,
        now: Instant,
        from: PeerId,
        id: MessageId,
    ) {
        if !self.c2c(s) || from != self.manager || from == s.me {
            s.stats.messages_refused += 1;
            return;
        }
        // The manager's poll is its heartbeat of this period.
        self.heard_from(s, now, &from);
        let Some(node) = s.own_profile() else {
            return;
        };
        // And the reply is this member's.
        self.replied = Some(now);
        let mut entities = s.entities.clone();
        entities.truncate(MAX_ENTITIES);
        let host = s.host.clone();
        let leaving = s.is_leaving();
        let departed = s.departed();
        let near_hosts = self.near_hosts(s, now).to_vec();
        let mut partner_hosts: Vec<&HostName> = entities
            .iter()
            .flat_map(|e| e.partners.iter().map(|p| &p.host))
            .filter(|h| **h != s.host)
            .collect();
        partner_hosts.sort();
        partner_hosts.dedup();
        let partner_rtts: Vec<HostRtt> = partner_hosts
            .into_iter()
            .filter_map(|h| {
                s.rtt_to_host(h)
                    .map(|rtt| HostRtt::from_secs(h.clone(), rtt))
            })
            .take(MAX_RTTS)
            .collect();
        s.send(
            from,
            Message::ProfileReply {
                id,
                host,
                node,
                entities,
                leaving,
                departed,
                near_hosts,
                partner_rtts,
            },
        );
    }

    pub(crate) fn on_profile_reply(
        &mut self,
        s: &mut Shared,
        now: Instant,
        from: PeerId,
        id: MessageId,
        member: MemberView,
    ) {
        let is_member = self.heard.get(&from).is_some_and(|h| h.vote == s.me);
        if !self.is_manager(s) || self.poll != Some(id) || !is_member {
            s.stats.messages_refused += 1;
            return;
        }
        // A member's reply is its heartbeat of this period.
        self.heard_from(s, now, &from);
        s.learn_load(now, &from, &member.host, member.node, member.leaving);
        self.views.insert(from, View { member, at: now });
    }

    /// A manager's order. Obeyed only if it comes from this agent's manager and names this
    /// node's own entities, all eligible to move: the network can only ask for registered
    /// processes to move, never name a program.
    pub(crate) fn on_move_order(
        &mut self,
        s: &mut Shared,
        now: Instant,
        from: PeerId,
        order: Order,
    ) {
        let from_manager = self.c2c(s) && from == self.manager && from != s.me;
        let policy = s.policy(now);
        let own = order
            .entities
            .iter()
            .all(|id| s.entities.iter().any(|e| &e.id == id && policy.eligible(e)));
        if !from_manager {
            tracing::warn!(agent = %s.me, %from, "move order from a non-manager refused");
            s.stats.messages_refused += 1;
            return;
        }
        // Even the manager moves work only to a host its agent announced itself.
        let announced = s.peer_host(&order.to);
        let host_known = announced == Some(&order.to_host);
        let host_unheard = announced.is_none() && self.awaiting_host.is_none();
        if own && host_unheard && !s.is_migrating() && order.to != s.me {
            // The destination is a member of this cluster but not (or no longer) in this
            // agent's table of hosts: it was never connected here, or its host was dropped
            // to make room. A message opens a connection, over which its agent announces its
            // host (identify, in the real driver); the order waits for that.
            tracing::debug!(agent = %s.me, to = %order.to, "move order waits for the destination's host");
            let to = order.to.clone();
            let deadline = now + s.config.member_timeout;
            self.awaiting_host = Some((order, from, deadline));
            s.send(to, Message::Introduce);
            return;
        }
        if !own || !host_known || s.is_migrating() || order.to == s.me {
            self.refuse_order(s, order);
            return;
        }
        let to = Beneficiary {
            peer: order.to,
            host: order.to_host,
            profile: NodeProfile::idle(1.0, 0),
            job_offers: Vec::new(),
            departed: Vec::new(),
        };
        s.start_migration(
            now,
            order.migration,
            order.entities,
            &to,
            Some(order.notify),
        );
    }

    fn refuse_order(&mut self, s: &mut Shared, order: Order) {
        s.stats.messages_refused += 1;
        s.send(
            order.notify,
            Message::MigrationFinished {
                migration: order.migration,
                completed: false,
            },
        );
    }

    /// The destination of a move order waiting for its host, if any: its host must not be
    /// dropped from a full table of hosts.
    pub(crate) fn awaited_host(&self) -> Option<&PeerId> {
        self.awaiting_host.as_ref().map(|(order, _, _)| &order.to)
    }

    /// `peer`'s host was just announced: a move order waiting for it goes on (checked again
    /// as if it had just arrived).
    pub(crate) fn host_known(&mut self, s: &mut Shared, now: Instant, peer: &PeerId) {
        if self.awaited_host() != Some(peer) {
            return;
        }
        if let Some((order, from, _)) = self.awaiting_host.take() {
            self.on_move_order(s, now, from, order);
        }
    }

    pub(crate) fn order_finished(&mut self, s: &mut Shared, now: Instant, migration: MigrationId) {
        if self.pending_order.is_some_and(|(m, _)| m == migration) {
            self.pending_order = None;
            // Views taken before the move are stale.
            s.settle_after = Some(now);
        }
    }

    /// The manager's fresh views of its cluster, its own node first.
    fn views<'a>(&'a self, s: &'a Shared, now: Instant) -> Vec<ClusterNode<'a>> {
        let mut out = Vec::new();
        if let Some(node) = s.own_profile().filter(|_| s.node_is_fresh()) {
            out.push(ClusterNode {
                peer: s.me.clone(),
                host: s.host.clone(),
                node,
                entities: &s.entities[..],
                leaving: s.is_leaving(),
                departed: s.departed(),
                near_hosts: Cow::Borrowed(&self.near_hosts.0[..]),
                partner_rtts: &[],
            });
        }
        let fresh = s.config.profile_period * 2;
        let mut members: Vec<(&PeerId, &View)> = self
            .views
            .iter()
            .filter(|(p, v)| {
                now <= v.at + fresh
                    && s.is_fresh(v.at)
                    && self.heard.get(*p).is_some_and(|h| h.vote == s.me)
            })
            .collect();
        members.sort_by(|a, b| a.0.cmp(b.0));
        for (p, v) in members {
            out.push(ClusterNode {
                peer: p.clone(),
                host: v.member.host.clone(),
                node: v.member.node,
                entities: &v.member.entities[..],
                leaving: v.member.leaving,
                departed: v.member.departed.clone(),
                near_hosts: Cow::Borrowed(&v.member.near_hosts[..]),
                partner_rtts: &v.member.partner_rtts[..],
            });
        }
        out
    }

    /// The hosts of this agent's cluster mates (its manager, and the peers it heard vote
    /// for it) that it measured within the local tier, nearest first (at most
    /// [`MAX_RTTS`]): what a member tells its manager of who is near it. Listed anew at most
    /// every [`NEAR_HOSTS_REFRESH`].
    pub(crate) fn near_hosts(&mut self, s: &mut Shared, now: Instant) -> &[HostName] {
        let due = self
            .near_hosts
            .1
            .is_none_or(|at| now >= at + NEAR_HOSTS_REFRESH);
        if due {
            let manager = &self.manager;
            let hosts = s
                .peers
                .by_rtt()
                .take_while(|(_, rtt)| *rtt <= LOCAL_MAX_RTT)
                .filter(|(peer, _)| {
                    *peer == manager || self.heard.get(peer).is_some_and(|h| &h.vote == manager)
                })
                .filter_map(|(peer, _)| s.peer_host(peer).cloned())
                .take(MAX_RTTS)
                .collect();
            self.near_hosts = (hosts, Some(now));
        }
        &self.near_hosts.0
    }

    /// The member with the most idle capacity, if it is lightly loaded and nothing is being
    /// balanced inside the cluster: the beneficiary of the manager's work steals.
    pub(crate) fn lightest_member(&self, s: &Shared, now: Instant) -> Option<Beneficiary> {
        if !self.is_manager(s) || self.pending_order.is_some() || self.balancing {
            return None;
        }
        let views = self.views(s, now);
        let (i, v) = views
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.leaving && v.node.is_lightly_loaded(s.config.light_threshold))
            .max_by(|(_, a), (_, b)| {
                (a.node.free_cores() * a.node.speed)
                    .total_cmp(&(b.node.free_cores() * b.node.speed))
                    .then(b.peer.cmp(&a.peer))
            })?;
        Some(Beneficiary {
            job_offers: ClusterJobs::of(&views).offers(i, v),
            peer: v.peer.clone(),
            host: v.host.clone(),
            profile: v.node,
            departed: v.departed.clone(),
        })
    }

    /// NSc2c, gathering a job ([`Config::with_gather`](super::config::Config::with_gather)): of the members (this
    /// manager's node included, none leaving), the one with the far partner host most worth
    /// a partner steal (`Agent::farthest_partner`, the manager's RTTs standing for its
    /// members'), that host, and the member as the steal's beneficiary. A light member asks
    /// for any of its entities' partners; a busy one only for those of the jobs its place
    /// gathers ([`decision::gathers`]: the place holds part of the job and has a core for
    /// each of its other ranks), since the moved ranks are spread over its place. Only when
    /// the manager may steal at all (as for `Agent::lightest_member`).
    ///
    /// Why busy members too: a job that gathered on one member filled it, and no light
    /// member ran a rank of the job, so nobody asked for its last ranks (traced at 1,000
    /// nodes, Grid-like: all of NSc2c's 20 split jobs had one cluster with most of the job
    /// and idle cores for the rest).
    pub(crate) fn partner_steal_target(
        &self,
        s: &Shared,
        stealing: &Stealing,
        now: Instant,
    ) -> Option<(HostName, Beneficiary)> {
        if !self.is_manager(s) || self.pending_order.is_some() || self.balancing {
            return None;
        }
        let mut best: Option<(f64, HostName, Beneficiary)> = None;
        let views = self.views(s, now);
        let jobs = ClusterJobs::of(&views);
        let hosts: Vec<&HostName> = views.iter().map(|v| &v.host).collect();
        for (i, v) in views.iter().enumerate() {
            if v.leaving {
                continue;
            }
            let offers = jobs.offers(i, v);
            let gathered: Vec<EntityProfile>;
            let entities = if v.node.is_lightly_loaded(s.config.light_threshold) {
                v.entities
            } else {
                let Some(cores) = s.config.entity_cores else {
                    continue;
                };
                gathered = v
                    .entities
                    .iter()
                    .filter(|e| {
                        offers
                            .iter()
                            .any(|o| o.job == e.id.job && decision::gathers(o, e.job_ranks, cores))
                    })
                    .cloned()
                    .collect();
                &gathered[..]
            };
            // A member's partner hosts at the member's own RTTs where it reported them
            // (the manager's stood for them: on the Internet-like network a partner 7 ms
            // from the manager was 270 ms from the member, seed 16), else the manager's.
            // Not a member's host: the cluster's own far members gather by the manager's
            // order (`gather_across`); a steal sent to one of them moved nothing.
            let member_rtt = |h: &HostName| {
                (!hosts.contains(&h))
                    .then(|| HostRtt::find_in(v.partner_rtts, h).or_else(|| s.rtt_to_host(h)))
                    .flatten()
            };
            let Some((cost, host)) = stealing.farthest_partner(s, entities, &[], member_rtt) else {
                continue;
            };
            if best
                .as_ref()
                .is_none_or(|(c, h, _)| cost > *c || (cost == *c && host < h))
            {
                best = Some((
                    cost,
                    host.clone(),
                    Beneficiary {
                        job_offers: offers,
                        peer: v.peer.clone(),
                        host: v.host.clone(),
                        profile: v.node,
                        departed: v.departed.clone(),
                    },
                ));
            }
        }
        best.map(|(_, host, b)| (host, b))
    }

    /// One step of intra-cluster balancing (manager only, one order at a time).
    fn balance_cluster(&mut self, s: &mut Shared, now: Instant) {
        self.balancing = false;
        if self.pending_order.is_some() || s.is_migrating() {
            return;
        }
        let views = self.views(s, now);
        if views.len() < 2 {
            return;
        }
        let Some((from, to, plan)) = self
            .evacuation(s, now, &views)
            .or_else(|| self.balance_staying(s, now, &views))
            .or_else(|| gather_across(s, now, &views))
        else {
            return;
        };
        let from_peer = views[from].peer.clone();
        let target = Beneficiary {
            peer: views[to].peer.clone(),
            host: views[to].host.clone(),
            profile: views[to].node,
            job_offers: views[to].node.job_offers(views[to].entities),
            departed: views[to].departed.clone(),
        };
        let from_host = views[from].host.clone();
        let within = s.within_hold_down(views[from].entities, &plan, views[from].leaving);
        drop(views);
        tracing::info!(agent = %s.me, from = %from_peer, to = %target.peer, gain = plan.gain.gain, "intra-cluster move");
        s.bar_return(now, plan.entities.clone(), from_host);
        self.balancing = true;
        let me = s.me.clone();
        let entities = plan.entities.clone();
        self.order(s, now, from_peer, plan.entities, target, me);
        if within {
            s.hold_moved_within(now, &entities);
        }
    }

    /// A leaving node's entities first: one of them, to the staying member with the most idle
    /// CPU that takes it under the leaving rules ([`crate::decision::Policy::leaving`]).
    /// Returns `(from, to, plan)` as indices into `views`.
    fn evacuation(
        &self,
        s: &Shared,
        now: Instant,
        views: &[ClusterNode<'_>],
    ) -> Option<(usize, usize, decision::Plan)> {
        let policy = s.policy_for(now, true);
        let mut targets: Vec<usize> = (0..views.len()).filter(|&i| !views[i].leaving).collect();
        targets.sort_by(|&a, &b| {
            let free = |i: usize| views[i].node.free_cores() * views[i].node.speed;
            free(b).total_cmp(&free(a)).then(a.cmp(&b))
        });
        for from in (0..views.len()).filter(|&i| views[i].leaving && !views[i].entities.is_empty())
        {
            for &to in &targets {
                if let Some(plan) = decision::select(
                    &policy,
                    &views[from].node.departing(),
                    views[from].entities,
                    &views[to].node,
                    1,
                ) {
                    return Some((from, to, plan));
                }
            }
        }
        None
    }

    /// The ratio rule among the members that stay (a leaving one neither gives nor takes
    /// here). Returns `(from, to, plan)` as indices into `views`.
    fn balance_staying(
        &self,
        s: &Shared,
        now: Instant,
        views: &[ClusterNode<'_>],
    ) -> Option<(usize, usize, decision::Plan)> {
        let staying: Vec<usize> = (0..views.len()).filter(|&i| !views[i].leaving).collect();
        let nodes: Vec<NodeView<'_>> = staying
            .iter()
            .map(|&i| NodeView {
                node: &views[i].node,
                entities: views[i].entities,
            })
            .collect();
        // The staying nodes' rules, also when the manager itself is leaving. Not back to
        // a node an order of ours took the entity from lately, nor to one that lists it as
        // departed (whoever moved it).
        // And a rank that exchanges with partners stays near its node: a cluster is the
        // members within the local tier of its manager, and on a network without structure
        // two of them may be far apart (at 100 nodes, Internet-like, NSc2c rose from 0.54 of
        // the oracle to 0.64 on average over four seeds with this rule). It goes only to a
        // member near each member that runs one of its partners, too: near its own node
        // alone, a job's ranks went step by step along a chain of near members whose ends
        // were 150 to 360 ms apart (traced at 100 nodes, Internet-like, seed 3, 2026-12-04).
        let near = Nearness::of(views);
        let may_go = |e: &EntityProfile, from: usize, to: usize| {
            let (from, to) = (staying[from], staying[to]);
            let host = &views[to].host;
            (e.partners.is_empty()
                || (near.near(from, to) && near.near_all(to, e.partners.iter().map(|p| &p.host))))
                && s.may_return(now, &e.id, host)
                && !views[to].departed.contains(&e.id)
        };
        let (from, to, plan) = decision::balance(&s.policy_for(now, false), &nodes, may_go)?;
        Some((staying[from], staying[to], plan))
    }

    /// Orders `entities` on `member` to move to `to`, or starts the move if `member` is this
    /// agent. Returns the migration id.
    fn order(
        &mut self,
        s: &mut Shared,
        now: Instant,
        member: PeerId,
        entities: Vec<EntityId>,
        to: Beneficiary,
        notify: PeerId,
    ) -> MigrationId {
        let migration = MigrationId(s.fresh_id());
        if notify == s.me {
            self.pending_order = Some((migration, now + s.config.migration_timeout));
        }
        if member == s.me {
            s.start_migration(now, migration, entities, &to, Some(notify));
        } else {
            for e in &entities {
                s.held.insert(e.clone(), now + s.config.hold_down);
            }
            s.send(
                member,
                Message::MoveOrder {
                    migration,
                    entities,
                    to: to.peer,
                    to_host: to.host,
                    notify,
                },
            );
        }
        migration
    }

    /// A work steal that work stealing received and checked ([`ClusterSteal`]): a member
    /// relays it to its manager (or names its manager to the origin of a partner steal);
    /// a manager orders a move from its heaviest member (a leaving one first) to the
    /// thief, or grows a malleable job of its own node onto it, or passes it on.
    pub(crate) fn work_steal(
        &mut self,
        s: &mut Shared,
        resizing: &Resizing,
        now: Instant,
        received: ClusterSteal,
    ) {
        let ClusterSteal {
            from,
            steal,
            first_time,
            direct,
        } = received;
        if !self.is_manager(s) {
            let manager = self.manager.clone();
            // A partner steal sent here directly (a manager gathering a job asks the agent
            // of its rank's partner, which runs here): the origin asks our manager itself,
            // since a steal relayed by us would move nothing (its origin unauthenticated).
            if direct && steal.ttl == 1 && manager != steal.origin && manager != s.me {
                s.send(
                    steal.origin,
                    Message::StealRedirect {
                        id: steal.id,
                        manager,
                    },
                );
                return;
            }
            // Members relay to their manager: managers are the peers of the inter-cluster
            // network.
            let next = (manager != from && manager != steal.origin).then_some(manager);
            s.stats.steals_forwarded += u64::from(next.is_some());
            stealing::pass_on(s, steal, next);
            return;
        }
        if first_time && self.pending_order.is_none() && !s.is_migrating() {
            // Leaving nodes first (their entities must go), then the heaviest node: the one
            // with the least idle capacity.
            let mut views = self.views(s, now);
            views.retain(|v| v.peer != steal.source.peer);
            views.sort_by(|a, b| {
                b.leaving.cmp(&a.leaving).then(
                    (a.node.free_cores() * a.node.speed)
                        .total_cmp(&(b.node.free_cores() * b.node.speed)),
                )
            });
            // The communication term when the members' entities name their partners: a
            // rank leaves its cluster only if it does not go further from them than it gains.
            let near = views
                .iter()
                .any(|v| v.entities.iter().any(|e| !e.partners.is_empty()))
                .then(|| StealLatencies::new(s, &steal));
            let jobs = ClusterJobs::of(&views);
            let found = views.iter().enumerate().find_map(|(i, v)| {
                let (node, max) = if v.leaving {
                    (v.node.departing(), 1)
                } else {
                    (v.node, s.config.max_group)
                };
                // The manager's RTTs are its own node's; of another member it knows only
                // which cluster mates it measured near (on a network without structure a
                // member within local latency of the manager may be far from the manager's
                // near hosts).
                let member = stealing::MemberRtts {
                    near: &v.near_hosts,
                };
                let rtts = near.as_ref().map(|n| {
                    let (mut at_l, at_f) = n.views(&v.host, &steal.source.host);
                    if v.host != s.host {
                        at_l.rtts = &member;
                    }
                    (at_l, at_f)
                });
                // Not back to the host a steal of ours took it from lately, unless its node
                // is leaving; only ranks with partners there for a partner steal.
                let may_go = stealing::for_thief(
                    s,
                    s.may_go_to(now, v.entities, &steal.source.host, v.leaving),
                    &steal.source,
                    v.leaving,
                );
                let jobs_here = jobs.offers(i, v);
                decision::select_near(
                    &Policy {
                        jobs_here: &jobs_here,
                        gather_in_one_move: true,
                        ..s.policy_for(now, v.leaving)
                    },
                    &node,
                    &may_go,
                    steal.source.destination(),
                    max,
                    rtts.as_ref().map(|(a, b)| (a, b)),
                )
                .map(|plan| {
                    let within = s.within_hold_down(v.entities, &plan, v.leaving);
                    (v.peer.clone(), v.host.clone(), plan, within)
                })
            });
            drop(views);
            // A malleable job whose rank 0 runs on the manager's own node may grow onto the
            // thief instead, when that beats the move found (members' jobs are only moved:
            // a member is not ordered to grow).
            if let Some(grow) = resizing
                .grow_for_steal(s, now, &steal.source, &steal.rtts)
                .filter(|g| g.beats_move(found.as_ref().map(|(_, _, p, _)| p)))
            {
                if direct {
                    resizing::start_grow(s, now, grow, &steal.source.host, steal.origin, steal.id);
                    return;
                }
                s.stats.grow_offers_refused += 1;
                if stealing::hint_origin(s, &steal) {
                    return;
                }
            }
            // Work moves only on a request the origin sent us itself; a relayed or
            // forwarded one gets the origin told to ask here directly.
            if found.is_some() && !direct && stealing::hint_origin(s, &steal) {
                return;
            }
            if let Some((member, member_host, plan, within_hold_down)) = found.filter(|_| direct) {
                tracing::info!(agent = %s.me, %member, to = %steal.source.peer, gain = plan.gain.gain, "inter-cluster move");
                let migration = self.order(
                    s,
                    now,
                    member,
                    plan.entities.clone(),
                    steal.source.clone(),
                    steal.origin.clone(),
                );
                s.send(
                    steal.origin,
                    Message::StealAccepted {
                        id: steal.id,
                        migration,
                        entities: plan.entities,
                        from_host: Some(member_host),
                        within_hold_down,
                    },
                );
                return;
            }
        }
        let tier = steal.tier.max(LatencyTier::Regional);
        stealing::forward(s, from, steal, tier);
    }
}

/// A job split over members of the cluster that are far from each other gathers by the
/// manager's order: from a member (`from`) to a far member (`to`) that runs a partner of
/// the moved ranks, as a partner steal of `to`'s would move them (`decision::select_near`
/// with the communication term, a step of gathering in one move), the best gain over all
/// such pairs. Returns `(from, to, plan)` as indices into `views`.
///
/// Why: a cluster is the members within the local tier of its manager, and on a network
/// without structure two of them may be far apart. The ratio rule moves a rank only between
/// near members (`balance_staying`), and a partner steal the manager sent to its own member
/// moved nothing (the member passes its manager's steals back): traced at 100 nodes,
/// Internet-like, seed 1, a job sat for the hour on two far members of one cluster, 5 and 3
/// ranks with idle cores for the rest on each, at 176 ms of latency an iteration, while the
/// manager sent both of them a partner steal every few seconds.
fn gather_across(
    s: &Shared,
    now: Instant,
    views: &[ClusterNode<'_>],
) -> Option<(usize, usize, decision::Plan)> {
    let near = Nearness::of(views);
    let jobs = ClusterJobs::of(views);
    let unknown = DEFAULT_UNKNOWN_RTT.as_secs_f64();
    let mut best: Option<(usize, usize, decision::Plan)> = None;
    for (from, v) in views.iter().enumerate().filter(|(_, v)| !v.leaving) {
        let jobs_here = jobs.offers(from, v);
        let policy = Policy {
            jobs_here: &jobs_here,
            gather_in_one_move: true,
            ..s.policy_for(now, false)
        };
        let rtts_l = ReportedRtts::of(s, v);
        for (to, w) in views.iter().enumerate() {
            if to == from || w.leaving || near.near(from, to) {
                continue;
            }
            let may_go: Vec<EntityProfile> = s
                .may_go_to(now, v.entities, &w.host, false)
                .iter()
                .filter(|e| {
                    e.partners.iter().any(|p| p.host == w.host) && !w.departed.contains(&e.id)
                })
                .cloned()
                .collect();
            if may_go.is_empty() {
                continue;
            }
            let offers_there = jobs.offers(to, w);
            let rtts_f = ReportedRtts::of(s, w);
            let at_l = RttView {
                host: &v.host,
                rtts: &rtts_l,
                unknown,
                unmeasured: Unmeasured::Assumed,
            };
            // As a partner steal's destination: it runs a partner of the rank, and has
            // seldom measured the rank's other partners.
            let at_f = RttView {
                host: &w.host,
                rtts: &rtts_f,
                unknown,
                unmeasured: Unmeasured::Neutral,
            };
            let plan = decision::select_near(
                &policy,
                &v.node,
                &may_go,
                Destination {
                    node: &w.node,
                    job_offers: &offers_there,
                },
                s.config.max_group,
                Some((&at_l, &at_f)),
            );
            if let Some(plan) = plan.filter(|p| {
                best.as_ref()
                    .is_none_or(|(_, _, b)| p.gain.gain > b.gain.gain)
            }) {
                best = Some((from, to, plan));
            }
        }
    }
    best
}

/// What the manager knows of a cluster node's RTTs: its own measured ones for its own node;
/// for a member, the RTTs to its partner hosts it reported, and the hosts it measured
/// within the local tier (at half the tier's bound, as `stealing::MemberRtts`).
enum ReportedRtts<'a> {
    Manager(&'a Shared),
    Member {
        partners: &'a [HostRtt],
        near: &'a [HostName],
    },
}

impl<'a> ReportedRtts<'a> {
    fn of(s: &'a Shared, node: &'a ClusterNode<'_>) -> Self {
        if node.host == s.host {
            ReportedRtts::Manager(s)
        } else {
            ReportedRtts::Member {
                partners: node.partner_rtts,
                near: &node.near_hosts,
            }
        }
    }
}

impl RttLookup for ReportedRtts<'_> {
    fn rtt_to(&self, host: &HostName) -> Option<f64> {
        match self {
            ReportedRtts::Manager(s) => s.rtt_to_host(host),
            ReportedRtts::Member { partners, near } => HostRtt::find_in(partners, host)
                .or_else(|| stealing::MemberRtts { near }.rtt_to(host)),
        }
    }
}

impl ClusterRole for Cluster {
    fn is_manager(&self, s: &Shared) -> bool {
        Cluster::is_manager(self, s)
    }

    fn lightest_member(&self, s: &Shared, now: Instant) -> Option<Beneficiary> {
        Cluster::lightest_member(self, s, now)
    }

    fn partner_steal_target(
        &self,
        s: &Shared,
        stealing: &Stealing,
        now: Instant,
    ) -> Option<(HostName, Beneficiary)> {
        Cluster::partner_steal_target(self, s, stealing, now)
    }

    fn members_exchange_with(&self, s: &Shared, host: &HostName) -> bool {
        self.member_entities(s)
            .any(|e| e.partners.iter().any(|p| p.host == *host))
    }
}

#[cfg(test)]
mod tests;
