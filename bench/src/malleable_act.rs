//! `mpi-ios-bench adaptive --malleable`: the main job's malleable act (issue 38, item 5).
//!
//! heat2d, which is malleable (it declares its grid's rows and `set_malleable(1, rows)`),
//! starts with 2 ranks on node-a and node-b of four emulated nodes; node-b gets loaded (a
//! CPU hog); node-c's and node-d's agents join the pool, idle; the agents move and grow the
//! job by themselves; then node-c's agent leaves (`ios-agent leave`) and the job shrinks or
//! moves off node-c with nobody acting. The same events then run with agents that only
//! migrate (`ios-agent join --no-resize`), and with heat2d-plain on the best fixed-width
//! placement under the same load (node-a and node-d: the nodes neither loaded nor given
//! back) and as static MPI (heat2d-plain on node-a and node-b, no agents). Every checksum
//! must be heat2d-plain's. `--quick` (CI) makes the two adaptive runs only, and takes the
//! checksum to match from heat2d-plain run on the machine itself.
//!
//! First, before any run, heat2d-plain's speed at 1 to 4 ranks (one rank per node, the
//! act's caps, unloaded) is measured and printed: whether growing can pay at all depends on
//! it, and the agents' model assumes `T(n) = W/n + H` (docs/agents.md).
//!
//! The runs are sized by their events, never by an iteration count tuned on one machine:
//! with the measured rates at 2 ranks (`r2`) and at 3 (`r3`: node-a, node-c and node-d, the
//! widest the unloaded nodes allow), the job gets `r2 * join + r3 * (leave - join + tail)`
//! iterations, so that even a job that grew at once is still running at the leave and for
//! `tail` seconds after it (the leaving node's wait for an idle node and the shrink).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use mpi_ios_tests::cgroup::CpuCap;
use mpi_ios_tests::netns::Cluster;
use mpi_ios_tests::scenario::{
    measure_rate, EventKind, Hog, Mode, NodeLeave, Outcome, Scenario, PROGRESS_LINES,
};
use mpi_ios_tests::MpiJob;

use crate::adaptive::{preflight, AdaptiveArgs, Program};
use crate::summary::{MalleableAct, ScalingPoint};
use crate::Table;

/// The option that keeps an agent from resizing jobs (migration only).
pub const NO_RESIZE: &str = "--no-resize";

/// Grid side of the act unless `--size` says otherwise: at 0.6 core per node on this
/// project's machine kind, 4 ranks of a 2048 x 2048 heat2d ran 1.55-2.3 times as fast as 2
/// (2.0 at 0.5 core, [`node_cap`]); 1024 x 1024: about 1.0, its halo exchange weighs as much
/// as its rows.
pub const DEFAULT_SIZE: usize = 2048;

/// Seconds a leaving node's agent waits for an idle node to take a malleable job's ranks
/// before it shrinks the job off itself: one and a half steal periods of 2 s
/// (`ios-agent-core`'s `leave_shrink_wait`, `DEFAULT_STEAL_PERIOD`). When the job grew onto
/// every idle node, nothing takes them, and the shrink comes that long after the leave.
pub const LEAVE_SHRINK_WAIT_S: f64 = 3.0;

/// When things happen, seconds after the job's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// The hog starts on node-b.
    pub load_at: f64,
    /// node-c's and node-d's agents join.
    pub join_at: f64,
    /// Seconds after the joins, at the job's widest rate, that the agents have to move and
    /// grow the job before node-c's agent leaves. The leave comes when the work left is what
    /// that rate does in `tail` seconds, so at the same point of the work in every run.
    pub grow_window: f64,
    /// A fixed time for the leave instead (`--leave-at`).
    pub leave_at: Option<f64>,
    /// Seconds the job runs on after the leave, at least when it runs at the widest rate
    /// measured: the leaving node's wait for an idle node ([`LEAVE_SHRINK_WAIT_S`]), the
    /// shrink, and a little at the narrower width.
    pub tail: f64,
    /// How long the leave may take (`ios-agent leave --within`).
    pub leave_within: f64,
}

