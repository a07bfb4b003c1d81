//! When the status call talks to the other ranks, scripted reconfigurations, and when a
//! coordinated checkpoint is due.
//!
//! The status call runs every iteration, so most calls must cost nothing. Ranks therefore
//! agree only every `interval` iterations (a *check*), and rank 0 picks the interval so that
//! a check happens about every [`DEFAULT_CHECK_PERIOD`] of wall time: the collective then
//! costs well under a per mille on nodes of the job's own (where CPU is capped or shared,
//! each check can wait for a descheduled rank: see [`DEFAULT_CHECK_PERIOD`]), and a request
//! waits at most about one period. Every rank learns the interval from the check itself, so
//! all ranks check at the same iterations.
//!
//! A *schedule* (`PCM_SCHEDULE`) names reconfigurations by iteration, for reproducible
//! experiments and tests: every rank reads the same schedule, so no agreement is needed,
//! and a scheduled iteration is always a check.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pcm_proto::{HostName, Move, Rank, Resize};
use serde::{Deserialize, Serialize};

use crate::config::variables::{
    BEFORE_MOVE_ENV, CHECKPOINT_INTERVAL_ENV, CHECK_PERIOD_ENV, SCHEDULE_ENV,
};
use crate::error::PcmError;

/// Wall time between two status checks, by default. Each check is an all-reduce, a point
/// where every rank waits for the slowest: on nodes whose CPU is capped or shared, a rank
/// descheduled for a few milliseconds holds the others there at every check. With 20 ms,
/// heat2d with PCM ran 10-30% slower than heat2d-plain at 2 and 3 ranks on 0.6-CPU
/// emulated nodes (10 ms quota periods); with 100 ms and 1 s, as fast (docs/results-log.md,
/// 2026-12-05). A request waits for the next check: 100 ms is little beside the agents'
/// decisions (seconds) and a move (about 100 ms).
pub const DEFAULT_CHECK_PERIOD: Duration = Duration::from_millis(100);
/// Upper bound on the number of iterations between checks.
const MAX_INTERVAL: u64 = 1 << 20;

/// Reconfigurations by iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Schedule {
    entries: BTreeMap<u64, Vec<Move>>,
    /// Scripted resizes, by iteration (an iteration may have moves and a resize).
    #[serde(default)]
    resizes: BTreeMap<u64, Resize>,
}

