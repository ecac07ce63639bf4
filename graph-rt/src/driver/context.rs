//! Contexts: the primary context of a device, and which context is current on a thread.

use std::sync::Arc;

use cuda_sys::CUcontext;
use parking_lot::Mutex;

use super::release::ReleaseQueue;
use super::Device;
use crate::error::{check, Error, Result};

/// A CUDA context. Cloning is cheap and shares it; the primary context is released when the last
/// clone (and every stream, buffer and module made from it) is gone.
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
    pub(crate) released: ReleaseQueue,
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
        check("cuDevicePrimaryCtxRetain", unsafe {
            cuda_sys::cuDevicePrimaryCtxRetain(&mut raw, device.as_raw())
        })?;
        let ctx = Self {
            inner: Arc::new(ContextInner {
                raw,
                device,
                primary: true,
                deferred: Mutex::new(Vec::new()),
                released: ReleaseQueue::new(raw),
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
                released: ReleaseQueue::new(raw),
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

    /// Waits for all work of this context (`cuCtxSynchronize`), then releases everything drops
    /// parked (see [`Context::poll`]).
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        let mark = self.inner.released.mark();
        // SAFETY: the context is current.
        check("cuCtxSynchronize", unsafe { cuda_sys::cuCtxSynchronize() })?;
        self.inner.released.synchronized(mark);
        Ok(())
    }

    /// Releases on this thread what drops parked (an exec dropped while it ran keeps what its
    /// nodes use until its last launch has finished) and the device is done with, without
    /// waiting. Returns how many parked batches remain. The context's release thread does the
    /// same in the background; [`Context::synchronize`] releases everything parked before it.
    /// Nothing is released while a global-mode capture of graph-rt runs (freeing memory would
    /// invalidate it).
    pub fn poll(&self) -> Result<usize> {
        self.bind()?;
        Ok(self.inner.released.poll())
    }

    /// Free and total device memory in bytes (`cuMemGetInfo`).
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        let (mut free, mut total) = (0, 0);
        // SAFETY: valid out-pointers; the context is current.
        check("cuMemGetInfo", unsafe {
            cuda_sys::cuMemGetInfo(&mut free, &mut total)
        })?;
        Ok((free, total))
    }

    /// Takes the errors that `Drop` implementations met while releasing resources of this
    /// context. Drop never panics; it records the failure here (and logs it with `tracing`).
    pub fn take_deferred_errors(&self) -> Vec<Error> {
        std::mem::take(&mut *self.inner.deferred.lock())
    }
}

/// The context current on this thread, as a raw handle (null when none).
pub fn current_raw() -> Result<CUcontext> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    check("cuCtxGetCurrent", unsafe {
        cuda_sys::cuCtxGetCurrent(&mut raw)
    })?;
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
            check("cuCtxSetCurrent", unsafe {
                cuda_sys::cuCtxSetCurrent(self.raw)
            })?;
        }
        Ok(())
    }

    /// Records an error met in a `Drop`, where it cannot be returned.
    pub(crate) fn record(&self, result: Result<()>) {
        if let Err(e) = result {
            tracing::error!(error = %e, "graph-rt: error while releasing a CUDA resource");
            self.deferred.lock().push(e);
        }
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // Teardown: nothing parked may outlive the context; wait for the device first.
        self.released.teardown(|| {
            let r = self.bind().and_then(|_| {
                // SAFETY: the context is alive and current.
                check("cuCtxSynchronize", unsafe { cuda_sys::cuCtxSynchronize() })
            });
            if let Err(e) = r {
                tracing::error!(error = %e, "graph-rt: could not synchronize a context being torn down");
            }
        });
        if self.primary {
            // SAFETY: we retained the primary context of this device in `Context::new`.
            let r = check("cuDevicePrimaryCtxRelease", unsafe {
                cuda_sys::cuDevicePrimaryCtxRelease(self.device.as_raw())
            });
            if let Err(e) = r {
                tracing::error!(error = %e, "graph-rt: could not release the primary context");
            }
        }
    }
}
