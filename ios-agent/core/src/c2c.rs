//! NSc2c (section 5.1 and 5.2, "Cluster-to-cluster load balancing") on the same [`Agent`]
//! type, enabled by [`Topology::ClusterToCluster`].
//!
//! - **Clusters** are latency-defined: an agent's cluster is itself plus its alive peers of
//!   the local tier. Clusters merge when a peer comes within local latency and split when
//!   one drifts out of it or dies.
//! - **Election** by seniority, then votes (issue 12, item 6: the lowest peer id could be
//!   won by generating keys until one sorts low). Every agent sends a [`Message::Heartbeat`]
//!   to its local peers each heartbeat period, carrying its vote. Each agent ranks the
//!   candidates (itself and the alive local peers) by what it observed itself: its own
//!   start, and when it first heard each peer (continuously since). Only the *senior
//!   generation* may win: candidates first seen within [`Agent::seniority_grace`] of the
//!   earliest. Among them wins the one with the most votes (the alive peers' and this
//!   agent's own), then a peer that votes for itself (it does not take this agent as its
//!   senior, and may have been there first: a peer heard from this agent's first moment
//!   cannot be ordered by this agent), then the lowest id. A newcomer is junior in the eyes of
//!   every agent that was there before it, whatever its id, so it cannot take over an
//!   existing cluster; ids decide only among agents that started together. A candidate
//!   outside the senior generation wins only with strictly more votes than the best senior
//!   one: so a larger cluster absorbs a smaller one that comes within local latency.
//! - **Succession**: a manager names in its heartbeats its successor, the member it heard
//!   first (then the lowest id). A dead manager drops out of the alive set after the member
//!   timeout, and every member that followed it takes the successor it named, if alive:
//!   members that arrived later cannot order the older ones themselves, the manager could.
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

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pcm_proto::HostName;

use crate::agent::{Agent, Beneficiary, Steal, Topology};
use crate::decision::{self, NodeView};
use crate::message::{Message, MessageId, MigrationId, MAX_ENTITIES};
use crate::model::{EntityId, EntityProfile, NodeProfile};
use crate::tier::{LatencyTier, PeerId};

#[derive(Debug)]
struct Heard {
    /// Last heartbeat.
    at: Instant,
    /// First heartbeat of the current run of heartbeats (reset when the peer times out):
    /// the peer's seniority as this agent saw it, which nobody can claim or choose.
    first: Instant,
    vote: PeerId,
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
}

/// One node of the manager's cluster, as it decides with it (its own node included).
struct ClusterNode<'a> {
    peer: PeerId,
    host: HostName,
    node: NodeProfile,
    entities: &'a [EntityProfile],
    leaving: bool,
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

/// NSc2c state of one agent.
#[derive(Debug)]
pub(crate) struct Cluster {
    /// When this agent started: its own seniority.
    joined: Instant,
    /// The successor the manager last named in its heartbeats.
    successor: Option<PeerId>,
    heard: HashMap<PeerId, Heard>,
    manager: PeerId,
    next_heartbeat: Instant,
    next_poll: Instant,
    poll: Option<MessageId>,
    views: HashMap<PeerId, View>,
    pending_order: Option<(MigrationId, Instant)>,
    balancing: bool,
}

impl Cluster {
    pub(crate) fn new(me: PeerId, now: Instant, heartbeat_period: Duration) -> Self {
        Cluster {
            joined: now,
            successor: None,
            heard: HashMap::new(),
            manager: me,
            next_heartbeat: now,
            // Heartbeats first, so that the first poll reaches the members.
            next_poll: now + heartbeat_period * 2,
            poll: None,
            views: HashMap::new(),
            pending_order: None,
            balancing: false,
        }
    }
}

impl Agent {
    fn c2c(&self) -> bool {
        self.config.topology == Topology::ClusterToCluster
    }

    /// NSc2c: the manager of this agent's cluster as this agent sees it (`None` in NSp2p).
    pub fn manager(&self) -> Option<&PeerId> {
        self.c2c().then_some(&self.cluster.manager)
    }

    /// NSc2c: whether this agent is its cluster's manager.
    pub fn is_manager(&self) -> bool {
        self.c2c() && self.cluster.manager == self.me
    }

