//! The messages of the agent's local control socket (`ios-agent status`, `ios-agent leave`):
//! 4-byte length, CBOR body, like pcmd's socket.

use serde::{Deserialize, Serialize};

use crate::leave::LeaveReport;
use crate::status::AgentStatus;

/// What a control client asks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum ControlMessage {
    /// The agent's state.
    Status,
    /// Drain the node (move every rank elsewhere, wait until no job process is left), then
    /// stop. If that takes longer than `within_s` seconds, stop anyway when `force`, else
    /// stay in the pool.
    Leave {
        /// Seconds the drain may take.
        within_s: f64,
        /// Stop even if the node could not be drained.
        force: bool,
    },
}

/// What the agent answers: one reply to `Status`; to `Leave`, `Draining` about once a
/// second, then `Left` or `Stayed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControlReply {
    /// Answer to `Status`.
    Status(Box<AgentStatus>),
    /// The drain goes on.
    Draining(LeaveReport),
    /// The agent left the pool.
    Left(LeaveReport),
    /// The drain did not finish in time; the agent stays in the pool.
    Stayed(LeaveReport),
    /// The request could not be served.
    Error(String),
}
