//! One rank's block of the grid: metadata, state, halo exchange and the Jacobi kernel.

use mpi::topology::Communicator;
use mpi::traits::{Destination, Source};
use pcm::SharedArray;

use crate::decomp::block_rows;

/// Fixed temperature of the boundary row above global row 0.
pub const TOP_BOUNDARY: f64 = 100.0;
/// Fixed temperature of the boundary row below the last global row and of both side columns.
pub const OTHER_BOUNDARY: f64 = 0.0;

/// Tag of a row sent to the rank above (it fills that rank's bottom halo).
const TAG_UP: i32 = 11;
/// Tag of a row sent to the rank below (it fills that rank's top halo).
const TAG_DOWN: i32 = 12;

/// Deterministic initial value of interior point (`row`, `col`), `row` global.
///
/// A small integer pattern (exact in `f64`), so every halo matters from the first iteration.
#[must_use]
pub fn initial_value(row: usize, col: usize) -> f64 {
    // Exact: at most 31, then halved.
    ((row * 7 + col * 13) % 32) as f64 * 0.5
}

/// Where a block's buffers live: a `Vec` (heat2d-plain, tests), or a PCM shared array
/// (heat2d: a rank that moves to a replacement on the same host hands its pages over
/// instead of copying them; see [`pcm::SharedArray`]). Either way the computation is the
/// same, bit for bit.
#[derive(Debug)]
pub enum Grid {
    /// Private memory.
    Vec(Vec<f64>),
    /// Shared memory allocated by PCM ([`pcm::Pcm::alloc_array`]).
    Shared(SharedArray<f64>),
}

impl std::ops::Deref for Grid {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        match self {
            Grid::Vec(v) => v,
            Grid::Shared(s) => s,
        }
    }
}

impl std::ops::DerefMut for Grid {
    fn deref_mut(&mut self) -> &mut [f64] {
        match self {
            Grid::Vec(v) => v,
            Grid::Shared(s) => s,
        }
    }
}

/// A copy, always in a `Vec` (a shared array is not duplicated).
impl Clone for Grid {
    fn clone(&self) -> Self {
        Grid::Vec(self.to_vec())
    }
}

impl PartialEq for Grid {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

impl PartialEq<Vec<f64>> for Grid {
    fn eq(&self, other: &Vec<f64>) -> bool {
        self[..] == other[..]
    }
}

impl From<Vec<f64>> for Grid {
    fn from(v: Vec<f64>) -> Self {
        Grid::Vec(v)
    }
}

impl From<SharedArray<f64>> for Grid {
    fn from(s: SharedArray<f64>) -> Self {
        Grid::Shared(s)
    }
}

/// Errors building a [`Meta`] or a [`Block`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BlockError {
    /// The grid has fewer than 3 columns (two fixed boundary columns and one computed).
    #[error("cols {cols} is below the minimum of 3")]
    TooFewCols {
        /// Requested columns.
        cols: usize,
    },
    /// The rank is not in `0..size`.
    #[error("rank {rank} is not in 0..{size}")]
    RankOutOfRange {
        /// Rank.
        rank: usize,
        /// Number of ranks.
        size: usize,
    },
    /// The block owns no rows, or lies (partly) outside the grid.
    #[error("block of {local_rows} rows at row {start_row} does not fit a grid of {rows} rows")]
    BadRows {
        /// Global rows.
        rows: usize,
        /// First owned row.
        start_row: usize,
        /// Owned rows.
        local_rows: usize,
    },
    /// A metadata word does not fit in `usize`.
    #[error("metadata word {word} does not fit in usize")]
    BadWord {
        /// The word.
        word: u64,
    },
    /// The state vector has the wrong length for the metadata.
    #[error("state has {actual} values, metadata needs {expected} ((local_rows + 2) * cols)")]
    DataLength {
        /// `(local_rows + 2) * cols`.
        expected: usize,
        /// Length given.
        actual: usize,
    },
    /// A fixed boundary value in the state differs from the boundary condition.
    #[error("state index {index} holds {found}, the fixed boundary value there is {expected}")]
    Boundary {
        /// Index into the state vector.
        index: usize,
        /// Boundary condition.
        expected: f64,
        /// Value found.
        found: f64,
    },
}

