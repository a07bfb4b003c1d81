//! Which agent connections to close when the network is nearly full, so that an agent in a
//! pool larger than its connection cap keeps meeting new agents (a pure decision; the driver
//! gathers its inputs and carries it out).
//!
//! Why: the network dials the agents discovery returns up to its dial target
//! (`ios-agent-net`'s `DEFAULT_DIAL_AGENTS`, 64), accepts every agent that dials it, and
//! keeps each connection, up to its cap (`DEFAULT_MAX_CONNECTIONS`, 512). This policy acts
//! only near that cap, so with the dial target it seldom acts at all (a rotation at the
//! dial target is issue 42's next step). In a pool of thousands an
//! agent would so measure, for good, the first agents it happened to discover, and never
//! the near ones that came later (docs/results-log.md, "Scale", 2026-11-29: in a Grid-like pool
//! of 10,000 it would see about one of its 19 cluster mates). Instead, once the agent's
//! connections come within [`ConnectionPolicy::reserve`] of the cap, every
//! [`ConnectionPolicy::period`] it closes up to [`ConnectionPolicy::batch`] connections to
//! agents it has no use for, the farthest first; the slots go to agents that dial it or that
//! it discovers anew, and those it measures near enough enter its peer table. That is the
//! simulator's model of discovery in a large pool (`Sim::with_discovery`: the peer table
//! plus 4 new agents every 15 s).
//!
//! An agent is kept while it is of use: in the peer table, the NSc2c manager or a member,
//! on a host the agent's ranks exchange with, just connected (not measured yet), or heard
//! from or sent to lately (a steal or a migration under way).

use std::time::{Duration, Instant};

use ios_agent_core::PeerId;

/// When and how many connections the driver closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionPolicy {
    /// How often the driver looks.
    pub period: Duration,
    /// Rotation starts when the agent connections are within this many of the cap.
    pub reserve: usize,
    /// Most connections closed per period.
    pub batch: usize,
    /// A connection younger than this is kept: its agent is being measured.
    pub min_age: Duration,
    /// An agent heard from or sent to within this is kept: an exchange may be under way.
    pub quiet: Duration,
}

impl Default for ConnectionPolicy {
    /// Every 15 s (libp2p ping's interval), 4 connections when within 16 of the cap; kept:
    /// connections younger than 30 s, agents that exchanged a message within 2 minutes.
    fn default() -> Self {
        ConnectionPolicy {
            period: Duration::from_secs(15),
            reserve: 16,
            batch: 4,
            min_age: Duration::from_secs(30),
            quiet: Duration::from_secs(120),
        }
    }
}

/// One connected agent, as the driver sees it.
#[derive(Debug, Clone)]
pub struct Connected {
    /// The agent.
    pub peer: PeerId,
    /// When it connected.
    pub since: Instant,
    /// When a message last went either way, if ever.
    pub last_message: Option<Instant>,
    /// Its last RTT, if measured.
    pub rtt: Option<Duration>,
    /// Whether the agent has a use for it (peer table, cluster, partner host).
    pub of_use: bool,
}

impl ConnectionPolicy {
    /// The agents to disconnect now, farthest first: none while `connected` agents are more
    /// than [`Self::reserve`] below `cap`; else up to [`Self::batch`] of those neither of use,
    /// young, nor talked to lately, and measured (an unmeasured one is young or silent).
    pub fn to_close(&self, connected: &[Connected], cap: usize, now: Instant) -> Vec<PeerId> {
        if connected.len() + self.reserve < cap {
            return Vec::new();
        }
        let mut idle: Vec<(&PeerId, Duration)> = connected
            .iter()
            .filter(|c| !c.of_use)
            .filter(|c| now.saturating_duration_since(c.since) >= self.min_age)
            .filter(|c| {
                c.last_message
                    .is_none_or(|t| now.saturating_duration_since(t) >= self.quiet)
            })
            .filter_map(|c| Some((&c.peer, c.rtt?)))
            .collect();
        idle.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        idle.into_iter()
            .take(self.batch)
            .map(|(p, _)| p.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str) -> PeerId {
        PeerId::new(name.as_bytes().to_vec()).expect("valid")
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Agents p0..p(n-1), connected a minute ago, silent, measured at 1..n ms, none of use.
    fn pool(n: usize, t0: Instant) -> Vec<Connected> {
        (0..n)
            .map(|i| Connected {
                peer: peer(&format!("p{i:03}")),
                since: t0,
                last_message: None,
                rtt: Some(ms(i as u64 + 1)),
                of_use: false,
            })
            .collect()
    }

    #[test]
    fn below_the_reserve_nothing_is_closed() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_secs(60);
        let policy = ConnectionPolicy::default();
        assert!(policy.to_close(&pool(495, t0), 512, now).is_empty());
        assert_eq!(policy.to_close(&pool(496, t0), 512, now).len(), 4);
    }

    #[test]
    fn the_farthest_idle_agents_go_first_and_those_of_use_stay() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_secs(60);
        let policy = ConnectionPolicy {
            reserve: 1,
            batch: 2,
            ..ConnectionPolicy::default()
        };
        let mut conns = pool(6, t0);
        // p005 (6 ms) is of use, p004 (5 ms) talked 10 s ago, p003 (4 ms) is 10 s old,
        // p002 (3 ms) unmeasured: p001 and p000 go, the farther first.
        conns[5].of_use = true;
        conns[4].last_message = Some(now - Duration::from_secs(10));
        conns[3].since = now - Duration::from_secs(10);
        conns[2].rtt = None;
        assert_eq!(
            policy.to_close(&conns, 7, now),
            vec![peer("p001"), peer("p000")]
        );
        // Talked to long ago: it may go.
        conns[4].last_message = Some(now - Duration::from_secs(120));
        assert_eq!(
            policy.to_close(&conns, 7, now),
            vec![peer("p004"), peer("p001")]
        );
    }

    #[test]
    fn nothing_of_use_and_nothing_idle_means_nothing_closed() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_secs(60);
        let mut conns = pool(20, t0);
        for c in &mut conns {
            c.of_use = true;
        }
        assert!(ConnectionPolicy::default()
            .to_close(&conns, 20, now)
            .is_empty());
    }
}