impl Timing {
    /// The act's timing for `args`.
    pub fn of(args: &AdaptiveArgs) -> Result<Timing> {
        let t = if args.quick {
            // Load, joins, a move and a grow, the leave and a shrink: the agents profile
            // every second, hold a rank down 1.2 s and steal every 2 s.
            Timing {
                load_at: 2.0,
                join_at: 3.0,
                grow_window: 5.0,
                leave_at: args.leave_at,
                tail: LEAVE_SHRINK_WAIT_S + 2.0,
                leave_within: 15.0,
            }
        } else {
            Timing {
                load_at: args.load_at,
                join_at: args.join_at,
                grow_window: 20.0,
                leave_at: args.leave_at,
                tail: LEAVE_SHRINK_WAIT_S + 4.0,
                leave_within: 30.0,
            }
        };
        if !(0.0 <= t.load_at && t.load_at <= t.join_at && t.leave_at.is_none_or(|v| v > t.join_at))
        {
            bail!(
                "the act needs load <= join < leave: load at {} s, join at {} s, leave at {:?} s",
                t.load_at,
                t.join_at,
                t.leave_at
            );
        }
        Ok(t)
    }

    /// Seconds from the joins to the leave at the widest rate.
    fn window(&self) -> f64 {
        self.leave_at.map_or(self.grow_window, |v| v - self.join_at)
    }

    /// Iterations for the act, from the rates at 2 ranks and at the widest width:
    /// `rate_2 * join + rate_max * (window + tail)` (a job can go no faster than `rate_2`
    /// before the joins, nor than `rate_max` after them).
    pub fn iterations(&self, rate_2: f64, rate_max: f64) -> u64 {
        let n = rate_2 * self.join_at + rate_max.max(rate_2) * (self.window() + self.tail);
        (n.round() as u64).max(PROGRESS_LINES)
    }

    /// The iteration at which node-c leaves in a job of `iters` iterations: the work left
    /// is what `rate_max` does in `tail` seconds. `None` with a fixed time (`--leave-at`).
    pub fn leave_after_iteration(&self, iters: u64, rate_max: f64) -> Option<u64> {
        self.leave_at
            .is_none()
            .then(|| iters.saturating_sub((rate_max * self.tail).round() as u64))
    }
}

/// The CPU cap of each of `nodes` emulated nodes: `requested`, or less if the nodes together
/// would want more than the machine's cores. Emulated nodes share nothing but their link: at
/// 0.6 CPU, four nodes want 2.4 of this project's machine kind's 2 cores, and in the act's
/// grown span (three ranks beside node-b's hog) the job ran at 88% of heat2d-plain's 3-rank
/// rate, where its 2-rank spans ran at 94-96% of theirs (the act 8.1% shorter than migration
/// only, its limit 19.5%); at 0.5 the same act ran 21.8% shorter, its limit 22.3%
/// (docs/results-log.md, 2026-12-06). At 0.5 a node's ranks use up its quota in every
/// period: the agents run beside the caps (`Cluster::daemon_command_on`), or the caps'
/// throttling delays their pings by milliseconds and the grows are weighed on that noise.
pub fn node_cap(requested: f64, machine_cores: f64, nodes: usize) -> f64 {
    requested.min(machine_cores / nodes as f64)
}

/// The act's limit: how long each adaptive run would take if moves and resizes cost nothing
/// and came at once, at the rates measured before the runs (the job no faster than
/// heat2d-plain unloaded at its width), and so about the most the malleable run can be
/// shorter than the migration-only one in this act. An estimate: the rates are medians of
/// short windows, and a run can come within their noise of it, or past it.
///
/// Both runs are alike until the joins (`done` iterations by then). At the joins the
/// migration-only job moves off the loaded node and runs at `rate_2` to the end; the
/// malleable one grows onto both idle nodes and runs at `rate_widest` (3 ranks: node-b stays
/// loaded) until the leave comes and the leaving node's wait for an idle node
/// ([`LEAVE_SHRINK_WAIT_S`]) is over, then shrinks to 2 ranks at `rate_2`. The leave comes as
/// `leave` says: once some iterations are done, or at a fixed time (`--leave-at`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    /// The malleable run's shortest loop time, seconds.
    pub malleable_s: f64,
    /// The migration-only run's shortest loop time, seconds.
    pub migration_only_s: f64,
}

