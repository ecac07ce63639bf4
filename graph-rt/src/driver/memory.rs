//! Device buffers and page-locked host buffers.

use std::marker::PhantomData;
use std::sync::Arc;

use bytemuck::Pod;
use cuda_sys::CUdeviceptr;

use super::{Context, ContextInner};
use super::{Stream, StreamInner};
use crate::error::{check, Error, Result};

/// How a buffer's memory is returned to the driver.
enum Release {
    /// `cuMemFree`.
    Sync,
    /// `cuMemFreeAsync` on the stream it was allocated on, ordered after the work queued there.
    Stream(Arc<StreamInner>),
    /// Not ours (see [`DeviceBuffer::from_raw`]).
    Foreign,
}

/// One device allocation. Buffers hold it in an `Arc`, and so do the graphs and execs whose
/// nodes use it: it is freed when the last of them is gone.
pub(crate) struct Allocation {
    ptr: CUdeviceptr,
    ctx: Arc<ContextInner>,
    release: Release,
}

/// `len` elements of `T` in device memory, freed when the buffer and every graph that uses it
/// are gone.
///
/// `T: Pod` because the device may write any bit pattern into it.
pub struct DeviceBuffer<T: Pod> {
    ptr: CUdeviceptr,
    len: usize,
    alloc: Arc<Allocation>,
    _t: PhantomData<T>,
}

// SAFETY: device memory may be used from any thread; the buffer owns its allocation.
unsafe impl<T: Pod> Send for DeviceBuffer<T> {}
// SAFETY: shared references only read the pointer and length.
unsafe impl<T: Pod> Sync for DeviceBuffer<T> {}

impl<T: Pod> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

/// Waits for the legacy default stream, on which the synchronous copies and fills are queued.
///
/// They may return before the device has finished them (fills and device-to-device copies
/// always, host-to-device copies once the source is staged), and work on non-blocking streams
/// is not ordered after the legacy stream: without this wait a kernel launched next could run
/// before the fill it relies on.
fn settle() -> Result<()> {
    // SAFETY: a null stream is the legacy default stream of the current context.
    check("cuStreamSynchronize", unsafe {
        cuda_sys::cuStreamSynchronize(std::ptr::null_mut())
    })
}

fn byte_len<T>(call: &'static str, len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        Error::invalid(
            call,
            format!(
                "{len} elements of {} bytes overflow usize",
                std::mem::size_of::<T>()
            ),
        )
    })
}

