//! A small blocking controller client: what `pcmd status`, `pcmd migrate`, the IOS agent and
//! the tests use. It lives here, beside the protocol, so that controllers need not depend on
//! the daemon's crate.
//!
//! ```no_run
//! use std::time::Duration;
//! use pcm_proto::{Move, Rank};
//! use pcm_proto::client::{Client, Migration};
//!
//! let mut client = Client::connect("/tmp/pcmd-1000/node-a.sock")?;
//! for job in client.status()?.jobs {
//!     println!("{} ({} ranks here)", job.job, job.ranks.len());
//! }
//! let moves = vec![Move { rank: Rank(1), to: None }];
//! match client.migrate(None, moves, true, Duration::from_secs(150))? {
//!     Migration::Finished { request, outcome } => println!("{request}: {outcome:?}"),
//!     Migration::Accepted { request } => println!("{request} accepted"),
//! }
//! # Ok::<(), pcm_proto::client::Error>(())
//! ```

use std::io::{self, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{
    encode, ClientKind, DaemonStatus, ErrorKind, FrameError, FrameReader, FromDaemon, HostName,
    JobId, Move, NodeStats, Outcome, RequestId, Resize, ToDaemon, PROTOCOL_VERSION,
};

/// Time allowed for connecting and for each plain request-reply exchange (10 s).
pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of talking to a daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing listens at the socket path (no file, or a socket nobody serves).
    #[error("no pcmd listening at {} (is `pcmd serve` running? set PCM_DAEMON or --socket to its socket)", path.display())]
    NotRunning {
        /// The socket path tried.
        path: PathBuf,
    },
    /// Connecting failed for another reason (for example permissions).
    #[error("cannot connect to pcmd at {}: {source}", path.display())]
    Connect {
        /// The socket path tried.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Reading or writing the socket failed.
    #[error("talking to pcmd at {}: {source}", path.display())]
    Io {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The daemon sent bytes that do not decode.
    #[error("bad reply from pcmd at {}: {source}", path.display())]
    Frame {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: FrameError,
    },
    /// The daemon closed the connection.
    #[error("pcmd at {} closed the connection", path.display())]
    Closed {
        /// The socket path.
        path: PathBuf,
    },
    /// No reply came in time.
    #[error("no reply from pcmd at {} within {} s while waiting for {what}", path.display(), after.as_secs_f64())]
    TimedOut {
        /// The socket path.
        path: PathBuf,
        /// What the client was waiting for.
        what: &'static str,
        /// How long it waited.
        after: Duration,
    },
    /// The daemon refused the request.
    #[error("{message}")]
    Refused {
        /// The daemon's category.
        kind: ErrorKind,
        /// The daemon's explanation.
        message: String,
    },
    /// The daemon answered with a message that makes no sense here.
    #[error("unexpected reply from pcmd while waiting for {what}: {reply:?}")]
    Unexpected {
        /// What the client was waiting for.
        what: &'static str,
        /// The reply.
        reply: Box<FromDaemon>,
    },
}

impl Error {
    /// The daemon's error category, if the daemon refused the request.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Error::Refused { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// Result of [`Client::migrate`].
#[derive(Debug, Clone, PartialEq)]
pub enum Migration {
    /// The request was delivered to the job's ranks (without `wait`).
    Accepted {
        /// Its id.
        request: RequestId,
    },
    /// The reconfiguration ended (with `wait`).
    Finished {
        /// Its id.
        request: RequestId,
        /// How it ended.
        outcome: Outcome,
    },
}

/// A controller connection to one daemon.
#[derive(Debug)]
pub struct Client {
    link: Link,
    host: HostName,
}

impl Client {
    /// Connects to the daemon at `path` and says hello, with [`DEFAULT_REPLY_TIMEOUT`].
    pub fn connect(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::connect_timeout(path, DEFAULT_REPLY_TIMEOUT)
    }

    /// Connects and says hello, waiting at most `timeout` for the welcome.
    pub fn connect_timeout(path: impl AsRef<Path>, timeout: Duration) -> Result<Self, Error> {
        Self::connect_as(path, ClientKind::Controller, timeout)
    }

    /// Connects and says hello as a client of kind `client` (a rank, for programs that
    /// stand in for one: a rank's own link is pcm's), waiting at most `timeout`.
    pub fn connect_as(
        path: impl AsRef<Path>,
        client: ClientKind,
        timeout: Duration,
    ) -> Result<Self, Error> {
        let path = path.as_ref().to_owned();
        let stream = UnixStream::connect(&path).map_err(|source| match source.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
                Error::NotRunning { path: path.clone() }
            }
            _ => Error::Connect {
                path: path.clone(),
                source,
            },
        })?;
        let mut link = Link {
            stream,
            reader: FrameReader::new(),
            path,
        };
        link.send(&ToDaemon::Hello {
            version: PROTOCOL_VERSION,
            client,
        })?;
        let what = "the daemon's welcome";
        match link.recv(timeout, what)? {
            FromDaemon::Welcome { host, .. } => Ok(Self { link, host }),
            reply => Err(unexpected(what, reply)),
        }
    }

    /// Host name the daemon reported.
    pub fn daemon_host(&self) -> &HostName {
        &self.host
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.link.path
    }

    /// Asks for the daemon's view of its node.
    pub fn status(&mut self) -> Result<DaemonStatus, Error> {
        self.send(&ToDaemon::QueryStatus)?;
        match self.recv(DEFAULT_REPLY_TIMEOUT, "the status")? {
            FromDaemon::Status(status) => Ok(status),
            reply => Err(unexpected("the status", reply)),
        }
    }

    /// Asks for the profile of the node and its ranks over the daemon's last stats period.
    pub fn stats(&mut self) -> Result<NodeStats, Error> {
        self.send(&ToDaemon::QueryStats)?;
        match self.recv(DEFAULT_REPLY_TIMEOUT, "the stats")? {
            FromDaemon::Stats(stats) => Ok(stats),
            reply => Err(unexpected("the stats", reply)),
        }
    }

    /// Asks for `moves` of `job` (or of the daemon's only job). Without `wait`, returns once
    /// the request is accepted; with `wait`, once it has finished, waiting at most `timeout`
    /// in all. A daemon-side deadline arrives as [`Error::Refused`] with
    /// [`ErrorKind::TimedOut`].
    pub fn migrate(
        &mut self,
        job: Option<JobId>,
        moves: Vec<Move>,
        wait: bool,
        timeout: Duration,
    ) -> Result<Migration, Error> {
        self.reconfigure(job, moves, None, wait, timeout)
    }

    /// Asks for `job` (or the daemon's only job) to run with `resize.ranks` ranks, as
    /// [`Client::migrate`] does for moves (the same answers, deadline and refusals).
    pub fn resize(
        &mut self,
        job: Option<JobId>,
        resize: Resize,
        wait: bool,
        timeout: Duration,
    ) -> Result<Migration, Error> {
        self.reconfigure(job, Vec::new(), Some(resize), wait, timeout)
    }

    /// Asks for `moves` and `resize` of `job` together, in one reconfiguration (see
    /// [`Client::migrate`]).
    pub fn reconfigure(
        &mut self,
        job: Option<JobId>,
        moves: Vec<Move>,
        resize: Option<Resize>,
        wait: bool,
        timeout: Duration,
    ) -> Result<Migration, Error> {
        let deadline = Instant::now() + timeout;
        self.send(&ToDaemon::Migrate {
            job,
            moves,
            wait,
            resize,
        })?;
        let what = "the migration to be accepted";
        let request = match self.recv(deadline.saturating_duration_since(Instant::now()), what)? {
            FromDaemon::MigrationAccepted { request } => request,
            reply => return Err(unexpected(what, reply)),
        };
        if !wait {
            return Ok(Migration::Accepted { request });
        }
        let what = "the migration to finish";
        loop {
            match self.recv(deadline.saturating_duration_since(Instant::now()), what)? {
                FromDaemon::MigrationFinished {
                    request: finished,
                    outcome,
                } if finished == request => {
                    return Ok(Migration::Finished { request, outcome });
                }
                // An answer about some other request this connection waits on.
                FromDaemon::MigrationFinished { .. } => continue,
                reply => return Err(unexpected(what, reply)),
            }
        }
    }

    /// Sends one message.
    pub fn send(&mut self, message: &ToDaemon) -> Result<(), Error> {
        self.link.send(message)
    }

    /// Receives one message, waiting at most `timeout`; `what` names it in errors. A
    /// [`FromDaemon::Error`] is returned as [`Error::Refused`].
    pub fn recv(&mut self, timeout: Duration, what: &'static str) -> Result<FromDaemon, Error> {
        self.link.recv(timeout, what)
    }

    /// Receives one message as sent, errors included, waiting at most `timeout`.
    pub fn recv_raw(&mut self, timeout: Duration, what: &'static str) -> Result<FromDaemon, Error> {
        self.link.recv_raw(timeout, what)
    }
}

fn unexpected(what: &'static str, reply: FromDaemon) -> Error {
    Error::Unexpected {
        what,
        reply: Box::new(reply),
    }
}

/// The framed stream under a [`Client`].
#[derive(Debug)]
struct Link {
    stream: UnixStream,
    reader: FrameReader,
    path: PathBuf,
}

impl Link {
    fn send(&mut self, message: &ToDaemon) -> Result<(), Error> {
        self.stream
            .write_all(&encode(message))
            .map_err(|source| self.io_error(source))
    }

    fn recv(&mut self, timeout: Duration, what: &'static str) -> Result<FromDaemon, Error> {
        match self.recv_raw(timeout, what)? {
            FromDaemon::Error { kind, message } => Err(Error::Refused { kind, message }),
            message => Ok(message),
        }
    }

    fn recv_raw(&mut self, timeout: Duration, what: &'static str) -> Result<FromDaemon, Error> {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.reader.next_message::<FromDaemon>() {
                Ok(Some(message)) => return Ok(message),
                Ok(None) => {}
                Err(source) => {
                    return Err(Error::Frame {
                        path: self.path.clone(),
                        source,
                    })
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timed_out(what, timeout));
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|source| self.io_error(source))?;
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    return Err(Error::Closed {
                        path: self.path.clone(),
                    })
                }
                Ok(n) => self.reader.feed(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(self.timed_out(what, timeout));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => return Err(self.io_error(source)),
            }
        }
    }

    fn io_error(&self, source: io::Error) -> Error {
        match source.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => Error::Closed {
                path: self.path.clone(),
            },
            _ => Error::Io {
                path: self.path.clone(),
                source,
            },
        }
    }

    fn timed_out(&self, what: &'static str, after: Duration) -> Error {
        Error::TimedOut {
            path: self.path.clone(),
            what,
            after,
        }
    }
}
