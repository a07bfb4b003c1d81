//! `mpi-ios-bench profiling`: what MPI traffic profiling costs the application, and what
//! gathering the profiles costs pcmd (see docs/profiling.md).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use mpi_ios_bench::paired::{interleave, GridSizes, Variant};
use mpi_ios_bench::{
    append_markdown, load_average, max, median, min, try_bin, try_program, MpiJob, Pcmd, Table,
};

use crate::pass;

/// Options of `mpi-ios-bench profiling`.
#[derive(Debug, Args)]
pub(crate) struct ProfilingArgs {
    /// Interleaved pairs (profiling off, profiling on) per grid size.
    #[arg(long, default_value_t = 9)]
    pairs: usize,
    /// Unmeasured pairs run first per size (warm caches).
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Ranks of the overhead runs.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    #[command(flatten)]
    sizes: GridSizes,
    /// Loops per `mpi-calls` run (the per-call cost measurement).
    #[arg(long, default_value_t = 1_000_000)]
    loops: u64,
    /// Ranks of the job registered with pcmd while its CPU use is measured.
    #[arg(long, default_value_t = 8)]
    daemon_ranks: usize,
    /// Seconds over which pcmd's CPU use is measured (per configuration).
    #[arg(long, default_value_t = 20)]
    window: u64,
    /// Short run: tiny grids, 2 pairs, no warm-up, 4 s windows.
    #[arg(long)]
    quick: bool,
    /// Deadline of each mpirun run, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Also append the table, as markdown, to this file.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
}

/// Target of the median profiling overhead (on / off).
const OVERHEAD_TARGET: f64 = 1.005;
/// Target of pcmd's CPU use with `daemon_ranks` ranks at the default period, % of a core.
const PCMD_CPU_TARGET: f64 = 0.2;

