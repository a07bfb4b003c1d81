//! Arrays in shared memory that PCM allocates ([`SharedArray`], like `MPI_Alloc_mem`), so
//! that a rank moving to a replacement on the same host hands its pages over instead of
//! copying them.
//!
//! Each array lives in its own memfd (an anonymous shared-memory file with no name in any
//! file system), sized once and sealed against growing and shrinking. When a rank moves,
//! the departing process offers the replacement its process id and the descriptor number;
//! a replacement on the same host (same host name and same kernel boot id) opens
//! `/proc/PID/fd/N` while the departing process waits for it, checks that it is what a
//! PCM array of its own job must be, and maps the same pages (`MAP_SHARED`, populated at
//! once): no byte is copied and no fresh page is faulted in. Anything else (another host,
//! a refused or unreadable segment) falls back to sending the bytes over MPI, into a new
//! shared array on the receiving side.
//!
//! Nothing outlives the job: a memfd has no directory entry, and its pages are freed when
//! the last process holding a descriptor or a mapping of it ends.
//!
//! What a replacement checks before mapping an offered segment (each refusal is an error
//! naming the descriptor and the reason; the bytes then come over MPI):
//! - the link `/proc/PID/fd/N` names a memfd of this job's arrays (`memfd:pcm-array:JOB:`);
//! - the file opened is a regular file owned by this process's effective user;
//! - it is sealed against shrinking and growing (so a mapping can never fault past its end);
//! - its size is exactly the size announced for the entry.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

use bytemuck::Pod;

use crate::error::PcmError;

/// Prefix of every memfd name PCM creates; the job id and the array's name follow.
const NAME_PREFIX: &str = "pcm-array:";

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

fn last_os_error() -> String {
    std::io::Error::last_os_error().to_string()
}

/// The part of a memfd name that identifies the job (only characters that cannot confuse
/// the check of the link text).
fn job_tag(job: &str) -> String {
    job.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(64)
        .collect()
}

/// This kernel's boot id: two processes with the same host name and boot id share a
/// kernel, and so can share pages. Empty if unreadable (then nothing is shared).
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// One shared-memory segment: a memfd and this process's mapping of it.
pub(crate) struct Segment {
    fd: OwnedFd,
    /// Start of the mapping (dangling when `map_len` is 0).
    ptr: NonNull<u8>,
    /// Bytes mapped: `len` rounded up to whole pages (the file's size); 0 for an empty one.
    map_len: usize,
    /// Bytes of data.
    len: usize,
    writable: bool,
    /// This process's only handle on these pages, writable: taken over from a departing
    /// process, or a new segment the state was received into (so it may become the
    /// caller's array without a copy).
    alone: bool,
}

// SAFETY: the segment owns its mapping like a `Vec` owns its buffer; shared access only
// reads it (`bytes`), mutable access needs `&mut`.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("fd", &self.fd.as_raw_fd())
            .field("len", &self.len)
            .field("writable", &self.writable)
            .field("alone", &self.alone)
            .finish()
    }
}

