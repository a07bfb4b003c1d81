//! PCM's settings in one place: [`Config`].
//!
//! Layers, later wins: the defaults (named constants), then the `PCM_*` environment
//! ([`Config::from_env`], which [`crate::Pcm::init`] uses), then code (`with_*`), then
//! [`Config::validate`]. A value that does not parse is an error naming the variable, its
//! value and what was expected ([`PcmError::Config`]). This is the only module of pcm that
//! reads the environment for settings; the rest takes them from a `Config`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::PcmError;
use crate::profile;
use crate::schedule::{self, Policy, Schedule};

pub(crate) mod variables;

pub use variables::{
    ALLOW_NEW_HOSTS_ENV, CHECKPOINT_INTERVAL_ENV, CHECK_PERIOD_ENV, EXECUTABLE_ENV, HOSTFILE_ENV,
    LAUNCHER_ENV, PROFILE_ENV, RECONFIGURE_TIMEOUT_ENV, RESTART_ENV, SCHEDULE_ENV, VARIABLES,
};
use variables::{BEFORE_MOVE_ENV, CHECKPOINT_DIR_ENV, HOST_VARIABLES, JOB_NAME_ENV};

/// Default of [`RECONFIGURE_TIMEOUT_ENV`]: a spawn takes 0.1-0.4 s on a quiet node and about
/// 1 s on Open MPI 5, and state transfer of a few GB a few seconds; a minute leaves room for
/// a loaded machine while still ending a stalled job in bounded time.
pub const DEFAULT_RECONFIGURE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default least time between two progress events (`PCM_PROGRESS_PERIOD`).
pub const DEFAULT_PROGRESS_PERIOD: Duration = Duration::from_secs(1);

/// Where events go ([`crate::events`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EventSinks {
    /// `PCMRUN-EVENT` lines on standard error (`PCMRUN_EVENTS=stderr` or `PCM_EVENTS=stderr`).
    pub(crate) stderr: bool,
    /// JSON lines appended to this file (`PCM_EVENTS=/absolute/path`).
    pub(crate) file: Option<std::path::PathBuf>,
}

/// PCM's settings. Every field has a default (stated on its setter), the environment
/// overrides it ([`Config::from_env`]), and code overrides both:
///
/// ```no_run
/// use std::time::Duration;
///
/// let config = pcm::Config::from_env()?
///     .with_check_period(Duration::from_millis(50))
///     .with_checkpoint_interval(Some(Duration::from_secs(600)))
///     .validate()?;
/// let pcm = pcm::Pcm::init_with("myapp", config)?;
/// # Ok::<(), pcm::PcmError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) check_period: Duration,
    pub(crate) schedule: Schedule,
    pub(crate) checkpoint: Policy,
    pub(crate) restart: Restart,
    pub(crate) reconfigure_timeout: Duration,
    pub(crate) profiling: bool,
    pub(crate) events: EventSinks,
    pub(crate) progress_period: Duration,
    /// `PCM_DAEMON` as given (`none`, a socket path template), and `XDG_RUNTIME_DIR`.
    pub(crate) daemon: Option<String>,
    pub(crate) runtime_dir: Option<String>,
    /// `PCM_JOB_NAME` as given: rank 0 checks it and every rank gets its verdict.
    pub(crate) job_name: Option<String>,
    /// `PCM_CHECKPOINT_DIR`: the job's own checkpoint directory (absolute), or `None`: the
    /// pcmd's. Every rank must give the same one (checked at init).
    pub(crate) checkpoint_dir: Option<PathBuf>,
    /// `PCM_EXECUTABLE`: what replacements and grown processes are started with, or `None`:
    /// the process's own executable.
    pub(crate) executable: Option<PathBuf>,
    /// The host settings as given, read by rank 0 only (it reads the hostfile and may
    /// warn), by variable name.
    pub(crate) hosts: BTreeMap<&'static str, String>,
}

