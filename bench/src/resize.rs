//! `mpi-ios-bench resize`: the cost of growing and shrinking a malleable job, by one rank
//! (2 -> 3, 3 -> 2) and by doubling (2 -> 4, 4 -> 2), for several sizes of its distributed
//! array, split into spawn, communicator rebuild (merge + split) and redistribution; beside
//! a plain `MPI_Comm_spawn` of as many processes and a migration of one rank holding the
//! same rows per rank as the job at width 2.
//!
//! Every round runs, per size, three launches one after the other, in an order that rotates
//! from round to round (the machine is shared and noisy: the three sides of a round see the
//! same conditions, and no side always goes first):
//! - `pcm-resize` on 2 ranks with `PCM_SCHEDULE=S:size=3,2S:size=2,3S:size=4,4S:size=2`;
//! - `pcm-resize --plain-spawn 1,2` on 2 ranks (no PCM: one `MPI_Comm_spawn_multiple` of 1,
//!   then of 2 processes, as PCM spawns added processes);
//! - `pcm-resize` on 2 ranks with `PCM_SCHEDULE=S:1` (rank 1 migrates).
//!
//! The phase times come from PCM's typed events (`PCM_EVENTS`, `RunEvent::Resized` and
//! `RunEvent::Migrated`), the plain spawns from the program's `spawned` lines. Every resize
//! must move exactly the rows that change owner under the block rule (`state_bytes` = that
//! count times the row's bytes, or the benchmark fails), and after every reconfiguration the
//! processes of the new world must together have checked every row exactly once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use mpi_ios_bench::{append_markdown, load_average, max, median, min, try_program, MpiJob, Table};
use mpi_ios_bench_programs::BenchLine;
use pcm_proto::run::{RunEvent, Stamped};
use pcm_proto::PhaseTimings;

use crate::pass;

/// The resizes of one job, in order, from its starting width of 2.
const CASES: [(u32, u32); 4] = [(2, 3), (3, 2), (2, 4), (4, 2)];
/// Width the job starts with (and the migration's job runs at).
const START: u32 = 2;
/// The target of the issue: growing by one costs at most this times a plain spawn...
const SPAWN_FACTOR: f64 = 1.25;
/// ... plus the data moved at no less than this fraction of a migration's transfer rate.
const RATE_FRACTION: f64 = 0.5;

#[derive(Debug, Args)]
pub(crate) struct ResizeArgs {
    /// Sizes of the distributed array, all ranks together, in MiB (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,16,128")]
    sizes: Vec<u64>,
    /// Rounds; each runs, per size, the resize job, the plain spawns and the migration.
    /// The table gives medians over the rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Elements (f64) per row of the array.
    #[arg(long, default_value_t = 1024)]
    row_len: u64,
    /// Iterations between two reconfigurations.
    #[arg(long, default_value_t = 10)]
    spacing: u64,
    /// Short run: 1 MiB, 1 round, no verdict.
    #[arg(long)]
    quick: bool,
    /// Deadline of each launch, in seconds (plus 0.1 s per MiB).
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Also append the table, as markdown, to this file.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
}

/// Rows of an array of `rows` rows that change owner when a job of `from` ranks becomes one
/// of `to` (block rule, `pcm::block_rows`), when the ranks that stay keep their numbers (a
/// grow, or a shrink where the highest ranks leave): rows whose old rank differs from their
/// new one.
pub(crate) fn rows_changing_owner(rows: u64, from: u32, to: u32) -> u64 {
    let mut moved = 0;
    for old in 0..from {
        let held = pcm::block_rows(rows, old, from);
        for new in (0..to).filter(|&new| new != old) {
            let wanted = pcm::block_rows(rows, new, to);
            moved += held
                .end
                .min(wanted.end)
                .saturating_sub(held.start.max(wanted.start));
        }
    }
    moved
}