impl Schedule {
    /// Parses the `PCM_SCHEDULE` syntax. An item with no `:` continues the host list of the
    /// resize before it (`500:size=4@node-b,node-c`).
    pub(crate) fn parse(text: &str) -> Result<Self, PcmError> {
        let fail = |reason: String| PcmError::Config {
            variable: SCHEDULE_ENV,
            value: text.to_owned(),
            reason,
        };
        let host = |h: &str| HostName::new(h.trim()).map_err(|e| fail(e.to_string()));
        let mut schedule = Schedule::default();
        // The iteration of the last resize with hosts, which a bare host name continues.
        let mut open_resize: Option<u64> = None;
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((iteration, parts)) = item.split_once(':') else {
                match open_resize.and_then(|i| schedule.resizes.get_mut(&i)) {
                    Some(resize) => {
                        resize.hosts.push(host(item)?);
                        continue;
                    }
                    None => {
                        return Err(fail(format!(
                            "{item:?} is not ITER:RANK[@HOST][+RANK...] or ITER:size=M[@HOST,...]"
                        )))
                    }
                }
            };
            open_resize = None;
            let iteration: u64 = iteration
                .trim()
                .parse()
                .map_err(|_| fail(format!("{iteration:?} is not an iteration number")))?;
            if schedule.has(iteration) {
                return Err(fail(format!("iteration {iteration} appears twice")));
            }
            let mut moves = Vec::new();
            for part in parts.split('+').map(str::trim) {
                let (what, at) = match part.split_once('@') {
                    Some((what, at)) => (what.trim(), Some(at)),
                    None => (part, None),
                };
                if let Some(ranks) = what.strip_prefix("size=") {
                    let ranks: u32 = ranks.trim().parse().map_err(|_| {
                        fail(format!("{ranks:?} is not a number of ranks (size=M)"))
                    })?;
                    if schedule.resizes.contains_key(&iteration) {
                        return Err(fail(format!("iteration {iteration} has two resizes")));
                    }
                    let hosts = at.map(host).transpose()?.into_iter().collect::<Vec<_>>();
                    if !hosts.is_empty() {
                        open_resize = Some(iteration);
                    }
                    schedule.resizes.insert(iteration, Resize { ranks, hosts });
                    continue;
                }
                let rank: u32 = what
                    .parse()
                    .map_err(|_| fail(format!("{what:?} is not a rank number")))?;
                moves.push(Move {
                    rank: Rank(rank),
                    to: at.map(host).transpose()?,
                });
            }
            if !moves.is_empty() {
                schedule.entries.insert(iteration, moves);
            }
        }
        Ok(schedule)
    }

    #[inline]
    pub(crate) fn has(&self, iteration: u64) -> bool {
        (!self.entries.is_empty() && self.entries.contains_key(&iteration))
            || (!self.resizes.is_empty() && self.resizes.contains_key(&iteration))
    }

    /// The entries still waiting, as `PCM_SCHEDULE` writes them (`500:1@node-b+2`,
    /// `900:size=3@node-c`): at the end of a run, the ones its iterations never reached.
    pub(crate) fn unreached(&self) -> Vec<String> {
        let iterations: std::collections::BTreeSet<u64> = self
            .entries
            .keys()
            .chain(self.resizes.keys())
            .copied()
            .collect();
        iterations
            .into_iter()
            .map(|iteration| {
                let mut parts: Vec<String> = self
                    .entries
                    .get(&iteration)
                    .into_iter()
                    .flatten()
                    .map(|m| match &m.to {
                        Some(host) => format!("{}@{host}", m.rank),
                        None => m.rank.to_string(),
                    })
                    .collect();
                if let Some(resize) = self.resizes.get(&iteration) {
                    let hosts: Vec<&str> = resize.hosts.iter().map(HostName::as_str).collect();
                    parts.push(match hosts.is_empty() {
                        true => format!("size={}", resize.ranks),
                        false => format!("size={}@{}", resize.ranks, hosts.join(",")),
                    });
                }
                format!("{iteration}:{}", parts.join("+"))
            })
            .collect()
    }

    /// The scripted reconfiguration due at `iteration` (its moves and its resize), taken out.
    pub(crate) fn take_plan(&mut self, iteration: u64) -> Option<crate::plan::Plan> {
        let moves = self.take(iteration);
        let resize = self.take_resize(iteration);
        (moves.is_some() || resize.is_some())
            .then(|| crate::plan::Plan::scripted_with(moves.unwrap_or_default(), resize))
    }

    /// Puts a scripted reconfiguration taken at a check that had to make another one back
    /// for `iteration` (see [`Schedule::postpone`] and [`Schedule::postpone_resize`]).
    pub(crate) fn postpone_plan(&mut self, iteration: u64, plan: crate::plan::Plan) {
        if !plan.moves.is_empty() {
            self.postpone(iteration, plan.moves);
        }
        if let Some(resize) = plan.asked_resize {
            self.postpone_resize(iteration, *resize);
        }
    }

    /// The resize scripted for `iteration`, taken out.
    pub(crate) fn take_resize(&mut self, iteration: u64) -> Option<Resize> {
        self.resizes.remove(&iteration)
    }

    /// Puts a resize taken at a check that had to make another reconfiguration back for
    /// `iteration` (unless one is scripted there already, which then wins).
    pub(crate) fn postpone_resize(&mut self, iteration: u64, resize: Resize) {
        self.resizes.entry(iteration).or_insert(resize);
    }

    pub(crate) fn take(&mut self, iteration: u64) -> Option<Vec<Move>> {
        self.entries.remove(&iteration)
    }

    /// Puts `moves`, taken at a check that had to make another move, back for `iteration`,
    /// after any moves already scheduled there.
    pub(crate) fn postpone(&mut self, iteration: u64, moves: Vec<Move>) {
        self.entries.entry(iteration).or_default().extend(moves);
    }
}

