//! The C interface of PCM: `libpcm.so`, `libpcm.a` and `include/pcm.h`.
//!
//! A thin layer over the Rust [`pcm_rs`] crate, with no second implementation of
//! anything: every call checks its C arguments, then calls the same method a Rust program
//! calls ([`Pcm::attach`], [`Pcm::status`], [`Pcm::store_array`], [`Pcm::reconfigure`],
//! ...). The calls are the paper's (Figure 11), with the smallest changes C needs; the
//! header and docs/instrumenting-c.md describe them.
//!
//! # Rules at the boundary
//! - Every call returns a C `int`: `PCM_SUCCESS` (0), a non-negative answer, or a negative
//!   `PCM_ERR_*` code. The message of the last failure is kept for `PCM_Last_error` and
//!   logged (target `pcm::capi`). No call aborts the process on bad input: NULL pointers,
//!   unknown names, a datatype or count that does not match what was stored, calls before
//!   `PCM_Init` or after `PCM_Finalize` all return codes.
//! - Panics never cross into C: each call runs under `catch_unwind`, and a panic becomes
//!   `PCM_ERR_INTERNAL` (PCM is then unusable in the process, but the process lives).
//! - The application initialises MPI (`MPI_Init`) and finalizes it (`MPI_Finalize`), as in
//!   the paper. This library defines `MPI_Init` and `MPI_Init_thread` (PMPI interposition,
//!   like the traffic profiling wrappers of the `pcm` crate, which it exports too): on
//!   MPICH they put `MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1` into the environment before the
//!   real `PMPI_Init`, so that a departed process can exit at once.
//! - One process, one `Pcm`, kept in a global behind a mutex. MPI is initialised at
//!   `MPI_THREAD_SINGLE` semantics: call PCM from the thread that calls MPI.
#![allow(unsafe_code)] // This crate is the C boundary: raw pointers in, codes out.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_long, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};

use mpi::ffi::{MPI_Comm, RSMPI_Fint as MPI_Fint};
use mpi::raw::AsRaw;
use pcm_rs::{Pcm, PcmError, Pod, ProcessStatus, Reconfigured, Status};

/// `PCM_SUCCESS`.
pub const SUCCESS: c_int = 0;
/// `PCM_FRESH`: `PCM_Process_Status` of a process that started with the job.
pub const FRESH: c_int = -1;
/// `PCM_ERR_NOT_INITIALIZED`.
pub const ERR_NOT_INITIALIZED: c_int = -2;
/// `PCM_ERR_ALREADY_INITIALIZED`.
pub const ERR_ALREADY_INITIALIZED: c_int = -3;
/// `PCM_ERR_NULL`.
pub const ERR_NULL: c_int = -4;
/// `PCM_ERR_ARG`.
pub const ERR_ARG: c_int = -5;
/// `PCM_ERR_COMM`.
pub const ERR_COMM: c_int = -6;
/// `PCM_ERR_NOT_STORED`.
pub const ERR_NOT_STORED: c_int = -7;
/// `PCM_ERR_TYPE`.
pub const ERR_TYPE: c_int = -8;
/// `PCM_ERR_COUNT`.
pub const ERR_COUNT: c_int = -9;
/// `PCM_ERR_ORDER`.
pub const ERR_ORDER: c_int = -10;
/// `PCM_ERR_CONFIG`.
pub const ERR_CONFIG: c_int = -11;
/// `PCM_ERR_MPI`.
pub const ERR_MPI: c_int = -12;
/// `PCM_ERR_INTERNAL`.
pub const ERR_INTERNAL: c_int = -13;

/// `PCM_Status` answers (`PCM_CONTINUE`, ...).
const CONTINUE: c_int = 0;
const MIGRATE: c_int = 1;
const RECONFIGURE: c_int = 2;
const CHECKPOINT: c_int = 3;
const RESIZE: c_int = 4;

/// `PCM_Set_malleable` size rules (`PCM_SIZE_ANY`, ...).
const SIZE_ANY: c_int = 0;
const SIZE_MULTIPLE_OF: c_int = 1;
const SIZE_POWER_OF_TWO: c_int = 2;
const SIZE_SQUARE: c_int = 3;

/// A failed call: its code and what was wrong.
#[derive(Debug)]
struct Failure {
    code: c_int,
    message: String,
}

