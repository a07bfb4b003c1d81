//! The result checksum: SHA-256 of the whole grid gathered at rank 0.

use mpi::datatype::PartitionMut;
use mpi::topology::Communicator;
use mpi::traits::Root;
use mpi::Count;
use sha2::{Digest, Sha256};

use crate::block::Block;

/// Gathers every rank's owned rows at rank 0 and returns, on rank 0 only, the lowercase hex
/// SHA-256 of the `rows * cols` values (global row order, row-major, halos excluded, boundary
/// columns included) as `f64` little-endian bytes.
///
/// Rows are placed by each block's global start row, so the result does not depend on which
/// rank holds which block. Collective over `comm`.
///
/// # Panics
/// On rank 0, if the blocks do not tile the grid exactly (a decomposition bug), or the grid
/// exceeds the MPI count limit (`rows * cols > i32::MAX`, rejected by [`crate::Args::validate`]).
pub fn checksum(comm: &impl Communicator, block: &Block) -> Option<String> {
    let meta = block.meta();
    let root = comm.process_at_rank(0);
    let placement = [meta.start_row as u64, meta.local_rows as u64];
    if comm.rank() != 0 {
        root.gather_into(&placement[..]);
        root.gather_varcount_into(block.owned());
        return None;
    }
    let size = usize::try_from(comm.size()).unwrap_or(0);
    let mut placements = vec![0_u64; 2 * size];
    root.gather_into_root(&placement[..], &mut placements[..]);
    let (counts, displs) = partition(&placements, meta.rows, meta.cols);
    let mut grid = vec![0.0_f64; meta.rows * meta.cols];
    let mut partition = PartitionMut::new(&mut grid[..], &counts[..], &displs[..]);
    root.gather_varcount_into_root(block.owned(), &mut partition);
    Some(hash_grid(&grid))
}

/// Counts and displacements (in values) of each rank's rows from its `[start_row, local_rows]`.
fn partition(placements: &[u64], rows: usize, cols: usize) -> (Vec<Count>, Vec<Count>) {
    let to_count = |v: u64| -> Count {
        usize::try_from(v)
            .ok()
            .and_then(|v| v.checked_mul(cols))
            .and_then(|v| Count::try_from(v).ok())
            .unwrap_or_else(|| panic!("grid of {rows} x {cols} exceeds the MPI count limit"))
    };
    let pairs: Vec<(u64, u64)> = placements.chunks_exact(2).map(|p| (p[0], p[1])).collect();
    let mut sorted = pairs.clone();
    sorted.sort_unstable();
    let mut next = 0_u64;
    for &(start, len) in &sorted {
        assert_eq!(start, next, "blocks do not tile the grid: {pairs:?}");
        next = start + len;
    }
    assert_eq!(next, rows as u64, "blocks do not tile the grid: {pairs:?}");
    pairs
        .iter()
        .map(|&(start, len)| (to_count(len), to_count(start)))
        .unzip()
}

/// Lowercase hex SHA-256 of `values` as `f64` little-endian bytes.
#[must_use]
pub fn hash_grid(values: &[f64]) -> String {
    let mut hasher = Sha256::new();
    let mut buf = Vec::with_capacity(8 * 1024);
    for chunk in values.chunks(1024) {
        buf.clear();
        buf.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
        hasher.update(&buf);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_known_input_then_hash_matches_sha256_of_le_bytes() {
        // sha256 of the empty string.
        assert_eq!(
            hash_grid(&[]),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        // Chunking must not matter: compare with one update over all bytes.
        let values: Vec<f64> = (0..3000).map(|i| f64::from(i) * 0.5).collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let direct: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hash_grid(&values), direct);
    }

    #[test]
    fn given_permuted_ranks_then_partition_places_rows_by_start() {
        let (counts, displs) = partition(&[4, 3, 0, 4, 7, 3], 10, 5);
        assert_eq!(counts, vec![15, 20, 15]);
        assert_eq!(displs, vec![20, 0, 35]);
    }

    #[test]
    #[should_panic(expected = "do not tile")]
    fn given_gap_then_partition_panics() {
        let _ = partition(&[0, 3, 4, 6], 10, 5);
    }
}