impl Segment {
    /// A new zeroed segment of `len` bytes for `job`, named `name` for people
    /// (`/proc/PID/fd` shows `memfd:pcm-array:JOB:NAME`).
    pub(crate) fn create(job: &str, name: &str, len: usize) -> Result<Segment, PcmError> {
        let failed = |reason: String| PcmError::SharedArray {
            what: format!("{name:?} ({len} bytes) could not be created"),
            reason,
        };
        let label: String = name
            .chars()
            .map(|c| if c.is_control() { '_' } else { c })
            .take(80)
            .collect();
        let full = format!("{NAME_PREFIX}{}:{label}", job_tag(job));
        let cname = CString::new(full).map_err(|_| failed("name holds a NUL byte".into()))?;
        // SAFETY: cname is NUL-terminated and outlives the call.
        let raw = unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(failed(format!("memfd_create: {}", last_os_error())));
        }
        // SAFETY: memfd_create returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let page = page_size();
        let map_len = len
            .checked_next_multiple_of(page)
            .ok_or_else(|| failed("size overflows".into()))?;
        let size = libc::off_t::try_from(map_len).map_err(|_| failed("size too large".into()))?;
        // SAFETY: fd is a valid memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(failed(format!("ftruncate: {}", last_os_error())));
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fd is a valid memfd created with MFD_ALLOW_SEALING.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(failed(format!("sealing: {}", last_os_error())));
        }
        Self::map(fd, len, map_len, true, false).map_err(failed)
    }

    /// Maps `fd` (whose size is `map_len`): read-write or read-only, populated or not.
    fn map(
        fd: OwnedFd,
        len: usize,
        map_len: usize,
        writable: bool,
        populate: bool,
    ) -> Result<Segment, String> {
        if map_len == 0 {
            return Ok(Segment {
                fd,
                ptr: NonNull::dangling(),
                map_len,
                len,
                writable,
                alone: false,
            });
        }
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let flags = libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 };
        // SAFETY: a new mapping at an address the kernel picks, of a file at least
        // `map_len` bytes long whose size is sealed; nothing else refers to that range.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                prot,
                flags,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!("mmap: {}", last_os_error()));
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| "mmap returned null".to_owned())?;
        Ok(Segment {
            fd,
            ptr,
            map_len,
            len,
            writable,
            alone: false,
        })
    }

    /// A second, read-only handle on the same pages (its own descriptor and mapping, no
    /// page touched): what the store keeps of an array stored with `store_shared`.
    pub(crate) fn share_read_only(&self) -> Result<Segment, PcmError> {
        let failed = |reason: String| PcmError::SharedArray {
            what: format!("of {} bytes could not be stored", self.len),
            reason,
        };
        let fd = self
            .fd
            .try_clone()
            .map_err(|e| failed(format!("dup: {e}")))?;
        Self::map(fd, self.len, self.map_len, false, false).map_err(failed)
    }

    /// Takes over the segment that process `pid` offers as its descriptor `fd`, for an
    /// entry of `len` bytes of job `job`: checks it (see the module documentation), then
    /// maps it read-write with every page present.
    pub(crate) fn adopt(pid: u32, fd: RawFd, len: usize, job: &str) -> Result<Segment, PcmError> {
        let path = format!("/proc/{pid}/fd/{fd}");
        let failed = |reason: String| PcmError::SharedArray {
            what: format!("segment {path} not taken over"),
            reason,
        };
        let link = std::fs::read_link(&path).map_err(|e| failed(format!("readlink: {e}")))?;
        let expected = format!("/memfd:{NAME_PREFIX}{}:", job_tag(job));
        let text = link.to_string_lossy();
        if !text.starts_with(&expected) {
            return Err(failed(format!(
                "it is {text:?}, not an array of this job ({expected}...)"
            )));
        }
        let cpath = CString::new(path.clone()).map_err(|_| failed("path holds NUL".into()))?;
        // SAFETY: cpath is NUL-terminated and outlives the call.
        let raw = unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(failed(format!("open: {}", last_os_error())));
        }
        // SAFETY: open returned a new descriptor that nothing else owns.
        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
        // What was opened, not what the link named a moment before.
        let opened = std::fs::read_link(format!("/proc/self/fd/{}", owned.as_raw_fd()))
            .map_err(|e| failed(format!("readlink of the opened file: {e}")))?;
        if !opened.to_string_lossy().starts_with(&expected) {
            return Err(failed(format!(
                "it opened as {:?}, not an array of this job",
                opened.to_string_lossy()
            )));
        }
        let map_len = Self::check_offered(&owned, len).map_err(failed)?;
        Ok(Self::map(owned, len, map_len, true, true)
            .map_err(failed)?
            .held_alone())
    }

    /// The checks on an opened offered segment; returns its size (the length to map).
    fn check_offered(fd: &OwnedFd, len: usize) -> Result<usize, String> {
        let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fd is valid; fstat writes one struct stat.
        if unsafe { libc::fstat(fd.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
            return Err(format!("fstat: {}", last_os_error()));
        }
        // SAFETY: fstat succeeded, so the struct is initialised.
        let stat = unsafe { stat.assume_init() };
        if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err("not a regular file".into());
        }
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if stat.st_uid != me {
            return Err(format!(
                "owned by user {}, not by this process's user {me}",
                stat.st_uid
            ));
        }
        // SAFETY: fd is valid; F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        let needed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if seals < 0 || seals & needed != needed {
            return Err("not sealed against resizing".into());
        }
        let expected = len
            .checked_next_multiple_of(page_size())
            .ok_or_else(|| "size overflows".to_owned())?;
        if u64::try_from(stat.st_size).ok() != Some(expected as u64) {
            return Err(format!(
                "holds {} bytes, the entry announced {len} ({expected} with padding)",
                stat.st_size
            ));
        }
        Ok(expected)
    }

    /// The descriptor number to offer to a replacement (valid while this segment lives).
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Marks a writable segment as this process's only handle on its pages.
    pub(crate) fn held_alone(mut self) -> Segment {
        self.alone = self.writable;
        self
    }

    /// Whether the segment may become the caller's array as it is (see `alone`).
    pub(crate) fn is_held_alone(&self) -> bool {
        self.alone && self.writable
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        if self.map_len == 0 {
            return &[];
        }
        // SAFETY: the mapping is at least `len` bytes, readable, and lives as long as self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes in 8-byte words, padding (zero) included, for MPI (the mapping is
    /// page-aligned and a whole number of pages).
    pub(crate) fn words(&self) -> &[u64] {
        if self.map_len == 0 {
            return &[];
        }
        // SAFETY: page-aligned, `len.div_ceil(8) * 8 <= map_len` bytes, readable.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast(), self.len.div_ceil(8)) }
    }

    /// Mutable bytes; `None` for a read-only handle.
    fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        if !self.writable {
            return None;
        }
        if self.map_len == 0 {
            return Some(&mut []);
        }
        // SAFETY: writable mapping of at least `len` bytes, borrowed mutably through self.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// Mutable words (see [`Segment::words`]), for receiving; `None` for a read-only handle.
    pub(crate) fn words_mut(&mut self) -> Option<&mut [u64]> {
        if !self.writable {
            return None;
        }
        if self.map_len == 0 {
            return Some(&mut []);
        }
        // SAFETY: as `words`, writable, borrowed mutably through self.
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast(), self.len.div_ceil(8))
        })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.map_len > 0 {
            // SAFETY: the range is this segment's own mapping, and no reference to it
            // outlives the segment.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.map_len) };
        }
    }
}

