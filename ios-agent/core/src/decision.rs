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
    /// has an idle core for ([`select_near`]). NSp2p's givers only: in NSc2c a group that
    /// lands on one member is spread again by the manager's intra-cluster balancing.
    pub gather_in_one_move: bool,
    /// A rank of a malleable job goes, with the communication term, only where the
    /// destination's own RTTs (an unmeasured one taken as
    /// [`crate::model::DEFAULT_UNKNOWN_RTT`]) keep each of its partners within the local
    /// tier ([`crate::tier::LOCAL_MAX_RTT`]) or no farther than now, unless it is a step of
    /// gathering the job or its node is leaving ([`select_near`]). NSp2p's givers when they
    /// grow jobs: a grown job is wider than a node and straddles nodes by design.
    pub keep_near_partners: bool,
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
    let strays = |e: &EntityProfile| {
        let unknown = crate::model::DEFAULT_UNKNOWN_RTT.as_secs_f64();
        let local = crate::tier::LOCAL_MAX_RTT.as_secs_f64();
        policy.keep_near_partners
            && !policy.leaving
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
        let gate = gathered(e, 1).is_some()
            || (!held(e)
                && !strays(e)
                && (cpu_gate
                    || ((latency_gate || (joins(&e.id.job, 1) && !keeps(e))) && nearer(e))));
        gate.then_some(f1)
    };
    let fits = |mem: u64| mem <= f.memory_available;
    let mut ranked: Vec<(&EntityProfile, f64)> = entities
        .iter()
        .filter(|e| policy.eligible(e) && fits(e.memory))
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
mod tests {
    use super::*;
    use pcm_proto::{JobId, Rank};

    fn entity(job: &str, rank: u32, cpu: f64) -> EntityProfile {
        let mut e = EntityProfile::new(
            EntityId {
                job: JobId::new(job).expect("valid"),
                rank: Rank(rank),
            },
            cpu,
        );
        e.resident = Duration::from_secs(3600);
        e.age = Duration::from_secs(3600);
        e
    }

    /// Rank `rank` of a `job_ranks`-rank job with 1 MiB of state, `compute_ms` of compute an
    /// iteration and `wait_ms` in MPI.
    fn job_rank(
        job: &str,
        rank: u32,
        job_ranks: u32,
        compute_ms: u64,
        wait_ms: u64,
    ) -> EntityProfile {
        let mut e = entity(job, rank, 1.0);
        e.job_ranks = job_ranks;
        e.memory = 1 << 20;
        e.compute = Duration::from_millis(compute_ms);
        e.mpi_wait = Duration::from_millis(wait_ms);
        e
    }

    fn node(cores: f64, load: f64) -> NodeProfile {
        NodeProfile {
            cpu_load: load,
            ..NodeProfile::idle(cores, 1 << 30)
        }
    }

    struct Fixture {
        weights: Weights,
        cost: MigrationCostModel,
        held: HashMap<EntityId, Instant>,
        now: Instant,
    }

