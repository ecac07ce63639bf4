//! Graphs: nodes and dependencies, built explicitly or by stream capture (see `capture`).
//!
//! A [`Graph`] keeps alive every buffer, module, event and callback its nodes reference through
//! graph-rt's APIs, and hands them to every [`GraphExec`](crate::GraphExec) made from it.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CString;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use graph_rt_sys::{CUgraph, CUgraphNode};

use super::identity::{CapturedNode, Creation};
pub(crate) use super::node::{copy_params, kernel_params, memset_params};
pub use super::node::{Edge, Node, NodeKind};
use super::raw_node::CopyNodeParams;
use crate::driver::Function;
use crate::driver::{cu, Context};
use crate::error::{Error, Misuse, Result};
use crate::launch::LaunchConfig;
use crate::resource::Resource;

/// What graph-rt knows of a kernel node of an exec: its function and current configuration.
#[derive(Clone)]
pub(crate) struct KernelInfo {
    pub(crate) function: Function,
    pub(crate) config: LaunchConfig,
}

/// Device memory allocated by a graph's memory-allocation node: valid from that node until its
/// free node (or, without one, until freed elsewhere) in each replay. Pass it to kernels of the
/// same graph as a device address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphAllocation {
    /// The device address (the same in every replay).
    pub ptr: graph_rt_sys::CUdeviceptr,
    /// Size in bytes.
    pub bytes: usize,
}

/// What a memory node does ([`Graph::memory_node`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryNode {
    /// Allocates this memory (the same address in every replay).
    Alloc(GraphAllocation),
    /// Frees the graph allocation at this address.
    Free(graph_rt_sys::CUdeviceptr),
}

// SAFETY: the graph that allocated the memory owns it; `retain` has nothing to hand over.
unsafe impl crate::launch::KernelArg for GraphAllocation {
    type Param = graph_rt_sys::CUdeviceptr;
    fn to_param(&self) -> graph_rt_sys::CUdeviceptr {
        self.ptr
    }
}

/// A CUDA graph (`CUgraph`), destroyed on drop.
///
/// CUDA graphs are not thread-safe: a `Graph` may move between threads (`Send`) but not be shared
/// by them (`!Sync`), and every change takes `&mut self`:
///
/// ```compile_fail
/// fn shared_between_threads<T: Sync>() {}
/// shared_between_threads::<graph_rt::Graph>();
/// ```
pub struct Graph {
    pub(crate) raw: CUgraph,
    pub(crate) handle: Arc<GraphHandle>,
    pub(crate) ctx: Context,
    pub(crate) keep: Arc<Vec<Resource>>,
    pub(crate) functions: HashMap<usize, Function>,
    // Replays must be launched through the owner of this key (an argument table).
    pub(crate) launch_key: Option<u64>,
    // The graph this one is a clone of, and its nodes' copies here.
    cloned_from: Option<(u64, HashMap<usize, usize>)>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: a CUgraph may be used from any thread as long as calls on it are not concurrent, which
// `!Sync` and `&mut self` for changes ensure.
unsafe impl Send for Graph {}

/// Owns the `CUgraph`: shared with the execs made from it, whose per-node updates name its nodes.
pub(crate) struct GraphHandle {
    raw: CUgraph,
    pub(crate) id: u64,
    ctx: Context,
    // Serialises the driver calls on the graph of its `Graph` and of the execs that read it;
    // reentrant, so that an exec may read the graph from inside `capture_into` on one thread.
    lock: parking_lot::ReentrantMutex<()>,
    broken: std::sync::atomic::AtomicBool,
    // The order graph-rt made the nodes in (see `identity`).
    pub(crate) creation: parking_lot::Mutex<Creation>,
    // Has a memory node graph-rt made: CUDA allows one exec of it at a time.
    pub(super) one_exec: std::sync::atomic::AtomicBool,
    // Has device-updatable kernel nodes (an in-graph prelude patches them): no clone, no
    // whole-graph exec update, one exec at a time, uploaded after host-side updates (CUDA).
    pub(super) device_updatable: std::sync::atomic::AtomicBool,
    // Execs of the graph not yet dropped.
    pub(crate) execs: std::sync::atomic::AtomicUsize,
}

impl GraphHandle {
    pub(crate) fn raw(&self) -> CUgraph {
        self.raw
    }

