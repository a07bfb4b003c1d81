//! `mpi-ios-bench scale`: the unchanged agent core on pools of 100 to 10,000 simulated
//! nodes (issue 15), against random stealing, no balancing and a central oracle.
//!
//! Every configuration runs `ios_agent_core::sim` with the same pool: heterogeneous nodes
//! (1 to 8 cores, speeds 0.5 to 2), owners' background load (25% of the nodes on a
//! square wave, 15% with a step), 5% of the nodes joining and 5% leaving during the run,
//! and 2N/3 ranks in jobs of 8 sharing the pool, each job with one exchange pattern
//! (hypercube, tree, sparse ring, 2-D stencil, in turn). Two network models:
//!
//! - Internet-like: each pair's RTT drawn from the four tiers (2-10, 11-100, 101-250,
//!   251-400 ms), no structure; ranks of a job start on random nodes.
//! - Grid-like: clusters of 20 similar machines (same cores and speed), 1 ms inside, 20 to
//!   400 ms between clusters; a job starts inside one cluster.
//!
//! Strategies: NSp2p (the agents, default settings), NSc2c, random stealing (the same
//! agents told one RTT for every peer, so they steal from random peers with no tiers), no
//! balancing, and the oracle of [`ios_agent_core::sim::Balancer::Oracle`].
//!
//! With `--malleable` (issue 38) every configuration also runs on the same pool with a
//! share of its jobs malleable (`--malleable-share`, default half; which ones drawn from
//! the seed): limits 1 to twice the job's width, any width ([`MALLEABLE_MOST`]). The agents
//! grow and shrink them ([`ios_agent_core::resize`]), the oracle too
//! ([`ios_agent_core::sim::resize`]), and NSp2p also runs without resizes
//! ([`Strategy::NsP2pNoResize`], `Config::with_resizes(false)`), migrations only. Each
//! strategy's throughput is then given against the oracle of its own workload, with and
//! without malleable jobs, with the resizes per malleable job and hour and the resize
//! ping-pongs ([`Outcome::resize_ping_pongs`]). Without `--malleable` nothing changes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ios_agent_core::model::MigrationCostModel;
use ios_agent_core::sim::{Balancer, JobBreakdown, NodeSpec, Pattern, ResizeKind, Sim};
use ios_agent_core::{Config, Topology};

use crate::Table;

mod replay;
pub use replay::{fidelity, replay, Replay, REPLAYS};

/// The network model of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// RTTs drawn from the four tiers per pair, no structure.
    Internet,
    /// Clusters of [`CLUSTER`] similar machines, low latency inside, higher between.
    Grid,
}

impl Network {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Network::Internet => "Internet",
            Network::Grid => "Grid",
        }
    }
}

/// Who balances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Agents, NSp2p, default settings (a rank's demand capped at one core,
    /// [`ios_agent_core::agent::DEFAULT_ENTITY_CORES`]; the amortised cost term,
    /// [`ios_agent_core::model::CostTerm::Amortized`]), the ranks' profiles carrying their
    /// partners (the model's communication term, [`ios_agent_core::model::gain_near`]).
    NsP2p,
    /// [`Strategy::NsP2p`] without partner steals ([`Config::with_gather`]): work goes only
    /// between agents of one peer table, as before 2026-11-28.
    NsP2pNoGather,
    /// [`Strategy::NsP2p`] without partners in the profiles (no communication term, no
    /// partner steals).
    NsP2pNoComm,
    /// Agents, NSp2p, the paper's model: no cap on a rank's demand, Figure 3's cost term,
    /// no partners.
    Paper,
    /// Agents, NSc2c, default settings, partners in the profiles.
    NsC2c,
    /// Agents, NSp2p told the same RTT for every peer and no partners: random work
    /// stealing with the default model.
    Random,
    /// [`Strategy::Random`] with the paper's model (no cap).
    RandomPaper,
    /// No balancing.
    None,
    /// The central oracle.
    Oracle,
    /// [`Strategy::NsP2p`] without resizes (`Config::with_resizes(false)`): malleable jobs
    /// only migrated, as the others (issue 38's migration-only baseline).
    NsP2pNoResize,
    /// [`Strategy::NsP2p`] whose ranks take no step of gathering within their hold-down
    /// (`Config::with_gather_within_hold_down(false)`: every entity moves at most once per
    /// hold-down), the default before 2026-12-04 (issue 42: the first ten minutes).
    NsP2pHoldDown,
}

