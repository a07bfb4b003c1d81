//! `pcmd resize` on real MPI jobs (docs/malleability.md, "Asking for a resize"): a running
//! 2-rank heat2d grows to 3 ranks by command, `pcmd status` then shows the three ranks of a
//! job of three, and the job ends with heat2d-plain's checksum for the same arguments (which
//! does not depend on the width). Refused ones, a width of 0 (pcmd refuses it) and a resize
//! of a job that is not malleable (the CG example refuses it), come back to the caller with
//! the reason, and the job runs on unchanged.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::time::Duration;

use mpi_ios_tests::{heat2d_args_for, mpi_lock, wait_until, MpiJob, Pcmd};

const DEADLINE: Duration = Duration::from_secs(150);
const WAIT: Duration = Duration::from_secs(30);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A job as one pcmd sees it: its id, its width, and its ranks here as (rank, iteration).
type JobView = (String, u32, Vec<(u32, u64)>);

/// The single job registered with `pcmd`.
fn job_view(pcmd: &Pcmd) -> Option<JobView> {
    let status = pcmd.status();
    let job = status.jobs.first()?;
    Some((
        job.job.to_string(),
        job.size,
        job.ranks.iter().map(|r| (r.rank.0, r.iteration)).collect(),
    ))
}

/// Waits until the job has `ranks` ranks, all registered here and past their first
/// iteration; returns its id.
fn wait_for_ranks(pcmd: &Pcmd, ranks: u32, what: &str) -> String {
    wait_until(WAIT, what, || {
        job_view(pcmd).is_some_and(|(_, size, here)| {
            size == ranks
                && here.len() == ranks as usize
                && here
                    .iter()
                    .enumerate()
                    .all(|(i, &(r, it))| r == i as u32 && it > 0)
        })
    });
    job_view(pcmd).unwrap().0
}

/// The job's least iteration reported here.
fn least_iteration(pcmd: &Pcmd) -> u64 {
    job_view(pcmd)
        .and_then(|(_, _, here)| here.iter().map(|&(_, it)| it).min())
        .unwrap_or(0)
}

#[test]
fn given_a_running_2_rank_heat2d_when_pcmd_resize_to_3_then_it_grows_and_the_checksum_is_plain() {
    let _lock = mpi_lock();
    // About 8 s at two ranks on this machine as loaded now, below the grid's fixed point:
    // the commands act within its first seconds (3-4 s here), and the job must still run
    // when the status is read after the resize. (15 s before: a quarter of a minute more
    // per run of this file, for nothing checked.)
    let (args, _) = heat2d_args_for(2, 240, 240, 8.0, WAIT);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let reference = MpiJob::new(2, "heat2d-plain", &args)
        .run(DEADLINE)
        .report()
        .reference_checksum()
        .to_owned();
    let pcmd = Pcmd::start();
    let dir = tempfile::tempdir().unwrap();
    let job = MpiJob::new(2, "heat2d", &args)
        .env("PCM_DAEMON", pcmd.daemon_env.clone())
        .start(dir.path(), "heat2d");
    let id = wait_for_ranks(&pcmd, 2, "2 ranks registered and running");

    // heat2d declares itself malleable (1 to its rows' ranks): its ranks' profiles say so,
    // and pcmd passes it on to the agents in its stats (issue 38).
    wait_until(WAIT, "heat2d's profiles to say it is malleable", || {
        pcmd.status()
            .jobs
            .first()
            .is_some_and(|j| j.malleable.is_some())
    });
    // The grid may have been sized up from 240 rows (see heat2d_args_for).
    let rows: u32 = args
        .iter()
        .skip_while(|&&a| a != "--rows")
        .nth(1)
        .and_then(|r| r.parse().ok())
        .unwrap();
    let limits = pcm_proto::Malleability::new(1, rows).unwrap();
    assert_eq!(pcmd.status().jobs[0].malleable, Some(limits));
    let declared = format!("malleable 1..={rows} (any width)");
    let stats = pcmd.cli(&["stats"]);
    let shown = text(&stats.stdout);
    assert!(stats.status.success(), "{}", text(&stats.stderr));
    assert!(
        shown.contains(&format!("2 ranks, 2 here  {declared}")),
        "{shown}"
    );

    // A width of 0: pcmd refuses it at once, naming the job; the job runs on.
    let refused = pcmd.cli(&["resize", "--job", &id, "--ranks", "0", "--wait"]);
    let err = text(&refused.stderr);
    assert!(!refused.status.success(), "{}", text(&refused.stdout));
    assert!(
        err.contains(&format!("job {id} cannot be resized to 0 ranks")),
        "{err}"
    );
    assert_eq!(pcmd.status().jobs[0].in_flight, None);

    let grown = pcmd.cli(&["resize", "--job", &id, "--ranks", "3", "--wait"]);
    let out = text(&grown.stdout);
    assert!(grown.status.success(), "{out}{}", text(&grown.stderr));
    assert!(
        out.contains("completed at iteration") && out.contains("rank 2 ->"),
        "{out}"
    );
    // The added process registers as rank 2 of 3; the ranks that stay tell their numbers.
    let same = wait_for_ranks(&pcmd, 3, "3 ranks of a job of 3 in pcmd's status");
    assert_eq!(same, id);
    let status = pcmd.cli(&["status"]);
    let shown = text(&status.stdout);
    assert!(status.status.success(), "{}", text(&status.stderr));
    assert!(
        shown.contains(&format!("3 ranks, 3 here  {declared}")),
        "{shown}"
    );
    assert!(shown.contains("migrations 1"), "{shown}");

    let finished = job.wait(DEADLINE);
    let report = finished.report();
    assert_eq!(report.checksum, reference, "{}", finished.stderr);
    assert_eq!(report.ranks, 3);
    assert_eq!(report.resizes, Some(1));
}

