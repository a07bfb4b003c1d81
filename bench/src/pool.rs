//! `mpi-ios-bench pool`: real IOS agents in emulated wide-area sites, with churn (issue 42,
//! item 1).
//!
//! Starts `--sites` sites ([`mpi_ios_tests::sites::SiteNet`]: one network namespace each,
//! joined by a user-space delay router), `--peer-servers` peer servers in different sites
//! and `--agents` `ios-agent join` processes spread over the sites round robin (each starts
//! its own pcmd, as on a node of its own; all get every peer server and need the pool key).
//! The sites lie on a line: neighbours are a region apart, two steps a country, three or
//! more the world; the round trip of each step is in the middle of the paper's tier for it
//! ([`nominal_rtt`]). The truth of a pair of agents is the tier of its sites' nominal round
//! trip ([`LatencyTier::from_rtt`], the agents' own thresholds).
//!
//! Then, sized by time:
//! 1. formation: the agents' status (read from their control sockets every second) until
//!    every agent has every other in its peer table (or as many as the table holds), and
//!    until every agent knows at least `--per-tier` peers of each tier it has (or all of
//!    them), both bounded by `--mesh-timeout`;
//! 2. an idle window (40% of `--seconds`, no status read during it), from when the last
//!    connections' first pings are done (`ios_agent_net::probe::PingTiming::start_up`,
//!    about a minute at 64 connections: until then a connection is pinged more often than
//!    its steady share, which is not an idle agent's upkeep): CPU and RSS of every
//!    agent, pcmd and peer server and of the router (this process) from `/proc`, agent
//!    messages from the agents' counters, bytes from the sites' interface counters; tier
//!    accuracy from the status read after it;
//! 3. churn (the rest of `--seconds` at most): agents leave (`ios-agent leave`), agents are
//!    killed (SIGKILL), a peer server is killed and new agents join; then the status every
//!    second until the survivors have dropped every departed agent and know every joiner,
//!    and the joiners know the pool.
//!
//! Between 2 and 3, the synthetic load ([`load`]): `--loaded` nodes each get a stand-in
//! rank and a CPU hog, and the time until each node's agent moves the rank, and where to,
//! is set beside what the simulator's agents decide for the same loads.
//!
//! Writes `summary.json` ([`PoolSummary`]) in `--out` and prints it; exits non-zero only
//! when the run could not be made (no root, no TUN, a process that would not start), never
//! for a verdict: `passed` carries that, and `failures` says why not.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use ios_agent_core::LatencyTier;
use ios_agent_proto::control::{ControlMessage, ControlReply};
use ios_agent_proto::status::AgentStatus;
use mpi_ios_tests::cgroup::{self, CpuCap, NodeCgroup};
use mpi_ios_tests::pool::{pool_key, AgentSpec, PeerServer};
use mpi_ios_tests::sites::{DelayMatrix, SiteNet};
use mpi_ios_tests::{bin, Group};
use serde::{Deserialize, Serialize};

mod load;
pub use load::{LoadSummary, LoadedNode};

/// Name of the summary in `--out`.
pub const SUMMARY_FILE: &str = "summary.json";

/// Share of `--seconds` the idle window takes; churn gets the rest.
const WINDOW_SHARE: f64 = 0.4;

/// Options of `pool`.
#[derive(Debug, Args)]
pub struct PoolArgs {
    /// Agents at the start (each with its own pcmd).
    #[arg(long, default_value_t = 40)]
    pub agents: usize,
    /// Emulated sites (network namespaces on a line: 1 step regional, 2 national, 3+ global).
    #[arg(long, default_value_t = 4)]
    pub sites: usize,
    /// Seconds after the mesh formed: 40% idle window, the rest at most for the churn.
    #[arg(long, default_value_t = 60.0)]
    pub seconds: f64,
    /// Short run: one agent of each churn kind.
    #[arg(long)]
    pub quick: bool,
    /// Where `summary.json` goes.
    #[arg(long, value_name = "DIR", default_value = "results/pool")]
    pub out: PathBuf,
    /// Peer servers (2-3 make sense), in different sites.
    #[arg(long, default_value_t = 2)]
    pub peer_servers: usize,
    /// k: the time until every agent knows at least k peers of each tier it has is reported.
    #[arg(long, default_value_t = 2)]
    pub per_tier: usize,
    /// Jitter of each one-way delay, a fraction of it (0.03: +-3%).
    #[arg(long, default_value_t = 0.03)]
    pub jitter: f64,
    /// Longest wait for the mesh, seconds (default 60 + 1 per agent).
    #[arg(long)]
    pub mesh_timeout: Option<f64>,
    /// Agents of each churn kind (leave, kill, join); default N/20, at least 1 (1 with --quick).
    #[arg(long)]
    pub churn: Option<usize>,
    /// Pass bound: mean idle CPU per agent, percent of one core (the target).
    #[arg(long, default_value_t = 0.2)]
    pub max_cpu_per_agent: f64,
    /// Pass bound: share of (agent, peer) pairs in the tier of their nominal round trip.
    #[arg(long, default_value_t = 0.95)]
    pub min_tier_accuracy: f64,
    /// The agents' RUST_LOG.
    #[arg(long, default_value = "info")]
    pub rust_log: String,
    /// Keep the agents' and servers' logs in `--out`/logs.
    #[arg(long)]
    pub keep_logs: bool,
    /// Leave every agent (and its pcmd) in this process's cgroup instead of a cgroup node of
    /// its own. Then each agent's sensor sees the whole machine, whose process table holds
    /// every agent of the pool: its load readings and their cost are those of N agents on
    /// one host, not of one agent per node (see `node_cgroups` in the summary).
    #[arg(long)]
    pub shared_node: bool,
    /// The agents' `--dial-agents`: each dials that many of the agents discovered (and
    /// accepts those that dial it); 0: every agent (a full mesh). The mesh is formed when
    /// every agent knows that many (or all the others).
    #[arg(long, value_name = "N", default_value_t = ios_agent_net::config::DEFAULT_DIAL_AGENTS)]
    pub dial_agents: usize,
    /// Nodes to load after the idle window, each with a synthetic rank (a one-rank job
    /// registered with the node's pcmd, no MPI) and a CPU hog beside it; the summary gives
    /// what their agents decided and what the simulator's agents decide for the same loads.
    /// Default: 1 with --quick, else N/50 (1 to 10); 0: none; at most 10 (they share one
    /// core of this machine). Needs a cgroup node per agent.
    #[arg(long, value_name = "NODES")]
    pub loaded: Option<usize>,
    /// Longest wait for the loaded nodes' agents to move their ranks, seconds (an agent
    /// moves no rank resident for less than its 30 s hold-down).
    #[arg(long, value_name = "SECS", default_value_t = 120.0)]
    pub load_timeout: f64,
}

/// Nominal round trip of a path `steps` sites long on the line: the middle (geometric, for
/// the bounded ones) of the paper's tier for it: local 0-10 ms (the site's own loopback),
/// regional 11-100 ms (33), national 101-250 ms (160), global 251 ms and up (400).
pub fn nominal_rtt(steps: usize) -> Duration {
    Duration::from_millis(match steps {
        0 => 0,
        1 => 33,
        2 => 160,
        _ => 400,
    })
}

/// The round trips between `sites` sites on a line.
pub fn delay_matrix(sites: usize) -> Result<DelayMatrix, String> {
    DelayMatrix::new(
        (0..sites)
            .map(|i| (0..sites).map(|j| nominal_rtt(i.abs_diff(j))).collect())
            .collect(),
    )
}