/// Where a block sits in the global grid. Everything needed, with the state vector, to rebuild
/// a [`Block`] (see [`Block::from_parts`]); [`Meta::to_words`] gives it as one `u64` array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Meta {
    /// Global computed rows (the fixed top and bottom boundary rows are not counted).
    pub rows: usize,
    /// Columns, including the two fixed boundary columns.
    pub cols: usize,
    /// Global index of the first owned row.
    pub start_row: usize,
    /// Owned rows (at least 1).
    pub local_rows: usize,
}

impl Meta {
    /// The block of `rank` of `size` in a `rows` x `cols` grid (see [`crate::decomp`]).
    ///
    /// # Errors
    /// Fails if `cols < 3`, `rank >= size`, or `rows < size` (an empty block).
    pub fn for_rank(
        rows: usize,
        cols: usize,
        rank: usize,
        size: usize,
    ) -> Result<Self, BlockError> {
        if rank >= size {
            return Err(BlockError::RankOutOfRange { rank, size });
        }
        let range = block_rows(rows, rank, size);
        let meta = Self {
            rows,
            cols,
            start_row: range.start,
            local_rows: range.len(),
        };
        meta.check()?;
        Ok(meta)
    }

    /// Checks the invariants: `cols >= 3`, at least one owned row, block inside the grid.
    ///
    /// # Errors
    /// The first violated invariant.
    pub fn check(&self) -> Result<(), BlockError> {
        if self.cols < 3 {
            return Err(BlockError::TooFewCols { cols: self.cols });
        }
        let fits = self
            .start_row
            .checked_add(self.local_rows)
            .is_some_and(|end| end <= self.rows);
        if self.local_rows == 0 || !fits {
            return Err(BlockError::BadRows {
                rows: self.rows,
                start_row: self.start_row,
                local_rows: self.local_rows,
            });
        }
        if (self.local_rows + 2).checked_mul(self.cols).is_none() {
            return Err(BlockError::DataLength {
                expected: usize::MAX,
                actual: 0,
            });
        }
        Ok(())
    }

    /// Length of the state vector: `(local_rows + 2) * cols`.
    #[must_use]
    pub fn data_len(&self) -> usize {
        (self.local_rows + 2) * self.cols
    }

    /// One past the last owned global row.
    #[must_use]
    pub fn end_row(&self) -> usize {
        self.start_row + self.local_rows
    }

    /// Whether the block's top halo is the fixed top boundary (no rank above).
    #[must_use]
    pub fn is_top(&self) -> bool {
        self.start_row == 0
    }

    /// Whether the block's bottom halo is the fixed bottom boundary (no rank below).
    #[must_use]
    pub fn is_bottom(&self) -> bool {
        self.end_row() == self.rows
    }

    /// The metadata as `[rows, cols, start_row, local_rows]`, for storing as one integer array.
    #[must_use]
    pub fn to_words(&self) -> [u64; 4] {
        [self.rows, self.cols, self.start_row, self.local_rows].map(|w| w as u64)
    }

    /// Inverse of [`Meta::to_words`], checked like [`Meta::check`].
    ///
    /// # Errors
    /// A word that does not fit `usize`, or a violated invariant.
    pub fn from_words(words: [u64; 4]) -> Result<Self, BlockError> {
        let w = |word: u64| usize::try_from(word).map_err(|_| BlockError::BadWord { word });
        let meta = Self {
            rows: w(words[0])?,
            cols: w(words[1])?,
            start_row: w(words[2])?,
            local_rows: w(words[3])?,
        };
        meta.check()?;
        Ok(meta)
    }

