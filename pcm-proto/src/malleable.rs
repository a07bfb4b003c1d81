//! The resize limits of a malleable job (docs/malleability.md), as PCM declares them and
//! reports them to its pcmd, and as the agents read them to decide a resize.
//!
//! Shared by the job (which refuses a width outside them), pcmd (which passes them on in
//! [`crate::JobStats`]) and the agents' model, so that all three judge a width alike.

use serde::{Deserialize, Serialize};

/// Which widths a malleable job may run with, beside its minimum and maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SizeRule {
    /// Any width.
    Any,
    /// A multiple of the number given (at least 1).
    MultipleOf(u32),
    /// A power of two.
    PowerOfTwo,
    /// A perfect square (1, 4, 9, ...).
    Square,
}

impl SizeRule {
    /// Whether `ranks` satisfies the rule.
    pub fn allows(self, ranks: u32) -> bool {
        match self {
            SizeRule::Any => true,
            SizeRule::MultipleOf(k) => k != 0 && ranks % k == 0,
            SizeRule::PowerOfTwo => ranks.is_power_of_two(),
            SizeRule::Square => {
                let root = f64::from(ranks).sqrt().round() as u32;
                root.checked_mul(root) == Some(ranks)
            }
        }
    }
}

impl std::fmt::Display for SizeRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizeRule::Any => write!(f, "any width"),
            SizeRule::MultipleOf(k) => write!(f, "a multiple of {k}"),
            SizeRule::PowerOfTwo => write!(f, "a power of two"),
            SizeRule::Square => write!(f, "a perfect square"),
        }
    }
}

/// Limits that no job can have: a minimum of 0, or above the maximum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malleable limits {min}..={max}: the minimum must be at least 1 and at most the maximum")]
pub struct InvalidLimits {
    /// The minimum given.
    pub min: u32,
    /// The maximum given.
    pub max: u32,
}

/// A job's resize limits: widths in `min..=max` that the rule allows. Built only through
/// [`Malleability::new`] (decoding checks the same), so `1 <= min <= max` always holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "MalleabilityWire")]
pub struct Malleability {
    min: u32,
    max: u32,
    rule: SizeRule,
}

/// The unchecked form [`Malleability`] decodes from.
#[derive(Deserialize)]
struct MalleabilityWire {
    min: u32,
    max: u32,
    rule: SizeRule,
}

impl TryFrom<MalleabilityWire> for Malleability {
    type Error = InvalidLimits;
    fn try_from(wire: MalleabilityWire) -> Result<Self, InvalidLimits> {
        Ok(Malleability::new(wire.min, wire.max)?.with_rule(wire.rule))
    }
}

impl Malleability {
    /// Widths from `min` to `max` ranks, any of them (see [`Malleability::with_rule`]).
    ///
    /// # Errors
    /// [`InvalidLimits`] if `min` is 0 or above `max`.
    pub fn new(min: u32, max: u32) -> Result<Self, InvalidLimits> {
        if min == 0 || min > max {
            return Err(InvalidLimits { min, max });
        }
        Ok(Malleability {
            min,
            max,
            rule: SizeRule::Any,
        })
    }

    /// The same limits, allowing only the widths `rule` allows.
    #[must_use]
    pub fn with_rule(self, rule: SizeRule) -> Self {
        Malleability { rule, ..self }
    }

    /// The least width.
    pub fn min(&self) -> u32 {
        self.min
    }

    /// The greatest width.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// The rule widths must follow.
    pub fn rule(&self) -> SizeRule {
        self.rule
    }

    /// Whether the job may run with `ranks` ranks.
    pub fn allows(&self, ranks: u32) -> bool {
        self.refusal(ranks).is_none()
    }

    /// Why the job may not run with `ranks` ranks, or `None` if it may.
    pub fn refusal(&self, ranks: u32) -> Option<String> {
        if ranks == 0 {
            Some("a job cannot run with 0 ranks".to_owned())
        } else if ranks < self.min {
            Some(format!(
                "{ranks} ranks is below the job's minimum of {}",
                self.min
            ))
        } else if ranks > self.max {
            Some(format!(
                "{ranks} ranks is above the job's maximum of {}",
                self.max
            ))
        } else if !self.rule.allows(ranks) {
            Some(format!(
                "{ranks} ranks breaks the job's rule: the width must be {}",
                self.rule
            ))
        } else {
            None
        }
    }

    /// The widths the job may take above `from`, at most `from + extra`, smallest first.
    pub fn widths_above(&self, from: u32, extra: u32) -> impl Iterator<Item = u32> + '_ {
        (from.saturating_add(1)..=from.saturating_add(extra).min(self.max))
            .filter(move |&w| self.allows(w))
    }

    /// The widths the job may take below `from`, at least `from - fewer`, largest first.
    pub fn widths_below(&self, from: u32, fewer: u32) -> impl Iterator<Item = u32> + '_ {
        (from.saturating_sub(fewer).max(self.min).max(1)..from)
            .rev()
            .filter(move |&w| self.allows(w))
    }
}

/// `MIN..=MAX (RULE)`, as `pcmd stats` and `pcmd status` show it: `1..=256 (any width)`.
impl std::fmt::Display for Malleability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..={} ({})", self.min, self.max, self.rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked_when_built_and_when_decoded() {
        assert!(Malleability::new(0, 4).is_err());
        assert!(Malleability::new(5, 4).is_err());
        let limits = Malleability::new(2, 8).unwrap();
        let frame = crate::encode(&limits);
        assert_eq!(crate::decode::<Malleability>(&frame[4..]).unwrap(), limits);
        let bad = crate::encode(&unchecked(0, 4));
        assert!(crate::decode::<Malleability>(&bad[4..]).is_err());
    }

    fn unchecked(min: u32, max: u32) -> impl Serialize {
        #[derive(Serialize)]
        struct Raw {
            min: u32,
            max: u32,
            rule: SizeRule,
        }
        Raw {
            min,
            max,
            rule: SizeRule::Any,
        }
    }

    #[test]
    fn widths_above_and_below_follow_the_rule_and_the_limits() {
        let limits = Malleability::new(1, 8)
            .unwrap()
            .with_rule(SizeRule::PowerOfTwo);
        assert_eq!(limits.widths_above(2, 10).collect::<Vec<_>>(), vec![4, 8]);
        assert_eq!(
            limits.widths_above(2, 1).collect::<Vec<_>>(),
            Vec::<u32>::new()
        );
        assert_eq!(limits.widths_below(8, 7).collect::<Vec<_>>(), vec![4, 2, 1]);
        let any = Malleability::new(2, 5).unwrap();
        assert_eq!(any.widths_above(3, 4).collect::<Vec<_>>(), vec![4, 5]);
        assert_eq!(any.widths_below(3, 3).collect::<Vec<_>>(), vec![2]);
        assert!(any.allows(5) && !any.allows(6) && !any.allows(1));
    }
}
