//! Emulated wide-area sites on one machine: network namespaces joined by a user-space delay
//! router, so that processes of different sites see the round trips of a campus, a region,
//! a country or the world between them (issue 42). This machine kind has no `netem` qdisc
//! (platform notes), but it has `/dev/net/tun`, network namespaces and root.
//!
//! # Layout
//! A [`SiteNet`] of S sites is S + 1 network namespaces:
//! - site i (`pcmt<pid>sp<seq>-<i>`): loopback and one veth leg `eth0` with address
//!   `10.77.i.2/24`, and a route to `10.77.0.0/16` through the router (`10.77.i.1`). All
//!   processes of a site share its one address (each listens on its own port), so traffic
//!   within a site takes the site's loopback: no added delay (the local tier).
//! - the router (`pcmt<pid>sp<seq>-r`): the other legs (`s<i>`, `10.77.i.1/24`) and a TUN
//!   device. Forwarding is on; policy routing sends every packet that arrives from a site
//!   leg into the TUN (`ip rule add iif s<i> lookup 100`; table 100: `10.77.0.0/16 dev
//!   <tun>`). The delay router (two threads of this process) reads each IPv4 packet from the
//!   TUN, holds it for the one-way delay of its (source site, destination site) pair plus
//!   jitter, and writes it back; a packet written to the TUN arrives from it, matches no
//!   rule but the main table's, and is forwarded out of the destination site's leg.
//!
//! Nothing touches the root namespace but the TUN, for an instant: it is made there (its
//! file descriptor is this process's) and moved into the router namespace at once.
//! Delays keep each (source, destination) pair's packets in order (a jittered packet never
//! overtakes an earlier one of the same pair, as on a real path), so TCP sees no reordering.
//!
//! # Cleanup
//! Dropping the [`SiteNet`] stops the router, kills every process in its namespaces and
//! deletes them (the veths and the TUN go with them), also when a test or benchmark panics.
//! Namespaces of a process that was killed outright are removed by the next [`SiteNet::new`]
//! or [`crate::netns::Cluster::new`] (their names carry the owner's pid).
//!
//! # Pure parts
//! [`DelayMatrix`], [`parse_ipv4`], [`SiteAddressing`] and [`DelayQueue`] (which decides
//! when each packet leaves, with `now` an input) are unit-tested without namespaces.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::Ipv4Addr;
use std::os::fd::AsFd as _;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::netns::{ip, kill_netns_processes, sweep_stale};
use crate::urgent::Urgent;

/// Most sites: the third byte of a site's addresses is its index.
pub const MAX_SITES: usize = 64;

/// Routing table of the router namespace that sends the sites' packets into the TUN.
const TUN_TABLE: &str = "100";

/// Packets the kernel holds for the delay router before it drops them (the TUN's transmit
/// queue; Linux's default is 500). A real path queues in its routers' buffers and does not
/// lose a burst because one process was not scheduled: at N = 100 agents, with the default
/// the kernel dropped 17,204 packets here, and each loss cost TCP a retransmission.
const TUN_QUEUE: &str = "20000";

/// Most packets the router reads in one turn before queueing them.
const MAX_BURST: usize = 1024;

/// The router threads' nice (as root): they stand for network hardware, which does not wait
/// for the hosts' processes to be scheduled (with hundreds of agents on two cores, a router
/// thread waiting for a CPU let the TUN's queue overflow).
const ROUTER_NICE: libc::c_int = -15;

static SITE_NETS: AtomicU32 = AtomicU32::new(0);

/// Round-trip times between sites: `rtt[i][j]` is the nominal round trip from a process of
/// site i to one of site j (the diagonal is the site's own loopback, not delayed).
#[derive(Debug, Clone, PartialEq)]
pub struct DelayMatrix {
    rtt: Vec<Vec<Duration>>,
}

