//! The decision component: which entities to move where, on top of the [RSM](crate::model).
//!
//! One selection routine, [`select`], serves both strategies: NSp2p asks "what can this node
//! give to the source of a work-steal packet", NSc2c's manager asks the same question for the
//! pair of nodes its ratio rule picked ([`balance`]). Every move passes the same gates:
//! damping (no entity moves twice within the hold-down time), memory feasibility, the gain of
//! Figure 3 above `min_gain` and above 0 (so no move whose predicted cost exceeds its
//! improvement), one job per move.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use pcm_proto::JobId;

use crate::model::{
    communication, gain_near, EntityId, EntityProfile, GainBreakdown, JobOffer, MigrationCostModel,
    NodeProfile, Resource, RttView, Weights,
};

/// How much more CPU than its share of its node an entity must be offered elsewhere before
/// it is worth moving (0.1: 10% more).
pub const MIN_CPU_ADVANTAGE: f64 = 0.1;

/// How much less CPU than it has now an entity may be offered when the move brings it nearer
/// its partners ([`select_near`]): 10%.
pub const MAX_CPU_LOSS_FOR_LATENCY: f64 = 0.1;

/// How much more CPU per rank a node must give a whole job than its ranks get in the place
/// that holds it before the job moves there (`gathering`, relocation): 25%, so that two
/// places of about one speed never trade a job.
pub const RELOCATION_ADVANTAGE: f64 = 0.25;

/// A job moves whole to a faster node only while it waits little on the network: the moving
/// rank's MPI time at most this share of its compute (`gathering`, relocation). A job
/// that waits on latency in its place is spread there, and its ranks would not all follow.
pub const RELOCATION_MAX_WAIT: f64 = 0.25;

/// Whether CPU rate `a` is [`RELOCATION_ADVANTAGE`] more than `b`.
fn much_faster(a: f64, b: f64) -> bool {
    a >= (1.0 + RELOCATION_ADVANTAGE) * b
}

/// Everything [`select`] needs besides the two nodes.
#[derive(Debug, Clone, Copy)]
pub struct Policy<'a> {
    /// Resource weights.
    pub weights: &'a Weights,
    /// Migration cost predictor.
    pub cost: &'a MigrationCostModel,
    /// Smallest gain worth a move (the move also needs gain > 0).
    pub min_gain: f64,
    /// Largest group moved at once (1: single migration).
    pub max_group: usize,
    /// An entity resident on its node for less than this does not move.
    pub hold_down: Duration,
    /// Entities that must not move before the given time (recently ordered or moved).
    pub held: &'a HashMap<EntityId, Instant>,
    /// The current time.
    pub now: Instant,
    /// The entities' node is leaving the pool: they must go, so any destination with free
    /// CPU (and the memory) takes them, whatever the gain; the gain still ranks which goes
    /// first. Damping (`hold_down`, `held`) is the caller's to lift.
    pub leaving: bool,
    /// Cores one entity can use at most, if known (an MPI rank with one thread: 1). The
    /// destination's idle CPU then counts only up to that much per moved entity, in the gate
    /// and in the gain. `None` is the paper's model: all of `f`'s idle CPU counts, so an idle
    /// many-core node draws a rank away from a core it has to itself.
    pub entity_cores: Option<f64>,
    /// A move predicted to take longer than this is refused, whatever its gain: the agent
    /// would give it up half way (its migration timeout). With the paper's cost term such a
    /// move never had a gain; an amortised one can pay for a long move of a long job.
    pub max_move_time: Duration,
    /// What the entities' node offers the jobs it runs and how many of each job's entities
    /// it holds ([`NodeProfile::job_offers`] of all its entities); empty when not known.
    /// Weighing a job's gathering needs them ([`select_near`]).
    pub jobs_here: &'a [JobOffer],
    /// A step of gathering (`gathering`, with the communication term) takes, in one move
    /// and whatever `max_group`, every rank of the job here that the destination node itself
    /// has an idle core for ([`select_near`]). NSp2p's givers, and NSc2c managers answering
    /// a steal since 2026-12-04 (a group that lands on one member is spread again by the
    /// manager's intra-cluster balancing only onto members near all of each rank's
    /// partners).
    pub gather_in_one_move: bool,
    /// A rank of a malleable job goes, with the communication term, only where the
    /// destination's own RTTs (an unmeasured one taken as
    /// [`crate::model::DEFAULT_UNKNOWN_RTT`]) keep each of its partners within the local
    /// tier ([`crate::tier::LOCAL_MAX_RTT`]) or no farther than now, unless it is a step of
    /// gathering the job or its node is leaving ([`select_near`]). NSp2p's givers when they
    /// grow jobs: a grown job is wider than a node and straddles nodes by design.
    pub keep_near_partners: bool,
    /// A rank that arrived within its hold-down may still take a step of gathering to a
    /// place that holds more of its job than its own ([`joins_larger_part`]), after
    /// [`GATHER_SETTLE`], unless it is `held`: a job spread over far nodes then gathers in
    /// a few minutes instead of one step per hold-down. The agents hold a rank so moved a
    /// hold-down from its arrival, so it moves at most twice within a hold-down
    /// ([`crate::Config::with_gather_within_hold_down`]).
    pub gather_within_hold_down: bool,
}

