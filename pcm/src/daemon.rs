//! The rank's link to the pcmd of its node: a background thread that registers the rank,
//! reports progress about once a second, queues reconfiguration requests for the next
//! status check, and reports outcomes.
//!
//! The thread never calls MPI. The application never waits for it: the status path reads
//! one atomic, and a missing or dead daemon only means no requests arrive. When the daemon
//! goes away the thread retries quietly, so a restarted daemon picks the rank up again.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pcm_proto::{
    ClientKind, FrameReader, FromDaemon, Move, Rank, RequestId, Resize, ToDaemon, PROTOCOL_VERSION,
};

/// How often progress is reported.
const PROGRESS_PERIOD: Duration = Duration::from_secs(1);
/// With profiling on, the profile carries the iteration and a separate progress report goes
/// only every this many periods, and every period while no profile comes (so that a rank
/// stuck inside one iteration still shows its rate fall, and is not taken for stalled): it
/// halves the messages pcmd handles.
const PROGRESS_EVERY_WITH_PROFILE: u64 = 5;
/// How long to wait before reconnecting to a missing daemon.
const RECONNECT_PERIOD: Duration = Duration::from_secs(2);
/// Read timeout of the socket: also the thread's tick.
const TICK: Duration = Duration::from_millis(100);
/// How long the handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests queued at most; more are refused with a log line (a controller gone wild).
const MAX_PENDING: usize = 16;
/// Request ids remembered as done, so a redelivered request is not acted on twice.
const MAX_DONE: usize = 64;

/// What the rank tells the daemon about itself (the `Register` message).
pub(crate) type Registration = ToDaemon;

/// State shared between the rank's main thread and the link thread.
#[derive(Debug, Default)]
struct Shared {
    /// Iterations completed, written by the status path.
    iteration: AtomicU64,
    /// Reconfigurations the job has completed (its epoch), reported with progress.
    reconfigurations: AtomicU64,
    /// Largest pending request id (0: none): what the status check reads.
    pending_max: AtomicU64,
    queue: Mutex<Queue>,
    stop: AtomicBool,
    connected: AtomicBool,
    /// Set with each progress report: the next status call sends the rank's profile.
    profile_due: AtomicBool,
    /// Whether the rank sends profiles.
    profiling: AtomicBool,
    /// What the rank registers as on each (re)connection: its number and the job's width
    /// change in a resize.
    registration: Mutex<Option<Registration>>,
    /// Messages put in the outbox so far, and how many of them the thread has written to
    /// the daemon or dropped (disconnected): lets [`Reporter::send_and_flush`] wait for its
    /// own message.
    queued: AtomicU64,
    handled: AtomicU64,
}

/// A request received and not yet taken up by a status check.
#[derive(Debug)]
struct Pending {
    id: RequestId,
    moves: Vec<Move>,
    epoch: u64,
    resize: Option<Resize>,
}

#[derive(Debug, Default)]
struct Queue {
    pending: VecDeque<Pending>,
    /// Requests settled here: taken up by a status check, or withdrawn at the daemon's
    /// request. A settled request never runs again, nor for the first time: if the job
    /// agrees on it later (another rank still held it), this rank makes the job drop it.
    done: VecDeque<RequestId>,
}

impl Queue {
    fn max_id(&self) -> u64 {
        self.pending.iter().map(|p| p.id.0).max().unwrap_or(0)
    }

    fn max_id_below(&self, below: u64) -> u64 {
        self.pending
            .iter()
            .map(|p| p.id.0)
            .filter(|&id| id < below)
            .max()
            .unwrap_or(0)
    }

    fn settle(&mut self, id: RequestId) {
        self.done.push_back(id);
        if self.done.len() > MAX_DONE {
            self.done.pop_front();
        }
    }
}

