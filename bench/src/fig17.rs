//! `mpi-ios-bench fig17`: the paper's Figures 17 and 18 (section 6.3), the cost of one
//! reconfiguration against the whole run, over a range of data sizes.
//!
//! For each grid size, heat2d (with PCM, no daemon) runs twice per repeat, interleaved: once
//! without reconfiguration and once with one migration of `--move-rank` half-way through,
//! forced with `PCM_SCHEDULE` (the paper loaded a node to trigger it; the reconfiguration
//! itself is the same). Both runs must end with the same checksum. Figure 17 compares the
//! total times; the reconfiguration overhead is given two ways: from the totals (noisy on a
//! shared machine) and from the measured phases in % of the total.
//!
//! Figure 18 splits the reconfiguration into checkpointing (the departing rank's `store`
//! calls), loading (the replacement's `load` calls) and communicator rearrangement (spawn,
//! merge+split), plus the state transfer and the agreement, all read from PCM's typed events
//! (`PCM_EVENTS`, one file per run: the migration event with its phase timings, and one event
//! per store and load call), never from its log. PCM reports the slowest rank's
//! time for each phase: the agreement runs from the status call to `reconfigure`, which on
//! the departing rank holds its stores, and the spawn from entering `reconfigure`, which on
//! the staying ranks holds waiting for those stores inside the collective spawn. So both are
//! shown less the store time, to count the store once.
//!
//! The iteration rate around the move comes from the same file: rank 0's progress events
//! (every [`PROGRESS_PERIOD`]), timestamped by the job.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use mpi_ios_bench::{append_markdown, load_average, max, median, min, try_program, MpiJob, Table};
use mpi_ios_plots::{Bar, BarChart, Event, EventKind, Layout, TimePlot};
use pcm_proto::run::{RunEvent, Stamped, EVENTS_FILE_ENV, PROGRESS_PERIOD_ENV};

use mpi_ios_bench::paired::heat_report;

/// Least time between two progress events of a run (`PCM_PROGRESS_PERIOD`): fine enough
/// for several windows on each side of the move in the quick mode's short runs.
const PROGRESS_PERIOD: &str = "0.02";

/// Options of `fig17`.
#[derive(Debug, Args)]
pub(crate) struct Fig17Args {
    /// Grid sides (rows = columns), comma-separated: the data sizes.
    #[arg(long, value_delimiter = ',', default_value = "512,1024,2048")]
    sizes: Vec<usize>,
    /// Jacobi iterations per run; the migration happens at half of them.
    #[arg(long, default_value_t = 3000)]
    iters: u64,
    /// Ranks of the job.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// The rank that migrates.
    #[arg(long, default_value_t = 1)]
    move_rank: usize,
    /// Repeats per size (each one run without and one with the reconfiguration).
    #[arg(long, default_value_t = 2)]
    repeats: usize,
    /// Short run: sizes 64 and 128, 200 iterations, 1 repeat.
    #[arg(long)]
    quick: bool,
    /// Directory for the plots (fig17 and fig18, .svg and .png); created if missing.
    #[arg(long, default_value = "target/figures")]
    out: PathBuf,
    /// Deadline of each mpirun run, in seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Also append the tables, as markdown, to this file.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
}

/// One reconfiguration's phases, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Phases {
    store: f64,
    transfer: f64,
    load: f64,
    /// Agreement less the store (see the module docs).
    agree: f64,
    /// Spawn less the store (see the module docs).
    spawn: f64,
    merge_split: f64,
    /// Bytes of state moved.
    state_bytes: f64,
}

impl Phases {
    const NAMES: [&'static str; 6] = [
        "checkpoint (store)",
        "state transfer",
        "load",
        "agree",
        "spawn",
        "merge+split",
    ];

    fn values(&self) -> [f64; 6] {
        [
            self.store,
            self.transfer,
            self.load,
            self.agree,
            self.spawn,
            self.merge_split,
        ]
    }

    fn total(&self) -> f64 {
        self.values().iter().sum()
    }
}

