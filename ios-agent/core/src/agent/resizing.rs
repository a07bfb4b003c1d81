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
//!   agent (every rank reports where rank 0 runs: `Agent::grow_home`), which hints the
//!   thief (work available), and the thief asks it over its own connection. The home agent
//!   weighs growing the job onto the thief by as many ranks as the thief has idle cores (and
//!   the job's limits allow) against moving a rank there: against a move of the same job by
//!   the job's predicted iteration after each ([`GrowPlan::beats_move`]), and a grow needs
//!   half a move's minimum gain. When the job's slowest rank (its ranks report its compute
//!   time) runs elsewhere, the move of that rank onto the thief is the one to beat; that
//!   rank's agent makes it, so the steal goes on. **Which thief** (NSp2p): not the first
//!   whose grow gains enough, the best of a steal period's ([`Resizing::weigh_offer`]): the
//!   home agent notes each offer, passes the steal on, and at the end of the window grows
//!   onto the best (hinting it to ask again), a thief's round trips to rank 0's partners
//!   (its steal carries its RTTs) counted in the grow's exchange.
//!   No message asks for a resize: the network can offer a
//!   node, never make a job change width, and a thief that is not idle is refused
//!   ([`super::shared::Stats::grow_offers_refused`]).
//! - **Not while spread** (NSp2p): a job whose rank 0 exchanges with a partner beyond the
//!   local tier is not grown: the moves gather it first (onto one node, which a grown job
//!   would be too wide for), and it grows once its partners are near.
//! - **Shrinking** is decided by the agent of the node the ranks leave, for its own node,
//!   from its own profile: when it is leaving and no idle node took the job's ranks within
//!   one and a half steal periods of its calls for thieves, or of the last move off it
//!   (two profile periods more in NSc2c: [`leave_shrink_wait`]), or when
//!   competing load (its owner coming back) has slowed them for
//!   [`Config::with_shed_after`] with no idle node taking them and the model predicts
//!   the job runs faster without them. One exception: the home agent of a job whose
//!   slowest rank runs elsewhere, and has for long with nobody moving it, shrinks the job
//!   onto its own ranks ([`Resizing::straggler_shrink`]).
//! - **Damping**: no agent resizes a job within a hold-down of a change of its width (seen
//!   in its ranks' profiles, or done by itself), nor sheds ranks that arrived within a
//!   hold-down; only a leaving node may. How long the job has had its width travels with
//!   it (PCM reports it, pcmd passes it on: [`EntityProfile::width_age`]), so the agent a
//!   rank 0 moves to after a resize that only the agents it left saw holds the job's grows
//!   too, and a mere move of rank 0 holds nothing back. (Ranks that do not report it: a
//!   home agent does not grow a job whose rank 0 came to its node within a hold-down.)
//!   So a job does not grow and shrink back within its hold-down.

use std::collections::HashMap;
use std::time::Instant;

use pcm_proto::{HostName, JobId, Rank};

use super::config::{Config, Topology};
use super::shared::{Action, Beneficiary, Outgoing, OutgoingResize, ResizeReason, Shared};
use crate::message::{HostRtt, Message, MessageId, MigrationId};
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
/// starts again when a move off the node completes ([`super::shared::Leaving::waiting_since`]):
/// the node calls for the next rank's thief then, and a job moves one reconfiguration at a
/// time. (Counted from the leave alone, a node whose two ranks an NSc2c manager was moving
/// shrank the job 1 s after the first move, with idle nodes taking the second in CI.)
///
/// NSc2c: the member's leave reaches its manager in the reply to the next poll, and the
/// manager orders a move from the replies it holds at the poll after: two profile periods
/// more (in CI a 2-rank node's second rank moved 2.0-2.9 s after its first, at 1 s
/// periods).
pub(crate) fn leave_shrink_wait(config: &Config) -> std::time::Duration {
    let calls = config.steal_period * 3 / 2;
    match config.topology {
        Topology::PeerToPeer => calls,
        Topology::ClusterToCluster => calls + config.profile_period * 2,
    }
}

