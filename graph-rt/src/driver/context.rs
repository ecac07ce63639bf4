//! Contexts: the primary context of a device, and which context is current on a thread.

use std::sync::Arc;

use graph_rt_sys::{CUcontext, CUmodule, CUresult};
use parking_lot::Mutex;

use super::call::cu;
use super::lifetime::{Reclaim, Tracker};
use super::{Device, Module};
use crate::error::{Error, Result};

/// The device's graph memory, bytes ([`Context::graph_memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct GraphMemory {
    /// Held by graphs' allocations now.
    pub used: u64,
    /// Reserved from the driver for graphs now (what a trim can return, less `used`).
    pub reserved: u64,
    /// The most held at once.
    pub used_high: u64,
    /// The most reserved at once.
    pub reserved_high: u64,
}

/// A CUDA context. Cloning is cheap and shares it; the primary context is released when the last
/// clone (and every stream, buffer and module made from it) is gone.
///
/// What drops park (an exec dropped while it runs, the buffers its nodes use, a table) is
/// released by the context's release thread as soon as the device is done with it, with no call
/// needed: [`Context::poll`] and [`Context::synchronize`] only do it sooner, on the calling
/// thread. An allocation that fails for lack of memory first releases what is parked (waiting
/// for the device where it must) and tries once more. Once the last handle is gone the context
/// lives on until its release thread has released the last parked batch, then stops the thread
/// and is released; at process exit everything still parked is released and the release threads
/// are stopped before the driver goes.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

pub(crate) struct ContextInner {
    raw: CUcontext,
    device: Device,
    primary: bool,
    deferred: Mutex<Vec<Error>>,
    // What drops parked until the device is done with it.
    pub(crate) tracker: Tracker,
    // Modules loaded once per context (`cached_cubin`), by key: raw handles, so that the cache
    // holds no reference to the context; unloaded in its teardown.
    modules: Mutex<Vec<(&'static str, usize)>>,
    // The foreign owner of a wrapped context (a cudarc `CudaContext`), kept alive with it.
    _owner: Option<crate::resource::Resource>,
}

// SAFETY: a CUcontext may be used from any thread; graph-rt binds it before each use.
unsafe impl Send for ContextInner {}
// SAFETY: as above; the only mutable state is behind a mutex.
unsafe impl Sync for ContextInner {}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("raw", &self.inner.raw)
            .field("device", &self.inner.device.ordinal())
            .finish()
    }
}

impl Context {
    /// Retains the primary context of device `ordinal` and makes it current on this thread.
    pub fn new(ordinal: usize) -> Result<Self> {
        let device = Device::get(ordinal)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device handle.
        unsafe { cu!(cuDevicePrimaryCtxRetain(&mut raw, device.as_raw())) }?;
        let ctx = Self {
            inner: Arc::new(ContextInner {
                raw,
                device,
                primary: true,
                deferred: Mutex::new(Vec::new()),
                tracker: Tracker::new(raw),
                modules: Mutex::new(Vec::new()),
                _owner: None,
            }),
        };
        ctx.bind()?;
        Ok(ctx)
    }

    /// Wraps a context made elsewhere (PyTorch, cudarc, …). graph-rt never destroys or releases it.
    ///
    /// # Safety
    /// `raw` must be a valid context of `device` that outlives the returned value and everything
    /// made from it.
    pub unsafe fn from_raw(raw: CUcontext, device: Device) -> Self {
        // SAFETY: forwarded.
        unsafe { Self::from_raw_owned(raw, device, None) }
    }

    /// As [`Context::from_raw`], keeping `owner` alive as long as the context is used.
    ///
    /// # Safety
    /// As [`Context::from_raw`], while `owner` lives.
    pub(crate) unsafe fn from_raw_owned(
        raw: CUcontext,
        device: Device,
        owner: Option<crate::resource::Resource>,
    ) -> Self {
        Self {
            inner: Arc::new(ContextInner {
                raw,
                device,
                primary: false,
                deferred: Mutex::new(Vec::new()),
                tracker: Tracker::new(raw),
                modules: Mutex::new(Vec::new()),
                _owner: owner,
            }),
        }
    }

    /// The raw `CUcontext`. Do not destroy it, and do not pop it while graph-rt objects use it.
    pub fn as_raw(&self) -> CUcontext {
        self.inner.raw
    }

