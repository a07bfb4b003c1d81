//! PCM: Process Checkpointing and Migration for iterative MPI programs.
//!
//! PCM lets a running MPI job move any of its ranks to another host at an iteration
//! boundary. The moved rank keeps its rank number, every other rank keeps its own, and the
//! computation goes on as if nothing happened. It is the application side of MPI/IOS
//! (El Maghraoui et al., "Towards a Middleware Framework for Dynamically Reconfigurable
//! Scientific Computing", sections 4.1 and 6, Figures 1 and 11), built on MPI-2 dynamic
//! processes through rsmpi, with no change to the MPI implementation.
//!
//! # How it fits
//! Each rank registers with the `pcmd` daemon of its node (if one runs; without one the
//! program runs as plain MPI). Requests to move ranks reach the daemons (from `pcmd migrate`,
//! or from IOS agents) and are delivered to the ranks, which agree on them in their next
//! status check. The departing process stores its state, PCM spawns the replacement on the
//! target host, merges the spawn intercommunicator into the job, splits out a new world in
//! which the replacement takes the old rank, and hands the stored state straight over.
//!
//! # Usage
//! The state is described once ([`State`]); [`Pcm::resume`] builds or loads it before the
//! loop, and one call per iteration, [`Pcm::reconfigure_point`], does the status check,
//! the store and the reconfiguration (see `examples/heat2d/src/bin/heat2d.rs`, and
//! docs/instrumenting.md):
//!
//! ```no_run
//! use pcm::{Pcm, PcmError, State};
//! # fn compute(_: &pcm::mpi::topology::SimpleCommunicator, _: &mut [f64]) {}
//! struct Data(Vec<f64>);
//!
//! impl State for Data {
//!     fn store(&self, pcm: &mut Pcm) -> Result<(), PcmError> {
//!         pcm.store_array("data", &self.0)
//!     }
//!     fn load(pcm: &mut Pcm) -> Result<Self, PcmError> {
//!         Ok(Data(pcm.take_array("data")?))
//!     }
//! }
//!
//! fn main() -> Result<(), PcmError> {
//!     pcm::init_logging();
//!     let mut pcm = Pcm::init("myapp")?;
//!     let (mut data, start) = pcm.resume(|| Ok::<_, PcmError>(Data(vec![0.0; 1000])))?;
//!     for _ in start..1000 {
//!         pcm.reconfigure_point(&mut data)?;
//!         compute(pcm.world(), &mut data.0);
//!     }
//!     pcm.finalize();
//!     Ok(())
//! }
//! ```
//!
//! The explicit calls of the paper's Figure 11 ([`Pcm::process_status`], [`Pcm::status`],
//! [`Pcm::store`], [`Pcm::reconfigure`], ...) stay for codes that need them; the C interface
//! uses them.
//!
//! Rules the application follows:
//! - use [`Pcm::world`] for communication (code you do not change may keep
//!   `MPI_COMM_WORLD`: after a reconfiguration pcm's MPI wrappers give its calls the job's
//!   current world, see the `interpose` module);
//! - call [`Pcm::status`] once per iteration, at the same point on every rank, with no
//!   messages in flight;
//! - a replacement resumes at the iteration at which its predecessor stored its state, and
//!   calls `status` again there: that first call returns [`Status::Continue`] at once.
//!
//! # Launching
//! `mpirun -np P app` (Open MPI 4) or `mpiexec -n P app` (MPICH 5, hydra) as usual, with
//! spawning allowed (Open MPI: `OMPI_MCA_rmaps_base_oversubscribe=1`). Target hosts must be
//! in the hostfile given to the launcher, named for PCM in `PCM_HOSTFILE`; on MPICH,
//! `PCM_ALLOW_NEW_HOSTS=1` also allows hosts the launcher reaches (see the `hosts` module).
//! [`Pcm::init`]
//! refuses to start on another MPI library than the one pcm was compiled against
//! ([`check_mpi_library`]). On MPICH a departed process finalizes and exits at once; on
//! Open MPI 4 it frees its state and sleeps, using no measurable CPU, until the processes
//! started with it finish, since Open MPI 4 cannot finalize a process before the rest of its
//! launch (see the `launch` module).
//!
//! # Settings
//! Every setting is read in one place, [`Config`]: the defaults, then these environment
//! variables ([`Config::from_env`], which [`Pcm::init`] uses), then code (`Config::with_*`
//! and [`Pcm::init_with`]), validated; a bad value is an error naming the variable.
//! - `PCM_DAEMON`: socket of the node's pcmd (`{host}` is replaced by the host name);
//!   default `$XDG_RUNTIME_DIR/pcmd/{host}.sock` or `/tmp/pcmd-{uid}/{host}.sock`;
//!   `none` disables the daemon link.
//! - `PCM_HOSTFILE`: the hostfile given to the launcher (the hosts ranks may move to).
//! - `PCM_ALLOW_NEW_HOSTS`: `1` lets ranks move to hosts outside that allocation, each
//!   checked first with `PCM_LAUNCHER HOST true` (default launcher: hydra's
//!   `HYDRA_LAUNCHER_EXEC`, else `ssh`); MPICH only, ignored with a warning on Open MPI.
//! - `PCM_SCHEDULE`: scripted reconfigurations, `ITER:RANK[@HOST][+RANK[@HOST]...][,...]`.
//!   A move that names no host (`ITER:RANK`, or `pcmd migrate` without `--to`) goes to the
//!   host of the allocation (the hostfile's hosts and the job's) that runs the fewest of the
//!   job's processes, never the one the rank leaves, the first by name among equals; a grow
//!   naming no hosts places its added processes the same way. With the launch on hosts B
//!   and C and a spare A in the hostfile (`tests/tests/hostless_move.rs`), rank 1 moved
//!   three times goes to A, C, A, on both runtimes. On one host the runtime places it (on
//!   that host). PCM names the host itself because MPICH's own mapping goes round the host
//!   list and a spawn onto a host all of whose launched ranks have left ends the job there
//!   (hydra: `write error (Bad file descriptor)`). Name the host (`@HOST`, `--to HOST`) to
//!   choose it.
//! - `PCM_CHECK_PERIOD_MS`: wall time between two status checks (default 20).
//! - `PCM_CHECKPOINT_INTERVAL`: seconds between coordinated checkpoints (fractions allowed;
//!   unset: none). They are written by the node's pcmd and copied to its buddy.
//! - `PCM_CHECKPOINT_DIR`: the job's own checkpoint directory, an absolute path (the same
//!   on every rank); each node's pcmd keeps the job's checkpoints there instead of in its
//!   `--checkpoint-dir`, creating it (mode 0700) or refusing it (not private to the user).
//!   A relative or empty value is an error at init. Unset: each pcmd's own directory.
//! - `PCM_RESTART`: `1` resumes the job from its newest checkpoint that is complete and
//!   intact for every rank ([`ProcessStatus::Restarted`]); the same launch command with
//!   `PCM_RESTART=1` in the ranks' environment (`-genv PCM_RESTART 1` with MPICH's
//!   `mpiexec`, the default runtime; `-x PCM_RESTART=1` with Open MPI's `mpirun`).
//! - `PCM_RECONFIGURE_TIMEOUT`: seconds the spawn, merge, state transfer and split of one
//!   reconfiguration may take together (fractions allowed; default 60). If a replacement
//!   stalls or dies while starting and the runtime does not end the job itself, PCM logs
//!   which migration, rank, host and phase stalled, reports the failure to the pcmd that
//!   delivered the request, and ends the job with `MPI_Abort` and exit status 75
//!   ([`RECONFIGURE_TIMEOUT_EXIT`]); checkpoints already taken stay usable.
//! - `PCM_EXECUTABLE`: the absolute path of the executable replacements and grown processes
//!   start with (with the same arguments); default: the process's own (`/proc/self/exe`).
//!   A path that is not an executable file is an error at init. PCM's Python package sets
//!   it to `sys.executable` (a virtual environment of symlinks is found through its link).
//! - `PCM_PROFILE`: `off` turns off MPI traffic profiling (see the `interpose` module and
//!   docs/profiling.md); default `on`.
//! - `PCM_EVENTS`: the job's event stream, typed and timestamped ([`events`]): an absolute
//!   path appends one JSON line per event to that file (every rank may share it), `stderr`
//!   writes `PCMRUN-EVENT` lines to standard error (as `PCMRUN_EVENTS=stderr`, which
//!   pcmrun sets), `off` or unset: none. Benchmarks, figures and tests read these events,
//!   never the log lines.
//! - `PCM_PROGRESS_PERIOD`: least seconds between two progress events (fractions allowed,
//!   at least 0.001; default 1).
//! - `RUST_LOG`: log filter (default `warn,pcm=info`), to stderr once the application called
//!   [`init_logging`] (PCM installs no subscriber by itself). The log is for people;
//!   `pcm::timing=debug` adds a line per store and load call and per reconfiguration.

