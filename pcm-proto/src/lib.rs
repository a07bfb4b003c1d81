//! What the workspace's programs share, at the bottom of its crate graph: the wire protocol
//! of the PCM daemon (`pcmd`) and its blocking client ([`client`]), the checkpoint protocol
//! between pcmds ([`checkpoint`]), a PCM process's run events ([`run`]), the pool key
//! ([`pool_key`]), a node's given-back mark ([`given_back`]), rate-limited logging
//! ([`log_limit`]), the XDG places ([`UserDirs`]) and the names every layer uses
//! ([`HostName`], [`JobId`], [`Rank`]).
//!
//! # The pcmd wire protocol
//!
//! Every message that crosses a pcmd socket.
//! Three parties speak it over a local stream socket (a Unix socket, mode 0600):
//! - **ranks**: PCM-enabled MPI processes (the `pcm` crate) register with the daemon of
//!   their node, report progress, and receive reconfiguration requests;
//! - **the CLI** (`pcmd status`, `pcmd migrate`, `pcmd resize`) asks for status and requests
//!   migrations and resizes;
//! - **the daemon** (`pcmd serve`) answers both.
//!
//! Every frame is a 4-byte big-endian length followed by one CBOR-encoded message. Frames
//! longer than [`MAX_FRAME_LEN`] are refused before anything is allocated. The first frame a
//! client sends is [`ToDaemon::Hello`] carrying [`PROTOCOL_VERSION`]; a daemon that speaks
//! none of the versions from [`MIN_PROTOCOL_VERSION`] to its own answers with
//! [`ErrorKind::VersionMismatch`] and closes.
//!
//! The codec does no I/O of its own: [`encode`] turns a message into a frame and
//! [`FrameReader`] splits a byte stream into decoded messages, so the blocking client in the
//! ranks, the blocking controller client ([`client`]) and the async daemon share one codec.
//! Decoding arbitrary bytes never panics.

use std::fmt;

use serde::{Deserialize, Serialize};

pub mod checkpoint;
pub mod client;
pub mod given_back;
pub mod log_limit;
mod malleable;
mod path;
pub mod pool_key;
pub mod run;
mod types;
pub use malleable::{InvalidLimits, Malleability, SizeRule};
pub use path::{
    ensure_private_dir, read_private_file, socket_path, socket_template, xdg_dir, PrivateDirError,
    UserDirs, DAEMON_ENV,
};
pub use types::{AppName, HostName, InvalidName, JobId, Rank};

/// Version of this protocol; bumped on any incompatible change.
///
/// Version 3 added resizes: a request's `resize` ([`ToDaemon::Migrate`],
/// [`FromDaemon::ReconfigurationRequested`]) and [`ToDaemon::Renumbered`]. A field a
/// version-2 peer does not know it would ignore, and so drop the resize: a version-2 daemon
/// refuses a version-3 client at its `Hello` ([`ErrorKind::VersionMismatch`]), and a
/// version-3 daemon, which still serves version-2 ranks (they never resize), refuses to
/// deliver a resize to a job any of whose ranks on its node speaks version 2.
pub const PROTOCOL_VERSION: u32 = 3;

/// Oldest version a daemon of this version still serves (see [`PROTOCOL_VERSION`]).
pub const MIN_PROTOCOL_VERSION: u32 = 2;

/// The first version whose ranks carry out a request's `resize`.
pub const RESIZE_PROTOCOL_VERSION: u32 = 3;

/// Largest frame body accepted, in bytes (1 MiB). Status replies for thousands of ranks fit
/// comfortably; anything larger is a bug or an attack.
pub const MAX_FRAME_LEN: usize = 1 << 20;

/// Identifier of one reconfiguration request, never 0. Unique across daemons: each daemon
/// starts counting from a random 64-bit seed, so ids of two daemons collide only with odds of
/// about one in 2^64 per request; a request delivered twice is recognised and acted on once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// What kind of client opened a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientKind {
    /// A PCM-enabled MPI rank.
    Rank,
    /// The `pcmd` command-line tool (or another controller, such as an IOS agent).
    Controller,
}

/// One process to move: `rank` of the job, to `to` (an MPI host name) or, with `None`, to
/// the job's allocated host running the fewest of its processes (pcm's settings docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The rank that moves; it keeps its rank number on the new host.
    pub rank: Rank,
    /// Target host as the MPI runtime names it (a host of the hostfile), or any host.
    pub to: Option<HostName>,
}

