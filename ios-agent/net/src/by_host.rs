//! Finding the agent of a host by the host's name, as a pure store tested without a swarm.
//!
//! Why (issue 42, item 3): an agent dials only some of the pool
//! ([`NetConfig::dial_agents`](crate::NetConfig::dial_agents)), so in a pool of more than a
//! few dozen nodes the hosts its job's ranks exchange with (their profiles' partners) are
//! often hosts it has no connection to; the model then cannot weigh those partners' latency
//! (`ios-agent`'s driver measures a partner host through the pings of a connection to its
//! agent). The core names partners by host, not by agent id, so a dial on request by id
//! ([`crate::on_request`]) is not enough.
//!
//! The directory is the peer servers themselves: besides the pool's namespace, every agent
//! that announces a host registers under that host's namespace ([`host_namespace`]), and a
//! lookup is one rendezvous discovery in it. Nothing new to run, and the answer is as fresh
//! as the registrations (renewed at half their TTL, gone when the agent unregisters on
//! leaving). Trust is the pool key's, as for the host an agent announces over identify: a
//! holder of the key could register under another host's name, but the driver takes a host
//! only from what the agent it connected to announces itself.
//!
//! Bounds: at most [`LookupPolicy::max_in_flight`] lookups at a time, each answered within
//! [`LookupPolicy::answer_timeout`] or counted as a miss; after a lookup the host rests
//! ([`LookupPolicy::rest`]; after misses in a row, doubling up to
//! [`LookupPolicy::max_rest`]) so that a driver asking at every sample sends one query per
//! rest at most; at most [`LookupPolicy::max_hosts`] hosts remembered. The dials that follow
//! a lookup go through [`OnRequest::connect`](crate::on_request::OnRequest::connect): rate,
//! cap and backoff as for any dial on request.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pcm_proto::HostName;
use sha2::{Digest as _, Sha256};

/// What separates the pool's namespace from a host's name in the host's namespace.
const HOST_INFIX: &str = "/host/";
/// The same, for a host whose name would make the namespace too long: its digest follows.
const DIGEST_INFIX: &str = "/host-sha256/";

/// The rendezvous namespace an agent on `host` registers under, in the pool whose namespace
/// is `pool`: `<pool>/host/<host>`, or, when that is longer than a namespace may be (255
/// bytes), `<pool>/host-sha256/<the first 16 bytes of the name's SHA-256, in hex>`. The same
/// on every agent of every version that looks hosts up, so it must never change.
pub fn host_namespace(pool: &str, host: &HostName) -> String {
    let plain = format!("{pool}{HOST_INFIX}{host}");
    if plain.len() <= libp2p::rendezvous::MAX_NAMESPACE {
        return plain;
    }
    let digest = Sha256::digest(host.as_str().as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{pool}{DIGEST_INFIX}{hex}")
}

/// The bounds of host lookups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupPolicy {
    /// Lookups waiting for their answer at the same time.
    pub max_in_flight: usize,
    /// Longest wait for an answer; then the lookup counts as a miss.
    pub answer_timeout: Duration,
    /// Wait after a lookup before the same host may be looked up again.
    pub rest: Duration,
    /// Longest wait, reached by doubling `rest` at each miss in a row.
    pub max_rest: Duration,
    /// Hosts remembered (those resting longest ago make room).
    pub max_hosts: usize,
}

impl Default for LookupPolicy {
    /// 4 lookups at a time, 10 s for an answer (a peer server across the world answers in
    /// well under a second); a host rests 5 s after a lookup that found its agent, 10 s,
    /// 20 s, ... up to 5 min after misses in a row (a host with no agent, whose name a
    /// profile keeps naming, costs one query per 5 min); 1,024 hosts (a few tens of kB).
    fn default() -> Self {
        LookupPolicy {
            max_in_flight: 4,
            answer_timeout: Duration::from_secs(10),
            rest: Duration::from_secs(5),
            max_rest: Duration::from_secs(300),
            max_hosts: 1024,
        }
    }
}

/// Why a host is not looked up now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAsked {
    /// A lookup of it waits for its answer.
    #[error("a lookup is under way")]
    InFlight,
    /// It was looked up lately.
    #[error("looked up lately; again in {left:?}")]
    Resting {
        /// Until it may be looked up again.
        left: Duration,
    },
    /// As many lookups as allowed wait for their answers.
    #[error("{0} lookups under way")]
    TooMany(usize),
}

#[derive(Debug)]
struct Entry {
    /// The namespace to query.
    namespace: String,
    /// When the lookup waiting for its answer was sent.
    asked: Option<Instant>,
    /// Until when it rests.
    rest_until: Instant,
    /// Lookups in a row that found no agent.
    misses: u32,
}

/// Host lookups; see the module documentation.
#[derive(Debug)]
pub struct HostLookups {
    policy: LookupPolicy,
    pool: String,
    hosts: HashMap<HostName, Entry>,
}