impl Strategy {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Strategy::NsP2p => "NSp2p",
            Strategy::NsP2pNoGather => "NSp2p-nogather",
            Strategy::NsP2pNoComm => "NSp2p-nocomm",
            Strategy::Paper => "NSp2p-paper",
            Strategy::NsC2c => "NSc2c",
            Strategy::Random => "random",
            Strategy::RandomPaper => "random-paper",
            Strategy::None => "none",
            Strategy::Oracle => "oracle",
            Strategy::NsP2pNoResize => "NSp2p-noresize",
            Strategy::NsP2pHoldDown => "NSp2p-holddown",
        }
    }

    /// The strategy a `--strategies` name stands for (any case), or `None`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "nsp2p" | "p2p" => Strategy::NsP2p,
            "nsp2p-paper" | "paper" => Strategy::Paper,
            "nsp2p-nocomm" | "nocomm" => Strategy::NsP2pNoComm,
            "nsp2p-nogather" | "nogather" => Strategy::NsP2pNoGather,
            "nsc2c" | "c2c" => Strategy::NsC2c,
            "random" => Strategy::Random,
            "random-paper" => Strategy::RandomPaper,
            "none" => Strategy::None,
            "oracle" => Strategy::Oracle,
            "nsp2p-noresize" | "noresize" | "migration-only" => Strategy::NsP2pNoResize,
            "nsp2p-holddown" | "holddown" => Strategy::NsP2pHoldDown,
            _ => return None,
        })
    }
}

/// Machines per cluster of the Grid-like network.
pub const CLUSTER: usize = 20;
/// Ranks per job.
pub const JOB_RANKS: usize = 8;
/// A malleable job's greatest width, as a multiple of its width at the start (its least
/// is 1, any width between).
pub const MALLEABLE_MOST: u32 = 2;
/// Period of the oracle's placement.
pub const ORACLE_PERIOD: Duration = Duration::from_secs(10);
/// Peers an agent keeps in the scale runs unless `--max-peers` says otherwise (the agents'
/// default is 256; 64 keeps the 10,000-node hours within the simulator's time target).
pub const SCALE_MAX_PEERS: usize = 64;
/// New peers an agent measures per RTT round (peer-server discovery).
pub const DISCOVERY_PER_ROUND: usize = 4;
/// RTT round period in the scale runs (libp2p ping's default interval is 15 s).
pub const SCALE_RTT_PERIOD: Duration = Duration::from_secs(15);

fn hash(a: u64, b: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 29;
    x.wrapping_mul(0x94D0_49BB_1331_11EB) ^ (x >> 32)
}

/// A number in [0, 1) from a hash.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// One RTT tier's range in ms, drawn from `h`.
fn tier_rtt(tier: u64, h: u64) -> Duration {
    let (lo, hi) = match tier {
        0 => (2.0, 10.0),
        1 => (11.0, 100.0),
        2 => (101.0, 250.0),
        _ => (251.0, 400.0),
    };
    Duration::from_secs_f64((lo + (hi - lo) * unit(h)) / 1000.0)
}

/// One configuration's pool, reproducible from the seed.
#[derive(Debug, Clone, Copy)]
pub struct Pool {
    /// Nodes at the start (joins come on top).
    pub nodes: usize,
    /// Network model.
    pub network: Network,
    /// Seed.
    pub seed: u64,
    /// Simulated length.
    pub length: Duration,
    /// See [`ScaleArgs::waiting_as_idle`].
    pub waiting_as_idle: bool,
    /// See [`ScaleArgs::one_request_per_reconfiguration`].
    pub one_request_per_reconfiguration: bool,
    /// See [`ScaleArgs::refused_while_moving`].
    pub refused_while_moving: bool,
    /// Peers each agent keeps (see [`ScaleArgs::max_peers`]).
    pub max_peers: usize,
    /// Share of the jobs that are malleable (0: none, the workload of issue 15).
    pub malleable_share: f64,
    /// See [`ScaleArgs::trace_jobs`].
    pub trace_jobs: bool,
}