/// A change of a job's width (see docs/malleability.md): to `ranks` ranks. Growing, `hosts`
/// are the hosts of the added processes, in order (repeated as needed; empty: the job's
/// allocated hosts running the fewest of its processes); shrinking, the hosts given back:
/// the ranks on them leave (empty: the highest ranks leave).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resize {
    /// The job's width after the resize.
    pub ranks: u32,
    /// Hosts of the added processes (growing) or given back (shrinking).
    #[serde(default)]
    pub hosts: Vec<HostName>,
}

impl std::fmt::Display for Resize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ranks", self.ranks)?;
        if !self.hosts.is_empty() {
            let hosts: Vec<&str> = self.hosts.iter().map(HostName::as_str).collect();
            write!(f, " ({})", hosts.join(", "))?;
        }
        Ok(())
    }
}

/// Describes a request for people: its moves ([`describe_moves`]), its resize, or both.
pub fn describe_request(moves: &[Move], resize: Option<&Resize>) -> String {
    match (moves.is_empty(), resize) {
        (true, Some(resize)) => format!("resize to {resize}"),
        (false, Some(resize)) => format!("{}, resize to {resize}", describe_moves(moves)),
        (_, None) => describe_moves(moves),
    }
}

/// Describes moves for people: "rank 1 to host-b, rank 2 to any host".
pub fn describe_moves(moves: &[Move]) -> String {
    if moves.is_empty() {
        return "(moves not known yet)".to_owned();
    }
    moves
        .iter()
        .map(|m| {
            format!(
                "rank {} to {}",
                m.rank,
                m.to.as_ref().map_or("any host", |h| h.as_str())
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Time spent in each phase of a reconfiguration, in microseconds: for each phase, the
/// slowest process's time (every process measures, and they agree on the maximum).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseTimings {
    /// Agreeing on the request and broadcasting the plan.
    pub agree_us: u64,
    /// `MPI_Comm_spawn` of the replacement processes.
    pub spawn_us: u64,
    /// Merging the spawn intercommunicator and splitting out the new world.
    pub merge_split_us: u64,
    /// Sending the departing ranks' stored state to their replacements.
    pub state_transfer_us: u64,
    /// Bytes of stored state moved in total.
    pub state_bytes: u64,
}

/// How a reconfiguration ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Every move was carried out (possibly in one reconfiguration with other requests
    /// the job held at the same status check).
    Completed {
        /// Iteration at which the job reconfigured.
        iteration: u64,
        /// Where the time went (the whole reconfiguration's).
        timings: PhaseTimings,
        /// Host of each rank this request moved, after the move, as the new process
        /// reports it.
        placed: Vec<(Rank, HostName)>,
    },
    /// Nothing was moved. Usually the job carries on as before; when a replacement stalled
    /// or died while starting and the reconfiguration missed its deadline
    /// (`PCM_RECONFIGURE_TIMEOUT`), the job is ending, and the reason says so.
    Failed {
        /// Why, in words that name the bad input.
        reason: String,
    },
    /// Nothing was moved and nothing will be: the daemon withdrew the request after its
    /// deadline ([`FromDaemon::CancelReconfiguration`]) before the job started it.
    Cancelled {
        /// Why, for people.
        reason: String,
    },
    /// Nothing was moved: a reconfiguration completed after the request was made (another
    /// daemon's request, or a scripted move) moved one of the ranks it names, so its moves
    /// no longer describe the job; or another daemon's request held at the same status
    /// check, agreed first (the higher id), moves one of them. (Or the job no longer
    /// remembers every reconfiguration since the request was made, the last 32; `by` is
    /// then the latest.)
    Superseded {
        /// The request that won, or `None` for a scripted move (`PCM_SCHEDULE`).
        by: Option<RequestId>,
        /// What the winner moved.
        moves: Vec<Move>,
        /// The winner's resize, if it resized the job: a resize renumbers the ranks and
        /// changes the width, so every request made before it is superseded.
        #[serde(default)]
        resize: Option<Resize>,
    },
}

impl Outcome {
    /// Whether every move was carried out.
    pub fn is_completed(&self) -> bool {
        matches!(self, Outcome::Completed { .. })
    }

    /// Why nothing was moved, in words, or `None` if the moves were carried out.
    pub fn failure(&self) -> Option<String> {
        match self {
            Outcome::Completed { .. } => None,
            Outcome::Failed { reason } => Some(reason.clone()),
            Outcome::Cancelled { reason } => Some(format!("cancelled: {reason}")),
            Outcome::Superseded { by, moves, resize } => Some(format!(
                "superseded by {} ({}), which the job carried out first; nothing of this \
                 request was done",
                by.map_or_else(|| "a scripted move".to_owned(), |r| format!("request {r}")),
                describe_request(moves, resize.as_ref())
            )),
        }
    }
}

/// Everything a client sends to a daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToDaemon {
    /// First frame of every connection.
    Hello {
        /// The client's [`PROTOCOL_VERSION`].
        version: u32,
        /// Who is speaking.
        client: ClientKind,
    },
    /// A rank announces itself (rank connections only, once, right after `Hello`).
    Register {
        /// Job the rank belongs to.
        job: JobId,
        /// Application name given to `Pcm::init`.
        app: AppName,
        /// The rank's number in the job's world.
        rank: Rank,
        /// Number of ranks in the job.
        size: u32,
        /// Host name of the process, as `gethostname` reports it.
        host: HostName,
        /// Operating-system process id.
        pid: u32,
        /// Whether this process replaced an earlier one (it was spawned by a migration).
        replacement: bool,
        /// Reconfigurations the job has completed so far (its epoch; see
        /// [`FromDaemon::ReconfigurationRequested`]).
        #[serde(default)]
        reconfigurations: u64,
    },
    /// A rank reports how far it has come (sent about once a second).
    Progress {
        /// Iterations completed, counted by status calls.
        iteration: u64,
        /// Reconfigurations the job has completed so far.
        #[serde(default)]
        reconfigurations: u64,
    },
    /// A rank answers [`FromDaemon::CancelReconfiguration`]: it withdrew the request before
    /// the job started it, and the job will drop it. A rank that had already started it
    /// sends nothing and later reports [`ToDaemon::ReconfigurationFinished`].
    ReconfigurationCancelled {
        /// The request withdrawn.
        request: RequestId,
    },
    /// A rank reports that a reconfiguration request it received has ended.
    ReconfigurationFinished {
        /// The request this concerns.
        request: RequestId,
        /// What happened.
        outcome: Outcome,
    },
    /// A controller asks for the daemon's view of its node.
    QueryStatus,
    /// A rank reports its cumulative measurements (sent with `Progress`, about once a
    /// second). Counters continue across migrations: a replacement starts from its
    /// predecessor's values.
    Profile(RankProfile),
    /// A controller asks for the daemon's profile of its node and its ranks.
    QueryStats,
    /// A controller asks for ranks to be moved, for the job to be resized, or both (`pcmd
    /// migrate`, `pcmd resize`).
    Migrate {
        /// Job to act on; may be left out when the daemon knows exactly one job.
        job: Option<JobId>,
        /// The moves, all carried out in one reconfiguration (with the resize, if any).
        moves: Vec<Move>,
        /// Whether to answer only once the reconfiguration has ended
        /// ([`FromDaemon::MigrationFinished`]) rather than when it is accepted.
        wait: bool,
        /// A new width for the job, carried out in the same reconfiguration as the moves
        /// (protocol version 3; see [`PROTOCOL_VERSION`]).
        #[serde(default)]
        resize: Option<Resize>,
    },
    /// A rank reports that a resize renumbered it: from now on it is rank `rank` of a job
    /// of `size` ranks, which has completed `reconfigurations` reconfigurations (sent by
    /// every rank that stays in a resize, renumbered or not, right after it; protocol
    /// version 3).
    Renumbered {
        /// The rank's new number.
        rank: Rank,
        /// The job's new width.
        size: u32,
        /// Reconfigurations the job has completed, the resize included.
        reconfigurations: u64,
    },
}

/// Everything a daemon sends to a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromDaemon {
    /// Answer to `Hello`: the connection is open.
    Welcome {
        /// The daemon's [`PROTOCOL_VERSION`].
        version: u32,
        /// Host name of the daemon's node.
        host: HostName,
    },
    /// Answer to `Register`.
    Registered,
    /// Pushed to every rank of a job on this node: the job must reconfigure.
    ReconfigurationRequested {
        /// Identifier to report back in `ReconfigurationFinished`.
        request: RequestId,
        /// What to move.
        moves: Vec<Move>,
        /// Reconfigurations the job had completed when the request was made, as far as the
        /// daemon knows. A job that has completed more by the time it agrees on the request
        /// refuses it ([`Outcome::Superseded`]): two requests sent at once to two daemons
        /// never both run.
        #[serde(default)]
        epoch: u64,
        /// A new width for the job, carried out with the moves (protocol version 3; a
        /// daemon never sends one to a rank of an older version).
        #[serde(default)]
        resize: Option<Resize>,
    },
    /// Pushed to the ranks that received a request which missed its deadline: withdraw it
    /// unless it has started. Answered by [`ToDaemon::ReconfigurationCancelled`].
    CancelReconfiguration {
        /// The request to withdraw.
        request: RequestId,
    },
    /// Answer to `QueryStatus`.
    Status(DaemonStatus),
    /// Answer to `QueryStats`.
    Stats(NodeStats),
    /// Answer to `Migrate`: the request was accepted and delivered to the job's ranks.
    MigrationAccepted {
        /// Identifier of the new request.
        request: RequestId,
    },
    /// Answer to `Migrate` with `wait`: the reconfiguration has ended.
    MigrationFinished {
        /// The request this concerns.
        request: RequestId,
        /// What happened.
        outcome: Outcome,
    },
    /// The last message was refused; the connection stays usable unless `kind` says otherwise.
    Error {
        /// Machine-readable category.
        kind: ErrorKind,
        /// Human-readable explanation naming the bad input.
        message: String,
    },
}