/// What a rank knows of a request the job agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Take {
    /// It was pending here; now taken up.
    Held {
        /// What it moves.
        moves: Vec<Move>,
        /// The job's epoch the daemon made it in.
        epoch: u64,
        /// The new width it asks for with the moves, if any.
        resize: Option<Resize>,
    },
    /// It was settled here before: taken up by an earlier check, or withdrawn after its
    /// deadline. The job must drop it.
    Settled,
    /// This rank never received it.
    Absent,
}

/// Handle held by `Pcm`; dropping it stops the thread.
#[derive(Debug)]
pub(crate) struct DaemonLink {
    shared: Arc<Shared>,
    outbox: Sender<ToDaemon>,
    thread: Option<JoinHandle<()>>,
}

impl DaemonLink {
    /// Starts the link thread. It connects in the background; nothing here blocks.
    pub(crate) fn start(path: PathBuf, registration: Registration) -> Self {
        let shared = Arc::new(Shared {
            registration: Mutex::new(Some(registration)),
            ..Shared::default()
        });
        let (outbox, inbox) = mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("pcm-daemon-link".into())
            .spawn(move || run(path, thread_shared, inbox))
            .map_err(|e| tracing::warn!("could not start the pcmd link thread: {e}"))
            .ok();
        DaemonLink {
            shared,
            outbox,
            thread,
        }
    }

    /// Records progress; called on every status call, so it is one relaxed store.
    #[inline]
    pub(crate) fn set_iteration(&self, iteration: u64) {
        self.shared.iteration.store(iteration, Ordering::Relaxed);
    }

    /// Tells the link whether the rank sends profiles (which then carry its progress).
    pub(crate) fn set_profiling(&self, on: bool) {
        self.shared.profiling.store(on, Ordering::Relaxed);
    }

    /// Whether the rank should send its profile now (clears the request). One relaxed load
    /// on the status path when nothing is due.
    #[inline]
    pub(crate) fn profile_due(&self) -> bool {
        self.shared.profile_due.load(Ordering::Relaxed)
            && self.shared.profile_due.swap(false, Ordering::Relaxed)
    }

    /// Largest pending request id, 0 when none: the rank's input to the status check.
    #[inline]
    pub(crate) fn pending_max(&self) -> u64 {
        self.shared.pending_max.load(Ordering::Acquire)
    }

    /// Largest pending request id below `below`, 0 when none: the rank's input when the
    /// job looks for more requests to carry out at a check (ids count down from the
    /// highest, so a request read while the check goes on cannot make it loop).
    pub(crate) fn pending_max_below(&self, below: RequestId) -> u64 {
        pending_max_below(&self.shared, below)
    }

    /// Takes up a request the job agreed on: removes it from the queue and returns its
    /// moves if this rank holds it, or says it was settled here before.
    pub(crate) fn take(&self, id: RequestId) -> Take {
        take(&self.shared, id)
    }

    /// Tells the link how many reconfigurations the job has completed.
    pub(crate) fn set_reconfigurations(&self, count: u64) {
        self.shared.reconfigurations.store(count, Ordering::Relaxed);
    }

    /// Tells the daemon that a resize made this process rank `rank` of `size` ranks, the job
    /// having completed `reconfigurations` (the resize included), and registers it so from
    /// now on should the link reconnect.
    pub(crate) fn renumber(&self, rank: u32, size: u32, reconfigurations: u64) {
        {
            let mut registration = self
                .shared
                .registration
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(ToDaemon::Register {
                rank: registered,
                size: registered_size,
                reconfigurations: registered_epoch,
                ..
            }) = registration.as_mut()
            {
                *registered = Rank(rank);
                *registered_size = size;
                *registered_epoch = reconfigurations;
            }
        }
        self.set_reconfigurations(reconfigurations);
        self.send(ToDaemon::Renumbered {
            rank: Rank(rank),
            size,
            reconfigurations,
        });
    }

