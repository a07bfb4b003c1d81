//! ios-agent-core (work in progress).
pub mod decision;
pub mod message;
pub mod model;
pub mod tier;