impl Default for Config {
    /// Every default: no schedule, a check every [`crate::DEFAULT_CHECK_PERIOD`], no
    /// checkpoints, no restart, [`DEFAULT_RECONFIGURE_TIMEOUT`], profiling on,
    /// events off (progress every [`DEFAULT_PROGRESS_PERIOD`] when on), the
    /// default pcmd socket, no job name, hosts of the allocation only.
    fn default() -> Self {
        Config {
            check_period: schedule::DEFAULT_CHECK_PERIOD,
            schedule: Schedule::default(),
            checkpoint: Policy::default(),
            restart: Restart::No,
            reconfigure_timeout: DEFAULT_RECONFIGURE_TIMEOUT,
            profiling: true,
            events: EventSinks::default(),
            progress_period: DEFAULT_PROGRESS_PERIOD,
            daemon: None,
            runtime_dir: None,
            job_name: None,
            checkpoint_dir: None,
            executable: None,
            hosts: BTreeMap::new(),
        }
    }
}

impl Config {
    /// The defaults overridden by the environment (the variables in [`VARIABLES`]; see the
    /// crate documentation for each). Fails on the first value that does not parse, or is
    /// not valid UTF-8, naming the variable.
    pub fn from_env() -> Result<Config, PcmError> {
        let mut values = BTreeMap::new();
        for &variable in VARIABLES {
            match std::env::var(variable) {
                Ok(value) => {
                    values.insert(variable, value);
                }
                Err(std::env::VarError::NotPresent) => {}
                Err(std::env::VarError::NotUnicode(value)) => {
                    return Err(PcmError::Config {
                        variable,
                        value: value.to_string_lossy().into_owned(),
                        reason: "not valid UTF-8".into(),
                    })
                }
            }
        }
        Config::from_values(&values)
    }

    /// The defaults overridden by `values` (variable name to value), as if they were the
    /// environment: for tests and for programs that keep their settings elsewhere.
    pub fn from_values(values: &BTreeMap<&str, String>) -> Result<Config, PcmError> {
        let get = |variable: &str| values.get(variable).cloned();
        let mut config = Config::default();
        if let Some(text) = get(SCHEDULE_ENV) {
            config.schedule = Schedule::parse(&text)?;
        }
        if let Some(text) = get(CHECK_PERIOD_ENV) {
            config.check_period = schedule::parse_check_period(text)?;
        }
        if let Some(text) = get(CHECKPOINT_INTERVAL_ENV) {
            config.checkpoint = Policy::parse(text, get(BEFORE_MOVE_ENV))?;
        }
        if let Some(text) = get(RESTART_ENV) {
            config.restart = parse_restart(text)?;
        }
        if let Some(text) = get(RECONFIGURE_TIMEOUT_ENV) {
            config.reconfigure_timeout = parse_reconfigure_timeout(text)?;
        }
        if let Some(text) = get(PROFILE_ENV) {
            config.profiling = profile::parse_enabled(text)?;
        }
        config.events.stderr = get(pcm_proto::run::EVENTS_ENV).is_some_and(|v| v == "stderr");
        if let Some(text) = get(pcm_proto::run::EVENTS_FILE_ENV) {
            match text.trim() {
                "stderr" => config.events.stderr = true,
                "" | "off" => {}
                path => config.events.file = Some(path.into()),
            }
        }
        if let Some(text) = get(pcm_proto::run::PROGRESS_PERIOD_ENV) {
            config.progress_period = text
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .ok_or_else(|| PcmError::Config {
                    variable: pcm_proto::run::PROGRESS_PERIOD_ENV,
                    value: text.clone(),
                    reason: "expected a positive number of seconds, e.g. 1 or 0.05".into(),
                })?;
        }
        config.daemon = get(pcm_proto::DAEMON_ENV);
        config.runtime_dir = get("XDG_RUNTIME_DIR");
        config.job_name = get(JOB_NAME_ENV);
        if let Some(text) = get(EXECUTABLE_ENV) {
            config.executable = Some(parse_executable(text)?);
        }
        // Checked by `validate`: an absolute path, or the error (never another directory).
        config.checkpoint_dir = get(CHECKPOINT_DIR_ENV).map(PathBuf::from);
        for variable in HOST_VARIABLES {
            if let Some(value) = get(variable) {
                config.hosts.insert(variable, value);
            }
        }
        config.validate()
    }

