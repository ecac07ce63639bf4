//! Basics: eager launches, errors, host transfers, programmatic dependent launch, and handles
//! made elsewhere.
//!
//! # A launch
//!
//! A [`crate::Context`] (the primary context of a device) gives streams, buffers and modules;
//! a kernel is a [`crate::Function`] of a [`crate::Module`] loaded from PTX or a cubin.
//!
//! ```no_run
//! use graph_rt::{Context, DeviceBuffer, LaunchConfig, Module, Stream};
//!
//! # fn main() -> graph_rt::Result<()> {
//! let ctx = Context::new(0)?; // primary context of device 0
//! let stream = Stream::new(&ctx)?; // non-blocking stream
//! let axpy = Module::from_ptx(&ctx, graph_rt::kernels::AXPY.ptx)?.function("axpy_f32")?;
//! let x = DeviceBuffer::from_host(&ctx, &[1.0f32; 1024])?;
//! let mut y = DeviceBuffer::from_host(&ctx, &[2.0f32; 1024])?;
//! let cfg = LaunchConfig::for_elements(1024, 256);
//! // SAFETY: axpy_f32(float a, const float* x, float* y, int n) touches n elements of x and y.
//! unsafe { stream.launch(&axpy, &cfg, (3.0f32, &x, &mut y, 1024i32))? };
//! assert_eq!(y.read_on(&stream)?[0], 5.0); // ordered after the launch on `stream`
//! # Ok(()) }
//! ```
//!
//! # Launch arguments
//!
//! Arguments are tuples of [`crate::KernelArg`]s: numbers, `&DeviceBuffer<T>`, views
//! (`buf.slice(range)?`, a [`crate::DeviceView`]), or your own types (`KernelArg` is an
//! `unsafe trait` whose contract says what the parameter bytes must be and what must stay
//! alive). Code generators that know the arguments only at run time build a
//! [`crate::KernelArgList`], stored inline without allocating up to 32 arguments / 4 KiB.
//! Either form is checked against the kernel's parameter layout (`cuFuncGetParamInfo`) before
//! the launch: a wrong count or size is an error, and nothing is launched.
//! [`crate::LaunchConfig`]'s setters are infallible; a configuration the launch cannot take is
//! refused at the launch.
//!
//! ```no_run
//! # use graph_rt::{Context, DeviceBuffer, KernelArgList, LaunchConfig, Module, Stream};
//! # fn main() -> graph_rt::Result<()> {
//! # let ctx = Context::new(0)?;
//! # let stream = Stream::new(&ctx)?;
//! # let axpy = Module::from_ptx(&ctx, graph_rt::kernels::AXPY.ptx)?.function("axpy_f32")?;
//! # let x = DeviceBuffer::from_host(&ctx, &[1.0f32; 1024])?;
//! # let mut y = DeviceBuffer::from_host(&ctx, &[2.0f32; 1024])?;
//! let mut args = KernelArgList::new();
//! args.push(3.0f32)?.push(&x)?.push(&mut y)?.push(1024i32)?;
//! // SAFETY: as above: n elements of x and y.
//! unsafe { stream.launch(&axpy, &LaunchConfig::new(4u32, 256u32), &args)? };
//! # Ok(()) }
//! ```
//!
//! # Errors
//!
//! Every fallible call returns [`crate::Result`]; nothing panics. A driver error names the
//! CUDA call, the `CUresult` name and text, and what to do (`cuLaunchKernel failed:
//! CUDA_ERROR_INVALID_VALUE (invalid argument): a block of 2048 threads exceeds this kernel's
//! limit of 1024 threads per block`). A driver function missing from the installed driver is
//! an error at that call naming the function and the driver version that has it; no driver at
//! all is an error saying `libcuda.so.1` could not be loaded and why. Misuses graph-rt checks
//! itself are errors too, before the call does anything and with nothing changed:
//! [`crate::Error::Misuse`], whose [`crate::Misuse`] says which (an argument layout that is not
//! the kernel's, a slot or binding set of another table, a misaligned or too short buffer, an
//! unbound slot, a capturing stream, copies of different lengths, a zero GEMM dimension, a
//! Triton argument that breaks its specialization, …) for code to match on, and
//! whose message says it in words with what to do.
//!
//! ```no_run
//! use graph_rt::{ArgTable, Context, DeviceBuffer, Misuse, TableOptions};
//!
//! # fn main() -> graph_rt::Result<()> {
//! let ctx = Context::new(0)?;
//! let (mut a, mut b) = (
//!     ArgTable::new(&ctx, TableOptions::default())?,
//!     ArgTable::new(&ctx, TableOptions::default())?,
//! );
//! let slot_of_b = b.ptr_slot::<f32>()?;
//! let buf = DeviceBuffer::<f32>::zeroed(&ctx, 1024)?;
//! let e = a.bind(&slot_of_b, &buf).unwrap_err();
//! assert_eq!(e.misuse_kind(), Some(&Misuse::OtherTable));
//! let short = DeviceBuffer::<f32>::zeroed(&ctx, 3)?;
//! let mut dst = DeviceBuffer::<f32>::zeroed(&ctx, 4)?;
//! let e = dst.copy_from_device(&short).unwrap_err();
//! assert_eq!(e.misuse_kind(), Some(&Misuse::LengthMismatch { ours: 4, theirs: 3 }));
//! # Ok(()) }
//! ```
//!
//! `CUDA_SYS_SIMULATE_DRIVER_VERSION=12040` makes the process behave as a CUDA 12.4 driver when
//! resolving functions, to check that a program uses nothing newer.
//!
//! ```no_run
//! # fn main() {
//! match graph_rt::Context::new(0) {
//!     Ok(ctx) => println!("device 0: {:?}", ctx.device().name()),
//!     Err(e) => eprintln!("no GPU: {e}"), // e.g. libcuda.so.1 could not be loaded, and why
//! }
//! # }
//! ```
//!
//! # Host transfers
//!
//! [`crate::DeviceBuffer::read_on`], [`crate::DeviceBuffer::copy_to_host_on`] and
//! [`crate::DeviceBuffer::write_on`] are ordered on a stream and wait for that stream only.
//! The unordered [`crate::DeviceBuffer::to_vec`] and [`crate::DeviceBuffer::copy_to_host`] wait
//! for the whole context first, so they never return stale data (at that cost).
//!
//! # Programmatic dependent launch
//!
//! On compute capability 9.0+,
//! [`crate::LaunchConfig::programmatic_stream_serialization`] lets a kernel be scheduled while
//! the previous one on the stream still runs. Captured (see [`super::capture`]), such launches
//! become programmatic graph edges: [`crate::Graph::edges`] reports each edge's
//! [`crate::EdgeKind`]. The kernel must wait (`griddepcontrol.wait`,
//! `cudaGridDependencySynchronize()`) before it reads its predecessor's output;
//! [`crate::kernels::CHAIN_PDL`] is the chain kernel written so.
//!
//! ```no_run
//! # use graph_rt::{CaptureMode, Context, DeviceBuffer, EdgeKind, LaunchConfig, Module, Stream};
//! # fn main() -> graph_rt::Result<()> {
//! # let ctx = Context::new(0)?;
//! # let stream = Stream::new(&ctx)?;
//! let add1 = Module::from_ptx(&ctx, graph_rt::kernels::CHAIN_PDL.ptx)?.function("add1")?;
//! let cfg = LaunchConfig::for_elements(4096, 256).programmatic_stream_serialization();
//! let (x, y, z) = (
//!     DeviceBuffer::<f32>::zeroed(&ctx, 4096)?,
//!     DeviceBuffer::<f32>::zeroed(&ctx, 4096)?,
//!     DeviceBuffer::<f32>::zeroed(&ctx, 4096)?,
//! );
//! let graph = stream.capture(CaptureMode::Global, |s| {
//!     // SAFETY: add1(const float* x, float* y, int n) over n elements of distinct buffers.
//!     unsafe {
//!         s.launch(&add1, &cfg, (&x, &y, 4096i32))?;
//!         s.launch(&add1, &cfg, (&y, &z, 4096i32))?;
//!     }
//!     Ok(())
//! })?;
//! let edges = graph.edges()?;
//! assert!(edges.iter().any(|e| e.kind == EdgeKind::Programmatic));
//! # Ok(()) }
//! ```
//!
//! # Handles made elsewhere
//!
//! Every type has `as_raw()`, and contexts, streams, events, buffers, modules, functions and
//! graphs made by PyTorch, cuBLAS or cudarc are taken in by an `unsafe from_raw()` (never
//! destroyed by graph-rt, except a wrapped graph, which it owns). [`crate::GraphExec`] and
//! [`crate::PinnedHostBuffer`] have `as_raw()` only: an exec's per-node updates need the graph
//! it was made from, and a pinned buffer's length and owner cannot be recovered from a
//! pointer.
//!
//! With the feature `cudarc` (cudarc 0.19), `Context::from_cudarc`, `Stream::from_cudarc` and
//! `DeviceBuffer::from_cudarc` (which moves a `CudaSlice` in without copying) are in the
//! `graph_rt::cudarc` module. graph-rt enables only cudarc's `driver`; the application picks
//! cudarc's CUDA version (a `cuda-*` feature or `CUDARC_CUDA_VERSION`) and linking. With
//! cudarc's defaults and two streams in a context, cudarc's launches on its slices wait on and
//! record events, which a capture refuses (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`). Move the
//! slices into graph-rt (`DeviceBuffer::from_cudarc`), or opt in with the `unsafe`
//! `Stream::from_cudarc_pausing_tracking`, whose captures pause cudarc's event tracking for the
//! context and restore it on every way out, errors and panics included (its contract is in the
//! `cudarc` module's docs). A `From<DriverError>` turns cudarc's errors into graph-rt's.
//! A cuBLAS handle a framework owns is lent with `Cublas::borrow_raw` (graph-rt's stream and
//! workspace while lent, the framework's stream given back on drop).
