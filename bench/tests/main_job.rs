//! The main job in its short mode (what `scripts/main-job.sh --quick --fault` runs after
//! building): at least one automatic migration, the loaded node left for the joining one,
//! checksums equal to the plain runs, the plot written; then the fault act, a node powered
//! off mid-run and the job back by itself on the others with the plain checksum.
//! Needs root (network namespaces, cgroups); skipped with the reason otherwise.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mpi_ios_bench::summary::{Summary, MAIN_JOB_FILE};
use mpi_ios_tests::netns::emulated_nodes_usable;
use mpi_ios_tests::Finished;

/// The summary of an act that ended (`finished`, results in `out`), after checking that it
/// passed its own check with equal checksums; its output is printed first, without the
/// progress samples in which the placement did not change (a failure's verdict lines and
/// the act's stderr must be in the part of the output that CI shows, not after thousands of
/// samples).
fn passed(finished: &Finished, out: &Path, what: &str) -> Summary {
    eprintln!("{}", condensed(&finished.stdout));
    assert_eq!(
        finished.code,
        Some(0),
        "{what} failed its own check; its stderr:\n{}\nits agents' logs:\n{}",
        finished.stderr,
        agent_logs(out)
    );
    let summary = Summary::read(out, MAIN_JOB_FILE).unwrap();
    assert!(summary.passed && summary.checksums_match, "{summary:#?}");
    summary
}

/// `stdout` without the progress samples (`  2.0 s  3806/8888  874.9 it/s  ranks on ...`)
/// that repeat the previous sample's placement: events, verdicts and placement changes stay.
fn condensed(stdout: &str) -> String {
    let mut placement: Option<&str> = None;
    let mut kept = Vec::new();
    let mut dropped = 0;
    for line in stdout.lines() {
        let sample = line.contains(" it/s") && line.trim_start().split(' ').nth(1) == Some("s");
        if sample {
            let hosts = line.split_once("ranks on").map_or("", |(_, h)| h);
            if placement == Some(hosts) {
                dropped += 1;
                continue;
            }
            placement = Some(hosts);
        } else {
            placement = None;
        }
        kept.push(line);
    }
    format!(
        "{}\n({dropped} progress samples with an unchanged placement left out)",
        kept.join("\n")
    )
}

/// The agents' logs the act kept under `out/logs` (`agent-*.err` of each run), for a failure
/// that only their decisions explain (the act's temporary directory goes with the test):
/// without colours, samples and connection chatter, each line cut at 240 characters.
fn agent_logs(out: &Path) -> String {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            if path.is_dir() {
                walk(&path, found);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("agent-") && n.ends_with(".err"))
            {
                found.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&out.join("logs"), &mut files);
    let noise = ["sampler", "libp2p", "registered", "up at", "pool key"];
    let mut text = String::new();
    for file in files {
        let Ok(log) = std::fs::read_to_string(&file) else {
            continue;
        };
        text.push_str(&format!("--- {}\n", file.display()));
        for line in log.lines() {
            let plain = strip_colours(line);
            if noise.iter().any(|n| plain.contains(n)) {
                continue;
            }
            text.extend(plain.chars().take(240));
            text.push('\n');
        }
    }
    text
}

/// `line` without its ANSI colour sequences (`ESC [ ... m`).
fn strip_colours(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

#[test]
fn agent_logs_gathers_the_kept_agent_logs_without_samples() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("logs").join("malleable").join("adaptive");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("agent-node-a.err"),
        "\u{1b}[32m INFO\u{1b}[0m growing a job\nDEBUG ios_agent::sampler: node sample\n",
    )
    .unwrap();
    std::fs::write(run.join("job.err"), "not an agent's\n").unwrap();
    let text = agent_logs(dir.path());
    assert!(text.contains("agent-node-a.err"), "{text}");
    assert!(text.contains(" INFO growing a job"), "{text}");
    assert!(!text.contains("sampler"), "{text}");
    assert!(!text.contains("not an agent's"), "{text}");
}

