//! The agents' policy for malleable jobs (docs/agents.md, "Growing and shrinking"): when an
//! agent grows a job onto an idle node and when it shrinks one off its own node, with the
//! model of [`crate::resize`].
//!
//! - **Who grows a job**: only the agent of the node where the job's rank 0 runs (its
//!   *home* agent), so that two agents never grow one job at once; PCM's rule that a
//!   request made before a reconfiguration the job completed is superseded covers the rest
//!   (a request from an agent that has not yet seen the new width).
//! - **On what**: a work steal, the request an idle node already sends, from its origin
//!   itself. An agent of another rank of the job passes an idle node's steal to the home
//!   agent (every rank reports where rank 0 runs: [`Agent::grow_home`]), which hints the
//!   thief (work available), and the thief asks it over its own connection. The home agent
//!   weighs growing the job onto the thief by as many ranks as the thief has idle cores (and
//!   the job's limits allow) against moving a rank there: against a move of the same job by
//!   the job's predicted iteration after each ([`GrowPlan::beats_move`]), and a grow needs
//!   half a move's minimum gain. When the job's slowest rank (its ranks report its compute
//!   time) runs elsewhere, the move of that rank onto the thief is the one to beat; that
//!   rank's agent makes it, so the steal goes on. No message asks for a resize: the network can offer a
//!   node, never make a job change width, and a thief that is not idle is refused
//!   ([`super::Stats::grow_offers_refused`]).
//! - **Not while spread** (NSp2p): a job whose rank 0 exchanges with a partner beyond the
//!   local tier is not grown: the moves gather it first (onto one node, which a grown job
//!   would be too wide for), and it grows once its partners are near.
//! - **Shrinking** is decided by the agent of the node the ranks leave, for its own node,
//!   from its own profile: when it is leaving and no idle node took the job's ranks within
//!   one and a half steal periods of its calls for thieves, or of the last move off it
//!   (two profile periods more in NSc2c: [`leave_shrink_wait`]), or when
//!   competing load (its owner coming back) has slowed them for
//!   [`super::Config::with_shed_after`] with no idle node taking them and the model predicts
//!   the job runs faster without them.
//! - **Damping**: no agent resizes a job within a hold-down of a change of its width (seen
//!   in its ranks' profiles, or done by itself), nor sheds ranks that arrived within a
//!   hold-down; only a leaving node may. So a job does not grow and shrink back within its
//!   hold-down.

use std::collections::HashMap;
use std::time::Instant;

use pcm_proto::{HostName, JobId, Rank};

use super::{Action, Agent, Beneficiary, Outgoing, ResizeReason, Steal};
use crate::message::{Message, MigrationId};
use crate::model::{EntityId, EntityProfile, NodeProfile};
use crate::resize::{cpu_per_rank, ranks_for, resize_gain, JobTiming, ResizeGain};
use crate::tier::PeerId;

/// How long a leaving node waits for idle nodes to take a malleable job's ranks before it
/// shrinks the job off itself: one and a half steal periods. It calls every peer of its
/// table for thieves at once and again a steal period later (an idle node that took a hint
/// within the last steal period lets the first call pass); a thief that answers either call
/// steals within a round trip and is given the ranks, so half a steal period after the
/// second call nothing more is coming. (Three steal periods before: the main job's act
/// waited 6.2 to 6.6 s at the leave for an idle node the pool did not have.) The wait
/// starts again when a move off the node completes ([`super::Leaving::waiting_since`]):
/// the node calls for the next rank's thief then, and a job moves one reconfiguration at a
/// time. (Counted from the leave alone, a node whose two ranks an NSc2c manager was moving
/// shrank the job 1 s after the first move, with idle nodes taking the second in CI.)
///
/// NSc2c: the member's leave reaches its manager in the reply to the next poll, and the
/// manager orders a move from the replies it holds at the poll after: two profile periods
/// more (in CI a 2-rank node's second rank moved 2.0-2.9 s after its first, at 1 s
/// periods).
pub(crate) fn leave_shrink_wait(config: &super::Config) -> std::time::Duration {
    let calls = config.steal_period * 3 / 2;
    match config.topology {
        super::Topology::PeerToPeer => calls,
        super::Topology::ClusterToCluster => calls + config.profile_period * 2,
    }
}

/// Least CPU a grow gives an added rank when it counts how many ranks a thief can take
/// (half a core): below it, a node would be filled with processes that each barely run.
const MIN_CPU_PER_ADDED_RANK: f64 = 0.5;

/// The share of the minimum gain (`--min-gain`, a move's) that a grow needs. Why less: the
/// model takes all of a rank's MPI time as the exchange that does not divide, waiting
/// included, so a grow's predicted gain is low where the waiting divides with the
/// computing (heat2d 2048 x 2048 on the act's nodes: predicted `Delta` 0.10-0.12 before the
/// cost, 0.05-0.10 after it, where 3 ranks ran 1.43 times as fast as 2, `Delta` 0.18); and a
/// grow is not undone by the next steal as a move can be: the width hold-down damps it.
const GROW_MIN_GAIN_SHARE: f64 = 0.5;

/// A node's ranks of a job count as slowed when competing load leaves each less than this
/// share of what it would get without that load.
const SLOWED_SHARE: f64 = 0.9;

/// What the agent keeps about the widths of the jobs it runs ranks of.
#[derive(Debug, Default)]
pub(crate) struct Resizing {
    /// Per job: the width last seen in its ranks' profiles, and when it last changed (seen,
    /// or by a resize of this agent's); `None` if never seen to change.
    widths: HashMap<JobId, (u32, Option<Instant>)>,
    /// Per job with ranks here: since when competing load slows them.
    slowed_since: HashMap<JobId, Instant>,
    /// When a wait of [`Agent::shrink_if_due`] ends next ([`Agent::resize_deadline`]).
    wake: Option<Instant>,
    /// When this agent last asked for a shrink.
    last_shrink: Option<Instant>,
    /// Jobs a completed shrink took off this node, and when: pcmd may list their departed
    /// ranks for a moment longer (seen once in the main job's act: a leaving node asked for
    /// 2 -> 1 right after its 3 -> 2), and such a stale rank is not shrunk off again.
    shrunk_off: HashMap<JobId, Instant>,
}

/// A resize under way, kept with the [`Outgoing`] reconfiguration that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutgoingResize {
    /// The job grows onto another node.
    Grow(JobId),
    /// The job's ranks here leave it.
    Shrink(JobId),
}

impl OutgoingResize {
    /// The job resized.
    fn job(&self) -> &JobId {
        match self {
            OutgoingResize::Grow(job) | OutgoingResize::Shrink(job) => job,
        }
    }
}

/// The best grow of a job onto a thief.
#[derive(Debug, Clone)]
pub(crate) struct GrowPlan {
    pub(crate) job: JobId,
    pub(crate) from: u32,
    pub(crate) gain: ResizeGain,
    /// The job's predicted seconds per iteration if one of its ranks here moved to the
    /// thief instead, at its width now (the same model: [`GrowPlan::beats_move`]).
    pub(crate) iteration_if_moved: f64,
    /// The job's slowest rank runs elsewhere, slower than rank 0 here (its ranks report the
    /// slowest compute): moving that rank onto the thief, which its own agent decides, is
    /// the move to beat.
    pub(crate) slowest_elsewhere: bool,
}

