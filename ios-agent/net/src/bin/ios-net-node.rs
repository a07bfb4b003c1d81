//! One agent network node without decision logic, for tests, scripts and benchmarks: joins
//! the pool through peer servers or direct peers and prints what the network reports, one
//! JSON object per line on stdout.
//!
//! The first line is `{"event":"started","peer_id":ID,"listen":[ADDR,...]}`. Then, among
//! others: `peer_up`, `peer_rtt` (`rtt_us`), `peer_gone`, `message`, `bad_message`,
//! `peer_server_up`, `peer_server_error`, `dial_error`, `incoming_error`, `sent` (a
//! heartbeat handed to the network, with its `id`), `send_failed`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ios_agent_core::{Message, MessageId};
use ios_agent_net::id::libp2p_id;
use ios_agent_net::libp2p::Multiaddr;
use ios_agent_net::{Identity, NetConfig, NetEvent, Network, PoolKey};
use serde_json::json;

/// An IOS agent's network alone (no decisions): discovery, RTTs, messages, as JSON lines.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Pool key file (standard form: /key/swarm/psk/1.0.0/, /base16/, 64 hex digits).
    #[arg(long, value_name = "FILE", required_unless_present = "new_pool_key")]
    pool_key: Option<PathBuf>,
    /// Write a new random pool key to FILE (mode 0600, never overwrites) and exit.
    #[arg(long, value_name = "FILE")]
    new_pool_key: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "/ip4/127.0.0.1/tcp/0")]
    listen: Vec<Multiaddr>,
    /// Address to announce to peer servers instead of the listen addresses (e.g. a relay).
    #[arg(long)]
    external: Vec<Multiaddr>,
    /// Peer server to register with and discover from (repeatable).
    #[arg(long = "peer-server", value_name = "ADDR")]
    peer_servers: Vec<Multiaddr>,
    /// Agent to dial directly and keep connected (repeatable).
    #[arg(long = "peer", value_name = "ADDR")]
    peers: Vec<Multiaddr>,
    /// Rendezvous namespace of the pool.
    #[arg(long, default_value = ios_agent_net::config::DEFAULT_NAMESPACE)]
    namespace: String,
    /// Registration lifetime in seconds (peer servers must accept it).
    #[arg(long, default_value_t = 20)]
    ttl: u64,
    /// Fast ping period in milliseconds (a new connection's first pings; see
    /// `ios_agent_net::probe`).
    #[arg(long, default_value_t = 1000)]
    ping_ms: u64,
    /// Discovery period in milliseconds.
    #[arg(long, default_value_t = 5000)]
    discover_ms: u64,
    /// Identity file (created if missing); default: a new identity each run.
    #[arg(long, value_name = "FILE")]
    identity: Option<PathBuf>,
    /// Send a heartbeat message to every connected agent this often (0: never).
    #[arg(long, default_value_t = 0)]
    heartbeat_ms: u64,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("ios-net-node: {e:#}");
        std::process::exit(1);
    }
}

fn show(p: &ios_agent_core::PeerId) -> String {
    libp2p_id(p).map_or_else(|| p.to_string(), |p| p.to_string())
}

fn line(v: serde_json::Value) {
    println!("{v}");
}

#[tokio::main(flavor = "current_thread")]
async fn run(args: Args) -> anyhow::Result<()> {
    if let Some(path) = &args.new_pool_key {
        let key = PoolKey::generate_to_file(path)?;
        line(json!({"event": "pool_key", "file": path, "fingerprint": key.fingerprint()}));
        return Ok(());
    }
    let key_file = args.pool_key.as_ref().context("--pool-key is required")?;
    let mut config = NetConfig::new(PoolKey::from_file(key_file)?);
    config.listen = args.listen;
    config.external_addrs = args.external;
    config.peer_servers = args.peer_servers;
    config.direct_peers = args.peers;
    config.namespace = args.namespace;
    config.registration_ttl = Duration::from_secs(args.ttl);
    config.ping_interval = Duration::from_millis(args.ping_ms);
    config.max_ping_interval = config.max_ping_interval.max(config.ping_interval);
    config.discover_interval = Duration::from_millis(args.discover_ms);
    config.max_discover_interval = config.max_discover_interval.max(config.discover_interval);
    if let Some(file) = args.identity {
        config.identity = Identity::File(file);
    }
    let (net, mut events, _task) = Network::start(config).await?;
    line(json!({
        "event": "started",
        "peer_id": net.local_libp2p_id().to_string(),
        "listen": net.listen_addrs().await?.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
    }));
    let mut heartbeat = (args.heartbeat_ms > 0)
        .then(|| tokio::time::interval(Duration::from_millis(args.heartbeat_ms)));
    let mut seq = 0u64;
    loop {
        let ev = tokio::select! {
            ev = events.recv() => match ev { Some(ev) => ev, None => break },
            _ = async { match heartbeat.as_mut() { Some(h) => { h.tick().await; } None => std::future::pending().await } } => {
                for p in net.peers().await? {
                    seq += 1;
                    let m = Message::Heartbeat { id: MessageId(seq), manager: net.local_peer_id(), successor: None, members: 0 };
                    match net.send(&p.peer, m).await {
                        Ok(()) => line(json!({"event": "sent", "to": p.libp2p_id.to_string(), "id": seq})),
                        Err(e) => line(json!({"event": "send_failed", "to": p.libp2p_id.to_string(), "reason": e.to_string()})),
                    }
                }
                continue;
            }
            _ = tokio::signal::ctrl_c() => break,
        };
        line(match ev {
            NetEvent::Listening { addr } => json!({"event": "listening", "addr": addr.to_string()}),
            NetEvent::PeerUp { peer, addr, .. } => {
                json!({"event": "peer_up", "peer": show(&peer), "addr": addr.to_string()})
            }
            NetEvent::PeerRtt { peer, rtt } => {
                json!({"event": "peer_rtt", "peer": show(&peer), "rtt_us": rtt.as_micros() as u64})
            }
            NetEvent::PeerGone { peer } => json!({"event": "peer_gone", "peer": show(&peer)}),
            NetEvent::Message { from, message } => {
                json!({"event": "message", "from": show(&from), "kind": message.kind()})
            }
            NetEvent::BadMessage { from, reason } => {
                json!({"event": "bad_message", "from": show(&from), "reason": reason})
            }
            NetEvent::SendFailed { to, kind, reason } => {
                json!({"event": "send_failed", "to": show(&to), "kind": kind, "reason": reason})
            }
            NetEvent::PeerServerUp { addr, server } => {
                json!({"event": "peer_server_up", "addr": addr.to_string(), "server": server.to_string()})
            }
            NetEvent::PeerServerError { addr, reason } => {
                json!({"event": "peer_server_error", "addr": addr.to_string(), "reason": reason})
            }
            NetEvent::DialError { addr, peer, reason } => json!({
                "event": "dial_error", "addr": addr, "peer": peer.as_ref().map(show), "reason": reason
            }),
            NetEvent::IncomingError { from, reason } => {
                json!({"event": "incoming_error", "from": from.to_string(), "reason": reason})
            }
            NetEvent::HostUnknown { host, reason } => {
                json!({"event": "host_unknown", "host": host.to_string(), "reason": reason})
            }
        });
    }
    net.shutdown().await.ok();
    Ok(())
}