pub(crate) fn run(mut args: ProfilingArgs) -> Result<()> {
    if args.quick {
        args.sizes.quick();
        args.pairs = 2;
        args.warmup = 0;
        args.window = 4;
        args.loops = 20_000;
    }
    ensure!(args.pairs >= 1, "--pairs must be at least 1");
    ensure!(args.window >= 1, "--window must be at least 1 s");
    let heat2d = try_program("heat2d")?;
    let calls = try_program("mpi-calls")?;
    let pcmd_bin = try_bin("pcmd")?;
    let timeout = Duration::from_secs(args.timeout);
    let load_before = load_average();
    let mut table = Table::new(&[
        "measure",
        "off",
        "on",
        "ratio / share (median)",
        "min",
        "max",
        "target",
        "result",
    ]);

    // 1. The wrappers' own cost: CPU time of a halo-exchange loop on one rank, which a busy
    //    machine inflates far less than wall time.
    let (mut off_ns, mut on_ns) = (Vec::new(), Vec::new());
    for pair in 0..args.warmup + args.pairs {
        let mut measured = [0.0f64; 2];
        for (i, profile) in ["off", "on"].into_iter().enumerate() {
            let out = MpiJob::of(1, &calls, &["--loops".into(), args.loops.to_string()])
                .env("PCM_DAEMON", "none")
                .env("PCM_PROFILE", profile)
                .run_within(timeout)?
                .check("mpi-calls")?;
            measured[i] = loop_cpu_ns(&out.stdout)?;
        }
        eprintln!(
            "[profiling] halo loop {}: CPU {:.1} ns off, {:.1} ns on",
            pair + 1,
            measured[0],
            measured[1]
        );
        if pair >= args.warmup {
            off_ns.push(measured[0]);
            on_ns.push(measured[1]);
        }
    }
    let loop_ratios: Vec<f64> = on_ns.iter().zip(&off_ns).map(|(a, b)| a / b).collect();
    let added_ns = median(&on_ns) - median(&off_ns);
    table.push(vec![
        "halo loop (Irecv, Isend, 2 Wait; 1 rank), CPU ns per loop".into(),
        format!("{:.1}", median(&off_ns)),
        format!("{:.1}", median(&on_ns)),
        format!("{:.4}", median(&loop_ratios)),
        format!("{:.4}", min(&loop_ratios)),
        format!("{:.4}", max(&loop_ratios)),
        "-".into(),
        format!("+{added_ns:.1} ns per loop"),
    ]);

    // 2. Application overhead: the same job with PCM_PROFILE=off and on, both served by a
    //    pcmd, so that the only difference is the counting (and the profile reports).
    let pcmd = Pcmd::spawn(&[], "info")?;
    let mut projected = Vec::new();
    let daemon = pcmd.socket.display().to_string();
    for case in args.sizes.cases() {
        let (side, iters, label) = (case.side, case.iters, case.label);
        let run_args = case.args();
        let job = |profile: &str| {
            MpiJob::of(args.ranks, &heat2d, &run_args)
                .env("PCM_DAEMON", daemon.clone())
                .env("PCM_PROFILE", profile)
        };
        let variants = [
            Variant::new("heat2d, profiling off", job("off")),
            Variant::new("heat2d, profiling on", job("on")),
        ];
        let what = format!("profiling {side}x{side}");
        let series = interleave(&what, &variants, iters, args.warmup, args.pairs, timeout)?;
        let (off_us, on_us) = (
            case.per_iter_us(&series.loop_s(0)),
            case.per_iter_us(&series.loop_s(1)),
        );
        let ratios = series.ratios(1, |m| m.loop_s);
        let ratio = median(&ratios);
        // One halo loop per neighbour per iteration; the end ranks of a 2-rank job have one.
        let neighbours = if args.ranks > 2 { 2.0 } else { 1.0 };
        projected.push((
            side,
            label,
            // The fastest run is the least disturbed by other work on the machine.
            1.0 + neighbours * added_ns / (min(&off_us) * 1000.0),
        ));
        table.push(vec![
            format!(
                "heat2d {side}x{side}, {} ranks ({label}/iter), us/iter",
                args.ranks
            ),
            format!("{:.2}", median(&off_us)),
            format!("{:.2}", median(&on_us)),
            format!("{ratio:.4}"),
            format!("{:.4}", min(&ratios)),
            format!("{:.4}", max(&ratios)),
            format!("<= {OVERHEAD_TARGET}"),
            if args.quick {
                "n/a (quick)".into()
            } else {
                pass(ratio <= OVERHEAD_TARGET)
            },
        ]);
    }
    drop(pcmd);
    for (side, label, ratio) in projected {
        table.push(vec![
            format!("heat2d {side}x{side} ({label}/iter) projected: 1 + loops/iter x added CPU / fastest us per iter"),
            "-".into(),
            "-".into(),
            format!("{ratio:.5}"),
            "-".into(),
            "-".into(),
            format!("<= {OVERHEAD_TARGET}"),
            if args.quick {
                "n/a (quick)".into()
            } else {
                pass(ratio <= OVERHEAD_TARGET)
            },
        ]);
    }

    // 3. pcmd's CPU use at the default stats period while a job of `daemon_ranks` ranks
    //    reports to it, with profiling off (progress reports only) and on.
    let window = Duration::from_secs(args.window);
    let idle = {
        let pcmd = Pcmd::spawn(&[], "info")?;
        std::thread::sleep(Duration::from_secs(1));
        pcmd_cpu_share(pcmd.pid().context("pcmd is gone")?, window)?
    };
    let mut shares = Vec::new();
    for profile in ["off", "on"] {
        let pcmd = Pcmd::spawn(&[], "info")?;
        let job = MpiJob::of(
            args.daemon_ranks,
            &heat2d,
            &[
                "--rows".into(),
                "512".into(),
                "--cols".into(),
                "512".into(),
                "--iters".into(),
                "100000000".into(),
            ],
        )
        .env("PCM_DAEMON", pcmd.socket.display().to_string())
        .env("PCM_PROFILE", profile);
        let mut group = mpi_ios_bench::Group::spawn_in_temp(job.command(), "heat2d-for-pcmd-cpu")?;
        wait_for_ranks(&pcmd_bin, &pcmd.socket, args.daemon_ranks, profile == "on")
            .with_context(|| format!("job output so far:\n{}", group.stderr_so_far()))?;
        let share = pcmd_cpu_share(pcmd.pid().context("pcmd is gone")?, window)?;
        eprintln!(
            "[profiling] pcmd with {} ranks, profiling {profile}: {share:.4} % of a core over {} s",
            args.daemon_ranks, args.window
        );
        shares.push(share);
        group.kill();
    }
    table.push(vec![
        format!(
            "pcmd CPU, % of one core ({} ranks, 2 s period, {} s window; idle pcmd {idle:.4})",
            args.daemon_ranks, args.window
        ),
        format!("{:.4}", shares[0]),
        format!("{:.4}", shares[1]),
        format!("{:.4}", shares[1]),
        "-".into(),
        "-".into(),
        format!("<= {PCMD_CPU_TARGET}"),
        if args.quick {
            "n/a (quick)".into()
        } else {
            pass(shares[1] <= PCMD_CPU_TARGET)
        },
    ]);

    let notes = vec![
        "Halo loop: mpi-calls on 1 rank, thread CPU time per loop, medians over interleaved \
         pairs. heat2d rows: median wall time per iteration of each side, and the median, min \
         and max of the per-pair ratios on/off (pairs interleaved: off, on, off, on, ...); on a \
         busy machine wall time is dominated by preemption, hence the projection from the \
         loop's CPU cost (one loop per neighbour per iteration) over the fastest 'off' run. \
         pcmd row: CPU \
         time of all pcmd threads (/proc/PID/task/*/schedstat) over the window, as a share of \
         one core; 'off' = ranks send progress only, 'on' = progress and profiles."
            .to_owned(),
        format!(
            "Load average (1/5/15 min) before: {load_before}; after: {}.",
            load_average()
        ),
    ];
    println!("MPI traffic profiling: application overhead and pcmd CPU use");
    print!("{}", table.to_text());
    for note in &notes {
        println!("{note}");
    }
    if let Some(path) = &args.markdown {
        let title = format!(
            "Profiling overhead and pcmd CPU use{}",
            if args.quick { " (quick)" } else { "" }
        );
        append_markdown(path, &title, &table, &notes)?;
    }
    Ok(())
}

