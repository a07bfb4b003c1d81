//! The CPU of an emulated node: a cgroup with its own CPU cap.
//!
//! An emulated node (see [`crate::netns::Cluster::with_caps`]) is a network namespace for its
//! network and a [`NodeCgroup`] for its CPU: every process started on the node (its agent, its
//! pcmd, its ranks, a hog) sits in the node's cgroup, so they all compete for the node's cap,
//! and the IOS agent's sensor (`ios-agent/profile`), reading `/proc/self/cgroup` and the
//! cgroup file system, finds the cap and the load of exactly that node.
//!
//! # Usage
//! Through a cluster (the usual way; see `docs/emulated-nodes.md`):
//!
//! ```no_run
//! use mpi_ios_tests::cgroup::{self, CpuCap};
//! use mpi_ios_tests::netns::Cluster;
//! # fn main() -> Result<(), String> {
//! cgroup::available()?; // or skip, printing the reason
//! let cluster = Cluster::with_caps(&[Some(CpuCap::cores(0.6)), Some(CpuCap::cores(0.6))])?;
//! let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
//! let _hog = cluster.start_hog("node-b", dir.path(), "hog", 1);
//! let node_b = cluster.cgroup("node-b").ok_or("node-b has no cap")?;
//! let used = node_b.measure_cores(std::time::Duration::from_secs(1)).map_err(|e| e.to_string())?;
//! assert!(used <= 0.65);
//! # Ok(())
//! # }
//! ```
//!
//! # Hierarchies
//! - cgroup v1 (this machine): a directory `mpi-ios-NAME` in the `cpu` hierarchy
//!   (`cpu.cfs_quota_us` / `cpu.cfs_period_us`) and, when `cpuacct` is mounted separately, a
//!   twin directory there, so that usage is accounted per node (`cpuacct.usage`; the sensor
//!   reads it when the process's cpuacct cgroup is the node's). Processes join both.
//! - cgroup v2 (unified hierarchy with the `cpu` controller): a directory `mpi-ios-NAME` under
//!   the cgroup2 mount with `cpu.max` = `QUOTA PERIOD`; `+cpu` is enabled in the mount's
//!   `cgroup.subtree_control` first. Usage comes from `cpu.stat usage_usec`.
//!
//! # Names and cleanup
//! Every cgroup made here is named `mpi-ios-...` ([`PREFIX`]). A [`NodeCgroup`] kills what is
//! left in it and removes its directories on drop. Cgroups of test clusters carry the owning
//! process id (`mpi-ios-<pid>s<seq>-node-a`), so [`sweep_stale`] can remove those left by a
//! test process that was killed outright (it kills their processes first: only this harness
//! puts processes there).
//!
//! # When cgroups cannot be written
//! [`available`] says exactly why (not root, no cpu controller, read-only file system, a cap
//! that does not take). Tests then print "skipped: REASON" and pass; see
//! `docs/emulated-nodes.md` for what the main job does then.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Prefix of the name of every cgroup this harness creates.
pub const PREFIX: &str = "mpi-ios-";
/// Default enforcement period of a cap, microseconds: 10 ms, a tenth of the kernel's
/// default. A loaded node's rank shares its quota with a hog while its peer polls through
/// its own; with 100 ms periods the two nodes' throttling windows could lock out of phase
/// for a whole run, one iteration per period: on MPICH on 2026-11-27 the main job's static
/// run fell to 10 it/s (unloaded 737) and missed its 600 s deadline, and a quick run took
/// 332.5 s against 6.1 s unloaded. With 10 ms periods the same quick run's static part took
/// 8.8 s (5.2 s unloaded), and the quick figures ran in 103 s instead of 268 s. Not shorter:
/// below the kernel's bandwidth slice (5 ms) the cap is no longer enforced exactly
/// (docs/emulated-nodes.md, "Caps below half a core").
pub const DEFAULT_PERIOD_US: u64 = 10_000;
/// How much longer each node's period is than the one before it in a cluster
/// ([`crate::netns::Cluster::with_caps`]: node i's is `DEFAULT_PERIOD_US + i *
/// PERIOD_STEP_US`). Why: with equal periods, two nodes' throttling windows keep whatever
/// phase they fall into, and a 2-rank heat2d, whose ranks wait for each other every
/// iteration, ran as fast as their overlap allowed: 579 to 1,678 it/s on the pairs of three
/// clusters of three 0.6-CPU nodes (2026-12-06), so a run on node-a and node-b could go at
/// half the speed of the same run on node-a and node-c, and the main job's yardsticks
/// compared placements by their phases. With periods 137 us apart the windows slide past
/// each other every ~0.7 s and every pair sees the average overlap: 1,101 to 1,290 it/s
/// on the same pairs. (Not a multiple of any other step, so no two nodes of 26 lock.)
pub const PERIOD_STEP_US: u64 = 137;
/// CPU weight of a node against the machine's other work, as a multiple of the default
/// (v1 `cpu.shares` 1024, v2 `cpu.weight` 100). Above 1 so that a node gets its whole cap
/// whenever the machine has the cores, also while other processes (builds, other tests) keep
/// the two cores busy: measured here, with the default weight a hog's node and its
/// neighbours fell well below their caps and timings doubled from run to run.
pub const NODE_WEIGHT: u64 = 8;
/// Smallest quota the kernel accepts, microseconds.
const MIN_QUOTA_US: u64 = 1_000;
/// Smallest cap over [`DEFAULT_PERIOD_US`], in cores.
pub const MIN_CAP_CORES: f64 = MIN_QUOTA_US as f64 / DEFAULT_PERIOD_US as f64;

