//! PCM's event stream: what a job does, as typed, timestamped data
//! ([`pcm_proto::run::Stamped`] around a [`RunEvent`]) for the programs that follow it.
//! Log lines (`tracing`) are for people; these are for programs.
//!
//! Two sinks, set by [`crate::Config`] (either, both or none; none by default):
//! - standard error, with `PCMRUN_EVENTS=stderr` (pcmrun sets it) or `PCM_EVENTS=stderr`:
//!   one `PCMRUN-EVENT {json}` line per event. pcmrun reads them to tell a job that lost a
//!   process (restart it from a checkpoint) from one that ended by itself (never restart
//!   it), and to show progress;
//! - a file, with `PCM_EVENTS=/absolute/path`: one JSON line per event, appended with
//!   `O_APPEND` and one `write` per line, so that every rank (on a shared file system,
//!   every host) can share one file. Benchmarks, figures and tests read it.
//!
//! What is reported: each process's start ([`RunEvent::Started`]) and exit
//! ([`RunEvent::Exited`]), rank 0's loop start and progress (at most once per
//! `PCM_PROGRESS_PERIOD`, default 1 s), checkpoints, restarts, each migration with its phase
//! timings, every store and load call, and aborts; at `Pcm::finalize`, a last progress event
//! with the iterations done. Programs without PCM can write the same loop start and
//! progress events through [`start_without_pcm`], [`loop_started`], [`progress`] and
//! [`final_progress`] (heat2d-plain does), so that one reader serves both.
//!
//! The exit is seen through glibc's `on_exit`, which receives the status the process passes
//! to `exit` (returning from `main` included); a killed process runs no handler, which is
//! exactly what tells pcmrun it was lost.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use pcm_proto::run::{RunEvent, Stamped};
use pcm_proto::{HostName, Rank};

use crate::config::Config;
pub use crate::config::DEFAULT_PROGRESS_PERIOD;
use crate::error::PcmError;

/// Whether events go to standard error.
static STDERR: AtomicBool = AtomicBool::new(false);
/// The event file, once opened.
static FILE: OnceLock<std::fs::File> = OnceLock::new();
/// This process's rank, or [`NO_RANK`] before it is known.
static RANK: AtomicU32 = AtomicU32::new(NO_RANK);
const NO_RANK: u32 = u32::MAX;
/// Least time between two progress events, in microseconds.
static PROGRESS_PERIOD_US: AtomicU64 = AtomicU64::new(1_000_000);
/// Whether this process reported (or must not report) the loop start.
static LOOP_REPORTED: AtomicBool = AtomicBool::new(false);

fn enabled() -> bool {
    STDERR.load(Ordering::Relaxed) || FILE.get().is_some()
}

/// Turns the sinks of `config` on (opening the event file), once per process: a second
/// call only updates the stderr switch and the progress period.
///
/// # Errors
/// [`PcmError::Config`] naming `PCM_EVENTS` when the event file cannot be opened.
pub(crate) fn configure(config: &Config) -> Result<(), PcmError> {
    STDERR.store(config.events.stderr, Ordering::Relaxed);
    PROGRESS_PERIOD_US.store(
        u64::try_from(config.progress_period.as_micros()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    if let Some(path) = &config.events.file {
        if FILE.get().is_none() {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| PcmError::Config {
                    variable: pcm_proto::run::EVENTS_FILE_ENV,
                    value: path.display().to_string(),
                    reason: format!("cannot open the event file: {e}"),
                })?;
            // Another thread may have set it meanwhile; either file is the same path.
            let _ = FILE.set(file);
        }
    }
    Ok(())
}

/// Turns the event sinks of `config` on in a program that does not run PCM (plain MPI), as
/// rank `rank`, so that it can report its loop start and progress ([`loop_started`],
/// [`progress`]) exactly as a PCM program does. `config` is usually
/// [`Config::from_env`]`()?`: `PCM_EVENTS` and `PCM_PROGRESS_PERIOD` are the settings read.
///
/// # Errors
/// [`PcmError::Config`] naming `PCM_EVENTS` when the event file cannot be opened.
pub fn start_without_pcm(config: &Config, rank: u32) -> Result<(), PcmError> {
    set_rank(rank);
    configure(config)
}

/// Records this process's rank for the events' envelope.
pub(crate) fn set_rank(rank: u32) {
    RANK.store(rank, Ordering::Relaxed);
}

/// Writes `event`, stamped, to each sink as one line with one `write`, so that lines of
/// processes sharing the launcher's output or the file do not mix. Errors are ignored:
/// events never stop the job.
pub(crate) fn emit(event: RunEvent) {
    if !enabled() {
        return;
    }
    let rank = match RANK.load(Ordering::Relaxed) {
        NO_RANK => None,
        r => Some(Rank(r)),
    };
    let stamped = Stamped::now(rank, event);
    if STDERR.load(Ordering::Relaxed) {
        let _ = std::io::stderr()
            .lock()
            .write_all(stamped.to_line().as_bytes());
    }
    if let Some(mut file) = FILE.get() {
        let _ = file.write_all(stamped.to_json_line().as_bytes());
    }
}

/// Reports that the application's loop starts at `iteration`, once per process (later calls
/// do nothing). Call it on rank 0 right before the loop; PCM programs need not (PCM reports
/// it at the first status check).
pub fn loop_started(iteration: u64) {
    if enabled() && !LOOP_REPORTED.swap(true, Ordering::Relaxed) {
        emit(RunEvent::LoopStarted { iteration });
    }
}

/// Whether the loop start is still to be reported (cheap: for the status check's hot path).
pub(crate) fn loop_start_pending() -> bool {
    !LOOP_REPORTED.load(Ordering::Relaxed)
}

/// A replacement joins a loop that started long before: it never reports the start.
pub(crate) fn loop_joined() {
    LOOP_REPORTED.store(true, Ordering::Relaxed);
}

/// Reports that `iteration` iterations are done, at most once per progress period (the
/// first call always). Call it on rank 0; PCM programs need not (PCM reports at its status
/// checks).
pub fn progress(iteration: u64) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    if !enabled() {
        return;
    }
    let period = Duration::from_micros(PROGRESS_PERIOD_US.load(Ordering::Relaxed));
    let now = Instant::now();
    let Ok(mut last) = LAST.lock() else {
        return;
    };
    if last.is_some_and(|t| now.duration_since(t) < period) {
        return;
    }
    *last = Some(now);
    drop(last);
    emit(RunEvent::Progress { iteration });
}