impl Policy<'_> {
    /// Whether the entity may move now (damping).
    pub fn eligible(&self, e: &EntityProfile) -> bool {
        e.resident >= self.hold_down && self.held.get(&e.id).is_none_or(|until| self.now >= *until)
    }
}

/// A decided move: a group of entities of one job, with the model's evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The entities, all of one job.
    pub entities: Vec<EntityId>,
    /// `gain(l, f, entities)`.
    pub gain: GainBreakdown,
}

/// Chooses up to `max_count` (and `policy.max_group`) entities on `l` to move to `f`, or
/// `None` when no move has enough gain.
///
/// Candidates are ranked by their single gain, then by compute share (the straggler other
/// ranks wait for first: busy-polling makes waiting ranks look as busy), then by id. The best
/// candidate's job is chosen; the group grows along the ranking, within that job, while the
/// group's gain stays at or above `min_gain` and its memory fits on `f`.
pub fn select<'d>(
    policy: &Policy<'_>,
    l: &NodeProfile,
    entities: &[EntityProfile],
    f: impl Into<Destination<'d>>,
    max_count: usize,
) -> Option<Plan> {
    select_near(policy, l, entities, f, max_count, None)
}

/// The node entities would move to: its profile, and what it offers entities of the jobs it
/// already runs ([`NodeProfile::job_offers`]; none known: the profile alone).
#[derive(Debug, Clone, Copy)]
pub struct Destination<'a> {
    /// The node's resources.
    pub node: &'a NodeProfile,
    /// Its offers to the jobs it runs entities of.
    pub job_offers: &'a [JobOffer],
}

impl<'a> From<&'a NodeProfile> for Destination<'a> {
    fn from(node: &'a NodeProfile) -> Self {
        Destination {
            node,
            job_offers: &[],
        }
    }
}

impl Destination<'_> {
    /// What the node offers a group of `n` entities of `job`: the job's view of it
    /// ([`NodeProfile::for_job`]), with at most `entity_cores` idle cores per entity.
    fn offer(&self, job: &JobId, n: usize, entity_cores: Option<f64>) -> NodeProfile {
        let view = self.node.for_job(job, self.job_offers);
        match entity_cores {
            Some(c) => view.with_idle_at_most(c * n as f64),
            None => view,
        }
    }
}

