//! PCM's Python package (`python/pcm`: ctypes over libpcm, the C interface, so the same
//! library) with real MPI jobs of mpi4py programs: every call and misuse
//! (`python/tests/api_check.py`); the Python heat2d (`examples/heat2d-py`) through moves, a
//! checkpoint restart and a pcmrun recovery ending with exactly the checksum of its plain
//! version (which is also the Rust heat2d's); the issue's command on the installed wheel
//! printing heat2d's report; a departing Python process gone at once with status 0.
//!
//! The Python is the runtime's (`.mpi/python-<runtime>`, which `scripts/setup.sh` makes, with
//! numpy and mpi4py built by the runtime's mpicc); without it, or without numpy or mpi4py
//! there, each test says so and is skipped. The jobs take the package from the source tree
//! and the libpcm of this build (`PYTHONPATH`, `PCM_LIBRARY`), except the issue's command,
//! which runs the wheel `python/build.sh` installed (scripts/test.sh builds it).

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mpi_ios_tests::cgroup::CpuCap;
use mpi_ios_tests::netns::{emulated_nodes_usable, test_node_cap, Cluster};
use mpi_ios_tests::pcmrun_job::{assert_ended_with, PcmrunCommand};
use mpi_ios_tests::scenario::{Hog, Line, Mode, Move, Scenario};
use mpi_ios_tests::{
    complete_checkpoints, heat2d_args_sized, mpi_lock, program, read_events, runtime_python,
    wait_until, Finished, MpiJob, Pcmd, Report, Runtime, RuntimeExt as _,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pcm_proto::run::RunEvent;

const DEADLINE: Duration = Duration::from_secs(180);
const SMALL: &[&str] = &["--rows", "128", "--cols", "128", "--iters", "400"];

/// The repository's root.
fn repo() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    root.canonicalize().unwrap_or(root)
}

/// [`python`], or `None` after printing why the test is skipped.
fn python_or_skip() -> Option<PathBuf> {
    runtime_python()
        .map_err(|why| eprintln!("skipped: {why}"))
        .ok()
}

/// Whether `python` imports pcm from the wheel `python/build.sh` installed (with its own
/// libpcm); if not, prints why the test is skipped.
fn wheel_installed_or_skip(python: &Path) -> bool {
    let installed = Command::new(python)
        .args(["-c", "import pcm; print(pcm.library_path)"])
        .env_remove("PYTHONPATH")
        .env_remove("PCM_LIBRARY")
        .env("PCM_DAEMON", "none")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    if !installed.status.success() {
        eprintln!(
            "skipped: the pcm wheel is not installed in {} (python/build.sh installs it): {}",
            python.display(),
            String::from_utf8_lossy(&installed.stderr).trim()
        );
        return false;
    }
    let library = String::from_utf8_lossy(&installed.stdout).trim().to_owned();
    assert!(
        library.ends_with("site-packages/pcm/libpcm.so"),
        "the installed pcm loads {library}, not the libpcm of its wheel"
    );
    true
}

/// An absolute path of the Python heat2d's `name`.
fn script(name: &str) -> String {
    repo()
        .join("examples")
        .join("heat2d-py")
        .join(name)
        .display()
        .to_string()
}

/// `python script args` on `ranks` ranks, with the package from the source tree and the
/// libpcm of this build.
fn job(python: &Path, ranks: usize, script_path: &str, args: &[&str]) -> MpiJob {
    let argv: Vec<String> = std::iter::once(script_path.to_owned())
        .chain(args.iter().map(|a| (*a).to_owned()))
        .collect();
    MpiJob::of(ranks, python, &argv)
        .env("PYTHONPATH", repo().join("python").display().to_string())
        .env("PCM_LIBRARY", program("libpcm.so").display().to_string())
}

