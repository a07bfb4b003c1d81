//! Checkpoints of a malleable job, and restarts at another width (docs/malleability.md).
//!
//! A job that declared distributed arrays takes its checkpoints in *block form*: each rank
//! stores its rows of each array ([`crate::Pcm::resizing`] is true during the checkpoint,
//! as in a resize) and the replicated values, and PCM adds the declarations themselves
//! under [`BLOCKS_ENTRY`]. Such a checkpoint, taken with N ranks, can restart a job of M
//! ranks: rank 0 finds the newest one among the widths its pcmd holds, old rank `p`'s piece
//! is fetched by rank `p % M` from its own pcmd (which fetches from the buddy what it does
//! not hold), and the rows go to their new owners exactly as in a resize (the
//! `malleable_store` module). A checkpoint not in block form cannot be spread over another
//! width: the restart then finds nothing to resume, and says why.

use mpi::collective::SystemOperation;
use mpi::traits::*;
use pcm_proto::checkpoint::{expect_frame, write_frame, Request, Response, Series};
use pcm_proto::Rank;

use super::{answer, connect, fetch, list, refusal, Listing};
use crate::error::PcmError;
use crate::handle::Pcm;
use crate::malleable::{Blocks, Merged};
use crate::malleable_store::{redistribute_from, stored_block_problem, Sources};
use crate::store::{type_label, Blob, Data, Entry, Kind, Store};
use crate::wire::{broadcast_bytes, encode_cbor};

/// The entry under which a block-form checkpoint keeps the job's array declarations.
pub(crate) const BLOCKS_ENTRY: &str = crate::store::RESERVED_NAME;

/// Before a checkpoint is written: marks this rank's stored state as block form when the
/// job declared arrays and this rank stored exactly its rows of each. (Inserted directly:
/// the job's events count the application's own store and load calls only.)
pub(crate) fn mark_block_form(pcm: &mut Pcm) {
    if pcm.job.blocks.is_empty()
        || stored_block_problem(&pcm.store, &pcm.job.blocks, pcm.rank, pcm.size).is_some()
    {
        return;
    }
    pcm.store.insert_entry(
        BLOCKS_ENTRY.to_owned(),
        Entry {
            kind: Kind::Value,
            type_name: type_label::<Blocks>(),
            data: Data::Blob(Blob::from_bytes(&encode_cbor(&pcm.job.blocks))),
        },
    );
}

/// The declarations a loaded store carries, if it is in block form.
pub(crate) fn block_form(store: &Store) -> Option<Blocks> {
    let entry = store.entry(BLOCKS_ENTRY)?;
    ciborium::from_reader(entry.data.bytes()).ok()
}

/// The widths of this job's series other than its own that the node's pcmd holds.
fn other_widths(pcm: &Pcm) -> Result<Vec<u32>, String> {
    let (mut reader, mut writer) = connect(pcm)?;
    let request = Request::Widths {
        app: pcm.job.app.clone(),
        name: pcm.job.job_name.clone(),
    };
    write_frame(&mut writer, &request)
        .and_then(|()| std::io::Write::flush(&mut writer))
        .map_err(|e| e.to_string())?;
    match expect_frame(&mut reader).map_err(|e| e.to_string())? {
        Response::Widths { sizes } => Ok(sizes.into_iter().filter(|&s| s != pcm.size).collect()),
        other => Err(answer(other)),
    }
}

fn series_of(pcm: &Pcm, size: u32) -> Series {
    Series {
        app: pcm.job.app.clone(),
        size,
        name: pcm.job.job_name.clone(),
    }
}

/// What rank 0 found: the width and iteration of the newest checkpoint at another width,
/// or why it must not be resumed.
type Found = Result<Option<(u32, u64)>, String>;

/// Rank 0: the newest checkpoint of this job's application at another width whose piece
/// of rank 0 its pcmd can give.
fn find(pcm: &Pcm, force: bool) -> Found {
    let widths = other_widths(pcm)?;
    let mut best: Option<(u32, u64, Listing)> = None;
    for width in widths {
        let Ok(listing) = list(pcm, &series_of(pcm, width), Rank(0)) else {
            continue;
        };
        let Some(newest) = listing.available.first().map(|a| a.iteration) else {
            continue;
        };
        if best.as_ref().is_none_or(|(_, i, _)| newest > *i) {
            best = Some((width, newest, listing));
        }
    }
    let Some((width, iteration, listing)) = best else {
        return Ok(None);
    };
    if !force {
        if let Some(reason) = refusal(pcm, &listing, &series_of(pcm, width)) {
            return Err(reason);
        }
    }
    Ok(Some((width, iteration)))
}

