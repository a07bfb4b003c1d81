//! Unit tests of the core: no sockets, a hand-driven clock.

#![allow(clippy::unwrap_used)]

use super::*;
use pcm_proto::PhaseTimings;

const SEED: u64 = 7 << 16;

struct Harness {
    core: Registry,
    now: Instant,
}

fn host(name: &str) -> HostName {
    HostName::new(name).unwrap()
}

fn job(name: &str) -> JobId {
    JobId::new(name).unwrap()
}

fn mv(rank: u32, to: Option<&str>) -> Move {
    Move {
        rank: Rank(rank),
        to: to.map(host),
    }
}

fn completed() -> Outcome {
    Outcome::Completed {
        iteration: 42,
        timings: PhaseTimings::default(),
        placed: vec![(Rank(1), host("node-b"))],
    }
}

impl Harness {
    fn new() -> Self {
        Self::with(Config::default())
    }

    fn with(config: Config) -> Self {
        let now = Instant::now();
        Self {
            core: Registry::new(config, host("node-a"), 99, now, SEED),
            now,
        }
    }

    fn with_seed(seed: u64) -> Self {
        let now = Instant::now();
        Self {
            core: Registry::new(Config::default(), host("node-a"), 99, now, seed),
            now,
        }
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        if self.core.poll_timeout().is_some_and(|t| t <= self.now) {
            self.core.handle_timeout(self.now);
        }
    }

    fn outputs(&mut self) -> Vec<Output> {
        std::iter::from_fn(|| self.core.poll_output()).collect()
    }

    fn send(&mut self, conn: ConnId, message: ToDaemon) -> Vec<Output> {
        self.core.handle_message(self.now, conn, message);
        self.outputs()
    }

    fn connect(&mut self, client: ClientKind) -> ConnId {
        let conn = self.core.handle_connected(self.now);
        let out = self.send(
            conn,
            ToDaemon::Hello {
                version: PROTOCOL_VERSION,
                client,
            },
        );
        assert_eq!(
            out,
            vec![Output::Send {
                conn,
                message: FromDaemon::Welcome {
                    version: PROTOCOL_VERSION,
                    host: host("node-a"),
                },
            }]
        );
        conn
    }

    fn rank(&mut self, job_name: &str, rank: u32, size: u32) -> ConnId {
        let conn = self.connect(ClientKind::Rank);
        let out = self.send(conn, register(job_name, rank, size, false));
        assert_eq!(
            out,
            vec![Output::Send {
                conn,
                message: FromDaemon::Registered
            }]
        );
        conn
    }

    fn controller(&mut self) -> ConnId {
        self.connect(ClientKind::Controller)
    }

    fn migrate(
        &mut self,
        conn: ConnId,
        job_name: Option<&str>,
        moves: Vec<Move>,
        wait: bool,
    ) -> Vec<Output> {
        self.send(
            conn,
            ToDaemon::Migrate {
                job: job_name.map(job),
                moves,
                wait,
                resize: None,
            },
        )
    }

    fn status(&mut self) -> DaemonStatus {
        self.core.status(self.now)
    }
}

fn register(job_name: &str, rank: u32, size: u32, replacement: bool) -> ToDaemon {
    ToDaemon::Register {
        job: job(job_name),
        app: AppName::new("heat2d").unwrap(),
        rank: Rank(rank),
        size,
        host: host("node-a"),
        pid: 1000 + rank,
        replacement,
        reconfigurations: 0,
    }
}

