//! `pcm-state`: a PCM application that does almost nothing but carry a large per-rank state,
//! so that migrating one of its ranks measures the cost of the migration itself.
//!
//! ```text
//! PCM_SCHEDULE=20:1,40:2,60:3 mpirun -x PCM_SCHEDULE -np 4 pcm-state --state-mb 64 --iters 80
//! ```
//!
//! Each rank holds an array of `--state-mb` MiB of `f64`, filled deterministically from its
//! rank; every iteration adds 1 to its first element and joins a barrier, so the state at
//! iteration `i` is known exactly. A departing rank stores the whole array; its replacement
//! loads it and checks its checksum against the expected one, aborting the job if they
//! differ. Every rank checks its state again at the end.
//!
//! The array is a `Vec<f64>` stored with `store_array` (a copy into PCM's store) and loaded
//! with `take_array`, or with `--shared` a [`pcm::SharedArray`] from `Pcm::alloc_array`,
//! stored with `store_shared` (no copy) and loaded with `take_shared` (on the same host, the
//! departing process's own pages).
//!
//! Stdout carries one JSON object per line:
//! - `{"event":"stored",...,"store_us":..}` from a departing rank (time of its store calls);
//! - `{"event":"loaded",...,"load_us":..}` from a replacement (time of `take_array`);
//! - `{"event":"reconfigured","iteration":..,"spawn_us":..,...}` from rank 0 after every
//!   reconfiguration (from `Pcm::last_outcome`, plus `reconfigure_us`, rank 0's own wall time
//!   in `reconfigure`); rank 0 must not be moved for this line;
//! - `{"event":"done",...}` from rank 0 at the end.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use mpi_ios_bench_programs::BenchLine;
use pcm::mpi::traits::*;
use pcm::{Pcm, PcmError, ProcessStatus, Reconfigured, Status};
use pcm_proto::Outcome;

/// Command line (replacements get the same arguments).
#[derive(Debug, Parser)]
#[command(about = "PCM app with a large per-rank state, for migration benchmarks")]
struct Args {
    /// State per rank, in MiB (1 MiB = 131072 f64).
    #[arg(long, default_value_t = 1)]
    state_mb: u64,
    /// Iterations (each: one local update and a barrier).
    #[arg(long, default_value_t = 100)]
    iters: u64,
    /// Keep the state in a PCM shared array (`alloc_array`, `store_shared`, `take_shared`)
    /// instead of a `Vec` (`store_array`, `take_array`).
    #[arg(long)]
    shared: bool,
    /// Sleep this long in every iteration (microseconds), to make a run last.
    #[arg(long, default_value_t = 0)]
    sleep_us: u64,
}

/// The state array, of either kind.
enum Array {
    Vec(Vec<f64>),
    Shared(pcm::SharedArray<f64>),
}

impl std::ops::Deref for Array {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        match self {
            Array::Vec(v) => v,
            Array::Shared(s) => s,
        }
    }
}

impl std::ops::DerefMut for Array {
    fn deref_mut(&mut self) -> &mut [f64] {
        match self {
            Array::Vec(v) => v,
            Array::Shared(s) => s,
        }
    }
}

/// Initial value of element `i` of `rank`'s state (exact in f64).
fn initial(rank: u32, i: usize) -> f64 {
    f64::from(rank) * 1e9 + i as f64
}

fn fnv_step(h: u64, x: f64) -> u64 {
    (h ^ x.to_bits()).wrapping_mul(0x0100_0000_01b3)
}

const FNV_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// Checksum of the data.
fn checksum(v: &[f64]) -> u64 {
    v.iter().fold(FNV_SEED, |h, &x| fnv_step(h, x))
}

/// Checksum the state of `rank` must have after `done` iterations.
fn expected_checksum(rank: u32, len: usize, done: u64) -> u64 {
    (0..len).fold(FNV_SEED, |h, i| {
        let mut x = initial(rank, i);
        if i == 0 {
            x += done as f64;
        }
        fnv_step(h, x)
    })
}

