//! Transparent MPI traffic profiling through the MPI profiling interface (PMPI).
//!
//! This module defines the C symbols `MPI_Send`, `MPI_Isend`, `MPI_Recv`, `MPI_Wait`,
//! `MPI_Allreduce`, ... (every point-to-point, completion and collective call rsmpi makes).
//! Linked into a PCM program, they take the place of the MPI library's own: the linker binds
//! the program's calls (rsmpi's, the application's, and any C code's) to the definition in
//! the executable, and each wrapper counts the call, then calls the real implementation under
//! its `PMPI_` name. The application needs no wrapper type: a plain
//! `pcm.world().process_at_rank(1).send(...)` is counted. rustc keeps `#[no_mangle]`
//! functions of linked crates in the final binary even when nothing names them, so every
//! program that uses `pcm` gets the wrappers.
//!
//! # What is counted
//! - Point-to-point: messages and payload bytes (`count * MPI_Type_size`) by peer rank of the
//!   PCM world ([`crate::Pcm::world`]), sent and received. A call on another intracommunicator
//!   is translated to world ranks (through the groups, cached per communicator); traffic
//!   with processes outside the world (intercommunicators, departed processes) is not
//!   counted. Blocking receives count what arrived (from the status); a non-blocking receive
//!   counts its posted buffer when posted, or, for `MPI_ANY_SOURCE`, nothing (the peer is
//!   unknown until completion, and completions are not tracked per request).
//! - Collectives: calls, and the payload bytes this rank contributes (its send buffer; for
//!   `Bcast` and the scatters only at the root).
//! - Time inside MPI (wall clock): inside every blocking call, completion (`Wait*`,
//!   `Test*`) and probe; non-blocking initiations (`Isend`, `Irecv`, `Ibcast`, ...) return
//!   at once and are counted but not timed.
//!
//! # `MPI_COMM_WORLD` after a reconfiguration
//! Once a reconfiguration has changed the job's processes, a process's own `MPI_COMM_WORLD`
//! is no longer the job: a survivor's still holds the departed process, a replacement's
//! holds only itself. Code the user did not change (a helper in another file, a library)
//! that still names `MPI_COMM_WORLD` would then wait forever for a process that left. So
//! every wrapper of a call that takes a communicator gives the implementation, in place of
//! `MPI_COMM_WORLD`, the job's current world: [`WorldStandIn`], a duplicate of the PCM world
//! made collectively at the end of each reconfiguration (its own context, so that traffic on
//! `MPI_COMM_WORLD` never matches traffic on [`crate::Pcm::world`], as before the move; it
//! carries `MPI_COMM_WORLD`'s error handler). Nothing is substituted before PCM starts,
//! after it ends, while the world is still the launch's (no move yet, or a restarted job),
//! nor in PCM's own calls ([`Internal`]). Calls that only read or write local properties of
//! the handle stay on the real `MPI_COMM_WORLD`: attributes (`MPI_Comm_get_attr` and
//! friends: the predefined `MPI_TAG_UB`, `MPI_UNIVERSE_SIZE`, `MPI_APPNUM` live there),
//! names, and `MPI_Comm_free` (an error on `MPI_COMM_WORLD` either way). Fortran programs
//! reach the same C wrappers where the runtime's Fortran bindings call `MPI_*` (MPICH);
//! Open MPI 4's bindings call `PMPI_*` directly, but convert every communicator through
//! `PMPI_Comm_f2c`, which this module defines too ([`PMPI_Comm_f2c`]).
//!
//! PCM's own MPI traffic (status agreement, reconfiguration, state transfer) runs inside an
//! [`Internal`] guard and is not counted. `PCM_PROFILE=off` leaves the counters unallocated:
//! each wrapper then costs one atomic load and a branch before forwarding.
//!
//! # Cost and threading
//! PCM initialises MPI with `MPI_THREAD_SINGLE`, so only one thread ever calls MPI: the
//! counters are plain relaxed atomic loads and stores (no read-modify-write, no lock), with
//! no allocation on any call. A timed call costs two time-stamp counter reads ([`ticks`]); a
//! counted send or receive adds one `PMPI_Type_size` and a few adds.
#![allow(unsafe_code, non_snake_case)]

use std::cell::RefCell;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use mpi::ffi::{
    self, MPI_Aint, MPI_Comm, MPI_Datatype, MPI_Errhandler, MPI_Group, MPI_Info, MPI_Message,
    MPI_Op, MPI_Request, MPI_Status,
};
use mpi::raw::{AsRaw, FromRaw};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;
use pcm_proto::{CollectiveTraffic, PeerTraffic, Rank};

/// Counters of one peer rank.
#[derive(Debug, Default)]
struct Peer {
    sent_messages: AtomicU64,
    sent_bytes: AtomicU64,
    received_messages: AtomicU64,
    received_bytes: AtomicU64,
}

/// Everything this process counted since profiling was enabled.
#[derive(Debug)]
struct Counters {
    peers: Box<[Peer]>,
    collective_calls: AtomicU64,
    collective_bytes: AtomicU64,
    /// Time inside MPI, in [`ticks`].
    mpi_ticks: AtomicU64,
    /// [`ticks`] and clock when the counters were created: converts ticks to time.
    ticks_at_start: u64,
    started: Instant,
}

