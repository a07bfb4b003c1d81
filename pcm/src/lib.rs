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
mod checkpoint;
mod config;
mod daemon;
mod deadline;
mod departed_peers;
mod error;
pub mod events;
mod ffi;
mod hosts;
mod interpose;
mod job;
mod launch;
mod malleable;
mod malleable_store;
mod plan;
mod profile;
mod reconfig;
mod runtime;
mod schedule;
mod shared;
mod status;
mod store;
mod wire;

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use serde::{de::DeserializeOwned, Serialize};

pub use bytemuck::Pod;
pub use config::DEFAULT_RECONFIGURE_TIMEOUT;
pub use config::{
    Config, ALLOW_NEW_HOSTS_ENV, CHECKPOINT_INTERVAL_ENV, CHECK_PERIOD_ENV, HOSTFILE_ENV,
    LAUNCHER_ENV, PROFILE_ENV, RECONFIGURE_TIMEOUT_ENV, RESTART_ENV, SCHEDULE_ENV,
    VARIABLES as SETTING_VARIABLES,
};
pub use deadline::RECONFIGURE_TIMEOUT_EXIT;
pub use error::{PcmError, Phase, Stall};
pub use hosts::PROBE_TIMEOUT;
pub use malleable::{block_rows, Malleability, SizeRule};
pub use mpi;
pub use pcm_proto::{AppName, HostName, JobId, Move, Rank, RequestId};
pub use runtime::{check_mpi_library, mpi_library_version, MpiFamily, MpiLibrary};
pub use schedule::DEFAULT_CHECK_PERIOD;
pub use shared::SharedArray;

use config::SettingError;
use daemon::DaemonLink;
use job::JobContext;
use launch::Launch;
use pcm_proto::{Outcome, ToDaemon};
use plan::Plan;
use profile::Profiler;
use schedule::{Cadence, CheckpointTimer, Schedule};
use store::Store;

/// How this process came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessStatus {
    /// Started by `mpirun` with the job: initialise data from scratch.
    Fresh,
    /// Spawned to replace `rank`, which stored its state at `iteration`: load it and resume
    /// the loop at that iteration.
    Replacement {
        /// The rank this process took over.
        rank: Rank,
        /// Iteration (status call count) at which the predecessor stored its state.
        iteration: u64,
    },
    /// Started with `PCM_RESTART=1` and resumed from the coordinated checkpoint taken at
    /// `iteration`: load the state as a replacement does and resume the loop there.
    Restarted {
        /// Iteration (status call count) at which the checkpoint was taken.
        iteration: u64,
    },
    /// Spawned to widen a malleable job at `iteration` (docs/malleability.md): load the
    /// state (its rows of each declared array, the replicated values) as a replacement
    /// does, and resume the loop there.
    Added {
        /// Iteration (status call count) at which the job resized.
        iteration: u64,
    },
}

impl ProcessStatus {
    /// Whether the process starts with stored state to load (a replacement or a restart).
    pub fn has_state(self) -> bool {
        !matches!(self, ProcessStatus::Fresh)
    }
}

/// What the application must do at this iteration (the paper's `PCM_Status`).
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Nothing: compute.
    Continue,
    /// This rank moves: store its state, then call [`Pcm::reconfigure`].
    Migrate,
    /// Other ranks move: call [`Pcm::reconfigure`] (nothing to store).
    Reconfigure,
    /// Every rank takes a coordinated checkpoint: store the state as for a migration, then
    /// call [`Pcm::reconfigure`], which writes the checkpoint and hands the `Pcm` back.
    Checkpoint,
    /// The job changes its width (docs/malleability.md): every rank stores its state, its
    /// rows of each declared array with [`Pcm::store_block`], then calls
    /// [`Pcm::reconfigure`]; every rank that stays then loads its state again (its new
    /// rows, [`Pcm::block_range`]).
    Resize,
}

impl Status {
    /// Whether the application must store its state now: for [`Status::Migrate`],
    /// [`Status::Checkpoint`] and [`Status::Resize`].
    pub fn stores_state(self) -> bool {
        matches!(self, Status::Migrate | Status::Checkpoint | Status::Resize)
    }
}

/// What an application hands to its replacement, and what a coordinated checkpoint holds:
/// the state [`Pcm::resume`] loads and [`Pcm::reconfigure_point`] stores. Implement it once
/// for the type that holds the loop's state; the loop's iteration is kept by PCM.
///
/// ```no_run
/// use pcm::{Pcm, PcmError, State};
///
/// struct Grid {
///     cells: Vec<f64>,
///     residual: f64,
/// }
///
/// impl State for Grid {
///     fn store(&self, pcm: &mut Pcm) -> Result<(), PcmError> {
///         pcm.store("residual", &self.residual)?;
///         pcm.store_array("cells", &self.cells)
///     }
///     fn load(pcm: &mut Pcm) -> Result<Self, PcmError> {
///         Ok(Grid {
///             residual: pcm.load("residual")?,
///             cells: pcm.take_array("cells")?,
///         })
///     }
///     fn release(&mut self) {
///         self.cells = Vec::new();
///     }
/// }
/// ```
pub trait State: Sized {
    /// Stores everything a replacement needs to go on, with [`Pcm::store`] and
    /// [`Pcm::store_array`] (it must not use the names PCM keeps for itself: `pcm.blocks`).
    fn store(&self, pcm: &mut Pcm) -> Result<(), PcmError>;

    /// Rebuilds the state from what [`State::store`] stored, with [`Pcm::load`] and
    /// [`Pcm::take_array`]. Turn the application's own checks into errors with
    /// [`PcmError::application`] (or a `From` impl).
    fn load(pcm: &mut Pcm) -> Result<Self, PcmError>;

    /// Frees large buffers in a process that moved away, before it waits for its launch to
    /// end (Open MPI 4 keeps a departed process until then). Default: nothing.
    fn release(&mut self) {}
}

