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
//!
//! A reference rate stands for what the machine allows under the experiment's load only if
//! that load ran during all of the window it was measured over: each one comes with its
//! window ([`ReferenceRate`]), and a limit whose rate was measured without the load is
//! refused ([`Yardsticks::limit_s`] is `None`, [`Yardsticks::limit_refused`] says why), not
//! used. The best-placement run starts its load before its loop for that reason
//! ([`mpi_ios_tests::scenario::Scenario::loaded_from_the_start`]): a best run that ends
//! before a load started at the adaptive run's onset measures an unloaded machine.

use mpi_ios_tests::scenario::{EventKind, Outcome};
use serde::{Deserialize, Serialize};

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
    rate_window(o, from).0
}

/// Iterations per second from loop time `from` (0 when earlier) to the end of the run, and
/// the loop seconds it was measured over: the whole run when less than a second of it is
/// left after `from` (or it has no progress events).
fn rate_window(o: &Outcome, from: f64) -> (f64, f64, f64) {
    let from = from.max(0.0);
    let t0 = loop_start(o);
    let whole = (mean_rate(o), 0.0, o.report.seconds);
    let Some(last) = o.samples.last() else {
        return whole;
    };
    let to = last.t - t0;
    let span = to - from;
    if span <= 1.0 {
        return whole;
    }
    (
        (last.iteration as f64 - o.iteration_at(from + t0)) / span,
        from,
        to,
    )
}

/// A rate a yardstick stands on, and where it was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReferenceRate {
    /// The run it comes from (`best`, `unloaded`).
    pub run: String,
    /// Iterations per second over the window.
    pub it_per_s: f64,
    /// The window's start, in that run's loop seconds.
    pub from_s: f64,
    /// The window's end, in that run's loop seconds.
    pub to_s: f64,
    /// Whether the experiment's load ran during all of the window.
    pub under_load: bool,
}

/// The rate of run `o` (named `run` in the summary) from loop time `from` to its end, with
/// its window and whether a load ran during all of it (its load onset at or before the
/// window's start).
pub fn reference_rate(run: &str, o: &Outcome, from: f64) -> ReferenceRate {
    let (it_per_s, from_s, to_s) = rate_window(o, from);
    ReferenceRate {
        run: run.to_owned(),
        it_per_s,
        from_s,
        to_s,
        under_load: event_at(o, EventKind::LoadOnset).is_some_and(|onset| onset <= from_s),
    }
}

/// How many times faster than the best-placement run the adaptive run may settle before that
/// run is called disturbed: the noise of a shared two-core machine, as the figures' tests
/// allow a run to beat the limit by 20%.
pub const DISTURBED_ABOVE: f64 = 1.2;

/// The best-placement run's rate once its load runs (from its own load onset, or its loop
/// start when it has none).
fn best_window(best: &Outcome) -> ReferenceRate {
    reference_rate(
        "best",
        best,
        event_at(best, EventKind::LoadOnset).unwrap_or(0.0),
    )
}

/// The adaptive run's mean rate from its last move to its end, when it moved and ran more
/// than a second after.
fn settled_rate(adaptive: &Outcome) -> Option<f64> {
    let a = adaptive;
    a.migrations()
        .last()
        .filter(|m| a.samples.last().is_some_and(|last| last.t > m.t + 1.0))
        .map(|m| rate_from(a, m.t - loop_start(a)))
}

/// Why the best-placement run `best` cannot stand for the physical limit, if it cannot: the
/// adaptive run, once its last move was made, ran more than [`DISTURBED_ABOVE`] times
/// faster under the same load. The best placement is the fastest there is, so that run
/// measured something else: plain ranks polling inside one capped emulated node can lock
/// into the node's quota periods (docs/emulated-nodes.md, Limits), seen in CI as a
/// best-placement run at 0.63 of the adaptive run's speed on the very same placement.
pub fn best_disturbed(adaptive: &Outcome, best: &Outcome) -> Option<String> {
    let settled = settled_rate(adaptive)?;
    let best_rate = best_window(best).it_per_s;
    (settled > DISTURBED_ABOVE * best_rate).then(|| {
        format!(
            "the adaptive run settled at {settled:.0} it/s after its last move, {:.2} times the \
             best-placement run's {best_rate:.0} it/s under the same load",
            settled / best_rate
        )
    })
}

