//! Graph nodes: the handle, what a node does, and the parameter blocks graph-rt builds for
//! kernel, copy and memset nodes.

use bytemuck::Pod;
use std::ffi::c_void;

use cuda_sys::{CUgraphNode, CUgraphNodeType};

use crate::error::{Error, Result};
use crate::launch::LaunchConfig;
use crate::memory::DeviceBuffer;
use crate::module::Function;

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
            Err(Error::invalid(
                call,
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

pub(crate) fn kernel_params(
    f: &Function,
    c: &LaunchConfig,
    params: *mut *mut c_void,
) -> cuda_sys::CUDA_KERNEL_NODE_PARAMS {
    cuda_sys::CUDA_KERNEL_NODE_PARAMS {
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

pub(crate) fn copy_params<T: Pod>(
    dst: &DeviceBuffer<T>,
    src: &DeviceBuffer<T>,
) -> cuda_sys::CUDA_MEMCPY3D {
    let device = cuda_sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    cuda_sys::CUDA_MEMCPY3D {
        srcMemoryType: device,
        srcDevice: src.as_raw(),
        dstMemoryType: device,
        dstDevice: dst.as_raw(),
        WidthInBytes: dst.num_bytes(),
        Height: 1,
        Depth: 1,
        ..Default::default()
    }
}

pub(crate) fn memset_params<T: Pod>(
    call: &'static str,
    dst: &DeviceBuffer<T>,
    value: u32,
) -> Result<cuda_sys::CUDA_MEMSET_NODE_PARAMS> {
    if dst.num_bytes() % 4 != 0 || dst.is_empty() {
        return Err(Error::invalid(
            call,
            format!("{} bytes is not a non-empty multiple of 4", dst.num_bytes()),
        ));
    }
    Ok(cuda_sys::CUDA_MEMSET_NODE_PARAMS {
        dst: dst.as_raw(),
        pitch: 0,
        value,
        elementSize: 4,
        width: dst.num_bytes() / 4,
        height: 1,
    })
}
