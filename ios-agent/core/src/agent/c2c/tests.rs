use std::time::{Duration, Instant};

use pcm_proto::HostName;

use crate::agent::Agent;
use crate::message::{Message, MessageId};
use crate::sim::{NodeSpec, Sim};
use crate::tier::PeerId;
use crate::{Config, Topology};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn peer(s: &str) -> PeerId {
    PeerId::new(s.as_bytes()).expect("valid")
}

/// A member's place is itself and the members near it, either way round: a lists b as
/// near, c lists nobody and nobody lists it. A job with 2 ranks on a and 1 on c counts
/// 2 ranks and a's and b's idle cores at a and at b, and at c only c's.
#[test]
fn a_members_place_is_the_members_near_it() {
    use std::borrow::Cow;

    use super::{ClusterJobs, ClusterNode};
    use crate::model::{EntityId, EntityProfile, NodeProfile};
    use pcm_proto::{JobId, Rank};

    let host = |s: &str| HostName::new(s).expect("valid");
    let rank = |r: u32| {
        EntityProfile::new(
            EntityId {
                job: JobId::new("j").expect("valid"),
                rank: Rank(r),
            },
            1.0,
        )
    };
    let on_a = [rank(0), rank(1)];
    let on_c = [rank(2)];
    let node = |cores: f64, load: f64| NodeProfile {
        cpu_load: load,
        ..NodeProfile::idle(cores, 1 << 30)
    };
    let member = |name: &str, node: NodeProfile, entities, near: Vec<HostName>| ClusterNode {
        peer: peer(name),
        host: host(name),
        node,
        entities,
        leaving: false,
        departed: Vec::new(),
        near_hosts: Cow::Owned(near),
        partner_rtts: &[],
    };
    let cluster = [
        member("a", node(4.0, 2.0), &on_a[..], vec![host("b")]),
        member("b", node(4.0, 0.0), &[][..], vec![]),
        member("c", node(8.0, 1.0), &on_c[..], vec![]),
    ];
    let jobs = ClusterJobs::of(&cluster);
    let place = |i: usize| {
        let offers = jobs.offers(i, &cluster[i]);
        assert_eq!(offers.len(), 1);
        (offers[0].ranks, offers[0].place_ranks, offers[0].place_room)
    };
    // a: its 2 ranks, and 2 + 4 idle cores.
    assert_eq!(place(0), (2, 2, 6.0));
    // b runs none of the job, its place (a and b) 2.
    assert_eq!(place(1), (0, 2, 6.0));
    // c: its own rank and 7 idle cores; a's ranks are not in its place.
    assert_eq!(place(2), (1, 1, 7.0));
}

/// Agent "a", started at `t0`, with `peers` at 1 ms (its local tier), the gossip timeout
/// shortened to 14 s by a table of 8 peers.
fn agent_a(t0: Instant, peers: &[&str]) -> Agent {
    let config = c2c().with_seed(1).with_max_peers(8);
    let mut a = Agent::new(peer("a"), HostName::new("a").expect("valid"), config, t0)
        .expect("valid config");
    assert_eq!(a.gossip_timeout(), secs(14));
    for p in peers {
        a.handle_peer_rtt(t0, peer(p), Duration::from_millis(1));
    }
    a
}

/// `from` heartbeats `a`, voting for `vote`.
fn beat(a: &mut Agent, now: Instant, from: &str, vote: &str) {
    beat_with_members(a, now, from, vote, 0);
}

/// `from` heartbeats `a`, voting for `vote` and saying that `members` vote for it.
fn beat_with_members(a: &mut Agent, now: Instant, from: &str, vote: &str, members: u32) {
    let message = Message::Heartbeat {
        id: MessageId(1),
        manager: peer(vote),
        successor: None,
        members,
    };
    a.handle_message(now, peer(from), message);
    while a.poll_action().is_some() {}
}

