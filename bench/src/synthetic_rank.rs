//! `mpi-ios-bench synthetic-rank`: a process that stands in for one rank of an MPI job
//! before a node's pcmd, with no MPI (issue 42, item 1: what the real agents decide for a
//! synthetic load).
//!
//! It registers with the pcmd at `--socket` as rank 0 of a one-rank job under its own pid
//! (the agent's sensor reads that pid's CPU from `/proc`, so the process really computes),
//! then computes in iterations of a fixed amount of arithmetic and reports a profile each
//! `--report-period`, as a PCM rank does: iterations, wall, CPU and MPI time (none: it
//! exchanges nothing), the state it would store and how long it has been resident.
//!
//! A reconfiguration pcmd asks of it (an agent's decision to move it) is written to stdout
//! as one JSON line ([`SyntheticEvent`]) and answered as failed: the process cannot move,
//! and a request left unanswered would hold the agent until pcmd's deadline. It runs until
//! killed or until pcmd goes away.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result};
use clap::Args;
use pcm_proto::client::{Client, Error as ClientError};
use pcm_proto::{
    AppName, ClientKind, CollectiveTraffic, FromDaemon, HostName, JobId, Outcome, Rank,
    RankProfile, ToDaemon,
};
use serde::{Deserialize, Serialize};

/// `mpi-ios-bench synthetic-rank`.
#[derive(Debug, Args)]
pub struct SyntheticRankArgs {
    /// The node's pcmd socket.
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// The job id to register under.
    #[arg(long)]
    pub job: String,
    /// The host name to register on (the node's MPI host name).
    #[arg(long)]
    pub host: String,
    /// The state it says it would store, MiB (what a move would carry).
    #[arg(long, default_value_t = 8)]
    pub state_mib: u64,
    /// Seconds between profile reports (PCM's ranks report about once a second).
    #[arg(long, default_value_t = 1.0)]
    pub report_period: f64,
}

/// What the synthetic rank saw, one JSON line each on stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SyntheticEvent {
    /// pcmd accepted the registration.
    Registered {
        /// When, seconds since the Unix epoch.
        unix_time_s: f64,
    },
    /// pcmd asked for a reconfiguration: an agent decided to move the rank.
    ReconfigurationRequested {
        /// When, seconds since the Unix epoch.
        unix_time_s: f64,
        /// The hosts it was to move to.
        to_hosts: Vec<String>,
    },
}

/// Now, as seconds since the Unix epoch (the agents' decision times are such).
pub(crate) fn unix_now_s() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn emit(event: &SyntheticEvent) {
    if let Ok(line) = serde_json::to_string(event) {
        println!("{line}");
    }
}

/// About a millisecond of arithmetic at a reference core's speed: one iteration.
fn one_iteration(seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..1_000_000 {
        x = std::hint::black_box(x)
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
    }
    x
}

/// Runs the synthetic rank until pcmd goes away (an error then) or the process is killed.
pub fn run(args: SyntheticRankArgs) -> Result<()> {
    if !(args.report_period > 0.0 && args.report_period <= 60.0) {
        anyhow::bail!("--report-period must be above 0 and at most 60 seconds");
    }
    let job = JobId::new(&args.job).map_err(|e| anyhow::anyhow!("--job {:?}: {e}", args.job))?;
    let host =
        HostName::new(&args.host).map_err(|e| anyhow::anyhow!("--host {:?}: {e}", args.host))?;
    let app = AppName::new("synthetic-rank").map_err(|e| anyhow::anyhow!("{e}"))?;
    let wait = Duration::from_secs(10);
    let mut pcmd = Client::connect_as(&args.socket, ClientKind::Rank, wait)
        .with_context(|| format!("cannot reach pcmd at {}", args.socket.display()))?;
    let pid = std::process::id();
    pcmd.send(&ToDaemon::Register {
        job,
        app,
        rank: Rank(0),
        size: 1,
        host: host.clone(),
        pid,
        replacement: false,
        reconfigurations: 0,
    })?;
    match pcmd.recv(wait, "the registration")? {
        FromDaemon::Registered => {}
        other => anyhow::bail!("pcmd answered the registration with {other:?}"),
    }
    emit(&SyntheticEvent::Registered {
        unix_time_s: unix_now_s(),
    });
    let started = Instant::now();
    let cpu_at_start = crate::pool::cpu_s(pid).unwrap_or(0.0);
    let period = Duration::from_secs_f64(args.report_period);
    let mut iteration = 0u64;
    let mut next_report = started + period;
    loop {
        iteration += 1;
        one_iteration(iteration);
        if Instant::now() < next_report {
            continue;
        }
        next_report += period;
        let elapsed_us = started.elapsed().as_micros() as u64;
        let cpu_us =
            ((crate::pool::cpu_s(pid).unwrap_or(0.0) - cpu_at_start).max(0.0) * 1e6) as u64;
        pcmd.send(&ToDaemon::Profile(RankProfile {
            iteration,
            wall_us: elapsed_us,
            cpu_us,
            mpi_us: 0,
            state_bytes: args.state_mib << 20,
            rss_bytes: 0,
            resident_us: elapsed_us,
            traffic: Vec::new(),
            collectives: CollectiveTraffic::default(),
            malleable: None,
            home: Some(host.clone()),
            // Alone in its job, it is its own slowest rank.
            slowest_compute_us: elapsed_us,
            width_age_us: Some(elapsed_us),
        }))?;
        answer_requests(&mut pcmd)?;
    }
}

/// Reads what pcmd sent since the last report; reports and refuses each reconfiguration.
fn answer_requests(pcmd: &mut Client) -> Result<()> {
    loop {
        let message = match pcmd.recv(Duration::from_millis(1), "a request") {
            Ok(m) => m,
            Err(ClientError::TimedOut { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if let FromDaemon::ReconfigurationRequested { request, moves, .. } = message {
            emit(&SyntheticEvent::ReconfigurationRequested {
                unix_time_s: unix_now_s(),
                to_hosts: moves
                    .iter()
                    .filter_map(|m| m.to.as_ref().map(|h| h.to_string()))
                    .collect(),
            });
            pcmd.send(&ToDaemon::ReconfigurationFinished {
                request,
                outcome: Outcome::Failed {
                    reason: "a synthetic rank cannot move".to_owned(),
                },
            })?;
        }
    }
}
