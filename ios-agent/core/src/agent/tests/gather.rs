//! Steps of gathering within the hold-down (issue 42, "Converge faster"): taken by
//! default, and bounded so that no entity moves more than twice within a hold-down.

use super::*;
use crate::model::{JobOffer, Partner};

/// Rank 1 of the 4-rank job `heat`, alone on its node's only core, waiting on its
/// partner on host `c` most of an iteration, here for `resident`.
fn spread_rank(resident: Duration) -> EntityProfile {
    let mut e = entity(1, 1.0);
    e.job_ranks = 4;
    e.memory = 1 << 20;
    e.compute = Duration::from_millis(60);
    e.mpi_wait = Duration::from_millis(140);
    e.partners = vec![Partner {
        host: host("c"),
        exchanges_per_sec: 5.0,
    }];
    e.resident = resident;
    e
}

/// A steal from `f`, an idle node of 4 cores twice as fast, that runs two ranks of
/// `heat` and has a core for each of the two others.
fn steal_from_larger_part(id: u64) -> Message {
    let mut steal = steal_from(
        "f",
        id,
        NodeProfile {
            speed: 2.0,
            ..NodeProfile::idle(4.0, 1 << 30)
        },
    );
    if let Message::WorkSteal { job_offers, .. } = &mut steal {
        *job_offers = vec![JobOffer {
            job: JobId::new("heat").expect("valid"),
            cores: 2.0,
            ranks: 2,
            place_ranks: 0,
            place_room: 0.0,
        }];
    }
    steal
}

/// `l`'s node, its one core taken by the rank.
fn full_core() -> NodeProfile {
    NodeProfile {
        cpu_load: 1.0,
        ..NodeProfile::idle(1.0, 1 << 30)
    }
}

/// Whether `l` gives its rank (`spread_rank(resident)`) to `f` at `now`.
fn gives(l: &mut Agent, now: Instant, resident: Duration, id: u64) -> bool {
    meet(l, now, "f", Duration::from_millis(50));
    meet(l, now, "c", Duration::from_millis(5));
    l.handle_node_profile(now, full_core());
    l.handle_entities(now, vec![spread_rank(resident)]);
    drain(l);
    l.handle_message(now, peer("f"), steal_from_larger_part(id));
    !migrations(&drain(l)).is_empty()
}

/// By default a rank that arrived 5 s ago takes a step of gathering to a node that
/// holds more of its job (two ranks against its one) and has a core for each of the
/// others; with `with_gather_within_hold_down(false)` (the default until 2026-12-04) it
/// waits out its hold-down first, and after it goes.
#[test]
fn given_a_rank_that_arrived_lately_then_it_gathers_with_the_larger_part_of_its_job() {
    let t0 = Instant::now();
    let lately = Duration::from_secs(5);
    assert!(gives(&mut agent("l", t0), t0, lately, 1));
    let held = Config::default()
        .with_seed(1)
        .with_gather_within_hold_down(false);
    let mut l = Agent::new(peer("l"), host("l"), held.clone(), t0).expect("valid config");
    assert!(!gives(&mut l, t0, lately, 1));
    let mut l = Agent::new(peer("l"), host("l"), held, t0).expect("valid config");
    assert!(gives(&mut l, t0, DEFAULT_HOLD_DOWN, 1));
}

/// The bound: `l` steals the rank from `g`, which moves it within its hold-down
/// (`within_hold_down`). Once it has arrived, `l` holds it a whole hold-down from its
/// arrival: no second step of gathering within it (that would be its third move within a
/// hold-down), and a move again once the hold-down is over. A rank that came to `l` by a
/// move after its hold-down may take the step at once.
#[test]
fn given_a_rank_that_came_by_a_step_within_its_hold_down_then_its_next_move_waits_a_hold_down() {
    let t0 = Instant::now();
    for within_hold_down in [true, false] {
        let mut l = agent("l", t0);
        meet(&mut l, t0, "g", Duration::from_millis(1));
        l.handle_node_profile(t0, NodeProfile::idle(1.0, 1 << 30));
        l.handle_timeout(t0 + Duration::from_secs(3));
        let id = drain(&mut l)
            .into_iter()
            .find_map(|a| match a {
                Action::Send {
                    message: Message::WorkSteal { id, .. },
                    ..
                } => Some(id),
                _ => None,
            })
            .expect("an idle agent steals");
        let t1 = t0 + Duration::from_secs(4);
        l.handle_message(
            t1,
            peer("g"),
            Message::StealAccepted {
                id,
                migration: MigrationId(7),
                entities: vec![spread_rank(Duration::ZERO).id],
                from_host: Some(host("g")),
                within_hold_down,
            },
        );
        let arrived = t1 + Duration::from_secs(2);
        l.handle_message(
            arrived,
            peer("g"),
            Message::MigrationFinished {
                migration: MigrationId(7),
                completed: true,
            },
        );
        let lately = Duration::from_secs(5);
        assert_eq!(
            l.held_until(&spread_rank(lately).id),
            within_hold_down.then(|| arrived + DEFAULT_HOLD_DOWN)
        );
        assert_eq!(
            gives(&mut l, arrived + lately, lately, 2),
            !within_hold_down,
            "within_hold_down {within_hold_down}"
        );
        if within_hold_down {
            let after = arrived + DEFAULT_HOLD_DOWN;
            l.handle_timeout(after);
            assert!(gives(&mut l, after, DEFAULT_HOLD_DOWN, 3));
        }
    }
}
