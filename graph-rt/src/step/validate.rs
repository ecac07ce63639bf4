//! Validation: whether a step's closure, run now, still does what the step's graph replays.
//!
//! A step replays what its closure did when it was captured. A closure that reads anything
//! else than its declared parameters — a host variable that sets a grid or a length, a shape
//! kept on the host, a buffer chosen by a host branch — does other work when that changes, and
//! a replay would silently run the old work. Validation captures the closure again, with the
//! bindings made now, into a graph that is never launched, and compares it with the step's
//! graph node by node: each node's kind, each kernel, its launch dimensions and every byte of
//! its arguments (with the declared buffers' words as the replay will rewrite them), each copy's
//! or set's ranges. Foreign launches (cuBLAS, cudarc, candle) go straight to the driver, so a
//! capture is the one way to see them all.
//!
//! Memory the closure allocates in a capture (a stream-ordered allocation becomes the graph's
//! allocation node) lies at other addresses in each capture: the `k`-th allocation node of one
//! pairs with the `k`-th of the other, and an address inside it at the same interior offset is
//! the same address. Each pair must have the same size.

use std::fmt;

use graph_rt_sys::CUfunction;

use super::copies::RangePatch;
use crate::discover::{kernel_snapshots, Dynamic, KernelSnapshot, NodeParams, Patch};
use crate::error::Result;
use crate::graph::{Graph, MemoryNode, Node, NodeKind};

/// When a step validates its graph against its closure (see [`Step::validate`]), and what it
/// does when they differ. A validation costs one capture of the closure (its host side, as an
/// eager call costs, with no device work) plus a read of every captured node's parameters:
/// it grows with the node count, and the `step` bench prints it for a 200-kernel step. It runs
/// before the call it precedes, so that call never replays stale work.
///
/// The default validates the first 8 calls and every 256th after in builds with debug
/// assertions, and never in release builds (where [`Validation::every`] or
/// [`Step::validate`] turn it on). A step that makes collectives validates only on demand
/// (every rank's closure must run as often as the others': call [`Step::validate`] on every
/// rank at the same call).
///
/// [`Step::validate`]: super::Step::validate
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validation {
    first: u32,
    every: u32,
    on_divergence: OnDivergence,
}

impl Default for Validation {
    fn default() -> Self {
        if cfg!(debug_assertions) {
            Self::first_then_every(8, 256)
        } else {
            Self::off()
        }
    }
}

impl Validation {
    /// No scheduled validation ([`Step::validate`](super::Step::validate) still runs one on
    /// demand).
    pub const fn off() -> Self {
        Self {
            first: 0,
            every: 0,
            on_divergence: OnDivergence::Fail,
        }
    }

    /// Every `n`-th call of the graph (`0`: none).
    pub const fn every(n: u32) -> Self {
        Self::first_then_every(0, n)
    }

    /// The first `first` calls after the graph is made (or made again), then every `every`-th
    /// call (`0`: none after the first).
    pub const fn first_then_every(first: u32, every: u32) -> Self {
        Self {
            first,
            every,
            on_divergence: OnDivergence::Fail,
        }
    }

    /// What a divergence does (default [`OnDivergence::Fail`]).
    pub const fn on_divergence(mut self, on: OnDivergence) -> Self {
        self.on_divergence = on;
        self
    }

    /// What a divergence does.
    pub const fn divergence_policy(&self) -> OnDivergence {
        self.on_divergence
    }

    /// The call (counted from 1 since the graph was made) of the first validation after call
    /// `call`; `u64::MAX` for none.
    pub(super) fn next_after(&self, call: u64) -> u64 {
        if call < u64::from(self.first) {
            call + 1
        } else if self.every > 0 {
            let every = u64::from(self.every);
            (call / every + 1).saturating_mul(every)
        } else {
            u64::MAX
        }
    }
}

/// What a step does when validation finds its closure doing other work than its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnDivergence {
    /// The call returns [`Misuse::StepDiverged`](crate::Misuse::StepDiverged) without running,
    /// and the step runs its closure eagerly from then on
    /// ([`EagerReason::Diverged`](super::EagerReason::Diverged) says what differed): its
    /// closure depends on something it does not declare.
    Fail,
    /// A [`recapturable`](super::StepOptions::recapturable) step captures the closure again and
    /// replays the new graph, validating its first calls again; after
    /// [`MAX_RECAPTURES`](OnDivergence::MAX_RECAPTURES) divergences with no validation passing
    /// between them it runs eagerly, as with [`OnDivergence::Fail`] but with no error. A step
    /// that is not recapturable fails instead.
    Recapture,
}

