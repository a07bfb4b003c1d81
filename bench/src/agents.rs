//! `mpi-ios-bench agents`: the IOS agents' two benchmarks of the agent issue.
//!
//! - Reaction time: heat2d on two emulated nodes (0.6 CPU each) with an idle third node in
//!   the pool from the start; a CPU hog starts on node-b; the time from load onset until the
//!   loaded rank runs elsewhere (PCM's migration event, timestamped when the move is
//!   complete). Target: under 5 s with the default periods. The agents only migrate
//!   (`--no-resize`): heat2d is malleable, and agents that may resize grow it onto the idle
//!   node about 7 s into the run whatever the load (seen in CI and here with the onset at
//!   6 s and at 12 s), which leaves no idle node for the move this measures. What the
//!   agents do with resizes is the malleable act's (`adaptive --malleable`).
//! - Agent CPU use at steady state: each agent's user + system time over the run after its
//!   first two seconds, as a share of one core. Target: at most 0.2%.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use mpi_ios_tests::cgroup::CpuCap;
use mpi_ios_tests::netns::Cluster;
use mpi_ios_tests::scenario::{EventKind, Hog, Line, Mode, Scenario};

use crate::{max, median, min, Table};

/// Options of `agents`.
#[derive(Debug, Args)]
pub struct AgentsArgs {
    /// Repetitions.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Seconds from the start of the job to the load onset.
    #[arg(long, default_value_t = 12.0)]
    pub onset: f64,
    /// Short run: one repetition, onset at 6 s.
    #[arg(long)]
    pub quick: bool,
}

/// Runs the benchmark.
pub fn run(args: AgentsArgs) -> Result<()> {
    if let Err(why) = Cluster::available().and_then(|()| mpi_ios_tests::cgroup::available()) {
        bail!("the agent benchmarks emulate nodes with namespaces and cgroups: {why}");
    }
    let (repeats, onset) = if args.quick {
        (1, 6.0)
    } else {
        (args.repeats.max(1), args.onset.max(3.0))
    };
    let mut scenario = Scenario {
        rows: 1024,
        cols: 1024,
        // Sized below, once the nodes exist.
        iters: 0,
        progress_period: mpi_ios_tests::scenario::PROGRESS_PERIOD,
        placement: vec![0, 1],
        agents_at_start: vec![0, 1, 2],
        hog: Some(Hog::on(1, Duration::from_secs_f64(onset))),
        joins: Vec::new(),
        leaves: Vec::new(),
        // Default periods (profile 1 s, steal 2 s, back-off 2-4 s); only the hold-down
        // (which is also the shortest residence before a move) is shortened below the onset,
        // so the job need not run 30 s before the load starts.
        agent_options: vec![
            "--hold-down".to_owned(),
            format!("{:.1}", onset / 2.0),
            crate::malleable_act::NO_RESIZE.to_owned(),
        ],
        timeout: Duration::from_secs(300),
        unlisted_spares: false,
    };
    println!(
        "== agent benchmarks: heat2d 1024x1024 on node-a and node-b (0.6 CPU each), idle node-c in the pool, CPU hog on node-b at {onset:.0} s, agents that only migrate; {repeats} run(s)"
    );
    let cluster = Cluster::with_caps(&[Some(CpuCap::cores(0.6)); 3])
        .map_err(|e| anyhow::anyhow!("cannot set up the emulated nodes: {e}"))?;
    let dir = tempfile::Builder::new()
        .prefix("mpi-ios-agents-")
        .tempdir()?;
    // The job must outlive the reaction: the onset, then 15 s of unloaded work, measured on
    // these nodes (machines of one kind differ in speed by 4x or more).
    let rate = scenario
        .size_by_time(&cluster, dir.path(), onset + 15.0)
        .map_err(|e| anyhow::anyhow!("cannot size the job: {e}"))?;
    println!("   {rate:.0} it/s unloaded: {} iterations", scenario.iters);
    let mut table = Table::new(&[
        "run",
        "onset -> migrated (s)",
        "moved",
        "agent CPU max (%)",
        "agent CPU mean (%)",
    ]);
    let (mut reactions, mut cpus) = (Vec::new(), Vec::new());
    for rep in 1..=repeats {
        let outcome = scenario.run(
            &cluster,
            Mode::Adaptive,
            &dir.path().join(format!("run-{rep}")),
            &mut |line| {
                if let Line::Event(e) = line {
                    println!("   run {rep}: {:>6.1} s  {}", e.t, e.what);
                }
            },
        );
        let onset_t = outcome.first(EventKind::LoadOnset);
        let first = outcome.migrations().next();
        let reaction = match (onset_t, first) {
            (Some(o), Some(m)) => Some(m.t - o),
            _ => None,
        };
        let agent_cpu: Vec<f64> = outcome
            .agent_cpu
            .iter()
            .map(|a| a.cpu_fraction * 100.0)
            .collect();
        if let Some(r) = reaction {
            reactions.push(r);
        }
        cpus.extend(agent_cpu.iter().copied());
        table.push(vec![
            rep.to_string(),
            reaction.map_or("no migration".to_owned(), |r| format!("{r:.2}")),
            first.map_or("-".to_owned(), |m| m.what.clone()),
            if agent_cpu.is_empty() {
                "-".to_owned()
            } else {
                format!("{:.3}", max(&agent_cpu))
            },
            if agent_cpu.is_empty() {
                "-".to_owned()
            } else {
                format!(
                    "{:.3}",
                    agent_cpu.iter().sum::<f64>() / agent_cpu.len() as f64
                )
            },
        ]);
    }
    print!("{}", table.to_text());
    if reactions.is_empty() {
        println!("load onset -> migration: no run migrated (target: under 5 s)");
    } else {
        println!(
            "load onset -> migration: median {:.2} s (min {:.2}, max {:.2}) over {} run(s); target under 5 s",
            median(&reactions),
            min(&reactions),
            max(&reactions),
            reactions.len()
        );
    }
    if !cpus.is_empty() {
        println!(
            "agent CPU at steady state: median {:.3}% of a core, max {:.3}% over {} agent-runs; target at most 0.2%",
            median(&cpus),
            max(&cpus),
            cpus.len()
        );
    }
    Ok(())
}
