//! Streams: ordered queues of device work.

use std::sync::Arc;

use graph_rt_sys::{CUcontext, CUstream, CUstreamCaptureMode, CUstream_flags};

use super::call::{cu, cu_code};
use super::Event;
use super::{Context, ContextInner};
use crate::error::Result;

/// How a stream orders itself against the legacy default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamFlags {
    /// Does not synchronize with the legacy default stream (`CU_STREAM_NON_BLOCKING`): what stream
    /// capture wants, and the default here.
    #[default]
    NonBlocking,
    /// Synchronizes with the legacy default stream (`CU_STREAM_DEFAULT`).
    Blocking,
}

/// Which CUDA calls from other threads may interrupt a capture (`CUstreamCaptureMode`). In
/// every mode a wait for the whole context (`cuCtxSynchronize`) is refused in every thread and
/// breaks the capture: graph-rt's own such waits (`Context::synchronize`, `DeviceBuffer::to_vec`,
/// …) wait for graph-rt's captures to end instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaptureMode {
    /// Potentially unsafe calls (plain allocations, synchronous copies, …) are refused in every
    /// thread while the capture is active.
    #[default]
    Global,
    /// Only in this thread.
    ThreadLocal,
    /// Nowhere: the caller takes responsibility.
    Relaxed,
}

impl CaptureMode {
    pub(crate) fn raw(self) -> CUstreamCaptureMode {
        match self {
            CaptureMode::Global => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }
}

/// Whether a stream is capturing (`cuStreamIsCapturing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureStatus {
    /// Not capturing.
    None,
    /// Capturing.
    Active,
    /// Capturing, but an illegal operation invalidated the capture; it must be ended.
    Invalidated,
}

/// A CUDA stream owned by graph-rt (destroyed on drop), or a foreign one (see [`Stream::from_raw`]).
///
/// A stream may be used from several threads; work is ordered in the order the calls reach the
/// driver.
///
/// Buffers allocated in stream order keep the stream alive until they are freed.
pub struct Stream {
    inner: Arc<StreamInner>,
}

pub(crate) struct StreamInner {
    raw: CUstream,
    // `ctx`'s handle beside the stream's: the launch paths compare it on every launch.
    ctx_raw: CUcontext,
    ctx: Context,
    owned: bool,
    // The foreign owner of a wrapped stream (a cudarc `CudaStream`), kept alive with it.
    _owner: Option<crate::resource::Resource>,
    // Captures switch the owner's (cudarc's) event tracking off while they run: the caller's
    // opt-in (`Stream::from_cudarc_pausing_tracking`).
    #[cfg(feature = "cudarc")]
    pauses_tracking: bool,
}

impl StreamInner {
    fn new(
        raw: CUstream,
        ctx: &Context,
        owned: bool,
        owner: Option<crate::resource::Resource>,
    ) -> Self {
        Self {
            raw,
            ctx_raw: ctx.as_raw(),
            ctx: ctx.clone(),
            owned,
            _owner: owner,
            #[cfg(feature = "cudarc")]
            pauses_tracking: false,
        }
    }
}

// SAFETY: CUstream handles may be used from any thread; graph-rt binds the context first.
unsafe impl Send for StreamInner {}
// SAFETY: as above; the driver serialises concurrent calls on one stream.
unsafe impl Sync for StreamInner {}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("raw", &self.inner.raw)
            .field("owned", &self.inner.owned)
            .finish()
    }
}

impl Stream {
    /// A new non-blocking stream of default priority.
    pub fn new(ctx: &Context) -> Result<Self> {
        Self::with_options(ctx, StreamFlags::NonBlocking, 0)
    }

