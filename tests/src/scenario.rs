//! The adaptive scenario of the main job, the agent end-to-end tests and the throughput
//! experiments: heat2d on emulated nodes (network namespaces with CPU caps), a competing CPU
//! hog started on one node after a warm-up, nodes whose agents join later, and IOS agents
//! that move ranks by themselves. The same scenario also runs as static MPI (heat2d-plain,
//! same placement, same hog, no agents) and unloaded, for comparison.
//!
//! The job's typed events are read as they appear, never its log text: every mode sets
//! `PCM_EVENTS` to a file of the run's directory and `PCM_PROGRESS_PERIOD` to
//! [`Scenario::progress_period`]. PCM writes the events of the adaptive runs (loop start,
//! progress, each process's start and each migration), so any PCM program, whatever its
//! language, can run there; heat2d-plain writes the same loop start and progress events
//! through `pcm::events`. They give the throughput over time and each migration as it
//! happens ([`Timeline`]).

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pcm_proto::run::{RunEvent, Stamped, EVENTS_FILE_ENV, PROGRESS_PERIOD_ENV};

use crate::netns::Cluster;
use crate::pool::{pool_key, AgentProc, AgentSpec, PeerServer};
use crate::{bin, Group, MpiJob, Report};

/// What runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// heat2d with PCM and agents on the nodes.
    Adaptive,
    /// heat2d-plain on the same placement under the same load, no agents.
    Static,
    /// heat2d-plain with no hog: the yardstick.
    Unloaded,
}

impl Mode {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Adaptive => "adaptive",
            Mode::Static => "static",
            Mode::Unloaded => "unloaded",
        }
    }
}

/// The scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Grid rows.
    pub rows: usize,
    /// Grid columns.
    pub cols: usize,
    /// Iterations.
    pub iters: u64,
    /// Least time between two progress events ([`PROGRESS_PERIOD`] unless sized by
    /// [`Scenario::set_length`]).
    pub progress_period: Duration,
    /// Rank i starts on node `placement[i]` (an index into the cluster's nodes).
    pub placement: Vec<usize>,
    /// Nodes whose agents join before the job starts.
    pub agents_at_start: Vec<usize>,
    /// The node that gets a CPU hog, and when (after the job starts).
    pub hog: Option<Hog>,
    /// Nodes whose agents join during the run, and when.
    pub joins: Vec<(usize, Duration)>,
    /// Nodes given back during the run (adaptive runs).
    pub leaves: Vec<NodeLeave>,
    /// Extra `ios-agent join` options.
    pub agent_options: Vec<String>,
    /// Longest a run may take.
    pub timeout: Duration,
    /// Whether the adaptive run's launch leaves the nodes that hold no rank at the start
    /// (those that join among them) out of its host list, as hosts that join the pool after
    /// the start are, and sets `PCM_ALLOW_NEW_HOSTS=1` so that ranks may still move there.
    /// MPICH only: Open MPI 4 cannot spawn outside its allocation. Otherwise (`false`) they
    /// are listed as spares.
    pub unlisted_spares: bool,
}

/// Another user's CPU-bound work started on one node during a run ([`Scenario::hog`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hog {
    /// The node (an index into the cluster's nodes).
    pub node: usize,
    /// When, after the job starts.
    pub at: Duration,
    /// Busy loops, each a single-threaded process: 1 unless said otherwise.
    pub busy_loops: usize,
}

impl Hog {
    /// One busy loop on `node`, `at` after the job starts.
    pub fn on(node: usize, at: Duration) -> Self {
        Self {
            node,
            at,
            busy_loops: 1,
        }
    }

    /// The same load with `busy_loops` busy loops (at least 1).
    pub fn with_busy_loops(self, busy_loops: usize) -> Self {
        Self {
            busy_loops: busy_loops.max(1),
            ..self
        }
    }
}

/// Seconds over which throughput is averaged when judging recovery
/// ([`Outcome::recovered_from`]).
pub const RECOVERY_WINDOW_S: f64 = 2.0;

/// Default [`Scenario::progress_period`].
pub const PROGRESS_PERIOD: Duration = Duration::from_millis(50);

/// Name of the event file in a run's directory.
pub const EVENTS_FILE: &str = "events.jsonl";

/// One progress event.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Seconds since the job started.
    pub t: f64,
    /// Iterations done.
    pub iteration: u64,
    /// Iterations per second since the previous progress event (or the loop start).
    pub rate: f64,
    /// Host of each rank (adaptive runs: from the processes' start and migration events).
    pub hosts: Vec<String>,
}

/// Kinds of events marked on the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The hog started.
    LoadOnset,
    /// A node's agent joined.
    NodeJoin,
    /// A node's agent left the pool (`ios-agent leave` returned).
    NodeLeave,
    /// A rank moved (PCM's migration event).
    Migration,
    /// The job changed its number of ranks (PCM's resize event, docs/malleability.md).
    Resize,
}

/// Something that happened during a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Seconds since the job started.
    pub t: f64,
    /// Its kind.
    pub kind: EventKind,
    /// In words, for people.
    pub what: String,
    /// The move, for a [`EventKind::Migration`].
    pub moved: Option<Move>,
    /// The resize, for a [`EventKind::Resize`].
    pub resized: Option<Resize>,
    /// The node a load onset, join or leave is about.
    pub host: Option<String>,
}

/// One rank's move, from PCM's migration event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Move {
    /// The rank.
    pub rank: u32,
    /// The host it ran on (`?` if the run's events never said).
    pub from: String,
    /// The host it runs on now.
    pub to: String,
}

impl std::fmt::Display for Move {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} moved {} -> {}", self.rank, self.from, self.to)
    }
}

