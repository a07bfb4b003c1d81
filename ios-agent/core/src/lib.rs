//! The IOS agent's decision and protocol logic as a sans-I/O state machine.
//!
//! MPI/IOS moves MPI processes from overloaded nodes to idle or newly joined ones. Every node
//! runs an IOS agent (paper 004, section 4.2 and Figure 2): a profiling component (here: the
//! driver's samples), a **decision component** and a **protocol component**. This crate is
//! the last two, with no I/O of its own: no sockets, no timers, no threads, no MPI. Time and
//! randomness are inputs, so the same code runs under the libp2p driver (`ios-agent`) and
//! under the deterministic simulator in `sim` (feature `sim`).
//!
//! - [`model`]: the resource sensitive model of section 5, **Figure 3** ([`model::gain`]).
//! - [`resize`]: the model extended to malleable jobs: the gain of growing or shrinking a
//!   job ([`resize::resize_gain`]); the policy that uses it is in `agent/resizing.rs`.
//! - [`decision`]: which entities to move where, shared by both strategies: damping,
//!   feasibility, `gain > min_gain`, single or group migration (section 5.2, "Migration
//!   granularity").
//! - [`tier`]: peers grouped by RTT into local / regional / national / global (section 5.2).
//! - [`agent`]: the [`Agent`] state machine, which hands each input to the part it concerns,
//!   each in its own file under `agent/`: the state both strategies share (`shared.rs`);
//!   **NSp2p** work stealing with TTL forwarding and tier escalation (`stealing.rs`;
//!   section 5.2, "Peer-to-peer load balancing"; section 6.2), and partner steals to the
//!   agents of the ranks' far partners, which gather a spread job (also for an NSc2c
//!   manager's members; [`agent::Config::with_gather`]); the resizing policy
//!   (`resizing.rs`).
//! - [`c2c`] (`agent/c2c.rs`): **NSc2c**: latency clusters, manager election by heartbeats
//!   (`agent/c2c/election.rs`), profile polling, intra-cluster balancing to
//!   `n1/n2 = sum w r1 / sum w r2`, managers as NSp2p peers that steal through
//!   `stealing.rs` (section 5.1 and 5.2, "Cluster-to-cluster load balancing").
//! - [`message`]: every agent-to-agent message, validated after decoding.
//!
//! # How a driver uses it
//!
//! Methods come in four kinds, in this order: getters, `handle_*` inputs, and the
//! `#[must_use]` outputs [`Agent::poll_action`] and [`Agent::poll_timeout`]. After **every**
//! input, the driver drains `poll_action` and re-arms one timer at `poll_timeout`:
//!
//! 1. every [`agent::Config::profile_period`]: [`Agent::handle_node_profile`] and
//!    [`Agent::handle_entities`] (from pcmd: per rank CPU, memory, state size, compute vs
//!    MPI time per iteration, age, residence time);
//! 2. on each ping: [`Agent::handle_peer_rtt`]; on disconnect: [`Agent::handle_peer_gone`];
//! 3. on each decoded agent message: [`Agent::handle_message`] (frames above
//!    [`message::MAX_MESSAGE_LEN`] refused before decoding);
//! 4. when the timer fires: [`Agent::handle_timeout`];
//! 5. when pcmd reports the end of a migration: [`Agent::handle_migration_outcome`];
//! 6. then: [`agent::Action::Send`] goes on the wire, [`agent::Action::Migrate`] goes to
//!    pcmd as a `Migrate` request carrying the migration id, and [`agent::Action::Resize`]
//!    as a `Migrate` request with the resize and no moves (malleable jobs, [`resize`]).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use ios_agent_core::agent::{Action, Config};
//! use ios_agent_core::model::NodeProfile;
//! use ios_agent_core::tier::PeerId;
//! use ios_agent_core::Agent;
//! use pcm_proto::HostName;
//!
//! let now = Instant::now();
//! let me = PeerId::new(b"node-a".to_vec()).unwrap();
//! let mut agent = Agent::new(me, HostName::new("node-a").unwrap(), Config::default(), now).unwrap();
//! agent.handle_peer_rtt(now, PeerId::new(b"node-b".to_vec()).unwrap(), Duration::from_millis(2));
//! agent.handle_node_profile(now, NodeProfile::idle(4.0, 8 << 30)); // an idle node
//! if let Some(t) = agent.poll_timeout() {
//!     agent.handle_timeout(t.max(now));
//! }
//! while let Some(action) = agent.poll_action() {
//!     match action {
//!         // An idle node asks its local peer for work.
//!         Action::Send { to, message } => println!("send {} to {to}", message.kind()),
//!         Action::Migrate { id, entities, to_host, .. } => {
//!             println!("pcmd: move {entities:?} to {to_host} as {id}")
//!         }
//!         Action::Resize { id, job, ranks, hosts, .. } => {
//!             println!("pcmd: resize {job} to {ranks} ranks ({hosts:?}) as {id}")
//!         }
//!     }
//! }
//! ```
//!
//! # Supported, and not
//!
//! Supported: CPU, memory and network terms in the model (CPU only by default); single and
//! group migration of ranks of one job; NSp2p and NSc2c, chosen per pool by
//! [`agent::Topology`]; damping by hold-down, thresholds and minimum gain; duplicate and
//! hostile messages. A request from the network names only registered processes and a
//! destination, never a program: givers choose their own entities, and members obey move
//! orders only from their own manager and only for their own eligible entities.
//!
//! Not here: transport, discovery (the peer server), pcmd I/O, measurement of loads and
//! bandwidth, where a rank's partners run (the model's communication term,
//! [`model::gain_near`], needs them in [`EntityProfile::partners`]), and splitting clusters
//! on performance rather than latency.

pub mod agent;
pub use agent::c2c;
pub mod decision;
pub mod message;
pub mod model;
pub mod resize;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod tier;

pub use agent::{Action, Agent, Config, MigrationOutcome, Topology};
pub use message::{Message, MessageId, MigrationId};
pub use model::{EntityId, EntityProfile, NodeProfile, Resource, Weights};
pub use tier::{LatencyTier, PeerId};