impl GrowPlan {
    /// Whether growing beats `moving` (the move the same steal would make instead): when
    /// the move takes ranks of the grown job, whichever makes the job's predicted iteration
    /// shorter (a move's own gain, Figure 3's, weighs the nodes' resources, not the job's
    /// iteration, and is not on the grow's scale: a move of rank 0 between two unloaded
    /// nodes outweighed a grow that made the job 20% faster in the main job's act);
    /// otherwise the larger gain.
    pub(crate) fn beats_move(&self, moving: Option<&crate::decision::Plan>) -> bool {
        match moving {
            // The move of the job's slowest rank, on another node, is not this agent's to
            // make; growing while it stays slow must still beat it, or the thief is left to
            // that rank's agent (the steal goes on). (Seen in the main job's malleable act:
            // rank 1's node had a CPU hog, a joining node's steal reached rank 0's agent
            // first, and the job grew onto it, 2 -> 3 ranks with rank 1 still on the hogged
            // node, where moving rank 1 would have made its iterations a quarter shorter.)
            None if self.slowest_elsewhere => self.gain.iteration_after < self.iteration_if_moved,
            None => true,
            Some(plan) if plan.entities.iter().any(|e| e.job == self.job) => {
                self.gain.iteration_after < self.iteration_if_moved
            }
            Some(plan) => self.gain.gain > plan.gain.gain,
        }
    }
}

/// Why the home agent of a malleable job does not grow it onto a thief that asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrowRefusal {
    /// The thief shows fewer idle cores than the light threshold.
    NotIdle,
}

impl Agent {
    /// The CPU each of this node's entities gets: the node's capacity (without the
    /// competing load, or with it when `competing`) shared among them, at most
    /// [`super::Config::with_entity_cores`] each.
    fn cpu_per_entity(&self, node: &NodeProfile, competing: bool) -> f64 {
        let offered = if competing {
            node.entity_capacity()
        } else {
            node.cores * node.speed
        };
        cpu_per_rank(
            offered,
            self.entities.len().max(1) as u32,
            self.config.entity_cores,
        )
    }

    /// Notes the widths the entities' profiles show (called with every new list).
    pub(super) fn observe_widths(&mut self, now: Instant) {
        let mut seen: Vec<(JobId, u32)> = self
            .entities
            .iter()
            .filter(|e| e.job_ranks > 0)
            .map(|e| (e.id.job.clone(), e.job_ranks))
            .collect();
        seen.sort();
        seen.dedup_by(|a, b| a.0 == b.0);
        for (job, width) in seen {
            let entry = self.resizing.widths.entry(job).or_insert((width, None));
            if entry.0 != width {
                *entry = (width, Some(now));
            }
        }
        let hold = self.config.hold_down;
        self.resizing
            .shrunk_off
            .retain(|_, at| now.saturating_duration_since(*at) < hold * 2);
        let entities = &self.entities;
        self.resizing.widths.retain(|job, (_, changed)| {
            entities.iter().any(|e| &e.id.job == job)
                || changed.is_some_and(|at| now.saturating_duration_since(at) < hold * 2)
        });
    }

    /// Whether `job`'s width changed within the hold-down: it is not resized again yet.
    fn width_held(&self, job: &JobId, now: Instant) -> bool {
        self.resizing
            .widths
            .get(job)
            .and_then(|(_, changed)| *changed)
            .is_some_and(|at| now < at + self.config.hold_down)
    }

    /// NSp2p: the best grow of a malleable job whose rank 0 runs here onto the thief of
    /// `steal`, if one gains at least the minimum gain; `Err` when such a job could grow
    /// but the thief is not idle.
    pub(super) fn grow_plan(
        &self,
        now: Instant,
        node: &NodeProfile,
        thief: &Beneficiary,
    ) -> Result<Option<GrowPlan>, GrowRefusal> {
        if !self.config.resizes || self.leaving.is_some() || self.outgoing.is_some() {
            return Ok(None);
        }
        let growable: Vec<&EntityProfile> = self
            .entities
            .iter()
            .filter(|e| {
                e.id.rank == Rank(0)
                    && e.malleable
                        .is_some_and(|m| m.widths_above(e.job_ranks, u32::MAX).next().is_some())
                    && !self.width_held(&e.id.job, now)
            })
            .collect();
        if growable.is_empty() {
            return Ok(None);
        }
        if !thief.profile.is_lightly_loaded(self.config.light_threshold) {
            return Err(GrowRefusal::NotIdle);
        }
        let cpu_here = self.cpu_per_entity(node, true);
        let cpu_unloaded = self.cpu_per_entity(node, false);
        let thief_rtt = self
            .path_rtt_to_host(&thief.host)
            .unwrap_or(crate::model::DEFAULT_UNKNOWN_RTT.as_secs_f64());
        let mut best: Option<GrowPlan> = None;
        for rank0 in growable {
            let (Some(limits), Some(timing)) =
                (rank0.malleable, JobTiming::from_rank(rank0, cpu_here))
            else {
                continue;
            };
            // What the thief offers one more rank of this job (its own ranks of it, if any,
            // counted as busy), and the slowest rank's CPU now.
            let offer = thief.profile.for_job(&rank0.id.job, &thief.job_offers);
            // The added ranks exchange halos across the link to the thief each iteration.
            // The exchange time measured here already pays the round trip to rank 0's
            // farthest partner, so only a thief farther than that adds to it: about the
            // difference per iteration (the assumed far RTT for a thief never measured).
            // Without it a far idle node looked as good as a near one; charged in full,
            // the round trip between two agents on busy capped nodes (their scheduling
            // included) outweighed the grow of a job whose ranks already exchange over the
            // same kind of link (the main job's act never grew in CI). Partners unknown
            // (`ios-agent join` weighs them only with `--partners`), a job with ranks on
            // other nodes is taken to pay at least the round trip to the nearest other peer.
            let known_partners = rank0
                .partners
                .iter()
                .filter_map(|p| self.path_rtt_to_host(&p.host))
                .reduce(f64::max);
            let spans_nodes = self
                .entities
                .iter()
                .filter(|e| e.id.job == rank0.id.job)
                .count()
                < timing.ranks as usize;
            let paid_rtt = known_partners
                .or_else(|| {
                    spans_nodes
                        .then(|| {
                            self.peers
                                .by_rtt()
                                .filter(|(peer, _)| **peer != thief.peer)
                                .filter_map(|(peer, _)| self.peers.get(peer))
                                .map(|info| info.min_rtt.as_secs_f64())
                                .reduce(f64::min)
                        })
                        .flatten()
                })
                .unwrap_or(0.0);
            // A job whose rank 0 exchanges with a partner beyond the local tier is spread,
            // and its iterations wait on the network: the moves gather it onto one node
            // (`decision::gathering`: a node with a core for each of its other ranks),
            // which is worth more than any grow and needs the job to fit a node. Grown, it
            // is wider than the pool's nodes and stays spread: at 100 simulated nodes
            // (Internet-like) the agents grew jobs within two minutes of the start, from
            // their random first placement, and the grown jobs waited on latency for the
            // hour (NSp2p with half the jobs malleable did 0.912 of migration only's
            // iterations over seeds 1-8, 0.974 with this rule). (NSc2c gathers a job into a
            // place, its cluster's members near a node, which a grown job fits.)
            let spread =
                known_partners.is_some_and(|rtt| rtt > crate::tier::LOCAL_MAX_RTT.as_secs_f64());
            if spread && self.config.topology == super::Topology::PeerToPeer {
                continue;
            }
            let extra_rtt = (thief_rtt - paid_rtt).max(0.0);
            // As many ranks as it has idle cores, or as it can give each the CPU the job's
            // slowest rank gets (at least half a core each): the job goes at that pace.
            let slowest = timing.slowest_cpu();
            let room = ranks_for(&offer, self.config.entity_cores, u32::MAX).max(
                (offer.free_cores() * offer.speed / slowest.max(MIN_CPU_PER_ADDED_RANK)).floor()
                    as u32,
            );
            for to in limits.widths_above(timing.ranks, room) {
                let added = to - timing.ranks;
                let cpu_new = cpu_per_rank(
                    offer.free_cores() * offer.speed,
                    added,
                    self.config.entity_cores,
                );
                let cost = self.config.resize_cost.cost(
                    rank0.state_bytes.saturating_mul(u64::from(timing.ranks)),
                    timing.ranks,
                    to,
                    node.bandwidth.min(offer.bandwidth),
                );
                let gain = resize_gain(
                    &JobTiming {
                        exchange: timing.exchange + extra_rtt,
                        ..timing
                    },
                    to,
                    slowest.min(cpu_new),
                    cost,
                    rank0.life_expectancy(),
                    self.config.resize_cost.term,
                );
                tracing::debug!(
                    agent = %self.me,
                    job = %rank0.id.job,
                    onto = %thief.host,
                    from = timing.ranks,
                    to,
                    work_ms = timing.work * 1e3,
                    exchange_ms = timing.exchange * 1e3,
                    extra_rtt_ms = extra_rtt * 1e3,
                    iteration_now_ms = gain.iteration_now * 1e3,
                    iteration_after_ms = gain.iteration_after * 1e3,
                    cost_s = gain.cost,
                    delta = gain.delta,
                    gain = gain.gain,
                    "grow weighed"
                );
                if gain.gain >= self.config.min_gain * GROW_MIN_GAIN_SHARE
                    && best.as_ref().is_none_or(|b| gain.gain > b.gain.gain)
                {
                    // Moving a rank here instead: it gets what the thief offers one rank; the
                    // job's other ranks are taken to get what a rank gets here unloaded.
                    let cpu_moved = cpu_per_rank(
                        offer.free_cores() * offer.speed,
                        1,
                        self.config.entity_cores,
                    );
                    let iteration_if_moved = JobTiming {
                        exchange: timing.exchange + extra_rtt,
                        ..timing
                    }
                    .iteration_at(timing.ranks, cpu_moved.min(cpu_unloaded));
                    best = Some(GrowPlan {
                        job: rank0.id.job.clone(),
                        from: timing.ranks,
                        gain,
                        iteration_if_moved,
                        slowest_elsewhere: slowest < SLOWED_SHARE * cpu_here,
                    });
                }
            }
        }
        Ok(best)
    }