/// Reads the phases from a run's events: its one migration and its store and load calls.
fn phases(events: &[Stamped]) -> Result<Phases> {
    let ms = |us: u64| us as f64 / 1e3;
    let timings: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::Migrated { timings, .. } => Some(*timings),
            _ => None,
        })
        .collect();
    let [t] = timings.as_slice() else {
        bail!(
            "expected one migration event, found {} (did PCM write its events, PCM_EVENTS?)",
            timings.len()
        );
    };
    let (mut store_us, mut load_us, mut stores, mut loads) = (0, 0, 0, 0);
    for e in events {
        match &e.event {
            RunEvent::Stored { micros, .. } => (store_us, stores) = (store_us + micros, stores + 1),
            RunEvent::Loaded { micros, .. } => (load_us, loads) = (load_us + micros, loads + 1),
            _ => {}
        }
    }
    ensure!(
        stores > 0 && loads > 0,
        "no store or load event in the migrating run"
    );
    let store = ms(store_us);
    Ok(Phases {
        store,
        transfer: ms(t.state_transfer_us),
        load: ms(load_us),
        agree: (ms(t.agree_us) - store).max(0.0),
        spawn: (ms(t.spawn_us) - store).max(0.0),
        merge_split: ms(t.merge_split_us),
        state_bytes: t.state_bytes as f64,
    })
}

/// Rank 0's progress as (iterations done, iterations per second since the previous point)
/// at each progress event, the loop start being the first point.
fn progress(events: &[Stamped]) -> Vec<(u64, f64)> {
    let mut last: Option<(f64, u64)> = None;
    let mut out = Vec::new();
    for e in events {
        let (RunEvent::LoopStarted { iteration } | RunEvent::Progress { iteration }) = e.event
        else {
            continue;
        };
        if let (Some((t0, i0)), RunEvent::Progress { .. }) = (last, &e.event) {
            if e.time() > t0 && iteration > i0 {
                out.push((iteration, (iteration - i0) as f64 / (e.time() - t0)));
            }
        }
        last = Some((e.time(), iteration));
    }
    out
}

/// Median iteration rate of the progress windows that start after iteration `at` (the
/// reconfiguration point) over that of the windows that end by it; the window holding it
/// counts on neither side. `None` when either side has no window.
fn rate_after_vs_before(events: &[Stamped], at: u64) -> Option<f64> {
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let mut start = 0;
    for (done, rate) in progress(events) {
        if done <= at {
            before.push(rate);
        } else if start > at {
            after.push(rate);
        }
        start = done;
    }
    if before.is_empty() || after.is_empty() {
        return None;
    }
    Some(median(&after) / median(&before))
}

/// The events of the run whose event file is `path`.
fn read_events(path: &Path) -> Result<Vec<Stamped>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the run's events, {}", path.display()))?;
    Ok(Stamped::parse_file(&text))
}

/// Measurements of one grid size.
#[derive(Debug, Default)]
struct Sample {
    side: usize,
    without: Vec<f64>,
    with: Vec<f64>,
    phases: Vec<Phases>,
    /// Iteration rate after the move over the rate before it, runs without the move.
    rate_ratio_without: Vec<f64>,
    /// The same, runs with the move.
    rate_ratio_with: Vec<f64>,
    /// Progress (iteration, it/s) of the last repeat without the move.
    last_rates_without: Vec<(f64, f64)>,
    /// Progress (iteration, it/s) of the last repeat with the move.
    last_rates_with: Vec<(f64, f64)>,
}

impl Sample {
    fn phase_median(&self, i: usize) -> f64 {
        median(
            &self
                .phases
                .iter()
                .map(|p| p.values()[i])
                .collect::<Vec<_>>(),
        )
    }

    fn reconfig_ms(&self) -> Vec<f64> {
        self.phases.iter().map(Phases::total).collect()
    }

    /// Overhead from the totals, in % of the run without reconfiguration.
    fn overhead_totals(&self) -> f64 {
        (median(&self.with) / median(&self.without) - 1.0) * 100.0
    }

    /// Overhead from the measured phases, in % of the run with the reconfiguration.
    fn overhead_phases(&self) -> f64 {
        median(&self.reconfig_ms()) / 1e3 / median(&self.with) * 100.0
    }
}

