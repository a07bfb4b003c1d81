//! Support for the MPI/IOS benchmarks (`mpi-ios-bench`): running the project's binaries
//! under `mpirun` with a deadline and a process-group kill, a `pcmd serve` for the run,
//! statistics, and tables printed as text and as markdown.
//!
//! The benchmarks themselves live in the `mpi-ios-bench` binary (`src/main.rs`); the MPI
//! application they migrate is `pcm-state` (`src/bin/pcm-state.rs`). See
//! `docs/benchmarks.md`.

pub mod adaptive;
pub mod agents;
pub mod checkpoint;
pub mod fault;
pub mod recovery;
pub mod scale;

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// Directory of the running executable: the project's other binaries of the same profile
/// are built next to it.
pub fn bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the running executable")?;
    exe.parent()
        .map(Path::to_path_buf)
        .context("the running executable has no parent directory")
}

/// Path of the project binary `name` next to the running executable, or an error that says
/// how to build it.
pub fn find_bin(name: &str) -> Result<PathBuf> {
    let dir = bin_dir()?;
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{} is missing (the benchmarks run the binaries next to {}): \
             run `cargo build --release --bins` first",
            path.display(),
            dir.display()
        );
    }
    Ok(path)
}

/// How one run ended.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// Exit code of the leader (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Everything printed on stdout.
    pub stdout: String,
    /// Everything printed on stderr.
    pub stderr: String,
    /// Wall time from start to exit.
    pub elapsed: Duration,
}

impl RunOutput {
    /// Fails with the end of stderr if the run did not exit with status 0.
    pub fn check(self, what: &str) -> Result<RunOutput> {
        if self.code != Some(0) {
            bail!(
                "{what} failed (exit {:?})\n--- stdout (end)\n{}\n--- stderr (end)\n{}",
                self.code,
                tail(&self.stdout, 30),
                tail(&self.stderr, 40)
            );
        }
        Ok(self)
    }
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A process group started by the benchmarks, killed (SIGKILL to the whole group) on drop,
/// so that no rank, spawned replacement or daemon outlives the benchmark.
#[derive(Debug)]
pub struct Group {
    child: Child,
    dir: tempfile::TempDir,
    what: String,
}

impl Group {
    /// Starts `command` as the leader of a new process group, output to files in a temp dir.
    pub fn start(mut command: Command, what: &str) -> Result<Group> {
        let dir = tempfile::Builder::new()
            .prefix("mpi-ios-bench")
            .tempdir()
            .context("creating a temp dir")?;
        command
            .stdin(Stdio::null())
            .stdout(File::create(dir.path().join("stdout"))?)
            .stderr(File::create(dir.path().join("stderr"))?)
            .process_group(0);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {what} ({command:?})"))?;
        Ok(Group {
            child,
            dir,
            what: what.to_owned(),
        })
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// Process id of the group leader.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the group printed to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.read("stderr")
    }