    /// The value the boundary condition fixes at `index` of the state vector, or `None` if that
    /// position is computed (owned interior) or filled by a neighbour (inner halo).
    fn fixed_value(&self, index: usize) -> Option<f64> {
        let (r, c) = (index / self.cols, index % self.cols);
        if r == 0 {
            self.is_top().then_some(TOP_BOUNDARY)
        } else if r == self.local_rows + 1 {
            self.is_bottom().then_some(OTHER_BOUNDARY)
        } else if c == 0 || c == self.cols - 1 {
            Some(OTHER_BOUNDARY)
        } else {
            None
        }
    }

    /// A state vector holding the boundary condition and the initial values.
    fn initial_data(&self) -> Vec<f64> {
        let mut data = vec![OTHER_BOUNDARY; self.data_len()];
        self.fill_initial(&mut data);
        data
    }

    /// Writes the boundary condition and the initial values into `data` (of
    /// [`Meta::data_len`] values, all [`OTHER_BOUNDARY`] before).
    fn fill_initial(&self, data: &mut [f64]) {
        for (r, row) in data.chunks_exact_mut(self.cols).enumerate() {
            if r == 0 {
                if self.is_top() {
                    row.fill(TOP_BOUNDARY);
                }
            } else if r <= self.local_rows {
                let g = self.start_row + r - 1;
                let last = self.cols - 1;
                for (c, v) in row.iter_mut().enumerate().take(last).skip(1) {
                    *v = initial_value(g, c);
                }
            }
        }
    }
}

/// One rank's part of the grid.
///
/// `data` is row-major with `(local_rows + 2)` rows of `cols` values: the top halo row, the
/// owned rows, the bottom halo row. Column 0 and column `cols - 1` are fixed boundary values;
/// on the first and last block the outer halo row is the fixed boundary row. Halo rows from
/// neighbours are refreshed at the start of every [`Block::step`], so stored state is valid
/// whatever they hold.
///
/// Invariant: `data.len() == meta().data_len()` (checked by every step). `data` is public so a
/// checkpointing layer can store it as one array and [`Block::from_parts`] can rebuild a block
/// from a loaded copy.
#[derive(Debug, Clone)]
pub struct Block {
    meta: Meta,
    /// The state: `(local_rows + 2) * cols` values, row-major, halos included.
    pub data: Grid,
    /// The Jacobi target buffer; its fixed boundary values are always correct.
    scratch: Grid,
}

impl Block {
    /// The initial block of `rank` of `size` in a `rows` x `cols` grid.
    ///
    /// # Errors
    /// See [`Meta::for_rank`].
    pub fn new(rows: usize, cols: usize, rank: usize, size: usize) -> Result<Self, BlockError> {
        let meta = Meta::for_rank(rows, cols, rank, size)?;
        let data = meta.initial_data();
        Ok(Self {
            meta,
            scratch: Grid::Vec(data.clone()),
            data: Grid::Vec(data),
        })
    }

    /// The initial block of `rank` of `size` in a `rows` x `cols` grid, in the buffers given
    /// (each of [`Meta::data_len`] values, all [`OTHER_BOUNDARY`], as a zeroed shared array
    /// is), for example PCM shared arrays: no other copy of the grid is made.
    ///
    /// # Errors
    /// See [`Meta::for_rank`]; a buffer of another length.
    pub fn new_in(
        rows: usize,
        cols: usize,
        rank: usize,
        size: usize,
        mut data: Grid,
        mut scratch: Grid,
    ) -> Result<Self, BlockError> {
        let meta = Meta::for_rank(rows, cols, rank, size)?;
        for buffer in [&mut data, &mut scratch] {
            if buffer.len() != meta.data_len() {
                return Err(BlockError::DataLength {
                    expected: meta.data_len(),
                    actual: buffer.len(),
                });
            }
            meta.fill_initial(buffer);
        }
        Ok(Self {
            meta,
            data,
            scratch,
        })
    }

    /// Frees the block's memory (a process that moved away and waits for its launch to end);
    /// the block is empty afterwards and must not be stepped.
    pub fn release(&mut self) {
        self.data = Grid::Vec(Vec::new());
        self.scratch = Grid::Vec(Vec::new());
    }

