//! Owned buffers: `Vec<u8>` and [`AlignedBuf`], handed to an operation and returned by
//! it ("rent" style), so that a pool thread or the kernel may write into one while the
//! caller's future is gone.
//!
//! How it fits: every read *appends* after the buffer's current length (the server
//! puts the response head first and the body after it, one write for both); a write
//! sends the whole buffer. [`AlignedBuf`] is the buffer for O_DIRECT, whose memory,
//! offset and length must all be multiples of the device's block size.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// A buffer an operation can own while it is in flight: `Vec<u8>` or [`AlignedBuf`].
/// Sealed: the engine relies on the heap memory not moving while the value moves.
pub trait IoBuf: private::Sealed {}

impl IoBuf for Vec<u8> {}
impl IoBuf for AlignedBuf {}

pub(crate) use private::Buf;

pub(crate) mod private {
    use super::AlignedBuf;

    /// The two buffer kinds, as the in-flight table stores them.
    pub enum Buf {
        Vec(Vec<u8>),
        Aligned(AlignedBuf),
    }

    pub trait Sealed: Sized + 'static {
        fn into_buf(self) -> Buf;
        fn from_buf(buf: Buf) -> Self;
    }

    impl Sealed for Vec<u8> {
        fn into_buf(self) -> Buf {
            Buf::Vec(self)
        }
        fn from_buf(buf: Buf) -> Self {
            match buf {
                Buf::Vec(v) => v,
                Buf::Aligned(_) => unreachable!("an op returns the buffer it was given"),
            }
        }
    }

    impl Sealed for AlignedBuf {
        fn into_buf(self) -> Buf {
            Buf::Aligned(self)
        }
        fn from_buf(buf: Buf) -> Self {
            match buf {
                Buf::Aligned(b) => b,
                Buf::Vec(_) => unreachable!("an op returns the buffer it was given"),
            }
        }
    }

    impl Buf {
        pub fn len(&self) -> usize {
            match self {
                Buf::Vec(v) => v.len(),
                Buf::Aligned(b) => b.len(),
            }
        }

        /// Makes room for `len` more bytes and returns where they go (just past the
        /// current length). The pointer stays valid while the buffer is only moved.
        pub fn read_target(&mut self, len: usize) -> *mut u8 {
            match self {
                Buf::Vec(v) => {
                    v.reserve(len);
                    // `len() <= capacity()`, so the pointer stays inside the allocation.
                    v.as_mut_ptr().wrapping_add(v.len())
                }
                Buf::Aligned(b) => {
                    b.reserve(len);
                    b.spare_ptr()
                }
            }
        }

        /// Records that a read put `n` bytes at the `read_target` pointer.
        ///
        /// # Safety
        /// `n` bytes past the length must have been initialised, and `n` may not exceed
        /// the room `read_target` made.
        pub unsafe fn commit(&mut self, n: usize) {
            match self {
                // SAFETY: the caller's guarantee: those bytes are initialised and lie
                // within the reserved capacity.
                Buf::Vec(v) => unsafe { v.set_len(v.len() + n) },
                // SAFETY: as above.
                Buf::Aligned(b) => unsafe { b.set_len(b.len() + n) },
            }
        }

        /// The bytes from `start` on, for a write.
        pub fn write_source(&self, start: usize) -> (*const u8, usize) {
            let s: &[u8] = match self {
                Buf::Vec(v) => v,
                Buf::Aligned(b) => b,
            };
            let s = &s[start.min(s.len())..];
            (s.as_ptr(), s.len())
        }
    }
}

/// A heap buffer whose start and capacity are multiples of `align` (a power of two),
/// as O_DIRECT needs. Like `Vec<u8>` it has a length (initialised bytes) and a
/// capacity; growing it keeps the alignment.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
    align: usize,
}