impl Pool {
    fn rtt(&self) -> impl Fn(usize, usize) -> Duration + 'static {
        let seed = self.seed;
        let network = self.network;
        move |i, j| match network {
            Network::Internet => {
                let h = hash(seed ^ i as u64, j as u64);
                // Tier and place in the tier from independent bits (`unit` reads the top 53
                // bits: a shifted hash would keep every RTT at its tier's lower end).
                tier_rtt(h % 4, hash(h, 5))
            }
            Network::Grid => {
                let (a, b) = (i / CLUSTER, j / CLUSTER);
                if a == b {
                    Duration::from_millis(1)
                } else {
                    let (a, b) = (a.min(b), a.max(b));
                    let h = hash(seed ^ (a as u64) << 1, b as u64);
                    let ms = 20.0 + 380.0 * unit(h);
                    Duration::from_secs_f64(ms / 1000.0)
                }
            }
        }
    }

    /// Node `i`'s cores (1, 2, 4 or 8) and speed (0.5 to 2): its own on the Internet-like
    /// network, its cluster's on the Grid-like one.
    fn machine(&self, i: usize) -> (f64, f64) {
        let machine = match self.network {
            Network::Internet => hash(self.seed.wrapping_add(77), i as u64),
            Network::Grid => hash(self.seed.wrapping_add(78), (i / CLUSTER) as u64),
        };
        let cores = [1.0, 2.0, 4.0, 8.0][(machine % 4) as usize];
        // From bits independent of the cores' (`unit` reads the top 53 bits of its
        // argument: until 2026-11-28 (evening) a shifted hash kept every speed in [0.5, 0.69)).
        let speed = 0.5 + 1.5 * unit(hash(machine, 6));
        (cores, speed)
    }

    fn spec(&self, i: usize) -> NodeSpec {
        let h = hash(self.seed.wrapping_add(77), i as u64);
        let (cores, speed) = self.machine(i);
        let kind = unit(hash(h, 1));
        let phase = unit(hash(h, 2)) * 1200.0;
        let length = self.length.as_secs_f64();
        let mut spec = NodeSpec::new(cores).with_speed(speed);
        if kind < 0.25 {
            // An owner at the machine on and off, in spells of 5 to 15 minutes.
            let spell = 300.0 + 600.0 * unit(hash(h, 3));
            spec = spec.with_background(move |t| {
                if ((t.as_secs_f64() + phase) / spell) as u64 % 2 == 0 {
                    cores
                } else {
                    0.0
                }
            });
        } else if let Some(at) = self.step_onset(i) {
            // A load that starts once and stays.
            let at = at.as_secs_f64();
            spec = spec.with_background(move |t| if t.as_secs_f64() >= at { cores } else { 0.0 });
        }
        let _ = length;
        spec
    }

    /// When node `i`'s step load starts, if it has one (15% of the nodes).
    fn step_onset(&self, i: usize) -> Option<Duration> {
        let h = hash(self.seed.wrapping_add(77), i as u64);
        let kind = unit(hash(h, 1));
        (0.25..0.40)
            .contains(&kind)
            .then(|| self.length.mul_f64(unit(hash(h, 4))))
    }

    /// Nodes that join during the run (5%), with when.
    fn joins(&self) -> Vec<Duration> {
        let n = self.nodes / 20;
        (0..n)
            .map(|k| {
                self.length
                    .mul_f64(0.1 + 0.8 * unit(hash(self.seed ^ 0x101, k as u64)))
            })
            .collect()
    }

    /// Which of `jobs` jobs are malleable: `round(share x jobs)` of them, drawn from the
    /// seed.
    fn malleable_jobs(&self, jobs: usize) -> Vec<bool> {
        let mut malleable = vec![false; jobs];
        if self.malleable_share <= 0.0 {
            return malleable;
        }
        let mut order: Vec<usize> = (0..jobs).collect();
        order.sort_by_key(|&j| (hash(self.seed ^ 0x606, j as u64), j));
        let count = (self.malleable_share * jobs as f64).round() as usize;
        for &j in order.iter().take(count) {
            malleable[j] = true;
        }
        malleable
    }

    /// Nodes that leave during the run (5%), with when.
    fn leaves(&self) -> Vec<(usize, Duration)> {
        let n = self.nodes / 20;
        (0..n)
            .map(|k| {
                let node = (hash(self.seed ^ 0x202, k as u64) % self.nodes as u64) as usize;
                let at = self
                    .length
                    .mul_f64(0.1 + 0.8 * unit(hash(self.seed ^ 0x303, k as u64)));
                (node, at)
            })
            .collect()
    }
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Seed of the pool and of the agents.
    pub seed: u64,
    /// Strategy.
    pub strategy: Strategy,
    /// Network.
    pub network: Network,
    /// Nodes at the start.
    pub nodes: usize,
    /// Iterations done by all jobs.
    pub iterations: f64,
    /// Iterations by pattern (hypercube, tree, sparse, stencil).
    pub by_pattern: [f64; 4],
    /// Iterations per second of the hypercube and tree jobs, per minute.
    pub series: Vec<[f64; 2]>,
    /// Completed migrations at the end of each minute.
    pub migrations_by_minute: Vec<usize>,
    /// Iterations of all jobs so far at the end of each minute.
    pub iterations_by_minute: Vec<f64>,
    /// Completed migrations.
    pub migrations: usize,
    /// Entities.
    pub entities: usize,
    /// Largest number of moves of one entity within one hold-down period (moves off a
    /// leaving node, which have no hold-down, left out).
    pub max_moves_per_hold_down: usize,
    /// Moves back to the node an entity left, within two hold-down periods.
    pub ping_pongs: usize,
    /// Protocol messages and their CBOR bytes.
    pub messages: u64,
    /// CBOR bytes of the messages.
    pub bytes: u64,
    /// Messages and their CBOR bytes by kind (`Message::kind`).
    pub by_kind: Vec<(&'static str, u64, u64)>,
    /// Median seconds from a node's join to the first rank arriving there (joins that got
    /// none are left out), and how many got one.
    pub join_to_work: Option<f64>,
    /// Joined nodes that got work.
    pub joins_served: usize,
    /// Joined nodes.
    pub joins: usize,
    /// Median seconds from a step load's onset to the first rank moving off that node, over
    /// the nodes that held ranks then and shed one.
    pub load_to_shed: Option<f64>,
    /// Step-loaded nodes that shed a rank, and those that held ranks at the onset.
    pub sheds: (usize, usize),
    /// Simulated seconds.
    pub seconds: f64,
    /// Wall-clock seconds of the simulation.
    pub wall: f64,
    /// CPU seconds of the simulation (wall time on a shared machine overstates it).
    pub cpu: f64,
    /// Peak resident memory of this process so far, bytes.
    pub peak_rss: u64,
    /// Where the jobs' iterations went at the end of the run.
    pub placement: Placement,
    /// Share of the jobs that were malleable ([`Pool::malleable_share`]).
    pub malleable_share: f64,
    /// Jobs.
    pub jobs: usize,
    /// Malleable jobs.
    pub malleable_jobs: usize,
    /// Resizes completed that grew a job.
    pub grows: usize,
    /// Resizes completed that shrank a job (forced ones included).
    pub shrinks: usize,
    /// Shrinks off nodes leaving the pool (all their departing ranks there).
    pub forced_shrinks: usize,
    /// Resizes asked and refused (nothing changed).
    pub resizes_refused: usize,
    /// A job grown and shrunk back, or shrunk and grown back, within its hold-down (issue
    /// 38's "no resize ping-pong"; shrinks off a leaving node left out).
    pub resize_ping_pongs: usize,
    /// The same within two hold-downs, the window of moves' returns
    /// ([`Outcome::ping_pongs`]).
    pub resize_reversals: usize,
    /// Mean width of the malleable jobs at the end (0 without any).
    pub malleable_width: f64,
    /// Mean speed of the nodes completed grows added ranks onto, per added rank (`None`
    /// without grows): the oracle grows onto the fast nodes of the pool, the agents onto
    /// the idle node that asked (issue 38: 1.56 against 1.29 at 100 nodes).
    pub grown_onto_speed: Option<f64>,
    /// Malleable jobs wider than they started, over the minutes after the tenth: mean
    /// seconds per iteration their slowest rank computes, and their exchanges wait on
    /// latency (`None` if none was). Where a strategy's grown jobs lose against the
    /// oracle's: slow nodes, or far pairs.
    pub wider_jobs: Option<(f64, f64)>,
}

