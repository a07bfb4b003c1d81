//! Checkpoint service of `pcmd serve`: receives the pieces of coordinated checkpoints from
//! the ranks of its node, writes them atomically to local disk, copies them to a buddy
//! pcmd, and hands them back at restart (from local disk, or fetched from the buddy).
//!
//! It runs beside the registry's tokio driver, on plain threads with blocking I/O: its work
//! is large sequential file and socket copies, which block anyway, and it shares no state
//! with the registry. Two listeners:
//! - `<socket>.ckpt`, a Unix socket of mode 0600 for the node's ranks (like the main
//!   socket, private to the user);
//! - optionally `--listen ADDR:PORT`, TCP for the buddy pcmd, where every connection first
//!   proves it holds the pool key ([`pcm_proto::checkpoint::auth`]).
//!
//! Connections are bounded by [`admission`]: the node's ranks and the network have separate
//! budgets, and each network address a cap of its own, so that connections from the network
//! (which anyone who reaches the port can open, key or not) never take the ranks' slots.
//! A TCP peer must complete the pool-key handshake within [`buddy::HANDSHAKE_TIMEOUT`] in
//! total, however it paces its bytes; after that, idle connections time out
//! ([`IDLE_TIMEOUT`]). A malformed, truncated or oversized frame gets an error answer and
//! closes only its connection; the warnings such connections cause are rate-limited
//! ([`pcm_proto::log_limit`]). Requests that arrive from the buddy are never forwarded, so
//! two pcmds that are each other's buddy cannot loop.
//!
//! **Where the checkpoints go.** A rank's connection names its job's own directory in its
//! `Hello` when the job sets `PCM_CHECKPOINT_DIR`; every request of that connection then
//! works on a [`Store`] there (`Stores::open`): created mode 0700 when missing, checked
//! with [`pcm_proto::ensure_private_dir`] on every connection, refused with an error frame
//! naming the directory and why otherwise, and swept the first time it is opened. One
//! store per directory (by device and inode, so two paths of one directory share its
//! lock). Without a directory, the pcmd's own `--checkpoint-dir`. The buddy keeps the
//! copies it receives in its own directory, whichever directory they came from, and a
//! fetch from the buddy finds them by series and restores them into the job's directory.
//!
//! The protocol and file formats are in [`pcm_proto::checkpoint`]; the disk layout in
//! [`store`]; the buddy client and copy worker in [`buddy`].

pub mod admission;
pub mod buddy;
pub mod store;

use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use pcm_proto::checkpoint::{
    self as ckpt, auth::PoolKey, read_frame, write_frame, Available, PieceId, Request, Response,
    Series, DIR_ENV, FORMAT_VERSION,
};
use pcm_proto::{HostName, Rank, UserDirs};

use admission::{Admission, Limits, Source};
use buddy::Buddy;
use pcm_proto::log_limit::{self, LogLimit};
pub use store::Store;

/// Buffer of a connection's reader (64 KiB). Piece bytes are copied in larger blocks that
/// bypass it; frames are read into buffers sized by the bytes that arrive.
const READ_BUFFER: usize = 64 << 10;
/// A connection that sends nothing for this long is closed (120 s).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Default of `--max-piece-mib`: the largest piece accepted (64 GiB).
pub const DEFAULT_MAX_PIECE_MIB: u64 = 64 << 10;

/// Errors of starting the service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A listener could not be set up.
    #[error("cannot listen on {what}: {source}")]
    Listen {
        /// The socket path or address.
        what: String,
        /// The cause.
        source: io::Error,
    },
    /// The options do not fit together.
    #[error("{0}")]
    Config(String),
    /// The pool key could not be read.
    #[error("{0}")]
    Key(#[from] pcm_proto::pool_key::KeyError),
}

/// Checkpoint options of `pcmd serve`.
#[derive(Debug, Clone, Args)]
// Flattened into `cli::ServeArgs`: without `skip`, both would make an argument group named
// `ServeArgs`, and clap's definition check panics (in debug builds, at the first parse).
#[group(skip)]
pub struct ServeArgs {
    /// Directory for checkpoints. Default: $XDG_STATE_HOME/pcmd/HOST, else
    /// $HOME/.local/state/pcmd/HOST, else /tmp/pcmd-UID/checkpoints-HOST.
    #[arg(long, value_name = "DIR", env = "PCMD_CHECKPOINT_DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Accept connections from a buddy pcmd on this TCP address (needs --pool-key).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// Copy every checkpoint to the pcmd listening there, and fetch from it at restart what
    /// is missing here (needs --pool-key).
    #[arg(long, value_name = "HOST:PORT")]
    pub buddy: Option<String>,
    /// Pool key file shared by the pcmds (the file `ios-agent keygen` writes).
    #[arg(long, value_name = "FILE", env = "PCM_POOL_KEY")]
    pub pool_key: Option<PathBuf>,
    /// Largest checkpoint piece accepted from one rank, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_MAX_PIECE_MIB)]
    pub max_piece_mib: u64,
}

