//! The status check's driver: the collective part of [`Pcm::status`] (the paper's
//! `PCM_Status`). It exchanges the agreement's words with one all-reduce, agrees on the
//! pcmd requests held (all of them, highest id first, to carry out in one
//! reconfiguration), checks each plan and its new hosts, and turns the decisions of the
//! pure [`crate::agreement`] module into the [`Status`] the application sees.

use std::collections::BTreeSet;
use std::time::Instant;

use mpi::collective::SystemOperation;
use mpi::traits::*;
use pcm_proto::{HostName, Move, Outcome, RequestId, Resize, ToDaemon};

use super::reconfigure;
use super::Pcm;
use crate::agreement::{self, Next, RequestVerdict, Validated, Words};
use crate::daemon::{self, DaemonLink};
use crate::error::PcmError;
use crate::plan::Plan;
use crate::status::Status;
use crate::wire::{broadcast_bytes, encode_cbor};
use crate::{events, hosts, interpose, malleable, schedule};

impl Pcm {
    /// Asks whether the job must reconfigure at this iteration (the paper's `PCM_Status`).
    ///
    /// Collective in effect: every rank calls it once per iteration, at the same point, and
    /// every rank gets a consistent answer at the same iteration. Most calls return at once;
    /// every few milliseconds of wall time one call agrees with the other ranks (a small
    /// all-reduce).
    #[inline]
    pub fn status(&mut self) -> Result<Status, PcmError> {
        let iteration = self.job.iteration;
        if self.rank == 0 && events::loop_start_pending() {
            events::loop_started(iteration);
        }
        self.job.iteration += 1;
        self.resizing = false;
        if let Some(daemon) = &self.daemon {
            daemon.set_iteration(iteration);
            if daemon.profile_due() {
                self.send_profile(iteration);
            }
        }
        if self.resume_pending {
            self.resume_pending = false;
            return Ok(Status::Continue);
        }
        if iteration < self.job.next_check && !self.job.schedule.has(iteration) {
            return Ok(Status::Continue);
        }
        self.check(iteration)
    }

    /// Sends the rank's profile to its daemon (when the link asks, about once a second),
    /// with the job's resize limits ([`Pcm::set_malleable`]; C and Fortran declare through
    /// the same call), so that pcmd and the agents know the job is malleable.
    #[cold]
    pub(super) fn send_profile(&self, iteration: u64) {
        if let (true, Some(daemon)) = (self.profiler.enabled(), &self.daemon) {
            let mut profile = self.profiler.snapshot(iteration, &self.rank_hosts);
            profile.malleable = self.job.malleability;
            daemon.send(ToDaemon::Profile(profile));
        }
    }

    /// Gives up the coordinated checkpoint the last [`Pcm::status`] announced
    /// ([`Status::Checkpoint`]) without writing it, and turns checkpoints off for the rest of
    /// the run, in this process and the replacements it hands its context to. For a
    /// program that does not answer checkpoints (the C interface uses it when a program
    /// written like the paper's Figure 11 ignores `PCM_CHECKPOINT`). Every rank must call
    /// it at the same iteration, as they all got the same status. Returns whether a
    /// checkpoint was pending.
    pub fn decline_checkpoint(&mut self) -> bool {
        let pending = self.checkpoints.pending.is_some();
        if pending {
            self.checkpoints.stop();
            self.job.checkpoint = schedule::Policy::default();
        }
        pending
    }
}

