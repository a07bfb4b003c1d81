//! The processes MPI jobs run on this node, as a leaving agent must see them gone before it
//! tells the owner the machine is free: every rank registered with the node's pcmd, and the
//! launcher's proxy that started it (hydra's `hydra_pmi_proxy`, Open MPI's `orted` or
//! `prted`). A rank that moved away may outlive its move (Open MPI keeps a departed process
//! until its job ends), and a proxy exits only after its last rank: killing either would
//! end the whole job. Processes are told apart by pid and start time, so a pid the kernel
//! reuses is not mistaken for the old process; a zombie counts as gone (it holds nothing
//! and its parent reaps it).

use std::collections::BTreeMap;
use std::path::PathBuf;

use ios_agent_profile::procfs::parse_stat_identity;
pub use ios_agent_proto::leave::{JobProcess, Role};

/// Command names of the launcher proxies that start ranks on a node.
pub const LAUNCHER_PROXIES: &[&str] = &["hydra_pmi_proxy", "orted", "prted"];

/// The job processes seen on this node and not yet gone.
#[derive(Debug)]
pub struct JobProcesses {
    proc_root: PathBuf,
    /// pid -> (start time, process).
    seen: BTreeMap<u32, (u64, JobProcess)>,
}

impl Default for JobProcesses {
    fn default() -> Self {
        JobProcesses::new("/proc")
    }
}

