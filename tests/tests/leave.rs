//! A node given back while a job runs on it (NSp2p and NSc2c pools): `ios-agent leave` on a
//! node that runs both ranks of heat2d, on emulated nodes with IOS agents. With MPICH the
//! agents move both ranks to the other nodes, the leave returns once the node holds no process of the job, the
//! owner then kills everything there, and the job ends with the plain run's checksum. With
//! Open MPI 4 the ranks move too, but the node keeps Open MPI's daemon until the job ends, so
//! the leave says so and the agent stays; the job is unharmed either way.
//!
//! A node given back is marked so (`pcm_proto::given_back`, next to its pcmd socket), so
//! that a relaunch does not place ranks there, until its agent joins again.
//!
//! The emulated nodes need root (namespaces, cgroups); skipped with the reason otherwise.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use mpi_ios_tests::cgroup::CpuCap;
use mpi_ios_tests::netns::{emulated_nodes_usable, Cluster};
use mpi_ios_tests::pool::{pool_key, AgentProc, AgentSpec};
use mpi_ios_tests::scenario::{Line, Mode, NodeLeave, Outcome, Scenario};
use mpi_ios_tests::{mpi_lock, Runtime, RuntimeExt as _};

/// Seconds the job should take unloaded with its ranks on two nodes (where the leave sends
/// them, the fastest it runs here): twice what the test needs it to outlive. That is the
/// leave's start, then on MPICH the two moves and the departures (about 5 s on these
/// nodes), on Open MPI the leave's whole wait (the drain cannot finish there), and 5 s for
/// the moves to end. Twice, because a shared machine's speed changes between the sizing run
/// and the test: a fixed 20 s was too short once (2026-11-27, other work on the machine:
/// the job ran 4 times faster than its sizing run and ended before the leave returned).
fn unloaded_seconds(leave: &NodeLeave) -> f64 {
    let drain = match Runtime::current() {
        Runtime::Mpich => Duration::from_secs(5),
        Runtime::OpenMpi => leave.within,
    };
    2.0 * (leave.at + drain + Duration::from_secs(5)).as_secs_f64()
}

