//! heat2d (work in progress).
