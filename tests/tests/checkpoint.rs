//! Coordinated checkpoints and restart, with real mpirun jobs and pcmds: a rank killed with
//! SIGKILL, a node's pcmd killed and its files deleted (the buddy's copy is used), and a
//! flipped byte in the newest checkpoint (the previous one is used, and the log says why).
//! Each restart must end with exactly the checksum of `heat2d-plain`.
//!
//! Also the checkpoint channels under attack: malformed, truncated and oversized frames, a
//! wrong first frame, and a wrong pool key, on the ranks' socket and on the buddy port. The
//! daemon answers with an error, closes only that connection, and keeps serving.
//!
//! The two "nodes" of the buddy test are two pcmds on 127.0.0.1.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mpi_ios_tests::{
    bin, complete_checkpoints, mpi_lock, pcmd_status, read_events, wait_until, Group, MpiJob,
};
use pcm_proto::checkpoint::{
    self as ckpt, expect_frame, write_frame, Request, Response, Series, FORMAT_VERSION,
};
use pcm_proto::run::RunEvent;
use pcm_proto::{AppName, Rank};

/// Half a second to two seconds of heat2d, depending on the machine: the checkpoint interval
/// is a fraction of it, as measured by the plain run ([`interval`]).
const ARGS: &[&str] = &["--rows", "400", "--cols", "400", "--iters", "20000"];
const DEADLINE: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(60);
const KEY: &str = "/key/swarm/psk/1.0.0/\n/base16/\n\
    5f3c0e1d2a4b69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0\n";
const OTHER_KEY: &str = "/key/swarm/psk/1.0.0/\n/base16/\n\
    00000000000000000000000000000000000000000000000000000000000000ff\n";

/// A `pcmd serve` with a checkpoint directory, killed on drop.
struct Node {
    group: Option<Group>,
    socket: PathBuf,
    store: PathBuf,
    dir: PathBuf,
    args: Vec<String>,
    starts: usize,
}

impl Node {
    fn start(dir: &Path, name: &str, extra: &[String]) -> Node {
        let mut node = Node {
            group: None,
            socket: dir.join(format!("{name}.sock")),
            store: dir.join(format!("{name}-store")),
            dir: dir.to_owned(),
            args: extra.to_vec(),
            starts: 0,
        };
        node.spawn();
        node
    }

    fn spawn(&mut self) {
        let mut command = Command::new(bin("pcmd"));
        command
            .arg("--socket")
            .arg(&self.socket)
            .arg("serve")
            .arg("--checkpoint-dir")
            .arg(&self.store)
            .args(&self.args)
            .env("RUST_LOG", "info,pcmd=debug");
        self.starts += 1;
        let label = format!(
            "{}-{}",
            self.socket.file_stem().unwrap().to_string_lossy(),
            self.starts
        );
        let group = Group::start(command, &self.dir, &label);
        let ckpt_socket = ckpt::socket_path(&self.socket);
        wait_until(WAIT, "pcmd to listen", || {
            UnixStream::connect(&ckpt_socket).is_ok()
        });
        self.group = Some(group);
    }

    fn kill(&mut self) {
        if let Some(mut g) = self.group.take() {
            g.kill();
        }
    }

    fn log(&self) -> String {
        self.group
            .as_ref()
            .map(Group::stderr_so_far)
            .unwrap_or_default()
    }

    /// Iterations of the complete checkpoints of the 2-rank job.
    fn complete(&self) -> Vec<u64> {
        complete_checkpoints(&self.store, "heat2d-2r")
    }

