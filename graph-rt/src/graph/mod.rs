//! CUDA graphs: capture, explicit construction, nodes, executable graphs and their updates, and
//! what execs keep alive while launches may read it.
//!
//! Depends on `driver/` and `launch/`.

mod build;
mod capture;
mod exec;
#[allow(clippy::module_inception)]
mod graph;
mod identity;
mod node;
mod raw_node;
mod retention;
mod update;

pub use capture::{CaptureMode, CaptureScope};
pub use exec::{GraphExec, InstantiateOptions};
pub use graph::{Graph, GraphAllocation, MemoryNode};
pub use identity::CapturedNode;
pub use node::{Edge, EdgeKind, Node, NodeKind};
pub(crate) use raw_node::{
    kernel_node_params, make_device_updatable, node_type, CopyNodeParams, DeviceOperand, Operand,
};
pub use update::{ExecUpdate, UpdateFailure, UpdateFailureKind};
