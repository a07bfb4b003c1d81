//! The resource sensitive model extended to malleable jobs (docs/malleability.md): the gain
//! of growing a job by `k` ranks onto an idle node, and of shrinking it off a node that got
//! loaded or is leaving, against what the resize costs.
//!
//! # The scaling assumption
//!
//! A malleable job here is a data-parallel code whose iterations are bulk synchronous (every
//! rank waits for its neighbours each iteration), as heat2d and Jacobi are. Its iteration
//! time at width `n` is
//!
//! ```text
//! T(n) = (W / n) / s_min + H        (H = 0 at n = 1)
//! ```
//!
//! - `W`, the **work**: core-seconds of computing per iteration for the whole job
//!   (reference-speed cores), which the ranks divide evenly (row blocks);
//! - `s_min`: the CPU the slowest rank gets (cores times speed, at most what one rank can
//!   use): the job goes at its slowest rank's pace;
//! - `H`, the **exchange**: the seconds per iteration spent exchanging halos, which do not
//!   divide (a rank sends the same rows whatever the width).
//!
//! The agents read both from one rank's profile ([`JobTiming::from_rank`]): the rank's
//! compute time times the CPU it gets is its `W / n`, and `H` is the iteration less the
//! job's slowest rank's compute time, which the ranks agree on at each status check
//! ([`EntityProfile::job_slowest_compute`]): the slowest rank waits for nobody, so the rest
//! of its iteration is the exchange, and `s_min` follows (`W / n` over that compute time).
//! When the slowest compute is unknown (an older PCM), the rank is taken as the slowest:
//! its time inside MPI, `H` plus its waiting, is taken as `H`, so the estimate of `H` is
//! high and the predicted gain of growing low: the model errs towards not resizing. Checked against
//! heat2d measured at 1 to 4 ranks on emulated nodes (docs/agents.md, "Growing and
//! shrinking"). (Taking `H` as the MPI time of the iterations in which the rank waited
//! least, about 1 us for heat2d, made the agents grow heat2d 1024 x 1024 onto a joining
//! node while a rank stayed on a loaded one, where moving that rank was what paid:
//! docs/results-log.md, 2026-12-03.)
//!
//! # Gain
//!
//! As Figure 3's `Delta` compares what a node offers with what an entity uses, the resize
//! compares the job's iteration rates after and before, normalised to [-1, 1]:
//! `Delta = (1/T_after - 1/T_now) / (1/T_after + 1/T_now)`, and charges the resize's cost as
//! a migration's ([`crate::model::CostTerm`]) against the job's life expectancy:
//! `gain = Delta - cost_term(C, E)`. The cost `C` ([`ResizeCostModel`]) is a spawn when the
//! job grows (measured by `mpi-ios-bench resize`: 87 of a grow's 90 ms on MPICH) plus the
//! rows that change owner over the bandwidth ([`moved_fraction`]).

use std::time::Duration;

use crate::model::{CostTerm, EntityProfile, NodeProfile, DEFAULT_BANDWIDTH};

/// Time to spawn the added processes of a grow, when nothing better is known: the
/// migration's spawn time ([`crate::model::DEFAULT_SPAWN_TIME`]), which a grow's measured
/// 87-90 ms (MPICH, `mpi-ios-bench resize`) stays well under.
pub const DEFAULT_GROW_SPAWN: Duration = crate::model::DEFAULT_SPAWN_TIME;
/// Fixed part of a shrink (agreement, split; no spawn): measured 7.4 ms for heat2d 4 -> 2
/// on MPICH, rounded up.
pub const DEFAULT_SHRINK_TIME: Duration = Duration::from_millis(20);

/// How a job's iteration time depends on its width, estimated from one of its ranks (see
/// the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobTiming {
    /// Ranks now.
    pub ranks: u32,
    /// Core-seconds of computing per iteration, whole job.
    pub work: f64,
    /// Seconds per iteration that do not divide among ranks (0 for a job of one rank).
    pub exchange: f64,
    /// Seconds per iteration now (1 / the job's iteration rate).
    pub iteration: f64,
}

