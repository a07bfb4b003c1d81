//! Where a node's daemon socket lives. Ranks, the CLI and the daemon resolve it the same way.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use crate::HostName;

/// Environment variable naming the daemon socket. `{host}` in its value is replaced by the
/// host name, so one setting serves every node of a job (`/scratch/pcmd/{host}.sock`).
pub const DAEMON_ENV: &str = "PCM_DAEMON";

/// This user's base directories as the XDG Base Directory rules give them, read once by
/// each program's settings: a variable that is unset, empty or not an absolute path counts
/// as unset. Every default place of a socket, checkpoint or state directory is worked out
/// from here, so that the programs that must meet there (pcm's ranks, pcmd, pcmrun, the
/// agents) agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDirs {
    /// The user id, which names the fallback directories under `/tmp`.
    pub uid: u32,
    /// `$XDG_RUNTIME_DIR`: sockets and other files that live as long as the login.
    pub runtime: Option<PathBuf>,
    /// `$XDG_STATE_HOME`, else `$HOME/.local/state`: data kept across restarts.
    pub state: Option<PathBuf>,
}

impl UserDirs {
    /// From this process's environment and user id.
    pub fn from_env() -> UserDirs {
        UserDirs::from_vars(nix::unistd::getuid().as_raw(), |key| std::env::var_os(key))
    }

    /// From the variables `get` gives (for tests, and for settings read elsewhere).
    pub fn from_vars(uid: u32, get: impl Fn(&str) -> Option<OsString>) -> UserDirs {
        let home_state = || xdg_dir(get("HOME")).map(|home| home.join(".local/state"));
        UserDirs {
            uid,
            runtime: xdg_dir(get("XDG_RUNTIME_DIR")),
            state: xdg_dir(get("XDG_STATE_HOME")).or_else(home_state),
        }
    }

    /// Where a node's pcmd keeps checkpoints when not told otherwise (`pcmd serve`'s
    /// default, which pcmrun must know to look for a job's checkpoints): `STATE/pcmd/HOST`,
    /// else `/tmp/pcmd-UID/checkpoints-HOST`.
    pub fn pcmd_checkpoint_dir(&self, host: &HostName) -> PathBuf {
        match &self.state {
            Some(state) => state.join("pcmd").join(host.as_str()),
            None => PathBuf::from(format!("/tmp/pcmd-{}/checkpoints-{host}", self.uid)),
        }
    }

    /// [`socket_template`] for the [`DAEMON_ENV`] value `setting` and these directories.
    pub fn pcmd_socket_template(&self, setting: Option<&str>) -> String {
        socket_template(setting, self.runtime_str(), self.uid)
    }

    /// [`socket_path`] for the [`DAEMON_ENV`] value `setting`, these directories and `host`.
    pub fn pcmd_socket(&self, setting: Option<&str>, host: &HostName) -> PathBuf {
        socket_path(setting, self.runtime_str(), self.uid, host)
    }

    fn runtime_str(&self) -> Option<&str> {
        self.runtime.as_deref().and_then(Path::to_str)
    }
}

/// The directory an XDG base directory variable names: `None` when it is unset, empty or
/// relative (the XDG Base Directory rules say to ignore a relative path).
pub fn xdg_dir(value: Option<impl AsRef<OsStr>>) -> Option<PathBuf> {
    let path = PathBuf::from(value?.as_ref());
    path.is_absolute().then_some(path)
}

/// The socket path for `host`, from the value of [`DAEMON_ENV`] if set (`env_value`), else
/// the default: `$XDG_RUNTIME_DIR/pcmd/{host}.sock` when `runtime_dir` is given (and an
/// absolute path, [`xdg_dir`]), otherwise
/// `/tmp/pcmd-{uid}/{host}.sock`. The directory is private to the user (the daemon creates
/// it with mode 0700).
pub fn socket_path(
    env_value: Option<&str>,
    runtime_dir: Option<&str>,
    uid: u32,
    host: &HostName,
) -> PathBuf {
    PathBuf::from(socket_template(env_value, runtime_dir, uid).replace("{host}", host.as_str()))
}

/// The socket of every node at once: [`socket_path`] with `{host}` left in it for each
/// node's name, as a value of [`DAEMON_ENV`] that makes every rank of a job find its own
/// node's daemon (the value itself when set, else the default place).
pub fn socket_template(env_value: Option<&str>, runtime_dir: Option<&str>, uid: u32) -> String {
    match env_value.filter(|v| !v.is_empty()) {
        Some(value) => value.to_owned(),
        None => {
            let dir = match xdg_dir(runtime_dir) {
                Some(runtime) => runtime.join("pcmd"),
                None => PathBuf::from(format!("/tmp/pcmd-{uid}")),
            };
            dir.join("{host}.sock").display().to_string()
        }
    }
}

