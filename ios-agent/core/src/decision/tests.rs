//! Unit tests of `decision`: the plans and balances the agents compute from profiles.

use super::*;
use pcm_proto::{JobId, Rank};

fn entity(job: &str, rank: u32, cpu: f64) -> EntityProfile {
    let mut e = EntityProfile::new(
        EntityId {
            job: JobId::new(job).expect("valid"),
            rank: Rank(rank),
        },
        cpu,
    );
    e.resident = Duration::from_secs(3600);
    e.age = Duration::from_secs(3600);
    e
}

/// Rank `rank` of a `job_ranks`-rank job with 1 MiB of state, `compute_ms` of compute an
/// iteration and `wait_ms` in MPI.
fn job_rank(job: &str, rank: u32, job_ranks: u32, compute_ms: u64, wait_ms: u64) -> EntityProfile {
    let mut e = entity(job, rank, 1.0);
    e.job_ranks = job_ranks;
    e.memory = 1 << 20;
    e.compute = Duration::from_millis(compute_ms);
    e.mpi_wait = Duration::from_millis(wait_ms);
    e
}

fn node(cores: f64, load: f64) -> NodeProfile {
    NodeProfile {
        cpu_load: load,
        ..NodeProfile::idle(cores, 1 << 30)
    }
}

struct Fixture {
    weights: Weights,
    cost: MigrationCostModel,
    held: HashMap<EntityId, Instant>,
    now: Instant,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            weights: Weights::CPU_ONLY,
            cost: MigrationCostModel::default(),
            held: HashMap::new(),
            now: Instant::now(),
        }
    }
    fn policy(&self, max_group: usize) -> Policy<'_> {
        Policy {
            weights: &self.weights,
            cost: &self.cost,
            min_gain: 0.1,
            max_group,
            hold_down: Duration::from_secs(60),
            held: &self.held,
            now: self.now,
            leaving: false,
            entity_cores: None,
            max_move_time: Duration::from_secs(600),
            jobs_here: &[],
            gather_in_one_move: false,
            keep_near_partners: false,
            gather_within_hold_down: false,
        }
    }
}

/// A node's offer to `job`: `cores` idle cores, `ranks` of its ranks; no cluster.
fn node_offer(job: &JobId, cores: f64, ranks: u32) -> JobOffer {
    JobOffer {
        job: job.clone(),
        cores,
        ranks,
        place_ranks: 0,
        place_room: 0.0,
    }
}

fn host(s: &str) -> pcm_proto::HostName {
    pcm_proto::HostName::new(s).expect("valid")
}

/// A node's view with the given measured RTTs, others assumed at 200 ms.
fn view<'a>(
    host: &'a pcm_proto::HostName,
    rtts: &'a HashMap<pcm_proto::HostName, f64>,
) -> crate::model::RttView<'a> {
    crate::model::RttView {
        host,
        rtts,
        unknown: 0.2,
        unmeasured: crate::model::Unmeasured::Assumed,
    }
}

/// The communication term: with the CPU equal on both sides, a rank goes to the node of
/// its partner and not away from it; and a CPU gain is refused when it takes the rank far
/// from its partners.
#[test]
fn given_partners_then_the_rank_goes_to_them_and_not_away() {
    use crate::model::Partner;
    let fx = Fixture::new();
    let mut policy = fx.policy(1);
    policy.entity_cores = Some(1.0);
    let (a, b, c) = (host("a"), host("b"), host("c"));
    let none = HashMap::new();
    let (at_a, at_b, at_c) = (view(&a, &none), view(&b, &none), view(&c, &none));
    // Rank 0 on a (2 cores, its own core), its partner on b; b has an idle core.
    let mut e = entity("j", 0, 1.0);
    e.partners = vec![Partner {
        host: b.clone(),
        exchanges_per_sec: 20.0,
    }];
    let es = [e];
    let here = node(2.0, 1.0);
    let there = node(2.0, 1.0);
    // The paper's model: no CPU gain, no move.
    assert!(select(&policy, &here, &es, &there, 1).is_none());
    // s_a = 20 * 0.2 / 2 = 2, counted as 1 (all its time), s_b = 0: comm = 1 / 1.
    let plan =
        select_near(&policy, &here, &es, &there, 1, Some((&at_a, &at_b))).expect("to the partner");
    assert!((plan.gain.communication - 1.0).abs() < 1e-12);
    // Not from b to c, away from it (s_c = 2: comm = -2 / 4), even to a node with two
    // free cores more, which the paper's model takes (Delta = (3 - 1) / (3 + 1)).
    let bigger = node(4.0, 1.0);
    assert!(select(&fx.policy(1), &there, &es, &bigger, 1).is_some());
    assert!(select_near(&fx.policy(1), &there, &es, &bigger, 1, Some((&at_b, &at_c))).is_none());
    // To a node with less than 90% of its share: no move, however near.
    let small = node(0.8, 0.0);
    assert!(select_near(&policy, &here, &es, &small, 1, Some((&at_a, &at_b))).is_none());
}