    /// NSc2c: the alive local peers that vote for this agent as manager, sorted.
    pub fn cluster_members(&self, now: Instant) -> Vec<&PeerId> {
        let mut v: Vec<&PeerId> = self
            .cluster
            .heard
            .iter()
            .filter(|(p, h)| h.vote == self.me && self.alive(now, p, h))
            .map(|(p, _)| p)
            .collect();
        v.sort();
        v
    }

    fn alive(&self, now: Instant, peer: &PeerId, h: &Heard) -> bool {
        now < h.at + self.config.member_timeout && self.peers.tier(peer) == Some(LatencyTier::Local)
    }

    /// NSc2c: how far apart two agents' first sightings may be for both to count as
    /// equally senior: discovery, the first RTT samples and the first heartbeat take a few
    /// seconds, so a peer heard that soon after this agent started was there before it.
    /// Twice the member timeout.
    pub fn seniority_grace(&self) -> Duration {
        self.config.member_timeout * 2
    }

    /// The election of the module docs: seniority first, then votes, then a peer over self,
    /// then the lowest id.
    fn elect(&mut self, now: Instant) {
        // The manager died: its named successor takes over, if alive. Everyone that followed
        // it agrees, whatever they saw of the members' seniority themselves.
        let manager_alive = self.cluster.manager == self.me
            || self
                .cluster
                .heard
                .get(&self.cluster.manager)
                .is_some_and(|h| self.alive(now, &self.cluster.manager, h));
        if !manager_alive {
            if let Some(s) = self.cluster.successor.take() {
                let alive = s == self.me
                    || self
                        .cluster
                        .heard
                        .get(&s)
                        .is_some_and(|h| self.alive(now, &s, h));
                if alive {
                    self.set_manager(s);
                    return;
                }
            }
        }
        // (candidate, first seen, votes)
        let mut candidates: Vec<(PeerId, Instant, usize)> =
            vec![(self.me.clone(), self.cluster.joined, 0)];
        for (p, h) in &self.cluster.heard {
            if self.alive(now, p, h) {
                candidates.push((p.clone(), h.first, 0));
            }
        }
        for c in &mut candidates {
            let peers = self
                .cluster
                .heard
                .iter()
                .filter(|(p, h)| h.vote == c.0 && self.alive(now, p, h))
                .count();
            c.2 = peers + usize::from(self.cluster.manager == c.0);
        }
        let oldest = candidates.iter().map(|c| c.1).min().unwrap_or(now);
        let senior_until = oldest + self.seniority_grace();
        // A peer that votes for itself although it hears this agent does not take this
        // agent as its senior: on equal votes it goes first (it may have been there first;
        // this agent cannot tell, having heard it from its own first moment).
        let self_voting =
            |c: &PeerId| *c != self.me && self.cluster.heard.get(c).is_some_and(|h| h.vote == *c);
        // Greater is better: votes, then a self-voting peer, then the lower id.
        let better = |a: &&(PeerId, Instant, usize), b: &&(PeerId, Instant, usize)| {
            a.2.cmp(&b.2)
                .then(self_voting(&a.0).cmp(&self_voting(&b.0)))
                .then(b.0.cmp(&a.0))
        };
        let senior = candidates
            .iter()
            .filter(|c| c.1 <= senior_until)
            .max_by(better);
        let junior = candidates
            .iter()
            .filter(|c| c.1 > senior_until)
            .max_by(better);
        let manager = match (senior, junior) {
            (Some(s), Some(j)) if j.2 > s.2 => j.0.clone(),
            (Some(s), _) => s.0.clone(),
            (None, _) => self.me.clone(),
        };
        self.set_manager(manager);
    }

    /// A manager's successor: its most senior member (heard first), then the lowest id.
    fn successor(&self, now: Instant) -> Option<PeerId> {
        self.cluster
            .heard
            .iter()
            .filter(|(p, h)| h.vote == self.me && self.alive(now, p, h))
            .min_by(|a, b| a.1.first.cmp(&b.1.first).then(a.0.cmp(b.0)))
            .map(|(p, _)| p.clone())
    }

