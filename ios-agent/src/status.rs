//! What `ios-agent status` shows: peers by latency tier, the node's load, the local
//! entities and the agent's recent decisions. Serialisable, so `--json` serves programs.

use std::fmt::Write as _;
use std::time::Duration;

use ios_agent_core::{Agent, EntityProfile, NodeProfile};
use serde::{Deserialize, Serialize};

/// One peer as the agent sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerStatus {
    /// The peer's id.
    pub peer: String,
    /// Its latency tier (`local`, `regional`, `national`, `global`).
    pub tier: String,
    /// Smoothed round-trip time, milliseconds.
    pub srtt_ms: f64,
}

/// One thing the agent did, for the history in `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// When, as seconds since the Unix epoch.
    pub unix_time_s: f64,
    /// What, in words.
    pub what: String,
}

/// The core's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Messages sent.
    pub messages_sent: u64,
    /// Work-steal packets started.
    pub steals_sent: u64,
    /// Work-steal packets forwarded.
    pub steals_forwarded: u64,
    /// Steal rounds that found no work in any tier.
    pub steal_rounds_failed: u64,
    /// Migrations started here.
    pub migrations_started: u64,
    /// Migrations completed.
    pub migrations_completed: u64,
    /// Migrations that failed or timed out.
    pub migrations_failed: u64,
    /// Messages refused as invalid or not allowed.
    pub messages_refused: u64,
    /// Work steals refused because their origin was not the peer that sent them.
    #[serde(default)]
    pub steals_refused: u64,
    /// Hosts a peer announced that were refused as move targets (loopback, this agent's own
    /// host, a host another peer already claims).
    #[serde(default)]
    pub hosts_refused: u64,
}

/// A running agent's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    /// Host name (as the MPI runtime knows the node).
    pub host: String,
    /// The agent's peer id.
    pub peer_id: String,
    /// `p2p` or `c2c`.
    pub topology: String,
    /// Seconds since the agent started.
    pub uptime_s: f64,
    /// NSc2c: the cluster manager as this agent sees it.
    pub manager: Option<String>,
    /// Known peers, nearest tier first.
    pub peers: Vec<PeerStatus>,
    /// The node's last profile.
    pub node: Option<NodeProfile>,
    /// The local entities' last profiles.
    pub entities: Vec<EntityProfile>,
    /// Entities (as `job/rank`, like [`EntityProfile::id`] prints) that pcmd reports as
    /// stalled: no report from the rank for a few seconds, so a stopped or hung process.
    /// Their figures are zeros, not their last ones.
    #[serde(default)]
    pub stalled: Vec<String>,
    /// Counters.
    pub counters: Counters,
    /// Recent decisions, oldest first.
    pub decisions: Vec<Decision>,
}

