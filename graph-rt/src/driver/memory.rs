//! Device buffers: allocation, transfers, fills, views (the allocation behind them, its backing
//! and release, is `allocation.rs`).

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use bytemuck::Pod;
use graph_rt_sys::CUdeviceptr;

use super::allocation::{Allocation, Backing};
use super::call::cu;
use super::view::view;
use super::{Context, ContextInner};
use super::{DeviceView, PinnedHostBuffer, Stream};
use crate::error::{Error, Misuse, Result};

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
    unsafe { cu!(cuStreamSynchronize(std::ptr::null_mut())) }
}

pub(super) fn byte_len<T>(call: &'static str, len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        Error::misuse(
            call,
            Misuse::TooLarge { what: "bytes" },
            format!(
                "{len} elements of {} bytes overflow usize",
                std::mem::size_of::<T>()
            ),
        )
    })
}

pub(super) fn same_len(call: &'static str, ours: usize, theirs: usize) -> Result<()> {
    if ours == theirs {
        Ok(())
    } else {
        Err(Error::misuse(
            call,
            Misuse::LengthMismatch { ours, theirs },
            format!("the buffer holds {ours} elements, the other side {theirs}"),
        ))
    }
}

/// Elements `start..end` of `len`, or a typed error naming `call` when out of bounds.
pub(super) fn bounds(
    call: &'static str,
    range: impl RangeBounds<usize>,
    len: usize,
) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e)),
        _ => {
            let show = |b: Option<usize>| b.map_or("usize::MAX + 1".into(), |b| b.to_string());
            Err(Error::misuse(
                call,
                Misuse::OutOfRange { len },
                format!(
                    "elements {}..{} are not a range within the {len} elements",
                    show(start),
                    show(end)
                ),
            ))
        }
    }
}

/// Whether `addr` is an address the device does not read through: host memory this process can
/// read (a stack, the heap) that CUDA does not know (`cuPointerGetAttribute` finds no
/// allocation of the current context there, device or host) and, where the device reaches
/// pageable memory itself (`reaches_pageable`: HMM, ATS, the device's
/// `CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS`), on the calling thread's stack. Device memory,
/// reserved ranges and unmapped pages are never such an address (the host cannot read them).
pub(crate) fn is_host_only(addr: u64, reaches_pageable: bool) -> bool {
    use graph_rt_sys::CUpointer_attribute as A;
    use graph_rt_sys::CUresult as R;
    if addr == 0 {
        return false;
    }
    let mut kind: u32 = 0;
    // SAFETY: an out-pointer of the attribute's type (an unsigned int); the address is only
    // looked up.
    let found = unsafe {
        super::call::cu_code!(cuPointerGetAttribute(
            (&mut kind as *mut u32).cast(),
            A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            addr
        ))
    };
    matches!(found, Ok(r) if r.code == R::CUDA_ERROR_INVALID_VALUE)
        && host_readable(addr)
        && (!reaches_pageable || on_this_threads_stack(addr))
}

/// Whether this process can read the byte at `addr` (`process_vm_readv` of itself: EFAULT where
/// nothing readable is mapped, with no signal).
fn host_readable(addr: u64) -> bool {
    let mut byte = 0u8;
    let local = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: 1,
    };
    // SAFETY: one byte into `byte`; the kernel checks the remote address and reports EFAULT
    // rather than faulting.
    unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) == 1 }
}

/// Whether `addr` lies in the calling thread's stack.
fn on_this_threads_stack(addr: u64) -> bool {
    // SAFETY: `attr` is initialised by pthread_getattr_np before it is read, and destroyed
    // after; the out-pointers are valid.
    unsafe {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return false;
        }
        let (mut base, mut size) = (std::ptr::null_mut(), 0usize);
        let got = libc::pthread_attr_getstack(attr.as_ptr(), &mut base, &mut size);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        got == 0 && addr >= base as u64 && addr - (base as u64) < size as u64
    }
}

/// Refuses a capturing stream for a copy to or from host memory that waits for the stream: a
/// capture could record the copy but not wait for it.
pub(super) fn not_capturing(stream: &Stream, call: &'static str) -> Result<()> {
    if stream.capture_status()? == super::CaptureStatus::None {
        Ok(())
    } else {
        Err(Error::misuse(
            call,
            Misuse::Capturing,
            "the stream is capturing: copies to and from host memory wait for their stream, which a capture cannot",
        ))
    }
}

