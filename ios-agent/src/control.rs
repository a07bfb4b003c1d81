//! The agent's local control socket: `ios-agent status` and `ios-agent leave` talk to a
//! running agent through it. A Unix socket in a directory only the user can enter (0700),
//! itself mode 0600, framed like pcmd's socket (4-byte length, CBOR body).

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcm_proto::{encode, FrameReader, HostName, UserDirs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot};

use crate::driver::{ControlRequest, LeaveOrder, LeaveOrigin, LeaveUpdate};
pub use ios_agent_proto::control::{ControlMessage, ControlReply};
use ios_agent_proto::leave::LeaveReport;

/// Environment variable naming the control socket; `{host}` is replaced by the host name.
pub const CONTROL_ENV: &str = "IOS_AGENT_CONTROL";

/// Longest drain a client may ask for (a day): a typo must not pin an agent for years.
pub const MAX_LEAVE_WITHIN: Duration = Duration::from_secs(24 * 3600);

/// Errors of the control socket.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// No agent answers at the path.
    #[error("no ios-agent running at {} (start one with `ios-agent join`, or set {CONTROL_ENV} / --control)", path.display())]
    NotRunning {
        /// The path tried.
        path: PathBuf,
    },
    /// Another agent already serves the path.
    #[error("an ios-agent already runs on this node (control socket {}); `ios-agent leave` stops it", path.display())]
    AlreadyRunning {
        /// The path.
        path: PathBuf,
    },
    /// Any other I/O failure.
    #[error("control socket {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The agent sent something that does not decode.
    #[error("bad reply on control socket {}: {reason}", path.display())]
    BadReply {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// The control socket path for `host`: `given` (`--control` or `$IOS_AGENT_CONTROL`, with
/// `{host}` replaced), else `$XDG_RUNTIME_DIR/ios-agent/{host}.sock` as pcmd's socket is
/// placed ([`UserDirs`]), else `/tmp/ios-agent-{uid}/{host}.sock`.
pub fn control_path(given: Option<&str>, dirs: &UserDirs, host: &HostName) -> PathBuf {
    let dir = match (given.filter(|v| !v.is_empty()), &dirs.runtime) {
        (Some(v), _) => return PathBuf::from(v.replace("{host}", host.as_str())),
        (None, Some(runtime)) => runtime.join("ios-agent"),
        (None, None) => PathBuf::from(format!("/tmp/ios-agent-{}", dirs.uid)),
    };
    dir.join(format!("{host}.sock"))
}

/// The other Unix sockets in the directory of `path`, sorted (at most 8): where no agent
/// answers at the default path, these are likely the agents of this machine, joined with
/// `--host NAME` other than the machine's name (each listens at `NAME.sock`).
pub fn sockets_beside(path: &Path) -> Vec<PathBuf> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Vec::new();
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .map(|e| e.path())
        .filter(|p| p != path)
        .collect();
    found.sort();
    found.truncate(8);
    found
}

/// Binds the control socket, refusing if a live agent already serves it and replacing a
/// stale one. Then serves requests until the driver goes away.
pub fn bind(path: &Path) -> Result<UnixListener, ControlError> {
    let io_err = |source| ControlError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        pcm_proto::ensure_private_dir(dir).map_err(|e| ControlError::Io {
            path: path.to_owned(),
            source: io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()),
        })?;
    }
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(ControlError::AlreadyRunning {
                    path: path.to_owned(),
                });
            }
            fs::remove_file(path).map_err(io_err)?;
        }
        Ok(_) => {
            return Err(io_err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    let listener = UnixListener::bind(path).map_err(io_err)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(io_err)?;
    Ok(listener)
}

/// Accepts control connections and forwards their requests to the driver.
pub async fn serve(listener: UnixListener, driver: mpsc::Sender<ControlRequest>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let driver = driver.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(stream, driver).await {
                tracing::debug!("control connection: {e}");
            }
        });
    }
}

async fn serve_connection(
    mut stream: tokio::net::UnixStream,
    driver: mpsc::Sender<ControlRequest>,
) -> io::Result<()> {
    let mut reader = FrameReader::new();
    let mut buf = [0u8; 4096];
    loop {
        let message = match reader.next_message::<ControlMessage>() {
            Ok(Some(m)) => m,
            Ok(None) => {
                let n = stream.read(&mut buf).await?;
                if n == 0 {
                    return Ok(());
                }
                reader.feed(&buf[..n]);
                continue;
            }
            Err(e) => {
                let reply = ControlReply::Error(format!("bad request: {e}"));
                stream.write_all(&encode(&reply)).await?;
                return Ok(());
            }
        };
        let reply = match message {
            ControlMessage::Status => {
                let (tx, rx) = oneshot::channel();
                match driver.send(ControlRequest::Status(tx)).await {
                    Ok(()) => match rx.await {
                        Ok(status) => ControlReply::Status(Box::new(status)),
                        Err(_) => ControlReply::Error("the agent is stopping".to_owned()),
                    },
                    Err(_) => ControlReply::Error("the agent is stopping".to_owned()),
                }
            }
            ControlMessage::Leave { within_s, force } => {
                let within = match Duration::try_from_secs_f64(within_s) {
                    Ok(d) if d > Duration::ZERO && d <= MAX_LEAVE_WITHIN => d,
                    _ => {
                        let reply = ControlReply::Error(format!(
                            "leave within {within_s} s: must be more than 0 and at most {} s",
                            MAX_LEAVE_WITHIN.as_secs()
                        ));
                        stream.write_all(&encode(&reply)).await?;
                        continue;
                    }
                };
                let (updates, mut rx) = mpsc::unbounded_channel();
                let order = LeaveOrder {
                    within,
                    force,
                    updates,
                    origin: LeaveOrigin::Command,
                };
                if driver.send(ControlRequest::Leave(order)).await.is_err() {
                    let reply = ControlReply::Error("the agent is stopping".to_owned());
                    stream.write_all(&encode(&reply)).await?;
                    return Ok(());
                }
                loop {
                    let reply = match rx.recv().await {
                        Some(LeaveUpdate::Progress(r)) => ControlReply::Draining(r),
                        Some(LeaveUpdate::Left(r)) => ControlReply::Left(r),
                        Some(LeaveUpdate::Stayed(r)) => ControlReply::Stayed(r),
                        None => ControlReply::Error(
                            "another `ios-agent leave` took over the drain, or the agent stopped"
                                .to_owned(),
                        ),
                    };
                    let last = !matches!(reply, ControlReply::Draining(_));
                    stream.write_all(&encode(&reply)).await?;
                    if last {
                        break;
                    }
                }
                continue;
            }
        };
        stream.write_all(&encode(&reply)).await?;
    }
}

