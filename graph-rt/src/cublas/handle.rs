//! The cuBLAS handle ([`Cublas`]) and its GEMMs; the pure size checks they run first are in
//! the parent module, next to their tests.

use std::cell::{Cell, OnceCell};
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::sync::Arc;

use super::borrow::Borrowed;
use super::destroy::{after_first, HandleToDestroy, FIRST_CREATE, FIRST_GEMM};
use super::sys::{self, CublasLib, Handle};
use super::{check_gemm_dims, order, Batch, Dims, GemmShape};
use crate::driver::{Allocation, CaptureStatus, DeviceBuffer, Event, EventFlags};
use crate::driver::{Parked, Stream};
use crate::error::{Error, Misuse, Result};
use crate::resource::Resource;

/// How a GEMM uses an operand: as stored (column-major, as cuBLAS expects), or transposed.
///
/// A row-major matrix is the transpose of a column-major one: row-major `C = A·B` is
/// column-major `Cᵀ = Bᵀ·Aᵀ`, i.e. `sgemm(N, N, n, m, k, 1.0, b, n, a, k, 0.0, c, n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Op {
    /// As stored (`CUBLAS_OP_N`).
    #[default]
    N,
    /// Transposed (`CUBLAS_OP_T`).
    T,
}

impl Op {
    pub(super) fn raw(self) -> c_int {
        match self {
            Op::N => sys::CUBLAS_OP_N,
            Op::T => sys::CUBLAS_OP_T,
        }
    }
}

/// A cuBLAS handle bound to one [`Stream`] (and so one context), with a device workspace it owns.
///
/// Every GEMM is queued on that stream, column-major as in cuBLAS, after checking its sizes
/// against the buffers (so the methods are safe). The workspace is set with
/// `cublasSetWorkspace_v2`, so cuBLAS uses it rather than allocating, also while the stream is
/// captured: GEMMs can be recorded into a graph. Warm each shape up once outside the capture, as
/// PyTorch does, so that any one-time setup of cuBLAS happens there.
///
/// A graph that captured these GEMMs keeps nothing alive by itself: the buffers and this handle
/// (whose workspace the captured kernels use) must outlive every exec of it. Keep them, or hand
/// [`Cublas::workspace_resource`] to [`CaptureScope::keep_alive`](crate::CaptureScope::keep_alive)
/// for the workspace. Replaying on other buffers needs a new capture, or a rebinding that finds
/// the buffers' addresses in the captured kernels' parameters.
///
/// cuBLAS is loaded at run time, once per process, on the first [`Cublas::new`]: the file named
/// by the environment variable `GRAPH_RT_CUBLAS` (a full path, e.g. PyTorch's
/// `site-packages/nvidia/cu13/lib/libcublas.so.13`), else `libcublas.so.13`, else
/// `libcublas.so.12` from the dynamic loader's path. Nothing of cuBLAS is needed to build.
///
/// A buffer allocated in stream order on another stream
/// ([`DeviceBuffer::alloc_async`]) is ordered for the GEMM by graph-rt: the GEMM waits for
/// what that stream has queued so far, and the buffer's memory is freed only after the GEMM
/// (eagerly, or every replay of a recording; see the `order` module).
///
/// `Send` but not `Sync`: a cuBLAS handle must not be used from two threads at once. Dropping it
/// never waits and is allowed inside a capture, also of its own stream: `cublasDestroy_v2`
/// (which waits for the device, what no capture allows) runs later, on the context's release
/// thread (see the `Drop`).
pub struct Cublas {
    pub(super) handle: Handle,
    pub(super) lib: &'static CublasLib,
    stream: Stream,
    workspace: DeviceBuffer<u8>,
    // Inside `record`: what the GEMMs used, for the capture's graph to keep alive.
    recording: Cell<bool>,
    kept: std::cell::RefCell<Vec<Resource>>,
    // Reused to order eager GEMMs after stream-ordered buffers of other streams.
    order_event: OnceCell<Event>,
    // A handle the caller owns (`Cublas::borrow_raw`): what to give back instead of destroying.
    borrowed: Option<Borrowed>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: a cuBLAS handle may be used from any thread, one at a time (`Cublas` is not Sync, and
// every method binds the stream's context first); the stream and workspace are Send.
unsafe impl Send for Cublas {}

impl std::fmt::Debug for Cublas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cublas")
            .field("handle", &self.handle)
            .field("stream", &self.stream)
            .field("workspace_bytes", &self.workspace.len())
            .field("library", &self.lib.path)
            .finish()
    }
}

