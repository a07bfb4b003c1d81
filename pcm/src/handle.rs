//! The [`Pcm`] handle of a PCM-enabled MPI process: the struct, what it tells of the process
//! and its job, and who owns MPI. Its methods are split by concern, one file each:
//! - `init`: [`Pcm::init`] and [`Pcm::attach`], registering with pcmd, a replacement's start;
//! - `state`: the state handed over (the application's `State`, `store*`, `load*`, `take*`, the malleable
//!   declarations, [`Pcm::resume`]);
//! - `status`: [`Pcm::status`] and the status check's driver;
//! - `reconfigure`: [`Pcm::reconfigure_point`], [`Pcm::reconfigure`] and the
//!   reconfiguration protocol;
//! - `checkpoint`: coordinated checkpoints, which a status check announces and
//!   `reconfigure` writes through the node's pcmd, and the restart from them;
//! - `finalize`: [`Pcm::finalize`], `Drop`, and the process that moved away (`Departed`).

mod checkpoint;
pub(crate) mod finalize;
mod init;
pub(crate) mod reconfigure;
pub(crate) mod state;
mod status;

use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use pcm_proto::{HostName, JobId, Outcome, Rank};

use crate::config::Config;
use crate::daemon::DaemonLink;
use crate::ffi;
use crate::interpose::WorldStandIn;
use crate::job::JobContext;
use crate::launch::Launch;
use crate::plan::Plan;
use crate::profile::Profiler;
use crate::schedule::{Cadence, CheckpointTimer};
use crate::status::ProcessStatus;
use crate::store::Store;

/// A PCM-enabled MPI process. Owns MPI: created by [`Pcm::init`], ended by
/// [`Pcm::finalize`] (or by `Departed::finalize` after a departure).
pub struct Pcm {
    // Field order matters: the communicators must be freed before MPI is finalised.
    pub(crate) world: SimpleCommunicator,
    /// What the application's calls naming `MPI_COMM_WORLD` get once `world` is no longer
    /// the launch's (see the `interpose` module).
    pub(crate) world_stand_in: WorldStandIn,
    pub(crate) store: Store,
    pub(crate) job: JobContext,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) origin: ProcessStatus,
    /// A replacement's first status call is its predecessor's last: it returns at once.
    pub(crate) resume_pending: bool,
    /// The state stored or loaded now is in the form of a resize: rows of the declared
    /// arrays and replicated values ([`Pcm::resizing`]). Set by the status call that
    /// announces a resize and in a process of the new world, until the next status call.
    pub(crate) resizing: bool,
    pub(crate) pending: Option<Plan>,
    /// Checkpoint timer (rank 0) and an agreed checkpoint waiting for `reconfigure`.
    pub(crate) checkpoints: CheckpointTimer,
    /// Rank 0 only: picks the check interval.
    pub(crate) cadence: Option<Cadence>,
    pub(crate) daemon: Option<DaemonLink>,
    pub(crate) host: HostName,
    /// Host of each rank of the world, by rank.
    pub(crate) rank_hosts: Vec<HostName>,
    pub(crate) last_outcome: Option<Outcome>,
    /// The processes started with this one, which `MPI_Finalize` waits for.
    pub(crate) launch: Launch,
    /// This rank's profile for pcmd (MPI traffic, times, memory).
    pub(crate) profiler: Profiler,
    pub(crate) universe: MpiOwner,
    /// A reconfiguration failed halfway: the job cannot go on, and dropping this handle
    /// only frees it (no collective shutdown).
    pub(crate) broken: bool,
    /// Its MPI parts went to a [`Departed`]: dropping it does nothing more.
    pub(crate) spent: bool,
    /// The settings this process started with.
    pub(crate) config: Config,
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
    pub(super) fn finalize_departed(self) {
        match self {
            MpiOwner::Pcm(universe) => drop(universe),
            MpiOwner::Application => ffi::finalize(),
        }
    }
}

impl Pcm {
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
