//! `mpi-ios-bench fig13`: the paper's Figures 13 and 14 (section 6.3), the time of heat2d's
//! iterations over the run, static MPI (Figure 13) against MPI/IOS (Figure 14), when one node
//! gets loaded mid-run and a new node joins.
//!
//! Three emulated nodes with the same CPU cap; the ranks start on node-a and node-b, a CPU
//! hog starts on node-b, then node-c's agent joins (idle). Under MPI/IOS the agents should
//! move node-b's rank to node-c.
//!
//! The breakdown: the time per iteration in each slice of the run is measured (rank 0's
//! progress events, time-stamped by the job); it is split into the work, taken as the
//! unloaded run's mean time per iteration (what an iteration costs when nothing slows the
//! job), and the rest, the time lost to the load: rank 0 waiting in MPI for the slowed rank,
//! and under MPI/IOS the migration itself. The split is derived, not read from inside the
//! ranks: heat2d-plain has no profiling, and the same yardstick is used for both runs.
//! Writes `fig13` (static) and `fig14` (adaptive) stacked bar charts, and
//! `fig13-14-iteration-time` (both curves and the unloaded one, with the events marked at
//! the iteration they happened), plus the yardsticks of [`crate::figs`].

use std::time::Duration;

use anyhow::{ensure, Result};
use clap::Args;
use mpi_ios_bench::{append_markdown, Table};
use mpi_ios_plots::{Bar, BarChart, Event as PlotEvent, Layout, TimePlot};
use mpi_ios_tests::scenario::{EventKind, Hog, Length, Outcome, Scenario};

use crate::figs::{self, Experiment, FigArgs, FigHelp, Paper};

/// Options of `fig13`.
#[derive(Debug, Args)]
pub(crate) struct Fig13Args {
    #[command(flatten)]
    common: FigArgs<Fig13Help>,
    /// CPU cap of every node, in cores.
    #[arg(long, default_value_t = 0.6)]
    cap: f64,
    /// Seconds after the start at which the CPU hog starts on node-b.
    #[arg(long, default_value_t = 5.0)]
    load_at: f64,
    /// Seconds after the start at which node-c's agent joins (adaptive run only).
    #[arg(long, default_value_t = 7.0)]
    join_at: f64,
    /// Slices of the run in the bar charts.
    #[arg(long, default_value_t = 20)]
    slices: usize,
}

/// The help of `fig13`'s options that say something of it.
#[derive(Debug)]
struct Fig13Help;

impl FigHelp for Fig13Help {
    const QUICK: &'static str = "Short run for CI: 6 s unloaded, load at 1.5 s, join at 2.5 s";
    const CHECK: &'static str = "Fail unless the checksums match and the ranks end on nodes \
        other than the loaded node-b, one of them on node-c";
    const MARKDOWN: &'static str = "Also append the tables, as markdown, to this file";
}