impl Cublas {
    /// The workspace [`Cublas::new`] gives a handle: 32 MiB, what cuBLAS recommends for Hopper
    /// (and more than enough before it).
    pub const DEFAULT_WORKSPACE_BYTES: usize = 32 << 20;

    /// A handle on `stream` with a workspace of [`Cublas::DEFAULT_WORKSPACE_BYTES`] (32 MiB).
    /// Loads cuBLAS on first use (see [`Cublas`]).
    pub fn new(stream: &Stream) -> Result<Self> {
        Self::with_workspace(stream, Self::DEFAULT_WORKSPACE_BYTES)
    }

    /// A handle on `stream` with a workspace of `bytes` (0: none, which rules out the algorithms
    /// that need one). Not while `stream` captures: the workspace and the handle are allocated
    /// here.
    pub fn with_workspace(stream: &Stream, bytes: usize) -> Result<Self> {
        const CALL: &str = "Cublas::new";
        let lib = sys::library()?;
        if stream.capture_status()? != CaptureStatus::None {
            return Err(Error::misuse(
                CALL,
                Misuse::Capturing,
                "the stream is capturing: create the cuBLAS handle (which allocates) before the capture",
            ));
        }
        let ctx = stream.context();
        // Before the handle: a workspace that cannot be allocated leaves nothing to destroy.
        let workspace = DeviceBuffer::<u8>::alloc(ctx, bytes)?;
        ctx.bind()?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the stream's context is current, so the handle is made for it.
        sys::check_status("cublasCreate_v2", unsafe { (lib.create)(&mut handle) })?;
        // cuBLAS (its runtime) registers exit handlers of its own when it first makes a handle:
        // graph-rt's exit hook, which destroys parked handles, must run before them.
        after_first(&FIRST_CREATE, &ctx.inner);
        // SAFETY: a handle just made for the stream's context, owned by the value from now on.
        unsafe { Self::on_handle(handle, lib, stream, workspace, None) }
    }

    /// The value over `handle` (of the stream's context): the stream and `workspace` set on it.
    /// Owned (`borrowed: None`): destroyed by the drop; else given back.
    ///
    /// # Safety
    /// `handle` is a live cuBLAS handle of `stream`'s context, used by nothing else while the
    /// value lives; owned, nothing else destroys it.
    pub(super) unsafe fn on_handle(
        handle: Handle,
        lib: &'static CublasLib,
        stream: &Stream,
        workspace: DeviceBuffer<u8>,
        borrowed: Option<Borrowed>,
    ) -> Result<Self> {
        let ctx = stream.context();
        let bytes = workspace.len();
        ctx.bind()?;
        let resource: Resource = stream.shared();
        let this = Self {
            handle,
            lib,
            // The same stream, kept alive by this value (it is not destroyed through it).
            stream: Stream::wrap_owned(stream.as_raw(), ctx, false, Some(resource)),
            workspace,
            recording: Cell::new(false),
            kept: std::cell::RefCell::new(Vec::new()),
            order_event: OnceCell::new(),
            borrowed,
            _not_sync: PhantomData,
        };
        // SAFETY: valid handle and stream of the current context.
        sys::check_status("cublasSetStream_v2", unsafe {
            (lib.set_stream)(this.handle, this.stream.as_raw())
        })?;
        // After cublasSetStream_v2, which resets the workspace to cuBLAS's own pool.
        // SAFETY: the workspace holds `bytes` bytes of device memory of this context, aligned to
        // at least 256 bytes (cuMemAlloc), and lives as long as the handle.
        sys::check_status("cublasSetWorkspace_v2", unsafe {
            (lib.set_workspace)(this.handle, this.workspace.as_raw() as *mut c_void, bytes)
        })?;
        Ok(this)
    }

