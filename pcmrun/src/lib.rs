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
pub mod runtime;
pub mod supervisor;

pub use runtime::{Launch, Runtime};