/// How long the home agent of a malleable job collects grow offers before it grows onto
/// the best ([`Resizing::weigh_offer`]): by default one steal period, in which every idle
/// node steals once ([`Config::with_grow_offer_window`]).
pub(crate) fn grow_offer_window(config: &Config) -> std::time::Duration {
    config.grow_offer_window.unwrap_or(config.steal_period)
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

/// How many refused idle thieves a home agent keeps ([`Resizing::note_refused_thief`]).
const MAX_REFUSED_THIEVES: usize = 16;

/// A node's ranks of a job count as slowed when competing load leaves each less than this
/// share of what it would get without that load.
const SLOWED_SHARE: f64 = 0.9;

/// A job's ranks here count as faster than its slowest rank when the longest compute time
/// of theirs is under this share of the slowest's ([`Resizing::straggler_shrink`]).
const STRAGGLER_SHARE: f64 = 0.8;

/// How long a job's slowest rank must have run on another node before the home agent
/// shrinks the job onto its ranks here: twice the longer of the hold-down and the shed
/// wait, so that the straggler's own agent has moved the rank, or shed it off its loaded
/// node, if it would.
pub(crate) fn straggler_wait(config: &Config) -> std::time::Duration {
    config.hold_down.max(config.shed_after) * 2
}

/// A shrink of a job onto the ranks on the home agent's node ([`Resizing::straggler_shrink`]).
#[derive(Debug, Clone)]
struct StragglerShrink {
    job: JobId,
    from: u32,
    to: u32,
    /// The hosts of the ranks that leave.
    hosts: Vec<HostName>,
    gain: f64,
}

/// What the agent keeps about the widths of the jobs it runs ranks of.
#[derive(Debug, Default)]
pub(crate) struct Resizing {
    /// Per job: the width last seen in its ranks' profiles, and when it last changed (seen,
    /// or by a resize of this agent's); `None` if never seen to change.
    widths: HashMap<JobId, (u32, Option<Instant>)>,
    /// Per job with ranks here: since when competing load slows them.
    slowed_since: HashMap<JobId, Instant>,
    /// Per malleable job whose rank 0 runs here: since when its slowest rank runs on
    /// another node ([`Resizing::straggler_shrink`]).
    straggled_since: HashMap<JobId, Instant>,
    /// Per malleable job with ranks here and its rank 0 elsewhere: since when a partner of
    /// its ranks here runs beyond the local tier ([`Resizing::distant_shed`]).
    distant_since: HashMap<JobId, Instant>,
    /// When a wait of `Agent::shrink_if_due` ends next (`Agent::resize_deadline`).
    wake: Option<Instant>,
    /// When this agent last asked for a shrink.
    last_shrink: Option<Instant>,
    /// Jobs a completed shrink took off this node, and when: pcmd may list their departed
    /// ranks for a moment longer (seen once in the main job's act: a leaving node asked for
    /// 2 -> 1 right after its 3 -> 2), and such a stale rank is not shrunk off again.
    shrunk_off: HashMap<JobId, Instant>,
    /// NSp2p: the grow offers (idle thieves' steals that a grow here would take) weighed
    /// lately, to grow onto the best of a steal period's, not the first ([`Resizing::weigh_offer`]).
    offers: GrowOffers,
    /// NSp2p: idle thieves whose steal no grow of a malleable job here took, with the RTTs
    /// their steal carried and when ([`Resizing::rehint_refused`]).
    refused: Vec<(Beneficiary, std::sync::Arc<[HostRtt]>, Instant)>,
}

/// The grow offers of the current window ([`Resizing::weigh_offer`]).
#[derive(Debug, Default)]
struct GrowOffers {
    /// When the window opened: its first offer.
    opened: Option<Instant>,
    /// Per thief: its latest offer.
    by_thief: Vec<GrowOffer>,
    /// When this agent last hinted a thief to ask again, and which.
    hinted: Option<(Instant, PeerId)>,
}

/// An idle thief's offer: what its best grow of a job here would gain.
#[derive(Debug, Clone)]
struct GrowOffer {
    thief: PeerId,
    /// The thief's host.
    host: HostName,
    job: JobId,
    /// The gain of its best grow.
    gain: f64,
    /// The CPU that grow gives each added rank.
    cpu: f64,
    /// Whether a rank of `job` that exchanges with the ranks here ran on `host` when the
    /// thief offered (then the offer already counted it).
    held_rank: bool,
    /// When it last offered.
    at: Instant,
}

impl GrowOffers {
    /// Forgets the offers made two windows or more before `now` (their thieves took work
    /// elsewhere, or left), and those whose thief has since taken a rank of the job
    /// ([`job_hosts`]): its idle cores went to the rank. (Seen in the main job's act: the
    /// same steal of node-c that offered node-a a grow took rank 1 off the hogged node-b
    /// 6 ms later; node-c's offer, the best, was the one told at the window's end, node-d
    /// paused its rounds meanwhile, and the job grew 4.2 s after the move; likely what kept
    /// it from growing before node-c's leave once in CI, the leave then shrinking it.)
    fn forget_stale(&mut self, s: &Shared, now: Instant, window: std::time::Duration) {
        self.by_thief.retain(|o| {
            now.saturating_duration_since(o.at) < window * 2
                && (o.held_rank || !job_hosts(s, &o.job).any(|h| *h == o.host))
        });
    }

    /// The offers that pass `keep`, best first by gain, then by CPU per added rank.
    fn best(&self, keep: impl Fn(&GrowOffer) -> bool) -> Option<PeerId> {
        self.by_thief
            .iter()
            .filter(|o| keep(o))
            .max_by(|a, b| a.gain.total_cmp(&b.gain).then(a.cpu.total_cmp(&b.cpu)))
            .map(|o| o.thief.clone())
    }

    /// The last hinted thief, when it has not offered again since the hint, and the
    /// instant (a `window` after the hint) from which it counts as silent.
    fn silent_hinted(&self, window: std::time::Duration) -> Option<(Instant, &PeerId)> {
        let (at, thief) = self.hinted.as_ref()?;
        let offer = self.by_thief.iter().find(|o| o.thief == *thief)?;
        (offer.at <= *at).then_some((*at + window, thief))
    }
}

/// The hosts where the ranks that `job`'s ranks here exchange with run (their profiles'
/// partners).
fn job_hosts<'a>(s: &'a Shared, job: &'a JobId) -> impl Iterator<Item = &'a HostName> + 'a {
    s.entities
        .iter()
        .filter(move |e| e.id.job == *job)
        .flat_map(|e| e.partners.iter().map(|p| &p.host))
}

/// What to do with a grow offer ([`Resizing::weigh_offer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OfferChoice {
    /// Grow onto this thief now.
    Grow,
    /// Not yet: pass the steal on; hint `Some` thief (the best offer so far) to ask again.
    Hold(Option<PeerId>),
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
    /// The CPU (cores times speed) each added rank gets on the thief.
    pub(crate) cpu_added: f64,
}

