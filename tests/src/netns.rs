//! Emulated hosts on one machine: Linux network namespaces on a private bridge.
//!
//! A [`Cluster`] of N nodes is N network namespaces (`pcmt<pid>s<seq>-a`, `-b`, ...), each
//! with loopback up and one veth leg on a bridge in the root namespace; the bridge and the
//! nodes get addresses in a private 10.x.y.0/24 chosen per cluster (no route leaves it: the
//! namespaces have no default route and the bridge is attached to nothing else). Each node has
//! a host NAME (`node-a`, `node-b`, ...): the rsh agent (`tests/netns/rsh-agent.sh`, written
//! into the cluster's directory next to a `hosts.map`) runs Open MPI's daemon in the node's
//! network namespace *and* in a new UTS namespace whose host name is NAME, so `gethostname()`
//! of every rank there returns NAME. `mpirun` itself stays in the root namespace and reaches
//! the daemons through the bridge.
//!
//! # Nothing shared but the link
//! Separate machines share no memory, so the emulated ones must not either: otherwise MPI
//! between two "hosts" takes shared memory and never crosses their link (measured on
//! 2026-12-02 with MPICH: 59 KB through a veth over 320,000 heat2d iterations, and a 5 s
//! link-down changed nothing). Each node therefore also has its own persistent mount
//! namespace and IPC namespace (held by a keeper process whose pid is in `ns/NAME.pid` of the
//! cluster's directory, entered by `node-exec.sh` with everything else), in which it has
//!
//! - its own `/dev/shm` (a tmpfs): POSIX shared-memory segments of one node are invisible
//!   on the others, and vanish with the node;
//! - its own System V IPC;
//! - its own boot id (a file of the node's bind-mounted over
//!   `/proc/sys/kernel/random/boot_id`): UCX (MPICH's transport) judges two processes to be
//!   on one machine, and so reachable through shared memory and cross-memory attach, by
//!   their boot id, which one kernel gives every namespace alike.
//!
//! Ranks on one node still share memory with each other (the same namespaces), as on a real
//! machine; `/tmp` and the rest of the file system stay shared, as a shared home would be.
//! [`Cluster::link_bytes`] counts what crosses a node's link and [`Cluster::set_link`]
//! takes it down and up (`tests/tests/link.rs` proves both ways that MPI crosses it).
//!
//! # CPU caps
//! [`Cluster::with_caps`] also gives node i a [`NodeCgroup`] with its own CPU cap
//! (`mpi-ios-<pid>s<seq>-node-a`, ...). Everything started on a node sits in both its
//! namespace and its cgroup: ranks (the rsh agent runs Open MPI's daemon through
//! `node-exec.sh`, which joins the cgroup before it execs), and whatever
//! [`Cluster::command_on`] starts (agents, pcmd, [`Cluster::start_hog`]). Nodes are entered
//! with `nsenter --net`, not `ip netns exec`, so that `/sys/fs/cgroup` stays visible inside
//! them: the IOS agent's sensor reads the node's cap there.
//!
//! # Cores (measured, and kept as found)
//! The emulated nodes share the machine's two cores. Open MPI binds each node's ranks to
//! that node's first cores, which are the same physical cores for every node: the first
//! rank of node-a, node-b and node-c all run on core 0 (two ranks on one node get cores 0
//! and 1; a replacement spawned onto a node is not bound). Hogs, agents and daemons are
//! not bound. We tried the alternatives on the adaptive experiments (`docs/results-log.md`,
//! "How the nodes are emulated"): with binding off, a hog on node-b ran on whichever core
//! was free and slowed the ranks of other nodes, which separate machines never do; with
//! each node pinned to a core of its own and caps of 0.45, the caps' 100 ms throttling
//! windows of two nodes drifted against each other and a synchronous job fell to 40% of
//! its speed (10 ms windows were worse). With the binding as found, the ranks time-share
//! core 0 finely, the cap only bites when a hog shares a node's quota, and runs repeat.
//! Under hydra (MPICH) ranks are not bound, and with 100 ms periods a hog's node and its
//! peer's locked out of phase for whole runs (one iteration per period); the caps now use
//! 10 ms periods ([`crate::cgroup::DEFAULT_PERIOD_US`], where the figures are).
//!
//! Dropping the cluster kills whatever still runs in its namespaces (Open MPI's daemons
//! daemonize, so they escape the harness's process group), then deletes the namespaces, the
//! bridge, the veths and the files, also when a test panicked. A cluster left behind by a test
//! process that was killed outright is removed by the next [`Cluster::new`].
//!
//! # MPICH (hydra)
//! With `MPI_IOS_RUNTIME=mpich` ([`Runtime::current`]) the same agent script serves as
//! hydra's `-launcher ssh -launcher-exec SCRIPT`: hydra calls it like ssh too, to start a
//! `hydra_pmi_proxy` on each node (also later, for spawns). `-localhost BRIDGE_ADDR` makes
//! the proxies call `mpiexec` back on the bridge (`-iface` needs the interface where
//! `mpiexec` runs, and the bridge's name differs from the nodes' `eth0`). The ranks get
//! `UCX_NET_DEVICES=eth0` and `UCX_TLS=tcp,self,sm`: UCX's TCP transport on `lo` is not
//! usable. Hostfiles are written in hydra's `host:N` form. The ranks also get the script as
//! `HYDRA_LAUNCHER_EXEC`, so that PCM checks a host outside the launch's host list with the
//! launcher hydra uses (`PCM_ALLOW_NEW_HOSTS`; [`Cluster::job_without_spares`] leaves the
//! unused nodes out of that list).
//!
//! # What Open MPI 4.1 needed (found by experiment)
//! - `--mca plm_rsh_agent SCRIPT`: Open MPI calls it like ssh, `SCRIPT HOST orted ...args`;
//!   it passed no options before HOST with a custom agent, but the script skips ssh-style
//!   options anyway. `--mca plm_rsh_no_tree_spawn 1` so that `mpirun` (which can run the
//!   agent) starts every daemon itself, including the ones started later for spawns.
//! - `--mca oob_tcp_if_include SUBNET`: `mpirun` must advertise its bridge address
//!   (`orte_hnp_uri` = `tcp://10.x.y.1:PORT`); otherwise the daemons try addresses they cannot
//!   reach. `--mca btl_tcp_if_include SUBNET --mca btl tcp,self,vader` for the ranks.
//! - The host names in the hostfile equal the names the daemons see (`hostname` in the UTS
//!   namespace), so nothing about FQDNs (`orte_keep_fqdn_hostnames`) was needed, nor
//!   `plm_rsh_args`, nor name resolution (no host name is ever looked up).
//! - Placement by the hostfile only (slots, default by-slot mapping). Both `--host` and a
//!   `--rankfile` restrict the job so that a later `MPI_Comm_spawn` onto another hostfile node
//!   fails with "All nodes which are allocated for this job are already filled" and then hangs,
//!   even with `--oversubscribe`. So [`Cluster::job`] writes a hostfile per placement: the
//!   nodes in order of first use with `slots=` their rank count, then the unused nodes.
//! - Departed processes must not leave without `MPI_Finalize`: with
//!   `OMPI_MCA_orte_allowed_exit_without_sync=1` the job often did not end, and a later spawn
//!   onto the node a departed original rank had left failed in the replacement's `MPI_Init`
//!   ("ORTE_ERROR_LOG: Not supported in file dpm.c at line 401"). PCM therefore keeps
//!   departed processes waiting, at no CPU, until their launch ends (pcm's `launch` module).
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::cgroup::{self, CpuCap, NodeCgroup};
use crate::{Group, MpiJob, Runtime, RuntimeExt as _};