impl Failure {
    fn new(code: c_int, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<PcmError> for Failure {
    fn from(e: PcmError) -> Self {
        let code = match &e {
            PcmError::NotStored { .. } => ERR_NOT_STORED,
            PcmError::WrongType { .. } | PcmError::Codec { .. } => ERR_TYPE,
            PcmError::WrongLength { .. } => ERR_COUNT,
            PcmError::InvalidName(_) | PcmError::Declaration(_) => ERR_ARG,
            PcmError::Config { variable, .. } if *variable == "application name" => ERR_ARG,
            PcmError::Config { .. } | PcmError::WrongMpiLibrary { .. } => ERR_CONFIG,
            PcmError::InvalidHost(_) => ERR_CONFIG,
            PcmError::MpiInit | PcmError::MpiNotInitialized => ERR_NOT_INITIALIZED,
            PcmError::NothingPending => ERR_ORDER,
            PcmError::Internal(_) => ERR_INTERNAL,
            _ => ERR_MPI,
        };
        Failure::new(code, e.to_string())
    }
}

type CResult<T> = Result<T, Failure>;

/// What the last `PCM_Status` asked the application to do, until it is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Announced {
    Nothing,
    /// `PCM_MIGRATE` or `PCM_RECONFIGURE`: the other ranks are about to enter the
    /// collective reconfiguration, so `PCM_Reconfigure` is mandatory.
    Reconfiguration,
    /// `PCM_CHECKPOINT`: a program that ignores it (written like Figure 11, which only
    /// answers `PCM_MIGRATE`) gets no checkpoints, and is told so once.
    Checkpoint,
}

/// The process's PCM, from `PCM_Init` to `PCM_Finalize`.
enum State {
    Uninitialized,
    Running {
        pcm: Box<Pcm>,
        announced: Announced,
    },
    Finalized,
    /// A panic inside PCM, or a reconfiguration that failed after taking the `Pcm`.
    Broken,
}

/// The global state. `Pcm` holds MPI handles, which are raw pointers on Open MPI and so
/// not `Send`.
struct Global(State);

// SAFETY: MPI is used at MPI_THREAD_SINGLE semantics (the header says so): one thread
// makes every MPI and PCM call, and the mutex serialises any others anyway, so the handles
// are never used from two threads at once.
unsafe impl Send for Global {}

static STATE: Mutex<Global> = Mutex::new(Global(State::Uninitialized));

fn lock() -> MutexGuard<'static, Global> {
    // A panic while locked is caught at the boundary and marks the state broken itself, so a
    // poisoned lock holds nothing inconsistent to refuse.
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs one C call: its failures become codes and messages, its panics `PCM_ERR_INTERNAL`.
fn call(name: &'static str, body: impl FnOnce() -> CResult<c_int>) -> c_int {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => return value,
        Ok(Err(failure)) => failure,
        Err(panic) => {
            lock().0 = State::Broken;
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Failure::new(
                ERR_INTERNAL,
                format!("internal error in PCM (PCM is unusable now): {what}"),
            )
        }
    };
    let message = format!("{name}: {}", failure.message);
    pcm_rs::init_logging();
    tracing::warn!(target: "pcm::capi", "{message}");
    // Interior NUL bytes cannot come from PCM's messages; drop any rather than fail.
    let message = CString::new(message.replace('\0', "")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
    failure.code
}

/// Runs `f` on the running `Pcm`, or fails with the reason there is none.
fn with_pcm<R>(f: impl FnOnce(&mut Pcm, &mut Announced) -> CResult<R>) -> CResult<R> {
    let mut global = lock();
    match &mut global.0 {
        State::Running { pcm, announced } => f(pcm, announced),
        other => Err(not_running(other)),
    }
}

fn not_running(state: &State) -> Failure {
    match state {
        State::Uninitialized => Failure::new(ERR_NOT_INITIALIZED, "called before PCM_Init"),
        State::Finalized => Failure::new(ERR_NOT_INITIALIZED, "called after PCM_Finalize"),
        State::Broken => Failure::new(
            ERR_INTERNAL,
            "PCM is unusable after an earlier internal failure (see the log)",
        ),
        State::Running { .. } => Failure::new(ERR_ALREADY_INITIALIZED, "PCM is running"),
    }
}

fn check_comm(pcm: &Pcm, comm: MPI_Comm) -> CResult<()> {
    if comm == pcm.world().as_raw() {
        Ok(())
    } else {
        Err(Failure::new(
            ERR_COMM,
            "the communicator is not PCM's current world: use the one PCM_Init or the last \
             PCM_Reconfigure wrote back",
        ))
    }
}

/// `name` as a Rust string: not NULL, valid UTF-8 (PCM checks its length).
///
/// # Safety
/// `name` is NULL or points to a NUL-terminated string.
unsafe fn name_arg<'a>(name: *const c_char, what: &str) -> CResult<&'a str> {
    if name.is_null() {
        return Err(Failure::new(ERR_NULL, format!("{what} is NULL")));
    }
    // SAFETY: not NULL, and the caller promises a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(name) };
    name.to_str().map_err(|_| {
        Failure::new(
            ERR_ARG,
            format!("{what} {:?} is not valid UTF-8", name.to_string_lossy()),
        )
    })
}

/// The rank argument of `PCM_Store`, `PCM_Load` and `PCM_Count`: PCM keeps only this
/// process's state, so it must be this process's rank.
fn check_rank(pcm: &Pcm, rank: c_int) -> CResult<()> {
    if i64::from(rank) == i64::from(pcm.rank().0) {
        Ok(())
    } else {
        Err(Failure::new(
            ERR_ARG,
            format!(
                "rank {rank} is not this process's rank {}: PCM stores and loads only the \
                 calling rank's state",
                pcm.rank()
            ),
        ))
    }
}

/// The element types of `pcm.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Datatype {
    Char,
    Int,
    Long,
    Float,
    Double,
    Byte,
}

impl Datatype {
    const ALL: [Datatype; 6] = [
        Datatype::Char,
        Datatype::Int,
        Datatype::Long,
        Datatype::Float,
        Datatype::Double,
        Datatype::Byte,
    ];

    fn from_c(value: c_int) -> CResult<Self> {
        Ok(match value {
            1 => Datatype::Char,
            2 => Datatype::Int,
            3 => Datatype::Long,
            4 => Datatype::Float,
            5 => Datatype::Double,
            6 => Datatype::Byte,
            other => {
                return Err(Failure::new(
                    ERR_ARG,
                    format!("unknown datatype {other} (PCM_CHAR .. PCM_BYTE are 1 .. 6)"),
                ))
            }
        })
    }

    fn c_name(self) -> &'static str {
        match self {
            Datatype::Char => "PCM_CHAR",
            Datatype::Int => "PCM_INT",
            Datatype::Long => "PCM_LONG",
            Datatype::Float => "PCM_FLOAT",
            Datatype::Double => "PCM_DOUBLE",
            Datatype::Byte => "PCM_BYTE",
        }
    }

    fn size(self) -> usize {
        match self {
            Datatype::Char | Datatype::Byte => 1,
            Datatype::Int | Datatype::Float => 4,
            Datatype::Long | Datatype::Double => 8,
        }
    }

    /// The label the Rust store keeps for an array of this type, so that C and Rust code
    /// agree on what was stored (a `double` array is a Rust `[f64]`).
    fn label(self) -> &'static str {
        match self {
            Datatype::Char => std::any::type_name::<[i8]>(),
            Datatype::Int => std::any::type_name::<[i32]>(),
            Datatype::Long => std::any::type_name::<[i64]>(),
            Datatype::Float => std::any::type_name::<[f32]>(),
            Datatype::Double => std::any::type_name::<[f64]>(),
            Datatype::Byte => std::any::type_name::<[u8]>(),
        }
    }

    /// What is stored under `name`: its type and element count.
    fn stored(pcm: &Pcm, name: &str) -> CResult<(Datatype, usize)> {
        let (label, bytes) = pcm.array_layout(name)?;
        let found = Self::ALL.into_iter().find(|t| t.label() == label);
        let ty = found.ok_or_else(|| {
            Failure::new(
                ERR_TYPE,
                format!("state {name:?} was stored as {label}, which no PCM datatype matches"),
            )
        })?;
        Ok((ty, bytes / ty.size()))
    }
}

