//! MPI traffic profiling end to end: heat2d's traffic as pcmd reports it (`pcmd stats`)
//! must be exactly its halo pattern, before and after a migration, and `PCM_PROFILE=off`
//! must turn the counting off.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::time::{Duration, Instant};

use mpi_ios_tests::{mpi_lock, Group, MpiJob, Pcmd};
use pcm_proto::{NodeStats, RankStats};

const ROWS: &str = "240";
/// Columns of the grid: a halo row is `COLS * 8` bytes.
const COLS: u64 = 240;
/// Far more than the tests need (tens of seconds): each test reads the stats while the job
/// runs, and the job is killed when the test ends.
const ITERS: &str = "2000000";
/// Iteration at which `PCM_SCHEDULE` moves rank 1.
const MIGRATE_AT: u64 = 2000;
const WAIT: Duration = Duration::from_secs(40);
/// Keeps Open MPI's TCP transport on loopback: interfaces that come and go meanwhile (the
/// emulated hosts of other tests on a shared machine) otherwise make a replacement's
/// connect fail ("bind on local address ... failed").
const LOOPBACK_ONLY: (&str, &str) = ("OMPI_MCA_btl_tcp_if_include", "lo");

fn stats(pcmd: &Pcmd) -> NodeStats {
    let output = pcmd.cli(&["stats", "--json"]);
    assert!(
        output.status.success(),
        "pcmd stats failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Polls `pcmd stats` until `ready` accepts the answer (every 300 ms, at most [`WAIT`]).
fn stats_when(
    pcmd: &Pcmd,
    job: &Group,
    what: &str,
    ready: impl Fn(&NodeStats) -> bool,
) -> NodeStats {
    let deadline = Instant::now() + WAIT;
    loop {
        let stats = stats(pcmd);
        if ready(&stats) {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last stats: {stats:#?}\njob stderr:\n{}\npcmd log:\n{}",
            job.stderr_so_far(),
            pcmd.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn ranks(stats: &NodeStats) -> &[RankStats] {
    stats.jobs.first().map_or(&[], |j| j.ranks.as_slice())
}

/// Every rank of the 3-rank job talks to its neighbours only, one message each way per
/// iteration, each message one row of `COLS` doubles.
fn assert_halo_pattern(stats: &NodeStats) {
    let ranks = ranks(stats);
    assert_eq!(ranks.len(), 3, "{stats:#?}");
    for r in ranks {
        let p = &r.profile;
        let n = p.iteration;
        let expected_peers: Vec<u32> = [r.rank.0.checked_sub(1), Some(r.rank.0 + 1)]
            .into_iter()
            .flatten()
            .filter(|&peer| peer < 3)
            .collect();
        let peers: Vec<u32> = p.traffic.iter().map(|t| t.peer.0).collect();
        assert_eq!(peers, expected_peers, "rank {} talks to: {p:#?}", r.rank);
        for t in &p.traffic {
            let what = format!("rank {} with peer {} at iteration {n}", r.rank, t.peer);
            // Where the peer runs, as its own daemon entry says: what the agent's model
            // turns into the rank's communication partners.
            let peer_host = ranks.iter().find(|q| q.rank == t.peer).map(|q| &q.host);
            assert_eq!(t.host.as_ref(), peer_host, "host of the peer of {what}");
            assert_eq!(t.sent_messages, n, "messages sent by {what}");
            assert_eq!(t.received_messages, n, "messages received by {what}");
            assert_eq!(t.sent_bytes, n * COLS * 8, "bytes sent by {what}");
            assert_eq!(t.received_bytes, n * COLS * 8, "bytes received by {what}");
        }
    }
}

#[test]
fn given_heat2d_with_a_migration_then_the_traffic_matrix_is_exactly_the_halo_pattern() {
    let _lock = mpi_lock();
    let pcmd = Pcmd::start();
    let dir = tempfile::tempdir().unwrap();
    let job = MpiJob::new(
        3,
        "heat2d",
        &["--rows", ROWS, "--cols", "240", "--iters", ITERS],
    )
    .env("PCM_DAEMON", pcmd.daemon_env.clone())
    .env("PCM_SCHEDULE", format!("{MIGRATE_AT}:1"))
    .env(LOOPBACK_ONLY.0, LOOPBACK_ONLY.1)
    .start(dir.path(), "heat2d");

    // After the migration, with a full period of rates for every rank.
    let stats = stats_when(
        &pcmd,
        &job,
        "rank 1 replaced and every rank profiled",
        |s| {
            let ranks = ranks(s);
            ranks.len() == 3
                && ranks
                    .iter()
                    .all(|r| r.profile.iteration > MIGRATE_AT && r.iterations_per_second > 0.0)
                && ranks.iter().any(|r| r.rank.0 == 1 && r.replacement)
        },
    );
    assert_halo_pattern(&stats);

    // The replacement continues its predecessor's figures: its counts cover the iterations
    // before it existed, its wall time the whole rank's life, and it knows the state size.
    let rank1 = &ranks(&stats)[1];
    assert!(rank1.profile.iteration > MIGRATE_AT);
    assert!(
        rank1.profile.wall_us > rank1.profile.resident_us,
        "replacement's wall time should include its predecessor's: {:?}",
        rank1.profile
    );
    assert!(
        rank1.profile.state_bytes >= 80 * COLS * 8,
        "rank 1 stored its block of the grid: {:?}",
        rank1.profile
    );

    // The figures a node needs besides the traffic.
    assert_eq!(stats.period_s, 2.0);
    assert!(
        stats.node.cores > 0.0 && stats.node.memory_total > 0,
        "{stats:?}"
    );
    for r in ranks(&stats) {
        assert!(r.profile.rss_bytes > 0 && r.profile.cpu_us > 0, "{r:?}");
        assert!(
            r.profile.mpi_us > 0 && r.mpi_per_iteration_us > 0.0,
            "{r:?}"
        );
        assert!(
            r.wall_per_iteration_us >= r.mpi_per_iteration_us,
            "time in MPI per iteration exceeds wall time per iteration: {r:?}"
        );
        // The job's slowest compute, agreed at the status checks: at least about what
        // this rank computes itself (its own figure also counts the checks), within the
        // iteration.
        let own = r.wall_per_iteration_us - r.mpi_per_iteration_us;
        assert!(
            r.profile.slowest_compute_us > 0
                && r.slowest_compute_per_iteration_us >= 0.8 * own
                && r.slowest_compute_per_iteration_us <= 1.2 * r.wall_per_iteration_us,
            "slowest compute per iteration {:.0} us against own {own:.0} us: {r:?}",
            r.slowest_compute_per_iteration_us
        );
    }

    // Later reports still match exactly (and keep growing).
    let later = stats_when(&pcmd, &job, "newer reports", |s| {
        ranks(s).len() == 3
            && ranks(s)
                .iter()
                .zip(ranks(&stats))
                .all(|(now, before)| now.profile.iteration > before.profile.iteration)
    });
    assert_halo_pattern(&later);

    let table = pcmd.cli(&["stats"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{text}");
    assert!(
        text.contains("sent messages / bytes") && text.contains("(replacement)"),
        "{text}"
    );
}

#[test]
fn given_pcm_profile_off_then_no_profile_is_reported_and_a_bad_value_is_refused() {
    let _lock = mpi_lock();
    let pcmd = Pcmd::start();
    let dir = tempfile::tempdir().unwrap();
    let _job = MpiJob::new(
        2,
        "heat2d",
        &["--rows", ROWS, "--cols", "240", "--iters", ITERS],
    )
    .env("PCM_DAEMON", pcmd.daemon_env.clone())
    .env("PCM_PROFILE", "off")
    .env(LOOPBACK_ONLY.0, LOOPBACK_ONLY.1)
    .start(dir.path(), "heat2d");

    // Registered and running (the status shows progress), but no profile arrives.
    let deadline = Instant::now() + WAIT;
    loop {
        let status = pcmd.status();
        let running = status
            .jobs
            .first()
            .is_some_and(|j| j.ranks.len() == 2 && j.ranks.iter().all(|r| r.iteration > 0));
        if running {
            break;
        }
        assert!(Instant::now() < deadline, "job did not start: {status:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
    // Profiles would have been sent with the progress reports seen above and the next ones.
    std::thread::sleep(Duration::from_millis(1500));
    let stats = stats(&pcmd);
    assert_eq!(ranks(&stats).len(), 2, "{stats:#?}");
    for r in ranks(&stats) {
        assert_eq!(r.profile, pcm_proto::RankProfile::default(), "{r:#?}");
    }

    let refused = MpiJob::new(
        1,
        "heat2d",
        &["--rows", "16", "--cols", "16", "--iters", "10"],
    )
    .env("PCM_DAEMON", "none")
    .env("PCM_PROFILE", "sometimes")
    .run(WAIT);
    assert_ne!(refused.code, Some(0));
    assert!(
        refused.stderr.contains("PCM_PROFILE") && refused.stderr.contains("sometimes"),
        "{}",
        refused.stderr
    );
}
