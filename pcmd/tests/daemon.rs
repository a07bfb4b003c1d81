//! End-to-end tests of `pcmd serve` through its socket, with fake ranks and controllers.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::thread;
use std::time::{Duration, Instant};

use common::{host, job, rank, Conn, Daemon, WAIT};
use pcm_proto::client::{Client, Error, Migration};
use pcm_proto::{
    ClientKind, ErrorKind, FromDaemon, Move, Outcome, PhaseTimings, Rank, ToDaemon, MAX_FRAME_LEN,
};

fn moves(ranks: &[u32]) -> Vec<Move> {
    ranks
        .iter()
        .map(|r| Move {
            rank: Rank(*r),
            to: Some(host("node-b")),
        })
        .collect()
}

fn completed() -> Outcome {
    Outcome::Completed {
        iteration: 77,
        timings: PhaseTimings {
            spawn_us: 2500,
            ..PhaseTimings::default()
        },
        placed: vec![(Rank(1), host("node-b"))],
    }
}

/// The daemon still serves a fresh controller.
fn assert_alive(daemon: &Daemon) {
    let status = daemon.client().status().unwrap();
    assert_eq!(status.pid, daemon.pid());
}

#[test]
fn given_fake_rank_registers_then_status_shows_it_with_a_rate() {
    let daemon = Daemon::start(&[]);
    let mut r = rank(&daemon.socket, "job-1", 1, 4);
    r.send(&ToDaemon::Progress {
        iteration: 100,
        reconfigurations: 0,
    });
    thread::sleep(Duration::from_millis(200));
    r.send(&ToDaemon::Progress {
        iteration: 120,
        reconfigurations: 0,
    });
    // Let the daemon process it before asking.
    let deadline = Instant::now() + WAIT;
    let status = loop {
        let status = daemon.client().status().unwrap();
        if status
            .jobs
            .first()
            .is_some_and(|j| j.ranks[0].iteration == 120)
        {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "progress never showed: {status:?}"
        );
        thread::sleep(Duration::from_millis(20));
    };
    let job = &status.jobs[0];
    assert_eq!(job.job.as_str(), "job-1");
    assert_eq!(job.size, 4);
    let rank = &job.ranks[0];
    assert_eq!((rank.rank, rank.pid), (Rank(1), 4001));
    // 20 iterations in ~0.2 s: about 100 it/s, less if the machine is slow.
    assert!(
        rank.iterations_per_second > 5.0 && rank.iterations_per_second < 150.0,
        "{rank:?}"
    );
    drop(r);
}

#[test]
fn given_nonexistent_rank_then_unknown_rank_names_it() {
    let daemon = Daemon::start(&[]);
    let _r = rank(&daemon.socket, "job-1", 0, 4);
    let err = daemon
        .client()
        .migrate(None, moves(&[7]), false, WAIT)
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::UnknownRank));
    assert_eq!(
        err.to_string(),
        "rank 7 does not exist: job job-1 has 4 ranks (0-3)"
    );
}

#[test]
fn given_request_in_flight_then_second_migrate_is_busy() {
    let daemon = Daemon::start(&[]);
    let mut r = rank(&daemon.socket, "job-1", 0, 4);
    let mut client = daemon.client();
    let Migration::Accepted { request } = client.migrate(None, moves(&[1]), false, WAIT).unwrap()
    else {
        panic!("expected Accepted");
    };
    assert_eq!(
        r.recv(),
        FromDaemon::ReconfigurationRequested {
            request,
            moves: moves(&[1]),
            epoch: 0,
            resize: None,
        }
    );
    let err = client
        .migrate(Some(job("job-1")), moves(&[2]), false, WAIT)
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Busy), "{err}");
    assert!(err.to_string().contains(&request.to_string()), "{err}");
    assert_eq!(client.status().unwrap().jobs[0].in_flight, Some(request));
}

#[test]
fn given_wait_and_rank_reports_finished_then_migration_finished_is_delivered() {
    let daemon = Daemon::start(&[]);
    let mut r0 = rank(&daemon.socket, "job-1", 0, 2);
    let mut r1 = rank(&daemon.socket, "job-1", 1, 2);
    let socket = daemon.socket.clone();
    let waiter = thread::spawn(move || {
        Client::connect(&socket)
            .unwrap()
            .migrate(None, moves(&[1]), true, WAIT)
    });
    let request = match r0.recv() {
        FromDaemon::ReconfigurationRequested {
            request, moves: m, ..
        } => {
            assert_eq!(m, moves(&[1]));
            request
        }
        other => panic!("{other:?}"),
    };
    assert!(matches!(
        r1.recv(),
        FromDaemon::ReconfigurationRequested { request: r, .. } if r == request
    ));
    for r in [&mut r0, &mut r1] {
        r.send(&ToDaemon::ReconfigurationFinished {
            request,
            outcome: completed(),
        });
    }
    let result = waiter.join().unwrap().unwrap();
    assert_eq!(
        result,
        Migration::Finished {
            request,
            outcome: completed()
        }
    );
    let status = daemon.client().status().unwrap();
    assert_eq!(status.jobs[0].in_flight, None);
    assert_eq!(status.jobs[0].migrations, 1);
}

