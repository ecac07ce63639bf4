//! Kernels graph-rt cannot rewrite (cuBLAS, cuDNN, precompiled cubins): cuBLAS in captures,
//! pointer discovery from two captures, host-side patching, and the in-graph prelude.
//!
//! # cuBLAS
//!
//! [`crate::cublas::Cublas`] is loaded at run time, once per process: the file `GRAPH_RT_CUBLAS` names,
//! else `libcublas.so.13`, else `libcublas.so.12`; nothing of cuBLAS is needed to build. A
//! handle is bound to one stream and gives sgemm ([`crate::cublas::Cublas::sgemm`]), bf16 / f16
//! `GemmEx` ([`crate::cublas::Cublas::gemm_bf16`], [`crate::cublas::Cublas::gemm_f16`], on buffers of
//! [`crate::half`]'s types) and strided batched sgemm
//! ([`crate::cublas::Cublas::sgemm_strided_batched`]), each checked against its buffers' sizes. Its
//! workspace is set so that capture never allocates. Inside a capture, GEMMs go through
//! [`crate::cublas::Cublas::record`], which has the graph keep their buffers and the workspace alive
//! (a GEMM on the capturing stream outside `record` is refused). Warm each shape up once
//! outside the capture, so that cuBLAS's one-time setup happens there.
//!
//! # Discovery
//!
//! Capture the work twice, with different allocations of the buffers you declare dynamic
//! ([`crate::foreign::Dynamic`]: a base address and a length). [`crate::foreign::discover_graphs`]`(&first,
//! &second, &dyn_first, &dyn_second)` reads every kernel node's parameters (`kernelParams` or
//! the `extra` buffer, with `cuFuncGetParamInfo`'s layout, words inside by-value structs
//! included) and accepts a word only where each capture holds its own allocation's address
//! plus the same interior offset. Every other difference is reported
//! ([`crate::foreign::Discovery::unexplained`], an [`crate::foreign::Unexplained`] each), never guessed, and so
//! are dynamic buffers no node reads ([`crate::foreign::Discovery::unseen`]). On an H200, a captured
//! sequence of five GEMMs (bf16 M = 1, 16, 64; f32 M = 1, 16; N = K = 4096: 8 kernel nodes, 3
//! of them `nvjet` kernels taking their parameters through `extra`) was rebound to fresh A, B
//! and C before each of 100 replays with no synchronization: 67 words in 8 nodes, every sampled
//! output right.
//!
//! [`crate::foreign::HostPatcher`] then rewrites the discovered words before each launch, by host-side
//! node updates:
//!
//! ```no_run
//! use graph_rt::{CaptureMode, Context, DeviceBuffer};
//! use graph_rt::cublas::{Cublas, Op as CublasOp};
//! use graph_rt::foreign::discover_graphs;
//! use graph_rt::{Graph, Stream};
//! use graph_rt::foreign::{Dynamic, HostPatcher};
//!
//! # fn main() -> graph_rt::Result<()> {
//! let (m, d) = (16, 1024); // c (m×d) = a (m×d) · w (d×d), column-major
//! let ctx = Context::new(0)?;
//! let stream = Stream::new(&ctx)?;
//! let blas = Cublas::new(&stream)?;
//! let w = DeviceBuffer::from_host(&ctx, &vec![0.01f32; d * d])?;
//! let io = || DeviceBuffer::<f32>::zeroed(&ctx, m * d);
//! let gemm = |b: &Cublas, a: &DeviceBuffer<f32>, c: &mut DeviceBuffer<f32>| {
//!     b.sgemm(CublasOp::N, CublasOp::N, m, d, d, 1.0, a, m, &w, d, 0.0, c, m)
//! };
//! let capture = |a: &DeviceBuffer<f32>, c: &mut DeviceBuffer<f32>| -> graph_rt::Result<Graph> {
//!     stream.capture(CaptureMode::Global, |s| blas.record(s, |b| gemm(b, a, c)))
//! };
//! let dynamic = |b: &DeviceBuffer<f32>| Dynamic { base: b.as_raw(), len: b.num_bytes() as u64 };
//! let (a0, mut c0, a1, mut c1) = (io()?, io()?, io()?, io()?);
//! gemm(&blas, &a0, &mut c0)?; // warm-up, outside the capture
//! let (first, second) = (capture(&a0, &mut c0)?, capture(&a1, &mut c1)?);
//! let (snapshots, discovery) =
//!     discover_graphs(&first, &second, &[dynamic(&a0), dynamic(&c0)], &[dynamic(&a1), dynamic(&c1)])?;
//! let mut patcher = HostPatcher::new(&snapshots, &discovery, 2)?; // refuses unexplained words
//! let mut exec = first.instantiate()?;
//! let mut kept = Vec::new();
//! for _ in 0..10 {
//!     let (a, c) = (io()?, io()?);
//!     // SAFETY: buffers laid out as the captured ones, kept until the synchronize below.
//!     unsafe { patcher.rebind(&mut exec, &[a.as_raw(), c.as_raw()])? };
//!     exec.launch(&stream)?;
//!     kept.push((a, c));
//! }
//! stream.synchronize()?;
//! # Ok(()) }
//! ```
//!
//! # The in-graph prelude
//!
//! [`crate::foreign::Prelude::install`]`(&mut graph, &table, &snapshots, &discovery, &dynamic, &slots,
//! options)` binds each dynamic buffer to an argument-table slot (see [`super::table`]). The
//! two captures record the table's refresh first; install before instantiating. The prelude
//! marks the discovered nodes device-updatable and makes the graph's table refresh also patch
//! every discovered word from the table (`cudaGraphKernelNodeSetParam`; shipped as cubins for
//! sm_80 / sm_90 built with no toolkit), so a replay is rebound by binding slots, as for
//! table-form kernels, with no kernel added; each replay is launched by
//! [`crate::foreign::Prelude::launch`]. Where the cubin does not load (another GPU,
//! [`crate::foreign::Prelude::device_support`] says why) or when asked
//! ([`crate::foreign::PreludeOptions`]`::host_only`), the same words are rewritten from the host before
//! each launch, and [`crate::foreign::PreludeReport`] says so and why.
//!
//! CUDA's rules for graphs with device-updatable nodes are typed errors: a second exec while
//! one exists, [`crate::Graph::try_clone`], [`crate::GraphExec::update`] /
//! [`crate::GraphExec::try_update`] ([`crate::UpdateFailureKind::DeviceUpdatable`]), embedding
//! the graph as a child. graph-rt uploads the exec before its first launch and after host-side
//! updates, as CUDA requires.
//!
//! ```no_run
//! use graph_rt::{ArgTable, CaptureMode, Context, DeviceBuffer};
//! use graph_rt::cublas::{Cublas, Op as CublasOp};
//! use graph_rt::foreign::discover_graphs;
//! use graph_rt::{Graph, Stream, TableOptions};
//! use graph_rt::foreign::{Dynamic, Prelude, PreludeOptions};
//!
//! # fn main() -> graph_rt::Result<()> {
//! let (m, d) = (16, 1024);
//! let ctx = Context::new(0)?;
//! let stream = Stream::new(&ctx)?;
//! let blas = Cublas::new(&stream)?;
//! let w = DeviceBuffer::from_host(&ctx, &vec![0.01f32; d * d])?;
//! let io = || DeviceBuffer::<f32>::zeroed(&ctx, m * d);
//! let gemm = |b: &Cublas, a: &DeviceBuffer<f32>, c: &mut DeviceBuffer<f32>| {
//!     b.sgemm(CublasOp::N, CublasOp::N, m, d, d, 1.0, a, m, &w, d, 0.0, c, m)
//! };
//! let mut table = ArgTable::new(&ctx, TableOptions::default())?;
//! // Slots for a and c: 16-byte aligned, at least as long as the captured buffers.
//! let (sa, sc) = (table.ptr_slot_with::<f32>(16, m * d)?, table.ptr_slot_with::<f32>(16, m * d)?);
//! let mut capture = |a: &DeviceBuffer<f32>, c: &mut DeviceBuffer<f32>| -> graph_rt::Result<Graph> {
//!     stream.capture(CaptureMode::Global, |s| {
//!         table.record_refresh(s)?; // first
//!         blas.record(s, |b| gemm(b, a, c))
//!     })
//! };
//! let dynamic = |b: &DeviceBuffer<f32>| Dynamic { base: b.as_raw(), len: b.num_bytes() as u64 };
//! let (a0, mut c0, a1, mut c1) = (io()?, io()?, io()?, io()?);
//! gemm(&blas, &a0, &mut c0)?; // warm-up, outside the capture
//! let (mut first, second) = (capture(&a0, &mut c0)?, capture(&a1, &mut c1)?);
//! let dyn_first = [dynamic(&a0), dynamic(&c0)];
//! let (snapshots, discovery) =
//!     discover_graphs(&first, &second, &dyn_first, &[dynamic(&a1), dynamic(&c1)])?;
//! let slots = [sa.erased(), sc.erased()];
//! let options = PreludeOptions::default();
//! let mut prelude =
//!     Prelude::install(&mut first, &table, &snapshots, &discovery, &dyn_first, &slots, options)?;
//! println!("{}", prelude.report()); // on the device, or on the host and why
//! let mut exec = first.instantiate()?;
//! for _ in 0..10 {
//!     let (a, c) = (io()?, io()?);
//!     table.bind(&sa, &a)?;
//!     table.bind(&sc, &c)?;
//!     prelude.launch(&mut table, &mut exec, &stream)?; // the table keeps a and c alive
//! }
//! stream.synchronize()?;
//! # Ok(()) }
//! ```
//!
//! The repository's `layers` bench (8 decode-like layers of cuBLAS GEMM → bias + GELU →
//! GEMM → residual, input, output and weights rebound every replay) mixes both: the shipped
//! kernels in table form and the prelude for cuBLAS, or the prelude for every kernel. Its
//! `layers` example builds the stack on the step API ([`crate::manual::step`]), which does the
//! discovery and the prelude's installation itself.