/// Parses a `PCM_CHECK_PERIOD_MS` value.
pub(crate) fn parse_check_period(text: String) -> Result<Duration, PcmError> {
    match text.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(PcmError::Config {
            variable: CHECK_PERIOD_ENV,
            value: text,
            reason: "expected a whole number of milliseconds, at least 1".into(),
        }),
    }
}

/// Rank 0's estimate of how many iterations make one check period.
#[derive(Debug, Clone)]
pub(crate) struct Cadence {
    period: Duration,
    last_check: Instant,
    last_iteration: u64,
}

impl Cadence {
    pub(crate) fn new(period: Duration, now: Instant, iteration: u64) -> Self {
        Cadence {
            period,
            last_check: now,
            last_iteration: iteration,
        }
    }

    /// The interval to use after a check at `iteration`, from the time per iteration since
    /// the previous check.
    pub(crate) fn next_interval(&mut self, iteration: u64, now: Instant) -> u64 {
        let iterations = iteration.saturating_sub(self.last_iteration);
        let elapsed = now.saturating_duration_since(self.last_check);
        self.last_check = now;
        self.last_iteration = iteration;
        if iterations == 0 || elapsed.is_zero() {
            return 1;
        }
        let per_iteration = elapsed.as_secs_f64() / iterations as f64;
        let interval = (self.period.as_secs_f64() / per_iteration).floor();
        (interval as u64).clamp(1, MAX_INTERVAL)
    }
}

/// The checkpoint interval and the pre-move bound, shared by all ranks and handed to
/// replacements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Policy {
    pub(crate) interval: Option<Duration>,
    /// Take a checkpoint before a move when the newest is at least this old (`None`: never).
    #[serde(default)]
    pub(crate) before_move: Option<Duration>,
}

impl Policy {
    /// Whether checkpoints are taken.
    pub(crate) fn enabled(&self) -> bool {
        self.interval.is_some()
    }

    /// Checkpoints every `interval` (`None`: none), taken before every move too.
    pub(crate) fn with_interval(interval: Option<Duration>) -> Self {
        Policy {
            interval,
            before_move: Some(Duration::ZERO),
        }
    }

    /// Whether the interval is zero (refused by `Config::validate`).
    pub(crate) fn interval_is_zero(&self) -> bool {
        self.interval.is_some_and(|d| d.is_zero())
    }

    /// Parses `PCM_CHECKPOINT_INTERVAL` (seconds, fractions allowed) and
    /// `PCM_CHECKPOINT_BEFORE_MOVE` (when given).
    pub(crate) fn parse(text: String, before_move: Option<String>) -> Result<Self, PcmError> {
        let interval = text
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| PcmError::Config {
                variable: CHECKPOINT_INTERVAL_ENV,
                value: text.clone(),
                reason: "expected a positive number of seconds, e.g. 60 or 0.5".into(),
            })?;
        let before_move = match before_move {
            None => Some(Duration::ZERO),
            Some(v) if v.trim() == "off" => None,
            Some(v) => Some(
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .ok_or_else(|| PcmError::Config {
                        variable: BEFORE_MOVE_ENV,
                        value: v.clone(),
                        reason: "expected a number of seconds (0: before every move) or off".into(),
                    })?,
            ),
        };
        Ok(Policy {
            interval: Some(interval),
            before_move,
        })
    }
}

