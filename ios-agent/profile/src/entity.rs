//! Application entities: pcmd's per-rank figures ([`pcm_proto::NodeStats`]) turned into the
//! agent model's [`EntityProfile`]s, and the competing load on a node.
//!
//! # Why compute vs MPI time, not CPU
//!
//! Open MPI ranks busy-poll while they wait for a message, so a rank that waits for a slow
//! peer uses as much CPU as the slow peer itself. What differs is how the iteration's wall
//! time splits: the straggler spends it computing, the others inside MPI. So `compute` is
//! wall time per iteration minus time inside MPI per iteration, and `mpi_wait` the latter;
//! CPU use is still reported (`cpu`, the model's `U_cpu`), as what the rank gets now.

use std::time::Duration;

use std::collections::BTreeMap;

use ios_agent_core::model::{EntityId, EntityProfile, NodeProfile, Partner, MAX_PARTNERS};
use pcm_proto::{HostName, JobStats, NodeStats, PeerTraffic, RankStats};
use serde::{Deserialize, Serialize};

use node_sensor::{EntityUsage, NodeSample};

/// A non-negative finite number, or 0 (figures come from another process: never trust them).
fn clean(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        0.0
    }
}

/// Microseconds (possibly garbage) as a duration.
fn micros(us: f64) -> Duration {
    // Clamp before converting: Duration::from_secs_f64 panics on huge values.
    Duration::from_secs_f64(clean(us).min(1e15) / 1e6)
}

/// Bytes per second a rank moved over its life (sent + received, point-to-point and
/// collective), or over the period when `previous` holds the same rank's earlier profile.
fn network_rate(now: &RankStats, previous: Option<&RankStats>) -> f64 {
    let total = |r: &RankStats| -> (u64, u64) {
        let bytes = r
            .profile
            .traffic
            .iter()
            .map(|t| t.sent_bytes.saturating_add(t.received_bytes))
            .fold(r.profile.collectives.bytes, u64::saturating_add);
        (bytes, r.profile.wall_us)
    };
    let (bytes, wall) = total(now);
    let (bytes, wall) = match previous.map(total) {
        // Same rank, later report: the difference over the period.
        Some((b0, w0)) if wall > w0 && bytes >= b0 => (bytes - b0, wall - w0),
        _ => (bytes, wall),
    };
    if wall == 0 {
        0.0
    } else {
        bytes as f64 / (wall as f64 / 1e6)
    }
}

/// Converts one rank's figures into the model's entity profile.
///
/// - `cpu`: CPU per iteration times iterations per second; when no iteration ended in the
///   period, the rank's lifetime average (`cpu_us / wall_us`); 0 for a stalled rank (pcmd
///   heard nothing from it: a stopped process uses no CPU, and its lifetime average would
///   be a stale figure).
/// - `compute` = wall per iteration - MPI per iteration (at least 0); `mpi_wait` = MPI per
///   iteration; both 0 when no iteration ended in the period.
/// - `network`: bytes per second over the period when `previous` (the same rank in the
///   previous answer) is given, else over the rank's life.
/// - `age` = the rank's wall time (since its first process started), `resident` = the current
///   process's, `remaining` unknown (`None`: the model then uses the age).
/// - `job_ranks`: the job's size as pcmd has it (`JobStats::size`); `malleable`: the job's
///   resize limits as its ranks declared them (`JobStats::malleable`), `None` for a job
///   the agents may only migrate.
pub fn entity_profile(
    job: &JobStats,
    rank: &RankStats,
    previous: Option<&RankStats>,
) -> EntityProfile {
    let p = &rank.profile;
    let rate = clean(rank.iterations_per_second);
    let cpu = if rank.stalled {
        0.0
    } else if rate > 0.0 {
        clean(rank.cpu_per_iteration_us) * rate / 1e6
    } else if p.wall_us > 0 {
        p.cpu_us as f64 / p.wall_us as f64
    } else {
        0.0
    };
    let wall = clean(rank.wall_per_iteration_us);
    let mpi = clean(rank.mpi_per_iteration_us).min(if wall > 0.0 { wall } else { f64::MAX });
    let (compute, mpi_wait) = if rate > 0.0 {
        (micros(wall - mpi), micros(mpi))
    } else {
        (Duration::ZERO, Duration::ZERO)
    };
    let previous = previous.filter(|q| q.rank == rank.rank);
    EntityProfile {
        id: EntityId {
            job: job.job.clone(),
            rank: rank.rank,
        },
        cpu: clean(cpu),
        memory: p.rss_bytes,
        network: clean(network_rate(rank, previous)),
        state_bytes: p.state_bytes,
        compute,
        mpi_wait,
        iteration_rate: rate,
        age: Duration::from_micros(p.wall_us),
        remaining: None,
        resident: Duration::from_micros(p.resident_us),
        partners: partners(rank, previous),
        job_ranks: job.size,
        malleable: job.malleable,
        home: p.home.clone(),
        job_slowest_compute: (rate > 0.0 && clean(rank.slowest_compute_per_iteration_us) > 0.0)
            .then(|| micros(rank.slowest_compute_per_iteration_us)),
        width_age: p.width_age_us.map(Duration::from_micros),
    }
}