/// [`select`] with the model's communication term ([`gain_near`]) when `rtts` gives what `l`
/// and `f` know of their latencies to the entities' partners. An entity whose move brings it
/// nearer its partners (communication term > 0) may then also go to a node that offers it
/// less than 10% more CPU than its share here, as long as it offers at least 90% of it
/// ([`MAX_CPU_LOSS_FOR_LATENCY`]); the gain, communication included, decides. With it, the
/// ranks of a job that `l`'s place holds most of ([`holds_most`]) leave only to gather
/// elsewhere (`gathering`), unless `l` is leaving; and with
/// [`Policy::gather_in_one_move`], a step of gathering moves all of the job's ranks here
/// that the gathering node has idle cores for, beyond `max_count`.
pub fn select_near<'d>(
    policy: &Policy<'_>,
    l: &NodeProfile,
    entities: &[EntityProfile],
    f: impl Into<Destination<'d>>,
    max_count: usize,
    rtts: Option<(&RttView<'_>, &RttView<'_>)>,
) -> Option<Plan> {
    let to: Destination<'_> = f.into();
    let f = to.node;
    let max_count = max_count.min(policy.max_group).max(1);
    // The entities must get clearly more CPU at `f` than their share of `l`. The RSM's `U` is
    // what an entity uses, and a rank that waits for a slow peer uses little (Open MPI
    // blocks or yields while it waits): without this gate, the waiting rank of an
    // uncontended node would look like the best candidate, and moving it gains nothing.
    let mut share_here = l.entity_capacity() / entities.len().max(1) as f64;
    if rtts.is_some() {
        // What an entity can use of its share: no more than its cap.
        if let Some(c) = policy.entity_cores {
            share_here = share_here.min(c * l.speed);
        }
    }
    // What `f` offers a group of `n` entities of a job.
    let offer = |job: &JobId, n: usize| to.offer(job, n, policy.entity_cores);
    let nearer =
        |e: &EntityProfile| rtts.is_some_and(|(at_l, at_f)| communication(e, at_l, at_f) > 0.0);
    // Both rules below are about where a job's ranks run together, which only matters with
    // the communication term.
    let gathered =
        |e: &EntityProfile, n: usize| rtts.and(gathering(policy, l, &to, share_here, e, n));
    // `f` runs ranks of the job and gives each of the `n` a core of its own: the job already
    // waits for its ranks there, so the entities cannot slow it by computing there.
    let joins = |job: &JobId, n: usize| {
        rtts.is_some()
            && to.job_offers.iter().any(|o| &o.job == job && o.ranks > 0)
            && policy
                .entity_cores
                .is_some_and(|c| offer(job, n).free_cores() + 1e-9 >= c * n as f64)
    };
    // A place that gathers the entity's job and gives its ranks much more CPU than `f` would
    // keeps them from `joins`: the job is moving there (relocation, [`gathering`]), and the
    // slower place that holds the rest would pull them back.
    let keeps = |e: &EntityProfile| {
        policy.entity_cores.is_some_and(|c| {
            much_faster(share_here, c * f.speed)
                && policy
                    .jobs_here
                    .iter()
                    .any(|o| o.job == e.id.job && gathers(o, e.job_ranks, c))
        })
    };
    // A job that `l`'s place holds most of stays there together: its ranks leave only to
    // gather elsewhere ([`gathering`], relocation included), unless `l` is leaving. Why: on
    // the Internet-like network a job whose node its owner took back went, rank by rank,
    // to the nodes near that one that asked first, which were far from each other (traced
    // at 100 nodes: 8 ranks on 7 nodes, 300 to 500 ms of latency an iteration against 120
    // ms loaded where it was), and gathered again only after 5 to 15 minutes.
    let held = |e: &EntityProfile| {
        rtts.is_some()
            && policy.entity_cores.is_some()
            && !policy.leaving
            && e.job_ranks > 1
            && policy
                .jobs_here
                .iter()
                .any(|o| o.job == e.id.job && holds_most(o, e.job_ranks))
    };
    // Whether the job of `e` may lose its ranks here by a shrink (at least one rank left
    // elsewhere, a width its limits allow): only then may a leaving node keep `e` from a
    // thief far from its partners, or the node would never drain.
    let may_shrink_off = |e: &EntityProfile| {
        let here = policy
            .jobs_here
            .iter()
            .find(|o| o.job == e.id.job)
            .map_or(0, |o| o.ranks);
        let to = e.job_ranks.saturating_sub(here);
        here > 0 && to >= 1 && e.malleable.as_ref().is_some_and(|m| m.allows(to))
    };
    // A rank of a malleable job does not go where the thief itself measures, or has not
    // measured, a partner of it beyond the local tier and farther than `l` has it
    // (`Policy::keep_near_partners`; an unmeasured RTT is taken as
    // [`crate::model::DEFAULT_UNKNOWN_RTT`]: an agent keeps its nearest peers). Why: the
    // communication term takes a partner within local latency of `l` that `f` never
    // measured to be about as far from `f` as `l` is, which the Internet-like network
    // (pairs' RTTs drawn independently) does not honour. Traced at 100 simulated nodes
    // (seed 5): job5 grew 8 -> 14 onto n23, 3 ms from its rank 0's n92; n23's owner came
    // back and within 65 s n23 gave its six ranks one by one to six thieves 5 to 118 ms
    // from n23 and 3 to 258 ms from n92, which passed them on; the job waited 280 to 370
    // ms of latency an iteration for the rest of the hour. (Near rank 0's node alone was
    // not enough: nodes 10 ms from it were 300 ms from each other. Tried and worse: an
    // unmeasured partner taken as far as the farthest host the thief lists, or only
    // partners `l` has within the local tier checked: docs/results-log.md, 2026-12-03.)
    //
    // On a leaving node too, when the job may lose the ranks there by a shrink (then the
    // only rule that holds, before gathering: the ranks no near thief takes leave by that
    // shrink after `Resizing`'s leave wait). In the simulator a leaving node gave its
    // eight ranks of a job of eleven one by one to whichever thieves asked, some 500 ms
    // from each other, and the job, too wide for any one node to gather it, waited 30 to
    // 340 ms of latency an iteration for the rest of the hour (100 nodes, seed 4,
    // 2026-12-07).
    let strays = |e: &EntityProfile| {
        let unknown = crate::model::DEFAULT_UNKNOWN_RTT.as_secs_f64();
        let local = crate::tier::LOCAL_MAX_RTT.as_secs_f64();
        policy.keep_near_partners
            && (!policy.leaving || may_shrink_off(e))
            && e.malleable.is_some()
            && rtts.is_some_and(|(at_l, at_f)| {
                e.partners.iter().any(|p| {
                    let there = if p.host == *at_f.host {
                        0.0
                    } else {
                        at_f.rtts.rtt_to(&p.host).unwrap_or(unknown)
                    };
                    there > local && there > at_l.rtt(&p.host)
                })
            })
    };
    // The gain of moving `group` (of `job`) to `f`: the model's, without the CPU lost when
    // `f` runs the job (`joins`), or the job's [`gathering`] when that is more.
    let weigh = |group: &[&EntityProfile], job: &JobId| {
        let n = group.len();
        let mut g = gain_near(l, &offer(job, n), group, policy.weights, policy.cost, rtts);
        let w = policy.weights.get(Resource::Cpu);
        let kept = group.first().is_some_and(|e| keeps(e));
        if joins(job, n) && !kept && g.deltas[0] < 0.0 {
            g.improvement -= w * g.deltas[0];
            g.gain -= w * g.deltas[0];
            g.deltas[0] = 0.0;
        }
        if let Some(rate) = group.first().and_then(|e| gathered(e, n)) {
            let improvement = g.improvement + w * (rate - g.deltas[0]);
            let gain = improvement - g.cost_term;
            if gain > g.gain {
                g.deltas[0] = rate;
                g.improvement = improvement;
                g.communication = 0.0;
                g.gain = gain;
            }
        }
        g
    };
    // Whether `f` offers the entity enough CPU for a move, and `f` as the entity sees it.
    let passes = |e: &EntityProfile| {
        let f1 = offer(&e.id.job, 1);
        let offered = f1.availability(Resource::Cpu);
        let cpu_gate = offered >= share_here * (1.0 + MIN_CPU_ADVANTAGE);
        let latency_gate =
            rtts.is_some() && offered >= share_here * (1.0 - MAX_CPU_LOSS_FOR_LATENCY);
        if policy.leaving && strays(e) {
            return None;
        }
        let gate = gathered(e, 1).is_some()
            || (!held(e)
                && !strays(e)
                && (cpu_gate
                    || ((latency_gate || (joins(&e.id.job, 1) && !keeps(e))) && nearer(e))));
        gate.then_some(f1)
    };
    let fits = |mem: u64| mem <= f.memory_available;
    // A rank that arrived less than a hold-down ago may still take a step of gathering to
    // a place that holds more of its job than its own ([`joins_larger_part`]).
    let settled_gatherer = |e: &EntityProfile| {
        policy.gather_within_hold_down
            && e.resident >= GATHER_SETTLE.min(policy.hold_down)
            && policy
                .held
                .get(&e.id)
                .is_none_or(|until| policy.now >= *until)
            && joins_larger_part(policy, &to, e)
            && gathered(e, 1).is_some()
    };
    let mut ranked: Vec<(&EntityProfile, f64)> = entities
        .iter()
        .filter(|e| (policy.eligible(e) || settled_gatherer(e)) && fits(e.memory))
        .filter_map(|e| {
            passes(e)?;
            Some((e, weigh(&[e], &e.id.job).gain))
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then(b.0.compute_share().total_cmp(&a.0.compute_share()))
            .then(a.0.id.cmp(&b.0.id))
    });
    let (first, _) = *ranked.first()?;
    let job = &first.id.job;
    // One rank a steal, a job took a partner steal round (30 s apart to one host) per rank
    // to gather, and its split iterations waited on the network meanwhile: at 100 nodes a
    // job split 3/5 between an idle 8-core node and a loaded one was still split when the
    // hour ended (docs/results-log.md, "Scale", 2026-11-29 afternoon and evening).
    let in_one_move = policy.gather_in_one_move && gathered(first, 1).is_some();
    let max_count = if in_one_move { usize::MAX } else { max_count };
    // The idle cores of the gathering node itself (not its place's) for the group.
    let node_room = to
        .job_offers
        .iter()
        .find(|o| &o.job == job)
        .map_or(f.free_cores(), |o| o.cores);
    let room_for = |n: usize| {
        policy
            .entity_cores
            .is_some_and(|c| node_room + 1e-9 >= c * n as f64)
    };
    let mut group: Vec<&EntityProfile> = Vec::new();
    let mut best: Option<GainBreakdown> = None;
    let mut memory = 0u64;
    for (e, _) in ranked.iter().filter(|(e, _)| &e.id.job == job) {
        if group.len() >= max_count {
            break;
        }
        let mem = memory.saturating_add(e.memory);
        if !fits(mem) {
            break;
        }
        group.push(e);
        let n = group.len();
        if in_one_move && n > 1 && (gathered(first, n).is_none() || !room_for(n)) {
            group.pop();
            break;
        }
        let g = weigh(&group, job);
        let acceptable = if g.cost_secs > policy.max_move_time.as_secs_f64() {
            false
        } else if policy.leaving {
            // Staying is not possible: a destination that gives the entities any CPU at all
            // is better. Only lightly loaded nodes ask for work, so this is a node with room.
            f.availability(Resource::Cpu) > 0.0
        } else {
            g.gain > 0.0 && g.gain >= policy.min_gain
        };
        if !acceptable {
            group.pop();
            break;
        }
        memory = mem;
        best = Some(g);
    }
    let gain = best?;
    Some(Plan {
        entities: group.iter().map(|e| e.id.clone()).collect(),
        gain,
    })
}

