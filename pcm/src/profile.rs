//! The rank's profile for pcmd: cumulative figures that follow the rank across migrations.
//!
//! The MPI traffic itself is counted by [`crate::interpose`]; this module adds the rest
//! (iterations, wall and CPU time, stored state size, resident memory) and turns it into the
//! [`RankProfile`] that the status path sends to pcmd ([`ToDaemon::Profile`]) when the
//! daemon link asks for one (about once a second, so the status path only reads one flag).
//!
//! A replacement process continues its predecessor's figures: the departing process sends
//! its profile along with its stored state, and the replacement adds its own counts to it.
//!
//! [`ToDaemon::Profile`]: pcm_proto::ToDaemon::Profile

use std::collections::BTreeMap;
use std::time::Instant;

use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use pcm_proto::{HostName, PeerTraffic, RankProfile};

use crate::config::variables::PROFILE_ENV;
use crate::error::PcmError;
use crate::interpose;
use crate::wire::encode_cbor;

/// Parses a [`PROFILE_ENV`] value: whether profiling is on.
pub(crate) fn parse_enabled(value: String) -> Result<bool, PcmError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "on" | "1" | "yes" => Ok(true),
        "off" | "0" | "no" => Ok(false),
        _ => Err(PcmError::Config {
            variable: PROFILE_ENV,
            value,
            reason: "expected `on` or `off`".into(),
        }),
    }
}

/// One rank's profile, as kept by its current process.
#[derive(Debug)]
pub(crate) struct Profiler {
    enabled: bool,
    /// The predecessors' cumulative figures when this process took the rank over (zero for
    /// a process started with the job).
    base: RankProfile,
    /// When this process took the rank (its `Pcm` was created).
    since: Instant,
    /// CPU time of this process when it took the rank, microseconds.
    cpu_at_start_us: u64,
    /// Bytes of the last stored state.
    state_bytes: u64,
    /// The job's slowest compute summed over the checks this process took part in, us.
    slowest_compute_us: u64,
    /// Time this process spent in the status checks' all-reduce, us: time inside MPI,
    /// mostly waiting for the slowest rank, which the interposed counters (the
    /// application's calls only) do not see.
    check_mpi_us: u64,
    /// Where the current span between two status checks began: when, and this process's
    /// time inside MPI then (us).
    span_start: (Instant, u64),
    /// Since when the job has had its current width ([`RankProfile::width_age_us`]).
    width_since: Instant,
}

impl Profiler {
    /// A profiler for a rank starting now, continuing `base`.
    pub(crate) fn new(enabled: bool, base: RankProfile) -> Self {
        let now = Instant::now();
        // A predecessor's width age goes on; a process started with the job (or after a
        // predecessor that did not say) counts from now.
        let width_age = std::time::Duration::from_micros(base.width_age_us.unwrap_or(0));
        Profiler {
            width_since: now.checked_sub(width_age).unwrap_or(now),
            enabled,
            state_bytes: base.state_bytes,
            base,
            since: Instant::now(),
            cpu_at_start_us: process_cpu_us(),
            slowest_compute_us: 0,
            check_mpi_us: 0,
            span_start: (Instant::now(), interpose::mpi_us().unwrap_or(0)),
        }
    }

    /// This rank's computing time (wall time outside the application's MPI calls) since
    /// the previous status check, microseconds, for the check to agree on the job's
    /// slowest ([`RankProfile::slowest_compute_us`]); 0 while profiling is off.
    pub(crate) fn span_compute_us(&self) -> u64 {
        let Some(mpi_now) = interpose::mpi_us().filter(|_| self.enabled) else {
            return 0;
        };
        let (began, mpi_then) = self.span_start;
        let wall = began.elapsed().as_micros() as u64;
        // Counters made anew within the span (a resize) started from 0.
        let mpi = mpi_now.checked_sub(mpi_then).unwrap_or(mpi_now);
        wall.saturating_sub(mpi)
    }

