//! Copies and sets over a step's declared buffers, pointed at the buffers bound now.
//!
//! A library's plain copy (candle's contiguous `copy`, NCCL's one-rank collective, a
//! framework's `cudaMemcpyAsync`, [`StepScope::copy`](super::StepScope::copy)) is a copy node in
//! a capture, whose operands neither the table nor the in-graph prelude reach (they rewrite
//! kernel parameters). The step finds each copy or set operand that lies in a declared buffer —
//! at the same offset into the buffer bound in the first capture and into the stand-in in the
//! second — and, before a launch whose bindings moved one, sets the node's parameters from the
//! host (one `cuGraphExecMemcpyNodeSetParams` or `cuGraphExecMemsetNodeSetParams` for each node
//! whose buffers changed). An operand that reaches past the declared length is refused
//! ([`Misuse::ParamCopied`]): a later binding need only be as long as declared.

use super::params::Bound;
use crate::discover::Dynamic;
use crate::error::{Error, Misuse, Result};
use crate::graph::{CopyNodeParams, Graph, GraphExec, Node, NodeKind, Operand};
use crate::table::ArgTable;

/// A copy or set node with operands in declared buffers.
struct Rebased {
    /// Its place among the graph's nodes.
    index: usize,
    node: Node,
    /// As captured.
    params: CopyNodeParams,
    moved: Vec<Moved>,
    /// The base of each of `moved` that the exec has now.
    applied: Vec<u64>,
}

/// An operand in declared buffer `buffer` (table slot `slot`), its base address `interior`
/// bytes from the buffer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Moved {
    operand: Operand,
    buffer: usize,
    slot: u32,
    interior: u64,
}

/// A copied range in a declared buffer, for validation: range `range` of node `node`'s (as
/// [`Graph::copied_ranges`] lists them) starts `interior` bytes into declared buffer `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RangePatch {
    pub(super) node: usize,
    pub(super) range: usize,
    pub(super) buffer: usize,
    pub(super) interior: u64,
}

/// The step's copies and sets over declared buffers, and what each exec node points at now.
#[derive(Default)]
pub(super) struct CopyRebinds {
    copies: Vec<Rebased>,
}

/// Two captures whose copies differ where no declared buffer explains it.
fn changed(reason: String) -> Error {
    Error::misuse("Step::new", Misuse::StepChanged, reason)
}