/// Gathering a job on one node: whether moving `n` entities of `e`'s job (`e` among them)
/// from `l` to `to` is a step of gathering the whole job on `to`, and if so what it is worth
/// to the job: `Delta` of its iteration rate gathered on `to` against its rate now,
/// `(T_now - T_to) / (T_now + T_to)` in iteration times (the model's `Delta` with rates for
/// `A` and `U`). `share_here` is the CPU `e` gets on `l`, speed-normalised.
///
/// Why: the model weighs one rank at a time, and a rank gains little by joining one partner
/// when its other partners run elsewhere, so a job placed over many nodes stayed there
/// (docs/results-log.md, "Scale": at 1,000 nodes the agents' jobs computed as fast as the
/// oracle's and waited 100 ms per iteration on latency against its 2). The job's plan is
/// the unit: once all its ranks run on `to`, an iteration is their compute there, with no
/// exchange over the network.
///
/// The place the job gathers in is `to`, or in NSc2c `to` and the members of its cluster
/// near it ([`JobOffer::place`]).
/// A step of gathering needs the job's size (`job_ranks`) and a rank's cores
/// (`entity_cores`), and:
/// - the place runs ranks of the job already (but see relocation and seeding, below): an
///   idle node that runs none does not pull a job's ranks one by one from wherever they are (tried:
///   with every light node a gatherer, ranks of one job went to several of them, and
///   NSp2p's throughput on 100 nodes fell by a quarter, with ten times the moves);
/// - the place has a core for every rank of the job it does not run yet, and `to` the
///   memory for each of the `n` moved now and a core for each (in NSc2c, if `to` runs
///   ranks of the job, the place a core for each: the manager's intra-cluster balancing
///   spreads them from `to` over its near members, so a member that holds most of a job
///   gathers it though its own cores are busy; traced at 1,000 nodes, Grid-like: a job's
///   seven ranks filled one node of a cluster with 31 idle cores, and its eighth stayed
///   in another cluster for the hour);
/// - if `l`'s place could gather the job as well (it has cores for the ranks it lacks),
///   `to`'s holds more of its ranks (as many: `to` is faster than `l`), or gives a rank
///   [`RELOCATION_ADVANTAGE`] more CPU than `l` gives `e`, so two places never pull a job
///   apart; and never when `l` gives `e` that much more than `to` would;
/// - the job's iteration gathered on `to`, `e`'s compute on a core of `to`, is at least
///   [`MIN_CPU_ADVANTAGE`] shorter than its iteration now (`e`'s compute and MPI time).
///
/// Relocation, the one step towards a place that runs none of the job: when `l`'s place
/// holds most of the job ([`holds_most`]), which waits little on the network there (`e`'s
/// MPI time at most [`RELOCATION_MAX_WAIT`] of its compute), one rank may go to a node that
/// has a core for every rank of the job and gives a rank [`RELOCATION_ADVANTAGE`] more CPU
/// than `l` gives `e`; the rest then follow as above. Its worth is `Delta` of the two
/// rates. Why: a job gathered in a slow or loaded place stayed there (docs/results-log.md,
/// "Scale", 2026-11-29: on the Grid-like network NSc2c's jobs computed 76 ms per iteration
/// against the oracle's 65, with 1 ms of latency: they sat in slower clusters). Most of the
/// job and not only all of it, since [`select_near`] holds such a job's ranks in their
/// place: a job one rank short of whole would otherwise stay on a node its owner took back.
///
/// Seeding, the other step towards a place that runs none of the job: a job spread so that
/// no place holding part of it can gather it (`l`'s place holds at most half of it and has
/// no room for the rest) and that waits on the network (`e`'s MPI time more than
/// [`RELOCATION_MAX_WAIT`] of its compute) lets its rank 0, and only rank 0, go to a node
/// that has a core for every rank of the job, a core at least as fast as `e`'s share of
/// `l`, and on which the job gathered would iterate [`RELOCATION_ADVANTAGE`] faster than
/// `e` iterates now; the rest then follow as above. Why rank 0 alone: tried with any rank,
/// several idle nodes each started gathering one job and the jobs were chased from one to
/// the next (NSp2p lost a quarter of its throughput at 100 simulated nodes). Why at all: a
/// job that no holder can gather stays spread for the hour (docs/results-log.md, "Scale",
/// 2026-11-29 evening). Why only onto cores as fast: allowed onto slower ones, jobs
/// gathered but computed slower, and NSp2p lost on the Internet-like network.
fn gathering(
    policy: &Policy<'_>,
    l: &NodeProfile,
    to: &Destination<'_>,
    share_here: f64,
    e: &EntityProfile,
    n: usize,
) -> Option<f64> {
    if policy.leaving {
        return None;
    }
    let cores = policy.entity_cores?;
    let job = &e.id.job;
    let f = to.node;
    let here = policy.jobs_here.iter().find(|o| &o.job == job);
    // CPU a rank of the job gets in each place, speed-normalised: `e`'s share of `l`, and a
    // core of `f`'s.
    let (rate_l, rate_f) = (share_here, cores * f.speed);
    let Some(there) = to
        .job_offers
        .iter()
        .find(|o| &o.job == job && o.place().0 > 0)
    else {
        // The job's size and the rank's compute known: older agents' profiles give neither.
        let most_here = here.is_some_and(|o| holds_most(o, e.job_ranks));
        let compute = e.compute.as_secs_f64();
        let waits_little =
            compute > 0.0 && e.mpi_wait.as_secs_f64() <= RELOCATION_MAX_WAIT * compute;
        let room_for_all = n == 1
            && f.free_cores() + 1e-9 >= e.job_ranks as f64 * cores
            && e.memory <= f.memory_available;
        if room_for_all && most_here && waits_little && much_faster(rate_f, rate_l) {
            return Some((rate_f - rate_l) / (rate_f + rate_l));
        }
        // Seeding: the job's rank 0 only, so that one node at a time starts gathering it.
        let stuck = here.is_some_and(|o| {
            let (held, room) = o.place();
            let rest = (e.job_ranks as usize).saturating_sub(held);
            !holds_most(o, e.job_ranks) && room + 1e-9 < rest as f64 * cores
        });
        let seeds = room_for_all
            && e.id.rank.0 == 0
            && e.job_ranks > 1
            && stuck
            && compute > 0.0
            && !waits_little
            && rate_f >= rate_l;
        return seeds
            .then(|| iteration_gain(e, share_here, cores * f.speed, RELOCATION_ADVANTAGE))
            .flatten();
    };
    let (held_f, room_f) = there.place();
    let rest = (e.job_ranks as usize).saturating_sub(held_f);
    if !gathers(there, e.job_ranks, cores) || !(1..=rest).contains(&n) {
        return None;
    }
    let memory = e.memory.saturating_mul(n as u64);
    // In NSc2c the moved ranks need cores in the place, not on a `to` that runs ranks of
    // the job: the manager's intra-cluster balancing spreads them over its near members.
    let room_now = if there.place_ranks > 0 && there.ranks > 0 {
        room_f
    } else {
        there.cores
    };
    if room_now + 1e-9 < n as f64 * cores || memory > f.memory_available {
        return None;
    }
    if let Some(here) = here {
        let (held_l, room_l) = here.place();
        let lacking = (e.job_ranks as usize).saturating_sub(held_l);
        let l_could = room_l + 1e-9 >= lacking as f64 * cores;
        let f_wins = held_f > held_l
            || (held_f == held_l && f.speed > l.speed)
            || much_faster(rate_f, rate_l);
        if l_could && (much_faster(rate_l, rate_f) || !f_wins) {
            return None;
        }
    }
    iteration_gain(e, share_here, cores * f.speed, MIN_CPU_ADVANTAGE)
}

