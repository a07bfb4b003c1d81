//! Command-line options of the `pcmd` binary and the text it prints.
//!
//! The binary (`src/main.rs`) only parses these and calls the library.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use pcm_proto::{DaemonStatus, HostName, JobId, Move, NodeStats, Outcome, Rank, RequestId, Resize};

/// Default of `pcmd migrate --timeout`, in seconds: a little longer than the daemon's own
/// default deadline, so the daemon's answer normally arrives first.
pub const DEFAULT_MIGRATE_TIMEOUT_S: f64 = 150.0;

/// Errors of the command-line layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `gethostname` failed.
    #[error("cannot read the host name: {0}")]
    HostName(#[source] nix::Error),
    /// The host name is not usable as a [`HostName`].
    #[error("host name {0:?} is not usable: {1}")]
    BadHostName(String, String),
    /// `--to` given neither once nor once per `--rank`.
    #[error(
        "give --to once for all ranks or once per --rank (got {ranks} --rank and {targets} --to)"
    )]
    TargetCount {
        /// Number of `--rank`.
        ranks: usize,
        /// Number of `--to`.
        targets: usize,
    },
    /// A duration flag is not a positive number of seconds.
    #[error("--{flag} must be a positive number of seconds, got {value}")]
    BadDuration {
        /// The flag.
        flag: &'static str,
        /// Its value.
        value: f64,
    },
}

/// pcmd: the per-node daemon of MPI/IOS, which registers the ranks of PCM-enabled MPI jobs
/// and relays migration and resize requests to them, and its command-line controller.
#[derive(Debug, Parser)]
#[command(name = "pcmd", version)]
pub struct Cli {
    /// Socket of the daemon. Default: $PCM_DAEMON ("{host}" replaced by the host name), else
    /// $XDG_RUNTIME_DIR/pcmd/HOST.sock, else /tmp/pcmd-UID/HOST.sock.
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// This node's name as the MPI runtime and the agents know it (default: the host name).
    /// It is the host pcmd reports, and it names the default socket and checkpoint
    /// directory, so that several emulated nodes on one machine keep apart.
    #[arg(long, global = true, value_name = "NAME")]
    pub host: Option<HostName>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The node's name: `--host`, else the machine's host name.
    pub fn host(&self) -> Result<HostName, Error> {
        match &self.host {
            Some(host) => Ok(host.clone()),
            None => local_host(),
        }
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon of this node (in the foreground; stop it with SIGINT or SIGTERM).
    Serve(ServeArgs),
    /// Show the jobs and ranks registered with this node's daemon.
    Status(StatusArgs),
    /// Ask the ranks of a job on this node to move.
    Migrate(MigrateArgs),
    /// Ask a malleable job with ranks on this node to grow or shrink to another number of
    /// ranks.
    #[command(long_about = RESIZE_ABOUT)]
    Resize(ResizeArgs),
    /// Show the profile of this node's ranks (times per iteration, memory, traffic matrix)
    /// and the node's load, over the daemon's last stats period.
    Stats(StatsArgs),
}

/// Options of `pcmd stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Print the stats as JSON (the `NodeStats` wire type) instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Options of `pcmd serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Seconds a request may wait for the job to start it. Past it, the ranks are asked to
    /// withdraw it; it stays in flight until one withdraws it (a waiting `pcmd migrate` is
    /// told it was cancelled) or the job reports its end (a stopped rank that resumes may
    /// still carry it out; the outcome is then reported and counted as such).
    #[arg(long, value_name = "SECS", default_value_t = 120.0)]
    pub request_timeout: f64,
    /// Stop (as on SIGTERM) when standard input reaches its end: for a pcmd that a launcher
    /// starts on a remote host for one job, whose standard input is the launcher's
    /// connection, so that it ends with the launcher (ssh gives a remote command no other
    /// sign that its caller is gone, even one killed with SIGKILL).
    #[arg(long)]
    pub until_stdin_closes: bool,
    /// Seconds per stats period: how often the node's load is sampled and the ranks'
    /// per-iteration figures are recomputed for `pcmd stats`.
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    pub stats_period: f64,
    /// Seconds between two sweeps of /dev/shm for the shared memory of MPI launches whose
    /// processes were killed (MPICH's `mpich_shm_*` segments of this user that no process
    /// maps or holds open, at least that old); 0 = no sweeps.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub shm_sweep_every: f64,
    /// The cgroup that caps this node's work, when pcmd runs beside it rather than in it
    /// (its path as /proc/PID/cgroup shows it for a rank, e.g. /jobs.slice/node): `pcmd
    /// stats` then reports that cgroup's cap and load. The IOS agent passes its own
    /// --node-cgroup on. Default: the cgroup that caps pcmd itself, else the whole machine.
    #[arg(long, value_name = "PATH", env = node_sensor::NODE_CGROUP_ENV)]
    pub node_cgroup: Option<node_sensor::NodeCgroupPath>,
    /// Checkpoint storage and the buddy link.
    #[command(flatten)]
    pub checkpoint: crate::checkpoint::ServeArgs,
}

