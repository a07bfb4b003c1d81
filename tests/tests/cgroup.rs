//! Emulated nodes with CPU caps (`mpi_ios_tests::cgroup`, `Cluster::with_caps`): the cap
//! holds, everything started on a node (ranks through mpirun, `command_on`, hogs) sits in
//! its cgroup, the IOS agent's sensor inside a node sees the node's cap, a hog on one node
//! slows a synchronized job that has a rank there and moving that rank away recovers, and
//! nothing is left behind.
//!
//! Needs root and writable cgroups (CI runs as root); elsewhere each test prints
//! "skipped: <reason>" and passes. Timings are printed (`--nocapture`) and asserted loosely:
//! the machine has two cores shared with whatever else runs.
#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::path::Path;
use std::time::{Duration, Instant};

use mpi_ios_tests::cgroup::{self, CpuCap, NodeCgroup};
use mpi_ios_tests::netns::Cluster;
use mpi_ios_tests::scenario;
use mpi_ios_tests::{bin, mpi_lock, wait_until, Group, MpiJob, Runtime, RuntimeExt as _};

const DEADLINE: Duration = Duration::from_secs(90);

/// Why caps cannot be tested here, if they cannot.
fn unavailable() -> Option<String> {
    Cluster::available()
        .and_then(|()| cgroup::available())
        .err()
}

/// A cluster with `caps`, or `None` after printing why the test is skipped.
fn cluster(test: &str, caps: &[Option<CpuCap>]) -> Option<Cluster> {
    if let Some(reason) = unavailable() {
        eprintln!("{test}: skipped: {reason}");
        return None;
    }
    Some(Cluster::with_caps(caps).unwrap_or_else(|e| panic!("cannot create the nodes: {e}")))
}

/// Idle CPU time of the whole machine so far (`/proc/stat`, idle + iowait), in seconds.
fn machine_idle() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu: Vec<f64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    (cpu[3] + cpu[4]) / 100.0
}

/// The command name of a process (`/proc/PID/comm`).
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn given_a_half_core_node_then_a_busy_loop_in_it_uses_half_a_core_and_a_new_cap_takes() {
    let Some(cluster) = cluster("half_core_node", &[Some(CpuCap::cores(0.5))]) else {
        return;
    };
    let _lock = mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    let node = cluster.cgroup("node-a").unwrap();
    let hog = cluster.start_hog("node-a", dir.path(), "hog", 1);
    wait_until(Duration::from_secs(5), "the hog in node-a's cgroup", || {
        node.contains(hog.pid())
    });
    std::thread::sleep(Duration::from_millis(300));
    let (periods_before, throttled_before) = node.throttling().unwrap();
    let idle_before = machine_idle();
    let window = Instant::now();
    let used = node.measure_cores(Duration::from_secs(2)).unwrap();
    let spare = (machine_idle() - idle_before) / window.elapsed().as_secs_f64();
    let (periods, throttled) = node.throttling().unwrap();
    let throttled_share =
        (throttled - throttled_before) as f64 / (periods - periods_before).max(1) as f64;
    eprintln!(
        "busy loop in a 0.5-core node: {used:.3} cores over 2 s, throttled in {:.0}% of periods, machine idle {spare:.2} cores",
        throttled_share * 100.0
    );
    assert!(used <= 0.55, "the cap did not hold: {used:.3} cores");
    if spare >= 0.3 {
        // The machine had room: the loop must have had its whole share, and the cap (not
        // the machine) must be what stopped it.
        assert!(used >= 0.45, "the loop got only {used:.3} cores");
        assert!(
            throttled_share > 0.5,
            "throttled in only {throttled_share:.2} of periods"
        );
    } else {
        eprintln!("machine busy (idle {spare:.2} cores): lower bound not checked");
        assert!(used > 0.05, "the loop did not run: {used:.3} cores");
    }
    // A node that turns slower while it runs.
    node.set_cap(CpuCap::cores(0.2)).unwrap();
    assert_eq!(node.read_cap().unwrap(), CpuCap::cores(0.2));
    std::thread::sleep(Duration::from_millis(200));
    let slowed = node.measure_cores(Duration::from_secs(1)).unwrap();
    eprintln!("after set_cap(0.2): {slowed:.3} cores over 1 s");
    assert!(
        slowed <= 0.23,
        "the new cap did not hold: {slowed:.3} cores"
    );
}

