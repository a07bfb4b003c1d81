//! What Figures 13-16 (`fig13`, `fig15`, `fig16`) share: one adaptive experiment on emulated
//! nodes run three or four ways, and its yardsticks.
//!
//! An [`Experiment`] is a [`Scenario`] (placement, hog, joins) on a cluster with per-node CPU
//! caps. A faster node is emulated by a larger cap (0.6 cores against 0.2, say): the node's
//! cgroup lets its processes run that much more per period, which is what a faster CPU does
//! for a compute-bound rank. It runs
//! - adaptive: heat2d with PCM and IOS agents, which move ranks by themselves;
//! - static: heat2d-plain on the same placement under the same load (nobody moves anything);
//! - unloaded: heat2d-plain on the same placement with no hog;
//! - best (when the experiment names a target placement): heat2d-plain, under the same load
//!   (the hog still runs: the emulated nodes share the machine's two cores, so it takes
//!   CPU the other nodes' ranks could have used, which the adaptive run lives with too), on the
//!   placement the capacity left allows at best (both ranks on the cooperating node, or one
//!   on the joined node): the speed the job could reach once the capacity appeared.
//!
//! Their yardsticks (the physical limit, recovery) are [`mpi_ios_bench::yardstick`]'s, the
//! main job's too.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context as _, Result};
use clap::Args;
use mpi_ios_bench::yardstick::{self, Yardsticks};
pub(crate) use mpi_ios_bench::yardstick::{loop_start, mean_rate, rate_points};
use mpi_ios_bench::Table;
use mpi_ios_plots::{Event as PlotEvent, TimePlot};
use mpi_ios_tests::cgroup::CpuCap;
use mpi_ios_tests::netns::Cluster;
use mpi_ios_tests::scenario::{Length, Line, Mode, Outcome, Scenario};

/// The options every figure has, flattened into each figure's own; `H` gives the help of
/// those that say something of the figure.
#[derive(Debug, Args)]
pub(crate) struct FigArgs<H: FigHelp> {
    /// Grid rows and columns (square grid).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Iterations; by default as many as take `--seconds` unloaded on the emulated nodes
    /// (measured there first: machines differ in speed by 4x or more).
    #[arg(long)]
    pub iters: Option<u64>,
    /// Seconds the job would take unloaded, when `--iters` is not given.
    #[arg(long, default_value_t = 14.0)]
    pub seconds: f64,
    #[arg(long, help = H::QUICK)]
    pub quick: bool,
    #[arg(long, help = H::CHECK)]
    pub check: bool,
    /// Print only events and results, not every progress event.
    #[arg(long)]
    pub quiet: bool,
    /// Directory for the plots and the runs' logs; created if missing.
    #[arg(long, default_value = "target/figures")]
    pub out: PathBuf,
    #[arg(long, value_name = "PATH", help = H::MARKDOWN)]
    pub markdown: Option<PathBuf>,
    /// Deadline of each run, seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    #[arg(skip)]
    help: PhantomData<H>,
}

/// The help of a figure's `--quick`, `--check` and `--markdown` in [`FigArgs`] (one line,
/// without a final period, as clap shows a doc comment).
pub(crate) trait FigHelp {
    /// What the short run is.
    const QUICK: &'static str;
    /// What the check requires.
    const CHECK: &'static str;
    /// What is appended.
    const MARKDOWN: &'static str;
}

/// What the paper reported for the figure we compare with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Paper {
    /// "N% shorter than MPICH2" (or "improved with N%").
    pub shorter_pct: f64,
    /// Static and adaptive seconds, when the paper gives them.
    pub seconds: Option<(f64, f64)>,
}

/// One experiment.
#[derive(Debug, Clone)]
pub(crate) struct Experiment {
    /// Short name: file stems and log lines.
    pub name: &'static str,
    /// What it shows, one line.
    pub title: String,
    /// CPU cap of each node, in cores.
    pub caps: Vec<f64>,
    /// The scenario; its iteration count is set by [`run`] from `length`.
    pub scenario: Scenario,
    /// How long the runs are.
    pub length: Length,
    /// Placement of the "best" run; `None`: the unloaded run is the best.
    pub best_placement: Option<Vec<usize>>,
    /// Loop seconds the adaptive run must last even at the best placement's speed, when
    /// sized by time: the last scripted event plus the time the agents need to act on it.
    /// An experiment whose "unloaded" speed is a slow placement's (Figure 16) is otherwise
    /// sized so short that a runtime whose slow placement crawls ends the job before the
    /// event (Open MPI, 2026-11-26: 280 iterations, done 0.7 s before node-c joined).
    pub outlast_s: Option<f64>,
    /// The paper's figure.
    pub paper: Paper,
}