/// The hosts `now`'s rank exchanges messages with and how often: per peer, the larger of
/// messages sent and received (an exchange is a send and its answer), per second over the
/// period when `previous` holds the same rank's earlier report, else over the rank's life;
/// peers on one host summed, most frequent first, at most [`MAX_PARTNERS`]. Peers whose host
/// the rank did not name (older PCM, profiling of a rank outside the placement) are left out,
/// and so is the model's communication term for them.
fn partners(now: &RankStats, previous: Option<&RankStats>) -> Vec<Partner> {
    let wall_now = now.profile.wall_us;
    let wall_then = previous.map_or(0, |q| q.profile.wall_us);
    if wall_now <= wall_then {
        return Vec::new();
    }
    let seconds = (wall_now - wall_then) as f64 / 1e6;
    let exchanges = |t: &PeerTraffic| t.sent_messages.max(t.received_messages);
    let mut by_host: BTreeMap<&HostName, f64> = BTreeMap::new();
    for t in &now.profile.traffic {
        let Some(host) = &t.host else { continue };
        let before = previous
            .and_then(|q| q.profile.traffic.iter().find(|p| p.peer == t.peer))
            .map_or(0, exchanges);
        let count = exchanges(t).saturating_sub(before);
        if count > 0 {
            *by_host.entry(host).or_default() += count as f64 / seconds;
        }
    }
    let mut partners: Vec<Partner> = by_host
        .into_iter()
        .map(|(host, rate)| Partner {
            host: host.clone(),
            exchanges_per_sec: clean(rate),
        })
        .filter(|p| p.exchanges_per_sec > 0.0)
        .collect();
    partners.sort_by(|a, b| b.exchanges_per_sec.total_cmp(&a.exchanges_per_sec));
    partners.truncate(MAX_PARTNERS);
    partners
}

/// Every rank on the node as an entity profile, in pcmd's order (jobs, then ranks).
/// `previous` is pcmd's previous answer, if any, for per-period network rates.
pub fn entity_profiles(stats: &NodeStats, previous: Option<&NodeStats>) -> Vec<EntityProfile> {
    stats
        .jobs
        .iter()
        .flat_map(|job| {
            let before = previous
                .and_then(|p| p.jobs.iter().find(|j| j.job == job.job))
                .map(|j| j.ranks.as_slice())
                .unwrap_or(&[]);
            job.ranks.iter().map(move |rank| {
                let prev = before
                    .iter()
                    .find(|r| r.rank == rank.rank && r.pid == rank.pid);
                entity_profile(job, rank, prev)
            })
        })
        .collect()
}

/// The ranks pcmd reports as stalled (no report for a few seconds: a stopped or hung
/// process), in pcmd's order.
pub fn stalled_entities(stats: &NodeStats) -> Vec<EntityId> {
    stats
        .jobs
        .iter()
        .flat_map(|job| {
            job.ranks.iter().filter(|r| r.stalled).map(|r| EntityId {
                job: job.job.clone(),
                rank: r.rank,
            })
        })
        .collect()
}

