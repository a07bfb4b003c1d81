//! Finding the cgroups a process is in and reading their limits and counters, for cgroup v1
//! (one hierarchy per controller, or several controllers co-mounted) and v2 (one unified
//! hierarchy).
//!
//! Everything goes through a [`Fs`], a file-system root (normally `/`), so that the unit tests
//! can lay out a fake `/proc` and `/sys/fs/cgroup` in a temporary directory: the machine the
//! project runs on has only v1 CPU controllers, and v2 must work as well.
//!
//! Where a cgroup lives: `/proc/PID/cgroup` names, per hierarchy, the controllers and the
//! cgroup path (`4:cpu,cpuacct:/a/b`, or `0::/a/b` for v2); `/proc/PID/mountinfo` names where
//! each hierarchy is mounted and which of its directories the mount shows (its root, which
//! is not `/` inside a container). The directory is `mount point + (path - mount root)`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A file-system root under which `/proc` and `/sys` are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fs {
    root: PathBuf,
}

impl Default for Fs {
    /// The real root, `/`.
    fn default() -> Self {
        Fs {
            root: PathBuf::from("/"),
        }
    }
}

impl Fs {
    /// A file system rooted at `root` (tests use a temporary directory).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Fs { root: root.into() }
    }

    /// `path` (absolute, as the kernel names it) under this root.
    pub fn path(&self, path: impl AsRef<Path>) -> PathBuf {
        let path = path.as_ref();
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }

    /// Reads a whole file, naming it in the error.
    pub fn read(&self, path: impl AsRef<Path>) -> Result<String, ReadError> {
        let path = self.path(path);
        std::fs::read_to_string(&path).map_err(|source| ReadError { path, source })
    }
}

/// A file that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct ReadError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: io::Error,
}

/// cgroup version of a hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Version {
    /// cgroup v1: one hierarchy per controller (or a few co-mounted).
    V1,
    /// cgroup v2: the unified hierarchy.
    V2,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        })
    }
}

/// One line of `/proc/PID/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Hierarchy id (0 for v2).
    pub hierarchy: u32,
    /// Controllers of the hierarchy (`cpu`, `cpuacct`, ...; `name=systemd` kept as is; empty
    /// for v2).
    pub controllers: Vec<String>,
    /// Path of the cgroup inside the hierarchy, starting with `/`.
    pub path: String,
}

/// Parses `/proc/PID/cgroup`; malformed lines are skipped.
pub fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let hierarchy = parts.next()?.parse().ok()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            if !path.starts_with('/') {
                return None;
            }
            Some(Membership {
                hierarchy,
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// A cgroup named as the node (`ios-agent join --node-cgroup`, [`NODE_CGROUP_ENV`]): its path
/// in the CPU hierarchies as `/proc/PID/cgroup` shows it for a process inside it
/// (`/mpi-ios-...-node-a`). For daemons kept outside the cgroup that caps the node's work,
/// so that the cap's throttling does not delay their answers, while they still sense the
/// node it caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCgroupPath(String);

/// The environment variable that names the node's cgroup for the IOS agent and pcmd.
pub const NODE_CGROUP_ENV: &str = "IOS_NODE_CGROUP";

impl std::str::FromStr for NodeCgroupPath {
    type Err = String;

    /// Accepts an absolute path of plain components: no `.` or `..`, no empty component,
    /// no control characters.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| Err(format!("{text:?} is not a cgroup path: {why}"));
        if !text.starts_with('/') {
            return bad("it must start with / (as /proc/PID/cgroup shows it)");
        }
        if text.len() > 4096 {
            return bad("longer than 4096 bytes");
        }
        if text.chars().any(char::is_control) {
            return bad("it holds a control character");
        }
        let inner = text.trim_end_matches('/');
        if inner.is_empty() {
            return bad("the root is no node");
        }
        if inner[1..]
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return bad("empty, . or .. components are not allowed");
        }
        Ok(NodeCgroupPath(inner.to_owned()))
    }
}

