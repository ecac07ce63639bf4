//! Reading the kernel nodes of a graph, whoever launched them: each node's kernel, launch
//! dimensions and parameter bytes, whether the launch passed them as `kernelParams` or through
//! the `extra` buffer (as cuBLAS's Hopper kernels do).

use std::ffi::c_void;

use graph_rt_sys::{CUfunction, CUgraphNode, CUgraphNodeType};

use super::scan::NodeParams;
use crate::driver::param_layout_of;
use crate::error::{Error, Result};
use crate::graph::{kernel_node_params, node_type, Graph, Node};

/// One kernel node of a graph, as read from the graph.
#[derive(Debug, Clone)]
pub struct KernelSnapshot {
    /// The node (of the graph it was read from).
    pub node: Node,
    pub(crate) raw: CUgraphNode,
    pub(crate) func: CUfunction,
    pub(crate) dims: ([u32; 3], [u32; 3], u32),
    /// The parameters: kernel, bytes and layout.
    pub params: NodeParams,
    /// Whether the launch passed its parameters through `extra` (one buffer) rather than
    /// `kernelParams` (one pointer per parameter).
    pub via_extra: bool,
}

// SAFETY: the raw handles are identities of nodes and kernels of a graph the caller keeps; they
// are used only through driver calls on that graph's exec, as any thread may.
unsafe impl Send for KernelSnapshot {}

/// The kernel nodes of `graph`, in `cuGraphGetNodes` order (the order a capture created them),
/// each with its parameter bytes and layout (`cuFuncGetParamInfo`).
pub fn kernel_snapshots(graph: &Graph) -> Result<Vec<KernelSnapshot>> {
    const CALL: &str = "cuGraphKernelNodeGetParams";
    let mut out = Vec::new();
    let nodes = graph.nodes()?;
    // One lock for the whole read: the parameter pointers the driver returns stay valid while
    // no one changes the graph.
    let _guard = graph.handle.lock(CALL)?;
    for node in nodes {
        let raw = node.as_raw();
        // SAFETY: a node of this live graph.
        if unsafe { node_type(raw) }? != CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
            continue;
        }
        // SAFETY: a kernel node of this live graph; the pointers in `p` stay valid while the
        // node is unchanged (we hold the graph's lock while reading them).
        let p = unsafe { kernel_node_params(raw) }?;
        // SAFETY: the node's kernel handle, valid while the graph lives.
        let layout = unsafe { param_layout_of(p.func)? };
        let (bytes, via_extra) = if !p.kernelParams.is_null() {
            let end = layout.iter().map(|l| l.offset + l.size).max().unwrap_or(0);
            let mut bytes = vec![0u8; end];
            for (i, l) in layout.iter().enumerate() {
                // SAFETY: kernelParams holds one pointer per parameter, each to `size` bytes.
                let src = unsafe { *p.kernelParams.add(i) } as *const u8;
                if src.is_null() {
                    // Not a misuse: the driver (or the node's maker) left the parameter out.
                    return Err(Error::invalid(CALL, format!("parameter {i} has no value")));
                }
                // SAFETY: as above; `bytes` holds `end` bytes, so the range fits.
                unsafe {
                    std::ptr::copy_nonoverlapping(src, bytes.as_mut_ptr().add(l.offset), l.size)
                };
            }
            (bytes, false)
        } else if !p.extra.is_null() {
            // SAFETY: `extra` is the launch's key/value list, ended by CU_LAUNCH_PARAM_END.
            (unsafe { extra_buffer(p.extra)? }, true)
        } else {
            (Vec::new(), false)
        };
        out.push(KernelSnapshot {
            node,
            raw,
            func: p.func,
            dims: (
                [p.gridDimX, p.gridDimY, p.gridDimZ],
                [p.blockDimX, p.blockDimY, p.blockDimZ],
                p.sharedMemBytes,
            ),
            params: NodeParams {
                function: p.func as usize,
                bytes,
                layout: layout.iter().map(|l| (l.offset, l.size)).collect(),
            },
            via_extra,
        });
    }
    Ok(out)
}

/// The parameter buffer of an `extra` list (`CU_LAUNCH_PARAM_BUFFER_POINTER`, `_SIZE`).
///
/// # Safety
/// `extra` must be a list of key/value pointers ended by `CU_LAUNCH_PARAM_END`, as the driver
/// returns it for a kernel node.
unsafe fn extra_buffer(extra: *mut *mut c_void) -> Result<Vec<u8>> {
    const END: usize = graph_rt_sys::CU_LAUNCH_PARAM_END_AS_INT as usize;
    const POINTER: usize = graph_rt_sys::CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize;
    const SIZE: usize = graph_rt_sys::CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize;
    let (mut buf, mut size) = (std::ptr::null::<u8>(), None);
    let mut i = 0;
    loop {
        // SAFETY: within the list (the caller's promise); it ends with END.
        let key = unsafe { *extra.add(i) } as usize;
        if key == END {
            break;
        }
        // SAFETY: every key but END is followed by its value.
        let value = unsafe { *extra.add(i + 1) };
        match key {
            POINTER => buf = value as *const u8,
            // SAFETY: the value of BUFFER_SIZE points to a size_t.
            SIZE => size = Some(unsafe { *(value as *const usize) }),
            _ => {}
        }
        i += 2;
        if i > 64 {
            // Not a misuse, as below: the node's `extra` list is malformed.
            return Err(Error::invalid(
                "cuGraphKernelNodeGetParams",
                "an `extra` list without its end",
            ));
        }
    }
    match (buf.is_null(), size) {
        (false, Some(n)) => {
            // SAFETY: the buffer holds `n` bytes (BUFFER_SIZE).
            Ok(unsafe { std::slice::from_raw_parts(buf, n) }.to_vec())
        }
        // Not a misuse: the node (another library's launch) gave an `extra` list graph-rt cannot
        // read.
        _ => Err(Error::invalid(
            "cuGraphKernelNodeGetParams",
            "an `extra` list without a buffer and its size",
        )),
    }
}