impl OnDivergence {
    /// Divergences in a row after which a [`OnDivergence::Recapture`] step stops recapturing.
    pub const MAX_RECAPTURES: u32 = 3;
}

/// A kernel node's launch dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads of a block in x, y, z.
    pub block: [u32; 3],
    /// Dynamic shared memory, bytes.
    pub shared_bytes: u32,
}

/// How the closure's work now differs from the step's graph: the first difference, in the
/// order the closure made its work. `node` counts every node of the capture (the table's refresh
/// first, when the step declares parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Divergence {
    /// The closure made another number of nodes.
    NodeCount {
        /// In the step's graph.
        captured: usize,
        /// Now.
        now: usize,
    },
    /// Node `node` is of another kind.
    NodeKind {
        /// The node.
        node: usize,
        /// In the step's graph.
        captured: NodeKind,
        /// Now.
        now: NodeKind,
    },
    /// Node `node` launches another kernel.
    Kernel {
        /// The node.
        node: usize,
        /// The kernel in the step's graph.
        captured: String,
        /// Now.
        now: String,
    },
    /// Kernel node `node` launches with other dimensions (a grid that follows a host value).
    Dimensions {
        /// The node.
        node: usize,
        /// Its kernel.
        kernel: String,
        /// In the step's graph.
        captured: LaunchDims,
        /// Now.
        now: LaunchDims,
    },
    /// An argument of kernel node `node` differs from what the replay passes: a value that is
    /// not a declared parameter (a length, a host offset into a buffer, a buffer that is not
    /// declared).
    Argument {
        /// The node.
        node: usize,
        /// Its kernel.
        kernel: String,
        /// The argument's index.
        index: usize,
        /// Its bytes as the replay passes them (declared buffers' words as bound now).
        replayed: Vec<u8>,
        /// Its bytes now.
        now: Vec<u8>,
    },
    /// Allocation node `node` allocates another number of bytes.
    Allocation {
        /// The node.
        node: usize,
        /// Bytes in the step's graph.
        captured: u64,
        /// Now.
        now: u64,
    },
    /// Free node `node` frees another allocation (by its index among the allocation nodes;
    /// `None`: memory no allocation node of the capture made).
    Free {
        /// The node.
        node: usize,
        /// The allocation it frees in the step's graph.
        captured: Option<usize>,
        /// Now.
        now: Option<usize>,
    },
    /// Copy or set node `node` covers other device ranges (`(first byte, bytes)`).
    Ranges {
        /// The node.
        node: usize,
        /// In the step's graph.
        captured: Vec<(u64, u64)>,
        /// Now.
        now: Vec<(u64, u64)>,
    },
}

impl Divergence {
    /// The node (in the capture's order) where the work differs; `None` for a different count.
    pub fn node(&self) -> Option<usize> {
        match self {
            Divergence::NodeCount { .. } => None,
            Divergence::NodeKind { node, .. }
            | Divergence::Kernel { node, .. }
            | Divergence::Dimensions { node, .. }
            | Divergence::Argument { node, .. }
            | Divergence::Allocation { node, .. }
            | Divergence::Free { node, .. }
            | Divergence::Ranges { node, .. } => Some(*node),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    if bytes.len() <= 8 {
        let mut word = [0u8; 8];
        word[..bytes.len()].copy_from_slice(bytes);
        format!("{:#x}", u64::from_le_bytes(word))
    } else {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Divergence::NodeCount { captured, now } => {
                write!(f, "the closure made {now} nodes where the graph has {captured}")
            }
            Divergence::NodeKind {
                node,
                captured,
                now,
            } => write!(f, "node {node} is a {now:?} node where the graph has a {captured:?} node"),
            Divergence::Kernel {
                node,
                captured,
                now,
            } => write!(f, "node {node} launches `{now}` where the graph launches `{captured}`"),
            Divergence::Dimensions {
                node,
                kernel,
                captured,
                now,
            } => write!(
                f,
                "node {node} (`{kernel}`) launches grid {:?}, block {:?}, {} shared bytes where the graph launches grid {:?}, block {:?}, {} shared bytes",
                now.grid, now.block, now.shared_bytes, captured.grid, captured.block, captured.shared_bytes
            ),
            Divergence::Argument {
                node,
                kernel,
                index,
                replayed,
                now,
            } => write!(
                f,
                "node {node} (`{kernel}`) passes argument {index} = {} where the replay would pass {}",
                hex(now),
                hex(replayed)
            ),
            Divergence::Allocation {
                node,
                captured,
                now,
            } => write!(
                f,
                "allocation node {node} allocates {now} bytes where the graph allocates {captured}"
            ),
            Divergence::Free {
                node,
                captured,
                now,
            } => {
                let which = |a: &Option<usize>| match a {
                    Some(k) => format!("allocation {k}"),
                    None => "memory the capture did not allocate".to_string(),
                };
                write!(
                    f,
                    "free node {node} frees {} where the graph frees {}",
                    which(now),
                    which(captured)
                )
            }
            Divergence::Ranges {
                node,
                captured,
                now,
            } => write!(
                f,
                "copy or set node {node} covers {now:x?} where the graph covers {captured:x?}"
            ),
        }
    }
}

/// One node of a capture, as validation compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sig {
    /// A kernel: its function, dimensions and parameters.
    Kernel(LaunchDims, NodeParams),
    /// A copy or a set: the device ranges it covers.
    Ranges(Vec<(u64, u64)>),
    /// A memory allocation: its address and bytes.
    MemAlloc {
        /// The address the capture gave it.
        base: u64,
        /// Its size.
        bytes: u64,
    },
    /// A memory free: the address it frees.
    MemFree(u64),
    /// Any other node, by kind.
    Other(NodeKind),
}

