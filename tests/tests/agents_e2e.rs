//! End to end: heat2d on emulated nodes (network namespaces with cgroup CPU caps), IOS agents
//! on the nodes, a CPU hog started on one node; the agents move the slowed rank with no
//! human action, and the result is bit-for-bit the plain run's.
//!
//! Needs root (namespaces, cgroups); skipped with the reason otherwise.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use mpi_ios_tests::cgroup::CpuCap;
use mpi_ios_tests::netns::Cluster;
use mpi_ios_tests::scenario::{EventKind, Line, Mode, Outcome, Scenario};
use mpi_ios_tests::{mpi_lock, MpiJob};

fn usable() -> bool {
    if let Err(why) = Cluster::available() {
        eprintln!("skipped: {why}");
        return false;
    }
    if let Err(why) = mpi_ios_tests::cgroup::available() {
        eprintln!("skipped: {why}");
        return false;
    }
    true
}

fn scenario(joins: Vec<(usize, Duration)>) -> Scenario {
    Scenario {
        // About 10 s unloaded at 0.6 CPU per node.
        rows: 1024,
        cols: 1024,
        iters: 6000,
        report_every: 60,
        placement: vec![0, 1],
        agents_at_start: vec![0, 1],
        hog: Some((1, Duration::from_secs(3))),
        joins,
        agent_options: ["--hold-down", "2", "--profile-period", "1"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
        timeout: Duration::from_secs(240),
    }
}

fn run(cluster: &Cluster, scenario: &Scenario) -> Outcome {
    let dir = tempfile::Builder::new()
        .prefix("ios-e2e-")
        .tempdir()
        .unwrap();
    let outcome = scenario.run(
        cluster,
        Mode::Adaptive,
        dir.path(),
        &mut |line| match line {
            Line::Progress(s) => eprintln!(
                "{:6.1} s {:5} {:8.1} it/s {:?}",
                s.t, s.iteration, s.rate, s.hosts
            ),
            Line::Event(e) => eprintln!("{:6.1} s >>> {}", e.t, e.what),
        },
    );
    for (host, d) in &outcome.decisions {
        eprintln!("agent {host}: {d}");
    }
    // Kept for a look at the agents' logs when asked.
    if std::env::var_os("IOS_E2E_KEEP").is_some() {
        eprintln!("logs kept in {}", dir.keep().display());
    }
    outcome
}

fn plain_checksum(scenario: &Scenario) -> String {
    let args = [
        "--rows".to_owned(),
        scenario.rows.to_string(),
        "--cols".to_owned(),
        scenario.cols.to_string(),
        "--iters".to_owned(),
        scenario.iters.to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    MpiJob::new(2, "heat2d-plain", &args)
        .run(Duration::from_secs(120))
        .report()
        .checksum
}

#[test]
fn an_idle_node_joins_and_the_agents_move_the_loaded_rank_there() {
    if !usable() {
        return;
    }
    let _lock = mpi_lock();
    let cluster = Cluster::with_caps(&[Some(CpuCap::cores(0.6)); 3]).unwrap();
    let scenario = scenario(vec![(2, Duration::from_secs(4))]);
    let outcome = run(&cluster, &scenario);
    let nodes = cluster.host_names();
    let moved: Vec<_> = outcome.migrations().collect();
    assert!(
        moved
            .iter()
            .any(|m| m.what == format!("rank 1 moved {} -> {}", nodes[1], nodes[2])),
        "rank 1 did not move from the loaded node to the joined one: {moved:?}\n{:?}",
        outcome.decisions
    );
    let onset = outcome.first(EventKind::LoadOnset).unwrap();
    eprintln!(
        "first migration {:.1} s after load onset",
        moved[0].t - onset
    );
    assert_eq!(outcome.report.checksum, plain_checksum(&scenario));
}

#[test]
fn without_a_new_node_the_loaded_rank_moves_to_a_cooperating_node() {
    if !usable() {
        return;
    }
    let _lock = mpi_lock();
    // node-a has room for two ranks; node-b gets the hog.
    let cluster =
        Cluster::with_caps(&[Some(CpuCap::cores(1.2)), Some(CpuCap::cores(0.6))]).unwrap();
    let scenario = scenario(Vec::new());
    let outcome = run(&cluster, &scenario);
    let nodes = cluster.host_names();
    let moved: Vec<_> = outcome.migrations().collect();
    assert!(
        moved
            .iter()
            .any(|m| m.what == format!("rank 1 moved {} -> {}", nodes[1], nodes[0])),
        "rank 1 did not move to the cooperating node: {moved:?}\n{:?}",
        outcome.decisions
    );
    assert_eq!(outcome.report.checksum, plain_checksum(&scenario));
}
