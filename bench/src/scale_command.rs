//! `mpi-ios-bench scale`, the command: its options, the configurations they make, the
//! runs (one seed, or many side by side through [`crate::scale_seeds`]), the tables and the
//! plots. The simulated pools and one run of them are [`crate::scale`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use crate::scale::{
    fidelity, placement_table, table, targets, Network, Outcome, Pool, Strategy, MALLEABLE_MOST,
    SCALE_MAX_PEERS,
};
use crate::scale_seeds::{parse_seeds, Seeds};

/// Options of `scale`.
#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// Pool sizes.
    #[arg(long, value_delimiter = ',', default_values_t = [100usize, 1000, 10000])]
    pub nodes: Vec<usize>,
    /// Simulated minutes per configuration.
    #[arg(long, default_value_t = 60)]
    pub minutes: u64,
    /// Seed of the pool and of the agents.
    #[arg(long, default_value_t = 1, conflicts_with = "seeds")]
    pub seed: u64,
    /// Many seeds instead of one: a list and ranges, `1-32` or `1,4,7-9`. Every
    /// configuration runs once per seed, `--jobs` at a time, and the output is a table of
    /// each strategy's ratio to the oracle per seed, a summary per configuration (mean,
    /// median, lowest seed, seeds under 0.90, the first ten minutes) and the targets over
    /// the seeds, and OUT/scale.summary.json holds the summary and each seed's figures,
    /// typed. The plots are the first seed's.
    #[arg(long, value_parser = parse_seeds)]
    pub seeds: Option<Seeds>,
    /// Simulations run side by side with --seeds, one thread each (default: the machine's
    /// cores). Each run's CPU seconds stay its own; the peak RSS is the process's.
    #[arg(long, value_parser = at_least_one)]
    pub jobs: Option<usize>,
    /// Strategies to run: nsp2p and nsc2c (the agents' two protocols, default settings);
    /// nsp2p-nogather (NSp2p without partner steals), nsp2p-nocomm (NSp2p without its ranks'
    /// partners: no communication term, no partner steals), nsp2p-paper (NSp2p with the
    /// paper's model); random (random work stealing, default model), random-paper (the
    /// same with the paper's model); none (nothing moves); oracle (a central placer that
    /// sees every node); nsp2p-noresize (NSp2p that only migrates, with --malleable);
    /// nsp2p-holddown (NSp2p whose ranks take no step of gathering within their hold-down,
    /// the default before 2026-12-04: every entity moves at most once per hold-down).
    /// Default: all but nsp2p-noresize; with --malleable: nsp2p, nsp2p-noresize, nsc2c,
    /// random, none, oracle.
    #[arg(long, value_delimiter = ',')]
    pub strategies: Option<Vec<String>>,
    /// Largest pool NSc2c runs on.
    #[arg(long, default_value_t = 1000)]
    pub c2c_max_nodes: usize,
    /// Networks (internet, grid).
    #[arg(long, value_delimiter = ',', default_values_t = ["internet".to_owned(), "grid".to_owned()])]
    pub networks: Vec<String>,
    /// Where the plots go.
    #[arg(long, default_value = "results/scale")]
    pub out: PathBuf,
    /// Short run (the one CI makes): 100 nodes, 20 simulated minutes, every strategy on
    /// both networks.
    #[arg(long)]
    pub quick: bool,
    /// Count a rank in its node's load only while it computes, as the real agents' sampler
    /// does; by default every rank counts as one runnable thread.
    #[arg(long)]
    pub waiting_as_idle: bool,
    /// Model a PCM that carries out one move request per status check: a move asked for
    /// while its job is already moving waits for the moves before it, then stops the job
    /// once more on its own. By default, as PCM does, it joins the job's next
    /// reconfiguration, which carries out every request held at that check. In both, a
    /// move fails at once (busy) while the daemon of the node it leaves has a request of
    /// the job in flight.
    #[arg(long)]
    pub one_request_per_reconfiguration: bool,
    /// Model a PCM that refuses a move asked for while its job is already moving: the
    /// request fails when the move under way ends, and nothing moves.
    #[arg(long, conflicts_with = "one_request_per_reconfiguration")]
    pub refused_while_moving: bool,
    /// Peers each agent keeps in its table (the real agents' default is 256): a larger
    /// table finds more givers and partners, and costs the simulator time and memory.
    #[arg(long, default_value_t = SCALE_MAX_PEERS, value_parser = at_least_one)]
    pub max_peers: usize,
    /// Print, every 10 simulated minutes, where each job runs and what its iteration spends
    /// (its slowest rank's compute, its exchanges' latency), with each node's cores and
    /// speed: to find where a strategy loses against the oracle. Best with one --seed and
    /// a few --strategies. The simulated agents' own log goes to stderr when RUST_LOG asks
    /// for it (e.g. RUST_LOG=ios_agent_core=debug: each steal, refusal and move, named by
    /// node; millions of lines at trace).
    #[arg(long)]
    pub trace_jobs: bool,
    /// Only the fidelity check: the emulated-node scenarios of Figures 13/14, 15 and 16
    /// replayed in the simulator, against the measured runs.
    #[arg(long)]
    pub fidelity: bool,
    /// Also run every configuration with a share of the jobs malleable (limits 1 to twice
    /// their width, any width): each strategy's throughput against the oracle with and
    /// without them, resizes per malleable job and hour, resize ping-pongs; NSp2p also
    /// without resizes (nsp2p-noresize). Plots of the malleable runs go to OUT/malleable.
    #[arg(long)]
    pub malleable: bool,
    /// Share of the jobs that are malleable with --malleable.
    #[arg(long, default_value_t = 0.5, requires = "malleable", value_parser = share)]
    pub malleable_share: f64,
}

