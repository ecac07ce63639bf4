//! Installing the prelude into a captured graph, and launching its execs.

use std::fmt;

use graph_rt_sys::CUdeviceptr;

use crate::discover::{Discovery, Dynamic, HostPatcher, KernelSnapshot};
use crate::driver::{Context, DeviceBuffer, Function, Module};
use crate::error::{Error, Misuse, Result};
use crate::graph::{Graph, GraphExec, Node};
use crate::launch::LaunchConfig;
use crate::table::{ArgTable, SlotRef};
use crate::Stream;

/// One patch as the prelude kernel reads it (`PreludePatch` in `kernels/prelude/prelude.cu`):
/// the node's device handle, the interior offset added to the slot's address, the word's byte
/// offset in the node's parameters, the slot. 24 bytes, three words.
const PATCH_WORDS: usize = 3;

/// How the caller wants the discovered words rebound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreludeOptions {
    /// Rewrite the words from the host before each launch even where the prelude loads.
    pub host_only: bool,
    /// Install even where discovery left differences unexplained (those words keep the first
    /// capture's values on every replay). By default such a discovery is refused.
    pub allow_unexplained: bool,
}

/// Where the discovered words are rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreludeMode {
    /// On the device, by the prelude kernel at the start of each replay.
    Device,
    /// From the host, by per-node exec updates before each launch.
    Host {
        /// Why not on the device.
        reason: String,
    },
}

/// What [`Prelude::install`] did to a graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreludeReport {
    /// Where the words are rewritten.
    pub mode: PreludeMode,
    /// Kernel nodes patched.
    pub nodes: usize,
    /// Parameter words rewritten per replay.
    pub words: usize,
}

impl fmt::Display for PreludeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} words in {} kernel nodes ", self.words, self.nodes)?;
        match &self.mode {
            PreludeMode::Device => write!(f, "rewritten on the device by the in-graph prelude"),
            PreludeMode::Host { reason } => {
                write!(f, "rewritten from the host before each launch ({reason})")
            }
        }
    }
}

/// The discovered words of a graph's kernel nodes, bound to argument-table slots: rewritten
/// on the device by an in-graph prelude where it loads, else from the host.
///
/// Made by [`Prelude::install`] on the first of two captures (see
/// [`discover_graphs`](crate::foreign::discover_graphs)), which must record the table's refresh first
/// ([`ArgTable::record_refresh`]). Instantiate the graph after installing, bind the slots, and
/// launch each replay with [`Prelude::launch`].
///
/// With the prelude on the device the graph has device-updatable kernel nodes, and CUDA then
/// refuses a clone, a second exec while one exists, and whole-graph exec updates: graph-rt
/// refuses them first with [`Misuse::ExecExists`] or [`Misuse::DeviceUpdatable`] (and
/// [`UpdateFailureKind::DeviceUpdatable`](crate::UpdateFailureKind)); it uploads the exec
/// before its first launch and after any host-side node update, as CUDA requires.
pub struct Prelude {
    graph: u64,
    table: u64,
    slots: Vec<SlotRef>,
    report: PreludeReport,
    // Host mode: the patcher and the scratch of addresses.
    host: Option<(HostPatcher, Vec<CUdeviceptr>)>,
}

impl fmt::Debug for Prelude {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prelude")
            .field("report", &self.report)
            .finish()
    }
}

impl Prelude {
    /// Device memory of the prelude's list of words to rewrite (what the in-graph prelude's
    /// kernel reads), bytes; 0 for a prelude that rewrites from the host.
    pub fn device_bytes(&self) -> u64 {
        match self.report.mode {
            PreludeMode::Device => (self.report.words * PATCH_WORDS * 8) as u64,
            PreludeMode::Host { .. } => 0,
        }
    }

