//! `pcmrun`'s command line.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

/// Runs a PCM application under the MPI runtime it was built for, with the settings PCM
/// needs, shows its progress, and brings it back by itself from its newest checkpoint when
/// a rank or a host is lost.
///
/// The application's standard output passes through unchanged; its standard error too,
/// except the event lines PCM writes for pcmrun. pcmrun exits with the application's exit
/// status. A job that ends by itself (success or an error of its own) or by Ctrl-C is never
/// restarted; one that lost a process (killed, crashed, its host gone) or that PCM ended
/// because a replacement stalled (status 75) is relaunched from its newest complete
/// checkpoint, at most --max-restarts times, waiting --retry-delay seconds before the first
/// relaunch and twice as long before each further one.
///
/// The application gets no standard input. Logs: RUST_LOG (forwarded to the ranks, with
/// every PCM_* setting of this shell).
///
/// Example: pcmrun -np 4 --checkpoint-interval 30 target/release/heat2d --rows 4096
#[derive(Debug, Clone, Parser)]
#[command(name = "pcmrun", version, verbatim_doc_comment)]
pub struct Options {
    /// Number of ranks (also spelled -np, as with mpirun).
    #[arg(short = 'n', long = "np", value_name = "P", value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks: u32,

    /// Hosts to run on, in the launcher's own format (hydra: `host:slots`; Open MPI:
    /// `host slots=N`). Default: this host. A relaunch after a lost host uses this file
    /// without the hosts that no longer answer (list spare hosts here to keep the job's
    /// width after a loss).
    #[arg(long, value_name = "FILE")]
    pub hostfile: Option<PathBuf>,