    /// Runs `gemms` (this handle's GEMMs) inside the capture `scope` of the handle's stream, and
    /// has the capture's graph keep alive every buffer they use and the workspace: replays then
    /// read valid memory whatever the caller drops. Outside `record`, a GEMM on a capturing
    /// stream is refused (its graph would keep nothing alive).
    pub fn record<R>(
        &self,
        scope: &crate::CaptureScope<'_>,
        gemms: impl FnOnce(&Self) -> Result<R>,
    ) -> Result<R> {
        if scope.stream().as_raw() != self.stream.as_raw() {
            return Err(Error::misuse(
                "Cublas::record",
                Misuse::OtherStream,
                "the capture is of another stream than the handle's",
            ));
        }
        let recording = Recording::begin(self, scope);
        let r = gemms(self);
        drop(recording);
        r
    }

    /// The raw `cublasHandle_t`, for cuBLAS calls graph-rt does not wrap. Do not destroy it,
    /// change its stream or workspace, or use it from another thread while this value is used.
    pub fn as_raw(&self) -> *mut c_void {
        self.handle
    }

    /// Whether the handle is lent by its owner ([`Cublas::borrow_raw`]) rather than graph-rt's.
    pub fn is_borrowed(&self) -> bool {
        self.borrowed.is_some()
    }

    /// The stream every call of this handle is queued on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The size of the workspace in bytes.
    pub fn workspace_bytes(&self) -> usize {
        self.workspace.len()
    }

    /// The workspace's allocation, for a graph that captured this handle's GEMMs to keep alive
    /// (see [`CaptureScope::keep_alive`](crate::CaptureScope::keep_alive)).
    pub fn workspace_resource(&self) -> Resource {
        let allocation: Arc<Allocation> = self.workspace.allocation().clone();
        allocation
    }

    /// The path or name cuBLAS was loaded from.
    pub fn library_path(&self) -> &std::path::Path {
        std::path::Path::new(&self.lib.path)
    }

    /// The cuBLAS version (`cublasGetVersion_v2`), e.g. `130100` for 13.1.0.
    pub fn version(&self) -> Result<i32> {
        self.bind()?;
        let mut version = 0;
        // SAFETY: valid handle and out-pointer.
        sys::check_status("cublasGetVersion_v2", unsafe {
            (self.lib.get_version)(self.handle, &mut version)
        })?;
        Ok(version)
    }

    /// Lets f32 GEMMs use TF32 tensor cores (`CUBLAS_TF32_TENSOR_OP_MATH`), or not (the default,
    /// `CUBLAS_DEFAULT_MATH`).
    pub fn allow_tf32(&self, allow: bool) -> Result<()> {
        self.bind()?;
        let mode = if allow {
            sys::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            sys::CUBLAS_DEFAULT_MATH
        };
        // SAFETY: valid handle; the mode is a cublasMath_t.
        sys::check_status("cublasSetMathMode", unsafe {
            (self.lib.set_math_mode)(self.handle, mode)
        })
    }

    /// `C = alpha·op(A)·op(B) + beta·C` in f32 (`cublasSgemm_v2`): `op(A)` is `m×k`, `op(B)`
    /// `k×n`, `C` `m×n`, all column-major with leading dimensions `lda`, `ldb`, `ldc`. Checks the
    /// sizes against the buffers and queues the GEMM on [`Cublas::stream`].
    #[allow(clippy::too_many_arguments)] // cuBLAS's arguments, in cuBLAS's order
    pub fn sgemm(
        &self,
        transa: Op,
        transb: Op,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: &DeviceBuffer<f32>,
        lda: usize,
        b: &DeviceBuffer<f32>,
        ldb: usize,
        beta: f32,
        c: &mut DeviceBuffer<f32>,
        ldc: usize,
    ) -> Result<()> {
        const CALL: &str = "cublasSgemm_v2";
        let shape = GemmShape::new((transa, transb), (m, n, k), (lda, ldb, ldc));
        self.gemm(
            CALL,
            &shape,
            None,
            [a.into(), b.into(), (&*c).into()],
            |d| {
                // SAFETY: valid handle; the buffers belong to the handle's context and hold every
                // element the GEMM touches (checked before `enqueue`); alpha and beta are host
                // values (pointer mode host).
                unsafe {
                    (self.lib.sgemm)(
                        self.handle,
                        transa.raw(),
                        transb.raw(),
                        d.m,
                        d.n,
                        d.k,
                        &alpha,
                        a.as_raw() as *const f32,
                        d.lda,
                        b.as_raw() as *const f32,
                        d.ldb,
                        &beta,
                        c.as_raw() as *mut f32,
                        d.ldc,
                    )
                }
            },
        )
    }

