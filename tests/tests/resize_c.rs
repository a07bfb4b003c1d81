//! Malleable jobs through PCM's C interface (pcm.h, docs/instrumenting-c.md): the C heat2d
//! (`heat2d-c`) grows and shrinks at iteration boundaries and ends with exactly the checksum
//! of `heat2d-c-plain` with the same arguments, which does not depend on the number of
//! ranks; a C program (`pcm/capi/tests/malleable.c`, on the same numerics) checks the
//! answers of bad calls, `PCM_Block_range` and `PCM_Resizing` on every process, and a block
//! stored with the wrong length refuses the resize on every rank while the job runs on.
//! With jacobi-f90, the same through the Fortran module (on MPICH with the mpif90 that
//! scripts/setup.sh installs).
//!
//! The C binaries are built by `scripts/build-c.sh` (scripts/test.sh runs it); the test
//! program is compiled here against the libpcm.so of the programs under test.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mpi_ios_tests::{mpi_lock, program_dir, Finished, MpiJob, Report, Runtime, RuntimeExt as _};

/// Far from the grid's fixed point (checked by `reference_checksum`).
const ARGS: &[&str] = &["--rows", "90", "--cols", "48", "--iters", "120"];
const DEADLINE: Duration = Duration::from_secs(90);

fn plain(program: &str, args: &[&str]) -> Report {
    MpiJob::new(2, program, args).run(DEADLINE).report()
}

/// `program` from `ranks` ranks with `schedule` (and `env`): the finished job.
fn run(
    program: &str,
    ranks: usize,
    args: &[&str],
    schedule: &str,
    env: &[(&str, &str)],
) -> Finished {
    let mut job = MpiJob::new(ranks, program, args)
        .env("PCM_DAEMON", "none")
        .env("PCM_SCHEDULE", schedule);
    for (key, value) in env {
        job = job.env(key, *value);
    }
    let finished = job.run(DEADLINE);
    assert_eq!(
        finished.code,
        Some(0),
        "{program} with PCM_SCHEDULE={schedule} failed\n--- stdout\n{}\n--- stderr\n{}",
        finished.stdout,
        finished.stderr
    );
    finished
}

/// Checks a resized run's report against the plain run's: the checksum bit for bit, the
/// iterations, the number of resizes and the width at the end.
fn assert_resized(finished: &Finished, reference: &Report, resizes: u64, final_ranks: usize) {
    let report = finished.report();
    assert_eq!(
        report.checksum,
        reference.reference_checksum(),
        "checksum differs from the plain run's\n{}",
        finished.stderr
    );
    assert_eq!(report.resizes, Some(resizes), "{}", finished.stderr);
    assert_eq!(report.ranks, final_ranks, "{}", finished.stderr);
    assert_eq!(report.hosts.map(|h| h.len()), Some(final_ranks));
    assert_eq!(report.iterations, reference.iterations);
}

/// heat2d-c from `ranks` ranks through `schedule`, against heat2d-c-plain.
fn assert_heat2d_c(ranks: usize, args: &[&str], schedule: &str, resizes: u64, final_ranks: usize) {
    let _lock = mpi_lock();
    let reference = plain("heat2d-c-plain", args);
    let finished = run("heat2d-c", ranks, args, schedule, &[]);
    assert_resized(&finished, &reference, resizes, final_ranks);
}

#[test]
fn given_heat2d_c_grown_from_2_to_3_then_the_checksum_is_plain() {
    assert_heat2d_c(2, ARGS, "40:size=3", 1, 3);
}

#[test]
fn given_heat2d_c_shrunk_from_4_to_2_then_the_checksum_is_plain() {
    assert_heat2d_c(4, ARGS, "30:size=2", 1, 2);
}

/// The observable contract's sequence (docs/malleability.md), on the grid of the C
/// example's README, and the same steps on the small grid with a move among them.
#[test]
fn given_the_contract_sequence_then_heat2d_c_ends_with_the_plain_checksum() {
    let large = &["--rows", "256", "--cols", "256", "--iters", "3000"];
    assert_heat2d_c(2, large, "500:size=3,1200:size=4,2000:size=2", 3, 2);
    assert_heat2d_c(
        2,
        ARGS,
        "20:size=3,50:size=4,60:1,70:size=1,80:size=2",
        4,
        2,
    );
}

