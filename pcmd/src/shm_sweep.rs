//! Shared-memory segments that killed MPI processes leave behind, and their removal.
//!
//! MPICH's shared-memory transport keeps one segment per launch and node in `/dev/shm`
//! (`mpich_shm_<world>_<node>` and `mpich_vci_<world>_<node>`, src/mpid/ch4/shm/posix/
//! posix_init.c: the world id is a hash of the launch's PMI key-value space name, so every
//! launch, relaunch and spawn has its own). The processes of a launch that ends normally
//! unlink it; a launch whose ranks are killed (a lost rank, a node given back, a relaunch)
//! leaves it: 178 segments of about 2 MB each (300 MB of RAM) after 90 minutes of fault
//! tests on one machine. On a pool machine that runs jobs for weeks that is a leak. Open
//! MPI 4's shared-memory transport (vader) does the same with one backing file per local
//! process, `vader_segment.<host>.<uid>.<job>.<local rank>` of 4 MB (seen 2026-12-02: a
//! heat2d killed with SIGKILL left two, and an earlier killed test launch three).
//!
//! pcmd, which runs on every node for as long as the node is in the pool, sweeps them: a
//! segment is garbage when it is the user's own, has an MPI runtime's name, is older than
//! [`SweepPolicy::min_age`] (it is created and mapped in one step; the age rules out the
//! instant between the two), and no process has it mapped or open. Only such a segment can
//! be a dead launch's: a live one is mapped by every rank of its node. The choice
//! ([`garbage`]) is a pure function; [`sweep`] reads `/dev/shm` and `/proc` and unlinks.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Where POSIX shared-memory segments live.
pub const SHM_DIR: &str = "/dev/shm";

/// Name prefixes of the runtimes' per-launch segments: MPICH's, and Open MPI 4's vader.
const MPI_PREFIXES: [&str; 3] = ["mpich_shm_", "mpich_vci_", "vader_segment."];

/// How often to sweep, and the least age of a segment that may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepPolicy {
    /// Time between two sweeps.
    pub every: Duration,
    /// A younger segment is kept even when nothing maps it.
    pub min_age: Duration,
}

impl SweepPolicy {
    /// A sweep every `every`, keeping segments younger than that.
    pub fn every(every: Duration) -> Self {
        SweepPolicy {
            every,
            min_age: every,
        }
    }
}

/// A segment found in the folder swept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its path.
    pub path: PathBuf,
    /// Time since it was last modified.
    pub age: Duration,
    /// Its owner's user id.
    pub owner: u32,
}

/// The segments of `found` that may be removed by user `uid`: an MPI runtime's, the user's own, at
/// least `min_age` old, and in `in_use` (paths some process maps or holds open) by none.
pub fn garbage<'a>(
    found: &'a [Segment],
    in_use: &HashSet<PathBuf>,
    uid: u32,
    min_age: Duration,
) -> Vec<&'a Path> {
    found
        .iter()
        .filter(|s| s.owner == uid && s.age >= min_age && !in_use.contains(&s.path))
        .filter(|s| {
            s.path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| MPI_PREFIXES.iter().any(|p| n.starts_with(p)))
        })
        .map(|s| s.path.as_path())
        .collect()
}

/// What one sweep did.
#[derive(Debug, Default)]
pub struct Swept {
    /// What was removed (segments, or session directories), with sizes in bytes (0 for
    /// directories, which are not measured).
    pub removed: Vec<(PathBuf, u64)>,
    /// What could not be removed, and why.
    pub failed: Vec<(PathBuf, std::io::Error)>,
}

/// The segments in `dir` (regular files), with their ages and owners.
fn segments_in(dir: &Path, now: SystemTime) -> Vec<(Segment, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let meta = entry.metadata().ok().filter(std::fs::Metadata::is_file)?;
            let modified = meta.modified().ok()?;
            let segment = Segment {
                path: entry.path(),
                age: now.duration_since(modified).unwrap_or_default(),
                owner: meta.uid(),
            };
            Some((segment, meta.len()))
        })
        .collect()
}

