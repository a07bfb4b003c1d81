//! Harness for the end-to-end tests: runs the project's release binaries under the MPI
//! runtime they were built for (`mpirun` with the documented Open MPI settings, or MPICH's
//! hydra `mpiexec`; see [`Runtime`]), with a deadline on every run and a guard that kills
//! the whole process group it started (the launcher, its daemons, every rank, spawned
//! replacements included) if a test fails or times out.
//!
//! The binaries must be built first (`cargo build --release --bins`, which `scripts/test.sh`
//! does); tests find them next to the test executable's profile directory.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

pub mod cgroup;
pub mod doc_blocks;
pub mod faults;
pub mod netns;
pub mod pcmrun_job;
pub mod pool;
pub mod scenario;
pub mod sites;
pub mod slurm;
pub mod urgent;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::Deserialize;

pub use pcmrun::Runtime;

/// The MPICH version `scripts/setup.sh` installs, and where.
pub const MPICH_VERSION: &str = "5.0.2";

/// What the harness adds to [`Runtime`] (which `pcmrun` shares): which runtime the binaries
/// under test were built for, and where the project's setup installed it.
pub trait RuntimeExt {
    /// The runtime the binaries under test were built for: `MPI_IOS_RUNTIME`, as
    /// `scripts/setup.sh` exports it with the build's target directory. Unset means a build
    /// without `setup.sh`, which `.cargo/config.toml` pins to Open MPI.
    /// Panics on any other value.
    fn current() -> Runtime;
    /// [`RuntimeExt::current`], or why `MPI_IOS_RUNTIME` names no runtime.
    fn try_current() -> Result<Runtime, String>;
    /// MPICH's installation prefix (the venv `scripts/setup.sh` creates).
    fn mpich_prefix() -> PathBuf;
    /// The launcher: Open MPI's `mpirun`, or hydra's `mpiexec` from MPICH's venv (by path,
    /// so that a PATH set up for the other runtime cannot mix them).
    fn launcher(self) -> PathBuf;
    /// The settings every PCM job needs on this runtime, for the user running the tests.
    fn test_env(self) -> Vec<(&'static str, &'static str)>;
}

impl RuntimeExt for Runtime {
    fn current() -> Runtime {
        Self::try_current().unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_current() -> Result<Runtime, String> {
        match std::env::var("MPI_IOS_RUNTIME").as_deref() {
            Err(_) | Ok("") | Ok("openmpi") => Ok(Runtime::OpenMpi),
            Ok("mpich") => Ok(Runtime::Mpich),
            Ok(other) => Err(format!("MPI_IOS_RUNTIME={other:?}: use openmpi or mpich")),
        }
    }

    fn mpich_prefix() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(".mpi")
            .join(format!("mpich-{MPICH_VERSION}"))
    }

    fn launcher(self) -> PathBuf {
        match self {
            Runtime::OpenMpi => PathBuf::from("mpirun"),
            Runtime::Mpich => Self::mpich_prefix().join("bin").join("mpiexec.hydra"),
        }
    }

    fn test_env(self) -> Vec<(&'static str, &'static str)> {
        self.job_env(nix::unistd::geteuid().is_root())
    }
}

/// What can go wrong when the harness starts, waits for or reads a process. The tests'
/// shorthands ([`Group::start`], [`Group::wait`], [`MpiJob::run`], [`Pcmd::start`], [`bin`])
/// panic with it; programs (the benchmarks) use the `try_`/`_within` forms that return it.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A project binary is not built.
    #[error("{} is missing: build the binaries first (cargo build --release --bins, or scripts/test.sh)", .path.display())]
    MissingBinary {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A process could not be started, or its output files not created.
    #[error("cannot start {what}: {source}")]
    Start {
        /// The command.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// A process did not end within its deadline; its process group was killed.
    #[error("{what} did not finish within {timeout:?}: killed its process group\n--- stdout (end)\n{stdout}\n--- stderr (end)\n{stderr}")]
    Timeout {
        /// The command.
        what: String,
        /// The deadline.
        timeout: Duration,
        /// The end of its stdout.
        stdout: String,
        /// The end of its stderr.
        stderr: String,
    },
    /// A process ended with a failure status.
    #[error("{what} failed (exit status {code:?})\n--- stderr (end)\n{stderr}")]
    Failed {
        /// What it was.
        what: String,
        /// Its exit code (`None`: killed by a signal).
        code: Option<i32>,
        /// The end of its stderr.
        stderr: String,
    },
    /// A daemon did not accept connections in time.
    #[error("{what} did not accept connections within {timeout:?}:\n{log}")]
    NotReady {
        /// The daemon.
        what: String,
        /// The deadline.
        timeout: Duration,
        /// Its log so far.
        log: String,
    },
    /// Waiting on a process failed.
    #[error("waiting for {what}: {source}")]
    Wait {
        /// The command.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// A program's typed output (a status, a report) is missing or does not read.
    #[error("{what}: {why}")]
    BadOutput {
        /// Whose output.
        what: String,
        /// What is wrong with it.
        why: String,
    },
    /// A job that ended normally left MPI shared-memory segments in /dev/shm.
    #[error("{what} ended normally but left its shared memory in /dev/shm: {segments:?}")]
    SharedMemoryLeft {
        /// The job.
        what: String,
        /// The segments it created and left.
        segments: Vec<String>,
    },
}

/// MPICH's per-launch shared-memory segments now in /dev/shm (`mpich_shm_<world>_<node>`,
/// `mpich_vci_<world>_<node>`). A launch that ends normally unlinks its own; one whose
/// ranks are killed leaves them, for the node's pcmd to sweep (`pcmd/src/shm_sweep.rs`).
pub fn mpich_shm_segments() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| name.starts_with("mpich_shm_") || name.starts_with("mpich_vci_"))
                .collect()
        })
        .unwrap_or_default()
}