/// Process ids of every rank on the node (for [`crate::NodeSensor::sample_with`]).
pub fn entity_pids(stats: &NodeStats) -> Vec<u32> {
    stats
        .jobs
        .iter()
        .flat_map(|j| j.ranks.iter().map(|r| r.pid))
        .collect()
}

/// The node's profile with the runnable demand its ranks only show because they busy-poll
/// while waiting taken out.
///
/// A rank that waits for a slow peer is runnable the whole time (Open MPI polls, at best
/// yielding), so the node's raw demand makes a node whose ranks mostly wait look fully
/// loaded: it would never offer to take work, even though it could. Each entity's load
/// counts only in the share of its iteration it spends computing (`load * mpi_wait /
/// (compute + mpi_wait)` is removed); an entity with no measured iteration is left as it is.
///
/// An entity's load is its CPU scaled by how much longer the node's ranks were runnable
/// than running (`usage`: their demand over their use, from the node's sensor). On a node
/// whose cap throttles, a polling rank is runnable all the time but runs only for the cap's
/// share: measured on a node capped at 0.6 core, a rank using 0.42 core had a demand near
/// 1.0, and discounting its CPU alone left the node looking full when it had room for
/// another rank.
pub fn load_without_waiting(
    node: &NodeProfile,
    entities: &[EntityProfile],
    usage: Option<&EntityUsage>,
) -> NodeProfile {
    let runnable_per_running = usage
        .filter(|u| clean(u.used) > 0.0)
        .map_or(1.0, |u| (clean(u.demand) / u.used).max(1.0));
    let waiting: f64 = entities
        .iter()
        .map(|e| clean(e.cpu) * runnable_per_running * (1.0 - e.compute_share()).clamp(0.0, 1.0))
        .sum();
    NodeProfile {
        cpu_load: (clean(node.cpu_load) - waiting).max(0.0),
        ..*node
    }
}

/// Who gets the node's CPU: its own entities (the ranks) or something else (a competing
/// load: another user's process, a CPU hog).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CompetingLoad {
    /// CPUs the node may use.
    pub cores: f64,
    /// CPUs used by everything on the node.
    pub used: f64,
    /// Runnable threads on the node.
    pub demand: f64,
    /// CPUs used by the entities.
    pub entities_used: f64,
    /// Runnable threads of the entities.
    pub entities_demand: f64,
    /// CPUs used by everything else (`used - entities_used`, at least 0).
    pub others_used: f64,
    /// Runnable threads of everything else.
    pub others_demand: f64,
    /// Share of the node's capacity the entities get (`entities_used / cores`, in [0, 1]).
    pub entities_share: f64,
    /// Share of the node's capacity the entities would get if nothing else ran
    /// (`min(entities_demand, cores) / cores`): compare with `entities_share` to see what the
    /// competing load costs them.
    pub entities_fair_share: f64,
}