/// Result of [`Pcm::reconfigure`].
#[must_use]
#[derive(Debug)]
// Returned once per reconfiguration and moved straight into the caller's binding: boxing
// the `Pcm` would only add an allocation and a deref to every use of it.
#[allow(clippy::large_enum_variant)]
pub enum Reconfigured {
    /// This process goes on, with the new world ([`Pcm::world`]).
    Continue(Pcm),
    /// This process has been replaced: stop computing, release memory, and call
    /// [`Departed::finalize`].
    Departed(Departed),
}

/// A PCM-enabled MPI process. Owns MPI: created by [`Pcm::init`], ended by
/// [`Pcm::finalize`] (or by [`Departed::finalize`] after a departure).
pub struct Pcm {
    // Field order matters: the communicators must be freed before MPI is finalised.
    world: SimpleCommunicator,
    /// What the application's calls naming `MPI_COMM_WORLD` get once `world` is no longer
    /// the launch's (see the `interpose` module).
    world_stand_in: interpose::WorldStandIn,
    store: Store,
    job: JobContext,
    rank: u32,
    size: u32,
    origin: ProcessStatus,
    /// A replacement's first status call is its predecessor's last: it returns at once.
    resume_pending: bool,
    /// The state stored or loaded now is in the form of a resize: rows of the declared
    /// arrays and replicated values ([`Pcm::resizing`]). Set by the status call that
    /// announces a resize and in a process of the new world, until the next status call.
    resizing: bool,
    pending: Option<Plan>,
    /// Checkpoint timer (rank 0) and an agreed checkpoint waiting for `reconfigure`.
    checkpoints: CheckpointTimer,
    /// Rank 0 only: picks the check interval.
    cadence: Option<Cadence>,
    daemon: Option<DaemonLink>,
    host: HostName,
    /// Host of each rank of the world, by rank.
    rank_hosts: Vec<HostName>,
    last_outcome: Option<Outcome>,
    /// The processes started with this one, which `MPI_Finalize` waits for.
    launch: Launch,
    /// This rank's profile for pcmd (MPI traffic, times, memory).
    profiler: Profiler,
    universe: MpiOwner,
    /// A reconfiguration failed halfway: the job cannot go on, and dropping this handle
    /// only frees it (no collective shutdown).
    broken: bool,
    /// Its MPI parts went to a [`Departed`]: dropping it does nothing more.
    spent: bool,
    /// The settings this process started with.
    config: Config,
}

/// Who initialised MPI, and so who finalizes it.
pub(crate) enum MpiOwner {
    /// [`Pcm::init`] initialised MPI: dropping rsmpi's `Universe` finalizes it.
    Pcm(Universe),
    /// The application initialised MPI before [`Pcm::attach`] (the C interface's
    /// `MPI_Init` + `PCM_Init`), and calls `MPI_Finalize` itself after [`Pcm::finalize`].
    Application,
}

impl MpiOwner {
    /// The process's `MPI_COMM_WORLD` (its launch), whoever initialised MPI.
    pub(crate) fn world(&self) -> SimpleCommunicator {
        SimpleCommunicator::world()
    }

    /// Ends MPI in a process that will not return to the application: a departed one.
    fn finalize_departed(self) {
        match self {
            MpiOwner::Pcm(universe) => drop(universe),
            MpiOwner::Application => ffi::finalize(),
        }
    }
}

impl Pcm {
    /// Initialises MPI and PCM (the paper's `PCM_Init`): the rank registers with its node's
    /// pcmd if one runs, and a replacement process receives its predecessor's state.
    ///
    /// `app` names the application for people and daemons (letters, digits, `.`, `-`, `_`).
    ///
    /// The settings come from the environment ([`Config::from_env`]); a bad one is an
    /// error naming its variable (a replacement, whose job already accepted its settings,
    /// logs it and goes on with the defaults rather than leave the job waiting).
    pub fn init(app: &str) -> Result<Pcm, PcmError> {
        Self::start(app, Ownership::Pcm, Config::from_env())
    }

    /// [`Pcm::init`] with the settings given (for example [`Config::from_env`] changed in
    /// code). A replacement process reads its own with [`Config::from_env`] for what is not
    /// inherited from the job (profiling, the daemon socket).
    pub fn init_with(app: &str, config: Config) -> Result<Pcm, PcmError> {
        Self::start(app, Ownership::Pcm, config.validate())
    }

    /// Like [`Pcm::init`], for a process whose MPI the application initialised itself
    /// (`MPI_Init` before the paper's `PCM_Init(comm)`, as C and Fortran programs do).
    /// [`Pcm::finalize`] then leaves MPI initialised, and the application calls
    /// `MPI_Finalize`; a departed process is still finalized and ended by
    /// [`Departed::finalize`], since it never returns to the application.
    ///
    /// MPI must be initialised at `MPI_THREAD_SINGLE` or above. On MPICH, a departed process
    /// leaves at once only if `MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1` was in the environment
    /// at `MPI_Init` ([`prompt_departure_env`]; the C interface's `MPI_Init` sets it);
    /// without it, it waits in `MPI_Finalize` until the job ends (logged once).
    pub fn attach(app: &str) -> Result<Pcm, PcmError> {
        Self::start(app, Ownership::Application, Config::from_env())
    }

    /// [`Pcm::attach`] with the settings given.
    pub fn attach_with(app: &str, config: Config) -> Result<Pcm, PcmError> {
        Self::start(app, Ownership::Application, config.validate())
    }