/// docs/instrumenting.md, whose Rust blocks are compiled as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/instrumenting.md")]
pub struct InstrumentingGuide;

mod agreement;
mod config;
mod daemon;
mod deadline;
mod departed_peers;
mod error;
pub mod events;
mod ffi;
mod handle;
mod hosts;
mod interpose;
mod job;
mod launch;
mod logging;
mod malleable;
mod malleable_store;
mod plan;
mod profile;
mod runtime;
mod schedule;
mod shared;
mod status;
mod store;
mod wire;

// The handle of a PCM process and what its calls return.
pub use handle::finalize::Departed;
pub use handle::reconfigure::{ReconfigureError, Reconfigured};
pub use handle::state::State;
pub use handle::Pcm;
pub use status::{ProcessStatus, Status};

// Errors.
pub use error::{PcmError, Phase, Stall};

// Settings: the config, its environment variables and defaults.
pub use config::{
    Config, ALLOW_NEW_HOSTS_ENV, CHECKPOINT_INTERVAL_ENV, CHECK_PERIOD_ENV,
    DEFAULT_RECONFIGURE_TIMEOUT, EXECUTABLE_ENV, HOSTFILE_ENV, LAUNCHER_ENV, PROFILE_ENV,
    RECONFIGURE_TIMEOUT_ENV, RESTART_ENV, SCHEDULE_ENV, VARIABLES as SETTING_VARIABLES,
};
pub use deadline::RECONFIGURE_TIMEOUT_EXIT;
pub use hosts::PROBE_TIMEOUT;
pub use schedule::DEFAULT_CHECK_PERIOD;

// State in shared memory, and malleable jobs.
pub use bytemuck::Pod;
pub use malleable::{block_rows, Malleability, SizeRule};
pub use shared::SharedArray;

// The MPI library: the one pcm was built for, and what MPI_Init must find.
pub use mpi;
pub use runtime::{
    check_mpi_library, deterministic_reductions_env, mpi_library_version, prompt_departure_env,
    MpiFamily, MpiLibrary,
};

// Names shared with pcmd and the agents.
pub use pcm_proto::{AppName, HostName, JobId, Move, Rank, RequestId};

// The log, for people (programs read the events, `events`).
pub use logging::init_logging;
