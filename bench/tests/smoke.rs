//! Smoke test: every benchmark runs in its quick (CI) mode and prints its table (and the
//! figures write their plots), so that they do not rot. Needs the project's binaries: `cargo build --release --bins` first
//! (heat2d, heat2d-plain and pcmd come from other packages).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use mpi_ios_tests::Finished;

const DEADLINE: Duration = Duration::from_secs(180);

/// One MPI benchmark at a time: the machine has two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn bench() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_mpi-ios-bench"));
    let dir = exe.parent().unwrap();
    for name in [
        "heat2d",
        "heat2d-plain",
        "pcmd",
        "pcm-state",
        "mpi-pingpong",
    ] {
        assert!(
            dir.join(name).is_file(),
            "{} is missing: run `cargo build --release --bins` before `cargo test --release`",
            dir.join(name).display()
        );
    }
    exe
}

/// Runs `exe args` in its own process group (output to files) with a deadline; kills the
/// whole group when it ends or times out.
fn run(exe: &Path, args: &[&str]) -> Finished {
    let mut command = Command::new(exe);
    command.args(args);
    mpi_ios_tests::Group::run_to_end(command, "bench", DEADLINE)
        .unwrap_or_else(|e| panic!("mpi-ios-bench {args:?}: {e}"))
}

fn check(output: &Finished, header: &str) {
    let (stdout, stderr) = (output.stdout.as_str(), output.stderr.as_str());
    assert!(
        output.code == Some(0),
        "benchmark failed (exit code {:?})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.code
    );
    assert!(
        stdout.contains(header),
        "no table header `{header}` in stdout\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
}

#[test]
fn overhead_quick_prints_its_table() {
    let exe = bench();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let md = tempfile::NamedTempFile::new().unwrap();
    let output = run(
        &exe,
        &[
            "overhead",
            "--quick",
            "--markdown",
            md.path().to_str().unwrap(),
        ],
    );
    check(&output, "plain us/iter (median)");
    let markdown = std::fs::read_to_string(md.path()).unwrap();
    assert!(markdown.contains("| grid |"), "markdown: {markdown}");
}

#[test]
fn migration_quick_prints_its_table() {
    let exe = bench();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let output = run(&exe, &["migration", "--quick"]);
    check(&output, "merge+split ms");
    let stdout = output.stdout.as_str();
    assert!(
        stdout.contains("1 MiB") && stdout.contains("8 MiB"),
        "{stdout}"
    );
}

#[test]
fn checkpoint_quick_prints_its_table() {
    let exe = bench();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let output = run(&exe, &["checkpoint", "--quick"]);
    check(&output, "copy to buddy pcmd MB/s");
    let stdout = output.stdout.as_str();
    // One row for the 8 MiB size, with a figure in every column.
    let row = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("8 "))
        .unwrap_or_else(|| panic!("no 8 MiB row\n{stdout}"));
    assert_eq!(row.split_whitespace().count(), 9, "{row}");
}

#[test]
fn recovery_quick_measures_a_recovery_within_the_targets() {
    let exe = bench();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let output = run(&exe, &["recovery", "--quick"]);
    check(&output, "kill to resumed s");
    let stdout = output.stdout.as_str();
    let row = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap_or_else(|| panic!("no row for the 1 s interval\n{stdout}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells.len(), 8, "{row}");
    // At most one interval of work lost (the kill comes half an interval after a checkpoint).
    assert_eq!(cells[7], "yes", "{row}");
    let resumed: f64 = cells[4].parse().unwrap();
    assert!(
        resumed < 30.0,
        "{resumed} s from the kill to the resumed job: {row}"
    );
}

/// Asserts that `dir/stem.svg` and `dir/stem.png` exist and are not empty.
fn assert_plot(dir: &Path, stem: &str) {
    for ext in ["svg", "png"] {
        let path = dir.join(format!("{stem}.{ext}"));
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        assert!(
            len > 1000,
            "{} missing or too small ({len} bytes)",
            path.display()
        );
    }
}

#[test]
fn fig12_quick_prints_its_table_and_writes_its_plot() {
    let exe = bench();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = tempfile::tempdir().unwrap();
    let md = out.path().join("results.md");
    let output = run(
        &exe,
        &[
            "fig12",
            "--quick",
            "--out",
            out.path().to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
        ],
    );
    check(&output, "overhead % (medians)");
    let stdout = output.stdout.as_str();
    // One row per rank count of the quick mode.
    let rows = stdout
        .lines()
        .filter(|l| l.contains("128x128") && !l.starts_with("Figure"))
        .count();
    assert_eq!(rows, 2, "{stdout}");
    assert_plot(out.path(), "fig12");
    let markdown = std::fs::read_to_string(md).unwrap();
    assert!(markdown.contains("| ranks |"), "markdown: {markdown}");
}

#[test]
fn fig17_quick_reconfigures_once_and_writes_both_plots() {
    let exe = bench();
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = tempfile::tempdir().unwrap();
    let output = run(
        &exe,
        &["fig17", "--quick", "--out", out.path().to_str().unwrap()],
    );
    check(&output, "overhead % (phases / total)");
    let stdout = output.stdout.as_str();
    assert!(stdout.contains("spawn ms (less store)"), "{stdout}");
    // The breakdown rows hold a real spawn: PCM's spawn is hundreds of ms, never zero.
    let breakdown = stdout
        .lines()
        .skip_while(|l| !l.starts_with("Figure 18"))
        .find(|l| l.trim_start().starts_with("64x64"))
        .unwrap_or_else(|| panic!("no 64x64 breakdown row\n{stdout}"));
    let total: f64 = breakdown
        .split_whitespace()
        .last()
        .unwrap()
        .parse()
        .unwrap();
    assert!(total > 1.0, "reconfiguration total {total} ms: {breakdown}");
    assert_plot(out.path(), "fig17");
    assert_plot(out.path(), "fig18");
    assert_plot(out.path(), "fig17-rate");
}

#[test]
fn profiling_quick_prints_its_table() {
    let exe = bench();
    assert!(
        exe.with_file_name("mpi-calls").is_file(),
        "mpi-calls is missing: run `cargo build --release --bins` first"
    );
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let output = run(&exe, &["profiling", "--quick"]);
    check(&output, "ratio / share (median)");
    let stdout = output.stdout.as_str();
    assert!(
        stdout.contains("halo loop") && stdout.contains("pcmd CPU"),
        "{stdout}"
    );
}
