//! mpi-ios-tests (work in progress).