/// Restores the newest checkpoint taken at another width, spreading its rows over this
/// job's ranks. Collective. `Ok(Some((iteration, reconfigurations, store)))` when it did;
/// `Ok(None)` with the reason logged on rank 0 when there is none to resume; an error when
/// the one found must not be resumed (another computation's, or a finished job's).
pub(crate) fn restore(pcm: &Pcm, force: bool) -> Result<Option<(u64, u64, Store)>, PcmError> {
    let found = (pcm.rank == 0).then(|| encode_cbor(&find(pcm, force)));
    let bytes = broadcast_bytes(&pcm.world, 0, found);
    let found: Found =
        ciborium::from_reader(bytes.as_slice()).map_err(|e| PcmError::Handover(e.to_string()))?;
    let (old, iteration) = match found {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(None),
        Err(reason) => return Err(PcmError::Restart(reason)),
    };
    let size = pcm.size;
    let series = series_of(pcm, old);
    // Old rank p's piece is fetched by rank p % size.
    let mine: Vec<u32> = (pcm.rank..old).step_by(size as usize).collect();
    let mut held: Vec<(u32, Store)> = Vec::new();
    let mut reconfigurations = 0u64;
    let mut problem: Option<String> = None;
    for &p in &mine {
        let fetched = list(pcm, &series, Rank(p)).and_then(|listing| {
            let available = listing
                .available
                .iter()
                .find(|a| a.iteration == iteration)
                .ok_or_else(|| format!("no piece of rank {p} of the checkpoint at iteration {iteration} of {series} is reachable from this node"))?;
            fetch(pcm, &series, Rank(p), available)
        });
        match fetched {
            Ok((store, count)) => {
                reconfigurations = reconfigurations.max(count);
                held.push((p, store));
            }
            Err(reason) => {
                problem = Some(reason);
                break;
            }
        }
    }
    // Block form: rank 0's piece names the arrays; every piece must agree.
    let blocks = (pcm.rank == 0)
        .then(|| encode_cbor(&held.first().and_then(|(_, store)| block_form(store))));
    let blocks: Option<Blocks> =
        ciborium::from_reader(broadcast_bytes(&pcm.world, 0, blocks).as_slice())
            .map_err(|e| PcmError::Handover(e.to_string()))?;
    if problem.is_none() {
        problem = match &blocks {
            None => Some(format!(
                "the newest checkpoint, at iteration {iteration} of {series}, was not taken in block form (the job declared no distributed array, or did not store its rows with store_block), so it cannot be spread over {size} ranks; restart with {old} ranks"
            )),
            Some(blocks) => held
                .iter()
                .find(|(_, store)| block_form(store).as_ref() != Some(blocks))
                .map(|(p, _)| format!("the piece of rank {p} of {series} at iteration {iteration} declares other arrays than rank 0's")),
        };
    }
    let failed = u64::from(problem.is_some());
    let mut any_failed = 0u64;
    pcm.world
        .all_reduce_into(&failed, &mut any_failed, SystemOperation::max());
    if any_failed != 0 {
        if let Some(reason) = &problem {
            tracing::warn!(
                "rank {}: cannot restart at another width: {reason}",
                pcm.rank
            );
        }
        return Ok(None);
    }
    let Some(blocks) = blocks else {
        return Ok(None);
    };
    let holder = |p: u32| p % size;
    let sources = Sources {
        held: held.iter().map(|(p, store)| (*p, store)).collect(),
        holder: &holder,
    };
    let order: Vec<Merged> = (0..size).collect();
    let (store, _) = redistribute_from(&pcm.world, &sources, &blocks, old, &order)?;
    let store = store.ok_or(PcmError::internal("a rank got no state at restart"))?;
    let mut agreed = 0u64;
    pcm.world
        .all_reduce_into(&reconfigurations, &mut agreed, SystemOperation::max());
    if pcm.rank == 0 {
        tracing::info!(
            "restarting with {size} ranks from the checkpoint at iteration {iteration} taken with {old} ranks ({series}): rows spread over the new ranks"
        );
    }
    Ok(Some((iteration, agreed, store)))
}
