//! ios-agent-core (work in progress).
