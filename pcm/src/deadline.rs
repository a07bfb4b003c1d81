//! A deadline on the collective part of a reconfiguration, so that a replacement that stalls
//! while starting cannot hang the job.
//!
//! Spawn, merge, hand-over and split are blocking MPI calls that every process of the
//! parents' world and the replacements must enter. If one replacement never gets there
//! (stopped, stuck in `MPI_Init`, swapping, killed while the runtime does not notice), the
//! others wait inside `MPI_Comm_spawn_multiple` or `MPI_Intercomm_merge` forever: neither
//! Open MPI 4 nor MPICH 5 times out (docs/architecture.md, "When a reconfiguration stalls").
//! A blocking MPI call cannot be cancelled, so each process arms a [`Watchdog`] before the
//! first collective call and disarms it after the last. If it fires, the watchdog thread
//! logs which reconfiguration stalled in which phase ([`PcmError::ReconfigurationStalled`]),
//! reports the failure to the node's pcmd when this rank delivered the request, and ends the
//! whole job with `MPI_Abort` and exit status [`RECONFIGURE_TIMEOUT_EXIT`].
//!
//! Ending the job is the only safe answer: the world is half-reconfigured and no MPI call
//! can be trusted to return. Checkpoints already taken are untouched (they are written
//! whole and renamed into place before they count), so the job can be restarted from the
//! newest one with `PCM_RESTART=1`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pcm_proto::{HostName, Move, Outcome, RequestId, ToDaemon};

use crate::daemon::Reporter;
use crate::error::{PcmError, Phase, Stall};
use crate::ffi;

/// Exit status of a job ended because a reconfiguration missed its deadline (passed to
/// `MPI_Abort`; `mpirun` and `mpiexec` exit with it). 75 is `EX_TEMPFAIL` of sysexits.h:
/// a temporary failure, worth retrying (restart from the newest checkpoint).
pub const RECONFIGURE_TIMEOUT_EXIT: i32 = 75;

/// How long a rank that reports the failure to its pcmd waits for the report to be written.
const REPORT_FLUSH: Duration = Duration::from_secs(1);
/// How long the other ranks wait before aborting, so that the rank that reports to pcmd
/// (whose abort would kill them) and the parents (who know the request) go first.
const REPORTER_HEAD_START: Duration = Duration::from_secs(2);
/// How long every process waits between logging and aborting: the log line travels through
/// the launcher's output forwarding (hydra's proxy, Open MPI's iof), and an abort tears that
/// down; without the pause MPICH jobs sometimes ended with status 75 and no line at all.
const OUTPUT_FLUSH: Duration = Duration::from_millis(500);
/// How long `MPI_Abort` may take before the process ends itself.
const ABORT_GRACE: Duration = Duration::from_secs(10);

/// Which side of the protocol a process is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// A rank of the world being reconfigured (staying or departing).
    Parent,
    /// A freshly spawned replacement.
    Replacement,
}

/// What the watchdog knows about the reconfiguration it guards, for its error message.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    pub(crate) side: Side,
    /// This process's rank: in the old world for a parent, the rank taken over for a
    /// replacement (unknown until the hand-over arrives).
    pub(crate) rank: Option<u32>,
    /// This process's host.
    pub(crate) host: HostName,
    /// The pcmd requests being carried out; none for a `PCM_SCHEDULE` move.
    pub(crate) requests: Vec<RequestId>,
    /// The moves (unknown to a replacement until the hand-over arrives).
    pub(crate) moves: Vec<Move>,
    /// The iteration at which the job reconfigures, when known.
    pub(crate) iteration: Option<u64>,
}

pub(crate) use pcm_proto::describe_moves;

impl Context {
    fn stalled(&self, phase: Phase, timeout: Duration) -> PcmError {
        PcmError::ReconfigurationStalled(Box::new(Stall {
            request: match self.requests.as_slice() {
                [] => "scheduled reconfiguration (PCM_SCHEDULE)".to_owned(),
                [one] => format!("migration {one}"),
                many => format!("migrations {}", crate::plan::list_ids(many.iter().copied())),
            },
            moves: describe_moves(&self.moves),
            phase,
            side: match self.side {
                Side::Parent => "rank",
                Side::Replacement => "replacement for rank",
            },
            rank: self
                .rank
                .map_or_else(|| "(not known yet)".to_owned(), |r| r.to_string()),
            host: self.host.to_string(),
            iteration: self
                .iteration
                .map_or_else(|| "(not known yet)".to_owned(), |i| i.to_string()),
            timeout_s: timeout.as_secs_f64(),
        }))
    }
}

#[derive(Debug)]
struct Shared {
    phase: AtomicU8,
    context: Mutex<Context>,
    /// Set when the reconfiguration finished; the condition variable wakes the thread.
    disarmed: Mutex<bool>,
    wake: Condvar,
}