    /// Installs the rebinding of `discovery`'s words into `graph`, the capture whose kernel
    /// nodes `first` was read from (before it is instantiated): dynamic buffer `k` (as
    /// `dynamic[k]` in that capture) is read from `slots[k]` of `table`.
    ///
    /// Checks: the graph records `table`'s refresh as a root node and has no exec yet; each
    /// slot is `table`'s, accepts only buffers at least as long as the captured one and
    /// addresses aligned to 16 bytes (libraries pick kernels by their operands' alignment);
    /// the discovery explains every difference (unless `options.allow_unexplained`).
    pub fn install(
        graph: &mut Graph,
        table: &ArgTable,
        first: &[KernelSnapshot],
        discovery: &Discovery,
        dynamic: &[Dynamic],
        slots: &[SlotRef],
        options: PreludeOptions,
    ) -> Result<Prelude> {
        const CALL: &str = "Prelude::install";
        check_slots(table, discovery, dynamic, slots)?;
        if !discovery.unexplained.is_empty() && !options.allow_unexplained {
            return Err(Error::misuse(
                CALL,
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
        if graph
            .handle
            .execs
            .load(std::sync::atomic::Ordering::Acquire)
            > 0
        {
            return Err(Error::misuse(
                CALL,
                Misuse::ExecExists,
                "the graph already has an exec: install the prelude before instantiating",
            ));
        }
        let edges = graph.edges()?;
        let refresh = refresh_node(graph, table, first, &edges)?;
        let host = HostPatcher::with_unexplained(first, discovery, slots.len())?;
        let mut report = PreludeReport {
            mode: PreludeMode::Device,
            nodes: host.node_count(),
            words: host.patch_count(),
        };
        let mut prelude = Prelude {
            graph: graph.handle.id,
            table: table.key(),
            slots: slots.to_vec(),
            report: report.clone(),
            host: None,
        };
        let function = match (options.host_only, report.words) {
            (_, 0) => return Ok(prelude),
            (true, _) => Err("host updates chosen by the caller".to_string()),
            (false, _) => load(graph.context()),
        };
        let function = function.and_then(|f| {
            // The attribute on the first patched node: where the driver refuses it, nothing
            // changed and the words are rewritten from the host.
            let first_node = discovery.patches.iter().map(|p| p.node).min().unwrap_or(0);
            let node = first[first_node].node;
            let _guard = graph.handle.lock(CALL).map_err(|e| e.to_string())?;
            // SAFETY: a kernel node of this live, locked graph (checked above).
            unsafe { crate::graph::make_device_updatable(node.raw) }
                .map(|dev| (f, (first_node, node, dev)))
                .map_err(|e| format!("the driver refused a device-updatable node: {e}"))
        });
        match function {
            Ok((f, probed)) => {
                let target = Target {
                    first,
                    discovery,
                    slots,
                    edges: &edges,
                    refresh,
                    probed,
                };
                install_device(graph, table, &target, &f)?
            }
            Err(reason) => {
                tracing::info!("graph-rt: prelude on the host: {reason}");
                // The graph's foreign nodes hold the addresses of the last Prelude::launch, which
                // nothing keeps alive after it: only Prelude::launch (which rewrites them first)
                // may launch its execs, not ArgTable::launch.
                graph.launch_key = Some(table.host_patched_key());
                report.mode = PreludeMode::Host { reason };
                prelude.report = report;
                prelude.host = Some((host, vec![0; slots.len()]));
            }
        }
        Ok(prelude)
    }

    /// Whether the shipped prelude loads on `ctx`'s GPU, or why not (a GPU it is not compiled
    /// for, a driver that refuses it).
    pub fn device_support(ctx: &Context) -> std::result::Result<(), String> {
        load(ctx).map(|_| ())
    }

    /// What was installed, and where the words are rewritten.
    pub fn report(&self) -> &PreludeReport {
        &self.report
    }

    /// Launches `exec` (instantiated from the graph the prelude was installed in) through
    /// `table` with the slots' current bindings: on the device mode the table's launch alone;
    /// on the host, first one exec update per patched node from the slots' addresses.
    pub fn launch(
        &mut self,
        table: &mut ArgTable,
        exec: &mut GraphExec,
        stream: &Stream,
    ) -> Result<()> {
        const CALL: &str = "Prelude::launch";
        if exec.graph_id() != self.graph {
            return Err(Error::misuse(
                CALL,
                Misuse::OtherGraph,
                "the exec is not of the graph the prelude was installed in",
            ));
        }
        if table.key() != self.table {
            let reason = "not the table the prelude reads";
            return Err(Error::misuse(CALL, Misuse::OtherTable, reason));
        }
        if exec.updates() > 0 {
            return Err(Error::misuse(
                CALL,
                Misuse::ExecUpdated,
                "the exec was updated from another graph since it was instantiated: the prelude's words are of the graph it was installed in",
            ));
        }
        let Some((patcher, bases)) = &mut self.host else {
            return table.launch(exec, stream);
        };
        for (b, s) in bases.iter_mut().zip(&self.slots) {
            if !table.is_bound(s.index) {
                return Err(Error::misuse(
                    CALL,
                    Misuse::Unbound {
                        slot: s.index as usize,
                    },
                    format!("slot {} is not bound", s.index),
                ));
            }
            *b = table.word(s.index);
        }
        // SAFETY: each address is the slot's binding, which the table keeps alive until the
        // launches that may read it have finished (the exec is launched only here, right after:
        // its key makes ArgTable::launch refuse it), and which the slot checked to be at least as
        // long and as aligned as the captured buffer (`check_slots`).
        unsafe { patcher.rebind(exec, bases)? };
        table.launch_host_patched(exec, stream)
    }
}

/// Each slot is the table's and accepts only buffers the captured kernels can read.
fn check_slots(
    table: &ArgTable,
    discovery: &Discovery,
    dynamic: &[Dynamic],
    slots: &[SlotRef],
) -> Result<()> {
    const CALL: &str = "Prelude::install";
    if slots.len() != dynamic.len() {
        return Err(Error::misuse(
            CALL,
            Misuse::CountMismatch {
                expected: dynamic.len(),
                got: slots.len(),
            },
            format!(
                "{} slots for {} dynamic buffers",
                slots.len(),
                dynamic.len()
            ),
        ));
    }
    for (k, (s, d)) in slots.iter().zip(dynamic).enumerate() {
        if !table.owns(s) {
            return Err(Error::misuse(
                CALL,
                Misuse::OtherTable,
                format!("slot {k} is not a slot of the table"),
            ));
        }
        if s.min_bytes < d.len {
            return Err(Error::misuse(
                CALL,
                Misuse::SlotTooPermissive { slot: k },
                format!(
                    "slot {k} accepts buffers of {} bytes, the captured buffer has {}: make it with ptr_slot_with(align, min_len)",
                    s.min_bytes, d.len
                ),
            ));
        }
        if s.align < 16 {
            return Err(Error::misuse(
                CALL,
                Misuse::SlotTooPermissive { slot: k },
                format!("slot {k} accepts addresses aligned to {} bytes; the captured kernels may assume 16", s.align),
            ));
        }
    }
    if let Some(p) = discovery.patches.iter().find(|p| p.buffer >= slots.len()) {
        return Err(Error::misuse(
            CALL,
            Misuse::DiscoveryMismatch,
            format!(
                "a patch names dynamic buffer {} of {}",
                p.buffer,
                slots.len()
            ),
        ));
    }
    Ok(())
}

/// The node of `graph` running `table`'s refresh: it must exist and be a root.
fn refresh_node(
    graph: &Graph,
    table: &ArgTable,
    first: &[KernelSnapshot],
    edges: &[crate::graph::Edge],
) -> Result<Node> {
    const CALL: &str = "Prelude::install";
    if let Some(s) = first.iter().find(|s| s.node.graph != graph.handle.id) {
        return Err(Error::misuse(
            CALL,
            Misuse::OtherGraph,
            format!(
                "the snapshots are not of this graph (node {:?} is another graph's): read them with kernel_snapshots from the graph the prelude goes into",
                s.node.as_raw()
            ),
        ));
    }
    if graph.handle.is_device_updatable() {
        return Err(Error::misuse(
            CALL,
            Misuse::DeviceUpdatable,
            "the graph already has a prelude installed",
        ));
    }
    let f = table.refresh_function().as_raw();
    let mut found = first.iter().filter(|s| s.func == f);
    let (Some(r), None) = (found.next(), found.next()) else {
        return Err(Error::misuse(
            CALL,
            Misuse::NoRefresh,
            "the graph must run the table's refresh exactly once (record_refresh first in the capture)",
        ));
    };
    if graph.launch_key != Some(table.key()) {
        return Err(Error::misuse(
            CALL,
            Misuse::NoRefresh,
            "the graph does not refresh this table",
        ));
    }
    if edges.iter().any(|e| e.to == r.node) {
        return Err(Error::misuse(
            CALL,
            Misuse::RefreshNotFirst,
            "the table's refresh must be the graph's first node (record_refresh first in the capture)",
        ));
    }
    Ok(r.node)
}

/// The shipped prelude kernel for this context's GPU, or why there is none. The cubin is loaded
/// once per context, and stays loaded until the context goes.
fn load(ctx: &Context) -> std::result::Result<Function, String> {
    let cubins = &graph_rt_kernels::PRELUDE;
    let (major, minor) = ctx
        .device()
        .compute_capability()
        .map_err(|e| e.to_string())?;
    let image = cubins
        .for_compute_capability(major.max(0) as u32, minor.max(0) as u32)
        .ok_or_else(|| {
            format!("no prelude cubin for compute capability {major}.{minor} (shipped: sm_80 for 8.x, sm_90 for 9.0)")
        })?;
    // SAFETY: a complete cubin shipped in the kernels crate (checked fresh in CI), the same
    // for every call on this context (its device does not change).
    let module: Module = unsafe { ctx.cached_cubin("graph_rt_kernels::PRELUDE", image) }
        .map_err(|e| format!("the prelude cubin did not load: {e}"))?;
    module
        .function("prelude_refresh_patch")
        .map_err(|e| format!("the prelude cubin has no prelude_refresh_patch: {e}"))
}

/// What `install_device` patches: the discovery on the graph's snapshots, the slots, the
/// graph's edges and refresh node as read by `install`, and the first patched node (its
/// index, node and device handle), already made device-updatable by `install`'s probe.
struct Target<'a> {
    first: &'a [KernelSnapshot],
    discovery: &'a Discovery,
    slots: &'a [SlotRef],
    edges: &'a [crate::graph::Edge],
    refresh: Node,
    probed: (usize, Node, u64),
}

/// Marks the patched nodes device-updatable, uploads the patches and makes the refresh node run
/// the prelude's refresh-and-patch kernel, with a full edge to each patched node.
fn install_device(graph: &mut Graph, table: &ArgTable, t: &Target<'_>, f: &Function) -> Result<()> {
    const CALL: &str = "Prelude::install";
    graph.ctx.bind()?;
    // From here on the graph is treated as having device-updatable nodes, whatever fails.
    graph.handle.mark_device_updatable();
    // Patches by node: the probed node, the lowest, comes first.
    let mut patched: Vec<(usize, Node, u64)> = vec![t.probed];
    let mut words: Vec<u64> = Vec::with_capacity(t.discovery.patches.len() * PATCH_WORDS);
    let mut patches = t.discovery.patches.clone();
    patches.sort_by_key(|p| (p.node, p.offset));
    for p in &patches {
        let snap = t.first.get(p.node).ok_or_else(|| {
            let reason = format!("no kernel node {} among the snapshots", p.node);
            Error::misuse(CALL, Misuse::DiscoveryMismatch, reason)
        })?;
        let dev = match patched.last() {
            Some((n, _, dev)) if *n == p.node => *dev,
            _ => {
                let dev = {
                    let _guard = graph.handle.lock(CALL)?;
                    // SAFETY: a kernel node of this live, locked graph.
                    unsafe { crate::graph::make_device_updatable(snap.node.raw)? }
                };
                patched.push((p.node, snap.node, dev));
                dev
            }
        };
        // Parameter buffers are at most 32 KiB (CUDA); `check_slots` checked `p.buffer`.
        let offset = u32::try_from(p.offset).map_err(|_| {
            let reason = "a patch's parameter offset beyond 4 GiB";
            Error::misuse(CALL, Misuse::DiscoveryMismatch, reason)
        })?;
        words.extend(pack(dev, p.interior, offset, t.slots[p.buffer].index));
    }
    let buffer = DeviceBuffer::from_host(&graph.ctx, &words)?;
    let count = patches.len() as u32;
    let args = table.refresh_args().with_patches(buffer.as_raw(), count);
    // Every patched node must follow the refresh-and-patch kernel by full edges. Those a
    // capture put after the refresh already do (a chain stays a chain: extra edges from one
    // node to many cost the driver per node); the others get a full edge, before the node
    // starts patching (so a failure leaves no patching kernel racing its targets).
    let reached = reachable(t.edges, t.refresh);
    let to: Vec<Node> = patched
        .iter()
        .map(|(_, n, _)| *n)
        .filter(|n| !reached.contains(&n.key()))
        .collect();
    if !to.is_empty() {
        graph.add_dependencies(&vec![t.refresh; to.len()], &to)?;
    }
    // As many 256-thread blocks as the refresh has, or as the patches need.
    let blocks = table.refresh_blocks().max(count.div_ceil(256));
    // SAFETY: prelude_refresh_patch does what the refresh node did with the same table (kept
    // alive by the graph since the refresh was recorded), then reads `count` 24-byte patches
    // from `buffer` (kept alive by the graph below) and writes only the device-updatable
    // nodes' parameters; any grid of 256-thread blocks.
    unsafe { graph.set_kernel(t.refresh, f, &LaunchConfig::new(blocks, 256u32), args)? };
    graph.keep_alive(buffer.allocation().clone());
    Ok(())
}

/// Keys of the nodes that full edges of `edges` lead to from `from` (programmatic and
/// launch-order edges let a node start before its predecessor ends: they do not order).
fn reachable(edges: &[crate::graph::Edge], from: Node) -> std::collections::HashSet<usize> {
    let mut next: std::collections::HashMap<usize, Vec<Node>> = Default::default();
    for e in edges
        .iter()
        .filter(|e| e.kind == crate::graph::EdgeKind::Full)
    {
        next.entry(e.from.key()).or_default().push(e.to);
    }
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![from];
    while let Some(n) = stack.pop() {
        for t in next.get(&n.key()).into_iter().flatten() {
            if seen.insert(t.key()) {
                stack.push(*t);
            }
        }
    }
    seen
}

/// One `PreludePatch` as the kernel reads it: `{node, interior, offset, slot}`, the last two
/// `u32`s sharing the third little-endian word.
fn pack(node: u64, interior: u64, offset: u32, slot: u32) -> [u64; PATCH_WORDS] {
    [node, interior, offset as u64 | (slot as u64) << 32]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packed words are the bytes of the C struct (`static_assert`ed 24 bytes in
    /// prelude.cu): node at 0, interior at 8, offset at 16, slot at 20.
    #[test]
    fn patches_pack_as_the_c_struct() {
        let w = pack(0x1122_3344_5566_7788, 0x40, 0x2a8, 7);
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(bytes.len(), 24);
        assert_eq!(&bytes[0..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&bytes[8..16], &0x40u64.to_le_bytes());
        assert_eq!(&bytes[16..20], &0x2a8u32.to_le_bytes());
        assert_eq!(&bytes[20..24], &7u32.to_le_bytes());
    }

    #[test]
    fn reports_say_where_the_words_are_rewritten() {
        let mut r = PreludeReport {
            mode: PreludeMode::Device,
            nodes: 8,
            words: 67,
        };
        assert_eq!(
            r.to_string(),
            "67 words in 8 kernel nodes rewritten on the device by the in-graph prelude"
        );
        r.mode = PreludeMode::Host {
            reason: "no prelude cubin for compute capability 10.0".into(),
        };
        assert!(r
            .to_string()
            .ends_with("(no prelude cubin for compute capability 10.0)"));
    }
}
