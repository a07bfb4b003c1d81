//! `mpi-calls`: the cost of one profiled MPI call, measured in a loop small enough to be
//! robust to a busy machine.
//!
//! ```text
//! PCM_DAEMON=none PCM_PROFILE=on mpirun -np 1 mpi-calls --loops 1000000
//! ```
//!
//! One rank sends a 240-double message to itself through [`pcm::Pcm::world`] the way heat2d
//! exchanges a halo (`Irecv`, `Isend`, then two `Wait`s: 4 wrapped calls per loop) and
//! prints `{"event":"mpi-calls","loops":..,"calls_per_loop":4,"ns_per_loop":..,
//! "cpu_ns_per_loop":..}` (wall and thread CPU time per loop). Run it with
//! `PCM_PROFILE=off` and `on` and compare: the difference divided by 4 is what the
//! profiling wrapper adds to one call.

use std::time::Instant;

use clap::Parser;
use pcm::mpi;
use pcm::mpi::traits::*;
use pcm::Pcm;

/// Command line.
#[derive(Debug, Parser)]
struct Args {
    /// Loops to time.
    #[arg(long, default_value_t = 1_000_000)]
    loops: u64,
}

/// CPU time of the calling thread: unlike wall time, not inflated when other work on a busy
/// machine preempts the loop.
fn thread_cpu_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    pcm::init_logging();
    let pcm = match Pcm::init("mpi-calls") {
        Ok(pcm) => pcm,
        Err(e) => {
            eprintln!("mpi-calls: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let me = pcm.world().process_at_rank(pcm.rank().0 as i32);
    let data = vec![1.0f64; 240];
    let mut buffer = vec![0.0f64; 240];
    let mut run = |loops: u64| {
        let started = Instant::now();
        let cpu_started = thread_cpu_ns();
        for _ in 0..loops {
            mpi::request::scope(|scope| {
                let received = me.immediate_receive_into(scope, &mut buffer[..]);
                let sent = me.immediate_send(scope, &data[..]);
                received.wait();
                sent.wait();
            });
        }
        (
            started.elapsed(),
            thread_cpu_ns().saturating_sub(cpu_started),
        )
    };
    run(args.loops / 10 + 1); // warm-up
    let (elapsed, cpu_ns) = run(args.loops);
    println!(
        "{{\"event\":\"mpi-calls\",\"loops\":{},\"calls_per_loop\":4,\"ns_per_loop\":{:.1},\"cpu_ns_per_loop\":{:.1}}}",
        args.loops,
        elapsed.as_nanos() as f64 / args.loops as f64,
        cpu_ns as f64 / args.loops as f64
    );
    pcm.finalize();
    std::process::ExitCode::SUCCESS
}
