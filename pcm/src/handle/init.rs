//! How a [`Pcm`] starts: MPI initialised by PCM ([`Pcm::init`]) or by the application
//! ([`Pcm::attach`]), the settings agreed by every rank, the link to the node's pcmd, and a
//! replacement's start (its half of the protocol is in `reconfigure`).

use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use pcm_proto::{AppName, HostName, JobId, Rank, ToDaemon};

use super::{checkpoint, reconfigure};
use super::{MpiOwner, Pcm};
use crate::config::{self, Config, SettingError};
use crate::daemon::DaemonLink;
use crate::error::PcmError;
use crate::interpose;
use crate::job::JobContext;
use crate::launch::Launch;
use crate::profile::Profiler;
use crate::schedule::{Cadence, CheckpointTimer};
use crate::status::ProcessStatus;
use crate::store::Store;
use crate::{events, ffi, hosts, malleable, runtime, wire};

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
    /// [`Departed::finalize`](crate::Departed::finalize), since it never returns to the application.
    ///
    /// MPI must be initialised at `MPI_THREAD_SINGLE` or above. On MPICH, a departed process
    /// leaves at once only if `MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1` was in the environment
    /// at `MPI_Init` ([`prompt_departure_env`](crate::prompt_departure_env); the C interface's `MPI_Init` sets it);
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
                reconfigure::join_as_replacement(universe, parent, host, config)?
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
            runtime::log_spawn_speed_hint();
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
    pub(crate) fn daemon_socket(&self) -> Option<std::path::PathBuf> {
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
    pub(super) fn connect_daemon(&mut self) {
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
}

/// Who is to initialise MPI: [`Pcm::init`] or the application ([`Pcm::attach`]).
#[derive(Debug, Clone, Copy)]
enum Ownership {
    Pcm,
    Application,
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

fn local_host_name() -> HostName {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .and_then(|h| HostName::new(h).ok())
        .unwrap_or_else(|| HostName::new("localhost").expect("literal is valid"))
}
