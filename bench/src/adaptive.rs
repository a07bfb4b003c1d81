//! `mpi-ios-bench adaptive`: the project's main job. heat2d runs on emulated nodes (network
//! namespaces with cgroup CPU caps) with an IOS agent on each; after a warm-up a CPU hog
//! ([`HOG_BUSY_LOOPS`] busy loops) starts on one node, then an idle node's agent joins, and
//! the agents move the slowed rank by themselves. The same scenario then runs as static MPI
//! (heat2d-plain under the same load), unloaded, and on the best placement under the same
//! load (ranks off the loaded node); the summary compares them with the physical limit
//! ([`crate::yardstick`]), checks the checksums, and a plot shows the throughput over time
//! with the events marked.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context as _, Result};
use clap::Args;
use mpi_ios_tests::cgroup::CpuCap;
use mpi_ios_tests::netns::Cluster;
use mpi_ios_tests::scenario::{EventKind, Hog, Length, Line, Mode, Outcome, Scenario};

use crate::yardstick::Yardsticks;
use crate::Table;

/// Options of `adaptive`.
#[derive(Debug, Args)]
pub struct AdaptiveArgs {
    /// Grid rows and columns (square grid; default 1024, with --malleable 2048).
    #[arg(long)]
    pub size: Option<usize>,
    /// Iterations; by default as many as take `--seconds` unloaded on the emulated nodes
    /// (measured there first: machines of one kind differ in speed by 4x or more).
    #[arg(long)]
    pub iters: Option<u64>,
    /// Seconds the job would take unloaded, when `--iters` is not given.
    #[arg(long, default_value_t = 14.0)]
    pub seconds: f64,
    /// CPU cap of every emulated node, in cores. The malleable act's four nodes take less if
    /// together they would want more than the machine's cores (0.5 on 2 cores).
    #[arg(long, default_value_t = 0.6)]
    pub cap: f64,
    /// Seconds after the start at which the CPU hog (two busy loops) starts on node-b.
    #[arg(long, default_value_t = 5.0)]
    pub load_at: f64,
    /// Seconds after the start at which node-c's agent joins the pool (it is idle).
    #[arg(long, default_value_t = 7.0)]
    pub join_at: f64,
    /// The variant without a new node: node-a gets twice the cap and takes the loaded
    /// rank (a cooperating node); node-c never joins.
    #[arg(long)]
    pub cooperating: bool,
    /// After the runs, the fault act: heat2d under pcmrun on the nodes (rank 0 on node-a,
    /// rank 1 on node-b, node-c spare), a checkpoint every second; node-b is powered off
    /// mid-run (at --load-at, or 2 s with --quick) and pcmrun brings the job back by itself
    /// on node-a and node-c, checked against the plain run's checksum. Not with
    /// --cooperating.
    #[arg(long)]
    pub fault: bool,
    /// Skip the static MPI run (and the unloaded and best-placement ones).
    #[arg(long)]
    pub adaptive_only: bool,
    /// Short run: 5 s unloaded, load at 2 s, join at 3 s.
    #[arg(long)]
    pub quick: bool,
    /// Fail unless at least one automatic migration happened, the ranks ended off the loaded
    /// node and on the node that brought the capacity, and the checksums match (the
    /// run's own acceptance check; CI uses it).
    #[arg(long)]
    pub check: bool,
    /// The malleable act instead: heat2d, which may grow and shrink, on node-a
    /// and node-b of four nodes; node-b is loaded, node-c and node-d join idle, the agents
    /// move and grow the job; node-c's agent then leaves and the job shrinks or moves off
    /// it. Compared with agents that only migrate (--no-resize), the best fixed-width
    /// placement (node-a node-d) and static MPI. First measures heat2d-plain at 1 to 4
    /// ranks (2 and 3 with --quick), one per node; the runs are sized by their events from
    /// those rates (--seconds is not used). With --quick: load at 2 s, joins at 3 s, leave
    /// at 8 s, the two adaptive runs only (the checksum to match from heat2d-plain on the
    /// four nodes, unloaded).
    #[arg(long)]
    pub malleable: bool,
    /// With --malleable: seconds after the start at which node-c's agent leaves (default:
    /// 8 with --quick, else 20 after --join-at).
    #[arg(long, value_name = "S")]
    pub leave_at: Option<f64>,
    /// With --malleable: measure heat2d-plain's speed at 1 to 4 ranks and stop.
    #[arg(long)]
    pub scaling_only: bool,
    /// Directory for the plot, the timeline and the logs.
    #[arg(long, value_name = "DIR", default_value = "results/main-job")]
    pub out: PathBuf,
    /// Deadline of each run, seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// The PCM program of the adaptive run: the Rust heat2d, or the C one (PCM through the
    /// C interface; build it first with `scripts/build-c.sh`). The static and unloaded runs
    /// are heat2d-plain either way: both programs compute the same bits (checked).
    #[arg(long, value_enum, default_value_t = Program::Heat2d)]
    pub program: Program,
}