// The layout pcm.h promises; a platform where they differ cannot build this library.
const _: () = assert!(std::mem::size_of::<c_int>() == 4 && std::mem::size_of::<c_long>() == 8);

/// Copies `count` elements of `T` from `buf` into the store.
///
/// # Safety
/// `buf` points to `count` readable elements of `T` (any alignment).
unsafe fn store_typed<T: Pod>(
    pcm: &mut Pcm,
    name: &str,
    buf: *const c_void,
    count: usize,
) -> Result<(), PcmError> {
    if count == 0 {
        return pcm.store_array::<T>(name, &[]);
    }
    // SAFETY: the caller promises `count` elements there; bytes have no alignment.
    let bytes =
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), count * std::mem::size_of::<T>()) };
    match bytemuck::try_cast_slice::<u8, T>(bytes) {
        Ok(values) => pcm.store_array(name, values),
        // A misaligned C buffer (a double array inside a packed struct, say).
        Err(_) => pcm.store_array(name, &bytemuck::pod_collect_to_vec::<u8, T>(bytes)),
    }
}

/// Hands the array stored under `name` over into `buf` (PCM's copy is freed).
///
/// # Safety
/// `buf` has room for the whole array (any alignment).
unsafe fn load_typed<T: Pod>(pcm: &mut Pcm, name: &str, buf: *mut c_void) -> Result<(), PcmError> {
    let values = pcm.take_array::<T>(name)?;
    let bytes: &[u8] = bytemuck::cast_slice(&values);
    // SAFETY: the caller promises room for the array; bytes have no alignment, and the
    // application's buffer cannot overlap PCM's own.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len()) };
    Ok(())
}

/// The executable's file name, made a valid application name.
fn default_app_name() -> String {
    let name = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "c-program".to_owned()
    } else {
        name
    }
}

/// On MPICH, lets a departed process leave at once (`MPI_Finalize` must be local) and keeps
/// reductions rounding the same after a move (device collectives off), both read from the
/// environment in `MPI_Init`. A variable the user set is left as it is.
fn prepare_mpi_environment() {
    let settings = [
        pcm_rs::prompt_departure_env(),
        pcm_rs::deterministic_reductions_env(),
    ];
    for (key, value) in settings.into_iter().flatten() {
        if std::env::var_os(key).is_none() {
            // Before MPI_Init: the process has no MPI or PCM threads yet.
            std::env::set_var(key, value);
        }
    }
}

/// `MPI_Init`, interposed: prepares the environment, then calls the real one.
///
/// # Safety
/// As `MPI_Init`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    prepare_mpi_environment();
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { mpi::ffi::PMPI_Init(argc, argv) }
}

/// `MPI_Init_thread`, interposed like [`MPI_Init`].
///
/// # Safety
/// As `MPI_Init_thread`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    prepare_mpi_environment();
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { mpi::ffi::PMPI_Init_thread(argc, argv, required, provided) }
}

/// `PCM_Init(MPI_Comm *comm, const char *app_name)`: see pcm.h.
///
/// # Safety
/// `comm` is NULL or points to an `MPI_Comm`; `app_name` is NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn PCM_Init(comm: *mut MPI_Comm, app_name: *const c_char) -> c_int {
    call("PCM_Init", || {
        if comm.is_null() {
            return Err(Failure::new(ERR_NULL, "comm is NULL"));
        }
        let app = if app_name.is_null() {
            default_app_name()
        } else {
            // SAFETY: not NULL; the caller promises a C string.
            unsafe { name_arg(app_name, "app_name") }?.to_owned()
        };
        let mut global = lock();
        match &global.0 {
            State::Uninitialized => {}
            State::Running { .. } => {
                return Err(Failure::new(
                    ERR_ALREADY_INITIALIZED,
                    "PCM_Init was already called",
                ))
            }
            State::Finalized => {
                return Err(Failure::new(
                    ERR_ALREADY_INITIALIZED,
                    "PCM_Init after PCM_Finalize: PCM runs once per process",
                ))
            }
            State::Broken => return Err(not_running(&global.0)),
        }
        if !mpi::environment::is_initialized() || mpi::environment::is_finalized() {
            return Err(Failure::new(
                ERR_NOT_INITIALIZED,
                "MPI is not initialised: call MPI_Init before PCM_Init",
            ));
        }
        // SAFETY: not NULL; the caller promises an MPI_Comm there. RSMPI_COMM_WORLD is an
        // extern constant.
        let given = unsafe { *comm };
        if given != unsafe { mpi::ffi::RSMPI_COMM_WORLD } {
            return Err(Failure::new(
                ERR_COMM,
                "PCM_Init takes MPI_COMM_WORLD (and writes PCM's world back)",
            ));
        }
        // A C program has no subscriber of its own: PCM's log lines go to stderr.
        pcm_rs::init_logging();
        let pcm = Pcm::attach(&app)?;
        // SAFETY: checked not NULL above.
        unsafe { *comm = pcm.world().as_raw() };
        global.0 = State::Running {
            pcm: Box::new(pcm),
            announced: Announced::Nothing,
        };
        Ok(SUCCESS)
    })
}

/// `PCM_Process_Status()`: see pcm.h.
#[no_mangle]
pub extern "C" fn PCM_Process_Status() -> c_int {
    call("PCM_Process_Status", || {
        with_pcm(|pcm, _| {
            Ok(match pcm.process_status() {
                ProcessStatus::Fresh => FRESH,
                // The same rank: a replacement takes its predecessor's. An added process
                // (a resize) also has state to load: its rows, and the replicated values.
                ProcessStatus::Replacement { .. }
                | ProcessStatus::Restarted { .. }
                | ProcessStatus::Added { .. } => c_int::try_from(pcm.rank().0)
                    .map_err(|_| Failure::new(ERR_INTERNAL, "rank exceeds int"))?,
            })
        })
    })
}