    fn start(
        app: &str,
        ownership: Ownership,
        config: Result<Config, PcmError>,
    ) -> Result<Pcm, PcmError> {
        let app = AppName::new(app).map_err(|e| PcmError::Config {
            variable: "application name",
            value: app.to_owned(),
            reason: e.to_string(),
        })?;
        runtime::check_mpi_library()?;
        let universe = match ownership {
            Ownership::Pcm => {
                if runtime::PROMPT_DEPARTURE
                    && std::env::var_os(runtime::MPICH_LOCAL_FINALIZE).is_none()
                {
                    // Read by MPI_Init, below; still single-threaded here.
                    std::env::set_var(runtime::MPICH_LOCAL_FINALIZE, "1");
                }
                // Reductions that round the same before and after a move (MPICH: device
                // collectives off; see `deterministic_reductions_env`).
                runtime::prepare_reductions_env();
                let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Single)
                    .ok_or(PcmError::MpiInit)?;
                MpiOwner::Pcm(universe)
            }
            Ownership::Application => {
                if !mpi::environment::is_initialized() || mpi::environment::is_finalized() {
                    return Err(PcmError::MpiNotInitialized);
                }
                if runtime::PROMPT_DEPARTURE
                    && std::env::var_os(runtime::MPICH_LOCAL_FINALIZE).is_none()
                {
                    tracing::warn!(
                        "MPI was initialised without {}=1: a process moved away will wait in \
                         MPI_Finalize until the job ends instead of exiting at once",
                        runtime::MPICH_LOCAL_FINALIZE
                    );
                }
                MpiOwner::Application
            }
        };
        let _internal = interpose::Internal::enter();
        let host = local_host_name();
        let pcm = match ffi::take_parent() {
            Some(parent) => {
                // The job accepted its settings at launch; a replacement whose environment
                // differs goes on with the defaults rather than leave the job waiting.
                let config = config.unwrap_or_else(|e| {
                    tracing::warn!("{e}; using the default settings");
                    Config::default()
                });
                if let Err(e) = events::configure(&config) {
                    // The job is waiting for this replacement: it goes on without events.
                    tracing::warn!("{e}; this replacement writes no events");
                }
                events::loop_joined();
                reconfig::join_as_replacement(universe, parent, host, config)?
            }
            None => {
                let config = config?;
                events::configure(&config)?;
                Self::init_fresh(universe, app, host, config)?
            }
        };
        pcm.profiler.attach(&pcm.world);
        if pcm.rank == 0 && pcm.origin == ProcessStatus::Fresh {
            runtime::log_reductions();
            if pcm.job.checkpoint.enabled() {
                let locked = std::env::var(pcm_proto::checkpoint::LOCKED_SERIES_ENV).ok();
                checkpoint::warn_other_series(&pcm, locked.as_deref());
                if !pcm.job.resumed {
                    checkpoint::announce(&pcm);
                }
            }
        }
        events::started(
            pcm.rank,
            &pcm.host,
            matches!(pcm.origin, ProcessStatus::Replacement { .. }),
        );
        Ok(pcm)
    }

    fn init_fresh(
        universe: MpiOwner,
        app: AppName,
        host: HostName,
        config: Config,
    ) -> Result<Pcm, PcmError> {
        let world = ffi::dup_world()?;
        let rank = world.rank() as u32;
        let size = world.size() as u32;
        let schedule = config.schedule.clone();
        let check_period = config.check_period;
        let checkpoint_policy = config.checkpoint;
        let reconfigure_timeout = config.reconfigure_timeout;
        let restart = config.restart;
        let profiling = config.profiling;
        let job = agree_on_job_id(&world, &app);
        let (job_name, identity) =
            checkpoint::agree_on_identity(&world, config.job_name.as_deref())?;
        let checkpoint_dir = checkpoint::agree_on_dir(&world, config.checkpoint_dir.as_deref())?;
        let (hosts, new_hosts, rank_hosts) = agree_on_hosts(&world, &host, &config)?;
        let now = Instant::now();
        let mut pcm = Pcm {
            world,
            world_stand_in: interpose::WorldStandIn::none(),
            store: Store::default(),
            job: JobContext {
                job,
                app,
                iteration: 0,
                next_check: 0,
                schedule,
                migrations: 0,
                recent: VecDeque::new(),
                carried_out: VecDeque::new(),
                check_period,
                hosts,
                new_hosts,
                checkpoint: checkpoint_policy,
                job_name,
                checkpoint_dir,
                identity,
                resumed: false,
                reconfigure_timeout,
                malleability: None,
                blocks: malleable::Blocks::new(),
                resizes: 0,
            },
            rank,
            size,
            origin: ProcessStatus::Fresh,
            resume_pending: false,
            resizing: false,
            pending: None,
            checkpoints: CheckpointTimer::new(rank, &checkpoint_policy, now),
            cadence: (rank == 0).then(|| Cadence::new(check_period, now, 0)),
            daemon: None,
            host,
            rank_hosts,
            last_outcome: None,
            launch: Launch::new(&universe.world(), 0),
            profiler: Profiler::new(profiling, pcm_proto::RankProfile::default()),
            universe,
            broken: false,
            spent: false,
            config,
        };
        if restart != config::Restart::No {
            checkpoint::restore(&mut pcm, restart)?;
        }
        pcm.connect_daemon();
        Ok(pcm)
    }

    /// The node's pcmd socket, or `None` with `PCM_DAEMON=none`.
    fn daemon_socket(&self) -> Option<std::path::PathBuf> {
        if self.config.daemon_off() {
            return None;
        }
        let uid = nix::unistd::getuid().as_raw();
        Some(pcm_proto::socket_path(
            self.config.daemon.as_deref(),
            self.config.runtime_dir.as_deref(),
            uid,
            &self.host,
        ))
    }

    /// Starts the link to the node's pcmd (unless `PCM_DAEMON=none`).
    fn connect_daemon(&mut self) {
        let Some(path) = self.daemon_socket() else {
            return;
        };
        let registration = ToDaemon::Register {
            job: self.job.job.clone(),
            app: self.job.app.clone(),
            rank: Rank(self.rank),
            size: self.size,
            host: self.host.clone(),
            pid: std::process::id(),
            replacement: matches!(self.origin, ProcessStatus::Replacement { .. }),
            reconfigurations: self.job.migrations,
        };
        let link = DaemonLink::start(path, registration);
        link.set_profiling(self.profiler.enabled());
        link.set_reconfigurations(self.job.migrations);
        self.daemon = Some(link);
    }

    /// The communicator of the job: use it for all the application's communication. It
    /// changes after every reconfiguration.
    pub fn world(&self) -> &SimpleCommunicator {
        &self.world
    }

    /// This process's rank in [`Pcm::world`]; a replacement has its predecessor's rank.
    /// (`rank().0` is the number; MPI calls take `world().rank()`, an `i32`.)
    pub fn rank(&self) -> Rank {
        Rank(self.rank)
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Whether this process started with the job or replaced a rank (the paper's
    /// `PCM_Process_Status`).
    pub fn process_status(&self) -> ProcessStatus {
        self.origin
    }

    /// Number of status calls so far in the job (the iteration count PCM keeps).
    pub fn iteration(&self) -> u64 {
        self.job.iteration
    }

    /// Reconfigurations the job has completed since it first started: each counts once,
    /// however many ranks it moved, whether a pcmd request or a scripted move
    /// (`PCM_SCHEDULE`) asked for it; failed, cancelled or refused requests do not count.
    /// Replacements inherit the count, and a restart from a checkpoint resumes it from the
    /// checkpoint (reconfigurations after that checkpoint are lost with the run).
    pub fn migrations(&self) -> u64 {
        self.job.migrations
    }

    /// The job's identifier, shared by all its ranks and shown by `pcmd status`.
    pub fn job_id(&self) -> &JobId {
        &self.job.job
    }

    /// Host this process runs on.
    pub fn host(&self) -> &HostName {
        &self.host
    }

    /// Host of every rank of the world, by rank (kept current across reconfigurations).
    pub fn rank_hosts(&self) -> &[HostName] {
        &self.rank_hosts
    }

    /// [`Pcm::rank_hosts`] as one line, comma-separated (`node-a,node-b,node-a`): where
    /// every rank runs, for progress lines and logs.
    pub fn placement(&self) -> String {
        let hosts: Vec<&str> = self.rank_hosts.iter().map(HostName::as_str).collect();
        hosts.join(",")
    }

    /// Whether the link to the node's pcmd is up.
    pub fn daemon_connected(&self) -> bool {
        self.daemon.as_ref().is_some_and(DaemonLink::is_connected)
    }

    /// How the last reconfiguration this process took part in ended, if any.
    pub fn last_outcome(&self) -> Option<&Outcome> {
        self.last_outcome.as_ref()
    }

    /// Stores a serde value under `name` for the replacement (the paper's `PCM_Store`).
    pub fn store<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), PcmError> {
        self.store.store_value(name, value)
    }

    /// Stores a slice of plain numeric data under `name`, as raw bytes (no encoding).
    pub fn store_array<T: Pod>(&mut self, name: &str, values: &[T]) -> Result<(), PcmError> {
        self.store.store_array(name, values)
    }

    /// Declares the job malleable (docs/malleability.md): it may be resized to any width
    /// `limits` allows. Call it once, before the loop, on every rank, with the same limits;
    /// a replacement or added process inherits the job's and its own call must agree.
    ///
    /// # Errors
    /// [`PcmError::Declaration`] if the job declared other limits.
    pub fn set_malleable(&mut self, limits: Malleability) -> Result<(), PcmError> {
        match &self.job.malleability {
            Some(declared) if *declared != limits => Err(PcmError::Declaration(format!(
                "the job is malleable within {}..={} ({}), not {}..={} ({})",
                declared.min(),
                declared.max(),
                declared.rule(),
                limits.min(),
                limits.max(),
                limits.rule()
            ))),
            _ => {
                self.job.malleability = Some(limits);
                Ok(())
            }
        }
    }

    /// Declares `name` a distributed array of `rows` global rows of `row_len` elements of
    /// `T`, split in row blocks over the ranks ([`block_rows`]; this rank's rows:
    /// [`Pcm::block_range`]). In a resize each rank stores its rows with
    /// [`Pcm::store_block`] and PCM moves them to their new owners. Call it before the loop,
    /// on every rank, with the same values; a replacement's or added process's own call must
    /// agree with the job's.
    ///
    /// # Errors
    /// [`PcmError::Declaration`]: no rows or elements, or another declaration of `name`.
    pub fn declare_block<T: Pod>(
        &mut self,
        name: &str,
        rows: u64,
        row_len: u64,
    ) -> Result<(), PcmError> {
        store::check_name(name)?;
        if rows == 0 || row_len == 0 {
            return Err(PcmError::Declaration(format!(
                "array {name:?} declared with {rows} rows of {row_len} elements: both must be at least 1"
            )));
        }
        let decl = malleable::BlockDecl {
            type_name: store::type_label::<[T]>(),
            element_bytes: std::mem::size_of::<T>() as u64,
            rows,
            row_len,
        };
        match self.job.blocks.get(name) {
            Some(declared) if *declared != decl => Err(PcmError::Declaration(format!(
                "array {name:?} is declared as {} rows of {} elements of {}, not {rows} rows of {row_len} elements of {}",
                declared.rows, declared.row_len, declared.type_name, decl.type_name
            ))),
            _ => {
                self.job.blocks.insert(name.to_owned(), decl);
                Ok(())
            }
        }
    }

    /// The global rows of the distributed array `name` this rank owns in the current world
    /// (after a resize: its new rows).
    ///
    /// # Errors
    /// [`PcmError::Declaration`] if `name` was not declared.
    pub fn block_range(&self, name: &str) -> Result<std::ops::Range<u64>, PcmError> {
        let decl = self.block_decl(name)?;
        Ok(block_rows(decl.rows, self.rank, self.size))
    }

    fn block_decl(&self, name: &str) -> Result<&malleable::BlockDecl, PcmError> {
        self.job.blocks.get(name).ok_or_else(|| {
            PcmError::Declaration(format!(
                "array {name:?} was not declared (Pcm::declare_block); declared: {}",
                match self.job.blocks.keys().cloned().collect::<Vec<_>>() {
                    names if names.is_empty() => "none".to_owned(),
                    names => names.join(", "),
                }
            ))
        })
    }

    /// Stores this rank's rows of the distributed array `name` for a resize
    /// ([`Status::Resize`]): exactly [`Pcm::block_range`]'s rows, `row_len` elements each, in
    /// row order. A wrong length or type is found by [`Pcm::reconfigure`] on every rank
    /// together, which then refuses the resize and lets the job go on at its width.
    /// Outside a resize it stores an array like [`Pcm::store_array`] (a replacement loads
    /// it with [`Pcm::take_array`]).
    pub fn store_block<T: Pod>(&mut self, name: &str, rows: &[T]) -> Result<(), PcmError> {
        self.store.store_array(name, rows)
    }

    /// Whether the state stored now, or loaded now, is in the form of a resize: the rows of
    /// the declared arrays ([`Pcm::store_block`], then [`Pcm::take_array`] of this rank's new
    /// rows) and replicated values. True from the status call that returned
    /// [`Status::Resize`] until the next status call, and in a process of the new world while
    /// it loads; also for the checkpoints of a job that declared arrays
    /// ([`Status::Checkpoint`]) and when such a checkpoint is loaded at a restart, whatever
    /// the width it was taken at. A [`State`] checks it in `store` and `load`.
    pub fn resizing(&self) -> bool {
        // A malleable job's checkpoints are in the same form, so that a restart can
        // spread them over another width.
        self.resizing || (self.checkpoints.pending.is_some() && !self.job.blocks.is_empty())
    }

    /// Resizes the job has completed since it first started.
    pub fn resizes(&self) -> u64 {
        self.job.resizes
    }

    /// A zeroed array of `len` elements in shared memory, for the application to use as its
    /// state (like `MPI_Alloc_mem`); `name` labels it for people (`/proc/PID/fd` shows
    /// `memfd:pcm-array:JOB:NAME`). Stored with [`Pcm::store_shared`], it is handed to a
    /// replacement on the same host without a copy (see [`SharedArray`]).
    pub fn alloc_array<T: Pod>(&self, name: &str, len: usize) -> Result<SharedArray<T>, PcmError> {
        SharedArray::zeroed(self.job.job.as_str(), name, len)
    }

    /// Stores a shared array under `name` without copying it: a replacement on the same
    /// host takes its pages over ([`Pcm::take_shared`]), one on another host receives its
    /// bytes; a checkpoint writes them. The array must not change until the
    /// reconfiguration is over (as with [`Pcm::store_array`], what is handed over is the
    /// array as it is then; here it is read when it is sent).
    pub fn store_shared<T: Pod>(
        &mut self,
        name: &str,
        array: &SharedArray<T>,
    ) -> Result<(), PcmError> {
        self.store.store_shared(name, array)
    }

    /// Takes an array out of the store as a [`SharedArray`]: the very pages of the
    /// departing process when it ran on this host and stored it with
    /// [`Pcm::store_shared`], otherwise a new shared array holding the bytes received (or
    /// restored from a checkpoint, or stored with [`Pcm::store_array`]). [`Pcm::take_array`]
    /// also takes an array stored with [`Pcm::store_shared`], as a copy in a `Vec`.
    pub fn take_shared<T: Pod>(&mut self, name: &str) -> Result<SharedArray<T>, PcmError> {
        self.store.take_shared(name, self.job.job.as_str())
    }

    /// Loads a value stored with [`Pcm::store`] by the predecessor (the paper's `PCM_Load`).
    pub fn load<T: DeserializeOwned>(&self, name: &str) -> Result<T, PcmError> {
        self.store.load_value(name)
    }

    /// Takes an array stored with [`Pcm::store_array`] out of the store (a second take of
    /// the same name fails); no copy for 8-byte element types. [`Pcm::load_array_into`]
    /// copies instead and leaves it stored.
    pub fn take_array<T: Pod>(&mut self, name: &str) -> Result<Vec<T>, PcmError> {
        self.store.take_array(name)
    }

    /// Copies an array stored with [`Pcm::store_array`] into `out`, which must have its length.
    pub fn load_array_into<T: Pod>(&self, name: &str, out: &mut [T]) -> Result<(), PcmError> {
        self.store.load_array_into(name, out)
    }

    /// The element type and size of the array stored under `name` (with
    /// [`Pcm::store_array`], or handed over to this replacement): Rust's name of the slice
    /// type (`[f64]`, `[i32]`, ...) and the length in bytes. Lets a caller that does not
    /// know the type statically (the C interface) check it and size its buffer.
    pub fn array_layout(&self, name: &str) -> Result<(&str, usize), PcmError> {
        self.store.array_layout(name)
    }

    /// Gives up the coordinated checkpoint the last [`Pcm::status`] announced
    /// ([`Status::Checkpoint`]) without writing it, and turns checkpoints off for the rest of
    /// the run, in this process and the replacements it hands its context to. For a
    /// program that does not answer checkpoints (the C interface uses it when a program
    /// written like the paper's Figure 11 ignores `PCM_CHECKPOINT`). Every rank must call
    /// it at the same iteration, as they all got the same status. Returns whether a
    /// checkpoint was pending.
    pub fn decline_checkpoint(&mut self) -> bool {
        let pending = self.checkpoints.pending.is_some();
        if pending {
            self.checkpoints.stop();
            self.job.checkpoint = config::Policy::default();
        }
        pending
    }

    /// The state to start the loop with, and the iteration to start it at: `fresh()` and 0
    /// in a process started with the job; in a replacement or a restarted job, the state
    /// its predecessor stored ([`State::load`]) and the iteration it stored it at. Call it
    /// once, before the loop, on every rank; a replacement must make no collective call
    /// before the loop that the running ranks are not making (see docs/instrumenting.md).
    pub fn resume<S: State, E: Into<PcmError>>(
        &mut self,
        fresh: impl FnOnce() -> Result<S, E>,
    ) -> Result<(S, u64), PcmError> {
        match self.origin {
            ProcessStatus::Fresh => Ok((fresh().map_err(Into::into)?, 0)),
            ProcessStatus::Replacement { iteration, .. }
            | ProcessStatus::Restarted { iteration }
            | ProcessStatus::Added { iteration } => Ok((S::load(self)?, iteration)),
        }
    }

    /// A reconfiguration point: call it once per iteration, first thing in the loop, on every
    /// rank. It asks [`Pcm::status`]; when a move or checkpoint is due it stores `state`
    /// ([`State::store`]) if this rank must, and calls [`Pcm::reconfigure`]. It returns on
    /// every rank that goes on (then take [`Pcm::world`] afresh); on a rank that moved
    /// away it releases `state` ([`State::release`]) and ends the process
    /// ([`Departed::finalize`]).
    pub fn reconfigure_point<S: State>(&mut self, state: &mut S) -> Result<(), PcmError> {
        let status = self.status()?;
        if status == Status::Continue {
            return Ok(());
        }
        if status.stores_state() {
            state.store(self)?;
        }
        if let Some(departed) = self.reconfigure_in_place()? {
            state.release();
            departed.finalize();
        }
        if status == Status::Resize && self.resizing {
            // This rank's block changed: its state is loaded again from the new rows.
            state.release();
            *state = S::load(self)?;
        }
        Ok(())
    }

    /// Asks whether the job must reconfigure at this iteration (the paper's `PCM_Status`).
    ///
    /// Collective in effect: every rank calls it once per iteration, at the same point, and
    /// every rank gets a consistent answer at the same iteration. Most calls return at once;
    /// every few milliseconds of wall time one call agrees with the other ranks (a small
    /// all-reduce).
    #[inline]
    pub fn status(&mut self) -> Result<Status, PcmError> {
        let iteration = self.job.iteration;
        if self.rank == 0 && events::loop_start_pending() {
            events::loop_started(iteration);
        }
        self.job.iteration += 1;
        self.resizing = false;
        if let Some(daemon) = &self.daemon {
            daemon.set_iteration(iteration);
            if daemon.profile_due() {
                self.send_profile(iteration);
            }
        }
        if self.resume_pending {
            self.resume_pending = false;
            return Ok(Status::Continue);
        }
        if iteration < self.job.next_check && !self.job.schedule.has(iteration) {
            return Ok(Status::Continue);
        }
        self.check(iteration)
    }

    /// Sends the rank's profile to its daemon (when the link asks, about once a second),
    /// with the job's resize limits ([`Pcm::set_malleable`]; C and Fortran declare through
    /// the same call), so that pcmd and the agents know the job is malleable.
    #[cold]
    fn send_profile(&self, iteration: u64) {
        if let (true, Some(daemon)) = (self.profiler.enabled(), &self.daemon) {
            let mut profile = self.profiler.snapshot(iteration, &self.rank_hosts);
            profile.malleable = self.job.malleability;
            daemon.send(ToDaemon::Profile(profile));
        }
    }

    /// Carries out the reconfiguration the last status call announced (the paper's
    /// `PCM_Reconfigure`). Collective over the world.
    ///
    /// On the departing rank, call it after storing the state to hand over; it returns
    /// [`Reconfigured::Departed`] and the process must stop. Elsewhere it returns the
    /// updated `Pcm`. If the replacement processes cannot be started (an unknown host, say),
    /// every rank gets its `Pcm` back unchanged and the failure is logged and reported.
    ///
    /// After [`Status::Checkpoint`] it writes the coordinated checkpoint of what was stored
    /// (see the `checkpoint` module) and returns [`Reconfigured::Continue`] with this `Pcm`.
    ///
    /// An error that leaves the job intact (nothing pending, say) gives the handle back in
    /// [`ReconfigureError::pcm`]; one that broke the job halfway does not.
    pub fn reconfigure(mut self) -> Result<Reconfigured, ReconfigureError> {
        match self.reconfigure_in_place() {
            Ok(None) => Ok(Reconfigured::Continue(self)),
            Ok(Some(departed)) => Ok(Reconfigured::Departed(departed)),
            Err(error) => Err(ReconfigureError {
                error,
                pcm: (!self.broken).then(|| Box::new(self)),
            }),
        }
    }

    /// [`Pcm::reconfigure`] on a borrowed handle: `Some` on the departing rank, whose
    /// handle is then spent (dropping it does nothing more).
    fn reconfigure_in_place(&mut self) -> Result<Option<Departed>, PcmError> {
        if let Some(iteration) = self.checkpoints.pending.take() {
            checkpoint::commit(self, iteration);
            return Ok(None);
        }
        let plan = self.pending.take().ok_or(PcmError::NothingPending)?;
        let _internal = interpose::Internal::enter();
        let departed = reconfig::run_as_parent(self, plan)?;
        if departed.is_none() {
            self.profiler.attach(&self.world);
        }
        Ok(departed)
    }

    /// Takes rank `rank` of a new world of `size` ranks after a resize at `iteration`: rank
    /// 0's duties (the check cadence, the checkpoint timer) move with the number, and the
    /// node's pcmd learns the new number and width (also when the number stays: the width
    /// changed), so that its status, profiles and later requests use them.
    pub(crate) fn renumber(&mut self, rank: u32, size: u32, iteration: u64) {
        let was = self.rank;
        self.rank = rank;
        self.size = size;
        if let Some(daemon) = &self.daemon {
            daemon.renumber(rank, size, self.job.migrations);
        }
        if was == rank {
            return;
        }
        let now = Instant::now();
        self.checkpoints = CheckpointTimer::new(rank, &self.job.checkpoint, now);
        self.cadence = match (rank, self.cadence.take()) {
            (0, Some(cadence)) => Some(cadence),
            (0, None) => Some(Cadence::new(self.job.check_period, now, iteration)),
            _ => None,
        };
    }

    /// Moves this process's MPI parts into a [`Departed`] after its world was split away;
    /// the handle is spent.
    pub(crate) fn depart(&mut self) -> Departed {
        self.spent = true;
        reconfig::release_stand_in(std::mem::take(&mut self.world_stand_in));
        reconfig::release(std::mem::replace(
            &mut self.world,
            SimpleCommunicator::world(),
        ));
        Departed {
            rank: self.rank,
            daemon: self.daemon.take(),
            launch: self.launch.clone(),
            // The placeholder left behind finalizes nothing.
            universe: std::mem::replace(&mut self.universe, MpiOwner::Application),
        }
    }

    /// Ends PCM and MPI after the application's loop ran to its end (the paper's
    /// `PCM_Finalize` followed by `MPI_Finalize`): like dropping the handle, and it also
    /// records that the job ended by itself, so that a later `PCM_RESTART=1` says so
    /// instead of resuming it, and warns of `PCM_SCHEDULE` entries never reached.
    /// Collective over the world; also releases departed processes waiting for this launch
    /// to end.
    pub fn finalize(mut self) {
        let _internal = interpose::Internal::enter();
        if self.rank == 0 {
            warn_unreached(&self.job.schedule, self.job.iteration);
            events::final_progress(self.job.iteration);
        }
        if self.rank == 0 && (self.job.checkpoint.enabled() || self.job.resumed) {
            checkpoint::mark_finished(&self);
        }
        self.shut_down();
    }

    /// Leaves the daemon, releases departed processes (Open MPI 4), frees the world, and
    /// finalizes MPI if PCM initialised it. Collective over the world.
    fn shut_down(&mut self) {
        let _internal = interpose::Internal::enter();
        self.spent = true;
        self.send_profile(self.job.iteration);
        if let Some(daemon) = self.daemon.take() {
            daemon.set_iteration(self.job.iteration);
            daemon.shutdown(Duration::from_millis(500));
        }
        let universe = std::mem::replace(&mut self.universe, MpiOwner::Application);
        if !runtime::PROMPT_DEPARTURE {
            self.launch.release_if_lowest(&universe.world());
        }
        drop(std::mem::take(&mut self.world_stand_in));
        drop(std::mem::replace(
            &mut self.world,
            SimpleCommunicator::world(),
        ));
        // Finalizes MPI if PCM initialised it; the application finalizes it otherwise.
        drop(universe);
        let closed = departed_peers::forgiven_closes();
        if closed > 0 {
            tracing::debug!(
                "MPI_Finalize: {closed} endpoint(s) to processes that left the job could not \
                 be flushed (their connection is gone) and were closed as done"
            );
        }
    }
}

