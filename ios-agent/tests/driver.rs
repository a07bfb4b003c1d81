//! The driver loop with an in-process transport: two real driver loops (tokio time, real
//! channels) exchange the core's messages, and the loaded node's agent asks its "pcmd" to
//! move a rank to the idle node. Checks the plumbing, not the policy (the core's simulator
//! tests the policy).
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ios_agent::connections::ConnectionPolicy;
use ios_agent::driver::{
    self, ControlRequest, Inputs, LeaveOrder, LeaveOrigin, LeaveUpdate, Migrator, Options, Sample,
};
use ios_agent::status::{AgentStatus, DecisionKind, ResizeReason};
use ios_agent::transport::{NetEvent, Transport};
use ios_agent_core::agent::MigrationOutcome;
use ios_agent_core::{
    Agent, Config, EntityId, EntityProfile, Message, MigrationId, NodeProfile, PeerId,
};
use pcm_proto::{HostName, JobId, Malleability, Rank};
use tokio::sync::{mpsc, oneshot};

/// Delivers messages to the other agent's peer-event channel.
struct Wire {
    me: PeerId,
    to: mpsc::Sender<NetEvent>,
}

impl Transport for Wire {
    fn send(&self, _to: &PeerId, message: Message) {
        let _ = self.to.try_send(NetEvent::Message {
            from: self.me.clone(),
            message,
        });
    }
}

/// One recorded migration request: what moves where.
type Move = (Vec<EntityId>, HostName);

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Move>>>);

impl Migrator for Recorder {
    fn migrate(&self, _: MigrationId, entities: &[EntityId], to: &HostName) -> MigrationOutcome {
        self.0.lock().unwrap().push((entities.to_vec(), to.clone()));
        MigrationOutcome::Completed
    }

    fn resize(&self, _: MigrationId, job: &JobId, ranks: u32, _: &[HostName]) -> MigrationOutcome {
        // These tests' jobs are not malleable: a resize would be the core's mistake.
        MigrationOutcome::Failed {
            reason: format!("unexpected resize of {job} to {ranks} ranks"),
        }
    }
}

/// One recorded resize request: the job, the width asked for, the hosts.
type ResizeRequest = (JobId, u32, Vec<HostName>);

/// A "pcmd" that records resize requests and answers each with the outcome the test sends
/// (a resize blocks its thread until then, as a real one does for hundreds of ms).
#[derive(Clone)]
struct Resizer {
    asked: Arc<Mutex<Vec<ResizeRequest>>>,
    outcomes: Arc<Mutex<std::sync::mpsc::Receiver<MigrationOutcome>>>,
}

impl Migrator for Resizer {
    fn migrate(&self, _: MigrationId, _: &[EntityId], _: &HostName) -> MigrationOutcome {
        MigrationOutcome::Failed {
            reason: "this test moves nothing".into(),
        }
    }

    fn resize(
        &self,
        _: MigrationId,
        job: &JobId,
        ranks: u32,
        hosts: &[HostName],
    ) -> MigrationOutcome {
        self.asked
            .lock()
            .unwrap()
            .push((job.clone(), ranks, hosts.to_vec()));
        self.outcomes
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or(MigrationOutcome::Failed {
                reason: "the test sent no outcome".into(),
            })
    }
}

fn config() -> Config {
    Config::default()
        .with_profile_period(Duration::from_millis(100))
        .with_steal_period(Duration::from_millis(100))
        .with_steal_timeout(Duration::from_millis(300))
        .with_seed(7)
}

fn entity(rank: u32, compute_ms: u64) -> EntityProfile {
    let mut e = EntityProfile::new(
        EntityId {
            job: JobId::new("job-1").unwrap(),
            rank: Rank(rank),
        },
        0.5,
    );
    e.compute = Duration::from_millis(compute_ms);
    e.iteration_rate = 1000.0 / compute_ms as f64;
    e.age = Duration::from_secs(600);
    e.resident = Duration::from_secs(600);
    e
}

/// Two driver loops, node-a's and node-b's, joined by wires; node-a's migrations are recorded.
struct Pair {
    a: PeerId,
    b: PeerId,
    a_peers_tx: mpsc::Sender<NetEvent>,
    b_peers_tx: mpsc::Sender<NetEvent>,
    a_samples_tx: mpsc::Sender<Sample>,
    b_samples_tx: mpsc::Sender<Sample>,
    a_control_tx: mpsc::Sender<ControlRequest>,
    b_control_tx: mpsc::Sender<ControlRequest>,
    run_a: tokio::task::JoinHandle<Agent>,
    run_b: tokio::task::JoinHandle<Agent>,
    moves: Recorder,
}

fn two_loops() -> Pair {
    let a = PeerId::new(b"agent-a".to_vec()).unwrap();
    let b = PeerId::new(b"agent-b".to_vec()).unwrap();
    let (a_peers_tx, a_peers_rx) = mpsc::channel(64);
    let (b_peers_tx, b_peers_rx) = mpsc::channel(64);
    let (a_samples_tx, a_samples_rx) = mpsc::channel(4);
    let (b_samples_tx, b_samples_rx) = mpsc::channel(4);
    let (a_control_tx, a_control_rx) = mpsc::channel(4);
    let (b_control_tx, b_control_rx) = mpsc::channel(4);
    let now = std::time::Instant::now();
    let agent_a = Agent::new(a.clone(), HostName::new("node-a").unwrap(), config(), now).unwrap();
    let agent_b = Agent::new(b.clone(), HostName::new("node-b").unwrap(), config(), now).unwrap();
    let moves = Recorder::default();
    let run_a = tokio::spawn(driver::run(
        agent_a,
        Wire {
            me: a.clone(),
            to: b_peers_tx.clone(),
        },
        moves.clone(),
        Inputs {
            peers: a_peers_rx,
            samples: a_samples_rx,
            control: a_control_rx,
        },
    ));
    let run_b = tokio::spawn(driver::run(
        agent_b,
        Wire {
            me: b.clone(),
            to: a_peers_tx.clone(),
        },
        Recorder::default(),
        Inputs {
            peers: b_peers_rx,
            samples: b_samples_rx,
            control: b_control_rx,
        },
    ));
    Pair {
        a,
        b,
        a_peers_tx,
        b_peers_tx,
        a_samples_tx,
        b_samples_tx,
        a_control_tx,
        b_control_tx,
        run_a,
        run_b,
        moves,
    }
}

