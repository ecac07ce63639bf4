//! graph-rt: a CUDA runtime with safe CUDA-graph wrappers, for Rust ML frameworks. Capture GPU
//! work once, replay it as one graph, and change what it reads and writes between replays
//! without re-capturing. Start with the [`manual`].
//!
//! Data flows one way: [`Context`] → [`Stream`] → launch. Every type owns its driver handle and
//! releases it on drop without panicking (failures are logged and kept for
//! [`Context::take_deferred_errors`]); every type has `as_raw` and an `unsafe from_raw` so that
//! handles from PyTorch, cuBLAS or cudarc can be used.
//!
//! The root holds the core: devices, contexts, streams, events, buffers and views, modules and
//! launches, graphs, captures and execs, the [`ArgTable`], and the [`Error`] (with its
//! [`Misuse`]). The rest is by feature: [`table`] (slots, binding sets, table-form kernels),
//! [`triton`] (Triton's kernels), [`foreign`] (kernels graph-rt did not write: pointer
//! discovery, host patching, the in-graph prelude), [`cublas`], [`nccl`] (collectives of several GPUs), [`choose`] (the cost model and
//! the choice of rebinding mechanism) and [`calibrate`] (measuring that model on the device),
//! [`timing`] (how graph-rt measures), [`cudarc`] (interop, feature `cudarc`), and the raw
//! layers [`sys`] (driver bindings) and [`ptx`] (the PTX pass).
//!
//! ```no_run
//! use graph_rt::{Context, DeviceBuffer, LaunchConfig, Module, Stream};
//!
//! # fn main() -> graph_rt::Result<()> {
//! let ctx = Context::new(0)?;
//! let stream = Stream::new(&ctx)?;
//! let module = Module::from_ptx(&ctx, graph_rt_kernels::AXPY.ptx)?;
//! let axpy = module.function("axpy_f32")?;
//! let x = DeviceBuffer::from_host(&ctx, &[1.0f32; 1024])?;
//! let mut y = DeviceBuffer::from_host(&ctx, &[2.0f32; 1024])?;
//! // SAFETY: axpy_f32(float a, const float* x, float* y, int n) touches n elements of each.
//! unsafe { stream.launch(&axpy, &LaunchConfig::for_elements(1024, 256), (3.0f32, &x, &mut y, 1024i32))? };
//! stream.synchronize()?;
//! assert_eq!(y.to_vec()?[0], 5.0);
//! # Ok(()) }
//! ```
#![deny(
    unsafe_op_in_unsafe_fn,
    missing_docs,
    clippy::undocumented_unsafe_blocks
)]

// Modules depend on each other in one direction: `error`, `resource` <- `driver/` <- `launch/`
// <- `graph/` <- `table/` (scripts/check-module-cycles fails CI on a cycle between folders).
pub mod calibrate;
pub mod choose;
pub mod cublas;
#[cfg(feature = "cudarc")]
pub mod cudarc;
mod discover;
mod driver;
mod dylib;
mod error;
mod files;
mod graph;
mod launch;
pub mod nccl;
mod prelude;
pub mod profile;
mod resource;
pub mod step;
pub mod table;
pub mod timing;

/// The element types of device buffers and kernel arguments (bytemuck's `Pod`).
pub use bytemuck::Pod;
/// The 16-bit float types of [`Cublas::gemm_bf16`](cublas::Cublas::gemm_bf16) and
/// [`Cublas::gemm_f16`](cublas::Cublas::gemm_f16) buffers (the `half`
/// crate, as candle and burn use it): `DeviceBuffer<half::bf16>` and `DeviceBuffer<half::f16>`
/// are distinct types, so one cannot be passed where the other is meant.
pub use half;
pub mod triton;

/// Kernels graph-rt did not write (cuBLAS's, a library's): finding the device pointers in their
/// captured parameters ([`discover_graphs`](foreign::discover_graphs)), and rebinding them
/// between replays from the host ([`HostPatcher`](foreign::HostPatcher)) or in the graph
/// itself ([`Prelude`](foreign::Prelude), which rewrites them on the device from an
/// [`ArgTable`]'s slots). The manual's `foreign` chapter (`graph_rt::manual`) walks through it.
pub mod foreign {
    pub use crate::discover::{
        discover, discover_graphs, discover_with_internal, kernel_snapshots, Discovery, Dynamic,
        HostPatcher, KernelSnapshot, NodeParams, Patch, Unexplained,
    };
    pub use crate::prelude::{Prelude, PreludeMode, PreludeOptions, PreludeReport};
}

pub use driver::{
    current_raw as current_context_raw, driver_version, graph_features, init, CaptureStatus,
    Context, Device, DeviceBuffer, DeviceView, Event, EventFlags, Feature, Function, GraphMemory,
    MappedHostBuffer, Module, ParamInfo, PinnedHostBuffer, Stream, StreamFlags,
};
pub use error::{check, Error, Misuse, Result};
pub use graph::{
    CaptureMode, CaptureScope, CapturedNode, Edge, EdgeKind, ExecUpdate, Graph, GraphAllocation,
    GraphExec, InstantiateOptions, MemoryNode, Node, NodeKind, UpdateFailure, UpdateFailureKind,
};
pub use launch::{
    ArgSlot, Dim3, KernelArg, KernelArgList, KernelArgs, LaunchConfig, Launcher, ScalarKind,
};
pub use resource::Resource;
pub use table::{ArgTable, TableOptions};

/// The kernels graph-rt ships (CUDA C sources, their PTX, the table forms, the prelude).
pub use graph_rt_kernels as kernels;
/// The PTX pass (crate `graph-rt-ptx`): table forms of any kernel's PTX.
pub use graph_rt_ptx as ptx;
/// The raw driver bindings this crate is built on.
pub use graph_rt_sys as sys;

/// Fault injection for graph-rt's own tests: built only with `RUSTFLAGS="--cfg graph_rt_fault"`
/// (no feature turns it on). See [`fault::fail`].
#[cfg(graph_rt_fault)]
pub mod fault {
    pub use crate::driver::fault::{fail, Fault};
}

/// The manual: graph-rt's workflows, each with an example that compiles (start here).
pub mod manual;

#[cfg(test)]
mod tests;
