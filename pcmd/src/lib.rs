//! pcmd.
pub mod registry;