    /// Adds the job's slowest compute the check agreed on and the time its all-reduce
    /// took, and starts the next span.
    pub(crate) fn end_span(&mut self, slowest_compute_us: u64, reduce: std::time::Duration) {
        self.slowest_compute_us = self.slowest_compute_us.saturating_add(slowest_compute_us);
        if self.enabled {
            self.check_mpi_us = self.check_mpi_us.saturating_add(reduce.as_micros() as u64);
        }
        self.span_start = (Instant::now(), interpose::mpi_us().unwrap_or(0));
    }

    /// Notes that the job's width changed just now (a resize this process took part in).
    pub(crate) fn note_width_change(&mut self) {
        self.width_since = Instant::now();
    }

    /// Whether profiling is on.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Makes `world` the communicator whose ranks the traffic is counted by.
    pub(crate) fn attach(&self, world: &SimpleCommunicator) {
        interpose::attach(world.as_raw(), world.size() as u32, self.enabled);
    }

    /// Records the size of the state just stored.
    pub(crate) fn note_state_bytes(&mut self, bytes: u64) {
        self.state_bytes = bytes;
    }

    /// The rank's cumulative figures now, `iteration` status calls into the job, with each
    /// peer's host taken from `rank_hosts` (the job's placement, by rank; peers it does not
    /// cover get none).
    pub(crate) fn snapshot(&self, iteration: u64, rank_hosts: &[HostName]) -> RankProfile {
        let resident_us = self.since.elapsed().as_micros() as u64;
        let cpu_us = process_cpu_us().saturating_sub(self.cpu_at_start_us);
        let (traffic, collectives, mpi_us) = interpose::snapshot().unwrap_or_default();
        let mut peers: BTreeMap<u32, PeerTraffic> = self
            .base
            .traffic
            .iter()
            .map(|t| (t.peer.0, t.clone()))
            .collect();
        for t in traffic {
            peers
                .entry(t.peer.0)
                .and_modify(|p| {
                    p.sent_messages += t.sent_messages;
                    p.sent_bytes += t.sent_bytes;
                    p.received_messages += t.received_messages;
                    p.received_bytes += t.received_bytes;
                })
                .or_insert(t);
        }
        // Where each peer runs now, not where it ran when a predecessor counted.
        for p in peers.values_mut() {
            p.host = rank_hosts.get(p.peer.0 as usize).cloned();
        }
        let mut all_collectives = self.base.collectives;
        all_collectives.calls += collectives.calls;
        all_collectives.bytes += collectives.bytes;
        RankProfile {
            iteration,
            wall_us: self.base.wall_us + resident_us,
            cpu_us: self.base.cpu_us + cpu_us,
            // The status checks' waiting is time inside MPI too: counted as computing, it
            // made a rank that waits at a check for a slowed peer look like the straggler
            // (a job that checks about every iteration, as heat2d 2048 x 2048 does at
            // 0.6 CPU per rank, waits there rather than in its halo exchange).
            mpi_us: self.base.mpi_us + mpi_us + self.check_mpi_us,
            state_bytes: self.state_bytes,
            rss_bytes: resident_bytes(),
            resident_us,
            traffic: peers.into_values().collect(),
            collectives: all_collectives,
            // The job's declaration, not a measurement: the caller that reports to pcmd
            // fills it in (`Pcm::send_profile`); a replacement gets it with the state.
            malleable: None,
            home: rank_hosts.first().cloned(),
            slowest_compute_us: self
                .base
                .slowest_compute_us
                .saturating_add(self.slowest_compute_us),
            width_age_us: Some(self.width_since.elapsed().as_micros() as u64),
        }
    }

    /// Sends this rank's figures to its replacement, rank `to` of `comm` (the departing
    /// process does this right after its state).
    pub(crate) fn hand_over(&self, comm: &SimpleCommunicator, to: i32, iteration: u64) {
        // No placement: the replacement names the peers' hosts in its own reports.
        let bytes = encode_cbor(&self.snapshot(iteration, &[]));
        let process = comm.process_at_rank(to);
        process.send(&(bytes.len() as u64));
        process.send(&bytes[..]);
    }

