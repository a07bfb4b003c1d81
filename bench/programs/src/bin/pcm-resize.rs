//! `pcm-resize`: a malleable PCM application that does nothing but carry one distributed
//! array, so that growing and shrinking it (and migrating one of its ranks) measures the
//! reconfiguration itself; and, with `--plain-spawn`, a plain `MPI_Comm_spawn` of the same
//! program to compare the spawn with.
//!
//! ```text
//! PCM_SCHEDULE=10:size=3,20:size=2,30:size=4,40:size=2 PCM_EVENTS=/tmp/ev.jsonl \
//!     mpiexec -n 2 pcm-resize --mb 16 --iters 50
//! PCM_SCHEDULE=10:1 PCM_EVENTS=/tmp/ev.jsonl mpiexec -n 2 pcm-resize --mb 16 --iters 20
//! mpiexec -n 2 pcm-resize --plain-spawn 1,2
//! ```
//!
//! The array `grid` is `--mb` MiB of `f64` in total, in rows of `--row-len` elements,
//! declared with `Pcm::declare_block` (the job with `Pcm::set_malleable`, 1 to `--max`
//! ranks). Element `c` of global row `r` holds `r * row_len + c` (exact in `f64`), a pure
//! function of its place, so every process can check the rows it holds without being told
//! anything. Each iteration is one barrier.
//!
//! At a resize every rank stores its rows with `store_block` and, if it stays, takes its new
//! rows back with `take_array` (`block_range` says which); an added process takes its rows at
//! start, a replacement of a migration likewise (its rank's rows, stored with `store_array`).
//! After every reconfiguration, and at the end, every process of the world checks every
//! element of its rows and prints a `rows_checked` line; a wrong length or value aborts the
//! job (exit 3) naming the rank, row and values. Rank 0 prints `resize_done` at the end.
//! The phase times are in PCM's typed events (`PCM_EVENTS`), not here.
//!
//! `--plain-spawn 1,2` uses no PCM: for each count, after a barrier, the world spawns that
//! many copies of this program with one `MPI_Comm_spawn_multiple` rooted at rank 0, as PCM
//! spawns added processes, agrees on the result, and rank 0 prints a `spawned` line with the
//! slowest parent's time. Untimed, the children (`--spawned-child`: they initialise MPI and
//! nothing more) then join a barrier with the parents and disconnect.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use mpi_ios_bench_programs::BenchLine;
use pcm::mpi::collective::SystemOperation;
use pcm::mpi::traits::*;
use pcm::{Malleability, Pcm, PcmError, ProcessStatus, Reconfigured, SizeRule, Status};

/// The distributed array's name.
const GRID: &str = "grid";

/// Command line (added processes and replacements get the same arguments).
#[derive(Debug, Parser)]
#[command(about = "Malleable PCM app with one distributed array, for resize benchmarks")]
struct Args {
    /// Size of the distributed array, all ranks together, in MiB.
    #[arg(long, default_value_t = 16)]
    mb: u64,
    /// Elements (`f64`) per row.
    #[arg(long, default_value_t = 1024)]
    row_len: u64,
    /// Iterations (each: one barrier).
    #[arg(long, default_value_t = 50)]
    iters: u64,
    /// Largest width the job may grow to.
    #[arg(long, default_value_t = 64)]
    max: u32,
    /// Least width the job may shrink to.
    #[arg(long, default_value_t = 1)]
    min: u32,
    /// Only widths that are a multiple of this (the job's size rule; 1: any width).
    #[arg(long, default_value_t = 1)]
    multiple_of: u32,
    /// No PCM: time plain spawns of this many processes each, in turn (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "COUNTS")]
    plain_spawn: Vec<u32>,
    /// Internal: a process started by `--plain-spawn`.
    #[arg(long, hide = true)]
    spawned_child: bool,
}