/// Categories of [`FromDaemon::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// The client speaks another protocol version; the daemon closes the connection.
    VersionMismatch,
    /// The frame could not be decoded, or the message is not valid at this point.
    BadMessage,
    /// The job named (or implied) is not registered with this daemon.
    UnknownJob,
    /// A rank named does not exist in the job.
    UnknownRank,
    /// The job already has a reconfiguration in flight.
    Busy,
    /// The request was accepted but did not finish in time.
    TimedOut,
    /// The job cannot do what was asked: a resize of a job whose ranks speak a protocol
    /// version without resizes (sent only to clients of version 3 or later).
    Unsupported,
}

/// A daemon's view of its node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatus {
    /// Host name of the daemon's node.
    pub host: HostName,
    /// Process id of the daemon.
    pub pid: u32,
    /// Seconds since the daemon started.
    pub uptime_s: f64,
    /// Jobs with at least one rank registered here, by job id.
    pub jobs: Vec<JobStatus>,
}

impl DaemonStatus {
    /// The registered process of `rank`, in whichever job holds it (tests and tools that
    /// watch one job per daemon).
    pub fn rank(&self, rank: Rank) -> Option<&RankStatus> {
        self.jobs
            .iter()
            .flat_map(|j| j.ranks.iter())
            .find(|r| r.rank == rank)
    }
}

