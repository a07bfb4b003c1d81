//! The event loop that runs one [`Agent`]: it feeds the core network events, profile
//! samples, migration outcomes and timer expiries, and carries out the actions the core
//! returns. This is the only place where the agent's logic meets time and I/O; the logic
//! itself lives in `ios-agent-core` and is the same code the simulator runs.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use ios_agent_core::agent::{Action, MigrationOutcome};
use ios_agent_core::{Agent, EntityId, EntityProfile, MigrationId, NodeProfile, PeerId};
use pcm_proto::HostName;
use tokio::sync::{mpsc, oneshot};

use crate::status::{AgentStatus, Decision, PeerStatus};
use crate::transport::{PeerEvent, Transport};

/// How many decisions `ios-agent status` shows.
const DECISION_HISTORY: usize = 32;

/// One profiling round's result, from the sampler task.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// The node's resources, if they could be read this round.
    pub node: Option<NodeProfile>,
    /// The local entities, if pcmd answered this round.
    pub entities: Option<Vec<EntityProfile>>,
}

/// Carries out migrations the core decided. Runs on a blocking thread: pcmd's client is
/// synchronous and a migration takes hundreds of milliseconds.
pub trait Migrator: Send + Sync + 'static {
    /// Moves `entities` (all of one job) to `to_host` and reports how it ended.
    fn migrate(
        &self,
        id: MigrationId,
        entities: &[EntityId],
        to_host: &HostName,
    ) -> MigrationOutcome;
}

/// A request from the local control socket (`ios-agent status`, `ios-agent leave`).
#[derive(Debug)]
pub enum ControlRequest {
    /// Report the agent's state.
    Status(oneshot::Sender<AgentStatus>),
    /// Stop the agent.
    Leave(oneshot::Sender<()>),
}

/// The inputs of the loop.
#[derive(Debug)]
pub struct Inputs {
    /// Network events.
    pub peers: mpsc::Receiver<PeerEvent>,
    /// Profiling samples, one per profile period.
    pub samples: mpsc::Receiver<Sample>,
    /// Control requests.
    pub control: mpsc::Receiver<ControlRequest>,
}

/// Runs `agent` until a `Leave` request arrives or every input closes.
pub async fn run<T: Transport, M: Migrator>(
    agent: Agent,
    transport: T,
    migrator: M,
    inputs: Inputs,
) -> Agent {
    let mut driver = Driver::new(agent, transport, std::sync::Arc::new(migrator));
    driver.run(inputs).await;
    driver.agent
}

struct Driver<T, M> {
    agent: Agent,
    transport: T,
    migrator: std::sync::Arc<M>,
    started: Instant,
    decisions: VecDeque<Decision>,
    outcomes_tx: mpsc::Sender<(MigrationId, MigrationOutcome)>,
    outcomes_rx: mpsc::Receiver<(MigrationId, MigrationOutcome)>,
}

impl<T: Transport, M: Migrator> Driver<T, M> {
    fn new(agent: Agent, transport: T, migrator: std::sync::Arc<M>) -> Self {
        let (outcomes_tx, outcomes_rx) = mpsc::channel(16);
        Driver {
            agent,
            transport,
            migrator,
            started: Instant::now(),
            decisions: VecDeque::new(),
            outcomes_tx,
            outcomes_rx,
        }
    }