    /// NSp2p: the agent to pass a work steal of `thief` on to instead of a random peer:
    /// the home agent (the agent of rank 0's node) of a malleable job that has a rank here
    /// and may grow, when the thief is idle and the home agent is a peer not in `exclude`.
    ///
    /// Why: only the home agent grows a job, and an idle node's steals go to random peers.
    /// Asked by an agent of another rank, the steal used to go on at random (or end), and
    /// the idle node could ask for seconds without reaching the one agent that could grow
    /// the job onto it (the main job's malleable act moved a rank twice and never grew in
    /// CI). Passed on to the home agent, the steal gets it to weigh the grow; a forwarded
    /// steal is never acted on, so it hints the thief, which asks it directly.
    pub(crate) fn grow_home(&self, thief: &Beneficiary, exclude: &[&PeerId]) -> Option<PeerId> {
        if !self.config.resizes
            || self.config.topology != super::Topology::PeerToPeer
            || !thief.profile.is_lightly_loaded(self.config.light_threshold)
        {
            return None;
        }
        self.entities
            .iter()
            .filter(|e| {
                e.id.rank != Rank(0)
                    && e.malleable
                        .is_some_and(|m| m.widths_above(e.job_ranks, u32::MAX).next().is_some())
            })
            .filter_map(|e| e.home.as_ref())
            .filter(|home| **home != self.host && **home != thief.host)
            .filter_map(|home| self.hosts.holder(home))
            .find(|peer| self.peers.get(peer).is_some() && !exclude.contains(peer))
            .cloned()
    }

    /// The round trip of the path to `host`, seconds: the least RTT seen to its agent (what a
    /// halo exchange pays; the smoothed RTT between two agents on busy capped nodes adds
    /// their scheduling, 0.8 to 4.5 ms where the path's is a tenth of a millisecond in the
    /// main job's act), else the partner RTT asked for.
    fn path_rtt_to_host(&self, host: &HostName) -> Option<f64> {
        self.hosts
            .holder(host)
            .and_then(|peer| self.peers.get(peer))
            .map(|info| info.min_rtt.as_secs_f64())
            .or_else(|| self.partner_rtts.get(host).copied())
    }

    /// [`Agent::grow_plan`] for the thief of `steal` with this node's own profile, counting
    /// a refused offer.
    pub(crate) fn grow_for_steal(&mut self, now: Instant, steal: &Steal) -> Option<GrowPlan> {
        let node = self.own_profile()?;
        match self.grow_plan(now, &node, &steal.source) {
            Ok(grow) => grow,
            Err(GrowRefusal::NotIdle) => {
                self.stats.grow_offers_refused += 1;
                None
            }
        }
    }

    /// Grows a job onto the thief of `steal` as `plan` says, and tells the thief its steal
    /// is answered.
    pub(crate) fn start_grow(&mut self, now: Instant, plan: GrowPlan, steal: Steal) {
        let added = plan.gain.to - plan.from;
        tracing::info!(
            agent = %self.me,
            job = %plan.job,
            from = plan.from,
            to = plan.gain.to,
            onto = %steal.source.host,
            gain = plan.gain.gain,
            iteration_now = plan.gain.iteration_now,
            iteration_after = plan.gain.iteration_after,
            "growing a job"
        );
        let id = MigrationId(self.fresh_id());
        let new_ranks: Vec<EntityId> = (plan.from..plan.gain.to)
            .map(|r| EntityId {
                job: plan.job.clone(),
                rank: Rank(r),
            })
            .collect();
        self.start_resize(
            now,
            id,
            OutgoingResize::Grow(plan.job.clone()),
            plan.from,
            plan.gain.to,
            vec![steal.source.host.clone(); added as usize],
            ResizeReason::Grow {
                gain: plan.gain.gain,
            },
            Some(steal.origin.clone()),
        );
        self.send(
            steal.origin,
            Message::StealAccepted {
                id: steal.id,
                migration: id,
                entities: new_ranks,
                from_host: Some(self.host.clone()),
            },
        );
    }

