//! Bytes between the ranks: PCM's own data encoded as CBOR, bytes of any length broadcast
//! from one rank, and every rank's host name gathered on all of them.

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use pcm_proto::HostName;
use serde::Serialize;

/// Bytes reserved for a host name in the placement exchange.
const HOST_SLOT: usize = 256;

/// Encodes PCM's own data (which always encodes) as CBOR.
pub(crate) fn encode_cbor<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut bytes = Vec::new();
    if let Err(e) = ciborium::into_writer(value, &mut bytes) {
        unreachable!("encoding PCM's own data into memory failed: {e}");
    }
    bytes
}

/// Broadcasts bytes of any length from `root` (which passes `Some`).
pub(crate) fn broadcast_bytes(
    comm: &SimpleCommunicator,
    root: i32,
    bytes: Option<Vec<u8>>,
) -> Vec<u8> {
    let root_process = comm.process_at_rank(root);
    let mut len = bytes.as_ref().map_or(0, |b| b.len() as u64);
    root_process.broadcast_into(&mut len);
    let mut buffer = bytes.unwrap_or_else(|| vec![0u8; len as usize]);
    if len > 0 {
        root_process.broadcast_into(&mut buffer[..]);
    }
    buffer
}

/// Every process of `comm` learns every other's host name, in rank order.
pub(crate) fn exchange_hosts(comm: &SimpleCommunicator, host: &HostName) -> Vec<HostName> {
    let mut mine = [0u8; HOST_SLOT];
    let bytes = host.as_str().as_bytes();
    mine[..bytes.len().min(HOST_SLOT)].copy_from_slice(&bytes[..bytes.len().min(HOST_SLOT)]);
    let mut all = vec![0u8; HOST_SLOT * comm.size() as usize];
    comm.all_gather_into(&mine[..], &mut all[..]);
    all.chunks(HOST_SLOT)
        .map(|slot| {
            let end = slot.iter().position(|&b| b == 0).unwrap_or(slot.len());
            let name = String::from_utf8_lossy(&slot[..end]).into_owned();
            HostName::new(name)
                .unwrap_or_else(|_| HostName::new("unknown").expect("literal is valid"))
        })
        .collect()
}