/// Copies `dst.len()` elements at `src` into `dst` in stream order, and waits for `stream`.
pub(super) fn read_on<T: Pod>(
    stream: &Stream,
    src: CUdeviceptr,
    dst: &mut [T],
    call: &'static str,
) -> Result<()> {
    not_capturing(stream, call)?;
    if dst.is_empty() {
        return Ok(());
    }
    stream.context().bind()?;
    // SAFETY: the caller checked that `src` holds as many elements as `dst`; T: Pod accepts any
    // bytes; the copy is done once the stream is (pageable memory: when the call returns), and
    // a failed wait is a sticky error that stops the context's work.
    unsafe {
        cu!(cuMemcpyDtoHAsync(
            dst.as_mut_ptr().cast(),
            src,
            std::mem::size_of_val(dst),
            stream.as_raw(),
        ))
    }?;
    stream.synchronize()
}

/// Copies `src` to `dst` in stream order, and waits for `stream`.
pub(super) fn write_on<T: Pod>(
    stream: &Stream,
    dst: CUdeviceptr,
    src: &[T],
    call: &'static str,
) -> Result<()> {
    not_capturing(stream, call)?;
    if src.is_empty() {
        return Ok(());
    }
    stream.context().bind()?;
    // SAFETY: the caller checked that `dst` holds as many elements as `src`; `src` is read by
    // the time the stream is done (pageable memory: staged when the call returns).
    unsafe {
        cu!(cuMemcpyHtoDAsync(
            dst,
            src.as_ptr().cast(),
            std::mem::size_of_val(src),
            stream.as_raw(),
        ))
    }?;
    stream.synchronize()
}

