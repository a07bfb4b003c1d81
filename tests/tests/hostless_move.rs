//! Where a rank goes when its move names no host (`PCM_SCHEDULE=ITER:RANK` without `@HOST`,
//! `pcmd migrate` without `--to`): PCM names the allocation's host running the fewest of the
//! job's processes, not the one the rank leaves (pcm's settings docs, `pcm/src/lib.rs`;
//! `hosts::place_unnamed`). These tests hold it on emulated hosts (see `mpi_ios_tests::netns`).
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
/// moves off node-c with no host named, once, twice, three times: to node-a, node-c, node-a.
///
/// Before PCM named the host (2026-12-03), the runtime mapped it: the second went to node-b on
/// MPICH (hydra goes round its host list) and to node-c on Open MPI, and a third on MPICH went
/// to node-c, whose hydra proxy had ended with the rank that left it, and ended the job
/// (`HYDU_sock_write ... write error (Bad file descriptor)`, exit 255).
#[test]
fn given_moves_without_a_host_then_each_goes_to_the_least_loaded_other_host_on_both_runtimes() {
    let Some(cluster) = Cluster::for_test("move_without_a_host", 3) else {
        return;
    };
    let _lock = mpi_lock();
    let placement = ["node-b", "node-c"];
    let reference = run(&cluster, "heat2d-plain", &placement, None);
    for (schedule, expected) in [
        ("40:1", "node-a"),
        ("40:1,60:1", "node-c"),
        ("40:1,60:1,80:1", "node-a"),
    ] {
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
