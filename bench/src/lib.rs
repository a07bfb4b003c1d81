//! mpi-ios-bench (work in progress).
