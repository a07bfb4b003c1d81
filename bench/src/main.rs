//! `mpi-ios-bench`: benchmarks of PCM (see `docs/benchmarks.md` and `--help`).

//! A thin dispatcher: each subcommand lives in its own module, the shared pieces in the
//! `mpi_ios_bench` library.

mod fig12;
mod fig13;
mod fig15;
mod fig17;
mod figs;
mod idle_pool;
mod migration;
mod overhead;
mod profiling;
mod resize;

use clap::{Parser, Subcommand};

/// Benchmarks of MPI/IOS's process checkpointing and migration (PCM).
///
/// Every run goes through the launcher of the MPI runtime the binaries were built for
/// (MPICH's hydra `mpiexec` by default, or Open MPI's `mpirun`, with the settings PCM jobs
/// need), with a deadline; on timeout the whole process group is killed. The MPI programs
/// (heat2d, heat2d-plain, pcmd, pcm-state, pcm-resize, mpi-pingpong) are taken from the
/// directory of this executable: build them first with `cargo build --release --bins`.
///
/// On a machine with few cores, or one shared with other work, the results are noisy: run
/// one benchmark at a time, on an otherwise idle machine if possible. Measured figures
/// against the paper and the targets: docs/results.md.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// PCM overhead during normal execution: heat2d (with PCM) against heat2d-plain (plain
    /// MPI), or the C pair with `--program heat2d-c`; interleaved runs (plain, PCM with a
    /// real pcmd serving the job, PCM with no pcmd; plain, ...).
    ///
    /// Two grid sizes on 2 ranks: about 100 us per iteration (576x576) and about 1 ms per
    /// iteration (1448x1448). Time per iteration comes from each run's own JSON report
    /// (`seconds` / iterations); whole-process wall time is mpirun's, start to exit. The
    /// checksums of all three must agree. The table gives the median time per iteration of
    /// each side, the median, min and max of the per-pair ratios pcm/plain, and the median
    /// whole-process ratios with and without pcmd, compared with the targets (<= 1.03 at
    /// ~100 us, <= 1.01 at ~1 ms; the result is judged on the largest of the three medians).
    /// `--instructions` counts instructions per iteration with callgrind instead (2 and 4
    /// ranks; deterministic, one JSON line with `instructions_ratio` per case);
    /// `--contention` runs the pair beside a CPU hog (median and IQR of the ratios).
    Overhead(overhead::OverheadArgs),
    /// Cost of one migration, broken down: spawn, merge+split, state transfer, plus the
    /// store (departing rank) and load (replacement) calls, for several state sizes.
    ///
    /// Runs `pcm-state` with `--ranks` ranks and a per-rank state of each size in MiB,
    /// moving ranks 1, 2, ... (never rank 0) `--moves` times through PCM_SCHEDULE; the
    /// phase times come from PCM's own outcome (maximum over ranks), reported per
    /// reconfiguration, and the table gives medians over the moves. On MPICH each size runs
    /// twice, the parents waiting for the replacement asleep (PCM's default) and spinning
    /// (`--spawn-waits`). Targets: fixed part (spawn + merge+split) <= 50 ms on MPICH, 300 ms
    /// on Open MPI; state transfer >= 3 GB/s (MPICH), 1 GB/s (Open MPI) within one host (checked
    /// for states of 64 MiB and more; smaller ones are latency-bound). Sizes that do not fit
    /// in MemAvailable are skipped with a message. For comparison, each size also runs
    /// `mpi-pingpong` (one plain MPI send of the same size between two ranks over TCP
    /// loopback, the transport a spawned process reaches its parents by in Open MPI 4).
    Migration(migration::MigrationArgs),
    /// Cost of growing and shrinking a malleable job (docs/malleability.md), by phase, beside
    /// a plain spawn and a migration.
    ///
    /// Runs `pcm-resize` (one distributed array of each `--sizes` MiB in total, declared with
    /// `Pcm::declare_block`) on 2 ranks through 2 -> 3 -> 2 -> 4 -> 2 (`PCM_SCHEDULE`, every
    /// `--spacing` iterations); beside it, in each round and in a rotating order, a plain
    /// `MPI_Comm_spawn_multiple` of 1 and of 2 processes from 2 (`pcm-resize --plain-spawn`,
    /// no PCM) and a migration of rank 1 of the same job at width 2. Phase times (spawn,
    /// merge+split, redistribution = PCM's state transfer) come from PCM's typed events
    /// (`PCM_EVENTS`); every resize must move exactly the rows that change owner under the
    /// block rule, and every process checks every element of its rows after each
    /// reconfiguration. The table gives medians over `--rounds` rounds, the ratios to the plain
    /// spawn and to the migration's transfer rate, and the target for growing by one:
    /// spawn + merge+split + redistribution <= 1.25 x plain spawn + the bytes moved at half the
    /// migration's transfer rate.
    Resize(resize::ResizeArgs),
    /// The main job: heat2d on emulated nodes (network namespaces with CPU caps) with IOS
    /// agents; a CPU hog starts on one node, an idle node joins, and the agents move the
    /// slowed rank by themselves. Compared with static MPI under the same load, with the
    /// unloaded run, and with the physical limit: the adaptive run's own progress until the
    /// capacity appears, then the best placement's speed under the same load. Checksums must
    /// match bit for bit. Needs root.
    Adaptive(mpi_ios_bench::adaptive::AdaptiveArgs),
    /// The IOS agents: time from load onset to a completed migration (an idle node in the
    /// pool, a CPU hog started on a node of the job; target under 5 s) and each agent's CPU
    /// use at steady state (target at most 0.2% of a core). Needs root.
    Agents(mpi_ios_bench::agents::AgentsArgs),
    /// MPI traffic profiling: the CPU cost the wrappers add to a halo-exchange loop
    /// (mpi-calls, 1 rank), heat2d with PCM_PROFILE=off vs on (interleaved pairs, both
    /// served by a pcmd; median of the per-pair ratios, and the ratio projected from the
    /// loop's cost; target <= 1.005), and pcmd's CPU use
    /// (all its threads, from /proc schedstat) over a window while a job of 8 ranks reports
    /// to it at the default 2 s stats period (target <= 0.2% of one core), with profiling
    /// off and on, next to an idle pcmd.
    Profiling(profiling::ProfilingArgs),
    /// Checkpoint throughput to local disk and to the buddy pcmd, in MB/s, side by side with
    /// the disk's own write+fsync speed and the TCP loopback's own speed, measured in the same
    /// run (see docs/checkpoints.md).
    Checkpoint(mpi_ios_bench::checkpoint::CheckpointArgs),
    /// Recovery by pcmrun after a rank is killed: time from the kill to the end of the failed
    /// launch and on to the resumed job, and the work lost, for checkpoint intervals of 2, 10
    /// and 60 s and states of 1, 64 and 512 MiB per rank (see docs/checkpoints.md).
    Recovery(mpi_ios_bench::recovery::RecoveryArgs),
    /// The paper's Figure 12: PCM overhead for 2, 4 and 8 ranks (heat2d vs heat2d-plain,
    /// interleaved repeats), as a table and a grouped bar chart (fig12.svg/png in --out).
    /// Paper: under 5%.
    Fig12(fig12::Fig12Args),
    /// The paper's Figures 17 and 18: total time with and without one reconfiguration
    /// (forced with PCM_SCHEDULE) over a range of grid sizes, the reconfiguration overhead
    /// in % of the total, and its breakdown (store, state transfer, load, agree, spawn,
    /// merge+split), as tables and bar charts (fig17, fig18 .svg/png in --out).
    /// Paper: overhead under 1% of the total.
    Fig17(fig17::Fig17Args),
    /// The paper's Figures 13 and 14: time per iteration over the run, static MPI vs MPI/IOS,
    /// when a CPU hog loads one node and an idle node joins; split into the work (the
    /// unloaded time per iteration) and the time lost to the load. Prints the phases, the
    /// unloaded time, the physical limit, adaptive/limit and the recovery time; writes
    /// fig13, fig14 and fig13-14-iteration-time .svg/.png in --out. Paper: 43% shorter
    /// (115.27 s against 203.97 s). Needs root.
    Fig13(fig13::Fig13Args),
    /// The paper's Figure 15: throughput over time, static MPI vs MPI/IOS, when a CPU hog
    /// loads one node and the agents move its rank to a cooperating node with room (no new
    /// node). Prints the unloaded time, the physical limit, adaptive/limit, the recovery
    /// time; writes fig15.svg/png in --out. Paper: 33% shorter than static MPI. Needs root.
    Fig15(fig15::Fig15Args),
    /// The paper's Figure 16: throughput over time, static MPI vs MPI/IOS, when the job runs
    /// on a fast and a slow node and a fast node joins; the agents should move the slow
    /// node's rank to it. A faster node is emulated by a larger cgroup CPU cap. Same
    /// yardsticks as fig15; writes fig16.svg/png. Paper: 79% shorter. Needs root.
    Fig16(fig15::Fig16Args),
    /// The IOS agents at scale: the agents' own decision code in a deterministic simulator,
    /// on pools of 100, 1,000 and 10,000 nodes (heterogeneous, owners' load over time,
    /// joins and leaves), Internet-like and Grid-like networks, jobs with hypercube, tree,
    /// sparse and stencil exchanges; NSp2p, NSc2c, random stealing, no balancing and a
    /// central oracle. Prints throughput against the oracle, thrashing, messages per node
    /// per second, the simulator's wall time and memory, the targets as ratios; writes
    /// fig6-*, fig7-* and messages-per-node .svg/.png in --out. No MPI, no root.
    Scale(mpi_ios_bench::scale_command::ScaleArgs),
    /// What an idle pool of real IOS agents costs, on loopback (a peer server, N agents and
    /// their pcmds): time until every agent has every other in its peer table (the full
    /// mesh), CPU and memory per agent and per pcmd, messages per agent and second; one
    /// JSON line.
    IdlePool(idle_pool::IdlePoolArgs),
    /// Real IOS agents in emulated wide-area sites (network namespaces joined by a delay
    /// router, round trips in the paper's tiers) with peer servers and churn (leaves, kills,
    /// joins, a peer server killed): mesh time, tier accuracy, CPU, memory, messages and
    /// bytes per agent, recovery; writes summary.json in --out. Needs root and /dev/net/tun.
    Pool(mpi_ios_bench::pool::PoolArgs),
    /// A stand-in for one rank before a node's pcmd, with no MPI (the pool's synthetic
    /// load): computes, reports profiles, writes each reconfiguration asked of it as a JSON
    /// line and refuses it.
    #[command(hide = true)]
    SyntheticRank(mpi_ios_bench::synthetic_rank::SyntheticRankArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The simulated agents' own log (`scale`), for tracing a decision: off unless RUST_LOG
    // asks for it, since a simulated hour of 100 agents logs millions of lines at debug.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .without_time()
            .init();
    }
    // The runs on emulated nodes stop at Ctrl-C and clean up their namespaces, cgroups and
    // processes (a second Ctrl-C ends at once); the other benchmarks end as usual.
    if matches!(
        cli.command,
        Command::Adaptive(_)
            | Command::Agents(_)
            | Command::Fig13(_)
            | Command::Fig15(_)
            | Command::Fig16(_)
            | Command::Pool(_)
    ) {
        if let Err(e) = mpi_ios_tests::stop_on_interrupt() {
            eprintln!("warning: Ctrl-C will not clean up the emulated nodes: {e}");
        }
    }
    if !matches!(cli.command, Command::Scale(_) | Command::SyntheticRank(_)) {
        if let Err(e) = runtime_matches_build() {
            eprintln!("mpi-ios-bench: error: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    let result = match cli.command {
        Command::Overhead(args) => overhead::run(args),
        Command::Migration(args) => migration::run(args),
        Command::Resize(args) => resize::run(args),
        Command::Adaptive(args) if args.malleable => mpi_ios_bench::malleable_act::run(&args),
        Command::Adaptive(args) => mpi_ios_bench::adaptive::run(args),
        Command::Agents(args) => mpi_ios_bench::agents::run(args),
        Command::Profiling(args) => profiling::run(args),
        Command::Checkpoint(args) => mpi_ios_bench::checkpoint::run(args),
        Command::Recovery(args) => mpi_ios_bench::recovery::run(args),
        Command::Fig12(args) => fig12::run(args),
        Command::Fig17(args) => fig17::run(args),
        Command::Fig13(args) => fig13::run(args),
        Command::Fig15(args) => fig15::run15(args),
        Command::Fig16(args) => fig15::run16(args),
        Command::Scale(args) => mpi_ios_bench::scale_command::run(args),
        Command::IdlePool(args) => idle_pool::run(args),
        Command::Pool(args) => mpi_ios_bench::pool::run(args),
        Command::SyntheticRank(args) => mpi_ios_bench::synthetic_rank::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mpi-ios-bench: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The launcher the harness picks (`MPI_IOS_RUNTIME`, which `scripts/setup.sh` exports) must
/// be the runtime these binaries were built for: otherwise every run fails with the other
/// runtime's message, which names neither cause nor fix.
fn runtime_matches_build() -> Result<(), String> {
    use mpi_ios_tests::{Runtime, RuntimeExt as _};
    let launcher = Runtime::try_current()?;
    let built = match pcm::MpiFamily::BUILT_FOR {
        pcm::MpiFamily::Mpich => Runtime::Mpich,
        _ => Runtime::OpenMpi,
    };
    if launcher == built {
        return Ok(());
    }
    let name = |r: Runtime| match r {
        Runtime::Mpich => "mpich",
        Runtime::OpenMpi => "openmpi",
    };
    Err(format!(
        "these binaries were built for {} but MPI_IOS_RUNTIME selects {} ({}): run \
         `MPI_IOS_RUNTIME={} source scripts/setup.sh` first, in this shell",
        name(built),
        name(launcher),
        launcher.launcher().display(),
        name(built)
    ))
}

fn pass(ok: bool) -> String {
    if ok { "PASS" } else { "MISS" }.to_owned()
}