/// The best-placement run to measure the limit with: `best`, or, when it was disturbed
/// ([`best_disturbed`]), the faster under the load of it and a second run made by `again`
/// (given the reason); with the reason it was run twice. Run twice at most: a second run
/// beaten as much is kept and shows in the limit.
pub fn best_of_two(
    adaptive: &Outcome,
    best: Outcome,
    again: impl FnOnce(&str) -> Outcome,
) -> (Outcome, Option<String>) {
    let Some(why) = best_disturbed(adaptive, &best) else {
        return (best, None);
    };
    let second = again(&why);
    let faster = if best_window(&second).it_per_s > best_window(&best).it_per_s {
        second
    } else {
        best
    };
    (faster, Some(why))
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
    /// Iterations per second of the best placement once the load runs (of the unloaded run
    /// when the experiment has no best placement).
    pub best_rate: f64,
    /// Where `best_rate` was measured, and whether under the load.
    pub best_window: ReferenceRate,
    /// The unloaded run's mean rate (the recovery target's reference with a load), and its
    /// window: the whole run.
    pub unloaded_window: ReferenceRate,
    /// Best possible time given the capacity left; `None` when the experiment has a load
    /// and `best_rate` was not measured under it during its whole window.
    pub limit_s: Option<f64>,
    /// Why the limit was refused, when it was.
    pub limit_refused: Option<String>,
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
    /// Why the best placement was run twice, the faster run kept ([`best_of_two`]), when
    /// it was: set by the caller that made the runs.
    pub best_repeated: Option<String>,
}

impl Yardsticks {
    /// How much shorter the adaptive run was than static MPI, in %.
    pub fn shorter_pct(&self) -> f64 {
        100.0 * (1.0 - self.adaptive_s / self.static_s)
    }

    /// Adaptive time over the physical limit, when there is one.
    pub fn limit_ratio(&self) -> Option<f64> {
        self.limit_s.map(|limit| self.adaptive_s / limit)
    }