/// Errors of cgroup handling. Each names the file or cgroup involved.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No hierarchy with the cpu controller is mounted (or it could not be found).
    #[error("no cpu cgroup controller: {0}")]
    NoCpuController(String),
    /// A cgroup file or directory operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was tried (`mkdir`, `write`, `read`, `rmdir`).
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A cap that the kernel cannot represent.
    #[error("invalid cpu cap {0} cores: must be finite and at least {MIN_CAP_CORES} (the kernel's smallest quota, {MIN_QUOTA_US} us, per {DEFAULT_PERIOD_US} us period)")]
    InvalidCap(f64),
    /// A cgroup name that is not a single path component of the allowed characters.
    #[error("invalid cgroup name {0:?}: use letters, digits, '-', '_' and '.'")]
    InvalidName(String),
    /// The cgroup exists already and live processes are in it (another run uses it).
    #[error("cgroup {name} is in use by processes {pids:?}")]
    InUse {
        /// The cgroup's name.
        name: String,
        /// The processes in it.
        pids: Vec<u32>,
    },
    /// A cgroup file held something unexpected.
    #[error("cannot parse {path}: {text:?}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it held.
        text: String,
    },
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + use<> {
    let path = path.to_path_buf();
    move |source| CgroupError::Io { op, path, source }
}

/// A CPU cap: `quota_us` of CPU time per `period_us` of wall time, i.e. `quota / period`
/// cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuCap {
    quota_us: u64,
    period_us: u64,
}

impl CpuCap {
    /// A cap of `cores` CPUs (e.g. 0.6) over the default period [`DEFAULT_PERIOD_US`].
    /// Panics on a cap that is not finite or below [`MIN_CAP_CORES`] (a programming error in
    /// a test); use [`CpuCap::try_cores`] for values from outside.
    pub fn cores(cores: f64) -> CpuCap {
        Self::try_cores(cores).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A cap of `cores` CPUs over the default period, or an error naming a bad value.
    pub fn try_cores(cores: f64) -> Result<CpuCap, CgroupError> {
        if !cores.is_finite() || cores < MIN_CAP_CORES {
            return Err(CgroupError::InvalidCap(cores));
        }
        let quota_us = (cores * DEFAULT_PERIOD_US as f64).round() as u64;
        Ok(CpuCap {
            quota_us: quota_us.max(MIN_QUOTA_US),
            period_us: DEFAULT_PERIOD_US,
        })
    }

    /// The same cap in cores over a period of `period_us` (the quota rounded, at least the
    /// kernel's smallest).
    pub fn with_period(self, period_us: u64) -> CpuCap {
        let period_us = period_us.max(1);
        let quota_us = (self.as_cores() * period_us as f64).round() as u64;
        CpuCap {
            quota_us: quota_us.max(MIN_QUOTA_US),
            period_us,
        }
    }

    /// CPU time allowed per period, microseconds.
    pub fn quota_us(&self) -> u64 {
        self.quota_us
    }

    /// The enforcement period, microseconds.
    pub fn period_us(&self) -> u64 {
        self.period_us
    }

    /// The cap in cores (`quota / period`).
    pub fn as_cores(&self) -> f64 {
        self.quota_us as f64 / self.period_us as f64
    }

    /// The v2 `cpu.max` line.
    fn cpu_max(&self) -> String {
        format!("{} {}", self.quota_us, self.period_us)
    }
}

/// Cgroup hierarchy flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Legacy hierarchies, one per controller group (`cpu`, `cpuacct`, ...).
    V1,
    /// The unified hierarchy.
    V2,
}