impl ServeArgs {
    /// The service settings these options give, for the daemon on `socket` at `host`
    /// (default checkpoint directory: [`UserDirs::pcmd_checkpoint_dir`] of `dirs`).
    pub fn config(&self, socket: &Path, host: &HostName, dirs: &UserDirs) -> Result<Config, Error> {
        let key = match &self.pool_key {
            Some(path) => Some(PoolKey::from_file(path)?),
            None if self.listen.is_some() || self.buddy.is_some() => return Err(Error::Config(
                "--listen and --buddy need the pool key: give --pool-key FILE or set PCM_POOL_KEY"
                    .into(),
            )),
            None => None,
        };
        Ok(Config {
            socket: ckpt::socket_path(socket),
            host: host.clone(),
            dir: self
                .checkpoint_dir
                .clone()
                .unwrap_or_else(|| dirs.pcmd_checkpoint_dir(host)),
            listen: self.listen,
            buddy: self.buddy.clone(),
            key,
            max_piece: self.max_piece_mib.saturating_mul(1 << 20),
            limits: Limits::default(),
        })
    }
}

/// Settings of the service.
#[derive(Debug, Clone)]
pub struct Config {
    /// The ranks' socket (`<daemon socket>.ckpt`).
    pub socket: PathBuf,
    /// This node's host name.
    pub host: HostName,
    /// Checkpoint directory.
    pub dir: PathBuf,
    /// TCP address for the buddy.
    pub listen: Option<SocketAddr>,
    /// The buddy's address.
    pub buddy: Option<String>,
    /// Pool key (required with `listen` or `buddy`).
    pub key: Option<PoolKey>,
    /// Largest piece accepted, bytes.
    pub max_piece: u64,
    /// Connection budgets.
    pub limits: Limits,
}

/// The checkpoint directories this pcmd serves: its own, and the jobs' own
/// (`PCM_CHECKPOINT_DIR`), one [`Store`] each.
#[derive(Debug)]
struct Stores {
    /// The pcmd's `--checkpoint-dir`: connections that name no directory, and the buddy's.
    own: Arc<Store>,
    host: HostName,
    /// Job directories opened so far, by device and inode: one store (one lock, one sweep)
    /// per directory, whatever path names it. Entries are a path and a few counters, and
    /// stay for the pcmd's life.
    jobs: Mutex<HashMap<(u64, u64), Arc<Store>>>,
}

impl Stores {
    fn new(own: Store, host: HostName) -> Self {
        Stores {
            own: Arc::new(own),
            host,
            jobs: Mutex::new(HashMap::new()),
        }
    }

    /// The store of the directory a connection's `Hello` names (`None`: the pcmd's own),
    /// with the directory to name in the `Welcome`; or the reason it is refused, naming it.
    fn open(&self, dir: Option<&str>) -> Result<(Arc<Store>, String), String> {
        let Some(dir) = dir else {
            return Ok((Arc::clone(&self.own), self.own.root().display().to_string()));
        };
        let path = Path::new(dir);
        if !path.is_absolute() {
            return Err(format!(
                "the checkpoint directory {dir:?} ({DIR_ENV}) is not an absolute path"
            ));
        }
        // Every time, not only the first: the directory may have been removed (it is
        // created again) or opened to others since.
        pcm_proto::ensure_private_dir(path)
            .map_err(|e| format!("cannot keep checkpoints in {dir} ({DIR_ENV}): {e}"))?;
        let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
        let key = id(path).ok_or_else(|| {
            format!("cannot keep checkpoints in {dir} ({DIR_ENV}): it vanished while checked")
        })?;
        if id(self.own.root()) == Some(key) {
            return Ok((Arc::clone(&self.own), dir.to_owned()));
        }
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        // A cached store whose directory was removed (and the inode reused) is replaced.
        if let Some(store) = jobs.get(&key).filter(|s| id(s.root()) == Some(key)) {
            return Ok((Arc::clone(store), dir.to_owned()));
        }
        let store = Arc::new(Store::new(path.to_owned(), self.host.clone()));
        // Under the map's lock: nobody else serves this directory before it is swept.
        store.sweep();
        tracing::info!("keeping the checkpoints of a job in {dir} ({DIR_ENV})");
        jobs.insert(key, Arc::clone(&store));
        Ok((store, dir.to_owned()))
    }
}

/// What every connection needs.
#[derive(Debug)]
struct Shared {
    stores: Stores,
    host: HostName,
    buddy: Option<Buddy>,
    key: Option<PoolKey>,
    max_piece: u64,
    admission: Mutex<Admission>,
    log: Mutex<LogLimit>,
}

impl Shared {
    /// Whether a warning of `kind` may be logged now; `Some(suffix)` to append to it.
    fn may_log(&self, kind: &'static str) -> Option<String> {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.check(kind, Instant::now()).map(log_limit::suffix)
    }

    fn admit(self: &Arc<Self>, source: Source) -> Result<Ticket, admission::Refusal> {
        self.admission
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(source)?;
        Ok(Ticket {
            shared: Arc::clone(self),
            source,
        })
    }
}

/// A connection's slot, given back when the connection ends.
struct Ticket {
    shared: Arc<Shared>,
    source: Source,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.shared
            .admission
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .release(self.source);
    }
}

