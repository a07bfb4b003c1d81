//! `ios-agent`: parses the command line, sets up logging and runs the subcommand
//! ([`ios_agent::commands::run`]); see `ios-agent --help`.

use clap::Parser as _;
use ios_agent::cli::Cli;
use ios_agent::settings::Settings;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match ios_agent::commands::run(Settings::from_process(Cli::parse())) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ios-agent: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