/// Agents alone that meet late pair up: "a" meets "b" and "J" a minute after it started,
/// so all are junior to each other and each has its own vote only. It does not follow
/// "b" (a higher id), nor "J" while J says 2 peers vote for it ("a" hears neither: they
/// are elsewhere, maybe far from "a"). Once J is alone too, "a" follows it (a lower id).
#[test]
fn given_an_agent_alone_then_it_pairs_with_a_lower_junior_only_if_that_one_is_alone() {
    let t0 = Instant::now();
    let mut a = agent_a(t0, &[]);
    let t1 = t0 + secs(60);
    for p in ["J", "b"] {
        a.handle_peer_rtt(t1, peer(p), Duration::from_millis(1));
    }
    beat(&mut a, t1, "b", "b");
    assert_eq!(a.manager(), Some(&peer("a")), "b has a higher id");
    beat_with_members(&mut a, t1, "J", "J", 2);
    assert_eq!(a.manager(), Some(&peer("a")), "J has members elsewhere");
    beat_with_members(&mut a, t1 + secs(1), "J", "J", 0);
    assert_eq!(a.manager(), Some(&peer("J")), "J is alone now");
}

/// d (for itself), then c (for d), then b and e (for b): a follows d, 3 votes to 2, all
/// of one generation.
fn follows_d(t0: Instant) -> Agent {
    let mut a = agent_a(t0, &["b", "c", "d", "e"]);
    beat(&mut a, t0, "d", "d");
    beat(&mut a, t0, "c", "d");
    beat(&mut a, t0, "b", "b");
    beat(&mut a, t0, "e", "b");
    assert_eq!(a.manager(), Some(&peer("d")));
    a
}

/// The election re-runs only when its inputs change: a changed vote is one. Once c votes
/// for b, b has 3 votes to d's 2 (a's own among them).
#[test]
fn given_a_vote_changes_then_the_election_follows_it() {
    let t0 = Instant::now();
    let mut a = follows_d(t0);
    let t1 = t0 + secs(1);
    for (from, vote) in [("d", "d"), ("b", "b"), ("e", "b"), ("c", "d")] {
        beat(&mut a, t1, from, vote);
    }
    assert_eq!(a.manager(), Some(&peer("d")));
    beat(&mut a, t1, "c", "b");
    assert_eq!(a.manager(), Some(&peer("b")));
    assert_eq!(a.stats().manager_changes, 2);
}

/// Time alone is an input too: c falls silent, and when its vote for d expires (the
/// gossip timeout after it was last heard) the next heartbeat elects b, although every
/// heartbeat since repeats the same vote and no timer ran.
#[test]
fn given_a_silent_voter_times_out_then_the_next_heartbeat_drops_its_vote() {
    let t0 = Instant::now();
    let mut a = follows_d(t0);
    for s in 1..14 {
        for (from, vote) in [("d", "d"), ("b", "b"), ("e", "b")] {
            beat(&mut a, t0 + secs(s), from, vote);
        }
        assert_eq!(a.manager(), Some(&peer("d")), "at {s} s");
    }
    beat(&mut a, t0 + secs(14), "e", "b");
    assert_eq!(a.manager(), Some(&peer("b")));
}

/// The manager falls silent: the member timeout after it was last heard, the next
/// heartbeat of another peer (same vote as ever) finds it gone.
#[test]
fn given_the_manager_falls_silent_then_the_next_heartbeat_finds_it_gone() {
    let t0 = Instant::now();
    let mut a = agent_a(t0, &["b", "d"]);
    beat(&mut a, t0, "d", "d");
    beat(&mut a, t0, "b", "b");
    assert_eq!(a.manager(), Some(&peer("d")));
    for s in 1..5 {
        beat(&mut a, t0 + secs(s), "b", "b");
        assert_eq!(a.manager(), Some(&peer("d")), "at {s} s");
    }
    beat(&mut a, t0 + secs(5), "b", "b");
    assert_eq!(a.manager(), Some(&peer("b")));
}

fn c2c() -> Config {
    Config::default().with_topology(Topology::ClusterToCluster)
}

/// `n` one-core nodes at 1 ms of one another (one cluster), run for `settle`.
fn cluster(seed: u64, n: usize, settle: Duration) -> Sim {
    let mut sim = Sim::new(seed, c2c());
    for _ in 0..n {
        sim.add_node(NodeSpec::new(1.0));
    }
    sim.run_for(settle);
    sim
}