/// Where the cpu controller lives on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Flavour.
    pub version: Version,
    /// Mount point of the hierarchy holding the cpu controller.
    pub cpu: PathBuf,
    /// Mount point of a separate v1 `cpuacct` hierarchy (None when it is the cpu one, or v2).
    pub cpuacct: Option<PathBuf>,
}

/// Finds the cpu controller's hierarchy in a `/proc/self/mountinfo` text. `controllers(path)`
/// reads a v2 mount's `cgroup.controllers` (a parameter so the parsing can be tested).
fn parse_hierarchy(
    mountinfo: &str,
    controllers: impl Fn(&Path) -> Option<String>,
) -> Option<Hierarchy> {
    let mut cpu_v1 = None;
    let mut cpuacct_v1 = None;
    let mut v2 = None;
    for line in mountinfo.lines() {
        // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS"
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mount_point) = left.split_whitespace().nth(4) else {
            continue;
        };
        let mut right = right.split_whitespace();
        let fstype = right.next().unwrap_or("");
        let superoptions = right.nth(1).unwrap_or("");
        let mount_point = PathBuf::from(unescape_mount(mount_point));
        match fstype {
            "cgroup" => {
                let options: Vec<&str> = superoptions.split(',').collect();
                let has_cpu = options.contains(&"cpu");
                let has_acct = options.contains(&"cpuacct");
                if has_cpu && cpu_v1.is_none() {
                    cpu_v1 = Some((mount_point.clone(), has_acct));
                }
                if has_acct && !has_cpu && cpuacct_v1.is_none() {
                    cpuacct_v1 = Some(mount_point);
                }
            }
            "cgroup2" if v2.is_none() => {
                let has_cpu = controllers(&mount_point)
                    .is_some_and(|c| c.split_whitespace().any(|w| w == "cpu"));
                if has_cpu {
                    v2 = Some(mount_point);
                }
            }
            _ => {}
        }
    }
    if let Some((cpu, joint_acct)) = cpu_v1 {
        return Some(Hierarchy {
            version: Version::V1,
            cpu,
            cpuacct: if joint_acct { None } else { cpuacct_v1 },
        });
    }
    v2.map(|cpu| Hierarchy {
        version: Version::V2,
        cpu,
        cpuacct: None,
    })
}