    /// Locks the graph for driver calls; refused once a failed `capture_into` left the graph
    /// in the undefined state CUDA gives it then.
    pub(crate) fn lock(
        &self,
        call: &'static str,
    ) -> Result<parking_lot::ReentrantMutexGuard<'_, ()>> {
        if self.broken.load(Ordering::Acquire) {
            return Err(Error::misuse(
                call,
                Misuse::GraphBroken,
                "the graph is unusable: a capture into it failed, which leaves it undefined (CUDA); drop it",
            ));
        }
        Ok(self.lock.lock())
    }

    /// Whether the graph has device-updatable kernel nodes.
    pub(crate) fn is_device_updatable(&self) -> bool {
        self.device_updatable.load(Ordering::Acquire)
    }

    /// From now on the graph has device-updatable kernel nodes (the in-graph prelude makes
    /// them): no clone, no whole-graph exec update, one exec at a time (CUDA's rules).
    pub(crate) fn mark_device_updatable(&self) {
        self.device_updatable.store(true, Ordering::Release);
        self.one_exec.store(true, Ordering::Relaxed);
    }

    /// The error of `call` on a graph with device-updatable nodes, which CUDA does not support.
    pub(crate) fn refuse_device_updatable(&self, call: &'static str, what: &str) -> Result<()> {
        if self.is_device_updatable() {
            return Err(Error::misuse(
                call,
                Misuse::DeviceUpdatable,
                format!("the graph has device-updatable kernel nodes (an in-graph prelude patches them), and CUDA does not {what} such a graph"),
            ));
        }
        Ok(())
    }

    /// Marks the graph unusable (see [`GraphHandle::lock`]).
    pub(crate) fn set_broken(&self) {
        self.broken.store(true, Ordering::Release);
    }
}

// SAFETY: every driver call on the graph, by its `Graph` or by an exec, holds `lock`.
unsafe impl Send for GraphHandle {}
// SAFETY: as above.
unsafe impl Sync for GraphHandle {}

impl Drop for GraphHandle {
    fn drop(&mut self) {
        if self.broken.load(Ordering::Acquire) {
            // After a failed capture into it the driver no longer accepts the handle (seen on
            // driver 580: cuGraphGetNodes and cuGraphDestroy both return INVALID_VALUE); leaking
            // is the safe side of a possible double destroy.
            tracing::warn!("graph-rt: not destroying a graph whose capture failed");
            return;
        }
        let inner = &self.ctx.inner;
        let r = inner.bind().and_then(|_| {
            // SAFETY: the last owner of the graph is gone.
            unsafe { cu!(cuGraphDestroy(self.raw)) }
        });
        inner.record(r);
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("raw", &self.raw)
            .field("kept", &self.keep.len())
            .finish()
    }
}

/// What a driver call of a node builder returned (see `cu_code!`).
pub(crate) type DriverResult = Result<crate::driver::Returned>;

/// The raw handles of `nodes`, which must belong to graph `graph`.
pub(crate) fn raw_nodes(
    nodes: &[Node],
    graph: u64,
    call: &'static str,
) -> Result<Vec<CUgraphNode>> {
    nodes.iter().map(|n| n.raw_in(graph, call)).collect()
}

/// Identifies graphs for [`Node`]s; never reused.
static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