impl CompetingLoad {
    /// Figures from the node's and the entities' CPU use and demand.
    pub fn new(
        cores: f64,
        used: f64,
        demand: f64,
        entities_used: f64,
        entities_demand: f64,
    ) -> Self {
        let cores = clean(cores);
        let (used, demand) = (clean(used), clean(demand));
        let (eu, ed) = (clean(entities_used), clean(entities_demand));
        let share = |x: f64| {
            if cores > 0.0 {
                (x / cores).clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        CompetingLoad {
            cores,
            used,
            demand,
            entities_used: eu,
            entities_demand: ed,
            others_used: (used - eu).max(0.0),
            others_demand: (demand - ed).max(0.0),
            entities_share: share(eu),
            entities_fair_share: share(ed.min(cores)),
        }
    }

    /// Whether something other than the entities takes at least `threshold` CPUs of the node
    /// while the entities want more than they get.
    pub fn is_contended(&self, threshold: f64) -> bool {
        self.others_used >= threshold && self.entities_share + 1e-9 < self.entities_fair_share
    }
}

/// What the agent makes of a [`NodeSample`] (the sensor lives low, in `node-sensor`, so that
/// pcmd can sample its node without depending on the agent).
pub trait NodeSampleExt {
    /// The agent's model input (bandwidth unknown here: 0; the agent fills in what it
    /// measures).
    fn profile(&self) -> NodeProfile;

    /// The competing load, when entity pids were given.
    fn competing(&self) -> Option<CompetingLoad>;
}

impl NodeSampleExt for NodeSample {
    fn profile(&self) -> NodeProfile {
        NodeProfile {
            cores: self.cores,
            speed: self.speed,
            cpu_load: self.demand,
            memory_available: self.memory_available,
            bandwidth: 0.0,
            competing: self.competing().map_or(0.0, |c| c.others_used),
        }
    }

    fn competing(&self) -> Option<CompetingLoad> {
        self.entities
            .map(|e| CompetingLoad::new(self.cores, self.used, self.demand, e.used, e.demand))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcm_proto::{
        AppName, CollectiveTraffic, HostName, JobId, Malleability, NodeLoad, PeerTraffic, Rank,
        RankProfile, SizeRule,
    };

    fn rank(r: u32, ips: f64, wall_us: f64, cpu_us: f64, mpi_us: f64) -> RankStats {
        RankStats {
            rank: Rank(r),
            host: HostName::new("node-a").expect("valid"),
            pid: 100 + r,
            replacement: false,
            profile: RankProfile {
                iteration: 500,
                wall_us: 10_000_000,
                cpu_us: 9_000_000,
                mpi_us: 2_000_000,
                state_bytes: 4 << 20,
                rss_bytes: 30 << 20,
                resident_us: 3_000_000,
                traffic: vec![PeerTraffic {
                    peer: Rank(1 - r),
                    host: None,
                    sent_messages: 10,
                    sent_bytes: 600_000,
                    received_messages: 10,
                    received_bytes: 400_000,
                }],
                collectives: CollectiveTraffic {
                    calls: 1,
                    bytes: 1_000_000,
                },
                malleable: None,
                home: Some(HostName::new("node-a").expect("valid")),
                slowest_compute_us: 0,
                width_age_us: None,
            },
            iterations_per_second: ips,
            wall_per_iteration_us: wall_us,
            cpu_per_iteration_us: cpu_us,
            mpi_per_iteration_us: mpi_us,
            slowest_compute_per_iteration_us: 0.0,
            stalled: false,
        }
    }

    #[test]
    fn given_the_jobs_width_age_then_the_entity_carries_it_and_not_when_unknown() {
        let job = JobStats {
            job: JobId::new("heat").expect("valid"),
            app: AppName::new("heat2d").expect("valid"),
            size: 2,
            ranks: Vec::new(),
            malleable: None,
        };
        let mut r = rank(0, 100.0, 6_000.0, 6_000.0, 4_000.0);
        assert_eq!(entity_profile(&job, &r, None).width_age, None);
        r.profile.width_age_us = Some(20_000_000);
        let e = entity_profile(&job, &r, None);
        assert_eq!(e.width_age, Some(Duration::from_secs(20)));
        // Not the time rank 0 has been on its node.
        assert_eq!(e.resident, Duration::from_secs(3));
    }

    #[test]
    fn given_the_jobs_slowest_compute_then_the_entity_carries_it_and_not_when_unknown() {
        let job = JobStats {
            job: JobId::new("heat").expect("valid"),
            app: AppName::new("heat2d").expect("valid"),
            size: 2,
            ranks: Vec::new(),
            malleable: None,
        };
        // Rank 0 computes 2 ms of its 6 ms iteration; the job's slowest rank 5 ms.
        let mut r = rank(0, 100.0, 6_000.0, 6_000.0, 4_000.0);
        r.slowest_compute_per_iteration_us = 5_000.0;
        let e = entity_profile(&job, &r, None);
        assert_eq!(e.compute, Duration::from_millis(2));
        assert_eq!(e.job_slowest_compute, Some(Duration::from_millis(5)));
        // Unknown (an older PCM), garbage, or no iteration in the period: none.
        for (slowest, ips) in [
            (0.0, 100.0),
            (f64::NAN, 100.0),
            (-1.0, 100.0),
            (5_000.0, 0.0),
        ] {
            r.slowest_compute_per_iteration_us = slowest;
            r.iterations_per_second = ips;
            assert_eq!(
                entity_profile(&job, &r, None).job_slowest_compute,
                None,
                "{slowest} {ips}"
            );
        }
    }

    /// Item 10 (review issue 12): a stopped rank's figures in pcmd are zeros and it is
    /// marked stalled; its entity must not show its lifetime CPU average as current use.
    #[test]
    fn given_a_stalled_rank_then_its_cpu_is_zero_and_it_is_listed_as_stalled() {
        let mut stopped = rank(1, 0.0, 0.0, 0.0, 0.0);
        stopped.stalled = true;
        let s = stats(vec![rank(0, 0.0, 0.0, 0.0, 0.0), stopped]);
        let e = entity_profiles(&s, None);
        // A rank waiting (no iteration ended) still shows its average; the stalled one 0.
        assert!(e[0].cpu > 0.5, "{:?}", e[0]);
        assert_eq!(e[1].cpu, 0.0);
        let stalled = stalled_entities(&s);
        assert_eq!(stalled.len(), 1);
        assert_eq!(stalled[0].rank, Rank(1));
    }

    /// Traffic of one rank with peers 1 to 3: `(peer, host, sent, received)`.
    fn talking(wall_us: u64, peers: &[(u32, Option<&str>, u64, u64)]) -> RankStats {
        let mut r = rank(0, 50.0, 20_000.0, 20_000.0, 2_000.0);
        r.profile.wall_us = wall_us;
        r.profile.traffic = peers
            .iter()
            .map(|&(peer, host, sent, received)| PeerTraffic {
                peer: Rank(peer),
                host: host.map(|h| HostName::new(h).expect("valid")),
                sent_messages: sent,
                sent_bytes: sent * 8,
                received_messages: received,
                received_bytes: received * 8,
            })
            .collect();
        r
    }

    #[test]
    fn partners_are_the_peers_hosts_with_their_exchange_rates_over_the_period() {
        let before = talking(
            10_000_000,
            &[(1, Some("node-b"), 1000, 1000), (2, Some("node-c"), 500, 0)],
        );
        // 2 s later: 400 more exchanges with rank 1 (node-b), 200 more received from rank 2
        // (now on node-b too), 10 with rank 3 (node-c), and rank 4 on an unnamed host.
        let now = talking(
            12_000_000,
            &[
                (1, Some("node-b"), 1400, 1400),
                (2, Some("node-b"), 500, 700),
                (3, Some("node-c"), 10, 10),
                (4, None, 5000, 5000),
            ],
        );
        let e = entity_profile(&stats(vec![]).jobs[0], &now, Some(&before));
        let got: Vec<(&str, f64)> = e
            .partners
            .iter()
            .map(|p| (p.host.as_str(), p.exchanges_per_sec))
            .collect();
        // Rank 2 had 500 exchanges (its sends) and has 700 (its receives): 200 in 2 s.
        assert_eq!(got, vec![("node-b", 300.0), ("node-c", 5.0)]);

        // Without an earlier report: over the rank's life (12 s).
        let e = entity_profile(&stats(vec![]).jobs[0], &now, None);
        assert_eq!(e.partners[0].host.as_str(), "node-b");
        assert!((e.partners[0].exchanges_per_sec - 2100.0 / 12.0).abs() < 1e-9);
        // No time passed (or garbage): no partners rather than infinite rates.
        let e = entity_profile(&stats(vec![]).jobs[0], &now, Some(&now));
        assert!(e.partners.is_empty());
    }

    fn stats(ranks: Vec<RankStats>) -> NodeStats {
        NodeStats {
            host: HostName::new("node-a").expect("valid"),
            period_s: 1.0,
            node: NodeLoad::default(),
            jobs: vec![JobStats {
                job: JobId::new("job-1").expect("valid"),
                app: AppName::new("heat2d").expect("valid"),
                size: 2,
                ranks,
                malleable: None,
            }],
        }
    }

    #[test]
    fn a_straggler_and_a_waiting_rank_use_the_same_cpu_but_split_their_time_differently() {
        // 50 iterations/s, 20 ms each; both burn 20 ms of CPU (busy-polling), but rank 0
        // computes 18 ms and rank 1 only 6 ms (14 ms waiting for rank 0 inside MPI).
        let s = stats(vec![
            rank(0, 50.0, 20_000.0, 20_000.0, 2_000.0),
            rank(1, 50.0, 20_000.0, 20_000.0, 14_000.0),
        ]);
        let e = entity_profiles(&s, None);
        assert_eq!(e.len(), 2);
        assert!((e[0].cpu - 1.0).abs() < 1e-9 && (e[1].cpu - 1.0).abs() < 1e-9);
        assert_eq!(e[0].compute, Duration::from_millis(18));
        assert_eq!(e[0].mpi_wait, Duration::from_millis(2));
        assert_eq!(e[1].compute, Duration::from_millis(6));
        assert_eq!(e[1].mpi_wait, Duration::from_millis(14));
        assert!(e[0].compute_share() > 0.85 && e[1].compute_share() < 0.35);
        assert_eq!(e[0].id.rank, Rank(0));
        assert_eq!(e[0].id.job.to_string(), "job-1");
        assert_eq!(e[0].iteration_rate, 50.0);
        assert_eq!(e[0].memory, 30 << 20);
        assert_eq!(e[0].state_bytes, 4 << 20);
        assert_eq!(e[0].age, Duration::from_secs(10));
        assert_eq!(e[0].resident, Duration::from_secs(3));
        assert_eq!(e[0].remaining, None);
        // 2 MB over 10 s of life.
        assert!((e[0].network - 200_000.0).abs() < 1e-6);
        for p in &e {
            assert!(p.validate().is_ok());
        }
    }

    /// Issue 38: a rank of a job pcmd reports malleable is an entity of a malleable job,
    /// with the job's limits and width; the ranks of other jobs are not.
    #[test]
    fn given_a_malleable_job_then_its_entities_carry_its_limits() {
        let limits = Malleability::new(2, 16)
            .expect("valid")
            .with_rule(SizeRule::MultipleOf(2));
        let mut s = stats(vec![rank(0, 50.0, 20_000.0, 20_000.0, 2_000.0)]);
        let mut other = s.jobs[0].clone();
        other.job = JobId::new("job-2").expect("valid");
        other.size = 3;
        s.jobs[0].malleable = Some(limits);
        s.jobs.push(other);
        let e = entity_profiles(&s, None);
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].malleable, e[0].job_ranks), (Some(limits), 2));
        assert_eq!(e[0].id.job.to_string(), "job-1");
        assert_eq!((e[1].malleable, e[1].job_ranks), (None, 3));
        let one = entity_profile(&s.jobs[0], &s.jobs[0].ranks[0], None);
        assert_eq!(one.malleable, Some(limits));
        // Where rank 0 runs, as the rank reported it: the job's home agent's node.
        assert_eq!(one.home.as_ref().map(|h| h.as_str()), Some("node-a"));
        assert!(one.validate().is_ok());
    }