/// Who is on the other end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A rank (or tool) of this node, over the Unix socket.
    Local,
    /// The buddy pcmd, authenticated.
    Buddy,
}

/// The running service. Dropping it removes the Unix socket; its threads end with the
/// process.
#[derive(Debug)]
pub struct Service {
    socket: PathBuf,
    listen: Option<SocketAddr>,
}

impl Service {
    /// Binds the listeners and starts serving on background threads. Call it after the
    /// daemon took its lock, which also guards the `.ckpt` socket.
    pub fn start(config: Config) -> Result<Service, Error> {
        // Checkpoints are read back into running jobs: their directory must be ours alone.
        // Checked first, so that a refusal leaves no socket or buddy thread behind.
        pcm_proto::ensure_private_dir(&config.dir)
            .map_err(|e| Error::Config(format!("checkpoint directory: {e}")))?;
        let listen_err = |what: String| move |source| Error::Listen { what, source };
        let socket = config.socket.clone();
        let socket_name = socket.display().to_string();
        match std::fs::symlink_metadata(&socket) {
            Ok(meta) if meta.file_type().is_socket() => {
                std::fs::remove_file(&socket).map_err(listen_err(socket_name.clone()))?;
            }
            Ok(_) => {
                return Err(Error::Config(format!(
                    "{socket_name} exists and is not a socket; refusing to replace it"
                )))
            }
            Err(_) => {}
        }
        let unix = UnixListener::bind(&socket).map_err(listen_err(socket_name.clone()))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(listen_err(socket_name))?;
        let tcp = match config.listen {
            Some(addr) => Some(TcpListener::bind(addr).map_err(listen_err(format!("tcp {addr}")))?),
            None => None,
        };
        let listen = tcp.as_ref().and_then(|l| l.local_addr().ok());
        let buddy = match (&config.buddy, &config.key) {
            (Some(addr), Some(key)) => Some(Buddy::start(addr.clone(), *key)),
            _ => None,
        };
        let store = Store::new(config.dir.clone(), config.host.clone());
        // Before we listen, what a previous pcmd of this host left half-done goes; other
        // hosts' pcmds may be writing in a shared directory (see `Store::sweep`).
        store.sweep();
        let pool_key = config
            .key
            .as_ref()
            .map_or_else(|| "none".to_owned(), PoolKey::fingerprint);
        let shared = Arc::new(Shared {
            stores: Stores::new(store, config.host.clone()),
            host: config.host,
            buddy,
            key: config.key,
            max_piece: config.max_piece,
            admission: Mutex::new(Admission::new(config.limits)),
            log: Mutex::new(LogLimit::default()),
        });
        tracing::info!(
            socket = %socket.display(),
            dir = %config.dir.display(),
            listen = ?listen,
            buddy = ?config.buddy,
            pool_key = %pool_key,
            "checkpoint service ready"
        );
        let for_unix = Arc::clone(&shared);
        spawn("pcmd-ckpt-unix", move || accept(unix.incoming(), for_unix))
            .map_err(listen_err("checkpoint thread".into()))?;
        if let Some(tcp) = tcp {
            spawn("pcmd-ckpt-tcp", move || accept(tcp.incoming(), shared))
                .map_err(listen_err("buddy thread".into()))?;
        }
        Ok(Service { socket, listen })
    }

    /// The ranks' socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The TCP address actually bound (useful with port 0).
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.listen
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(drop)
}

/// Tells a turned-away client why, without ever waiting on it.
fn refuse(stream: &impl Connection, shared: &Shared, refusal: &admission::Refusal) {
    if let Some(suffix) = shared.may_log("refused") {
        tracing::warn!("checkpoint service: refused a connection: {refusal}{suffix}");
    }
    stream.refuse(&Response::Error {
        message: refusal.to_string(),
    });
}

/// The two kinds of connection, for [`accept`]: the node's ranks on the Unix socket, the
/// buddy on TCP.
trait Connection: Sized + Send + 'static {
    /// What a connection's log lines name it by.
    type Peer: Send + 'static;
    /// The listener, in the warning of a failed accept.
    const LISTENER: &'static str;
    /// The name of a connection's thread.
    const THREAD: &'static str;
    /// A connection, in the warning of a thread that cannot start.
    const WHAT: &'static str;
    /// Where the connection comes from, for the admission, and its peer; `None` drops it.
    fn origin(&self) -> Option<(Source, Self::Peer)>;
    /// Writes a best-effort error frame on a non-blocking socket.
    fn refuse(&self, response: &Response);
    /// Serves the connection to its end, and logs how it ended.
    fn serve(&self, peer: Self::Peer, shared: &Shared);
}

impl Connection for UnixStream {
    type Peer = ();
    const LISTENER: &'static str = "checkpoint socket";
    const THREAD: &'static str = "pcmd-ckpt-conn";
    const WHAT: &'static str = "checkpoint connection";

    fn origin(&self) -> Option<(Source, ())> {
        Some((Source::Local, ()))
    }

    fn refuse(&self, response: &Response) {
        if self.set_nonblocking(true).is_ok() {
            let _ = write_frame(&mut &*self, response);
        }
    }

