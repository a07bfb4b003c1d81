//! Emulated hosts share nothing but their link: MPI between two nodes crosses the veth that
//! joins them to the bridge, so what a test measures "across hosts" is a network, and a
//! link that goes down stops the job. Before the nodes had their own /dev/shm, IPC and boot
//! id (`mpi_ios_tests::netns`, "Nothing shared but the link"), MPICH's UCX joined two nodes
//! through shared memory: 59 KB crossed node-b's link over 320,000 heat2d iterations, and a
//! 5 s link-down changed nothing. Each test here fails that way.
//!
//! Needs root (CI runs as root); elsewhere each test prints "skipped: <reason>" and passes.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mpi_ios_tests::netns::{Cluster, LinkBytes};
use mpi_ios_tests::{heat2d_args_for, heat2d_args_sized, mpi_lock, Group, MpiJob, Report};

const ROWS: u32 = 240;
const COLS: u32 = 256;
const DEADLINE: Duration = Duration::from_secs(120);

/// A 3-node cluster, or `None` after printing why the test is skipped.
fn cluster(test: &str) -> Option<Cluster> {
    Cluster::for_test(test, 3)
}

/// heat2d's arguments for about `seconds` of 2 ranks on one machine, and the rate measured
/// (once per test binary: each probe is seconds of MPI jobs).
fn sized(seconds: f64) -> (Vec<String>, f64) {
    static RATE: OnceLock<f64> = OnceLock::new();
    let rate = *RATE.get_or_init(|| heat2d_args_for(2, ROWS, COLS, 1.0, DEADLINE).1);
    (heat2d_args_sized(ROWS, COLS, rate, seconds), rate)
}

/// heat2d-plain's report for `sized`, run on this machine outside the emulated nodes: the
/// checksum does not depend on where the ranks run, and across the nodes' link the same run
/// takes three times as long or more.
fn plain(sized: &[String]) -> Report {
    MpiJob::new(2, "heat2d-plain", &args(sized))
        .run(DEADLINE)
        .report()
}

fn args(sized: &[String]) -> Vec<&str> {
    sized.iter().map(String::as_str).collect()
}

/// The least a node exchanging one halo row each way per iteration sends and receives over
/// `iterations` of `report`'s grid: a row is its columns' values of 8 bytes, less the two
/// fixed boundary columns.
fn halo_bytes(report: &Report, iterations: u64) -> u64 {
    let cols = report.cols.unwrap_or(u64::from(COLS));
    iterations * (cols - 2) * 8
}

/// The bytes crossing `host`'s link while `run` runs.
fn bytes_during<T>(cluster: &Cluster, host: &str, run: impl FnOnce() -> T) -> (T, LinkBytes) {
    let before = cluster.link_bytes(host);
    let out = run();
    (out, cluster.link_bytes(host) - before)
}

fn assert_halo_crossed(host: &str, crossed: LinkBytes, report: &Report, iterations: u64) {
    let least = halo_bytes(report, iterations);
    eprintln!(
        "{host}'s link over {iterations} iterations: {} sent, {} received (halo alone: {least})",
        crossed.sent, crossed.received
    );
    assert!(
        crossed.sent >= least && crossed.received >= least,
        "{host}'s link carried {crossed:?} over {iterations} iterations, less than the halo \
         rows ({least} bytes each way): MPI between the nodes took another path"
    );
}

#[test]
fn given_ranks_on_two_nodes_then_every_halo_row_crosses_their_link() {
    let Some(cluster) = cluster("halo_crosses_the_link") else {
        return;
    };
    let _lock = mpi_lock();
    let (sized, _) = sized(2.0);
    let job = cluster.job(
        MpiJob::new(2, "heat2d-plain", &args(&sized)),
        &["node-a", "node-b"],
    );
    let (report, crossed) = bytes_during(&cluster, "node-b", || job.run(DEADLINE).report());
    assert_halo_crossed("node-b", crossed, &report, report.iterations);
    // node-c runs nothing of the job: its link stays quiet.
    let quiet = cluster.link_bytes("node-c");
    assert!(
        quiet.sent < halo_bytes(&report, report.iterations) / 10,
        "node-c, which runs no rank, sent {quiet:?}"
    );
}