/// A PCM program the main job can run adaptively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Program {
    /// heat2d, in Rust.
    #[value(name = "heat2d")]
    Heat2d,
    /// heat2d-c: the paper's heat application in C.
    #[value(name = "heat2d-c")]
    Heat2dC,
}

impl Program {
    /// Its binary's name.
    pub fn binary(self) -> &'static str {
        match self {
            Program::Heat2d => "heat2d",
            Program::Heat2dC => "heat2d-c",
        }
    }
}

/// What the summary reports.
#[derive(Debug)]
pub struct Summary {
    /// The adaptive run.
    pub adaptive: Outcome,
    /// The static run, if made.
    pub static_run: Option<Outcome>,
    /// The unloaded run, if made.
    pub unloaded: Option<Outcome>,
    /// heat2d-plain under the same load on the placement the capacity allows at best, if
    /// made: the physical limit's speed.
    pub best: Option<Outcome>,
    /// Why the best placement was run twice (the faster run kept), when it was.
    pub best_repeated: Option<String>,
}

impl Summary {
    /// The runs made, by name, the adaptive one first.
    fn runs(&self) -> Vec<(&'static str, &Outcome)> {
        [
            ("adaptive", Some(&self.adaptive)),
            ("static", self.static_run.as_ref()),
            ("unloaded", self.unloaded.as_ref()),
            ("best", self.best.as_ref()),
        ]
        .into_iter()
        .filter_map(|(name, o)| o.map(|o| (name, o)))
        .collect()
    }

    /// The yardsticks, when the static and unloaded runs were made.
    fn yardsticks(&self, iters: u64) -> Option<Yardsticks> {
        let mut y = crate::yardstick::of(
            iters,
            &self.adaptive,
            self.static_run.as_ref()?,
            self.unloaded.as_ref()?,
            self.best.as_ref(),
        );
        y.best_repeated.clone_from(&self.best_repeated);
        Some(y)
    }
}

/// Where the ranks run at best once node-b is loaded: one on the joining node-c, or both on
/// the cooperating node-a (twice the cap).
fn best_placement(args: &AdaptiveArgs) -> Vec<usize> {
    if args.cooperating {
        vec![0, 0]
    } else {
        vec![0, 2]
    }
}

/// The scenario and its length.
fn scenario(args: &AdaptiveArgs) -> (Scenario, Length) {
    let (length, load_at, join_at) = if args.quick {
        // Short: the static run under the hog can lock into the nodes' quota periods at
        // 10-30 it/s (docs/emulated-nodes.md), and must still end within its deadline.
        (Length::UnloadedSeconds(5.0), 2.0, 3.0)
    } else {
        (
            Length::from_options(args.iters, args.seconds),
            args.load_at,
            args.join_at,
        )
    };
    let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
    let size = args.size.unwrap_or(1024);
    let scenario = Scenario {
        rows: size,
        cols: size,
        // Set from `length` once the nodes exist.
        iters: 0,
        progress_period: mpi_ios_tests::scenario::PROGRESS_PERIOD,
        placement: vec![0, 1],
        agents_at_start: vec![0, 1],
        hog: Some(Hog::on(1, secs(load_at)).with_busy_loops(HOG_BUSY_LOOPS)),
        joins: if args.cooperating {
            Vec::new()
        } else {
            vec![(2, secs(join_at))]
        },
        leaves: Vec::new(),
        agent_options: agent_options(load_at),
        timeout: Duration::from_secs(args.timeout),
        unlisted_spares: false,
    };
    (scenario, length)
}

