//! A deterministic simulator driving many [`Agent`]s (feature `sim`, and in this crate's
//! tests).
//!
//! Time is virtual: the clock jumps to the next wake-up (a message delivery, the end of a
//! migration, a profile or RTT sample, or an agent's [`Agent::poll_timeout`]). Round-trip
//! times between node pairs are settings; a message takes half the RTT. Nodes have cores, a
//! speed and a background load that may vary with time; entities (MPI ranks) want one core
//! each and share an overloaded node's cores equally. A [`Action::Migrate`] moves its
//! entities after a simulated cost (spawn time plus state over bandwidth). Every run is
//! replayable from its seed; the number of steps is bounded, so a livelock fails loudly.
//!
//! It plays the driver's part exactly as a real one would: the same inputs, in the same
//! order, so a failing scenario here is a failing seed to replay.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use pcm_proto::{HostName, JobId, Rank};

use crate::agent::{Action, Agent, Config, MigrationOutcome};
use crate::message::{Message, MigrationId};
use crate::model::{EntityId, EntityProfile, NodeProfile};
use crate::tier::PeerId;

/// Background load of a node as a function of simulated time since the start.
pub type LoadFn = Box<dyn Fn(Duration) -> f64>;

/// A node to add to the simulation.
pub struct NodeSpec {
    cores: f64,
    speed: f64,
    memory: u64,
    background: LoadFn,
}

impl NodeSpec {
    /// A node with `cores` reference-speed cores, 8 GiB of memory and no background load.
    pub fn new(cores: f64) -> Self {
        NodeSpec {
            cores,
            speed: 1.0,
            memory: 8 << 30,
            background: Box::new(|_| 0.0),
        }
    }

    /// Relative core speed.
    pub fn with_speed(mut self, speed: f64) -> Self {
        self.speed = speed;
        self
    }

    /// Background (non-application) load in runnable threads, over time.
    pub fn with_background(mut self, load: impl Fn(Duration) -> f64 + 'static) -> Self {
        self.background = Box::new(load);
        self
    }
}

struct Node {
    peer: PeerId,
    host: HostName,
    agent: Agent,
    cores: f64,
    speed: f64,
    memory: u64,
    background: LoadFn,
    alive: bool,
}

struct Entity {
    id: EntityId,
    node: usize,
    state_bytes: u64,
    /// `None`: on its node since before the simulation started.
    arrived: Option<Instant>,
    migrating: bool,
}

/// Memory of one simulated rank.
const ENTITY_MEMORY: u64 = 100 << 20;
/// Seconds of reference-core compute per iteration.
const WORK_PER_ITERATION: f64 = 0.1;
/// Age of entities that exist at the start of the simulation.
const INITIAL_AGE: Duration = Duration::from_secs(3600);

/// One completed migration.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationRecord {
    /// Simulated time since the start.
    pub at: Duration,
    /// The entity.
    pub entity: EntityId,
    /// Source node index.
    pub from: usize,
    /// Destination node index.
    pub to: usize,
}

/// One message put on the simulated network.
#[derive(Debug, Clone, PartialEq)]
pub struct SentRecord {
    /// Simulated time since the start.
    pub at: Duration,
    /// Sender node index.
    pub from: usize,
    /// Receiver node index.
    pub to: usize,
    /// The message.
    pub message: Message,
}

enum EventKind {
    Deliver {
        to: usize,
        from: usize,
        message: Message,
    },
    MigrationDone {
        id: MigrationId,
        from: usize,
        to: usize,
        entities: Vec<EntityId>,
    },
}