/// A rank's checkpoint bookkeeping: when the next coordinated checkpoint is due (rank 0
/// decides), and an agreed one waiting for `reconfigure`.
#[derive(Debug, Default)]
pub(crate) struct CheckpointTimer {
    /// Rank 0 with an interval: when the last checkpoint was taken (or the job began).
    last: Option<Instant>,
    interval: Option<Duration>,
    before_move: Option<Duration>,
    /// Iteration of an agreed checkpoint waiting for `reconfigure`.
    pub(crate) pending: Option<u64>,
    /// A move agreed at the check that took the checkpoint before it; made at the next check.
    pub(crate) deferred_move: Option<crate::plan::Plan>,
}

impl CheckpointTimer {
    /// Bit of [`CheckpointTimer::word`]: the interval has passed.
    pub(crate) const DUE: u64 = 1;
    /// Bit of [`CheckpointTimer::word`]: a move agreed at this check waits for a checkpoint.
    pub(crate) const BEFORE_MOVE: u64 = 2;

    pub(crate) fn new(rank: u32, policy: &Policy, now: Instant) -> Self {
        CheckpointTimer {
            last: (rank == 0 && policy.interval.is_some()).then_some(now),
            interval: policy.interval,
            before_move: policy.before_move,
            pending: None,
            deferred_move: None,
        }
    }

    /// Rank 0's word in the status check: [`Self::DUE`] when a checkpoint is due, plus
    /// [`Self::BEFORE_MOVE`] when a move agreed now must wait for a checkpoint first.
    pub(crate) fn word(&self, now: Instant) -> u64 {
        let Some(last) = self.last else {
            return 0;
        };
        let age = now.duration_since(last);
        let due = self.interval.is_some_and(|i| age >= i);
        let before_move = self.before_move.is_some_and(|b| age >= b);
        u64::from(due) * Self::DUE + u64::from(before_move) * Self::BEFORE_MOVE
    }

    /// No more checkpoints in this process (the application does not answer them).
    pub(crate) fn stop(&mut self) {
        self.last = None;
        self.interval = None;
        self.pending = None;
    }

