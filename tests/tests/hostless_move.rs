//! Where a rank goes when its move names no host (`PCM_SCHEDULE=ITER:RANK` without `@HOST`,
//! `pcmd migrate` without `--to`): PCM spawns the replacement with no placement hint
//! (`MPI_INFO_NULL`), and the MPI runtime puts it where its own mapping says, which is not
//! where the rank was. pcm's settings docs (`pcm/src/lib.rs`, "Settings") say where; these
//! tests hold it, on emulated hosts (see `mpi_ios_tests::netns`).
//!
//! Needs root (CI runs as root); elsewhere each test prints "skipped: <reason>" and passes.

use std::time::Duration;

use mpi_ios_tests::netns::Cluster;
use mpi_ios_tests::{mpi_lock, MpiJob, Report, Runtime, RuntimeExt as _};

const ARGS: &[&str] = &["--rows", "64", "--cols", "64", "--iters", "100"];
const DEADLINE: Duration = Duration::from_secs(60);

fn run(cluster: &Cluster, program: &str, placement: &[&str], schedule: Option<&str>) -> Report {
    let mut job = MpiJob::new(placement.len(), program, ARGS);
    if let Some(schedule) = schedule {
        job = job.env("PCM_SCHEDULE", schedule);
    }
    let finished = cluster.job(job, placement).run(DEADLINE);
    assert_eq!(finished.code, Some(0), "{program}: {}", finished.stderr);
    finished.report()
}

/// The launch's host list is node-b, node-c, then the spare node-a (one slot each): rank 1
/// moves off node-c with no host named, once and then again.
///
/// Seen on MPICH 5.0.2 and Open MPI 4.1 (2026-12-03): the first replacement goes to the
/// spare node-a, the slot after the ones the launch filled, on both. The second goes to
/// node-b on MPICH (hydra goes on round the host list) and back to node-c on Open MPI. A
/// third on MPICH would go to node-c, whose hydra proxy ended with the rank that left it,
/// and ends the job (`HYDU_sock_write ... write error (Bad file descriptor)`, exit 255);
/// named hosts start a new proxy and do not hit it (`hosts.rs`, moves back onto left hosts).
#[test]
fn given_a_move_without_a_host_then_the_runtime_places_the_replacement() {
    let Some(cluster) = Cluster::for_test("move_without_a_host", 3) else {
        return;
    };
    let _lock = mpi_lock();
    let placement = ["node-b", "node-c"];
    let reference = run(&cluster, "heat2d-plain", &placement, None);
    let second = match Runtime::current() {
        Runtime::Mpich => "node-b",
        Runtime::OpenMpi => "node-c",
    };
    for (schedule, expected) in [("40:1", "node-a"), ("40:1,70:1", second)] {
        let moved = run(&cluster, "heat2d", &placement, Some(schedule));
        assert_eq!(moved.checksum, reference.reference_checksum(), "{schedule}");
        assert_eq!(
            moved.hosts.as_deref(),
            Some(&["node-b".to_owned(), expected.to_owned()][..]),
            "PCM_SCHEDULE={schedule} on {:?}: rank 1 did not end where pcm's settings docs \
             say",
            Runtime::current()
        );
    }
}
