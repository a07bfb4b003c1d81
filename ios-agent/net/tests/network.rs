//! In-process tests of the agent network: two or more `Network`s on loopback, hostile input,
//! and nodes without the pool key.

use std::time::{Duration, Instant};

use ios_agent_core::message::MAX_MESSAGE_LEN;
use ios_agent_core::model::NodeProfile;
use ios_agent_core::{LatencyTier, Message, MessageId};
use ios_agent_net::libp2p::futures::StreamExt;
use ios_agent_net::libp2p::{self, noise, ping, tcp, yamux, Multiaddr};
use ios_agent_net::{NetConfig, NetEvent, NetHandle, Network, PoolKey};
use pcm_proto::HostName;
use tokio::sync::mpsc::Receiver;

type Events = Receiver<NetEvent>;

async fn node(key: PoolKey, peers: Vec<Multiaddr>) -> (NetHandle, Events, Multiaddr) {
    let mut config = NetConfig::new(key);
    config.direct_peers = peers;
    config.handshake_timeout = Duration::from_secs(3);
    let (net, events, _task) = Network::start(config).await.expect("starts");
    let addr = net.listen_addrs().await.expect("running")[0].clone();
    (net, events, addr)
}

/// Waits for the first event that `f` maps to `Some`, at most `timeout`.
async fn expect<T>(
    events: &mut Events,
    timeout: Duration,
    what: &str,
    mut f: impl FnMut(&NetEvent) -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(ev)) => {
                if let Some(t) = f(&ev) {
                    return t;
                }
                seen.push(format!("{ev:?}"));
            }
            Ok(None) => panic!("event channel closed while waiting for {what}; seen: {seen:#?}"),
            Err(_) => panic!("no {what} within {timeout:?}; seen: {seen:#?}"),
        }
    }
}

#[tokio::test]
async fn given_two_nodes_then_rtts_and_messages_flow_both_ways() {
    let key = PoolKey::generate();
    let (a, mut ea, addr_a) = node(key, vec![]).await;
    let (b, mut eb, _) = node(key, vec![addr_a]).await;
    let rtt = expect(&mut eb, Duration::from_secs(5), "rtt at b", |ev| match ev {
        NetEvent::PeerRtt { peer, rtt } if *peer == a.local_peer_id() => Some(*rtt),
        _ => None,
    })
    .await;
    assert!(rtt < Duration::from_millis(10), "loopback rtt {rtt:?}");
    assert_eq!(LatencyTier::from_rtt(rtt), LatencyTier::Local);
    expect(&mut ea, Duration::from_secs(5), "rtt at a", |ev| match ev {
        NetEvent::PeerRtt { peer, .. } if *peer == b.local_peer_id() => Some(()),
        _ => None,
    })
    .await;
    let m = Message::StealExhausted { id: MessageId(42) };
    b.send(&a.local_peer_id(), m.clone()).await.expect("sent");
    let got = expect(&mut ea, Duration::from_secs(5), "message", |ev| match ev {
        NetEvent::Message { from, message } if *from == b.local_peer_id() => Some(message.clone()),
        _ => None,
    })
    .await;
    assert_eq!(got, m);
    let peers = a.peers().await.expect("running");
    assert_eq!(peers.len(), 1);
    assert_eq!(peers[0].peer, b.local_peer_id());

    b.shutdown().await.expect("stops");
    expect(
        &mut ea,
        Duration::from_secs(5),
        "peer gone",
        |ev| match ev {
            NetEvent::PeerGone { peer } if *peer == b.local_peer_id() => Some(()),
            _ => None,
        },
    )
    .await;
    assert!(a.peers().await.expect("running").is_empty());
    // Sending to a peer that is gone is an error, not a panic.
    assert!(a.send(&b.local_peer_id(), m).await.is_err());
}