/// Prefix of every namespace a cluster creates (`pcmt<pid>s<seq>-<letter>`).
const NETNS_PREFIX: &str = "pcmt";
/// Prefix of every link a cluster creates (`pt<pid>s<seq>br` for the bridge,
/// `pt<pid>s<seq><letter>` for the root-side veth legs). Kept short: at most 15 characters.
const LINK_PREFIX: &str = "pt";
/// The rsh agent, written next to the `hosts.map` it reads.
const RSH_AGENT: &str = include_str!("../netns/rsh-agent.sh");
/// Runs a command on a node (cgroups, network namespace, host name); the agent uses it too.
const NODE_EXEC: &str = include_str!("../netns/node-exec.sh");
/// Folder of the nodes' boot ids and namespace keepers' pids, in the cluster's directory
/// (node-exec.sh finds them there by host name).
const NS_DIR: &str = "ns";
/// The file that gives a kernel's boot id, which UCX reads to tell machines apart.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

static CLUSTERS: AtomicU32 = AtomicU32::new(0);

/// One emulated host.
#[derive(Debug, Clone)]
pub struct Node {
    /// The host name processes on it see (`node-a`, ...).
    pub name: String,
    /// Its network namespace.
    pub netns: String,
    /// Its address on the cluster's bridge.
    pub addr: String,
}

/// Bytes that crossed a node's link ([`Cluster::link_bytes`]), from the node's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkBytes {
    /// Sent by the node.
    pub sent: u64,
    /// Received by the node.
    pub received: u64,
}

impl std::ops::Sub for LinkBytes {
    type Output = LinkBytes;
    fn sub(self, earlier: LinkBytes) -> LinkBytes {
        LinkBytes {
            sent: self.sent.saturating_sub(earlier.sent),
            received: self.received.saturating_sub(earlier.received),
        }
    }
}

/// N emulated hosts; everything is removed on drop.
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<Node>,
    /// Namespaces created so far (for cleanup, also after a failure half-way).
    created_netns: Vec<String>,
    /// Links created in the root namespace (bridge, veth legs).
    created_links: Vec<String>,
    subnet: String,
    bridge_addr: String,
    dir: tempfile::TempDir,
    agent: PathBuf,
    node_exec: PathBuf,
    hostfile: PathBuf,
    jobs: AtomicU32,
    /// Node i's cgroup, if it has a cap. Dropped after the namespaces' processes are killed.
    cgroups: Vec<Option<NodeCgroup>>,
    /// Beside each capped node's cgroup, one its daemons may run in
    /// ([`Cluster::daemon_command_on`]): not capped below the machine, so the node's cap
    /// never delays their answers.
    daemon_cgroups: Vec<Option<NodeCgroup>>,
    /// The processes that hold the nodes' mount and IPC namespaces ([`Cluster::isolate_nodes`]).
    keepers: Vec<std::process::Child>,
}

