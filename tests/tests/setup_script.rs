//! `scripts/setup.sh` as a user sources it (issue 39): the caller's shell keeps its own
//! options, and the compiler wrappers it puts first on `PATH` find their headers.
//!
//! Runs the script for the runtime of this test run (`MPI_IOS_RUNTIME`, as the harness has
//! it); everything it installs is there already, so it only checks and links.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mpi_ios_tests::{Runtime, RuntimeExt as _};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs `script` in a fresh bash at the repository's root, with the runtime of this run.
fn bash(script: &str) -> Output {
    let runtime = match Runtime::current() {
        Runtime::OpenMpi => "openmpi",
        Runtime::Mpich => "mpich",
    };
    Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(root())
        .env("MPI_IOS_RUNTIME", runtime)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn sourcing_the_setup_script_leaves_the_callers_shell_options_as_they_were() {
    // A terminal with none of the strict options: a failing command after it must not end
    // the shell.
    let loose = bash("source scripts/setup.sh >/dev/null 2>&1; false; echo survived; echo \"flags=$-\"; shopt -qo pipefail && echo pipefail; true");
    let out = stdout(&loose);
    assert!(out.contains("survived"), "{out}\n{loose:?}");
    let flags = out.lines().find_map(|l| l.strip_prefix("flags=")).unwrap();
    assert!(!flags.contains('e') && !flags.contains('u'), "{out}");
    assert!(!out.contains("pipefail"), "{out}");
    // A script with all of them keeps them.
    let strict = bash("set -euo pipefail; source scripts/setup.sh >/dev/null 2>&1; echo \"flags=$-\"; shopt -qo pipefail && echo pipefail");
    let out = stdout(&strict);
    let flags = out.lines().find_map(|l| l.strip_prefix("flags=")).unwrap();
    assert!(flags.contains('e') && flags.contains('u'), "{out}");
    assert!(out.contains("pipefail"), "{out}");
    // A refusal returns 1 with the options put back too, and says why.
    let refused =
        bash("MPI_IOS_RUNTIME=bogus source scripts/setup.sh; echo \"status=$? flags=$-\"");
    let out = stdout(&refused);
    assert!(out.contains("status=1 flags="), "{out}");
    assert!(!out.contains("status=1 flags=e"), "{out}");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("MPI_IOS_RUNTIME=bogus"), "{err}");
    // And nothing of the script's own is left behind in the shell.
    let leftovers = bash("source scripts/setup.sh >/dev/null 2>&1; declare -F | grep mpi_ios_; set | grep '^mpi_ios_'; true");
    assert_eq!(stdout(&leftovers), "", "{leftovers:?}");
}

/// The `-I` directories a compiler wrapper's `-show` names.
fn include_dirs(shown: &str) -> Vec<PathBuf> {
    shown
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("-I"))
        .map(PathBuf::from)
        .collect()
}

#[test]
fn after_setup_the_mpicc_on_the_path_names_the_directory_that_holds_mpi_h() {
    for wrapper in ["mpicc", "mpicxx"] {
        let shown = bash(&format!(
            "source scripts/setup.sh >/dev/null 2>&1; command -v {wrapper}; {wrapper} -show"
        ));
        let out = stdout(&shown);
        let mut lines = out.lines();
        let found = lines.next().unwrap_or_default();
        assert!(
            found.starts_with(&root().join(".mpi").display().to_string()),
            "{wrapper} on PATH is {found:?}, not setup's"
        );
        let dirs = include_dirs(lines.next().unwrap_or_default());
        assert!(
            dirs.iter().any(|d| d.join("mpi.h").is_file()),
            "{wrapper} -show names no directory with mpi.h: {out}"
        );
    }
    // The Fortran wrappers too, whose module `mpi` is what `use mpi` reads (on MPICH, the
    // mpif90 that scripts/setup-mpich-fortran.sh writes).
    for wrapper in ["mpif90", "mpifort"] {
        let shown = bash(&format!(
            "source scripts/setup.sh >/dev/null 2>&1; command -v {wrapper}; {wrapper} -show"
        ));
        let out = stdout(&shown);
        let mut lines = out.lines();
        let found = lines.next().unwrap_or_default();
        assert!(
            found.starts_with(&root().join(".mpi").display().to_string()),
            "{wrapper} on PATH is {found:?}, not setup's"
        );
        let dirs = include_dirs(lines.next().unwrap_or_default());
        assert!(
            dirs.iter().any(|d| d.join("mpi.mod").is_file()),
            "{wrapper} -show names no directory with mpi.mod: {out}"
        );
    }
}