    #[test]
    fn network_rate_uses_the_previous_answer_for_the_same_process() {
        let before = stats(vec![rank(0, 50.0, 20_000.0, 20_000.0, 2_000.0)]);
        let mut later = before.clone();
        let r = &mut later.jobs[0].ranks[0];
        r.profile.wall_us += 2_000_000;
        r.profile.traffic[0].sent_bytes += 3_000_000;
        let e = entity_profiles(&later, Some(&before));
        assert!(
            (e[0].network - 1_500_000.0).abs() < 1e-6,
            "{}",
            e[0].network
        );
        // A replacement process (another pid) starts over: lifetime figure.
        let mut moved = later.clone();
        moved.jobs[0].ranks[0].pid = 999;
        let e = entity_profiles(&moved, Some(&before));
        assert!((e[0].network - 5_000_000.0 / 12.0).abs() < 1e-6);
    }

    #[test]
    fn no_iteration_in_the_period_falls_back_to_the_lifetime_cpu() {
        let e = entity_profiles(&stats(vec![rank(0, 0.0, 0.0, 0.0, 0.0)]), None);
        assert!((e[0].cpu - 0.9).abs() < 1e-9);
        assert_eq!(e[0].compute, Duration::ZERO);
        assert_eq!(e[0].compute_share(), 1.0);
    }

