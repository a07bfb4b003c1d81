//! Real processes on loopback: `peer-server` and `ios-net-node` started, killed and read
//! through their JSON lines. Needs the binaries built first (`cargo build --release --bins`,
//! as `scripts/test.sh` does); every process is killed when its test ends.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mpi_ios_tests::{bin, Group};
use serde_json::Value;

const NODE: &str = env!("CARGO_BIN_EXE_ios-net-node");

/// Every JSON line the process printed so far.
fn lines(g: &Group) -> Vec<Value> {
    std::fs::read_to_string(&g.stdout)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits for a line that `f` accepts, at most `timeout`; panics with the output.
fn wait_line(g: &Group, timeout: Duration, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = lines(g).into_iter().find(|v| f(v)) {
            return v;
        }
        if Instant::now() > deadline {
            panic!(
                "no {what} within {timeout:?} from {}\n--- stdout\n{}\n--- stderr\n{}",
                g.what,
                std::fs::read_to_string(&g.stdout).unwrap_or_default(),
                g.stderr_so_far()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn event<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    (v["event"] == name).then_some(v)
}

fn new_key(dir: &Path, name: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    let out = Command::new(NODE)
        .arg("--new-pool-key")
        .arg(&path)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{out:?}");
    path
}

/// Starts a peer server; returns it and its address (with /p2p/).
fn server(dir: &Path, key: &Path, label: &str) -> (Group, String) {
    let mut cmd = Command::new(bin("peer-server"));
    cmd.args([
        "--listen",
        "/ip4/127.0.0.1/tcp/0",
        "--min-ttl",
        "2",
        "--pool-key",
    ])
    .arg(key)
    .arg("--state-dir")
    .arg(dir.join(format!("{label}.state")));
    let g = Group::start(cmd, dir, label);
    let v = wait_line(&g, Duration::from_secs(10), "listening line", |v| {
        v["event"] == "listening"
    });
    let addr = v["addrs"][0].as_str().expect("an address").to_owned();
    (g, addr)
}

/// Starts a node; returns it and its peer id.
fn node(dir: &Path, key: &Path, servers: &[&str], extra: &[&str], label: &str) -> (Group, String) {
    let mut cmd = Command::new(NODE);
    cmd.arg("--pool-key").arg(key);
    for s in servers {
        cmd.args(["--peer-server", s]);
    }
    cmd.args(extra);
    let g = Group::start(cmd, dir, label);
    let v = wait_line(&g, Duration::from_secs(10), "started line", |v| {
        v["event"] == "started"
    });
    let id = v["peer_id"].as_str().expect("peer id").to_owned();
    (g, id)
}

fn has_peer_up(g: &Group, peer: &str) -> bool {
    lines(g)
        .iter()
        .any(|v| event(v, "peer_up").is_some_and(|v| v["peer"] == peer))
}

fn rtts_us(g: &Group) -> Vec<u64> {
    lines(g)
        .iter()
        .filter_map(|v| event(v, "peer_rtt").and_then(|v| v["rtt_us"].as_u64()))
        .collect()
}

fn wait_mesh(nodes: &[(Group, String)], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    for (g, me) in nodes {
        for (_, other) in nodes {
            if other == me {
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            wait_line(g, left, &format!("peer_up of {other}"), |v| {
                event(v, "peer_up").is_some_and(|v| v["peer"] == other.as_str())
            });
        }
    }
}

#[test]
fn given_a_peer_server_then_three_nodes_find_each_other_and_measure_rtts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = new_key(dir.path(), "pool.key");
    let (_s, addr) = server(dir.path(), &key, "server");
    let started = Instant::now();
    let nodes: Vec<(Group, String)> = (0..3)
        .map(|i| node(dir.path(), &key, &[&addr], &[], &format!("node{i}")))
        .collect();
    wait_mesh(&nodes, Duration::from_secs(10));
    let discovered = started.elapsed();
    // A few pings each.
    std::thread::sleep(Duration::from_millis(2500));
    let mut rtts: Vec<u64> = nodes.iter().flat_map(|(g, _)| rtts_us(g)).collect();
    rtts.sort_unstable();
    assert!(rtts.len() >= 6, "{rtts:?}");
    let median = rtts[rtts.len() / 2];
    eprintln!(
        "3 nodes started and fully connected in {discovered:?}; loopback rtt median {median} us, \
         min {} us, max {} us over {} samples",
        rtts[0],
        rtts[rtts.len() - 1],
        rtts.len()
    );
    assert!(median < 10_000, "loopback rtt {median} us is not local");
    assert!(discovered < Duration::from_secs(5), "{discovered:?}");
}

#[test]
fn given_a_killed_node_then_the_others_drop_it_within_a_second() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = new_key(dir.path(), "pool.key");
    let (_s, addr) = server(dir.path(), &key, "server");
    let mut nodes: Vec<(Group, String)> = (0..3)
        .map(|i| node(dir.path(), &key, &[&addr], &[], &format!("node{i}")))
        .collect();
    wait_mesh(&nodes, Duration::from_secs(10));
    let (mut victim, victim_id) = nodes.pop().expect("three");
    let killed = Instant::now();
    victim.kill(); // SIGKILL to its group
    for (g, _) in &nodes {
        wait_line(g, Duration::from_secs(10), "peer_gone", |v| {
            event(v, "peer_gone").is_some_and(|v| v["peer"] == victim_id.as_str())
        });
    }
    let dropped = killed.elapsed();
    eprintln!("a SIGKILLed node dropped out of both peers' sets in {dropped:?}");
    assert!(dropped < Duration::from_secs(1), "{dropped:?}");
}

#[test]
fn given_two_peer_servers_and_one_killed_then_a_new_node_still_discovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = new_key(dir.path(), "pool.key");
    let (mut s1, addr1) = server(dir.path(), &key, "server1");
    let (_s2, addr2) = server(dir.path(), &key, "server2");
    let ab = [
        node(dir.path(), &key, &[&addr1, &addr2], &[], "a"),
        node(dir.path(), &key, &[&addr1, &addr2], &[], "b"),
    ];
    wait_mesh(&ab, Duration::from_secs(10));
    // Both registered with both servers.
    s1.kill();
    let (c, c_id) = node(dir.path(), &key, &[&addr1, &addr2], &[], "c");
    let started = Instant::now();
    let err = wait_line(&c, Duration::from_secs(10), "error about server 1", |v| {
        event(v, "peer_server_error").is_some_and(|v| v["addr"] == addr1.as_str())
    });
    assert!(
        err["reason"]
            .as_str()
            .is_some_and(|r| r.contains("refused")),
        "{err}"
    );
    for (_, p) in &ab {
        wait_line(
            &c,
            Duration::from_secs(10),
            "peer_up through server 2",
            |v| event(v, "peer_up").is_some_and(|v| v["peer"] == p.as_str()),
        );
    }
    eprintln!(
        "with one of two peer servers dead, a new node found both agents in {:?}",
        started.elapsed()
    );
    assert!(!has_peer_up(&c, &c_id));
}

#[test]
fn given_a_wrong_or_missing_key_then_the_peer_server_error_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = new_key(dir.path(), "pool.key");
    let other = new_key(dir.path(), "other.key");
    let (_s, addr) = server(dir.path(), &key, "server");
    let started = Instant::now();
    let (x, _) = node(dir.path(), &other, &[&addr], &[], "wrong");
    let err = wait_line(&x, Duration::from_secs(10), "peer server error", |v| {
        event(v, "peer_server_error").is_some()
    });
    let took = started.elapsed();
    let reason = err["reason"].as_str().expect("reason");
    assert!(reason.contains("wrong or missing pool key?"), "{reason}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    eprintln!("wrong key reported after {took:?}: {reason}");

    // No key file at all: the node refuses to start and names the file.
    let missing = dir.path().join("missing.key");
    let out = Command::new(NODE)
        .arg("--pool-key")
        .arg(&missing)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("missing.key") && stderr.contains("does not exist"),
        "{stderr}"
    );

    // A peer server without a key file refuses to start too.
    let out = Command::new(bin("peer-server"))
        .args(["--listen", "/ip4/127.0.0.1/tcp/0", "--pool-key"])
        .arg(&missing)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The hint names the command users have, not a test tool.
    assert!(
        stderr.contains("missing.key") && stderr.contains("ios-agent keygen"),
        "{stderr}"
    );
}

/// CPU time (user + system) of a process, from /proc, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

#[test]
fn given_an_idle_pool_then_a_node_uses_little_cpu() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = new_key(dir.path(), "pool.key");
    let (_s, addr) = server(dir.path(), &key, "server");
    let nodes: Vec<(Group, String)> = (0..3)
        .map(|i| node(dir.path(), &key, &[&addr], &[], &format!("node{i}")))
        .collect();
    wait_mesh(&nodes, Duration::from_secs(10));
    let window = Duration::from_secs(10);
    let pid = nodes[0].0.pid();
    let before = cpu_ticks(pid);
    std::thread::sleep(window);
    let ticks = cpu_ticks(pid) - before;
    // Clock ticks are 1/100 s on Linux.
    let share = ticks as f64 / 100.0 / window.as_secs_f64();
    eprintln!(
        "idle node with 2 peers and a peer server: {ticks} ticks in {window:?} = {:.3}% of a core",
        share * 100.0
    );
    assert!(share < 0.01, "{:.3}% of a core", share * 100.0);
}
