//! `pcmrun` inside a real Slurm allocation (a one-node cluster started by the test:
//! [`mpi_ios_tests::slurm::LocalSlurm`]): without `--hostfile` it takes the allocation's
//! host and slots, launches through the runtime's own Slurm support, and when a rank is
//! killed mid-run it relaunches inside the same allocation from the newest checkpoint, ending
//! with the plain run's checksum. Needs root and Slurm's packages; skipped with the reason
//! otherwise.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use mpi_ios_tests::pcmrun_job::PcmrunCommand;
use mpi_ios_tests::slurm::LocalSlurm;
use mpi_ios_tests::{heat2d_args_for, mpi_lock, MpiJob, Runtime, RuntimeExt as _};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pcm_proto::run::RunEvent;

const DEADLINE: Duration = Duration::from_secs(180);
const WAIT: Duration = Duration::from_secs(60);

#[test]
fn given_a_slurm_allocation_then_pcmrun_takes_its_host_and_recovers_a_killed_rank_inside_it() {
    if let Err(why) = LocalSlurm::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let _lock = mpi_lock();
    let slurm = LocalSlurm::start().unwrap();
    // Sized by time: about 8 s of heat2d on this machine.
    let (args, _) = heat2d_args_for(2, 256, 256, 8.0, WAIT);
    let plain_args: Vec<&str> = args.iter().map(String::as_str).collect();
    let plain = MpiJob::new(2, "heat2d-plain", &plain_args)
        .run(DEADLINE)
        .report()
        .reference_checksum()
        .to_owned();
    let dir = tempfile::tempdir().unwrap();
    let mut salloc = Command::new("salloc");
    salloc.env("SLURM_CONF", slurm.conf()).args(["-N1", "-n2"]);
    let mut pcmrun = PcmrunCommand::wrapped(salloc, dir.path(), 2);
    pcmrun.command().args([
        "--progress",
        "0",
        "--checkpoint-interval",
        "0.5",
        "--retry-delay",
        "0.2",
    ]);
    let mut job = pcmrun.start("heat2d", &args, dir.path(), "salloc");
    job.wait_for("a checkpoint", WAIT, |r| {
        matches!(r.event, RunEvent::Checkpointed { .. })
    })
    .unwrap();
    let victim = job
        .wait_for(
            "rank 1 started",
            WAIT,
            |r| matches!(r.event, RunEvent::Started { rank, .. } if rank.0 == 1),
        )
        .unwrap();
    let RunEvent::Started { pid: victim, .. } = victim.event else {
        unreachable!()
    };
    kill(Pid::from_raw(victim as i32), Signal::SIGKILL).unwrap();
    let finished = job.wait(DEADLINE);
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
    let report = job.report().unwrap();
    assert_eq!(report["launches"], 2, "{report}");
    drop(slurm);
}