struct Event {
    at: Instant,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The simulator.
pub struct Sim {
    seed: u64,
    config: Config,
    epoch: Instant,
    now: Instant,
    nodes: Vec<Node>,
    by_peer: HashMap<PeerId, usize>,
    entities: Vec<Entity>,
    rtt: HashMap<(usize, usize), Duration>,
    default_rtt: Duration,
    events: BinaryHeap<Reverse<Event>>,
    seq: u64,
    profile_period: Duration,
    rtt_period: Duration,
    next_profile: Instant,
    next_rtt: Instant,
    steps: u64,
    max_steps: u64,
    spawn: Duration,
    bandwidth: f64,
    sent: Vec<SentRecord>,
    migrations: Vec<MigrationRecord>,
}

impl Sim {
    /// An empty simulation whose agents use `config`, each seeded from `seed` and its index.
    pub fn new(seed: u64, config: Config) -> Self {
        let epoch = Instant::now();
        let profile_period = config.profile_period();
        Sim {
            seed,
            config,
            epoch,
            now: epoch,
            nodes: Vec::new(),
            by_peer: HashMap::new(),
            entities: Vec::new(),
            rtt: HashMap::new(),
            default_rtt: Duration::from_millis(1),
            events: BinaryHeap::new(),
            seq: 0,
            profile_period,
            rtt_period: Duration::from_secs(5),
            next_profile: epoch,
            next_rtt: epoch,
            steps: 0,
            max_steps: 10_000_000,
            spawn: Duration::from_millis(300),
            bandwidth: 12.5e6,
            sent: Vec::new(),
            migrations: Vec::new(),
        }
    }

    /// Round-trip time between nodes not given one with [`Sim::set_rtt`] (default 1 ms).
    pub fn with_default_rtt(mut self, rtt: Duration) -> Self {
        self.default_rtt = rtt;
        self
    }

    /// Most steps before [`Sim::run_for`] panics (default ten million).
    pub fn with_max_steps(mut self, max_steps: u64) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Adds a node (its agent is named `nNN`, so ids order like indices); returns its index.
    pub fn add_node(&mut self, spec: NodeSpec) -> usize {
        let index = self.nodes.len();
        let name = format!("n{index:02}");
        let peer = PeerId::new(name.as_bytes()).expect("short ascii id");
        let host = HostName::new(&name).expect("valid host name");
        let config = self
            .config
            .clone()
            .with_seed(self.seed.wrapping_mul(1000).wrapping_add(index as u64));
        let agent = Agent::new(peer.clone(), host.clone(), config, self.now).expect("valid config");
        self.by_peer.insert(peer.clone(), index);
        self.nodes.push(Node {
            peer,
            host,
            agent,
            cores: spec.cores,
            speed: spec.speed,
            memory: spec.memory,
            background: spec.background,
            alive: true,
        });
        // Let the newcomer (and the others) measure RTTs right away.
        self.next_rtt = self.now;
        self.next_profile = self.next_profile.min(self.now);
        index
    }

    /// Sets the RTT between two nodes (both directions).
    pub fn set_rtt(&mut self, a: usize, b: usize, rtt: Duration) {
        self.rtt.insert((a.min(b), a.max(b)), rtt);
    }

    /// Adds an entity (one rank of `job`) on `node`, resident there since before the start.
    pub fn add_entity(&mut self, node: usize, job: &str, rank: u32, state_bytes: u64) -> EntityId {
        let id = EntityId {
            job: JobId::new(job).expect("valid job id"),
            rank: Rank(rank),
        };
        self.entities.push(Entity {
            id: id.clone(),
            node,
            state_bytes,
            arrived: None,
            migrating: false,
        });
        id
    }

    /// Stops a node silently: it no longer sends, receives or answers pings.
    pub fn kill(&mut self, node: usize) {
        self.nodes[node].alive = false;
    }

    /// The node's agent starts leaving the pool now ([`Agent::handle_leave`]).
    pub fn leave(&mut self, node: usize) {
        let now = self.now;
        self.nodes[node].agent.handle_leave(now);
    }

    /// The agent of a node.
    pub fn agent(&self, node: usize) -> &Agent {
        &self.nodes[node].agent
    }

    /// Indices of the entities' nodes, by entity.
    pub fn node_of(&self, entity: &EntityId) -> Option<usize> {
        self.entities
            .iter()
            .find(|e| &e.id == entity)
            .map(|e| e.node)
    }

    /// Number of entities on a node.
    pub fn count_on(&self, node: usize) -> usize {
        self.entities.iter().filter(|e| e.node == node).count()
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.epoch
    }

    /// Every message sent so far.
    pub fn sent(&self) -> &[SentRecord] {
        &self.sent
    }

    /// Every completed migration so far.
    pub fn migrations(&self) -> &[MigrationRecord] {
        &self.migrations
    }

    fn rtt_between(&self, a: usize, b: usize) -> Duration {
        self.rtt
            .get(&(a.min(b), a.max(b)))
            .copied()
            .unwrap_or(self.default_rtt)
    }