impl JobProcesses {
    /// A tracker reading `proc_root` (`/proc`; a directory of fake `PID/stat` files in tests).
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        JobProcesses {
            proc_root: proc_root.into(),
            seen: BTreeMap::new(),
        }
    }

    /// Notes the ranks pcmd reports (by pid) and the launcher proxies that are their
    /// parents. Pids that cannot be read (already gone) are skipped.
    pub fn note_ranks(&mut self, pids: &[u32]) {
        for &pid in pids {
            let Some(rank) = self.identity(pid) else {
                continue;
            };
            let parent = rank.ppid;
            self.insert(pid, rank.start_time, rank.comm, Role::Rank);
            if let Some(p) = self.identity(parent) {
                if LAUNCHER_PROXIES.contains(&p.comm.as_str()) {
                    self.insert(parent, p.start_time, p.comm, Role::Launcher);
                }
            }
        }
    }

    /// The noted processes still alive (neither exited, nor zombies, nor replaced by another
    /// process with the same pid), ranks first; forgets the others.
    pub fn alive(&mut self) -> Vec<JobProcess> {
        self.forget_gone();
        let mut out: Vec<JobProcess> = self.seen.values().map(|(_, p)| p.clone()).collect();
        out.sort_by_key(|p| (p.role, p.pid));
        out
    }

    /// Forgets the noted processes that are gone, so that an agent running for months keeps
    /// only the live ones.
    pub fn forget_gone(&mut self) {
        let pids: Vec<u32> = self.seen.keys().copied().collect();
        for pid in pids {
            let same = self.identity(pid).is_some_and(|now| {
                now.state != 'Z'
                    && self
                        .seen
                        .get(&pid)
                        .is_some_and(|(t, _)| *t == now.start_time)
            });
            if !same {
                self.seen.remove(&pid);
            }
        }
    }

    /// The start time of process `pid` (clock ticks after boot), if it can be read.
    pub fn start_time(&self, pid: u32) -> Option<u64> {
        self.identity(pid).map(|i| i.start_time)
    }

    /// Whether process `pid` is gone: it exited, is a zombie, or its pid now belongs to a
    /// process started at another time than `start_time` (when known). A process whose
    /// stat cannot be read for another reason than its absence (a `/proc` mounted with
    /// `hidepid`) counts as alive, and so does pid 0 (no pid known): a rank is never
    /// dropped on a guess.
    pub fn is_gone(&self, pid: u32, start_time: Option<u64>) -> bool {
        if pid == 0 {
            return false;
        }
        match std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("stat")) {
            Ok(stat) => parse_stat_identity(&stat).is_some_and(|now| {
                now.state == 'Z' || start_time.is_some_and(|t| t != now.start_time)
            }),
            Err(e) => {
                matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) || e.raw_os_error() == Some(nix::libc::ESRCH)
            }
        }
    }

    fn insert(&mut self, pid: u32, start_time: u64, comm: String, role: Role) {
        self.seen
            .entry(pid)
            .and_modify(|(t, p)| {
                if *t != start_time {
                    // The pid was reused: this is another process.
                    *t = start_time;
                    *p = JobProcess {
                        pid,
                        comm: comm.clone(),
                        role,
                    };
                }
            })
            .or_insert((start_time, JobProcess { pid, comm, role }));
    }

    fn identity(&self, pid: u32) -> Option<ios_agent_profile::procfs::StatIdentity> {
        let stat =
            std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("stat")).ok()?;
        parse_stat_identity(&stat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_stat(
        root: &std::path::Path,
        pid: u32,
        comm: &str,
        state: char,
        ppid: u32,
        start: u64,
    ) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("dir");
        let stat = format!(
            "{pid} ({comm}) {state} {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1000 10"
        );
        std::fs::write(dir.join("stat"), stat).expect("write");
    }

    #[test]
    fn ranks_and_their_launcher_proxy_are_tracked_until_gone() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        write_stat(r, 10, "hydra_pmi_proxy", 'S', 1, 100);
        write_stat(r, 11, "heat2d", 'R', 10, 200);
        write_stat(r, 12, "heat2d", 'R', 10, 201);
        write_stat(r, 20, "bash", 'S', 1, 50);
        write_stat(r, 21, "heat2d", 'R', 20, 202);
        let mut jobs = JobProcesses::new(r);
        jobs.note_ranks(&[11, 12, 21, 99]);
        let pids = |v: Vec<JobProcess>| v.iter().map(|p| (p.pid, p.role)).collect::<Vec<_>>();
        // A rank's parent that is not a launcher proxy (a shell) is not a job process.
        assert_eq!(
            pids(jobs.alive()),
            vec![
                (11, Role::Rank),
                (12, Role::Rank),
                (21, Role::Rank),
                (10, Role::Launcher)
            ]
        );
        // 11 exited, 12 is a zombie, 21's pid now belongs to another process.
        std::fs::remove_dir_all(r.join("11")).expect("rm");
        write_stat(r, 12, "heat2d", 'Z', 10, 201);
        write_stat(r, 21, "sleep", 'S', 1, 999);
        assert_eq!(pids(jobs.alive()), vec![(10, Role::Launcher)]);
        std::fs::remove_dir_all(r.join("10")).expect("rm");
        assert!(jobs.alive().is_empty());
    }

    #[test]
    fn given_a_rank_that_exited_became_a_zombie_or_lost_its_pid_then_it_is_gone() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        write_stat(r, 11, "heat2d", 'R', 10, 200);
        write_stat(r, 12, "heat2d", 'Z', 10, 201);
        write_stat(r, 13, "sleep", 'S', 1, 999);
        let jobs = JobProcesses::new(r);
        assert_eq!(jobs.start_time(11), Some(200));
        assert!(!jobs.is_gone(11, Some(200)), "running");
        assert!(!jobs.is_gone(11, None), "running, start unknown");
        assert!(jobs.is_gone(12, Some(201)), "zombie");
        assert!(jobs.is_gone(13, Some(203)), "pid reused by another process");
        assert!(jobs.is_gone(14, None), "exited");
        assert_eq!(jobs.start_time(14), None);
        // No pid known: never dropped on a guess.
        assert!(!jobs.is_gone(0, None));
    }

    #[test]
    fn the_running_test_process_reads_as_alive() {
        let mut jobs = JobProcesses::default();
        jobs.note_ranks(&[std::process::id()]);
        assert_eq!(jobs.alive().len(), 1);
    }
}
