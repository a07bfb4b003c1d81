//! The pool key: the pre-shared key of a libp2p private network. Only nodes holding it can
//! open a connection to the pool's agents and peer servers (issue 4, "Security").

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use libp2p::pnet::PreSharedKey;

/// A pool's shared key, in memory. `Debug` and `Display` show only its fingerprint.
///
/// On disk it is the standard private-network key file (as go-libp2p and rust-libp2p write
/// it): three lines, `/key/swarm/psk/1.0.0/`, `/base16/`, and 64 hex digits.
#[derive(Clone, Copy)]
pub struct PoolKey(PreSharedKey);

/// A pool key that could not be read, parsed or written.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file does not exist.
    #[error("pool key file {path} does not exist (create one with `ios-agent keygen {path}` and copy it to every node with mode 0600)")]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The key file could not be read.
    #[error("cannot read pool key file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file's content is not a key in the standard form.
    #[error("pool key file {path} is not a pool key ({reason}); expected three lines: /key/swarm/psk/1.0.0/, /base16/, 64 hex digits")]
    Parse {
        /// The file, or `<text>` when parsing a string.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A new key file could not be written (for example because it already exists).
    #[error("cannot write pool key file {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl PoolKey {
    /// A new random key.
    pub fn generate() -> Self {
        PoolKey(PreSharedKey::new(rand::random::<[u8; 32]>()))
    }

    /// Parses the standard key file form. `path` only names the source in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, KeyError> {
        PreSharedKey::from_str(text)
            .map(PoolKey)
            .map_err(|e| KeyError::Parse {
                path: path.to_owned(),
                reason: match e {
                    libp2p::pnet::KeyParseError::InvalidKeyFile => {
                        "fewer than three lines".to_owned()
                    }
                    libp2p::pnet::KeyParseError::InvalidKeyType => {
                        "first line is not /key/swarm/psk/1.0.0/".to_owned()
                    }
                    libp2p::pnet::KeyParseError::InvalidKeyEncoding => {
                        "second line is not /base16/".to_owned()
                    }
                    libp2p::pnet::KeyParseError::InvalidKeyLength => {
                        "key is not 64 hex digits".to_owned()
                    }
                    libp2p::pnet::KeyParseError::InvalidKeyChar(e) => {
                        format!("key has a non-hex digit: {e}")
                    }
                },
            })
    }

    /// Reads a key file. Warns (log) if the file is readable by others.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, KeyError> {
        let path = path.as_ref();
        let text = fs::read_to_string(path).map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                KeyError::Missing {
                    path: path.to_owned(),
                }
            } else {
                KeyError::Read {
                    path: path.to_owned(),
                    source,
                }
            }
        })?;
        if let Ok(meta) = fs::metadata(path) {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(
                    "pool key file {} is readable by group or others (mode {:o}); 0600 is advised",
                    path.display(),
                    meta.permissions().mode() & 0o777
                );
            }
        }
        Self::parse(&text, path)
    }

    /// Generates a new key and writes it to a new file of mode 0600. Refuses to overwrite an
    /// existing file, so a pool's key is never replaced by accident.
    pub fn generate_to_file(path: impl AsRef<Path>) -> Result<Self, KeyError> {
        let key = Self::generate();
        key.write_new(path)?;
        Ok(key)
    }

    /// Writes this key to a new file of mode 0600 (refuses to overwrite).
    pub fn write_new(&self, path: impl AsRef<Path>) -> Result<(), KeyError> {
        let path = path.as_ref();
        let err = |source| KeyError::Write {
            path: path.to_owned(),
            source,
        };
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        f.write_all(self.0.to_key_file().as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)
    }

    /// The key file text. It contains the secret: never log it.
    pub fn to_key_file(&self) -> String {
        self.0.to_key_file()
    }

    /// A fingerprint that identifies the key without revealing it (hex).
    pub fn fingerprint(&self) -> String {
        self.0.fingerprint().to_string()
    }

    pub(crate) fn psk(&self) -> PreSharedKey {
        self.0
    }
}

impl fmt::Debug for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PoolKey(fingerprint {})", self.fingerprint())
    }
}

impl fmt::Display for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pool key {}", self.fingerprint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_file_of_mode_0600() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pool.key");
        let key = PoolKey::generate_to_file(&path).expect("writes");
        let mode = fs::metadata(&path).expect("exists").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let back = PoolKey::from_file(&path).expect("reads");
        assert_eq!(back.fingerprint(), key.fingerprint());
        // Never overwrites.
        let again = PoolKey::generate_to_file(&path).expect_err("exists");
        assert!(again.to_string().contains("pool.key"), "{again}");
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("none.key");
        let e = PoolKey::from_file(&missing).expect_err("missing");
        assert!(matches!(e, KeyError::Missing { .. }));
        assert!(e.to_string().contains("none.key"), "{e}");

        let bad = dir.path().join("bad.key");
        fs::write(&bad, "/key/swarm/psk/1.0.0/\n/base16/\nabcd\n").expect("write");
        let e = PoolKey::from_file(&bad).expect_err("short");
        assert!(e.to_string().contains("bad.key"), "{e}");
        assert!(e.to_string().contains("64 hex"), "{e}");

        fs::write(&bad, "hello").expect("write");
        assert!(PoolKey::from_file(&bad).is_err());
    }

    #[test]
    fn debug_and_display_hide_the_key() {
        let key = PoolKey::generate();
        let file = key.to_key_file();
        let secret = file.lines().nth(2).expect("three lines");
        assert!(!format!("{key:?}").contains(secret));
        assert!(!format!("{key}").contains(secret));
    }
}