    /// Moves both buffers that are still in a `Vec` into shared arrays from `alloc` (called
    /// with the buffer's name, "grid" or "scratch", and its length), such as
    /// [`pcm::Pcm::alloc_array`]; buffers already shared stay as they are.
    ///
    /// # Errors
    /// The first error of `alloc`.
    pub fn share<E>(
        &mut self,
        mut alloc: impl FnMut(&str, usize) -> Result<SharedArray<f64>, E>,
    ) -> Result<(), E> {
        for (name, buffer) in [("grid", &mut self.data), ("scratch", &mut self.scratch)] {
            if let Grid::Vec(v) = buffer {
                let mut shared = alloc(name, v.len())?;
                shared.copy_from_slice(v);
                *buffer = Grid::Shared(shared);
            }
        }
        Ok(())
    }

    /// Rebuilds a block from its metadata and state (for example, loaded after a migration).
    ///
    /// # Errors
    /// Invalid metadata, a state of the wrong length, or fixed boundary values that differ from
    /// the boundary condition (a sign that the wrong array was loaded).
    pub fn from_parts(meta: Meta, data: impl Into<Grid>) -> Result<Self, BlockError> {
        Self::from_parts_with(meta, data, |len| Grid::Vec(vec![OTHER_BOUNDARY; len]))
    }

    /// [`Block::from_parts`] with the second buffer from `scratch` (given the length; all
    /// values [`OTHER_BOUNDARY`], as a zeroed shared array is), for example a shared array.
    ///
    /// # Errors
    /// As [`Block::from_parts`].
    pub fn from_parts_with(
        meta: Meta,
        data: impl Into<Grid>,
        scratch: impl FnOnce(usize) -> Grid,
    ) -> Result<Self, BlockError> {
        let data = data.into();
        meta.check()?;
        if data.len() != meta.data_len() {
            return Err(BlockError::DataLength {
                expected: meta.data_len(),
                actual: data.len(),
            });
        }
        for (index, &found) in data.iter().enumerate() {
            if let Some(expected) = meta.fixed_value(index) {
                if found.to_bits() != expected.to_bits() {
                    return Err(BlockError::Boundary {
                        index,
                        expected,
                        found,
                    });
                }
            }
        }
        let mut scratch = scratch(meta.data_len());
        if scratch.len() != meta.data_len() {
            return Err(BlockError::DataLength {
                expected: meta.data_len(),
                actual: scratch.len(),
            });
        }
        meta.fill_initial(&mut scratch);
        Ok(Self {
            meta,
            scratch,
            data,
        })
    }

    /// Rebuilds a block from its owned rows alone (`local_rows * cols` values, for example
    /// the rows PCM gave this rank after a resize), in the buffers given (each of
    /// [`Meta::data_len`] values, all [`OTHER_BOUNDARY`]): the halos are the boundary
    /// condition, or anything for inner halos, which the next step refreshes.
    ///
    /// # Errors
    /// As [`Block::from_parts`]; owned rows of another length.
    pub fn from_owned_rows(
        meta: Meta,
        owned: &[f64],
        mut data: Grid,
        scratch: Grid,
    ) -> Result<Self, BlockError> {
        meta.check()?;
        let c = meta.cols;
        if owned.len() != meta.local_rows * c || data.len() != meta.data_len() {
            return Err(BlockError::DataLength {
                expected: meta.local_rows * c,
                actual: owned.len(),
            });
        }
        meta.fill_initial(&mut data);
        data[c..c + owned.len()].copy_from_slice(owned);
        Self::from_parts_with(meta, data, |_| scratch)
    }

    /// Splits the block into its metadata and state.
    #[must_use]
    pub fn into_parts(self) -> (Meta, Grid) {
        (self.meta, self.data)
    }

    /// Where the block sits in the grid.
    #[must_use]
    pub fn meta(&self) -> Meta {
        self.meta
    }

    /// The owned rows, halos excluded: `local_rows * cols` values.
    #[must_use]
    pub fn owned(&self) -> &[f64] {
        let c = self.meta.cols;
        &self.data[c..c + self.meta.local_rows * c]
    }

