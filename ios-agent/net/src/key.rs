//! The pool key ([`PoolKey`], defined in `pcm-proto` for every program of the pool) as the
//! pre-shared key of a libp2p private network. Only nodes holding it can open a connection
//! to the pool's agents and peer servers (issue 4, "Security").

use libp2p::pnet::PreSharedKey;

pub use pcm_proto::pool_key::{KeyError, PoolKey};

/// The libp2p pre-shared key of a pool key.
pub fn pre_shared_key(key: &PoolKey) -> PreSharedKey {
    PreSharedKey::new(key.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libp2p_shows_the_fingerprint_the_pool_key_shows() {
        for key in [
            PoolKey::from_bytes([0; 32]),
            PoolKey::from_bytes([0xa5; 32]),
            PoolKey::generate(),
            PoolKey::generate(),
        ] {
            let psk = pre_shared_key(&key);
            assert_eq!(psk.fingerprint().to_string(), key.fingerprint());
            // The key files agree too, so either side reads what the other writes.
            assert_eq!(psk.to_key_file(), key.to_key_file());
            assert_eq!(
                PoolKey::parse(&psk.to_key_file()).expect("parses"),
                key,
                "{key:?}"
            );
        }
    }
}
