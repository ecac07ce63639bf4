//! Interop with cudarc (feature `cudarc`): run graph-rt on cudarc's context and streams, and
//! move cudarc's buffers into graph-rt without copying, so that candle or cubecl users can capture
//! and replay graphs over the memory they already have.
//!
//! Capturing cudarc's own launches on one of its streams: with cudarc's defaults (event tracking
//! on), once a context has two streams every `CudaSlice` carries read/write events, and each
//! launch through cudarc makes the stream wait on them; inside a capture that wait crosses the
//! capture's boundary and the driver refuses it (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`).
//! graph-rt's captures of a stream made by [`Stream::from_cudarc`] switch cudarc's tracking off
//! for the capture and back on however it ends (errors and panics included), so cudarc's
//! launches and copies are captured like graph-rt's. What that cannot make safe: the captured
//! nodes record no events, so cudarc orders none of its later work after the graph's replays,
//! and the graph keeps no slice alive — keep them alive and unwritten by other streams while
//! the graph may replay.
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
    /// [`Stream::capture`].
    pub fn from_cudarc(stream: &Arc<CudaStream>) -> Result<Self> {
        let ctx = Context::from_cudarc(stream.context())?;
        Ok(Self::wrap_owned(
            stream.cu_stream().cast(),
            &ctx,
            false,
            Some(stream.clone()),
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
