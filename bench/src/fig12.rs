//! `mpi-ios-bench fig12`: the paper's Figure 12 (section 6.3), the overhead of the PCM
//! layer: heat2d (PCM, a real pcmd serving the job, no migration) against heat2d-plain
//! (plain MPI) for several rank counts, with interleaved repeats so that slow drifts of a
//! shared machine hit both sides alike. Prints a table (median, min, max seconds per side,
//! overhead %) and writes a grouped bar chart with min..max whiskers.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use mpi_ios_bench::paired::{interleave, Variant};
use mpi_ios_bench::{
    append_markdown, load_average, max, median, min, try_program, MpiJob, Pcmd, Table,
};
use mpi_ios_plots::{Bar, BarChart, Layout};

/// Options of `fig12`.
#[derive(Debug, Args)]
pub(crate) struct Fig12Args {
    /// Rank counts to compare, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    ranks: Vec<usize>,
    /// Grid side (rows = columns).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Jacobi iterations per run.
    #[arg(long, default_value_t = 1500)]
    iters: u64,
    /// Measured repeats per rank count (each one plain run then one PCM run).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Unmeasured pairs run first per rank count.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Short run: 128x128 grid, 100 iterations, ranks 2 and 4, 2 repeats, no warm-up.
    #[arg(long)]
    quick: bool,
    /// Directory for the plot (fig12.svg, fig12.png); created if missing.
    #[arg(long, default_value = "target/figures")]
    out: PathBuf,
    /// Deadline of each mpirun run, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Also append the table, as markdown, to this file.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
}

/// Seconds of each side's measured runs for one rank count.
struct Sample {
    ranks: usize,
    plain: Vec<f64>,
    pcm: Vec<f64>,
    /// Whole-process wall time, PCM over plain, per pair.
    wall_ratios: Vec<f64>,
}