/// `PCM_SCHEDULE` of the resize job: the [`CASES`] every `spacing` iterations.
fn resize_schedule(spacing: u64) -> String {
    CASES
        .iter()
        .enumerate()
        .map(|(k, (_, to))| format!("{}:size={to}", (k as u64 + 1) * spacing))
        .collect::<Vec<_>>()
        .join(",")
}

/// One resize as its event told it.
#[derive(Debug, Clone, PartialEq)]
struct ResizeSample {
    iteration: u64,
    from: u32,
    to: u32,
    hosts: usize,
    timings: PhaseTimings,
}

/// The resizes and migrations in the text of an event file, in file order.
fn reconfigurations(events: &str) -> (Vec<ResizeSample>, Vec<PhaseTimings>) {
    let mut resizes = Vec::new();
    let mut migrations = Vec::new();
    for stamped in Stamped::parse_file(events) {
        match stamped.event {
            RunEvent::Resized {
                iteration,
                from,
                to,
                hosts,
                timings,
            } => resizes.push(ResizeSample {
                iteration,
                from,
                to,
                hosts: hosts.len(),
                timings,
            }),
            RunEvent::Migrated { timings, .. } => migrations.push(timings),
            _ => {}
        }
    }
    (resizes, migrations)
}

/// Checks that the `rows_checked` lines of `iteration` come from a world of `size` whose
/// processes together hold every one of `rows` rows exactly once.
fn check_coverage(lines: &[BenchLine], iteration: u64, size: u32, rows: u64) -> Result<()> {
    let mut held: Vec<(u64, u64, u32)> = lines
        .iter()
        .filter_map(|l| match *l {
            BenchLine::RowsChecked {
                rank,
                size: s,
                first_row,
                rows,
                iteration: i,
            } if i == iteration => Some((first_row, rows, if s == size { rank } else { u32::MAX })),
            _ => None,
        })
        .collect();
    ensure!(
        held.len() == size as usize,
        "after iteration {iteration}: {} processes checked their rows, expected {size}",
        held.len()
    );
    ensure!(
        held.iter().all(|&(_, _, rank)| rank != u32::MAX),
        "after iteration {iteration}: a process checked its rows in a world of another width than {size}"
    );
    held.sort_unstable();
    let mut next = 0;
    for (first, count, rank) in held {
        ensure!(
            first == next,
            "after iteration {iteration}: rank {rank} holds rows from {first}, expected {next}"
        );
        next = first + count;
    }
    ensure!(
        next == rows,
        "after iteration {iteration}: the rows checked end at {next}, the array has {rows}"
    );
    Ok(())
}

/// What one round measured for one size.
#[derive(Debug, Clone)]
struct Round {
    /// The four resizes, in [`CASES`] order.
    resizes: Vec<PhaseTimings>,
    /// Plain spawn of 1 and of 2 processes from 2, microseconds.
    plain_us: [u64; 2],
    /// The migration of rank 1.
    migration: PhaseTimings,
}

/// The growth-by-one verdict of one round: the resize's cost (spawn + merge+split +
/// redistribution) against [`SPAWN_FACTOR`] x the plain spawn plus its bytes at
/// [`RATE_FRACTION`] of the migration's rate. Returns (cost ms, bound ms).
fn growth_bound(resize: &PhaseTimings, plain_us: u64, migration: &PhaseTimings) -> (f64, f64) {
    let cost_us = resize.spawn_us + resize.merge_split_us + resize.state_transfer_us;
    let migration_rate = migration.state_bytes as f64 / migration.state_transfer_us.max(1) as f64;
    let bound_us = SPAWN_FACTOR * plain_us as f64
        + resize.state_bytes as f64 / (RATE_FRACTION * migration_rate).max(f64::MIN_POSITIVE);
    (cost_us as f64 / 1e3, bound_us / 1e3)
}

/// Bytes per microsecond = decimal MB/s; / 1e3 = GB/s.
fn gb_per_s(bytes: u64, us: u64) -> f64 {
    bytes as f64 / us.max(1) as f64 / 1e3
}

