//! `mpi-ios-bench overhead --contention`: does PCM lose more than plain MPI when the
//! machine is shared? heat2d-plain and heat2d (PCM, served by a pcmd) run in alternation
//! ([`mpi_ios_bench::paired`]), every run beside the same CPU hog (`--hog-loops` busy
//! loops, started once before the first run and kept until the last); judged on the
//! per-pair ratios of loop time and of whole-process wall time: median and interquartile
//! range.

use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Result};
use mpi_ios_bench::paired::{interleave, Variant};
use mpi_ios_bench::{load_average, median, try_program, Group, MpiJob, Pcmd, Table};

use super::OverheadArgs;

/// The `q`-quantile of `values` (0 <= q <= 1), linear between the order statistics; NaN if
/// empty.
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        1 => v[0],
        n => {
            let at = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
            v[lo] + (v[hi] - v[lo]) * (at - lo as f64)
        }
    }
}

/// A busy loop per `loops` (one shell each), killed when dropped.
fn start_hog(loops: usize) -> Result<Group> {
    let script = match loops {
        0 | 1 => "while :; do :; done".to_owned(),
        n => format!("for i in $(seq {n}); do (while :; do :; done) & done; wait"),
    };
    let mut command = Command::new("/bin/sh");
    command.args(["-c", &script]);
    Ok(Group::spawn_in_temp(command, "hog")?)
}

pub(super) fn run(args: &OverheadArgs) -> Result<()> {
    ensure!(args.pairs >= 1, "--pairs must be at least 1");
    let program = args.program.clone();
    let plain_name = format!("{program}-plain");
    let plain = try_program(&plain_name)?;
    let pcm = try_program(&program)?;
    let pcmd = Pcmd::spawn(&[], "info")?;
    let daemon = pcmd.socket.display().to_string();
    let timeout = Duration::from_secs(args.timeout);
    let load_before = load_average();
    let hog = start_hog(args.hog_loops)?;
    eprintln!(
        "[overhead --contention] {} busy loop(s) running (process group {}), pcmd on {daemon}",
        args.hog_loops.max(1),
        hog.pid()
    );
    let mut table = Table::new(&[
        "grid",
        "class",
        "iters",
        "ranks",
        "pairs",
        "plain us/iter (median)",
        "pcm us/iter (median)",
        "loop ratio median",
        "loop ratio IQR (q1 - q3)",
        "wall ratio median",
        "wall ratio IQR (q1 - q3)",
    ]);
    let mut cases = Vec::new();
    for case in args.sizes.cases() {
        let run_args = case.args();
        let variants = [
            Variant::new(
                plain_name.clone(),
                MpiJob::of(args.ranks, &plain, &run_args),
            ),
            Variant::new(
                format!("{program} (PCM)"),
                MpiJob::of(args.ranks, &pcm, &run_args).env("PCM_DAEMON", daemon.clone()),
            ),
        ];
        let what = format!("overhead --contention {0}x{0}", case.side);
        let series = interleave(
            &what,
            &variants,
            case.iters,
            args.warmup,
            args.pairs,
            timeout,
        )?;
        let loops = series.ratios(1, |m| m.loop_s);
        let walls = series.ratios(1, |m| m.wall_s);
        let (lq1, lq3) = (quantile(&loops, 0.25), quantile(&loops, 0.75));
        let (wq1, wq3) = (quantile(&walls, 0.25), quantile(&walls, 0.75));
        table.push(vec![
            format!("{0}x{0}", case.side),
            case.label.to_owned(),
            case.iters.to_string(),
            args.ranks.to_string(),
            args.pairs.to_string(),
            format!("{:.1}", median(&case.per_iter_us(&series.loop_s(0)))),
            format!("{:.1}", median(&case.per_iter_us(&series.loop_s(1)))),
            format!("{:.4}", median(&loops)),
            format!("{:.4} ({lq1:.4} - {lq3:.4})", lq3 - lq1),
            format!("{:.4}", median(&walls)),
            format!("{:.4} ({wq1:.4} - {wq3:.4})", wq3 - wq1),
        ]);
        cases.push(serde_json::json!({
            "class": case.label,
            "grid": case.side,
            "iters": case.iters,
            "ranks": args.ranks,
            "pairs": args.pairs,
            "plain_us_per_iter": median(&case.per_iter_us(&series.loop_s(0))),
            "pcm_us_per_iter": median(&case.per_iter_us(&series.loop_s(1))),
            "loop_ratio_median": median(&loops),
            "loop_ratio_q1": lq1,
            "loop_ratio_q3": lq3,
            "loop_ratios": loops,
            "wall_ratio_median": median(&walls),
            "wall_ratio_q1": wq1,
            "wall_ratio_q3": wq3,
            "wall_ratios": walls,
        }));
    }
    drop(hog);
    drop(pcmd);
    let notes = vec![
        format!(
            "Every run beside {} busy loop(s) on the same machine; ratios are pcm/plain per pair.",
            args.hog_loops.max(1)
        ),
        format!(
            "Load average (1/5/15 min) before: {load_before}; after: {}.",
            load_average()
        ),
    ];
    super::report(
        &format!("PCM overhead under contention: {program} (PCM + pcmd) vs {plain_name}"),
        &format!("PCM overhead under contention: {program} vs {plain_name}"),
        args,
        &table,
        &notes,
    )?;
    println!(
        "{}",
        serde_json::json!({
            "benchmark": "overhead-contention",
            "hog_loops": args.hog_loops.max(1),
            "quick": args.quick,
            "cases": cases,
        })
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_order_statistics() {
        let v = [4.0, 1.0, 3.0, 2.0, 5.0];
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 0.25), 2.0);
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 1.0), 5.0);
        assert!((quantile(&[1.0, 2.0], 0.25) - 1.25).abs() < 1e-12);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