/// The runs of an experiment.
#[derive(Debug)]
pub(crate) struct Runs {
    /// heat2d + agents.
    pub adaptive: Outcome,
    /// heat2d-plain under the same load.
    pub static_run: Outcome,
    /// heat2d-plain, no load.
    pub unloaded: Outcome,
    /// heat2d-plain, same load, on the best placement (if different from the unloaded one).
    pub best: Option<Outcome>,
    /// Why the best placement was run twice (the faster run kept), when it was.
    pub best_repeated: Option<String>,
}

/// Checks that namespaces and cgroups can be used, with the reason if not.
pub(crate) fn platform() -> Result<()> {
    if let Err(why) = Cluster::available() {
        bail!("this experiment emulates nodes with network namespaces, which needs root: {why}");
    }
    if let Err(why) = mpi_ios_tests::cgroup::available() {
        bail!(
            "cannot write CPU cgroups here ({why}): without CPU caps a loaded node is not \
             slower than the others, and the experiment shows nothing"
        );
    }
    Ok(())
}

/// Sizes the experiment's runs (measuring the unloaded speed on the nodes first, when its
/// length is in seconds), then runs them (adaptive first), printing progress; logs go under
/// `logs`.
pub(crate) fn run(exp: &mut Experiment, logs: &Path, quiet: bool) -> Result<Runs> {
    let caps: Vec<Option<CpuCap>> = exp
        .caps
        .iter()
        .map(|c| CpuCap::try_cores(*c).map(Some))
        .collect::<Result<_, _>>()
        .context("bad CPU cap")?;
    let cluster = Cluster::with_caps(&caps)
        .map_err(|e| anyhow::anyhow!("cannot set up the emulated nodes: {e}"))?;
    let nodes = cluster.host_names();
    if let Length::UnloadedSeconds(seconds) = exp.length {
        println!("-- measuring the unloaded speed on these nodes, to size the runs to {seconds} s");
    }
    let rate = exp
        .scenario
        .set_length(&cluster, logs, exp.length)
        .map_err(|e| anyhow::anyhow!("cannot size the runs: {e}"))?;
    if let Some(rate) = rate {
        println!(
            "   {rate:.0} it/s unloaded: {} iterations",
            exp.scenario.iters
        );
    }
    if let (Some(_), Some(outlast), Some(best)) = (rate, exp.outlast_s, &exp.best_placement) {
        let probe = Scenario {
            placement: best.clone(),
            ..exp.scenario.clone()
        };
        let best_rate = probe
            .unloaded_rate(&cluster, &logs.join("best"), Duration::from_secs(2))
            .map_err(|e| anyhow::anyhow!("cannot measure the best placement's speed: {e}"))?;
        let floor = iterations_lasting(best_rate, outlast);
        if floor > exp.scenario.iters {
            println!(
                "   {best_rate:.0} it/s on the best placement ({}): {floor} iterations, so that \
                 the run still goes on {outlast:.0} s into its loop there",
                names(&nodes, best)
            );
            exp.scenario.iters = floor;
        }
    }
    let s = &exp.scenario;
    println!(
        "== {}: {} nodes with caps {} cores; heat2d {}x{}, {} iterations, ranks on {}",
        exp.name,
        nodes.len(),
        exp.caps
            .iter()
            .zip(&nodes)
            .map(|(c, n)| format!("{n}={c:.2}"))
            .collect::<Vec<_>>()
            .join(" "),
        s.rows,
        s.cols,
        s.iters,
        names(&nodes, &s.placement)
    );
    let one = |scenario: &Scenario, mode: Mode, dir: &str, label: &str| -> Outcome {
        println!("-- {label}");
        let total = scenario.iters;
        // Scenario::run logs under a subdirectory named after the mode.
        let dir = if dir == mode.name() {
            logs.to_owned()
        } else {
            logs.join(dir)
        };
        let o = scenario.run(&cluster, mode, &dir, &mut |line| {
            if !quiet {
                print_line(line, total);
            } else if let Line::Event(e) = line {
                println!("   {:>6.1} s  >>> {}", e.t, e.what);
            }
        });
        println!(
            "   {label}: loop {:.2} s, {:.1} it/s, checksum {}",
            o.report.seconds,
            mean_rate(&o),
            o.report.checksum
        );
        o
    };
    let adaptive = one(s, Mode::Adaptive, "adaptive", "adaptive");
    let static_run = one(s, Mode::Static, "static", "static");
    // With no load in the scenario the unloaded run is the static one: not run twice.
    let unloaded = if s.hog.is_some() {
        one(s, Mode::Unloaded, "unloaded", "unloaded")
    } else {
        println!("-- unloaded: the static run (no load in this scenario)");
        static_run.clone()
    };
    let (best, best_repeated) = match &exp.best_placement {
        Some(p) => {
            let best = s.loaded_from_the_start(p.clone());
            let mode = if s.hog.is_some() {
                Mode::Static
            } else {
                Mode::Unloaded
            };
            let label = format!("best (ranks on {}, same load)", names(&nodes, p));
            let first = one(&best, mode, "best", &label);
            let (kept, why) = yardstick::best_of_two(&adaptive, first, |why| {
                println!("   {why}: run again, the faster kept");
                one(&best, mode, "best-again", &format!("{label}, again"))
            });
            (Some(kept), why)
        }
        None => (None, None),
    };
    for o in [&adaptive, &static_run, &unloaded]
        .into_iter()
        .chain(best.as_ref())
    {
        ensure!(
            o.report.iterations == s.iters,
            "the {} run did {} iterations, not {}",
            o.mode.name(),
            o.report.iterations,
            s.iters
        );
    }
    Ok(Runs {
        adaptive,
        static_run,
        unloaded,
        best,
        best_repeated,
    })
}

