//! What `pcmd` does for each subcommand: `serve` runs the daemon ([`crate::daemon`] with
//! the [`crate::checkpoint`] service beside it); the others ask the daemon through
//! [`pcm_proto::client`] and print its answer ([`crate::cli`]'s formatting).

use std::time::Instant;

use anyhow::{bail, Context as _};
use pcm_proto::client::{Client, Migration};

use crate::cli::{self, Command};
use crate::daemon::{self, Daemon};
use crate::registry;
use crate::settings::Settings;

/// Runs the subcommand of `settings`' command line.
pub fn run(settings: Settings) -> anyhow::Result<()> {
    let host = settings.cli.host()?;
    let socket = settings.socket(&host);
    match settings.cli.command {
        Command::Serve(args) => {
            let config = daemon::Config {
                socket: socket.clone(),
                host: host.clone(),
                registry: registry::Config::default()
                    .with_max_connections(daemon::MAX_CLIENTS)
                    .with_request_timeout(args.request_timeout()?)
                    .with_stats_period(args.stats_period()?),
                shm_sweep: args.shm_sweep()?,
                node_cgroup: args.node_cgroup.clone(),
            };
            let checkpoint = args.checkpoint.config(&socket, &host, &settings.dirs)?;
            let locked = Daemon::lock(config)?;
            // After the lock, which also guards the checkpoint socket; before the main
            // socket listens, because ranks go on to the checkpoint socket once they reach it.
            let _checkpoints = crate::checkpoint::Service::start(checkpoint)?;
            let daemon = locked.listen(Instant::now())?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the tokio runtime")?;
            let until_stdin_closes = args.until_stdin_closes;
            runtime.block_on(daemon.run(async move {
                if until_stdin_closes {
                    tokio::select! {
                        () = daemon::shutdown_signal() => {}
                        () = daemon::stdin_closed() => {}
                    }
                } else {
                    daemon::shutdown_signal().await;
                }
            }))?;
        }
        Command::Status(args) => {
            let status = Client::connect(&socket)?.status()?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print!("{}", cli::format_status(&status));
            }
        }
        Command::Stats(args) => {
            let stats = Client::connect(&socket)?.stats()?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                print!("{}", cli::format_stats(&stats));
            }
        }
        Command::Resize(args) => {
            let timeout = args.timeout()?;
            let mut client = Client::connect(&socket)?;
            match client.resize(args.job.clone(), args.resize(), !args.no_wait, timeout)? {
                Migration::Accepted { request } => {
                    println!(
                        "resize {request} accepted by pcmd on {}",
                        client.daemon_host()
                    );
                }
                Migration::Finished { request, outcome } => {
                    print!("{}", cli::format_outcome_of("resize", request, &outcome));
                    if !outcome.is_completed() {
                        bail!("resize {request} was not carried out");
                    }
                }
            }
        }
        Command::Migrate(args) => {
            let moves = args.moves()?;
            let timeout = args.timeout()?;
            let mut client = Client::connect(&socket)?;
            match client.migrate(args.job.clone(), moves, !args.no_wait, timeout)? {
                Migration::Accepted { request } => {
                    println!(
                        "migration {request} accepted by pcmd on {}",
                        client.daemon_host()
                    );
                }
                Migration::Finished { request, outcome } => {
                    print!("{}", cli::format_outcome(request, &outcome));
                    if !outcome.is_completed() {
                        bail!("migration {request} was not carried out");
                    }
                }
            }
        }
    }
    Ok(())
}