    fn push(&mut self, at: Instant, kind: EventKind) {
        self.seq += 1;
        self.events.push(Reverse(Event {
            at,
            seq: self.seq,
            kind,
        }));
    }

    /// Load of a node: background plus one runnable thread per entity.
    fn load(&self, node: usize) -> f64 {
        let n = &self.nodes[node];
        (n.background)(self.elapsed()).max(0.0) + self.count_on(node) as f64
    }

    fn profiles(&self, node: usize) -> (NodeProfile, Vec<EntityProfile>) {
        let n = &self.nodes[node];
        let load = self.load(node);
        let share = if load > n.cores { n.cores / load } else { 1.0 };
        let on: Vec<&Entity> = self.entities.iter().filter(|e| e.node == node).collect();
        let profile = NodeProfile {
            cores: n.cores,
            speed: n.speed,
            cpu_load: load,
            memory_available: n.memory.saturating_sub(on.len() as u64 * ENTITY_MEMORY),
            bandwidth: self.bandwidth,
            competing: (n.background)(self.elapsed()).max(0.0).min(n.cores),
        };
        // The job's iteration takes as long as its slowest rank; the others wait in MPI.
        let mut iteration: HashMap<&JobId, f64> = HashMap::new();
        for e in &self.entities {
            let en = &self.nodes[e.node];
            let l = self.load(e.node);
            let s = if l > en.cores { en.cores / l } else { 1.0 };
            let t = WORK_PER_ITERATION / (s * en.speed);
            let slot = iteration.entry(&e.id.job).or_insert(0.0);
            *slot = slot.max(t);
        }
        let elapsed = self.elapsed();
        let entities = on
            .iter()
            .map(|e| {
                let compute = WORK_PER_ITERATION / (share * n.speed);
                let iter = iteration
                    .get(&e.id.job)
                    .copied()
                    .unwrap_or(compute)
                    .max(compute);
                let resident = match e.arrived {
                    Some(t) => self.now - t,
                    None => elapsed + INITIAL_AGE,
                };
                EntityProfile {
                    id: e.id.clone(),
                    cpu: share,
                    memory: ENTITY_MEMORY,
                    network: 0.0,
                    state_bytes: e.state_bytes,
                    compute: Duration::from_secs_f64(compute),
                    mpi_wait: Duration::from_secs_f64(iter - compute),
                    iteration_rate: 1.0 / iter,
                    age: elapsed + INITIAL_AGE,
                    remaining: None,
                    resident,
                }
            })
            .collect();
        (profile, entities)
    }

    fn drain(&mut self, node: usize) {
        while let Some(action) = self.nodes[node].agent.poll_action() {
            match action {
                Action::Send { to, message } => {
                    let Some(&j) = self.by_peer.get(&to) else {
                        continue;
                    };
                    self.sent.push(SentRecord {
                        at: self.elapsed(),
                        from: node,
                        to: j,
                        message: message.clone(),
                    });
                    let at = self.now + self.rtt_between(node, j) / 2;
                    self.push(
                        at,
                        EventKind::Deliver {
                            to: j,
                            from: node,
                            message,
                        },
                    );
                }
                Action::Migrate {
                    id,
                    entities,
                    to,
                    to_host,
                } => {
                    let target = self.by_peer.get(&to).copied();
                    let ok = target.is_some_and(|j| self.nodes[j].host == to_host)
                        && entities.iter().all(|id| {
                            self.entities
                                .iter()
                                .any(|e| &e.id == id && e.node == node && !e.migrating)
                        });
                    let j = target.unwrap_or(node);
                    let bytes: u64 = self
                        .entities
                        .iter()
                        .filter(|e| entities.contains(&e.id))
                        .map(|e| e.state_bytes)
                        .sum();
                    let cost = self.spawn + Duration::from_secs_f64(bytes as f64 / self.bandwidth);
                    if ok {
                        for e in self
                            .entities
                            .iter_mut()
                            .filter(|e| entities.contains(&e.id))
                        {
                            e.migrating = true;
                        }
                    }
                    let at = self.now + if ok { cost } else { Duration::ZERO };
                    let entities = if ok { entities } else { Vec::new() };
                    self.push(
                        at,
                        EventKind::MigrationDone {
                            id,
                            from: node,
                            to: j,
                            entities,
                        },
                    );
                }
            }
        }
    }