/// Paths under `dir` that some process maps (`/proc/PID/maps`) or holds open
/// (`/proc/PID/fd`). A process that cannot be read is skipped: it is not the user's (then
/// it cannot open the user's 0600 segments) or it just ended.
fn in_use_under(dir: &Path) -> HashSet<PathBuf> {
    let mut in_use = HashSet::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return in_use;
    };
    for proc in procs.flatten() {
        let name = proc.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        if let Ok(maps) = std::fs::read_to_string(proc.path().join("maps")) {
            for line in maps.lines() {
                // "7f..-7f.. rw-s 00000000 00:1a 1234   /dev/shm/mpich_shm_1a_0 (deleted)"
                if let Some(at) = line.find('/') {
                    let path = line[at..].trim_end_matches(" (deleted)");
                    if Path::new(path).starts_with(dir) {
                        in_use.insert(PathBuf::from(path));
                    }
                }
            }
        }
        if let Ok(fds) = std::fs::read_dir(proc.path().join("fd")) {
            for fd in fds.flatten() {
                if let Ok(target) = std::fs::read_link(fd.path()) {
                    if target.starts_with(dir) {
                        in_use.insert(target);
                    }
                }
            }
        }
    }
    in_use
}

/// Removes the garbage segments of `dir` (see the module notes) that belong to `uid`.
pub fn sweep(dir: &Path, uid: u32, min_age: Duration) -> Swept {
    let found = segments_in(dir, SystemTime::now());
    let mut swept = Swept::default();
    let candidates: Vec<Segment> = found.iter().map(|(s, _)| s.clone()).collect();
    // Read /proc only when something could go: most sweeps find nothing of an MPI runtime's.
    if garbage(&candidates, &HashSet::new(), uid, min_age).is_empty() {
        return swept;
    }
    let in_use = in_use_under(dir);
    for path in garbage(&candidates, &in_use, uid, min_age) {
        let size = found
            .iter()
            .find(|(s, _)| s.path == path)
            .map_or(0, |(_, size)| *size);
        match std::fs::remove_file(path) {
            Ok(()) => swept.removed.push((path.to_owned(), size)),
            // Gone meanwhile: its launch ended and unlinked it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => swept.failed.push((path.to_owned(), e)),
        }
    }
    swept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(name: &str, age_s: u64, owner: u32) -> Segment {
        Segment {
            path: Path::new(SHM_DIR).join(name),
            age: Duration::from_secs(age_s),
            owner,
        }
    }

    #[test]
    fn only_old_unused_mpi_segments_of_the_user_are_garbage() {
        let found = [
            segment("mpich_shm_1a2b_0", 120, 1000),
            segment("mpich_vci_1a2b_0", 120, 1000),
            segment("mpich_shm_young_0", 5, 1000),
            segment("mpich_shm_used_0", 120, 1000),
            segment("mpich_shm_other_0", 120, 1001),
            segment("ucx_posix_1234", 120, 1000),
            segment("sem.app", 120, 1000),
            segment("vader_segment.vm.0.3fba0001.0", 120, 1000),
            segment("vader_segment.vm.0.3fba0001.1", 5, 1000),
        ];
        let in_use = HashSet::from([Path::new(SHM_DIR).join("mpich_shm_used_0")]);
        let names: Vec<_> = garbage(&found, &in_use, 1000, Duration::from_secs(60))
            .into_iter()
            .filter_map(|p| p.file_name()?.to_str())
            .collect();
        assert_eq!(
            names,
            [
                "mpich_shm_1a2b_0",
                "mpich_vci_1a2b_0",
                "vader_segment.vm.0.3fba0001.0"
            ]
        );
    }

    #[test]
    fn a_sweep_removes_a_dead_segment_and_keeps_one_held_open_or_young() {
        let dir = tempfile::tempdir().unwrap();
        let old = SystemTime::now() - Duration::from_secs(600);
        let make = |name: &str, modified: SystemTime| {
            let path = dir.path().join(name);
            let file = std::fs::File::create(&path).unwrap();
            file.set_len(4096).unwrap();
            file.set_modified(modified).unwrap();
            path
        };
        let dead = make("mpich_shm_dead_0", old);
        let held = make("mpich_shm_held_0", old);
        let young = make("mpich_shm_young_0", SystemTime::now());
        let other = make("not_mpich", old);
        // A process that holds `held` open (as its stdin), as a live rank would.
        let mut holder = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::fs::File::open(&held).unwrap())
            .spawn()
            .unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        let swept = sweep(dir.path(), uid, Duration::from_secs(60));
        let _ = holder.kill();
        let _ = holder.wait();
        assert_eq!(swept.removed, [(dead.clone(), 4096)]);
        assert!(swept.failed.is_empty(), "{:?}", swept.failed);
        assert!(!dead.exists());
        assert!(held.exists() && young.exists() && other.exists());
    }
}
