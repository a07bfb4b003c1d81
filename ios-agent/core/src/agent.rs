//! The agent state machine ([`Agent`]): the driver's one entry point, which hands each input
//! to the strategy it concerns. Its parts, each in its own module, imported one way
//! (strategies -> shared, never back):
//!
//! - `config`: the settings and their defaults;
//! - `shared`: what both strategies share (peers and their hosts, profiles, held, gone and
//!   barred entities, the move under way, the drain, the action queue, the counters);
//! - `stealing`: NSp2p work stealing (section 5.2), also what an NSc2c manager uses
//!   between clusters;
//! - [`c2c`]: NSc2c (section 5.1 and 5.2), enabled by [`Topology::ClusterToCluster`];
//! - `resizing`: growing and shrinking malleable jobs, for both.
//!
//! Methods come in four kinds, in this order: getters, `handle_*` inputs (each takes `now`),
//! and the `#[must_use]` outputs [`Agent::poll_action`] and [`Agent::poll_timeout`].

use std::time::{Duration, Instant};

use pcm_proto::HostName;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub mod c2c;
mod config;
mod resizing;
mod shared;
mod stealing;

use c2c::{Cluster, MemberView, Order};
use resizing::Resizing;
use shared::{Beneficiary, Leaving, Shared};
use stealing::{Steal, Stealing};

pub use config::{
    Config, ConfigError, Topology, DEFAULT_ENTITY_CORES, DEFAULT_HEARTBEAT_PERIOD,
    DEFAULT_HOLD_DOWN, DEFAULT_LIGHT_THRESHOLD, DEFAULT_MAX_GROUP, DEFAULT_MAX_PEERS,
    DEFAULT_MAX_STEAL_BACKOFF, DEFAULT_MAX_TIER, DEFAULT_MEMBER_TIMEOUT, DEFAULT_MIGRATION_TIMEOUT,
    DEFAULT_MIN_GAIN, DEFAULT_PEER_TIMEOUT, DEFAULT_PROFILE_PERIOD, DEFAULT_RRP_TTL,
    DEFAULT_SHED_AFTER, DEFAULT_STEAL_BACKOFF, DEFAULT_STEAL_PERIOD, DEFAULT_STEAL_TIMEOUT,
};
pub use shared::{
    is_loopback_name, Action, HostRefusal, KnownHost, KnownLoad, LeaveProgress, MigrationOutcome,
    ResizeReason, Stats, MAX_LEAVE_CALLS, MAX_PENDING_ACTIONS,
};
pub use stealing::StealRefusal;

use crate::message::{Message, MigrationId, MAX_ENTITIES};
use crate::model::{EntityId, EntityProfile, NodeProfile};
use crate::tier::{PeerId, PeerTable};