pub(crate) fn run(mut args: Fig17Args) -> Result<()> {
    if args.quick {
        args.sizes = vec![64, 128];
        args.iters = 200;
        args.repeats = 1;
    }
    ensure!(args.repeats >= 1, "--repeats must be at least 1");
    ensure!(args.ranks >= 2, "--ranks must be at least 2");
    ensure!(
        args.move_rank < args.ranks,
        "--move-rank {} is not a rank of a {}-rank job",
        args.move_rank,
        args.ranks
    );
    ensure!(args.iters >= 4, "--iters must be at least 4");
    ensure!(!args.sizes.is_empty(), "--sizes is empty");
    if let Some(&s) = args.sizes.iter().find(|&&s| s < args.ranks.max(3)) {
        bail!("--sizes {s}: a grid side must be at least the rank count and 3");
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let heat = try_program("heat2d")?;
    let timeout = Duration::from_secs(args.timeout);
    let at = args.iters / 2;
    let load_before = load_average();
    // The runs' event files.
    let dir = tempfile::tempdir().context("creating a directory for the event files")?;

    let mut samples: Vec<Sample> = args
        .sizes
        .iter()
        .map(|&side| Sample {
            side,
            ..Sample::default()
        })
        .collect();
    // Repeats outermost: a slow spell of the shared machine spreads over every size.
    for repeat in 1..=args.repeats {
        for sample in &mut samples {
            let side = sample.side.to_string();
            let run_args: Vec<String> = vec![
                "--rows".into(),
                side.clone(),
                "--cols".into(),
                side,
                "--iters".into(),
                args.iters.to_string(),
            ];
            let base = MpiJob::of(args.ranks, &heat, &run_args)
                .env("PCM_DAEMON", "none")
                .env(PROGRESS_PERIOD_ENV, PROGRESS_PERIOD);
            let (plain_events, moved_events) = (
                dir.path()
                    .join(format!("{}-{repeat}-plain.jsonl", sample.side)),
                dir.path()
                    .join(format!("{}-{repeat}-moved.jsonl", sample.side)),
            );
            let plain = base
                .clone()
                .env(EVENTS_FILE_ENV, plain_events.display().to_string())
                .run_within(timeout)?
                .check("heat2d without reconfiguration")?;
            let moved = base
                .env(EVENTS_FILE_ENV, moved_events.display().to_string())
                .env("PCM_SCHEDULE", format!("{at}:{}", args.move_rank))
                .run_within(timeout)?
                .check("heat2d with one reconfiguration")?;
            let (plain_events, moved_events) =
                (read_events(&plain_events)?, read_events(&moved_events)?);
            let (p, m) = (heat_report(&plain.stdout)?, heat_report(&moved.stdout)?);
            p.check_unsettled()?;
            ensure!(
                p.checksum == m.checksum,
                "{0}x{0}: the checksum changed with the reconfiguration ({1} vs {2})",
                sample.side,
                p.checksum,
                m.checksum
            );
            ensure!(
                p.migrations == Some(0) && m.migrations == Some(1),
                "{0}x{0}: expected 0 and 1 migrations, got {1:?} and {2:?}",
                sample.side,
                p.migrations,
                m.migrations
            );
            let ph = phases(&moved_events)
                .with_context(|| format!("{0}x{0}: reading the phase timings", sample.side))?;
            eprintln!(
                "[fig17] {0}x{0} repeat {repeat}/{1}: without {2:.4} s, with {3:.4} s, \
                 reconfiguration {4:.1} ms (store {5:.1}, transfer {6:.1}, load {7:.2}, \
                 spawn {8:.1}, merge+split {9:.1})",
                sample.side,
                args.repeats,
                p.seconds,
                m.seconds,
                ph.total(),
                ph.store,
                ph.transfer,
                ph.load,
                ph.spawn,
                ph.merge_split
            );
            sample.without.push(p.seconds);
            sample.with.push(m.seconds);
            sample.phases.push(ph);
            if let (Some(a), Some(b)) = (
                rate_after_vs_before(&plain_events, at),
                rate_after_vs_before(&moved_events, at),
            ) {
                sample.rate_ratio_without.push(a);
                sample.rate_ratio_with.push(b);
            }
            let curve = |events: &[Stamped]| -> Vec<(f64, f64)> {
                progress(events)
                    .into_iter()
                    .map(|(n, r)| (n as f64, r))
                    .collect()
            };
            sample.last_rates_without = curve(&plain_events);
            sample.last_rates_with = curve(&moved_events);
        }
    }

    let quick = |verdict: bool| {
        if args.quick {
            "n/a (quick)".to_owned()
        } else if verdict {
            "yes".to_owned()
        } else {
            "no".to_owned()
        }
    };
    let mut fig17 = Table::new(&[
        "grid",
        "state MiB (moved rank)",
        "iters",
        "repeats",
        "without s (median)",
        "without min..max",
        "with s (median)",
        "with min..max",
        "overhead % (totals, medians)",
        "overhead % (totals, minima)",
        "rate after/before (without)",
        "rate after/before (with)",
        "reconfiguration ms (phases)",
        "overhead % (phases / total)",
        "paper: < 1%",
    ]);
    let mut fig18 = Table::new(&[
        "grid",
        "store ms",
        "transfer ms",
        "load ms",
        "agree ms (less store)",
        "spawn ms (less store)",
        "merge+split ms",
        "total ms",
    ]);
    for s in &samples {
        let state_mib = median(&s.phases.iter().map(|p| p.state_bytes).collect::<Vec<_>>())
            / f64::from(1 << 20);
        fig17.push(vec![
            format!("{0}x{0}", s.side),
            format!("{state_mib:.2}"),
            args.iters.to_string(),
            args.repeats.to_string(),
            format!("{:.4}", median(&s.without)),
            format!("{:.4}..{:.4}", min(&s.without), max(&s.without)),
            format!("{:.4}", median(&s.with)),
            format!("{:.4}..{:.4}", min(&s.with), max(&s.with)),
            format!("{:+.2}", s.overhead_totals()),
            format!("{:+.2}", (min(&s.with) / min(&s.without) - 1.0) * 100.0),
            format!("{:.2}", median(&s.rate_ratio_without)),
            format!("{:.2}", median(&s.rate_ratio_with)),
            format!("{:.1}", median(&s.reconfig_ms())),
            format!("{:.2}", s.overhead_phases()),
            quick(s.overhead_phases() < 1.0),
        ]);
        let mut row = vec![format!("{0}x{0}", s.side)];
        row.extend((0..6).map(|i| format!("{:.2}", s.phase_median(i))));
        row.push(format!("{:.1}", median(&s.reconfig_ms())));
        fig18.push(row);
    }
    let written = plot(&args, &samples)?;
    let rates = plot_rates(&args, &samples)?;
    let notes = vec![
        format!(
            "{} ranks, rank {} moved at iteration {at} (PCM_SCHEDULE), no daemon; seconds are \
             heat2d's own iteration-loop time, phases from PCM's events (medians over \
             repeats). The agree and spawn columns are PCM's times less the departing \
             rank's store time, which both maxima include (see bench/src/fig17.rs). Stacked \
             bars are medians per phase, so their height may differ from the median total. \
             'rate after/before' is the median iteration rate of the progress windows \
             (PCM's progress events, every {PROGRESS_PERIOD} s) after the move over that before it (the same windows in the run without): a \
             spawned replacement reaches the original ranks over TCP, not shared memory, so \
             the job may stay slower after the move, a cost the phases do not include. \
             Load average (1/5/15 min) before: {load_before}; after: {}.",
            args.ranks,
            args.move_rank,
            load_average()
        ),
        format!(
            "Plots: {}, {}{}",
            written.0.svg.display(),
            written.1.svg.display(),
            rates.map_or_else(String::new, |w| format!(", {}", w.svg.display()))
        ),
    ];
    println!(
        "Figure 17: heat2d with and without one reconfiguration, {} ranks, {} iterations",
        args.ranks, args.iters
    );
    print!("{}", fig17.to_text());
    println!("\nFigure 18: breakdown of the reconfiguration (medians, ms)");
    print!("{}", fig18.to_text());
    for note in &notes {
        println!("{note}");
    }
    if let Some(path) = &args.markdown {
        let q = if args.quick { " (quick)" } else { "" };
        append_markdown(
            path,
            &format!(
                "Figure 17: with and without one reconfiguration, {} ranks, {} iterations{q}",
                args.ranks, args.iters
            ),
            &fig17,
            &[],
        )?;
        append_markdown(
            path,
            &format!("Figure 18: breakdown of the reconfiguration{q}"),
            &fig18,
            &notes,
        )?;
    }
    Ok(())
}

/// The iteration rate of the largest size's last repeat, with and without the move.
fn plot_rates(args: &Fig17Args, samples: &[Sample]) -> Result<Option<mpi_ios_plots::Written>> {
    let Some(s) = samples.iter().max_by_key(|s| s.side) else {
        return Ok(None);
    };
    if s.last_rates_without.is_empty() || s.last_rates_with.is_empty() {
        return Ok(None);
    }
    let at = (args.iters / 2) as f64;
    Ok(Some(
        TimePlot::new(format!(
            "heat2d {0}x{0}, {1} ranks: iteration rate around the reconfiguration",
            s.side, args.ranks
        ))
        .x_label("iteration")
        .y_label("iterations / s (window mean)")
        .series("without reconfiguration", s.last_rates_without.clone())
        .series("with one reconfiguration", s.last_rates_with.clone())
        .event(Event::new(
            at,
            EventKind::Migration,
            format!("rank {} moved", args.move_rank),
        ))
        .write(args.out.join("fig17-rate"))?,
    ))
}

fn plot(
    args: &Fig17Args,
    samples: &[Sample],
) -> Result<(mpi_ios_plots::Written, mpi_ios_plots::Written)> {
    let spread = |v: &[f64]| Bar::new(median(v)).spread(min(v), max(v));
    let fig17 = BarChart::new(
        format!(
            "Reconfiguration overhead: heat2d, {} ranks, {} iterations (median, min..max)",
            args.ranks, args.iters
        ),
        samples
            .iter()
            .map(|s| format!("{0}x{0} ({1:.2}%)", s.side, s.overhead_phases())),
    )
    .x_label("grid (reconfiguration time in % of the total)")
    .y_label("execution time (s)")
    .series(
        "without reconfiguration",
        samples.iter().map(|s| spread(&s.without)).collect(),
    )
    .series(
        "with one reconfiguration",
        samples.iter().map(|s| spread(&s.with)).collect(),
    )
    .write(args.out.join("fig17"))?;

    let mut fig18 = BarChart::new(
        "Breakdown of the reconfiguration cost (medians)",
        samples.iter().map(|s| format!("{0}x{0}", s.side)),
    )
    .x_label("grid")
    .y_label("milliseconds")
    .layout(Layout::Stacked);
    for (i, name) in Phases::NAMES.iter().enumerate() {
        fig18 = fig18.series(
            *name,
            samples
                .iter()
                .map(|s| Bar::new(s.phase_median(i)))
                .collect(),
        );
    }
    let fig18 = fig18.write(args.out.join("fig18"))?;
    Ok((fig17, fig18))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(time: f64, event: RunEvent) -> Stamped {
        Stamped {
            unix_us: (time * 1e6).round() as u64,
            pid: 1,
            rank: Some(pcm_proto::Rank(0)),
            event,
        }
    }

    #[test]
    fn phases_are_read_from_the_events() {
        let store = |name: &str, micros| RunEvent::Stored {
            name: name.into(),
            bytes: 100,
            micros,
        };
        let events = vec![
            at(1.0, store("grid", 2000)),
            at(1.1, store("meta", 1000)),
            at(
                1.2,
                RunEvent::Migrated {
                    iteration: 5,
                    placed: vec![(pcm_proto::Rank(1), pcm_proto::HostName::new("b").unwrap())],
                    timings: pcm_proto::PhaseTimings {
                        agree_us: 3500,
                        spawn_us: 250_000,
                        merge_split_us: 4000,
                        state_transfer_us: 1500,
                        state_bytes: 108,
                    },
                },
            ),
            at(
                1.3,
                RunEvent::Loaded {
                    name: "grid".into(),
                    bytes: 100,
                    micros: 30,
                },
            ),
        ];
        let p = phases(&events).expect("reads");
        assert_eq!(p.store, 3.0);
        assert_eq!(p.spawn, 247.0);
        assert_eq!(p.load, 0.03);
        assert_eq!(p.merge_split, 4.0);
        assert_eq!(p.transfer, 1.5);
        assert_eq!(p.agree, 0.5);
        assert_eq!(p.state_bytes, 108.0);
        assert!((p.total() - 256.03).abs() < 1e-9);
        assert!(phases(&events[..2]).is_err(), "no migration");
        assert!(phases(&events[..3]).is_err(), "no load");
    }

    #[test]
    fn rates_are_compared_around_the_move() {
        let p = |time, iteration| at(time, RunEvent::Progress { iteration });
        let events = vec![
            at(0.0, RunEvent::LoopStarted { iteration: 0 }),
            p(0.1, 10),
            p(0.2, 20),
            p(0.7, 30),
            at(0.8, RunEvent::Checkpointed { iteration: 30 }),
            p(0.8, 40),
            p(1.0, 50),
        ];
        let rates: Vec<u64> = progress(&events)
            .iter()
            .map(|(_, r)| r.round() as u64)
            .collect();
        assert_eq!(rates, [100, 100, 20, 100, 50]);
        // Before: the windows ending at 10 and 20 (100 it/s); the window 20..30 holds the
        // move; after: those starting at 30 and 40 (100 and 50: median 75).
        let r = rate_after_vs_before(&events, 25).expect("both sides");
        assert!((r - 0.75).abs() < 1e-9, "{r}");
        // Before: 100, 100, 20 (median 100); after: the window starting at 40 only.
        let r = rate_after_vs_before(&events, 35).expect("both sides");
        assert!((r - 0.5).abs() < 1e-9, "{r}");
        assert_eq!(rate_after_vs_before(&events, 50), None);
    }
}