    /// Whether the last [`Block::step`] (or [`Block::relax`]) changed any owned value, bit
    /// for bit: its owned rows against the previous iteration's, which the second buffer
    /// holds until the next step. Meaningful only right after a step; a block just built or
    /// rebuilt ([`Block::from_parts`]) has no previous iteration to compare with.
    ///
    /// The grid settles: relaxed long enough, every value reaches a bit-exact fixed point
    /// (256 x 256 after 387,919 iterations; docs/results-log.md), and from then on a run that
    /// skipped or repeated iterations ends with the same grid. `heat2d-plain` samples this
    /// to report when its grid last changed ([`crate::Settling`]).
    #[must_use]
    pub fn changed_in_last_step(&self) -> bool {
        let c = self.meta.cols;
        let owned = c..c + self.meta.local_rows * c;
        let (now, before) = (&self.data[owned.clone()], &self.scratch[owned]);
        now.iter()
            .zip(before)
            .any(|(a, b)| a.to_bits() != b.to_bits())
    }

    /// One iteration: exchange halo rows with the ranks above and below, then one Jacobi update
    /// of every owned interior point, then swap the buffers.
    ///
    /// The rows that do not touch a halo are updated while the halo messages are in flight; the
    /// first and last owned rows after they arrive. The result is bit-for-bit that of
    /// [`Block::exchange_halos`] followed by [`Block::relax`].
    ///
    /// `comm` must hold the blocks in rank order (rank `r` owns the block above rank `r + 1`'s);
    /// after a migration pass the new communicator. Collective over `comm`.
    ///
    /// # Panics
    /// If the block's position disagrees with its rank in `comm` (first block not on rank 0, or
    /// last block not on the last rank), or if `data` was resized.
    pub fn step(&mut self, comm: &impl Communicator) {
        let (c, n) = (self.meta.cols, self.meta.local_rows);
        let scratch = &mut self.scratch;
        exchange(comm, &self.meta, &mut self.data, |owned| {
            // Data rows 2..=n-1 need only owned rows.
            if n >= 3 {
                relax_rows(owned, &mut scratch[2 * c..n * c], c);
            }
        });
        // Data row 1, then data row n (if distinct), now that the halos are in.
        relax_rows(&self.data[..3 * c], &mut self.scratch[c..2 * c], c);
        if n >= 2 {
            let src = &self.data[(n - 1) * c..(n + 2) * c];
            relax_rows(src, &mut self.scratch[n * c..(n + 1) * c], c);
        }
        std::mem::swap(&mut self.data, &mut self.scratch);
    }

    /// Sends the first owned row up and the last owned row down, and receives the halo rows
    /// from the ranks above and below (non-blocking, all posted before waiting). No update.
    ///
    /// # Panics
    /// As [`Block::step`].
    pub fn exchange_halos(&mut self, comm: &impl Communicator) {
        exchange(comm, &self.meta, &mut self.data, |_| {});
    }

    /// One Jacobi update of every owned interior point from the current halos, into the second
    /// buffer, then swaps the buffers. No communication.
    ///
    /// Each new value is `0.25 * ((up + down) + (left + right))` in plain `f64` arithmetic
    /// (Rust never contracts it into FMA), so results are bit-for-bit the same whichever
    /// process or decomposition computes them.
    ///
    /// # Panics
    /// If `data` was resized.
    pub fn relax(&mut self) {
        let (c, n) = (self.meta.cols, self.meta.local_rows);
        assert_eq!(self.data.len(), self.meta.data_len(), "state was resized");
        relax_rows(&self.data, &mut self.scratch[c..(n + 1) * c], c);
        std::mem::swap(&mut self.data, &mut self.scratch);
    }
}

