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
use mpi::environment::Universe;
use mpi::traits::*;

/// The binary's name, which starts every message.
const NAME: &str = env!("CARGO_BIN_NAME");

fn main() -> ExitCode {
    // The MPI library loaded must be the one built against.
    let mpi_library = match pcm::check_mpi_library() {
        Ok(library) => library,
        Err(e) => return report_error(&e),
    };
    let mut job = match mpi::initialize().ok_or("MPI initialization failed") {
        Ok(job) => job,
        Err(e) => return report_error(&e),
    };
    let code = match run(&mut job, mpi_library) {
        Ok(code) => code,
        Err(e) => return report_error(&*e),
    };
    drop(job); // MPI_Finalize on every rank (also when returning early).
    code
}

/// Every rank may fail alike: one write per line keeps the ranks' lines whole.
fn report_error(e: &dyn std::fmt::Display) -> ExitCode {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(format!("{NAME}: {e}\n").as_bytes());
    ExitCode::FAILURE
}

fn run(job: &mut Universe, mpi_library: String) -> Result<ExitCode, Box<dyn Error>> {
    let world = &job.world();
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
    let (mut heat, start) = (Heat::new(&args, rank, size)?, 0);
    // No PCM here, but the same typed events a PCM program writes (`PCM_EVENTS`,
    // `PCM_PROGRESS_PERIOD`): loop start and progress, for the programs that follow the run.
    pcm::events::start_without_pcm(&pcm::Config::from_env()?, rank as u32)?;

    let mut progress =
        Progress::new(args.report_every, args.iters, Instant::now()).starting_at(start);
    world.barrier();
    heat.started = heat2d::unix_seconds();
    if rank == 0 {
        pcm::events::loop_started(start);
    }
    // heat2d-plain's own: when the grid last changed (the report's `last_change`), which
    // tests check before they compare a run with moves against this one.
    let mut settling = heat2d::Settling::new(args.iters);
    for iteration in start..args.iters {
        heat.block.step(world);
        settling.sample(iteration + 1, &heat.block);
        if rank == 0 {
            pcm::events::progress(iteration + 1);
        }
        if let Some(line) = progress.tick(iteration + 1).filter(|_| rank == 0) {
            eprintln!("{line}");
        }
    }
    world.barrier();
    let seconds = heat.seconds();
    if rank == 0 {
        pcm::events::final_progress(args.iters);
    }
    let last_change = settling.last_change_of_all(world);

    if let Some(checksum) = checksum(world, &heat.block) {
        let report = Report {
            checksum,
            iterations: args.iters,
            seconds,
            ranks: size as usize,
            rows: args.rows,
            cols: args.cols,
            migrations: None,
            resizes: None,
            hosts: None,
            mpi_library,
        };
        let report = report.with_last_change(last_change);
        if let Err(e) = report.print() {
            eprintln!("{NAME}: writing the report: {e}");
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}