/// Iterations that take `seconds` at `rate` iterations per second (at least one).
fn iterations_lasting(rate: f64, seconds: f64) -> u64 {
    (rate * seconds).ceil().max(1.0) as u64
}

fn names(nodes: &[String], placement: &[usize]) -> String {
    placement
        .iter()
        .map(|i| nodes.get(*i).map_or("?", String::as_str))
        .collect::<Vec<_>>()
        .join(",")
}

fn print_line(line: &Line, total: u64) {
    match line {
        Line::Progress(s) => {
            let hosts = if s.hosts.is_empty() {
                String::new()
            } else {
                format!("  ranks on {}", s.hosts.join(" "))
            };
            println!(
                "   {:>6.1} s  {:>6}/{total}  {:>8.1} it/s{hosts}",
                s.t, s.iteration, s.rate
            );
        }
        Line::Event(e) => println!("   {:>6.1} s  >>> {}", e.t, e.what),
    }
}

/// The yardsticks of an experiment's runs ([`yardstick::of`]).
pub(crate) fn yardsticks(exp: &Experiment, runs: &Runs) -> Yardsticks {
    let mut y = yardstick::of(
        exp.scenario.iters,
        &runs.adaptive,
        &runs.static_run,
        &runs.unloaded,
        runs.best.as_ref(),
    );
    y.best_repeated.clone_from(&runs.best_repeated);
    y
}

/// The summary table: every run, the limit, and the ratios.
pub(crate) fn summary_table(exp: &Experiment, runs: &Runs, y: &Yardsticks) -> Table {
    let mut table = Table::new(&["run", "loop seconds", "vs unloaded", "it/s", "checksum"]);
    let mut row = |name: String, s: f64, checksum: &str| {
        table.push(vec![
            name,
            format!("{s:.2}"),
            format!("{:.2}", s / y.unloaded_s),
            format!("{:.1}", exp.scenario.iters as f64 / s),
            checksum.to_owned(),
        ]);
    };
    let short = |c: &str| c.chars().take(16).collect::<String>();
    row(
        "static MPI (heat2d-plain, same load)".to_owned(),
        y.static_s,
        &short(&runs.static_run.report.checksum),
    );
    row(
        "MPI/IOS adaptive (heat2d + agents)".to_owned(),
        y.adaptive_s,
        &short(&runs.adaptive.report.checksum),
    );
    if exp.scenario.hog.is_some() {
        row(
            "unloaded (same placement, no load)".to_owned(),
            y.unloaded_s,
            &short(&runs.unloaded.report.checksum),
        );
    }
    if let Some(b) = &runs.best {
        row(
            "best placement, same load".to_owned(),
            y.best_s,
            &short(&b.report.checksum),
        );
    }
    if let Some(limit_s) = y.limit_s {
        row(
            format!("physical limit (capacity from {:.1} s)", y.free_from),
            limit_s,
            "-",
        );
    }
    table
}