    /// Wall time between two status checks that agree with the other ranks (`PCM_CHECK_PERIOD_MS`;
    /// default [`crate::DEFAULT_CHECK_PERIOD`], 100 ms).
    pub fn with_check_period(mut self, period: Duration) -> Self {
        self.check_period = period;
        self
    }

    /// Scripted reconfigurations, `ITER:RANK[@HOST][+RANK[@HOST]...][,...]` (`PCM_SCHEDULE`;
    /// default none).
    pub fn with_schedule(mut self, schedule: &str) -> Result<Self, PcmError> {
        self.schedule = Schedule::parse(schedule)?;
        Ok(self)
    }

    /// Time between coordinated checkpoints (`PCM_CHECKPOINT_INTERVAL`; default `None`: no
    /// checkpoints). A checkpoint is also taken right before each move (see
    /// `PCM_CHECKPOINT_BEFORE_MOVE`).
    pub fn with_checkpoint_interval(mut self, interval: Option<Duration>) -> Self {
        self.checkpoint = Policy::with_interval(interval);
        self
    }

    /// The job's own checkpoint directory (`PCM_CHECKPOINT_DIR`, an absolute path; default
    /// `None`: the node's pcmd keeps the checkpoints in its `--checkpoint-dir`). Each node's
    /// pcmd then keeps this job's pieces and manifests there, creating it (mode 0700) if
    /// it is missing, or refuses it (another user's, writable by others) and the
    /// checkpoint is not written. A directory every host sees (a shared home directory)
    /// lets a rank relaunched on another host find its piece.
    pub fn with_checkpoint_dir(mut self, dir: Option<&Path>) -> Self {
        self.checkpoint_dir = dir.map(Path::to_path_buf);
        self
    }

    /// How long one reconfiguration may take before the job is ended
    /// (`PCM_RECONFIGURE_TIMEOUT`; default [`DEFAULT_RECONFIGURE_TIMEOUT`], 60 s).
    pub fn with_reconfigure_timeout(mut self, timeout: Duration) -> Self {
        self.reconfigure_timeout = timeout;
        self
    }

    /// Whether MPI traffic is profiled for pcmd (`PCM_PROFILE`; default on).
    pub fn with_profiling(mut self, on: bool) -> Self {
        self.profiling = on;
        self
    }

    /// The node's pcmd socket (`PCM_DAEMON`; `{host}` is replaced by the host name; default
    /// `$XDG_RUNTIME_DIR/pcmd/{host}.sock` or `/tmp/pcmd-{uid}/{host}.sock`), or `None`: no
    /// daemon link (`PCM_DAEMON=none`).
    pub fn with_daemon(mut self, socket: Option<&str>) -> Self {
        self.daemon = Some(socket.unwrap_or("none").to_owned());
        self
    }

    /// Events as JSON lines appended to `path` (`PCM_EVENTS=/absolute/path`; default none),
    /// or no event file (`None`). The path must be absolute: ranks may start in different
    /// directories. See [`crate::events`].
    pub fn with_events_file(mut self, path: Option<&std::path::Path>) -> Self {
        self.events.file = path.map(std::path::Path::to_path_buf);
        self
    }

    /// Least time between two progress events (`PCM_PROGRESS_PERIOD`, seconds; default
    /// [`DEFAULT_PROGRESS_PERIOD`], 1 s). At least 1 ms.
    pub fn with_progress_period(mut self, period: Duration) -> Self {
        self.progress_period = period;
        self
    }

