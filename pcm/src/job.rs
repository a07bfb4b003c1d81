//! What every rank of a job shares and a replacement inherits: [`JobContext`], with the
//! memory of the reconfigurations the job completed and of the pcmd requests it carried out.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use pcm_proto::{AppName, HostName, JobId, Malleability, Move, Outcome, RequestId};
use serde::{Deserialize, Serialize};

use crate::config::DEFAULT_RECONFIGURE_TIMEOUT;
use crate::hosts::NewHosts;
use crate::malleable::Blocks;
use crate::plan::Plan;
use crate::schedule::{Policy, Schedule};

/// The part of a rank's state that every rank shares and a replacement inherits.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobContext {
    pub(crate) job: JobId,
    pub(crate) app: AppName,
    /// Index of the next status call.
    pub(crate) iteration: u64,
    /// Next status call that checks with the other ranks.
    pub(crate) next_check: u64,
    pub(crate) schedule: Schedule,
    /// Reconfigurations completed since the job first started (across restarts: a
    /// checkpoint carries it). Also the job's epoch, which a pcmd request carries from
    /// when its daemon made it.
    pub(crate) migrations: u64,
    /// The latest reconfigurations completed, oldest first. A pcmd request is refused as
    /// superseded when one of them, completed after the request was made, moved a rank the
    /// request names ([`agreement::request_verdict`]); its caller is told which one.
    #[serde(default)]
    pub(crate) recent: VecDeque<Reconfiguration>,
    /// The latest pcmd requests the job carried out, with how each ended. A request can
    /// reach a rank after the job ran it (that rank's link read it late, or a replacement
    /// registered while it was in flight); the job then answers with its completion,
    /// instead of refusing it as superseded by itself or dropping it as if nothing moved.
    #[serde(default)]
    pub(crate) carried_out: VecDeque<CarriedOut>,
    pub(crate) check_period: Duration,
    /// Hosts a replacement may be spawned on (see the `hosts` module).
    pub(crate) hosts: BTreeSet<HostName>,
    /// Whether hosts outside `hosts` may be used, after a check (`PCM_ALLOW_NEW_HOSTS`).
    #[serde(default)]
    pub(crate) new_hosts: NewHosts,
    /// Checkpoint interval (`PCM_CHECKPOINT_INTERVAL`).
    #[serde(default)]
    pub(crate) checkpoint: Policy,
    /// The job name (`PCM_JOB_NAME`) that keeps checkpoint series apart, if set.
    #[serde(default)]
    pub(crate) job_name: Option<AppName>,
    /// The job's own checkpoint directory (`PCM_CHECKPOINT_DIR`, rank 0's, which every rank
    /// gave too), named to pcmd on every checkpoint connection; `None`: the pcmd's own.
    /// Replacements inherit it with the rest of the context.
    #[serde(default)]
    pub(crate) checkpoint_dir: Option<String>,
    /// Program and arguments, as rank 0 started: what the checkpoints are checkpoints of.
    #[serde(default)]
    pub(crate) identity: pcm_proto::checkpoint::Identity,
    /// Whether the job resumed from a checkpoint (then its end is recorded like a
    /// checkpointing job's).
    #[serde(default)]
    pub(crate) resumed: bool,
    /// Deadline of a reconfiguration's collective part (`PCM_RECONFIGURE_TIMEOUT`), read at
    /// launch and inherited by replacements for the reconfigurations they take part in.
    #[serde(default = "default_reconfigure_timeout")]
    pub(crate) reconfigure_timeout: Duration,
    /// The job's resize limits ([`Pcm::set_malleable`]); `None`: not malleable.
    #[serde(default)]
    pub(crate) malleability: Option<Malleability>,
    /// The job's distributed arrays ([`Pcm::declare_block`]).
    #[serde(default)]
    pub(crate) blocks: Blocks,
    /// Resizes completed since the job first started.
    #[serde(default)]
    pub(crate) resizes: u64,
}

