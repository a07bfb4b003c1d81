//! Moving a malleable job's state in a resize: the rows of each declared array from their
//! old owners to their new ones, point to point, and rank 0's replicated entries to every
//! process of the new world (see the `malleable` module for what goes where).

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::error::PcmError;
use crate::malleable::{block_rows, pieces, Blocks, Merged};
use crate::store::{Blob, Data, Entry, EntryHeader, Kind, Store};
use crate::wire::{broadcast_bytes, encode_cbor};

/// Largest piece sent in one MPI message, in bytes: MPI counts are 32-bit.
const CHUNK_BYTES: usize = 1 << 30;
/// Tag of the rows of the first declared array (the next ones count up from it).
const ROWS_TAG: i32 = 0x0050_5200;

/// Why the rows `rank` of `size` stored do not fit the declared arrays, or `None`.
pub(crate) fn stored_block_problem(
    store: &Store,
    blocks: &Blocks,
    rank: u32,
    size: u32,
) -> Option<String> {
    blocks.iter().find_map(|(name, decl)| {
        let rows = block_rows(decl.rows, rank, size);
        let expected = (rows.end - rows.start) * decl.row_bytes();
        match store.entry(name) {
            None => Some(format!(
                "rank {rank} stored no rows of the distributed array {name:?} (Pcm::store_block, PCM_Store_block) for the resize"
            )),
            Some(entry) if entry.kind != Kind::Array || entry.type_name != decl.type_name => {
                Some(format!(
                    "rank {rank} stored the distributed array {name:?} as {}, but it is declared as {}",
                    entry.type_name, decl.type_name
                ))
            }
            Some(entry) if entry.data.len() as u64 != expected => Some(format!(
                "rank {rank} stored {} elements of the distributed array {name:?}, but its rows {}..{} of {} elements are {} elements",
                entry.data.len() as u64 / decl.element_bytes.max(1),
                rows.start,
                rows.end,
                decl.row_len,
                expected / decl.element_bytes.max(1)
            )),
            Some(_) => None,
        }
    })
}

/// Where the old state of a redistribution is: the pieces this process holds (old rank and
/// its stored entries), and the process of the communicator holding each old rank's piece.
pub(crate) struct Sources<'a> {
    /// Old ranks whose pieces this process holds, with their entries.
    pub(crate) held: Vec<(u32, &'a Store)>,
    /// The communicator rank holding old rank `p`'s piece.
    pub(crate) holder: &'a dyn Fn(u32) -> u32,
}

/// Carries out the state transfer of a resize on one process of `comm` (the merged
/// communicator, or the old world in a pure shrink): the parents are its ranks `0..old`
/// (each with its `store`), and the process taking new rank `k` is `order[k]`. Returns the
/// store of this process in the new world (`None` if it leaves) and the bytes of rows it
/// sent to other processes. Collective over `comm`.
pub(crate) fn redistribute(
    comm: &SimpleCommunicator,
    store: &Store,
    blocks: &Blocks,
    old: u32,
    order: &[Merged],
) -> Result<(Option<Store>, u64), PcmError> {
    let me = comm.rank() as u32;
    let parent = |p: u32| p;
    let sources = Sources {
        held: (me < old).then_some((me, store)).into_iter().collect(),
        holder: &parent,
    };
    redistribute_from(comm, &sources, blocks, old, order)
}

/// [`redistribute`] from pieces held anywhere (`sources`): a restart from a checkpoint
/// taken at another width uses it with the pieces each rank fetched. The holder of old
/// rank 0's piece must be rank 0 of `comm`: it sends the replicated entries.
pub(crate) fn redistribute_from(
    comm: &SimpleCommunicator,
    sources: &Sources<'_>,
    blocks: &Blocks,
    old: u32,
    order: &[Merged],
) -> Result<(Option<Store>, u64), PcmError> {
    let me = comm.rank() as u32;
    let new = order.len() as u32;
    let new_rank = order.iter().position(|&m| m == me).map(|k| k as u32);
    let held = |p: u32| sources.held.iter().find(|(q, _)| *q == p).map(|(_, s)| *s);
    let mut out = new_rank.map(|_| Store::default());
    for (name, entry) in replicate(comm, held(0), blocks)? {
        if let Some(out) = &mut out {
            out.insert_entry(name, entry);
        }
    }
    let mut sent = 0u64;
    for (index, (name, decl)) in blocks.iter().enumerate() {
        let tag = ROWS_TAG + index as i32;
        let row_bytes = decl.row_bytes() as usize;
        let all = pieces(decl.rows, old, new);
        // The bytes of global rows `rows` in old rank `p`'s stored block, held here.
        let held_bytes = |p: u32, rows: &std::ops::Range<u64>| -> Result<&[u8], PcmError> {
            let bytes = held(p)
                .and_then(|s| s.entry(name))
                .map(|e| e.data.bytes())
                .ok_or(PcmError::internal("a declared array was not stored"))?;
            let first = block_rows(decl.rows, p, old).start;
            bytes
                .get(
                    (rows.start - first) as usize * row_bytes
                        ..(rows.end - first) as usize * row_bytes,
                )
                .ok_or(PcmError::internal("stored rows shorter than their block"))
        };
        let mut blob = new_rank.map(|k| {
            let rows = block_rows(decl.rows, k, new);
            Blob::zeroed((rows.end - rows.start) as usize * row_bytes)
        });
        mpi::request::scope(|scope| -> Result<(), PcmError> {
            let mut sends = Vec::new();
            let mut receives = Vec::new();
            // Both sides post the pieces between two processes in the same order (that of
            // `all`), so that equal tags cannot mix them up.
            for piece in all.iter().filter(|p| held(p.from).is_some()) {
                let to = order[piece.to as usize];
                if to == me {
                    continue; // copied below
                }
                let bytes = held_bytes(piece.from, &piece.rows)?;
                sent += bytes.len() as u64;
                let process = comm.process_at_rank(to as i32);
                for chunk in bytes.chunks(CHUNK_BYTES) {
                    sends.push(process.immediate_send_with_tag(scope, chunk, tag));
                }
            }
            if let (Some(k), Some(blob)) = (new_rank, blob.as_mut()) {
                let mut rest: &mut [u8] = blob.bytes_mut();
                for piece in all.iter().filter(|p| p.to == k) {
                    let len = (piece.rows.end - piece.rows.start) as usize * row_bytes;
                    let (here, tail) = std::mem::take(&mut rest).split_at_mut(len);
                    rest = tail;
                    if held(piece.from).is_some() {
                        here.copy_from_slice(held_bytes(piece.from, &piece.rows)?);
                        continue;
                    }
                    let process = comm.process_at_rank((sources.holder)(piece.from) as i32);
                    for chunk in here.chunks_mut(CHUNK_BYTES) {
                        receives.push(process.immediate_receive_into_with_tag(scope, chunk, tag));
                    }
                }
            }
            for request in sends {
                request.wait();
            }
            for request in receives {
                request.wait();
            }
            Ok(())
        })?;
        if let (Some(out), Some(blob)) = (&mut out, blob) {
            out.insert_entry(
                name.clone(),
                Entry {
                    kind: Kind::Array,
                    type_name: decl.type_name.clone(),
                    data: Data::Blob(blob),
                },
            );
        }
    }
    Ok((out, sent))
}