/// A rank of a malleable job on a node whose owner came back (half a core each) goes to
/// an idle thief 5 ms away for the CPU. Its partner on the job's first node, 3 ms from
/// here, the thief never measured: the communication term charges it this node's 5 ms
/// to the thief (the triangle estimate), so the move passes (CPU `Delta` (1 - 0.5) /
/// 1.5 = 0.333; s_l = 10 x 0.003 / 2 = 0.015, s_f = 10 x 0.005 / 2 x 2 = 0.05, comm =
/// -0.035 / 2.035 = -0.0172). With `keep_near_partners` the thief's own RTTs decide:
/// unmeasured (200 ms assumed) or measured far, it does not go; measured within the
/// local tier, it does. On a leaving node it holds the ranks when the job may lose them by
/// a shrink (2 of its 4 ranks here, limits 1 to 8) and not otherwise (limits 3 to 8, or
/// the ranks here unknown), so that the node drains. It holds neither a fixed job's
/// ranks nor a rank whose partner is already farther from here than from the thief.
#[test]
fn given_a_thief_that_never_measured_the_partners_then_a_malleable_rank_does_not_go_to_it() {
    use crate::model::Partner;
    let fx = Fixture::new();
    let mut policy = fx.policy(1);
    policy.entity_cores = Some(1.0);
    let (l, f, h) = (host("l"), host("f"), host("h"));
    let rank = |r: u32, malleable: bool| {
        let mut e = entity("j", r, 0.5);
        e.job_ranks = 4;
        e.home = Some(h.clone());
        e.malleable = malleable.then(|| pcm_proto::Malleability::new(1, 8).expect("valid"));
        e.partners = vec![
            Partner {
                host: h.clone(),
                exchanges_per_sec: 10.0,
            },
            Partner {
                host: l.clone(),
                exchanges_per_sec: 10.0,
            },
        ];
        e
    };
    let es = [rank(2, true), rank(3, true)];
    let here = NodeProfile {
        cpu_load: 2.0,
        competing: 1.0,
        ..NodeProfile::idle(2.0, 1 << 30)
    };
    let thief = node(2.0, 0.0);
    let at_l_rtts: HashMap<_, _> = [(h.clone(), 0.003), (f.clone(), 0.005)].into();
    let at_l = view(&l, &at_l_rtts);
    let thief_with = |rtt_to_h: Option<f64>| -> HashMap<pcm_proto::HostName, f64> {
        let mut m: HashMap<_, _> = [(l.clone(), 0.005)].into();
        if let Some(rtt) = rtt_to_h {
            m.insert(h.clone(), rtt);
        }
        m
    };
    let moved = |policy: &Policy<'_>, es: &[EntityProfile], at_f: &HashMap<_, _>| {
        let at_f = view(&f, at_f);
        select_near(policy, &here, es, &thief, 1, Some((&at_l, &at_f)))
    };
    let unmeasured = thief_with(None);
    let plan = moved(&policy, &es, &unmeasured).expect("the triangle estimate lets it go");
    assert!((plan.gain.communication - (-0.035 / 2.035)).abs() < 1e-9);
    let mut near = policy;
    near.keep_near_partners = true;
    assert!(moved(&near, &es, &unmeasured).is_none());
    assert!(moved(&near, &es, &thief_with(Some(0.3))).is_none());
    assert!(moved(&near, &es, &thief_with(Some(0.004))).is_some());
    let leaving = Policy {
        leaving: true,
        ..near
    };
    assert!(
        moved(&leaving, &es, &unmeasured).is_some(),
        "the ranks here unknown: no shrink is sure"
    );
    let two_here = [node_offer(&JobId::new("j").expect("valid"), 0.0, 2)];
    let leaving_known = Policy {
        jobs_here: &two_here,
        ..leaving
    };
    assert!(moved(&leaving_known, &es, &unmeasured).is_none());
    assert!(moved(&leaving_known, &es, &thief_with(Some(0.004))).is_some());
    let at_least_three = es.clone().map(|mut e| {
        e.malleable = Some(pcm_proto::Malleability::new(3, 8).expect("valid"));
        e
    });
    assert!(moved(&leaving_known, &at_least_three, &unmeasured).is_some());
    let fixed = [rank(2, false), rank(3, false)];
    assert!(moved(&near, &fixed, &unmeasured).is_some());
    let far_rtts: HashMap<_, _> = [(h.clone(), 0.3), (f.clone(), 0.005)].into();
    let at_l_far = view(&l, &far_rtts);
    let at_f = view(&f, &unmeasured);
    assert!(select_near(&near, &here, &es, &thief, 1, Some((&at_l_far, &at_f))).is_some());
}

/// A rank goes to a slower node that runs ranks of its job and gives it a core: the job
/// already waits for those ranks, so only the latency counts. To the same node without
/// ranks of the job it does not go (it would compute slower than the job does now).
#[test]
fn given_a_node_that_runs_the_job_then_a_rank_joins_its_partner_there_though_it_is_slower() {
    use crate::model::Partner;
    let fx = Fixture::new();
    let mut policy = fx.policy(1);
    policy.entity_cores = Some(1.0);
    let (a, b) = (host("a"), host("b"));
    let none = HashMap::new();
    let (at_a, at_b) = (view(&a, &none), view(&b, &none));
    let mut e = entity("j", 0, 1.0);
    e.partners = vec![Partner {
        host: b.clone(),
        exchanges_per_sec: 20.0,
    }];
    let es = [e];
    // a: one core of speed 2, the rank's own; b: speed 1.4, one core busy, one idle.
    let here = NodeProfile {
        speed: 2.0,
        ..node(1.0, 1.0)
    };
    let there = NodeProfile {
        speed: 1.4,
        ..node(2.0, 1.0)
    };
    let rtts = Some((&at_a, &at_b));
    // b offers 1.4 against the 2 the rank has: under 90% of it.
    assert!(select_near(&policy, &here, &es, &there, 1, rtts).is_none());
    let runs_j = [JobOffer {
        job: JobId::new("j").expect("valid"),
        cores: 1.0,
        ranks: 1,
        place_ranks: 0,
        place_room: 0.0,
    }];
    let to = Destination {
        node: &there,
        job_offers: &runs_j,
    };
    let plan = select_near(&policy, &here, &es, to, 1, rtts).expect("joins the job");
    // The CPU it loses is not counted; the communication term (1: all its time is
    // latency to b) is.
    assert_eq!(plan.gain.deltas[0], 0.0);
    assert!((plan.gain.communication - 1.0).abs() < 1e-12);
    // Without its own core there the rule does not hold.
    let full = [JobOffer {
        cores: 0.5,
        ..runs_j[0].clone()
    }];
    let to = Destination {
        node: &there,
        job_offers: &full,
    };
    assert!(select_near(&policy, &here, &es, to, 1, rtts).is_none());
}