impl Pcm {
    /// A status check that agrees with the other ranks (collective): exchanges the words,
    /// then carries out the step [`agreement::next`] decides.
    #[cold]
    pub(crate) fn check(&mut self, iteration: u64) -> Result<Status, PcmError> {
        let _internal = interpose::Internal::enter();
        let started = Instant::now();
        let scheduled = self.job.schedule.take_plan(iteration);
        let mine = Words {
            request: self.daemon.as_ref().map_or(0, DaemonLink::pending_max),
            interval: match &mut self.cadence {
                Some(cadence) => cadence.next_interval(iteration, Instant::now()),
                None => 0,
            },
            // Rank 0 decides when a checkpoint is due, so all ranks learn it at this check.
            checkpoint: self.checkpoints.word(Instant::now()),
        };
        // The job's slowest rank's compute since the last check rides on the same
        // all-reduce (a maximum too): the agents weigh a resize with it.
        let [request, interval, checkpoint] = mine.to_array();
        let mut agreed = [0u64; 4];
        let reduce_started = Instant::now();
        self.world.all_reduce_into(
            &[
                request,
                interval,
                checkpoint,
                self.profiler.span_compute_us(),
            ][..],
            &mut agreed[..],
            SystemOperation::max(),
        );
        let [request, interval, checkpoint, slowest_compute_us] = agreed;
        self.profiler
            .end_span(slowest_compute_us, reduce_started.elapsed());
        let agreed = Words::from_array([request, interval, checkpoint]);
        self.job.next_check = agreed.next_check(iteration);
        if self.rank == 0 {
            events::progress(iteration);
        }

        let deferred = self.checkpoints.deferred_move.take();
        let validated = match agreement::next(agreed, deferred, scheduled) {
            Next::Deferred { plan, postponed } => {
                if let Some(postponed) = postponed {
                    self.job.schedule.postpone_plan(iteration + 1, postponed);
                }
                return Ok(self.announce(plan, started));
            }
            Next::Scripted(plan) => self.validate(plan),
            Next::Request(highest) => match self.agree_on_requests(highest)? {
                Some(plan) => Ok(plan),
                None => return Ok(Status::Continue),
            },
            Next::Checkpoint => {
                self.checkpoints.pending = Some(iteration);
                return Ok(Status::Checkpoint);
            }
            Next::Continue => return Ok(Status::Continue),
        };
        match agreement::after_validation(validated, agreed.checkpoint) {
            Validated::CheckpointFirst(plan) => {
                self.checkpoints.deferred_move = Some(plan);
                self.checkpoints.pending = Some(iteration);
                self.job.next_check = iteration + 1;
                Ok(Status::Checkpoint)
            }
            Validated::Announce(plan) => Ok(self.announce(plan, started)),
            Validated::Refuse(plan, reason) => {
                self.refuse(&plan, reason);
                Ok(Status::Continue)
            }
        }
    }

    /// Checks `plan`'s moves against the job, and that the launcher reaches the hosts
    /// outside the allocation it names (collective): the plan sorted, or why it is refused.
    fn validate(&self, plan: Plan) -> Result<Plan, (Plan, String)> {
        let (mut plan, outside) =
            reconfigure::validate(plan, self.size, &self.job.hosts, &self.job.new_hosts)?;
        if let Some(asked) = plan.asked_resize.take() {
            match malleable::resolve(
                (*asked).clone(),
                self.size,
                &self.rank_hosts,
                &plan.moves,
                self.job.malleability.as_ref(),
                &self.job.blocks,
            ) {
                Ok(resize) => plan.resize = Some(Box::new(resize)),
                Err(reason) => {
                    plan.asked_resize = Some(asked);
                    return Err((plan, reason));
                }
            }
        }
        let mut none_added = Vec::new();
        let added = match plan.resize.as_deref_mut() {
            Some(resize) => &mut resize.added,
            None => &mut none_added,
        };
        hosts::place_unnamed(&mut plan.moves, added, &self.rank_hosts, &self.job.hosts);
        match self.probe_new_hosts(&outside) {
            Ok(()) => Ok(plan),
            Err(reason) => Err((plan, reason)),
        }
    }

    /// Agrees on every pcmd request the ranks hold, from `highest` down (collective): each
    /// is judged and validated alone, and those that may run are carried out together, in
    /// one reconfiguration, so that requests of several daemons held at one check stop the
    /// job once. A lower request naming a rank a higher one moves, or resizing when a
    /// higher one resizes, is refused, naming it; a resize is validated again with every
    /// move it runs with, and a request that makes it fail is refused, saying why.
    /// `None` when none may run (each holder has been told why).
    fn agree_on_requests(&mut self, highest: RequestId) -> Result<Option<Plan>, PcmError> {
        let mut together: Option<Plan> = None;
        let mut next = Some(highest);
        while let Some(id) = next {
            let agreed = together.as_ref().map_or(&[][..], |p| &p.requests[..]);
            if let Some(plan) = self.agree_on_request(id, agreed)? {
                match self.validate(plan) {
                    Ok(plan) => {
                        together = Some(match together.take() {
                            Some(current) => self.join(current, plan),
                            None => plan,
                        });
                    }
                    Err((plan, reason)) => self.refuse(&plan, reason),
                }
            }
            next = self.next_request_below(id);
        }
        Ok(together)
    }

    /// `current` with the validated `plan` of a lower request added, to run in one
    /// reconfiguration (collective); if they cannot go together, `plan` is refused and
    /// `current` returned as it was.
    fn join(&mut self, current: Plan, plan: Plan) -> Plan {
        let mut joined = current.clone();
        let recheck = joined.resize.is_some() || plan.resize.is_some();
        if let Err((plan, reason)) = joined.absorb(plan.clone()) {
            self.refuse(&plan, reason);
            return current;
        }
        if !recheck {
            return joined;
        }
        // A resize depends on the moves it runs with (a shrink cannot remove a rank that
        // migrates): checked again with all of them.
        match self.validate(joined) {
            Ok(joined) => joined,
            Err((_, reason)) => {
                let reason = format!("it cannot run with {}: {reason}", current.describe());
                self.refuse(&plan, reason);
                current
            }
        }
    }

