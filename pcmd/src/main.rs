//! The `pcmd` binary: parses flags, sets up logging and runs the subcommand
//! ([`pcmd::commands::run`]).

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser as _;
use pcmd::cli::Cli;
use pcmd::settings::Settings;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match pcmd::commands::run(Settings::from_process(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pcmd: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