impl Graph {
    /// An empty graph (`cuGraphCreate`).
    pub fn new(ctx: &Context) -> Result<Self> {
        ctx.bind()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer; flags must be 0.
        unsafe { cu!(cuGraphCreate(&mut raw, 0)) }?;
        Ok(Self::from_parts(
            ctx,
            raw,
            Vec::new(),
            HashMap::new(),
            Creation::empty(),
        ))
    }

    pub(crate) fn from_parts(
        ctx: &Context,
        raw: CUgraph,
        keep: Vec<Resource>,
        functions: HashMap<usize, Function>,
        creation: Creation,
    ) -> Self {
        let handle = Arc::new(GraphHandle {
            raw,
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            ctx: ctx.clone(),
            lock: parking_lot::ReentrantMutex::new(()),
            broken: std::sync::atomic::AtomicBool::new(false),
            creation: parking_lot::Mutex::new(creation),
            one_exec: std::sync::atomic::AtomicBool::new(false),
            device_updatable: std::sync::atomic::AtomicBool::new(false),
            execs: std::sync::atomic::AtomicUsize::new(0),
        });
        Self {
            raw,
            handle,
            ctx: ctx.clone(),
            keep: Arc::new(keep),
            functions,
            launch_key: None,
            cloned_from: None,
            _not_sync: PhantomData,
        }
    }

    /// Wraps a graph made elsewhere; graph-rt destroys it on drop. Nothing its nodes reference
    /// is kept alive by graph-rt.
    ///
    /// # Safety
    /// `raw` must be a valid graph of `ctx`, owned by nobody else.
    pub unsafe fn from_raw(ctx: &Context, raw: CUgraph) -> Self {
        // Its nodes were made elsewhere: their creation order is unknown (see `identity`).
        Self::from_parts(ctx, raw, Vec::new(), HashMap::new(), Creation::default())
    }

    /// The raw `CUgraph`. Do not destroy it; changes made through it are not tracked (nothing
    /// they reference is kept alive).
    pub fn as_raw(&self) -> CUgraph {
        self.raw
    }

    /// The context of this graph.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Keeps `resource` alive as long as this graph and its execs.
    pub fn keep_alive(&mut self, resource: Resource) {
        self.kept().push(resource);
    }

    pub(crate) fn kept(&mut self) -> &mut Vec<Resource> {
        Arc::make_mut(&mut self.keep)
    }

    /// Every node, in creation order.
    pub fn nodes(&self) -> Result<Vec<Node>> {
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock("cuGraphGetNodes")?;
        nodes_of(self.raw, self.handle.id)
    }

    /// Every edge, with how its target depends on its source (`cuGraphGetEdges_v2`).
    pub fn edges(&self) -> Result<Vec<Edge>> {
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock("cuGraphGetEdges")?;
        edges_of(self.raw, self.handle.id)
    }

    /// What `node` does.
    pub fn node_kind(&self, node: Node) -> Result<NodeKind> {
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock("cuGraphNodeGetType")?;
        let raw = node.raw_in(self.handle.id, "cuGraphNodeGetType")?;
        // SAFETY: a node of this (live) graph.
        Ok(unsafe { super::raw_node::node_type(raw) }?.into())
    }

    /// The device memory `node` copies or sets, as `(first byte, bytes)` ranges: a copy's
    /// device-side source and destination, a set's destination; empty for other kinds of node.
    pub fn copied_ranges(&self, node: Node) -> Result<Vec<(u64, u64)>> {
        Ok(self
            .copy_node_params(node)?
            .map_or_else(Vec::new, |p| p.operands().iter().map(|o| o.range).collect()))
    }

    /// A copy or set node's parameters (`None` for other kinds of node).
    pub(crate) fn copy_node_params(&self, node: Node) -> Result<Option<CopyNodeParams>> {
        let handle = Arc::clone(&self.handle);
        // Named for the method: the driver call is a copy's or a set's, by the node's type.
        let _guard = handle.lock("Graph::copy_node_params")?;
        let raw = node.raw_in(self.handle.id, "Graph::copy_node_params")?;
        // SAFETY: a node of this (live) graph.
        unsafe { super::raw_node::copy_node_params(raw) }
    }

