//! A reconfiguration agreed by every rank and not yet carried out ([`Plan`]), and the
//! pcmd requests it answers.
//!
//! A status check carries out in one reconfiguration every pcmd request the job holds
//! that may run: a job whose ranks several daemons ask to move at once (agents of
//! different nodes, each moving a rank of its own) stops once, not once per request.
//! Each request's holder is still told its own outcome, naming only its own ranks.

use pcm_proto::{Move, Outcome, RequestId, Resize};

use crate::malleable::ResizePlan;
use serde::{Deserialize, Serialize};

/// A reconfiguration agreed by every rank, not yet carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Plan {
    /// The daemon requests it answers, in the order the job agreed on them (highest id
    /// first), no two naming the same rank; empty for a scripted move.
    pub(crate) requests: Vec<Answered>,
    /// Moves, sorted by rank, each rank at most once: all the requests' moves together.
    pub(crate) moves: Vec<Move>,
    /// A resize asked for with the moves, not yet checked against the job.
    #[serde(default)]
    pub(crate) asked_resize: Option<Box<Resize>>,
    /// The resize carried out with the moves, once checked (see [`crate::malleable`]).
    #[serde(default)]
    pub(crate) resize: Option<Box<ResizePlan>>,
    /// When the status check that agreed on it began.
    #[serde(skip)]
    pub(crate) agreed_at: Option<std::time::Instant>,
}

/// A pcmd request a [`Plan`] answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Answered {
    pub(crate) id: RequestId,
    /// What this request moves (a part of the plan's moves).
    pub(crate) moves: Vec<Move>,
    /// The new width this request asks for, if any (at most one request of a plan has
    /// one).
    #[serde(default)]
    pub(crate) resize: Option<Resize>,
    /// Whether this rank's daemon delivered the request (and so awaits the outcome).
    #[serde(skip)]
    pub(crate) held_here: bool,
}

impl Plan {
    /// A scripted move (`PCM_SCHEDULE`): it answers no request.
    pub(crate) fn scripted(moves: Vec<Move>) -> Plan {
        Plan {
            requests: Vec::new(),
            moves,
            asked_resize: None,
            resize: None,
            agreed_at: None,
        }
    }

    /// A scripted reconfiguration (`PCM_SCHEDULE`) of `moves` and `resize`.
    pub(crate) fn scripted_with(moves: Vec<Move>, resize: Option<Resize>) -> Plan {
        Plan {
            asked_resize: resize.map(Box::new),
            ..Plan::scripted(moves)
        }
    }

    /// The plan that carries out request `id` alone.
    pub(crate) fn answering(id: RequestId, moves: Vec<Move>, held_here: bool) -> Plan {
        Plan {
            requests: vec![Answered {
                id,
                moves: moves.clone(),
                resize: None,
                held_here,
            }],
            moves,
            asked_resize: None,
            resize: None,
            agreed_at: None,
        }
    }

    /// The same plan, answering a request that also asks for `resize` (not yet checked
    /// against the job).
    #[must_use]
    pub(crate) fn with_resize(mut self, resize: Option<Resize>) -> Plan {
        if let [request] = self.requests.as_mut_slice() {
            request.resize.clone_from(&resize);
        }
        self.asked_resize = resize.map(Box::new);
        self
    }

    /// The resize the plan asks for: checked or not.
    pub(crate) fn resize_asked(&self) -> Option<&Resize> {
        match (&self.resize, &self.asked_resize) {
            (Some(resize), _) => Some(&resize.request),
            (None, asked) => asked.as_deref(),
        }
    }