/// The single error in `out`, sent to `conn`.
fn error_of(out: &[Output], conn: ConnId) -> (ErrorKind, String) {
    let errors: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::Send {
                conn: c,
                message: FromDaemon::Error { kind, message },
            } if *c == conn => Some((*kind, message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "expected one error in {out:?}");
    errors.into_iter().next().unwrap()
}

fn accepted(out: &[Output], conn: ConnId) -> RequestId {
    out.iter()
        .find_map(|o| match o {
            Output::Send {
                conn: c,
                message: FromDaemon::MigrationAccepted { request },
            } if *c == conn => Some(*request),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no MigrationAccepted in {out:?}"))
}

fn closes(out: &[Output], conn: ConnId) -> bool {
    out.contains(&Output::Close { conn })
}

#[test]
fn given_rank_registers_then_status_lists_it() {
    let mut h = Harness::new();
    h.rank("job-1", 2, 4);
    let status = h.status();
    assert_eq!(status.host, host("node-a"));
    assert_eq!(status.pid, 99);
    assert_eq!(status.jobs.len(), 1);
    let j = &status.jobs[0];
    assert_eq!((j.job.as_str(), j.size, j.in_flight), ("job-1", 4, None));
    assert_eq!(j.ranks.len(), 1);
    assert_eq!(j.ranks[0].rank, Rank(2));
    assert_eq!(j.ranks[0].pid, 1002);
}

#[test]
fn given_consecutive_progress_then_rate_is_delta_over_time() {
    let mut h = Harness::new();
    let r = h.rank("job-1", 0, 1);
    assert!(h
        .send(
            r,
            ToDaemon::Progress {
                iteration: 10,
                reconfigurations: 0,
            }
        )
        .is_empty());
    assert_eq!(h.status().jobs[0].ranks[0].iterations_per_second, 0.0);
    h.advance(Duration::from_secs(2));
    h.send(
        r,
        ToDaemon::Progress {
            iteration: 50,
            reconfigurations: 0,
        },
    );
    let rank = &h.status().jobs[0].ranks[0];
    assert_eq!(rank.iteration, 50);
    assert!((rank.iterations_per_second - 20.0).abs() < 1e-9, "{rank:?}");
    // A report at the same instant does not divide by zero.
    h.send(
        r,
        ToDaemon::Progress {
            iteration: 60,
            reconfigurations: 0,
        },
    );
    assert!(h.status().jobs[0].ranks[0]
        .iterations_per_second
        .is_finite());
}

#[test]
fn given_progress_before_register_then_bad_message_and_connection_stays() {
    let mut h = Harness::new();
    let r = h.connect(ClientKind::Rank);
    let out = h.send(
        r,
        ToDaemon::Progress {
            iteration: 1,
            reconfigurations: 0,
        },
    );
    let (kind, message) = error_of(&out, r);
    assert_eq!(kind, ErrorKind::BadMessage);
    assert!(message.contains("Progress before Register"), "{message}");
    assert!(!closes(&out, r));
    // Still usable.
    assert_eq!(
        h.send(r, register("job-1", 0, 1, false)),
        vec![Output::Send {
            conn: r,
            message: FromDaemon::Registered
        }]
    );
}

#[test]
fn given_register_on_controller_connection_then_bad_message() {
    let mut h = Harness::new();
    let c = h.controller();
    let (kind, message) = error_of(&h.send(c, register("job-1", 0, 1, false)), c);
    assert_eq!(kind, ErrorKind::BadMessage);
    assert!(
        message.contains("Register is not valid on a controller"),
        "{message}"
    );
    let r = h.rank("job-1", 0, 1);
    let (kind, _) = error_of(&h.send(r, ToDaemon::QueryStatus), r);
    assert_eq!(kind, ErrorKind::BadMessage);
}

#[test]
fn given_rank_out_of_range_or_size_mismatch_then_register_refused() {
    let mut h = Harness::new();
    let r = h.connect(ClientKind::Rank);
    let (_, message) = error_of(&h.send(r, register("job-1", 4, 4, false)), r);
    assert!(message.contains("rank 4 does not exist"), "{message}");
    h.rank("job-1", 0, 4);
    let r2 = h.connect(ClientKind::Rank);
    let (_, message) = error_of(&h.send(r2, register("job-1", 1, 8, false)), r2);
    assert!(message.contains("with 4 ranks"), "{message}");
}

#[test]
fn given_second_register_on_same_connection_then_refused() {
    let mut h = Harness::new();
    let r = h.rank("job-1", 0, 2);
    let (_, message) = error_of(&h.send(r, register("job-1", 1, 2, false)), r);
    assert!(
        message.contains("already registered as rank 0 of job job-1"),
        "{message}"
    );
}

#[test]
fn given_wrong_version_then_mismatch_named_and_closed() {
    let mut h = Harness::new();
    let c = h.core.handle_connected(h.now);
    let out = h.send(
        c,
        ToDaemon::Hello {
            version: 1,
            client: ClientKind::Controller,
        },
    );
    let (kind, message) = error_of(&out, c);
    assert_eq!(kind, ErrorKind::VersionMismatch);
    assert_eq!(
        message,
        "client speaks protocol v1, this daemon speaks v2 to v3"
    );
    assert!(closes(&out, c));
    assert_eq!(h.core.connections(), 0);
}

#[test]
fn given_no_hello_then_closed_after_deadline() {
    let mut h = Harness::with(Config::default().with_hello_timeout(Duration::from_secs(3)));
    let c = h.core.handle_connected(h.now);
    assert!(h.core.poll_timeout().is_some());
    h.advance(Duration::from_secs(2));
    assert!(h.outputs().is_empty());
    h.advance(Duration::from_secs(2));
    let out = h.outputs();
    assert!(closes(&out, c), "{out:?}");
    assert!(error_of(&out, c).1.contains("no Hello"));
    assert_eq!(h.core.poll_timeout(), None);
}

#[test]
fn given_message_before_hello_then_closed() {
    let mut h = Harness::new();
    let c = h.core.handle_connected(h.now);
    let out = h.send(c, ToDaemon::QueryStatus);
    assert!(error_of(&out, c).1.contains("expected Hello"));
    assert!(closes(&out, c));
}

#[test]
fn given_frame_error_then_error_and_close_for_that_connection_only() {
    let mut h = Harness::new();
    let r = h.rank("job-1", 0, 1);
    let c = h.controller();
    h.core.handle_frame_error(
        h.now,
        c,
        &FrameError::TooLong {
            len: usize::MAX,
            max: 1,
        },
    );
    let out = h.outputs();
    assert!(error_of(&out, c).1.contains("exceeds the limit"));
    assert!(closes(&out, c));
    assert!(!closes(&out, r));
    assert_eq!(h.status().jobs.len(), 1);
}

#[test]
fn given_too_many_connections_then_new_one_refused() {
    let mut h = Harness::with(Config::default().with_max_connections(2));
    h.controller();
    h.controller();
    let c = h.core.handle_connected(h.now);
    let out = h.outputs();
    assert!(error_of(&out, c).1.contains("limit"));
    assert!(closes(&out, c));
    assert_eq!(h.core.connections(), 2);
}

/// What `f` logs, as text.
fn logged(f: impl FnOnce()) -> String {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let log = Buffer::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = log.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

#[test]
fn given_a_flood_of_connections_to_a_full_daemon_then_its_warnings_are_rate_limited() {
    let mut h = Harness::with(Config::default().with_max_connections(1));
    h.controller();
    let text = logged(|| {
        for _ in 0..1000 {
            h.core.handle_connected(h.now);
        }
    });
    let lines = text
        .lines()
        .filter(|l| l.contains("too many connections"))
        .count();
    assert!(
        (1..=pcm_proto::log_limit::DEFAULT_BURST as usize).contains(&lines),
        "{lines} warning lines for 1000 refusals:\n{text}"
    );
    assert_eq!(h.core.refused_connections(), 1000);
    // Once the window is over, the next refusal is logged and says how many were left out.
    h.now += pcm_proto::log_limit::DEFAULT_WINDOW;
    let text = logged(|| {
        h.core.handle_connected(h.now);
    });
    assert!(
        text.contains(&format!("({} more like this suppressed)", 1000 - lines)),
        "{text}"
    );
}

#[test]
fn given_migrate_then_every_rank_of_the_job_gets_the_request() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 4);
    let r1 = h.rank("job-1", 1, 4);
    let other = h.rank("job-2", 0, 1);
    let c = h.controller();
    let moves = vec![mv(1, Some("node-b"))];
    let out = h.migrate(c, Some("job-1"), moves.clone(), false);
    let request = accepted(&out, c);
    assert_eq!(request, RequestId(SEED));
    for r in [r0, r1] {
        assert!(out.contains(&Output::Send {
            conn: r,
            message: FromDaemon::ReconfigurationRequested {
                request,
                moves: moves.clone(),
                epoch: 0,
                resize: None,
            }
        }));
    }
    assert!(!out
        .iter()
        .any(|o| matches!(o, Output::Send { conn, .. } if *conn == other)));
    let status = h.status();
    assert_eq!(status.jobs[0].in_flight, Some(request));
}

#[test]
fn given_request_ids_then_they_count_up_from_the_seed() {
    let mut h = Harness::new();
    let r = h.rank("job-1", 0, 2);
    let c = h.controller();
    let a = accepted(&h.migrate(c, None, vec![mv(1, None)], false), c);
    h.send(
        r,
        ToDaemon::ReconfigurationFinished {
            request: a,
            outcome: completed(),
        },
    );
    let b = accepted(&h.migrate(c, None, vec![mv(1, None)], false), c);
    assert_eq!(b.0, a.0 + 1);
}

#[test]
fn given_unknown_rank_then_error_names_rank_and_range() {
    let mut h = Harness::new();
    h.rank("job-1", 0, 4);
    let c = h.controller();
    let out = h.migrate(c, Some("job-1"), vec![mv(7, None)], false);
    let (kind, message) = error_of(&out, c);
    assert_eq!(kind, ErrorKind::UnknownRank);
    assert_eq!(
        message,
        "rank 7 does not exist: job job-1 has 4 ranks (0-3)"
    );
    assert_eq!(h.status().jobs[0].in_flight, None);
}

#[test]
fn given_unknown_job_then_error_names_job_host_and_known_jobs() {
    let mut h = Harness::new();
    let c = h.controller();
    let (kind, message) = error_of(&h.migrate(c, None, vec![mv(0, None)], false), c);
    assert_eq!(kind, ErrorKind::UnknownJob);
    assert!(message.contains("no job has ranks registered"), "{message}");
    h.rank("job-1", 0, 1);
    h.rank("job-2", 0, 1);
    let (kind, message) = error_of(&h.migrate(c, None, vec![mv(0, None)], false), c);
    assert_eq!(kind, ErrorKind::UnknownJob);
    assert!(message.contains("job-1, job-2"), "{message}");
    let (kind, message) = error_of(&h.migrate(c, Some("job-x"), vec![mv(0, None)], false), c);
    assert_eq!(kind, ErrorKind::UnknownJob);
    assert!(
        message.starts_with(
            "job job-x has no ranks registered with this daemon on host node-a; run the command on a node of the job"
        ),
        "{message}"
    );
}

#[test]
fn given_duplicate_or_no_moves_then_bad_message() {
    let mut h = Harness::new();
    h.rank("job-1", 0, 4);
    let c = h.controller();
    let (kind, message) = error_of(
        &h.migrate(c, None, vec![mv(1, None), mv(1, Some("x"))], false),
        c,
    );
    assert_eq!(kind, ErrorKind::BadMessage);
    assert!(
        message.contains("rank 1 appears more than once"),
        "{message}"
    );
    let (kind, message) = error_of(&h.migrate(c, None, vec![], false), c);
    assert_eq!(kind, ErrorKind::BadMessage);
    assert!(message.contains("no ranks"), "{message}");
}

#[test]
fn given_request_in_flight_then_second_migrate_busy() {
    let mut h = Harness::new();
    h.rank("job-1", 0, 4);
    let c = h.controller();
    let first = accepted(
        &h.migrate(c, None, vec![mv(1, None), mv(2, None)], false),
        c,
    );
    let (kind, message) = error_of(&h.migrate(c, None, vec![mv(3, None)], false), c);
    assert_eq!(kind, ErrorKind::Busy);
    assert!(message.contains(&first.to_string()), "{message}");
    assert!(message.contains("ranks 1, 2"), "{message}");
}

#[test]
fn given_wait_then_first_finished_report_answers_and_later_ones_are_ignored() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 2);
    let r1 = h.rank("job-1", 1, 2);
    let c = h.controller();
    let request = accepted(&h.migrate(c, None, vec![mv(1, Some("node-b"))], true), c);
    let out = h.send(
        r0,
        ToDaemon::ReconfigurationFinished {
            request,
            outcome: completed(),
        },
    );
    assert_eq!(
        out,
        vec![Output::Send {
            conn: c,
            message: FromDaemon::MigrationFinished {
                request,
                outcome: completed()
            }
        }]
    );
    let out = h.send(
        r1,
        ToDaemon::ReconfigurationFinished {
            request,
            outcome: completed(),
        },
    );
    assert!(out.is_empty(), "{out:?}");
    let job = &h.status().jobs[0];
    assert_eq!((job.in_flight, job.migrations), (None, 1));
}

