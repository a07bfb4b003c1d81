//! `mpi-ios-bench`: benchmarks of PCM (see `docs/benchmarks.md` and `--help`).

mod profiling;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::{Args, Parser, Subcommand};
mod fig12;
mod fig13;
mod fig15;
mod fig17;
mod figs;

use mpi_ios_bench::{
    append_markdown, events, load_average, max, median, mem_available_bytes, min, try_bin, MpiJob,
    Pcmd, Table,
};

/// Benchmarks of MPI/IOS's process checkpointing and migration (PCM).
///
/// Every run goes through `mpirun` (Open MPI) with the project's settings (run as root
/// allowed, oversubscription for spawning, `mpi_yield_when_idle`, btl self,vader,tcp), with a
/// deadline; on timeout the whole process group is killed. The MPI programs (heat2d,
/// heat2d-plain, pcmd, pcm-state, mpi-pingpong) are taken from the directory of this
/// executable: build them first with `cargo build --release --bins`.
///
/// The machine has few cores, shared with other work: results are noisy. Run one benchmark
/// at a time, on an otherwise idle machine if possible.
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
    Overhead(OverheadArgs),
    /// Cost of one migration, broken down: spawn, merge+split, state transfer, plus the
    /// store (departing rank) and load (replacement) calls, for several state sizes.
    ///
    /// Runs `pcm-state` with `--ranks` ranks and a per-rank state of each size in MiB,
    /// moving ranks 1, 2, ... (never rank 0) `--moves` times through PCM_SCHEDULE; the
    /// phase times come from PCM's own outcome (maximum over ranks), reported per
    /// reconfiguration, and the table gives medians over the moves. Targets: fixed part
    /// (spawn + merge+split) <= 300 ms, state transfer >= 1 GB/s within one host (checked
    /// for states of 64 MiB and more; smaller ones are latency-bound). Sizes that do not fit
    /// in MemAvailable are skipped with a message. For comparison, each size also runs
    /// `mpi-pingpong` (one plain MPI send of the same size between two ranks over TCP
    /// loopback, the transport a spawned process reaches its parents by in Open MPI 4).
    Migration(MigrationArgs),
    /// The main job: heat2d on emulated nodes (network namespaces with CPU caps) with IOS
    /// agents; a CPU hog starts on one node, an idle node joins, and the agents move the
    /// slowed rank by themselves. Compared with static MPI under the same load and with the
    /// unloaded run (the physical limit); checksums must match bit for bit. Needs root.
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
    /// Issue 15: the unchanged agent core in the deterministic simulator on pools of 100,
    /// 1,000 and 10,000 nodes (heterogeneous, owners' load over time, joins and leaves),
    /// Internet-like and Grid-like networks, jobs with hypercube, tree, sparse and stencil
    /// exchanges; NSp2p, NSc2c, random stealing, no balancing and a central oracle. Prints
    /// throughput against the oracle, thrashing, messages per node per second, the
    /// simulator's wall time and memory, the targets as ratios; writes fig6-*, fig7-* and
    /// messages-per-node .svg/.png in --out. No MPI, no root.
    Scale(mpi_ios_bench::scale::ScaleArgs),
}

#[derive(Debug, Args)]
struct OverheadArgs {
    /// Interleaved pairs (one plain run, one PCM run) per size.
    #[arg(long, default_value_t = 7)]
    pairs: usize,
    /// Unmeasured pairs run first per size (warm caches).
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Ranks per run.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// Grid side of the ~100 us/iteration size.
    #[arg(long, default_value_t = 576)]
    small_size: usize,
    /// Iterations of the small size.
    #[arg(long, default_value_t = 20_000)]
    small_iters: u64,
    /// Grid side of the ~1 ms/iteration size.
    #[arg(long, default_value_t = 1448)]
    large_size: usize,
    /// Iterations of the large size.
    #[arg(long, default_value_t = 2_500)]
    large_iters: u64,
    /// CI mode: tiny grids (64x64, 128x128), 2 pairs, no warm-up.
    #[arg(long)]
    quick: bool,
    /// Deadline of each mpirun run, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Also append the table, as markdown, to this file.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
    /// The instrumented program: `heat2d` (Rust) or `heat2d-c` (C, built by
    /// scripts/build-c.sh); its plain version is the same name with `-plain`.
    #[arg(long, default_value = "heat2d", value_parser = ["heat2d", "heat2d-c"])]
    program: String,
}

