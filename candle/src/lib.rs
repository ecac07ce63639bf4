//! candle models captured and replayed through graph-rt's step API.
//!
//! candle runs a device's CUDA work on one cudarc stream, allocating each tensor in stream
//! order (`cuMemAllocAsync`) and freeing it when it drops: inside a step's capture those become
//! the graph's memory nodes (graph-rt's memory chapter). This crate joins the two:
//!
//! - [`CandleStream::new`]: a candle device on a stream of its own, and that stream as
//!   graph-rt's. (candle's default device uses the per-thread stream, which a step refuses: a
//!   capture of it would take in whatever else the thread enqueues.) Its cuBLAS handle gets a
//!   workspace of its own, so that a captured GEMM allocates nothing and runs as it did
//!   eagerly.
//! - [`bind`]: a candle tensor bound to a step parameter, kept alive by the step while a replay
//!   may read it; no synchronize.
//! - [`tensor`]: inside the closure, what a declared buffer is bound to, as a candle tensor that
//!   candle never frees (valid during the run only).
//! - [`error`]: candle's errors carried as graph-rt's ([`graph_rt::Error::Framework`]), with the
//!   driver's code where candle's error holds one.
//!
//! [`porting`] says what a candle model must do differently to be captured once and rebound
//! every call; [`llama`] is a Llama-style decoder written both ways, [`decode`] its decode step
//! as a graph-rt step.

pub mod decode;
pub mod llama;
pub mod porting;

use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{CudaStream, DevicePtr};
use candle_core::cuda_backend::{CudaDType, CudaDevice, CudaError, CudaStorage, WrapErr};
use candle_core::op::BackpropOp;
use candle_core::{Device, Shape, Storage, Tensor};
use graph_rt::step::{Buf, Step, StepScope};
use graph_rt::{DeviceBuffer, Pod, Stream};

/// A candle device on a stream of its own, and that stream as graph-rt's.
#[derive(Debug)]
pub struct CandleStream {
    device: Device,
    cuda: Arc<CudaStream>,
    stream: Stream,
}

impl CandleStream {
    /// The bytes of the cuBLAS workspace [`CandleStream::new`] gives candle's handle (cuBLAS's
    /// recommendation for Hopper; enough for earlier GPUs).
    pub const CUBLAS_WORKSPACE_BYTES: usize = 32 << 20;

    /// A candle device on GPU `ordinal`, on a new stream (`Device::new_cuda_with_stream`), with
    /// cudarc's per-buffer event tracking off: its events, recorded on a tensor's stream at
    /// every use, would join work made before a capture to the capture (which CUDA refuses).
    /// Make it before any tensor of the context: the events of tensors made before would be
    /// left unwaited.
    ///
    /// candle's cuBLAS handle gets a workspace of [`CandleStream::CUBLAS_WORKSPACE_BYTES`]
    /// (`cublasSetWorkspace`, through candle's own cuBLAS): without one, cuBLAS allocates its
    /// workspace on the stream, inside a capture too. Captured GEMMs keep its address, and the
    /// handle lives as long as any clone of the device: the workspace is never freed.
    pub fn new(ordinal: usize) -> graph_rt::Result<Self> {
        let device = Device::new_cuda_with_stream(ordinal).map_err(error)?;
        let cuda = device.as_cuda_device().map_err(error)?;
        // SAFETY: every tensor of this device is made after this and used on its one stream,
        // which orders them; cudarc's contract for turning tracking off.
        unsafe { cuda.disable_event_tracking() };
        set_cublas_workspace(cuda)?;
        let cuda = cuda.cuda_stream();
        let stream = Stream::from_cudarc(&cuda)?;
        Ok(Self {
            device,
            cuda,
            stream,
        })
    }

    /// The candle device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Its stream, graph-rt's handle on it (for `Step::new`).
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// candle's CUDA device (for `enable_cuda_graph_htod_cache`, which a closure holds while
    /// it runs: see the crate's tests).
    pub fn cuda_device(&self) -> graph_rt::Result<&CudaDevice> {
        self.device.as_cuda_device().map_err(error)
    }
}

/// Gives `cuda`'s cuBLAS handle a workspace of its own, never freed (see [`CandleStream::new`]).
fn set_cublas_workspace(cuda: &CudaDevice) -> graph_rt::Result<()> {
    use candle_core::cuda_backend::cudarc::cublas::sys;
    let bytes = CandleStream::CUBLAS_WORKSPACE_BYTES;
    let stream = cuda.cuda_stream();
    let workspace = stream.alloc_zeros::<u8>(bytes).w().map_err(error)?;
    // Allocated in stream order: ready for the GEMMs that follow on the same stream.
    let ptr = workspace.leak();
    let blas = cuda.cublas_handle();
    // SAFETY: candle's live handle; `bytes` of device memory of its context, never freed.
    let status = unsafe { sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut _, bytes) };
    if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Err(error(candle_core::Error::Msg(format!(
            "cublasSetWorkspace on candle's cuBLAS handle: {status:?}"
        ))));
    }
    Ok(())
}