    /// Adds the requests of `other`, whose ranks this plan does not move, to this plan, to
    /// carry out in one reconfiguration. Two resizes do not go together: `other` is given
    /// back with the reason (it overlaps this plan) when both resize. When one of them
    /// resizes, the plan's resize is unchecked again (`asked_resize`): what it does
    /// depends on every move it runs with, so the caller validates the plan again.
    pub(crate) fn absorb(&mut self, other: Plan) -> Result<(), (Plan, String)> {
        debug_assert!(other
            .moves
            .iter()
            .all(|m| self.moves_rank(m.rank.0).is_none()));
        match (self.resize_asked().cloned(), other.resize_asked().cloned()) {
            (Some(mine), Some(theirs)) => {
                let reason = format!(
                    "it resizes the job (to {theirs}) and overlaps {}, which resizes it (to {mine}) in the reconfiguration agreed at the same check",
                    self.describe()
                );
                return Err((other, reason));
            }
            (Some(resize), None) | (None, Some(resize)) => {
                self.resize = None;
                self.asked_resize = Some(Box::new(resize));
            }
            (None, None) => {}
        }
        self.requests.extend(other.requests);
        self.moves.extend(other.moves);
        self.moves.sort_by_key(|m| m.rank);
        Ok(())
    }

    /// The request of this plan that moves `rank` (`None` if none does).
    pub(crate) fn moves_rank(&self, rank: u32) -> Option<&Answered> {
        self.requests
            .iter()
            .find(|r| r.moves.iter().any(|m| m.rank.0 == rank))
    }

    /// The requests of this plan that this rank's daemon delivered.
    pub(crate) fn held_here(&self) -> impl Iterator<Item = &Answered> {
        self.requests.iter().filter(|r| r.held_here)
    }

    /// What the plan answers, for people: "migration request #7", "migration requests #7
    /// and #5", or "scheduled (PCM_SCHEDULE)".
    pub(crate) fn describe(&self) -> String {
        let what = match self.requests.as_slice() {
            [] => "scheduled (PCM_SCHEDULE)".to_owned(),
            [one] if one.moves.is_empty() && one.resize.is_some() => {
                format!("resize request {}", one.id)
            }
            [one] => format!("migration request {}", one.id),
            many if many.iter().any(|r| r.resize.is_some()) => {
                format!("requests {}", list_ids(many.iter().map(|r| r.id)))
            }
            many => format!("migration requests {}", list_ids(many.iter().map(|r| r.id))),
        };
        match (&self.resize, &self.asked_resize) {
            (Some(resize), _) => format!("{what}, resize {}", resize.describe()),
            (None, Some(asked)) => format!("{what}, resize to {asked}"),
            (None, None) => what,
        }
    }
}

