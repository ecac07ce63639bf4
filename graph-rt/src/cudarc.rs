//! Interop with cudarc (feature `cudarc`): run graph-rt on cudarc's context and streams, and
//! move cudarc's buffers into graph-rt without copying, so that candle or cubecl users can capture
//! and replay graphs over the memory they already have.
//!
//! Capturing cudarc's own launches on one of its streams: with cudarc's defaults (event tracking
//! on), once a context has two streams every `CudaSlice` carries read/write events, and each
//! launch through cudarc makes the stream wait on them; inside a capture that wait crosses the
//! capture's boundary and the driver refuses it (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`: the
//! capture fails, and a step runs eagerly saying so). Turning tracking off is cudarc's `unsafe`
//! `disable_event_tracking`, for the whole context, and graph-rt does it only when asked to:
//! captures of a stream made by the `unsafe` [`Stream::from_cudarc_pausing_tracking`] switch
//! cudarc's tracking off for the capture and back on however it ends (errors and panics
//! included), so cudarc's launches and copies are captured like graph-rt's. What that cannot
//! make safe is its contract: the captured nodes record no events, so cudarc orders none of its
//! later work after the graph's replays, and the graph keeps no slice alive; meanwhile cudarc
//! work of other threads on the context is not tracked either. With a single stream in the
//! context cudarc tracks nothing, and [`Stream::from_cudarc`] captures its launches as they are.
//!
//! Or move the buffers: [`DeviceBuffer::from_cudarc`] settles the slice's events once, outside
//! any capture, and hands the allocation to graph-rt, whose graphs keep it alive for as long as
//! they may replay.

use std::sync::Arc;

use bytemuck::Pod;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};

use crate::driver::Context;
use crate::driver::Device;
use crate::driver::DeviceBuffer;
use crate::driver::Stream;
use crate::error::Result;

impl Context {
    /// The context of a cudarc `CudaContext`, which it keeps alive.
    pub fn from_cudarc(ctx: &Arc<CudaContext>) -> Result<Self> {
        let device = Device::get(ctx.ordinal())?;
        // SAFETY: cudarc's context is valid while the Arc we keep lives; graph-rt never
        // destroys a wrapped context.
        Ok(unsafe { Self::from_raw_owned(ctx.cu_ctx().cast(), device, Some(ctx.clone())) })
    }
}

impl Stream {
    /// A cudarc `CudaStream`, which it keeps alive (and never destroys). Capture on it with
    /// [`Stream::capture`]; cudarc's event tracking stays as it is (see the [module
    /// docs](self) for what that means for captures of cudarc's own launches).
    pub fn from_cudarc(stream: &Arc<CudaStream>) -> Result<Self> {
        Self::cudarc(stream, false)
    }

    /// A cudarc `CudaStream` whose captures through graph-rt ([`Stream::capture`],
    /// [`Stream::capture_into`], steps) switch cudarc's event tracking off for the stream's
    /// context while they run, and back on however they end: so that cudarc's launches on
    /// slices shared between streams can be captured.
    ///
    /// # Safety
    /// As cudarc's `CudaContext::disable_event_tracking`, for every capture of the stream: the
    /// captured nodes record no events on the slices they use, so the caller keeps every such
    /// slice alive, and orders cudarc's work on other streams that writes or frees it after the
    /// graph's replays (or moves the slices into graph-rt with [`DeviceBuffer::from_cudarc`],
    /// whose graphs keep them alive); and no other thread relies on cudarc's tracking of the
    /// context while a capture runs.
    pub unsafe fn from_cudarc_pausing_tracking(stream: &Arc<CudaStream>) -> Result<Self> {
        Self::cudarc(stream, true)
    }

    fn cudarc(stream: &Arc<CudaStream>, pauses_tracking: bool) -> Result<Self> {
        let ctx = Context::from_cudarc(stream.context())?;
        let raw = stream.cu_stream().cast();
        Ok(Self::wrap_cudarc(
            raw,
            &ctx,
            stream.clone(),
            pauses_tracking,
        ))
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Takes over a cudarc buffer, without copying: graph-rt frees it when the buffer and every
    /// graph using it are gone. Waits for the work cudarc queued on the slice's stream, so that
    /// any stream of the context may use the buffer from then on.
    pub fn from_cudarc(ctx: &Context, slice: CudaSlice<T>) -> Result<Self> {
        if slice.context().cu_ctx().cast() != ctx.as_raw() {
            return Err(crate::Error::misuse(
                "DeviceBuffer::from_cudarc",
                crate::Misuse::OtherContext,
                "the slice belongs to another context than `ctx`",
            ));
        }
        let stream = slice.stream().clone();
        let len = slice.len();
        // `leak` makes the slice's stream wait for the slice's pending reads and writes.
        let ptr = slice.leak();
        let ours = Stream::from_cudarc(&stream)?;
        ours.synchronize()?;
        Ok(Self::adopt(ctx, ptr, len))
    }
}

impl From<cudarc::driver::DriverError> for crate::Error {
    /// A failed cudarc call (inside a step's closure, say) as graph-rt's driver error: its code,
    /// name and what to do; the call is not known to graph-rt (`"a cudarc call"`).
    fn from(e: cudarc::driver::DriverError) -> Self {
        crate::Error::driver("a cudarc call", graph_rt_sys::CUresult(e.0 as u32))
    }
}