/// `PCM_Status(MPI_Comm comm)`: see pcm.h.
#[no_mangle]
pub extern "C" fn PCM_Status(comm: MPI_Comm) -> c_int {
    call("PCM_Status", || {
        with_pcm(|pcm, announced| {
            check_comm(pcm, comm)?;
            match *announced {
                Announced::Nothing => {}
                Announced::Reconfiguration => {
                    return Err(Failure::new(
                        ERR_ORDER,
                        "the last PCM_Status asked for PCM_Reconfigure, which every rank must \
                         call before the next PCM_Status",
                    ))
                }
                Announced::Checkpoint => {
                    // Every rank got PCM_CHECKPOINT at the same iteration and runs the same
                    // code, so every rank declines it here alike.
                    *announced = Announced::Nothing;
                    if pcm.decline_checkpoint() && pcm.rank().0 == 0 {
                        tracing::error!(
                            target: "pcm::capi",
                            "PCM_Status returned PCM_CHECKPOINT, but the program went on \
                             without PCM_Store and PCM_Reconfigure: no checkpoint is written \
                             in this run (PCM_CHECKPOINT_INTERVAL is ignored from now on). \
                             Answer PCM_CHECKPOINT as PCM_MIGRATE is answered; see \
                             docs/instrumenting-c.md"
                        );
                    }
                }
            }
            let status = pcm.status()?;
            *announced = match status {
                Status::Continue => Announced::Nothing,
                Status::Checkpoint => Announced::Checkpoint,
                Status::Migrate | Status::Reconfigure | Status::Resize => {
                    Announced::Reconfiguration
                }
            };
            Ok(match status {
                Status::Continue => CONTINUE,
                Status::Migrate => MIGRATE,
                Status::Reconfigure => RECONFIGURE,
                Status::Checkpoint => CHECKPOINT,
                Status::Resize => RESIZE,
            })
        })
    })
}

/// `PCM_Store(rank, name, buf, type, count)`: see pcm.h.
///
/// # Safety
/// `name` is NULL or a C string; `buf` is NULL or holds `count` elements of `type`.
#[no_mangle]
pub unsafe extern "C" fn PCM_Store(
    rank: c_int,
    name: *const c_char,
    buf: *const c_void,
    datatype: c_int,
    count: c_long,
) -> c_int {
    call("PCM_Store", || {
        with_pcm(|pcm, _| {
            check_rank(pcm, rank)?;
            // SAFETY: the caller promises a C string or NULL.
            let name = unsafe { name_arg(name, "name") }?;
            let ty = Datatype::from_c(datatype)?;
            let count = checked_count(name, ty, buf, count)?;
            // SAFETY: `buf` holds `count` elements of `ty` (the caller's promise), checked
            // not NULL when there are any.
            unsafe { store_any(pcm, name, ty, buf, count) }?;
            Ok(SUCCESS)
        })
    })
}

/// The element count of a store call as a `usize`: not negative, not too large, and `buf`
/// not NULL when there are any.
///
/// Too large is a size no buffer can have (more bytes than `isize::MAX`, or past the end
/// of the address space from `buf`) or one PCM cannot allocate its copy of: the store
/// copies the array, and a failed allocation would abort the process (pcm.h promises a
/// code instead). The copy's allocation is tried here, and given back at once.
fn checked_count(name: &str, ty: Datatype, buf: *const c_void, count: c_long) -> CResult<usize> {
    let count = usize::try_from(count)
        .map_err(|_| Failure::new(ERR_ARG, format!("count {count} of {name:?} is negative")))?;
    let too_large = |why: &str| {
        Failure::new(
            ERR_ARG,
            format!(
                "count {count} of {name:?} is too large: {} bytes {why}",
                count.saturating_mul(ty.size())
            ),
        )
    };
    let Some(bytes) = count
        .checked_mul(ty.size())
        .filter(|&b| b <= isize::MAX as usize)
    else {
        return Err(too_large("exceed what a buffer can hold"));
    };
    if buf.is_null() && count > 0 {
        return Err(Failure::new(ERR_NULL, format!("buf of {name:?} is NULL")));
    }
    if (buf as usize).checked_add(bytes).is_none() {
        return Err(too_large("from buf run past the end of the address space"));
    }
    // A copy larger than the machine's memory and swap cannot be held whatever the kernel's
    // overcommit policy lets an allocation promise (with `vm.overcommit_memory=1` even 8 TiB
    // are "allocated", and the copy then reads past the caller's buffer).
    if bytes >= LARGE_STORE && memory_and_swap().is_some_and(|total| bytes > total) {
        return Err(too_large("exceed this machine's memory and swap"));
    }
    // The store keeps arrays in 8-byte words (`Blob`): try an allocation of that size.
    if Vec::<u64>::new()
        .try_reserve_exact(bytes.div_ceil(8))
        .is_err()
    {
        return Err(too_large("cannot be allocated for PCM's copy"));
    }
    Ok(count)
}

/// Stores from this size on are checked against the machine's memory (a file read).
const LARGE_STORE: usize = 1 << 30;

/// `MemTotal + SwapTotal` of /proc/meminfo in bytes, if it can be read.
fn memory_and_swap() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |key: &str| -> Option<usize> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    kib("MemTotal:")?
        .checked_add(kib("SwapTotal:").unwrap_or(0))?
        .checked_mul(1024)
}

/// Copies `count` elements of `ty` from `buf` into the store under `name`.
///
/// # Safety
/// `buf` points to `count` readable elements of `ty` (any alignment), or `count` is 0.
unsafe fn store_any(
    pcm: &mut Pcm,
    name: &str,
    ty: Datatype,
    buf: *const c_void,
    count: usize,
) -> Result<(), PcmError> {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        match ty {
            Datatype::Char => store_typed::<i8>(pcm, name, buf, count),
            Datatype::Int => store_typed::<i32>(pcm, name, buf, count),
            Datatype::Long => store_typed::<i64>(pcm, name, buf, count),
            Datatype::Float => store_typed::<f32>(pcm, name, buf, count),
            Datatype::Double => store_typed::<f64>(pcm, name, buf, count),
            Datatype::Byte => store_typed::<u8>(pcm, name, buf, count),
        }
    }
}