/// "#7", "#7 and #5", "#9, #7 and #5".
pub(crate) fn list_ids(ids: impl Iterator<Item = RequestId>) -> String {
    let ids: Vec<String> = ids.map(|id| id.to_string()).collect();
    match ids.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

impl Answered {
    /// `outcome` as this request's holder is told it: a completed reconfiguration names
    /// only the ranks this request moved, not those of the requests carried out with it
    /// (a resize's holder hears of every rank placed: the added ranks are its own).
    pub(crate) fn own_outcome(&self, outcome: &Outcome) -> Outcome {
        match outcome {
            Outcome::Completed { .. } if self.resize.is_some() => outcome.clone(),
            Outcome::Completed {
                iteration,
                timings,
                placed,
            } => Outcome::Completed {
                iteration: *iteration,
                timings: *timings,
                placed: placed
                    .iter()
                    .filter(|(rank, _)| self.moves.iter().any(|m| m.rank == *rank))
                    .cloned()
                    .collect(),
            },
            other => other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use pcm_proto::{HostName, Rank};

    use super::*;

    fn to(rank: u32, host: &str) -> Move {
        Move {
            rank: Rank(rank),
            to: Some(HostName::new(host).unwrap()),
        }
    }

    /// Two requests carried out together: the plan moves both ranks in rank order, says
    /// which request moves which, and each holder hears only of its own rank.
    #[test]
    fn given_two_requests_absorbed_then_each_holder_is_told_of_its_own_ranks() {
        let mut plan = Plan::answering(RequestId(9), vec![to(2, "c")], true);
        plan.absorb(Plan::answering(RequestId(4), vec![to(0, "a")], false))
            .unwrap();
        assert_eq!(plan.moves, vec![to(0, "a"), to(2, "c")]);
        assert_eq!(plan.moves_rank(0).map(|r| r.id), Some(RequestId(4)));
        assert_eq!(plan.moves_rank(2).map(|r| r.id), Some(RequestId(9)));
        assert_eq!(plan.moves_rank(1), None);
        let held: Vec<RequestId> = plan.held_here().map(|r| r.id).collect();
        assert_eq!(held, vec![RequestId(9)]);
        assert_eq!(plan.describe(), "migration requests #9 and #4");

        let outcome = Outcome::Completed {
            iteration: 40,
            timings: Default::default(),
            placed: vec![
                (Rank(0), HostName::new("a").unwrap()),
                (Rank(2), HostName::new("c").unwrap()),
            ],
        };
        let Outcome::Completed { placed, .. } = plan.requests[0].own_outcome(&outcome) else {
            panic!("a completion stays a completion");
        };
        assert_eq!(placed, vec![(Rank(2), HostName::new("c").unwrap())]);
        let failed = Outcome::Failed {
            reason: "spawn failed".into(),
        };
        assert_eq!(plan.requests[1].own_outcome(&failed), failed);
    }

    #[test]
    fn given_lists_of_ids_then_they_read_as_prose() {
        assert_eq!(
            Plan::scripted(vec![to(1, "b")]).describe(),
            "scheduled (PCM_SCHEDULE)"
        );
        assert_eq!(
            Plan::answering(RequestId(3), vec![to(1, "b")], false).describe(),
            "migration request #3"
        );
        assert_eq!(
            list_ids([9, 7, 5].into_iter().map(RequestId)),
            "#9, #7 and #5"
        );
    }

    fn resize(ranks: u32) -> Option<Resize> {
        Some(Resize {
            ranks,
            hosts: Vec::new(),
        })
    }

    /// Two requests that both resize the job do not run together: the second is given
    /// back, named as overlapping the first, and the plan is left as it was.
    #[test]
    fn given_two_resizing_requests_then_the_second_is_refused_as_overlapping() {
        let mut plan = Plan::answering(RequestId(9), Vec::new(), true).with_resize(resize(3));
        assert_eq!(plan.describe(), "resize request #9, resize to 3 ranks");
        let before = plan.clone();
        let (refused, reason) = plan
            .absorb(Plan::answering(RequestId(4), vec![to(0, "a")], false).with_resize(resize(4)))
            .unwrap_err();
        assert_eq!(refused.requests[0].id, RequestId(4));
        assert!(reason.contains("overlaps resize request #9"), "{reason}");
        assert_eq!(plan, before);
    }

    /// A move and a resize of two requests run together: the plan carries both requests,
    /// the moves, and the resize unchecked again (it depends on the moves it runs with).
    #[test]
    fn given_a_move_absorbed_into_a_resize_then_the_resize_is_checked_again() {
        let mut plan = Plan::answering(RequestId(9), Vec::new(), true).with_resize(resize(3));
        plan.asked_resize = None;
        plan.resize = Some(Box::new(ResizePlan {
            request: resize(3).unwrap(),
            from: 2,
            departing: Vec::new(),
            added: vec![None],
        }));
        plan.absorb(Plan::answering(RequestId(4), vec![to(1, "b")], false))
            .unwrap();
        assert_eq!(plan.resize, None);
        assert_eq!(plan.asked_resize.as_deref(), resize(3).as_ref());
        assert_eq!(plan.moves, vec![to(1, "b")]);
        // The resize's holder hears of every rank placed; the mover of its own only.
        let outcome = Outcome::Completed {
            iteration: 5,
            timings: Default::default(),
            placed: vec![
                (Rank(1), HostName::new("b").unwrap()),
                (Rank(2), HostName::new("c").unwrap()),
            ],
        };
        assert_eq!(plan.requests[0].own_outcome(&outcome), outcome);
        let Outcome::Completed { placed, .. } = plan.requests[1].own_outcome(&outcome) else {
            panic!("a completion stays a completion");
        };
        assert_eq!(placed, vec![(Rank(1), HostName::new("b").unwrap())]);
    }
}
