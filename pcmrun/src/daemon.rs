//! The pcmd a job's ranks talk to: the one already running for this user on this host, or
//! one `pcmrun` starts for the job (and stops at the end) in a private directory.

use std::fs::File;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use pcm_proto::HostName;

/// How long a pcmd that pcmrun starts may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Which pcmd the ranks use.
#[derive(Debug)]
pub enum Daemon {
    /// None: `PCM_DAEMON=none` (no checkpoints, no recovery).
    Off,
    /// One that runs already: the ranks find it at this `PCM_DAEMON` value, or at the
    /// default place when `None`.
    Running(Option<String>),
    /// One pcmrun started; stopped on drop.
    Started(StartedDaemon),
}

/// A pcmd started for the job.
#[derive(Debug)]
pub struct StartedDaemon {
    child: Child,
    /// The `PCM_DAEMON` value that makes ranks find it (`DIR/{host}.sock`).
    pub daemon_env: String,
    /// Its log.
    pub log: PathBuf,
    /// Private directory holding the socket and the log; removed on drop.
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// The value of `PCM_DAEMON` for the ranks, if one must be set.
    pub fn env_value(&self) -> Option<&str> {
        match self {
            Daemon::Off => Some("none"),
            Daemon::Running(value) => value.as_deref(),
            Daemon::Started(started) => Some(&started.daemon_env),
        }
    }

    /// Whether checkpoints can be kept.
    pub fn keeps_checkpoints(&self) -> bool {
        !matches!(self, Daemon::Off)
    }
}

/// This host's name, as PCM and pcmd use it.
pub fn local_host() -> anyhow::Result<HostName> {
    let name = nix::unistd::gethostname()
        .context("cannot read the host name")?
        .into_string()
        .map_err(|n| anyhow::anyhow!("the host name {n:?} is not UTF-8"))?;
    HostName::new(name.as_str()).with_context(|| format!("the host name {name:?}"))
}

/// The socket of this user's pcmd on `host` for the `PCM_DAEMON` value `setting` (unset:
/// the default place).
pub fn socket_for(setting: Option<&str>, host: &HostName) -> PathBuf {
    let runtime_dir = std::env::var("XDG_RUNTIME_DIR").ok();
    let uid = nix::unistd::getuid().as_raw();
    pcm_proto::socket_path(setting, runtime_dir.as_deref(), uid, host)
}

/// Whether something accepts connections on `socket`.
pub fn answers(socket: &Path) -> bool {
    UnixStream::connect(socket).is_ok()
}

/// Resolves `--daemon`: `none`, `start`, `auto` or a socket path template. `dry_run`
/// reports what would be started without starting it.
pub fn choose(
    choice: &str,
    pcmd: &Path,
    checkpoint_dir: Option<&Path>,
    dry_run: bool,
) -> anyhow::Result<Daemon> {
    let host = local_host()?;
    let inherited = std::env::var(pcm_proto::DAEMON_ENV).ok();
    match choice {
        "none" => Ok(Daemon::Off),
        "auto" if inherited.as_deref() == Some("none") => Ok(Daemon::Off),
        "auto" if answers(&socket_for(inherited.as_deref(), &host)) => {
            Ok(Daemon::Running(inherited))
        }
        "auto" | "start" if dry_run => {
            Ok(Daemon::Running(Some("<a pcmd pcmrun would start>".into())))
        }
        "auto" | "start" => Ok(Daemon::Started(start(pcmd, checkpoint_dir, &host)?)),
        path => {
            let socket = socket_for(Some(path), &host);
            if !dry_run && !answers(&socket) {
                bail!(
                    "--daemon {path}: no pcmd answers at {} (start one with `pcmd --socket {} serve`, or use --daemon auto)",
                    socket.display(),
                    socket.display()
                );
            }
            Ok(Daemon::Running(Some(path.to_owned())))
        }
    }
}

/// Starts `pcmd serve` in a new private directory and waits until it answers.
fn start(
    pcmd: &Path,
    checkpoint_dir: Option<&Path>,
    host: &HostName,
) -> anyhow::Result<StartedDaemon> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    // tempfile creates it with mode 0700 under a random name: nobody else can plant files.
    let dir = tempfile::Builder::new()
        .prefix("pcmrun-")
        .tempdir_in(&base)
        .with_context(|| format!("cannot create a private directory in {}", base.display()))?;
    let daemon_env = dir.path().join("{host}.sock").display().to_string();
    let socket = socket_for(Some(&daemon_env), host);
    let log = dir.path().join("pcmd.log");
    let log_file =
        File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    let mut command = Command::new(pcmd);
    command.arg("--socket").arg(&socket).arg("serve");
    if let Some(checkpoint_dir) = checkpoint_dir {
        command.arg("--checkpoint-dir").arg(checkpoint_dir);
    }
    command
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        // Its own process group: Ctrl-C at the terminal reaches pcmrun, which stops the
        // job first and the daemon last.
        .process_group(0);
    crate::end_with_parent(&mut command);
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start {}", pcmd.display()))?;
    let deadline = Instant::now() + START_TIMEOUT;
    while !answers(&socket) {
        if let Some(status) = child.try_wait()? {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            bail!("pcmd ended at start ({status}):\n{text}");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "pcmd did not answer at {} within {START_TIMEOUT:?} (log: {})",
                socket.display(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(StartedDaemon {
        child,
        daemon_env,
        log,
        _dir: dir,
    })
}

impl Drop for StartedDaemon {
    fn drop(&mut self) {
        // SIGTERM: it finishes writing what it has; then SIGKILL after a grace period.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