/// The checks and the copy of `PCM_Load` and `PCM_Load_checked`.
///
/// # Safety
/// As [`PCM_Load_checked`].
unsafe fn load(
    rank: c_int,
    name: *const c_char,
    buf: *mut c_void,
    expected: Option<(c_int, c_long)>,
) -> CResult<c_int> {
    with_pcm(|pcm, _| {
        check_rank(pcm, rank)?;
        // SAFETY: the caller promises a C string or NULL.
        let name = unsafe { name_arg(name, "name") }?;
        // The arguments first, as in PCM_Store: a datatype PCM does not know or a negative
        // count is PCM_ERR_ARG whatever is stored.
        let expected = match expected {
            Some((datatype, expected_count)) => {
                let asked = Datatype::from_c(datatype)?;
                let expected_count = usize::try_from(expected_count).map_err(|_| {
                    Failure::new(
                        ERR_ARG,
                        format!("count {expected_count} for {name:?} is negative"),
                    )
                })?;
                Some((asked, expected_count))
            }
            None => None,
        };
        let (ty, count) = Datatype::stored(pcm, name)?;
        if let Some((asked, expected_count)) = expected {
            if asked != ty {
                return Err(Failure::new(
                    ERR_TYPE,
                    format!(
                        "state {name:?} was stored as {}, but loaded as {}",
                        ty.c_name(),
                        asked.c_name()
                    ),
                ));
            }
            if expected_count != count {
                return Err(Failure::new(
                    ERR_COUNT,
                    format!(
                        "state {name:?} holds {count} elements, but the buffer has room for \
                         {expected_count}"
                    ),
                ));
            }
        }
        if count == 0 {
            // Nothing to copy: take it out all the same, as a load of more would.
        } else if buf.is_null() {
            return Err(Failure::new(ERR_NULL, format!("buf for {name:?} is NULL")));
        }
        // SAFETY: `buf` has room for the array (the caller's promise, checked against the
        // count PCM_Load_checked was given); a zero-length copy writes nothing.
        unsafe {
            match ty {
                Datatype::Char => load_typed::<i8>(pcm, name, buf),
                Datatype::Int => load_typed::<i32>(pcm, name, buf),
                Datatype::Long => load_typed::<i64>(pcm, name, buf),
                Datatype::Float => load_typed::<f32>(pcm, name, buf),
                Datatype::Double => load_typed::<f64>(pcm, name, buf),
                Datatype::Byte => load_typed::<u8>(pcm, name, buf),
            }
        }?;
        Ok(SUCCESS)
    })
}

/// `PCM_Load(rank, name, buf)`: see pcm.h.
///
/// # Safety
/// `name` is NULL or a C string; `buf` is NULL or has room for the whole stored array.
#[no_mangle]
pub unsafe extern "C" fn PCM_Load(rank: c_int, name: *const c_char, buf: *mut c_void) -> c_int {
    // SAFETY: the caller's promises are `load`'s.
    call("PCM_Load", || unsafe { load(rank, name, buf, None) })
}

/// `PCM_Load_checked(rank, name, buf, type, count)`: see pcm.h.
///
/// # Safety
/// `name` is NULL or a C string; `buf` is NULL or has room for `count` elements of
/// `type`.
#[no_mangle]
pub unsafe extern "C" fn PCM_Load_checked(
    rank: c_int,
    name: *const c_char,
    buf: *mut c_void,
    datatype: c_int,
    count: c_long,
) -> c_int {
    // SAFETY: the caller's promises are `load`'s; the stored count is checked against
    // `count` before anything is written.
    call("PCM_Load_checked", || unsafe {
        load(rank, name, buf, Some((datatype, count)))
    })
}

/// `PCM_Count(rank, name, type, &count)`: see pcm.h.
///
/// # Safety
/// `name` is NULL or a C string; `count` is NULL or points to a `long`.
#[no_mangle]
pub unsafe extern "C" fn PCM_Count(
    rank: c_int,
    name: *const c_char,
    datatype: c_int,
    count: *mut c_long,
) -> c_int {
    call("PCM_Count", || {
        with_pcm(|pcm, _| {
            check_rank(pcm, rank)?;
            // SAFETY: the caller promises a C string or NULL.
            let name = unsafe { name_arg(name, "name") }?;
            let asked = Datatype::from_c(datatype)?;
            if count.is_null() {
                return Err(Failure::new(ERR_NULL, "count is NULL"));
            }
            let (ty, stored) = Datatype::stored(pcm, name)?;
            if ty != asked {
                return Err(Failure::new(
                    ERR_TYPE,
                    format!(
                        "state {name:?} was stored as {}, not {}",
                        ty.c_name(),
                        asked.c_name()
                    ),
                ));
            }
            let stored = c_long::try_from(stored)
                .map_err(|_| Failure::new(ERR_COUNT, "the count exceeds a C long"))?;
            // SAFETY: checked not NULL; the caller promises a `long` there.
            unsafe { *count = stored };
            Ok(SUCCESS)
        })
    })
}

/// `PCM_Set_malleable(min, max, rule, rule_arg)`: see pcm.h.
#[no_mangle]
pub extern "C" fn PCM_Set_malleable(min: c_int, max: c_int, rule: c_int, rule_arg: c_int) -> c_int {
    call("PCM_Set_malleable", || {
        let limits = malleability(min, max, rule, rule_arg)?;
        with_pcm(|pcm, _| {
            pcm.set_malleable(limits)?;
            Ok(SUCCESS)
        })
    })
}

/// The limits `PCM_Set_malleable` was given, checked.
fn malleability(
    min: c_int,
    max: c_int,
    rule: c_int,
    rule_arg: c_int,
) -> CResult<pcm_rs::Malleability> {
    use pcm_rs::SizeRule;
    let (Ok(low), Ok(high)) = (u32::try_from(min), u32::try_from(max)) else {
        return Err(Failure::new(
            ERR_ARG,
            format!("malleable limits {min}..={max}: both must be at least 1"),
        ));
    };
    let rule = match rule {
        SIZE_ANY => SizeRule::Any,
        SIZE_MULTIPLE_OF => match u32::try_from(rule_arg) {
            Ok(k) if k >= 1 => SizeRule::MultipleOf(k),
            _ => {
                return Err(Failure::new(
                    ERR_ARG,
                    format!("PCM_SIZE_MULTIPLE_OF {rule_arg}: rule_arg must be at least 1"),
                ))
            }
        },
        SIZE_POWER_OF_TWO => SizeRule::PowerOfTwo,
        SIZE_SQUARE => SizeRule::Square,
        other => {
            return Err(Failure::new(
                ERR_ARG,
                format!(
                    "unknown size rule {other} (PCM_SIZE_ANY, PCM_SIZE_MULTIPLE_OF, \
                     PCM_SIZE_POWER_OF_TWO, PCM_SIZE_SQUARE are 0 .. 3)"
                ),
            ))
        }
    };
    Ok(pcm_rs::Malleability::new(low, high)
        .map_err(pcm_rs::PcmError::from)?
        .with_rule(rule))
}