impl DelayMatrix {
    /// A matrix from its rows; it must be square, with 1 to [`MAX_SITES`] sites.
    pub fn new(rtt: Vec<Vec<Duration>>) -> Result<DelayMatrix, String> {
        let n = rtt.len();
        if !(1..=MAX_SITES).contains(&n) {
            return Err(format!("{n} sites: must be 1 to {MAX_SITES}"));
        }
        if let Some((i, row)) = rtt.iter().enumerate().find(|(_, r)| r.len() != n) {
            return Err(format!(
                "row {i} of the delay matrix has {} entries, not {n}",
                row.len()
            ));
        }
        Ok(DelayMatrix { rtt })
    }

    /// Sites.
    pub fn sites(&self) -> usize {
        self.rtt.len()
    }

    /// Nominal round trip between site `from` and site `to`.
    pub fn rtt(&self, from: usize, to: usize) -> Duration {
        self.rtt[from][to]
    }

    /// Delay a packet from site `from` to site `to` is held for, before jitter: half the
    /// round trip (both directions of a pair get half, so a round trip sums to it).
    pub fn one_way(&self, from: usize, to: usize) -> Duration {
        self.rtt[from][to] / 2
    }
}

/// Source and destination of an IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Header {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
}

/// The addresses of an IPv4 packet as read from a TUN (no packet-information prefix), or
/// `None` if it is not a well-formed IPv4 packet (IPv6, truncated, a header or total
/// length that does not fit).
pub fn parse_ipv4(packet: &[u8]) -> Option<Ipv4Header> {
    let first = *packet.first()?;
    if first >> 4 != 4 {
        return None;
    }
    let header_len = usize::from(first & 0x0f) * 4;
    if header_len < 20 || packet.len() < header_len {
        return None;
    }
    let total_len = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    if total_len < header_len || total_len > packet.len() {
        return None;
    }
    let addr =
        |at: usize| Ipv4Addr::new(packet[at], packet[at + 1], packet[at + 2], packet[at + 3]);
    Some(Ipv4Header {
        src: addr(12),
        dst: addr(16),
    })
}

/// The sites' addresses: site i is `10.77.i.0/24`, its processes at `.2`, the router's leg
/// at `.1`. (Private to the namespaces: nothing of the root namespace routes there.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteAddressing {
    sites: usize,
}

impl SiteAddressing {
    /// First two bytes of every address.
    const PREFIX: [u8; 2] = [10, 77];

    /// Addressing for `sites` sites.
    pub fn new(sites: usize) -> SiteAddressing {
        SiteAddressing { sites }
    }

    /// The address the processes of site `site` use.
    pub fn site_addr(&self, site: usize) -> Ipv4Addr {
        let [a, b] = Self::PREFIX;
        Ipv4Addr::new(a, b, site as u8, 2)
    }

    /// The router's address on site `site`'s link.
    pub fn router_addr(&self, site: usize) -> Ipv4Addr {
        let [a, b] = Self::PREFIX;
        Ipv4Addr::new(a, b, site as u8, 1)
    }

    /// The whole range, `10.77.0.0/16`.
    pub fn range(&self) -> String {
        let [a, b] = Self::PREFIX;
        format!("{a}.{b}.0.0/16")
    }

    /// The site an address belongs to, if any.
    pub fn site_of(&self, addr: Ipv4Addr) -> Option<usize> {
        let o = addr.octets();
        let site = usize::from(o[2]);
        (o[..2] == Self::PREFIX && site < self.sites).then_some(site)
    }
}

/// Why the router did not forward a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Not an IPv4 packet the router can read.
    NotIpv4,
    /// Its source or destination is no site's.
    UnknownSite,
}

/// A packet held by the router until `due`.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    due: Instant,
    /// Arrival order: packets due at once leave as they came.
    seq: u64,
    packet: Vec<u8>,
}

