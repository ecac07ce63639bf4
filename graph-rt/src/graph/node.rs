//! Graph nodes: the handle, what a node does, and the parameter blocks graph-rt builds for
//! kernel, copy and memset nodes.

use bytemuck::Pod;
use std::ffi::c_void;

use graph_rt_sys::{CUgraphNode, CUgraphNodeType};

use crate::driver::DeviceBuffer;
use crate::driver::Function;
use crate::error::{Error, Misuse, Result};
use crate::launch::LaunchConfig;

/// A node of a graph: a plain handle, valid while its graph lives. It remembers which graph it
/// belongs to, so that graph-rt refuses it anywhere else (a node of a dropped graph included)
/// instead of handing the driver a dangling handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Node {
    pub(crate) raw: CUgraphNode,
    pub(crate) graph: u64,
}

impl Node {
    /// The raw `CUgraphNode`.
    pub fn as_raw(&self) -> CUgraphNode {
        self.raw
    }

    pub(crate) fn key(&self) -> usize {
        self.raw as usize
    }

    /// The raw handle, if the node belongs to the graph `graph`.
    pub(crate) fn raw_in(&self, graph: u64, call: &'static str) -> Result<CUgraphNode> {
        if self.graph == graph {
            Ok(self.raw)
        } else {
            Err(Error::misuse(
                call,
                Misuse::OtherGraph,
                "the node belongs to another graph (or to one that is gone)",
            ))
        }
    }
}

/// What a node does (`cuGraphNodeGetType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A kernel launch.
    Kernel,
    /// A memory copy.
    Memcpy,
    /// A memory set.
    Memset,
    /// A host callback.
    Host,
    /// A child graph.
    ChildGraph,
    /// No operation (a join point).
    Empty,
    /// Waits on an event.
    WaitEvent,
    /// Records an event.
    EventRecord,
    /// Allocates graph memory.
    MemAlloc,
    /// Frees graph memory.
    MemFree,
    /// A conditional node.
    Conditional,
    /// Another kind (semaphores, batch memory operations, …), by its raw value.
    Other(u32),
}

impl From<CUgraphNodeType> for NodeKind {
    fn from(t: CUgraphNodeType) -> Self {
        match t {
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL => NodeKind::Kernel,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY => NodeKind::Memcpy,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET => NodeKind::Memset,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST => NodeKind::Host,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_GRAPH => NodeKind::ChildGraph,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY => NodeKind::Empty,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_WAIT_EVENT => NodeKind::WaitEvent,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_EVENT_RECORD => NodeKind::EventRecord,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC => NodeKind::MemAlloc,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE => NodeKind::MemFree,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL => NodeKind::Conditional,
            other => NodeKind::Other(other.0),
        }
    }
}

/// An edge of a graph: `to` depends on `from`, in the way `kind` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Edge {
    /// The node depended on.
    pub from: Node,
    /// The dependent node.
    pub to: Node,
    /// How `to` depends on `from`.
    pub kind: EdgeKind,
}

/// How a node depends on another (`CUgraphEdgeData`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EdgeKind {
    /// `to` starts after `from` completed and its writes are visible.
    Full,
    /// Programmatic dependent launch between two kernel nodes (what a capture of launches
    /// configured with `LaunchConfig::programmatic_stream_serialization` makes): the kernel
    /// `to` may be scheduled once every block of `from` has triggered
    /// (`griddepcontrol.launch_dependents`) or exited, and must itself wait
    /// (`griddepcontrol.wait`) before it reads what `from` wrote.
    Programmatic,
    /// Kernel `to` may be scheduled once kernel `from` has been (launch-order edge).
    LaunchOrder,
    /// An edge this version does not name: the raw ports and dependency type.
    Other {
        /// `from_port`.
        from_port: u8,
        /// `to_port`.
        to_port: u8,
        /// `type` (`CUgraphDependencyType`).
        dependency_type: u8,
    },
}

impl From<graph_rt_sys::CUgraphEdgeData> for EdgeKind {
    fn from(d: graph_rt_sys::CUgraphEdgeData) -> Self {
        use graph_rt_sys::CUgraphDependencyType as T;
        let programmatic = T::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC.0 as u8;
        match (d.from_port as u32, d.to_port, d.type_) {
            (graph_rt_sys::CU_GRAPH_KERNEL_NODE_PORT_DEFAULT, 0, 0) => EdgeKind::Full,
            (graph_rt_sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC, 0, t) if t == programmatic => {
                EdgeKind::Programmatic
            }
            (graph_rt_sys::CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER, 0, t) if t == programmatic => {
                EdgeKind::LaunchOrder
            }
            _ => EdgeKind::Other {
                from_port: d.from_port,
                to_port: d.to_port,
                dependency_type: d.type_,
            },
        }
    }
}

