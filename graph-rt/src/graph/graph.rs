//! Graphs: nodes and dependencies, built explicitly or by stream capture (see `capture`).
//!
//! A [`Graph`] keeps alive every buffer, module, event and callback its nodes reference through
//! graph-rt's APIs, and hands them to every [`GraphExec`](crate::GraphExec) made from it.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::marker::PhantomData;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytemuck::Pod;
use cuda_sys::{CUevent, CUgraph, CUgraphNode, CUgraphNodeType};

pub(crate) use super::node::{copy_params, kernel_params, memset_params};
pub use super::node::{Edge, EdgeKind, Node, NodeKind};
use crate::driver::Context;
use crate::driver::DeviceBuffer;
use crate::driver::Event;
use crate::driver::Function;
use crate::error::{check, Error, Result};
use crate::launch::{check_layout, KernelArgs, LaunchConfig};
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
    pub ptr: cuda_sys::CUdeviceptr,
    /// Size in bytes.
    pub bytes: usize,
}

impl crate::launch::KernelArg for GraphAllocation {
    type Param = cuda_sys::CUdeviceptr;
    fn to_param(&self) -> cuda_sys::CUdeviceptr {
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
/// shared_between_threads::<graph_rt_core::Graph>();
/// ```
pub struct Graph {
    pub(crate) raw: CUgraph,
    pub(crate) handle: Arc<GraphHandle>,
    pub(crate) ctx: Context,
    pub(crate) keep: Arc<Vec<Resource>>,
    pub(crate) functions: HashMap<usize, Function>,
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
            return Err(Error::invalid(
                call,
                "the graph is unusable: a capture into it failed, which leaves it undefined (CUDA); drop it",
            ));
        }
        Ok(self.lock.lock())
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
        // SAFETY: the last owner of the graph is gone.
        let r = inner.bind().and_then(|_| {
            check("cuGraphDestroy", unsafe {
                cuda_sys::cuGraphDestroy(self.raw)
            })
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

type DriverResult = std::result::Result<cuda_sys::CUresult, cuda_sys::LoadError>;

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
        check("cuGraphCreate", unsafe {
            cuda_sys::cuGraphCreate(&mut raw, 0)
        })?;
        Ok(Self::from_parts(ctx, raw, Vec::new(), HashMap::new()))
    }

    pub(crate) fn from_parts(
        ctx: &Context,
        raw: CUgraph,
        keep: Vec<Resource>,
        functions: HashMap<usize, Function>,
    ) -> Self {
        let handle = Arc::new(GraphHandle {
            raw,
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            ctx: ctx.clone(),
            lock: parking_lot::ReentrantMutex::new(()),
            broken: std::sync::atomic::AtomicBool::new(false),
        });
        Self {
            raw,
            handle,
            ctx: ctx.clone(),
            keep: Arc::new(keep),
            functions,
            _not_sync: PhantomData,
        }
    }

    /// Wraps a graph made elsewhere; graph-rt destroys it on drop. Nothing its nodes reference
    /// is kept alive by graph-rt.
    ///
    /// # Safety
    /// `raw` must be a valid graph of `ctx`, owned by nobody else.
    pub unsafe fn from_raw(ctx: &Context, raw: CUgraph) -> Self {
        Self::from_parts(ctx, raw, Vec::new(), HashMap::new())
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

    /// Adds a kernel node after `deps`, checking `args` against the kernel's parameter layout.
    ///
    /// # Safety
    /// As [`Stream::launch`](crate::Stream::launch), for every replay of the graph.
    pub unsafe fn add_kernel<A: KernelArgs>(
        &mut self,
        deps: &[Node],
        f: &Function,
        config: &LaunchConfig,
        args: A,
    ) -> Result<Node> {
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock("cuGraphAddKernelNode")?;
        self.ctx.bind()?;
        let layout = f.param_layout()?;
        let deps = raw_nodes(deps, self.handle.id, "cuGraphAddKernelNode")?;
        let node = args.with_params(|params, sizes| -> Result<CUgraphNode> {
            check_layout(f, layout, sizes, "cuGraphAddKernelNode")?;
            let p = kernel_params(f, config, params.as_mut_ptr());
            let mut node = std::ptr::null_mut();
            // SAFETY: `p` points at parameter values alive for this call (the driver copies them).
            check("cuGraphAddKernelNode", unsafe {
                cuda_sys::cuGraphAddKernelNode(&mut node, self.raw, deps.as_ptr(), deps.len(), &p)
            })?;
            Ok(node)
        })?;
        // The node exists from here on: keep what it uses before anything else can fail.
        args.retain(self.kept());
        self.functions.insert(f.as_raw() as usize, f.clone());
        for attr in config.attributes() {
            // SAFETY: valid node and attribute value.
            check("cuGraphKernelNodeSetAttribute", unsafe {
                cuda_sys::cuGraphKernelNodeSetAttribute(node, attr.id, &attr.value)
            })?;
        }
        Ok(Node {
            raw: node,
            graph: self.handle.id,
        })
    }

    /// Adds one node after `deps` through `add`, which gets the out-pointer, the graph and the
    /// dependency list, with the graph locked and the context current.
    fn add_node(
        &mut self,
        call: &'static str,
        deps: &[Node],
        add: impl FnOnce(*mut CUgraphNode, CUgraph, *const CUgraphNode, usize) -> DriverResult,
    ) -> Result<Node> {
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock(call)?;
        self.ctx.bind()?;
        let deps = raw_nodes(deps, self.handle.id, call)?;
        let mut node = std::ptr::null_mut();
        check(call, add(&mut node, self.raw, deps.as_ptr(), deps.len()))?;
        Ok(Node {
            raw: node,
            graph: self.handle.id,
        })
    }

    /// Adds a device-to-device copy of all of `src` into `dst` (lengths must match).
    pub fn add_copy<T: Pod>(
        &mut self,
        deps: &[Node],
        dst: &DeviceBuffer<T>,
        src: &DeviceBuffer<T>,
    ) -> Result<Node> {
        if dst.len() != src.len() {
            return Err(Error::invalid(
                "cuGraphAddMemcpyNode",
                format!("copy of {} elements into {}", src.len(), dst.len()),
            ));
        }
        let (p, ctx) = (copy_params(dst, src), self.ctx.as_raw());
        // SAFETY: both allocations hold the bytes copied and are kept alive below.
        let node = self.add_node("cuGraphAddMemcpyNode", deps, |n, g, d, len| unsafe {
            cuda_sys::cuGraphAddMemcpyNode(n, g, d, len, &p, ctx)
        })?;
        self.kept().extend([
            dst.allocation().clone() as Resource,
            src.allocation().clone(),
        ]);
        Ok(node)
    }

    /// Adds a node that sets every 32-bit word of `dst` to `value` (element size a multiple of 4).
    pub fn add_fill_u32<T: Pod>(
        &mut self,
        deps: &[Node],
        dst: &DeviceBuffer<T>,
        value: u32,
    ) -> Result<Node> {
        let (p, ctx) = (
            memset_params("cuGraphAddMemsetNode", dst, value)?,
            self.ctx.as_raw(),
        );
        // SAFETY: the allocation holds the words set and is kept alive below.
        let node = self.add_node("cuGraphAddMemsetNode", deps, |n, g, d, len| unsafe {
            cuda_sys::cuGraphAddMemsetNode(n, g, d, len, &p, ctx)
        })?;
        self.kept().push(dst.allocation().clone());
        Ok(node)
    }

    /// Adds a node that does nothing: a join point.
    pub fn add_empty(&mut self, deps: &[Node]) -> Result<Node> {
        // SAFETY: valid out-pointer, graph and dependency list.
        self.add_node("cuGraphAddEmptyNode", deps, |n, g, d, len| unsafe {
            cuda_sys::cuGraphAddEmptyNode(n, g, d, len)
        })
    }

    /// Adds a node that records `event`.
    pub fn add_event_record(&mut self, deps: &[Node], event: &Event) -> Result<Node> {
        let add = cuda_sys::cuGraphAddEventRecordNode;
        self.add_event_node("cuGraphAddEventRecordNode", deps, event, add)
    }

    /// Adds a node that waits for `event`.
    pub fn add_event_wait(&mut self, deps: &[Node], event: &Event) -> Result<Node> {
        let add = cuda_sys::cuGraphAddEventWaitNode;
        self.add_event_node("cuGraphAddEventWaitNode", deps, event, add)
    }

    /// Adds an event node through `add` (record or wait), keeping the event alive.
    fn add_event_node(
        &mut self,
        call: &'static str,
        deps: &[Node],
        event: &Event,
        add: unsafe fn(
            *mut CUgraphNode,
            CUgraph,
            *const CUgraphNode,
            usize,
            CUevent,
        ) -> DriverResult,
    ) -> Result<Node> {
        let raw = event.as_raw();
        // SAFETY: the event is valid and kept alive below.
        let node = self.add_node(call, deps, |n, g, d, len| unsafe { add(n, g, d, len, raw) })?;
        self.kept().push(event.resource());
        Ok(node)
    }

    /// Adds a copy of `child` as one node; what `child` keeps alive, this graph keeps too.
    pub fn add_child_graph(&mut self, deps: &[Node], child: &Graph) -> Result<Node> {
        let _child_guard = child.handle.lock("cuGraphAddChildGraphNode")?;
        // SAFETY: valid graphs; the driver clones the child.
        let node = self.add_node("cuGraphAddChildGraphNode", deps, |n, g, d, len| unsafe {
            cuda_sys::cuGraphAddChildGraphNode(n, g, d, len, child.raw)
        })?;
        self.kept().extend(child.keep.iter().cloned());
        self.functions
            .extend(child.functions.iter().map(|(k, f)| (*k, f.clone())));
        Ok(node)
    }

    /// Adds a node that runs `callback` on a driver thread. It must not call CUDA; a panic in it
    /// is caught and discarded.
    pub fn add_host_callback<F: Fn() + Send + Sync + 'static>(
        &mut self,
        deps: &[Node],
        callback: F,
    ) -> Result<Node> {
        unsafe extern "C" fn trampoline<F: Fn()>(data: *mut c_void) {
            // SAFETY: `data` is the `Arc<F>` this graph keeps alive while the node exists.
            let f = unsafe { &*(data as *const F) };
            // A panic must not unwind into the driver.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        }
        let callback = Arc::new(callback);
        let p = cuda_sys::CUDA_HOST_NODE_PARAMS {
            fn_: Some(trampoline::<F>),
            userData: Arc::as_ptr(&callback) as *mut c_void,
        };
        // SAFETY: the callback outlives the node: the graph keeps it below.
        let node = self.add_node("cuGraphAddHostNode", deps, |n, g, d, len| unsafe {
            cuda_sys::cuGraphAddHostNode(n, g, d, len, &p)
        })?;
        self.kept().push(callback);
        Ok(node)
    }

    /// Adds a node that allocates `bytes` of device memory from the graph's pool on each replay.
    pub fn add_mem_alloc(
        &mut self,
        deps: &[Node],
        bytes: usize,
    ) -> Result<(Node, GraphAllocation)> {
        let mut p = cuda_sys::CUDA_MEM_ALLOC_NODE_PARAMS::default();
        p.poolProps.allocType = cuda_sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        p.poolProps.location.type_ = cuda_sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        p.poolProps.location.id = self.ctx.device().as_raw();
        p.bytesize = bytes;
        // SAFETY: valid parameters; the driver writes p.dptr.
        let node = self.add_node("cuGraphAddMemAllocNode", deps, |n, g, d, len| unsafe {
            cuda_sys::cuGraphAddMemAllocNode(n, g, d, len, &mut p)
        })?;
        Ok((node, GraphAllocation { ptr: p.dptr, bytes }))
    }

    /// Adds a node that frees a graph allocation.
    pub fn add_mem_free(&mut self, deps: &[Node], allocation: GraphAllocation) -> Result<Node> {
        // SAFETY: the driver checks that the address is a graph allocation.
        self.add_node("cuGraphAddMemFreeNode", deps, |n, g, d, len| unsafe {
            cuda_sys::cuGraphAddMemFreeNode(n, g, d, len, allocation.ptr)
        })
    }

    /// Makes each node of `to` depend on the node of `from` at the same index.
    pub fn add_dependencies(&mut self, from: &[Node], to: &[Node]) -> Result<()> {
        // SAFETY: full dependencies order everything; no kernel contract changes.
        unsafe { self.add_dependencies_of_kind(from, to, EdgeKind::Full) }
    }

    /// Makes each node of `to` depend on the node of `from` at the same index, in the way `kind`
    /// says (`cuGraphAddDependencies_v2`). Programmatic and launch-order edges join two kernel
    /// nodes (the driver refuses others).
    ///
    /// # Safety
    /// With [`EdgeKind::Programmatic`] or [`EdgeKind::LaunchOrder`] the kernel of each `to` node
    /// may start before its `from` node has finished: it must execute `griddepcontrol.wait`
    /// (`cudaGridDependencySynchronize()`) before it reads anything the `from` kernel writes, as
    /// `kernels::CHAIN_PDL` does. [`EdgeKind::Full`] has no such contract.
    pub unsafe fn add_dependencies_of_kind(
        &mut self,
        from: &[Node],
        to: &[Node],
        kind: EdgeKind,
    ) -> Result<()> {
        const CALL: &str = "cuGraphAddDependencies";
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock(CALL)?;
        if from.len() != to.len() {
            let reason = format!("{} sources for {} targets", from.len(), to.len());
            return Err(Error::invalid(CALL, reason));
        }
        let id = self.handle.id;
        let (f, t) = (raw_nodes(from, id, CALL)?, raw_nodes(to, id, CALL)?);
        let data = vec![cuda_sys::CUgraphEdgeData::from(kind); f.len()];
        // SAFETY: three equal-length arrays; nodes of this graph.
        check(CALL, unsafe {
            cuda_sys::cuGraphAddDependencies_v2(
                self.raw,
                f.as_ptr(),
                t.as_ptr(),
                data.as_ptr(),
                f.len(),
            )
        })
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
        let mut t = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: valid out-pointer and a node of this (live) graph.
        check("cuGraphNodeGetType", unsafe {
            cuda_sys::cuGraphNodeGetType(raw, &mut t)
        })?;
        Ok(t.into())
    }

    /// A deep copy (`cuGraphClone`) that keeps the same resources alive.
    pub fn try_clone(&self) -> Result<Graph> {
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock("cuGraphClone")?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid graph and out-pointer.
        check("cuGraphClone", unsafe {
            cuda_sys::cuGraphClone(&mut raw, self.raw)
        })?;
        let mut clone = Self::from_parts(&self.ctx, raw, Vec::new(), self.functions.clone());
        clone.keep = self.keep.clone();
        Ok(clone)
    }

    /// Writes the graph in Graphviz DOT form to `path` (`cuGraphDebugDotPrint`, verbose).
    pub fn write_dot(&self, path: impl AsRef<Path>) -> Result<()> {
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock("cuGraphDebugDotPrint")?;
        let path = path.as_ref();
        let c = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| Error::invalid("cuGraphDebugDotPrint", "the path contains a NUL byte"))?;
        let flags = cuda_sys::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE.0;
        // SAFETY: valid graph and NUL-terminated path.
        check("cuGraphDebugDotPrint", unsafe {
            cuda_sys::cuGraphDebugDotPrint(self.raw, c.as_ptr(), flags)
        })
    }
}

/// The nodes of a graph, in creation order (`cuGraphGetNodes`).
pub(crate) fn nodes_of(graph: CUgraph, id: u64) -> Result<Vec<Node>> {
    let mut n = 0;
    // SAFETY: a null array asks for the count.
    check("cuGraphGetNodes", unsafe {
        cuda_sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n)
    })?;
    let mut raw = vec![std::ptr::null_mut(); n];
    // SAFETY: the array holds n entries.
    check("cuGraphGetNodes", unsafe {
        cuda_sys::cuGraphGetNodes(graph, raw.as_mut_ptr(), &mut n)
    })?;
    raw.truncate(n);
    Ok(raw.into_iter().map(|raw| Node { raw, graph: id }).collect())
}

/// The edges of a graph (`cuGraphGetEdges_v2`); the caller holds the graph's lock.
pub(crate) fn edges_of(graph: CUgraph, id: u64) -> Result<Vec<Edge>> {
    use std::ptr::null_mut as null;
    let mut n = 0;
    // SAFETY: null arrays ask for the count.
    check("cuGraphGetEdges", unsafe {
        cuda_sys::cuGraphGetEdges_v2(graph, null(), null(), null(), &mut n)
    })?;
    let (mut from, mut to) = (vec![null(); n], vec![null(); n]);
    let mut data = vec![cuda_sys::CUgraphEdgeData::default(); n];
    // SAFETY: the three arrays hold n entries each.
    check("cuGraphGetEdges", unsafe {
        cuda_sys::cuGraphGetEdges_v2(
            graph,
            from.as_mut_ptr(),
            to.as_mut_ptr(),
            data.as_mut_ptr(),
            &mut n,
        )
    })?;
    let node = |raw| Node { raw, graph: id };
    Ok((0..n.min(from.len()))
        .map(|i| Edge {
            from: node(from[i]),
            to: node(to[i]),
            kind: data[i].into(),
        })
        .collect())
}

/// The nodes of a graph that is one chain (each node waits for at most one other and at most
/// one waits for it, all connected), in chain order; `None` for any other shape.
pub(crate) fn chain_order(graph: CUgraph, id: u64) -> Result<Option<Vec<CUgraphNode>>> {
    let nodes = nodes_of(graph, id)?;
    let edges = edges_of(graph, id)?;
    if nodes.is_empty() || edges.len() + 1 != nodes.len() {
        return Ok((nodes.is_empty()).then(Vec::new));
    }
    let mut next = HashMap::with_capacity(edges.len());
    let mut has_pred = std::collections::HashSet::with_capacity(edges.len());
    for e in &edges {
        if next.insert(e.from.raw as usize, e.to.raw).is_some()
            || !has_pred.insert(e.to.raw as usize)
        {
            return Ok(None);
        }
    }
    let mut roots = nodes
        .iter()
        .filter(|n| !has_pred.contains(&(n.raw as usize)));
    let (Some(root), None) = (roots.next(), roots.next()) else {
        return Ok(None);
    };
    let mut order = Vec::with_capacity(nodes.len());
    let mut at = Some(root.raw);
    while let Some(raw) = at {
        order.push(raw);
        at = next.get(&(raw as usize)).copied();
    }
    Ok((order.len() == nodes.len()).then_some(order))
}