/// Rank 0's entries that are not declared arrays, as every process of `comm` receives them
/// (rank 0 included, from its own broadcast). Collective over `comm`.
fn replicate(
    comm: &SimpleCommunicator,
    store: Option<&Store>,
    blocks: &Blocks,
) -> Result<Vec<(String, Entry)>, PcmError> {
    let root = comm.rank() == 0;
    let replicated = || {
        store
            .into_iter()
            .flat_map(Store::named_entries)
            .filter(|(name, _)| !blocks.contains_key(*name))
    };
    let headers = root.then(|| {
        let headers: Vec<EntryHeader> = replicated()
            .map(|(name, e)| EntryHeader {
                name: name.clone(),
                kind: e.kind,
                type_name: e.type_name.clone(),
                len: e.data.len() as u64,
            })
            .collect();
        encode_cbor(&headers)
    });
    let bytes = root.then(|| {
        replicated()
            .flat_map(|(_, e)| e.data.bytes().iter().copied())
            .collect::<Vec<u8>>()
    });
    let headers = broadcast_bytes(comm, 0, headers);
    let bytes = broadcast_bytes(comm, 0, bytes);
    let headers: Vec<EntryHeader> =
        ciborium::from_reader(headers.as_slice()).map_err(|e| PcmError::Handover(e.to_string()))?;
    let mut offset = 0usize;
    let mut entries = Vec::with_capacity(headers.len());
    for h in headers {
        let len = usize::try_from(h.len)
            .ok()
            .filter(|len| offset + len <= bytes.len())
            .ok_or_else(|| PcmError::Handover(format!("replicated entry {:?} overruns", h.name)))?;
        let data = Data::Blob(Blob::from_bytes(&bytes[offset..offset + len]));
        offset += len;
        entries.push((
            h.name,
            Entry {
                kind: h.kind,
                type_name: h.type_name,
                data,
            },
        ));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::malleable::BlockDecl;

    fn blocks() -> Blocks {
        let mut b = Blocks::new();
        b.insert(
            "grid".into(),
            BlockDecl {
                type_name: crate::store::type_label::<[f64]>(),
                element_bytes: 8,
                rows: 10,
                row_len: 4,
            },
        );
        b
    }

    /// A bad stored block is named with its rank, array and lengths; a good one passes.
    #[test]
    fn given_stored_rows_then_problems_name_the_rank_array_and_lengths() {
        let mut store = Store::default();
        assert!(stored_block_problem(&store, &blocks(), 1, 3)
            .unwrap()
            .contains("rank 1 stored no rows of the distributed array \"grid\""));
        // Rank 1 of 3 owns rows 4..7: 12 elements.
        store.store_array("grid", &[0.0f64; 11]).unwrap();
        let problem = stored_block_problem(&store, &blocks(), 1, 3).unwrap();
        assert!(
            problem.contains("stored 11 elements")
                && problem.contains("rows 4..7")
                && problem.contains("are 12 elements"),
            "{problem}"
        );
        store.store_array("grid", &[0i64; 12]).unwrap();
        assert!(stored_block_problem(&store, &blocks(), 1, 3)
            .unwrap()
            .contains("declared as [f64]"));
        store.store_array("grid", &[0.0f64; 12]).unwrap();
        assert_eq!(stored_block_problem(&store, &blocks(), 1, 3), None);
    }
}
