//! The pcmd a job's ranks talk to: the one already running for this user on this host, or
//! one `pcmrun` starts for the job (and stops at the end) in a private directory; on
//! several hosts, one per host of the hostfile, started through the remote launcher, all
//! keeping the job's checkpoints in one directory that every host sees, so that a rank whose
//! host is lost can resume on another ([`HostDaemons`]).

use std::os::unix::fs::DirBuilderExt as _;
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
    /// One per host of the hostfile, which pcmrun started; stopped on drop.
    PerHost(HostDaemons),
}

/// A pcmd started for the job.
#[derive(Debug)]
pub struct StartedDaemon {
    child: Child,
    /// The `PCM_DAEMON` value that makes ranks find it (`DIR/{host}.sock`).
    pub daemon_env: String,
    /// Its log.
    pub log: PathBuf,
    pcmd: PathBuf,
    socket: PathBuf,
    checkpoint_dir: Option<PathBuf>,
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
            Daemon::PerHost(daemons) => Some(&daemons.daemon_env),
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
    let dir = private_dir()?;
    let daemon_env = dir.path().join("{host}.sock").display().to_string();
    let socket = socket_for(Some(&daemon_env), host);
    let log = dir.path().join("pcmd.log");
    let child = spawn_local(pcmd, &socket, checkpoint_dir, &log)?;
    Ok(StartedDaemon {
        child,
        daemon_env,
        log,
        pcmd: pcmd.to_owned(),
        socket,
        checkpoint_dir: checkpoint_dir.map(Path::to_owned),
        _dir: dir,
    })
}

/// Starts `pcmd --socket SOCKET serve [--checkpoint-dir DIR]` with its output appended to
/// `log`, and waits until it answers.
fn spawn_local(
    pcmd: &Path,
    socket: &Path,
    checkpoint_dir: Option<&Path>,
    log: &Path,
) -> anyhow::Result<Child> {
    // Appended to: a pcmd started again keeps the log of the one that ended.
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot create {}", log.display()))?;
    let mut command = Command::new(pcmd);
    command.arg("--socket").arg(socket).arg("serve");
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
    wait_local(socket, &mut child, log)?;
    Ok(child)
}

impl StartedDaemon {
    /// The pcmd's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// If the pcmd ended (killed, crashed), starts it again at the same socket with the
    /// same checkpoint directory, so that the ranks' next checkpoints are written and a
    /// relaunch finds the checkpoints; `None` while it runs, else how the old one ended and
    /// whether the new one answers.
    pub fn restart_if_ended(&mut self) -> Option<(String, anyhow::Result<()>)> {
        let status = match self.child.try_wait() {
            Ok(None) => return None,
            Ok(Some(status)) => status.to_string(),
            Err(e) => format!("cannot be waited for: {e}"),
        };
        let restarted = spawn_local(
            &self.pcmd,
            &self.socket,
            self.checkpoint_dir.as_deref(),
            &self.log,
        )
        .map(|child| self.child = child);
        Some((status, restarted))
    }
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

/// How long a pcmd started on another host may take to answer `pcmd status` there.
const REMOTE_START_TIMEOUT: Duration = Duration::from_secs(20);

/// The pcmds of a job on several hosts: one per host, each started by pcmrun (directly on
/// this host, through the remote launcher elsewhere) with its socket at
/// `DIR/{host}.sock` and the job's one checkpoint directory.
///
/// The checkpoint directory must be one that every host sees (a shared file system, such as
/// the home directories of most clusters): a rank relaunched on another host then finds its
/// piece through that host's pcmd. pcmrun checks that at start and warns when a host does
/// not see it.
#[derive(Debug)]
pub struct HostDaemons {
    /// The `PCM_DAEMON` value that makes ranks find their host's pcmd (`DIR/{host}.sock`).
    pub daemon_env: String,
    /// The checkpoint directory every pcmd uses.
    pub checkpoint_dir: PathBuf,
    pcmd: PathBuf,
    launcher: crate::hosts::RemoteLauncher,
    local: HostName,
    running: std::collections::BTreeMap<HostName, HostDaemon>,
    /// Private directory holding the local socket, the logs and the hostfiles of the
    /// relaunches; removed on drop.
    dir: tempfile::TempDir,
}

/// What [`HostDaemons::ensure`] did.
#[derive(Debug, Default)]
pub struct Ensured {
    /// Hosts whose pcmd had ended and runs again.
    pub restarted: Vec<HostName>,
    /// Hosts where no pcmd could be started, with why.
    pub failed: Vec<(HostName, String)>,
}

/// The pcmd of one host (or the launcher command that runs it there).
#[derive(Debug)]
struct HostDaemon {
    child: Child,
    /// Held open: a remote pcmd's wrapper stops it when this closes (also when pcmrun dies).
    _stdin: Option<std::process::ChildStdin>,
    log: PathBuf,
}

impl HostDaemons {
    /// Starts a pcmd on each of `hosts`; the error names the host that failed.
    pub fn start(
        pcmd: &Path,
        checkpoint_dir: &Path,
        launcher: crate::hosts::RemoteLauncher,
        hosts: &[HostName],
    ) -> anyhow::Result<HostDaemons> {
        let local = local_host()?;
        let dir = private_dir()?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(checkpoint_dir)
            .with_context(|| {
                format!(
                    "cannot create the checkpoint directory {}",
                    checkpoint_dir.display()
                )
            })?;
        let mut daemons = HostDaemons {
            daemon_env: dir.path().join("{host}.sock").display().to_string(),
            checkpoint_dir: std::fs::canonicalize(checkpoint_dir)?,
            pcmd: std::fs::canonicalize(pcmd).unwrap_or_else(|_| pcmd.to_owned()),
            launcher,
            local,
            running: std::collections::BTreeMap::new(),
            dir,
        };
        for host in hosts {
            daemons.start_on(host)?;
        }
        Ok(daemons)
    }

