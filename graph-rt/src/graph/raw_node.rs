//! Driver calls on raw node handles that other folders need (the prelude's device-updatable
//! nodes, pointer discovery's reading of kernel nodes): here, so that every driver call stays in
//! `driver/`, `launch/` and `graph/`.

use graph_rt_sys::{CUgraphNode, CUgraphNodeType, CUDA_KERNEL_NODE_PARAMS};

use super::graph::{GraphAllocation, MemoryNode};
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

/// A copy or set node's parameters, as the driver gives them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CopyNodeParams {
    /// A copy (`cuGraphMemcpyNodeGetParams`).
    Copy(graph_rt_sys::CUDA_MEMCPY3D),
    /// A set (`cuGraphMemsetNodeGetParams`).
    Set(graph_rt_sys::CUDA_MEMSET_NODE_PARAMS),
}

/// Which operand of a copy or set node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operand {
    /// A copy's source.
    Source,
    /// A copy's or a set's destination.
    Destination,
}

/// One device-side operand of a copy or set node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceOperand {
    /// Which one.
    pub(crate) operand: Operand,
    /// Its base address: the field a rebinding changes (the offsets stay).
    pub(crate) base: u64,
    /// The device memory it covers: first byte, bytes.
    pub(crate) range: (u64, u64),
}

impl CopyNodeParams {
    /// The device-side operands (a copy's host or array operands are left out): a copy's
    /// source, then its destination; a set's destination.
    pub(crate) fn operands(&self) -> Vec<DeviceOperand> {
        use graph_rt_sys::CUmemorytype as M;
        match self {
            Self::Copy(p) => {
                let rows = (p.Height.max(1) * p.Depth.max(1)) as u64;
                let mut out = Vec::with_capacity(2);
                for (operand, kind, base, x, y, z, pitch, height) in [
                    (
                        Operand::Source,
                        p.srcMemoryType,
                        p.srcDevice,
                        p.srcXInBytes,
                        p.srcY,
                        p.srcZ,
                        p.srcPitch,
                        p.srcHeight,
                    ),
                    (
                        Operand::Destination,
                        p.dstMemoryType,
                        p.dstDevice,
                        p.dstXInBytes,
                        p.dstY,
                        p.dstZ,
                        p.dstPitch,
                        p.dstHeight,
                    ),
                ] {
                    if kind == M::CU_MEMORYTYPE_DEVICE || kind == M::CU_MEMORYTYPE_UNIFIED {
                        let pitch = pitch.max(p.WidthInBytes) as u64;
                        let start = base + x as u64 + (y as u64 + z as u64 * height as u64) * pitch;
                        out.push(DeviceOperand {
                            operand,
                            base,
                            range: (start, pitch * (rows - 1) + p.WidthInBytes as u64),
                        });
                    }
                }
                out
            }
            Self::Set(p) => {
                let row = p.width as u64 * p.elementSize as u64;
                let pitch = (p.pitch as u64).max(row);
                vec![DeviceOperand {
                    operand: Operand::Destination,
                    base: p.dst,
                    range: (p.dst, pitch * (p.height.max(1) as u64 - 1) + row),
                }]
            }
        }
    }

    /// The same parameters with `operand`'s base address at `base` (a set has no source: it is
    /// left as it is).
    pub(crate) fn with_base(mut self, operand: Operand, base: u64) -> Self {
        match (&mut self, operand) {
            (Self::Copy(p), Operand::Source) => p.srcDevice = base,
            (Self::Copy(p), Operand::Destination) => p.dstDevice = base,
            (Self::Set(p), Operand::Destination) => p.dst = base,
            (Self::Set(_), Operand::Source) => {}
        }
        self
    }
}

/// A copy or set node's parameters; `None` for other kinds of node.
///
/// # Safety
/// `node` must be a node of a live graph.
pub(crate) unsafe fn copy_node_params(node: CUgraphNode) -> Result<Option<CopyNodeParams>> {
    // SAFETY: forwarded to the caller.
    match unsafe { node_type(node) }? {
        CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY => {
            // SAFETY: CUDA_MEMCPY3D is plain data, all zeros a valid value.
            let mut p: graph_rt_sys::CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
            // SAFETY: a copy node of a live graph (the caller's promise); valid out-pointer.
            unsafe { cu!(cuGraphMemcpyNodeGetParams(node, &mut p)) }?;
            Ok(Some(CopyNodeParams::Copy(p)))
        }
        CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET => {
            let mut p = graph_rt_sys::CUDA_MEMSET_NODE_PARAMS::default();
            // SAFETY: a set node of a live graph (the caller's promise); valid out-pointer.
            unsafe { cu!(cuGraphMemsetNodeGetParams(node, &mut p)) }?;
            Ok(Some(CopyNodeParams::Set(p)))
        }
        _ => Ok(None),
    }
}

