//! What a rank hands to a PCM replacement: its block and the run's start time.

use std::time::{SystemTime, UNIX_EPOCH};

use pcm::{Pcm, PcmError};

use crate::block::{Block, BlockError, Grid, Meta};
use crate::cli::Args;

/// One rank's part of a run: its block of the grid, and when the run started. `heat2d`
/// hands it over when the rank moves ([`pcm::State`]); `heat2d-plain` uses it as it is.
#[derive(Debug, Clone)]
pub struct Heat {
    /// The rank's rows of the grid.
    pub block: Block,
    /// Wall-clock start of the run, in Unix seconds: it travels with a migrated rank 0, so
    /// that the report's `seconds` counts from the first start.
    pub started: f64,
}

impl Heat {
    /// The block of `rank` of `size` for `args`, started now.
    ///
    /// # Errors
    /// See [`Block::new`] (options checked with [`Args::validate`] do not fail).
    pub fn new(args: &Args, rank: i32, size: i32) -> Result<Self, BlockError> {
        let block = Block::new(args.rows, args.cols, rank as usize, size as usize)?;
        Ok(Self {
            block,
            started: unix_seconds(),
        })
    }

    /// The block of `rank` of `size` for `args`, started now, built straight in two PCM
    /// shared arrays ([`pcm::Pcm::alloc_array`]): a move within a host then hands them to
    /// the replacement without a copy.
    ///
    /// # Errors
    /// See [`Block::new`]; shared memory could not be allocated.
    pub fn new_shared(args: &Args, rank: i32, size: i32, pcm: &Pcm) -> Result<Self, PcmError> {
        let meta = Meta::for_rank(args.rows, args.cols, rank as usize, size as usize)?;
        let grid = pcm.alloc_array::<f64>("grid", meta.data_len())?;
        let scratch = pcm.alloc_array::<f64>("scratch", meta.data_len())?;
        let block = Block::new_in(
            args.rows,
            args.cols,
            rank as usize,
            size as usize,
            Grid::Shared(grid),
            Grid::Shared(scratch),
        )?;
        Ok(Self {
            block,
            started: unix_seconds(),
        })
    }

    /// Moves the block's buffers into PCM shared arrays ([`pcm::Pcm::alloc_array`]), so
    /// that a move to a replacement on the same host hands them over without a copy
    /// (heat2d does it once after [`pcm::Pcm::resume`]; buffers already shared stay).
    ///
    /// # Errors
    /// Shared memory could not be allocated.
    pub fn share(&mut self, pcm: &Pcm) -> Result<(), PcmError> {
        self.block.share(|name, len| pcm.alloc_array(name, len))
    }

    /// Wall-clock seconds since [`Heat::started`].
    #[must_use]
    pub fn seconds(&self) -> f64 {
        unix_seconds() - self.started
    }
}

/// Stored as `started` (a serde value), `meta` ([`Meta::to_words`]) and `grid`
/// ([`Block::data`], raw: a shared array is stored without a copy, and handed to a
/// replacement on the same host as it is). In a resize ([`Pcm::resizing`]) `grid` is the
/// owned rows alone, a distributed array PCM gives each rank of the new world its rows of,
/// and `shape` (rows and columns) is replicated. A loaded block's buffers are both PCM
/// shared arrays (see [`Heat::share`]).
impl pcm::State for Heat {
    fn store(&self, pcm: &mut Pcm) -> Result<(), PcmError> {
        pcm.store("started", &self.started)?;
        if pcm.resizing() {
            let meta = self.block.meta();
            pcm.store("shape", &[meta.rows, meta.cols])?;
            return pcm.store_block("grid", self.block.owned());
        }
        pcm.store_array("meta", &self.block.meta().to_words())?;
        match &self.block.data {
            Grid::Shared(grid) => pcm.store_shared("grid", grid),
            Grid::Vec(grid) => pcm.store_array("grid", grid),
        }
    }

    fn load(pcm: &mut Pcm) -> Result<Self, PcmError> {
        let started = pcm.load("started")?;
        if pcm.resizing() {
            let [rows, cols]: [usize; 2] = pcm.load("shape")?;
            let mine = pcm.block_range("grid")?;
            let meta = Meta {
                rows,
                cols,
                start_row: mine.start as usize,
                local_rows: (mine.end - mine.start) as usize,
            };
            let owned = pcm.take_array::<f64>("grid")?;
            let data = pcm.alloc_array::<f64>("grid", meta.data_len())?;
            let scratch = pcm.alloc_array::<f64>("scratch", meta.data_len())?;
            let block =
                Block::from_owned_rows(meta, &owned, Grid::Shared(data), Grid::Shared(scratch))?;
            return Ok(Self { block, started });
        }
        let mut meta = [0u64; 4];
        pcm.load_array_into("meta", &mut meta)?;
        let meta = Meta::from_words(meta)?;
        let grid = pcm.take_shared::<f64>("grid")?;
        let scratch = pcm.alloc_array::<f64>("scratch", meta.data_len())?;
        let block = Block::from_parts_with(meta, grid, |_| Grid::Shared(scratch))?;
        Ok(Self { block, started })
    }

    fn release(&mut self) {
        self.block.release();
    }
}

/// A block that does not fit its metadata is a handover gone wrong.
impl From<BlockError> for PcmError {
    fn from(e: BlockError) -> Self {
        PcmError::Handover(e.to_string())
    }
}

/// Wall-clock seconds since the Unix epoch.
#[must_use]
pub fn unix_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
