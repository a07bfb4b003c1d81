//! Events for the launcher that supervises the job (`pcmrun`), on standard error.
//!
//! With `PCMRUN_EVENTS=stderr` in the environment (pcmrun sets it), each process reports
//! when it starts and how it exits, and rank 0 reports progress, checkpoints, restarts and
//! migrations, as [`pcm_proto::run::RunEvent`] lines. pcmrun reads them to tell a job that
//! lost a process (restart it from a checkpoint) from one that ended by itself (never
//! restart it), and to show progress. Without the variable nothing is written.
//!
//! The exit is seen through glibc's `on_exit`, which receives the status the process passes
//! to `exit` (returning from `main` included); a killed process runs no handler, which is
//! exactly what tells pcmrun it was lost.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use pcm_proto::run::RunEvent;
use pcm_proto::{HostName, Rank};

/// Least time between two progress events.
const PROGRESS_PERIOD: Duration = Duration::from_secs(1);

static ENABLED: AtomicBool = AtomicBool::new(false);

fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Turns the events on or off (from [`crate::Config`]; `PCMRUN_EVENTS=stderr` turns them on).
pub(crate) fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Writes `event` as one line with one `write`, so that lines of processes sharing the
/// launcher's output do not mix. Errors are ignored: events never stop the job.
pub(crate) fn emit(event: &RunEvent) {
    if enabled() {
        let _ = std::io::stderr()
            .lock()
            .write_all(event.to_line().as_bytes());
    }
}

/// Rank 0's progress, at most once per [`PROGRESS_PERIOD`].
pub(crate) fn progress(iteration: u64) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    if !enabled() {
        return;
    }
    let now = Instant::now();
    let Ok(mut last) = LAST.lock() else {
        return;
    };
    if last.is_some_and(|t| now.duration_since(t) < PROGRESS_PERIOD) {
        return;
    }
    *last = Some(now);
    drop(last);
    emit(&RunEvent::Progress { iteration });
}

/// Host of this process, for the exit event (set once, by [`started`]).
static HOST: OnceLock<HostName> = OnceLock::new();

extern "C" fn report_exit(status: libc::c_int, _arg: *mut libc::c_void) {
    if let Some(host) = HOST.get() {
        emit(&RunEvent::Exited {
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
    if !enabled() || REGISTERED.swap(true, Ordering::SeqCst) {
        return;
    }
    let _ = HOST.set(host.clone());
    if !crate::ffi::on_exit(report_exit) {
        tracing::warn!("cannot watch this process's exit (on_exit failed): pcmrun will take its end for a crash");
    }
    emit(&RunEvent::Started {
        rank: Rank(rank),
        pid: std::process::id(),
        host: host.clone(),
        replacement,
    });
}