/// The tier a pair of agents in sites `a` and `b` belongs to.
pub fn true_tier(matrix: &DelayMatrix, a: usize, b: usize) -> LatencyTier {
    LatencyTier::from_rtt(matrix.rtt(a, b))
}

/// The first five of `items` and how many more, for a message.
fn first_few(mut items: Vec<String>) -> String {
    let more = items.len().saturating_sub(5);
    items.truncate(5);
    if more > 0 {
        items.push(format!("{more} more"));
    }
    items.join("; ")
}

/// A tier as `ios-agent status` names it.
pub fn tier_name(tier: LatencyTier) -> &'static str {
    match tier {
        LatencyTier::Local => "local",
        LatencyTier::Regional => "regional",
        LatencyTier::National => "national",
        LatencyTier::Global => "global",
    }
}

/// How the agents' tiers compare with the truth: truth -> what the agent said -> pairs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TierCheck {
    /// (agent, peer) pairs in the agent's table whose peer is an agent of the pool.
    pub pairs: usize,
    /// Of them, in the tier of their sites' nominal round trip.
    pub correct: usize,
    /// Truth tier -> the agent's tier -> pairs.
    pub confusion: BTreeMap<String, BTreeMap<String, usize>>,
}

impl TierCheck {
    /// Counts one pair.
    pub fn add(&mut self, truth: &str, said: &str) {
        self.pairs += 1;
        if truth == said {
            self.correct += 1;
        }
        *self
            .confusion
            .entry(truth.to_owned())
            .or_default()
            .entry(said.to_owned())
            .or_default() += 1;
    }

    /// Share of pairs classified right; 0 when there are none (nothing to judge is no pass).
    pub fn accuracy(&self) -> f64 {
        if self.pairs == 0 {
            0.0
        } else {
            self.correct as f64 / self.pairs as f64
        }
    }
}

/// Round trips the agents measured (their smoothed RTT), by true tier, ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RttStats {
    /// Pairs.
    pub pairs: usize,
    /// Median.
    pub median_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// What happened during the churn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChurnSummary {
    /// Agents that ran `ios-agent leave`.
    pub left: Vec<String>,
    /// Whether every one of them exited within 30 s.
    pub left_exited: bool,
    /// Agents killed with SIGKILL (with their pcmds).
    pub killed: Vec<String>,
    /// The peer server killed (its site).
    pub peer_server_killed: Option<String>,
    /// Agents started during the churn.
    pub joined: Vec<String>,
    /// Seconds from the churn until no live agent had a departed one in its peer table.
    pub dead_dropped_s: Option<f64>,
    /// Seconds from the churn until every survivor knew every joiner (unless its table was
    /// full) and every joiner knew the pool (as many peers as its table holds).
    pub joiners_known_s: Option<f64>,
    /// Who kept the joiners from being known when the budget ran out (the first few; empty
    /// when they were known).
    #[serde(default)]
    pub joiners_unknown: String,
    /// Both happened within the churn budget.
    pub recovered: bool,
    /// Agents that should be running at the end, and those that were.
    pub alive_expected: usize,
    /// Agents running at the end.
    pub alive: usize,
    /// Peer servers running at the end (all but the killed one should be).
    pub peer_servers_alive: usize,
}

impl ChurnSummary {
    /// `joiners_unknown` after `lead`, for a message; empty when the joiners were known.
    fn who_kept_joiners_unknown(&self, lead: &str) -> String {
        if self.joiners_unknown.is_empty() {
            String::new()
        } else {
            format!("{lead}{}", self.joiners_unknown)
        }
    }
}

/// The typed result of `pool`, written to `summary.json`. CPU figures are percent of one
/// core; `None` (null) where the event did not happen within its bound.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolSummary {
    /// Agents at the start.
    pub agents: usize,
    /// Sites.
    pub sites: usize,
    /// Peer servers at the start.
    pub peer_servers: usize,
    /// `--seconds`.
    pub seconds: f64,
    /// `--quick`.
    pub quick: bool,
    /// Nominal round trip by tier (the emulated truth), ms.
    pub nominal_rtt_ms: BTreeMap<String, f64>,
    /// Jitter of each one-way delay, fraction.
    pub jitter: f64,
    /// Seconds from the first agent's start until every agent answered on its control socket.
    pub started_s: f64,
    /// The agents' `--dial-agents` (0: every agent).
    #[serde(default)]
    pub dial_agents: usize,
    /// Peers each agent must know for the mesh: N - 1, or its peer table's size or
    /// `dial_agents` if smaller.
    pub mesh_target: usize,
    /// Seconds from the first agent's start until every agent had `mesh_target` peers.
    pub mesh_formed_s: Option<f64>,
    /// k of `k_per_tier_s`.
    pub per_tier: usize,
    /// Seconds from the first agent's start until every agent knew at least k peers (or all
    /// there are) of each tier it has.
    pub k_per_tier_s: Option<f64>,
    /// Share of (agent, peer) pairs the agents put in the tier of their nominal round trip,
    /// read after the idle window.
    pub tier_accuracy: f64,
    /// The pairs behind it.
    pub tiers: TierCheck,
    /// The agents' smoothed round trips by true tier, after the idle window.
    pub measured_rtt: BTreeMap<String, RttStats>,
    /// Seconds from the first agent's start until the idle window began.
    #[serde(default)]
    pub window_start_s: f64,
    /// Length of the idle window, s.
    pub window_s: f64,
    /// Agent messages sent per agent and second in the window (the agents' counters).
    pub msgs_per_agent_s: f64,
    /// Work steals started or forwarded per agent and second in the window (the agents'
    /// counters).
    #[serde(default)]
    pub steals_per_agent_s: f64,
    /// Seconds from the first agent's start until some agent had sent a work steal (read
    /// with the agents' status every second while the mesh formed; `None`: none by then).
    #[serde(default)]
    pub first_steal_s: Option<f64>,
    /// Agents whose node, in the status read after the window, was lightly loaded by
    /// `ios-agent join`'s default light threshold: the ones that look for work (all of an
    /// idle pool's, unless its machine starves them).
    #[serde(default)]
    pub light_agents: usize,
    /// Mean CPU load the agents' nodes reported after the window, cores.
    #[serde(default)]
    pub node_cpu_load: f64,
    /// The same pool idle in the simulator, from its start to the window's end
    /// ([`crate::pool_sim`]): what the scale figures assume the agents send.
    #[serde(default)]
    pub simulated: Option<crate::pool_sim::SimulatedIdle>,
    /// Bytes the sites sent per agent and second in the window (their loopback and link
    /// counters: the agents' and the peer servers' traffic, headers included).
    pub bytes_per_agent_s: f64,
    /// Whether each agent ran in a cgroup node of its own (a CPU cap of one core), as on a
    /// node of its own: its sensor then reads its node's threads, not the machine's whole
    /// process table (which holds every agent of the pool). False with `--shared-node` or
    /// where cgroups cannot be made.
    #[serde(default)]
    pub node_cgroups: bool,
    /// Mean CPU per agent in the window.
    pub cpu_per_agent: f64,
    /// Largest CPU of one agent.
    pub cpu_per_agent_max: f64,
    /// Mean CPU per pcmd.
    pub cpu_per_pcmd: f64,
    /// Mean RSS per agent at the window's end, MB.
    pub rss_mb_per_agent: f64,
    /// Largest RSS of one agent, MB.
    pub rss_mb_per_agent_max: f64,
    /// Mean RSS per pcmd, MB.
    pub rss_mb_per_pcmd: f64,
    /// Mean CPU per peer server.
    pub cpu_per_peer_server: f64,
    /// Mean RSS per peer server, MB.
    pub rss_mb_per_peer_server: f64,
    /// CPU of the delay router (this whole process) in the window.
    pub cpu_router: f64,
    /// Packets the router forwarded (whole run).
    pub router_packets: u64,
    /// Packets it dropped (whole run).
    pub router_dropped: u64,
    /// Packets the kernel dropped on the router's links (whole run): its TUN's queue full
    /// while the router did not read, each a retransmission (at least 200 ms) for TCP.
    pub link_dropped: u64,
    /// The synthetic load and what the real and the simulated agents decided for it
    /// (`None`: no load, as with `--loaded 0` or without cgroup nodes).
    #[serde(default)]
    pub load: Option<LoadSummary>,
    /// The churn.
    pub churn: ChurnSummary,
    /// The bounds `passed` judges.
    pub max_cpu_per_agent: f64,
    /// See `passed`.
    pub min_tier_accuracy: f64,
    /// See `passed`.
    pub mesh_timeout_s: f64,
    /// Why `passed` is false (empty when it is true).
    pub failures: Vec<String>,
    /// The mesh formed within `mesh_timeout_s`, tier accuracy at least
    /// `min_tier_accuracy`, mean idle CPU per agent at most `max_cpu_per_agent`, the pool
    /// recovered from the churn within its budget, the leavers exited, and every agent and
    /// peer server not removed on purpose was still running at the end.
    pub passed: bool,
}