    /// What `node` allocates or frees, if it is a memory node (`None` for other kinds).
    pub fn memory_node(&self, node: Node) -> Result<Option<MemoryNode>> {
        let handle = Arc::clone(&self.handle);
        // Named for the method: the driver call is an allocation's or a free's, by the type.
        let _guard = handle.lock("Graph::memory_node")?;
        let raw = node.raw_in(self.handle.id, "Graph::memory_node")?;
        // SAFETY: a node of this (live) graph.
        unsafe { super::raw_node::memory_node(raw) }
    }

    /// The memory of every allocation node, in creation order (a capture's: the order its
    /// stream-ordered allocations were made in).
    pub fn mem_alloc_ranges(&self) -> Result<Vec<GraphAllocation>> {
        let mut out = Vec::new();
        for node in self.nodes()? {
            if let Some(MemoryNode::Alloc(a)) = self.memory_node(node)? {
                out.push(a);
            }
        }
        Ok(out)
    }

    /// Whether the graph has memory nodes, which CUDA allows one exec of at a time: noted so
    /// that a dropped exec is destroyed at once (see [`GraphExec`](crate::GraphExec)'s drop).
    pub(crate) fn note_memory_nodes(&self) {
        self.handle.one_exec.store(true, Ordering::Relaxed);
    }

    /// A deep copy (`cuGraphClone`) that keeps the same resources alive. Refused for a graph
    /// with device-updatable nodes (an installed prelude), which CUDA cannot clone. Its nodes pair with
    /// this graph's in an exec update; [`Graph::node_in_clone`] finds the copy of a node.
    pub fn try_clone(&self) -> Result<Graph> {
        self.handle
            .refuse_device_updatable("cuGraphClone", "clone")?;
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock("cuGraphClone")?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid graph and out-pointer.
        unsafe { cu!(cuGraphClone(&mut raw, self.raw)) }?;
        let find = |original: CUgraphNode| -> Result<CUgraphNode> {
            let mut copy = std::ptr::null_mut();
            // SAFETY: a node of this graph (alive, locked) and its fresh clone.
            unsafe { cu!(cuGraphNodeFindInClone(&mut copy, original, raw)) }?;
            Ok(copy)
        };
        let mapped = (|| -> Result<_> {
            let map: HashMap<usize, usize> = nodes_of(self.raw, self.handle.id)?
                .into_iter()
                .map(|n| Ok((n.key(), find(n.raw)? as usize)))
                .collect::<Result<_>>()?;
            let c = self.handle.creation.lock();
            let nodes = c
                .nodes
                .iter()
                .map(|n| {
                    map.get(&(*n as usize))
                        .map_or(std::ptr::null_mut(), |c| *c as CUgraphNode)
                })
                .collect();
            Ok((
                map,
                Creation {
                    nodes,
                    complete: c.complete,
                    captures: c.captures.clone(),
                },
            ))
        })();
        let (map, creation) = match mapped {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: the clone made above, not handed out.
                let _ = unsafe { graph_rt_sys::cuGraphDestroy(raw) };
                return Err(e);
            }
        };
        let mut clone =
            Self::from_parts(&self.ctx, raw, Vec::new(), self.functions.clone(), creation);
        clone.keep = self.keep.clone();
        clone.launch_key = self.launch_key;
        clone.cloned_from = Some((self.handle.id, map));
        Ok(clone)
    }

    /// The copy in this graph (made by [`Graph::try_clone`]) of `original`, a node of the graph
    /// it was cloned from.
    pub fn node_in_clone(&self, original: Node) -> Result<Node> {
        let copy = self
            .cloned_from
            .as_ref()
            .filter(|(id, _)| *id == original.graph)
            .and_then(|(_, map)| map.get(&original.key()).map(|c| *c as CUgraphNode));
        let raw = copy.ok_or_else(|| {
            Error::misuse(
                "cuGraphNodeFindInClone",
                Misuse::OtherGraph,
                "the node is not of the graph this one was cloned from",
            )
        })?;
        Ok(Node {
            raw,
            graph: self.handle.id,
        })
    }

    /// The node a capture operation handed back ([`CaptureScope::launch`](super::CaptureScope::launch)
    /// and the like), once the capture into this graph has ended.
    pub fn node(&self, captured: CapturedNode) -> Result<Node> {
        let raw = self.handle.creation.lock().captured(captured);
        let raw = raw.ok_or_else(|| {
            Error::misuse(
                "Graph::node",
                Misuse::OtherGraph,
                "the captured node is not of a capture into this graph",
            )
        })?;
        Ok(Node {
            raw,
            graph: self.handle.id,
        })
    }

    /// Writes the graph in Graphviz DOT form to `path` (`cuGraphDebugDotPrint`, verbose).
    pub fn write_dot(&self, path: impl AsRef<Path>) -> Result<()> {
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock("cuGraphDebugDotPrint")?;
        let path = path.as_ref();
        let c = CString::new(path.to_string_lossy().as_bytes()).map_err(|_| {
            let reason = "the path contains a NUL byte";
            Error::misuse("cuGraphDebugDotPrint", Misuse::NulByte, reason)
        })?;
        let flags = graph_rt_sys::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE.0;
        // SAFETY: valid graph and NUL-terminated path.
        unsafe { cu!(cuGraphDebugDotPrint(self.raw, c.as_ptr(), flags)) }
    }
}

