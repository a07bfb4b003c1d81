//! The daemon's pure state core: connections, jobs, ranks and in-flight reconfigurations.
//!
//! Sans-I/O in the style of `quinn-proto`: [`Registry`] never touches a socket or a clock.
//! Every input carries `now`; outputs are queued and taken out with [`Registry::poll_output`];
//! [`Registry::poll_timeout`] says when [`Registry::handle_timeout`] must be called next.
//! The tokio driver in [`crate::daemon`] only moves bytes and runs that one timer.
//!
//! Methods come in the documented order: constructors and getters, `handle_*` inputs,
//! `poll_*` outputs.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use pcm_proto::{
    AppName, ClientKind, DaemonStatus, ErrorKind, FrameError, FromDaemon, HostName, JobId,
    JobStatus, Move, Outcome, Rank, RankStatus, RequestId, Resize, ToDaemon, MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION, RESIZE_PROTOCOL_VERSION,
};

use crate::stats::{self, Book};
use pcm_proto::log_limit::{self, LogLimit};

/// Default time a reconfiguration may stay in flight before it is abandoned (120 s).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Default time a new connection has to send `Hello` (5 s).
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Default maximum number of open connections (4096).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default time a job whose every rank here left in a reconfiguration is kept for the
/// replacements to register (10 s).
pub const DEFAULT_REPLACEMENT_GRACE: Duration = Duration::from_secs(10);

/// Budget for the encoded size of a status reply: registrations that would push the
/// (over-)estimated size past it are refused, so a status always fits in one frame.
const STATUS_BUDGET: usize = pcm_proto::MAX_FRAME_LEN * 3 / 4;
/// Over-estimate of the encoded size of one rank entry, besides its host name.
const RANK_STATUS_OVERHEAD: usize = 128;
/// Over-estimate of the encoded size of one job entry, besides its job and app names.
const JOB_STATUS_OVERHEAD: usize = 128;

/// Settings of the core.
#[derive(Debug, Clone)]
pub struct Config {
    request_timeout: Duration,
    hello_timeout: Duration,
    max_connections: usize,
    stats_period: Duration,
    replacement_grace: Duration,
}

impl Default for Config {
    /// [`DEFAULT_REQUEST_TIMEOUT`], [`DEFAULT_HELLO_TIMEOUT`], [`DEFAULT_MAX_CONNECTIONS`],
    /// [`stats::DEFAULT_STATS_PERIOD`], [`DEFAULT_REPLACEMENT_GRACE`].
    fn default() -> Self {
        Self {
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            hello_timeout: DEFAULT_HELLO_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            stats_period: stats::DEFAULT_STATS_PERIOD,
            replacement_grace: DEFAULT_REPLACEMENT_GRACE,
        }
    }
}

impl Config {
    /// How long a reconfiguration may stay in flight (default [`DEFAULT_REQUEST_TIMEOUT`]).
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long a new connection has to send `Hello` (default [`DEFAULT_HELLO_TIMEOUT`]).
    pub fn with_hello_timeout(mut self, timeout: Duration) -> Self {
        self.hello_timeout = timeout;
        self
    }

    /// Maximum number of open connections (default [`DEFAULT_MAX_CONNECTIONS`]); further
    /// clients get an error and are closed.
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// The in-flight deadline.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Length of a stats period (default [`stats::DEFAULT_STATS_PERIOD`]): the driver calls
    /// [`Registry::handle_stats_tick`] this often.
    pub fn with_stats_period(mut self, period: Duration) -> Self {
        self.stats_period = period;
        self
    }

    /// The stats period.
    pub fn stats_period(&self) -> Duration {
        self.stats_period
    }

    /// How long a job whose every rank here left in a reconfiguration (all of them moved)
    /// is kept for their replacements to register (default [`DEFAULT_REPLACEMENT_GRACE`]).
    pub fn with_replacement_grace(mut self, grace: Duration) -> Self {
        self.replacement_grace = grace;
        self
    }
}

/// Identifier the core gives each connection; never reused within one [`Registry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "conn-{}", self.0)
    }
}

/// Something the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send `message` on connection `conn`.
    Send {
        /// Where to.
        conn: ConnId,
        /// What.
        message: FromDaemon,
    },
    /// Flush what was queued for `conn`, then close it. The core has already forgotten it.
    Close {
        /// Which connection.
        conn: ConnId,
    },
}

#[derive(Debug)]
enum ConnState {
    AwaitingHello {
        deadline: Instant,
    },
    Rank {
        registered: Option<(JobId, Rank)>,
        /// The protocol version the rank speaks (a version-2 rank cannot resize).
        version: u32,
    },
    Controller,
}

#[derive(Debug)]
struct RankEntry {
    conn: ConnId,
    host: HostName,
    pid: u32,
    iteration: u64,
    last_progress: Option<(Instant, u64)>,
    /// When the rank's link last sent anything: it reports about once a second even while
    /// the rank waits in MPI, so a long silence means the process does not run.
    last_report: Instant,
    rate: f64,
    replacement: bool,
    /// When this process registered the rank.
    since: Instant,
    /// The job's epoch at which the process last learned its number (its registration or
    /// its latest [`ToDaemon::Renumbered`]): of two processes claiming one number, the one
    /// with the newer epoch holds it.
    epoch: u64,
    /// The protocol version the process speaks.
    version: u32,
}

impl RankEntry {
    fn silent(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_report)
    }

    fn stalled(&self, now: Instant) -> bool {
        self.silent(now).as_secs_f64() >= pcm_proto::STALLED_AFTER_S
    }
}