#[test]
fn strip_colours_keeps_the_text() {
    assert_eq!(
        strip_colours("\u{1b}[2m2026\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m grow"),
        "2026  INFO grow"
    );
}

#[test]
fn condensed_output_keeps_events_verdicts_and_placement_changes() {
    let stdout =
        "== adaptive run\n      0.2 s       0/88       0.0 it/s  ranks on node-a node-b\n      \
                  0.3 s      32/88    1234.0 it/s  ranks on node-a node-b\n      2.0 s  >>> CPU \
                  hog started on node-b\n      4.4 s      50/88     900.0 it/s  ranks on node-a \
                  node-c\n      4.5 s      60/88     900.0 it/s  ranks on node-a node-c\n\
                  migration at 4.4 s: rank 1 moved node-b -> node-c\n      0.1 s       1/88    \
                  1271.0 it/s\n      0.2 s       2/88    1271.0 it/s\n";
    let kept = condensed(stdout);
    assert!(kept.contains("0.2 s       0/88"), "{kept}");
    assert!(!kept.contains("0.3 s      32/88"), "{kept}");
    assert!(kept.contains(">>> CPU hog"), "{kept}");
    assert!(kept.contains("4.4 s      50/88"), "{kept}");
    assert!(!kept.contains("4.5 s"), "{kept}");
    assert!(kept.contains("migration at 4.4 s"), "{kept}");
    assert!(kept.contains("0.1 s       1/88"), "{kept}");
    assert!(!kept.contains("2/88"), "{kept}");
    assert!(kept.contains("(3 progress samples"), "{kept}");
}

/// `mpi-ios-bench adaptive ARGS --out DIR` in a process group of its own, to its end within
/// `timeout`, one MPI test at a time: the temporary directory (removed when dropped), `DIR`
/// in it, and how it ended. Panics if it did not end.
fn adaptive(
    args: &[&str],
    label: &str,
    timeout: Duration,
) -> (tempfile::TempDir, PathBuf, Finished) {
    let _lock = mpi_ios_tests::mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let mut command = Command::new(env!("CARGO_BIN_EXE_mpi-ios-bench"));
    command.arg("adaptive").args(args).arg("--out").arg(&out);
    let finished = mpi_ios_tests::Group::spawn(command, dir.path(), label)
        .and_then(|group| group.wait_within(timeout))
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    (dir, out, finished)
}

#[test]
fn the_main_job_moves_a_rank_by_itself_and_matches_the_plain_checksum() {
    if !emulated_nodes_usable() {
        return;
    }
    // Generous for the same reason as in figs.rs: a static run that locks into the cgroup
    // quota period is slow, not wrong.
    let (_dir, out, finished) = adaptive(
        &["--quick", "--check", "--fault"],
        "main-job",
        Duration::from_secs(900),
    );
    let summary = passed(&finished, &out, "the main job");
    let names: Vec<&str> = summary.runs.iter().map(|r| r.mode.as_str()).collect();
    assert_eq!(
        names,
        ["adaptive", "static", "unloaded", "best"],
        "{summary:#?}"
    );
    // The limit counts the iterations after the join at the best placement's speed under
    // the same hog, measured: an adaptive run clearly faster than that means a wrong
    // yardstick (20% allowed for the noise of a shared two-core machine).
    let ratio = summary.adaptive_over_limit.unwrap();
    assert!(ratio >= 0.8, "adaptive / limit = {ratio}\n{summary:#?}");
    // Issue 40: the limit's rate was measured with the hog running during all of its
    // window, which covers the best run's loop (it starts its hog before the loop); the
    // unloaded rate is named as such.
    let best = summary
        .reference_rates
        .iter()
        .find(|r| r.run == "best")
        .unwrap_or_else(|| panic!("no best-placement rate\n{summary:#?}"));
    assert!(
        best.under_load && best.from_s == 0.0 && best.to_s > 1.0 && best.it_per_s > 0.0,
        "{summary:#?}"
    );
    assert!(
        summary
            .reference_rates
            .iter()
            .any(|r| r.run == "unloaded" && !r.under_load),
        "{summary:#?}"
    );
    assert_eq!(summary.limit_refused, None);
    eprintln!(
        "after the last move / best placement under the same load: {:?}",
        summary.settled_over_best
    );
    // The agents' own moves took the rank off the loaded node; where it went first is their
    // choice (node-a may take it and pass one on to node-c), and the ranks ended off node-b
    // with node-c used.
    assert!(
        summary.moves.iter().any(|m| m.moved.from == "node-b"),
        "{summary:#?}"
    );
    assert!(
        !summary.final_hosts.iter().any(|h| h == "node-b")
            && summary.final_hosts.iter().any(|h| h == "node-c"),
        "{summary:#?}"
    );
    // The fault act: node-b powered off mid-run, pcmrun relaunched on node-a and node-c.
    assert_eq!(summary.fault_recovered, Some(true), "{summary:#?}");
    for name in ["throughput.svg", "throughput.png", "timeline.csv"] {
        let len = std::fs::metadata(out.join(name)).map_or(0, |m| m.len());
        assert!(len > 500, "{name}: {len} bytes");
    }
}

