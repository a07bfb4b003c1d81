//! `mpi-ios-bench recovery`: how long `pcmrun` takes to bring a job back after a rank is
//! killed, and how much work is lost, for several checkpoint intervals and state sizes.
//!
//! Per interval and state size: heat2d on 2 ranks under `pcmrun` (its own pcmd, checkpoints
//! every interval), sized to run well past the kill. Half an interval after the first
//! checkpoint is complete, rank 1 is killed with SIGKILL. From pcmrun's typed event stream
//! (`--events`) and report (`--report`):
//! - **detect**: kill to the end of the failed launch (the runtime tearing the job down);
//! - **relaunch**: the end of the failed launch to the `restarted` event (retry delay 0.1 s,
//!   start of the new launch, restart agreement, the state loaded from the node's pcmd);
//! - **kill to resumed**: the two together;
//! - **work lost**: kill time minus the time of the newest checkpoint before it (seconds of
//!   computation done again).
//!
//! Targets (issue 11): resumed within 5 s plus the time to load the state, at most one
//! interval of work lost.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pcm_proto::run::RunEvent;
use pcmrun::EventRecord;

use crate::{append_markdown, load_average, try_bin, try_program, Group, MpiJob, Table};

/// Options of `mpi-ios-bench recovery`.
#[derive(Debug, Args)]
pub struct RecoveryArgs {
    /// Checkpoint intervals in seconds, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "2,10,60")]
    intervals: Vec<f64>,
    /// State per rank in MiB (heat2d's grid), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,64,512")]
    states: Vec<u64>,
    /// Short run: interval 1 s, 1 MiB per rank.
    #[arg(long)]
    quick: bool,
    /// Also append the table, as markdown, to this file.
    #[arg(long, value_name = "PATH")]
    markdown: Option<std::path::PathBuf>,
}

/// What one measured recovery gave.
struct Measured {
    detect_s: f64,
    relaunch_s: f64,
    lost_s: f64,
    resumed_from: u64,
}

/// heat2d's grid side for `mib` MiB of state per rank on 2 ranks (f64 cells), even.
fn side_for(mib: u64) -> u64 {
    let cells = (mib * (1 << 20) / 8 * 2) as f64;
    ((cells.sqrt() as u64) / 2 * 2).max(16)
}

/// Iterations per second of heat2d-plain on 2 ranks for `side`, over at least 0.5 s.
fn rate(plain: &Path, side: u64) -> Result<f64> {
    let mut iters = 10u64;
    loop {
        let args: Vec<String> = [
            "--rows".to_owned(),
            side.to_string(),
            "--cols".to_owned(),
            side.to_string(),
            "--iters".to_owned(),
            iters.to_string(),
        ]
        .to_vec();
        let output = MpiJob::of(2, plain, &args)
            .run_within(Duration::from_secs(600))?
            .check("heat2d-plain")?;
        let report: serde_json::Value =
            serde_json::from_str(output.stdout.lines().last().unwrap_or_default())
                .context("heat2d-plain printed no report")?;
        let seconds = report["seconds"].as_f64().unwrap_or(0.0);
        if seconds >= 0.5 {
            return Ok(iters as f64 / seconds);
        }
        iters *= 4;
    }
}

