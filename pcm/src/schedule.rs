//! When the status call talks to the other ranks, and scripted reconfigurations.
//!
//! The status call runs every iteration, so most calls must cost nothing. Ranks therefore
//! agree only every `interval` iterations (a *check*), and rank 0 picks the interval so that
//! a check happens about every [`DEFAULT_CHECK_PERIOD`] of wall time: the collective then
//! costs well under a per mille, and a request waits at most about one period. Every rank
//! learns the interval from the check itself, so all ranks check at the same iterations.
//!
//! A *schedule* (`PCM_SCHEDULE`) names reconfigurations by iteration, for reproducible
//! experiments and tests: every rank reads the same schedule, so no agreement is needed,
//! and a scheduled iteration is always a check.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pcm_proto::{HostName, Move, Rank};
use serde::{Deserialize, Serialize};

use crate::error::PcmError;

/// Environment variable with scripted reconfigurations:
/// `ITER:RANK[@HOST][+RANK[@HOST]...][,ITER:...]`, e.g. `PCM_SCHEDULE=10:1@node-b,50:0+3`.
pub const SCHEDULE_ENV: &str = "PCM_SCHEDULE";
/// Environment variable overriding [`DEFAULT_CHECK_PERIOD`], in milliseconds.
pub const CHECK_PERIOD_ENV: &str = "PCM_CHECK_PERIOD_MS";
/// Wall time between two status checks, by default.
pub const DEFAULT_CHECK_PERIOD: Duration = Duration::from_millis(20);
/// Upper bound on the number of iterations between checks.
const MAX_INTERVAL: u64 = 1 << 20;

/// Reconfigurations by iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Schedule {
    entries: BTreeMap<u64, Vec<Move>>,
}

impl Schedule {
    /// Parses the `PCM_SCHEDULE` syntax.
    pub(crate) fn parse(text: &str) -> Result<Self, PcmError> {
        let fail = |reason: String| PcmError::Config {
            variable: SCHEDULE_ENV,
            value: text.to_owned(),
            reason,
        };
        let mut entries = BTreeMap::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (iteration, moves) = item
                .split_once(':')
                .ok_or_else(|| fail(format!("{item:?} is not ITER:RANK[@HOST][+RANK...]")))?;
            let iteration: u64 = iteration
                .trim()
                .parse()
                .map_err(|_| fail(format!("{iteration:?} is not an iteration number")))?;
            let mut parsed = Vec::new();
            for one in moves.split('+') {
                let (rank, host) = match one.split_once('@') {
                    Some((rank, host)) => (rank, Some(host)),
                    None => (one, None),
                };
                let rank: u32 = rank
                    .trim()
                    .parse()
                    .map_err(|_| fail(format!("{rank:?} is not a rank number")))?;
                let to = host
                    .map(|h| HostName::new(h.trim()))
                    .transpose()
                    .map_err(|e| fail(e.to_string()))?;
                parsed.push(Move {
                    rank: Rank(rank),
                    to,
                });
            }
            if entries.insert(iteration, parsed).is_some() {
                return Err(fail(format!("iteration {iteration} appears twice")));
            }
        }
        Ok(Schedule { entries })
    }

    #[inline]
    pub(crate) fn has(&self, iteration: u64) -> bool {
        !self.entries.is_empty() && self.entries.contains_key(&iteration)
    }

    /// The entries still waiting, as `PCM_SCHEDULE` writes them (`500:1@node-b+2`): at the
    /// end of a run, the ones its iterations never reached.
    pub(crate) fn unreached(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|(iteration, moves)| {
                let moves: Vec<String> = moves
                    .iter()
                    .map(|m| match &m.to {
                        Some(host) => format!("{}@{host}", m.rank),
                        None => m.rank.to_string(),
                    })
                    .collect();
                format!("{iteration}:{}", moves.join("+"))
            })
            .collect()
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
}
