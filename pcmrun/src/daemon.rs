//! The pcmd a job's ranks talk to. By default (`--daemon auto`) the node's own: one pcmd
//! per node and user, at the socket every tool finds by default (`PCM_DAEMON`, else the
//! per-user default place), shared with the node's IOS agent and other jobs, so that the
//! agents see a pcmrun job with no flag. pcmrun attaches where one answers and starts one
//! there where none does; a pcmd it started it stops at the end unless another job still
//! uses it. On several hosts, the same on each host of the hostfile through the remote
//! launcher ([`HostDaemons`]); the job's checkpoints go to one directory that every host
//! sees (the ranks name it to their pcmd with `PCM_CHECKPOINT_DIR`), so that a rank whose
//! host is lost can resume on another. `--daemon start` keeps the old behaviour: new pcmds
//! of the job's own, in a private directory.

use std::os::unix::fs::DirBuilderExt as _;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use pcm_proto::HostName;

use crate::settings::Places;

/// How long a pcmd that pcmrun starts may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How often pcmrun checks that the node's pcmd it attached to still answers.
const ATTACHED_CHECK: Duration = Duration::from_secs(2);

/// Which pcmd the ranks use.
#[derive(Debug)]
pub enum Daemon {
    /// None: `PCM_DAEMON=none` (no checkpoints, no recovery).
    Off,
    /// One the user named (`--daemon PATH`): the ranks find it at this `PCM_DAEMON` value.
    Named(String),
    /// This host's pcmd, which pcmrun keeps running (attached or started).
    Local(LocalDaemon),
    /// One per host of the hostfile, which pcmrun keeps running.
    PerHost(HostDaemons),
}