/// When each packet leaves: the one-way delay of its site pair plus uniform jitter of
/// `± jitter` times it, never before a packet of the same pair that arrived earlier.
/// Pure: time is an input, the jitter comes from a seeded generator.
#[derive(Debug)]
pub struct DelayQueue {
    matrix: DelayMatrix,
    addressing: SiteAddressing,
    jitter: f64,
    rng: u64,
    /// Per (source, destination) pair: when its last packet leaves.
    last_due: Vec<Option<Instant>>,
    held: BinaryHeap<Reverse<Held>>,
    seq: u64,
}

impl DelayQueue {
    /// A queue for `matrix`'s sites with jitter `jitter` (a fraction of the one-way delay,
    /// 0 to 0.5), its random numbers from `seed`.
    pub fn new(matrix: DelayMatrix, jitter: f64, seed: u64) -> Result<DelayQueue, String> {
        if !(0.0..=0.5).contains(&jitter) {
            return Err(format!("jitter {jitter}: must be 0 to 0.5 of the delay"));
        }
        let n = matrix.sites();
        Ok(DelayQueue {
            addressing: SiteAddressing::new(n),
            matrix,
            jitter,
            // xorshift needs a non-zero state.
            rng: seed | 1,
            last_due: vec![None; n * n],
            held: BinaryHeap::new(),
            seq: 0,
        })
    }

    /// A number in [-1, 1) (xorshift64*).
    fn unit(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    /// Takes a packet that arrived at `now`; returns when it will leave, or why it is
    /// dropped.
    pub fn push(&mut self, now: Instant, packet: Vec<u8>) -> Result<Instant, Dropped> {
        let header = parse_ipv4(&packet).ok_or(Dropped::NotIpv4)?;
        let (Some(from), Some(to)) = (
            self.addressing.site_of(header.src),
            self.addressing.site_of(header.dst),
        ) else {
            return Err(Dropped::UnknownSite);
        };
        let delay = self.matrix.one_way(from, to);
        let jittered = delay.as_secs_f64() * (1.0 + self.jitter * self.unit());
        let mut due = now + Duration::from_secs_f64(jittered.max(0.0));
        let pair = from * self.matrix.sites() + to;
        if let Some(last) = self.last_due[pair] {
            due = due.max(last);
        }
        self.last_due[pair] = Some(due);
        self.seq += 1;
        self.held.push(Reverse(Held {
            due,
            seq: self.seq,
            packet,
        }));
        Ok(due)
    }

    /// When the next packet is due, if one is held.
    pub fn next_due(&self) -> Option<Instant> {
        self.held.peek().map(|Reverse(h)| h.due)
    }

    /// The next packet due at `now` or before, if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.next_due()? > now {
            return None;
        }
        self.held.pop().map(|Reverse(h)| h.packet)
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no packet is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// What the delay router did so far.
#[derive(Debug, Default)]
pub struct RouterCounters {
    /// Packets written back to the TUN.
    pub packets: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// Packets dropped (not IPv4, no site's, or the write failed).
    pub dropped: AtomicU64,
}

/// The router's two threads and what they share.
struct DelayRouter {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    counters: Arc<RouterCounters>,
}

impl DelayRouter {
    fn start(tun: File, queue: DelayQueue) -> Result<DelayRouter, String> {
        let tun = Arc::new(tun);
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(RouterCounters::default());
        let shared = Arc::new((Mutex::new(queue), Condvar::new()));
        let reader = {
            let (tun, stop, counters, shared) = (
                Arc::clone(&tun),
                Arc::clone(&stop),
                Arc::clone(&counters),
                Arc::clone(&shared),
            );
            std::thread::Builder::new()
                .name("site-router-in".into())
                .spawn(move || read_loop(&tun, &stop, &counters, &shared))
                .map_err(|e| format!("cannot start the delay router: {e}"))?
        };
        let writer = {
            let (stop, counters, shared) = (
                Arc::clone(&stop),
                Arc::clone(&counters),
                Arc::clone(&shared),
            );
            std::thread::Builder::new()
                .name("site-router-out".into())
                .spawn(move || write_loop(&tun, &stop, &counters, &shared))
        };
        let writer = match writer {
            Ok(w) => w,
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                let _ = reader.join();
                return Err(format!("cannot start the delay router: {e}"));
            }
        };
        Ok(DelayRouter {
            stop,
            threads: vec![reader, writer],
            counters,
        })
    }
}

