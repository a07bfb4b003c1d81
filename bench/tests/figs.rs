//! Smoke tests of the adaptive figures (`fig13`, `fig15`, `fig16`) in their quick modes: each
//! runs its static, adaptive and reference runs on emulated nodes, prints the yardsticks and
//! writes its plots, and every run computes the same grid. Needs root (network namespaces,
//! cgroups): skipped with the reason otherwise. Needs the project's binaries:
//! `cargo build --release --bins` first.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use mpi_ios_bench::summary::{figure_file, Summary};
use mpi_ios_tests::Finished;

/// Generous: a quick figure takes 30-90 s, but now and then a static run on the emulated nodes
/// locks into the cgroup quota period and takes minutes (docs/results-log.md, "A failure mode
/// all settings share"). That is slow, not wrong: the test waits for it rather than fail.
const DEADLINE: Duration = Duration::from_secs(900);

/// One experiment at a time: the machine has two cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// The benchmark executable, or `None` (with the reason printed) where emulated nodes
/// cannot be made.
fn bench() -> Option<PathBuf> {
    if let Err(why) = mpi_ios_tests::netns::Cluster::available() {
        eprintln!("skipped: {why}");
        return None;
    }
    if let Err(why) = mpi_ios_tests::cgroup::available() {
        eprintln!("skipped: {why}");
        return None;
    }
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_mpi-ios-bench"));
    let dir = exe.parent().unwrap();
    for name in ["heat2d", "heat2d-plain", "pcmd", "ios-agent", "peer-server"] {
        assert!(
            dir.join(name).is_file(),
            "{} is missing: run `cargo build --release --bins` before `cargo test --release`",
            dir.join(name).display()
        );
    }
    Some(exe)
}

/// Runs `exe args` in its own process group (output to files) with a deadline; kills the
/// whole group when it ends or times out.
fn run(exe: &Path, args: &[&str]) -> Finished {
    let mut command = Command::new(exe);
    command.args(args);
    mpi_ios_tests::Group::run_to_end(command, "bench", DEADLINE)
        .unwrap_or_else(|e| panic!("mpi-ios-bench {args:?}: {e}"))
}

/// The node caps from `MPI_IOS_TEST_CAP` (cores; unset: each figure's defaults) as options
/// of `fig`: the figures must hold from 0.3 to 1.0 cores, as machines of one kind differ in
/// speed. fig16's slow node gets a third of the cap, as in its defaults (0.6 and 0.2).
fn cap_options(fig: &str) -> Vec<String> {
    let Ok(v) = std::env::var("MPI_IOS_TEST_CAP") else {
        return Vec::new();
    };
    let cap: f64 = v
        .parse()
        .unwrap_or_else(|e| panic!("MPI_IOS_TEST_CAP={v:?} is not a number of cores: {e}"));
    let options = match fig {
        "fig16" => vec![
            "--fast".to_owned(),
            cap.to_string(),
            "--slow".to_owned(),
            (cap / 3.0).to_string(),
        ],
        _ => vec!["--cap".to_owned(), cap.to_string()],
    };
    eprintln!("{fig}: caps {options:?}");
    options
}