    /// Whether the daemon connection is up (for diagnostics).
    pub(crate) fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::Relaxed)
    }

    /// Queues a message for the daemon; dropped if the daemon is not reachable.
    pub(crate) fn send(&self, message: ToDaemon) {
        queue(&self.shared, &self.outbox, message);
    }

    /// A handle another thread can report through (the reconfiguration watchdog, which
    /// must report while the main thread, owner of the link, is stuck in MPI).
    pub(crate) fn reporter(&self) -> Reporter {
        Reporter {
            shared: Arc::clone(&self.shared),
            outbox: self.outbox.clone(),
        }
    }

    /// Sends what is queued (waiting at most `timeout`) and stops the thread.
    pub(crate) fn shutdown(mut self, timeout: Duration) {
        self.stop_and_wait(timeout);
    }

    fn stop_and_wait(&mut self, timeout: Duration) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let deadline = Instant::now() + timeout;
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for DaemonLink {
    fn drop(&mut self) {
        self.stop_and_wait(Duration::from_millis(200));
    }
}

fn pending_max_below(shared: &Shared, below: RequestId) -> u64 {
    let queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
    queue.max_id_below(below.0)
}

fn take(shared: &Shared, id: RequestId) -> Take {
    let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
    if queue.done.contains(&id) {
        return Take::Settled;
    }
    let Some(position) = queue.pending.iter().position(|p| p.id == id) else {
        return Take::Absent;
    };
    let Some(pending) = queue.pending.remove(position) else {
        return Take::Absent;
    };
    queue.settle(id);
    shared.pending_max.store(queue.max_id(), Ordering::Release);
    Take::Held {
        moves: pending.moves,
        epoch: pending.epoch,
        resize: pending.resize,
    }
}

/// Puts a message in the outbox, counted; returns its ticket (see `Shared::queued`).
fn queue(shared: &Shared, outbox: &Sender<ToDaemon>, message: ToDaemon) -> u64 {
    let ticket = shared.queued.fetch_add(1, Ordering::AcqRel) + 1;
    if outbox.send(message).is_err() {
        // The thread is gone: nobody will handle it.
        shared.handled.fetch_add(1, Ordering::AcqRel);
    }
    ticket
}

/// Sends messages to the daemon from a thread other than the rank's main thread.
#[derive(Debug)]
pub(crate) struct Reporter {
    shared: Arc<Shared>,
    outbox: Sender<ToDaemon>,
}