fn same_len(call: &'static str, ours: usize, theirs: usize) -> Result<()> {
    if ours == theirs {
        Ok(())
    } else {
        Err(Error::invalid(
            call,
            format!("the buffer holds {ours} elements, the other side {theirs}"),
        ))
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Allocates `len` uninitialised elements (`cuMemAlloc`). A zero-length buffer allocates nothing.
    pub fn alloc(ctx: &Context, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>("cuMemAlloc", len)?;
        ctx.bind()?;
        let mut ptr = 0;
        if bytes > 0 {
            // SAFETY: valid out-pointer; the context is current.
            check("cuMemAlloc", unsafe {
                cuda_sys::cuMemAlloc(&mut ptr, bytes)
            })?;
        }
        Ok(Self::wrap(ptr, len, &ctx.inner, Release::Sync))
    }

    /// Allocates `len` zeroed elements.
    pub fn zeroed(ctx: &Context, len: usize) -> Result<Self> {
        let mut b = Self::alloc(ctx, len)?;
        b.fill_zero()?;
        Ok(b)
    }

    /// Allocates and copies `data` in.
    pub fn from_host(ctx: &Context, data: &[T]) -> Result<Self> {
        let mut b = Self::alloc(ctx, data.len())?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    /// Allocates `len` uninitialised elements in stream order (`cuMemAllocAsync`): the memory is
    /// usable by work queued on `stream` after this call, and is freed on drop in stream order
    /// (`cuMemFreeAsync` on the same stream), after all work queued there before the drop.
    ///
    /// The buffer keeps the stream alive until it is freed. graph-rt's synchronous operations on
    /// it (copies, fills) first wait for `stream`. Not on a capturing stream: memory that lives
    /// inside a graph comes from [`Graph::add_mem_alloc`](crate::Graph::add_mem_alloc).
    pub fn alloc_async(stream: &Stream, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>("cuMemAllocAsync", len)?;
        if stream.capture_status()? != super::CaptureStatus::None {
            return Err(Error::invalid(
                "cuMemAllocAsync",
                "the stream is capturing: use Graph::add_mem_alloc for memory that lives inside a graph",
            ));
        }
        stream.context().bind()?;
        let mut ptr = 0;
        if bytes > 0 {
            // SAFETY: valid out-pointer and stream; the context is current.
            check("cuMemAllocAsync", unsafe {
                cuda_sys::cuMemAllocAsync(&mut ptr, bytes, stream.as_raw())
            })?;
        }
        Ok(Self::wrap(
            ptr,
            len,
            stream.ctx_inner(),
            Release::Stream(stream.shared()),
        ))
    }

    /// Wraps device memory allocated elsewhere. graph-rt never frees it.
    ///
    /// # Safety
    /// `ptr` must point at `len` elements of `T` in memory of `ctx` that stays allocated, and is
    /// not written by anyone else concurrently, for the life of the returned value.
    pub unsafe fn from_raw(ctx: &Context, ptr: CUdeviceptr, len: usize) -> Self {
        Self::wrap(ptr, len, &ctx.inner, Release::Foreign)
    }

    /// Takes ownership of `len` elements at `ptr`, allocated in `ctx` by `cuMemAlloc` or
    /// `cuMemAllocAsync` and owned by nobody else; freed with `cuMemFree`.
    #[cfg(feature = "cudarc")]
    pub(crate) fn adopt(ctx: &Context, ptr: CUdeviceptr, len: usize) -> Self {
        Self::wrap(ptr, len, &ctx.inner, Release::Sync)
    }

    fn wrap(ptr: CUdeviceptr, len: usize, ctx: &Arc<ContextInner>, release: Release) -> Self {
        let alloc = Arc::new(Allocation {
            ptr,
            ctx: ctx.clone(),
            release,
        });
        Self {
            ptr,
            len,
            alloc,
            _t: PhantomData,
        }
    }

    /// The allocation, for graphs to keep alive.
    pub(crate) fn allocation(&self) -> &Arc<Allocation> {
        &self.alloc
    }

    /// The device address. Valid while `self` lives; do not free it.
    pub fn as_raw(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Copies `src` into the buffer (`cuMemcpyHtoD`); lengths must match. Returns once the copy
    /// is done on the device, so work queued afterwards on any stream sees it.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        same_len("DeviceBuffer::copy_from_host", self.len, src.len())?;
        if self.len == 0 {
            return Ok(());
        }
        self.alloc.ctx.bind()?;
        self.alloc.ready()?;
        // SAFETY: both sides hold num_bytes bytes; the context is current.
        check("cuMemcpyHtoD", unsafe {
            cuda_sys::cuMemcpyHtoD(self.ptr, src.as_ptr().cast(), self.num_bytes())
        })?;
        settle()
    }

    /// Copies the buffer into `dst` (`cuMemcpyDtoH`); lengths must match. Waits for the copy.
    /// The copy is ordered after work on the legacy default stream only: synchronize the
    /// (non-blocking) streams that write the buffer first.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        same_len("DeviceBuffer::copy_to_host", self.len, dst.len())?;
        if self.len == 0 {
            return Ok(());
        }
        self.alloc.ctx.bind()?;
        self.alloc.ready()?;
        // SAFETY: both sides hold num_bytes bytes; T: Pod accepts any bytes.
        check("cuMemcpyDtoH", unsafe {
            cuda_sys::cuMemcpyDtoH(dst.as_mut_ptr().cast(), self.ptr, self.num_bytes())
        })
    }

    /// Copies the buffer into a new `Vec`.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Copies `src` into the buffer (`cuMemcpyDtoD`); lengths must match. Returns once done.
    pub fn copy_from_device(&mut self, src: &DeviceBuffer<T>) -> Result<()> {
        same_len("DeviceBuffer::copy_from_device", self.len, src.len)?;
        if self.len == 0 {
            return Ok(());
        }
        self.alloc.ctx.bind()?;
        self.alloc.ready()?;
        src.alloc.ready()?;
        // SAFETY: both allocations hold num_bytes bytes; `&mut self` excludes overlap.
        check("cuMemcpyDtoD", unsafe {
            cuda_sys::cuMemcpyDtoD(self.ptr, src.ptr, self.num_bytes())
        })?;
        settle()
    }

    /// Sets every byte to zero (`cuMemsetD8`).
    pub fn fill_zero(&mut self) -> Result<()> {
        self.fill_bytes(0)
    }

    /// Sets every byte to `value` (`cuMemsetD8`). Returns once done.
    pub fn fill_bytes(&mut self, value: u8) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        self.alloc.ctx.bind()?;
        self.alloc.ready()?;
        // SAFETY: the allocation holds num_bytes bytes.
        check("cuMemsetD8", unsafe {
            cuda_sys::cuMemsetD8(self.ptr, value, self.num_bytes())
        })?;
        settle()
    }

    /// Sets every 32-bit word to `value` (`cuMemsetD32`) and returns once done, e.g. `f32::NAN.to_bits()` to poison
    /// an `f32` buffer. The size of `T` must be a multiple of 4.
    pub fn fill_u32(&mut self, value: u32) -> Result<()> {
        if std::mem::size_of::<T>() % 4 != 0 {
            return Err(Error::invalid(
                "DeviceBuffer::fill_u32",
                format!(
                    "the element size {} is not a multiple of 4 bytes",
                    std::mem::size_of::<T>()
                ),
            ));
        }
        if self.len == 0 {
            return Ok(());
        }
        self.alloc.ctx.bind()?;
        self.alloc.ready()?;
        // SAFETY: the allocation holds num_bytes / 4 words.
        check("cuMemsetD32", unsafe {
            cuda_sys::cuMemsetD32(self.ptr, value, self.num_bytes() / 4)
        })?;
        settle()
    }

    /// Queues a zero fill on `stream` (`cuMemsetD8Async`). Inside a capture, use
    /// [`CaptureScope::fill_zero`](crate::CaptureScope::fill_zero), which keeps the buffer alive.
    ///
    /// # Safety
    /// The buffer must outlive the fill: dropping it waits for queued work only when it was
    /// allocated by [`DeviceBuffer::alloc`] (cuMemFree synchronizes) or on `stream` itself
    /// ([`DeviceBuffer::alloc_async`]); and if `stream` is capturing, for every replay.
    pub unsafe fn fill_zero_async(&mut self, stream: &Stream) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        stream.context().bind()?;
        // SAFETY: the allocation holds num_bytes bytes; the caller keeps it alive.
        check("cuMemsetD8Async", unsafe {
            cuda_sys::cuMemsetD8Async(self.ptr, 0, self.num_bytes(), stream.as_raw())
        })
    }

    /// Queues a device-to-device copy on `stream` (`cuMemcpyDtoDAsync`); lengths must match.
    /// Inside a capture, use [`CaptureScope::copy`](crate::CaptureScope::copy).
    ///
    /// # Safety
    /// As [`DeviceBuffer::fill_zero_async`], for both buffers.
    pub unsafe fn copy_from_device_async(
        &mut self,
        src: &DeviceBuffer<T>,
        stream: &Stream,
    ) -> Result<()> {
        same_len("DeviceBuffer::copy_from_device_async", self.len, src.len)?;
        if self.len == 0 {
            return Ok(());
        }
        stream.context().bind()?;
        // SAFETY: both allocations hold num_bytes bytes; the caller keeps them alive.
        check("cuMemcpyDtoDAsync", unsafe {
            cuda_sys::cuMemcpyDtoDAsync(self.ptr, src.ptr, self.num_bytes(), stream.as_raw())
        })
    }

    /// Queues a copy from page-locked host memory on `stream` (`cuMemcpyHtoDAsync`).
    ///
    /// # Safety
    /// `src` must be neither dropped nor written until the copy is done (synchronize the stream
    /// or an event recorded after it).
    pub unsafe fn copy_from_pinned_async(
        &mut self,
        src: &PinnedHostBuffer<T>,
        stream: &Stream,
    ) -> Result<()> {
        same_len("DeviceBuffer::copy_from_pinned_async", self.len, src.len)?;
        if self.len == 0 {
            return Ok(());
        }
        stream.context().bind()?;
        // SAFETY: sizes match; the caller keeps `src` alive and unchanged until completion.
        check("cuMemcpyHtoDAsync", unsafe {
            cuda_sys::cuMemcpyHtoDAsync(self.ptr, src.ptr.cast(), self.num_bytes(), stream.as_raw())
        })
    }

    /// Queues a copy into page-locked host memory on `stream` (`cuMemcpyDtoHAsync`).
    ///
    /// # Safety
    /// `dst` must be neither dropped, read nor written until the copy is done.
    pub unsafe fn copy_to_pinned_async(
        &self,
        dst: &mut PinnedHostBuffer<T>,
        stream: &Stream,
    ) -> Result<()> {
        same_len("DeviceBuffer::copy_to_pinned_async", self.len, dst.len)?;
        if self.len == 0 {
            return Ok(());
        }
        stream.context().bind()?;
        // SAFETY: sizes match; the caller keeps `dst` alive and untouched until completion.
        check("cuMemcpyDtoHAsync", unsafe {
            cuda_sys::cuMemcpyDtoHAsync(dst.ptr.cast(), self.ptr, self.num_bytes(), stream.as_raw())
        })
    }
}