    /// Queues a resize of `job` and keeps it as the reconfiguration under way.
    #[allow(clippy::too_many_arguments)]
    fn start_resize(
        &mut self,
        now: Instant,
        id: MigrationId,
        kind: OutgoingResize,
        from: u32,
        ranks: u32,
        hosts: Vec<HostName>,
        reason: ResizeReason,
        notify: Option<PeerId>,
    ) {
        let job = kind.job().clone();
        let leaving_here: Vec<EntityId> = match &kind {
            OutgoingResize::Shrink(job) => self
                .entities
                .iter()
                .filter(|e| &e.id.job == job)
                .map(|e| e.id.clone())
                .collect(),
            OutgoingResize::Grow(_) => Vec::new(),
        };
        self.stats.resizes_started += 1;
        self.outgoing = Some(Outgoing {
            id,
            notify,
            deadline: now + self.config.migration_timeout,
            entities: leaving_here,
            resize: Some(kind),
        });
        self.actions.push_back(Action::Resize {
            id,
            job,
            from,
            ranks,
            hosts,
            reason,
        });
    }

    /// The end of a resize this agent asked for: the job's width is held from now, and a
    /// shrink took the job's ranks off this node.
    pub(super) fn finish_resize(&mut self, now: Instant, resize: &OutgoingResize, completed: bool) {
        if completed {
            self.stats.resizes_completed += 1;
        } else {
            self.stats.resizes_failed += 1;
        }
        let job = resize.job();
        if let Some(entry) = self.resizing.widths.get_mut(job) {
            entry.1 = Some(now);
        } else {
            self.resizing.widths.insert(job.clone(), (0, Some(now)));
        }
        if completed {
            if let OutgoingResize::Shrink(job) = resize {
                self.entities.retain(|e| &e.id.job != job);
                self.resizing.slowed_since.remove(job);
                self.resizing.shrunk_off.insert(job.clone(), now);
            }
        }
    }

    /// A leaving node, or one whose competing load slows a malleable job's ranks, shrinks
    /// the job off itself when the time has come (see the module docs). Called on every
    /// timer and profile.
    pub(super) fn shrink_if_due(&mut self, now: Instant) {
        self.shrink_now_if_due(now);
        self.resizing.wake = self.next_resize_check(now);
    }

    fn shrink_now_if_due(&mut self, now: Instant) {
        if !self.config.resizes || self.outgoing.is_some() {
            return;
        }
        let Some(node) = self.node else {
            return;
        };
        if let Some(leaving) = &self.leaving {
            // A shrink the job refused is asked again at most once per steal period.
            let retry = self
                .resizing
                .last_shrink
                .is_none_or(|at| now >= at + self.config.steal_period);
            if retry && now >= leaving.waiting_since() + leave_shrink_wait(&self.config) {
                if let Some((job, from, to)) = self.shrinkable_jobs(now).first().cloned() {
                    tracing::info!(agent = %self.me, %job, from, to, "leaving: no idle node took the job's ranks; shrinking it off this node");
                    self.shrink(now, job, from, to, ResizeReason::Leave);
                }
            }
            return;
        }
        self.update_slowed(now, &node);
        let cpu_now = self.cpu_per_entity(&node, true);
        let cpu_free = self.cpu_per_entity(&node, false);
        let mut best: Option<(JobId, u32, u32, f64)> = None;
        for (job, from, to) in self.shrinkable_jobs(now) {
            let due = self
                .resizing
                .slowed_since
                .get(&job)
                .is_some_and(|since| now >= *since + self.config.shed_after);
            let settled = self
                .entities
                .iter()
                .filter(|e| e.id.job == job)
                .all(|e| e.resident >= self.config.hold_down && !self.held.contains_key(&e.id));
            if !due || !settled || self.width_held(&job, now) {
                continue;
            }
            // The job's rank here that computes longest stands for it: the slowed one.
            let Some(rank) = self
                .entities
                .iter()
                .filter(|e| e.id.job == job)
                .max_by(|a, b| a.compute.cmp(&b.compute))
            else {
                continue;
            };
            let Some(timing) = JobTiming::from_rank(rank, cpu_now) else {
                continue;
            };
            let cost = self.config.resize_cost.cost(
                rank.state_bytes.saturating_mul(u64::from(from)),
                from,
                to,
                node.bandwidth,
            );
            // The ranks that stay are taken to get what this node gives a rank without
            // its competing load (a pool of like nodes).
            let gain = resize_gain(
                &timing,
                to,
                cpu_free,
                cost,
                rank.life_expectancy(),
                self.config.resize_cost.term,
            );
            if gain.gain >= self.config.min_gain && best.as_ref().is_none_or(|b| gain.gain > b.3) {
                best = Some((job, from, to, gain.gain));
            }
        }
        if let Some((job, from, to, gain)) = best {
            tracing::info!(agent = %self.me, %job, from, to, gain, "competing load slows the job here and no idle node took its ranks; shrinking it off this node");
            self.shrink(now, job, from, to, ResizeReason::Shed { gain });
        }
    }

    /// The malleable jobs with ranks here that may lose all of them: `(job, width now,
    /// width after)`.
    fn shrinkable_jobs(&self, now: Instant) -> Vec<(JobId, u32, u32)> {
        let mut jobs: Vec<(JobId, u32, u32)> = Vec::new();
        let stale_after = self.config.hold_down * 2;
        for e in &self.entities {
            let Some(limits) = e.malleable else {
                continue;
            };
            let shrunk_lately = self
                .resizing
                .shrunk_off
                .get(&e.id.job)
                .is_some_and(|at| now.saturating_duration_since(*at) < stale_after);
            if jobs.iter().any(|(j, _, _)| *j == e.id.job) || e.job_ranks == 0 || shrunk_lately {
                continue;
            }
            let here = self
                .entities
                .iter()
                .filter(|o| o.id.job == e.id.job)
                .count() as u32;
            let to = e.job_ranks.saturating_sub(here);
            if to >= 1 && limits.allows(to) {
                jobs.push((e.id.job.clone(), e.job_ranks, to));
            }
        }
        jobs
    }

    /// Notes since when competing load slows each malleable job's ranks here.
    fn update_slowed(&mut self, now: Instant, node: &NodeProfile) {
        let slowed =
            self.cpu_per_entity(node, true) < SLOWED_SHARE * self.cpu_per_entity(node, false);
        let jobs: Vec<JobId> = if slowed && self.node_is_fresh() {
            self.entities
                .iter()
                .filter(|e| e.malleable.is_some())
                .map(|e| e.id.job.clone())
                .collect()
        } else {
            Vec::new()
        };
        self.resizing
            .slowed_since
            .retain(|job, _| jobs.contains(job));
        for job in jobs {
            self.resizing.slowed_since.entry(job).or_insert(now);
        }
    }

    fn shrink(&mut self, now: Instant, job: JobId, from: u32, to: u32, reason: ResizeReason) {
        self.resizing.last_shrink = Some(now);
        let id = MigrationId(self.fresh_id());
        let host = self.host.clone();
        self.start_resize(
            now,
            id,
            OutgoingResize::Shrink(job),
            from,
            to,
            vec![host],
            reason,
            None,
        );
    }

    /// When [`Agent::shrink_if_due`] must next run without a new profile: the end of a
    /// leaving node's wait, or of the shed wait of a slowed job.
    pub(super) fn resize_deadline(&self) -> Option<Instant> {
        self.resizing.wake.filter(|_| self.outgoing.is_none())
    }