#[test]
fn given_failed_outcome_then_not_counted_as_migration() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 2);
    let c = h.controller();
    let request = accepted(&h.migrate(c, None, vec![mv(1, None)], false), c);
    let out = h.send(
        r0,
        ToDaemon::ReconfigurationFinished {
            request,
            outcome: Outcome::Failed {
                reason: "spawn failed".into(),
            },
        },
    );
    assert!(out.is_empty(), "no waiter, nothing to send: {out:?}");
    let job = &h.status().jobs[0];
    assert_eq!((job.in_flight, job.migrations), (None, 0));
}

/// All ranks leave while a request is in flight and no replacement registers: the job is
/// kept (the replacements of a move of every rank may register after the old processes
/// left) for the grace period, then it is gone and the request failed.
#[test]
fn given_all_ranks_disconnect_then_in_flight_fails_after_the_grace_and_job_is_gone() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 2);
    let r1 = h.rank("job-1", 1, 2);
    let c = h.controller();
    let request = accepted(&h.migrate(c, None, vec![mv(1, None)], true), c);
    h.core.handle_disconnected(h.now, r0);
    assert!(h.outputs().is_empty());
    assert_eq!(h.status().jobs[0].in_flight, Some(request));
    h.core.handle_disconnected(h.now, r1);
    assert!(h.outputs().is_empty());
    let job = &h.status().jobs[0];
    assert_eq!((job.ranks.len(), job.in_flight), (0, Some(request)));
    assert_eq!(
        h.core.poll_timeout(),
        Some(h.now + DEFAULT_REPLACEMENT_GRACE)
    );
    h.advance(DEFAULT_REPLACEMENT_GRACE - Duration::from_millis(1));
    assert!(h.outputs().is_empty());
    h.advance(Duration::from_millis(1));
    let out = h.outputs();
    assert_eq!(
        out,
        vec![Output::Send {
            conn: c,
            message: FromDaemon::MigrationFinished {
                request,
                outcome: Outcome::Failed {
                    reason: "all ranks of job job-1 disconnected during the reconfiguration \
                             (rank 1 to any host) and no replacement registered within 10 s: \
                             the job ended, or its replacement died while starting"
                        .into()
                }
            }
        }]
    );
    assert!(h.status().jobs.is_empty());
    assert_eq!(h.core.poll_timeout(), None);
}