#[test]
fn given_capped_nodes_then_ranks_started_by_mpirun_sit_in_their_nodes_cgroups() {
    let caps = [Some(CpuCap::cores(0.6)), Some(CpuCap::cores(0.6)), None];
    let Some(cluster) = cluster("ranks_in_node_cgroups", &caps) else {
        return;
    };
    let _lock = mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    let job = MpiJob::new(
        2,
        "heat2d-plain",
        &["--rows", "64", "--cols", "64", "--iters", "100000000"],
    );
    let mut run = cluster
        .job(job, &["node-a", "node-b"])
        .start(dir.path(), "job");
    let ranks_in = |node: &NodeCgroup| -> Vec<u32> {
        node.pids()
            .into_iter()
            .filter(|&p| comm(p) == "heat2d-plain")
            .collect()
    };
    let (a, b) = (
        cluster.cgroup("node-a").unwrap(),
        cluster.cgroup("node-b").unwrap(),
    );
    wait_until(
        Duration::from_secs(30),
        "a rank in each node's cgroup",
        || {
            assert!(
                run.running(),
                "the job ended early: {}",
                run.stderr_so_far()
            );
            ranks_in(a).len() == 1 && ranks_in(b).len() == 1
        },
    );
    for (host, node) in [("node-a", a), ("node-b", b)] {
        let pids = node.pids();
        let names: Vec<String> = pids.iter().map(|&p| comm(p)).collect();
        eprintln!("{host} cgroup {}: {names:?}", node.name());
        // The launcher's daemon for the node is there too, so nothing of the node escapes.
        // (`comm` is at most 15 characters: hydra_pmi_proxy just fits.)
        let daemon = Runtime::current().node_daemon();
        assert!(
            names.iter().any(|n| n == daemon),
            "no {daemon} in {host}'s cgroup: {names:?}"
        );
        let rank = ranks_in(node)[0];
        let proc_cgroup = std::fs::read_to_string(format!("/proc/{rank}/cgroup")).unwrap();
        assert!(
            proc_cgroup.contains(&format!("/{}\n", node.name())),
            "rank {rank} on {host}: /proc/{rank}/cgroup does not name {}:\n{proc_cgroup}",
            node.name()
        );
    }
    // mpirun itself stays outside the nodes.
    assert!(!a.contains(run.pid()) && !b.contains(run.pid()));
    run.kill();
}

/// Runs `ios-sense` on `host` and returns its JSON sample.
fn sense_on(cluster: &Cluster, host: &str, dir: &Path) -> serde_json::Value {
    sense_with(
        cluster.command_on(host, bin("ios-sense"), ["--period-ms", "300"]),
        host,
        dir,
    )
}

/// Runs an `ios-sense` command on `host` and returns its JSON sample.
fn sense_with(command: std::process::Command, host: &str, dir: &Path) -> serde_json::Value {
    let finished = Group::start(command, dir, &format!("sense-{host}")).wait(DEADLINE);
    assert_eq!(
        finished.code,
        Some(0),
        "ios-sense failed: {}",
        finished.stderr
    );
    let line = finished.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
}

#[test]
fn given_a_node_with_a_cap_then_the_agents_sensor_inside_it_reports_the_cap() {
    let caps = [Some(CpuCap::cores(0.6)), None];
    let Some(cluster) = cluster("sensor_sees_cap", &caps) else {
        return;
    };
    let _lock = mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    let capped = sense_on(&cluster, "node-a", dir.path());
    eprintln!("ios-sense on node-a (0.6 cap): {capped}");
    let cores = capped["sample"]["cores"].as_f64().unwrap();
    assert!((cores - 0.6).abs() < 1e-6, "cores {cores}, want 0.6");
    let scope_dir = capped["sample"]["scope"]["Cgroup"]["dir"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        Path::new(scope_dir),
        cluster.cgroup("node-a").unwrap().cpu_dir(),
        "the sensor did not pick node-a's cgroup: {capped}"
    );
    // The same from beside the node (the agent's place, `daemon_command_on`): the node's
    // cgroup, named to it, is what it senses, though it does not run in it.
    let beside = sense_with(
        cluster.daemon_command_on("node-a", bin("ios-sense"), ["--period-ms", "300"]),
        "node-a",
        dir.path(),
    );
    eprintln!("ios-sense beside node-a: {beside}");
    assert_eq!(beside["sample"]["cores"].as_f64(), Some(0.6), "{beside}");
    assert_eq!(
        beside["sample"]["scope"]["Cgroup"]["dir"].as_str(),
        Some(scope_dir),
        "{beside}"
    );
    let mut daemon = cluster
        .daemon_command_on("node-a", "sleep", ["30"])
        .spawn()
        .unwrap();
    let node_a = cluster.cgroup("node-a").unwrap();
    let daemons_cgroup = format!("/{}-daemons", node_a.name());
    wait_until(Duration::from_secs(5), "the daemon in its cgroup", || {
        std::fs::read_to_string(format!("/proc/{}/cgroup", daemon.id()))
            .is_ok_and(|c| c.lines().any(|l| l.ends_with(&daemons_cgroup)))
    });
    assert!(
        !node_a.contains(daemon.id()),
        "a daemon sits in the node's capped cgroup"
    );
    let _ = daemon.kill();
    let _ = daemon.wait();

    // An uncapped node is the whole machine.
    let free = sense_on(&cluster, "node-b", dir.path());
    eprintln!("ios-sense on node-b (no cap): {free}");
    let machine_cores = std::thread::available_parallelism().unwrap().get() as f64;
    assert_eq!(free["sample"]["cores"].as_f64(), Some(machine_cores));
    assert!(free["sample"]["scope"]["Machine"].is_object(), "{free}");
}

