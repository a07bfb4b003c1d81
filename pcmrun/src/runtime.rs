//! The MPI runtimes PCM jobs run on, and what each needs on its launcher's command line.
//!
//! The settings the README used to ask users to export by hand live here, once, for
//! `pcmrun` and for the test harness alike.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Open MPI settings every PCM job needs: allow spawning beyond the slots (a replacement
/// needs one), stop co-located ranks from burning each other's CPU while they wait, and
/// keep to transports that connect a spawned process.
pub const OMPI_ENV: &[(&str, &str)] = &[
    ("OMPI_MCA_rmaps_base_oversubscribe", "1"),
    ("OMPI_MCA_mpi_yield_when_idle", "1"),
    ("OMPI_MCA_btl", "self,vader,tcp"),
];

/// What Open MPI needs to run as root (in containers and CI), added only for root.
pub const OMPI_ROOT_ENV: &[(&str, &str)] = &[
    ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
    ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
];

/// MPICH settings every PCM job needs: a departed process finalizes alone (PCM sets it too),
/// and UCX logs only errors, on stderr: by default it writes to stdout, where its lines would
/// follow the application's output. It has one error to log in a job whose launch lost a
/// member to a move (the flush of that member's endpoint at `MPI_Finalize`, which PCM
/// forgives), and reads its log settings when it is loaded, before PCM could set them.
pub const MPICH_ENV: &[(&str, &str)] = &[
    ("MPIR_CVAR_NO_COLLECTIVE_FINALIZE", "1"),
    ("UCX_LOG_LEVEL", "error"),
    ("UCX_LOG_FILE", "stderr"),
];

/// MPICH settings a PCM job gets unless the user's environment sets them: UCX's memory
/// hooks off. UCX installs them when it is loaded, before `main`: about 40 ms of every
/// process start here (a replacement's spawn 80-100 -> 35-60 ms), for the registration
/// caches of RDMA transports, which a user on InfiniBand keeps by setting
/// `UCX_MEM_EVENTS=yes`. Hydra gives a replacement the launcher's environment, so the
/// setting goes there (docs/benchmarks.md, "Towards a 50 ms move").
pub const MPICH_DEFAULT_ENV: &[(&str, &str)] = &[pcm_proto::run::UCX_MEM_EVENTS_OFF];

/// An MPI runtime the project builds and runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// Open MPI 4 from Debian: `mpirun`.
    OpenMpi,
    /// MPICH (the project's default): hydra's `mpiexec`.
    Mpich,
}

/// Why the runtime of a launcher could not be told.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// The launcher did not run.
    #[error("cannot run the MPI launcher {launcher}: {source} (source scripts/setup.sh, or name the launcher with --launcher)")]
    NotRunnable {
        /// The launcher tried.
        launcher: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It ran but is neither Open MPI's nor MPICH's.
    #[error("{launcher} --version names neither Open MPI nor MPICH's hydra: {output:?}")]
    Unknown {
        /// The launcher tried.
        launcher: PathBuf,
        /// The start of what it printed.
        output: String,
    },
}

impl Runtime {
    /// Whether a launch of this runtime carries on, and can end, after one of its hosts
    /// is lost once no process of it runs there any more. Hydra's proxy on a host ends
    /// when its processes have left it (a rank moved away), so MPICH's launch loses
    /// nothing; Open MPI 4's `mpirun` keeps a daemon on every host of the launch, and a
    /// launch that lost one computes on but never ends (seen: the ranks ran to their last
    /// iteration, then `mpirun` waited on the lost host's daemon until stopped).
    pub fn lets_a_left_host_go(self) -> bool {
        matches!(self, Runtime::Mpich)
    }

    /// The runtime of `launcher`, from what `launcher --version` prints.
    pub fn detect(launcher: &Path) -> Result<Runtime, DetectError> {
        let output = Command::new(launcher)
            .arg("--version")
            .output()
            .map_err(|source| DetectError::NotRunnable {
                launcher: launcher.to_owned(),
                source,
            })?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Self::from_version_text(&text).ok_or_else(|| DetectError::Unknown {
            launcher: launcher.to_owned(),
            output: text.chars().take(200).collect(),
        })
    }

