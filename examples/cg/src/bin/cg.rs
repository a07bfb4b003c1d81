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
    pcm::init_logging();
    let mut job = match pcm::Pcm::init("cg") {
        Ok(job) => job,
        Err(e) => return report_error(&e),
    };
    let code = match run(&mut job, mpi_library) {
        Ok(code) => code,
        Err(e) => return report_error(&e),
    };
    job.finalize(); // Also records that the job ran to its end.
    code
}

/// Every rank may fail alike: one write per line keeps the ranks' lines whole.
fn report_error(e: &dyn std::fmt::Display) -> ExitCode {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(format!("{NAME}: {e}\n").as_bytes());
    ExitCode::FAILURE
}

fn run(job: &mut pcm::Pcm, mpi_library: String) -> Result<ExitCode, pcm::PcmError> {
    let world = job.world();
    let (rank, size) = (world.rank(), world.size());
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            if rank == 0 {
                let _ = e.print();
            }
            return Ok(ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1)));
        }
    };
    if let Err(e) = args.validate(size as usize) {
        if rank == 0 {
            eprintln!("{NAME}: {e}");
        }
        return Ok(ExitCode::FAILURE);
    }
    // The initial residual takes an all-reduce: fresh ranks only (a replacement loads it).
    let fresh = (job.process_status() == pcm::ProcessStatus::Fresh).then(|| Cg::new(world, args.n));
    let (mut cg, start) = job.resume(|| fresh.ok_or(pcm::PcmError::Internal("no fresh state")))?;
    for _iteration in start..args.iters {
        job.reconfigure_point(&mut cg)?;
        cg.step(job.world());
    }
    let world = job.world();
    if let Some(checksum) = checksum(world, &cg) {
        let report = Report {
            checksum,
            residual: cg.residual(),
            iterations: args.iters,
            seconds: cg.seconds(),
            ranks: size as usize,
            n: args.n,
            migrations: Some(job.migrations()),
            mpi_library,
        };
        if let Err(e) = report.print() {
            eprintln!("{NAME}: writing the report: {e}");
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}