/// One job as seen by one daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    /// The job.
    pub job: JobId,
    /// Its application name.
    pub app: AppName,
    /// Number of ranks in the whole job.
    pub size: u32,
    /// Ranks of the job registered with this daemon, ordered by rank.
    pub ranks: Vec<RankStatus>,
    /// Reconfiguration in flight, if any (also while it is being cancelled).
    pub in_flight: Option<RequestId>,
    /// Whether the request in flight missed its deadline and is being cancelled: the daemon
    /// waits for the job to withdraw it or to report how it ended.
    #[serde(default)]
    pub cancelling: bool,
    /// Requests made through this daemon that the job completed.
    pub migrations: u64,
    /// Requests made through this daemon that the job withdrew after their deadline.
    #[serde(default)]
    pub cancelled: u64,
    /// Requests made through this daemon that ended with nothing moved (failed or
    /// superseded).
    #[serde(default)]
    pub failed: u64,
    /// The job's resize limits, as in [`JobStats::malleable`]. Absent from an older
    /// daemon's answer: `None`.
    #[serde(default)]
    pub malleable: Option<Malleability>,
}

/// One registered rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankStatus {
    /// Rank number.
    pub rank: Rank,
    /// Host the process runs on.
    pub host: HostName,
    /// Process id.
    pub pid: u32,
    /// Last iteration reported.
    pub iteration: u64,
    /// Iterations per second over the last reporting period (0 when stalled).
    pub iterations_per_second: f64,
    /// Whether the process is a replacement spawned by a migration.
    pub replacement: bool,
    /// Whether the rank is stalled: its link has sent nothing for [`STALLED_AFTER_S`]
    /// seconds (the process is stopped, or hung outside MPI).
    #[serde(default)]
    pub stalled: bool,
    /// Seconds since the rank's last report.
    #[serde(default)]
    pub silent_s: f64,
}

/// Seconds without a report after which a rank counts as stalled. Ranks report about once a
/// second, even while they wait inside MPI, so three missed reports mean the process itself
/// does not run.
pub const STALLED_AFTER_S: f64 = 3.0;