    fn serve(&self, (): (), shared: &Shared) {
        if let Err(e) = serve_unix(self, shared) {
            tracing::debug!("checkpoint connection ended: {e}");
        }
    }
}

impl Connection for TcpStream {
    type Peer = SocketAddr;
    const LISTENER: &'static str = "buddy listener";
    const THREAD: &'static str = "pcmd-buddy-conn";
    const WHAT: &'static str = "buddy connection";

    fn origin(&self) -> Option<(Source, SocketAddr)> {
        match self.peer_addr() {
            Ok(peer) => Some((Source::Remote(peer.ip()), peer)),
            Err(e) => {
                tracing::debug!("buddy connection without a peer address: {e}");
                None
            }
        }
    }

    fn refuse(&self, response: &Response) {
        if self.set_nonblocking(true).is_ok() {
            let _ = write_frame(&mut &*self, response);
        }
    }

    fn serve(&self, peer: SocketAddr, shared: &Shared) {
        if let Err(e) = serve_tcp(self, shared) {
            // Anyone can connect and fail: one line per failure would let them fill the log.
            if let Some(suffix) = shared.may_log("buddy-conn") {
                tracing::warn!("buddy connection from {peer} ended: {e}{suffix}");
            }
        }
    }
}

/// Admits the connections of a listener and serves each on a thread of its own.
fn accept<C: Connection>(incoming: impl Iterator<Item = io::Result<C>>, shared: Arc<Shared>) {
    for stream in incoming {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                if let Some(suffix) = shared.may_log("accept") {
                    tracing::warn!("{} accept failed: {e}{suffix}", C::LISTENER);
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let Some((source, peer)) = stream.origin() else {
            continue;
        };
        // Decided here, before any thread or buffer exists for the connection.
        let ticket = match shared.admit(source) {
            Ok(t) => t,
            Err(refusal) => {
                refuse(&stream, &shared, &refusal);
                continue;
            }
        };
        let started = spawn(C::THREAD, move || {
            let shared = Arc::clone(&ticket.shared);
            stream.serve(peer, &shared);
            drop(ticket);
        });
        if let Err(e) = started {
            tracing::warn!("cannot start a {} thread: {e}", C::WHAT);
        }
    }
}

/// Reads a TCP stream under a total deadline for the current phase (the handshake) on top
/// of the per-read idle timeout: a per-read timeout alone lets a peer that sends one byte
/// every few seconds keep an unauthenticated connection for ever.
struct Timed<'a> {
    stream: &'a TcpStream,
    deadline: Option<Instant>,
}

impl Read for Timed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(deadline) = self.deadline else {
            return (&mut &*self.stream).read(buf);
        };
        let late = || {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the authentication was not completed within {} s",
                    buddy::HANDSHAKE_TIMEOUT.as_secs_f64()
                ),
            )
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(late());
        }
        self.stream.set_read_timeout(Some(left.min(IDLE_TIMEOUT)))?;
        match (&mut &*self.stream).read(buf) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) && Instant::now() >= deadline =>
            {
                Err(late())
            }
            other => other,
        }
    }
}

fn serve_unix(stream: &UnixStream, shared: &Shared) -> Result<(), ckpt::Error> {
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    stream.set_write_timeout(Some(IDLE_TIMEOUT))?;
    let mut reader = BufReader::with_capacity(READ_BUFFER, stream);
    let mut writer = BufWriter::with_capacity(1 << 16, stream);
    let store = match read_frame::<Request>(&mut reader) {
        Ok(Some(Request::Hello { version, dir })) if version == FORMAT_VERSION => {
            match shared.stores.open(dir.as_deref()) {
                Ok((store, dir)) => {
                    reply(
                        &mut writer,
                        &Response::Welcome {
                            version: FORMAT_VERSION,
                            host: shared.host.clone(),
                            dir: Some(dir),
                        },
                    )?;
                    store
                }
                Err(message) => {
                    if let Some(suffix) = shared.may_log("job-dir") {
                        tracing::warn!("checkpoint service: refused a job: {message}{suffix}");
                    }
                    reply(
                        &mut writer,
                        &Response::Error {
                            message: message.clone(),
                        },
                    )?;
                    return Err(ckpt::Error::Protocol(message));
                }
            }
        }
        Ok(Some(Request::Hello { version, .. })) => {
            let message = format!(
                "checkpoint protocol version {version} is not supported (this pcmd speaks {FORMAT_VERSION})"
            );
            reply(
                &mut writer,
                &Response::Error {
                    message: message.clone(),
                },
            )?;
            return Err(ckpt::Error::Protocol(message));
        }
        Ok(Some(other)) => {
            let message = format!("the first frame must be Hello, got {}", name(&other));
            reply(
                &mut writer,
                &Response::Error {
                    message: message.clone(),
                },
            )?;
            return Err(ckpt::Error::Protocol(message));
        }
        Ok(None) => return Ok(()),
        Err(e) => return refuse_frame(&mut writer, shared, e),
    };
    serve_requests(&mut reader, &mut writer, shared, &store, Origin::Local)
}