/// Runs a command, returning its stdout or a message with its stderr.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

pub(crate) fn ip(args: &[&str]) -> Result<String, String> {
    run("ip", args)
}

/// A hostfile line giving `host` `slots` processes, in the current runtime's syntax.
fn hostfile_line(host: &str, slots: usize) -> String {
    Runtime::current().hostfile_line(host, u32::try_from(slots).unwrap_or(u32::MAX))
}

/// Process ids whose network namespace is `netns`.
fn netns_pids(netns: &str) -> Vec<i32> {
    ip(&["netns", "pids", netns])
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Kills everything in `netns` (repeatedly: daemons may fork while dying).
pub(crate) fn kill_netns_processes(netns: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = netns_pids(netns);
        if pids.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The process id in a name `<prefix><pid>s...`, if it has that form.
fn owner_pid(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || !rest[digits.len()..].starts_with('s') {
        return None;
    }
    digits.parse().ok()
}

/// Removes namespaces, links and files of clusters whose test process is gone (killed before its
/// `Drop` could run).
pub(crate) fn sweep_stale() {
    let me = std::process::id();
    for line in ip(&["netns", "list"]).unwrap_or_default().lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        if let Some(pid) = owner_pid(name, NETNS_PREFIX) {
            if pid != me && !process_alive(pid) {
                kill_netns_processes(name);
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = owner_pid(&name, "pcm-netns-") {
                if pid != me && !process_alive(pid) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
    }
    for line in ip(&["-o", "link", "show"]).unwrap_or_default().lines() {
        // "12: pt123s0br: <...>" or "13: pt123s0a@if2: <...>"
        let Some(name) = line.split(':').nth(1).map(str::trim) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name);
        if let Some(pid) = owner_pid(name, LINK_PREFIX) {
            if pid != me && !process_alive(pid) {
                let _ = ip(&["link", "del", name]);
            }
        }
    }
}

/// A 10.a.b.0/24 that no address or route of the root namespace touches yet.
fn free_subnet(seed: u32) -> Result<(u8, u8), String> {
    let used = format!(
        "{}\n{}",
        ip(&["-4", "-o", "addr", "show"])?,
        ip(&["-4", "route", "show", "table", "all"])?
    );
    for attempt in 0..4096u32 {
        let s = seed
            .wrapping_mul(2_654_435_761)
            .wrapping_add(attempt.wrapping_mul(40_503));
        // 10.64.0.0 - 10.191.255.0: clear of 10.0/16-style defaults and of 10.255 (resolver).
        let a = 64 + (s >> 8) % 128;
        let b = s % 256;
        let probe = format!("10.{a}.{b}.");
        if !used.contains(&probe) {
            return Ok((a as u8, b as u8));
        }
    }
    Err("no free 10.x.y.0/24 subnet found".into())
}

impl Cluster {
    /// A cluster of `nodes` nodes for the test `test`, or `None` after printing why the test
    /// is skipped (emulated hosts cannot be made here: see [`Cluster::available`]). Panics
    /// when they can be made but making them fails.
    pub fn for_test(test: &str, nodes: usize) -> Option<Cluster> {
        if let Err(reason) = Cluster::available() {
            eprintln!("{test}: skipped: {reason}");
            return None;
        }
        Some(
            Cluster::new(nodes).unwrap_or_else(|e| panic!("cannot create the emulated hosts: {e}")),
        )
    }

    /// Whether emulated hosts can be made here: root, `ip netns` usable, `unshare` present.
    /// Checked once per process.
    pub fn available() -> Result<(), String> {
        static AVAILABLE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
        AVAILABLE.get_or_init(Self::check_available).clone()
    }

    fn check_available() -> Result<(), String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("network namespaces need root".into());
        }
        run("unshare", &["--version"]).map_err(|e| format!("unshare is missing: {e}"))?;
        run("nsenter", &["--version"]).map_err(|e| format!("nsenter is missing: {e}"))?;
        run("sh", &["-c", "command -v hostname"]).map_err(|_| "hostname is missing".to_string())?;
        let probe = format!("{NETNS_PREFIX}{}sprobe", std::process::id());
        ip(&["netns", "add", &probe]).map_err(|e| format!("ip netns does not work: {e}"))?;
        let works = run(
            "nsenter",
            &[
                &format!("--net=/run/netns/{probe}"),
                "unshare",
                "--uts",
                "sh",
                "-c",
                "hostname probe-x && hostname",
            ],
        );
        let _ = ip(&["netns", "del", &probe]);
        // A node's own /dev/shm and boot id (see the module notes), in a throwaway mount
        // namespace.
        let isolated = run(
            "unshare",
            &[
                "--mount",
                "--ipc",
                "--propagation",
                "private",
                "sh",
                "-c",
                &format!(
                    "mount -t tmpfs tmpfs /dev/shm && mount --bind /dev/null {BOOT_ID} && \
                     test -z \"$(cat {BOOT_ID})\" && echo isolated"
                ),
            ],
        );
        match isolated {
            Ok(out) if out.trim() == "isolated" => {}
            Ok(out) => {
                return Err(format!(
                    "a node's boot id could not be replaced (got {out:?})"
                ))
            }
            Err(e) => {
                return Err(format!(
                    "cannot give a node its own /dev/shm and boot id: {e}"
                ))
            }
        }
        match works {
            Ok(out) if out.trim() == "probe-x" => Ok(()),
            Ok(out) => Err(format!(
                "a UTS namespace did not take its host name (got {out:?})"
            )),
            Err(e) => Err(format!(
                "cannot run in a namespace with its own host name: {e}"
            )),
        }
    }

    /// Creates `n` nodes (`node-a`...), the bridge, the hostfile and the rsh agent.
    pub fn new(n: usize) -> Result<Cluster, String> {
        Self::with_caps(&vec![None; n])
    }

    /// Creates one node per entry of `caps` (`node-a`...), as [`Cluster::new`] does; node i
    /// also gets a cgroup capping its CPU at `caps[i]` when that is `Some` (see the module
    /// notes). Fails with [`cgroup::available`]'s reason when a cap is asked for and cgroups
    /// cannot be written; tests should check that first and skip.
    pub fn with_caps(caps: &[Option<CpuCap>]) -> Result<Cluster, String> {
        let n = caps.len();
        assert!((1..=26).contains(&n), "1 to 26 nodes");
        if caps.iter().any(Option::is_some) {
            cgroup::available().map_err(|e| format!("cannot cap node CPUs: {e}"))?;
        }
        sweep_stale();
        cgroup::sweep_stale();
        let pid = std::process::id();
        let seq = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let id = format!("{pid}s{seq}");
        let (a, b) = free_subnet(pid.wrapping_mul(64).wrapping_add(seq))?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("pcm-netns-{id}-"))
            .tempdir()
            .map_err(|e| e.to_string())?;
        let mut cluster = Cluster {
            nodes: Vec::new(),
            created_netns: Vec::new(),
            created_links: Vec::new(),
            subnet: format!("10.{a}.{b}.0/24"),
            bridge_addr: format!("10.{a}.{b}.1"),
            agent: dir.path().join("rsh-agent.sh"),
            node_exec: dir.path().join("node-exec.sh"),
            hostfile: dir.path().join("hostfile"),
            dir,
            jobs: AtomicU32::new(0),
            cgroups: Vec::new(),
            daemon_cgroups: Vec::new(),
            keepers: Vec::new(),
        };

        let bridge = format!("{LINK_PREFIX}{id}br");
        assert!(bridge.len() <= 15, "link name too long: {bridge}");
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        cluster.created_links.push(bridge.clone());
        ip(&[
            "addr",
            "add",
            &format!("{}/24", cluster.bridge_addr),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;

        for i in 0..n {
            let letter = (b'a' + i as u8) as char;
            let netns = format!("{NETNS_PREFIX}{id}-{letter}");
            let leg = format!("{LINK_PREFIX}{id}{letter}");
            let addr = format!("10.{a}.{b}.{}", 2 + i);
            ip(&["netns", "add", &netns])?;
            cluster.created_netns.push(netns.clone());
            ip(&[
                "link", "add", &leg, "type", "veth", "peer", "name", "eth0", "netns", &netns,
            ])?;
            cluster.created_links.push(leg.clone());
            ip(&["link", "set", &leg, "master", &bridge])?;
            ip(&["link", "set", &leg, "up"])?;
            ip(&[
                "-n",
                &netns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &netns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &netns, "link", "set", "lo", "up"])?;
            cluster.nodes.push(Node {
                name: format!("node-{letter}"),
                netns,
                addr,
            });
        }

        let machine = CpuCap::cores(
            std::thread::available_parallelism()
                .map(|n| n.get() as f64)
                .unwrap_or(1.0),
        );
        for (i, (node, cap)) in cluster.nodes.iter().zip(caps).enumerate() {
            let name = format!("{}{id}-{}", cgroup::PREFIX, node.name);
            // Each node its own period, so that no two nodes' throttling windows lock in
            // one phase ([`cgroup::PERIOD_STEP_US`]).
            let period = cgroup::DEFAULT_PERIOD_US + cgroup::PERIOD_STEP_US * i as u64;
            let (cgroup, daemons) = match cap {
                Some(cap) => (
                    Some(
                        NodeCgroup::create(&name, cap.with_period(period))
                            .map_err(|e| format!("{}: {e}", node.name))?,
                    ),
                    Some(
                        NodeCgroup::create(&format!("{name}-daemons"), machine)
                            .map_err(|e| format!("{}'s daemons: {e}", node.name))?,
                    ),
                ),
                None => (None, None),
            };
            cluster.cgroups.push(cgroup);
            cluster.daemon_cgroups.push(daemons);
        }

        let mut map = String::new();
        let mut hostfile = String::new();
        for (node, cgroup) in cluster.nodes.iter().zip(&cluster.cgroups) {
            write!(map, "{} {}", node.name, node.netns).unwrap();
            for procs in cgroup.iter().flat_map(NodeCgroup::procs_files) {
                write!(map, " {}", procs.display()).unwrap();
            }
            writeln!(map).unwrap();
            writeln!(hostfile, "{}", hostfile_line(&node.name, 4)).unwrap();
        }
        std::fs::write(cluster.dir.path().join("hosts.map"), map).map_err(|e| e.to_string())?;
        let mut daemons_map = String::new();
        for (node, cgroup) in cluster.nodes.iter().zip(&cluster.daemon_cgroups) {
            write!(daemons_map, "{}", node.name).unwrap();
            for procs in cgroup.iter().flat_map(NodeCgroup::procs_files) {
                write!(daemons_map, " {}", procs.display()).unwrap();
            }
            writeln!(daemons_map).unwrap();
        }
        std::fs::write(cluster.dir.path().join("daemons.map"), daemons_map)
            .map_err(|e| e.to_string())?;
        std::fs::write(&cluster.hostfile, hostfile).map_err(|e| e.to_string())?;
        use std::os::unix::fs::PermissionsExt;
        for (path, text) in [(&cluster.agent, RSH_AGENT), (&cluster.node_exec, NODE_EXEC)] {
            std::fs::write(path, text).map_err(|e| e.to_string())?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| e.to_string())?;
        }
        cluster.isolate_nodes()?;
        cluster.wait_reachable()?;
        Ok(cluster)
    }

    /// Gives each node its own mount and IPC namespace, with its own `/dev/shm` and boot id
    /// (see the module notes). Each pair of namespaces is held by a keeper process (a
    /// `sleep` in them, outside the node's network namespace, so that the node still counts
    /// as empty when nothing of a job runs there), whose pid goes to `ns/NAME.pid` in the
    /// cluster's directory: `node-exec.sh` enters the namespaces through `/proc/PID/ns/`,
    /// which every node sees (a namespace file bind-mounted in the root's mount namespace
    /// would not be seen from inside another node, where PCM runs the launcher to probe a
    /// host). Keepers end with the cluster, or with the thread that made it.
    fn isolate_nodes(&mut self) -> Result<(), String> {
        use std::io::BufRead as _;
        let ns_dir = self.dir.path().join(NS_DIR);
        std::fs::create_dir(&ns_dir).map_err(|e| format!("{}: {e}", ns_dir.display()))?;
        for node in &self.nodes {
            let boot_id = ns_dir.join(format!("{}.boot_id", node.name));
            let uuid = std::fs::read_to_string("/proc/sys/kernel/random/uuid")
                .map_err(|e| format!("no random boot id for {}: {e}", node.name))?;
            std::fs::write(&boot_id, uuid).map_err(|e| format!("{}: {e}", boot_id.display()))?;
            let mut command = Command::new("unshare");
            command
                .args(["--mount", "--ipc", "--propagation", "private", "sh", "-c"])
                .arg(
                    "mount -t tmpfs -o mode=1777 tmpfs /dev/shm && mount --bind \"$1\" \"$2\" \
                     && echo ready && exec sleep infinity",
                )
                .args(["keeper".as_ref(), boot_id.as_os_str(), BOOT_ID.as_ref()])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            pcmrun::end_with_parent(&mut command);
            let mut keeper = command
                .spawn()
                .map_err(|e| format!("{}: cannot start its namespaces: {e}", node.name))?;
            let mut ready = String::new();
            if let Some(stdout) = keeper.stdout.take() {
                let _ = std::io::BufReader::new(stdout).read_line(&mut ready);
            }
            let pid = keeper.id();
            self.keepers.push(keeper);
            if ready.trim() != "ready" {
                let keeper = self.keepers.last_mut().expect("just pushed");
                let _ = keeper.kill();
                let mut why = String::new();
                if let Some(mut stderr) = keeper.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut stderr, &mut why);
                }
                return Err(format!(
                    "{}: cannot give it its own memory: {}",
                    node.name,
                    why.trim()
                ));
            }
            let pid_file = ns_dir.join(format!("{}.pid", node.name));
            std::fs::write(&pid_file, format!("{pid}\n"))
                .map_err(|e| format!("{}: {e}", pid_file.display()))?;
        }
        Ok(())
    }

    /// Waits until every node reaches the bridge address. Probes with a TCP connect to a
    /// closed port of the bridge address: a quick refusal proves the path works, a timeout
    /// (exit status 124) means it does not yet.
    fn wait_reachable(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let probe = format!("echo > /dev/tcp/{}/9", self.bridge_addr);
        for node in &self.nodes {
            loop {
                let status = Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        &node.netns,
                        "timeout",
                        "1",
                        "bash",
                        "-c",
                        &probe,
                    ])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .map_err(|e| format!("cannot probe {}: {e}", node.name))?;
                if status.code() != Some(124) {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("{} cannot reach {}", node.name, self.bridge_addr));
                }
            }
        }
        Ok(())
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node with host name `host`; panics if there is none.
    pub fn node(&self, host: &str) -> &Node {
        &self.nodes[self.index(host)]
    }

    /// Process ids of everything running on node `host` (in its network namespace).
    pub fn processes_on(&self, host: &str) -> Vec<i32> {
        netns_pids(&self.node(host).netns)
    }

    /// Kills everything running on node `host` (SIGKILL), as an owner taking the machine
    /// back would.
    pub fn kill_everything_on(&self, host: &str) {
        kill_netns_processes(&self.node(host).netns);
    }

    /// Powers node `host` off, as a machine that dies or is unplugged: its network link goes
    /// down, the launcher can no longer reach it (its line leaves `hosts.map`, so the agent
    /// script fails as ssh to a dead host does, with status 255), and everything running on
    /// it is killed (SIGKILL).
    pub fn power_off(&self, host: &str) {
        let index = self.index(host);
        let map = self.dir.path().join("hosts.map");
        let text = std::fs::read_to_string(&map).unwrap();
        let kept: String = text
            .lines()
            .filter(|line| line.split_whitespace().next() != Some(host))
            .map(|line| format!("{line}\n"))
            .collect();
        // Replaced whole (rename), so that a launcher reading it meanwhile sees either file.
        let temp = self.dir.path().join("hosts.map.new");
        std::fs::write(&temp, kept).unwrap();
        std::fs::rename(&temp, &map).unwrap();
        if let Err(e) = self.set_link(host, false) {
            eprintln!("power_off {host}: {e}");
        }
        kill_netns_processes(&self.nodes[index].netns);
    }

    /// The root-side veth leg of node `host`'s link to the bridge: the bridge's name with
    /// the node's letter for `br`.
    fn leg(&self, host: &str) -> String {
        let letter = (b'a' + self.index(host) as u8) as char;
        let bridge = self
            .created_links
            .first()
            .expect("a cluster has its bridge");
        let id = bridge
            .strip_suffix("br")
            .expect("the bridge's name ends in br");
        format!("{id}{letter}")
    }

    /// Takes node `host`'s link down (`up == false`: nothing crosses it any more, as with a
    /// pulled cable) or brings it back up.
    pub fn set_link(&self, host: &str, up: bool) -> Result<(), String> {
        let state = if up { "up" } else { "down" };
        ip(&["link", "set", &self.leg(host), state]).map(drop)
    }

    /// Bytes that crossed node `host`'s link so far, counted at the bridge's end of it.
    pub fn link_bytes(&self, host: &str) -> LinkBytes {
        let leg = self.leg(host);
        let read = |counter: &str| {
            let path = format!("/sys/class/net/{leg}/statistics/{counter}");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{host}'s link counter {path}: {e}"));
            text.trim()
                .parse::<u64>()
                .unwrap_or_else(|e| panic!("{path} holds {text:?}: {e}"))
        };
        // What the bridge's end receives, the node sent.
        LinkBytes {
            sent: read("rx_bytes"),
            received: read("tx_bytes"),
        }
    }

    fn index(&self, host: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.name == host)
            .unwrap_or_else(|| panic!("{host} is not a node of this cluster"))
    }

    /// The cgroup of node `host`, if it has a cap; panics if there is no such node.
    pub fn cgroup(&self, host: &str) -> Option<&NodeCgroup> {
        self.cgroups[self.index(host)].as_ref()
    }

    /// `node-exec.sh HOST PROGRAM ARGS...` runs PROGRAM on node HOST (cgroups, network
    /// namespace, host name); for scripts. [`Cluster::command_on`] wraps it.
    pub fn node_exec(&self) -> &Path {
        &self.node_exec
    }

    /// A command that runs `program args...` on node `host`: in its cgroups (when capped),
    /// its network namespace, with host name `host`. Environment, working directory and
    /// stdio set on the returned `Command` reach `program`, which keeps the process id the
    /// command starts (so `Group` and `kill` reach it). Panics if there is no such node.
    pub fn command_on<I, S>(&self, host: &str, program: impl AsRef<OsStr>, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.index(host);
        let mut command = Command::new(&self.node_exec);
        command.arg(host).arg(program).args(args);
        command
    }

    /// Like [`Cluster::command_on`], for a node's daemon (its IOS agent, which starts its
    /// pcmd): in the node's namespaces and host name, but in the cgroup beside the node's,
    /// uncapped, so that the cap's throttling never holds up its answers (on a real host a
    /// daemon that wakes gets a CPU within a fraction of a millisecond; in a capped cgroup
    /// it waits out the rest of the cap's period, milliseconds, whenever the node's ranks
    /// used up the quota). It is told the node's cgroup in `IOS_NODE_CGROUP`, so that it
    /// still profiles the node's cap and load, not its own. An uncapped node has no cgroup:
    /// there this is `command_on`.
    pub fn daemon_command_on<I, S>(
        &self,
        host: &str,
        program: impl AsRef<OsStr>,
        args: I,
    ) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let Some(node) = self.cgroup(host) else {
            return self.command_on(host, program, args);
        };
        let mut command = Command::new(&self.node_exec);
        command
            .arg("--daemon")
            .arg(host)
            .arg(program)
            .args(args)
            // The harness makes its cgroups at the top of each hierarchy, whose root the
            // process sees as `/` (no cgroup namespace, or one rooted at the mount).
            .env(node_sensor::NODE_CGROUP_ENV, format!("/{}", node.name()));
        command
    }

    /// Starts `busy_loops` CPU busy loops (single-threaded shells, at least 1) on node `host`
    /// (output files `LABEL.out`/`.err` in `dir`); they run until the returned group is
    /// dropped or killed.
    pub fn start_hog(&self, host: &str, dir: &Path, label: &str, busy_loops: usize) -> Group {
        let script = match busy_loops {
            0 | 1 => "while :; do :; done".to_owned(),
            n => format!("for i in $(seq {n}); do (while :; do :; done) & done; wait"),
        };
        Group::start(
            self.command_on(host, "/bin/sh", ["-c", script.as_str()]),
            dir,
            label,
        )
    }

    /// The root namespace's address on the cluster's bridge: servers that every node must
    /// reach (a peer server) listen there.
    pub fn bridge_addr(&self) -> &str {
        &self.bridge_addr
    }

    /// Host names of the nodes (`node-a`, ...).
    pub fn host_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// The cluster's subnet (`10.a.b.0/24`).
    pub fn subnet(&self) -> &str {
        &self.subnet
    }

    /// The hostfile listing every node (`node-a slots=4` ...).
    pub fn hostfile(&self) -> &Path {
        &self.hostfile
    }

    /// Kills every process running on the nodes (in their network namespaces) and waits
    /// until they are gone, at most 5 s. The ranks of a launch killed through its process
    /// group outlive it by up to a second (their node daemon notices later), and would run
    /// on into the next experiment.
    pub fn clear_nodes(&self) {
        for netns in &self.created_netns {
            kill_netns_processes(netns);
        }
    }

    /// The rsh agent script.
    pub fn agent(&self) -> &Path {
        &self.agent
    }

    /// The launcher options for running on the cluster with `hostfile` as the allocation,
    /// for [`Runtime::current`] (see the module notes).
    pub fn mpirun_options_with(&self, hostfile: &Path) -> Vec<String> {
        let mut options: Vec<String> = Runtime::current()
            .hostfile_args(hostfile)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        options.extend(self.launcher_options());
        options
    }

    /// The launcher options for running on the cluster, without the hostfile (for a
    /// launcher such as `pcmrun` that is given the hostfile by its own option).
    pub fn launcher_options(&self) -> Vec<String> {
        if Runtime::current() == Runtime::Mpich {
            return [
                "-launcher",
                "ssh",
                "-launcher-exec",
                &self.agent.display().to_string(),
                "-localhost",
                &self.bridge_addr,
            ]
            .map(str::to_owned)
            .to_vec();
        }
        let mut options = Vec::new();
        for (k, v) in [
            ("plm_rsh_agent", self.agent.display().to_string()),
            ("plm_rsh_no_tree_spawn", "1".into()),
            ("oob_tcp_if_include", self.subnet.clone()),
            ("btl_tcp_if_include", self.subnet.clone()),
            ("btl", "tcp,self,vader".into()),
        ] {
            options.extend(["--mca".to_string(), k.to_string(), v]);
        }
        options
    }

    /// The mpirun options for running on the cluster, ranks placed by slot over the
    /// cluster's hostfile (four per node in node order).
    pub fn mpirun_options(&self) -> Vec<String> {
        self.mpirun_options_with(&self.hostfile)
    }

    /// Environment for jobs on the cluster (see the module notes).
    pub fn env_with(&self, hostfile: &Path) -> Vec<(String, String)> {
        let mut env = vec![("PCM_HOSTFILE".into(), hostfile.display().to_string())];
        if Runtime::current() == Runtime::Mpich {
            // UCX between nodes over their one interface; its TCP transport on `lo` is not
            // usable ("no route"), and shared memory joins ranks on one node.
            env.push(("UCX_NET_DEVICES".into(), "eth0".into()));
            env.push(("UCX_TLS".into(), "tcp,self,sm".into()));
            // The environment form of `-launcher-exec`, so that PCM checks a host outside
            // the allocation with the launcher hydra uses (`PCM_ALLOW_NEW_HOSTS`).
            env.push((
                "HYDRA_LAUNCHER_EXEC".into(),
                self.agent.display().to_string(),
            ));
        }
        env
    }

    /// `pcmrun`'s options for a job on the cluster with `hostfile` as its allocation: the
    /// hostfile, and the cluster's launcher options as `--launcher-arg`s.
    pub fn pcmrun_args(&self, hostfile: &Path) -> Vec<String> {
        let mut args = vec!["--hostfile".to_owned(), hostfile.display().to_string()];
        for option in self.launcher_options() {
            args.extend(["--launcher-arg".to_owned(), option]);
        }
        args
    }

    /// `pcmrun`'s environment for a job on the cluster with `hostfile`: the jobs'
    /// environment, and the agent script as `PCM_LAUNCHER`, the remote launcher through
    /// which pcmrun starts a pcmd on each node and probes the nodes.
    pub fn pcmrun_env(&self, hostfile: &Path) -> Vec<(String, String)> {
        let mut env = self.env_with(hostfile);
        env.push(("PCM_LAUNCHER".into(), self.agent.display().to_string()));
        env
    }

    /// Environment for jobs using the cluster's hostfile.
    pub fn env(&self) -> Vec<(String, String)> {
        self.env_with(&self.hostfile)
    }

    /// Writes a hostfile that places rank i on `placement[i]`: the nodes in order of first
    /// use with `slots=` their number of ranks, then the unused nodes (`slots=1`), all in
    /// the allocation. Ranks on one node must be consecutive.
    pub fn hostfile_for(&self, placement: &[&str]) -> PathBuf {
        self.hostfile_with(placement, true)
    }

    /// As [`Cluster::hostfile_for`], without the unused nodes: a launch that knows no
    /// other host.
    pub fn hostfile_without_spares(&self, placement: &[&str]) -> PathBuf {
        self.hostfile_with(placement, false)
    }

    /// As [`Cluster::hostfile_for`]; the unused nodes are listed only if `spares`.
    fn hostfile_with(&self, placement: &[&str], spares: bool) -> PathBuf {
        let mut order: Vec<(&str, usize)> = Vec::new();
        for (rank, host) in placement.iter().enumerate() {
            assert!(
                self.nodes.iter().any(|n| n.name == *host),
                "rank {rank}: {host} is not a node of this cluster"
            );
            match order.last_mut() {
                Some((last, count)) if last == host => *count += 1,
                _ => {
                    assert!(
                        !order.iter().any(|(h, _)| h == host),
                        "ranks on {host} must be consecutive in {placement:?}"
                    );
                    order.push((host, 1));
                }
            }
        }
        let mut text = String::new();
        for (host, count) in &order {
            writeln!(text, "{}", hostfile_line(host, *count)).unwrap();
        }
        for node in self.nodes.iter().filter(|_| spares) {
            if !order.iter().any(|(h, _)| *h == node.name) {
                writeln!(text, "{}", hostfile_line(&node.name, 1)).unwrap();
            }
        }
        let n = self.jobs.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.path().join(format!("hostfile-{n}"));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `job` set up to run on the cluster with rank i on `placement[i]`.
    pub fn job(&self, job: MpiJob, placement: &[&str]) -> MpiJob {
        self.job_with(job, placement, true)
    }

    /// As [`Cluster::job`], but the launch's host list names only the hosts of `placement`:
    /// the other nodes are outside the job's allocation, as hosts that join the pool after
    /// the job started are.
    pub fn job_without_spares(&self, job: MpiJob, placement: &[&str]) -> MpiJob {
        self.job_with(job, placement, false)
    }

    fn job_with(&self, mut job: MpiJob, placement: &[&str], spares: bool) -> MpiJob {
        assert_eq!(job.ranks, placement.len(), "one host per rank");
        let hostfile = self.hostfile_with(placement, spares);
        for (k, v) in self.env_with(&hostfile) {
            job = job.env(&k, v);
        }
        job.mpirun_options
            .extend(self.mpirun_options_with(&hostfile));
        job
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for netns in &self.created_netns {
            kill_netns_processes(netns);
        }
        // Removes the cgroups (killing anything left in them, e.g. a process that joined a
        // node's cgroup but had not entered its namespace yet).
        self.cgroups.clear();
        self.daemon_cgroups.clear();
        for netns in &self.created_netns {
            if let Err(e) = ip(&["netns", "del", netns]) {
                eprintln!("netns cleanup: {e}");
            }
        }
        for link in self.created_links.iter().rev() {
            // The veth legs vanish with their peers' namespaces; the bridge does not.
            if ip(&["link", "show", link]).is_ok() {
                if let Err(e) = ip(&["link", "del", link]) {
                    eprintln!("netns cleanup: {e}");
                }
            }
        }
        // The nodes' mount and IPC namespaces (and their /dev/shm) end with their keepers,
        // now that nothing else runs in them.
        for keeper in &mut self.keepers {
            let _ = keeper.kill();
            let _ = keeper.wait();
        }
    }
}

