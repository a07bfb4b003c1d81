//! Command-line interface of `ios-agent`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The IOS agent: run one on every node of a pool. It profiles the node and the MPI processes
/// registered with the node's pcmd, finds the other agents through peer servers, and moves
/// processes from overloaded nodes to idle or newly joined ones, with no human action.
///
/// Quick start (one key per pool, shared by every node):
///   ios-agent keygen pool.key
///   peer-server --listen /ip4/0.0.0.0/tcp/7000 --pool-key pool.key
///   ios-agent join --peer-server /ip4/HOST/tcp/7000 --pool-key pool.key
///
/// Logs go to stderr; set RUST_LOG (for example RUST_LOG=ios_agent=debug) for more.
#[derive(Debug, Parser)]
#[command(name = "ios-agent", version, verbatim_doc_comment)]
pub struct Cli {
    /// Control socket of the node's agent. `{host}` is replaced by the host name.
    /// Default: $XDG_RUNTIME_DIR/ios-agent/HOST.sock, else /tmp/ios-agent-UID/HOST.sock.
    #[arg(long, global = true, value_name = "PATH", env = "IOS_AGENT_CONTROL")]
    pub control: Option<String>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Join the pool and run the agent in the foreground until `ios-agent leave` or a signal.
    /// Starts the node's pcmd if none is running, so the node is usable at once.
    Join(Box<JoinArgs>),
    /// Give the node back: the running agent moves every MPI rank on this node to other
    /// nodes of the pool (each destination chosen by the same model as any move, one rank at
    /// a time), waits until no process of any job is left here (departed ranks and the
    /// launcher's proxy included), then stops. Progress is shown as it goes.
    ///
    /// When it returns with success the owner may switch the machine off or kill everything
    /// on it without harming the jobs. If the node cannot be drained within --within (no
    /// node has room, or the runtime keeps a departed process until its job ends: Open
    /// MPI 4 does), it says what is left and the agent stays in the pool (exit status 1),
    /// unless --force: then the agent stops anyway and what is left keeps running here.
    Leave(LeaveArgs),
    /// Show the node's agent: peers by latency tier, loads, local processes, recent decisions.
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write a new random pool key to FILE (mode 0600). Give the same file to every agent and
    /// peer server of the pool.
    Keygen {
        /// Where to write the key.
        file: PathBuf,
    },
}

/// Options of `ios-agent leave`.
#[derive(Debug, Args)]
pub struct LeaveArgs {
    /// How long the drain may take.
    #[arg(long, value_name = "SECONDS", default_value = "120", value_parser = positive_seconds)]
    pub within: Duration,
    /// Stop the agent even if the node could not be drained in time (the ranks left keep
    /// running here, and die with the machine).
    #[arg(long)]
    pub force: bool,
}

/// Virtual topology of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TopologyArg {
    /// NSp2p: every agent steals work from its peers, nearest latency tier first.
    P2p,
    /// NSc2c: nearby agents form clusters with an elected manager; managers steal from each
    /// other.
    C2c,
}

/// Options of `join`.
#[derive(Debug, Args)]
pub struct JoinArgs {
    /// A peer server to register with and discover peers from (multiaddr, for example
    /// /ip4/10.0.0.1/tcp/7000). Repeat for several; losing one loses nothing.
    #[arg(long = "peer-server", value_name = "ADDR")]
    pub peer_servers: Vec<String>,

    /// Another agent to connect to directly (multiaddr). Repeatable.
    #[arg(long = "peer", value_name = "ADDR")]
    pub peers: Vec<String>,

    /// The pool's shared key (from `ios-agent keygen`). Only holders can connect.
    #[arg(long, value_name = "FILE", env = "IOS_POOL_KEY")]
    pub pool_key: PathBuf,

    /// Address to listen on for other agents.
    #[arg(long, value_name = "ADDR", default_value = "/ip4/0.0.0.0/tcp/0")]
    pub listen: String,

    /// Address other agents should dial to reach this one (default: the listen address, with
    /// 0.0.0.0 replaced by the node's first non-loopback address).
    #[arg(long, value_name = "ADDR")]
    pub external: Option<String>,

    /// This node's name as the MPI runtime knows it (default: the host name).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,

    /// The node's pcmd socket (default: as pcmd resolves it, $PCM_DAEMON or per user).
    #[arg(long, value_name = "PATH")]
    pub pcmd_socket: Option<PathBuf>,