#[tokio::test]
async fn given_malformed_messages_then_bad_message_events_and_the_node_keeps_serving() {
    let key = PoolKey::generate();
    let (a, mut ea, addr_a) = node(key, vec![]).await;
    let (b, mut eb, _) = node(key, vec![addr_a]).await;
    expect(&mut ea, Duration::from_secs(5), "b up", |ev| {
        matches!(ev, NetEvent::PeerUp { .. }).then_some(())
    })
    .await;
    let to = a.local_peer_id();

    // Garbage bytes.
    b.send_raw(&to, b"\xff\xfe not cbor at all".to_vec())
        .await
        .expect("queued");
    let r = expect(&mut ea, Duration::from_secs(5), "bad garbage", bad_reason).await;
    assert!(r.contains("undecodable"), "{r}");

    // An oversized frame: refused before decoding.
    b.send_raw(&to, vec![0x80; MAX_MESSAGE_LEN + 4096])
        .await
        .expect("queued");
    let r = expect(
        &mut ea,
        Duration::from_secs(10),
        "bad oversized",
        bad_reason,
    )
    .await;
    assert!(r.contains("refused"), "{r}");

    // Decodable but invalid: a work steal with TTL 0.
    let steal = Message::WorkSteal {
        id: MessageId(1),
        origin: b.local_peer_id(),
        source: b.local_peer_id(),
        source_host: HostName::new("node-b").expect("valid"),
        source_profile: NodeProfile::idle(2.0, 1 << 30),
        ttl: 0,
        tier: LatencyTier::Local,
        rtts: Default::default(),
        job_offers: Vec::new(),
        departed: Vec::new(),
    };
    let mut bytes = Vec::new();
    ciborium::into_writer(&steal, &mut bytes).expect("encodes");
    b.send_raw(&to, bytes).await.expect("queued");
    let r = expect(&mut ea, Duration::from_secs(5), "bad invalid", bad_reason).await;
    assert!(r.contains("invalid work-steal") && r.contains("ttl"), "{r}");

    // The sender learns each refusal.
    for _ in 0..3 {
        let r = expect(
            &mut eb,
            Duration::from_secs(10),
            "send failed",
            |ev| match ev {
                NetEvent::SendFailed { reason, .. } => Some(reason.clone()),
                _ => None,
            },
        )
        .await;
        assert!(r.contains("refused by the peer"), "{r}");
    }

    // The node still serves: a valid message goes through on the same connection.
    let ok = Message::StealExhausted { id: MessageId(7) };
    b.send(&to, ok.clone()).await.expect("sent");
    let got = expect(
        &mut ea,
        Duration::from_secs(5),
        "valid message",
        |ev| match ev {
            NetEvent::Message { message, .. } => Some(message.clone()),
            _ => None,
        },
    )
    .await;
    assert_eq!(got, ok);
    assert_eq!(a.peers().await.expect("running").len(), 1);
}

fn bad_reason(ev: &NetEvent) -> Option<String> {
    match ev {
        NetEvent::BadMessage { reason, .. } => Some(reason.clone()),
        _ => None,
    }
}

#[tokio::test]
async fn given_a_wrong_pool_key_then_no_connection_and_the_error_says_so() {
    let (_a, mut ea, addr_a) = node(PoolKey::generate(), vec![]).await;
    let started = Instant::now();
    let (_b, mut eb, _) = node(PoolKey::generate(), vec![addr_a.clone()]).await;
    let reason = expect(
        &mut eb,
        Duration::from_secs(8),
        "dial error",
        |ev| match ev {
            NetEvent::DialError { reason, .. } => Some(reason.clone()),
            NetEvent::PeerUp { .. } => panic!("connected with a wrong key"),
            _ => None,
        },
    )
    .await;
    let took = started.elapsed();
    assert!(reason.contains("wrong or missing pool key?"), "{reason}");
    assert!(
        reason.contains(&addr_a.to_string()),
        "names the address: {reason}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    eprintln!("wrong key detected by the dialer after {took:?}: {reason}");
    let reason = expect(
        &mut ea,
        Duration::from_secs(8),
        "incoming error",
        |ev| match ev {
            NetEvent::IncomingError { reason, .. } => Some(reason.clone()),
            NetEvent::PeerUp { .. } => panic!("connected with a wrong key"),
            _ => None,
        },
    )
    .await;
    assert!(reason.contains("wrong or missing pool key?"), "{reason}");
}

/// A plain libp2p node (tcp, noise, yamux, ping) with no pool key at all.
async fn plain_node() -> (Multiaddr, tokio::task::JoinHandle<()>) {
    let mut swarm = libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            tcp::Config::default(),
            noise::Config::new,
            yamux::Config::default,
        )
        .expect("transport")
        .with_behaviour(|_| ping::Behaviour::default())
        .expect("behaviour")
        .build();
    swarm
        .listen_on("/ip4/127.0.0.1/tcp/0".parse().expect("addr"))
        .expect("listens");
    let addr = loop {
        if let libp2p::swarm::SwarmEvent::NewListenAddr { address, .. } =
            swarm.select_next_some().await
        {
            break address;
        }
    };
    let task = tokio::spawn(async move {
        loop {
            swarm.select_next_some().await;
        }
    });
    (addr, task)
}

