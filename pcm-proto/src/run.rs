//! Events of a PCM process, as data: for the launcher that supervises its job (`pcmrun`),
//! and for programs that follow a job (benchmarks, figures, tests).
//!
//! `pcmrun` must tell a job that ended by itself (finished, or failed with an error of its
//! own) from one that lost a process (a crash, an OOM kill, a host taken away) or that PCM
//! ended because a replacement stalled: only the last two are worth a restart from a
//! checkpoint. Exit statuses cannot tell them apart (hydra's `mpiexec` exits with 9 both
//! when a rank calls `exit(9)` and when one is killed by signal 9), so each PCM process
//! reports when it starts and how it exits, and rank 0 reports the job's progress.
//! Benchmarks and tests need the same facts and a few more (when the loop started, each
//! migration's phase timings, each store and load), with times they can compare across
//! processes: every event travels in a [`Stamped`] envelope (wall-clock time, pid, rank).
//!
//! Two sinks, either or both:
//! - standard error ([`EVENTS_ENV`]` = stderr`, what pcmrun sets), which every launcher
//!   forwards to the machine that started the job without a shared file system or a network
//!   port: each event is one line, [`EVENT_PREFIX`] followed by the envelope as JSON.
//!   `pcmrun` removes these lines from the output it passes on;
//! - a file (`PCM_EVENTS=/absolute/path`): the envelope as one JSON line per event
//!   ([`Stamped::to_json_line`]), appended (`O_APPEND`) so that the ranks of a host, or of
//!   every host on a shared file system, can share one file.
//!
//! Each line is written with a single `write`, so lines of different processes do not mix.
//! A line that does not parse is ordinary output (on stderr) or refused (in a file), never
//! trusted.

use serde::{Deserialize, Serialize};

use crate::{HostName, PhaseTimings, Rank};

/// Environment variable that turns the events on standard error on (`pcmrun` sets it to
/// `stderr`).
pub const EVENTS_ENV: &str = "PCMRUN_EVENTS";

/// Environment variable naming the event file (`PCM_EVENTS=/absolute/path`; `stderr` is
/// the same as [`EVENTS_ENV`]` = stderr`; `off` or unset: no file).
pub const EVENTS_FILE_ENV: &str = "PCM_EVENTS";

/// The environment variable that turns UCX's memory hooks off, and the value, for MPICH
/// jobs: pcmrun puts it in a job's environment unless the user set it, and PCM's rank 0 says
/// when a job runs without it. UCX installs the hooks when it is loaded, before `main`:
/// about 40 ms of every process start on this project's machines, spawned replacements
/// included, needed only by RDMA transports' registration caches (docs/benchmarks.md,
/// "Towards a 50 ms move").
pub const UCX_MEM_EVENTS_OFF: (&str, &str) = ("UCX_MEM_EVENTS", "no");

/// Environment variable setting the least time between two [`RunEvent::Progress`] events,
/// in seconds (fractions allowed; default 1).
pub const PROGRESS_PERIOD_ENV: &str = "PCM_PROGRESS_PERIOD";

/// Start of every event line on standard error.
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
    /// Rank 0 is about to run the application's loop from `iteration` (0, or the iteration
    /// of the checkpoint a restarted job resumed from): the time base of the progress.
    LoopStarted {
        /// First iteration of the loop.
        iteration: u64,
    },
    /// Rank 0 has completed `iteration` iterations (at most once per `PCM_PROGRESS_PERIOD`,
    /// at the status checks).
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
    /// Rank 0 of the old world: a reconfiguration moved ranks and is complete.
    Migrated {
        /// Iteration at which the job reconfigured.
        iteration: u64,
        /// Each moved rank and its new host.
        placed: Vec<(Rank, HostName)>,
        /// The slowest rank's time in each phase, and the bytes of state moved.
        timings: PhaseTimings,
    },
    /// Rank 0 of the new world: a resize (docs/malleability.md) is complete.
    Resized {
        /// Iteration at which the job reconfigured.
        iteration: u64,
        /// Width before.
        from: u32,
        /// Width after.
        to: u32,
        /// Host of every rank of the new world, by rank.
        hosts: Vec<HostName>,
        /// The slowest rank's time in each phase, and the bytes of state moved.
        timings: PhaseTimings,
    },
    /// One `store` call of this process (for a move or a checkpoint).
    Stored {
        /// Name of the stored value or array.
        name: String,
        /// Bytes stored.
        bytes: u64,
        /// Time the call took, microseconds.
        micros: u64,
    },
    /// One `load` call of this process (a replacement or a restarted rank taking its state).
    Loaded {
        /// Name of the loaded value or array.
        name: String,
        /// Bytes loaded.
        bytes: u64,
        /// Time the call took, microseconds.
        micros: u64,
    },
    /// Rank 0 checked, before a spawn there, that the launcher reaches `host`, which is
    /// outside the job's allocation (`PCM_ALLOW_NEW_HOSTS=1`).
    HostProbed {
        /// The host.
        host: HostName,
        /// Whether the launcher reached it (if not, the move is refused and nothing runs).
        reached: bool,
        /// Time the check took, microseconds.
        micros: u64,
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

/// An event with when and by whom: the unit of both sinks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stamped {
    /// Wall-clock time it was emitted, microseconds since the Unix epoch (so that events
    /// of processes on different hosts compare, within their clocks' agreement). An integer:
    /// it reads back exactly. [`Stamped::time`] gives seconds.
    pub unix_us: u64,
    /// Process id of the emitter.
    pub pid: u32,
    /// Its rank in the job's world, when known (an abort early in `Pcm::init` has none).
    pub rank: Option<Rank>,
    /// What happened.
    pub event: RunEvent,
}