/// All ranks leave with nothing in flight and no replacement expected: the job ended, and
/// is forgotten at once.
#[test]
fn given_all_ranks_disconnect_with_nothing_in_flight_then_job_is_gone_at_once() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 2);
    let r1 = h.rank("job-1", 1, 2);
    h.core.handle_disconnected(h.now, r0);
    h.core.handle_disconnected(h.now, r1);
    assert!(h.outputs().is_empty());
    assert!(h.status().jobs.is_empty());
    assert_eq!(h.core.poll_timeout(), None);
}

/// Both ranks of the request's outcome, placed on this daemon's host.
fn completed_all(ranks: u32) -> Outcome {
    Outcome::Completed {
        iteration: 42,
        timings: PhaseTimings::default(),
        placed: (0..ranks).map(|r| (Rank(r), host("node-a"))).collect(),
    }
}

/// Issue 36, finding 6: a move of every rank, as seen on one host. The replacements
/// register (taking the ranks over) before the departing ranks' reports arrive; those
/// reports still count: the waiter hears of the completion, the job keeps its ranks and
/// counters, and the next request goes to the replacements.
#[test]
fn given_every_rank_moves_and_replacements_register_first_then_the_departing_report_counts() {
    let mut h = Harness::new();
    let old0 = h.rank("job-1", 0, 2);
    let old1 = h.rank("job-1", 1, 2);
    let c = h.controller();
    let request = accepted(&h.migrate(c, None, vec![mv(0, None), mv(1, None)], true), c);
    let new0 = h.connect(ClientKind::Rank);
    h.send(new0, register("job-1", 0, 2, true));
    let new1 = h.connect(ClientKind::Rank);
    h.send(new1, register("job-1", 1, 2, true));

    let report = ToDaemon::ReconfigurationFinished {
        request,
        outcome: completed_all(2),
    };
    let out = h.send(old1, report.clone());
    assert_eq!(
        finished_of(&out, c),
        (request, completed_all(2)),
        "the departing rank's report must answer the waiter: {out:?}"
    );
    assert!(h.send(old0, report).is_empty());
    h.core.handle_disconnected(h.now, old0);
    h.core.handle_disconnected(h.now, old1);
    assert!(h.outputs().is_empty());

    let job = &h.status().jobs[0];
    assert_eq!((job.in_flight, job.migrations, job.failed), (None, 1, 0));
    assert_eq!(job.ranks.len(), 2);
    assert!(job.ranks.iter().all(|r| r.replacement), "{job:?}");
    // Nothing is pending: the job does not linger once its ranks really end.
    assert_eq!(h.core.poll_timeout(), None);

    let c2 = h.controller();
    let out = h.migrate(c2, None, vec![mv(1, None)], true);
    accepted(&out, c2);
    for conn in [new0, new1] {
        assert!(
            out.iter().any(|o| matches!(o, Output::Send { conn: to, message: FromDaemon::ReconfigurationRequested { .. } } if *to == conn)),
            "the replacement {conn} must get the next request: {out:?}"
        );
    }
}

/// Issue 36, finding 6, the other order: the old processes of a move of every rank leave,
/// unreported, before their replacements register. The job is kept for them; a request
/// meanwhile is refused as busy; once a replacement registers and reports the completion,
/// the waiter hears of it and the job goes on with its counters.
#[test]
fn given_every_rank_leaves_before_its_replacement_registers_then_the_job_waits_for_it() {
    let mut h = Harness::new();
    let old0 = h.rank("job-1", 0, 2);
    let old1 = h.rank("job-1", 1, 2);
    let c = h.controller();
    let request = accepted(&h.migrate(c, None, vec![mv(0, None), mv(1, None)], true), c);
    h.core.handle_disconnected(h.now, old0);
    h.core.handle_disconnected(h.now, old1);
    assert!(h.outputs().is_empty());
    let job = &h.status().jobs[0];
    assert_eq!((job.ranks.len(), job.in_flight), (0, Some(request)));

    h.advance(Duration::from_secs(1));
    let new0 = h.connect(ClientKind::Rank);
    h.send(new0, register("job-1", 0, 2, true));
    let new1 = h.connect(ClientKind::Rank);
    h.send(new1, register("job-1", 1, 2, true));
    // A replacement reports the completion it took part in.
    let out = h.send(
        new0,
        ToDaemon::ReconfigurationFinished {
            request,
            outcome: completed_all(2),
        },
    );
    assert_eq!(finished_of(&out, c), (request, completed_all(2)));
    h.advance(DEFAULT_REPLACEMENT_GRACE);
    assert!(h.outputs().is_empty());
    let job = &h.status().jobs[0];
    assert_eq!((job.ranks.len(), job.migrations, job.failed), (2, 1, 0));
    let c2 = h.controller();
    accepted(&h.migrate(c2, None, vec![mv(0, None)], false), c2);
}