/// This host's pcmd for a job on this host only: the node's shared one (`--daemon auto`) or
/// one of the job's own in a private directory (`--daemon start`). Kept running: started
/// again if it ends while the job runs.
#[derive(Debug)]
pub struct LocalDaemon {
    /// The `PCM_DAEMON` value that makes ranks find it.
    pub daemon_env: String,
    /// The log of a pcmd pcmrun started.
    pub log: PathBuf,
    pcmd: PathBuf,
    socket: PathBuf,
    checkpoint_dir: Option<PathBuf>,
    /// The pcmd pcmrun started, if it did (`None`: attached to one that runs already).
    child: Option<Child>,
    /// Whether the socket is the node's shared one (others may use the pcmd).
    shared: bool,
    /// When an attached pcmd was last seen answering.
    checked: Instant,
    /// Private directory holding the log (and, with `--daemon start`, the socket); removed
    /// on drop.
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// The value of `PCM_DAEMON` for the ranks.
    pub fn env_value(&self) -> &str {
        match self {
            Daemon::Off => "none",
            Daemon::Named(value) => value,
            Daemon::Local(local) => &local.daemon_env,
            Daemon::PerHost(daemons) => &daemons.daemon_env,
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

/// The socket of `host` in the `PCM_DAEMON` value `template` (never empty: a socket path
/// with `{host}` for each node's name).
fn socket_at(template: &str, host: &HostName) -> PathBuf {
    PathBuf::from(template.replace("{host}", host.as_str()))
}

/// Whether something accepts connections on `socket`.
pub fn answers(socket: &Path) -> bool {
    UnixStream::connect(socket).is_ok()
}

/// Resolves `--daemon`: `none`, `auto` (the node's pcmd, attached or started), `start` (a
/// pcmd of the job's own) or a socket path template. `dry_run` reports what would be used
/// without starting anything. `places` names the nodes' pcmd socket and pcmrun's private
/// directories.
pub fn choose(
    choice: &str,
    pcmd: &Path,
    checkpoint_dir: Option<&Path>,
    dry_run: bool,
    places: &Places,
) -> anyhow::Result<Daemon> {
    let host = local_host()?;
    match choice {
        "none" => Ok(Daemon::Off),
        "auto" if places.daemon_off() => Ok(Daemon::Off),
        "auto" if dry_run => Ok(Daemon::Named(places.node_socket_template.clone())),
        "start" if dry_run => Ok(Daemon::Named("<a pcmd pcmrun would start>".into())),
        "auto" => {
            let template = places.node_socket_template.clone();
            let socket = socket_at(&template, &host);
            let dir = private_dir(places)?;
            LocalDaemon::keep_in(pcmd, checkpoint_dir, template, socket, true, dir)
                .map(Daemon::Local)
        }
        "start" => {
            let dir = private_dir(places)?;
            let template = dir.path().join("{host}.sock").display().to_string();
            let socket = socket_at(&template, &host);
            LocalDaemon::keep_in(pcmd, checkpoint_dir, template, socket, false, dir)
                .map(Daemon::Local)
        }
        path => {
            let socket = places.socket_for(Some(path), &host);
            if !dry_run && !answers(&socket) {
                bail!(
                    "--daemon {path}: no pcmd answers at {} (start one with `pcmd --socket {} serve`, or use --daemon auto)",
                    socket.display(),
                    socket.display()
                );
            }
            Ok(Daemon::Named(path.to_owned()))
        }
    }
}

impl LocalDaemon {
    /// Attaches to the pcmd at `socket`, or starts one there (logging to the private
    /// directory `dir`).
    fn keep_in(
        pcmd: &Path,
        checkpoint_dir: Option<&Path>,
        daemon_env: String,
        socket: PathBuf,
        shared: bool,
        dir: tempfile::TempDir,
    ) -> anyhow::Result<LocalDaemon> {
        let log = dir.path().join("pcmd.log");
        let child = match answers(&socket) {
            true => None,
            false => Some(spawn_local(pcmd, &socket, checkpoint_dir, &log)?),
        };
        Ok(LocalDaemon {
            daemon_env,
            log,
            pcmd: pcmd.to_owned(),
            socket,
            checkpoint_dir: checkpoint_dir.map(Path::to_owned),
            child,
            shared,
            checked: Instant::now(),
            _dir: dir,
        })
    }

    /// What pcmrun did at start, for people.
    pub fn describe(&self) -> String {
        match (&self.child, self.shared) {
            (None, _) => format!(
                "using the node's pcmd at {} (PCM_DAEMON={})",
                self.socket.display(),
                self.daemon_env
            ),
            (Some(child), true) => format!(
                "started the node's pcmd at {} (pid {}, log {}); it stops with this job unless another uses it",
                self.socket.display(),
                child.id(),
                self.log.display()
            ),
            (Some(child), false) => format!(
                "started a pcmd for this job (PCM_DAEMON={}, pid {}, log {})",
                self.daemon_env,
                child.id(),
                self.log.display()
            ),
        }
    }

    /// The pid of the pcmd pcmrun started, if it did.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// If the pcmd ended (killed, crashed), starts one again at the same socket with the
    /// same checkpoint directory (or takes the one that answers there now), so that the
    /// ranks' next checkpoints are written and a relaunch finds them. `None` while it runs,
    /// else which one ended (`pid N`, or the node's socket), how, and whether a pcmd
    /// answers again.
    pub fn restart_if_ended(
        &mut self,
        now: Instant,
    ) -> Option<(String, String, anyhow::Result<()>)> {
        let (which, status) = match self.child.as_mut() {
            Some(child) => match child.try_wait() {
                Ok(None) => return None,
                Ok(Some(status)) => (format!("pid {}", child.id()), status.to_string()),
                Err(e) => (
                    format!("pid {}", child.id()),
                    format!("cannot be waited for: {e}"),
                ),
            },
            None => {
                if now.duration_since(self.checked) < ATTACHED_CHECK {
                    return None;
                }
                self.checked = now;
                if answers(&self.socket) {
                    return None;
                }
                (
                    format!("at {}", self.socket.display()),
                    "no longer answers".to_owned(),
                )
            }
        };
        self.child = None;
        if answers(&self.socket) {
            // Another one (the node's agent's) took the socket: use it.
            return Some((which, status, Ok(())));
        }
        let restarted = spawn_local(
            &self.pcmd,
            &self.socket,
            self.checkpoint_dir.as_deref(),
            &self.log,
        )
        .map(|child| self.child = Some(child));
        Some((which, status, restarted))
    }
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

/// The number of ranks registered with the pcmd at `socket` (0 when it does not answer).
fn ranks_registered(socket: &Path) -> usize {
    pcm_proto::client::Client::connect(socket)
        .and_then(|mut c| c.status())
        .map(|s| s.jobs.iter().map(|j| j.ranks.len()).sum())
        .unwrap_or(0)
}

impl Drop for LocalDaemon {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // The node's pcmd may serve other jobs by now: it keeps running for them.
        if self.shared && !matches!(child.try_wait(), Ok(Some(_))) {
            let others = ranks_registered(&self.socket);
            if others > 0 {
                eprintln!(
                    "pcmrun: the node's pcmd (pid {}) keeps running: {others} ranks of other jobs use it",
                    child.id()
                );
                return;
            }
        }
        // SIGTERM: it finishes writing what it has; then SIGKILL after a grace period.
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// How long a pcmd started on another host may take to answer `pcmd status` there.
const REMOTE_START_TIMEOUT: Duration = Duration::from_secs(20);

/// The pcmds of a job on several hosts: one per host, the node's own where one answers at
/// the nodes' socket (`--daemon auto`), else one pcmrun starts (directly on this host,
/// through the remote launcher elsewhere) at that socket, or, with `--daemon start`, at
/// `DIR/{host}.sock` in a private directory; all given the job's one checkpoint directory.
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
    /// Whether the sockets are the nodes' own (`--daemon auto`), shared with others.
    shared: bool,
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
    /// The pcmd pcmrun started (or the launcher command running it); `None`: attached to
    /// the node's pcmd, which runs already.
    child: Option<Child>,
    /// Held open: a remote pcmd's wrapper stops it when this closes (also when pcmrun dies).
    _stdin: Option<std::process::ChildStdin>,
    log: PathBuf,
}

impl HostDaemons {
    /// Makes sure a pcmd runs on each of `hosts`: the nodes' own at `node_template` (a
    /// `PCM_DAEMON` value) where one answers, else one pcmrun starts there; without
    /// `node_template`, new ones in a private directory (under `places`'s base). The error
    /// names the host that failed.
    pub fn start(
        pcmd: &Path,
        checkpoint_dir: &Path,
        launcher: crate::hosts::RemoteLauncher,
        hosts: &[HostName],
        node_template: Option<String>,
        places: &Places,
    ) -> anyhow::Result<HostDaemons> {
        let local = local_host()?;
        let dir = private_dir(places)?;
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
        let shared = node_template.is_some();
        let mut daemons = HostDaemons {
            daemon_env: node_template
                .unwrap_or_else(|| dir.path().join("{host}.sock").display().to_string()),
            shared,
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

    /// The hosts whose own pcmd the job uses (it ran already), and those where pcmrun
    /// started one.
    pub fn attached_and_started(&self) -> (Vec<HostName>, Vec<HostName>) {
        let (attached, started): (Vec<_>, Vec<_>) =
            self.running.iter().partition(|(_, d)| d.child.is_none());
        let names =
            |v: Vec<(&HostName, &HostDaemon)>| v.into_iter().map(|(h, _)| h.clone()).collect();
        (names(attached), names(started))
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

    /// The hosts whose pcmd that pcmrun started (or the launcher command that runs it
    /// there) has ended since it started: a sign that the host may be lost.
    pub fn ended(&mut self) -> Vec<HostName> {
        self.running
            .iter_mut()
            .filter_map(|(host, d)| {
                let child = d.child.as_mut()?;
                (!matches!(child.try_wait(), Ok(None))).then(|| host.clone())
            })
            .collect()
    }

    /// Stops watching `host`'s pcmd (the host left the launch), and stops it if it runs.
    pub fn forget(&mut self, host: &HostName) {
        if let Some(daemon) = self.running.remove(host) {
            stop(daemon);
        }
    }

    /// Makes sure a pcmd runs on each of `hosts`, starting one again where the one before
    /// ended.
    pub fn ensure(&mut self, hosts: &[HostName]) -> Ensured {
        let mut ensured = Ensured::default();
        for host in hosts {
            let ended = match self.running.get_mut(host) {
                Some(HostDaemon {
                    child: Some(child), ..
                }) => !matches!(child.try_wait(), Ok(None)),
                Some(HostDaemon { child: None, .. }) => !self.answers_on(host),
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

    /// Whether a pcmd answers at `host`'s socket (asked through the launcher elsewhere).
    fn answers_on(&self, host: &HostName) -> bool {
        let socket = socket_at(&self.daemon_env, host);
        if *host == self.local {
            return answers(&socket);
        }
        let line = format!(
            "{} --socket {} status",
            crate::hosts::shell_quote(&self.pcmd.clone().into_os_string()),
            crate::hosts::shell_quote(&socket.as_os_str().to_owned())
        );
        self.launcher
            .command(host, &line)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn start_on(&mut self, host: &HostName) -> anyhow::Result<()> {
        let socket = socket_at(&self.daemon_env, host);
        let log = self.dir.path().join(format!("pcmd-{host}.log"));
        if self.shared && self.answers_on(host) {
            self.running.insert(
                host.clone(),
                HostDaemon {
                    child: None,
                    _stdin: None,
                    log,
                },
            );
            return Ok(());
        }
        // Appended to: a pcmd started again keeps the log of the one that ended.
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let remote = *host != self.local;
        let mut command = if remote {
            // pcmd stops when its standard input, the launcher's connection held by pcmrun,
            // closes: ssh gives a remote command no other sign that the caller is gone, and
            // a shell between them (an earlier `read; kill` wrapper) left pcmd running when
            // the shell was killed with pcmrun.
            let q = |p: &Path| crate::hosts::shell_quote(&p.as_os_str().to_owned());
            let line = format!(
                "exec {} --socket {} serve --checkpoint-dir {} --until-stdin-closes",
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
        let ready = if remote {
            self.wait_remote(host, &mut child, &log)
        } else {
            wait_local(&socket, &mut child, &log)
        };
        let daemon = HostDaemon {
            child: Some(child),
            _stdin: stdin,
            log,
        };
        if let Err(e) = ready {
            stop(daemon);
            return Err(e.context(format!("the pcmd on {host}")));
        }
        self.running.insert(host.clone(), daemon);
        Ok(())
    }

    /// Waits until `pcmd status` answers on `host` through the launcher.
    fn wait_remote(&self, host: &HostName, child: &mut Child, log: &Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + REMOTE_START_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait()? {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                bail!("ended at start ({status}):\n{text}");
            }
            if self.answers_on(host) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "did not answer `pcmd status` through {} within {REMOTE_START_TIMEOUT:?} (log: {})",
                    self.launcher.line(),
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A new private directory for pcmd sockets and logs ([`crate::private_dir`]).
fn private_dir(places: &Places) -> anyhow::Result<tempfile::TempDir> {
    Ok(crate::private_dir(&places.private_dir_base, "pcmd")?)
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
/// A node's own pcmd that pcmrun attached to is left running.
fn stop(mut daemon: HostDaemon) {
    drop(daemon._stdin.take());
    let Some(mut child) = daemon.child.take() else {
        return;
    };
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
}

impl Drop for HostDaemons {
    fn drop(&mut self) {
        for (_, daemon) in std::mem::take(&mut self.running) {
            stop(daemon);
        }
    }
}

/// The hosts of `hosts` whose owner gave them back to the pool (`ios-agent leave`: the
/// mark next to the node's pcmd socket, [`pcm_proto::given_back`]), with how and when, for
/// people; `node_template` is where the nodes' pcmds listen
/// ([`Places::node_socket_template`]). Remote hosts are asked through `launcher`; a host
/// that does not answer counts as not given back (the probe for lost hosts deals with it).
pub fn given_back(
    hosts: &[HostName],
    local: &HostName,
    launcher: &crate::hosts::RemoteLauncher,
    node_template: &str,
) -> Vec<(HostName, String)> {
    use pcm_proto::given_back::{self, GivenBack};
    let describe = |mark: &GivenBack| {
        let ago = crate::unix_now() - mark.at_unix_s;
        format!("given back by its owner ({}, {ago:.0} s ago)", mark.by)
    };
    hosts
        .iter()
        .filter_map(|host| {
            let socket = socket_at(node_template, host);
            if host == local {
                return match given_back::read(&socket) {
                    Ok(Some(mark)) => Some((host.clone(), describe(&mark))),
                    Ok(None) => None,
                    Err(e) => Some((host.clone(), format!("given back by its owner ({e})"))),
                };
            }
            let path = given_back::path_for(&socket);
            let line = format!(
                "cat {} 2>/dev/null",
                crate::hosts::shell_quote(&path.into_os_string())
            );
            let output = launcher
                .command(host, &line)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .ok()?;
            if !output.status.success() {
                return None;
            }
            let why = match serde_json::from_slice::<GivenBack>(&output.stdout) {
                Ok(mark) => describe(&mark),
                Err(_) => "given back by its owner (an unreadable mark)".to_owned(),
            };
            Some((host.clone(), why))
        })
        .collect()
}