/// The `--check` of the adaptive figures: every run computed the same grid, and the final
/// placement passes [`mpi_ios_bench::adaptive::check_final_placement`].
pub(crate) fn check(runs: &Runs, same: bool, vacated: &str, used: &[&str]) -> Result<()> {
    ensure!(same, "checksums differ between the runs");
    mpi_ios_bench::adaptive::check_final_placement(&runs.adaptive, vacated, used).map(|_| ())
}

/// Finishes an adaptive figure: runs its `--check` when asked, writes its typed summary
/// (`<figure>.summary.json` in `out`, whether or not the check passed), then returns the
/// check's verdict.
pub(crate) fn finish(
    exp: &Experiment,
    runs: &Runs,
    y: &Yardsticks,
    out: &Path,
    check: Option<(bool, &str, &[&str])>,
) -> Result<()> {
    let verdict = match check {
        Some((same, vacated, used)) => self::check(runs, same, vacated, used),
        None => Ok(()),
    };
    let mut outcomes = vec![
        ("adaptive", &runs.adaptive, "heat2d"),
        ("static", &runs.static_run, "heat2d-plain"),
        ("unloaded", &runs.unloaded, "heat2d-plain"),
    ];
    if let Some(best) = &runs.best {
        outcomes.push(("best", best, "heat2d-plain"));
    }
    let mut summary = mpi_ios_bench::summary::Summary::of(exp.name, &outcomes);
    summary.record(y);
    summary.passed = verdict.is_ok();
    summary.write(out, &mpi_ios_bench::summary::figure_file(exp.name))?;
    verdict
}