    fn next_wakeup(&self) -> Instant {
        let mut t = self.next_profile.min(self.next_rtt);
        if let Some(Reverse(e)) = self.events.peek() {
            t = t.min(e.at);
        }
        for n in self.nodes.iter().filter(|n| n.alive) {
            if let Some(x) = n.agent.poll_timeout() {
                t = t.min(x);
            }
        }
        t.max(self.now)
    }

    /// Runs the simulation for `duration` of simulated time.
    ///
    /// # Panics
    /// When the step bound is exceeded (a livelock).
    pub fn run_for(&mut self, duration: Duration) {
        let end = self.now + duration;
        loop {
            let next = self.next_wakeup();
            if next > end {
                self.now = end;
                return;
            }
            self.now = next;
            self.step();
            self.steps += 1;
            if self.steps == self.max_steps {
                for (i, n) in self.nodes.iter().enumerate() {
                    let timeout = n.agent.poll_timeout().map(|t| t - self.epoch);
                    eprintln!("node {i}: alive {}, next timeout {timeout:?}", n.alive);
                }
            }
            assert!(
                self.steps <= self.max_steps,
                "simulation exceeded {} steps at {:?} (seed {})",
                self.max_steps,
                self.elapsed(),
                self.seed
            );
        }
    }

    fn step(&mut self) {
        let now = self.now;
        if now >= self.next_rtt {
            self.next_rtt = now + self.rtt_period;
            for i in 0..self.nodes.len() {
                for j in 0..self.nodes.len() {
                    if i != j && self.nodes[i].alive && self.nodes[j].alive {
                        let rtt = self.rtt_between(i, j);
                        let peer = self.nodes[j].peer.clone();
                        let _span = tracing::debug_span!("node", i).entered();
                        self.nodes[i].agent.handle_peer_rtt(now, peer, rtt);
                        self.drain(i);
                    }
                }
            }
        }
        if now >= self.next_profile {
            self.next_profile = now + self.profile_period;
            for i in 0..self.nodes.len() {
                if !self.nodes[i].alive {
                    continue;
                }
                let (profile, entities) = self.profiles(i);
                let _span = tracing::debug_span!("node", i).entered();
                let agent = &mut self.nodes[i].agent;
                agent.handle_node_profile(now, profile);
                agent.handle_entities(now, entities);
                self.drain(i);
            }
        }
        while self.events.peek().is_some_and(|Reverse(e)| e.at <= now) {
            let Some(Reverse(event)) = self.events.pop() else {
                break;
            };
            match event.kind {
                EventKind::Deliver { to, from, message } => {
                    if self.nodes[to].alive && self.nodes[from].alive {
                        let peer = self.nodes[from].peer.clone();
                        let _span = tracing::debug_span!("node", i = to).entered();
                        self.nodes[to].agent.handle_message(now, peer, message);
                        self.drain(to);
                    }
                }
                EventKind::MigrationDone {
                    id,
                    from,
                    to,
                    entities,
                } => self.finish_migration(id, from, to, entities),
            }
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].alive && self.nodes[i].agent.poll_timeout().is_some_and(|t| t <= now) {
                let _span = tracing::debug_span!("node", i).entered();
                self.nodes[i].agent.handle_timeout(now);
                self.drain(i);
            }
        }
    }

    fn finish_migration(
        &mut self,
        id: MigrationId,
        from: usize,
        to: usize,
        entities: Vec<EntityId>,
    ) {
        let now = self.now;
        let at = self.elapsed();
        let ok = !entities.is_empty() && self.nodes[to].alive;
        for e in self
            .entities
            .iter_mut()
            .filter(|e| entities.contains(&e.id))
        {
            e.migrating = false;
            if ok {
                e.node = to;
                e.arrived = Some(now);
                self.migrations.push(MigrationRecord {
                    at,
                    entity: e.id.clone(),
                    from,
                    to,
                });
            }
        }
        if self.nodes[from].alive {
            let outcome = if ok {
                MigrationOutcome::Completed
            } else {
                MigrationOutcome::Failed {
                    reason: "refused or destination gone".into(),
                }
            };
            self.nodes[from]
                .agent
                .handle_migration_outcome(now, id, outcome);
            self.drain(from);
        }
    }
}

#[cfg(test)]
mod tests;