impl Args {
    /// Global rows of the array.
    fn rows(&self) -> u64 {
        (self.mb << 20) / (self.row_len * 8).max(1)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.spawned_child || !args.plain_spawn.is_empty() {
        return plain_spawn(&args);
    }
    pcm::init_logging();
    let pcm = match Pcm::init("pcm-resize") {
        Ok(pcm) => pcm,
        Err(e) => {
            eprintln!("pcm-resize: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(pcm, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pcm-resize: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The value of element `col` of global row `row`.
fn expected(row: u64, row_len: u64, col: u64) -> f64 {
    (row * row_len + col) as f64
}

/// This rank's rows, filled.
fn fill(rows: std::ops::Range<u64>, row_len: u64) -> Vec<f64> {
    rows.flat_map(|r| (0..row_len).map(move |c| expected(r, row_len, c)))
        .collect()
}

/// Checks that `mine` holds exactly this rank's rows with their values, aborting the job if
/// not; prints a `rows_checked` line.
fn check(pcm: &Pcm, mine: &[f64], row_len: u64, iteration: u64, when: &str) {
    let rank = pcm.rank().0;
    let rows = match pcm.block_range(GRID) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("pcm-resize: rank {rank} {when}: {e}");
            pcm.world().abort(3)
        }
    };
    let want = (rows.end - rows.start) * row_len;
    if mine.len() as u64 != want {
        eprintln!(
            "pcm-resize: rank {rank} of {} {when}: holds {} elements, but its rows {}..{} are {want}",
            pcm.size(),
            mine.len(),
            rows.start,
            rows.end
        );
        pcm.world().abort(3);
    }
    for (k, row) in mine.chunks_exact(row_len as usize).enumerate() {
        let global = rows.start + k as u64;
        for (c, &got) in row.iter().enumerate() {
            let want = expected(global, row_len, c as u64);
            if got.to_bits() != want.to_bits() {
                eprintln!(
                    "pcm-resize: rank {rank} of {} {when}: row {global} element {c} holds {got}, expected {want}",
                    pcm.size()
                );
                pcm.world().abort(3);
            }
        }
    }
    let line = BenchLine::RowsChecked {
        rank,
        size: pcm.size(),
        first_row: rows.start,
        rows: rows.end - rows.start,
        iteration,
    };
    println!("{}", line.to_json());
}

fn run(mut pcm: Pcm, args: &Args) -> Result<(), PcmError> {
    let rows = args.rows();
    let rule = match args.multiple_of {
        1 => SizeRule::Any,
        k => SizeRule::MultipleOf(k),
    };
    pcm.set_malleable(Malleability::new(args.min, args.max)?.with_rule(rule))?;
    pcm.declare_block::<f64>(GRID, rows, args.row_len)?;
    let (mut mine, start) = match pcm.process_status() {
        ProcessStatus::Fresh => (fill(pcm.block_range(GRID)?, args.row_len), 0),
        ProcessStatus::Added { iteration } | ProcessStatus::Replacement { iteration, .. } => {
            let mine = pcm.take_array::<f64>(GRID)?;
            check(&pcm, &mine, args.row_len, iteration, "after starting");
            (mine, iteration)
        }
        ProcessStatus::Restarted { .. } => {
            return Err(PcmError::Internal(
                "pcm-resize does not restart from checkpoints",
            ))
        }
    };

    for iteration in start..args.iters {
        let status = pcm.status()?;
        if status != Status::Continue {
            match status {
                Status::Resize => pcm.store_block(GRID, &mine)?,
                Status::Migrate => pcm.store_array(GRID, &mine)?,
                _ => {}
            }
            match pcm.reconfigure()? {
                Reconfigured::Continue(next) => pcm = next,
                Reconfigured::Departed(departed) => {
                    drop(mine);
                    departed.finalize();
                }
            }
            if status == Status::Resize && pcm.resizing() {
                mine = pcm.take_array::<f64>(GRID)?;
            }
            check(&pcm, &mine, args.row_len, iteration, "after reconfiguring");
        }
        pcm.world().barrier();
    }

    check(&pcm, &mine, args.row_len, args.iters, "at the end");
    pcm.world().barrier();
    if pcm.rank().0 == 0 {
        let done = BenchLine::ResizeDone {
            iterations: args.iters,
            resizes: pcm.resizes(),
            ranks: pcm.size(),
            rows,
            row_len: args.row_len,
        };
        println!("{}", done.to_json());
    }
    pcm.finalize();
    Ok(())
}

/// `--plain-spawn`: plain MPI, no PCM (see the module documentation).
fn plain_spawn(args: &Args) -> ExitCode {
    let Some(universe) = pcm::mpi::initialize() else {
        eprintln!("pcm-resize: MPI initialization failed");
        return ExitCode::FAILURE;
    };
    if args.spawned_child {
        // Disconnect from the parents here: rsmpi 0.8's own disconnect of the parent, when
        // the universe is dropped, disconnects one handle twice (MPICH aborts with "Invalid
        // communicator"). Once it is disconnected, MPI_Comm_get_parent gives MPI_COMM_NULL
        // and the drop only finalizes.
        // First a barrier with them: a child gone before every parent has connected to it
        // fails the spawn on that parent (UCX cannot open its shared memory any more).
        if let Some(parent) = universe.world().parent() {
            parent.barrier();
        }
        drop(universe);
        return ExitCode::SUCCESS;
    }
    let Ok(program) = std::env::current_exe() else {
        eprintln!("pcm-resize: cannot find own executable");
        return ExitCode::FAILURE;
    };
    let world = universe.world();
    for &count in &args.plain_spawn {
        world.barrier();
        let started = Instant::now();
        let commands: Vec<std::process::Command> = (0..count)
            .map(|_| {
                let mut command = std::process::Command::new(&program);
                command.arg("--spawned-child");
                command
            })
            .collect();
        let maxprocs = vec![1; count as usize];
        let spawned = world
            .process_at_rank(0)
            .spawn_multiple(&commands, &maxprocs);
        let ok_here = u64::from(spawned.is_ok());
        let mut ok_everywhere = 0u64;
        world.all_reduce_into(&ok_here, &mut ok_everywhere, SystemOperation::min());
        let local_us = started.elapsed().as_micros() as u64;
        if ok_everywhere != 1 {
            let why = spawned
                .err()
                .map_or("on another rank".to_owned(), |e| e.to_string());
            eprintln!("pcm-resize: plain spawn of {count} processes failed: {why}");
            world.abort(4);
        }
        let mut slowest_us = 0u64;
        world.all_reduce_into(&local_us, &mut slowest_us, SystemOperation::max());
        if world.rank() == 0 {
            let line = BenchLine::Spawned {
                parents: world.size() as u32,
                processes: count,
                spawn_us: slowest_us,
            };
            println!("{}", line.to_json());
        }
        // Not timed: a barrier with the children (see `--spawned-child`), then the
        // disconnect (dropping the intercommunicator).
        if let Ok(children) = spawned {
            children.barrier();
        }
    }
    drop(universe);
    ExitCode::SUCCESS
}