/// `PCM_Declare_block(name, type, rows, row_len)`: see pcm.h.
///
/// # Safety
/// `name` is NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn PCM_Declare_block(
    name: *const c_char,
    datatype: c_int,
    rows: c_long,
    row_len: c_long,
) -> c_int {
    call("PCM_Declare_block", || {
        with_pcm(|pcm, _| {
            // SAFETY: the caller promises a C string or NULL.
            let name = unsafe { name_arg(name, "name") }?;
            let ty = Datatype::from_c(datatype)?;
            let (Ok(rows), Ok(row_len)) = (u64::try_from(rows), u64::try_from(row_len)) else {
                return Err(Failure::new(
                    ERR_ARG,
                    format!(
                        "array {name:?} declared with {rows} rows of {row_len} elements: both \
                         must be at least 1"
                    ),
                ));
            };
            match ty {
                Datatype::Char => pcm.declare_block::<i8>(name, rows, row_len),
                Datatype::Int => pcm.declare_block::<i32>(name, rows, row_len),
                Datatype::Long => pcm.declare_block::<i64>(name, rows, row_len),
                Datatype::Float => pcm.declare_block::<f32>(name, rows, row_len),
                Datatype::Double => pcm.declare_block::<f64>(name, rows, row_len),
                Datatype::Byte => pcm.declare_block::<u8>(name, rows, row_len),
            }?;
            Ok(SUCCESS)
        })
    })
}

/// `PCM_Block_range(name, &first_row, &rows)`: see pcm.h.
///
/// # Safety
/// `name` is NULL or a C string; `first_row` and `rows` are NULL or point to `long`s.
#[no_mangle]
pub unsafe extern "C" fn PCM_Block_range(
    name: *const c_char,
    first_row: *mut c_long,
    rows: *mut c_long,
) -> c_int {
    call("PCM_Block_range", || {
        with_pcm(|pcm, _| {
            // SAFETY: the caller promises a C string or NULL.
            let name = unsafe { name_arg(name, "name") }?;
            if first_row.is_null() || rows.is_null() {
                return Err(Failure::new(ERR_NULL, "first_row or rows is NULL"));
            }
            let range = pcm.block_range(name)?;
            let too_large = || Failure::new(ERR_ARG, format!("array {name:?} exceeds a C long"));
            let first = c_long::try_from(range.start).map_err(|_| too_large())?;
            let count = c_long::try_from(range.end - range.start).map_err(|_| too_large())?;
            // SAFETY: checked not NULL; the caller promises `long`s there.
            unsafe {
                *first_row = first;
                *rows = count;
            }
            Ok(SUCCESS)
        })
    })
}

/// `PCM_Store_block(name, buf, type, count)`: see pcm.h.
///
/// # Safety
/// `name` is NULL or a C string; `buf` is NULL or holds `count` elements of `type`.
#[no_mangle]
pub unsafe extern "C" fn PCM_Store_block(
    name: *const c_char,
    buf: *const c_void,
    datatype: c_int,
    count: c_long,
) -> c_int {
    call("PCM_Store_block", || {
        with_pcm(|pcm, _| {
            // SAFETY: the caller promises a C string or NULL.
            let name = unsafe { name_arg(name, "name") }?;
            // Only a declared array is a block; its length and type are checked by
            // PCM_Reconfigure on every rank together, which refuses the resize if any is
            // wrong (the job runs on at its width).
            pcm.block_range(name)?;
            let ty = Datatype::from_c(datatype)?;
            let count = checked_count(name, ty, buf, count)?;
            // SAFETY: `buf` holds `count` elements of `ty` (the caller's promise), checked
            // not NULL when there are any.
            unsafe { store_any(pcm, name, ty, buf, count) }?;
            Ok(SUCCESS)
        })
    })
}

/// `PCM_Resizes()`: see pcm.h.
#[no_mangle]
pub extern "C" fn PCM_Resizes() -> c_long {
    match &lock().0 {
        State::Running { pcm, .. } => c_long::try_from(pcm.resizes()).unwrap_or(c_long::MAX),
        _ => 0,
    }
}

/// `PCM_Resizing()`: see pcm.h.
#[no_mangle]
pub extern "C" fn PCM_Resizing() -> c_int {
    match &lock().0 {
        State::Running { pcm, .. } => c_int::from(pcm.resizing()),
        _ => 0,
    }
}