    #[test]
    fn garbage_figures_never_panic_and_give_valid_profiles() {
        for bad in [f64::NAN, f64::INFINITY, -5.0, 1e300, f64::MIN] {
            let mut r = rank(0, bad, bad, bad, bad);
            r.profile.wall_us = 0;
            let e = entity_profiles(&stats(vec![r]), None);
            assert!(e[0].validate().is_ok(), "{bad}: {:?}", e[0]);
            let e = entity_profiles(&stats(vec![rank(0, 10.0, bad, bad, bad)]), None);
            assert!(e[0].validate().is_ok(), "{bad}: {:?}", e[0]);
        }
        // MPI time above the wall time: compute 0, not negative.
        let e = entity_profiles(&stats(vec![rank(0, 10.0, 1000.0, 1000.0, 5000.0)]), None);
        assert_eq!(e[0].compute, Duration::ZERO);
        assert_eq!(e[0].mpi_wait, Duration::from_millis(1));
    }

    #[test]
    fn pids_are_listed() {
        let s = stats(vec![
            rank(0, 1.0, 1.0, 1.0, 0.0),
            rank(1, 1.0, 1.0, 1.0, 0.0),
        ]);
        assert_eq!(entity_pids(&s), vec![100, 101]);
    }

    #[test]
    fn a_hog_in_the_node_shows_as_competing_load() {
        // Node capped at 0.6: one rank (demand 1) and a hog (demand 1) share it.
        let c = CompetingLoad::new(0.6, 0.6, 2.0, 0.3, 1.0);
        assert!((c.others_used - 0.3).abs() < 1e-9);
        assert!((c.others_demand - 1.0).abs() < 1e-9);
        assert!((c.entities_share - 0.5).abs() < 1e-9);
        assert!((c.entities_fair_share - 1.0).abs() < 1e-9);
        assert!(c.is_contended(0.1));
        // Alone: the rank gets the whole cap; nothing competes.
        let alone = CompetingLoad::new(0.6, 0.6, 1.0, 0.6, 1.0);
        assert!(alone.others_used < 1e-9);
        assert!((alone.entities_share - 1.0).abs() < 1e-9);
        assert!(!alone.is_contended(0.1));
        // Garbage does not panic.
        let g = CompetingLoad::new(f64::NAN, -1.0, f64::INFINITY, 5.0, f64::NAN);
        assert_eq!(g.entities_share, 0.0);
    }

