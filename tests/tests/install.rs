//! `scripts/install.sh --prefix DIR` as a user runs it (issue 39, "A complete install"): the
//! programs (`pcmd`, `pcmrun`, `ios-agent`, `peer-server`) land in `DIR/bin` and run, and
//! the CMake package config `DIR/lib/cmake/PCM/PCMConfig.cmake` lets a CMake project outside
//! the repository `find_package(PCM)`, link `PCM::pcm` and `PCM::pcm_fortran`, and run
//! under the runtime libpcm was built for.
//!
//! Installs the binaries under test (`--from` the MPI programs' directory, `--programs-from`
//! the harness's), as `tests/tests/capi.rs` does for the pkg-config route. Needs `cmake`,
//! which `scripts/setup.sh` installs.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use mpi_ios_tests::{bin_dir, mpi_lock, program_dir, Group, MpiJob, Runtime, RuntimeExt as _};

const DEADLINE: Duration = Duration::from_secs(60);
const PROGRAMS: [&str; 4] = ["pcmd", "pcmrun", "ios-agent", "peer-server"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `command`, which must succeed; `what` names it in the failure.
fn run(command: &mut Command, what: &str) -> Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what} could not start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({})\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// `scripts/install.sh --prefix prefix` of the binaries under test.
fn install(prefix: &Path) -> Output {
    run(
        Command::new(root().join("scripts/install.sh"))
            .arg("--prefix")
            .arg(prefix)
            .arg("--from")
            .arg(program_dir())
            .arg("--programs-from")
            .arg(bin_dir()),
        "scripts/install.sh",
    )
}

/// Fails, naming what is missing and what installs it, when `cmake` is not on `PATH`.
fn require_cmake() {
    match Command::new("cmake").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("cmake --version failed: {}", text(&out.stderr)),
        Err(e) => panic!(
            "cmake is missing ({e}): this test builds a CMake project against the installed \
             PCMConfig.cmake. scripts/setup.sh installs it (Debian package cmake); or \
             `apt-get install cmake`"
        ),
    }
}

/// `PATH` without the runtime links `scripts/setup.sh` puts first: the CMake project must
/// find MPI through what the install recorded, as in a shell that never sourced setup.sh.
fn path_without_setup() -> String {
    let mpi = root().join(".mpi");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|dir| !dir.starts_with(&mpi))
        .collect();
    std::env::join_paths(kept)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Configures and builds the CMake project in `source` into `source/build` with
/// `CMAKE_PREFIX_PATH=prefix`; returns the configure step's output.
fn cmake_build(source: &Path, prefix: &Path) -> String {
    let build = source.join("build");
    let configured = run(
        Command::new("cmake")
            .arg("-S")
            .arg(source)
            .arg("-B")
            .arg(&build)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
            .arg("-DCMAKE_BUILD_TYPE=Release")
            .env("PATH", path_without_setup())
            .env_remove("MPICC")
            .current_dir(source),
        "cmake (configure)",
    );
    run(
        Command::new("cmake")
            .arg("--build")
            .arg(&build)
            .env("PATH", path_without_setup())
            .current_dir(source),
        "cmake --build",
    );
    text(&configured.stdout)
}

/// Runs `program` as a one-rank job (`mpiexec -n 1`, or `mpirun -np 1` on Open MPI) and
/// returns its stdout. Without cargo's `LD_LIBRARY_PATH`, which names the libpcm under test
/// (this test's own profile directory) and would come before the installed one.
fn run_one_rank(program: &Path) -> String {
    let _lock = mpi_lock();
    let mut command = MpiJob::of(1, program, &[]).command();
    command.env_remove("LD_LIBRARY_PATH");
    let logs = tempfile::tempdir().unwrap();
    let finished = Group::start(command, logs.path(), "installed").wait(DEADLINE);
    assert_eq!(
        finished.code,
        Some(0),
        "{} failed\n--- stdout\n{}\n--- stderr\n{}",
        program.display(),
        finished.stdout,
        finished.stderr
    );
    finished.stdout
}

#[test]
fn given_a_prefix_then_the_four_programs_are_installed_in_its_bin_and_run() {
    let prefix = tempfile::tempdir().unwrap();
    let out = install(prefix.path());
    for program in PROGRAMS {
        let path = prefix.path().join("bin").join(program);
        assert!(
            path.is_file(),
            "{} not installed\n{}",
            path.display(),
            text(&out.stderr)
        );
        let help = run(
            Command::new(&path).arg("--help"),
            &format!("{program} --help"),
        );
        let help = text(&help.stdout);
        assert!(help.contains("Usage"), "{program} --help printed:\n{help}");
    }
    for file in [
        "lib/libpcm.so",
        "lib/libpcm.a",
        "include/pcm.h",
        "lib/pkgconfig/pcm.pc",
        "lib/cmake/PCM/PCMConfig.cmake",
        "lib/cmake/PCM/PCMConfigVersion.cmake",
    ] {
        assert!(prefix.path().join(file).is_file(), "{file} not installed");
    }
}

#[test]
fn given_programs_from_a_directory_without_them_then_install_fails_and_names_them() {
    let prefix = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(root().join("scripts/install.sh"))
        .arg("--prefix")
        .arg(prefix.path())
        .arg("--from")
        .arg(program_dir())
        .arg("--programs-from")
        .arg(empty.path())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "install.sh succeeded: {err}");
    assert!(
        err.contains("pcmd pcmrun ios-agent peer-server missing"),
        "{err}"
    );
}