fn serve_tcp(stream: &TcpStream, shared: &Shared) -> Result<(), ckpt::Error> {
    // Writes during the handshake are a few small frames; the deadline bounds them too.
    stream.set_write_timeout(Some(buddy::HANDSHAKE_TIMEOUT))?;
    stream.set_nodelay(true)?;
    let timed = Timed {
        stream,
        deadline: Some(Instant::now() + buddy::HANDSHAKE_TIMEOUT),
    };
    let mut reader = BufReader::with_capacity(READ_BUFFER, timed);
    let mut writer = BufWriter::with_capacity(1 << 16, stream);
    let Some(key) = &shared.key else {
        return Err(ckpt::Error::Auth("no pool key configured".into()));
    };
    buddy::accept(&mut reader, &mut writer, key, &shared.host)?;
    reader.get_mut().deadline = None;
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    stream.set_write_timeout(Some(IDLE_TIMEOUT))?;
    // A buddy's copies go to this pcmd's own directory, whatever directory they came from.
    let store = Arc::clone(&shared.stores.own);
    serve_requests(&mut reader, &mut writer, shared, &store, Origin::Buddy)
}

fn name(request: &Request) -> &'static str {
    match request {
        Request::Hello { .. } => "Hello",
        Request::Put { .. } => "Put",
        Request::Commit { .. } => "Commit",
        Request::List { .. } => "List",
        Request::Widths { .. } => "Widths",
        Request::Get { .. } => "Get",
        Request::GetManifest { .. } => "GetManifest",
        Request::Finish { .. } => "Finish",
    }
}

fn reply(writer: &mut impl Write, response: &Response) -> Result<(), ckpt::Error> {
    write_frame(writer, response)?;
    writer.flush()?;
    Ok(())
}

/// Answers a bad frame with an error naming it, then ends the connection: after a bad
/// length or body the stream cannot be trusted to be in step.
fn refuse_frame(
    writer: &mut impl Write,
    shared: &Shared,
    e: ckpt::Error,
) -> Result<(), ckpt::Error> {
    let message = format!("bad frame: {e}");
    if let Some(suffix) = shared.may_log("bad-frame") {
        tracing::warn!("checkpoint channel: {message}; closing that connection{suffix}");
    }
    let _ = reply(writer, &Response::Error { message });
    Err(e)
}

/// Serves a connection's requests from `store`: the pcmd's own directory, or the one the
/// connection's `Hello` named.
fn serve_requests(
    reader: &mut impl Read,
    writer: &mut impl Write,
    shared: &Shared,
    store: &Store,
    origin: Origin,
) -> Result<(), ckpt::Error> {
    loop {
        let request = match read_frame::<Request>(reader) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(e) => return refuse_frame(writer, shared, e),
        };
        match request {
            Request::Hello { .. } => {
                reply(
                    writer,
                    &Response::Error {
                        message: "Hello may only be the first frame".into(),
                    },
                )?;
            }
            Request::Put { piece, len, digest } => {
                if len > shared.max_piece {
                    let message = format!(
                        "{piece}: piece of {len} bytes exceeds this pcmd's limit of {} bytes (--max-piece-mib)",
                        shared.max_piece
                    );
                    tracing::warn!("refused a checkpoint piece: {message}");
                    reply(
                        writer,
                        &Response::Error {
                            message: message.clone(),
                        },
                    )?;
                    return Err(ckpt::Error::Protocol(message));
                }
                if let Err(message) = check_piece(&piece) {
                    // The bytes follow regardless: drain them to stay in step.
                    ckpt::copy_hashed(reader, &mut io::sink(), len)?;
                    reply(writer, &Response::Error { message })?;
                    continue;
                }
                match store.put(&piece, len, digest, reader) {
                    Ok(()) => {
                        tracing::debug!("stored {piece} ({len} bytes, {origin:?})");
                        reply(writer, &Response::Stored)?;
                    }
                    Err(ckpt::Error::Io(e))
                        if matches!(
                            e.kind(),
                            io::ErrorKind::UnexpectedEof
                                | io::ErrorKind::ConnectionReset
                                | io::ErrorKind::TimedOut
                                | io::ErrorKind::WouldBlock
                        ) =>
                    {
                        return Err(ckpt::Error::Io(e));
                    }
                    Err(e) => {
                        tracing::warn!("could not store {piece}: {e}");
                        reply(
                            writer,
                            &Response::Error {
                                message: format!("could not store {piece}: {e}"),
                            },
                        )?;
                    }
                }
            }
            Request::Commit { manifest } => match store.commit(&manifest) {
                Ok(committed) => {
                    reply(writer, &Response::Committed)?;
                    if committed == store::Committed::New {
                        tracing::info!(
                            "checkpoint of {} at iteration {} is complete here",
                            manifest.series,
                            manifest.iteration
                        );
                        if let (Origin::Local, Some(buddy)) = (origin, &shared.buddy) {
                            let pieces = store.local_pieces(&manifest.series, manifest.iteration);
                            buddy.copy(store, manifest, pieces);
                        }
                    }
                }
                Err(e) => reply(
                    writer,
                    &Response::Error {
                        message: format!("could not commit: {e}"),
                    },
                )?,
            },
            Request::List { series, rank } => {
                let (available, rejected) = list(shared, store, &series, rank, origin);
                let finished = store.read_finished(&series);
                reply(
                    writer,
                    &Response::Listing {
                        available,
                        rejected,
                        finished,
                    },
                )?;
            }
            Request::Finish { .. } if origin != Origin::Local => {
                // Only the job's own ranks say when it ended; a buddy never needs to.
                reply(
                    writer,
                    &Response::Error {
                        message: "Finish is accepted from local ranks only".into(),
                    },
                )?;
            }
            Request::Finish { series, finished } => match store.finish(&series, &finished) {
                Ok(()) => {
                    tracing::info!(
                        "job {} of {series} finished at iteration {}",
                        finished.job,
                        finished.iteration
                    );
                    reply(writer, &Response::Marked)?;
                }
                Err(e) => reply(
                    writer,
                    &Response::Error {
                        message: format!("could not mark {series} finished: {e}"),
                    },
                )?,
            },
            Request::Widths { app, name } => {
                let sizes = store.widths(&app, name.as_ref());
                reply(writer, &Response::Widths { sizes })?;
            }
            Request::GetManifest { series, iteration } => {
                match store.manifest(&series, iteration) {
                    Ok(m) => reply(writer, &Response::Manifest(m))?,
                    Err(e) => reply(
                        writer,
                        &Response::Error {
                            message: e.to_string(),
                        },
                    )?,
                }
            }
            Request::Get { piece } => send_piece(writer, shared, store, &piece, origin)?,
        }
    }
}