/// A cheap timestamp: the CPU's time-stamp counter on x86-64 (about 20 ns to read in a VM,
/// against 50-60 ns for the vDSO clock, and every MPI call reads two), nanoseconds since
/// the first call elsewhere. Converted to time at snapshot from the clock's progress since
/// the counters were created, so the counter's frequency need not be known (x86-64 CPUs
/// that Linux runs MPI on have a constant-rate, synchronised TSC: `constant_tsc`,
/// `nonstop_tsc`).
#[inline(always)]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU, reads a register and touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Adds to a counter only the MPI thread writes: a load and a store, no locked instruction.
#[inline(always)]
fn add(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// The counters, or null while profiling is off. Leaked once allocated: the wrappers may
/// run until the process ends, after `Pcm` is gone.
static COUNTERS: AtomicPtr<Counters> = AtomicPtr::new(std::ptr::null_mut());
/// Handle of the current PCM world, 0 before init. Handles are stored as `usize` and cast
/// back with `as _`: they are pointers in Open MPI and `int`s in MPICH (never 0 in either).
static WORLD: AtomicUsize = AtomicUsize::new(0);
/// Nesting depth of [`Internal`] guards: non-zero while PCM itself talks.
static INTERNAL: AtomicU32 = AtomicU32::new(0);
/// Handle of the [`WorldStandIn`] that application calls naming `MPI_COMM_WORLD` get
/// instead, 0 while there is none (stored as `WORLD` is).
static STAND_IN: AtomicUsize = AtomicUsize::new(0);
/// The message handle and communicator of the last matched probe, for `MPI_Mrecv`, which
/// names no communicator.
static PROBED_MESSAGE: AtomicUsize = AtomicUsize::new(0);
static PROBED_COMM: AtomicUsize = AtomicUsize::new(0);
static PROBED_SOURCE: AtomicI32 = AtomicI32::new(-1);

/// Communicators translated to world ranks: (handle, world rank of each of its ranks, or
/// `None` for intercommunicators). Small and rarely filled: applications use few.
const MAX_CACHED_COMMS: usize = 16;
/// A communicator handle (as an address) and the world rank of each of its ranks.
type Translation = (usize, Option<Box<[i32]>>);
thread_local! {
    static TRANSLATIONS: RefCell<Vec<Translation>> = const { RefCell::new(Vec::new()) };
}

/// While alive, MPI calls are PCM's own and are neither counted nor timed.
#[derive(Debug)]
pub(crate) struct Internal(());

impl Internal {
    /// Marks the calls that follow, until the guard drops, as PCM's own.
    pub(crate) fn enter() -> Self {
        INTERNAL.fetch_add(1, Ordering::Relaxed);
        Internal(())
    }
}

impl Drop for Internal {
    fn drop(&mut self) {
        INTERNAL.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The communicator application calls naming `MPI_COMM_WORLD` are given once the job's
/// world is no longer the launch's (see the module docs): a duplicate of the PCM world,
/// published while this value lives. Dropping it withdraws it, then frees it.
#[derive(Default)]
pub(crate) struct WorldStandIn {
    comm: Option<SimpleCommunicator>,
}

impl WorldStandIn {
    /// No stand-in: `MPI_COMM_WORLD` is the job's world (no reconfiguration yet).
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// The stand-in for the job's world `world`, published: `None` inside when `world`
    /// holds the same processes in the same order as this process's `MPI_COMM_WORLD`.
    /// Collective over `world` when it differs (a `MPI_Comm_dup`); every member decides
    /// alike, since a world congruent with one member's launch is that whole launch.
    pub(crate) fn for_world(world: &SimpleCommunicator) -> Result<Self, crate::error::PcmError> {
        let _internal = Internal::enter();
        let launch = SimpleCommunicator::world();
        if matches!(
            launch.compare(world),
            mpi::topology::CommunicatorRelation::Identical
                | mpi::topology::CommunicatorRelation::Congruent
        ) {
            return Ok(Self::none());
        }
        let mut raw = std::mem::MaybeUninit::<MPI_Comm>::uninit();
        // SAFETY: `world` is a live intracommunicator; MPI_Comm_dup writes one handle.
        let code = unsafe { ffi::PMPI_Comm_dup(world.as_raw(), raw.as_mut_ptr()) };
        crate::ffi::check("MPI_Comm_dup", code)?;
        // SAFETY: the dup succeeded: a live intracommunicator this value owns.
        let comm = unsafe { SimpleCommunicator::from_raw(raw.assume_init()) };
        copy_error_handler(launch.as_raw(), comm.as_raw());
        STAND_IN.store(comm.as_raw().0 as usize, Ordering::Relaxed);
        Ok(WorldStandIn { comm: Some(comm) })
    }

    /// Withdraws the stand-in and hands its communicator over to be released (collectively,
    /// as the world it duplicates is).
    pub(crate) fn into_comm(mut self) -> Option<SimpleCommunicator> {
        let comm = self.comm.take();
        if comm.is_some() {
            STAND_IN.store(0, Ordering::Relaxed);
        }
        comm
    }
}

impl Drop for WorldStandIn {
    fn drop(&mut self) {
        if self.comm.is_some() {
            STAND_IN.store(0, Ordering::Relaxed);
        }
    }
}

/// Gives `to` the error handler of `from`: calls the application makes on `MPI_COMM_WORLD`
/// fail (or return errors) on the stand-in as they would on the launch's world.
fn copy_error_handler(from: MPI_Comm, to: MPI_Comm) {
    let mut handler = std::mem::MaybeUninit::<MPI_Errhandler>::uninit();
    // SAFETY: `from` is a live communicator; one handle is written.
    if unsafe { ffi::PMPI_Comm_get_errhandler(from, handler.as_mut_ptr()) }
        == ffi::MPI_SUCCESS as c_int
    {
        // SAFETY: the call succeeded, so the handle is initialised.
        let mut handler = unsafe { handler.assume_init() };
        // SAFETY: both handles are live; the reference got from MPI is freed once.
        unsafe {
            ffi::PMPI_Comm_set_errhandler(to, handler);
            ffi::PMPI_Errhandler_free(&mut handler);
        }
    }
}

/// The communicator a wrapped call is to use: the [`WorldStandIn`] for `MPI_COMM_WORLD` in
/// the application's calls while one is published, else `comm`. One relaxed load and a
/// branch when there is none.
#[inline(always)]
fn current(comm: MPI_Comm) -> MPI_Comm {
    let stand_in = STAND_IN.load(Ordering::Relaxed);
    // SAFETY: reading an extern constant of rsmpi's C shim.
    if stand_in != 0
        && comm == unsafe { ffi::RSMPI_COMM_WORLD }
        && INTERNAL.load(Ordering::Relaxed) == 0
    {
        MPI_Comm(stand_in as _)
    } else {
        comm
    }
}

/// An argument of a wrapped call as the implementation gets it: a communicator goes
/// through [`current`], anything else unchanged (which compiles to nothing).
trait Forward: Copy {
    #[inline(always)]
    fn forward(self) -> Self {
        self
    }
}
impl Forward for MPI_Comm {
    #[inline(always)]
    fn forward(self) -> Self {
        current(self)
    }
}
impl Forward for c_int {}
impl Forward for MPI_Aint {}
impl Forward for MPI_Datatype {}
impl Forward for MPI_Op {}
impl Forward for MPI_Group {}
impl Forward for MPI_Info {}
impl Forward for MPI_Errhandler {}
impl<T> Forward for *const T {}
impl<T> Forward for *mut T {}

/// Turns counting on for a world of `size` ranks (allocating the counters once; later calls
/// with the same size keep them), and makes `world` the communicator whose ranks are peers.
pub(crate) fn attach(world: MPI_Comm, size: u32, enabled: bool) {
    WORLD.store(world.0 as usize, Ordering::Relaxed);
    TRANSLATIONS.with(|t| t.borrow_mut().clear());
    if !enabled {
        return;
    }
    if counters_any().is_some_and(|c| c.peers.len() == size as usize) {
        return;
    }
    let counters = Box::new(Counters {
        peers: (0..size).map(|_| Peer::default()).collect(),
        collective_calls: AtomicU64::new(0),
        collective_bytes: AtomicU64::new(0),
        mpi_ticks: AtomicU64::new(0),
        ticks_at_start: ticks(),
        started: Instant::now(),
    });
    // A PCM job never changes size, so at most one earlier set is left behind here.
    COUNTERS.store(Box::into_raw(counters), Ordering::Release);
}

/// What this process counted: traffic by peer (peers with none left out), collectives, and
/// time inside MPI in microseconds. `None` while profiling is off.
pub(crate) fn snapshot() -> Option<(Vec<PeerTraffic>, CollectiveTraffic, u64)> {
    let counters = counters_any()?;
    let traffic = counters
        .peers
        .iter()
        .enumerate()
        .map(|(rank, p)| PeerTraffic {
            peer: Rank(rank as u32),
            host: None,
            sent_messages: p.sent_messages.load(Ordering::Relaxed),
            sent_bytes: p.sent_bytes.load(Ordering::Relaxed),
            received_messages: p.received_messages.load(Ordering::Relaxed),
            received_bytes: p.received_bytes.load(Ordering::Relaxed),
        })
        .filter(|t| t.sent_messages != 0 || t.received_messages != 0)
        .collect();
    let collectives = CollectiveTraffic {
        calls: counters.collective_calls.load(Ordering::Relaxed),
        bytes: counters.collective_bytes.load(Ordering::Relaxed),
    };
    Some((traffic, collectives, counters.mpi_us()))
}

/// Time this process spent inside the application's MPI calls, microseconds; `None` while
/// profiling is off. Cheap (two clock reads): the status check reads it at every check.
pub(crate) fn mpi_us() -> Option<u64> {
    counters_any().map(Counters::mpi_us)
}

fn counters_any() -> Option<&'static Counters> {
    let p = COUNTERS.load(Ordering::Acquire);
    // SAFETY: non-null pointers in COUNTERS are leaked boxes, valid for the process's life.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Counters to update for an application call, with the time it started; `None` when
/// profiling is off or the call is PCM's own.
#[inline(always)]
fn begin() -> Option<(&'static Counters, u64)> {
    let p = COUNTERS.load(Ordering::Acquire);
    if p.is_null() || INTERNAL.load(Ordering::Relaxed) != 0 {
        return None;
    }
    // SAFETY: as in `counters_any`.
    Some((unsafe { &*p }, ticks()))
}

/// As [`begin`], for calls that are counted but not timed.
#[inline(always)]
fn begin_untimed() -> Option<&'static Counters> {
    let p = COUNTERS.load(Ordering::Acquire);
    if p.is_null() || INTERNAL.load(Ordering::Relaxed) != 0 {
        return None;
    }
    // SAFETY: as in `counters_any`.
    Some(unsafe { &*p })
}

#[inline(always)]
fn finish((counters, started): (&'static Counters, u64)) -> &'static Counters {
    add(&counters.mpi_ticks, ticks().saturating_sub(started));
    counters
}

/// Payload bytes of `count` elements of `datatype`.
#[inline]
fn bytes(count: c_int, datatype: MPI_Datatype) -> u64 {
    let mut size: c_int = 0;
    // SAFETY: `datatype` is the handle the application passed to a call that accepted it;
    // PMPI_Type_size writes one int.
    let rc = unsafe { ffi::PMPI_Type_size(datatype, &mut size) };
    if rc != ffi::MPI_SUCCESS as c_int || count <= 0 || size <= 0 {
        return 0;
    }
    count as u64 * size as u64
}

/// Rank in the PCM world of `rank` of `comm`, if that process belongs to the world.
#[inline]
fn world_rank(comm: MPI_Comm, rank: c_int, peers: usize) -> Option<usize> {
    if rank < 0 {
        return None; // MPI_PROC_NULL, MPI_ANY_SOURCE
    }
    let world = WORLD.load(Ordering::Relaxed);
    let handle = comm.0 as usize;
    if handle == world || handle == STAND_IN.load(Ordering::Relaxed) {
        return ((rank as usize) < peers).then_some(rank as usize);
    }
    if world == 0 {
        return None;
    }
    let translated = TRANSLATIONS.with(|cache| {
        let mut cache = cache.borrow_mut();
        let index = match cache.iter().position(|(c, _)| *c == comm.0 as usize) {
            Some(index) => index,
            None => {
                if cache.len() >= MAX_CACHED_COMMS {
                    cache.remove(0);
                }
                cache.push((comm.0 as usize, translate_all(comm, MPI_Comm(world as _))));
                cache.len() - 1
            }
        };
        cache[index]
            .1
            .as_ref()
            .and_then(|ranks| ranks.get(rank as usize).copied())
    })?;
    (translated >= 0 && (translated as usize) < peers).then_some(translated as usize)
}

/// World rank of every rank of intracommunicator `comm` (negative: not in the world), or
/// `None` for an intercommunicator or on any error.
#[cold]
fn translate_all(comm: MPI_Comm, world: MPI_Comm) -> Option<Box<[i32]>> {
    let ok = |rc: c_int| rc == ffi::MPI_SUCCESS as c_int;
    let mut inter: c_int = 0;
    // SAFETY: `comm` is a live communicator the application just used; one int is written.
    if !ok(unsafe { ffi::PMPI_Comm_test_inter(comm, &mut inter) }) || inter != 0 {
        return None;
    }
    let mut group = std::mem::MaybeUninit::<ffi::MPI_Group>::uninit();
    let mut world_group = std::mem::MaybeUninit::<ffi::MPI_Group>::uninit();
    // SAFETY: both communicators are live; each call writes one group handle.
    if !ok(unsafe { ffi::PMPI_Comm_group(comm, group.as_mut_ptr()) }) {
        return None;
    }
    // SAFETY: PMPI_Comm_group succeeded, so the handle is initialised.
    let mut group = unsafe { group.assume_init() };
    // SAFETY: as above, for the world.
    let result = if ok(unsafe { ffi::PMPI_Comm_group(world, world_group.as_mut_ptr()) }) {
        // SAFETY: initialised by the successful call.
        let mut world_group = unsafe { world_group.assume_init() };
        let mut size: c_int = 0;
        // SAFETY: `group` is live; one int is written.
        unsafe { ffi::PMPI_Group_size(group, &mut size) };
        let ranks: Vec<c_int> = (0..size.max(0)).collect();
        let mut out = vec![-1 as c_int; ranks.len()];
        // SAFETY: `ranks` and `out` both hold `size` ints; both groups are live.
        let rc = unsafe {
            ffi::PMPI_Group_translate_ranks(
                group,
                size,
                ranks.as_ptr(),
                world_group,
                out.as_mut_ptr(),
            )
        };
        // SAFETY: the group came from PMPI_Comm_group and is freed once.
        unsafe { ffi::PMPI_Group_free(&mut world_group) };
        ok(rc).then(|| {
            out.into_iter()
                .map(|r| if r == ffi::MPI_UNDEFINED { -1 } else { r })
                .collect()
        })
    } else {
        None
    };
    // SAFETY: the group came from PMPI_Comm_group and is freed once.
    unsafe { ffi::PMPI_Group_free(&mut group) };
    result
}

/// Forgets a communicator about to be freed: MPI may hand its handle out again.
fn forget(comm: MPI_Comm) {
    let _ = TRANSLATIONS.try_with(|cache| {
        if let Ok(mut cache) = cache.try_borrow_mut() {
            cache.retain(|(c, _)| *c != comm.0 as usize);
        }
    });
}

impl Counters {
    /// Time inside MPI, microseconds.
    fn mpi_us(&self) -> u64 {
        let elapsed_ns = self.started.elapsed().as_nanos();
        let elapsed_ticks = ticks().saturating_sub(self.ticks_at_start) as u128;
        let mpi_ticks = self.mpi_ticks.load(Ordering::Relaxed) as u128;
        (mpi_ticks * elapsed_ns)
            .checked_div(elapsed_ticks)
            .map_or(0, |ns| (ns / 1000) as u64)
    }

    #[inline]
    fn sent(&self, comm: MPI_Comm, dest: c_int, count: c_int, datatype: MPI_Datatype) {
        if let Some(peer) = world_rank(comm, dest, self.peers.len()) {
            let p = &self.peers[peer];
            add(&p.sent_messages, 1);
            add(&p.sent_bytes, bytes(count, datatype));
        }
    }

    #[inline]
    fn received(&self, comm: MPI_Comm, source: c_int, bytes: u64) {
        if let Some(peer) = world_rank(comm, source, self.peers.len()) {
            let p = &self.peers[peer];
            add(&p.received_messages, 1);
            add(&p.received_bytes, bytes);
        }
    }

    /// A completed receive, from its status.
    #[inline]
    fn received_status(&self, comm: MPI_Comm, datatype: MPI_Datatype, status: &MPI_Status) {
        let mut count: c_int = 0;
        // SAFETY: `status` was just filled in by a successful receive of `datatype`.
        let rc = unsafe { ffi::PMPI_Get_count(status, datatype, &mut count) };
        let n = if rc == ffi::MPI_SUCCESS as c_int && count != ffi::MPI_UNDEFINED {
            bytes(count, datatype)
        } else {
            0
        };
        self.received(comm, status.MPI_SOURCE, n);
    }

    #[inline]
    fn collective(&self, bytes: u64) {
        add(&self.collective_calls, 1);
        add(&self.collective_bytes, bytes);
    }
}

/// Whether this process is `root` of `comm`.
#[inline]
fn is_root(comm: MPI_Comm, root: c_int) -> bool {
    let mut rank: c_int = -1;
    // SAFETY: `comm` is the live communicator of the call being counted.
    unsafe { ffi::PMPI_Comm_rank(comm, &mut rank) };
    rank == root
}

#[inline]
fn comm_size(comm: MPI_Comm) -> c_int {
    let mut size: c_int = 0;
    // SAFETY: as in `is_root`.
    unsafe { ffi::PMPI_Comm_size(comm, &mut size) };
    size
}

/// Sum of the first `comm_size(comm)` entries of a counts array.
#[inline]
fn sum_counts(counts: *const c_int, comm: MPI_Comm) -> c_int {
    if counts.is_null() {
        return 0;
    }
    let n = comm_size(comm).max(0) as usize;
    // SAFETY: MPI requires a counts array of one entry per rank of `comm` at the calls that
    // read it here, and the call has just used it.
    let counts = unsafe { std::slice::from_raw_parts(counts, n) };
    counts.iter().map(|&c| c.max(0)).sum()
}

/// `status` if the caller wants one, else `local` (a receive must fill one for counting).
#[inline]
fn status_or(
    status: *mut MPI_Status,
    local: &mut std::mem::MaybeUninit<MPI_Status>,
) -> *mut MPI_Status {
    // SAFETY: reading an extern constant of rsmpi's C shim.
    let ignore = unsafe { ffi::RSMPI_STATUS_IGNORE };
    if status.is_null() || status == ignore {
        local.as_mut_ptr()
    } else {
        status
    }
}

/// Defines `MPI_x` forwarding to `PMPI_x` with the same arguments (each through
/// [`Forward`]: a stand-in for `MPI_COMM_WORLD`); the closure-like tail
/// counts, given the counters, after a successful call. `untimed` wrappers (non-blocking
/// initiations, which return at once) count without reading the time-stamp counter: that
/// halves the cost of a halo exchange (`Isend`, `Irecv`, two `Wait`s), and the waiting is
/// timed where it happens, in the completion calls. `plain` wrappers only forward.
macro_rules! wrap {
    (plain $name:ident => $pmpi:ident ( $($arg:ident : $ty:ty),* $(,)? )) => {
        #[no_mangle]
        unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            $(let $arg = Forward::forward($arg);)*
            // SAFETY: the caller's arguments (a stand-in for MPI_COMM_WORLD, see `current`)
            // to the implementation of the same function (identical signature).
            unsafe { ffi::$pmpi($($arg),*) }
        }
    };
    ($name:ident => $pmpi:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(, |$c:ident| $count:expr)? ) => {
        #[no_mangle]
        unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            $(let $arg = Forward::forward($arg);)*
            let Some(call) = begin() else {
                // SAFETY: the caller's arguments, unchanged, to the implementation of the
                // same function (identical signature).
                return unsafe { ffi::$pmpi($($arg),*) };
            };
            // SAFETY: as above.
            let rc = unsafe { ffi::$pmpi($($arg),*) };
            #[allow(unused_variables)]
            let counters = finish(call);
            $(
                if rc == ffi::MPI_SUCCESS as c_int {
                    let $c = counters;
                    $count;
                }
            )?
            rc
        }
    };
    (untimed $name:ident => $pmpi:ident ( $($arg:ident : $ty:ty),* $(,)? ), |$c:ident| $count:expr ) => {
        #[no_mangle]
        unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            $(let $arg = Forward::forward($arg);)*
            // SAFETY: the caller's arguments (a stand-in for MPI_COMM_WORLD, see `current`)
            // to the implementation of the same function (identical signature).
            let rc = unsafe { ffi::$pmpi($($arg),*) };
            if let (Some($c), true) = (begin_untimed(), rc == ffi::MPI_SUCCESS as c_int) {
                $count;
            }
            rc
        }
    };
}

// ----- point-to-point sends -----
wrap!(MPI_Send => PMPI_Send(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm),
    |c| c.sent(comm, dest, count, datatype));
wrap!(MPI_Ssend => PMPI_Ssend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm),
    |c| c.sent(comm, dest, count, datatype));