    #[test]
    fn waiting_ranks_do_not_count_as_load() {
        let node = NodeProfile {
            cores: 1.2,
            speed: 1.0,
            cpu_load: 1.0,
            memory_available: 1 << 30,
            bandwidth: 0.0,
            competing: 0.0,
        };
        let job = JobId::new("j-1").expect("valid");
        let mut waiting = EntityProfile::new(
            EntityId {
                job: job.clone(),
                rank: Rank(0),
            },
            0.8,
        );
        waiting.compute = Duration::from_millis(25);
        waiting.mpi_wait = Duration::from_millis(75);
        let adjusted = load_without_waiting(&node, &[waiting.clone()], None);
        // 0.8 CPU, 75% of it waiting: 0.6 of the load was polling.
        assert!((adjusted.cpu_load - 0.4).abs() < 1e-9, "{adjusted:?}");
        assert!(adjusted.is_lightly_loaded(0.3));
        assert!(!node.is_lightly_loaded(0.3));
        // Unmeasured iterations (all compute) and garbage leave the load alone or at 0.
        let fresh = EntityProfile::new(
            EntityId {
                job: job.clone(),
                rank: Rank(1),
            },
            0.8,
        );
        assert_eq!(load_without_waiting(&node, &[fresh], None).cpu_load, 1.0);
        let mut nan = waiting;
        nan.cpu = f64::NAN;
        assert_eq!(load_without_waiting(&node, &[nan], None).cpu_load, 1.0);
        let mut huge = EntityProfile::new(EntityId { job, rank: Rank(2) }, 50.0);
        huge.mpi_wait = Duration::from_secs(1);
        assert_eq!(load_without_waiting(&node, &[huge], None).cpu_load, 0.0);
    }