/// Issue 38, item 5: the malleable act in its short mode (what `scripts/main-job.sh
/// --malleable --quick` runs after building). heat2d on node-a and node-b, node-b loaded,
/// node-c and node-d join idle; the agents grow the job onto one of them by themselves, and
/// when node-c's agent leaves they shrink it off node-c (or move its rank), with nobody
/// acting. The same events with agents that only migrate (`--no-resize`) for comparison; the
/// checksums of both equal heat2d-plain's. Sized by its events: 70-85 s in all on this
/// project's machine kind (the two adaptive runs 25-35 s each).
#[test]
fn the_malleable_act_grows_and_shrinks_the_job_by_itself() {
    if !emulated_nodes_usable() {
        return;
    }
    let started = Instant::now();
    let (_dir, out, finished) = adaptive(
        &["--malleable", "--quick", "--check"],
        "main-job-malleable",
        Duration::from_secs(600),
    );
    eprintln!(
        "the malleable act took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let summary = passed(&finished, &out, "the malleable act");
    let names: Vec<&str> = summary.runs.iter().map(|r| r.mode.as_str()).collect();
    assert_eq!(
        names,
        ["malleable", "migration-only", "plain"],
        "{summary:#?}"
    );
    assert!(
        summary.grows() >= 1 && summary.shrinks() >= 1,
        "{summary:#?}"
    );
    // The malleable run's time beside the migration-only run's.
    let act = summary.malleable.as_ref().unwrap();
    assert_eq!(act.malleable_s, summary.runs[0].seconds, "{summary:#?}");
    assert_eq!(
        act.migration_only_s, summary.runs[1].seconds,
        "{summary:#?}"
    );
    assert_eq!(act.migration_only_resizes, 0, "{summary:#?}");
    assert!(act.node_c_left, "{summary:#?}");
    assert!(
        !summary.final_hosts.iter().any(|h| h == "node-c"),
        "{summary:#?}"
    );
    for name in ["throughput.svg", "throughput.png", "timeline.csv"] {
        let len = std::fs::metadata(out.join(name)).map_or(0, |m| m.len());
        assert!(len > 500, "{name}: {len} bytes");
    }
}

/// Issue 13, item 6: the main job runs any PCM program; the C heat2d (PCM through the C
/// interface) is moved by the agents like the Rust one. `--check` makes the job fail unless
/// a rank moved by itself, the ranks ended off the loaded node and the four checksums (C
/// adaptive, Rust static, unloaded and best placement) are equal.
///
/// Not in CI's run (36 s of a test command that ran 61 min on 2026-12-07, over the 60
/// allowed): the agents moving the C heat2d under load is `agents_e2e`'s
/// `the_c_heat2d_runs_the_adaptive_scenario_too`, and the main job's `--program` is the same
/// code for either program. `cargo test --release -p mpi-ios-bench --test main_job --
/// --ignored` runs it.
#[test]
#[ignore = "36 s; covered in CI by agents_e2e's C scenario (see the doc comment)"]
fn the_main_job_moves_the_c_heat2d_too() {
    if !emulated_nodes_usable() {
        return;
    }
    if let Err(e) = mpi_ios_tests::try_program("heat2d-c") {
        panic!("{e} (scripts/build-c.sh builds it)");
    }
    let (_dir, out, finished) = adaptive(
        &["--quick", "--check", "--program", "heat2d-c"],
        "main-job-c",
        Duration::from_secs(900),
    );
    let summary = passed(&finished, &out, "the main job with heat2d-c");
    assert_eq!(summary.runs[0].program, "heat2d-c", "{summary:#?}");
    assert!(!summary.moves.is_empty(), "{summary:#?}");
}

#[test]
fn the_agent_benchmark_quick_mode_measures_a_reaction_and_the_agents_cpu() {
    if !emulated_nodes_usable() {
        return;
    }
    let _lock = mpi_ios_tests::mpi_lock();
    let out = Command::new(env!("CARGO_BIN_EXE_mpi-ios-bench"))
        .args(["agents", "--quick"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("load onset -> migration: median"), "{text}");
    assert!(text.contains("agent CPU at steady state: median"), "{text}");
}

#[test]
fn ctrl_c_stops_the_main_job_and_leaves_no_namespace_cgroup_or_process() {
    if !emulated_nodes_usable() {
        return;
    }
    let _lock = mpi_ios_tests::mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    let stderr = dir.path().join("stderr");
    // Not in a process group of its own: Ctrl-C reaches the bench alone, as the terminal
    // would deliver it to a job started with `sudo` (the bench's own children are in
    // process groups of their own).
    let mut child = Command::new(env!("CARGO_BIN_EXE_mpi-ios-bench"))
        .args(["adaptive", "--quick", "--out"])
        .arg(dir.path().join("results"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Mid-run: the agents, pcmd daemons and the job are up (the adaptive run's loop starts
    // about 1 s in and the quick mode lasts about 5 s).
    std::thread::sleep(Duration::from_secs(4));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the main job did not stop within 30 s of SIGINT"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let errors = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        !status.success(),
        "an interrupted run must not report success"
    );
    assert!(errors.contains("interrupted"), "{errors}");
    // Its namespaces (pcmt<pid>s...) and cgroups (mpi-ios-<pid>s...) are gone.
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let netns = String::from_utf8_lossy(&netns.stdout);
    assert!(
        !netns.contains(&format!("pcmt{pid}s")),
        "namespaces left behind:\n{netns}"
    );
    for root in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup"] {
        for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            assert!(
                !name.starts_with(&format!("mpi-ios-{pid}s")),
                "cgroup left behind: {root}/{name}"
            );
        }
    }
    // Nothing it started still runs: no agent, daemon, peer server, launcher daemon or rank
    // (the test binaries run one at a time, and this one holds the MPI lock). Only processes
    // of this build (binaries of its directory) or of the bench's emulated nodes count: the
    // machine may run another checkout's jobs meanwhile.
    let ours = [
        "heat2d",
        "ios-agent",
        "pcmd",
        "peer-server",
        "orted",
        "mpirun",
        "mpiexec.hydra",
        "hydra_pmi_proxy",
    ];
    let build_dir = std::path::Path::new(env!("CARGO_BIN_EXE_mpi-ios-bench"))
        .parent()
        .unwrap()
        .display()
        .to_string();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let cmd = std::fs::read_to_string(e.path().join("cmdline")).unwrap_or_default();
            // Zombies (killed, not yet reaped by init) run nothing.
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            if stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
            {
                return None;
            }
            let of_this_build = cmd.contains(&format!("{build_dir}/"));
            let on_its_nodes = cmd.contains(&format!("pcm-netns-{pid}s"));
            (of_this_build && ours.contains(&comm.trim()) || on_its_nodes).then(|| {
                format!(
                    "{} {}",
                    e.file_name().to_string_lossy(),
                    cmd.replace('\0', " ")
                )
            })
        })
        .collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
}