/// What a capture of the closure did, node by node, with the declared buffers' words that a
/// replay rewrites.
pub(super) struct Signature {
    nodes: Vec<Sig>,
    patches: Vec<Patch>,
    /// The copied ranges in declared buffers, which a replay moves with the bindings.
    ranges: Vec<RangePatch>,
}

/// The nodes of `graph` in capture order, read with its `nodes`, their `kinds` and its kernel
/// nodes' `snapshots` (in the same order).
pub(super) fn sigs_of(
    graph: &Graph,
    nodes: &[Node],
    kinds: &[NodeKind],
    snapshots: &[KernelSnapshot],
) -> Result<Vec<Sig>> {
    let mut kernels = snapshots.iter();
    let mut out = Vec::with_capacity(nodes.len());
    for (node, kind) in nodes.iter().zip(kinds) {
        out.push(match kind {
            // `snapshots` lists the kernel nodes of `nodes`, in order.
            NodeKind::Kernel => match kernels.next() {
                Some(k) => {
                    let (grid, block, shared_bytes) = k.dims;
                    let dims = LaunchDims {
                        grid,
                        block,
                        shared_bytes,
                    };
                    Sig::Kernel(dims, k.params.clone())
                }
                None => Sig::Other(NodeKind::Kernel),
            },
            NodeKind::Memcpy | NodeKind::Memset => Sig::Ranges(graph.copied_ranges(*node)?),
            NodeKind::MemAlloc | NodeKind::MemFree => match graph.memory_node(*node)? {
                Some(MemoryNode::Alloc(a)) => Sig::MemAlloc {
                    base: a.ptr,
                    bytes: a.bytes as u64,
                },
                Some(MemoryNode::Free(ptr)) => Sig::MemFree(ptr),
                None => Sig::Other(*kind),
            },
            kind => Sig::Other(*kind),
        });
    }
    Ok(out)
}

/// The nodes of `graph`, in capture order.
pub(super) fn read_sigs(graph: &Graph) -> Result<Vec<Sig>> {
    let nodes = graph.nodes()?;
    let kinds = nodes
        .iter()
        .map(|n| graph.node_kind(*n))
        .collect::<Result<Vec<_>>>()?;
    sigs_of(graph, &nodes, &kinds, &kernel_snapshots(graph)?)
}

impl Signature {
    /// The signature of the step's capture `nodes`, whose words `patches` and copied `ranges`
    /// the replay rewrites.
    pub(super) fn new(nodes: Vec<Sig>, patches: Vec<Patch>, ranges: Vec<RangePatch>) -> Self {
        Self {
            nodes,
            patches,
            ranges,
        }
    }

