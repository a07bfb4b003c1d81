//! Departed processes and `MPI_Finalize`.
//!
//! In Open MPI 4, `MPI_Finalize` waits until every process of the same *launch* (the
//! `mpirun` start, or one `MPI_Comm_spawn`) has called it too; a process that leaves without
//! it makes the others hang (measured: 7 runs in 60 with Open MPI's
//! `orte_allowed_exit_without_sync`, plus failed later spawns across hosts). And waiting
//! inside `MPI_Finalize` is not free: it polls, about 5% of a core, on the very node the
//! process was moved away from.
//!
//! So a departed process frees its state and waits outside MPI_Finalize, on a receive over
//! its launch's `MPI_COMM_WORLD` polled 20 times a second (no measurable CPU), until the
//! launch ends: the lowest surviving member of the launch releases the departed ones when
//! it finalizes, or, if no member survives, the last one to depart releases the others.
//! Every member then reaches `MPI_Finalize` and it completes.

use std::collections::BTreeSet;
use std::time::Duration;

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

/// Tag of the release message on the launch's `MPI_COMM_WORLD` (the application never
/// uses that communicator, only PCM's world).
const RELEASE_TAG: i32 = 0x0050_434d;
/// How often a departed process checks for its release.
const RELEASE_POLL: Duration = Duration::from_millis(50);

/// This process's launch and which of its members have departed.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// 0 for `mpirun`'s launch, N for the replacements spawned by reconfiguration N.
    pub(crate) generation: u64,
    /// Rank in the launch's `MPI_COMM_WORLD`.
    pub(crate) rank: i32,
    size: i32,
    /// Launch ranks of departed members (this process included once it departs).
    departed: BTreeSet<i32>,
}

impl Launch {
    pub(crate) fn new(launch_world: &SimpleCommunicator, generation: u64) -> Self {
        Launch {
            generation,
            rank: launch_world.rank(),
            size: launch_world.size(),
            departed: BTreeSet::new(),
        }
    }

    /// Notes departures: `members` gives `(generation, launch rank)` of every process taking
    /// part in a reconfiguration, `departing` the indices of the departing ones.
    pub(crate) fn record_departures(
        &mut self,
        members: &[[u64; 2]],
        departing: impl Iterator<Item = usize>,
    ) {
        for index in departing {
            let [generation, rank] = members[index];
            if generation == self.generation {
                self.departed.insert(rank as i32);
            }
        }
    }

    fn alive(&self) -> impl Iterator<Item = i32> + '_ {
        (0..self.size).filter(|r| !self.departed.contains(r))
    }

    /// Called by a process that keeps running, at finalize: release the departed members if
    /// this process is the lowest surviving one.
    pub(crate) fn release_if_lowest(&self, launch_world: &SimpleCommunicator) {
        if !self.departed.is_empty() && self.alive().next() == Some(self.rank) {
            self.release(launch_world);
        }
    }

    /// Called by a departed process before `MPI_Finalize`: wait for the release, or give it
    /// if this was the last member of the launch.
    pub(crate) fn leave(&self, launch_world: &SimpleCommunicator) {
        if self.alive().next().is_none() {
            self.release(launch_world);
            return;
        }
        let mut signal = 0u8;
        mpi::request::scope(|scope| {
            let mut request = launch_world.any_process().immediate_receive_into_with_tag(
                scope,
                &mut signal,
                RELEASE_TAG,
            );
            loop {
                match request.test() {
                    Ok(_) => break,
                    Err(pending) => request = pending,
                }
                std::thread::sleep(RELEASE_POLL);
            }
        });
    }

    fn release(&self, launch_world: &SimpleCommunicator) {
        for &rank in self.departed.iter().filter(|&&r| r != self.rank) {
            launch_world
                .process_at_rank(rank)
                .send_with_tag(&1u8, RELEASE_TAG);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(rank: i32, size: i32) -> Launch {
        Launch {
            generation: 0,
            rank,
            size,
            departed: BTreeSet::new(),
        }
    }

    #[test]
    fn departures_of_other_launches_are_ignored() {
        let mut l = launch(0, 3);
        l.record_departures(&[[0, 0], [0, 1], [2, 0]], [1, 2].into_iter());
        assert_eq!(l.departed, BTreeSet::from([1]));
        assert_eq!(l.alive().collect::<Vec<_>>(), [0, 2]);
    }
}
