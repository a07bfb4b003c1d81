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
//! ([`crate::log_limit`]). Requests that arrive from the buddy are never forwarded, so
//! two pcmds that are each other's buddy cannot loop.
//!
//! The protocol and file formats are in [`pcm_proto::checkpoint`]; the disk layout in
//! [`store`]; the buddy client and copy worker in [`crate::buddy`].

pub mod admission;
pub mod store;

use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use pcm_proto::checkpoint::{
    self as ckpt, auth::PoolKey, read_frame, write_frame, Available, PieceId, Request, Response,
    Series, FORMAT_VERSION,
};
use pcm_proto::{HostName, Rank};

use crate::buddy::{self, Buddy};
use admission::{Admission, Limits, Source};
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
    /// The service settings these options give, for the daemon on `socket` at `host`.
    pub fn config(&self, socket: &Path, host: &HostName) -> Result<Config, Error> {
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
                .unwrap_or_else(|| default_dir(host)),
            listen: self.listen,
            buddy: self.buddy.clone(),
            key,
            max_piece: self.max_piece_mib.saturating_mul(1 << 20),
            limits: Limits::default(),
        })
    }
}

/// Default checkpoint directory for `host` ([`pcm_proto::default_checkpoint_dir`]).
pub fn default_dir(host: &HostName) -> PathBuf {
    pcm_proto::default_checkpoint_dir(host)
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

/// What every connection needs.
#[derive(Debug)]
struct Shared {
    store: Store,
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
        let store = Store::new(config.dir.clone());
        // Nobody writes here before we listen: what a previous pcmd left half-done is garbage.
        store.sweep();
        let pool_key = config
            .key
            .as_ref()
            .map_or_else(|| "none".to_owned(), PoolKey::fingerprint);
        let shared = Arc::new(Shared {
            store,
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
        spawn("pcmd-ckpt-unix", move || accept_unix(unix, for_unix))
            .map_err(listen_err("checkpoint thread".into()))?;
        if let Some(tcp) = tcp {
            spawn("pcmd-ckpt-tcp", move || accept_tcp(tcp, shared))
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
fn refuse(stream: &impl Refusable, shared: &Shared, refusal: &admission::Refusal) {
    if let Some(suffix) = shared.may_log("refused") {
        tracing::warn!("checkpoint service: refused a connection: {refusal}{suffix}");
    }
    stream.refuse(&Response::Error {
        message: refusal.to_string(),
    });
}

/// The two stream kinds, for [`refuse`]: a best-effort error frame on a non-blocking socket.
trait Refusable {
    fn refuse(&self, response: &Response);
}

impl Refusable for UnixStream {
    fn refuse(&self, response: &Response) {
        if self.set_nonblocking(true).is_ok() {
            let _ = write_frame(&mut &*self, response);
        }
    }
}

impl Refusable for TcpStream {
    fn refuse(&self, response: &Response) {
        if self.set_nonblocking(true).is_ok() {
            let _ = write_frame(&mut &*self, response);
        }
    }
}

fn accept_unix(listener: UnixListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                if let Some(suffix) = shared.may_log("accept") {
                    tracing::warn!("checkpoint socket accept failed: {e}{suffix}");
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        // Decided here, before any thread or buffer exists for the connection.
        let ticket = match shared.admit(Source::Local) {
            Ok(t) => t,
            Err(refusal) => {
                refuse(&stream, &shared, &refusal);
                continue;
            }
        };
        let started = spawn("pcmd-ckpt-conn", move || {
            let shared = Arc::clone(&ticket.shared);
            if let Err(e) = serve_unix(&stream, &shared) {
                tracing::debug!("checkpoint connection ended: {e}");
            }
            drop(ticket);
        });
        if let Err(e) = started {
            tracing::warn!("cannot start a checkpoint connection thread: {e}");
        }
    }
}

fn accept_tcp(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                if let Some(suffix) = shared.may_log("accept") {
                    tracing::warn!("buddy listener accept failed: {e}{suffix}");
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let peer = match stream.peer_addr() {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!("buddy connection without a peer address: {e}");
                continue;
            }
        };
        let ticket = match shared.admit(Source::Remote(peer.ip())) {
            Ok(t) => t,
            Err(refusal) => {
                refuse(&stream, &shared, &refusal);
                continue;
            }
        };
        let started = spawn("pcmd-buddy-conn", move || {
            let shared = Arc::clone(&ticket.shared);
            if let Err(e) = serve_tcp(&stream, &shared) {
                // Anyone can connect and fail: one line per failure would let them fill
                // the log.
                if let Some(suffix) = shared.may_log("buddy-conn") {
                    tracing::warn!("buddy connection from {peer} ended: {e}{suffix}");
                }
            }
            drop(ticket);
        });
        if let Err(e) = started {
            tracing::warn!("cannot start a buddy connection thread: {e}");
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
    match read_frame::<Request>(&mut reader) {
        Ok(Some(Request::Hello { version })) if version == FORMAT_VERSION => {
            reply(
                &mut writer,
                &Response::Welcome {
                    version: FORMAT_VERSION,
                    host: shared.host.clone(),
                },
            )?;
        }
        Ok(Some(Request::Hello { version })) => {
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
    }
    serve_requests(&mut reader, &mut writer, shared, Origin::Local)
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
    serve_requests(&mut reader, &mut writer, shared, Origin::Buddy)
}

fn name(request: &Request) -> &'static str {
    match request {
        Request::Hello { .. } => "Hello",
        Request::Put { .. } => "Put",
        Request::Commit { .. } => "Commit",
        Request::List { .. } => "List",
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

fn serve_requests(
    reader: &mut impl Read,
    writer: &mut impl Write,
    shared: &Shared,
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
                match shared.store.put(&piece, len, digest, reader) {
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
            Request::Commit { manifest } => match shared.store.commit(&manifest) {
                Ok(committed) => {
                    reply(writer, &Response::Committed)?;
                    if committed == store::Committed::New {
                        tracing::info!(
                            "checkpoint of {} at iteration {} is complete here",
                            manifest.series,
                            manifest.iteration
                        );
                        if let (Origin::Local, Some(buddy)) = (origin, &shared.buddy) {
                            let pieces = shared
                                .store
                                .local_pieces(&manifest.series, manifest.iteration);
                            buddy.copy(&shared.store, manifest, pieces);
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
                let (available, rejected) = list(shared, &series, rank, origin);
                let finished = shared.store.read_finished(&series);
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
            Request::Finish { series, finished } => match shared.store.finish(&series, &finished) {
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
            Request::GetManifest { series, iteration } => {
                match shared.store.manifest(&series, iteration) {
                    Ok(m) => reply(writer, &Response::Manifest(m))?,
                    Err(e) => reply(
                        writer,
                        &Response::Error {
                            message: e.to_string(),
                        },
                    )?,
                }
            }
            Request::Get { piece } => send_piece(writer, shared, &piece, origin)?,
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
    series: &Series,
    rank: Rank,
    origin: Origin,
) -> (Vec<Available>, Vec<ckpt::Rejected>) {
    let (mut available, mut rejected) = shared.store.list(series, rank);
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
    piece: &PieceId,
    origin: Origin,
) -> Result<(), ckpt::Error> {
    let mut opened = shared.store.open_piece(piece);
    if opened.is_err() && origin == Origin::Local {
        if let Some(buddy) = &shared.buddy {
            // Restore the local copy from the buddy, then serve it like any other.
            match buddy.fetch(&shared.store, piece) {
                Ok(()) => {
                    tracing::info!("fetched {piece} from buddy {}", buddy.addr());
                    opened = shared.store.open_piece(piece);
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
