//! # Memory inside a step
//!
//! A framework's forward pass allocates its intermediates as it goes: a tensor per activation,
//! a workspace per GEMM, freed when the last handle drops. A step's closure may do the same.
//! Allocations made in stream order on the capturing stream (`cuMemAllocAsync`: cudarc's
//! `alloc` and `alloc_zeros`, graph-rt's [`StepScope::alloc`]) become the graph's allocation
//! nodes, and their frees (cudarc frees a slice when it drops) its free nodes. Each replay
//! allocates and frees them again, from the device's graph-memory pool, at the addresses the
//! capture gave them: discovery and validation read those addresses as the graph's own, so
//! nothing about them is left unexplained and nothing needs rebinding.
//!
//! ```no_run
//! use graph_rt::step::{Step, StepOptions, StepParams};
//! # use graph_rt::{kernels, Context, DeviceBuffer, LaunchConfig, Module, Stream};
//! # fn main() -> graph_rt::Result<()> {
//! # let ctx = Context::new(0)?;
//! # let stream = Stream::new(&ctx)?;
//! # let add1 = Module::from_ptx(&ctx, kernels::CHAIN.ptx)?.function("add1")?;
//! let mut p = StepParams::new(&ctx, 4)?;
//! let (x, y) = (p.buffer::<f32>(4096)?, p.buffer::<f32>(4096)?);
//! p.bind(&x, &DeviceBuffer::zeroed(&ctx, 4096)?)?;
//! p.bind(&y, &DeviceBuffer::zeroed(&ctx, 4096)?)?;
//! let cfg = LaunchConfig::for_elements(4096, 256);
//! let mut step = Step::new(&stream, p, StepOptions::default(), |s| {
//!     let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
//!     // An intermediate: an allocation node of the graph, freed (a free node) when it drops.
//!     let t = s.alloc::<f32>(4096)?;
//!     // SAFETY: add1 over 4096 floats of distinct buffers of 4096 floats.
//!     unsafe { s.launch(&add1, &cfg, (&xb, &*t, 4096i32))? };
//!     unsafe { s.launch(&add1, &cfg, (&*t, &yb, 4096i32)) }
//! })?;
//! step.run()?;
//! # Ok(()) }
//! ```
//!
//! The `step_memory` example does the same through cudarc (24 allocations, 1 GiB a call) and
//! checks a thousand calls against the closure run eagerly:
//! `cargo run --release --features cudarc --example step_memory`.
//!
//! ## The rules, and what they mean for a step
//!
//! CUDA allows a graph with memory nodes one exec at a time, never cloned, and a free node only
//! for an address one of its allocation nodes made. A step keeps to that: it has one exec and
//! never clones its graph.
//!
//! - **Free only what the closure allocated.** A closure that frees, inside the capture, memory
//!   made before the step (a framework dropping a tensor from an earlier call) breaks the
//!   capture: where graph-rt made the call, [`Misuse::FreedInCapture`] names it; otherwise the
//!   driver's error says which call broke it. The step then runs eagerly with that reason
//!   ([`EagerReason::CaptureFailed`]), or fails with
//!   [`StepOptions::fail_on_capture_error`]. Keep such tensors alive past the closure.
//! - **Free everything the closure allocated, before it returns.** A graph whose allocation
//!   outlives its launch cannot launch again until that memory is freed, so the step refuses a
//!   capture that keeps one ([`Misuse::AllocationKept`]) and runs eagerly. What a step hands
//!   out is a declared buffer, bound by the caller: the closure's own memory is valid during a
//!   replay only, and it cannot be bound to a table slot or a binding set
//!   ([`Misuse::GraphMemory`]). Nothing is freed twice: the graph frees what it allocates, and a
//!   framework's handle (cudarc's slice) frees only in the capture, as a node.
//! - **A tensor made before the step and read by it** is a buffer like any other: declare it
//!   ([`StepParams::buffer`]) when it changes between calls, or keep it alive as long as the
//!   step.
//!
//! The in-graph prelude's device-updatable nodes and memory nodes live in one graph: a step
//! that allocates still rewrites foreign kernels' words on the device. Where a driver refused
//! to instantiate them together, the step would capture again and rewrite from the host
//! ([`PreludeMode::Host`] says why).
//!
//! ## One memory for many steps
//!
//! Graph memory comes from one pool a device, which the driver shares between graphs that never
//! run at once: steps replayed on one stream hold about what the largest of them needs, not the
//! sum (the `step_memory` bench measures eight steps 1× to 16× apart). A step's exec maps its
//! memory when it is uploaded; a dropped step's exec is destroyed by the context's release
//! thread once its last launch has finished, and its memory trimmed back to the driver
//! (`cuDeviceGraphMemTrim`), with no synchronize. [`Context::trim_graph_memory`] returns what no
//! live exec holds when you ask, and [`Context::graph_memory`] reads the pool. graph-rt's own
//! allocations inside a step ([`StepScope::alloc`]) are graph memory too: they share the same
//! pool, with the driver's reuse between allocations whose lives do not overlap.
//!
//! ## What a step holds
//!
//! [`StepMode::Graph`]'s `build` says what the graph cost, with its memory by part
//! ([`StepMemory`]), each measured on its own: the graph's allocations and what the pool grew by
//! when the exec was uploaded (less than its allocations when steps before it left memory it
//! reuses), the exec's own driver memory, the prelude's list and the parameter table. Its
//! `estimate` is taken before the capture, from the closure's eager run (the stream-ordered
//! pool's high-water mark during it). The profiler charges a graph [`StepMemory::held_by_graph`]
//! and prints it in its report; a process with a `tracing` subscriber at the info level sees
//! each step's parts when its graph is made.
//!
//! [`StepScope::alloc`]: crate::step::StepScope::alloc
//! [`Misuse::FreedInCapture`]: crate::Misuse::FreedInCapture
//! [`Misuse::AllocationKept`]: crate::Misuse::AllocationKept
//! [`Misuse::GraphMemory`]: crate::Misuse::GraphMemory
//! [`EagerReason::CaptureFailed`]: crate::step::EagerReason::CaptureFailed
//! [`StepOptions::fail_on_capture_error`]: crate::step::StepOptions::fail_on_capture_error
//! [`StepParams::buffer`]: crate::step::StepParams::buffer
//! [`PreludeMode::Host`]: crate::prelude::PreludeMode::Host
//! [`Context::trim_graph_memory`]: crate::Context::trim_graph_memory
//! [`Context::graph_memory`]: crate::Context::graph_memory
//! [`StepMode::Graph`]: crate::step::StepMode::Graph
//! [`StepMemory`]: crate::step::StepMemory
//! [`StepMemory::held_by_graph`]: crate::step::StepMemory::held_by_graph
