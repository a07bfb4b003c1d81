//! The tokio driver: a Unix socket, one task per connection, and the [`Registry`] core.
//!
//! One actor task owns the core. It accepts connections, receives decoded messages from the
//! connection tasks over a bounded channel, feeds them to the core, and hands the core's
//! outputs to the connection tasks over bounded per-connection queues (never waiting on a
//! slow client: a client whose queue is full is dropped). It also runs the core's one timer.
//!
//! Startup ([`Daemon::lock`], then [`Locked::listen`]): the socket directory is created with
//! mode 0700, a lock file `<socket>.lock` is locked with `flock` (a second daemon on the same
//! socket fails with [`Error::AlreadyRunning`]); then a stale socket file left by a dead
//! daemon is removed, and the new socket is made mode 0600. [`Daemon::run`] removes the
//! socket when it returns. `pcmd serve` starts its checkpoint service between the two
//! steps, so that its socket exists whenever the main one answers.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use pcm_proto::{encode, FrameError, FrameReader, HostName, ToDaemon};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use crate::registry::{self, ConnId, Output, Registry};
use crate::shm_sweep::SweepPolicy;

/// Frames queued for one connection before it is considered stuck and dropped (256).
pub const OUTBOUND_QUEUE: usize = 256;
/// Messages queued from all connections towards the core (1024); readers wait when full.
pub const EVENT_QUEUE: usize = 1024;
/// Time allowed for writing one frame to a client before it is dropped (10 s).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes read from a socket at a time (64 KiB).
const READ_CHUNK: usize = 64 * 1024;
/// Clients `pcmd serve` serves at once (256; the registry's
/// [`registry::Config::with_max_connections`]): each may buffer up to one frame
/// ([`pcm_proto::MAX_FRAME_LEN`]), so this bounds the memory a flood of connections can take.
pub const MAX_CLIENTS: usize = 256;