    #[test]
    fn a_throttled_waiting_rank_counts_by_its_demand() {
        // Measured on node-a capped at 0.6 core: its rank used 0.42 core, computed 0.83 ms
        // and waited 2.42 ms per iteration, was runnable nearly all the time (demand 1.0),
        // and the node's demand (rank, pcmd, agent) was 1.03.
        let node = NodeProfile {
            cores: 0.6,
            speed: 1.0,
            cpu_load: 1.03,
            memory_available: 1 << 30,
            bandwidth: 0.0,
            competing: 0.0,
        };
        let job = JobId::new("j-1").expect("valid");
        let mut rank = EntityProfile::new(EntityId { job, rank: Rank(0) }, 0.42);
        rank.compute = Duration::from_micros(830);
        rank.mpi_wait = Duration::from_micros(2420);
        let usage = EntityUsage {
            processes: 1,
            found: 1,
            used: 0.42,
            demand: 1.0,
        };
        // Counting CPU alone, 0.31 of the 1.03 goes: the node looks full.
        let by_cpu = load_without_waiting(&node, &[rank.clone()], None);
        assert!(by_cpu.free_cores() < 0.01, "{by_cpu:?}");
        // Counting the rank's demand, 0.74 goes: about 0.3 core is free for another rank.
        let by_demand = load_without_waiting(&node, &[rank.clone()], Some(&usage));
        assert!(
            (by_demand.free_cores() - 0.31).abs() < 0.01,
            "{by_demand:?}"
        );
        // A node whose ranks are never throttled (demand = use) is judged as before.
        let unthrottled = EntityUsage {
            demand: 0.42,
            ..usage
        };
        assert_eq!(
            load_without_waiting(&node, &[rank.clone()], Some(&unthrottled)),
            by_cpu
        );
        // Garbage in the usage changes nothing.
        let garbage = EntityUsage {
            used: f64::NAN,
            ..usage
        };
        assert_eq!(load_without_waiting(&node, &[rank], Some(&garbage)), by_cpu);
    }

    #[test]
    fn a_node_sample_becomes_a_valid_model_input_with_its_competing_load() {
        let sample = NodeSample {
            scope: node_sensor::Scope::Machine {
                reason: "test".into(),
            },
            period: Duration::from_secs(1),
            cores: 0.5,
            used: 0.4,
            demand: 0.75,
            throttled: None,
            pressure: None,
            memory_total: 1 << 30,
            memory_available: 1 << 29,
            speed: 1.5,
            tasks: 2,
            entities: Some(EntityUsage {
                processes: 1,
                found: 1,
                used: 0.25,
                demand: 0.5,
            }),
        };
        let profile = sample.profile();
        assert_eq!(profile.speed, 1.5);
        assert_eq!(profile.cores, 0.5);
        assert_eq!(profile.cpu_load, 0.75);
        assert!(profile.validate().is_ok());
        let competing = sample.competing().expect("entities given");
        assert!((competing.others_used - 0.15).abs() < 1e-9, "{competing:?}");
        assert_eq!(profile.competing, competing.others_used);
        let without = NodeSample {
            entities: None,
            ..sample
        };
        assert!(without.competing().is_none());
    }
}