    /// Process id of `rank` of the job, from `pcmd status --json`.
    fn rank_pid(&self, rank: u64) -> Option<u32> {
        let status = pcmd_status(&self.socket).ok()?;
        Some(status.rank(Rank(u32::try_from(rank).ok()?))?.pid)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The plain run of [`ARGS`] on 2 ranks, run once per test process (under the MPI lock the
/// caller holds): its checksum and the seconds its loop took.
fn plain_run() -> &'static (String, f64) {
    static PLAIN: std::sync::OnceLock<(String, f64)> = std::sync::OnceLock::new();
    PLAIN.get_or_init(|| {
        let report = MpiJob::new(2, "heat2d-plain", ARGS).run(DEADLINE).report();
        (report.reference_checksum().to_owned(), report.seconds)
    })
}

fn plain() -> String {
    plain_run().0.clone()
}

/// `PCM_CHECKPOINT_INTERVAL` for runs to be killed: a tenth of the plain run's loop (at most
/// the 0.25 s these tests were written with), so that the first checkpoints complete early in
/// the run on any machine. A fixed 0.25 s let a fast machine (20,000 iterations in 0.55 s)
/// write its second checkpoint at iteration 19,073 and finish before the kill.
fn interval() -> String {
    let seconds = (plain_run().1 / 10.0).clamp(0.02, 0.25);
    format!("{seconds:.3}")
}

fn job(node: &Node) -> MpiJob {
    MpiJob::new(2, "heat2d", ARGS)
        .env("PCM_DAEMON", node.socket.display().to_string())
        .env("PCM_CHECKPOINT_INTERVAL", interval())
}

/// Runs heat2d until `ready` holds, then kills rank 1 with SIGKILL; returns the output of
/// the failed run.
fn run_and_kill_rank(node: &Node, dir: &Path, ready: impl Fn() -> bool) -> String {
    run_and_kill(job(node), node, dir, ready)
}

/// [`run_and_kill_rank`] of `job`, whose ranks register with `node`.
fn run_and_kill(job: MpiJob, node: &Node, dir: &Path, ready: impl Fn() -> bool) -> String {
    let mut run = job.start(dir, "killed");
    wait_until(WAIT, "checkpoints to be written", || {
        assert!(
            run.running(),
            "heat2d ended before the kill: {}",
            run.stderr_so_far()
        );
        ready()
    });
    let pid = node
        .rank_pid(1)
        .expect("rank 1 is registered with the pcmd");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let finished = run.wait(DEADLINE);
    assert_ne!(
        finished.code,
        Some(0),
        "the job survived the kill of a rank"
    );
    finished.stderr
}

/// Restarts with `PCM_RESTART=1`; returns the checksum, the restart iteration and stderr.
fn restart(node: &Node) -> (String, u64, String) {
    restart_as(job(node), "1")
}

/// Restarts `job` with `PCM_RESTART=mode`; returns what [`restart`] does.
fn restart_as(job: MpiJob, mode: &str) -> (String, u64, String) {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let finished = job
        .env("PCM_RESTART", mode)
        .env("PCM_EVENTS", events.display().to_string())
        .run(DEADLINE);
    let report = finished.report();
    let stderr = finished.stderr;
    let iteration = read_events(&events)
        .into_iter()
        .find_map(|e| match e.event {
            RunEvent::Restarted { iteration } => Some(iteration),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no restart event:\n{stderr}"));
    assert_eq!(report.iterations, 20000);
    (report.checksum, iteration, stderr)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn key_file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn given_a_rank_killed_mid_run_when_restarted_then_checksum_equals_plain() {
    let _lock = mpi_lock();
    let reference = plain();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "a", &[]);
    run_and_kill_rank(&node, dir.path(), || !node.complete().is_empty());
    let newest = *node.complete().last().unwrap();
    let (checksum, iteration, _) = restart(&node);
    assert_eq!(checksum, reference, "restart changed the result");
    assert!(iteration > 0 && iteration < 20000, "restart at {iteration}");
    assert!(
        iteration >= newest,
        "restarted at {iteration}, newest was {newest}"
    );
}

/// Issue 39, item 5: a later fresh run of the same program and rank count that ends before
/// its first checkpoint leaves a killed job's checkpoints alone, and says at its start that
/// its first checkpoint would retire them; the killed job then restarts from them with the
/// plain checksum.
#[test]
fn given_a_killed_jobs_checkpoints_then_a_short_fresh_run_warns_and_leaves_them_for_its_restart() {
    let _lock = mpi_lock();
    let reference = plain();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "a", &[]);
    run_and_kill_rank(&node, dir.path(), || !node.complete().is_empty());
    let kept = node.complete();
    let short = MpiJob::new(
        2,
        "heat2d",
        &["--rows", "64", "--cols", "64", "--iters", "50"],
    )
    .env("PCM_DAEMON", node.socket.display().to_string())
    .env("PCM_CHECKPOINT_INTERVAL", "1000")
    .run(DEADLINE);
    assert_eq!(short.code, Some(0), "{}", short.stderr);
    assert!(
        short.stderr.contains("which did not finish")
            && short.stderr.contains("PCM_JOB_NAME")
            && short
                .stderr
                .contains(&format!("iteration {}", kept.last().unwrap())),
        "{}",
        short.stderr
    );
    assert_eq!(node.complete(), kept, "the short run's end retired them");
    let (checksum, iteration, _) = restart(&node);
    assert_eq!(checksum, reference, "restart changed the result");
    assert_eq!(iteration, *kept.last().unwrap());
}

/// A malleable job (heat2d) checkpointed with 4 ranks and killed restarts with 2 ranks, and
/// again with 3: each rank of the restart takes its rows of the grid from the 4 pieces
/// (docs/malleability.md), and both end with the plain checksum. The restart at 2 takes no
/// checkpoints of its own, so that the one at 3 finds the 4-rank checkpoint again.
#[test]
fn given_a_checkpoint_at_4_ranks_when_killed_then_restarts_at_2_and_3_end_with_the_plain_checksum()
{
    let _lock = mpi_lock();
    let reference = plain();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "a", &[]);
    let wide = MpiJob::new(4, "heat2d", ARGS)
        .env("PCM_DAEMON", node.socket.display().to_string())
        .env("PCM_CHECKPOINT_INTERVAL", interval());
    run_and_kill(wide, &node, dir.path(), || {
        !complete_checkpoints(&node.store, "heat2d-4r").is_empty()
    });
    let newest = *complete_checkpoints(&node.store, "heat2d-4r")
        .last()
        .unwrap();
    for ranks in [2, 3] {
        let narrower =
            MpiJob::new(ranks, "heat2d", ARGS).env("PCM_DAEMON", node.socket.display().to_string());
        let (checksum, iteration, stderr) = restart_as(narrower, "1");
        assert_eq!(
            checksum, reference,
            "restart at {ranks} ranks changed the result\n{stderr}"
        );
        assert_eq!(iteration, newest, "restart at {ranks} ranks\n{stderr}");
        assert!(
            stderr.contains(&format!("restarting with {ranks} ranks from the checkpoint at iteration {newest} taken with 4 ranks")),
            "{stderr}"
        );
    }
    assert!(
        complete_checkpoints(&node.store, "heat2d-2r").is_empty(),
        "the restart at 2 ranks wrote checkpoints"
    );
}

/// A job that is not malleable (the CG example) checkpointed with 2 ranks finds nothing to
/// resume with 3, and says why; it starts from the beginning, or with `require` fails.
#[test]
fn given_a_checkpoint_of_a_job_that_is_not_malleable_then_a_restart_at_another_width_says_why() {
    let _lock = mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "a", &[]);
    let args = &["400", "4000"];
    let cg = |ranks: usize| {
        MpiJob::new(ranks, "cg", args).env("PCM_DAEMON", node.socket.display().to_string())
    };
    let finished = cg(2).env("PCM_CHECKPOINT_INTERVAL", "0.05").run(DEADLINE);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert!(
        !complete_checkpoints(&node.store, "cg-2r").is_empty(),
        "cg took no checkpoint: {}",
        finished.stderr
    );
    let finished = cg(3).env("PCM_RESTART", "force").run(DEADLINE);
    assert!(
        finished.stderr.contains("was not taken in block form")
            && finished.stderr.contains("restart with 2 ranks"),
        "{}",
        finished.stderr
    );
    assert_eq!(finished.report().ranks, 3);
}

/// heat2d with checkpoints every 0.1 s on `node`, with `args` and `PCM_RESTART=restart`
/// (unset if `None`), run to its end.
fn run_with(node: &Node, args: &[&str], restart: Option<&str>) -> mpi_ios_tests::Finished {
    let mut job = MpiJob::new(2, "heat2d", args)
        .env("PCM_DAEMON", node.socket.display().to_string())
        .env("PCM_CHECKPOINT_INTERVAL", "0.1");
    if let Some(mode) = restart {
        job = job.env("PCM_RESTART", mode);
    }
    job.run(DEADLINE)
}

fn refused(finished: &mpi_ios_tests::Finished, what: &str) {
    assert_ne!(
        finished.code,
        Some(0),
        "{what}: the restart was not refused\n{}",
        finished.stderr
    );
    assert!(
        finished.stderr.contains("cannot restart: "),
        "{what}: no clear error\n{}",
        finished.stderr
    );
    assert!(
        !finished.stdout.contains("checksum"),
        "{what}: a refused restart printed a result\n{}",
        finished.stdout
    );
}

#[test]
fn given_a_finished_job_then_a_restart_with_other_arguments_or_the_same_is_refused() {
    let _lock = mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "a", &[]);
    let done = run_with(&node, ARGS, None);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    assert!(
        !node.complete().is_empty(),
        "the job took no checkpoint:\n{}",
        node.log()
    );

