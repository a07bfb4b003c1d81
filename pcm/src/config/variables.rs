//! The name of every environment variable PCM reads for its settings, in one place: the
//! modules that parse a value name its variable in their errors from here, and
//! [`super::Config::from_env`] reads exactly [`VARIABLES`]. What each means is in the
//! crate documentation, "Settings".

/// Environment variable with scripted reconfigurations:
/// `ITER:PART[+PART...][,ITER:...]`, each part a move `RANK[@HOST]` or a resize
/// `size=M[@HOST[,HOST...]]` (docs/malleability.md), e.g.
/// `PCM_SCHEDULE=10:1@node-b,50:0+3,80:size=3@node-c`.
pub const SCHEDULE_ENV: &str = "PCM_SCHEDULE";
/// Environment variable overriding the default check period (100 ms), in milliseconds.
pub const CHECK_PERIOD_ENV: &str = "PCM_CHECK_PERIOD_MS";

/// Environment variable: seconds a reconfiguration's spawn, merge, state transfer and split
/// may take together before the job is ended (fractions allowed).
pub const RECONFIGURE_TIMEOUT_ENV: &str = "PCM_RECONFIGURE_TIMEOUT";

/// Environment variable that turns profiling off (`off`) or on (`on`, the default).
pub const PROFILE_ENV: &str = "PCM_PROFILE";

/// Environment variable naming the executable a replacement or a grown process is started
/// with (an absolute path; default: the running process's own, `/proc/self/exe`). PCM's
/// Python package sets it to `sys.executable`: in a virtual environment made of symlinks
/// the process's own executable is the base interpreter, outside the environment.
pub const EXECUTABLE_ENV: &str = "PCM_EXECUTABLE";

/// Environment variable naming the hostfile given to `mpirun`.
pub const HOSTFILE_ENV: &str = "PCM_HOSTFILE";
/// The launchers' environment forms of their hostfile option: Open MPI's `mpirun
/// --hostfile`, hydra's `mpiexec -f`.
pub(crate) const LAUNCHER_HOSTFILE_ENVS: [&str; 2] =
    ["OMPI_MCA_orte_default_hostfile", "HYDRA_HOST_FILE"];
/// Environment variable that lets ranks move to hosts outside the launch's allocation
/// (`1`; default `0`). Honoured on MPICH only.
pub const ALLOW_NEW_HOSTS_ENV: &str = "PCM_ALLOW_NEW_HOSTS";
/// Environment variable naming the command that checks a new host: PCM runs
/// `PCM_LAUNCHER HOST true`. Default: hydra's `HYDRA_LAUNCHER_EXEC`, else `ssh`.
pub const LAUNCHER_ENV: &str = "PCM_LAUNCHER";
/// hydra's environment forms of `-launcher` and `-launcher-exec`.
pub(crate) const HYDRA_LAUNCHER_ENV: &str = "HYDRA_LAUNCHER";
pub(crate) const HYDRA_LAUNCHER_EXEC_ENV: &str = "HYDRA_LAUNCHER_EXEC";

pub(crate) use pcm_proto::checkpoint::{DIR_ENV as CHECKPOINT_DIR_ENV, JOB_NAME_ENV};
/// Checkpoints: the interval, restart, job name and directory are shared with pcmd and
/// pcmrun, which define them.
pub use pcm_proto::checkpoint::{INTERVAL_ENV as CHECKPOINT_INTERVAL_ENV, RESTART_ENV};
/// Environment variable: with checkpoints on, take one right before a migration when the
/// newest is older than this many seconds (default 0: before every migration; `off`: never),
/// so that a move that fails (a replacement that dies while starting ends the job) loses
/// nothing: the job restarts from the state it had when the move began.
pub(crate) const BEFORE_MOVE_ENV: &str = "PCM_CHECKPOINT_BEFORE_MOVE";

/// The host settings, which rank 0 alone reads (it reads the hostfile and may warn).
pub(crate) const HOST_VARIABLES: [&str; 7] = [
    HOSTFILE_ENV,
    LAUNCHER_HOSTFILE_ENVS[0],
    LAUNCHER_HOSTFILE_ENVS[1],
    ALLOW_NEW_HOSTS_ENV,
    LAUNCHER_ENV,
    HYDRA_LAUNCHER_ENV,
    HYDRA_LAUNCHER_EXEC_ENV,
];

/// Every variable a [`super::Config`] reads: PCM's own, and the launchers' and system's ones
/// PCM consults (hostfiles, hydra's launcher, `XDG_RUNTIME_DIR`).
pub const VARIABLES: &[&str] = &[
    pcm_proto::DAEMON_ENV,
    "XDG_RUNTIME_DIR",
    HOST_VARIABLES[0],
    HOST_VARIABLES[1],
    HOST_VARIABLES[2],
    HOST_VARIABLES[3],
    HOST_VARIABLES[4],
    HOST_VARIABLES[5],
    HOST_VARIABLES[6],
    SCHEDULE_ENV,
    CHECK_PERIOD_ENV,
    CHECKPOINT_INTERVAL_ENV,
    BEFORE_MOVE_ENV,
    RESTART_ENV,
    JOB_NAME_ENV,
    CHECKPOINT_DIR_ENV,
    RECONFIGURE_TIMEOUT_ENV,
    PROFILE_ENV,
    EXECUTABLE_ENV,
    pcm_proto::run::EVENTS_ENV,
    pcm_proto::run::EVENTS_FILE_ENV,
    pcm_proto::run::PROGRESS_PERIOD_ENV,
];

/// The static name of a host setting read by rank 0 (`PCM_HOSTFILE`, a launcher's hostfile
/// variable, `PCM_ALLOW_NEW_HOSTS`), for the error the other ranks rebuild from its text.
pub(crate) fn setting_name(variable: &str) -> &'static str {
    [HOSTFILE_ENV, ALLOW_NEW_HOSTS_ENV]
        .into_iter()
        .chain(LAUNCHER_HOSTFILE_ENVS)
        .find(|known| *known == variable)
        .unwrap_or("a host setting")
}