/// A move of every rank reported before the old processes leave, whose replacements
/// register only after they left: the job is kept for them, counters and all; a request in
/// between is refused as busy, not lost to nobody.
#[test]
fn given_a_completed_move_of_every_rank_then_the_job_waits_for_the_replacements() {
    let mut h = Harness::new();
    let old0 = h.rank("job-1", 0, 2);
    let old1 = h.rank("job-1", 1, 2);
    let c = h.controller();
    let request = accepted(&h.migrate(c, None, vec![mv(0, None), mv(1, None)], true), c);
    let out = h.send(
        old0,
        ToDaemon::ReconfigurationFinished {
            request,
            outcome: completed_all(2),
        },
    );
    assert_eq!(finished_of(&out, c), (request, completed_all(2)));
    h.core.handle_disconnected(h.now, old0);
    h.core.handle_disconnected(h.now, old1);
    assert!(h.outputs().is_empty());
    let job = &h.status().jobs[0];
    assert_eq!((job.ranks.len(), job.migrations), (0, 1));

    let c2 = h.controller();
    let out = h.migrate(c2, None, vec![mv(0, None)], true);
    let (kind, message) = error_of(&out, c2);
    assert_eq!(kind, ErrorKind::Busy);
    assert!(
        message.contains("replacements have not registered yet"),
        "{message}"
    );

    let new0 = h.connect(ClientKind::Rank);
    h.send(new0, register("job-1", 0, 2, true));
    let new1 = h.connect(ClientKind::Rank);
    h.send(new1, register("job-1", 1, 2, true));
    h.advance(DEFAULT_REPLACEMENT_GRACE);
    assert!(h.outputs().is_empty());
    let job = &h.status().jobs[0];
    assert_eq!((job.ranks.len(), job.migrations), (2, 1));
    // When the job really ends, it is forgotten at once.
    h.core.handle_disconnected(h.now, new0);
    h.core.handle_disconnected(h.now, new1);
    assert!(h.status().jobs.is_empty());
}

/// The finished report in `out` for `conn`.
fn finished_of(out: &[Output], conn: ConnId) -> (RequestId, Outcome) {
    let found: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::Send {
                conn: c,
                message: FromDaemon::MigrationFinished { request, outcome },
            } if *c == conn => Some((*request, outcome.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(found.len(), 1, "expected one MigrationFinished in {out:?}");
    found[0].clone()
}

/// Item 13: a request past its deadline is not dropped while a stopped rank may still run
/// it. The holders are asked to withdraw it, and it stays in flight (the job stays busy)
/// until one withdraws it; then the waiter hears it was cancelled and it counts as such.
#[test]
fn given_deadline_passes_then_holders_are_asked_to_withdraw_and_a_withdrawal_cancels_it() {
    let mut h = Harness::with(Config::default().with_request_timeout(Duration::from_secs(10)));
    let r0 = h.rank("job-1", 0, 2);
    let r1 = h.rank("job-1", 1, 2);
    let c = h.controller();
    let request = accepted(&h.migrate(c, None, vec![mv(1, None)], true), c);
    assert_eq!(h.core.poll_timeout(), Some(h.now + Duration::from_secs(10)));
    h.advance(Duration::from_secs(9));
    assert!(h.outputs().is_empty());
    h.advance(Duration::from_secs(1));
    let out = h.outputs();
    for r in [r0, r1] {
        assert!(
            out.contains(&Output::Send {
                conn: r,
                message: FromDaemon::CancelReconfiguration { request }
            }),
            "{out:?}"
        );
    }
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Send { conn, .. } if *conn == c)),
        "the waiter is answered only once the request's fate is known: {out:?}"
    );
    let status = h.status();
    assert_eq!(status.jobs[0].in_flight, Some(request));
    assert!(status.jobs[0].cancelling);
    // No new deadline: the daemon waits for the job.
    assert_eq!(h.core.poll_timeout(), None);
    let (kind, _) = error_of(&h.migrate(c, None, vec![mv(0, None)], false), c);
    assert_eq!(kind, ErrorKind::Busy);

    let out = h.send(r0, ToDaemon::ReconfigurationCancelled { request });
    let (answered, outcome) = finished_of(&out, c);
    assert_eq!(answered, request);
    match outcome {
        Outcome::Cancelled { reason } => {
            assert!(reason.contains("did not start within 10 s"), "{reason}");
            assert!(reason.contains("rank 0 withdrew it"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let job = &h.status().jobs[0];
    assert_eq!(
        (job.in_flight, job.migrations, job.cancelled, job.failed),
        (None, 0, 1, 0)
    );
    // The other holder's late answer changes nothing.
    assert!(h
        .send(r1, ToDaemon::ReconfigurationCancelled { request })
        .is_empty());
    assert_eq!(h.status().jobs[0].cancelled, 1);
    accepted(&h.migrate(c, None, vec![mv(1, None)], false), c);
}

/// Item 13, the reviewer's case: the job had already started the request (the stopped rank
/// resumed), so no rank withdraws it and the job reports it completed: the daemon counts
/// the migration the job counts, and the waiter gets the real outcome.
#[test]
fn given_deadline_passes_and_the_job_completes_it_anyway_then_it_counts_as_a_migration() {
    let mut h = Harness::with(Config::default().with_request_timeout(Duration::from_secs(3)));
    let r0 = h.rank("job-1", 0, 2);
    let c = h.controller();
    let request = accepted(&h.migrate(c, None, vec![mv(1, None)], true), c);
    h.advance(Duration::from_secs(3));
    h.outputs();
    h.advance(Duration::from_secs(30));
    assert!(h.outputs().is_empty());
    let out = h.send(
        r0,
        ToDaemon::ReconfigurationFinished {
            request,
            outcome: completed(),
        },
    );
    let (_, outcome) = finished_of(&out, c);
    assert!(outcome.is_completed(), "{outcome:?}");
    let job = &h.status().jobs[0];
    assert_eq!((job.in_flight, job.migrations, job.cancelled), (None, 1, 0));
}

/// Item 13: while a request is being withdrawn, every rank that received it leaving without
/// an answer ends it as failed with an unknown fate, not as a clean cancellation.
#[test]
fn given_cancelling_and_every_holder_leaves_then_it_fails_as_unknown() {
    let mut h = Harness::with(Config::default().with_request_timeout(Duration::from_secs(3)));
    let r0 = h.rank("job-1", 0, 2);
    let c = h.controller();
    let request = accepted(&h.migrate(c, None, vec![mv(1, None)], true), c);
    h.advance(Duration::from_secs(3));
    h.outputs();
    // A replacement registered after the request: it never held it.
    h.rank("job-1", 1, 2);
    h.core.handle_disconnected(h.now, r0);
    let (answered, outcome) = finished_of(&h.outputs(), c);
    assert_eq!(answered, request);
    match outcome {
        Outcome::Failed { reason } => assert!(reason.contains("not known"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.status().jobs[0].failed, 1);
}

/// Item 14: a request tells the ranks the job's epoch as last reported, so that a job that
/// reconfigured meanwhile (another daemon's request won) refuses it.
#[test]
fn given_ranks_report_reconfigurations_then_requests_carry_that_epoch() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 2);
    h.send(
        r0,
        ToDaemon::Progress {
            iteration: 10,
            reconfigurations: 4,
        },
    );
    let c = h.controller();
    let out = h.migrate(c, None, vec![mv(1, None)], false);
    let request = accepted(&out, c);
    assert!(out.contains(&Output::Send {
        conn: r0,
        message: FromDaemon::ReconfigurationRequested {
            request,
            moves: vec![mv(1, None)],
            epoch: 4,
            resize: None,
        }
    }));
    // Completing it moves the daemon's view on at once, before the next progress report.
    h.send(
        r0,
        ToDaemon::ReconfigurationFinished {
            request,
            outcome: completed(),
        },
    );
    let out = h.migrate(c, None, vec![mv(0, None)], false);
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Send {
            message: FromDaemon::ReconfigurationRequested { epoch: 5, .. },
            ..
        }
    )));
}