    // Seen from outside: a 200x200 restart printed the 400x400 checksum under its header.
    let other: Vec<&str> = ARGS
        .iter()
        .map(|a| if *a == "400" { "200" } else { *a })
        .collect();
    let finished = run_with(&node, &other, Some("1"));
    refused(&finished, "other arguments");
    assert!(
        finished.stderr.contains("--rows 400") && finished.stderr.contains("--rows 200"),
        "the error must name both computations:\n{}",
        finished.stderr
    );

    let finished = run_with(&node, ARGS, Some("1"));
    refused(&finished, "same arguments");
    assert!(
        finished.stderr.contains("already finished"),
        "{}",
        finished.stderr
    );

    // Told explicitly, it resumes the finished job's last checkpoint and computes the rest:
    // the same result as the plain run.
    let forced = run_with(&node, ARGS, Some("force"));
    assert_eq!(forced.report().checksum, plain());
    assert!(
        forced
            .stderr
            .contains("restarted from the checkpoint at iteration "),
        "{}",
        forced.stderr
    );
}

#[test]
fn given_a_fresh_start_after_a_finished_job_then_a_restart_resumes_the_new_job() {
    let _lock = mpi_lock();
    let reference = plain();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "a", &[]);
    let done = run_with(&node, ARGS, None);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let mark = node.store.join("heat2d-2r").join("finished");
    assert!(mark.exists(), "no finished mark:\n{}", node.log());
    // The new job's first complete checkpoint supersedes the finished one's (and its mark);
    // its iterations count from 0 again, below the old job's.
    run_and_kill_rank(&node, dir.path(), || !mark.exists());
    let (checksum, iteration, _) = restart(&node);
    assert_eq!(checksum, reference, "restart changed the result");
    assert!(iteration < 20000, "restart at {iteration}");
}