/// Gathering a job: a rank whose own latency would grow goes to the node that runs part
/// of its job and has cores for the rest, when the job gathered there iterates faster
/// than now; not when the node lacks a core for one of the ranks, when the giver holds
/// more of the job and could gather it, when the gathered job would not be faster, or
/// to an idle node that runs none of the job.
#[test]
fn given_a_node_with_part_of_a_job_and_room_for_the_rest_then_ranks_gather_there() {
    use crate::model::Partner;
    let fx = Fixture::new();
    let j = JobId::new("j").expect("valid");
    let offer = |cores: f64, ranks: u32| node_offer(&j, cores, ranks);
    let (l, f, c) = (host("l"), host("f"), host("c"));
    // l measured its rank's partner on c at 5 ms; f measured nothing: the model charges
    // the rank more latency at f (communication term < 0).
    let measured: HashMap<pcm_proto::HostName, f64> = [(c.clone(), 0.005)].into();
    let none = HashMap::new();
    let (at_l, at_f) = (view(&l, &measured), view(&f, &none));
    let rtts = Some((&at_l, &at_f));
    // A rank of a 4-rank job on l's only core: 60 ms of compute and 140 ms in MPI (its
    // job waits on latency elsewhere).
    let rank = |compute_ms: u64, wait_ms: u64| {
        let mut e = job_rank("j", 0, 4, compute_ms, wait_ms);
        e.partners = vec![Partner {
            host: c.clone(),
            exchanges_per_sec: 5.0,
        }];
        e
    };
    let es = [rank(60, 140)];
    let here_node = node(1.0, 1.0);
    let here = [offer(0.0, 1)];
    let mut policy = fx.policy(1);
    policy.entity_cores = Some(1.0);
    policy.jobs_here = &here;
    // f: 4 cores, 2 busy with ranks of the job, 2 idle (one for this rank, one for the
    // fourth).
    let f_node = node(4.0, 2.0);
    let room = [offer(2.0, 2)];
    let to = |offers| Destination {
        node: &f_node,
        job_offers: offers,
    };
    assert!(communication(&es[0], &at_l, &at_f) < 0.0);
    let plan = select_near(&policy, &here_node, &es, to(&room), 1, rtts).expect("gathers");
    // (200 - 60) / (200 + 60): the job's iteration now against gathered on f.
    assert!((plan.gain.deltas[0] - 140.0 / 260.0).abs() < 1e-9);
    assert_eq!(plan.gain.communication, 0.0);
    // Without the gathering, the same move is refused.
    let mut size_unknown = es.clone();
    size_unknown[0].job_ranks = 0;
    assert!(select_near(&policy, &here_node, &size_unknown, to(&room), 1, rtts).is_none());
    // f lacks a core for the fourth rank.
    let tight = [offer(1.0, 2)];
    assert!(select_near(&policy, &here_node, &es, to(&tight), 1, rtts).is_none());
    // l holds 3 of the ranks and has a core for the fourth: the job gathers on l.
    let could = [offer(1.0, 3)];
    let giver = Policy {
        jobs_here: &could,
        ..policy
    };
    assert!(select_near(&giver, &here_node, &es, to(&room), 1, rtts).is_none());
    // Gathered, the job would iterate in 60 ms against 65 now: not 10% faster.
    let busy = [rank(60, 5)];
    assert!(select_near(&policy, &here_node, &busy, to(&room), 1, rtts).is_none());
    // An idle node that runs none of the job does not pull a rank of it other than rank
    // 0 (seeding: `given_a_spread_job_that_no_holder_can_gather_then_its_rank_0_seeds_an_idle_node`).
    let idle = node(4.0, 0.0);
    let mut rank_2 = es.clone();
    rank_2[0].id.rank = Rank(2);
    assert!(select_near(&policy, &here_node, &rank_2, &idle, 1, rtts).is_none());
    assert!(select_near(&policy, &here_node, &es, &idle, 1, rtts).is_some());
    // NSc2c: a member that runs none of the job, in a cluster that runs 2 of its ranks
    // and has 2 idle cores, one of them the member's: the job gathers in that cluster.
    let in_cluster = |member_cores: f64| {
        [JobOffer {
            place_ranks: 2,
            place_room: 2.0,
            ..offer(member_cores, 0)
        }]
    };
    let member = node(1.0, 0.0);
    let gathers_in_cluster = |member_cores: f64| {
        let cluster = in_cluster(member_cores);
        let to = Destination {
            node: &member,
            job_offers: &cluster,
        };
        select_near(&policy, &here_node, &es, to, 1, rtts).is_some()
    };
    assert!(gathers_in_cluster(1.0));
    // Not to a member without a core for it.
    assert!(!gathers_in_cluster(0.0));
    // But to a full member that runs ranks of the job, its cluster's idle cores on other
    // members: the manager spreads them there.
    let holder = [JobOffer {
        place_ranks: 2,
        place_room: 2.0,
        ..offer(0.0, 2)
    }];
    let full = node(2.0, 2.0);
    let to_holder = Destination {
        node: &full,
        job_offers: &holder,
    };
    assert!(select_near(&policy, &here_node, &es, to_holder, 1, rtts).is_some());
    // Not when the cluster lacks a core for the job's last rank.
    let short = [JobOffer {
        place_room: 1.0,
        ..holder[0].clone()
    }];
    let to_short = Destination {
        node: &full,
        job_offers: &short,
    };
    assert!(select_near(&policy, &here_node, &es, to_short, 1, rtts).is_none());
    // NSp2p, the same full node with 2 ranks and no cluster: no core, no move.
    let alone = [offer(0.0, 2)];
    let to_alone = Destination {
        node: &full,
        job_offers: &alone,
    };
    assert!(select_near(&policy, &here_node, &es, to_alone, 1, rtts).is_none());
}

