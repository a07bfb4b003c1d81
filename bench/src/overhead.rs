//! `mpi-ios-bench overhead`: what PCM costs an application when nothing migrates. The plain
//! program against the instrumented one with a real pcmd serving it and with no pcmd at all,
//! interleaved ([`mpi_ios_bench::paired`]), at about 100 us and about 1 ms per iteration,
//! judged on the program's own loop time and on whole-process wall time. `--instructions`
//! counts instructions per iteration with callgrind instead (`overhead_instructions.rs`),
//! `--contention` runs the pair beside a CPU hog (`overhead_contention.rs`).

#[path = "overhead_callgrind.rs"]
mod callgrind;
#[path = "overhead_contention.rs"]
mod contention;
#[path = "overhead_instructions.rs"]
mod instructions;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Result};
use clap::Args;
use mpi_ios_bench::paired::{interleave, GridSizes, Variant};
use mpi_ios_bench::{
    append_markdown, load_average, max, median, min, try_program, MpiJob, Pcmd, Table,
};

use crate::pass;

#[derive(Debug, Args)]
pub(crate) struct OverheadArgs {
    /// Measured rounds per size (plain, PCM with pcmd, PCM without pcmd, interleaved).
    #[arg(long, default_value_t = 7)]
    pairs: usize,
    /// Unmeasured pairs run first per size (warm caches).
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Ranks per run.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    #[command(flatten)]
    sizes: GridSizes,
    /// Short run: tiny grids (64x64, 128x128), 2 pairs, no warm-up.
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
    /// Count instructions per iteration with callgrind instead of timing (deterministic:
    /// judged at 1%); prints a table and one JSON line with `instructions_ratio` per size,
    /// rank count and pcmd or not. Needs valgrind.
    #[arg(long, conflicts_with = "contention")]
    instructions: bool,
    /// With --instructions: the rank counts (the grid grows with them, so that each rank
    /// keeps the rows it has at 2 ranks).
    #[arg(long, value_delimiter = ',', default_value = "2,4")]
    rank_counts: Vec<usize>,
    /// With --instructions: measurements of each case (their agreement is reported).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// With --instructions: keep callgrind's files in this directory (for callgrind_annotate).
    #[arg(long, value_name = "DIR")]
    keep_callgrind: Option<PathBuf>,
    /// Run plain and PCM (with pcmd) alternately beside a CPU hog (the same sizes and
    /// iterations) and report the per-pair ratios' median and interquartile range.
    #[arg(long)]
    contention: bool,
    /// With --contention: busy loops in the hog.
    #[arg(long, default_value_t = 1)]
    hog_loops: usize,
}

/// The targets of the small and the large case (median ratios).
const TARGETS: [f64; 2] = [1.03, 1.01];

pub(crate) fn run(mut args: OverheadArgs) -> Result<()> {
    if args.quick {
        args.sizes.quick();
        args.pairs = 2;
        args.warmup = 0;
        args.repeats = args.repeats.min(2);
        args.rank_counts = vec![2];
    }
    if args.instructions {
        return instructions::run(&args);
    }
    if args.contention {
        return contention::run(&args);
    }
    ensure!(args.pairs >= 1, "--pairs must be at least 1");
    let program = args.program.clone();
    let plain_name = format!("{program}-plain");
    let plain = try_program(&plain_name)?;
    let pcm = try_program(&program)?;
    let pcmd = Pcmd::spawn(&[], "info")?;
    let daemon = pcmd.socket.display().to_string();
    eprintln!("[overhead] pcmd serving on {daemon}");
    let timeout = Duration::from_secs(args.timeout);
    let load_before = load_average();
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
    for (case, target) in args.sizes.cases().into_iter().zip(TARGETS) {
        let run_args = case.args();
        let variants = [
            Variant::new(
                plain_name.clone(),
                MpiJob::of(args.ranks, &plain, &run_args).env("PCM_DAEMON", "none"),
            ),
            Variant::new(
                format!("{program} (PCM)"),
                MpiJob::of(args.ranks, &pcm, &run_args).env("PCM_DAEMON", daemon.clone()),
            ),
            // What a user who runs no pcmd pays.
            Variant::new(
                format!("{program} (PCM, no pcmd)"),
                MpiJob::of(args.ranks, &pcm, &run_args).env("PCM_DAEMON", "none"),
            ),
        ];
        let what = format!("overhead {0}x{0}", case.side);
        let series = interleave(
            &what,
            &variants,
            case.iters,
            args.warmup,
            args.pairs,
            timeout,
        )?;
        let ratios = series.ratios(1, |m| m.loop_s);
        let ratio = median(&ratios);
        let wall = median(&series.ratios(1, |m| m.wall_s));
        let alone_wall = median(&series.ratios(2, |m| m.wall_s));
        table.push(vec![
            format!("{0}x{0}", case.side),
            case.label.to_owned(),
            case.iters.to_string(),
            args.pairs.to_string(),
            format!("{:.1}", median(&case.per_iter_us(&series.loop_s(0)))),
            format!("{:.1}", median(&case.per_iter_us(&series.loop_s(1)))),
            format!("{ratio:.4}"),
            format!("{:.4}", min(&ratios)),
            format!("{:.4}", max(&ratios)),
            format!("{wall:.4}"),
            format!("{alone_wall:.4}"),
            format!("<= {target:.2}"),
            if args.quick {
                "n/a (quick)".to_owned()
            } else {
                pass(ratio.max(wall).max(alone_wall) <= target)
            },
        ]);
    }
    let notes = vec![format!(
        "Load average (1/5/15 min) before: {load_before}; after: {}.",
        load_average()
    )];
    report(
        &format!("PCM overhead: {program} (PCM + pcmd, and without pcmd) vs {plain_name}"),
        &format!("PCM overhead: {program} vs {plain_name}"),
        &args,
        &table,
        &notes,
    )?;
    Ok(())
}

/// Prints a mode's table under `heading` and its notes, and appends them to `--markdown`
/// under `title`; both are followed by the rank count (and "(quick)" in the file).
pub(crate) fn report(
    heading: &str,
    title: &str,
    args: &OverheadArgs,
    table: &Table,
    notes: &[String],
) -> Result<()> {
    println!("{heading}, {} ranks", args.ranks);
    print!("{}", table.to_text());
    for note in notes {
        println!("{note}");
    }
    if let Some(path) = &args.markdown {
        let title = format!(
            "{title}, {} ranks{}",
            args.ranks,
            if args.quick { " (quick)" } else { "" }
        );
        append_markdown(path, &title, table, notes)?;
    }
    Ok(())
}