    /// Checks the settings together; the error names the variable of the first bad one.
    pub fn validate(self) -> Result<Self, PcmError> {
        if self.check_period.is_zero() {
            return Err(PcmError::Config {
                variable: CHECK_PERIOD_ENV,
                value: "0".into(),
                reason: "the check period must be at least 1 ms".into(),
            });
        }
        if self.reconfigure_timeout.is_zero() {
            return Err(PcmError::Config {
                variable: RECONFIGURE_TIMEOUT_ENV,
                value: "0".into(),
                reason: "the timeout must be positive".into(),
            });
        }
        if self.checkpoint.interval_is_zero() {
            return Err(PcmError::Config {
                variable: CHECKPOINT_INTERVAL_ENV,
                value: "0".into(),
                reason: "the interval must be positive (None turns checkpoints off)".into(),
            });
        }
        if self.progress_period < Duration::from_millis(1) {
            return Err(PcmError::Config {
                variable: pcm_proto::run::PROGRESS_PERIOD_ENV,
                value: format!("{}", self.progress_period.as_secs_f64()),
                reason: "the progress period must be at least 1 ms (0.001)".into(),
            });
        }
        if let Some(dir) = &self.checkpoint_dir {
            let problem = if !dir.is_absolute() {
                Some("expected an absolute path (ranks and pcmds start in different directories); unset it to keep the checkpoints in each pcmd's own --checkpoint-dir")
            } else if dir.to_str().is_none() {
                Some("not valid UTF-8")
            } else {
                None
            };
            if let Some(reason) = problem {
                return Err(PcmError::Config {
                    variable: CHECKPOINT_DIR_ENV,
                    value: dir.display().to_string(),
                    reason: reason.into(),
                });
            }
        }
        if let Some(path) = self.events.file.as_ref().filter(|p| !p.is_absolute()) {
            return Err(PcmError::Config {
                variable: pcm_proto::run::EVENTS_FILE_ENV,
                value: path.display().to_string(),
                reason: "expected stderr, off or an absolute path (ranks may start in \
                         different directories)"
                    .into(),
            });
        }
        Ok(self)
    }

    /// Whether the daemon link is off (`PCM_DAEMON=none`).
    pub(crate) fn daemon_off(&self) -> bool {
        self.daemon.as_deref() == Some("none")
    }

    /// A host setting as given, for rank 0.
    pub(crate) fn host_setting(&self, variable: &str) -> Option<String> {
        self.hosts
            .get(variable)
            .filter(|s| !s.trim().is_empty())
            .cloned()
    }
}

/// What `PCM_RESTART` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    /// Unset or `0`: start from the beginning.
    No,
    /// `1`: resume from the newest checkpoint of this computation; start from the beginning
    /// (with a warning) when there is none.
    IfAny,
    /// `require`: resume, or fail when there is nothing to resume (for batch scripts).
    Require,
    /// `force`: resume from the newest checkpoint of the series even if another computation
    /// wrote it or its job finished.
    Force,
}

/// Parses a `PCM_RESTART` value.
pub(crate) fn parse_restart(v: String) -> Result<Restart, PcmError> {
    match v.trim() {
        "1" | "yes" | "true" => Ok(Restart::IfAny),
        "require" => Ok(Restart::Require),
        "force" => Ok(Restart::Force),
        "" | "0" | "no" | "false" => Ok(Restart::No),
        _ => Err(PcmError::Config {
            variable: RESTART_ENV,
            value: v,
            reason: "expected 1 (resume from the newest checkpoint if there is one), \
                     require (resume or fail), force (resume even another computation's \
                     or a finished job's checkpoint) or 0"
                .into(),
        }),
    }
}

/// Parses a [`RECONFIGURE_TIMEOUT_ENV`] value.
pub(crate) fn parse_reconfigure_timeout(text: String) -> Result<Duration, PcmError> {
    parse_timeout(&text).ok_or_else(|| PcmError::Config {
        variable: RECONFIGURE_TIMEOUT_ENV,
        value: text.clone(),
        reason: "expected a positive number of seconds, e.g. 60 or 2.5".into(),
    })
}

