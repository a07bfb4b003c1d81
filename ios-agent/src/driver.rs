//! The event loop that runs one [`Agent`]: it feeds the core network events, profile
//! samples, migration and resize outcomes and timer expiries, and carries out the actions
//! the core returns. This is the only place where the agent's logic meets time and I/O;
//! the logic itself lives in `ios-agent-core` and is the same code the simulator runs.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use ios_agent_core::agent::{Action, MigrationOutcome};
use ios_agent_core::{Agent, EntityId, EntityProfile, MigrationId, NodeProfile, PeerId};
pub use ios_agent_proto::leave::LeaveReport;
use pcm_proto::given_back::{self, GivenBack};
use pcm_proto::{HostName, JobId};
use tokio::sync::{mpsc, oneshot};

use crate::connections::{Connected, ConnectionPolicy};
use crate::job_processes::JobProcesses;
use crate::status::{
    status_of, tier_name, AgentStatus, Decision, DecisionKind, PeerStatus, ProtocolStep,
};
use crate::transport::{NetEvent, Transport};

/// How many decisions `ios-agent status` shows.
const DECISION_HISTORY: usize = 32;

/// One profiling round's result, from the sampler task.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// The node's resources, if they could be read this round.
    pub node: Option<NodeProfile>,
    /// The local entities, if pcmd answered this round (`None`: it did not).
    pub entities: Option<Vec<EntityProfile>>,
    /// The ranks registered with pcmd this round and their process ids. The driver drops
    /// from the agent's view every entity whose process is gone (pcmd may list a finished
    /// rank until it notices the connection closed, and lists nothing when it is down).
    pub rank_pids: Vec<(EntityId, u32)>,
    /// The local entities pcmd reports as stalled this round (shown by `status`).
    pub stalled: Vec<ios_agent_core::EntityId>,
}

/// Carries out the migrations and resizes the core decided. Runs on a blocking thread:
/// pcmd's client is synchronous and a reconfiguration takes hundreds of milliseconds.
pub trait Migrator: Send + Sync + 'static {
    /// Moves `entities` (all of one job) to `to_host` and reports how it ended.
    fn migrate(
        &self,
        id: MigrationId,
        entities: &[EntityId],
        to_host: &HostName,
    ) -> MigrationOutcome;

    /// Resizes the malleable `job` to `ranks` ranks (growing: the added ranks go to
    /// `hosts`; shrinking: the ranks on `hosts` leave) and reports how it ended.
    fn resize(
        &self,
        id: MigrationId,
        job: &JobId,
        ranks: u32,
        hosts: &[HostName],
    ) -> MigrationOutcome;
}

/// A resize the driver asked its migrator for, until its outcome comes back: what
/// `ios-agent status` says of its end.
#[derive(Debug, Clone)]
struct ResizeInFlight {
    job: JobId,
    from: u32,
    to: u32,
    hosts: Vec<HostName>,
}

/// A request from the local control socket (`ios-agent status`, `ios-agent leave`) or a
/// signal.
#[derive(Debug)]
pub enum ControlRequest {
    /// Report the agent's state.
    Status(oneshot::Sender<AgentStatus>),
    /// Drain the node, then stop.
    Leave(LeaveOrder),
    /// Stop at once, whatever still runs here (a second stop signal).
    Stop,
}

/// How to leave: drain the node within `within`; if that fails, stop anyway when `force`,
/// else give up the drain and stay. Progress goes to `updates` (about once a second), then
/// one final [`LeaveUpdate::Left`] or [`LeaveUpdate::Stayed`].
#[derive(Debug)]
pub struct LeaveOrder {
    /// How long the drain may take.
    pub within: Duration,
    /// Stop even if the node could not be drained.
    pub force: bool,
    /// Where progress goes (a closed receiver is fine: the drain goes on).
    pub updates: mpsc::UnboundedSender<LeaveUpdate>,
    /// Who asked (written in the node's given-back mark).
    pub origin: LeaveOrigin,
}

