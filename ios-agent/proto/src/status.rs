//! What `ios-agent status` shows: peers by latency tier, the node's load, the local
//! entities and the agent's recent decisions. Serialisable, so `--json` serves programs.

use ios_agent_core::{EntityId, EntityProfile, MigrationId, NodeProfile};
use pcm_proto::{HostName, JobId};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

use crate::leave::LeaveReport;

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

/// Another host of the pool as the agent knows it: a connected agent that announced its
/// host, with what that agent last reported of its node's load. Programs (`pcmrun
/// --hosts-from-pool`) pick idle hosts from these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolHost {
    /// The host's name as the MPI runtime knows it (as its agent announced it).
    pub host: String,
    /// The id of its agent.
    pub peer: String,
    /// Its latency tier (`local`, `regional`, `national`, `global`), if that agent is in
    /// this agent's peer table.
    #[serde(default)]
    pub tier: Option<String>,
    /// Smoothed round-trip time to it, milliseconds, if in the peer table.
    #[serde(default)]
    pub srtt_ms: Option<f64>,
    /// Idle CPUs of the node, speed-normalised (the model's measure: idle cores times the
    /// core speed relative to a reference core), as its agent last reported them; `None`
    /// when it reported nothing to this agent.
    #[serde(default)]
    pub idle_cpus: Option<f64>,
    /// How long ago, seconds, this agent received that report; `None` with `idle_cpus`.
    #[serde(default)]
    pub profile_age_s: Option<f64>,
    /// The node said it is leaving the pool (`ios-agent leave`; only NSc2c members tell
    /// their manager so; false when not known).
    #[serde(default)]
    pub leaving: bool,
}

/// One thing the agent did, for the history in `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// When, as seconds since the Unix epoch.
    pub unix_time_s: f64,
    /// What.
    pub what: DecisionKind,
}

/// What an agent decided or saw happen, as programs read it (`Display` gives the words
/// `ios-agent status` shows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum DecisionKind {
    /// A step of the work-stealing protocol that leads to a migration went to a peer.
    Sent {
        /// Which step.
        step: ProtocolStep,
        /// The peer it went to.
        to: String,
    },
    /// This agent asked its pcmd to move `entities` to `to_host`.
    MigrationStarted {
        /// The migration's id.
        migration: MigrationId,
        /// What moves.
        entities: Vec<EntityId>,
        /// Where to (the MPI host name).
        to_host: String,
        /// The agent of that host.
        to: String,
    },
    /// pcmd reported the migration done: the entities run at the destination.
    MigrationCompleted {
        /// The migration's id.
        migration: MigrationId,
    },
    /// pcmd reported that the migration failed; nothing moved.
    MigrationFailed {
        /// The migration's id.
        migration: MigrationId,
        /// Why, for people.
        reason: String,
    },
    /// This agent asked its pcmd to resize a malleable job (docs/malleability.md) from
    /// `from` to `to` ranks.
    ResizeStarted {
        /// The resize's id (a migration id: the core tracks both alike).
        resize: MigrationId,
        /// The job.
        job: JobId,
        /// Its width before, as this agent knew it.
        from: u32,
        /// Its width after.
        to: u32,
        /// Growing: the hosts of the added ranks; shrinking: the hosts given back.
        hosts: Vec<HostName>,
        /// Why the agent resized it.
        reason: ResizeReason,
    },
    /// pcmd reported the resize done: the job runs with `to` ranks.
    ResizeCompleted {
        /// The resize's id.
        resize: MigrationId,
        /// The job.
        job: JobId,
        /// Its width before.
        from: u32,
        /// Its width now.
        to: u32,
        /// Growing: the hosts of the added ranks; shrinking: the hosts given back.
        hosts: Vec<HostName>,
    },
    /// pcmd reported that the resize failed (refused by the job, superseded, timed out);
    /// the job runs on at its old width.
    ResizeFailed {
        /// The resize's id.
        resize: MigrationId,
        /// The job.
        job: JobId,
        /// Its width, unchanged.
        from: u32,
        /// The width asked for.
        to: u32,
        /// Why, for people.
        reason: String,
    },
    /// `ios-agent leave` asked the agent to drain the node.
    DrainStarted,
    /// The node is drained: the agent leaves the pool.
    Left {
        /// Where the drain ended.
        report: LeaveReport,
    },
    /// The drain did not finish in time: the agent stays in the pool.
    DrainGivenUp {
        /// Where the drain stood.
        report: LeaveReport,
    },
}