impl GrowPlan {
    /// Whether growing beats `moving` (the move the same steal would make instead): when
    /// the move takes ranks of the grown job, or there is none, whichever makes the job's
    /// predicted iteration shorter (a move's own gain, Figure 3's, weighs the nodes'
    /// resources, not the job's iteration, and is not on the grow's scale: a move of rank
    /// 0 between two unloaded nodes outweighed a grow that made the job 20% faster in the
    /// main job's act); otherwise the larger gain. When the job's slowest rank runs
    /// elsewhere, `iteration_if_moved` is the job's with that rank moved onto the thief
    /// (every rank then gets at least what one gets here unloaded).
    pub(crate) fn beats_move(&self, moving: Option<&crate::decision::Plan>) -> bool {
        match moving {
            // The move of the job's slowest rank, on another node, is not this agent's to
            // make; growing while it stays slow must still beat it, or the thief is left to
            // that rank's agent (the steal goes on). (Seen in the main job's malleable act:
            // rank 1's node had a CPU hog, a joining node's steal reached rank 0's agent
            // first, and the job grew onto it, 2 -> 3 ranks with rank 1 still on the hogged
            // node, where moving rank 1 would have made its iterations a quarter shorter.)
            //
            // No move planned (the job's rank here held since it arrived, or the move's
            // gain short of the minimum): the same comparison. A grow around a slowed
            // rank keeps it slow for a width hold-down, and a thief left to steal on can
            // take it later. (Seen in the README's main job: rank 1 moved onto node-a,
            // held there, and a joining node-c's steal grew the job 2 -> 3 around the two
            // ranks stacked on node-a, which then ran at 0.22 of the best placement's
            // rate for the rest of the run.)
            None => self.gain.iteration_after < self.iteration_if_moved,
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

impl Resizing {
    /// NSp2p: whether to grow onto the thief of a steal whose best grow is `plan` now, or
    /// wait for a better offer. The first offer opens a window of one steal period
    /// ([`grow_offer_window`]), in which offers are noted and passed on; after it, the
    /// job grows onto a thief whose grow gains at least as much as the best noted (ties:
    /// the one whose added ranks get more CPU). A thief that offered less is passed on,
    /// and the best is hinted to ask again (work available). An offer is forgotten two
    /// windows after it was made (its thief took work elsewhere, or left). Why: the first
    /// idle node to ask got the job, often a slow or far one (at 100 simulated nodes,
    /// Internet-like, the grown-onto nodes' speed was 1.30 where the oracle's picks were
    /// 1.56, and the wider jobs waited 0.020 s per iteration on the network, 0.005 for
    /// the oracle's). With the thieves' RTTs in the grow's exchange (`grow_plan`), NSp2p
    /// did 0.801 -> 0.832 of the malleable oracle over seeds 1-32 at 100 nodes, and 0.790
    /// -> 0.874 at 1,000 (docs/results.md, "Malleable jobs at scale").
    pub(crate) fn weigh_offer(
        &mut self,
        s: &mut Shared,
        now: Instant,
        thief: &Beneficiary,
        plan: &GrowPlan,
    ) -> OfferChoice {
        let gain = plan.gain.gain;
        let cpu = plan.cpu_added;
        let window = grow_offer_window(&s.config);
        if window.is_zero() {
            return OfferChoice::Grow;
        }
        let offers = &mut self.offers;
        offers.forget_stale(s, now, window);
        if offers.by_thief.is_empty() {
            offers.opened = None;
        }
        let offer = GrowOffer {
            thief: thief.peer.clone(),
            host: thief.host.clone(),
            job: plan.job.clone(),
            gain,
            cpu,
            held_rank: job_hosts(s, &plan.job).any(|h| *h == thief.host),
            at: now,
        };
        match offers.by_thief.iter_mut().find(|o| o.thief == thief.peer) {
            Some(o) => *o = offer,
            None => offers.by_thief.push(offer),
        }
        let opened = *offers.opened.get_or_insert(now);
        if now < opened + window {
            tracing::debug!(
                agent = %s.me,
                thief = %thief.peer,
                gain,
                offers = offers.by_thief.len(),
                "grow offer held: the window is open"
            );
            return OfferChoice::Hold(None);
        }
        let better = |a: (f64, f64), b: (f64, f64)| {
            a.0 > b.0 + 1e-9 || (a.0 > b.0 - 1e-9 && a.1 > b.1 + 1e-9)
        };
        let best = offers.best(|o| o.thief != thief.peer && better((o.gain, o.cpu), (gain, cpu)));
        match best {
            None => {
                *offers = GrowOffers::default();
                OfferChoice::Grow
            }
            Some(best) => {
                let hint = offers
                    .hinted
                    .as_ref()
                    .is_none_or(|(at, _)| now >= *at + s.config.steal_period)
                    .then_some(best);
                if let Some(best) = &hint {
                    offers.hinted = Some((now, best.clone()));
                }
                OfferChoice::Hold(hint)
            }
        }
    }

    /// NSp2p: at the end of a window of grow offers, the best thief is told to ask again
    /// (work available), and its steal then grows the job ([`Resizing::weigh_offer`]).
    /// Why a timer: an offer is only taken by a steal after the window, and an idle thief
    /// that found no work pauses 2 to 8 s between its rounds (`DEFAULT_MAX_STEAL_BACKOFF`),
    /// longer than an offer is kept (two windows). A lone offer was forgotten before its
    /// thief came back, its next steal opened a new window, and so on: the main job's
    /// malleable act ran 10 s beside an idle node without growing in 2 of 4 runs.
    ///
    /// A told thief that has not asked again a window later is no longer idle, or gone:
    /// its offer is forgotten and the next best is told. (Its offer held the others back
    /// until it expired, and those thieves, refused meanwhile, paused their rounds: the
    /// grow came a window and a pause late.)
    pub(super) fn close_offer_window(&mut self, s: &mut Shared, now: Instant) {
        let Some(close) = self.offer_window_close(s) else {
            return;
        };
        if now < close {
            return;
        }
        let window = grow_offer_window(&s.config);
        let offers = &mut self.offers;
        if let Some((_, silent)) = offers.silent_hinted(window) {
            let silent = silent.clone();
            offers.by_thief.retain(|o| o.thief != silent);
        }
        let before = offers.by_thief.len();
        offers.forget_stale(s, now, window);
        let best = offers.best(|_| true);
        tracing::debug!(
            agent = %s.me,
            offers = before,
            kept = offers.by_thief.len(),
            told = ?best,
            "grow offers: window closed"
        );
        match best {
            Some(best) => {
                offers.hinted = Some((now, best.clone()));
                s.stats.work_hints_sent += 1;
                s.send(best, Message::WorkAvailable);
            }
            None => *offers = GrowOffers::default(),
        }
    }

    /// When the window of grow offers closes with its best thief not yet told, or when a
    /// told thief that has not asked again counts as silent
    /// ([`Resizing::close_offer_window`]).
    fn offer_window_close(&self, s: &Shared) -> Option<Instant> {
        let offers = &self.offers;
        let opened = offers.opened?;
        if offers.by_thief.is_empty() || s.outgoing.is_some() {
            return None;
        }
        let window = grow_offer_window(&s.config);
        let close = opened + window;
        match &offers.hinted {
            Some((at, _)) if *at >= close => offers.silent_hinted(window).map(|(due, _)| due),
            _ => Some(close),
        }
    }

    /// Notes the widths the entities' profiles show (called with every new list).
    pub(super) fn observe_widths(&mut self, s: &mut Shared, now: Instant) {
        let mut seen: Vec<(JobId, u32)> = s
            .entities
            .iter()
            .filter(|e| e.job_ranks > 0)
            .map(|e| (e.id.job.clone(), e.job_ranks))
            .collect();
        seen.sort();
        seen.dedup_by(|a, b| a.0 == b.0);
        for (job, width) in seen {
            let entry = self.widths.entry(job).or_insert((width, None));
            if entry.0 != width {
                *entry = (width, Some(now));
            }
        }
        let hold = s.config.hold_down;
        self.shrunk_off
            .retain(|_, at| now.saturating_duration_since(*at) < hold * 2);
        let entities = &s.entities;
        self.widths.retain(|job, (_, changed)| {
            entities.iter().any(|e| &e.id.job == job)
                || changed.is_some_and(|at| now.saturating_duration_since(at) < hold * 2)
        });
    }

    /// Whether `job`'s width changed within the hold-down: it is not resized again yet.
    fn width_held(&self, s: &Shared, job: &JobId, now: Instant) -> bool {
        self.widths
            .get(job)
            .and_then(|(_, changed)| *changed)
            .is_some_and(|at| now < at + s.config.hold_down)
    }

    /// NSp2p: the best grow of a malleable job whose rank 0 runs here onto the thief of
    /// `steal`, if one gains at least the minimum gain; `Err` when such a job could grow
    /// but the thief is not idle.
    pub(super) fn grow_plan(
        &self,
        s: &Shared,
        now: Instant,
        node: &NodeProfile,
        thief: &Beneficiary,
        thief_rtts: &[HostRtt],
    ) -> Result<Option<GrowPlan>, GrowRefusal> {
        if !s.config.resizes || s.leaving.is_some() || s.outgoing.is_some() {
            return Ok(None);
        }
        let growable: Vec<&EntityProfile> = s
            .entities
            .iter()
            .filter(|e| {
                e.id.rank == Rank(0)
                    && e.malleable
                        .is_some_and(|m| m.widths_above(e.job_ranks, u32::MAX).next().is_some())
                    && !self.width_held(s, &e.id.job, now)
                    // A width change made before rank 0 came here was seen by other agents
                    // only: the job's width age in its profile tells. (`scale --malleable`,
                    // seed 1, Internet-like: a node shed job7 7 -> 6, its rank 0 moved to
                    // n43 ten seconds later, and n43's agent grew it 6 -> 13 within the
                    // hold-down.) An older rank does not say: then rank 0 must have been
                    // here a hold-down, which also holds grows back after a mere move.
                    && match e.width_age {
                        Some(age) => age >= s.config.hold_down,
                        None => e.resident >= s.config.hold_down,
                    }
            })
            .collect();
        if growable.is_empty() {
            return Ok(None);
        }
        if !thief.profile.is_lightly_loaded(s.config.light_threshold) {
            return Err(GrowRefusal::NotIdle);
        }
        let cpu_here = cpu_per_entity(s, node, true);
        let cpu_unloaded = cpu_per_entity(s, node, false);
        let thief_rtt = s
            .rtt_to_host(&thief.host)
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
                .filter_map(|p| s.rtt_to_host(&p.host))
                .reduce(f64::max);
            // The job's ranks on this node.
            let here = s
                .entities
                .iter()
                .filter(|e| e.id.job == rank0.id.job)
                .count();
            let spans_nodes = here < timing.ranks as usize;
            let paid_rtt = known_partners
                .or_else(|| {
                    spans_nodes
                        .then(|| {
                            s.peers
                                .by_rtt()
                                .filter(|(peer, _)| **peer != thief.peer)
                                .filter_map(|(peer, _)| s.peers.get(peer))
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
            if spread && s.config.topology == Topology::PeerToPeer {
                continue;
            }
            // The added ranks exchange with the job's ranks on other nodes too, and on
            // the Internet a node near this one may be far from them: the thief's own RTTs
            // (its steal carries them) to the partners' hosts of the job's ranks here
            // count, the farthest one (one it has not measured: the assumed far RTT;
            // ignored instead, 0.816 of the oracle against 0.839 on seeds 1-16). (At 100
            // simulated nodes, Internet-like, the wider jobs waited 0.020 s per iteration on
            // the network, where the oracle's waited 0.005; 0.011-0.015 with this.)
            let thief_rtt = s
                .entities
                .iter()
                .filter(|e| e.id.job == rank0.id.job)
                .flat_map(|e| e.partners.iter())
                .map(|p| &p.host)
                .filter(|h| **h != thief.host && **h != s.host)
                .map(|h| {
                    HostRtt::find_in(thief_rtts, h)
                        .unwrap_or(crate::model::DEFAULT_UNKNOWN_RTT.as_secs_f64())
                })
                .fold(thief_rtt, f64::max);
            let extra_rtt = (thief_rtt - paid_rtt).max(0.0);
            // As many ranks as it has idle cores, or as it can give each the CPU the job's
            // slowest rank gets (at least half a core each): the job goes at that pace.
            let slowest = timing.slowest_cpu();
            let room = ranks_for(&offer, s.config.entity_cores, u32::MAX).max(
                (offer.free_cores() * offer.speed / slowest.max(MIN_CPU_PER_ADDED_RANK)).floor()
                    as u32,
            );
            for to in limits.widths_above(timing.ranks, room) {
                let added = to - timing.ranks;
                let cpu_new = cpu_per_rank(
                    offer.free_cores(),
                    offer.speed,
                    added,
                    s.config.entity_cores,
                );
                let cost = s.config.resize_cost.cost(
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
                    s.config.resize_cost.term,
                );
                tracing::debug!(
                    agent = %s.me,
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
                if gain.gain >= s.config.min_gain * GROW_MIN_GAIN_SHARE
                    && best.as_ref().is_none_or(|b| gain.gain > b.gain.gain)
                {
                    // Moving a rank here instead: it gets what the thief offers one rank; the
                    // job's other ranks are taken to get what a rank gets here unloaded, with
                    // one entity fewer when another rank of the job stays here (ranks stacked
                    // here: the one left gets the CPU the moved one frees).
                    let cpu_moved =
                        cpu_per_rank(offer.free_cores(), offer.speed, 1, s.config.entity_cores);
                    let cpu_staying = if here > 1 {
                        cpu_per_rank(
                            node.cores,
                            node.speed,
                            (s.entities.len() - 1) as u32,
                            s.config.entity_cores,
                        )
                    } else {
                        cpu_unloaded
                    };
                    let iteration_if_moved = JobTiming {
                        exchange: timing.exchange + extra_rtt,
                        ..timing
                    }
                    .iteration_at(timing.ranks, cpu_moved.min(cpu_staying));
                    best = Some(GrowPlan {
                        job: rank0.id.job.clone(),
                        from: timing.ranks,
                        gain,
                        iteration_if_moved,
                        cpu_added: cpu_new,
                    });
                }
            }
        }
        Ok(best)
    }

    /// NSp2p: notes an idle thief whose steal reached this node, the home of a malleable
    /// job, and took nothing here ([`Resizing::rehint_refused`]).
    pub(crate) fn note_refused_thief(
        &mut self,
        s: &Shared,
        now: Instant,
        thief: &Beneficiary,
        rtts: &std::sync::Arc<[HostRtt]>,
    ) {
        let home = s
            .entities
            .iter()
            .any(|e| e.id.rank == Rank(0) && e.malleable.is_some());
        if !s.config.resizes
            || s.config.topology != Topology::PeerToPeer
            || !home
            || !thief.profile.is_lightly_loaded(s.config.light_threshold)
        {
            return;
        }
        self.refused.retain(|(t, ..)| t.peer != thief.peer);
        self.refused.truncate(MAX_REFUSED_THIEVES - 1);
        self.refused.insert(0, (thief.clone(), rtts.clone(), now));
    }

    /// NSp2p, with each new profile of the entities here: an idle thief refused within
    /// the longest pause between steal rounds, onto which a grow would pass now, is told to
    /// ask again (work available), once. Why: a thief refused while the job's profile still
    /// showed a move's aftermath (rank 0's MPI time held the waits on a slowed rank) doubled
    /// its pause, and the grow waited for its next round (the main job's full malleable
    /// act: grown 8.2 s after the move, where the grow passed 4 s earlier).
    pub(super) fn rehint_refused(&mut self, s: &mut Shared, now: Instant) {
        let keep = s.config.max_steal_backoff;
        // A refused thief that has since taken a rank of a job here (a partner of the
        // entities here runs on it) has no idle cores left to offer: forgotten, as
        // [`GrowOffers::forget_stale`] forgets its offer (its entry still shows the idle
        // node it was, and a grow onto that would pass).
        self.refused.retain(|(thief, _, at)| {
            now.saturating_duration_since(*at) < keep
                && !s
                    .entities
                    .iter()
                    .flat_map(|e| e.partners.iter())
                    .any(|p| p.host == thief.host)
        });
        if self.refused.is_empty() || s.outgoing.is_some() {
            return;
        }
        let Some(node) = s.own_profile() else {
            return;
        };
        let passing: Vec<PeerId> = self
            .refused
            .iter()
            .filter(|(thief, rtts, _)| {
                self.grow_plan(s, now, &node, thief, rtts)
                    .ok()
                    .flatten()
                    .is_some_and(|g| g.beats_move(None))
            })
            .map(|(thief, ..)| thief.peer.clone())
            .collect();
        for peer in passing {
            self.refused.retain(|(t, ..)| t.peer != peer);
            s.stats.work_hints_sent += 1;
            s.send(peer, Message::WorkAvailable);
        }
    }

    /// `Agent::grow_plan` for the thief of `steal` with this node's own profile, counting
    /// a refused offer.
    pub(crate) fn grow_for_steal(
        &self,
        s: &mut Shared,
        now: Instant,
        thief: &Beneficiary,
        thief_rtts: &[HostRtt],
    ) -> Option<GrowPlan> {
        let node = s.own_profile()?;
        match self.grow_plan(s, now, &node, thief, thief_rtts) {
            Ok(grow) => grow,
            Err(GrowRefusal::NotIdle) => {
                s.stats.grow_offers_refused += 1;
                None
            }
        }
    }

    /// The end of a resize this agent asked for: the job's width is held from now, and a
    /// shrink took the job's ranks off this node.
    pub(super) fn finish_resize(
        &mut self,
        s: &mut Shared,
        now: Instant,
        resize: &OutgoingResize,
        completed: bool,
    ) {
        if completed {
            s.stats.resizes_completed += 1;
        } else {
            s.stats.resizes_failed += 1;
        }
        let job = resize.job();
        if let Some(entry) = self.widths.get_mut(job) {
            entry.1 = Some(now);
        } else {
            self.widths.insert(job.clone(), (0, Some(now)));
        }
        if completed {
            if let OutgoingResize::Shrink(job) = resize {
                s.entities.retain(|e| &e.id.job != job);
                self.slowed_since.remove(job);
                self.shrunk_off.insert(job.clone(), now);
            }
        }
    }

    /// A leaving node, or one whose competing load slows a malleable job's ranks, shrinks
    /// the job off itself when the time has come (see the module docs). Called on every
    /// timer and profile.
    pub(super) fn shrink_if_due(&mut self, s: &mut Shared, now: Instant) {
        self.shrink_now_if_due(s, now);
        self.wake = self.next_resize_check(s, now);
    }

    fn shrink_now_if_due(&mut self, s: &mut Shared, now: Instant) {
        if !s.config.resizes || s.outgoing.is_some() {
            return;
        }
        let Some(node) = s.node else {
            return;
        };
        if let Some(leaving) = &s.leaving {
            // A shrink the job refused is asked again at most once per steal period.
            let retry = self
                .last_shrink
                .is_none_or(|at| now >= at + s.config.steal_period);
            if retry && now >= leaving.waiting_since() + leave_shrink_wait(&s.config) {
                if let Some((job, from, to)) = self.shrinkable_jobs(s, now).first().cloned() {
                    tracing::info!(agent = %s.me, %job, from, to, "leaving: no idle node took the job's ranks; shrinking it off this node");
                    self.shrink_off_here(s, now, job, (from, to), ResizeReason::Leave);
                }
            }
            return;
        }
        self.update_slowed(s, now, &node);
        let cpu_now = cpu_per_entity(s, &node, true);
        let cpu_free = cpu_per_entity(s, &node, false);
        let mut best: Option<(JobId, u32, u32, f64)> = None;
        for (job, from, to) in self.shrinkable_jobs(s, now) {
            let due = self
                .slowed_since
                .get(&job)
                .is_some_and(|since| now >= *since + s.config.shed_after);
            let settled = s
                .entities
                .iter()
                .filter(|e| e.id.job == job)
                .all(|e| settled_here(s, e, now));
            if !due || !settled || self.width_held(s, &job, now) {
                continue;
            }
            // The job's rank here that computes longest stands for it: the slowed one.
            let Some(off) = OffHere::weigh(s, &job, cpu_now, (from, to), node.bandwidth) else {
                continue;
            };
            // The ranks that stay are taken to get what this node gives a rank without
            // its competing load (a pool of like nodes).
            let gain = off.gain(s, &off.timing, to, cpu_free);
            if gain.gain >= s.config.min_gain && best.as_ref().is_none_or(|b| gain.gain > b.3) {
                best = Some((job, from, to, gain.gain));
            }
        }
        if let Some((job, from, to, gain)) = best {
            tracing::info!(agent = %s.me, %job, from, to, gain, "competing load slows the job here and no idle node took its ranks; shrinking it off this node");
            self.shrink_off_here(s, now, job, (from, to), ResizeReason::Shed { gain });
            return;
        }
        if let Some((job, from, to, gain)) = self.distant_shed(s, now, &node, cpu_now) {
            tracing::info!(agent = %s.me, %job, from, to, gain, "the job's ranks here exchange beyond the local tier; shrinking it off this node");
            self.distant_since.remove(&job);
            self.shrink_off_here(s, now, job, (from, to), ResizeReason::Distant { gain });
            return;
        }
        if let Some(shrink) = self.straggler_shrink(s, now, &node, cpu_now) {
            tracing::info!(agent = %s.me, job = %shrink.job, from = shrink.from, to = shrink.to, gain = shrink.gain, hosts = ?shrink.hosts, "a slow rank elsewhere holds the job back; shrinking the job onto its ranks here");
            self.straggled_since.remove(&shrink.job);
            self.shrink(
                s,
                now,
                OutgoingResize::ShrinkElsewhere(shrink.job),
                (shrink.from, shrink.to),
                shrink.hosts,
                ResizeReason::Straggler { gain: shrink.gain },
            );
        }
    }

    /// The home agent of a malleable job (rank 0 runs here) whose slowest rank computes on
    /// another node, and has for [`straggler_wait`] with nobody moving it: the shrink of
    /// the job onto its ranks here, if the model finds it worth the minimum gain.
    ///
    /// Why: a job grown onto a node that was the best offer then keeps the pace of its
    /// rank there once faster nodes come free (its compute `W / n` at that node's speed),
    /// and nothing else acts: the rank's agent finds no thief near all its partners
    /// (`keep_near_partners`), its node is not loaded, and the home agent grows no job
    /// whose slowest rank runs elsewhere (`GrowPlan::beats_move`). (`scale --malleable`,
    /// 100 nodes, seed 17: a job of 11 ranks, 10 on a node of speed 1.60 and 1 on a node
    /// of speed 0.69, computed 105 ms an iteration for the last 50 minutes of the hour,
    /// the oracle's 38.8.) Only the home agent decides, so that two agents never shrink
    /// one job at once, and only for the job's ranks here: the ranks elsewhere are named
    /// by their hosts, those of the partners of the ranks here, and the hosts must be no
    /// more than the ranks elsewhere (PCM refuses a shrink that names a host of more ranks
    /// than it removes, and with fewer it takes the highest ranks).
    fn straggler_shrink(
        &mut self,
        s: &Shared,
        now: Instant,
        node: &NodeProfile,
        cpu_now: f64,
    ) -> Option<StragglerShrink> {
        let mut straggling: Vec<JobId> = Vec::new();
        let mut best: Option<StragglerShrink> = None;
        for rank0 in s.entities.iter().filter(|e| e.id.rank == Rank(0)) {
            let (Some(limits), Some(slowest)) = (rank0.malleable, rank0.job_slowest_compute) else {
                continue;
            };
            let job = &rank0.id.job;
            let ranks_here: Vec<&EntityProfile> =
                s.entities.iter().filter(|e| &e.id.job == job).collect();
            let here = ranks_here.len() as u32;
            let slowest_here = ranks_here
                .iter()
                .map(|e| e.compute)
                .max()
                .unwrap_or(rank0.compute);
            if here >= rank0.job_ranks
                || here * 2 < rank0.job_ranks
                || slowest_here.as_secs_f64() >= STRAGGLER_SHARE * slowest.as_secs_f64()
            {
                continue;
            }
            straggling.push(job.clone());
            let since = *self.straggled_since.get(job).unwrap_or(&now);
            let settled = ranks_here.iter().all(|e| settled_here(s, e, now));
            let width_settled = rank0.width_age.is_some_and(|age| age >= s.config.hold_down);
            if now < since + straggler_wait(&s.config)
                || !settled
                || !width_settled
                || self.width_held(s, job, now)
                || !limits.allows(here)
            {
                continue;
            }
            let mut hosts: Vec<HostName> = job_hosts(s, job)
                .filter(|h| **h != s.host)
                .cloned()
                .collect();
            hosts.sort();
            hosts.dedup();
            if hosts.is_empty() || hosts.len() as u32 > rank0.job_ranks - here {
                continue;
            }
            let Some(timing) = JobTiming::from_rank(rank0, cpu_now) else {
                continue;
            };
            let cost = s.config.resize_cost.cost(
                rank0.state_bytes.saturating_mul(u64::from(timing.ranks)),
                timing.ranks,
                here,
                node.bandwidth,
            );
            // The ranks here keep the CPU they get now; the exchange stays as measured
            // (it crossed the network to the ranks elsewhere: an over-estimate after).
            let gain = resize_gain(
                &timing,
                here,
                cpu_now,
                cost,
                rank0.life_expectancy(),
                s.config.resize_cost.term,
            );
            if gain.gain >= s.config.min_gain && best.as_ref().is_none_or(|b| gain.gain > b.gain) {
                best = Some(StragglerShrink {
                    job: job.clone(),
                    from: timing.ranks,
                    to: here,
                    hosts,
                    gain: gain.gain,
                });
            }
        }
        self.straggled_since
            .retain(|job, _| straggling.contains(job));
        for job in straggling {
            self.straggled_since.entry(job).or_insert(now);
        }
        best
    }

    /// A malleable job whose rank 0 runs elsewhere and whose ranks here exchange with a
    /// partner beyond the local tier (10 ms), and have for [`straggler_wait`]: the shrink of
    /// the job off this node, if the model finds it worth the minimum gain without that
    /// link's one-way latency in the job's exchange (at least what the farthest link costs
    /// an iteration once: conservative for patterns that cross it in several rounds).
    ///
    /// Why: a grown job whose ranks ended up on nodes far from each other (a node of it
    /// left, or its owner came back, and its ranks went to whichever thieves asked) waits
    /// on that latency at every iteration, and nothing else acts: a rank's moves keep near
    /// its partners, which no thief is when they are scattered, and the straggler shrink
    /// weighs compute only. (`scale --malleable`, 100 nodes, seed 13: a stencil job of 10
    /// ranks on 5 nodes waited 168 ms of latency an iteration, computing 50-96 ms, from
    /// minute 20 to the end of the hour; the oracle's malleable jobs waited 5.4 ms on
    /// average, the agents' 20.3, two thirds of it in the 8% of samples above 50 ms.) The
    /// home agent keeps its ranks (one end of every shed is elsewhere), and the width
    /// hold-down spaces two sheds of one job, so the far link's other end weighs the job
    /// again once the first shed has changed it.
    ///
    /// NSp2p only: in NSc2c a job's ranks stay within a manager's cluster, and the shed
    /// cost NSc2c's malleable runs (100 nodes, seeds 1-32: 0.740 -> 0.713 of the oracle).
    fn distant_shed(
        &mut self,
        s: &Shared,
        now: Instant,
        node: &NodeProfile,
        cpu_now: f64,
    ) -> Option<(JobId, u32, u32, f64)> {
        if s.config.topology != Topology::PeerToPeer {
            return None;
        }
        let local = crate::tier::LOCAL_MAX_RTT.as_secs_f64();
        let mut distant: Vec<JobId> = Vec::new();
        let mut best: Option<(JobId, u32, u32, f64)> = None;
        for (job, from, to) in self.shrinkable_jobs(s, now) {
            let ranks: Vec<&EntityProfile> =
                s.entities.iter().filter(|e| e.id.job == job).collect();
            if ranks.iter().any(|e| e.id.rank == Rank(0)) {
                continue;
            }
            let far = ranks
                .iter()
                .flat_map(|e| e.partners.iter())
                .filter(|p| p.host != s.host)
                .filter_map(|p| s.rtt_to_host(&p.host))
                .fold(0.0, f64::max);
            if far <= local {
                continue;
            }
            distant.push(job.clone());
            let since = *self.distant_since.get(&job).unwrap_or(&now);
            let settled = ranks.iter().all(|e| settled_here(s, e, now));
            let width_settled = ranks[0]
                .width_age
                .is_some_and(|age| age >= s.config.hold_down);
            if now < since + straggler_wait(&s.config)
                || !settled
                || !width_settled
                || self.width_held(s, &job, now)
            {
                continue;
            }
            let Some(off) = OffHere::weigh(s, &job, cpu_now, (from, to), node.bandwidth) else {
                continue;
            };
            // The ranks that stay keep the CPU they get now.
            let after = JobTiming {
                exchange: (off.timing.exchange - far / 2.0).max(0.0),
                ..off.timing
            };
            let gain = off.gain(s, &after, to, cpu_now);
            tracing::debug!(
                agent = %s.me,
                job = %job,
                from,
                to,
                far_rtt_ms = far * 1e3,
                work_ms = off.timing.work * 1e3,
                exchange_ms = off.timing.exchange * 1e3,
                iteration_now_ms = gain.iteration_now * 1e3,
                iteration_after_ms = gain.iteration_after * 1e3,
                gain = gain.gain,
                "distant shed weighed"
            );
            if gain.gain >= s.config.min_gain && best.as_ref().is_none_or(|b| gain.gain > b.3) {
                best = Some((job, from, to, gain.gain));
            }
        }
        self.distant_since.retain(|job, _| distant.contains(job));
        for job in distant {
            self.distant_since.entry(job).or_insert(now);
        }
        best
    }

    /// The malleable jobs with ranks here that may lose all of them: `(job, width now,
    /// width after)`.
    fn shrinkable_jobs(&self, s: &Shared, now: Instant) -> Vec<(JobId, u32, u32)> {
        let mut jobs: Vec<(JobId, u32, u32)> = Vec::new();
        let stale_after = s.config.hold_down * 2;
        for e in &s.entities {
            let Some(limits) = e.malleable else {
                continue;
            };
            let shrunk_lately = self
                .shrunk_off
                .get(&e.id.job)
                .is_some_and(|at| now.saturating_duration_since(*at) < stale_after);
            if jobs.iter().any(|(j, _, _)| *j == e.id.job) || e.job_ranks == 0 || shrunk_lately {
                continue;
            }
            let here = s.entities.iter().filter(|o| o.id.job == e.id.job).count() as u32;
            let to = e.job_ranks.saturating_sub(here);
            if to >= 1 && limits.allows(to) {
                jobs.push((e.id.job.clone(), e.job_ranks, to));
            }
        }
        jobs
    }

    /// Notes since when competing load slows each malleable job's ranks here.
    fn update_slowed(&mut self, s: &mut Shared, now: Instant, node: &NodeProfile) {
        let slowed = cpu_per_entity(s, node, true) < SLOWED_SHARE * cpu_per_entity(s, node, false);
        let jobs: Vec<JobId> = if slowed && s.node_is_fresh() {
            s.entities
                .iter()
                .filter(|e| e.malleable.is_some())
                .map(|e| e.id.job.clone())
                .collect()
        } else {
            Vec::new()
        };
        self.slowed_since.retain(|job, _| jobs.contains(job));
        for job in jobs {
            self.slowed_since.entry(job).or_insert(now);
        }
    }

    /// Asks for a shrink of `from` ranks to `to`, the ranks on `hosts` leaving.
    fn shrink(
        &mut self,
        s: &mut Shared,
        now: Instant,
        kind: OutgoingResize,
        (from, to): (u32, u32),
        hosts: Vec<HostName>,
        reason: ResizeReason,
    ) {
        self.last_shrink = Some(now);
        let id = MigrationId(s.fresh_id());
        start_resize(s, now, id, kind, from, to, hosts, reason, None);
    }

    /// Asks for a shrink of `job` off this node.
    fn shrink_off_here(
        &mut self,
        s: &mut Shared,
        now: Instant,
        job: JobId,
        (from, to): (u32, u32),
        reason: ResizeReason,
    ) {
        let here = vec![s.host.clone()];
        self.shrink(
            s,
            now,
            OutgoingResize::Shrink(job),
            (from, to),
            here,
            reason,
        );
    }

    /// When `Agent::shrink_if_due` or [`Resizing::close_offer_window`] must next run
    /// without a new profile: the end of a leaving node's wait, of the shed wait of a
    /// slowed job, or of a window of grow offers.
    pub(super) fn resize_deadline(&self, s: &Shared) -> Option<Instant> {
        let wake = self.wake.filter(|_| s.outgoing.is_none());
        match (wake, self.offer_window_close(s)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next instant after `now` at which a wait of `Agent::shrink_if_due` ends. Only
    /// waits still running count: one that ended without a shrink (the gain too small, the
    /// ranks too new) is looked at again with each profile, never by a timer left in the
    /// past (the simulator's driver, like the real one, would call again at once, forever).
    fn next_resize_check(&self, s: &Shared, now: Instant) -> Option<Instant> {
        if !s.config.resizes || s.outgoing.is_some() {
            return None;
        }
        match &s.leaving {
            Some(leaving) => {
                let waited = leaving.waiting_since() + leave_shrink_wait(&s.config);
                let retry = self
                    .last_shrink
                    .map_or(waited, |at| (at + s.config.steal_period).max(waited));
                (retry > now && s.entities.iter().any(|e| e.malleable.is_some())).then_some(retry)
            }
            None => self
                .slowed_since
                .values()
                .map(|since| *since + s.config.shed_after)
                .chain(
                    self.straggled_since
                        .values()
                        .chain(self.distant_since.values())
                        .map(|since| *since + straggler_wait(&s.config)),
                )
                .filter(|at| *at > now)
                .min(),
        }
    }
}

/// A shrink of a job off this node, as the model weighs it: the timing of the job's rank
/// here that computes longest (it stands for the job), the resize's cost, and the job's
/// expected life.
struct OffHere {
    timing: JobTiming,
    cost: f64,
    life: f64,
}

impl OffHere {
    /// `None` when no rank of `job` here has a usable profile (see [`JobTiming::from_rank`]).
    fn weigh(
        s: &Shared,
        job: &JobId,
        cpu_now: f64,
        (from, to): (u32, u32),
        bandwidth: f64,
    ) -> Option<OffHere> {
        let rank = s
            .entities
            .iter()
            .filter(|e| &e.id.job == job)
            .max_by(|a, b| a.compute.cmp(&b.compute))?;
        let timing = JobTiming::from_rank(rank, cpu_now)?;
        let cost = s.config.resize_cost.cost(
            rank.state_bytes.saturating_mul(u64::from(from)),
            from,
            to,
            bandwidth,
        );
        Some(OffHere {
            timing,
            cost,
            life: rank.life_expectancy(),
        })
    }

    /// The gain of the job at width `to` with `timing` (the one weighed, or a changed
    /// one), each rank getting `cpu`.
    fn gain(&self, s: &Shared, timing: &JobTiming, to: u32, cpu: f64) -> ResizeGain {
        resize_gain(
            timing,
            to,
            cpu,
            self.cost,
            self.life,
            s.config.resize_cost.term,
        )
    }
}

/// Whether a rank here may be shrunk off or counted on to stay: it has been here a
/// hold-down and is not held back from moving.
fn settled_here(s: &Shared, e: &EntityProfile, now: Instant) -> bool {
    e.resident >= s.config.hold_down && !s.is_held(&e.id, now)
}

/// The CPU each of this node's entities gets: the node's capacity (without the
/// competing load, or with it when `competing`) shared among them, at most
/// [`Config::with_entity_cores`] each.
pub(crate) fn cpu_per_entity(s: &Shared, node: &NodeProfile, competing: bool) -> f64 {
    let cores = if competing {
        (node.cores - node.competing).max(0.0)
    } else {
        node.cores
    };
    cpu_per_rank(
        cores,
        node.speed,
        s.entities.len().max(1) as u32,
        s.config.entity_cores,
    )
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
pub(crate) fn grow_home(s: &Shared, thief: &Beneficiary, exclude: &[&PeerId]) -> Option<PeerId> {
    if !s.config.resizes
        || s.config.topology != Topology::PeerToPeer
        || !thief.profile.is_lightly_loaded(s.config.light_threshold)
    {
        return None;
    }
    s.entities
        .iter()
        .filter(|e| {
            e.id.rank != Rank(0)
                && e.malleable
                    .is_some_and(|m| m.widths_above(e.job_ranks, u32::MAX).next().is_some())
        })
        .filter_map(|e| e.home.as_ref())
        .filter(|home| **home != s.host && **home != thief.host)
        .filter_map(|home| s.hosts.holder(home))
        .find(|peer| s.peers.get(peer).is_some() && !exclude.contains(peer))
        .cloned()
}

/// Grows a job onto the thief of `steal` as `plan` says, and tells the thief its steal
/// is answered.
pub(crate) fn start_grow(
    s: &mut Shared,
    now: Instant,
    plan: GrowPlan,
    thief_host: &HostName,
    origin: PeerId,
    steal_id: MessageId,
) {
    let added = plan.gain.to - plan.from;
    tracing::info!(
        agent = %s.me,
        job = %plan.job,
        from = plan.from,
        to = plan.gain.to,
        onto = %thief_host,
        gain = plan.gain.gain,
        iteration_now = plan.gain.iteration_now,
        iteration_after = plan.gain.iteration_after,
        "growing a job"
    );
    let id = MigrationId(s.fresh_id());
    let new_ranks: Vec<EntityId> = (plan.from..plan.gain.to)
        .map(|r| EntityId {
            job: plan.job.clone(),
            rank: Rank(r),
        })
        .collect();
    start_resize(
        s,
        now,
        id,
        OutgoingResize::Grow(plan.job.clone()),
        plan.from,
        plan.gain.to,
        vec![thief_host.clone(); added as usize],
        ResizeReason::Grow {
            gain: plan.gain.gain,
        },
        Some(origin.clone()),
    );
    s.send(
        origin,
        Message::StealAccepted {
            id: steal_id,
            migration: id,
            entities: new_ranks,
            from_host: Some(s.host.clone()),
            within_hold_down: false,
        },
    );
}

/// Queues a resize of `job` and keeps it as the reconfiguration under way.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_resize(
    s: &mut Shared,
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
        OutgoingResize::Shrink(job) => s
            .entities
            .iter()
            .filter(|e| &e.id.job == job)
            .map(|e| e.id.clone())
            .collect(),
        OutgoingResize::Grow(_) | OutgoingResize::ShrinkElsewhere(_) => Vec::new(),
    };
    s.stats.resizes_started += 1;
    s.outgoing = Some(Outgoing {
        id,
        notify,
        deadline: now + s.config.migration_timeout,
        entities: leaving_here,
        resize: Some(kind),
    });
    s.actions.push_back(Action::Resize {
        id,
        job,
        from,
        ranks,
        hosts,
        reason,
    });
}

#[cfg(test)]
mod tests;
