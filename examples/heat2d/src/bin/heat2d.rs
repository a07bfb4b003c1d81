//! The heat application: `heat2d-plain` on plain MPI (the paper's Figure 10), `heat2d` with PCM.
//!
//! ```text
//! mpirun -np 4 BINARY --rows 1024 --cols 1024 --iters 1000 [--report-every 100]
//! ```
//!
//! Rank 0 prints a JSON [`heat2d::Report`] as its last stdout line. `heat2d.rs` is
//! `heat2d-plain.rs` instrumented with PCM (Figure 11): `diff heat2d-plain.rs heat2d.rs`
//! shows every PCM line (see examples/heat2d/README.md); `heat2d-plain.rs` has a few lines of
//! its own, the calls that report its loop start and progress as events, which PCM reports
//! for `heat2d`. Both write the same typed events when `PCM_EVENTS` names a file (see
//! `pcm::events`); the `--report-every` lines are for people.

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use heat2d::{checksum, parse_on_all_ranks, Args, Heat, Progress, Report};
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
    let mut job = match pcm::Pcm::init("heat2d") {
        Ok(job) => job,
        Err(e) => return report_error(&e),
    };
    let code = match run(&mut job, mpi_library) {
        Ok(code) => code,
        Err(e) => return report_error(&*e),
    };
    job.finalize(); // Also records that the job ran to its end (dropping `job` does not).
    code
}

/// Every rank may fail alike: one write per line keeps the ranks' lines whole.
fn report_error(e: &dyn std::fmt::Display) -> ExitCode {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(format!("{NAME}: {e}\n").as_bytes());
    ExitCode::FAILURE
}

fn run(job: &mut pcm::Pcm, mpi_library: String) -> Result<ExitCode, Box<dyn Error>> {
    let world = job.world();
    let (rank, size) = (world.rank(), world.size());
    let args: Args = match parse_on_all_ranks(world) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    // Every rank reaches the same verdict, so all return together.
    if let Err(e) = args.validate(size as usize) {
        if rank == 0 {
            eprintln!("{NAME}: {e}");
        }
        return Ok(ExitCode::FAILURE);
    }
    // Malleable: any width that leaves every rank a row; a resize moves the grid's rows.
    job.set_malleable(pcm::Malleability::new(1, args.rows as u32)?)?;
    job.declare_block::<f64>("grid", args.rows as u64, args.cols as u64)?;
    // The grid in PCM shared memory: a move within a host hands it over without a copy.
    let fresh = (job.process_status() == pcm::ProcessStatus::Fresh)
        .then(|| Heat::new_shared(&args, rank, size, job))
        .transpose()?;
    let (mut heat, start) =
        job.resume(|| fresh.ok_or(pcm::PcmError::Internal("no fresh state")))?;
    heat.share(job)?;

    let mut progress =
        Progress::new(args.report_every, args.iters, Instant::now()).starting_at(start);
    for iteration in start..args.iters {
        job.reconfigure_point(&mut heat)?;
        heat.block.step(job.world());
        if let Some(line) = progress.tick(iteration + 1).filter(|_| job.rank().0 == 0) {
            let (migrations, hosts) = (job.migrations(), job.placement());
            eprintln!("{line} (migrations: {migrations}, hosts: {hosts})");
        }
    }
    let world = job.world();
    let seconds = heat.seconds();

    if let Some(checksum) = checksum(world, &heat.block) {
        let report = Report {
            checksum,
            iterations: args.iters,
            seconds,
            ranks: job.size() as usize,
            rows: args.rows,
            cols: args.cols,
            migrations: Some(job.migrations()),
            resizes: Some(job.resizes()),
            hosts: Some(job.rank_hosts().iter().map(ToString::to_string).collect()),
            mpi_library,
        };
        if let Err(e) = report.print() {
            eprintln!("{NAME}: writing the report: {e}");
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}