/// Dropping a `Pcm` ends PCM and MPI as [`Pcm::finalize`] does (collectively), except that
/// it does not record the job as ended by itself: a job dropped on an error can still be
/// restarted from its checkpoints. A handle broken by a failed reconfiguration, or dropped
/// while a panic unwinds, is only freed; a departed process's handle holds nothing more.
impl Drop for Pcm {
    fn drop(&mut self) {
        // While a panic unwinds, the other ranks are not shutting down with this one:
        // only free the handle, as a broken one.
        if !self.spent && !self.broken && !std::thread::panicking() {
            self.shut_down();
        }
    }
}

/// An error from [`Pcm::reconfigure`], with the handle back when the job is still intact.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct ReconfigureError {
    /// What went wrong.
    pub error: PcmError,
    /// The handle, unchanged, when the error left the job intact (the reconfiguration did not
    /// start, for example [`PcmError::NothingPending`]); `None` when it broke the job halfway.
    pub pcm: Option<Box<Pcm>>,
}

impl From<ReconfigureError> for PcmError {
    fn from(e: ReconfigureError) -> Self {
        e.error
    }
}

/// The environment setting `MPI_Init` must find for a departed process to exit at once
/// (MPICH: `MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1`, which makes `MPI_Finalize` local), or
/// `None` for an MPI library that cannot let a process leave early (Open MPI 4). For code
/// that calls `MPI_Init` itself before [`Pcm::attach`]; [`Pcm::init`] sets it.
pub fn prompt_departure_env() -> Option<(&'static str, &'static str)> {
    runtime::PROMPT_DEPARTURE.then_some((runtime::MPICH_LOCAL_FINALIZE, "1"))
}

