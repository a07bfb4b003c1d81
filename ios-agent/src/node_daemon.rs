//! The agent's link to its node's pcmd (the paper's dispatcher role): attach to the running
//! daemon or start one, read the node's rank profiles, and carry out migrations.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ios_agent_core::agent::MigrationOutcome;
use ios_agent_core::{EntityId, MigrationId};
use pcm_proto::client::{Client, Error as ClientError, Migration};
use pcm_proto::{HostName, Move, NodeStats, Outcome};

use crate::driver::Migrator;

/// Longest a migration may take before the agent reports it failed (spawning is about
/// 0.3 s; a large state at 1 GB/s adds a second per GB).
pub const MIGRATION_TIMEOUT: Duration = Duration::from_secs(120);

/// How the agent reached its pcmd.
#[derive(Debug)]
pub struct NodeDaemon {
    socket: PathBuf,
    started: Option<Child>,
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

impl NodeDaemon {
    /// Attaches to the pcmd serving `socket`, or starts `program --socket SOCKET --host
    /// HOST serve --stats-period SECS` (logging to `log`) and waits until it answers. The
    /// agent reads the ranks' profiles every `stats_period`, so pcmd's own period is the
    /// same. `host` is the agent's node name: pcmd reports it and keeps its checkpoints
    /// under it, so that agents of several emulated nodes on one machine do not share them.
    pub fn attach_or_start(
        socket: &Path,
        host: &HostName,
        program: &Path,
        log: &Path,
        stats_period: Duration,
    ) -> Result<NodeDaemon, NodeDaemonError> {
        match Client::connect(socket) {
            Ok(_) => {
                tracing::info!(socket = %socket.display(), "attached to the node's pcmd");
                return Ok(NodeDaemon {
                    socket: socket.to_owned(),
                    started: None,
                });
            }
            Err(ClientError::NotRunning { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        // Private (the log names jobs, hosts and paths), and never through a symlink planted
        // where the log goes.
        let log_file = {
            use std::os::unix::fs::OpenOptionsExt as _;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
                .open(log)
        }
        .map_err(|source| NodeDaemonError::Spawn {
            program: log.to_owned(),
            source,
        })?;
        let log_err = log_file
            .try_clone()
            .map_err(|source| NodeDaemonError::Spawn {
                program: log.to_owned(),
                source,
            })?;
        let child = Command::new(program)
            .arg("--socket")
            .arg(socket)
            .arg("--host")
            .arg(host.as_str())
            .arg("serve")
            .arg("--stats-period")
            .arg(format!("{}", stats_period.as_secs_f64()))
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .map_err(|source| NodeDaemonError::Spawn {
                program: program.to_owned(),
                source,
            })?;
        tracing::info!(socket = %socket.display(), pid = child.id(), "started pcmd");
        let daemon = NodeDaemon {
            socket: socket.to_owned(),
            started: Some(child),
        };
        let timeout = Duration::from_secs(10);
        let deadline = Instant::now() + timeout;
        loop {
            match Client::connect(socket) {
                Ok(_) => return Ok(daemon),
                Err(e) if Instant::now() >= deadline => {
                    return Err(NodeDaemonError::NoAnswer {
                        program: program.to_owned(),
                        socket: socket.to_owned(),
                        timeout,
                        last: e.to_string(),
                    })
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The daemon's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether this agent started the daemon (and so stops it when leaving).
    pub fn started_here(&self) -> bool {
        self.started.is_some()
    }

    /// Stops the daemon if this agent started it and no job has ranks there any more;
    /// returns why it was left running otherwise.
    pub fn stop_if_idle(&mut self) -> Option<String> {
        let child = self.started.as_mut()?;
        let busy = Client::connect(&self.socket)
            .and_then(|mut c| c.status())
            .map(|s| s.jobs.iter().map(|j| j.ranks.len()).sum::<usize>())
            .unwrap_or(0);
        if busy > 0 {
            return Some(format!(
                "pcmd (pid {}) keeps running: {busy} ranks are still registered with it",
                child.id()
            ));
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = child.wait();
        self.started = None;
        None
    }
}

/// Reads the node's profile from pcmd.
pub fn stats(socket: &Path) -> Result<NodeStats, ClientError> {
    Client::connect(socket)?.stats()
}

/// Carries out migrations through pcmd.
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
}