/// Ends the job if the reconfiguration has not finished by its deadline. Dropping it (or
/// [`Watchdog::disarm`]) stops the thread.
#[derive(Debug)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts the watchdog: it fires `timeout` from now unless disarmed. `reporter` is the
    /// link to the node's pcmd, with the requests this rank delivered, when it delivered
    /// any (it reports their failure there).
    pub(crate) fn arm(
        context: Context,
        timeout: Duration,
        reporter: Option<(Reporter, Vec<RequestId>)>,
    ) -> Self {
        let shared = Arc::new(Shared {
            phase: AtomicU8::new(Phase::Spawn as u8),
            context: Mutex::new(context),
            disarmed: Mutex::new(false),
            wake: Condvar::new(),
        });
        let thread_shared = Arc::clone(&shared);
        let deadline = Instant::now() + timeout;
        let thread = std::thread::Builder::new()
            .name("pcm-reconfigure-watchdog".into())
            .spawn(move || watch(thread_shared, deadline, timeout, reporter))
            // Without the thread the reconfiguration still runs, only unguarded.
            .map_err(|e| tracing::warn!("could not start the reconfiguration watchdog: {e}"))
            .ok();
        Watchdog { shared, thread }
    }

    /// Records the phase the process enters (what the error names if the deadline passes).
    pub(crate) fn enter(&self, phase: Phase) {
        self.shared.phase.store(phase as u8, Ordering::Release);
    }

    /// Lets the watchdog name more (a replacement learns its rank and the moves from the
    /// hand-over).
    pub(crate) fn update(&self, f: impl FnOnce(&mut Context)) {
        let mut context = self
            .shared
            .context
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        f(&mut context);
    }

    /// The reconfiguration finished in time: stop the thread.
    pub(crate) fn disarm(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        {
            let mut disarmed = self
                .shared
                .disarmed
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            *disarmed = true;
        }
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            // The thread wakes at once; once it has fired it never returns (the process
            // ends), and the main thread is stuck in MPI then anyway.
            let _ = thread.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // An error return out of the protocol also ends the guard: the caller gets the error.
        self.stop();
    }
}

fn watch(
    shared: Arc<Shared>,
    deadline: Instant,
    timeout: Duration,
    reporter: Option<(Reporter, Vec<RequestId>)>,
) {
    let mut disarmed = shared.disarmed.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if *disarmed {
            return;
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        // Spurious wake-ups and notifications just loop.
        disarmed = shared
            .wake
            .wait_timeout(disarmed, deadline - now)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    drop(disarmed);
    let phase = Phase::from_u8(shared.phase.load(Ordering::Acquire));
    let context = shared
        .context
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    fire(&context, phase, timeout, reporter);
}

/// The deadline passed: say what stalled, tell pcmd, end the job.
fn fire(
    context: &Context,
    phase: Phase,
    timeout: Duration,
    reporter: Option<(Reporter, Vec<RequestId>)>,
) -> ! {
    let error = context.stalled(phase, timeout);
    tracing::error!(
        "{error}; ending the job with exit status {RECONFIGURE_TIMEOUT_EXIT} (checkpoints already taken stay usable: restart with PCM_RESTART=1)"
    );
    let reported = match reporter {
        Some((reporter, held_here)) if !held_here.is_empty() => {
            for request in held_here {
                let message = ToDaemon::ReconfigurationFinished {
                    request,
                    outcome: Outcome::Failed {
                        reason: error.to_string(),
                    },
                };
                if !reporter.send_and_flush(message, REPORT_FLUSH) {
                    tracing::warn!("could not report the failure of {request} to pcmd in time");
                }
            }
            true
        }
        _ => false,
    };
    crate::events::emit(pcm_proto::run::RunEvent::Aborting {
        code: RECONFIGURE_TIMEOUT_EXIT,
        reason: error.to_string(),
    });
    std::thread::sleep(OUTPUT_FLUSH);
    // The rank that reports to pcmd, and the parents when a replacement fired, go first:
    // the first MPI_Abort ends every process, and the report would be lost with them.
    if !reported && (!context.requests.is_empty() || context.side == Side::Replacement) {
        std::thread::sleep(REPORTER_HEAD_START);
    }
    // If MPI_Abort hangs (the runtime waits for the stalled process too) or returns, the
    // process still ends with the documented status.
    let _ = std::thread::Builder::new()
        .name("pcm-abort-grace".into())
        .spawn(|| {
            std::thread::sleep(ABORT_GRACE);
            ffi::exit_now(RECONFIGURE_TIMEOUT_EXIT)
        });
    ffi::abort(RECONFIGURE_TIMEOUT_EXIT);
    ffi::exit_now(RECONFIGURE_TIMEOUT_EXIT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcm_proto::Rank;

    #[test]
    fn stalled_error_names_request_rank_host_and_phase() {
        let context = Context {
            side: Side::Parent,
            rank: Some(0),
            host: HostName::new("node-a").unwrap(),
            requests: vec![RequestId(7)],
            moves: vec![Move {
                rank: Rank(1),
                to: Some(HostName::new("node-b").unwrap()),
            }],
            iteration: Some(40),
        };
        let text = context
            .stalled(Phase::Merge, Duration::from_secs(5))
            .to_string();
        for part in ["migration #7", "rank 1 to node-b", "merge", "node-a", "40"] {
            assert!(text.contains(part), "{part:?} missing from {text:?}");
        }
        let together = Context {
            requests: vec![RequestId(9), RequestId(7)],
            ..context
        };
        let text = together
            .stalled(Phase::Spawn, Duration::from_secs(5))
            .to_string();
        assert!(text.contains("migrations #9 and #7"), "{text:?}");
    }

    #[test]
    fn disarmed_watchdog_does_not_fire() {
        let context = Context {
            side: Side::Parent,
            rank: Some(0),
            host: HostName::new("node-a").unwrap(),
            requests: Vec::new(),
            moves: Vec::new(),
            iteration: None,
        };
        let watchdog = Watchdog::arm(context, Duration::from_millis(50), None);
        watchdog.enter(Phase::Split);
        watchdog.disarm();
        // Firing would end this test process with status 75.
        std::thread::sleep(Duration::from_millis(100));
    }
}
