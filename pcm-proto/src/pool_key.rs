//! The pool key: one secret shared by every node of a pool (issue 4, "Security").
//!
//! The IOS agents and peer servers run their libp2p private network on it (the conversion
//! to libp2p's pre-shared key is in `ios-agent-net`), and the pcmds authenticate their
//! checkpoint copies with it ([`crate::checkpoint::auth`]). This is the one type for it, so
//! that every program reads the same file the same way and prints the same fingerprint.
//!
//! On disk it is the standard private-network key file (as go-libp2p and rust-libp2p write
//! it): three lines, `/key/swarm/psk/1.0.0/`, `/base16/`, and 64 hex digits. Its
//! fingerprint is the standard one too (what libp2p and go-ipfs print for a swarm key):
//! 16 bytes of SHAKE-128 over the Salsa20 keystream of the key with nonce `finprint`, in hex.

use std::fmt;
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Bytes of a pool key.
pub const KEY_LEN: usize = 32;

/// First line of a key file.
const KEY_TYPE: &str = "/key/swarm/psk/1.0.0/";
/// Second line of a key file.
const ENCODING: &str = "/base16/";

/// A pool's shared key, in memory. `Debug` and `Display` show only its fingerprint.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PoolKey([u8; KEY_LEN]);

/// A pool key that could not be read, parsed or written.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file does not exist.
    #[error("pool key file {} does not exist (create one with `ios-agent keygen {}` and copy it to every node with mode 0600)", path.display(), path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The key file could not be read.
    #[error("cannot read pool key file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file's content is not a key in the standard form.
    #[error("pool key file {} is not a pool key ({reason}); expected three lines: /key/swarm/psk/1.0.0/, /base16/, 64 hex digits", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A new key file could not be written (for example because it already exists).
    #[error("cannot write pool key file {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl PoolKey {
    /// Wraps raw key bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        PoolKey(bytes)
    }

    /// The raw key. It is the secret: never log it.
    pub fn to_bytes(&self) -> [u8; KEY_LEN] {
        self.0
    }

    /// A new random key.
    pub fn generate() -> Self {
        PoolKey(rand::random::<[u8; KEY_LEN]>())
    }

    /// Parses the key file form; the error says what is wrong, without the file's name.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines();
        let (Some(key_type), Some(encoding), Some(hex)) =
            (lines.next(), lines.next(), lines.next())
        else {
            return Err("fewer than three lines".into());
        };
        if key_type.trim() != KEY_TYPE {
            return Err("first line is not /key/swarm/psk/1.0.0/".into());
        }
        if encoding.trim() != ENCODING {
            return Err("second line is not /base16/".into());
        }
        let hex = hex.trim();
        if hex.len() != 2 * KEY_LEN || !hex.is_ascii() {
            return Err("key is not 64 hex digits".into());
        }
        let mut key = [0u8; KEY_LEN];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                .map_err(|e| format!("key has a non-hex digit: {e}"))?;
        }
        Ok(PoolKey(key))
    }

    /// Reads a key file; errors name the file. Warns (log) if the file is readable by others.
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
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(
                    "pool key file {} is readable by group or others (mode {mode:o}); 0600 is advised",
                    path.display(),
                );
            }
        }
        Self::parse(&text).map_err(|reason| KeyError::Parse {
            path: path.to_owned(),
            reason,
        })
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
        f.write_all(self.to_key_file().as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)
    }

    /// The key file text. It contains the secret: never log it.
    pub fn to_key_file(&self) -> String {
        let mut text = format!("{KEY_TYPE}\n{ENCODING}\n");
        for byte in self.0 {
            text.push_str(&format!("{byte:02x}"));
        }
        text.push('\n');
        text
    }

    /// A fingerprint that identifies the key without revealing it: 32 hex digits, the same
    /// that libp2p (`PreSharedKey::fingerprint`) and go-ipfs show for this key.
    pub fn fingerprint(&self) -> String {
        use salsa20::cipher::{KeyIvInit as _, StreamCipher as _};
        use shake::{ExtendableOutput as _, Update as _, XofReader as _};

        let mut stream = [0u8; 64];
        let nonce: [u8; 8] = *b"finprint";
        let mut cipher = salsa20::Salsa20::new(&self.0.into(), &nonce.into());
        cipher.apply_keystream(&mut stream);
        let mut hasher = shake::Shake128::default();
        hasher.update(&stream);
        let mut out = [0u8; 16];
        hasher.finalize_xof().read(&mut out);
        out.iter().map(|b| format!("{b:02x}")).collect()
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

    const FILE: &str = "/key/swarm/psk/1.0.0/\n/base16/\n\
        00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";

    #[test]
    fn the_fingerprint_is_the_one_libp2p_and_go_ipfs_show() {
        // The key and fingerprint of libp2p-pnet's own test, "checked against go-ipfs output".
        let key = PoolKey::parse(
            "/key/swarm/psk/1.0.0/\n/base16/\n\
             6189c5cf0b87fb800c1a9feeda73c6ab5e998db48fb9e6a978575c770ceef683",
        )
        .unwrap();
        assert_eq!(key.fingerprint(), "45fc986bbc9388a11d939df26f730f0c");
        assert_eq!(
            PoolKey::parse(FILE).unwrap().fingerprint(),
            "8ec6e53ac31ac3988033aff74e8e0290",
        );
    }

    #[test]
    fn parses_the_pool_key_file_and_hides_it() {
        let key = PoolKey::parse(FILE).unwrap();
        assert!(!format!("{key:?}").contains("00112233"));
        assert!(!format!("{key}").contains("00112233"));
        assert_eq!(PoolKey::parse(&key.to_key_file()).unwrap(), key);
        assert_eq!(key.to_key_file(), FILE);
        assert!(PoolKey::parse("/key/swarm/psk/1.0.0/\n/base16/\nabcd")
            .unwrap_err()
            .contains("64 hex"));
        assert!(PoolKey::parse("hello").is_err());
        assert!(PoolKey::parse(&FILE.replace("base16", "base64"))
            .unwrap_err()
            .contains("second line"));
        let bad = FILE.replace("ff\n", "fg\n");
        assert!(PoolKey::parse(&bad).unwrap_err().contains("non-hex"));
    }

    #[test]
    fn round_trips_through_a_file_of_mode_0600() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pool.key");
        let key = PoolKey::generate_to_file(&path).expect("writes");
        let mode = fs::metadata(&path).expect("exists").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let back = PoolKey::from_file(&path).expect("reads");
        assert_eq!(back, key);
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
        assert!(e.to_string().contains("ios-agent keygen"), "{e}");

        let bad = dir.path().join("bad.key");
        fs::write(&bad, "/key/swarm/psk/1.0.0/\n/base16/\nabcd\n").expect("write");
        let e = PoolKey::from_file(&bad).expect_err("short");
        assert!(e.to_string().contains("bad.key"), "{e}");
        assert!(e.to_string().contains("64 hex"), "{e}");

        fs::write(&bad, "hello").expect("write");
        assert!(PoolKey::from_file(&bad).is_err());
    }
}
