//! `pcmrun`: the launcher users type instead of `mpirun` for PCM applications.
//!
//! It picks the runtime's launcher and the settings PCM needs on it ([`runtime`]), makes
//! sure a pcmd keeps the job's checkpoints ([`daemon`]), shows progress, and when the job
//! ends because a process was lost, relaunches it from its newest complete checkpoint
//! ([`supervisor`], a pure state machine fed the ranks' run events,
//! [`pcm_proto::run::RunEvent`]). [`job`] runs a job from its first launch to its report,
//! [`launch`] drives one launch (moves bytes, runs the launcher, keeps time), [`relaunch`]
//! chooses the hosts and width of the next one. Its settings (flags, environment, the places
//! worked out from them) are in [`settings`]. The binary (`src/main.rs`) parses the command
//! line and calls [`job::run`].

pub mod cli;
pub mod daemon;
pub mod hosts;
pub mod job;
pub mod launch;
pub mod relaunch;
pub mod runtime;
pub mod series;
pub mod settings;
pub mod supervisor;

pub use runtime::{Launch, Runtime};

/// One line of `--events FILE`: a run event as pcmrun received it, for programs (tests,
/// benchmarks) that follow a job.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EventRecord {
    /// Seconds since pcmrun started.
    pub seconds: f64,
    /// Which launch it came from (1 for the first, 2 after the first recovery...).
    pub launch: u32,
    /// The event.
    pub event: pcm_proto::run::RunEvent,
}

/// Makes the process `command` starts get SIGTERM when pcmrun dies (even by SIGKILL), so
/// that a launch or a pcmd in its own process group is not left running unsupervised.
#[allow(unsafe_code)]
pub fn end_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs in the child between fork and exec; it only makes the
    // async-signal-safe prctl system call and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                .map_err(std::io::Error::from)
        });
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A line for people on standard error. A failed write is ignored: after SIGHUP the
/// terminal may be gone, and pcmrun must still stop the job and write its report.
pub(crate) fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "pcmrun: {line}");
}

/// Host names for people: `a, b, c`.
pub(crate) fn names(hosts: &[pcm_proto::HostName]) -> String {
    hosts
        .iter()
        .map(pcm_proto::HostName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A new private directory (mode 0700, random name) `pcmrun-PID-KIND-*` under `base`
/// ([`settings::Places::private_dir_base`]). The pid in its name lets a later pcmrun remove
/// it if this one is killed before it can ([`remove_stale_private_dirs`]).
pub fn private_dir(base: &std::path::Path, kind: &str) -> std::io::Result<tempfile::TempDir> {
    // tempfile creates it with mode 0700 under a random name: nobody else can plant files.
    tempfile::Builder::new()
        .prefix(&format!("pcmrun-{}-{kind}-", std::process::id()))
        .tempdir_in(base)
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "cannot create a private directory in {}: {e}",
                    base.display()
                ),
            )
        })
}

/// Removes the private directories ([`private_dir`]) under `base` of pcmruns of this user
/// that no longer run (killed with SIGKILL, or the machine stopped under them); returns how
/// many.
pub fn remove_stale_private_dirs(base: &std::path::Path) -> usize {
    use std::os::unix::fs::MetadataExt as _;
    let uid = nix::unistd::getuid().as_raw();
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("pcmrun-"))
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<i32>().ok())
            else {
                return false;
            };
            // Only real directories of ours (never through a link), whose pcmrun is gone.
            let ours = entry
                .path()
                .symlink_metadata()
                .is_ok_and(|m| m.is_dir() && m.uid() == uid);
            let running = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
            ours && !running && pid > 0
        })
        .filter(|entry| std::fs::remove_dir_all(entry.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_a_private_dir_of_a_dead_pcmrun_then_it_is_removed_and_a_live_ones_kept() {
        let base = std::env::temp_dir();
        let live = private_dir(&base, "test").unwrap();
        // A pid that runs nothing: past the kernel's largest.
        let dead = base.join("pcmrun-4194305-test-x");
        std::fs::create_dir_all(dead.join("inside")).unwrap();
        assert!(remove_stale_private_dirs(&base) >= 1);
        assert!(!dead.exists());
        assert!(live.path().is_dir());
    }
}