/// With `gather_within_hold_down`, a rank that arrived within its hold-down (here 5 s ago)
/// still takes a step of gathering
/// to a place that holds more of its job than its own (issue 42: the hold-down made spread
/// jobs gather one step a minute); not to a place that holds as many or fewer, not before
/// it has settled ([`GATHER_SETTLE`]), nor while an order holds it (a move that is no step
/// of gathering waits the hold-down: `held_and_recently_arrived_entities_do_not_move`).
#[test]
fn given_a_rank_that_arrived_lately_then_it_still_gathers_with_the_larger_part_of_its_job() {
    use crate::model::Partner;
    let mut fx = Fixture::new();
    let j = JobId::new("j").expect("valid");
    let offer = |cores: f64, ranks: u32| node_offer(&j, cores, ranks);
    let (l, f, c) = (host("l"), host("f"), host("c"));
    let measured: HashMap<pcm_proto::HostName, f64> = [(c.clone(), 0.005)].into();
    let none = HashMap::new();
    let (at_l, at_f) = (view(&l, &measured), view(&f, &none));
    let rtts = Some((&at_l, &at_f));
    // Rank 1 of a 4-rank job, alone on l's only core, waiting on the network.
    let mut rank = job_rank("j", 1, 4, 60, 140);
    rank.partners = vec![Partner {
        host: c.clone(),
        exchanges_per_sec: 5.0,
    }];
    rank.resident = Duration::from_secs(5);
    let es = [rank];
    let here_node = node(1.0, 1.0);
    let here = [offer(0.0, 1)];
    let f_node = node(4.0, 2.0);
    let larger = [offer(2.0, 2)];
    let to = |offers| Destination {
        node: &f_node,
        job_offers: offers,
    };
    let gathers = |fx: &Fixture, jobs_here: &[JobOffer], es: &[EntityProfile], offers| {
        let mut policy = fx.policy(1);
        policy.entity_cores = Some(1.0);
        policy.jobs_here = jobs_here;
        policy.gather_within_hold_down = true;
        select_near(&policy, &here_node, es, to(offers), 1, rtts).is_some()
    };
    assert!(gathers(&fx, &here, &es, &larger));
    // Off (`Config::with_gather_within_hold_down(false)`): the hold-down holds it.
    let mut off = fx.policy(1);
    off.entity_cores = Some(1.0);
    off.jobs_here = &here;
    assert!(select_near(&off, &here_node, &es, to(&larger), 1, rtts).is_none());
    // f holds as many of the job as l, which has no room for the rest: a step of
    // gathering once the hold-down is over, not within it.
    let two_here = [offer(0.0, 2)];
    assert!(!gathers(&fx, &two_here, &es, &larger));
    let mut old = es.clone();
    old[0].resident = Duration::from_secs(3600);
    assert!(gathers(&fx, &two_here, &old, &larger));
    // Not settled yet.
    let mut just = es.clone();
    just[0].resident = GATHER_SETTLE / 2;
    assert!(!gathers(&fx, &here, &just, &larger));
    // Unknown job offers here: no exemption.
    assert!(!gathers(&fx, &[], &es, &larger));
    // An order holds it.
    fx.held
        .insert(es[0].id.clone(), fx.now + Duration::from_secs(1));
    assert!(!gathers(&fx, &here, &es, &larger));
}

/// Relocation: a job held whole by a slow node moves, a rank at a time, to a node that
/// runs none of it, has a core for each of its ranks and gives a rank 25% more CPU; not
/// to one only 20% faster, nor to one a core short, nor when the job waits on latency
/// or is not mostly in the giver's place. Once it is split, the faster place gathers it
/// though it holds fewer ranks, and the slower place does not pull a rank back.
#[test]
fn given_a_whole_job_in_a_slow_place_then_it_moves_to_a_much_faster_node_and_not_back() {
    use crate::model::Partner;
    let fx = Fixture::new();
    let j = JobId::new("j").expect("valid");
    let offer = |cores: f64, ranks: u32| node_offer(&j, cores, ranks);
    let (l, f) = (host("l"), host("f"));
    let none = HashMap::new();
    let (at_l, at_f) = (view(&l, &none), view(&f, &none));
    // A rank of a 4-rank job, its partners on its own node: 100 ms of compute a
    // iteration, `wait_ms` in MPI.
    let rank = |wait_ms: u64| {
        let mut e = job_rank("j", 0, 4, 100, wait_ms);
        e.partners = vec![Partner {
            host: l.clone(),
            exchanges_per_sec: 20.0,
        }];
        e
    };
    let es = [rank(5)];
    // l: 4 cores of speed 1, all four ranks of the job.
    let slow = node(4.0, 4.0);
    let whole = [offer(0.0, 4)];
    let mut policy = fx.policy(1);
    policy.entity_cores = Some(1.0);
    policy.jobs_here = &whole;
    let rtts = Some((&at_l, &at_f));
    let idle = |cores: f64, speed: f64| NodeProfile {
        speed,
        ..node(cores, 0.0)
    };
    // Without relocation the move is refused: the rank would leave its partners.
    assert!(communication(&es[0], &at_l, &at_f) < 0.0);
    let fast = idle(4.0, 1.3);
    let plan = select_near(&policy, &slow, &es, &fast, 1, rtts).expect("relocates");
    assert!((plan.gain.deltas[0] - 0.3 / 2.3).abs() < 1e-9);
    assert!(select_near(&policy, &slow, &es, &idle(4.0, 1.2), 1, rtts).is_none());
    assert!(select_near(&policy, &slow, &es, &idle(3.0, 1.3), 1, rtts).is_none());
    let waiting = [rank(50)];
    assert!(select_near(&policy, &slow, &waiting, &fast, 1, rtts).is_none());
    // The job's size or the rank's compute not known (older agents): no relocation.
    let mut unsized_rank = rank(5);
    unsized_rank.job_ranks = 0;
    assert!(select_near(&policy, &slow, &[unsized_rank], &fast, 1, rtts).is_none());
    let mut unprofiled = rank(0);
    unprofiled.compute = Duration::ZERO;
    assert!(select_near(&policy, &slow, &[unprofiled], &fast, 1, rtts).is_none());
    // Half of the job in the giver's place: no relocation (most of it: see
    // `given_most_of_a_job_in_a_loaded_place_then_its_ranks_leave_only_together`).
    let half = [offer(0.0, 2)];
    let partly = Policy {
        jobs_here: &half,
        ..policy
    };
    assert!(select_near(&partly, &slow, &es, &fast, 1, rtts).is_none());
    // Split: f runs one rank and has 3 idle cores; l runs 3 and has the core of the one
    // that left. f gathers the job though it holds fewer of its ranks.
    let slow_with_room = node(4.0, 3.0);
    let l_holds = [offer(1.0, 3)];
    let f_holds = [offer(3.0, 1)];
    let giver = Policy {
        jobs_here: &l_holds,
        ..policy
    };
    let split = [rank(60)];
    let f_node = NodeProfile {
        speed: 1.3,
        ..node(4.0, 1.0)
    };
    let to_f = Destination {
        node: &f_node,
        job_offers: &f_holds,
    };
    assert!(select_near(&giver, &slow_with_room, &split, to_f, 1, rtts).is_some());
    // And f's rank does not go back to l, which holds more of the job; a thief as fast
    // as f with those ranks would take it.
    let back = Policy {
        jobs_here: &f_holds,
        ..policy
    };
    let from_f = Some((&at_f, &at_l));
    let to_l = Destination {
        node: &slow_with_room,
        job_offers: &l_holds,
    };
    let on_f = [rank(60)];
    assert!(select_near(&back, &f_node, &on_f, to_l, 1, from_f).is_none());
    let as_fast = NodeProfile {
        speed: 1.3,
        ..slow_with_room
    };
    let to_as_fast = Destination {
        node: &as_fast,
        job_offers: &l_holds,
    };
    assert!(select_near(&back, &f_node, &on_f, to_as_fast, 1, from_f).is_some());
}