#[test]
fn given_no_checkpoint_then_restart_1_starts_fresh_and_restart_require_fails() {
    let _lock = mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "a", &[]);
    let short = ["--rows", "64", "--cols", "64", "--iters", "50"];
    let required = run_with(&node, &short, Some("require"));
    refused(&required, "require with nothing to resume");
    assert!(
        required.stderr.contains("PCM_RESTART=require"),
        "{}",
        required.stderr
    );
    let lenient = run_with(&node, &short, Some("1"));
    assert_eq!(lenient.report().iterations, 50);
    assert!(
        lenient.stderr.contains("starting from the beginning"),
        "{}",
        lenient.stderr
    );
}

#[test]
fn given_a_piece_over_the_pcmds_limit_then_the_rank_and_the_pcmd_say_why() {
    let _lock = mpi_lock();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "a", &["--max-piece-mib".into(), "1".into()]);
    // 1600 x 400 doubles: each of the 2 ranks stores about 2.5 MiB. Runs until stopped.
    let args = ["--rows", "1600", "--cols", "400", "--iters", "100000000"];
    let mut run = MpiJob::new(2, "heat2d", &args)
        .env("PCM_DAEMON", node.socket.display().to_string())
        .env("PCM_CHECKPOINT_INTERVAL", "0.1")
        .start(dir.path(), "oversized");
    wait_until(WAIT, "the refusal in the job's log", || {
        assert!(run.running(), "heat2d ended: {}", run.stderr_so_far());
        run.stderr_so_far().contains("exceeds this pcmd's limit")
    });
    let ranks = run.stderr_so_far();
    run.kill();
    // Seen before: the ranks got only "Broken pipe", and pcmd logged nothing.
    assert!(
        ranks.contains("pcmd refused the piece") && ranks.contains("--max-piece-mib"),
        "{ranks}"
    );
    assert!(
        node.log().contains("refused a checkpoint piece"),
        "{}",
        node.log()
    );
    assert!(
        node.complete().is_empty(),
        "an oversized checkpoint was kept"
    );
}

