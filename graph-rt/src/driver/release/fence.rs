//! What a parked batch waits for before it may be released: an event recorded after the last
//! work that can use it, nothing, or the end of the capture its stream was in.

use std::sync::Arc;

use graph_rt_sys::{CUevent, CUevent_flags, CUresult};

use super::super::stream::StreamInner;
use crate::driver::cu;
use crate::error::Result;

/// When a parked batch may be released.
pub(super) enum Fence {
    /// Once this event (recorded after the last work that can use the batch) has completed, or
    /// the context is known idle since the batch was parked. Shared, so that a thread can wait
    /// for it outside the queue's lock while another releases the batch.
    Event(Arc<RawEvent>),
    /// At once: the batch's own release waits for the device where it must (`cuMemFree`).
    None,
    /// The stream of the last work was capturing, so no event could be recorded: one is
    /// recorded once the capture has ended ([`Fence::refresh`]).
    Capturing(Arc<StreamInner>),
    /// CPU tests' stand-in for an event: passed once the flag is set.
    #[cfg(test)]
    Fake(Arc<std::sync::atomic::AtomicBool>),
}

/// An event graph-rt created for a fence, destroyed when the last holder lets go.
pub(super) struct RawEvent(CUevent);

// SAFETY: an event handle may be queried, waited for and destroyed from any thread.
unsafe impl Send for RawEvent {}
// SAFETY: as above; the handle is never changed.
unsafe impl Sync for RawEvent {}

impl Drop for RawEvent {
    fn drop(&mut self) {
        // SAFETY: an event we created; its last holder is gone, so nothing waits for it.
        let _ = unsafe { graph_rt_sys::cuEventDestroy(self.0) };
    }
}

impl Fence {
    /// Whether the work the fence follows has completed, without waiting. An event whose query
    /// fails with anything but `CUDA_ERROR_NOT_READY` counts as passed: the context is broken
    /// (a sticky error) and runs nothing any more, or the event cannot tell.
    pub(super) fn passed(&self) -> bool {
        match self {
            Fence::None => true,
            Fence::Capturing(_) => false,
            Fence::Event(event) => {
                // SAFETY: a live event we created.
                let query = unsafe { graph_rt_sys::cuEventQuery(event.0) };
                !matches!(query, Ok(CUresult::CUDA_ERROR_NOT_READY))
            }
            #[cfg(test)]
            Fence::Fake(done) => done.load(std::sync::atomic::Ordering::Acquire),
        }
    }

    /// A handle to wait on outside the queue's lock, for the fences that can be waited for.
    pub(super) fn waitable(&self) -> Option<Fence> {
        match self {
            Fence::Event(event) => Some(Fence::Event(event.clone())),
            #[cfg(test)]
            Fence::Fake(done) => Some(Fence::Fake(done.clone())),
            Fence::None | Fence::Capturing(_) => None,
        }
    }

    /// Blocks until the fence has passed (`cuEventSynchronize`). Returns false for a fence that
    /// cannot be waited for: a capture still running. Call on a thread that is not capturing.
    pub(super) fn wait(&mut self) -> bool {
        self.refresh();
        match self {
            Fence::None => true,
            Fence::Capturing(_) => false,
            Fence::Event(event) => {
                // SAFETY: a live event we created. An error (a broken context) ends the wait
                // too: the device runs nothing any more.
                let _ = unsafe { graph_rt_sys::cuEventSynchronize(event.0) };
                true
            }
            #[cfg(test)]
            Fence::Fake(done) => {
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
                true
            }
        }
    }

    /// As [`Fence::wait`], giving up at `deadline` (polling): false when the fence has not
    /// passed by then, or cannot be waited for.
    pub(super) fn wait_until(&mut self, deadline: std::time::Instant) -> bool {
        self.refresh();
        loop {
            if self.passed() {
                return true;
            }
            if matches!(self, Fence::Capturing(_)) || std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    /// A [`Fence::Capturing`] whose stream no longer captures becomes an event recorded now,
    /// after the work queued before the capture. Others are left as they are.
    pub(super) fn refresh(&mut self) {
        if let Fence::Capturing(stream) = self {
            match fence_after(stream) {
                Ok(fence) => *self = fence,
                // Cannot tell when the work ends: it stays for teardown, which waits for the
                // device itself.
                Err(e) => tracing::debug!(error = %e, "graph-rt: no fence after a capture yet"),
            }
        }
    }
}

/// A new event recorded at the current end of `stream`, or [`Fence::Capturing`] while the
/// stream captures (the record would become a node of the user's graph). The stream's context
/// must be current.
pub(super) fn fence_after(stream: &Arc<StreamInner>) -> Result<Fence> {
    let none = graph_rt_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    if stream.capture_status()? != none {
        return Ok(Fence::Capturing(stream.clone()));
    }
    let mut event = std::ptr::null_mut();
    let flags = CUevent_flags::CU_EVENT_DISABLE_TIMING.0;
    // SAFETY: valid out-pointer; the context is current.
    unsafe { cu!(cuEventCreate(&mut event, flags)) }?;
    let event = RawEvent(event);
    // SAFETY: a fresh event and a live stream of this context.
    unsafe { cu!(cuEventRecord(event.0, stream.raw())) }?;
    Ok(Fence::Event(Arc::new(event)))
}