const CMAKE_C_PROJECT: &str = r#"cmake_minimum_required(VERSION 3.13)
project(pcm_smoke C)
find_package(PCM 0.1 REQUIRED)
message(STATUS "PCM ${PCM_VERSION} for ${PCM_MPI_RUNTIME}")
add_executable(pcm_smoke pcm_smoke.c)
target_link_libraries(pcm_smoke PRIVATE PCM::pcm)
"#;

const C_PROGRAM: &str = r#"#include <mpi.h>
#include <pcm.h>
#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm world = MPI_COMM_WORLD;
    if (PCM_Init(&world, "pcm_smoke") != PCM_SUCCESS) {
        fprintf(stderr, "pcm_smoke: %s\n", PCM_Last_error());
        return 1;
    }
    int ok = PCM_Status(world) == PCM_CONTINUE && PCM_Process_Status() == PCM_FRESH;
    ok = ok && PCM_Finalize(world) == PCM_SUCCESS;
    MPI_Finalize();
    printf("pcm_smoke: %s\n", ok ? "ok" : "failed");
    return ok ? 0 : 1;
}
"#;

const CMAKE_FORTRAN_PROJECT: &str = r#"cmake_minimum_required(VERSION 3.13)
project(pcm_smoke_f Fortran)
find_package(PCM REQUIRED COMPONENTS Fortran)
add_executable(pcm_smoke_f pcm_smoke_f.f90)
target_link_libraries(pcm_smoke_f PRIVATE PCM::pcm_fortran)
"#;

const FORTRAN_PROGRAM: &str = r#"program pcm_smoke_f
    use mpi
    use pcm
    implicit none
    integer :: comm, ierr
    logical :: ok
    call MPI_Init(ierr)
    comm = MPI_COMM_WORLD
    ok = pcm_init(comm, 'pcm_smoke_f') == PCM_SUCCESS
    ok = ok .and. pcm_status(comm) == PCM_CONTINUE .and. pcm_process_status() == PCM_FRESH
    ok = ok .and. pcm_finalize(comm) == PCM_SUCCESS
    call MPI_Finalize(ierr)
    if (.not. ok) stop 1
    print '(a)', 'pcm_smoke_f: ok'
end program pcm_smoke_f
"#;

#[test]
fn given_an_install_moved_elsewhere_then_a_cmake_project_finds_pcm_links_it_and_runs() {
    require_cmake();
    let dir = tempfile::tempdir().unwrap();
    let installed = dir.path().join("installed");
    install(&installed);
    // The package config computes its paths from where it is: move the whole install.
    let prefix = dir.path().join("moved");
    std::fs::rename(&installed, &prefix).unwrap();
    let runtime = match Runtime::current() {
        Runtime::OpenMpi => "openmpi",
        Runtime::Mpich => "mpich",
    };

    let project = dir.path().join("c");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("CMakeLists.txt"), CMAKE_C_PROJECT).unwrap();
    std::fs::write(project.join("pcm_smoke.c"), C_PROGRAM).unwrap();
    let configured = cmake_build(&project, &prefix);
    assert!(
        configured.contains(&format!("PCM 0.1.0 for {runtime}")),
        "{configured}"
    );
    let program = project.join("build/pcm_smoke");
    // Linked against the moved libpcm, found without LD_LIBRARY_PATH.
    let ldd = run(
        Command::new("ldd")
            .arg(&program)
            .env_remove("LD_LIBRARY_PATH"),
        "ldd",
    );
    let libpcm = prefix.join("lib/libpcm.so");
    assert!(
        text(&ldd.stdout).contains(&libpcm.display().to_string()),
        "{} does not load {}:\n{}",
        program.display(),
        libpcm.display(),
        text(&ldd.stdout)
    );
    let stdout = run_one_rank(&program);
    assert!(stdout.contains("pcm_smoke: ok"), "{stdout}");

    // The Fortran module: both runtimes have a Fortran wrapper (Open MPI's; on MPICH the one
    // scripts/setup.sh installs).
    assert!(
        prefix.join("include/pcm.mod").exists(),
        "no Fortran module installed"
    );
    let project = dir.path().join("fortran");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("CMakeLists.txt"), CMAKE_FORTRAN_PROJECT).unwrap();
    std::fs::write(project.join("pcm_smoke_f.f90"), FORTRAN_PROGRAM).unwrap();
    cmake_build(&project, &prefix);
    let stdout = run_one_rank(&project.join("build/pcm_smoke_f"));
    assert!(stdout.contains("pcm_smoke_f: ok"), "{stdout}");
}

#[test]
fn given_a_cmake_project_that_asks_for_a_newer_pcm_then_configure_fails() {
    require_cmake();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    install(&prefix);
    let project = dir.path().join("c");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(
        project.join("CMakeLists.txt"),
        CMAKE_C_PROJECT.replace("PCM 0.1 REQUIRED", "PCM 9.0 REQUIRED"),
    )
    .unwrap();
    let out = Command::new("cmake")
        .arg("-S")
        .arg(&project)
        .arg("-B")
        .arg(project.join("build"))
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "configure succeeded: {err}");
    // CMake wraps its messages: compare word by word.
    let words = err.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("compatible with requested version \"9.0\"")
            && words.contains("PCMConfig.cmake, version: 0.1.0"),
        "{err}"
    );
}
