//! Rebinding discovered parameter words from the host: per-node parameter updates of an exec
//! (`cuGraphExecKernelNodeSetParams`), for kernels graph-rt cannot rewrite.

use std::ffi::c_void;

use graph_rt_sys::{CUdeviceptr, CUDA_KERNEL_NODE_PARAMS};

use super::scan::{Discovery, Patch};
use super::snapshot::KernelSnapshot;
use crate::error::{Error, Misuse, Result};
use crate::graph::GraphExec;

struct PatchedNode {
    snap: KernelSnapshot,
    patches: Vec<Patch>,
    // Scratch: the bytes as the next update writes them.
    bytes: Vec<u8>,
}

/// Rewrites the discovered words of an exec's kernel nodes to new buffers' addresses, node by
/// node from the host. Made from the snapshots of the capture the exec was instantiated from
/// and a [`Discovery`] against a second capture.
pub struct HostPatcher {
    nodes: Vec<PatchedNode>,
    buffers: usize,
}

impl HostPatcher {
    /// The patcher of `discovery`'s patches on the nodes of `first` (the snapshots of the graph
    /// the exec is instantiated from). An error if the discovery names a node `first` lacks.
    ///
    /// A discovery that left differences unexplained is refused: those words would keep the
    /// first capture's values on every replay (addresses of buffers that may be gone). Use
    /// [`HostPatcher::with_unexplained`] when they are known to be harmless.
    pub fn new(first: &[KernelSnapshot], discovery: &Discovery, buffers: usize) -> Result<Self> {
        if !discovery.unexplained.is_empty() {
            return Err(Error::misuse(
                "HostPatcher::new",
                Misuse::Unexplained {
                    count: discovery.unexplained.len(),
                },
                format!(
                    "the discovery left {} difference(s) unexplained (first: {:?}): rebinding would leave them as captured",
                    discovery.unexplained.len(),
                    discovery.unexplained[0]
                ),
            ));
        }
        Self::with_unexplained(first, discovery, buffers)
    }

    /// As [`HostPatcher::new`], patching what was discovered even where other words differ
    /// between the captures (they keep the first capture's values).
    pub fn with_unexplained(
        first: &[KernelSnapshot],
        discovery: &Discovery,
        buffers: usize,
    ) -> Result<Self> {
        let mut patches = discovery.patches.clone();
        patches.sort_by_key(|p| (p.node, p.offset));
        let mut nodes: Vec<PatchedNode> = Vec::new();
        for p in &patches {
            let snap = first.get(p.node).ok_or_else(|| {
                let reason = format!("no kernel node {} among the snapshots", p.node);
                Error::misuse("HostPatcher::new", Misuse::DiscoveryMismatch, reason)
            })?;
            if p.buffer >= buffers || p.offset.saturating_add(8) > snap.params.bytes.len() {
                let reason = "a patch out of range of its node's parameters or the buffers";
                return Err(Error::misuse(
                    "HostPatcher::new",
                    Misuse::DiscoveryMismatch,
                    reason,
                ));
            }
            match nodes.last_mut() {
                Some(n) if n.snap.raw == snap.raw => n.patches.push(*p),
                _ => nodes.push(PatchedNode {
                    snap: snap.clone(),
                    patches: vec![*p],
                    bytes: snap.params.bytes.clone(),
                }),
            }
        }
        Ok(Self { nodes, buffers })
    }

    /// Kernel nodes rewritten on each rebinding.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Words rewritten on each rebinding.
    pub fn patch_count(&self) -> usize {
        self.nodes.iter().map(|n| n.patches.len()).sum()
    }

