//! The state a process hands over and a checkpoint holds: the application's [`State`], and
//! the calls that store and load it (the paper's `PCM_Store` and `PCM_Load`), the malleable
//! declarations, and [`Pcm::resume`].

use bytemuck::Pod;
use serde::{de::DeserializeOwned, Serialize};

use super::Pcm;
use crate::error::PcmError;
use crate::malleable::{self, block_rows, Malleability};
use crate::shared::SharedArray;
use crate::status::ProcessStatus;
use crate::store;

/// What an application hands to its replacement, and what a coordinated checkpoint holds:
/// the state [`Pcm::resume`] loads and [`Pcm::reconfigure_point`] stores. Implement it once
/// for the type that holds the loop's state; the loop's iteration is kept by PCM.
///
/// ```no_run
/// use pcm::{Pcm, PcmError, State};
///
/// struct Grid {
///     cells: Vec<f64>,
///     residual: f64,
/// }
///
/// impl State for Grid {
///     fn store(&self, pcm: &mut Pcm) -> Result<(), PcmError> {
///         pcm.store("residual", &self.residual)?;
///         pcm.store_array("cells", &self.cells)
///     }
///     fn load(pcm: &mut Pcm) -> Result<Self, PcmError> {
///         Ok(Grid {
///             residual: pcm.load("residual")?,
///             cells: pcm.take_array("cells")?,
///         })
///     }
///     fn release(&mut self) {
///         self.cells = Vec::new();
///     }
/// }
/// ```
pub trait State: Sized {
    /// Stores everything a replacement needs to go on, with [`Pcm::store`] and
    /// [`Pcm::store_array`] (it must not use the names PCM keeps for itself: `pcm.blocks`).
    fn store(&self, pcm: &mut Pcm) -> Result<(), PcmError>;

    /// Rebuilds the state from what [`State::store`] stored, with [`Pcm::load`] and
    /// [`Pcm::take_array`]. Turn the application's own checks into errors with
    /// [`PcmError::application`] (or a `From` impl).
    fn load(pcm: &mut Pcm) -> Result<Self, PcmError>;

    /// Frees large buffers in a process that moved away, before it waits for its launch to
    /// end (Open MPI 4 keeps a departed process until then). Default: nothing.
    fn release(&mut self) {}
}

