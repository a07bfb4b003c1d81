//! Mutual authentication of two pcmds by the pool key: an HMAC-SHA-256 challenge-response.
//!
//! ```text
//! client -> server  Hello    { version, client_nonce }
//! server -> client  Challenge{ version, server_nonce, server_proof }   proof = HMAC(key, "server" | client_nonce | server_nonce)
//! client -> server  Proof    { client_proof }                          proof = HMAC(key, "client" | server_nonce | client_nonce)
//! server -> client  Response::Welcome (or Response::Error and close)
//! ```
//!
//! Each side proves knowledge of the key over a nonce the other chose, so a recorded
//! exchange cannot be replayed, and the client learns that the server holds the key before
//! it sends any checkpoint. The key file is the pool key file `ios-agent keygen` writes:
//! `/key/swarm/psk/1.0.0/`, `/base16/`, 64 hex digits.

use std::fmt;
use std::path::Path;

use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};

use super::{Digest, Error};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// A random challenge.
pub type Nonce = [u8; 32];

/// First frame from the connecting pcmd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The client's [`FORMAT_VERSION`](super::FORMAT_VERSION).
    pub version: u32,
    /// The client's challenge.
    pub client_nonce: Nonce,
}

/// The server's answer to [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Challenge {
    /// The server's version.
    pub version: u32,
    /// The server's challenge.
    pub server_nonce: Nonce,
    /// HMAC proving the server holds the key.
    pub server_proof: Digest,
}

/// The client's proof.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// HMAC proving the client holds the key.
    pub client_proof: Digest,
}

/// The pool's shared key. `Debug` and `Display` show a fingerprint only.
#[derive(Clone)]
pub struct PoolKey([u8; 32]);

impl PoolKey {
    /// Wraps raw key bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        PoolKey(bytes)
    }

    /// Parses the key file form.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines().map(str::trim);
        if lines.next() != Some("/key/swarm/psk/1.0.0/") {
            return Err("first line is not /key/swarm/psk/1.0.0/".into());
        }
        if lines.next() != Some("/base16/") {
            return Err("second line is not /base16/".into());
        }
        let hex = lines.next().unwrap_or("");
        if hex.len() != 64 || !hex.is_ascii() {
            return Err("key is not 64 hex digits".into());
        }
        let mut key = [0u8; 32];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                .map_err(|_| "key has a non-hex digit".to_owned())?;
        }
        Ok(PoolKey(key))
    }

    /// Reads a key file; the error names the file.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Auth(format!("cannot read pool key file {}: {e}", path.display()))
        })?;
        Self::parse(&text).map_err(|reason| {
            Error::Auth(format!(
                "pool key file {} is not a pool key ({reason}); expected three lines: \
                 /key/swarm/psk/1.0.0/, /base16/, 64 hex digits",
                path.display()
            ))
        })
    }

    /// Identifies the key without revealing it.
    pub fn fingerprint(&self) -> String {
        let d = Digest::of(&[b"pcmd-pool-key-fingerprint".as_slice(), &self.0].concat());
        d.to_string()[..16].to_owned()
    }

    fn mac(&self, role: &[u8], first: &Nonce, second: &Nonce) -> Digest {
        // Any key length is valid for HMAC: this cannot fail.
        let mut mac = match HmacSha256::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(e) => unreachable!("HMAC refused a 32-byte key: {e}"),
        };
        mac.update(b"pcmd-buddy-v1/");
        mac.update(role);
        mac.update(first);
        mac.update(second);
        Digest(mac.finalize().into_bytes().into())
    }

    /// The server's proof over the two nonces.
    pub fn server_proof(&self, client_nonce: &Nonce, server_nonce: &Nonce) -> Digest {
        self.mac(b"server", client_nonce, server_nonce)
    }

    /// The client's proof over the two nonces.
    pub fn client_proof(&self, server_nonce: &Nonce, client_nonce: &Nonce) -> Digest {
        self.mac(b"client", server_nonce, client_nonce)
    }

    /// Compares a received proof with the expected one in constant time.
    pub fn verify(expected: &Digest, received: &Digest) -> bool {
        expected
            .0
            .iter()
            .zip(received.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
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
    fn parses_the_pool_key_file_and_hides_it() {
        let key = PoolKey::parse(FILE).unwrap();
        assert!(!format!("{key:?}").contains("00112233"));
        assert!(PoolKey::parse("/key/swarm/psk/1.0.0/\n/base16/\nabcd")
            .unwrap_err()
            .contains("64 hex"));
        assert!(PoolKey::parse("hello").is_err());
        let bad = FILE.replace("ff\n", "fg\n");
        assert!(PoolKey::parse(&bad).unwrap_err().contains("non-hex"));
    }

    #[test]
    fn proofs_depend_on_key_role_and_nonces() {
        let key = PoolKey::parse(FILE).unwrap();
        let other = PoolKey::from_bytes([7; 32]);
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let p = key.server_proof(&a, &b);
        assert!(PoolKey::verify(&p, &key.server_proof(&a, &b)));
        assert!(!PoolKey::verify(&p, &other.server_proof(&a, &b)));
        assert!(!PoolKey::verify(&p, &key.client_proof(&a, &b)));
        assert!(!PoolKey::verify(&p, &key.server_proof(&b, &a)));
    }
}
