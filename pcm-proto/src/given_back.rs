//! The mark of a node whose owner gave it back (`ios-agent leave`, or a stop signal's
//! drain): a launcher that relaunches a job (`pcmrun`) must not place ranks there again.
//!
//! The mark is a small JSON file next to the node's pcmd socket, `<socket>.given-back`
//! ([`path_for`]), in the socket's directory, which is private to the user (mode 0700).
//! Anyone who knows a node's pcmd socket (pcmrun knows every host's from its
//! `PCM_DAEMON` template) finds its mark without asking the node anything. The agent
//! writes it once the node is given back and removes it when it joins the pool again.
//!
//! It is written atomically (a temporary file in the same directory, mode 0600, then a
//! rename), never through a symbolic link; a mark that does not parse is an error naming
//! the file, never a panic.

use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::HostName;

/// What is appended to the pcmd socket's path to name the mark.
pub const SUFFIX: &str = ".given-back";

/// A node given back by its owner: what the mark holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GivenBack {
    /// The node (the host name its agent and pcmd use).
    pub host: HostName,
    /// When it was given back, seconds since the Unix epoch.
    pub at_unix_s: f64,
    /// How, for people: `"ios-agent leave"`, `"ios-agent leave --force"`, `"SIGTERM drain"`.
    pub by: String,
}

impl GivenBack {
    /// `host` given back now, `by` the way named.
    pub fn now(host: HostName, by: impl Into<String>) -> GivenBack {
        GivenBack {
            host,
            at_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            by: by.into(),
        }
    }
}

/// A mark that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read, or is not to be trusted (a symbolic link,
    /// another user's file, one that others may write).
    #[error("cannot read the given-back mark {}: {reason}", path.display())]
    Read {
        /// The mark's path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file holds no valid mark.
    #[error("{} is not a given-back mark ({source}); remove it if the node is to be used again", path.display())]
    Parse {
        /// The mark's path.
        path: PathBuf,
        /// What is wrong.
        source: serde_json::Error,
    },
}

/// The mark's path for the pcmd socket `socket`: `<socket>.given-back`.
pub fn path_for(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(SUFFIX);
    PathBuf::from(name)
}

/// Writes the mark for the pcmd socket `socket`, replacing one that is there: a new file
/// (mode 0600, created exclusively, never through a symbolic link) in the socket's
/// directory, synced, then renamed over the mark, so that a reader sees the old mark or
/// the new one, never part of one.
pub fn write(socket: &Path, mark: &GivenBack) -> io::Result<()> {
    let path = path_for(socket);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "socket path has no name"))?;
    let mut body = serde_json::to_vec_pretty(mark).map_err(io::Error::other)?;
    body.push(b'\n');
    // A name of our own next to the mark: O_EXCL fails on anything already there (a planted
    // link included), so a few tries with fresh names suffice.
    let mut last = None;
    for _ in 0..8 {
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(file_name);
        tmp_name.push(format!(
            ".{}.{:016x}.tmp",
            std::process::id(),
            rand::random::<u64>()
        ));
        let tmp = dir.join(tmp_name);
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&tmp);
        let mut file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let written = file
            .write_all(&body)
            .and_then(|()| file.sync_all())
            // rename replaces whatever is at `path` (a symbolic link itself, not its target).
            .and_then(|()| fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        return written;
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temporary name")))
}

/// Reads the mark for the pcmd socket `socket`: `Ok(None)` when there is none. A symbolic
/// link, another user's file or one others may read or write, and a file that is not a
/// mark are errors naming the file.
pub fn read(socket: &Path) -> Result<Option<GivenBack>, Error> {
    let path = path_for(socket);
    let bytes = match crate::read_private_file(&path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(reason) => return Err(Error::Read { path, reason }),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| Error::Parse { path, source })
}

/// Removes the mark for the pcmd socket `socket` (the node is offered again); returns
/// whether there was one. A symbolic link at the mark's path is removed, not followed.
pub fn remove(socket: &Path) -> io::Result<bool> {
    match fs::remove_file(path_for(socket)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn socket_in(dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join("node-b.sock")
    }

    fn mark(by: &str) -> GivenBack {
        GivenBack::now(HostName::new("node-b").unwrap(), by)
    }

    #[test]
    fn the_mark_sits_next_to_the_socket() {
        assert_eq!(
            path_for(Path::new("/run/user/7/pcmd/node-b.sock")),
            PathBuf::from("/run/user/7/pcmd/node-b.sock.given-back")
        );
        assert_eq!(
            path_for(Path::new("b.sock")),
            PathBuf::from("b.sock.given-back")
        );
    }

    /// Without serde_json's `float_roundtrip` this time read back one bit off (CI, 2026-12-02)
    /// and the mark compared unequal to what was written.
    #[test]
    fn a_time_reads_back_bit_for_bit() {
        let at = 1796238142.8370225_f64;
        let text = serde_json::to_string(&at).unwrap();
        assert_eq!(
            serde_json::from_str::<f64>(&text).unwrap().to_bits(),
            at.to_bits()
        );
    }

    #[test]
    fn given_no_mark_then_read_says_none_and_remove_false() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(&socket_in(&dir)).unwrap().is_none());
        assert!(!remove(&socket_in(&dir)).unwrap());
    }

    #[test]
    fn a_written_mark_reads_back_private_and_is_replaced_then_removed() {
        let dir = tempfile::tempdir().unwrap();
        let socket = socket_in(&dir);
        let first = mark("ios-agent leave");
        write(&socket, &first).unwrap();
        assert_eq!(read(&socket).unwrap(), Some(first));
        let mode = fs::metadata(path_for(&socket))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let second = mark("SIGTERM drain");
        write(&socket, &second).unwrap();
        assert_eq!(read(&socket).unwrap(), Some(second));
        // Nothing but the mark is left in the directory (no temporary file).
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("node-b.sock.given-back")]
        );
        assert!(remove(&socket).unwrap());
        assert!(read(&socket).unwrap().is_none());
        assert!(!remove(&socket).unwrap());
    }

    #[test]
    fn given_garbage_then_read_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let socket = socket_in(&dir);
        let path = path_for(&socket);
        for garbage in [
            &b"not json"[..],
            b"",
            b"{\"host\":\"bad host\",\"at_unix_s\":1,\"by\":\"x\"}",
            b"\xff\xfe",
        ] {
            fs::write(&path, garbage).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
            let err = read(&socket).unwrap_err();
            assert!(matches!(err, Error::Parse { .. }), "{err}");
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{err}"
            );
        }
    }

    #[test]
    fn a_symbolic_link_is_neither_read_nor_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let socket = socket_in(&dir);
        let target = dir.path().join("elsewhere");
        fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, path_for(&socket)).unwrap();
        let err = read(&socket).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        // Writing replaces the link itself; the file it pointed to is untouched.
        write(&socket, &mark("ios-agent leave --force")).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"keep");
        assert!(!fs::symlink_metadata(path_for(&socket))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            read(&socket).unwrap().map(|m| m.by),
            Some("ios-agent leave --force".to_owned())
        );
    }

    #[test]
    fn a_mark_others_may_write_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let socket = socket_in(&dir);
        write(&socket, &mark("ios-agent leave")).unwrap();
        fs::set_permissions(path_for(&socket), fs::Permissions::from_mode(0o666)).unwrap();
        let err = read(&socket).unwrap_err();
        assert!(matches!(err, Error::Read { .. }), "{err}");
    }

    #[test]
    fn given_a_missing_directory_then_write_fails_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("gone/node-b.sock");
        assert!(write(&socket, &mark("ios-agent leave")).is_err());
    }
}