    /// The first difference between this capture, replayed with the buffers `bound` now, and
    /// `now`, a capture made with those bindings; `name` names a kernel by its handle, and
    /// `host` tells whether a word is an address of host memory only (see
    /// [`keep_host_words`]).
    pub(super) fn diverges(
        &self,
        now: &[Sig],
        bound: &[Dynamic],
        name: impl Fn(usize) -> String,
        host: &dyn Fn(u64) -> bool,
    ) -> Option<Divergence> {
        if self.nodes.len() != now.len() {
            return Some(Divergence::NodeCount {
                captured: self.nodes.len(),
                now: now.len(),
            });
        }
        let pairs = Allocations::pair(&self.nodes, now);
        let mut kernel = 0;
        for (node, (a, b)) in self.nodes.iter().zip(now).enumerate() {
            match (a, b) {
                (Sig::Kernel(da, pa), Sig::Kernel(db, pb)) => {
                    if pa.function != pb.function {
                        return Some(Divergence::Kernel {
                            node,
                            captured: name(pa.function),
                            now: name(pb.function),
                        });
                    }
                    if da != db {
                        return Some(Divergence::Dimensions {
                            node,
                            kernel: name(pa.function),
                            captured: *da,
                            now: *db,
                        });
                    }
                    let replayed = self.replayed(kernel, pa, bound);
                    let mut translated = pairs.translate_params(pb);
                    keep_host_words(&replayed, &mut translated.bytes, host);
                    if let Some((index, r, _)) =
                        first_argument_difference(pa, &replayed, &translated)
                    {
                        // The bytes as the closure passed them, not as translated.
                        let now = pb.layout.get(index).map_or_else(
                            || pb.bytes.clone(),
                            |&(offset, size)| {
                                let end = (offset + size).min(pb.bytes.len());
                                pb.bytes.get(offset..end).unwrap_or_default().to_vec()
                            },
                        );
                        return Some(Divergence::Argument {
                            node,
                            kernel: name(pa.function),
                            index,
                            replayed: r,
                            now,
                        });
                    }
                    kernel += 1;
                }
                (Sig::Ranges(ra), Sig::Ranges(rb)) => {
                    let translated: Vec<(u64, u64)> = rb
                        .iter()
                        .map(|&(start, len)| (pairs.translate(start), len))
                        .collect();
                    if self.replayed_ranges(node, ra, bound) != translated {
                        return Some(Divergence::Ranges {
                            node,
                            captured: ra.clone(),
                            now: rb.clone(),
                        });
                    }
                }
                (Sig::MemAlloc { bytes: ba, .. }, Sig::MemAlloc { bytes: bb, .. }) => {
                    if ba != bb {
                        return Some(Divergence::Allocation {
                            node,
                            captured: *ba,
                            now: *bb,
                        });
                    }
                }
                (Sig::MemFree(fa), Sig::MemFree(fb)) => {
                    let (ka, kb) = (pairs.captured_index(*fa), pairs.now_index(*fb));
                    if ka != kb || *fa != pairs.translate(*fb) {
                        return Some(Divergence::Free {
                            node,
                            captured: ka,
                            now: kb,
                        });
                    }
                }
                (Sig::Other(ka), Sig::Other(kb)) if ka == kb => {}
                _ => {
                    return Some(Divergence::NodeKind {
                        node,
                        captured: a.kind(),
                        now: b.kind(),
                    })
                }
            }
        }
        None
    }

    /// The kernel nodes' kernels (raw handles) and launch dimensions, in capture order.
    pub(super) fn kernels(&self) -> impl Iterator<Item = (usize, LaunchDims)> + '_ {
        self.nodes.iter().filter_map(|n| match n {
            Sig::Kernel(dims, params) => Some((params.function, *dims)),
            _ => None,
        })
    }

    /// Copy or set node `node`'s ranges `captured` as a replay covers them with the buffers
    /// `bound` now: those in declared buffers at the same offsets into the buffers bound now.
    fn replayed_ranges(
        &self,
        node: usize,
        captured: &[(u64, u64)],
        bound: &[Dynamic],
    ) -> Vec<(u64, u64)> {
        let mut out = captured.to_vec();
        for p in self.ranges.iter().filter(|p| p.node == node) {
            if let (Some(r), Some(now)) = (out.get_mut(p.range), bound.get(p.buffer)) {
                r.0 = now.base.wrapping_add(p.interior);
            }
        }
        out
    }

    /// Kernel node `kernel`'s parameter bytes as a replay passes them with the buffers `bound`
    /// now: the declared buffers' words rewritten, the rest as captured.
    fn replayed(&self, kernel: usize, params: &NodeParams, bound: &[Dynamic]) -> Vec<u8> {
        let mut bytes = params.bytes.clone();
        let start = self.patches.partition_point(|p| p.node < kernel);
        for p in self.patches[start..]
            .iter()
            .take_while(|p| p.node == kernel)
        {
            // A patch the captured buffers explain; the buffer bound now, at the same offset.
            let (Some(now), Some(word)) =
                (bound.get(p.buffer), bytes.get_mut(p.offset..p.offset + 8))
            else {
                continue;
            };
            word.copy_from_slice(&now.base.wrapping_add(p.interior).to_le_bytes());
        }
        bytes
    }
}