impl Pcm {
    /// Stores a serde value under `name` for the replacement (the paper's `PCM_Store`).
    pub fn store<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), PcmError> {
        self.store.store_value(name, value)
    }

    /// Stores a slice of plain numeric data under `name`, as raw bytes (no encoding).
    pub fn store_array<T: Pod>(&mut self, name: &str, values: &[T]) -> Result<(), PcmError> {
        self.store.store_array(name, values)
    }

    /// Declares the job malleable (docs/malleability.md): it may be resized to any width
    /// `limits` allows. Call it once, before the loop, on every rank, with the same limits;
    /// a replacement or added process inherits the job's and its own call must agree.
    ///
    /// # Errors
    /// [`PcmError::Declaration`] if the job declared other limits.
    pub fn set_malleable(&mut self, limits: Malleability) -> Result<(), PcmError> {
        match &self.job.malleability {
            Some(declared) if *declared != limits => Err(PcmError::Declaration(format!(
                "the job is malleable within {}..={} ({}), not {}..={} ({})",
                declared.min(),
                declared.max(),
                declared.rule(),
                limits.min(),
                limits.max(),
                limits.rule()
            ))),
            _ => {
                self.job.malleability = Some(limits);
                Ok(())
            }
        }
    }

    /// Declares `name` a distributed array of `rows` global rows of `row_len` elements of
    /// `T`, split in row blocks over the ranks ([`block_rows`]; this rank's rows:
    /// [`Pcm::block_range`]). In a resize each rank stores its rows with
    /// [`Pcm::store_block`] and PCM moves them to their new owners. Call it before the loop,
    /// on every rank, with the same values; a replacement's or added process's own call must
    /// agree with the job's.
    ///
    /// # Errors
    /// [`PcmError::Declaration`]: no rows or elements, or another declaration of `name`.
    pub fn declare_block<T: Pod>(
        &mut self,
        name: &str,
        rows: u64,
        row_len: u64,
    ) -> Result<(), PcmError> {
        store::check_name(name)?;
        if rows == 0 || row_len == 0 {
            return Err(PcmError::Declaration(format!(
                "array {name:?} declared with {rows} rows of {row_len} elements: both must be at least 1"
            )));
        }
        let decl = malleable::BlockDecl {
            type_name: store::type_label::<[T]>(),
            element_bytes: std::mem::size_of::<T>() as u64,
            rows,
            row_len,
        };
        match self.job.blocks.get(name) {
            Some(declared) if *declared != decl => Err(PcmError::Declaration(format!(
                "array {name:?} is declared as {} rows of {} elements of {}, not {rows} rows of {row_len} elements of {}",
                declared.rows, declared.row_len, declared.type_name, decl.type_name
            ))),
            _ => {
                self.job.blocks.insert(name.to_owned(), decl);
                Ok(())
            }
        }
    }

    /// The global rows of the distributed array `name` this rank owns in the current world
    /// (after a resize: its new rows).
    ///
    /// # Errors
    /// [`PcmError::Declaration`] if `name` was not declared.
    pub fn block_range(&self, name: &str) -> Result<std::ops::Range<u64>, PcmError> {
        let decl = self.block_decl(name)?;
        Ok(block_rows(decl.rows, self.rank, self.size))
    }

    fn block_decl(&self, name: &str) -> Result<&malleable::BlockDecl, PcmError> {
        self.job.blocks.get(name).ok_or_else(|| {
            PcmError::Declaration(format!(
                "array {name:?} was not declared (Pcm::declare_block); declared: {}",
                match self.job.blocks.keys().cloned().collect::<Vec<_>>() {
                    names if names.is_empty() => "none".to_owned(),
                    names => names.join(", "),
                }
            ))
        })
    }

    /// Stores this rank's rows of the distributed array `name` for a resize
    /// ([`Status::Resize`](crate::Status::Resize)): exactly [`Pcm::block_range`]'s rows, `row_len` elements each, in
    /// row order. A wrong length or type is found by [`Pcm::reconfigure`] on every rank
    /// together, which then refuses the resize and lets the job go on at its width.
    /// Outside a resize it stores an array like [`Pcm::store_array`] (a replacement loads
    /// it with [`Pcm::take_array`]).
    pub fn store_block<T: Pod>(&mut self, name: &str, rows: &[T]) -> Result<(), PcmError> {
        self.store.store_array(name, rows)
    }

    /// Whether the state stored now, or loaded now, is in the form of a resize: the rows of
    /// the declared arrays ([`Pcm::store_block`], then [`Pcm::take_array`] of this rank's new
    /// rows) and replicated values. True from the status call that returned
    /// [`Status::Resize`](crate::Status::Resize) until the next status call, and in a process of the new world while
    /// it loads; also for the checkpoints of a job that declared arrays
    /// ([`Status::Checkpoint`](crate::Status::Checkpoint)) and when such a checkpoint is loaded at a restart, whatever
    /// the width it was taken at. A [`State`] checks it in `store` and `load`.
    pub fn resizing(&self) -> bool {
        // A malleable job's checkpoints are in the same form, so that a restart can
        // spread them over another width.
        self.resizing || (self.checkpoints.pending.is_some() && !self.job.blocks.is_empty())
    }

    /// Resizes the job has completed since it first started.
    pub fn resizes(&self) -> u64 {
        self.job.resizes
    }

    /// A zeroed array of `len` elements in shared memory, for the application to use as its
    /// state (like `MPI_Alloc_mem`); `name` labels it for people (`/proc/PID/fd` shows
    /// `memfd:pcm-array:JOB:NAME`). Stored with [`Pcm::store_shared`], it is handed to a
    /// replacement on the same host without a copy (see [`SharedArray`]).
    pub fn alloc_array<T: Pod>(&self, name: &str, len: usize) -> Result<SharedArray<T>, PcmError> {
        SharedArray::zeroed(self.job.job.as_str(), name, len)
    }

    /// Stores a shared array under `name` without copying it: a replacement on the same
    /// host takes its pages over ([`Pcm::take_shared`]), one on another host receives its
    /// bytes; a checkpoint writes them. The array must not change until the
    /// reconfiguration is over (as with [`Pcm::store_array`], what is handed over is the
    /// array as it is then; here it is read when it is sent).
    pub fn store_shared<T: Pod>(
        &mut self,
        name: &str,
        array: &SharedArray<T>,
    ) -> Result<(), PcmError> {
        self.store.store_shared(name, array)
    }

    /// Takes an array out of the store as a [`SharedArray`]: the very pages of the
    /// departing process when it ran on this host and stored it with
    /// [`Pcm::store_shared`], otherwise a new shared array holding the bytes received (or
    /// restored from a checkpoint, or stored with [`Pcm::store_array`]). [`Pcm::take_array`]
    /// also takes an array stored with [`Pcm::store_shared`], as a copy in a `Vec`.
    pub fn take_shared<T: Pod>(&mut self, name: &str) -> Result<SharedArray<T>, PcmError> {
        self.store.take_shared(name, self.job.job.as_str())
    }

    /// Loads a value stored with [`Pcm::store`] by the predecessor (the paper's `PCM_Load`).
    pub fn load<T: DeserializeOwned>(&self, name: &str) -> Result<T, PcmError> {
        self.store.load_value(name)
    }

    /// Takes an array stored with [`Pcm::store_array`] out of the store (a second take of
    /// the same name fails); no copy for 8-byte element types. [`Pcm::load_array_into`]
    /// copies instead and leaves it stored.
    pub fn take_array<T: Pod>(&mut self, name: &str) -> Result<Vec<T>, PcmError> {
        self.store.take_array(name)
    }

    /// Copies an array stored with [`Pcm::store_array`] into `out`, which must have its length.
    pub fn load_array_into<T: Pod>(&self, name: &str, out: &mut [T]) -> Result<(), PcmError> {
        self.store.load_array_into(name, out)
    }

    /// The element type and size of the array stored under `name` (with
    /// [`Pcm::store_array`], or handed over to this replacement): Rust's name of the slice
    /// type (`[f64]`, `[i32]`, ...) and the length in bytes. Lets a caller that does not
    /// know the type statically (the C interface) check it and size its buffer.
    pub fn array_layout(&self, name: &str) -> Result<(&str, usize), PcmError> {
        self.store.array_layout(name)
    }

    /// The state to start the loop with, and the iteration to start it at: `fresh()` and 0
    /// in a process started with the job; in a replacement or a restarted job, the state
    /// its predecessor stored ([`State::load`]) and the iteration it stored it at. Call it
    /// once, before the loop, on every rank; a replacement must make no collective call
    /// before the loop that the running ranks are not making (see docs/instrumenting.md).
    pub fn resume<S: State, E: Into<PcmError>>(
        &mut self,
        fresh: impl FnOnce() -> Result<S, E>,
    ) -> Result<(S, u64), PcmError> {
        match self.origin {
            ProcessStatus::Fresh => Ok((fresh().map_err(Into::into)?, 0)),
            ProcessStatus::Replacement { iteration, .. }
            | ProcessStatus::Restarted { iteration }
            | ProcessStatus::Added { iteration } => Ok((S::load(self)?, iteration)),
        }
    }
}