/// Iterations per second of a 512x1024 heat2d on `placement`, measured over 2 s of progress
/// lines: sized by time, so that a slow machine (or a node throttled into lockstep with its
/// neighbour's cgroup period) gives a low rate instead of a run that outlasts its deadline.
fn heat2d_rate(cluster: &Cluster, placement: &[&str], dir: &Path) -> f64 {
    let iters = u32::MAX.to_string();
    let args = [
        "--rows",
        "512",
        "--cols",
        "1024",
        "--iters",
        &iters,
        "--report-every",
        "5",
    ];
    let job = MpiJob::new(placement.len(), "heat2d-plain", &args);
    let run_dir = dir.join(placement.join("+"));
    scenario::measure_rate(cluster, job, placement, &run_dir, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("heat2d on {placement:?}: {e}"))
}

#[test]
fn given_hogs_on_node_b_then_a_rank_there_slows_the_job_and_placing_it_on_idle_c_recovers() {
    // node-a, where rank 0 stays, is not capped: with two capped nodes the job's speed is set
    // by how their period windows overlap, which varies between clusters by more than the
    // hogs' effect (CI once measured the loaded run at 0.61 of idle and the moved one at
    // only 0.71). With rank 0 always running, the job goes at the capped rank's share.
    let caps = [None, Some(CpuCap::cores(0.6)), Some(CpuCap::cores(0.6))];
    let Some(cluster) = cluster("hog_slows_and_moving_recovers", &caps) else {
        return;
    };
    let _lock = mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    // Best of several everywhere: other work on the two cores comes and goes.
    let idle = (0..2)
        .map(|_| heat2d_rate(&cluster, &["node-a", "node-b"], dir.path()))
        .fold(0.0, f64::max);
    // Two busy loops: the rank on node-b keeps a third of the node's cap, not a half. With
    // one hog, CI once measured the loaded run at 1220 it/s and the moved one at only 1581
    // (1.30x).
    let hogs = [
        cluster.start_hog("node-b", dir.path(), "hog-1", 1),
        cluster.start_hog("node-b", dir.path(), "hog-2", 1),
    ];
    // Alternated, so that a burst of other work does not hit one placement only. Three
    // rounds: with a busy loop beside the test, a+c ran at 0.27 - 0.52 of a+b idle.
    let (mut loaded, mut moved) = (0.0_f64, 0.0_f64);
    for _ in 0..3 {
        loaded = loaded.max(heat2d_rate(&cluster, &["node-a", "node-b"], dir.path()));
        moved = moved.max(heat2d_rate(&cluster, &["node-a", "node-c"], dir.path()));
    }
    drop(hogs);
    eprintln!(
        "heat2d 512x1024, node-a uncapped, 0.6-core b and c: a+b idle {idle:.0} it/s, two hogs in b {loaded:.0} it/s ({:.2}x), rank 1 on idle c {moved:.0} it/s ({:.2}x) (best of 2, 3, 3)",
        loaded / idle,
        moved / idle
    );
    // a+c with the hogs in b is an idle placement too (same caps, nothing else in a or c),
    // and it runs between the loaded runs: the best of the five stands for the unloaded
    // rate. The two a+b runs before the hog both came out slow once in CI (939 it/s,
    // where a+c then ran at 1694), which read as a hog that slowed the job 1.29 times.
    let unloaded = idle.max(moved);
    assert!(
        loaded < unloaded / 1.4,
        "the hogs did not slow the job: {loaded:.0} it/s vs {unloaded:.0} it/s unloaded"
    );
    assert!(
        moved > loaded / 0.75,
        "moving the rank to idle node-c did not recover: {moved:.0} it/s vs {loaded:.0} it/s loaded"
    );
}