impl Limit {
    /// The limit of an act of `iters` iterations (see [`Limit`]).
    #[allow(clippy::too_many_arguments)]
    pub fn of(
        iters: u64,
        done: f64,
        join_at: f64,
        leave: Leave,
        shrink_wait_s: f64,
        rate_2: f64,
        rate_widest: f64,
    ) -> Limit {
        let iters = iters as f64;
        let done = done.clamp(0.0, iters);
        let widest = rate_widest.max(rate_2);
        // The iteration at which the leave is asked, in the limit's malleable run.
        let leave_at = match leave {
            Leave::AfterIteration(i) => i as f64,
            Leave::At(t) => done + (t - join_at).max(0.0) * widest,
        }
        .clamp(done, iters);
        let widest_until = (leave_at + shrink_wait_s * widest).min(iters);
        Limit {
            malleable_s: join_at + (widest_until - done) / widest + (iters - widest_until) / rate_2,
            migration_only_s: join_at + (iters - done) / rate_2,
        }
    }

    /// How much shorter the malleable run is than the migration-only one at the limit, %.
    pub fn shorter_pct(&self) -> f64 {
        100.0 * (1.0 - self.malleable_s / self.migration_only_s)
    }
}

/// When node-c is asked to leave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Leave {
    /// Once this many iterations are done.
    AfterIteration(u64),
    /// At this many seconds after the job's start.
    At(f64),
}

/// Rates of heat2d-plain on `width` ranks, one per node (node-a, node-b, ...), unloaded:
/// (width, iterations per second), each measured over `window` after a warm-up, the widths
/// in `widths` order, `rounds` times (rotating the order), the median kept.
pub fn measure_scaling(
    cluster: &Cluster,
    size: usize,
    widths: &[usize],
    rounds: usize,
    window: Duration,
    dir: &Path,
) -> Result<Vec<ScalingPoint>> {
    let nodes = cluster.host_names();
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); widths.len()];
    for round in 0..rounds.max(1) {
        let mut order: Vec<usize> = (0..widths.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let n = widths[i];
            if n > nodes.len() {
                bail!("{n} ranks need {n} nodes, the cluster has {}", nodes.len());
            }
            let side = size.to_string();
            let args = [
                "--rows",
                &side,
                "--cols",
                &side,
                "--iters",
                &u64::from(u32::MAX).to_string(),
            ];
            let job = MpiJob::new(n, "heat2d-plain", &args);
            let placement: Vec<&str> = nodes[..n].iter().map(String::as_str).collect();
            let run_dir = dir.join(format!("scaling-{n}-{round}"));
            let rate = measure_rate(cluster, job, &placement, &run_dir, window);
            cluster.clear_nodes();
            let rate =
                rate.map_err(|e| anyhow::anyhow!("measuring heat2d-plain on {n} ranks: {e}"))?;
            println!(
                "   {n} rank{} ({}): {rate:.0} it/s, {:.3} ms per iteration",
                if n == 1 { "" } else { "s" },
                placement.join(" "),
                1e3 / rate
            );
            rates[i].push(rate);
        }
    }
    Ok(widths
        .iter()
        .zip(rates)
        .map(|(&ranks, r)| ScalingPoint {
            ranks: ranks as u32,
            it_per_s: crate::median(&r),
            ms_per_iteration: 1e3 / crate::median(&r),
            rounds: r.len() as u32,
        })
        .collect())
}

/// The rate at `ranks` in `scaling`.
fn rate_at(scaling: &[ScalingPoint], ranks: u32) -> Option<f64> {
    scaling
        .iter()
        .find(|p| p.ranks == ranks)
        .map(|p| p.it_per_s)
}

/// The runs of the act, by name: the malleable run first, then the migration-only one,
/// then the plain runs made.
struct Runs {
    /// (name, outcome, program), in the order run.
    runs: Vec<(&'static str, Outcome, &'static str)>,
}

impl Runs {
    fn get(&self, name: &str) -> Option<&Outcome> {
        self.runs.iter().find(|r| r.0 == name).map(|r| &r.1)
    }
}

