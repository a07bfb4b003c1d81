//! A pool of IOS agents for end-to-end tests: a pool key, peer servers and `ios-agent join`
//! processes, each killed (with the pcmd it started) when dropped.
//!
//! The same pieces run on loopback (`Command::new(bin("ios-agent"))`) or inside emulated
//! nodes (a command from the netns cluster that enters the node first): every start takes
//! the [`Command`] to run, with the program and its arguments still to be added.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ios_agent_proto::{AgentStatus, Decision};

use crate::{bin, Group};

/// Writes a new pool key with `ios-agent keygen` and returns its path.
pub fn pool_key(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let out = Command::new(bin("ios-agent"))
        .arg("keygen")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ios-agent keygen failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// A running peer server.
#[derive(Debug)]
pub struct PeerServer {
    /// Its process group.
    pub group: Group,
    /// Its address, `/ip4/IP/tcp/PORT/p2p/ID`.
    pub addr: String,
}

impl PeerServer {
    /// Starts `peer-server` listening on `ip` (an ephemeral port) with `key`, and waits for
    /// its startup line. `command` is the command to run it with: `Command::new(bin(...))`
    /// on loopback, or one that enters a namespace first and then runs the program.
    pub fn start(command: Command, dir: &Path, key: &Path, ip: &str, label: &str) -> PeerServer {
        PeerServer::start_at(command, dir, key, &format!("/ip4/{ip}/tcp/0"), label)
    }

    /// [`PeerServer::start`] on the address `listen`. The server keeps its state (its
    /// identity) where it would by default, with `XDG_STATE_HOME` set to a directory of the
    /// test named after `label`: the same label after a restart finds the same identity,
    /// as a server restarted with the README's command does.
    pub fn start_at(
        command: Command,
        dir: &Path,
        key: &Path,
        listen: &str,
        label: &str,
    ) -> PeerServer {
        let mut command = command;
        command
            .arg("--listen")
            .arg(listen)
            .arg("--pool-key")
            .arg(key)
            .env("XDG_STATE_HOME", dir.join(format!("{label}.xdg-state")));
        let group = Group::start(command, dir, label);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = std::fs::read_to_string(&group.stdout).unwrap_or_default();
            if let Some(line) = out.lines().next() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| {
                    panic!("bad startup line from the peer server: {line:?}: {e}")
                });
                let addr = v["addrs"][0]
                    .as_str()
                    .unwrap_or_else(|| panic!("no address in {line:?}"))
                    .to_owned();
                return PeerServer { group, addr };
            }
            assert!(
                Instant::now() < deadline,
                "the peer server did not start within 20 s:\n{}",
                group.stderr_so_far()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's TCP port, from its address.
    pub fn port(&self) -> u16 {
        let parts: Vec<&str> = self.addr.split('/').collect();
        let i = parts
            .iter()
            .position(|p| *p == "tcp")
            .unwrap_or_else(|| panic!("no tcp port in {}", self.addr));
        parts[i + 1]
            .parse()
            .unwrap_or_else(|e| panic!("bad port in {}: {e}", self.addr))
    }

    /// A loopback peer server.
    pub fn local(dir: &Path, key: &Path, label: &str) -> PeerServer {
        PeerServer::start(
            Command::new(bin("peer-server")),
            dir,
            key,
            "127.0.0.1",
            label,
        )
    }
}

/// What an agent joins with.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// Host name (as in the MPI hostfile).
    pub host: String,
    /// Pool key file.
    pub key: PathBuf,
    /// Peer server addresses.
    pub peer_servers: Vec<String>,
    /// Address to listen on (`/ip4/IP/tcp/0`).
    pub listen: String,
    /// The node's pcmd socket.
    pub pcmd_socket: PathBuf,
    /// The pcmd program the agent starts (`bin("pcmd")`).
    pub pcmd: PathBuf,
    /// The agent's control socket.
    pub control: PathBuf,
    /// Its state directory.
    pub state_dir: PathBuf,
    /// Further `join` options (periods, thresholds, topology).
    pub extra: Vec<String>,
}

impl AgentSpec {
    /// An agent of `host` on loopback, its sockets and state under `dir`.
    pub fn local(dir: &Path, host: &str, key: &Path, peer_servers: &[&str]) -> AgentSpec {
        AgentSpec::in_dir(dir, host, key, peer_servers, "127.0.0.1")
    }

    /// An agent of `host` listening on `ip`, its sockets and state under `dir`.
    pub fn in_dir(
        dir: &Path,
        host: &str,
        key: &Path,
        peer_servers: &[&str],
        ip: &str,
    ) -> AgentSpec {
        AgentSpec {
            host: host.to_owned(),
            key: key.to_owned(),
            peer_servers: peer_servers.iter().map(|s| (*s).to_owned()).collect(),
            listen: format!("/ip4/{ip}/tcp/0"),
            pcmd_socket: AgentSpec::pcmd_socket_in(dir, host),
            pcmd: bin("pcmd"),
            control: dir.join(format!("{host}.ctl")),
            state_dir: dir.join(format!("{host}.state")),
            extra: Vec::new(),
        }
    }