/// Parses an [`EXECUTABLE_ENV`] value: an absolute path to an executable file (checked now,
/// so that a wrong one is named at init, not when the first move fails to start).
fn parse_executable(text: String) -> Result<PathBuf, PcmError> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = PathBuf::from(&text);
    let reason = if !path.is_absolute() {
        "expected the absolute path of the executable replacements start with"
    } else {
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                return Ok(path)
            }
            Ok(_) => "not an executable file",
            Err(_) => "no such file",
        }
    };
    Err(PcmError::Config {
        variable: EXECUTABLE_ENV,
        value: text,
        reason: reason.into(),
    })
}

fn parse_timeout(text: &str) -> Option<Duration> {
    text.trim()
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .filter(|d| !d.is_zero())
}

/// A setting rank 0 read for every rank, and what is wrong with it, as it crosses the
/// broadcast (a [`PcmError`] is not serialisable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum SettingError {
    /// [`PcmError::Config`].
    Config {
        variable: String,
        value: String,
        reason: String,
    },
    /// Any other error, as its message.
    Other(String),
}

impl From<PcmError> for SettingError {
    fn from(e: PcmError) -> Self {
        match e {
            PcmError::Config {
                variable,
                value,
                reason,
            } => SettingError::Config {
                variable: variable.to_owned(),
                value,
                reason,
            },
            other => SettingError::Other(other.to_string()),
        }
    }
}

