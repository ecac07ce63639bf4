//! Safe CUDA runtime types and CUDA-graph wrappers: the core of graph-rt.
//!
//! Data flows one way: [`Context`] → [`Stream`] → launch. Every type owns its driver handle and
//! releases it on drop without panicking (failures are logged and kept for
//! [`Context::take_deferred_errors`]); every type has `as_raw` and an `unsafe from_raw` so that
//! handles from PyTorch, cuBLAS or cudarc can be used.
//!
//! ```no_run
//! use graph_rt_core::{Context, DeviceBuffer, LaunchConfig, Module, Stream};
//!
//! # fn main() -> graph_rt_core::Result<()> {
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
mod calibrate;
mod choose;
mod cublas;
#[cfg(feature = "cudarc")]
pub mod cudarc;
mod discover;
mod driver;
mod error;
mod graph;
mod launch;
mod prelude;
mod resource;
mod table;
pub mod timing;

/// The 16-bit float types of [`Cublas::gemm_bf16`] and [`Cublas::gemm_f16`] buffers (the `half`
/// crate, as candle and burn use it): `DeviceBuffer<half::bf16>` and `DeviceBuffer<half::f16>`
/// are distinct types, so one cannot be passed where the other is meant.
pub use half;
mod triton;

pub use calibrate::{
    calibrate, chain_shape, chain_step, cost_model, CalibrateOptions, ChainSetup, ChainStep,
    ExtraMechanism, ModelSource, Recalibration,
};
pub use choose::{choose, Choice, CostModel, GraphShape, Line, Mechanism, Prediction};
pub use cublas::{Cublas, Op as CublasOp};
pub use discover::{
    discover, discover_graphs, kernel_snapshots, Discovery, Dynamic, HostPatcher, KernelSnapshot,
    NodeParams, Patch, Unexplained,
};
pub use driver::{
    current_raw as current_context_raw, driver_version, graph_features, init, CaptureStatus,
    Context, Device, DeviceBuffer, DeviceView, Event, EventFlags, Feature, Function,
    MappedHostBuffer, Module, ParamInfo, PinnedHostBuffer, Stream, StreamFlags,
};
pub use error::{check, Error, Misuse, Result};
pub use graph::{
    CaptureMode, CaptureScope, CapturedNode, Edge, EdgeKind, ExecUpdate, Graph, GraphAllocation,
    GraphExec, InstantiateOptions, Node, NodeKind, UpdateFailure, UpdateFailureKind,
};
pub use launch::{
    ArgSlot, Dim3, KernelArg, KernelArgList, KernelArgs, LaunchConfig, Launcher, ScalarKind,
};
pub use prelude::{Prelude, PreludeMode, PreludeOptions, PreludeReport};
pub use resource::Resource;
pub use table::{
    ArgTable, BindingSet, BindingSetBuilder, PtrSlot, ScalarSlot, SlotRef, SlotScalar, TableKernel,
    TableOptions, TableParam, TableStats,
};
pub use triton::{
    ttir_args, TritonArg, TritonFiles, TritonForm, TritonKernel, TritonMetadata, TritonParam,
    TtirArg,
};

/// The raw driver bindings this crate is built on.
pub use cuda_sys as sys;
/// The PTX pass (crate `graph-rt-ptx`): table forms of any kernel's PTX.
pub use graph_rt_ptx as ptx;

#[cfg(test)]
mod tests;