#[test]
fn given_a_capped_cluster_when_dropped_then_no_cgroup_and_no_namespace_remains() {
    let caps = [Some(CpuCap::cores(0.5)), Some(CpuCap::cores(0.5))];
    let _lock = mpi_lock();
    let made = Instant::now();
    let Some(cluster) = cluster("cleanup", &caps) else {
        return;
    };
    let made = made.elapsed();
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = ["node-a", "node-b"]
        .iter()
        .map(|h| cluster.cgroup(h).unwrap().name().to_string())
        .collect();
    let netns: Vec<String> = cluster.nodes().iter().map(|n| n.netns.clone()).collect();
    // Something still running on a node, started outside any Group that would kill it.
    let mut stray = cluster
        .command_on("node-b", "sleep", ["600"])
        .spawn()
        .unwrap();
    let hog = cluster.start_hog("node-a", dir.path(), "hog", 1);
    wait_until(
        Duration::from_secs(5),
        "both processes in their nodes",
        || {
            cluster.cgroup("node-b").unwrap().contains(stray.id())
                && cluster.cgroup("node-a").unwrap().contains(hog.pid())
        },
    );
    for name in &names {
        assert!(cgroup::existing().contains(name), "{name} was not made");
        let daemons = format!("{name}-daemons");
        assert!(
            cgroup::existing().contains(&daemons),
            "{daemons} was not made"
        );
    }
    std::mem::forget(hog); // as if the test forgot it: the cluster must still clean up
    let dropped = Instant::now();
    drop(cluster);
    eprintln!(
        "2 capped nodes: made in {:.0} ms, removed (with 2 processes to kill) in {:.0} ms",
        made.as_secs_f64() * 1e3,
        dropped.elapsed().as_secs_f64() * 1e3
    );
    let status = stray.wait().unwrap();
    assert!(!status.success(), "the stray process was not killed");
    let left = cgroup::existing();
    for name in &names {
        // The node's cgroup and the one beside it for its daemons.
        assert!(
            !left.iter().any(|l| l.starts_with(name.as_str())),
            "cgroup {name} (or its daemons') is left behind: {left:?}"
        );
    }
    let namespaces = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let namespaces = String::from_utf8_lossy(&namespaces.stdout);
    for ns in &netns {
        assert!(!namespaces.contains(ns.as_str()), "namespace {ns} is left");
    }
}

#[test]
fn given_a_cgroup_left_by_a_killed_test_process_then_the_sweep_removes_it_and_its_processes() {
    if let Err(reason) = cgroup::available() {
        eprintln!("stale_sweep: skipped: {reason}");
        return;
    }
    // A process id that is certainly dead: a child that has exited and been reaped.
    let dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    let mut dead = dead;
    dead.wait().unwrap();
    let name = format!("{}{dead_pid}s0-node-z", cgroup::PREFIX);
    // Tests beside this one sweep when they build clusters; until the orphan is in, such
    // a sweep would remove the half-made cgroup (seen in CI: the orphan was not in it).
    let staging = cgroup::hold_sweeps();
    let node = NodeCgroup::create(&name, CpuCap::cores(0.2)).unwrap();
    let mut orphan = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    node.add_pid(orphan.id()).unwrap();
    assert!(node.contains(orphan.id()));
    // As if the owner had been killed: its NodeCgroup never drops.
    std::mem::forget(node);
    drop(staging);
    cgroup::sweep_stale();
    let status = orphan.wait().unwrap();
    assert!(!status.success(), "the orphan was not killed");
    assert!(
        !cgroup::existing().contains(&name),
        "{name} survived the sweep"
    );
}

#[test]
fn given_an_invalid_name_or_cap_then_creation_fails_naming_it() {
    let e = NodeCgroup::create("mpi-ios-../x", CpuCap::cores(0.5)).unwrap_err();
    assert!(e.to_string().contains("mpi-ios-../x"), "{e}");
    let e = NodeCgroup::create("other-name", CpuCap::cores(0.5)).unwrap_err();
    assert!(e.to_string().contains("other-name"), "{e}");
    let e = CpuCap::try_cores(0.0).unwrap_err();
    assert!(e.to_string().contains('0'), "{e}");
}