/// An array of plain data in shared memory, allocated by PCM ([`crate::Pcm::alloc_array`]).
///
/// Use it as the application's own state array (it dereferences to `[T]`), store it with
/// [`crate::Pcm::store_shared`] and take it back in the replacement with
/// [`crate::Pcm::take_shared`]: a rank that moves to a replacement on the same host then
/// hands its pages over, with no copy; across hosts the bytes go over MPI as with
/// [`crate::Pcm::store_array`]. Checkpoints write its bytes like any array's.
pub struct SharedArray<T: Pod> {
    segment: Segment,
    len: usize,
    _elements: PhantomData<T>,
}

impl<T: Pod> SharedArray<T> {
    fn check_element(what: &str) -> Result<usize, PcmError> {
        let size = std::mem::size_of::<T>();
        if size == 0 || std::mem::align_of::<T>() > page_size() {
            return Err(PcmError::SharedArray {
                what: what.to_owned(),
                reason: format!(
                    "element type {} has size 0 or an alignment above a page",
                    std::any::type_name::<T>()
                ),
            });
        }
        Ok(size)
    }

    /// `len` zeroed elements for `job`.
    pub(crate) fn zeroed(job: &str, name: &str, len: usize) -> Result<Self, PcmError> {
        let size = Self::check_element(&format!("{name:?} could not be created"))?;
        let bytes = len.checked_mul(size).ok_or_else(|| PcmError::SharedArray {
            what: format!("{name:?} could not be created"),
            reason: format!("{len} elements overflow the address space"),
        })?;
        Ok(SharedArray {
            segment: Segment::create(job, name, bytes)?,
            len,
            _elements: PhantomData,
        })
    }

    /// A new array holding a copy of `bytes`.
    pub(crate) fn copy_of(job: &str, name: &str, bytes: &[u8]) -> Result<Self, PcmError> {
        let size = Self::check_element(&format!("{name:?} could not be created"))?;
        if bytes.len() % size != 0 {
            return Err(PcmError::WrongLength {
                name: name.to_owned(),
                expected: bytes.len().div_ceil(size),
                found: bytes.len() / size,
            });
        }
        let mut array = Self::zeroed(job, name, bytes.len() / size)?;
        array.as_bytes_mut().copy_from_slice(bytes);
        Ok(array)
    }