/// Errors of starting or running the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another daemon holds the lock of this socket.
    #[error("a pcmd is already serving {} ({})", path.display(), pid.map_or("pid unknown".to_owned(), |p| format!("pid {p}")))]
    AlreadyRunning {
        /// The socket path.
        path: PathBuf,
        /// Process id written in the lock file by the running daemon, if readable.
        pid: Option<u32>,
    },
    /// The cgroup named as the node (`--node-cgroup`) cannot be sensed.
    #[error(transparent)]
    NodeCgroup(#[from] node_sensor::SensorError),
    /// The socket's directory could not be created, or is not private to this user.
    #[error("socket directory: {0}")]
    SocketDir(#[from] pcm_proto::PrivateDirError),
    /// The lock file could not be opened, locked or written.
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Something other than a socket sits at the socket path.
    #[error("{} exists and is not a socket; refusing to replace it", path.display())]
    NotASocket {
        /// The socket path.
        path: PathBuf,
    },
    /// Binding, removing or setting permissions on the socket failed.
    #[error("cannot set up socket {}: {source}", path.display())]
    Socket {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

/// Settings of `pcmd serve`.
#[derive(Debug, Clone)]
pub struct Config {
    /// Socket to listen on.
    pub socket: PathBuf,
    /// Host name reported to clients.
    pub host: HostName,
    /// Settings of the core.
    pub registry: registry::Config,
    /// Sweeps of the dead launches' shared-memory segments in `/dev/shm`, or `None` for
    /// none ([`crate::shm_sweep`]).
    pub shm_sweep: Option<SweepPolicy>,
    /// The cgroup to sense as the node for `pcmd stats`, when pcmd runs beside it
    /// (`--node-cgroup`); `None`: the cgroup that caps pcmd, else the machine.
    pub node_cgroup: Option<node_sensor::NodeCgroupPath>,
}

/// A daemon whose socket is bound and locked, ready to [`run`](Daemon::run).
#[derive(Debug)]
pub struct Daemon {
    listener: std::os::unix::net::UnixListener,
    socket: PathBuf,
    // Held for the daemon's lifetime; the lock is released when the file is closed.
    _lock: Flock<File>,
    registry: Registry,
    shm_sweep: Option<SweepPolicy>,
    sensor: crate::node::Sensor,
}

/// The lock file guarding `socket`.
pub fn lock_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

fn lock(socket: &Path) -> Result<Flock<File>, Error> {
    let path = lock_path(socket);
    let lock_err = |source| Error::Lock {
        path: path.clone(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(lock_err)?;
    let mut locked = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => locked,
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut text = String::new();
            let pid = file
                .read_to_string(&mut text)
                .ok()
                .and_then(|_| text.trim().parse().ok());
            return Err(Error::AlreadyRunning {
                path: socket.to_owned(),
                pid,
            });
        }
        Err((_, errno)) => return Err(lock_err(errno.into())),
    };
    locked.set_len(0).map_err(lock_err)?;
    writeln!(&mut *locked, "{}", std::process::id()).map_err(lock_err)?;
    Ok(locked)
}

/// A daemon that holds its socket's lock but does not listen yet: what must be ready before
/// clients connect (the checkpoint socket, which the same lock guards) is started in
/// between, because a client that reaches the main socket goes on to the others at once.
#[derive(Debug)]
pub struct Locked {
    config: Config,
    lock: Flock<File>,
}

impl Locked {
    /// Replaces a stale socket and binds: from here on, clients can connect.
    pub fn listen(self, now: Instant) -> Result<Daemon, Error> {
        let Locked { config, lock } = self;
        // Before the socket: a node cgroup that cannot be sensed stops pcmd at start.
        let sensor = crate::node::Sensor::new(config.node_cgroup)?;
        let socket = config.socket;
        let socket_err = |source| Error::Socket {
            path: socket.clone(),
            source,
        };
        match fs::symlink_metadata(&socket) {
            Ok(meta) if meta.file_type().is_socket() => {
                // We hold the lock, so whoever made this socket is gone.
                tracing::info!(socket = %socket.display(), "removing stale socket");
                fs::remove_file(&socket).map_err(socket_err)?;
            }
            Ok(_) => return Err(Error::NotASocket { path: socket }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(socket_err(e)),
        }
        let listener = std::os::unix::net::UnixListener::bind(&socket).map_err(socket_err)?;
        fs::set_permissions(&socket, fs::Permissions::from_mode(0o600)).map_err(socket_err)?;
        listener.set_nonblocking(true).map_err(socket_err)?;
        let registry = Registry::new(
            config.registry,
            config.host,
            std::process::id(),
            now,
            registry::request_id_seed(),
        );
        Ok(Daemon {
            listener,
            socket,
            _lock: lock,
            registry,
            shm_sweep: config.shm_sweep,
            sensor,
        })
    }
}

impl Daemon {
    /// Creates the socket directory and takes the lock; [`Locked::listen`] binds.
    pub fn lock(config: Config) -> Result<Locked, Error> {
        if let Some(dir) = config.socket.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The lock file and the socket go there: nobody else may plant anything in it.
            pcm_proto::ensure_private_dir(dir)?;
        }
        let lock = lock(&config.socket)?;
        Ok(Locked { config, lock })
    }

    /// [`Daemon::lock`] then [`Locked::listen`], for a daemon with nothing to start in
    /// between. Must be called outside or inside a tokio runtime; does not need one.
    pub fn bind(config: Config, now: Instant) -> Result<Self, Error> {
        Self::lock(config)?.listen(now)
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Serves until `shutdown` completes, then removes the socket. Must run inside a tokio
    /// runtime.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let Daemon {
            listener,
            socket,
            _lock,
            registry,
            shm_sweep,
            sensor,
        } = self;
        let result = serve(listener, &socket, registry, shm_sweep, sensor, shutdown).await;
        if let Err(e) = fs::remove_file(&socket) {
            tracing::warn!(socket = %socket.display(), "could not remove socket: {e}");
        }
        tracing::info!(socket = %socket.display(), "pcmd stopped");
        drop(_lock);
        result
    }
}

/// Resolves when the process receives SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        tracing::warn!("cannot install signal handlers; stop pcmd with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
    }
}