/// Runs `program` on 2 ranks with `args` and the environment given, and returns its
/// standard output and its event file's text.
fn launch(
    program: &Path,
    args: &[String],
    schedule: Option<&str>,
    timeout: Duration,
    what: &str,
) -> Result<(String, String)> {
    let dir = tempfile::tempdir().context("temporary directory for the events")?;
    let events = dir.path().join("events.jsonl");
    let mut job = MpiJob::of(START as usize, program, args)
        .env("PCM_DAEMON", "none")
        .env("PCM_EVENTS", events.display().to_string());
    if let Some(schedule) = schedule {
        job = job.env("PCM_SCHEDULE", schedule);
    }
    let out = job.run_within(timeout)?.check(what)?;
    let events = std::fs::read_to_string(&events).unwrap_or_default();
    Ok((out.stdout, events))
}

fn resize_job(
    program: &Path,
    args: &ResizeArgs,
    mb: u64,
    timeout: Duration,
) -> Result<Vec<PhaseTimings>> {
    let iters = (CASES.len() as u64 + 1) * args.spacing;
    let schedule = resize_schedule(args.spacing);
    let run_args = program_args(args, mb, iters);
    let what = format!("PCM_SCHEDULE={schedule} pcm-resize {}", run_args.join(" "));
    let (stdout, events) = launch(program, &run_args, Some(&schedule), timeout, &what)?;
    let (resizes, _) = reconfigurations(&events);
    let rows = (mb << 20) / (args.row_len * 8);
    let row_bytes = args.row_len * 8;
    ensure!(
        resizes.len() == CASES.len(),
        "{what}: {} resize events, expected {}\n--- stdout\n{stdout}",
        resizes.len(),
        CASES.len()
    );
    let lines = BenchLine::all_in(&stdout);
    for (k, (sample, &(from, to))) in resizes.iter().zip(&CASES).enumerate() {
        ensure!(
            (sample.from, sample.to, sample.hosts, sample.iteration)
                == (from, to, to as usize, (k as u64 + 1) * args.spacing),
            "{what}: resize {k} was {sample:?}, expected {from} -> {to} at iteration {}",
            (k as u64 + 1) * args.spacing
        );
        let changing = rows_changing_owner(rows, from, to);
        ensure!(
            sample.timings.state_bytes == changing * row_bytes,
            "{what}: {from} -> {to} moved {} bytes, but {changing} rows of {row_bytes} bytes change owner ({} bytes)",
            sample.timings.state_bytes,
            changing * row_bytes
        );
        check_coverage(&lines, sample.iteration, to, rows).with_context(|| what.clone())?;
    }
    check_coverage(&lines, iters, START, rows).with_context(|| what.clone())?;
    let done = lines.iter().find_map(|l| match *l {
        BenchLine::ResizeDone { resizes, ranks, .. } => Some((resizes, ranks)),
        _ => None,
    });
    ensure!(
        done == Some((CASES.len() as u64, START)),
        "{what}: ended with (resizes, ranks) = {done:?}, expected ({}, {START})",
        CASES.len()
    );
    Ok(resizes.into_iter().map(|s| s.timings).collect())
}

fn plain_spawn_job(program: &Path, timeout: Duration) -> Result<[u64; 2]> {
    let run_args = vec!["--plain-spawn".to_owned(), "1,2".to_owned()];
    let (stdout, _) = launch(
        program,
        &run_args,
        None,
        timeout,
        "pcm-resize --plain-spawn 1,2",
    )?;
    let spawned: Vec<(u32, u64)> = BenchLine::all_in(&stdout)
        .iter()
        .filter_map(|l| match *l {
            BenchLine::Spawned {
                parents: START,
                processes,
                spawn_us,
            } => Some((processes, spawn_us)),
            _ => None,
        })
        .collect();
    match spawned[..] {
        [(1, one), (2, two)] => Ok([one, two]),
        _ => bail!("pcm-resize --plain-spawn 1,2 printed {spawned:?}\n--- stdout\n{stdout}"),
    }
}

