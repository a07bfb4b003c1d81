//! Bounds against a flood of connections (issue 12, item 7), shared by agents and peer
//! servers: caps on connections ([`connection_limits`]) and a limiter for repeated log lines.
//!
//! Without them a key holder (or anyone, for handshakes that never finish) could hold open
//! more connections than the process has file descriptors, so that a legitimate agent's
//! connection failed, and a stream of garbage connections wrote one warning line each
//! (megabytes of log per few thousand connections).

use std::time::{Duration, Instant};

use libp2p::connection_limits::{self, ConnectionLimits};

/// Default cap on established connections of a node (agents: peers plus peer servers; peer
/// servers: agents). Below the common 1024 file-descriptor limit, with room for the rest.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 512;
/// Default cap on incoming connections still in their handshake. A connection that never
/// completes the handshake holds a slot until the handshake timeout; those above the cap
/// are closed at once.
pub const DEFAULT_MAX_PENDING: u32 = 64;
/// Default cap on established connections with one peer id (two agents that dial each
/// other at once hold two for a moment).
pub const DEFAULT_MAX_PER_PEER: u32 = 4;

/// The connection-limits behaviour with these caps.
pub fn connection_limits(
    max_connections: u32,
    max_pending: u32,
    max_per_peer: u32,
) -> connection_limits::Behaviour {
    connection_limits::Behaviour::new(
        ConnectionLimits::default()
            .with_max_established(Some(max_connections))
            .with_max_pending_incoming(Some(max_pending))
            .with_max_established_per_peer(Some(max_per_peer)),
    )
}

/// Default window of a [`LogLimiter`].
pub const DEFAULT_LOG_WINDOW: Duration = Duration::from_secs(10);
/// Default lines a [`LogLimiter`] lets through per window.
pub const DEFAULT_LOG_BURST: u32 = 5;

/// Lets through at most `burst` lines of one kind per window, and says how many were
/// suppressed when the next window opens, so a flood of identical failures costs a few lines
/// per window instead of one per failure.
#[derive(Debug, Clone)]
pub struct LogLimiter {
    window: Duration,
    burst: u32,
    window_start: Option<Instant>,
    in_window: u32,
    suppressed: u64,
}

/// What to do with one line, from [`LogLimiter::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogVerdict {
    /// Write it; `suppressed` lines of its kind were dropped since the last one written.
    Write {
        /// Lines dropped before this one.
        suppressed: u64,
    },
    /// Drop it.
    Suppress,
}

impl Default for LogLimiter {
    fn default() -> Self {
        LogLimiter::new(DEFAULT_LOG_WINDOW, DEFAULT_LOG_BURST)
    }
}

impl LogLimiter {
    /// A limiter letting `burst` lines through per `window`.
    pub fn new(window: Duration, burst: u32) -> Self {
        LogLimiter {
            window,
            burst,
            window_start: None,
            in_window: 0,
            suppressed: 0,
        }
    }

    /// Whether a line due at `now` is written.
    pub fn check(&mut self, now: Instant) -> LogVerdict {
        let new_window = self
            .window_start
            .is_none_or(|start| now.saturating_duration_since(start) >= self.window);
        if new_window {
            self.window_start = Some(now);
            self.in_window = 0;
        }
        if self.in_window < self.burst {
            self.in_window += 1;
            let suppressed = std::mem::take(&mut self.suppressed);
            LogVerdict::Write { suppressed }
        } else {
            self.suppressed += 1;
            LogVerdict::Suppress
        }
    }

    /// Lines dropped and not yet reported.
    pub fn pending_suppressed(&self) -> u64 {
        self.suppressed
    }
}

/// `message`, followed by the count of similar lines suppressed before it, if any.
pub fn with_suppressed(message: &str, suppressed: u64) -> String {
    if suppressed == 0 {
        message.to_owned()
    } else {
        format!("{message} ({suppressed} similar lines suppressed)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_lines_is_cut_to_a_burst_per_window_and_the_rest_counted() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(Duration::from_secs(10), 3);
        let written = (0..1000)
            .filter(|i| {
                matches!(
                    l.check(t0 + Duration::from_millis(*i)),
                    LogVerdict::Write { .. }
                )
            })
            .count();
        assert_eq!(written, 3);
        assert_eq!(l.pending_suppressed(), 997);
        // The next window's first line reports the count.
        assert_eq!(
            l.check(t0 + Duration::from_secs(10)),
            LogVerdict::Write { suppressed: 997 }
        );
        assert_eq!(
            l.check(t0 + Duration::from_secs(10)),
            LogVerdict::Write { suppressed: 0 }
        );
        assert_eq!(with_suppressed("x", 2), "x (2 similar lines suppressed)");
    }
}