fn check_piece(piece: &PieceId) -> Result<(), String> {
    if piece.series.size == 0 || piece.rank.0 >= piece.series.size {
        return Err(format!(
            "{piece}: rank {} is outside a job of {} ranks",
            piece.rank, piece.series.size
        ));
    }
    Ok(())
}

/// Local checkpoints, plus (for local clients) those only the buddy holds.
fn list(
    shared: &Shared,
    store: &Store,
    series: &Series,
    rank: Rank,
    origin: Origin,
) -> (Vec<Available>, Vec<ckpt::Rejected>) {
    let (mut available, mut rejected) = store.list(series, rank);
    if let (Origin::Local, Some(buddy)) = (origin, &shared.buddy) {
        match buddy.list(series, rank) {
            Ok((remote, remote_rejected)) => {
                for a in remote {
                    if !available.iter().any(|l| l.iteration == a.iteration) {
                        available.push(Available {
                            at_buddy: true,
                            ..a
                        });
                    }
                }
                rejected.extend(remote_rejected.into_iter().map(|r| ckpt::Rejected {
                    iteration: r.iteration,
                    reason: format!("at buddy {}: {}", buddy.addr(), r.reason),
                }));
            }
            Err(e) => tracing::warn!(
                "cannot ask buddy {} for checkpoints of {series}: {e}",
                buddy.addr()
            ),
        }
        available.sort_by_key(|a| std::cmp::Reverse(a.iteration));
    }
    (available, rejected)
}