    /// The array made of a segment this process alone holds (adopted from a departing
    /// process, or received into a new one).
    pub(crate) fn from_segment(name: &str, segment: Segment) -> Result<Self, PcmError> {
        let size = Self::check_element(&format!("{name:?} could not be taken"))?;
        if segment.len() % size != 0 {
            return Err(PcmError::SharedArray {
                what: format!("{name:?} could not be taken"),
                reason: format!(
                    "its {} bytes are not a whole number of {}",
                    segment.len(),
                    std::any::type_name::<T>()
                ),
            });
        }
        if !segment.writable {
            return Err(PcmError::internal("a read-only segment taken as an array"));
        }
        Ok(SharedArray {
            len: segment.len() / size,
            segment,
            _elements: PhantomData,
        })
    }

    pub(crate) fn segment(&self) -> &Segment {
        &self.segment
    }

    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.segment.bytes_mut().unwrap_or_default()
    }
}

impl<T: Pod> std::ops::Deref for SharedArray<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        if self.len == 0 {
            return &[];
        }
        bytemuck::cast_slice(self.segment.bytes())
    }
}

impl<T: Pod> std::ops::DerefMut for SharedArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        if self.len == 0 {
            return &mut [];
        }
        bytemuck::cast_slice_mut(self.as_bytes_mut())
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for SharedArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedArray")
            .field("len", &self.len)
            .field("fd", &self.segment.raw_fd())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_zeroed_and_writable() {
        let mut a = SharedArray::<f64>::zeroed("job1", "grid", 1000).unwrap();
        assert_eq!(a.len(), 1000);
        assert!(a.iter().all(|&x| x == 0.0));
        a[999] = 2.5;
        let b = SharedArray::<f64>::copy_of("job1", "copy", bytemuck::cast_slice(&a)).unwrap();
        assert_eq!(&a[..], &b[..]);
        let empty = SharedArray::<u8>::zeroed("job1", "empty", 0).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn an_offered_segment_of_this_process_is_adopted() {
        let mut a = SharedArray::<u64>::zeroed("job1", "grid", 5000).unwrap();
        a[4999] = 7;
        let pid = std::process::id();
        let seg = Segment::adopt(pid, a.segment().raw_fd(), 5000 * 8, "job1").unwrap();
        let b = SharedArray::<u64>::from_segment("grid", seg).unwrap();
        assert_eq!(b[4999], 7);
        a[0] = 3;
        assert_eq!(b[0], 3, "the same pages");
    }

    #[test]
    fn forged_offers_are_refused_with_their_reason() {
        let pid = std::process::id();
        let a = SharedArray::<u64>::zeroed("job1", "grid", 100).unwrap();
        let fd = a.segment().raw_fd();
        let text = |e: PcmError| e.to_string();
        // Another job's array.
        let e = text(Segment::adopt(pid, fd, 800, "job2").unwrap_err());
        assert!(e.contains("not an array of this job"), "{e}");
        // A size other than the one announced.
        let e = text(Segment::adopt(pid, fd, 80_000, "job1").unwrap_err());
        assert!(e.contains("holds 4096 bytes"), "{e}");
        // Another file (not a memfd), and a descriptor that is not open.
        let file = std::fs::File::open("/dev/null").unwrap();
        let e = text(Segment::adopt(pid, file.as_raw_fd(), 800, "job1").unwrap_err());
        assert!(e.contains("not an array of this job"), "{e}");
        let e = text(Segment::adopt(pid, 987_654, 800, "job1").unwrap_err());
        assert!(e.contains("/proc/") && e.contains("readlink"), "{e}");
        // A memfd with the right name but not sealed.
        let name = CString::new(format!("{NAME_PREFIX}job1:forged")).unwrap();
        // SAFETY: test: a new memfd, owned below.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: new descriptor.
        let forged = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: valid descriptor.
        assert_eq!(unsafe { libc::ftruncate(raw, 4096) }, 0);
        let e = text(Segment::adopt(pid, forged.as_raw_fd(), 800, "job1").unwrap_err());
        assert!(e.contains("not sealed"), "{e}");
    }
}