impl NodeCgroupPath {
    /// The path, starting with `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeCgroupPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `/proc/PID/cgroup` text as it would read for a process in cgroup `node` in every
/// hierarchy with a CPU controller (v1 `cpu` or `cpuacct`, and the v2 hierarchy); other
/// hierarchies (v1 memory, ...) keep the process's own.
pub fn with_cpu_cgroup(proc_cgroup: &str, node: &NodeCgroupPath) -> String {
    parse_proc_cgroup(proc_cgroup)
        .into_iter()
        .map(|m| {
            let cpu =
                m.hierarchy == 0 || m.controllers.iter().any(|c| c == "cpu" || c == "cpuacct");
            let path = if cpu { node.as_str() } else { m.path.as_str() };
            format!("{}:{}:{}\n", m.hierarchy, m.controllers.join(","), path)
        })
        .collect()
}

/// One cgroup mount from `/proc/PID/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// v1 (`cgroup`) or v2 (`cgroup2`).
    pub version: Version,
    /// Directory of the hierarchy the mount shows (`/` unless inside a container).
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// v1: the controllers named in the super options (`cpu`, `cpuacct`, `name=systemd`);
    /// v2: empty.
    pub controllers: Vec<String>,
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            if let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 4])
                .ok()
                .and_then(|octal| u8::from_str_radix(octal, 8).ok())
            {
                out.push(b);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses the cgroup mounts out of `/proc/PID/mountinfo`; other lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let dash = fields.iter().position(|f| *f == "-")?;
            if dash < 6 {
                return None;
            }
            let fstype = *fields.get(dash + 1)?;
            let version = match fstype {
                "cgroup" => Version::V1,
                "cgroup2" => Version::V2,
                _ => return None,
            };
            let controllers = match version {
                Version::V2 => Vec::new(),
                Version::V1 => fields
                    .get(dash + 3)
                    .map(|opts| {
                        opts.split(',')
                            .filter(|o| !matches!(*o, "rw" | "ro") && !o.contains("xattr"))
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            Some(Mount {
                version,
                root: unescape(fields[3]),
                mount_point: PathBuf::from(unescape(fields[4])),
                controllers,
            })
        })
        .collect()
}

/// A cgroup directory of one controller, with the chain of its ancestors up to the mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    /// v1 or v2.
    pub version: Version,
    /// Path inside the hierarchy, as `/proc/PID/cgroup` names it (`/` for the root).
    pub path: String,
    /// The directory (under the [`Fs`] root).
    pub dir: PathBuf,
    /// The mount point's directory (under the [`Fs`] root): the top of [`Cgroup::chain`].
    pub top: PathBuf,
}

impl Cgroup {
    /// The directory and its ancestors up to the mount point, innermost first.
    pub fn chain(&self) -> Vec<PathBuf> {
        let mut chain = Vec::new();
        let mut dir = self.dir.as_path();
        loop {
            chain.push(dir.to_path_buf());
            if dir == self.top {
                break;
            }
            match dir.parent() {
                Some(parent) if parent.starts_with(&self.top) => dir = parent,
                _ => break,
            }
        }
        chain
    }

    /// Whether this is the root of its hierarchy (as far as the mount shows).
    pub fn is_top(&self) -> bool {
        self.dir == self.top
    }
}

/// The cgroups of one process, for the controllers the sensor reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessCgroups {
    /// CPU bandwidth control (`cpu.cfs_quota_us` in v1, `cpu.max` in v2).
    pub cpu: Option<Cgroup>,
    /// CPU accounting (`cpuacct.usage` in v1, `cpu.stat` in v2).
    pub cpuacct: Option<Cgroup>,
    /// Memory (`memory.limit_in_bytes` in v1, `memory.max` in v2).
    pub memory: Option<Cgroup>,
}

impl ProcessCgroups {
    /// Resolves the cgroups of a process from its `/proc/PID/cgroup` and
    /// `/proc/PID/mountinfo` texts. A controller is taken from a v1 hierarchy when one has it
    /// mounted, else from the v2 hierarchy when v2 offers it (its file exists in the
    /// process's cgroup or, for the root, the v2 root lists it).
    pub fn resolve(fs: &Fs, proc_cgroup: &str, mountinfo: &str) -> Self {
        let memberships = parse_proc_cgroup(proc_cgroup);
        let mounts = parse_mountinfo(mountinfo);
        let find = |controller: &str, v2_file: &str| {
            find_v1(fs, &memberships, &mounts, controller)
                .or_else(|| find_v2(fs, &memberships, &mounts, controller, v2_file))
        };
        ProcessCgroups {
            cpu: find("cpu", "cpu.max"),
            cpuacct: find("cpuacct", "cpu.stat"),
            memory: find("memory", "memory.max"),
        }
    }
}