/// A resize of a malleable job, from PCM's resize event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resize {
    /// Ranks before.
    pub from: u32,
    /// Ranks after.
    pub to: u32,
    /// Host of every rank after, by rank.
    pub hosts: Vec<String>,
}

impl Resize {
    /// Whether the job grew.
    pub fn grew(&self) -> bool {
        self.to > self.from
    }
}

impl std::fmt::Display for Resize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} -> {} ranks (on {})",
            if self.grew() { "grew" } else { "shrank" },
            self.from,
            self.to,
            self.hosts.join(" ")
        )
    }
}

/// What the observer of a run is told as it goes.
#[derive(Debug, Clone)]
pub enum Line {
    /// A progress event.
    Progress(Sample),
    /// An event.
    Event(Event),
}

/// How a run went.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The mode.
    pub mode: Mode,
    /// heat2d's final report.
    pub report: Report,
    /// Progress over time.
    pub samples: Vec<Sample>,
    /// Events over time.
    pub events: Vec<Event>,
    /// Seconds since the job started at which its iteration loop started (the loop start
    /// event), if it was seen.
    pub loop_start: Option<f64>,
    /// Wall time of the whole mpirun, seconds.
    pub wall_s: f64,
    /// Decisions the agents recorded (host, decision), adaptive runs.
    pub decisions: Vec<(String, ios_agent_proto::Decision)>,
    /// CPU use of each agent at steady state (from [`AGENT_WARMUP`] after its start to the
    /// end of the job), adaptive runs.
    pub agent_cpu: Vec<AgentCpu>,
    /// The nodes given back ([`Scenario::leaves`]), adaptive runs.
    pub leaves: Vec<LeaveResult>,
    /// Each agent's `ios-agent status` right after the job ended (its topology, the manager
    /// it follows under NSc2c, its counters), adaptive runs; agents that did not answer are
    /// missing.
    pub statuses: Vec<ios_agent_proto::AgentStatus>,
}

/// A node given back during a run: at `at` after the start, `ios-agent leave --within
/// WITHIN` drains the node, and once it returns with success the owner kills everything
/// there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeLeave {
    /// The node (an index into the cluster's nodes).
    pub node: usize,
    /// When, after the job starts.
    pub at: Duration,
    /// How long the drain may take.
    pub within: Duration,
    /// When given, the leave comes as soon as the job has done this many iterations (as its
    /// progress events tell), if that is before `at`: the node leaves at the same point of
    /// the work in runs that go at different speeds.
    pub after_iteration: Option<u64>,
}

/// How a node was given back.
#[derive(Debug, Clone)]
pub struct LeaveResult {
    /// The node.
    pub host: String,
    /// Seconds after the start that `ios-agent leave` was run, and that it returned.
    pub asked_at: f64,
    /// Seconds after the start that it returned.
    pub returned_at: f64,
    /// Whether it exited with success.
    pub success: bool,
    /// What it printed (stdout, then stderr).
    pub output: String,
    /// Processes of the node when it returned, before the owner killed them (`PID COMM`).
    pub processes_left: Vec<String>,
}

/// An `ios-agent leave` under way.
struct Leaving {
    host: String,
    asked_at: f64,
    within: Duration,
    output: std::thread::JoinHandle<std::io::Result<std::process::Output>>,
}

/// The leave `l`, which returned `returned_at` seconds after the start: what the event
/// says, and the result. When it succeeded, the owner takes the machine back: whatever
/// runs there dies.
fn finish_leave(cluster: &Cluster, l: Leaving, returned_at: f64) -> (String, LeaveResult) {
    let processes_left: Vec<String> = cluster
        .processes_on(&l.host)
        .into_iter()
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{pid} {}", comm.trim())
        })
        .collect();
    let out = l
        .output
        .join()
        .expect("the leave thread panicked")
        .expect("cannot run ios-agent leave");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let last = output.lines().last().unwrap_or("").to_owned();
    let what = format!(
        "{} {}: {last}",
        l.host,
        if out.status.success() {
            "left the pool"
        } else {
            "could not leave"
        }
    );
    if out.status.success() {
        cluster.kill_everything_on(&l.host);
    }
    let result = LeaveResult {
        host: l.host,
        asked_at: l.asked_at,
        returned_at,
        success: out.status.success(),
        output,
        processes_left,
    };
    (what, result)
}

/// How long after its start an agent's CPU use is first read: the speed probe and the
/// first connections are start-up costs, not steady state.
pub const AGENT_WARMUP: Duration = Duration::from_secs(2);

/// One agent's CPU use over a window.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentCpu {
    /// The agent's node.
    pub host: String,
    /// Length of the window, seconds.
    pub window_s: f64,
    /// CPU seconds used in the window divided by its length (0.002 = 0.2% of a core).
    pub cpu_fraction: f64,
}

/// User plus system CPU time of a process, in clock ticks, from `/proc/PID/stat`.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_per_second() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100.0, |t| t as f64)
}

/// An agent of the pool and its CPU reading after warm-up.
struct PoolAgent {
    agent: AgentProc,
    started: Instant,
    first: Option<(Instant, u64)>,
}

impl Outcome {
    /// The migrations seen.
    pub fn migrations(&self) -> impl Iterator<Item = &Event> {
        self.events
            .iter()
            .filter(|e| e.kind == EventKind::Migration)
    }

    /// The resizes seen.
    pub fn resizes(&self) -> impl Iterator<Item = &Event> {
        self.events.iter().filter(|e| e.kind == EventKind::Resize)
    }

    /// First time the event of `kind` happened.
    pub fn first(&self, kind: EventKind) -> Option<f64> {
        self.events.iter().find(|e| e.kind == kind).map(|e| e.t)
    }

