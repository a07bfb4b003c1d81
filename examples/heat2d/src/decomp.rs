//! Row-block domain decomposition.
//!
//! The `rows` computed rows of the global grid are split into `size` contiguous blocks, one per
//! rank, in rank order. The first `rows % size` ranks get one extra row, so block sizes differ by
//! at most one and the split depends only on `(rows, size)`.

use std::ops::Range;

/// The global rows (0-based, among the `rows` computed rows) owned by `rank` of `size`.
///
/// Requires `size >= 1` and `rank < size`. If `rows < size`, some ranks get an empty range;
/// [`crate::Args::validate`] rejects that case before a [`crate::Block`] is built.
#[must_use]
pub fn block_rows(rows: usize, rank: usize, size: usize) -> Range<usize> {
    debug_assert!(size >= 1 && rank < size, "rank {rank} out of 0..{size}");
    let base = rows / size;
    let extra = rows % size;
    let start = rank * base + rank.min(extra);
    let len = base + usize::from(rank < extra);
    start..start + len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_many_shapes_then_every_row_is_owned_exactly_once_in_rank_order() {
        for rows in 0..70 {
            for size in 1..20 {
                let mut next = 0;
                let mut lens = Vec::new();
                for rank in 0..size {
                    let r = block_rows(rows, rank, size);
                    assert_eq!(r.start, next, "rows={rows} size={size} rank={rank}");
                    next = r.end;
                    lens.push(r.len());
                }
                assert_eq!(next, rows, "rows={rows} size={size}");
                let (min, max) = (lens.iter().min(), lens.iter().max());
                assert!(max.zip(min).is_some_and(|(a, b)| a - b <= 1));
                if rows >= size {
                    assert!(lens.iter().all(|&l| l >= 1));
                }
            }
        }
    }

    #[test]
    fn given_remainder_then_it_goes_to_the_first_ranks() {
        let blocks: Vec<_> = (0..3).map(|r| block_rows(10, r, 3)).collect();
        assert_eq!(blocks, vec![0..4, 4..7, 7..10]);
    }
}