/// How long a rank stays where it arrived before a step of gathering may take it on
/// within its hold-down ([`joins_larger_part`]): its node's profile then shows it.
pub const GATHER_SETTLE: Duration = Duration::from_secs(2);

/// Whether `to`'s place holds more of `e`'s job than the place of `e`'s node
/// ([`JobOffer::place`]; both must be known). With [`Policy::gather_within_hold_down`], such
/// a step of gathering may take a rank that arrived within its hold-down ([`select_near`]). Why: the hold-down (60 s) made a job
/// spread over far nodes gather one step a minute, and the agents reached 0.67 of the
/// oracle in the first ten minutes (issue 42). Such moves alone cannot cycle: each goes to
/// a strictly larger part of its job, so the sum of the squares of the parts' sizes grows
/// with each; the thief bars the rank's return to the node it left for two hold-downs
/// anyway (`Shared::bar_return`), and every other move still waits the hold-down.
///
/// The bound: the giver tells the receiver that it moved the rank within its hold-down
/// ([`crate::Message::StealAccepted`]'s `within_hold_down`; an NSc2c manager that orders
/// such a move within its cluster knows it itself), and the receiver holds the rank (`held`)
/// a hold-down from its arrival. So of three moves of one entity in a row, the third
/// comes a hold-down after the second (a normal move: the entity's residence; a step
/// within the hold-down: held after the second if that was one too) or the second a
/// hold-down after the first: no entity moves more than twice within a hold-down, and the
/// second of two is a step of gathering. Without the bound (2026-12-04, `scale --nodes
/// 100 --seeds 1-32 --networks internet`): 0 ping-pongs, but up to 3 moves of one rank
/// within a hold-down.
fn joins_larger_part(policy: &Policy<'_>, to: &Destination<'_>, e: &EntityProfile) -> bool {
    let part = |offers: &[JobOffer]| {
        offers
            .iter()
            .find(|o| o.job == e.id.job)
            .map(|o| o.place().0)
    };
    matches!(
        (part(to.job_offers), part(policy.jobs_here)),
        (Some(there), Some(here)) if there > here
    )
}

