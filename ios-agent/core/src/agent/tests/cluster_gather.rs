//! NSc2c: a job split over two members of one cluster that are far from each other
//! gathers by its manager's order (`c2c::gather_across`).

use super::*;
use crate::message::HostRtt;
use crate::model::Partner;

/// A node of `cores` cores with `busy` of them taken.
fn node(cores: f64, busy: f64) -> NodeProfile {
    NodeProfile {
        cpu_load: busy,
        ..NodeProfile::idle(cores, 1 << 30)
    }
}

/// Ranks `ranks` of the 8-rank job `heat`, each exchanging with `partner`'s host, which
/// is far: 60 ms of compute and 140 ms of waiting an iteration.
fn part(ranks: std::ops::Range<u32>, partner: &str) -> Vec<EntityProfile> {
    ranks
        .map(|rank| {
            let mut e = entity(rank, 1.0);
            e.job_ranks = 8;
            e.memory = 1 << 20;
            e.compute = Duration::from_millis(60);
            e.mpi_wait = Duration::from_millis(140);
            e.partners = vec![Partner {
                host: host(partner),
                exchanges_per_sec: 5.0,
            }];
            e
        })
        .collect()
}

/// Manager `a` (its one core busy) with members `b` (8 cores, ranks 0-4 of `heat`) and `c`
/// (8 cores, ranks 5-7), both within local latency of `a` and far from each other (each
/// reports only `a` near, and the other at 150 ms), polled for `seconds`: the move orders
/// `a` sends, and how many of its work steals went to `b` or `c`.
fn manager_of_a_split_job(seconds: u32) -> (Vec<(PeerId, Vec<EntityId>, PeerId)>, usize) {
    let t0 = Instant::now();
    let mut a = c2c_agent("a", t0);
    a.handle_node_profile(t0, node(1.0, 1.0));
    meet(&mut a, t0, "b", Duration::from_millis(1));
    meet(&mut a, t0, "c", Duration::from_millis(2));
    let reply = |id, me: &str, other: &str, ranks, busy| Message::ProfileReply {
        id,
        host: host(me),
        node: node(8.0, busy),
        entities: part(ranks, other),
        leaving: false,
        departed: vec![],
        near_hosts: vec![host("a")],
        partner_rtts: vec![HostRtt {
            host: host(other),
            rtt_us: 150_000,
        }],
    };
    let (mut orders, mut steals_to_members) = (Vec::new(), 0);
    let mut t = t0;
    for _ in 0..2 * seconds {
        a.handle_message(t, peer("b"), heartbeat("a"));
        a.handle_message(t, peer("c"), heartbeat("a"));
        a.handle_node_profile(t, node(1.0, 1.0));
        a.handle_timeout(t);
        for action in drain(&mut a) {
            let Action::Send { to, message } = action else {
                continue;
            };
            match message {
                Message::ProfileRequest { id } if to == peer("b") => {
                    a.handle_message(t, peer("b"), reply(id, "b", "c", 0..5, 5.0));
                }
                Message::ProfileRequest { id } if to == peer("c") => {
                    a.handle_message(t, peer("c"), reply(id, "c", "b", 5..8, 3.0));
                }
                Message::MoveOrder {
                    entities, to: dest, ..
                } => orders.push((to, entities, dest)),
                Message::WorkSteal { .. } if to == peer("b") || to == peer("c") => {
                    steals_to_members += 1;
                }
                _ => {}
            }
        }
        t += Duration::from_millis(500);
    }
    (orders, steals_to_members)
}

/// Traced at 100 nodes, Internet-like, seed 1: such a job sat on its two far members for
/// the hour at 176 ms of latency an iteration, the manager sending both a partner steal
/// every few seconds. Now the smaller part (`c`'s 3 ranks) goes, all in one move, to the
/// larger (`b`, which has a core for each), and the manager steals from neither.
#[test]
fn given_a_job_split_over_two_far_members_then_the_manager_gathers_it_on_the_larger_part() {
    let (orders, steals_to_members) = manager_of_a_split_job(20);
    let moved: Vec<u32> = (5..8).collect();
    assert_eq!(
        orders
            .iter()
            .map(|(from, entities, to)| {
                let ranks: Vec<u32> = entities.iter().map(|e| e.rank.0).collect();
                (from.clone(), ranks, to.clone())
            })
            .collect::<Vec<_>>(),
        vec![(peer("c"), moved, peer("b"))],
        "one order, c's ranks to b"
    );
    assert_eq!(steals_to_members, 0);
}
