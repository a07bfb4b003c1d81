//! The yardsticks of an adaptive experiment on emulated nodes (the main job, Figures
//! 13-16): how the adaptive run compares with its static, unloaded and best-placement twins.
//!
//! The physical limit is the adaptive run's own progress until the spare capacity appears
//! (the join, or the load onset when the capacity was there from the start), then the rest
//! of the iterations at the best run's speed: the best placement's under the same load,
//! measured from its own load onset, or the unloaded run's when the experiment has no best
//! placement. The emulated nodes share the machine's two cores, so a hog on one node takes
//! CPU the ranks elsewhere could have used; the best-placement run lives with that as the
//! adaptive run does, the unloaded run does not.
//!
//! Times are iteration-loop times: each run's progress events are shifted so that 0 is the
//! start of its loop (its loop start event), so mpirun's start-up, which varies between
//! namespaces, does not count against anyone.

use mpi_ios_tests::scenario::{EventKind, Outcome};

/// Seconds from mpirun's start to the start of the run's iteration loop: its loop start
/// event, or 0 when the run ended before reporting it.
pub fn loop_start(o: &Outcome) -> f64 {
    o.loop_start.unwrap_or(0.0).max(0.0)
}

/// Time of the first event of `kind`, in loop time.
pub fn event_at(o: &Outcome, kind: EventKind) -> Option<f64> {
    o.first(kind).map(|t| t - loop_start(o))
}

/// (loop time, iterations per second) of every progress event.
pub fn rate_points(o: &Outcome) -> Vec<(f64, f64)> {
    let t0 = loop_start(o);
    o.samples.iter().map(|s| (s.t - t0, s.rate)).collect()
}

/// Iterations per second over a whole run.
pub fn mean_rate(o: &Outcome) -> f64 {
    o.report.iterations as f64 / o.report.seconds.max(1e-9)
}

/// Iterations per second from loop time `from` to the end of the run.
pub fn rate_from(o: &Outcome, from: f64) -> f64 {
    let t0 = loop_start(o);
    let Some(last) = o.samples.last() else {
        return mean_rate(o);
    };
    let span = last.t - t0 - from;
    if span <= 1.0 {
        return mean_rate(o);
    }
    (last.iteration as f64 - o.iteration_at(from + t0)) / span
}

/// The yardsticks of one experiment.
#[derive(Debug, Clone)]
pub struct Yardsticks {
    /// Loop seconds of each run.
    pub adaptive_s: f64,
    /// Static MPI under load.
    pub static_s: f64,
    /// No load, same placement.
    pub unloaded_s: f64,
    /// Best placement (same load).
    pub best_s: f64,
    /// Iterations per second of the best placement once the load runs.
    pub best_rate: f64,
    /// Best possible time given the capacity left.
    pub limit_s: f64,
    /// When the spare capacity appeared (loop time).
    pub free_from: f64,
    /// The event recovery is measured from, in words, and its loop time.
    pub recovery_from: Option<(&'static str, f64)>,
    /// The throughput recovery aims at (90% of the reference run's mean).
    pub recovery_target: f64,
    /// Seconds from that event until the run stays recovered: every 2 s window from then on
    /// averages the target ([`Outcome::recovered_from`], as in the main job).
    pub recovery_s: Option<f64>,
    /// Seconds from the load onset until the run stays at 90% of the best placement's
    /// throughput under the same load (what this machine allows once the load runs), when
    /// the experiment has both a load and a best placement.
    pub recovery_best_s: Option<f64>,
    /// Migrations: (loop time, what).
    pub migrations: Vec<(f64, String)>,
    /// Mean iterations per second of the adaptive run from its last migration to its end:
    /// the steady state the agents reached, to set beside the best run's.
    pub settled_rate: Option<f64>,
}

impl Yardsticks {
    /// How much shorter the adaptive run was than static MPI, in %.
    pub fn shorter_pct(&self) -> f64 {
        100.0 * (1.0 - self.adaptive_s / self.static_s)
    }

    /// Adaptive time over the physical limit.
    pub fn limit_ratio(&self) -> f64 {
        self.adaptive_s / self.limit_s
    }
}

/// Computes the yardsticks of an adaptive run of `iters` iterations against its static,
/// unloaded and (when the experiment names one) best-placement twins. Recovery is measured
/// from the load onset against 90% of the unloaded run's throughput, or, with no load in
/// the scenario, from the node join against 90% of the best run's throughput.
pub fn of(
    iters: u64,
    adaptive: &Outcome,
    static_run: &Outcome,
    unloaded: &Outcome,
    best: Option<&Outcome>,
) -> Yardsticks {
    let a = adaptive;
    let onset = event_at(a, EventKind::LoadOnset);
    let join = event_at(a, EventKind::NodeJoin);
    let free_from = join.or(onset).unwrap_or(0.0);
    let t0 = loop_start(a);
    let best_rate = match best {
        Some(b) => rate_from(b, event_at(b, EventKind::LoadOnset).unwrap_or(0.0)),
        None => mean_rate(unloaded),
    };
    let left = (iters as f64 - a.iteration_at(free_from + t0)).max(0.0);
    let limit_s = free_from + left / best_rate;
    let (recovery_from, reference) = match (onset, join) {
        (Some(o), _) => (Some(("load onset", o)), mean_rate(unloaded)),
        (None, Some(j)) => (Some(("node join", j)), best_rate),
        (None, None) => (None, mean_rate(unloaded)),
    };
    let recovery_target = 0.9 * reference;
    let recovery_s = recovery_from.and_then(|(_, at)| {
        a.recovered_from(at + t0, recovery_target)
            .map(|t| t - t0 - at)
    });
    Yardsticks {
        adaptive_s: a.report.seconds,
        static_s: static_run.report.seconds,
        unloaded_s: unloaded.report.seconds,
        best_s: best.unwrap_or(unloaded).report.seconds,
        best_rate,
        limit_s,
        free_from,
        recovery_from,
        recovery_target,
        recovery_s,
        recovery_best_s: match (onset, best) {
            (Some(o), Some(_)) => a
                .recovered_from(o + t0, 0.9 * best_rate)
                .map(|t| t - t0 - o),
            _ => None,
        },
        migrations: a.migrations().map(|m| (m.t - t0, m.what.clone())).collect(),
        settled_rate: a
            .migrations()
            .last()
            .filter(|m| a.samples.last().is_some_and(|last| last.t > m.t + 1.0))
            .map(|m| rate_from(a, m.t - t0)),
    }
}