/// The strategies run by default.
const DEFAULT_STRATEGIES: [&str; 9] = [
    "nsp2p",
    "nsp2p-nogather",
    "nsp2p-nocomm",
    "nsp2p-paper",
    "nsc2c",
    "random",
    "random-paper",
    "none",
    "oracle",
];

/// The strategies run by default with --malleable.
const MALLEABLE_STRATEGIES: [&str; 6] = [
    "nsp2p",
    "nsp2p-noresize",
    "nsc2c",
    "random",
    "none",
    "oracle",
];

/// A share in (0, 1].
fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        Ok(v) => Err(format!("{v} is not a share in (0, 1]")),
        Err(e) => Err(format!("not a number: {e}")),
    }
}

/// A count of at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a count: {e}")),
    }
}

/// Runs the experiment.
pub fn run(args: ScaleArgs) -> Result<()> {
    if args.fidelity {
        fidelity();
        return Ok(());
    }
    let (sizes, minutes) = if args.quick {
        (vec![100], 20)
    } else {
        (args.nodes.clone(), args.minutes.max(1))
    };
    let names: Vec<String> = match &args.strategies {
        Some(s) => s.clone(),
        None if args.malleable => MALLEABLE_STRATEGIES.map(str::to_owned).to_vec(),
        None => DEFAULT_STRATEGIES.map(str::to_owned).to_vec(),
    };
    let strategies: Vec<Strategy> = names
        .iter()
        .map(|s| Strategy::parse(s).with_context(|| format!("unknown strategy {s:?}")))
        .collect::<Result<_>>()?;
    let networks: Vec<Network> = args
        .networks
        .iter()
        .map(|s| match s.to_ascii_lowercase().as_str() {
            "internet" => Ok(Network::Internet),
            "grid" => Ok(Network::Grid),
            _ => anyhow::bail!("unknown network {s:?} (internet, grid)"),
        })
        .collect::<Result<_>>()?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let seeds = args
        .seeds
        .as_ref()
        .map_or_else(|| vec![args.seed], |s| s.0.clone());
    // Without malleable jobs, and with --malleable also with them.
    let shares: Vec<f64> = if args.malleable {
        vec![0.0, args.malleable_share]
    } else {
        vec![0.0]
    };
    let mut configs = Vec::new();
    for &seed in &seeds {
        for &nodes in &sizes {
            for &network in &networks {
                for &malleable_share in &shares {
                    let pool = Pool {
                        nodes,
                        network,
                        seed,
                        length: Duration::from_secs(minutes * 60),
                        waiting_as_idle: args.waiting_as_idle,
                        one_request_per_reconfiguration: args.one_request_per_reconfiguration,
                        refused_while_moving: args.refused_while_moving,
                        max_peers: args.max_peers,
                        malleable_share,
                        trace_jobs: args.trace_jobs,
                    };
                    for &s in &strategies {
                        if s == Strategy::NsC2c && nodes > args.c2c_max_nodes {
                            if seed == seeds[0] && malleable_share == 0.0 {
                                eprintln!(
                                    "scale: NSc2c skipped at {nodes} nodes (--c2c-max-nodes)"
                                );
                            }
                            continue;
                        }
                        // Without malleable jobs, NSp2p without resizes is NSp2p.
                        if s == Strategy::NsP2pNoResize && args.malleable && malleable_share == 0.0
                        {
                            continue;
                        }
                        configs.push((pool, s));
                    }
                }
            }
        }
    }
    // One seed: one run at a time, so that each run's wall time and peak RSS are its own
    // (the 10,000-node targets are about them).
    let jobs = match (&args.seeds, args.jobs) {
        (_, Some(j)) => j,
        (Some(s), None) if s.0.len() > 1 => {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        }
        _ => 1,
    };
    let outcomes = crate::scale_seeds::run_all(&configs, jobs, report_run);
    if args.malleable {
        println!(
            "With and without malleable jobs ({:.0}% of the jobs, limits 1 to {MALLEABLE_MOST}x their width), against the oracle of the same workload:",
            args.malleable_share * 100.0
        );
        println!(
            "{}",
            crate::scale_seeds::malleable_table(&outcomes).to_text()
        );
        for line in crate::scale_seeds::malleable_targets(&outcomes) {
            println!("{line}");
        }
    }
    if seeds.len() > 1 {
        println!("Throughput relative to the oracle on the same pool, per seed:");
        println!(
            "{}",
            crate::scale_seeds::per_seed_table(&outcomes).to_text()
        );
        println!("Over the seeds:");
        println!("{}", crate::scale_seeds::summary_table(&outcomes).to_text());
        let random = crate::scale_seeds::random_table(&outcomes);
        if !random.rows.is_empty() {
            println!("Against random stealing, hypercube and sparse jobs:");
            println!("{}", random.to_text());
        }
        for line in crate::scale_seeds::targets(&outcomes) {
            println!("{line}");
        }
        let path = args.out.join(crate::scale_seeds::SUMMARY_FILE);
        let summary = crate::scale_seeds::summary(&outcomes);
        std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        let first: Vec<Outcome> = outcomes
            .into_iter()
            .filter(|o| o.seed == seeds[0])
            .collect();
        return plot_workloads(&args.out, &first);
    }
    let t = table(&outcomes);
    println!("{}", t.to_text());
    println!("At the end of each run, averaged over jobs:");
    println!("{}", placement_table(&outcomes).to_text());
    for line in targets(&outcomes) {
        println!("{line}");
    }
    plot_workloads(&args.out, &outcomes)?;
    Ok(())
}

