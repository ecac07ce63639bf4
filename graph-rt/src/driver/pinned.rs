//! Page-locked host memory.

use std::sync::Arc;

use bytemuck::Pod;

use super::call::cu;
use super::memory::byte_len;
use super::{Context, ContextInner};
use crate::error::Result;

/// `len` elements of `T` in page-locked host memory (`cuMemHostAlloc`), zero-initialised, which
/// the device can copy from and to asynchronously.
pub struct PinnedHostBuffer<T: Pod> {
    pub(super) ptr: *mut T,
    pub(super) len: usize,
    ctx: Arc<ContextInner>,
}

// SAFETY: the buffer owns its memory exclusively, like a Box<[T]>.
unsafe impl<T: Pod + Send> Send for PinnedHostBuffer<T> {}
// SAFETY: shared access only reads, like &[T].
unsafe impl<T: Pod + Sync> Sync for PinnedHostBuffer<T> {}

impl<T: Pod> PinnedHostBuffer<T> {
    /// Allocates `len` zeroed elements of page-locked memory.
    pub fn zeroed(ctx: &Context, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>("cuMemHostAlloc", len)?;
        ctx.bind()?;
        let mut ptr = std::ptr::NonNull::<T>::dangling().as_ptr().cast();
        if bytes > 0 {
            ctx.inner.alloc_retrying(|| {
                // SAFETY: valid out-pointer; the context is current.
                unsafe { cu!(cuMemHostAlloc(&mut ptr, bytes, 0)) }
            })?;
            // SAFETY: the allocation holds `bytes` bytes.
            unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes) };
        }
        Ok(Self {
            ptr: ptr.cast(),
            len,
            ctx: ctx.inner.clone(),
        })
    }

    /// Allocates and copies `data` in.
    pub fn from_slice(ctx: &Context, data: &[T]) -> Result<Self> {
        let mut b = Self::zeroed(ctx, data.len())?;
        b.copy_from_slice(data);
        Ok(b)
    }

    /// The host address.
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }
}

impl<T: Pod> std::ops::Deref for PinnedHostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` holds `len` initialised elements (zeroed at allocation), or is dangling
        // and aligned for len 0.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Pod> std::ops::DerefMut for PinnedHostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref; `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: Pod> Drop for PinnedHostBuffer<T> {
    fn drop(&mut self) {
        if self.len == 0 || std::mem::size_of::<T>() == 0 {
            return;
        }
        let r = self.ctx.bind().and_then(|_| {
            // SAFETY: we allocated `ptr` with cuMemHostAlloc.
            unsafe { cu!(cuMemFreeHost(self.ptr.cast())) }
        });
        self.ctx.record(r);
    }
}
