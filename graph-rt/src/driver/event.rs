//! Events: markers in a stream, for ordering across streams and for timing.

use std::sync::Arc;

use graph_rt_sys::{CUevent, CUevent_flags};

use super::call::{cu, cu_code};
use super::Context;
use super::Stream;
use crate::error::Result;

/// What an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventFlags {
    /// Records time stamps (needed by [`Event::elapsed_ms`]).
    #[default]
    Timing,
    /// No time stamps: cheaper, for ordering only (`CU_EVENT_DISABLE_TIMING`).
    DisableTiming,
    /// Time stamps, and [`Event::synchronize`] blocks the thread instead of spinning
    /// (`CU_EVENT_BLOCKING_SYNC`).
    BlockingSync,
}

/// A CUDA event, destroyed when it and every graph that records or waits on it are gone.
pub struct Event {
    raw: CUevent,
    ctx: Context,
    handle: Arc<EventHandle>,
}

struct EventHandle {
    raw: CUevent,
    ctx: Context,
    // Destroyed on drop (false for a wrapped foreign event).
    owned: bool,
}

// SAFETY: CUevent handles may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: as above; the driver serialises concurrent use.
unsafe impl Sync for Event {}
// SAFETY: as above.
unsafe impl Send for EventHandle {}
// SAFETY: as above.
unsafe impl Sync for EventHandle {}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event").field("raw", &self.raw).finish()
    }
}

impl Event {
    /// A new event of `ctx` (`cuEventCreate`).
    pub fn new(ctx: &Context, flags: EventFlags) -> Result<Self> {
        ctx.bind()?;
        let flags = match flags {
            EventFlags::Timing => CUevent_flags::CU_EVENT_DEFAULT,
            EventFlags::DisableTiming => CUevent_flags::CU_EVENT_DISABLE_TIMING,
            EventFlags::BlockingSync => CUevent_flags::CU_EVENT_BLOCKING_SYNC,
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current.
        unsafe { cu!(cuEventCreate(&mut raw, flags.0)) }?;
        Ok(Self {
            raw,
            ctx: ctx.clone(),
            handle: Arc::new(EventHandle {
                raw,
                ctx: ctx.clone(),
                owned: true,
            }),
        })
    }

    /// Wraps an event made elsewhere (PyTorch, cudarc). graph-rt never destroys it.
    ///
    /// # Safety
    /// `raw` must be a valid event of `ctx` that outlives the returned value and every graph
    /// that records or waits on it.
    pub unsafe fn from_raw(ctx: &Context, raw: CUevent) -> Self {
        Self {
            raw,
            ctx: ctx.clone(),
            handle: Arc::new(EventHandle {
                raw,
                ctx: ctx.clone(),
                owned: false,
            }),
        }
    }

    /// The event's handle, for graphs to keep alive.
    pub(crate) fn resource(&self) -> crate::resource::Resource {
        self.handle.clone()
    }

    /// The raw `CUevent`. Do not destroy it while this value lives.
    pub fn as_raw(&self) -> CUevent {
        self.raw
    }

    /// Records the event at the current end of `stream` (`cuEventRecord`).
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.record_on(stream.inner())
    }

    /// Records the event at the current end of a stream graph-rt holds.
    pub(crate) fn record_on(&self, stream: &crate::driver::StreamInner) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: valid event; the caller holds the stream.
        unsafe { cu!(cuEventRecord(self.raw, stream.raw())) }
    }

    /// Records the event on a capturing stream as an event-record node of the graph
    /// (`cuEventRecordWithFlags` with `CU_EVENT_RECORD_EXTERNAL`).
    pub(crate) fn record_external(&self, stream: &Stream) -> Result<()> {
        self.ctx.bind()?;
        let flags = graph_rt_sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL.0;
        // SAFETY: valid event and stream.
        unsafe { cu!(cuEventRecordWithFlags(self.raw, stream.as_raw(), flags)) }
    }

    /// Waits until the recorded work is done (`cuEventSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: valid event.
        unsafe { cu!(cuEventSynchronize(self.raw)) }
    }

    /// Whether the recorded work is done (`cuEventQuery`), without waiting.
    pub fn is_complete(&self) -> Result<bool> {
        self.ctx.bind()?;
        // SAFETY: valid event.
        let r = unsafe { cu_code!(cuEventQuery(self.raw)) }?;
        match r.code {
            graph_rt_sys::CUresult::CUDA_SUCCESS => Ok(true),
            graph_rt_sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            _ => Err(r.error()),
        }
    }

    /// Milliseconds between `start` and `end` (`cuEventElapsedTime`); both must be recorded with
    /// timing enabled and complete.
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32> {
        start.ctx.bind()?;
        let mut ms = 0.0f32;
        // SAFETY: valid out-pointer and events.
        unsafe { cu!(cuEventElapsedTime(&mut ms, start.raw, end.raw)) }?;
        Ok(ms)
    }
}

impl Drop for EventHandle {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let inner = &self.ctx.inner;
        let r = inner.bind().and_then(|_| {
            // SAFETY: we created the event; destroying a recorded event is allowed.
            unsafe { cu!(cuEventDestroy(self.raw)) }
        });
        inner.record(r);
    }
}