/// Sets each aligned word of `now` that differs from `replayed`'s, where each is an address of
/// host memory the device does not read through (`host`: readable by the process, unknown to
/// CUDA; on the calling thread's stack where the device reaches pageable memory) or null, and
/// at least one is such an address, to `replayed`'s.
///
/// Such a word is no device memory: a library passing the address of a host value it reads on
/// the host only (cuBLAS passes `&alpha` from a frame of its own, whose address follows the
/// depth of the stack at each call), or a field of an argument it leaves unset for this call,
/// which holds whatever its frame held: null once, a stale stack address the next time. The
/// device does not read it, what a replay passes there is what the capture passed whatever
/// validation sees, and it changes with the caller's stack or heap: two captures that differ
/// only there make the same work.
fn keep_host_words(replayed: &[u8], now: &mut [u8], host: &dyn Fn(u64) -> bool) {
    let host_or_null = |w: u64| w == 0 || host(w);
    for (r, n) in replayed.chunks_exact(8).zip(now.chunks_exact_mut(8)) {
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
        let (wr, wn) = (word(r), word(n));
        if wr != wn && host_or_null(wr) && host_or_null(wn) {
            n.copy_from_slice(r);
        }
    }
}

/// The allocations of two captures, paired in node order (the `k`-th of one with the `k`-th of
/// the other, where both made one of the same size): addresses inside the second capture's
/// allocation `k` translate to the same interior offset of the first's.
struct Allocations {
    captured: Vec<(u64, u64)>,
    now: Vec<(u64, u64)>,
}

impl Allocations {
    fn pair(captured: &[Sig], now: &[Sig]) -> Self {
        let ranges = |sigs: &[Sig]| -> Vec<(u64, u64)> {
            sigs.iter()
                .filter_map(|s| match s {
                    Sig::MemAlloc { base, bytes } => Some((*base, *bytes)),
                    _ => None,
                })
                .collect()
        };
        Self {
            captured: ranges(captured),
            now: ranges(now),
        }
    }

    fn index(ranges: &[(u64, u64)], addr: u64) -> Option<usize> {
        ranges
            .iter()
            .position(|&(base, bytes)| addr >= base && addr - base < bytes)
    }

    /// The allocation of the step's graph that `addr` lies in.
    fn captured_index(&self, addr: u64) -> Option<usize> {
        Self::index(&self.captured, addr)
    }

    /// The allocation of the capture made now that `addr` lies in.
    fn now_index(&self, addr: u64) -> Option<usize> {
        Self::index(&self.now, addr)
    }

    /// `addr`, an address of the capture made now, as the step's graph has it: inside a paired
    /// allocation, the same interior offset of its counterpart; anything else unchanged.
    fn translate(&self, addr: u64) -> u64 {
        let Some(k) = self.now_index(addr) else {
            return addr;
        };
        match (self.captured.get(k), self.now.get(k)) {
            (Some(&(base_a, bytes_a)), Some(&(base_b, bytes_b))) if bytes_a == bytes_b => {
                base_a + (addr - base_b)
            }
            _ => addr,
        }
    }

    /// `params` with every 8-aligned word of every argument of at least 8 bytes translated
    /// (the words discovery looks at).
    fn translate_params(&self, params: &NodeParams) -> NodeParams {
        let mut out = params.clone();
        if self.now.is_empty() {
            return out;
        }
        for &(start, size) in &params.layout {
            let end = start.saturating_add(size).min(out.bytes.len());
            let mut offset = start.next_multiple_of(8);
            while offset + 8 <= end {
                if let Some(word) = out.bytes.get_mut(offset..offset + 8) {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(word);
                    let t = self.translate(u64::from_le_bytes(w));
                    word.copy_from_slice(&t.to_le_bytes());
                }
                offset += 8;
            }
        }
        out
    }
}

impl Sig {
    fn kind(&self) -> NodeKind {
        match self {
            Sig::Kernel(..) => NodeKind::Kernel,
            // Only the node's ranges are kept: either kind reads as a copy.
            Sig::Ranges(_) => NodeKind::Memcpy,
            Sig::MemAlloc { .. } => NodeKind::MemAlloc,
            Sig::MemFree(_) => NodeKind::MemFree,
            Sig::Other(k) => *k,
        }
    }
}

/// The first argument whose bytes differ between `replayed` and `now`'s (same layout): its
/// index and both values. Bytes outside every argument (padding) are not compared.
fn first_argument_difference(
    captured: &NodeParams,
    replayed: &[u8],
    now: &NodeParams,
) -> Option<(usize, Vec<u8>, Vec<u8>)> {
    if captured.layout != now.layout || replayed.len() != now.bytes.len() {
        // Another layout with the same function cannot happen; say where it starts.
        return Some((0, replayed.to_vec(), now.bytes.clone()));
    }
    for (index, &(offset, size)) in captured.layout.iter().enumerate() {
        let range = offset..(offset + size).min(replayed.len());
        if replayed.get(range.clone()) != now.bytes.get(range.clone()) {
            return Some((
                index,
                replayed[range.clone()].to_vec(),
                now.bytes[range].to_vec(),
            ));
        }
    }
    None
}