wrap!(MPI_Rsend => PMPI_Rsend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm),
    |c| c.sent(comm, dest, count, datatype));
wrap!(MPI_Bsend => PMPI_Bsend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm),
    |c| c.sent(comm, dest, count, datatype));
wrap!(untimed MPI_Isend => PMPI_Isend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.sent(comm, dest, count, datatype));
wrap!(untimed MPI_Issend => PMPI_Issend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.sent(comm, dest, count, datatype));
wrap!(untimed MPI_Irsend => PMPI_Irsend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.sent(comm, dest, count, datatype));
wrap!(untimed MPI_Ibsend => PMPI_Ibsend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.sent(comm, dest, count, datatype));

// ----- point-to-point receives -----
wrap!(untimed MPI_Irecv => PMPI_Irecv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.received(comm, source, bytes(count, datatype)));

#[no_mangle]
unsafe extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    let comm = current(comm);
    let Some(call) = begin() else {
        // SAFETY: the caller's arguments, unchanged, to the real implementation.
        return unsafe { ffi::PMPI_Recv(buf, count, datatype, source, tag, comm, status) };
    };
    let mut local = std::mem::MaybeUninit::uninit();
    let status = status_or(status, &mut local);
    // SAFETY: as above, with `status` pointing at the caller's status or at `local`.
    let rc = unsafe { ffi::PMPI_Recv(buf, count, datatype, source, tag, comm, status) };
    let counters = finish(call);
    if rc == ffi::MPI_SUCCESS as c_int {
        // SAFETY: a successful receive filled `status` in.
        counters.received_status(comm, datatype, unsafe { &*status });
    }
    rc
}

