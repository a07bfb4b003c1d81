//! `ios-sense`: prints what the IOS agent's profiling component sees of this node (or of the
//! node of `--pid`), one JSON line per period.

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use ios_agent_profile::{
    NodeCgroupPath, NodeSampleExt as _, NodeSensor, SensorConfig, SpeedProbe, NODE_CGROUP_ENV,
};

/// Samples the node (the cgroup that caps this process's CPU, else the machine).
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// Sense the node of this process instead of our own.
    #[arg(long)]
    pid: Option<u32>,
    /// Sense this cgroup as the node (its path as /proc/PID/cgroup shows it), as the agent
    /// does with the same option when it runs beside the cgroup that caps the node.
    #[arg(long, value_name = "PATH", env = NODE_CGROUP_ENV)]
    node_cgroup: Option<NodeCgroupPath>,
    /// Sampling period, milliseconds.
    #[arg(long, default_value_t = 1000)]
    period_ms: u64,
    /// Number of samples (0 = until killed).
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Also report the CPU use of these processes (comma-separated pids: the node's ranks).
    #[arg(long, value_delimiter = ',')]
    entities: Vec<u32>,
    /// Only run the speed probe this many times and print each result.
    #[arg(long)]
    probe: Option<u32>,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("ios-sense: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(n) = cli.probe {
        for _ in 0..n {
            println!("{}", serde_json::to_string(&SpeedProbe::default().run())?);
        }
        return Ok(());
    }
    let mut config = SensorConfig::default().with_node_cgroup(cli.node_cgroup);
    if let Some(pid) = cli.pid {
        config = config.with_pid(pid);
    }
    let mut sensor = NodeSensor::new(config).context("cannot sense the node")?;
    eprintln!("ios-sense: node = {:?}", sensor.scope());
    let mut taken = 0;
    while cli.count == 0 || taken < cli.count {
        std::thread::sleep(Duration::from_millis(cli.period_ms.max(10)));
        let sample = sensor.sample_with(&cli.entities).context("sample")?;
        let line = serde_json::json!({
            "sample": sample,
            "load": sample.load(),
            "competing": sample.competing(),
        });
        println!("{line}");
        taken += 1;
    }
    Ok(())
}