/// A completed reconfiguration, as the job remembers it: one entry per request it
/// answered (a reconfiguration can carry out several), or one for a scripted move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Reconfiguration {
    /// The job's epoch when it began: the reconfigurations completed before it.
    pub(crate) epoch: u64,
    /// The pcmd request it answered; `None` for a scripted move.
    pub(crate) request: Option<RequestId>,
    /// What it moved for that request.
    pub(crate) moves: Vec<Move>,
    /// The width it resized the job to, if it did: a resize renumbers the ranks, so every
    /// request made before it is superseded ([`agreement::request_verdict`]).
    #[serde(default)]
    pub(crate) resize: Option<pcm_proto::Resize>,
}

/// A pcmd request the job carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CarriedOut {
    pub(crate) request: RequestId,
    /// How it ended (always [`Outcome::Completed`]).
    pub(crate) outcome: Outcome,
}

/// How many carried-out requests a job remembers. A request is delivered to the ranks of a
/// node at once, so a late copy arrives within a few reconfigurations of the first.
const CARRIED_OUT_REMEMBERED: usize = 32;

/// How many entries of completed reconfigurations a job remembers for
/// [`JobContext::recent`] (at least one reconfiguration, whole, however many requests it
/// answered). A request older than all of them is refused as superseded: nothing shows that
/// the ones forgotten left its ranks alone.
const RECONFIGURATIONS_REMEMBERED: usize = 32;

impl JobContext {
    /// Remembers that the job carried out each request `plan` answers, ending with
    /// `outcome` (each as its holder was told it). Every rank calls it at the same
    /// reconfiguration, so that all of them agree on [`JobContext::carried_out`].
    pub(crate) fn remember_completion(&mut self, plan: &Plan, outcome: &Outcome) {
        for request in &plan.requests {
            self.carried_out.push_back(CarriedOut {
                request: request.id,
                outcome: request.own_outcome(outcome),
            });
        }
        while self.carried_out.len() > CARRIED_OUT_REMEMBERED {
            self.carried_out.pop_front();
        }
    }

    /// How `request` ended, if the job carried it out lately.
    pub(crate) fn carried_out(&self, request: RequestId) -> Option<&Outcome> {
        self.carried_out
            .iter()
            .rev()
            .find(|c| c.request == request)
            .map(|c| &c.outcome)
    }

    /// Counts a completed reconfiguration of `plan`, and remembers it: one entry per
    /// request it answered (one for a scripted move), all with the epoch it began at.
    pub(crate) fn record_reconfiguration(&mut self, plan: &Plan) {
        let epoch = self.migrations;
        let resize = plan.resize.as_ref().map(|r| r.request.clone());
        if plan.requests.is_empty() {
            self.recent.push_back(Reconfiguration {
                epoch,
                request: None,
                moves: plan.moves.clone(),
                resize: resize.clone(),
            });
        }
        for request in &plan.requests {
            self.recent.push_back(Reconfiguration {
                epoch,
                request: Some(request.id),
                moves: request.moves.clone(),
                resize: resize.clone(),
            });
        }
        // Whole reconfigurations are forgotten: with part of one forgotten, a request
        // made at its epoch would look remembered when it is not.
        while self.recent.len() > RECONFIGURATIONS_REMEMBERED {
            let Some(forgotten) = self.recent.pop_front() else {
                break;
            };
            while self
                .recent
                .front()
                .is_some_and(|r| r.epoch == forgotten.epoch)
            {
                self.recent.pop_front();
            }
        }
        self.migrations += 1;
        if plan.resize.is_some() {
            self.resizes += 1;
        }
    }
}

fn default_reconfigure_timeout() -> Duration {
    DEFAULT_RECONFIGURE_TIMEOUT
}

#[cfg(test)]
mod tests {
    use pcm_proto::Rank;

    use super::*;

    fn job_context() -> JobContext {
        JobContext {
            job: JobId::new("j-1").unwrap(),
            app: AppName::new("a").unwrap(),
            iteration: 0,
            next_check: 0,
            schedule: Schedule::default(),
            migrations: 2,
            recent: VecDeque::new(),
            carried_out: VecDeque::new(),
            check_period: Duration::from_millis(5),
            hosts: BTreeSet::new(),
            new_hosts: NewHosts::default(),
            checkpoint: Policy::default(),
            job_name: None,
            checkpoint_dir: None,
            identity: Default::default(),
            resumed: false,
            reconfigure_timeout: DEFAULT_RECONFIGURE_TIMEOUT,
            malleability: None,
            blocks: Blocks::new(),
            resizes: 0,
        }
    }