/// `mount point + (path - mount root)`, or None when the path lies outside the mount.
fn locate(fs: &Fs, mount: &Mount, path: &str) -> Option<(PathBuf, PathBuf)> {
    let rel = if mount.root == "/" {
        path.strip_prefix('/').unwrap_or(path)
    } else {
        let rest = path.strip_prefix(mount.root.as_str())?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest.strip_prefix('/').unwrap_or(rest)
    };
    let top = fs.path(&mount.mount_point);
    let dir = if rel.is_empty() {
        top.clone()
    } else {
        top.join(rel)
    };
    Some((dir, top))
}

fn find_v1(
    fs: &Fs,
    memberships: &[Membership],
    mounts: &[Mount],
    controller: &str,
) -> Option<Cgroup> {
    let member = memberships
        .iter()
        .find(|m| m.hierarchy != 0 && m.controllers.iter().any(|c| c == controller))?;
    let mount = mounts
        .iter()
        .find(|m| m.version == Version::V1 && m.controllers.iter().any(|c| c == controller))?;
    let (dir, top) = locate(fs, mount, &member.path)?;
    Some(Cgroup {
        version: Version::V1,
        path: member.path.clone(),
        dir,
        top,
    })
}

fn find_v2(
    fs: &Fs,
    memberships: &[Membership],
    mounts: &[Mount],
    controller: &str,
    file: &str,
) -> Option<Cgroup> {
    let member = memberships
        .iter()
        .find(|m| m.hierarchy == 0 && m.controllers.is_empty())?;
    let mount = mounts.iter().find(|m| m.version == Version::V2)?;
    let (dir, top) = locate(fs, mount, &member.path)?;
    // The root of a v2 hierarchy has no cpu.max or memory.max: look at what it offers.
    let v2_name = if controller == "cpuacct" {
        "cpu"
    } else {
        controller
    };
    let offered = if dir == top {
        std::fs::read_to_string(top.join("cgroup.controllers"))
            .map(|c| c.split_whitespace().any(|c| c == v2_name))
            .unwrap_or(false)
            // cpu.stat (usage) exists at the root even without the cpu controller.
            || (file == "cpu.stat" && top.join(file).exists())
    } else {
        dir.join(file).exists()
    };
    offered.then(|| Cgroup {
        version: Version::V2,
        path: member.path.clone(),
        dir,
        top,
    })
}

/// The CPU cap of one cgroup directory: `quota / period` CPUs, None when unlimited.
///
/// v1: `cpu.cfs_quota_us` (-1 = no cap) over `cpu.cfs_period_us`; v2: `cpu.max`
/// (`max 100000` or `50000 100000`). Missing files mean no cap at that level.
pub fn read_cap(version: Version, dir: &Path) -> Result<Option<f64>, String> {
    let read = |name: &str| -> Result<Option<String>, String> {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", dir.join(name).display())),
        }
    };
    match version {
        Version::V1 => {
            let (Some(quota), Some(period)) =
                (read("cpu.cfs_quota_us")?, read("cpu.cfs_period_us")?)
            else {
                return Ok(None);
            };
            parse_cap_v1(&quota, &period)
                .map_err(|e| format!("{}: {e}", dir.join("cpu.cfs_quota_us").display()))
        }
        Version::V2 => match read("cpu.max")? {
            None => Ok(None),
            Some(text) => {
                parse_cpu_max(&text).map_err(|e| format!("{}: {e}", dir.join("cpu.max").display()))
            }
        },
    }
}

