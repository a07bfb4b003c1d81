//! Open MPI's session directories that killed launches leave behind, and their removal.
//!
//! Open MPI 4 keeps a session directory per launch and node under
//! `$TMPDIR/ompi.<host>.<uid>/` (`/tmp` without `TMPDIR`): `pid.<mpirun's pid>/` on the host
//! of `mpirun`, `jf.<job family>/` on the others (where `orted` runs), each holding PMIx's
//! shared-memory stores (`pmix_dstor_ds12_<pid>`, `pmix_dstor_ds21_<pid>`, named after the
//! daemon that made them), a few MB. A launch that ends normally removes them; one whose
//! `mpirun` or `orted` was killed (a relaunch, a node given back, a test) leaves them: 260 MB
//! in 80 directories on this machine kind after a day of fault tests (2026-12-02).
//!
//! pcmd sweeps them on its node with the shared memory ([`crate::shm_sweep`]): a directory
//! is garbage when it is the user's own, older than the sweep's least age, and the process it
//! belongs to (from its name, or from its PMIx stores' names) no longer runs. A directory
//! whose process cannot be told is kept. The choice ([`garbage`]) is a pure function;
//! [`sweep`] reads the directory and `/proc` and removes.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub use crate::shm_sweep::Swept;

/// One session directory found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDir {
    /// Its path.
    pub path: PathBuf,
    /// The process it belongs to (`mpirun` or `orted`), when its name or content tells.
    pub owner_pid: Option<u32>,
    /// Time since it was last modified.
    pub age: Duration,
    /// Its owner's user id.
    pub uid: u32,
}

/// The process a session directory named `name` belongs to, from its name (`pid.N`) or, for
/// a job family's (`jf.N`), from the entries it holds (`pmix_dstor_ds12_PID`).
pub fn owner_pid<'a>(name: &str, entries: impl IntoIterator<Item = &'a str>) -> Option<u32> {
    if let Some(pid) = name.strip_prefix("pid.") {
        return pid.parse().ok();
    }
    name.strip_prefix("jf.")?;
    entries.into_iter().find_map(|entry| {
        ["pmix_dstor_ds12_", "pmix_dstor_ds21_"]
            .iter()
            .find_map(|prefix| entry.strip_prefix(prefix)?.parse().ok())
    })
}

/// The directories of `found` that user `uid` may remove: its own, at least `min_age` old,
/// whose process is known and not `alive`.
pub fn garbage(
    found: &[SessionDir],
    uid: u32,
    min_age: Duration,
    alive: impl Fn(u32) -> bool,
) -> Vec<&Path> {
    found
        .iter()
        .filter(|d| d.uid == uid && d.age >= min_age)
        .filter(|d| d.owner_pid.is_some_and(|pid| !alive(pid)))
        .map(|d| d.path.as_path())
        .collect()
}

/// The session directories of `host` and `uid` under `tmp`.
fn sessions_in(tmp: &Path, host: &str, uid: u32, now: SystemTime) -> Vec<SessionDir> {
    use std::os::unix::fs::MetadataExt as _;
    let top = tmp.join(format!("ompi.{host}.{uid}"));
    let Ok(entries) = std::fs::read_dir(&top) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            // Never through a link: a real directory of the user's only.
            let meta = entry
                .path()
                .symlink_metadata()
                .ok()
                .filter(|m| m.is_dir())?;
            let name = entry.file_name().into_string().ok()?;
            let inside: Vec<String> = std::fs::read_dir(entry.path())
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| e.file_name().into_string().ok())
                        .collect()
                })
                .unwrap_or_default();
            Some(SessionDir {
                owner_pid: owner_pid(&name, inside.iter().map(String::as_str)),
                age: now
                    .duration_since(meta.modified().ok()?)
                    .unwrap_or_default(),
                uid: meta.uid(),
                path: entry.path(),
            })
        })
        .collect()
}

/// Whether process `pid` runs (a zombie counts as gone).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Removes the garbage session directories (see the module notes) of `host` and `uid` under
/// `tmp`; returns those removed and those that could not be.
pub fn sweep(tmp: &Path, host: &str, uid: u32, min_age: Duration) -> Swept {
    let found = sessions_in(tmp, host, uid, SystemTime::now());
    let mut swept = Swept::default();
    for path in garbage(&found, uid, min_age, alive) {
        match std::fs::remove_dir_all(path) {
            Ok(()) => swept.removed.push((path.to_owned(), 0)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => swept.failed.push((path.to_owned(), e)),
        }
    }
    swept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_comes_from_the_name_or_the_pmix_stores_inside() {
        assert_eq!(owner_pid("pid.13769", []), Some(13769));
        assert_eq!(
            owner_pid("jf.1855", ["0", "hwloc.sm", "pmix_dstor_ds12_27631"]),
            Some(27631)
        );
        assert_eq!(owner_pid("jf.1855", ["pmix_dstor_ds21_42", "1"]), Some(42));
        assert_eq!(owner_pid("jf.1855", ["0", "1"]), None);
        assert_eq!(owner_pid("contact.txt", []), None);
        assert_eq!(owner_pid("pid.x", []), None);
    }

    #[test]
    fn only_old_dirs_of_the_user_whose_process_is_gone_are_garbage() {
        let dir = |name: &str, pid: Option<u32>, age_s: u64, uid: u32| SessionDir {
            path: PathBuf::from(name),
            owner_pid: pid,
            age: Duration::from_secs(age_s),
            uid,
        };
        let found = [
            dir("pid.10", Some(10), 120, 0),
            dir("pid.11", Some(11), 120, 0),
            dir("jf.12", Some(12), 5, 0),
            dir("jf.13", None, 120, 0),
            dir("pid.14", Some(14), 120, 1000),
        ];
        let alive = |pid: u32| pid == 11;
        assert_eq!(
            garbage(&found, 0, Duration::from_secs(60), alive),
            [Path::new("pid.10")]
        );
    }

    #[test]
    fn a_sweep_removes_a_dead_launchs_dirs_and_keeps_a_live_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = nix::unistd::getuid().as_raw();
        let top = tmp.path().join(format!("ompi.node-x.{uid}"));
        // No process has a pid past the kernel's largest.
        let dead = top.join("pid.4194305");
        let dead_jf = top.join("jf.7");
        let live = top.join(format!("pid.{}", std::process::id()));
        std::fs::create_dir_all(dead.join("0/1")).unwrap();
        std::fs::create_dir_all(dead_jf.join("pmix_dstor_ds12_4194306")).unwrap();
        std::fs::create_dir_all(&live).unwrap();
        let other_host = tmp.path().join(format!("ompi.node-y.{uid}/pid.4194305"));
        std::fs::create_dir_all(&other_host).unwrap();
        let swept = sweep(tmp.path(), "node-x", uid, Duration::ZERO);
        assert_eq!(swept.removed.len(), 2, "{swept:?}");
        assert!(!dead.exists() && !dead_jf.exists());
        assert!(live.exists() && other_host.exists());
    }
}