impl Allocation {
    /// Makes a stream-ordered allocation usable outside its stream: waits for that stream.
    fn ready(&self) -> Result<()> {
        match &self.release {
            // SAFETY: the stream is alive (we hold it).
            Release::Stream(s) => check("cuStreamSynchronize", unsafe {
                cuda_sys::cuStreamSynchronize(s.raw())
            }),
            _ => Ok(()),
        }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        let r = match &self.release {
            Release::Foreign => return,
            // SAFETY: we allocated `ptr` with cuMemAlloc; cuMemFree synchronizes with the device
            // before freeing, so no queued work still uses it.
            Release::Sync => self
                .ctx
                .bind()
                .and_then(|_| check("cuMemFree", unsafe { cuda_sys::cuMemFree(self.ptr) })),
            // SAFETY: we allocated `ptr` on this stream, which we keep alive.
            Release::Stream(stream) => self.ctx.bind().and_then(|_| {
                check("cuMemFreeAsync", unsafe {
                    cuda_sys::cuMemFreeAsync(self.ptr, stream.raw())
                })
            }),
        };
        self.ctx.record(r);
    }
}

/// `len` elements of `T` in page-locked host memory (`cuMemHostAlloc`), zero-initialised, which
/// the device can copy from and to asynchronously.
pub struct PinnedHostBuffer<T: Pod> {
    ptr: *mut T,
    len: usize,
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
            // SAFETY: valid out-pointer; the context is current.
            check("cuMemHostAlloc", unsafe {
                cuda_sys::cuMemHostAlloc(&mut ptr, bytes, 0)
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
        // SAFETY: we allocated `ptr` with cuMemHostAlloc.
        let r = self.ctx.bind().and_then(|_| {
            check("cuMemFreeHost", unsafe {
                cuda_sys::cuMemFreeHost(self.ptr.cast())
            })
        });
        self.ctx.record(r);
    }
}
