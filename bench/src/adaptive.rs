//! `mpi-ios-bench adaptive`: the project's main job. heat2d runs on emulated nodes (network
//! namespaces with cgroup CPU caps) with an IOS agent on each; after a warm-up a CPU hog
//! starts on one node, then an idle node's agent joins, and the agents move the slowed rank
//! by themselves. The same scenario then runs as static MPI (heat2d-plain under the same
//! load) and unloaded; the summary compares the three with the physical limit, checks the
//! checksums, and a plot shows the throughput over time with the events marked.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context as _, Result};
use clap::Args;
use mpi_ios_tests::cgroup::CpuCap;
use mpi_ios_tests::netns::Cluster;
use mpi_ios_tests::scenario::{EventKind, Length, Line, Mode, Outcome, Scenario};

use crate::Table;

/// Options of `adaptive`.
#[derive(Debug, Args)]
pub struct AdaptiveArgs {
    /// Grid rows and columns (square grid).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Iterations; by default as many as take `--seconds` unloaded on the emulated nodes
    /// (measured there first: machines of one kind differ in speed by 4x or more).
    #[arg(long)]
    pub iters: Option<u64>,
    /// Seconds the job would take unloaded, when `--iters` is not given.
    #[arg(long, default_value_t = 14.0)]
    pub seconds: f64,
    /// CPU cap of every emulated node, in cores.
    #[arg(long, default_value_t = 0.6)]
    pub cap: f64,
    /// Seconds after the start at which the CPU hog starts on node-b.
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
    /// Skip the static MPI run (and the unloaded one).
    #[arg(long)]
    pub adaptive_only: bool,
    /// Short run for CI: 5 s unloaded, load at 2 s, join at 3 s.
    #[arg(long)]
    pub quick: bool,
    /// Fail unless at least one automatic migration happened, the ranks ended off the loaded
    /// node and on the node that brought the capacity, and the checksums match (the
    /// run's own acceptance check; CI uses it).
    #[arg(long)]
    pub check: bool,
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
    let scenario = Scenario {
        rows: args.size,
        cols: args.size,
        // Set from `length` once the nodes exist.
        iters: 0,
        progress_period: mpi_ios_tests::scenario::PROGRESS_PERIOD,
        placement: vec![0, 1],
        agents_at_start: vec![0, 1],
        hog: Some((1, secs(load_at))),
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

/// Runs the main job.
pub fn run(args: AdaptiveArgs) -> Result<()> {
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
    let cluster = Cluster::with_caps(&caps)
        .map_err(|e| anyhow::anyhow!("cannot set up the emulated nodes: {e}"))?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let logs = tempfile::Builder::new()
        .prefix("mpi-ios-main-")
        .tempdir()
        .context("creating a temp dir")?;
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

    let mut runs = Vec::new();
    let modes: &[Mode] = if args.adaptive_only {
        &[Mode::Adaptive]
    } else {
        &[Mode::Adaptive, Mode::Static, Mode::Unloaded]
    };
    for &mode in modes {
        match (mode, args.program) {
            (Mode::Adaptive, Program::Heat2dC) => {
                println!("== adaptive (heat2d-c: the C heat2d with PCM, IOS agents move ranks) run")
            }
            _ => println!("== {} run", describe(mode)),
        }
        let total = scenario.iters;
        let program = match mode {
            Mode::Adaptive => args.program.binary(),
            Mode::Static | Mode::Unloaded => "heat2d-plain",
        };
        let outcome = scenario.run_program(&cluster, mode, program, logs.path(), &mut |line| {
            print_line(line, total)
        });
        println!(
            "   done in {:.1} s, checksum {}",
            outcome.report.seconds, outcome.report.checksum
        );
        runs.push(outcome);
    }
    let mut runs = runs.into_iter();
    let summary = Summary {
        adaptive: runs.next().context("no adaptive run")?,
        static_run: runs.next(),
        unloaded: runs.next(),
    };
    let (mut ok, mut typed) = report(&summary, &scenario, &args)?;
    if args.fault {
        println!();
        println!("== fault act (heat2d under pcmrun; node-b is powered off mid-run)");
        // Nothing of the runs before may run on into the act.
        cluster.clear_nodes();
        let fault_at = if args.quick { 2.0 } else { args.load_at };
        let plain = match &summary.unloaded {
            Some(u) => u.report.checksum.clone(),
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
    keep_logs(logs.path(), &args.out.join("logs"));
    if args.check && !ok {
        bail!("the main job's own check failed (see above)");
    }
    Ok(())
}

fn describe(mode: Mode) -> &'static str {
    match mode {
        Mode::Adaptive => "adaptive (heat2d with PCM, IOS agents move ranks)",
        Mode::Static => "static MPI (heat2d-plain, same load, nobody moves anything)",
        Mode::Unloaded => "unloaded (heat2d-plain, no hog): the yardstick",
    }
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

/// Prints the summary; returns whether the run passed its own check, and the typed summary
/// (without the fault act).
fn report(
    summary: &Summary,
    scenario: &Scenario,
    args: &AdaptiveArgs,
) -> Result<(bool, crate::summary::Summary)> {
    let a = &summary.adaptive;
    let mut ok = true;
    let outcomes: Vec<(&Outcome, &str)> = [
        Some((a, args.program.binary())),
        summary.static_run.as_ref().map(|o| (o, "heat2d-plain")),
        summary.unloaded.as_ref().map(|o| (o, "heat2d-plain")),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut typed = crate::summary::Summary::of("main-job", &outcomes);
    typed.limit_s = limit_of(summary, scenario);
    typed.adaptive_over_limit = typed.limit_s.map(|l| a.report.seconds / l);
    println!();
    println!("== summary");
    let mut table = Table::new(&["run", "seconds", "vs unloaded", "checksum"]);
    let unloaded_s = summary.unloaded.as_ref().map(|u| u.report.seconds);
    let ratio = |s: f64| unloaded_s.map_or("-".to_owned(), |u| format!("{:.2}", s / u));
    for o in [
        Some(a),
        summary.static_run.as_ref(),
        summary.unloaded.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        table.push(vec![
            o.mode.name().to_owned(),
            format!("{:.1}", o.report.seconds),
            ratio(o.report.seconds),
            o.report.checksum.clone(),
        ]);
    }
    let limit = typed.limit_s;
    if let Some(limit) = limit {
        table.push(vec![
            "physical limit".to_owned(),
            format!("{limit:.1}"),
            ratio(limit),
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
    if let Some(limit) = limit {
        println!(
            "adaptive / physical limit = {:.3} (target: within 1.10)",
            a.report.seconds / limit
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
    if let (Some(u), Some(o)) = (&summary.unloaded, onset) {
        let target = 0.9 * u.report.iterations as f64 / u.report.seconds;
        let recovered = a.recovered_from(o, target);
        typed.recovered_after_s = recovered.map(|t| t - o);
        match recovered {
            Some(t) => println!(
                "recovered to 90% of the unloaded throughput ({target:.0} it/s in every 2 s window from then on) {:.1} s after load onset",
                t - o
            ),
            None => println!("never recovered to 90% of the unloaded throughput ({target:.0} it/s)"),
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
    let sums: Vec<&str> = [
        Some(a),
        summary.static_run.as_ref(),
        summary.unloaded.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|o| o.report.checksum.as_str())
    .collect();
    if sums.windows(2).all(|w| w[0] == w[1]) {
        println!(
            "RESULT: checksums match bit for bit ({} runs, {} migrations)",
            sums.len(),
            migrations.len()
        );
    } else {
        println!("RESULT: CHECKSUM MISMATCH: {sums:?}");
        ok = false;
    }
    write_timeline(summary, &args.out)?;
    match plot(summary, &args.out.join("throughput")) {
        Ok(written) => println!(
            "plot: {} and {}",
            written.svg.display(),
            written.png.display()
        ),
        Err(e) => {
            println!("plot: FAILED: {e:#}");
            ok = false;
        }
    }
    typed.passed = ok;
    Ok((ok, typed))
}

/// The physical limit: until the idle capacity appears (the join, or the load onset when a
/// cooperating node is there from the start) nobody can do better than the adaptive run
/// itself did; from then on, the best is the unloaded speed on the remaining iterations.
fn limit_of(summary: &Summary, scenario: &Scenario) -> Option<f64> {
    let a = &summary.adaptive;
    summary.unloaded.as_ref().map(|u| {
        let free_from = a
            .first(EventKind::NodeJoin)
            .or(a.first(EventKind::LoadOnset))
            .unwrap_or(0.0);
        let unloaded_rate = u.report.iterations as f64 / u.report.seconds;
        let left = scenario.iters as f64 - a.iteration_at(free_from);
        free_from + left.max(0.0) / unloaded_rate
    })
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
fn plot(summary: &Summary, stem: &Path) -> Result<mpi_ios_plots::Written> {
    use mpi_ios_plots::{Event, EventKind as Kind, TimePlot};
    let window = (summary.adaptive.wall_s / 60.0).clamp(0.25, 2.0);
    let mut plot = TimePlot::new("heat2d on emulated nodes: a node is loaded, an idle one joins")
        .x_label("time since start (s)")
        .y_label("iterations / s");
    for (name, o) in [
        ("MPI/IOS (adaptive)", Some(&summary.adaptive)),
        ("static MPI, same load", summary.static_run.as_ref()),
        ("unloaded", summary.unloaded.as_ref()),
    ] {
        if let Some(o) = o {
            plot = plot.series(name, windowed_rate(&o.progress_points(), window));
        }
    }
    plot = plot.events(summary.adaptive.events.iter().map(|e| {
        let kind = match e.kind {
            EventKind::LoadOnset => Kind::LoadOnset,
            EventKind::NodeJoin => Kind::NodeJoin,
            EventKind::NodeLeave => Kind::NodeLeave,
            EventKind::Migration => Kind::Migration,
        };
        Event::new(e.t, kind, e.what.clone())
    }));
    Ok(plot.write(stem)?)
}

/// The runs' progress and events as CSV, for plotting elsewhere.
fn write_timeline(summary: &Summary, out: &Path) -> Result<()> {
    let mut csv = String::from("run,seconds,iteration,rate,event\n");
    for o in [
        Some(&summary.adaptive),
        summary.static_run.as_ref(),
        summary.unloaded.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        for s in &o.samples {
            csv.push_str(&format!(
                "{},{:.3},{},{:.2},\n",
                o.mode.name(),
                s.t,
                s.iteration,
                s.rate
            ));
        }
        for e in &o.events {
            csv.push_str(&format!(
                "{},{:.3},,,{}\n",
                o.mode.name(),
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

/// Copies the runs' logs (agents, pcmd, jobs) next to the results, best effort.
fn keep_logs(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    let Ok(runs) = std::fs::read_dir(from) else {
        return;
    };
    for run in runs.flatten() {
        let dest = to.join(run.file_name());
        if std::fs::create_dir_all(&dest).is_err() {
            continue;
        }
        let Ok(files) = std::fs::read_dir(run.path()) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name();
            let keep = name
                .to_str()
                .is_some_and(|n| n.ends_with(".err") || n.ends_with(".out") || n.ends_with(".log"));
            if keep {
                let _ = std::fs::copy(f.path(), dest.join(name));
            }
        }
    }
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