impl Stamped {
    /// `event` emitted now by this process as `rank`.
    pub fn now(rank: Option<Rank>, event: RunEvent) -> Stamped {
        // A clock before 1970 is a broken clock; 0 keeps the event usable for its content.
        let unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Stamped {
            unix_us,
            pid: std::process::id(),
            rank,
            event,
        }
    }

    /// When it was emitted, seconds since the Unix epoch.
    pub fn time(&self) -> f64 {
        self.unix_us as f64 / 1e6
    }

    /// The envelope as one JSON line, newline included (the file sink's line).
    pub fn to_json_line(&self) -> String {
        // Serialising these plain types cannot fail; an empty object keeps the line
        // well-formed (and refused by readers).
        let json = serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned());
        format!("{json}\n")
    }

    /// The envelope in a JSON line of an event file (newline optional), or `None` when it is
    /// not a well-formed event.
    pub fn from_json_line(line: &str) -> Option<Stamped> {
        serde_json::from_str(line.trim_end_matches(['\r', '\n'])).ok()
    }

    /// The envelope as one line of standard error, [`EVENT_PREFIX`] first, newline included.
    pub fn to_line(&self) -> String {
        format!("{EVENT_PREFIX}{}", self.to_json_line())
    }

    /// The envelope in a line of standard error (without its newline), or `None` when the
    /// line is ordinary output or not a well-formed event.
    pub fn from_line(line: &str) -> Option<Stamped> {
        Stamped::from_json_line(
            line.trim_end_matches(['\r', '\n'])
                .strip_prefix(EVENT_PREFIX)?,
        )
    }

    /// The event in a line of a launcher's merged standard error, and the offset where it
    /// starts: 0 for a line of its own, more when another process's output came first. A
    /// launcher interleaves its ranks' standard error by whole writes, and an event is one
    /// write; but a line another rank writes in pieces (`eprintln!` on Rust's unbuffered
    /// standard error makes several writes) can be cut by it, as seen with Open MPI:
    /// `heat2d` + an event line + `: --rows 1 is less ...`. The text before the event is
    /// the start of that other line. `None` when the line holds no well-formed event.
    pub fn find_in_output(line: &[u8]) -> Option<(usize, Stamped)> {
        let marker = EVENT_PREFIX.as_bytes();
        let mut from = 0;
        while let Some(offset) = line
            .get(from..)?
            .windows(marker.len())
            .position(|w| w == marker)
        {
            let at = from + offset;
            let event = std::str::from_utf8(&line[at..])
                .ok()
                .and_then(Stamped::from_line);
            if let Some(event) = event {
                return Some((at, event));
            }
            from = at + 1;
        }
        None
    }

    /// Every well-formed event of an event file's text, in file order; other lines (a line
    /// cut short by a writer that was killed, say) are skipped.
    pub fn parse_file(text: &str) -> Vec<Stamped> {
        text.lines().filter_map(Stamped::from_json_line).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_event() -> Vec<RunEvent> {
        let host = HostName::new("node-a").unwrap();
        vec![
            RunEvent::Started {
                rank: Rank(3),
                pid: 42,
                host: host.clone(),
                replacement: true,
            },
            RunEvent::LoopStarted { iteration: 0 },
            RunEvent::Progress { iteration: 7 },
            RunEvent::Checkpointed { iteration: 9 },
            RunEvent::Restarted { iteration: 9 },
            RunEvent::Migrated {
                iteration: 11,
                placed: vec![(Rank(1), host.clone())],
                timings: PhaseTimings {
                    agree_us: 1,
                    spawn_us: 2,
                    merge_split_us: 3,
                    state_transfer_us: 4,
                    state_bytes: 5,
                },
            },
            RunEvent::Stored {
                name: "grid \"a\"".into(),
                bytes: 800,
                micros: 12,
            },
            RunEvent::Loaded {
                name: "grid".into(),
                bytes: 800,
                micros: 3,
            },
            RunEvent::HostProbed {
                host: host.clone(),
                reached: true,
                micros: 1500,
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
        ]
    }

    #[test]
    fn given_each_event_then_both_lines_parse_back_to_it() {
        for (i, event) in every_event().into_iter().enumerate() {
            let rank = (i % 2 == 0).then_some(Rank(i as u32));
            let stamped = Stamped::now(rank, event);
            assert!(stamped.time() > 1.6e9, "{stamped:?}");
            for line in [stamped.to_line(), stamped.to_json_line()] {
                assert!(
                    line.ends_with('\n') && line.matches('\n').count() == 1,
                    "{line:?}"
                );
            }
            assert_eq!(
                Stamped::from_line(&stamped.to_line()),
                Some(stamped.clone())
            );
            assert_eq!(
                Stamped::from_json_line(&stamped.to_json_line()),
                Some(stamped.clone())
            );
            // Each sink's line is refused by the other's reader.
            assert_eq!(Stamped::from_line(&stamped.to_json_line()), None);
        }
    }

    #[test]
    fn given_ordinary_or_garbled_lines_then_no_event() {
        for line in [
            "heat2d: iteration 5/10 3.0 it/s",
            "PCMRUN-EVENT",
            "PCMRUN-EVENT {",
            "PCMRUN-EVENT {\"event\":\"progress\",\"iteration\":1}",
            "PCMRUN-EVENT {\"unix_us\":1,\"pid\":1,\"rank\":0,\"event\":{\"event\":\"exited\",\"pid\":\"x\"}}",
            "PCMRUN-EVENT {\"unix_us\":1,\"pid\":1,\"rank\":null,\"event\":{\"event\":\"started\",\"rank\":0,\"pid\":1,\"host\":\"bad host\",\"replacement\":false}}",
            "PCMRUN-EVENT {\"unix_us\":1,\"pid\":1,\"rank\":0,\"event\":{\"event\":\"teleported\"}}",
            " PCMRUN-EVENT {\"unix_us\":1,\"pid\":1,\"rank\":0,\"event\":{\"event\":\"progress\",\"iteration\":1}}",
        ] {
            assert_eq!(Stamped::from_line(line), None, "{line}");
        }
        for line in [
            "",
            "{}",
            "{\"unix_us\":1,\"pid\":1,\"rank\":0,\"event\":{\"event\":\"progress\",\"iter",
            "{\"unix_us\":-1,\"pid\":1,\"rank\":0,\"event\":{\"event\":\"progress\",\"iteration\":1}}",
        ] {
            assert_eq!(Stamped::from_json_line(line), None, "{line}");
        }
        // The same line well-formed is an event: the lines above fail for their flaw.
        let line = "{\"unix_us\":1,\"pid\":1,\"rank\":0,\"event\":{\"event\":\"progress\",\"iteration\":1}}";
        assert!(Stamped::from_json_line(line).is_some());
        assert!(Stamped::from_line(&format!("PCMRUN-EVENT {line}")).is_some());
        let good = Stamped::now(None, RunEvent::Progress { iteration: 4 });
        let text = format!(
            "{}{{\"unix_us\":1,\"pid\n{}",
            good.to_json_line(),
            good.to_json_line()
        );
        assert_eq!(Stamped::parse_file(&text), vec![good.clone(), good]);
    }

    /// An event line that landed after the first part of another rank's line is found, and
    /// the text before it is given back; ordinary and garbled lines hold no event.
    #[test]
    fn given_an_event_after_part_of_another_line_then_it_is_found_and_the_part_kept() {
        let event = Stamped::now(Some(Rank(1)), RunEvent::Progress { iteration: 3 });
        let line = event.to_line();
        assert_eq!(
            Stamped::find_in_output(line.as_bytes()),
            Some((0, event.clone()))
        );
        let cut = format!("heat2d{line}");
        assert_eq!(
            Stamped::find_in_output(cut.as_bytes()),
            Some((6, event.clone()))
        );
        // Bytes that are not UTF-8 before it, and a false marker first.
        let mut bytes = vec![0xff, 0xfe, b'x'];
        bytes.extend_from_slice(b"PCMRUN-EVENT {oops PCMRUN-EVENT ");
        let false_marker = bytes.len() - EVENT_PREFIX.len();
        bytes.truncate(false_marker);
        bytes.extend_from_slice(line.as_bytes());
        assert_eq!(Stamped::find_in_output(&bytes), Some((false_marker, event)));
        for line in [
            "heat2d: iteration 5/10 3.0 it/s\n",
            "heat2dPCMRUN-EVENT {\n",
            "PCMRUN-EVENT",
            "",
        ] {
            assert_eq!(Stamped::find_in_output(line.as_bytes()), None, "{line}");
        }
    }
}