/// What the network reports when a peer connects: the host it announced, then an RTT.
async fn connect(tx: &mpsc::Sender<NetEvent>, peer: &PeerId, host: &str, rtt: Duration) {
    tx.send(NetEvent::PeerUp {
        peer: peer.clone(),
        addr: "/ip4/127.0.0.1/tcp/1".parse().unwrap(),
        host: Some(HostName::new(host).unwrap()),
    })
    .await
    .unwrap();
    tx.send(NetEvent::PeerRtt {
        peer: peer.clone(),
        rtt,
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn loaded_node_moves_a_rank_to_the_idle_node_through_the_driver() {
    let Pair {
        a,
        b,
        a_peers_tx,
        b_peers_tx,
        a_samples_tx,
        b_samples_tx,
        a_control_tx,
        b_control_tx,
        run_a,
        run_b,
        moves,
    } = two_loops();
    // Node A: one core, two ranks and a hog competing for it. Node B: one idle core.
    let loaded = NodeProfile {
        cpu_load: 3.0,
        competing: 1.0,
        ..NodeProfile::idle(1.0, 8 << 30)
    };
    let idle = NodeProfile::idle(1.0, 8 << 30);
    let rtt = Duration::from_millis(1);
    connect(&a_peers_tx, &b, "node-b", rtt).await;
    connect(&b_peers_tx, &a, "node-a", rtt).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while moves.0.lock().unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no migration within 10 s"
        );
        let _ = a_samples_tx
            .send(Sample {
                node: Some(loaded),
                entities: Some(vec![entity(0, 30), entity(1, 90)]),
                rank_pids: vec![],
                stalled: vec![],
            })
            .await;
        let _ = b_samples_tx
            .send(Sample {
                node: Some(idle),
                entities: Some(vec![]),
                rank_pids: vec![],
                stalled: vec![],
            })
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (entities, host) = moves.0.lock().unwrap()[0].clone();
    assert_eq!(host.as_str(), "node-b");
    assert_eq!(entities.len(), 1);

    // The status shows the peer, the decision and the counters.
    let (tx, rx) = oneshot::channel();
    a_control_tx.send(ControlRequest::Status(tx)).await.unwrap();
    let status = rx.await.unwrap();
    assert_eq!(status.peers.len(), 1);
    assert_eq!(status.peers[0].tier, "local");
    assert!(
        status
            .decisions
            .iter()
            .any(|d| matches!(&d.what, DecisionKind::MigrationStarted { to_host, .. } if to_host == "node-b")),
        "{:?}",
        status.decisions
    );
    assert!(status.to_text().contains("node-b"));

    for control in [a_control_tx, b_control_tx] {
        control.send(ControlRequest::Stop).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(5), run_a)
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), run_b)
        .await
        .unwrap()
        .unwrap();
}

