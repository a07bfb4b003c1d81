//! `pcmrun`: parses the command line and runs the job ([`pcmrun::job::run`]); see the
//! library's documentation and `pcmrun --help`.

use clap::Parser as _;
use pcmrun::cli::{normalize_args, Options};
use pcmrun::settings::Settings;

fn main() {
    let options = match Options::try_parse_from(normalize_args(std::env::args_os())) {
        Ok(options) => options,
        Err(e) => e.exit(),
    };
    if let Err(message) = options.validate() {
        eprintln!("pcmrun: {message}");
        std::process::exit(2);
    }
    match pcmrun::job::run(&Settings::from_process(options)) {
        Ok(code) => std::process::exit(code.clamp(0, 255)),
        Err(e) => {
            eprintln!("pcmrun: {e:#}");
            std::process::exit(1);
        }
    }
}