/// The names of every MPI runtime's per-launch shared-memory segments in /dev/shm now:
/// MPICH's ([`mpich_shm_segments`]) and Open MPI 4's vader backing files
/// (`vader_segment.*`, one per local process).
pub fn mpi_shm_segments() -> BTreeSet<String> {
    let mut all = mpich_shm_segments();
    if let Ok(entries) = std::fs::read_dir("/dev/shm") {
        all.extend(
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| name.starts_with("vader_segment.")),
        );
    }
    all
}

/// The typed events of a job run with `PCM_EVENTS=path` (see `pcm::events`), in file order;
/// none when the file is missing (the job wrote none).
pub fn read_events(path: &Path) -> Vec<pcm_proto::run::Stamped> {
    pcm_proto::run::Stamped::parse_file(&std::fs::read_to_string(path).unwrap_or_default())
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Directory holding the project's binaries of the profile the tests were built with.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    // A test runs from target/<profile>/deps; a binary using the harness (the benchmarks)
    // from target/<profile> itself.
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().unwrap().to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// Path of one of the project's binaries, or an error that says how to build it.
pub fn try_bin(name: &str) -> Result<PathBuf, HarnessError> {
    built(bin_dir().join(name))
}

/// `path` if the binary there is built, else the error that says how to build it.
fn built(path: PathBuf) -> Result<PathBuf, HarnessError> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::MissingBinary { path })
    }
}

/// [`try_bin`] for tests: panics with the command to build it.
pub fn bin(name: &str) -> PathBuf {
    try_bin(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The variable naming the directory of the MPI programs the tests run, when they are not
/// next to the tests' own binaries ([`program_dir`]).
pub const PROGRAM_DIR_VAR: &str = "MPI_IOS_PROGRAM_DIR";

/// Directory of the MPI programs the tests and benchmarks run (heat2d, heat2d-plain,
/// pcm-state, mpi-pingpong, mpi-calls, the C and Fortran examples, libpcm): `MPI_IOS_PROGRAM_DIR`
/// when set, else [`bin_dir`]. These link an MPI library, so they are built once per
/// runtime; the harness and its other programs (pcmd, pcmrun, the agent, the peer server)
/// link none and serve every runtime. `scripts/test.sh` builds the tests on the default
/// runtime and runs them again on the other one with that runtime's programs this way.
pub fn program_dir() -> PathBuf {
    match std::env::var_os(PROGRAM_DIR_VAR) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => bin_dir(),
    }
}

/// Path of one of the project's MPI programs (in [`program_dir`]), or an error that says
/// how to build it.
pub fn try_program(name: &str) -> Result<PathBuf, HarnessError> {
    built(program_dir().join(name))
}

/// [`try_program`] for tests: panics with the command to build it.
pub fn program(name: &str) -> PathBuf {
    try_program(name).unwrap_or_else(|e| panic!("{e}"))
}

static MPI_JOBS: Mutex<()> = Mutex::new(());

/// Runs one MPI job at a time: the machine has two cores, and parallel jobs would only
/// make every deadline meaningless.
pub fn mpi_lock() -> MutexGuard<'static, ()> {
    MPI_JOBS.lock().unwrap_or_else(|p| p.into_inner())
}

static INTERRUPTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Makes SIGINT and SIGTERM set a flag instead of ending the process at once: the long
/// runs ([`scenario::Scenario::run`]) check it, stop, and unwind, so that the guards of the
/// runs and of the emulated nodes kill what they started and delete the namespaces and
/// cgroups. A second signal ends the process at once (the next [`netns::Cluster`] then
/// sweeps what was left). For programs such as the main job; tests need not call it.
pub fn stop_on_interrupt() -> std::io::Result<()> {
    let flag = INTERRUPTED.get_or_init(|| Arc::new(AtomicBool::new(false)));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registered first, the exit fires only when the flag is already set: on a second signal.
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(flag))?;
        signal_hook::flag::register(signal, Arc::clone(flag))?;
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived since [`stop_on_interrupt`].
pub fn interrupted() -> bool {
    INTERRUPTED
        .get()
        .is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
}

/// heat2d's arguments (`--rows R --cols C --iters N`) for a run of about `seconds` on
/// `ranks` ranks on this machine as loaded as it is now, and the measured rate in iterations
/// per second: probes of heat2d-plain size it (never fewer iterations than the first
/// probe's). Machines of one kind differ in speed by 4x or more, so tests are sized by time.
///
/// A probe shorter than [`MIN_PROBE`] is repeated, longer: a fraction of a second measures a
/// burst, and on a shared machine the sustained rate was seen 5x below it (a 30 s job then
/// needed more than 150 s).
pub fn heat2d_args_for(
    ranks: usize,
    rows: u32,
    cols: u32,
    seconds: f64,
    timeout: Duration,
) -> (Vec<String>, f64) {
    let mut probe_iters = FIRST_PROBE;
    let rate = loop {
        let probe = heat2d_args_at(rows, cols, probe_iters);
        let probe: Vec<&str> = probe.iter().map(String::as_str).collect();
        let report = MpiJob::new(ranks, "heat2d-plain", &probe)
            .run(timeout)
            .report();
        let took = report.seconds.max(1e-3);
        let rate = probe_iters as f64 / took;
        if took >= MIN_PROBE.as_secs_f64() || probe_iters > FIRST_PROBE {
            break rate;
        }
        // Aim at twice the minimum, so that a faster second probe still counts.
        probe_iters = ((rate * 2.0 * MIN_PROBE.as_secs_f64()) as u64).max(FIRST_PROBE + 1);
    };
    eprintln!(
        "heat2d {rows}x{cols} on {ranks} ranks: {rate:.0} it/s (probe of {probe_iters} iterations)"
    );
    (heat2d_args_sized(rows, cols, rate, seconds), rate)
}