/// Messages and bytes exchanged with one peer rank (point-to-point only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerTraffic {
    /// The peer's rank in the job's world.
    pub peer: Rank,
    /// Where the peer runs now (the job's placement as the rank knows it when it reports;
    /// the counts are over the rank's whole life, wherever the peer ran). Absent from older
    /// ranks' reports.
    #[serde(default)]
    pub host: Option<HostName>,
    /// Messages sent to the peer.
    pub sent_messages: u64,
    /// Payload bytes sent to the peer.
    pub sent_bytes: u64,
    /// Messages received from the peer.
    pub received_messages: u64,
    /// Payload bytes received from the peer.
    pub received_bytes: u64,
}

/// Collective operations a rank took part in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveTraffic {
    /// Collective calls made.
    pub calls: u64,
    /// Payload bytes this rank contributed (send side).
    pub bytes: u64,
}

/// Cumulative measurements of one rank, as the rank itself reports them. All counters start
/// when the rank's first process starts and carry over to replacements.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankProfile {
    /// Iterations completed (status calls).
    pub iteration: u64,
    /// Wall-clock time since the rank started, microseconds.
    pub wall_us: u64,
    /// CPU time (user + system) the rank's processes used, microseconds.
    pub cpu_us: u64,
    /// Wall-clock time spent inside MPI calls, microseconds.
    pub mpi_us: u64,
    /// Bytes in the last stored state (0 if nothing was stored yet).
    pub state_bytes: u64,
    /// Resident memory of the current process, bytes.
    pub rss_bytes: u64,
    /// Wall-clock time since the current process started (time resident on its host), us.
    pub resident_us: u64,
    /// Point-to-point traffic by peer rank, ordered by peer, peers with no traffic left out.
    pub traffic: Vec<PeerTraffic>,
    /// Collective traffic.
    pub collectives: CollectiveTraffic,
    /// The job's resize limits as the rank declared them ([`Malleability`], from
    /// `set_malleable`); `None`: not malleable (or not declared yet).
    ///
    /// Added without a protocol version bump: a report from an older rank has no such
    /// field and decodes as `None` (`serde(default)`), which is what that rank means (it
    /// cannot resize); an older daemon ignores the field. Nothing is lost either way that
    /// the older side could act on.
    #[serde(default)]
    pub malleable: Option<Malleability>,
    /// Where the job's rank 0 runs, as the rank knows the job's placement: the node whose
    /// agent decides the job's resizes (its *home*), so that an agent of another of its
    /// ranks can pass an idle node's offer there. `None` when unknown (an older rank, or a
    /// rank that reports before it knows the placement); added like `malleable`, without
    /// a version bump.
    #[serde(default)]
    pub home: Option<HostName>,
    /// The job's slowest rank's computing time, microseconds, summed over the job's status
    /// checks: at each check the ranks agree on the longest time any of them computed
    /// (wall time outside MPI) since the previous one, so every rank reports the same
    /// figure. Set against this rank's own computing time it tells whether a rank
    /// elsewhere holds the job back (a loaded node), which one rank's profile alone cannot:
    /// the rank that waits for it shows the wait as time inside MPI. 0 when unknown
    /// (profiling off, an older rank); added like `malleable`, without a version bump.
    #[serde(default)]
    pub slowest_compute_us: u64,
    /// How long the job has had its current width at this report, microseconds: since it
    /// started, or since the last resize it completed (a rank added by that resize counts
    /// from it; a replacement continues its predecessor's). The agent of rank 0's node
    /// holds a job's grows for a hold-down after a width change from this, which it sees
    /// even when rank 0 moved to it after the change. `None` when unknown (an older rank);
    /// added like `malleable`, without a version bump.
    #[serde(default)]
    pub width_age_us: Option<u64>,
}

/// Load of a node (or of the cgroup that bounds it), as its daemon measures it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeLoad {
    /// CPUs the node may use (a cgroup quota of 0.5 CPU gives 0.5).
    pub cores: f64,
    /// Average runnable demand over the last period, in CPUs (may exceed `cores`).
    pub cpu_load: f64,
    /// CPUs left idle over the last period (`cores` minus what was used, at least 0).
    pub cpu_available: f64,
    /// Memory the node may use, bytes.
    pub memory_total: u64,
    /// Memory free for new processes, bytes.
    pub memory_available: u64,
}

