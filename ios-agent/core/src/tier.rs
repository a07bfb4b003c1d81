//! Peers grouped by round-trip time (section 5.2): local, regional, national, global.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::hash::BuildHasherDefault;
use std::sync::Arc;
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

/// The hasher of the maps an agent keys by [`PeerId`] or host name on every RTT sample and
/// every message (the peer table's index, the announced hosts, the cluster's heard peers):
/// rustc's fast, unkeyed "Fx" hash (the `rustc-hash` crate). std's keyed SipHash was a
/// tenth of the simulator's time at 10,000 nodes. Unkeyed is safe here because every such
/// map is bounded by the peer table's size (`max_peers`, twice that for hosts): ids chosen
/// to collide cost at most a scan of that many entries. Nothing depends on these maps'
/// iteration order (with SipHash it was random in every process, and runs replay exactly
/// from their seed).
pub type IdHasher = rustc_hash::FxHasher;

/// A map keyed by peer ids or host names, with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// Longest [`PeerId`], in bytes (a libp2p peer id is 38 bytes).
pub const MAX_PEER_ID_LEN: usize = 64;

/// Identity of an agent, as opaque bytes; the driver maps its transport's identities (libp2p
/// `PeerId::to_bytes`) to it. Ordered bytewise; NSc2c elects the lowest.
///
/// The bytes are shared (`Arc<[u8]>`), not owned by each copy (`Vec<u8>` before): an agent
/// copies ids into its tables and messages all the time, and compares them on every RTT
/// sample, message and election. With a `Vec` each copy was an allocation and each
/// comparison a `memcmp` through a pointer into a cold heap block of its own (a quarter of
/// the simulator's time at 10,000 nodes). Shared, a copy is a reference count, copies of one
/// id compare equal by address without reading the bytes, and all copies of an id read the
/// same bytes (in the simulator, 10,000 small blocks that stay in cache). Equality, order
/// and hash are those of the byte string (the hash is the slice's, as the `Vec`'s was, so
/// hash maps lay out and iterate exactly as before).
///
/// The first eight bytes are also kept inline (`PeerId::head`), so that two different ids
/// nearly always compare, and a short id (up to eight bytes, as in the simulator) compares
/// and hashes, without reading the shared bytes: every such read was a cache miss into
/// another agent's id at 10,000 simulated nodes (the tiers' ordered sets compare ids all
/// the way down, the election and the cluster's member lists sort them).
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "Vec<u8>", into = "Vec<u8>")]
pub struct PeerId {
    /// The first [`HEAD_LEN`] bytes, big-endian, zero-padded: ids whose heads differ are
    /// ordered as their heads are (at the first byte that differs, a padding zero stands
    /// for the end of the shorter id, which sorts first as a zero byte would).
    head: u64,
    bytes: Arc<[u8]>,
}

/// Bytes of an id kept inline in [`PeerId::head`].
const HEAD_LEN: usize = 8;

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
        let mut head = [0u8; HEAD_LEN];
        let n = bytes.len().min(HEAD_LEN);
        head[..n].copy_from_slice(&bytes[..n]);
        Ok(PeerId {
            head: u64::from_be_bytes(head),
            bytes: bytes.into(),
        })
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// `f` of the bytes, read from the inline head for a short id: the shared bytes are
    /// another allocation, often a cache miss. (Only the simulator needs it.)
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        if self.is_short() {
            f(&self.head.to_be_bytes()[..self.bytes.len()])
        } else {
            f(&self.bytes)
        }
    }

    /// Whether the head holds every byte of the id (the length is in the shared pointer
    /// itself: reading it reads no shared bytes).
    fn is_short(&self) -> bool {
        self.bytes.len() <= HEAD_LEN
    }
}

// Ids are short (a few bytes in the simulator, 38 for libp2p): the bytes are compared in a
// loop, which the compiler keeps inline, rather than by `[u8]`'s `memcmp` call (7% of the
// simulator's time at 10,000 nodes, for ids of 3 to 6 bytes).
impl PartialEq for PeerId {
    fn eq(&self, other: &Self) -> bool {
        if self.head != other.head || self.bytes.len() != other.bytes.len() {
            return false;
        }
        self.is_short()
            || Arc::ptr_eq(&self.bytes, &other.bytes)
            || self.bytes[HEAD_LEN..]
                .iter()
                .zip(other.bytes[HEAD_LEN..].iter())
                .all(|(a, b)| a == b)
    }
}

impl Eq for PeerId {}

impl Ord for PeerId {
    /// Bytewise, a prefix first: as `[u8]`.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if self.head != other.head {
            return self.head.cmp(&other.head);
        }
        // Equal heads: of two short ids the shorter is a prefix of the other.
        if self.is_short() && other.is_short() {
            return self.bytes.len().cmp(&other.bytes.len());
        }
        if Arc::ptr_eq(&self.bytes, &other.bytes) {
            return std::cmp::Ordering::Equal;
        }
        self.bytes
            .iter()
            .zip(other.bytes.iter())
            .find(|(a, b)| a != b)
            .map_or_else(
                || self.bytes.len().cmp(&other.bytes.len()),
                |(a, b)| a.cmp(b),
            )
    }
}