impl AgentStatus {
    pub(crate) fn new(
        agent: &Agent,
        uptime: Duration,
        peers: Vec<PeerStatus>,
        decisions: Vec<Decision>,
        manager: Option<String>,
        stalled: Vec<String>,
    ) -> Self {
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
            },
            decisions,
        }
    }

    /// The status as a few readable lines.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "agent {} on {} ({}), up {:.0} s",
            self.peer_id, self.host, self.topology, self.uptime_s
        );
        if let Some(m) = &self.manager {
            let _ = writeln!(out, "cluster manager: {m}");
        }
        match &self.node {
            Some(n) => {
                let _ = writeln!(
                    out,
                    "node: {:.2} cores x speed {:.2}, load {:.2}, {} MiB free",
                    n.cores,
                    n.speed,
                    n.cpu_load,
                    n.memory_available >> 20
                );
            }
            None => out.push_str("node: not profiled yet\n"),
        }
        let _ = writeln!(out, "peers ({}):", self.peers.len());
        for p in &self.peers {
            let _ = writeln!(out, "  {:<9} {:>8.2} ms  {}", p.tier, p.srtt_ms, p.peer);
        }
        let _ = writeln!(out, "entities ({}):", self.entities.len());
        for e in &self.entities {
            let id = e.id.to_string();
            if self.stalled.contains(&id) {
                let _ = writeln!(
                    out,
                    "  {id:<24} STALLED (no report from the rank for a few seconds: stopped or hung)"
                );
                continue;
            }
            let _ = writeln!(
                out,
                "  {:<24} cpu {:.2}  compute {:.2} ms  mpi {:.2} ms  {:.1} it/s  state {} KiB",
                e.id.to_string(),
                e.cpu,
                e.compute.as_secs_f64() * 1e3,
                e.mpi_wait.as_secs_f64() * 1e3,
                e.iteration_rate,
                e.state_bytes >> 10
            );
        }
        let c = &self.counters;
        let _ = writeln!(
            out,
            "counters: {} steals sent, {} forwarded, {} rounds without work, migrations {} started / {} completed / {} failed, {} messages refused, {} forged steals refused, {} announced hosts refused",
            c.steals_sent,
            c.steals_forwarded,
            c.steal_rounds_failed,
            c.migrations_started,
            c.migrations_completed,
            c.migrations_failed,
            c.messages_refused,
            c.steals_refused,
            c.hosts_refused
        );
        let _ = writeln!(out, "recent decisions ({}):", self.decisions.len());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        for d in &self.decisions {
            let _ = writeln!(
                out,
                "  {:>7.1} s ago  {}",
                (now - d.unix_time_s).max(0.0),
                d.what
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ios_agent_core::EntityId;
    use pcm_proto::{JobId, Rank};

    fn entity(rank: u32, cpu: f64) -> EntityProfile {
        EntityProfile {
            id: EntityId {
                job: JobId::new("job-1").expect("valid"),
                rank: Rank(rank),
            },
            cpu,
            memory: 0,
            network: 0.0,
            state_bytes: 0,
            compute: Duration::from_millis(5),
            mpi_wait: Duration::ZERO,
            iteration_rate: 40.0,
            age: Duration::from_secs(10),
            remaining: None,
            resident: Duration::from_secs(10),
            partners: Vec::new(),
        }
    }

    /// A status of node-a with no peer, entity or decision.
    fn status_with(counters: Counters) -> AgentStatus {
        AgentStatus {
            host: "node-a".into(),
            peer_id: "peer".into(),
            topology: "p2p".into(),
            uptime_s: 1.0,
            manager: None,
            peers: vec![],
            node: None,
            entities: vec![],
            stalled: vec![],
            counters,
            decisions: vec![],
        }
    }

    /// Item 10 (review issue 12): a stalled rank is shown as stalled, the others with their
    /// figures.
    #[test]
    fn given_a_stalled_entity_then_the_text_says_so_instead_of_its_figures() {
        let status = AgentStatus {
            entities: vec![entity(0, 0.9), entity(1, 0.0)],
            stalled: vec!["job-1/1".into()],
            ..status_with(Counters::default())
        };
        let text = status.to_text();
        let line = |id: &str| text.lines().find(|l| l.contains(id)).expect(id).to_owned();
        assert!(line("job-1/1").contains("STALLED"), "{text}");
        assert!(line("job-1/0").contains("cpu 0.90"), "{text}");
        let json = serde_json::to_string(&status).expect("serialisable");
        let back: AgentStatus = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back.stalled, vec!["job-1/1".to_owned()]);
    }

    /// Item 5 (review issue 12): what the agent refused from its peers is shown, and a status
    /// from an agent that predates those counters still reads.
    #[test]
    fn given_refused_steals_and_hosts_then_the_status_shows_them() {
        let counters = Counters {
            steals_refused: 3,
            hosts_refused: 7,
            ..Counters::default()
        };
        let status = status_with(counters);
        let text = status.to_text();
        assert!(text.contains("3 forged steals refused"), "{text}");
        assert!(text.contains("7 announced hosts refused"), "{text}");
        let mut json = serde_json::to_value(counters).expect("serialisable");
        let fields = json.as_object_mut().expect("an object");
        fields.remove("steals_refused");
        fields.remove("hosts_refused");
        let old: Counters = serde_json::from_value(json).expect("an older agent's counters");
        assert_eq!(old.steals_refused, 0);
    }
}
