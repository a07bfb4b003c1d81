//! The daemon's profile book: the ranks' latest reports and their per-period figures.
//!
//! Pure, like [`crate::registry`] (which owns one): ranks report cumulative figures
//! ([`RankProfile`], about once a second); every stats period (default
//! [`DEFAULT_STATS_PERIOD`]) the driver closes a period with [`Book::handle_tick`], which
//! turns the difference between the latest report and the one at the previous tick into
//! rates (iterations per second, wall, CPU and MPI time per iteration) and records the node's
//! load. A query ([`pcm_proto::ToDaemon::QueryStats`]) returns the latest reports with the
//! rates of the last closed period (a period with no new report of a rank keeps that rank's
//! rates before it, once: the ranks' reports and the periods beat).
//!
//! Figures continue across migrations (a replacement reports its predecessor's counters plus
//! its own), so a rank's rates stay meaningful when its process changes.

use std::collections::BTreeMap;
use std::time::Duration;

use pcm_proto::{
    AppName, HostName, JobId, JobStats, NodeLoad, NodeStats, Rank, RankProfile, RankStats,
};

/// Default length of a stats period (2 s).
pub const DEFAULT_STATS_PERIOD: Duration = Duration::from_secs(2);

/// Rates of one rank over the last closed period.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    /// Iterations per second.
    pub iterations_per_second: f64,
    /// Wall time per iteration, microseconds.
    pub wall_per_iteration_us: f64,
    /// CPU time per iteration, microseconds.
    pub cpu_per_iteration_us: f64,
    /// Time inside MPI per iteration, microseconds.
    pub mpi_per_iteration_us: f64,
    /// The job's slowest rank's computing time per iteration, microseconds (0: unknown).
    pub slowest_compute_per_iteration_us: f64,
}

impl Rates {
    /// Rates between two cumulative reports of one rank; zero when no iteration ended or
    /// the reports are out of order.
    pub fn between(before: &RankProfile, after: &RankProfile) -> Rates {
        let iterations = after.iteration.saturating_sub(before.iteration);
        let wall = after.wall_us.saturating_sub(before.wall_us);
        if iterations == 0 || wall == 0 {
            return Rates::default();
        }
        let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / iterations as f64;
        Rates {
            iterations_per_second: iterations as f64 / (wall as f64 / 1e6),
            wall_per_iteration_us: wall as f64 / iterations as f64,
            cpu_per_iteration_us: per(after.cpu_us, before.cpu_us),
            mpi_per_iteration_us: per(after.mpi_us, before.mpi_us),
            slowest_compute_per_iteration_us: per(
                after.slowest_compute_us,
                before.slowest_compute_us,
            ),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    latest: RankProfile,
    /// The latest report as it was at the previous tick.
    at_tick: Option<RankProfile>,
    rates: Rates,
    /// Whether the last period closed with no new report and kept the rates before it.
    kept: bool,
}

/// Every rank's profile and the node's load. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Book {
    period: Duration,
    node: NodeLoad,
    ranks: BTreeMap<(JobId, Rank), Entry>,
}

impl Book {
    /// An empty book closing a period every `period`.
    pub fn new(period: Duration) -> Self {
        Book {
            period,
            node: NodeLoad::default(),
            ranks: BTreeMap::new(),
        }
    }

    // ----- getters -----

    /// Length of a period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The node's load over the last closed period (zeros until the first sample).
    pub fn node(&self) -> NodeLoad {
        self.node
    }

    /// The latest report of `rank` of `job` and its rates over the last closed period.
    pub fn rank(&self, job: &JobId, rank: Rank) -> Option<(&RankProfile, Rates)> {
        self.ranks
            .get(&(job.clone(), rank))
            .map(|e| (&e.latest, e.rates))
    }

    /// Number of ranks with a report.
    pub fn len(&self) -> usize {
        self.ranks.len()
    }

    /// Whether no rank has reported.
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }

    // ----- inputs -----

    /// A rank reported its cumulative figures. A report older than the one held (fewer
    /// iterations or less wall time, as from a process that lost the rank) is ignored.
    pub fn handle_profile(&mut self, job: &JobId, rank: Rank, profile: RankProfile) {
        match self.ranks.get_mut(&(job.clone(), rank)) {
            Some(entry) => {
                if profile.iteration >= entry.latest.iteration
                    && profile.wall_us >= entry.latest.wall_us
                {
                    entry.latest = profile;
                }
            }
            None => {
                self.ranks.insert(
                    (job.clone(), rank),
                    Entry {
                        latest: profile,
                        at_tick: None,
                        rates: Rates::default(),
                        kept: false,
                    },
                );
            }
        }
    }