/// v1 quota and period texts to a cap in CPUs (None for a quota of -1).
pub fn parse_cap_v1(quota: &str, period: &str) -> Result<Option<f64>, String> {
    let quota: i64 = quota
        .trim()
        .parse()
        .map_err(|_| format!("bad quota {:?}", quota.trim()))?;
    let period: i64 = period
        .trim()
        .parse()
        .map_err(|_| format!("bad period {:?}", period.trim()))?;
    if quota <= 0 {
        return Ok(None);
    }
    if period <= 0 {
        return Err(format!("period {period} must be > 0"));
    }
    Ok(Some(quota as f64 / period as f64))
}

/// v2 `cpu.max` text to a cap in CPUs (None for `max`).
pub fn parse_cpu_max(text: &str) -> Result<Option<f64>, String> {
    let mut parts = text.split_whitespace();
    let quota = parts.next().ok_or("empty cpu.max")?;
    let period: u64 = match parts.next() {
        Some(p) => p.parse().map_err(|_| format!("bad period {p:?}"))?,
        None => 100_000,
    };
    if quota == "max" {
        return Ok(None);
    }
    let quota: u64 = quota.parse().map_err(|_| format!("bad quota {quota:?}"))?;
    if period == 0 {
        return Err("period 0".into());
    }
    Ok(Some(quota as f64 / period as f64))
}

/// Reads one number from a file holding one.
pub fn read_u64(path: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{}: not a number: {:?}", path.display(), text.trim()))
}

/// A memory limit file (`memory.limit_in_bytes`, or v2 `memory.max` where `max` = none).
pub fn read_memory_limit(version: Version, dir: &Path) -> Option<u64> {
    let file = match version {
        Version::V1 => "memory.limit_in_bytes",
        Version::V2 => "memory.max",
    };
    let text = std::fs::read_to_string(dir.join(file)).ok()?;
    text.trim().parse().ok()
}

/// `key value` lines (cpu.stat, memory.stat) into a lookup.
pub fn parse_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        (parts.next()? == key).then(|| parts.next()?.parse().ok())?
    })
}