/// Runs `fig --quick --check` (the expected migration must happen and every run's checksum
/// match) into a temporary directory and checks what every figure prints and writes;
/// returns stdout and the directory.
fn quick(exe: &Path, fig: &str, stems: &[&str]) -> (String, tempfile::TempDir) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = tempfile::tempdir().unwrap();
    let md = out.path().join("results.md");
    let mut args = vec![
        fig,
        "--quick",
        "--check",
        "--quiet",
        "--out",
        out.path().to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
    ];
    let caps = cap_options(fig);
    args.extend(caps.iter().map(String::as_str));
    let output = run(exe, &args);
    let (stdout, stderr) = (output.stdout.clone(), output.stderr.clone());
    assert!(
        output.code == Some(0),
        "{fig} failed (exit code {:?})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.code
    );
    for needle in [
        "physical limit",
        "Adaptive / physical limit = ",
        "Adaptive vs static MPI: ",
        "Paper: ",
        "match bit for bit",
    ] {
        assert!(stdout.contains(needle), "no `{needle}` in\n{stdout}");
    }
    for stem in stems {
        for ext in ["svg", "png"] {
            let path = out.path().join(format!("{stem}.{ext}"));
            let len = std::fs::metadata(&path).map_or(0, |m| m.len());
            assert!(
                len > 1000,
                "{} missing or too small ({len} bytes)",
                path.display()
            );
        }
    }
    let markdown = std::fs::read_to_string(&md).unwrap();
    assert!(markdown.contains("| run |"), "markdown: {markdown}");
    (stdout, out)
}

/// The figure's typed summary, which `--check` passed (`<figure>.summary.json`).
fn summary(fig: &str, dir: &Path) -> Summary {
    let summary = Summary::read(dir, &figure_file(fig)).unwrap();
    assert!(
        summary.passed && summary.checksums_match && !summary.moves.is_empty(),
        "{summary:#?}"
    );
    summary
}

/// Sum of the node caps of `fig` (its defaults, or from `MPI_IOS_TEST_CAP`), in cores.
fn caps_sum(fig: &str) -> f64 {
    let cap = std::env::var("MPI_IOS_TEST_CAP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.6);
    match fig {
        // node-a and node-c fast, node-b a third of it.
        "fig16" => 2.0 * cap + cap / 3.0,
        // fig13: three nodes at the cap; fig15: node-a at twice the cap, node-b at it.
        _ => 3.0 * cap,
    }
}

fn limit_is_not_beaten(fig: &str, dir: &Path) {
    let summary = summary(fig, dir);
    // Caps that add up to more than the machine's cores do not bind (docs/emulated-nodes.md,
    // Limits): the nodes then share the cores as the scheduler likes, the best placement's
    // run is no physical limit, and only the migration and the checksums are judged.
    let cores = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
    if caps_sum(fig) > cores {
        eprintln!(
            "{fig}: caps add up to {:.2} cores on a {cores}-core machine: the physical limit is not checked",
            caps_sum(fig)
        );
        return;
    }
    // The limit is a lower bound: a run clearly faster than it means the yardstick is wrong
    // (20% allowed for the noise of a shared two-core machine).
    let ratio = summary.adaptive_over_limit.unwrap();
    assert!(ratio >= 0.8, "adaptive / limit = {ratio}\n{summary:#?}");
}

#[test]
fn fig13_quick_prints_the_phases_and_writes_three_plots() {
    let Some(exe) = bench() else { return };
    let (stdout, dir) = quick(
        &exe,
        "fig13",
        &["fig13", "fig14", "fig13-14-iteration-time"],
    );
    assert!(stdout.contains("before the load (ms/it)"), "{stdout}");
    limit_is_not_beaten("fig13", dir.path());
}

#[test]
fn fig15_quick_prints_the_yardsticks_and_writes_its_plot() {
    let Some(exe) = bench() else { return };
    let (stdout, dir) = quick(&exe, "fig15", &["fig15"]);
    assert!(stdout.contains("best placement, same load"), "{stdout}");
    limit_is_not_beaten("fig15", dir.path());
}

#[test]
fn fig16_quick_prints_the_yardsticks_and_writes_its_plot() {
    let Some(exe) = bench() else { return };
    let (_stdout, dir) = quick(&exe, "fig16", &["fig16"]);
    // In quick mode the rank may stop at node-a on its way to node-c (see fig15.rs): the
    // check passed means node-b was left for one of them.
    let summary = summary("fig16", dir.path());
    assert!(
        !summary.final_hosts.iter().any(|h| h == "node-b"),
        "{summary:#?}"
    );
    limit_is_not_beaten("fig16", dir.path());
}