/// Item 14: request ids are not derived from the start time, so two daemons started in the
/// same millisecond do not hand out the same ids; 0 (no request) is never used.
#[test]
fn given_two_daemons_then_their_request_id_seeds_differ() {
    let seeds: std::collections::BTreeSet<u64> = (0..64).map(|_| request_id_seed()).collect();
    assert_eq!(seeds.len(), 64);
    assert!(!seeds.contains(&0));
    let mut h = Harness::with_seed(0);
    h.rank("job-1", 0, 2);
    let c = h.controller();
    assert_ne!(
        accepted(&h.migrate(c, None, vec![mv(1, None)], false), c).0,
        0
    );
}

/// Item 10: a rank whose link falls silent (a stopped process) shows as stalled with no
/// rate, while a rank that keeps reporting shows its own rate.
#[test]
fn given_a_rank_stops_reporting_then_status_shows_it_stalled_and_the_others_their_rate() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 2);
    let r1 = h.rank("job-1", 1, 2);
    let progress = |iteration| ToDaemon::Progress {
        iteration,
        reconfigurations: 0,
    };
    h.send(r0, progress(100));
    h.send(r1, progress(100));
    h.advance(Duration::from_secs(1));
    h.send(r0, progress(150));
    h.send(r1, progress(150));
    // Rank 1 stops; rank 0 goes on reporting (here at 20 it/s).
    for i in 1..=4 {
        h.advance(Duration::from_secs(1));
        h.send(r0, progress(150 + 20 * i));
    }
    let status = h.status();
    let ranks = &status.jobs[0].ranks;
    assert!(!ranks[0].stalled);
    assert!(
        (ranks[0].iterations_per_second - 20.0).abs() < 1e-9,
        "{ranks:?}"
    );
    assert!(ranks[1].stalled, "{ranks:?}");
    assert_eq!(ranks[1].iterations_per_second, 0.0);
    assert!(ranks[1].silent_s >= 4.0, "{ranks:?}");
    let stats = h.core.stats(h.now);
    assert!(stats.jobs[0].ranks[1].stalled);
    assert!(!stats.jobs[0].ranks[0].stalled);
    // It reports again: no longer stalled.
    h.send(r1, progress(151));
    assert!(!h.status().jobs[0].ranks[1].stalled);
}

#[test]
fn given_waiter_disconnects_then_finish_is_not_sent_to_it() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 2);
    let c = h.controller();
    let request = accepted(&h.migrate(c, None, vec![mv(1, None)], true), c);
    h.core.handle_disconnected(h.now, c);
    let out = h.send(
        r0,
        ToDaemon::ReconfigurationFinished {
            request,
            outcome: completed(),
        },
    );
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn given_replacement_registers_before_old_rank_leaves_then_new_one_kept() {
    let mut h = Harness::new();
    let old = h.rank("job-1", 1, 2);
    let new = h.connect(ClientKind::Rank);
    h.send(new, register("job-1", 1, 2, true));
    h.core.handle_disconnected(h.now, old);
    let status = h.status();
    assert_eq!(status.jobs.len(), 1);
    assert!(status.jobs[0].ranks[0].replacement);
    // The old connection's later messages do not touch the new entry.
    h.send(
        new,
        ToDaemon::Progress {
            iteration: 5,
            reconfigurations: 0,
        },
    );
    assert_eq!(h.status().jobs[0].ranks[0].iteration, 5);
}