/// One IOS agent's decision and protocol logic. See the [crate docs](crate) for how a
/// driver runs it.
#[derive(Debug)]
pub struct Agent {
    /// What both strategies share.
    shared: Shared,
    /// NSp2p work stealing (an NSc2c manager's too, between clusters).
    stealing: Stealing,
    /// NSc2c: the cluster, its election and its balancing.
    cluster: Cluster,
    /// The widths of the malleable jobs run here, and since when load slows them.
    resizing: Resizing,
}

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
            stealing: Stealing::new(&config, now),
            cluster: Cluster::new(me.clone(), now, config.heartbeat_period),
            resizing: Resizing::default(),
            shared: Shared::new(me, host, config, rng, next_id),
        })
    }

    // ---- getters ----

    /// This agent's identity.
    pub fn id(&self) -> &PeerId {
        &self.shared.me
    }

    /// This agent's host name.
    pub fn host(&self) -> &HostName {
        &self.shared.host
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Known peers and their tiers.
    pub fn peers(&self) -> &PeerTable {
        &self.shared.peers
    }

    /// The host `peer` announced, if it did and the announcement was accepted.
    pub fn peer_host(&self, peer: &PeerId) -> Option<&HostName> {
        self.shared.hosts.get(peer)
    }

    /// The latest node profile.
    pub fn node_profile(&self) -> Option<&NodeProfile> {
        self.shared.node.as_ref()
    }

    /// The latest entity profiles.
    pub fn entities(&self) -> &[EntityProfile] {
        &self.shared.entities
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.shared.stats
    }

    /// Whether a work-steal round is waiting for an answer or for the promised work.
    pub fn is_stealing(&self) -> bool {
        self.stealing.is_stealing()
    }

    /// Whether a migration decided here is under way.
    pub fn is_migrating(&self) -> bool {
        self.shared.outgoing.is_some()
    }

    /// Whether the node is being drained ([`Agent::handle_leave`]).
    pub fn is_leaving(&self) -> bool {
        self.shared.leaving.is_some()
    }

    /// The drain's progress, once [`Agent::handle_leave`] was called.
    pub fn leave_progress(&self) -> Option<LeaveProgress> {
        self.shared.leaving.map(|l| LeaveProgress {
            started: l.started,
            entities_left: self.shared.entities.len(),
            moving: self.shared.outgoing.as_ref().map(|o| o.id),
            moved: l.moved,
            failed: l.failed,
        })
    }

    /// Until when an entity is held back from moving, if it is.
    pub fn held_until(&self, entity: &EntityId) -> Option<Instant> {
        self.shared.held.get(entity).copied()
    }

    // ---- inputs ----

    /// A round-trip time measured to `peer` (for example by libp2p ping).
    pub fn handle_peer_rtt(&mut self, now: Instant, peer: PeerId, rtt: Duration) {
        self.peer_rtt(now, &peer, rtt);
    }

    /// [`Agent::handle_peer_rtt`] with a borrowed id (the simulator feeds every agent's
    /// peers every RTT round, and copying each id was a tenth of that).
    pub(crate) fn peer_rtt(&mut self, now: Instant, peer: &PeerId, rtt: Duration) {
        if *peer == self.shared.me {
            return;
        }
        // A sample that changes neither the set of peers nor a tier changes no cluster
        // (member timeouts are the timer's business).
        if let Some(evicted) = self.shared.peers.record_rtt_evicting(now, peer, rtt) {
            self.cluster
                .peer_changed(&mut self.shared, now, peer, evicted.as_ref());
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
        if peer == self.shared.me || self.shared.hosts.get(&peer) == Some(&host) {
            return (Ok(()), None);
        }
        let mut evicted = None;
        let refusal = if is_loopback_name(&host) {
            Some(HostRefusal::Loopback { host })
        } else if host == self.shared.host {
            Some(HostRefusal::OwnHost { host })
        } else if let Some(holder) = self.shared.hosts.holder(&host).filter(|p| **p != peer) {
            let holder = holder.clone();
            if self.shared.contested.len() < self.shared.config.max_peers
                || self.shared.contested.contains_key(&host)
            {
                self.shared.contested.insert(host.clone(), peer);
            }
            Some(HostRefusal::Taken { host, holder })
        } else if !self.shared.hosts.contains_key(&peer)
            && self.shared.hosts.len() >= 2 * self.shared.config.max_peers
            && {
                evicted = self.evict_host();
                evicted.is_none()
            }
        {
            Some(HostRefusal::Full {
                max: 2 * self.shared.config.max_peers,
            })
        } else {
            self.shared.hosts.insert(peer.clone(), host);
            self.shared.measured_host_changed(&peer);
            self.cluster.host_known(&mut self.shared, now, &peer);
            None
        };
        let result = match refusal {
            Some(r) => {
                self.shared.stats.hosts_refused += 1;
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
        let awaited = self.cluster.awaited_host().cloned();
        let peers = &self.shared.peers;
        let contested = &self.shared.contested;
        let evicted = self.shared.hosts.evict_oldest(|peer, host| {
            peers.get(peer).is_some()
                || awaited.as_ref() == Some(peer)
                || contested.contains_key(host)
        });
        if let Some(peer) = &evicted {
            tracing::debug!(agent = %self.shared.me, %peer, "host of a peer outside the peer table dropped: table full");
            self.shared.stats.hosts_evicted += 1;
        }
        evicted
    }

    /// `peer` disconnected or left.
    pub fn handle_peer_gone(&mut self, now: Instant, peer: &PeerId) {
        self.shared.contested.retain(|_, claimant| claimant != peer);
        if let Some(host) = self.shared.hosts.remove(peer) {
            if let Some(next) = self.shared.contested.remove(&host) {
                tracing::info!(agent = %self.shared.me, %host, peer = %next, "host now announced by another agent");
                self.shared.measured_host_changed(&next);
                self.shared.hosts.insert(next, host);
            }
        }
        self.shared.peers.remove(peer);
        self.cluster.forget(&mut self.shared, peer);
        self.cluster.peers_changed(&mut self.shared, now);
    }

    /// The node's resources, sampled every [`Config::profile_period`]. Invalid profiles are
    /// dropped.
    pub fn handle_node_profile(&mut self, now: Instant, profile: NodeProfile) {
        match profile.validate() {
            Ok(()) => {
                self.shared.node = Some(profile);
                self.shared.node_at = Some(now);
                self.stealing.offer_work(&mut self.shared, now);
            }
            Err(e) => tracing::warn!(agent = %self.shared.me, "node profile dropped: {e}"),
        }
    }

    /// The local entities, from pcmd (all of them, each time). Invalid profiles are dropped;
    /// at most [`MAX_ENTITIES`] are kept.
    pub fn handle_entities(&mut self, now: Instant, mut entities: Vec<EntityProfile>) {
        entities.retain(|e| e.validate().is_ok());
        entities.truncate(MAX_ENTITIES);
        self.shared.entities = entities;
        self.resizing.observe_widths(&mut self.shared, now);
        self.resizing.rehint_refused(&mut self.shared, now);
        self.stealing.offer_work(&mut self.shared, now);
        self.resizing.shrink_if_due(&mut self.shared, now);
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
            .shared
            .entities
            .iter()
            .chain(self.cluster.member_entities(&self.shared))
            .flat_map(|e| e.partners.iter().map(|p| &p.host))
            .filter(|h| **h != self.shared.host)
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let hosts: Vec<HostName> = wanted.into_iter().cloned().collect();
        self.shared
            .partner_rtts
            .retain(|h, _| hosts.binary_search(h).is_ok());
        self.shared.partner_wanted.clone_from(&hosts);
        hosts
    }

    /// An RTT sample to `host`, one of the last [`Agent::hosts_to_measure`]. Samples of
    /// other hosts are ignored (they would grow the table without bound).
    pub fn handle_partner_rtt(&mut self, host: &HostName, rtt: Duration) {
        if self.shared.partner_wanted.binary_search(host).is_ok() {
            self.shared
                .partner_rtts
                .insert(host.clone(), rtt.as_secs_f64());
        }
    }

    /// NSc2c: the manager of this agent's cluster as this agent sees it (`None` in NSp2p).
    pub fn manager(&self) -> Option<&PeerId> {
        self.cluster.manager(&self.shared)
    }

    /// NSc2c: whether this agent is its cluster's manager.
    pub fn is_manager(&self) -> bool {
        self.cluster.is_manager(&self.shared)
    }

    /// NSc2c: the local peers that vote for this agent as manager and were heard within the
    /// member timeout (members send to their manager every heartbeat period), sorted.
    pub fn cluster_members(&self, now: Instant) -> Vec<&PeerId> {
        self.cluster.cluster_members(&self.shared, now)
    }

    /// NSc2c: how long a local peer that is neither this agent's manager nor its member may
    /// stay silent before it is taken as gone (its vote dropped, its seniority reset): the
    /// member timeout plus one whole gossip round of an agent with a full peer table,
    /// `max_peers / GOSSIP_FANOUT` heartbeat periods, plus one period for a peer that joins
    /// the round just behind the turn. Gone peers leave earlier when the peer table drops
    /// them (no RTT sample for the peer timeout, or a lost connection).
    pub fn gossip_timeout(&self) -> Duration {
        self.cluster.gossip_timeout(&self.shared)
    }

    /// NSc2c: how far apart two agents' first sightings may be for both to count as
    /// equally senior: discovery, the first RTT samples and the first heartbeat take a few
    /// seconds, so a peer heard that soon after this agent started was there before it.
    /// Twice the member timeout.
    pub fn seniority_grace(&self) -> Duration {
        self.cluster.seniority_grace(&self.shared)
    }

    /// Every other agent whose host this agent knows (its table of hosts: connected agents
    /// that announced one), with its tier and RTT if it is in the peer table and what it
    /// last reported of its load ([`KnownLoad`]), if anything; nearest tier first, then by
    /// host name. Built on demand (for `ios-agent status`), nothing kept for it.
    pub fn pool_hosts(&self, now: Instant) -> Vec<KnownHost> {
        self.shared.pool_hosts(now)
    }

    /// This agent's measured RTT to `host`, seconds, for the model's communication term: the
    /// least RTT seen lately to its peer on that host ([`crate::tier::PeerInfo::min_rtt`]),
    /// else the partner RTT it asked for ([`Agent::hosts_to_measure`]).
    pub fn rtt_to_host(&self, host: &HostName) -> Option<f64> {
        self.shared.rtt_to_host(host)
    }

    /// A message from agent `from` (as the transport authenticated it).
    pub fn handle_message(&mut self, now: Instant, from: PeerId, message: Message) {
        if let Err(e) = message.validate() {
            tracing::debug!(agent = %self.shared.me, %from, "invalid {}: {e}", message.kind());
            self.shared.stats.messages_refused += 1;
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
                within_hold_down,
            } => {
                self.stealing.on_steal_accepted(
                    &mut self.shared,
                    now,
                    &from,
                    id,
                    migration,
                    entities,
                    from_host,
                    within_hold_down,
                );
            }
            Message::StealExhausted { id } => {
                self.stealing
                    .on_steal_exhausted(&mut self.shared, &self.cluster, now, id);
            }
            Message::WorkAvailable => {
                self.stealing
                    .on_work_available(&mut self.shared, &self.cluster, now, from)
            }
            // Its connection did its work: the hosts are announced over it.
            Message::Introduce => {}
            Message::StealRedirect { id, manager } => {
                self.stealing
                    .on_steal_redirect(&mut self.shared, now, &from, id, manager)
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
            } => {
                self.cluster
                    .on_heartbeat(&mut self.shared, now, from, manager, successor, members)
            }
            Message::ProfileRequest { id } => {
                self.cluster
                    .on_profile_request(&mut self.shared, now, from, id)
            }
            Message::ProfileReply {
                id,
                host,
                node,
                entities,
                leaving,
                departed,
                near_hosts,
                partner_rtts,
            } => self.cluster.on_profile_reply(
                &mut self.shared,
                now,
                from,
                id,
                MemberView {
                    host,
                    node,
                    entities,
                    leaving,
                    departed,
                    near_hosts,
                    partner_rtts,
                },
            ),
            Message::MoveOrder {
                migration,
                entities,
                to,
                to_host,
                notify,
            } => self.cluster.on_move_order(
                &mut self.shared,
                now,
                from,
                Order {
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
        if self.shared.leaving.is_some() {
            return;
        }
        tracing::info!(agent = %self.shared.me, entities = self.shared.entities.len(), "leaving: draining the node");
        self.shared.leaving = Some(Leaving {
            started: now,
            next_call: now,
            moved: 0,
            failed: 0,
            last_moved: None,
        });
        self.stealing.on_leave(&mut self.shared, now);
    }

    /// The drain is given up (it did not finish in time and the node stays): the agent goes
    /// back to normal work. Entities already moved stay where they went.
    pub fn handle_stay(&mut self, now: Instant) {
        if self.shared.leaving.take().is_some() {
            tracing::info!(agent = %self.shared.me, entities = self.shared.entities.len(), "staying in the pool");
            self.stealing.on_stay(now);
        }
    }

    /// Timers: call when [`Agent::poll_timeout`]'s instant has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(deadline) = now.checked_sub(self.shared.config.peer_timeout) {
            if self.shared.peers.expire(deadline) > 0 {
                self.cluster.peers_changed(&mut self.shared, now);
            }
        }
        self.shared.held.retain(|_, until| *until > now);
        while self
            .shared
            .departed
            .front()
            .is_some_and(|(_, until)| *until <= now)
        {
            self.shared.departed.pop_front();
        }
        if let Some(out) = &self.shared.outgoing {
            if now >= out.deadline {
                tracing::warn!(agent = %self.shared.me, migration = %out.id, "migration timed out");
                self.finish_outgoing(now, false);
            }
        }
        self.cluster.tick(&mut self.shared, now);
        self.stealing.call_for_thieves(&mut self.shared, now);
        self.resizing.shrink_if_due(&mut self.shared, now);
        self.resizing.close_offer_window(&mut self.shared, now);
        self.stealing
            .on_timeout(&mut self.shared, &self.cluster, now);
    }

    /// The end of a migration started with [`Action::Migrate`].
    pub fn handle_migration_outcome(
        &mut self,
        now: Instant,
        id: MigrationId,
        outcome: MigrationOutcome,
    ) {
        if self.shared.outgoing.as_ref().is_some_and(|o| o.id == id) {
            if let MigrationOutcome::Failed { reason } = &outcome {
                tracing::info!(agent = %self.shared.me, migration = %id, "migration failed: {reason}");
            }
            self.finish_outgoing(now, outcome == MigrationOutcome::Completed);
        }
    }

    // ---- outputs ----

    /// The next thing the driver must do.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.shared.actions.pop_front()
    }

    /// When [`Agent::handle_timeout`] must next be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut add = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        if let Some(x) = self.stealing.timeout(&self.shared, &self.cluster) {
            add(x);
        }
        if let Some(o) = &self.shared.outgoing {
            add(o.deadline);
        }
        if let Some(l) = self
            .shared
            .leaving
            .filter(|_| self.stealing.calls_for_thieves(&self.shared))
        {
            add(l.next_call);
        }
        if let Some(oldest) = self.shared.peers.oldest_seen() {
            add(oldest + self.shared.config.peer_timeout);
        }
        if let Some(c) = self.cluster.timeout(&self.shared) {
            add(c);
        }
        if let Some(r) = self.resizing.resize_deadline(&self.shared) {
            add(r);
        }
        t
    }

    /// A work steal received from `from`: NSp2p's to work stealing; NSc2c's, once work
    /// stealing has checked it, to the cluster.
    fn on_work_steal(&mut self, now: Instant, from: PeerId, steal: Steal) {
        let Agent {
            shared,
            stealing,
            cluster,
            resizing,
        } = self;
        if let Some(c2c) = stealing.on_work_steal(shared, resizing, cluster, now, from, steal) {
            cluster.work_steal(shared, resizing, now, c2c);
        }
    }

    /// A migration this agent waited for ended (its own, or one it asked for).
    fn on_migration_finished(&mut self, now: Instant, migration: MigrationId, completed: bool) {
        self.stealing
            .on_migration_finished(&mut self.shared, now, migration, completed);
        self.cluster
            .order_finished(&mut self.shared, now, migration);
    }

    /// The move or resize under way ended.
    fn finish_outgoing(&mut self, now: Instant, completed: bool) {
        let Some(out) = self.shared.outgoing.take() else {
            return;
        };
        self.shared.settle_after = Some(now);
        // The hold-down counts from the end of the move, and so do the two hold-downs in
        // which the entities may not come back: counted from its start, a move that took a
        // few seconds let a rank back just inside two hold-downs of its arrival (1,000
        // simulated nodes, NSp2p, seed 3: 118.6 s after).
        for e in &out.entities {
            self.shared
                .held
                .insert(e.clone(), now + self.shared.config.hold_down);
        }
        self.shared.mark_departed(now, &out.entities, completed);
        match &out.resize {
            Some(resize) => self
                .resizing
                .finish_resize(&mut self.shared, now, resize, completed),
            None if completed => self.shared.stats.migrations_completed += 1,
            None => self.shared.stats.migrations_failed += 1,
        }
        if completed {
            self.shared
                .entities
                .retain(|e| !out.entities.contains(&e.id));
        }
        if let Some(leaving) = self.shared.leaving.as_mut() {
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
            Some(n) if n == self.shared.me => self.on_migration_finished(now, out.id, completed),
            Some(n) => self.shared.send(
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