    /// The process that reported as `from` of `job` is `to` from now on (a resize renumbered
    /// it): its figures go with it, replacing whatever `to` held (a process that left).
    pub fn renumber(&mut self, job: &JobId, from: Rank, to: Rank) {
        if from == to {
            return;
        }
        let moved = self.ranks.remove(&(job.clone(), from));
        self.ranks.remove(&(job.clone(), to));
        if let Some(entry) = moved {
            self.ranks.insert((job.clone(), to), entry);
        }
    }

    /// Closes a period: each rank's rates become those between its report at the previous
    /// tick (or its first report) and its latest; `load` (if the node could be sampled)
    /// becomes the node's load.
    pub fn handle_tick(&mut self, load: Option<NodeLoad>) {
        if let Some(load) = load {
            self.node = load;
        }
        for entry in self.ranks.values_mut() {
            let before = entry.at_tick.as_ref().unwrap_or(&entry.latest);
            let rates = Rates::between(before, &entry.latest);
            // Ranks report about once a second, and a period is often about as long: one
            // period with no new report is the two clocks' beat, not a rank that stopped
            // (the agents saw one sample in 12 at zero, and refused a grow on it). It keeps
            // the rates before it, once; a rank that reported nothing new for two periods
            // gets zeros, not stale speed (and pcmd calls it stalled after
            // `STALLED_AFTER_S`).
            let nothing_new = rates == Rates::default() && entry.at_tick.is_some();
            if nothing_new && !entry.kept && entry.rates != Rates::default() {
                entry.kept = true;
            } else {
                entry.rates = rates;
                entry.kept = false;
            }
            entry.at_tick = Some(entry.latest.clone());
        }
    }

    /// `job`'s resize limits as its ranks among `ranks` last reported them (the first that
    /// reported any, in the order given; every rank declares the same ones, and PCM refuses
    /// a process whose declaration differs); `None` if none did.
    pub fn malleability(
        &self,
        job: &JobId,
        ranks: impl IntoIterator<Item = Rank>,
    ) -> Option<pcm_proto::Malleability> {
        ranks
            .into_iter()
            .find_map(|rank| self.rank(job, rank).and_then(|(p, _)| p.malleable))
    }

    /// Drops the reports of a rank that left this node.
    pub fn forget(&mut self, job: &JobId, rank: Rank) {
        self.ranks.remove(&(job.clone(), rank));
    }
}

/// A registered job, as the registry lends it to [`node_stats`].
#[derive(Debug)]
pub struct JobView<'a> {
    /// The job.
    pub job: &'a JobId,
    /// Its application.
    pub app: &'a AppName,
    /// Ranks in the whole job.
    pub size: u32,
    /// Its ranks registered here, ordered by rank.
    pub ranks: Vec<RankView<'a>>,
}

/// A registered rank, as the registry lends it to [`node_stats`].
#[derive(Debug)]
pub struct RankView<'a> {
    /// Rank number.
    pub rank: Rank,
    /// Host of the process.
    pub host: &'a HostName,
    /// Process id.
    pub pid: u32,
    /// Whether the process replaced another.
    pub replacement: bool,
    /// Whether the rank has stopped reporting (see [`pcm_proto::RankStatus::stalled`]).
    pub stalled: bool,
}

