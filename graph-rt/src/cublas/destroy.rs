//! Destroying a cuBLAS handle once nothing can use it any more: what `Cublas`'s drop parks, and
//! the re-arming of graph-rt's exit hook after cuBLAS's first handle and GEMM.

#[cfg(test)]
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::sys::{self, CublasLib, Handle};
use crate::driver::{whole_context_wait, Context, ContextInner, StreamInner};

/// Whether the process made its first cuBLAS handle, and ran its first GEMM.
pub(super) static FIRST_CREATE: AtomicBool = AtomicBool::new(false);
pub(super) static FIRST_GEMM: AtomicBool = AtomicBool::new(false);

/// The first time `first` is passed: registers graph-rt's exit hook again, so that it runs
/// before the exit handlers cuBLAS registered so far (C++ static destructors of what it sets up
/// lazily, its runtime's teardown), which load nothing (the hook is registered again after each
/// library load by itself). After them cuBLAS may be torn down, and a `cublasDestroy_v2` of a
/// handle still parked at exit may no longer free the device memory `cublasCreate_v2` took.
pub(super) fn after_first(first: &AtomicBool, ctx: &ContextInner) {
    if !first.load(Ordering::Relaxed) && !first.swap(true, Ordering::AcqRel) {
        ctx.tracker.arm_exit_hook_again();
    }
}

/// A cuBLAS handle to destroy (`cublasDestroy_v2`), parked by [`Cublas`]'s drop: the call
/// waits for the device, which no capture allows. `lib` is the process-wide cuBLAS
/// (`sys::library`, a `static` never dropped): it is never unloaded, so its code outlives every
/// parked handle, also at exit.
pub(super) struct HandleToDestroy {
    pub(super) handle: Handle,
    pub(super) lib: &'static CublasLib,
    pub(super) ctx: Context,
    // The handle's stream, alive until the handle is destroyed.
    pub(super) _stream: Arc<StreamInner>,
}

// SAFETY: a cuBLAS handle may be destroyed from any thread once nothing else uses it (the
// `Cublas` that used it is gone); the other fields are Send.
unsafe impl Send for HandleToDestroy {}

/// Handles destroyed without error, for the GPU tests to see the deferred destroys happen, and
/// where.
#[cfg(test)]
pub(crate) static DESTROYED: Destroyed = Destroyed {
    count: std::sync::atomic::AtomicUsize::new(0),
    log: parking_lot::Mutex::new(Vec::new()),
};

/// See [`DESTROYED`].
#[cfg(test)]
pub(crate) struct Destroyed {
    count: std::sync::atomic::AtomicUsize,
    // Each handle destroyed (its address) and the name of the thread that destroyed it.
    log: parking_lot::Mutex<Vec<(usize, Option<String>)>>,
}

#[cfg(test)]
impl Destroyed {
    /// How many handles were destroyed without error.
    pub(crate) fn load(&self, order: Ordering) -> usize {
        self.count.load(order)
    }

    /// For each destroy of a handle at `handle`'s address (a [`Cublas::as_raw`]; cuBLAS may
    /// reuse the address of a destroyed handle), in order, the name of the thread that did it.
    pub(crate) fn destroys_of(&self, handle: *mut c_void) -> Vec<Option<String>> {
        let log = self.log.lock();
        log.iter()
            .filter(|(h, _)| *h == handle as usize)
            .map(|(_, t)| t.clone())
            .collect()
    }

    fn note(&self, handle: Handle) {
        let thread = std::thread::current().name().map(str::to_owned);
        self.log.lock().push((handle as usize, thread));
        self.count.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for HandleToDestroy {
    fn drop(&mut self) {
        let inner = &self.ctx.inner;
        let r = inner.bind().and_then(|_| {
            // cublasDestroy waits for the whole device, which breaks a capture of the context
            // on another thread: graph-rt's end first (past the patience, the handle leaks).
            whole_context_wait(inner.raw() as usize, || {
                // SAFETY: the handle `Cublas::new` created, used by nothing any more; the work
                // it queued has finished (the parked batch's fence) or is waited for by the call.
                sys::check_status("cublasDestroy_v2", unsafe {
                    (self.lib.destroy)(self.handle)
                })
            })
        });
        if r.is_ok() {
            tracing::debug!(handle = ?self.handle, "graph-rt: cuBLAS handle destroyed");
            #[cfg(test)]
            DESTROYED.note(self.handle);
        }
        inner.record(r);
    }
}