/// The plots of the runs without malleable jobs in `out`, and of those with malleable
/// jobs, if any, in `out/malleable`.
fn plot_workloads(out: &std::path::Path, outcomes: &[Outcome]) -> Result<()> {
    let (malleable, fixed): (Vec<Outcome>, Vec<Outcome>) = outcomes
        .iter()
        .cloned()
        .partition(|o| o.malleable_share > 0.0);
    plots(out, &fixed)?;
    if !malleable.is_empty() {
        let dir = out.join("malleable");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        plots(&dir, &malleable)?;
    }
    Ok(())
}

/// One finished run, on stderr with exact figures (iterations to 1e-3, bytes, messages by
/// kind): two runs of one seed must print the same line, whatever changed in the
/// simulator's speed.
fn report_run(o: &Outcome, n: usize, total: usize) {
    let kinds: Vec<String> = o
        .by_kind
        .iter()
        .map(|(k, n, b)| format!("{k} {n} ({b} B)"))
        .collect();
    eprintln!(
        "scale: [{n}/{total}] seed {} {} {} nodes {}{}: {:.3} iterations (hypercube {:.3}, tree {:.3}, sparse {:.3}, stencil {:.3}), {} migrations, {} messages, {} bytes, wall {:.1} s, cpu {:.1} s; by kind: {}",
        o.seed,
        o.network.name(),
        o.nodes,
        o.strategy.name(),
        if o.malleable_share > 0.0 {
            format!(
                " ({:.0}% malleable: {} grows, {} shrinks, {} refused, {} resize ping-pongs, {} within two hold-downs)",
                o.malleable_share * 100.0,
                o.grows,
                o.shrinks,
                o.resizes_refused,
                o.resize_ping_pongs,
                o.resize_reversals
            )
        } else {
            String::new()
        },
        o.iterations,
        o.by_pattern[0],
        o.by_pattern[1],
        o.by_pattern[2],
        o.by_pattern[3],
        o.migrations,
        o.messages,
        o.bytes,
        o.wall,
        o.cpu,
        kinds.join(", ")
    );
}