    /// Refuses `plan`, which failed its validation for `reason`: rank 0 says so, and the
    /// holders of its request tell their daemon.
    fn refuse(&mut self, plan: &Plan, reason: String) {
        if self.rank == 0 {
            tracing::warn!("ignoring {}: {reason}", plan.describe());
        }
        self.report(plan, Outcome::Failed { reason });
    }

    /// The highest request id below `below` that some rank holds (collective): the next
    /// request the job agrees on at this check, if any.
    fn next_request_below(&self, below: RequestId) -> Option<RequestId> {
        let mine = self
            .daemon
            .as_ref()
            .map_or(0, |d| d.pending_max_below(below));
        let mut highest = 0u64;
        self.world
            .all_reduce_into(&mine, &mut highest, SystemOperation::max());
        (highest != 0).then_some(RequestId(highest))
    }

    /// Makes `plan`, agreed at the check that began at `started`, the pending
    /// reconfiguration, and says what this rank does in it.
    fn announce(&mut self, mut plan: Plan, started: Instant) -> Status {
        plan.agreed_at = Some(started);
        let status = agreement::status_in(&plan, self.rank);
        self.resizing = status == Status::Resize;
        self.pending = Some(plan);
        status
    }

    /// Rank 0 checks that the launcher reaches each host of `outside` (hosts outside the
    /// allocation, which the job's setting allows), and tells every rank the verdict.
    /// Collective; nothing is run when `outside` is empty.
    fn probe_new_hosts(&self, outside: &BTreeSet<HostName>) -> Result<(), String> {
        let hosts::NewHosts::Probed { launcher } = &self.job.new_hosts else {
            return Ok(());
        };
        if outside.is_empty() {
            return Ok(());
        }
        let verdict = (self.rank == 0).then(|| {
            let result: Result<(), String> = outside.iter().try_for_each(|h| {
                let started = std::time::Instant::now();
                let result = hosts::probe(launcher, h, hosts::PROBE_TIMEOUT);
                crate::events::emit(pcm_proto::run::RunEvent::HostProbed {
                    host: h.clone(),
                    reached: result.is_ok(),
                    micros: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                });
                result
            });
            encode_cbor(&result)
        });
        let bytes = broadcast_bytes(&self.world, 0, verdict);
        ciborium::from_reader::<Result<(), String>, _>(bytes.as_slice())
            .unwrap_or_else(|e| Err(format!("the check of new hosts was garbled: {e}")))
    }

