//! `pcmrun`: the launcher users type instead of `mpirun` for PCM applications.
//!
//! It picks the runtime's launcher and the settings PCM needs on it ([`runtime`]), makes
//! sure a pcmd keeps the job's checkpoints ([`daemon`]), shows progress, and when the job
//! ends because a process was lost, relaunches it from its newest complete checkpoint
//! ([`supervisor`], a pure state machine fed the ranks' run events,
//! [`pcm_proto::run::RunEvent`]). The binary (`src/main.rs`) only moves bytes, runs the
//! launcher and keeps time.

pub mod cli;
pub mod daemon;
pub mod hosts;
pub mod runtime;
pub mod series;
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