/// The Python heat2d (`heat2d.py`, or `heat2d_plain.py` when `plain`).
fn heat2d(python: &Path, ranks: usize, plain: bool, args: &[&str]) -> MpiJob {
    let name = if plain {
        "heat2d_plain.py"
    } else {
        "heat2d.py"
    };
    job(python, ranks, &script(name), args)
}

/// The run's report; also checks that no Python error was printed on the way.
fn report(finished: &Finished) -> Report {
    assert!(
        !finished.stderr.contains("Traceback"),
        "a Python error:\n{}",
        finished.stderr
    );
    finished.report()
}

/// The keys of the report `finished` printed as its last stdout line, in their order there.
fn report_keys(finished: &Finished) -> Vec<String> {
    let last = finished
        .stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    let value: serde_json::Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("the last line is not a report ({e}): {last}"));
    let mut keys: Vec<(usize, String)> = value
        .as_object()
        .unwrap()
        .keys()
        .map(|k| (last.find(&format!("\"{k}\":")).unwrap(), k.clone()))
        .collect();
    keys.sort();
    keys.into_iter().map(|(_, k)| k).collect()
}

/// heat2d's arguments for about `seconds` of the Python heat2d on 2 ranks of 256 x 256,
/// measured once per test binary by a probe of the plain Python program.
fn sized(python: &Path, seconds: f64) -> Vec<String> {
    static RATE: OnceLock<f64> = OnceLock::new();
    let rate = *RATE.get_or_init(|| {
        let probe = ["--rows", "256", "--cols", "256", "--iters", "1000"];
        let report = report(&heat2d(python, 2, true, &probe).run(DEADLINE));
        let rate = 1000.0 / report.seconds.max(1e-3);
        eprintln!("Python heat2d 256x256 on 2 ranks: {rate:.0} it/s");
        rate
    });
    heat2d_args_sized(256, 256, rate, seconds)
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn given_the_package_then_every_call_works_and_every_misuse_is_an_exception() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let _lock = mpi_lock();
    let check = repo().join("python").join("tests").join("api_check.py");
    let finished = job(&python, 2, &check.display().to_string(), &[]).run(DEADLINE);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    let last = finished.stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("api_check: ") && last.ends_with(" checks passed on 2 ranks"),
        "{}\n{}",
        finished.stdout,
        finished.stderr
    );
    eprintln!("{last}");
}

#[test]
fn given_moves_at_two_ranks_then_the_python_heat2d_ends_with_its_plain_versions_checksum() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let _lock = mpi_lock();
    let plain = report(&heat2d(&python, 2, true, SMALL).run(DEADLINE));
    let reference = plain.reference_checksum().to_owned();
    // The same numerics as the Rust heat2d, in numpy: the same grid.
    let rust = MpiJob::new(2, "heat2d-plain", SMALL).run(DEADLINE).report();
    assert_eq!(rust.checksum, reference, "the Python and Rust grids differ");
    for (schedule, moves) in [
        ("", 0),
        ("100:1", 1),
        ("100:0", 1),
        ("100:0+1", 1),
        ("50:1,150:0,250:1,350:0+1", 4),
    ] {
        let finished = heat2d(&python, 2, false, SMALL)
            .env("PCM_SCHEDULE", schedule)
            .run(DEADLINE);
        let moved = report(&finished);
        assert_eq!(
            moved.checksum, reference,
            "PCM_SCHEDULE={schedule}: the grid differs from the plain run's\n{}",
            finished.stderr
        );
        assert_eq!(moved.migrations, Some(moves), "PCM_SCHEDULE={schedule}");
        assert_eq!((moved.iterations, moved.ranks), (400, 2));
    }
}