/// One rank's profile as its daemon derives it over the last period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankStats {
    /// Rank number.
    pub rank: Rank,
    /// Host the process runs on.
    pub host: HostName,
    /// Process id.
    pub pid: u32,
    /// Whether the process is a replacement spawned by a migration.
    pub replacement: bool,
    /// The rank's latest cumulative report.
    pub profile: RankProfile,
    /// Iterations per second over the last period.
    pub iterations_per_second: f64,
    /// Wall time per iteration over the last period, microseconds.
    pub wall_per_iteration_us: f64,
    /// CPU time per iteration over the last period, microseconds.
    pub cpu_per_iteration_us: f64,
    /// Time inside MPI per iteration over the last period, microseconds.
    pub mpi_per_iteration_us: f64,
    /// The job's slowest rank's computing time per iteration over the last period,
    /// microseconds ([`RankProfile::slowest_compute_us`]); 0 when unknown.
    #[serde(default)]
    pub slowest_compute_per_iteration_us: f64,
    /// Whether the rank is stalled (see [`RankStatus::stalled`]); its figures are then zeros,
    /// not the last ones it reported.
    #[serde(default)]
    pub stalled: bool,
}

/// One job's ranks on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStats {
    /// The job.
    pub job: JobId,
    /// Its application name.
    pub app: AppName,
    /// Number of ranks in the whole job.
    pub size: u32,
    /// Ranks registered here, ordered by rank.
    pub ranks: Vec<RankStats>,
    /// The job's resize limits, as its ranks here last reported them
    /// ([`RankProfile::malleable`]); `None`: not malleable, or no rank here declared it yet.
    /// Absent from an older daemon's answer: `None` (no version bump, see
    /// [`RankProfile::malleable`]).
    #[serde(default)]
    pub malleable: Option<Malleability>,
}

/// A daemon's profile of its node: the answer to [`ToDaemon::QueryStats`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStats {
    /// Host name of the daemon's node.
    pub host: HostName,
    /// Length of the sampling period the per-period figures cover, seconds.
    pub period_s: f64,
    /// The node's own load.
    pub node: NodeLoad,
    /// Jobs with ranks here.
    pub jobs: Vec<JobStats>,
}

/// Errors of framing and decoding.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix announces more than [`MAX_FRAME_LEN`] bytes.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLong {
        /// Announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The body is not a valid CBOR message of the expected type.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// The stream ended in the middle of a frame.
    #[error("connection closed in the middle of a frame ({have} of {want} bytes)")]
    Truncated {
        /// Bytes received.
        have: usize,
        /// Bytes expected.
        want: usize,
    },
}

/// Encodes one message as a complete frame (length prefix included).
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    let mut frame = vec![0u8; 4];
    // Writing CBOR into a Vec cannot fail for these plain data types.
    if let Err(e) = ciborium::into_writer(message, &mut frame) {
        unreachable!("encoding a protocol message into memory failed: {e}");
    }
    let body_len = frame.len() - 4;
    debug_assert!(
        body_len <= MAX_FRAME_LEN,
        "message larger than MAX_FRAME_LEN"
    );
    frame[..4].copy_from_slice(&(body_len as u32).to_be_bytes());
    frame
}