/// `Delta` of `e`'s job's iteration, from now (`e`'s compute and MPI time) to gathered on
/// cores of rate `rate_f` (`e`'s compute there, no exchange over the network), if that is at
/// least `advantage` shorter; `share_here` is the CPU rate `e` computes at now.
fn iteration_gain(e: &EntityProfile, share_here: f64, rate_f: f64, advantage: f64) -> Option<f64> {
    let iteration = (e.compute + e.mpi_wait).as_secs_f64();
    let gathered = e.compute.as_secs_f64() * share_here / rate_f;
    let worth = iteration > 0.0 && gathered > 0.0 && gathered * (1.0 + advantage) <= iteration;
    worth.then(|| (iteration - gathered) / (iteration + gathered))
}

/// Whether the place `offer` describes ([`JobOffer::place`]) gathers its job of
/// `job_ranks` ranks: it holds some of them, not all, and has `cores` idle cores for each of
/// the others.
pub fn gathers(offer: &JobOffer, job_ranks: u32, cores: f64) -> bool {
    let (held, room) = offer.place();
    let rest = (job_ranks as usize).saturating_sub(held);
    held > 0 && rest > 0 && room + 1e-9 >= rest as f64 * cores
}

/// Whether the place `offer` describes ([`JobOffer::place`]) holds more than half of its
/// job of `job_ranks` ranks (a job of unknown size, 0, is held by none).
pub fn holds_most(offer: &JobOffer, job_ranks: u32) -> bool {
    job_ranks > 0 && 2 * offer.place().0 > job_ranks as usize
}

