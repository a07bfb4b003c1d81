//! Ending MPI in a process some of whose launch has left (MPICH, UCX netmod).
//!
//! On MPICH a process moved away exits at once (`MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1`, see
//! [`crate::prompt_departure_env`]): that is what gives a machine back. When it was a
//! member of the launch (an original rank), the ranks that stay still hold a UCX endpoint
//! to it, and at `MPI_Finalize` the netmod closes the endpoint of every member of the
//! launch with `ucp_disconnect_nb`, a flushing close. Over a network the departed process's
//! connection is gone by then, UCX returns the close as failed ("Connection reset by remote
//! peer"), and MPICH turns that into a fatal error of `MPI_Finalize`: the job aborts with
//! its result already computed (seen 2026-12-02 on emulated hosts whose MPI traffic crosses
//! their link; through shared memory the close had always succeeded, which hid it).
//!
//! An endpoint whose peer is gone has nothing left to flush. This module defines the C
//! symbol `ucp_disconnect_nb`, which takes the place of UCX's own for the MPI library (the
//! definition in a Rust program, or in `libpcm.so`, which C and Fortran programs link
//! before the MPI library, comes first in the dynamic linker's search, as the MPI wrappers
//! of [`crate::interpose`] do), calls UCX's, and reports a close that failed at once as
//! done. UCX has released the endpoint either way; a close that is under way is returned
//! as it is. Nothing else calls it: the netmod uses it only in its finalize hook. Checked
//! end to end by `tests/tests/link.rs` and `hosts.rs` (Rust) and the main job's C heat2d
//! run, whose moved rank is an original one.
#![allow(unsafe_code)]

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// UCX's `ucs_status_ptr_t`: a request, `NULL` for done, or an error status.
type StatusPtr = *mut c_void;
type Disconnect = unsafe extern "C" fn(*mut c_void) -> StatusPtr;

/// UCX's `UCS_ERR_LAST`: a status pointer at or above it (as an address) is an error
/// (`UCS_PTR_IS_ERR`).
const UCS_ERR_LAST: isize = -100;

/// Closes that failed at once and were reported as done, for the log.
static FORGIVEN: AtomicUsize = AtomicUsize::new(0);

/// Whether `status` is an error status rather than a request or done.
fn is_error(status: StatusPtr) -> bool {
    status as usize >= UCS_ERR_LAST as usize
}

/// UCX's own `ucp_disconnect_nb`, found once after this definition.
fn real_disconnect() -> Option<Disconnect> {
    static REAL: OnceLock<Option<Disconnect>> = OnceLock::new();
    *REAL.get_or_init(|| {
        let name: &CStr = c"ucp_disconnect_nb";
        // SAFETY: RTLD_NEXT with a NUL-terminated name; the result is UCX's function of
        // this signature, or null when UCX is not loaded.
        let symbol = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        (!symbol.is_null()).then(|| {
            // SAFETY: the symbol is UCX's `ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h)`.
            unsafe { std::mem::transmute::<*mut c_void, Disconnect>(symbol) }
        })
    })
}

/// `ucp_disconnect_nb`, interposed (see the module notes).
///
/// # Safety
/// As UCX's: `ep` is a live endpoint, closed by this call.
#[no_mangle]
#[allow(unreachable_pub)] // for the dynamic linker, not for Rust code
pub unsafe extern "C" fn ucp_disconnect_nb(ep: *mut c_void) -> StatusPtr {
    let Some(real) = real_disconnect() else {
        // Unreachable in practice: the only caller is the MPI library, which links UCX.
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's endpoint, passed on unchanged.
    let status = unsafe { real(ep) };
    if is_error(status) {
        FORGIVEN.fetch_add(1, Ordering::Relaxed);
        return std::ptr::null_mut();
    }
    status
}

/// How many endpoints of departed peers were closed as done (for the finalize log).
pub(crate) fn forgiven_closes() -> usize {
    FORGIVEN.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_statuses_are_the_last_hundred_addresses() {
        assert!(!is_error(std::ptr::null_mut()));
        assert!(!is_error(0x1000 as StatusPtr));
        // UCS_ERR_CONNECTION_RESET is -25, UCS_ERR_LAST -100.
        assert!(is_error(-25isize as StatusPtr));
        assert!(is_error(-100isize as StatusPtr));
        assert!(!is_error(-101isize as StatusPtr));
    }
}