/// `cpu_ns_per_loop` from the JSON line `mpi-calls` prints.
fn loop_cpu_ns(stdout: &str) -> Result<f64> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.contains("\"mpi-calls\""))
        .context("mpi-calls printed no result line")?;
    let value: serde_json::Value =
        serde_json::from_str(line).with_context(|| format!("bad mpi-calls line: {line}"))?;
    value["cpu_ns_per_loop"]
        .as_f64()
        .with_context(|| format!("no cpu_ns_per_loop in {line}"))
}

/// CPU time of all threads of `pid`, nanoseconds (first field of each thread's schedstat).
fn cpu_ns(pid: u32) -> Result<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .with_context(|| format!("process {pid} is gone"))?;
    let mut total = 0u64;
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue; // the thread ended meanwhile
        };
        let ns = text
            .split_whitespace()
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .with_context(|| format!("bad schedstat of {}: {text:?}", task.path().display()))?;
        total += ns;
    }
    Ok(total)
}

/// Share of one core (percent) that `pid` used over `window`.
fn pcmd_cpu_share(pid: u32, window: Duration) -> Result<f64> {
    let start = Instant::now();
    let before = cpu_ns(pid)?;
    std::thread::sleep(window);
    let used = cpu_ns(pid)?.saturating_sub(before);
    Ok(used as f64 / start.elapsed().as_nanos() as f64 * 100.0)
}

/// Waits (at most 60 s) until `ranks` ranks are registered and running, and, when
/// `profiles`, until each has sent a profile with traffic: the measurement then covers the
/// steady state.
fn wait_for_ranks(pcmd: &Path, socket: &Path, ranks: usize, profiles: bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let output = std::process::Command::new(pcmd)
            .arg("--socket")
            .arg(socket)
            .args(["stats", "--json"])
            .output()
            .context("running pcmd stats")?;
        if output.status.success() {
            let stats: pcm_proto::NodeStats = serde_json::from_slice(&output.stdout)
                .context("pcmd stats --json printed something else")?;
            let ready = stats.jobs.first().is_some_and(|job| {
                job.ranks.len() == ranks
                    && job.ranks.iter().all(|r| {
                        !profiles || (r.profile.iteration > 0 && !r.profile.traffic.is_empty())
                    })
            });
            if ready {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("{ranks} ranks did not register with pcmd within 60 s");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