/// Runs the act.
pub fn run(args: &AdaptiveArgs) -> Result<()> {
    preflight(args)?;
    if args.cooperating || args.fault {
        bail!("--malleable is an act of its own: not with --cooperating or --fault");
    }
    if args.program != Program::Heat2d {
        bail!("--malleable runs the Rust heat2d (the C heat2d is malleable only by hand)");
    }
    let timing = Timing::of(args)?;
    let size = args.size.unwrap_or(DEFAULT_SIZE);
    let machine_cores = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
    let cap = node_cap(args.cap, machine_cores, 4);
    if cap < args.cap {
        println!(
            "== each node capped at {cap} CPU, not {}: four nodes at {} would want {:.1} of this \
             machine's {machine_cores} cores, and emulated nodes share nothing but their link",
            args.cap,
            args.cap,
            4.0 * args.cap
        );
    }
    let caps = vec![Some(CpuCap::cores(cap)); 4];
    let (cluster, logs) = crate::adaptive::nodes_and_logs(&caps, &args.out, "mpi-ios-malleable-")?;
    let nodes = cluster.host_names();

    // 1. How heat2d scales here: the reason growing can pay, measured first.
    let (widths, rounds, window): (&[usize], usize, f64) = if args.quick {
        (&[2, 3], 1, 1.5)
    } else {
        (&[1, 2, 3, 4], 2, 3.0)
    };
    println!(
        "== heat2d-plain {size}x{size} at {} ranks, one per node ({} CPU each), unloaded",
        widths
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        cap
    );
    let scaling = measure_scaling(
        &cluster,
        size,
        widths,
        rounds,
        Duration::from_secs_f64(window),
        logs.path(),
    )?;
    print_scaling(&scaling);
    if args.scaling_only {
        return Ok(());
    }
    let rate_2 = rate_at(&scaling, 2).context("no rate at 2 ranks")?;
    // The widest the job runs fast at: node-a, node-c and node-d (a rank on the loaded
    // node-b slows the whole job far below that).
    let rate_max = rate_at(&scaling, 3).unwrap_or(rate_2).max(rate_2);

    // 2. The scenario, sized by its events.
    let iters = match args.iters {
        Some(0) => bail!("a run of 0 iterations shows nothing"),
        Some(n) => n,
        None => timing.iterations(rate_2, rate_max),
    };
    let expected_s = iters as f64 / rate_2;
    let leave_after = timing.leave_after_iteration(iters, rate_max);
    let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
    let malleable = Scenario {
        rows: size,
        cols: size,
        iters,
        progress_period: Duration::from_secs_f64(expected_s / PROGRESS_LINES as f64)
            .max(Duration::from_millis(5)),
        placement: vec![0, 1],
        agents_at_start: vec![0, 1],
        hog: Some(Hog::on(1, secs(timing.load_at))),
        joins: vec![(2, secs(timing.join_at)), (3, secs(timing.join_at))],
        leaves: vec![NodeLeave {
            node: 2,
            // With no fixed time, only the work done says when.
            at: timing.leave_at.map_or(Duration::MAX, secs),
            within: secs(timing.leave_within),
            after_iteration: leave_after,
        }],
        agent_options: crate::adaptive::agent_options(timing.load_at),
        timeout: Duration::from_secs(args.timeout),
        unlisted_spares: false,
    };
    let migration_only = Scenario {
        agent_options: malleable
            .agent_options
            .iter()
            .cloned()
            .chain([NO_RESIZE.to_owned()])
            .collect(),
        ..malleable.clone()
    };
    // The nodes neither loaded nor given back: the best a job of 2 ranks can run on.
    let best = Scenario {
        placement: vec![0, 3],
        ..malleable.clone()
    };
    let leave = match (timing.leave_at, leave_after) {
        (Some(at), _) => Some(Leave::At(at)),
        (None, Some(i)) => Some(Leave::AfterIteration(i)),
        (None, None) => None,
    };
    let leave_text = match leave {
        Some(Leave::At(at)) => format!("at {at} s"),
        Some(Leave::AfterIteration(i)) => format!("once {i} iterations are done"),
        None => "never".to_owned(),
    };
    println!(
        "== {} emulated nodes ({}), each capped at {} CPU; heat2d {size}x{size}, {iters} \
         iterations ({:.0} s at 2 ranks unloaded), ranks on node-a node-b; hog on node-b at \
         {} s, node-c and node-d join at {} s, node-c leaves {leave_text}",
        nodes.len(),
        nodes.join(", "),
        cap,
        expected_s,
        timing.load_at,
        timing.join_at,
    );
    let mut plan: Vec<(&'static str, Mode, &Scenario, &'static str)> = vec![
        ("malleable", Mode::Adaptive, &malleable, "heat2d"),
        ("migration-only", Mode::Adaptive, &migration_only, "heat2d"),
    ];
    if !args.quick && !args.adaptive_only {
        plan.push(("best", Mode::Static, &best, "heat2d-plain"));
        plan.push(("static", Mode::Static, &malleable, "heat2d-plain"));
    }
    let mut runs = Runs { runs: Vec::new() };
    for (name, mode, scenario, program) in plan {
        println!("== {}", describe(name));
        let dir = logs.path().join(name);
        let outcome = scenario.run_program(&cluster, mode, program, &dir, &mut |line| {
            crate::adaptive::print_line(line, iters)
        });
        println!(
            "   done in {:.1} s, checksum {}",
            outcome.report.seconds, outcome.report.checksum
        );
        // Nothing of a run may run on into the next (the leave killed node-c's processes).
        cluster.clear_nodes();
        runs.runs.push((name, outcome, program));
    }
    if !runs.runs.iter().any(|r| r.2 == "heat2d-plain") {
        // The checksum to match, as fast as the nodes allow: heat2d-plain on all four, no
        // load (its checksum does not depend on the width). Not on the machine outside the
        // nodes: there it has the default CPU weight, and the nodes' eight times that.
        let plain = Scenario {
            placement: vec![0, 1, 2, 3],
            ..malleable.clone()
        };
        println!("== {}", describe("plain"));
        let dir = logs.path().join("plain");
        let outcome = plain.run_program(
            &cluster,
            Mode::Unloaded,
            "heat2d-plain",
            &dir,
            &mut |line| crate::adaptive::print_line(line, iters),
        );
        println!(
            "   done in {:.1} s, checksum {}",
            outcome.report.seconds, outcome.report.checksum
        );
        cluster.clear_nodes();
        runs.runs.push(("plain", outcome, "heat2d-plain"));
    }
    let (ok, typed) = report(&runs, &scaling, &timing, args, iters, leave)?;
    typed.write(&args.out, crate::summary::MAIN_JOB_FILE)?;
    crate::keep_logs(logs.path(), &args.out.join("logs"));
    if args.check && !ok {
        bail!("the malleable act's own check failed (see above)");
    }
    Ok(())
}

