//! Rate limit for log lines that anyone who can open a connection can provoke: used by pcmd,
//! the agents and the peer servers.
//!
//! A warning per bad connection lets a stream of garbage write megabytes of log. A
//! [`LogLimit`] lets a few lines of each kind through per window and counts the rest; the
//! next line of that kind to get through says how many were suppressed, so nothing is lost
//! silently. Pure: the caller passes `now` and does the logging.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Default of [`LogLimit::new`]'s `window` (10 s).
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);
/// Default of [`LogLimit::new`]'s `burst`: lines of one kind per window (5).
pub const DEFAULT_BURST: u32 = 5;

#[derive(Debug)]
struct Window {
    started: Instant,
    logged: u32,
    suppressed: u64,
}

/// Per-kind counters. Kinds are static strings chosen by the caller, so the table stays as
/// small as the number of call sites.
#[derive(Debug)]
pub struct LogLimit {
    window: Duration,
    burst: u32,
    kinds: HashMap<&'static str, Window>,
}

impl Default for LogLimit {
    fn default() -> Self {
        LogLimit::new(DEFAULT_WINDOW, DEFAULT_BURST)
    }
}

impl LogLimit {
    /// At most `burst` lines of each kind per `window`.
    pub fn new(window: Duration, burst: u32) -> Self {
        LogLimit {
            window,
            burst: burst.max(1),
            kinds: HashMap::new(),
        }
    }

    /// Whether a line of `kind` may be logged at `now`: `Some(n)` to log it, `n` being how
    /// many of its kind were suppressed since the last one logged; `None` to drop it.
    #[must_use]
    pub fn check(&mut self, kind: &'static str, now: Instant) -> Option<u64> {
        let w = self.kinds.entry(kind).or_insert(Window {
            started: now,
            logged: 0,
            suppressed: 0,
        });
        if now.saturating_duration_since(w.started) >= self.window {
            w.started = now;
            w.logged = 0;
        }
        if w.logged >= self.burst {
            w.suppressed += 1;
            return None;
        }
        w.logged += 1;
        Some(std::mem::take(&mut w.suppressed))
    }
}

/// The text to append to a line that got through: empty, or "(N more like this suppressed)".
pub fn suffix(suppressed: u64) -> String {
    if suppressed == 0 {
        String::new()
    } else {
        format!(" ({suppressed} more like this suppressed)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_a_flood_then_a_burst_per_window_gets_through_and_the_rest_is_counted() {
        let t0 = Instant::now();
        let mut limit = LogLimit::new(Duration::from_secs(10), 3);
        let passed: Vec<Option<u64>> = (0..1000)
            .map(|i| limit.check("bad-frame", t0 + Duration::from_millis(i)))
            .collect();
        assert_eq!(passed.iter().filter(|p| p.is_some()).count(), 3);
        // Another kind has its own budget.
        assert_eq!(limit.check("accept", t0), Some(0));
        // The next window: the first line carries the count of what was dropped.
        assert_eq!(
            limit.check("bad-frame", t0 + Duration::from_secs(11)),
            Some(997)
        );
        assert_eq!(
            limit.check("bad-frame", t0 + Duration::from_secs(11)),
            Some(0)
        );
        assert_eq!(suffix(997), " (997 more like this suppressed)");
        assert_eq!(suffix(0), "");
    }
}
