//! `mpi-pingpong`: baseline point-to-point bandwidth between ranks 0 and 1 of plain MPI, to
//! compare PCM's state transfer rate with what the transport itself gives.
//!
//! ```text
//! OMPI_MCA_btl=self,tcp mpirun -np 2 mpi-pingpong --mb 64 --reps 3
//! ```
//!
//! Rank 0 sends `--mb` MiB to rank 1 (one message, as PCM does for a state under 1 GiB),
//! rank 1 answers with one byte; rank 0 prints one JSON line per repetition:
//! `{"event":"pingpong","bytes":..,"us":..,"gb_per_s":..}`.

use std::time::Instant;

use clap::Parser;
use pcm::mpi;
use pcm::mpi::traits::*;

/// Command line.
#[derive(Debug, Parser)]
struct Args {
    /// Message size in MiB.
    #[arg(long, default_value_t = 64)]
    mb: usize,
    /// Repetitions.
    #[arg(long, default_value_t = 3)]
    reps: usize,
}

fn main() {
    let args = Args::parse();
    let Some(universe) = mpi::initialize() else {
        eprintln!("mpi-pingpong: MPI initialization failed");
        std::process::exit(1);
    };
    let world = universe.world();
    if world.size() < 2 {
        eprintln!("mpi-pingpong: needs 2 ranks");
        std::process::exit(1);
    }
    let len = args.mb * (1 << 20) / 8;
    let mut buf = vec![1.0f64; len];
    for _ in 0..args.reps {
        world.barrier();
        match world.rank() {
            0 => {
                let t = Instant::now();
                world.process_at_rank(1).send(&buf[..]);
                let (_ack, _) = world.process_at_rank(1).receive::<u8>();
                let us = t.elapsed().as_secs_f64() * 1e6;
                let bytes = len * 8;
                let line = mpi_ios_bench_programs::BenchLine::Pingpong {
                    bytes: bytes as u64,
                    us,
                    gb_per_s: bytes as f64 / us / 1e3,
                };
                println!("{}", line.to_json());
            }
            1 => {
                world.process_at_rank(0).receive_into(&mut buf[..]);
                world.process_at_rank(0).send(&1u8);
            }
            _ => {}
        }
    }
}