/// Prints, on stderr, where each job runs at `minute` and what its iteration spends (the
/// slowest rank's compute, the latency of its exchanges), with each node's cores and
/// speed and how many ranks of all jobs it runs: for a person finding where a strategy
/// loses against the oracle (`scale --trace-jobs`).
fn trace_jobs(pool: &Pool, strategy: Strategy, minute: u64, sim: &Sim, malleable: &[bool]) {
    for (j, b) in sim.job_breakdown().iter().enumerate() {
        let name = format!("job{j}");
        let ranks = sim.job_ranks(&name);
        let mut nodes: Vec<usize> = ranks.iter().map(|(_, n)| *n).collect();
        nodes.sort_unstable();
        let mut places = Vec::new();
        for node in nodes.chunk_by(|a, b| a == b) {
            let (cores, speed) = pool.machine(node[0]);
            places.push(format!(
                "n{} ({} here; {cores} cores x {speed:.2}, {} ranks in all)",
                node[0],
                node.len(),
                sim.count_on(node[0])
            ));
        }
        eprintln!(
            "scale: trace {} {} nodes {}{} minute {minute}: {name} {}{}, {} ranks on {} nodes: compute {:.1} ms, latency {:.1} ms an iteration; {}",
            pool.network.name(),
            pool.nodes,
            strategy.name(),
            if pool.malleable_share > 0.0 { " (malleable)" } else { "" },
            b.pattern.name(),
            if malleable.get(j).copied().unwrap_or(false) { ", malleable" } else { "" },
            ranks.len(),
            b.nodes,
            b.compute * 1e3,
            b.exchange * 1e3,
            places.join(", ")
        );
    }
}

/// The jobs at the end of a run, averaged over jobs: how spread they are and what an
/// iteration spends computing and waiting on latency. It tells whether a strategy behind
/// the oracle lost on compute (slow or shared nodes) or on latency (jobs left spread).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    /// Distinct nodes per job.
    pub nodes_per_job: f64,
    /// Seconds the slowest rank computes per iteration.
    pub compute: f64,
    /// Seconds per iteration the exchanges wait on latency.
    pub exchange: f64,
    /// Jobs whose exchanges wait more than 30 ms per iteration (a far pair).
    pub far_jobs: usize,
    /// Jobs.
    pub jobs: usize,
}

impl Placement {
    /// Far: more latency per iteration than a hypercube's three rounds within the local
    /// tier (10 ms RTT, 5 ms each way) could add up to, with room.
    const FAR_EXCHANGE: f64 = 0.03;

    fn of(jobs: &[JobBreakdown]) -> Self {
        let n = jobs.len().max(1) as f64;
        let mean = |f: fn(&JobBreakdown) -> f64| jobs.iter().map(f).sum::<f64>() / n;
        Placement {
            nodes_per_job: mean(|j| j.nodes as f64),
            compute: mean(|j| j.compute),
            exchange: mean(|j| j.exchange),
            far_jobs: jobs
                .iter()
                .filter(|j| j.exchange > Self::FAR_EXCHANGE)
                .count(),
            jobs: jobs.len(),
        }
    }
}