/// Thread ids in a cgroup and all its descendants (v1 `tasks`, v2 `cgroup.threads`).
pub fn tasks_recursive(version: Version, dir: &Path, out: &mut Vec<u32>) {
    let file = match version {
        Version::V1 => "tasks",
        Version::V2 => "cgroup.threads",
    };
    if let Ok(text) = std::fs::read_to_string(dir.join(file)) {
        out.extend(
            text.split_whitespace()
                .filter_map(|t| t.parse::<u32>().ok()),
        );
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                tasks_recursive(version, &entry.path(), out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO_V1: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:5 - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn proc_cgroup_lines_are_parsed_and_garbage_skipped() {
        let m = parse_proc_cgroup(
            "9:name=systemd:/\n4:memory:/process_api/x\n1:cpu,cpuacct:/mpi-ios-a\n0::/\nbad\n3:cpuset:relative\n",
        );
        assert_eq!(m.len(), 4);
        assert_eq!(m[2].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(m[2].path, "/mpi-ios-a");
        assert_eq!(m[3].hierarchy, 0);
        assert!(m[3].controllers.is_empty());
    }

    #[test]
    fn a_node_cgroup_path_is_absolute_and_plain() {
        let ok: NodeCgroupPath = "/mpi-ios-1s0-node-a/".parse().expect("valid");
        assert_eq!(ok.as_str(), "/mpi-ios-1s0-node-a");
        assert_eq!(
            "/a/b".parse::<NodeCgroupPath>().expect("valid").as_str(),
            "/a/b"
        );
        for bad in [
            "", "/", "relative", "/a/../b", "/a//b", "/./a", "/a\nb", "/a/..",
        ] {
            let error = bad.parse::<NodeCgroupPath>().expect_err(bad);
            assert!(error.contains("is not a cgroup path"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn the_cpu_hierarchies_are_read_as_the_node_cgroups() {
        let node: NodeCgroupPath = "/mpi-ios-1s0-node-a".parse().expect("valid");
        let own = "9:name=systemd:/\n4:memory:/daemons\n2:cpuacct:/mpi-ios-1s0-node-a-d\n1:cpu:/mpi-ios-1s0-node-a-d\n0::/daemons\n";
        assert_eq!(
            with_cpu_cgroup(own, &node),
            "9:name=systemd:/\n4:memory:/daemons\n2:cpuacct:/mpi-ios-1s0-node-a\n1:cpu:/mpi-ios-1s0-node-a\n0::/mpi-ios-1s0-node-a\n"
        );
    }

    #[test]
    fn mountinfo_yields_cgroup_mounts_with_controllers() {
        let mounts = parse_mountinfo(MOUNTINFO_V1);
        assert_eq!(mounts.len(), 5);
        assert_eq!(mounts[0].controllers, vec!["cpu"]);
        assert_eq!(mounts[0].mount_point, Path::new("/sys/fs/cgroup/cpu"));
        assert_eq!(mounts[3].controllers, vec!["name=systemd"]);
        assert_eq!(mounts[4].version, Version::V2);
        let escaped = parse_mountinfo("1 2 0:3 /a\\040b /mnt/c\\040g rw - cgroup2 none rw\n");
        assert_eq!(escaped[0].root, "/a b");
        assert_eq!(escaped[0].mount_point, Path::new("/mnt/c g"));
        assert!(parse_mountinfo("garbage\n1 2 3\n- - -\n").is_empty());
    }

    #[test]
    fn v1_cgroups_are_located_under_their_mounts() {
        let fs = Fs::at("/fake");
        let cgroups = ProcessCgroups::resolve(
            &fs,
            "4:memory:/m\n2:cpuacct:/mpi-ios-a\n1:cpu:/mpi-ios-a\n0::/\n",
            MOUNTINFO_V1,
        );
        let cpu = cgroups.cpu.expect("cpu");
        assert_eq!(cpu.version, Version::V1);
        assert_eq!(cpu.dir, Path::new("/fake/sys/fs/cgroup/cpu/mpi-ios-a"));
        assert_eq!(
            cpu.chain(),
            vec![
                PathBuf::from("/fake/sys/fs/cgroup/cpu/mpi-ios-a"),
                PathBuf::from("/fake/sys/fs/cgroup/cpu")
            ]
        );
        assert!(!cpu.is_top());
        let acct = cgroups.cpuacct.expect("cpuacct");
        assert_eq!(acct.dir, Path::new("/fake/sys/fs/cgroup/cpuacct/mpi-ios-a"));
        assert_eq!(
            cgroups.memory.expect("memory").dir,
            Path::new("/fake/sys/fs/cgroup/memory/m")
        );
    }

    #[test]
    fn a_container_mount_root_is_stripped() {
        let fs = Fs::default();
        let info =
            "1 2 0:3 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
        let c = ProcessCgroups::resolve(&fs, "3:cpu,cpuacct:/docker/abc/inner\n", info);
        let cpu = c.cpu.expect("cpu");
        assert_eq!(cpu.dir, Path::new("/sys/fs/cgroup/cpu,cpuacct/inner"));
        assert_eq!(c.cpuacct.expect("acct").dir, cpu.dir);
        // A path outside the mount's root is not visible.
        let c = ProcessCgroups::resolve(&fs, "3:cpu,cpuacct:/other\n", info);
        assert!(c.cpu.is_none());
    }

    #[test]
    fn caps_parse_for_both_versions() {
        assert_eq!(parse_cap_v1("50000\n", "100000\n"), Ok(Some(0.5)));
        assert_eq!(parse_cap_v1("-1", "100000"), Ok(None));
        assert!(parse_cap_v1("x", "100000").is_err());
        assert!(parse_cap_v1("5", "0").is_err());
        assert_eq!(parse_cpu_max("max 100000\n"), Ok(None));
        assert_eq!(parse_cpu_max("150000 100000\n"), Ok(Some(1.5)));
        assert!(parse_cpu_max("").is_err());
        assert!(parse_cpu_max("10 0").is_err());
        assert!(parse_cpu_max("ten 100").is_err());
    }

    #[test]
    fn keyed_files_are_looked_up() {
        let stat = "nr_periods 25\nnr_throttled 24\nthrottled_time 702003191\n";
        assert_eq!(parse_keyed(stat, "nr_throttled"), Some(24));
        assert_eq!(parse_keyed(stat, "missing"), None);
        assert_eq!(parse_keyed("usage_usec x\n", "usage_usec"), None);
    }
}