    /// The device of this context.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// Makes this context current on the calling thread, unless it already is.
    #[inline]
    pub fn bind(&self) -> Result<()> {
        self.inner.bind()
    }

    /// Whether this context is current on the calling thread.
    pub fn is_current(&self) -> Result<bool> {
        Ok(current_raw()? == self.inner.raw)
    }

    /// Waits for all work of this context (`cuCtxSynchronize`), then releases on this thread
    /// everything drops parked before the call (see [`Context::poll`]). Not needed for the
    /// release itself, which the release thread does once the device is done.
    ///
    /// CUDA refuses a whole-context wait while any stream of the context captures (and, during
    /// a global-mode capture, in any context), and the refusal breaks that capture: so graph-rt's
    /// captures of this context, and its global-mode captures of any context, on other threads
    /// end first (after 30 s of waiting for them, [`Error::Timeout`](crate::Error::Timeout)), and
    /// none begins in this context meanwhile. On a thread that captures itself, the driver
    /// refuses the call at once. So do the waits of [`DeviceBuffer::to_vec`](crate::DeviceBuffer::to_vec)
    /// and the other copies and fills that wait for the whole context.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        let mark = self.inner.tracker.mark();
        // graph-rt's captures of the context on other threads end first: this would break them.
        super::whole_context_wait(self.inner.raw as usize, || {
            // SAFETY: the context is current.
            unsafe { cu!(cuCtxSynchronize()) }
        })?;
        self.inner.tracker.synchronized(mark);
        Ok(())
    }

    /// Releases on this thread what drops parked (an exec dropped while it ran keeps what its
    /// nodes use until its last launch has finished) and the device is done with, without
    /// waiting. Returns how many parked batches remain. The context's release thread does the
    /// same in the background, as soon as each batch's fence has passed, so calling this is never
    /// needed for the memory to come back; [`Context::synchronize`] releases everything parked
    /// before it.
    /// Nothing is released while a global-mode capture of graph-rt runs (freeing memory would
    /// invalidate it).
    pub fn poll(&self) -> Result<usize> {
        self.bind()?;
        Ok(self.inner.tracker.poll())
    }

    /// Free and total device memory in bytes (`cuMemGetInfo`).
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        let (mut free, mut total) = (0, 0);
        // SAFETY: valid out-pointers; the context is current.
        unsafe { cu!(cuMemGetInfo(&mut free, &mut total)) }?;
        Ok((free, total))
    }

    /// The device's graph memory: what graphs' allocation nodes (a framework's allocations
    /// inside a step) hold now and at most since the device's start, in use and reserved from
    /// the driver (`cuDeviceGetGraphMemAttribute`).
    pub fn graph_memory(&self) -> Result<GraphMemory> {
        use graph_rt_sys::CUgraphMem_attribute as A;
        self.bind()?;
        let device = self.device().as_raw();
        let read = |attribute: A| -> Result<u64> {
            let mut value: u64 = 0;
            // SAFETY: the device of the current context; these attributes are 64-bit values.
            unsafe {
                cu!(cuDeviceGetGraphMemAttribute(
                    device,
                    attribute,
                    (&mut value as *mut u64).cast()
                ))
            }?;
            Ok(value)
        };
        Ok(GraphMemory {
            used: read(A::CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)?,
            reserved: read(A::CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)?,
            used_high: read(A::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)?,
            reserved_high: read(A::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)?,
        })
    }

    /// What the device's current stream-ordered memory pool (the one `cuMemAllocAsync` takes
    /// from, cudarc's allocations and [`DeviceBuffer::alloc_async`] included) lends now, and
    /// the most it lent at once since the last [`Context::reset_pool_high`]
    /// (`cuMemPoolGetAttribute`), bytes.
    ///
    /// [`DeviceBuffer::alloc_async`]: crate::DeviceBuffer::alloc_async
    pub fn pool_used(&self) -> Result<(u64, u64)> {
        use graph_rt_sys::CUmemPool_attribute as A;
        let pool = self.current_pool()?;
        let read = |attribute: A| -> Result<u64> {
            let mut value: u64 = 0;
            // SAFETY: the device's pool; these attributes are 64-bit values.
            unsafe {
                cu!(cuMemPoolGetAttribute(
                    pool,
                    attribute,
                    (&mut value as *mut u64).cast()
                ))
            }?;
            Ok(value)
        };
        Ok((
            read(A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            read(A::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
        ))
    }

    /// Resets the high-water mark [`Context::pool_used`] reads to what the pool lends now.
    pub fn reset_pool_high(&self) -> Result<()> {
        use graph_rt_sys::CUmemPool_attribute as A;
        let pool = self.current_pool()?;
        let mut zero: u64 = 0;
        // SAFETY: the device's pool; the attribute takes a 64-bit value, which must be 0.
        unsafe {
            cu!(cuMemPoolSetAttribute(
                pool,
                A::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                (&mut zero as *mut u64).cast()
            ))
        }
    }

    /// The device's current memory pool (`cuDeviceGetMemPool`).
    fn current_pool(&self) -> Result<graph_rt_sys::CUmemoryPool> {
        self.bind()?;
        let mut pool = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device.
        unsafe { cu!(cuDeviceGetMemPool(&mut pool, self.device().as_raw())) }?;
        Ok(pool)
    }

    /// Returns the memory of the device's current memory pool that no allocation holds (what
    /// `cuMemFreeAsync` freed, cudarc's drops included) to the driver (`cuMemPoolTrimTo`): the
    /// pool keeps freed memory for later allocations until a synchronize finds it above its
    /// release threshold. graph-rt does it itself before retrying an allocation out of memory.
    pub fn trim_pool(&self) -> Result<()> {
        self.inner.trim_pool()
    }

    /// Returns the graph memory no exec holds any more to the driver (`cuDeviceGraphMemTrim`);
    /// graph-rt does it itself once a dropped exec of a graph with allocation nodes has
    /// finished its last launch.
    pub fn trim_graph_memory(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: the device of the current context.
        unsafe { cu!(cuDeviceGraphMemTrim(self.device().as_raw())) }
    }

    /// Takes the errors that `Drop` implementations met while releasing resources of this
    /// context. Drop never panics; it records the failure here (and logs it with `tracing`).
    pub fn take_deferred_errors(&self) -> Vec<Error> {
        std::mem::take(&mut *self.inner.deferred.lock())
    }

    /// How many batches are parked on this context or being released (for tests).
    #[cfg(test)]
    pub(crate) fn parked_batches(&self) -> usize {
        self.inner.tracker.parked()
    }

    /// How many modules [`Context::cached_cubin`] keeps loaded (for tests).
    #[cfg(test)]
    pub(crate) fn cached_modules(&self) -> usize {
        self.inner.modules.lock().len()
    }

    /// The module of cubin `image`, loaded in this context on the first call for `key` and
    /// kept until the context is torn down; later calls return the same module. The cache holds
    /// the raw module, not the context: the returned [`Module`] (and its functions) keep the
    /// context alive, and the context unloads the module in its teardown.
    ///
    /// # Safety
    /// `image` must be a complete, well-formed cubin (as for [`Module::from_cubin`]), the same
    /// for every call with `key`.
    pub(crate) unsafe fn cached_cubin(&self, key: &'static str, image: &[u8]) -> Result<Module> {
        const CALL: &str = "cuModuleLoadData";
        let mut modules = self.inner.modules.lock();
        if let Some(&(_, raw)) = modules.iter().find(|(k, _)| *k == key) {
            // SAFETY: loaded in this context below; unloaded only in its teardown, after every
            // Module (each holds the context) is gone.
            return Ok(unsafe { Module::from_raw(self, raw as CUmodule) });
        }
        if !image.starts_with(b"\x7fELF") {
            // Not a misuse: the images are graph-rt's own (shipped cubins), so this is its bug.
            return Err(Error::invalid(
                CALL,
                format!("the image for {key} is not a cubin (wrong magic number)"),
            ));
        }
        // The driver reads the image through typed headers: give it 8-byte-aligned memory.
        let mut aligned = vec![0u64; image.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut aligned)[..image.len()].copy_from_slice(image);
        self.bind()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer; an aligned copy of a complete cubin (the caller's promise);
        // the context is current.
        unsafe { cu!(cuModuleLoadData(&mut raw, aligned.as_ptr().cast())) }?;
        modules.push((key, raw as usize));
        // SAFETY: as above.
        Ok(unsafe { Module::from_raw(self, raw) })
    }
}

/// The context current on this thread, as a raw handle (null when none).
pub fn current_raw() -> Result<CUcontext> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    unsafe { cu!(cuCtxGetCurrent(&mut raw)) }?;
    Ok(raw)
}

impl ContextInner {
    pub(crate) fn raw(&self) -> CUcontext {
        self.raw
    }

    #[inline]
    pub(crate) fn bind(&self) -> Result<()> {
        if current_raw()? != self.raw {
            // SAFETY: the context is alive (we hold it).
            unsafe { cu!(cuCtxSetCurrent(self.raw)) }?;
        }
        Ok(())
    }

    /// Runs `alloc` (with this context current); when it fails for lack of memory
    /// (`CUDA_ERROR_OUT_OF_MEMORY`), releases what drops parked, waiting for the device where
    /// the memory is still in use (on the release thread, never inside a capture: see
    /// `Tracker::reclaim`), trims the device's memory pool, and runs `alloc` once more.
    /// If that fails too, the first error is returned.
    pub(crate) fn alloc_retrying<T>(&self, mut alloc: impl FnMut() -> Result<T>) -> Result<T> {
        let first = match alloc() {
            Err(e) if e.code() == Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY) => e,
            r => return r,
        };
        match self.tracker.reclaim() {
            Reclaim::Released => {}
            Reclaim::Nothing => return Err(first),
            Reclaim::TimedOut(after) => {
                return Err(Error::Timeout {
                    call: first.call().unwrap_or("cuMemAlloc"),
                    after,
                    reason: format!(
                        "{first}; the memory graph-rt holds for work in flight was not released: that work did not finish (a kernel that never ends, a collective whose peer died?)"
                    ),
                })
            }
        }
        // Releases on this thread may have bound another context.
        self.bind()?;
        // Best effort: the retried allocation says whether it helped.
        let _ = self.trim_pool();
        alloc().map_err(|_| {
            first.with_hint(
                "the device is out of memory even after releasing what drops parked: free buffers or allocate less",
            )
        })
    }

    /// See [`Context::trim_pool`].
    fn trim_pool(&self) -> Result<()> {
        self.bind()?;
        let mut pool = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device.
        unsafe { cu!(cuDeviceGetMemPool(&mut pool, self.device.as_raw())) }?;
        // SAFETY: the device's pool; trimming keeps what backs live allocations.
        unsafe { cu!(cuMemPoolTrimTo(pool, 0)) }
    }

    /// Records an error met in a `Drop`, where it cannot be returned.
    pub(crate) fn record(&self, result: Result<()>) {
        if let Err(e) = result {
            tracing::error!(error = %e, "graph-rt: error while releasing a CUDA resource");
            self.deferred.lock().push(e);
        }
    }

    /// From a `Drop`: parks `parked` on this context's tracker until the work queued on
    /// `stream` so far has finished. Never blocks; an error is recorded (see
    /// [`ContextInner::record`]), and when the context cannot even be made current nothing
    /// can tell when that work ends, so `parked` is leaked rather than freed under the
    /// device's feet (`park` leaks it when it fails, binding the stream's context included).
    pub(crate) fn park_from_drop(
        &self,
        stream: &Arc<super::stream::StreamInner>,
        parked: Vec<super::Parked>,
    ) {
        let r = self.tracker.park(stream, parked);
        self.record(r);
    }
}