    fn set_manager(&mut self, manager: PeerId) {
        if manager != self.cluster.manager {
            tracing::info!(agent = %self.me, old = %self.cluster.manager, new = %manager, "cluster manager changed");
            self.stats.manager_changes += 1;
            self.cluster.manager = manager;
            self.cluster.views.clear();
            self.cluster.poll = None;
            self.cluster.pending_order = None;
        }
    }

    pub(crate) fn c2c_peers_changed(&mut self, now: Instant) {
        if !self.c2c() {
            return;
        }
        let peers = &self.peers;
        self.cluster.heard.retain(|p, _| peers.get(p).is_some());
        self.cluster.views.retain(|p, _| peers.get(p).is_some());
        self.elect(now);
    }

    pub(crate) fn cluster_forget(&mut self, peer: &PeerId) {
        self.cluster.heard.remove(peer);
        self.cluster.views.remove(peer);
    }

    pub(crate) fn c2c_timeout(&self) -> Option<Instant> {
        if !self.c2c() {
            return None;
        }
        let mut t = self.cluster.next_heartbeat;
        if self.is_manager() {
            t = t.min(self.cluster.next_poll);
        }
        if let Some((_, deadline)) = self.cluster.pending_order {
            t = t.min(deadline);
        }
        // The earliest moment a member (or the manager) may be declared dead.
        if let Some(at) = self.cluster.heard.values().map(|h| h.at).min() {
            t = t.min(at + self.config.member_timeout);
        }
        Some(t)
    }

    pub(crate) fn c2c_tick(&mut self, now: Instant) {
        if !self.c2c() {
            return;
        }
        let timeout = self.config.member_timeout;
        self.cluster.heard.retain(|_, h| now < h.at + timeout);
        self.elect(now);
        if self
            .cluster
            .pending_order
            .is_some_and(|(_, deadline)| now >= deadline)
        {
            self.cluster.pending_order = None;
        }
        if now >= self.cluster.next_heartbeat {
            self.cluster.next_heartbeat = now + self.config.heartbeat_period;
            let successor = self.is_manager().then(|| self.successor(now)).flatten();
            let locals: Vec<PeerId> = self
                .peers
                .in_tier(LatencyTier::Local)
                .into_iter()
                .cloned()
                .collect();
            for to in locals {
                let id = MessageId(self.fresh_id());
                let manager = self.cluster.manager.clone();
                let successor = successor.clone();
                self.send(
                    to,
                    Message::Heartbeat {
                        id,
                        manager,
                        successor,
                    },
                );
            }
        }
        if self.is_manager() && now >= self.cluster.next_poll {
            self.cluster.next_poll = now + self.config.profile_period;
            self.balance_cluster(now);
            let id = MessageId(self.fresh_id());
            self.cluster.poll = Some(id);
            let members: Vec<PeerId> = self.cluster_members(now).into_iter().cloned().collect();
            for to in members {
                self.send(to, Message::ProfileRequest { id });
            }
        }
    }

    pub(crate) fn on_heartbeat(
        &mut self,
        now: Instant,
        from: PeerId,
        vote: PeerId,
        successor: Option<PeerId>,
    ) {
        if !self.c2c() || self.peers.tier(&from) != Some(LatencyTier::Local) {
            return;
        }
        if from == self.cluster.manager && vote == from {
            self.cluster.successor = successor;
        }
        let first = self.cluster.heard.get(&from).map_or(now, |h| h.first);
        self.cluster.heard.insert(
            from,
            Heard {
                at: now,
                first,
                vote,
            },
        );
        self.elect(now);
    }

    pub(crate) fn on_profile_request(&mut self, from: PeerId, id: MessageId) {
        if !self.c2c() || from != self.cluster.manager || from == self.me {
            self.stats.messages_refused += 1;
            return;
        }
        let Some(node) = self.own_profile() else {
            return;
        };
        let mut entities = self.entities.clone();
        entities.truncate(MAX_ENTITIES);
        let host = self.host.clone();
        let leaving = self.is_leaving();
        self.send(
            from,
            Message::ProfileReply {
                id,
                host,
                node,
                entities,
                leaving,
            },
        );
    }