/// Issue 15: the cluster's upkeep costs each node a bounded number of messages per
/// second, whatever the cluster's size. Every agent heartbeating every local peer every
/// second cost a cluster of 40 about 40 messages per node and second.
#[test]
fn given_a_cluster_of_40_then_each_node_sends_under_4_messages_per_second() {
    let mut sim = cluster(5, 40, secs(60));
    let before = sim.messages().messages;
    let span = 120;
    sim.run_for(secs(span));
    let sent = sim.messages().messages - before;
    let rate = sent as f64 / (40.0 * span as f64);
    assert!(
        rate < 4.0,
        "{rate:.2} messages per node per second: {:?}",
        sim.messages().by_kind
    );
    let manager = sim.agent(0).id().clone();
    for n in 0..40 {
        assert_eq!(sim.agent(n).manager(), Some(&manager), "node {n}");
    }
    assert_eq!(sim.agent(0).cluster_members(sim.now()).len(), 39);
}

/// The same upkeep per node in a cluster of 10 and of 40: it does not grow with the
/// cluster.
#[test]
fn given_clusters_of_10_and_40_then_the_upkeep_per_node_is_about_the_same() {
    let rate = |n: usize| {
        let mut sim = cluster(6, n, secs(60));
        let before = sim.messages().messages;
        sim.run_for(secs(120));
        (sim.messages().messages - before) as f64 / (n as f64 * 120.0)
    };
    let (small, large) = (rate(10), rate(40));
    eprintln!("upkeep: {small:.2} messages per node per second at 10 nodes, {large:.2} at 40");
    assert!(
        large < small * 1.25 + 0.1,
        "{small:.2} messages per node per second at 10 nodes, {large:.2} at 40"
    );
}

/// The manager of a cluster of 40 dies: within the member timeout and two heartbeat
/// periods every survivor follows the successor it named (the senior member with the
/// lowest id), which then counts all 38 others as members.
#[test]
fn given_the_manager_of_40_dies_then_its_successor_takes_over_within_the_member_timeout() {
    let mut sim = cluster(7, 40, secs(60));
    assert!(sim.agent(0).is_manager());
    sim.kill(0);
    let bound = crate::agent::DEFAULT_MEMBER_TIMEOUT + crate::agent::DEFAULT_HEARTBEAT_PERIOD * 2;
    sim.run_for(bound);
    let successor = sim.agent(1).id().clone();
    for n in 1..40 {
        assert_eq!(sim.agent(n).manager(), Some(&successor), "node {n}");
    }
    sim.run_for(secs(3));
    assert_eq!(sim.agent(1).cluster_members(sim.now()).len(), 38);
}

/// Issue 12, item 6 with bounded upkeep: five agents with the lowest ids, a cluster of
/// their own, come within local latency of a running cluster of 40. The larger cluster
/// absorbs them; none of them takes it over, and its members never change manager.
#[test]
fn given_a_small_cluster_with_lower_ids_meets_a_large_one_then_the_large_one_absorbs_it() {
    let mut sim = Sim::new(8, c2c()).with_default_rtt(Duration::from_millis(1));
    for _ in 0..45 {
        sim.add_node(NodeSpec::new(1.0));
    }
    for a in 0..5 {
        for b in 5..45 {
            sim.set_rtt(a, b, Duration::from_millis(50));
        }
    }
    sim.run_for(secs(60));
    let small = sim.agent(0).id().clone();
    let large = sim.agent(5).id().clone();
    for n in 0..5 {
        assert_eq!(sim.agent(n).manager(), Some(&small), "node {n}");
    }
    for n in 5..45 {
        assert_eq!(sim.agent(n).manager(), Some(&large), "node {n}");
    }
    let changes: Vec<u64> = (5..45)
        .map(|n| sim.agent(n).stats().manager_changes)
        .collect();
    for a in 0..5 {
        for b in 5..45 {
            sim.set_rtt(a, b, Duration::from_millis(1));
        }
    }
    sim.run_for(secs(120));
    for n in 0..45 {
        assert_eq!(sim.agent(n).manager(), Some(&large), "node {n}");
    }
    let after: Vec<u64> = (5..45)
        .map(|n| sim.agent(n).stats().manager_changes)
        .collect();
    assert_eq!(
        changes, after,
        "a member of the large cluster changed manager"
    );
    assert_eq!(sim.agent(5).cluster_members(sim.now()).len(), 44);
}
