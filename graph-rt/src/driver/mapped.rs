//! Mapped page-locked host memory: host memory the device reads and writes directly
//! (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_DEVICEMAP`), for small control data shared with
//! running kernels (an argument table's mirrors and acknowledgements).

use std::sync::Arc;

use bytemuck::Pod;
use graph_rt_sys::CUdeviceptr;

use super::call::cu;
use super::memory::byte_len;
use super::{Context, ContextInner};
use crate::error::{Error, Misuse, Result};

/// `len` zeroed elements of `T` in page-locked host memory mapped into the device's address
/// space. The device may read and write it while kernels run, so the host accesses it element by
/// element with volatile reads and writes, never through a slice. Reads take `&self`, writes
/// `&mut self`: threads that share the buffer read it, one that owns it (or holds it behind a
/// lock) writes it.
///
/// ```no_run
/// # fn main() -> graph_rt::Result<()> {
/// let ctx = graph_rt::Context::new(0)?;
/// let mut flags = graph_rt::MappedHostBuffer::<u32>::zeroed(&ctx, 4)?;
/// assert!(flags.write(0, 1));
/// assert_eq!(flags.read(0), Some(1));
/// # Ok(()) }
/// ```
///
/// Two threads sharing the buffer cannot write it (the writes would race):
///
/// ```compile_fail,E0596
/// fn race(flags: &graph_rt::MappedHostBuffer<u32>) {
///     std::thread::scope(|s| {
///         s.spawn(|| flags.write(0, 1));
///         s.spawn(|| flags.write(0, 2));
///     });
/// }
/// ```
pub struct MappedHostBuffer<T: Pod> {
    ptr: *mut T,
    device: CUdeviceptr,
    len: usize,
    ctx: Arc<ContextInner>,
}

// SAFETY: the buffer owns its memory; every access is a volatile element access, as the device's.
unsafe impl<T: Pod + Send> Send for MappedHostBuffer<T> {}
// SAFETY: no reference into the memory is ever handed out; through a shared reference the host
// only reads (volatile), and `write` takes `&mut self`, so no two host threads race on an element.
unsafe impl<T: Pod + Sync> Sync for MappedHostBuffer<T> {}

impl<T: Pod> std::fmt::Debug for MappedHostBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedHostBuffer")
            .field("device", &format_args!("{:#x}", self.device))
            .field("len", &self.len)
            .finish()
    }
}

impl<T: Pod> MappedHostBuffer<T> {
    /// Allocates `len` zeroed elements (at least one), mapped for the device of `ctx`.
    pub fn zeroed(ctx: &Context, len: usize) -> Result<Self> {
        const CALL: &str = "cuMemHostAlloc";
        if len == 0 || std::mem::size_of::<T>() == 0 {
            return Err(Error::misuse(
                CALL,
                Misuse::Empty,
                "a mapped buffer holds at least one byte",
            ));
        }
        let bytes = byte_len::<T>(CALL, len)?;
        ctx.bind()?;
        let mut ptr = std::ptr::null_mut();
        let flags =
            graph_rt_sys::CU_MEMHOSTALLOC_DEVICEMAP | graph_rt_sys::CU_MEMHOSTALLOC_PORTABLE;
        ctx.inner.alloc_retrying(|| {
            // SAFETY: valid out-pointer; the context is current.
            unsafe { cu!(cuMemHostAlloc(&mut ptr, bytes, flags)) }
        })?;
        // SAFETY: the allocation holds `bytes` bytes, not yet shared with the device.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes) };
        let mut device = 0;
        // SAFETY: `ptr` is mapped host memory of this context; flags must be 0.
        let r = unsafe { cu!(cuMemHostGetDevicePointer(&mut device, ptr, 0)) };
        if let Err(e) = r {
            // SAFETY: allocated above, never shared.
            let _ = unsafe { graph_rt_sys::cuMemFreeHost(ptr) };
            return Err(e);
        }
        Ok(Self {
            ptr: ptr.cast(),
            device,
            len,
            ctx: ctx.inner.clone(),
        })
    }

    /// The address kernels use.
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.device
    }

    /// The host address. Access it only with volatile element reads and writes.
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no elements (never: it holds at least one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `i`, as the device last wrote it (a volatile read), or `None` out of range.
    #[inline]
    pub fn read(&self, i: usize) -> Option<T> {
        // SAFETY: in range; volatile, since the device may write it concurrently.
        (i < self.len).then(|| unsafe { self.ptr.add(i).read_volatile() })
    }

    /// Writes element `i` (a volatile write); out of range writes nothing and returns false.
    /// It takes `&mut self` so that no other host thread reads or writes the buffer meanwhile.
    #[inline]
    pub fn write(&mut self, i: usize, value: T) -> bool {
        if i >= self.len {
            return false;
        }
        // SAFETY: in range; volatile, since the device may read it concurrently.
        unsafe { self.ptr.add(i).write_volatile(value) };
        true
    }
}

impl<T: Pod> Drop for MappedHostBuffer<T> {
    fn drop(&mut self) {
        let r = self.ctx.bind().and_then(|_| {
            // SAFETY: we allocated `ptr` with cuMemHostAlloc; its owner keeps it alive while the
            // device may use it.
            unsafe { cu!(cuMemFreeHost(self.ptr.cast())) }
        });
        self.ctx.record(r);
    }
}