impl ServeArgs {
    /// `--request-timeout` as a duration.
    pub fn request_timeout(&self) -> Result<Duration, Error> {
        seconds("request-timeout", self.request_timeout)
    }

    /// `--shm-sweep-every` as a sweep policy, or `None` for no sweeps.
    pub fn shm_sweep(&self) -> Result<Option<crate::shm_sweep::SweepPolicy>, Error> {
        if self.shm_sweep_every == 0.0 {
            return Ok(None);
        }
        let every = seconds("shm-sweep-every", self.shm_sweep_every)?;
        Ok(Some(crate::shm_sweep::SweepPolicy::every(every)))
    }

    /// `--stats-period` as a duration.
    pub fn stats_period(&self) -> Result<Duration, Error> {
        seconds("stats-period", self.stats_period)
    }
}

/// Options of `pcmd status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print the daemon's status as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Options of `pcmd migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Rank to move (repeat for several ranks, moved in one reconfiguration).
    #[arg(long = "rank", value_name = "RANK", required = true)]
    pub ranks: Vec<u32>,
    /// Host to move to: once for all ranks, or once per --rank in the same order. Without
    /// it the rank goes to the job's allocated host running the fewest of its processes,
    /// not the one it leaves (on a one-host job, where the MPI runtime places it).
    #[arg(long = "to", value_name = "HOST")]
    pub to: Vec<HostName>,
    /// Job to act on; may be left out when exactly one job runs on this node.
    #[arg(long, value_name = "JOB")]
    pub job: Option<JobId>,
    /// Return once the request is accepted instead of waiting for the outcome.
    #[arg(long)]
    pub no_wait: bool,
    /// Seconds to wait for the outcome.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_MIGRATE_TIMEOUT_S)]
    pub timeout: f64,
}

/// `pcmd resize --help`.
const RESIZE_ABOUT: &str = "\
Ask a malleable job with ranks on this node to grow or shrink to --ranks M ranks at its next \
status check (docs/malleability.md).

