//! A thread that runs ahead of the crowd: a higher scheduling priority (a negative nice)
//! for the calling thread while a guard lives, where allowed (as root).
//!
//! Tests and benchmarks run their own machinery (a poller that must catch a replacement
//! within its first tenth of a second, the delay router that stands for a wide-area
//! network) beside hundreds of processes on two cores; at the default priority it waits
//! its turn like them and measures or emulates the machine's load instead of what it
//! stands for.

/// The calling thread's priority, raised while this lives.
pub struct Urgent {
    tid: libc::id_t,
    before: libc::c_int,
}

// The libc calls below have no safe wrapper in nix.
#[allow(unsafe_code)]
impl Urgent {
    /// Raises the calling thread to nice `nice` (negative: ahead of the default 0); `None`
    /// if not allowed (not root), and then nothing changes.
    pub fn raise(nice: libc::c_int) -> Option<Urgent> {
        // SAFETY: gettid, getpriority and setpriority take plain integers and touch no
        // memory of ours; on Linux a thread id in PRIO_PROCESS names that thread alone.
        unsafe {
            let tid = libc::gettid() as libc::id_t;
            let before = libc::getpriority(libc::PRIO_PROCESS, tid);
            (libc::setpriority(libc::PRIO_PROCESS, tid, nice) == 0)
                .then_some(Urgent { tid, before })
        }
    }
}

#[allow(unsafe_code)]
impl Drop for Urgent {
    fn drop(&mut self) {
        // SAFETY: as in `raise`.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, self.tid, self.before);
        }
    }
}