#[test]
fn given_the_node_pcmd_killed_and_its_files_deleted_then_the_buddy_copy_is_used() {
    let _lock = mpi_lock();
    let reference = plain();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pool.key", KEY);
    let port = free_port();
    let buddy_addr = format!("127.0.0.1:{port}");
    let buddy = Node::start(
        dir.path(),
        "b",
        &[
            "--listen".into(),
            buddy_addr.clone(),
            "--pool-key".into(),
            key.clone(),
        ],
    );
    let mut node = Node::start(
        dir.path(),
        "a",
        &["--buddy".into(), buddy_addr, "--pool-key".into(), key],
    );
    run_and_kill_rank(&node, dir.path(), || !buddy.complete().is_empty());
    wait_until(WAIT, "the copy to the buddy in the node's log", || {
        node.log().contains("to buddy")
    });
    // The node dies with its disk: a new pcmd starts with an empty directory.
    node.kill();
    assert!(!node.complete().is_empty());
    std::fs::remove_dir_all(&node.store).unwrap();
    node.spawn();
    let newest_at_buddy = *buddy.complete().last().unwrap();
    let (checksum, iteration, stderr) = restart(&node);
    assert_eq!(
        checksum, reference,
        "restart from the buddy changed the result"
    );
    assert_eq!(iteration, newest_at_buddy);
    assert!(
        stderr.contains("fetched from the buddy"),
        "ranks did not say the state came from the buddy:\n{stderr}"
    );
    assert!(node.log().contains("from buddy"), "{}", node.log());
}

/// One pcmd per node and user, shared by jobs: a job with its own directory
/// (`PCM_CHECKPOINT_DIR`) keeps its checkpoints there, not in the pcmd's `--checkpoint-dir`,
/// and resumes from there.
#[test]
fn given_a_job_checkpoint_dir_then_its_pieces_go_there_and_a_restart_resumes_from_it() {
    let _lock = mpi_lock();
    let reference = plain();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "a", &[]);
    // Missing, parents too: the pcmd creates it, private.
    let job_dir = dir
        .path()
        .join("home")
        .join("me")
        .join("heat2d-checkpoints");
    let in_job_dir = |job: MpiJob| job.env("PCM_CHECKPOINT_DIR", job_dir.display().to_string());
    let complete = || complete_checkpoints(&job_dir, "heat2d-2r");
    run_and_kill(in_job_dir(job(&node)), &node, dir.path(), || {
        !complete().is_empty()
    });
    let newest = *complete().last().unwrap();
    assert!(piece_exists(&job_dir, newest), "{:?}", walk(&job_dir));
    assert!(walk(&node.store).is_empty(), "{:?}", walk(&node.store));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&job_dir).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    // The pcmd's own directory has nothing to resume.
    let elsewhere = job(&node).env("PCM_RESTART", "require").run(DEADLINE);
    refused(&elsewhere, "a restart from the pcmd's directory");
    // The job's directory has.
    let (checksum, iteration, stderr) = restart_as(in_job_dir(job(&node)), "require");
    assert_eq!(checksum, reference, "restart changed the result");
    assert!(
        iteration >= newest && iteration < 20000,
        "restarted at {iteration}, newest was {newest}\n{stderr}"
    );
    // Its end is marked there too; the pcmd's directory stayed empty throughout.
    assert!(job_dir.join("heat2d-2r").join("finished").exists());
    assert!(walk(&node.store).is_empty(), "{:?}", walk(&node.store));
}