#[tokio::test]
async fn given_a_node_without_the_pool_key_then_no_connection_either_way() {
    let (plain_addr, plain) = plain_node().await;
    // Our node dials the keyless one.
    let (a, mut ea, addr_a) = node(PoolKey::generate(), vec![plain_addr]).await;
    let started = Instant::now();
    let reason = expect(
        &mut ea,
        Duration::from_secs(8),
        "dial error",
        |ev| match ev {
            NetEvent::DialError { reason, .. } => Some(reason.clone()),
            NetEvent::PeerUp { .. } => panic!("connected without a key"),
            _ => None,
        },
    )
    .await;
    assert!(reason.contains("wrong or missing pool key?"), "{reason}");
    assert!(started.elapsed() < Duration::from_secs(5));
    plain.abort();

    // A keyless node dials ours.
    let mut swarm = libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            tcp::Config::default(),
            noise::Config::new,
            yamux::Config::default,
        )
        .expect("transport")
        .with_behaviour(|_| ping::Behaviour::default())
        .expect("behaviour")
        .build();
    swarm.dial(addr_a).expect("dials");
    let dialer = tokio::spawn(async move {
        loop {
            if let libp2p::swarm::SwarmEvent::OutgoingConnectionError { .. } =
                swarm.select_next_some().await
            {
                return;
            }
        }
    });
    let reason = expect(
        &mut ea,
        Duration::from_secs(8),
        "incoming error",
        |ev| match ev {
            NetEvent::IncomingError { reason, .. } => Some(reason.clone()),
            NetEvent::PeerUp { .. } => panic!("connected without a key"),
            _ => None,
        },
    )
    .await;
    assert!(reason.contains("wrong or missing pool key?"), "{reason}");
    tokio::time::timeout(Duration::from_secs(8), dialer)
        .await
        .expect("the keyless dialer fails too")
        .expect("task");
    assert!(a.peers().await.expect("running").is_empty());
}

#[tokio::test]
async fn given_an_unreachable_peer_server_then_a_clear_error_and_the_node_keeps_running() {
    // A port that nothing listens on: bind, read the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let bogus: Multiaddr = format!("/ip4/127.0.0.1/tcp/{port}").parse().expect("addr");
    let key = PoolKey::generate();
    let mut config = NetConfig::new(key);
    config.peer_servers = vec![bogus.clone()];
    let (a, mut ea, _task) = Network::start(config).await.expect("starts");
    let (addr, reason) = expect(
        &mut ea,
        Duration::from_secs(5),
        "peer server error",
        |ev| match ev {
            NetEvent::PeerServerError { addr, reason } => Some((addr.clone(), reason.clone())),
            _ => None,
        },
    )
    .await;
    assert_eq!(addr, bogus);
    assert!(reason.contains("refused"), "{reason}");
    // Still serving: another node connects and measures it.
    let addr_a = a.listen_addrs().await.expect("running")[0].clone();
    let (_b, mut eb, _) = node(key, vec![addr_a]).await;
    expect(&mut eb, Duration::from_secs(5), "rtt", |ev| {
        matches!(ev, NetEvent::PeerRtt { .. }).then_some(())
    })
    .await;
}