    /// The next instant after `now` at which a wait of [`Agent::shrink_if_due`] ends. Only
    /// waits still running count: one that ended without a shrink (the gain too small, the
    /// ranks too new) is looked at again with each profile, never by a timer left in the
    /// past (the simulator's driver, like the real one, would call again at once, forever).
    fn next_resize_check(&self, now: Instant) -> Option<Instant> {
        if !self.config.resizes || self.outgoing.is_some() {
            return None;
        }
        match &self.leaving {
            Some(leaving) => {
                let waited = leaving.waiting_since() + leave_shrink_wait(&self.config);
                let retry = self
                    .resizing
                    .last_shrink
                    .map_or(waited, |at| (at + self.config.steal_period).max(waited));
                (retry > now && self.entities.iter().any(|e| e.malleable.is_some()))
                    .then_some(retry)
            }
            None => self
                .resizing
                .slowed_since
                .values()
                .map(|since| *since + self.config.shed_after)
                .filter(|at| *at > now)
                .min(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::agent::tests::{agent, drain, entity, forged, host, meet, peer, steal_from};
    use crate::agent::{Config, ResizeReason};
    use pcm_proto::{JobId, Malleability, SizeRule};

    const MS: Duration = Duration::from_millis(1);

    /// Rank `rank` of a malleable heat job of `ranks` ranks that computes `compute_ms` and
    /// spends `mpi_ms` in MPI per iteration.
    fn heat_rank(rank: u32, ranks: u32, compute_ms: u32, mpi_ms: u32) -> EntityProfile {
        let mut e = entity(rank, 0.6);
        e.job_ranks = ranks;
        e.compute = MS * compute_ms;
        e.mpi_wait = MS * mpi_ms;
        e.iteration_rate = 1000.0 / f64::from(compute_ms + mpi_ms);
        e.state_bytes = 1 << 20;
        e.malleable = Some(Malleability::new(1, 8).expect("valid"));
        e
    }

    /// An emulated node of 0.6 CPU with `load` runnable threads, `competing` of them not
    /// the job's.
    fn node(load: f64, competing: f64) -> NodeProfile {
        let mut n = NodeProfile::idle(0.6, 1 << 30);
        n.cpu_load = load;
        n.competing = competing;
        n
    }

    /// node-a, running `ranks`, has met node-c (idle, 0.6 CPU).
    fn home(now: Instant, ranks: Vec<EntityProfile>) -> Agent {
        let mut a = agent("node-a", now);
        meet(&mut a, now, "node-c", MS);
        a.handle_node_profile(now, node(0.6, 0.0));
        a.handle_entities(now, ranks);
        drain(&mut a);
        a
    }

    fn resizes(actions: &[Action]) -> Vec<(u32, u32, Vec<HostName>, ResizeReason)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Resize {
                    from,
                    ranks,
                    hosts,
                    reason,
                    ..
                } => Some((*from, *ranks, hosts.clone(), *reason)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn given_an_idle_node_asks_then_the_agent_of_rank_0_grows_its_malleable_job_onto_it() {
        let t0 = Instant::now();
        // Rank 0 of 2 computes 100 ms at 0.6 core and exchanges 5 ms: 2 -> 3 gains 0.19.
        let mut a = home(t0, vec![heat_rank(0, 2, 100, 5)]);
        a.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        let actions = drain(&mut a);
        let grown = resizes(&actions);
        assert_eq!(grown.len(), 1, "{actions:?}");
        let (from, to, hosts, reason) = &grown[0];
        assert_eq!((*from, *to), (2, 3));
        assert_eq!(hosts, &vec![host("node-c")]);
        assert!(matches!(reason, ResizeReason::Grow { gain } if *gain > 0.15 && *gain < 0.2));
        // The thief hears that work comes: the new rank 2.
        assert!(actions.iter().any(|a| matches!(a,
            Action::Send { to, message: Message::StealAccepted { entities, .. } }
                if *to == peer("node-c") && entities[0].rank == Rank(2))));
        assert_eq!(a.stats().resizes_started, 1);
        // One reconfiguration at a time: a second idle node's steal meanwhile grows nothing.
        meet(&mut a, t0, "node-d", MS);
        a.handle_message(t0, peer("node-d"), steal_from("node-d", 8, node(0.0, 0.0)));
        assert!(resizes(&drain(&mut a)).is_empty());
        // Done; the width is held for a hold-down, then node-d's steal grows it again.
        let t1 = t0 + Duration::from_secs(1);
        a.handle_migration_outcome(
            t1,
            MigrationId(a.next_id),
            crate::MigrationOutcome::Completed,
        );
        assert_eq!(a.stats().resizes_completed, 1);
        a.handle_entities(t1, vec![heat_rank(0, 3, 67, 5)]);
        a.handle_message(t1, peer("node-d"), steal_from("node-d", 9, node(0.0, 0.0)));
        assert!(
            resizes(&drain(&mut a)).is_empty(),
            "grown again within the hold-down"
        );
        let t2 = t1 + a.config().hold_down();
        a.handle_entities(t2, vec![heat_rank(0, 3, 67, 5)]);
        a.handle_message(t2, peer("node-d"), steal_from("node-d", 10, node(0.0, 0.0)));
        assert_eq!(resizes(&drain(&mut a))[0].1, 4);
    }

    /// Seen in the main job's malleable act: rank 1's node had a CPU hog, and a joining
    /// node's steal that reached rank 0's agent first grew the job onto it, leaving rank 1
    /// on the hogged node. With the job's slowest compute reported, rank 0's agent sees
    /// that moving that rank pays more and passes the steal on; a job that is only a little
    /// uneven still grows.
    #[test]
    fn given_a_slower_rank_elsewhere_that_a_move_relieves_better_then_the_job_does_not_grow() {
        let t0 = Instant::now();
        // Rank 0 computes 100 ms at 0.6 core; rank 1, on a loaded node, 200 ms: rank 0
        // waits 100 ms of its 205 in MPI. Grown to 3 with rank 1 still slow: 0.12 / 3 /
        // 0.3 + 0.005 = 0.138 s; rank 1 moved to the idle node: 0.105 s.
        let mut rank0 = heat_rank(0, 2, 100, 105);
        rank0.job_slowest_compute = Some(MS * 200);
        let mut a = home(t0, vec![rank0.clone()]);
        meet(&mut a, t0, "node-b", MS);
        a.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        let actions = drain(&mut a);
        assert!(resizes(&actions).is_empty(), "{actions:?}");
        // The steal goes on (to rank 1's agent, the only other peer).
        assert!(
            actions.iter().any(|x| matches!(x,
                Action::Send { to, message: Message::WorkSteal { .. } } if *to == peer("node-b"))),
            "{actions:?}"
        );
        // Only a little uneven (the slowest 110 ms): growing still beats the move.
        rank0.job_slowest_compute = Some(MS * 110);
        rank0.mpi_wait = MS * 15;
        let mut a = home(t0, vec![rank0]);
        a.handle_message(t0, peer("node-c"), steal_from("node-c", 8, node(0.0, 0.0)));
        assert_eq!(resizes(&drain(&mut a)).len(), 1);
    }

    /// What failed in CI: an idle node's steals went to the agents of other ranks of the
    /// job and on at random, never reaching the one agent that grows it. Now the agent of
    /// rank 1 passes them to the job's home agent, which hints the thief; the thief's
    /// direct steal grows the job.
    #[test]
    fn given_an_idle_node_asks_the_agent_of_another_rank_then_the_steal_reaches_the_home_agent() {
        let t0 = Instant::now();
        // node-b runs rank 1 (home node-a), unloaded: nothing to move; it knows node-a,
        // the thief node-c and eight more peers a random forward could pick.
        let mut b = agent("node-b", t0);
        let others: Vec<String> = (0..8).map(|i| format!("node-x{i}")).collect();
        for name in ["node-a", "node-c"]
            .into_iter()
            .chain(others.iter().map(String::as_str))
        {
            meet(&mut b, t0, name, MS);
        }
        b.handle_node_profile(t0, node(0.6, 0.0));
        let mut rank1 = heat_rank(1, 2, 100, 5);
        rank1.home = Some(host("node-a"));
        b.handle_entities(t0, vec![rank1.clone()]);
        drain(&mut b);
        let passed_to = |b: &mut Agent| -> Vec<PeerId> {
            drain(b)
                .into_iter()
                .filter_map(|a| match a {
                    Action::Send {
                        to,
                        message: Message::WorkSteal { .. },
                    } => Some(to),
                    _ => None,
                })
                .collect()
        };
        for id in 0..10 {
            b.handle_message(t0, peer("node-c"), steal_from("node-c", id, node(0.0, 0.0)));
            assert_eq!(passed_to(&mut b), vec![peer("node-a")], "steal {id}");
        }
        // A busy thief's steal, or one for a job at its widest, goes on at random.
        let mut sent = Vec::new();
        for id in 10..30 {
            b.handle_message(t0, peer("node-c"), steal_from("node-c", id, node(0.6, 0.0)));
            sent.extend(passed_to(&mut b));
        }
        assert!(sent.iter().any(|p| *p != peer("node-a")), "{sent:?}");
        let mut widest = rank1.clone();
        widest.malleable = Some(Malleability::new(1, 2).expect("valid"));
        b.handle_entities(t0, vec![widest]);
        drain(&mut b);
        let mut sent = Vec::new();
        for id in 30..50 {
            b.handle_message(t0, peer("node-c"), steal_from("node-c", id, node(0.0, 0.0)));
            sent.extend(passed_to(&mut b));
        }
        assert!(sent.iter().any(|p| *p != peer("node-a")), "{sent:?}");

        // The home agent, given the passed-on steal, hints the thief; its direct steal grows.
        let mut a = home(t0, vec![heat_rank(0, 2, 100, 5)]);
        meet(&mut a, t0, "node-b", MS);
        drain(&mut a);
        let mut forwarded = steal_from("node-c", 60, node(0.0, 0.0));
        if let Message::WorkSteal { ttl, .. } = &mut forwarded {
            *ttl -= 1;
        }
        a.handle_message(t0, peer("node-b"), forwarded);
        let actions = drain(&mut a);
        assert!(resizes(&actions).is_empty(), "{actions:?}");
        assert!(
            actions.iter().any(|x| matches!(x,
                Action::Send { to, message: Message::WorkAvailable } if *to == peer("node-c"))),
            "{actions:?}"
        );
        a.handle_message(t0, peer("node-c"), steal_from("node-c", 61, node(0.0, 0.0)));
        assert_eq!(resizes(&drain(&mut a)).len(), 1);
    }

    /// What the home agent weighed in the main job's act: a move of rank 0 between two
    /// unloaded nodes (Figure 3's gain above the grow's) against a grow that makes the job
    /// faster. Judged by the job's predicted iteration, the grow wins; a move of another
    /// job's ranks is still weighed by the gains.
    #[test]
    fn given_a_move_of_the_same_job_then_the_shorter_predicted_iteration_wins() {
        let t0 = Instant::now();
        let a = home(t0, vec![heat_rank(0, 2, 100, 5)]);
        let thief = Beneficiary {
            peer: peer("node-c"),
            host: host("node-c"),
            profile: node(0.0, 0.0),
            job_offers: Vec::new(),
            departed: Vec::new(),
        };
        let grow = a
            .grow_plan(t0, &node(0.6, 0.0), &thief)
            .expect("idle thief")
            .expect("a grow");
        // Moving rank 0 to a node like its own leaves the job's iteration as it is (105 ms),
        // plus the round trip to the thief (1 ms, no other peer paid for).
        assert!(grow.gain.iteration_after < grow.iteration_if_moved);
        assert!((grow.iteration_if_moved - 0.106).abs() < 1e-9, "{grow:?}");
        let breakdown = |gain: f64| crate::model::GainBreakdown {
            deltas: [0.0; 3],
            improvement: gain,
            cost_secs: 0.0,
            life_expectancy_secs: 1.0,
            cost_term: 0.0,
            communication: 0.0,
            gain,
        };
        let same_job = crate::decision::Plan {
            entities: vec![entity(0, 0.6).id],
            gain: breakdown(0.9),
        };
        assert!(grow.beats_move(Some(&same_job)));
        let mut other = entity(0, 0.6).id;
        other.job = JobId::new("other").expect("valid");
        let other_job = crate::decision::Plan {
            entities: vec![other],
            gain: breakdown(0.9),
        };
        assert!(!grow.beats_move(Some(&other_job)));
        assert!(grow.beats_move(None));
        // Rank 0 slowed here by competing load (half the node's core): moving it to the
        // idle thief beats keeping it and adding a rank.
        let loaded = node(1.0, 0.5);
        let slow = a
            .grow_plan(t0, &loaded, &thief)
            .expect("idle thief")
            .expect("a grow");
        assert!(
            slow.iteration_if_moved < slow.gain.iteration_after,
            "{slow:?}"
        );
        assert!(!slow.beats_move(Some(&same_job)));
    }

    /// A grow needs half the minimum gain a move needs (the model's exchange includes the
    /// ranks' waiting, so its gain is a low estimate).
    #[test]
    fn given_a_grow_gaining_half_the_minimum_gain_of_a_move_then_it_grows_and_below_it_not() {
        let t0 = Instant::now();
        // 40 ms computing, 60 ms in MPI: 3 ranks predicted at 86.7 ms, Delta 0.071 (the
        // cost over an hour's life: about 0.0001), between 0.05 and the minimum 0.1.
        let mut a = home(t0, vec![heat_rank(0, 2, 40, 60)]);
        a.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        assert_eq!(resizes(&drain(&mut a)).len(), 1);
        // 20 ms computing, 80 in MPI: 93.3 ms, Delta 0.035: no grow.
        let mut b = home(t0, vec![heat_rank(0, 2, 20, 80)]);
        b.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        assert!(resizes(&drain(&mut b)).is_empty());
    }

    #[test]
    fn given_an_idle_node_that_can_feed_two_ranks_at_the_jobs_pace_then_it_takes_two() {
        let t0 = Instant::now();
        // Ranks at 0.6 core; node-c has 1.2 idle cores: two ranks at 0.6 each, 2 -> 4.
        let mut a = home(t0, vec![heat_rank(0, 2, 100, 5)]);
        let mut big = node(0.0, 0.0);
        big.cores = 1.2;
        a.handle_message(t0, peer("node-c"), steal_from("node-c", 7, big));
        let grown = resizes(&drain(&mut a));
        assert_eq!(grown.len(), 1);
        assert_eq!((grown[0].0, grown[0].1), (2, 4));
        assert_eq!(grown[0].2, vec![host("node-c"), host("node-c")]);
    }

    #[test]
    fn given_a_far_idle_node_then_the_job_does_not_grow_onto_it() {
        let t0 = Instant::now();
        // Rank 0 of 2, 100 ms computing and 5 ms exchanging: onto a node 1 ms away 2 -> 3
        // gains 0.18; 60 ms away, with no other peer as far, the round trip each iteration
        // makes it a loss.
        let mut near = home(t0, vec![heat_rank(0, 2, 100, 5)]);
        near.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        assert_eq!(resizes(&drain(&mut near)).len(), 1);
        let mut far = agent("node-a", t0);
        meet(&mut far, t0, "node-c", MS * 60);
        far.handle_node_profile(t0, node(0.6, 0.0));
        far.handle_entities(t0, vec![heat_rank(0, 2, 100, 5)]);
        drain(&mut far);
        far.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        assert!(resizes(&drain(&mut far)).is_empty());
        // A job whose ranks already exchange across 60 ms (its nearest other peer, node-b)
        // pays no more on a node as far: it grows.
        let mut spread = agent("node-a", t0);
        meet(&mut spread, t0, "node-b", MS * 60);
        meet(&mut spread, t0, "node-c", MS * 60);
        spread.handle_node_profile(t0, node(0.6, 0.0));
        spread.handle_entities(t0, vec![heat_rank(0, 2, 100, 5)]);
        drain(&mut spread);
        spread.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        assert_eq!(resizes(&drain(&mut spread)).len(), 1);
    }

    /// A job whose rank 0 exchanges with a partner beyond the local tier is spread: it is
    /// not grown, not even onto a near idle node, so that moves can still gather it onto
    /// one node (a grown job is wider than a node holds). Its partners near, it grows.
    #[test]
    fn given_a_job_spread_beyond_the_local_tier_then_it_does_not_grow_until_gathered() {
        let t0 = Instant::now();
        let grows_with_partner_at = |rtt: Duration| {
            let mut a = agent("node-a", t0);
            meet(&mut a, t0, "node-b", rtt);
            meet(&mut a, t0, "node-c", MS);
            a.handle_node_profile(t0, node(0.6, 0.0));
            let mut rank0 = heat_rank(0, 2, 100, 5);
            rank0.partners = vec![crate::model::Partner {
                host: host("node-b"),
                exchanges_per_sec: 1.0,
            }];
            a.handle_entities(t0, vec![rank0]);
            drain(&mut a);
            a.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
            resizes(&drain(&mut a))
        };
        assert!(grows_with_partner_at(MS * 60).is_empty());
        assert_eq!(grows_with_partner_at(MS * 5).len(), 1);
    }

    #[test]
    fn given_a_job_of_fixed_width_or_rank_0_elsewhere_then_no_grow() {
        let t0 = Instant::now();
        let mut fixed = heat_rank(0, 2, 100, 5);
        fixed.malleable = None;
        let mut a = home(t0, vec![fixed]);
        a.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        assert!(resizes(&drain(&mut a)).is_empty());
        assert_eq!(a.stats().grow_offers_refused, 0);
        // Rank 1 runs here, rank 0 elsewhere: its home agent decides, not this one.
        let mut b = home(t0, vec![heat_rank(1, 2, 100, 5)]);
        b.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        assert!(resizes(&drain(&mut b)).is_empty());
        // At its maximum width, or with a rule no larger width meets soon: no grow.
        let mut full = heat_rank(0, 2, 100, 5);
        full.malleable = Some(Malleability::new(1, 2).expect("valid"));
        let mut c = home(t0, vec![full]);
        c.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        assert!(resizes(&drain(&mut c)).is_empty());
        let mut squares = heat_rank(0, 4, 100, 5);
        squares.malleable = Some(
            Malleability::new(1, 16)
                .expect("valid")
                .with_rule(SizeRule::Square),
        );
        let mut d = home(t0, vec![squares]);
        // 4 -> 9 needs five idle cores; the thief has 0.6.
        d.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        assert!(resizes(&drain(&mut d)).is_empty());
    }

    #[test]
    fn given_an_offer_from_a_busy_node_or_passed_on_then_nothing_grows_and_it_is_counted() {
        let t0 = Instant::now();
        let mut a = home(t0, vec![heat_rank(0, 2, 100, 5)]);
        // node-c shows 0.1 idle core: not light.
        a.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.5, 0.5)));
        let actions = drain(&mut a);
        assert!(resizes(&actions).is_empty());
        assert_eq!(a.stats().grow_offers_refused, 1);
        // node-d's steal arrives through node-c: node-d is told to ask itself.
        meet(&mut a, t0, "node-d", MS);
        let mut passed_on = steal_from("node-d", 8, node(0.0, 0.0));
        if let Message::WorkSteal { ttl, .. } = &mut passed_on {
            *ttl = 2;
        }
        a.handle_message(t0, peer("node-c"), passed_on);
        let actions = drain(&mut a);
        assert!(resizes(&actions).is_empty(), "{actions:?}");
        assert_eq!(a.stats().grow_offers_refused, 2);
        assert!(actions.iter().any(|a| matches!(a,
            Action::Send { to, message: Message::WorkAvailable } if *to == peer("node-d"))));
    }

    /// A pool-key holder sends the home agent steals that claim another origin, another
    /// source, or a host other than the one the sender announced: no grow, whatever the
    /// fake idle 64 cores offered, and nothing passed on.
    #[test]
    fn given_forged_offers_then_no_job_grows() {
        let t0 = Instant::now();
        let mut a = home(t0, vec![heat_rank(0, 2, 100, 5)]);
        meet(&mut a, t0, "node-k", MS);
        for message in [
            forged("node-x", "node-y", "localhost"),
            forged("node-k", "node-c", "node-c"),
            forged("node-k", "node-k", "node-c"),
        ] {
            a.handle_message(t0, peer("node-k"), message);
        }
        let actions = drain(&mut a);
        assert!(resizes(&actions).is_empty(), "{actions:?}");
        assert!(a.stats().steals_refused >= 3, "{:?}", a.stats());
        assert_eq!(a.stats().resizes_started, 0);
    }

    #[test]
    fn given_competing_load_slows_a_malleable_rank_and_no_idle_node_takes_it_then_the_job_sheds_it()
    {
        let t0 = Instant::now();
        let mut b = agent("node-b", t0);
        // Rank 2 of 3 here; a hog takes 0.4 of the node's 0.6 CPU: it computes 150 ms.
        let straggler = || heat_rank(2, 3, 150, 5);
        b.handle_node_profile(t0, node(1.4, 0.4));
        b.handle_entities(t0, vec![straggler()]);
        assert!(
            resizes(&drain(&mut b)).is_empty(),
            "not before the shed wait"
        );
        let shed_at = b.poll_timeout().expect("a deadline for the shed wait");
        assert_eq!(shed_at, t0 + Config::default().shed_after);
        let t1 = t0 + Config::default().shed_after;
        b.handle_node_profile(t1, node(1.4, 0.4));
        b.handle_entities(t1, vec![straggler()]);
        let shed = resizes(&drain(&mut b));
        assert_eq!(shed.len(), 1);
        let (from, to, hosts, reason) = &shed[0];
        assert_eq!((*from, *to, hosts.clone()), (3, 2, vec![host("node-b")]));
        assert!(matches!(reason, ResizeReason::Shed { gain } if *gain > 0.1));
        b.handle_migration_outcome(
            t1,
            MigrationId(b.next_id),
            crate::MigrationOutcome::Completed,
        );
        assert!(b.entities().is_empty(), "the job's rank left this node");

        // A wait that ended without a shed leaves no timer behind: a timer in the past
        // would be called again at once, forever.
        let mut young = agent("node-b", t0);
        let mut newcomer = straggler();
        newcomer.resident = Duration::from_secs(1);
        young.handle_node_profile(t0, node(1.4, 0.4));
        young.handle_entities(t0, vec![newcomer.clone()]);
        let t2 = t1 + Duration::from_secs(1);
        young.handle_timeout(t2);
        assert!(resizes(&drain(&mut young)).is_empty());
        assert!(
            young.poll_timeout().is_none_or(|t| t > t2),
            "a timer left in the past"
        );

        // The load leaves within the wait: nothing is shed.
        let mut quiet = agent("node-b", t0);
        quiet.handle_node_profile(t0, node(1.4, 0.4));
        quiet.handle_entities(t0, vec![straggler()]);
        quiet.handle_node_profile(t0 + Duration::from_secs(5), node(0.6, 0.0));
        quiet.handle_entities(t0 + Duration::from_secs(5), vec![heat_rank(2, 3, 50, 5)]);
        quiet.handle_node_profile(t1, node(0.6, 0.0));
        quiet.handle_entities(t1, vec![heat_rank(2, 3, 50, 5)]);
        assert!(resizes(&drain(&mut quiet)).is_empty());

        // A rank that arrived within the hold-down stays (no grow and shrink back).
        let mut fresh = agent("node-b", t0);
        let mut newcomer = straggler();
        newcomer.resident = Duration::from_secs(5);
        fresh.handle_node_profile(t0, node(1.4, 0.4));
        fresh.handle_entities(t0, vec![newcomer.clone()]);
        fresh.handle_node_profile(t1, node(1.4, 0.4));
        fresh.handle_entities(t1, vec![newcomer]);
        assert!(resizes(&drain(&mut fresh)).is_empty());

        // A job of fixed width is not shed, and nor is one at its minimum.
        let mut fixed = agent("node-b", t0);
        let mut rank = straggler();
        rank.malleable = None;
        fixed.handle_node_profile(t0, node(1.4, 0.4));
        fixed.handle_entities(t0, vec![rank.clone()]);
        fixed.handle_node_profile(t1, node(1.4, 0.4));
        fixed.handle_entities(t1, vec![rank]);
        assert!(resizes(&drain(&mut fixed)).is_empty());
        let mut at_min = agent("node-b", t0);
        let mut rank = straggler();
        rank.malleable = Some(Malleability::new(3, 8).expect("valid"));
        at_min.handle_node_profile(t0, node(1.4, 0.4));
        at_min.handle_entities(t0, vec![rank.clone()]);
        at_min.handle_node_profile(t1, node(1.4, 0.4));
        at_min.handle_entities(t1, vec![rank]);
        assert!(resizes(&drain(&mut at_min)).is_empty());
    }

    #[test]
    fn given_a_leaving_node_that_no_idle_node_relieves_then_it_shrinks_the_job_off_itself() {
        let t0 = Instant::now();
        let mut c = agent("node-c", t0);
        meet(&mut c, t0, "node-a", MS);
        c.handle_node_profile(t0, node(0.6, 0.0));
        c.handle_entities(t0, vec![heat_rank(2, 3, 67, 5)]);
        drain(&mut c);
        c.handle_leave(t0);
        assert!(
            resizes(&drain(&mut c)).is_empty(),
            "idle nodes get their chance first"
        );
        let wait = leave_shrink_wait(&Config::default());
        assert_eq!(c.poll_timeout().map(|t| t <= t0 + wait), Some(true));
        c.handle_timeout(t0 + wait);
        let shrunk = resizes(&drain(&mut c));
        assert_eq!(
            shrunk,
            vec![(3, 2, vec![host("node-c")], ResizeReason::Leave)]
        );
        // Refused by the job: asked again one steal period later, not at once.
        c.handle_migration_outcome(
            t0 + wait,
            MigrationId(c.next_id),
            crate::MigrationOutcome::Failed {
                reason: "busy".to_owned(),
            },
        );
        c.handle_timeout(t0 + wait);
        assert!(resizes(&drain(&mut c)).is_empty(), "asked again at once");
        let retry = t0 + wait + Config::default().steal_period;
        assert_eq!(c.poll_timeout().map(|t| t <= retry), Some(true));
        c.handle_timeout(retry);
        assert_eq!(resizes(&drain(&mut c)).len(), 1);
        c.handle_migration_outcome(
            t0 + wait,
            MigrationId(c.next_id),
            crate::MigrationOutcome::Completed,
        );
        assert!(c.leave_progress().is_some_and(|p| p.is_drained()));
        // pcmd still lists the departed rank, now rank 1 of 2: no second shrink of the job.
        let later = t0 + wait * 2;
        c.handle_entities(later, vec![heat_rank(1, 2, 67, 5)]);
        c.handle_timeout(later + Config::default().steal_period);
        assert!(
            resizes(&drain(&mut c)).is_empty(),
            "a stale rank shrunk off again"
        );
    }

    #[test]
    fn given_a_leaving_node_the_pool_is_relieving_then_the_shrink_waits_from_the_last_move() {
        // Seen in CI (NSc2c): the manager moved one of the leaving node's two ranks 2 s into
        // the leave, and the node shrank the job 1 s later, with idle nodes left to take the
        // other rank.
        let t0 = Instant::now();
        let wait = leave_shrink_wait(&Config::default());
        let mut c = agent("node-c", t0);
        meet(&mut c, t0, "node-a", MS);
        c.handle_node_profile(t0, node(0.6, 0.0));
        c.handle_entities(t0, vec![heat_rank(1, 3, 67, 5), heat_rank(2, 3, 67, 5)]);
        drain(&mut c);
        c.handle_leave(t0);
        drain(&mut c);
        let idle = NodeProfile::idle(0.6, 1 << 30);
        let asked = t0 + wait * 2 / 3;
        c.handle_message(asked, peer("node-a"), steal_from("node-a", 1, idle));
        let moves = crate::agent::tests::migrations(&drain(&mut c));
        assert_eq!(moves.len(), 1, "one rank at a time");
        let moved = t0 + wait * 5 / 6;
        c.handle_migration_outcome(moved, moves[0].0, crate::MigrationOutcome::Completed);
        drain(&mut c);
        // When the wait from the leave ends, the node is still being relieved: no shrink.
        c.handle_timeout(t0 + wait);
        assert!(resizes(&drain(&mut c)).is_empty(), "shrank while relieved");
        // No thief for the other rank within the wait from the move: shrunk off.
        assert_eq!(
            c.poll_timeout().map(|t| t <= moved + wait),
            Some(true),
            "no timer for the end of the wait"
        );
        c.handle_timeout(moved + wait);
        let shrunk = resizes(&drain(&mut c));
        assert_eq!(shrunk.len(), 1, "{shrunk:?}");
        assert_eq!(shrunk[0].3, ResizeReason::Leave);
    }

    #[test]
    fn with_resizes_off_the_agent_only_migrates() {
        let t0 = Instant::now();
        let mut a = agent("node-a", t0);
        a.config = a.config.clone().with_resizes(false);
        meet(&mut a, t0, "node-c", MS);
        a.handle_node_profile(t0, node(0.6, 0.0));
        a.handle_entities(t0, vec![heat_rank(0, 2, 100, 5)]);
        a.handle_message(t0, peer("node-c"), steal_from("node-c", 7, node(0.0, 0.0)));
        assert!(resizes(&drain(&mut a)).is_empty());
    }
}
