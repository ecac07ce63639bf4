//! The allocation behind device buffers and views: where its memory comes from (its backing)
//! and how it is released once its last user is gone.

use std::sync::Arc;

use graph_rt_sys::CUdeviceptr;

use super::call::cu;
use super::capture_gate::whole_context_wait;
use super::{Context, ContextInner, StreamInner};
use crate::error::{Error, Misuse, Result};

/// Where an allocation's memory comes from, and so how it is released (the `Drop` of
/// [`Allocation`]). Nothing outside this module sees the backing: launches, captures and exec
/// updates see a device address and an `Arc<Allocation>` to keep alive, so a new backing is a new
/// variant here and a constructor, not a change to the launch path. Virtual-memory-mapped memory
/// (`cuMemCreate` + `cuMemMap`, which can be unmapped while paused and mapped back at the same
/// address) will be one: a variant holding the physical handle and the reserved range, released
/// by `cuMemUnmap`, `cuMemRelease` and `cuMemAddressFree`.
pub(super) enum Backing {
    /// `cuMemAlloc`; freed with `cuMemFree`, which waits for the device first.
    Device,
    /// `cuMemAllocAsync` from the device's stream-ordered pool, on this stream; freed with
    /// `cuMemFreeAsync` on it, ordered after the work queued there.
    StreamOrdered(Arc<StreamInner>),
    /// Memory of a graph's allocation node: a stream-ordered allocation a capture recorded
    /// (see [`DeviceBuffer::alloc_captured`](super::DeviceBuffer::alloc_captured)). The graph
    /// frees it in each replay, by the free node its capture recorded; never freed here.
    Graph,
    /// Not ours (see [`DeviceBuffer::from_raw`](super::DeviceBuffer::from_raw)): never freed.
    Foreign,
    /// Not ours, kept allocated by its owner's guard (see [`DeviceBuffer::from_raw_guarded`](super::DeviceBuffer::from_raw_guarded)),
    /// dropped on the context's release thread once the last user is gone.
    Guarded(Option<crate::resource::Resource>),
}

/// One device allocation. Buffers and views hold it in an `Arc`, and so do the graphs and execs
/// whose nodes use it: it is freed when the last of them is gone.
pub(crate) struct Allocation {
    pub(super) ptr: CUdeviceptr,
    pub(super) ctx: Arc<ContextInner>,
    pub(super) backing: Backing,
}

impl Allocation {
    /// Whether the allocation belongs to `ctx`.
    pub(crate) fn in_context(&self, ctx: &Context) -> bool {
        Arc::ptr_eq(&self.ctx, &ctx.inner) || self.ctx.raw() == ctx.as_raw()
    }

    /// Whether the memory is a graph's own (an allocation node's), valid during its replays only.
    pub(crate) fn is_graph_memory(&self) -> bool {
        matches!(self.backing, Backing::Graph)
    }

    /// The stream a stream-ordered allocation was made on and is freed on (`None`: memory of
    /// `cuMemAlloc`, or not graph-rt's).
    pub(crate) fn ordered_on(&self) -> Option<&Arc<StreamInner>> {
        match &self.backing {
            Backing::StreamOrdered(stream) => Some(stream),
            _ => None,
        }
    }

    /// Waits for all work of the allocation's context (`cuCtxSynchronize`), on every stream,
    /// then runs `then`: what the unordered copies and fills do, so that they never race with a
    /// kernel (and a stream-ordered allocation has been made on its stream). Graph-rt's captures
    /// of the context on other threads end first, and none begins before `then` has returned
    /// (see `capture_gate`): `then` may wait for the legacy stream, as they do.
    pub(super) fn quiesced<R>(&self, then: impl FnOnce() -> Result<R>) -> Result<R> {
        self.ctx.bind()?;
        whole_context_wait(self.ctx.raw() as usize, || {
            // SAFETY: the context is current.
            unsafe { cu!(cuCtxSynchronize()) }?;
            then()
        })
    }
}