/// Binds the contiguous candle tensor `t` to `param` of `step` for the calls that follow: the
/// step keeps `t` alive while a replay may read it. No synchronize: `t` is made on the step's
/// stream, which orders its writes before the launch.
pub fn bind<F, T>(step: &mut Step<F>, param: &Buf<T>, t: &Tensor) -> graph_rt::Result<()>
where
    F: FnMut(&StepScope<'_>) -> graph_rt::Result<()>,
    T: Pod + CudaDType,
{
    let buffer = buffer_of::<T>(step.stream(), t)?;
    step.bind(param, &buffer)
}

/// The contiguous candle tensor `t`, made on `stream` (a [`CandleStream`]'s), as a graph-rt
/// buffer that keeps `t` alive (no copy). A tensor of another stream is refused: nothing would
/// order its writes before the step's reads.
pub fn buffer_of<T: Pod + CudaDType>(
    stream: &Stream,
    t: &Tensor,
) -> graph_rt::Result<DeviceBuffer<T>> {
    if !t.is_contiguous() {
        return Err(misuse("the tensor is not contiguous: bind t.contiguous()"));
    }
    let (ptr, len) = {
        let (storage, layout) = t.storage_and_layout();
        let Storage::Cuda(cuda) = &*storage else {
            return Err(misuse("the tensor is not on a CUDA device"));
        };
        let slice = cuda.as_cuda_slice::<T>().map_err(error)?;
        if slice.stream().cu_stream().cast::<()>() != stream.as_raw().cast::<()>() {
            return Err(misuse(
                "the tensor was made on another stream than the step's: make it on the CandleStream's device",
            ));
        }
        let start = layout.start_offset();
        let (base, _sync) = slice.device_ptr(slice.stream());
        (
            base + (start * std::mem::size_of::<T>()) as u64,
            t.elem_count(),
        )
    };
    // SAFETY: `len` elements of the tensor's storage from its layout's start, kept alive by the
    // tensor the buffer holds.
    Ok(unsafe { DeviceBuffer::from_raw_guarded(stream.context(), ptr, len, t.clone()) })
}

/// Inside a step's closure, what `param` is bound to for this run, as a contiguous candle tensor
/// of `shape` on `on`'s device. candle never frees it: it is the step's buffer (or a stand-in
/// of the step's second capture), which the step keeps.
///
/// # Safety
///
/// The tensor, and every tensor that shares its storage (its views), must not be used after
/// the closure returns: the memory is the step's, valid for this run only (a stand-in is freed
/// after the capture, a binding may be replaced before the next call).
pub unsafe fn tensor<T: Pod + CudaDType>(
    s: &StepScope<'_>,
    on: &CandleStream,
    param: &Buf<T>,
    shape: impl Into<Shape>,
) -> graph_rt::Result<Tensor> {
    if s.stream().as_raw() != on.stream.as_raw() {
        return Err(misuse(
            "the step runs on another stream than this CandleStream's: candle's work would not be the step's",
        ));
    }
    let shape = shape.into();
    let buffer = s.buffer(param)?;
    if shape.elem_count() > buffer.len() {
        return Err(misuse(
            "the shape holds more elements than the declared buffer",
        ));
    }
    // SAFETY: the buffer's memory, alive for the run (the step keeps what it binds); the slice
    // made over it must never drop, which `leak` below sees to.
    let slice = unsafe {
        on.cuda
            .upgrade_device_ptr::<T>(buffer.as_raw(), shape.elem_count())
    };
    let storage = CudaStorage::wrap_cuda_slice(slice, on.cuda_device()?.clone());
    let t = Tensor::from_storage(Storage::Cuda(storage), shape, BackpropOp::none(), false);
    Ok(leak(t))
}

/// `t`, whose storage never drops: one handle on it is forgotten, so candle never frees memory
/// it does not own (its views share that storage). The forgotten handle is a few hundred bytes
/// of host memory a run (every call of an eager step), and keeps candle's stream alive: candle
/// has no tensor over memory it does not own.
fn leak(t: Tensor) -> Tensor {
    std::mem::forget(t.clone());
    t
}

/// candle's error `e` as graph-rt's ([`graph_rt::Error::Framework`]), with the driver's result
/// where `e` carries one.
pub fn error(e: candle_core::Error) -> graph_rt::Error {
    let code = driver_code(&e);
    graph_rt::Error::framework("candle", code, e)
}

/// The driver's result a candle error carries, through its wrappers (backtrace, context, path).
fn driver_code(e: &candle_core::Error) -> Option<graph_rt::sys::CUresult> {
    use candle_core::Error as E;
    match e {
        E::WithBacktrace { inner, .. } | E::Context { inner, .. } | E::WithPath { inner, .. } => {
            driver_code(inner)
        }
        E::Cuda(b) => match b.downcast_ref::<CudaError>()? {
            CudaError::Cuda(d) | CudaError::Load { cuda: d, .. } => {
                Some(graph_rt::sys::CUresult(d.0 as u32))
            }
            _ => None,
        },
        _ => None,
    }
}

fn misuse(reason: &str) -> graph_rt::Error {
    graph_rt::Error::InvalidArgument {
        call: "graph_rt_candle",
        reason: reason.to_owned(),
    }
}
