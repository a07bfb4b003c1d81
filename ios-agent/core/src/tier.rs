//! Peers grouped by round-trip time (section 5.2): local, regional, national, global.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Latency group of a peer. The paper's boundaries are in whole milliseconds
/// (local 0-10 ms, regional 11-100, national 101-250, global 251 and up); between them
/// the upper bound is inclusive: 10.0 ms is local, 10.4 ms regional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LatencyTier {
    /// RTT up to 10 ms.
    Local,
    /// RTT above 10 ms, up to 100 ms.
    Regional,
    /// RTT above 100 ms, up to 250 ms.
    National,
    /// RTT above 250 ms.
    Global,
}

/// Largest RTT of a local peer.
pub const LOCAL_MAX_RTT: Duration = Duration::from_millis(10);
/// Largest RTT of a regional peer.
pub const REGIONAL_MAX_RTT: Duration = Duration::from_millis(100);
/// Largest RTT of a national peer.
pub const NATIONAL_MAX_RTT: Duration = Duration::from_millis(250);

impl LatencyTier {
    /// Every tier, nearest first.
    pub const ALL: [LatencyTier; 4] = [
        LatencyTier::Local,
        LatencyTier::Regional,
        LatencyTier::National,
        LatencyTier::Global,
    ];

    /// The tier of a peer at this round-trip time.
    pub fn from_rtt(rtt: Duration) -> Self {
        if rtt <= LOCAL_MAX_RTT {
            LatencyTier::Local
        } else if rtt <= REGIONAL_MAX_RTT {
            LatencyTier::Regional
        } else if rtt <= NATIONAL_MAX_RTT {
            LatencyTier::National
        } else {
            LatencyTier::Global
        }
    }

    /// The next tier out, or `None` after global.
    pub fn next(self) -> Option<Self> {
        match self {
            LatencyTier::Local => Some(LatencyTier::Regional),
            LatencyTier::Regional => Some(LatencyTier::National),
            LatencyTier::National => Some(LatencyTier::Global),
            LatencyTier::Global => None,
        }
    }
}

/// Longest [`PeerId`], in bytes (a libp2p peer id is 38 bytes).
pub const MAX_PEER_ID_LEN: usize = 64;

/// Identity of an agent, as opaque bytes; the driver maps its transport's identities (libp2p
/// `PeerId::to_bytes`) to it. Ordered bytewise; NSc2c elects the lowest.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "Vec<u8>", into = "Vec<u8>")]
pub struct PeerId(Vec<u8>);

/// A peer id that is empty or longer than [`MAX_PEER_ID_LEN`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid peer id of {len} bytes: must be 1 to {MAX_PEER_ID_LEN} bytes")]
pub struct InvalidPeerId {
    /// Length given.
    pub len: usize,
}