impl PartialOrd for PeerId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::hash::Hash for PeerId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // The byte string's hash, as the `Vec` it replaced had; a short id's bytes are
        // those of its head.
        if self.is_short() {
            self.head.to_be_bytes()[..self.bytes.len()].hash(state);
        } else {
            self.bytes[..].hash(state);
        }
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
        p.bytes.to_vec()
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(self.as_bytes()) {
            Ok(s) if s.chars().all(|c| c.is_ascii_graphic()) => f.write_str(s),
            _ => {
                // libp2p ids start with a fixed multihash and key-type header: the tail is what
                // tells two peers apart.
                let bytes = self.as_bytes();
                let tail = bytes.len().saturating_sub(6);
                if tail > 0 {
                    f.write_str("..")?;
                }
                for b in &bytes[tail..] {
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

/// How long the least RTT seen stands for a peer's latency ([`PeerInfo::min_rtt`]): ten
/// samples at the default ping interval, as BBR keeps its minimum for ten seconds.
pub const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);

/// Time constant of the smoothed RTT ([`PeerInfo::srtt`]): a sample's weight is
/// `1 - exp(-gap / SRTT_TIME_CONSTANT)`, where `gap` is the time since the peer's previous
/// sample, and at least TCP's 1/8 (which it equals for samples a second apart).
///
/// Why by time: after its first fast pings an agent pings each peer every `connections /
/// budget` seconds (up to 30 s). With a fixed 1/8, the first pings of a connection, taken
/// while a pool's agents all start and handshake at once, stayed in the average for
/// minutes: at N = 100 (`mpi-ios-bench pool`) the agents' first pings across sites took
/// 400-1,000 ms, their later ones the emulated 33 / 160 / 400 ms, and the smoothed RTTs
/// after a minute of idling were still 550 / 710 / 900 ms (the model's communication term
/// read this RTT then; it reads the least RTT now, `Shared::rtt_to_host`). A sample 30 s
/// after the last now weighs 0.98.
pub const SRTT_TIME_CONSTANT: Duration = Duration::from_secs(8);

/// Fixed-point unit of [`srtt_gain`]: integer arithmetic keeps a steady RTT's average
/// exactly where it is (the simulator's RTTs are fixed per pair).
const GAIN_ONE: u128 = 1 << 16;

/// A new sample's weight in the smoothed RTT after `gap` without samples, in
/// [`GAIN_ONE`] units: `1 - exp(-gap / SRTT_TIME_CONSTANT)`, at least 1/8.
fn srtt_gain(gap: Duration) -> u128 {
    let weight = 1.0 - (-gap.as_secs_f64() / SRTT_TIME_CONSTANT.as_secs_f64()).exp();
    let gain = (weight * GAIN_ONE as f64) as u128;
    gain.clamp(GAIN_ONE / 8, GAIN_ONE)
}

/// `srtt` moved towards `sample` by `gain` ([`GAIN_ONE`] units), to the nanosecond.
fn smoothed(srtt: Duration, sample: Duration, gain: u128) -> Duration {
    let mixed = (srtt.as_nanos() * (GAIN_ONE - gain) + sample.as_nanos() * gain) / GAIN_ONE;
    Duration::from_nanos(u64::try_from(mixed).unwrap_or(u64::MAX))
}

/// What the table knows of one peer.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerInfo {
    /// Smoothed round-trip time: an exponential average whose gain grows with the time
    /// since the last sample ([`SRTT_TIME_CONSTANT`]; 1/8, TCP's SRTT gain, for samples a
    /// second apart).
    pub srtt: Duration,
    /// Least RTT seen in the last [`MIN_RTT_WINDOW`] or so: the path's latency, without the
    /// queueing and scheduling delays that only ever add to a sample. A first ping taken
    /// while the machine is busy (agents starting) can be ten times the path's RTT, and the
    /// smoothed RTT then needs many samples to come down; the minimum takes the next one.
    pub min_rtt: Duration,
    /// When `min_rtt` was taken.
    pub min_rtt_at: Instant,
    /// Tier of `min_rtt`.
    pub tier: LatencyTier,
    /// When the last sample arrived.
    pub last_seen: Instant,
}

/// Known peers keyed by id, at most `capacity` of them. When the table is full, a new peer
/// replaces the farthest one (highest smoothed RTT) if it is nearer, and is left out
/// otherwise: which peers stay depends on latency only, never on the order in which samples
/// arrive, so a near peer is never dropped for a far one. Dead peers leave by
/// [`PeerTable::expire`].
///
/// Every operation is logarithmic in the table's size or linear in what it returns: the
/// table keeps its peers indexed by last sample, by RTT and by tier.
#[derive(Debug, Clone)]
pub struct PeerTable {
    /// Peer to its slot in `slots`; the ordered indexes hold slots, not ids, so that they
    /// compare integers and never copy an id.
    index: IdMap<PeerId, u32>,
    slots: Vec<Option<(PeerId, PeerInfo)>>,
    free: Vec<u32>,
    /// The peers' last samples, oldest first (see [`SeenQueue`]).
    by_seen: SeenQueue,
    /// The oldest live sample's instant, kept beside `by_seen`: the driver (and the
    /// simulator) asks for it after every input to schedule expiry
    /// ([`PeerTable::oldest_seen`]), and reading it from the cold queue (or, before, walking
    /// a tree down to its first leaf) was most of `Agent::poll_timeout` and 7% of the
    /// simulator's time at 10,000 nodes.
    oldest_seen: Option<Instant>,
    /// What `by_seen` stood for before it was a queue: every slot's (last sample, slot) in
    /// order. Kept in tests only, to check the queue against it after every change.
    #[cfg(test)]
    seen_model: BTreeSet<(Instant, u32)>,
    by_rtt: BTreeSet<(Duration, u32)>,
    tiers: [TierIds; 4],
    capacity: usize,
    /// Bumped whenever what [`PeerTable::by_rtt`] yields changes (a peer added or removed,
    /// a smoothed RTT changed) or a peer's least RTT does, never for a sample that only
    /// refreshes `last_seen`: so that what an agent derives from the peers and their RTTs
    /// (the RTTs a work steal carries) is recomputed only when it can differ.
    version: u64,
}

fn tier_index(tier: LatencyTier) -> usize {
    match tier {
        LatencyTier::Local => 0,
        LatencyTier::Regional => 1,
        LatencyTier::National => 2,
        LatencyTier::Global => 3,
    }
}

impl PeerTable {
    /// An empty table holding at most `capacity` peers (at least 1).
    pub fn new(capacity: usize) -> Self {
        PeerTable {
            index: IdMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            by_seen: SeenQueue::default(),
            oldest_seen: None,
            #[cfg(test)]
            seen_model: BTreeSet::new(),
            by_rtt: BTreeSet::new(),
            tiers: Default::default(),
            capacity: capacity.max(1),
            version: 0,
        }
    }

    /// Records an RTT sample, adding the peer if new. When the table is full, a new peer
    /// evicts the farthest one if it is nearer than it, and is not added otherwise. Returns
    /// whether the set of peers or a peer's tier changed. The id is borrowed, and copied only
    /// for a new peer or a new tier: samples of known peers are nearly all of them.
    pub fn record_rtt(&mut self, now: Instant, peer: &PeerId, rtt: Duration) -> bool {
        self.record_rtt_evicting(now, peer, rtt).is_some()
    }

    /// [`PeerTable::record_rtt`], telling what changed: `None` if neither the set of peers
    /// nor a tier did, else the farthest peer the sampled one evicted, if it did. Only the
    /// sampled peer and that one can have changed, so that the agent need not check every
    /// peer it keeps state of against the table (see `Agent::c2c_peer_changed`).
    pub(crate) fn record_rtt_evicting(
        &mut self,
        now: Instant,
        peer: &PeerId,
        rtt: Duration,
    ) -> Option<Option<PeerId>> {
        if let Some(&slot) = self.index.get(peer) {
            let (_, info) = self.slots[slot as usize].as_mut()?;
            #[cfg(test)]
            self.seen_model.remove(&(info.last_seen, slot));
            // A sample equal to the average leaves it (the simulator's every sample, fed
            // for every peer each round: no exp() there).
            let srtt = if rtt == info.srtt {
                rtt
            } else {
                let gain = srtt_gain(now.saturating_duration_since(info.last_seen));
                smoothed(info.srtt, rtt, gain)
            };
            // A steady RTT leaves the smoothed one where it is (always so in the simulator,
            // whose RTTs are fixed per pair): then the RTT index and the version stay.
            if srtt != info.srtt {
                self.by_rtt.remove(&(info.srtt, slot));
                self.by_rtt.insert((srtt, slot));
                info.srtt = srtt;
                self.version += 1;
            }
            info.last_seen = now;
            let min_before = info.min_rtt;
            if rtt <= info.min_rtt {
                info.min_rtt = rtt;
                info.min_rtt_at = now;
            } else if now.saturating_duration_since(info.min_rtt_at) >= MIN_RTT_WINDOW {
                // The old minimum may be from a path that changed: start again, from the
                // smoothed RTT if this sample is a spike.
                info.min_rtt = rtt.min(info.srtt);
                info.min_rtt_at = now;
            }
            if info.min_rtt != min_before {
                self.version += 1;
            }
            let tier = LatencyTier::from_rtt(info.min_rtt);
            let retiered = tier != info.tier;
            if retiered {
                self.tiers[tier_index(info.tier)].remove(peer);
                self.tiers[tier_index(tier)].insert(peer);
                info.tier = tier;
            }
            self.by_seen.push(now, slot);
            #[cfg(test)]
            self.seen_model.insert((now, slot));
            self.seen_changed();
            return retiered.then_some(None);
        }
        let mut evicted = None;
        if self.index.len() >= self.capacity {
            let &(far_rtt, far) = self.by_rtt.last()?;
            if rtt >= far_rtt {
                return None;
            }
            if let Some((far, _)) = self.slots[far as usize].clone() {
                self.remove(&far);
                evicted = Some(far);
            }
        }
        let tier = LatencyTier::from_rtt(rtt);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        self.by_seen.push(now, slot);
        #[cfg(test)]
        self.seen_model.insert((now, slot));
        self.seen_changed();
        self.by_rtt.insert((rtt, slot));
        self.version += 1;
        self.tiers[tier_index(tier)].insert(peer);
        self.index.insert(peer.clone(), slot);
        self.slots[slot as usize] = Some((
            peer.clone(),
            PeerInfo {
                srtt: rtt,
                min_rtt: rtt,
                min_rtt_at: now,
                tier,
                last_seen: now,
            },
        ));
        Some(evicted)
    }

    /// Forgets a peer; returns whether it was known.
    pub fn remove(&mut self, peer: &PeerId) -> bool {
        let Some(slot) = self.index.remove(peer) else {
            return false;
        };
        if let Some((_, info)) = self.slots[slot as usize].take() {
            self.by_seen.forget(slot);
            #[cfg(test)]
            self.seen_model.remove(&(info.last_seen, slot));
            self.by_rtt.remove(&(info.srtt, slot));
            self.tiers[tier_index(info.tier)].remove(peer);
            self.seen_changed();
        }
        self.free.push(slot);
        self.version += 1;
        true
    }

    /// Forgets peers last heard from at or before `deadline`; returns how many.
    pub fn expire(&mut self, deadline: Instant) -> usize {
        // Nearly always nobody is due: tell from the kept oldest instant, without walking
        // the (cold) tree to its first leaf.
        if self.oldest_seen().is_none_or(|oldest| oldest > deadline) {
            return 0;
        }
        // In (instant, slot) order, as the tree of samples gave them: the order slots are
        // freed in is the order they are taken again.
        let due = self.by_seen.due(deadline);
        for &(_, slot) in &due {
            match self.slots[slot as usize].as_ref().map(|(p, _)| p.clone()) {
                Some(peer) => {
                    self.remove(&peer);
                }
                None => {
                    self.by_seen.forget(slot);
                    self.seen_changed();
                }
            }
        }
        due.len()
    }

    /// What is known of one peer.
    pub fn get(&self, peer: &PeerId) -> Option<&PeerInfo> {
        let slot = *self.index.get(peer)?;
        self.slots[slot as usize].as_ref().map(|(_, info)| info)
    }

    /// The tier of a known peer.
    pub fn tier(&self, peer: &PeerId) -> Option<LatencyTier> {
        self.get(peer).map(|i| i.tier)
    }

    /// Peers of one tier, sorted by id (so that a seeded choice among them is replayable).
    pub fn in_tier(&self, tier: LatencyTier) -> Vec<&PeerId> {
        self.tiers[tier_index(tier)].iter().collect()
    }

    /// The peers of one tier in id order, starting after `after` (from the first if
    /// `None`, or if `after` sorts last) and wrapping around once: a round-robin turn
    /// without collecting and filtering the whole tier each time.
    pub fn in_tier_after<'a>(
        &'a self,
        tier: LatencyTier,
        after: Option<&'a PeerId>,
    ) -> impl Iterator<Item = &'a PeerId> + 'a {
        let ids = &self.tiers[tier_index(tier)].0;
        // The peers after `after`, then those up to it.
        let split = after.map_or(0, |after| ids.partition_point(|p| p <= after));
        ids[split..].iter().chain(ids[..split].iter())
    }

    /// [`PeerTable::in_tier`] without the peers in `exclude` (in the same order). Each
    /// excluded id is looked up once; the tier's peers are then told apart by address, not
    /// by comparing ids.
    pub fn in_tier_except(&self, tier: LatencyTier, exclude: &[&PeerId]) -> Vec<&PeerId> {
        let set = &self.tiers[tier_index(tier)];
        let found: Vec<*const PeerId> = exclude
            .iter()
            .filter_map(|p| set.get(p))
            .map(|p| p as *const PeerId)
            .collect();
        set.iter()
            .filter(|p| !found.contains(&(*p as *const PeerId)))
            .collect()
    }

    /// A peer of `tier` outside `exclude` drawn uniformly with `rng`: exactly
    /// `in_tier_except(tier, exclude).choose(rng)` (one `random_range(..n)` over the `n`
    /// candidates in id order, none if there are none), without collecting the candidates.
    /// Every work steal sent or forwarded draws so, and the collected list (allocated, the
    /// whole tier walked) was 4% of the simulator's time at 10,000 nodes.
    pub fn choose_in_tier_except<R: rand::Rng + ?Sized>(
        &self,
        tier: LatencyTier,
        exclude: &[&PeerId],
        rng: &mut R,
    ) -> Option<&PeerId> {
        let set = &self.tiers[tier_index(tier)];
        // The excluded peers that are in the tier, each once (`exclude` may repeat one).
        let mut found: Vec<&PeerId> = Vec::with_capacity(exclude.len());
        for p in exclude.iter().filter_map(|p| set.get(p)) {
            if !found.contains(&p) {
                found.push(p);
            }
        }
        let n = set.len() - found.len();
        if n == 0 {
            return None;
        }
        let k = rng.random_range(..n);
        set.iter().filter(|p| !found.contains(p)).nth(k)
    }

    /// Every known peer, nearest first.
    pub fn by_rtt(&self) -> impl Iterator<Item = (&PeerId, Duration)> + '_ {
        self.by_rtt
            .iter()
            .filter_map(|&(rtt, slot)| self.slots[slot as usize].as_ref().map(|(id, _)| (id, rtt)))
    }

    /// Number of known peers.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no peer is known.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// A number that changes whenever [`PeerTable::by_rtt`]'s peers or RTTs change, or a
    /// peer's [`PeerInfo::min_rtt`] does (and only then, but for wrapping).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Oldest `last_seen`, to schedule expiry.
    pub fn oldest_seen(&self) -> Option<Instant> {
        debug_assert_eq!(self.oldest_seen, self.by_seen.oldest());
        self.oldest_seen
    }

    /// Refreshes [`PeerTable::oldest_seen`]'s copy after `by_seen` changed (the queue is
    /// warm then).
    fn seen_changed(&mut self) {
        self.oldest_seen = self.by_seen.oldest();
        #[cfg(test)]
        {
            assert_eq!(
                self.by_seen.live(),
                self.seen_model.iter().copied().collect::<Vec<_>>()
            );
            assert_eq!(self.oldest_seen, self.seen_model.first().map(|(at, _)| *at));
        }
    }
}