/// Why an agent resized a job: the core's reason, serialised as `{"kind": "grow", "gain":
/// 0.35}`, `{"kind": "shed", ...}`, `{"kind": "leave"}`.
pub use ios_agent_core::agent::ResizeReason;

/// Hosts for people: `node-c, node-d`.
fn host_list(hosts: &[HostName]) -> String {
    hosts
        .iter()
        .map(HostName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The steps of the work-stealing protocol an agent records when it sends them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtocolStep {
    /// A work-steal packet (asking for work).
    WorkSteal,
    /// An acceptance of a peer's work-steal packet.
    StealAccepted,
    /// A cluster manager's order to move work (NSc2c).
    MoveOrder,
}

impl std::fmt::Display for ProtocolStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProtocolStep::WorkSteal => "work-steal",
            ProtocolStep::StealAccepted => "steal-accepted",
            ProtocolStep::MoveOrder => "move-order",
        })
    }
}

impl DecisionKind {
    /// Whether it is about a migration (started, completed or failed).
    pub fn is_migration(&self) -> bool {
        matches!(
            self,
            DecisionKind::MigrationStarted { .. }
                | DecisionKind::MigrationCompleted { .. }
                | DecisionKind::MigrationFailed { .. }
        )
    }

    /// Whether it is about a resize (started, completed or failed).
    pub fn is_resize(&self) -> bool {
        matches!(
            self,
            DecisionKind::ResizeStarted { .. }
                | DecisionKind::ResizeCompleted { .. }
                | DecisionKind::ResizeFailed { .. }
        )
    }
}