/// `PCM_Reconfigure(MPI_Comm *comm, const char *app_name)`: see pcm.h. Does not return
/// on a departing rank.
///
/// # Safety
/// `comm` is NULL or points to an `MPI_Comm`. `app_name` is not read.
#[no_mangle]
pub unsafe extern "C" fn PCM_Reconfigure(comm: *mut MPI_Comm, _app_name: *const c_char) -> c_int {
    call("PCM_Reconfigure", || {
        if comm.is_null() {
            return Err(Failure::new(ERR_NULL, "comm is NULL"));
        }
        let mut global = lock();
        let (pcm, announced) = match std::mem::replace(&mut global.0, State::Broken) {
            State::Running { pcm, announced } => (pcm, announced),
            other => {
                let failure = not_running(&other);
                global.0 = other;
                return Err(failure);
            }
        };
        // SAFETY: not NULL; the caller promises an MPI_Comm there.
        let given = unsafe { *comm };
        let refused = match (check_comm(&pcm, given), announced) {
            (Err(failure), _) => Some(failure),
            (Ok(()), Announced::Nothing) => Some(Failure::new(
                ERR_ORDER,
                "no reconfiguration is pending: the last PCM_Status returned PCM_CONTINUE",
            )),
            (Ok(()), _) => None,
        };
        if let Some(failure) = refused {
            global.0 = State::Running { pcm, announced };
            return Err(failure);
        }
        // The state stays Broken if this fails halfway: the Pcm is gone, and the other ranks
        // cannot go on with this one anyway. An error that left the job intact gives it back.
        let reconfigured = match (*pcm).reconfigure() {
            Ok(reconfigured) => reconfigured,
            Err(pcm_rs::ReconfigureError { error, pcm }) => {
                if let Some(pcm) = pcm {
                    global.0 = State::Running { pcm, announced };
                }
                return Err(error.into());
            }
        };
        match reconfigured {
            Reconfigured::Continue(next) => {
                // SAFETY: checked not NULL above.
                unsafe { *comm = next.world().as_raw() };
                // A completed resize: this rank's block changed, its state is to load again
                // (a refused one left `resizing` false and the job as it was).
                let code = if next.resizing() { RESIZE } else { SUCCESS };
                global.0 = State::Running {
                    pcm: Box::new(next),
                    announced: Announced::Nothing,
                };
                Ok(code)
            }
            Reconfigured::Departed(departed) => {
                global.0 = State::Finalized;
                drop(global);
                departed.finalize()
            }
        }
    })
}

/// `PCM_Finalize(MPI_Comm comm)`: see pcm.h.
#[no_mangle]
pub extern "C" fn PCM_Finalize(comm: MPI_Comm) -> c_int {
    call("PCM_Finalize", || {
        let mut global = lock();
        let pcm = match std::mem::replace(&mut global.0, State::Broken) {
            State::Running { pcm, announced } => {
                if let Err(failure) = check_comm(&pcm, comm) {
                    global.0 = State::Running { pcm, announced };
                    return Err(failure);
                }
                pcm
            }
            other => {
                let failure = not_running(&other);
                global.0 = other;
                return Err(failure);
            }
        };
        pcm.finalize();
        global.0 = State::Finalized;
        Ok(SUCCESS)
    })
}

/// The C handle of a Fortran communicator handle, or `MPI_COMM_NULL` when MPI is not
/// running (converting before `MPI_Init` or after `MPI_Finalize` is not allowed).
fn comm_from_fortran(comm: MPI_Fint) -> MPI_Comm {
    if mpi::environment::is_initialized() && !mpi::environment::is_finalized() {
        // SAFETY: MPI is running; a handle that names no communicator converts to
        // MPI_COMM_NULL, which PCM then refuses.
        unsafe { mpi::ffi::MPI_Comm_f2c(comm) }
    } else {
        // SAFETY: reading an extern constant.
        unsafe { mpi::ffi::RSMPI_COMM_NULL }
    }
}

/// Writes `comm`'s Fortran handle to `out` after a call that succeeded (`PCM_SUCCESS`, or
/// `PCM_RESIZE` from a reconfiguration that changed the width).
///
/// # Safety
/// `out` points to an `MPI_Fint`.
unsafe fn comm_to_fortran(code: c_int, comm: MPI_Comm, out: *mut MPI_Fint) -> c_int {
    if code == SUCCESS || code == RESIZE {
        // SAFETY: MPI is running (the call succeeded); `out` is the caller's.
        unsafe { *out = mpi::ffi::MPI_Comm_c2f(comm) };
    }
    code
}

/// `PCM_Init` for Fortran (the `pcm` module): `comm` is a Fortran handle (`use mpi`, or
/// `comm%MPI_VAL` with `use mpi_f08`), converted with `MPI_Comm_f2c`/`c2f`.
///
/// # Safety
/// As [`PCM_Init`], with `comm` pointing to an `MPI_Fint`.
#[no_mangle]
pub unsafe extern "C" fn PCM_Init_f(comm: *mut MPI_Fint, app_name: *const c_char) -> c_int {
    if comm.is_null() {
        // SAFETY: PCM_Init checks the NULL first.
        return unsafe { PCM_Init(std::ptr::null_mut(), app_name) };
    }
    // SAFETY: not NULL, the caller's handle.
    let mut c_comm = comm_from_fortran(unsafe { *comm });
    // SAFETY: a valid MPI_Comm slot; the caller's name.
    let code = unsafe { PCM_Init(&mut c_comm, app_name) };
    // SAFETY: `comm` is not NULL.
    unsafe { comm_to_fortran(code, c_comm, comm) }
}

/// `PCM_Status` for Fortran: `comm` is a Fortran handle.
#[no_mangle]
pub extern "C" fn PCM_Status_f(comm: MPI_Fint) -> c_int {
    PCM_Status(comm_from_fortran(comm))
}

/// `PCM_Reconfigure` for Fortran: `comm` is a Fortran handle, updated in place.
///
/// # Safety
/// As [`PCM_Reconfigure`], with `comm` pointing to an `MPI_Fint`.
#[no_mangle]
pub unsafe extern "C" fn PCM_Reconfigure_f(comm: *mut MPI_Fint, app_name: *const c_char) -> c_int {
    if comm.is_null() {
        // SAFETY: PCM_Reconfigure checks the NULL first.
        return unsafe { PCM_Reconfigure(std::ptr::null_mut(), app_name) };
    }
    // SAFETY: not NULL, the caller's handle.
    let mut c_comm = comm_from_fortran(unsafe { *comm });
    // SAFETY: a valid MPI_Comm slot.
    let code = unsafe { PCM_Reconfigure(&mut c_comm, app_name) };
    // SAFETY: `comm` is not NULL.
    unsafe { comm_to_fortran(code, c_comm, comm) }
}

/// `PCM_Finalize` for Fortran: `comm` is a Fortran handle.
#[no_mangle]
pub extern "C" fn PCM_Finalize_f(comm: MPI_Fint) -> c_int {
    PCM_Finalize(comm_from_fortran(comm))
}

/// `PCM_Migrations()`: see pcm.h.
#[no_mangle]
pub extern "C" fn PCM_Migrations() -> c_long {
    match &lock().0 {
        State::Running { pcm, .. } => c_long::try_from(pcm.migrations()).unwrap_or(c_long::MAX),
        _ => 0,
    }
}