/// The peers of one tier, sorted by id, each once: what a `BTreeSet<PeerId>` gave, in a
/// sorted vector. A tier holds at most the peer table's capacity (64 by default), so an
/// insertion or removal shifts at most that many 16-byte ids within a few cache lines;
/// the tree's nodes were cold, and every heartbeat period's gossip turn
/// ([`PeerTable::in_tier_after`]) walked it down twice (4% of the simulator's time with
/// NSc2c at 10,000 nodes, with its inserts and removals on new peers and tiers another 1%).
#[derive(Debug, Clone, Default)]
struct TierIds(Vec<PeerId>);

impl TierIds {
    /// Adds `peer` if it is not there yet (as `BTreeSet::insert`, which keeps the id it has).
    fn insert(&mut self, peer: &PeerId) {
        if let Err(at) = self.0.binary_search(peer) {
            self.0.insert(at, peer.clone());
        }
    }

    fn remove(&mut self, peer: &PeerId) {
        if let Ok(at) = self.0.binary_search(peer) {
            self.0.remove(at);
        }
    }

    /// The id held equal to `peer`, if any.
    fn get(&self, peer: &PeerId) -> Option<&PeerId> {
        self.0.binary_search(peer).ok().map(|at| &self.0[at])
    }

    fn iter(&self) -> std::slice::Iter<'_, PeerId> {
        self.0.iter()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Each peer's last sample, as (instant, slot), oldest first: what a B-tree of (instant,
/// slot) gave, for a push per sample. The tree took a remove and an insert per sample, on
/// every agent's peers every RTT round, each a walk through cold nodes (a tenth of the
/// simulator's time at 10,000 nodes); samples arrive in time order, so a new one goes at
/// the back of a queue, and the entry it replaces stays behind, stale, until it reaches
/// the front or the queue is compacted.
///
/// Each entry carries a stamp; a slot's live entry is the one with the slot's current
/// stamp (so that an entry of a freed slot, taken again at the same instant, is not taken
/// for the new peer's). The front, if any, is live. Order among equal instants is the
/// order of arrival; [`SeenQueue::due`] sorts what it returns by slot among them.
#[derive(Debug, Clone, Default)]
struct SeenQueue {
    entries: VecDeque<SeenEntry>,
    /// Per slot, the stamp of its live entry (`None`: no entry, the slot is free).
    stamps: Vec<Option<u64>>,
    /// Live entries (slots with a stamp).
    live: usize,
    next_stamp: u64,
}

#[derive(Debug, Clone, Copy)]
struct SeenEntry {
    at: Instant,
    slot: u32,
    stamp: u64,
}

impl SeenQueue {
    fn is_live(&self, e: &SeenEntry) -> bool {
        self.stamps.get(e.slot as usize).copied().flatten() == Some(e.stamp)
    }

