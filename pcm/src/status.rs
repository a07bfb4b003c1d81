//! What PCM tells the application: how this process came to be ([`ProcessStatus`], the
//! paper's `PCM_Process_Status`) and what to do at this iteration ([`Status`], the paper's
//! `PCM_Status`).

use pcm_proto::Rank;

/// How this process came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessStatus {
    /// Started by `mpirun` with the job: initialise data from scratch.
    Fresh,
    /// Spawned to replace `rank`, which stored its state at `iteration`: load it and resume
    /// the loop at that iteration.
    Replacement {
        /// The rank this process took over.
        rank: Rank,
        /// Iteration (status call count) at which the predecessor stored its state.
        iteration: u64,
    },
    /// Started with `PCM_RESTART=1` and resumed from the coordinated checkpoint taken at
    /// `iteration`: load the state as a replacement does and resume the loop there.
    Restarted {
        /// Iteration (status call count) at which the checkpoint was taken.
        iteration: u64,
    },
    /// Spawned to widen a malleable job at `iteration` (docs/malleability.md): load the
    /// state (its rows of each declared array, the replicated values) as a replacement
    /// does, and resume the loop there.
    Added {
        /// Iteration (status call count) at which the job resized.
        iteration: u64,
    },
}

impl ProcessStatus {
    /// Whether the process starts with stored state to load (a replacement or a restart).
    pub fn has_state(self) -> bool {
        !matches!(self, ProcessStatus::Fresh)
    }
}

/// What the application must do at this iteration (the paper's `PCM_Status`).
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Nothing: compute.
    Continue,
    /// This rank moves: store its state, then call [`Pcm::reconfigure`](crate::Pcm::reconfigure).
    Migrate,
    /// Other ranks move: call [`Pcm::reconfigure`](crate::Pcm::reconfigure) (nothing to store).
    Reconfigure,
    /// Every rank takes a coordinated checkpoint: store the state as for a migration, then
    /// call [`Pcm::reconfigure`](crate::Pcm::reconfigure), which writes the checkpoint and hands the `Pcm` back.
    Checkpoint,
    /// The job changes its width (docs/malleability.md): every rank stores its state, its
    /// rows of each declared array with [`Pcm::store_block`](crate::Pcm::store_block), then calls
    /// [`Pcm::reconfigure`](crate::Pcm::reconfigure); every rank that stays then loads its state again (its new
    /// rows, [`Pcm::block_range`](crate::Pcm::block_range)).
    Resize,
}

impl Status {
    /// Whether the application must store its state now: for [`Status::Migrate`],
    /// [`Status::Checkpoint`] and [`Status::Resize`].
    pub fn stores_state(self) -> bool {
        matches!(self, Status::Migrate | Status::Checkpoint | Status::Resize)
    }
}
