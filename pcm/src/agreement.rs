//! The status agreement's decisions, pure: words in, decision out.
//!
//! A status check that talks to the other ranks (see the `handle::status` module, which drives
//! it) contributes three words to one all-reduce (max): the pcmd request this rank holds
//! (0: none), rank 0's proposed check interval, and rank 0's checkpoint bits. From the
//! agreed words, the move waiting for a checkpoint, and the scripted move due now, every
//! rank reaches the same [`Next`] step; after the plan is validated, the same
//! [`Validated`] step; and from a request's epoch and the requests agreed before it at
//! the same check, the same [`RequestVerdict`]. Nothing here does I/O or MPI, so every
//! rule has a unit test below.

use std::collections::VecDeque;

use pcm_proto::{Move, Resize};

use crate::job::Reconfiguration;
use crate::plan::{Answered, Plan};
use crate::schedule::CheckpointTimer;
use crate::status::Status;

/// What one rank contributes to the check's all-reduce (max), and what all agree on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Words {
    /// The highest pcmd request id this rank holds (0: none).
    pub(crate) request: u64,
    /// Rank 0's proposed interval to the next check, in status calls (others: 0).
    pub(crate) interval: u64,
    /// Rank 0's checkpoint bits ([`CheckpointTimer::DUE`], [`CheckpointTimer::BEFORE_MOVE`]).
    pub(crate) checkpoint: u64,
}

impl Words {
    /// The words as the all-reduce sends them.
    pub(crate) fn to_array(self) -> [u64; 3] {
        [self.request, self.interval, self.checkpoint]
    }

    /// The words the all-reduce returned.
    pub(crate) fn from_array(words: [u64; 3]) -> Self {
        Words {
            request: words[0],
            interval: words[1],
            checkpoint: words[2],
        }
    }

    /// The status call that checks next, after the one at `iteration`.
    pub(crate) fn next_check(self, iteration: u64) -> u64 {
        iteration + self.interval.max(1)
    }
}

/// The step a check takes once the words are agreed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Make the move that waited for the checkpoint taken at the last check. A scripted
    /// move due now (`postponed`) waits for the next status call instead of being dropped.
    Deferred {
        /// The move agreed at the last check.
        plan: Plan,
        /// The scripted reconfiguration due now, to schedule again at the next call.
        postponed: Option<Plan>,
    },
    /// A scripted move (`PCM_SCHEDULE`) due now: validate it.
    Scripted(Plan),
    /// Some rank holds pcmd request `id`, the highest held: the ranks agree on it, then on
    /// each lower one held (collective), validate each, and carry out together those that
    /// may run.
    Request(pcm_proto::RequestId),
    /// A coordinated checkpoint is due.
    Checkpoint,
    /// Nothing to do.
    Continue,
}

/// The step at a check, from the agreed words, the move that waited for a checkpoint, and
/// the scripted moves due now. A move goes before a checkpoint (rank 0 still finds the
/// checkpoint due at the next check); a deferred move goes before everything.
pub(crate) fn next(words: Words, deferred: Option<Plan>, scheduled: Option<Plan>) -> Next {
    if let Some(plan) = deferred {
        Next::Deferred {
            plan,
            postponed: scheduled,
        }
    } else if let Some(plan) = scheduled {
        Next::Scripted(plan)
    } else if words.request != 0 {
        Next::Request(pcm_proto::RequestId(words.request))
    } else if words.checkpoint & CheckpointTimer::DUE != 0 {
        Next::Checkpoint
    } else {
        Next::Continue
    }
}

/// The step for a plan after its validation (moves, hosts, new hosts checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Validated {
    /// Take a checkpoint first and make the move at the next status call (which checks
    /// again): if the move fails (a replacement dies while starting and the job ends),
    /// the restart loses nothing.
    CheckpointFirst(Plan),
    /// Announce the move now.
    Announce(Plan),
    /// Refuse it: every rank carries on, and the rank that delivered it reports `reason`.
    Refuse(Plan, String),
}