/// The `--iters` value of heat2d arguments such as [`heat2d_args_for`] returns (a test that
/// schedules an event at a share of the run needs the count the sizing chose).
pub fn heat2d_iterations(args: &[String]) -> u64 {
    args.iter()
        .position(|a| a == "--iters")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no --iters count in {args:?}"))
}

/// Fewest iterations a sized heat2d run gets, and the first probe's length.
const FIRST_PROBE: u64 = 5000;

/// heat2d's arguments for `iters` iterations of a `rows` x `cols` grid.
fn heat2d_args_at(rows: u32, cols: u32, iters: u64) -> Vec<String> {
    [
        "--rows",
        &rows.to_string(),
        "--cols",
        &cols.to_string(),
        "--iters",
        &iters.to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// heat2d's arguments for a run of about `seconds` at `rate` iterations per second (measured
/// by [`heat2d_args_for`]; tests that size several runs measure once and call this).
///
/// The run stays below [`SAFE_FRACTION`] of its grid's predicted fixed point
/// ([`heat2d_fixed_point_estimate`]), so that a comparison with a plain run of the same
/// arguments can fail ([`Report::reference_checksum`]): when `seconds` at `rate` would go
/// further, the grid grows (rows and columns by 10 % at a time, the rate scaled down by the
/// area) until it does not. The arguments then name the larger grid; the run still takes about
/// `seconds` (a little more when the larger grid leaves the cache).
pub fn heat2d_args_sized(rows: u32, cols: u32, rate: f64, seconds: f64) -> Vec<String> {
    let (rows, cols, rate) = unsettled_grid(rows, cols, rate, seconds);
    let iters = ((rate * seconds) as u64).max(FIRST_PROBE);
    eprintln!("heat2d {rows}x{cols}: {iters} iterations for about {seconds} s at {rate:.0} it/s");
    heat2d_args_at(rows, cols, iters)
}

/// The grid of at least `rows` x `cols`, and its rate, on which `seconds` at `rate` (measured
/// on `rows` x `cols`) stay below [`heat2d_safe_iterations`].
fn unsettled_grid(rows: u32, cols: u32, rate: f64, seconds: f64) -> (u32, u32, f64) {
    let (mut r, mut c, mut rate_now) = (rows, cols, rate);
    let iters = |rate: f64| ((rate * seconds) as u64).max(FIRST_PROBE);
    while iters(rate_now) > heat2d_safe_iterations(r.into(), c.into()) {
        (r, c) = (r + r / 10 + 1, c + c / 10 + 1);
        rate_now = rate * (f64::from(rows) * f64::from(cols)) / (f64::from(r) * f64::from(c));
    }
    if (r, c) != (rows, cols) {
        eprintln!(
            "heat2d {rows}x{cols} would pass half its fixed point in {seconds} s at {rate:.0} it/s: \
             using {r}x{c} at about {rate_now:.0} it/s instead"
        );
    }
    (r, c, rate_now)
}

/// Least length of the probe that sizes heat2d runs ([`heat2d_args_for`]).
pub const MIN_PROBE: Duration = Duration::from_secs(1);

/// A started process group, killed on drop: no launcher, rank, spawned replacement or daemon
/// outlives the test or benchmark that started it.
#[derive(Debug)]
pub struct Group {
    child: Child,
    started: Instant,
    /// Where stdout goes.
    pub stdout: PathBuf,
    /// Where stderr goes.
    pub stderr: PathBuf,
    /// The command, for messages.
    pub what: String,
    /// The directory of the output files, when the group made its own.
    _dir: Option<tempfile::TempDir>,
}

impl Group {
    /// Starts `command` in a new process group with output to `dir/label.{out,err}`.
    pub fn spawn(command: Command, dir: &Path, label: &str) -> Result<Group, HarnessError> {
        Self::spawn_with_dir(command, dir, label, None)
    }

    /// [`Group::spawn`] with output to a temporary directory of its own, removed with it.
    pub fn spawn_in_temp(command: Command, label: &str) -> Result<Group, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("mpi-ios-")
            .tempdir()
            .map_err(|source| HarnessError::Start {
                what: format!("{label} (a temporary directory)"),
                source,
            })?;
        let path = dir.path().to_path_buf();
        Self::spawn_with_dir(command, &path, label, Some(dir))
    }

    fn spawn_with_dir(
        mut command: Command,
        dir: &Path,
        label: &str,
        own: Option<tempfile::TempDir>,
    ) -> Result<Group, HarnessError> {
        use std::os::unix::process::CommandExt;
        let stdout = dir.join(format!("{label}.out"));
        let stderr = dir.join(format!("{label}.err"));
        let what = format!("{command:?}");
        let start_error = |source| HarnessError::Start {
            what: what.clone(),
            source,
        };
        command
            .stdin(Stdio::null())
            .stdout(File::create(&stdout).map_err(start_error)?)
            .stderr(File::create(&stderr).map_err(start_error)?)
            .process_group(0);
        // A test or benchmark killed outright runs no drop: the leader (a launcher, a pcmd)
        // then gets SIGTERM from the kernel instead of running on unsupervised.
        pcmrun::end_with_parent(&mut command);
        let started = Instant::now();
        let child = command.spawn().map_err(start_error)?;
        Ok(Group {
            child,
            started,
            stdout,
            stderr,
            what,
            _dir: own,
        })
    }

    /// Runs `command` in a process group of its own (output to a temporary directory) to its
    /// end, at most `timeout`.
    pub fn run_to_end(
        command: Command,
        label: &str,
        timeout: Duration,
    ) -> Result<Finished, HarnessError> {
        Self::spawn_in_temp(command, label)?.wait_within(timeout)
    }

    /// [`Group::spawn`] for tests: panics if the command cannot start.
    pub fn start(command: Command, dir: &Path, label: &str) -> Group {
        Self::spawn(command, dir, label).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Process id of the group leader.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the leader to exit, at most `timeout` from now; on timeout kills the group
    /// and fails with the end of its output. Stragglers of the group (a lingering rank) are
    /// killed either way.
    pub fn wait_within(mut self, timeout: Duration) -> Result<Finished, HarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self.child.try_wait().map_err(|source| HarnessError::Wait {
                what: self.what.clone(),
                source,
            })?;
            if let Some(status) = status {
                let finished = Finished {
                    code: status.code(),
                    stdout: std::fs::read_to_string(&self.stdout).unwrap_or_default(),
                    stderr: std::fs::read_to_string(&self.stderr).unwrap_or_default(),
                    elapsed: self.started.elapsed(),
                };
                self.kill();
                return Ok(finished);
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(HarnessError::Timeout {
                    what: self.what.clone(),
                    timeout,
                    stdout: tail(
                        &std::fs::read_to_string(&self.stdout).unwrap_or_default(),
                        30,
                    ),
                    stderr: tail(&self.stderr_so_far(), 40),
                });
            }
            // 1 ms: whole-process wall times are compared to within 1% by the benchmarks.
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// [`Group::wait_within`] for tests: panics with the output on timeout.
    pub fn wait(self, timeout: Duration) -> Finished {
        self.wait_within(timeout).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Whether the leader is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the whole group and reaps the leader.
    pub fn kill(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.wait();
    }

    /// What the group printed to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Also when the leader is gone: its stragglers must not outlive it.
        self.kill();
        // A failing test drops its jobs and daemons while it unwinds, and their output files
        // go with their temporary directories: show their ends now (libtest prints them with
        // the failure), so that a rare failure in CI explains itself (stop 59: a `pcmd
        // migrate` on Open MPI waited 60 s and nothing said what the job was doing).
        if std::thread::panicking() {
            let stdout = std::fs::read_to_string(&self.stdout).unwrap_or_default();
            eprintln!(
                "--- when the test failed: {}\n--- its stdout (end)\n{}\n--- its stderr (end)\n{}",
                self.what,
                tail(&stdout, 10),
                tail(&self.stderr_so_far(), 40)
            );
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Exit code of mpirun (None if killed by a signal).
    pub code: Option<i32>,
    /// Everything printed on stdout.
    pub stdout: String,
    /// Everything printed on stderr.
    pub stderr: String,
    /// Wall time from the start to the leader's exit.
    pub elapsed: Duration,
}

impl Finished {
    /// Itself if it exited with status 0, else an error with the end of its stderr.
    pub fn check(self, what: &str) -> Result<Finished, HarnessError> {
        if self.code == Some(0) {
            Ok(self)
        } else {
            Err(HarnessError::Failed {
                what: what.to_owned(),
                code: self.code,
                stderr: tail(&self.stderr, 40),
            })
        }
    }

    /// Whether PCM's watchdog ended the run (exit status 75) with every rank that named a
    /// stall still waiting in the spawn phase: the spawned replacement never reached its
    /// merge (it arms its own watchdog only there), and the parents never left
    /// `MPI_Comm_spawn_multiple`.
    pub fn stalled_in_spawn(&self) -> bool {
        let stalls: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| l.contains(" did not finish within "))
            .collect();
        self.code == Some(pcmrun::supervisor::RECONFIGURE_TIMEOUT_EXIT)
            && !stalls.is_empty()
            && stalls
                .iter()
                .all(|l| l.contains("was still waiting in the spawn phase"))
    }

    /// The JSON report rank 0 prints as its last stdout line; panics with the output if the
    /// run failed or printed none.
    pub fn report(&self) -> Report {
        assert_eq!(
            self.code,
            Some(0),
            "run failed\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout,
            self.stderr
        );
        let last = self
            .stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_else(|| panic!("no report printed\n--- stderr\n{}", self.stderr));
        serde_json::from_str(last)
            .unwrap_or_else(|e| panic!("last stdout line is not a report ({e}): {last}"))
    }
}

impl Finished {
    /// The report's `mpi_library`: the first line of the MPI library's version text, as the
    /// program found it at run time. Panics like [`Finished::report`].
    pub fn mpi_library(&self) -> String {
        self.report();
        let last = self.stdout.lines().rev().find(|l| !l.trim().is_empty());
        let value: serde_json::Value = serde_json::from_str(last.unwrap_or("")).unwrap();
        value["mpi_library"].as_str().unwrap_or("").to_owned()
    }
}

/// The heat2d report (the fields the tests read), also of the C heat2d and the Fortran
/// jacobi.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Report {
    /// Hex digest of the final grid.
    pub checksum: String,
    /// Iterations run.
    pub iterations: u64,
    /// Wall time.
    pub seconds: f64,
    /// Number of ranks.
    pub ranks: usize,
    /// Migrations (instrumented runs): every reconfiguration, resizes included.
    pub migrations: Option<u64>,
    /// Resizes (instrumented malleable runs).
    #[serde(default)]
    pub resizes: Option<u64>,
    /// Host of each rank at the end (instrumented runs).
    pub hosts: Option<Vec<String>>,
    /// Global rows of the grid.
    #[serde(default)]
    pub rows: Option<u64>,
    /// Columns of the grid, boundary columns included.
    #[serde(default)]
    pub cols: Option<u64>,
    /// The last iteration at which the grid still changed bit for bit, sampled
    /// (`heat2d-plain` only: `heat2d::Settling`).
    #[serde(default)]
    pub last_change: Option<u64>,
    /// The largest change of a value in the last iteration (the Fortran jacobi only).
    #[serde(default)]
    pub change: Option<f64>,
}

/// How close to the end of a plain run its grid must still change for a comparison with it
/// to count ([`Report::reference_checksum`]): in the last 3 % of its iterations.
pub const SETTLED_MARGIN: f64 = 0.03;

/// Fraction of the predicted fixed point ([`heat2d_fixed_point_estimate`]) that a run sized
/// by time may reach ([`heat2d_args_sized`]): measured fixed points are 0.79 to 0.89 of the
/// prediction (docs/results-log.md), so this stays 38 % or more below them.
pub const SAFE_FRACTION: f64 = 0.5;

/// Iterations after which heat2d's `rows` x `cols` grid (`cols` with its two boundary
/// columns) is predicted to stop changing bit for bit: the slowest error mode decays by
/// `(cos(pi / (rows + 1)) + cos(pi / (cols - 1))) / 2` per Jacobi iteration, and reaching the
/// fixed point takes about a factor of 2^52 (the `f64` mantissa). Measured fixed points are
/// 0.79 to 0.89 of this (64 x 64: 26,466 iterations; 256 x 256: 387,919; docs/results-log.md), so
/// it also bounds the C heat2d (the same grid) and the Fortran jacobi (the same iteration).
pub fn heat2d_fixed_point_estimate(rows: u64, cols: u64) -> f64 {
    use std::f64::consts::PI;
    let (r, c) = (rows as f64, cols.max(3) as f64);
    let decay = 1.0 - ((PI / (r + 1.0)).cos() + (PI / (c - 1.0)).cos()) / 2.0;
    52.0 * std::f64::consts::LN_2 / decay
}

/// Most iterations a comparison against a plain run of a `rows` x `cols` grid is allowed when
/// the plain program does not say when its grid last changed (the C heat2d):
/// [`SAFE_FRACTION`] of [`heat2d_fixed_point_estimate`].
pub fn heat2d_safe_iterations(rows: u64, cols: u64) -> u64 {
    (SAFE_FRACTION * heat2d_fixed_point_estimate(rows, cols)) as u64
}

impl Report {
    /// The checksum of this plain run as the reference a run with moves must match bit for
    /// bit; panics when such a comparison could not fail (see [`Report::settled`]). Every
    /// test and benchmark that compares a checksum with a plain run's takes it from here.
    pub fn reference_checksum(&self) -> &str {
        if let Some(why) = self.settled() {
            panic!("{why}");
        }
        &self.checksum
    }

    /// Why a comparison with this plain run could not fail, if it could not: its grid had
    /// stopped changing before the last [`SETTLED_MARGIN`] of its iterations (heat2d-plain's
    /// `last_change`), or did not change in its last iteration (the Fortran jacobi's
    /// `change`), or, for a program that says neither (the C heat2d), the run is longer than
    /// [`heat2d_safe_iterations`]. A grid at its fixed point ends with the same checksum
    /// whatever iterations a run with moves skipped, repeated or got wrong.
    pub fn settled(&self) -> Option<String> {
        let n = self.iterations;
        let fix = "size the run below the grid's fixed point (heat2d_args_sized does), or use a larger grid";
        if let Some(last) = self.last_change {
            let since = n - ((n as f64 * SETTLED_MARGIN) as u64).min(n);
            return (last < since).then(|| {
                format!(
                    "the plain run's grid stopped changing at iteration {last} of {n}: a comparison \
                     there cannot fail; {fix}"
                )
            });
        }
        if let Some(change) = self.change {
            return (change == 0.0).then(|| {
                format!(
                    "the plain run's grid did not change in its last iteration (of {n}): a \
                     comparison there cannot fail; {fix}"
                )
            });
        }
        let (Some(rows), Some(cols)) = (self.rows, self.cols) else {
            return Some(
                "the plain run's report names neither when its grid last changed nor its size: \
                 cannot tell whether a comparison with it can fail"
                    .to_owned(),
            );
        };
        let safe = heat2d_safe_iterations(rows, cols);
        (n > safe).then(|| {
            format!(
                "the plain run's {n} iterations of a {rows} x {cols} grid are more than {safe}, \
                 half its predicted fixed point: a comparison there may not be able to fail; {fix}"
            )
        })
    }
}

/// An mpirun invocation of one of the project's binaries.
#[derive(Debug, Clone)]
pub struct MpiJob {
    /// Number of ranks.
    pub ranks: usize,
    /// The program.
    pub program: PathBuf,
    /// Program arguments.
    pub args: Vec<String>,
    /// Extra environment, exported to the ranks (`-x` for Open MPI, `-genv` for hydra).
    pub env: BTreeMap<String, String>,
    /// Extra launcher options (before the program), for the runtime the job runs on.
    pub mpirun_options: Vec<String>,
}

impl MpiJob {
    /// `mpirun -np ranks program args...` (or `mpiexec -n ...` on MPICH) of the project's
    /// MPI program `program` (in [`program_dir`]).
    pub fn new(ranks: usize, program: &str, args: &[&str]) -> Self {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Self::of(ranks, &program_dir().join(program), &args)
    }

    /// As [`MpiJob::new`], of the program at `path`.
    pub fn of(ranks: usize, path: &Path, args: &[String]) -> Self {
        MpiJob {
            ranks,
            program: path.to_path_buf(),
            args: args.to_vec(),
            env: BTreeMap::new(),
            mpirun_options: Vec::new(),
        }
    }

    /// Adds an environment variable for every rank.
    #[must_use]
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Adds mpirun options.
    #[must_use]
    pub fn mpirun_options(mut self, options: &[&str]) -> Self {
        self.mpirun_options
            .extend(options.iter().map(|s| s.to_string()));
        self
    }

    /// The launcher command, for [`Runtime::current`] (the same launch `pcmrun` makes).
    /// `PCM_DAEMON` is `none` unless set: a job never talks to a daemon it was not given.
    pub fn command(&self) -> Command {
        let mut env = self.env.clone();
        env.entry("PCM_DAEMON".into())
            .or_insert_with(|| "none".into());
        let options = self.mpirun_options.iter().map(Into::into).collect();
        launch_command(self.ranks, env, options, &self.program, &self.args)
    }

    /// What the job is, for messages: `mpirun -np N program args`.
    pub fn what(&self) -> String {
        let name = self.program.file_name().unwrap_or_default();
        let (name, args) = (name.to_string_lossy(), self.args.join(" "));
        format!("mpirun -np {} {name} {args}", self.ranks)
    }

    /// Starts the job with output in `dir`, or says why it cannot.
    pub fn spawn(&self, dir: &Path, label: &str) -> Result<Group, HarnessError> {
        if !self.program.is_file() {
            return Err(HarnessError::MissingBinary {
                path: self.program.clone(),
            });
        }
        Group::spawn(self.command(), dir, label)
    }

    /// Starts the job with output in `dir`; panics if it cannot.
    pub fn start(&self, dir: &Path, label: &str) -> Group {
        self.spawn(dir, label).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs the job to completion within `timeout` (its process group is killed otherwise).
    ///
    /// On Open MPI, a run that PCM ended because a spawn never completed
    /// ([`Finished::stalled_in_spawn`]) runs once more, saying so on the test's stderr:
    /// Debian's Open MPI 4.1.4 with its external PMIx 4.2 sometimes leaves a spawned
    /// process in `PMIx_Init` forever (openpmix issue 2735; docs/architecture.md, "When a
    /// reconfiguration stalls"). A second stall fails the test as before.
    pub fn run_within(&self, timeout: Duration) -> Result<Finished, HarnessError> {
        let finished = self.run_once_within(timeout)?;
        if Runtime::current() != Runtime::OpenMpi || !finished.stalled_in_spawn() {
            return Ok(finished);
        }
        // Written to the process's stderr, past the test harness's capture, so that CI's
        // log shows every such rerun even when the test then passes.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!(
                "mpi-ios-tests: {} ended in a spawn that never completed (Open MPI 4.1 with PMIx 4: openpmix issue 2735); running it once more. Its stderr:\n{}\n",
                self.what(),
                tail(&finished.stderr, 12)
            )
            .as_bytes(),
        );
        self.run_once_within(timeout)
    }

    /// One run of the job to completion within `timeout`.
    fn run_once_within(&self, timeout: Duration) -> Result<Finished, HarnessError> {
        if !self.program.is_file() {
            return Err(HarnessError::MissingBinary {
                path: self.program.clone(),
            });
        }
        let before = mpich_shm_segments();
        let mut group = Group::spawn_in_temp(self.command(), "job")?;
        group.what = self.what();
        let finished = group.wait_within(timeout)?;
        if finished.code == Some(0) {
            // Nothing of a job that ended normally stays in /dev/shm: its processes have
            // all finalized (and unlinked) by the time the launcher exits.
            let left: Vec<String> = mpich_shm_segments().difference(&before).cloned().collect();
            if !left.is_empty() {
                return Err(HarnessError::SharedMemoryLeft {
                    what: self.what(),
                    segments: left,
                });
            }
        }
        Ok(finished)
    }

    /// [`MpiJob::run_within`] for tests: panics on timeout.
    pub fn run(&self, timeout: Duration) -> Finished {
        self.run_within(timeout).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// The launcher command running `program args` on `ranks` ranks with `env` for every rank
/// and `options` for the launcher, on [`Runtime::current`]: the launch `pcmrun` makes.
pub fn launch_command(
    ranks: usize,
    env: BTreeMap<String, String>,
    options: Vec<std::ffi::OsString>,
    program: &Path,
    args: &[String],
) -> Command {
    let runtime = Runtime::current();
    let program = std::iter::once(program.as_os_str().to_owned())
        .chain(args.iter().map(Into::into))
        .collect();
    pcmrun::Launch {
        runtime,
        launcher: runtime.launcher(),
        ranks,
        hostfile: None,
        env,
        options,
        program,
    }
    .command()
}

/// A `pcmd serve` in a temp dir, killed on drop.
#[derive(Debug)]
pub struct Pcmd {
    group: Option<Group>,
    /// The socket.
    pub socket: PathBuf,
    /// The value for `PCM_DAEMON` that makes ranks find this daemon.
    pub daemon_env: String,
    /// Temp dir holding the socket and the log.
    pub dir: tempfile::TempDir,
}

impl Pcmd {
    /// Starts a daemon for this host, logging at `log` (`RUST_LOG`), with extra `pcmd serve`
    /// options, and waits (at most 10 s) until it accepts connections.
    pub fn spawn(serve_args: &[&str], log: &str) -> Result<Pcmd, HarnessError> {
        let dir = tempfile::tempdir().map_err(|source| HarnessError::Start {
            what: "pcmd (a temporary directory)".into(),
            source,
        })?;
        let daemon_env = dir.path().join("{host}.sock").display().to_string();
        Self::spawn_on(dir, daemon_env, serve_args, log)
    }

    /// Starts a daemon for this host and waits until it accepts connections (debug log).
    pub fn start() -> Pcmd {
        Self::start_with(&[])
    }

    /// Like [`Pcmd::start`], with extra `pcmd serve` options (`--request-timeout 3`).
    pub fn start_with(serve_args: &[&str]) -> Pcmd {
        Self::spawn(serve_args, "debug").unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a new daemon on the socket of `previous` (which must be dead), as an operator
    /// restarting a crashed daemon would. The socket's directory stays owned by `previous`;
    /// the new daemon's log goes to a temp dir of its own.
    pub fn restart_at(previous: &Pcmd) -> Pcmd {
        let dir = tempfile::Builder::new()
            .prefix("pcmd-restart")
            .tempdir()
            .unwrap();
        let mut restarted = Self::spawn_on(dir, previous.daemon_env.clone(), &[], "debug")
            .unwrap_or_else(|e| panic!("{e}"));
        restarted.daemon_env = previous.daemon_env.clone();
        restarted
    }

    fn spawn_on(
        dir: tempfile::TempDir,
        daemon_env: String,
        serve_args: &[&str],
        log: &str,
    ) -> Result<Pcmd, HarnessError> {
        let host = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "localhost".into());
        let socket = PathBuf::from(daemon_env.replace("{host}", &host));
        let mut command = Command::new(try_bin("pcmd")?);
        command
            .arg("--socket")
            .arg(&socket)
            .arg("serve")
            .args(serve_args)
            .env("RUST_LOG", log);
        // A test's pcmd lives seconds, not the minute between two sweeps of a node's: it
        // sweeps every second, so that the shared memory of the jobs a test kills does not
        // pile up on the machine (unless the test sets the period itself).
        if !serve_args.contains(&"--shm-sweep-every") {
            command.args(["--shm-sweep-every", "1"]);
        }
        let group = Group::spawn(command, dir.path(), "pcmd")?;
        let timeout = Duration::from_secs(10);
        let deadline = Instant::now() + timeout;
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if Instant::now() > deadline {
                return Err(HarnessError::NotReady {
                    what: "pcmd".into(),
                    timeout,
                    log: group.stderr_so_far(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Pcmd {
            group: Some(group),
            socket,
            daemon_env,
            dir,
        })
    }

    /// The daemon's process id (`None` once killed).
    pub fn pid(&self) -> Option<u32> {
        self.group.as_ref().map(Group::pid)
    }

    /// Runs the pcmd CLI against this daemon.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        let mut command = Command::new(bin("pcmd"));
        command.arg("--socket").arg(&self.socket).args(args);
        let dir = self.dir.path();
        let group = Group::start(command, dir, "cli");
        let finished = group.wait(Duration::from_secs(60));
        std::process::Output {
            status: std::os::unix::process::ExitStatusExt::from_raw(
                finished.code.unwrap_or(1) << 8,
            ),
            stdout: finished.stdout.into_bytes(),
            stderr: finished.stderr.into_bytes(),
        }
    }

    /// `pcmd status --json`, typed; panics with pcmd's words when it does not answer.
    pub fn status(&self) -> pcm_proto::DaemonStatus {
        pcmd_status(&self.socket).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Kills the daemon (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut group) = self.group.take() {
            group.kill();
        }
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        self.group
            .as_ref()
            .map(Group::stderr_so_far)
            .unwrap_or_default()
    }
}

/// `pcmd status --json` of the daemon at `socket`, typed.
pub fn pcmd_status(socket: &Path) -> Result<pcm_proto::DaemonStatus, HarnessError> {
    let out = Command::new(try_bin("pcmd")?)
        .arg("--socket")
        .arg(socket)
        .args(["status", "--json"])
        .output()
        .map_err(|source| HarnessError::Start {
            what: "pcmd status".into(),
            source,
        })?;
    let bad = |why: String| HarnessError::BadOutput {
        what: format!("pcmd status at {}", socket.display()),
        why,
    };
    if !out.status.success() {
        return Err(bad(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| bad(e.to_string()))
}

/// Iterations of the complete checkpoints (those with a manifest) of the series `series`
/// in the checkpoint store `store`, oldest first.
pub fn complete_checkpoints(store: &Path, series: &str) -> Vec<u64> {
    let mut found: Vec<u64> = std::fs::read_dir(store.join(series))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("manifest").exists())
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    found.sort_unstable();
    found
}

/// Waits until `condition` holds, polling, at most `timeout`; panics with `what`.
pub fn wait_until(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The runtime's Python with numpy and mpi4py (`.mpi/python-RUNTIME/bin/python3`, which
/// `scripts/setup.sh` makes), or why there is none: `MPI_IOS_PYTHON=0`, missing, or without
/// numpy or mpi4py. Python tests print the reason and skip.
pub fn runtime_python() -> Result<PathBuf, String> {
    if std::env::var("MPI_IOS_PYTHON").as_deref() == Ok("0") {
        return Err("MPI_IOS_PYTHON=0: no Python for this runtime".into());
    }
    let runtime = match Runtime::current() {
        Runtime::OpenMpi => "openmpi",
        Runtime::Mpich => "mpich",
    };
    let python = doc_blocks::repo_root()
        .join(".mpi")
        .join(format!("python-{runtime}"))
        .join("bin")
        .join("python3");
    if !python.is_file() {
        return Err(format!(
            "{} is missing: `source scripts/setup.sh` makes it (numpy, and mpi4py built by the runtime's mpicc), unless MPI_IOS_PYTHON=0",
            python.display()
        ));
    }
    let output = Command::new(&python)
        .args(["-c", "import numpy, mpi4py"])
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} has no numpy or mpi4py: {}",
            python.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(python)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(code: i32, stderr: &str) -> Finished {
        Finished {
            code: Some(code),
            stdout: String::new(),
            stderr: stderr.to_owned(),
            elapsed: Duration::ZERO,
        }
    }

    fn plain(iterations: u64, last_change: Option<u64>) -> Report {
        Report {
            checksum: "ab".into(),
            iterations,
            rows: Some(256),
            cols: Some(256),
            last_change,
            ..Report::default()
        }
    }

    #[test]
    fn given_a_plain_run_that_stopped_changing_early_then_the_comparison_is_refused() {
        assert_eq!(plain(1000, Some(1000)).reference_checksum(), "ab");
        assert_eq!(plain(1000, Some(970)).reference_checksum(), "ab");
        let why = plain(600_000, Some(387_919)).settled().expect("refused");
        assert!(
            why.contains("stopped changing at iteration 387919 of 600000"),
            "{why}"
        );
        assert!(plain(1000, Some(969)).settled().is_some());
        let result = std::panic::catch_unwind(|| plain(1000, Some(0)).reference_checksum().len());
        assert!(result.is_err());
    }

    #[test]
    fn given_no_last_change_then_the_size_bounds_the_comparison() {
        // The C heat2d: half the predicted fixed point of 256 x 256 (about 478,600).
        assert_eq!(heat2d_safe_iterations(256, 256), 239_328);
        assert!(plain(239_328, None).settled().is_none());
        assert!(plain(239_329, None).settled().is_some());
        let jacobi = |change| Report {
            change: Some(change),
            ..plain(100, None)
        };
        assert!(jacobi(1e-9).settled().is_none());
        assert!(jacobi(0.0).settled().is_some());
        assert!(Report::default().settled().is_some());
    }

    /// Measured with examples' heat2d-plain (docs/results-log.md): the prediction is above every
    /// measured fixed point, by less than a quarter.
    #[test]
    fn given_measured_fixed_points_then_the_prediction_bounds_them() {
        for (rows, cols, measured) in [
            (64, 64, 26_466.0),
            (90, 48, 22_701.0),
            (200, 200, 240_074.0),
            (240, 240, 344_726.0),
            (256, 256, 387_919.0),
            (400, 400, 919_371.0),
        ] {
            let predicted = heat2d_fixed_point_estimate(rows, cols);
            let ratio = measured / predicted;
            assert!((0.75..0.92).contains(&ratio), "{rows}x{cols}: {ratio}");
        }
    }

    #[test]
    fn given_a_run_past_half_the_fixed_point_then_sizing_grows_the_grid() {
        // 35,000 it/s on 256 x 256 (this machine kind, 2 ranks): 30 s is 1.05 M iterations.
        let (rows, cols, rate) = unsettled_grid(256, 256, 35_000.0, 30.0);
        assert!(rows > 256 && rows == cols, "{rows}x{cols}");
        let iters = (rate * 30.0) as u64;
        assert!(iters <= heat2d_safe_iterations(rows.into(), cols.into()));
        assert_eq!(
            unsettled_grid(256, 256, 35_000.0, 5.0),
            (256, 256, 35_000.0)
        );
    }

    const SPAWN_STALL: &str = "ERROR pcm::deadline: scheduled reconfiguration (PCM_SCHEDULE) (rank 1 to any host) at iteration 25 did not finish within 60 s: rank 2 on host vm was still waiting in the spawn phase; ending the job with exit status 75";
    const MERGE_STALL: &str = "ERROR pcm::deadline: migration #3 (rank 1 to b) at iteration 9 did not finish within 60 s: replacement for rank 1 on host b was still waiting in the merge phase; ending the job with exit status 75";

    /// The lines CI printed when Open MPI's spawn hung (2026-11-29): only such a run is
    /// run again; a stall in any later phase, or another failure, is PCM's and fails.
    #[test]
    fn given_a_stall_only_in_the_spawn_phase_then_it_is_the_runtimes_spawn_hang() {
        let both = format!("{SPAWN_STALL}\n{SPAWN_STALL}\nMPI_ABORT was invoked");
        assert!(ended(75, &both).stalled_in_spawn());
        assert!(!ended(75, &format!("{SPAWN_STALL}\n{MERGE_STALL}")).stalled_in_spawn());
        assert!(!ended(75, MERGE_STALL).stalled_in_spawn());
        assert!(!ended(1, SPAWN_STALL).stalled_in_spawn());
        assert!(!ended(75, "no stall named").stalled_in_spawn());
    }
}