/// A step of gathering, where the policy allows it (NSp2p's givers), moves all the ranks
/// of the job the giver has, in one move, though the group limit is one: not ranks of
/// another job, not more than the gathering node itself has idle cores for (its cluster's
/// room does not count), and none when the job would not gather there. Without the
/// policy, or for an ordinary move, the limit holds.
#[test]
fn given_gathering_in_one_move_then_the_givers_ranks_of_the_job_go_together() {
    let fx = Fixture::new();
    let (j, k) = (
        JobId::new("j").expect("valid"),
        JobId::new("k").expect("valid"),
    );
    let (l, f) = (host("l"), host("f"));
    let none = HashMap::new();
    let (at_l, at_f) = (view(&l, &none), view(&f, &none));
    let rtts = Some((&at_l, &at_f));
    // Ranks of 8-rank jobs: 100 ms of compute an iteration, 150 ms in MPI (split).
    let rank = |job: &str, r: u32| job_rank(job, r, 8, 100, 150);
    // l: 3 ranks of j and one of k on 4 cores; f holds the other 5 of j.
    let es = [rank("j", 5), rank("j", 6), rank("j", 7), rank("k", 0)];
    let here_node = node(4.0, 4.0);
    let here = [node_offer(&j, 0.0, 3), node_offer(&k, 0.0, 1)];
    let mut policy = fx.policy(1);
    policy.entity_cores = Some(1.0);
    policy.jobs_here = &here;
    policy.gather_in_one_move = true;
    let f_node = node(8.0, 5.0);
    let moved = |policy: &Policy<'_>, offer: JobOffer| {
        let offers = [offer];
        let to = Destination {
            node: &f_node,
            job_offers: &offers,
        };
        select_near(policy, &here_node, &es, to, 1, rtts).map(|p| {
            let mut moved = p.entities;
            moved.sort();
            moved
        })
    };
    let ids: Vec<EntityId> = es[..3].iter().map(|e| e.id.clone()).collect();
    // f has an idle core for each: the three go at once, and k's rank stays.
    assert_eq!(moved(&policy, node_offer(&j, 3.0, 5)).as_ref(), Some(&ids));
    // Two idle cores on f, though its cluster has three: two go.
    let mut in_cluster = node_offer(&j, 2.0, 5);
    in_cluster.place_ranks = 5;
    in_cluster.place_room = 3.0;
    assert_eq!(
        moved(&policy, in_cluster.clone()).as_ref(),
        Some(&ids[..2].to_vec())
    );
    // Without the policy, one rank a move.
    let one_by_one = Policy {
        gather_in_one_move: false,
        ..policy
    };
    assert_eq!(moved(&one_by_one, in_cluster).map(|m| m.len()), Some(1));
    // A core short of the whole job: not a step of gathering, so one rank at most.
    assert!(moved(&policy, node_offer(&j, 2.0, 5)).is_none_or(|m| m.len() == 1));
    // An ordinary move (to an idle node, for CPU) keeps the limit of one.
    let sharing = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
    let idle = node(8.0, 0.0);
    let mut ordinary = fx.policy(1);
    ordinary.gather_in_one_move = true;
    let plan = select_near(&ordinary, &node(1.0, 2.0), &sharing, &idle, 8, rtts).expect("moves");
    assert_eq!(plan.entities.len(), 1);
}