/// Who asked the agent to leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaveOrigin {
    /// `ios-agent leave` (with `--force` if the order says so).
    Command,
    /// A stop signal, by name (`"SIGTERM"`, `"SIGINT"`).
    Signal(&'static str),
}

impl LeaveOrder {
    /// How the node was given back, as its given-back mark says it (`by`): `"ios-agent
    /// leave"`, `"ios-agent leave --force"`, `"SIGTERM drain"`.
    pub fn given_back_by(&self) -> String {
        match (self.origin, self.force) {
            (LeaveOrigin::Command, false) => "ios-agent leave".to_owned(),
            (LeaveOrigin::Command, true) => "ios-agent leave --force".to_owned(),
            (LeaveOrigin::Signal(name), _) => format!("{name} drain"),
        }
    }
}

/// How the loop runs, beyond its inputs.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// When and how many connections to close when the network is nearly full
    /// ([`crate::connections`]).
    pub policy: ConnectionPolicy,
    /// The node's pcmd socket, next to which the loop writes the node's given-back mark
    /// ([`pcm_proto::given_back`]) when the agent leaves the pool (drained, or forced), so
    /// that a launcher's relaunch does not place ranks there again. `None`: no mark.
    pub given_back_mark: Option<PathBuf>,
}

/// News of a drain.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum LeaveUpdate {
    /// Still draining.
    Progress(LeaveReport),
    /// The agent left the pool (drained, or forced).
    Left(LeaveReport),
    /// The drain did not finish in time; the agent stays in the pool.
    Stayed(LeaveReport),
}

/// How often a drain's progress is reported and checked.
const LEAVE_TICK: Duration = Duration::from_millis(250);
/// How often progress goes to the client.
const LEAVE_REPORT_PERIOD: Duration = Duration::from_secs(1);

struct Draining {
    order: LeaveOrder,
    until: Instant,
    next_report: Instant,
    /// Whether a sample came since the drain started: until then an empty entity list only
    /// means none was read yet. A sample without pcmd's answer counts: pcmd cannot tell
    /// more, and the agent then keeps only the ranks whose process still runs.
    sampled: bool,
}

/// The inputs of the loop.
#[derive(Debug)]
pub struct Inputs {
    /// Network events, straight from the network task.
    pub peers: mpsc::Receiver<NetEvent>,
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
    run_with(agent, transport, migrator, inputs, Options::default()).await
}

/// [`run`] with other [`Options`]: another policy for closing connections when the network
/// is nearly full ([`crate::connections`]), a given-back mark to write on leaving.
pub async fn run_with<T: Transport, M: Migrator>(
    agent: Agent,
    transport: T,
    migrator: M,
    inputs: Inputs,
    options: Options,
) -> Agent {
    let mut driver = Driver::new(agent, transport, std::sync::Arc::new(migrator));
    driver.policy = options.policy;
    driver.given_back_mark = options.given_back_mark;
    driver.run(inputs).await;
    driver.agent
}

/// One connected agent (bounded by the connection limit).
#[derive(Debug)]
struct ConnectedAgent {
    /// The host it announced on connecting: announced to the agent again on a ping if the
    /// agent's table of hosts, which is smaller, had no room for it then or dropped it since.
    host: Option<HostName>,
    /// Its last ping RTT, kept for an agent with a host.
    rtt: Option<Duration>,
    /// When it came up.
    since: Instant,
    /// When a message last went either way.
    last_message: Option<Instant>,
    /// The driver asked the network to close the connection ([`crate::connections`]): no
    /// longer counted, nor closed again, until the network reports it gone.
    closing: bool,
}

