//! [`NodeSensor`]: the capacity and load of the node a process is on.
//!
//! # What "the node" is
//!
//! The node is the cgroup that bounds the process's CPU: of the process's CPU cgroup and its
//! ancestors, the one with the smallest cap (v1 `cpu.cfs_quota_us / cpu.cfs_period_us`, v2
//! `cpu.max`). An emulated node (`/sys/fs/cgroup/cpu/mpi-ios-NAME`) is such a cgroup, holding
//! its agent, its pcmd and its ranks. Everything inside it competes for its cap, so the load
//! is read over all the threads in it and its descendants. When no cgroup caps the process
//! (a real host), the node is the whole machine.
//!
//! # What is measured, over the period since the previous sample
//!
//! - `cores`: the cap, or the CPUs the process may run on (`Cpus_allowed_list`, so a cpuset
//!   counts), whichever is smaller.
//! - `used`: CPUs used on average. Cgroup: `cpuacct.usage` (v1) or `cpu.stat usage_usec`
//!   (v2) of the node's cgroup when the accounting hierarchy has the same cgroup, else the
//!   sum over its threads. Machine: `/proc/stat`.
//! - `demand`: runnable threads on average, i.e. the sum over the node's threads of (time on a
//!   CPU + time runnable but waiting) / period, from `/proc/TID/schedstat`. Time a thread
//!   waits because its cgroup is throttled counts as waiting (measured: a busy loop in a
//!   0.5-CPU cgroup shows 1.0 s running and 1.0 s waiting over 2 s), so a busy loop counts
//!   as 1.0 whatever the cap: `demand > cores` means the node is overloaded. A thread seen for
//!   the first time counts only if it started during the period (otherwise its counters hold
//!   time spent elsewhere). In a machine scope the threads are the whole process table's,
//!   and reading it costs in proportion to it (about 4 us a thread: 0.2% of a core every
//!   second at 500 threads, which 50 agents and their pcmds on one machine make; issue 42),
//!   so by default ([`SensorConfig::machine_scan`], [`MachineScan`]) it is read only while
//!   the machine is busy (`used` at least three quarters of `cores` over the period: threads
//!   wait for a CPU only then, beyond the moment two wake-ups collide), and then at most
//!   every 5 s, `demand` being the threads' run and wait over those seconds. In the other
//!   periods `demand` is `used` plus, while busy, the threads' average wait over the last
//!   such read, or else the share of the period some thread waited (PSI), and at least the
//!   given processes' demand.
//! - `throttled`: share of the cgroup's enforcement periods in which it hit its cap.
//! - `pressure`: share of time some thread of the node waited for a CPU (PSI: v2 cgroup
//!   `cpu.pressure`, or `/proc/pressure/cpu` for the machine; None for v1 cgroups, whose PSI
//!   would be machine-wide).
//! - memory: the smallest limit on the process's memory cgroup chain and its usage, else
//!   `/proc/meminfo`.
//! - entities: the same run and wait sums over the threads of given process ids (the node's
//!   ranks), for the competing-load figures (the agent's `ios_agent_profile::CompetingLoad`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pcm_proto::NodeLoad;
use serde::{Deserialize, Serialize};

use crate::cgroup::{self, Cgroup, Fs, NodeCgroupPath, ProcessCgroups, Version};
use crate::procfs;
use crate::speed::{SpeedProbe, SpeedSample};

/// Default time between two speed probes.
pub const DEFAULT_PROBE_EVERY: Duration = Duration::from_secs(300);
/// Default bound on the threads read per sample (a machine-wide scope reads them all).
pub const DEFAULT_MAX_TASKS: usize = 20_000;
/// Default [`SensorConfig::machine_scan`]: the process table read while at least three
/// quarters of the cores are busy, at most every 5 s.
pub const DEFAULT_MACHINE_SCAN: MachineScan = MachineScan {
    busy_above: 0.75,
    every: Duration::from_secs(5),
};

/// When a machine scope reads the whole process table (see "What is measured" in the module
/// docs); a cgroup scope reads its node's threads at every sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MachineScan {
    /// The share of the cores that must have been busy over a period for the table to be
    /// read: below it no thread waits for long, and `demand` is `used` plus PSI's share.
    pub busy_above: f64,
    /// While the machine stays busy, the table is read at most this often, `demand` being
    /// the threads' run and wait over that time; between two reads it is `used` plus their
    /// average wait over the last.
    pub every: Duration,
}
/// Kernel clock ticks per second in `/proc` (`USER_HZ`, fixed at 100 in the Linux ABI).
const USER_HZ: u64 = 100;

/// Whose node to sense.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The calling process.
    SelfProcess,
    /// Another process (for example pcmd's, or a rank's).
    Pid(u32),
}

/// Settings of a [`NodeSensor`].
#[derive(Debug, Clone)]
pub struct SensorConfig {
    /// Root under which `/proc` and `/sys` are read. Default `/`.
    pub fs: Fs,
    /// Whose node. Default [`Target::SelfProcess`].
    pub target: Target,
    /// The speed probe. Default [`SpeedProbe::default`].
    pub probe: SpeedProbe,
    /// Time between speed probes; `None` probes only once, at creation. Default
    /// [`DEFAULT_PROBE_EVERY`].
    pub probe_every: Option<Duration>,
    /// A fixed speed instead of probing (simulations, tests). Default `None`.
    pub fixed_speed: Option<f64>,
    /// Bound on threads read per sample. Default [`DEFAULT_MAX_TASKS`].
    pub max_tasks: usize,
    /// When a machine scope reads the whole process table; `None` reads it at every sample.
    /// Default [`DEFAULT_MACHINE_SCAN`].
    pub machine_scan: Option<MachineScan>,
    /// The node is this cgroup, not the one the target process is in (a daemon kept beside
    /// the cgroup that caps the node's work). It must exist and cap the CPU. Default `None`.
    pub node_cgroup: Option<NodeCgroupPath>,
}

