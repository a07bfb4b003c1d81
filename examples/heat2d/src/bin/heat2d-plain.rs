//! `heat2d-plain`: the heat application on plain MPI, without PCM (the paper's Figure 10).
//!
//! ```text
//! mpirun -np 4 heat2d-plain --rows 1024 --cols 1024 --iters 1000 [--report-every 100]
//! ```
//!
//! Rank 0 prints a JSON [`heat2d::Report`] as its last stdout line.

use std::process::ExitCode;
use std::time::Instant;

use heat2d::{checksum, parse_on_all_ranks, Args, Block, Progress, Report};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

fn main() -> ExitCode {
    // No PCM here, but the same check: the MPI library loaded must be the one built against.
    let mpi_library = match pcm::check_mpi_library() {
        Ok(library) => library,
        Err(e) => {
            eprintln!("heat2d-plain: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(universe) = mpi::initialize() else {
        eprintln!("heat2d-plain: MPI initialization failed");
        return ExitCode::FAILURE;
    };
    run(&universe.world(), mpi_library)
    // `universe` drops here: MPI_Finalize on every rank, whatever the outcome.
}

fn run(world: &SimpleCommunicator, mpi_library: String) -> ExitCode {
    let (rank, size) = (world.rank(), world.size());
    let args: Args = match parse_on_all_ranks(world) {
        Ok(args) => args,
        Err(code) => return code,
    };
    // Every rank reaches the same verdict, so all return together.
    let block = args
        .validate(size as usize)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            Block::new(args.rows, args.cols, rank as usize, size as usize)
                .map_err(|e| e.to_string())
        });
    let mut block = match block {
        Ok(block) => block,
        Err(e) => {
            if rank == 0 {
                eprintln!("heat2d-plain: {e}");
            }
            return ExitCode::FAILURE;
        }
    };

    let mut progress = Progress::new(args.report_every, args.iters, Instant::now());
    world.barrier();
    let start = Instant::now();
    for done in 1..=args.iters {
        block.step(world);
        if rank == 0 {
            if let Some(line) = progress.tick(done) {
                eprintln!("{line}");
            }
        }
    }
    world.barrier();
    let seconds = start.elapsed().as_secs_f64();

    if let Some(checksum) = checksum(world, &block) {
        let report = Report {
            checksum,
            iterations: args.iters,
            seconds,
            ranks: size as usize,
            rows: args.rows,
            cols: args.cols,
            migrations: None,
            hosts: None,
            mpi_library,
        };
        if let Err(e) = report.print() {
            eprintln!("heat2d-plain: writing the report: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