    /// [`Cublas::sgemm`] on `batch` matrices at once (`cublasSgemmStridedBatched`): matrix `i`
    /// of A, B and C starts `i·stride_a`, `i·stride_b`, `i·stride_c` elements after the first. A
    /// stride of 0 for A or B uses one matrix for the whole batch; C's batches must not overlap.
    #[allow(clippy::too_many_arguments)] // cuBLAS's arguments, in cuBLAS's order
    pub fn sgemm_strided_batched(
        &self,
        transa: Op,
        transb: Op,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: &DeviceBuffer<f32>,
        lda: usize,
        stride_a: i64,
        b: &DeviceBuffer<f32>,
        ldb: usize,
        stride_b: i64,
        beta: f32,
        c: &mut DeviceBuffer<f32>,
        ldc: usize,
        stride_c: i64,
        batch: i32,
    ) -> Result<()> {
        const CALL: &str = "cublasSgemmStridedBatched";
        let shape = GemmShape::new((transa, transb), (m, n, k), (lda, ldb, ldc));
        let batch = Batch {
            stride_a,
            stride_b,
            stride_c,
            count: batch,
        };
        self.gemm(
            CALL,
            &shape,
            Some(&batch),
            [a.into(), b.into(), (&*c).into()],
            |d| {
                // SAFETY: valid handle; the buffers belong to the handle's context and hold every
                // element of the last matrix of the batch (checked before `enqueue`); alpha and beta
                // are host values.
                unsafe {
                    (self.lib.sgemm_strided_batched)(
                        self.handle,
                        transa.raw(),
                        transb.raw(),
                        d.m,
                        d.n,
                        d.k,
                        &alpha,
                        a.as_raw() as *const f32,
                        d.lda,
                        stride_a,
                        b.as_raw() as *const f32,
                        d.ldb,
                        stride_b,
                        &beta,
                        c.as_raw() as *mut f32,
                        d.ldc,
                        stride_c,
                        batch.count,
                    )
                }
            },
        )
    }

    /// Checks a GEMM (sizes, buffers, capture), orders it after stream-ordered buffers of other
    /// streams, queues it with `enqueue` (given the checked sizes), then, eagerly, keeps those
    /// buffers alive until it has finished (see the `order` module).
    pub(super) fn gemm(
        &self,
        call: &'static str,
        shape: &GemmShape,
        batch: Option<&Batch>,
        buffers: [Operand<'_>; 3],
        enqueue: impl FnOnce(&Dims) -> sys::Status,
    ) -> Result<()> {
        let (dims, foreign) = self.prepare(call, shape, batch, buffers)?;
        let r = sys::check_status(call, enqueue(&dims));
        // And when it first runs a GEMM (what it sets up lazily then).
        after_first(&FIRST_GEMM, &self.stream.context().inner);
        // Also after a failed call: cuBLAS may have queued part of its work.
        let kept = order::after_eager(&self.stream, foreign);
        r.and(kept)
    }

    /// Checks a GEMM's sizes and buffers (A, B, C), makes the context current and orders the
    /// GEMM after stream-ordered buffers of other streams. Returns the checked sizes and, for
    /// an eager GEMM, those buffers' allocations, to keep until it has finished.
    fn prepare(
        &self,
        call: &'static str,
        shape: &GemmShape,
        batch: Option<&Batch>,
        buffers: [Operand<'_>; 3],
    ) -> Result<(Dims, Vec<Arc<Allocation>>)> {
        let dims = check_gemm_dims(call, shape, buffers.map(|b| b.len), batch)?;
        for (name, buffer) in ["A", "B", "C"].into_iter().zip(buffers) {
            if !buffer.allocation.in_context(self.stream.context()) {
                return Err(Error::misuse(
                    call,
                    Misuse::OtherContext,
                    format!("{name} belongs to another context than the handle's stream"),
                ));
            }
        }
        let recording = self.recording.get();
        if !recording && self.stream.capture_status()? != CaptureStatus::None {
            return Err(Error::misuse(
                call,
                Misuse::Capturing,
                "the handle's stream is capturing: call the GEMMs inside Cublas::record(scope, ..), so that the graph keeps their buffers alive",
            ));
        }
        self.bind()?;
        let foreign = order::foreign(&self.stream, buffers.map(|b| b.allocation));
        let mut kept = self.kept.borrow_mut();
        let after = if foreign.is_empty() {
            Vec::new()
        } else {
            let eager = if recording {
                None
            } else {
                Some(self.order_event()?)
            };
            order::before(call, &self.stream, &foreign, eager, &mut kept)?
        };
        if !recording {
            return Ok((dims, after));
        }
        for b in buffers {
            kept.push(b.allocation.clone());
        }
        Ok((dims, Vec::new()))
    }

    /// The event eager GEMMs record on other streams to wait for them (made on first use).
    fn order_event(&self) -> Result<&Event> {
        if let Some(event) = self.order_event.get() {
            return Ok(event);
        }
        let event = Event::new(self.stream.context(), EventFlags::DisableTiming)?;
        Ok(self.order_event.get_or_init(|| event))
    }

    fn bind(&self) -> Result<()> {
        self.stream.context().bind()
    }
}

/// One matrix of a GEMM as the checks see it: its length in elements and its allocation (A and
/// B may hold another element type than C).
#[derive(Clone, Copy)]
pub(super) struct Operand<'a> {
    len: usize,
    allocation: &'a Arc<Allocation>,
}

impl<'a, T: bytemuck::Pod> From<&'a DeviceBuffer<T>> for Operand<'a> {
    fn from(b: &'a DeviceBuffer<T>) -> Self {
        Self {
            len: b.len(),
            allocation: b.allocation(),
        }
    }
}