/// A request delivered to the job's ranks here and not yet known to have ended.
#[derive(Debug)]
struct InFlight {
    request: RequestId,
    moves: Vec<Move>,
    /// The new width asked for with the moves, if any.
    resize: Option<Resize>,
    /// When it was made.
    made: Instant,
    deadline: Instant,
    waiter: Option<ConnId>,
    /// The job's epoch the request was made in.
    epoch: u64,
    /// The connections the request was delivered to that are still open: only they can
    /// withdraw it or report its end.
    holders: Vec<ConnId>,
    /// The deadline passed and the holders were told to withdraw the request: it stays in
    /// flight until one of them withdraws it or reports its end (no new deadline: a stopped
    /// rank can answer only once it runs again, and until then the move may still happen).
    cancelling: bool,
}

#[derive(Debug)]
struct Job {
    app: AppName,
    size: u32,
    ranks: BTreeMap<Rank, RankEntry>,
    in_flight: Option<InFlight>,
    /// Requests made here that the job completed.
    migrations: u64,
    /// Requests made here that the job withdrew after their deadline.
    cancelled: u64,
    /// Requests made here that ended with nothing moved otherwise.
    failed: u64,
    /// Reconfigurations the job has completed, as its ranks last reported.
    epoch: u64,
    /// The epoch at which the job had `size` ranks, as last learned (a registration, a
    /// completed resize, or a rank's [`ToDaemon::Renumbered`]): a process of a newer epoch
    /// that tells another width is right; one of the same epoch is refused.
    size_epoch: u64,
    /// Processes registered here that hold no number of the job for now, by connection: a
    /// process a resize removed (it leaves the job and exits), or one whose number another
    /// process took first in the same reconfiguration (it renumbers next). Not shown; a
    /// [`ToDaemon::Renumbered`] from one of them puts it back in its new place.
    set_aside: HashMap<ConnId, (Rank, RankEntry)>,
    /// Ranks that a reconfiguration completed here placed on this host and whose
    /// replacements have not registered yet.
    expected: std::collections::BTreeSet<Rank>,
    /// Every rank here left while a reconfiguration was in flight or replacements were
    /// expected (a move of every rank: the old processes may leave before the new ones
    /// register): the job is kept, with no ranks, until a rank registers or this passes.
    vacant_until: Option<Instant>,
}

/// The daemon's whole state. See the [module docs](self).
#[derive(Debug)]
pub struct Registry {
    config: Config,
    host: HostName,
    pid: u32,
    started: Instant,
    next_conn: u64,
    next_request: u64,
    conns: HashMap<ConnId, ConnState>,
    jobs: BTreeMap<JobId, Job>,
    outputs: VecDeque<Output>,
    /// The ranks' profiles and the node's load.
    stats: Book,
    /// Refusals for lack of room: anyone who can reach the socket can provoke one per
    /// connection, so their warnings are rate-limited.
    refusals_log: LogLimit,
    /// Connections refused because the daemon was full, since it started.
    refused_connections: u64,
}

fn ranks_list(moves: &[Move], resize: Option<&Resize>) -> String {
    let ranks: Vec<String> = moves.iter().map(|m| m.rank.to_string()).collect();
    match (ranks.is_empty(), resize) {
        (true, Some(resize)) => format!("resize to {resize}"),
        (false, Some(resize)) => format!("ranks {}, resize to {resize}", ranks.join(", ")),
        (_, None) => format!("ranks {}", ranks.join(", ")),
    }
}

impl Job {
    /// Puts `entry` in the place of rank `rank`. The process that held it (another
    /// connection) is set aside, unless it learned its number at a newer epoch than
    /// `entry`, which is then set aside instead.
    fn place(&mut self, rank: Rank, entry: RankEntry) {
        self.set_aside.remove(&entry.conn);
        if self
            .ranks
            .get(&rank)
            .is_some_and(|held| held.conn != entry.conn && held.epoch > entry.epoch)
        {
            self.set_aside.insert(entry.conn, (rank, entry));
            return;
        }
        let conn = entry.conn;
        if let Some(old) = self.ranks.insert(rank, entry) {
            if old.conn != conn {
                self.set_aside.insert(old.conn, (rank, old));
            }
        }
    }

    /// The job has `size` ranks from epoch `epoch` on (if that is newer than what is
    /// known): processes holding numbers beyond it left in a shrink and are set aside.
    /// Returns the numbers that were dropped.
    fn resized(&mut self, size: u32, epoch: u64) -> Vec<Rank> {
        if epoch < self.size_epoch {
            return Vec::new();
        }
        self.size_epoch = epoch;
        self.size = size;
        let beyond: Vec<Rank> = self.ranks.range(Rank(size)..).map(|(r, _)| *r).collect();
        for rank in &beyond {
            if let Some(entry) = self.ranks.remove(rank) {
                self.set_aside.insert(entry.conn, (*rank, entry));
            }
        }
        beyond
    }
}

fn rank_range(size: u32) -> String {
    match size {
        0 => "none".to_owned(),
        1 => "0".to_owned(),
        n => format!("0-{}", n - 1),
    }
}

fn bad(message: impl Into<String>) -> FromDaemon {
    error(ErrorKind::BadMessage, message)
}

fn error(kind: ErrorKind, message: impl Into<String>) -> FromDaemon {
    FromDaemon::Error {
        kind,
        message: message.into(),
    }
}