impl JobTiming {
    /// The timing of `rank`'s job from its profile, with `cpu` the CPU (cores times speed)
    /// the rank gets where it runs; `None` when the profile says too little (no iteration
    /// ended, unknown width, or no CPU).
    pub fn from_rank(rank: &EntityProfile, cpu: f64) -> Option<JobTiming> {
        let compute = rank.compute.as_secs_f64();
        let mpi = rank.mpi_wait.as_secs_f64();
        let iteration = compute + mpi;
        // The job's slowest rank computes this long; the rest of the iteration is the
        // exchange (it waits for nobody). Unknown: this rank is taken as the slowest. Kept
        // between this rank's compute and the iteration: the figures are averages over a
        // period, and this rank's compute also counts PCM's status checks.
        let slowest = rank
            .job_slowest_compute
            .map(|d| d.as_secs_f64())
            .filter(|s| s.is_finite())
            .map_or(compute, |s| s.clamp(compute, iteration.max(compute)));
        let known = rank.job_ranks > 0
            && cpu.is_finite()
            && cpu > 0.0
            && compute.is_finite()
            && compute > 0.0
            && iteration.is_finite();
        if !known {
            return None;
        }
        Some(JobTiming {
            ranks: rank.job_ranks,
            work: compute * cpu * f64::from(rank.job_ranks),
            exchange: if rank.job_ranks > 1 {
                iteration - slowest
            } else {
                0.0
            },
            iteration,
        })
    }

    /// The CPU its slowest rank gets now, as the timing implies: its block of work over the
    /// time left after the exchange.
    pub fn slowest_cpu(&self) -> f64 {
        let compute = (self.iteration - self.exchange).max(f64::MIN_POSITIVE);
        self.work / f64::from(self.ranks.max(1)) / compute
    }

    /// Predicted seconds per iteration at `width` ranks, its slowest rank getting `cpu`.
    pub fn iteration_at(&self, width: u32, cpu: f64) -> f64 {
        let width = width.max(1);
        let exchange = if width > 1 { self.exchange } else { 0.0 };
        self.work / f64::from(width) / cpu.max(f64::MIN_POSITIVE) + exchange
    }
}

/// The fraction of a block-distributed array whose rows change process when a job goes
/// from `from` to `to` ranks (the ranks that stay keep their order, the first rows first):
/// what a resize sends over the network.
pub fn moved_fraction(from: u32, to: u32) -> f64 {
    if from == 0 || to == 0 || from == to {
        return 0.0;
    }
    let (n, m) = (f64::from(from), f64::from(to));
    // Process i owns [i/n, (i+1)/n) before and [i/m, (i+1)/m) after; what it keeps is the
    // overlap, for the min(from, to) processes in both worlds.
    let kept: f64 = (0..from.min(to))
        .map(|i| {
            let i = f64::from(i);
            let lo = (i / n).max(i / m);
            let hi = ((i + 1.0) / n).min((i + 1.0) / m);
            (hi - lo).max(0.0)
        })
        .sum();
    (1.0 - kept).clamp(0.0, 1.0)
}

/// Predicts what a resize costs the job, in seconds, and how the gain charges it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResizeCostModel {
    /// Fixed part of a grow (spawning the added processes, merge, split).
    pub grow_spawn: Duration,
    /// Fixed part of a shrink.
    pub shrink: Duration,
    /// Bandwidth when the nodes measured none, bytes per second.
    pub default_bandwidth: f64,
    /// How the cost enters the gain.
    pub term: CostTerm,
}

impl Default for ResizeCostModel {
    fn default() -> Self {
        ResizeCostModel {
            grow_spawn: DEFAULT_GROW_SPAWN,
            shrink: DEFAULT_SHRINK_TIME,
            default_bandwidth: DEFAULT_BANDWIDTH,
            term: CostTerm::default(),
        }
    }
}