impl Default for SensorConfig {
    fn default() -> Self {
        SensorConfig {
            fs: Fs::default(),
            target: Target::SelfProcess,
            probe: SpeedProbe::default(),
            probe_every: Some(DEFAULT_PROBE_EVERY),
            fixed_speed: None,
            max_tasks: DEFAULT_MAX_TASKS,
            machine_scan: Some(DEFAULT_MACHINE_SCAN),
            node_cgroup: None,
        }
    }
}

impl SensorConfig {
    /// Senses the node of process `pid`.
    pub fn with_pid(mut self, pid: u32) -> Self {
        self.target = Target::Pid(pid);
        self
    }

    /// Reads `/proc` and `/sys` under `fs`.
    pub fn with_fs(mut self, fs: Fs) -> Self {
        self.fs = fs;
        self
    }

    /// Senses cgroup `node` as the node (see [`SensorConfig::node_cgroup`]).
    pub fn with_node_cgroup(mut self, node: Option<NodeCgroupPath>) -> Self {
        self.node_cgroup = node;
        self
    }

    /// Uses `speed` instead of probing.
    pub fn with_fixed_speed(mut self, speed: f64) -> Self {
        self.fixed_speed = Some(speed);
        self
    }
}

/// What the sensor takes as the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Scope {
    /// A cgroup that caps the CPU.
    Cgroup {
        /// Its version.
        version: Version,
        /// Its path in the hierarchy (`/mpi-ios-node-a`).
        path: String,
        /// Its directory.
        dir: PathBuf,
        /// Its cap, CPUs.
        cap: f64,
    },
    /// The whole machine.
    Machine {
        /// Why not a cgroup: no cap found, or cgroups could not be read (the message says
        /// which file and why).
        reason: String,
    },
}

impl Scope {
    /// Whether cgroups could not be read (as opposed to: readable, but nothing caps us).
    pub fn cgroups_unreadable(&self) -> bool {
        matches!(self, Scope::Machine { reason } if reason.starts_with(UNREADABLE))
    }
}

const UNREADABLE: &str = "cgroups unreadable";

/// Errors of the sensor.
#[derive(Debug, thiserror::Error)]
pub enum SensorError {
    /// A file every Linux has could not be read (the target process is gone, or `/proc` is
    /// not mounted).
    #[error(transparent)]
    Read(#[from] cgroup::ReadError),
    /// A file had an unexpected format.
    #[error("cannot parse {}: {what}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was expected.
        what: &'static str,
    },
    /// The cgroup named as the node ([`SensorConfig::node_cgroup`]) cannot be the node.
    #[error("the node's cgroup {path} cannot be sensed: {why}")]
    NodeCgroup {
        /// The path given.
        path: NodeCgroupPath,
        /// Why not (missing, uncapped, unreadable).
        why: String,
    },
}

/// CPU use of a set of processes over the period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct EntityUsage {
    /// Processes given.
    pub processes: usize,
    /// Of those, how many were found (alive).
    pub found: usize,
    /// CPUs they used on average.
    pub used: f64,
    /// Runnable threads they had on average (used + waiting).
    pub demand: f64,
}

/// One sample of the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSample {
    /// What counted as the node.
    pub scope: Scope,
    /// Length of the period the figures cover.
    pub period: Duration,
    /// CPUs the node may use.
    pub cores: f64,
    /// CPUs used on average.
    pub used: f64,
    /// Runnable threads on average (may exceed `cores`).
    pub demand: f64,
    /// Share of enforcement periods throttled (cgroup scopes).
    pub throttled: Option<f64>,
    /// Share of time some thread waited for a CPU (PSI), where node-specific.
    pub pressure: Option<f64>,
    /// Memory the node may use, bytes.
    pub memory_total: u64,
    /// Memory free for new processes, bytes.
    pub memory_available: u64,
    /// Per-core speed relative to the reference core.
    pub speed: f64,
    /// Threads read (in a machine scope, none in most periods: see [`MachineScan`]).
    pub tasks: usize,
    /// CPU use of the processes given to [`NodeSensor::sample_with`] (the node's ranks).
    pub entities: Option<EntityUsage>,
}

impl NodeSample {
    /// The wire form pcmd serves in `pcmd stats`.
    pub fn load(&self) -> NodeLoad {
        NodeLoad {
            cores: self.cores,
            cpu_load: self.demand,
            cpu_available: (self.cores - self.used).max(0.0),
            memory_total: self.memory_total,
            memory_available: self.memory_available,
        }
    }
}

/// Where CPU usage of the node is read.
#[derive(Debug, Clone)]
enum UsageSource {
    /// v1 `cpuacct.usage`, nanoseconds.
    Cpuacct(PathBuf),
    /// v2 `cpu.stat` `usage_usec`.
    CpuStat(PathBuf),
    /// Sum of the node's threads' run time.
    Tasks,
    /// `/proc/stat`.
    ProcStat,
}

/// Where the node's threads are listed.
#[derive(Debug, Clone)]
enum TaskSource {
    Cgroup(Version, PathBuf),
    AllProcesses,
}

/// Counters at one instant.
#[derive(Debug, Clone, Default)]
struct Snapshot {
    usage_ns: Option<u64>,
    stat_ticks: Option<(u64, u64)>,
    throttle: Option<(u64, u64)>,
    pressure_us: Option<u64>,
    boot_ticks: u64,
}

/// What a sample read of the node's threads.
#[derive(Debug, Clone, Copy)]
enum Threads {
    /// Run and wait time (ns) over the period since the previous sample.
    Period { run: u64, wait: u64 },
    /// Run and wait time (ns) over a longer window (a busy machine scope, read every few
    /// seconds).
    Window {
        run: u64,
        wait: u64,
        window: Duration,
    },
    /// Not summed in this period.
    Estimate,
}

/// Per-thread (run, wait) counters from the previous sample.
#[derive(Debug, Default)]
struct TaskCounters {
    previous: HashMap<u32, (u64, u64)>,
}