/// The environment setting `MPI_Init` must find for collective reductions to round the same
/// before and after a reconfiguration, and the same as a plain run given the same setting
/// (MPICH: `MPIR_CVAR_DEVICE_COLLECTIVES=none`: MPICH's shared-memory collectives, its
/// default, add in another order once a replacement from another launch is in the
/// communicator), or `None` where the runtime needs none (Open MPI 4). For code that calls
/// `MPI_Init` itself before [`Pcm::attach`]; [`Pcm::init`] sets it unless the variable is
/// set, and rank 0 logs at start what the job's reductions promise. See
/// docs/architecture.md, "Reductions".
pub fn deterministic_reductions_env() -> Option<(&'static str, &'static str)> {
    runtime::DETERMINISTIC_REDUCTIONS
}

/// Who is to initialise MPI: [`Pcm::init`] or the application ([`Pcm::attach`]).
#[derive(Debug, Clone, Copy)]
enum Ownership {
    Pcm,
    Application,
}

/// A process that has handed its rank to a replacement. It must not compute any more.
pub struct Departed {
    rank: u32,
    daemon: Option<DaemonLink>,
    launch: Launch,
    universe: MpiOwner,
}

impl Departed {
    /// The rank this process held.
    pub fn rank(&self) -> Rank {
        Rank(self.rank)
    }