/// A job spread so that no place holding part of it can gather it, and that waits on the
/// network, is seeded on a node with a core for each of its ranks: its rank 0 goes
/// there (and no other rank), if a core there is at least as fast as the rank's share
/// here and the job gathered there would iterate 25% faster.
#[test]
fn given_a_spread_job_that_no_holder_can_gather_then_its_rank_0_seeds_an_idle_node() {
    let fx = Fixture::new();
    let j = JobId::new("j").expect("valid");
    let (l, f) = (host("l"), host("f"));
    let none = HashMap::new();
    let (at_l, at_f) = (view(&l, &none), view(&f, &none));
    let rtts = Some((&at_l, &at_f));
    // Ranks of an 8-rank job: 100 ms of compute an iteration, `wait_ms` in MPI.
    let rank = |r: u32, wait_ms: u64| job_rank("j", r, 8, 100, wait_ms);
    // l: 2 busy cores of speed 1, ranks 0 and 3 of the job, no room for the other 6.
    let here_node = node(2.0, 2.0);
    let spread = [node_offer(&j, 0.0, 2)];
    let mut policy = fx.policy(1);
    policy.entity_cores = Some(1.0);
    policy.jobs_here = &spread;
    let idle = |cores: f64, speed: f64| NodeProfile {
        speed,
        ..node(cores, 0.0)
    };
    let seeded = |policy: &Policy<'_>, es: &[EntityProfile], to: &NodeProfile| {
        select_near(policy, &here_node, es, to, 1, rtts).map(|p| p.entities)
    };
    let waiting = [rank(0, 80), rank(3, 80)];
    // The job's iteration: 180 ms now, 100 ms gathered on f.
    assert_eq!(
        seeded(&policy, &waiting, &idle(8.0, 1.0)),
        Some(vec![waiting[0].id.clone()])
    );
    // Not another rank.
    assert_eq!(seeded(&policy, &waiting[1..], &idle(8.0, 1.0)), None);
    // Not to a node a core short of the job, or with slower cores.
    assert_eq!(seeded(&policy, &waiting, &idle(7.0, 1.0)), None);
    assert_eq!(seeded(&policy, &waiting, &idle(8.0, 0.9)), None);
    // Not for a job that waits little (20 ms in MPI against 100 of compute).
    assert_eq!(seeded(&policy, &[rank(0, 20)], &idle(8.0, 1.0)), None);
    // Not when the giver's place could gather the job, or holds most of it.
    for offer in [node_offer(&j, 6.0, 2), node_offer(&j, 0.0, 5)] {
        let offers = [offer];
        let other = Policy {
            jobs_here: &offers,
            ..policy
        };
        assert_eq!(seeded(&other, &waiting, &idle(8.0, 1.0)), None);
    }
    // Nor without the job's size, or without the communication term.
    let mut unsized_rank = rank(0, 80);
    unsized_rank.job_ranks = 0;
    assert_eq!(seeded(&policy, &[unsized_rank], &idle(8.0, 1.0)), None);
    let far = select_near(&policy, &here_node, &waiting, &idle(8.0, 1.0), 1, None);
    assert!(far.is_none());
}

/// A job that the giver's place holds most of stays there together: its ranks do not go
/// one by one to a node that merely offers more CPU, however loaded the giver; they go
/// to a node that would take the whole job and is much faster (relocation, now also
/// from a place that holds only most of the job), or anywhere when the giver is leaving.
/// A job the place holds half of or less is not held, and without the communication
/// term nothing is.
#[test]
fn given_most_of_a_job_in_a_loaded_place_then_its_ranks_leave_only_together() {
    let fx = Fixture::new();
    let j = JobId::new("j").expect("valid");
    let (l, f) = (host("l"), host("f"));
    let none = HashMap::new();
    let (at_l, at_f) = (view(&l, &none), view(&f, &none));
    let rtts = Some((&at_l, &at_f));
    // Ranks of an 8-rank job: 100 ms of compute an iteration, 5 ms in MPI.
    let ranks =
        |n: u32| -> Vec<EntityProfile> { (0..n).map(|r| job_rank("j", r, 8, 100, 5)).collect() };
    // l: 8 cores, its owner's 8 threads back; they get half the cores (fair sharing).
    let loaded = NodeProfile {
        competing: 4.0,
        ..node(8.0, 16.0)
    };
    let idle = |cores: f64| NodeProfile {
        speed: 1.5,
        ..node(cores, 0.0)
    };
    let (small, big) = (idle(2.0), idle(8.0));
    let mut policy = fx.policy(1);
    policy.entity_cores = Some(1.0);
    let holding = |held: u32| [node_offer(&j, 0.0, held)];
    let moves = |held: u32, f: &NodeProfile, leaving: bool| {
        let here = holding(held);
        let giver = Policy {
            jobs_here: &here,
            leaving,
            ..policy
        };
        select_near(&giver, &loaded, &ranks(held), f, 1, rtts)
    };
    // The whole job, or 5 of its 8 ranks: not to a node with 2 cores, though a rank
    // there would compute twice as fast or more.
    assert!(moves(8, &small, false).is_none());
    assert!(moves(5, &small, false).is_none());
    // 4 of 8: the job is not held here, and a rank goes for the CPU.
    assert!(moves(4, &small, false).is_some());
    // To a node with a core for every rank and 25% more CPU a rank: the job moves.
    let plan = moves(5, &big, false).expect("relocates");
    // A core of speed 1.5 against a fifth of 4 cores of speed 1.
    assert!((plan.gain.deltas[0] - 0.7 / 2.3).abs() < 1e-9);
    assert!(moves(8, &big, false).is_some());
    // Leaving, the node gives to whoever asks.
    assert!(moves(8, &small, true).is_some());
    // Without the communication term (no latencies), the model alone decides.
    let here = holding(8);
    let giver = Policy {
        jobs_here: &here,
        ..policy
    };
    assert!(select(&giver, &loaded, &ranks(8), &small, 1).is_some());
}

#[test]
fn a_place_gathers_a_job_it_holds_part_of_and_has_a_core_for_each_other_rank() {
    let j = JobId::new("j").expect("valid");
    let offer = |ranks: u32, cores: f64, place_ranks: u32, place_room: f64| JobOffer {
        job: j.clone(),
        cores,
        ranks,
        place_ranks,
        place_room,
    };
    // A node with 5 of 8 ranks and 3 idle cores.
    assert!(gathers(&offer(5, 3.0, 0, 0.0), 8, 1.0));
    assert!(!gathers(&offer(5, 2.0, 0, 0.0), 8, 1.0));
    // Two cores a rank.
    assert!(!gathers(&offer(5, 3.0, 0, 0.0), 8, 2.0));
    // All of the job, or none of it: nothing to gather.
    assert!(!gathers(&offer(8, 3.0, 0, 0.0), 8, 1.0));
    assert!(!gathers(&offer(0, 8.0, 0, 0.0), 8, 1.0));
    // NSc2c: a full member whose place holds 7 and has 31 idle cores.
    assert!(gathers(&offer(7, 0.0, 7, 31.0), 8, 1.0));
}