#[test]
fn given_all_ranks_disconnect_then_in_flight_is_cleared_with_failed() {
    let daemon = Daemon::start(&[]);
    let mut r0 = rank(&daemon.socket, "job-1", 0, 2);
    let r1 = rank(&daemon.socket, "job-1", 1, 2);
    let socket = daemon.socket.clone();
    let waiter = thread::spawn(move || {
        Client::connect(&socket)
            .unwrap()
            .migrate(None, moves(&[0]), true, WAIT)
    });
    assert!(matches!(
        r0.recv(),
        FromDaemon::ReconfigurationRequested { .. }
    ));
    drop(r0);
    drop(r1);
    match waiter.join().unwrap().unwrap() {
        Migration::Finished {
            outcome: Outcome::Failed { reason },
            ..
        } => assert!(
            reason.starts_with(
                "all ranks of job job-1 disconnected during the reconfiguration (rank 0 to "
            ),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(daemon.client().status().unwrap().jobs.is_empty());
}

/// Item 13: past its deadline a request is withdrawn, not forgotten: the rank is asked to
/// withdraw it, and the waiter hears "cancelled" only once the rank has.
#[test]
fn given_request_deadline_passes_then_the_rank_withdraws_it_and_the_waiter_hears_cancelled() {
    let daemon = Daemon::start(&["--request-timeout", "0.3"]);
    let mut r = rank(&daemon.socket, "job-1", 0, 2);
    let socket = daemon.socket.clone();
    let waiter = thread::spawn(move || {
        Client::connect(&socket)
            .unwrap()
            .migrate(None, moves(&[1]), true, WAIT)
    });
    let request = match r.recv() {
        FromDaemon::ReconfigurationRequested { request, .. } => request,
        other => panic!("{other:?}"),
    };
    assert_eq!(r.recv(), FromDaemon::CancelReconfiguration { request });
    assert!(daemon.client().status().unwrap().jobs[0].cancelling);
    r.send(&ToDaemon::ReconfigurationCancelled { request });
    match waiter.join().unwrap().unwrap() {
        Migration::Finished {
            request: answered,
            outcome: Outcome::Cancelled { reason },
        } => {
            assert_eq!(answered, request);
            assert!(reason.contains("did not start within 0.3 s"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let job = daemon.client().status().unwrap().jobs[0].clone();
    assert_eq!((job.in_flight, job.migrations, job.cancelled), (None, 0, 1));
}

#[test]
fn given_malformed_frame_then_error_close_and_daemon_still_serves() {
    let daemon = Daemon::start(&[]);
    let _r = rank(&daemon.socket, "job-1", 0, 1);
    let mut bad = Conn::hello(&daemon.socket, ClientKind::Controller);
    bad.send_raw(&[0, 0, 0, 3, 0xff, 0xfe, 0xfd]);
    match bad.recv() {
        FromDaemon::Error { kind, message } => {
            assert_eq!(kind, ErrorKind::BadMessage);
            assert!(message.contains("malformed frame"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    bad.expect_closed();
    assert_alive(&daemon);
    // The rank on another connection was not disturbed.
    assert_eq!(daemon.client().status().unwrap().jobs.len(), 1);
}

#[test]
fn given_oversized_length_prefix_then_error_close_and_daemon_still_serves() {
    let daemon = Daemon::start(&[]);
    let mut bad = Conn::open(&daemon.socket);
    bad.send_raw(&(MAX_FRAME_LEN as u32 + 1).to_be_bytes());
    match bad.recv() {
        FromDaemon::Error { kind, message } => {
            assert_eq!(kind, ErrorKind::BadMessage);
            assert!(message.contains("exceeds the limit"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    bad.expect_closed();
    assert_alive(&daemon);
}

#[test]
fn given_truncated_frame_then_error_and_daemon_still_serves() {
    let daemon = Daemon::start(&[]);
    let mut bad = Conn::hello(&daemon.socket, ClientKind::Controller);
    let frame = pcm_proto::encode(&ToDaemon::QueryStatus);
    bad.send_raw(&frame[..frame.len() - 1]);
    bad.stream.shutdown(std::net::Shutdown::Write).unwrap();
    match bad.recv() {
        FromDaemon::Error { kind, message } => {
            assert_eq!(kind, ErrorKind::BadMessage);
            assert!(message.contains("middle of a frame"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    bad.expect_closed();
    assert_alive(&daemon);
}

#[test]
fn given_wrong_version_then_mismatch_error_and_close() {
    let daemon = Daemon::start(&[]);
    let mut bad = Conn::open(&daemon.socket);
    bad.send(&ToDaemon::Hello {
        version: 1,
        client: ClientKind::Rank,
    });
    assert_eq!(
        bad.recv(),
        FromDaemon::Error {
            kind: ErrorKind::VersionMismatch,
            message: "client speaks protocol v1, this daemon speaks v2 to v3".into()
        }
    );
    bad.expect_closed();
    assert_alive(&daemon);
}

#[test]
fn given_silent_and_garbage_clients_then_others_are_served() {
    let daemon = Daemon::start(&[]);
    let _silent = Conn::open(&daemon.socket);
    let mut half = Conn::open(&daemon.socket);
    half.send_raw(&[0, 0]);
    let mut misplaced = Conn::hello(&daemon.socket, ClientKind::Rank);
    misplaced.send(&ToDaemon::Progress {
        iteration: 1,
        reconfigurations: 0,
    });
    assert!(matches!(
        misplaced.recv(),
        FromDaemon::Error {
            kind: ErrorKind::BadMessage,
            ..
        }
    ));
    assert_alive(&daemon);
}

#[test]
fn given_daemon_running_then_socket_is_private() {
    let daemon = Daemon::start(&[]);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&daemon.socket), 0o600);
    assert_eq!(mode(daemon.socket.parent().unwrap()), 0o700);
}

#[test]
fn given_second_serve_on_same_socket_then_clear_error_exit() {
    let daemon = Daemon::start(&[]);
    let out = daemon.cli(&["serve"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = common::text(&out.stderr);
    let expected = format!(
        "a pcmd is already serving {} (pid {})",
        daemon.socket.display(),
        daemon.pid()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert_alive(&daemon);
}

#[test]
fn given_stale_socket_file_then_it_is_replaced() {
    let mut daemon = Daemon::none();
    std::fs::create_dir_all(daemon.socket.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&daemon.socket).unwrap());
    assert!(daemon.socket.exists());
    assert!(matches!(
        Client::connect(&daemon.socket),
        Err(Error::NotRunning { .. })
    ));
    daemon.spawn(&[]);
    assert_alive(&daemon);
}

#[test]
fn given_sigterm_then_socket_is_removed_and_exit_is_clean() {
    let mut daemon = Daemon::start(&[]);
    let _r = rank(&daemon.socket, "job-1", 0, 1);
    let status = daemon.terminate();
    assert!(status.success(), "{status}");
    assert!(!daemon.socket.exists());
    // A new daemon can take over the same socket.
    daemon.spawn(&[]);
    assert_alive(&daemon);
}

#[test]
fn given_replacement_registers_then_status_flags_it() {
    let daemon = Daemon::start(&[]);
    let mut r = Conn::hello(&daemon.socket, ClientKind::Rank);
    r.send(&ToDaemon::Register {
        job: job("job-1"),
        app: pcm_proto::AppName::new("fake").unwrap(),
        rank: Rank(1),
        size: 2,
        host: host("node-a"),
        pid: 9,
        replacement: true,
        reconfigurations: 0,
    });
    assert_eq!(r.recv(), FromDaemon::Registered);
    let status = daemon.client().status().unwrap();
    assert!(status.jobs[0].ranks[0].replacement);
}

#[test]
fn given_a_socket_directory_others_can_write_then_serve_refuses_and_says_why() {
    // Another local user who creates the runtime directory first (mode 0777, symlinks in it)
    // must not get the daemon to write through its lock file or bind where they choose.
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("pcmd-0");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::os::unix::fs::symlink(&victim, open.join("node.sock.lock")).unwrap();
    let out = common::cli(&open.join("node.sock"), &["serve"]);
    assert!(!out.status.success());
    let stderr = common::text(&out.stderr);
    assert!(
        stderr.contains("other users may write") && stderr.contains("pcmd-0"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(!open.join("node.sock").exists());
}