impl<T: Pod> DeviceBuffer<T> {
    /// Allocates `len` uninitialised elements (`cuMemAlloc`; none for length 0). Out of memory,
    /// it releases what drops parked (waiting for the device where it must) and retries once.
    pub fn alloc(ctx: &Context, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>("cuMemAlloc", len)?;
        ctx.bind()?;
        let mut ptr = 0;
        if bytes > 0 {
            ctx.inner.alloc_retrying(|| {
                // SAFETY: valid out-pointer; the context is current.
                unsafe { cu!(cuMemAlloc(&mut ptr, bytes)) }
            })?;
        }
        Ok(Self::wrap(ptr, len, &ctx.inner, Backing::Device))
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
    /// inside a graph comes from [`Graph::add_mem_alloc`](crate::Graph::add_mem_alloc), or
    /// inside a step from [`StepScope::alloc`](crate::step::StepScope::alloc). Out of memory it
    /// retries as [`DeviceBuffer::alloc`].
    pub fn alloc_async(stream: &Stream, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>("cuMemAllocAsync", len)?;
        if stream.capture_status()? != super::CaptureStatus::None {
            return Err(Error::misuse(
                "cuMemAllocAsync",
                Misuse::Capturing,
                "the stream is capturing: use Graph::add_mem_alloc for memory that lives inside a graph, or StepScope::alloc inside a step",
            ));
        }
        stream.context().bind()?;
        let mut ptr = 0;
        if bytes > 0 {
            stream.ctx_inner().alloc_retrying(|| {
                // SAFETY: valid out-pointer and stream; the context is current.
                unsafe { cu!(cuMemAllocAsync(&mut ptr, bytes, stream.as_raw())) }
            })?;
        }
        Ok(Self::wrap(
            ptr,
            len,
            stream.ctx_inner(),
            Backing::StreamOrdered(stream.shared()),
        ))
    }

    /// Allocates `len` elements on `stream`, which is capturing: the capture records an
    /// allocation node (`cuMemAllocAsync`), whose memory has the same address in every replay
    /// of the graph and is valid from that node to the free node
    /// [`DeviceBuffer::free_captured`] records. Nothing frees it otherwise: dropping the buffer
    /// (or a graph that keeps it) frees nothing. No retry out of memory: a capture reserves
    /// addresses only, the graph's memory is taken when it is instantiated or launched.
    pub(crate) fn alloc_captured(stream: &Stream, len: usize) -> Result<Self> {
        const CALL: &str = "cuMemAllocAsync";
        let bytes = byte_len::<T>(CALL, len)?;
        if stream.capture_status()? != super::CaptureStatus::Active {
            // Not a misuse: graph-rt calls this only inside a capture it runs.
            return Err(Error::invalid(
                CALL,
                "a graph's allocation is made in an active capture of the stream",
            ));
        }
        stream.context().bind()?;
        let mut ptr = 0;
        if bytes > 0 {
            // SAFETY: valid out-pointer and stream; the context is current. In a capture the
            // call records an allocation node and returns its address.
            unsafe { cu!(cuMemAllocAsync(&mut ptr, bytes, stream.as_raw())) }?;
        }
        Ok(Self::wrap(ptr, len, stream.ctx_inner(), Backing::Graph))
    }

    /// Records the free of a buffer of [`DeviceBuffer::alloc_captured`] into the capture of
    /// `stream` (`cuMemFreeAsync`, a free node ordered after the work captured so far). No
    /// work captured later may use the buffer: its caller frees it where the buffer's last user
    /// drops it.
    pub(crate) fn free_captured(&self, stream: &Stream) -> Result<()> {
        const CALL: &str = "cuMemFreeAsync";
        if self.ptr == 0 {
            return Ok(());
        }
        if !matches!(self.alloc.backing, Backing::Graph) {
            return Err(Error::misuse(
                CALL,
                Misuse::FreedInCapture,
                "the buffer is not a graph allocation of the capture",
            ));
        }
        stream.context().bind()?;
        // SAFETY: the address an allocation node of this capture made (Backing::Graph); the
        // driver records the free node and frees nothing now.
        unsafe { cu!(cuMemFreeAsync(self.ptr, stream.as_raw())) }
    }

    /// Wraps device memory allocated elsewhere. graph-rt never frees it.
    ///
    /// # Safety
    /// `ptr` must point at `len` elements of `T` in memory of `ctx` that stays allocated, and is
    /// not written by anyone else concurrently, for the life of the returned value.
    pub unsafe fn from_raw(ctx: &Context, ptr: CUdeviceptr, len: usize) -> Self {
        Self::wrap(ptr, len, &ctx.inner, Backing::Foreign)
    }

    /// Takes ownership of `len` elements at `ptr`, allocated in `ctx` by `cuMemAlloc` or
    /// `cuMemAllocAsync` and owned by nobody else; freed with `cuMemFree`.
    #[cfg(feature = "cudarc")]
    pub(crate) fn adopt(ctx: &Context, ptr: CUdeviceptr, len: usize) -> Self {
        Self::wrap(ptr, len, &ctx.inner, Backing::Device)
    }

    /// Wraps device memory another library owns, kept allocated while `guard` lives (a
    /// framework's tensor or buffer handle): graph-rt holds the guard until this buffer and
    /// every graph, exec, table and step that uses it are gone and their launches have
    /// finished, then drops it on the context's release thread once the device has finished
    /// all work queued on the context before (its owner may then free the memory at once).
    /// Drop your own handle on the memory whenever you like.
    ///
    /// # Safety
    /// `ptr` must point at `len` elements of `T` in memory of `ctx` that stays allocated while
    /// `guard` lives, and is not written by anyone else concurrently while this value or a
    /// graph using it may run.
    pub unsafe fn from_raw_guarded(
        ctx: &Context,
        ptr: CUdeviceptr,
        len: usize,
        guard: impl std::any::Any + Send + Sync,
    ) -> Self {
        let guard: crate::resource::Resource = Arc::new(guard);
        Self::wrap(ptr, len, &ctx.inner, Backing::Guarded(Some(guard)))
    }

    fn wrap(ptr: CUdeviceptr, len: usize, ctx: &Arc<ContextInner>, backing: Backing) -> Self {
        let alloc = Arc::new(Allocation {
            ptr,
            ctx: ctx.clone(),
            backing,
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

    /// Another handle on the same elements, sharing the allocation (for a step's scope, which
    /// hands its closure the buffer bound for the run).
    /// The buffer of `len` elements at `ptr` inside `alloc` (a handle on it, as
    /// [`DeviceBuffer::alias`] is): for a binding read back from an argument table, whose
    /// address and allocation are this buffer's.
    pub(crate) fn from_parts(ptr: CUdeviceptr, len: usize, alloc: Arc<Allocation>) -> Self {
        Self {
            ptr,
            len,
            alloc,
            _t: PhantomData,
        }
    }

    pub(crate) fn alias(&self) -> Self {
        Self {
            ptr: self.ptr,
            len: self.len,
            alloc: self.alloc.clone(),
            _t: PhantomData,
        }
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

    /// Copies `src` into the buffer (`cuMemcpyHtoD`); lengths must match. Like every copy and
    /// fill here that takes no stream, it first waits for all work of the context, so no kernel
    /// still reads the old contents, and returns once the copy is done on the device, so work
    /// queued afterwards on any stream sees it. Waiting for the whole device costs what the other
    /// streams still have to do: [`DeviceBuffer::write_on`] waits for one stream only.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        same_len("DeviceBuffer::copy_from_host", self.len, src.len())?;
        if self.len == 0 {
            return Ok(());
        }
        self.alloc.quiesced(|| {
            // SAFETY: both sides hold num_bytes bytes; the context is current.
            unsafe {
                cu!(cuMemcpyHtoD(
                    self.ptr,
                    src.as_ptr().cast(),
                    self.num_bytes()
                ))
            }?;
            settle()
        })
    }

    /// Copies the buffer into `dst` (`cuMemcpyDtoH`); lengths must match. First waits for all
    /// work of the context (`cuCtxSynchronize`), on every stream, so the copy never reads what a
    /// kernel has yet to write; that costs whatever the other streams still have to do. Graph-rt's
    /// captures of the context on other threads end first (see [`Context::synchronize`]).
    /// [`DeviceBuffer::copy_to_host_on`] waits for one stream only.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        same_len("DeviceBuffer::copy_to_host", self.len, dst.len())?;
        if self.len == 0 {
            return Ok(());
        }
        self.alloc.quiesced(|| {
            // SAFETY: both sides hold num_bytes bytes; T: Pod accepts any bytes.
            unsafe {
                cu!(cuMemcpyDtoH(
                    dst.as_mut_ptr().cast(),
                    self.ptr,
                    self.num_bytes()
                ))
            }
        })
    }

    /// Copies the buffer into a new `Vec`, after all work of the context (see
    /// [`DeviceBuffer::copy_to_host`]; [`DeviceBuffer::read_on`] waits for one stream only).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Copies the buffer into a new `Vec` in the order of `stream`: after the work queued there
    /// before, and waiting for that stream only (`cuMemcpyDtoHAsync`, `cuStreamSynchronize`).
    /// Work on other streams that writes the buffer must be ordered before it (an [`Event`](crate::Event)),
    /// as for a kernel launched on `stream`. Refused on a capturing stream.
    pub fn read_on(&self, stream: &Stream) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host_on(stream, &mut v)?;
        Ok(v)
    }

    /// Copies the buffer into `dst` in the order of `stream` (see [`DeviceBuffer::read_on`]);
    /// lengths must match.
    pub fn copy_to_host_on(&self, stream: &Stream, dst: &mut [T]) -> Result<()> {
        const CALL: &str = "DeviceBuffer::copy_to_host_on";
        same_len(CALL, self.len, dst.len())?;
        read_on(stream, self.ptr, dst, CALL)
    }

    /// Copies `src` into the buffer in the order of `stream` (`cuMemcpyHtoDAsync`), and waits
    /// for that stream only; lengths must match. Work queued on `stream` afterwards sees the new
    /// contents; work on other streams must be ordered after it. Refused on a capturing stream.
    pub fn write_on(&mut self, stream: &Stream, src: &[T]) -> Result<()> {
        const CALL: &str = "DeviceBuffer::write_on";
        same_len(CALL, self.len, src.len())?;
        write_on(stream, self.ptr, src, CALL)
    }

    /// A view of elements `range` of the buffer, which keeps the allocation alive (see
    /// [`DeviceView`]); a range not within the buffer is a
    /// [`Misuse::OutOfRange`](crate::Misuse::OutOfRange).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceView<T>> {
        let range = bounds("DeviceBuffer::slice", range, self.len)?;
        Ok(view(self.ptr, &self.alloc, range))
    }

    /// Copies `src` into the buffer (`cuMemcpyDtoD`); lengths must match. Waits for all work
    /// of the context first, and returns once done.
    pub fn copy_from_device(&mut self, src: &DeviceBuffer<T>) -> Result<()> {
        same_len("DeviceBuffer::copy_from_device", self.len, src.len)?;
        if self.len == 0 {
            return Ok(());
        }
        let copy = || {
            self.alloc.quiesced(|| {
                // SAFETY: both allocations hold num_bytes bytes; `&mut self` excludes overlap.
                unsafe { cu!(cuMemcpyDtoD(self.ptr, src.ptr, self.num_bytes())) }?;
                settle()
            })
        };
        if Arc::ptr_eq(&self.alloc.ctx, &src.alloc.ctx) {
            copy()
        } else {
            src.alloc.quiesced(copy)
        }
    }

    /// Sets every byte to zero (`cuMemsetD8`).
    pub fn fill_zero(&mut self) -> Result<()> {
        self.fill_bytes(0)
    }

    /// Sets every byte to `value` (`cuMemsetD8`). Waits for all work of the context first, and
    /// returns once done.
    pub fn fill_bytes(&mut self, value: u8) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        self.alloc.quiesced(|| {
            // SAFETY: the allocation holds num_bytes bytes.
            unsafe { cu!(cuMemsetD8(self.ptr, value, self.num_bytes())) }?;
            settle()
        })
    }