    #[test]
    fn a_reconfiguration_is_counted_and_named() {
        let mut job = job_context();
        let moves = vec![Move {
            rank: Rank(1),
            to: None,
        }];
        job.record_reconfiguration(&Plan::answering(RequestId(77), moves.clone(), false));
        assert_eq!(job.migrations, 3);
        assert_eq!(
            job.recent.back(),
            Some(&Reconfiguration {
                epoch: 2,
                request: Some(RequestId(77)),
                moves,
                resize: None,
            })
        );
        for _ in 0..RECONFIGURATIONS_REMEMBERED {
            job.record_reconfiguration(&Plan::scripted(Vec::new()));
        }
        assert_eq!(job.recent.len(), RECONFIGURATIONS_REMEMBERED);
        assert_eq!(job.recent.front().map(|r| r.epoch), Some(3));
    }

    /// Two requests carried out in one reconfiguration: counted once, remembered as two
    /// entries of one epoch, and forgotten together, never one without the other.
    #[test]
    fn given_a_reconfiguration_of_two_requests_then_it_is_remembered_and_forgotten_whole() {
        let mut job = job_context();
        let mut plan = Plan::answering(
            RequestId(9),
            vec![Move {
                rank: Rank(2),
                to: None,
            }],
            false,
        );
        plan.absorb(Plan::answering(
            RequestId(4),
            vec![Move {
                rank: Rank(0),
                to: None,
            }],
            false,
        ))
        .expect("requests moving different ranks run together");
        job.record_reconfiguration(&plan);
        assert_eq!(job.migrations, 3);
        let remembered: Vec<(u64, Option<RequestId>)> =
            job.recent.iter().map(|r| (r.epoch, r.request)).collect();
        assert_eq!(
            remembered,
            vec![(2, Some(RequestId(9))), (2, Some(RequestId(4)))]
        );
        for _ in 0..RECONFIGURATIONS_REMEMBERED - 2 {
            job.record_reconfiguration(&Plan::scripted(Vec::new()));
        }
        assert_eq!(job.recent.len(), RECONFIGURATIONS_REMEMBERED);
        job.record_reconfiguration(&Plan::scripted(Vec::new()));
        // One more entry forgets the first reconfiguration, both of its entries.
        assert_eq!(job.recent.len(), RECONFIGURATIONS_REMEMBERED - 1);
        assert_eq!(job.recent.front().map(|r| r.epoch), Some(3));
    }

    fn completed_at(iteration: u64) -> Outcome {
        Outcome::Completed {
            iteration,
            timings: Default::default(),
            placed: vec![(Rank(1), HostName::new("node-c").unwrap())],
        }
    }

    /// A request delivered again after it ran is answered from this memory: it holds the
    /// latest requests only, and scripted moves (no request) leave no entry.
    #[test]
    fn given_carried_out_requests_then_the_latest_are_remembered_with_their_outcome() {
        let mut job = job_context();
        let rank_1 = || {
            vec![Move {
                rank: Rank(1),
                to: None,
            }]
        };
        job.remember_completion(&Plan::scripted(rank_1()), &completed_at(1));
        assert!(job.carried_out.is_empty());
        for i in 1..=(CARRIED_OUT_REMEMBERED as u64 + 5) {
            let plan = Plan::answering(RequestId(i), rank_1(), false);
            job.remember_completion(&plan, &completed_at(i * 10));
        }
        assert_eq!(job.carried_out.len(), CARRIED_OUT_REMEMBERED);
        assert_eq!(job.carried_out(RequestId(1)), None);
        assert_eq!(job.carried_out(RequestId(5)), None);
        assert_eq!(job.carried_out(RequestId(6)), Some(&completed_at(60)));
        let last = CARRIED_OUT_REMEMBERED as u64 + 5;
        assert_eq!(
            job.carried_out(RequestId(last)),
            Some(&completed_at(last * 10))
        );
        // A checkpoint written before this field existed still loads.
        let mut value = ciborium::value::Value::serialized(&job).unwrap();
        if let ciborium::value::Value::Map(entries) = &mut value {
            entries.retain(|(k, _)| k.as_text() != Some("carried_out"));
        }
        let old: JobContext = value.deserialized().unwrap();
        assert!(old.carried_out.is_empty());
    }
}