impl Outcome {
    /// The strategy's name, marked when the workload had malleable jobs.
    pub fn label(&self) -> String {
        if self.malleable_share > 0.0 {
            format!("{} (malleable)", self.strategy.name())
        } else {
            self.strategy.name().to_owned()
        }
    }

    /// Whether `other` ran on the same pool and workload (seed aside).
    pub fn same_pool(&self, other: &Outcome) -> bool {
        self.network == other.network
            && self.nodes == other.nodes
            && self.malleable_share == other.malleable_share
    }

    /// Resizes per malleable job and hour: (grows, shrinks).
    pub fn resizes_per_job_hour(&self) -> (f64, f64) {
        let per = |n: usize| n as f64 / self.malleable_jobs.max(1) as f64 / (self.seconds / 3600.0);
        (per(self.grows), per(self.shrinks))
    }

    /// Messages per node and second.
    pub fn messages_per_node_second(&self) -> f64 {
        self.messages as f64 / (self.nodes as f64 * self.seconds)
    }
}

/// CPU seconds (user + system) the calling thread has used so far, from
/// /proc/thread-self/stat: one simulation runs on one thread, and `--seeds` runs several
/// side by side in one process.
pub fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start at ')'.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    // USER_HZ is 100 on the Linux architectures this runs on.
    ticks / 100.0
}

/// Peak resident set of this process (VmHWM), bytes.
pub fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Agent settings of the scale runs, with peer tables of `max_peers`.
pub fn agent_config(strategy: Strategy, max_peers: usize) -> Config {
    let config = Config::default().with_max_peers(max_peers);
    match strategy {
        Strategy::NsC2c => config.with_topology(Topology::ClusterToCluster),
        Strategy::NsP2pNoGather => config.with_gather(false),
        Strategy::NsP2pNoResize => config.with_resizes(false),
        Strategy::NsP2pHoldDown => config.with_gather_within_hold_down(false),
        Strategy::Paper | Strategy::RandomPaper => config
            .with_entity_cores(None)
            .with_cost_model(MigrationCostModel::paper()),
        _ => config,
    }
}

