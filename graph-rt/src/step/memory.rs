//! Memory a step's closure allocates inside its capture: graph-rt's [`StepScope::alloc`] and a
//! framework's stream-ordered allocations (cudarc's `alloc`, `alloc_zeros`) become the graph's
//! allocation nodes, their frees its free nodes. CUDA's rules for such a graph, and what they
//! mean for a step:
//!
//! - one exec of the graph at a time, and no clone: the step has one exec, and its graph is
//!   never cloned;
//! - a free node frees only an address an allocation node made: a closure that frees memory
//!   made before the step (a framework dropping an earlier tensor) breaks the capture (the
//!   driver refuses the free) or is refused here ([`Misuse::FreedInCapture`]); the step then
//!   runs eagerly with that reason ([`StepOptions::fail_on_capture_error`]: an error);
//! - a graph whose allocation outlives a launch cannot launch again until it is freed: every
//!   allocation the capture makes must be freed in it ([`Misuse::AllocationKept`] otherwise),
//!   so the memory is valid during a replay only. A step's outputs are its declared buffers,
//!   not allocations of its closure.
//!
//! [`StepScope::alloc`]: super::StepScope::alloc
//! [`StepOptions::fail_on_capture_error`]: super::StepOptions::fail_on_capture_error

use crate::error::{Error, Misuse, Result};
use crate::graph::MemoryNode;

/// The device memory a step's graph holds, by part, each measured on its own when the graph is
/// made (see [`StepMode::Graph`](super::StepMode::Graph)'s `build`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepMemory {
    /// Bytes the graph's allocation nodes allocate at each replay (the sum of their sizes):
    /// memory of the device's graph-memory pool, which graphs replayed in one stream's order
    /// share (the driver maps one physical range for allocations that never live at once).
    pub graph_allocations: u64,
    /// What the driver's graph-memory pool grew by (reserved, `cuDeviceGetGraphMemAttribute`)
    /// when the exec was uploaded: less than `graph_allocations` when steps made before it on
    /// the stream left memory it reuses.
    pub graph_reserved: u64,
    /// The exec's own driver memory: free device memory (`cuMemGetInfo`) before instantiating
    /// less after, in whole allocation granules.
    pub exec: u64,
    /// The in-graph prelude's list of words to rewrite (0 when words are rewritten from the
    /// host, or none is).
    pub prelude: u64,
    /// The step's parameter table in device memory (its mapped host mirrors are host memory).
    pub table: u64,
    /// The graph memory expected before the capture: the most the device's stream-ordered pool
    /// lent at once during the closure's eager run (`Step::new` runs it once), less what it lent
    /// before (`None` when the pool's mark could not be read).
    pub estimate: Option<u64>,
}

impl StepMemory {
    /// What the graph holds beyond what an eager step holds: its graph memory (as reserved
    /// for it), its exec and its prelude.
    pub fn held_by_graph(&self) -> u64 {
        self.graph_reserved + self.exec + self.prelude
    }
}

/// The bytes `memory`'s allocation nodes allocate.
pub(super) fn allocated_bytes(memory: &[MemoryNode]) -> u64 {
    memory
        .iter()
        .map(|m| match m {
            MemoryNode::Alloc(a) => a.bytes as u64,
            MemoryNode::Free(_) => 0,
        })
        .sum()
}

/// Refuses a capture whose memory nodes (`memory`, in node order) free what no allocation
/// node of it made, or leave an allocation unfreed.
pub(super) fn check_memory_nodes(memory: &[MemoryNode]) -> Result<()> {
    const CALL: &str = "Step::new";
    let allocations: Vec<_> = memory
        .iter()
        .filter_map(|m| match m {
            MemoryNode::Alloc(a) => Some(*a),
            MemoryNode::Free(_) => None,
        })
        .collect();
    // A free frees the allocation live at that address then: the driver may give one address
    // to allocations whose lives do not overlap.
    let mut freed = vec![false; allocations.len()];
    let mut made = 0;
    for m in memory {
        let ptr = match m {
            MemoryNode::Alloc(_) => {
                made += 1;
                continue;
            }
            MemoryNode::Free(ptr) => ptr,
        };
        let live = (0..made).find(|&k| !freed[k] && allocations[k].ptr == *ptr);
        match live {
            Some(k) => freed[k] = true,
            None => {
                return Err(Error::misuse(
                    CALL,
                    Misuse::FreedInCapture,
                    format!(
                        "the closure freed memory at {ptr:#x} that its capture did not allocate (a tensor made before the step, dropped inside it): keep what was made before the step alive past the closure; the step runs eagerly"
                    ),
                ))
            }
        }
    }
    if let Some(allocation) = freed.iter().position(|f| !f) {
        let bytes = allocations[allocation].bytes;
        return Err(Error::misuse(
            CALL,
            Misuse::AllocationKept { allocation },
            format!(
                "allocation {allocation} ({bytes} bytes) of the closure is not freed before it returns, and a graph with a live allocation cannot launch again: drop what the closure allocates inside it (outputs are declared buffers); the step runs eagerly"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphAllocation;

    fn alloc(ptr: u64, bytes: usize) -> MemoryNode {
        MemoryNode::Alloc(GraphAllocation { ptr, bytes })
    }

    #[test]
    fn allocations_that_share_an_address_one_after_the_other_are_each_freed() {
        let m = [
            alloc(0x1000, 64),
            MemoryNode::Free(0x1000),
            alloc(0x1000, 64),
            MemoryNode::Free(0x1000),
        ];
        assert!(check_memory_nodes(&m).is_ok());
        let twice = [
            alloc(0x1000, 64),
            MemoryNode::Free(0x1000),
            MemoryNode::Free(0x1000),
        ];
        assert!(
            check_memory_nodes(&twice).is_err(),
            "a second free of one allocation"
        );
    }

    #[test]
    fn every_allocation_freed_in_the_capture_is_accepted() {
        let m = [
            alloc(0x1000, 64),
            alloc(0x2000, 128),
            MemoryNode::Free(0x2000),
            MemoryNode::Free(0x1000),
        ];
        assert!(check_memory_nodes(&m).is_ok());
        assert!(check_memory_nodes(&[]).is_ok());
    }

    #[test]
    fn a_kept_allocation_or_a_free_of_other_memory_is_refused() {
        let kept = [
            alloc(0x1000, 64),
            alloc(0x2000, 128),
            MemoryNode::Free(0x1000),
        ];
        let e = check_memory_nodes(&kept).unwrap_err();
        assert_eq!(
            e.misuse_kind(),
            Some(&Misuse::AllocationKept { allocation: 1 })
        );
        let other = [
            alloc(0x1000, 64),
            MemoryNode::Free(0x1000),
            MemoryNode::Free(0x9000),
        ];
        let e = check_memory_nodes(&other).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&Misuse::FreedInCapture));
        assert_eq!(e.call(), Some("Step::new"));
    }
}