    /// (seconds, iterations done) points, starting at (0, 0).
    pub fn progress_points(&self) -> Vec<(f64, u64)> {
        std::iter::once((0.0, 0))
            .chain(self.samples.iter().map(|s| (s.t, s.iteration)))
            .collect()
    }

    /// Iterations done at time `t` (linear between progress events).
    pub fn iteration_at(&self, t: f64) -> f64 {
        let points = self.progress_points();
        for w in points.windows(2) {
            let ((t0, i0), (t1, i1)) = (w[0], w[1]);
            if t <= t1 {
                if t1 <= t0 {
                    return i1 as f64;
                }
                return i0 as f64 + (i1 as f64 - i0 as f64) * ((t - t0) / (t1 - t0)).max(0.0);
            }
        }
        points.last().map_or(0.0, |p| p.1 as f64)
    }

    /// First progress event after `after` from which the run stays recovered: the throughput
    /// over every [`RECOVERY_WINDOW_S`] window that starts at a later progress event (and
    /// ends before the run does) is at least `rate`. Averaging over a window keeps single
    /// noisy lines from voiding a recovery; requiring every later window keeps a short good
    /// spell inside a slow stretch from counting as one.
    pub fn recovered_from(&self, after: f64, rate: f64) -> Option<f64> {
        let last = self.samples.last()?;
        let mut from = None;
        for s in self
            .samples
            .iter()
            .filter(|s| s.t > after && s.t + RECOVERY_WINDOW_S <= last.t)
        {
            let windowed = (self.iteration_at(s.t + RECOVERY_WINDOW_S) - s.iteration as f64)
                / RECOVERY_WINDOW_S;
            if windowed >= rate {
                from.get_or_insert(s.t);
            } else {
                from = None;
            }
        }
        from
    }
}

/// A run's typed events turned into its samples and migrations, in the order they are read.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Unix time the job started: event times are counted from it.
    origin: f64,
    /// Host of each rank, as last known.
    hosts: Vec<String>,
    /// When the loop started (seconds since the origin), if seen.
    loop_start: Option<f64>,
    /// The last progress point (seconds since the origin, iterations done).
    last: Option<(f64, u64)>,
}

impl Timeline {
    /// A timeline of a job that started at Unix time `origin`, with rank i first on
    /// `hosts[i]` (empty for a job whose processes and moves are not reported).
    pub fn new(origin: f64, hosts: Vec<String>) -> Timeline {
        Timeline {
            origin,
            hosts,
            loop_start: None,
            last: None,
        }
    }

    /// When the loop started, seconds since the origin, if seen.
    pub fn loop_start(&self) -> Option<f64> {
        self.loop_start
    }

    /// What `event` tells: a progress sample, a migration per moved rank, or nothing.
    pub fn take(&mut self, event: &Stamped) -> Vec<Line> {
        let t = event.time() - self.origin;
        match &event.event {
            RunEvent::LoopStarted { iteration } => {
                self.loop_start.get_or_insert(t);
                self.last.get_or_insert((t, *iteration));
                Vec::new()
            }
            // A replacement starts before the migration that spawned it is complete: its
            // move is taken from the migration event, with the host it left.
            RunEvent::Started {
                rank,
                host,
                replacement: false,
                ..
            } => {
                if let Some(h) = self.hosts.get_mut(rank.0 as usize) {
                    *h = host.to_string();
                }
                Vec::new()
            }
            RunEvent::Progress { iteration } => {
                let rate = match self.last {
                    Some((t0, i0)) if t > t0 => iteration.saturating_sub(i0) as f64 / (t - t0),
                    _ => 0.0,
                };
                self.last = Some((t, *iteration));
                vec![Line::Progress(Sample {
                    t,
                    iteration: *iteration,
                    rate,
                    hosts: self.hosts.clone(),
                })]
            }
            RunEvent::Migrated { placed, .. } => placed
                .iter()
                .map(|(rank, host)| {
                    let was = self
                        .hosts
                        .get(rank.0 as usize)
                        .cloned()
                        .unwrap_or_else(|| "?".into());
                    if let Some(h) = self.hosts.get_mut(rank.0 as usize) {
                        *h = host.to_string();
                    }
                    let moved = Move {
                        rank: rank.0,
                        from: was,
                        to: host.to_string(),
                    };
                    Line::Event(Event {
                        t,
                        kind: EventKind::Migration,
                        what: moved.to_string(),
                        moved: Some(moved),
                        resized: None,
                        host: None,
                    })
                })
                .collect(),
            // The new world is numbered 0..to-1 and PCM names every rank's host.
            RunEvent::Resized {
                from, to, hosts, ..
            } => {
                self.hosts = hosts.iter().map(ToString::to_string).collect();
                let resized = Resize {
                    from: *from,
                    to: *to,
                    hosts: self.hosts.clone(),
                };
                vec![Line::Event(Event {
                    t,
                    kind: EventKind::Resize,
                    what: resized.to_string(),
                    moved: None,
                    resized: Some(resized),
                    host: None,
                })]
            }
            _ => Vec::new(),
        }
    }
}

/// Now as Unix time, seconds.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `job` with its events in `path` (removed first: a previous run's events are not this
/// one's), a progress event at most every `period`.
fn with_events(job: MpiJob, path: &Path, period: Duration) -> MpiJob {
    // A file that is not there is what we want; any other failure shows in the run.
    let _ = std::fs::remove_file(path);
    job.env(EVENTS_FILE_ENV, path.display().to_string())
        .env(PROGRESS_PERIOD_ENV, format!("{}", period.as_secs_f64()))
}