fn migration_job(
    program: &Path,
    args: &ResizeArgs,
    mb: u64,
    timeout: Duration,
) -> Result<PhaseTimings> {
    let iters = 2 * args.spacing;
    let schedule = format!("{}:1", args.spacing);
    let run_args = program_args(args, mb, iters);
    let what = format!("PCM_SCHEDULE={schedule} pcm-resize {}", run_args.join(" "));
    let (stdout, events) = launch(program, &run_args, Some(&schedule), timeout, &what)?;
    let (resizes, migrations) = reconfigurations(&events);
    ensure!(
        resizes.is_empty() && migrations.len() == 1,
        "{what}: {} resize and {} migration events, expected 0 and 1\n--- stdout\n{stdout}",
        resizes.len(),
        migrations.len()
    );
    let rows = (mb << 20) / (args.row_len * 8);
    let lines = BenchLine::all_in(&stdout);
    check_coverage(&lines, args.spacing, START, rows).with_context(|| what.clone())?;
    check_coverage(&lines, iters, START, rows).with_context(|| what.clone())?;
    Ok(migrations[0])
}

fn program_args(args: &ResizeArgs, mb: u64, iters: u64) -> Vec<String> {
    vec![
        "--mb".to_owned(),
        mb.to_string(),
        "--row-len".to_owned(),
        args.row_len.to_string(),
        "--iters".to_owned(),
        iters.to_string(),
        "--max".to_owned(),
        "4".to_owned(),
    ]
}

