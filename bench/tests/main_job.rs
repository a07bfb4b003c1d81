//! The main job in its short mode (what `scripts/main-job.sh --quick` runs after building):
//! at least one automatic migration, checksums equal to the plain runs, the plot written.
//! Needs root (network namespaces, cgroups); skipped with the reason otherwise.
#![allow(clippy::unwrap_used)]

use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mpi_ios_tests::netns::Cluster;

#[test]
fn the_main_job_moves_a_rank_by_itself_and_matches_the_plain_checksum() {
    if let Err(why) = Cluster::available().and_then(|()| mpi_ios_tests::cgroup::available()) {
        eprintln!("skipped: {why}");
        return;
    }
    let _lock = mpi_ios_tests::mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let (stdout, stderr) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_mpi-ios-bench"))
        .args(["adaptive", "--quick", "--check", "--out"])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(300) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
            panic!("the main job did not finish within 300 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&stdout).unwrap();
    let errors = std::fs::read_to_string(&stderr).unwrap();
    eprintln!("{text}");
    assert!(
        status.success(),
        "the main job failed ({status})\n{text}\n{errors}"
    );
    assert!(
        text.contains("RESULT: checksums match bit for bit"),
        "{text}"
    );
    assert!(text.contains("moved node-b -> node-c"), "{text}");
    for name in ["throughput.svg", "throughput.png", "timeline.csv"] {
        let len = std::fs::metadata(out.join(name)).map_or(0, |m| m.len());
        assert!(len > 500, "{name}: {len} bytes");
    }
}

#[test]
fn the_agent_benchmark_quick_mode_measures_a_reaction_and_the_agents_cpu() {
    if let Err(why) = Cluster::available().and_then(|()| mpi_ios_tests::cgroup::available()) {
        eprintln!("skipped: {why}");
        return;
    }
    let _lock = mpi_ios_tests::mpi_lock();
    let out = Command::new(env!("CARGO_BIN_EXE_mpi-ios-bench"))
        .args(["agents", "--quick"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("load onset -> migration: median"), "{text}");
    assert!(text.contains("agent CPU at steady state: median"), "{text}");
}