/// Runs one configuration.
pub fn run_one(pool: Pool, strategy: Strategy) -> Outcome {
    let config = agent_config(strategy, pool.max_peers);
    let hold_down = config.hold_down();
    let balancer = match strategy {
        Strategy::None => Balancer::None,
        Strategy::Oracle => Balancer::Oracle {
            period: ORACLE_PERIOD,
        },
        _ => Balancer::Agents,
    };
    let mut sim = Sim::new(pool.seed, config)
        .with_rtt_model(pool.rtt())
        .with_balancer(balancer)
        .with_discovery(DISCOVERY_PER_ROUND)
        .with_rtt_period(SCALE_RTT_PERIOD);
    if pool.waiting_as_idle {
        sim = sim.with_waiting_as_idle();
    }
    if pool.one_request_per_reconfiguration {
        sim = sim.with_one_request_per_reconfiguration();
    }
    if pool.refused_while_moving {
        sim = sim.with_requests_refused_while_moving();
    }
    if matches!(strategy, Strategy::Random | Strategy::RandomPaper) {
        sim = sim.with_reported_rtt(Duration::from_millis(1));
    }
    if matches!(
        strategy,
        Strategy::NsP2p
            | Strategy::NsP2pNoGather
            | Strategy::NsC2c
            | Strategy::NsP2pNoResize
            | Strategy::NsP2pHoldDown
    ) {
        sim = sim.with_partners();
    }
    for i in 0..pool.nodes {
        sim.add_node(pool.spec(i));
    }
    // Jobs of 8 ranks, 2N/3 ranks in all; patterns in turn.
    let entities = 2 * pool.nodes / 3;
    let jobs = entities.div_ceil(JOB_RANKS);
    let clusters = pool.nodes.div_ceil(CLUSTER).max(1);
    let malleable = pool.malleable_jobs(jobs);
    let mut malleable_names = Vec::new();
    for (j, &is_malleable) in malleable.iter().enumerate() {
        let name = format!("job{j}");
        let home = (hash(pool.seed ^ 0x404, j as u64) % clusters as u64) as usize;
        for r in 0..JOB_RANKS.min(entities - j * JOB_RANKS) {
            let h = hash(pool.seed ^ 0x505, (j * JOB_RANKS + r) as u64);
            let node = match pool.network {
                Network::Internet => (h % pool.nodes as u64) as usize,
                Network::Grid => {
                    let size = CLUSTER.min(pool.nodes - home * CLUSTER);
                    home * CLUSTER + (h % size as u64) as usize
                }
            };
            sim.add_entity(node, &name, r as u32, 64 << 20);
        }
        sim.set_pattern(&name, Pattern::COMMUNICATING[j % 4]);
        if is_malleable {
            let width = JOB_RANKS.min(entities - j * JOB_RANKS) as u32;
            let limits = pcm_proto::Malleability::new(1, MALLEABLE_MOST * width)
                .expect("1 <= width <= twice the width");
            sim.set_malleable(&name, limits);
            malleable_names.push(name);
        }
    }
    let initial: Vec<usize> = (0..pool.nodes).map(|i| sim.count_on(i)).collect();
    // Compute and exchange seconds of the malleable jobs wider than they started, summed
    // over job-minutes after the tenth, and the job-minutes (`Outcome::wider_jobs`).
    let mut wider = (0.0, 0.0, 0usize);
    let mut joins: Vec<(Duration, usize)> = Vec::new();
    let mut pending_joins = pool.joins();
    pending_joins.sort();
    let mut leaves = pool.leaves();
    leaves.sort_by_key(|(_, at)| *at);
    // When each node started leaving (moves off it are forced: no hold-down).
    let mut left: HashMap<usize, Duration> = HashMap::new();
    let minute = Duration::from_secs(60);
    let mut series = Vec::new();
    let mut migrations_by_minute = Vec::new();
    let mut iterations_by_minute = Vec::new();
    let mut last = [0.0; 2];
    let wall = Instant::now();
    let cpu = cpu_seconds();
    let steps = (pool.length.as_secs() / 60).max(1);
    for m in 0..steps {
        let start = minute * m as u32;
        let end = start + minute;
        // Joins and leaves due in this minute, at its start (the sim runs in minutes).
        while pending_joins.first().is_some_and(|at| *at < end) {
            let at = pending_joins.remove(0);
            let index = sim.node_count();
            let node = sim.add_node(pool.spec(index));
            joins.push((at.max(start), node));
        }
        while leaves.first().is_some_and(|(_, at)| *at < end) {
            let (node, _) = leaves.remove(0);
            left.entry(node).or_insert(start);
            sim.leave(node);
        }
        sim.run_for(minute);
        if !malleable_names.is_empty() && m >= 10 {
            for (j, b) in sim.job_breakdown().iter().enumerate() {
                let started = JOB_RANKS.min(entities - j * JOB_RANKS);
                if malleable[j] && sim.job_ranks(&format!("job{j}")).len() > started {
                    wider.0 += b.compute;
                    wider.1 += b.exchange;
                    wider.2 += 1;
                }
            }
        }
        if pool.trace_jobs && (m + 1) % 10 == 0 {
            trace_jobs(&pool, strategy, m + 1, &sim, &malleable);
        }
        let now = [
            sim.iterations_of(Pattern::Hypercube),
            sim.iterations_of(Pattern::Tree),
        ];
        series.push([(now[0] - last[0]) / 60.0, (now[1] - last[1]) / 60.0]);
        migrations_by_minute.push(sim.migrations().len());
        iterations_by_minute.push(sim.iterations());
        last = now;
        // Progress every 10 simulated minutes: a long run (10,000 nodes) that has to be
        // stopped still leaves its cost per simulated minute on record.
        if (m + 1) % 10 == 0 && m + 1 < steps {
            eprintln!(
                "scale: progress {} {} nodes {}: minute {}, {:.0} iterations, {} migrations, {} messages, wall {:.1} s, cpu {:.1} s, peak RSS {} MB",
                pool.network.name(),
                pool.nodes,
                strategy.name(),
                m + 1,
                sim.iterations(),
                sim.migrations().len(),
                sim.messages().messages,
                wall.elapsed().as_secs_f64(),
                cpu_seconds() - cpu,
                peak_rss() / 1_000_000
            );
        }
    }
    let placement = Placement::of(&sim.job_breakdown());
    let wall = wall.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    let moves = sim.migrations();
    // Thrashing: moves of one entity within a hold-down, and returns; moves off a leaving
    // node are forced and not counted. Entities by index: a resize renumbers a job's ranks.
    let mut by_entity: HashMap<usize, Vec<(Duration, usize, usize)>> = HashMap::new();
    for m in moves
        .iter()
        .filter(|m| left.get(&m.from).is_none_or(|at| m.at < *at))
    {
        by_entity
            .entry(m.entity_index)
            .or_default()
            .push((m.at, m.from, m.to));
    }
    let mut max_in_window = 0;
    let mut ping_pongs = 0;
    for list in by_entity.values() {
        for (i, (at, _, _)) in list.iter().enumerate() {
            let n = list[i..]
                .iter()
                .take_while(|(t, _, _)| *t < *at + hold_down)
                .count();
            max_in_window = max_in_window.max(n);
        }
        for w in list.windows(2) {
            if w[1].2 == w[0].1 && w[1].0 < w[0].0 + hold_down * 2 {
                ping_pongs += 1;
            }
        }
    }
    let resizes: Vec<_> = sim.resizes().iter().filter(|r| r.completed()).collect();
    let grows = |node: usize| {
        resizes
            .iter()
            .filter(move |r| r.kind() == ResizeKind::Grow && r.nodes.contains(&node))
    };
    let mut waits: Vec<f64> = joins
        .iter()
        .filter_map(|&(at, node)| {
            let moved = moves.iter().find(|m| m.to == node).map(|m| m.at);
            let grown = grows(node).next().map(|r| r.at);
            let first = match (moved, grown) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            first.map(|t| t.saturating_sub(at).as_secs_f64())
        })
        .collect();
    waits.sort_by(f64::total_cmp);
    // Reaction to a load change: step-loaded nodes that held ranks at the onset.
    let mut changes: HashMap<usize, Vec<(Duration, i64)>> = HashMap::new();
    for m in moves {
        changes.entry(m.from).or_default().push((m.at, -1));
        changes.entry(m.to).or_default().push((m.at, 1));
    }
    for r in &resizes {
        let d = if r.kind() == ResizeKind::Grow { 1 } else { -1 };
        for &n in &r.nodes {
            changes.entry(n).or_default().push((r.at, d));
        }
    }
    for v in changes.values_mut() {
        v.sort_by_key(|(t, _)| *t);
    }
    let count_at = |i: usize, at: Duration| -> i64 {
        let base = initial.get(i).copied().unwrap_or(0) as i64;
        base + changes.get(&i).map_or(0, |v| {
            v.iter()
                .take_while(|(t, _)| *t < at)
                .map(|(_, d)| d)
                .sum::<i64>()
        })
    };
    let mut held_at_onset = 0;
    let mut sheds: Vec<f64> = Vec::new();
    for i in 0..pool.nodes {
        let Some(at) = pool.step_onset(i).filter(|at| *at < pool.length) else {
            continue;
        };
        if count_at(i, at) <= 0 {
            continue;
        }
        held_at_onset += 1;
        let moved = moves
            .iter()
            .find(|m| m.from == i && m.at >= at)
            .map(|m| m.at);
        let shrunk = resizes
            .iter()
            .find(|r| r.kind() == ResizeKind::Shrink && r.at >= at && r.nodes.contains(&i))
            .map(|r| r.at);
        let first = match (moved, shrunk) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(t) = first {
            sheds.push((t - at).as_secs_f64());
        }
    }
    sheds.sort_by(f64::total_cmp);
    // Resizes: grown and shrunk back (or the reverse) within one and two hold-downs.
    let mut by_job: HashMap<&str, Vec<(Duration, ResizeKind)>> = HashMap::new();
    for r in resizes.iter().filter(|r| !r.forced) {
        by_job
            .entry(r.job.as_str())
            .or_default()
            .push((r.at, r.kind()));
    }
    let reversals = |window: Duration| -> usize {
        by_job
            .values()
            .map(|list| {
                list.windows(2)
                    .filter(|w| w[1].1 != w[0].1 && w[1].0 < w[0].0 + window)
                    .count()
            })
            .sum()
    };
    let widths: Vec<usize> = malleable_names
        .iter()
        .map(|name| sim.job_ranks(name).len())
        .collect();
    let counts = sim.messages();
    let grown_onto: Vec<f64> = resizes
        .iter()
        .filter(|r| r.kind() == ResizeKind::Grow)
        .flat_map(|r| r.nodes.iter().map(|&n| pool.machine(n).1))
        .collect();
    Outcome {
        seed: pool.seed,
        strategy,
        network: pool.network,
        nodes: pool.nodes,
        iterations: sim.iterations(),
        by_pattern: [
            sim.iterations_of(Pattern::Hypercube),
            sim.iterations_of(Pattern::Tree),
            sim.iterations_of(Pattern::Sparse),
            sim.iterations_of(Pattern::Stencil),
        ],
        series,
        migrations_by_minute,
        iterations_by_minute,
        migrations: moves.len(),
        entities: sim.entity_count(),
        max_moves_per_hold_down: max_in_window,
        ping_pongs,
        messages: counts.messages,
        bytes: counts.bytes,
        by_kind: counts
            .by_kind
            .iter()
            .map(|(k, (n, b))| (*k, *n, *b))
            .collect(),
        join_to_work: (!waits.is_empty()).then(|| waits[waits.len() / 2]),
        joins_served: waits.len(),
        joins: joins.len(),
        load_to_shed: (!sheds.is_empty()).then(|| sheds[sheds.len() / 2]),
        sheds: (sheds.len(), held_at_onset),
        seconds: sim.elapsed().as_secs_f64(),
        wall,
        cpu,
        peak_rss: peak_rss(),
        placement,
        malleable_share: pool.malleable_share,
        jobs,
        malleable_jobs: malleable_names.len(),
        grows: resizes
            .iter()
            .filter(|r| r.kind() == ResizeKind::Grow)
            .count(),
        shrinks: resizes
            .iter()
            .filter(|r| r.kind() == ResizeKind::Shrink)
            .count(),
        forced_shrinks: resizes.iter().filter(|r| r.forced).count(),
        resizes_refused: sim.resizes().iter().filter(|r| !r.completed()).count(),
        resize_ping_pongs: reversals(hold_down),
        resize_reversals: reversals(hold_down * 2),
        malleable_width: if widths.is_empty() {
            0.0
        } else {
            widths.iter().sum::<usize>() as f64 / widths.len() as f64
        },
        grown_onto_speed: (!grown_onto.is_empty())
            .then(|| grown_onto.iter().sum::<f64>() / grown_onto.len() as f64),
        wider_jobs: (wider.2 > 0).then(|| (wider.0 / wider.2 as f64, wider.1 / wider.2 as f64)),
    }
}