#[no_mangle]
unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    let comm = current(comm);
    let Some(call) = begin() else {
        // SAFETY: the caller's arguments, unchanged, to the real implementation.
        return unsafe {
            ffi::PMPI_Sendrecv(
                sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                recvtag, comm, status,
            )
        };
    };
    let mut local = std::mem::MaybeUninit::uninit();
    let status = status_or(status, &mut local);
    // SAFETY: as above, with `status` pointing at the caller's status or at `local`.
    let rc = unsafe {
        ffi::PMPI_Sendrecv(
            sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
            recvtag, comm, status,
        )
    };
    let counters = finish(call);
    if rc == ffi::MPI_SUCCESS as c_int {
        counters.sent(comm, dest, sendcount, sendtype);
        // SAFETY: a successful receive filled `status` in.
        counters.received_status(comm, recvtype, unsafe { &*status });
    }
    rc
}

#[no_mangle]
unsafe extern "C" fn MPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    let comm = current(comm);
    let Some(call) = begin() else {
        // SAFETY: the caller's arguments, unchanged, to the real implementation.
        return unsafe {
            ffi::PMPI_Sendrecv_replace(
                buf, count, datatype, dest, sendtag, source, recvtag, comm, status,
            )
        };
    };
    let mut local = std::mem::MaybeUninit::uninit();
    let status = status_or(status, &mut local);
    // SAFETY: as above, with `status` pointing at the caller's status or at `local`.
    let rc = unsafe {
        ffi::PMPI_Sendrecv_replace(
            buf, count, datatype, dest, sendtag, source, recvtag, comm, status,
        )
    };
    let counters = finish(call);
    if rc == ffi::MPI_SUCCESS as c_int {
        counters.sent(comm, dest, count, datatype);
        // SAFETY: a successful receive filled `status` in.
        counters.received_status(comm, datatype, unsafe { &*status });
    }
    rc
}