    /// The pcmd socket of the agent of `host` whose sockets are under `dir` (as
    /// [`AgentSpec::in_dir`] makes them).
    pub fn pcmd_socket_in(dir: &Path, host: &str) -> PathBuf {
        dir.join(format!("{host}.sock"))
    }

    /// The node's given-back mark (`pcm_proto::given_back`, next to its pcmd socket), if
    /// there is one; panics on one that cannot be read.
    pub fn given_back(&self) -> Option<pcm_proto::given_back::GivenBack> {
        pcm_proto::given_back::read(&self.pcmd_socket).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Adds `join` options.
    pub fn with(mut self, options: &[&str]) -> AgentSpec {
        self.extra.extend(options.iter().map(|s| (*s).to_owned()));
        self
    }

    /// The arguments after the program name.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--control".to_owned(),
            self.control.display().to_string(),
            "join".to_owned(),
            "--host".to_owned(),
            self.host.clone(),
            "--pool-key".to_owned(),
            self.key.display().to_string(),
            "--listen".to_owned(),
            self.listen.clone(),
            "--pcmd-socket".to_owned(),
            self.pcmd_socket.display().to_string(),
            "--pcmd".to_owned(),
            self.pcmd.display().to_string(),
            "--state-dir".to_owned(),
            self.state_dir.display().to_string(),
        ];
        for s in &self.peer_servers {
            args.push("--peer-server".to_owned());
            args.push(s.clone());
        }
        args.extend(self.extra.iter().cloned());
        args
    }
}

/// A running `ios-agent join` (and the pcmd it started, in the same process group).
#[derive(Debug)]
pub struct AgentProc {
    /// Its process group.
    pub group: Group,
    /// What it joined with.
    pub spec: AgentSpec,
}

impl AgentProc {
    /// Starts `command` (which must run `ios-agent`) with the spec's arguments and waits until
    /// its control socket answers.
    pub fn start(command: Command, dir: &Path, spec: AgentSpec) -> AgentProc {
        let mut command = command;
        command.args(spec.args());
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "info,ios_agent=debug,ios_agent_core=debug");
        }
        let label = format!("agent-{}", spec.host);
        let mut agent = AgentProc {
            group: Group::start(command, dir, &label),
            spec,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while agent.try_status().is_none() {
            assert!(
                agent.group.running(),
                "ios-agent on {} exited:\n{}",
                agent.spec.host,
                agent.group.stderr_so_far()
            );
            assert!(
                Instant::now() < deadline,
                "ios-agent on {} did not answer within 30 s:\n{}",
                agent.spec.host,
                agent.group.stderr_so_far()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        agent
    }

    /// A loopback agent.
    pub fn local(dir: &Path, spec: AgentSpec) -> AgentProc {
        AgentProc::start(Command::new(bin("ios-agent")), dir, spec)
    }

    /// `ios-agent status --json`, or None if the agent does not answer.
    pub fn try_status(&self) -> Option<AgentStatus> {
        let out = Command::new(bin("ios-agent"))
            .arg("--control")
            .arg(&self.spec.control)
            .args(["status", "--json"])
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// `ios-agent status --json`; panics with the agent's log if it does not answer.
    pub fn status(&self) -> AgentStatus {
        self.try_status().unwrap_or_else(|| {
            panic!(
                "ios-agent on {} does not answer:\n{}",
                self.spec.host,
                self.group.stderr_so_far()
            )
        })
    }

    /// Number of peers the agent knows now.
    pub fn peer_count(&self) -> usize {
        self.try_status().map_or(0, |s| s.peers.len())
    }

    /// Migrations this agent completed as the giving side.
    pub fn migrations_completed(&self) -> u64 {
        self.try_status()
            .map_or(0, |s| s.counters.migrations_completed)
    }

    /// The agent's recent decisions, oldest first.
    pub fn decisions(&self) -> Vec<Decision> {
        self.try_status().map(|s| s.decisions).unwrap_or_default()
    }

    /// Runs `ios-agent leave` and waits for the process to end.
    pub fn leave(mut self, timeout: Duration) -> String {
        let out = Command::new(bin("ios-agent"))
            .arg("--control")
            .arg(&self.spec.control)
            .arg("leave")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ios-agent leave failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + timeout;
        while self.group.running() {
            assert!(
                Instant::now() < deadline,
                "the agent on {} did not leave within {timeout:?}:\n{}",
                self.spec.host,
                self.group.stderr_so_far()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.group.stderr_so_far()
    }
}