impl Drop for DelayRouter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

type Shared = (Mutex<DelayQueue>, Condvar);

/// Reads packets from the TUN into the queue until `stop` (checked every 100 ms): every
/// packet waiting at each wake, queued under one lock with one wake of the writer, so that
/// a burst costs one turn of this thread rather than one per packet.
fn read_loop(tun: &File, stop: &AtomicBool, counters: &RouterCounters, shared: &Shared) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let _urgent = Urgent::raise(ROUTER_NICE);
    let mut buf = vec![0u8; 65_536];
    let mut burst: Vec<Vec<u8>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut fds = [PollFd::new(tun.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(100u16)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => {
                eprintln!("site router: poll of the TUN failed: {e}");
                return;
            }
        }
        // The TUN is non-blocking: read until it is empty (or a burst's worth).
        while burst.len() < MAX_BURST {
            match (&*tun).read(&mut buf) {
                Ok(n) => burst.push(buf[..n].to_vec()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // The device is gone (its namespace deleted): nothing more will come.
                    if !stop.load(Ordering::Relaxed) {
                        eprintln!("site router: reading the TUN failed: {e}");
                    }
                    return;
                }
            }
        }
        if burst.is_empty() {
            continue;
        }
        let (queue, wake) = shared;
        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        for packet in burst.drain(..) {
            if q.push(now, packet).is_err() {
                counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        wake.notify_one();
    }
}

/// Writes each held packet back to the TUN when it is due, until `stop`.
fn write_loop(tun: &File, stop: &AtomicBool, counters: &RouterCounters, shared: &Shared) {
    let _urgent = Urgent::raise(ROUTER_NICE);
    let (queue, wake) = shared;
    let mut due_now = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        {
            let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            while let Some(p) = q.pop_due(now) {
                due_now.push(p);
            }
            if due_now.is_empty() {
                let wait = q
                    .next_due()
                    .map_or(Duration::from_millis(100), |d| {
                        d.saturating_duration_since(now)
                    })
                    .min(Duration::from_millis(100));
                let _unused = wake
                    .wait_timeout(q, wait)
                    .unwrap_or_else(|p| p.into_inner());
                continue;
            }
        }
        for packet in due_now.drain(..) {
            // A TUN takes a packet whole or not at all.
            match (&*tun).write(&packet) {
                Ok(n) if n == packet.len() => {
                    counters.packets.fetch_add(1, Ordering::Relaxed);
                    counters
                        .bytes
                        .fetch_add(packet.len() as u64, Ordering::Relaxed);
                }
                Ok(_) | Err(_) => {
                    counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Opens a new TUN device named `name` (IPv4 packets without a packet-information prefix)
/// in this thread's network namespace. It lives as long as the returned file.
#[allow(unsafe_code)]
fn open_tun(name: &str) -> Result<File, String> {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    // Non-blocking: the reader drains every waiting packet in one turn (a write to a TUN
    // injects the packet into the stack and does not wait either way).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")
        .map_err(|e| format!("cannot open /dev/net/tun: {e}"))?;
    if name.len() >= libc::IFNAMSIZ || !name.is_ascii() {
        return Err(format!("bad interface name {name:?}"));
    }
    // SAFETY: `ifreq` is plain data (zeroes are a valid value); its name is NUL-terminated
    // within IFNAMSIZ (checked above, the rest stays zero); TUNSETIFF reads and writes only
    // that struct, which lives across the call, on a file descriptor we own.
    let rc = unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
            *dst = src as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req)
    };
    if rc < 0 {
        return Err(format!(
            "cannot create the TUN device {name}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(file)
}

/// The sum of the `(direction, counter)` statistics (`ip -s link`'s, as "tx", "bytes") of
/// every link of the network namespace `netns`.
fn link_counters(netns: &str, counters: &[(&str, &str)]) -> Result<u64, String> {
    let out = ip(&["-n", netns, "-j", "-s", "link", "show"])?;
    let links: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("`ip -j -s link`: {e}"))?;
    let links = links
        .as_array()
        .ok_or_else(|| format!("`ip -j -s link` gave no list: {out}"))?;
    let mut total = 0;
    for link in links {
        for (way, counter) in counters {
            total += link["stats64"][way][counter]
                .as_u64()
                .ok_or_else(|| format!("no {way} {counter} in {link}"))?;
        }
    }
    Ok(total)
}

/// Runs `program args` in the network namespace `netns`.
fn in_netns(netns: &str, program: &str, args: &[&str]) -> Result<String, String> {
    let mut all = vec![format!("--net=/run/netns/{netns}"), program.to_owned()];
    all.extend(args.iter().map(|s| (*s).to_owned()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    crate::netns::run("nsenter", &all)
}

/// Sets a sysctl of the namespace `netns` (`key` as a path under `/proc/sys`).
fn sysctl(netns: &str, key: &str, value: &str) -> Result<(), String> {
    in_netns(
        netns,
        "sh",
        &["-c", &format!("echo {value} > /proc/sys/{key}")],
    )
    .map(drop)
}

/// Emulated sites with delays between them; everything is removed on drop (see the module
/// notes).
pub struct SiteNet {
    matrix: DelayMatrix,
    addressing: SiteAddressing,
    router_netns: String,
    site_netns: Vec<String>,
    /// Namespaces created so far (for cleanup, also after a failure half-way).
    created: Vec<String>,
    router: Option<DelayRouter>,
}

impl std::fmt::Debug for SiteNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiteNet")
            .field("router_netns", &self.router_netns)
            .field("site_netns", &self.site_netns)
            .finish_non_exhaustive()
    }
}

impl SiteNet {
    /// Whether sites can be made here: root, `/dev/net/tun`, `ip netns`, `nsenter`.
    pub fn available() -> Result<(), String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("emulated sites need root (network namespaces, a TUN device)".into());
        }
        if !std::path::Path::new("/dev/net/tun").exists() {
            return Err("emulated sites need /dev/net/tun (the delay router's TUN device)".into());
        }
        crate::netns::run("nsenter", &["--version"])
            .map_err(|e| format!("nsenter is missing: {e}"))?;
        ip(&["netns", "list"]).map_err(|e| format!("ip netns does not work: {e}"))?;
        Ok(())
    }

    /// Makes the sites of `matrix` and starts the delay router (jitter `jitter`, a fraction
    /// of each one-way delay); checks that every site reaches every other.
    pub fn new(matrix: DelayMatrix, jitter: f64) -> Result<SiteNet, String> {
        SiteNet::available()?;
        let queue = DelayQueue::new(
            matrix.clone(),
            jitter,
            u64::from(std::process::id()) << 20 | 0x5eed,
        )?;
        sweep_stale();
        let n = matrix.sites();
        let id = format!(
            "{}sp{}",
            std::process::id(),
            SITE_NETS.fetch_add(1, Ordering::Relaxed)
        );
        let addressing = SiteAddressing::new(n);
        let mut net = SiteNet {
            matrix,
            addressing,
            router_netns: format!("pcmt{id}-r"),
            site_netns: (0..n).map(|i| format!("pcmt{id}-{i}")).collect(),
            created: Vec::new(),
            router: None,
        };
        let r = net.router_netns.clone();
        ip(&["netns", "add", &r])?;
        net.created.push(r.clone());
        ip(&["-n", &r, "link", "set", "lo", "up"])?;
        sysctl(&r, "net/ipv4/ip_forward", "1")?;
        // Packets come back from the TUN with a source that routes out of a site leg: the
        // reverse-path filter must let them through.
        sysctl(&r, "net/ipv4/conf/all/rp_filter", "0")?;
        sysctl(&r, "net/ipv4/conf/default/rp_filter", "0")?;
        for i in 0..n {
            let s = net.site_netns[i].clone();
            ip(&["netns", "add", &s])?;
            net.created.push(s.clone());
            let leg = format!("s{i}");
            ip(&[
                "-n", &r, "link", "add", &leg, "type", "veth", "peer", "name", "eth0", "netns", &s,
            ])?;
            let router_addr = addressing.router_addr(i).to_string();
            ip(&[
                "-n",
                &r,
                "addr",
                "add",
                &format!("{router_addr}/24"),
                "dev",
                &leg,
            ])?;
            ip(&["-n", &r, "link", "set", &leg, "up"])?;
            ip(&[
                "-n",
                &s,
                "addr",
                "add",
                &format!("{}/24", addressing.site_addr(i)),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &s, "link", "set", "eth0", "up"])?;
            ip(&["-n", &s, "link", "set", "lo", "up"])?;
            ip(&[
                "-n",
                &s,
                "route",
                "add",
                &addressing.range(),
                "via",
                &router_addr,
            ])?;
            ip(&[
                "-n", &r, "rule", "add", "iif", &leg, "lookup", TUN_TABLE, "pref", "1000",
            ])?;
        }
        // The TUN is made here, in the root namespace, and moved at once; its name carries
        // this process's id like the namespaces', for the sweep of a killed run's leftovers.
        let tun_name = format!("pt{id}t");
        let tun_name = if tun_name.len() < libc::IFNAMSIZ {
            tun_name
        } else {
            format!("pt{}t", SITE_NETS.load(Ordering::Relaxed))
        };
        let tun = open_tun(&tun_name)?;
        ip(&["link", "set", &tun_name, "netns", &r])?;
        ip(&["-n", &r, "link", "set", &tun_name, "txqueuelen", TUN_QUEUE])?;
        ip(&["-n", &r, "link", "set", &tun_name, "up"])?;
        sysctl(&r, &format!("net/ipv4/conf/{tun_name}/rp_filter"), "0")?;
        ip(&[
            "-n",
            &r,
            "route",
            "add",
            &addressing.range(),
            "dev",
            &tun_name,
            "table",
            TUN_TABLE,
        ])?;
        net.router = Some(DelayRouter::start(tun, queue)?);
        net.wait_reachable()?;
        Ok(net)
    }

    /// Waits until site 0 reaches every other site and back (at most 10 s each): a TCP
    /// connect to a closed port that is refused proves the path both ways.
    fn wait_reachable(&self) -> Result<(), String> {
        for to in 1..self.sites() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.probe(0, to).is_err() {
                if Instant::now() > deadline {
                    return Err(format!(
                        "site 0 cannot reach site {to} through the delay router"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Time a process of site `from` takes to be refused a TCP connection by site `to`'s
    /// address (a closed port): one round trip between them, plus the start of a shell (a
    /// few ms; compare with a probe within one site). Fails if no answer comes within 2 s.
    pub fn probe(&self, from: usize, to: usize) -> Result<Duration, String> {
        let start = Instant::now();
        let status = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.site_netns[from]))
            .args(["timeout", "2", "bash", "-c"])
            .arg(format!(
                "echo > /dev/tcp/{}/9",
                self.addressing.site_addr(to)
            ))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("cannot probe site {to} from site {from}: {e}"))?;
        let took = start.elapsed();
        // Refused: bash fails with 1. Timed out: 124.
        match status.code() {
            Some(124) | None => Err(format!("no answer from site {to} to site {from}")),
            _ => Ok(took),
        }
    }

    /// Sites.
    pub fn sites(&self) -> usize {
        self.matrix.sites()
    }

    /// The delays.
    pub fn matrix(&self) -> &DelayMatrix {
        &self.matrix
    }

    /// The address the processes of site `site` listen on.
    pub fn addr(&self, site: usize) -> Ipv4Addr {
        self.addressing.site_addr(site)
    }

    /// The network namespace of site `site`.
    pub fn netns(&self, site: usize) -> &str {
        &self.site_netns[site]
    }

    /// A command that runs `program` in site `site` (its network namespace; nothing else
    /// changes). Arguments, environment and stdio set on it reach `program`, which keeps
    /// the process id the command starts (`nsenter` execs it), so process groups and kill
    /// work.
    pub fn command_in(&self, site: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}", self.site_netns[site]))
            .arg(program);
        command
    }

    /// Bytes the processes of site `site` sent so far: what its loopback carried (traffic
    /// within the site) plus what left through its link.
    pub fn bytes_sent(&self, site: usize) -> Result<u64, String> {
        link_counters(&self.site_netns[site], &[("tx", "bytes")])
    }

    /// Packets the kernel dropped on the router's links so far (its TUN's queue to the
    /// delay router full, a site leg's queue full): losses of the emulated network that
    /// the router's own counters cannot see, each a TCP retransmission for the agents.
    pub fn link_drops(&self) -> Result<u64, String> {
        link_counters(&self.router_netns, &[("rx", "dropped"), ("tx", "dropped")])
    }

    /// What the delay router did so far.
    pub fn router_counters(&self) -> Option<&RouterCounters> {
        self.router.as_ref().map(|r| &*r.counters)
    }
}

impl Drop for SiteNet {
    fn drop(&mut self) {
        // The router first: its reads would fail once the TUN's namespace goes.
        self.router = None;
        for netns in &self.created {
            kill_netns_processes(netns);
        }
        for netns in &self.created {
            if let Err(e) = ip(&["netns", "del", netns]) {
                eprintln!("sites cleanup: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// A minimal IPv4 header (20 bytes, no payload) from `src` to `dst`.
    fn packet(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&20u16.to_be_bytes());
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p
    }

    fn matrix3() -> DelayMatrix {
        DelayMatrix::new(vec![
            vec![ms(0), ms(40), ms(160)],
            vec![ms(40), ms(0), ms(40)],
            vec![ms(160), ms(40), ms(0)],
        ])
        .unwrap()
    }

    #[test]
    fn the_matrix_must_be_square_and_halves_round_trips() {
        assert!(DelayMatrix::new(vec![]).is_err());
        let err = DelayMatrix::new(vec![vec![ms(0), ms(1)], vec![ms(1)]]).unwrap_err();
        assert!(err.contains("row 1"), "{err}");
        let m = matrix3();
        assert_eq!(m.sites(), 3);
        assert_eq!(m.rtt(0, 2), ms(160));
        assert_eq!(m.one_way(0, 2), ms(80));
        assert_eq!(m.one_way(1, 1), ms(0));
    }

    #[test]
    fn ipv4_headers_are_read_and_anything_else_refused() {
        let p = packet([10, 77, 0, 2], [10, 77, 2, 2]);
        assert_eq!(
            parse_ipv4(&p),
            Some(Ipv4Header {
                src: Ipv4Addr::new(10, 77, 0, 2),
                dst: Ipv4Addr::new(10, 77, 2, 2)
            })
        );
        // With options (IHL 6) and a payload.
        let mut q = vec![0u8; 30];
        q[0] = 0x46;
        q[2..4].copy_from_slice(&30u16.to_be_bytes());
        q[12..16].copy_from_slice(&[1, 2, 3, 4]);
        q[16..20].copy_from_slice(&[5, 6, 7, 8]);
        assert_eq!(parse_ipv4(&q).unwrap().dst, Ipv4Addr::new(5, 6, 7, 8));
        assert_eq!(parse_ipv4(&[]), None);
        assert_eq!(parse_ipv4(&p[..19]), None, "truncated");
        let mut v6 = p.clone();
        v6[0] = 0x60;
        assert_eq!(parse_ipv4(&v6), None, "IPv6");
        let mut short_ihl = p.clone();
        short_ihl[0] = 0x44;
        assert_eq!(parse_ipv4(&short_ihl), None, "header shorter than 20 bytes");
        let mut long_total = p.clone();
        long_total[2..4].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(parse_ipv4(&long_total), None, "total length past the end");
        let mut long_ihl = p;
        long_ihl[0] = 0x4f;
        assert_eq!(parse_ipv4(&long_ihl), None, "header past the end");
    }

    #[test]
    fn addresses_map_to_their_sites_only() {
        let a = SiteAddressing::new(3);
        assert_eq!(a.site_addr(2), Ipv4Addr::new(10, 77, 2, 2));
        assert_eq!(a.router_addr(0), Ipv4Addr::new(10, 77, 0, 1));
        assert_eq!(a.site_of(Ipv4Addr::new(10, 77, 1, 2)), Some(1));
        assert_eq!(a.site_of(Ipv4Addr::new(10, 77, 3, 2)), None, "no site 3");
        assert_eq!(a.site_of(Ipv4Addr::new(10, 78, 1, 2)), None);
        assert_eq!(a.site_of(Ipv4Addr::new(127, 0, 0, 1)), None);
        assert_eq!(a.range(), "10.77.0.0/16");
    }

    #[test]
    fn packets_leave_after_their_pairs_delay_within_the_jitter() {
        let mut q = DelayQueue::new(matrix3(), 0.05, 7).unwrap();
        let t0 = Instant::now();
        for i in 0..200u64 {
            let now = t0 + ms(i);
            let due = q.push(now, packet([10, 77, 0, 2], [10, 77, 2, 2])).unwrap();
            let delay = due - now;
            // 80 ms one way, +-5%, or later only to stay behind the previous packet.
            assert!(delay >= ms(76), "{delay:?}");
            assert!(delay <= ms(85), "{delay:?}");
        }
        // Within a site: no delay.
        let now = t0 + ms(300);
        assert_eq!(q.push(now, packet([10, 77, 1, 2], [10, 77, 1, 2])), Ok(now));
    }

    #[test]
    fn a_pairs_packets_never_overtake_each_other() {
        let mut q = DelayQueue::new(matrix3(), 0.5, 11).unwrap();
        let t0 = Instant::now();
        let mut last = t0;
        for i in 0..1000u64 {
            let now = t0 + Duration::from_micros(i * 100);
            let due = q.push(now, packet([10, 77, 1, 2], [10, 77, 2, 2])).unwrap();
            assert!(due >= last, "packet {i} due before the one before it");
            last = due;
        }
        // They come out in order of arrival, and only when due.
        let mut out = 0;
        assert_eq!(q.pop_due(t0), None);
        let mut prev_seq_due = t0;
        while let Some(next) = q.next_due() {
            assert!(next >= prev_seq_due);
            prev_seq_due = next;
            assert!(q.pop_due(next).is_some());
            out += 1;
        }
        assert_eq!(out, 1000);
        assert!(q.is_empty());
    }

    #[test]
    fn foreign_and_non_ipv4_packets_are_dropped() {
        let mut q = DelayQueue::new(matrix3(), 0.0, 1).unwrap();
        let now = Instant::now();
        assert_eq!(
            q.push(now, packet([10, 77, 0, 2], [8, 8, 8, 8])),
            Err(Dropped::UnknownSite)
        );
        assert_eq!(
            q.push(now, packet([10, 77, 9, 2], [10, 77, 0, 2])),
            Err(Dropped::UnknownSite)
        );
        assert_eq!(q.push(now, vec![0x60; 40]), Err(Dropped::NotIpv4));
        assert!(q.is_empty());
        assert!(DelayQueue::new(matrix3(), 0.6, 1).is_err());
    }
}