    /// The runtime a launcher's `--version` text names.
    pub fn from_version_text(text: &str) -> Option<Runtime> {
        if text.contains("HYDRA") {
            Some(Runtime::Mpich)
        } else if text.contains("Open MPI") || text.contains("OpenRTE") {
            Some(Runtime::OpenMpi)
        } else {
            None
        }
    }

    /// The settings every PCM job needs on this runtime, for a user who is root or not.
    pub fn job_env(self, root: bool) -> Vec<(&'static str, &'static str)> {
        match self {
            Runtime::OpenMpi if root => [OMPI_ENV, OMPI_ROOT_ENV].concat(),
            Runtime::OpenMpi => OMPI_ENV.to_vec(),
            Runtime::Mpich => MPICH_ENV.to_vec(),
        }
    }

    /// Settings a PCM job gets on this runtime unless the user's environment sets them.
    pub fn default_env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Runtime::OpenMpi => &[],
            Runtime::Mpich => MPICH_DEFAULT_ENV,
        }
    }

    /// Launcher arguments that run `ranks` processes.
    pub fn ranks_args(self, ranks: usize) -> [String; 2] {
        let flag = match self {
            Runtime::OpenMpi => "-np",
            Runtime::Mpich => "-n",
        };
        [flag.to_owned(), ranks.to_string()]
    }

    /// Launcher arguments that place the ranks on the hosts of `hostfile`.
    pub fn hostfile_args(self, hostfile: &Path) -> [OsString; 2] {
        let flag = match self {
            Runtime::OpenMpi => "--hostfile",
            Runtime::Mpich => "-f",
        };
        [flag.into(), hostfile.as_os_str().to_owned()]
    }

    /// One line of a hostfile in the runtime's form: `host:slots` (hydra) or
    /// `host slots=N` (Open MPI).
    pub fn hostfile_line(self, host: &str, slots: u32) -> String {
        match self {
            Runtime::OpenMpi => format!("{host} slots={slots}"),
            Runtime::Mpich => format!("{host}:{slots}"),
        }
    }

    /// Launcher arguments that pass `key=value` to the ranks of one program of an MPMD
    /// launch (`A : B`) only.
    pub fn local_env_args(self, key: &str, value: &str) -> Vec<String> {
        match self {
            Runtime::OpenMpi => vec!["-x".into(), format!("{key}={value}")],
            Runtime::Mpich => vec!["-env".into(), key.into(), value.into()],
        }
    }

    /// The launcher's per-host daemon, which starts the ranks there: Open MPI's `orted`,
    /// hydra's `hydra_pmi_proxy`.
    pub fn node_daemon(self) -> &'static str {
        match self {
            Runtime::OpenMpi => "orted",
            Runtime::Mpich => "hydra_pmi_proxy",
        }
    }

    /// Launcher arguments that pass `key=value` to every rank (replacements included). For
    /// Open MPI (`-x key`) the launcher's own environment must hold the value too.
    pub fn env_args(self, key: &str, value: &str) -> Vec<String> {
        match self {
            Runtime::OpenMpi => vec!["-x".into(), key.into()],
            Runtime::Mpich => vec!["-genv".into(), key.into(), value.into()],
        }
    }
}

/// One launch of a program: the launcher command line with the runtime's settings.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The runtime of `launcher`.
    pub runtime: Runtime,
    /// `mpirun` or `mpiexec`, by name (searched on PATH) or path.
    pub launcher: PathBuf,
    /// Number of ranks.
    pub ranks: usize,
    /// Where the ranks may run (`None`: the launcher's default, this host).
    pub hostfile: Option<PathBuf>,
    /// Environment for every rank, replacements included.
    pub env: BTreeMap<String, String>,
    /// Extra launcher options, placed before the program.
    pub options: Vec<OsString>,
    /// The program and its arguments.
    pub program: Vec<OsString>,
}

impl Launch {
    /// Whether the settings for root are needed (the effective user is root).
    fn as_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// The launcher's environment additions: the runtime's settings, then [`Launch::env`].
    pub fn launcher_env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self
            .runtime
            .job_env(Self::as_root())
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        // Set for the launcher too: hydra passes its own environment on, and Open MPI's
        // `-x` takes the values from there.
        env.extend(self.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }

