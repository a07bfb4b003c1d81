//! The IOS agent: one per node of a pool. It profiles the node and the PCM-enabled MPI
//! processes registered with the node's pcmd, talks to the other agents, and moves processes
//! from overloaded nodes to idle or newly joined ones (paper 004, section 4.2, Figure 2).
//!
//! The decision and protocol logic is the sans-I/O [`ios_agent_core::Agent`]; this crate is
//! its I/O around it:
//! - [`driver`]: the event loop feeding the core network events, profile samples, timer
//!   expiries and migration outcomes, and carrying out its actions;
//! - [`transport`]: what the loop needs from the network (the libp2p transport of
//!   `ios-agent-net` in the binary, channels in tests);
//! - [`connections`]: which connections the loop closes when the network is nearly full,
//!   so that an agent in a pool larger than its connection cap keeps meeting new agents;
//! - [`node_daemon`]: the link to the node's pcmd (attach or start it; stats; migrations);
//! - [`net`]: `ios-agent-net` (libp2p, pool key, peer servers) as a [`transport::Transport`]
//!   (non-blocking, into the network's bounded send queue) and the channel of its events,
//!   which the loop reads as they are;
//! - [`sampler`]: the profiling loop (`ios-agent-profile` for the node, pcmd for the ranks);
//! - [`control`]: the local control socket behind `ios-agent status` and `ios-agent leave`;
//! - [`job_processes`]: the job processes on the node, which a leaving agent waits to see gone;
//! - [`status`]: what `status` reports.
//!
//! The program: [`settings`] (the flags, the environment read once, the places worked out
//! from them), [`commands`] (each subcommand), [`join`] (the agent in the foreground); its
//! `main` parses the command line, sets up logging and calls [`commands::run`].

pub mod cli;
pub mod commands;
pub mod connections;
pub mod control;
pub mod driver;
pub mod job_processes;
pub mod join;
pub mod net;
pub mod node_daemon;
pub mod sampler;
pub mod settings;
pub mod status;
pub mod transport;