/// Figures 6 and 7 in the paper's style (hypercube and tree throughput over time, per
/// strategy, Internet and Grid, on the largest pool), and messages per node per second
/// against the pool size.
fn plots(out: &std::path::Path, outcomes: &[Outcome]) -> Result<()> {
    let Some(largest) = outcomes.iter().map(|o| o.nodes).max() else {
        return Ok(());
    };
    for (k, (fig, pattern)) in [("fig6", "hypercube"), ("fig7", "tree")]
        .into_iter()
        .enumerate()
    {
        for network in [Network::Internet, Network::Grid] {
            let mut plot = mpi_ios_plots::TimePlot::new(format!(
                "{pattern} jobs, {}-like network, {largest} nodes",
                network.name()
            ))
            .x_label("time (min)")
            .y_label("iterations / s (all jobs of the pattern)");
            let mut any = false;
            for o in outcomes
                .iter()
                .filter(|o| o.nodes == largest && o.network == network)
            {
                any = true;
                let points = o
                    .series
                    .iter()
                    .enumerate()
                    .map(|(m, v)| (m as f64 + 1.0, v[k]))
                    .collect();
                plot = plot.series(o.strategy.name(), points);
            }
            if any {
                let stem = out.join(format!("{fig}-{}", network.name().to_lowercase()));
                plot.write(&stem)
                    .with_context(|| format!("writing {}", stem.display()))?;
            }
        }
    }
    let mut plot = mpi_ios_plots::TimePlot::new("protocol messages per node and second")
        .x_label("nodes (log10)")
        .y_label("messages / node / s");
    let mut any = false;
    for s in [
        Strategy::NsP2p,
        Strategy::NsP2pNoGather,
        Strategy::NsP2pNoComm,
        Strategy::Paper,
        Strategy::NsC2c,
        Strategy::Random,
        Strategy::RandomPaper,
        Strategy::NsP2pNoResize,
        Strategy::NsP2pHoldDown,
    ] {
        for network in [Network::Internet, Network::Grid] {
            let mut points: Vec<(f64, f64)> = outcomes
                .iter()
                .filter(|o| o.strategy == s && o.network == network)
                .map(|o| ((o.nodes as f64).log10(), o.messages_per_node_second()))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !points.is_empty() {
                any = true;
                plot = plot.series(format!("{} {}", s.name(), network.name()), points);
            }
        }
    }
    if any {
        plot.write(out.join("messages-per-node"))
            .context("writing the messages plot")?;
    }
    Ok(())
}
