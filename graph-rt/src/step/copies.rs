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
use crate::graph::{
    CopyNodeParams, DeviceOperand, Graph, GraphAllocation, GraphExec, Node, NodeKind, Operand,
};
use crate::table::ArgTable;

/// A copy or set node with operands in declared buffers.
struct Rebased {
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

/// Where a copy's operand lies, told from its two captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The same memory at every replay: the same address in both captures, or the same offset
    /// into memory each capture allocated itself (each graph keeps its own).
    Fixed,
    /// In declared buffer `buffer`, its base address `interior` bytes from the buffer's.
    Declared { buffer: usize, interior: u64 },
}

/// What tells the operands of the two captures apart.
struct Captures<'a> {
    /// The buffers bound in the first capture, of their declared lengths.
    dyn_first: &'a [Dynamic],
    /// The second capture's stand-ins, whole.
    stand_ins: Vec<Dynamic>,
    /// The memory each capture allocated itself, in node order.
    own_first: Vec<GraphAllocation>,
    own_second: Vec<GraphAllocation>,
}

impl Captures<'_> {
    /// Where operand `a` of copy node `index` (as the first capture has it; `b` as the
    /// second) lies: a declared buffer's operand must lie at the same offset into the buffer
    /// bound and into the stand-in, within the declared length
    /// ([`Misuse::ParamCopied`] past it); any other must be the same memory at every replay.
    fn place(&self, index: usize, a: &DeviceOperand, b: &DeviceOperand) -> Result<Place> {
        let start = b.range.0;
        if a.operand != b.operand || a.range.1 != b.range.1 {
            return Err(changed(format!(
                "copy node {index} copies other operands or lengths in the two captures"
            )));
        }
        let Some(k) = self
            .stand_ins
            .iter()
            .position(|s| start >= s.base && start - s.base < s.len)
        else {
            if a == b || self.internal(a.range.0, b.range.0) {
                return Ok(Place::Fixed);
            }
            return Err(changed(format!(
                "an operand of copy node {index} differs between the two captures and is neither a declared buffer nor memory the capture allocated: declare it, or keep it the same each run"
            )));
        };
        let declared = self.dyn_first[k];
        let interior = b.base.wrapping_sub(self.stand_ins[k].base);
        if a.base != declared.base.wrapping_add(interior)
            || a.range.0.wrapping_sub(declared.base) != start - self.stand_ins[k].base
        {
            return Err(changed(format!(
                "an operand of copy node {index} lies in declared buffer {k} at different offsets in the two captures"
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
        Ok(Place::Declared {
            buffer: k,
            interior,
        })
    }

    /// Whether `a` and `b` lie at the same offset into the same allocation of each capture
    /// (paired in node order, of one size, as discovery pairs them).
    fn internal(&self, a: u64, b: u64) -> bool {
        let at = |own: &[GraphAllocation], x: u64| {
            own.iter()
                .position(|m| x >= m.ptr && x - m.ptr < m.bytes as u64)
                .map(|k| (k, x - own[k].ptr))
        };
        match (at(&self.own_first, a), at(&self.own_second, b)) {
            (Some((ka, da)), Some((kb, db))) => {
                ka == kb && da == db && self.own_first[ka].bytes == self.own_second[kb].bytes
            }
            _ => false,
        }
    }
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
        let captures = Captures {
            dyn_first,
            stand_ins: stand_ins
                .iter()
                .map(|s| Dynamic {
                    base: s.base,
                    len: s.bytes as u64,
                })
                .collect(),
            own_first: first.mem_alloc_ranges()?,
            own_second: second.mem_alloc_ranges()?,
        };
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
            for (range, (oa, ob)) in oa.iter().zip(&ob).enumerate() {
                let Place::Declared { buffer, interior } = captures.place(index, oa, ob)? else {
                    continue;
                };
                moved.push(Moved {
                    operand: oa.operand,
                    buffer,
                    slot: slots[buffer],
                    interior,
                });
                ranges.push(RangePatch {
                    node: index,
                    range,
                    buffer,
                    interior: oa.range.0 - dyn_first[buffer].base,
                });
            }
            if !moved.is_empty() {
                let applied = moved
                    .iter()
                    .map(|m| dyn_first[m.buffer].base.wrapping_add(m.interior))
                    .collect();
                copies.push(Rebased {
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

#[cfg(test)]
mod tests {
    use super::{Captures, Place};
    use crate::discover::Dynamic;
    use crate::error::Misuse;
    use crate::graph::{DeviceOperand, GraphAllocation, Operand};

    /// Declared buffer 0: 0x1000 bytes bound at 0x10_0000, the stand-in (0x1000 bytes) at
    /// 0x20_0000; one allocation of each capture, at 0xa0_0000 and 0xb0_0000.
    fn captures() -> Captures<'static> {
        const DECLARED: &[Dynamic] = &[Dynamic {
            base: 0x10_0000,
            len: 0x1000,
        }];
        Captures {
            dyn_first: DECLARED,
            stand_ins: vec![Dynamic {
                base: 0x20_0000,
                len: 0x1000,
            }],
            own_first: vec![GraphAllocation {
                ptr: 0xa0_0000,
                bytes: 0x800,
            }],
            own_second: vec![GraphAllocation {
                ptr: 0xb0_0000,
                bytes: 0x800,
            }],
        }
    }

    fn source(base: u64, offset: u64, bytes: u64) -> DeviceOperand {
        DeviceOperand {
            operand: Operand::Source,
            base,
            range: (base + offset, bytes),
        }
    }

    #[test]
    fn an_operand_in_a_declared_buffer_at_the_same_offset_in_both_captures_is_rebound() {
        let c = captures();
        let (a, b) = (
            source(0x10_0100, 0x40, 0x100),
            source(0x20_0100, 0x40, 0x100),
        );
        assert_eq!(
            c.place(3, &a, &b).unwrap(),
            Place::Declared {
                buffer: 0,
                interior: 0x100
            }
        );
    }

    #[test]
    fn the_captures_own_memory_and_fixed_memory_stay_as_captured() {
        let c = captures();
        // The k-th allocation of each capture, at the same offset.
        let (a, b) = (
            source(0xa0_0000, 0x10, 0x100),
            source(0xb0_0000, 0x10, 0x100),
        );
        assert_eq!(c.place(1, &a, &b).unwrap(), Place::Fixed);
        // The same address in both: a buffer the step does not declare.
        let f = source(0x50_0000, 0, 0x100);
        assert_eq!(c.place(1, &f, &f).unwrap(), Place::Fixed);
    }

    #[test]
    fn operands_the_bindings_do_not_explain_are_refused() {
        let c = captures();
        let changed = |a: &DeviceOperand, b: &DeviceOperand| {
            c.place(2, a, b).unwrap_err().misuse_kind().cloned()
        };
        // Another offset into the declared buffer in the second capture.
        let (a, b) = (source(0x10_0100, 0, 0x100), source(0x20_0200, 0, 0x100));
        assert_eq!(changed(&a, &b), Some(Misuse::StepChanged));
        // Another length.
        let (a, b) = (source(0x10_0100, 0, 0x100), source(0x20_0100, 0, 0x200));
        assert_eq!(changed(&a, &b), Some(Misuse::StepChanged));
        // Memory that moved and is neither declared nor the captures' own.
        let (a, b) = (source(0x50_0000, 0, 0x100), source(0x60_0000, 0, 0x100));
        assert_eq!(changed(&a, &b), Some(Misuse::StepChanged));
        // The captures' own allocations at other offsets.
        let (a, b) = (
            source(0xa0_0000, 0x10, 0x100),
            source(0xb0_0000, 0x20, 0x100),
        );
        assert_eq!(changed(&a, &b), Some(Misuse::StepChanged));
    }

    #[test]
    fn an_operand_past_the_declared_length_is_refused_as_copied() {
        let c = captures();
        // 0x100 bytes from 0xf80: past the declared 0x1000.
        let (a, b) = (source(0x10_0f80, 0, 0x100), source(0x20_0f80, 0, 0x100));
        let e = c.place(0, &a, &b).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&Misuse::ParamCopied), "{e}");
    }
}