    pub(crate) fn on_profile_reply(
        &mut self,
        now: Instant,
        from: PeerId,
        id: MessageId,
        member: MemberView,
    ) {
        let is_member = self
            .cluster
            .heard
            .get(&from)
            .is_some_and(|h| h.vote == self.me);
        if !self.is_manager() || self.cluster.poll != Some(id) || !is_member {
            self.stats.messages_refused += 1;
            return;
        }
        self.cluster.views.insert(from, View { member, at: now });
    }

    /// A manager's order. Obeyed only if it comes from this agent's manager and names this
    /// node's own entities, all eligible to move: the network can only ask for registered
    /// processes to move, never name a program.
    pub(crate) fn on_move_order(&mut self, now: Instant, from: PeerId, order: Order) {
        let from_manager = self.c2c() && from == self.cluster.manager && from != self.me;
        let policy = self.policy(now);
        let own = order.entities.iter().all(|id| {
            self.entities
                .iter()
                .any(|e| &e.id == id && policy.eligible(e))
        });
        if !from_manager {
            tracing::warn!(agent = %self.me, %from, "move order from a non-manager refused");
            self.stats.messages_refused += 1;
            return;
        }
        // Even the manager moves work only to a host its agent announced itself.
        let host_known = self.peer_host(&order.to) == Some(&order.to_host);
        if !own || !host_known || self.is_migrating() || order.to == self.me {
            self.stats.messages_refused += 1;
            self.send(
                order.notify,
                Message::MigrationFinished {
                    migration: order.migration,
                    completed: false,
                },
            );
            return;
        }
        let to = Beneficiary {
            peer: order.to,
            host: order.to_host,
            profile: NodeProfile::idle(1.0, 0),
            job_offers: Vec::new(),
        };
        self.start_migration(
            now,
            order.migration,
            order.entities,
            &to,
            Some(order.notify),
        );
    }

    pub(crate) fn c2c_order_finished(&mut self, now: Instant, migration: MigrationId) {
        if self
            .cluster
            .pending_order
            .is_some_and(|(m, _)| m == migration)
        {
            self.cluster.pending_order = None;
            // Views taken before the move are stale.
            self.settle_after = Some(now);
        }
    }