    /// Points every discovered word of `exec`'s nodes at buffer `k`'s new base address
    /// `bases[k]` (plus the word's interior offset), for the launches that follow.
    ///
    /// Each node is updated through the exec, as [`GraphExec::set_kernel_args`] updates one: a
    /// node of the graph the snapshots were read from is mapped to the exec's own after a
    /// whole-graph update or re-instantiation, and what an earlier rebinding of the node kept
    /// alive is released once the launches that may read it have finished. An exec whose graph
    /// has device-updatable nodes is refused: its in-graph prelude rewrites those words on the
    /// device at every launch, and a host update would first wait for the last launch.
    ///
    /// # Safety
    /// `exec` must be instantiated from the graph the snapshots were read from (or updated from
    /// a graph of the same kernels and launch dimensions); each `bases[k]` must address memory
    /// laid out as the buffer the capture used, valid for every launch until the next
    /// rebinding's launches have finished. The words not patched keep the first capture's
    /// values: what they address must stay valid as long.
    pub unsafe fn rebind(&mut self, exec: &mut GraphExec, bases: &[CUdeviceptr]) -> Result<()> {
        const CALL: &str = "HostPatcher::rebind";
        if exec.is_device_updatable() {
            return Err(Error::misuse(
                CALL,
                Misuse::DeviceUpdatable,
                "the exec's graph has device-updatable nodes (an in-graph prelude rewrites these words on the device): launch it through its Prelude instead",
            ));
        }
        if bases.len() != self.buffers {
            return Err(Error::misuse(
                CALL,
                Misuse::CountMismatch {
                    expected: self.buffers,
                    got: bases.len(),
                },
                format!(
                    "{} addresses for {} dynamic buffers",
                    bases.len(),
                    self.buffers
                ),
            ));
        }
        for n in &mut self.nodes {
            for p in &n.patches {
                let word = bases[p.buffer].wrapping_add(p.interior).to_le_bytes();
                n.bytes[p.offset..p.offset + 8].copy_from_slice(&word);
            }
            // SAFETY: forwarded (the node's kernel with the capture's parameters, the patched
            // words pointing at memory laid out as the captured buffers); the parameter values
            // live across the call, which copies them.
            unsafe { set_params(exec, &n.snap, &mut n.bytes)? };
        }
        Ok(())
    }
}

/// Sets `snap`'s node of `exec` to `bytes` as its parameters, in the form the capture used
/// (`kernelParams` pointers into `bytes`, or `extra`), through the exec's per-node path.
///
/// # Safety
/// `bytes` must be valid parameters of the node's kernel for every later replay (see
/// [`HostPatcher::rebind`]).
unsafe fn set_params(exec: &mut GraphExec, snap: &KernelSnapshot, bytes: &mut [u8]) -> Result<()> {
    let (grid, block, shared) = snap.dims;
    let mut p = CUDA_KERNEL_NODE_PARAMS {
        func: snap.func,
        gridDimX: grid[0],
        gridDimY: grid[1],
        gridDimZ: grid[2],
        blockDimX: block[0],
        blockDimY: block[1],
        blockDimZ: block[2],
        sharedMemBytes: shared,
        ..Default::default()
    };
    let base = bytes.as_mut_ptr();
    let mut ptrs: Vec<*mut c_void> = Vec::new();
    let mut size = bytes.len();
    let mut extra: [*mut c_void; 5];
    if snap.via_extra {
        extra = [
            graph_rt_sys::CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize as *mut c_void,
            base.cast(),
            graph_rt_sys::CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize as *mut c_void,
            (&mut size as *mut usize).cast(),
            graph_rt_sys::CU_LAUNCH_PARAM_END_AS_INT as usize as *mut c_void,
        ];
        p.extra = extra.as_mut_ptr();
    } else {
        ptrs = snap
            .params
            .layout
            .iter()
            .map(|&(offset, _)| base.wrapping_add(offset).cast())
            .collect();
        p.kernelParams = ptrs.as_mut_ptr();
    }
    // SAFETY: the caller's promise for the parameters; `p`'s pointers (into `bytes`, `ptrs`,
    // `extra`, `size`) live across the call.
    let r = unsafe { exec.set_kernel_params(snap.node, &p) };
    drop(ptrs);
    r
}

#[cfg(test)]
mod tests {
    use super::super::scan::Unexplained;
    use super::*;

    fn misuse(r: Result<HostPatcher>) -> Option<Misuse> {
        r.err().and_then(|e| e.misuse_kind().cloned())
    }

    #[test]
    fn discoveries_that_do_not_fit_are_named_misuses() {
        let patch = Patch {
            node: 0,
            offset: 0,
            buffer: 0,
            interior: 0,
        };
        // A patch of a node the snapshots lack.
        let discovery = Discovery {
            patches: vec![patch],
            ..Default::default()
        };
        assert_eq!(
            misuse(HostPatcher::new(&[], &discovery, 1)),
            Some(Misuse::DiscoveryMismatch)
        );
        // Differences left unexplained: refused by `new`, not by `with_unexplained`.
        let discovery = Discovery {
            unexplained: vec![Unexplained::NodeCount {
                first: 2,
                second: 3,
            }],
            ..Default::default()
        };
        assert_eq!(
            misuse(HostPatcher::new(&[], &discovery, 1)),
            Some(Misuse::Unexplained { count: 1 })
        );
        let patcher = HostPatcher::with_unexplained(&[], &discovery, 1).unwrap();
        assert_eq!((patcher.node_count(), patcher.patch_count()), (0, 0));
    }
}