fn describe(name: &str) -> &'static str {
    match name {
        "malleable" => {
            "malleable (heat2d with PCM; the agents move, grow and shrink it by themselves) run"
        }
        "migration-only" => {
            "migration-only (heat2d with PCM; agents joined with --no-resize: they only move \
             ranks) run"
        }
        "plain" => {
            "plain (heat2d-plain on all four nodes, no load: the checksum to match; the quick \
             mode's only plain run) run"
        }
        "best" => {
            "best fixed-width placement (heat2d-plain, same load, ranks on node-a node-d: \
             neither loaded nor given back) run"
        }
        _ => "static MPI (heat2d-plain on node-a node-b, same load, nobody moves anything) run",
    }
}

fn print_scaling(scaling: &[ScalingPoint]) {
    let mut table = Table::new(&["ranks", "it/s", "ms/iteration", "speed-up vs 2 ranks"]);
    let two = rate_at(scaling, 2);
    for p in scaling {
        table.push(vec![
            p.ranks.to_string(),
            format!("{:.0}", p.it_per_s),
            format!("{:.3}", p.ms_per_iteration),
            two.map_or("-".to_owned(), |t| format!("{:.2}", p.it_per_s / t)),
        ]);
    }
    print!("{}", table.to_text());
    if let (Some(four), Some(two)) = (rate_at(scaling, 4), two) {
        println!(
            "4 ranks over 2: {:.2}x (the act's premise: at least 1.6x)",
            four / two
        );
    }
    if let Some(fit) = fit_scaling(scaling) {
        println!(
            "least-squares fit of T(n) = W/n + H over n >= 2: W = {:.3} ms, H = {:.3} ms \
             (largest misfit {:.0}%)",
            fit.0 * 1e3,
            fit.1 * 1e3,
            fit.2 * 100.0
        );
    }
}