/// `PCM_Error_string(code)`: see pcm.h.
#[no_mangle]
pub extern "C" fn PCM_Error_string(code: c_int) -> *const c_char {
    let text: &'static CStr = match code {
        SUCCESS => c"success",
        FRESH => c"the process started with the job (PCM_FRESH, not an error)",
        ERR_NOT_INITIALIZED => c"PCM is not running: called before PCM_Init or after PCM_Finalize, or PCM_Init before MPI_Init",
        ERR_ALREADY_INITIALIZED => c"PCM_Init was already called",
        ERR_NULL => c"a required pointer is NULL",
        ERR_ARG => c"invalid argument (datatype, count, name, a rank other than the caller's, or a malleable declaration that is invalid or differs from the job's)",
        ERR_COMM => c"the communicator is not PCM's current world",
        ERR_NOT_STORED => c"nothing is stored under this name",
        ERR_TYPE => c"stored with another datatype",
        ERR_COUNT => c"stored with another element count",
        ERR_ORDER => c"call out of order (PCM_Reconfigure without a pending reconfiguration, or PCM_Status before the PCM_Reconfigure it asked for)",
        ERR_CONFIG => c"invalid PCM setting, or not the MPI library libpcm was built for",
        ERR_MPI => c"an MPI call, the reconfiguration or the restart failed",
        ERR_INTERNAL => c"internal PCM error (PCM is unusable now)",
        _ => c"unknown PCM return code",
    };
    text.as_ptr()
}

/// `PCM_Last_error()`: see pcm.h.
#[no_mangle]
pub extern "C" fn PCM_Last_error() -> *const c_char {
    // The CString lives in this thread's slot until the next failure replaces it.
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_every_datatype_then_code_and_label_round_trip() {
        for (code, ty) in (1..).zip(Datatype::ALL) {
            assert_eq!(Datatype::from_c(code).ok(), Some(ty));
            assert_eq!(
                Datatype::ALL
                    .iter()
                    .filter(|t| t.label() == ty.label())
                    .count(),
                1
            );
        }
        assert_eq!(Datatype::Double.label(), "[f64]");
        for bad in [0, 7, -1, c_int::MAX] {
            assert_eq!(
                Datatype::from_c(bad).map_err(|f| f.code).err(),
                Some(ERR_ARG)
            );
        }
    }

    #[test]
    fn given_calls_before_init_then_codes_and_messages() {
        assert_eq!(PCM_Process_Status(), ERR_NOT_INITIALIZED);
        let message = unsafe { CStr::from_ptr(PCM_Last_error()) };
        assert!(
            message.to_string_lossy().contains("before PCM_Init"),
            "{message:?}"
        );
        let null = std::ptr::null();
        assert_eq!(
            unsafe { PCM_Store(0, null, std::ptr::null(), 1, 1) },
            ERR_NOT_INITIALIZED
        );
        assert_eq!(PCM_Migrations(), 0);
        // PCM_Init with a NULL communicator fails before it looks at MPI.
        assert_eq!(unsafe { PCM_Init(std::ptr::null_mut(), null) }, ERR_NULL);
    }

    #[test]
    fn given_malleable_limits_then_bad_ones_are_arg_errors() {
        let code = |r: CResult<pcm_rs::Malleability>| r.map(|_| ()).map_err(|f| f.code);
        assert_eq!(code(malleability(1, 8, SIZE_ANY, 0)), Ok(()));
        assert_eq!(
            malleability(2, 8, SIZE_MULTIPLE_OF, 2).unwrap().rule(),
            pcm_rs::SizeRule::MultipleOf(2)
        );
        assert_eq!(
            malleability(1, 16, SIZE_SQUARE, 0).unwrap().rule(),
            pcm_rs::SizeRule::Square
        );
        for (min, max, rule, arg) in [
            (0, 4, SIZE_ANY, 0),
            (5, 4, SIZE_ANY, 0),
            (-1, 4, SIZE_ANY, 0),
            (1, 4, SIZE_MULTIPLE_OF, 0),
            (1, 4, 4, 0),
            (1, 4, -1, 0),
        ] {
            assert_eq!(
                code(malleability(min, max, rule, arg)),
                Err(ERR_ARG),
                "{min} {max} {rule} {arg}"
            );
        }
        assert_eq!(PCM_Set_malleable(1, 4, SIZE_ANY, 0), ERR_NOT_INITIALIZED);
        assert_eq!(PCM_Resizes(), 0);
        assert_eq!(PCM_Resizing(), 0);
    }

    #[test]
    fn given_a_count_too_large_to_copy_then_arg_error_and_no_abort() {
        let buf = [0.0f64; 2];
        let ptr = buf.as_ptr().cast::<c_void>();
        let code = |count: c_long| {
            checked_count("x", Datatype::Double, ptr, count)
                .map(|_| ())
                .map_err(|f| f.code)
        };
        assert_eq!(code(2), Ok(()));
        assert_eq!(code(0), Ok(()));
        // 8 TiB: aborted the process (allocation failure) before the check.
        assert_eq!(code(1 << 40), Err(ERR_ARG));
        assert_eq!(code(1 << 60), Err(ERR_ARG));
        assert_eq!(code(c_long::MAX), Err(ERR_ARG));
        assert_eq!(code(-1), Err(ERR_ARG));
        // Past the end of the address space from the buffer.
        let high = (usize::MAX - 8) as *const c_void;
        assert_eq!(
            checked_count("x", Datatype::Double, high, 2)
                .map_err(|f| f.code)
                .err(),
            Some(ERR_ARG)
        );
        let total = memory_and_swap().expect("/proc/meminfo is readable on Linux");
        assert!(total > 0);
    }

    #[test]
    fn given_any_code_then_error_string_is_a_c_string() {
        for code in -20..5 {
            let text = unsafe { CStr::from_ptr(PCM_Error_string(code)) };
            assert!(!text.to_bytes().is_empty());
        }
    }

    #[test]
    fn given_odd_executable_name_then_default_app_name_is_valid() {
        let name = default_app_name();
        assert!(pcm_rs::AppName::new(name.clone()).is_ok(), "{name}");
    }
}
