//! A TCP relay that delays each direction, to emulate distance between agents on one
//! machine: `ios-net-relay --listen 127.0.0.1:0 --target 127.0.0.1:4001 --delay-ms 20`.
//! Prints `{"event":"relay","listen":ADDR,...}` once listening.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

/// Forwards TCP connections to TARGET, delaying each direction by DELAY_MS.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Address to listen on (port 0: any).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Address to forward to.
    #[arg(long)]
    target: SocketAddr,
    /// Delay of each direction in milliseconds (an RTT through the relay grows by twice it).
    #[arg(long)]
    delay_ms: f64,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let run = || -> anyhow::Result<()> {
        anyhow::ensure!(
            args.delay_ms.is_finite() && args.delay_ms >= 0.0,
            "--delay-ms must be a non-negative number, got {}",
            args.delay_ms
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(ios_agent_net::relay::run_forever(
            args.listen,
            args.target,
            Duration::from_secs_f64(args.delay_ms / 1000.0),
        ))?;
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("ios-net-relay: {e:#}");
        std::process::exit(1);
    }
}