/// A [`Cublas::record`] under way: its end, on every path (a panic of the GEMMs' closure
/// included), hands the scope what the GEMMs used and the workspace, and restores the flag
/// that lets GEMMs on the capturing stream through.
struct Recording<'a, 's> {
    blas: &'a Cublas,
    scope: &'a crate::CaptureScope<'s>,
    was: bool,
}

impl<'a, 's> Recording<'a, 's> {
    fn begin(blas: &'a Cublas, scope: &'a crate::CaptureScope<'s>) -> Self {
        let was = blas.recording.replace(true);
        Self { blas, scope, was }
    }
}

impl Drop for Recording<'_, '_> {
    fn drop(&mut self) {
        self.blas.recording.set(self.was);
        for res in self.blas.kept.take() {
            self.scope.keep_alive(res);
        }
        self.scope.keep_alive(self.blas.workspace_resource());
    }
}

impl Drop for Cublas {
    /// Never waits, and is allowed inside a capture of the handle's stream or of any other:
    /// `cublasDestroy_v2` waits for the device (what a capture forbids: it would invalidate
    /// it), so the handle and its workspace are parked on the context's lifetime tracker behind
    /// a point after the work queued on the handle's stream (recorded once the stream's capture
    /// has ended, if it captures). The release thread destroys them once the point has
    /// completed, never while a global-mode capture of graph-rt runs; so do
    /// [`Context::synchronize`](crate::Context::synchronize),
    /// [`Context::poll`](crate::Context::poll) and the context's teardown. Destroying at once
    /// when the stream does not capture would still break a capture of another stream. Errors
    /// are recorded for
    /// [`Context::take_deferred_errors`](crate::Context::take_deferred_errors).
    fn drop(&mut self) {
        let stream = self.stream.shared();
        let ctx = self.stream.context().clone();
        let workspace: Arc<Allocation> = self.workspace.allocation().clone();
        // A borrowed handle is given back now (host-side calls only, allowed in a capture):
        // the work queued on it so far keeps using the workspace parked below.
        let destroy: Parked = match self.borrowed.take() {
            Some(b) => {
                ctx.inner.record(b.give_back(self.handle, self.lib, &ctx));
                Box::new(())
            }
            None => Box::new(HandleToDestroy {
                handle: self.handle,
                lib: self.lib,
                ctx: ctx.clone(),
                _stream: stream.clone(),
            }),
        };
        let parked: Vec<Parked> = vec![
            destroy,
            // Freed after the handle (the batch is dropped in order).
            Box::new(workspace),
            // Not destroyed or freed inside a capture either (`kept` holds something only if a
            // recording's GEMMs panicked).
            Box::new(self.order_event.take()),
            Box::new(self.kept.take()),
        ];
        // Where the stream's work cannot be fenced, the handle is leaked, never destroyed under
        // a capture.
        ctx.inner.park_from_drop(&stream, parked);
    }
}
