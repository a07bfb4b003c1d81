//! Every unsafe call of the crate, in one place.
//!
//! rsmpi covers most of what PCM needs safely; what it does not cover is choosing the host of
//! a spawned process (an `MPI_Info` with the `host` key), error handlers (so that a failed
//! spawn returns an error instead of aborting the job), disconnecting the parent
//! intercommunicator of a spawned process.
//!
//! Ownership: communicators handed out of this module are wrapped in rsmpi types whose
//! `Drop` frees them (`SimpleCommunicator`: `MPI_Comm_free`) or disconnects them
//! (`InterCommunicator`: `MPI_Comm_disconnect`, which is **collective**: both groups must
//! drop their side at the same point of the protocol).
#![allow(unsafe_code)]

use std::ffi::{CString, OsString};
use std::os::raw::{c_char, c_int};
use std::os::unix::ffi::OsStrExt;

use mpi::ffi;
use mpi::raw::{AsRaw, FromRaw};
use mpi::topology::{InterCommunicator, SimpleCommunicator};

use crate::error::PcmError;

/// An `MPI_Info` object, freed on drop.
struct Info(ffi::MPI_Info);

impl Info {
    fn with_host(host: &str) -> Result<Self, PcmError> {
        let key = CString::new("host").map_err(|_| PcmError::internal("info key"))?;
        let value = CString::new(host).map_err(|_| PcmError::InvalidHost(host.to_owned()))?;
        let mut info = std::mem::MaybeUninit::<ffi::MPI_Info>::uninit();
        // SAFETY: MPI is initialised (a Pcm exists); MPI_Info_create writes one handle.
        let code = unsafe { ffi::MPI_Info_create(info.as_mut_ptr()) };
        check("MPI_Info_create", code)?;
        // SAFETY: MPI_Info_create succeeded, so the handle is initialised.
        let info = Info(unsafe { info.assume_init() });
        // SAFETY: both strings are NUL-terminated and outlive the call; MPI copies them.
        let code = unsafe { ffi::MPI_Info_set(info.0, key.as_ptr(), value.as_ptr()) };
        check("MPI_Info_set", code)?;
        Ok(info)
    }

    fn null() -> Self {
        // SAFETY: reading an extern static constant provided by rsmpi's C shim.
        Info(unsafe { ffi::RSMPI_INFO_NULL })
    }

    fn is_null(&self) -> bool {
        // SAFETY: as above.
        self.0 == unsafe { ffi::RSMPI_INFO_NULL }
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        if !self.is_null() {
            // SAFETY: the handle came from MPI_Info_create and is freed once.
            unsafe {
                ffi::MPI_Info_free(&mut self.0);
            }
        }
    }
}

/// Turns an MPI return code into a `Result`, with the library's own error text.
pub(crate) fn check(call: &'static str, code: c_int) -> Result<(), PcmError> {
    if code == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(PcmError::Mpi {
            call,
            code,
            message: error_string(code),
        })
    }
}