fn piece_exists(store: &Path, iteration: u64) -> bool {
    (0..2).all(|rank| {
        store
            .join("heat2d-2r")
            .join(format!("{iteration:020}"))
            .join(format!("rank-{rank:06}.piece"))
            .is_file()
    })
}

#[test]
fn given_a_flipped_byte_in_the_newest_checkpoint_then_the_previous_is_used_and_logged() {
    let _lock = mpi_lock();
    let reference = plain();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "a", &[]);
    run_and_kill_rank(&node, dir.path(), || node.complete().len() >= 2);
    let complete = node.complete();
    let (older, newest) = (complete[complete.len() - 2], complete[complete.len() - 1]);
    let piece = node
        .store
        .join("heat2d-2r")
        .join(format!("{newest:020}"))
        .join("rank-000000.piece");
    let mut bytes = std::fs::read(&piece).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&piece, bytes).unwrap();
    let (checksum, iteration, stderr) = restart(&node);
    assert_eq!(
        checksum, reference,
        "restart after corruption changed the result"
    );
    assert_eq!(
        iteration, older,
        "the corrupt checkpoint {newest} was not skipped"
    );
    assert!(
        stderr.contains(&format!("checkpoint at iteration {newest} is not usable"))
            && stderr.contains("does not match the manifest"),
        "the log does not say why:\n{stderr}"
    );
    assert!(dir.path().join("a-store/quarantine").exists());
}

fn series() -> Series {
    Series {
        app: AppName::new("heat2d").unwrap(),
        size: 2,
        name: None,
    }
}

