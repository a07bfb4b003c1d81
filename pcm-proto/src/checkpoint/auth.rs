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
//! it sends any checkpoint. The key is the pool's [`PoolKey`], read from the pool key file
//! `ios-agent keygen` writes.

use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};

pub use crate::pool_key::PoolKey;

use super::Digest;

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

// The HMAC proofs are methods of the one pool key type ([`crate::pool_key`]).
impl PoolKey {
    fn mac(&self, role: &[u8], first: &Nonce, second: &Nonce) -> Digest {
        // Any key length is valid for HMAC: this cannot fail.
        let mut mac = match HmacSha256::new_from_slice(&self.to_bytes()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/key/swarm/psk/1.0.0/\n/base16/\n\
        00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";

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