    /// Seconds between coordinated checkpoints (fractions allowed). 0 turns checkpoints,
    /// and with them recovery, off.
    #[arg(
        long,
        value_name = "S",
        default_value_t = 60.0,
        env = "PCM_CHECKPOINT_INTERVAL"
    )]
    pub checkpoint_interval: f64,

    /// Most relaunches after lost processes.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub max_restarts: u32,

    /// Seconds to wait before the first relaunch (doubled for each further one, at most 30).
    #[arg(long, value_name = "S", default_value_t = 1.0)]
    pub retry_delay: f64,

    /// Resume the job from its newest checkpoint at the first launch too (as
    /// PCM_RESTART=require: fail if there is none).
    #[arg(long)]
    pub restart: bool,

    /// Start from iteration 0 even when an earlier run of this command did not finish (by
    /// default pcmrun resumes that run from its newest complete checkpoint). The earlier
    /// run's checkpoints are deleted at this run's first checkpoint.
    #[arg(long, conflicts_with = "restart")]
    pub fresh: bool,

    /// Keeps the checkpoints of two jobs of one program and rank count apart (PCM_JOB_NAME).
    /// One pcmrun at a time holds a series (program, rank count, job name) in a checkpoint
    /// directory: a second one stops at once and names the first; give it a job name.
    #[arg(long, value_name = "NAME")]
    pub job_name: Option<String>,

    /// The node daemon (pcmd) the ranks talk to, which keeps the checkpoints. `auto`: the
    /// node's own, one per node and user at the socket every tool finds by default
    /// (PCM_DAEMON, else $XDG_RUNTIME_DIR/pcmd/HOST.sock, else /tmp/pcmd-UID/HOST.sock),
    /// shared with the node's IOS agent (which then sees and moves the job's ranks with
    /// no flag) and other jobs; pcmrun uses the one that runs, or starts one there and
    /// stops it at the end unless other jobs use it. `start`: new pcmds of the job's own,
    /// in a private directory (agents do not see the job). `none`: no pcmd (no checkpoints,
    /// no recovery). Anything else is a socket path (`{host}` stands for the host name).
    /// With a --hostfile naming other hosts, `auto` and `start` do so on every host of the
    /// hostfile, through the remote launcher (PCM_LAUNCHER, else hydra's
    /// HYDRA_LAUNCHER_EXEC, else Open MPI's OMPI_MCA_plm_rsh_agent, else ssh), and the
    /// ranks keep their checkpoints in one --checkpoint-dir (PCM_CHECKPOINT_DIR), whichever
    /// pcmd serves them; before a relaunch every host is probed through that launcher
    /// (`LAUNCHER HOST true`, 5 s) and the hosts that no longer answer are left out.
    #[arg(long, value_name = "auto|start|none|PATH", default_value = "auto")]
    pub daemon: String,

    /// Where the job's checkpoints are kept, whichever pcmd serves its ranks (default:
    /// pcmd's, $XDG_STATE_HOME/pcmd/HOST). On several hosts it must be a directory that every host
    /// sees (a shared file system), so that the ranks of a lost host resume on another;
    /// pcmrun checks that at start and warns otherwise (default there:
    /// $XDG_STATE_HOME/pcmrun/checkpoints, else ~/.local/state/pcmrun/checkpoints).
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,

    /// The MPI launcher (default: mpiexec on PATH, which scripts/setup.sh points at the
    /// runtime the project was built for).
    #[arg(
        long,
        value_name = "PATH",
        env = "PCMRUN_LAUNCHER",
        default_value = "mpiexec"
    )]
    pub launcher: PathBuf,

    /// An extra option for the launcher, placed before the application (repeatable).
    #[arg(long = "launcher-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub launcher_args: Vec<OsString>,

    /// Seconds without any sign of the job (progress, which rank 0 reports about once a
    /// second, a checkpoint, any run event) after which the job counts as stalled. On
    /// several hosts pcmrun first probes its hosts: one that does not answer ends the
    /// launch, which is relaunched without it (a host that loses power ends no connection,
    /// so the job would wait on it). Otherwise pcmrun names the ranks it finds stopped on
    /// this host (SIGSTOP, a debugger), stops the launch (SIGTERM and SIGCONT, SIGKILL 10 s
    /// later) and relaunches it from the newest checkpoint (counted in --max-restarts). Set
    /// it above the longest iteration or checkpoint of the application.
    #[arg(long, value_name = "S", default_value_t = 30.0)]
    pub stall_timeout: f64,

    /// Seconds between progress lines on standard error (0: none).
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub progress: f64,

    /// Write the final report (recoveries, iterations lost, time to resume) as JSON here.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Write every run event of the job's processes here, one JSON object per line
    /// (`{"seconds":..,"launch":N,"event":{..}}`), for programs that follow the job.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,

    /// When a relaunch leaves hosts out (lost, or given back to the pool by their owner),
    /// put the ranks they held on idle hosts of the IOS agents' pool instead, as the agent
    /// on this host knows them (`ios-agent status`: the most idle first, hosts leaving the
    /// pool never): each is probed through the remote launcher and gets a pcmd before it is
    /// used. Needs an agent on this host (its default control socket, or
    /// IOS_AGENT_CONTROL); without one, or without idle hosts, the relaunch goes on with the
    /// hosts left.
    #[arg(long)]
    pub hosts_from_pool: bool,

    /// The job is malleable (docs/malleability.md) and may run with as few as K ranks: when
    /// a relaunch leaves hosts out and the hosts left have fewer slots (`host:N`, `slots=N`;
    /// 1 per line without) than the job's ranks, it relaunches with as many ranks as
    /// slots, never fewer than K, from the newest checkpoint (whose rows are spread over the
    /// new width) instead of doubling ranks up. Needs checkpoints. A relaunch also keeps the
    /// width the job had grown or shrunk to (`pcmd resize`, the agents), within the slots.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..))]
    pub np_min: Option<u32>,

    /// With --np-min: the most ranks a relaunch uses (default: --np).
    #[arg(long, value_name = "L", value_parser = clap::value_parser!(u32).range(1..))]
    pub np_max: Option<u32>,

    /// Print the launch command and exit.
    #[arg(long)]
    pub dry_run: bool,

    /// The application and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "APP ARGS"
    )]
    pub program: Vec<OsString>,
}

/// Options of pcmrun that take a value (for [`normalize_args`]).
const VALUE_OPTIONS: &[&str] = &[
    "-n",
    "--np",
    "--hostfile",
    "--checkpoint-interval",
    "--max-restarts",
    "--retry-delay",
    "--job-name",
    "--daemon",
    "--checkpoint-dir",
    "--launcher",
    "--launcher-arg",
    "--progress",
    "--stall-timeout",
    "--report",
    "--np-min",
    "--np-max",
    "--events",
];