/// The jobs a node gathers ([`keep_for_gathering`]): those it runs ranks of and has a core
/// (`cores`) for each of their other ranks, most ranks here first, while their needs fit in
/// its idle cores.
pub fn gathering_jobs(profile: &NodeProfile, entities: &[EntityProfile], cores: f64) -> Vec<JobId> {
    let offers = profile.job_offers(entities);
    let (gathered, _) = gathered_offers(profile, &offers, entities, cores);
    offers
        .into_iter()
        .zip(gathered)
        .filter_map(|(o, g)| g.then_some(o.job))
        .collect()
}

/// Which of `offers` (the node's [`NodeProfile::job_offers`]) are for jobs it gathers, and
/// the cores kept for them.
fn gathered_offers(
    profile: &NodeProfile,
    offers: &[JobOffer],
    entities: &[EntityProfile],
    cores: f64,
) -> (Vec<bool>, f64) {
    let size = |job: &JobId| {
        entities
            .iter()
            .find(|e| &e.id.job == job)
            .map_or(0, |e| e.job_ranks as usize)
    };
    let mut order: Vec<usize> = (0..offers.len()).collect();
    order.sort_by(|&a, &b| offers[b].ranks.cmp(&offers[a].ranks).then(a.cmp(&b)));
    let idle = profile.free_cores();
    let mut kept = 0.0;
    let mut gathered = vec![false; offers.len()];
    for i in order {
        let o = &offers[i];
        let rest = size(&o.job).saturating_sub(o.ranks as usize) as f64 * cores;
        if rest > 0.0 && o.cores + 1e-9 >= rest && kept + rest <= idle + 1e-9 {
            kept += rest;
            gathered[i] = true;
        }
    }
    (gathered, kept)
}

