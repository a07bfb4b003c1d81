//! End to end: heat2d on emulated nodes (network namespaces with cgroup CPU caps), IOS agents
//! on the nodes, a CPU hog started on one node; the agents move the slowed rank with no
//! human action, and the result is bit-for-bit the plain run's.
//!
//! Needs root (namespaces, cgroups); skipped with the reason otherwise.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use mpi_ios_tests::cgroup::CpuCap;
use mpi_ios_tests::netns::{emulated_nodes_usable, test_node_cap, Cluster};
use mpi_ios_tests::scenario::{EventKind, Hog, Line, Mode, Move, Outcome, Scenario};
use mpi_ios_tests::{mpi_lock, Runtime, RuntimeExt as _};

/// Seconds the job would take unloaded: it must outlive the hog (at 3 s), the join (at 4 s),
/// the agents' reaction (about 2 s) and the move, with room to spare.
const UNLOADED_SECONDS: f64 = 10.0;

/// The scenario, its length measured on `cluster` ([`Scenario::size_by_time`]), not assumed:
/// once per test binary for each kind of cluster (`nodes` names it), so that the two tests
/// on one kind run the same job and share its plain run ([`Scenario::plain_checksum`]).
fn scenario(
    cluster: &Cluster,
    dir: &std::path::Path,
    joins: Vec<(usize, Duration)>,
    nodes: &'static str,
) -> Scenario {
    let mut scenario = Scenario {
        rows: 1024,
        cols: 1024,
        iters: 0,
        progress_period: mpi_ios_tests::scenario::PROGRESS_PERIOD,
        placement: vec![0, 1],
        agents_at_start: vec![0, 1],
        hog: Some(Hog::on(1, Duration::from_secs(3))),
        joins,
        leaves: Vec::new(),
        agent_options: ["--hold-down", "2", "--profile-period", "1"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
        timeout: Duration::from_secs(240),
        unlisted_spares: false,
    };
    scenario
        .size_by_time_once(cluster, dir, UNLOADED_SECONDS, nodes)
        .unwrap();
    scenario
}

fn run(cluster: &Cluster, scenario: &Scenario, dir: tempfile::TempDir) -> Outcome {
    run_program(cluster, scenario, "heat2d", dir)
}

/// [`run`] with `program` as the PCM job (heat2d or the C heat2d-c).
fn run_program(
    cluster: &Cluster,
    scenario: &Scenario,
    program: &str,
    dir: tempfile::TempDir,
) -> Outcome {
    let outcome =
        scenario.run_program(
            cluster,
            Mode::Adaptive,
            program,
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
        eprintln!("agent {host}: {}", d.what);
    }
    // Kept for a look at the agents' logs when asked.
    if std::env::var_os("IOS_E2E_KEEP").is_some() {
        eprintln!("logs kept in {}", dir.keep().display());
    }
    outcome
}

/// Where each rank ran at the end, from heat2d's report.
fn final_hosts(outcome: &Outcome) -> Vec<String> {
    outcome
        .report
        .hosts
        .clone()
        .expect("heat2d's report names the ranks' hosts")
}

fn logs() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ios-e2e-")
        .tempdir()
        .unwrap()
}

#[test]
fn an_idle_node_joins_and_the_agents_move_the_loaded_rank_there() {
    if !emulated_nodes_usable() {
        return;
    }
    an_idle_node_joins(false);
}

/// On MPICH a node the launch did not list can receive a rank too (`PCM_ALLOW_NEW_HOSTS`).
#[test]
fn a_node_outside_the_launch_list_joins_and_the_agents_move_the_loaded_rank_there() {
    if !emulated_nodes_usable() {
        return;
    }
    if Runtime::current() != Runtime::Mpich {
        eprintln!(
            "skipped: needs MPICH (hydra), built for {:?}: Open MPI 4 cannot spawn outside its allocation",
            Runtime::current()
        );
        return;
    }
    an_idle_node_joins(true);
}

/// node-c's agent joins after the start, while node-b is loaded; `unlisted`: node-c is not
/// in the launch's host list.
fn an_idle_node_joins(unlisted: bool) {
    let _lock = mpi_lock();
    let cluster = Cluster::with_caps(&[Some(CpuCap::cores(test_node_cap())); 3]).unwrap();
    let dir = logs();
    let joins = vec![(2, Duration::from_secs(4))];
    let mut scenario = scenario(&cluster, dir.path(), joins, "three capped nodes");
    scenario.unlisted_spares = unlisted;
    let outcome = run(&cluster, &scenario, dir);
    let nodes = cluster.host_names();
    let moved: Vec<_> = outcome.migrations().collect();
    // Which rank goes where is the model's choice (with large caps node-a has room too, and
    // the agents may first move the loaded rank there and then spread out to node-c); what
    // the scenario demands is that the loaded node is left and the idle newcomer gets work.
    let hosts = final_hosts(&outcome);
    assert!(
        !hosts.contains(&nodes[1]) && hosts.contains(&nodes[2]),
        "the loaded {} still runs a rank or the joined {} none at the end: {hosts:?}\n\
         migrations {moved:?}\n{:?}",
        nodes[1],
        nodes[2],
        outcome.decisions
    );
    let onset = outcome.first(EventKind::LoadOnset).unwrap();
    if let Some(first) = moved.first() {
        eprintln!("first migration {:.1} s after load onset", first.t - onset);
    }
    assert_eq!(
        outcome.report.checksum,
        scenario.plain_checksum(Duration::from_secs(120))
    );
}

#[test]
fn without_a_new_node_the_loaded_rank_moves_to_a_cooperating_node() {
    if !emulated_nodes_usable() {
        return;
    }
    loaded_rank_moves_to_a_cooperating_node("heat2d");
}

/// The same with the C heat2d (PCM through the C interface): the scenario follows PCM's
/// events, not the program's output, so any PCM program runs in it.
#[test]
fn the_c_heat2d_runs_the_adaptive_scenario_too() {
    if !emulated_nodes_usable() {
        return;
    }
    loaded_rank_moves_to_a_cooperating_node("heat2d-c");
}

fn loaded_rank_moves_to_a_cooperating_node(program: &str) {
    let _lock = mpi_lock();
    // node-a has room for two ranks; node-b gets the hog.
    let cap = test_node_cap();
    let cluster =
        Cluster::with_caps(&[Some(CpuCap::cores(2.0 * cap)), Some(CpuCap::cores(cap))]).unwrap();
    let dir = logs();
    let scenario = scenario(
        &cluster,
        dir.path(),
        Vec::new(),
        "a double node and a capped one",
    );
    let outcome = run_program(&cluster, &scenario, program, dir);
    assert!(
        outcome.loop_start.is_some() && outcome.samples.len() >= 2,
        "{program}: no loop start or progress events"
    );
    let nodes = cluster.host_names();
    let moved: Vec<_> = outcome.migrations().collect();
    assert!(
        moved.iter().any(|m| m.moved
            == Some(Move {
                rank: 1,
                from: nodes[1].clone(),
                to: nodes[0].clone(),
            })),
        "rank 1 did not move to the cooperating node: {moved:?}\n{:?}",
        outcome.decisions
    );
    assert_eq!(
        final_hosts(&outcome),
        [nodes[0].as_str(), nodes[0].as_str()],
        "both ranks must end on the cooperating node"
    );
    assert_eq!(
        outcome.report.checksum,
        scenario.plain_checksum(Duration::from_secs(120))
    );
}