fn f(v: f64, digits: usize) -> String {
    format!("{v:.digits$}")
}

/// The table of a set of runs: one row per run, ratios against the oracle of the same pool.
pub fn table(outcomes: &[Outcome]) -> Table {
    let mut t = Table::new(&[
        "network",
        "nodes",
        "strategy",
        "thr/oracle",
        "hypercube/oracle",
        "sparse/oracle",
        "moves/entity/h",
        "max moves in hold-down",
        "ping-pongs",
        "msgs/node/s",
        "bytes/node/s",
        "join->work (s)",
        "load->shed (s)",
        "wall (s)",
        "cpu (s)",
        "peak RSS (MB)",
    ]);
    for o in outcomes {
        let oracle = outcomes
            .iter()
            .find(|x| x.strategy == Strategy::Oracle && x.same_pool(o));
        let ratio = |a: f64, b: Option<f64>| {
            b.filter(|b| *b > 0.0)
                .map_or("-".to_owned(), |b| f(a / b, 2))
        };
        let hours = o.seconds / 3600.0;
        t.push(vec![
            o.network.name().to_owned(),
            o.nodes.to_string(),
            o.label(),
            ratio(o.iterations, oracle.map(|x| x.iterations)),
            ratio(o.by_pattern[0], oracle.map(|x| x.by_pattern[0])),
            ratio(o.by_pattern[2], oracle.map(|x| x.by_pattern[2])),
            f(o.migrations as f64 / o.entities.max(1) as f64 / hours, 2),
            o.max_moves_per_hold_down.to_string(),
            o.ping_pongs.to_string(),
            f(o.messages_per_node_second(), 3),
            f(o.bytes as f64 / (o.nodes as f64 * o.seconds), 0),
            match o.join_to_work {
                Some(s) => format!("{} ({}/{})", f(s, 0), o.joins_served, o.joins),
                None => format!("- (0/{})", o.joins),
            },
            match o.load_to_shed {
                Some(s) => format!("{} ({}/{})", f(s, 0), o.sheds.0, o.sheds.1),
                None => format!("- (0/{})", o.sheds.1),
            },
            f(o.wall, 1),
            f(o.cpu, 1),
            f(o.peak_rss as f64 / 1e6, 0),
        ]);
    }
    t
}