impl From<EdgeKind> for graph_rt_sys::CUgraphEdgeData {
    fn from(kind: EdgeKind) -> Self {
        use graph_rt_sys::CUgraphDependencyType as T;
        let programmatic = T::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC.0 as u8;
        let (from_port, to_port, type_) = match kind {
            EdgeKind::Full => (graph_rt_sys::CU_GRAPH_KERNEL_NODE_PORT_DEFAULT as u8, 0, 0),
            EdgeKind::Programmatic => (
                graph_rt_sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8,
                0,
                programmatic,
            ),
            EdgeKind::LaunchOrder => (
                graph_rt_sys::CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER as u8,
                0,
                programmatic,
            ),
            EdgeKind::Other {
                from_port,
                to_port,
                dependency_type,
            } => (from_port, to_port, dependency_type),
        };
        Self {
            from_port,
            to_port,
            type_,
            ..Default::default()
        }
    }
}

pub(crate) fn kernel_params(
    f: &Function,
    c: &LaunchConfig,
    params: *mut *mut c_void,
) -> graph_rt_sys::CUDA_KERNEL_NODE_PARAMS {
    graph_rt_sys::CUDA_KERNEL_NODE_PARAMS {
        func: f.as_raw(),
        gridDimX: c.grid.x,
        gridDimY: c.grid.y,
        gridDimZ: c.grid.z,
        blockDimX: c.block.x,
        blockDimY: c.block.y,
        blockDimZ: c.block.z,
        sharedMemBytes: c.shared_mem_bytes,
        kernelParams: params,
        ..Default::default()
    }
}

/// The parameters of a copy of all of `src` into `dst` for `call`: lengths must match.
pub(crate) fn copy_params<T: Pod>(
    call: &'static str,
    dst: &DeviceBuffer<T>,
    src: &DeviceBuffer<T>,
) -> Result<graph_rt_sys::CUDA_MEMCPY3D> {
    if dst.len() != src.len() {
        return Err(Error::misuse(
            call,
            Misuse::LengthMismatch {
                ours: dst.len(),
                theirs: src.len(),
            },
            format!("copy of {} elements into {}", src.len(), dst.len()),
        ));
    }
    let device = graph_rt_sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    Ok(graph_rt_sys::CUDA_MEMCPY3D {
        srcMemoryType: device,
        srcDevice: src.as_raw(),
        dstMemoryType: device,
        dstDevice: dst.as_raw(),
        WidthInBytes: dst.num_bytes(),
        Height: 1,
        Depth: 1,
        ..Default::default()
    })
}

pub(crate) fn memset_params<T: Pod>(
    call: &'static str,
    dst: &DeviceBuffer<T>,
    value: u32,
) -> Result<graph_rt_sys::CUDA_MEMSET_NODE_PARAMS> {
    if dst.num_bytes() % 4 != 0 || dst.is_empty() {
        let misuse = if dst.is_empty() {
            Misuse::Empty
        } else {
            Misuse::NotMultiple { multiple: 4 }
        };
        return Err(Error::misuse(
            call,
            misuse,
            format!("{} bytes is not a non-empty multiple of 4", dst.num_bytes()),
        ));
    }
    Ok(graph_rt_sys::CUDA_MEMSET_NODE_PARAMS {
        dst: dst.as_raw(),
        pitch: 0,
        value,
        elementSize: 4,
        width: dst.num_bytes() / 4,
        height: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use graph_rt_sys::CUgraphEdgeData;

    fn data(from_port: u32, dependency_type: u32) -> CUgraphEdgeData {
        CUgraphEdgeData {
            from_port: from_port as u8,
            type_: dependency_type as u8,
            ..Default::default()
        }
    }

    #[test]
    fn edge_kinds_from_edge_data() {
        let programmatic =
            graph_rt_sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC.0;
        assert_eq!(EdgeKind::from(data(0, 0)), EdgeKind::Full);
        assert_eq!(
            EdgeKind::from(data(
                graph_rt_sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC,
                programmatic
            )),
            EdgeKind::Programmatic
        );
        assert_eq!(
            EdgeKind::from(data(
                graph_rt_sys::CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER,
                programmatic
            )),
            EdgeKind::LaunchOrder
        );
        for kind in [
            EdgeKind::Full,
            EdgeKind::Programmatic,
            EdgeKind::LaunchOrder,
        ] {
            assert_eq!(EdgeKind::from(CUgraphEdgeData::from(kind)), kind);
        }
        assert_eq!(
            EdgeKind::from(data(7, 3)),
            EdgeKind::Other {
                from_port: 7,
                to_port: 0,
                dependency_type: 3
            }
        );
    }
}