impl SettingError {
    /// The error every rank returns.
    pub(crate) fn into_error(self) -> PcmError {
        match self {
            SettingError::Config {
                variable,
                value,
                reason,
            } => PcmError::Config {
                variable: variables::setting_name(&variable),
                value,
                reason,
            },
            SettingError::Other(reason) => PcmError::Config {
                variable: "the host settings",
                value: String::new(),
                reason,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&'static str, &str)]) -> Result<Config, PcmError> {
        let values: BTreeMap<&str, String> =
            pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        Config::from_values(&values)
    }

    /// A replacement's executable from PCM_EXECUTABLE: absolute and executable, or an error
    /// naming the variable and the value.
    #[test]
    fn given_pcm_executable_then_an_absolute_executable_is_taken_and_anything_else_named() {
        let taken = config(&[(EXECUTABLE_ENV, "/bin/sh")]).unwrap();
        assert_eq!(taken.executable, Some(PathBuf::from("/bin/sh")));
        assert_eq!(config(&[]).unwrap().executable, None);
        let not_executable =
            std::env::temp_dir().join(format!("pcm-not-executable-{}", std::process::id()));
        std::fs::write(&not_executable, "").unwrap();
        let not_executable_text = not_executable.display().to_string();
        for bad in ["sh", "/nonexistent/python3", &not_executable_text, "/"] {
            let error = config(&[(EXECUTABLE_ENV, bad)]).unwrap_err().to_string();
            assert!(
                error.contains(EXECUTABLE_ENV) && error.contains(bad),
                "{bad}: {error}"
            );
        }
        std::fs::remove_file(&not_executable).unwrap();
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
        let bytes = crate::wire::encode_cbor(&sent);
        let received: Result<(), SettingError> = ciborium::from_reader(bytes.as_slice()).unwrap();
        let message = received.unwrap_err().into_error().to_string();
        assert_eq!(message, expected);
        assert_eq!(
            message,
            "invalid PCM_HOSTFILE=\"/nonexistent/hosts\": cannot read the hostfile: No such file or directory (os error 2)"
        );
    }
    #[test]
    fn timeout_accepts_positive_seconds_and_refuses_the_rest() {
        assert_eq!(parse_timeout("60"), Some(Duration::from_secs(60)));
        assert_eq!(parse_timeout(" 2.5 "), Some(Duration::from_millis(2500)));
        for bad in ["0", "-1", "", "soon", "NaN", "inf", "1e400"] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn given_nothing_then_the_defaults() {
        let c = config(&[]).unwrap();
        assert_eq!(c.check_period, schedule::DEFAULT_CHECK_PERIOD);
        assert_eq!(c.reconfigure_timeout, DEFAULT_RECONFIGURE_TIMEOUT);
        assert!(c.profiling && c.events == EventSinks::default() && !c.checkpoint.enabled());
        assert_eq!(c.progress_period, DEFAULT_PROGRESS_PERIOD);
        assert_eq!(c.restart, Restart::No);
        assert!(!c.daemon_off());
        assert_eq!(c.checkpoint_dir, None);
    }

    #[test]
    fn given_variables_then_they_override_and_code_overrides_them() {
        let c = config(&[
            ("PCM_CHECK_PERIOD_MS", "5"),
            ("PCM_PROFILE", "off"),
            ("PCM_CHECKPOINT_INTERVAL", "0.5"),
            ("PCM_RESTART", "1"),
            ("PCM_DAEMON", "none"),
            ("PCM_SCHEDULE", "10:1"),
            ("PCM_EVENTS", "/tmp/job/events.jsonl"),
            ("PCM_PROGRESS_PERIOD", "0.05"),
            ("PCM_CHECKPOINT_DIR", "/home/me/job/checkpoints"),
        ])
        .unwrap();
        assert_eq!(
            c.checkpoint_dir.as_deref(),
            Some(Path::new("/home/me/job/checkpoints"))
        );
        assert_eq!(
            c.events,
            EventSinks {
                stderr: false,
                file: Some("/tmp/job/events.jsonl".into())
            }
        );
        assert_eq!(c.progress_period, Duration::from_millis(50));
        for (variables, stderr) in [
            (&[("PCMRUN_EVENTS", "stderr")][..], true),
            (&[("PCM_EVENTS", "stderr")][..], true),
            (
                &[("PCM_EVENTS", "off"), ("PCMRUN_EVENTS", "stderr")][..],
                true,
            ),
            (&[("PCM_EVENTS", "off")][..], false),
        ] {
            let e = config(variables).unwrap().events;
            assert_eq!((e.stderr, e.file), (stderr, None), "{variables:?}");
        }
        assert_eq!(c.check_period, Duration::from_millis(5));
        assert!(!c.profiling && c.checkpoint.enabled() && c.daemon_off());
        assert_eq!(c.restart, Restart::IfAny);
        assert!(c.schedule.has(10));
        let c = c
            .with_check_period(Duration::from_millis(7))
            .with_profiling(true)
            .with_checkpoint_interval(None)
            .validate()
            .unwrap();
        assert_eq!(c.check_period, Duration::from_millis(7));
        assert!(c.profiling && !c.checkpoint.enabled());
    }

    #[test]
    fn given_bad_values_then_the_error_names_the_variable() {
        for (variable, value) in [
            ("PCM_CHECK_PERIOD_MS", "0"),
            ("PCM_PROFILE", "sometimes"),
            ("PCM_CHECKPOINT_INTERVAL", "soon"),
            ("PCM_RESTART", "maybe"),
            ("PCM_RECONFIGURE_TIMEOUT", "-1"),
            ("PCM_SCHEDULE", "x:y"),
            ("PCM_EVENTS", "events.jsonl"),
            ("PCM_PROGRESS_PERIOD", "soon"),
            ("PCM_PROGRESS_PERIOD", "0"),
            ("PCM_PROGRESS_PERIOD", "-1"),
            ("PCM_CHECKPOINT_DIR", "checkpoints"),
            ("PCM_CHECKPOINT_DIR", "./job/checkpoints"),
            ("PCM_CHECKPOINT_DIR", ""),
        ] {
            let e = config(&[(variable, value)]).unwrap_err().to_string();
            assert!(e.contains(variable) && e.contains(value), "{e}");
        }
        let e = Config::default()
            .with_check_period(Duration::ZERO)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("PCM_CHECK_PERIOD_MS"), "{e}");
        let e = config(&[("PCM_CHECKPOINT_DIR", "")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("PCM_CHECKPOINT_DIR=\"\"") && e.contains("absolute path"),
            "{e}"
        );
        let e = Config::default()
            .with_checkpoint_dir(Some(Path::new("rel")))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("PCM_CHECKPOINT_DIR=\"rel\""), "{e}");
    }
}