#[derive(Debug, Args)]
struct MigrationArgs {
    /// State sizes per rank, in MiB, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,64,1024")]
    sizes: Vec<u64>,
    /// Ranks of the job (ranks 1..ranks-1 are moved in turn; at least 2).
    #[arg(long, default_value_t = 4)]
    ranks: usize,
    /// Migrations per size (one rank each); the table shows medians over them.
    #[arg(long, default_value_t = 3)]
    moves: usize,
    /// Iterations between two migrations.
    #[arg(long, default_value_t = 20)]
    spacing: u64,
    /// CI mode: sizes 1 and 8 MiB, 1 move.
    #[arg(long)]
    quick: bool,
    /// Base deadline of each mpirun run, in seconds (plus 0.3 s per MiB of state).
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Also append the table, as markdown, to this file.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The runs on emulated nodes stop at Ctrl-C and clean up their namespaces, cgroups and
    // processes (a second Ctrl-C ends at once); the other benchmarks end as usual.
    if matches!(
        cli.command,
        Command::Adaptive(_)
            | Command::Agents(_)
            | Command::Fig13(_)
            | Command::Fig15(_)
            | Command::Fig16(_)
    ) {
        if let Err(e) = mpi_ios_tests::stop_on_interrupt() {
            eprintln!("warning: Ctrl-C will not clean up the emulated nodes: {e}");
        }
    }
    let result = match cli.command {
        Command::Overhead(args) => overhead(args),
        Command::Migration(args) => migration(args),
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
        Command::Scale(args) => mpi_ios_bench::scale::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mpi-ios-bench: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// One heat2d report.
#[derive(Debug, serde::Deserialize)]
struct HeatReport {
    checksum: String,
    seconds: f64,
    iterations: u64,
    /// Migrations done (PCM runs only).
    #[serde(default)]
    migrations: Option<u64>,
}

fn heat_report(stdout: &str) -> Result<HeatReport> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("the run printed no JSON report")?;
    serde_json::from_str(line).with_context(|| format!("bad report line: {line}"))
}

struct SizeCase {
    side: usize,
    iters: u64,
    target: f64,
    label: &'static str,
}

fn overhead(mut args: OverheadArgs) -> Result<()> {
    if args.quick {
        args.small_size = 64;
        args.small_iters = 300;
        args.large_size = 128;
        args.large_iters = 100;
        args.pairs = 2;
        args.warmup = 0;
    }
    ensure!(args.pairs >= 1, "--pairs must be at least 1");
    let program = args.program.clone();
    let plain_name = format!("{program}-plain");
    let plain = try_bin(&plain_name)?;
    let pcm = try_bin(&program)?;
    let pcmd = Pcmd::spawn(&[], "info")?;
    let daemon = pcmd.socket.display().to_string();
    eprintln!("[overhead] pcmd serving on {daemon}");
    let timeout = Duration::from_secs(args.timeout);
    let load_before = load_average();
    let cases = [
        SizeCase {
            side: args.small_size,
            iters: args.small_iters,
            target: 1.03,
            label: "~100 us",
        },
        SizeCase {
            side: args.large_size,
            iters: args.large_iters,
            target: 1.01,
            label: "~1 ms",
        },
    ];

    let mut table = Table::new(&[
        "grid",
        "class",
        "iters",
        "pairs",
        "plain us/iter (median)",
        "pcm us/iter (median)",
        "ratio pcm/plain (median of pairs)",
        "ratio min",
        "ratio max",
        "whole process, pcm/plain (median)",
        "whole process, pcm without pcmd/plain (median)",
        "target",
        "result",
    ]);
    for case in &cases {
        let run_args: Vec<String> = [
            "--rows".to_owned(),
            case.side.to_string(),
            "--cols".to_owned(),
            case.side.to_string(),
            "--iters".to_owned(),
            case.iters.to_string(),
        ]
        .into();
        let plain_run = MpiJob::of(args.ranks, &plain, &run_args).env("PCM_DAEMON", "none");
        let pcm_run = MpiJob::of(args.ranks, &pcm, &run_args).env("PCM_DAEMON", daemon.clone());
        // PCM with no daemon at all: what a user who runs no pcmd pays.
        let alone_run = MpiJob::of(args.ranks, &pcm, &run_args).env("PCM_DAEMON", "none");
        let (mut plain_us, mut pcm_us, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let (mut wall_ratios, mut alone_wall_ratios) = (Vec::new(), Vec::new());
        let total = args.warmup + args.pairs;
        for pair in 0..total {
            let warm = pair < args.warmup;
            let p = plain_run.run_within(timeout)?.check(&plain_name)?;
            let q = pcm_run
                .run_within(timeout)?
                .check(&format!("{program} (PCM)"))?;
            let a = alone_run
                .run_within(timeout)?
                .check(&format!("{program} (PCM, no pcmd)"))?;
            let (walls, wall_q, wall_a) = (
                p.elapsed.as_secs_f64(),
                q.elapsed.as_secs_f64(),
                a.elapsed.as_secs_f64(),
            );
            let (p, q, a) = (
                heat_report(&p.stdout)?,
                heat_report(&q.stdout)?,
                heat_report(&a.stdout)?,
            );
            if p.checksum != q.checksum || p.checksum != a.checksum {
                bail!(
                    "checksums differ at {0}x{0}: plain {1}, pcm {2}, pcm without pcmd {3}",
                    case.side,
                    p.checksum,
                    q.checksum,
                    a.checksum
                );
            }
            ensure!(
                [p.iterations, q.iterations, a.iterations] == [case.iters; 3],
                "a run reported a wrong iteration count"
            );
            let (pu, qu) = (
                p.seconds / case.iters as f64 * 1e6,
                q.seconds / case.iters as f64 * 1e6,
            );
            eprintln!(
                "[overhead] {0}x{0} {1} {2}/{3}: plain {pu:.1} us/iter, pcm {qu:.1} us/iter, ratio {4:.4}; whole process: plain {walls:.3} s, pcm {wall_q:.3} s ({5:.4}), pcm without pcmd {wall_a:.3} s ({6:.4})",
                case.side,
                if warm { "warm-up" } else { "pair" },
                if warm { pair + 1 } else { pair + 1 - args.warmup },
                if warm { args.warmup } else { args.pairs },
                qu / pu,
                wall_q / walls,
                wall_a / walls
            );
            if !warm {
                plain_us.push(pu);
                pcm_us.push(qu);
                ratios.push(qu / pu);
                wall_ratios.push(wall_q / walls);
                alone_wall_ratios.push(wall_a / walls);
            }
        }
        let ratio = median(&ratios);
        let (wall, alone_wall) = (median(&wall_ratios), median(&alone_wall_ratios));
        table.push(vec![
            format!("{0}x{0}", case.side),
            case.label.to_owned(),
            case.iters.to_string(),
            args.pairs.to_string(),
            format!("{:.1}", median(&plain_us)),
            format!("{:.1}", median(&pcm_us)),
            format!("{ratio:.4}"),
            format!("{:.4}", min(&ratios)),
            format!("{:.4}", max(&ratios)),
            format!("{wall:.4}"),
            format!("{alone_wall:.4}"),
            format!("<= {:.2}", case.target),
            if args.quick {
                "n/a (quick)".to_owned()
            } else {
                pass(ratio.max(wall).max(alone_wall) <= case.target)
            },
        ]);
    }
    let notes = vec![format!(
        "Load average (1/5/15 min) before: {load_before}; after: {}.",
        load_average()
    )];
    println!(
        "PCM overhead: {program} (PCM + pcmd) vs {plain_name}, {} ranks",
        args.ranks
    );
    print!("{}", table.to_text());
    for note in &notes {
        println!("{note}");
    }
    if let Some(path) = &args.markdown {
        let title = format!(
            "PCM overhead: {program} vs {plain_name}, {} ranks{}",
            args.ranks,
            if args.quick { " (quick)" } else { "" }
        );
        append_markdown(path, &title, &table, &notes)?;
    }
    Ok(())
}

/// Per-size medians.
#[derive(Debug, Default)]
struct MoveStats {
    agree_ms: Vec<f64>,
    spawn_ms: Vec<f64>,
    merge_split_ms: Vec<f64>,
    transfer_ms: Vec<f64>,
    gb_per_s: Vec<f64>,
    store_ms: Vec<f64>,
    total_ms: Vec<f64>,
    load_ms: Vec<f64>,
    bytes: Vec<f64>,
}

fn field(v: &serde_json::Value, name: &str) -> Result<f64> {
    v.get(name)
        .and_then(serde_json::Value::as_f64)
        .with_context(|| format!("event without `{name}`: {v}"))
}

fn migration_run(
    program: &Path,
    args: &MigrationArgs,
    size_mb: u64,
    timeout: Duration,
) -> Result<MoveStats> {
    let schedule: Vec<String> = (1..=args.moves)
        .map(|k| {
            let rank = 1 + (k - 1) % (args.ranks - 1);
            format!("{}:{rank}", k as u64 * args.spacing)
        })
        .collect();
    let iters = (args.moves as u64 + 1) * args.spacing;
    let run_args = vec![
        "--state-mb".to_owned(),
        size_mb.to_string(),
        "--iters".to_owned(),
        iters.to_string(),
    ];
    let out = MpiJob::of(args.ranks, program, &run_args)
        .env("PCM_DAEMON", "none")
        .env("PCM_SCHEDULE", schedule.join(","))
        .run_within(timeout)?
        .check(&format!("pcm-state --state-mb {size_mb}"))?;
    let reconfigured = events(&out.stdout, "reconfigured");
    let stored = events(&out.stdout, "stored");
    let loaded = events(&out.stdout, "loaded");
    let done = events(&out.stdout, "done");
    ensure!(
        reconfigured.len() == args.moves
            && stored.len() == args.moves
            && loaded.len() == args.moves
            && done.len() == 1,
        "pcm-state {size_mb} MiB: expected {} reconfigured/stored/loaded events and one done, got \
         {}/{}/{}/{}\n--- stdout\n{}",
        args.moves,
        reconfigured.len(),
        stored.len(),
        loaded.len(),
        done.len(),
        out.stdout
    );
    let mut stats = MoveStats::default();
    for r in &reconfigured {
        let transfer_us = field(r, "state_transfer_us")?;
        let bytes = field(r, "state_bytes")?;
        stats.agree_ms.push(field(r, "agree_us")? / 1e3);
        stats.spawn_ms.push(field(r, "spawn_us")? / 1e3);
        stats.merge_split_ms.push(field(r, "merge_split_us")? / 1e3);
        stats.transfer_ms.push(transfer_us / 1e3);
        stats.gb_per_s.push(bytes / transfer_us.max(1.0) / 1e3);
        stats.bytes.push(bytes);
        stats.total_ms.push(field(r, "reconfigure_us")? / 1e3);
    }
    for s in &stored {
        stats.store_ms.push(field(s, "store_us")? / 1e3);
    }
    for l in &loaded {
        stats.load_ms.push(field(l, "load_us")? / 1e3);
    }
    Ok(stats)
}

fn migration(mut args: MigrationArgs) -> Result<()> {
    if args.quick {
        args.sizes = vec![1, 8];
        args.moves = 1;
    }
    ensure!(
        args.ranks >= 2,
        "--ranks must be at least 2 (rank 0 is never moved)"
    );
    ensure!(args.moves >= 1, "--moves must be at least 1");
    ensure!(args.spacing >= 2, "--spacing must be at least 2");
    let program = try_bin("pcm-state")?;
    let pingpong = try_bin("mpi-pingpong")?;
    let target = MigrationTarget::for_runtime(pcm::MpiFamily::BUILT_FOR);

    let mut table = Table::new(&[
        "state/rank",
        "moves",
        "spawn ms",
        "merge+split ms",
        "fixed ms (spawn+merge+split)",
        "transfer ms",
        "transfer GB/s",
        "store ms",
        "load ms",
        "agree ms",
        "rank 0 total ms",
        "baseline GB/s (MPI send, 2 ranks)",
        &format!("fixed <= {:.0} ms ({})", target.fixed_ms, target.runtime),
        &format!(
            "transfer >= {:.0} GB/s ({}, >= 64 MiB)",
            target.gb_per_s, target.runtime
        ),
    ]);
    let mut notes = Vec::new();
    let load_before = load_average();
    for &size_mb in &args.sizes {
        // Every rank's array, the departing rank's store copy, the replacement's receive
        // buffer, and room for MPI and the rest of the machine.
        let need = (args.ranks as u64 + 2) * size_mb * (1 << 20) + (1 << 30);
        if let Some(available) = mem_available_bytes() {
            if available < need {
                let note = format!(
                    "{size_mb} MiB per rank skipped: needs about {:.1} GiB, MemAvailable is {:.1} GiB",
                    need as f64 / f64::from(1 << 30),
                    available as f64 / f64::from(1 << 30)
                );
                eprintln!("[migration] {note}");
                table.push(vec![format!("{size_mb} MiB"), "skipped".to_owned()]);
                notes.push(note);
                continue;
            }
        }
        eprintln!(
            "[migration] {size_mb} MiB per rank, {} ranks, {} moves ...",
            args.ranks, args.moves
        );
        let timeout = Duration::from_secs(args.timeout) + Duration::from_millis(300 * size_mb);
        let s = migration_run(&program, &args, size_mb, timeout)?;
        let baseline = baseline_rate(&pingpong, size_mb, timeout)?;
        let (spawn, merge) = (median(&s.spawn_ms), median(&s.merge_split_ms));
        let fixed: Vec<f64> = s
            .spawn_ms
            .iter()
            .zip(&s.merge_split_ms)
            .map(|(a, b)| a + b)
            .collect();
        let fixed = median(&fixed);
        let rate = median(&s.gb_per_s);
        eprintln!(
            "[migration] {size_mb} MiB: spawn {spawn:.1} ms, merge+split {merge:.1} ms, \
             transfer {:.1} ms ({rate:.2} GB/s), store {:.1} ms, load {:.3} ms",
            median(&s.transfer_ms),
            median(&s.store_ms),
            median(&s.load_ms)
        );
        let store = median(&s.store_ms);
        if fixed > target.fixed_ms && store > 0.5 * spawn {
            notes.push(format!(
                "{size_mb} MiB: the spawn time ({spawn:.1} ms) includes waiting for the departing \
                 rank to store its state ({store:.1} ms): PCM times the spawn from when each rank \
                 enters it, the spawn itself runs meanwhile (compare the 'rank 0 total' with \
                 store + transfer)."
            ));
        }
        table.push(vec![
            format!("{size_mb} MiB"),
            args.moves.to_string(),
            format!("{spawn:.1}"),
            format!("{merge:.1}"),
            format!("{fixed:.1}"),
            format!("{:.1}", median(&s.transfer_ms)),
            format!("{rate:.2}"),
            format!("{:.1}", median(&s.store_ms)),
            format!("{:.3}", median(&s.load_ms)),
            format!("{:.1}", median(&s.agree_ms)),
            format!("{:.1}", median(&s.total_ms)),
            format!("{baseline:.2}"),
            if args.quick {
                "n/a (quick)".to_owned()
            } else {
                pass(fixed <= target.fixed_ms)
            },
            if size_mb >= 64 && !args.quick {
                pass(rate >= target.gb_per_s)
            } else {
                "n/a (latency-bound)".to_owned()
            },
        ]);
    }
    notes.push(format!(
        "Load average (1/5/15 min) before: {load_before}; after: {}.",
        load_average()
    ));
    println!(
        "PCM migration cost: pcm-state, {} ranks, medians over {} move(s) per size",
        args.ranks, args.moves
    );
    print!("{}", table.to_text());
    for note in &notes {
        println!("{note}");
    }
    if let Some(path) = &args.markdown {
        let title = format!(
            "PCM migration cost: pcm-state, {} ranks, medians over {} move(s){}",
            args.ranks,
            args.moves,
            if args.quick { " (quick)" } else { "" }
        );
        append_markdown(path, &title, &table, &notes)?;
    }
    Ok(())
}

/// Median rate of a plain MPI send of `size_mb` MiB between two ranks over TCP loopback, the
/// transport PCM's state transfer uses within one host (Open MPI 4's shared-memory btl does
/// not reach spawned processes).
fn baseline_rate(pingpong: &Path, size_mb: u64, timeout: Duration) -> Result<f64> {
    let args = vec![
        "--mb".to_owned(),
        size_mb.to_string(),
        "--reps".to_owned(),
        "3".to_owned(),
    ];
    let out = MpiJob::of(2, pingpong, &args)
        .env("OMPI_MCA_btl", "self,tcp")
        .run_within(timeout)?
        .check("mpi-pingpong")?;
    let rates = events(&out.stdout, "pingpong")
        .iter()
        .map(|e| field(e, "gb_per_s"))
        .collect::<Result<Vec<f64>>>()?;
    ensure!(!rates.is_empty(), "mpi-pingpong printed no result");
    Ok(median(&rates))
}

/// What one migration must achieve on the runtime the binaries were built for (issue 10
/// item 6): MPICH spawns in about 100 ms and moves state through UCX shared memory across
/// launches; Open MPI 4 spawns in about 230 ms and has only TCP between launches.
struct MigrationTarget {
    runtime: &'static str,
    fixed_ms: f64,
    gb_per_s: f64,
}

impl MigrationTarget {
    fn for_runtime(family: pcm::MpiFamily) -> Self {
        match family {
            pcm::MpiFamily::Mpich => MigrationTarget {
                runtime: "MPICH",
                fixed_ms: 150.0,
                gb_per_s: 3.0,
            },
            pcm::MpiFamily::OpenMpi => MigrationTarget {
                runtime: "Open MPI",
                fixed_ms: 300.0,
                gb_per_s: 1.0,
            },
            _ => MigrationTarget {
                runtime: "unknown MPI",
                fixed_ms: 300.0,
                gb_per_s: 1.0,
            },
        }
    }
}

fn pass(ok: bool) -> String {
    if ok { "PASS" } else { "MISS" }.to_owned()
}