impl TaskCounters {
    /// Sums the run and wait time the threads gained since the previous call; returns
    /// (run ns, wait ns, threads read).
    fn update(&mut self, fs: &Fs, tids: &[u32], since_boot_ticks: u64) -> (u64, u64, usize) {
        let mut next = HashMap::with_capacity(tids.len());
        let (mut run, mut wait) = (0u64, 0u64);
        for &tid in tids {
            let Ok(text) = fs.read(format!("/proc/{tid}/schedstat")) else {
                continue;
            };
            let Some((r, w)) = procfs::parse_schedstat(&text) else {
                continue;
            };
            let base = match self.previous.get(&tid) {
                Some(&(pr, pw)) => Some((pr, pw)),
                // New thread: count it whole only if it started during the period.
                None if since_boot_ticks > 0
                    && started_ticks(fs, tid) >= Some(since_boot_ticks) =>
                {
                    Some((0, 0))
                }
                None => None,
            };
            if let Some((pr, pw)) = base {
                run += r.saturating_sub(pr);
                wait += w.saturating_sub(pw);
            }
            next.insert(tid, (r, w));
        }
        let n = next.len();
        self.previous = next;
        (run, wait, n)
    }
}

/// Start time of a thread, clock ticks since boot (field 22 of `/proc/TID/stat`).
fn started_ticks(fs: &Fs, tid: u32) -> Option<u64> {
    let stat = fs.read(format!("/proc/{tid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    // After the command: field 3 (state) is the first; starttime is field 22.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Time since boot in clock ticks.
fn boot_ticks() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| {
            let d = Duration::from(t);
            d.as_secs() * USER_HZ
                + u64::from(d.subsec_nanos()) / (1_000_000_000 / USER_HZ as u32) as u64
        })
        .unwrap_or(0)
}

/// Samples the node a process is on. Create it once; call [`NodeSensor::sample`] once per
/// period (every figure covers the time since the previous call).
#[derive(Debug)]
pub struct NodeSensor {
    config: SensorConfig,
    pid: u32,
    scope: Scope,
    cores: f64,
    usage: UsageSource,
    tasks: TaskSource,
    throttle_file: Option<(Version, PathBuf)>,
    pressure_file: Option<PathBuf>,
    memory: Option<Cgroup>,
    previous: Snapshot,
    previous_at: Instant,
    node_tasks: TaskCounters,
    /// A machine scope with [`SensorConfig::machine_scan`]: when `node_tasks` were read
    /// (and the boot ticks then), if they still count; and the threads' average wait over
    /// the last two reads, while the machine stays busy.
    table_read: Option<(Instant, u64)>,
    table_waiting: Option<f64>,
    entity_tasks: TaskCounters,
    speed: SpeedSample,
    probed_at: Instant,
}

impl NodeSensor {
    /// Finds the node of the configured process, reads its first counters and probes the
    /// speed (tens of milliseconds). Fails only when the process's `/proc` entries cannot be
    /// read; unreadable cgroups give a machine [`Scope`] whose reason says so.
    pub fn new(config: SensorConfig) -> Result<Self, SensorError> {
        let fs = config.fs.clone();
        let pid = match config.target {
            Target::SelfProcess => std::process::id(),
            Target::Pid(pid) => pid,
        };
        let status = fs.read(format!("/proc/{pid}/status"))?;
        let allowed = procfs::parse_status_cpus(&status)
            .map(f64::from)
            .or_else(|| {
                std::thread::available_parallelism()
                    .ok()
                    .map(|n| n.get() as f64)
            })
            .unwrap_or(1.0);
        let cgroups = match (
            fs.read(format!("/proc/{pid}/cgroup")),
            fs.read(format!("/proc/{pid}/mountinfo")),
        ) {
            (Ok(c), Ok(m)) => Ok(match &config.node_cgroup {
                Some(node) => ProcessCgroups::resolve(&fs, &cgroup::with_cpu_cgroup(&c, node), &m),
                None => ProcessCgroups::resolve(&fs, &c, &m),
            }),
            (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
        };
        let (scope, cap_cgroup) = match &cgroups {
            Err(e) => (
                Scope::Machine {
                    reason: format!("{UNREADABLE}: {e}"),
                },
                None,
            ),
            Ok(cg) => find_cap(cg.cpu.as_ref()),
        };
        if let Some(node) = &config.node_cgroup {
            // Named by the operator: never fall back to the whole machine in its place.
            let missing = cgroups
                .as_ref()
                .ok()
                .and_then(|cg| cg.cpu.as_ref())
                .filter(|cpu| !cpu.dir.is_dir());
            let why = match (missing, &scope) {
                (Some(cpu), _) => Some(format!("no directory {}", cpu.dir.display())),
                (None, Scope::Cgroup { .. }) => None,
                (None, Scope::Machine { reason }) => Some(reason.clone()),
            };
            if let Some(why) = why {
                return Err(SensorError::NodeCgroup {
                    path: node.clone(),
                    why,
                });
            }
        }
        let cgroups = cgroups.unwrap_or_default();
        let (cores, usage, tasks, throttle_file, pressure_file) = match (&scope, &cap_cgroup) {
            (
                Scope::Cgroup {
                    cap,
                    version,
                    path,
                    dir,
                },
                Some(cpu),
            ) => {
                let usage = match (version, &cgroups.cpuacct) {
                    (Version::V2, _) => UsageSource::CpuStat(dir.join("cpu.stat")),
                    (Version::V1, Some(acct))
                        if acct.version == Version::V1 && same_or_below(&acct.path, path) =>
                    {
                        // The accounting cgroup at the node's level: the node's path under
                        // the cpuacct mount.
                        let rel = path.trim_start_matches('/');
                        let d = if rel.is_empty() {
                            acct.top.clone()
                        } else {
                            acct.top.join(rel)
                        };
                        if d.join("cpuacct.usage").exists() {
                            UsageSource::Cpuacct(d.join("cpuacct.usage"))
                        } else {
                            UsageSource::Tasks
                        }
                    }
                    _ => UsageSource::Tasks,
                };
                let pressure = (*version == Version::V2).then(|| dir.join("cpu.pressure"));
                (
                    cap.min(allowed),
                    usage,
                    TaskSource::Cgroup(*version, dir.clone()),
                    Some((cpu.version, dir.join("cpu.stat"))),
                    pressure,
                )
            }
            _ => (
                allowed,
                UsageSource::ProcStat,
                TaskSource::AllProcesses,
                None,
                Some(fs.path("/proc/pressure/cpu")),
            ),
        };
        let speed = match config.fixed_speed {
            Some(speed) => SpeedSample {
                speed,
                cpu_time: Duration::ZERO,
                wall_time: Duration::ZERO,
                wall_clock_fallback: false,
            },
            None => config.probe.run(),
        };
        let now = Instant::now();
        let mut sensor = NodeSensor {
            config,
            pid,
            scope,
            cores,
            usage,
            tasks,
            throttle_file,
            pressure_file,
            memory: cgroups.memory,
            previous: Snapshot::default(),
            previous_at: now,
            node_tasks: TaskCounters::default(),
            table_read: None,
            table_waiting: None,
            entity_tasks: TaskCounters::default(),
            speed,
            probed_at: now,
        };
        sensor.previous = sensor.snapshot()?;
        let tids = sensor.node_tids();
        sensor.node_tasks.update(&sensor.config.fs, &tids, 0);
        sensor.previous_at = Instant::now();
        if sensor.scans_machine().is_some() {
            sensor.table_read = Some((sensor.previous_at, sensor.previous.boot_ticks));
        }
        Ok(sensor)
    }

    /// What counts as the node.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// CPUs the node may use.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    /// The process whose node this is.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The latest speed probe.
    pub fn speed(&self) -> SpeedSample {
        self.speed
    }

    /// Runs the speed probe now.
    pub fn reprobe(&mut self) -> SpeedSample {
        if self.config.fixed_speed.is_none() {
            self.speed = self.config.probe.run();
        }
        self.probed_at = Instant::now();
        self.speed
    }

    /// Samples the node over the period since the previous sample.
    pub fn sample(&mut self) -> Result<NodeSample, SensorError> {
        self.sample_with(&[])
    }

    /// Samples the node and the CPU use of the processes `entity_pids` (the node's ranks, as
    /// pcmd's `RankStats::pid` names them; all their threads count).
    pub fn sample_with(&mut self, entity_pids: &[u32]) -> Result<NodeSample, SensorError> {
        if let Some(every) = self.config.probe_every {
            if self.probed_at.elapsed() >= every {
                self.reprobe();
            }
        }
        let since = self.previous.boot_ticks;
        let now_snapshot = self.snapshot()?;
        let (threads, tasks) = self.node_threads(&now_snapshot, since);
        let entities = (!entity_pids.is_empty()).then(|| {
            let mut tids = Vec::new();
            let mut found = 0;
            for &pid in entity_pids {
                let before = tids.len();
                list_dir_numbers(&self.config.fs.path(format!("/proc/{pid}/task")), &mut tids);
                if tids.len() > before {
                    found += 1;
                }
            }
            (
                self.entity_tasks.update(&self.config.fs, &tids, since),
                found,
            )
        });
        let now = Instant::now();
        let period = now.duration_since(self.previous_at);
        // Guards a division by zero only; callers sample once per period (about 1 s).
        let secs = period.as_secs_f64().max(1e-9);
        let previous = std::mem::replace(&mut self.previous, now_snapshot);
        self.previous_at = now;
        let current = &self.previous;

        let task_used = match threads {
            Threads::Period { run, .. } => run as f64 / 1e9 / secs,
            Threads::Window { .. } | Threads::Estimate => 0.0,
        };
        let used = match (&self.usage, previous.usage_ns, current.usage_ns) {
            (UsageSource::Cpuacct(_) | UsageSource::CpuStat(_), Some(a), Some(b)) => {
                b.saturating_sub(a) as f64 / 1e9 / secs
            }
            (UsageSource::ProcStat, _, _) => match (previous.stat_ticks, current.stat_ticks) {
                (Some((b0, a0)), Some((b1, a1))) if a1 > a0 => {
                    // Share of all CPU time that was busy, times the CPUs.
                    (b1.saturating_sub(b0)) as f64 / (a1 - a0) as f64 * self.cores
                }
                _ => task_used,
            },
            _ => task_used,
        };
        let pressure = match (previous.pressure_us, current.pressure_us) {
            (Some(a), Some(b)) => Some((b.saturating_sub(a) as f64 / 1e6 / secs).min(1.0)),
            _ => None,
        };
        let entity_usage = entities.map(|((run, wait, _), found)| EntityUsage {
            processes: entity_pids.len(),
            found,
            used: run as f64 / 1e9 / secs,
            demand: (run + wait) as f64 / 1e9 / secs,
        });
        let demand = match threads {
            Threads::Period { run, wait } => ((run + wait) as f64 / 1e9 / secs).max(used),
            Threads::Window { run, wait, window } => {
                ((run + wait) as f64 / 1e9 / window.as_secs_f64().max(1e-9)).max(used)
            }
            // A machine scope's period without a read of the table (see the module docs).
            Threads::Estimate => (used + self.table_waiting.or(pressure).unwrap_or(0.0))
                .max(entity_usage.map_or(0.0, |e| e.demand)),
        };
        let throttled = match (previous.throttle, current.throttle) {
            (Some((p0, t0)), Some((p1, t1))) if p1 > p0 => {
                Some((t1.saturating_sub(t0)) as f64 / (p1 - p0) as f64)
            }
            (Some(_), Some(_)) => Some(0.0),
            _ => None,
        };
        let (memory_total, memory_available) = self.memory()?;
        Ok(NodeSample {
            scope: self.scope.clone(),
            period,
            cores: self.cores,
            used,
            demand,
            throttled,
            pressure,
            memory_total,
            memory_available,
            speed: self.speed.speed,
            tasks,
            entities: entity_usage,
        })
    }

    /// The machine scan settings, in a machine scope that has them.
    fn scans_machine(&self) -> Option<MachineScan> {
        match self.tasks {
            TaskSource::AllProcesses => self.config.machine_scan,
            TaskSource::Cgroup(..) => None,
        }
    }

    /// Reads the node's threads if this sample needs them (see [`MachineScan`]): their run
    /// and wait sums, and how many were read. `now` is this sample's snapshot, `since` the
    /// boot ticks of the previous one.
    fn node_threads(&mut self, now: &Snapshot, since: u64) -> (Threads, usize) {
        let Some(scan) = self.scans_machine() else {
            let tids = self.node_tids();
            let (run, wait, n) = self.node_tasks.update(&self.config.fs, &tids, since);
            return (Threads::Period { run, wait }, n);
        };
        let busy = match (self.previous.stat_ticks, now.stat_ticks) {
            (Some((b0, a0)), Some((b1, a1))) if a1 > a0 => {
                b1.saturating_sub(b0) as f64 / (a1 - a0) as f64 >= scan.busy_above
            }
            // Unknown: read as when busy.
            _ => true,
        };
        let at = Instant::now();
        if !busy {
            self.table_read = None;
            self.table_waiting = None;
            self.node_tasks.previous = HashMap::new();
            return (Threads::Estimate, 0);
        }
        match self.table_read {
            Some((read_at, _)) if at.duration_since(read_at) < scan.every => (Threads::Estimate, 0),
            Some((read_at, read_ticks)) => {
                let tids = self.node_tids();
                let (run, wait, n) = self.node_tasks.update(&self.config.fs, &tids, read_ticks);
                let window = at.duration_since(read_at);
                self.table_read = Some((at, now.boot_ticks));
                self.table_waiting = Some(wait as f64 / 1e9 / window.as_secs_f64().max(1e-9));
                (Threads::Window { run, wait, window }, n)
            }
            None => {
                // The first busy period after a quiet one: the counters to start from.
                let tids = self.node_tids();
                let (_, _, n) = self.node_tasks.update(&self.config.fs, &tids, 0);
                self.table_read = Some((at, now.boot_ticks));
                (Threads::Estimate, n)
            }
        }
    }

    fn snapshot(&self) -> Result<Snapshot, SensorError> {
        let fs = &self.config.fs;
        let usage_ns = match &self.usage {
            UsageSource::Cpuacct(path) => cgroup::read_u64(path).ok(),
            UsageSource::CpuStat(path) => std::fs::read_to_string(path)
                .ok()
                .and_then(|t| cgroup::parse_keyed(&t, "usage_usec"))
                .map(|us| us.saturating_mul(1000)),
            UsageSource::Tasks | UsageSource::ProcStat => None,
        };
        let stat_ticks = match self.usage {
            UsageSource::ProcStat => {
                let text = fs.read("/proc/stat")?;
                Some(
                    procfs::parse_proc_stat_cpu(&text).ok_or_else(|| SensorError::Parse {
                        path: fs.path("/proc/stat"),
                        what: "a `cpu` line of numbers",
                    })?,
                )
            }
            _ => None,
        };
        let throttle = self.throttle_file.as_ref().and_then(|(_, path)| {
            let text = std::fs::read_to_string(path).ok()?;
            Some((
                cgroup::parse_keyed(&text, "nr_periods")?,
                cgroup::parse_keyed(&text, "nr_throttled")?,
            ))
        });
        let pressure_us = self
            .pressure_file
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|t| procfs::parse_pressure_some_total(&t));
        Ok(Snapshot {
            usage_ns,
            stat_ticks,
            throttle,
            pressure_us,
            boot_ticks: if self.config.fs == Fs::default() {
                boot_ticks()
            } else {
                0
            },
        })
    }

    fn node_tids(&self) -> Vec<u32> {
        let mut tids = Vec::new();
        match &self.tasks {
            TaskSource::Cgroup(version, dir) => cgroup::tasks_recursive(*version, dir, &mut tids),
            TaskSource::AllProcesses => {
                let mut pids = Vec::new();
                list_dir_numbers(&self.config.fs.path("/proc"), &mut pids);
                for pid in pids {
                    list_dir_numbers(&self.config.fs.path(format!("/proc/{pid}/task")), &mut tids);
                    if tids.len() >= self.config.max_tasks {
                        break;
                    }
                }
            }
        }
        tids.sort_unstable();
        tids.dedup();
        tids.truncate(self.config.max_tasks);
        tids
    }

    /// (total, available) memory of the node, bytes.
    fn memory(&self) -> Result<(u64, u64), SensorError> {
        let fs = &self.config.fs;
        let text = fs.read("/proc/meminfo")?;
        let (total, available) =
            procfs::parse_meminfo(&text).ok_or_else(|| SensorError::Parse {
                path: fs.path("/proc/meminfo"),
                what: "MemTotal and MemAvailable in kB",
            })?;
        let Some(memory) = &self.memory else {
            return Ok((total, available));
        };
        let limit = memory
            .chain()
            .iter()
            .filter_map(|dir| cgroup::read_memory_limit(memory.version, dir))
            .min();
        match limit {
            Some(limit) if limit < total => {
                let usage_file = match memory.version {
                    Version::V1 => "memory.usage_in_bytes",
                    Version::V2 => "memory.current",
                };
                let used = cgroup::read_u64(&memory.dir.join(usage_file)).unwrap_or(0);
                Ok((limit, limit.saturating_sub(used).min(available)))
            }
            _ => Ok((total, available)),
        }
    }
}

/// Whether cgroup path `path` is `node` or inside it.
fn same_or_below(path: &str, node: &str) -> bool {
    let node = node.trim_end_matches('/');
    path == node || node.is_empty() || path.starts_with(&format!("{node}/"))
}

/// The capping cgroup: of `cpu` and its ancestors, the one with the smallest cap.
fn find_cap(cpu: Option<&Cgroup>) -> (Scope, Option<Cgroup>) {
    let Some(cpu) = cpu else {
        return (
            Scope::Machine {
                reason: "no cpu cgroup controller is mounted".into(),
            },
            None,
        );
    };
    let mut best: Option<(f64, PathBuf)> = None;
    for dir in cpu.chain() {
        match cgroup::read_cap(cpu.version, &dir) {
            Ok(Some(cap)) if best.as_ref().is_none_or(|(b, _)| cap < *b) => {
                best = Some((cap, dir));
            }
            Ok(_) => {}
            Err(e) => {
                return (
                    Scope::Machine {
                        reason: format!("{UNREADABLE}: {e}"),
                    },
                    None,
                )
            }
        }
    }
    match best {
        Some((cap, dir)) => {
            let path = path_of(cpu, &dir);
            let node = Cgroup {
                version: cpu.version,
                path: path.clone(),
                dir: dir.clone(),
                top: cpu.top.clone(),
            };
            (
                Scope::Cgroup {
                    version: cpu.version,
                    path,
                    dir,
                    cap,
                },
                Some(node),
            )
        }
        None => (
            Scope::Machine {
                reason: format!(
                    "no cpu cap on cgroup {} ({}) or its ancestors",
                    cpu.path, cpu.version
                ),
            },
            None,
        ),
    }
}

/// The hierarchy path of `dir`, an ancestor of `cpu.dir`.
fn path_of(cpu: &Cgroup, dir: &Path) -> String {
    let depth_below = cpu.chain().iter().position(|d| d == dir).unwrap_or(0);
    let mut path = cpu.path.trim_end_matches('/').to_string();
    for _ in 0..depth_below {
        match path.rfind('/') {
            Some(i) => path.truncate(i),
            None => path.clear(),
        }
    }
    if path.is_empty() {
        "/".into()
    } else {
        path
    }
}

/// Appends the numeric entries of a directory.
fn list_dir_numbers(dir: &Path, out: &mut Vec<u32>) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        out.extend(
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/proc` and `/sys/fs/cgroup` for process 42 with threads 42 and 43.
    struct FakeRoot {
        dir: tempfile::TempDir,
    }

    impl FakeRoot {
        fn new(proc_cgroup: &str, mountinfo: &str) -> Self {
            let root = FakeRoot {
                dir: tempfile::tempdir().expect("tempdir"),
            };
            root.write("proc/42/status", "Name:\tx\nCpus_allowed_list:\t0-3\n");
            root.write("proc/42/cgroup", proc_cgroup);
            root.write("proc/42/mountinfo", mountinfo);
            root.write(
                "proc/meminfo",
                "MemTotal: 8388608 kB\nMemFree: 1 kB\nMemAvailable: 4194304 kB\n",
            );
            root.write("proc/stat", "cpu  100 0 100 800 0 0 0 0 0 0\n");
            root.write("proc/pressure/cpu", "some avg10=0 total=1000\n");
            root.write("proc/42/schedstat", "1000000000 0 5\n");
            root.write("proc/43/schedstat", "0 0 0\n");
            root.write("proc/42/task/42/x", "");
            root.write("proc/42/task/43/x", "");
            root
        }

        fn write(&self, path: &str, text: &str) {
            let path = self.dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }

        fn sensor(&self) -> NodeSensor {
            NodeSensor::new(
                SensorConfig::default()
                    .with_fs(Fs::at(self.dir.path()))
                    .with_pid(42)
                    .with_fixed_speed(1.5),
            )
            .expect("sensor")
        }
    }

    const V2_MOUNT: &str = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    const V1_MOUNTS: &str = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";

    #[test]
    fn a_v2_cgroup_with_cpu_max_is_the_node() {
        let root = FakeRoot::new("0::/nodes/a\n", V2_MOUNT);
        root.write("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
        let node = "sys/fs/cgroup/nodes/a";
        root.write(&format!("{node}/cpu.max"), "50000 100000\n");
        root.write(
            &format!("{node}/cpu.stat"),
            "usage_usec 1000\nnr_periods 10\nnr_throttled 2\n",
        );
        root.write(&format!("{node}/cpu.pressure"), "some avg10=0 total=0\n");
        root.write(&format!("{node}/cgroup.threads"), "42\n43\n");
        root.write(&format!("{node}/memory.max"), "1073741824\n");
        root.write(&format!("{node}/memory.current"), "268435456\n");
        root.write("sys/fs/cgroup/nodes/memory.max", "max\n");
        let mut sensor = root.sensor();
        assert!(
            matches!(sensor.scope(), Scope::Cgroup { version: Version::V2, path, cap, .. } if path == "/nodes/a" && *cap == 0.5),
            "{:?}",
            sensor.scope()
        );
        assert_eq!(sensor.cores(), 0.5);

        // Over the period: 0.25 s used by the cgroup, 20 of 30 periods throttled, thread 42
        // ran 0.25 s and waited 0.5 s, and the cgroup's threads waited 0.1 s (PSI).
        root.write(
            &format!("{node}/cpu.stat"),
            "usage_usec 251000\nnr_periods 40\nnr_throttled 22\n",
        );
        root.write("proc/42/schedstat", "1250000000 500000000 9\n");
        root.write(
            &format!("{node}/cpu.pressure"),
            "some avg10=0 total=100000\n",
        );
        // PSI is clamped to 1 (noise): let at least 0.1 s pass.
        std::thread::sleep(Duration::from_millis(150));
        let s = sensor.sample().expect("sample");
        let secs = s.period.as_secs_f64();
        assert!((s.used * secs - 0.25).abs() < 1e-9, "{s:?}");
        assert!((s.demand * secs - 0.75).abs() < 1e-9, "{s:?}");
        assert!((s.throttled.expect("throttled") - 20.0 / 30.0).abs() < 1e-9);
        assert!((s.pressure.expect("pressure") * secs - 0.1).abs() < 1e-9);
        assert_eq!(s.memory_total, 1 << 30);
        assert_eq!(s.memory_available, (1 << 30) - (1 << 28));
        assert_eq!(s.tasks, 2);
        let load = s.load();
        assert_eq!(load.cores, 0.5);
        assert_eq!(load.cpu_load, s.demand);
        assert_eq!(s.speed, 1.5);
    }

    #[test]
    fn the_smallest_cap_on_the_v1_chain_is_the_node_and_cpuacct_gives_usage() {
        let root = FakeRoot::new("3:memory:/\n2:cpuacct:/a\n1:cpu:/a/b\n", V1_MOUNTS);
        root.write("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
        root.write("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
        root.write("sys/fs/cgroup/cpu/a/cpu.cfs_quota_us", "60000\n");
        root.write("sys/fs/cgroup/cpu/a/cpu.cfs_period_us", "100000\n");
        root.write("sys/fs/cgroup/cpu/a/b/cpu.cfs_quota_us", "200000\n");
        root.write("sys/fs/cgroup/cpu/a/b/cpu.cfs_period_us", "100000\n");
        root.write("sys/fs/cgroup/cpu/a/tasks", "");
        root.write("sys/fs/cgroup/cpu/a/b/tasks", "42\n43\n");
        root.write("sys/fs/cgroup/cpuacct/a/cpuacct.usage", "1000\n");
        root.write(
            "sys/fs/cgroup/memory/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        let mut sensor = root.sensor();
        assert!(
            matches!(sensor.scope(), Scope::Cgroup { version: Version::V1, path, cap, .. } if path == "/a" && (*cap - 0.6).abs() < 1e-12),
            "{:?}",
            sensor.scope()
        );
        root.write("sys/fs/cgroup/cpuacct/a/cpuacct.usage", "300001000\n");
        let s = sensor.sample().expect("sample");
        assert!(
            (s.used * s.period.as_secs_f64() - 0.3).abs() < 1e-9,
            "{s:?}"
        );
        // No v1 PSI per cgroup; the memory limit is above the machine's: meminfo counts.
        assert_eq!(s.pressure, None);
        assert_eq!(s.memory_total, 8 << 30);
        assert_eq!(s.memory_available, 4 << 30);
        // The descendants' threads count: both threads were found.
        assert_eq!(s.tasks, 2);
    }

    #[test]
    fn a_daemon_beside_the_node_senses_the_cgroup_named_as_the_node() {
        // Process 42 runs in the uncapped `/a-daemons`; the ranks and the cap are in `/a`.
        let root = FakeRoot::new(
            "3:memory:/\n2:cpuacct:/a-daemons\n1:cpu:/a-daemons\n",
            V1_MOUNTS,
        );
        for dir in ["sys/fs/cgroup/cpu", "sys/fs/cgroup/cpu/a-daemons"] {
            root.write(&format!("{dir}/cpu.cfs_quota_us"), "-1\n");
            root.write(&format!("{dir}/cpu.cfs_period_us"), "10000\n");
        }
        root.write("sys/fs/cgroup/cpu/a/cpu.cfs_quota_us", "5000\n");
        root.write("sys/fs/cgroup/cpu/a/cpu.cfs_period_us", "10000\n");
        root.write("sys/fs/cgroup/cpu/a/tasks", "43\n");
        root.write("sys/fs/cgroup/cpuacct/a/cpuacct.usage", "1000\n");
        let config = |node: &str| {
            SensorConfig::default()
                .with_fs(Fs::at(root.dir.path()))
                .with_pid(42)
                .with_fixed_speed(1.0)
                .with_node_cgroup(Some(node.parse().expect("valid path")))
        };
        let mut sensor = NodeSensor::new(config("/a")).expect("sensor");
        assert!(
            matches!(sensor.scope(), Scope::Cgroup { path, cap, .. } if path == "/a" && *cap == 0.5),
            "{:?}",
            sensor.scope()
        );
        root.write("sys/fs/cgroup/cpuacct/a/cpuacct.usage", "100001000\n");
        let s = sensor.sample().expect("sample");
        assert!(
            (s.used * s.period.as_secs_f64() - 0.1).abs() < 1e-9,
            "{s:?}"
        );
        assert_eq!(s.tasks, 1, "only the node's thread 43, not the daemon's");

        // Named by the operator, a cgroup that is missing or uncapped is an error naming
        // it, never the whole machine in its place.
        let missing = NodeSensor::new(config("/b")).expect_err("no such cgroup");
        assert!(
            missing
                .to_string()
                .contains("/b cannot be sensed: no directory"),
            "{missing}"
        );
        let uncapped = NodeSensor::new(config("/a-daemons")).expect_err("no cap");
        assert!(uncapped.to_string().contains("no cpu cap"), "{uncapped}");
    }

    #[test]
    fn without_a_cap_the_machine_is_the_node() {
        let root = FakeRoot::new("1:cpu:/\n", V1_MOUNTS);
        root.write("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
        root.write("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
        let mut sensor = root.sensor();
        assert!(
            matches!(sensor.scope(), Scope::Machine { reason } if reason.contains("no cpu cap"))
        );
        assert!(!sensor.scope().cgroups_unreadable());
        assert_eq!(sensor.cores(), 4.0);
        // 400 more ticks, 100 of them busy: a quarter of 4 CPUs.
        root.write("proc/stat", "cpu  150 0 150 1100 0 0 0 0 0 0\n");
        let s = sensor.sample().expect("sample");
        assert!((s.used - 1.0).abs() < 1e-9, "{s:?}");
        // So quiet a machine is not read thread by thread (issue 42).
        assert_eq!(s.tasks, 0);
        assert!(s.pressure.is_some());
    }

    /// A machine's root: process 42 (threads 42 and 43) is its only process.
    fn machine_root() -> FakeRoot {
        let root = FakeRoot::new("1:cpu:/\n", V1_MOUNTS);
        root.write("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
        root.write("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
        root
    }

    fn machine_sensor(root: &FakeRoot, scan: Option<MachineScan>) -> NodeSensor {
        NodeSensor::new(
            SensorConfig {
                machine_scan: scan,
                ..SensorConfig::default()
            }
            .with_fs(Fs::at(root.dir.path()))
            .with_pid(42)
            .with_fixed_speed(1.0),
        )
        .expect("sensor")
    }

    /// Issue 42: a machine scope reads the process table only while the machine is busy,
    /// and then at most every `every`. Otherwise demand is its use plus PSI's share of the
    /// period, and at least the given processes' demand; the first busy period takes the
    /// threads' counters, and is estimated likewise.
    #[test]
    fn a_machine_scope_reads_the_process_table_only_while_the_machine_is_busy() {
        let root = machine_root();
        let mut sensor = root.sensor();
        assert_eq!(sensor.cores(), 4.0);
        // Quiet (1 CPU of 4 busy): no thread of the machine read; the entity's threads are
        // new, not counted yet.
        root.write("proc/stat", "cpu  150 0 150 1100 0 0 0 0 0 0\n");
        root.write("proc/pressure/cpu", "some avg10=0 total=2000\n");
        let s = sensor.sample_with(&[42]).expect("sample");
        assert_eq!(s.tasks, 0, "{s:?}");
        assert_eq!(s.entities.expect("entities").found, 1);
        let expected = s.used + s.pressure.expect("pressure");
        assert!((s.demand - expected).abs() < 1e-9, "{s:?}");
        // Quiet, but the entity was runnable more than use and pressure say: its demand.
        root.write("proc/stat", "cpu  200 0 200 1400 0 0 0 0 0 0\n");
        root.write("proc/42/schedstat", "2400000000 5100000000 9\n");
        let s = sensor.sample_with(&[42]).expect("sample");
        assert_eq!(s.tasks, 0);
        let e = s.entities.expect("entities");
        assert!(e.demand > s.used + 1.0, "{e:?}");
        assert!((s.demand - e.demand).abs() < 1e-9, "{s:?} {e:?}");
        // Busy (all 4 CPUs): the counters are read, the demand still estimated.
        root.write("proc/stat", "cpu  600 0 400 1400 0 0 0 0 0 0\n");
        let s = sensor.sample().expect("sample");
        assert_eq!(s.tasks, 2, "{s:?}");
        assert!((s.demand - (s.used + s.pressure.expect("pressure"))).abs() < 1e-9);
        // Busy again, within 5 s of that read: not read again.
        root.write("proc/stat", "cpu  800 0 600 1400 0 0 0 0 0 0\n");
        assert_eq!(sensor.sample().expect("sample").tasks, 0);
        // Without a machine scan, every sample reads every thread, busy or not.
        let mut always = machine_sensor(&root, None);
        root.write("proc/stat", "cpu  850 0 650 1800 0 0 0 0 0 0\n");
        assert_eq!(always.sample().expect("sample").tasks, 2);
    }

    /// While the machine stays busy, a read of its table gives the demand over the time
    /// since the previous read, and the periods until the next one use the threads'
    /// average wait over it.
    #[test]
    fn a_busy_machine_s_demand_is_its_threads_run_and_wait_since_the_last_read() {
        let root = machine_root();
        let every = Duration::from_secs(1);
        let mut sensor = machine_sensor(
            &root,
            Some(MachineScan {
                busy_above: 0.75,
                every,
            }),
        );
        // Created with threads 42 (1 s run) and 43 (nothing). Busy, before `every`: no read.
        root.write("proc/stat", "cpu  500 0 500 800 0 0 0 0 0 0\n");
        assert_eq!(sensor.sample().expect("sample").tasks, 0);
        // After it: thread 42 ran 1 s more and waited 9 s, thread 43 ran 2 s.
        root.write("proc/42/schedstat", "2000000000 9000000000 9\n");
        root.write("proc/43/schedstat", "2000000000 0 9\n");
        std::thread::sleep(every + Duration::from_millis(50));
        root.write("proc/stat", "cpu  900 0 900 800 0 0 0 0 0 0\n");
        let s = sensor.sample().expect("sample");
        assert_eq!(s.tasks, 2, "{s:?}");
        // 12 s of run and wait over the window since creation (a bit longer than `every`).
        let window = 12.0 / s.demand;
        assert!(
            window >= every.as_secs_f64() && window < every.as_secs_f64() + 1.0,
            "{s:?}"
        );
        // The next busy period, before `every`: use plus 9 s of wait over that window.
        root.write("proc/stat", "cpu  1300 0 1300 800 0 0 0 0 0 0\n");
        let s = sensor.sample().expect("sample");
        assert_eq!(s.tasks, 0);
        assert!((s.demand - (s.used + 9.0 / window)).abs() < 1e-6, "{s:?}");
        // Quiet: the wait measured while busy no longer counts.
        root.write("proc/stat", "cpu  1300 0 1300 1600 0 0 0 0 0 0\n");
        let s = sensor.sample().expect("sample");
        assert_eq!((s.tasks, s.used), (0, 0.0));
        assert!(
            (s.demand - s.pressure.expect("pressure")).abs() < 1e-9,
            "{s:?}"
        );
    }

    #[test]
    fn unreadable_cgroups_fall_back_to_the_machine_and_say_so() {
        let root = FakeRoot::new("1:cpu:/a\n", V1_MOUNTS);
        // A directory where the quota file should be: reading it fails.
        root.write("sys/fs/cgroup/cpu/a/cpu.cfs_quota_us/x", "");
        root.write("sys/fs/cgroup/cpu/a/cpu.cfs_period_us", "100000\n");
        let sensor = root.sensor();
        assert!(sensor.scope().cgroups_unreadable(), "{:?}", sensor.scope());
        let Scope::Machine { reason } = sensor.scope() else {
            unreachable!()
        };
        assert!(reason.contains("cpu.cfs_quota_us"), "{reason}");
        // No cgroup file system at all.
        let root = FakeRoot::new("1:cpu:/a\n", "");
        assert!(
            matches!(root.sensor().scope(), Scope::Machine { reason } if reason.contains("no cpu cgroup"))
        );
    }

    #[test]
    fn a_missing_process_is_an_error_naming_the_file() {
        let root = FakeRoot::new("", "");
        let err = NodeSensor::new(
            SensorConfig::default()
                .with_fs(Fs::at(root.dir.path()))
                .with_pid(7)
                .with_fixed_speed(1.0),
        )
        .expect_err("no process 7");
        assert!(err.to_string().contains("/proc/7/status"), "{err}");
    }

    #[test]
    fn entity_pids_are_measured_over_their_threads() {
        let root = FakeRoot::new("1:cpu:/\n", V1_MOUNTS);
        let mut sensor = root.sensor();
        // First sample: the entity's threads are new (not counted); second: their increase.
        let s = sensor.sample_with(&[42, 99]).expect("sample");
        let e = s.entities.expect("entities");
        assert_eq!((e.processes, e.found), (2, 1));
        root.write("proc/42/schedstat", "1400000000 100000000 9\n");
        root.write("proc/43/schedstat", "100000000 0 9\n");
        let s = sensor.sample_with(&[42]).expect("sample");
        let e = s.entities.expect("entities");
        let secs = s.period.as_secs_f64();
        assert!((e.used * secs - 0.5).abs() < 1e-9, "{e:?}");
        assert!((e.demand * secs - 0.6).abs() < 1e-9, "{e:?}");
    }
}
