//! The IOS agent's control protocol: what a running `ios-agent` tells the programs and people
//! that ask it through its local control socket.
//!
//! The agent is a daemon, nobody's library; tools, tests and benchmarks that read its state
//! depend on these types only, as pcmd's clients depend on `pcm-proto`. Everything here is
//! plain serialisable data:
//! - [`status`]: [`AgentStatus`] (peers, the pool's hosts it knows with their last known
//!   load ([`PoolHost`]), node and entity profiles, counters) and the
//!   agent's recent [`Decision`]s, typed ([`DecisionKind`]), with words for people from
//!   `Display`;
//! - [`leave`]: a drain's progress ([`LeaveReport`]) and the job processes it waits for;
//! - [`control`]: the requests ([`ControlMessage`]) and replies ([`ControlReply`]).

pub mod control;
pub mod leave;
pub mod status;

pub use control::{ControlMessage, ControlReply};
pub use leave::{JobProcess, LeaveReport, Role};
pub use status::{
    AgentStatus, Counters, Decision, DecisionKind, PeerStatus, PoolHost, ProtocolStep,
};