/// The answer to a stats query: every registered rank (with an empty profile if it has not
/// reported, as with `PCM_PROFILE=off`) and the node's load.
///
/// If the traffic matrices would not fit in one frame (thousands of ranks all talking to
/// each other), they are left out, with a warning, rather than failing the query.
pub fn node_stats(host: HostName, book: &Book, jobs: Vec<JobView<'_>>) -> NodeStats {
    let jobs = jobs
        .into_iter()
        .map(|job| JobStats {
            job: job.job.clone(),
            app: job.app.clone(),
            size: job.size,
            malleable: book.malleability(job.job, job.ranks.iter().map(|r| r.rank)),
            ranks: job
                .ranks
                .into_iter()
                .map(|r| {
                    let (profile, mut rates) = book
                        .rank(job.job, r.rank)
                        .map(|(p, rates)| (p.clone(), rates))
                        .unwrap_or_default();
                    if r.stalled {
                        // A rank that stopped reporting has no current figures; its last
                        // period's would read as a rank still working.
                        rates = Rates::default();
                    }
                    RankStats {
                        rank: r.rank,
                        host: r.host.clone(),
                        pid: r.pid,
                        replacement: r.replacement,
                        profile,
                        iterations_per_second: rates.iterations_per_second,
                        wall_per_iteration_us: rates.wall_per_iteration_us,
                        cpu_per_iteration_us: rates.cpu_per_iteration_us,
                        mpi_per_iteration_us: rates.mpi_per_iteration_us,
                        slowest_compute_per_iteration_us: rates.slowest_compute_per_iteration_us,
                        stalled: r.stalled,
                    }
                })
                .collect(),
        })
        .collect();
    let mut stats = NodeStats {
        host,
        period_s: book.period().as_secs_f64(),
        node: book.node(),
        jobs,
    };
    if encoded_len(&stats) > pcm_proto::MAX_FRAME_LEN {
        tracing::warn!("stats reply too large for one frame; leaving the traffic matrices out");
        for rank in stats.jobs.iter_mut().flat_map(|j| j.ranks.iter_mut()) {
            rank.profile.traffic.clear();
        }
    }
    stats
}

/// Bytes of the CBOR encoding of `value`, without keeping them.
fn encoded_len<T: serde::Serialize>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match ciborium::into_writer(value, &mut count) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn report(iteration: u64, wall_s: f64, cpu_s: f64, mpi_s: f64) -> RankProfile {
        RankProfile {
            iteration,
            wall_us: (wall_s * 1e6) as u64,
            cpu_us: (cpu_s * 1e6) as u64,
            mpi_us: (mpi_s * 1e6) as u64,
            ..RankProfile::default()
        }
    }

    #[test]
    fn given_reports_across_ticks_then_rates_cover_the_last_period() {
        let job = JobId::new("job-1").unwrap();
        let mut book = Book::new(DEFAULT_STATS_PERIOD);
        book.handle_profile(&job, Rank(0), report(100, 1.0, 0.9, 0.1));
        book.handle_tick(None);
        // First period: nothing to compare with yet.
        assert_eq!(book.rank(&job, Rank(0)).unwrap().1, Rates::default());
        book.handle_profile(&job, Rank(0), report(200, 2.0, 1.7, 0.3));
        book.handle_profile(&job, Rank(0), report(500, 3.0, 2.5, 0.5));
        let load = NodeLoad {
            cores: 2.0,
            ..NodeLoad::default()
        };
        book.handle_tick(Some(load));
        let (latest, rates) = book.rank(&job, Rank(0)).unwrap();
        assert_eq!(latest.iteration, 500);
        assert!(
            (rates.iterations_per_second - 200.0).abs() < 1e-9,
            "{rates:?}"
        );
        assert!((rates.wall_per_iteration_us - 5000.0).abs() < 1e-6);
        assert!((rates.cpu_per_iteration_us - 4000.0).abs() < 1e-6);
        assert!((rates.mpi_per_iteration_us - 1000.0).abs() < 1e-6);
        assert_eq!(book.node().cores, 2.0);
        // One period with no report (the ranks' reports and the periods beat): the
        // rates before it; a second one: zeros, not the old speed.
        let before = book.rank(&job, Rank(0)).unwrap().1;
        book.handle_tick(None);
        assert_eq!(book.rank(&job, Rank(0)).unwrap().1, before);
        book.handle_tick(None);
        assert_eq!(book.rank(&job, Rank(0)).unwrap().1, Rates::default());
    }

    #[test]
    fn given_an_older_report_then_it_is_ignored_and_forget_drops_the_rank() {
        let job = JobId::new("job-1").unwrap();
        let mut book = Book::new(DEFAULT_STATS_PERIOD);
        book.handle_profile(&job, Rank(1), report(300, 3.0, 3.0, 0.0));
        book.handle_profile(&job, Rank(1), report(200, 2.0, 2.0, 0.0));
        assert_eq!(book.rank(&job, Rank(1)).unwrap().0.iteration, 300);
        book.forget(&job, Rank(1));
        assert!(book.is_empty());
    }
}