#[tokio::test]
async fn given_a_delaying_relay_then_the_rtt_puts_the_peer_in_the_regional_tier() {
    let key = PoolKey::generate();
    let (a, _ea, addr_a) = node(key, vec![]).await;
    let target = multiaddr_to_socket(&addr_a);
    let relay = ios_agent_net::relay::DelayRelay::start(
        "127.0.0.1:0".parse().expect("addr"),
        target,
        Duration::from_millis(20),
    )
    .await
    .expect("relay");
    let via: Multiaddr = format!("/ip4/127.0.0.1/tcp/{}", relay.local_addr().port())
        .parse()
        .expect("addr");
    let (_b, mut eb, _) = node(key, vec![via]).await;
    let mut samples = Vec::new();
    while samples.len() < 4 {
        let rtt = expect(&mut eb, Duration::from_secs(10), "rtt", |ev| match ev {
            NetEvent::PeerRtt { peer, rtt } if *peer == a.local_peer_id() => Some(*rtt),
            _ => None,
        })
        .await;
        samples.push(rtt);
    }
    eprintln!("rtt through a relay of 2 x 20 ms: {samples:?}");
    for rtt in samples {
        assert!(
            rtt >= Duration::from_millis(40) && rtt < Duration::from_millis(60),
            "{rtt:?}"
        );
        assert_eq!(LatencyTier::from_rtt(rtt), LatencyTier::Regional);
    }
}

fn multiaddr_to_socket(a: &Multiaddr) -> std::net::SocketAddr {
    use libp2p::multiaddr::Protocol;
    let mut ip = None;
    let mut port = None;
    for p in a.iter() {
        match p {
            Protocol::Ip4(i) => ip = Some(std::net::IpAddr::V4(i)),
            Protocol::Tcp(p) => port = Some(p),
            _ => {}
        }
    }
    std::net::SocketAddr::new(ip.expect("ip"), port.expect("port"))
}

/// Issue 12, item 5: the host a node runs on reaches its peers over the authenticated
/// connection (identify), so an agent ties every host it moves work to to the agent that
/// announced it.
#[tokio::test]
async fn given_a_node_with_a_host_then_its_peers_learn_the_host_with_its_peer_id() {
    let key = PoolKey::generate();
    let mut config = NetConfig::new(key);
    config.host = Some(HostName::new("node-a").expect("valid"));
    let (a, _ea, _task) = Network::start(config).await.expect("starts");
    let addr_a = a.listen_addrs().await.expect("running")[0].clone();
    let (_b, mut eb, _) = node(key, vec![addr_a]).await;
    let (peer, host) = expect(&mut eb, Duration::from_secs(5), "a up", |ev| match ev {
        NetEvent::PeerUp { peer, host, .. } => Some((peer.clone(), host.clone())),
        _ => None,
    })
    .await;
    assert_eq!(peer, a.local_peer_id());
    assert_eq!(host, Some(HostName::new("node-a").expect("valid")));
    assert_eq!(
        ios_agent_net::network::announced_host("ios-agent-net/0.1.0"),
        None
    );
    assert_eq!(
        ios_agent_net::network::announced_host("x host=bad;name"),
        None
    );
}

/// `try_send` never waits: beyond the send queue's capacity a message is dropped, counted and
/// refused with `QueueFull`; one queued for an agent not connected comes back as `SendFailed`.
#[tokio::test(flavor = "current_thread")]
async fn given_a_full_send_queue_then_try_send_drops_counts_and_refuses() {
    let mut config = NetConfig::new(PoolKey::generate());
    config.send_queue = 2;
    let (net, mut events, _task) = Network::start(config).await.expect("starts");
    let (nobody, _, _) = node(PoolKey::generate(), vec![]).await;
    let to = nobody.local_peer_id();
    let message = || Message::StealExhausted { id: MessageId(1) };
    // On a current-thread runtime the network task cannot run between these calls, so the
    // queue fills after exactly its capacity.
    let results: Vec<_> = (0..5).map(|_| net.try_send(&to, message())).collect();
    assert!(results[..2].iter().all(Result::is_ok), "{results:?}");
    assert!(
        results[2..]
            .iter()
            .all(|r| matches!(r, Err(ios_agent_net::NetError::QueueFull { .. }))),
        "{results:?}"
    );
    assert_eq!(net.dropped_messages(), 3);
    // The two queued ones reach the task, which finds the agent not connected.
    for _ in 0..2 {
        let reason = expect(
            &mut events,
            Duration::from_secs(5),
            "send failed",
            |ev| match ev {
                NetEvent::SendFailed { to: t, reason, .. } if *t == to => Some(reason.clone()),
                _ => None,
            },
        )
        .await;
        assert!(reason.contains("not connected"), "{reason}");
    }
    // Room again.
    net.try_send(&to, message()).expect("queued");
    assert_eq!(net.dropped_messages(), 3);
}