#[test]
fn given_rank_1_moved_to_a_third_node_then_its_halo_rows_cross_the_new_nodes_link() {
    let Some(cluster) = cluster("halo_after_a_move") else {
        return;
    };
    let _lock = mpi_lock();
    let (sized, _) = sized(2.0);
    let placement = ["node-a", "node-b"];
    let plain = plain(&sized);
    // The move at a tenth of the run: the replacement on node-c computes the rest.
    let moved_at = plain.iterations / 10;
    let job = cluster.job(
        MpiJob::new(2, "heat2d", &args(&sized)).env("PCM_SCHEDULE", format!("{moved_at}:1@node-c")),
        &placement,
    );
    let (finished, crossed) = bytes_during(&cluster, "node-c", || job.run(DEADLINE));
    let report = finished.report();
    assert_eq!(
        report.hosts.as_deref(),
        Some(&["node-a".to_string(), "node-c".to_string()][..]),
        "rank 1 did not end on node-c\n--- stderr\n{}",
        finished.stderr
    );
    assert_eq!(
        report.checksum,
        plain.reference_checksum(),
        "checksum differs after the move"
    );
    assert_halo_crossed("node-c", crossed, &report, report.iterations - moved_at);
}

/// Lines of heat2d's progress (`--report-every`) printed so far.
fn progress_lines(job: &Group) -> usize {
    job.stderr_so_far()
        .lines()
        .filter(|line| line.starts_with("heat2d: iteration "))
        .count()
}

#[test]
fn given_the_link_between_two_ranks_down_then_the_job_stops_until_it_is_back() {
    let Some(cluster) = cluster("link_down_stops_the_job") else {
        return;
    };
    let _lock = mpi_lock();
    let (sized, rate) = sized(6.0);
    // About forty progress lines a second at the rate measured on one machine; across the
    // link the job runs at a third of it or less, and at least two a second are asked below.
    let every = ((rate / 40.0) as u64).max(1).to_string();
    let mut with_progress = args(&sized);
    with_progress.extend(["--report-every", &every]);
    let placement = ["node-a", "node-b"];
    let plain = plain(&sized);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut job = cluster
        .job(MpiJob::new(2, "heat2d-plain", &with_progress), &placement)
        .start(dir.path(), "heat2d-plain");
    let started = Instant::now();
    while progress_lines(&job) < 3 {
        assert!(job.running(), "the job ended before it made progress");
        assert!(
            started.elapsed() < DEADLINE,
            "no progress in {DEADLINE:?}:\n{}",
            job.stderr_so_far()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The rate with the link up, over one second, to compare with the second it is down.
    let up_before = progress_lines(&job);
    std::thread::sleep(Duration::from_secs(1));
    let while_up = progress_lines(&job) - up_before;
    cluster.set_link("node-b", false).expect("link down");
    // What was under way when the link went down may still finish.
    std::thread::sleep(Duration::from_millis(300));
    let down_from = progress_lines(&job);
    std::thread::sleep(Duration::from_secs(2));
    let while_down = progress_lines(&job) - down_from;
    cluster.set_link("node-b", true).expect("link up");
    eprintln!(
        "progress lines: {while_up} in 1 s with the link up, {while_down} in 2 s with it down"
    );
    assert!(
        while_up >= 2,
        "too few progress lines with the link up ({while_up} in 1 s) to tell a stop"
    );
    assert_eq!(
        while_down, 0,
        "the job went on while node-b's link was down: its ranks met another way"
    );
    let finished = job.wait(DEADLINE);
    let report = finished.report();
    assert_eq!(
        report.checksum,
        plain.reference_checksum(),
        "checksum differs after the link came back\n--- stderr\n{}",
        finished.stderr
    );
}