/// A kernel's name for a divergence.
pub(super) fn kernel_name(function: usize) -> String {
    crate::driver::kernel_name(function as CUfunction).unwrap_or_else(|| format!("{function:#x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(function: usize, grid: u32, words: &[u64]) -> Sig {
        Sig::Kernel(
            LaunchDims {
                grid: [grid, 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            },
            NodeParams {
                function,
                bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
                layout: (0..words.len()).map(|i| (i * 8, 8)).collect(),
            },
        )
    }

    const X0: Dynamic = Dynamic {
        base: 0x7000_0000,
        len: 0x1000,
    };
    const X1: Dynamic = Dynamic {
        base: 0x9000_0000,
        len: 0x1000,
    };

    fn signature(nodes: Vec<Sig>) -> Signature {
        // Node 0's word 0 is declared buffer 0 plus 0x10.
        let patch = Patch {
            node: 0,
            offset: 0,
            buffer: 0,
            interior: 0x10,
        };
        Signature::new(nodes, vec![patch], Vec::new())
    }

    fn name(f: usize) -> String {
        format!("k{f}")
    }

    fn no_host(_: u64) -> bool {
        false
    }

    #[test]
    fn a_host_address_in_both_captures_is_the_same_work_and_nothing_else_is() {
        // Pageable host memory, as the driver and the process's mappings would say.
        let host = |w: u64| (0x7f00_0000_0000..0x7f00_1000_0000).contains(&w);
        let (then, now) = (0x7f00_0000_8000, 0x7f00_0000_3000);
        let s = signature(vec![kernel(1, 4, &[X0.base + 0x10, then, 7])]);
        let moved = [kernel(1, 4, &[X1.base + 0x10, now, 7])];
        assert_eq!(s.diverges(&moved, &[X1], name, &host), None);
        // A host address where the graph has device memory (or the reverse) is other work.
        let device = [kernel(1, 4, &[X1.base + 0x10, 0x7e00_0000_0000, 7])];
        assert!(matches!(
            s.diverges(&device, &[X1], name, &host),
            Some(Divergence::Argument { index: 1, .. })
        ));
        // A field left unset: null in one capture, a stale host address in the other.
        let unset = [kernel(1, 4, &[X1.base + 0x10, 0, 7])];
        assert_eq!(s.diverges(&unset, &[X1], name, &host), None);
        let zero = signature(vec![kernel(1, 4, &[X0.base + 0x10, 0, 7])]);
        assert_eq!(zero.diverges(&moved, &[X1], name, &host), None);
        // Null against device memory, or null where neither is host memory, is other work.
        assert!(zero.diverges(&device, &[X1], name, &host).is_some());
        assert!(s.diverges(&unset, &[X1], name, &no_host).is_some());
        // Without such addresses the words count, and other words count anyway.
        assert!(s.diverges(&moved, &[X1], name, &no_host).is_some());
        let longer = [kernel(1, 4, &[X1.base + 0x10, now, 8])];
        assert!(matches!(
            s.diverges(&longer, &[X1], name, &host),
            Some(Divergence::Argument { index: 2, .. })
        ));
    }

    #[test]
    fn a_capture_with_the_buffers_rebound_is_the_same_work() {
        let s = signature(vec![kernel(1, 4, &[X0.base + 0x10, 7])]);
        let now = [kernel(1, 4, &[X1.base + 0x10, 7])];
        assert_eq!(s.diverges(&now, &[X1], name, &no_host), None);
        let same = [kernel(1, 4, &[X0.base + 0x10, 7])];
        assert_eq!(
            s.diverges(&same, &[X0], name, &no_host),
            None,
            "bound to the same buffer"
        );
    }

    #[test]
    fn a_grid_that_follows_a_host_value_diverges_at_its_node() {
        let s = signature(vec![
            Sig::Other(NodeKind::Empty),
            kernel(1, 4, &[X0.base + 0x10]),
        ]);
        let now = [Sig::Other(NodeKind::Empty), kernel(1, 8, &[X1.base + 0x10])];
        match s.diverges(&now, &[X1], name, &no_host) {
            Some(d @ Divergence::Dimensions { node: 1, .. }) => {
                assert!(d.to_string().contains("grid [8, 1, 1]"), "{d}")
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn a_length_or_a_host_offset_that_changed_diverges_at_its_argument() {
        let s = signature(vec![kernel(1, 4, &[X0.base + 0x10, 7])]);
        let longer = [kernel(1, 4, &[X1.base + 0x10, 9])];
        assert!(matches!(
            s.diverges(&longer, &[X1], name, &no_host),
            Some(Divergence::Argument {
                node: 0,
                index: 1,
                ..
            })
        ));
        // The buffer is rebound, but the closure now reads it at another offset.
        let moved = [kernel(1, 4, &[X1.base + 0x20, 7])];
        assert!(matches!(
            s.diverges(&moved, &[X1], name, &no_host),
            Some(Divergence::Argument {
                node: 0,
                index: 0,
                ..
            })
        ));
        // Bound to the same buffer as captured, read at another offset.
        let moved = [kernel(1, 4, &[X0.base + 0x20, 7])];
        assert!(matches!(
            s.diverges(&moved, &[X0], name, &no_host),
            Some(Divergence::Argument {
                node: 0,
                index: 0,
                ..
            })
        ));
    }

    #[test]
    fn a_buffer_that_is_not_declared_diverges_when_it_changes() {
        let s = signature(vec![kernel(1, 4, &[X0.base + 0x10, 0x5000_0000])]);
        let now = [kernel(1, 4, &[X1.base + 0x10, 0x5100_0000])];
        assert!(matches!(
            s.diverges(&now, &[X1], name, &no_host),
            Some(Divergence::Argument { index: 1, .. })
        ));
    }

    #[test]
    fn other_kernels_counts_kinds_and_ranges_diverge() {
        let s = signature(vec![
            kernel(1, 4, &[X0.base + 0x10]),
            Sig::Ranges(vec![(0x100, 64)]),
        ]);
        let other_kernel = [
            kernel(2, 4, &[X1.base + 0x10]),
            Sig::Ranges(vec![(0x100, 64)]),
        ];
        assert_eq!(
            s.diverges(&other_kernel, &[X1], name, &no_host),
            Some(Divergence::Kernel {
                node: 0,
                captured: "k1".into(),
                now: "k2".into()
            })
        );
        let fewer = [kernel(1, 4, &[X1.base + 0x10])];
        assert_eq!(
            s.diverges(&fewer, &[X1], name, &no_host),
            Some(Divergence::NodeCount {
                captured: 2,
                now: 1
            })
        );
        let longer_copy = [
            kernel(1, 4, &[X1.base + 0x10]),
            Sig::Ranges(vec![(0x100, 128)]),
        ];
        assert!(matches!(
            s.diverges(&longer_copy, &[X1], name, &no_host),
            Some(Divergence::Ranges { node: 1, .. })
        ));
        let kind = [kernel(1, 4, &[X1.base + 0x10]), Sig::Other(NodeKind::Host)];
        assert!(matches!(
            s.diverges(&kind, &[X1], name, &no_host),
            Some(Divergence::NodeKind {
                node: 1,
                now: NodeKind::Host,
                ..
            })
        ));
    }

    /// A closure that allocates two temporaries, runs a kernel over them (with its declared
    /// buffer) and frees them, its allocations at `base` and `base + 0x10000`.
    fn allocating(base: u64, second_bytes: u64, x: Dynamic) -> Vec<Sig> {
        let t1 = base + 0x10000;
        vec![
            Sig::MemAlloc {
                base,
                bytes: 0x1000,
            },
            Sig::MemAlloc {
                base: t1,
                bytes: second_bytes,
            },
            kernel(1, 4, &[x.base + 0x10, base + 0x80, t1]),
            Sig::Ranges(vec![(t1, 64), (base, 64)]),
            Sig::MemFree(base),
            Sig::MemFree(t1),
        ]
    }

    #[test]
    fn the_closures_own_allocations_at_other_addresses_are_the_same_work() {
        // The step's graph captured its allocations at 0xa000_0000, this capture at 0xb000_0000.
        let nodes = allocating(0xa000_0000, 0x2000, X0);
        let s = Signature::new(
            nodes.clone(),
            vec![Patch {
                node: 0,
                offset: 0,
                buffer: 0,
                interior: 0x10,
            }],
            Vec::new(),
        );
        assert_eq!(
            s.diverges(&allocating(0xb000_0000, 0x2000, X1), &[X1], name, &no_host),
            None
        );
        assert_eq!(
            s.diverges(&nodes, &[X0], name, &no_host),
            None,
            "the same addresses"
        );
        // An allocation of another size.
        assert_eq!(
            s.diverges(&allocating(0xb000_0000, 0x4000, X1), &[X1], name, &no_host),
            Some(Divergence::Allocation {
                node: 1,
                captured: 0x2000,
                now: 0x4000
            })
        );
    }

    #[test]
    fn a_copy_of_a_declared_buffer_is_replayed_over_the_buffer_bound_now() {
        // Node 1 copies 64 bytes from 0x40 into declared buffer 0 to a temporary.
        let t = 0xa000_0000;
        let nodes = vec![
            kernel(1, 4, &[X0.base + 0x10]),
            Sig::Ranges(vec![(X0.base + 0x40, 64), (t, 64)]),
        ];
        let range = RangePatch {
            node: 1,
            range: 0,
            buffer: 0,
            interior: 0x40,
        };
        let s = Signature::new(
            nodes,
            vec![Patch {
                node: 0,
                offset: 0,
                buffer: 0,
                interior: 0x10,
            }],
            vec![range],
        );
        let now = |copied: u64| {
            vec![
                kernel(1, 4, &[X1.base + 0x10]),
                Sig::Ranges(vec![(copied, 64), (t, 64)]),
            ]
        };
        // Bound to X1 now: the copy reads X1 at the same offset.
        assert_eq!(
            s.diverges(&now(X1.base + 0x40), &[X1], name, &no_host),
            None
        );
        // At another offset, or still from the buffer bound when captured.
        for copied in [X1.base + 0x80, X0.base + 0x40] {
            assert!(matches!(
                s.diverges(&now(copied), &[X1], name, &no_host),
                Some(Divergence::Ranges { node: 1, .. })
            ));
        }
    }

    #[test]
    fn the_closures_allocations_used_at_other_offsets_or_swapped_diverge() {
        let s = Signature::new(allocating(0xa000_0000, 0x2000, X0), Vec::new(), Vec::new());
        let b = 0xb000_0000;
        // The kernel reads the first temporary at another offset.
        let mut now = allocating(b, 0x2000, X0);
        now[2] = kernel(1, 4, &[X0.base + 0x10, b + 0x88, b + 0x10000]);
        assert!(matches!(
            s.diverges(&now, &[X0], name, &no_host),
            Some(Divergence::Argument { node: 2, index: 1, ref now, .. })
                if now[..] == (b + 0x88).to_le_bytes()
        ));
        // The copy covers the other temporary.
        let mut now = allocating(b, 0x2000, X0);
        now[3] = Sig::Ranges(vec![(b, 64), (b, 64)]);
        assert!(matches!(
            s.diverges(&now, &[X0], name, &no_host),
            Some(Divergence::Ranges { node: 3, .. })
        ));
        // The frees swapped: each frees the other allocation.
        let mut now = allocating(b, 0x2000, X0);
        now.swap(4, 5);
        assert_eq!(
            s.diverges(&now, &[X0], name, &no_host),
            Some(Divergence::Free {
                node: 4,
                captured: Some(0),
                now: Some(1)
            })
        );
        // A free of memory no allocation node made, where the graph frees its own.
        let mut now = allocating(b, 0x2000, X0);
        now[5] = Sig::MemFree(0x5000_0000);
        let d = s.diverges(&now, &[X0], name, &no_host);
        assert_eq!(
            d,
            Some(Divergence::Free {
                node: 5,
                captured: Some(1),
                now: None
            })
        );
        assert!(d
            .unwrap()
            .to_string()
            .contains("memory the capture did not allocate"));
        // An allocation where the graph launched a kernel.
        let mut now = allocating(b, 0x2000, X0);
        now[2] = Sig::MemAlloc { base: b, bytes: 8 };
        assert!(matches!(
            s.diverges(&now, &[X0], name, &no_host),
            Some(Divergence::NodeKind {
                node: 2,
                captured: NodeKind::Kernel,
                now: NodeKind::MemAlloc
            })
        ));
    }

    #[test]
    fn debug_builds_validate_the_first_calls_and_every_256th_release_builds_none() {
        let want = if cfg!(debug_assertions) {
            Validation::first_then_every(8, 256)
        } else {
            Validation::off()
        };
        assert_eq!(Validation::default(), want);
    }

    #[test]
    fn the_schedule_validates_the_first_calls_then_every_nth() {
        let v = Validation::first_then_every(3, 10);
        let mut calls = vec![];
        let mut at = v.next_after(0);
        while at <= 40 {
            calls.push(at);
            at = v.next_after(at);
        }
        assert_eq!(calls, [1, 2, 3, 10, 20, 30, 40]);
        assert_eq!(Validation::off().next_after(0), u64::MAX);
        assert_eq!(Validation::every(5).next_after(0), 5);
        assert_eq!(Validation::first_then_every(2, 0).next_after(2), u64::MAX);
    }
}