/// Least-squares `T(n) = W/n + H` over the widths of at least 2 (a job of one rank
/// exchanges nothing): (W, H, largest relative misfit), seconds.
pub fn fit_scaling(scaling: &[ScalingPoint]) -> Option<(f64, f64, f64)> {
    let points: Vec<(f64, f64)> = scaling
        .iter()
        .filter(|p| p.ranks >= 2 && p.it_per_s > 0.0)
        .map(|p| (1.0 / f64::from(p.ranks), 1.0 / p.it_per_s))
        .collect();
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(sx, sy), (x, y)| (sx + x, sy + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let w = sxy / sxx;
    let h = my - w * mx;
    let misfit = points
        .iter()
        .map(|(x, y)| ((w * x + h) - y).abs() / y)
        .fold(0.0, f64::max);
    Some((w, h, misfit))
}

/// Mean iterations per second of `o` between `from` and `to` (seconds since its start).
fn rate_between(o: &Outcome, from: f64, to: f64) -> Option<f64> {
    let last = o.samples.last()?;
    let to = to.min(last.t);
    (to > from + 0.5).then(|| (o.iteration_at(to) - o.iteration_at(from)) / (to - from))
}

/// Prints the summary; returns whether the act passed its own check, and the typed summary.
fn report(
    runs: &Runs,
    scaling: &[ScalingPoint],
    timing: &Timing,
    args: &AdaptiveArgs,
    iters: u64,
    leave: Option<Leave>,
) -> Result<(bool, crate::summary::Summary)> {
    let m = runs.get("malleable").context("no malleable run")?;
    let mo = runs
        .get("migration-only")
        .context("no migration-only run")?;
    let outcomes: Vec<(&str, &Outcome, &str)> = runs
        .runs
        .iter()
        .map(|(name, o, program)| (*name, o, *program))
        .collect();
    let mut typed = crate::summary::Summary::of("main-job-malleable", &outcomes);
    let mut ok = true;
    println!();
    println!("== summary");
    let mut table = Table::new(&[
        "run",
        "seconds",
        "vs migration-only",
        "final hosts",
        "checksum",
    ]);
    for (name, o, _) in &runs.runs {
        table.push(vec![
            (*name).to_owned(),
            format!("{:.1}", o.report.seconds),
            format!("{:.2}", o.report.seconds / mo.report.seconds),
            o.report
                .hosts
                .as_ref()
                .map_or("-".to_owned(), |h| h.join(" ")),
            o.report.checksum.clone(),
        ]);
    }
    print!("{}", table.to_text());
    let shorter_pct = 100.0 * (1.0 - m.report.seconds / mo.report.seconds);
    println!(
        "malleable vs migration-only: {shorter_pct:.1}% shorter ({:.1} s against {:.1} s; \
         target: at least 25%)",
        m.report.seconds, mo.report.seconds
    );
    // What the act allows at best on these nodes: the gain no agent can beat here by more
    // than the rates' noise.
    let limit =
        rate_at(scaling, 2)
            .zip(rate_at(scaling, 3))
            .zip(leave)
            .map(|((rate_2, rate_3), leave)| {
                Limit::of(
                    iters,
                    mo.iteration_at(timing.join_at),
                    timing.join_at,
                    leave,
                    LEAVE_SHRINK_WAIT_S,
                    rate_2,
                    rate_3,
                )
            });
    if let Some(l) = limit {
        let share = if l.shorter_pct() > 0.0 {
            format!(
                "; this run got {:.0}% of that gain",
                100.0 * shorter_pct / l.shorter_pct()
            )
        } else {
            String::new()
        };
        println!(
            "the act's limit (free, instant moves and resizes at the measured rates): \
             malleable {:.1} s, migration-only {:.1} s: {:.1}% shorter{share}",
            l.malleable_s,
            l.migration_only_s,
            l.shorter_pct(),
        );
    }
    // From the joins to each run's leave: while both idle nodes are there.
    let asked = |o: &Outcome| {
        o.leaves
            .iter()
            .find(|l| l.host == "node-c")
            .map(|l| l.asked_at)
    };
    let segment = |o: &Outcome| asked(o).and_then(|v| rate_between(o, timing.join_at, v));
    let segment = segment(m).zip(segment(mo));
    if let Some((rm, rmo)) = segment {
        println!(
            "from the joins to the leave: malleable {rm:.0} it/s ({:.0}-{:.0} s), \
             migration-only {rmo:.0} it/s ({:.0}-{:.0} s): {:.2}x",
            timing.join_at,
            asked(m).unwrap_or(f64::NAN),
            timing.join_at,
            asked(mo).unwrap_or(f64::NAN),
            rm / rmo
        );
    }
    for (name, o, _) in &runs.runs {
        for e in o
            .events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Migration | EventKind::Resize))
        {
            println!("{name}: {:.1} s: {}", e.t, e.what);
        }
        for (host, d) in o
            .decisions
            .iter()
            .filter(|(_, d)| d.what.is_resize() || d.what.is_migration())
        {
            println!("{name}: agent on {host}: {}", d.what);
        }
    }
    let grows = m
        .resizes()
        .filter(|e| e.resized.as_ref().is_some_and(|r| r.grew()))
        .count();
    let shrinks = m.resizes().count() - grows;
    if grows == 0 || shrinks == 0 {
        println!(
            "malleable run: FAILED: {grows} grow(s) and {shrinks} shrink(s); the act needs at \
             least one of each"
        );
        ok = false;
    }
    let leave = m.leaves.iter().find(|l| l.host == "node-c");
    match leave {
        Some(l) if l.success => println!(
            "node-c left {:.1} s after it was asked to (at {:.1} s)",
            l.returned_at - l.asked_at,
            l.asked_at
        ),
        Some(l) => {
            println!(
                "node-c's leave: FAILED: {}",
                l.output.lines().last().unwrap_or("")
            );
            ok = false;
        }
        None => {
            println!(
                "node-c's leave: FAILED: the malleable run ended at {:.1} s before node-c was \
                 asked to leave (more --iters, or an earlier --leave-at), or `ios-agent leave` \
                 did not return within {} s (and 5 s after the job's end)",
                m.wall_s, timing.leave_within
            );
            ok = false;
        }
    }
    let final_hosts = m.report.hosts.clone().unwrap_or_default();
    if final_hosts.iter().any(|h| h == "node-c") {
        println!("malleable run: FAILED: a rank ended on node-c, which left: {final_hosts:?}");
        ok = false;
    }
    if !final_hosts.iter().any(|h| h == "node-b") {
        println!("malleable run: node-b (loaded) vacated; ranks ended on {final_hosts:?}");
    } else {
        println!("malleable run: a rank ended on node-b (loaded): {final_hosts:?}");
    }
    let mo_resizes = mo.resizes().count();
    if mo_resizes > 0 {
        println!("migration-only run: FAILED: {mo_resizes} resize(s) with {NO_RESIZE}");
        ok = false;
    }
    let mo_moves = mo.migrations().count();
    if mo_moves == 0 {
        println!("migration-only run: FAILED: the agents moved nothing");
        ok = false;
    }
    let named: Vec<(&str, &Outcome)> = runs.runs.iter().map(|(n, o, _)| (*n, o)).collect();
    ok &= crate::adaptive::checksums_match(
        &named,
        &format!(
            "{} runs; malleable: {grows} grow(s), {shrinks} shrink(s), {} move(s)",
            named.len(),
            m.migrations().count()
        ),
    );
    crate::adaptive::write_timeline(&named, &args.out)?;
    ok &= crate::adaptive::plotted(plot(&named, &args.out.join("throughput")));
    typed.malleable = Some(MalleableAct {
        malleable_s: m.report.seconds,
        migration_only_s: mo.report.seconds,
        shorter_pct,
        grows: grows as u32,
        shrinks: shrinks as u32,
        migration_only_moves: mo_moves as u32,
        migration_only_resizes: mo_resizes as u32,
        joins_to_leave_it_per_s: segment.map(|(rm, _)| rm),
        joins_to_leave_migration_only_it_per_s: segment.map(|(_, rmo)| rmo),
        node_c_left: leave.is_some_and(|l| l.success),
        scaling: scaling.to_vec(),
        limit_malleable_s: limit.map(|l| l.malleable_s),
        limit_migration_only_s: limit.map(|l| l.migration_only_s),
        limit_shorter_pct: limit.map(|l| l.shorter_pct()),
        speedup_4_over_2: rate_at(scaling, 4)
            .zip(rate_at(scaling, 2))
            .map(|(a, b)| a / b),
    });
    typed.passed = ok;
    Ok((ok, typed))
}

