//! `mpi-ios-bench idle-pool`: what an idle pool of real agents costs (issue 42, item 1).
//!
//! Starts a peer server and `--agents` idle `ios-agent join` processes on loopback (each
//! starts its own pcmd, as on a node of its own), waits until every agent has every other
//! one in its peer table (the full mesh), lets them settle, then reads `/proc` over
//! `--seconds`: each agent's and each pcmd's user + system time (`/proc/PID/stat`, the whole
//! process), resident memory, and the agent messages sent (`ios-agent status`, read just
//! outside the window). No MPI job runs: there is nothing to balance. Prints one JSON line;
//! `--threads` adds the CPU by thread name (summed over the agents, from each thread's
//! `schedstat`), which says which part of the agent spends it. Everything started is
//! killed at the end (process groups), and the run is bounded by `--mesh-timeout`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use mpi_ios_tests::pool::{pool_key, AgentProc, AgentSpec, PeerServer};
use serde::Serialize;

/// Options of `idle-pool`.
#[derive(Debug, Args)]
pub(crate) struct IdlePoolArgs {
    /// Agents in the pool (each with its own pcmd).
    #[arg(long, default_value_t = 10)]
    pub(crate) agents: usize,
    /// Length of the measurement window, seconds.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) seconds: f64,
    /// Seconds to wait after the mesh formed before the window opens.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) settle: f64,
    /// Longest wait for the full mesh, seconds (the run fails after it).
    #[arg(long, default_value_t = 180.0)]
    pub(crate) mesh_timeout: f64,
    /// The agents' RUST_LOG (what a user gets by default: info).
    #[arg(long, default_value = "info")]
    pub(crate) rust_log: String,
    /// Also print the agents' CPU by thread name (percent of one core per agent).
    #[arg(long)]
    pub(crate) threads: bool,
    /// Further `ios-agent join` options for every agent (one string, split on spaces).
    #[arg(long, default_value = "")]
    pub(crate) join_options: String,
}

/// The JSON line `idle-pool` prints. CPU figures are percent of one core.
#[derive(Debug, Serialize)]
struct IdlePoolLine {
    agents: usize,
    window_s: f64,
    mesh_formed_s: f64,
    /// Mean over the agents.
    cpu_per_agent: f64,
    cpu_per_agent_max: f64,
    /// Mean over the agents' pcmds.
    cpu_per_pcmd: f64,
    cpu_per_pcmd_max: f64,
    cpu_peer_server: f64,
    rss_mb_per_agent: f64,
    rss_mb_per_pcmd: f64,
    /// Agent messages sent per agent and second (the agents' own counters).
    msgs_per_agent_s: f64,
    /// Threads the machine ran at the window's end (what a whole-table scan reads).
    machine_threads: usize,
    /// `--threads`: percent of one core per agent, by thread name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    agent_threads: BTreeMap<String, f64>,
}