impl PoolSummary {
    /// Reads `summary.json` from `dir`.
    pub fn read(dir: &Path) -> Result<PoolSummary> {
        let path = dir.join(SUMMARY_FILE);
        let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{}", path.display()))
    }
}

/// One agent of the run.
struct Agent {
    host: String,
    site: usize,
    spec: AgentSpec,
    group: Group,
    /// Its node's cgroup (unless `--shared-node`): dropped after the group, it kills what
    /// is left in it (the agent's pcmd).
    node: Option<NodeCgroup>,
    /// Its peer id as `status` prints ids, once read.
    peer_id: Option<String>,
    /// Left or killed on purpose.
    departed: bool,
}

impl Agent {
    fn status(&self) -> Option<AgentStatus> {
        agent_status(&self.spec.control)
    }
}

/// The agent's status from its control socket (no process started), or None if it does not
/// answer within 10 s.
fn agent_status(control: &Path) -> Option<AgentStatus> {
    use std::io::{Read, Write};
    // The agent's control protocol (ios-agent-proto frames), spoken here rather than through
    // the ios-agent crate: a benchmark links no daemon (tests/tests/layers.rs).
    let mut stream = std::os::unix::net::UnixStream::connect(control).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    stream
        .write_all(&pcm_proto::encode(&ControlMessage::Status))
        .ok()?;
    let mut reader = pcm_proto::FrameReader::new();
    let mut buf = [0u8; 8192];
    loop {
        match reader.next_message::<ControlReply>() {
            Ok(Some(ControlReply::Status(s))) => return Some(*s),
            Ok(Some(_)) | Err(_) => return None,
            Ok(None) => {}
        }
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reader.feed(&buf[..n]);
    }
}

/// User plus system CPU seconds of a process, or None if it is gone.
pub(crate) fn cpu_s(pid: u32) -> Option<f64> {
    Some(mpi_ios_tests::scenario::cpu_ticks(pid)? as f64 / ticks_per_second())
}

/// Clock ticks per second of `/proc/PID/stat`.
pub fn ticks_per_second() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100.0, |t| t as f64)
}