/// Busy loops of the main job's hog. With one, rank 1 kept 0.40 of node-b's 0.6 core (the
/// loop 0.21) and the model's gain for moving it to idle node-c was 0.12 - 0.28 in five runs
/// on 2026-12-03, against a `min_gain` of 0.1: whether the agents moved it at all was a
/// matter of the run (one CI run on 79d971a did not). With two the rank keeps 0.05 - 0.3
/// core and the gain was 0.62 - 0.68 in three runs: a load the model must act on.
pub const HOG_BUSY_LOOPS: usize = 2;

/// The agent options of the adaptive experiments (the main job and the figures), whose first
/// event (load onset or join) comes `first_event_at` seconds after the start:
/// - a hold-down shorter than that, since it is also the shortest residence before a rank
///   may move, and the affected rank must be eligible at once;
/// - node profiles every second.
pub fn agent_options(first_event_at: f64) -> Vec<String> {
    let hold_down = (first_event_at * 0.6).clamp(1.0, 30.0);
    [
        "--hold-down",
        &format!("{hold_down:.1}"),
        "--profile-period",
        "1",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Checks what every act of the main job needs of the machine and the build: root for the
/// emulated nodes, writable CPU cgroups, the program built.
pub fn preflight(args: &AdaptiveArgs) -> Result<()> {
    if let Err(why) = Cluster::available() {
        bail!(
            "the main job emulates several nodes with network namespaces and cgroup CPU caps, \
             which needs root: {why}. Run it as root (or with sudo)."
        );
    }
    if let Err(why) = mpi_ios_tests::cgroup::available() {
        bail!(
            "cannot write CPU cgroups here ({why}): without CPU caps the emulated nodes share \
             the machine's cores, a loaded node is not slower than the others, and there is \
             nothing for the agents to fix. Run on a machine where /sys/fs/cgroup is writable."
        );
    }
    if let Err(e) = mpi_ios_tests::try_program(args.program.binary()) {
        bail!("{e} (the C heat2d is built by scripts/build-c.sh)");
    }
    Ok(())
}

/// Runs the main job (the malleable act is [`crate::malleable_act::run`]).
pub fn run(args: AdaptiveArgs) -> Result<()> {
    preflight(&args)?;
    if args.scaling_only || args.leave_at.is_some() {
        bail!("--scaling-only and --leave-at belong to the malleable act: add --malleable");
    }
    if args.fault && args.cooperating {
        bail!("--fault needs the three nodes of the default scenario: not with --cooperating");
    }
    let (mut scenario, length) = scenario(&args);
    let caps: Vec<Option<CpuCap>> = if args.cooperating {
        vec![
            Some(CpuCap::cores(args.cap * 2.0)),
            Some(CpuCap::cores(args.cap)),
        ]
    } else {
        vec![Some(CpuCap::cores(args.cap)); 3]
    };
    let (cluster, logs) = nodes_and_logs(&caps, &args.out, "mpi-ios-main-")?;
    let nodes = cluster.host_names();
    if let Length::UnloadedSeconds(seconds) = length {
        println!(
            "== measuring heat2d's unloaded speed on the nodes, to size the runs to {seconds} s"
        );
    }
    if let Some(rate) = scenario
        .set_length(&cluster, logs.path(), length)
        .map_err(|e| anyhow::anyhow!("cannot size the runs: {e}"))?
    {
        println!("   {rate:.0} it/s: {} iterations", scenario.iters);
    }
    println!(
        "== {} emulated nodes ({}), each capped at {} CPU; heat2d {}x{}, {} iterations, ranks on {}",
        nodes.len(),
        nodes.join(", "),
        caps.iter()
            .map(|c| c.map_or("none".to_owned(), |c| format!("{:.2}", c.as_cores())))
            .collect::<Vec<_>>()
            .join("/"),
        scenario.rows,
        scenario.cols,
        scenario.iters,
        scenario
            .placement
            .iter()
            .map(|i| nodes[*i].as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );

    let best = scenario.loaded_from_the_start(best_placement(&args));
    let best_hosts = best
        .placement
        .iter()
        .map(|i| nodes[*i].as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let mut plan = vec![("adaptive", Mode::Adaptive, &scenario)];
    if !args.adaptive_only {
        plan.extend([
            ("static", Mode::Static, &scenario),
            ("unloaded", Mode::Unloaded, &scenario),
            ("best", Mode::Static, &best),
        ]);
    }
    let run_one = |name: &str, mode: Mode, run: &Scenario| -> Outcome {
        match (name, args.program) {
            ("adaptive", Program::Heat2dC) => {
                println!("== adaptive (heat2d-c: the C heat2d with PCM, IOS agents move ranks) run")
            }
            ("adaptive", _) => {
                println!("== adaptive (heat2d with PCM, IOS agents move ranks) run")
            }
            ("static", _) => {
                println!("== static MPI (heat2d-plain, same load, nobody moves anything) run")
            }
            ("unloaded", _) => println!("== unloaded (heat2d-plain, no hog) run"),
            ("best", _) => println!(
                "== best placement (heat2d-plain, same load from its start, ranks on \
                 {best_hosts}): the physical limit's speed"
            ),
            _ => println!("== best placement again ({best_hosts}), the faster run kept"),
        }
        let total = run.iters;
        let program = match mode {
            Mode::Adaptive => args.program.binary(),
            Mode::Static | Mode::Unloaded => "heat2d-plain",
        };
        // Scenario::run_program logs under a directory named after the mode.
        let dir = match name {
            "best" | "best-again" => logs.path().join(name),
            _ => logs.path().to_owned(),
        };
        let outcome = run.run_program(&cluster, mode, program, &dir, &mut |line| {
            print_line(line, total)
        });
        println!(
            "   done in {:.1} s, checksum {}",
            outcome.report.seconds, outcome.report.checksum
        );
        outcome
    };
    let mut runs = plan
        .into_iter()
        .map(|(name, mode, run)| run_one(name, mode, run))
        .collect::<Vec<_>>()
        .into_iter();
    let adaptive = runs.next().context("no adaptive run")?;
    let (static_run, unloaded) = (runs.next(), runs.next());
    let (best, best_repeated) = match runs.next() {
        Some(first) => {
            let (kept, why) = crate::yardstick::best_of_two(&adaptive, first, |why| {
                println!("   {why}");
                run_one("best-again", Mode::Static, &best)
            });
            (Some(kept), why)
        }
        None => (None, None),
    };
    let summary = Summary {
        adaptive,
        static_run,
        unloaded,
        best,
        best_repeated,
    };
    let (mut ok, mut typed) = report(&summary, &scenario, &args)?;
    if args.fault {
        println!();
        println!("== fault act (heat2d under pcmrun; node-b is powered off mid-run)");
        // Nothing of the runs before may run on into the act.
        cluster.clear_nodes();
        let fault_at = if args.quick { 2.0 } else { args.load_at };
        let plain = match &summary.unloaded {
            Some(u) => {
                if let Some(why) = u.report.settled() {
                    bail!("{why}");
                }
                u.report.checksum.clone()
            }
            None => scenario.plain_checksum(Duration::from_secs(args.timeout)),
        };
        let recovered = match crate::fault::run(
            &cluster,
            &scenario,
            fault_at,
            Duration::from_secs(args.timeout),
            logs.path(),
        ) {
            Ok(outcome) => crate::fault::summarize(&outcome, &plain),
            Err(e) => {
                println!("fault act: FAILED: {e:#}");
                false
            }
        };
        ok &= recovered;
        typed.fault_recovered = Some(recovered);
    }
    typed.passed = ok;
    typed.write(&args.out, crate::summary::MAIN_JOB_FILE)?;
    crate::keep_logs(logs.path(), &args.out.join("logs"));
    if args.check && !ok {
        bail!("the main job's own check failed (see above)");
    }
    Ok(())
}

/// Whether every run's checksum is the same and a run without PCM could have told a wrong
/// one (its grid still changed near its end); says which, `counted` in the line of a match.
pub(crate) fn checksums_match(runs: &[(&str, &Outcome)], counted: &str) -> bool {
    let sums: Vec<&str> = runs
        .iter()
        .map(|(_, o)| o.report.checksum.as_str())
        .collect();
    // The runs without PCM say when their grid last changed: past that, any run matches.
    let settled: Vec<String> = runs
        .iter()
        .filter(|(_, o)| o.report.last_change.is_some())
        .filter_map(|(_, o)| o.report.settled())
        .collect();
    if let Some(why) = settled.first() {
        println!("RESULT: CHECKSUMS PROVE NOTHING: {why}");
        false
    } else if sums.windows(2).all(|w| w[0] == w[1]) {
        println!("RESULT: checksums match bit for bit ({counted})");
        true
    } else {
        println!("RESULT: CHECKSUM MISMATCH: {sums:?}");
        false
    }
}

/// Says where a plot went, or why it did not; whether it was written.
pub(crate) fn plotted(written: Result<mpi_ios_plots::Written>) -> bool {
    match written {
        Ok(written) => {
            println!(
                "plot: {} and {}",
                written.svg.display(),
                written.png.display()
            );
            true
        }
        Err(e) => {
            println!("plot: FAILED: {e:#}");
            false
        }
    }
}

/// The emulated nodes of an act, capped at `caps`, its output directory `out` made, and a
/// temporary directory (named `prefix...`) for its runs' logs.
pub(crate) fn nodes_and_logs(
    caps: &[Option<CpuCap>],
    out: &Path,
    prefix: &str,
) -> Result<(Cluster, tempfile::TempDir)> {
    let cluster = Cluster::with_caps(caps)
        .map_err(|e| anyhow::anyhow!("cannot set up the emulated nodes: {e}"))?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let logs = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .context("creating a temp dir")?;
    Ok((cluster, logs))
}

/// Prints a run's progress line or event as it comes, for people.
pub fn print_line(line: &Line, total: u64) {
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

/// Prints the summary; returns whether the run passed its own check, and the typed summary
/// (without the fault act).
fn report(
    summary: &Summary,
    scenario: &Scenario,
    args: &AdaptiveArgs,
) -> Result<(bool, crate::summary::Summary)> {
    let a = &summary.adaptive;
    let mut ok = true;
    let runs = summary.runs();
    let outcomes: Vec<(&str, &Outcome, &str)> = runs
        .iter()
        .map(|&(name, o)| {
            let program = match name {
                "adaptive" => args.program.binary(),
                _ => "heat2d-plain",
            };
            (name, o, program)
        })
        .collect();
    let mut typed = crate::summary::Summary::of("main-job", &outcomes);
    let y = summary.yardsticks(scenario.iters);
    if let Some(y) = &y {
        typed.record(y);
    }
    println!();
    println!("== summary");
    let mut table = Table::new(&["run", "seconds", "vs unloaded", "checksum"]);
    let unloaded_s = summary.unloaded.as_ref().map(|u| u.report.seconds);
    let ratio = |s: f64| unloaded_s.map_or("-".to_owned(), |u| format!("{:.2}", s / u));
    for &(name, o) in &runs {
        table.push(vec![
            name.to_owned(),
            format!("{:.1}", o.report.seconds),
            ratio(o.report.seconds),
            o.report.checksum.clone(),
        ]);
    }
    if let Some(limit_s) = y.as_ref().and_then(|y| y.limit_s) {
        table.push(vec![
            "physical limit".to_owned(),
            format!("{limit_s:.1}"),
            ratio(limit_s),
            "-".to_owned(),
        ]);
    }
    print!("{}", table.to_text());
    if let Some(s) = &summary.static_run {
        println!(
            "adaptive vs static MPI: {:.1}% shorter ({:.1} s against {:.1} s)",
            100.0 * (1.0 - a.report.seconds / s.report.seconds),
            a.report.seconds,
            s.report.seconds
        );
    }
    match y.as_ref().map(|y| (y, y.limit_ratio())) {
        Some((y, Some(ratio))) => println!(
            "adaptive / physical limit = {ratio:.3} (target: within 1.10); the limit runs the \
             iterations left at {:.0} it/s from the {} at {:.1} s (loop time): the best \
             placement's speed under the same load, measured over its loop {:.1} - {:.1} s \
             with the load running throughout",
            y.best_rate,
            if args.cooperating {
                "load onset"
            } else {
                "join"
            },
            y.free_from,
            y.best_window.from_s,
            y.best_window.to_s,
        ),
        Some((y, None)) => {
            println!(
                "physical limit: REFUSED: {}",
                y.limit_refused
                    .as_deref()
                    .unwrap_or("no rate measured under the load")
            );
            ok = false;
        }
        None => {}
    }
    if let Some(why) = y.as_ref().and_then(|y| y.best_repeated.as_deref()) {
        println!("best placement: run twice ({why}); the faster run is the one used");
    }
    if let Some(r) = y.as_ref().and_then(Yardsticks::settled_over_best) {
        println!(
            "after the last move: {:.0} it/s, {:.3} of the best placement's {:.0} it/s run plain \
             under the same load (target: at least 0.97)",
            r * y.as_ref().map_or(0.0, |y| y.best_rate),
            r,
            y.as_ref().map_or(0.0, |y| y.best_rate),
        );
    }
    let onset = a.first(EventKind::LoadOnset);
    let migrations: Vec<_> = a.migrations().collect();
    if migrations.is_empty() {
        println!("migrations: NONE (the agents did not move any rank)");
        ok = false;
    }
    for m in &migrations {
        let after = onset.map_or(String::new(), |o| {
            format!(", {:.1} s after load onset", m.t - o)
        });
        println!("migration at {:.1} s: {}{after}", m.t, m.what);
    }
    if let Some(y) = &y {
        let unloaded = match y.recovery_s {
            Some(r) => format!("{r:.1} s after load onset"),
            None => "never".to_owned(),
        };
        println!(
            "recovered to 90% of the unloaded throughput ({:.0} it/s in every 2 s window from \
             then on): {unloaded}",
            y.recovery_target
        );
        if summary.best.is_some() {
            let best = match y.recovery_best_s {
                Some(r) => format!("{r:.1} s after load onset"),
                None => "never".to_owned(),
            };
            println!(
                "recovered to 90% of the best placement's throughput under the same load \
                 ({:.0} it/s): {best}",
                0.9 * y.best_rate
            );
        }
    }
    for (host, d) in a.decisions.iter().filter(|(_, d)| d.what.is_migration()) {
        println!("agent on {host}: {}", d.what);
    }
    // The hog runs on node-b; the capacity that frees it is node-c's (the joining node) or,
    // with a cooperating node from the start, node-a's.
    let used = if args.cooperating { "node-a" } else { "node-c" };
    match check_final_placement(a, "node-b", &[used]) {
        Ok(hosts) => println!(
            "final placement: {} (node-b vacated, {used} used)",
            hosts.join(" ")
        ),
        Err(e) => {
            println!("final placement: FAILED: {e:#}");
            ok = false;
        }
    }
    ok &= checksums_match(
        &runs,
        &format!("{} runs, {} migrations", runs.len(), migrations.len()),
    );
    write_timeline(&runs, &args.out)?;
    ok &= plotted(plot(summary, y.as_ref(), &args.out.join("throughput")));
    typed.passed = ok;
    Ok((ok, typed))
}

/// Throughput over windows of at least `window` seconds, from (seconds, iterations done)
/// points: one point per window, at its middle.
pub fn windowed_rate(points: &[(f64, u64)], window: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let Some(&(mut t0, mut i0)) = points.first() else {
        return out;
    };
    for &(t, i) in &points[1..] {
        if t - t0 >= window {
            out.push(((t0 + t) / 2.0, i.saturating_sub(i0) as f64 / (t - t0)));
            (t0, i0) = (t, i);
        }
    }
    out
}

/// The throughput-over-time plot of the runs, with the adaptive run's events marked.
fn plot(summary: &Summary, y: Option<&Yardsticks>, stem: &Path) -> Result<mpi_ios_plots::Written> {
    use mpi_ios_plots::{Event, TimePlot};
    let window = (summary.adaptive.wall_s / 60.0).clamp(0.25, 2.0);
    let mut plot = TimePlot::new("heat2d on emulated nodes: a node is loaded, an idle one joins")
        .x_label("time since start (s)")
        .y_label("iterations / s");
    for (name, o) in summary.runs() {
        let label = match name {
            "adaptive" => "MPI/IOS (adaptive)",
            "static" => "static MPI, same load",
            "best" => "best placement, same load",
            _ => "unloaded",
        };
        plot = plot.series(label, windowed_rate(&o.progress_points(), window));
    }
    // The best placement's rate under the load, drawn over the adaptive run's stretch after
    // its last move: the two side by side.
    let a = &summary.adaptive;
    let last_move = a.migrations().last().map(|m| m.t);
    if let (Some(y), Some(from), Some(end)) = (
        y.filter(|y| y.limit_s.is_some()),
        last_move,
        a.samples.last().map(|s| s.t),
    ) {
        if end > from {
            plot = plot.series(
                "best placement's rate under the same load",
                vec![(from, y.best_rate), (end, y.best_rate)],
            );
        }
    }
    plot = plot.events(
        summary
            .adaptive
            .events
            .iter()
            .map(|e| Event::new(e.t, plot_kind(e), e.what.clone())),
    );
    Ok(plot.write(stem)?)
}

/// The plot marker of a run's event: a resize is a grow or a shrink.
pub fn plot_kind(e: &mpi_ios_tests::scenario::Event) -> mpi_ios_plots::EventKind {
    use mpi_ios_plots::EventKind as Kind;
    match e.kind {
        EventKind::LoadOnset => Kind::LoadOnset,
        EventKind::NodeJoin => Kind::NodeJoin,
        EventKind::NodeLeave => Kind::NodeLeave,
        EventKind::Migration => Kind::Migration,
        EventKind::Resize => match &e.resized {
            Some(r) if r.grew() => Kind::Grow,
            Some(_) => Kind::Shrink,
            None => Kind::Other,
        },
    }
}

/// The runs' progress and events as CSV (`timeline.csv` in `out`), for plotting elsewhere.
pub fn write_timeline(runs: &[(&str, &Outcome)], out: &Path) -> Result<()> {
    let mut csv = String::from("run,seconds,iteration,rate,event\n");
    for &(name, o) in runs {
        for s in &o.samples {
            csv.push_str(&format!(
                "{},{:.3},{},{:.2},\n",
                name, s.t, s.iteration, s.rate
            ));
        }
        for e in &o.events {
            csv.push_str(&format!(
                "{},{:.3},,,{}\n",
                name,
                e.t,
                e.what.replace(',', ";")
            ));
        }
    }
    let path = out.join("timeline.csv");
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
    println!("timeline: {}", path.display());
    Ok(())
}

/// At the end of an adaptive run the slowed node `vacated` runs no rank while one of `used`
/// runs one. Which moves got there is the agents' choice: a cooperating node with room may take
/// the rank first and pass it on to a faster newcomer. Returns where the ranks ended.
pub fn check_final_placement(
    adaptive: &Outcome,
    vacated: &str,
    used: &[&str],
) -> Result<Vec<String>> {
    let moves: Vec<&str> = adaptive.migrations().map(|m| m.what.as_str()).collect();
    let hosts = adaptive
        .report
        .hosts
        .clone()
        .context("heat2d's report names no hosts")?;
    ensure!(
        !hosts.iter().any(|h| h == vacated) && hosts.iter().any(|h| used.contains(&h.as_str())),
        "the agents did not leave {vacated} for {}: the ranks ended on {hosts:?} after \
         the migrations {moves:?}",
        used.join(" or ")
    );
    Ok(hosts)
}