impl HostLookups {
    /// A store for the pool whose rendezvous namespace is `pool`.
    pub fn new(pool: &str, policy: LookupPolicy) -> Self {
        HostLookups {
            policy,
            pool: pool.to_owned(),
            hosts: HashMap::new(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> &LookupPolicy {
        &self.policy
    }

    /// Looks `host` up now if the bounds allow: the namespace to query, or why not. Report
    /// the answer with [`HostLookups::on_answer`] (or the lookup's failure with
    /// [`HostLookups::on_failed`]).
    pub fn ask(&mut self, host: &HostName, now: Instant) -> Result<String, NotAsked> {
        if let Some(e) = self.hosts.get(host) {
            if e.asked.is_some() {
                return Err(NotAsked::InFlight);
            }
            if now < e.rest_until {
                return Err(NotAsked::Resting {
                    left: e.rest_until - now,
                });
            }
        }
        let in_flight = self.in_flight();
        if in_flight >= self.policy.max_in_flight {
            return Err(NotAsked::TooMany(in_flight));
        }
        if !self.hosts.contains_key(host) && self.hosts.len() >= self.policy.max_hosts {
            // Not one waiting for its answer: there are fewer of those than max_hosts.
            let oldest = self
                .hosts
                .iter()
                .filter(|(_, e)| e.asked.is_none())
                .min_by(|a, b| (a.1.rest_until, a.0).cmp(&(b.1.rest_until, b.0)))
                .map(|(h, _)| h.clone());
            match oldest {
                Some(h) => {
                    self.hosts.remove(&h);
                }
                None => return Err(NotAsked::TooMany(in_flight)),
            }
        }
        let pool = &self.pool;
        let entry = self.hosts.entry(host.clone()).or_insert_with(|| Entry {
            namespace: host_namespace(pool, host),
            asked: None,
            rest_until: now,
            misses: 0,
        });
        entry.asked = Some(now);
        Ok(entry.namespace.clone())
    }

    /// The host whose lookup waits for an answer in `namespace`, if any.
    pub fn host_asked_in(&self, namespace: &str) -> Option<&HostName> {
        self.hosts
            .iter()
            .find(|(_, e)| e.asked.is_some() && e.namespace == namespace)
            .map(|(h, _)| h)
    }

    /// The answer to the lookup of `host`: `agents` agents registered under it. A host
    /// whose lookup no longer waits (it timed out) is left as it is.
    pub fn on_answer(&mut self, host: &HostName, agents: usize, now: Instant) {
        let rest = self.policy.rest;
        let max_rest = self.policy.max_rest.max(rest);
        let Some(e) = self.hosts.get_mut(host) else {
            return;
        };
        if e.asked.take().is_none() {
            return;
        }
        if agents > 0 {
            e.misses = 0;
            e.rest_until = now + rest;
        } else {
            e.misses = e.misses.saturating_add(1);
            e.rest_until = now + rest.saturating_mul(1u32 << e.misses.min(20)).min(max_rest);
        }
    }

    /// The lookup of `host` failed (the server refused it, or its connection was lost): a
    /// miss.
    pub fn on_failed(&mut self, host: &HostName, now: Instant) {
        self.on_answer(host, 0, now);
    }

    /// The hosts whose lookup went unanswered for the answer timeout by `now`: each counted
    /// as a miss.
    pub fn expire(&mut self, now: Instant) -> Vec<HostName> {
        let timeout = self.policy.answer_timeout;
        let late: Vec<HostName> = self
            .hosts
            .iter()
            .filter(|(_, e)| e.asked.is_some_and(|t| now >= t + timeout))
            .map(|(h, _)| h.clone())
            .collect();
        for h in &late {
            self.on_failed(h, now);
        }
        late
    }

    /// When the next unanswered lookup times out, if one waits.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.hosts
            .values()
            .filter_map(|e| e.asked.map(|t| t + self.policy.answer_timeout))
            .min()
    }

    /// Lookups waiting for their answer.
    pub fn in_flight(&self) -> usize {
        self.hosts.values().filter(|e| e.asked.is_some()).count()
    }

    /// Hosts remembered.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether no host is remembered.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> HostName {
        HostName::new(s).expect("valid")
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_host_namespace_is_the_pools_then_the_host_or_its_digest_when_too_long() {
        assert_eq!(
            host_namespace("mpi-ios", &host("node-7.example")),
            "mpi-ios/host/node-7.example"
        );
        let long = host(&"a".repeat(250));
        let ns = host_namespace("mpi-ios", &long);
        // sha256("a" x 250), first 16 bytes, computed with `printf 'a%.0s' $(seq 1 250) | sha256sum`.
        assert_eq!(ns, "mpi-ios/host-sha256/3f3e35e0a775d9b1d5ec2eccca06381c");
        assert!(ns.len() <= libp2p::rendezvous::MAX_NAMESPACE);
        // Two long names differ.
        assert_ne!(ns, host_namespace("mpi-ios", &host(&"b".repeat(250))));
    }

    #[test]
    fn a_host_is_asked_once_then_rests_and_misses_in_a_row_rest_longer_up_to_the_cap() {
        let t0 = Instant::now();
        let mut l = HostLookups::new("pool", LookupPolicy::default());
        let h = host("node-b");
        assert_eq!(l.ask(&h, t0), Ok("pool/host/node-b".to_owned()));
        assert_eq!(l.ask(&h, t0), Err(NotAsked::InFlight));
        assert_eq!(l.host_asked_in("pool/host/node-b"), Some(&h));
        assert_eq!(l.host_asked_in("pool/host/node-c"), None);
        // Found: rests 5 s.
        l.on_answer(&h, 1, t0 + secs(1));
        assert_eq!(l.host_asked_in("pool/host/node-b"), None);
        assert_eq!(
            l.ask(&h, t0 + secs(2)),
            Err(NotAsked::Resting { left: secs(4) })
        );
        assert!(l.ask(&h, t0 + secs(6)).is_ok());
        // Misses: 10 s, 20 s, ... capped at 300 s; a found agent resets them.
        let mut t = t0 + secs(6);
        for expected in [10, 20, 40, 80, 160, 300, 300] {
            l.on_answer(&h, 0, t);
            assert_eq!(
                l.ask(&h, t + secs(expected) - Duration::from_millis(1)),
                Err(NotAsked::Resting {
                    left: Duration::from_millis(1)
                })
            );
            t += secs(expected);
            assert!(l.ask(&h, t).is_ok(), "after {expected} s");
        }
        l.on_answer(&h, 2, t);
        assert!(l.ask(&h, t + secs(5)).is_ok());
    }

    #[test]
    fn lookups_under_way_are_bounded_and_an_unanswered_one_is_a_miss_after_the_timeout() {
        let t0 = Instant::now();
        let mut l = HostLookups::new("pool", LookupPolicy::default());
        for i in 0..4 {
            assert!(l.ask(&host(&format!("h{i}")), t0).is_ok());
        }
        assert_eq!(l.ask(&host("h4"), t0), Err(NotAsked::TooMany(4)));
        assert_eq!(l.poll_timeout(), Some(t0 + secs(10)));
        l.on_answer(&host("h0"), 1, t0 + secs(1));
        assert!(l.ask(&host("h4"), t0 + secs(1)).is_ok());
        assert!(l.expire(t0 + Duration::from_millis(9_999)).is_empty());
        let mut late = l.expire(t0 + secs(10));
        late.sort();
        assert_eq!(late, vec![host("h1"), host("h2"), host("h3")]);
        assert_eq!(l.in_flight(), 1);
        // A late answer changes nothing: the miss stands (rest 10 s from the timeout).
        l.on_answer(&host("h1"), 1, t0 + secs(11));
        assert_eq!(
            l.ask(&host("h1"), t0 + secs(11)),
            Err(NotAsked::Resting { left: secs(9) })
        );
        // A failed lookup is a miss too.
        l.on_failed(&host("h4"), t0 + secs(2));
        assert_eq!(
            l.ask(&host("h4"), t0 + secs(2)),
            Err(NotAsked::Resting { left: secs(10) })
        );
    }

    #[test]
    fn the_hosts_remembered_are_bounded_and_the_one_resting_longest_ago_makes_room() {
        let t0 = Instant::now();
        let policy = LookupPolicy {
            max_hosts: 3,
            max_in_flight: 3,
            ..LookupPolicy::default()
        };
        let mut l = HostLookups::new("pool", policy);
        for (i, s) in [3, 1, 2].into_iter().enumerate() {
            let h = host(&format!("h{i}"));
            assert!(l.ask(&h, t0).is_ok());
            l.on_answer(&h, 1, t0 + secs(s));
        }
        assert!(l.ask(&host("h3"), t0 + secs(4)).is_ok());
        assert_eq!(l.len(), 3);
        // h1's rest ended first (at 6 s): forgotten. Asked again, it makes h2 (7 s) go;
        // h0 (8 s) is remembered and still rests.
        assert!(l.ask(&host("h1"), t0 + secs(4)).is_ok());
        assert_eq!(
            l.ask(&host("h0"), t0 + secs(4)),
            Err(NotAsked::Resting { left: secs(4) })
        );
        assert!(l.ask(&host("h2"), t0 + secs(4)).is_ok(), "h2 was forgotten");
        assert_eq!(l.len(), 3);
        // Every remembered host waiting for an answer: a new one cannot make room.
        let mut full = HostLookups::new("pool", policy);
        for i in 0..3 {
            assert!(full.ask(&host(&format!("h{i}")), t0).is_ok());
        }
        assert_eq!(full.ask(&host("h9"), t0), Err(NotAsked::TooMany(3)));
    }
}