/// Asks the agent at `path` to leave (see [`ControlMessage::Leave`]) and waits for the end
/// of the drain, passing each progress report to `progress`. Returns the final reply:
/// [`ControlReply::Left`], [`ControlReply::Stayed`] or [`ControlReply::Error`].
pub fn leave(
    path: &Path,
    within: Duration,
    force: bool,
    mut progress: impl FnMut(&LeaveReport),
) -> Result<ControlReply, ControlError> {
    let mut stream = connect(path)?;
    let io_err = |source| ControlError::Io {
        path: path.to_owned(),
        source,
    };
    // Progress comes every second; silence for much longer means the agent is stuck.
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(io_err)?;
    let message = ControlMessage::Leave {
        within_s: within.as_secs_f64(),
        force,
    };
    stream.write_all(&encode(&message)).map_err(io_err)?;
    let mut reader = FrameReader::new();
    loop {
        match read_reply(path, &mut stream, &mut reader)? {
            ControlReply::Draining(report) => progress(&report),
            last => return Ok(last),
        }
    }
}

/// Sends one request to the agent at `path` and waits (at most `timeout`) for the reply.
pub fn request(
    path: &Path,
    message: ControlMessage,
    timeout: Duration,
) -> Result<ControlReply, ControlError> {
    let io_err = |source| ControlError::Io {
        path: path.to_owned(),
        source,
    };
    let mut stream = connect(path)?;
    stream.set_read_timeout(Some(timeout)).map_err(io_err)?;
    stream.write_all(&encode(&message)).map_err(io_err)?;
    read_reply(path, &mut stream, &mut FrameReader::new())
}

fn connect(path: &Path) -> Result<UnixStream, ControlError> {
    UnixStream::connect(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ControlError::NotRunning {
            path: path.to_owned(),
        },
        _ => ControlError::Io {
            path: path.to_owned(),
            source: e,
        },
    })
}

/// Reads the next reply from `stream`, buffering in `reader` what comes after it.
fn read_reply(
    path: &Path,
    stream: &mut UnixStream,
    reader: &mut FrameReader,
) -> Result<ControlReply, ControlError> {
    let io_err = |source| ControlError::Io {
        path: path.to_owned(),
        source,
    };
    let mut buf = [0u8; 8192];
    loop {
        match reader.next_message::<ControlReply>() {
            Ok(Some(reply)) => return Ok(reply),
            Ok(None) => {}
            Err(e) => {
                return Err(ControlError::BadReply {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })
            }
        }
        let n = stream.read(&mut buf).map_err(io_err)?;
        if n == 0 {
            return Err(ControlError::BadReply {
                path: path.to_owned(),
                reason: "the agent closed the connection without answering".to_owned(),
            });
        }
        reader.feed(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_other_sockets_beside_the_default_one_then_they_are_named() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("vm.sock");
        assert!(sockets_beside(&path).is_empty());
        let _a =
            std::os::unix::net::UnixListener::bind(dir.path().join("node-a.sock")).expect("bound");
        let _own = std::os::unix::net::UnixListener::bind(&path).expect("bound");
        fs::write(dir.path().join("notes.txt"), "not a socket").expect("written");
        assert_eq!(sockets_beside(&path), [dir.path().join("node-a.sock")]);
        assert!(sockets_beside(Path::new("/nonexistent-dir/x.sock")).is_empty());
    }

    #[test]
    fn given_a_runtime_dir_then_the_default_control_socket_is_in_it() {
        let host = HostName::new("n1").expect("a host name");
        let dirs = |runtime: Option<&str>| UserDirs {
            uid: 7,
            runtime: runtime.map(PathBuf::from),
            state: None,
        };
        assert_eq!(
            control_path(None, &dirs(Some("/run/user/7")), &host),
            PathBuf::from("/run/user/7/ios-agent/n1.sock")
        );
        assert_eq!(
            control_path(Some(""), &dirs(None), &host),
            PathBuf::from("/tmp/ios-agent-7/n1.sock")
        );
        assert_eq!(
            control_path(Some("/c/{host}.ctl"), &dirs(Some("/r")), &host),
            PathBuf::from("/c/n1.ctl")
        );
    }
}