    /// `slot`'s last sample is now at `at` (replacing its previous one, if any).
    fn push(&mut self, at: Instant, slot: u32) {
        let index = slot as usize;
        if self.stamps.len() <= index {
            self.stamps.resize(index + 1, None);
        }
        if self.stamps[index].is_none() {
            self.live += 1;
        }
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.stamps[index] = Some(stamp);
        let entry = SeenEntry { at, slot, stamp };
        // Instants come in order from the driver; one that does not goes where it belongs.
        if self.entries.back().is_none_or(|last| last.at <= at) {
            self.entries.push_back(entry);
        } else {
            let position = self.entries.partition_point(|e| e.at <= at);
            self.entries.insert(position, entry);
        }
        self.tidy();
    }

    /// `slot` is free: its entry, if any, is stale.
    fn forget(&mut self, slot: u32) {
        if let Some(stamp) = self.stamps.get_mut(slot as usize) {
            if stamp.take().is_some() {
                self.live -= 1;
            }
        }
        self.tidy();
    }

    /// The oldest live entry's instant.
    fn oldest(&self) -> Option<Instant> {
        self.entries.front().map(|e| e.at)
    }

    /// The live entries at or before `deadline`, by (instant, slot): a prefix of the
    /// queue, which goes as the caller frees their slots ([`SeenQueue::forget`]).
    fn due(&self, deadline: Instant) -> Vec<(Instant, u32)> {
        let mut due: Vec<(Instant, u32)> = self
            .entries
            .iter()
            .take_while(|e| e.at <= deadline)
            .filter(|e| self.is_live(e))
            .map(|e| (e.at, e.slot))
            .collect();
        due.sort_unstable();
        due
    }