impl std::fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecisionKind::Sent { step, to } => write!(f, "sent {step} to {to}"),
            DecisionKind::MigrationStarted {
                migration,
                entities,
                to_host,
                ..
            } => {
                let names: Vec<String> = entities.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "migration {migration}: moving {} to {to_host}",
                    names.join(", ")
                )
            }
            DecisionKind::MigrationCompleted { migration } => {
                write!(f, "migration {migration} completed")
            }
            DecisionKind::MigrationFailed { migration, reason } => {
                write!(f, "migration {migration} failed: {reason}")
            }
            DecisionKind::ResizeStarted {
                resize,
                job,
                from,
                to,
                hosts,
                reason,
            } => {
                let (verb, place) = if to >= from {
                    ("growing", "onto")
                } else {
                    ("shrinking", "giving back")
                };
                write!(f, "resize {resize}: {verb} {job} from {from} to {to} ranks")?;
                if !hosts.is_empty() {
                    write!(f, ", {place} {}", host_list(hosts))?;
                }
                write!(f, " ({reason})")
            }
            DecisionKind::ResizeCompleted {
                resize, job, to, ..
            } => write!(f, "resize {resize} completed: {job} runs with {to} ranks"),
            DecisionKind::ResizeFailed {
                resize,
                job,
                from,
                to,
                reason,
            } => write!(
                f,
                "resize {resize} of {job} ({from} -> {to} ranks) failed: {reason}"
            ),
            DecisionKind::DrainStarted => f.write_str("leaving: draining the node"),
            DecisionKind::Left { report } => write!(f, "left the pool: {}", report.summary()),
            DecisionKind::DrainGivenUp { report } => {
                write!(f, "drain given up, staying: {}", report.summary())
            }
        }
    }
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
    /// NSp2p partner steals started (included in `steals_sent`): steals sent straight to
    /// the agent of a far host where a partner of a rank here runs.
    #[serde(default)]
    pub partner_steals_sent: u64,
    /// Resizes of malleable jobs started here (absent from older agents' status: 0).
    #[serde(default)]
    pub resizes_started: u64,
    /// Resizes completed.
    #[serde(default)]
    pub resizes_completed: u64,
    /// Resizes that failed or timed out (nothing changed).
    #[serde(default)]
    pub resizes_failed: u64,
    /// Offers to grow a malleable job refused (from a node that is not idle, or a steal its
    /// origin did not send itself).
    #[serde(default)]
    pub grow_offers_refused: u64,
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
    /// The other hosts of the pool this agent knows, nearest tier first (those outside the
    /// peer table last), then by name. Absent in older agents' status: none.
    #[serde(default)]
    pub pool: Vec<PoolHost>,
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
        let _ = writeln!(out, "pool hosts ({}):", self.pool.len());
        for h in &self.pool {
            let load = match (h.idle_cpus, h.profile_age_s) {
                (Some(idle), Some(age)) => format!("{idle:.2} idle CPUs {age:.0} s ago"),
                (Some(idle), None) => format!("{idle:.2} idle CPUs"),
                _ => "load not known".to_owned(),
            };
            let _ = writeln!(
                out,
                "  {:<24} {:<9} {}{}",
                h.host,
                h.tier.as_deref().unwrap_or("-"),
                load,
                if h.leaving { ", LEAVING" } else { "" }
            );
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
            "counters: {} steals sent ({} to partners' agents), {} forwarded, {} rounds without work, migrations {} started / {} completed / {} failed, {} messages refused, {} forged steals refused, {} announced hosts refused",
            c.steals_sent,
            c.partner_steals_sent,
            c.steals_forwarded,
            c.steal_rounds_failed,
            c.migrations_started,
            c.migrations_completed,
            c.migrations_failed,
            c.messages_refused,
            c.steals_refused,
            c.hosts_refused
        );
        let _ = writeln!(
            out,
            "resizes: {} started / {} completed / {} failed, {} grow offers refused",
            c.resizes_started, c.resizes_completed, c.resizes_failed, c.grow_offers_refused
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
    use pcm_proto::{JobId, Rank};
    use std::time::Duration;

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
            job_ranks: 2,
            malleable: None,
            home: None,
            job_slowest_compute: None,
            width_age: None,
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
            pool: vec![],
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
            steals_sent: 5,
            partner_steals_sent: 2,
            steals_refused: 3,
            hosts_refused: 7,
            ..Counters::default()
        };
        let status = status_with(counters);
        let text = status.to_text();
        assert!(
            text.contains("5 steals sent (2 to partners' agents)"),
            "{text}"
        );
        assert!(text.contains("3 forged steals refused"), "{text}");
        assert!(text.contains("7 announced hosts refused"), "{text}");
        let mut json = serde_json::to_value(counters).expect("serialisable");
        let fields = json.as_object_mut().expect("an object");
        fields.remove("steals_refused");
        fields.remove("hosts_refused");
        fields.remove("partner_steals_sent");
        let old: Counters = serde_json::from_value(json).expect("an older agent's counters");
        assert_eq!(old.steals_refused, 0);
        assert_eq!(old.partner_steals_sent, 0);
    }

    /// Issue 36: the pool's hosts, as `pcmrun --hosts-from-pool` reads them: the JSON of an
    /// entry, its words, and a status from an agent that predates the list.
    #[test]
    fn given_pool_hosts_then_the_json_reads_back_and_an_older_status_has_none() {
        let known = PoolHost {
            host: "node-c".into(),
            peer: "12D3KooWc".into(),
            tier: Some("local".into()),
            srtt_ms: Some(0.25),
            idle_cpus: Some(1.5),
            profile_age_s: Some(2.0),
            leaving: false,
        };
        let unknown = PoolHost {
            host: "node-d".into(),
            peer: "12D3KooWd".into(),
            tier: None,
            srtt_ms: None,
            idle_cpus: None,
            profile_age_s: None,
            leaving: false,
        };
        let leaving = PoolHost {
            host: "node-e".into(),
            idle_cpus: Some(0.0),
            profile_age_s: Some(1.0),
            leaving: true,
            ..known.clone()
        };
        let status = AgentStatus {
            pool: vec![known.clone(), unknown.clone(), leaving],
            ..status_with(Counters::default())
        };
        let json = serde_json::to_value(&status).expect("serialisable");
        assert_eq!(
            json["pool"][0],
            serde_json::json!({
                "host": "node-c", "peer": "12D3KooWc", "tier": "local", "srtt_ms": 0.25,
                "idle_cpus": 1.5, "profile_age_s": 2.0, "leaving": false
            })
        );
        assert_eq!(json["pool"][1]["idle_cpus"], serde_json::Value::Null);
        let back: AgentStatus = serde_json::from_value(json.clone()).expect("round trip");
        assert_eq!(back, status);

        let text = status.to_text();
        assert!(text.contains("pool hosts (3):"), "{text}");
        let line = |h: &str| text.lines().find(|l| l.contains(h)).expect(h).to_owned();
        assert!(line("node-c").contains("1.50 idle CPUs 2 s ago"), "{text}");
        assert!(line("node-d").contains("load not known"), "{text}");
        assert!(line("node-e").contains("LEAVING"), "{text}");

        let mut old = json;
        old.as_object_mut().expect("an object").remove("pool");
        let old: AgentStatus = serde_json::from_value(old).expect("an older agent's status");
        assert!(old.pool.is_empty());
        // An entry with only the fields a program needs still reads.
        let bare: PoolHost =
            serde_json::from_str(r#"{"host":"node-f","peer":"p"}"#).expect("the bare fields");
        assert_eq!((bare.idle_cpus, bare.leaving), (None, false));
    }

    fn host(name: &str) -> HostName {
        HostName::new(name).expect("valid")
    }

    /// Issue 38: the resize counters are shown and sent, and a status from an agent that
    /// predates them reads with zeros.
    #[test]
    fn given_resize_counters_then_the_status_shows_them_and_older_ones_read() {
        let counters = Counters {
            resizes_started: 3,
            resizes_completed: 2,
            resizes_failed: 1,
            grow_offers_refused: 4,
            ..Counters::default()
        };
        let text = status_with(counters).to_text();
        assert!(
            text.contains("resizes: 3 started / 2 completed / 1 failed, 4 grow offers refused"),
            "{text}"
        );
        let mut json = serde_json::to_value(counters).expect("serialisable");
        assert_eq!(json["resizes_completed"], 2);
        assert_eq!(json["grow_offers_refused"], 4);
        let back: Counters = serde_json::from_value(json.clone()).expect("round trip");
        assert_eq!(back, counters);
        let fields = json.as_object_mut().expect("an object");
        for f in [
            "resizes_started",
            "resizes_completed",
            "resizes_failed",
            "grow_offers_refused",
        ] {
            fields.remove(f);
        }
        let old: Counters = serde_json::from_value(json).expect("an older agent's counters");
        assert_eq!(old, Counters::default());
    }

    /// Issue 14, item 3: programs read decisions as typed data, people as the words they
    /// read before.
    #[test]
    fn given_each_decision_then_its_json_reads_back_and_its_words_say_what_happened() {
        let entity = EntityId {
            job: JobId::new("job-1").expect("valid"),
            rank: Rank(2),
        };
        let report = LeaveReport {
            elapsed_s: 1.5,
            ranks_left: vec![],
            moving: None,
            moved: 1,
            failed: 0,
            processes: vec![],
            peers: 2,
        };
        let cases = [
            (
                DecisionKind::Sent {
                    step: ProtocolStep::StealAccepted,
                    to: "peer-b".into(),
                },
                "sent steal-accepted to peer-b",
            ),
            (
                DecisionKind::MigrationStarted {
                    migration: MigrationId(7),
                    entities: vec![entity],
                    to_host: "node-c".into(),
                    to: "peer-c".into(),
                },
                "moving job-1/2 to node-c",
            ),
            (
                DecisionKind::MigrationCompleted {
                    migration: MigrationId(7),
                },
                "completed",
            ),
            (
                DecisionKind::MigrationFailed {
                    migration: MigrationId(7),
                    reason: "spawn failed".into(),
                },
                "failed: spawn failed",
            ),
            (
                DecisionKind::ResizeStarted {
                    resize: MigrationId(8),
                    job: JobId::new("job-1").expect("valid"),
                    from: 2,
                    to: 4,
                    hosts: vec![host("node-c"), host("node-d")],
                    reason: ResizeReason::Grow { gain: 0.35 },
                },
                "growing job-1 from 2 to 4 ranks, onto node-c, node-d (an idle node asked for work; gain 0.35)",
            ),
            (
                DecisionKind::ResizeStarted {
                    resize: MigrationId(9),
                    job: JobId::new("job-1").expect("valid"),
                    from: 4,
                    to: 3,
                    hosts: vec![host("node-c")],
                    reason: ResizeReason::Shed { gain: 0.2 },
                },
                "shrinking job-1 from 4 to 3 ranks, giving back node-c (competing load",
            ),
            (
                DecisionKind::ResizeStarted {
                    resize: MigrationId(10),
                    job: JobId::new("job-1").expect("valid"),
                    from: 3,
                    to: 2,
                    hosts: vec![],
                    reason: ResizeReason::Leave,
                },
                "from 3 to 2 ranks (this node is leaving the pool)",
            ),
            (
                DecisionKind::ResizeCompleted {
                    resize: MigrationId(8),
                    job: JobId::new("job-1").expect("valid"),
                    from: 2,
                    to: 4,
                    hosts: vec![host("node-c"), host("node-d")],
                },
                "completed: job-1 runs with 4 ranks",
            ),
            (
                DecisionKind::ResizeFailed {
                    resize: MigrationId(9),
                    job: JobId::new("job-1").expect("valid"),
                    from: 4,
                    to: 3,
                    reason: "the job is not malleable".into(),
                },
                "(4 -> 3 ranks) failed: the job is not malleable",
            ),
            (DecisionKind::DrainStarted, "draining"),
            (
                DecisionKind::Left {
                    report: report.clone(),
                },
                "left the pool: 1.5 s: 1 moved",
            ),
            (DecisionKind::DrainGivenUp { report }, "drain given up"),
        ];
        for (what, words) in cases {
            let decision = Decision {
                unix_time_s: 12.5,
                what,
            };
            let json = serde_json::to_string(&decision).expect("serialisable");
            let back: Decision = serde_json::from_str(&json).expect("reads back");
            assert_eq!(back, decision, "{json}");
            assert!(
                decision.what.to_string().contains(words),
                "{}",
                decision.what
            );
            assert_eq!(
                decision.what.is_migration(),
                json.contains("\"decision\":\"migration_"),
                "{json}"
            );
            assert_eq!(
                decision.what.is_resize(),
                json.contains("\"decision\":\"resize_"),
                "{json}"
            );
        }
        // The typed reason, as a program reads it.
        let started = DecisionKind::ResizeStarted {
            resize: MigrationId(8),
            job: JobId::new("job-1").expect("valid"),
            from: 2,
            to: 3,
            hosts: vec![host("node-c")],
            reason: ResizeReason::Grow { gain: 0.5 },
        };
        let json = serde_json::to_value(&started).expect("serialisable");
        assert_eq!(json["decision"], "resize_started");
        assert_eq!(json["job"], "job-1");
        assert_eq!(json["hosts"], serde_json::json!(["node-c"]));
        assert_eq!(
            json["reason"],
            serde_json::json!({"kind": "grow", "gain": 0.5})
        );
        let garbled = r#"{"unix_time_s":1.0,"what":{"decision":"teleported"}}"#;
        assert!(serde_json::from_str::<Decision>(garbled).is_err());
    }
}