/// The lines under the table: ratios, recovery, migrations, the paper's figure, checksums.
/// Returns them and whether the checksums all match.
pub(crate) fn summary_notes(exp: &Experiment, runs: &Runs, y: &Yardsticks) -> (Vec<String>, bool) {
    let mut notes = Vec::new();
    notes.push(format!(
        "Adaptive vs static MPI: {:.1}% shorter ({:.2} s against {:.2} s). Paper: {:.0}% shorter{}.",
        y.shorter_pct(),
        y.adaptive_s,
        y.static_s,
        exp.paper.shorter_pct,
        exp.paper.seconds.map_or(String::new(), |(s, a)| format!(
            " ({a:.2} s against {s:.2} s with MPICH2)"
        ))
    ));
    notes.push(format!(
        "Adaptive / physical limit = {} (target: within 1.10); unloaded {:.2} s{}.",
        match (y.limit_ratio(), &y.limit_refused) {
            (Some(ratio), _) => format!("{ratio:.3}"),
            (None, why) => format!(
                "REFUSED ({})",
                why.as_deref().unwrap_or("no rate measured under the load")
            ),
        },
        y.unloaded_s,
        if runs.best.is_some() {
            format!(
                ", best placement {:.2} s ({:.0} it/s once the load runs)",
                y.best_s, y.best_rate
            )
        } else {
            " (the best placement's speed: every node has the same cap)".to_owned()
        }
    ));
    if let Some(why) = &y.best_repeated {
        notes.push(format!(
            "Best placement run twice ({why}); the faster run is the one used."
        ));
    }
    match (y.recovery_from, y.recovery_s) {
        (Some((what, at)), Some(r)) => notes.push(format!(
            "Recovered to {:.0} it/s (90% of the {} throughput, in every 2 s window from then on) \
             {r:.1} s after the {what} at {at:.1} s (target: within 5 s of load onset).",
            y.recovery_target,
            if what == "load onset" { "unloaded" } else { "best" },
        )),
        (Some((what, at)), None) => notes.push(format!(
            "Never recovered to {:.0} it/s (90% of the reference throughput) after the {what} at {at:.1} s.",
            y.recovery_target
        )),
        (None, _) => {}
    }
    if let (Some(("load onset", _)), Some(_)) = (y.recovery_from, &runs.best) {
        notes.push(match y.recovery_best_s {
            Some(r) => format!(
                "Recovered to {:.0} it/s (90% of the best placement's throughput under the same \
                 load) {r:.1} s after the load onset.",
                0.9 * y.best_rate
            ),
            None => format!(
                "Never recovered to {:.0} it/s (90% of the best placement's throughput under the \
                 same load).",
                0.9 * y.best_rate
            ),
        });
    }
    if y.migrations.is_empty() {
        notes.push("Migrations: NONE (the agents moved no rank).".to_owned());
    }
    for (t, what) in &y.migrations {
        notes.push(format!("Migration at {t:.1} s: {what}."));
    }
    if let Some(r) = y.settled_rate {
        let best = y.best_rate;
        notes.push(format!(
            "After the last migration: {r:.0} it/s, {:.0}% of the {} run's {best:.0} it/s.",
            100.0 * r / best,
            if runs.best.is_some() {
                "best placement"
            } else {
                "unloaded"
            },
        ));
    }
    let sums: Vec<&str> = [&runs.adaptive, &runs.static_run]
        .into_iter()
        .chain(exp.scenario.hog.is_some().then_some(&runs.unloaded))
        .chain(runs.best.as_ref())
        .map(|o| o.report.checksum.as_str())
        .collect();
    // The runs without PCM say when their grid last changed: past that, any run matches.
    let settled = [&runs.static_run, &runs.unloaded]
        .into_iter()
        .chain(runs.best.as_ref())
        .filter(|o| o.report.last_change.is_some())
        .find_map(|o| o.report.settled());
    let same = settled.is_none() && sums.windows(2).all(|w| w[0] == w[1]);
    notes.push(if let Some(why) = settled {
        format!("Checksums: they prove nothing: {why}")
    } else if same {
        format!("Checksums: all {} runs match bit for bit.", sums.len())
    } else {
        format!("Checksums: MISMATCH {sums:?}")
    });
    (notes, same)
}

/// The adaptive run's events as plot markers (loop time).
pub(crate) fn plot_events(o: &Outcome) -> Vec<PlotEvent> {
    let t0 = loop_start(o);
    o.events
        .iter()
        .map(|e| {
            PlotEvent::new(
                e.t - t0,
                mpi_ios_bench::adaptive::plot_kind(e),
                e.what.clone(),
            )
        })
        .collect()
}

/// Throughput over time of the static, adaptive and unloaded runs on one plot, with the
/// adaptive run's events marked; written as `out/stem.svg` and `.png`.
pub(crate) fn throughput_plot(
    out: &Path,
    stem: &str,
    title: &str,
    runs: &Runs,
) -> Result<mpi_ios_plots::Written> {
    let mut plot = TimePlot::new(title)
        .x_label("time since the start of the iteration loop (s)")
        .y_label("throughput (iterations / s)")
        .series("static MPI (heat2d-plain)", rate_points(&runs.static_run))
        .series("MPI/IOS (heat2d + IOS agents)", rate_points(&runs.adaptive));
    if runs.unloaded.mode == Mode::Unloaded {
        plot = plot.series("unloaded (no load)", rate_points(&runs.unloaded));
    }
    if let Some(b) = &runs.best {
        plot = plot.series("best placement, same load", rate_points(b));
    }
    Ok(plot
        .events(plot_events(&runs.adaptive))
        .write(out.join(stem))?)
}

/// A temporary directory for the runs' logs, kept (copied under `out/logs/NAME`) at the end.
pub(crate) fn logs_dir(name: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("mpi-ios-{name}-"))
        .tempdir()
        .context("creating a temp dir")
}

/// Seconds as a `Duration` (negative taken as 0).
pub(crate) fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

/// The agent options every experiment uses (the main job's).
pub(crate) fn agent_options(first_event_at: f64) -> Vec<String> {
    mpi_ios_bench::adaptive::agent_options(first_event_at)
}

/// Creates `out` and returns it.
pub(crate) fn out_dir(out: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    Ok(out.to_owned())
}