/// Resident memory of a process, MB, or None if it is gone.
pub fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Mean; 0 for none (JSON has no NaN; a process missing from a window is a failure of its
/// own).
fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// What a round of status reads says of the pool.
#[derive(Debug, Default)]
struct Snapshot {
    /// Agent index -> its status (agents that answered).
    statuses: HashMap<usize, AgentStatus>,
}

/// The run's state and what it measured so far.
/// Fields drop in order: the processes first, then the sites, then the files.
struct Run {
    agents: Vec<Agent>,
    servers: Vec<(usize, Option<PeerServer>)>,
    net: SiteNet,
    dir: tempfile::TempDir,
    args: PoolArgs,
    matrix: DelayMatrix,
    key: PathBuf,
    server_addrs: Vec<String>,
    /// Peer id -> agent index.
    by_peer: HashMap<String, usize>,
    started: Instant,
    /// Whether each agent gets a cgroup node of its own.
    node_cgroups: bool,
    /// The agents whose nodes get the synthetic load, and the CPU cap of their nodes.
    loaded: Vec<usize>,
    load_cap: CpuCap,
}

/// The CPU cap of an agent's cgroup node: one core, which an idle agent never reaches; what
/// matters is that its sensor finds a node of its own.
const NODE_CAP_CORES: f64 = 1.0;

/// Runs `sh -c` with this, then the command: the shell moves itself into the cgroup files
/// named in `MPI_IOS_NODE_PROCS` (before it execs the command, so the agent and the pcmd it
/// starts are in the node from their first instruction).
const JOIN_NODE_THEN_EXEC: &str =
    r#"for f in $MPI_IOS_NODE_PROCS; do echo $$ > "$f" || exit 97; done; exec "$@""#;

/// A command that runs `program` with `args` in the cgroup `node` from its first
/// instruction ([`JOIN_NODE_THEN_EXEC`]).
fn in_node<I, S>(node: &NodeCgroup, program: &std::ffi::OsStr, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let procs: Vec<String> = node
        .procs_files()
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    let mut command = Command::new("sh");
    command
        .args(["-c", JOIN_NODE_THEN_EXEC, "sh"])
        .arg(program)
        .args(args)
        .env("MPI_IOS_NODE_PROCS", procs.join(" "));
    command
}

/// Runs the benchmark.
pub fn run(args: PoolArgs) -> Result<()> {
    if let Err(why) = SiteNet::available() {
        bail!("pool: {why}; it cannot run here");
    }
    if args.agents < 2 {
        bail!("--agents must be at least 2");
    }
    if !(1..=mpi_ios_tests::sites::MAX_SITES).contains(&args.sites) {
        bail!("--sites must be 1 to {}", mpi_ios_tests::sites::MAX_SITES);
    }
    if !(1..=args.sites.min(8)).contains(&args.peer_servers) {
        bail!("--peer-servers must be 1 to min(sites, 8)");
    }
    if !(args.seconds >= 5.0 && args.seconds <= 3600.0) {
        bail!("--seconds must be 5 to 3600");
    }
    if !(0.0..=0.5).contains(&args.jitter) {
        bail!("--jitter must be 0 to 0.5");
    }
    if !(args.load_timeout >= 1.0 && args.load_timeout <= 3600.0) {
        bail!("--load-timeout must be 1 to 3600 seconds");
    }
    let churn = args.churn.unwrap_or(if args.quick {
        1
    } else {
        (args.agents / 20).max(1)
    });
    if 2 * churn + 2 > args.agents {
        bail!(
            "--churn {churn}: leaving and killing {} of {} agents leaves too few",
            2 * churn,
            args.agents
        );
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let matrix = delay_matrix(args.sites).map_err(anyhow::Error::msg)?;
    let net = SiteNet::new(matrix.clone(), args.jitter).map_err(anyhow::Error::msg)?;
    let dir = tempfile::Builder::new().prefix("mpi-ios-pool-").tempdir()?;
    let key = pool_key(dir.path(), "pool.key");
    let node_cgroups = !args.shared_node
        && match cgroup::available() {
            Ok(()) => {
                cgroup::sweep_stale();
                true
            }
            Err(why) => {
                eprintln!(
                    "pool: no cgroup node per agent ({why}): every agent's sensor reads the \
                     whole machine"
                );
                false
            }
        };
    let mut run = Run {
        matrix,
        key,
        servers: Vec::new(),
        server_addrs: Vec::new(),
        agents: Vec::new(),
        by_peer: HashMap::new(),
        started: Instant::now(),
        node_cgroups,
        loaded: Vec::new(),
        load_cap: CpuCap::cores(NODE_CAP_CORES),
        dir,
        net,
        args,
    };
    let result = run.scenario(churn);
    if run.args.keep_logs {
        crate::keep_logs(run.dir.path(), &run.args.out.join("logs"));
    }
    let summary = result?;
    let path = run.args.out.join(SUMMARY_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    print_summary(&summary);
    println!("{}", serde_json::to_string(&summary)?);
    eprintln!("pool: summary in {}", path.display());
    Ok(())
}

fn check_interrupt() -> Result<()> {
    if mpi_ios_tests::interrupted() {
        bail!("interrupted");
    }
    Ok(())
}

impl Run {
    fn scenario(&mut self, churn: usize) -> Result<PoolSummary> {
        let n = self.args.agents;
        let mut s = PoolSummary {
            agents: n,
            sites: self.args.sites,
            peer_servers: self.args.peer_servers,
            seconds: self.args.seconds,
            quick: self.args.quick,
            per_tier: self.args.per_tier,
            jitter: self.args.jitter,
            max_cpu_per_agent: self.args.max_cpu_per_agent,
            min_tier_accuracy: self.args.min_tier_accuracy,
            mesh_timeout_s: self.args.mesh_timeout.unwrap_or(60.0 + n as f64),
            dial_agents: self.args.dial_agents,
            mesh_target: (n - 1).min(self.peers_each()),
            node_cgroups: self.node_cgroups,
            ..PoolSummary::default()
        };
        for steps in 0..self.args.sites.min(4) {
            let rtt = nominal_rtt(steps);
            s.nominal_rtt_ms.insert(
                tier_name(LatencyTier::from_rtt(rtt)).to_owned(),
                rtt.as_secs_f64() * 1e3,
            );
        }
        // The nodes to load get a smaller cap, so that their loads (two busy threads each,
        // at their cap) take at most a core of this machine in all.
        let to_load = self.args.loaded.unwrap_or(if self.args.quick {
            1
        } else {
            (n / 50).clamp(1, load::MAX_LOADED)
        });
        if self.node_cgroups {
            self.loaded = load::loaded_agents(n, self.args.sites, to_load);
            self.load_cap = load::loaded_node_cap(self.loaded.len())?;
        } else if to_load > 0 {
            eprintln!("pool: no synthetic load: it needs a cgroup node per agent");
        }
        // Peer servers spread over the sites.
        for p in 0..self.args.peer_servers {
            let site = p * self.args.sites / self.args.peer_servers;
            let server = PeerServer::start(
                self.net.command_in(site, bin("peer-server")),
                self.dir.path(),
                &self.key,
                &self.net.addr(site).to_string(),
                &format!("peer-server-{p}"),
            );
            self.server_addrs.push(server.addr.clone());
            self.servers.push((site, Some(server)));
        }
        eprintln!(
            "pool: {} sites, {} peer servers; starting {n} agents",
            self.args.sites, self.args.peer_servers
        );
        self.started = Instant::now();
        // In batches of 25, each answering before the next starts: 300 agents and their
        // pcmds started at once on 2 shared cores left a pcmd that did not answer its agent
        // within the agent's 10 s, and that agent gave up.
        let answer_within = Duration::from_secs_f64(s.mesh_timeout_s);
        for i in 0..n {
            self.spawn_agent(
                i % self.args.sites,
                &format!("s{}a{i:03}", i % self.args.sites),
            )?;
            if (i + 1) % 25 == 0 {
                self.wait_answering(answer_within)?;
            }
        }
        self.wait_answering(answer_within)?;
        s.started_s = round3(self.started.elapsed().as_secs_f64());
        eprintln!("pool: {n} agents answer after {:.1} s", s.started_s);

        // 1. Formation.
        let deadline = self.started + Duration::from_secs_f64(s.mesh_timeout_s);
        loop {
            check_interrupt()?;
            let snap = self.snapshot()?;
            let t = self.started.elapsed().as_secs_f64();
            let (fewest, mesh) = self.mesh_formed(&snap, s.mesh_target);
            if mesh && s.mesh_formed_s.is_none() {
                s.mesh_formed_s = Some(round3(t));
            }
            if s.first_steal_s.is_none()
                && snap.statuses.values().any(|st| st.counters.steals_sent > 0)
            {
                s.first_steal_s = Some(round3(t));
            }
            if s.k_per_tier_s.is_none() && self.k_per_tier(&snap, self.args.per_tier) {
                s.k_per_tier_s = Some(round3(t));
            }
            if s.mesh_formed_s.is_some() && s.k_per_tier_s.is_some() {
                break;
            }
            if Instant::now() > deadline {
                if s.mesh_formed_s.is_none() {
                    s.failures.push(format!(
                        "no mesh within {:.0} s: an agent had {fewest} of {} peers ({})",
                        s.mesh_timeout_s,
                        s.mesh_target,
                        self.missing(&snap, s.mesh_target)
                    ));
                }
                if s.k_per_tier_s.is_none() {
                    s.failures.push(format!(
                        "not every agent knew {} peers of each tier within {:.0} s ({})",
                        self.args.per_tier,
                        s.mesh_timeout_s,
                        self.tier_shortfalls(&snap, self.args.per_tier)
                    ));
                }
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        eprintln!(
            "pool: mesh after {:?} s, {} per tier after {:?} s",
            s.mesh_formed_s, self.args.per_tier, s.k_per_tier_s
        );

        // 2. The idle window, once the connections made by the mesh's formation are pinged
        // at their steady rate.
        let connections = s.mesh_target + self.args.peer_servers;
        let settle = ios_agent_net::probe::PingTiming::default()
            .start_up(connections)
            .max(Duration::from_secs(1));
        eprintln!(
            "pool: idle window in {:.0} s, once the connections' first pings are done",
            settle.as_secs_f64()
        );
        std::thread::sleep(settle);
        self.measure_window(&mut s)?;

        // The synthetic load.
        if !self.loaded.is_empty() {
            let timeout = Duration::from_secs_f64(self.args.load_timeout);
            s.load = Some(self.load(timeout)?);
        }

        // 3. Churn.
        let budget = Duration::from_secs_f64(self.args.seconds * (1.0 - WINDOW_SHARE));
        self.churn(&mut s, churn, budget)?;

        if let Some(c) = self.net.router_counters() {
            s.router_packets = c.packets.load(std::sync::atomic::Ordering::Relaxed);
            s.router_dropped = c.dropped.load(std::sync::atomic::Ordering::Relaxed);
        }
        s.link_dropped = self.net.link_drops().map_err(anyhow::Error::msg)?;
        // The same pool in the simulator, over the same span from its start; after the
        // churn, so that its CPU does not slow this process's delay router meanwhile.
        let (settle, window) = (
            Duration::from_secs_f64(s.window_start_s),
            Duration::from_secs_f64(s.window_s),
        );
        let knowledge = crate::pool_sim::Knowledge::of_pool(n, self.args.dial_agents);
        match crate::pool_sim::simulate_idle(n, self.args.sites, knowledge, settle, window, 1) {
            Ok(mut sim) => {
                sim.msgs_per_agent_s = round3(sim.msgs_per_agent_s);
                sim.steals_per_agent_s = round3(sim.steals_per_agent_s);
                sim.first_steal_s = sim.first_steal_s.map(round3);
                s.simulated = Some(sim);
            }
            Err(e) => eprintln!("pool: not simulated: {e:#}"),
        }
        if let Some(load) = s.load.as_mut() {
            if let Err(e) = self.simulate_load(load, knowledge) {
                eprintln!("pool: the load not simulated: {e:#}");
            }
        }
        self.judge(&mut s);
        Ok(s)
    }

    fn spawn_agent(&mut self, site: usize, host: &str) -> Result<()> {
        let server_addrs: Vec<&str> = self.server_addrs.iter().map(String::as_str).collect();
        let spec = AgentSpec::in_dir(
            self.dir.path(),
            host,
            &self.key,
            &server_addrs,
            &self.net.addr(site).to_string(),
        );
        let mut in_site = self.net.command_in(site, bin("ios-agent"));
        in_site
            .args(spec.args())
            .args(["--dial-agents", &self.args.dial_agents.to_string()]);
        let (mut command, node) = if self.node_cgroups {
            let name = format!("{}{}spool-{host}", cgroup::PREFIX, std::process::id());
            let cap = if self.loaded.contains(&self.agents.len()) {
                self.load_cap
            } else {
                CpuCap::cores(NODE_CAP_CORES)
            };
            let node = NodeCgroup::create(&name, cap)
                .map_err(|e| anyhow::anyhow!("cannot make the node cgroup of {host}: {e}"))?;
            let command = in_node(&node, in_site.get_program(), in_site.get_args());
            (command, Some(node))
        } else {
            (in_site, None)
        };
        command.env("RUST_LOG", &self.args.rust_log);
        let group = Group::spawn(command, self.dir.path(), &format!("agent-{host}"))
            .with_context(|| format!("cannot start the agent {host}"))?;
        self.agents.push(Agent {
            host: host.to_owned(),
            site,
            spec,
            group,
            node,
            peer_id: None,
            departed: false,
        });
        Ok(())
    }

    /// Waits until every live agent without a known peer id answers, and records its id.
    fn wait_answering(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        for i in 0..self.agents.len() {
            while self.agents[i].peer_id.is_none() && !self.agents[i].departed {
                check_interrupt()?;
                if let Some(st) = self.agents[i].status() {
                    self.by_peer.insert(st.peer_id.clone(), i);
                    self.agents[i].peer_id = Some(st.peer_id);
                    break;
                }
                let a = &mut self.agents[i];
                if !a.group.running() {
                    bail!(
                        "the agent {} exited at start:\n{}",
                        a.host,
                        tail(&a.group.stderr_so_far(), 20)
                    );
                }
                if Instant::now() > deadline {
                    bail!(
                        "the agent {} did not answer within {timeout:?}:\n{}",
                        a.host,
                        tail(&a.group.stderr_so_far(), 20)
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// Every live agent's status. An agent that died unasked fails the run.
    fn snapshot(&mut self) -> Result<Snapshot> {
        let mut snap = Snapshot::default();
        for (i, a) in self.agents.iter_mut().enumerate() {
            if a.departed {
                continue;
            }
            if let Some(st) = agent_status(&a.spec.control) {
                snap.statuses.insert(i, st);
            } else if !a.group.running() {
                bail!(
                    "the agent {} died:\n{}",
                    a.host,
                    tail(&a.group.stderr_so_far(), 20)
                );
            }
        }
        Ok(snap)
    }

    /// Live agents (not departed).
    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.agents.len()).filter(|&i| !self.agents[i].departed)
    }

    /// The pool agents in `status`'s peer table (indices), with the tier the agent gave.
    fn known<'a>(&'a self, status: &'a AgentStatus) -> impl Iterator<Item = (usize, &'a str)> + 'a {
        status
            .peers
            .iter()
            .filter_map(|p| Some((*self.by_peer.get(&p.peer)?, p.tier.as_str())))
    }

    /// Whether every live agent knows `target` live agents; and the fewest known.
    fn mesh_formed(&self, snap: &Snapshot, target: usize) -> (usize, bool) {
        let live = self.live().count();
        let target = target.min(live.saturating_sub(1));
        let mut fewest = usize::MAX;
        for i in self.live() {
            let known = snap.statuses.get(&i).map_or(0, |st| {
                self.known(st)
                    .filter(|(j, _)| !self.agents[*j].departed)
                    .count()
            });
            fewest = fewest.min(known);
        }
        let fewest = if fewest == usize::MAX { 0 } else { fewest };
        (fewest, fewest >= target)
    }

    /// Which live agents know fewer than the mesh target, for a message (the first few,
    /// each with at most a few of the live peers it lacks: a pool of hundreds made a line
    /// of 40 kB).
    fn missing(&self, snap: &Snapshot, target: usize) -> String {
        let live = self.live().count();
        let target = target.min(live.saturating_sub(1));
        let mut out = Vec::new();
        for i in self.live() {
            let known: Vec<usize> = snap
                .statuses
                .get(&i)
                .map(|st| self.known(st).map(|(j, _)| j).collect())
                .unwrap_or_default();
            if known.len() >= target {
                continue;
            }
            let lacks: Vec<&str> = self
                .live()
                .filter(|&j| j != i && !known.contains(&j))
                .map(|j| self.agents[j].host.as_str())
                .collect();
            out.push(format!(
                "{} knows {}, lacks {}{}",
                self.agents[i].host,
                known.len(),
                lacks[..lacks.len().min(5)].join(" "),
                if lacks.len() > 5 { " ..." } else { "" }
            ));
        }
        first_few(out)
    }

    /// Which live agents know fewer than `k` peers of a tier they have live agents in, by
    /// their own tiers: `host knows TIER KNOWN of PRESENT` (the first few).
    fn tier_shortfalls(&self, snap: &Snapshot, k: usize) -> String {
        let mut out = Vec::new();
        for i in self.live() {
            let have = match snap.statuses.get(&i) {
                Some(st) => self.tier_counts(st),
                None => {
                    out.push(format!("{} did not answer", self.agents[i].host));
                    continue;
                }
            };
            let short: Vec<String> = self
                .tiers_present(i)
                .into_iter()
                .filter_map(|(tier, n)| {
                    let got = have.get(tier).copied().unwrap_or(0);
                    (got < n.min(k)).then(|| format!("{tier} {got} of {n}"))
                })
                .collect();
            if !short.is_empty() {
                out.push(format!(
                    "{} knows {}",
                    self.agents[i].host,
                    short.join(", ")
                ));
            }
        }
        first_few(out)
    }

    /// How many live peers `st`'s agent knows in each tier, by its own tiers.
    fn tier_counts<'a>(&'a self, st: &'a AgentStatus) -> BTreeMap<&'a str, usize> {
        let mut have: BTreeMap<&str, usize> = BTreeMap::new();
        for (j, tier) in self.known(st) {
            if !self.agents[j].departed {
                *have.entry(tier).or_default() += 1;
            }
        }
        have
    }

    /// How many live agents other than `i` each tier holds, by the emulated truth.
    fn tiers_present(&self, i: usize) -> BTreeMap<&'static str, usize> {
        let mut exist: BTreeMap<&str, usize> = BTreeMap::new();
        for j in self.live().filter(|&j| j != i) {
            let tier = true_tier(&self.matrix, self.agents[i].site, self.agents[j].site);
            *exist.entry(tier_name(tier)).or_default() += 1;
        }
        exist
    }

    /// Whether every live agent knows at least `k` peers (or all there are) of each tier it
    /// has live agents in, by the agent's own tiers.
    fn k_per_tier(&self, snap: &Snapshot, k: usize) -> bool {
        self.live().all(|i| {
            let Some(st) = snap.statuses.get(&i) else {
                return false;
            };
            let have = self.tier_counts(st);
            self.tiers_present(i)
                .iter()
                .all(|(tier, &n)| have.get(tier).copied().unwrap_or(0) >= n.min(k))
        })
    }

    fn measure_window(&mut self, s: &mut PoolSummary) -> Result<()> {
        let n = self.agents.len();
        let agent_pids: Vec<u32> = self.agents.iter().map(|a| a.group.pid()).collect();
        let pcmd_pids: Vec<u32> = self
            .agents
            .iter()
            .map(|a| {
                mpi_ios_tests::pcmd_status(&a.spec.pcmd_socket)
                    .map(|st| st.pid)
                    .map_err(|e| anyhow::anyhow!("pcmd of {}: {e}", a.host))
            })
            .collect::<Result<_>>()?;
        let server_pids: Vec<u32> = self
            .servers
            .iter()
            .filter_map(|(_, srv)| srv.as_ref().map(|x| x.group.pid()))
            .collect();
        let before = self.snapshot()?;
        let sent = |snap: &Snapshot| -> u64 {
            snap.statuses
                .values()
                .map(|st| st.counters.messages_sent)
                .sum()
        };
        let bytes = |net: &SiteNet| -> Result<u64> {
            (0..net.sites())
                .map(|i| net.bytes_sent(i).map_err(anyhow::Error::msg))
                .sum()
        };
        let me = std::process::id();
        let read = |pids: &[u32]| -> Vec<Option<f64>> { pids.iter().map(|&p| cpu_s(p)).collect() };
        let window = Duration::from_secs_f64(self.args.seconds * WINDOW_SHARE);
        eprintln!("pool: idle window of {:.0} s", window.as_secs_f64());
        let bytes0 = bytes(&self.net)?;
        let (a0, p0, s0, r0) = (
            read(&agent_pids),
            read(&pcmd_pids),
            read(&server_pids),
            cpu_s(me),
        );
        let t0 = Instant::now();
        let step = Duration::from_millis(200);
        while t0.elapsed() < window {
            check_interrupt()?;
            std::thread::sleep(step.min(window.saturating_sub(t0.elapsed())));
        }
        let (a1, p1, s1, r1) = (
            read(&agent_pids),
            read(&pcmd_pids),
            read(&server_pids),
            cpu_s(me),
        );
        let bytes1 = bytes(&self.net)?;
        let w = t0.elapsed().as_secs_f64();
        let after = self.snapshot()?;
        let pct = |a: &[Option<f64>], b: &[Option<f64>]| -> Vec<f64> {
            a.iter()
                .zip(b)
                .filter_map(|(x, y)| Some((y.as_ref()? - x.as_ref()?) / w * 100.0))
                .collect()
        };
        let agent_cpu = pct(&a0, &a1);
        let pcmd_cpu = pct(&p0, &p1);
        if agent_cpu.len() != n {
            s.failures.push(format!(
                "{} of {n} agents ended during the idle window",
                n - agent_cpu.len()
            ));
        }
        s.window_s = round3(w);
        s.cpu_per_agent = round3(mean(&agent_cpu));
        s.cpu_per_agent_max = round3(agent_cpu.iter().copied().fold(0.0, f64::max));
        s.cpu_per_pcmd = round3(mean(&pcmd_cpu));
        s.cpu_per_peer_server = round3(mean(&pct(&s0, &s1)));
        s.cpu_router = match (r0, r1) {
            (Some(x), Some(y)) => round3((y - x) / w * 100.0),
            _ => 0.0,
        };
        let agent_rss: Vec<f64> = agent_pids.iter().filter_map(|&p| rss_mb(p)).collect();
        s.rss_mb_per_agent = round3(mean(&agent_rss));
        s.rss_mb_per_agent_max = round3(agent_rss.iter().copied().fold(0.0, f64::max));
        s.rss_mb_per_pcmd = round3(mean(
            &pcmd_pids
                .iter()
                .filter_map(|&p| rss_mb(p))
                .collect::<Vec<_>>(),
        ));
        s.rss_mb_per_peer_server = round3(mean(
            &server_pids
                .iter()
                .filter_map(|&p| rss_mb(p))
                .collect::<Vec<_>>(),
        ));
        s.msgs_per_agent_s =
            round3(sent(&after).saturating_sub(sent(&before)) as f64 / n as f64 / w);
        let steals = |snap: &Snapshot| -> u64 {
            snap.statuses
                .values()
                .map(|st| st.counters.steals_sent + st.counters.steals_forwarded)
                .sum()
        };
        s.steals_per_agent_s =
            round3(steals(&after).saturating_sub(steals(&before)) as f64 / n as f64 / w);
        let threshold = crate::pool_sim::join_defaults()?.light_threshold();
        let nodes: Vec<_> = after.statuses.values().filter_map(|st| st.node).collect();
        s.light_agents = nodes
            .iter()
            .filter(|p| p.is_lightly_loaded(threshold))
            .count();
        s.node_cpu_load = round3(mean(&nodes.iter().map(|p| p.cpu_load).collect::<Vec<_>>()));
        s.window_start_s = round3(
            self.started
                .elapsed()
                .saturating_sub(t0.elapsed())
                .as_secs_f64(),
        );
        s.bytes_per_agent_s = round3(bytes1.saturating_sub(bytes0) as f64 / n as f64 / w);

        // Tiers, as the agents see them after the window.
        let mut check = TierCheck::default();
        let mut rtts: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for (&i, st) in &after.statuses {
            for p in &st.peers {
                let Some(&j) = self.by_peer.get(&p.peer) else {
                    continue;
                };
                let truth = tier_name(true_tier(
                    &self.matrix,
                    self.agents[i].site,
                    self.agents[j].site,
                ));
                check.add(truth, &p.tier);
                rtts.entry(truth.to_owned()).or_default().push(p.srtt_ms);
            }
        }
        s.tier_accuracy = round3(check.accuracy());
        s.tiers = check;
        s.measured_rtt = rtts
            .into_iter()
            .map(|(tier, v)| {
                let stats = RttStats {
                    pairs: v.len(),
                    median_ms: round3(crate::median(&v)),
                    max_ms: round3(crate::max(&v)),
                };
                (tier, stats)
            })
            .collect();
        eprintln!(
            "pool: window {w:.1} s: agent CPU {:.3}% (max {:.3}%), {:.2} msgs/s, {:.0} B/s per agent; tier accuracy {:.3}",
            s.cpu_per_agent, s.cpu_per_agent_max, s.msgs_per_agent_s, s.bytes_per_agent_s, s.tier_accuracy
        );
        Ok(())
    }

    fn churn(&mut self, s: &mut PoolSummary, churn: usize, budget: Duration) -> Result<()> {
        let n = self.agents.len();
        // Leavers and the killed from every site in turn: agents 0, 3, 6, ... leave and
        // 1, 4, 7, ... are killed (with 4 sites, from sites 0, 3, 2, 1 and 1, 0, 3, 2).
        let leavers: Vec<usize> = (0..churn).map(|c| (3 * c) % n).collect();
        let killed: Vec<usize> = (0..churn).map(|c| (3 * c + 1) % n).collect();
        let t0 = Instant::now();
        eprintln!("pool: churn: {churn} leave, {churn} killed, peer server 0 killed, {churn} join");
        let mut leaving = Vec::new();
        for &i in &leavers {
            let a = &mut self.agents[i];
            a.departed = true;
            s.churn.left.push(a.host.clone());
            let child = Command::new(bin("ios-agent"))
                .arg("--control")
                .arg(&a.spec.control)
                .args(["leave", "--within", "10", "--force"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .with_context(|| format!("cannot run ios-agent leave for {}", a.host))?;
            leaving.push(child);
        }
        for &i in &killed {
            let a = &mut self.agents[i];
            a.departed = true;
            a.group.kill();
            s.churn.killed.push(a.host.clone());
        }
        if let Some((site, server)) = self.servers.first_mut() {
            if let Some(mut server) = server.take() {
                server.group.kill();
                s.churn.peer_server_killed = Some(format!("peer-server-0 (site {site})"));
            }
        }
        let first_joiner = self.agents.len();
        for c in 0..churn {
            let i = first_joiner + c;
            let site = i % self.args.sites;
            self.spawn_agent(site, &format!("s{site}a{i:03}"))?;
            s.churn.joined.push(self.agents[i].host.clone());
        }
        let deadline = t0 + budget;
        // The leavers' commands end when their agents have left (or failed).
        let mut exited = true;
        for (mut child, &i) in leaving.into_iter().zip(&leavers) {
            let done = loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break true;
                }
                if t0.elapsed() > Duration::from_secs(30) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break false;
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let a = &mut self.agents[i];
            let gone = loop {
                if !a.group.running() {
                    break true;
                }
                if t0.elapsed() > Duration::from_secs(30) {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            exited &= done && gone;
        }
        s.churn.left_exited = exited;
        self.wait_answering(budget)?;
        let departed: Vec<String> = leavers
            .iter()
            .chain(&killed)
            .filter_map(|&i| self.agents[i].peer_id.clone())
            .collect();
        let joiners: Vec<usize> = (first_joiner..self.agents.len()).collect();
        let cap = self.peers_each();
        loop {
            check_interrupt()?;
            let snap = self.snapshot()?;
            let t = t0.elapsed().as_secs_f64();
            if s.churn.dead_dropped_s.is_none()
                && snap.statuses.len() == self.live().count()
                && snap
                    .statuses
                    .values()
                    .all(|st| !st.peers.iter().any(|p| departed.contains(&p.peer)))
            {
                s.churn.dead_dropped_s = Some(round3(t));
            }
            if s.churn.joiners_known_s.is_none() && self.joiners_known(&snap, &joiners, cap) {
                s.churn.joiners_known_s = Some(round3(t));
            }
            if s.churn.dead_dropped_s.is_some() && s.churn.joiners_known_s.is_some() {
                s.churn.recovered = true;
                break;
            }
            if Instant::now() > deadline {
                if s.churn.joiners_known_s.is_none() {
                    s.churn.joiners_unknown = self.joiners_shortfall(&snap, &joiners, cap);
                }
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        eprintln!(
            "pool: departed dropped after {:?} s, joiners known after {:?} s{}",
            s.churn.dead_dropped_s,
            s.churn.joiners_known_s,
            s.churn.who_kept_joiners_unknown(": ")
        );
        s.churn.alive_expected = self.live().count();
        s.churn.alive = self
            .agents
            .iter_mut()
            .filter(|a| !a.departed)
            .map(|a| a.group.running())
            .filter(|&r| r)
            .count();
        s.churn.peer_servers_alive = self
            .servers
            .iter_mut()
            .filter_map(|(_, srv)| srv.as_mut())
            .map(|srv| srv.group.running())
            .filter(|&r| r)
            .count();
        Ok(())
    }

    /// The peers an agent comes to know in a large pool: its peer table's size, or the
    /// agents it dials if fewer.
    fn peers_each(&self) -> usize {
        match self.args.dial_agents {
            0 => ios_agent_core::agent::DEFAULT_MAX_PEERS,
            n => n.min(ios_agent_core::agent::DEFAULT_MAX_PEERS),
        }
    }

    /// Every survivor knows every joiner (unless it knows `cap` agents) and every joiner knows
    /// as many live agents as the mesh asks.
    fn joiners_known(&self, snap: &Snapshot, joiners: &[usize], cap: usize) -> bool {
        self.joiners_shortfall(snap, joiners, cap).is_empty()
    }

    /// Who keeps [`Run::joiners_known`] false, for a message (the first few): a joiner
    /// that knows too few, or a survivor that lacks joiners; empty when nobody does.
    fn joiners_shortfall(&self, snap: &Snapshot, joiners: &[usize], cap: usize) -> String {
        let live = self.live().count();
        let target = (live - 1).min(cap);
        let mut out = Vec::new();
        for i in self.live() {
            let host = &self.agents[i].host;
            let Some(st) = snap.statuses.get(&i) else {
                out.push(format!("{host} did not answer"));
                continue;
            };
            let known: Vec<usize> = self
                .known(st)
                .map(|(j, _)| j)
                .filter(|&j| !self.agents[j].departed)
                .collect();
            if joiners.contains(&i) {
                if known.len() < target {
                    out.push(format!("joiner {host} knows {} of {target}", known.len()));
                }
            } else if st.peers.len() < cap {
                let lacks: Vec<&str> = joiners
                    .iter()
                    .filter(|j| !known.contains(j))
                    .map(|&j| self.agents[j].host.as_str())
                    .collect();
                if !lacks.is_empty() {
                    out.push(format!(
                        "{host} ({} peers) lacks {}",
                        st.peers.len(),
                        lacks.join(" ")
                    ));
                }
            }
        }
        first_few(out)
    }

    fn judge(&self, s: &mut PoolSummary) {
        let mut f = std::mem::take(&mut s.failures);
        if s.mesh_formed_s.is_none() && !f.iter().any(|x| x.starts_with("no mesh")) {
            f.push("the mesh did not form".into());
        }
        if s.tier_accuracy < s.min_tier_accuracy {
            f.push(format!(
                "tier accuracy {:.3} < {}",
                s.tier_accuracy, s.min_tier_accuracy
            ));
        }
        if s.cpu_per_agent > s.max_cpu_per_agent {
            f.push(format!(
                "idle CPU per agent {:.3}% > {}%",
                s.cpu_per_agent, s.max_cpu_per_agent
            ));
        }
        if !s.churn.recovered {
            f.push(format!(
                "the pool did not recover from the churn within {:.0} s (departed dropped: {:?} s, joiners known: {:?} s{})",
                s.seconds * (1.0 - WINDOW_SHARE),
                s.churn.dead_dropped_s,
                s.churn.joiners_known_s,
                s.churn.who_kept_joiners_unknown(": ")
            ));
        }
        if !s.churn.left_exited {
            f.push("an agent told to leave did not exit within 30 s".into());
        }
        if s.churn.alive != s.churn.alive_expected {
            f.push(format!(
                "{} of {} agents still running at the end",
                s.churn.alive, s.churn.alive_expected
            ));
        }
        let servers_expected = s.peer_servers - usize::from(s.churn.peer_server_killed.is_some());
        if s.churn.peer_servers_alive != servers_expected {
            f.push(format!(
                "{} of {servers_expected} peer servers still running at the end",
                s.churn.peer_servers_alive
            ));
        }
        for n in s.load.iter().flat_map(|l| &l.nodes) {
            match &n.to_host {
                None => f.push(format!(
                    "the agent of the loaded node {} moved nothing within {:.0} s",
                    n.host,
                    s.load.as_ref().map_or(0.0, |l| l.timeout_s)
                )),
                Some(to) if n.to_loaded => f.push(format!(
                    "the agent of the loaded node {} moved its rank to {to}, itself loaded",
                    n.host
                )),
                Some(to) if !n.delivered => f.push(format!(
                    "the move from {} to {to} never reached the rank through pcmd",
                    n.host
                )),
                Some(_) => {}
            }
        }
        s.passed = f.is_empty();
        s.failures = f;
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn print_summary(s: &PoolSummary) {
    let opt = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{v:.1}"));
    println!(
        "pool: {} agents in {} sites, {} peer servers, {}",
        s.agents,
        s.sites,
        s.peer_servers,
        if s.node_cgroups {
            "a cgroup node per agent"
        } else {
            "every agent on the whole machine"
        }
    );
    println!(
        "  started {:.1} s, mesh ({} peers each) {} s, {} per tier {} s",
        s.started_s,
        s.mesh_target,
        opt(s.mesh_formed_s),
        s.per_tier,
        opt(s.k_per_tier_s)
    );
    println!(
        "  tier accuracy {:.3} over {} pairs (bound >= {})",
        s.tier_accuracy, s.tiers.pairs, s.min_tier_accuracy
    );
    for (tier, r) in &s.measured_rtt {
        println!(
            "    {tier:<9} nominal {:>5.0} ms, agents' srtt median {:>7.2} ms, max {:>7.2} ms ({} pairs)",
            s.nominal_rtt_ms.get(tier).copied().unwrap_or(f64::NAN),
            r.median_ms,
            r.max_ms,
            r.pairs
        );
    }
    println!(
        "  emulated links: the router forwarded {} packets and dropped {}; the kernel dropped {} on its links",
        s.router_packets, s.router_dropped, s.link_dropped
    );
    println!(
        "  idle window {:.1} s: agent CPU {:.3}% (max {:.3}%, bound {}%), pcmd {:.3}%, peer server {:.3}%, router {:.3}%",
        s.window_s, s.cpu_per_agent, s.cpu_per_agent_max, s.max_cpu_per_agent, s.cpu_per_pcmd, s.cpu_per_peer_server, s.cpu_router
    );
    println!(
        "  RSS agent {:.1} MB (max {:.1}), pcmd {:.1} MB, peer server {:.1} MB; {:.3} msgs/s and {:.0} B/s per agent",
        s.rss_mb_per_agent, s.rss_mb_per_agent_max, s.rss_mb_per_pcmd, s.rss_mb_per_peer_server, s.msgs_per_agent_s, s.bytes_per_agent_s
    );
    println!(
        "  after the window: {} of {} agents on a lightly loaded node (mean node load {:.3} cores)",
        s.light_agents, s.agents, s.node_cpu_load
    );
    let secs = |t: Option<f64>| t.map_or("none".to_owned(), |t| format!("{t:.1} s"));
    if let Some(sim) = &s.simulated {
        println!(
            "  fidelity: msgs/s per agent {:.3} real, {:.3} simulated; steals/s {:.3} real, {:.3} simulated; first steal {} real, {} simulated",
            s.msgs_per_agent_s, sim.msgs_per_agent_s, s.steals_per_agent_s, sim.steals_per_agent_s,
            secs(s.first_steal_s), secs(sim.first_steal_s)
        );
    }
    if let Some(l) = &s.load {
        let share = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{:.0}%", 100.0 * v));
        let moved = |nodes: &[LoadedNode]| nodes.iter().filter(|n| n.to_host.is_some()).count();
        println!(
            "  load on {} nodes from {:.1} s: moved {} real, {} simulated; first move (median) {} s real, {} s simulated; to the same site {} real, {} simulated",
            l.nodes.len(),
            l.started_s,
            moved(&l.nodes),
            moved(&l.simulated),
            opt(l.first_move_median_s),
            opt(l.simulated_first_move_median_s),
            share(l.local_share),
            share(l.simulated_local_share)
        );
    }
    println!(
        "  churn: {} left ({}), {} killed, {} joined, {}; departed dropped {} s, joiners known {} s; {} of {} agents alive",
        s.churn.left.len(),
        if s.churn.left_exited { "exited" } else { "NOT all exited" },
        s.churn.killed.len(),
        s.churn.joined.len(),
        s.churn.peer_server_killed.as_deref().unwrap_or("no peer server killed"),
        opt(s.churn.dead_dropped_s),
        opt(s.churn.joiners_known_s),
        s.churn.alive,
        s.churn.alive_expected
    );
    println!(
        "  {}{}",
        if s.passed { "PASS" } else { "MISS: " },
        s.failures.join("; ")
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn nominal_round_trips_fall_in_the_middle_of_their_tiers() {
        let tiers: Vec<LatencyTier> = (0..5)
            .map(|d| LatencyTier::from_rtt(nominal_rtt(d)))
            .collect();
        assert_eq!(
            tiers,
            [
                LatencyTier::Local,
                LatencyTier::Regional,
                LatencyTier::National,
                LatencyTier::Global,
                LatencyTier::Global
            ]
        );
        // Jitter of +-10% (more than the default 3%) and a few ms of scheduling keep each
        // in its tier.
        for d in 1..4 {
            let rtt = nominal_rtt(d);
            let tier = LatencyTier::from_rtt(rtt);
            assert_eq!(LatencyTier::from_rtt(rtt.mul_f64(0.9)), tier, "{d} steps");
            assert_eq!(
                LatencyTier::from_rtt(rtt.mul_f64(1.1) + Duration::from_millis(5)),
                tier,
                "{d} steps"
            );
        }
    }

    #[test]
    fn sites_on_a_line_give_the_truth_by_distance() {
        let m = delay_matrix(4).unwrap();
        assert_eq!(true_tier(&m, 2, 2), LatencyTier::Local);
        assert_eq!(true_tier(&m, 0, 1), LatencyTier::Regional);
        assert_eq!(true_tier(&m, 3, 2), LatencyTier::Regional);
        assert_eq!(true_tier(&m, 1, 3), LatencyTier::National);
        assert_eq!(true_tier(&m, 3, 0), LatencyTier::Global);
        assert_eq!(m.rtt(0, 3), m.rtt(3, 0));
        assert!(delay_matrix(0).is_err());
    }

    #[test]
    fn accuracy_counts_pairs_in_their_true_tier() {
        let mut c = TierCheck::default();
        assert_eq!(c.accuracy(), 0.0, "no pairs: nothing shown right");
        c.add("local", "local");
        c.add("regional", "regional");
        c.add("regional", "local");
        c.add("global", "global");
        assert_eq!(c.pairs, 4);
        assert_eq!(c.correct, 3);
        assert!((c.accuracy() - 0.75).abs() < 1e-12);
        assert_eq!(c.confusion["regional"]["local"], 1);
        assert_eq!(c.confusion["regional"]["regional"], 1);
    }

    #[test]
    fn tier_names_are_the_agents_status_names() {
        for t in LatencyTier::ALL {
            assert_eq!(tier_name(t), format!("{t:?}").to_lowercase());
        }
    }

    #[test]
    fn the_summary_reads_back_and_null_means_not_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let s = PoolSummary {
            agents: 3,
            mesh_formed_s: None,
            k_per_tier_s: Some(1.5),
            failures: vec!["x".into()],
            ..PoolSummary::default()
        };
        std::fs::write(
            dir.path().join(SUMMARY_FILE),
            serde_json::to_string(&s).unwrap(),
        )
        .unwrap();
        let text = std::fs::read_to_string(dir.path().join(SUMMARY_FILE)).unwrap();
        assert!(text.contains("\"mesh_formed_s\":null"), "{text}");
        assert_eq!(PoolSummary::read(dir.path()).unwrap(), s);
    }
}