impl CopyRebinds {
    /// The copies and sets of `first` (its `nodes`, of `kinds`) over the buffers bound then
    /// (`dyn_first`, of the declared lengths; `slots[k]`: buffer `k`'s table slot), checked
    /// against `second`, the capture with `stand_ins`; with the ranges validation rebases.
    pub(super) fn find(
        first: &Graph,
        nodes: &[Node],
        kinds: &[NodeKind],
        second: &Graph,
        dyn_first: &[Dynamic],
        stand_ins: &[Bound],
        slots: &[u32],
    ) -> Result<(Self, Vec<RangePatch>)> {
        let mut copies = Vec::new();
        let mut ranges = Vec::new();
        if !kinds
            .iter()
            .any(|k| matches!(k, NodeKind::Memcpy | NodeKind::Memset))
        {
            return Ok((Self { copies }, ranges));
        }
        let other = second.nodes()?;
        if other.len() != nodes.len() {
            return Err(changed(format!(
                "the two captures made {} and {} nodes",
                nodes.len(),
                other.len()
            )));
        }
        for (index, ((node, kind), twin)) in nodes.iter().zip(kinds).zip(&other).enumerate() {
            if !matches!(kind, NodeKind::Memcpy | NodeKind::Memset) {
                continue;
            }
            let (Some(a), Some(b)) = (
                first.copy_node_params(*node)?,
                second.copy_node_params(*twin)?,
            ) else {
                return Err(changed(format!(
                    "node {index} is a copy or set in one capture only"
                )));
            };
            let (oa, ob) = (a.operands(), b.operands());
            if oa.len() != ob.len() {
                return Err(changed(format!(
                    "copy node {index} has other device operands in the two captures"
                )));
            }
            let mut moved = Vec::new();
            for (range, (a, b)) in oa.iter().zip(&ob).enumerate() {
                let start = b.range.0;
                let Some(k) = stand_ins
                    .iter()
                    .position(|s| start >= s.base && start - s.base < s.bytes as u64)
                else {
                    if a != b {
                        return Err(changed(format!(
                            "an operand of copy node {index} differs between the two captures and is no declared buffer: declare it, or keep it the same each run"
                        )));
                    }
                    continue;
                };
                let declared = dyn_first[k];
                let interior = b.base.wrapping_sub(stand_ins[k].base);
                if a.base != declared.base.wrapping_add(interior)
                    || a.range.0.wrapping_sub(declared.base) != start - stand_ins[k].base
                    || a.range.1 != b.range.1
                {
                    return Err(changed(format!(
                        "an operand of copy node {index} lies in declared buffer {k} at different offsets, or covers other lengths, in the two captures"
                    )));
                }
                let (first_byte, bytes) = a.range;
                if first_byte < declared.base || first_byte - declared.base + bytes > declared.len {
                    return Err(Error::misuse(
                        "Step::new",
                        Misuse::ParamCopied,
                        format!(
                            "copy or set node {index} covers bytes of declared buffer {k} past its declared length ({} bytes): a later binding need only be that long; declare the buffer as long as the copy",
                            declared.len
                        ),
                    ));
                }
                moved.push(Moved {
                    operand: a.operand,
                    buffer: k,
                    slot: slots[k],
                    interior,
                });
                ranges.push(RangePatch {
                    node: index,
                    range,
                    buffer: k,
                    interior: first_byte - declared.base,
                });
            }
            if !moved.is_empty() {
                let applied = moved
                    .iter()
                    .map(|m| dyn_first[m.buffer].base.wrapping_add(m.interior))
                    .collect();
                copies.push(Rebased {
                    index,
                    node: *node,
                    params: a,
                    moved,
                    applied,
                });
            }
        }
        Ok((Self { copies }, ranges))
    }

    /// Whether no copy or set reaches a declared buffer.
    pub(super) fn is_empty(&self) -> bool {
        self.copies.is_empty()
    }

    /// The same copies in `nodes`, another capture of the same work with the same bindings
    /// (node `i` of it is node `i` of the capture they were found in).
    pub(super) fn renode(&mut self, nodes: &[Node]) -> Result<()> {
        for c in &mut self.copies {
            c.node = *nodes.get(c.index).ok_or_else(|| {
                changed("the capture made again has fewer nodes than the first".to_owned())
            })?;
        }
        Ok(())
    }

    /// Points every copy whose buffers `table` now binds elsewhere at them, before a launch of
    /// `exec`.
    pub(super) fn apply(&mut self, exec: &mut GraphExec, table: &ArgTable) -> Result<()> {
        for c in &mut self.copies {
            if let Some(m) = c.moved.iter().find(|m| !table.is_bound(m.slot)) {
                let slot = m.slot;
                return Err(Error::misuse(
                    "Step::run",
                    Misuse::Unbound {
                        slot: slot as usize,
                    },
                    format!("slot {slot} is not bound"),
                ));
            }
            let now = |m: &Moved| table.word(m.slot).wrapping_add(m.interior);
            if c.moved.iter().zip(&c.applied).all(|(m, a)| now(m) == *a) {
                continue;
            }
            let mut params = c.params;
            for m in &c.moved {
                params = params.with_base(m.operand, now(m));
            }
            // SAFETY: each operand is moved to the same offset into the buffer its slot binds
            // now, which the slot checked to be at least the declared length (which the
            // copied range lies in, `find`), and which the table keeps alive until the launches
            // that may read it have finished (the exec is launched right after, through it).
            unsafe { exec.set_copy_node_params(c.node, &params)? };
            for (m, a) in c.moved.iter().zip(&mut c.applied) {
                *a = now(m);
            }
        }
        Ok(())
    }
}