    /// Leaves the job and ends the process with status 0.
    ///
    /// On MPICH it finalizes and exits at once. Open MPI 4 finalizes a process only together
    /// with the processes launched with it, so there this sleeps (no measurable CPU) until
    /// they finish, then returns from `MPI_Finalize` and exits. Release large buffers
    /// before calling it.
    pub fn finalize(self) -> ! {
        let Departed {
            daemon,
            launch,
            universe,
            rank,
        } = self;
        let _internal = interpose::Internal::enter();
        if let Some(daemon) = daemon {
            daemon.shutdown(Duration::from_millis(500));
        }
        if !runtime::PROMPT_DEPARTURE {
            tracing::debug!("former rank {rank} waits for its launch to end");
            launch.leave(&universe.world());
        }
        universe.finalize_departed();
        std::process::exit(0)
    }
}

impl std::fmt::Debug for Pcm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pcm")
            .field("job", &self.job.job)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("host", &self.host)
            .field("iteration", &self.job.iteration)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Departed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Departed")
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

/// Rank 0 picks a job id and broadcasts it: unique enough to tell runs apart on a pool.
fn agree_on_job_id(world: &SimpleCommunicator, app: &AppName) -> JobId {
    let mut stamp = 0u64;
    if world.rank() == 0 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        stamp = nanos ^ ((std::process::id() as u64) << 40);
    }
    world.process_at_rank(0).broadcast_into(&mut stamp);
    let mut name: String = app.as_str().chars().take(40).collect();
    name.push_str(&format!("-{:012x}", stamp & 0xffff_ffff_ffff));
    JobId::new(name)
        .unwrap_or_else(|_| JobId::new(format!("job-{stamp:016x}")).expect("hex is a valid id"))
}