/// Resolves when standard input reaches its end (or cannot be read), read on a thread of
/// its own: what it holds is thrown away.
pub async fn stdin_closed() {
    let (closed, wait) = tokio::sync::oneshot::channel::<()>();
    let reader = std::thread::Builder::new()
        .name("pcmd-stdin".into())
        .spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            let _ = closed.send(());
        });
    if reader.is_err() {
        tracing::warn!("cannot watch standard input; --until-stdin-closes has no effect");
        return std::future::pending().await;
    }
    let _ = wait.await;
    tracing::info!("standard input closed (--until-stdin-closes), shutting down");
}

#[derive(Debug)]
enum Event {
    Message(ConnId, ToDaemon),
    FrameError(ConnId, FrameError),
    Disconnected(ConnId),
}

#[derive(Debug)]
struct Handle {
    frames: mpsc::Sender<Vec<u8>>,
    task: tokio::task::AbortHandle,
}

async fn serve(
    listener: std::os::unix::net::UnixListener,
    socket: &Path,
    mut registry: Registry,
    shm_sweep: Option<SweepPolicy>,
    mut sensor: crate::node::Sensor,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let listener =
        tokio::net::UnixListener::from_std(listener).map_err(|source| Error::Socket {
            path: socket.to_owned(),
            source,
        })?;
    tracing::info!(socket = %socket.display(), host = %registry.host(), pid = std::process::id(), "pcmd serving");
    let (events_tx, mut events) = mpsc::channel::<Event>(EVENT_QUEUE);
    let mut conns: HashMap<ConnId, Handle> = HashMap::new();
    let mut log = pcm_proto::log_limit::LogLimit::default();
    let period = registry.config().stats_period();
    let mut stats_tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    stats_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A sweep reads /proc, so it runs off the event loop, one at a time.
    let mut sweep_tick = shm_sweep.map(|policy| {
        let start = tokio::time::Instant::now() + policy.every;
        let mut tick = tokio::time::interval_at(start, policy.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        (tick, policy.min_age)
    });
    type Swept = (crate::shm_sweep::Swept, crate::session_sweep::Swept);
    let mut sweeping: Option<tokio::task::JoinHandle<Swept>> = None;
    tokio::pin!(shutdown);
    loop {
        let timer = registry.poll_timeout();
        let sleep = async move {
            match timer {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let conn = registry.handle_connected(Instant::now());
                    let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
                    let task = tokio::spawn(connection(conn, stream, rx, events_tx.clone()));
                    conns.insert(conn, Handle { frames: tx, task: task.abort_handle() });
                    tracing::debug!(%conn, "client connected");
                }
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    if let Some(n) = log.check("accept", Instant::now()) {
                        tracing::warn!("accept failed: {e}{}", pcm_proto::log_limit::suffix(n));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(event) = events.recv() => {
                let now = Instant::now();
                match event {
                    Event::Message(conn, message) => {
                        tracing::trace!(%conn, ?message, "received");
                        registry.handle_message(now, conn, message);
                    }
                    Event::FrameError(conn, err) => {
                        tracing::debug!(%conn, "frame error: {err}");
                        registry.handle_frame_error(now, conn, &err);
                    }
                    Event::Disconnected(conn) => {
                        tracing::debug!(%conn, "client disconnected");
                        // Dropping the sender lets the task flush what is queued and end.
                        conns.remove(&conn);
                        registry.handle_disconnected(now, conn);
                    }
                }
            }
            () = sleep => registry.handle_timeout(Instant::now()),
            Some(min_age) = async {
                let (tick, min_age) = sweep_tick.as_mut()?;
                tick.tick().await;
                Some(*min_age)
            }, if sweep_tick.is_some() && sweeping.is_none() => {
                let uid = nix::unistd::geteuid().as_raw();
                let host = registry.host().to_string();
                sweeping = Some(tokio::task::spawn_blocking(move || {
                    let shm = crate::shm_sweep::sweep(Path::new(crate::shm_sweep::SHM_DIR), uid, min_age);
                    let tmp = std::env::temp_dir();
                    let sessions = crate::session_sweep::sweep(&tmp, &host, uid, min_age);
                    (shm, sessions)
                }));
            }
            Some((swept, sessions)) = async { sweeping.as_mut()?.await.ok() }, if sweeping.is_some() => {
                sweeping = None;
                for (path, _) in &sessions.removed {
                    tracing::info!(dir = %path.display(), "removed the session directory of an Open MPI launch whose process is gone");
                }
                for (path, e) in &sessions.failed {
                    tracing::warn!(dir = %path.display(), "cannot remove the session directory of a dead Open MPI launch: {e}");
                }
                for (path, bytes) in &swept.removed {
                    tracing::info!(segment = %path.display(), bytes, "removed the shared memory of a launch whose processes are gone");
                }
                for (path, e) in &swept.failed {
                    tracing::warn!(segment = %path.display(), "cannot remove the shared memory of a dead launch: {e}");
                }
            }
            _ = stats_tick.tick() => {
                let load = sensor.sample();
                registry.handle_stats_tick(Instant::now(), load);
            }
        }
        dispatch(&mut registry, &mut conns);
    }
    for handle in conns.values() {
        handle.task.abort();
    }
    Ok(())
}

/// Hands the core's outputs to the connection tasks without ever waiting.
fn dispatch(registry: &mut Registry, conns: &mut HashMap<ConnId, Handle>) {
    while let Some(output) = registry.poll_output() {
        match output {
            Output::Send { conn, message } => {
                let Some(handle) = conns.get(&conn) else {
                    continue;
                };
                if let Err(e) = handle.frames.try_send(encode(&message)) {
                    match e {
                        mpsc::error::TrySendError::Full(_) => {
                            tracing::warn!(%conn, "client is not reading its messages; dropping it");
                        }
                        mpsc::error::TrySendError::Closed(_) => {}
                    }
                    if let Some(handle) = conns.remove(&conn) {
                        handle.task.abort();
                    }
                    registry.handle_disconnected(Instant::now(), conn);
                }
            }
            Output::Close { conn } => {
                // The task writes what is still queued, then sees the queue closed and ends.
                conns.remove(&conn);
            }
        }
    }
}

/// One client: reads frames into events, writes queued frames, until the core lets go of
/// it (its queue is closed) or the socket fails.
async fn connection(
    conn: ConnId,
    stream: UnixStream,
    mut frames: mpsc::Receiver<Vec<u8>>,
    events: mpsc::Sender<Event>,
) {
    let (mut rd, mut wr) = stream.into_split();
    let mut reader = FrameReader::new();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut reading = true;
    loop {
        tokio::select! {
            read = rd.read(&mut buf), if reading => {
                let mut out = Vec::new();
                match read {
                    Ok(0) => {
                        reading = false;
                        out.push(match reader.finish() {
                            Ok(()) => Event::Disconnected(conn),
                            Err(e) => Event::FrameError(conn, e),
                        });
                    }
                    Ok(n) => {
                        reader.feed(&buf[..n]);
                        loop {
                            match reader.next_message::<ToDaemon>() {
                                Ok(Some(message)) => out.push(Event::Message(conn, message)),
                                Ok(None) => break,
                                Err(e) => {
                                    // The stream is out of step: read no further.
                                    reading = false;
                                    out.push(Event::FrameError(conn, e));
                                    break;
                                }
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!(%conn, "read failed: {e}");
                        reading = false;
                        out.push(Event::Disconnected(conn));
                    }
                }
                for event in out {
                    if events.send(event).await.is_err() {
                        return;
                    }
                }
            }
            frame = frames.recv() => match frame {
                Some(frame) => match tokio::time::timeout(WRITE_TIMEOUT, wr.write_all(&frame)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(%conn, "write failed: {e}");
                        break;
                    }
                    Err(_) => {
                        tracing::warn!(%conn, "client did not read for {} s; dropping it", WRITE_TIMEOUT.as_secs());
                        break;
                    }
                },
                None => break,
            },
        }
    }
    let _ = tokio::time::timeout(WRITE_TIMEOUT, wr.shutdown()).await;
    let _ = events.send(Event::Disconnected(conn)).await;
}