impl Drop for ContextInner {
    /// Teardown, once nothing holds the context any more (every parked batch holds it, so none
    /// that does is left): stops the release thread, releases what is still parked (waiting for
    /// its fences), unloads the cached modules, then releases the primary context. Runs on the
    /// thread that dropped the last handle, on the release thread when the last holder was a
    /// parked batch, or in the exit hook.
    fn drop(&mut self) {
        self.tracker.teardown();
        let modules = std::mem::take(&mut *self.modules.lock());
        if !modules.is_empty() {
            let r = self.bind();
            for (key, raw) in modules {
                let r = r.clone().and_then(|_| {
                    // SAFETY: loaded by `cached_cubin` in this context; every Module of it held
                    // the context, so none is left.
                    unsafe { cu!(cuModuleUnload(raw as CUmodule)) }
                });
                if let Err(e) = r {
                    tracing::error!(error = %e, key, "graph-rt: could not unload a cached module");
                }
            }
        }
        if self.primary {
            // SAFETY: we retained the primary context of this device in `Context::new`.
            let r = unsafe { cu!(cuDevicePrimaryCtxRelease(self.device.as_raw())) };
            if let Err(e) = r {
                tracing::error!(error = %e, "graph-rt: could not release the primary context");
            }
        }
    }
}