    /// The adaptive run's rate after its last move over the best placement's under the same
    /// load: how close the agents' placement came to running as well as that placement run
    /// plain. `None` without a move, or without a best rate measured under the load.
    pub fn settled_over_best(&self) -> Option<f64> {
        let settled = self.settled_rate?;
        self.limit_s.is_some().then(|| settled / self.best_rate)
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
    let unloaded_window = reference_rate("unloaded", unloaded, 0.0);
    let best_window = best.map_or_else(|| unloaded_window.clone(), best_window);
    let best_rate = best_window.it_per_s;
    let limit_refused = match (onset, best) {
        (Some(_), None) => Some(
            "the experiment has a load but no best-placement run: the only rate there is, the \
             unloaded run's, was measured without it"
                .to_owned(),
        ),
        (Some(_), Some(_)) if !best_window.under_load => Some(format!(
            "the best-placement run's rate ({:.0} it/s, loop {:.1} - {:.1} s) was not measured \
             under the load during all of its window",
            best_window.it_per_s, best_window.from_s, best_window.to_s
        )),
        _ => None,
    };
    let left = (iters as f64 - a.iteration_at(free_from + t0)).max(0.0);
    let limit_s = limit_refused
        .is_none()
        .then(|| free_from + left / best_rate);
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
        best_window,
        unloaded_window,
        limit_s,
        limit_refused,
        free_from,
        recovery_from,
        recovery_target,
        recovery_s,
        recovery_best_s: match (onset, limit_s) {
            (Some(o), Some(_)) => a
                .recovered_from(o + t0, 0.9 * best_rate)
                .map(|t| t - t0 - o),
            _ => None,
        },
        migrations: a.migrations().map(|m| (m.t - t0, m.what.clone())).collect(),
        settled_rate: settled_rate(a),
        best_repeated: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpi_ios_tests::scenario::{Event, Mode, Sample};
    use mpi_ios_tests::Report;

    /// A run of `iters` iterations at `rate` it/s (a progress event at its loop start, then
    /// one per 0.5 s), its loop starting 0.5 s after mpirun, with a load onset at loop time
    /// `onset` when given.
    fn run(mode: Mode, iters: u64, rate: f64, onset: Option<f64>) -> Outcome {
        let loop_start = 0.5;
        let seconds = iters as f64 / rate;
        let samples = (0..)
            .map(|k| f64::from(k) * 0.5)
            .take_while(|&t| t < seconds + 0.5)
            .map(|t| Sample {
                t: loop_start + t.min(seconds),
                iteration: ((t.min(seconds)) * rate).round() as u64,
                rate,
                hosts: Vec::new(),
            })
            .collect();
        Outcome {
            mode,
            report: Report {
                checksum: "same".into(),
                iterations: iters,
                seconds,
                ranks: 2,
                ..Report::default()
            },
            samples,
            events: onset
                .map(|at| Event {
                    t: loop_start + at,
                    kind: EventKind::LoadOnset,
                    what: "CPU hog started on node-b".into(),
                    moved: None,
                    resized: None,
                    host: Some("node-b".into()),
                })
                .into_iter()
                .collect(),
            loop_start: Some(loop_start),
            wall_s: seconds + loop_start,
            decisions: Vec::new(),
            agent_cpu: Vec::new(),
            leaves: Vec::new(),
            statuses: Vec::new(),
        }
    }

    /// `run` in adaptive mode with a move at loop time `at`.
    fn moved_at(iters: u64, rate: f64, onset: f64, at: f64) -> Outcome {
        let mut a = run(Mode::Adaptive, iters, rate, Some(onset));
        a.events.push(Event {
            t: loop_start(&a) + at,
            kind: EventKind::Migration,
            what: "rank 1 moved node-b -> node-a".into(),
            moved: None,
            resized: None,
            host: None,
        });
        a
    }

    #[test]
    fn a_best_run_the_adaptive_run_beats_after_its_move_is_run_again_and_the_faster_kept() {
        // CI's case: after its move the adaptive run went 1.6 times as fast as the
        // best-placement run on the same placement under the same load.
        let adaptive = moved_at(10_000, 740.0, 2.0, 4.0);
        let best = run(Mode::Static, 10_000, 460.0, Some(-0.3));
        let why = best_disturbed(&adaptive, &best).expect("disturbed");
        assert!(why.contains("1.61 times"), "{why}");
        let again = run(Mode::Static, 10_000, 720.0, Some(-0.3));
        let mut made = 0;
        let (kept, reason) = best_of_two(&adaptive, best.clone(), |_| {
            made += 1;
            again.clone()
        });
        assert_eq!((made, reason.as_deref()), (1, Some(why.as_str())));
        assert_eq!(kept.report.seconds, again.report.seconds);
        // A second run no faster: the first is kept, and no third is made.
        let slower = run(Mode::Static, 10_000, 400.0, Some(-0.3));
        let (kept, reason) = best_of_two(&adaptive, best.clone(), |_| slower.clone());
        assert_eq!(kept.report.seconds, best.report.seconds);
        assert!(reason.is_some());
    }

    #[test]
    fn a_best_run_within_the_noise_or_an_adaptive_run_that_never_moved_is_kept() {
        let best = run(Mode::Static, 10_000, 700.0, Some(-0.3));
        // 1.14 times: within the noise.
        let adaptive = moved_at(10_000, 800.0, 2.0, 4.0);
        assert_eq!(best_disturbed(&adaptive, &best), None);
        let (_, reason) = best_of_two(&adaptive, best.clone(), |_| unreachable!());
        assert_eq!(reason, None);
        // No move: nothing says where the adaptive run would have settled.
        let unmoved = run(Mode::Adaptive, 10_000, 2000.0, Some(2.0));
        assert_eq!(best_disturbed(&unmoved, &best), None);
        // A move less than a second before the end: no settled rate either.
        let late = moved_at(10_000, 2000.0, 2.0, 4.5);
        assert_eq!(best_disturbed(&late, &best), None);
    }

    #[test]
    fn a_best_run_that_ends_before_its_load_starts_gives_no_limit() {
        // The case: the best placement ran 4.9 s, its hog was due at 5 s.
        let adaptive = run(Mode::Adaptive, 10_000, 1000.0, Some(5.0));
        let static_run = run(Mode::Static, 10_000, 500.0, Some(5.0));
        let unloaded = run(Mode::Unloaded, 10_000, 1200.0, None);
        let best = run(Mode::Static, 10_000, 2040.0, None);
        let y = of(10_000, &adaptive, &static_run, &unloaded, Some(&best));
        assert_eq!(y.limit_s, None);
        assert_eq!(y.limit_ratio(), None);
        assert!(!y.best_window.under_load, "{y:?}");
        assert!(
            y.limit_refused
                .as_deref()
                .is_some_and(|why| why.contains("not measured under the load")),
            "{y:?}"
        );
        assert_eq!(y.recovery_best_s, None);
        // Its load due just after its end changes nothing: never during the window.
        let mut late = best.clone();
        late.events = run(Mode::Static, 10, 1.0, Some(4.95)).events;
        let y = of(10_000, &adaptive, &static_run, &unloaded, Some(&late));
        assert_eq!(y.limit_s, None, "{y:?}");
    }

    #[test]
    fn a_best_run_loaded_from_before_its_loop_gives_the_limit_and_its_window() {
        let adaptive = run(Mode::Adaptive, 10_000, 1000.0, Some(2.0));
        let static_run = run(Mode::Static, 10_000, 500.0, Some(2.0));
        let unloaded = run(Mode::Unloaded, 10_000, 1200.0, None);
        // The hog started 0.3 s before the loop.
        let best = run(Mode::Static, 8_000, 800.0, Some(-0.3));
        let y = of(10_000, &adaptive, &static_run, &unloaded, Some(&best));
        let window = &y.best_window;
        assert!(window.under_load, "{y:?}");
        assert_eq!((window.run.as_str(), window.from_s), ("best", 0.0));
        assert!((window.to_s - 10.0).abs() < 1e-9, "{window:?}");
        assert!((window.it_per_s - 800.0).abs() < 1.0, "{window:?}");
        // No join: the capacity is free from the onset at 2 s, 2000 iterations done, the
        // other 8000 at 800 it/s.
        let limit = y.limit_s.expect("a limit");
        assert!((limit - 12.0).abs() < 0.01, "{limit}");
        assert_eq!(y.limit_refused, None);
        assert!(!y.unloaded_window.under_load);
        assert_eq!(y.unloaded_window.run, "unloaded");
    }

    #[test]
    fn a_best_run_loaded_mid_run_is_measured_from_its_onset_only() {
        let adaptive = run(Mode::Adaptive, 10_000, 1000.0, Some(2.0));
        let static_run = run(Mode::Static, 10_000, 500.0, Some(2.0));
        let unloaded = run(Mode::Unloaded, 10_000, 1200.0, None);
        let best = run(Mode::Static, 10_000, 1000.0, Some(2.0));
        let y = of(10_000, &adaptive, &static_run, &unloaded, Some(&best));
        assert!(y.best_window.under_load);
        assert_eq!(y.best_window.from_s, 2.0);
        assert!(y.limit_s.is_some());
    }

    #[test]
    fn a_load_without_a_best_run_gives_no_limit_and_no_load_needs_none() {
        let adaptive = run(Mode::Adaptive, 10_000, 1000.0, Some(2.0));
        let static_run = run(Mode::Static, 10_000, 500.0, Some(2.0));
        let unloaded = run(Mode::Unloaded, 10_000, 1200.0, None);
        let y = of(10_000, &adaptive, &static_run, &unloaded, None);
        assert_eq!(y.limit_s, None);
        assert!(y.limit_refused.is_some());
        // No load in the experiment (a join only): the unloaded rate is the right one.
        let adaptive = run(Mode::Adaptive, 10_000, 1000.0, None);
        let static_run = run(Mode::Static, 10_000, 1000.0, None);
        let y = of(10_000, &adaptive, &static_run, &static_run, None);
        assert!(y.limit_s.is_some(), "{y:?}");
        assert_eq!(y.limit_refused, None);
    }
}