/// A node that runs 2 ranks of a 4-rank job and has 3 idle cores keeps 2 of them for the
/// job: another job is offered 1, and the profile shows 1 idle; the gathered job's own
/// offer is unchanged. Without a core for each missing rank nothing is kept.
#[test]
fn a_node_gathering_a_job_keeps_the_cores_the_rest_of_it_needs() {
    let sized = |job: &str, rank: u32| {
        let mut e = entity(job, rank, 1.0);
        e.job_ranks = 4;
        e
    };
    let es = [sized("j", 0), sized("j", 1), sized("k", 0)];
    let n = node(6.0, 3.0);
    let offers = n.job_offers(&es);
    let (shown, kept) = keep_for_gathering(n, offers.clone(), &es, 1.0);
    // j needs 2 more cores; k (1 of 4 here) needs 3, which are not left after j's.
    assert!((shown.free_cores() - 1.0).abs() < 1e-9);
    let of = |offers: &[JobOffer], job: &str| {
        offers
            .iter()
            .find(|o| o.job.as_str() == job)
            .map(|o| o.cores)
            .expect("an offer")
    };
    assert_eq!(of(&kept, "j"), of(&offers, "j"));
    assert!((of(&kept, "k") - 1.0).abs() < 1e-9);
    // With 1 idle core, j cannot be gathered here: nothing kept.
    let small = node(4.0, 3.0);
    let offers = small.job_offers(&es);
    let (shown, kept) = keep_for_gathering(small, offers.clone(), &es, 1.0);
    assert_eq!(shown, small);
    assert_eq!(kept, offers);
}

#[test]
fn overloaded_node_gives_to_idle_node() {
    let fx = Fixture::new();
    // 1 core, 2 ranks at 0.5 each; the target has a free core.
    let es = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
    let plan = select(&fx.policy(1), &node(1.0, 2.0), &es, &node(1.0, 0.0), 8).expect("a move");
    assert_eq!(plan.entities.len(), 1);
    // (1 - 0.5) / 1.5 minus a small cost term.
    assert!(plan.gain.improvement > 0.33 && plan.gain.gain > 0.3);
}

#[test]
fn a_waiting_rank_stays_unless_a_competing_load_takes_its_node() {
    let fx = Fixture::new();
    // 0.6 cores, one rank that uses 0.33 of them because it mostly waits for its peer;
    // the thief offers an equal, idle 0.6.
    let es = [entity("j", 0, 0.33)];
    let thief = node(0.6, 0.0);
    assert!(select(&fx.policy(1), &node(0.6, 0.6), &es, &thief, 1).is_none());
    // The same rank on a node where a hog takes 0.3 CPU: it gets half of what the thief
    // offers, and moves.
    let contended = NodeProfile {
        competing: 0.3,
        ..node(0.6, 1.6)
    };
    let plan = select(&fx.policy(1), &contended, &es, &thief, 1).expect("a move");
    assert_eq!(plan.entities, vec![es[0].id.clone()]);
    // A node twice as big as the rank's share attracts it with no competing load.
    let big = node(1.2, 0.0);
    assert!(select(&fx.policy(1), &node(0.6, 0.6), &es, &big, 1).is_some());
}

/// The main job's double move (MPICH, 2026-11-26): rank 1 slowed to 0.3 core by a hog
/// on its 0.6-core node went first to node-a, whose own rank 0 waits for it (0.42 core
/// idle there), where it got 0.3 core again, and only then to the idle node-c.
#[test]
fn a_straggler_goes_to_an_idle_node_not_to_one_whose_ranks_wait_for_it() {
    let fx = Fixture::new();
    let policy = Policy {
        entity_cores: Some(1.0),
        ..fx.policy(1)
    };
    // Rank 1 uses 0.3 of its 0.6-core node, the hog the rest.
    let straggler = entity("j", 1, 0.3);
    let loaded = NodeProfile {
        competing: 0.3,
        ..node(0.6, 1.6)
    };
    // node-a: rank 0 of the same job polls at 0.6 core but computes only 30% of each
    // iteration, so its profile shows 0.18 core of load.
    let mut waiting = entity("j", 0, 0.6);
    waiting.compute = Duration::from_millis(3);
    waiting.mpi_wait = Duration::from_millis(7);
    let node_a = node(0.6, 0.18);
    let offers = node_a.job_offers(std::slice::from_ref(&waiting));
    assert_eq!(offers.len(), 1);
    assert!((offers[0].cores - 0.3).abs() < 1e-9, "{offers:?}");
    let to_a = Destination {
        node: &node_a,
        job_offers: &offers,
    };
    let es = [straggler];
    assert!(select(&policy, &loaded, &es, to_a, 1).is_none());
    // Without the offers (an older thief), node-a looks like 0.42 idle core: the move
    // this prevents.
    assert!(select(&policy, &loaded, &es, &node_a, 1).is_some());
    // The idle node-c takes it.
    assert!(select(&policy, &loaded, &es, &node(0.6, 0.0), 1).is_some());
    // A node of 1.2 cores whose rank waits likewise shares them: 0.6 core each, twice
    // what the straggler has, so it moves there (Figure 15's cooperating node).
    let node_big = node(1.2, 0.18);
    let offers = node_big.job_offers(std::slice::from_ref(&waiting));
    assert!((offers[0].cores - 0.6).abs() < 1e-9, "{offers:?}");
    let to_big = Destination {
        node: &node_big,
        job_offers: &offers,
    };
    assert!(select(&policy, &loaded, &es, to_big, 1).is_some());
    // Entities of other jobs see node-a as it is.
    let other = [entity("k", 0, 0.3)];
    assert!(select(&policy, &loaded, &other, to_a, 1).is_some());
}