/// Where the jobs' iterations went at the end of each run ([`Placement`]).
pub fn placement_table(outcomes: &[Outcome]) -> Table {
    let mut t = Table::new(&[
        "network",
        "nodes",
        "strategy",
        "nodes/job",
        "compute (ms/iter)",
        "latency (ms/iter)",
        "jobs with a far pair",
    ]);
    for o in outcomes {
        let p = &o.placement;
        t.push(vec![
            o.network.name().to_owned(),
            o.nodes.to_string(),
            o.label(),
            f(p.nodes_per_job, 2),
            f(p.compute * 1e3, 0),
            f(p.exchange * 1e3, 0),
            format!("{}/{}", p.far_jobs, p.jobs),
        ]);
    }
    t
}

/// The target ratios of issue 15, from a set of runs, as lines.
pub fn targets(outcomes: &[Outcome]) -> Vec<String> {
    let mut out = Vec::new();
    let find = |s: Strategy, n: Network, nodes: usize| {
        outcomes.iter().find(|o| {
            o.strategy == s && o.network == n && o.nodes == nodes && o.malleable_share == 0.0
        })
    };
    let mut sizes: Vec<usize> = outcomes.iter().map(|o| o.nodes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for &nodes in &sizes {
        for (s, n) in [
            (Strategy::NsP2p, Network::Internet),
            (Strategy::NsP2p, Network::Grid),
            (Strategy::NsC2c, Network::Grid),
            (Strategy::Paper, Network::Internet),
        ] {
            if let (Some(a), Some(o)) = (find(s, n, nodes), find(Strategy::Oracle, n, nodes)) {
                out.push(format!(
                    "{nodes} nodes, {}: {} / oracle = {:.2} (target >= 0.90)",
                    n.name(),
                    s.name(),
                    a.iterations / o.iterations
                ));
            }
        }
        for n in [Network::Internet, Network::Grid] {
            for (s, random) in [
                (Strategy::NsP2p, Strategy::Random),
                (Strategy::NsC2c, Strategy::Random),
                (Strategy::Paper, Strategy::RandomPaper),
            ] {
                if let (Some(a), Some(r)) = (find(s, n, nodes), find(random, n, nodes)) {
                    out.push(format!(
                        "{nodes} nodes, {}: {} / {} on hypercube = {:.2}, on sparse = {:.2} (target >= 2)",
                        n.name(),
                        s.name(),
                        random.name(),
                        a.by_pattern[0] / r.by_pattern[0],
                        a.by_pattern[2] / r.by_pattern[2]
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