/// The nodes of a graph, in creation order (`cuGraphGetNodes`).
pub(crate) fn nodes_of(graph: CUgraph, id: u64) -> Result<Vec<Node>> {
    let mut n = 0;
    // SAFETY: a null array asks for the count.
    unsafe { cu!(cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n)) }?;
    // The driver refuses arrays with a count of 0.
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut raw = vec![std::ptr::null_mut(); n];
    // SAFETY: the array holds n entries.
    unsafe { cu!(cuGraphGetNodes(graph, raw.as_mut_ptr(), &mut n)) }?;
    raw.truncate(n);
    Ok(raw.into_iter().map(|raw| Node { raw, graph: id }).collect())
}

/// The edges of a graph (`cuGraphGetEdges_v2`); the caller holds the graph's lock.
pub(crate) fn edges_of(graph: CUgraph, id: u64) -> Result<Vec<Edge>> {
    use std::ptr::null_mut as null;
    let mut n = 0;
    // SAFETY: null arrays ask for the count.
    unsafe { cu!(cuGraphGetEdges_v2(graph, null(), null(), null(), &mut n)) }?;
    // The driver refuses arrays with a count of 0 (a graph with no edges).
    if n == 0 {
        return Ok(Vec::new());
    }
    let (mut from, mut to) = (vec![null(); n], vec![null(); n]);
    let mut data = vec![graph_rt_sys::CUgraphEdgeData::default(); n];
    // SAFETY: the three arrays hold n entries each.
    unsafe {
        cu!(cuGraphGetEdges_v2(
            graph,
            from.as_mut_ptr(),
            to.as_mut_ptr(),
            data.as_mut_ptr(),
            &mut n,
        ))
    }?;
    let node = |raw| Node { raw, graph: id };
    Ok((0..n.min(from.len()))
        .map(|i| Edge {
            from: node(from[i]),
            to: node(to[i]),
            kind: data[i].into(),
        })
        .collect())
}

/// How many nodes a graph holds (`cuGraphGetNodes`).
pub(crate) fn node_count(graph: CUgraph) -> Result<usize> {
    let mut n = 0;
    // SAFETY: a null array asks for the count.
    unsafe { cu!(cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n)) }?;
    Ok(n)
}