/// Reports that the loop ended with `iteration` iterations done, whatever the period: the
/// run's last progress event, so that even a run shorter than one period shows its rate.
/// Call it on rank 0 after the loop; PCM programs need not (`Pcm::finalize` does).
pub fn final_progress(iteration: u64) {
    if enabled() {
        emit(RunEvent::Progress { iteration });
    }
}

/// One store (`stored: true`) or load call on `name` of `bytes` bytes that began at `started`.
pub(crate) fn store_call(stored: bool, name: &str, bytes: usize, started: Instant) {
    if !enabled() {
        return;
    }
    let (name, bytes) = (name.to_owned(), bytes as u64);
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    emit(if stored {
        RunEvent::Stored {
            name,
            bytes,
            micros,
        }
    } else {
        RunEvent::Loaded {
            name,
            bytes,
            micros,
        }
    });
}

/// Host of this process, for the exit event (set once, by [`started`]).
static HOST: OnceLock<HostName> = OnceLock::new();

extern "C" fn report_exit(status: libc::c_int, _arg: *mut libc::c_void) {
    if let Some(host) = HOST.get() {
        emit(RunEvent::Exited {
            pid: std::process::id(),
            host: host.clone(),
            code: status,
        });
    }
}

/// Reports that this process finished `Pcm::init` as `rank`, and arranges for its exit
/// status to be reported. Once per process.
pub(crate) fn started(rank: u32, host: &HostName, replacement: bool) {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    set_rank(rank);
    if !enabled() || REGISTERED.swap(true, Ordering::SeqCst) {
        return;
    }
    let _ = HOST.set(host.clone());
    if !crate::ffi::on_exit(report_exit) {
        tracing::warn!("cannot watch this process's exit (on_exit failed): pcmrun will take its end for a crash");
    }
    emit(RunEvent::Started {
        rank: Rank(rank),
        pid: std::process::id(),
        host: host.clone(),
        replacement,
    });
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The file sink itself: two writers (threads here, ranks in a job; each line is one
    /// `write` to an `O_APPEND` file either way) leave whole lines, each an event, in each
    /// writer's order.
    #[test]
    fn given_two_writers_on_the_event_file_then_every_line_is_a_whole_event() {
        let dir = std::env::temp_dir().join(format!("pcm-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events.jsonl");
        let _ = std::fs::remove_file(&path);
        let mut config = Config::default();
        config.events.file = Some(path.clone());
        configure(&config).unwrap();
        const EACH: u64 = 2000;
        let writers: Vec<_> = (0..2u32)
            .map(|w| {
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        emit(RunEvent::Stored {
                            name: format!("events-test-writer {w} {}", "x".repeat(200)),
                            bytes: i,
                            micros: 1,
                        });
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let events = Stamped::parse_file(&text);
        assert_eq!(
            text.lines().count(),
            events.len(),
            "a line was not an event"
        );
        let mut next: BTreeMap<String, u64> = BTreeMap::new();
        for e in &events {
            // Other tests of this process may store meanwhile: only this test's lines count.
            let RunEvent::Stored { name, bytes, .. } = &e.event else {
                continue;
            };
            if !name.starts_with("events-test-writer") {
                continue;
            }
            assert_eq!(e.pid, std::process::id());
            let n = next.entry(name.clone()).or_default();
            assert_eq!(*bytes, *n, "{name}: lines out of order");
            *n += 1;
        }
        assert_eq!(next.values().copied().collect::<Vec<_>>(), [EACH, EACH]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