/// Decodes one frame body (without its length prefix).
pub fn decode<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, FrameError> {
    if body.len() > MAX_FRAME_LEN {
        return Err(FrameError::TooLong {
            len: body.len(),
            max: MAX_FRAME_LEN,
        });
    }
    ciborium::from_reader(body).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// Buffer a [`FrameReader`] keeps between frames (64 KiB); larger ones are shrunk back.
const KEPT_CAPACITY: usize = 64 << 10;

/// Splits a byte stream into frames: feed it what the socket gave, then take out messages.
///
/// Sans-I/O, so the blocking client and the async daemon use the same code. Buffers at most
/// one frame plus what was fed beyond it.
#[derive(Debug, Default)]
pub struct FrameReader {
    buffer: Vec<u8>,
}

impl FrameReader {
    /// A reader with an empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes received from the stream.
    ///
    /// The buffer grows with the bytes that actually arrived (at most doubling), but never
    /// beyond the frame being assembled: a length prefix that lies costs the liar the bytes it
    /// sends, not the bytes it announces, and a 1 MiB frame never leaves a 2 MiB buffer behind.
    pub fn feed(&mut self, bytes: &[u8]) {
        let needed = self.buffer.len() + bytes.len();
        if needed > self.buffer.capacity() {
            let doubled = self.buffer.capacity().saturating_mul(2).max(KEPT_CAPACITY);
            let target = match self.announced() {
                Some(len) => doubled.min(4 + len.min(MAX_FRAME_LEN)),
                None => doubled,
            };
            self.buffer
                .reserve_exact(target.max(needed) - self.buffer.len());
        }
        self.buffer.extend_from_slice(bytes);
    }

    /// The body length the buffered prefix announces, once four bytes are there.
    fn announced(&self) -> Option<usize> {
        let prefix: [u8; 4] = self.buffer.get(..4)?.try_into().ok()?;
        Some(u32::from_be_bytes(prefix) as usize)
    }

    /// Bytes buffered and not yet returned as a frame.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Takes out the next complete message, if one is buffered.
    ///
    /// After an error the stream is out of step and the connection should be closed: a
    /// length prefix cannot be trusted after a malformed body.
    pub fn next_message<T: for<'de> Deserialize<'de>>(&mut self) -> Result<Option<T>, FrameError> {
        if self.buffer.len() < 4 {
            return Ok(None);
        }
        let mut prefix = [0u8; 4];
        prefix.copy_from_slice(&self.buffer[..4]);
        let len = u32::from_be_bytes(prefix) as usize;
        if len > MAX_FRAME_LEN {
            return Err(FrameError::TooLong {
                len,
                max: MAX_FRAME_LEN,
            });
        }
        if self.buffer.len() < 4 + len {
            return Ok(None);
        }
        let result = decode(&self.buffer[4..4 + len]);
        self.buffer.drain(..4 + len);
        if self.buffer.capacity() > KEPT_CAPACITY && self.buffer.len() <= KEPT_CAPACITY {
            // A large frame is done: give its memory back instead of holding it for the
            // life of the connection.
            self.buffer.shrink_to(KEPT_CAPACITY);
        }
        result.map(Some)
    }

    /// Call when the stream has ended: an error if a partial frame was left behind.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let want = if self.buffer.len() >= 4 {
            let mut prefix = [0u8; 4];
            prefix.copy_from_slice(&self.buffer[..4]);
            4 + u32::from_be_bytes(prefix) as usize
        } else {
            4
        };
        Err(FrameError::Truncated {
            have: self.buffer.len(),
            want,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample_messages() -> Vec<ToDaemon> {
        vec![
            ToDaemon::Hello {
                version: PROTOCOL_VERSION,
                client: ClientKind::Rank,
            },
            ToDaemon::Register {
                job: JobId::new("heat2d-1f2e").unwrap(),
                app: AppName::new("heat2d").unwrap(),
                rank: Rank(3),
                size: 4,
                host: HostName::new("node-a").unwrap(),
                pid: 1234,
                replacement: false,
                reconfigurations: 0,
            },
            ToDaemon::Migrate {
                job: None,
                moves: vec![Move {
                    rank: Rank(0),
                    to: Some(HostName::new("node-b").unwrap()),
                }],
                wait: true,
                resize: None,
            },
            ToDaemon::Migrate {
                job: Some(JobId::new("heat2d-1f2e").unwrap()),
                moves: Vec::new(),
                wait: false,
                resize: Some(Resize {
                    ranks: 3,
                    hosts: vec![HostName::new("node-c").unwrap()],
                }),
            },
            ToDaemon::Renumbered {
                rank: Rank(1),
                size: 3,
                reconfigurations: 4,
            },
        ]
    }

    #[test]
    fn given_messages_split_across_feeds_then_each_is_decoded_once() {
        let mut stream = Vec::new();
        for m in sample_messages() {
            stream.extend(encode(&m));
        }
        let mut reader = FrameReader::new();
        let mut out = Vec::new();
        for chunk in stream.chunks(3) {
            reader.feed(chunk);
            while let Some(m) = reader.next_message::<ToDaemon>().unwrap() {
                out.push(m);
            }
        }
        assert_eq!(out, sample_messages());
        reader.finish().unwrap();
    }

    /// A version-2 request (no `resize` field) decodes with none; and a version-2 reader of
    /// a request with a resize would drop it without a word, which is why resizes need
    /// version 3 on both ends (see [`PROTOCOL_VERSION`]).
    #[test]
    fn given_a_request_without_a_resize_field_then_it_has_none_and_an_old_reader_drops_it() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        enum V2 {
            ReconfigurationRequested {
                request: RequestId,
                moves: Vec<Move>,
                epoch: u64,
            },
        }
        let old = V2::ReconfigurationRequested {
            request: RequestId(5),
            moves: Vec::new(),
            epoch: 1,
        };
        let frame = encode(&old);
        assert_eq!(
            decode::<FromDaemon>(&frame[4..]).unwrap(),
            FromDaemon::ReconfigurationRequested {
                request: RequestId(5),
                moves: Vec::new(),
                epoch: 1,
                resize: None,
            }
        );
        let new = FromDaemon::ReconfigurationRequested {
            request: RequestId(5),
            moves: Vec::new(),
            epoch: 1,
            resize: Some(Resize {
                ranks: 3,
                hosts: Vec::new(),
            }),
        };
        let frame = encode(&new);
        assert_eq!(decode::<V2>(&frame[4..]).unwrap(), old);
    }

    /// A profile and a job's stats carry the job's resize limits; the same messages from an
    /// older peer (no `malleable` field) decode with none, and an older reader of the new
    /// ones ignores the field: why no version bump is needed.
    #[test]
    fn given_profiles_and_stats_with_and_without_malleable_then_both_decode() {
        let limits = Malleability::new(1, 256).unwrap();
        let profile = RankProfile {
            iteration: 40,
            wall_us: 2_000_000,
            malleable: Some(limits),
            ..RankProfile::default()
        };
        let frame = encode(&ToDaemon::Profile(profile.clone()));
        assert_eq!(
            decode::<ToDaemon>(&frame[4..]).unwrap(),
            ToDaemon::Profile(profile.clone())
        );
        let plain = RankProfile {
            malleable: None,
            ..profile.clone()
        };
        let frame = encode(&plain);
        assert_eq!(decode::<RankProfile>(&frame[4..]).unwrap(), plain);

        // A rank of before the field: the same figures, no `malleable`.
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct OldProfile {
            iteration: u64,
            wall_us: u64,
            cpu_us: u64,
            mpi_us: u64,
            state_bytes: u64,
            rss_bytes: u64,
            resident_us: u64,
            traffic: Vec<PeerTraffic>,
            collectives: CollectiveTraffic,
        }
        let old = OldProfile {
            iteration: 40,
            wall_us: 2_000_000,
            cpu_us: 0,
            mpi_us: 0,
            state_bytes: 0,
            rss_bytes: 0,
            resident_us: 0,
            traffic: Vec::new(),
            collectives: CollectiveTraffic::default(),
        };
        assert_eq!(decode::<RankProfile>(&encode(&old)[4..]).unwrap(), plain);
        assert_eq!(decode::<OldProfile>(&encode(&profile)[4..]).unwrap(), old);

        let job = JobStats {
            job: JobId::new("heat2d-1f2e").unwrap(),
            app: AppName::new("heat2d").unwrap(),
            size: 2,
            ranks: Vec::new(),
            malleable: Some(limits.with_rule(SizeRule::PowerOfTwo)),
        };
        assert_eq!(decode::<JobStats>(&encode(&job)[4..]).unwrap(), job);
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct OldJobStats {
            job: JobId,
            app: AppName,
            size: u32,
            ranks: Vec<RankStats>,
        }
        let old = decode::<OldJobStats>(&encode(&job)[4..]).unwrap();
        assert_eq!(old.size, 2);
        let back = decode::<JobStats>(&encode(&old)[4..]).unwrap();
        assert_eq!(back.malleable, None);
        assert_eq!(
            JobStats {
                malleable: None,
                ..job
            },
            back
        );
        assert_eq!(limits.to_string(), "1..=256 (any width)");
    }

    #[test]
    fn given_oversized_prefix_then_too_long_without_waiting_for_body() {
        let mut reader = FrameReader::new();
        reader.feed(&(MAX_FRAME_LEN as u32 + 1).to_be_bytes());
        assert!(matches!(
            reader.next_message::<ToDaemon>(),
            Err(FrameError::TooLong { .. })
        ));
    }

    #[test]
    fn given_truncated_stream_then_finish_reports_it() {
        let frame = encode(&ToDaemon::QueryStatus);
        let mut reader = FrameReader::new();
        reader.feed(&frame[..frame.len() - 1]);
        assert!(reader.next_message::<ToDaemon>().unwrap().is_none());
        assert!(matches!(reader.finish(), Err(FrameError::Truncated { .. })));
    }

    #[test]
    fn given_invalid_name_on_the_wire_then_decoding_fails_cleanly() {
        // A host name with a space is not a valid HostName; it must not decode into one.
        #[derive(Serialize)]
        enum Fake {
            Welcome { version: u32, host: String },
        }
        let frame = encode(&Fake::Welcome {
            version: 1,
            host: "bad host".into(),
        });
        let err = decode::<FromDaemon>(&frame[4..]).unwrap_err();
        assert!(err.to_string().contains("host"), "{err}");
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut reader = FrameReader::new();
            reader.feed(&bytes);
            for _ in 0..8 {
                match reader.next_message::<ToDaemon>() {
                    Ok(Some(_)) => continue,
                    _ => break,
                }
            }
            let _ = decode::<FromDaemon>(&bytes);
        }

        #[test]
        fn any_frame_with_a_valid_prefix_and_random_body_is_refused_or_decoded(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend(&body);
            let mut reader = FrameReader::new();
            reader.feed(&frame);
            let _ = reader.next_message::<FromDaemon>();
        }
    }
}
