//! What `ios-agent status` shows (the types are `ios-agent-proto`'s, so that programs read
//! them without depending on the agent): built here from the core's state.

use std::time::{Duration, Instant};

use ios_agent_core::{Agent, LatencyTier};

pub use ios_agent_proto::status::{
    AgentStatus, Counters, Decision, DecisionKind, PeerStatus, PoolHost, ProtocolStep, ResizeReason,
};

/// A tier as `status` names it (`local`, `regional`, `national`, `global`).
pub(crate) fn tier_name(tier: LatencyTier) -> String {
    format!("{tier:?}").to_lowercase()
}

/// The other hosts of the pool `agent` knows at `now` ([`Agent::pool_hosts`]).
pub(crate) fn pool_of(agent: &Agent, now: Instant) -> Vec<PoolHost> {
    agent
        .pool_hosts(now)
        .into_iter()
        .map(|h| PoolHost {
            host: h.host.to_string(),
            peer: h.peer.to_string(),
            tier: h.tier.map(tier_name),
            srtt_ms: h.srtt.map(|d| d.as_secs_f64() * 1e3),
            idle_cpus: h.load.map(|l| l.idle_cpus()),
            profile_age_s: h.load.map(|l| l.age.as_secs_f64()),
            leaving: h.load.is_some_and(|l| l.leaving),
        })
        .collect()
}

/// The status of `agent` at `now`.
pub(crate) fn status_of(
    agent: &Agent,
    now: Instant,
    uptime: Duration,
    peers: Vec<PeerStatus>,
    decisions: Vec<Decision>,
    manager: Option<String>,
    stalled: Vec<String>,
) -> AgentStatus {
    let s = agent.stats();
    AgentStatus {
        host: agent.host().to_string(),
        peer_id: agent.id().to_string(),
        topology: match agent.config().topology() {
            ios_agent_core::Topology::PeerToPeer => "p2p",
            ios_agent_core::Topology::ClusterToCluster => "c2c",
        }
        .to_owned(),
        uptime_s: uptime.as_secs_f64(),
        manager,
        peers,
        pool: pool_of(agent, now),
        node: agent.node_profile().copied(),
        entities: agent.entities().to_vec(),
        stalled,
        counters: Counters {
            messages_sent: s.messages_sent,
            steals_sent: s.steals_sent,
            steals_forwarded: s.steals_forwarded,
            steal_rounds_failed: s.steal_rounds_failed,
            migrations_started: s.migrations_started,
            migrations_completed: s.migrations_completed,
            migrations_failed: s.migrations_failed,
            messages_refused: s.messages_refused,
            steals_refused: s.steals_refused,
            hosts_refused: s.hosts_refused,
            partner_steals_sent: s.partner_steals_sent,
            resizes_started: s.resizes_started,
            resizes_completed: s.resizes_completed,
            resizes_failed: s.resizes_failed,
            grow_offers_refused: s.grow_offers_refused,
        },
        decisions,
    }
}