fn send_piece(
    writer: &mut impl Write,
    shared: &Shared,
    store: &Store,
    piece: &PieceId,
    origin: Origin,
) -> Result<(), ckpt::Error> {
    let mut opened = store.open_piece(piece);
    if opened.is_err() && origin == Origin::Local {
        if let Some(buddy) = &shared.buddy {
            // Restore the local copy from the buddy, then serve it like any other.
            match buddy.fetch(store, piece) {
                Ok(()) => {
                    tracing::info!("fetched {piece} from buddy {}", buddy.addr());
                    opened = store.open_piece(piece);
                }
                Err(e) => tracing::warn!("cannot fetch {piece} from buddy {}: {e}", buddy.addr()),
            }
        }
    }
    let (mut file, len, digest) = match opened {
        Ok(found) => found,
        Err(e) => {
            return reply(
                writer,
                &Response::Error {
                    message: e.to_string(),
                },
            )
        }
    };
    write_frame(writer, &Response::Piece { len, digest })?;
    let copied = io::copy(&mut (&mut file).take(len), writer)?;
    writer.flush()?;
    if copied != len {
        // The file shrank under us: the client's digest check will refuse it; stop here.
        return Err(ckpt::Error::Protocol(format!(
            "{piece}: file holds {copied} of {len} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pcm_proto::checkpoint::{expect_frame, Digest, Manifest};
    use pcm_proto::{AppName, JobId};
    use serde::Serialize;

    fn series() -> Series {
        Series {
            app: AppName::new("app").unwrap(),
            size: 2,
            name: None,
        }
    }

    fn config(root: &Path, name: &str) -> Config {
        Config {
            socket: ckpt::socket_path(&root.join(format!("{name}.sock"))),
            host: HostName::new(name).unwrap(),
            dir: root.join(format!("{name}-own")),
            listen: None,
            buddy: None,
            key: None,
            max_piece: 1 << 20,
            limits: Limits::default(),
        }
    }

    /// A rank's connection to the service on `socket`.
    struct Conn {
        reader: BufReader<UnixStream>,
        writer: UnixStream,
    }

    impl Conn {
        /// Connects and sends `hello` (any serialisable first frame); returns the answer.
        fn hello(socket: &Path, hello: &impl Serialize) -> (Conn, Response) {
            let stream = UnixStream::connect(socket).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            let mut conn = Conn {
                reader: BufReader::new(stream.try_clone().unwrap()),
                writer: stream,
            };
            write_frame(&mut conn.writer, hello).unwrap();
            let answer = expect_frame(&mut conn.reader).unwrap();
            (conn, answer)
        }

        /// A connection for the job directory `dir` (`None`: the pcmd's own); panics unless
        /// welcomed, and returns the directory the Welcome names.
        fn open(socket: &Path, dir: Option<&Path>) -> (Conn, String) {
            let hello = Request::Hello {
                version: FORMAT_VERSION,
                dir: dir.map(|d| d.display().to_string()),
            };
            match Conn::hello(socket, &hello) {
                (conn, Response::Welcome { dir: Some(d), .. }) => (conn, d),
                (_, other) => panic!("{other:?}"),
            }
        }

        fn call(&mut self, request: &Request, bytes: &[u8]) -> Response {
            write_frame(&mut self.writer, request).unwrap();
            self.writer.write_all(bytes).unwrap();
            expect_frame(&mut self.reader).unwrap()
        }

        /// A complete checkpoint of two ranks at `iteration`.
        fn checkpoint(&mut self, iteration: u64) {
            let pieces = [b"rank 0".to_vec(), b"rank 1".to_vec()];
            for (rank, bytes) in pieces.iter().enumerate() {
                let put = Request::Put {
                    piece: PieceId {
                        series: series(),
                        iteration,
                        rank: Rank(rank as u32),
                    },
                    len: bytes.len() as u64,
                    digest: Digest::of(bytes),
                };
                assert_eq!(self.call(&put, bytes), Response::Stored);
            }
            let manifest = Manifest {
                format: FORMAT_VERSION,
                series: series(),
                iteration,
                job: JobId::new("job").unwrap(),
                created_unix_s: 0,
                identity: Default::default(),
                digests: pieces.iter().map(|p| Digest::of(p)).collect(),
                lens: pieces.iter().map(|p| p.len() as u64).collect(),
            };
            let commit = Request::Commit { manifest };
            assert_eq!(self.call(&commit, &[]), Response::Committed);
        }

        /// The listed iterations of rank 0, and whether each is only at the buddy.
        fn list(&mut self) -> Vec<(u64, bool)> {
            let list = Request::List {
                series: series(),
                rank: Rank(0),
            };
            match self.call(&list, &[]) {
                Response::Listing { available, .. } => available
                    .iter()
                    .map(|a| (a.iteration, a.at_buddy))
                    .collect(),
                other => panic!("{other:?}"),
            }
        }
    }

    fn piece_file(dir: &Path, iteration: u64, rank: u32) -> PathBuf {
        dir.join("app-2r")
            .join(format!("{iteration:020}"))
            .join(format!("rank-{rank:06}.piece"))
    }

    /// Everything under `dir` (files and directories), or nothing if it does not exist.
    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            found.push(entry.path());
            found.extend(walk(&entry.path()));
        }
        found
    }

    #[test]
    fn given_a_job_directory_then_it_is_created_private_and_every_request_works_there() {
        let root = tempfile::tempdir().unwrap();
        let config = config(root.path(), "node-a");
        let own = config.dir.clone();
        let service = Service::start(config).unwrap();
        let job = root.path().join("home").join("me").join("job-ckpt");
        let (mut conn, welcomed) = Conn::open(service.socket(), Some(&job));
        assert_eq!(welcomed, job.display().to_string());
        let mode = std::fs::metadata(&job).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        conn.checkpoint(10);
        conn.checkpoint(20);
        assert_eq!(conn.list(), [(20, false), (10, false)]);
        assert!(piece_file(&job, 20, 1).exists());
        assert!(walk(&own).is_empty(), "{:?}", walk(&own));
        // Get and GetManifest from the job's directory, on another connection.
        let (mut again, _) = Conn::open(service.socket(), Some(&job));
        let get = Request::Get {
            piece: PieceId {
                series: series(),
                iteration: 20,
                rank: Rank(1),
            },
        };
        assert!(matches!(
            again.call(&get, &[]),
            Response::Piece { len: 6, .. }
        ));
        let mut bytes = [0u8; 6];
        again.reader.read_exact(&mut bytes).unwrap();
        assert_eq!(&bytes, b"rank 1");
        let manifest = Request::GetManifest {
            series: series(),
            iteration: 10,
        };
        assert!(matches!(
            again.call(&manifest, &[]),
            Response::Manifest(m) if m.iteration == 10
        ));
        // The job's end is marked there too.
        let finish = Request::Finish {
            series: series(),
            finished: ckpt::Finished {
                job: JobId::new("job").unwrap(),
                iteration: 25,
                unix_s: 1,
                resumed: false,
            },
        };
        assert_eq!(again.call(&finish, &[]), Response::Marked);
        assert!(job.join("app-2r").join("finished").exists());
        // The pcmd's own directory knows nothing of it.
        let (mut plain, welcomed) = Conn::open(service.socket(), None);
        assert_eq!(welcomed, own.display().to_string());
        assert!(plain.list().is_empty());
    }

    #[test]
    fn given_a_job_directory_opened_first_then_it_is_swept_under_the_shared_rule() {
        let root = tempfile::tempdir().unwrap();
        let service = Service::start(config(root.path(), "node-a")).unwrap();
        let job = root.path().join("job");
        let incomplete = job.join("app-2r").join(format!("{:020}", 7));
        std::fs::create_dir_all(&incomplete).unwrap();
        // node-a's earlier pcmd died writing; node-b's pcmd writes now.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let dead = incomplete.join(format!(".piece.tmp-node-a-{gone}-0"));
        let live = incomplete.join(format!(".piece.tmp-node-b-{gone}-0"));
        std::fs::write(&dead, b"x").unwrap();
        std::fs::write(&live, b"x").unwrap();
        let (_conn, _) = Conn::open(service.socket(), Some(&job));
        assert!(!dead.exists());
        assert!(live.exists() && incomplete.exists());
    }

    #[test]
    fn given_a_bad_job_directory_then_the_connection_is_refused_naming_it_and_why() {
        let root = tempfile::tempdir().unwrap();
        let service = Service::start(config(root.path(), "node-a")).unwrap();
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let link = root.path().join("link");
        std::os::unix::fs::symlink(root.path().join("node-a-own"), &link).unwrap();
        let file = root.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let cases = [
            ("job/ckpt".to_owned(), "not an absolute path"),
            (String::new(), "not an absolute path"),
            (open.display().to_string(), "other users may write to it"),
            (link.display().to_string(), "symbolic link"),
            (file.display().to_string(), "not a directory"),
        ];
        for (dir, why) in cases {
            let hello = Request::Hello {
                version: FORMAT_VERSION,
                dir: Some(dir.clone()),
            };
            let (_, answer) = Conn::hello(service.socket(), &hello);
            let Response::Error { message } = answer else {
                panic!("{dir:?} was accepted: {answer:?}");
            };
            assert!(
                message.contains(why) && message.contains(&dir) && message.contains(DIR_ENV),
                "{dir:?}: {message}"
            );
        }
        assert!(walk(&open).is_empty());
        // The service goes on serving.
        let (mut conn, _) = Conn::open(service.socket(), None);
        conn.checkpoint(1);
    }

    /// `Hello` as clients sent it before the directory field.
    #[derive(Serialize)]
    enum OldRequest {
        Hello { version: u32 },
    }

    #[test]
    fn given_an_old_client_without_the_field_then_the_pcmds_own_directory() {
        let root = tempfile::tempdir().unwrap();
        let config = config(root.path(), "node-a");
        let own = config.dir.clone();
        let service = Service::start(config).unwrap();
        let hello = OldRequest::Hello {
            version: FORMAT_VERSION,
        };
        let (mut conn, answer) = Conn::hello(service.socket(), &hello);
        assert!(
            matches!(&answer, Response::Welcome { dir: Some(d), .. } if *d == own.display().to_string()),
            "{answer:?}"
        );
        conn.checkpoint(3);
        assert!(piece_file(&own, 3, 0).exists());
    }

    #[test]
    fn given_a_job_directory_then_the_buddy_keeps_its_copy_in_its_own_and_a_restart_fetches_it() {
        let root = tempfile::tempdir().unwrap();
        let key = PoolKey::generate();
        let mut buddy_config = config(root.path(), "node-b");
        buddy_config.listen = Some("127.0.0.1:0".parse().unwrap());
        buddy_config.key = Some(key);
        let buddy_own = buddy_config.dir.clone();
        let buddy = Service::start(buddy_config).unwrap();
        let mut node_config = config(root.path(), "node-a");
        node_config.buddy = Some(buddy.listen_addr().unwrap().to_string());
        node_config.key = Some(key);
        let node = Service::start(node_config).unwrap();
        let job = root.path().join("job");
        let (mut conn, _) = Conn::open(node.socket(), Some(&job));
        conn.checkpoint(40);
        let copied = buddy_own
            .join("app-2r")
            .join(format!("{:020}", 40))
            .join("manifest");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !copied.exists() {
            assert!(Instant::now() < deadline, "no copy at the buddy");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(piece_file(&buddy_own, 40, 1).exists());
        // The job's directory loses the checkpoint; a restart finds it at the buddy and
        // gets it back into the job's directory.
        std::fs::remove_dir_all(job.join("app-2r")).unwrap();
        let (mut restart, _) = Conn::open(node.socket(), Some(&job));
        assert_eq!(restart.list(), [(40, true)]);
        let get = Request::Get {
            piece: PieceId {
                series: series(),
                iteration: 40,
                rank: Rank(0),
            },
        };
        assert!(matches!(
            restart.call(&get, &[]),
            Response::Piece { len: 6, .. }
        ));
        let mut bytes = [0u8; 6];
        restart.reader.read_exact(&mut bytes).unwrap();
        assert_eq!(&bytes, b"rank 0");
        assert!(piece_file(&job, 40, 0).exists());
        assert_eq!(restart.list(), [(40, false)]);
    }
}