    async fn run(&mut self, mut inputs: Inputs) {
        let mut peers_open = true;
        let mut samples_open = true;
        let mut control_open = true;
        loop {
            let deadline = self.agent.poll_timeout();
            // A far-away sleep when there is no timer keeps one select arm for both cases.
            let wake = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                event = inputs.peers.recv(), if peers_open => match event {
                    Some(event) => self.on_peer_event(event),
                    None => peers_open = false,
                },
                sample = inputs.samples.recv(), if samples_open => match sample {
                    Some(sample) => self.on_sample(sample),
                    None => samples_open = false,
                },
                request = inputs.control.recv(), if control_open => match request {
                    Some(ControlRequest::Status(reply)) => {
                        let _ = reply.send(self.status());
                    }
                    Some(ControlRequest::Leave(reply)) => {
                        tracing::info!("leaving the pool on request");
                        let _ = reply.send(());
                        return;
                    }
                    None => control_open = false,
                },
                Some((id, outcome)) = self.outcomes_rx.recv() => {
                    self.note(format!("migration {id} {}", describe(&outcome)));
                    self.agent.handle_migration_outcome(Instant::now(), id, outcome);
                }
                () = tokio::time::sleep_until(wake.into()) => {
                    if deadline.is_some() {
                        self.agent.handle_timeout(Instant::now());
                    }
                }
            }
            if !peers_open && !samples_open && !control_open {
                return;
            }
            self.carry_out_actions();
        }
    }

    fn on_peer_event(&mut self, event: PeerEvent) {
        let now = Instant::now();
        match event {
            PeerEvent::Rtt { peer, rtt } => self.agent.handle_peer_rtt(now, peer, rtt),
            PeerEvent::Gone { peer } => {
                tracing::info!(%peer, "peer gone");
                self.agent.handle_peer_gone(now, &peer);
            }
            PeerEvent::Message { from, message } => {
                tracing::debug!(%from, kind = message.kind(), "message");
                self.agent.handle_message(now, from, message);
            }
        }
    }

    fn on_sample(&mut self, sample: Sample) {
        let now = Instant::now();
        if let Some(node) = sample.node {
            self.agent.handle_node_profile(now, node);
        }
        if let Some(entities) = sample.entities {
            self.agent.handle_entities(now, entities);
        }
    }

    fn carry_out_actions(&mut self) {
        while let Some(action) = self.agent.poll_action() {
            match action {
                Action::Send { to, message } => {
                    if matches!(
                        message,
                        ios_agent_core::Message::WorkSteal { .. }
                            | ios_agent_core::Message::StealAccepted { .. }
                            | ios_agent_core::Message::MoveOrder { .. }
                    ) {
                        self.note(format!("sent {} to {to}", message.kind()));
                    }
                    self.transport.send(&to, message);
                }
                Action::Migrate {
                    id,
                    entities,
                    to,
                    to_host,
                } => {
                    let names: Vec<String> = entities.iter().map(ToString::to_string).collect();
                    tracing::info!(migration = %id, entities = ?names, %to_host, %to, "migrating");
                    self.note(format!(
                        "migration {id}: moving {} to {to_host}",
                        names.join(", ")
                    ));
                    let migrator = std::sync::Arc::clone(&self.migrator);
                    let outcomes = self.outcomes_tx.clone();
                    tokio::task::spawn_blocking(move || {
                        let outcome = migrator.migrate(id, &entities, &to_host);
                        // The loop owns the receiver; it is gone only when the agent stopped.
                        let _ = outcomes.blocking_send((id, outcome));
                    });
                }
            }
        }
    }

    fn note(&mut self, what: String) {
        if self.decisions.len() == DECISION_HISTORY {
            self.decisions.pop_front();
        }
        self.decisions.push_back(Decision {
            unix_time_s: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            what,
        });
    }

    fn status(&self) -> AgentStatus {
        let mut peers = Vec::new();
        for tier in ios_agent_core::LatencyTier::ALL {
            for peer in self.agent.peers().in_tier(tier) {
                if let Some(info) = self.agent.peers().get(peer) {
                    peers.push(PeerStatus {
                        peer: peer.to_string(),
                        tier: format!("{tier:?}").to_lowercase(),
                        srtt_ms: info.srtt.as_secs_f64() * 1e3,
                    });
                }
            }
        }
        AgentStatus::new(
            &self.agent,
            self.started.elapsed(),
            peers,
            self.decisions.iter().cloned().collect(),
            manager_of(&self.agent),
        )
    }
}

fn manager_of(agent: &Agent) -> Option<String> {
    agent.manager().map(PeerId::to_string)
}

fn describe(outcome: &MigrationOutcome) -> String {
    match outcome {
        MigrationOutcome::Completed => "completed".to_owned(),
        MigrationOutcome::Failed { reason } => format!("failed: {reason}"),
    }
}