/// Two driver loops joined by wires, A leaving, B idle; returns what A's leave reported.
async fn leave_with_a_peer(
    peer_present: bool,
    within: Duration,
    force: bool,
) -> (Vec<LeaveUpdate>, Vec<Move>, bool) {
    let Pair {
        a,
        b,
        a_peers_tx,
        b_peers_tx,
        a_samples_tx,
        b_samples_tx,
        a_control_tx,
        b_control_tx,
        run_a,
        run_b,
        moves,
    } = two_loops();
    if peer_present {
        let rtt = Duration::from_millis(1);
        connect(&a_peers_tx, &b, "node-b", rtt).await;
        connect(&b_peers_tx, &a, "node-a", rtt).await;
    }
    // Node A is idle and uncontended: only the leave makes its ranks move. Node B has two
    // idle cores.
    let all = [entity(0, 30), entity(1, 30)];
    let (updates, mut rx) = mpsc::unbounded_channel();
    let mut left = Vec::new();
    let mut ended = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut asked = false;
    while tokio::time::Instant::now() < deadline && !ended {
        // pcmd's view: the ranks not yet moved.
        let moved: Vec<EntityId> = moves
            .0
            .lock()
            .unwrap()
            .iter()
            .flat_map(|m| m.0.clone())
            .collect();
        let here: Vec<EntityProfile> = all
            .iter()
            .filter(|e| !moved.contains(&e.id))
            .cloned()
            .collect();
        let _ = a_samples_tx
            .send(Sample {
                node: Some(NodeProfile::idle(1.0, 8 << 30)),
                entities: Some(here),
                rank_pids: vec![],
                stalled: vec![],
            })
            .await;
        let _ = b_samples_tx
            .send(Sample {
                node: Some(NodeProfile::idle(2.0, 8 << 30)),
                entities: Some(vec![]),
                rank_pids: vec![],
                stalled: vec![],
            })
            .await;
        if !asked {
            asked = true;
            a_control_tx
                .send(ControlRequest::Leave(LeaveOrder {
                    within,
                    force,
                    updates: updates.clone(),
                    origin: LeaveOrigin::Command,
                }))
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        while let Ok(u) = rx.try_recv() {
            ended = !matches!(u, LeaveUpdate::Progress(_));
            left.push(u);
        }
    }
    let stopped = tokio::time::timeout(Duration::from_millis(500), async {
        while !run_a.is_finished() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .is_ok();
    let _ = a_control_tx.send(ControlRequest::Stop).await;
    let _ = b_control_tx.send(ControlRequest::Stop).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), run_b).await;
    let recorded = moves.0.lock().unwrap().clone();
    (left, recorded, stopped)
}

#[tokio::test]
async fn a_leaving_node_hands_every_rank_to_its_idle_peer_then_stops() {
    let (updates, moves, stopped) = leave_with_a_peer(true, Duration::from_secs(15), false).await;
    let Some(LeaveUpdate::Left(report)) = updates.last() else {
        panic!("no Left at the end: {updates:?}");
    };
    assert!(report.is_empty(), "{report:?}");
    assert_eq!(report.moved, 2, "{report:?}");
    assert_eq!(moves.len(), 2, "one rank per move: {moves:?}");
    assert!(moves
        .iter()
        .all(|(e, host)| e.len() == 1 && host.as_str() == "node-b"));
    assert!(stopped, "the agent did not stop after the drain");
}

#[tokio::test]
async fn a_node_nobody_can_take_from_stays_unless_forced() {
    let (updates, moves, stopped) = leave_with_a_peer(false, Duration::from_secs(1), false).await;
    let Some(LeaveUpdate::Stayed(report)) = updates.last() else {
        panic!("no Stayed at the end: {updates:?}");
    };
    assert_eq!(report.ranks_left.len(), 2, "{report:?}");
    assert_eq!(report.peers, 0);
    assert!(moves.is_empty());
    assert!(!stopped, "the agent stopped although the drain failed");
    assert!(
        report.summary().contains("ranks here: job-1/0, job-1/1"),
        "{}",
        report.summary()
    );

    let (updates, _, stopped) = leave_with_a_peer(false, Duration::from_secs(1), true).await;
    let Some(LeaveUpdate::Left(report)) = updates.last() else {
        panic!("no Left at the end: {updates:?}");
    };
    assert_eq!(report.ranks_left.len(), 2, "{report:?}");
    assert!(stopped, "--force: the agent must stop");
}

/// Issue 12, item 5, through the driver: a pool-key holder "agent-k" (announced host
/// node-k) sends forged work steals to a loaded agent: a made-up origin and source with
/// `source_host=localhost` and a fake idle 64-core profile, one claiming to come from another
/// agent, and one for itself but naming localhost. Nothing moves. Its honest request for
/// itself then moves a rank to node-k, showing that the node would have given work.
#[tokio::test]
async fn forged_work_steals_move_nothing_and_an_honest_one_does() {
    let Pair {
        a_peers_tx,
        b,
        a_samples_tx,
        a_control_tx,
        b_control_tx,
        run_a,
        run_b,
        moves,
        ..
    } = two_loops();
    let k = PeerId::new(b"agent-k".to_vec()).unwrap();
    let rtt = Duration::from_millis(1);
    connect(&a_peers_tx, &k, "node-k", rtt).await;
    connect(&a_peers_tx, &b, "node-b", rtt).await;
    let loaded = NodeProfile {
        cpu_load: 3.0,
        competing: 1.0,
        ..NodeProfile::idle(1.0, 8 << 30)
    };
    let sample = || Sample {
        node: Some(loaded),
        entities: Some(vec![entity(0, 30), entity(1, 90)]),
        rank_pids: vec![],
        stalled: vec![],
    };
    a_samples_tx.send(sample()).await.unwrap();
    let steal = |id: u64, origin: &PeerId, source: &PeerId, host: &str| NetEvent::Message {
        from: k.clone(),
        message: Message::WorkSteal {
            id: ios_agent_core::MessageId(id),
            origin: origin.clone(),
            source: source.clone(),
            source_host: HostName::new(host).unwrap(),
            source_profile: NodeProfile::idle(64.0, 1 << 40),
            ttl: 3,
            tier: ios_agent_core::LatencyTier::Local,
            rtts: Default::default(),
            job_offers: Vec::new(),
            departed: Vec::new(),
        },
    };
    let x = PeerId::new(b"made-up-x".to_vec()).unwrap();
    let y = PeerId::new(b"made-up-y".to_vec()).unwrap();
    for forged in [
        steal(1, &x, &y, "localhost"),
        steal(2, &b, &b, "node-b"),
        steal(3, &k, &k, "localhost"),
        steal(4, &k, &b, "node-b"),
    ] {
        a_peers_tx.send(forged).await.unwrap();
    }
    // Samples keep the node loaded meanwhile; a second is ample for the loop to act.
    for _ in 0..10 {
        let _ = a_samples_tx.send(sample()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(moves.0.lock().unwrap().is_empty(), "{:?}", moves.0.lock());

    a_peers_tx.send(steal(5, &k, &k, "node-k")).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while moves.0.lock().unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the honest steal moved nothing within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recorded = moves.0.lock().unwrap().clone();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].1.as_str(), "node-k");
    let (tx, rx) = oneshot::channel();
    a_control_tx.send(ControlRequest::Status(tx)).await.unwrap();
    let status = rx.await.unwrap();
    assert!(
        status
            .decisions
            .iter()
            .all(|d| !matches!(&d.what, DecisionKind::MigrationStarted { to_host, .. } if to_host == "localhost")),
        "{:?}",
        status.decisions
    );
    for control in [a_control_tx, b_control_tx] {
        control.send(ControlRequest::Stop).await.unwrap();
    }
    let agent = tokio::time::timeout(Duration::from_secs(5), run_a)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(agent.stats().steals_refused, 3);
    tokio::time::timeout(Duration::from_secs(5), run_b)
        .await
        .unwrap()
        .unwrap();
}

/// Issue 15: an agent's table of hosts is smaller than the connection cap, so a connected
/// agent's host can be refused at connection (every entry then belonged to the peer table
/// or was contested). When a ping later puts that agent in the peer table, the driver
/// announces its host again, and it takes the place of a peer the ping pushed out.
/// A ping round trip of `peer`, as the network reports it.
async fn ping(tx: &mpsc::Sender<NetEvent>, peer: &PeerId, rtt: Duration) {
    tx.send(NetEvent::PeerRtt {
        peer: peer.clone(),
        rtt,
    })
    .await
    .unwrap();
}

/// Asks the loop for its status until `taken` holds (the loop takes its inputs in any
/// order), at most 5 s.
async fn wait_for_status(
    control_tx: &mpsc::Sender<ControlRequest>,
    what: &str,
    taken: impl Fn(&AgentStatus) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (tx, rx) = oneshot::channel();
        control_tx.send(ControlRequest::Status(tx)).await.unwrap();
        if taken(&rx.await.unwrap()) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} not taken within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One driver loop, node-a's, whose messages go nowhere.
struct OneLoop {
    peers_tx: mpsc::Sender<NetEvent>,
    samples_tx: mpsc::Sender<Sample>,
    control_tx: mpsc::Sender<ControlRequest>,
    run: tokio::task::JoinHandle<Agent>,
}

/// Agent `a` on node-a with a peer table of one peer, in its own driver loop.
fn one_loop_with_one_peer(a: PeerId) -> OneLoop {
    let (nowhere, _) = mpsc::channel(64);
    let wire = Wire {
        me: a.clone(),
        to: nowhere,
    };
    one_loop_with_one_peer_sending_to(a, wire)
}

/// [`one_loop_with_one_peer`], its messages sent through `transport`.
fn one_loop_with_one_peer_sending_to(a: PeerId, transport: impl Transport + 'static) -> OneLoop {
    one_loop_with_one_peer_and_policy(a, transport, ConnectionPolicy::default())
}

/// [`one_loop_with_one_peer_sending_to`], closing connections by `policy`.
fn one_loop_with_one_peer_and_policy(
    a: PeerId,
    transport: impl Transport + 'static,
    policy: ConnectionPolicy,
) -> OneLoop {
    one_loop_with_one_peer_and_options(
        a,
        transport,
        Options {
            policy,
            ..Options::default()
        },
    )
}

/// [`one_loop_with_one_peer_sending_to`], run with `options`.
fn one_loop_with_one_peer_and_options(
    a: PeerId,
    transport: impl Transport + 'static,
    options: Options,
) -> OneLoop {
    let (peers_tx, peers_rx) = mpsc::channel(64);
    let (samples_tx, samples_rx) = mpsc::channel(4);
    let (control_tx, control_rx) = mpsc::channel(4);
    let agent = Agent::new(
        a,
        HostName::new("node-a").unwrap(),
        config().with_max_peers(1),
        std::time::Instant::now(),
    )
    .unwrap();
    let run = tokio::spawn(driver::run_with(
        agent,
        transport,
        Recorder::default(),
        Inputs {
            peers: peers_rx,
            samples: samples_rx,
            control: control_rx,
        },
        options,
    ));
    OneLoop {
        peers_tx,
        samples_tx,
        control_tx,
        run,
    }
}

#[tokio::test]
async fn a_host_refused_at_connection_is_announced_again_when_its_agent_enters_the_peer_table() {
    let peer = |s: &str| PeerId::new(s.as_bytes().to_vec()).unwrap();
    let (a, k, p, d, claimant) = (
        peer("agent-a"),
        peer("agent-k"),
        peer("agent-p"),
        peer("agent-d"),
        peer("agent-d2"),
    );
    // One peer, so at most two hosts.
    let OneLoop {
        peers_tx,
        control_tx,
        run,
        ..
    } = one_loop_with_one_peer(a);
    let up = |peer: &PeerId, host: &str| NetEvent::PeerUp {
        peer: peer.clone(),
        addr: "/ip4/127.0.0.1/tcp/1".parse().unwrap(),
        host: Some(HostName::new(host).unwrap()),
    };
    // p is in the peer table; d's host is contested, so neither may be dropped...
    connect(&peers_tx, &p, "node-p", Duration::from_millis(10)).await;
    for event in [up(&d, "node-d"), up(&claimant, "node-d"), up(&k, "node-k")] {
        peers_tx.send(event).await.unwrap();
    }
    // ...and k's host was refused. k turns out nearer than p.
    ping(&peers_tx, &k, Duration::from_millis(1)).await;
    // The loop takes its inputs in any order: wait until it has seen k's ping.
    wait_for_status(&control_tx, "k's ping", |s| {
        s.peers.iter().any(|p| p.peer == k.to_string())
    })
    .await;
    control_tx.send(ControlRequest::Stop).await.unwrap();
    let agent = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        agent.peer_host(&k).map(HostName::as_str),
        Some("node-k"),
        "{:?}",
        agent.stats()
    );
    assert_eq!(agent.peer_host(&p), None);
    assert_eq!(agent.peer_host(&d).map(HostName::as_str), Some("node-d"));
}