impl ResizeCostModel {
    /// Predicted seconds to resize a job holding `state_bytes` in all from `from` to `to`
    /// ranks over `bandwidth` bytes per second (0 or less: the default).
    pub fn cost(&self, state_bytes: u64, from: u32, to: u32, bandwidth: f64) -> f64 {
        let bandwidth = if bandwidth.is_finite() && bandwidth > 0.0 {
            bandwidth
        } else {
            self.default_bandwidth.max(1.0)
        };
        let fixed = if to > from {
            self.grow_spawn
        } else {
            self.shrink
        };
        fixed.as_secs_f64() + state_bytes as f64 * moved_fraction(from, to) / bandwidth
    }
}

/// What a resize would bring: the iteration times before and after, the normalised gain
/// and its parts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResizeGain {
    /// Width after the resize.
    pub to: u32,
    /// Seconds per iteration now.
    pub iteration_now: f64,
    /// Predicted seconds per iteration after.
    pub iteration_after: f64,
    /// Predicted cost of the resize, seconds.
    pub cost: f64,
    /// `Delta` of the iteration rates, in [-1, 1].
    pub delta: f64,
    /// `Delta` less the cost term.
    pub gain: f64,
}

/// The gain of a job resized to `to` ranks whose slowest rank then gets `cpu_after`:
/// `Delta` of the rates less the cost term of `cost_secs` over `life_secs`.
pub fn resize_gain(
    timing: &JobTiming,
    to: u32,
    cpu_after: f64,
    cost_secs: f64,
    life_secs: f64,
    term: CostTerm,
) -> ResizeGain {
    let after = timing.iteration_at(to, cpu_after);
    let delta = crate::model::delta(1.0 / after, 1.0 / timing.iteration.max(f64::MIN_POSITIVE));
    ResizeGain {
        to,
        iteration_now: timing.iteration,
        iteration_after: after,
        cost: cost_secs,
        delta,
        gain: delta - term.of(cost_secs, life_secs),
    }
}

/// The CPU one rank gets (speed-normalised) when `ranks` ranks share `cores` cores of
/// `speed`, at most `entity_cores` cores each when given: a rank uses at most that many of
/// the node's cores, each worth `speed` reference cores. (Capping the speed-normalised share
/// at `entity_cores` instead took a rank on a node at speed 1.4 for 1.0 reference core,
/// which made the work of its job look smaller and grows onto slower nodes look better.)
pub fn cpu_per_rank(cores: f64, speed: f64, ranks: u32, entity_cores: Option<f64>) -> f64 {
    let share = cores.max(0.0) / f64::from(ranks.max(1));
    entity_cores.map_or(share, |cap| share.min(cap)) * speed.max(0.0)
}