    /// Sets every 32-bit word to `value` (`cuMemsetD32`), after all work of the context, and
    /// returns once done, e.g. `f32::NAN.to_bits()` to poison
    /// an `f32` buffer. The size of `T` must be a multiple of 4.
    pub fn fill_u32(&mut self, value: u32) -> Result<()> {
        if std::mem::size_of::<T>() % 4 != 0 {
            return Err(Error::misuse(
                "DeviceBuffer::fill_u32",
                Misuse::NotMultiple { multiple: 4 },
                format!(
                    "the element size {} is not a multiple of 4 bytes",
                    std::mem::size_of::<T>()
                ),
            ));
        }
        if self.len == 0 {
            return Ok(());
        }
        self.alloc.quiesced(|| {
            // SAFETY: the allocation holds num_bytes / 4 words.
            unsafe { cu!(cuMemsetD32(self.ptr, value, self.num_bytes() / 4)) }?;
            settle()
        })
    }

    /// Queues a zero fill on `stream` (`cuMemsetD8Async`). Inside a capture, use
    /// [`CaptureScope::fill_zero`](crate::CaptureScope::fill_zero), which keeps the buffer alive.
    ///
    /// # Safety
    /// The buffer must outlive the fill: dropping it keeps the memory until queued work is done
    /// only when it was allocated by [`DeviceBuffer::alloc`] (freed by `cuMemFree`, which waits
    /// for the device, on the context's release thread) or on `stream` itself
    /// ([`DeviceBuffer::alloc_async`]); and if `stream` is capturing, for every replay.
    pub unsafe fn fill_zero_async(&mut self, stream: &Stream) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        stream.context().bind()?;
        // SAFETY: the allocation holds num_bytes bytes; the caller keeps it alive.
        unsafe {
            cu!(cuMemsetD8Async(
                self.ptr,
                0,
                self.num_bytes(),
                stream.as_raw()
            ))
        }
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
        unsafe {
            cu!(cuMemcpyDtoDAsync(
                self.ptr,
                src.ptr,
                self.num_bytes(),
                stream.as_raw()
            ))
        }
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
        unsafe {
            cu!(cuMemcpyHtoDAsync(
                self.ptr,
                src.ptr.cast(),
                self.num_bytes(),
                stream.as_raw()
            ))
        }
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
        unsafe {
            cu!(cuMemcpyDtoHAsync(
                dst.ptr.cast(),
                self.ptr,
                self.num_bytes(),
                stream.as_raw()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_beyond_usize_are_named_misuses() {
        assert_eq!(byte_len::<u64>("cuMemAlloc", 3).unwrap(), 24);
        let e = byte_len::<u64>("cuMemAlloc", usize::MAX / 4).unwrap_err();
        assert_eq!(e.call(), Some("cuMemAlloc"));
        assert_eq!(e.misuse_kind(), Some(&Misuse::TooLarge { what: "bytes" }));
    }
}