/// Reads the lines appended to a file since the last call.
#[derive(Debug)]
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl Tail {
    fn new(path: &Path) -> Tail {
        Tail {
            path: path.to_owned(),
            offset: 0,
            partial: String::new(),
        }
    }

    fn lines(&mut self) -> Vec<String> {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut reader = BufReader::new(file);
        let mut out = Vec::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.offset += n as u64;
                    if line.ends_with('\n') {
                        let whole = std::mem::take(&mut self.partial) + line.trim_end();
                        out.push(whole);
                    } else {
                        self.partial.push_str(&line);
                    }
                }
            }
        }
        out
    }
}

/// A run's event file, read as it grows, and what it showed so far.
struct Follower {
    tail: Tail,
    timeline: Timeline,
}

impl Follower {
    /// Reads the events appended since the last call, tells `observer` what they show and
    /// keeps it. A line that is not an event is skipped (one being written as it is read is
    /// left for the next call by [`Tail`]).
    fn read(
        &mut self,
        observer: &mut dyn FnMut(&Line),
        samples: &mut Vec<Sample>,
        events: &mut Vec<Event>,
    ) {
        for line in self.tail.lines() {
            let Some(event) = Stamped::from_json_line(&line) else {
                continue;
            };
            for seen in self.timeline.take(&event) {
                observer(&seen);
                match seen {
                    Line::Progress(s) => samples.push(s),
                    Line::Event(e) => events.push(e),
                }
            }
        }
    }
}

/// Where the peer server and agents of an adaptive run live.
struct Pool {
    _server: PeerServer,
    server_addr: String,
    key: PathBuf,
    agents: Vec<PoolAgent>,
}

/// How long a scenario's job runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Length {
    /// Exactly this many iterations (to repeat a given run).
    Iterations(u64),
    /// As many iterations as take this many seconds unloaded on the scenario's nodes,
    /// measured there first ([`Scenario::size_by_time`]).
    UnloadedSeconds(f64),
}

impl Length {
    /// `Iterations` if given, else `UnloadedSeconds(seconds)`: the usual command-line pair
    /// `--iters N` (optional) and `--seconds S`.
    pub fn from_options(iters: Option<u64>, seconds: f64) -> Length {
        iters.map_or(Length::UnloadedSeconds(seconds), Length::Iterations)
    }
}