pub(crate) fn run(mut args: ResizeArgs) -> Result<()> {
    if args.quick {
        args.sizes = vec![1];
        args.rounds = 1;
    }
    ensure!(args.rounds >= 1, "--rounds must be at least 1");
    ensure!(args.spacing >= 2, "--spacing must be at least 2");
    ensure!(args.row_len >= 1, "--row-len must be at least 1");
    for &mb in &args.sizes {
        let rows = (mb << 20) / (args.row_len * 8);
        ensure!(
            rows >= 4,
            "{mb} MiB in rows of {} f64 is {rows} rows: too few for 4 ranks (lower --row-len)",
            args.row_len
        );
    }
    let program = try_program("pcm-resize")?;
    let load_before = load_average();
    // rounds[size][round]
    let mut measured: Vec<Vec<Round>> = vec![Vec::new(); args.sizes.len()];
    for round in 0..args.rounds {
        for (s, &mb) in args.sizes.iter().enumerate() {
            let timeout = Duration::from_secs(args.timeout) + Duration::from_millis(100 * mb);
            eprintln!("[resize] round {}/{}: {mb} MiB ...", round + 1, args.rounds);
            let (mut resizes, mut plain, mut migration) = (None, None, None);
            // The order rotates from round to round.
            for side in 0..3 {
                match (side + round) % 3 {
                    0 => resizes = Some(resize_job(&program, &args, mb, timeout)?),
                    1 => plain = Some(plain_spawn_job(&program, timeout)?),
                    _ => migration = Some(migration_job(&program, &args, mb, timeout)?),
                }
            }
            let (Some(resizes), Some(plain_us), Some(migration)) = (resizes, plain, migration)
            else {
                bail!("a side of round {round} did not run");
            };
            let r = Round {
                resizes,
                plain_us,
                migration,
            };
            for (timings, &(from, to)) in r.resizes.iter().zip(&CASES) {
                eprintln!(
                    "[resize]   {from} -> {to}: spawn {:.1} ms, merge+split {:.1} ms, redistribution {:.1} ms ({} bytes)",
                    timings.spawn_us as f64 / 1e3,
                    timings.merge_split_us as f64 / 1e3,
                    timings.state_transfer_us as f64 / 1e3,
                    timings.state_bytes
                );
            }
            eprintln!(
                "[resize]   plain spawn 1: {:.1} ms, 2: {:.1} ms; migration: spawn {:.1} ms, transfer {:.1} ms ({} bytes)",
                r.plain_us[0] as f64 / 1e3,
                r.plain_us[1] as f64 / 1e3,
                r.migration.spawn_us as f64 / 1e3,
                r.migration.state_transfer_us as f64 / 1e3,
                r.migration.state_bytes
            );
            measured[s].push(r);
        }
    }

    let mut table = Table::new(&[
        "array (total)",
        "case",
        "rows moved",
        "rows changing owner",
        "rows",
        "spawn ms",
        "merge+split ms",
        "redistribution ms",
        "redistribution ms (min - max)",
        "agree ms",
        "MB moved",
        "redistribution GB/s",
        "plain spawn ms",
        "spawn / plain spawn",
        "(spawn+merge+split) / plain spawn",
        "migration transfer GB/s (state/rank at width 2)",
        "rate / migration rate",
        "cost ms (spawn+merge+split+redistribution)",
        &format!(
            "bound ms ({SPAWN_FACTOR}x plain spawn + bytes at {RATE_FRACTION}x migration rate)"
        ),
        "growth by one: cost <= bound",
    ]);
    let mut notes = Vec::new();
    for (s, &mb) in args.sizes.iter().enumerate() {
        let rounds = &measured[s];
        let rows = (mb << 20) / (args.row_len * 8);
        let row_bytes = args.row_len * 8;
        let migration_rates: Vec<f64> = rounds
            .iter()
            .map(|r| gb_per_s(r.migration.state_bytes, r.migration.state_transfer_us))
            .collect();
        for (c, &(from, to)) in CASES.iter().enumerate() {
            let of = |f: &dyn Fn(&Round) -> f64| -> f64 {
                median(&rounds.iter().map(f).collect::<Vec<_>>())
            };
            let ms = |us: u64| us as f64 / 1e3;
            let t = |r: &Round| r.resizes[c];
            let grow = to > from;
            let plain = |r: &Round| r.plain_us[(to - from).saturating_sub(1).min(1) as usize];
            let changing = rows_changing_owner(rows, from, to);
            let moved_rows = t(&rounds[0]).state_bytes / row_bytes;
            let rate_ratio = of(&|r| {
                gb_per_s(t(r).state_bytes, t(r).state_transfer_us)
                    / gb_per_s(r.migration.state_bytes, r.migration.state_transfer_us)
            });
            let (cost, bound): (Vec<f64>, Vec<f64>) = rounds
                .iter()
                .map(|r| growth_bound(&t(r), plain(r), &r.migration))
                .unzip();
            let over: Vec<f64> = cost.iter().zip(&bound).map(|(c, b)| c / b).collect();
            let verdict = if !(grow && to - from == 1) {
                "n/a".to_owned()
            } else if args.quick {
                "n/a (quick)".to_owned()
            } else {
                format!(
                    "{} (median cost/bound {:.2})",
                    pass(median(&over) <= 1.0),
                    median(&over)
                )
            };
            table.push(vec![
                format!("{mb} MiB"),
                format!("{from} -> {to}"),
                moved_rows.to_string(),
                changing.to_string(),
                rows.to_string(),
                format!("{:.1}", of(&|r| ms(t(r).spawn_us))),
                format!("{:.1}", of(&|r| ms(t(r).merge_split_us))),
                format!("{:.1}", of(&|r| ms(t(r).state_transfer_us))),
                {
                    let all: Vec<f64> = rounds.iter().map(|r| ms(t(r).state_transfer_us)).collect();
                    format!("{:.1} - {:.1}", min(&all), max(&all))
                },
                format!("{:.1}", of(&|r| ms(t(r).agree_us))),
                format!("{:.2}", t(&rounds[0]).state_bytes as f64 / 1e6),
                format!(
                    "{:.2}",
                    of(&|r| gb_per_s(t(r).state_bytes, t(r).state_transfer_us))
                ),
                if grow {
                    format!("{:.1}", of(&|r| ms(plain(r))))
                } else {
                    "-".to_owned()
                },
                if grow {
                    format!("{:.2}", of(&|r| t(r).spawn_us as f64 / plain(r) as f64))
                } else {
                    "-".to_owned()
                },
                if grow {
                    format!(
                        "{:.2}",
                        of(&|r| (t(r).spawn_us + t(r).merge_split_us) as f64 / plain(r) as f64)
                    )
                } else {
                    "-".to_owned()
                },
                format!("{:.2}", median(&migration_rates)),
                format!("{rate_ratio:.2}"),
                format!("{:.1}", median(&cost)),
                if grow {
                    format!("{:.1}", median(&bound))
                } else {
                    "-".to_owned()
                },
                verdict,
            ]);
        }
        notes.push(format!(
            "{mb} MiB: migration of rank 1 ({} bytes of rows): spawn {:.1} ms, merge+split {:.1} ms, transfer {:.1} ms (medians).",
            rounds[0].migration.state_bytes,
            median(&rounds.iter().map(|r| r.migration.spawn_us as f64 / 1e3).collect::<Vec<_>>()),
            median(&rounds.iter().map(|r| r.migration.merge_split_us as f64 / 1e3).collect::<Vec<_>>()),
            median(&rounds.iter().map(|r| r.migration.state_transfer_us as f64 / 1e3).collect::<Vec<_>>()),
        ));
    }
    notes.push(format!(
        "Load average (1/5/15 min) before: {load_before}; after: {}.",
        load_average()
    ));
    let title = format!(
        "PCM resize cost: pcm-resize from {START} ranks, rows of {} f64, medians over {} round(s){}",
        args.row_len,
        args.rounds,
        if args.quick { " (quick)" } else { "" }
    );
    println!("{title}");
    print!("{}", table.to_text());
    for note in &notes {
        println!("{note}");
    }
    if let Some(path) = &args.markdown {
        append_markdown(path, &title, &table, &notes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_block_rows_then_rows_changing_owner_are_counted_per_case() {
        // 12 rows, 2 -> 3: 0..6 | 6..12 becomes 0..4 | 4..8 | 8..12: rows 4, 5 (0 -> 1) and
        // 8..12 (1 -> 2) change owner; 6, 7 stay with rank 1.
        assert_eq!(rows_changing_owner(12, 2, 3), 6);
        assert_eq!(rows_changing_owner(12, 3, 2), 6);
        // 2 -> 4: only 0..3 stays with rank 0.
        assert_eq!(rows_changing_owner(12, 2, 4), 9);
        assert_eq!(rows_changing_owner(12, 4, 2), 9);
        assert_eq!(rows_changing_owner(12, 2, 2), 0);
        // Uneven: 10 rows, 2 -> 3: 0..5 | 5..10 becomes 0..4 | 4..7 | 7..10.
        assert_eq!(rows_changing_owner(10, 2, 3), 1 + 3);
        // Every row moves at most once, and growing then shrinking back moves the same rows.
        for rows in [4u64, 7, 128, 1000] {
            for (from, to) in CASES {
                let moved = rows_changing_owner(rows, from, to);
                assert!(moved <= rows);
                assert_eq!(moved, rows_changing_owner(rows, to, from));
            }
        }
    }

    #[test]
    fn given_the_cases_then_the_schedule_resizes_every_spacing() {
        assert_eq!(
            resize_schedule(10),
            "10:size=3,20:size=2,30:size=4,40:size=2"
        );
    }

    fn timings(spawn_us: u64, transfer_us: u64, bytes: u64) -> PhaseTimings {
        PhaseTimings {
            agree_us: 1,
            spawn_us,
            merge_split_us: 1000,
            state_transfer_us: transfer_us,
            state_bytes: bytes,
        }
    }

    #[test]
    fn given_event_lines_then_resizes_and_migrations_are_read_in_order() {
        let host = pcm::HostName::new("node-a").unwrap();
        let events = [
            RunEvent::LoopStarted { iteration: 0 },
            RunEvent::Resized {
                iteration: 10,
                from: 2,
                to: 3,
                hosts: vec![host.clone(); 3],
                timings: timings(1, 2, 3),
            },
            RunEvent::Migrated {
                iteration: 15,
                placed: vec![(pcm::Rank(1), host.clone())],
                timings: timings(4, 5, 6),
            },
            RunEvent::Resized {
                iteration: 20,
                from: 3,
                to: 2,
                hosts: vec![host; 2],
                timings: timings(0, 7, 8),
            },
        ];
        let mut text: String = events
            .into_iter()
            .map(|e| Stamped::now(Some(pcm::Rank(0)), e).to_json_line())
            .collect();
        text.push_str("{\"cut short\n");
        let (resizes, migrations) = reconfigurations(&text);
        assert_eq!(migrations, vec![timings(4, 5, 6)]);
        assert_eq!(
            resizes
                .iter()
                .map(|r| (r.iteration, r.from, r.to, r.hosts, r.timings.state_bytes))
                .collect::<Vec<_>>(),
            vec![(10, 2, 3, 3, 3), (20, 3, 2, 2, 8)]
        );
    }

    fn checked(rank: u32, size: u32, first_row: u64, rows: u64, iteration: u64) -> BenchLine {
        BenchLine::RowsChecked {
            rank,
            size,
            first_row,
            rows,
            iteration,
        }
    }

    #[test]
    fn given_rows_checked_then_coverage_needs_every_row_once_at_the_new_width() {
        let lines = vec![
            checked(1, 3, 4, 4, 10),
            checked(0, 3, 0, 4, 10),
            checked(2, 3, 8, 4, 10),
            checked(0, 2, 0, 6, 20),
        ];
        check_coverage(&lines, 10, 3, 12).unwrap();
        // A process missing, a wrong width, a gap, a short end.
        assert!(check_coverage(&lines, 20, 2, 12).is_err());
        assert!(check_coverage(&lines, 10, 4, 12).is_err());
        let gap = vec![checked(0, 2, 0, 5, 20), checked(1, 2, 6, 6, 20)];
        assert!(check_coverage(&gap, 20, 2, 12)
            .unwrap_err()
            .to_string()
            .contains("holds rows from 6, expected 5"));
        let short = vec![checked(0, 2, 0, 6, 20), checked(1, 2, 6, 5, 20)];
        assert!(check_coverage(&short, 20, 2, 12).is_err());
        let other_width = vec![checked(0, 3, 0, 6, 20), checked(1, 2, 6, 6, 20)];
        assert!(check_coverage(&other_width, 20, 2, 12).is_err());
    }

    #[test]
    fn given_a_grow_then_the_bound_adds_the_bytes_at_half_the_migration_rate() {
        // Migration: 1e6 bytes in 1000 us (1 GB/s); half of it: 0.5 bytes/us.
        let migration = timings(100_000, 1000, 1_000_000);
        // Plain spawn 100 ms; 500 000 bytes at 0.5 bytes/us = 1 ms: bound 125 + 1 = 126 ms.
        let resize = timings(110_000, 400, 500_000);
        let (cost, bound) = growth_bound(&resize, 100_000, &migration);
        assert!((bound - 126.0).abs() < 1e-9, "{bound}");
        // Cost: spawn 110 + merge+split 1 + redistribution 0.4 ms.
        assert!((cost - 111.4).abs() < 1e-9, "{cost}");
        assert!((gb_per_s(1_000_000, 1000) - 1.0).abs() < 1e-12);
    }
}