#[test]
fn with_entity_cores_an_idle_big_node_draws_only_ranks_it_would_speed_up() {
    let fx = Fixture::new();
    // A rank with a core to itself, an idle 8-core node of the same speed.
    let es = [entity("j", 0, 1.0)];
    let big = node(8.0, 0.0);
    // The paper's model: 8 idle cores against 1 used, a gain of about 0.78.
    assert!(select(&fx.policy(1), &node(1.0, 1.0), &es, &big, 1).is_some());
    let capped = Policy {
        entity_cores: Some(1.0),
        ..fx.policy(1)
    };
    // One rank can use one of those cores: nothing to gain.
    assert!(select(&capped, &node(1.0, 1.0), &es, &big, 1).is_none());
    // The same rank sharing its core with a competing load does move.
    let contended = NodeProfile {
        competing: 1.0,
        ..node(1.0, 2.0)
    };
    let shared = [entity("j", 0, 0.5)];
    assert!(select(&capped, &contended, &shared, &big, 1).is_some());
    // And so does one on a slower core, to a faster one.
    let fast = NodeProfile {
        speed: 2.0,
        ..node(8.0, 0.0)
    };
    assert!(select(&capped, &node(1.0, 1.0), &es, &fast, 1).is_some());
}

#[test]
fn fully_used_entity_does_not_move_to_an_equal_node() {
    let fx = Fixture::new();
    let es = [entity("j", 0, 1.0)];
    assert!(select(&fx.policy(1), &node(1.0, 1.0), &es, &node(1.0, 0.0), 1).is_none());
}

#[test]
fn held_and_recently_arrived_entities_do_not_move() {
    let mut fx = Fixture::new();
    let mut es = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
    es[0].resident = Duration::from_secs(5);
    fx.held
        .insert(es[1].id.clone(), fx.now + Duration::from_secs(1));
    assert!(select(&fx.policy(1), &node(1.0, 2.0), &es, &node(1.0, 0.0), 1).is_none());
}

#[test]
fn costly_move_is_refused() {
    let fx = Fixture::new();
    let mut es = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
    // 64 GiB at 12.5 MB/s = 5,500 s, more than the hour the job is expected to run on:
    // the move cannot pay for itself.
    es[0].state_bytes = 64 << 30;
    es[1].state_bytes = 64 << 30;
    assert!(select(&fx.policy(1), &node(1.0, 2.0), &es, &node(1.0, 0.0), 1).is_none());
}

#[test]
fn a_move_predicted_to_outlast_the_migration_timeout_is_refused() {
    let fx = Fixture::new();
    let mut es = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
    // 1 GiB at 12.5 MB/s: 86 s, against a limit of 60 s.
    es[0].state_bytes = 1 << 30;
    es[1].state_bytes = 1 << 30;
    let mut policy = fx.policy(1);
    policy.max_move_time = Duration::from_secs(60);
    assert!(select(&policy, &node(1.0, 2.0), &es, &node(1.0, 0.0), 1).is_none());
    policy.max_move_time = Duration::from_secs(90);
    assert!(select(&policy, &node(1.0, 2.0), &es, &node(1.0, 0.0), 1).is_some());
}

/// 1 GiB at 12.5 MB/s (86 s) to go from half a core to a whole one, an hour into a job
/// expected to run another hour: the move saves about 1,800 s. The paper's cost term
/// (86 / (10 + ln 3600), saturated at 1) refuses it; the amortised one takes it.
#[test]
fn a_costly_move_that_pays_for_itself_is_taken_unless_the_cost_term_is_the_papers() {
    let mut fx = Fixture::new();
    let mut es = [entity("j", 0, 0.5), entity("j", 1, 0.5)];
    es[0].state_bytes = 1 << 30;
    es[1].state_bytes = 1 << 30;
    let plan = select(&fx.policy(1), &node(1.0, 2.0), &es, &node(1.0, 0.0), 1)
        .expect("the move pays for itself");
    assert!(plan.gain.cost_term < 0.02, "{:?}", plan.gain);
    fx.cost = MigrationCostModel::paper();
    assert!(select(&fx.policy(1), &node(1.0, 2.0), &es, &node(1.0, 0.0), 1).is_none());
}

#[test]
fn group_grows_while_gain_holds_and_stays_in_one_job() {
    let fx = Fixture::new();
    let es = [
        entity("a", 0, 0.25),
        entity("a", 1, 0.25),
        entity("b", 0, 0.25),
        entity("a", 2, 0.25),
    ];
    let plan = select(&fx.policy(8), &node(1.0, 4.0), &es, &node(2.0, 0.0), 8).expect("a move");
    assert!(plan.entities.iter().all(|e| e.job.as_str() == "a"));
    assert_eq!(plan.entities.len(), 3);
    let single = select(&fx.policy(1), &node(1.0, 4.0), &es, &node(2.0, 0.0), 8).expect("a move");
    assert_eq!(single.entities.len(), 1);
}

#[test]
fn ideal_counts_follow_weighted_availability_ratio() {
    let fx = Fixture::new();
    let es: Vec<_> = (0..6).map(|r| entity("j", r, 4.0 / 6.0)).collect();
    let a = node(4.0, 6.0);
    let b = node(2.0, 0.0);
    let views = [
        NodeView {
            node: &a,
            entities: &es,
        },
        NodeView {
            node: &b,
            entities: &[],
        },
    ];
    let ideal = ideal_counts(&fx.weights, &views);
    // n1 / n2 = 4 / 2 with 6 entities.
    assert!((ideal[0] - 4.0).abs() < 1e-9 && (ideal[1] - 2.0).abs() < 1e-9);
    let (from, to, plan) = balance(&fx.policy(1), &views, |_, _, _| true).expect("a move");
    assert_eq!((from, to, plan.entities.len()), (0, 1, 1));
}

#[test]
fn balance_leaves_a_near_even_split_alone() {
    let fx = Fixture::new();
    let es: Vec<_> = (0..3).map(|r| entity("j", r, 1.0)).collect();
    let a = node(2.0, 2.0);
    let b = node(2.0, 1.0);
    let views = [
        NodeView {
            node: &a,
            entities: &es[..2],
        },
        NodeView {
            node: &b,
            entities: &es[2..],
        },
    ];
    assert!(balance(&fx.policy(1), &views, |_, _, _| true).is_none());
}