/// CG's arguments for 2 ranks and about `seconds` on this machine as loaded now, on a grid
/// large enough not to converge meanwhile: a probe of at least a second measures the rate.
fn cg_args_for(seconds: f64) -> Vec<String> {
    const N: &str = "2000";
    let mut probe = 20u64;
    loop {
        let report = MpiJob::new(2, "cg-plain", &[N, &probe.to_string()])
            .run(DEADLINE)
            .report();
        let rate = probe as f64 / report.seconds.max(1e-3);
        if report.seconds >= 1.0 {
            let iters = ((rate * seconds) as u64).max(probe);
            eprintln!("cg {N} on 2 ranks: {rate:.0} it/s; {iters} iterations for {seconds} s");
            return vec![N.to_owned(), iters.to_string()];
        }
        probe = ((rate * 2.0) as u64).max(probe * 2);
    }
}

#[test]
fn given_a_job_that_is_not_malleable_when_pcmd_resize_then_the_reason_comes_back_and_it_runs_on() {
    let _lock = mpi_lock();
    // The refusals and the progress after them take a second or two.
    let args = cg_args_for(6.0);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let plain = MpiJob::new(2, "cg-plain", &args).run(DEADLINE);
    let residual =
        serde_json::from_str::<serde_json::Value>(plain.stdout.lines().last().unwrap_or_default())
            .ok()
            .and_then(|r| r["residual"].as_f64())
            .unwrap_or(0.0);
    // Far from convergence, where the rate stays what the probe measured (a converged CG
    // computes on subnormal numbers, many times slower).
    assert!(residual > 1e-6, "cg-plain converged: {}", plain.stdout);
    let plain = plain.report();

    let pcmd = Pcmd::start();
    let dir = tempfile::tempdir().unwrap();
    let job = MpiJob::new(2, "cg", &args)
        .env("PCM_DAEMON", pcmd.daemon_env.clone())
        .start(dir.path(), "cg");
    let id = wait_for_ranks(&pcmd, 2, "2 ranks of cg registered and running");

    let refused = pcmd.cli(&["resize", "--ranks", "0"]);
    assert!(!refused.status.success());
    let err = text(&refused.stderr);
    assert!(
        err.contains(&format!("job {id} cannot be resized to 0 ranks")),
        "{err}"
    );

    let refused = pcmd.cli(&["resize", "--job", &id, "--ranks", "3", "--wait"]);
    let out = text(&refused.stdout);
    let err = text(&refused.stderr);
    assert!(!refused.status.success(), "{out}");
    assert!(
        out.contains("failed: the job is not malleable"),
        "{out}{err}"
    );
    assert!(err.contains("was not carried out"), "{err}");

    // It runs on at its width, and further requests are welcome.
    let before = least_iteration(&pcmd);
    wait_until(WAIT, "cg to go on computing after the refusal", || {
        least_iteration(&pcmd) > before
    });
    let (_, size, here) = job_view(&pcmd).unwrap();
    assert_eq!((size, here.len()), (2, 2));
    let status = pcmd.status();
    assert_eq!((status.jobs[0].in_flight, status.jobs[0].failed), (None, 1));
    // CG never declared itself malleable: its ranks' profiles (which came, with the
    // iterations) say nothing of it.
    assert_eq!(status.jobs[0].malleable, None);

    let finished = job.wait(DEADLINE);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    let report = finished.report();
    assert_eq!(report.checksum, plain.checksum);
    assert_eq!((report.ranks, report.migrations), (2, Some(0)));
}