/// Starts `job` (which must write progress events, as heat2d and heat2d-plain do, and run
/// longer than the measurement) on `placement`, measures its iterations per second over
/// `window` after a 0.5 s warm-up, and kills it. Sized by time, not by iterations: a slow
/// machine gives a low rate, not a timeout. Errors when the job ends early or reports no
/// progress within 60 s.
pub fn measure_rate(
    cluster: &Cluster,
    job: MpiJob,
    placement: &[&str],
    dir: &Path,
    window: Duration,
) -> Result<f64, String> {
    const WARM_UP: Duration = Duration::from_millis(500);
    const FIRST_LINE: Duration = Duration::from_secs(60);
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let events = dir.join(EVENTS_FILE);
    let job = cluster.job(with_events(job, &events, PROGRESS_PERIOD), placement);
    let started = Instant::now();
    let mut group = job.start(dir, "job");
    let mut tail = Tail::new(&events);
    // When the first progress event was read, and its time.
    let mut first: Option<(Instant, f64)> = None;
    // (event time, iterations done) once the warm-up is over.
    let mut points: Vec<(f64, u64)> = Vec::new();
    loop {
        if crate::interrupted() {
            return Err("interrupted while measuring the speed".into());
        }
        if !group.running() {
            return Err(format!(
                "the measured job ended early:\n{}",
                group.stderr_so_far()
            ));
        }
        for line in tail.lines() {
            let Some(event) = Stamped::from_json_line(&line) else {
                continue;
            };
            let (time, RunEvent::Progress { iteration }) = (event.time(), event.event) else {
                continue;
            };
            let (_, t0) = *first.get_or_insert((Instant::now(), time));
            if time - t0 >= WARM_UP.as_secs_f64() {
                points.push((time, iteration));
            }
        }
        match first {
            None if started.elapsed() > FIRST_LINE => {
                return Err(format!(
                    "the measured job reported no progress within {FIRST_LINE:?}:\n{}",
                    group.stderr_so_far()
                ))
            }
            Some((since, _)) if since.elapsed() >= WARM_UP + window => break,
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    group.kill();
    match (points.first(), points.last()) {
        (Some(&(t0, i0)), Some(&(t1, i1))) if t1 > t0 && i1 > i0 => {
            Ok((i1 - i0) as f64 / (t1 - t0))
        }
        _ => Err(format!(
            "too few progress events in {window:?} to measure the speed ({} events)",
            points.len()
        )),
    }
}

/// Progress events of the unloaded run that [`Scenario::size_by_time`] asks for over the run.
pub const PROGRESS_LINES: u64 = 200;

impl Scenario {
    /// The checksum heat2d-plain computes for the scenario's grid and iterations, run on this
    /// machine outside the emulated nodes (the reference a run with moves must match bit for
    /// bit). Panics if the run does not end within `timeout`. Run once per test process for
    /// each rank count, grid and iteration count: tests that share a sizing share the run.
    pub fn plain_checksum(&self, timeout: Duration) -> String {
        type Key = (usize, usize, usize, u64);
        static PLAIN: Mutex<BTreeMap<Key, String>> = Mutex::new(BTreeMap::new());
        let key = (self.placement.len(), self.rows, self.cols, self.iters);
        let known = PLAIN
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        if let Some(known) = known {
            return known;
        }
        let args = [
            "--rows".to_owned(),
            self.rows.to_string(),
            "--cols".to_owned(),
            self.cols.to_string(),
            "--iters".to_owned(),
            self.iters.to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let checksum = MpiJob::new(self.placement.len(), "heat2d-plain", &args)
            .run(timeout)
            .report()
            .reference_checksum()
            .to_owned();
        PLAIN
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, checksum.clone());
        checksum
    }

    /// heat2d's arguments for the scenario's grid.
    fn heat2d_args(&self, iters: u64) -> Vec<String> {
        [
            "--rows",
            &self.rows.to_string(),
            "--cols",
            &self.cols.to_string(),
            "--iters",
            &iters.to_string(),
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// Measures how many iterations per second heat2d-plain makes on the scenario's grid and
    /// placement on `cluster`, unloaded: a job with no end runs for `window` after its first
    /// progress event plus a warm-up, then it and everything else on the nodes is killed (call
    /// it before anything else runs there). Logs go under `dir`.
    ///
    /// Scenario runs are sized by this measurement, never by an iteration count tuned on one
    /// machine: machines of one kind differ in speed by 4x or more, and a run sized in
    /// iterations that takes 10 s on one ended on another before the load it was written to
    /// show had even started.
    pub fn unloaded_rate(
        &self,
        cluster: &Cluster,
        dir: &Path,
        window: Duration,
    ) -> Result<f64, String> {
        let nodes = cluster.host_names();
        let placement =
            self.placement
                .iter()
                .map(|&i| {
                    nodes.get(i).map(String::as_str).ok_or_else(|| {
                        format!("node index {i} but the cluster has {}", nodes.len())
                    })
                })
                .collect::<Result<Vec<&str>, String>>()?;
        let run_dir = dir.join("calibration");
        // Longer than any window: the job is killed once measured.
        let args = self.heat2d_args(u64::from(u32::MAX));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let job = MpiJob::new(self.placement.len(), "heat2d-plain", &args);
        let rate = measure_rate(cluster, job, &placement, &run_dir, window);
        // Nothing else runs on the nodes yet (the agents start with the run itself).
        cluster.clear_nodes();
        rate
    }

    /// Sets the iteration count so that the unloaded job runs about `seconds` on `cluster`,
    /// measured with [`Scenario::unloaded_rate`] over 2 s, and the progress period so that
    /// there are about [`PROGRESS_LINES`] progress events. Returns the measured rate.
    pub fn size_by_time(
        &mut self,
        cluster: &Cluster,
        dir: &Path,
        seconds: f64,
    ) -> Result<f64, String> {
        if !(seconds.is_finite() && seconds > 0.0) {
            return Err(format!("a run of {seconds} s cannot be sized"));
        }
        let rate = self.unloaded_rate(cluster, dir, Duration::from_secs(2))?;
        self.iters = ((rate * seconds).round() as u64).max(PROGRESS_LINES);
        // PCM's config refuses a period under 1 ms.
        self.progress_period =
            Duration::from_secs_f64(seconds / PROGRESS_LINES as f64).max(Duration::from_millis(1));
        Ok(rate)
    }

    /// [`Scenario::size_by_time`], measured once per test process for each kind of cluster
    /// (`nodes` names it), placement, grid and length: tests that run the same job on the same
    /// kind of cluster share its length, and so its plain run ([`Scenario::plain_checksum`]).
    /// Returns the measured rate, or `None` when an earlier test measured it.
    pub fn size_by_time_once(
        &mut self,
        cluster: &Cluster,
        dir: &Path,
        seconds: f64,
        nodes: &str,
    ) -> Result<Option<f64>, String> {
        type Key = (String, Vec<usize>, usize, usize, u64);
        static SIZED: Mutex<BTreeMap<Key, (u64, Duration)>> = Mutex::new(BTreeMap::new());
        let key = (
            nodes.to_owned(),
            self.placement.clone(),
            self.rows,
            self.cols,
            seconds.to_bits(),
        );
        let known = SIZED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .copied();
        if let Some((iters, progress_period)) = known {
            (self.iters, self.progress_period) = (iters, progress_period);
            eprintln!("{iters} iterations, as measured by an earlier test on {nodes}");
            return Ok(None);
        }
        let rate = self.size_by_time(cluster, dir, seconds)?;
        eprintln!(
            "unloaded on {nodes}: {rate:.0} it/s, so {} iterations",
            self.iters
        );
        SIZED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (self.iters, self.progress_period));
        Ok(Some(rate))
    }

    /// The same scenario with `placement` and its hog started with the run instead of after
    /// a warm-up: a reference run (the best placement) measures the speed under the load,
    /// so the load must run during all of its loop, however short the run.
    pub fn loaded_from_the_start(&self, placement: Vec<usize>) -> Scenario {
        Scenario {
            placement,
            hog: self.hog.map(|hog| Hog {
                at: Duration::ZERO,
                ..hog
            }),
            ..self.clone()
        }
    }

    /// Sets the iteration count and progress period for `length` (measuring on `cluster`
    /// when it is given in seconds, logs under `dir`; a count of iterations keeps the
    /// period). Returns the measured unloaded rate,
    /// if measured.
    pub fn set_length(
        &mut self,
        cluster: &Cluster,
        dir: &Path,
        length: Length,
    ) -> Result<Option<f64>, String> {
        match length {
            Length::Iterations(0) => Err("a run of 0 iterations shows nothing".into()),
            Length::Iterations(n) => {
                self.iters = n;
                Ok(None)
            }
            Length::UnloadedSeconds(s) => self.size_by_time(cluster, dir, s).map(Some),
        }
    }

    /// Runs the scenario once on `cluster` (which must have at least as many nodes as the
    /// scenario names), with logs and sockets under `dir`, telling `observer` each progress
    /// event and event as it happens. The program is heat2d (adaptive) or heat2d-plain.
    pub fn run(
        &self,
        cluster: &Cluster,
        mode: Mode,
        dir: &Path,
        observer: &mut dyn FnMut(&Line),
    ) -> Outcome {
        let program = if mode == Mode::Adaptive {
            "heat2d"
        } else {
            "heat2d-plain"
        };
        self.run_program(cluster, mode, program, dir, observer)
    }

    /// As [`Scenario::run`], with `program` (a binary of the project, [`crate::bin`]) as the
    /// job: one that takes heat2d's options (`--rows`, `--cols`, `--iters`), prints heat2d's
    /// report as its last stdout line, and writes PCM's loop start and progress events
    /// (`PCM_EVENTS`). In adaptive mode any PCM program does: the C heat2d (`heat2d-c`, PCM
    /// through the C interface) as well as the Rust one. The checksum matches heat2d-plain's.
    pub fn run_program(
        &self,
        cluster: &Cluster,
        mode: Mode,
        program: &str,
        dir: &Path,
        observer: &mut dyn FnMut(&Line),
    ) -> Outcome {
        let nodes = cluster.host_names();
        let host = |i: usize| -> &str {
            nodes
                .get(i)
                .unwrap_or_else(|| panic!("node index {i} but the cluster has {}", nodes.len()))
        };
        let placement: Vec<&str> = self.placement.iter().map(|i| host(*i)).collect();
        let run_dir = dir.join(mode.name());
        std::fs::create_dir_all(&run_dir).unwrap();
        let daemon_env = run_dir.join("{host}.sock").display().to_string();

        let mut pool = (mode == Mode::Adaptive).then(|| {
            let key = pool_key(&run_dir, "pool.key");
            let server = PeerServer::start(
                Command::new(bin("peer-server")),
                &run_dir,
                &key,
                cluster.bridge_addr(),
                "peer-server",
            );
            let server_addr = server.addr.clone();
            let mut pool = Pool {
                _server: server,
                server_addr,
                key,
                agents: Vec::new(),
            };
            for &n in &self.agents_at_start {
                let agent = self.start_agent(cluster, &run_dir, &pool, host(n));
                pool.agents.push(PoolAgent {
                    agent,
                    started: Instant::now(),
                    first: None,
                });
            }
            pool
        });

        let args = self.heat2d_args(self.iters);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let events_path = run_dir.join(EVENTS_FILE);
        let mut job = with_events(
            MpiJob::new(self.placement.len(), program, &args),
            &events_path,
            self.progress_period,
        );
        if mode == Mode::Adaptive {
            job = job.env("PCM_DAEMON", daemon_env.clone());
        }
        let job = if mode == Mode::Adaptive && self.unlisted_spares {
            cluster.job_without_spares(job.env("PCM_ALLOW_NEW_HOSTS", "1"), &placement)
        } else {
            cluster.job(job, &placement)
        };
        let started = Instant::now();
        let hosts = if mode == Mode::Adaptive {
            placement.iter().map(|h| (*h).to_owned()).collect()
        } else {
            Vec::new()
        };
        let mut follower = Follower {
            tail: Tail::new(&events_path),
            timeline: Timeline::new(unix_now(), hosts),
        };
        let mut group = job.start(&run_dir, "job");

        let mut samples: Vec<Sample> = Vec::new();
        let mut events: Vec<Event> = Vec::new();
        let mut hog: Option<Group> = None;
        let mut joins: Vec<(usize, Duration)> = if mode == Mode::Adaptive {
            self.joins.clone()
        } else {
            Vec::new()
        };
        let mut leaves_due: Vec<NodeLeave> = if mode == Mode::Adaptive {
            self.leaves.clone()
        } else {
            Vec::new()
        };
        let mut leaving: Vec<Leaving> = Vec::new();
        let mut leaves: Vec<LeaveResult> = Vec::new();
        let emit = |observer: &mut dyn FnMut(&Line),
                    events: &mut Vec<Event>,
                    kind: EventKind,
                    host: &str,
                    what: String| {
            let e = Event {
                t: started.elapsed().as_secs_f64(),
                kind,
                what,
                moved: None,
                resized: None,
                host: Some(host.to_owned()),
            };
            observer(&Line::Event(e.clone()));
            events.push(e);
        };

        // A leave that returned: its event, its result, and the node taken back.
        let record = |observer: &mut dyn FnMut(&Line),
                      events: &mut Vec<Event>,
                      leaves: &mut Vec<LeaveResult>,
                      l: Leaving| {
            let (what, result) = finish_leave(cluster, l, started.elapsed().as_secs_f64());
            emit(observer, events, EventKind::NodeLeave, &result.host, what);
            leaves.push(result);
        };

        while group.running() {
            let now = started.elapsed();
            assert!(
                !crate::interrupted(),
                "interrupted: stopping the {} run; the emulated nodes are cleaned up",
                mode.name()
            );
            assert!(
                now < self.timeout,
                "{} run did not finish within {:?}:\n{}",
                mode.name(),
                self.timeout,
                group.stderr_so_far()
            );
            if let Some(load) = self.hog {
                if mode != Mode::Unloaded && hog.is_none() && now >= load.at {
                    let node = host(load.node);
                    hog = Some(cluster.start_hog(node, &run_dir, "hog", load.busy_loops));
                    let what = match load.busy_loops {
                        1 => format!("CPU hog started on {node}"),
                        n => format!("CPU hog ({n} busy loops) started on {node}"),
                    };
                    emit(observer, &mut events, EventKind::LoadOnset, node, what);
                }
            }
            if let Some(pool) = pool.as_mut() {
                let due: Vec<usize> = joins
                    .iter()
                    .filter(|(_, at)| now >= *at)
                    .map(|(n, _)| *n)
                    .collect();
                joins.retain(|(_, at)| now < *at);
                for n in due {
                    let agent = self.start_agent(cluster, &run_dir, pool, host(n));
                    pool.agents.push(PoolAgent {
                        agent,
                        started: Instant::now(),
                        first: None,
                    });
                    emit(
                        observer,
                        &mut events,
                        EventKind::NodeJoin,
                        host(n),
                        format!("{} joined the pool", host(n)),
                    );
                }
            }
            if let Some(pool) = pool.as_ref() {
                let done = samples.last().map_or(0, |s| s.iteration);
                let is_due =
                    |l: &NodeLeave| now >= l.at || l.after_iteration.is_some_and(|i| done >= i);
                let due: Vec<NodeLeave> =
                    leaves_due.iter().filter(|l| is_due(l)).copied().collect();
                leaves_due.retain(|l| !is_due(l));
                for NodeLeave {
                    node: n, within, ..
                } in due
                {
                    let agent = pool
                        .agents
                        .iter()
                        .find(|a| a.agent.spec.host == host(n))
                        .unwrap_or_else(|| panic!("no agent on {} to leave", host(n)));
                    let mut command = Command::new(bin("ios-agent"));
                    command
                        .arg("--control")
                        .arg(&agent.agent.spec.control)
                        .args(["leave", "--within"])
                        .arg(within.as_secs_f64().to_string());
                    leaving.push(Leaving {
                        host: host(n).to_owned(),
                        asked_at: started.elapsed().as_secs_f64(),
                        within,
                        output: std::thread::spawn(move || command.output()),
                    });
                }
            }
            let (done, going): (Vec<Leaving>, Vec<Leaving>) =
                leaving.drain(..).partition(|l| l.output.is_finished());
            leaving = going;
            for l in done {
                record(observer, &mut events, &mut leaves, l);
            }
            if let Some(pool) = pool.as_mut() {
                for a in pool.agents.iter_mut().filter(|a| a.first.is_none()) {
                    if a.started.elapsed() >= AGENT_WARMUP {
                        a.first = cpu_ticks(a.agent.group.pid()).map(|t| (Instant::now(), t));
                    }
                }
            }
            follower.read(observer, &mut samples, &mut events);
            std::thread::sleep(Duration::from_millis(50));
        }
        let wall_s = started.elapsed().as_secs_f64();
        let finished = group.wait(Duration::from_secs(5));
        // The events written between the last read and the job's end.
        follower.read(observer, &mut samples, &mut events);
        // A leave still draining when the job ended returns soon (nothing is left to move),
        // or at its own deadline.
        for l in leaving {
            let deadline = Duration::from_secs_f64(l.asked_at) + l.within + Duration::from_secs(5);
            while !l.output.is_finished() && started.elapsed() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if l.output.is_finished() {
                record(observer, &mut events, &mut leaves, l);
            }
        }
        let report = finished.report();
        drop(hog);
        let agents: &[PoolAgent] = pool.as_ref().map_or(&[], |p| p.agents.as_slice());
        let agent_cpu = agents
            .iter()
            .filter_map(|a| {
                let (since, first) = a.first?;
                let last = cpu_ticks(a.agent.group.pid())?;
                let window_s = since.elapsed().as_secs_f64();
                (window_s > 0.0).then(|| AgentCpu {
                    host: a.agent.spec.host.clone(),
                    window_s,
                    cpu_fraction: last.saturating_sub(first) as f64 / ticks_per_second() / window_s,
                })
            })
            .collect();
        let decisions = agents
            .iter()
            .flat_map(|a| {
                a.agent
                    .decisions()
                    .into_iter()
                    .map(|d| (a.agent.spec.host.clone(), d))
                    .collect::<Vec<_>>()
            })
            .collect();
        let statuses = agents.iter().filter_map(|a| a.agent.try_status()).collect();
        Outcome {
            mode,
            report,
            samples,
            events,
            loop_start: follower.timeline.loop_start(),
            wall_s,
            decisions,
            agent_cpu,
            leaves,
            statuses,
        }
    }

    fn start_agent(&self, cluster: &Cluster, dir: &Path, pool: &Pool, host: &str) -> AgentProc {
        let spec = AgentSpec::in_dir(
            dir,
            host,
            &pool.key,
            &[&pool.server_addr],
            &cluster.node(host).addr,
        )
        .with(
            &self
                .agent_options
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        let command = cluster.daemon_command_on(host, bin("ios-agent"), std::iter::empty::<&str>());
        AgentProc::start(command, dir, spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_is_judged_on_the_average_to_the_end() {
        let sample = |t: f64, iteration: u64, rate: f64| Sample {
            t,
            iteration,
            rate,
            hosts: Vec::new(),
        };
        // 100 it/s, 10 it/s from 2 s to 4 s, then 90-110 it/s (noisy) to 8 s.
        let samples = vec![
            sample(1.0, 100, 100.0),
            sample(2.0, 200, 100.0),
            sample(3.0, 210, 10.0),
            sample(4.0, 220, 10.0),
            sample(5.0, 310, 90.0),
            sample(6.0, 420, 110.0),
            sample(7.0, 510, 90.0),
            sample(8.0, 620, 110.0),
        ];
        let outcome = Outcome {
            mode: Mode::Adaptive,
            report: Report {
                checksum: String::new(),
                iterations: 620,
                seconds: 8.0,
                ranks: 2,
                migrations: None,
                hosts: None,
                ..Report::default()
            },
            samples,
            events: Vec::new(),
            loop_start: Some(0.0),
            wall_s: 8.0,
            decisions: Vec::new(),
            agent_cpu: Vec::new(),
            leaves: Vec::new(),
            statuses: Vec::new(),
        };
        assert_eq!(outcome.recovered_from(2.0, 90.0), Some(4.0));
        assert_eq!(outcome.recovered_from(2.0, 200.0), None);
        // From 1 s, the window starting at 2 s (200 to 310 iterations) is slow: recovery
        // still starts at 4 s, not at the first line whose average to the end would do.
        assert_eq!(outcome.recovered_from(1.0, 90.0), Some(4.0));
        // A good spell followed by a slow window is not a recovery.
        assert_eq!(outcome.recovered_from(0.5, 60.0), Some(4.0));
        assert!((outcome.iteration_at(2.5) - 205.0).abs() < 1e-9);
    }

    /// `event` of rank 0 (pid 7), `t` seconds after the Unix time `origin`.
    fn rank_0_at(origin: f64, t: f64, event: RunEvent) -> Stamped {
        Stamped {
            unix_us: ((origin + t) * 1e6).round() as u64,
            pid: 7,
            rank: Some(pcm_proto::Rank(0)),
            event,
        }
    }

    fn host(h: &str) -> pcm_proto::HostName {
        pcm_proto::HostName::new(h).unwrap()
    }

    #[test]
    fn events_give_the_samples_and_the_migrations() {
        let origin = 1_000.0;
        let at = |t: f64, event: RunEvent| rank_0_at(origin, t, event);
        let mut timeline = Timeline::new(origin, vec!["a".into(), "b".into()]);
        let events = [
            at(
                0.1,
                RunEvent::Started {
                    rank: pcm_proto::Rank(1),
                    pid: 8,
                    host: host("b2"),
                    replacement: false,
                },
            ),
            at(0.5, RunEvent::LoopStarted { iteration: 0 }),
            at(1.5, RunEvent::Progress { iteration: 100 }),
            at(
                1.6,
                RunEvent::Started {
                    rank: pcm_proto::Rank(1),
                    pid: 9,
                    host: host("c"),
                    replacement: true,
                },
            ),
            at(
                1.7,
                RunEvent::Migrated {
                    iteration: 120,
                    placed: vec![(pcm_proto::Rank(1), host("c"))],
                    timings: pcm_proto::PhaseTimings::default(),
                },
            ),
            at(2.5, RunEvent::Progress { iteration: 150 }),
            at(2.6, RunEvent::Checkpointed { iteration: 150 }),
        ];
        let lines: Vec<Line> = events.iter().flat_map(|e| timeline.take(e)).collect();
        assert_eq!(timeline.loop_start(), Some(0.5));
        let [Line::Progress(first), Line::Event(moved), Line::Progress(second)] = &lines[..] else {
            panic!("{lines:?}");
        };
        assert_eq!((first.t, first.iteration), (1.5, 100));
        assert!((first.rate - 100.0).abs() < 1e-9, "{first:?}");
        assert_eq!(first.hosts, ["a", "b2"]);
        assert_eq!(moved.kind, EventKind::Migration);
        assert!((moved.t - 1.7).abs() < 1e-9);
        assert_eq!(moved.what, "rank 1 moved b2 -> c");
        assert_eq!(
            moved.moved,
            Some(Move {
                rank: 1,
                from: "b2".into(),
                to: "c".into()
            })
        );
        assert!((second.rate - 50.0).abs() < 1e-9, "{second:?}");
        assert_eq!(second.hosts, ["a", "c"]);
    }

    #[test]
    fn a_resize_is_an_event_and_renames_the_hosts() {
        let origin = 50.0;
        let at = |t: f64, event: RunEvent| rank_0_at(origin, t, event);
        let mut timeline = Timeline::new(origin, vec!["a".into(), "b".into()]);
        let resized = |t: f64, from: u32, hosts: &[&str]| {
            at(
                t,
                RunEvent::Resized {
                    iteration: 10,
                    from,
                    to: hosts.len() as u32,
                    hosts: hosts.iter().map(|h| host(h)).collect(),
                    timings: pcm_proto::PhaseTimings::default(),
                },
            )
        };
        let events = [
            at(0.1, RunEvent::LoopStarted { iteration: 0 }),
            resized(1.0, 2, &["a", "b", "d"]),
            at(1.5, RunEvent::Progress { iteration: 100 }),
            resized(2.0, 3, &["a", "d"]),
            at(2.5, RunEvent::Progress { iteration: 200 }),
        ];
        let lines: Vec<Line> = events.iter().flat_map(|e| timeline.take(e)).collect();
        let [Line::Event(grew), Line::Progress(wide), Line::Event(shrank), Line::Progress(narrow)] =
            &lines[..]
        else {
            panic!("{lines:?}");
        };
        assert_eq!(grew.kind, EventKind::Resize);
        let g = grew.resized.as_ref().unwrap();
        assert!(g.grew() && g.from == 2 && g.to == 3, "{g:?}");
        assert_eq!(grew.what, "grew 2 -> 3 ranks (on a b d)");
        assert_eq!(wide.hosts, ["a", "b", "d"]);
        let s = shrank.resized.as_ref().unwrap();
        assert!(!s.grew() && s.to == 2, "{s:?}");
        assert_eq!(shrank.what, "shrank 3 -> 2 ranks (on a d)");
        assert_eq!(narrow.hosts, ["a", "d"]);
    }

    #[test]
    fn the_event_file_is_read_as_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(EVENTS_FILE);
        let mut tail = Tail::new(&path);
        assert!(tail.lines().is_empty());
        let line = Stamped::now(None, RunEvent::Progress { iteration: 3 }).to_json_line();
        let (head, rest) = line.split_at(10);
        std::fs::write(&path, head).unwrap();
        assert!(tail.lines().is_empty(), "half a line is not read");
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(rest.as_bytes()).unwrap();
        let lines = tail.lines();
        assert_eq!(lines.len(), 1);
        assert!(Stamped::from_json_line(&lines[0]).is_some(), "{lines:?}");
    }
}