/// Remembers which communicator and source a matched message came from (`MPI_Mrecv` and
/// `MPI_Imrecv` name neither).
fn probed(message: *mut MPI_Message, comm: MPI_Comm, status: &MPI_Status) {
    if !message.is_null() {
        // SAFETY: the probe just wrote a message handle there.
        PROBED_MESSAGE.store(unsafe { *message }.0 as usize, Ordering::Relaxed);
        PROBED_COMM.store(comm.0 as usize, Ordering::Relaxed);
        PROBED_SOURCE.store(status.MPI_SOURCE, Ordering::Relaxed);
    }
}

#[no_mangle]
unsafe extern "C" fn MPI_Mprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    let comm = current(comm);
    let started = begin();
    let mut local = std::mem::MaybeUninit::uninit();
    let status = status_or(status, &mut local);
    // SAFETY: the caller's arguments, with `status` pointing at the caller's status or at
    // `local`, to the real implementation.
    let rc = unsafe { ffi::PMPI_Mprobe(source, tag, comm, message, status) };
    if let Some(call) = started {
        finish(call);
    }
    if rc == ffi::MPI_SUCCESS as c_int {
        // SAFETY: a successful probe filled `status` in.
        probed(message, comm, unsafe { &*status });
    }
    rc
}

#[no_mangle]
unsafe extern "C" fn MPI_Improbe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    let comm = current(comm);
    let started = begin();
    let mut local = std::mem::MaybeUninit::uninit();
    let status = status_or(status, &mut local);
    // SAFETY: the caller's arguments, with `status` pointing at the caller's status or at
    // `local`, to the real implementation.
    let rc = unsafe { ffi::PMPI_Improbe(source, tag, comm, flag, message, status) };
    if let Some(call) = started {
        finish(call);
    }
    // SAFETY: a successful call wrote `flag`, and `status` when the flag is set.
    if rc == ffi::MPI_SUCCESS as c_int && !flag.is_null() && unsafe { *flag } != 0 {
        probed(message, comm, unsafe { &*status });
    }
    rc
}

