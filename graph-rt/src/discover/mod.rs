//! Kernels graph-rt cannot rewrite (cuBLAS, cuDNN, precompiled cubins): which parameter words
//! of which kernel nodes hold the addresses of buffers the caller declares dynamic, found by
//! comparing two captures of the same work with different allocations (`scan`), read from
//! graphs whoever launched into them (`snapshot`), and rebound per launch by host-side node
//! updates (`patch`).
//!
//! Depends on `driver/` and `graph/`.

mod patch;
mod scan;
mod snapshot;

pub use patch::HostPatcher;
pub use scan::{
    discover, discover_with_internal, Discovery, Dynamic, NodeParams, Patch, Unexplained,
};
pub use snapshot::{kernel_snapshots, KernelSnapshot};

use crate::error::{Error, Misuse, Result};
use crate::graph::Graph;

/// Discovers the dynamic words of `first`'s kernel nodes against `second`, a capture of the
/// same work whose dynamic buffer `k` was `dyn_second[k]` where `first`'s was `dyn_first[k]`.
/// Memory the captures allocated themselves (their allocation nodes, paired in node order) is
/// graph-internal ([`discover_with_internal`]). Returns `first`'s snapshots (for
/// [`HostPatcher::new`]) and the discovery.
pub fn discover_graphs(
    first: &Graph,
    second: &Graph,
    dyn_first: &[Dynamic],
    dyn_second: &[Dynamic],
) -> Result<(Vec<KernelSnapshot>, Discovery)> {
    let a = kernel_snapshots(first)?;
    let b = kernel_snapshots(second)?;
    let pa: Vec<NodeParams> = a.iter().map(|s| s.params.clone()).collect();
    let pb: Vec<NodeParams> = b.iter().map(|s| s.params.clone()).collect();
    let internal = |g: &Graph| -> Result<Vec<Dynamic>> {
        Ok(g.mem_alloc_ranges()?
            .into_iter()
            .map(|a| Dynamic {
                base: a.ptr,
                len: a.bytes as u64,
            })
            .collect())
    };
    let (ia, ib) = (internal(first)?, internal(second)?);
    let d = discover_with_internal(&pa, &pb, dyn_first, dyn_second, &ia, &ib).ok_or_else(|| {
        Error::misuse(
            "discover_graphs",
            Misuse::DiscoveryMismatch,
            "the dynamic buffers are declared differently in the two captures, or a buffer's two allocations overlap",
        )
    })?;
    Ok((a, d))
}
