//! When the grid last changed: what tells whether a comparison with a plain run can fail.
//!
//! Relaxed long enough, the grid reaches a bit-exact fixed point (256 x 256 after 387,919
//! iterations; docs/results-log.md), and from then on every run ends with the same checksum,
//! whatever iterations it skipped, repeated or computed wrong on the way. `heat2d-plain`
//! reports the last iteration at which its grid still changed ([`crate::PlainReport::last_change`]),
//! so that a test comparing a run with moves against it can refuse a comparison that could
//! not fail (the test harness's `Report::reference_checksum`).

use mpi::collective::SystemOperation;
use mpi::topology::Communicator;
use mpi::traits::CommunicatorCollectives;

use crate::block::Block;

/// Samples of a run, at most: one every `iters / SAMPLES` iterations (and the last), so that
/// the comparisons cost nothing measurable and still place the last change within 0.1 % of
/// the run.
pub const SAMPLES: u64 = 1024;

/// The last sampled iteration at which one rank's block changed ([`Block::changed_in_last_step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settling {
    iters: u64,
    every: u64,
    last_change: u64,
}

impl Settling {
    /// For a run of `iters` iterations: nothing seen changing yet.
    #[must_use]
    pub fn new(iters: u64) -> Self {
        Self {
            iters,
            every: (iters / SAMPLES).max(1),
            last_change: 0,
        }
    }

    /// Iterations between two samples.
    #[must_use]
    pub fn every(&self) -> u64 {
        self.every
    }

    /// Whether the state after `done` iterations is sampled: every [`Settling::every`]-th
    /// and the last.
    #[must_use]
    pub fn due(&self, done: u64) -> bool {
        done % self.every == 0 || done == self.iters
    }

    /// Records whether the step that completed `done` iterations changed the block.
    pub fn observe(&mut self, done: u64, changed: bool) {
        if changed {
            self.last_change = self.last_change.max(done);
        }
    }

    /// After the step that completed `done` iterations of `block`: samples it when due.
    pub fn sample(&mut self, done: u64, block: &Block) {
        if self.due(done) {
            self.observe(done, block.changed_in_last_step());
        }
    }

    /// The last sampled iteration at which this rank's block changed (0: none seen).
    #[must_use]
    pub fn last_change(&self) -> u64 {
        self.last_change
    }

    /// The last sampled iteration at which any rank's block changed: the grid's. Collective
    /// over `comm`.
    pub fn last_change_of_all(&self, comm: &impl Communicator) -> u64 {
        let mut all = 0_u64;
        comm.all_reduce_into(&self.last_change, &mut all, SystemOperation::max());
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_a_long_run_then_it_samples_every_thousandth_and_the_last_iteration() {
        let settling = Settling::new(1_000_000);
        assert_eq!(settling.every(), 976);
        assert!(settling.due(976) && settling.due(1_000_000));
        assert!(!settling.due(977) && !settling.due(999_999));
        let short = Settling::new(120);
        assert!((1..=120).all(|done| short.due(done)));
    }

    #[test]
    fn given_changes_then_the_last_one_is_kept() {
        let mut settling = Settling::new(10);
        assert_eq!(settling.last_change(), 0);
        settling.observe(3, true);
        settling.observe(4, false);
        assert_eq!(settling.last_change(), 3);
    }

    #[test]
    fn given_a_small_grid_relaxed_to_its_fixed_point_then_it_stops_changing() {
        // 8 x 8 settles within a few hundred iterations; a changing grid changes at once.
        let mut block = Block::new(8, 8, 0, 1).expect("valid");
        let mut settling = Settling::new(5000);
        for done in 1..=5000 {
            block.relax();
            settling.observe(done, block.changed_in_last_step());
        }
        let last = settling.last_change();
        assert!(last > 1 && last < 2500, "last change at {last}");
        block.relax();
        assert!(!block.changed_in_last_step());
    }
}