fn message_name(message: &ToDaemon) -> &'static str {
    match message {
        ToDaemon::Hello { .. } => "Hello",
        ToDaemon::Register { .. } => "Register",
        ToDaemon::Progress { .. } => "Progress",
        ToDaemon::ReconfigurationFinished { .. } => "ReconfigurationFinished",
        ToDaemon::ReconfigurationCancelled { .. } => "ReconfigurationCancelled",
        ToDaemon::QueryStatus => "QueryStatus",
        ToDaemon::Profile(_) => "Profile",
        ToDaemon::QueryStats => "QueryStats",
        ToDaemon::Migrate { .. } => "Migrate",
        ToDaemon::Renumbered { .. } => "Renumbered",
    }
}

impl Registry {
    /// A core for the daemon of `host`, process `pid`, started at `now`.
    ///
    /// Request ids count up from `request_id_seed` (0 is skipped: it means "no request" to
    /// the ranks); the driver seeds it with [`request_id_seed`], a random number, so that
    /// ids of different daemons do not collide. Tests pass a fixed seed.
    pub fn new(
        config: Config,
        host: HostName,
        pid: u32,
        now: Instant,
        request_id_seed: u64,
    ) -> Self {
        Self {
            host,
            pid,
            started: now,
            next_conn: 0,
            next_request: request_id_seed.max(1),
            conns: HashMap::new(),
            jobs: BTreeMap::new(),
            outputs: VecDeque::new(),
            stats: Book::new(config.stats_period),
            refusals_log: LogLimit::default(),
            refused_connections: 0,
            config,
        }
    }

    // ----- getters -----

    /// Connections refused since the daemon started because it already served
    /// `max_connections`.
    pub fn refused_connections(&self) -> u64 {
        self.refused_connections
    }