    /// The launcher's arguments.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = self
            .runtime
            .ranks_args(self.ranks)
            .into_iter()
            .map(OsString::from)
            .collect();
        if let Some(hostfile) = &self.hostfile {
            args.extend(self.runtime.hostfile_args(hostfile));
        }
        for (k, v) in &self.env {
            args.extend(self.runtime.env_args(k, v).into_iter().map(OsString::from));
        }
        args.extend(self.options.iter().cloned());
        args.extend(self.program.iter().cloned());
        args
    }

    /// The command that starts the launch (not yet spawned).
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.launcher);
        command.envs(self.launcher_env()).args(self.args());
        command
    }

    /// The launch as a shell command line, for `--dry-run` and logs.
    pub fn shell_line(&self) -> String {
        let env = self
            .launcher_env()
            .into_iter()
            .map(|(k, v)| format!("{k}={}", quote(&v)));
        let args = std::iter::once(self.launcher.as_os_str().to_owned())
            .chain(self.args())
            .map(|a| quote(&a.to_string_lossy()));
        env.chain(args).collect::<Vec<_>>().join(" ")
    }
}

/// `text` quoted for a POSIX shell when it needs it.
fn quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%{}".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// A process the launcher reports as the one whose failure ended the job: hydra's "BAD
/// TERMINATION" block (`=   PID 4711 RUNNING AT node-c`), Open MPI's "mpirun noticed that
/// process rank 1 with PID 4711 on node node-c exited on signal 9 (Killed)." For the hosts
/// whose processes pcmrun cannot watch itself (other hosts), it tells the process lost from
/// those the launcher then stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherNamedFailure {
    /// The host it ran on.
    pub host: String,
    /// Its process id, when the launcher gives it (Open MPI 4 may print 0).
    pub pid: Option<u32>,
    /// Its rank in the launch (Open MPI only).
    pub rank: Option<u32>,
    /// How it ended, when the same line says (Open MPI; hydra says it on the next line:
    /// [`LauncherReportedEnd::hydra_exit_code_in`]).
    pub ended: Option<LauncherReportedEnd>,
}

/// How the launcher says the process it named ended: the code hydra prints (`=   EXIT
/// CODE: 11`: the signal's number for a process a signal ended, as 9 for SIGKILL and 11
/// for SIGSEGV, else its exit status), or Open MPI's signal (`exited on signal 9`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LauncherReportedEnd {
    /// hydra's `EXIT CODE`.
    ExitCode(i32),
    /// Open MPI's `exited on signal N`.
    Signal(i32),
}

impl LauncherReportedEnd {
    /// hydra's code in the line after the one naming the process (`=   EXIT CODE: 11`).
    pub fn hydra_exit_code_in(line: &str) -> Option<LauncherReportedEnd> {
        let code = line.trim().strip_prefix("=   EXIT CODE:")?;
        code.trim().parse().ok().map(LauncherReportedEnd::ExitCode)
    }
}

impl std::fmt::Display for LauncherReportedEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LauncherReportedEnd::ExitCode(code) => write!(f, "exit code {code}"),
            LauncherReportedEnd::Signal(signal) => write!(f, "signal {signal}"),
        }
    }
}

