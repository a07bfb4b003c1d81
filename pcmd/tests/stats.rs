//! The registry's stats path through its public API: profiles from registered ranks only,
//! rates after a tick, and the reply to a stats query.

#![allow(clippy::unwrap_used)] // a panic is a failed test

use std::time::{Duration, Instant};

use pcm_proto::{
    AppName, ClientKind, ErrorKind, FromDaemon, HostName, JobId, Malleability, NodeLoad, NodeStats,
    PeerTraffic, Rank, RankProfile, ToDaemon, PROTOCOL_VERSION,
};
use pcmd::registry::{Config, ConnId, Output, Registry};

fn replies(core: &mut Registry) -> Vec<FromDaemon> {
    std::iter::from_fn(|| core.poll_output())
        .filter_map(|o| match o {
            Output::Send { message, .. } => Some(message),
            Output::Close { .. } => None,
        })
        .collect()
}

fn hello(core: &mut Registry, now: Instant, client: ClientKind) -> ConnId {
    let conn = core.handle_connected(now);
    core.handle_message(
        now,
        conn,
        ToDaemon::Hello {
            version: PROTOCOL_VERSION,
            client,
        },
    );
    replies(core);
    conn
}

fn register(core: &mut Registry, now: Instant, rank: u32) -> ConnId {
    let conn = hello(core, now, ClientKind::Rank);
    core.handle_message(
        now,
        conn,
        ToDaemon::Register {
            job: JobId::new("job-1").unwrap(),
            app: AppName::new("heat2d").unwrap(),
            rank: Rank(rank),
            size: 2,
            host: HostName::new("node-a").unwrap(),
            pid: 100 + rank,
            replacement: false,
            reconfigurations: 0,
        },
    );
    assert_eq!(replies(core), vec![FromDaemon::Registered]);
    conn
}

fn profile(iteration: u64, wall_s: u64) -> RankProfile {
    RankProfile {
        iteration,
        wall_us: wall_s * 1_000_000,
        cpu_us: wall_s * 900_000,
        mpi_us: wall_s * 100_000,
        traffic: vec![PeerTraffic {
            peer: Rank(1),
            host: None,
            sent_messages: iteration,
            sent_bytes: iteration * 8,
            received_messages: iteration,
            received_bytes: iteration * 8,
        }],
        ..RankProfile::default()
    }
}

fn query(core: &mut Registry, now: Instant, conn: ConnId) -> NodeStats {
    core.handle_message(now, conn, ToDaemon::QueryStats);
    match replies(core).pop() {
        Some(FromDaemon::Stats(stats)) => stats,
        other => panic!("expected stats, got {other:?}"),
    }
}

#[test]
fn given_profiles_and_ticks_then_stats_carry_reports_rates_and_node_load() {
    let now = Instant::now();
    let config = Config::default().with_stats_period(Duration::from_secs(3));
    let mut core = Registry::new(config, HostName::new("node-a").unwrap(), 1, now, 0);
    let rank0 = register(&mut core, now, 0);
    let _rank1 = register(&mut core, now, 1);
    let controller = hello(&mut core, now, ClientKind::Controller);

    core.handle_message(now, rank0, ToDaemon::Profile(profile(100, 1)));
    core.handle_stats_tick(now, None);
    core.handle_message(now, rank0, ToDaemon::Profile(profile(400, 4)));
    let load = NodeLoad {
        cores: 0.5,
        cpu_load: 1.0,
        cpu_available: 0.0,
        memory_total: 1 << 30,
        memory_available: 1 << 29,
    };
    core.handle_stats_tick(now, Some(load));
    assert!(replies(&mut core).is_empty(), "profiles get no reply");

    let stats = query(&mut core, now, controller);
    assert_eq!(stats.period_s, 3.0);
    assert_eq!(stats.node, load);
    let ranks = &stats.jobs[0].ranks;
    assert_eq!(ranks.len(), 2, "both registered ranks are listed");
    assert_eq!(ranks[0].profile, profile(400, 4));
    assert!((ranks[0].iterations_per_second - 100.0).abs() < 1e-9);
    assert!((ranks[0].cpu_per_iteration_us - 9000.0).abs() < 1e-6);
    assert!((ranks[0].mpi_per_iteration_us - 1000.0).abs() < 1e-6);
    // Rank 1 never reported: listed with an empty profile.
    assert_eq!(ranks[1].profile, RankProfile::default());
    assert_eq!(ranks[1].iterations_per_second, 0.0);

    // A profile carries the rank's progress: the status shows its iteration.
    core.handle_message(now, controller, ToDaemon::QueryStatus);
    match replies(&mut core).pop() {
        Some(FromDaemon::Status(status)) => assert_eq!(status.jobs[0].ranks[0].iteration, 400),
        other => panic!("expected the status, got {other:?}"),
    }

    // A rank that leaves takes its profile with it.
    core.handle_disconnected(now, rank0);
    let stats = query(&mut core, now, controller);
    assert_eq!(stats.jobs[0].ranks.len(), 1);
}