/// Whether emulated nodes can be made here (network namespaces and writable cgroups); if not,
/// prints why on stderr, so that a test that returns early says it was skipped.
pub fn emulated_nodes_usable() -> bool {
    for check in [Cluster::available(), crate::cgroup::available()] {
        if let Err(why) = check {
            eprintln!("skipped: {why}");
            return false;
        }
    }
    true
}

/// CPU cap of an emulated node in the scenario tests, in cores: 0.6, or `MPI_IOS_TEST_CAP`
/// (the tests must hold from 0.3 to 1.0, as machines of one kind differ in speed).
///
/// # Panics
/// If `MPI_IOS_TEST_CAP` is set but is not a number.
pub fn test_node_cap() -> f64 {
    match std::env::var("MPI_IOS_TEST_CAP") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|e| panic!("MPI_IOS_TEST_CAP={v:?} is not a number of cores: {e}")),
        Err(_) => 0.6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_parses_only_cluster_names() {
        assert_eq!(owner_pid("pcmt123s0-a", NETNS_PREFIX), Some(123));
        assert_eq!(owner_pid("pt77s12b", LINK_PREFIX), Some(77));
        assert_eq!(owner_pid("pt77", LINK_PREFIX), None);
        assert_eq!(owner_pid("pcmtx", NETNS_PREFIX), None);
        assert_eq!(owner_pid("eth0", LINK_PREFIX), None);
    }
}