    /// A new stream with `flags` and `priority` (lower numbers are higher priority; the range is
    /// [`Stream::priority_range`], and the driver clamps values outside it).
    pub fn with_options(ctx: &Context, flags: StreamFlags, priority: i32) -> Result<Self> {
        ctx.bind()?;
        let flags = match flags {
            StreamFlags::NonBlocking => CUstream_flags::CU_STREAM_NON_BLOCKING,
            StreamFlags::Blocking => CUstream_flags::CU_STREAM_DEFAULT,
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current.
        unsafe { cu!(cuStreamCreateWithPriority(&mut raw, flags.0, priority)) }?;
        Ok(Self::wrap(raw, ctx, true))
    }

    /// `(least, greatest)` stream priority of the context (`cuCtxGetStreamPriorityRange`).
    pub fn priority_range(ctx: &Context) -> Result<(i32, i32)> {
        ctx.bind()?;
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: valid out-pointers; the context is current.
        unsafe { cu!(cuCtxGetStreamPriorityRange(&mut least, &mut greatest)) }?;
        Ok((least, greatest))
    }

    /// Wraps a stream made elsewhere (PyTorch, cuBLAS, cudarc). graph-rt never destroys it.
    ///
    /// # Safety
    /// `raw` must be a valid stream of `ctx` (or null for the legacy default stream) that
    /// outlives the returned value and all work graph-rt queues on it.
    pub unsafe fn from_raw(ctx: &Context, raw: CUstream) -> Self {
        Self::wrap(raw, ctx, false)
    }

    fn wrap(raw: CUstream, ctx: &Context, owned: bool) -> Self {
        Self::wrap_owned(raw, ctx, owned, None)
    }

    pub(crate) fn wrap_owned(
        raw: CUstream,
        ctx: &Context,
        owned: bool,
        owner: Option<crate::resource::Resource>,
    ) -> Self {
        Self {
            inner: Arc::new(StreamInner::new(raw, ctx, owned, owner)),
        }
    }

    /// A cudarc stream `raw` of `ctx`, kept alive by `owner`; with `pauses_tracking`, graph-rt's
    /// captures of it switch cudarc's event tracking off while they run.
    #[cfg(feature = "cudarc")]
    pub(crate) fn wrap_cudarc(
        raw: CUstream,
        ctx: &Context,
        owner: crate::resource::Resource,
        pauses_tracking: bool,
    ) -> Self {
        let mut inner = StreamInner::new(raw, ctx, false, Some(owner));
        inner.pauses_tracking = pauses_tracking;
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The raw `CUstream`. Do not destroy it while this value lives.
    #[inline]
    pub fn as_raw(&self) -> CUstream {
        self.inner.raw
    }

    /// The context of this stream.
    #[inline]
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw handle of this stream's context (what [`Stream::context`]'s `as_raw` returns,
    /// read without leaving the stream's own state).
    #[inline]
    pub(crate) fn context_raw(&self) -> CUcontext {
        self.inner.ctx_raw
    }

    /// Makes this stream's context current on the calling thread unless it already is, as
    /// [`Context::bind`] does, reading only the stream's own state (the launch paths' way).
    #[inline]
    pub(crate) fn bind_context(&self) -> Result<()> {
        let raw = self.inner.ctx_raw;
        if super::current_raw()? != raw {
            // SAFETY: the stream holds its context alive (`StreamInner::ctx`).
            unsafe { cu!(cuCtxSetCurrent(raw)) }?;
        }
        Ok(())
    }

    pub(crate) fn ctx_inner(&self) -> &Arc<ContextInner> {
        &self.inner.ctx.inner
    }

    pub(crate) fn shared(&self) -> Arc<StreamInner> {
        self.inner.clone()
    }

    /// For a capture of a cudarc stream made with `Stream::from_cudarc_pausing_tracking`:
    /// cudarc's event tracking off until the value is dropped (see
    /// [`TrackingPaused`](super::cudarc_tracking::TrackingPaused)).
    #[cfg(feature = "cudarc")]
    pub(crate) fn pause_foreign_tracking(&self) -> Option<super::cudarc_tracking::TrackingPaused> {
        if !self.inner.pauses_tracking {
            return None;
        }
        self.inner
            ._owner
            .as_ref()
            .map(super::cudarc_tracking::pause_tracking)
    }

    /// Another handle on this stream (a step keeps one: the stream lives while it does).
    pub(crate) fn handle(&self) -> Stream {
        Stream {
            inner: self.inner.clone(),
        }
    }

    pub(crate) fn inner(&self) -> &StreamInner {
        &self.inner
    }

    /// The stream's priority (`cuStreamGetPriority`).
    pub fn priority(&self) -> Result<i32> {
        let mut p = 0;
        // SAFETY: valid out-pointer and stream.
        unsafe { cu!(cuStreamGetPriority(self.as_raw(), &mut p)) }?;
        Ok(p)
    }

    /// Waits until all work queued on the stream is done (`cuStreamSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }

    /// Whether all queued work is done (`cuStreamQuery`), without waiting.
    pub fn is_idle(&self) -> Result<bool> {
        self.inner().is_idle()
    }

    /// Makes later work on this stream wait for `event` (`cuStreamWaitEvent`), without blocking
    /// the host.
    pub fn wait(&self, event: &Event) -> Result<()> {
        self.wait_with(event, 0)
    }

    /// Makes later work on this stream wait for `event` as an external wait
    /// (`CU_EVENT_WAIT_EXTERNAL`): captured, it becomes an event-wait node of the graph, which
    /// waits at every replay for the event's latest record, instead of an edge of the capture.
    pub(crate) fn wait_external(&self, event: &Event) -> Result<()> {
        self.wait_with(
            event,
            graph_rt_sys::CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL.0,
        )
    }

    fn wait_with(&self, event: &Event, flags: std::os::raw::c_uint) -> Result<()> {
        self.context().bind()?;
        // SAFETY: valid stream and event; `flags` is 0 or CU_EVENT_WAIT_EXTERNAL.
        unsafe { cu!(cuStreamWaitEvent(self.as_raw(), event.as_raw(), flags)) }
    }

    /// Whether the stream is capturing (`cuStreamIsCapturing`).
    pub fn capture_status(&self) -> Result<CaptureStatus> {
        Ok(match self.inner().capture_status()? {
            graph_rt_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => {
                CaptureStatus::Active
            }
            graph_rt_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED => {
                CaptureStatus::Invalidated
            }
            _ => CaptureStatus::None,
        })
    }

    /// Records a new event on the stream and returns it.
    pub fn record_event(&self) -> Result<Event> {
        let e = Event::new(self.context(), crate::driver::EventFlags::DisableTiming)?;
        e.record(self)?;
        Ok(e)
    }
}

impl StreamInner {
    pub(crate) fn raw(&self) -> CUstream {
        self.raw
    }

    /// Makes the stream's context current on this thread (a no-op where it is).
    pub(crate) fn bind_context(&self) -> Result<()> {
        self.ctx.bind()
    }

    /// The stream's capture status (`cuStreamIsCapturing`): while not `NONE`, work queued on
    /// it is recorded into a graph, not run.
    pub(crate) fn capture_status(&self) -> Result<graph_rt_sys::CUstreamCaptureStatus> {
        let mut s = graph_rt_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: valid stream (we hold it) and out-pointer.
        unsafe { cu!(cuStreamIsCapturing(self.raw, &mut s)) }?;
        Ok(s)
    }

    /// Whether all work queued on the stream has finished (`cuStreamQuery`).
    pub(crate) fn is_idle(&self) -> Result<bool> {
        self.ctx.bind()?;
        // SAFETY: valid stream (we hold it) of the current context.
        let r = unsafe { cu_code!(cuStreamQuery(self.raw)) }?;
        match r.code {
            graph_rt_sys::CUresult::CUDA_SUCCESS => Ok(true),
            graph_rt_sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            _ => Err(r.error()),
        }
    }

    /// Waits until all work queued on the stream is done (`cuStreamSynchronize`).
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: valid stream (we hold it) of the current context.
        unsafe { cu!(cuStreamSynchronize(self.raw)) }
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let inner = &self.ctx.inner;
        let r = inner.bind().and_then(|_| {
            // SAFETY: we created the stream; work queued on it still completes after destruction.
            unsafe { cu!(cuStreamDestroy(self.raw)) }
        });
        inner.record(r);
    }
}