impl LauncherNamedFailure {
    /// The failure `line` of the launcher's output names, if it names one.
    pub fn find_in(line: &str) -> Option<LauncherNamedFailure> {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("=   PID ") {
            // hydra: `=   PID 4711 RUNNING AT node-c`
            let (pid, host) = rest.split_once(" RUNNING AT ")?;
            return Some(LauncherNamedFailure {
                host: host.trim().to_owned(),
                pid: pid.trim().parse().ok().filter(|&p| p != 0),
                rank: None,
                ended: None,
            });
        }
        // Open MPI: `... noticed that process rank 1 with PID 4711 on node node-c exited on
        // signal 9 (Killed).`
        let rest = line.split_once("noticed that process rank ")?.1;
        let (rank, rest) = rest.split_once(" with PID ")?;
        let (pid, rest) = rest.split_once(" on node ")?;
        let host = rest.split_whitespace().next()?;
        let signal = rest
            .split_once(" exited on signal ")
            .and_then(|(_, s)| s.split_whitespace().next()?.parse().ok());
        Some(LauncherNamedFailure {
            host: host.to_owned(),
            pid: pid.trim().parse().ok().filter(|&p| p != 0),
            rank: rank.trim().parse().ok(),
            ended: signal.map(LauncherReportedEnd::Signal),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_version_texts_then_the_runtime_is_told() {
        let hydra = "HYDRA build details:\n    Version:  5.0.2\n";
        let ompi =
            "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n";
        assert_eq!(Runtime::from_version_text(hydra), Some(Runtime::Mpich));
        assert_eq!(Runtime::from_version_text(ompi), Some(Runtime::OpenMpi));
        assert_eq!(Runtime::from_version_text("Intel(R) MPI Library"), None);
    }

    #[test]
    fn given_a_launch_then_each_runtime_gets_its_own_flags() {
        let mut launch = Launch {
            runtime: Runtime::Mpich,
            launcher: "mpiexec".into(),
            ranks: 4,
            hostfile: Some("/tmp/hosts".into()),
            env: BTreeMap::from([("PCM_RESTART".to_owned(), "require".to_owned())]),
            options: vec![],
            program: vec!["heat2d".into(), "--rows".into(), "it's".into()],
        };
        assert_eq!(
            launch.shell_line(),
            "MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1 UCX_LOG_LEVEL=error UCX_LOG_FILE=stderr \
             PCM_RESTART=require \
             mpiexec -n 4 -f /tmp/hosts -genv PCM_RESTART require heat2d --rows 'it'\\''s'"
        );
        launch.runtime = Runtime::OpenMpi;
        let line = launch.shell_line();
        assert!(
            line.contains("OMPI_MCA_rmaps_base_oversubscribe=1")
                && line.contains("mpiexec -np 4 --hostfile /tmp/hosts -x PCM_RESTART heat2d"),
            "{line}"
        );
        assert_eq!(line.contains("OMPI_ALLOW_RUN_AS_ROOT=1"), Launch::as_root());
    }

    #[test]
    fn given_the_launchers_failure_reports_then_the_process_they_name_is_found() {
        assert_eq!(
            LauncherNamedFailure::find_in("=   PID 4711 RUNNING AT node-c\n"),
            Some(LauncherNamedFailure {
                host: "node-c".into(),
                pid: Some(4711),
                rank: None,
                ended: None,
            })
        );
        assert_eq!(
            LauncherReportedEnd::hydra_exit_code_in("=   EXIT CODE: 11\n"),
            Some(LauncherReportedEnd::ExitCode(11))
        );
        for other in [
            "=   EXIT CODE: x",
            "=   PID 4711 RUNNING AT node-c",
            "EXIT CODE: 9",
        ] {
            assert_eq!(
                LauncherReportedEnd::hydra_exit_code_in(other),
                None,
                "{other:?}"
            );
        }
        assert_eq!(
            LauncherNamedFailure::find_in(
                "mpirun noticed that process rank 1 with PID 0 on node node-c exited on signal 9 (Killed)."
            ),
            Some(LauncherNamedFailure {
                host: "node-c".into(),
                pid: None,
                rank: Some(1),
                ended: Some(LauncherReportedEnd::Signal(9)),
            })
        );
        assert_eq!(
            LauncherNamedFailure::find_in(
                "mpirun noticed that process rank 0 with PID 12 on node a exited on signal 11 (Segmentation fault)."
            )
            .and_then(|n| n.ended)
            .map(|e| e.to_string()),
            Some("signal 11".to_owned())
        );
        for other in [
            "=   EXIT CODE: 9",
            "=   PID RUNNING AT",
            "{\"checksum\": \"PID 3 RUNNING AT x\"}",
            "process rank 1 with PID",
            "",
        ] {
            assert_eq!(LauncherNamedFailure::find_in(other), None, "{other:?}");
        }
    }
}
