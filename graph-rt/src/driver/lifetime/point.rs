//! Completion points: what a retired batch waits for before it may be released — an event
//! recorded after the last work on a stream that can use it, a count on a timeline the device
//! advances (a table's acknowledgements), nothing, or the end of the capture its stream was in.
//! One point covers what graph-rt retires: launches of one exec are ordered, whatever their
//! streams, and a table launches on one stream.

use std::sync::Arc;

use graph_rt_sys::{CUevent, CUevent_flags, CUresult, LoadError};

use super::super::stream::StreamInner;
use crate::driver::cu;
use crate::error::Result;

/// A timeline the device advances and the host reads without a driver call: a table's
/// acknowledgements, which count its launches' refreshes.
pub(crate) trait Progress: Send + Sync {
    /// Whether every launch below `at` on this timeline has finished. Called by the tracker
    /// with the context current, from any thread.
    fn reached(&self, at: u64) -> bool;
}

/// When a retired batch may be released.
#[derive(Clone)]
pub(crate) enum Point {
    /// Once this event (recorded after the last work that can use the batch) has completed, or
    /// the context is known idle since the batch was parked. Shared, so that a thread can wait
    /// for it outside the queue's lock while another releases the batch.
    Event(Arc<RawEvent>),
    /// At once: the batch's own release waits for the device where it must (`cuMemFree`).
    None,
    /// The stream of the last work was capturing, so no event could be recorded: one is
    /// recorded once the capture has ended ([`Point::refresh`]).
    Capturing(Arc<StreamInner>),
    /// Once the timeline has reached this count.
    Progress(Arc<dyn Progress>, u64),
    /// CPU tests' stand-in for an event: passed once the flag is set.
    #[cfg(test)]
    Fake(Arc<crate::driver::sync::AtomicBool>),
    /// CPU tests' stand-in for an event whose query and wait answer this code (a `CUresult`),
    /// judged as an event's answers are.
    #[cfg(test)]
    FakeEvent(Arc<std::sync::atomic::AtomicU32>),
}

/// An event graph-rt created for a point, destroyed when the last holder lets go.
pub(crate) struct RawEvent(CUevent);

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

/// Whether an error leaves the context broken for good ("sticky"): a kernel faulted, the
/// hardware failed, or the context or the driver is gone. Such a context runs nothing any more,
/// so nothing of it is still in use.
pub(crate) fn is_sticky(code: CUresult) -> bool {
    matches!(
        code,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_TENSOR_MEMORY_LEAK
            | CUresult::CUDA_ERROR_CONTAINED
            | CUresult::CUDA_ERROR_EXTERNAL_DEVICE
            | CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
            | CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED
            | CUresult::CUDA_ERROR_DEINITIALIZED
    )
}