/// Waits at most 5 s for `who` to come up (`up`) or go.
async fn peer_seen(events: &mut Events, who: &ios_agent_core::PeerId, up: bool, what: &str) {
    expect(events, Duration::from_secs(5), what, |ev| match ev {
        NetEvent::PeerUp { peer, .. } if up && peer == who => Some(()),
        NetEvent::PeerGone { peer } if !up && peer == who => Some(()),
        _ => None,
    })
    .await;
}

/// The driver's rotation closes a connection it has no use for: both ends see the agent
/// gone. A direct peer stays: b dialed a as one, so b's request to drop a does nothing.
#[tokio::test]
async fn given_a_disconnect_then_the_connection_closes_unless_the_peer_is_direct() {
    let key = PoolKey::generate();
    let (a, mut ea, addr_a) = node(key, vec![]).await;
    let (b, mut eb, _) = node(key, vec![addr_a]).await;
    let (a_id, b_id) = (a.local_peer_id(), b.local_peer_id());
    peer_seen(&mut ea, &b_id, true, "b up at a").await;
    peer_seen(&mut eb, &a_id, true, "a up at b").await;

    // At b, a is a direct peer: kept.
    b.try_disconnect(&a_id).expect("queued");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        b.peers().await.expect("running").len(),
        1,
        "a direct peer was dropped"
    );

    // At a, b is a discovered (here: dialing) agent: dropped, and both see it gone.
    a.try_disconnect(&b_id).expect("queued");
    peer_seen(&mut ea, &b_id, false, "b gone at a").await;
    peer_seen(&mut eb, &a_id, false, "a gone at b").await;
    // An id that is no libp2p peer id is refused, not sent.
    let bogus = ios_agent_core::PeerId::new(b"not-a-libp2p-id".to_vec()).expect("valid");
    assert!(a.try_disconnect(&bogus).is_err());
}

