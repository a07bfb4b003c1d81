//! Multi-agent scenarios. A failing one is replayed by its seed.

use std::time::Duration;

use super::{NodeSpec, Sim};
use crate::agent::{Config, Topology};
use crate::message::Message;
use crate::tier::LatencyTier;

/// A simulation that keeps its messages, for the assertions on them.
fn logged(seed: u64, config: Config) -> Sim {
    Sim::new(seed, config).with_message_log()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn work_steals_from(sim: &Sim, node: usize) -> Vec<LatencyTier> {
    sim.sent()
        .iter()
        .filter(|r| r.from == node)
        .filter_map(|r| match &r.message {
            Message::WorkSteal { origin, tier, .. } if origin == sim.agent(node).id() => {
                Some(*tier)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn given_all_nodes_loaded_then_no_packets_are_sent() {
    let mut sim = logged(1, Config::default());
    for i in 0..5 {
        let n = sim.add_node(NodeSpec::new(2.0));
        sim.add_entity(n, "heat", 2 * i, 1 << 20);
        sim.add_entity(n, "heat", 2 * i + 1, 1 << 20);
    }
    sim.set_rtt(0, 4, ms(300));
    sim.set_rtt(1, 3, ms(60));
    sim.run_for(secs(600));
    assert!(
        sim.sent().is_empty(),
        "sent: {:?}",
        &sim.sent()[..sim.sent().len().min(5)]
    );
    assert!(sim.migrations().is_empty());
}

#[test]
fn given_a_newly_joined_idle_node_then_work_steal_finds_it() {
    let mut sim = logged(7, Config::default());
    let n0 = sim.add_node(NodeSpec::new(1.0));
    let n1 = sim.add_node(NodeSpec::new(1.0));
    let n2 = sim.add_node(NodeSpec::new(1.0));
    sim.add_entity(n0, "heat", 0, 4 << 20);
    sim.add_entity(n0, "heat", 1, 4 << 20);
    sim.add_entity(n1, "heat", 2, 4 << 20);
    sim.add_entity(n2, "heat", 3, 4 << 20);
    // n0 is overloaded, but nobody is lightly loaded: nothing is sent.
    sim.run_for(secs(30));
    assert!(sim.sent().is_empty());
    let n3 = sim.add_node(NodeSpec::new(1.0));
    sim.run_for(secs(60));
    let moves = sim.migrations();
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!((moves[0].from, moves[0].to), (n0, n3));
    assert_eq!([sim.count_on(n0), sim.count_on(n3)], [1, 1]);
    assert!(moves[0].at < secs(40), "found late: {:?}", moves[0].at);
    // Balanced now, with every node exactly full: the pool falls silent.
    let sent = sim.sent().len();
    sim.run_for(secs(300));
    assert_eq!(sim.sent().len(), sent);
}

#[test]
fn given_no_local_giver_then_steal_escalates_through_tiers() {
    let mut sim = logged(3, Config::default());
    let thief = sim.add_node(NodeSpec::new(1.0));
    let local = sim.add_node(NodeSpec::new(1.0));
    let regional = sim.add_node(NodeSpec::new(1.0));
    let national = sim.add_node(NodeSpec::new(1.0));
    sim.set_rtt(thief, local, ms(2));
    sim.set_rtt(thief, regional, ms(50));
    sim.set_rtt(thief, national, ms(200));
    sim.set_rtt(local, regional, ms(50));
    sim.set_rtt(local, national, ms(200));
    sim.set_rtt(regional, national, ms(150));
    sim.add_entity(local, "heat", 0, 0);
    sim.add_entity(regional, "heat", 1, 0);
    sim.add_entity(national, "heat", 2, 0);
    sim.add_entity(national, "heat", 3, 0);
    sim.run_for(secs(20));
    assert_eq!(
        work_steals_from(&sim, thief),
        [
            LatencyTier::Local,
            LatencyTier::Regional,
            LatencyTier::National
        ]
    );
    let moves = sim.migrations();
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!((moves[0].from, moves[0].to), (national, thief));
    // The local and regional agents declined and had nobody to forward to.
    assert!(sim
        .sent()
        .iter()
        .any(|r| r.from == local && matches!(r.message, Message::StealExhausted { .. })));
}

#[test]
fn given_a_chain_of_local_peers_then_the_packet_finds_the_giver_and_the_thief_asks_it_directly() {
    // thief - a - b - giver, each pair local only along the chain. The giver moves no work
    // on a forwarded packet (its origin is unauthenticated): it tells the thief, which asks
    // the giver over its own connection.
    let mut sim = logged(5, Config::default().with_rrp_ttl(3)).with_default_rtt(ms(60));
    let thief = sim.add_node(NodeSpec::new(1.0));
    let a = sim.add_node(NodeSpec::new(1.0));
    let b = sim.add_node(NodeSpec::new(1.0));
    let giver = sim.add_node(NodeSpec::new(1.0));
    sim.set_rtt(thief, a, ms(1));
    sim.set_rtt(a, b, ms(1));
    sim.set_rtt(b, giver, ms(1));
    sim.add_entity(a, "heat", 0, 0);
    sim.add_entity(b, "heat", 1, 0);
    sim.add_entity(giver, "heat", 2, 0);
    sim.add_entity(giver, "heat", 3, 0);
    sim.run_for(secs(10));
    assert_eq!(
        work_steals_from(&sim, thief),
        [LatencyTier::Local, LatencyTier::Regional]
    );
    let moves = sim.migrations();
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!((moves[0].from, moves[0].to), (giver, thief));
}

#[test]
fn given_state_too_costly_to_move_then_nothing_moves() {
    let mut sim = logged(2, Config::default());
    let busy = sim.add_node(NodeSpec::new(1.0));
    let idle = sim.add_node(NodeSpec::new(1.0));
    // 64 GiB at 12.5 MB/s (5,500 s) costs more than the job's expected life (its age, an
    // hour): the cost term saturates at 1 and exceeds any improvement.
    sim.add_entity(busy, "heat", 0, 64 << 30);
    sim.add_entity(busy, "heat", 1, 64 << 30);
    sim.run_for(secs(120));
    assert!(sim.migrations().is_empty());
    assert_eq!(sim.count_on(idle), 0);
    // The idle node keeps asking, but backs off to one round per max back-off (4 s): at
    // most 30 rounds in 2 minutes, against 60 at one per steal period.
    let steals = work_steals_from(&sim, idle).len();
    assert!(steals <= 32, "{steals} steals in 2 minutes");
}

#[test]
fn given_a_fast_node_joins_then_work_moves_to_it_and_not_back() {
    let mut sim = logged(11, Config::default());
    let slow = sim.add_node(NodeSpec::new(2.0));
    sim.add_entity(slow, "heat", 0, 0);
    sim.add_entity(slow, "heat", 1, 0);
    let fast = sim.add_node(NodeSpec::new(2.0).with_speed(3.0));
    sim.run_for(secs(600));
    // Both ranks end on the fast node (the second once the first's node has a free core),
    // and nothing moves back to the slow one.
    assert_eq!(sim.count_on(fast), 2, "{:?}", sim.migrations());
    assert!(sim.migrations().iter().all(|m| m.to == fast));
}

/// Background load of `amplitude` threads that switches on and off every `half_period`,
/// starting on when `phase` is true.
fn square(amplitude: f64, half_period: Duration, phase: bool) -> impl Fn(Duration) -> f64 {
    move |t| {
        let on = (t.as_secs_f64() / half_period.as_secs_f64()) as u64 % 2 == 0;
        if on == phase {
            amplitude
        } else {
            0.0
        }
    }
}

fn oscillating(config: Config, seed: u64) -> Sim {
    let mut sim = logged(seed, config);
    // Two 2-core nodes, three ranks; a competing job of 1.5 threads jumps between the nodes
    // every 20 s, so whichever node it is on is overloaded and the other is light.
    let a = sim.add_node(NodeSpec::new(2.0).with_background(square(1.5, secs(20), true)));
    let b = sim.add_node(NodeSpec::new(2.0).with_background(square(1.5, secs(20), false)));
    sim.add_entity(a, "heat", 0, 1 << 20);
    sim.add_entity(a, "heat", 1, 1 << 20);
    sim.add_entity(b, "heat", 2, 1 << 20);
    sim.run_for(secs(3600));
    sim
}

#[test]
fn given_fluctuating_load_then_no_entity_ping_pongs() {
    let hold_down = crate::agent::DEFAULT_HOLD_DOWN;
    let sim = oscillating(Config::default(), 13);
    let moves = sim.migrations();
    assert!(
        !moves.is_empty(),
        "the swings are large enough to move work"
    );
    let mut last: std::collections::HashMap<_, Duration> = Default::default();
    for m in moves {
        if let Some(prev) = last.insert(m.entity.clone(), m.at) {
            assert!(
                m.at - prev >= hold_down,
                "{} moved again after {:?}",
                m.entity,
                m.at - prev
            );
        }
    }
    let per_entity_bound = (3600 / hold_down.as_secs() + 1) as usize;
    for id in last.keys() {
        let n = moves.iter().filter(|m| &m.entity == id).count();
        assert!(n <= per_entity_bound, "{id} moved {n} times");
    }
    // Without damping the same load bounces entities far more often.
    let undamped = oscillating(
        Config::default()
            .with_hold_down(Duration::ZERO)
            .with_min_gain(0.0),
        13,
    );
    let max_moves = |moves: &[super::MigrationRecord]| {
        let mut counts: std::collections::HashMap<_, usize> = Default::default();
        for m in moves {
            *counts.entry(m.entity.clone()).or_default() += 1;
        }
        counts.values().copied().max().unwrap_or(0)
    };
    assert!(
        max_moves(undamped.migrations()) > 2 * max_moves(moves),
        "undamped {} vs damped {}",
        max_moves(undamped.migrations()),
        max_moves(moves)
    );
}

#[test]
fn given_load_hovering_around_the_light_threshold_then_nothing_moves() {
    let mut sim = logged(17, Config::default());
    // b's idle capacity wobbles between 0.3 and 0.7 cores around the 0.5 threshold.
    let a = sim.add_node(NodeSpec::new(2.0).with_background(square(0.4, secs(7), true)));
    let b = sim.add_node(NodeSpec::new(2.0).with_background(|t: Duration| {
        if (t.as_secs() / 3) % 2 == 0 {
            0.3
        } else {
            0.7
        }
    }));
    sim.add_entity(a, "heat", 0, 1 << 20);
    sim.add_entity(a, "heat", 1, 1 << 20);
    sim.add_entity(b, "heat", 2, 1 << 20);
    sim.run_for(secs(3600));
    assert!(sim.migrations().is_empty(), "{:?}", sim.migrations());
    // b steals while light (half the time, in 3 s spells), but backs off within each spell:
    // about 600 rounds in the hour (measured 602), against 900 at one per steal period.
    let steals = work_steals_from(&sim, b).len();
    assert!(steals < 750, "{steals} steals");
}

#[test]
fn given_the_same_seed_then_the_run_is_replayed_exactly() {
    let a = oscillating(Config::default(), 21);
    let b = oscillating(Config::default(), 21);
    assert_eq!(a.migrations(), b.migrations());
    assert_eq!(a.sent(), b.sent());
}

fn c2c() -> Config {
    Config::default().with_topology(Topology::ClusterToCluster)
}

#[test]
fn given_c2c_manager_dies_then_a_new_manager_is_elected_and_balances() {
    let mut sim = logged(4, c2c());
    let nodes: Vec<usize> = (0..5).map(|_| sim.add_node(NodeSpec::new(1.0))).collect();
    sim.add_entity(nodes[1], "heat", 0, 0);
    sim.add_entity(nodes[2], "heat", 1, 0);
    sim.run_for(secs(10));
    for &n in &nodes {
        assert_eq!(
            sim.agent(n).manager(),
            Some(sim.agent(nodes[0]).id()),
            "node {n}"
        );
    }
    assert!(sim.agent(nodes[0]).is_manager());
    assert!(sim.migrations().is_empty(), "{:?}", sim.migrations());
    sim.kill(nodes[0]);
    sim.run_for(secs(10));
    for &n in &nodes[1..] {
        assert_eq!(
            sim.agent(n).manager(),
            Some(sim.agent(nodes[1]).id()),
            "node {n}"
        );
    }
    assert_eq!(
        sim.agent(nodes[1])
            .cluster_members(sim.epoch + sim.elapsed())
            .len(),
        3
    );
    // The new manager balances: two more ranks land on n2 (new there, they may move
    // after their hold-down).
    sim.add_entity(nodes[2], "heat", 2, 0);
    sim.add_entity(nodes[2], "heat", 3, 0);
    sim.run_for(secs(120));
    let counts: Vec<usize> = nodes[1..].iter().map(|&n| sim.count_on(n)).collect();
    assert_eq!(counts, [1, 1, 1, 1], "{:?}", sim.migrations());
}

#[test]
fn given_c2c_cluster_then_entities_follow_the_availability_ratio() {
    // The last move takes a rank from 0.8 of a core to a whole one: a gain of about 0.09,
    // below the default threshold, so this cluster accepts smaller gains.
    let mut sim = logged(8, c2c().with_min_gain(0.05));
    let big = sim.add_node(NodeSpec::new(4.0));
    let small = sim.add_node(NodeSpec::new(2.0));
    for r in 0..6 {
        sim.add_entity(big, "heat", r, 1 << 20);
    }
    sim.run_for(secs(120));
    // n_big / n_small = 4 / 2.
    assert_eq!(
        [sim.count_on(big), sim.count_on(small)],
        [4, 2],
        "{:?}",
        sim.migrations()
    );
    let moves = sim.migrations().len();
    sim.run_for(secs(600));
    assert_eq!(sim.migrations().len(), moves, "balanced clusters stay put");
}

/// `config` with damping so strong that only a leave moves anything: a hold-down longer
/// than the run and a minimum gain no ordinary move reaches.
fn still(config: Config) -> Config {
    config.with_hold_down(secs(3600)).with_min_gain(0.95)
}

/// Three nodes with two cores each, two entities on `busy`; `busy` leaves after the cluster
/// settled. Returns the simulation once it has run for a minute more.
fn c2c_leave(busy: usize, config: Config) -> Sim {
    let mut sim = logged(11, config);
    for _ in 0..3 {
        sim.add_node(NodeSpec::new(2.0));
    }
    sim.add_entity(busy, "heat", 0, 1 << 20);
    sim.add_entity(busy, "heat", 1, 1 << 20);
    sim.run_for(secs(30));
    // Balanced as it is (one core each): nothing moved.
    assert_eq!(sim.count_on(busy), 2, "{:?}", sim.migrations());
    sim.leave(busy);
    sim.run_for(secs(60));
    sim
}

#[test]
fn given_a_c2c_member_leaves_then_the_manager_moves_its_entities_to_the_others() {
    let sim = c2c_leave(1, still(c2c()));
    assert_eq!(sim.count_on(1), 0, "{:?}", sim.migrations());
    assert_eq!(sim.count_on(0) + sim.count_on(2), 2);
    let progress = sim.agent(1).leave_progress().expect("leaving");
    assert!(progress.is_drained(), "{progress:?}");
    assert_eq!(sim.migrations().len(), 2, "{:?}", sim.migrations());
}

#[test]
fn given_the_c2c_manager_itself_leaves_then_its_entities_go_to_its_members() {
    let sim = c2c_leave(0, still(c2c()));
    assert_eq!(sim.count_on(0), 0, "{:?}", sim.migrations());
    assert_eq!(sim.count_on(1) + sim.count_on(2), 2);
}

#[test]
fn given_a_p2p_node_leaves_then_idle_peers_take_its_entities() {
    let sim = c2c_leave(1, still(Config::default()));
    assert_eq!(sim.count_on(1), 0, "{:?}", sim.migrations());
    assert!(sim.agent(1).leave_progress().expect("leaving").is_drained());
}

#[test]
fn given_two_clusters_then_managers_steal_across_them() {
    let mut sim = logged(9, c2c()).with_default_rtt(ms(50));
    // Cluster x: n0 (manager) and n1, overloaded. Cluster y: n2 (manager) and n3, idle.
    let x0 = sim.add_node(NodeSpec::new(1.0));
    let x1 = sim.add_node(NodeSpec::new(1.0));
    let y0 = sim.add_node(NodeSpec::new(1.0));
    let y1 = sim.add_node(NodeSpec::new(1.0));
    sim.set_rtt(x0, x1, ms(1));
    sim.set_rtt(y0, y1, ms(1));
    sim.add_entity(x0, "heat", 0, 0);
    sim.add_entity(x1, "heat", 1, 0);
    sim.add_entity(x1, "heat", 2, 0);
    sim.add_entity(y0, "heat", 3, 0);
    sim.run_for(secs(60));
    assert_eq!(sim.agent(y1).manager(), Some(sim.agent(y0).id()));
    assert_eq!(sim.agent(x1).manager(), Some(sim.agent(x0).id()));
    let moves = sim.migrations();
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!((moves[0].from, moves[0].to), (x1, y1));
    // Only managers started work steals, and only towards other clusters.
    for r in sim.sent() {
        if let Message::WorkSteal { origin, tier, .. } = &r.message {
            assert!(origin == sim.agent(x0).id() || origin == sim.agent(y0).id());
            assert_ne!(*tier, LatencyTier::Local);
        }
    }
}

/// The simulator sizes work steals without encoding their RTTs (`message_cbor_len`): the
/// count must be ciborium's, byte for byte, whatever the number of RTTs (the array head
/// grows at 24 and 256), the host names' lengths and the RTTs' magnitudes.
#[test]
fn given_work_steals_with_rtts_then_their_size_is_ciboriums() {
    use pcm_proto::HostName;

    use super::{cbor_len, message_cbor_len};
    use crate::message::{HostRtt, MessageId};
    use crate::model::NodeProfile;
    use crate::tier::PeerId;

    for count in [0usize, 1, 23, 24, 64, 255, 256] {
        let rtts: Vec<HostRtt> = (0..count)
            .map(|i| HostRtt {
                host: HostName::new("h".repeat(1 + (i * 37) % 255)).expect("valid"),
                rtt_us: [0, 23, 24, 255, 256, 65_535, 65_536, u32::MAX][i % 8],
            })
            .collect();
        let steal = Message::WorkSteal {
            id: MessageId(7),
            origin: PeerId::new("n01").expect("valid"),
            source: PeerId::new("n02").expect("valid"),
            source_host: HostName::new("n02").expect("valid"),
            source_profile: NodeProfile::idle(4.0, 8 << 30),
            ttl: 3,
            tier: LatencyTier::Regional,
            rtts: rtts.into(),
            job_offers: Vec::new(),
            departed: Vec::new(),
        };
        let expected = cbor_len(&steal);
        let (back, fast) = message_cbor_len(steal.clone());
        assert_eq!(fast, expected, "{count} RTTs");
        assert_eq!(back, steal, "the message comes back as it went in");
    }
}

/// Heartbeats are sized without encoding them: the count is ciborium's, for ids of every
/// length and byte value (a byte of 24 or more takes two), message ids and member counts of
/// every size, with and without a successor.
#[test]
fn given_heartbeats_then_their_size_is_ciboriums() {
    use super::{cbor_len, message_cbor_len};
    use crate::message::MessageId;
    use crate::tier::PeerId;

    let ids: Vec<PeerId> = [
        b"n01".to_vec(),
        b"n9999".to_vec(),
        vec![0],
        vec![23, 24, 255],
        (0..=63).collect(),
        (200..=237).collect(),
    ]
    .into_iter()
    .map(|b| PeerId::new(b).expect("valid"))
    .collect();
    for id in [
        0,
        23,
        24,
        255,
        256,
        65_535,
        65_536,
        u64::from(u32::MAX) + 1,
        u64::MAX,
    ] {
        for manager in &ids {
            for successor in std::iter::once(None).chain(ids.iter().map(Some)) {
                let members = u32::try_from(id % (u64::from(u32::MAX) + 1)).expect("fits");
                let beat = Message::Heartbeat {
                    id: MessageId(id),
                    manager: manager.clone(),
                    successor: successor.cloned(),
                    members,
                };
                let expected = cbor_len(&beat);
                let (back, fast) = message_cbor_len(beat.clone());
                assert_eq!(fast, expected, "{beat:?}");
                assert_eq!(back, beat, "the message comes back as it went in");
            }
        }
    }
}

/// `index_of` tells a node's id from its digits alone: every node's own id maps to it, and
/// ids that only parse to an index (other padding, other prefix, beyond the pool) do not.
#[test]
fn given_node_ids_then_index_of_finds_exactly_the_nodes() {
    use crate::tier::PeerId;

    let mut sim = Sim::new(1, Config::default());
    for _ in 0..120 {
        sim.add_node(NodeSpec::new(1.0));
    }
    for i in 0..120 {
        assert_eq!(sim.index_of(sim.agent(i).id()), Some(i), "node {i}");
    }
    for other in [
        "n5",
        "n005",
        "n0100",
        "x01",
        "n",
        "n1a",
        "n120",
        "n99999999999999999999999",
    ] {
        let peer = PeerId::new(other).expect("valid");
        assert_eq!(sim.index_of(&peer), None, "{other}");
    }
}

proptest::proptest! {
    /// The mirror of which agents hold which peers' hosts answers as a plain set of pairs
    /// would, through any growth of the pool (its rows are laid out again) and both
    /// directions of a pair (whose bits share a word).
    #[test]
    fn held_hosts_answer_as_a_set_of_pairs(
        ops in proptest::collection::vec((0usize..3, 0usize..150, 0usize..150), 1..200),
    ) {
        use std::collections::HashSet;

        let mut held = super::HeldHosts::default();
        let mut model: HashSet<(usize, usize)> = HashSet::new();
        let mut nodes = 1;
        held.grow(nodes);
        for (op, a, b) in ops {
            if op == 0 {
                nodes = (nodes + a % 50).min(150);
                held.grow(nodes);
                continue;
            }
            let (a, b) = (a % nodes, b % nodes);
            held.set(a, b, op == 1);
            if op == 1 {
                model.insert((a, b));
            } else {
                model.remove(&(a, b));
            }
            proptest::prop_assert_eq!(held.get(a, b), op == 1);
            proptest::prop_assert_eq!(held.get(b, a), model.contains(&(b, a)));
        }
        for a in 0..nodes {
            for b in 0..nodes {
                proptest::prop_assert_eq!(held.get(a, b), model.contains(&(a, b)), "{} {}", a, b);
            }
        }
    }
}

/// A job of four ranks, one on each of four far-apart 4-core nodes: no single move shortens
/// its longest exchange, so an oracle that moves one rank at a time (its first version) left
/// it there. The oracle gathers it onto one node.
#[test]
fn given_a_job_spread_over_far_nodes_then_the_oracle_gathers_it() {
    use super::{Balancer, Pattern};
    let run = |balancer: Balancer| {
        let mut sim = Sim::new(3, Config::default())
            .with_default_rtt(ms(300))
            .with_balancer(balancer);
        let ranks: Vec<_> = (0..4)
            .map(|rank| {
                let n = sim.add_node(NodeSpec::new(4.0));
                sim.add_entity(n, "far", rank, 1 << 20)
            })
            .collect();
        sim.set_pattern("far", Pattern::Hypercube);
        sim.run_for(secs(300));
        let nodes: std::collections::BTreeSet<usize> =
            ranks.iter().filter_map(|id| sim.node_of(id)).collect();
        (nodes.len(), sim.iterations())
    };
    let (spread, none) = run(Balancer::None);
    let (gathered, oracle) = run(Balancer::Oracle { period: secs(10) });
    assert_eq!(spread, 4);
    assert_eq!(gathered, 1, "the job still spans {gathered} nodes");
    assert!(
        oracle > 2.0 * none,
        "oracle {oracle:.0} iterations, none {none:.0}"
    );
}

/// The agents gather a spread job by partner steals ([`Config::with_gather`]): four 4-core
/// nodes 300 ms apart each run one rank of a hypercube job, and each agent's peer table (two
/// peers) holds only its two near idle one-core neighbours, so no work steal of the tiers
/// ever reaches another rank's node. Without partner steals the job stays on its four nodes;
/// with them the light nodes ask their ranks' partners' agents, and the job comes together
/// (on one node or two: a 4-core node takes at most three more ranks once its own computes).
#[test]
fn given_a_job_spread_beyond_the_peer_tables_then_partner_steals_gather_it() {
    use super::Pattern;
    let run = |gather: bool| {
        let config = Config::default().with_max_peers(2).with_gather(gather);
        let mut sim = Sim::new(5, config)
            .with_default_rtt(ms(300))
            .with_partners();
        let ranks: Vec<_> = (0..4)
            .map(|rank| {
                let n = sim.add_node(NodeSpec::new(4.0));
                let id = sim.add_entity(n, "far", rank, 1 << 20);
                for _ in 0..2 {
                    let near = sim.add_node(NodeSpec::new(1.0));
                    sim.set_rtt(n, near, ms(2));
                }
                id
            })
            .collect();
        sim.set_pattern("far", Pattern::Hypercube);
        sim.run_for(secs(600));
        let nodes: std::collections::BTreeSet<usize> =
            ranks.iter().filter_map(|id| sim.node_of(id)).collect();
        let partner_steals: u64 = (0..sim.node_count())
            .map(|n| sim.agent(n).stats().partner_steals_sent)
            .sum();
        (nodes.len(), sim.iterations(), partner_steals)
    };
    let (spread, alone, none_sent) = run(false);
    let (gathered, together, sent) = run(true);
    assert_eq!(spread, 4, "without partner steals the job moved");
    assert_eq!(none_sent, 0);
    assert!(sent > 0);
    assert!(gathered <= 2, "the job still spans {gathered} nodes");
    assert!(
        together > 1.5 * alone,
        "gathered {together:.0} iterations, spread {alone:.0}"
    );
}

/// `count` clusters of `size` nodes of `cores` cores, 1 ms apart inside a cluster (the
/// default RTT between clusters), node indices by cluster.
fn clusters(sim: &mut Sim, count: usize, size: usize, cores: f64) -> Vec<Vec<usize>> {
    (0..count)
        .map(|_| {
            let nodes: Vec<usize> = (0..size)
                .map(|_| sim.add_node(NodeSpec::new(cores)))
                .collect();
            for &a in &nodes {
                for &b in &nodes {
                    if a < b {
                        sim.set_rtt(a, b, ms(1));
                    }
                }
            }
            nodes
        })
        .collect()
}

/// NSc2c partner steals: two clusters of three 4-core nodes, 300 ms apart, each agent's peer
/// table holding only its two cluster mates, so no manager ever hears of the other cluster.
/// A job of four ranks has three on one node of the first cluster and one on a node of the
/// second. Without partner steals it stays split; with them the first cluster's manager asks
/// the agent of its member's ranks' far partner, that member names its own manager
/// (`StealRedirect`), and the job comes together in one cluster. (Two ranks on each side
/// would stay split: each rank would have one partner near and one far wherever it ran,
/// and the model moves one rank at a time.)
#[test]
fn given_a_job_split_between_two_far_clusters_then_nsc2c_partner_steals_gather_it() {
    use super::Pattern;
    let run = |gather: bool| {
        let config = c2c().with_max_peers(2).with_gather(gather);
        let mut sim = Sim::new(11, config)
            .with_default_rtt(ms(300))
            .with_partners();
        let clusters = clusters(&mut sim, 2, 3, 4.0);
        // On the last node of each cluster (not its manager's: the lowest id wins a fresh
        // election).
        let ranks: Vec<_> = (0..4)
            .map(|rank| sim.add_entity(clusters[rank as usize / 3][2], "split", rank, 1 << 20))
            .collect();
        sim.set_pattern("split", Pattern::Hypercube);
        sim.run_for(secs(600));
        let in_clusters: std::collections::BTreeSet<usize> = ranks
            .iter()
            .filter_map(|id| sim.node_of(id))
            .map(|n| n / 3)
            .collect();
        let redirects = sim
            .messages()
            .by_kind
            .get("steal-redirect")
            .map_or(0, |(n, _)| *n);
        (in_clusters.len(), sim.iterations(), redirects)
    };
    let (split, alone, none_redirected) = run(false);
    let (gathered, together, redirected) = run(true);
    assert_eq!(split, 2, "without partner steals the job left a cluster");
    assert_eq!(none_redirected, 0);
    assert!(redirected > 0, "no member named its manager");
    assert_eq!(gathered, 1, "the job still spans {gathered} clusters");
    assert!(
        together > 1.5 * alone,
        "gathered {together:.0} iterations, split {alone:.0}"
    );
}

/// NSc2c gathers a job whose ranks fill one member of a cluster with room elsewhere: two
/// clusters of three nodes, 300 ms apart, each agent's peer table holding only its two
/// cluster mates. A job of five ranks has four on a 4-core node of the first cluster (busy:
/// not light) and one on a node of the second; the first cluster's other two nodes are
/// idle. No light member runs a rank of the job, so before `c2c_partner_steal_target`
/// also asked for a busy member's gathered jobs nobody asked for the fifth rank. Now the
/// manager asks for it on behalf of the full member, the rank comes to that member, and
/// the manager's balancing moves a rank to an idle member near it.
#[test]
fn given_a_job_that_fills_one_member_of_a_cluster_with_room_then_nsc2c_gathers_it_there() {
    use super::Pattern;
    let config = c2c().with_max_peers(2);
    let mut sim = Sim::new(13, config)
        .with_default_rtt(ms(300))
        .with_partners();
    let clusters = clusters(&mut sim, 2, 3, 4.0);
    let ranks: Vec<_> = (0..5)
        .map(|rank| {
            let cluster = if rank < 4 { 0 } else { 1 };
            sim.add_entity(clusters[cluster][2], "full", rank, 1 << 20)
        })
        .collect();
    sim.set_pattern("full", Pattern::Tree);
    sim.run_for(secs(600));
    let nodes: Vec<usize> = ranks.iter().filter_map(|id| sim.node_of(id)).collect();
    assert!(
        nodes.iter().all(|n| clusters[0].contains(n)),
        "the job still spans both clusters: {nodes:?}"
    );
    let on_full = nodes.iter().filter(|&&n| n == clusters[0][2]).count();
    assert!(
        on_full <= 4,
        "{on_full} ranks share the full member's 4 cores"
    );
    let redirects = sim
        .messages()
        .by_kind
        .get("steal-redirect")
        .map_or(0, |(n, _)| *n);
    assert!(redirects > 0, "no member named its manager");
}

/// A cluster is the members within the local tier of its manager, and two of them may be
/// far apart: manager m (busy) is 1 ms from b and 5 ms from c, b and c are 300 ms apart.
/// Two ranks of one job share b's only core. The manager's balancing would give c (idle, 4
/// cores) one of them, 300 ms from its partner; it leaves them together. A rank of a job
/// without partners on b goes to c.
#[test]
fn given_a_cluster_with_far_members_then_balancing_keeps_partners_near() {
    use super::Pattern;
    let run = |pattern: Pattern| {
        let mut sim = Sim::new(17, c2c().with_max_peers(4))
            .with_default_rtt(ms(300))
            .with_partners();
        let m = sim.add_node(NodeSpec::new(1.0).with_background(|_| 1.0));
        let b = sim.add_node(NodeSpec::new(1.0));
        let c = sim.add_node(NodeSpec::new(4.0));
        sim.set_rtt(m, b, ms(1));
        sim.set_rtt(m, c, ms(5));
        let ranks: Vec<_> = (0..2)
            .map(|r| sim.add_entity(b, "pair", r, 1 << 20))
            .collect();
        sim.set_pattern("pair", pattern);
        sim.run_for(secs(300));
        let on_c = ranks.iter().filter(|id| sim.node_of(id) == Some(c)).count();
        (on_c, sim.agent(m).is_manager())
    };
    let (together, managed) = run(Pattern::Sparse);
    assert!(managed, "m does not manage the cluster");
    assert_eq!(together, 0, "a rank went 300 ms from its partner");
    let (apart, _) = run(Pattern::Independent);
    assert_eq!(apart, 1, "without partners the ranks share one core");
}

/// NSc2c at scale (docs/results-log.md, "Scale", 2026-11-29): five machine clusters of 20 nodes
/// 100 ms apart, discovery of 4 random agents per 15 s as in the scale runs, and a node that
/// joins the first cluster after 10 minutes. It meets some of its cluster mates within
/// seconds, hears them vote for their manager, and should follow that manager within a
/// minute. Today it follows it only once discovery happens to bring it the manager itself
/// (255 s in this pool; at 1,000 nodes most agents stay alone for the hour). Ignored until
/// an agent measures the manager its local peers vote for.
#[test]
#[ignore = "issue 15: an NSc2c agent follows a manager only after meeting it by random discovery"]
fn given_a_newcomer_that_hears_its_mates_vote_then_it_follows_their_manager_within_a_minute() {
    let mut sim = Sim::new(23, c2c().with_max_peers(64))
        .with_default_rtt(ms(100))
        .with_discovery(4)
        .with_rtt_period(secs(15));
    let clusters = clusters(&mut sim, 5, 20, 2.0);
    sim.run_for(secs(600));
    let late = sim.add_node(NodeSpec::new(2.0));
    for &b in &clusters[0] {
        sim.set_rtt(late, b, ms(1));
    }
    sim.run_for(secs(60));
    let theirs = sim.agent(clusters[0][0]).manager().cloned();
    assert!(theirs.is_some());
    assert_eq!(
        sim.agent(late).manager().cloned(),
        theirs,
        "the newcomer does not follow its cluster's manager"
    );
}

/// Agents that meet after their first seconds count each other as junior, and each votes
/// for itself; on votes alone none followed another (docs/results-log.md, "Scale",
/// 2026-11-29: at 1,000 simulated nodes 355 of 404 clusters stayed one node for the hour,
/// as agents met their cluster mates over minutes). Ten nodes 300 ms apart for their first
/// minute, then 1 ms apart: each hears the others only after its seniority grace. Within 5
/// minutes they form one cluster: agents alone pair up, and the pairs grow by the votes.
#[test]
fn given_agents_that_meet_late_then_they_still_form_a_cluster() {
    let mut sim = Sim::new(29, c2c()).with_default_rtt(ms(300));
    let nodes: Vec<usize> = (0..10).map(|_| sim.add_node(NodeSpec::new(2.0))).collect();
    sim.run_for(secs(60));
    for &a in &nodes {
        for &b in &nodes {
            if a < b {
                sim.set_rtt(a, b, ms(1));
            }
        }
    }
    sim.run_for(secs(300));
    let managers: std::collections::BTreeSet<_> = nodes
        .iter()
        .filter_map(|&n| sim.agent(n).manager().cloned())
        .collect();
    assert_eq!(managers.len(), 1, "clusters: {managers:?}");
}

/// A background load of one core from `from` to `to` seconds, none outside.
fn busy(from: u64, to: u64) -> impl Fn(Duration) -> f64 {
    move |t: Duration| {
        if t >= secs(from) && t < secs(to) {
            1.0
        } else {
            0.0
        }
    }
}

/// `rank` moved from `first` to `second`, then back, but not within two hold-downs.
fn assert_back_only_after_two_hold_downs(
    sim: &Sim,
    rank: &crate::model::EntityId,
    first: usize,
    second: usize,
) {
    let moves: Vec<_> = sim
        .migrations()
        .iter()
        .filter(|m| m.entity == *rank)
        .collect();
    let [off, back, ..] = &moves[..] else {
        panic!("expected a move off the loaded node and one back: {moves:?}");
    };
    assert_eq!((off.from, off.to), (first, second), "{moves:?}");
    assert_eq!((back.from, back.to), (second, first), "{moves:?}");
    let hold_down = crate::agent::DEFAULT_HOLD_DOWN;
    assert!(
        back.at >= off.at + hold_down * 2,
        "back after {:?}, within two hold-downs",
        back.at - off.at
    );
}

/// An NSc2c manager does not order a rank back to the node it ordered it off within two
/// hold-downs, when the owners' loads swap between two members (the scale runs saw one such
/// return, 100 nodes, Grid-like, one hour). After that it may.
#[test]
fn given_loads_that_swap_between_two_members_then_the_manager_does_not_order_a_rank_back() {
    let mut sim = logged(6, c2c());
    // The manager (lowest index) is always busy: it never takes the rank.
    let manager = sim.add_node(NodeSpec::new(1.0).with_background(|_| 1.0));
    let first = sim.add_node(NodeSpec::new(1.0).with_background(busy(20, 100)));
    let second = sim.add_node(NodeSpec::new(1.0).with_background(busy(100, 1000)));
    let rank = sim.add_entity(first, "heat", 0, 0);
    sim.run_for(secs(400));
    assert!(sim.agent(manager).is_manager());
    assert_back_only_after_two_hold_downs(&sim, &rank, first, second);
}

/// Across clusters too: when the owners' loads swap between a member of one cluster and a
/// member of another, the rank stolen across does not go back within two hold-downs. The
/// manager that stole it learns the host it left (not the giving manager's), and passes no
/// rank back there (at 10,000 nodes, Grid-like, one hour, NSc2c ranks went back 7 times).
#[test]
fn given_loads_that_swap_between_two_clusters_then_the_stolen_rank_does_not_go_back() {
    let mut sim = logged(6, c2c()).with_default_rtt(ms(50));
    // Two clusters, each of an always busy manager (it never takes the rank) and a member.
    let x0 = sim.add_node(NodeSpec::new(1.0).with_background(|_| 1.0));
    let x1 = sim.add_node(NodeSpec::new(1.0).with_background(busy(20, 100)));
    let y0 = sim.add_node(NodeSpec::new(1.0).with_background(|_| 1.0));
    let y1 = sim.add_node(NodeSpec::new(1.0).with_background(busy(100, 1000)));
    sim.set_rtt(x0, x1, ms(1));
    sim.set_rtt(y0, y1, ms(1));
    let rank = sim.add_entity(x1, "heat", 0, 0);
    sim.run_for(secs(400));
    assert!(sim.agent(x0).is_manager() && sim.agent(y0).is_manager());
    assert_back_only_after_two_hold_downs(&sim, &rank, x1, y1);
}

/// An iteration waits for each round's slowest pair, round after round: one far pair of a
/// hypercube costs its latency once (its dimension's round), and one far level of a tree
/// twice (up and down); a ring or stencil exchanges in one round.
#[test]
fn given_one_far_pair_then_only_its_round_waits_for_it() {
    use super::Pattern;
    let near = 0.001;
    let far = 0.1;
    let cube = Pattern::Hypercube.exchanges(8);
    assert_eq!(cube.pairs.len(), 12);
    assert_eq!(cube.times, vec![1, 1, 1]);
    // Ranks 0 and 2 differ in dimension 1 only.
    let far_pair = cube
        .pairs
        .iter()
        .position(|&p| p == (0, 2))
        .expect("a pair");
    assert_eq!(cube.round[far_pair], 1);
    let seconds = cube.seconds(|i| if i == far_pair { far } else { near });
    assert!((seconds - (far + 2.0 * near)).abs() < 1e-12, "{seconds}");

    let tree = Pattern::Tree.exchanges(8);
    assert_eq!(tree.pairs.len(), 7);
    assert_eq!(tree.round, vec![0, 0, 1, 1, 1, 1, 2]);
    assert_eq!(tree.times, vec![2, 2, 2]);
    // Rank 7 hangs off rank 3, the deepest level.
    let seconds = tree.seconds(|i| if tree.pairs[i] == (7, 3) { far } else { near });
    assert!(
        (seconds - 2.0 * (far + 2.0 * near)).abs() < 1e-12,
        "{seconds}"
    );

    for pattern in [Pattern::Sparse, Pattern::Stencil] {
        let one = pattern.exchanges(8);
        assert_eq!(one.times, vec![1], "{pattern:?}");
        let seconds = one.seconds(|i| if i == 0 { far } else { near });
        assert!((seconds - far).abs() < 1e-12, "{pattern:?}: {seconds}");
    }
    assert_eq!(Pattern::Independent.exchanges(8).seconds(|_| far), 0.0);
    assert_eq!(Pattern::Tree.exchanges(1).seconds(|_| far), 0.0);
}

/// A pool larger than the agents' peer tables, measured by discovery as the scale runs do
/// (both topologies): peer tables fill and evict, hosts are dropped to make room, clusters
/// form over the local tier. The shortcuts taken on those paths (`Sim::feed_known_rtt`,
/// `Agent::c2c_peer_changed`) check in tests that they skip nothing that would act, and
/// the run must replay from its seed.
#[test]
fn given_discovery_in_a_pool_beyond_the_peer_tables_then_runs_replay() {
    fn run(topology: Topology) -> Sim {
        let tiers = [2u64, 5, 40, 180, 300];
        let config = Config::default().with_topology(topology).with_max_peers(8);
        let mut sim = Sim::new(11, config)
            .with_rtt_model(move |i, j| {
                let h = (i.min(j) * 31 + i.max(j) * 17) % tiers.len();
                ms(tiers[h])
            })
            .with_discovery(3)
            .with_rtt_period(secs(15));
        for i in 0..60 {
            let n = sim.add_node(NodeSpec::new(1.0 + (i % 3) as f64));
            if i % 4 == 0 {
                sim.add_entity(n, &format!("job{}", i / 16), (i / 4 % 4) as u32, 1 << 20);
                sim.add_entity(
                    n,
                    &format!("job{}", i / 16),
                    (i / 4 % 4) as u32 + 4,
                    1 << 20,
                );
            }
        }
        sim.run_for(secs(300));
        sim
    }
    for topology in [Topology::PeerToPeer, Topology::ClusterToCluster] {
        let (a, b) = (run(topology), run(topology));
        assert_eq!(a.migrations(), b.migrations(), "{topology:?}");
        assert_eq!(a.messages().messages, b.messages().messages, "{topology:?}");
        assert!(a.messages().messages > 0, "{topology:?}");
    }
}

/// The indexed timer heap yields each node's armed instant, soonest first (ties by node),
/// through any sequence of arming, re-arming, disarming and popping.
#[test]
fn given_timers_rearmed_at_random_then_the_soonest_comes_first() {
    use rand::{Rng, SeedableRng};

    let t0 = std::time::Instant::now();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut timers = super::Timers::default();
    let mut model: Vec<Option<std::time::Instant>> = vec![None; 40];
    for _ in 0..20_000 {
        let node = rng.random_range(0..model.len());
        match rng.random_range(0..4) {
            0 => {
                timers.set(node, None);
                model[node] = None;
            }
            1 => {
                timers.pop();
                let soonest = (0..model.len())
                    .filter_map(|i| model[i].map(|t| (t, i)))
                    .min();
                if let Some((_, i)) = soonest {
                    model[i] = None;
                }
            }
            _ => {
                let at = t0 + ms(rng.random_range(0..50));
                timers.set(node, Some(at));
                model[node] = Some(at);
            }
        }
        let soonest = (0..model.len())
            .filter_map(|i| model[i].map(|t| (t, i)))
            .min();
        assert_eq!(timers.peek(), soonest);
    }
}

/// A node's profile shows the competing load as the real sampler measures it, the CPU the
/// other processes got: on an overloaded node they share the cores fairly with the ranks,
/// so four ranks beside four competing threads on four cores still get half a core each.
/// (It used to show the competing demand, all four cores, and the agents then took the
/// ranks for starved: any node with a free core drew them, and a job held whole on a node
/// its owner came back to scattered over many; docs/results-log.md, "Scale", 2026-11-29.)
#[test]
fn an_overloaded_node_shows_the_competing_load_its_fair_share_of_the_cores() {
    let mut sim = Sim::new(3, Config::default());
    let busy = sim.add_node(NodeSpec::new(4.0).with_speed(1.5).with_background(|_| 4.0));
    // Full, not overloaded: no node has a core to offer, so nothing moves.
    let calm = sim.add_node(NodeSpec::new(4.0).with_background(|_| 3.0));
    for r in 0..4 {
        sim.add_entity(busy, "heat", r, 1 << 20);
    }
    sim.add_entity(calm, "heat", 4, 1 << 20);
    sim.run_for(secs(5));
    assert!(sim.migrations().is_empty());
    let profile = |node| *sim.agent(node).node_profile().expect("profiled");
    let busy = profile(busy);
    assert!((busy.competing - 2.0).abs() < 1e-9, "{busy:?}");
    assert!((busy.entity_capacity() - 3.0).abs() < 1e-9, "{busy:?}");
    // Not overloaded: the competing processes get all they ask for.
    let calm = profile(calm);
    assert!((calm.competing - 3.0).abs() < 1e-9, "{calm:?}");
}

/// Two idle 4-core nodes and a job of `ranks` ranks on the first, each with 5 s of state
/// to transfer at 100 Mbit/s, run for 10 s; the two nodes.
fn job_on_one_of_two_nodes(sim: &mut Sim, ranks: u32) -> (usize, usize) {
    let a = sim.add_node(NodeSpec::new(4.0));
    let b = sim.add_node(NodeSpec::new(4.0));
    for rank in 0..ranks {
        sim.add_entity(a, "j", rank, 62_500_000);
    }
    sim.run_for(secs(10));
    (a, b)
}

/// A move stops its job for the whole move, once: two ranks carried together in a move of
/// 0.3 s + 10 s (their state at 100 Mbit/s) cost the job 10.3 s of progress, though the move
/// spans five profile rounds of 2 s. The oracle's moves of one job at one instant are one
/// plan and stop it once; an agent's move of a job that already stands still waits for the
/// current move to end (one reconfiguration at a time) and stops it for its own time after,
/// unless it comes from the node whose daemon made the first request. The simulator charged at most one profile period per move, and the pause once
/// per rank, until 2026-11-29 (late).
#[test]
fn given_a_move_longer_than_a_profile_period_then_its_job_stands_still_for_all_of_it_once() {
    use super::Balancer;
    use crate::message::MigrationId;

    // Seconds of progress in 40 s, with the moves `moves` begins at the start: after how
    // many seconds, which ranks, and whether an agent or the oracle moves them.
    let progress = |moves: &[(u64, Vec<usize>, bool)]| {
        let mut sim = Sim::new(1, Config::default()).with_balancer(Balancer::None);
        let (a, b) = job_on_one_of_two_nodes(&mut sim, 3);
        let before = sim.iterations();
        for (k, (delay, entities, by_agent)) in moves.iter().enumerate() {
            sim.run_for(secs(*delay));
            sim.begin_move(MigrationId(k as u64), a, b, entities.clone(), *by_agent);
        }
        let waited: u64 = moves.iter().map(|(d, _, _)| d).sum();
        sim.run_for(secs(40 - waited));
        (sim.iterations() - before) * sim.jobs[0].iteration
    };
    let still = progress(&[]);
    assert!((still - 40.0).abs() < 1e-6, "{still}");
    for by_agent in [false, true] {
        let lost = still - progress(&[(0, vec![0, 1], by_agent)]);
        assert!((lost - 10.3).abs() < 1e-6, "lost {lost} s");
        // A second move 12 s after the first began: two stand-stills, 10.3 s and 5.3 s.
        let lost = still - progress(&[(0, vec![0, 1], by_agent), (12, vec![2], by_agent)]);
        assert!((lost - 15.6).abs() < 1e-6, "lost {lost} s");
    }
    // The oracle moves a job's ranks at one instant: one plan, one stand-still of the longest.
    let lost = still - progress(&[(0, vec![0, 1], false), (0, vec![2], false)]);
    assert!((lost - 10.3).abs() < 1e-6, "lost {lost} s");
    // An agent's move 4 s into another, from the same node: that node's daemon has the
    // job's first request in flight and answers busy, so it fails at once and the job
    // stands still for the first move only (a move from another node queues: the next test).
    let lost = still - progress(&[(0, vec![0, 1], true), (4, vec![2], true)]);
    assert!((lost - 10.3).abs() < 1e-6, "lost {lost} s");
}

/// As pcm does (since 2026-11-29, late night), an agent's move of a job that is already moving waits
/// for the move under way when another node's daemon asks for it (the job agrees on it at
/// its next status check: it moves none of the ranks of the first), and fails at once when
/// the node's own daemon has a request of the job in flight (pcmd answers busy): both with
/// one request per reconfiguration and with all of a check's requests in one (the default
/// since 2026-11-30).
#[test]
fn given_a_job_moving_then_another_nodes_move_queues_and_the_same_nodes_is_refused_busy() {
    use super::Balancer;
    use crate::message::MigrationId;

    for one_by_one in [false, true] {
        // Ranks 0, 1 and 3 on node a, rank 2 on node c; b and d idle. Ranks 0 and 1 leave a
        // at 0 s (10.3 s); at 4 s node c's agent moves rank 2 (5.3 s) and node a's moves
        // rank 3.
        let mut sim = Sim::new(1, Config::default()).with_balancer(Balancer::None);
        if one_by_one {
            sim = sim.with_one_request_per_reconfiguration();
        }
        let n: Vec<usize> = (0..4).map(|_| sim.add_node(NodeSpec::new(4.0))).collect();
        let (a, b, c, d) = (n[0], n[1], n[2], n[3]);
        for (rank, node) in [(0, a), (1, a), (2, c), (3, a)] {
            sim.add_entity(node, "j", rank, 62_500_000);
        }
        sim.run_for(secs(10));
        let before = sim.iterations();
        sim.begin_move(MigrationId(1), a, b, vec![0, 1], true);
        sim.run_for(secs(4));
        sim.begin_move(MigrationId(2), c, d, vec![2], true);
        sim.begin_move(MigrationId(3), a, d, vec![3], true);
        sim.run_for(secs(36));
        let progress = (sim.iterations() - before) * sim.jobs[0].iteration;
        assert!(
            (40.0 - progress - 15.6).abs() < 1e-6,
            "lost {} s (one by one: {one_by_one})",
            40.0 - progress
        );
        assert_eq!((sim.count_on(b), sim.count_on(d)), (2, 1));
        assert_eq!(
            sim.count_on(a),
            1,
            "rank 3 stayed: node a's daemon was busy (one by one: {one_by_one})"
        );
        // Three ranks moved: 0 and 1 at 20.3 s, rank 2 when its waiting move ended, at
        // 25.6 s.
        let ended: Vec<f64> = sim
            .migrations()
            .iter()
            .map(|m| m.at.as_secs_f64())
            .collect();
        assert_eq!(ended.len(), 3, "{ended:?}");
        assert!((ended[2] - 25.6).abs() < 1e-6, "{ended:?}");
    }
}

/// With [`Sim::with_requests_refused_while_moving`], as pcm does, an agent's move of a job
/// that is already moving fails when the move under way ends (pcm refuses a request made
/// while the job reconfigures: busy, or superseded), and the agent hears of it then;
/// nothing moves.
#[test]
fn given_requests_refused_while_moving_then_an_agents_second_move_fails_when_the_first_ends() {
    use super::Balancer;
    use crate::message::MigrationId;

    let mut sim = Sim::new(1, Config::default())
        .with_balancer(Balancer::None)
        .with_requests_refused_while_moving();
    let (a, b) = job_on_one_of_two_nodes(&mut sim, 3);
    sim.begin_move(MigrationId(1), a, b, vec![0, 1], true);
    sim.run_for(secs(4));
    sim.begin_move(MigrationId(2), a, b, vec![2], true);
    sim.run_for(secs(30));
    assert_eq!(sim.count_on(b), 2, "ranks 0 and 1 moved, rank 2 did not");
    assert_eq!(sim.migrations().len(), 2);
}

/// The oracle's plan of several moves takes as long as its busiest link: ranks gathered
/// from two nodes onto one both enter through that node's link (0.3 s + 2 x 5.37 s), ranks
/// going between disjoint pairs of nodes cross in parallel (0.3 s + 5.37 s). Until
/// 2026-11-29 (night) every move of a plan crossed at the full bandwidth, so gathering a job from
/// seven nodes onto one cost it one state's time.
#[test]
fn given_a_plan_gathering_ranks_onto_one_node_then_it_takes_their_states_through_its_link() {
    let mut sim = Sim::new(1, Config::default());
    let nodes: Vec<usize> = (0..4).map(|_| sim.add_node(NodeSpec::new(2.0))).collect();
    sim.add_entity(nodes[0], "j", 0, 64 << 20);
    sim.add_entity(nodes[1], "j", 1, 64 << 20);
    let one = (64u64 << 20) as f64 / 12.5e6;
    let gathered = sim.plan_cost(&[(0, nodes[0], nodes[3]), (1, nodes[1], nodes[3])]);
    assert!(
        (gathered.as_secs_f64() - (0.3 + 2.0 * one)).abs() < 1e-6,
        "{gathered:?}"
    );
    let apart = sim.plan_cost(&[(0, nodes[0], nodes[2]), (1, nodes[1], nodes[3])]);
    assert!(
        (apart.as_secs_f64() - (0.3 + one)).abs() < 1e-6,
        "{apart:?}"
    );
    assert_eq!(
        sim.plan_cost(&[(0, nodes[0], nodes[3])]),
        sim.move_cost(&[0])
    );
}

/// As pcm does since 2026-11-30 (it agrees on every request its ranks hold at a status
/// check), two agents' moves requested while a job is moving join the next reconfiguration
/// and stop it once more; with one request per reconfiguration, as before, they stop it one
/// after the other. The moves of one reconfiguration share the nodes' links: two ranks
/// entering one node cross its link one after the other. (Two leaving one node cannot meet
/// in one reconfiguration: that node's daemon answers busy to the second request.)
#[test]
fn given_moves_requested_while_a_job_moves_then_they_stop_it_once_more_together() {
    use super::Balancer;
    use crate::message::MigrationId;

    // Ranks 0 and 1 on node 0, rank 2 on node 1, rank 3 on node 2; nodes 3 to 5 idle.
    let lost = |batched: bool, shared_link: bool| {
        let mut sim = Sim::new(1, Config::default()).with_balancer(Balancer::None);
        if !batched {
            sim = sim.with_one_request_per_reconfiguration();
        }
        let n: Vec<usize> = (0..6).map(|_| sim.add_node(NodeSpec::new(4.0))).collect();
        for (rank, node) in [(0, 0), (1, 0), (2, 1), (3, 2)] {
            sim.add_entity(n[node], "j", rank, 62_500_000);
        }
        sim.run_for(secs(10));
        let before = sim.iterations();
        // 10.3 s from 0 s; 5.3 s each, requested at 4 s and 6 s (rank 2 to node 5 too with
        // `shared_link`).
        sim.begin_move(MigrationId(1), n[0], n[3], vec![0, 1], true);
        sim.run_for(secs(4));
        let to = if shared_link { n[5] } else { n[4] };
        sim.begin_move(MigrationId(2), n[1], to, vec![2], true);
        sim.run_for(secs(2));
        sim.begin_move(MigrationId(3), n[2], n[5], vec![3], true);
        sim.run_for(secs(34));
        40.0 - (sim.iterations() - before) * sim.jobs[0].iteration
    };
    let one_by_one = lost(false, false);
    assert!((one_by_one - 20.9).abs() < 1e-6, "lost {one_by_one} s");
    let batched = lost(true, false);
    assert!((batched - 15.6).abs() < 1e-6, "lost {batched} s");
    // Both states enter node 5: 0.3 s + 2 x 5 s after the first move.
    let shared = lost(true, true);
    assert!((shared - 20.6).abs() < 1e-6, "lost {shared} s");
}

/// The oracle counts ranks under way where they go: a plan that gathers a job onto a fast
/// node takes longer than a period (four states through the node's link, 40.3 s), and the
/// next periods must send another job to the other fast node, not to the one that is
/// filling. Until 2026-11-29 (night) ranks under way counted where they were, so the
/// second job followed the first onto the same four cores.
#[test]
fn given_a_plan_under_way_then_the_oracle_counts_its_ranks_where_they_go() {
    use super::Balancer;

    let mut sim =
        Sim::new(1, Config::default()).with_balancer(Balancer::Oracle { period: secs(10) });
    let fast = sim.add_node(NodeSpec::new(4.0).with_speed(2.0));
    let other_fast = sim.add_node(NodeSpec::new(4.0).with_speed(2.0));
    for job in ["a", "b"] {
        for rank in 0..4 {
            let slow = sim.add_node(NodeSpec::new(1.0).with_speed(0.5));
            sim.add_entity(slow, job, rank, 125_000_000);
        }
    }
    sim.run_for(secs(120));
    assert_eq!(sim.count_on(fast), 4, "the fast node holds one job");
    assert_eq!(
        sim.count_on(other_fast),
        4,
        "the other fast node holds the other"
    );
}