    /// Waits for the leader to exit, at most `timeout`; on timeout kills the group and fails
    /// with its output. Stragglers of the group are killed either way.
    pub fn wait(mut self, timeout: Duration) -> Result<RunOutput> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                let output = RunOutput {
                    code: status.code(),
                    stdout: self.read("stdout"),
                    stderr: self.read("stderr"),
                    elapsed: started.elapsed(),
                };
                self.kill();
                return Ok(output);
            }
            if started.elapsed() > timeout {
                self.kill();
                bail!(
                    "{} did not finish within {timeout:?}: killed its process group\n\
                     --- stdout (end)\n{}\n--- stderr (end)\n{}",
                    self.what,
                    tail(&self.read("stdout"), 30),
                    tail(&self.read("stderr"), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the whole group and reaps the leader.
    pub fn kill(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One `mpirun` invocation of a project binary.
#[derive(Debug, Clone)]
pub struct MpiRun {
    /// Number of ranks.
    pub ranks: usize,
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment for every rank (exported with `-x`, or `-genv` on MPICH).
    pub env: Vec<(String, String)>,
}

impl MpiRun {
    /// `mpirun -np ranks program args...` with the project's Open MPI settings (or hydra's
    /// `mpiexec -n ...` with the MPICH settings).
    pub fn new(ranks: usize, program: &Path, args: &[String]) -> MpiRun {
        MpiRun {
            ranks,
            program: program.to_path_buf(),
            args: args.to_vec(),
            env: Vec::new(),
        }
    }

    /// Adds an environment variable for every rank.
    #[must_use]
    pub fn env(mut self, key: &str, value: impl Into<String>) -> MpiRun {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    /// The command line, for the runtime the binaries were built for
    /// (`mpi_ios_tests::Runtime::current`).
    pub fn command(&self) -> Command {
        let env = self.env.iter().cloned().collect();
        mpi_ios_tests::launch_command(self.ranks, env, Vec::new(), &self.program, &self.args)
    }

    /// Runs to completion within `timeout` (the process group is killed otherwise).
    pub fn run(&self, timeout: Duration) -> Result<RunOutput> {
        let name = self
            .program
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let what = format!("mpirun -np {} {name} {}", self.ranks, self.args.join(" "));
        let group = Group::start(self.command(), &what).map_err(|e| {
            e.context("is the MPI runtime installed (source scripts/setup.sh installs both)?")
        })?;
        group.wait(timeout)
    }
}

/// A `pcmd serve` on a socket in a temp dir, killed on drop.
#[derive(Debug)]
pub struct Pcmd {
    _group: Group,
    _dir: tempfile::TempDir,
    /// The socket, for `PCM_DAEMON`.
    pub socket: PathBuf,
}

impl Pcmd {
    /// Process id of the daemon.
    pub fn pid(&self) -> u32 {
        self._group.pid()
    }

    /// Starts the daemon and waits (at most 10 s) until it accepts connections.
    pub fn start(pcmd: &Path) -> Result<Pcmd> {
        let dir = tempfile::Builder::new()
            .prefix("mpi-ios-bench-pcmd")
            .tempdir()?;
        let socket = dir.path().join("pcmd.sock");
        let mut command = Command::new(pcmd);
        command.arg("--socket").arg(&socket).arg("serve");
        let group = Group::start(command, "pcmd serve")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if Instant::now() > deadline {
                bail!(
                    "pcmd did not accept connections within 10 s:\n{}",
                    group.stderr_so_far()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Pcmd {
            _group: group,
            _dir: dir,
            socket,
        })
    }
}

/// Median (mean of the two middle values for an even count); NaN if empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Smallest value; NaN if empty.
pub fn min(values: &[f64]) -> f64 {
    values.iter().copied().reduce(f64::min).unwrap_or(f64::NAN)
}

/// Largest value; NaN if empty.
pub fn max(values: &[f64]) -> f64 {
    values.iter().copied().reduce(f64::max).unwrap_or(f64::NAN)
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

/// `MemAvailable` from the text of `/proc/meminfo`, in bytes.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The 1, 5 and 15 minute load averages from `/proc/loadavg`, as text ("0.52 0.61 0.70").
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A table with a header row, printed as aligned text and as markdown.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Column titles.
    pub headers: Vec<String>,
    /// Rows, each as long as `headers`.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles and no rows.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|s| (*s).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (padded or cut to the header's length).
    pub fn push(&mut self, mut row: Vec<String>) {
        row.resize(self.headers.len(), String::new());
        self.rows.push(row);
    }

    /// Aligned plain text, with a separator line under the header.
    pub fn to_text(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.headers[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let mut out = String::new();
            for (c, cell) in cells.iter().enumerate() {
                let _ = write!(out, "{cell:>w$}  ", w = widths[c]);
            }
            out.trim_end().to_owned()
        };
        let mut out = line(&self.headers);
        out.push('\n');
        out.push_str(
            &"-".repeat(
                widths
                    .iter()
                    .map(|w| w + 2)
                    .sum::<usize>()
                    .saturating_sub(2),
            ),
        );
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }

    /// GitHub-flavoured markdown.
    pub fn to_markdown(&self) -> String {
        let row = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut out = row(&self.headers);
        out.push_str(&row(&vec!["---".to_owned(); self.headers.len()]));
        for r in &self.rows {
            out.push_str(&row(r));
        }
        out
    }
}

/// Appends a section (title, the command line, the table, notes) to the markdown file `path`.
pub fn append_markdown(path: &Path, title: &str, table: &Table, notes: &[String]) -> Result<()> {
    let command: Vec<String> = std::env::args().collect();
    let mut text = format!("### {title}\n\n`{}`\n\n", command.join(" "));
    text.push_str(&table.to_markdown());
    for note in notes {
        let _ = write!(text, "\n{note}\n");
    }
    text.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Every stdout line that parses as a JSON object with `"event": event`.
pub fn events(stdout: &str, event: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter_map(|l| {
            // mpirun may glue a rank's line to another's stderr: take from the first '{'.
            let start = l.find('{')?;
            serde_json::from_str::<serde_json::Value>(&l[start..]).ok()
        })
        .filter(|v| v.get("event").and_then(|e| e.as_str()) == Some(event))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn mem_available_parses_kib() {
        let text = "MemTotal: 100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(text), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn tables_render_as_text_and_markdown() {
        let mut t = Table::new(&["a", "bb"]);
        t.push(vec!["1".into(), "22222".into()]);
        assert_eq!(
            t.to_markdown(),
            "| a | bb |\n| --- | --- |\n| 1 | 22222 |\n"
        );
        assert!(t.to_text().starts_with("a     bb\n"));
    }

    #[test]
    fn events_are_found_in_mixed_output() {
        let out =
            "noise\n{\"event\":\"x\",\"v\":1}\nlog {\"event\":\"y\"}\n{\"event\":\"x\",\"v\":2}\n";
        assert_eq!(events(out, "x").len(), 2);
        assert_eq!(events(out, "y").len(), 1);
    }
}