/// Runs Figures 13 and 14.
pub(crate) fn run(mut args: Fig13Args) -> Result<()> {
    if args.common.quick {
        args.common.seconds = 6.0;
        args.load_at = 1.5;
        args.join_at = 2.5;
    }
    ensure!(
        args.cap > 0.0 && args.cap <= 4.0,
        "--cap {} must be in (0, 4] cores",
        args.cap
    );
    ensure!(
        (1..=200).contains(&args.slices),
        "--slices {} must be in 1..=200",
        args.slices
    );
    ensure!(
        args.common.iters.is_none_or(|n| n >= args.slices as u64),
        "--iters must be at least --slices"
    );
    let c = &args.common;
    let mut exp = Experiment {
        name: "fig13",
        title: format!(
            "Figures 13/14: heat2d {0}x{0}, caps {1}, hog on node-b at {2} s, node-c joins at {3} s",
            c.size, args.cap, args.load_at, args.join_at
        ),
        caps: vec![args.cap; 3],
        scenario: Scenario {
            rows: c.size,
            cols: c.size,
            iters: 0,
            progress_period: mpi_ios_tests::scenario::PROGRESS_PERIOD,
            placement: vec![0, 1],
            agents_at_start: vec![0, 1],
            hog: Some(Hog::on(1, figs::secs(args.load_at))),
            joins: vec![(2, figs::secs(args.join_at))],
            leaves: Vec::new(),
            agent_options: figs::agent_options(args.load_at),
            timeout: Duration::from_secs(c.timeout),
            unlisted_spares: false,
        },
        length: Length::from_options(c.iters, c.seconds),
        // Ranks on node-a and node-c under node-b's hog: every node has the same cap, but
        // the hog takes CPU from the machine's two cores, which the unloaded run does not
        // (MPICH, 10 ms quota periods, 2026-11-27: 789 it/s once the hog ran, against 1228
        // unloaded).
        best_placement: Some(vec![0, 2]),
        outlast_s: None,
        paper: Paper {
            shorter_pct: 43.0,
            seconds: Some((203.97, 115.27)),
        },
    };
    figs::platform()?;
    let out = figs::out_dir(&c.out)?;
    let logs = figs::logs_dir(exp.name)?;
    let runs = figs::run(&mut exp, logs.path(), c.quiet)?;
    let iters = exp.scenario.iters;
    let y = figs::yardsticks(&exp, &runs);
    let work_ms = 1e3 * runs.unloaded.report.seconds / iters as f64;

    let phases = phase_table(&runs.static_run, &runs.adaptive, &runs.unloaded);
    let summary = figs::summary_table(&exp, &runs, &y);
    let (mut notes, same) = figs::summary_notes(&exp, &runs, &y);
    for (host, d) in runs
        .adaptive
        .decisions
        .iter()
        .filter(|(_, d)| d.what.is_migration())
    {
        notes.push(format!("Agent on {host}: {}", d.what));
    }

    let slices = |o: &Outcome| slices(o, iters, args.slices);
    let (static_slices, adaptive_slices) = (slices(&runs.static_run), slices(&runs.adaptive));
    let fig13 = breakdown_chart(
        &format!(
            "Figure 13: static MPI (heat2d-plain), time per iteration, hog on node-b at {} s",
            args.load_at
        ),
        &static_slices,
        work_ms,
    )
    .write(out.join("fig13"))?;
    let fig14 = breakdown_chart(
        &format!(
            "Figure 14: MPI/IOS (heat2d + agents), time per iteration, hog on node-b at {} s, node-c joins at {} s",
            args.load_at, args.join_at
        ),
        &adaptive_slices,
        work_ms,
    )
    .write(out.join("fig14"))?;
    let curves = TimePlot::new(format!(
        "Figures 13/14: time per iteration, heat2d {0}x{0}, static MPI vs MPI/IOS",
        c.size
    ))
    .x_label("iteration")
    .y_label("time per iteration (ms)")
    .series(
        "static MPI (heat2d-plain)",
        ms_per_iteration(&runs.static_run),
    )
    .series(
        "MPI/IOS (heat2d + IOS agents)",
        ms_per_iteration(&runs.adaptive),
    )
    .series("unloaded (no load)", ms_per_iteration(&runs.unloaded))
    .events(events_by_iteration(&runs.adaptive))
    .write(out.join("fig13-14-iteration-time"))?;
    notes.push(format!(
        "Breakdown: each slice's time per iteration is measured (rank 0's progress events); \
         the work part is the unloaded run's mean, {work_ms:.3} ms per iteration, the rest \
         is time lost to the load (waiting for the slowed rank, and the migration)."
    ));
    notes.push(format!(
        "Plots: {}, {}, {} (and .png). Logs: {}.",
        fig13.svg.display(),
        fig14.svg.display(),
        curves.svg.display(),
        out.join("logs").join(exp.name).display()
    ));
    notes.push(format!(
        "Load average (1/5/15 min) at the end: {}.",
        mpi_ios_bench::load_average()
    ));

    println!();
    println!("{}", exp.title);
    print!("{}", summary.to_text());
    println!();
    print!("{}", phases.to_text());
    for n in &notes {
        println!("{n}");
    }
    if let Some(md) = &c.markdown {
        let q = if c.quick { " (quick)" } else { "" };
        append_markdown(md, &format!("{}{q}", exp.title), &summary, &[])?;
        append_markdown(
            md,
            &format!("Figures 13/14: mean time per iteration by phase{q}"),
            &phases,
            &notes,
        )?;
    }
    mpi_ios_bench::keep_logs(logs.path(), &out.join("logs").join(exp.name));
    let check = c.check.then_some((same, "node-b", &["node-c"][..]));
    figs::finish(&exp, &runs, &y, &out, check)
}

/// Loop time (s) at which iteration `i` was done, interpolated between progress events.
fn time_at_iteration(points: &[(f64, u64)], i: f64) -> f64 {
    for w in points.windows(2) {
        let ((t0, i0), (t1, i1)) = (w[0], w[1]);
        if i <= i1 as f64 {
            if i1 <= i0 {
                return t1;
            }
            return t0 + (t1 - t0) * ((i - i0 as f64) / (i1 - i0) as f64).max(0.0);
        }
    }
    points.last().map_or(0.0, |p| p.0)
}

/// (loop time, iterations done) from the loop's start to the last progress event.
fn loop_points(o: &Outcome) -> Vec<(f64, u64)> {
    let t0 = figs::loop_start(o);
    std::iter::once((0.0, 0))
        .chain(o.samples.iter().map(|s| (s.t - t0, s.iteration)))
        .collect()
}