#[test]
fn given_unknown_report_then_ignored() {
    let mut h = Harness::new();
    let r = h.rank("job-1", 0, 1);
    let out = h.send(
        r,
        ToDaemon::ReconfigurationFinished {
            request: RequestId(1),
            outcome: completed(),
        },
    );
    assert!(out.is_empty());
}

#[test]
fn given_second_hello_then_bad_message() {
    let mut h = Harness::new();
    let c = h.controller();
    let out = h.send(
        c,
        ToDaemon::Hello {
            version: PROTOCOL_VERSION,
            client: ClientKind::Controller,
        },
    );
    assert_eq!(error_of(&out, c).0, ErrorKind::BadMessage);
    assert!(!closes(&out, c));
}

#[test]
fn given_registrations_with_long_host_names_then_status_always_fits_a_frame() {
    let mut h = Harness::with(Config::default().with_max_connections(usize::MAX));
    let long_host = "h".repeat(255);
    let mut refused = false;
    for rank in 0..4096 {
        let conn = h.connect(ClientKind::Rank);
        let out = h.send(
            conn,
            ToDaemon::Register {
                job: job(&format!("job-{rank}")),
                app: AppName::new("a".repeat(64)).unwrap(),
                rank: Rank(0),
                size: 1,
                host: host(&long_host),
                pid: 1,
                replacement: false,
                reconfigurations: 0,
            },
        );
        if out.iter().any(|o| {
            matches!(
                o,
                Output::Send {
                    message: FromDaemon::Error { .. },
                    ..
                }
            )
        }) {
            refused = true;
            break;
        }
    }
    assert!(refused, "the budget never applied");
    let status = h.status();
    let frame = pcm_proto::encode(&FromDaemon::Status(status));
    assert!(frame.len() - 4 <= pcm_proto::MAX_FRAME_LEN);
}

fn resize_to(ranks: u32) -> Resize {
    Resize {
        ranks,
        hosts: Vec::new(),
    }
}

impl Harness {
    fn resize(&mut self, conn: ConnId, ranks: u32, wait: bool) -> Vec<Output> {
        self.send(
            conn,
            ToDaemon::Migrate {
                job: None,
                moves: Vec::new(),
                wait,
                resize: Some(resize_to(ranks)),
            },
        )
    }

    /// A rank of protocol `version` registering as `rank` of `size` after `epoch`
    /// reconfigurations, with pid `pid`.
    fn rank_of(&mut self, version: u32, rank: u32, size: u32, epoch: u64, pid: u32) -> ConnId {
        let conn = self.core.handle_connected(self.now);
        self.send(
            conn,
            ToDaemon::Hello {
                version,
                client: ClientKind::Rank,
            },
        );
        let out = self.send(
            conn,
            ToDaemon::Register {
                job: job("job-1"),
                app: AppName::new("heat2d").unwrap(),
                rank: Rank(rank),
                size,
                host: host("node-a"),
                pid,
                replacement: false,
                reconfigurations: epoch,
            },
        );
        assert_eq!(
            out,
            vec![Output::Send {
                conn,
                message: FromDaemon::Registered
            }]
        );
        conn
    }

    /// The job's ranks here as (rank, pid), and its width.
    fn ranks_and_size(&mut self) -> (Vec<(u32, u32)>, u32) {
        let status = self.status();
        let job = &status.jobs[0];
        (
            job.ranks.iter().map(|r| (r.rank.0, r.pid)).collect(),
            job.size,
        )
    }
}

fn renumbered(rank: u32, size: u32, reconfigurations: u64) -> ToDaemon {
    ToDaemon::Renumbered {
        rank: Rank(rank),
        size,
        reconfigurations,
    }
}

/// A resize request reaches every rank of the job here with its resize, is in flight like
/// a migration, and a second one meanwhile is refused as busy, naming the first.
#[test]
fn given_a_resize_then_every_rank_gets_it_and_the_job_is_busy() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 2);
    let r1 = h.rank("job-1", 1, 2);
    let c = h.controller();
    let out = h.resize(c, 3, false);
    let request = accepted(&out, c);
    for r in [r0, r1] {
        assert!(out.contains(&Output::Send {
            conn: r,
            message: FromDaemon::ReconfigurationRequested {
                request,
                moves: Vec::new(),
                epoch: 0,
                resize: Some(resize_to(3)),
            }
        }));
    }
    let (kind, message) = error_of(&h.resize(c, 4, false), c);
    assert_eq!(kind, ErrorKind::Busy);
    assert!(
        message.contains(&format!("{request} in flight (resize to 3 ranks)")),
        "{message}"
    );
}

/// A width of 0 is refused at once, naming the job; nothing is delivered.
#[test]
fn given_a_resize_to_0_ranks_then_it_is_refused_and_nothing_is_delivered() {
    let mut h = Harness::new();
    h.rank("job-1", 0, 2);
    let c = h.controller();
    let out = h.resize(c, 0, true);
    let (kind, message) = error_of(&out, c);
    assert_eq!(kind, ErrorKind::BadMessage);
    assert!(
        message.contains("job job-1 cannot be resized to 0 ranks"),
        "{message}"
    );
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(h.status().jobs[0].in_flight, None);
}