    /// The manager's fresh views of its cluster, its own node first.
    fn views(&self, now: Instant) -> Vec<ClusterNode<'_>> {
        let mut out = Vec::new();
        if let Some(node) = self.own_profile().filter(|_| self.node_is_fresh()) {
            out.push(ClusterNode {
                peer: self.me.clone(),
                host: self.host.clone(),
                node,
                entities: &self.entities[..],
                leaving: self.is_leaving(),
            });
        }
        let fresh = self.config.profile_period * 2;
        let mut members: Vec<(&PeerId, &View)> = self
            .cluster
            .views
            .iter()
            .filter(|(p, v)| {
                now <= v.at + fresh
                    && self.is_fresh(v.at)
                    && self
                        .cluster
                        .heard
                        .get(*p)
                        .is_some_and(|h| h.vote == self.me)
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
            });
        }
        out
    }

    /// The member with the most idle capacity, if it is lightly loaded and nothing is being
    /// balanced inside the cluster: the beneficiary of the manager's work steals.
    pub(crate) fn lightest_member(&self, now: Instant) -> Option<Beneficiary> {
        if !self.is_manager() || self.cluster.pending_order.is_some() || self.cluster.balancing {
            return None;
        }
        self.views(now)
            .into_iter()
            .filter(|v| !v.leaving && v.node.is_lightly_loaded(self.config.light_threshold))
            .max_by(|a, b| {
                (a.node.free_cores() * a.node.speed)
                    .total_cmp(&(b.node.free_cores() * b.node.speed))
                    .then(b.peer.cmp(&a.peer))
            })
            .map(|v| Beneficiary {
                job_offers: v.node.job_offers(v.entities),
                peer: v.peer,
                host: v.host,
                profile: v.node,
            })
    }

    /// One step of intra-cluster balancing (manager only, one order at a time).
    fn balance_cluster(&mut self, now: Instant) {
        self.cluster.balancing = false;
        if self.cluster.pending_order.is_some() || self.is_migrating() {
            return;
        }
        let views = self.views(now);
        if views.len() < 2 {
            return;
        }
        let Some((from, to, plan)) = self
            .evacuation(now, &views)
            .or_else(|| self.balance_staying(now, &views))
        else {
            return;
        };
        let from_peer = views[from].peer.clone();
        let target = Beneficiary {
            peer: views[to].peer.clone(),
            host: views[to].host.clone(),
            profile: views[to].node,
            job_offers: views[to].node.job_offers(views[to].entities),
        };
        drop(views);
        tracing::info!(agent = %self.me, from = %from_peer, to = %target.peer, gain = plan.gain.gain, "intra-cluster move");
        self.cluster.balancing = true;
        let me = self.me.clone();
        self.order(now, from_peer, plan.entities, target, me);
    }

    /// A leaving node's entities first: one of them, to the staying member with the most idle
    /// CPU that takes it under the leaving rules ([`crate::decision::Policy::leaving`]).
    /// Returns `(from, to, plan)` as indices into `views`.
    fn evacuation(
        &self,
        now: Instant,
        views: &[ClusterNode<'_>],
    ) -> Option<(usize, usize, decision::Plan)> {
        let policy = self.policy_for(now, true);
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
        // The staying nodes' rules, also when the manager itself is leaving.
        let (from, to, plan) = decision::balance(&self.policy_for(now, false), &nodes)?;
        Some((staying[from], staying[to], plan))
    }

    /// Orders `entities` on `member` to move to `to`, or starts the move if `member` is this
    /// agent. Returns the migration id.
    fn order(
        &mut self,
        now: Instant,
        member: PeerId,
        entities: Vec<EntityId>,
        to: Beneficiary,
        notify: PeerId,
    ) -> MigrationId {
        let migration = MigrationId(self.fresh_id());
        if notify == self.me {
            self.cluster.pending_order = Some((migration, now + self.config.migration_timeout));
        }
        if member == self.me {
            self.start_migration(now, migration, entities, &to, Some(notify));
        } else {
            for e in &entities {
                self.held.insert(e.clone(), now + self.config.hold_down);
            }
            self.send(
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

    pub(crate) fn c2c_work_steal(
        &mut self,
        now: Instant,
        from: PeerId,
        steal: Steal,
        first_time: bool,
        direct: bool,
    ) {
        if !self.is_manager() {
            // Members relay to their manager: managers are the peers of the inter-cluster
            // network.
            let manager = self.cluster.manager.clone();
            let next = (manager != from && manager != steal.origin).then_some(manager);
            self.stats.steals_forwarded += u64::from(next.is_some());
            self.pass_on(steal, next);
            return;
        }
        if first_time && self.cluster.pending_order.is_none() && !self.is_migrating() {
            // Leaving nodes first (their entities must go), then the heaviest node: the one
            // with the least idle capacity.
            let mut views = self.views(now);
            views.retain(|v| v.peer != steal.source.peer);
            views.sort_by(|a, b| {
                b.leaving.cmp(&a.leaving).then(
                    (a.node.free_cores() * a.node.speed)
                        .total_cmp(&(b.node.free_cores() * b.node.speed)),
                )
            });
            let found = views.iter().find_map(|v| {
                let (node, max) = if v.leaving {
                    (v.node.departing(), 1)
                } else {
                    (v.node, self.config.max_group)
                };
                decision::select(
                    &self.policy_for(now, v.leaving),
                    &node,
                    v.entities,
                    steal.source.destination(),
                    max,
                )
                .map(|plan| (v.peer.clone(), plan))
            });
            drop(views);
            // Work moves only on a request the origin sent us itself; a relayed or
            // forwarded one gets the origin told to ask here directly.
            if found.is_some() && !direct && self.hint_origin(&steal) {
                return;
            }
            if let Some((member, plan)) = found.filter(|_| direct) {
                tracing::info!(agent = %self.me, %member, to = %steal.source.peer, gain = plan.gain.gain, "inter-cluster move");
                let migration = self.order(
                    now,
                    member,
                    plan.entities.clone(),
                    steal.source.clone(),
                    steal.origin.clone(),
                );
                self.send(
                    steal.origin,
                    Message::StealAccepted {
                        id: steal.id,
                        migration,
                        entities: plan.entities,
                    },
                );
                return;
            }
        }
        let tier = steal.tier.max(LatencyTier::Regional);
        self.forward(from, steal, tier);
    }
}