    /// A checkpoint was taken (or restored) at `now`.
    pub(crate) fn taken(&mut self, now: Instant) {
        if self.last.is_some() {
            self.last = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Item 16: the entries a run never reached are named as written.
    #[test]
    fn given_entries_past_the_end_then_unreached_names_them() {
        let mut s = Schedule::parse("10:1,500:0@node-b+2,900:1").unwrap();
        s.take(10);
        assert_eq!(s.unreached(), vec!["500:0@node-b+2", "900:1"]);
    }

    #[test]
    fn schedule_syntax() {
        let s = Schedule::parse("0:0, 10:1@node-b+2@node-c ,99:3").unwrap();
        assert!(s.has(0) && s.has(10) && s.has(99) && !s.has(1));
        let mut s2 = s.clone();
        let moves = s2.take(10).unwrap();
        assert_eq!(moves.len(), 2);
        assert_eq!(moves[1].rank, Rank(2));
        assert_eq!(moves[1].to.as_ref().unwrap().as_str(), "node-c");
        assert!(!s2.has(10));
        assert_eq!(Schedule::parse("").unwrap(), Schedule::default());
    }

    #[test]
    fn given_resize_entries_then_they_parse_beside_moves() {
        let mut s = Schedule::parse(
            "500:size=3,1200:size=4@node-b,node-c,1300:1@node-a+size=2,2000:size=2",
        )
        .unwrap();
        assert!(s.has(500) && s.has(1200) && s.has(1300) && s.has(2000));
        assert_eq!(
            s.take_resize(1200),
            Some(Resize {
                ranks: 4,
                hosts: vec![
                    HostName::new("node-b").unwrap(),
                    HostName::new("node-c").unwrap()
                ]
            })
        );
        assert_eq!(s.take(1300).map(|m| m.len()), Some(1));
        assert_eq!(s.take_resize(1300).map(|r| r.ranks), Some(2));
        assert_eq!(s.unreached(), vec!["500:size=3", "2000:size=2"]);
        assert!(Schedule::parse("5:size=x")
            .unwrap_err()
            .to_string()
            .contains("size=M"));
        assert!(Schedule::parse("5:size=2+size=3").is_err());
        assert!(Schedule::parse("node-b").is_err());
        assert!(Schedule::parse("5:size=2,5:1")
            .unwrap_err()
            .to_string()
            .contains("twice"));
    }

    #[test]
    fn given_a_postponed_move_then_it_comes_after_those_already_due() {
        let mut s = Schedule::parse("11:2").unwrap();
        let taken = s.take(11).unwrap();
        let mut later = Schedule::parse("10:1").unwrap().take(10).unwrap();
        s.postpone(11, later.clone());
        assert!(s.has(11));
        s.postpone(11, taken.clone());
        later.extend(taken);
        assert_eq!(s.take(11), Some(later));
    }

    #[test]
    fn schedule_errors_name_the_bad_part() {
        let e = Schedule::parse("10:x").unwrap_err().to_string();
        assert!(
            e.contains("PCM_SCHEDULE") && e.contains("\"x\" is not a rank number"),
            "{e}"
        );
        assert!(Schedule::parse("ten:1")
            .unwrap_err()
            .to_string()
            .contains("iteration"));
        assert!(Schedule::parse("5:1,5:2")
            .unwrap_err()
            .to_string()
            .contains("twice"));
        assert!(Schedule::parse("5:1@bad host").is_err());
        assert!(Schedule::parse("5").is_err());
    }

    #[test]
    fn cadence_aims_at_the_period() {
        let t0 = Instant::now();
        let mut c = Cadence::new(Duration::from_millis(20), t0, 0);
        // 100 iterations of 100 us each: 200 iterations make 20 ms.
        assert_eq!(c.next_interval(100, t0 + Duration::from_millis(10)), 200);
        // Slow iterations: check every iteration.
        assert_eq!(c.next_interval(101, t0 + Duration::from_millis(1010)), 1);
        // No iterations since the last check.
        assert_eq!(c.next_interval(101, t0 + Duration::from_millis(1020)), 1);
    }

    fn policy(interval_s: u64, before_move: Option<Duration>) -> Policy {
        Policy {
            interval: Some(Duration::from_secs(interval_s)),
            before_move,
        }
    }

    #[test]
    fn given_rank_0_then_its_word_says_when_a_checkpoint_is_due_and_when_a_move_waits_for_one() {
        let t = Instant::now();
        let mut state = CheckpointTimer::new(0, &policy(10, Some(Duration::ZERO)), t);
        assert_eq!(state.word(t), CheckpointTimer::BEFORE_MOVE);
        assert_eq!(
            state.word(t + Duration::from_secs(10)),
            CheckpointTimer::DUE | CheckpointTimer::BEFORE_MOVE
        );
        state.taken(t + Duration::from_secs(10));
        assert_eq!(
            state.word(t + Duration::from_secs(11)),
            CheckpointTimer::BEFORE_MOVE
        );

        let bounded = CheckpointTimer::new(0, &policy(10, Some(Duration::from_secs(3))), t);
        assert_eq!(bounded.word(t + Duration::from_secs(2)), 0);
        assert_eq!(
            bounded.word(t + Duration::from_secs(3)),
            CheckpointTimer::BEFORE_MOVE
        );

        let off = CheckpointTimer::new(0, &policy(10, None), t);
        assert_eq!(off.word(t + Duration::from_secs(5)), 0);
        // Other ranks leave the decision to rank 0; without checkpoints nobody waits.
        assert_eq!(
            CheckpointTimer::new(1, &policy(10, Some(Duration::ZERO)), t).word(t),
            0
        );
        assert_eq!(CheckpointTimer::new(0, &Policy::default(), t).word(t), 0);
    }
}
