//!
//! graph-rt captures GPU work once, replays it as one CUDA graph, and changes what the replay
//! reads and writes without capturing again. It loads the NVIDIA driver at run time
//! (`libcuda.so.1`), so programs build anywhere and run on any driver of CUDA 12.4 or newer.
//! The crate to depend on is `graph-rt` (this one): the core at its root
//! (`graph_rt::Context`, `graph_rt::ArgTable`, …), the features in modules ([`crate::table`],
//! [`crate::triton`], [`crate::foreign`], [`crate::cublas`], [`crate::nccl`], [`crate::choose`],
//! [`crate::calibrate`], [`crate::step`], [`crate::profile`]), the raw driver bindings as [`crate::sys`], the shipped kernels as
//! [`crate::kernels`] and the PTX pass as [`crate::ptx`].
//!
//! The examples of these chapters are compiled by `cargo test --doc` but not run (they need a
//! GPU); the repository's `examples/` folder runs the same workflows end to end and checks
//! their results (`cargo run --release --example table`).
//!
//! # Chapters
//!
//! 1. [Basics](crate::manual::basics): contexts, streams, buffers and eager launches; errors;
//!    host transfers; programmatic dependent launch; handles made elsewhere (PyTorch, cuBLAS,
//!    cudarc).
//! 2. [Capture](crate::manual::capture): capture once and replay; rebinding an exec node by
//!    node or by a whole-graph update; what graphs and execs keep alive.
//! 3. [The argument table](crate::manual::table): kernels in table form read their pointers
//!    and scalars from slots, so a replay is rebound by host writes; prepared binding sets;
//!    where table forms come from (the PTX pass).
//! 4. [Triton](crate::manual::triton): Triton kernels loaded from Triton's cache, launched as
//!    Triton launches them, in their original or table form.
//! 5. [Foreign kernels](crate::manual::foreign): kernels graph-rt cannot rewrite (cuBLAS,
//!    cuDNN, precompiled cubins): pointer discovery from two captures, host-side patching,
//!    and the in-graph prelude that rewrites the discovered words on the device from table
//!    slots.
//! 6. [Choosing](crate::manual::choose): the cost model measured on the device, and the choice
//!    of rebinding mechanism for a graph.
//! 7. [Steps](crate::manual::step): one closure of cuBLAS, Triton and graph-rt kernels captured
//!    once and replayed with one call, its buffers and scalars rebound every call.
//! 8. [Memory inside a step](crate::manual::memory): a closure that allocates its
//!    intermediates as a framework does; the graph's memory nodes, their rules, one memory for
//!    many steps, and what a step holds.
//! 9. [The profiler](crate::manual::profile): keep a step's graph only where it beats eager,
//!    decisions kept across processes, drift watched; a step split into graph and eager runs.
//! 10. Several GPUs: [`crate::nccl`] (its module docs are the chapter): NCCL communicators of one
//!    rank a GPU, their collectives eagerly, in groups, in captures and in a step
//!    ([`crate::step::StepScope::nccl`]), rebound by discovery and the prelude like cuBLAS.
//!
//! # Rebinding: which mechanism for which kernels
//!
//! | the graph's kernels | mechanism | chapter |
//! |---|---|---|
//! | any | per-node update ([`crate::GraphExec::set_kernel_args`]), or re-capture + [`crate::GraphExec::update`] | [`capture`](crate::manual::capture) |
//! | shipped, nvcc/NVRTC or Triton PTX | argument table (with PDL on compute capability 9.0+) | [`table`](crate::manual::table), [`triton`](crate::manual::triton) |
//! | cuBLAS, cuDNN, cubins | discovery, then the in-graph prelude or host patching | [`foreign`](crate::manual::foreign) |
//! | NCCL collectives | discovery, then the in-graph prelude (through a step) | [`crate::nccl`] |
//! | a mix, or unsure | measure, then [`crate::choose::choose`] | [`choose`](crate::manual::choose) |

pub mod basics;
pub mod capture;
pub mod choose;
pub mod foreign;
pub mod memory;
pub mod profile;
pub mod step;
pub mod table;
pub mod triton;