/// Mount points in mountinfo escape space, tab, newline and backslash as octal.
fn unescape_mount(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match octal {
            Some(v) if bytes[i] == b'\\' => {
                out.push(v);
                i += 4;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The hierarchy holding the cpu controller on this machine.
pub fn hierarchy() -> Result<Hierarchy, CgroupError> {
    let path = Path::new("/proc/self/mountinfo");
    let mountinfo = std::fs::read_to_string(path).map_err(io_error("read", path))?;
    parse_hierarchy(&mountinfo, |mount| {
        std::fs::read_to_string(mount.join("cgroup.controllers")).ok()
    })
    .ok_or_else(|| {
        CgroupError::NoCpuController(
            "neither a v1 hierarchy with `cpu` nor a cgroup2 mount offering `cpu` is mounted"
                .into(),
        )
    })
}

/// Whether node cgroups can be made here, checked once per process by making (and removing)
/// a probe cgroup with a cap. The error says exactly why not.
pub fn available() -> Result<(), String> {
    static AVAILABLE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    AVAILABLE.get_or_init(check_available).clone()
}

fn check_available() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("cgroups need root (running as a normal user)".into());
    }
    let hierarchy = hierarchy().map_err(|e| e.to_string())?;
    sweep_stale();
    let name = format!("{PREFIX}{}sprobe", std::process::id());
    let probe = NodeCgroup::create(&name, CpuCap::cores(0.5)).map_err(|e| match &e {
        CgroupError::Io { source, .. } if source.raw_os_error() == Some(libc_erofs()) => {
            format!("the cgroup file system is read-only ({e})")
        }
        _ => format!("cannot create a cpu cgroup: {e}"),
    })?;
    let read = probe.read_cap().map_err(|e| e.to_string())?;
    if read != probe.cap() {
        return Err(format!(
            "the cap did not take in {} (wrote {:?}, read {read:?}); hierarchy {hierarchy:?}",
            probe.cpu_dir().display(),
            probe.cap()
        ));
    }
    Ok(())
}

/// `EROFS`, without a libc dependency.
fn libc_erofs() -> i32 {
    nix::errno::Errno::EROFS as i32
}

/// `EBUSY`: rmdir of a cgroup that still counts processes.
const EBUSY: i32 = nix::errno::Errno::EBUSY as i32;

fn read_trimmed(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(io_error("read", path))
}

fn write_file(path: &Path, text: &str) -> Result<(), CgroupError> {
    std::fs::write(path, text).map_err(io_error("write", path))
}

/// Process ids listed in a `cgroup.procs` file (empty when it cannot be read).
fn procs_in(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The CPU cgroup of one emulated node; killed and removed on drop.
#[derive(Debug)]
pub struct NodeCgroup {
    name: String,
    /// The cap last set (a lock, not a Cell, so that a cluster can be shared by threads).
    cap: std::sync::Mutex<CpuCap>,
    version: Version,
    /// The directory in the cpu hierarchy (v1) or the unified one (v2).
    cpu_dir: PathBuf,
    /// The twin directory in a separate v1 cpuacct hierarchy.
    acct_dir: Option<PathBuf>,
}

impl NodeCgroup {
    /// Creates cgroup `name` (which must start with [`PREFIX`] and be one path component)
    /// with `cap`. An existing cgroup of that name is reused if it is empty (a leftover) and
    /// refused with [`CgroupError::InUse`] if live processes are in it.
    pub fn create(name: &str, cap: CpuCap) -> Result<NodeCgroup, CgroupError> {
        let valid = name.starts_with(PREFIX)
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(CgroupError::InvalidName(name.into()));
        }
        let hierarchy = hierarchy()?;
        let cpu_dir = hierarchy.cpu.join(name);
        let acct_dir = hierarchy.cpuacct.as_ref().map(|m| m.join(name));
        for dir in std::iter::once(&cpu_dir).chain(acct_dir.as_ref()) {
            let pids = procs_in(dir);
            if !pids.is_empty() {
                return Err(CgroupError::InUse {
                    name: name.into(),
                    pids,
                });
            }
        }
        if hierarchy.version == Version::V2 {
            // Children of the mount only get cpu.max once the parent delegates the controller.
            let control = hierarchy.cpu.join("cgroup.subtree_control");
            let enabled = read_trimmed(&control)?;
            if !enabled.split_whitespace().any(|c| c == "cpu") {
                write_file(&control, "+cpu")?;
            }
        }
        let cgroup = NodeCgroup {
            name: name.into(),
            cap: std::sync::Mutex::new(cap),
            version: hierarchy.version,
            cpu_dir,
            acct_dir,
        };
        // From here on, drop removes whatever was made.
        for dir in cgroup.dirs() {
            match std::fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_error("mkdir", dir)(e)),
            }
        }
        cgroup.write_cap(cap)?;
        cgroup.write_weight()?;
        Ok(cgroup)
    }

    fn dirs(&self) -> Vec<&Path> {
        std::iter::once(self.cpu_dir.as_path())
            .chain(self.acct_dir.as_deref())
            .collect()
    }

    /// Changes the cap while processes run in the node (e.g. to emulate a node that turns
    /// slower or faster), in the node's own period (its cores, not its period, change:
    /// [`PERIOD_STEP_US`]); takes effect within one period.
    pub fn set_cap(&self, cap: CpuCap) -> Result<(), CgroupError> {
        let cap = cap.with_period(self.cap().period_us);
        self.write_cap(cap)?;
        *self.cap.lock().unwrap_or_else(|p| p.into_inner()) = cap;
        Ok(())
    }

    fn write_weight(&self) -> Result<(), CgroupError> {
        match self.version {
            Version::V1 => write_file(
                &self.cpu_dir.join("cpu.shares"),
                &(1024 * NODE_WEIGHT).to_string(),
            ),
            Version::V2 => write_file(
                &self.cpu_dir.join("cpu.weight"),
                &(100 * NODE_WEIGHT).to_string(),
            ),
        }
    }

    fn write_cap(&self, cap: CpuCap) -> Result<(), CgroupError> {
        match self.version {
            Version::V1 => {
                // The period first, so that the quota is checked against the period it runs with.
                write_file(
                    &self.cpu_dir.join("cpu.cfs_period_us"),
                    &cap.period_us.to_string(),
                )?;
                write_file(
                    &self.cpu_dir.join("cpu.cfs_quota_us"),
                    &cap.quota_us.to_string(),
                )
            }
            Version::V2 => write_file(&self.cpu_dir.join("cpu.max"), &cap.cpu_max()),
        }
    }

    /// The cap as the kernel holds it now.
    pub fn read_cap(&self) -> Result<CpuCap, CgroupError> {
        let parse_error = |path: &Path, text: &str| CgroupError::Parse {
            path: path.to_path_buf(),
            text: text.into(),
        };
        match self.version {
            Version::V1 => {
                let q = self.cpu_dir.join("cpu.cfs_quota_us");
                let p = self.cpu_dir.join("cpu.cfs_period_us");
                let (qt, pt) = (read_trimmed(&q)?, read_trimmed(&p)?);
                Ok(CpuCap {
                    quota_us: qt.parse().map_err(|_| parse_error(&q, &qt))?,
                    period_us: pt.parse().map_err(|_| parse_error(&p, &pt))?,
                })
            }
            Version::V2 => {
                let path = self.cpu_dir.join("cpu.max");
                let text = read_trimmed(&path)?;
                let mut words = text.split_whitespace();
                match (
                    words.next().and_then(|q| q.parse().ok()),
                    words.next().and_then(|p| p.parse().ok()),
                ) {
                    (Some(quota_us), Some(period_us)) => Ok(CpuCap {
                        quota_us,
                        period_us,
                    }),
                    _ => Err(parse_error(&path, &text)),
                }
            }
        }
    }

    /// The cgroup's name (`mpi-ios-...`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cap it was created with or last set with [`NodeCgroup::set_cap`].
    pub fn cap(&self) -> CpuCap {
        *self.cap.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hierarchy flavour.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Its directory in the cpu hierarchy (v1) or the unified hierarchy (v2).
    pub fn cpu_dir(&self) -> &Path {
        &self.cpu_dir
    }

    /// The `cgroup.procs` files a process must be written to to join the node (the cpu one
    /// and, on v1 with a separate cpuacct hierarchy, the cpuacct one). Scripts join with
    /// `echo $$ > FILE` for each.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs()
            .into_iter()
            .map(|d| d.join("cgroup.procs"))
            .collect()
    }

    /// Moves process `pid` (all its threads) into the node. Its later children are born in
    /// it; children it already has stay where they are.
    pub fn add_pid(&self, pid: u32) -> Result<(), CgroupError> {
        for file in self.procs_files() {
            write_file(&file, &pid.to_string())?;
        }
        Ok(())
    }

    /// The processes in the node now.
    pub fn pids(&self) -> Vec<u32> {
        procs_in(&self.cpu_dir)
    }

    /// Whether process `pid` is in the node's cpu cgroup, from `/proc/PID/cgroup`.
    pub fn contains(&self, pid: u32) -> bool {
        self.pids().contains(&pid)
    }

    /// CPU time used by everything in the node since it was made.
    pub fn usage(&self) -> Result<Duration, CgroupError> {
        match (self.version, &self.acct_dir) {
            (Version::V1, acct) => {
                // Joint cpu,cpuacct mounts keep cpuacct.usage next to the cap.
                let dir = acct.as_ref().unwrap_or(&self.cpu_dir);
                let path = dir.join("cpuacct.usage");
                let text = read_trimmed(&path)?;
                let ns: u64 = text
                    .parse()
                    .map_err(|_| CgroupError::Parse { path, text })?;
                Ok(Duration::from_nanos(ns))
            }
            (Version::V2, _) => {
                let path = self.cpu_dir.join("cpu.stat");
                let text = read_trimmed(&path)?;
                let usec = keyed(&text, "usage_usec").ok_or(CgroupError::Parse { path, text })?;
                Ok(Duration::from_micros(usec))
            }
        }
    }

    /// `(periods, throttled periods)` from `cpu.stat`: how often the cap bit.
    pub fn throttling(&self) -> Result<(u64, u64), CgroupError> {
        let path = self.cpu_dir.join("cpu.stat");
        let text = read_trimmed(&path)?;
        match (keyed(&text, "nr_periods"), keyed(&text, "nr_throttled")) {
            (Some(p), Some(t)) => Ok((p, t)),
            _ => Err(CgroupError::Parse { path, text }),
        }
    }

    /// Average cores used over `window`: usage before and after sleeping.
    pub fn measure_cores(&self, window: Duration) -> Result<f64, CgroupError> {
        let before = self.usage()?;
        let start = Instant::now();
        std::thread::sleep(window);
        let used = self.usage()?.saturating_sub(before);
        Ok(used.as_secs_f64() / start.elapsed().as_secs_f64())
    }

    /// Kills every process in the node (SIGKILL), repeatedly for up to `timeout` since dying
    /// processes may fork; returns whether the node is empty.
    pub fn kill_all(&self, timeout: Duration) -> bool {
        kill_procs_in(&self.dirs(), timeout)
    }
}