/// The step for `validated` when rank 0's checkpoint bits are `checkpoint`.
pub(crate) fn after_validation(
    validated: Result<Plan, (Plan, String)>,
    checkpoint: u64,
) -> Validated {
    match validated {
        Ok(plan) if checkpoint & CheckpointTimer::BEFORE_MOVE != 0 => {
            Validated::CheckpointFirst(plan)
        }
        Ok(plan) => Validated::Announce(plan),
        Err((plan, reason)) => Validated::Refuse(plan, reason),
    }
}

/// What `rank` does in an announced `plan`: it moves, or the others move.
pub(crate) fn status_in(plan: &Plan, rank: u32) -> Status {
    if plan.resize.is_some() {
        Status::Resize
    } else if plan.moves.iter().any(|m| m.rank.0 == rank) {
        Status::Migrate
    } else {
        Status::Reconfigure
    }
}

/// What a status check does with a pcmd request the ranks agreed on, from what every rank
/// told of it: pure, so that every rank reaches the same verdict from the same inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RequestVerdict<'a> {
    /// Carry it out.
    Run,
    /// Some rank had settled it (withdrawn after its deadline, or already taken up once):
    /// drop it.
    Drop,
    /// A reconfiguration completed after the request was made moved a rank it names, or
    /// resized the job (which renumbers the ranks), or the request resizes and the job
    /// reconfigured at all since (its width and placement are not the ones the request
    /// was made for): refuse it, naming that reconfiguration.
    Superseded(&'a Reconfiguration),
    /// The job no longer remembers every reconfiguration completed since the request was
    /// made, so one of them may have moved its ranks: refuse it, naming the latest (if the
    /// job remembers any: a restart from a checkpoint older than this memory has none).
    TooOld(Option<&'a Reconfiguration>),
    /// A request agreed before it at the same check, to be carried out in the same
    /// reconfiguration, moves a rank it names, or both resize the job: refuse it, naming
    /// that request.
    Overlaps(&'a Answered),
}

/// The verdict on an agreed request for `moves` and `resize`: `settled_somewhere` if any
/// rank reported it settled, `epoch` the job's epoch when the daemon made it, `migrations`
/// the job's epoch now, `recent` the reconfigurations the job remembers (oldest first),
/// `agreed` the requests agreed earlier at this check (they will run with it).
///
/// A request is not refused because the job reconfigured since it was made, only when a
/// rank it names was moved since, or is moved by a request that runs with it: two daemons
/// asking at once to move different ranks of a job both get their move, in one
/// reconfiguration when both requests are held at one check, and neither can move a rank
/// the other moves (item 14). Resizes are stricter: a resize since the request was made
/// renumbered the ranks and changed the width, so it supersedes every request made before
/// it; a request that resizes was made for the job's width and placement then, so any
/// reconfiguration since supersedes it; and two resizes never run together. A move and a
/// resize of different requests held at one check do (the resize is then checked with
/// every move it runs with: see [`Plan::absorb`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn request_verdict<'a>(
    settled_somewhere: bool,
    moves: &[Move],
    resize: Option<&Resize>,
    epoch: u64,
    migrations: u64,
    recent: &'a VecDeque<Reconfiguration>,
    agreed: &'a [Answered],
) -> RequestVerdict<'a> {
    if settled_somewhere {
        return RequestVerdict::Drop;
    }
    let shares_a_rank = |done: &[Move]| {
        done.iter()
            .any(|done| moves.iter().any(|asked| asked.rank == done.rank))
    };
    let overlapping = agreed
        .iter()
        .find(|a| shares_a_rank(&a.moves) || (resize.is_some() && a.resize.is_some()));
    if epoch >= migrations {
        return overlapping.map_or(RequestVerdict::Run, RequestVerdict::Overlaps);
    }
    let remembers_all_since = recent.front().is_some_and(|oldest| oldest.epoch <= epoch);
    if !remembers_all_since {
        return RequestVerdict::TooOld(recent.back());
    }
    let moved_since = recent
        .iter()
        .filter(|r| r.epoch >= epoch)
        .find(|r| resize.is_some() || r.resize.is_some() || shares_a_rank(&r.moves));
    match (moved_since, overlapping) {
        (Some(by), _) => RequestVerdict::Superseded(by),
        (None, Some(with)) => RequestVerdict::Overlaps(with),
        (None, None) => RequestVerdict::Run,
    }
}

