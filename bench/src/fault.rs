//! The main job's fault act (`mpi-ios-bench adaptive --fault`): heat2d under `pcmrun` on the
//! emulated nodes, rank 0 on node-a and rank 1 on node-b, node-c a spare of the hostfile, a
//! checkpoint every second. Mid-run node-b is powered off (its link goes down, the launcher
//! can no longer reach it, everything on it is killed), and pcmrun brings the job back by
//! itself on node-a and node-c from the newest checkpoint. The act passes when pcmrun exits
//! with 0, left node-b out, and the result is bit for bit the plain run's.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use mpi_ios_tests::netns::Cluster;
use mpi_ios_tests::pcmrun_job::{PcmrunCommand, PcmrunJob};
use mpi_ios_tests::scenario::Scenario;
use pcm_proto::run::RunEvent;

/// What the fault act measured.
#[derive(Debug)]
pub struct FaultOutcome {
    /// The node powered off.
    pub lost: String,
    /// Seconds after pcmrun's start at which it was powered off.
    pub off_at: f64,
    /// pcmrun's exit status.
    pub code: Option<i32>,
    /// Its typed report (`--report`).
    pub report: serde_json::Value,
    /// heat2d's checksum, when it finished.
    pub checksum: Option<String>,
    /// Where the ranks ended, from heat2d's report.
    pub hosts: Vec<String>,
    /// Seconds from the power-off to the resumed job's first iteration (from the events).
    pub off_to_resumed: Option<f64>,
}

/// Runs the act on `cluster` (three nodes, nothing left running on them) with the
/// scenario's grid and iteration count; powers node-b off `fault_at` seconds after the
/// start, once a checkpoint is complete. Logs go to `logs`.
pub fn run(
    cluster: &Cluster,
    scenario: &Scenario,
    fault_at: f64,
    timeout: Duration,
    logs: &Path,
) -> Result<FaultOutcome> {
    let nodes = cluster.host_names();
    if nodes.len() < 3 {
        bail!("the fault act needs three nodes (it cannot run with --cooperating)");
    }
    let hostfile = cluster.hostfile_for(&[&nodes[0], &nodes[1]]);
    let dir = logs.join("fault");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut pcmrun = PcmrunCommand::new(&dir, 2);
    pcmrun
        .command()
        .envs(cluster.pcmrun_env(&hostfile))
        .args([
            "--progress",
            "0",
            "--checkpoint-interval",
            "1",
            "--retry-delay",
            "0.2",
        ])
        .args(cluster.pcmrun_args(&hostfile));
    let args: Vec<String> = [
        "--rows".to_owned(),
        scenario.rows.to_string(),
        "--cols".to_owned(),
        scenario.cols.to_string(),
        "--iters".to_owned(),
        scenario.iters.to_string(),
    ]
    .into();
    let started = Instant::now();
    let mut job = pcmrun.start("heat2d", &args, &dir, "pcmrun");
    let mut shown = 0;
    let read_events = |job: &PcmrunJob| -> Vec<(f64, RunEvent)> {
        let records = job.events().into_iter();
        records.map(|r| (r.seconds, r.event)).collect()
    };
    // Shown on this program's clock, as they are read (pcmrun's own clock starts a little
    // later; the figures below line the two up through the report's start time).
    let show = |list: &[(f64, RunEvent)], shown: &mut usize| {
        let t = started.elapsed().as_secs_f64();
        for (_, event) in &list[*shown..] {
            match event {
                RunEvent::Checkpointed { iteration } => {
                    println!("   {t:>6.1} s  checkpoint at iteration {iteration}")
                }
                RunEvent::Restarted { iteration } => println!(
                    "   {t:>6.1} s  >>> the job resumed from the checkpoint at iteration {iteration}"
                ),
                RunEvent::Started { rank, host, .. } => {
                    println!("   {t:>6.1} s  rank {rank} started on {host}")
                }
                _ => {}
            }
        }
        *shown = list.len();
    };
    loop {
        let list = read_events(&job);
        show(&list, &mut shown);
        let checkpointed = list
            .iter()
            .any(|(_, e)| matches!(e, RunEvent::Checkpointed { .. }));
        if checkpointed && started.elapsed().as_secs_f64() >= fault_at {
            break;
        }
        if !job.running() {
            bail!("pcmrun ended before the fault:\n{}", job.stderr_so_far());
        }
        if started.elapsed() > timeout {
            bail!("no checkpoint within {timeout:?}:\n{}", job.stderr_so_far());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cluster.power_off(&nodes[1]);
    let off_at = started.elapsed().as_secs_f64();
    let off_unix_s = unix_seconds();
    println!(
        "   {off_at:>6.1} s  >>> {} powered off (link down, unreachable, everything on it killed)",
        nodes[1]
    );
    let finished = job.wait(timeout);
    let list = read_events(&job);
    show(&list, &mut shown);
    for line in finished.stderr.lines().filter(|l| l.starts_with("pcmrun:")) {
        println!("   {line}");
    }
    let report = job
        .report()
        .map_err(|e| anyhow::anyhow!("pcmrun wrote no usable report: {e}"))?;
    // pcmrun's event times count from its start, which its report gives as Unix time.
    let origin = report["started_unix_s"].as_f64().unwrap_or(0.0);
    let off_to_resumed = list
        .iter()
        .map(|(t, e)| (origin + t - off_unix_s, e))
        .find(|(after, e)| *after > 0.0 && matches!(e, RunEvent::Restarted { .. }))
        .map(|(after, _)| after);
    let heat2d: Option<serde_json::Value> = finished
        .stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str(l).ok());
    let checksum = heat2d
        .as_ref()
        .and_then(|r| r["checksum"].as_str().map(str::to_owned));
    let hosts = heat2d
        .as_ref()
        .and_then(|r| r["hosts"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|h| h.as_str().map(str::to_owned))
        .collect();
    Ok(FaultOutcome {
        lost: nodes[1].clone(),
        off_at,
        code: finished.code,
        report,
        checksum,
        hosts,
        off_to_resumed,
    })
}

fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Prints the act's summary; returns whether it passed against `plain`, the plain run's
/// checksum.
pub fn summarize(outcome: &FaultOutcome, plain: &str) -> bool {
    let recovery = &outcome.report["recoveries"][0];
    let lost_hosts: Vec<&str> = recovery["hosts_lost"]
        .as_array()
        .map(|a| a.iter().filter_map(|h| h.as_str()).collect())
        .unwrap_or_default();
    println!(
        "fault act: {} powered off {:.1} s into the run; pcmrun exit status {}, {} launches, hosts left out {:?}, ranks ended on {}",
        outcome.lost,
        outcome.off_at,
        outcome.code.map_or("none (killed)".to_owned(), |c| c.to_string()),
        outcome.report["launches"],
        lost_hosts,
        outcome.hosts.join(" ")
    );
    match outcome.off_to_resumed {
        Some(s) => println!(
            "fault act: resumed from iteration {} {s:.1} s after the power-off ({} iterations computed again, at least)",
            recovery["resumed_from"], recovery["iterations_lost"]
        ),
        None => println!("fault act: the job never resumed"),
    }
    let ok = outcome.code == Some(0)
        && lost_hosts == [outcome.lost.as_str()]
        && !outcome.hosts.contains(&outcome.lost)
        && outcome.checksum.as_deref() == Some(plain);
    if ok {
        println!("fault act: RESULT: recovered by itself on the other nodes, checksum equal to the plain run's");
    } else {
        println!(
            "fault act: FAILED: checksum {:?} against the plain run's {plain}",
            outcome.checksum
        );
    }
    ok
}