fn events(path: &Path) -> Vec<EventRecord> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits until an event of `launch` that `wanted` accepts arrives; returns it.
fn wait_for(
    path: &Path,
    group: &Group,
    launch: u32,
    timeout: Duration,
    what: &str,
    wanted: impl Fn(&RunEvent) -> bool,
) -> Result<EventRecord> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(r) = events(path)
            .into_iter()
            .find(|r| r.launch == launch && wanted(&r.event))
        {
            return Ok(r);
        }
        if Instant::now() > deadline {
            bail!("no {what} within {timeout:?}:\n{}", group.stderr_so_far());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn measure(interval: f64, rate_side: (f64, u64)) -> Result<Measured> {
    let (rate, side) = rate_side;
    let dir = tempfile::Builder::new()
        .prefix("mpi-ios-bench-recovery")
        .tempdir()?;
    let events_path = dir.path().join("events.jsonl");
    let report_path = dir.path().join("report.json");
    let iters = (rate * (3.0 * interval + 20.0)) as u64;
    let mut command = Command::new(try_bin("pcmrun")?);
    command
        .env_remove("PCM_DAEMON")
        .env_remove("PCM_CHECKPOINT_INTERVAL")
        .args([
            "-np",
            "2",
            "--daemon",
            "start",
            "--progress",
            "0",
            "--retry-delay",
            "0.1",
        ])
        .arg("--checkpoint-interval")
        .arg(interval.to_string())
        .arg("--checkpoint-dir")
        .arg(dir.path().join("checkpoints"))
        .arg("--events")
        .arg(&events_path)
        .arg("--report")
        .arg(&report_path)
        .arg(try_program("heat2d")?)
        .args(["--rows", &side.to_string(), "--cols", &side.to_string()])
        .args(["--iters", &iters.to_string()]);
    let group = Group::spawn_in_temp(command, "pcmrun")?;
    let patience = Duration::from_secs_f64(interval * 2.0 + 120.0);
    let victim = wait_for(
        &events_path,
        &group,
        1,
        patience,
        "start of rank 1",
        |e| matches!(e, RunEvent::Started { rank, .. } if rank.0 == 1),
    )?;
    let RunEvent::Started { pid, .. } = victim.event else {
        bail!("not a start event");
    };
    wait_for(&events_path, &group, 1, patience, "first checkpoint", |e| {
        matches!(e, RunEvent::Checkpointed { .. })
    })?;
    std::thread::sleep(Duration::from_secs_f64(interval / 2.0));
    let pid = i32::try_from(pid).context("pid out of range")?;
    kill(Pid::from_raw(pid), Signal::SIGKILL).context("killing rank 1")?;
    let killed_unix_s = unix_now();
    let resumed = wait_for(&events_path, &group, 2, patience, "restart", |e| {
        matches!(e, RunEvent::Restarted { .. })
    })?;
    let RunEvent::Restarted { iteration } = resumed.event else {
        bail!("not a restart event");
    };
    // Enough: stop the job (pcmrun writes its report on the way out).
    kill(Pid::from_raw(i32::try_from(group.pid())?), Signal::SIGINT)?;
    let output = group.wait_within(Duration::from_secs(60))?;
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&report_path).context("pcmrun wrote no report")?,
    )?;
    // pcmrun's times count from its start; the report says when that was.
    let killed_at = killed_unix_s - report["started_unix_s"].as_f64().unwrap_or(f64::NAN);
    let failed_at = report["recoveries"][0]["failed_at_s"]
        .as_f64()
        .with_context(|| format!("no recovery in the report: {report}\n{}", output.stderr))?;
    let newest_checkpoint = events(&events_path)
        .into_iter()
        .filter(|r| r.launch == 1 && matches!(r.event, RunEvent::Checkpointed { .. }))
        .map(|r| r.seconds)
        .filter(|&s| s <= killed_at)
        .fold(f64::NEG_INFINITY, f64::max);
    Ok(Measured {
        detect_s: failed_at - killed_at,
        relaunch_s: resumed.seconds - failed_at,
        lost_s: killed_at - newest_checkpoint,
        resumed_from: iteration,
    })
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Runs the benchmark.
pub fn run(mut args: RecoveryArgs) -> Result<()> {
    if args.quick {
        args.intervals = vec![1.0];
        args.states = vec![1];
    }
    let plain = try_program("heat2d-plain")?;
    let load_before = load_average();
    let mut table = Table::new(&[
        "interval s",
        "state MiB/rank",
        "detect s",
        "relaunch s",
        "kill to resumed s",
        "work lost s",
        "resumed at",
        "lost <= interval",
    ]);
    for &mib in &args.states {
        let side = side_for(mib);
        let rate = rate(&plain, side)?;
        eprintln!("recovery: {mib} MiB per rank = {side}x{side} grid, {rate:.0} it/s");
        for &interval in &args.intervals {
            let m = measure(interval, (rate, side))
                .with_context(|| format!("interval {interval} s, {mib} MiB per rank"))?;
            table.push(vec![
                format!("{interval}"),
                mib.to_string(),
                format!("{:.2}", m.detect_s),
                format!("{:.2}", m.relaunch_s),
                format!("{:.2}", m.detect_s + m.relaunch_s),
                format!("{:.2}", m.lost_s),
                m.resumed_from.to_string(),
                if m.lost_s <= interval { "yes" } else { "NO" }.to_owned(),
            ]);
        }
    }
    print!("{}", table.to_text());
    let notes = vec![format!(
        "load average before: {load_before}, after: {}. Rank 1 killed half an interval after the first complete checkpoint; detect = kill to the end of the failed launch, relaunch = that end to the restarted event (retry delay 0.1 s, state loaded from the node's pcmd).",
        load_average()
    )];
    for note in &notes {
        println!("{note}");
    }
    if let Some(path) = &args.markdown {
        append_markdown(
            path,
            "Recovery after a killed rank (pcmrun)",
            &table,
            &notes,
        )?;
    }
    Ok(())
}