/// A rank's partner runs on a connected agent that the peer table (one peer) leaves out:
/// the driver passes that agent's pings on as the partner's RTT, which the communication
/// term then counts.
#[tokio::test]
async fn a_partner_on_an_agent_outside_the_peer_table_is_measured_by_its_pings() {
    let peer = |s: &str| PeerId::new(s.as_bytes().to_vec()).unwrap();
    let (a, near, partner) = (peer("agent-a"), peer("agent-n"), peer("agent-p"));
    let OneLoop {
        peers_tx,
        samples_tx,
        control_tx,
        run,
    } = one_loop_with_one_peer(a);
    connect(&peers_tx, &near, "node-n", Duration::from_millis(1)).await;
    connect(&peers_tx, &partner, "node-p", Duration::from_millis(40)).await;
    sample_a_rank_with_its_partner_on_node_p(&samples_tx, 1.0).await;
    // A later ping of the partner's agent updates it.
    ping(&peers_tx, &partner, Duration::from_millis(30)).await;
    // The loop takes its inputs in any order: wait until it has taken the sample.
    wait_for_status(&control_tx, "the sample", |s| !s.entities.is_empty()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    control_tx.send(ControlRequest::Stop).await.unwrap();
    let agent = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    let host = HostName::new("node-p").unwrap();
    assert!(
        agent.peers().get(&partner).is_none(),
        "the partner's agent is in the peer table: the test shows nothing"
    );
    let rtt = agent.rtt_to_host(&host);
    assert!(
        rtt.is_some_and(|r| (r - 0.030).abs() < 1e-9 || (r - 0.040).abs() < 1e-9),
        "partner RTT {rtt:?}"
    );
}

/// The hosts a driver loop asked its transport to connect to.
#[derive(Clone, Default)]
struct HostDials(Arc<Mutex<Vec<HostName>>>);

impl Transport for HostDials {
    fn send(&self, _: &PeerId, _: Message) {}

    fn dial_host(&self, host: &HostName) {
        self.0.lock().unwrap().push(host.clone());
    }
}

/// A rank's partner runs on a host with no connected agent (in a pool larger than the dial
/// target, issue 42): the loop asks the transport for that host at each sample, and stops
/// once an agent on it is connected, whose pings then measure it.
#[tokio::test]
async fn a_partner_host_with_no_connected_agent_is_asked_for_until_its_agent_connects() {
    let peer = |s: &str| PeerId::new(s.as_bytes().to_vec()).unwrap();
    let (a, near, partner) = (peer("agent-a"), peer("agent-n"), peer("agent-p"));
    let dials = HostDials::default();
    let OneLoop {
        peers_tx,
        samples_tx,
        control_tx,
        run,
    } = one_loop_with_one_peer_sending_to(a, dials.clone());
    connect(&peers_tx, &near, "node-n", Duration::from_millis(1)).await;
    let asked = || dials.0.lock().unwrap().clone();
    sample_a_rank_with_its_partner_on_node_p(&samples_tx, 1.0).await;
    wait_for_status(&control_tx, "the sample", |_| !asked().is_empty()).await;
    sample_a_rank_with_its_partner_on_node_p(&samples_tx, 1.0).await;
    wait_for_status(&control_tx, "the second sample", |_| asked().len() == 2).await;
    let node_p = HostName::new("node-p").unwrap();
    assert_eq!(asked(), vec![node_p.clone(), node_p.clone()]);
    // Its agent connects: not asked for again, and measured.
    connect(&peers_tx, &partner, "node-p", Duration::from_millis(40)).await;
    // The loop takes its inputs in any order: the connection first, then the samples.
    wait_for_status(&control_tx, "node-p's agent", |s| {
        s.pool.iter().any(|h| h.host == "node-p")
    })
    .await;
    sample_a_rank_with_its_partner_on_node_p(&samples_tx, 1.0).await;
    sample_a_rank_with_its_partner_on_node_p(&samples_tx, 1.0).await;
    // Time for the loop to take them (it waits on nothing else).
    tokio::time::sleep(Duration::from_millis(100)).await;
    control_tx.send(ControlRequest::Stop).await.unwrap();
    let agent = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        asked().len(),
        2,
        "asked for a connected host: {:?}",
        asked()
    );
    assert!(agent.rtt_to_host(&node_p).is_some());
}

