//! Driver calls on raw node handles that other folders need (the prelude's device-updatable
//! nodes, pointer discovery's reading of kernel nodes): here, so that every driver call stays in
//! `driver/`, `launch/` and `graph/`.

use graph_rt_sys::{CUgraphNode, CUgraphNodeType, CUDA_KERNEL_NODE_PARAMS};

use crate::driver::cu;
use crate::error::{Error, Result};

/// Sets the device-updatable attribute on `node` and returns its device handle.
///
/// # Safety
/// `node` must be a kernel node of a live graph the caller has locked.
pub(crate) unsafe fn make_device_updatable(node: CUgraphNode) -> Result<u64> {
    use graph_rt_sys::CUlaunchAttributeID as Id;
    const ID: Id = Id::CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
    // SAFETY: a plain-data union; all zeros is a valid value of every member.
    let mut v: graph_rt_sys::CUkernelNodeAttrValue = unsafe { std::mem::zeroed() };
    v.deviceUpdatableKernelNode.deviceUpdatable = 1;
    // SAFETY: the caller's promise; `v` lives across the call.
    unsafe { cu!(cuGraphKernelNodeSetAttribute(node, ID, &v)) }?;
    // SAFETY: as above; the driver fills `v`.
    unsafe { cu!(cuGraphKernelNodeGetAttribute(node, ID, &mut v)) }?;
    // SAFETY: the member the attribute fills.
    let dev = unsafe { v.deviceUpdatableKernelNode.devNode } as u64;
    if dev == 0 {
        // Not a misuse: the driver did not do what it documents.
        return Err(Error::invalid(
            "cuGraphKernelNodeGetAttribute",
            "the driver gave no device handle for a device-updatable node",
        ));
    }
    Ok(dev)
}

/// What node `node` does (`cuGraphNodeGetType`).
///
/// # Safety
/// `node` must be a node of a live graph.
pub(crate) unsafe fn node_type(node: CUgraphNode) -> Result<CUgraphNodeType> {
    let mut t = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
    // SAFETY: the caller's promise; valid out-pointer.
    unsafe { cu!(cuGraphNodeGetType(node, &mut t)) }?;
    Ok(t)
}

/// The parameters of kernel node `node` (`cuGraphKernelNodeGetParams`).
///
/// # Safety
/// `node` must be a kernel node of a live graph; the pointers in what this returns stay valid
/// while no one changes the node (hold the graph's lock while reading them).
pub(crate) unsafe fn kernel_node_params(node: CUgraphNode) -> Result<CUDA_KERNEL_NODE_PARAMS> {
    let mut p = CUDA_KERNEL_NODE_PARAMS::default();
    // SAFETY: the caller's promise; the driver fills `p`.
    unsafe { cu!(cuGraphKernelNodeGetParams(node, &mut p)) }?;
    Ok(p)
}