/// What memory node `node` allocates (`cuGraphMemAllocNodeGetParams`: its address and size) or
/// frees (`cuGraphMemFreeNodeGetParams`: the address), `None` for other kinds of node.
///
/// # Safety
/// `node` must be a node of a live graph.
pub(crate) unsafe fn memory_node(node: CUgraphNode) -> Result<Option<MemoryNode>> {
    // SAFETY: forwarded to the caller.
    match unsafe { node_type(node) }? {
        CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
            let mut p = graph_rt_sys::CUDA_MEM_ALLOC_NODE_PARAMS::default();
            // SAFETY: an allocation node of a live graph (the caller's promise); the driver
            // fills `p` (its access descriptors point into the node, and are not read).
            unsafe { cu!(cuGraphMemAllocNodeGetParams(node, &mut p)) }?;
            Ok(Some(MemoryNode::Alloc(GraphAllocation {
                ptr: p.dptr,
                bytes: p.bytesize,
            })))
        }
        CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE => {
            let mut ptr = 0;
            // SAFETY: a free node of a live graph (the caller's promise); valid out-pointer.
            unsafe { cu!(cuGraphMemFreeNodeGetParams(node, &mut ptr)) }?;
            Ok(Some(MemoryNode::Free(ptr)))
        }
        _ => Ok(None),
    }
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

#[cfg(test)]
mod tests {
    use super::{CopyNodeParams, DeviceOperand, Operand};
    use graph_rt_sys::CUmemorytype as M;

    fn copy(src: u64, dst: u64, src_x: usize, bytes: usize) -> CopyNodeParams {
        // SAFETY: plain data, all zeros a valid value.
        let mut p: graph_rt_sys::CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
        (p.srcMemoryType, p.dstMemoryType) = (M::CU_MEMORYTYPE_DEVICE, M::CU_MEMORYTYPE_DEVICE);
        (p.srcDevice, p.dstDevice, p.srcXInBytes) = (src, dst, src_x);
        (p.WidthInBytes, p.Height, p.Depth) = (bytes, 1, 1);
        CopyNodeParams::Copy(p)
    }

    #[test]
    fn a_copys_operands_are_its_device_source_and_destination_with_their_offsets() {
        let p = copy(0x1000, 0x9000, 0x40, 256);
        assert_eq!(
            p.operands(),
            vec![
                DeviceOperand {
                    operand: Operand::Source,
                    base: 0x1000,
                    range: (0x1040, 256),
                },
                DeviceOperand {
                    operand: Operand::Destination,
                    base: 0x9000,
                    range: (0x9000, 256),
                },
            ]
        );
        // Moved: the base changes, the offset into it stays.
        let moved = p.with_base(Operand::Source, 0x5000);
        assert_eq!(moved.operands()[0].range, (0x5040, 256));
        assert_eq!(moved.operands()[1], p.operands()[1]);
    }

    #[test]
    fn a_host_operand_is_no_device_operand_and_a_set_has_only_a_destination() {
        let CopyNodeParams::Copy(mut p) = copy(0, 0x9000, 0, 64) else {
            unreachable!()
        };
        p.srcMemoryType = M::CU_MEMORYTYPE_HOST;
        let ops = CopyNodeParams::Copy(p).operands();
        assert_eq!(ops.len(), 1);
        assert_eq!(ops[0].operand, Operand::Destination);
        let set = CopyNodeParams::Set(graph_rt_sys::CUDA_MEMSET_NODE_PARAMS {
            dst: 0x2000,
            pitch: 0,
            value: 0,
            elementSize: 4,
            width: 16,
            height: 2,
        });
        assert_eq!(
            set.operands(),
            vec![DeviceOperand {
                operand: Operand::Destination,
                base: 0x2000,
                range: (0x2000, 128),
            }]
        );
        let moved = set.with_base(Operand::Source, 0x7000);
        assert_eq!(
            moved.operands()[0].base,
            0x2000,
            "a set has no source to move"
        );
        assert_eq!(
            set.with_base(Operand::Destination, 0x7000).operands()[0].base,
            0x7000
        );
    }
}