impl PeerId {
    /// Validates and wraps peer id bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, InvalidPeerId> {
        let bytes = bytes.into();
        if bytes.is_empty() || bytes.len() > MAX_PEER_ID_LEN {
            return Err(InvalidPeerId { len: bytes.len() });
        }
        Ok(PeerId(bytes))
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl TryFrom<Vec<u8>> for PeerId {
    type Error = InvalidPeerId;
    fn try_from(bytes: Vec<u8>) -> Result<Self, InvalidPeerId> {
        PeerId::new(bytes)
    }
}

impl From<PeerId> for Vec<u8> {
    fn from(p: PeerId) -> Vec<u8> {
        p.0
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(&self.0) {
            Ok(s) if s.chars().all(|c| c.is_ascii_graphic()) => f.write_str(s),
            _ => {
                // libp2p ids start with a fixed multihash and key-type header: the tail is what
                // tells two peers apart.
                let tail = self.0.len().saturating_sub(6);
                if tail > 0 {
                    f.write_str("..")?;
                }
                for b in &self.0[tail..] {
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PeerId({self})")
    }
}

/// What the table knows of one peer.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerInfo {
    /// Smoothed round-trip time (exponential average, gain 1/8 as TCP's SRTT).
    pub srtt: Duration,
    /// Tier of `srtt`.
    pub tier: LatencyTier,
    /// When the last sample arrived.
    pub last_seen: Instant,
}

/// Known peers keyed by id, at most `capacity` of them; when full, a new peer replaces the
/// one heard from least recently.
#[derive(Debug, Clone)]
pub struct PeerTable {
    peers: HashMap<PeerId, PeerInfo>,
    capacity: usize,
}

impl PeerTable {
    /// An empty table holding at most `capacity` peers (at least 1).
    pub fn new(capacity: usize) -> Self {
        PeerTable {
            peers: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// Records an RTT sample, adding the peer if new (evicting the stalest peer when full).
    pub fn record_rtt(&mut self, now: Instant, peer: PeerId, rtt: Duration) {
        if let Some(info) = self.peers.get_mut(&peer) {
            // srtt = 7/8 srtt + 1/8 sample
            info.srtt = (info.srtt * 7 + rtt) / 8;
            info.tier = LatencyTier::from_rtt(info.srtt);
            info.last_seen = now;
            return;
        }
        if self.peers.len() >= self.capacity {
            if let Some(stalest) = self
                .peers
                .iter()
                .min_by(|a, b| a.1.last_seen.cmp(&b.1.last_seen).then(a.0.cmp(b.0)))
                .map(|(id, _)| id.clone())
            {
                self.peers.remove(&stalest);
            }
        }
        self.peers.insert(
            peer,
            PeerInfo {
                srtt: rtt,
                tier: LatencyTier::from_rtt(rtt),
                last_seen: now,
            },
        );
    }

    /// Forgets a peer; returns whether it was known.
    pub fn remove(&mut self, peer: &PeerId) -> bool {
        self.peers.remove(peer).is_some()
    }

    /// Forgets peers last heard from at or before `deadline`; returns how many.
    pub fn expire(&mut self, deadline: Instant) -> usize {
        let before = self.peers.len();
        self.peers.retain(|_, info| info.last_seen > deadline);
        before - self.peers.len()
    }

    /// What is known of one peer.
    pub fn get(&self, peer: &PeerId) -> Option<&PeerInfo> {
        self.peers.get(peer)
    }

    /// The tier of a known peer.
    pub fn tier(&self, peer: &PeerId) -> Option<LatencyTier> {
        self.peers.get(peer).map(|i| i.tier)
    }

    /// Peers of one tier, sorted by id (so that a seeded choice among them is replayable).
    pub fn in_tier(&self, tier: LatencyTier) -> Vec<&PeerId> {
        let mut v: Vec<&PeerId> = self
            .peers
            .iter()
            .filter(|(_, info)| info.tier == tier)
            .map(|(id, _)| id)
            .collect();
        v.sort();
        v
    }

    /// Number of known peers.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether no peer is known.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Oldest `last_seen`, to schedule expiry.
    pub fn oldest_seen(&self) -> Option<Instant> {
        self.peers.values().map(|i| i.last_seen).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn peer(s: &str) -> PeerId {
        PeerId::new(s.as_bytes()).expect("valid")
    }

    #[test]
    fn tiers_follow_the_papers_boundaries() {
        assert_eq!(LatencyTier::from_rtt(Duration::ZERO), LatencyTier::Local);
        assert_eq!(LatencyTier::from_rtt(ms(10)), LatencyTier::Local);
        assert_eq!(
            LatencyTier::from_rtt(ms(10) + Duration::from_micros(1)),
            LatencyTier::Regional
        );
        assert_eq!(LatencyTier::from_rtt(ms(11)), LatencyTier::Regional);
        assert_eq!(LatencyTier::from_rtt(ms(100)), LatencyTier::Regional);
        assert_eq!(LatencyTier::from_rtt(ms(101)), LatencyTier::National);
        assert_eq!(LatencyTier::from_rtt(ms(250)), LatencyTier::National);
        assert_eq!(LatencyTier::from_rtt(ms(251)), LatencyTier::Global);
        assert_eq!(LatencyTier::from_rtt(Duration::MAX), LatencyTier::Global);
        assert_eq!(LatencyTier::Local.next(), Some(LatencyTier::Regional));
        assert_eq!(LatencyTier::Global.next(), None);
    }

    #[test]
    fn peer_ids_are_checked() {
        assert!(PeerId::new(Vec::new()).is_err());
        assert!(PeerId::new(vec![0u8; MAX_PEER_ID_LEN + 1]).is_err());
        assert_eq!(peer("node-1").to_string(), "node-1");
        assert_eq!(
            PeerId::new(vec![0, 1, 2, 3, 4, 5, 6, 7, 8])
                .expect("valid")
                .to_string(),
            "..030405060708"
        );
    }

    #[test]
    fn rtt_is_smoothed_and_retiers() {
        let t0 = Instant::now();
        let mut table = PeerTable::new(4);
        table.record_rtt(t0, peer("a"), ms(2));
        assert_eq!(table.tier(&peer("a")), Some(LatencyTier::Local));
        // One outlier does not move the peer: 7/8 * 2 + 1/8 * 50 = 8 ms.
        table.record_rtt(t0, peer("a"), ms(50));
        assert_eq!(table.get(&peer("a")).map(|i| i.srtt), Some(ms(8)));
        assert_eq!(table.tier(&peer("a")), Some(LatencyTier::Local));
        // A sustained change does.
        for _ in 0..10 {
            table.record_rtt(t0, peer("a"), ms(50));
        }
        assert_eq!(table.tier(&peer("a")), Some(LatencyTier::Regional));
    }

    #[test]
    fn table_is_bounded_and_evicts_the_stalest() {
        let t0 = Instant::now();
        let mut table = PeerTable::new(2);
        table.record_rtt(t0, peer("a"), ms(1));
        table.record_rtt(t0 + ms(1), peer("b"), ms(1));
        table.record_rtt(t0 + ms(2), peer("a"), ms(1));
        table.record_rtt(t0 + ms(3), peer("c"), ms(1));
        assert_eq!(table.len(), 2);
        assert!(table.get(&peer("b")).is_none());
        assert_eq!(
            table.in_tier(LatencyTier::Local),
            vec![&peer("a"), &peer("c")]
        );
        assert_eq!(table.expire(t0 + ms(2)), 1);
        assert!(table.remove(&peer("c")));
        assert!(table.is_empty());
    }
}