/// Rank 0 reads the hostfile and the new-hosts setting and broadcasts them (or its error,
/// so that every rank fails alike); every rank adds the hosts the ranks run on. Returns the
/// allowed hosts, whether others may be used, and the host of each rank.
fn agree_on_hosts(
    world: &SimpleCommunicator,
    host: &HostName,
    config: &Config,
) -> Result<(BTreeSet<HostName>, hosts::NewHosts, Vec<HostName>), PcmError> {
    let from_env = (world.rank() == 0).then(|| {
        let result = hosts::hostfile_from_config(config)
            .and_then(|h| Ok((h, hosts::NewHosts::from_config(config)?)))
            .map_err(SettingError::from);
        wire::encode_cbor(&result)
    });
    let bytes = wire::broadcast_bytes(world, 0, from_env);
    let result: Result<(BTreeSet<HostName>, hosts::NewHosts), SettingError> =
        ciborium::from_reader(bytes.as_slice()).map_err(|e| PcmError::Handover(e.to_string()))?;
    // Every rank fails with rank 0's own error: the variable, its value (the file) and the
    // problem, once (it used to be wrapped again as `invalid hostfile="": ...`).
    let (mut hosts, new_hosts) = result.map_err(SettingError::into_error)?;
    let rank_hosts = wire::exchange_hosts(world, host);
    hosts.extend(rank_hosts.iter().cloned());
    Ok((hosts, new_hosts, rank_hosts))
}

