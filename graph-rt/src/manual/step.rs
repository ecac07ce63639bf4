//! Steps: one closure that enqueues a step — cuBLAS, Triton, graph-rt's kernels — captured once
//! and replayed with one call, its buffers and scalars rebound at every call.
//!
//! [`crate::step::StepParams`] declares what changes between calls: buffers
//! ([`crate::step::StepParams::buffer`], at least as long as the step's kernels read) and scalars
//! ([`crate::step::StepParams::scalar`], such as a decode position), each a slot of the step's
//! argument table, each bound before the step is made. The closure enqueues the step through a
//! [`crate::step::StepScope`]: [`crate::step::StepScope::buffer`] gives the buffer bound for
//! the run (for cuBLAS and plain kernels), [`crate::step::Buf::slot`] the slot (for table-form
//! and Triton table-form kernels).
//!
//! [`crate::step::Step::new`] runs the closure eagerly once (modules loaded, cuBLAS's setup
//! done), captures it twice (the second time with stand-ins for the declared buffers), finds
//! where the captured kernels that graph-rt cannot rewrite take those buffers, and has the
//! in-graph prelude rewrite those words at every replay; table-form kernels read the slots
//! themselves. A copy or set over a declared buffer (a framework's contiguous copy, NCCL's
//! one-rank collective, [`crate::step::StepScope::copy`]) is a copy node, which no kernel
//! rewrites: each call points it at the buffer bound then, from the host, before the launch
//! (one driver call a copy whose buffers changed; such a step's prelude rewrites from the
//! host too). [`crate::step::Step::kernels`] lists the kernels a replay runs. Then each call is [`crate::step::Step::bind`] / [`crate::step::Step::set`] and
//! [`crate::step::Step::run`]: one launch, every bound buffer kept alive until the replays that
//! read it have finished. [`crate::step::Step::mode`] says how the step runs: replays of one
//! graph (kernel nodes, words the prelude rewrites, where), or eagerly and why — a call through
//! the scope that a capture refuses ([`crate::step::StepScope::synchronize`],
//! [`crate::step::StepScope::read`], [`crate::step::StepScope::upload`]: the call is named), or
//! a capture that failed (the error). A closure whose work differs between its runs beyond the
//! declared buffers is refused: [`crate::Misuse::StepChanged`].
//!
//! A GEMM, a Triton kernel (`add_kernel(x, y, out, n)`, 1024 elements a program, in table form)
//! and a shipped kernel (table-form `add1`), input and output fresh every call:
//!
//! ```no_run
//! use graph_rt::cublas::{Cublas, Op};
//! use graph_rt::step::{Step, StepOptions, StepParams};
//! use graph_rt::triton::{TritonArg, TritonFiles, TritonForm, TritonKernel};
//! use graph_rt::{kernels, Context, DeviceBuffer, LaunchConfig, Module, Stream};
//!
//! # fn main() -> graph_rt::Result<()> {
//! # let dir = std::path::Path::new("triton-fixtures/add"); // a folder of Triton's cache
//! let (m, d, n) = (16, 1024, 16 * 1024);
//! let ctx = Context::new(0)?;
//! let stream = Stream::new(&ctx)?;
//! let blas = Cublas::new(&stream)?;
//! let add = TritonKernel::load(&ctx, &TritonFiles::read(dir, "add_kernel")?, TritonForm::Table(Default::default()))?;
//! let add1 = Module::from_ptx(&ctx, kernels::CHAIN_TABLE.ptx)?.function("add1")?;
//! let w = DeviceBuffer::from_host(&ctx, &vec![0.01f32; d * d])?;
//! let fresh = || DeviceBuffer::<f32>::zeroed(&ctx, n);
//! let mut p = StepParams::new(&ctx, 8)?;
//! let [x, h, g, y] = [(); 4].map(|_| p.buffer::<f32>(n));
//! let (x, h, g, y) = (x?, h?, g?, y?);
//! for b in [&x, &h, &g, &y] { p.bind(b, &fresh()?)?; }
//! let (cfg, slot) = (LaunchConfig::for_elements(n, 256), TritonArg::ptr_slot);
//! let mut step = Step::new(&stream, p, StepOptions::default(), |s| {
//!     let (xb, mut hb) = (s.buffer(&x)?, s.buffer(&h)?); // h = x · w, rewritten by the prelude
//!     s.cublas(&blas, |b| b.sgemm(Op::N, Op::N, m, d, d, 1.0, &xb, m, &w, d, 0.0, &mut hb, m))?;
//!     // SAFETY: g = h + h and y = g + 1 over n floats, through slots bound to n-float buffers.
//!     unsafe { s.launch_triton(&add, [16, 1, 1], &[slot(h.slot()), slot(h.slot()), slot(g.slot()), TritonArg::i32(n as i32)])? };
//!     unsafe { s.launch(&add1, &cfg, (g.slot(), y.slot(), n as i32)) }
//! })?;
//! for _ in 0..100 {
//!     let (input, output) = (fresh()?, fresh()?);
//!     step.bind(&x, &input)?;
//!     step.bind(&y, &output)?; // the step keeps both alive until its replay has run
//!     step.run()?;
//! }
//! stream.synchronize()?;
//! # Ok(()) }
//! ```
//!
//! ## What a closure may depend on
//!
//! A step replays what its closure did when it was captured: the closure does not run at each
//! call. What it enqueues may depend only on what it declares — the buffers and scalars of its
//! [`crate::step::StepParams`] — and on what stays the same for the step's life (weights,
//! modules, handles, shapes fixed when it was made). A grid, a length, an offset into a buffer
//! or a choice of buffer taken from a host variable that changes between calls is not seen by
//! a replay: make it a [`crate::step::Scalar`] read by a table-form kernel, mask by a declared
//! length, or make one step per shape. The closure must also be idempotent apart from the
//! outputs it writes through its work: graph-rt runs it again (eagerly when made, captured when
//! it validates or recaptures), so a host-side counter it bumps or a buffer it allocates each
//! time is a closure that does other work each run.
//!
//! Validation checks this: [`crate::step::Step::validate`] captures the closure again with the
//! bindings made now and compares that capture with the step's graph node by node — kinds,
//! kernels, launch dimensions, every argument byte that is not a declared buffer's word, the
//! ranges of copies and sets. [`crate::step::StepOptions::validation`] schedules it: by
//! default the first 8 calls and every 256th in builds with debug assertions, none in release
//! builds ([`crate::step::Validation::every`] sets a period there). It runs before the call it
//! precedes, which therefore never replays stale work. A difference ([`crate::step::Divergence`],
//! naming the node and what changed) is [`crate::Misuse::StepDiverged`], after which the step
//! runs its closure eagerly; or, for a recapturable step with
//! [`crate::step::OnDivergence::Recapture`], a recapture. Between scheduled validations a
//! change goes unseen: validate more often while a closure is new, and on demand after
//! changing anything the closure reads.
//!
//! ```no_run
//! use graph_rt::step::{OnDivergence, Step, StepOptions, StepParams, Validation};
//! # use graph_rt::{kernels, Context, DeviceBuffer, LaunchConfig, Module, Stream};
//! # fn main() -> graph_rt::Result<()> {
//! # let ctx = Context::new(0)?;
//! # let stream = Stream::new(&ctx)?;
//! # let add1 = Module::from_ptx(&ctx, kernels::CHAIN.ptx)?.function("add1")?;
//! # let mut p = StepParams::new(&ctx, 4)?;
//! # let (x, y) = (p.buffer::<f32>(4096)?, p.buffer::<f32>(4096)?);
//! # p.bind(&x, &DeviceBuffer::zeroed(&ctx, 4096)?)?;
//! # p.bind(&y, &DeviceBuffer::zeroed(&ctx, 4096)?)?;
//! let n = std::cell::Cell::new(4096usize); // a host value the closure reads: not declared
//! let options = StepOptions {
//!     recapturable: true,
//!     validation: Validation::every(64).on_divergence(OnDivergence::Recapture),
//!     ..StepOptions::default()
//! };
//! let mut step = Step::new(&stream, p, options, |s| {
//!     let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
//!     // SAFETY: add1(x, y, n) over n ≤ 4096 floats of two 4096-float buffers.
//!     unsafe { s.launch(&add1, &LaunchConfig::for_elements(n.get(), 256), (&xb, &yb, n.get() as i32)) }
//! })?;
//! n.set(1000);
//! step.validate()?; // the grid and the length changed: recaptured
//! step.run()?;
//! # Ok(()) }
//! ```
//!
//! On a framework's own stream: a step's stream may be a cudarc stream
//! (`Stream::from_cudarc`, feature `cudarc`) or a raw `CUstream` another library made
//! (`Stream::from_raw`; the legacy and per-thread default streams are refused,
//! [`Misuse::DefaultStream`](crate::Misuse::DefaultStream)). The closure may launch through
//! the framework (cudarc's `launch_builder` with `s.buffer(&x)?.as_raw()` as the argument):
//! graph-rt finds the declared buffers' addresses in those nodes and rewrites them at every
//! call, as for cuBLAS. A cuBLAS handle the framework owns is lent with
//! [`Cublas::borrow_raw`](crate::cublas::Cublas::borrow_raw). Foreign buffers are bound as
//! `DeviceBuffer::from_cudarc` (a `CudaSlice` moved in) or
//! [`DeviceBuffer::from_raw_guarded`](crate::DeviceBuffer::from_raw_guarded) (a pointer and a
//! guard the step drops after the last replay reading it).
//!
//! Allocating inside a step: the closure may allocate its intermediates as a framework does —
//! [`StepScope::alloc`](crate::step::StepScope::alloc) (a
//! [`StepBuffer`](crate::step::StepBuffer) that borrows the scope), or cudarc's `alloc` and
//! `alloc_zeros` on the step's stream (stream-ordered, `cuMemAllocAsync`). In a capture each
//! allocation becomes an allocation node of the step's graph and each free (the buffer or the
//! slice dropped inside the closure) a free node; discovery and validation pair the two
//! captures' allocations in order, so their addresses are neither declared buffers nor
//! unexplained differences. CUDA's rules for such a graph make these the step's: one exec at a
//! time, never cloned; a free node only for an address an allocation node made (a closure that
//! drops a tensor made before the step is refused, [`Misuse::FreedInCapture`](crate::Misuse::FreedInCapture),
//! and the step runs eagerly); every allocation freed before the closure returns
//! ([`Misuse::AllocationKept`](crate::Misuse::AllocationKept) otherwise), so the memory is
//! valid during a replay only, at the same address in every replay. A step's outputs are its
//! declared buffers, never allocations of its closure. Where the driver does not instantiate
//! the in-graph prelude's nodes beside memory nodes, the step rewrites its words from the host
//! and says why in [`StepMode`](crate::step::StepMode)'s `prelude`.
//! The memory itself is the device's graph memory, which the driver keeps for graphs once
//! they have run: [`Context::graph_memory`](crate::Context::graph_memory) says how much is in
//! use and reserved; a dropped step's exec gives its share back to the driver once its last
//! replay has finished (graph-rt trims it on the context's release thread, with no
//! synchronize), and [`Context::trim_graph_memory`](crate::Context::trim_graph_memory) returns
//! what no exec holds at any time.
//!
//! Given a cost model (`StepOptions::cost_model`, from `calibrate::cost_model`), a step
//! predicts each mix over its kernels, reports it ([`MixReport`](crate::step::MixReport)),
//! rewrites from the host where that is predicted fastest and advises where the model prefers
//! the closure written the other way (plain kernels on `s.buffer(..)`, or table forms on
//! slots). What a step does not do: turn a table form into a plain kernel or back by itself,
//! or re-capture by itself when the closure's work changes after the step was made (the
//! closure does not run again; a step made
//! [`recapturable`](crate::step::StepOptions::recapturable) captures again when asked,
//! [`Step::recapture`](crate::step::Step::recapture)).