/// Runs the benchmark.
pub(crate) fn run(args: IdlePoolArgs) -> Result<()> {
    if args.agents < 2 {
        bail!("--agents must be at least 2 (a mesh needs two)");
    }
    if !(args.seconds > 0.0 && args.seconds <= 600.0) {
        bail!("--seconds must be between 0 and 600");
    }
    let n = args.agents;
    let dir = tempfile::Builder::new()
        .prefix("mpi-ios-idle-pool-")
        .tempdir()?;
    // The harness reads RUST_LOG for the agents it starts; the default is the user's.
    std::env::set_var("RUST_LOG", &args.rust_log);
    let key = pool_key(dir.path(), "pool.key");
    let server = PeerServer::local(dir.path(), &key, "peer-server");
    let extra: Vec<&str> = args.join_options.split_whitespace().collect();
    let started = Instant::now();
    let mut agents = Vec::with_capacity(n);
    for i in 0..n {
        let spec = AgentSpec::local(
            dir.path(),
            &format!("idle-{i:03}"),
            &key,
            &[server.addr.as_str()],
        )
        .with(&extra);
        agents.push(AgentProc::local(dir.path(), spec));
    }
    eprintln!(
        "idle-pool: {n} agents started in {:.1} s; waiting for the full mesh",
        started.elapsed().as_secs_f64()
    );
    let deadline = started + Duration::from_secs_f64(args.mesh_timeout);
    let mesh_formed_s = loop {
        let fewest = agents.iter().map(AgentProc::peer_count).min().unwrap_or(0);
        if fewest + 1 >= n {
            break started.elapsed().as_secs_f64();
        }
        if Instant::now() > deadline {
            bail!(
                "no full mesh within {} s: an agent has {fewest} of {} peers",
                args.mesh_timeout,
                n - 1
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("idle-pool: full mesh after {mesh_formed_s:.1} s");
    std::thread::sleep(Duration::from_secs_f64(args.settle));
    let agent_pids: Vec<u32> = agents.iter().map(|a| a.group.pid()).collect();
    let pcmd_pids: Vec<u32> = agents
        .iter()
        .map(|a| {
            mpi_ios_tests::pcmd_status(&a.spec.pcmd_socket)
                .map(|s| s.pid)
                .map_err(|e| anyhow::anyhow!("pcmd of {}: {e}", a.spec.host))
        })
        .collect::<Result<_>>()?;
    let sent_before: u64 = agents
        .iter()
        .map(|a| a.status().counters.messages_sent)
        .sum();

    let window_start = Instant::now();
    let agents_0 = cpu_all(&agent_pids);
    let pcmds_0 = cpu_all(&pcmd_pids);
    let server_0 = cpu_ticks(server.group.pid());
    let threads_0 = args.threads.then(|| threads_by_name(&agent_pids));
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let agents_1 = cpu_all(&agent_pids);
    let pcmds_1 = cpu_all(&pcmd_pids);
    let server_1 = cpu_ticks(server.group.pid());
    let threads_1 = args.threads.then(|| threads_by_name(&agent_pids));
    let window_s = window_start.elapsed().as_secs_f64();

    let sent_after: u64 = agents
        .iter()
        .map(|a| a.status().counters.messages_sent)
        .sum();
    let share = |a: &[Option<u64>], b: &[Option<u64>]| -> Vec<f64> {
        a.iter()
            .zip(b)
            .filter_map(|(x, y)| Some(y.as_ref()?.saturating_sub(*x.as_ref()?)))
            .map(|t| t as f64 / ticks_per_second() / window_s * 100.0)
            .collect()
    };
    let agent_cpu = share(&agents_0, &agents_1);
    let pcmd_cpu = share(&pcmds_0, &pcmds_1);
    if agent_cpu.len() != n || pcmd_cpu.len() != n {
        bail!(
            "a process ended during the window: {} of {n} agents and {} of {n} pcmds read",
            agent_cpu.len(),
            pcmd_cpu.len()
        );
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let agent_threads = match (threads_0, threads_1) {
        (Some(a), Some(b)) => b
            .into_iter()
            .map(|(name, ns)| {
                let before = a.get(&name).copied().unwrap_or(0);
                let pct = ns.saturating_sub(before) as f64 / 1e9 / window_s * 100.0 / n as f64;
                (name, round3(pct))
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    let line = IdlePoolLine {
        agents: n,
        window_s: round3(window_s),
        mesh_formed_s: round3(mesh_formed_s),
        cpu_per_agent: round3(mean(&agent_cpu)),
        cpu_per_agent_max: round3(agent_cpu.iter().copied().fold(0.0, f64::max)),
        cpu_per_pcmd: round3(mean(&pcmd_cpu)),
        cpu_per_pcmd_max: round3(pcmd_cpu.iter().copied().fold(0.0, f64::max)),
        cpu_peer_server: match (server_0, server_1) {
            (Some(a), Some(b)) => {
                round3(b.saturating_sub(a) as f64 / ticks_per_second() / window_s * 100.0)
            }
            _ => f64::NAN,
        },
        rss_mb_per_agent: round3(mean(&rss_mb_all(&agent_pids))),
        rss_mb_per_pcmd: round3(mean(&rss_mb_all(&pcmd_pids))),
        msgs_per_agent_s: round3(
            sent_after.saturating_sub(sent_before) as f64 / n as f64 / window_s,
        ),
        machine_threads: machine_threads(),
        agent_threads,
    };
    println!("{}", serde_json::to_string(&line)?);
    drop(agents);
    drop(server);
    Ok(())
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn cpu_all(pids: &[u32]) -> Vec<Option<u64>> {
    pids.iter().map(|&p| cpu_ticks(p)).collect()
}

/// User plus system CPU time of a whole process (exited threads included), clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    mpi_ios_tests::scenario::cpu_ticks(pid)
}

fn ticks_per_second() -> f64 {
    mpi_ios_bench::pool::ticks_per_second()
}

fn rss_mb_all(pids: &[u32]) -> Vec<f64> {
    pids.iter()
        .filter_map(|&p| mpi_ios_bench::pool::rss_mb(p))
        .collect()
}

/// Nanoseconds on a CPU of the processes' live threads, summed by thread name.
fn threads_by_name(pids: &[u32]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for pid in pids {
        let task = format!("/proc/{pid}/task");
        let Ok(entries) = std::fs::read_dir(&task) else {
            continue;
        };
        for e in entries.flatten() {
            let dir = e.path();
            let name = std::fs::read_to_string(dir.join("comm"))
                .map(|s| s.trim().to_owned())
                .unwrap_or_default();
            let ns = std::fs::read_to_string(dir.join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
            *out.entry(name).or_insert(0) += ns;
        }
    }
    out
}

/// Threads on the machine now.
fn machine_threads() -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .map(|e| std::fs::read_dir(Path::new(&e.path()).join("task")).map_or(0, |t| t.count()))
        .sum()
}