/// Warns about each `PCM_SCHEDULE` entry a run of `iterations` status calls never reached
/// (it used to be ignored silently). Returns the warnings, for tests.
fn warn_unreached(schedule: &Schedule, iterations: u64) -> Vec<String> {
    let warnings: Vec<String> = schedule
        .unreached()
        .into_iter()
        .map(|entry| {
            format!(
                "{}: entry {entry:?} was never carried out: the run ended after {iterations} iterations (status calls 0 to {})",
                SCHEDULE_ENV,
                iterations.saturating_sub(1)
            )
        })
        .collect();
    for w in &warnings {
        tracing::warn!("{w}");
    }
    warnings
}

fn local_host_name() -> HostName {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .and_then(|h| HostName::new(h).ok())
        .unwrap_or_else(|| HostName::new("localhost").expect("literal is valid"))
}

/// Logs to stderr, filtered by `RUST_LOG` (default `warn,pcm=info`), unless the
/// application installed its own subscriber. PCM installs no subscriber by itself: call it
/// before [`Pcm::init`] to see PCM's log lines (for people; programs read the events,
/// [`events`]), or install your own. The C interface calls it in
/// `PCM_Init` and before logging errors of calls made before `PCM_Init`.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,pcm=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

#[cfg(test)]
mod verdict_tests {
    use super::*;

    /// Item 16: a scripted move past the end of the run is named in a warning.
    #[test]
    fn given_a_schedule_entry_past_the_end_then_a_warning_names_it() {
        let schedule = Schedule::parse("50:1,5000:2@node-b").unwrap();
        let mut left = schedule.clone();
        left.take(50);
        let warnings = warn_unreached(&left, 200);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("PCM_SCHEDULE")
                && warnings[0].contains("\"5000:2@node-b\"")
                && warnings[0].contains("after 200 iterations"),
            "{warnings:?}"
        );
        assert!(warn_unreached(&Schedule::default(), 200).is_empty());
    }

    /// Item 16: a bad hostfile read by rank 0 reaches every rank as one message naming the
    /// variable, the file and the problem (not `invalid hostfile="": invalid ...`).
    #[test]
    fn given_a_bad_hostfile_then_every_rank_gets_one_clear_message() {
        let on_rank_0 = PcmError::Config {
            variable: HOSTFILE_ENV,
            value: "/nonexistent/hosts".into(),
            reason: "cannot read the hostfile: No such file or directory (os error 2)".into(),
        };
        let expected = on_rank_0.to_string();
        let sent: Result<(), SettingError> = Err(on_rank_0.into());
        let bytes = wire::encode_cbor(&sent);
        let received: Result<(), SettingError> = ciborium::from_reader(bytes.as_slice()).unwrap();
        let message = received.unwrap_err().into_error().to_string();
        assert_eq!(message, expected);
        assert_eq!(
            message,
            "invalid PCM_HOSTFILE=\"/nonexistent/hosts\": cannot read the hostfile: No such file or directory (os error 2)"
        );
    }
}