fn verify(pcm: &Pcm, v: &[f64], done: u64, len: usize, when: &str) {
    let rank = pcm.rank().0;
    if v.len() != len {
        eprintln!(
            "pcm-state: rank {rank} {when}: state has {} elements, expected {len}",
            v.len()
        );
        pcm.world().abort(3);
    }
    let (got, want) = (checksum(v), expected_checksum(rank, len, done));
    if got != want {
        eprintln!(
            "pcm-state: rank {rank} {when}: state checksum {got:016x} != expected {want:016x} \
             (after {done} iterations)"
        );
        pcm.world().abort(3);
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    pcm::init_logging();
    let pcm = match Pcm::init("pcm-state") {
        Ok(pcm) => pcm,
        Err(e) => {
            eprintln!("pcm-state: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(pcm, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pcm-state: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(mut pcm: Pcm, args: &Args) -> Result<(), PcmError> {
    let len = usize::try_from(args.state_mb * (1 << 20) / 8)
        .map_err(|_| PcmError::Internal("--state-mb too large"))?;
    let started = Instant::now();
    let (mut state, start) = match pcm.process_status() {
        ProcessStatus::Fresh => {
            let rank = pcm.rank().0;
            let v = if args.shared {
                let mut s = pcm.alloc_array::<f64>("state", len)?;
                for (i, x) in s.iter_mut().enumerate() {
                    *x = initial(rank, i);
                }
                Array::Shared(s)
            } else {
                Array::Vec((0..len).map(|i| initial(rank, i)).collect())
            };
            (v, 0)
        }
        ProcessStatus::Restarted { .. } => {
            return Err(PcmError::Internal(
                "pcm-state does not restart from checkpoints",
            ))
        }
        ProcessStatus::Added { .. } => {
            return Err(PcmError::Internal("pcm-state is not malleable"))
        }
        ProcessStatus::Replacement { rank, .. } => {
            let t = Instant::now();
            let v = if args.shared {
                Array::Shared(pcm.take_shared("state")?)
            } else {
                Array::Vec(pcm.take_array("state")?)
            };
            let load_us = t.elapsed().as_micros() as u64;
            let iteration: u64 = pcm.load("iteration")?;
            verify(&pcm, &v, iteration, len, "after loading");
            let loaded = BenchLine::Loaded {
                rank: rank.0,
                iteration,
                load_us,
                bytes: v.len() as u64 * 8,
                verified: true,
            };
            println!("{}", loaded.to_json());
            (v, iteration)
        }
    };

    for iteration in start..args.iters {
        match pcm.status()? {
            Status::Continue => {}
            status => {
                if status == Status::Migrate {
                    let t = Instant::now();
                    pcm.store("iteration", &iteration)?;
                    match &state {
                        Array::Vec(v) => pcm.store_array("state", v)?,
                        Array::Shared(s) => pcm.store_shared("state", s)?,
                    }
                    let store_us = t.elapsed().as_micros() as u64;
                    let stored = BenchLine::Stored {
                        rank: pcm.rank().0,
                        iteration,
                        store_us,
                        bytes: state.len() as u64 * 8,
                    };
                    println!("{}", stored.to_json());
                }
                let entered = Instant::now();
                match pcm.reconfigure()? {
                    Reconfigured::Continue(next) => pcm = next,
                    Reconfigured::Departed(departed) => {
                        drop(state);
                        departed.finalize();
                    }
                }
                if pcm.rank().0 == 0 {
                    print_outcome(&pcm, entered.elapsed().as_micros() as u64);
                }
            }
        }
        if let Some(first) = state.first_mut() {
            *first += 1.0;
        }
        if args.sleep_us > 0 {
            std::thread::sleep(std::time::Duration::from_micros(args.sleep_us));
        }
        pcm.world().barrier();
    }

    verify(&pcm, &state, args.iters, len, "at the end");
    pcm.world().barrier();
    if pcm.rank().0 == 0 {
        let done = BenchLine::Done {
            iterations: args.iters,
            migrations: pcm.migrations(),
            ranks: pcm.size(),
            state_bytes_per_rank: len as u64 * 8,
            seconds: started.elapsed().as_secs_f64(),
        };
        println!("{}", done.to_json());
    }
    pcm.finalize();
    Ok(())
}

/// Prints the outcome of the last reconfiguration; `reconfigure_us` is this rank's wall time
/// in `reconfigure`.
fn print_outcome(pcm: &Pcm, reconfigure_us: u64) {
    match pcm.last_outcome() {
        Some(Outcome::Completed {
            iteration, timings, ..
        }) => {
            let line = BenchLine::Reconfigured {
                iteration: *iteration,
                agree_us: timings.agree_us,
                spawn_us: timings.spawn_us,
                merge_split_us: timings.merge_split_us,
                state_transfer_us: timings.state_transfer_us,
                state_bytes: timings.state_bytes,
                reconfigure_us,
            };
            println!("{}", line.to_json());
        }
        Some(other) => {
            let line = BenchLine::ReconfigurationFailed {
                reason: other.failure().unwrap_or_default().to_owned(),
            };
            println!("{}", line.to_json());
        }
        None => {}
    }
}