    /// The pcmd program to start when none is running (default: next to this program, else
    /// `pcmd` on PATH).
    #[arg(long, value_name = "PROGRAM")]
    pub pcmd: Option<PathBuf>,

    /// Pool topology.
    #[arg(long, value_enum, default_value = "p2p")]
    pub topology: TopologyArg,

    /// Seconds between profiles of the node and its processes.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = positive_seconds)]
    pub profile_period: Duration,

    /// Seconds a process that moved stays put before it may move again (damping).
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = positive_seconds)]
    pub hold_down: Duration,

    /// Smallest gain of the resource sensitive model worth a migration (0 to 1).
    #[arg(long, value_name = "GAIN", default_value = "0.1")]
    pub min_gain: f64,

    /// Weigh where each rank's communication partners run (the model's communication term),
    /// with the round-trip times the agents measure between themselves. Off by default:
    /// those are libp2p round trips, which within a cluster overstate the MPI latency
    /// between nodes many times over, so for a chatty application the term would pull ranks
    /// onto their partners' nodes for latency they do not pay. Turn it on for pools spread
    /// over sites, where round trips of milliseconds or more are the network's own.
    #[arg(long)]
    pub communication_term: bool,

    /// Never grow or shrink jobs: only move their ranks. By default the agents resize
    /// malleable jobs (those that declared their limits with set_malleable; `pcmd stats`
    /// shows them as "malleable MIN..=MAX"): a job grows onto an idle node that asks for
    /// work when the model says it runs faster wider, and sheds its ranks on a loaded or
    /// leaving node that no idle node takes. With --no-resize every job keeps its width, as
    /// jobs that are not malleable always do (a migration-only pool, for comparison). Give
    /// it to every agent of the pool: each agent decides resizes by itself.
    #[arg(long)]
    pub no_resize: bool,

    /// Agents this node dials, of those the peer servers list: it connects to that many
    /// (and accepts every agent that dials it), not to every agent of the pool, so that
    /// an idle agent's upkeep does not grow with the pool. 0: every agent discovered (a
    /// full mesh).
    #[arg(long, value_name = "N", default_value_t = ios_agent_net::config::DEFAULT_DIAL_AGENTS)]
    pub dial_agents: usize,

    /// Idle CPUs (speed-normalised) that make this node ask for work.
    #[arg(long, value_name = "CPUS", default_value = "0.3")]
    pub light_threshold: f64,

    /// The cgroup that caps this node's work, when the agent (and the pcmd it starts) run
    /// beside it rather than in it: its path as /proc/PID/cgroup shows it for a rank (e.g.
    /// /jobs.slice/node). The agent then profiles that cgroup's cap and load as the node's,
    /// and its own answers are never held up by the cap's throttling (which delays pings by
    /// milliseconds and so skews the round trips the model weighs). It must exist and cap
    /// the CPU. Default: the cgroup that caps the agent itself, else the whole machine.
    #[arg(long, value_name = "PATH", env = ios_agent_profile::NODE_CGROUP_ENV)]
    pub node_cgroup: Option<ios_agent_profile::NodeCgroupPath>,

    /// Directory for the agent's identity key and logs (default: next to the control socket).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

fn positive_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
        return Err(format!("{s} must be between 0 and 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    fn join(args: &[&str]) -> JoinArgs {
        let argv = ["ios-agent", "join", "--pool-key", "pool.key"]
            .into_iter()
            .chain(args.iter().copied());
        match Cli::try_parse_from(argv).expect("parses").command {
            Command::Join(args) => *args,
            other => panic!("not a join: {other:?}"),
        }
    }

    #[test]
    fn the_command_line_definition_is_valid() {
        Cli::command().debug_assert();
    }

    /// Issue 38: agents resize malleable jobs unless told not to.
    #[test]
    fn given_no_resize_then_join_says_so_and_resizes_are_on_by_default() {
        assert!(!join(&[]).no_resize);
        assert!(join(&["--no-resize"]).no_resize);
        let help = Cli::command()
            .find_subcommand_mut("join")
            .expect("join")
            .render_long_help()
            .to_string();
        assert!(help.contains("--no-resize"), "{help}");
        assert!(help.contains("malleable"), "{help}");
    }
}