/// What a node that gathers jobs (as [`select_near`] weighs it) shows thieves' givers: its
/// profile and job offers with the cores the rest of each such job needs kept for that job.
/// Other jobs are offered only what is left, and the profile shows the kept cores as busy.
///
/// A node gathers a job when it runs some of its ranks and has a core for each of the others
/// (`cores` per rank; jobs of unknown size are not gathered). Jobs are served by the ranks
/// the node holds, most first, while their needs fit in its idle cores.
///
/// Why: a node that gathered part of a job went on taking any rank its steals were given,
/// and once full it left the job split (docs/results-log.md, "Scale": with the cores kept,
/// NSp2p's throughput at 1,000 nodes rose by 8% on the Internet-like network and 2% on
/// the Grid-like one).
pub fn keep_for_gathering(
    profile: NodeProfile,
    mut offers: Vec<JobOffer>,
    entities: &[EntityProfile],
    cores: f64,
) -> (NodeProfile, Vec<JobOffer>) {
    let (gathered, kept) = gathered_offers(&profile, &offers, entities, cores);
    if kept <= 0.0 {
        return (profile, offers);
    }
    let left = (profile.free_cores() - kept).max(0.0);
    for (o, gathered) in offers.iter_mut().zip(gathered) {
        if !gathered {
            o.cores = o.cores.min(left);
        }
    }
    // A gathered job's offer stays: `NodeProfile::for_job` shows it its own room.
    let shown = NodeProfile {
        cpu_load: (profile.cores - left).max(profile.cpu_load),
        ..profile
    };
    (shown, offers)
}

/// What a cluster manager knows of one node of its cluster.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    /// The node's resources.
    pub node: &'a NodeProfile,
    /// Its entities.
    pub entities: &'a [EntityProfile],
}

impl NodeView<'_> {
    /// `r_{i,j}` for each resource: what the node offers to entities (availability with its
    /// own entities added back), in [`Resource::ALL`] order.
    fn offer(&self) -> [f64; 3] {
        Resource::ALL.map(|r| self.node.availability_without(r, self.entities))
    }
}

/// Ideal entity counts of NSc2c's intra-cluster rule, `n_1 / n_2 = sum_i w_i r_{i,1} /
/// sum_i w_i r_{i,2}`: the cluster's entities shared in proportion to each node's weighted
/// offer. Each resource is first normalised by its cluster total (CPU in cores and memory in
/// bytes cannot be added otherwise). Nodes that offer nothing get 0.
pub fn ideal_counts(weights: &Weights, nodes: &[NodeView<'_>]) -> Vec<f64> {
    let offers: Vec<[f64; 3]> = nodes.iter().map(|n| n.offer()).collect();
    let mut totals = [0.0; 3];
    for o in &offers {
        for i in 0..3 {
            totals[i] += o[i];
        }
    }
    let scores: Vec<f64> = offers
        .iter()
        .map(|o| {
            Resource::ALL
                .iter()
                .enumerate()
                .filter(|(i, _)| totals[*i] > 0.0)
                .map(|(i, r)| weights.get(*r) * o[i] / totals[i])
                .sum()
        })
        .collect();
    let total_score: f64 = scores.iter().sum();
    let n: usize = nodes.iter().map(|v| v.entities.len()).sum();
    scores
        .iter()
        .map(|s| {
            if total_score > 0.0 {
                n as f64 * s / total_score
            } else {
                0.0
            }
        })
        .collect()
}

/// One step of intra-cluster balancing: a move from the node furthest above its ideal count
/// to the node furthest below, if it brings the counts closer to the ideal ratio (the summed
/// distance must fall, so a cluster one entity off an even split does not oscillate) and
/// [`select`] approves it. `may_go(entity, from index, to index)` bars entities from a
/// destination (one they left lately, so that a load that comes and goes does not send them
/// back and forth; NSc2c: one far from their node, when they have partners). Returns
/// `(from index, to index, plan)`.
pub fn balance(
    policy: &Policy<'_>,
    nodes: &[NodeView<'_>],
    may_go: impl Fn(&EntityProfile, usize, usize) -> bool,
) -> Option<(usize, usize, Plan)> {
    let ideal = ideal_counts(policy.weights, nodes);
    let surplus: Vec<f64> = nodes
        .iter()
        .zip(&ideal)
        .map(|(v, i)| v.entities.len() as f64 - i)
        .collect();
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|a, b| surplus[*b].total_cmp(&surplus[*a]).then(a.cmp(b)));
    for &from in &order {
        for &to in order.iter().rev() {
            let spread = surplus[from] - surplus[to];
            if from == to || spread <= 1.0 + 1e-9 {
                continue;
            }
            // Moving k entities lowers the summed distance while k < spread.
            let k = ((spread / 2.0).floor() as usize).max(1);
            let offers = nodes[to].node.job_offers(nodes[to].entities);
            let destination = Destination {
                node: nodes[to].node,
                job_offers: &offers,
            };
            let entities = nodes[from].entities;
            let movable: Cow<'_, [EntityProfile]> = if entities.iter().all(|e| may_go(e, from, to))
            {
                Cow::Borrowed(entities)
            } else {
                Cow::Owned(
                    entities
                        .iter()
                        .filter(|e| may_go(e, from, to))
                        .cloned()
                        .collect(),
                )
            };
            if let Some(plan) = select(policy, nodes[from].node, &movable, destination, k) {
                return Some((from, to, plan));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