/// A node asked to listen on two addresses reports both before it runs; one asked for an
/// address of no local interface fails at start, naming it (the listen loop the peer server
/// shares, `transport::listen_all`). (A port another process listens on is no failure:
/// libp2p's TCP listeners set SO_REUSEPORT.)
#[tokio::test]
async fn given_listen_addresses_then_all_are_bound_at_start_and_a_foreign_one_is_named() {
    let key = PoolKey::generate();
    let mut config = NetConfig::new(key);
    config.listen = vec![
        "/ip4/127.0.0.1/tcp/0".parse().unwrap(),
        "/ip4/127.0.0.2/tcp/0".parse().unwrap(),
    ];
    let (net, _events, _task) = Network::start(config).await.expect("starts");
    let addrs = net.listen_addrs().await.expect("running");
    assert_eq!(addrs.len(), 2, "{addrs:?}");
    assert!(addrs
        .iter()
        .any(|a| a.to_string().starts_with("/ip4/127.0.0.2/tcp/")));

    // 192.0.2.1 (TEST-NET-1) is no address of this machine: the bind fails, nothing is sent.
    let foreign: Multiaddr = "/ip4/192.0.2.1/tcp/0".parse().unwrap();
    let mut elsewhere = NetConfig::new(key);
    elsewhere.listen = vec![foreign.clone()];
    let error = match Network::start(elsewhere).await {
        Ok(_) => panic!("listened on {foreign}"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains("cannot listen on") && error.contains(&foreign.to_string()),
        "{error}"
    );
}

/// Starts a peer server (the `peer-server` binary) on loopback; returns it and its address.
fn peer_server(dir: &std::path::Path, key: &std::path::Path) -> (mpi_ios_tests::Group, Multiaddr) {
    let mut cmd = std::process::Command::new(mpi_ios_tests::bin("peer-server"));
    cmd.args([
        "--listen",
        "/ip4/127.0.0.1/tcp/0",
        "--min-ttl",
        "2",
        "--pool-key",
    ])
    .arg(key)
    .arg("--state-dir")
    .arg(dir.join("server.state"));
    let server = mpi_ios_tests::Group::start(cmd, dir, "peer-server");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = std::fs::read_to_string(&server.stdout).unwrap_or_default();
        let listening = out
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["event"] == "listening");
        if let Some(v) = listening {
            let addr = v["addrs"][0].as_str().expect("an address");
            return (server, addr.parse().expect("a multiaddr"));
        }
        assert!(
            Instant::now() < deadline,
            "peer server not listening within 10 s: {}",
            server.stderr_so_far()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Agents a and b of a pool with a peer server, on `hosts`; a found b through the server,
/// then closed the connection (as the driver's rotation does), and neither dials the other
/// again within a minute (b looks for agents once a minute; discovery leaves a dropped
/// agent alone for the longest redial wait).
struct Pair {
    a: NetHandle,
    ea: Events,
    b: NetHandle,
    eb: Events,
    _server: mpi_ios_tests::Group,
    _dir: tempfile::TempDir,
}

async fn pair_through_a_peer_server(hosts: [Option<&str>; 2]) -> Pair {
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("pool.key");
    let key = PoolKey::generate_to_file(&key_file).expect("key written");
    let (server, server_addr) = peer_server(dir.path(), &key_file);
    let config = |discover: Duration, host: Option<&str>| {
        let mut c = NetConfig::new(key);
        c.peer_servers = vec![server_addr.clone()];
        c.handshake_timeout = Duration::from_secs(3);
        c.discover_interval = discover;
        c.max_discover_interval = discover;
        c.max_redial_interval = Duration::from_secs(60);
        c.host = host.map(|h| HostName::new(h).expect("valid"));
        c
    };
    let (b, mut eb, _) = Network::start(config(Duration::from_secs(60), hosts[1]))
        .await
        .expect("b starts");
    expect(&mut eb, Duration::from_secs(10), "b registered", |ev| {
        matches!(ev, NetEvent::PeerServerUp { .. }).then_some(())
    })
    .await;
    let (a, mut ea, _) = Network::start(config(Duration::from_secs(5), hosts[0]))
        .await
        .expect("a starts");
    let b_id = b.local_peer_id();
    peer_seen(&mut ea, &b_id, true, "b discovered and connected at a").await;
    a.try_disconnect(&b_id).expect("queued");
    peer_seen(&mut ea, &b_id, false, "b gone at a").await;
    assert!(a.peers().await.expect("running").is_empty());
    Pair {
        a,
        ea,
        b,
        eb,
        _server: server,
        _dir: dir,
    }
}

/// Dial on request (`ios_agent_net::on_request`): a knows b only through the peer server's
/// registration and is not connected to it (it closed the connection discovery made, as the
/// driver's rotation does, and discovery leaves b alone for a minute): a message to b dials
/// b, and b gets it. Then b's address is taken by a node of another pool: a message to b
/// dials, fails on the pool key, comes back with the reason; the next one within the
/// backoff comes back at once, without a dial.
#[tokio::test]
async fn given_an_agent_known_only_through_the_peer_server_then_a_message_dials_it_and_a_refusing_one_backs_off(
) {
    // Bound first: the fields left out of the pattern (the server) live to the end.
    let pair = pair_through_a_peer_server([None, None]).await;
    let Pair {
        a,
        mut ea,
        b,
        mut eb,
        ..
    } = pair;
    let (a_id, b_id) = (a.local_peer_id(), b.local_peer_id());

    let message = Message::StealExhausted { id: MessageId(7) };
    let asked = Instant::now();
    a.try_send(&b_id, message.clone()).expect("queued");
    let got = expect(
        &mut eb,
        Duration::from_secs(5),
        "the message at b",
        |ev| match ev {
            NetEvent::Message { from, message } if *from == a_id => Some(message.clone()),
            NetEvent::SendFailed { .. } => panic!("b could not answer: {ev:?}"),
            _ => None,
        },
    )
    .await;
    assert_eq!(got, message);
    eprintln!("dialed on request and delivered in {:?}", asked.elapsed());
    // b can have the message before a's network task lists the connection (it failed so in
    // CI, 1 run in 5 here): wait for it, briefly.
    let listed = Instant::now() + Duration::from_secs(2);
    while a.peers().await.expect("running").len() != 1 {
        assert!(
            Instant::now() < listed,
            "a not connected to b 2 s after delivery"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // b leaves; a node of another pool listens on its port.
    let b_addr = b.listen_addrs().await.expect("running")[0].clone();
    a.try_disconnect(&b_id).expect("queued");
    peer_seen(&mut ea, &b_id, false, "b gone at a again").await;
    b.shutdown().await.expect("b stops");
    drop(eb);
    let mut other = NetConfig::new(PoolKey::generate());
    other.listen = vec![b_addr];
    other.handshake_timeout = Duration::from_secs(3);
    let (_c, mut ec, _) = Network::start(other).await.expect("c starts on b's port");
    a.try_send(&b_id, message.clone()).expect("queued");
    let reason = expect(
        &mut ea,
        Duration::from_secs(8),
        "the refusal",
        |ev| match ev {
            NetEvent::SendFailed { to, reason, .. } if *to == b_id => Some(reason.clone()),
            NetEvent::PeerUp { .. } => panic!("connected to a node of another pool"),
            _ => None,
        },
    )
    .await;
    assert!(reason.contains("dial on request failed"), "{reason}");
    assert!(reason.contains("wrong or missing pool key?"), "{reason}");
    // c saw the one attempt.
    expect(&mut ec, Duration::from_secs(5), "c's refusal", |ev| {
        matches!(ev, NetEvent::IncomingError { .. }).then_some(())
    })
    .await;
    // Within the backoff (3 s): refused at once, not dialed again.
    let asked = Instant::now();
    a.try_send(&b_id, message).expect("queued");
    let reason = expect(
        &mut ea,
        Duration::from_secs(2),
        "the backoff",
        |ev| match ev {
            NetEvent::SendFailed { to, reason, .. } if *to == b_id => Some(reason.clone()),
            _ => None,
        },
    )
    .await;
    assert!(reason.contains("not dialed again for"), "{reason}");
    assert!(reason.contains("wrong or missing pool key?"), "{reason}");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Ok(ev) = ec.try_recv() {
        assert!(
            !matches!(ev, NetEvent::IncomingError { .. }),
            "dialed again during the backoff: {ev:?}"
        );
    }
}

/// Dial by host name (`ios_agent_net::by_host`): b registers under its host's name too. a,
/// no longer connected to b (it closed the connection discovery made, as the driver's
/// rotation does), asks for b's host: a looks it up at the peer server, dials b, and b comes
/// up with that host. A host no agent runs on is reported unknown, once per rest, however
/// often it is asked for.
#[tokio::test]
async fn given_an_agent_not_connected_then_a_dial_by_its_host_name_connects_it_and_an_unknown_host_is_reported(
) {
    // Bound first: the fields left out of the pattern (the server) live to the end.
    let pair = pair_through_a_peer_server([Some("node-a"), Some("node-b")]).await;
    let Pair { a, mut ea, b, .. } = pair;
    let b_id = b.local_peer_id();

    let node_b = HostName::new("node-b").expect("valid");
    let asked = Instant::now();
    a.try_dial_host(&node_b).expect("queued");
    let host = expect(
        &mut ea,
        Duration::from_secs(5),
        "b up by its host",
        |ev| match ev {
            NetEvent::PeerUp { peer, host, .. } if *peer == b_id => Some(host.clone()),
            NetEvent::HostUnknown { .. } => panic!("b not found: {ev:?}"),
            _ => None,
        },
    )
    .await;
    assert_eq!(host, Some(node_b.clone()));
    eprintln!("looked up and connected by host in {:?}", asked.elapsed());

    // A host with no agent: reported, with the reason; asked again at once, not looked up
    // again (its rest), so reported once.
    let node_z = HostName::new("node-z").expect("valid");
    a.try_dial_host(&node_z).expect("queued");
    let (host, reason) = expect(
        &mut ea,
        Duration::from_secs(5),
        "node-z unknown",
        |ev| match ev {
            NetEvent::HostUnknown { host, reason } => Some((host.clone(), reason.clone())),
            _ => None,
        },
    )
    .await;
    assert_eq!(host, node_z);
    assert!(reason.contains("no agent registered"), "{reason}");
    for _ in 0..5 {
        a.try_dial_host(&node_z).expect("queued");
    }
    // Its own host is never looked up.
    a.try_dial_host(&HostName::new("node-a").expect("valid"))
        .expect("queued");
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Ok(ev) = ea.try_recv() {
        assert!(
            !matches!(ev, NetEvent::HostUnknown { .. }),
            "looked up again within the rest: {ev:?}"
        );
    }
}