Growing, new processes are spawned (on the --to hosts, in order and repeated as needed; \
without --to, on the job's allocated hosts running the fewest of its processes) and take the ranks N..M-1. Shrinking, the \
ranks on the --to hosts leave (those hosts are given back; without --to, the highest ranks \
leave), and the ranks that stay are renumbered 0..M-1 in their order. The job's rows are \
redistributed over the new width; its result is the one of a run at one width.

The request goes to every rank of the job on this node, like `pcmd migrate`'s: the same \
deadline (pcmd serve --request-timeout), one request in flight per job, and a request made \
before another reconfiguration that resized the job is refused as superseded. pcmd refuses \
a width of 0 at once; the job refuses, with the reason, a width outside the limits it \
declared or against its rule, any resize of a job not declared malleable, and a shrink that \
cannot give back the hosts named, and runs on unchanged. Exit status 0 when the job resized (or, with --no-wait, \
when the request was accepted), 1 otherwise.

Examples:
  pcmd resize --job heat2d-1f2e --ranks 4              # grow or shrink to 4 ranks
  pcmd resize --ranks 6 --to node-c --to node-d        # grow, new ranks on node-c and node-d
  pcmd resize --ranks 2 --to node-b                    # shrink, giving node-b back";

/// Options of `pcmd resize`.
#[derive(Debug, Args)]
pub struct ResizeArgs {
    /// The job's number of ranks after the resize.
    #[arg(long, value_name = "M", required = true)]
    pub ranks: u32,
    /// Growing: a host for the added ranks (repeat for several; used in order, repeated as
    /// needed). Shrinking: a host to give back (its ranks leave). Without it added ranks go
    /// to the allocated hosts running the fewest of the job's processes, and shrinking, the
    /// highest ranks leave.
    #[arg(long = "to", value_name = "HOST")]
    pub to: Vec<HostName>,
    /// Job to act on; may be left out when exactly one job runs on this node.
    #[arg(long, value_name = "JOB")]
    pub job: Option<JobId>,
    /// Wait for the outcome (the default).
    #[arg(long, conflicts_with = "no_wait")]
    pub wait: bool,
    /// Return once the request is accepted instead of waiting for the outcome.
    #[arg(long)]
    pub no_wait: bool,
    /// Seconds to wait for the outcome.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_MIGRATE_TIMEOUT_S)]
    pub timeout: f64,
}

impl ResizeArgs {
    /// The resize the flags describe.
    pub fn resize(&self) -> Resize {
        Resize {
            ranks: self.ranks,
            hosts: self.to.clone(),
        }
    }

    /// `--timeout` as a duration.
    pub fn timeout(&self) -> Result<Duration, Error> {
        seconds("timeout", self.timeout)
    }
}

impl MigrateArgs {
    /// The moves the flags describe.
    pub fn moves(&self) -> Result<Vec<Move>, Error> {
        let target = |i: usize| match self.to.len() {
            0 => Ok(None),
            1 => Ok(Some(self.to[0].clone())),
            n if n == self.ranks.len() => Ok(Some(self.to[i].clone())),
            _ => Err(Error::TargetCount {
                ranks: self.ranks.len(),
                targets: self.to.len(),
            }),
        };
        self.ranks
            .iter()
            .enumerate()
            .map(|(i, rank)| {
                Ok(Move {
                    rank: Rank(*rank),
                    to: target(i)?,
                })
            })
            .collect()
    }

    /// `--timeout` as a duration.
    pub fn timeout(&self) -> Result<Duration, Error> {
        seconds("timeout", self.timeout)
    }
}

fn seconds(flag: &'static str, value: f64) -> Result<Duration, Error> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or(Error::BadDuration { flag, value })
}

/// This node's host name, as `gethostname` reports it.
pub fn local_host() -> Result<HostName, Error> {
    let name = nix::unistd::gethostname().map_err(Error::HostName)?;
    let name = name.to_string_lossy().into_owned();
    HostName::new(name.clone()).map_err(|e| Error::BadHostName(name, e.to_string()))
}

fn duration(secs: f64) -> String {
    let secs = secs.max(0.0) as u64;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The status as a human-readable table.
pub fn format_status(status: &DaemonStatus) -> String {
    let mut out = format!(
        "pcmd on {} (pid {}, up {})\n",
        status.host,
        status.pid,
        duration(status.uptime_s)
    );
    if status.jobs.is_empty() {
        out.push_str("no jobs registered\n");
        return out;
    }
    for job in &status.jobs {
        let in_flight = job.in_flight.map_or_else(
            || "none".to_owned(),
            |r| {
                if job.cancelling {
                    format!("{r} (missed its deadline, being withdrawn)")
                } else {
                    r.to_string()
                }
            },
        );
        let _ = writeln!(
            out,
            "\njob {}  app {}  {} ranks, {} here{}  migrations {}  cancelled {}  failed {}  in flight: {}",
            job.job,
            job.app,
            job.size,
            job.ranks.len(),
            malleable_note(job.malleable.as_ref()),
            job.migrations,
            job.cancelled,
            job.failed,
            in_flight
        );
        let host_width = job
            .ranks
            .iter()
            .map(|r| r.host.as_str().len())
            .max()
            .unwrap_or(4)
            .max(4);
        let _ = writeln!(
            out,
            "  {:>5}  {:<host_width$}  {:>8}  {:>10}  {:>10}",
            "RANK", "HOST", "PID", "ITERATION", "IT/S"
        );
        for r in &job.ranks {
            let rate = if r.stalled {
                "stalled".to_owned()
            } else {
                format!("{:.1}", r.iterations_per_second)
            };
            let mut notes = String::new();
            if r.stalled {
                let _ = write!(notes, "  (no report for {})", duration(r.silent_s));
            }
            if r.replacement {
                notes.push_str("  (replacement)");
            }
            let _ = writeln!(
                out,
                "  {:>5}  {:<host_width$}  {:>8}  {:>10}  {:>10}{}",
                r.rank.0,
                r.host.as_str(),
                r.pid,
                r.iteration,
                rate,
                notes
            );
        }
    }
    out
}

/// `  malleable 1..=256 (any width)` for a job that declared its resize limits, nothing for
/// one that did not (most jobs: the line stays as it was).
fn malleable_note(limits: Option<&pcm_proto::Malleability>) -> String {
    limits.map_or_else(String::new, |l| format!("  malleable {l}"))
}

fn ms(us: u64) -> String {
    format!("{:.1} ms", us as f64 / 1000.0)
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The stats as human-readable tables: the node's load, then per job one line per rank and
/// the traffic matrix (messages and bytes each rank here sent to each peer).
pub fn format_stats(stats: &NodeStats) -> String {
    let load = &stats.node;
    let mut out = format!(
        "pcmd on {}: figures over the last {:.1} s period\nnode: {:.2} cores, demand {:.2}, {:.2} idle; memory {} available of {}\n",
        stats.host,
        stats.period_s,
        load.cores,
        load.cpu_load,
        load.cpu_available,
        bytes(load.memory_available),
        bytes(load.memory_total),
    );
    if stats.jobs.is_empty() {
        out.push_str("no jobs registered\n");
        return out;
    }
    let us = |x: f64| {
        if x < 1000.0 {
            format!("{x:.1} us")
        } else {
            format!("{:.2} ms", x / 1000.0)
        }
    };
    for job in &stats.jobs {
        let _ = writeln!(
            out,
            "\njob {}  app {}  {} ranks, {} here{}",
            job.job,
            job.app,
            job.size,
            job.ranks.len(),
            malleable_note(job.malleable.as_ref())
        );
        let _ = writeln!(
            out,
            "  {:>5}  {:>8}  {:>10}  {:>8}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>12}",
            "RANK",
            "PID",
            "ITERATION",
            "IT/S",
            "WALL/IT",
            "CPU/IT",
            "MPI/IT",
            "RSS",
            "STATE",
            "COLLECTIVES"
        );
        for r in &job.ranks {
            let p = &r.profile;
            let rate = if r.stalled {
                "stalled".to_owned()
            } else {
                format!("{:.1}", r.iterations_per_second)
            };
            let _ = writeln!(
                out,
                "  {:>5}  {:>8}  {:>10}  {:>8}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>12}{}",
                r.rank.0,
                r.pid,
                p.iteration,
                rate,
                us(r.wall_per_iteration_us),
                us(r.cpu_per_iteration_us),
                us(r.mpi_per_iteration_us),
                bytes(p.rss_bytes),
                bytes(p.state_bytes),
                p.collectives.calls,
                if r.replacement { "  (replacement)" } else { "" }
            );
        }
        let mut peers: Vec<u32> = job
            .ranks
            .iter()
            .flat_map(|r| r.profile.traffic.iter().map(|t| t.peer.0))
            .collect();
        peers.sort_unstable();
        peers.dedup();
        if peers.is_empty() {
            out.push_str("  no point-to-point traffic reported\n");
            continue;
        }
        out.push_str("  sent messages / bytes, from rank (rows) to rank (columns):\n");
        let cell = |r: &pcm_proto::RankStats, peer: u32| {
            r.profile
                .traffic
                .iter()
                .find(|t| t.peer.0 == peer && t.sent_messages > 0)
                .map_or_else(
                    || "-".to_owned(),
                    |t| format!("{} / {}", t.sent_messages, bytes(t.sent_bytes)),
                )
        };
        let width = job
            .ranks
            .iter()
            .flat_map(|r| peers.iter().map(move |&p| cell(r, p).len()))
            .max()
            .unwrap_or(1)
            .max(6);
        let _ = write!(out, "  {:>5}", "");
        for peer in &peers {
            let _ = write!(out, "  {peer:>width$}");
        }
        out.push('\n');
        for r in &job.ranks {
            let _ = write!(out, "  {:>5}", r.rank.0);
            for &peer in &peers {
                let _ = write!(out, "  {:>width$}", cell(r, peer));
            }
            out.push('\n');
        }
        // Where the peers run, as the ranks last named them (the agents' communication
        // partners).
        let hosts: BTreeMap<u32, &str> = job
            .ranks
            .iter()
            .flat_map(|r| r.profile.traffic.iter())
            .filter_map(|t| Some((t.peer.0, t.host.as_ref()?.as_str())))
            .collect();
        if !hosts.is_empty() {
            let listed: Vec<String> = hosts
                .iter()
                .map(|(rank, host)| format!("{rank} on {host}"))
                .collect();
            let _ = writeln!(out, "  peers run on: {}", listed.join(", "));
        }
    }
    out
}

/// The outcome of a migration as printed by `pcmd migrate`.
pub fn format_outcome(request: RequestId, outcome: &Outcome) -> String {
    format_outcome_of("migration", request, outcome)
}

/// The outcome of a request as printed by `pcmd migrate` (`what` = "migration") or `pcmd
/// resize` ("resize").
pub fn format_outcome_of(what: &str, request: RequestId, outcome: &Outcome) -> String {
    match outcome {
        Outcome::Completed {
            iteration,
            timings,
            placed,
        } => {
            let mut out = format!("{what} {request} completed at iteration {iteration}\n");
            for (rank, host) in placed {
                let _ = writeln!(out, "  rank {rank} -> {host}");
            }
            let total = timings.agree_us
                + timings.spawn_us
                + timings.merge_split_us
                + timings.state_transfer_us;
            let _ = writeln!(
                out,
                "  agree {}, spawn {}, merge/split {}, state transfer {} ({}); total {}",
                ms(timings.agree_us),
                ms(timings.spawn_us),
                ms(timings.merge_split_us),
                ms(timings.state_transfer_us),
                bytes(timings.state_bytes),
                ms(total)
            );
            out
        }
        Outcome::Failed { reason } => format!("{what} {request} failed: {reason}\n"),
        Outcome::Cancelled { reason } => format!("{what} {request} cancelled: {reason}\n"),
        Outcome::Superseded { by, moves, resize } => format!(
            "{what} {request} not carried out: {} ({}) ran first and {}, so nothing of this request was done\n",
            by.map_or_else(|| "a scripted move (PCM_SCHEDULE)".to_owned(), |r| format!("request {r}")),
            pcm_proto::describe_request(moves, resize.as_ref()),
            if resize.is_some() {
                "resized the job, which renumbers its ranks"
            } else {
                "moved a rank of this request"
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pcm_proto::{AppName, JobStatus, PhaseTimings, RankStatus};

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("pcmd").chain(args.iter().copied())).unwrap()
    }

    /// clap checks a command's definition only with debug assertions, at the first parse
    /// (the workspace turns them on for clap in release builds too); a debug `pcmd`
    /// panicked at start (two argument groups named `ServeArgs`). Checked here in every
    /// build.
    #[test]
    fn the_command_line_definition_is_valid() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    fn migrate_args(args: &[&str]) -> MigrateArgs {
        match parse(args).command {
            Command::Migrate(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn given_one_to_then_it_applies_to_all_ranks() {
        let m = migrate_args(&["migrate", "--rank", "1", "--rank", "2", "--to", "node-b"]);
        let moves = m.moves().unwrap();
        assert_eq!(moves.len(), 2);
        assert!(moves
            .iter()
            .all(|m| m.to.as_ref().unwrap().as_str() == "node-b"));
        assert!(!m.no_wait);
    }

    #[test]
    fn given_to_per_rank_then_paired_in_order_and_mismatch_is_an_error() {
        let m = migrate_args(&[
            "migrate", "--rank", "1", "--to", "b", "--rank", "2", "--to", "c",
        ]);
        let moves = m.moves().unwrap();
        assert_eq!(moves[1].to.as_ref().unwrap().as_str(), "c");
        let m = migrate_args(&[
            "migrate", "--rank", "1", "--rank", "2", "--rank", "3", "--to", "b", "--to", "c",
        ]);
        assert!(m
            .moves()
            .unwrap_err()
            .to_string()
            .contains("3 --rank and 2 --to"));
        let m = migrate_args(&["migrate", "--rank", "1"]);
        assert_eq!(m.moves().unwrap()[0].to, None);
    }

    #[test]
    fn given_resize_flags_then_the_resize_names_the_width_and_hosts() {
        let Command::Resize(r) =
            parse(&["resize", "--ranks", "3", "--to", "b", "--to", "c"]).command
        else {
            panic!("not a resize");
        };
        let resize = r.resize();
        assert_eq!(resize.ranks, 3);
        assert_eq!(resize.hosts.len(), 2);
        assert!(!r.no_wait);
        assert!(Cli::try_parse_from(["pcmd", "resize"]).is_err());
        assert!(Cli::try_parse_from(["pcmd", "resize", "--ranks", "-1"]).is_err());
        assert!(
            Cli::try_parse_from(["pcmd", "resize", "--ranks", "2", "--wait", "--no-wait"]).is_err()
        );
        let text = format_outcome_of(
            "resize",
            RequestId(4),
            &Outcome::Superseded {
                by: Some(RequestId(9)),
                moves: Vec::new(),
                resize: Some(Resize {
                    ranks: 2,
                    hosts: Vec::new(),
                }),
            },
        );
        assert!(
            text.starts_with("resize #4 not carried out: request #9 (resize to 2 ranks) ran first and resized the job"),
            "{text}"
        );
    }

    #[test]
    fn given_bad_values_then_parse_or_validation_fails() {
        assert!(Cli::try_parse_from(["pcmd", "migrate"]).is_err());
        assert!(Cli::try_parse_from(["pcmd", "migrate", "--rank", "1", "--to", "a b"]).is_err());
        let m = migrate_args(&["migrate", "--rank", "1", "--timeout", "0"]);
        assert!(m.timeout().is_err());
        match parse(&["--socket", "/x.sock", "serve", "--request-timeout", "0.5"]) {
            Cli {
                socket: Some(s),
                command: Command::Serve(a),
                ..
            } => {
                assert_eq!(s, PathBuf::from("/x.sock"));
                assert_eq!(a.request_timeout().unwrap(), Duration::from_millis(500));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stats_render_with_the_traffic_matrix() {
        use pcm_proto::{JobStats, NodeLoad, PeerTraffic, RankProfile, RankStats};
        let rank = |r: u32, peers: &[u32]| RankStats {
            rank: Rank(r),
            host: HostName::new("node-a").unwrap(),
            pid: 100 + r,
            replacement: r == 1,
            stalled: false,
            profile: RankProfile {
                iteration: 50,
                traffic: peers
                    .iter()
                    .map(|&p| PeerTraffic {
                        peer: Rank(p),
                        host: HostName::new(if p == 2 { "node-b" } else { "node-a" }).ok(),
                        sent_messages: 50,
                        sent_bytes: 50 * 2048,
                        received_messages: 50,
                        received_bytes: 50 * 2048,
                    })
                    .collect(),
                ..RankProfile::default()
            },
            iterations_per_second: 25.0,
            wall_per_iteration_us: 40_000.0,
            cpu_per_iteration_us: 850.0,
            mpi_per_iteration_us: 1500.0,
            slowest_compute_per_iteration_us: 0.0,
        };
        let stats = NodeStats {
            host: HostName::new("node-a").unwrap(),
            period_s: 2.0,
            node: NodeLoad {
                cores: 2.0,
                memory_total: 4 << 30,
                memory_available: 1 << 30,
                ..NodeLoad::default()
            },
            jobs: vec![JobStats {
                job: JobId::new("job-1").unwrap(),
                app: AppName::new("heat2d").unwrap(),
                size: 3,
                ranks: vec![rank(0, &[1]), rank(1, &[0, 2]), rank(2, &[1])],
                malleable: Some(
                    pcm_proto::Malleability::new(2, 8)
                        .unwrap()
                        .with_rule(pcm_proto::SizeRule::PowerOfTwo),
                ),
            }],
        };
        let text = format_stats(&stats);
        assert!(
            text.contains("3 ranks, 3 here  malleable 2..=8 (a power of two)"),
            "{text}"
        );
        assert!(text.contains("2.00 cores"), "{text}");
        assert!(text.contains("1.0 GiB available of 4.0 GiB"), "{text}");
        assert!(
            text.contains("40.00 ms") && text.contains("850.0 us"),
            "{text}"
        );
        assert!(text.contains("50 / 100.0 KiB"), "{text}");
        assert!(
            text.contains("peers run on: 0 on node-a, 1 on node-a, 2 on node-b"),
            "{text}"
        );
        // Rank 0 sends to rank 1 only: its row reads "-", "50 / ...", "-".
        let row0 = text
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with("0 "))
            .unwrap();
        assert_eq!(row0.matches('-').count(), 2, "{row0}");
    }

    #[test]
    fn status_and_outcome_render() {
        let status = DaemonStatus {
            host: HostName::new("node-a").unwrap(),
            pid: 7,
            uptime_s: 75.0,
            jobs: vec![JobStatus {
                job: JobId::new("job-1").unwrap(),
                app: AppName::new("heat2d").unwrap(),
                size: 4,
                ranks: vec![
                    RankStatus {
                        rank: Rank(2),
                        host: HostName::new("node-a").unwrap(),
                        pid: 1002,
                        iteration: 480,
                        iterations_per_second: 0.0,
                        replacement: false,
                        stalled: true,
                        silent_s: 12.0,
                    },
                    RankStatus {
                        rank: Rank(3),
                        host: HostName::new("node-a").unwrap(),
                        pid: 1003,
                        iteration: 500,
                        iterations_per_second: 12.5,
                        replacement: true,
                        stalled: false,
                        silent_s: 0.4,
                    },
                ],
                in_flight: Some(RequestId(9)),
                cancelling: false,
                migrations: 2,
                cancelled: 1,
                failed: 0,
                malleable: None,
            }],
        };
        let text = format_status(&status);
        assert!(!text.contains("malleable"), "{text}");
        let mut malleable = status.clone();
        malleable.jobs[0].malleable = Some(pcm_proto::Malleability::new(1, 256).unwrap());
        let line = format_status(&malleable);
        assert!(
            line.contains("4 ranks, 2 here  malleable 1..=256 (any width)  migrations 2"),
            "{line}"
        );
        assert!(text.contains("up 1m15s"), "{text}");
        assert!(text.contains("in flight: #9"), "{text}");
        assert!(text.contains("cancelled 1"), "{text}");
        // The stalled rank says so instead of showing a rate; the running one its rate.
        let stalled = text.lines().find(|l| l.contains("1002")).unwrap();
        assert!(
            stalled.contains("stalled") && stalled.contains("no report for 12s"),
            "{text}"
        );
        let running = text.lines().find(|l| l.contains("1003")).unwrap();
        assert!(
            running.contains("12.5") && !running.contains("stalled"),
            "{text}"
        );
        assert!(text.contains("12.5  (replacement)"), "{text}");
        let text = format_outcome(
            RequestId(9),
            &Outcome::Completed {
                iteration: 100,
                timings: PhaseTimings {
                    spawn_us: 1500,
                    state_bytes: 3 << 20,
                    ..PhaseTimings::default()
                },
                placed: vec![(Rank(3), HostName::new("node-b").unwrap())],
            },
        );
        assert!(text.contains("rank 3 -> node-b"), "{text}");
        assert!(text.contains("spawn 1.5 ms"), "{text}");
        assert!(text.contains("3.0 MiB"), "{text}");
    }
}