// SAFETY: `AlignedBuf` uniquely owns its allocation, like `Vec<u8>`; no shared state.
unsafe impl Send for AlignedBuf {}
// SAFETY: `&AlignedBuf` only gives `&[u8]` access.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// An empty buffer with room for at least `capacity` bytes (rounded up to a
    /// multiple of `align`, and at least `align`). Panics if `align` is not a power of
    /// two.
    pub fn new(capacity: usize, align: usize) -> AlignedBuf {
        assert!(align.is_power_of_two(), "alignment must be a power of two");
        let cap = round_up(capacity.max(1), align);
        AlignedBuf {
            ptr: alloc_aligned(cap, align),
            len: 0,
            cap,
            align,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    pub fn align(&self) -> usize {
        self.align
    }

    /// Empties the buffer (keeps the allocation).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Shortens the buffer to `len` bytes (no effect if it is shorter).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends bytes, growing as needed.
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        self.reserve(data.len());
        // SAFETY: `reserve` made room for `data.len()` bytes past `len`; the source is a
        // distinct borrow, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.spare_ptr(), data.len());
            self.set_len(self.len + data.len());
        }
    }

    /// Pads with zeros up to `len` bytes (no effect if already that long).
    pub fn resize_zeroed(&mut self, len: usize) {
        if len > self.len {
            self.reserve(len - self.len);
            // SAFETY: `reserve` made room up to `len`; zeroing initialises those bytes.
            unsafe {
                std::ptr::write_bytes(self.spare_ptr(), 0, len - self.len);
                self.set_len(len);
            }
        }
    }

    /// Makes room for `additional` more bytes, reallocating (aligned) if needed.
    pub fn reserve(&mut self, additional: usize) {
        let need = self.len.checked_add(additional).expect("capacity overflow");
        if need <= self.cap {
            return;
        }
        let cap = round_up(need.max(self.cap * 2), self.align);
        let ptr = alloc_aligned(cap, self.align);
        // SAFETY: both allocations are live and distinct; the old one holds `len`
        // initialised bytes and the new one has room for `cap >= len`.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), ptr.as_ptr(), self.len) };
        // SAFETY: the old pointer came from `alloc_aligned` with this very layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout(self.cap, self.align)) };
        self.ptr = ptr;
        self.cap = cap;
    }

    /// The first byte past the length.
    pub(crate) fn spare_ptr(&mut self) -> *mut u8 {
        // `len <= cap`, so the result is inside (or one past) the allocation.
        self.ptr.as_ptr().wrapping_add(self.len)
    }

    /// # Safety
    /// The first `len` bytes must be initialised and `len <= capacity`.
    pub(crate) unsafe fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.cap);
        self.len = len;
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of `cap >= len` bytes of which the first
        // `len` are initialised; the borrow of `self` keeps it alive and unaliased.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `alloc_aligned` with this layout, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout(self.cap, self.align)) };
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .field("align", &self.align)
            .finish()
    }
}

fn layout(cap: usize, align: usize) -> Layout {
    Layout::from_size_align(cap, align).expect("aligned buffer layout")
}

fn alloc_aligned(cap: usize, align: usize) -> NonNull<u8> {
    let layout = layout(cap, align);
    // SAFETY: `cap >= 1` (callers round up from at least 1), so the layout is non-zero.
    let p = unsafe { alloc::alloc(layout) };
    NonNull::new(p).unwrap_or_else(|| alloc::handle_alloc_error(layout))
}

/// `n` rounded up to a multiple of `align` (a power of two).
pub(crate) fn round_up(n: usize, align: usize) -> usize {
    (n + align - 1) & !(align - 1)
}

#[cfg(test)]
mod tests {
    use super::private::Sealed;
    use super::*;

    #[test]
    fn aligned_and_growable() {
        let mut b = AlignedBuf::new(10, 4096);
        assert_eq!(b.capacity(), 4096);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        b.extend_from_slice(b"hello");
        b.extend_from_slice(&[7u8; 5000]);
        assert_eq!(b.len(), 5005);
        assert_eq!(b.capacity() % 4096, 0);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert_eq!(&b[..5], b"hello");
        assert!(b[5..].iter().all(|&x| x == 7));
        b[0] = b'j';
        assert_eq!(&b[..5], b"jello");
        b.truncate(3);
        b.resize_zeroed(6);
        assert_eq!(&b[..], b"jel\0\0\0");
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn buf_append_and_write_source() {
        let mut b = Vec::from(&b"ab"[..]).into_buf();
        let p = b.read_target(3);
        // SAFETY: `read_target(3)` made room for 3 bytes at `p`; we initialise them.
        unsafe {
            std::ptr::copy_nonoverlapping(b"cde".as_ptr(), p, 3);
            b.commit(3);
        }
        assert_eq!(b.len(), 5);
        let (_, n) = b.write_source(1);
        assert_eq!(n, 4);
        assert_eq!(Vec::from_buf(b), b"abcde");

        let mut a = AlignedBuf::new(8, 512).into_buf();
        let p = a.read_target(2);
        // SAFETY: as above.
        unsafe {
            std::ptr::copy_nonoverlapping(b"xy".as_ptr(), p, 2);
            a.commit(2);
        }
        assert_eq!(&AlignedBuf::from_buf(a)[..], b"xy");
    }

    #[test]
    #[should_panic(expected = "power of two")]
    fn bad_alignment_panics() {
        AlignedBuf::new(1, 3);
    }
}
