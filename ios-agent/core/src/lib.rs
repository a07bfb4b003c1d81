//! ios-agent-core (work in progress).
pub mod agent;
pub mod c2c;
pub mod decision;
pub mod message;
pub mod model;
pub mod tier;
pub use agent::Agent;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