    /// Drops stale entries from the front, and compacts the queue once stale entries
    /// outnumber the live ones (each entry is then moved once more, at most).
    fn tidy(&mut self) {
        while let Some(front) = self.entries.front() {
            if self.is_live(front) {
                break;
            }
            self.entries.pop_front();
        }
        if self.entries.len() > 2 * self.live + 16 {
            let stamps = &self.stamps;
            self.entries
                .retain(|e| stamps.get(e.slot as usize).copied().flatten() == Some(e.stamp));
        }
    }

    /// The live entries, as (instant, slot), in the order a tree of them would hold.
    #[cfg(test)]
    fn live(&self) -> Vec<(Instant, u32)> {
        let mut v: Vec<(Instant, u32)> = self
            .entries
            .iter()
            .filter(|e| self.is_live(e))
            .map(|e| (e.at, e.slot))
            .collect();
        // Entries are in instant order already; only ties are reordered.
        assert!(v.windows(2).all(|w| w[0].0 <= w[1].0));
        v.sort_unstable();
        v
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
    fn a_tier_walked_after_a_peer_wraps_around_once_in_id_order() {
        let t0 = Instant::now();
        let mut table = PeerTable::new(8);
        for name in ["d", "b", "a", "c"] {
            table.record_rtt(t0, &peer(name), ms(1));
        }
        table.record_rtt(t0, &peer("far"), ms(300));
        let walk = |after: Option<&str>| -> Vec<String> {
            let after = after.map(peer);
            table
                .in_tier_after(LatencyTier::Local, after.as_ref())
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(walk(None), ["a", "b", "c", "d"]);
        assert_eq!(walk(Some("b")), ["c", "d", "a", "b"]);
        assert_eq!(walk(Some("d")), ["a", "b", "c", "d"]);
        // A peer no longer in the tier: the walk starts at the next id.
        assert_eq!(walk(Some("bb")), ["c", "d", "a", "b"]);
        assert_eq!(walk(Some("far")), ["a", "b", "c", "d"]);
    }

    #[test]
    fn a_peer_chosen_in_a_tier_is_the_one_choose_picks_from_the_list() {
        use rand::seq::IndexedRandom;
        use rand::SeedableRng;

        let t0 = Instant::now();
        let mut table = PeerTable::new(64);
        for i in 0..40 {
            table.record_rtt(t0, &peer(&format!("p{i}")), ms(1 + (i % 3) * 60));
        }
        let (a, b, far) = (peer("p3"), peer("p6"), peer("p1"));
        let excludes: [&[&PeerId]; 5] = [&[], &[&a], &[&a, &a, &b], &[&far, &a], &[&peer("none")]];
        for tier in LatencyTier::ALL {
            for exclude in excludes {
                for seed in 0..20 {
                    let mut r1 = rand::rngs::StdRng::seed_from_u64(seed);
                    let mut r2 = r1.clone();
                    let listed = table.in_tier_except(tier, exclude).choose(&mut r1).copied();
                    let chosen = table.choose_in_tier_except(tier, exclude, &mut r2);
                    assert_eq!(listed, chosen, "{tier:?} {exclude:?} {seed}");
                    // And the generators drew the same.
                    assert_eq!(
                        rand::Rng::random::<u64>(&mut r1),
                        rand::Rng::random::<u64>(&mut r2)
                    );
                }
            }
        }
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
        table.record_rtt(t0, &peer("a"), ms(2));
        assert_eq!(table.tier(&peer("a")), Some(LatencyTier::Local));
        // One outlier does not move the peer: 7/8 * 2 + 1/8 * 50 = 8 ms.
        table.record_rtt(t0 + ms(1000), &peer("a"), ms(50));
        assert_eq!(table.get(&peer("a")).map(|i| i.srtt), Some(ms(8)));
        assert_eq!(table.tier(&peer("a")), Some(LatencyTier::Local));
        // A sustained change does, once the minimum's window has passed.
        for s in 2..=12 {
            table.record_rtt(t0 + ms(1000 * s), &peer("a"), ms(50));
        }
        assert_eq!(table.tier(&peer("a")), Some(LatencyTier::Regional));
    }

    /// Seen in the real pool (N = 100, emulated sites): the first pings of a connection across
    /// sites, taken while every agent was starting, took ten times the path's RTT; the later
    /// ones, 30 s apart, the path's. The smoothed RTT follows the later ones at once instead
    /// of keeping the start-up's for minutes; samples a second apart still weigh 1/8.
    #[test]
    fn given_sparse_samples_then_the_smoothed_rtt_follows_them_and_dense_ones_weigh_an_eighth() {
        let t0 = Instant::now();
        let mut table = PeerTable::new(4);
        table.record_rtt(t0, &peer("a"), ms(900));
        table.record_rtt(t0 + ms(30_000), &peer("a"), ms(34));
        let srtt = table.get(&peer("a")).expect("known").srtt;
        // 1 - exp(-30/8) = 0.9765: 0.0235 * 900 + 0.9765 * 34 = 54.3 ms (fixed 1/8: 792 ms).
        assert!(srtt > ms(53) && srtt < ms(56), "{srtt:?}");
        table.record_rtt(t0 + ms(60_000), &peer("a"), ms(34));
        let srtt = table.get(&peer("a")).expect("known").srtt;
        assert!(srtt > ms(34) && srtt < ms(35), "{srtt:?}");
        // A second apart: exactly TCP's 7/8 and 1/8.
        table.record_rtt(t0 + ms(61_000), &peer("a"), ms(34));
        let before = table.get(&peer("a")).expect("known").srtt;
        table.record_rtt(t0 + ms(62_000), &peer("a"), ms(98));
        let after = table.get(&peer("a")).expect("known").srtt;
        assert_eq!(after, (before * 7 + ms(98)) / 8);
        // A steady RTT leaves it exactly where it is, whatever the gap.
        let mut steady = PeerTable::new(4);
        steady.record_rtt(t0, &peer("b"), Duration::from_nanos(33_000_123));
        for gap_ms in [1, 500, 1_000, 7_000, 30_000, 600_000] {
            steady.record_rtt(
                t0 + ms(gap_ms),
                &peer("b"),
                Duration::from_nanos(33_000_123),
            );
            let info = steady.get(&peer("b")).expect("known");
            assert_eq!(info.srtt, Duration::from_nanos(33_000_123));
        }
    }

    /// Seen in the agents' loopback test: the first ping, taken while the machine was busy
    /// starting the agents, took 28 ms, and the smoothed RTT kept a loopback peer in the
    /// regional tier for seconds. The least RTT puts it back with the next sample.
    #[test]
    fn given_a_slow_first_sample_then_the_next_normal_one_gives_the_tier() {
        let t0 = Instant::now();
        let mut table = PeerTable::new(4);
        table.record_rtt(t0, &peer("a"), ms(28));
        assert_eq!(table.tier(&peer("a")), Some(LatencyTier::Regional));
        assert!(table.record_rtt(t0 + ms(1000), &peer("a"), Duration::from_micros(200)));
        assert_eq!(table.tier(&peer("a")), Some(LatencyTier::Local));
        let info = table.get(&peer("a")).expect("known");
        assert!(info.srtt > LOCAL_MAX_RTT, "{info:?}");
        // A lone spike after the window does not move it either: the new minimum is the
        // smoothed RTT or the sample, whichever is less, and the next normal sample is less.
        for s in 2..=12 {
            table.record_rtt(t0 + ms(1000 * s), &peer("a"), Duration::from_micros(200));
        }
        table.record_rtt(t0 + ms(13_000), &peer("a"), ms(80));
        assert_eq!(table.tier(&peer("a")), Some(LatencyTier::Local));
    }

    #[test]
    fn table_is_bounded_and_keeps_the_nearest() {
        let t0 = Instant::now();
        let mut table = PeerTable::new(2);
        assert!(table.record_rtt(t0, &peer("a"), ms(5)));
        assert!(table.record_rtt(t0 + ms(1), &peer("b"), ms(50)));
        // A far newcomer is left out, however fresh.
        assert!(!table.record_rtt(t0 + ms(2), &peer("c"), ms(80)));
        assert!(table.get(&peer("c")).is_none());
        // A near one replaces the farthest.
        assert!(table.record_rtt(t0 + ms(3), &peer("d"), ms(1)));
        assert_eq!(table.len(), 2);
        assert!(table.get(&peer("b")).is_none());
        assert_eq!(
            table.in_tier(LatencyTier::Local),
            vec![&peer("a"), &peer("d")]
        );
        assert_eq!(table.oldest_seen(), Some(t0));
        assert_eq!(table.expire(t0 + ms(2)), 1);
        assert_eq!(table.oldest_seen(), Some(t0 + ms(3)));
        assert!(table.remove(&peer("d")));
        assert!(table.is_empty());
        assert_eq!(table.oldest_seen(), None);
    }

    proptest::proptest! {
        /// Shared ids compare, order and hash as their byte strings (as the `Vec` they
        /// were held in did): trailing and embedded zero bytes, prefixes, every length.
        #[test]
        fn peer_ids_compare_and_hash_as_their_bytes(
            a in proptest::collection::vec(proptest::prelude::prop_oneof![0u8..3, proptest::num::u8::ANY], 1..=MAX_PEER_ID_LEN),
            b in proptest::collection::vec(proptest::prelude::prop_oneof![0u8..3, proptest::num::u8::ANY], 1..=MAX_PEER_ID_LEN),
            cut in 0usize..MAX_PEER_ID_LEN,
        ) {
            use std::hash::BuildHasher;
            // Also a prefix of `a`, and `a` with zeros appended, against `a`.
            let prefix = a[..cut.clamp(1, a.len())].to_vec();
            let mut padded = a.clone();
            padded.resize((a.len() + 1 + cut % 3).min(MAX_PEER_ID_LEN), 0);
            let hasher = BuildHasherDefault::<IdHasher>::default();
            for (x, y) in [(&a, &b), (&a, &prefix), (&prefix, &a), (&a, &padded), (&padded, &a), (&a, &a)] {
                let (px, py) = (PeerId::new(x.clone()).expect("valid"), PeerId::new(y.clone()).expect("valid"));
                proptest::prop_assert_eq!(px.cmp(&py), x.cmp(y));
                proptest::prop_assert_eq!(px == py, x == y);
                proptest::prop_assert_eq!(px.as_bytes(), &x[..]);
                proptest::prop_assert!(px.with_bytes(|b| b == &x[..]));
                proptest::prop_assert_eq!(hasher.hash_one(&px), hasher.hash_one(x));
                proptest::prop_assert_eq!(Vec::<u8>::from(px), x.clone());
            }
        }

        /// The queue of samples agrees with the tree of (instant, slot) it replaced (checked
        /// inside the table after every change, in tests), and expiry drops exactly the peers
        /// last heard at or before the deadline: samples at repeated instants, instants that
        /// go back, peers removed and slots taken again.
        #[test]
        fn expiry_drops_exactly_the_peers_last_heard_by_the_deadline(
            ops in proptest::collection::vec((0u8..10, 0usize..12, 0u64..40, 0u64..300), 1..200),
            capacity in 1usize..10,
        ) {
            let t0 = Instant::now();
            let mut table = PeerTable::new(capacity);
            let mut clock = 0u64;
            for (op, p, dt, rtt) in ops {
                let id = peer(&format!("p{p}"));
                match op {
                    // Mostly forward, sometimes the same instant, now and then back.
                    0..=5 => {
                        clock += dt / 4;
                        table.record_rtt(t0 + ms(clock), &id, ms(rtt));
                    }
                    6 => {
                        table.record_rtt(t0 + ms(clock.saturating_sub(dt)), &id, ms(rtt));
                    }
                    7 => {
                        table.remove(&id);
                    }
                    _ => {
                        let deadline = t0 + ms(clock.saturating_sub(dt));
                        let due: Vec<PeerId> = (0..12)
                            .map(|i| peer(&format!("p{i}")))
                            .filter(|q| table.get(q).is_some_and(|i| i.last_seen <= deadline))
                            .collect();
                        proptest::prop_assert_eq!(table.expire(deadline), due.len());
                        for q in &due {
                            proptest::prop_assert!(table.get(q).is_none());
                        }
                    }
                }
                let oldest = (0..12)
                    .filter_map(|i| table.get(&peer(&format!("p{i}"))).map(|i| i.last_seen))
                    .min();
                proptest::prop_assert_eq!(table.oldest_seen(), oldest);
            }
        }

        /// Whatever the order of the samples, a full table holds the `capacity` nearest
        /// peers: a near peer is never dropped for a far one.
        #[test]
        fn a_full_table_holds_the_nearest_peers_whatever_the_feed_order(
            rtts in proptest::collection::vec(0u64..400, 1..60),
            capacity in 1usize..20,
            order in proptest::collection::vec(0usize..1000, 60),
            rounds in 1usize..4,
        ) {
            let t0 = Instant::now();
            let mut table = PeerTable::new(capacity);
            let n = rtts.len();
            // A permutation of the peers from `order`.
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_by_key(|&i| (order[i], i));
            for round in 0..rounds {
                for (k, &i) in idx.iter().enumerate() {
                    let at = t0 + ms((round * n + k) as u64);
                    table.record_rtt(at, &peer(&format!("p{i}")), ms(rtts[i]));
                }
                idx.reverse();
            }
            // Nearest `capacity`, ties in favour of whoever came first: compare by RTT only.
            let mut sorted = rtts.clone();
            sorted.sort_unstable();
            let kept: Vec<u64> = {
                let mut v: Vec<u64> = table.by_rtt().map(|(_, r)| r.as_millis() as u64).collect();
                v.sort_unstable();
                v
            };
            proptest::prop_assert_eq!(kept.len(), n.min(capacity));
            proptest::prop_assert_eq!(&kept[..], &sorted[..n.min(capacity)]);
            for t in LatencyTier::ALL {
                for p in table.in_tier(t) {
                    proptest::prop_assert_eq!(table.tier(p), Some(t));
                }
            }
        }
    }
}