#[cfg(test)]
mod tests {
    use pcm_proto::{Rank, RequestId};

    use super::*;

    fn moves(ranks: &[u32]) -> Vec<Move> {
        ranks
            .iter()
            .map(|&r| Move {
                rank: Rank(r),
                to: None,
            })
            .collect()
    }

    fn plan(request: Option<u64>, ranks: &[u32]) -> Plan {
        match request {
            Some(id) => Plan::answering(RequestId(id), moves(ranks), false),
            None => Plan::scripted(moves(ranks)),
        }
    }

    fn words(request: u64, interval: u64, checkpoint: u64) -> Words {
        Words {
            request,
            interval,
            checkpoint,
        }
    }

    #[test]
    fn given_nothing_agreed_then_continue_and_the_next_check_is_at_least_one_call_on() {
        assert_eq!(next(Words::default(), None, None), Next::Continue);
        assert_eq!(words(0, 0, 0).next_check(10), 11);
        assert_eq!(words(0, 7, 0).next_check(10), 17);
        let w = words(3, 5, 1);
        assert_eq!(Words::from_array(w.to_array()), w);
    }

    #[test]
    fn given_a_deferred_move_then_it_goes_first_and_a_scripted_one_is_postponed() {
        let deferred = plan(Some(4), &[1]);
        let step = next(
            words(9, 0, CheckpointTimer::DUE),
            Some(deferred.clone()),
            Some(Plan::scripted(moves(&[2]))),
        );
        assert_eq!(
            step,
            Next::Deferred {
                plan: deferred,
                postponed: Some(Plan::scripted(moves(&[2])))
            }
        );
    }

    #[test]
    fn given_a_scripted_move_and_a_request_then_the_scripted_move_goes_first() {
        let step = next(
            words(9, 0, CheckpointTimer::DUE),
            None,
            Some(Plan::scripted(moves(&[0]))),
        );
        assert_eq!(step, Next::Scripted(plan(None, &[0])));
    }

    #[test]
    fn given_a_request_and_a_due_checkpoint_then_the_request_goes_first() {
        assert_eq!(
            next(words(9, 0, CheckpointTimer::DUE), None, None),
            Next::Request(RequestId(9))
        );
        assert_eq!(
            next(words(0, 0, CheckpointTimer::DUE), None, None),
            Next::Checkpoint
        );
        // The before-move bit alone does not make a checkpoint due.
        assert_eq!(
            next(words(0, 0, CheckpointTimer::BEFORE_MOVE), None, None),
            Next::Continue
        );
    }

    #[test]
    fn given_a_validated_plan_then_a_checkpoint_comes_first_when_rank_0_asks() {
        let p = plan(None, &[1]);
        assert_eq!(
            after_validation(Ok(p.clone()), CheckpointTimer::BEFORE_MOVE),
            Validated::CheckpointFirst(p.clone())
        );
        assert_eq!(
            after_validation(Ok(p.clone()), 0),
            Validated::Announce(p.clone())
        );
        assert_eq!(
            after_validation(
                Err((p.clone(), "no such host".into())),
                CheckpointTimer::BEFORE_MOVE
            ),
            Validated::Refuse(p, "no such host".into())
        );
    }