    /// The private directory of the job's daemons (logs, relaunch hostfiles).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The log of `host`'s pcmd.
    pub fn log(&self, host: &HostName) -> Option<&Path> {
        self.running.get(host).map(|d| d.log.as_path())
    }

    /// The hosts of `hosts` that do not see the checkpoint directory as this host does,
    /// with why (checked with a file only this run writes there).
    pub fn hosts_not_sharing(&self, hosts: &[HostName]) -> Vec<(HostName, String)> {
        let token = self.checkpoint_dir.join(format!(
            ".pcmrun-{}-{}",
            std::process::id(),
            self.dir
                .path()
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ));
        if let Err(e) = std::fs::write(&token, b"") {
            return hosts
                .iter()
                .map(|h| (h.clone(), format!("cannot write {}: {e}", token.display())))
                .collect();
        }
        let quoted = crate::hosts::shell_quote(&token.clone().into_os_string());
        let missing = hosts
            .iter()
            .filter(|h| **h != self.local)
            .filter_map(|host| {
                let status = self
                    .launcher
                    .command(host, &format!("test -e {quoted}"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                match status {
                    Ok(s) if s.success() => None,
                    Ok(_) => Some((
                        host.clone(),
                        format!("{} does not see {}", host, self.checkpoint_dir.display()),
                    )),
                    Err(e) => Some((host.clone(), format!("cannot run the launcher: {e}"))),
                }
            })
            .collect();
        let _ = std::fs::remove_file(&token);
        missing
    }

    /// The hosts whose pcmd (or the launcher command that runs it there) has ended since
    /// it started: a sign that the host may be lost.
    pub fn ended(&mut self) -> Vec<HostName> {
        self.running
            .iter_mut()
            .filter_map(|(host, d)| (!matches!(d.child.try_wait(), Ok(None))).then(|| host.clone()))
            .collect()
    }

    /// Makes sure a pcmd runs on each of `hosts`, starting one again where the one before
    /// ended.
    pub fn ensure(&mut self, hosts: &[HostName]) -> Ensured {
        let mut ensured = Ensured::default();
        for host in hosts {
            let ended = match self.running.get_mut(host) {
                Some(daemon) => !matches!(daemon.child.try_wait(), Ok(None)),
                None => true,
            };
            if ended {
                if let Some(old) = self.running.remove(host) {
                    stop(old);
                }
                match self.start_on(host) {
                    Ok(()) => ensured.restarted.push(host.clone()),
                    Err(e) => ensured.failed.push((host.clone(), format!("{e:#}"))),
                }
            }
        }
        ensured
    }

    fn start_on(&mut self, host: &HostName) -> anyhow::Result<()> {
        let socket = socket_for(Some(&self.daemon_env), host);
        let log = self.dir.path().join(format!("pcmd-{host}.log"));
        // Appended to: a pcmd started again keeps the log of the one that ended.
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let remote = *host != self.local;
        let mut command = if remote {
            // The remote shell runs pcmd in the background and stops it when its standard
            // input (held by pcmrun) closes: ssh gives a remote command no other sign that
            // the caller is gone.
            let q = |p: &Path| crate::hosts::shell_quote(&p.as_os_str().to_owned());
            let line = format!(
                "{} --socket {} serve --checkpoint-dir {} </dev/null & p=$!; read _; kill $p; wait $p",
                q(&self.pcmd),
                q(&socket),
                q(&self.checkpoint_dir)
            );
            let mut command = self.launcher.command(host, &line);
            command.stdin(Stdio::piped());
            command
        } else {
            let mut command = Command::new(&self.pcmd);
            command
                .arg("--socket")
                .arg(&socket)
                .arg("serve")
                .arg("--checkpoint-dir")
                .arg(&self.checkpoint_dir)
                .stdin(Stdio::null());
            command
        };
        command
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .process_group(0);
        crate::end_with_parent(&mut command);
        let mut child = command.spawn().with_context(|| {
            if remote {
                format!("cannot run the launcher {}", self.launcher.line())
            } else {
                format!("cannot start {}", self.pcmd.display())
            }
        })?;
        let stdin = child.stdin.take();
        let mut daemon = HostDaemon {
            child,
            _stdin: stdin,
            log,
        };
        let ready = if remote {
            self.wait_remote(host, &socket, &mut daemon)
        } else {
            wait_local(&socket, &mut daemon.child, &daemon.log)
        };
        if let Err(e) = ready {
            stop(daemon);
            return Err(e.context(format!("the pcmd on {host}")));
        }
        self.running.insert(host.clone(), daemon);
        Ok(())
    }

    /// Waits until `pcmd status` answers on `host` through the launcher.
    fn wait_remote(
        &self,
        host: &HostName,
        socket: &Path,
        daemon: &mut HostDaemon,
    ) -> anyhow::Result<()> {
        let line = format!(
            "{} --socket {} status",
            crate::hosts::shell_quote(&self.pcmd.clone().into_os_string()),
            crate::hosts::shell_quote(&socket.as_os_str().to_owned())
        );
        let deadline = Instant::now() + REMOTE_START_TIMEOUT;
        loop {
            if let Some(status) = daemon.child.try_wait()? {
                let text = std::fs::read_to_string(&daemon.log).unwrap_or_default();
                bail!("ended at start ({status}):\n{text}");
            }
            let answered = self
                .launcher
                .command(host, &line)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if answered {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "did not answer `pcmd status` through {} within {REMOTE_START_TIMEOUT:?} (log: {})",
                    self.launcher.line(),
                    daemon.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A new private directory (mode 0700, random name) under `$XDG_RUNTIME_DIR` or the
/// temporary directory.
fn private_dir() -> anyhow::Result<tempfile::TempDir> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    // tempfile creates it with mode 0700 under a random name: nobody else can plant files.
    tempfile::Builder::new()
        .prefix("pcmrun-")
        .tempdir_in(&base)
        .with_context(|| format!("cannot create a private directory in {}", base.display()))
}

/// Waits until the pcmd `child` answers at `socket`.
fn wait_local(socket: &Path, child: &mut Child, log: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    while !answers(socket) {
        if let Some(status) = child.try_wait()? {
            let text = std::fs::read_to_string(log).unwrap_or_default();
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
    Ok(())
}

/// Stops one host's pcmd: its input closed (a remote wrapper then stops pcmd), SIGTERM to
/// its process group, SIGKILL after a grace period.
fn stop(mut daemon: HostDaemon) {
    drop(daemon._stdin.take());
    let group = nix::unistd::Pid::from_raw(daemon.child.id() as i32);
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !matches!(daemon.child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let _ = daemon.child.wait();
}

impl Drop for HostDaemons {
    fn drop(&mut self) {
        for (_, daemon) in std::mem::take(&mut self.running) {
            stop(daemon);
        }
    }
}
