//! Helpers for tests that start the real `pcmd` binary: a daemon guard that kills only the
//! child it started, fake ranks and raw clients, all with bounded waits.

#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use pcm_proto::{
    encode, AppName, ClientKind, FrameReader, FromDaemon, HostName, JobId, Rank, ToDaemon,
    PROTOCOL_VERSION,
};

pub const BIN: &str = env!("CARGO_BIN_EXE_pcmd");
/// Upper bound on any single wait in these tests.
pub const WAIT: Duration = Duration::from_secs(10);

/// A temp dir holding one daemon's socket; the daemon (if started) is killed on drop.
pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    /// Starts `pcmd serve` on a fresh socket and waits until it answers.
    pub fn start(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run").join("node.sock");
        let mut daemon = Self {
            dir,
            socket,
            child: None,
        };
        daemon.spawn(extra);
        daemon
    }

    /// A temp dir and socket path with no daemon.
    pub fn none() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run").join("node.sock");
        Self {
            dir,
            socket,
            child: None,
        }
    }

    pub fn spawn(&mut self, extra: &[&str]) {
        self.launch(extra);
        let deadline = Instant::now() + WAIT;
        loop {
            if UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            self.assert_running(deadline);
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts `pcmd serve` without waiting for its socket.
    pub fn launch(&mut self, extra: &[&str]) {
        let log = std::fs::File::create(self.dir.path().join("pcmd.log")).unwrap();
        let child = Command::new(BIN)
            .arg("--socket")
            .arg(&self.socket)
            .arg("serve")
            .args(extra)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// Panics if `pcmd serve` has exited or `deadline` has passed.
    pub fn assert_running(&mut self, deadline: Instant) {
        if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
            panic!("pcmd serve exited early with {status}: {}", self.log());
        }
        assert!(
            Instant::now() < deadline,
            "pcmd did not start: {}",
            self.log()
        );
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pcmd.log")).unwrap_or_default()
    }

    /// Sends SIGTERM and waits (bounded) for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        wait_child(&mut child, WAIT).unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("pcmd did not stop on SIGTERM");
        })
    }

    /// Runs a `pcmd` CLI command against this daemon's socket.
    pub fn cli(&self, args: &[&str]) -> Output {
        cli(&self.socket, args)
    }

    pub fn client(&self) -> pcm_proto::client::Client {
        pcm_proto::client::Client::connect(&self.socket).unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_child(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `pcmd --socket SOCKET ARGS...`, killing it if it takes longer than [`WAIT`].
pub fn cli(socket: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command.arg("--socket").arg(socket).args(args);
    run_bounded(command)
}

pub fn run_bounded(mut command: Command) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out");
    let err_path = dir.path().join("err");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let status = wait_child(&mut child, WAIT).unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("pcmd {command:?} did not finish within {WAIT:?}");
    });
    Output {
        status,
        stdout: std::fs::read(out_path).unwrap(),
        stderr: std::fs::read(err_path).unwrap(),
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A raw protocol connection with bounded receives.
pub struct Conn {
    pub stream: UnixStream,
    reader: FrameReader,
}

impl Conn {
    pub fn open(socket: &Path) -> Self {
        let stream = UnixStream::connect(socket).unwrap();
        stream.set_write_timeout(Some(WAIT)).unwrap();
        Self {
            stream,
            reader: FrameReader::new(),
        }
    }

    pub fn hello(socket: &Path, client: ClientKind) -> Self {
        let mut conn = Self::open(socket);
        conn.send(&ToDaemon::Hello {
            version: PROTOCOL_VERSION,
            client,
        });
        match conn.recv() {
            FromDaemon::Welcome { version, .. } => assert_eq!(version, PROTOCOL_VERSION),
            other => panic!("expected Welcome, got {other:?}"),
        }
        conn
    }

    pub fn send(&mut self, message: &ToDaemon) {
        self.stream.write_all(&encode(message)).unwrap();
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// The next message, or `None` at end of stream; panics after [`WAIT`].
    pub fn try_recv(&mut self) -> Option<FromDaemon> {
        let deadline = Instant::now() + WAIT;
        let mut buf = [0u8; 4096];
        loop {
            if let Some(m) = self.reader.next_message::<FromDaemon>().unwrap() {
                return Some(m);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no message from pcmd within {WAIT:?}");
            self.stream.set_read_timeout(Some(left)).unwrap();
            match self.stream.read(&mut buf) {
                Ok(0) => return None,
                Ok(n) => self.reader.feed(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("reading from pcmd: {e}"),
            }
        }
    }

    pub fn recv(&mut self) -> FromDaemon {
        self.try_recv().expect("pcmd closed the connection")
    }

    /// Asserts that the daemon closes the connection (after any queued messages).
    pub fn expect_closed(&mut self) {
        if let Some(m) = self.try_recv() {
            panic!("expected the connection to close, got {m:?}");
        }
    }
}

pub fn job(name: &str) -> JobId {
    JobId::new(name).unwrap()
}

pub fn host(name: &str) -> HostName {
    HostName::new(name).unwrap()
}

/// A fake rank: hello + register.
pub fn rank(socket: &Path, job_name: &str, rank: u32, size: u32) -> Conn {
    let mut conn = Conn::hello(socket, ClientKind::Rank);
    conn.send(&ToDaemon::Register {
        job: job(job_name),
        app: AppName::new("fake").unwrap(),
        rank: Rank(rank),
        size,
        host: host("node-a"),
        pid: 4000 + rank,
        replacement: false,
        reconfigurations: 0,
    });
    assert_eq!(conn.recv(), FromDaemon::Registered);
    conn
}
