//! Errors of the PCM library.

use std::os::raw::c_int;

/// Everything a PCM call can fail with.
///
/// Its `Debug` form is its message (as `anyhow::Error`'s is): a program whose `main` returns
/// `Result<(), PcmError>`, as the guide's examples do, prints `Error: cannot restart: ...`
/// when it fails, not the variant's internals. Match on the variants to tell them apart.
#[derive(thiserror::Error)]
pub enum PcmError {
    /// `load` of a name that was never stored (or not handed over to this process).
    #[error("no state stored under {name:?}{}", stored_names(.available))]
    NotStored {
        /// The name asked for.
        name: String,
        /// Names that are stored.
        available: Vec<String>,
    },
    /// `load` of a name stored as another type.
    #[error("state {name:?} was stored as {found}, but loaded as {expected}")]
    WrongType {
        /// The name asked for.
        name: String,
        /// The type the caller asked for.
        expected: String,
        /// The type it was stored as.
        found: String,
    },
    /// `load_array_into` with a destination of the wrong length.
    #[error("state {name:?} holds {found} elements, but the destination has room for {expected}")]
    WrongLength {
        /// The name asked for.
        name: String,
        /// Elements the destination holds.
        expected: usize,
        /// Elements stored.
        found: usize,
    },
    /// A stored value could not be encoded or decoded.
    #[error("state {name:?} could not be {action}: {reason}")]
    Codec {
        /// The name concerned.
        name: String,
        /// "encoded" or "decoded".
        action: &'static str,
        /// The codec's explanation.
        reason: String,
    },
    /// An empty or over-long state name.
    #[error("invalid state name {0:?}: names are 1 to 255 bytes")]
    InvalidName(String),
    /// An MPI call returned an error.
    #[error("{call} failed: {message} (MPI error {code})")]
    Mpi {
        /// The MPI function.
        call: &'static str,
        /// Its return code.
        code: c_int,
        /// The MPI library's description.
        message: String,
    },
    /// Spawning replacement processes failed; the job carries on unchanged.
    #[error("could not start replacement processes on {}: {message}", hosts.join(", "))]
    SpawnFailed {
        /// Hosts asked for.
        hosts: Vec<String>,
        /// The MPI library's description.
        message: String,
    },
    /// A host name that cannot be passed to MPI.
    #[error("invalid host name {0:?}")]
    InvalidHost(String),
    /// MPI could not be initialised, or was initialised by someone else.
    #[error("MPI could not be initialised (was it initialised before Pcm::init?)")]
    MpiInit,
    /// [`crate::Pcm::attach`] (the C interface's `PCM_Init`) before `MPI_Init` or after
    /// `MPI_Finalize`.
    #[error("MPI is not initialised: call MPI_Init before PCM_Init")]
    MpiNotInitialized,
    /// `reconfigure` called when the last status asked for none.
    #[error("reconfigure called but no reconfiguration is pending (status returned Continue)")]
    NothingPending,
    /// A malformed `PCM_SCHEDULE` or other PCM setting.
    #[error("invalid {variable}={value:?}: {reason}")]
    Config {
        /// The environment variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// `PCM_RESTART` asked to resume, and resuming would compute something other than what
    /// was asked (another computation's checkpoint, a job that finished), or `require` found
    /// nothing to resume. Every rank gets it, and the job must not start.
    #[error("cannot restart: {0}")]
    Restart(String),
    /// The handover from the departing processes was malformed (a bug, or a mismatched
    /// binary spawned as replacement).
    #[error("malformed handover from the departing process: {0}")]
    Handover(String),
    /// The MPI library loaded at run time is not the one the program was compiled against
    /// (the rpath or `LD_LIBRARY_PATH` points to another MPI).
    #[error("this program was built for {built_for}, but the MPI library loaded is {loaded:?}: run it with the MPI it was built for (source scripts/setup.sh with the same MPI_IOS_RUNTIME as the build), or rebuild it")]
    WrongMpiLibrary {
        /// The library found at build time, e.g. "MPICH 5.0.2".
        built_for: String,
        /// The first line of the loaded library's `MPI_Get_library_version`.
        loaded: String,
    },
    /// A reconfiguration did not finish within `PCM_RECONFIGURE_TIMEOUT`: a replacement
    /// stalled or died while starting, and every process waits inside a blocking MPI call.
    /// Logged by the watchdog that then ends the job (see the `deadline` module); never
    /// returned by a call, since the call it concerns cannot return.
    #[error("{0}")]
    ReconfigurationStalled(Box<Stall>),
    /// A shared-memory array ([`crate::SharedArray`]) could not be created, or a segment a
    /// departing process offered could not be taken over (each refusal names its reason).
    #[error("shared array {what}: {reason}")]
    SharedArray {
        /// What was being done: "created", "segment /proc/PID/fd/N taken over", ...
        what: String,
        /// Why it failed.
        reason: String,
    },
    /// A malleability declaration ([`crate::Pcm::set_malleable`], [`crate::Pcm::declare_block`],
    /// [`crate::Pcm::store_block`]) that is invalid or differs from the one the job made.
    #[error("{0}")]
    Declaration(String),
    /// A broken invariant inside PCM.
    #[error("internal PCM error: {0}")]
    Internal(&'static str),
    /// An error of the application's own, carried through PCM's calls (for example from a
    /// [`crate::State`] implementation or the `fresh` closure of [`crate::Pcm::resume`]).
    /// Its message is the application's, unchanged.
    #[error(transparent)]
    Application(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl std::fmt::Debug for PcmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl From<pcm_proto::InvalidLimits> for PcmError {
    fn from(e: pcm_proto::InvalidLimits) -> Self {
        PcmError::Declaration(e.to_string())
    }
}

impl PcmError {
    pub(crate) fn internal(what: &'static str) -> Self {
        PcmError::Internal(what)
    }

    /// Wraps an application's own error ([`PcmError::Application`]), for
    /// `.map_err(PcmError::application)` or an application's `From` impl.
    pub fn application(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        PcmError::Application(Box::new(error))
    }
}

impl From<Box<dyn std::error::Error + Send + Sync + 'static>> for PcmError {
    fn from(error: Box<dyn std::error::Error + Send + Sync + 'static>) -> Self {
        PcmError::Application(error)
    }
}

fn stored_names(names: &[String]) -> String {
    if names.is_empty() {
        " (nothing is stored)".to_owned()
    } else {
        format!(" (stored: {})", names.join(", "))
    }
}

/// The step of the reconfiguration protocol a process is in (see the `handle::reconfigure` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// `MPI_Comm_spawn_multiple` on the parents; `MPI_Init` on the replacement.
    Spawn = 0,
    /// `MPI_Intercomm_merge` and the broadcast of the hand-over.
    Merge = 1,
    /// The departing ranks' stored state sent to their replacements.
    StateTransfer = 2,
    /// Exchanging where each process runs and the phase times.
    Placement = 3,
    /// Splitting out the new world and releasing the old communicators.
    Split = 4,
}

impl Phase {
    /// The phase a watchdog stored as its number.
    pub(crate) fn from_u8(value: u8) -> Phase {
        match value {
            0 => Phase::Spawn,
            1 => Phase::Merge,
            2 => Phase::StateTransfer,
            3 => Phase::Placement,
            _ => Phase::Split,
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Spawn => "spawn",
            Phase::Merge => "merge",
            Phase::StateTransfer => "state transfer",
            Phase::Placement => "placement exchange",
            Phase::Split => "split",
        })
    }
}

/// What a watchdog knew when the deadline of a reconfiguration passed (the content of
/// [`PcmError::ReconfigurationStalled`]).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{request} ({moves}) at iteration {iteration} did not finish within {timeout_s} s: {side} {rank} on host {host} was still waiting in the {phase} phase")]
pub struct Stall {
    /// "migration #N" (a pcmd request), "migrations #N and #M" (several carried out
    /// together) or "scheduled reconfiguration (PCM_SCHEDULE)".
    pub request: String,
    /// The moves, "rank 1 to node-b".
    pub moves: String,
    /// The phase this process was in when the deadline passed.
    pub phase: Phase,
    /// "rank" (a parent) or "replacement for rank".
    pub side: &'static str,
    /// This process's rank, or "(not known yet)" on a replacement before the hand-over.
    pub rank: String,
    /// This process's host.
    pub host: String,
    /// The iteration of the reconfiguration, or "(not known yet)".
    pub iteration: String,
    /// The deadline, in seconds.
    pub timeout_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_a_refused_restart_then_debug_prints_the_message_not_the_variant() {
        let refusal = PcmError::Restart("the job finished".to_owned());
        assert_eq!(format!("{refusal:?}"), "cannot restart: the job finished");
        assert_eq!(format!("{refusal:?}"), refusal.to_string());
        // What `fn main() -> Result<(), PcmError>` prints: std's `Termination` writes
        // `Error: {err:?}`.
        assert_eq!(
            format!("Error: {refusal:?}"),
            "Error: cannot restart: the job finished"
        );
        let config = PcmError::Config {
            variable: "PCM_SCHEDULE",
            value: "x:y".to_owned(),
            reason: "bad".to_owned(),
        };
        assert_eq!(format!("{config:?}"), "invalid PCM_SCHEDULE=\"x:y\": bad");
    }
}