/// Throughput over time of every run, the malleable run's events marked.
fn plot(runs: &[(&str, &Outcome)], stem: &Path) -> Result<mpi_ios_plots::Written> {
    use mpi_ios_plots::{Event, TimePlot};
    let m = runs.first().context("no runs")?.1;
    let window = (m.wall_s / 60.0).clamp(0.25, 2.0);
    let mut plot = TimePlot::new(
        "heat2d on emulated nodes: node-b loaded, node-c and node-d join, node-c leaves",
    )
    .x_label("time since start (s)")
    .y_label("iterations / s");
    // The plain run of the quick mode has neither the load nor the width of the others.
    for (name, o) in runs.iter().filter(|(name, _)| *name != "plain") {
        let label = match *name {
            "malleable" => "MPI/IOS, agents move and resize",
            "migration-only" => "MPI/IOS, agents only move",
            "best" => "best fixed width (node-a, node-d), same load",
            _ => "static MPI, same load",
        };
        plot = plot.series(
            label,
            crate::adaptive::windowed_rate(&o.progress_points(), window),
        );
    }
    // A leave's label is its first words and when it was asked ("node-c left the pool
    // (asked at 36.8 s)"), not the command's report.
    plot = plot.events(m.events.iter().map(|e| {
        let mut label = e.what.split(':').next().unwrap_or_default().to_owned();
        if e.kind == EventKind::NodeLeave {
            if let Some(l) = m.leaves.iter().find(|l| Some(&l.host) == e.host.as_ref()) {
                label = format!("{label} (asked at {:.1} s)", l.asked_at);
            }
        }
        Event::new(e.t, crate::adaptive::plot_kind(e), label)
    }));
    Ok(plot.write(stem)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(ranks: u32, it_per_s: f64) -> ScalingPoint {
        ScalingPoint {
            ranks,
            it_per_s,
            ms_per_iteration: 1e3 / it_per_s,
            rounds: 1,
        }
    }

    #[test]
    fn the_fit_recovers_work_and_exchange() {
        // T(n) = 6 ms / n + 1 ms: 4, 3 and 2.5 ms at 2, 3 and 4 ranks.
        let scaling = [
            point(1, 1e3 / 6.0),
            point(2, 250.0),
            point(3, 1e3 / 3.0),
            point(4, 400.0),
        ];
        let (w, h, misfit) = fit_scaling(&scaling).expect("a fit");
        assert!(
            (w - 6e-3).abs() < 1e-9 && (h - 1e-3).abs() < 1e-9,
            "{w} {h}"
        );
        assert!(misfit < 1e-9);
        assert!(
            fit_scaling(&scaling[..2]).is_none(),
            "one width of 2 or more"
        );
    }

    #[test]
    fn the_nodes_together_never_want_more_than_the_machines_cores() {
        assert_eq!(node_cap(0.6, 2.0, 4), 0.5);
        assert_eq!(node_cap(0.6, 4.0, 4), 0.6);
        assert_eq!(node_cap(0.3, 2.0, 4), 0.3);
    }

    #[test]
    fn the_limit_runs_the_malleable_job_widest_from_the_joins_to_the_shrink() {
        // 2250 iterations, 300 done at the joins (3 s); 100 it/s at 2 ranks, `rate_3` at 3;
        // the shrink 3 s after the leave.
        let act = |leave, rate_3| Limit::of(2250, 300.0, 3.0, leave, 3.0, 100.0, rate_3);
        // The leave once 1050 are done, then 450 more at 150 it/s before the shrink:
        // 3 s + 1200 / 150 + 750 / 100, against 3 s + 1950 / 100.
        let limit = act(Leave::AfterIteration(1050), 150.0);
        assert_eq!(limit.malleable_s, 18.5);
        assert_eq!(limit.migration_only_s, 22.5);
        assert!((limit.shorter_pct() - 100.0 * 4.0 / 22.5).abs() < 1e-9);
        // The same leave by the clock: 5 s after the joins at 150 it/s is iteration 1050.
        assert_eq!(act(Leave::At(8.0), 150.0), limit);
        // A leave too late for a shrink: widest to the end.
        let late = act(Leave::AfterIteration(2000), 150.0);
        assert_eq!(late.malleable_s, 3.0 + 1950.0 / 150.0);
        // No faster width: no gain.
        assert_eq!(act(Leave::AfterIteration(1050), 90.0).shorter_pct(), 0.0);
    }

    #[test]
    fn the_run_is_long_enough_for_its_events_at_the_widest_rate() {
        let t = Timing {
            load_at: 2.0,
            join_at: 3.0,
            grow_window: 5.0,
            leave_at: None,
            tail: 8.0,
            leave_within: 15.0,
        };
        // 100 it/s at 2 ranks, 150 at 3: 300 before the joins, 150 * (5 + 8) after.
        assert_eq!(t.iterations(100.0, 150.0), 2250);
        // node-c leaves with 150 * 8 iterations left: a job that ran at the widest rate
        // from the joins gets there 5 s after them, and runs 8 s more.
        assert_eq!(t.leave_after_iteration(2250, 150.0), Some(1050));
        // A fixed time: the same window, the leave by the clock.
        let fixed = Timing {
            leave_at: Some(8.0),
            ..t
        };
        assert_eq!(fixed.iterations(100.0, 150.0), 2250);
        assert_eq!(fixed.leave_after_iteration(2250, 150.0), None);
        assert_eq!(t.iterations(1.0, 1.0), PROGRESS_LINES);
    }
}