pub(crate) fn run(mut args: Fig12Args) -> Result<()> {
    if args.quick {
        args.size = 128;
        args.iters = 100;
        args.ranks = vec![2, 4];
        args.repeats = 2;
        args.warmup = 0;
    }
    ensure!(args.repeats >= 1, "--repeats must be at least 1");
    ensure!(!args.ranks.is_empty(), "--ranks is empty");
    if let Some(&r) = args.ranks.iter().find(|&&r| r == 0 || r > args.size) {
        bail!(
            "--ranks {r}: every rank count must be between 1 and the grid side {}",
            args.size
        );
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let plain = try_program("heat2d-plain")?;
    let pcm = try_program("heat2d")?;
    let pcmd = Pcmd::spawn(&[], "info")?;
    let daemon = pcmd.socket.display().to_string();
    let timeout = Duration::from_secs(args.timeout);
    let load_before = load_average();
    let run_args: Vec<String> = vec![
        "--rows".into(),
        args.size.to_string(),
        "--cols".into(),
        args.size.to_string(),
        "--iters".into(),
        args.iters.to_string(),
    ];

    let mut samples = Vec::new();
    for &ranks in &args.ranks {
        let variants = [
            Variant::new(
                "heat2d-plain",
                MpiJob::of(ranks, &plain, &run_args).env("PCM_DAEMON", "none"),
            ),
            Variant::new(
                "heat2d (PCM)",
                MpiJob::of(ranks, &pcm, &run_args).env("PCM_DAEMON", daemon.clone()),
            ),
        ];
        let what = format!("fig12 {ranks} ranks");
        let series = interleave(
            &what,
            &variants,
            args.iters,
            args.warmup,
            args.repeats,
            timeout,
        )?;
        samples.push(Sample {
            ranks,
            plain: series.loop_s(0),
            pcm: series.loop_s(1),
            wall_ratios: series.ratios(1, |m| m.wall_s),
        });
    }

    let mut table = Table::new(&[
        "ranks",
        "grid",
        "iters",
        "repeats",
        "plain s (median)",
        "plain min..max",
        "PCM s (median)",
        "PCM min..max",
        "overhead % (medians)",
        "overhead % (minima)",
        "overhead % (median of pairs)",
        "whole process overhead % (median of pairs)",
        "run-to-run spread % (IQR)",
        "paper: < 5%",
    ]);
    for s in &samples {
        let overhead = overhead_percent(median(&s.plain), median(&s.pcm));
        // Consecutive runs share the machine's mood: their ratio cancels slow drifts.
        let pairs: Vec<f64> = s
            .plain
            .iter()
            .zip(&s.pcm)
            .map(|(p, q)| overhead_percent(*p, *q))
            .collect();
        let by_pairs = median(&pairs);
        let noise = spread_percent(&s.plain).max(spread_percent(&s.pcm));
        table.push(vec![
            s.ranks.to_string(),
            format!("{0}x{0}", args.size),
            args.iters.to_string(),
            args.repeats.to_string(),
            format!("{:.4}", median(&s.plain)),
            format!("{:.4}..{:.4}", min(&s.plain), max(&s.plain)),
            format!("{:.4}", median(&s.pcm)),
            format!("{:.4}..{:.4}", min(&s.pcm), max(&s.pcm)),
            format!("{overhead:+.1}"),
            format!("{:+.1}", overhead_percent(min(&s.plain), min(&s.pcm))),
            format!("{by_pairs:+.1}"),
            format!("{:+.1}", (median(&s.wall_ratios) - 1.0) * 100.0),
            format!("{noise:.0}"),
            if args.quick {
                "n/a (quick)".to_owned()
            } else if noise > 10.0 {
                // A verdict on a 5% bound means nothing when runs differ by more than that.
                format!("inconclusive (noise {noise:.0}%)")
            } else if by_pairs < 5.0 {
                "yes".to_owned()
            } else {
                "no".to_owned()
            },
        ]);
    }
    let written = plot(&args, &samples)?;
    let notes = vec![
        format!(
            "Seconds are each run's own iteration-loop time (heat2d's JSON report); the whole \
             process column is mpirun's wall time, start to exit; runs interleaved plain, \
             PCM, plain, ...; {} warm-up pair(s) not counted. On a shared, \
             loaded machine the minima (best runs) are the steadier estimate of the cost. \
             Load average (1/5/15 min) before: {load_before}; after: {}.",
            args.warmup,
            load_average()
        ),
        format!("Plot: {}", written.svg.display()),
    ];
    println!(
        "Figure 12: PCM overhead, heat2d (PCM + pcmd) vs heat2d-plain, {0}x{0}, {1} iterations",
        args.size, args.iters
    );
    print!("{}", table.to_text());
    for note in &notes {
        println!("{note}");
    }
    if let Some(path) = &args.markdown {
        let title = format!(
            "Figure 12: PCM overhead, {0}x{0}, {1} iterations{2}",
            args.size,
            args.iters,
            if args.quick { " (quick)" } else { "" }
        );
        append_markdown(path, &title, &table, &notes)?;
    }
    Ok(())
}

/// Interquartile range over the median of `values`, in percent: how much runs of the same
/// program differ, robust to the odd run that met a burst of other work.
fn spread_percent(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let quantile = |q: f64| {
        // Linear interpolation between the closest ranks.
        let pos = q * (v.len().saturating_sub(1)) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
    };
    if v.is_empty() {
        return f64::NAN;
    }
    (quantile(0.75) - quantile(0.25)) / median(values) * 100.0
}

/// How much longer the PCM side took, in percent of the plain side.
fn overhead_percent(plain: f64, pcm: f64) -> f64 {
    (pcm / plain - 1.0) * 100.0
}

fn plot(args: &Fig12Args, samples: &[Sample]) -> Result<mpi_ios_plots::Written> {
    let categories: Vec<String> = samples
        .iter()
        .map(|s| {
            format!(
                "{} ranks ({:+.1}%)",
                s.ranks,
                overhead_percent(median(&s.plain), median(&s.pcm))
            )
        })
        .collect();
    let bars = |side: fn(&Sample) -> &Vec<f64>| -> Vec<Bar> {
        samples
            .iter()
            .map(|s| {
                let v = side(s);
                Bar::new(median(v)).spread(min(v), max(v))
            })
            .collect()
    };
    let chart = BarChart::new(
        format!(
            "PCM overhead: heat2d {0}x{0}, {1} iterations (median, min..max of {2})",
            args.size, args.iters, args.repeats
        ),
        categories,
    )
    .x_label("ranks (PCM overhead in %)")
    .y_label("execution time (s)")
    .layout(Layout::Grouped)
    .series("plain MPI (heat2d-plain)", bars(|s| &s.plain))
    .series("MPI/IOS PCM (heat2d + pcmd)", bars(|s| &s.pcm));
    Ok(chart.write(args.out.join("fig12"))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_is_relative_to_plain() {
        assert!((overhead_percent(2.0, 2.1) - 5.0).abs() < 1e-9);
        assert!(overhead_percent(2.0, 1.9) < 0.0);
        // Quartiles of 1..=5 are 2 and 4, the median 3; the outlier 100 does not count.
        assert!((spread_percent(&[1.0, 2.0, 3.0, 4.0, 5.0]) - 200.0 / 3.0).abs() < 1e-9);
        assert!((spread_percent(&[1.0, 1.0, 1.0, 1.0, 100.0])).abs() < 1e-9);
    }
}
