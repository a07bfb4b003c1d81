//! pcmd (work in progress).