    /// Host name of the node.
    pub fn host(&self) -> &HostName {
        &self.host
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The profile of the node and its ranks, as sent in [`FromDaemon::Stats`]: each
    /// registered rank's latest report with its rates over the last closed stats period.
    /// A rank that is stalled at `now` (see [`RankStatus::stalled`]) shows zeros.
    pub fn stats(&self, now: Instant) -> pcm_proto::NodeStats {
        stats::node_stats(self.host.clone(), &self.stats, self.stats_view(now))
    }

    /// Registered ranks, by job, for [`Registry::stats`].
    fn stats_view(&self, now: Instant) -> Vec<stats::JobView<'_>> {
        self.jobs
            .iter()
            .map(|(id, job)| stats::JobView {
                job: id,
                app: &job.app,
                size: job.size,
                ranks: job
                    .ranks
                    .iter()
                    .map(|(rank, r)| stats::RankView {
                        rank: *rank,
                        host: &r.host,
                        pid: r.pid,
                        replacement: r.replacement,
                        stalled: r.stalled(now),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Number of open connections the core knows.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The daemon's view of its node at `now`, as sent in [`FromDaemon::Status`].
    pub fn status(&self, now: Instant) -> DaemonStatus {
        let jobs = self
            .jobs
            .iter()
            .map(|(id, job)| JobStatus {
                job: id.clone(),
                app: job.app.clone(),
                size: job.size,
                ranks: job
                    .ranks
                    .iter()
                    .map(|(rank, r)| {
                        let stalled = r.stalled(now);
                        RankStatus {
                            rank: *rank,
                            host: r.host.clone(),
                            pid: r.pid,
                            iteration: r.iteration,
                            // The last rate of a rank that stopped reporting is history,
                            // not its speed.
                            iterations_per_second: if stalled { 0.0 } else { r.rate },
                            replacement: r.replacement,
                            stalled,
                            silent_s: r.silent(now).as_secs_f64(),
                        }
                    })
                    .collect(),
                in_flight: job.in_flight.as_ref().map(|f| f.request),
                cancelling: job.in_flight.as_ref().is_some_and(|f| f.cancelling),
                migrations: job.migrations,
                cancelled: job.cancelled,
                failed: job.failed,
                malleable: self.stats.malleability(id, job.ranks.keys().copied()),
            })
            .collect();
        DaemonStatus {
            host: self.host.clone(),
            pid: self.pid,
            uptime_s: now.saturating_duration_since(self.started).as_secs_f64(),
            jobs,
        }
    }

    // ----- inputs -----

    /// A client connected. Returns its id; if the daemon is full, an error and a close are
    /// queued for it at once.
    pub fn handle_connected(&mut self, now: Instant) -> ConnId {
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        if self.conns.len() >= self.config.max_connections {
            self.refused_connections += 1;
            if let Some(suppressed) = self.refusals_log.check("full", now) {
                tracing::warn!(
                    %conn,
                    max = self.config.max_connections,
                    "refusing connection: too many connections{}",
                    log_limit::suffix(suppressed)
                );
            }
            self.send(
                conn,
                bad(format!(
                    "this daemon already serves {} connections, its limit; try again later",
                    self.config.max_connections
                )),
            );
            self.outputs.push_back(Output::Close { conn });
            return conn;
        }
        self.conns.insert(
            conn,
            ConnState::AwaitingHello {
                deadline: now + self.config.hello_timeout,
            },
        );
        conn
    }

    /// A connection ended (end of stream, I/O error, or the driver gave up on it). Unknown
    /// or already closed connections are ignored.
    pub fn handle_disconnected(&mut self, now: Instant, conn: ConnId) {
        let Some(state) = self.conns.remove(&conn) else {
            return;
        };
        self.forget(now, conn, state);
    }

    /// The connection's byte stream could not be framed or decoded: the stream is out of
    /// step, so an error is sent and the connection closed.
    pub fn handle_frame_error(&mut self, now: Instant, conn: ConnId, err: &FrameError) {
        if !self.conns.contains_key(&conn) {
            return;
        }
        tracing::debug!(%conn, %err, "closing connection after a frame error");
        self.send(conn, bad(format!("{err}; closing the connection")));
        self.close(now, conn);
    }

    /// A message arrived on `conn`.
    pub fn handle_message(&mut self, now: Instant, conn: ConnId, message: ToDaemon) {
        let Some(state) = self.conns.get(&conn) else {
            return;
        };
        match (state, message) {
            (ConnState::AwaitingHello { .. }, ToDaemon::Hello { version, client }) => {
                if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) {
                    self.send(
                        conn,
                        error(
                            ErrorKind::VersionMismatch,
                            format!(
                                "client speaks protocol v{version}, this daemon speaks v{MIN_PROTOCOL_VERSION} to v{PROTOCOL_VERSION}"
                            ),
                        ),
                    );
                    self.close(now, conn);
                    return;
                }
                let new_state = match client {
                    ClientKind::Rank => ConnState::Rank {
                        registered: None,
                        version,
                    },
                    ClientKind::Controller => ConnState::Controller,
                };
                self.conns.insert(conn, new_state);
                self.send(
                    conn,
                    FromDaemon::Welcome {
                        version: PROTOCOL_VERSION,
                        host: self.host.clone(),
                    },
                );
            }
            (ConnState::AwaitingHello { .. }, other) => {
                self.send(
                    conn,
                    bad(format!(
                        "expected Hello as the first message, got {}; closing the connection",
                        message_name(&other)
                    )),
                );
                self.close(now, conn);
            }
            (_, ToDaemon::Hello { .. }) => {
                self.send(conn, bad("Hello was already received on this connection"));
            }
            (
                ConnState::Rank {
                    registered,
                    version,
                },
                message,
            ) => {
                let (registered, version) = (registered.clone(), *version);
                self.handle_rank_message(now, conn, registered, version, message);
            }
            (ConnState::Controller, message) => self.handle_controller_message(now, conn, message),
        }
    }

    /// A stats period has ended (the driver calls this every [`Config::stats_period`]):
    /// per-rank rates are recomputed, and `load`, the node's load sampled by the driver (if
    /// it could be), is recorded.
    pub fn handle_stats_tick(&mut self, now: Instant, load: Option<pcm_proto::NodeLoad>) {
        let _ = now;
        self.stats.handle_tick(load);
    }

    /// Time has passed: expires Hello and in-flight deadlines, and the wait for the
    /// replacements of a job whose every rank here left, due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let late: Vec<ConnId> = self
            .conns
            .iter()
            .filter_map(|(conn, state)| match state {
                ConnState::AwaitingHello { deadline } if *deadline <= now => Some(*conn),
                _ => None,
            })
            .collect();
        for conn in late {
            self.send(
                conn,
                bad(format!(
                    "no Hello within {} s; closing the connection",
                    self.config.hello_timeout.as_secs_f64()
                )),
            );
            self.close(now, conn);
        }
        // A request past its deadline is withdrawn, not forgotten: the ranks that hold it
        // may still start it (a stopped rank resumes), so it stays in flight until one of
        // them withdraws it or reports how it ended, and every counter follows the job.
        let mut expired = Vec::new();
        for (id, job) in &mut self.jobs {
            if let Some(flight) = &mut job.in_flight {
                if !flight.cancelling && flight.deadline <= now {
                    flight.cancelling = true;
                    expired.push((id.clone(), flight.request, flight.holders.clone()));
                }
            }
        }
        for (job, request, holders) in expired {
            if holders.is_empty() {
                let reason = self.missed_deadline(
                    &job,
                    request,
                    "no rank that received it is registered any more",
                );
                self.end_flight(&job, request, Outcome::Cancelled { reason });
                continue;
            }
            tracing::warn!(%request, %job, "reconfiguration missed its deadline; asking the ranks to withdraw it");
            for holder in holders {
                self.send(holder, FromDaemon::CancelReconfiguration { request });
            }
        }
        let vacated: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, job)| job.ranks.is_empty() && job.vacant_until.is_some_and(|t| t <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for job in vacated {
            self.remove_job(&job);
        }
    }

    /// Why a request that missed its deadline ended, for people.
    fn missed_deadline(&self, job: &JobId, request: RequestId, what: &str) -> String {
        let moves = self
            .jobs
            .get(job)
            .and_then(|j| j.in_flight.as_ref())
            .filter(|f| f.request == request)
            .map_or_else(String::new, |f| {
                pcm_proto::describe_request(&f.moves, f.resize.as_ref())
            });
        format!(
            "request {request} for job {job} ({moves}) did not start within {} s; {what}; nothing was moved",
            self.config.request_timeout.as_secs_f64()
        )
    }

    /// Ends the request in flight for `job` if it is `request`: counts it, and tells the
    /// waiter. Reports of requests no longer in flight are ignored.
    fn end_flight(&mut self, job_id: &JobId, request: RequestId, outcome: Outcome) {
        let host = self.host.clone();
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        if job.in_flight.as_ref().map(|f| f.request) != Some(request) {
            tracing::debug!(job = %job_id, %request, "ignoring the end of a request not in flight");
            return;
        }
        let Some(flight) = job.in_flight.take() else {
            return;
        };
        match &outcome {
            Outcome::Completed { placed, .. } => {
                job.migrations += 1;
                job.epoch = job.epoch.max(flight.epoch + 1);
                if let Some(resize) = &flight.resize {
                    // The ranks that stay tell their new numbers (`Renumbered`) right
                    // after this report; the width is known now.
                    for gone in job.resized(resize.ranks, flight.epoch + 1) {
                        self.stats.forget(job_id, gone);
                    }
                }
                // The ranks it placed on this host register here: until they do, the job
                // is not over when its last old process leaves. A replacement may have
                // registered before the end was reported.
                job.expected = placed
                    .iter()
                    .filter(|(rank, to)| {
                        *to == host
                            && !job
                                .ranks
                                .get(rank)
                                .is_some_and(|r| r.replacement && r.since >= flight.made)
                    })
                    .map(|(rank, _)| *rank)
                    .collect();
                tracing::info!(job = %job_id, %request, ?outcome, "reconfiguration finished");
            }
            Outcome::Cancelled { reason } => {
                job.cancelled += 1;
                tracing::warn!(job = %job_id, %request, "reconfiguration cancelled: {reason}");
            }
            // Among these: a replacement that stalled while starting, after which the job
            // ends (the reason names the rank, host and phase); worth a warning.
            other => {
                job.failed += 1;
                let reason = other.failure().unwrap_or_default();
                tracing::warn!(job = %job_id, %request, "reconfiguration failed: {reason}");
            }
        }
        if let Some(waiter) = flight.waiter {
            self.send(waiter, FromDaemon::MigrationFinished { request, outcome });
        }
    }

    // ----- outputs -----

    /// The next thing for the driver to do.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When [`Registry::handle_timeout`] must be called next, if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let hello = self.conns.values().filter_map(|s| match s {
            ConnState::AwaitingHello { deadline } => Some(*deadline),
            _ => None,
        });
        let flights = self.jobs.values().filter_map(|j| {
            j.in_flight
                .as_ref()
                .filter(|f| !f.cancelling)
                .map(|f| f.deadline)
        });
        let vacancies = self.jobs.values().filter_map(|j| j.vacant_until);
        hello.chain(flights).chain(vacancies).min()
    }