/// Whether an event's query or wait answered that the work before the event is over: it has
/// completed, or the context is broken for good ([`is_sticky`]). Any other answer is not: the
/// work may still run — `CUDA_ERROR_NOT_READY`, and a refusal such as
/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` (another library's global-mode capture forbids the
/// call on this thread) or `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`, which says nothing about the
/// work.
pub(super) fn event_passed(answer: &std::result::Result<CUresult, LoadError>) -> bool {
    match answer {
        Ok(code) => *code == CUresult::CUDA_SUCCESS || is_sticky(*code),
        // Unreachable with a live event (the driver was loaded to make it); nothing is known.
        Err(_) => false,
    }
}

/// How long [`Point::wait`] polls an event whose wait was refused (another library's capture
/// forbids it on this thread), before it gives up and the batch stays unreleased.
fn refused_wait_patience() -> std::time::Duration {
    crate::driver::capture_gate::patience()
}

impl Point {
    /// Whether the work the point follows has completed, without waiting. An event counts as
    /// passed once its query answers that the work completed or the context is broken for good
    /// ([`event_passed`]); a refused query (a capture another library runs in global mode)
    /// counts as not yet, and the batch is looked at again later.
    pub(crate) fn passed(&self) -> bool {
        match self {
            Point::None => true,
            Point::Capturing(_) => false,
            Point::Progress(timeline, at) => timeline.reached(*at),
            // SAFETY: a live event we created.
            Point::Event(event) => event_passed(&unsafe { graph_rt_sys::cuEventQuery(event.0) }),
            #[cfg(test)]
            Point::Fake(done) => done.load(std::sync::atomic::Ordering::Acquire),
            #[cfg(test)]
            Point::FakeEvent(answer) => event_passed(&Ok(fake_answer(answer))),
        }
    }

    /// A handle to wait on outside the queue's lock, for the points that can be waited for.
    pub(super) fn waitable(&self) -> Option<Point> {
        match self {
            Point::Event(_) => Some(self.clone()),
            #[cfg(test)]
            Point::Fake(_) | Point::FakeEvent(_) => Some(self.clone()),
            // A timeline advances with later launches, which may never come: not waited for.
            Point::None | Point::Capturing(_) | Point::Progress(..) => None,
        }
    }

    /// Blocks until the point has passed (`cuEventSynchronize`). Returns false for a point that
    /// cannot be waited for: a capture still running, or a timeline that stops short of its
    /// count; and for an event whose wait was refused (another library's global-mode capture)
    /// and whose queries have not answered passed within the capture gate's patience. Call on a
    /// thread that is not capturing.
    pub(super) fn wait(&mut self) -> bool {
        self.refresh();
        match self {
            Point::None => true,
            Point::Capturing(_) => false,
            // A timeline advances only with its owner's later launches, which a waiting thread
            // cannot bring about: passed or not, now (graph-rt's own timelines never reach the
            // tracker: a dropped table's lane lets go of everything with its parked batch).
            Point::Progress(timeline, at) => timeline.reached(*at),
            Point::Event(event) => {
                // SAFETY: a live event we created.
                let answer = unsafe { graph_rt_sys::cuEventSynchronize(event.0) };
                self.waited(answer)
            }
            #[cfg(test)]
            Point::FakeEvent(answer) => {
                let answer = Ok(fake_answer(answer));
                self.waited(answer)
            }
            #[cfg(test)]
            Point::Fake(done) => {
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    crate::driver::sync::pause(std::time::Duration::from_micros(100));
                }
                true
            }
        }
    }

    /// After an event's wait answered `answer`: passed, or (refused: it says nothing about the
    /// work) polled until it passes, for a while.
    fn waited(&mut self, answer: std::result::Result<CUresult, LoadError>) -> bool {
        if event_passed(&answer) {
            return true;
        }
        if let Ok(code) = answer {
            tracing::debug!(
                ?code,
                "graph-rt: an event's wait was refused: polling it instead"
            );
        }
        self.wait_until(std::time::Instant::now() + refused_wait_patience())
    }

    /// As [`Point::wait`], giving up at `deadline` (polling): false when the point has not
    /// passed by then, or cannot be waited for.
    pub(crate) fn wait_until(&mut self, deadline: std::time::Instant) -> bool {
        self.refresh();
        loop {
            if self.passed() {
                return true;
            }
            if self.is_capturing() || std::time::Instant::now() > deadline {
                return false;
            }
            crate::driver::sync::pause(std::time::Duration::from_micros(100));
        }
    }

    /// A [`Point::Capturing`] whose stream no longer captures becomes an event recorded now,
    /// after the work queued before the capture. Others are left as they are.
    pub(super) fn refresh(&mut self) {
        if let Point::Capturing(stream) = self {
            match point_after(stream) {
                Ok(point) => *self = point,
                // Cannot tell when the work ends: it stays for teardown, which waits for the
                // device itself.
                Err(e) => tracing::debug!(error = %e, "graph-rt: no point after a capture yet"),
            }
        }
    }

    /// Whether the point waits for a capture to end.
    pub(super) fn is_capturing(&self) -> bool {
        matches!(self, Point::Capturing(_))
    }
}

/// What a [`Point::FakeEvent`] answers.
#[cfg(test)]
fn fake_answer(answer: &std::sync::atomic::AtomicU32) -> CUresult {
    graph_rt_sys::cudaError_enum(answer.load(std::sync::atomic::Ordering::Acquire))
}

/// A new event recorded at the current end of `stream`, or [`Point::Capturing`] while the
/// stream captures (the record would become a node of the user's graph). Makes the stream's
/// context current first: the event must be of the stream's context, and a caller that drove
/// several devices (an NCCL group of every rank) may have left another one current.
pub(crate) fn point_after(stream: &Arc<StreamInner>) -> Result<Point> {
    stream.bind_context()?;
    let none = graph_rt_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    if stream.capture_status()? != none {
        return Ok(Point::Capturing(stream.clone()));
    }
    let mut event = std::ptr::null_mut();
    let flags = CUevent_flags::CU_EVENT_DISABLE_TIMING.0;
    // SAFETY: valid out-pointer; the stream's context is current (bound above).
    unsafe { cu!(cuEventCreate(&mut event, flags)) }?;
    let event = RawEvent(event);
    // SAFETY: a fresh event and a live stream of this context.
    unsafe { cu!(cuEventRecord(event.0, stream.raw())) }?;
    Ok(Point::Event(Arc::new(event)))
}