/// A user's virtual environment made as `python3 -m venv` makes it, of symlinks: its
/// `bin/python3` links to the base interpreter, which alone finds neither numpy nor mpi4py.
/// PCM must start the replacement with the environment's interpreter (`sys.executable`,
/// which the package hands over as `PCM_EXECUTABLE`), not the process's `/proc/self/exe`.
#[test]
fn given_a_symlinked_venv_then_a_moved_rank_starts_in_that_venv_and_the_checksum_is_plain() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("venv");
    let made = Command::new(&python)
        .args(["-m", "venv", "--without-pip", "--symlinks"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let venv_python = venv.join("bin").join("python3");
    let base = std::fs::canonicalize(&venv_python).unwrap();
    assert_ne!(base, venv_python, "the venv's python3 is not a symlink");
    // The environment reaches numpy and mpi4py through a .pth file naming the runtime
    // Python's site-packages; the base interpreter does not read it.
    let query = "import site; print(site.getsitepackages()[0])";
    let site = |python: &Path| {
        let out = Command::new(python).args(["-c", query]).output().unwrap();
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    };
    let runtime_site = site(&python);
    std::fs::write(
        site(&venv_python).join("runtime.pth"),
        format!("{}\n", runtime_site.display()),
    )
    .unwrap();
    let base_has_numpy = Command::new(&base)
        .args(["-c", "import numpy, mpi4py"])
        .env_remove("PYTHONPATH")
        .output()
        .unwrap()
        .status
        .success();
    let _lock = mpi_lock();
    let plain = report(&heat2d(&python, 2, true, SMALL).run(DEADLINE));
    let finished = heat2d(&venv_python, 2, false, SMALL)
        .env("PCM_SCHEDULE", "100:1,200:0")
        .env("PCM_RECONFIGURE_TIMEOUT", "30")
        .run(DEADLINE);
    assert!(
        !finished.stderr.contains("ModuleNotFoundError"),
        "a replacement started outside the venv (base interpreter {}):\n{}",
        base.display(),
        finished.stderr
    );
    let moved = report(&finished);
    assert_eq!(moved.checksum, plain.reference_checksum());
    assert_eq!(moved.migrations, Some(2));
    if base_has_numpy {
        eprintln!(
            "note: the base interpreter {} has numpy and mpi4py itself, so this run could not \
             tell which interpreter the replacements ran",
            base.display()
        );
    }
}

#[test]
fn given_the_issues_command_then_the_python_heat2d_prints_heat2ds_report_with_the_plain_checksum() {
    // `PCM_SCHEDULE=500:1 mpiexec -n 2 python3 examples/heat2d-py/heat2d.py --rows 256
    // --cols 256 --iters 2000`, with the runtime's python3 and the wheel installed there.
    let Some(python) = python_or_skip() else {
        return;
    };
    // Before the check: `import pcm` starts MPI (a singleton), whose shared-memory segment,
    // alive while it runs, another test's job would count as its own leftover.
    let _lock = mpi_lock();
    if !wheel_installed_or_skip(&python) {
        return;
    }
    let args = ["--rows", "256", "--cols", "256", "--iters", "2000"];
    let plain = report(&heat2d(&python, 2, true, &args).run(DEADLINE));
    let argv: Vec<String> = std::iter::once(script("heat2d.py"))
        .chain(args.iter().map(|a| (*a).to_owned()))
        .collect();
    let finished = MpiJob::of(2, &python, &argv)
        .env("PCM_SCHEDULE", "500:1")
        .run(DEADLINE);
    let moved = report(&finished);
    assert_eq!(moved.checksum, plain.reference_checksum());
    assert_eq!(moved.migrations, Some(1));
    // heat2d's report: the same fields in the same order and, but for the time, the same
    // values (the grids are the same too).
    let rust = MpiJob::new(2, "heat2d", &args)
        .env("PCM_SCHEDULE", "500:1")
        .run(DEADLINE);
    assert_eq!(
        report_keys(&finished),
        report_keys(&rust),
        "{}",
        finished.stdout
    );
    let rust = rust.report();
    assert_eq!(moved.checksum, rust.checksum);
    assert_eq!(
        (
            &moved.hosts,
            moved.resizes,
            moved.rows,
            moved.cols,
            moved.ranks
        ),
        (&rust.hosts, rust.resizes, rust.rows, rust.cols, rust.ranks)
    );
    eprintln!("{}", finished.stdout.lines().last().unwrap_or_default());
}

#[test]
fn given_a_rank_moved_then_its_old_python_process_exits_at_once_with_status_0() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let _lock = mpi_lock();
    let args = sized(&python, 4.0);
    let plain = report(&heat2d(&python, 2, true, &strs(&args)).run(DEADLINE));
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let mut group = heat2d(&python, 2, false, &strs(&args))
        .env("PCM_SCHEDULE", "300:1")
        .env("PCM_EVENTS", events.display().to_string())
        .start(dir.path(), "job");
    wait_until(DEADLINE, "the move", || {
        assert!(group.running(), "the job ended: {}", group.stderr_so_far());
        read_events(&events)
            .iter()
            .any(|e| matches!(e.event, RunEvent::Migrated { .. }))
    });
    let moved = Instant::now();
    let departed = read_events(&events)
        .into_iter()
        .find_map(|e| match e.event {
            RunEvent::Started {
                rank,
                pid,
                replacement: false,
                ..
            } if rank.0 == 1 => Some(pid),
            _ => None,
        })
        .expect("rank 1's start");
    let gone = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.is_empty() || stat.contains(") Z ")
    };
    if Runtime::current() == Runtime::Mpich {
        wait_until(
            Duration::from_secs(2),
            "the departed process to exit",
            || gone(departed),
        );
        eprintln!(
            "the departed process was gone {:?} after the move",
            moved.elapsed()
        );
        assert!(
            group.running(),
            "the job ended before it could be checked: make it longer"
        );
    }
    let finished = group.wait(DEADLINE);
    assert_eq!(report(&finished).checksum, plain.reference_checksum());
    // Every process said it exited by itself, with status 0: both first ranks (the departed
    // one included) and the replacement.
    let exits: Vec<(u32, i32)> = read_events(&events)
        .into_iter()
        .filter_map(|e| match e.event {
            RunEvent::Exited { pid, code, .. } => Some((pid, code)),
            _ => None,
        })
        .collect();
    assert_eq!(exits.len(), 3, "{exits:?}");
    assert!(exits.iter().all(|&(_, code)| code == 0), "{exits:?}");
    assert!(exits.iter().any(|&(pid, _)| pid == departed), "{exits:?}");
}