/// Issue 38: the job's resize limits reach the stats and the status from its ranks'
/// profiles, so that the agents know the job is malleable; a job whose ranks declared none
/// shows none.
#[test]
fn given_a_malleable_rank_then_stats_and_status_say_the_job_is_malleable() {
    let now = Instant::now();
    let mut core = registry(now);
    let _rank0 = register(&mut core, now, 0);
    let rank1 = register(&mut core, now, 1);
    let controller = hello(&mut core, now, ClientKind::Controller);
    let status = |core: &mut Registry| {
        core.handle_message(now, controller, ToDaemon::QueryStatus);
        match replies(core).pop() {
            Some(FromDaemon::Status(status)) => status,
            other => panic!("expected the status, got {other:?}"),
        }
    };
    // Nothing reported yet, or a plain profile: not malleable.
    core.handle_message(now, rank1, ToDaemon::Profile(profile(10, 1)));
    assert_eq!(query(&mut core, now, controller).jobs[0].malleable, None);
    assert_eq!(status(&mut core).jobs[0].malleable, None);

    // Rank 0 has not reported; rank 1's declaration is the job's.
    let limits = Malleability::new(1, 4).unwrap();
    let declared = RankProfile {
        malleable: Some(limits),
        ..profile(20, 2)
    };
    core.handle_message(now, rank1, ToDaemon::Profile(declared));
    assert_eq!(
        query(&mut core, now, controller).jobs[0].malleable,
        Some(limits)
    );
    assert_eq!(status(&mut core).jobs[0].malleable, Some(limits));
}

/// A registry of node-a with the default settings.
fn registry(now: Instant) -> Registry {
    Registry::new(
        Config::default(),
        HostName::new("node-a").unwrap(),
        1,
        now,
        0,
    )
}

#[test]
fn given_profile_on_the_wrong_connection_then_a_clear_error() {
    let now = Instant::now();
    let mut core = registry(now);
    let unregistered = hello(&mut core, now, ClientKind::Rank);
    core.handle_message(now, unregistered, ToDaemon::Profile(profile(1, 1)));
    let reply = replies(&mut core);
    assert!(
        matches!(&reply[..], [FromDaemon::Error { kind: ErrorKind::BadMessage, message }] if message.contains("Profile before Register")),
        "{reply:?}"
    );
    let controller = hello(&mut core, now, ClientKind::Controller);
    core.handle_message(now, controller, ToDaemon::Profile(profile(1, 1)));
    let reply = replies(&mut core);
    assert!(
        matches!(&reply[..], [FromDaemon::Error { kind: ErrorKind::BadMessage, message }] if message.contains("not valid on a controller")),
        "{reply:?}"
    );
    // A rank connection may not ask for stats.
    core.handle_message(now, unregistered, ToDaemon::QueryStats);
    assert!(matches!(
        &replies(&mut core)[..],
        [FromDaemon::Error { .. }]
    ));
}