/// The mpicc of the runtime the programs were built for.
fn mpicc() -> PathBuf {
    match Runtime::current() {
        Runtime::OpenMpi => PathBuf::from("mpicc.openmpi"),
        Runtime::Mpich => Runtime::mpich_prefix().join("bin").join("mpicc"),
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `pcm/capi/tests/malleable.c` with heat2d-c's numerics, linked to the libpcm.so of the
/// programs under test, in `dir`.
fn build_malleable(dir: &Path) -> PathBuf {
    let lib = program_dir();
    assert!(
        lib.join("libpcm.so").exists(),
        "{} has no libpcm.so: run scripts/build-c.sh",
        lib.display()
    );
    let heat = repo().join("examples/heat2d-c");
    let output = dir.join("malleable");
    let out = Command::new(mpicc())
        .args([
            "-O2",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-ffp-contract=off",
        ])
        .arg(format!("-I{}", repo().join("pcm/capi/include").display()))
        .arg(format!("-I{}", heat.display()))
        .arg("-o")
        .arg(&output)
        .arg(repo().join("pcm/capi/tests/malleable.c"))
        .arg(heat.join("heat.c"))
        .arg(heat.join("sha256.c"))
        .arg(format!("-L{}", lib.display()))
        .arg("-lpcm")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mpicc malleable.c failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    output
}

/// Bad calls get their codes on every process (the fresh ones, the added ones, a
/// replacement), `PCM_Block_range` names the heat block's rows after every resize, and
/// `PCM_Resizing` follows the status; the job grows, shrinks to one rank and back, with a
/// move among the resizes.
#[test]
fn given_the_c_calls_of_malleable_jobs_then_codes_ranges_and_the_checksum_are_right() {
    let build = tempfile::tempdir().unwrap();
    let program = build_malleable(build.path());
    let program = program.to_str().unwrap();
    let _lock = mpi_lock();
    let reference = plain("heat2d-c-plain", ARGS);
    let finished = run(
        program,
        2,
        ARGS,
        "20:size=3,50:size=4,60:1,70:size=1,80:size=2",
        &[],
    );
    assert!(
        finished
            .stdout
            .contains("malleable: checks passed, 0 refused"),
        "{}\n{}",
        finished.stdout,
        finished.stderr
    );
    assert_resized(&finished, &reference, 4, 2);
    // Each failure is logged, naming the call and the reason.
    for logged in [
        "PCM_Declare_block: array \"grid\" declared with 0 rows of 48 elements",
        "PCM_Set_malleable: malleable limits 0..=4",
        "PCM_Block_range: array \"nosuch\" was not declared",
        "PCM_Declare_block: array \"grid\" is declared as 90 rows of 48 elements of [f64], not 91 rows",
    ] {
        assert!(finished.stderr.contains(logged), "{logged}\n{}", finished.stderr);
    }
}

/// Rank 1 stores its rows one row short at the first resize: PCM_Reconfigure refuses it on
/// every rank (PCM_SUCCESS, nothing kept), the job runs on at its width, and the next
/// resize, stored right, goes through; the checksum is the plain one either way.
#[test]
fn given_a_block_stored_with_the_wrong_length_then_the_resize_is_refused_and_the_job_runs_on() {
    let build = tempfile::tempdir().unwrap();
    let program = build_malleable(build.path());
    let program = program.to_str().unwrap();
    let _lock = mpi_lock();
    let reference = plain("heat2d-c-plain", ARGS);
    let bad = [("MALLEABLE_BAD_RANK", "1")];
    for (schedule, refused, resizes, final_ranks) in
        [("40:size=3", 1, 0, 2), ("40:size=3,80:size=3", 1, 1, 3)]
    {
        let finished = run(program, 2, ARGS, schedule, &bad);
        assert!(
            finished
                .stdout
                .contains(&format!("malleable: checks passed, {refused} refused")),
            "PCM_SCHEDULE={schedule}\n{}\n{}",
            finished.stdout,
            finished.stderr
        );
        assert!(
            finished.stderr.contains(
                "reconfiguration abandoned, the job carries on unchanged: rank 1 stored 2112 \
                 elements of the distributed array \"grid\", but its rows 45..90 of 48 \
                 elements are 2160 elements"
            ),
            "PCM_SCHEDULE={schedule}\n{}",
            finished.stderr
        );
        assert_resized(&finished, &reference, resizes, final_ranks);
    }
}

/// jacobi-f90 through the Fortran module: grown, shrunk to one rank and back with a move
/// among the resizes, and shrunk from 4 to 2, it ends with jacobi-f90-plain's checksum
/// (its largest change per iteration is an exact maximum, the same at any width).
#[test]
fn given_fortran_jacobi_resized_then_the_checksum_is_plain() {
    let _lock = mpi_lock();
    let reference = plain("jacobi-f90-plain", ARGS);
    for (ranks, schedule, resizes, final_ranks) in [
        (2, "40:size=3", 1, 3),
        (4, "30:size=2", 1, 2),
        (2, "20:size=3,50:size=4,60:1,70:size=1,80:size=2", 4, 2),
    ] {
        let finished = run("jacobi-f90", ranks, ARGS, schedule, &[]);
        let report = finished.report();
        assert_eq!(
            report.checksum,
            reference.reference_checksum(),
            "checksum differs after PCM_SCHEDULE={schedule}\n{}",
            finished.stderr
        );
        assert_eq!(report.resizes, Some(resizes), "{schedule}");
        assert_eq!(report.ranks, final_ranks, "{schedule}");
        assert_eq!(report.iterations, reference.iterations);
    }
}