/// The communicator of a message about to be received, if it was the last one probed.
fn message_comm(message: *mut MPI_Message) -> Option<MPI_Comm> {
    if message.is_null() {
        return None;
    }
    // SAFETY: the caller passes a valid message handle pointer to MPI_(I)mrecv.
    let handle = unsafe { *message }.0 as usize;
    (handle != 0 && handle == PROBED_MESSAGE.load(Ordering::Relaxed))
        .then(|| MPI_Comm(PROBED_COMM.load(Ordering::Relaxed) as _))
}

#[no_mangle]
unsafe extern "C" fn MPI_Mrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    let Some(call) = begin() else {
        // SAFETY: the caller's arguments, unchanged, to the real implementation.
        return unsafe { ffi::PMPI_Mrecv(buf, count, datatype, message, status) };
    };
    let comm = message_comm(message);
    let mut local = std::mem::MaybeUninit::uninit();
    let status = status_or(status, &mut local);
    // SAFETY: as above, with `status` pointing at the caller's status or at `local`.
    let rc = unsafe { ffi::PMPI_Mrecv(buf, count, datatype, message, status) };
    let counters = finish(call);
    if let (true, Some(comm)) = (rc == ffi::MPI_SUCCESS as c_int, comm) {
        // SAFETY: a successful receive filled `status` in.
        counters.received_status(comm, datatype, unsafe { &*status });
    }
    rc
}

#[no_mangle]
unsafe extern "C" fn MPI_Imrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    request: *mut MPI_Request,
) -> c_int {
    let Some(call) = begin() else {
        // SAFETY: the caller's arguments, unchanged, to the real implementation.
        return unsafe { ffi::PMPI_Imrecv(buf, count, datatype, message, request) };
    };
    let comm = message_comm(message);
    // SAFETY: as above.
    let rc = unsafe { ffi::PMPI_Imrecv(buf, count, datatype, message, request) };
    let counters = finish(call);
    if let (true, Some(comm)) = (rc == ffi::MPI_SUCCESS as c_int, comm) {
        // Counted when posted, as for MPI_Irecv, from the probe's source.
        let source = PROBED_SOURCE.load(Ordering::Relaxed);
        counters.received(comm, source, bytes(count, datatype));
    }
    rc
}

// ----- completion and probes (time only) -----
wrap!(MPI_Wait => PMPI_Wait(request: *mut MPI_Request, status: *mut MPI_Status));
wrap!(MPI_Waitall => PMPI_Waitall(count: c_int, requests: *mut MPI_Request, statuses: *mut MPI_Status));
wrap!(MPI_Waitany => PMPI_Waitany(count: c_int, requests: *mut MPI_Request, index: *mut c_int, status: *mut MPI_Status));
wrap!(MPI_Waitsome => PMPI_Waitsome(incount: c_int, requests: *mut MPI_Request, outcount: *mut c_int, indices: *mut c_int, statuses: *mut MPI_Status));
wrap!(MPI_Test => PMPI_Test(request: *mut MPI_Request, flag: *mut c_int, status: *mut MPI_Status));
wrap!(MPI_Testall => PMPI_Testall(count: c_int, requests: *mut MPI_Request, flag: *mut c_int, statuses: *mut MPI_Status));
wrap!(MPI_Testany => PMPI_Testany(count: c_int, requests: *mut MPI_Request, index: *mut c_int, flag: *mut c_int, status: *mut MPI_Status));
wrap!(MPI_Testsome => PMPI_Testsome(incount: c_int, requests: *mut MPI_Request, outcount: *mut c_int, indices: *mut c_int, statuses: *mut MPI_Status));
wrap!(MPI_Probe => PMPI_Probe(source: c_int, tag: c_int, comm: MPI_Comm, status: *mut MPI_Status));
wrap!(MPI_Iprobe => PMPI_Iprobe(source: c_int, tag: c_int, comm: MPI_Comm, flag: *mut c_int, status: *mut MPI_Status));

// ----- collectives -----
wrap!(MPI_Barrier => PMPI_Barrier(comm: MPI_Comm), |c| c.collective(0));
wrap!(MPI_Bcast => PMPI_Bcast(buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm),
    |c| c.collective(if is_root(comm, root) { bytes(count, datatype) } else { 0 }));
wrap!(MPI_Reduce => PMPI_Reduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm),
    |c| c.collective(bytes(count, datatype)));
