//! `world-helper`: a Rust program whose communication sits in a helper that takes
//! rsmpi's `SimpleCommunicator::world()` (the C `MPI_COMM_WORLD`) itself, as code written
//! for plain MPI does. With `--plain` it runs without PCM; without it, PCM drives it and
//! ranks may move (`PCM_SCHEDULE`). PCM's MPI wrappers must hand the helper's calls the
//! job's current world, so that the numbers printed are the plain run's, bit for bit
//! (tests/tests/comm_world.rs; the C twin is pcm/capi/tests/world_main.c).
//!
//! ```text
//! mpiexec -n 2 world-helper STEPS [--plain]
//! ```
//! Rank 0 prints `result ranks N steps S: x0 x1 ...` (each rank's value, exact).

use std::process::ExitCode;

use pcm::{Pcm, PcmError, State};

/// Code written for plain MPI: it names the world itself and knows nothing of PCM.
mod helper {
    use pcm::mpi::collective::SystemOperation;
    use pcm::mpi::point_to_point::Status;
    use pcm::mpi::topology::SimpleCommunicator;
    use pcm::mpi::traits::*;

    /// A ring exchange, an all-reduce and, every 8th step, a barrier on the world. Every
    /// value changes at each step and depends on its rank and its neighbour's, so a stale
    /// value, a wrong rank or a lost message changes the result.
    pub(crate) fn step(x: &mut f64, step: u64) {
        let world = SimpleCommunicator::world();
        let (rank, size) = (world.rank(), world.size());
        let mut left = *x;
        if size > 1 {
            let right = world.process_at_rank((rank + 1) % size);
            let from = world.process_at_rank((rank + size - 1) % size);
            // Even ranks send first, odd ones receive first: no reliance on buffering.
            if rank % 2 == 0 {
                right.send_with_tag(&*x, 7);
                let _: Status = from.receive_into_with_tag(&mut left, 7);
            } else {
                let _: Status = from.receive_into_with_tag(&mut left, 7);
                right.send_with_tag(&*x, 7);
            }
        }
        *x = 0.75 * *x + 0.25 * left + f64::from(rank + 1) / (step + 1) as f64;
        let mut sum = 0.0;
        world.all_reduce_into(&*x, &mut sum, SystemOperation::sum());
        *x += 1e-3 * sum;
        if step % 8 == 0 {
            world.barrier();
        }
    }

    /// Rank 0 prints every rank's value, exactly (the bits in hexadecimal).
    pub(crate) fn report(x: f64, steps: u64) {
        let world = SimpleCommunicator::world();
        let root = world.process_at_rank(0);
        if world.rank() == 0 {
            let mut all = vec![0.0f64; world.size() as usize];
            root.gather_into_root(&x, &mut all[..]);
            let values: Vec<String> = all
                .iter()
                .map(|v| format!("{:016x}", v.to_bits()))
                .collect();
            println!(
                "result ranks {} steps {steps}: {}",
                world.size(),
                values.join(" ")
            );
        } else {
            root.gather_into(&x);
        }
    }
}

/// The state a replacement needs (PCM keeps the step: [`Pcm::resume`] returns it).
struct Value {
    x: f64,
}

impl State for Value {
    fn store(&self, pcm: &mut Pcm) -> Result<(), PcmError> {
        pcm.store("x", &self.x)
    }

    fn load(pcm: &mut Pcm) -> Result<Self, PcmError> {
        Ok(Value { x: pcm.load("x")? })
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let plain = args.iter().any(|a| a == "--plain");
    let Some(steps) = args.iter().find_map(|a| a.parse::<u64>().ok()) else {
        eprintln!("usage: world-helper STEPS [--plain]");
        return ExitCode::FAILURE;
    };
    if plain {
        let Some(_universe) = pcm::mpi::initialize() else {
            eprintln!("world-helper: MPI_Init failed");
            return ExitCode::FAILURE;
        };
        let mut x = 1.0;
        for step in 0..steps {
            helper::step(&mut x, step);
        }
        helper::report(x, steps);
        return ExitCode::SUCCESS;
    }
    match run(steps) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("world-helper: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(steps: u64) -> Result<(), PcmError> {
    let mut pcm = Pcm::init("world-helper")?;
    let (mut value, start) = pcm.resume(|| Ok::<_, PcmError>(Value { x: 1.0 }))?;
    for step in start..steps {
        pcm.reconfigure_point(&mut value)?;
        helper::step(&mut value.x, step);
    }
    helper::report(value.x, steps);
    pcm.finalize();
    Ok(())
}