/// Gives the loop an idle node of `cores` running rank 0, whose partner runs on node-p.
async fn sample_a_rank_with_its_partner_on_node_p(samples_tx: &mpsc::Sender<Sample>, cores: f64) {
    let mut rank = entity(0, 100);
    rank.partners = vec![ios_agent_core::model::Partner {
        host: HostName::new("node-p").unwrap(),
        exchanges_per_sec: 10.0,
    }];
    samples_tx
        .send(Sample {
            node: Some(NodeProfile::idle(cores, 1 << 30)),
            entities: Some(vec![rank]),
            rank_pids: Vec::new(),
            stalled: Vec::new(),
        })
        .await
        .unwrap();
}

/// What a driver loop sent, and to whom.
#[derive(Clone, Default)]
struct Outbox(Arc<Mutex<Vec<(PeerId, Message)>>>);

impl Transport for Outbox {
    fn send(&self, to: &PeerId, message: Message) {
        self.0.lock().unwrap().push((to.clone(), message));
    }
}

/// A light node runs a rank whose partner is on a far agent that is connected but outside
/// its peer table (a table of one, held by a near peer): the loop's first steal of a round
/// goes straight to that agent, a partner steal with a TTL of 1 that carries the partner's
/// RTT (the core's unit test and the simulator check what the partner's agent does with it).
#[tokio::test]
async fn given_a_far_partner_on_a_connected_agent_then_the_loop_sends_it_a_partner_steal() {
    let peer = |s: &str| PeerId::new(s.as_bytes().to_vec()).unwrap();
    let (a, near, partner) = (peer("agent-a"), peer("agent-n"), peer("agent-p"));
    let outbox = Outbox::default();
    let OneLoop {
        peers_tx,
        samples_tx,
        control_tx,
        run,
    } = one_loop_with_one_peer_sending_to(a, outbox.clone());
    connect(&peers_tx, &near, "node-n", Duration::from_millis(1)).await;
    connect(&peers_tx, &partner, "node-p", Duration::from_millis(80)).await;
    sample_a_rank_with_its_partner_on_node_p(&samples_tx, 2.0).await;
    wait_for_status(&control_tx, "a partner steal", |s| {
        s.counters.partner_steals_sent > 0
    })
    .await;
    control_tx.send(ControlRequest::Stop).await.unwrap();
    let agent = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    assert!(
        agent.peers().get(&partner).is_none(),
        "the partner's agent is in the peer table: the test shows nothing"
    );
    let sent = outbox.0.lock().unwrap().clone();
    let steal = sent
        .iter()
        .find_map(|(to, m)| match m {
            Message::WorkSteal { ttl: 1, rtts, .. } if *to == partner => Some(rtts.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no partner steal to {partner}: {sent:?}"));
    assert!(
        steal.iter().any(|r| r.host.as_str() == "node-p"),
        "the partner's RTT is not in the steal: {steal:?}"
    );
}

/// A transport that holds `max` connections and records the agents the loop disconnects.
#[derive(Clone)]
struct Capped {
    max: usize,
    closed: Arc<Mutex<Vec<PeerId>>>,
}

impl Transport for Capped {
    fn send(&self, _to: &PeerId, _message: Message) {}

    fn max_connections(&self) -> Option<usize> {
        Some(self.max)
    }

    fn disconnect(&self, peer: &PeerId) {
        self.closed.lock().unwrap().push(peer.clone());
    }
}

/// The network is full (4 agents on a cap of 4): on its next sample the loop closes the
/// connection to the farthest agent it has no use for. The near agent (in its peer table of
/// one) and the agent of its rank's partner host stay, though the partner's is the farthest
/// (400 ms); of the two far agents of no use, the one at 300 ms goes. Once gone the network
/// has room, and nothing more closes; when it comes back, it goes again.
#[tokio::test]
async fn given_a_full_network_then_the_loop_closes_the_farthest_connection_of_no_use() {
    let peer = |s: &str| PeerId::new(s.as_bytes().to_vec()).unwrap();
    let (a, near, partner, far, farther) = (
        peer("agent-a"),
        peer("agent-n"),
        peer("agent-p"),
        peer("agent-f"),
        peer("agent-g"),
    );
    let transport = Capped {
        max: 4,
        closed: Arc::default(),
    };
    let policy = ConnectionPolicy {
        period: Duration::ZERO,
        reserve: 0,
        batch: 1,
        min_age: Duration::ZERO,
        quiet: Duration::ZERO,
    };
    let OneLoop {
        peers_tx,
        samples_tx,
        control_tx,
        run,
    } = one_loop_with_one_peer_and_policy(a, transport.clone(), policy);
    connect(&peers_tx, &partner, "node-p", Duration::from_millis(400)).await;
    connect(&peers_tx, &farther, "node-g", Duration::from_millis(300)).await;
    connect(&peers_tx, &far, "node-f", Duration::from_millis(200)).await;
    connect(&peers_tx, &near, "node-n", Duration::from_millis(1)).await;
    // Events are taken in order: once the near agent is in the table, all are connected.
    wait_for_status(&control_tx, "the near agent", |s| {
        s.peers.iter().any(|p| p.peer == near.to_string())
    })
    .await;
    sample_a_rank_with_its_partner_on_node_p(&samples_tx, 1.0).await;
    wait_for_status(&control_tx, "the sample", |s| !s.entities.is_empty()).await;
    assert_eq!(*transport.closed.lock().unwrap(), vec![farther.clone()]);
    // The network reports it gone; three agents left, under the cap: nothing more closes.
    peers_tx
        .send(NetEvent::PeerGone {
            peer: farther.clone(),
        })
        .await
        .unwrap();
    sample_a_rank_with_its_partner_on_node_p(&samples_tx, 1.0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(*transport.closed.lock().unwrap(), vec![farther.clone()]);
    // It connects again: full again, and it goes again (farther than the other).
    connect(&peers_tx, &farther, "node-g", Duration::from_millis(300)).await;
    wait_for_status(&control_tx, "the new connection", |_| true).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    sample_a_rank_with_its_partner_on_node_p(&samples_tx, 1.0).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while transport.closed.lock().unwrap().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no second close");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        *transport.closed.lock().unwrap(),
        vec![farther.clone(), farther.clone()]
    );
    control_tx.send(ControlRequest::Stop).await.unwrap();
    let agent = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    assert!(agent.peers().get(&near).is_some());
}

/// A process id that no process has any more: a child that exited and was reaped.
fn pid_of_a_finished_process() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Feeds `samples()` to the loop every 100 ms, asks it to leave (`within`, `force`) after
/// the first, and returns the updates up to the last one and the time from the request to
/// it (at most `bound`: the updates so far then).
async fn drain_fed(
    l: &OneLoop,
    samples: impl Fn() -> Sample,
    within: Duration,
    force: bool,
    bound: Duration,
) -> (Vec<LeaveUpdate>, Duration) {
    drain_fed_from(l, samples, within, force, LeaveOrigin::Command, bound).await
}

/// [`drain_fed`], the leave asked for by `origin`.
async fn drain_fed_from(
    l: &OneLoop,
    samples: impl Fn() -> Sample,
    within: Duration,
    force: bool,
    origin: LeaveOrigin,
    bound: Duration,
) -> (Vec<LeaveUpdate>, Duration) {
    let (updates, mut rx) = mpsc::unbounded_channel();
    l.samples_tx.send(samples()).await.unwrap();
    let asked = tokio::time::Instant::now();
    l.control_tx
        .send(ControlRequest::Leave(LeaveOrder {
            within,
            force,
            updates,
            origin,
        }))
        .await
        .unwrap();
    let mut got = Vec::new();
    while asked.elapsed() < bound {
        let _ = l.samples_tx.try_send(samples());
        tokio::time::sleep(Duration::from_millis(100)).await;
        while let Ok(u) = rx.try_recv() {
            let end = !matches!(u, LeaveUpdate::Progress(_));
            got.push(u);
            if end {
                return (got, asked.elapsed());
            }
        }
    }
    (got, asked.elapsed())
}

/// Issue 36, finding 3: pcmd lists a rank until it notices that the rank's connection
/// closed; a rank whose process is gone must leave the agent's view at the next sample, and
/// a leave must not wait on it (here nobody could take it: the drain would time out).
#[tokio::test]
async fn given_pcmd_still_lists_a_rank_whose_process_is_gone_then_the_agent_drops_it_and_a_leave_ends_at_once(
) {
    let l = one_loop_with_one_peer(PeerId::new(b"agent-a".to_vec()).unwrap());
    let dead = pid_of_a_finished_process();
    let rank = entity(0, 30);
    let sample = || Sample {
        node: Some(NodeProfile::idle(1.0, 8 << 30)),
        entities: Some(vec![rank.clone()]),
        rank_pids: vec![(rank.id.clone(), dead)],
        stalled: vec![],
    };
    l.samples_tx.send(sample()).await.unwrap();
    wait_for_status(&l.control_tx, "the sample", |s| s.node.is_some()).await;
    let (tx, rx) = oneshot::channel();
    l.control_tx.send(ControlRequest::Status(tx)).await.unwrap();
    let status = rx.await.unwrap();
    assert!(status.entities.is_empty(), "{:?}", status.entities);
    let (updates, took) = drain_fed(
        &l,
        sample,
        Duration::from_secs(5),
        false,
        Duration::from_secs(8),
    )
    .await;
    let Some(LeaveUpdate::Left(report)) = updates.last() else {
        panic!("no Left after {took:?}: {updates:?}");
    };
    assert!(report.is_empty(), "{report:?}");
    assert!(took < Duration::from_secs(2), "left after {took:?}");
    tokio::time::timeout(Duration::from_secs(5), l.run)
        .await
        .unwrap()
        .unwrap();
}

/// Issue 36, finding 4: pcmd died (no answer any more) and the rank it listed last has
/// ended; a stop signal's drain (forced, 60 s) ends at the next sample instead of waiting
/// out its 60 s. An agent whose pcmd never answered and that saw no rank leaves as fast.
#[tokio::test]
async fn given_pcmd_down_and_no_rank_process_alive_then_a_forced_drain_stops_within_a_second() {
    let l = one_loop_with_one_peer(PeerId::new(b"agent-a".to_vec()).unwrap());
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let rank = entity(0, 30);
    l.samples_tx
        .send(Sample {
            node: Some(NodeProfile::idle(1.0, 8 << 30)),
            entities: Some(vec![rank.clone()]),
            rank_pids: vec![(rank.id.clone(), child.id())],
            stalled: vec![],
        })
        .await
        .unwrap();
    wait_for_status(&l.control_tx, "the rank", |s| s.entities.len() == 1).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let pcmd_down = || Sample {
        node: Some(NodeProfile::idle(1.0, 8 << 30)),
        entities: None,
        rank_pids: vec![],
        stalled: vec![],
    };
    let (updates, took) = drain_fed(
        &l,
        pcmd_down,
        Duration::from_secs(60),
        true,
        Duration::from_secs(10),
    )
    .await;
    let Some(LeaveUpdate::Left(report)) = updates.last() else {
        panic!("no Left after {took:?}: {updates:?}");
    };
    assert!(report.is_empty(), "{report:?}");
    assert!(took < Duration::from_secs(2), "left after {took:?}");
    tokio::time::timeout(Duration::from_secs(5), l.run)
        .await
        .unwrap()
        .unwrap();

    let l = one_loop_with_one_peer(PeerId::new(b"agent-a".to_vec()).unwrap());
    let (updates, took) = drain_fed(
        &l,
        pcmd_down,
        Duration::from_secs(60),
        true,
        Duration::from_secs(10),
    )
    .await;
    assert!(
        matches!(updates.last(), Some(LeaveUpdate::Left(r)) if r.is_empty()),
        "after {took:?}: {updates:?}"
    );
    assert!(took < Duration::from_secs(2), "left after {took:?}");
}

/// The other side of the two tests above: while pcmd does not answer, a rank whose process
/// still runs stays in the agent's view, and a drain does not end before it moved.
#[tokio::test]
async fn given_pcmd_down_but_a_ranks_process_runs_then_the_drain_waits_for_it() {
    let l = one_loop_with_one_peer(PeerId::new(b"agent-a".to_vec()).unwrap());
    let rank = entity(0, 30);
    l.samples_tx
        .send(Sample {
            node: Some(NodeProfile::idle(1.0, 8 << 30)),
            entities: Some(vec![rank.clone()]),
            // This test process stands for the rank.
            rank_pids: vec![(rank.id.clone(), std::process::id())],
            stalled: vec![],
        })
        .await
        .unwrap();
    wait_for_status(&l.control_tx, "the rank", |s| s.entities.len() == 1).await;
    let pcmd_down = || Sample {
        node: Some(NodeProfile::idle(1.0, 8 << 30)),
        entities: None,
        rank_pids: vec![],
        stalled: vec![],
    };
    let (updates, took) = drain_fed(
        &l,
        pcmd_down,
        Duration::from_secs(1),
        false,
        Duration::from_secs(5),
    )
    .await;
    let Some(LeaveUpdate::Stayed(report)) = updates.last() else {
        panic!("no Stayed after {took:?}: {updates:?}");
    };
    assert_eq!(report.ranks_left, vec!["job-1/0".to_owned()], "{report:?}");
    l.control_tx.send(ControlRequest::Stop).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), l.run)
        .await
        .unwrap()
        .unwrap();
}

/// The node's given-back mark (`pcm_proto::given_back`, next to the pcmd socket): written
/// when the agent leaves, saying how (drained on `ios-agent leave`, forced, a stop signal's
/// drain), and not when a drain is given up and the agent stays.
#[tokio::test]
async fn leaving_marks_the_node_given_back_and_a_given_up_drain_does_not() {
    use pcm_proto::given_back;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("node-a.sock");
    let one = || {
        let (nowhere, _) = mpsc::channel(64);
        let a = PeerId::new(b"agent-a".to_vec()).unwrap();
        let wire = Wire {
            me: a.clone(),
            to: nowhere,
        };
        one_loop_with_one_peer_and_options(
            a,
            wire,
            Options {
                given_back_mark: Some(socket.clone()),
                ..Options::default()
            },
        )
    };
    // A rank whose process runs (this test process) and that nobody can take.
    let rank = entity(0, 30);
    let busy = || Sample {
        node: Some(NodeProfile::idle(1.0, 8 << 30)),
        entities: Some(vec![rank.clone()]),
        rank_pids: vec![(rank.id.clone(), std::process::id())],
        stalled: vec![],
    };
    let idle = || Sample {
        node: Some(NodeProfile::idle(1.0, 8 << 30)),
        entities: Some(vec![]),
        rank_pids: vec![],
        stalled: vec![],
    };
    let second = Duration::from_secs(1);
    let bound = Duration::from_secs(5);

    let l = one();
    let (updates, _) = drain_fed(&l, busy, second, false, bound).await;
    assert!(
        matches!(updates.last(), Some(LeaveUpdate::Stayed(_))),
        "{updates:?}"
    );
    assert_eq!(given_back::read(&socket).unwrap(), None);
    l.control_tx.send(ControlRequest::Stop).await.unwrap();
    tokio::time::timeout(bound, l.run).await.unwrap().unwrap();
    assert_eq!(
        given_back::read(&socket).unwrap(),
        None,
        "a stop with no drain under way marked the node"
    );

    let cases: [(&dyn Fn() -> Sample, bool, LeaveOrigin, &str); 3] = [
        (&busy, true, LeaveOrigin::Command, "ios-agent leave --force"),
        (&idle, false, LeaveOrigin::Command, "ios-agent leave"),
        (&busy, true, LeaveOrigin::Signal("SIGTERM"), "SIGTERM drain"),
    ];
    for (samples, force, origin, by) in cases {
        let l = one();
        let (updates, _) = drain_fed_from(&l, samples, second, force, origin, bound).await;
        assert!(
            matches!(updates.last(), Some(LeaveUpdate::Left(_))),
            "{by}: {updates:?}"
        );
        // Written before the leave is reported.
        let mark = given_back::read(&socket).unwrap().unwrap();
        assert_eq!((mark.host.as_str(), mark.by.as_str()), ("node-a", by));
        tokio::time::timeout(bound, l.run).await.unwrap().unwrap();
        assert!(given_back::remove(&socket).unwrap());
    }
}

/// Rank `rank` of `job`, a malleable job (1 to 4 ranks) of `width` ranks.
fn malleable(job: &str, rank: u32, width: u32) -> EntityProfile {
    let mut e = entity(rank, 30);
    e.id.job = JobId::new(job).unwrap();
    e.job_ranks = width;
    e.malleable = Some(Malleability::new(1, 4).unwrap());
    e
}

/// A sample of an idle node-a (one core) on which pcmd lists `entities`.
fn on_idle_node(entities: Vec<EntityProfile>) -> Sample {
    Sample {
        node: Some(NodeProfile::idle(1.0, 8 << 30)),
        entities: Some(entities),
        rank_pids: vec![],
        stalled: vec![],
    }
}

/// One driver loop on node-a, with no peer, whose "pcmd" is `resizer`.
fn resizing_loop(config: Config, resizer: Resizer) -> OneLoop {
    let a = PeerId::new(b"agent-a".to_vec()).unwrap();
    let (nowhere, _) = mpsc::channel(64);
    let (peers_tx, peers_rx) = mpsc::channel(64);
    let (samples_tx, samples_rx) = mpsc::channel(4);
    let (control_tx, control_rx) = mpsc::channel(4);
    let agent = Agent::new(
        a.clone(),
        HostName::new("node-a").unwrap(),
        config,
        std::time::Instant::now(),
    )
    .unwrap();
    let run = tokio::spawn(driver::run(
        agent,
        Wire { me: a, to: nowhere },
        resizer,
        Inputs {
            peers: peers_rx,
            samples: samples_rx,
            control: control_rx,
        },
    ));
    OneLoop {
        peers_tx,
        samples_tx,
        control_tx,
        run,
    }
}

async fn status_of(l: &OneLoop) -> AgentStatus {
    let (tx, rx) = oneshot::channel();
    l.control_tx.send(ControlRequest::Status(tx)).await.unwrap();
    rx.await.unwrap()
}

/// Issue 38: the core's resize goes to pcmd through the driver, its outcome comes back to
/// the core with the same id, and `status` shows each step and the counters. Node-a is
/// leaving with rank 2 of a 3-rank malleable job and nobody to take it: the agent shrinks
/// the job off the node (to 2 ranks, giving node-a back). The first try fails (nothing
/// changes), the second completes. A rank of a job that is not malleable stays, so the
/// drain goes on and the loop can be asked.
#[tokio::test]
async fn given_a_resize_from_the_core_then_the_driver_asks_pcmd_and_feeds_the_outcome_back() {
    let (outcome_tx, outcome_rx) = std::sync::mpsc::channel();
    let resizer = Resizer {
        asked: Arc::default(),
        outcomes: Arc::new(Mutex::new(outcome_rx)),
    };
    let l = resizing_loop(config(), resizer.clone());
    let job = JobId::new("job-1").unwrap();
    let node_a = HostName::new("node-a").unwrap();
    let mut plain = entity(0, 30);
    plain.id.job = JobId::new("job-2").unwrap();
    let before = || on_idle_node(vec![malleable("job-1", 2, 3), plain.clone()]);
    let asked = |n: usize| {
        let resizer = resizer.clone();
        let samples_tx = l.samples_tx.clone();
        let sample = before();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while resizer.asked.lock().unwrap().len() < n {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no resize {n} in 5 s"
                );
                let _ = samples_tx.try_send(sample.clone());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    l.samples_tx.send(before()).await.unwrap();
    let (updates, _updates_rx) = mpsc::unbounded_channel();
    l.control_tx
        .send(ControlRequest::Leave(LeaveOrder {
            within: Duration::from_secs(20),
            force: false,
            updates,
            origin: LeaveOrigin::Command,
        }))
        .await
        .unwrap();
    asked(1).await;
    assert_eq!(
        resizer.asked.lock().unwrap()[0],
        (job.clone(), 2, vec![node_a.clone()])
    );
    let status = status_of(&l).await;
    let started = status
        .decisions
        .iter()
        .find(|d| d.what.is_resize())
        .unwrap_or_else(|| panic!("no resize decision: {:?}", status.decisions));
    let DecisionKind::ResizeStarted {
        job: j,
        from,
        to,
        hosts,
        reason,
        ..
    } = &started.what
    else {
        panic!("not a start: {:?}", started.what);
    };
    assert_eq!((j, *from, *to), (&job, 3, 2));
    assert_eq!(hosts, &vec![node_a.clone()]);
    assert_eq!(*reason, ResizeReason::Leave);
    assert_eq!(status.counters.resizes_started, 1);
    assert!(
        status
            .to_text()
            .contains("shrinking job-1 from 3 to 2 ranks, giving back node-a"),
        "{}",
        status.to_text()
    );

    // pcmd says no: noted, counted, and the core tries again.
    outcome_tx
        .send(MigrationOutcome::Failed {
            reason: "superseded by request #9".into(),
        })
        .unwrap();
    asked(2).await;
    let status = status_of(&l).await;
    assert!(
        status.decisions.iter().any(|d| matches!(
            &d.what,
            DecisionKind::ResizeFailed { job: j, from: 3, to: 2, reason, .. }
                if *j == job && reason.contains("superseded")
        )),
        "{:?}",
        status.decisions
    );
    assert_eq!(status.counters.resizes_failed, 1);

    // This time it is done: job-1's rank leaves the node; job-2's stays.
    outcome_tx.send(MigrationOutcome::Completed).unwrap();
    let after = on_idle_node(vec![plain.clone()]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        let _ = l.samples_tx.try_send(after.clone());
        let status = status_of(&l).await;
        if status.counters.resizes_completed == 1 {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no completion in 5 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        status.decisions.iter().any(|d| matches!(
            &d.what,
            DecisionKind::ResizeCompleted { job: j, from: 3, to: 2, hosts, .. }
                if *j == job && *hosts == vec![node_a.clone()]
        )),
        "{:?}",
        status.decisions
    );
    assert_eq!(
        (
            status.counters.resizes_started,
            status.counters.resizes_failed
        ),
        (2, 1)
    );
    assert!(
        status.entities.iter().all(|e| e.id.job != job),
        "{:?}",
        status.entities
    );
    assert_eq!(resizer.asked.lock().unwrap().len(), 2);
    l.control_tx.send(ControlRequest::Stop).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), l.run)
        .await
        .unwrap()
        .unwrap();
    drop(l.peers_tx);
}

/// Issue 38: `ios-agent join --no-resize` (`Config::with_resizes(false)`): the same leaving
/// node with the same malleable rank asks for no resize; the drain times out instead.
#[tokio::test]
async fn given_resizes_off_then_a_leaving_node_does_not_shrink_a_malleable_job() {
    let (_outcome_tx, outcome_rx) = std::sync::mpsc::channel();
    let resizer = Resizer {
        asked: Arc::default(),
        outcomes: Arc::new(Mutex::new(outcome_rx)),
    };
    let l = resizing_loop(config().with_resizes(false), resizer.clone());
    let sample = || on_idle_node(vec![malleable("job-1", 2, 3)]);
    // Ten steal periods: a leaving node with resizes on shrinks after three.
    let (updates, _) = drain_fed(
        &l,
        sample,
        Duration::from_secs(1),
        false,
        Duration::from_secs(3),
    )
    .await;
    assert!(
        matches!(updates.last(), Some(LeaveUpdate::Stayed(_))),
        "{updates:?}"
    );
    assert!(resizer.asked.lock().unwrap().is_empty());
    let status = status_of(&l).await;
    assert_eq!(status.counters.resizes_started, 0);
    assert!(!status.decisions.iter().any(|d| d.what.is_resize()));
    l.control_tx.send(ControlRequest::Stop).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), l.run)
        .await
        .unwrap()
        .unwrap();
}