/// A runtime or state directory that must not be used.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    /// It could not be created or examined.
    #[error("cannot create or examine {}: {source}", dir.display())]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// It is unsafe to use: the text says why.
    #[error("refusing to use {}: {reason}", dir.display())]
    Unsafe {
        /// The directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Makes sure `dir` is a directory that only this user can change: creates it (mode 0700,
/// with its missing parents) when it does not exist, and refuses one that is a symbolic
/// link, belongs to another user, or that others may write to.
///
/// Runtime and state directories are never trusted because they exist: another local user
/// who created `/tmp/pcmd-0` (mode 0777, with symlinks in it) before root's daemon started
/// made it overwrite root's files through its lock and log files, adopt a planted identity
/// key and talk to a planted socket.
pub fn ensure_private_dir(dir: &Path) -> Result<(), PrivateDirError> {
    let io_err = |source| PrivateDirError::Io {
        dir: dir.to_owned(),
        source,
    };
    let meta = match fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io_err)?;
            fs::symlink_metadata(dir).map_err(io_err)?
        }
        Err(e) => return Err(io_err(e)),
    };
    let unsafe_dir = |reason: String| PrivateDirError::Unsafe {
        dir: dir.to_owned(),
        reason,
    };
    if meta.file_type().is_symlink() {
        return Err(unsafe_dir(
            "it is a symbolic link; give a real directory".into(),
        ));
    }
    if !meta.is_dir() {
        return Err(unsafe_dir("it is not a directory".into()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(unsafe_dir(format!(
            "it belongs to user {}, not to this user ({me}); remove it, or choose another \
             directory",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "other users may write to it (mode {:o}); make it private (chmod 700) or choose \
             another directory",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Reads a secret this user keeps (a key file), or `Ok(None)` if there is none. Refuses a
/// symbolic link, a file of another user, and one that others may read or write: a key
/// another user planted, or could read, is not this node's secret.
pub fn read_private_file(path: &Path) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err("it is a symbolic link; refusing to follow it".into())
        }
        Err(e) => return Err(format!("cannot open: {e}")),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot examine: {e}"))?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "it belongs to user {}, not to this user ({me}): not adopting it",
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "other users may read or write it (mode {:o}): not adopting it; chmod 600 it if it \
             is yours, or remove it to get a new one",
            meta.mode() & 0o7777
        ));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_dirs_are_created_and_unsafe_ones_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let base = std::env::temp_dir().join(format!("pcm-proto-private-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let fresh = base.join("a/b");
        ensure_private_dir(&fresh).unwrap();
        let mode = fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Already there and private: fine.
        ensure_private_dir(&fresh).unwrap();
        // Writable by others, as an attacker would pre-create it.
        let open = base.join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let err = ensure_private_dir(&open).unwrap_err().to_string();
        assert!(
            err.contains("other users may write") && err.contains("777"),
            "{err}"
        );
        // A symlink to a private directory is still refused.
        let link = base.join("link");
        std::os::unix::fs::symlink(&fresh, &link).unwrap();
        let err = ensure_private_dir(&link).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        // A file is no directory.
        let file = base.join("file");
        fs::write(&file, b"x").unwrap();
        assert!(ensure_private_dir(&file)
            .unwrap_err()
            .to_string()
            .contains("not a directory"));
        // Another user's directory (as root, the test can make one).
        if nix::unistd::geteuid().is_root() {
            let theirs = base.join("theirs");
            fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let err = ensure_private_dir(&theirs).unwrap_err().to_string();
            assert!(err.contains("belongs to user 65534"), "{err}");
        }
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn private_files_are_read_and_shared_or_linked_ones_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let base = std::env::temp_dir().join(format!("pcm-proto-secret-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        ensure_private_dir(&base).unwrap();
        let key = base.join("key");
        assert_eq!(read_private_file(&key).unwrap(), None);
        fs::write(&key, b"secret").unwrap();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            read_private_file(&key).unwrap().as_deref(),
            Some(&b"secret"[..])
        );
        fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
        let err = read_private_file(&key).unwrap_err();
        assert!(err.contains("mode 644"), "{err}");
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        let err = read_private_file(&link).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&key, Some(65534), None).unwrap();
            let err = read_private_file(&key).unwrap_err();
            assert!(err.contains("belongs to user 65534"), "{err}");
        }
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn placeholder_and_defaults() {
        let host = HostName::new("node-b").unwrap();
        assert_eq!(
            socket_path(Some("/x/{host}.sock"), None, 0, &host),
            PathBuf::from("/x/node-b.sock")
        );
        assert_eq!(
            socket_path(None, Some("/run/user/7"), 7, &host),
            PathBuf::from("/run/user/7/pcmd/node-b.sock")
        );
        assert_eq!(
            socket_path(Some(""), None, 7, &host),
            PathBuf::from("/tmp/pcmd-7/node-b.sock")
        );
        // A relative runtime directory is ignored, as the XDG rules say.
        assert_eq!(
            socket_path(None, Some("run"), 7, &host),
            PathBuf::from("/tmp/pcmd-7/node-b.sock")
        );
    }

    #[test]
    fn given_xdg_variables_then_the_user_dirs_follow_the_xdg_rules() {
        let host = HostName::new("n1").unwrap();
        let dirs = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            UserDirs::from_vars(7, |key| {
                vars.iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| OsString::from(v))
            })
        };
        let all = dirs(&[
            ("XDG_RUNTIME_DIR", "/run/user/7"),
            ("XDG_STATE_HOME", "/s"),
            ("HOME", "/h"),
        ]);
        assert_eq!(all.runtime, Some(PathBuf::from("/run/user/7")));
        assert_eq!(all.pcmd_checkpoint_dir(&host), PathBuf::from("/s/pcmd/n1"));
        assert_eq!(
            all.pcmd_socket(None, &host),
            PathBuf::from("/run/user/7/pcmd/n1.sock")
        );
        // Empty or relative values count as unset; HOME stands in for the state home.
        let home = dirs(&[
            ("XDG_STATE_HOME", "rel"),
            ("XDG_RUNTIME_DIR", ""),
            ("HOME", "/h"),
        ]);
        assert_eq!(home.runtime, None);
        assert_eq!(home.state, Some(PathBuf::from("/h/.local/state")));
        assert_eq!(
            home.pcmd_socket_template(None),
            "/tmp/pcmd-7/{host}.sock".to_owned()
        );
        let none = dirs(&[("HOME", "")]);
        assert_eq!(
            none.pcmd_checkpoint_dir(&host),
            PathBuf::from("/tmp/pcmd-7/checkpoints-n1")
        );
    }
}
