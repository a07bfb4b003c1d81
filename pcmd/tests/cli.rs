//! Tests of the `pcmd status` and `pcmd migrate` command lines against a real daemon.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::thread;

use common::{host, rank, text, Daemon};
use pcm_proto::{FromDaemon, Outcome, PhaseTimings, Rank, ToDaemon};

#[test]
fn given_no_daemon_then_status_and_migrate_fail_naming_the_path() {
    let daemon = Daemon::none();
    for args in [&["status"][..], &["migrate", "--rank", "1"][..]] {
        let out = daemon.cli(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("no pcmd listening at {}", daemon.socket.display())),
            "{stderr}"
        );
        assert!(stderr.contains("pcmd serve"), "{stderr}");
    }
}

#[test]
fn given_no_daemon_and_pcm_daemon_env_then_the_env_path_is_named() {
    let daemon = Daemon::none();
    let pattern = daemon.dir.path().join("{host}.sock");
    let mut command = std::process::Command::new(common::BIN);
    command
        .arg("status")
        .env("PCM_DAEMON", &pattern)
        .env_remove("RUST_LOG");
    let out = common::run_bounded(command);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let hostname = nix::unistd::gethostname().unwrap();
    let expected = daemon
        .dir
        .path()
        .join(format!("{}.sock", hostname.to_string_lossy()));
    assert!(stderr.contains(&expected.display().to_string()), "{stderr}");
}

#[test]
fn given_registered_rank_then_status_table_and_json_show_it() {
    let daemon = Daemon::start(&[]);
    let mut r = rank(&daemon.socket, "job-7", 2, 4);
    r.send(&ToDaemon::Progress {
        iteration: 31,
        reconfigurations: 0,
    });
    // A status round trip on the rank's daemon orders after the Progress message only per
    // connection, so poll until it shows.
    let deadline = std::time::Instant::now() + common::WAIT;
    let table = loop {
        let out = daemon.cli(&["status"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let table = text(&out.stdout);
        if table.contains("31") {
            break table;
        }
        assert!(std::time::Instant::now() < deadline, "{table}");
        thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(table.contains("job job-7"), "{table}");
    assert!(table.contains("4 ranks, 1 here"), "{table}");
    assert!(table.contains("node-a"), "{table}");
    let out = daemon.cli(&["status", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["jobs"][0]["job"], "job-7");
    assert_eq!(json["jobs"][0]["ranks"][0]["iteration"], 31);
}

#[test]
fn given_migrate_cli_and_rank_answers_then_outcome_with_timings_printed() {
    let daemon = Daemon::start(&[]);
    let mut r = rank(&daemon.socket, "job-1", 0, 4);
    let socket = daemon.socket.clone();
    let cli = thread::spawn(move || {
        common::cli(
            &socket,
            &["migrate", "--rank", "1", "--rank", "3", "--to", "node-b"],
        )
    });
    let request = match r.recv() {
        FromDaemon::ReconfigurationRequested { request, moves, .. } => {
            assert_eq!(moves.len(), 2);
            assert!(moves.iter().all(|m| m.to == Some(host("node-b"))));
            request
        }
        other => panic!("{other:?}"),
    };
    r.send(&ToDaemon::ReconfigurationFinished {
        request,
        outcome: Outcome::Completed {
            iteration: 500,
            timings: PhaseTimings {
                agree_us: 100,
                spawn_us: 250_000,
                merge_split_us: 3_000,
                state_transfer_us: 12_000,
                state_bytes: 4 << 20,
            },
            placed: vec![(Rank(1), host("node-b")), (Rank(3), host("node-b"))],
        },
    });
    let out = cli.join().unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("migration {request} completed at iteration 500")),
        "{stdout}"
    );
    assert!(stdout.contains("rank 3 -> node-b"), "{stdout}");
    assert!(stdout.contains("spawn 250.0 ms"), "{stdout}");
    assert!(stdout.contains("4.0 MiB"), "{stdout}");
}

#[test]
fn given_migrate_cli_errors_then_exit_1_with_daemon_message() {
    let daemon = Daemon::start(&[]);
    let _r = rank(&daemon.socket, "job-1", 0, 4);
    let out = daemon.cli(&["migrate", "--rank", "9", "--no-wait"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("rank 9 does not exist: job job-1 has 4 ranks (0-3)"),
        "{stderr}"
    );
    let out = daemon.cli(&["migrate", "--rank", "1", "--job", "other", "--no-wait"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("job other has no ranks registered"),
        "{}",
        text(&out.stderr)
    );
    let out = daemon.cli(&["migrate", "--rank", "1", "--no-wait"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("accepted"),
        "{}",
        text(&out.stdout)
    );
}

/// Kills the daemons a test started, and only those.
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn given_two_pcmds_with_host_on_one_machine_then_each_reports_its_host_and_keeps_its_own_checkpoints(
) {
    use pcm_proto::checkpoint::{read_frame, write_frame, Request, Response, FORMAT_VERSION};
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("run").join("{host}.sock");
    let state = dir.path().join("state");
    let mut children = Children(Vec::new());
    for name in ["node-a", "node-b"] {
        let log = std::fs::File::create(dir.path().join(format!("{name}.log"))).unwrap();
        let child = std::process::Command::new(common::BIN)
            .args(["--host", name, "serve"])
            .env("PCM_DAEMON", &pattern)
            .env("XDG_STATE_HOME", &state)
            .env_remove("PCMD_CHECKPOINT_DIR")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        children.0.push(child);
    }
    for name in ["node-a", "node-b"] {
        let socket = dir.path().join("run").join(format!("{name}.sock"));
        let deadline = std::time::Instant::now() + common::WAIT;
        let status = loop {
            match pcm_proto::client::Client::connect(&socket) {
                Ok(mut c) => break c.status().unwrap(),
                Err(e) => assert!(
                    std::time::Instant::now() < deadline,
                    "pcmd --host {name} did not answer at {}: {e}",
                    socket.display()
                ),
            }
            thread::sleep(std::time::Duration::from_millis(20));
        };
        assert_eq!(status.host.as_str(), name);
        // The checkpoint channel reports the same host, and its directory is the node's own.
        let ckpt = pcm_proto::checkpoint::socket_path(&socket);
        let mut stream = std::os::unix::net::UnixStream::connect(&ckpt).unwrap();
        stream.set_read_timeout(Some(common::WAIT)).unwrap();
        write_frame(
            &mut stream,
            &Request::Hello {
                version: FORMAT_VERSION,
                dir: None,
            },
        )
        .unwrap();
        match read_frame::<Response>(&mut stream).unwrap() {
            Some(Response::Welcome { host, .. }) => assert_eq!(host.as_str(), name),
            other => panic!("{other:?}"),
        }
        assert!(state.join("pcmd").join(name).is_dir(), "{name}");
    }
    drop(children);
}