    // ----- internals -----

    fn send(&mut self, conn: ConnId, message: FromDaemon) {
        self.outputs.push_back(Output::Send { conn, message });
    }

    fn close(&mut self, now: Instant, conn: ConnId) {
        if let Some(state) = self.conns.remove(&conn) {
            self.forget(now, conn, state);
        }
        self.outputs.push_back(Output::Close { conn });
    }

    /// Drops whatever `conn` stood for: its rank registration or its waits.
    fn forget(&mut self, now: Instant, conn: ConnId, state: ConnState) {
        match state {
            ConnState::AwaitingHello { .. } => {}
            ConnState::Controller => {
                for job in self.jobs.values_mut() {
                    if let Some(flight) = &mut job.in_flight {
                        if flight.waiter == Some(conn) {
                            flight.waiter = None;
                        }
                    }
                }
            }
            ConnState::Rank {
                registered: None, ..
            } => {}
            ConnState::Rank {
                registered: Some((job_id, rank)),
                ..
            } => self.unregister(now, conn, &job_id, rank),
        }
    }

    fn unregister(&mut self, now: Instant, conn: ConnId, job_id: &JobId, rank: Rank) {
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        // A replacement may already have taken over the rank; leave it alone then.
        if job.ranks.get(&rank).is_some_and(|r| r.conn == conn) {
            job.ranks.remove(&rank);
            self.stats.forget(job_id, rank);
            tracing::info!(job = %job_id, %rank, "rank unregistered");
        } else if job.set_aside.remove(&conn).is_some() {
            tracing::debug!(job = %job_id, %rank, "a process that left the job in a resize disconnected");
        }
        let mut orphaned = None;
        if let Some(flight) = &mut job.in_flight {
            flight.holders.retain(|h| *h != conn);
            // Being withdrawn, and nobody left here who could withdraw it or report its
            // end: what became of it cannot be known from here.
            if flight.cancelling && flight.holders.is_empty() && !job.ranks.is_empty() {
                orphaned = Some(flight.request);
            }
        }
        if let Some(request) = orphaned {
            let reason = self.missed_deadline(
                job_id,
                request,
                "every rank that received it disconnected before withdrawing it or reporting its end, so whether it ran is not known here",
            );
            self.end_flight(job_id, request, Outcome::Failed { reason });
            return;
        }
        let grace = self.config.replacement_grace;
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        // Processes set aside in a resize are still the job's until they leave.
        if !job.ranks.is_empty() || !job.set_aside.is_empty() {
            return;
        }
        // A move of every rank: the old processes may leave before their replacements
        // register (and report its end). Keep the job, counters and request, for them.
        if job.in_flight.is_some() || !job.expected.is_empty() {
            if job.vacant_until.is_none() {
                job.vacant_until = Some(now + grace);
                tracing::info!(
                    job = %job_id,
                    "every rank of the job here left during a reconfiguration; keeping it {} s for their replacements",
                    grace.as_secs_f64()
                );
            }
            return;
        }
        self.remove_job(job_id);
    }

    /// Forgets `job_id`, which has no ranks left here; a request still in flight fails, and
    /// its waiter is told.
    fn remove_job(&mut self, job_id: &JobId) {
        let Some(job) = self.jobs.remove(job_id) else {
            return;
        };
        tracing::info!(job = %job_id, "job has no ranks left here");
        if let Some(flight) = job.in_flight {
            let waited = if job.vacant_until.is_some() {
                format!(
                    " and no replacement registered within {} s",
                    self.config.replacement_grace.as_secs_f64()
                )
            } else {
                String::new()
            };
            let reason = format!(
                "all ranks of job {job_id} disconnected during the reconfiguration ({}){waited}: \
                 the job ended, or its replacement died while starting",
                pcm_proto::describe_request(&flight.moves, flight.resize.as_ref())
            );
            tracing::warn!(request = %flight.request, job = %job_id, "{reason}");
            if let Some(waiter) = flight.waiter {
                self.send(
                    waiter,
                    FromDaemon::MigrationFinished {
                        request: flight.request,
                        outcome: Outcome::Failed { reason },
                    },
                );
            }
        }
    }