    #[test]
    fn given_an_announced_plan_then_only_the_moving_ranks_migrate() {
        let p = plan(Some(1), &[0, 2]);
        assert_eq!(status_in(&p, 0), Status::Migrate);
        assert_eq!(status_in(&p, 1), Status::Reconfigure);
        assert_eq!(status_in(&p, 2), Status::Migrate);
    }

    fn done(epoch: u64, request: u64, ranks: &[u32]) -> Reconfiguration {
        Reconfiguration {
            epoch,
            request: Some(RequestId(request)),
            moves: moves(ranks),
            resize: None,
        }
    }

    fn resize(ranks: u32) -> Resize {
        Resize {
            ranks,
            hosts: Vec::new(),
        }
    }

    fn resized(epoch: u64, request: u64, ranks: u32) -> Reconfiguration {
        Reconfiguration {
            resize: Some(resize(ranks)),
            ..done(epoch, request, &[])
        }
    }

    /// Item 14: two daemons' requests to move the same rank, made at the same epoch: the
    /// one the job agrees on first runs and moves the epoch on; the other, agreed later,
    /// is refused as superseded by it instead of moving the rank a second time.
    #[test]
    fn given_two_requests_of_one_epoch_for_one_rank_then_only_the_first_agreed_runs() {
        let mut recent = VecDeque::new();
        assert_eq!(
            request_verdict(false, &moves(&[1]), None, 0, 0, &recent, &[]),
            RequestVerdict::Run
        );
        recent.push_back(done(0, 7, &[1]));
        assert_eq!(
            request_verdict(false, &moves(&[1]), None, 0, 1, &recent, &[]),
            RequestVerdict::Superseded(&done(0, 7, &[1]))
        );
        // A request made after the move (the daemon heard of it) runs.
        assert_eq!(
            request_verdict(false, &moves(&[1]), None, 1, 1, &recent, &[]),
            RequestVerdict::Run
        );
    }

    /// Two daemons' requests of one epoch for different ranks both run, one after the
    /// other; one naming a moved rank among others is refused whole.
    #[test]
    fn given_a_request_whose_ranks_were_not_moved_since_then_it_runs() {
        let recent: VecDeque<_> = [done(0, 7, &[1]), done(1, 8, &[0, 3])].into();
        assert_eq!(
            request_verdict(false, &moves(&[2]), None, 0, 2, &recent, &[]),
            RequestVerdict::Run
        );
        assert_eq!(
            request_verdict(false, &moves(&[2, 3]), None, 0, 2, &recent, &[]),
            RequestVerdict::Superseded(&done(1, 8, &[0, 3]))
        );
        // Rank 1 moved at epoch 0, before a request made at epoch 1: not since it.
        assert_eq!(
            request_verdict(false, &moves(&[1]), None, 1, 2, &recent, &[]),
            RequestVerdict::Run
        );
    }

    /// A request older than every reconfiguration the job remembers (or made before a
    /// restart from a checkpoint that kept none) is refused: nothing shows that the
    /// forgotten ones left its ranks alone.
    #[test]
    fn given_a_request_older_than_the_job_remembers_then_it_is_superseded() {
        let recent: VecDeque<_> = [done(5, 9, &[0])].into();
        assert_eq!(
            request_verdict(false, &moves(&[2]), None, 4, 6, &recent, &[]),
            RequestVerdict::TooOld(Some(&done(5, 9, &[0])))
        );
        assert_eq!(
            request_verdict(false, &moves(&[2]), None, 4, 6, &VecDeque::new(), &[]),
            RequestVerdict::TooOld(None)
        );
    }

    /// Item 13: a request some rank withdrew (or took up before) is dropped, whatever its
    /// epoch.
    #[test]
    fn given_a_request_settled_on_some_rank_then_it_is_dropped() {
        let recent = VecDeque::new();
        assert_eq!(
            request_verdict(true, &moves(&[1]), None, 5, 5, &recent, &[]),
            RequestVerdict::Drop
        );
        assert_eq!(
            request_verdict(true, &moves(&[1]), None, 0, 5, &recent, &[]),
            RequestVerdict::Drop
        );
    }