wrap!(MPI_Allreduce => PMPI_Allreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm),
    |c| c.collective(bytes(count, datatype)));
wrap!(MPI_Scan => PMPI_Scan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm),
    |c| c.collective(bytes(count, datatype)));
wrap!(MPI_Exscan => PMPI_Exscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm),
    |c| c.collective(bytes(count, datatype)));
wrap!(MPI_Reduce_scatter_block => PMPI_Reduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm),
    |c| c.collective(bytes(recvcount.saturating_mul(comm_size(comm)), datatype)));
wrap!(MPI_Gather => PMPI_Gather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm),
    |c| c.collective(bytes(sendcount, sendtype)));
wrap!(MPI_Gatherv => PMPI_Gatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm),
    |c| c.collective(bytes(sendcount, sendtype)));
wrap!(MPI_Scatter => PMPI_Scatter(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm),
    |c| c.collective(if is_root(comm, root) { bytes(sendcount.saturating_mul(comm_size(comm)), sendtype) } else { 0 }));
wrap!(MPI_Scatterv => PMPI_Scatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm),
    |c| c.collective(if is_root(comm, root) { bytes(sum_counts(sendcounts, comm), sendtype) } else { 0 }));
wrap!(MPI_Allgather => PMPI_Allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm),
    |c| c.collective(bytes(sendcount, sendtype)));
wrap!(MPI_Allgatherv => PMPI_Allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm),
    |c| c.collective(bytes(sendcount, sendtype)));
wrap!(MPI_Alltoall => PMPI_Alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm),
    |c| c.collective(bytes(sendcount.saturating_mul(comm_size(comm)), sendtype)));
wrap!(MPI_Alltoallv => PMPI_Alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm),
    |c| c.collective(bytes(sum_counts(sendcounts, comm), sendtype)));

// ----- non-blocking collectives (counted when started) -----
wrap!(untimed MPI_Ibarrier => PMPI_Ibarrier(comm: MPI_Comm, request: *mut MPI_Request), |c| c.collective(0));
wrap!(untimed MPI_Ibcast => PMPI_Ibcast(buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(if is_root(comm, root) { bytes(count, datatype) } else { 0 }));
wrap!(untimed MPI_Ireduce => PMPI_Ireduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(count, datatype)));
wrap!(untimed MPI_Iallreduce => PMPI_Iallreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(count, datatype)));
wrap!(untimed MPI_Iscan => PMPI_Iscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(count, datatype)));
wrap!(untimed MPI_Iexscan => PMPI_Iexscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(count, datatype)));
wrap!(untimed MPI_Ireduce_scatter_block => PMPI_Ireduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(recvcount.saturating_mul(comm_size(comm)), datatype)));
wrap!(untimed MPI_Igather => PMPI_Igather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(sendcount, sendtype)));
wrap!(untimed MPI_Igatherv => PMPI_Igatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(sendcount, sendtype)));
wrap!(untimed MPI_Iscatter => PMPI_Iscatter(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(if is_root(comm, root) { bytes(sendcount.saturating_mul(comm_size(comm)), sendtype) } else { 0 }));
wrap!(untimed MPI_Iscatterv => PMPI_Iscatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(if is_root(comm, root) { bytes(sum_counts(sendcounts, comm), sendtype) } else { 0 }));
wrap!(untimed MPI_Iallgather => PMPI_Iallgather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(sendcount, sendtype)));
wrap!(untimed MPI_Iallgatherv => PMPI_Iallgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(sendcount, sendtype)));
wrap!(untimed MPI_Ialltoall => PMPI_Ialltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(sendcount.saturating_mul(comm_size(comm)), sendtype)));
wrap!(untimed MPI_Ialltoallv => PMPI_Ialltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(sum_counts(sendcounts, comm), sendtype)));

wrap!(MPI_Reduce_scatter => PMPI_Reduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm),
    |c| c.collective(bytes(sum_counts(recvcounts, comm), datatype)));
wrap!(untimed MPI_Ireduce_scatter => PMPI_Ireduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request),
    |c| c.collective(bytes(sum_counts(recvcounts, comm), datatype)));

