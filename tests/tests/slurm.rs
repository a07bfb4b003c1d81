//! `pcmrun` inside a real Slurm allocation (a one-node cluster started by the test:
//! [`mpi_ios_tests::slurm::LocalSlurm`]): without `--hostfile` it takes the allocation's
//! host and slots, launches through the runtime's own Slurm support, and when a rank is
//! killed mid-run it relaunches inside the same allocation from the newest checkpoint, ending
//! with the plain run's checksum. Needs root and Slurm's packages; skipped with the reason
//! otherwise.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use mpi_ios_tests::slurm::LocalSlurm;
use mpi_ios_tests::{bin, mpi_lock, Group, MpiJob, Runtime, RuntimeExt as _};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pcm_proto::run::RunEvent;
use pcmrun::EventRecord;

const DEADLINE: Duration = Duration::from_secs(180);

#[test]
fn given_a_slurm_allocation_then_pcmrun_takes_its_host_and_recovers_a_killed_rank_inside_it() {
    if let Err(why) = LocalSlurm::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let _lock = mpi_lock();
    let slurm = LocalSlurm::start().unwrap();
    // Sized by time: about 8 s of heat2d on this machine.
    let probe = MpiJob::new(
        2,
        "heat2d-plain",
        &["--rows", "256", "--cols", "256", "--iters", "5000"],
    )
    .run(Duration::from_secs(60))
    .report();
    let iters = ((5000.0 / probe.seconds.max(1e-3)) * 8.0) as u64;
    let args: Vec<String> = ["--rows", "256", "--cols", "256", "--iters"]
        .iter()
        .map(|s| s.to_string())
        .chain([iters.max(5000).to_string()])
        .collect();
    let plain_args: Vec<&str> = args.iter().map(String::as_str).collect();
    let plain = MpiJob::new(2, "heat2d-plain", &plain_args)
        .run(DEADLINE)
        .report()
        .checksum;
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let report = dir.path().join("report.json");
    let mut command = Command::new("salloc");
    command
        .env("SLURM_CONF", slurm.conf())
        .env("PCMRUN_LAUNCHER", Runtime::current().launcher())
        .env_remove("PCM_DAEMON")
        .env_remove("PCM_CHECKPOINT_INTERVAL")
        .args(["-N1", "-n2"])
        .arg(bin("pcmrun"))
        .args(["-np", "2", "--daemon", "start", "--progress", "0"])
        .args(["--checkpoint-interval", "0.5", "--retry-delay", "0.2"])
        .arg("--checkpoint-dir")
        .arg(dir.path().join("checkpoints"))
        .arg("--events")
        .arg(&events)
        .arg("--report")
        .arg(&report)
        .arg(bin("heat2d"))
        .args(&args);
    let mut group = Group::start(command, dir.path(), "salloc");
    let read = || -> Vec<EventRecord> {
        std::fs::read_to_string(&events)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let victim = loop {
        let list = read();
        let checkpointed = list
            .iter()
            .any(|r| matches!(r.event, RunEvent::Checkpointed { .. }));
        let rank1 = list.iter().find_map(|r| match r.event {
            RunEvent::Started { rank, pid, .. } if rank.0 == 1 => Some(pid),
            _ => None,
        });
        if let (true, Some(pid)) = (checkpointed, rank1) {
            break pid;
        }
        assert!(
            group.running(),
            "salloc ended early:\n{}",
            group.stderr_so_far()
        );
        assert!(
            Instant::now() < deadline,
            "no checkpoint within 60 s:\n{}",
            group.stderr_so_far()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    kill(Pid::from_raw(victim as i32), Signal::SIGKILL).unwrap();
    let finished = group.wait(DEADLINE);
    eprintln!("{}", finished.stderr);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    let host = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let hosts_line = format!(
        "inside a Slurm allocation: hosts {}",
        Runtime::current().hostfile_line(&host, 2)
    );
    assert!(finished.stderr.contains(&hosts_line), "{}", finished.stderr);
    assert_eq!(
        finished.report().checksum,
        plain,
        "the recovered run computed something else"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(report["launches"], 2, "{report}");
    drop(slurm);
}