/// Device memory from `cuMemAlloc`, freed when dropped: on the context's release thread, since
/// `cuMemFree` waits for the device.
struct DeviceMemory(CUdeviceptr, Arc<ContextInner>);

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        let r = self.1.bind().and_then(|_| {
            // SAFETY: we allocated the memory with cuMemAlloc and nothing else refers to it;
            // cuMemFree synchronizes with the device before freeing, so no queued work still
            // uses it.
            unsafe { cu!(cuMemFree(self.0)) }
        });
        self.1.record(r);
    }
}

/// A foreign owner's guard, dropped once the device has finished the work queued on its
/// context so far (on the release thread): its owner may free the memory at once, without
/// waiting as `cuMemFree` does.
struct GuardAfterDevice(Arc<ContextInner>, Option<crate::resource::Resource>);

impl Drop for GuardAfterDevice {
    /// Where the wait fails (or gives up on a capture that does not end), the guard is leaked:
    /// its owner would free memory the device may still use.
    fn drop(&mut self) {
        let mut guard = self.1.take();
        let r = self.0.bind().and_then(|_| {
            whole_context_wait(self.0.raw() as usize, || {
                // SAFETY: the context is current.
                unsafe { cu!(cuCtxSynchronize()) }?;
                // Dropped before any capture of the context begins: the owner's drop may
                // enqueue on one of its streams (candle's tensor frees in stream order), which
                // a capture beginning meanwhile would take in.
                drop(guard.take());
                Ok(())
            })
        });
        if r.is_err() {
            std::mem::forget(guard);
        }
        self.0.record(r);
    }
}

std::thread_local! {
    /// Whether a stream-ordered buffer was dropped on this thread while its stream captured
    /// (see [`take_freed_in_capture`]).
    static FREED_IN_CAPTURE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a stream-ordered buffer was dropped on this thread while its stream captured, since
/// the last call: the capture then holds no free of it, and whatever of the capture reads it
/// reads memory freed after the capture (a step's capture is refused for it).
pub(crate) fn take_freed_in_capture() -> bool {
    FREED_IN_CAPTURE.with(|f| f.replace(false))
}

impl Drop for Allocation {
    /// Never blocks: memory of `cuMemAlloc` is freed on the context's release thread (after the
    /// device is done with it), stream-ordered memory in stream order.
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        let r = match &mut self.backing {
            Backing::Foreign | Backing::Graph => return,
            Backing::Guarded(guard) => {
                if let Some(guard) = guard.take() {
                    let after = GuardAfterDevice(self.ctx.clone(), Some(guard));
                    self.ctx.tracker.release_later(Box::new(after));
                }
                return;
            }
            Backing::Device => {
                let memory = DeviceMemory(self.ptr, self.ctx.clone());
                return self.ctx.tracker.release_later(Box::new(memory));
            }
            Backing::StreamOrdered(stream) => self.ctx.bind().and_then(|_| {
                // A free on a capturing stream would be recorded as a free node of memory the
                // capture did not allocate, which the driver refuses (breaking the capture):
                // freed by `cuMemFree` on the release thread instead, which runs once graph-rt's
                // captures have ended (and waits for the device). A misuse where the user's
                // code dropped it (a step's closure dropping a buffer made before the step);
                // the release thread's drop of what a graph kept is no one's.
                if stream.capture_status()?
                    != graph_rt_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
                {
                    // After the capture and the work queued on the stream before it.
                    let memory = DeviceMemory(self.ptr, self.ctx.clone());
                    let after = super::Point::Capturing(stream.clone());
                    self.ctx.tracker.retire(after, vec![Box::new(memory)]);
                    if super::lifetime::on_release_thread() {
                        return Ok(());
                    }
                    FREED_IN_CAPTURE.with(|f| f.set(true));
                    return Err(Error::misuse(
                        "cuMemFreeAsync",
                        Misuse::FreedInCapture,
                        "a stream-ordered buffer was dropped while its stream captures, and a capture may free only memory it allocated: keep the buffer alive until the capture ends (graph-rt frees this one once it has)",
                    ));
                }
                // SAFETY: we allocated `ptr` on this stream, which we keep alive.
                unsafe { cu!(cuMemFreeAsync(self.ptr, stream.raw())) }
            }),
        };
        self.ctx.record(r);
    }
}
