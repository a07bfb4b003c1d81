//! The runtime's MPI Fortran bindings, on the calls whose Fortran side depends on where the
//! special constants live (`MPI_IN_PLACE`, `MPI_STATUS_IGNORE`, `MPI_ARGV_NULL`, `.TRUE.`)
//! and on MPICH internals (attributes): `tests/fortran/mpi_bindings.f90`, built with the
//! runtime's `mpif90` and run on 2 ranks, spawning one more. On MPICH that `mpif90` is Intel
//! MPI's Fortran layer over MPICH's libmpi (scripts/setup-mpich-fortran.sh and
//! scripts/mpich-fortran-glue.c), which a wrong constant address turns into wrong results or
//! a crash (a zero `MPI_ARGV_NULL` made `MPI_COMM_SPAWN` read past its argument).

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mpi_ios_tests::{mpi_lock, MpiJob, Runtime, RuntimeExt as _};

const DEADLINE: Duration = Duration::from_secs(60);

/// The checks the program makes, each printed by rank 0 as `check NAME ok`.
const CHECKS: [&str; 7] = [
    "tag_ub",
    "user_attribute",
    "in_place",
    "logical",
    "status_ignore",
    "status",
    "spawn",
];

/// The Fortran compiler wrapper of the runtime under test (the one scripts/setup.sh puts on
/// PATH for it).
fn mpif90() -> PathBuf {
    match Runtime::current() {
        Runtime::OpenMpi => PathBuf::from("mpif90.openmpi"),
        Runtime::Mpich => Runtime::mpich_prefix().join("bin").join("mpif90"),
    }
}

#[test]
fn given_the_runtimes_mpif90_then_constants_attributes_logicals_and_spawn_work_from_fortran() {
    let build = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("fortran/mpi_bindings.f90");
    let program = build.path().join("mpi_bindings");
    let out = Command::new(mpif90())
        .arg("-o")
        .arg(&program)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{} does not run ({e}): run scripts/setup.sh",
                mpif90().display()
            )
        });
    assert!(
        out.status.success(),
        "{} failed: {}",
        mpif90().display(),
        String::from_utf8_lossy(&out.stderr)
    );

    let _lock = mpi_lock();
    let finished = MpiJob::of(2, &program, &[]).run(DEADLINE);
    assert_eq!(
        finished.code,
        Some(0),
        "--- stdout\n{}\n--- stderr\n{}",
        finished.stdout,
        finished.stderr
    );
    for check in CHECKS {
        assert!(
            finished
                .stdout
                .lines()
                .any(|l| l.trim() == format!("check {check} ok")),
            "check {check} did not pass:\n{}",
            finished.stdout
        );
    }
    assert!(!finished.stdout.contains("FAILED"), "{}", finished.stdout);
}