    /// Requests held at one check run together: a lower one naming a rank that a higher one
    /// agreed before it moves is refused, naming that request; one naming other ranks runs
    /// with it. A rank moved since the request was made is named first.
    #[test]
    fn given_requests_agreed_at_one_check_then_only_one_moves_each_rank() {
        let recent: VecDeque<_> = [done(0, 7, &[1])].into();
        let first = plan(Some(9), &[2, 3]);
        let agreed = &first.requests[..];
        assert_eq!(
            request_verdict(false, &moves(&[0]), None, 1, 1, &recent, agreed),
            RequestVerdict::Run
        );
        assert_eq!(
            request_verdict(false, &moves(&[0, 3]), None, 1, 1, &recent, agreed),
            RequestVerdict::Overlaps(&first.requests[0])
        );
        assert_eq!(
            request_verdict(false, &moves(&[3]), None, 0, 1, &recent, agreed),
            RequestVerdict::Overlaps(&first.requests[0])
        );
        assert_eq!(
            request_verdict(false, &moves(&[1, 3]), None, 0, 1, &recent, agreed),
            RequestVerdict::Superseded(&done(0, 7, &[1]))
        );
    }

    /// A resize renumbers the ranks: every request made before it is superseded by it,
    /// whatever ranks it names; one made after it (the daemon heard of it) runs.
    #[test]
    fn given_a_resize_since_a_request_was_made_then_the_request_is_superseded() {
        let recent: VecDeque<_> = [done(0, 7, &[1]), resized(1, 8, 3)].into();
        assert_eq!(
            request_verdict(false, &moves(&[0]), None, 1, 2, &recent, &[]),
            RequestVerdict::Superseded(&resized(1, 8, 3))
        );
        assert_eq!(
            request_verdict(false, &[], Some(&resize(4)), 1, 2, &recent, &[]),
            RequestVerdict::Superseded(&resized(1, 8, 3))
        );
        assert_eq!(
            request_verdict(false, &moves(&[0]), None, 2, 2, &recent, &[]),
            RequestVerdict::Run
        );
    }

    /// A resize request was made for the job's width and placement then: any
    /// reconfiguration since supersedes it, even one that moved other ranks.
    #[test]
    fn given_a_move_since_a_resize_request_was_made_then_the_resize_is_superseded() {
        let recent: VecDeque<_> = [done(0, 7, &[1])].into();
        assert_eq!(
            request_verdict(false, &[], Some(&resize(3)), 0, 1, &recent, &[]),
            RequestVerdict::Superseded(&done(0, 7, &[1]))
        );
        assert_eq!(
            request_verdict(false, &[], Some(&resize(3)), 1, 1, &recent, &[]),
            RequestVerdict::Run
        );
    }

    /// At one check: two resizes overlap (the later agreed is refused, naming the first);
    /// a move and a resize of different requests run together.
    #[test]
    fn given_requests_agreed_at_one_check_then_only_one_resizes() {
        let recent = VecDeque::new();
        let first = Plan::answering(RequestId(9), Vec::new(), false).with_resize(Some(resize(3)));
        let agreed = &first.requests[..];
        assert_eq!(
            request_verdict(false, &[], Some(&resize(4)), 0, 0, &recent, agreed),
            RequestVerdict::Overlaps(&first.requests[0])
        );
        assert_eq!(
            request_verdict(false, &moves(&[1]), None, 0, 0, &recent, agreed),
            RequestVerdict::Run
        );
        let mover = plan(Some(9), &[1]);
        assert_eq!(
            request_verdict(false, &[], Some(&resize(3)), 0, 0, &recent, &mover.requests),
            RequestVerdict::Run
        );
    }
}