impl Reporter {
    /// Queues `message` and waits, at most `timeout`, until the link thread has written it.
    /// Returns whether it was written to a connected daemon.
    pub(crate) fn send_and_flush(&self, message: ToDaemon, timeout: Duration) -> bool {
        let ticket = queue(&self.shared, &self.outbox, message);
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.shared.handled.load(Ordering::Acquire) >= ticket {
                return self.shared.connected.load(Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }
}

fn run(path: PathBuf, shared: Arc<Shared>, inbox: Receiver<ToDaemon>) {
    let mut warned = false;
    while !shared.stop.load(Ordering::Acquire) {
        match UnixStream::connect(&path) {
            Ok(stream) => {
                warned = false;
                match session(stream, &shared, &inbox) {
                    Ok(()) => return,
                    Err(e) => tracing::warn!(
                        "lost the pcmd at {}: {e}; the run carries on",
                        path.display()
                    ),
                }
                shared.connected.store(false, Ordering::Relaxed);
            }
            Err(e) => {
                if !warned {
                    tracing::debug!(
                        "no pcmd at {} ({e}); running without a daemon",
                        path.display()
                    );
                    warned = true;
                }
                // Nothing can be delivered while disconnected; keep only recent outcomes.
                drain_while_disconnected(&inbox, &shared);
            }
        }
        let until = Instant::now() + RECONNECT_PERIOD;
        while Instant::now() < until && !shared.stop.load(Ordering::Acquire) {
            std::thread::sleep(TICK);
        }
    }
}

fn drain_while_disconnected(inbox: &Receiver<ToDaemon>, shared: &Shared) {
    while inbox.try_recv().is_ok() {
        shared.handled.fetch_add(1, Ordering::AcqRel);
    }
}

/// One connection's life. `Ok` when asked to stop, `Err` when the connection failed.
fn session(
    mut stream: UnixStream,
    shared: &Shared,
    inbox: &Receiver<ToDaemon>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(TICK))?;
    let mut reader = FrameReader::new();
    let hello = ToDaemon::Hello {
        version: PROTOCOL_VERSION,
        client: ClientKind::Rank,
    };
    stream.write_all(&pcm_proto::encode(&hello))?;
    expect_reply(&mut stream, &mut reader, |m| {
        matches!(m, FromDaemon::Welcome { .. })
    })?;
    // Who the rank is now (a resize renumbers it), as of the epoch it last reported.
    let mut registration = shared
        .registration
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .ok_or_else(|| std::io::Error::other("no registration"))?;
    if let ToDaemon::Register {
        reconfigurations, ..
    } = &mut registration
    {
        *reconfigurations =
            (*reconfigurations).max(shared.reconfigurations.load(Ordering::Relaxed));
    }
    stream.write_all(&pcm_proto::encode(&registration))?;
    expect_reply(&mut stream, &mut reader, |m| {
        matches!(m, FromDaemon::Registered)
    })?;
    shared.connected.store(true, Ordering::Relaxed);
    tracing::debug!("registered with pcmd");

    let mut last_progress = Instant::now() - PROGRESS_PERIOD;
    let mut periods = 0u64;
    // The epoch pcmd last heard from this link: a new one is reported at once, so that a
    // request pcmd makes just after a move is not refused as superseded for want of news.
    let mut reported_reconfigurations = shared.reconfigurations.load(Ordering::Relaxed);
    let mut buffer = [0u8; 4096];
    loop {
        let stopping = shared.stop.load(Ordering::Acquire);
        loop {
            match inbox.try_recv() {
                Ok(message) => {
                    let written = stream.write_all(&pcm_proto::encode(&message));
                    shared.handled.fetch_add(1, Ordering::AcqRel);
                    written?;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Ok(()),
            }
        }
        let reconfigurations = shared.reconfigurations.load(Ordering::Relaxed);
        let epoch_changed = reconfigurations != reported_reconfigurations;
        if epoch_changed {
            let iteration = shared.iteration.load(Ordering::Relaxed);
            stream.write_all(&pcm_proto::encode(&ToDaemon::Progress {
                iteration,
                reconfigurations,
            }))?;
            reported_reconfigurations = reconfigurations;
        }
        if stopping || last_progress.elapsed() >= PROGRESS_PERIOD {
            let profiling = shared.profiling.load(Ordering::Relaxed);
            // A profile asked for a period ago and not sent means the main thread is stuck
            // (waiting in MPI for a stopped peer, say): report progress every period then,
            // or pcmd, hearing nothing, would show this running rank as stalled.
            let profile_missed = shared.profile_due.load(Ordering::Relaxed);
            if stopping
                || !profiling
                || profile_missed
                || periods % PROGRESS_EVERY_WITH_PROFILE == 0
            {
                let iteration = shared.iteration.load(Ordering::Relaxed);
                stream.write_all(&pcm_proto::encode(&ToDaemon::Progress {
                    iteration,
                    reconfigurations,
                }))?;
            }
            periods += 1;
            last_progress = Instant::now();
            shared.profile_due.store(true, Ordering::Relaxed);
        }
        if stopping {
            stream.flush()?;
            return Ok(());
        }
        match stream.read(&mut buffer) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "pcmd closed the connection",
                ))
            }
            Ok(n) => {
                reader.feed(&buffer[..n]);
                while let Some(message) = reader.next_message::<FromDaemon>().map_err(invalid)? {
                    if let Some(reply) = handle(message, shared) {
                        stream.write_all(&pcm_proto::encode(&reply))?;
                    }
                }
            }
            Err(e) if retry_read(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Acts on a message from the daemon; returns the answer to send, if any.
fn handle(message: FromDaemon, shared: &Shared) -> Option<ToDaemon> {
    match message {
        FromDaemon::ReconfigurationRequested {
            request,
            moves,
            epoch,
            resize,
        } => {
            let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            if queue.done.contains(&request) || queue.pending.iter().any(|p| p.id == request) {
                tracing::debug!("request {request} delivered again; already known");
                return None;
            }
            if queue.pending.len() >= MAX_PENDING {
                tracing::warn!(
                    "dropping reconfiguration request {request}: {MAX_PENDING} already pending"
                );
                return None;
            }
            if request.0 == 0 {
                // 0 means "no request" in the status check's agreement.
                tracing::warn!("ignoring a reconfiguration request with id 0");
                return None;
            }
            tracing::debug!(
                "reconfiguration request {request} received: {moves:?}, resize {resize:?}"
            );
            queue.pending.push_back(Pending {
                id: request,
                moves,
                epoch,
                resize,
            });
            shared.pending_max.store(queue.max_id(), Ordering::Release);
            None
        }
        FromDaemon::CancelReconfiguration { request } => {
            let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            let Some(position) = queue.pending.iter().position(|p| p.id == request) else {
                // Taken up already (its end will be reported), or never received.
                tracing::debug!("request {request} cannot be withdrawn here: not pending");
                return None;
            };
            queue.pending.remove(position);
            // Settled: should the job still agree on it (a rank that had not seen the
            // cancellation proposed it), this rank makes it drop it.
            queue.settle(request);
            shared.pending_max.store(queue.max_id(), Ordering::Release);
            tracing::info!("reconfiguration request {request} withdrawn after its deadline");
            Some(ToDaemon::ReconfigurationCancelled { request })
        }
        FromDaemon::Error { kind, message } => {
            tracing::warn!("pcmd refused a message ({kind:?}): {message}");
            None
        }
        other => {
            tracing::debug!("ignoring unexpected message from pcmd: {other:?}");
            None
        }
    }
}

/// Whether a failed read of the pcmd link only means "nothing yet": the read timeout ran out,
/// or a signal interrupted the call. A rank stopped with SIGSTOP and resumed with SIGCONT
/// gets `EINTR` from its timed read, and treating that as a lost daemon deregistered the rank
/// for about 2 s.
fn retry_read(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

fn invalid(e: pcm_proto::FrameError) -> std::io::Error {
    std::io::Error::new(ErrorKind::InvalidData, e)
}

fn expect_reply(
    stream: &mut UnixStream,
    reader: &mut FrameReader,
    wanted: impl Fn(&FromDaemon) -> bool,
) -> std::io::Result<()> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let mut buffer = [0u8; 4096];
    loop {
        if let Some(message) = reader.next_message::<FromDaemon>().map_err(invalid)? {
            if wanted(&message) {
                return Ok(());
            }
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                format!("unexpected answer from pcmd during handshake: {message:?}"),
            ));
        }
        if Instant::now() > deadline {
            return Err(std::io::Error::new(
                ErrorKind::TimedOut,
                "pcmd did not answer the handshake",
            ));
        }
        match stream.read(&mut buffer) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "pcmd closed the connection",
                ))
            }
            Ok(n) => reader.feed(&buffer[..n]),
            Err(e) if retry_read(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcm_proto::{AppName, FromDaemon, HostName, JobId, Outcome, Rank};
    use std::os::unix::net::UnixListener;

    /// Reads one message from a blocking stream.
    fn read_message(stream: &mut UnixStream, reader: &mut FrameReader) -> ToDaemon {
        let mut buffer = [0u8; 4096];
        loop {
            if let Some(message) = reader.next_message::<ToDaemon>().unwrap() {
                return message;
            }
            let n = stream.read(&mut buffer).unwrap();
            assert!(n > 0, "the link closed the connection");
            reader.feed(&buffer[..n]);
        }
    }

    /// The watchdog's path: a report sent from another thread than the link's owner reaches
    /// the daemon before `send_and_flush` returns true.
    #[test]
    fn reporter_flushes_a_message_to_a_connected_daemon() {
        let dir = std::env::temp_dir().join(format!("pcm-reporter-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pcmd.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let host = HostName::new("node-a").unwrap();
        let registration = ToDaemon::Register {
            job: JobId::new("job-1").unwrap(),
            app: AppName::new("test").unwrap(),
            rank: Rank(0),
            size: 1,
            host: host.clone(),
            pid: std::process::id(),
            replacement: false,
            reconfigurations: 0,
        };
        let link = DaemonLink::start(path.clone(), registration);

        let (mut stream, _) = listener.accept().unwrap();
        let mut reader = FrameReader::new();
        assert!(matches!(
            read_message(&mut stream, &mut reader),
            ToDaemon::Hello { .. }
        ));
        let welcome = FromDaemon::Welcome {
            version: PROTOCOL_VERSION,
            host,
        };
        stream.write_all(&pcm_proto::encode(&welcome)).unwrap();
        assert!(matches!(
            read_message(&mut stream, &mut reader),
            ToDaemon::Register { .. }
        ));
        stream
            .write_all(&pcm_proto::encode(&FromDaemon::Registered))
            .unwrap();
        while !link.is_connected() {
            std::thread::sleep(Duration::from_millis(5));
        }

        let reporter = link.reporter();
        let report = ToDaemon::ReconfigurationFinished {
            request: RequestId(7),
            outcome: Outcome::Failed {
                reason: "stalled in the spawn phase".into(),
            },
        };
        let sent =
            std::thread::spawn(move || reporter.send_and_flush(report, Duration::from_secs(5)));
        assert!(sent.join().unwrap(), "the report was not flushed");
        loop {
            match read_message(&mut stream, &mut reader) {
                ToDaemon::ReconfigurationFinished { request, outcome } => {
                    assert_eq!(request, RequestId(7));
                    assert!(matches!(outcome, Outcome::Failed { .. }));
                    break;
                }
                // Progress reports may come first.
                _ => continue,
            }
        }
        drop(link);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn requested(id: u64, rank: u32) -> FromDaemon {
        FromDaemon::ReconfigurationRequested {
            request: RequestId(id),
            moves: vec![Move {
                rank: Rank(rank),
                to: None,
            }],
            epoch: 3,
            resize: None,
        }
    }

    /// Item 13: a pending request is withdrawn on the daemon's word, answered, and from
    /// then on settled: should the job still agree on it, this rank makes it drop it.
    #[test]
    fn given_a_pending_request_when_cancelled_then_it_is_answered_and_settled() {
        let shared = Shared::default();
        assert_eq!(handle(requested(5, 1), &shared), None);
        assert_eq!(shared.pending_max.load(Ordering::Acquire), 5);
        let reply = handle(
            FromDaemon::CancelReconfiguration {
                request: RequestId(5),
            },
            &shared,
        );
        assert_eq!(
            reply,
            Some(ToDaemon::ReconfigurationCancelled {
                request: RequestId(5)
            })
        );
        assert_eq!(shared.pending_max.load(Ordering::Acquire), 0);
        assert_eq!(take(&shared, RequestId(5)), Take::Settled);
        // Redelivery does not revive it.
        assert_eq!(handle(requested(5, 1), &shared), None);
        assert_eq!(shared.pending_max.load(Ordering::Acquire), 0);
    }

    /// Requests held together are found from the highest down, each once: taking one up
    /// leaves the lower ones to find, and a request read during the search but higher than
    /// where it stands is left for the next check.
    #[test]
    fn given_several_pending_requests_then_each_lower_one_is_found_in_turn() {
        let shared = Shared::default();
        for id in [4, 9, 6] {
            assert_eq!(handle(requested(id, 1), &shared), None);
        }
        assert_eq!(shared.pending_max.load(Ordering::Acquire), 9);
        assert!(matches!(take(&shared, RequestId(9)), Take::Held { .. }));
        assert_eq!(pending_max_below(&shared, RequestId(9)), 6);
        assert_eq!(handle(requested(12, 1), &shared), None);
        assert!(matches!(take(&shared, RequestId(6)), Take::Held { .. }));
        assert_eq!(pending_max_below(&shared, RequestId(6)), 4);
        assert_eq!(pending_max_below(&shared, RequestId(4)), 0);
        assert_eq!(shared.pending_max.load(Ordering::Acquire), 12);
    }

    /// Item 13: a request already taken up cannot be withdrawn: no answer (its end is
    /// reported instead), and taking it again says it is settled.
    #[test]
    fn given_a_taken_request_when_cancelled_then_no_answer() {
        let shared = Shared::default();
        handle(requested(9, 0), &shared);
        assert_eq!(
            take(&shared, RequestId(9)),
            Take::Held {
                moves: vec![Move {
                    rank: Rank(0),
                    to: None
                }],
                epoch: 3,
                resize: None,
            }
        );
        let cancel = FromDaemon::CancelReconfiguration {
            request: RequestId(9),
        };
        assert_eq!(handle(cancel, &shared), None);
        assert_eq!(take(&shared, RequestId(9)), Take::Settled);
        assert_eq!(take(&shared, RequestId(10)), Take::Absent);
    }

    #[test]
    fn reporter_without_a_daemon_gives_up_within_its_timeout() {
        let path = std::env::temp_dir().join(format!(
            "pcm-reporter-test-none-{}/pcmd.sock",
            std::process::id()
        ));
        let registration = ToDaemon::Progress {
            iteration: 0,
            reconfigurations: 0,
        };
        let link = DaemonLink::start(path, registration);
        let started = Instant::now();
        let sent = link.reporter().send_and_flush(
            ToDaemon::Progress {
                iteration: 1,
                reconfigurations: 0,
            },
            Duration::from_millis(300),
        );
        assert!(!sent);
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    /// A request with a resize keeps it until a status check takes it up.
    #[test]
    fn given_a_request_with_a_resize_then_taking_it_gives_the_resize() {
        let shared = Shared::default();
        let resize = Resize {
            ranks: 3,
            hosts: Vec::new(),
        };
        let message = FromDaemon::ReconfigurationRequested {
            request: RequestId(8),
            moves: Vec::new(),
            epoch: 2,
            resize: Some(resize.clone()),
        };
        assert_eq!(handle(message, &shared), None);
        assert_eq!(
            take(&shared, RequestId(8)),
            Take::Held {
                moves: Vec::new(),
                epoch: 2,
                resize: Some(resize),
            }
        );
    }

    /// After a resize the link tells pcmd the new number and width, and would register
    /// with them (and the new epoch) if it reconnected.
    #[test]
    fn given_a_renumbered_rank_then_its_registration_follows() {
        let path = std::env::temp_dir().join(format!(
            "pcm-renumber-test-none-{}/pcmd.sock",
            std::process::id()
        ));
        let registration = ToDaemon::Register {
            job: JobId::new("job-1").unwrap(),
            app: AppName::new("test").unwrap(),
            rank: Rank(2),
            size: 3,
            host: HostName::new("node-a").unwrap(),
            pid: 1,
            replacement: false,
            reconfigurations: 4,
        };
        let link = DaemonLink::start(path, registration);
        link.renumber(1, 2, 5);
        let registered = link.shared.registration.lock().unwrap().clone();
        assert!(
            matches!(
                registered,
                Some(ToDaemon::Register {
                    rank: Rank(1),
                    size: 2,
                    reconfigurations: 5,
                    ..
                })
            ),
            "{registered:?}"
        );
        assert_eq!(link.shared.reconfigurations.load(Ordering::Relaxed), 5);
    }
}