/// How many ranks an idle node can take for a job: one per idle core (rounded to the
/// nearest, at least one), at most `extra`.
pub fn ranks_for(node: &NodeProfile, entity_cores: Option<f64>, extra: u32) -> u32 {
    let per_rank = entity_cores.unwrap_or(1.0).max(f64::MIN_POSITIVE);
    let fit = (node.free_cores() * node.speed / per_rank).round();
    (fit.max(1.0).min(f64::from(extra))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EntityId;
    use pcm_proto::{JobId, Rank};

    fn rank(compute_ms: u64, mpi_ms: u64, ranks: u32) -> EntityProfile {
        let mut e = EntityProfile::new(
            EntityId {
                job: JobId::new("heat").unwrap(),
                rank: Rank(0),
            },
            1.0,
        );
        e.compute = Duration::from_millis(compute_ms);
        e.mpi_wait = Duration::from_millis(mpi_ms);
        e.job_ranks = ranks;
        e
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn the_timing_of_a_job_comes_from_one_rank_and_its_cpu() {
        // 2 ranks, each 40 ms of computing at 0.5 core, 10 ms in MPI: W = 0.04 * 0.5 * 2.
        let t = JobTiming::from_rank(&rank(40, 10, 2), 0.5).unwrap();
        assert!(close(t.work, 0.04));
        assert!(close(t.exchange, 0.010));
        assert!(close(t.iteration, 0.050));
        assert!(close(t.slowest_cpu(), 0.5));
        // At 4 ranks of 0.5 core: 0.04 / 4 / 0.5 + 0.01 = 0.03 s.
        assert!(close(t.iteration_at(4, 0.5), 0.030));
        // At 1 rank no exchange: 0.04 / 1 / 1.0 = 0.04 s.
        assert!(close(t.iteration_at(1, 1.0), 0.040));
        // Nothing known, nothing predicted.
        assert!(JobTiming::from_rank(&rank(0, 10, 2), 0.5).is_none());
        assert!(JobTiming::from_rank(&rank(40, 10, 0), 0.5).is_none());
        assert!(JobTiming::from_rank(&rank(40, 10, 2), 0.0).is_none());
    }

    #[test]
    fn given_the_jobs_slowest_compute_then_the_exchange_and_the_slowest_cpu_follow_from_it() {
        // Rank 0 computes 40 ms at 0.5 core and waits in MPI 50 ms: the other rank, on a
        // loaded node, computes 80 ms and exchanges 10 ms. W = 0.04 * 0.5 * 2 = 0.04.
        let mut waiting = rank(40, 50, 2);
        waiting.job_slowest_compute = Some(Duration::from_millis(80));
        let t = JobTiming::from_rank(&waiting, 0.5).unwrap();
        assert!(close(t.work, 0.04));
        assert!(close(t.exchange, 0.010));
        assert!(close(t.iteration, 0.090));
        // The slowest rank's block, 0.02 core-seconds, in 80 ms: 0.25 core.
        assert!(close(t.slowest_cpu(), 0.25));
        // Grown to 3 with the slow rank still slow: 0.04 / 3 / 0.25 + 0.01 = 0.0633 s.
        assert!(close(t.iteration_at(3, 0.25), 0.04 / 3.0 / 0.25 + 0.01));
        // Unknown: rank 0 is taken as the slowest, all its MPI time as exchange.
        let t = JobTiming::from_rank(&rank(40, 50, 2), 0.5).unwrap();
        assert!(close(t.exchange, 0.050) && close(t.slowest_cpu(), 0.5));
        // A figure below this rank's own compute (another period's) or above the iteration
        // is clamped.
        for (reported, exchange) in [(10, 0.050), (500, 0.0)] {
            waiting.job_slowest_compute = Some(Duration::from_millis(reported));
            let t = JobTiming::from_rank(&waiting, 0.5).unwrap();
            assert!(close(t.exchange, exchange), "{reported} ms: {t:?}");
        }
    }

    #[test]
    fn growing_onto_an_idle_core_gains_by_hand_computed_figures() {
        // 2 ranks at 0.6 core, 100 ms computing, 5 ms exchange: W = 0.1 * 0.6 * 2 = 0.12.
        let t = JobTiming::from_rank(&rank(100, 5, 2), 0.6).unwrap();
        // To 3 ranks, the newcomer also at 0.6: 0.12 / 3 / 0.6 + 0.005 = 0.0716667 s.
        let g = resize_gain(&t, 3, 0.6, 0.0, 1e9, CostTerm::Amortized);
        let after = 0.04 / 0.6 + 0.005;
        assert!(close(g.iteration_after, after));
        // Delta = (1/after - 1/0.105) / (1/after + 1/0.105) = (0.105 - after) / (0.105 + after).
        assert!(close(g.delta, (0.105 - after) / (0.105 + after)));
        assert!((g.delta - 0.1888).abs() < 1e-3);
        assert!(close(g.gain, g.delta));
        // A newcomer at 0.3 core is the slowest rank: 0.04 / 0.3 + 0.005 = 0.138 s, a loss.
        let slow = resize_gain(&t, 3, 0.3, 0.0, 1e9, CostTerm::Amortized);
        assert!(close(slow.iteration_after, 0.04 / 0.3 + 0.005));
        assert!(slow.gain < 0.0);
        // A cost of 1 s over a life of 10 s: amortised term 1 / (20 - 1).
        let costly = resize_gain(&t, 3, 0.6, 1.0, 10.0, CostTerm::Amortized);
        assert!(close(costly.gain, g.delta - 1.0 / 19.0));
    }

    #[test]
    fn shrinking_off_a_straggler_gains_and_off_an_even_rank_loses() {
        // 4 ranks; the local one gets 0.2 core (a hog took the rest of its 0.6), computes
        // 150 ms and waits 5 ms: W = 0.15 * 0.2 * 4 = 0.12 core-seconds.
        let t = JobTiming::from_rank(&rank(150, 5, 4), 0.2).unwrap();
        // The 3 others at 0.6: 0.12 / 3 / 0.6 + 0.005 = 0.0717 s against 0.155 s now:
        // Delta = (0.155 - 0.0717) / (0.155 + 0.0717) = 0.368.
        let g = resize_gain(&t, 3, 0.6, 0.0, 1e9, CostTerm::Amortized);
        let after = 0.04 / 0.6 + 0.005;
        assert!(close(g.iteration_after, after));
        assert!(close(g.gain, (0.155 - after) / (0.155 + after)));
        // Without the hog (the local rank at 0.6 too, 50 ms computing): 4 -> 3 is slower.
        let even = JobTiming::from_rank(&rank(50, 5, 4), 0.6).unwrap();
        assert!(resize_gain(&even, 3, 0.6, 0.0, 1e9, CostTerm::Amortized).gain < 0.0);
    }

    #[test]
    fn rows_that_change_owner_are_counted_exactly() {
        assert!(close(moved_fraction(2, 2), 0.0));
        // 2 -> 3: process 0 keeps [0, 1/3), process 1 keeps [1/2, 2/3): 1/2 moves.
        assert!(close(moved_fraction(2, 3), 0.5));
        // 4 -> 2: process 0 keeps [0, 1/4), process 1 nothing of [1/4, 1/2): 3/4 moves,
        // as the resize benchmark measured (393,216 of 524,288 bytes).
        assert!(close(moved_fraction(4, 2), 0.75));
        assert!(close(moved_fraction(1, 4), 0.75));
        let m = ResizeCostModel::default();
        // A grow of 1 MB from 2 to 3 at 1 MB/s: 0.3 s spawn + 0.5 s of rows.
        assert!(close(m.cost(1_000_000, 2, 3, 1e6), 0.8));
        // A shrink spawns nothing.
        assert!(close(m.cost(1_000_000, 4, 2, 1e6), 0.02 + 0.75));
    }

    #[test]
    fn an_idle_node_takes_a_rank_per_idle_core() {
        let mut node = NodeProfile::idle(4.0, 8 << 30);
        assert_eq!(ranks_for(&node, Some(1.0), 8), 4);
        assert_eq!(ranks_for(&node, Some(1.0), 2), 2);
        node.cores = 0.6;
        assert_eq!(ranks_for(&node, Some(1.0), 8), 1);
        assert!(close(cpu_per_rank(0.6, 1.0, 1, Some(1.0)), 0.6));
        assert!(close(cpu_per_rank(4.0, 1.0, 2, Some(1.0)), 1.0));
        assert!(close(cpu_per_rank(4.0, 1.0, 2, None), 2.0));
        // The cap counts cores: one core of a node at speed 1.4 is 1.4 reference cores.
        assert!(close(cpu_per_rank(8.0, 1.4, 7, Some(1.0)), 1.4));
        assert!(close(cpu_per_rank(4.0, 0.99, 4, Some(1.0)), 0.99));
        assert!(close(cpu_per_rank(0.5, 2.0, 1, Some(1.0)), 1.0));
    }
}