// ----- calls that only forward (a stand-in for MPI_COMM_WORLD; not counted) -----
// Communicator queries and constructors, and what code does with the world besides
// talking on it. Left out on purpose (they stay on the real MPI_COMM_WORLD): attributes,
// names, MPI_Comm_free; neighbourhood collectives (they need a topology communicator,
// never the world); MPI-4 persistent collectives (not in Open MPI 4).
wrap!(plain MPI_Comm_rank => PMPI_Comm_rank(comm: MPI_Comm, rank: *mut c_int));
wrap!(plain MPI_Comm_size => PMPI_Comm_size(comm: MPI_Comm, size: *mut c_int));
wrap!(plain MPI_Comm_group => PMPI_Comm_group(comm: MPI_Comm, group: *mut MPI_Group));
wrap!(plain MPI_Comm_compare => PMPI_Comm_compare(comm1: MPI_Comm, comm2: MPI_Comm, result: *mut c_int));
wrap!(plain MPI_Comm_test_inter => PMPI_Comm_test_inter(comm: MPI_Comm, flag: *mut c_int));
wrap!(plain MPI_Abort => PMPI_Abort(comm: MPI_Comm, errorcode: c_int));
wrap!(plain MPI_Comm_dup => PMPI_Comm_dup(comm: MPI_Comm, newcomm: *mut MPI_Comm));
wrap!(plain MPI_Comm_dup_with_info => PMPI_Comm_dup_with_info(comm: MPI_Comm, info: MPI_Info, newcomm: *mut MPI_Comm));
wrap!(plain MPI_Comm_idup => PMPI_Comm_idup(comm: MPI_Comm, newcomm: *mut MPI_Comm, request: *mut MPI_Request));
wrap!(plain MPI_Comm_split => PMPI_Comm_split(comm: MPI_Comm, color: c_int, key: c_int, newcomm: *mut MPI_Comm));
wrap!(plain MPI_Comm_split_type => PMPI_Comm_split_type(comm: MPI_Comm, split_type: c_int, key: c_int, info: MPI_Info, newcomm: *mut MPI_Comm));
wrap!(plain MPI_Comm_create => PMPI_Comm_create(comm: MPI_Comm, group: MPI_Group, newcomm: *mut MPI_Comm));
wrap!(plain MPI_Comm_create_group => PMPI_Comm_create_group(comm: MPI_Comm, group: MPI_Group, tag: c_int, newcomm: *mut MPI_Comm));
wrap!(plain MPI_Intercomm_create => PMPI_Intercomm_create(local_comm: MPI_Comm, local_leader: c_int, peer_comm: MPI_Comm, remote_leader: c_int, tag: c_int, newintercomm: *mut MPI_Comm));
wrap!(plain MPI_Cart_create => PMPI_Cart_create(comm: MPI_Comm, ndims: c_int, dims: *const c_int, periods: *const c_int, reorder: c_int, comm_cart: *mut MPI_Comm));
wrap!(plain MPI_Cart_map => PMPI_Cart_map(comm: MPI_Comm, ndims: c_int, dims: *const c_int, periods: *const c_int, newrank: *mut c_int));
wrap!(plain MPI_Graph_create => PMPI_Graph_create(comm: MPI_Comm, nnodes: c_int, index: *const c_int, edges: *const c_int, reorder: c_int, comm_graph: *mut MPI_Comm));
wrap!(plain MPI_Dist_graph_create => PMPI_Dist_graph_create(comm: MPI_Comm, n: c_int, sources: *const c_int, degrees: *const c_int, destinations: *const c_int, weights: *const c_int, info: MPI_Info, reorder: c_int, comm_dist_graph: *mut MPI_Comm));
wrap!(plain MPI_Dist_graph_create_adjacent => PMPI_Dist_graph_create_adjacent(comm: MPI_Comm, indegree: c_int, sources: *const c_int, sourceweights: *const c_int, outdegree: c_int, destinations: *const c_int, destweights: *const c_int, info: MPI_Info, reorder: c_int, comm_dist_graph: *mut MPI_Comm));
wrap!(plain MPI_Comm_set_errhandler => PMPI_Comm_set_errhandler(comm: MPI_Comm, errhandler: MPI_Errhandler));
wrap!(plain MPI_Comm_get_errhandler => PMPI_Comm_get_errhandler(comm: MPI_Comm, errhandler: *mut MPI_Errhandler));
wrap!(plain MPI_Comm_call_errhandler => PMPI_Comm_call_errhandler(comm: MPI_Comm, errorcode: c_int));
wrap!(plain MPI_Send_init => PMPI_Send_init(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request));
wrap!(plain MPI_Ssend_init => PMPI_Ssend_init(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request));
wrap!(plain MPI_Rsend_init => PMPI_Rsend_init(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request));
wrap!(plain MPI_Bsend_init => PMPI_Bsend_init(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request));
wrap!(plain MPI_Recv_init => PMPI_Recv_init(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request));
wrap!(plain MPI_Pack => PMPI_Pack(inbuf: *const c_void, incount: c_int, datatype: MPI_Datatype, outbuf: *mut c_void, outsize: c_int, position: *mut c_int, comm: MPI_Comm));
wrap!(plain MPI_Unpack => PMPI_Unpack(inbuf: *const c_void, insize: c_int, position: *mut c_int, outbuf: *mut c_void, outcount: c_int, datatype: MPI_Datatype, comm: MPI_Comm));
wrap!(plain MPI_Pack_size => PMPI_Pack_size(incount: c_int, datatype: MPI_Datatype, comm: MPI_Comm, size: *mut c_int));
wrap!(plain MPI_Win_create => PMPI_Win_create(base: *mut c_void, size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, win: *mut ffi::MPI_Win));
wrap!(plain MPI_Win_allocate => PMPI_Win_allocate(size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut ffi::MPI_Win));
wrap!(plain MPI_Win_allocate_shared => PMPI_Win_allocate_shared(size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut ffi::MPI_Win));
wrap!(plain MPI_Win_create_dynamic => PMPI_Win_create_dynamic(info: MPI_Info, comm: MPI_Comm, win: *mut ffi::MPI_Win));
wrap!(plain MPI_File_open => PMPI_File_open(comm: MPI_Comm, filename: *const std::os::raw::c_char, amode: c_int, info: MPI_Info, fh: *mut ffi::MPI_File));

/// Fortran's `MPI_COMM_WORLD`. Open MPI 4's Fortran bindings (`mpif.h`, `use mpi`,
/// `use mpi_f08`) call the C library under its `PMPI_` names, past every `MPI_` wrapper,
/// but turn each Fortran communicator into a C one through this function (a call through
/// the PLT in libmpi_mpifh, 155 of them): defined here, it takes the library's place, and
/// the Fortran `MPI_COMM_WORLD` becomes the stand-in like the C one. The real conversion is
/// the library's `MPI_Comm_f2c`, the same code under its other name (an alias in both
/// Open MPI and MPICH; MPICH's Fortran bindings call the `MPI_` wrappers instead and never
/// this).
#[no_mangle]
unsafe extern "C" fn PMPI_Comm_f2c(comm: c_int) -> MPI_Comm {
    // SAFETY: the library's conversion of a Fortran handle; it validates nothing and
    // returns a handle (or MPI_COMM_NULL) as the Fortran binding expects.
    current(unsafe { ffi::MPI_Comm_f2c(comm) })
}

// ----- communicator release: forget cached translations -----
#[no_mangle]
unsafe extern "C" fn MPI_Comm_free(comm: *mut MPI_Comm) -> c_int {
    if !comm.is_null() {
        // SAFETY: the caller passes a pointer to a live communicator handle.
        forget(unsafe { *comm });
    }
    // SAFETY: the caller's argument, unchanged, to the real implementation.
    unsafe { ffi::PMPI_Comm_free(comm) }
}

#[no_mangle]
unsafe extern "C" fn MPI_Comm_disconnect(comm: *mut MPI_Comm) -> c_int {
    if !comm.is_null() {
        // SAFETY: as in MPI_Comm_free.
        forget(unsafe { *comm });
    }
    // SAFETY: the caller's argument, unchanged, to the real implementation.
    unsafe { ffi::PMPI_Comm_disconnect(comm) }
}