/// A well-behaved client still gets an answer.
fn still_serves(socket: &Path) {
    let mut s = UnixStream::connect(ckpt::socket_path(socket)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write_frame(
        &mut s,
        &Request::Hello {
            version: FORMAT_VERSION,
            dir: None,
        },
    )
    .unwrap();
    assert!(matches!(
        expect_frame::<Response>(&mut s).unwrap(),
        Response::Welcome { .. }
    ));
    write_frame(
        &mut s,
        &Request::List {
            series: series(),
            rank: Rank(0),
        },
    )
    .unwrap();
    assert!(matches!(
        expect_frame::<Response>(&mut s).unwrap(),
        Response::Listing { .. }
    ));
}

/// Reads the daemon's answers until it closes; returns the first error message.
fn first_error(mut stream: impl std::io::Read) -> String {
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let mut rest = answer.as_slice();
    let mut seen = Vec::new();
    loop {
        match ckpt::read_frame::<Response>(&mut rest) {
            Ok(Some(Response::Error { message })) => return message,
            Ok(Some(other)) => seen.push(other),
            other => panic!("expected an error answer, got {seen:?} then {other:?}"),
        }
    }
}

fn hello_frame() -> Vec<u8> {
    pcm_proto::encode(&Request::Hello {
        version: FORMAT_VERSION,
        dir: None,
    })
}

#[test]
fn given_bad_frames_on_the_checkpoint_socket_then_clear_errors_and_the_daemon_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "a", &[]);
    let connect = || {
        let s = UnixStream::connect(ckpt::socket_path(&node.socket)).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s
    };
    let half_close = |bytes: &[u8]| {
        let s = connect();
        let mut w = s.try_clone().unwrap();
        w.write_all(bytes).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        first_error(s)
    };

    let garbage = [0, 0, 0, 5, 0xff, 0xfe, 0xfd, 0xfc, 0xfb];
    assert!(half_close(&garbage).contains("malformed"));
    still_serves(&node.socket);

    let oversized = (u32::MAX).to_be_bytes();
    assert!(half_close(&oversized).contains("exceeds the limit"));
    still_serves(&node.socket);

    let frame = hello_frame();
    let truncated = half_close(&frame[..frame.len() - 2]);
    assert!(
        truncated.contains("closed in the middle of a frame"),
        "{truncated}"
    );
    still_serves(&node.socket);

    let wrong_first = pcm_proto::encode(&Request::List {
        series: series(),
        rank: Rank(0),
    });
    assert!(half_close(&wrong_first).contains("first frame must be Hello"));

    let old = pcm_proto::encode(&Request::Hello {
        version: 999,
        dir: None,
    });
    assert!(half_close(&old).contains("version 999"));

    // A piece larger than the limit is refused before any byte is written.
    let mut big = hello_frame();
    big.extend(pcm_proto::encode(&Request::Put {
        piece: ckpt::PieceId {
            series: series(),
            iteration: 1,
            rank: Rank(0),
        },
        len: u64::MAX,
        digest: ckpt::Digest::of(b""),
    }));
    assert!(half_close(&big).contains("exceeds this pcmd's limit"));
    // A piece that ends early leaves nothing behind.
    let mut short = hello_frame();
    short.extend(pcm_proto::encode(&Request::Put {
        piece: ckpt::PieceId {
            series: series(),
            iteration: 1,
            rank: Rank(0),
        },
        len: 1000,
        digest: ckpt::Digest::of(b""),
    }));
    short.extend([7u8; 10]);
    let s = connect();
    (&s).write_all(&short).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut sink = Vec::new();
    let _ = (&s).read_to_end(&mut sink);
    still_serves(&node.socket);
    assert!(node.complete().is_empty());
    let leftovers: Vec<_> = walk(&node.store)
        .into_iter()
        .filter(|p| p.is_file())
        .collect();
    assert!(
        leftovers.is_empty(),
        "partial piece left behind: {leftovers:?}"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn given_bad_frames_or_a_wrong_key_on_the_buddy_port_then_refused_and_still_serving() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pool.key", KEY);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let node = Node::start(
        dir.path(),
        "b",
        &["--listen".into(), addr.clone(), "--pool-key".into(), key],
    );
    let tcp = || {
        let s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s
    };
    let half_close = |bytes: &[u8]| {
        let s = tcp();
        (&s).write_all(bytes).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        first_error(&s)
    };
    assert!(half_close(&[0, 0, 0, 3, 1, 2, 3]).contains("authentication hello"));
    assert!(half_close(&u32::MAX.to_be_bytes()).contains("exceeds the limit"));
    assert!(half_close(&hello_frame()[..3]).contains("authentication hello"));

    // A pcmd with another key is refused, and learns it.
    let other = ckpt::auth::PoolKey::parse(OTHER_KEY).unwrap();
    let err = pcmd::checkpoint::buddy::Client::connect(&addr, &other).unwrap_err();
    assert!(err.to_string().contains("pool key"), "{err}");
    // A client that skips the proof is refused too.
    let s = tcp();
    write_frame(
        &mut &s,
        &ckpt::auth::Hello {
            version: FORMAT_VERSION,
            client_nonce: [1; 32],
        },
    )
    .unwrap();
    let _challenge: ckpt::auth::Challenge = expect_frame(&mut &s).unwrap();
    write_frame(
        &mut &s,
        &ckpt::auth::Proof {
            client_proof: ckpt::Digest::of(b"guess"),
        },
    )
    .unwrap();
    match expect_frame::<Response>(&mut &s).unwrap() {
        Response::Error { message } => assert!(message.contains("wrong pool key"), "{message}"),
        other => panic!("a wrong proof was accepted: {other:?}"),
    }

    // The right key still works, and a bad frame after authentication is answered too.
    let good = ckpt::auth::PoolKey::parse(KEY).unwrap();
    let mut client = pcmd::checkpoint::buddy::Client::connect(&addr, &good).unwrap();
    let (available, rejected) = client.list(&series(), Rank(0)).unwrap();
    assert!(available.is_empty() && rejected.is_empty());
    // The refusal is logged once the refused connection's thread ends.
    wait_until(WAIT, "the refusal in the log", || {
        node.log().contains("wrong pool key")
    });
}