#[test]
fn given_a_python_rank_killed_mid_run_when_restarted_then_checksum_equals_plain() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let _lock = mpi_lock();
    let args = sized(&python, 4.0);
    let iters: u64 = args[5].parse().unwrap();
    let reference = report(&heat2d(&python, 2, true, &strs(&args)).run(DEADLINE))
        .reference_checksum()
        .to_owned();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("a-store");
    let pcmd = Pcmd::spawn(&["--checkpoint-dir", store.to_str().unwrap()], "info")
        .unwrap_or_else(|e| panic!("{e}"));
    let checkpoint_socket = pcm_proto::checkpoint::socket_path(&pcmd.socket);
    wait_until(DEADLINE, "pcmd's checkpoint socket", || {
        UnixStream::connect(&checkpoint_socket).is_ok()
    });
    let series = "heat2d-2r"; // named after the script, as pcmrun names its lock
    let job = heat2d(&python, 2, false, &strs(&args))
        .env("PCM_DAEMON", pcmd.daemon_env.clone())
        .env("PCM_CHECKPOINT_INTERVAL", "0.25");
    let mut run = job.start(dir.path(), "killed");
    wait_until(DEADLINE, "a checkpoint to be written", || {
        assert!(
            run.running(),
            "the job ended before the kill: {}",
            run.stderr_so_far()
        );
        !complete_checkpoints(&store, series).is_empty()
    });
    let pid = pcmd
        .status()
        .rank(pcm_proto::Rank(1))
        .expect("rank 1 is registered with pcmd")
        .pid;
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    let killed = run.wait(DEADLINE);
    assert_ne!(killed.code, Some(0), "the job survived the kill of a rank");
    let newest = *complete_checkpoints(&store, series).last().unwrap();

    let events = dir.path().join("restarted-events.jsonl");
    let restarted = job
        .env("PCM_RESTART", "require")
        .env("PCM_EVENTS", events.display().to_string())
        .run(DEADLINE);
    let resumed = report(&restarted);
    let iteration = read_events(&events)
        .into_iter()
        .find_map(|e| match e.event {
            RunEvent::Restarted { iteration } => Some(iteration),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no restart event:\n{}", restarted.stderr));
    assert_eq!(
        resumed.checksum, reference,
        "the restart changed the result"
    );
    assert_eq!(resumed.iterations, iters);
    assert!(
        iteration >= newest && iteration < iters,
        "restarted at {iteration}, newest checkpoint {newest}"
    );
    eprintln!("killed rank 1; the restart resumed at iteration {iteration} of {iters}");
}

#[test]
fn given_a_python_rank_killed_under_pcmrun_then_pcmrun_brings_the_job_back_with_the_plain_checksum()
{
    let Some(python) = python_or_skip() else {
        return;
    };
    let _lock = mpi_lock();
    let args = sized(&python, 6.0);
    let plain = report(&heat2d(&python, 2, true, &strs(&args)).run(DEADLINE))
        .reference_checksum()
        .to_owned();
    let dir = tempfile::tempdir().unwrap();
    let mut pcmrun = PcmrunCommand::new(dir.path(), 2);
    pcmrun
        .command()
        .env("PYTHONPATH", repo().join("python"))
        .env("PCM_LIBRARY", program("libpcm.so"))
        .args(["--progress", "1"])
        .args(["--checkpoint-interval", "0.5", "--retry-delay", "0.2"]);
    let argv: Vec<String> = std::iter::once(script("heat2d.py"))
        .chain(args.iter().cloned())
        .collect();
    let mut run = pcmrun.start(python.to_str().unwrap(), &argv, dir.path(), "pcmrun");
    let wait = Duration::from_secs(60);
    run.wait_for("a checkpoint", wait, |r| {
        r.launch == 1 && matches!(r.event, RunEvent::Checkpointed { .. })
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let victim = match run
        .wait_for("rank 1's start", wait, |r| {
            r.launch == 1 && matches!(r.event, RunEvent::Started { rank, .. } if rank.0 == 1)
        })
        .unwrap_or_else(|e| panic!("{e}"))
        .event
    {
        RunEvent::Started { pid, .. } => pid,
        _ => unreachable!(),
    };
    kill(Pid::from_raw(victim as i32), Signal::SIGKILL).unwrap();
    let finished = run.wait(DEADLINE);
    assert!(
        !finished.stderr.contains("Traceback"),
        "a Python error:\n{}",
        finished.stderr
    );
    assert_ended_with(&finished, &plain);
    // pcmrun locks the series the job checkpoints in (it locked `python3-2r` while the job
    // wrote `heat2d-py-2r`, and rank 0 warned).
    assert!(
        !finished
            .stderr
            .contains("pcmrun holds the checkpoint series"),
        "pcmrun locked another series than the job's:\n{}",
        finished.stderr
    );
    let summary = run.report().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary["launches"], 2, "{summary}");
    assert_eq!(
        summary["recoveries"][0]["start"], "from_checkpoint",
        "{summary}"
    );
    let resumed = summary["recoveries"][0]["resumed_from"].as_u64().unwrap();
    assert!(resumed > 0, "resumed from iteration 0: {summary}");
    eprintln!("killed rank 1 under pcmrun; the relaunch resumed from iteration {resumed}");
}

/// Seconds the agents' job would take unloaded (as in agents_e2e.rs): it must outlive the
/// hog (at 3 s), the agents' reaction and the move.
const UNLOADED_SECONDS: f64 = 10.0;

#[test]
fn given_a_loaded_node_then_the_agents_move_the_python_rank_to_a_cooperating_node() {
    // agents_e2e.rs's cooperating-node scenario with the Python heat2d as the job (the
    // installed wheel; heat2d.py runs as an executable, its interpreter from its first line).
    if !emulated_nodes_usable() {
        return;
    }
    let Some(python) = python_or_skip() else {
        return;
    };
    // Before the check: `import pcm` starts MPI (a singleton), whose shared-memory segment,
    // alive while it runs, another test's job would count as its own leftover.
    let _lock = mpi_lock();
    if !wheel_installed_or_skip(&python) {
        return;
    }
    // How much slower the Python heat2d is than the Rust one here, to size its run by time
    // from the scenario's own measure of the Rust one on the nodes.
    let (rows, cols) = (512, 512);
    let rate_of = |finished: Finished, iters: f64| iters / report(&finished).seconds.max(1e-3);
    let grid = ["--rows", "512", "--cols", "512", "--iters"];
    let rust = rate_of(
        MpiJob::new(2, "heat2d-plain", &[&grid[..], &["4000"]].concat()).run(DEADLINE),
        4000.0,
    );
    let py = rate_of(
        heat2d(&python, 2, true, &[&grid[..], &["800"]].concat()).run(DEADLINE),
        800.0,
    );
    let cap = test_node_cap();
    let cluster =
        Cluster::with_caps(&[Some(CpuCap::cores(2.0 * cap)), Some(CpuCap::cores(cap))]).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("ios-e2e-py-")
        .tempdir()
        .unwrap();
    let mut scenario = Scenario {
        rows,
        cols,
        iters: 0,
        progress_period: mpi_ios_tests::scenario::PROGRESS_PERIOD,
        placement: vec![0, 1],
        agents_at_start: vec![0, 1],
        hog: Some(Hog::on(1, Duration::from_secs(3))),
        joins: Vec::new(),
        leaves: Vec::new(),
        agent_options: ["--hold-down", "2", "--profile-period", "1"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
        timeout: Duration::from_secs(300),
        unlisted_spares: false,
    };
    scenario
        .size_by_time(&cluster, dir.path(), UNLOADED_SECONDS)
        .unwrap();
    scenario.iters = ((scenario.iters as f64 * py / rust) as u64).max(1000);
    eprintln!(
        "Python heat2d at {:.2} of the Rust one's rate here: {} iterations",
        py / rust,
        scenario.iters
    );
    let outcome = scenario.run_program(
        &cluster,
        Mode::Adaptive,
        &script("heat2d.py"),
        dir.path(),
        &mut |line| match line {
            Line::Progress(s) => eprintln!(
                "{:6.1} s {:5} {:8.1} it/s {:?}",
                s.t, s.iteration, s.rate, s.hosts
            ),
            Line::Event(e) => eprintln!("{:6.1} s >>> {}", e.t, e.what),
        },
    );
    for (host, d) in &outcome.decisions {
        eprintln!("agent {host}: {}", d.what);
    }
    assert!(
        outcome.loop_start.is_some() && outcome.samples.len() >= 2,
        "no loop start or progress events"
    );
    let nodes = cluster.host_names();
    let moved: Vec<_> = outcome.migrations().collect();
    assert!(
        moved.iter().any(|m| m.moved
            == Some(Move {
                rank: 1,
                from: nodes[1].clone(),
                to: nodes[0].clone(),
            })),
        "rank 1 did not move to the cooperating node: {moved:?}\n{:?}",
        outcome.decisions
    );
    assert_eq!(
        outcome.report.hosts.clone().unwrap_or_default(),
        [nodes[0].as_str(), nodes[0].as_str()],
        "both ranks must end on the cooperating node"
    );
    // The Rust heat2d-plain's checksum: the Python grid is the same.
    assert_eq!(
        outcome.report.checksum,
        scenario.plain_checksum(Duration::from_secs(120))
    );
}