/// A version-2 rank would drop the resize and see a request that moves nothing: the
/// daemon refuses to deliver it, naming the rank; migrations still go to it.
#[test]
fn given_a_rank_of_protocol_2_then_a_resize_is_refused_and_a_migration_is_not() {
    let mut h = Harness::new();
    h.rank_of(3, 0, 2, 0, 1000);
    h.rank_of(2, 1, 2, 0, 1001);
    let c = h.controller();
    let (kind, message) = error_of(&h.resize(c, 3, false), c);
    assert_eq!(kind, ErrorKind::Unsupported);
    assert!(
        message.contains("rank 1 (pid 1001) speaks pcmd protocol v2"),
        "{message}"
    );
    accepted(&h.migrate(c, None, vec![mv(1, None)], false), c);
}

/// Growing 2 -> 3: the added process registers with the new width (and the new epoch)
/// before the ranks that stay report; it is accepted, and once they tell their numbers the
/// status shows three ranks of a job of three.
#[test]
fn given_a_grow_then_the_added_rank_registers_and_the_status_shows_the_new_width() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 2);
    let r1 = h.rank("job-1", 1, 2);
    let c = h.controller();
    let request = accepted(&h.resize(c, 3, true), c);
    h.rank_of(PROTOCOL_VERSION, 2, 3, 1, 1002);
    assert_eq!(
        h.ranks_and_size(),
        (vec![(0, 1000), (1, 1001), (2, 1002)], 3)
    );
    let done = Outcome::Completed {
        iteration: 40,
        timings: PhaseTimings::default(),
        placed: vec![(Rank(2), host("node-a"))],
    };
    let out = h.send(
        r0,
        ToDaemon::ReconfigurationFinished {
            request,
            outcome: done.clone(),
        },
    );
    assert_eq!(finished_of(&out, c), (request, done));
    for (conn, rank) in [(r0, 0), (r1, 1)] {
        assert!(h.send(conn, renumbered(rank, 3, 1)).is_empty());
    }
    assert_eq!(
        h.ranks_and_size(),
        (vec![(0, 1000), (1, 1001), (2, 1002)], 3)
    );
    // Later requests use the new numbers.
    accepted(&h.migrate(c, None, vec![mv(2, None)], false), c);
}

/// Shrinking 3 -> 2 by giving back the host of rank 0: rank 1 becomes 0 and rank 2
/// becomes 1, their reports arriving in either order. The departed process is not shown
/// (it holds no rank any more), and its leaving changes nothing.
#[test]
fn given_a_shrink_that_renumbers_then_the_ranks_take_their_new_numbers_in_any_order() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 3);
    let r1 = h.rank("job-1", 1, 3);
    let r2 = h.rank("job-1", 2, 3);
    // Rank 2 (now 1) tells first: it takes number 1 from rank 1, which is set aside
    // until it tells its own.
    assert!(h.send(r2, renumbered(1, 2, 1)).is_empty());
    assert_eq!(h.ranks_and_size(), (vec![(0, 1000), (1, 1002)], 2));
    assert!(h.send(r1, renumbered(0, 2, 1)).is_empty());
    assert_eq!(h.ranks_and_size(), (vec![(0, 1001), (1, 1002)], 2));
    // The old rank 0 leaves the job; its messages touch nothing.
    h.send(
        r0,
        ToDaemon::Progress {
            iteration: 99,
            reconfigurations: 1,
        },
    );
    h.core.handle_disconnected(h.now, r0);
    assert_eq!(h.ranks_and_size(), (vec![(0, 1001), (1, 1002)], 2));
    // The renumbered connections report under their new numbers.
    h.send(
        r2,
        ToDaemon::Progress {
            iteration: 7,
            reconfigurations: 1,
        },
    );
    assert_eq!(h.status().jobs[0].ranks[1].iteration, 7);
    h.core.handle_disconnected(h.now, r1);
    h.core.handle_disconnected(h.now, r2);
    assert!(h.status().jobs.is_empty());
}

/// Shrinking 3 -> 2 by removing the highest rank: the width is known from the completed
/// request; the departing process is no rank of the job any more, before it leaves.
#[test]
fn given_a_completed_shrink_then_the_departing_rank_is_not_shown() {
    let mut h = Harness::new();
    let r0 = h.rank("job-1", 0, 3);
    h.rank("job-1", 1, 3);
    let r2 = h.rank("job-1", 2, 3);
    let c = h.controller();
    let request = accepted(&h.resize(c, 2, false), c);
    h.send(
        r2,
        ToDaemon::ReconfigurationFinished {
            request,
            outcome: completed_all(0),
        },
    );
    assert_eq!(h.ranks_and_size(), (vec![(0, 1000), (1, 1001)], 2));
    assert_eq!(h.status().jobs[0].migrations, 1);
    // A rank that stays tells the same: nothing changes.
    h.send(r0, renumbered(0, 2, 1));
    assert_eq!(h.ranks_and_size(), (vec![(0, 1000), (1, 1001)], 2));
    h.core.handle_disconnected(h.now, r2);
    assert_eq!(h.ranks_and_size(), (vec![(0, 1000), (1, 1001)], 2));
}

/// A registration with another width at the same epoch is still refused: only a newer
/// process (after a resize) may change the width the daemon knows.
#[test]
fn given_another_width_at_the_same_epoch_then_registration_is_refused() {
    let mut h = Harness::new();
    h.rank_of(PROTOCOL_VERSION, 0, 2, 3, 1000);
    let conn = h.connect(ClientKind::Rank);
    let out = h.send(
        conn,
        ToDaemon::Register {
            job: job("job-1"),
            app: AppName::new("heat2d").unwrap(),
            rank: Rank(2),
            size: 3,
            host: host("node-a"),
            pid: 1002,
            replacement: false,
            reconfigurations: 3,
        },
    );
    let (_, message) = error_of(&out, conn);
    assert!(
        message.contains("with 2 ranks (after 3 reconfigurations)"),
        "{message}"
    );
}