/// Rewrites mpirun's `-np` to `--np` among pcmrun's own options (before the application),
/// so that `pcmrun -np 4 app -np x` gives `-np x` to the application untouched.
pub fn normalize_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut args = args.into_iter();
    if let Some(program_name) = args.next() {
        out.push(program_name);
    }
    let mut value_next = false;
    for arg in args.by_ref() {
        let text = arg.to_string_lossy().into_owned();
        if value_next {
            value_next = false;
            out.push(arg);
            continue;
        }
        if text == "-np" {
            out.push("--np".into());
            value_next = true;
            continue;
        }
        if VALUE_OPTIONS.contains(&text.as_str()) {
            value_next = true;
            out.push(arg);
            continue;
        }
        let is_option = text.starts_with('-');
        out.push(arg);
        if !is_option || text == "--" {
            break;
        }
    }
    out.extend(args);
    out
}

impl Options {
    /// Checks what clap cannot, naming the bad option.
    pub fn validate(&self) -> Result<(), String> {
        let seconds = |name: &str, value: f64, zero_ok: bool| {
            if value.is_finite() && (value > 0.0 || (zero_ok && value == 0.0)) {
                Ok(())
            } else {
                Err(format!(
                    "{name} {value}: expected {} number of seconds",
                    if zero_ok {
                        "a non-negative"
                    } else {
                        "a positive"
                    }
                ))
            }
        };
        seconds("--checkpoint-interval", self.checkpoint_interval, true)?;
        seconds("--retry-delay", self.retry_delay, false)?;
        seconds("--progress", self.progress, true)?;
        seconds("--stall-timeout", self.stall_timeout, false)?;
        match (self.np_min, self.np_max) {
            (None, Some(max)) => {
                return Err(format!("--np-max {max} without --np-min: say the least width too"))
            }
            (Some(min), _) if min > self.ranks => {
                return Err(format!("--np-min {min} is above --np {}", self.ranks))
            }
            (Some(_), Some(max)) if max < self.ranks => {
                return Err(format!("--np-max {max} is below --np {}", self.ranks))
            }
            (Some(_), _) if self.checkpoint_interval == 0.0 || self.daemon == "none" => {
                return Err("--np-min relaunches narrower from a checkpoint: it needs checkpoints (not --checkpoint-interval 0 or --daemon none)".into())
            }
            _ => {}
        }
        if self.restart && self.checkpoint_interval == 0.0 {
            return Err(
                "--restart needs checkpoints: --checkpoint-interval 0 turns them off".into(),
            );
        }
        if self.restart && self.daemon == "none" {
            return Err(
                "--restart needs the pcmd that holds the checkpoints: not with --daemon none"
                    .into(),
            );
        }
        if let Some(name) = &self.job_name {
            pcm_proto::AppName::new(name.as_str())
                .map_err(|e| format!("--job-name {name:?}: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Options::try_parse_from(normalize_args(args.iter().map(OsString::from)))
    }

    #[test]
    fn given_mpirun_style_np_then_it_is_pcmruns_but_the_applications_stays() {
        let o = parse(&["pcmrun", "-np", "4", "app", "-np", "x", "--daemon", "y"]).unwrap();
        assert_eq!(o.ranks, 4);
        assert_eq!(o.program, ["app", "-np", "x", "--daemon", "y"]);
        assert_eq!(o.daemon, "auto");
        let o = parse(&["pcmrun", "--hostfile", "-np", "-n", "2", "app"]).unwrap();
        assert_eq!(o.hostfile.as_deref(), Some(std::path::Path::new("-np")));
        assert_eq!(o.ranks, 2);
    }

    #[test]
    fn given_defaults_then_checkpoints_and_recovery_are_on() {
        let o = parse(&["pcmrun", "-n", "2", "app"]).unwrap();
        assert_eq!((o.checkpoint_interval, o.max_restarts), (60.0, 3));
        assert!(o.validate().is_ok());
    }

    #[test]
    fn given_bad_values_then_errors_name_the_option() {
        assert!(parse(&["pcmrun", "-np", "0", "app"]).is_err());
        assert!(parse(&["pcmrun", "-np", "2"]).is_err());
        let o = parse(&["pcmrun", "-n", "2", "--retry-delay", "0", "app"]).unwrap();
        assert!(o.validate().unwrap_err().contains("--retry-delay 0"));
        let o = parse(&[
            "pcmrun",
            "-n",
            "2",
            "--checkpoint-interval",
            "0",
            "--restart",
            "app",
        ])
        .unwrap();
        assert!(o.validate().unwrap_err().contains("--restart"));
        let o = parse(&["pcmrun", "-n", "2", "--job-name", "a b", "app"]).unwrap();
        assert!(o.validate().unwrap_err().contains("--job-name"));
    }
}