    impl Fixture {
        fn new() -> Self {
            Fixture {
                weights: Weights::CPU_ONLY,
                cost: MigrationCostModel::default(),
                held: HashMap::new(),
                now: Instant::now(),
            }
        }
        fn policy(&self, max_group: usize) -> Policy<'_> {
            Policy {
                weights: &self.weights,
                cost: &self.cost,
                min_gain: 0.1,
                max_group,
                hold_down: Duration::from_secs(60),
                held: &self.held,
                now: self.now,
                leaving: false,
                entity_cores: None,
                max_move_time: Duration::from_secs(600),
                jobs_here: &[],
                gather_in_one_move: false,
                keep_near_partners: false,
            }
        }
    }

    /// A node's offer to `job`: `cores` idle cores, `ranks` of its ranks; no cluster.
    fn node_offer(job: &JobId, cores: f64, ranks: u32) -> JobOffer {
        JobOffer {
            job: job.clone(),
            cores,
            ranks,
            place_ranks: 0,
            place_room: 0.0,
        }
    }

    fn host(s: &str) -> pcm_proto::HostName {
        pcm_proto::HostName::new(s).expect("valid")
    }

    /// A node's view with the given measured RTTs, others assumed at 200 ms.
    fn view<'a>(
        host: &'a pcm_proto::HostName,
        rtts: &'a HashMap<pcm_proto::HostName, f64>,
    ) -> crate::model::RttView<'a> {
        crate::model::RttView {
            host,
            rtts,
            unknown: 0.2,
            unmeasured: crate::model::Unmeasured::Assumed,
        }
    }

    /// The communication term: with the CPU equal on both sides, a rank goes to the node of
    /// its partner and not away from it; and a CPU gain is refused when it takes the rank far
    /// from its partners.
    #[test]
    fn given_partners_then_the_rank_goes_to_them_and_not_away() {
        use crate::model::Partner;
        let fx = Fixture::new();
        let mut policy = fx.policy(1);
        policy.entity_cores = Some(1.0);
        let (a, b, c) = (host("a"), host("b"), host("c"));
        let none = HashMap::new();
        let (at_a, at_b, at_c) = (view(&a, &none), view(&b, &none), view(&c, &none));
        // Rank 0 on a (2 cores, its own core), its partner on b; b has an idle core.
        let mut e = entity("j", 0, 1.0);
        e.partners = vec![Partner {
            host: b.clone(),
            exchanges_per_sec: 20.0,
        }];
        let es = [e];
        let here = node(2.0, 1.0);
        let there = node(2.0, 1.0);
        // The paper's model: no CPU gain, no move.
        assert!(select(&policy, &here, &es, &there, 1).is_none());
        // s_a = 20 * 0.2 / 2 = 2, counted as 1 (all its time), s_b = 0: comm = 1 / 1.
        let plan = select_near(&policy, &here, &es, &there, 1, Some((&at_a, &at_b)))
            .expect("to the partner");
        assert!((plan.gain.communication - 1.0).abs() < 1e-12);
        // Not from b to c, away from it (s_c = 2: comm = -2 / 4), even to a node with two
        // free cores more, which the paper's model takes (Delta = (3 - 1) / (3 + 1)).
        let bigger = node(4.0, 1.0);
        assert!(select(&fx.policy(1), &there, &es, &bigger, 1).is_some());
        assert!(
            select_near(&fx.policy(1), &there, &es, &bigger, 1, Some((&at_b, &at_c))).is_none()
        );
        // To a node with less than 90% of its share: no move, however near.
        let small = node(0.8, 0.0);
        assert!(select_near(&policy, &here, &es, &small, 1, Some((&at_a, &at_b))).is_none());
    }

    /// A rank of a malleable job on a node whose owner came back (half a core each) goes to
    /// an idle thief 5 ms away for the CPU. Its partner on the job's first node, 3 ms from
    /// here, the thief never measured: the communication term charges it this node's 5 ms
    /// to the thief (the triangle estimate), so the move passes (CPU `Delta` (1 - 0.5) /
    /// 1.5 = 0.333; s_l = 10 x 0.003 / 2 = 0.015, s_f = 10 x 0.005 / 2 x 2 = 0.05, comm =
    /// -0.035 / 2.035 = -0.0172). With `keep_near_partners` the thief's own RTTs decide:
    /// unmeasured (200 ms assumed) or measured far, it does not go; measured within the
    /// local tier, it does; nor does the rule hold a leaving node's ranks, a fixed job's, or
    /// a rank whose partner is already farther from here than from the thief.
    #[test]
    fn given_a_thief_that_never_measured_the_partners_then_a_malleable_rank_does_not_go_to_it() {
        use crate::model::Partner;
        let fx = Fixture::new();
        let mut policy = fx.policy(1);
        policy.entity_cores = Some(1.0);
        let (l, f, h) = (host("l"), host("f"), host("h"));
        let rank = |r: u32, malleable: bool| {
            let mut e = entity("j", r, 0.5);
            e.job_ranks = 4;
            e.home = Some(h.clone());
            e.malleable = malleable.then(|| pcm_proto::Malleability::new(1, 8).expect("valid"));
            e.partners = vec![
                Partner {
                    host: h.clone(),
                    exchanges_per_sec: 10.0,
                },
                Partner {
                    host: l.clone(),
                    exchanges_per_sec: 10.0,
                },
            ];
            e
        };
        let es = [rank(2, true), rank(3, true)];
        let here = NodeProfile {
            cpu_load: 2.0,
            competing: 1.0,
            ..NodeProfile::idle(2.0, 1 << 30)
        };
        let thief = node(2.0, 0.0);
        let at_l_rtts: HashMap<_, _> = [(h.clone(), 0.003), (f.clone(), 0.005)].into();
        let at_l = view(&l, &at_l_rtts);
        let thief_with = |rtt_to_h: Option<f64>| -> HashMap<pcm_proto::HostName, f64> {
            let mut m: HashMap<_, _> = [(l.clone(), 0.005)].into();
            if let Some(rtt) = rtt_to_h {
                m.insert(h.clone(), rtt);
            }
            m
        };
        let moved = |policy: &Policy<'_>, es: &[EntityProfile], at_f: &HashMap<_, _>| {
            let at_f = view(&f, at_f);
            select_near(policy, &here, es, &thief, 1, Some((&at_l, &at_f)))
        };
        let unmeasured = thief_with(None);
        let plan = moved(&policy, &es, &unmeasured).expect("the triangle estimate lets it go");
        assert!((plan.gain.communication - (-0.035 / 2.035)).abs() < 1e-9);
        let mut near = policy;
        near.keep_near_partners = true;
        assert!(moved(&near, &es, &unmeasured).is_none());
        assert!(moved(&near, &es, &thief_with(Some(0.3))).is_none());
        assert!(moved(&near, &es, &thief_with(Some(0.004))).is_some());
        let leaving = Policy {
            leaving: true,
            ..near
        };
        assert!(moved(&leaving, &es, &unmeasured).is_some());
        let fixed = [rank(2, false), rank(3, false)];
        assert!(moved(&near, &fixed, &unmeasured).is_some());
        let far_rtts: HashMap<_, _> = [(h.clone(), 0.3), (f.clone(), 0.005)].into();
        let at_l_far = view(&l, &far_rtts);
        let at_f = view(&f, &unmeasured);
        assert!(select_near(&near, &here, &es, &thief, 1, Some((&at_l_far, &at_f))).is_some());
    }

    /// A rank goes to a slower node that runs ranks of its job and gives it a core: the job
    /// already waits for those ranks, so only the latency counts. To the same node without
    /// ranks of the job it does not go (it would compute slower than the job does now).
    #[test]
    fn given_a_node_that_runs_the_job_then_a_rank_joins_its_partner_there_though_it_is_slower() {
        use crate::model::Partner;
        let fx = Fixture::new();
        let mut policy = fx.policy(1);
        policy.entity_cores = Some(1.0);
        let (a, b) = (host("a"), host("b"));
        let none = HashMap::new();
        let (at_a, at_b) = (view(&a, &none), view(&b, &none));
        let mut e = entity("j", 0, 1.0);
        e.partners = vec![Partner {
            host: b.clone(),
            exchanges_per_sec: 20.0,
        }];
        let es = [e];
        // a: one core of speed 2, the rank's own; b: speed 1.4, one core busy, one idle.
        let here = NodeProfile {
            speed: 2.0,
            ..node(1.0, 1.0)
        };
        let there = NodeProfile {
            speed: 1.4,
            ..node(2.0, 1.0)
        };
        let rtts = Some((&at_a, &at_b));
        // b offers 1.4 against the 2 the rank has: under 90% of it.
        assert!(select_near(&policy, &here, &es, &there, 1, rtts).is_none());
        let runs_j = [JobOffer {
            job: JobId::new("j").expect("valid"),
            cores: 1.0,
            ranks: 1,
            place_ranks: 0,
            place_room: 0.0,
        }];
        let to = Destination {
            node: &there,
            job_offers: &runs_j,
        };
        let plan = select_near(&policy, &here, &es, to, 1, rtts).expect("joins the job");
        // The CPU it loses is not counted; the communication term (1: all its time is
        // latency to b) is.
        assert_eq!(plan.gain.deltas[0], 0.0);
        assert!((plan.gain.communication - 1.0).abs() < 1e-12);
        // Without its own core there the rule does not hold.
        let full = [JobOffer {
            cores: 0.5,
            ..runs_j[0].clone()
        }];
        let to = Destination {
            node: &there,
            job_offers: &full,
        };
        assert!(select_near(&policy, &here, &es, to, 1, rtts).is_none());
    }

    /// Gathering a job: a rank whose own latency would grow goes to the node that runs part
    /// of its job and has cores for the rest, when the job gathered there iterates faster
    /// than now; not when the node lacks a core for one of the ranks, when the giver holds
    /// more of the job and could gather it, when the gathered job would not be faster, or
    /// to an idle node that runs none of the job.
    #[test]
    fn given_a_node_with_part_of_a_job_and_room_for_the_rest_then_ranks_gather_there() {
        use crate::model::Partner;
        let fx = Fixture::new();
        let j = JobId::new("j").expect("valid");
        let offer = |cores: f64, ranks: u32| node_offer(&j, cores, ranks);
        let (l, f, c) = (host("l"), host("f"), host("c"));
        // l measured its rank's partner on c at 5 ms; f measured nothing: the model charges
        // the rank more latency at f (communication term < 0).
        let measured: HashMap<pcm_proto::HostName, f64> = [(c.clone(), 0.005)].into();
        let none = HashMap::new();
        let (at_l, at_f) = (view(&l, &measured), view(&f, &none));
        let rtts = Some((&at_l, &at_f));
        // A rank of a 4-rank job on l's only core: 60 ms of compute and 140 ms in MPI (its
        // job waits on latency elsewhere).
        let rank = |compute_ms: u64, wait_ms: u64| {
            let mut e = job_rank("j", 0, 4, compute_ms, wait_ms);
            e.partners = vec![Partner {
                host: c.clone(),
                exchanges_per_sec: 5.0,
            }];
            e
        };
        let es = [rank(60, 140)];
        let here_node = node(1.0, 1.0);
        let here = [offer(0.0, 1)];
        let mut policy = fx.policy(1);
        policy.entity_cores = Some(1.0);
        policy.jobs_here = &here;
        // f: 4 cores, 2 busy with ranks of the job, 2 idle (one for this rank, one for the
        // fourth).
        let f_node = node(4.0, 2.0);
        let room = [offer(2.0, 2)];
        let to = |offers| Destination {
            node: &f_node,
            job_offers: offers,
        };
        assert!(communication(&es[0], &at_l, &at_f) < 0.0);
        let plan = select_near(&policy, &here_node, &es, to(&room), 1, rtts).expect("gathers");
        // (200 - 60) / (200 + 60): the job's iteration now against gathered on f.
        assert!((plan.gain.deltas[0] - 140.0 / 260.0).abs() < 1e-9);
        assert_eq!(plan.gain.communication, 0.0);
        // Without the gathering, the same move is refused.
        let mut size_unknown = es.clone();
        size_unknown[0].job_ranks = 0;
        assert!(select_near(&policy, &here_node, &size_unknown, to(&room), 1, rtts).is_none());
        // f lacks a core for the fourth rank.
        let tight = [offer(1.0, 2)];
        assert!(select_near(&policy, &here_node, &es, to(&tight), 1, rtts).is_none());
        // l holds 3 of the ranks and has a core for the fourth: the job gathers on l.
        let could = [offer(1.0, 3)];
        let giver = Policy {
            jobs_here: &could,
            ..policy
        };
        assert!(select_near(&giver, &here_node, &es, to(&room), 1, rtts).is_none());
        // Gathered, the job would iterate in 60 ms against 65 now: not 10% faster.
        let busy = [rank(60, 5)];
        assert!(select_near(&policy, &here_node, &busy, to(&room), 1, rtts).is_none());
        // An idle node that runs none of the job does not pull a rank of it other than rank
        // 0 (seeding: `given_a_spread_job_that_no_holder_can_gather_then_its_rank_0_seeds_an_idle_node`).
        let idle = node(4.0, 0.0);
        let mut rank_2 = es.clone();
        rank_2[0].id.rank = Rank(2);
        assert!(select_near(&policy, &here_node, &rank_2, &idle, 1, rtts).is_none());
        assert!(select_near(&policy, &here_node, &es, &idle, 1, rtts).is_some());
        // NSc2c: a member that runs none of the job, in a cluster that runs 2 of its ranks
        // and has 2 idle cores, one of them the member's: the job gathers in that cluster.
        let in_cluster = |member_cores: f64| {
            [JobOffer {
                place_ranks: 2,
                place_room: 2.0,
                ..offer(member_cores, 0)
            }]
        };
        let member = node(1.0, 0.0);
        let gathers_in_cluster = |member_cores: f64| {
            let cluster = in_cluster(member_cores);
            let to = Destination {
                node: &member,
                job_offers: &cluster,
            };
            select_near(&policy, &here_node, &es, to, 1, rtts).is_some()
        };
        assert!(gathers_in_cluster(1.0));
        // Not to a member without a core for it.
        assert!(!gathers_in_cluster(0.0));
        // But to a full member that runs ranks of the job, its cluster's idle cores on other
        // members: the manager spreads them there.
        let holder = [JobOffer {
            place_ranks: 2,
            place_room: 2.0,
            ..offer(0.0, 2)
        }];
        let full = node(2.0, 2.0);
        let to_holder = Destination {
            node: &full,
            job_offers: &holder,
        };
        assert!(select_near(&policy, &here_node, &es, to_holder, 1, rtts).is_some());
        // Not when the cluster lacks a core for the job's last rank.
        let short = [JobOffer {
            place_room: 1.0,
            ..holder[0].clone()
        }];
        let to_short = Destination {
            node: &full,
            job_offers: &short,
        };
        assert!(select_near(&policy, &here_node, &es, to_short, 1, rtts).is_none());
        // NSp2p, the same full node with 2 ranks and no cluster: no core, no move.
        let alone = [offer(0.0, 2)];
        let to_alone = Destination {
            node: &full,
            job_offers: &alone,
        };
        assert!(select_near(&policy, &here_node, &es, to_alone, 1, rtts).is_none());
    }

    /// Relocation: a job held whole by a slow node moves, a rank at a time, to a node that
    /// runs none of it, has a core for each of its ranks and gives a rank 25% more CPU; not
    /// to one only 20% faster, nor to one a core short, nor when the job waits on latency
    /// or is not mostly in the giver's place. Once it is split, the faster place gathers it
    /// though it holds fewer ranks, and the slower place does not pull a rank back.
    #[test]
    fn given_a_whole_job_in_a_slow_place_then_it_moves_to_a_much_faster_node_and_not_back() {
        use crate::model::Partner;
        let fx = Fixture::new();
        let j = JobId::new("j").expect("valid");
        let offer = |cores: f64, ranks: u32| node_offer(&j, cores, ranks);
        let (l, f) = (host("l"), host("f"));
        let none = HashMap::new();
        let (at_l, at_f) = (view(&l, &none), view(&f, &none));
        // A rank of a 4-rank job, its partners on its own node: 100 ms of compute a
        // iteration, `wait_ms` in MPI.
        let rank = |wait_ms: u64| {
            let mut e = job_rank("j", 0, 4, 100, wait_ms);
            e.partners = vec![Partner {
                host: l.clone(),
                exchanges_per_sec: 20.0,
            }];
            e
        };
        let es = [rank(5)];
        // l: 4 cores of speed 1, all four ranks of the job.
        let slow = node(4.0, 4.0);
        let whole = [offer(0.0, 4)];
        let mut policy = fx.policy(1);
        policy.entity_cores = Some(1.0);
        policy.jobs_here = &whole;
        let rtts = Some((&at_l, &at_f));
        let idle = |cores: f64, speed: f64| NodeProfile {
            speed,
            ..node(cores, 0.0)
        };
        // Without relocation the move is refused: the rank would leave its partners.
        assert!(communication(&es[0], &at_l, &at_f) < 0.0);
        let fast = idle(4.0, 1.3);
        let plan = select_near(&policy, &slow, &es, &fast, 1, rtts).expect("relocates");
        assert!((plan.gain.deltas[0] - 0.3 / 2.3).abs() < 1e-9);
        assert!(select_near(&policy, &slow, &es, &idle(4.0, 1.2), 1, rtts).is_none());
        assert!(select_near(&policy, &slow, &es, &idle(3.0, 1.3), 1, rtts).is_none());
        let waiting = [rank(50)];
        assert!(select_near(&policy, &slow, &waiting, &fast, 1, rtts).is_none());
        // The job's size or the rank's compute not known (older agents): no relocation.
        let mut unsized_rank = rank(5);
        unsized_rank.job_ranks = 0;
        assert!(select_near(&policy, &slow, &[unsized_rank], &fast, 1, rtts).is_none());
        let mut unprofiled = rank(0);
        unprofiled.compute = Duration::ZERO;
        assert!(select_near(&policy, &slow, &[unprofiled], &fast, 1, rtts).is_none());
        // Half of the job in the giver's place: no relocation (most of it: see
        // `given_most_of_a_job_in_a_loaded_place_then_its_ranks_leave_only_together`).
        let half = [offer(0.0, 2)];
        let partly = Policy {
            jobs_here: &half,
            ..policy
        };
        assert!(select_near(&partly, &slow, &es, &fast, 1, rtts).is_none());
        // Split: f runs one rank and has 3 idle cores; l runs 3 and has the core of the one
        // that left. f gathers the job though it holds fewer of its ranks.
        let slow_with_room = node(4.0, 3.0);
        let l_holds = [offer(1.0, 3)];
        let f_holds = [offer(3.0, 1)];
        let giver = Policy {
            jobs_here: &l_holds,
            ..policy
        };
        let split = [rank(60)];
        let f_node = NodeProfile {
            speed: 1.3,
            ..node(4.0, 1.0)
        };
        let to_f = Destination {
            node: &f_node,
            job_offers: &f_holds,
        };
        assert!(select_near(&giver, &slow_with_room, &split, to_f, 1, rtts).is_some());
        // And f's rank does not go back to l, which holds more of the job; a thief as fast
        // as f with those ranks would take it.
        let back = Policy {
            jobs_here: &f_holds,
            ..policy
        };
        let from_f = Some((&at_f, &at_l));
        let to_l = Destination {
            node: &slow_with_room,
            job_offers: &l_holds,
        };
        let on_f = [rank(60)];
        assert!(select_near(&back, &f_node, &on_f, to_l, 1, from_f).is_none());
        let as_fast = NodeProfile {
            speed: 1.3,
            ..slow_with_room
        };
        let to_as_fast = Destination {
            node: &as_fast,
            job_offers: &l_holds,
        };
        assert!(select_near(&back, &f_node, &on_f, to_as_fast, 1, from_f).is_some());
    }

    /// A step of gathering, where the policy allows it (NSp2p's givers), moves all the ranks
    /// of the job the giver has, in one move, though the group limit is one: not ranks of
    /// another job, not more than the gathering node itself has idle cores for (its cluster's
    /// room does not count), and none when the job would not gather there. Without the
    /// policy, or for an ordinary move, the limit holds.
    #[test]
    fn given_gathering_in_one_move_then_the_givers_ranks_of_the_job_go_together() {
        let fx = Fixture::new();
        let (j, k) = (
            JobId::new("j").expect("valid"),
            JobId::new("k").expect("valid"),
        );
        let (l, f) = (host("l"), host("f"));
        let none = HashMap::new();
        let (at_l, at_f) = (view(&l, &none), view(&f, &none));
        let rtts = Some((&at_l, &at_f));
        // Ranks of 8-rank jobs: 100 ms of compute an iteration, 150 ms in MPI (split).
        let rank = |job: &str, r: u32| job_rank(job, r, 8, 100, 150);
        // l: 3 ranks of j and one of k on 4 cores; f holds the other 5 of j.
        let es = [rank("j", 5), rank("j", 6), rank("j", 7), rank("k", 0)];
        let here_node = node(4.0, 4.0);
        let here = [node_offer(&j, 0.0, 3), node_offer(&k, 0.0, 1)];
        let mut policy = fx.policy(1);
        policy.entity_cores = Some(1.0);
        policy.jobs_here = &here;
        policy.gather_in_one_move = true;
        let f_node = node(8.0, 5.0);
        let moved = |policy: &Policy<'_>, offer: JobOffer| {
            let offers = [offer];
            let to = Destination {
                node: &f_node,
                job_offers: &offers,
            };
            select_near(policy, &here_node, &es, to, 1, rtts).map(|p| {
                let mut moved = p.entities;
                moved.sort();
                moved
            })
        };
        let ids: Vec<EntityId> = es[..3].iter().map(|e| e.id.clone()).collect();
        // f has an idle core for each: the three go at once, and k's rank stays.
        assert_eq!(moved(&policy, node_offer(&j, 3.0, 5)).as_ref(), Some(&ids));
        // Two idle cores on f, though its cluster has three: two go.
        let mut in_cluster = node_offer(&j, 2.0, 5);
        in_cluster.place_ranks = 5;
        in_cluster.place_room = 3.0;
        assert_eq!(
            moved(&policy, in_cluster.clone()).as_ref(),
            Some(&ids[..2].to_vec())
        );
        // Without the policy, one rank a move.
        let one_by_one = Policy {
            gather_in_one_move: false,
            ..policy
        };
        assert_eq!(moved(&one_by_one, in_cluster).map(|m| m.len()), Some(1));
        // A core short of the whole job: not a step of gathering, so one rank at most.
        assert!(moved(&policy, node_offer(&j, 2.0, 5)).is_none_or(|m| m.len() == 1));
        // An ordinary move (to an idle node, for CPU) keeps the limit of one.
        let sharing = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
        let idle = node(8.0, 0.0);
        let mut ordinary = fx.policy(1);
        ordinary.gather_in_one_move = true;
        let plan =
            select_near(&ordinary, &node(1.0, 2.0), &sharing, &idle, 8, rtts).expect("moves");
        assert_eq!(plan.entities.len(), 1);
    }

    /// A job spread so that no place holding part of it can gather it, and that waits on the
    /// network, is seeded on a node with a core for each of its ranks: its rank 0 goes
    /// there (and no other rank), if a core there is at least as fast as the rank's share
    /// here and the job gathered there would iterate 25% faster.
    #[test]
    fn given_a_spread_job_that_no_holder_can_gather_then_its_rank_0_seeds_an_idle_node() {
        let fx = Fixture::new();
        let j = JobId::new("j").expect("valid");
        let (l, f) = (host("l"), host("f"));
        let none = HashMap::new();
        let (at_l, at_f) = (view(&l, &none), view(&f, &none));
        let rtts = Some((&at_l, &at_f));
        // Ranks of an 8-rank job: 100 ms of compute an iteration, `wait_ms` in MPI.
        let rank = |r: u32, wait_ms: u64| job_rank("j", r, 8, 100, wait_ms);
        // l: 2 busy cores of speed 1, ranks 0 and 3 of the job, no room for the other 6.
        let here_node = node(2.0, 2.0);
        let spread = [node_offer(&j, 0.0, 2)];
        let mut policy = fx.policy(1);
        policy.entity_cores = Some(1.0);
        policy.jobs_here = &spread;
        let idle = |cores: f64, speed: f64| NodeProfile {
            speed,
            ..node(cores, 0.0)
        };
        let seeded = |policy: &Policy<'_>, es: &[EntityProfile], to: &NodeProfile| {
            select_near(policy, &here_node, es, to, 1, rtts).map(|p| p.entities)
        };
        let waiting = [rank(0, 80), rank(3, 80)];
        // The job's iteration: 180 ms now, 100 ms gathered on f.
        assert_eq!(
            seeded(&policy, &waiting, &idle(8.0, 1.0)),
            Some(vec![waiting[0].id.clone()])
        );
        // Not another rank.
        assert_eq!(seeded(&policy, &waiting[1..], &idle(8.0, 1.0)), None);
        // Not to a node a core short of the job, or with slower cores.
        assert_eq!(seeded(&policy, &waiting, &idle(7.0, 1.0)), None);
        assert_eq!(seeded(&policy, &waiting, &idle(8.0, 0.9)), None);
        // Not for a job that waits little (20 ms in MPI against 100 of compute).
        assert_eq!(seeded(&policy, &[rank(0, 20)], &idle(8.0, 1.0)), None);
        // Not when the giver's place could gather the job, or holds most of it.
        for offer in [node_offer(&j, 6.0, 2), node_offer(&j, 0.0, 5)] {
            let offers = [offer];
            let other = Policy {
                jobs_here: &offers,
                ..policy
            };
            assert_eq!(seeded(&other, &waiting, &idle(8.0, 1.0)), None);
        }
        // Nor without the job's size, or without the communication term.
        let mut unsized_rank = rank(0, 80);
        unsized_rank.job_ranks = 0;
        assert_eq!(seeded(&policy, &[unsized_rank], &idle(8.0, 1.0)), None);
        let far = select_near(&policy, &here_node, &waiting, &idle(8.0, 1.0), 1, None);
        assert!(far.is_none());
    }

    /// A job that the giver's place holds most of stays there together: its ranks do not go
    /// one by one to a node that merely offers more CPU, however loaded the giver; they go
    /// to a node that would take the whole job and is much faster (relocation, now also
    /// from a place that holds only most of the job), or anywhere when the giver is leaving.
    /// A job the place holds half of or less is not held, and without the communication
    /// term nothing is.
    #[test]
    fn given_most_of_a_job_in_a_loaded_place_then_its_ranks_leave_only_together() {
        let fx = Fixture::new();
        let j = JobId::new("j").expect("valid");
        let (l, f) = (host("l"), host("f"));
        let none = HashMap::new();
        let (at_l, at_f) = (view(&l, &none), view(&f, &none));
        let rtts = Some((&at_l, &at_f));
        // Ranks of an 8-rank job: 100 ms of compute an iteration, 5 ms in MPI.
        let ranks = |n: u32| -> Vec<EntityProfile> {
            (0..n).map(|r| job_rank("j", r, 8, 100, 5)).collect()
        };
        // l: 8 cores, its owner's 8 threads back; they get half the cores (fair sharing).
        let loaded = NodeProfile {
            competing: 4.0,
            ..node(8.0, 16.0)
        };
        let idle = |cores: f64| NodeProfile {
            speed: 1.5,
            ..node(cores, 0.0)
        };
        let (small, big) = (idle(2.0), idle(8.0));
        let mut policy = fx.policy(1);
        policy.entity_cores = Some(1.0);
        let holding = |held: u32| [node_offer(&j, 0.0, held)];
        let moves = |held: u32, f: &NodeProfile, leaving: bool| {
            let here = holding(held);
            let giver = Policy {
                jobs_here: &here,
                leaving,
                ..policy
            };
            select_near(&giver, &loaded, &ranks(held), f, 1, rtts)
        };
        // The whole job, or 5 of its 8 ranks: not to a node with 2 cores, though a rank
        // there would compute twice as fast or more.
        assert!(moves(8, &small, false).is_none());
        assert!(moves(5, &small, false).is_none());
        // 4 of 8: the job is not held here, and a rank goes for the CPU.
        assert!(moves(4, &small, false).is_some());
        // To a node with a core for every rank and 25% more CPU a rank: the job moves.
        let plan = moves(5, &big, false).expect("relocates");
        // A core of speed 1.5 against a fifth of 4 cores of speed 1.
        assert!((plan.gain.deltas[0] - 0.7 / 2.3).abs() < 1e-9);
        assert!(moves(8, &big, false).is_some());
        // Leaving, the node gives to whoever asks.
        assert!(moves(8, &small, true).is_some());
        // Without the communication term (no latencies), the model alone decides.
        let here = holding(8);
        let giver = Policy {
            jobs_here: &here,
            ..policy
        };
        assert!(select(&giver, &loaded, &ranks(8), &small, 1).is_some());
    }

    #[test]
    fn a_place_gathers_a_job_it_holds_part_of_and_has_a_core_for_each_other_rank() {
        let j = JobId::new("j").expect("valid");
        let offer = |ranks: u32, cores: f64, place_ranks: u32, place_room: f64| JobOffer {
            job: j.clone(),
            cores,
            ranks,
            place_ranks,
            place_room,
        };
        // A node with 5 of 8 ranks and 3 idle cores.
        assert!(gathers(&offer(5, 3.0, 0, 0.0), 8, 1.0));
        assert!(!gathers(&offer(5, 2.0, 0, 0.0), 8, 1.0));
        // Two cores a rank.
        assert!(!gathers(&offer(5, 3.0, 0, 0.0), 8, 2.0));
        // All of the job, or none of it: nothing to gather.
        assert!(!gathers(&offer(8, 3.0, 0, 0.0), 8, 1.0));
        assert!(!gathers(&offer(0, 8.0, 0, 0.0), 8, 1.0));
        // NSc2c: a full member whose place holds 7 and has 31 idle cores.
        assert!(gathers(&offer(7, 0.0, 7, 31.0), 8, 1.0));
    }

    /// A node that runs 2 ranks of a 4-rank job and has 3 idle cores keeps 2 of them for the
    /// job: another job is offered 1, and the profile shows 1 idle; the gathered job's own
    /// offer is unchanged. Without a core for each missing rank nothing is kept.
    #[test]
    fn a_node_gathering_a_job_keeps_the_cores_the_rest_of_it_needs() {
        let sized = |job: &str, rank: u32| {
            let mut e = entity(job, rank, 1.0);
            e.job_ranks = 4;
            e
        };
        let es = [sized("j", 0), sized("j", 1), sized("k", 0)];
        let n = node(6.0, 3.0);
        let offers = n.job_offers(&es);
        let (shown, kept) = keep_for_gathering(n, offers.clone(), &es, 1.0);
        // j needs 2 more cores; k (1 of 4 here) needs 3, which are not left after j's.
        assert!((shown.free_cores() - 1.0).abs() < 1e-9);
        let of = |offers: &[JobOffer], job: &str| {
            offers
                .iter()
                .find(|o| o.job.as_str() == job)
                .map(|o| o.cores)
                .expect("an offer")
        };
        assert_eq!(of(&kept, "j"), of(&offers, "j"));
        assert!((of(&kept, "k") - 1.0).abs() < 1e-9);
        // With 1 idle core, j cannot be gathered here: nothing kept.
        let small = node(4.0, 3.0);
        let offers = small.job_offers(&es);
        let (shown, kept) = keep_for_gathering(small, offers.clone(), &es, 1.0);
        assert_eq!(shown, small);
        assert_eq!(kept, offers);
    }

    #[test]
    fn overloaded_node_gives_to_idle_node() {
        let fx = Fixture::new();
        // 1 core, 2 ranks at 0.5 each; the target has a free core.
        let es = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
        let plan = select(&fx.policy(1), &node(1.0, 2.0), &es, &node(1.0, 0.0), 8).expect("a move");
        assert_eq!(plan.entities.len(), 1);
        // (1 - 0.5) / 1.5 minus a small cost term.
        assert!(plan.gain.improvement > 0.33 && plan.gain.gain > 0.3);
    }

    #[test]
    fn a_waiting_rank_stays_unless_a_competing_load_takes_its_node() {
        let fx = Fixture::new();
        // 0.6 cores, one rank that uses 0.33 of them because it mostly waits for its peer;
        // the thief offers an equal, idle 0.6.
        let es = [entity("j", 0, 0.33)];
        let thief = node(0.6, 0.0);
        assert!(select(&fx.policy(1), &node(0.6, 0.6), &es, &thief, 1).is_none());
        // The same rank on a node where a hog takes 0.3 CPU: it gets half of what the thief
        // offers, and moves.
        let contended = NodeProfile {
            competing: 0.3,
            ..node(0.6, 1.6)
        };
        let plan = select(&fx.policy(1), &contended, &es, &thief, 1).expect("a move");
        assert_eq!(plan.entities, vec![es[0].id.clone()]);
        // A node twice as big as the rank's share attracts it with no competing load.
        let big = node(1.2, 0.0);
        assert!(select(&fx.policy(1), &node(0.6, 0.6), &es, &big, 1).is_some());
    }

    /// The main job's double move (MPICH, 2026-11-26): rank 1 slowed to 0.3 core by a hog
    /// on its 0.6-core node went first to node-a, whose own rank 0 waits for it (0.42 core
    /// idle there), where it got 0.3 core again, and only then to the idle node-c.
    #[test]
    fn a_straggler_goes_to_an_idle_node_not_to_one_whose_ranks_wait_for_it() {
        let fx = Fixture::new();
        let policy = Policy {
            entity_cores: Some(1.0),
            ..fx.policy(1)
        };
        // Rank 1 uses 0.3 of its 0.6-core node, the hog the rest.
        let straggler = entity("j", 1, 0.3);
        let loaded = NodeProfile {
            competing: 0.3,
            ..node(0.6, 1.6)
        };
        // node-a: rank 0 of the same job polls at 0.6 core but computes only 30% of each
        // iteration, so its profile shows 0.18 core of load.
        let mut waiting = entity("j", 0, 0.6);
        waiting.compute = Duration::from_millis(3);
        waiting.mpi_wait = Duration::from_millis(7);
        let node_a = node(0.6, 0.18);
        let offers = node_a.job_offers(std::slice::from_ref(&waiting));
        assert_eq!(offers.len(), 1);
        assert!((offers[0].cores - 0.3).abs() < 1e-9, "{offers:?}");
        let to_a = Destination {
            node: &node_a,
            job_offers: &offers,
        };
        let es = [straggler];
        assert!(select(&policy, &loaded, &es, to_a, 1).is_none());
        // Without the offers (an older thief), node-a looks like 0.42 idle core: the move
        // this prevents.
        assert!(select(&policy, &loaded, &es, &node_a, 1).is_some());
        // The idle node-c takes it.
        assert!(select(&policy, &loaded, &es, &node(0.6, 0.0), 1).is_some());
        // A node of 1.2 cores whose rank waits likewise shares them: 0.6 core each, twice
        // what the straggler has, so it moves there (Figure 15's cooperating node).
        let node_big = node(1.2, 0.18);
        let offers = node_big.job_offers(std::slice::from_ref(&waiting));
        assert!((offers[0].cores - 0.6).abs() < 1e-9, "{offers:?}");
        let to_big = Destination {
            node: &node_big,
            job_offers: &offers,
        };
        assert!(select(&policy, &loaded, &es, to_big, 1).is_some());
        // Entities of other jobs see node-a as it is.
        let other = [entity("k", 0, 0.3)];
        assert!(select(&policy, &loaded, &other, to_a, 1).is_some());
    }

    #[test]
    fn with_entity_cores_an_idle_big_node_draws_only_ranks_it_would_speed_up() {
        let fx = Fixture::new();
        // A rank with a core to itself, an idle 8-core node of the same speed.
        let es = [entity("j", 0, 1.0)];
        let big = node(8.0, 0.0);
        // The paper's model: 8 idle cores against 1 used, a gain of about 0.78.
        assert!(select(&fx.policy(1), &node(1.0, 1.0), &es, &big, 1).is_some());
        let capped = Policy {
            entity_cores: Some(1.0),
            ..fx.policy(1)
        };
        // One rank can use one of those cores: nothing to gain.
        assert!(select(&capped, &node(1.0, 1.0), &es, &big, 1).is_none());
        // The same rank sharing its core with a competing load does move.
        let contended = NodeProfile {
            competing: 1.0,
            ..node(1.0, 2.0)
        };
        let shared = [entity("j", 0, 0.5)];
        assert!(select(&capped, &contended, &shared, &big, 1).is_some());
        // And so does one on a slower core, to a faster one.
        let fast = NodeProfile {
            speed: 2.0,
            ..node(8.0, 0.0)
        };
        assert!(select(&capped, &node(1.0, 1.0), &es, &fast, 1).is_some());
    }

    #[test]
    fn fully_used_entity_does_not_move_to_an_equal_node() {
        let fx = Fixture::new();
        let es = [entity("j", 0, 1.0)];
        assert!(select(&fx.policy(1), &node(1.0, 1.0), &es, &node(1.0, 0.0), 1).is_none());
    }

    #[test]
    fn held_and_recently_arrived_entities_do_not_move() {
        let mut fx = Fixture::new();
        let mut es = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
        es[0].resident = Duration::from_secs(5);
        fx.held
            .insert(es[1].id.clone(), fx.now + Duration::from_secs(1));
        assert!(select(&fx.policy(1), &node(1.0, 2.0), &es, &node(1.0, 0.0), 1).is_none());
    }

    #[test]
    fn costly_move_is_refused() {
        let fx = Fixture::new();
        let mut es = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
        // 64 GiB at 12.5 MB/s = 5,500 s, more than the hour the job is expected to run on:
        // the move cannot pay for itself.
        es[0].state_bytes = 64 << 30;
        es[1].state_bytes = 64 << 30;
        assert!(select(&fx.policy(1), &node(1.0, 2.0), &es, &node(1.0, 0.0), 1).is_none());
    }

    #[test]
    fn a_move_predicted_to_outlast_the_migration_timeout_is_refused() {
        let fx = Fixture::new();
        let mut es = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
        // 1 GiB at 12.5 MB/s: 86 s, against a limit of 60 s.
        es[0].state_bytes = 1 << 30;
        es[1].state_bytes = 1 << 30;
        let mut policy = fx.policy(1);
        policy.max_move_time = Duration::from_secs(60);
        assert!(select(&policy, &node(1.0, 2.0), &es, &node(1.0, 0.0), 1).is_none());
        policy.max_move_time = Duration::from_secs(90);
        assert!(select(&policy, &node(1.0, 2.0), &es, &node(1.0, 0.0), 1).is_some());
    }

    /// 1 GiB at 12.5 MB/s (86 s) to go from half a core to a whole one, an hour into a job
    /// expected to run another hour: the move saves about 1,800 s. The paper's cost term
    /// (86 / (10 + ln 3600), saturated at 1) refuses it; the amortised one takes it.
    #[test]
    fn a_costly_move_that_pays_for_itself_is_taken_unless_the_cost_term_is_the_papers() {
        let mut fx = Fixture::new();
        let mut es = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
        es[0].state_bytes = 1 << 30;
        es[1].state_bytes = 1 << 30;
        let plan = select(&fx.policy(1), &node(1.0, 2.0), &es, &node(1.0, 0.0), 1)
            .expect("the move pays for itself");
        assert!(plan.gain.cost_term < 0.02, "{:?}", plan.gain);
        fx.cost = MigrationCostModel::paper();
        assert!(select(&fx.policy(1), &node(1.0, 2.0), &es, &node(1.0, 0.0), 1).is_none());
    }

    #[test]
    fn group_grows_while_gain_holds_and_stays_in_one_job() {
        let fx = Fixture::new();
        let es = [
            entity("a", 0, 0.25),
            entity("a", 1, 0.25),
            entity("b", 0, 0.25),
            entity("a", 2, 0.25),
        ];
        let plan = select(&fx.policy(8), &node(1.0, 4.0), &es, &node(2.0, 0.0), 8).expect("a move");
        assert!(plan.entities.iter().all(|e| e.job.as_str() == "a"));
        assert_eq!(plan.entities.len(), 3);
        let single =
            select(&fx.policy(1), &node(1.0, 4.0), &es, &node(2.0, 0.0), 8).expect("a move");
        assert_eq!(single.entities.len(), 1);
    }

    #[test]
    fn ideal_counts_follow_weighted_availability_ratio() {
        let fx = Fixture::new();
        let es: Vec<_> = (0..6).map(|r| entity("j", r, 4.0 / 6.0)).collect();
        let a = node(4.0, 6.0);
        let b = node(2.0, 0.0);
        let views = [
            NodeView {
                node: &a,
                entities: &es,
            },
            NodeView {
                node: &b,
                entities: &[],
            },
        ];
        let ideal = ideal_counts(&fx.weights, &views);
        // n1 / n2 = 4 / 2 with 6 entities.
        assert!((ideal[0] - 4.0).abs() < 1e-9 && (ideal[1] - 2.0).abs() < 1e-9);
        let (from, to, plan) = balance(&fx.policy(1), &views, |_, _, _| true).expect("a move");
        assert_eq!((from, to, plan.entities.len()), (0, 1, 1));
    }

    #[test]
    fn balance_leaves_a_near_even_split_alone() {
        let fx = Fixture::new();
        let es: Vec<_> = (0..3).map(|r| entity("j", r, 1.0)).collect();
        let a = node(2.0, 2.0);
        let b = node(2.0, 1.0);
        let views = [
            NodeView {
                node: &a,
                entities: &es[..2],
            },
            NodeView {
                node: &b,
                entities: &es[2..],
            },
        ];
        assert!(balance(&fx.policy(1), &views, |_, _, _| true).is_none());
    }
}
