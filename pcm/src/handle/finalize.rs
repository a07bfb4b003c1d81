//! How a process ends: [`Pcm::finalize`] after the loop (the paper's `PCM_Finalize`),
//! dropping the handle, and a process that handed its rank to a replacement ([`Departed`]).

use std::time::Duration;

use mpi::topology::SimpleCommunicator;
use pcm_proto::Rank;

use super::checkpoint;
use super::{MpiOwner, Pcm};
use crate::config::SCHEDULE_ENV;
use crate::daemon::DaemonLink;
use crate::interpose::WorldStandIn;
use crate::launch::Launch;
use crate::schedule::Schedule;
use crate::{departed_peers, events, ffi, interpose, runtime};

impl Pcm {
    /// Moves this process's MPI parts into a [`Departed`] after its world was split away;
    /// the handle is spent.
    pub(crate) fn depart(&mut self) -> Departed {
        self.spent = true;
        release_stand_in(std::mem::take(&mut self.world_stand_in));
        release(std::mem::replace(
            &mut self.world,
            SimpleCommunicator::world(),
        ));
        Departed {
            rank: self.rank,
            daemon: self.daemon.take(),
            launch: self.launch.clone(),
            // The placeholder left behind finalizes nothing.
            universe: std::mem::replace(&mut self.universe, MpiOwner::Application),
        }
    }

    /// Ends PCM and MPI after the application's loop ran to its end (the paper's
    /// `PCM_Finalize` followed by `MPI_Finalize`): like dropping the handle, and it also
    /// records that the job ended by itself, so that a later `PCM_RESTART=1` says so
    /// instead of resuming it, and warns of `PCM_SCHEDULE` entries never reached.
    /// Collective over the world; also releases departed processes waiting for this launch
    /// to end.
    pub fn finalize(mut self) {
        let _internal = interpose::Internal::enter();
        if self.rank == 0 {
            warn_unreached(&self.job.schedule, self.job.iteration);
            events::final_progress(self.job.iteration);
        }
        if self.rank == 0 && (self.job.checkpoint.enabled() || self.job.resumed) {
            checkpoint::mark_finished(&self);
        }
        self.shut_down();
    }

    /// Leaves the daemon, releases departed processes (Open MPI 4), frees the world, and
    /// finalizes MPI if PCM initialised it. Collective over the world.
    fn shut_down(&mut self) {
        let _internal = interpose::Internal::enter();
        self.spent = true;
        self.send_profile(self.job.iteration);
        if let Some(daemon) = self.daemon.take() {
            daemon.set_iteration(self.job.iteration);
            daemon.shutdown(Duration::from_millis(500));
        }
        let universe = std::mem::replace(&mut self.universe, MpiOwner::Application);
        if !runtime::PROMPT_DEPARTURE {
            self.launch.release_if_lowest(&universe.world());
        }
        drop(std::mem::take(&mut self.world_stand_in));
        drop(std::mem::replace(
            &mut self.world,
            SimpleCommunicator::world(),
        ));
        // Finalizes MPI if PCM initialised it; the application finalizes it otherwise.
        drop(universe);
        let closed = departed_peers::forgiven_closes();
        if closed > 0 {
            tracing::debug!(
                "MPI_Finalize: {closed} endpoint(s) to processes that left the job could not \
                 be flushed (their connection is gone) and were closed as done"
            );
        }
    }
}

/// Dropping a `Pcm` ends PCM and MPI as [`Pcm::finalize`] does (collectively), except that
/// it does not record the job as ended by itself: a job dropped on an error can still be
/// restarted from its checkpoints. A handle broken by a failed reconfiguration, or dropped
/// while a panic unwinds, is only freed; a departed process's handle holds nothing more.
impl Drop for Pcm {
    fn drop(&mut self) {
        // While a panic unwinds, the other ranks are not shutting down with this one:
        // only free the handle, as a broken one.
        if !self.spent && !self.broken && !std::thread::panicking() {
            self.shut_down();
        }
    }
}

/// A process that has handed its rank to a replacement. It must not compute any more.
pub struct Departed {
    rank: u32,
    daemon: Option<DaemonLink>,
    launch: Launch,
    universe: MpiOwner,
}

impl Departed {
    /// The rank this process held.
    pub fn rank(&self) -> Rank {
        Rank(self.rank)
    }

    /// Leaves the job and ends the process with status 0.
    ///
    /// On MPICH it finalizes and exits at once. Open MPI 4 finalizes a process only together
    /// with the processes launched with it, so there this sleeps (no measurable CPU) until
    /// they finish, then returns from `MPI_Finalize` and exits. Release large buffers
    /// before calling it.
    pub fn finalize(self) -> ! {
        let Departed {
            daemon,
            launch,
            universe,
            rank,
        } = self;
        let _internal = interpose::Internal::enter();
        if let Some(daemon) = daemon {
            daemon.shutdown(Duration::from_millis(500));
        }
        if !runtime::PROMPT_DEPARTURE {
            tracing::debug!("former rank {rank} waits for its launch to end");
            launch.leave(&universe.world());
        }
        universe.finalize_departed();
        std::process::exit(0)
    }
}

impl std::fmt::Debug for Departed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Departed")
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

/// Lets go of a communicator shared with departing processes, at the same point on all its
/// members: disconnected where departures are prompt (so that the departing process owes
/// the others nothing and can finalize alone), freed otherwise.
pub(crate) fn release(comm: SimpleCommunicator) {
    if crate::runtime::PROMPT_DEPARTURE {
        ffi::disconnect(comm);
    } else {
        drop(comm);
    }
}

/// Withdraws the stand-in for `MPI_COMM_WORLD` of a world about to be released, and
/// releases it as that world is ([`release`]), at the same point on all its members.
pub(crate) fn release_stand_in(stand_in: WorldStandIn) {
    if let Some(comm) = stand_in.into_comm() {
        release(comm);
    }
}

/// Warns about each `PCM_SCHEDULE` entry a run of `iterations` status calls never reached
/// (it used to be ignored silently). Returns the warnings, for tests.
fn warn_unreached(schedule: &Schedule, iterations: u64) -> Vec<String> {
    let warnings: Vec<String> = schedule
        .unreached()
        .into_iter()
        .map(|entry| {
            format!(
                "{}: entry {entry:?} was never carried out: the run ended after {iterations} iterations (status calls 0 to {})",
                SCHEDULE_ENV,
                iterations.saturating_sub(1)
            )
        })
        .collect();
    for w in &warnings {
        tracing::warn!("{w}");
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Item 16: a scripted move past the end of the run is named in a warning.
    #[test]
    fn given_a_schedule_entry_past_the_end_then_a_warning_names_it() {
        let schedule = Schedule::parse("50:1,5000:2@node-b").unwrap();
        let mut left = schedule.clone();
        left.take(50);
        let warnings = warn_unreached(&left, 200);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("PCM_SCHEDULE")
                && warnings[0].contains("\"5000:2@node-b\"")
                && warnings[0].contains("after 200 iterations"),
            "{warnings:?}"
        );
        assert!(warn_unreached(&Schedule::default(), 200).is_empty());
    }
}