    /// Receives the predecessor's figures from rank `from` of `comm` (see [`Self::hand_over`]).
    pub(crate) fn take_over(
        comm: &SimpleCommunicator,
        from: i32,
        enabled: bool,
    ) -> Result<Self, PcmError> {
        let process = comm.process_at_rank(from);
        let (len, _) = process.receive::<u64>();
        let mut bytes = vec![0u8; len as usize];
        process.receive_into(&mut bytes[..]);
        let base: RankProfile = ciborium::from_reader(bytes.as_slice())
            .map_err(|e| PcmError::Handover(format!("profile: {e}")))?;
        Ok(Profiler::new(enabled, base))
    }
}

/// CPU time (user + system) of this process, microseconds.
fn process_cpu_us() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000)
        .unwrap_or(0)
}

/// Resident memory of this process, bytes (0 if `/proc` cannot tell).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map_or(0, |kib| kib * 1024)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pcm_proto::{CollectiveTraffic, Rank};

    #[test]
    fn given_a_base_then_the_snapshot_continues_it() {
        let base = RankProfile {
            iteration: 10,
            wall_us: 5_000_000,
            cpu_us: 4_000_000,
            mpi_us: 1_000,
            state_bytes: 4096,
            traffic: vec![PeerTraffic {
                peer: Rank(1),
                host: Some(HostName::new("node-z").unwrap()),
                sent_messages: 10,
                sent_bytes: 80,
                received_messages: 10,
                received_bytes: 80,
            }],
            collectives: CollectiveTraffic {
                calls: 2,
                bytes: 16,
            },
            ..RankProfile::default()
        };
        let profiler = Profiler::new(false, base.clone());
        let hosts = ["node-a", "node-b"].map(|h| HostName::new(h).unwrap());
        let now = profiler.snapshot(11, &hosts);
        assert_eq!(now.iteration, 11);
        assert!(now.wall_us >= base.wall_us && now.cpu_us >= base.cpu_us);
        // The counts continue; the peer's host is where it runs now.
        let mut expected = base.traffic.clone();
        expected[0].host = Some(hosts[1].clone());
        assert_eq!(now.traffic, expected);
        // A peer outside the placement given has no host.
        assert_eq!(profiler.snapshot(11, &hosts[..1]).traffic[0].host, None);
        // Rank 0's host is the job's home; no placement, no home.
        assert_eq!(now.home, Some(hosts[0].clone()));
        assert_eq!(profiler.snapshot(11, &[]).home, None);
        assert_eq!(now.collectives, base.collectives);
        assert_eq!(now.state_bytes, 4096);
        assert!(now.rss_bytes > 0);
    }

    #[test]
    fn given_a_predecessors_width_age_then_it_goes_on_and_a_width_change_restarts_it() {
        let base = RankProfile {
            width_age_us: Some(40_000_000),
            ..RankProfile::default()
        };
        let mut profiler = Profiler::new(false, base);
        let age = |p: &Profiler| p.snapshot(1, &[]).width_age_us.unwrap();
        assert!((40_000_000..41_000_000).contains(&age(&profiler)));
        profiler.note_width_change();
        assert!(age(&profiler) < 1_000_000);
        // A process started with the job counts from its start.
        let fresh = Profiler::new(false, RankProfile::default());
        assert!(age(&fresh) < 1_000_000);
    }

    #[test]
    fn profile_setting_is_parsed_and_bad_values_named() {
        assert!(!parse_enabled("off".into()).unwrap());
        assert!(parse_enabled("On".into()).unwrap());
        let err = parse_enabled("sometimes".into()).unwrap_err().to_string();
        assert!(
            err.contains(PROFILE_ENV) && err.contains("sometimes"),
            "{err}"
        );
    }
}