    /// The ranks holding request `id` (delivered by their daemons) agree on who sends it,
    /// and that rank broadcasts its moves and epoch. `None` when the job must not run it:
    /// the job carried it out already (a copy reached a rank late), some rank settled it
    /// before (withdrawn after its deadline, or taken up already), a reconfiguration since
    /// it was made moved one of its ranks, or a request `agreed` before it at this check
    /// (which runs with it) moves one; the holders then report the completion, or why, to
    /// their daemon.
    fn agree_on_request(
        &mut self,
        id: RequestId,
        agreed: &[crate::plan::Answered],
    ) -> Result<Option<Plan>, PcmError> {
        let taken = self
            .daemon
            .as_ref()
            .map_or(daemon::Take::Absent, |d| d.take(id));
        let held = match &taken {
            daemon::Take::Held {
                moves,
                epoch,
                resize,
            } => Some((moves.clone(), *epoch, resize.clone())),
            _ => None,
        };
        let delivered_here = taken != daemon::Take::Absent && taken != daemon::Take::Settled;
        let unagreed = |held: Option<(Vec<Move>, u64, Option<Resize>)>| match held {
            Some((moves, _, resize)) => {
                Plan::answering(id, moves, delivered_here).with_resize(resize)
            }
            None => Plan::answering(id, Vec::new(), delivered_here),
        };
        // Every rank knows the same carried-out requests, so all of them take this branch
        // or none does.
        if let Some(outcome) = self.job.carried_out(id).cloned() {
            if delivered_here {
                tracing::info!(
                    "reconfiguration request {id} reached rank {} after the job had carried it out; reporting its completion again",
                    self.rank
                );
            }
            // Only the daemon hears of it: the application's last outcome stays the
            // latest reconfiguration's.
            self.tell_daemon(&unagreed(held), &outcome);
            return Ok(None);
        }
        // One all-reduce (min) for both: the lowest holder, and whether any rank has it
        // settled (0) or not (1).
        let candidate = [
            if held.is_some() {
                self.rank as u64
            } else {
                u64::MAX
            },
            u64::from(taken != daemon::Take::Settled),
        ];
        let mut lowest = [u64::MAX, 1];
        self.world
            .all_reduce_into(&candidate[..], &mut lowest[..], SystemOperation::min());
        let (owner, settled_somewhere) = (lowest[0], lowest[1] == 0);
        if settled_somewhere {
            if self.rank == 0 {
                tracing::info!(
                    "reconfiguration request {id} dropped: a rank had withdrawn it after its deadline or taken it up before"
                );
            }
            self.report(
                &unagreed(held),
                Outcome::Cancelled {
                    reason: format!(
                        "request {id} was withdrawn (it missed its deadline) or already taken up before the job agreed on it; nothing was moved"
                    ),
                },
            );
            return Ok(None);
        }
        if owner >= self.size as u64 {
            return Err(PcmError::internal(
                "a request was agreed but no rank holds it",
            ));
        }
        let bytes = held.as_ref().map(encode_cbor);
        let bytes = broadcast_bytes(&self.world, owner as i32, bytes);
        let (moves, epoch, resize): (Vec<Move>, u64, Option<Resize>) =
            ciborium::from_reader(bytes.as_slice())
                .map_err(|e| PcmError::Handover(e.to_string()))?;
        let plan = Plan::answering(id, moves, held.is_some()).with_resize(resize);
        let verdict = agreement::request_verdict(
            false,
            &plan.moves,
            plan.asked_resize.as_deref(),
            epoch,
            self.job.migrations,
            &self.job.recent,
            agreed,
        );
        let (by, by_moves, by_resize, why) = match verdict {
            RequestVerdict::Run => return Ok(Some(plan)),
            // Not reached: the settled case returned above.
            RequestVerdict::Drop => return Ok(None),
            RequestVerdict::TooOld(None) => {
                let reason = format!(
                    "request {id} was made when the job had completed {epoch} reconfiguration(s); it has completed {} since, from before its restart, which it does not remember, so its ranks may have moved; nothing was moved",
                    self.job.migrations - epoch
                );
                if self.rank == 0 {
                    tracing::warn!("refusing reconfiguration request {id}: {reason}");
                }
                self.report(&plan, Outcome::Failed { reason });
                return Ok(None);
            }
            RequestVerdict::Superseded(by) => (
                by.request,
                &by.moves,
                &by.resize,
                if by.resize.is_some() {
                    "resized the job since, which renumbered its ranks"
                } else if plan.asked_resize.is_some() {
                    "reconfigured the job since, so the width and placement the resize was asked for are gone"
                } else {
                    "moved one of its ranks since"
                },
            ),
            RequestVerdict::TooOld(Some(by)) => (
                by.request,
                &by.moves,
                &by.resize,
                "is the latest of those since, which the job does not all remember",
            ),
            RequestVerdict::Overlaps(with) => (
                Some(with.id),
                &with.moves,
                &with.resize,
                if with.resize.is_some() && plan.asked_resize.is_some() {
                    "resizes the job in the reconfiguration agreed at this check"
                } else {
                    "moves one of its ranks in the reconfiguration agreed at this check"
                },
            ),
        };
        if self.rank == 0 {
            tracing::warn!(
                "refusing reconfiguration request {id} ({}): it was made when the job had completed {epoch} reconfiguration(s), and {} ({}) {why}",
                pcm_proto::describe_request(&plan.moves, plan.asked_resize.as_deref()),
                by.map_or_else(|| "a scripted move".to_owned(), |r| format!("request {r}")),
                pcm_proto::describe_request(by_moves, by_resize.as_ref()),
            );
        }
        let outcome = Outcome::Superseded {
            by,
            moves: by_moves.clone(),
            resize: by_resize.clone(),
        };
        self.report(&plan, outcome);
        Ok(None)
    }

    /// Tells this rank's daemon how each request of `plan` it delivered ended, and makes
    /// `outcome` the application's last outcome.
    pub(crate) fn report(&mut self, plan: &Plan, outcome: Outcome) {
        self.tell_daemon(plan, &outcome);
        self.last_outcome = Some(outcome);
    }

    /// Tells this rank's daemon how each request of `plan` it delivered ended, each told of
    /// its own ranks (nothing if this rank holds none of them).
    fn tell_daemon(&self, plan: &Plan, outcome: &Outcome) {
        let Some(daemon) = &self.daemon else { return };
        for request in plan.held_here() {
            daemon.send(ToDaemon::ReconfigurationFinished {
                request: request.id,
                outcome: request.own_outcome(outcome),
            });
        }
    }
}
