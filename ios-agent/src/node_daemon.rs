//! The agent's link to its node's pcmd (the paper's dispatcher role): attach to the running
//! daemon or start one, keep one running at the socket, read the node's rank profiles, and
//! carry out migrations and resizes.
//!
//! The node's pcmd is shared: the agent may attach to one that `pcmrun` started (which
//! stops it when its job ends), and any pcmd may be killed. So every profile tick that finds
//! nothing answering at the socket starts a new pcmd there, with the same arguments as the
//! first ([`NodeDaemon::stats`]), at most one try per [`RESTART_BACKOFF`] when starting
//! fails. A pcmd this agent started is stopped when the agent leaves, if it is idle.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ios_agent_core::agent::MigrationOutcome;
use ios_agent_core::{EntityId, MigrationId};
use ios_agent_profile::NodeCgroupPath;
use pcm_proto::client::{Client, Error as ClientError, Migration};
use pcm_proto::{HostName, Move, NodeStats, Outcome, Resize};

use crate::driver::Migrator;

/// Longest a migration may take before the agent reports it failed (spawning is about
/// 0.3 s; a large state at 1 GB/s adds a second per GB).
pub const MIGRATION_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a pcmd the agent starts may take to answer before the agent gives up on it.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a profile tick that started a new pcmd waits for its answer (it usually comes
/// within tens of milliseconds); a slower one is left to answer by a later tick, up to
/// [`START_TIMEOUT`].
const RESTART_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// Time between two tries to start a pcmd when the last one failed.
pub const RESTART_BACKOFF: Duration = Duration::from_secs(5);

/// How the agent reaches its node's pcmd, and keeps one running at the socket. Clones share
/// one keeper: the profiling thread restarts pcmd, the agent's end stops it.
#[derive(Debug, Clone)]
pub struct NodeDaemon {
    socket: PathBuf,
    keeper: Arc<Mutex<Keeper>>,
}

/// How pcmd is started (the first time and every time again).
#[derive(Debug)]
struct Launch {
    socket: PathBuf,
    host: HostName,
    program: PathBuf,
    log: PathBuf,
    stats_period: Duration,
    node_cgroup: Option<NodeCgroupPath>,
}

/// A pcmd this agent started.
#[derive(Debug)]
struct Started {
    child: Child,
    since: Instant,
}

#[derive(Debug)]
struct Keeper {
    launch: Launch,
    /// The pcmd this agent started last, until it is seen gone.
    started: Option<Started>,
    /// No start before this (after a failed one).
    next_try: Option<Instant>,
    /// Starts that failed in a row.
    failures: u32,
    /// pcmds started again after the first.
    restarts: u32,
    /// The agent is ending: never start pcmd again.
    retired: bool,
}

/// Errors of attaching to or starting pcmd.
#[derive(Debug, thiserror::Error)]
pub enum NodeDaemonError {
    /// The pcmd program could not be started.
    #[error("cannot start pcmd ({}): {source}", program.display())]
    Spawn {
        /// The program tried.
        program: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// pcmd started but did not answer in time.
    #[error("pcmd started ({}) but did not answer at {} within {timeout:?}; last error: {last}", program.display(), socket.display())]
    NoAnswer {
        /// The program.
        program: PathBuf,
        /// Its socket.
        socket: PathBuf,
        /// How long we waited.
        timeout: Duration,
        /// The last connection error.
        last: String,
    },
    /// pcmd answered with an error.
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl Launch {
    /// Starts `program --socket SOCKET --host HOST serve --stats-period SECS [--node-cgroup
    /// PATH]`, its output
    /// going to the log: emptied on the first start, appended to on later ones (the log of
    /// the pcmd that died stays readable).
    fn spawn(&self, first: bool) -> Result<Child, NodeDaemonError> {
        // Private (the log names jobs, hosts and paths), and never through a symlink planted
        // where the log goes.
        let log_file = {
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut options = std::fs::OpenOptions::new();
            if first {
                options.write(true).truncate(true);
            } else {
                options.append(true);
            }
            options
                .create(true)
                .mode(0o600)
                .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
                .open(&self.log)
        }
        .map_err(|source| NodeDaemonError::Spawn {
            program: self.log.clone(),
            source,
        })?;
        let log_err = log_file
            .try_clone()
            .map_err(|source| NodeDaemonError::Spawn {
                program: self.log.clone(),
                source,
            })?;
        let mut command = Command::new(&self.program);
        command
            .arg("--socket")
            .arg(&self.socket)
            .arg("--host")
            .arg(self.host.as_str())
            .arg("serve")
            .arg("--stats-period")
            .arg(format!("{}", self.stats_period.as_secs_f64()));
        if let Some(node) = &self.node_cgroup {
            command.arg("--node-cgroup").arg(node.as_str());
        }
        command
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .map_err(|source| NodeDaemonError::Spawn {
                program: self.program.clone(),
                source,
            })
    }
}

/// Whether `e` means that no pcmd serves the socket (as opposed to one that answers badly,
/// slowly or not to this user, which a new pcmd would not fix: it could not take the
/// socket's lock).
fn nothing_serves(e: &ClientError) -> bool {
    matches!(e, ClientError::NotRunning { .. })
}

impl NodeDaemon {
    /// Attaches to the pcmd serving `socket`, or starts `program --socket SOCKET --host
    /// HOST serve --stats-period SECS` (logging to `log`) and waits until it answers. The
    /// agent reads the ranks' profiles every `stats_period`, so pcmd's own period is the
    /// same. `host` is the agent's node name: pcmd reports it and keeps its checkpoints
    /// under it, so that agents of several emulated nodes on one machine do not share them.
    /// `node_cgroup` (the agent's `--node-cgroup`) is passed on as pcmd's. Later, [`NodeDaemon::stats`] starts pcmd the same way whenever none serves `socket`.
    pub fn attach_or_start(
        socket: &Path,
        host: &HostName,
        program: &Path,
        log: &Path,
        stats_period: Duration,
        node_cgroup: Option<&NodeCgroupPath>,
    ) -> Result<NodeDaemon, NodeDaemonError> {
        let launch = Launch {
            socket: socket.to_owned(),
            host: host.clone(),
            program: program.to_owned(),
            log: log.to_owned(),
            stats_period,
            node_cgroup: node_cgroup.cloned(),
        };
        let keeper = |launch, started| NodeDaemon {
            socket: socket.to_owned(),
            keeper: Arc::new(Mutex::new(Keeper {
                launch,
                started,
                next_try: None,
                failures: 0,
                restarts: 0,
                retired: false,
            })),
        };
        match Client::connect(socket) {
            Ok(_) => {
                tracing::info!(socket = %socket.display(), "attached to the node's pcmd");
                return Ok(keeper(launch, None));
            }
            Err(e) if nothing_serves(&e) => {}
            Err(e) => return Err(e.into()),
        }
        let child = launch.spawn(true)?;
        tracing::info!(socket = %socket.display(), pid = child.id(), "started pcmd");
        let daemon = keeper(
            launch,
            Some(Started {
                child,
                since: Instant::now(),
            }),
        );
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match Client::connect(socket) {
                Ok(_) => return Ok(daemon),
                Err(e) if Instant::now() >= deadline => {
                    // Not left running behind the agent's back.
                    daemon.lock().retire();
                    return Err(NodeDaemonError::NoAnswer {
                        program: program.to_owned(),
                        socket: socket.to_owned(),
                        timeout: START_TIMEOUT,
                        last: e.to_string(),
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Keeper> {
        // The keeper's state stays consistent across a panic (each field is set whole).
        self.keeper.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The daemon's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether this agent started the daemon now serving (and so stops it when leaving).
    pub fn started_here(&self) -> bool {
        self.lock().started.is_some()
    }

    /// How many times the agent started pcmd again since it joined.
    pub fn restarts(&self) -> u32 {
        self.lock().restarts
    }

    /// Reads the node's profile from pcmd. When no pcmd serves the socket, starts one (at
    /// most one try per [`RESTART_BACKOFF`] after a failed start, none once the agent is
    /// ending) and reads from it if it answers at once; otherwise the error.
    pub fn stats(&self) -> Result<NodeStats, ClientError> {
        let first = stats(&self.socket);
        let mut keeper = self.lock();
        let ended = keeper
            .reap()
            .map(|(pid, how)| format!("pid {pid}, started by this agent, ended: {how}"));
        match first {
            Err(e) if nothing_serves(&e) => {
                if keeper.revive(&e, ended) {
                    drop(keeper);
                    stats(&self.socket)
                } else {
                    Err(e)
                }
            }
            other => other,
        }
    }

    /// Stops the daemon if this agent started it and no job has ranks there any more;
    /// returns why it was left running otherwise. From now on no pcmd is started again.
    pub fn stop_if_idle(&self) -> Option<String> {
        let mut keeper = self.lock();
        keeper.retired = true;
        keeper.reap();
        let started = keeper.started.as_mut()?;
        let busy = Client::connect(&self.socket)
            .and_then(|mut c| c.status())
            .map(|s| s.jobs.iter().map(|j| j.ranks.len()).sum::<usize>())
            .unwrap_or(0);
        if busy > 0 {
            return Some(format!(
                "pcmd (pid {}) keeps running: {busy} ranks are still registered with it",
                started.child.id()
            ));
        }
        keeper.retire();
        None
    }
}

impl Keeper {
    /// Forgets the pcmd this agent started if it has ended (and reaps it); returns its pid
    /// and how it ended.
    fn reap(&mut self) -> Option<(u32, String)> {
        let started = self.started.as_mut()?;
        let pid = started.child.id();
        let ended = match started.child.try_wait() {
            Ok(None) => return None,
            Ok(Some(status)) => status.to_string(),
            Err(e) => format!("cannot be waited for: {e}"),
        };
        tracing::debug!(pid, "the pcmd this agent started ended: {ended}");
        self.started = None;
        Some((pid, ended))
    }

    /// Stops the pcmd this agent started (SIGTERM, then waits for it), and never starts one
    /// again.
    fn retire(&mut self) {
        self.retired = true;
        if let Some(mut started) = self.started.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(started.child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = started.child.wait();
        }
    }

    /// Nothing serves the socket (`gone`; `ended`: how the pcmd this agent started ended,
    /// if it did): starts a new pcmd unless one of ours is still starting, the last try
    /// failed less than [`RESTART_BACKOFF`] ago, or the agent is ending. Returns whether a
    /// pcmd answers at the socket now.
    fn revive(&mut self, gone: &ClientError, ended: Option<String>) -> bool {
        if self.retired {
            return false;
        }
        let now = Instant::now();
        let socket = self.launch.socket.clone();
        if let Some(started) = &mut self.started {
            // Ours still runs but does not serve the socket: it is starting, or stuck.
            let pid = started.child.id();
            if now < started.since + START_TIMEOUT {
                return false;
            }
            let _ = started.child.kill();
            let _ = started.child.wait();
            self.started = None;
            self.failed(
                now,
                &format!(
                    "the pcmd this agent started (pid {pid}) runs but does not serve the socket"
                ),
                "it was killed",
            );
            return false;
        }
        if self.next_try.is_some_and(|t| now < t) {
            return false;
        }
        let why = match (ended, self.failures) {
            (Some(ended), _) => ended,
            (None, 0) => "nothing answers there".to_owned(),
            (None, n) => format!("nothing answers there; {n} start(s) failed"),
        };
        tracing::debug!(socket = %socket.display(), "no pcmd serves the socket ({gone}): starting one");
        let child = match self.launch.spawn(false) {
            Ok(child) => child,
            Err(e) => {
                self.failed(now, &why, &e.to_string());
                return false;
            }
        };
        let pid = child.id();
        self.started = Some(Started { child, since: now });
        let deadline = now + RESTART_ANSWER_WAIT;
        loop {
            let answers = Client::connect(&socket).is_ok();
            if let Some((_, ours_ended)) = self.reap() {
                if answers {
                    // Another pcmd (a launcher's) took the socket first; ours gave way.
                    tracing::info!(
                        "the node's pcmd at {} is gone ({why}); another one serves it now, which the agent uses (the one it started ended: {ours_ended})",
                        socket.display()
                    );
                    self.failures = 0;
                    self.next_try = None;
                    return true;
                }
                self.failed(
                    now,
                    &why,
                    &format!(
                        "the new one (pid {pid}) ended at once: {ours_ended} (its log: {})",
                        self.launch.log.display()
                    ),
                );
                return false;
            }
            if answers {
                self.restarts += 1;
                self.failures = 0;
                self.next_try = None;
                tracing::info!(
                    "the node's pcmd at {} is gone ({why}); started a new one (pid {pid})",
                    socket.display()
                );
                return true;
            }
            if Instant::now() >= deadline {
                self.restarts += 1;
                tracing::info!(
                    "the node's pcmd at {} is gone ({why}); started a new one (pid {pid}), which does not answer yet",
                    socket.display()
                );
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starting a pcmd failed (`what`; `why` one was needed): no new try for
    /// [`RESTART_BACKOFF`]. Said once at warning level; the tries after it only at debug
    /// level, until one succeeds.
    fn failed(&mut self, now: Instant, why: &str, what: &str) {
        self.failures += 1;
        self.next_try = Some(now + RESTART_BACKOFF);
        let socket = self.launch.socket.display();
        if self.failures == 1 {
            tracing::warn!(
                "the node's pcmd at {socket} is gone ({why}) and starting a new one failed: {what}; trying again every {} s (until then the agent reads no rank from pcmd)",
                RESTART_BACKOFF.as_secs()
            );
        } else {
            tracing::debug!(
                failures = self.failures,
                "the node's pcmd at {socket} still cannot be replaced: {what}"
            );
        }
    }
}

/// Reads the node's profile from the pcmd at `socket` (no restart).
pub fn stats(socket: &Path) -> Result<NodeStats, ClientError> {
    Client::connect(socket)?.stats()
}

/// Carries out migrations and resizes through pcmd.
#[derive(Debug, Clone)]
pub struct PcmdMigrator {
    socket: PathBuf,
}

impl PcmdMigrator {
    /// A migrator talking to the pcmd at `socket`.
    pub fn new(socket: PathBuf) -> Self {
        PcmdMigrator { socket }
    }
}

impl Migrator for PcmdMigrator {
    fn migrate(
        &self,
        id: MigrationId,
        entities: &[EntityId],
        to_host: &HostName,
    ) -> MigrationOutcome {
        let Some(job) = entities.first().map(|e| e.job.clone()) else {
            return MigrationOutcome::Failed {
                reason: format!("migration {id} names no entity"),
            };
        };
        let moves = entities
            .iter()
            .map(|e| Move {
                rank: e.rank,
                to: Some(to_host.clone()),
            })
            .collect();
        let result = Client::connect(&self.socket)
            .and_then(|mut c| c.migrate(Some(job), moves, true, MIGRATION_TIMEOUT));
        outcome_of(result)
    }

    /// One request to pcmd with no moves and the resize (`ToDaemon::Migrate { job, moves:
    /// [], resize, wait: true }`, as `pcmd resize --job JOB --ranks N --to HOST...`), with
    /// a migration's deadline and outcomes: the job refuses what its limits do not allow,
    /// and pcmd refuses a job with a rank too old to resize.
    fn resize(
        &self,
        _id: MigrationId,
        job: &pcm_proto::JobId,
        ranks: u32,
        hosts: &[HostName],
    ) -> MigrationOutcome {
        let resize = Resize {
            ranks,
            hosts: hosts.to_vec(),
        };
        let result = Client::connect(&self.socket)
            .and_then(|mut c| c.resize(Some(job.clone()), resize, true, MIGRATION_TIMEOUT));
        outcome_of(result)
    }
}

/// What the core makes of pcmd's answer to a request made with `wait`.
fn outcome_of(result: Result<Migration, ClientError>) -> MigrationOutcome {
    match result {
        Ok(Migration::Finished {
            outcome: Outcome::Completed { .. },
            ..
        }) => MigrationOutcome::Completed,
        Ok(Migration::Finished { outcome, .. }) => MigrationOutcome::Failed {
            reason: outcome.failure().unwrap_or_default(),
        },
        Ok(Migration::Accepted { request }) => MigrationOutcome::Failed {
            reason: format!("pcmd accepted {request} but did not report its end"),
        },
        Err(e) => MigrationOutcome::Failed {
            reason: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcm_proto::{
        encode, FrameReader, FromDaemon, JobId, PhaseTimings, RequestId, ToDaemon, PROTOCOL_VERSION,
    };
    use std::io::{Read as _, Write as _};
    use std::os::unix::net::UnixListener;

    /// A pcmd that answers one controller: welcomes it, takes one request and answers it
    /// with `outcome` (or refuses it with `refusal`). Returns the request it got.
    fn fake_pcmd(
        listener: UnixListener,
        outcome: Outcome,
        refusal: Option<pcm_proto::ErrorKind>,
    ) -> std::thread::JoinHandle<ToDaemon> {
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("a client");
            let mut reader = FrameReader::new();
            let mut next = |stream: &mut std::os::unix::net::UnixStream| loop {
                if let Some(m) = reader.next_message::<ToDaemon>().expect("a valid frame") {
                    return m;
                }
                let mut buf = [0u8; 4096];
                let n = stream.read(&mut buf).expect("readable");
                assert!(n > 0, "the client hung up");
                reader.feed(&buf[..n]);
            };
            assert!(matches!(next(&mut stream), ToDaemon::Hello { .. }));
            let welcome = FromDaemon::Welcome {
                version: PROTOCOL_VERSION,
                host: HostName::new("node-a").expect("valid"),
            };
            stream.write_all(&encode(&welcome)).expect("writable");
            let request = next(&mut stream);
            let replies = match refusal {
                Some(kind) => vec![FromDaemon::Error {
                    kind,
                    message: "job heat2d-1 has a rank of protocol version 2".into(),
                }],
                None => vec![
                    FromDaemon::MigrationAccepted {
                        request: RequestId(5),
                    },
                    FromDaemon::MigrationFinished {
                        request: RequestId(5),
                        outcome,
                    },
                ],
            };
            for reply in replies {
                stream.write_all(&encode(&reply)).expect("writable");
            }
            request
        })
    }

    fn listener() -> (tempfile::TempDir, PathBuf, UnixListener) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let socket = dir.path().join("pcmd.sock");
        let listener = UnixListener::bind(&socket).expect("bound");
        (dir, socket, listener)
    }

    /// Issue 38: a resize goes to pcmd as one request with the job, no moves, the width and
    /// hosts, waiting for its end; pcmd's outcome comes back as the core reads a
    /// migration's.
    #[test]
    fn given_a_resize_then_pcmd_gets_the_request_and_its_outcome_is_mapped() {
        let job = JobId::new("heat2d-1").expect("valid");
        let hosts = [HostName::new("node-c").expect("valid")];
        let completed = Outcome::Completed {
            iteration: 1200,
            timings: PhaseTimings::default(),
            placed: Vec::new(),
        };
        let (_dir, socket, l) = listener();
        let pcmd = fake_pcmd(l, completed, None);
        let migrator = PcmdMigrator::new(socket);
        let outcome = migrator.resize(MigrationId(3), &job, 3, &hosts);
        assert_eq!(outcome, MigrationOutcome::Completed);
        assert_eq!(
            pcmd.join().expect("the fake pcmd"),
            ToDaemon::Migrate {
                job: Some(job.clone()),
                moves: Vec::new(),
                wait: true,
                resize: Some(Resize {
                    ranks: 3,
                    hosts: hosts.to_vec(),
                }),
            }
        );

        // The job refuses (not malleable): failed, with the job's words.
        let (_dir, socket, l) = listener();
        let refused = Outcome::Failed {
            reason: "the job is not malleable: it never called set_malleable".into(),
        };
        let pcmd = fake_pcmd(l, refused, None);
        let outcome = PcmdMigrator::new(socket).resize(MigrationId(4), &job, 1, &[]);
        assert_eq!(
            outcome,
            MigrationOutcome::Failed {
                reason: "the job is not malleable: it never called set_malleable".into()
            }
        );
        pcmd.join().expect("the fake pcmd");

        // pcmd refuses (a rank too old to resize): failed, naming why.
        let (_dir, socket, l) = listener();
        let pcmd = fake_pcmd(
            l,
            Outcome::Failed {
                reason: String::new(),
            },
            Some(pcm_proto::ErrorKind::Unsupported),
        );
        let outcome = PcmdMigrator::new(socket).resize(MigrationId(5), &job, 4, &[]);
        match outcome {
            MigrationOutcome::Failed { reason } => {
                assert!(reason.contains("protocol version 2"), "{reason}");
            }
            other => panic!("expected a failure, got {other:?}"),
        }
        pcmd.join().expect("the fake pcmd");

        // No pcmd at all: failed, not a hang.
        let dir = tempfile::tempdir().expect("a temporary directory");
        let outcome =
            PcmdMigrator::new(dir.path().join("none.sock")).resize(MigrationId(6), &job, 4, &[]);
        assert!(matches!(outcome, MigrationOutcome::Failed { .. }));
    }
}