fn kill_procs_in(dirs: &[&Path], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let me = std::process::id();
    loop {
        let pids: Vec<u32> = dirs.iter().flat_map(|d| procs_in(d)).collect();
        if pids.is_empty() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        for pid in pids {
            if pid != me {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes a cgroup directory, retrying while it still counts exiting processes.
fn remove_dir(dir: &Path, timeout: Duration) -> Result<(), CgroupError> {
    let deadline = Instant::now() + timeout;
    loop {
        if !dir.exists() {
            return Ok(());
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            // Only "busy" can pass (processes still leaving); anything else will not.
            Err(e) if Instant::now() > deadline || e.raw_os_error() != Some(EBUSY) => {
                return Err(io_error("rmdir", dir)(e))
            }
            Err(_) => {
                // Killed processes leave the cgroup only once reaped; move any survivor (for
                // instance our own process, if a caller added it) to the root.
                if let Some(root) = dir.parent() {
                    for pid in procs_in(dir) {
                        let _ = std::fs::write(root.join("cgroup.procs"), pid.to_string());
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for NodeCgroup {
    fn drop(&mut self) {
        if !self.kill_all(Duration::from_secs(5)) {
            eprintln!("cgroup {}: processes survived SIGKILL", self.name);
        }
        for dir in self.dirs() {
            if let Err(e) = remove_dir(dir, Duration::from_secs(5)) {
                eprintln!("cgroup cleanup: {e}");
            }
        }
    }
}

/// The value of `key` in a `key value` per line file (`cpu.stat`).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The owner process id of a name `mpi-ios-<pid>s...`.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || !rest[digits.len()..].starts_with('s') {
        return None;
    }
    digits.parse().ok()
}

/// Names of the cgroups with [`PREFIX`] that exist now.
pub fn existing() -> Vec<String> {
    let Ok(hierarchy) = hierarchy() else {
        return Vec::new();
    };
    let mut names: Vec<String> = std::iter::once(&hierarchy.cpu)
        .chain(hierarchy.cpuacct.as_ref())
        .filter_map(|mount| std::fs::read_dir(mount).ok())
        .flat_map(|entries| entries.flatten())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(PREFIX))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Serialises this process's sweeps with [`hold_sweeps`].
static SWEEPS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Keeps [`sweep_stale`] from running in this process while the guard lives. A test that
/// stages a stale cgroup (one named after a dead process) holds it until the cgroup is set
/// up: otherwise any test running beside it that builds a cluster sweeps the cgroup away
/// half-made.
pub fn hold_sweeps() -> std::sync::MutexGuard<'static, ()> {
    SWEEPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Removes the cgroups of test processes that are gone (`mpi-ios-<pid>s...` with a dead
/// `pid`), killing what still runs in them first. Cgroups of live processes and cgroups
/// without an owner in their name are left alone.
pub fn sweep_stale() {
    let _one_at_a_time = hold_sweeps();
    let Ok(hierarchy) = hierarchy() else {
        return;
    };
    let me = std::process::id();
    for name in existing() {
        let Some(pid) = owner_pid(&name) else {
            continue;
        };
        if pid == me || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dirs: Vec<PathBuf> = std::iter::once(&hierarchy.cpu)
            .chain(hierarchy.cpuacct.as_ref())
            .map(|m| m.join(&name))
            .filter(|d| d.exists())
            .collect();
        let refs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        kill_procs_in(&refs, Duration::from_secs(5));
        for dir in &refs {
            if let Err(e) = remove_dir(dir, Duration::from_secs(2)) {
                eprintln!("stale cgroup sweep: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_convert_cores_to_quota_and_back() {
        let cap = CpuCap::cores(0.6);
        assert_eq!((cap.quota_us(), cap.period_us()), (6_000, 10_000));
        assert!((cap.as_cores() - 0.6).abs() < 1e-9);
        assert_eq!(CpuCap::cores(1.5).quota_us(), 15_000);
        assert_eq!(CpuCap::cores(0.6).cpu_max(), "6000 10000");
        let longer = CpuCap::cores(0.6).with_period(10_137);
        assert_eq!((longer.quota_us(), longer.period_us()), (6_082, 10_137));
        assert!((longer.as_cores() - 0.6).abs() < 1e-4);
        assert!(CpuCap::try_cores(0.0).is_err());
        assert!(CpuCap::try_cores(f64::NAN).is_err());
        assert!(CpuCap::try_cores(-1.0).is_err());
        // Below the kernel's smallest quota: refused, not silently raised.
        assert!(CpuCap::try_cores(0.05).is_err());
        assert_eq!(CpuCap::try_cores(0.1).unwrap().quota_us(), MIN_QUOTA_US);
    }

    const V1: &str = "\
25 1 0:23 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
26 25 0:24 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
27 25 0:25 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
28 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
35 25 0:33 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_with_separate_cpuacct_is_found() {
        let h = parse_hierarchy(V1, |_| Some(String::new())).unwrap();
        assert_eq!(h.version, Version::V1);
        assert_eq!(h.cpu, PathBuf::from("/sys/fs/cgroup/cpu"));
        assert_eq!(h.cpuacct, Some(PathBuf::from("/sys/fs/cgroup/cpuacct")));
    }

    #[test]
    fn v1_with_joint_cpu_cpuacct_needs_no_twin() {
        let text =
            "26 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw shared:9 - cgroup cgroup rw,cpu,cpuacct\n";
        let h = parse_hierarchy(text, |_| None).unwrap();
        assert_eq!(h.cpu, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(h.cpuacct, None);
    }

    #[test]
    fn v2_counts_only_with_the_cpu_controller() {
        let text = "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n";
        let h = parse_hierarchy(text, |_| Some("cpuset cpu io memory pids\n".into())).unwrap();
        assert_eq!(
            h,
            Hierarchy {
                version: Version::V2,
                cpu: PathBuf::from("/sys/fs/cgroup"),
                cpuacct: None
            }
        );
        assert_eq!(parse_hierarchy(text, |_| Some("cpuset io\n".into())), None);
        assert_eq!(parse_hierarchy("", |_| None), None);
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount("/a\\040b"), "/a b");
        assert_eq!(unescape_mount("/plain"), "/plain");
        assert_eq!(unescape_mount("/end\\"), "/end\\");
    }

    #[test]
    fn owner_pid_parses_only_owned_names() {
        assert_eq!(owner_pid("mpi-ios-123s0-node-a"), Some(123));
        assert_eq!(owner_pid("mpi-ios-123sprobe"), Some(123));
        assert_eq!(owner_pid("mpi-ios-node-a"), None);
        assert_eq!(owner_pid("other-123s0"), None);
    }

    #[test]
    fn keyed_reads_cpu_stat() {
        let text = "nr_periods 10\nnr_throttled 4\nthrottled_time 123\n";
        assert_eq!(keyed(text, "nr_throttled"), Some(4));
        assert_eq!(keyed(text, "usage_usec"), None);
    }
}
