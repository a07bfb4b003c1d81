//! Events a PCM process reports to the launcher that supervises its job (`pcmrun`).
//!
//! `pcmrun` must tell a job that ended by itself (finished, or failed with an error of its
//! own) from one that lost a process (a crash, an OOM kill, a host taken away) or that PCM
//! ended because a replacement stalled: only the last two are worth a restart from a
//! checkpoint. Exit statuses cannot tell them apart (hydra's `mpiexec` exits with 9 both
//! when a rank calls `exit(9)` and when one is killed by signal 9), so each PCM process
//! reports when it starts and how it exits, and rank 0 reports the job's progress.
//!
//! The channel is the ranks' standard error, which every launcher forwards to the machine
//! that started the job without a shared file system or a network port: when
//! [`EVENTS_ENV`] is set, each event is one line, [`EVENT_PREFIX`] followed by the event as
//! JSON, written with a single `write` so that lines of different processes do not mix.
//! `pcmrun` removes these lines from the output it passes on; without `pcmrun` nothing is
//! written. A line that does not parse is passed on as ordinary output, never trusted.

use serde::{Deserialize, Serialize};

use crate::{HostName, Rank};

/// Environment variable that turns the events on (`pcmrun` sets it to `stderr`).
pub const EVENTS_ENV: &str = "PCMRUN_EVENTS";

/// Start of every event line.
pub const EVENT_PREFIX: &str = "PCMRUN-EVENT ";

/// One event of one PCM process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// A process finished `Pcm::init`: a rank of the original launch, a replacement spawned
    /// by a migration, or a rank of a restarted job.
    Started {
        /// Its rank in the job's world.
        rank: Rank,
        /// Its process id on `host`.
        pid: u32,
        /// Where it runs.
        host: HostName,
        /// Whether a migration spawned it.
        replacement: bool,
    },
    /// Rank 0 has completed `iteration` iterations (about once a second).
    Progress {
        /// Iterations done.
        iteration: u64,
    },
    /// Rank 0: a coordinated checkpoint of `iteration` is complete on every rank.
    Checkpointed {
        /// Iteration of the checkpoint.
        iteration: u64,
    },
    /// Rank 0: the job resumed from the checkpoint of `iteration` (`PCM_RESTART`).
    Restarted {
        /// Iteration the job resumed from.
        iteration: u64,
    },
    /// Rank 0: a reconfiguration moved ranks.
    Migrated {
        /// Iteration at which the job reconfigured.
        iteration: u64,
        /// Each moved rank and its new host.
        placed: Vec<(Rank, HostName)>,
    },
    /// A process is ending the whole job with `MPI_Abort` (a reconfiguration that missed its
    /// deadline: `code` 75, worth a restart).
    Aborting {
        /// The exit status passed to `MPI_Abort`.
        code: i32,
        /// Why, for people.
        reason: String,
    },
    /// A process exited by itself (returned from `main` or called `exit`) with `code`.
    /// A process that is killed never sends it.
    Exited {
        /// Its process id on `host`.
        pid: u32,
        /// Where it ran.
        host: HostName,
        /// Its exit status.
        code: i32,
    },
}

impl RunEvent {
    /// The event as one line, newline included.
    pub fn to_line(&self) -> String {
        // Serialising these plain types cannot fail; an empty object keeps the line well-formed.
        let json = serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned());
        format!("{EVENT_PREFIX}{json}\n")
    }

    /// The event in `line` (without its newline), or `None` when the line is ordinary
    /// output or not a well-formed event.
    pub fn from_line(line: &str) -> Option<RunEvent> {
        let json = line
            .trim_end_matches(['\r', '\n'])
            .strip_prefix(EVENT_PREFIX)?;
        serde_json::from_str(json).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_each_event_then_its_line_parses_back_to_it() {
        let host = HostName::new("node-a").unwrap();
        let events = [
            RunEvent::Started {
                rank: Rank(3),
                pid: 42,
                host: host.clone(),
                replacement: true,
            },
            RunEvent::Progress { iteration: 7 },
            RunEvent::Checkpointed { iteration: 9 },
            RunEvent::Restarted { iteration: 9 },
            RunEvent::Migrated {
                iteration: 11,
                placed: vec![(Rank(1), host.clone())],
            },
            RunEvent::Aborting {
                code: 75,
                reason: "stalled \"spawn\"\nphase".into(),
            },
            RunEvent::Exited {
                pid: 42,
                host,
                code: -1,
            },
        ];
        for event in events {
            let line = event.to_line();
            assert!(
                line.ends_with('\n') && line.matches('\n').count() == 1,
                "{line:?}"
            );
            assert_eq!(RunEvent::from_line(&line), Some(event));
        }
    }

    #[test]
    fn given_ordinary_or_garbled_lines_then_no_event() {
        for line in [
            "heat2d: iteration 5/10 3.0 it/s",
            "PCMRUN-EVENT",
            "PCMRUN-EVENT {",
            "PCMRUN-EVENT {\"event\":\"exited\",\"pid\":\"x\"}",
            "PCMRUN-EVENT {\"event\":\"started\",\"rank\":0,\"pid\":1,\"host\":\"bad host\",\"replacement\":false}",
            " PCMRUN-EVENT {\"event\":\"progress\",\"iteration\":1}",
        ] {
            assert_eq!(RunEvent::from_line(line), None, "{line}");
        }
    }
}