/// Halo exchange of `data` (laid out as described by `meta`) over `comm`; runs `during` on the
/// owned rows while the messages are in flight.
fn exchange(comm: &impl Communicator, meta: &Meta, data: &mut [f64], during: impl FnOnce(&[f64])) {
    let (rank, size) = (comm.rank(), comm.size());
    let has_up = rank > 0;
    let has_down = rank + 1 < size;
    assert!(
        has_up != meta.is_top() && has_down != meta.is_bottom(),
        "block at rows {}..{} of {} cannot be rank {rank} of {size}",
        meta.start_row,
        meta.end_row(),
        meta.rows,
    );
    assert_eq!(data.len(), meta.data_len(), "state was resized");
    let c = meta.cols;
    let (top_halo, rest) = data.split_at_mut(c);
    let (owned, bottom_halo) = rest.split_at_mut(meta.local_rows * c);
    let owned: &[f64] = owned;
    let first = &owned[..c];
    let last = &owned[owned.len() - c..];
    let up = has_up.then(|| comm.process_at_rank(rank - 1));
    let down = has_down.then(|| comm.process_at_rank(rank + 1));
    mpi::request::scope(|scope| {
        let recv_top = up
            .as_ref()
            .map(|p| p.immediate_receive_into_with_tag(scope, top_halo, TAG_DOWN));
        let recv_bottom = down
            .as_ref()
            .map(|p| p.immediate_receive_into_with_tag(scope, bottom_halo, TAG_UP));
        let send_up = up
            .as_ref()
            .map(|p| p.immediate_send_with_tag(scope, first, TAG_UP));
        let send_down = down
            .as_ref()
            .map(|p| p.immediate_send_with_tag(scope, last, TAG_DOWN));
        during(owned);
        for request in [recv_top, recv_bottom].into_iter().flatten() {
            request.wait();
        }
        for request in [send_up, send_down].into_iter().flatten() {
            request.wait();
        }
    });
}

/// Jacobi update of `dst` (k rows of `c` values) from `src` (k + 2 rows): `dst` row `i` is
/// computed from `src` rows `i`, `i + 1`, `i + 2`. Boundary columns of `dst` are not written.
fn relax_rows(src: &[f64], dst: &mut [f64], c: usize) {
    debug_assert_eq!(src.len(), dst.len() + 2 * c);
    let above = src.chunks_exact(c);
    let middle = src.chunks_exact(c).skip(1);
    let below = src.chunks_exact(c).skip(2);
    for (((out, up), mid), down) in dst.chunks_exact_mut(c).zip(above).zip(middle).zip(below) {
        relax_row(up, mid, down, out);
    }
}