struct Driver<T, M> {
    agent: Agent,
    transport: T,
    migrator: std::sync::Arc<M>,
    started: Instant,
    decisions: VecDeque<Decision>,
    outcomes_tx: mpsc::Sender<(MigrationId, MigrationOutcome)>,
    outcomes_rx: mpsc::Receiver<(MigrationId, MigrationOutcome)>,
    processes: JobProcesses,
    /// The process of each rank pcmd listed last: pid and start time (when it could be
    /// read), so that a rank whose process is gone leaves the agent's view at the next
    /// sample, whether pcmd still lists it or does not answer.
    rank_processes: HashMap<EntityId, (u32, Option<u64>)>,
    /// Whether pcmd answered the last sample.
    pcmd_answers: bool,
    draining: Option<Draining>,
    /// Entities pcmd reported stalled in the last sample that had entities.
    stalled: Vec<ios_agent_core::EntityId>,
    connected: HashMap<PeerId, ConnectedAgent>,
    /// The hosts the agent asked to have measured at its last sample
    /// ([`Agent::hosts_to_measure`]: its ranks' partners'). The pings of connected agents
    /// on those hosts are passed on as partner RTTs, also for agents outside its peer
    /// table, which keeps only the nearest.
    partner_hosts: HashSet<HostName>,
    /// When and how many connections to close when the network is nearly full.
    policy: ConnectionPolicy,
    /// When the driver looks next (`None`: at the next sample).
    next_look: Option<Instant>,
    /// The pcmd socket whose given-back mark is written on leaving ([`Options`]).
    given_back_mark: Option<PathBuf>,
    /// Resizes under way, by id: their outcomes come back on the migrations' channel
    /// (the core tracks both alike), and the decision noted for them names the job.
    resizes: HashMap<MigrationId, ResizeInFlight>,
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
            processes: JobProcesses::default(),
            rank_processes: HashMap::new(),
            pcmd_answers: true,
            draining: None,
            stalled: Vec::new(),
            connected: HashMap::new(),
            partner_hosts: HashSet::new(),
            policy: ConnectionPolicy::default(),
            next_look: None,
            given_back_mark: None,
            resizes: HashMap::new(),
        }
    }

    async fn run(&mut self, mut inputs: Inputs) {
        let mut peers_open = true;
        let mut samples_open = true;
        let mut control_open = true;
        loop {
            let deadline = self.agent.poll_timeout();
            // A far-away sleep when there is no timer keeps one select arm for both cases;
            // a drain is checked every tick.
            let far = Instant::now()
                + if self.draining.is_some() {
                    LEAVE_TICK
                } else {
                    Duration::from_secs(3600)
                };
            let wake = deadline.map_or(far, |d| d.min(far));
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
                    Some(ControlRequest::Leave(order)) => self.start_drain(order),
                    Some(ControlRequest::Stop) => {
                        tracing::warn!("stopping at once on request");
                        if let Some(d) = &self.draining {
                            // The owner wants the node back now: it is given back all the same.
                            let by = format!("{}, cut short by a second signal", d.order.given_back_by());
                            self.mark_given_back(&by);
                        }
                        return;
                    }
                    None => control_open = false,
                },
                Some((id, outcome)) = self.outcomes_rx.recv() => self.on_outcome(id, outcome),
                () = tokio::time::sleep_until(wake.into()) => {
                    if deadline.is_some_and(|d| d <= Instant::now()) {
                        self.agent.handle_timeout(Instant::now());
                    }
                }
            }
            if !peers_open && !samples_open && !control_open {
                return;
            }
            self.carry_out_actions();
            if self.check_drain() {
                return;
            }
        }
    }

    /// A migration or resize ended: noted for `status`, then passed to the core.
    fn on_outcome(&mut self, id: MigrationId, outcome: MigrationOutcome) {
        let decision = match (self.resizes.remove(&id), &outcome) {
            (None, MigrationOutcome::Completed) => {
                DecisionKind::MigrationCompleted { migration: id }
            }
            (None, MigrationOutcome::Failed { reason }) => DecisionKind::MigrationFailed {
                migration: id,
                reason: reason.clone(),
            },
            (Some(r), MigrationOutcome::Completed) => {
                tracing::info!(resize = %id, job = %r.job, from = r.from, to = r.to, "resize completed");
                DecisionKind::ResizeCompleted {
                    resize: id,
                    job: r.job,
                    from: r.from,
                    to: r.to,
                    hosts: r.hosts,
                }
            }
            (Some(r), MigrationOutcome::Failed { reason }) => {
                tracing::info!(resize = %id, job = %r.job, from = r.from, to = r.to, "resize failed: {reason}");
                DecisionKind::ResizeFailed {
                    resize: id,
                    job: r.job,
                    from: r.from,
                    to: r.to,
                    reason: reason.clone(),
                }
            }
        };
        self.note(decision);
        self.agent
            .handle_migration_outcome(Instant::now(), id, outcome);
    }

    fn start_drain(&mut self, order: LeaveOrder) {
        let now = Instant::now();
        if let Some(d) = &mut self.draining {
            // A second request replaces the first's terms and client (whose channel closes).
            d.until = now + order.within;
            d.order = order;
            return;
        }
        tracing::info!(within = ?order.within, force = order.force, "leaving the pool: draining the node");
        self.note(DecisionKind::DrainStarted);
        self.agent.handle_leave(now);
        self.draining = Some(Draining {
            until: now + order.within,
            next_report: now,
            order,
            sampled: false,
        });
    }

    /// Reports a drain's progress; returns true when the agent must stop.
    fn check_drain(&mut self) -> bool {
        let Some(draining) = &self.draining else {
            return false;
        };
        let now = Instant::now();
        let (until, force, next_report, sampled) = (
            draining.until,
            draining.order.force,
            draining.next_report,
            draining.sampled,
        );
        let report = self.leave_report(now);
        let send = |this: &Self, update: LeaveUpdate| {
            if let Some(d) = &this.draining {
                let _ = d.order.updates.send(update);
            }
        };
        if sampled && report.is_empty() {
            if self.pcmd_answers {
                tracing::info!("node drained: {}", report.summary());
            } else {
                tracing::warn!(
                    "leaving: pcmd does not answer and no rank process is known alive on this node, so nothing is left to drain: {}",
                    report.summary()
                );
            }
            self.note(DecisionKind::Left {
                report: report.clone(),
            });
            self.mark_given_back_by_order();
            send(self, LeaveUpdate::Left(report));
            return true;
        }
        if now >= until {
            if force {
                tracing::warn!(
                    "leaving without a full drain (forced): {}",
                    report.summary()
                );
                self.mark_given_back_by_order();
                send(self, LeaveUpdate::Left(report));
                return true;
            }
            tracing::warn!(
                "drain did not finish in time, staying in the pool: {}",
                report.summary()
            );
            self.note(DecisionKind::DrainGivenUp {
                report: report.clone(),
            });
            send(self, LeaveUpdate::Stayed(report));
            self.agent.handle_stay(now);
            self.draining = None;
            return false;
        }
        if now >= next_report {
            tracing::info!("draining: {}", report.summary());
            send(self, LeaveUpdate::Progress(report));
            if let Some(d) = &mut self.draining {
                d.next_report = now + LEAVE_REPORT_PERIOD;
            }
        }
        false
    }

    /// Marks the node as given back the way the drain's order says, before the leave is
    /// reported and the agent stops.
    fn mark_given_back_by_order(&self) {
        if let Some(d) = &self.draining {
            self.mark_given_back(&d.order.given_back_by());
        }
    }

    /// Writes the node's given-back mark ([`Options::given_back_mark`]), `by` saying how.
    /// A mark that cannot be written is logged; the agent leaves all the same.
    fn mark_given_back(&self, by: &str) {
        let Some(socket) = &self.given_back_mark else {
            return;
        };
        let path = given_back::path_for(socket);
        let mark = GivenBack::now(self.agent.host().clone(), by);
        match given_back::write(socket, &mark) {
            Ok(()) => tracing::info!(
                path = %path.display(),
                by,
                "marked the node as given back: a relaunch of a job does not place ranks here"
            ),
            Err(e) => tracing::warn!(
                "cannot mark the node as given back at {}: {e}; a relaunch of a job may place ranks here again",
                path.display()
            ),
        }
    }

    fn leave_report(&mut self, now: Instant) -> LeaveReport {
        let progress = self.agent.leave_progress();
        LeaveReport {
            elapsed_s: progress.map_or(0.0, |p| {
                now.saturating_duration_since(p.started).as_secs_f64()
            }),
            ranks_left: self
                .agent
                .entities()
                .iter()
                .map(|e| e.id.to_string())
                .collect(),
            moving: progress.and_then(|p| p.moving).map(|m| m.to_string()),
            moved: progress.map_or(0, |p| p.moved),
            failed: progress.map_or(0, |p| p.failed),
            processes: self.processes.alive(),
            peers: self.agent.peers().len(),
        }
    }

    fn on_peer_event(&mut self, event: NetEvent) {
        let now = Instant::now();
        match event {
            NetEvent::PeerRtt { peer, rtt } => {
                self.agent.handle_peer_rtt(now, peer.clone(), rtt);
                let Some(c) = self.connected.get_mut(&peer) else {
                    return;
                };
                let Some(host) = &c.host else { return };
                c.rtt = Some(rtt);
                if self.partner_hosts.contains(host) {
                    self.agent.handle_partner_rtt(host, rtt);
                }
                // Measured after its host was left out of a full table: a peer now in the
                // peer table may take the place of one outside it.
                if self.agent.peer_host(&peer).is_none() {
                    if let Err(e) = self.agent.handle_peer_host(now, peer.clone(), host.clone()) {
                        tracing::debug!(%peer, "host announcement refused again: {e}");
                    }
                }
            }
            NetEvent::PeerUp { peer, addr, host } => {
                tracing::info!(%peer, %addr, ?host, "agent connected");
                self.connected.insert(
                    peer.clone(),
                    ConnectedAgent {
                        host: host.clone(),
                        rtt: None,
                        since: now,
                        last_message: None,
                        closing: false,
                    },
                );
                let Some(host) = host else { return };
                if let Err(e) = self.agent.handle_peer_host(now, peer.clone(), host) {
                    // Once per connection, and only from holders of the pool key.
                    tracing::warn!(%peer, "host announcement refused: {e}");
                }
            }
            NetEvent::PeerGone { peer } => {
                tracing::info!(%peer, "peer gone");
                self.connected.remove(&peer);
                self.agent.handle_peer_gone(now, &peer);
            }
            NetEvent::Message { from, message } => {
                tracing::debug!(%from, kind = message.kind(), "message");
                self.note_message(&from, now);
                self.agent.handle_message(now, from, message);
            }
            // Not the core's business: peer-server trouble, refused handshakes, hostile input.
            other => crate::net::log_event(&other),
        }
    }

    fn on_sample(&mut self, sample: Sample) {
        let now = Instant::now();
        self.processes.forget_gone();
        let pids: Vec<u32> = sample.rank_pids.iter().map(|(_, pid)| *pid).collect();
        self.processes.note_ranks(&pids);
        if let Some(node) = sample.node {
            self.agent.handle_node_profile(now, node);
        }
        let answered = sample.entities.is_some();
        if answered != self.pcmd_answers {
            if answered {
                tracing::info!("pcmd answers again: the node's ranks are read from it");
            } else {
                tracing::warn!(
                    "pcmd does not answer: keeping its last list of ranks, less those whose process is gone"
                );
            }
            self.pcmd_answers = answered;
        }
        let entities = match sample.entities {
            Some(entities) => {
                self.note_rank_processes(&sample.rank_pids);
                self.stalled = sample.stalled;
                Some(entities)
            }
            // pcmd cannot be read: its last list stands, for the ranks still running.
            None => Some(self.agent.entities().to_vec())
                .filter(|known| known.iter().any(|e| self.rank_gone(&e.id))),
        };
        if let Some(mut entities) = entities {
            let before = entities.len();
            entities.retain(|e| !self.rank_gone(&e.id));
            if entities.len() < before {
                let gone: Vec<String> = self
                    .rank_processes
                    .keys()
                    .filter(|id| self.rank_gone(id))
                    .map(ToString::to_string)
                    .collect();
                tracing::info!(ranks = ?gone, "ranks whose process is gone are no longer counted here");
                self.stalled
                    .retain(|id| entities.iter().any(|e| e.id == *id));
            }
            self.agent.handle_entities(now, entities);
            self.measure_partners();
        }
        if let Some(d) = &mut self.draining {
            d.sampled = true;
        }
        // Once per profile period: the sample refreshed the partner hosts, if pcmd answered.
        self.rotate_connections(now);
    }

    /// Notes the process of each rank pcmd listed (keeping the start time read when the
    /// pid was first seen) and forgets the ranks it no longer lists.
    fn note_rank_processes(&mut self, ranks: &[(EntityId, u32)]) {
        let mut now = HashMap::with_capacity(ranks.len());
        for (id, pid) in ranks {
            let start = match self.rank_processes.get(id) {
                Some((p, start)) if p == pid => *start,
                _ => self.processes.start_time(*pid),
            };
            now.insert(id.clone(), (*pid, start));
        }
        self.rank_processes = now;
    }

    /// Whether the process of `id` is known to be gone (exited, a zombie, or its pid
    /// reused). A rank with no known process is kept.
    fn rank_gone(&self, id: &EntityId) -> bool {
        self.rank_processes
            .get(id)
            .is_some_and(|(pid, start)| self.processes.is_gone(*pid, *start))
    }

    /// Passes the agent the RTTs it asks for ([`Agent::hosts_to_measure`]) that the
    /// connections' pings already measure. A partner host with no connected agent is asked
    /// of the transport ([`Transport::dial_host`]): in a pool larger than an agent's dial
    /// target its partners' agents are often not among those it dialed (issue 42). Until
    /// then it stays unmeasured, and the model counts that partner only where it is known.
    fn measure_partners(&mut self) {
        self.partner_hosts = self.agent.hosts_to_measure().into_iter().collect();
        if self.partner_hosts.is_empty() {
            return;
        }
        let mut unreached: HashSet<&HostName> = self.partner_hosts.iter().collect();
        for c in self.connected.values() {
            let Some(host) = &c.host else { continue };
            if self.partner_hosts.contains(host) {
                unreached.remove(host);
                if let Some(rtt) = c.rtt {
                    self.agent.handle_partner_rtt(host, rtt);
                }
            }
        }
        for host in unreached {
            self.transport.dial_host(host);
        }
    }

    /// Closes connections to agents of no use when the network is nearly full
    /// ([`crate::connections`]), once per policy period, on a sample.
    fn rotate_connections(&mut self, now: Instant) {
        let Some(cap) = self.transport.max_connections() else {
            return;
        };
        if self.next_look.is_some_and(|t| now < t) {
            return;
        }
        self.next_look = Some(now + self.policy.period);
        let members = self.agent.cluster_members(now);
        let manager = self.agent.manager();
        let connected: Vec<Connected> = self
            .connected
            .iter()
            .filter(|(_, c)| !c.closing)
            .map(|(peer, c)| Connected {
                peer: peer.clone(),
                since: c.since,
                last_message: c.last_message,
                rtt: c.rtt,
                of_use: self.agent.peers().get(peer).is_some()
                    || manager == Some(peer)
                    || members.binary_search(&peer).is_ok()
                    || c.host
                        .as_ref()
                        .is_some_and(|h| self.partner_hosts.contains(h)),
            })
            .collect();
        let close = self.policy.to_close(&connected, cap, now);
        if !close.is_empty() {
            tracing::debug!(
                connected = connected.len(),
                cap,
                closing = close.len(),
                "network nearly full: closing connections to far agents of no use"
            );
        }
        for peer in close {
            // Not counted from now on, so that it is not closed twice before the network
            // reports it gone; a peer the network keeps (a direct peer) is not asked again
            // unless it connects anew.
            if let Some(c) = self.connected.get_mut(&peer) {
                c.closing = true;
            }
            self.transport.disconnect(&peer);
        }
    }

    fn note_message(&mut self, peer: &PeerId, now: Instant) {
        if let Some(c) = self.connected.get_mut(peer) {
            c.last_message = Some(now);
        }
    }

    fn carry_out_actions(&mut self) {
        while let Some(action) = self.agent.poll_action() {
            match action {
                Action::Send { to, message } => {
                    let step = match message {
                        ios_agent_core::Message::WorkSteal { .. } => Some(ProtocolStep::WorkSteal),
                        ios_agent_core::Message::StealAccepted { .. } => {
                            Some(ProtocolStep::StealAccepted)
                        }
                        ios_agent_core::Message::MoveOrder { .. } => Some(ProtocolStep::MoveOrder),
                        _ => None,
                    };
                    if let Some(step) = step {
                        self.note(DecisionKind::Sent {
                            step,
                            to: to.to_string(),
                        });
                    }
                    self.note_message(&to, Instant::now());
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
                    self.note(DecisionKind::MigrationStarted {
                        migration: id,
                        entities: entities.clone(),
                        to_host: to_host.to_string(),
                        to: to.to_string(),
                    });
                    let migrator = std::sync::Arc::clone(&self.migrator);
                    let outcomes = self.outcomes_tx.clone();
                    tokio::task::spawn_blocking(move || {
                        let outcome = migrator.migrate(id, &entities, &to_host);
                        // The loop owns the receiver; it is gone only when the agent stopped.
                        let _ = outcomes.blocking_send((id, outcome));
                    });
                }
                Action::Resize {
                    id,
                    job,
                    from,
                    ranks,
                    hosts,
                    reason,
                } => {
                    let names: Vec<&str> = hosts.iter().map(HostName::as_str).collect();
                    tracing::info!(resize = %id, %job, from, to = ranks, hosts = ?names, ?reason, "resizing");
                    self.note(DecisionKind::ResizeStarted {
                        resize: id,
                        job: job.clone(),
                        from,
                        to: ranks,
                        hosts: hosts.clone(),
                        reason,
                    });
                    self.resizes.insert(
                        id,
                        ResizeInFlight {
                            job: job.clone(),
                            from,
                            to: ranks,
                            hosts: hosts.clone(),
                        },
                    );
                    // As a migration: through pcmd on a blocking thread, the outcome back
                    // on the same channel, to the core with the same id.
                    let migrator = std::sync::Arc::clone(&self.migrator);
                    let outcomes = self.outcomes_tx.clone();
                    tokio::task::spawn_blocking(move || {
                        let outcome = migrator.resize(id, &job, ranks, &hosts);
                        let _ = outcomes.blocking_send((id, outcome));
                    });
                }
            }
        }
    }

    fn note(&mut self, what: DecisionKind) {
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
                        tier: tier_name(tier),
                        srtt_ms: info.srtt.as_secs_f64() * 1e3,
                    });
                }
            }
        }
        status_of(
            &self.agent,
            Instant::now(),
            self.started.elapsed(),
            peers,
            self.decisions.iter().cloned().collect(),
            manager_of(&self.agent),
            self.stalled.iter().map(ToString::to_string).collect(),
        )
    }
}

fn manager_of(agent: &Agent) -> Option<String> {
    agent.manager().map(PeerId::to_string)
}