/// The run cut into `n` slices of iterations: (first iteration, last, ms per iteration).
fn slices(o: &Outcome, iters: u64, n: usize) -> Vec<(u64, u64, f64)> {
    let points = loop_points(o);
    let done = points.last().map_or(0, |p| p.1).min(iters);
    (0..n)
        .map(|k| {
            let lo = done * k as u64 / n as u64;
            let hi = done * (k as u64 + 1) / n as u64;
            let dt = time_at_iteration(&points, hi as f64) - time_at_iteration(&points, lo as f64);
            let ms = if hi > lo {
                1e3 * dt / (hi - lo) as f64
            } else {
                0.0
            };
            (lo, hi, ms.max(0.0))
        })
        .collect()
}

/// Stacked bars: the work (the unloaded time per iteration) and the time lost, per slice.
fn breakdown_chart(title: &str, slices: &[(u64, u64, f64)], work_ms: f64) -> BarChart {
    // "12k" rather than "12000": twenty five-digit labels overlap on the axis.
    let categories: Vec<String> = slices
        .iter()
        .map(|(lo, _, _)| match lo {
            lo if *lo >= 1000 && lo % 1000 == 0 => format!("{}k", lo / 1000),
            lo => lo.to_string(),
        })
        .collect();
    let work: Vec<Bar> = slices
        .iter()
        .map(|(_, _, ms)| Bar::new(ms.min(work_ms)))
        .collect();
    let lost: Vec<Bar> = slices
        .iter()
        .map(|(_, _, ms)| Bar::new((ms - work_ms).max(0.0)))
        .collect();
    BarChart::new(title, categories)
        .x_label("iterations (first of each slice)")
        .y_label("time per iteration (ms)")
        .layout(Layout::Stacked)
        .series("work (unloaded time per iteration)", work)
        .series("lost to the load (waiting, migration)", lost)
}

/// (iteration, ms per iteration) of every progress event.
fn ms_per_iteration(o: &Outcome) -> Vec<(f64, f64)> {
    o.samples
        .iter()
        .filter(|s| s.rate > 0.0)
        .map(|s| (s.iteration as f64, 1e3 / s.rate))
        .collect()
}

/// The run's events at the iteration they happened.
fn events_by_iteration(o: &Outcome) -> Vec<PlotEvent> {
    figs::plot_events(o)
        .into_iter()
        .map(|mut e| {
            e.at = o.iteration_at(e.at + figs::loop_start(o));
            e
        })
        .collect()
}

/// Mean ms per iteration in each phase: before the load, loaded (until the first
/// migration of the adaptive run), after that migration.
fn phase_table(static_run: &Outcome, adaptive: &Outcome, unloaded: &Outcome) -> Table {
    let mut table = Table::new(&[
        "run",
        "before the load (ms/it)",
        "loaded, before the migration (ms/it)",
        "after the migration (ms/it)",
        "whole run (ms/it)",
    ]);
    let onset = adaptive.first(EventKind::LoadOnset);
    let moved = adaptive.migrations().next().map(|m| m.t);
    // Phase bounds in iterations of the adaptive run, used for every run so the rows
    // compare the same stretch of work.
    let bound = |t: Option<f64>| t.map(|t| adaptive.iteration_at(t));
    let (b1, b2) = (bound(onset), bound(moved));
    let total = adaptive.report.iterations as f64;
    let mean = |o: &Outcome, lo: f64, hi: f64| -> String {
        let points = loop_points(o);
        if hi <= lo || points.last().map_or(0.0, |p| p.1 as f64) < hi {
            return "-".to_owned();
        }
        let dt = time_at_iteration(&points, hi) - time_at_iteration(&points, lo);
        format!("{:.3}", 1e3 * dt / (hi - lo))
    };
    for (name, o) in [
        ("static MPI", static_run),
        ("MPI/IOS adaptive", adaptive),
        ("unloaded", unloaded),
    ] {
        let done = o.samples.last().map_or(0.0, |s| s.iteration as f64);
        let whole = 1e3 * o.report.seconds / o.report.iterations.max(1) as f64;
        table.push(vec![
            name.to_owned(),
            b1.map_or("-".to_owned(), |b| mean(o, 0.0, b)),
            match (b1, b2) {
                (Some(a), Some(b)) => mean(o, a, b),
                (Some(a), None) => mean(o, a, done.min(total)),
                _ => "-".to_owned(),
            },
            b2.map_or("-".to_owned(), |b| mean(o, b, done.min(total))),
            format!("{whole:.3}"),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_at_iteration_interpolates() {
        let points = [(0.0, 0), (1.0, 100), (3.0, 200)];
        assert!((time_at_iteration(&points, 50.0) - 0.5).abs() < 1e-9);
        assert!((time_at_iteration(&points, 150.0) - 2.0).abs() < 1e-9);
        assert!((time_at_iteration(&points, 500.0) - 3.0).abs() < 1e-9);
    }
}