/// Updates the interior of one row (all slices of equal length `cols >= 3`).
#[inline]
fn relax_row(up: &[f64], mid: &[f64], down: &[f64], out: &mut [f64]) {
    let n = out.len() - 2;
    let out = &mut out[1..=n];
    let up = &up[1..=n];
    let down = &down[1..=n];
    let left = &mid[..n];
    let right = &mid[2..n + 2];
    for ((((o, &u), &d), &l), &r) in out.iter_mut().zip(up).zip(down).zip(left).zip(right) {
        *o = 0.25 * ((u + d) + (l + r));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_tiny_grid_then_one_relax_matches_hand_computed_values() {
        // 2 rows x 4 cols, one rank: halo rows are the boundary rows.
        let mut block = Block::new(2, 4, 0, 1).expect("valid");
        let i = |r: usize, c: usize| initial_value(r, c);
        // Initial interior: (0,1)=13/2, (0,2)=26/2, (1,1)=20/2, (1,2)=(33 mod 32)/2.
        assert_eq!([i(0, 1), i(0, 2), i(1, 1), i(1, 2)], [6.5, 13.0, 10.0, 0.5]);
        #[rustfmt::skip]
        let expected_initial = vec![
            100.0, 100.0, 100.0, 100.0,
            0.0, 6.5, 13.0, 0.0,
            0.0, 10.0, 0.5, 0.0,
            0.0, 0.0, 0.0, 0.0,
        ];
        assert_eq!(block.data, expected_initial);
        block.relax();
        // (0,1) = ((100 + 10) + (0 + 13)) / 4 = 30.75
        // (0,2) = ((100 + 0.5) + (6.5 + 0)) / 4 = 26.75
        // (1,1) = ((6.5 + 0) + (0 + 0.5)) / 4 = 1.75
        // (1,2) = ((13 + 0) + (10 + 0)) / 4 = 5.75
        assert_eq!(
            block.owned(),
            &[0.0, 30.75, 26.75, 0.0, 0.0, 1.75, 5.75, 0.0]
        );
        block.relax();
        // (0,1) = ((100 + 1.75) + (0 + 26.75)) / 4 = 32.125
        // (1,2) = ((26.75 + 0) + (1.75 + 0)) / 4 = 7.125
        assert_eq!(block.owned()[1], 32.125);
        assert_eq!(block.owned()[6], 7.125);
        // Boundaries untouched after two swaps.
        assert!(block.data[..4].iter().all(|&v| v == TOP_BOUNDARY));
        assert!(block.data[12..].iter().all(|&v| v == OTHER_BOUNDARY));
    }

    #[test]
    fn given_split_blocks_with_copied_halos_then_relax_matches_single_block() {
        // Emulates the exchange without MPI: 7 rows split 3 ways must equal 1 block exactly.
        let (rows, cols, iters) = (7, 6, 9);
        let mut whole = Block::new(rows, cols, 0, 1).expect("valid");
        let mut parts: Vec<Block> = (0..3)
            .map(|r| Block::new(rows, cols, r, 3).expect("valid"))
            .collect();
        for _ in 0..iters {
            for r in 0..3 {
                if r > 0 {
                    let src = parts[r - 1].owned()[parts[r - 1].owned().len() - cols..].to_vec();
                    parts[r].data[..cols].copy_from_slice(&src);
                }
                if r < 2 {
                    let src = parts[r + 1].owned()[..cols].to_vec();
                    let n = parts[r].data.len();
                    parts[r].data[n - cols..].copy_from_slice(&src);
                }
            }
            parts.iter_mut().for_each(Block::relax);
            whole.relax();
        }
        let joined: Vec<f64> = parts.iter().flat_map(|b| b.owned().to_vec()).collect();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&joined), bits(whole.owned()));
    }

    #[test]
    fn given_parts_then_from_parts_round_trips() {
        for rank in 0..3 {
            let mut block = Block::new(10, 5, rank, 3).expect("valid");
            block.relax();
            block.relax();
            let meta = block.meta();
            let words = meta.to_words();
            let (m, data) = block.clone().into_parts();
            let rebuilt = Block::from_parts(Meta::from_words(words).expect("valid"), data)
                .expect("round trip");
            assert_eq!(m, meta);
            assert_eq!(rebuilt.meta(), meta);
            assert_eq!(rebuilt.data, block.data);
            // And both continue identically.
            let (mut a, mut b) = (block, rebuilt);
            a.relax();
            b.relax();
            assert_eq!(a.data, b.data);
        }
    }

    #[test]
    fn given_bad_parts_then_from_parts_names_the_problem() {
        let block = Block::new(6, 4, 1, 2).expect("valid");
        let meta = block.meta();
        let short = vec![0.0; meta.data_len() - 1];
        assert!(matches!(
            Block::from_parts(meta, short),
            Err(BlockError::DataLength { .. })
        ));
        let mut data = block.data.clone();
        data[meta.cols] = 1.0; // left boundary column of the first owned row
        assert!(matches!(
            Block::from_parts(meta, data),
            Err(BlockError::Boundary { index: 4, .. })
        ));
        let outside = Meta {
            start_row: 5,
            local_rows: 2,
            ..meta
        };
        assert!(matches!(
            Block::from_parts(outside, vec![0.0; outside.data_len()]),
            Err(BlockError::BadRows { .. })
        ));
        assert!(matches!(
            Meta::for_rank(6, 2, 0, 1),
            Err(BlockError::TooFewCols { cols: 2 })
        ));
        assert!(matches!(
            Meta::for_rank(2, 4, 2, 3),
            Err(BlockError::BadRows { .. })
        ));
    }
}