/// Both ranks on node-b; agents on node-a, node-b and node-c. The agents' hold-down is
/// longer than the job, so nothing moves unless the node leaves (a leaving node's ranks
/// move however recently they came).
fn scenario(cluster: &Cluster, dir: &std::path::Path, topology: &str) -> Scenario {
    let mut scenario = Scenario {
        rows: 512,
        cols: 512,
        iters: 0,
        progress_period: mpi_ios_tests::scenario::PROGRESS_PERIOD,
        placement: vec![1, 1],
        agents_at_start: vec![0, 1, 2],
        hog: None,
        joins: Vec::new(),
        leaves: vec![NodeLeave {
            node: 1,
            // NSc2c elects its manager first (one member timeout, 5 s).
            at: Duration::from_secs(if topology == "c2c" { 8 } else { 4 }),
            // Open MPI: the drain cannot finish while the job runs; a short wait shows it.
            within: Duration::from_secs(match Runtime::current() {
                Runtime::Mpich => 30,
                Runtime::OpenMpi => 5,
            }),
            after_iteration: None,
        }],
        agent_options: [
            "--hold-down",
            "3600",
            "--profile-period",
            "1",
            "--topology",
            topology,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect(),
        timeout: Duration::from_secs(300),
        unlisted_spares: false,
    };
    // Sized on the placement the drain leads to, the ranks on two nodes: on these capped
    // nodes it runs up to five times faster than both ranks on node-b (Open MPI polls while
    // it waits), and sized on node-b the job ended 4 s after the moves, before the leave's
    // 5 s wait on Open MPI was over (2026-11-27).
    scenario.placement = vec![0, 2];
    let seconds = unloaded_seconds(&scenario.leaves[0]);
    let rate = scenario.size_by_time(cluster, dir, seconds).unwrap();
    scenario.placement = vec![1, 1];
    eprintln!(
        "unloaded: {rate:.0} it/s on these nodes, so {} iterations for {seconds:.0} s",
        scenario.iters
    );
    scenario
}

fn run(cluster: &Cluster, scenario: &Scenario, dir: &std::path::Path) -> Outcome {
    let outcome = scenario.run(cluster, Mode::Adaptive, dir, &mut |line| match line {
        Line::Progress(s) => eprintln!(
            "{:6.1} s {:6} {:8.1} it/s {:?}",
            s.t, s.iteration, s.rate, s.hosts
        ),
        Line::Event(e) => eprintln!("{:6.1} s >>> {}", e.t, e.what),
    });
    for (host, d) in &outcome.decisions {
        eprintln!("agent {host}: {}", d.what);
    }
    for l in &outcome.leaves {
        eprintln!(
            "leave of {} asked at {:.1} s, returned at {:.1} s (success: {}), processes there then: {:?}\n{}",
            l.host, l.asked_at, l.returned_at, l.success, l.processes_left, l.output
        );
    }
    outcome
}

#[test]
fn a_node_running_two_ranks_leaves_and_the_job_survives_its_owner_killing_everything_there() {
    leave_and_kill("p2p");
}

#[test]
fn in_a_c2c_pool_a_node_running_two_ranks_leaves_and_the_job_survives_the_kill() {
    leave_and_kill("c2c");
}

/// The test of the two topologies.
fn leave_and_kill(topology: &str) {
    if !emulated_nodes_usable() {
        return;
    }
    let _lock = mpi_lock();
    let cluster = Cluster::with_caps(&[Some(CpuCap::cores(0.6)); 3]).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("ios-leave-")
        .tempdir()
        .unwrap();
    let scenario = scenario(&cluster, dir.path(), topology);
    let outcome = run(&cluster, &scenario, dir.path());
    let [leave] = outcome.leaves.as_slice() else {
        panic!(
            "the leave did not return before the job ended: {:?}",
            outcome.leaves
        );
    };
    // Whatever happened, the result is the one asked for.
    assert_eq!(
        outcome.report.checksum,
        scenario.plain_checksum(Duration::from_secs(300))
    );
    match Runtime::current() {
        Runtime::Mpich => {
            assert!(leave.success, "{}", leave.output);
            assert!(
                leave.output.contains("no process of any job is left"),
                "{}",
                leave.output
            );
            // The agent and the pcmd it started are on their way out; nothing of the job.
            let job: Vec<&String> = leave
                .processes_left
                .iter()
                .filter(|p| !p.ends_with(" ios-agent") && !p.ends_with(" pcmd"))
                .collect();
            assert!(
                job.is_empty(),
                "node-b still ran {job:?} when the leave returned"
            );
            // Given back: marked so next to its pcmd socket, for a relaunch to skip it.
            let socket =
                AgentSpec::pcmd_socket_in(&dir.path().join(Mode::Adaptive.name()), "node-b");
            let mark = pcm_proto::given_back::read(&socket).unwrap();
            let mark =
                mark.unwrap_or_else(|| panic!("no given-back mark next to {}", socket.display()));
            assert_eq!(
                (mark.host.as_str(), mark.by.as_str()),
                ("node-b", "ios-agent leave")
            );
            let hosts = outcome.report.hosts.clone().unwrap();
            assert!(
                !hosts.iter().any(|h| h == "node-b"),
                "a rank ended on node-b: {hosts:?}"
            );
            assert_eq!(outcome.migrations().count(), 2, "{:?}", outcome.events);
            // Bounded: two moves and the departures.
            assert!(
                leave.returned_at - leave.asked_at < 30.0,
                "the leave took {:.1} s",
                leave.returned_at - leave.asked_at
            );
        }
        Runtime::OpenMpi => {
            // The ranks move, but Open MPI keeps its daemon (and may keep a departed
            // process) on the node until the job ends: the node cannot be given back, and
            // the leave says why instead of returning while job processes still run there.
            assert!(!leave.success, "{}", leave.output);
            assert_eq!(outcome.migrations().count(), 2, "{:?}", outcome.events);
            assert!(
                leave.output.contains("2 moved") && leave.output.contains("Open MPI 4"),
                "{}",
                leave.output
            );
            assert!(
                leave.processes_left.iter().any(|p| p.ends_with(" orted")),
                "{:?}",
                leave.processes_left
            );
        }
    }
}

/// The given-back mark on loopback (no job, no root): an agent that leaves marks its node
/// next to its pcmd socket before it stops, the same agent joining again removes the mark,
/// and a stop signal's drain marks the node too.
#[test]
fn a_node_given_back_is_marked_next_to_its_pcmd_socket_until_its_agent_joins_again() {
    let dir = tempfile::Builder::new()
        .prefix("ios-given-back-")
        .tempdir()
        .unwrap();
    let key = pool_key(dir.path(), "pool.key");
    let spec = AgentSpec::local(dir.path(), "na", &key, &[]);
    let path = pcm_proto::given_back::path_for(&spec.pcmd_socket);
    let agent = AgentProc::local(dir.path(), spec.clone());
    assert_eq!(spec.given_back(), None);
    let log = agent.leave(Duration::from_secs(15));
    let mark = spec
        .given_back()
        .unwrap_or_else(|| panic!("no mark at {}:\n{log}", path.display()));
    assert_eq!(
        (mark.host.as_str(), mark.by.as_str()),
        ("na", "ios-agent leave")
    );
    assert!(
        log.contains(&path.display().to_string()),
        "the mark's path is logged:\n{log}"
    );

    // Offered again.
    let mut agent = AgentProc::local(dir.path(), spec.clone());
    assert_eq!(spec.given_back(), None);
    assert!(
        agent.group.stderr_so_far().contains("removed the mark"),
        "{}",
        agent.group.stderr_so_far()
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.group.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let t0 = Instant::now();
    while agent.group.running() {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "still running 15 s after SIGTERM:\n{}",
            agent.group.stderr_so_far()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mark = spec.given_back().unwrap();
    assert_eq!(
        (mark.host.as_str(), mark.by.as_str()),
        ("na", "SIGTERM drain")
    );
}