    fn handle_rank_message(
        &mut self,
        now: Instant,
        conn: ConnId,
        registered: Option<(JobId, Rank)>,
        version: u32,
        message: ToDaemon,
    ) {
        match (registered, message) {
            (
                None,
                ToDaemon::Register {
                    job,
                    app,
                    rank,
                    size,
                    host,
                    pid,
                    replacement,
                    reconfigurations,
                },
            ) => self.register(
                now,
                conn,
                version,
                job,
                app,
                rank,
                size,
                host,
                pid,
                replacement,
                reconfigurations,
            ),
            (Some((job, rank)), ToDaemon::Register { .. }) => {
                self.send(
                    conn,
                    bad(format!(
                        "this connection is already registered as rank {rank} of job {job}"
                    )),
                );
            }
            (
                Some((job, rank)),
                ToDaemon::Progress {
                    iteration,
                    reconfigurations,
                },
            ) => {
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.epoch = j.epoch.max(reconfigurations);
                }
                if let Some(entry) = self.rank_entry(&job, rank, conn) {
                    entry.last_report = now;
                    if let Some((then, before)) = entry.last_progress {
                        let dt = now.saturating_duration_since(then).as_secs_f64();
                        if dt > 0.0 {
                            entry.rate = iteration.saturating_sub(before) as f64 / dt;
                        }
                    }
                    if entry.last_progress.is_none_or(|(then, _)| now > then) {
                        entry.last_progress = Some((now, iteration));
                    }
                    entry.iteration = iteration;
                }
            }
            (Some((job, rank)), ToDaemon::ReconfigurationFinished { request, outcome }) => {
                if let Some(entry) = self.rank_entry(&job, rank, conn) {
                    entry.last_report = now;
                }
                tracing::debug!(job = %job, %rank, %request, "end of a reconfiguration reported");
                self.end_flight(&job, request, outcome);
            }
            (Some((job, rank)), ToDaemon::ReconfigurationCancelled { request }) => {
                if let Some(entry) = self.rank_entry(&job, rank, conn) {
                    entry.last_report = now;
                }
                tracing::info!(job = %job, %rank, %request, "rank withdrew the request");
                let reason = self.missed_deadline(
                    &job,
                    request,
                    &format!(
                        "rank {rank} withdrew it before the job started it, so it will not run"
                    ),
                );
                self.end_flight(&job, request, Outcome::Cancelled { reason });
            }
            (Some((job, rank)), ToDaemon::Profile(profile)) => {
                if self.rank_entry(&job, rank, conn).is_some() {
                    // A profile carries the rank's progress too (ranks that send profiles
                    // send fewer progress reports).
                    let iteration = profile.iteration;
                    self.stats.handle_profile(&job, rank, profile);
                    let progress = ToDaemon::Progress {
                        iteration,
                        reconfigurations: 0,
                    };
                    self.handle_rank_message(now, conn, Some((job, rank)), version, progress);
                }
            }
            (
                Some((job, rank)),
                ToDaemon::Renumbered {
                    rank: new,
                    size,
                    reconfigurations,
                },
            ) => self.renumber(now, conn, version, &job, rank, new, size, reconfigurations),
            (
                None,
                other @ (ToDaemon::Progress { .. }
                | ToDaemon::ReconfigurationFinished { .. }
                | ToDaemon::ReconfigurationCancelled { .. }
                | ToDaemon::Profile(_)
                | ToDaemon::Renumbered { .. }),
            ) => {
                self.send(
                    conn,
                    bad(format!("{} before Register", message_name(&other))),
                );
            }
            (_, other) => {
                self.send(
                    conn,
                    bad(format!(
                        "{} is not valid on a rank connection",
                        message_name(&other)
                    )),
                );
            }
        }
    }

    /// The entry of `rank` in `job` if `conn` still owns it.
    fn rank_entry(&mut self, job: &JobId, rank: Rank, conn: ConnId) -> Option<&mut RankEntry> {
        self.jobs
            .get_mut(job)
            .and_then(|j| j.ranks.get_mut(&rank))
            .filter(|r| r.conn == conn)
    }

    /// Over-estimate of the encoded size of a status reply.
    fn status_size(&self) -> usize {
        let jobs: usize = self
            .jobs
            .iter()
            .map(|(id, job)| {
                let ranks: usize = job
                    .ranks
                    .values()
                    .map(|r| r.host.as_str().len() + RANK_STATUS_OVERHEAD)
                    .sum();
                id.as_str().len() + job.app.as_str().len() + JOB_STATUS_OVERHEAD + ranks
            })
            .sum();
        self.host.as_str().len() + JOB_STATUS_OVERHEAD + jobs
    }

    #[allow(clippy::too_many_arguments)]
    fn register(
        &mut self,
        now: Instant,
        conn: ConnId,
        version: u32,
        job_id: JobId,
        app: AppName,
        rank: Rank,
        size: u32,
        host: HostName,
        pid: u32,
        replacement: bool,
        reconfigurations: u64,
    ) {
        if rank.0 >= size {
            self.send(
                conn,
                bad(format!(
                    "rank {rank} does not exist in a job of {size} ranks ({})",
                    rank_range(size)
                )),
            );
            return;
        }
        let growth = host.as_str().len()
            + RANK_STATUS_OVERHEAD
            + if self.jobs.contains_key(&job_id) {
                0
            } else {
                job_id.as_str().len() + app.as_str().len() + JOB_STATUS_OVERHEAD
            };
        if self.status_size() + growth > STATUS_BUDGET {
            self.send(
                conn,
                bad(format!(
                    "cannot register rank {rank} of job {job_id}: this daemon's status would exceed the {} byte frame limit",
                    pcm_proto::MAX_FRAME_LEN
                )),
            );
            return;
        }
        let job = self.jobs.entry(job_id.clone()).or_insert_with(|| Job {
            app: app.clone(),
            size,
            ranks: BTreeMap::new(),
            in_flight: None,
            migrations: 0,
            cancelled: 0,
            failed: 0,
            epoch: 0,
            size_epoch: reconfigurations,
            set_aside: HashMap::new(),
            expected: std::collections::BTreeSet::new(),
            vacant_until: None,
        });
        // A process of a newer epoch that names another width joined after a resize
        // (added by it, or replacing a rank moved with it) before the ranks that stay
        // told their new numbers: it is right.
        let resized = job.size != size && reconfigurations > job.size_epoch;
        if job.app != app || (job.size != size && !resized) {
            let message = format!(
                "job {job_id} is registered here as application {} with {} ranks (after {} reconfigurations), but rank {rank} says application {app} with {size} ranks (after {reconfigurations})",
                job.app, job.size, job.size_epoch
            );
            self.send(conn, bad(message));
            return;
        }
        if resized {
            tracing::info!(job = %job_id, from = job.size, to = size, "job resized (learned from a new rank's registration)");
            for gone in job.resized(size, reconfigurations) {
                self.stats.forget(&job_id, gone);
            }
        }
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        job.epoch = job.epoch.max(reconfigurations);
        job.expected.remove(&rank);
        job.vacant_until = None;
        let entry = RankEntry {
            conn,
            host: host.clone(),
            pid,
            iteration: 0,
            last_progress: None,
            last_report: now,
            rate: 0.0,
            replacement,
            since: now,
            epoch: reconfigurations,
            version,
        };
        if let Some(old) = job.ranks.get(&rank) {
            // A replacement registered before its predecessor's disconnect was seen; the
            // newer process owns the rank from now on. The old connection stays registered
            // until it closes, though: a departing rank reports the end of the
            // reconfiguration it left in after its replacement registered (its link writes
            // at its next tick), and when every rank moved that report is the only one
            // this daemon gets from the ranks that held the request. Its other messages no
            // longer touch the rank (see `rank_entry`). After a resize the old process may
            // also be a rank that stays and has not told its new number yet: it is set
            // aside, not forgotten, until it does.
            tracing::info!(job = %job_id, %rank, old_pid = old.pid, new_pid = pid, old_conn = %old.conn, "rank re-registered by a new process");
        }
        job.place(rank, entry);
        tracing::info!(job = %job_id, %rank, %host, pid, replacement, "rank registered");
        self.conns.insert(
            conn,
            ConnState::Rank {
                registered: Some((job_id, rank)),
                version,
            },
        );
        self.send(conn, FromDaemon::Registered);
    }

    /// A rank that stayed in a resize tells its new number `new` (it was `old`) and the
    /// job's new width.
    #[allow(clippy::too_many_arguments)]
    fn renumber(
        &mut self,
        now: Instant,
        conn: ConnId,
        version: u32,
        job_id: &JobId,
        old: Rank,
        new: Rank,
        size: u32,
        reconfigurations: u64,
    ) {
        if new.0 >= size {
            self.send(
                conn,
                bad(format!(
                    "rank {new} does not exist in a job of {size} ranks ({})",
                    rank_range(size)
                )),
            );
            return;
        }
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        // The process's entry: in its place, or set aside (another process took its old
        // number first). Gone if a newer process of its rank replaced it meanwhile.
        let placed = job.ranks.get(&old).is_some_and(|held| held.conn == conn);
        let entry = if placed {
            job.ranks.remove(&old)
        } else {
            job.set_aside.remove(&conn).map(|(_, entry)| entry)
        };
        let Some(mut entry) = entry else {
            tracing::debug!(job = %job_id, %old, %new, "ignoring the new number of a process that no longer holds a rank");
            return;
        };
        entry.last_report = now;
        entry.epoch = entry.epoch.max(reconfigurations);
        job.epoch = job.epoch.max(reconfigurations);
        let mut forgotten = Vec::new();
        if job.size != size {
            if reconfigurations >= job.size_epoch {
                tracing::info!(job = %job_id, from = job.size, to = size, "job resized");
            }
            forgotten = job.resized(size, reconfigurations);
        } else {
            job.size_epoch = job.size_epoch.max(reconfigurations);
        }
        job.place(new, entry);
        if old != new {
            tracing::info!(job = %job_id, %old, %new, size, "rank renumbered by a resize");
        }
        for gone in forgotten {
            self.stats.forget(job_id, gone);
        }
        // The figures go with the process to its new number; those of a process set aside
        // were overwritten already (its next report brings them back).
        if placed {
            self.stats.renumber(job_id, old, new);
        } else {
            self.stats.forget(job_id, new);
        }
        self.conns.insert(
            conn,
            ConnState::Rank {
                registered: Some((job_id.clone(), new)),
                version,
            },
        );
    }

    fn handle_controller_message(&mut self, now: Instant, conn: ConnId, message: ToDaemon) {
        match message {
            ToDaemon::QueryStatus => {
                let status = self.status(now);
                self.send(conn, FromDaemon::Status(status));
            }
            ToDaemon::QueryStats => {
                let stats = self.stats(now);
                self.send(conn, FromDaemon::Stats(stats));
            }
            ToDaemon::Migrate {
                job,
                moves,
                wait,
                resize,
            } => match self.migrate(now, conn, job, moves, resize, wait) {
                Ok(request) => self.send(conn, FromDaemon::MigrationAccepted { request }),
                Err(refusal) => self.send(conn, refusal),
            },
            other => self.send(
                conn,
                bad(format!(
                    "{} is not valid on a controller connection",
                    message_name(&other)
                )),
            ),
        }
    }

    fn known_jobs(&self) -> String {
        let jobs: Vec<&str> = self.jobs.keys().map(JobId::as_str).collect();
        jobs.join(", ")
    }

    fn migrate(
        &mut self,
        now: Instant,
        conn: ConnId,
        job: Option<JobId>,
        moves: Vec<Move>,
        resize: Option<Resize>,
        wait: bool,
    ) -> Result<RequestId, FromDaemon> {
        let job_id = match job {
            Some(job) => job,
            None => match self.jobs.len() {
                1 => self.jobs.keys().next().cloned().ok_or_else(|| bad("no job"))?,
                0 => {
                    return Err(error(
                        ErrorKind::UnknownJob,
                        format!(
                            "no job has ranks registered with this daemon on host {}; run the command on a node of the job",
                            self.host
                        ),
                    ))
                }
                n => {
                    return Err(error(
                        ErrorKind::UnknownJob,
                        format!(
                            "no job given and {n} jobs have ranks registered with this daemon on host {} ({}); name one with --job",
                            self.host,
                            self.known_jobs()
                        ),
                    ))
                }
            },
        };
        let Some(job) = self.jobs.get(&job_id) else {
            let mut message = format!(
                "job {job_id} has no ranks registered with this daemon on host {}; run the command on a node of the job",
                self.host
            );
            if !self.jobs.is_empty() {
                let _ = write!(message, " (jobs registered here: {})", self.known_jobs());
            }
            return Err(error(ErrorKind::UnknownJob, message));
        };
        if moves.is_empty() && resize.is_none() {
            return Err(bad(format!(
                "migration request for job {job_id} names no ranks to move"
            )));
        }
        if let Some(resize) = &resize {
            if resize.ranks == 0 {
                return Err(bad(format!(
                    "job {job_id} cannot be resized to 0 ranks: a job needs at least one rank (it has {} now)",
                    job.size
                )));
            }
            // A rank of an older protocol would drop the resize and move only the ranks.
            if let Some((rank, old)) = job
                .ranks
                .iter()
                .find(|(_, r)| r.version < RESIZE_PROTOCOL_VERSION)
            {
                return Err(error(
                    ErrorKind::Unsupported,
                    format!(
                        "job {job_id} cannot be resized: its rank {rank} (pid {}) speaks pcmd protocol v{}, which has no resizes (v{RESIZE_PROTOCOL_VERSION} has); relink the application with a newer PCM",
                        old.pid, old.version
                    ),
                ));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for m in &moves {
            if m.rank.0 >= job.size {
                return Err(error(
                    ErrorKind::UnknownRank,
                    format!(
                        "rank {} does not exist: job {job_id} has {} ranks ({})",
                        m.rank,
                        job.size,
                        rank_range(job.size)
                    ),
                ));
            }
            if !seen.insert(m.rank) {
                return Err(bad(format!(
                    "rank {} appears more than once in the migration request",
                    m.rank
                )));
            }
        }
        if let Some(flight) = &job.in_flight {
            return Err(error(
                ErrorKind::Busy,
                format!(
                    "job {job_id} already has reconfiguration {} in flight ({}); wait for it to finish",
                    flight.request,
                    ranks_list(&flight.moves, flight.resize.as_ref())
                ),
            ));
        }
        let request = RequestId(self.next_request);
        self.next_request = self.next_request.wrapping_add(1).max(1);
        if job.ranks.is_empty() {
            return Err(error(
                ErrorKind::Busy,
                format!(
                    "every rank of job {job_id} here left in a reconfiguration and their replacements have not registered yet; try again in a moment"
                ),
            ));
        }
        let epoch = job.epoch;
        let holders: Vec<ConnId> = job.ranks.values().map(|r| r.conn).collect();
        for target in &holders {
            self.send(
                *target,
                FromDaemon::ReconfigurationRequested {
                    request,
                    moves: moves.clone(),
                    epoch,
                    resize: resize.clone(),
                },
            );
        }
        tracing::info!(job = %job_id, %request, what = %ranks_list(&moves, resize.as_ref()), wait, "reconfiguration requested");
        let deadline = now + self.config.request_timeout;
        if let Some(job) = self.jobs.get_mut(&job_id) {
            job.in_flight = Some(InFlight {
                request,
                moves,
                resize,
                made: now,
                deadline,
                waiter: wait.then_some(conn),
                epoch,
                holders,
                cancelling: false,
            });
        }
        Ok(request)
    }
}

/// A random request-id seed, never 0. Seeds from the start time collided for daemons
/// started in the same millisecond, and ids of a daemon started later always exceeded those
/// of an earlier one; random 64-bit seeds make ids of different daemons collide with odds
/// of about (requests made) / 2^64.
pub fn request_id_seed() -> u64 {
    rand::random::<u64>().max(1)
}

#[cfg(test)]
mod tests;