/// The MPI library's description of an error code.
pub(crate) fn error_string(code: c_int) -> String {
    let mut buffer = vec![0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING characters as the standard requires.
    let rc = unsafe { ffi::MPI_Error_string(code, buffer.as_mut_ptr(), &mut len) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return format!("MPI error {code}");
    }
    let bytes: Vec<u8> = buffer[..len.max(0) as usize]
        .iter()
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The loaded MPI library's `MPI_Get_library_version` text (allowed before `MPI_Init`).
pub(crate) fn library_version() -> String {
    // The size of the headers built against; the loaded library may be another one (that is
    // what the caller checks), so leave room for the largest known (MPICH's 8192).
    let size = (ffi::MPI_MAX_LIBRARY_VERSION_STRING as usize).max(8192) + 1;
    let mut buffer = vec![0 as c_char; size];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds more than MPI_MAX_LIBRARY_VERSION_STRING characters, as the
    // standard requires; the call may be made before MPI_Init.
    let rc = unsafe { ffi::MPI_Get_library_version(buffer.as_mut_ptr(), &mut len) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return String::new();
    }
    let bytes: Vec<u8> = buffer[..(len.max(0) as usize).min(size)]
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Duplicates `MPI_COMM_WORLD` into a communicator PCM owns (and may later free).
pub(crate) fn dup_world() -> Result<SimpleCommunicator, PcmError> {
    let mut raw = std::mem::MaybeUninit::<ffi::MPI_Comm>::uninit();
    // SAFETY: MPI is initialised; MPI_Comm_dup writes one handle.
    let code = unsafe { ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, raw.as_mut_ptr()) };
    check("MPI_Comm_dup", code)?;
    // SAFETY: MPI_Comm_dup succeeded, so the handle is a live intracommunicator we own.
    Ok(unsafe { SimpleCommunicator::from_raw(raw.assume_init()) })
}

/// While alive, MPI calls on the communicator return error codes instead of aborting the
/// job; drop restores the previous handler. Kept short: rsmpi ignores most return codes,
/// so the application's own calls must keep the fatal default.
struct ErrorsReturned {
    comm: ffi::MPI_Comm,
    previous: ffi::MPI_Errhandler,
}

impl ErrorsReturned {
    fn on(comm: ffi::MPI_Comm) -> Result<Self, PcmError> {
        let mut previous = std::mem::MaybeUninit::<ffi::MPI_Errhandler>::uninit();
        // SAFETY: `comm` is a live communicator; the call writes one handle.
        let code = unsafe { ffi::MPI_Comm_get_errhandler(comm, previous.as_mut_ptr()) };
        check("MPI_Comm_get_errhandler", code)?;
        // SAFETY: the call succeeded, so the handle is initialised.
        let previous = unsafe { previous.assume_init() };
        // SAFETY: `comm` is live; ERRORS_RETURN is a predefined handler.
        let code = unsafe { ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN) };
        check("MPI_Comm_set_errhandler", code)?;
        Ok(ErrorsReturned { comm, previous })
    }
}

impl Drop for ErrorsReturned {
    fn drop(&mut self) {
        // SAFETY: `comm` outlives this guard (it borrows from the caller's communicator);
        // the saved handler handle is restored, then our reference to it released.
        unsafe {
            ffi::MPI_Comm_set_errhandler(self.comm, self.previous);
            ffi::MPI_Errhandler_free(&mut self.previous);
        }
    }
}

/// Collectively spawns one process per entry of `hosts` running `program args`, each on
/// the host named (or where the runtime chooses, for `None`), rooted at rank 0 of `comm`.
///
/// Returns the intercommunicator to the new processes (in the order of `hosts`), or the
/// error of the first process that failed to start. Every rank of `comm` gets the same
/// answer.
pub(crate) fn spawn_on_hosts(
    comm: &SimpleCommunicator,
    program: &OsString,
    args: &[OsString],
    hosts: &[Option<String>],
) -> Result<InterCommunicator, PcmError> {
    let to_cstring =
        |s: &OsString| CString::new(s.as_bytes()).map_err(|_| PcmError::internal("NUL in argv"));
    let program = to_cstring(program)?;
    let args: Vec<CString> = args.iter().map(to_cstring).collect::<Result<_, _>>()?;
    // argv must be NULL-terminated; MPI takes `char **` and does not modify it.
    let mut argv: Vec<*mut c_char> = args.iter().map(|a| a.as_ptr() as *mut c_char).collect();
    argv.push(std::ptr::null_mut());

    let count = hosts.len();
    let mut commands: Vec<*mut c_char> = vec![program.as_ptr() as *mut c_char; count];
    let mut argvs: Vec<*mut *mut c_char> = vec![argv.as_mut_ptr(); count];
    let maxprocs: Vec<c_int> = vec![1; count];
    let infos: Vec<Info> = hosts
        .iter()
        .map(|h| match h {
            Some(host) => Info::with_host(host),
            None => Ok(Info::null()),
        })
        .collect::<Result<_, _>>()?;
    let raw_infos: Vec<ffi::MPI_Info> = infos.iter().map(|i| i.0).collect();
    let mut errcodes: Vec<c_int> = vec![0; count];
    let mut inter = std::mem::MaybeUninit::<ffi::MPI_Comm>::uninit();

    let guard = ErrorsReturned::on(comm.as_raw())?;
    // SAFETY: every pointer refers to a live buffer of `count` entries (argv arrays are
    // NULL-terminated and outlive the call); `comm` is a live intracommunicator whose error
    // handler returns errors; the call is collective and every rank of `comm` makes it.
    let code = unsafe {
        ffi::MPI_Comm_spawn_multiple(
            count as c_int,
            commands.as_mut_ptr(),
            argvs.as_mut_ptr(),
            maxprocs.as_ptr(),
            raw_infos.as_ptr(),
            0,
            comm.as_raw(),
            inter.as_mut_ptr(),
            errcodes.as_mut_ptr(),
        )
    };
    drop(guard);
    let failed_code = if code != ffi::MPI_SUCCESS as c_int {
        Some(code)
    } else {
        errcodes
            .iter()
            .copied()
            .find(|&c| c != ffi::MPI_SUCCESS as c_int)
    };
    if let Some(code) = failed_code {
        return Err(PcmError::SpawnFailed {
            hosts: hosts
                .iter()
                .map(|h| h.clone().unwrap_or_else(|| "(any)".into()))
                .collect(),
            message: error_string(code),
        });
    }
    // SAFETY: the spawn succeeded, so `inter` is a live intercommunicator that we own.
    let inter = unsafe { inter.assume_init() };
    // SAFETY: as above; ownership passes to the wrapper, whose drop disconnects it.
    Ok(unsafe { InterCommunicator::from_raw(inter) })
}

/// Disconnects an intracommunicator instead of freeing it: `MPI_Comm_disconnect` returns
/// only once every pending message on it has been delivered, and, in MPICH, ends this
/// process's ties to the other members, so that it may then finalize and exit alone.
/// Collective: every member disconnects it at the same point.
pub(crate) fn disconnect(comm: SimpleCommunicator) {
    let mut raw = comm.as_raw();
    // The handle is released below, not by the wrapper's drop (MPI_Comm_free); the wrapper
    // owns no memory of its own.
    std::mem::forget(comm);
    // SAFETY: `raw` is a live user communicator owned by the caller, used no more after this.
    unsafe {
        ffi::MPI_Comm_disconnect(&mut raw);
    }
}

/// `MPI_Finalize`, for a departed process whose MPI the application initialised.
pub(crate) fn finalize() {
    // SAFETY: MPI is initialised and not finalized (the departed process holds no
    // communicator any more, and PCM makes no MPI call after this).
    unsafe {
        ffi::MPI_Finalize();
    }
}

/// The parent intercommunicator of a spawned process, if this process was spawned.
///
/// Returned as an owned `InterCommunicator` whose drop disconnects it, unlike rsmpi's own
/// `parent()` whose drop does nothing: a replacement must disconnect from its parents at
/// the same point as they disconnect from it.
pub(crate) fn take_parent() -> Option<InterCommunicator> {
    let mut parent = std::mem::MaybeUninit::<ffi::MPI_Comm>::uninit();
    // SAFETY: MPI is initialised; MPI_Comm_get_parent writes one handle.
    let parent = unsafe {
        ffi::MPI_Comm_get_parent(parent.as_mut_ptr());
        parent.assume_init()
    };
    // SAFETY: reading an extern static constant.
    if parent == unsafe { ffi::RSMPI_COMM_NULL } {
        return None;
    }
    // SAFETY: `parent` is the live parent intercommunicator; PCM takes it once, in init,
    // and nobody else uses it (the application sees only PCM's world).
    Some(unsafe { InterCommunicator::from_raw(parent) })
}

/// A control variable of the MPI tool interface (`MPI_T`) holding one integer, set to a
/// value for as long as this guard lives and put back as it was when the guard is dropped.
///
/// Only the calling process changes; the library reads the variable where it uses it, so
/// the value takes effect at once (MPICH's `MPIR_CVAR_*` with `MPI_T_SCOPE_LOCAL` or wider
/// and no binding).
pub(crate) struct ControlVariableOverride {
    handle: ffi::MPI_T_cvar_handle,
    previous: c_int,
}

impl ControlVariableOverride {
    /// Sets the control variable `name` to `value`. `None`, with nothing changed, when the
    /// library has no such variable, when it is not a single 4-byte integer, or when it
    /// cannot be written now. `name` must be a variable bound to no object, as MPICH's
    /// `MPIR_CVAR_*` are: its handle is allocated with none (the constant that would tell
    /// differs by name between the implementations' headers).
    pub(crate) fn set(name: &str, value: c_int) -> Option<Self> {
        let name = CString::new(name).ok()?;
        let mut provided: c_int = 0;
        // SAFETY: MPI is initialised (a Pcm exists); MPI_T_init_thread is reference counted
        // and independent of MPI_Init's thread level; `provided` is a live int. The
        // constant is an extern static of the library.
        let code = unsafe { ffi::MPI_T_init_thread(ffi::RSMPI_THREAD_SINGLE, &mut provided) };
        if code != ffi::MPI_SUCCESS as c_int {
            return None;
        }
        // SAFETY: the tool interface is initialised (above) until the MPI_T_finalize below
        // or in `drop`.
        let set = unsafe { Self::set_initialised(&name, value) };
        if set.is_none() {
            // SAFETY: pairs with the successful MPI_T_init_thread above.
            unsafe { ffi::MPI_T_finalize() };
        }
        set
    }

    /// # Safety
    /// The tool interface must be initialised (`MPI_T_init_thread`).
    unsafe fn set_initialised(name: &CString, value: c_int) -> Option<Self> {
        let ok = |code: c_int| code == ffi::MPI_SUCCESS as c_int;
        let mut index: c_int = 0;
        if !ok(ffi::MPI_T_cvar_get_index(name.as_ptr(), &mut index)) {
            return None;
        }
        // The variable's own name and description are not needed, but MPI writes them.
        let mut name_buf = [0 as c_char; 256];
        let mut name_len = name_buf.len() as c_int;
        let mut desc_buf = [0 as c_char; 1024];
        let mut desc_len = desc_buf.len() as c_int;
        let (mut verbosity, mut bind, mut scope): (c_int, c_int, c_int) = (0, 0, 0);
        let mut datatype = std::mem::MaybeUninit::<ffi::MPI_Datatype>::uninit();
        let mut enumtype = std::mem::MaybeUninit::<ffi::MPI_T_enum>::uninit();
        if !ok(ffi::MPI_T_cvar_get_info(
            index,
            name_buf.as_mut_ptr(),
            &mut name_len,
            &mut verbosity,
            datatype.as_mut_ptr(),
            enumtype.as_mut_ptr(),
            desc_buf.as_mut_ptr(),
            &mut desc_len,
            &mut bind,
            &mut scope,
        )) {
            return None;
        }
        // MPI_T_cvar_get_info succeeded, so the datatype handle is written.
        let datatype = datatype.assume_init();
        let mut type_size: c_int = 0;
        if !ok(ffi::MPI_Type_size(datatype, &mut type_size))
            || type_size as usize != std::mem::size_of::<c_int>()
        {
            return None;
        }
        let mut handle = std::mem::MaybeUninit::<ffi::MPI_T_cvar_handle>::uninit();
        let mut count: c_int = 0;
        // No object: the variable is one bound to none (see `set`).
        if !ok(ffi::MPI_T_cvar_handle_alloc(
            index,
            std::ptr::null_mut(),
            handle.as_mut_ptr(),
            &mut count,
        )) {
            return None;
        }
        let mut handle = handle.assume_init();
        let mut previous: c_int = 0;
        let written = count == 1
            && ok(ffi::MPI_T_cvar_read(
                handle,
                (&mut previous as *mut c_int).cast(),
            ))
            && ok(ffi::MPI_T_cvar_write(
                handle,
                (&value as *const c_int).cast(),
            ));
        if !written {
            ffi::MPI_T_cvar_handle_free(&mut handle);
            return None;
        }
        Some(ControlVariableOverride { handle, previous })
    }
}

impl Drop for ControlVariableOverride {
    fn drop(&mut self) {
        // SAFETY: the handle was allocated by `set`, holds one 4-byte integer (checked
        // there), and is freed here once; the tool interface `set` initialised is still
        // initialised and is finalized last.
        unsafe {
            ffi::MPI_T_cvar_write(self.handle, (&self.previous as *const c_int).cast());
            ffi::MPI_T_cvar_handle_free(&mut self.handle);
            ffi::MPI_T_finalize();
        }
    }
}

/// Asks the kernel to back a large, not yet touched buffer with transparent huge pages.
///
/// Filling fresh memory page by page is dominated by 4 KiB page faults (measured in this VM:
/// 1.4 GB/s into fresh memory, 6.3 GB/s with huge pages), and state buffers are filled once,
/// right after allocation. Smaller buffers and kernels without THP are left as they are.
pub(crate) fn advise_huge_pages(buffer: &mut [u64]) {
    const MIN_BYTES: usize = 4 << 20;
    const PAGE: usize = 4096;
    let bytes = std::mem::size_of_val(buffer);
    if bytes < MIN_BYTES {
        return;
    }
    let start = buffer.as_mut_ptr() as usize;
    let first_page = (start + PAGE - 1) & !(PAGE - 1);
    let end_page = (start + bytes) & !(PAGE - 1);
    if end_page <= first_page {
        return;
    }
    // SAFETY: the page-aligned range lies inside `buffer`, which the caller owns and lends
    // mutably; MADV_HUGEPAGE changes only how the kernel backs the pages, not their content.
    // A failure (no THP support) leaves the buffer as it was, so the result is ignored.
    unsafe {
        libc::madvise(
            first_page as *mut libc::c_void,
            end_page - first_page,
            libc::MADV_HUGEPAGE,
        );
    }
}

/// `MPI_Abort(MPI_COMM_WORLD, code)`: asks the runtime to end every process of the job, the
/// calling one included, with exit status `code`.
///
/// Called by the reconfiguration watchdog from its own thread while the main thread is
/// blocked inside MPI. The MPI standard promises nothing for that at `MPI_THREAD_SINGLE`;
/// Open MPI 4 and MPICH 5 both end the job this way (checked by tests/tests/stall.rs), and
/// the watchdog falls back to [`exit_now`] if this returns or hangs.
pub(crate) fn abort(code: c_int) {
    // SAFETY: MPI is initialised (the watchdog exists only inside a reconfiguration, between
    // MPI_Init and MPI_Finalize); MPI_COMM_WORLD is a predefined handle.
    unsafe {
        ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code);
    }
}

/// Ends the process at once with `code`, running no exit handlers: the main thread is stuck
/// inside MPI, and MPI's or Rust's exit handlers could wait for it forever.
pub(crate) fn exit_now(code: c_int) -> ! {
    // SAFETY: `_exit` takes no pointers and never returns; skipping destructors only loses
    // in-memory state, and checkpoints on disk were written whole (atomic renames) before.
    unsafe { libc::_exit(code) }
}

extern "C" {
    /// glibc: registers `function`, which `exit` calls with the exit status and `arg`.
    #[link_name = "on_exit"]
    fn glibc_on_exit(
        function: extern "C" fn(status: c_int, arg: *mut libc::c_void),
        arg: *mut libc::c_void,
    ) -> c_int;
}

/// Registers `handler` to run when the process calls `exit` (returning from `main`
/// included), with the exit status. False when glibc refuses (no room for more handlers).
pub(crate) fn on_exit(handler: extern "C" fn(status: c_int, arg: *mut libc::c_void)) -> bool {
    // SAFETY: `handler` is a plain function that lives as long as the process; it is
    // called with the null argument given here, which it must ignore.
    unsafe { glibc_on_exit(handler, std::ptr::null_mut()) == 0 }
}
