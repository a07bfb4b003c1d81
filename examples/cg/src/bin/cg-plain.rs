//! Conjugate gradient: `cg-plain` on plain MPI, `cg` with PCM.
//!
//! ```text
//! mpiexec -n 4 BINARY N ITERS
//! ```
//!
//! Rank 0 prints a JSON [`cg::Report`] as its last stdout line. `cg.rs` is `cg-plain.rs`
//! instrumented with PCM as docs/instrumenting.md describes: `diff cg-plain.rs cg.rs`.

use std::process::ExitCode;

use cg::{checksum, Args, Cg, Report};
use clap::Parser;
use mpi::traits::*;

/// The binary's name, which starts every message.
const NAME: &str = env!("CARGO_BIN_NAME");

fn main() -> ExitCode {
    // The MPI library loaded must be the one built against.
    let mpi_library = match pcm::check_mpi_library() {
        Ok(library) => library,
        Err(e) => return report_error(&e),
    };
    let Some(universe) = mpi::initialize() else {
        return report_error(&"MPI initialization failed");
    };
    let code = run(&universe, mpi_library);
    drop(universe); // MPI_Finalize on every rank.
    code
}

/// Every rank may fail alike: one write per line keeps the ranks' lines whole.
fn report_error(e: &dyn std::fmt::Display) -> ExitCode {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(format!("{NAME}: {e}\n").as_bytes());
    ExitCode::FAILURE
}

fn run(universe: &mpi::environment::Universe, mpi_library: String) -> ExitCode {
    let world = &universe.world();
    let (rank, size) = (world.rank(), world.size());
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            if rank == 0 {
                let _ = e.print();
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1));
        }
    };
    if let Err(e) = args.validate(size as usize) {
        if rank == 0 {
            eprintln!("{NAME}: {e}");
        }
        return ExitCode::FAILURE;
    }
    let mut cg = Cg::new(world, args.n);
    world.barrier();
    cg.started = cg::unix_seconds();
    for _iteration in 0..args.iters {
        cg.step(world);
    }
    world.barrier();
    if let Some(checksum) = checksum(world, &cg) {
        let report = Report {
            checksum,
            residual: cg.residual(),
            iterations: args.iters,
            seconds: cg.seconds(),
            ranks: size as usize,
            n: args.n,
            migrations: None,
            mpi_library,
        };
        if let Err(e) = report.print() {
            eprintln!("{NAME}: writing the report: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
