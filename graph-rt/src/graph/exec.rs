//! Executable graphs: instantiate, upload, launch, and change what the nodes do between launches
//! without re-capturing (per-node parameter updates, whole-graph update).

use std::cell::{Cell, RefCell};
use std::collections::hash_map::{Entry, HashMap};
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytemuck::Pod;
use graph_rt_sys::{CUcontext, CUgraphExec, CUgraphInstantiate_flags as F, CUgraphNode};

use super::graph::{
    copy_params, kernel_params, memset_params, Graph, GraphHandle, KernelInfo, Node,
};
use super::identity::Identity;
use super::retention::{AddrMap, InFlight, Retention};
use crate::driver::Context;
use crate::driver::DeviceBuffer;
use crate::driver::Function;
use crate::driver::{cu, Parked, Stream, StreamInner};
use crate::error::{Error, Misuse, Result};
use crate::launch::{check_layout, KernelArgs, LaunchConfig};
use crate::resource::Resource;

/// How to instantiate a graph.
#[derive(Debug, Clone, Copy, Default)]
pub struct InstantiateOptions<'a> {
    /// Uploads the exec to the device on this stream as part of instantiation.
    pub upload: Option<&'a Stream>,
    /// Frees unfreed graph allocations before each relaunch (`AUTO_FREE_ON_LAUNCH`).
    pub auto_free_on_launch: bool,
    /// Makes the exec launchable from the device (`DEVICE_LAUNCH`).
    pub device_launch: bool,
    /// Honors per-node priority attributes (`USE_NODE_PRIORITY`).
    pub use_node_priority: bool,
}

impl InstantiateOptions<'_> {
    fn flags(&self) -> u64 {
        let on = |on, flag: F| if on { flag.0 as u64 } else { 0 };
        let free = F::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
        let device = F::CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH;
        let priority = F::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
        on(self.auto_free_on_launch, free)
            | on(self.device_launch, device)
            | on(self.use_node_priority, priority)
    }
}

/// An executable graph (`CUgraphExec`).
///
/// It keeps alive everything the graph whose parameters it runs keeps alive, and what each node
/// is rebound to. What a rebinding or an update replaces stays alive until every launch made
/// before the change has finished (an event after the last launch tells), then is released: an
/// exec rebound to fresh buffers every step holds a bounded set. Dropping it never blocks: what
/// it holds is released once its last launch has finished (see its `Drop`).
/// CUDA does not allow concurrent calls on one exec: a `GraphExec` may move between threads
/// (`Send`) but not be shared by them (`!Sync`), and every change takes `&mut self`:
///
/// ```compile_fail
/// fn shared_between_threads<T: Sync>() {}
/// shared_between_threads::<graph_rt::GraphExec>();
/// ```
// `repr(C)`, the fields in this order: what every launch reads first (one or two cache lines,
// not one here and one there: the host's caches are often cold between a model's steps).
#[repr(C)]
pub struct GraphExec {
    pub(super) raw: CUgraphExec,
    // `ctx`'s handle, compared on every launch without reaching the context's shared state.
    pub(super) ctx_raw: CUcontext,
    // Replays are launched through the owner of this key (an argument table), not `launch`.
    pub(super) launch_key: Option<u64>,
    // The stream of the last launch, until it is known finished, and the launch count.
    pub(super) last_raw: Cell<usize>,
    pub(super) launches: Cell<u64>,
    // The graph has device-updatable nodes and the exec has not been uploaded since it was made
    // or updated from the host: the next launch uploads it first (CUDA requires it).
    pub(super) needs_upload: Cell<bool>,
    pub(super) last_stream: RefCell<Option<Arc<StreamInner>>>,
    pub(super) ctx: Context,
    // The graph instantiated: its nodes name this exec's nodes in per-node updates.
    pub(super) graph: Arc<GraphHandle>,
    pub(super) flags: u64,
    // What the instantiated graph keeps alive.
    pub(super) graph_keep: Arc<Vec<Resource>>,
    // What rebound nodes use, and what they used while a launch may still read it.
    pub(super) retention: Retention,
    pub(super) functions: HashMap<usize, Function>,
    // Function and configuration of kernel nodes, read lazily and kept current.
    pub(super) kernels: AddrMap<KernelInfo>,
    // How graphs other than `graph` name this exec's nodes.
    pub(super) identity: Identity,
    pub(super) scratch: Vec<Resource>,
    // Whole-graph updates applied (in place or by re-instantiation).
    pub(super) updates: Cell<u64>,
    pub(super) _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: exec handles may be used from any thread; `!Sync` and `&mut self` for changes keep
// calls on one exec from overlapping, as CUDA requires.
unsafe impl Send for GraphExec {}

impl std::fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphExec")
            .field("raw", &self.raw)
            .field("retained", &self.retained_count())
            .finish()
    }
}

impl Graph {
    /// Instantiates the graph with default options.
    pub fn instantiate(&self) -> Result<GraphExec> {
        self.instantiate_with(&InstantiateOptions::default())
    }

    /// Instantiates the graph (`cuGraphInstantiateWithFlags`, or `cuGraphInstantiateWithParams`
    /// when it uploads too).
    ///
    /// A graph with memory nodes (or, later, device-updatable kernel nodes) can have one exec at a
    /// time (CUDA): drop the previous exec before instantiating it again (the drop does not wait
    /// for the exec's launches; CUDA frees a running exec once they finish).
    /// [`GraphExec::update`] falling back to re-instantiation waits for the old exec's last
    /// launch, then destroys it.
    pub fn instantiate_with(&self, options: &InstantiateOptions<'_>) -> Result<GraphExec> {
        let flags = options.flags();
        let device_updatable = self.handle.is_device_updatable();
        if device_updatable && self.handle.execs.load(Ordering::Acquire) > 0 {
            return Err(Error::misuse(
                "cuGraphInstantiate",
                Misuse::ExecExists,
                "the graph has device-updatable kernel nodes (an in-graph prelude): CUDA allows one exec of it at a time; drop the previous exec first",
            ));
        }
        // A non-launch call: release what earlier drops parked and the device is done with.
        self.ctx.bind()?;
        self.ctx.inner.tracker.poll();
        self.ctx.inner.tracker.start();
        let raw = instantiate_raw(self, flags, options.upload)?;
        self.handle.execs.fetch_add(1, Ordering::AcqRel);
        Ok(GraphExec {
            raw,
            ctx_raw: self.ctx.as_raw(),
            ctx: self.ctx.clone(),
            graph: self.handle.clone(),
            flags,
            graph_keep: self.keep.clone(),
            retention: Retention::new(&self.ctx),
            functions: self.functions.clone(),
            kernels: AddrMap::default(),
            identity: Identity::default(),
            launch_key: self.launch_key,
            scratch: Vec::new(),
            last_stream: RefCell::new(None),
            last_raw: Cell::new(0),
            launches: Cell::new(0),
            needs_upload: Cell::new(device_updatable && options.upload.is_none()),
            updates: Cell::new(0),
            _not_sync: PhantomData,
        })
    }
}

pub(super) fn instantiate_raw(
    graph: &Graph,
    flags: u64,
    upload: Option<&Stream>,
) -> Result<CUgraphExec> {
    graph.ctx.bind()?;
    let _guard = graph.handle.lock("cuGraphInstantiate")?;
    let mut raw = std::ptr::null_mut();
    let Some(stream) = upload else {
        // SAFETY: valid graph and out-pointer.
        unsafe { cu!(cuGraphInstantiate(&mut raw, graph.raw, flags)) }?;
        return Ok(raw);
    };
    let mut p = graph_rt_sys::CUDA_GRAPH_INSTANTIATE_PARAMS {
        flags: flags | F::CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD.0 as u64,
        hUploadStream: stream.as_raw(),
        ..Default::default()
    };
    // SAFETY: valid graph, stream, out-pointer and parameters.
    let r = unsafe { cu!(cuGraphInstantiateWithParams(&mut raw, graph.raw, &mut p)) };
    let (result, node) = (p.result_out, p.hErrNode_out);
    r.map_err(|e| e.with_hint(format!("instantiate result {result:?} at node {node:?}")))?;
    Ok(raw)
}

/// The exec's last launch, unless it is known finished.
fn in_flight(last: &mut RefCell<Option<Arc<StreamInner>>>, launches: u64) -> Option<InFlight<'_>> {
    let stream = last.get_mut().as_ref()?;
    Some(InFlight {
        stream,
        launch: launches,
    })
}

impl GraphExec {
    /// Takes over what `graph` keeps alive and the functions its kernel nodes run; what the
    /// nodes used before is released once the launches that may still use it have finished.
    pub(super) fn absorb(&mut self, graph: &Graph) {
        let in_flight = in_flight(&mut self.last_stream, self.launches.get());
        let old = std::mem::replace(&mut self.graph_keep, graph.keep.clone());
        let old: Resource = old;
        self.retention.retire_bindings(in_flight);
        self.retention.retire([old], in_flight);
        for (k, f) in &graph.functions {
            self.functions.entry(*k).or_insert_with(|| f.clone());
        }
        self.kernels.clear();
        self.launch_key = graph.launch_key;
    }

    /// The raw `CUgraphExec`. Do not destroy it; rebinding through it is not tracked.
    pub fn as_raw(&self) -> CUgraphExec {
        self.raw
    }

    /// How many references to resources the exec holds: one per use by the graph whose
    /// parameters it runs (a buffer two nodes use counts twice), one per resource of each node's
    /// current binding, and one per resource of replaced bindings that a launch may still read.
    /// Replaced bindings are released once the launches before the change have finished (seen
    /// at a later change, or at once after the exec waited for its last launch).
    pub fn retained_count(&self) -> usize {
        self.graph_keep.len() + self.retention.count()
    }

    fn same_context(&self, stream: &Stream, call: &'static str) -> Result<()> {
        let msg = "the stream belongs to another context than the graph";
        let same = stream.context_raw() == self.ctx_raw;
        same.then_some(())
            .ok_or_else(|| Error::misuse(call, Misuse::OtherContext, msg))
    }

    /// Uploads the exec to the device on `stream`, so the first launch does not pay for it.
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        self.same_context(stream, "cuGraphUpload")?;
        stream.context().bind()?;
        // SAFETY: valid exec and stream of its context.
        unsafe { cu!(cuGraphUpload(self.raw, stream.as_raw())) }?;
        self.needs_upload.set(false);
        Ok(())
    }

    /// Launches the exec on `stream` (any stream of the graph's context). Launches of one exec
    /// run in order, whatever their streams.
    #[inline]
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        if self.launch_key.is_some() {
            return Err(Error::misuse(
                "cuGraphLaunch",
                Misuse::NotThroughTable,
                "the graph refreshes an argument table: launch it with ArgTable::launch, which writes the bindings it reads",
            ));
        }
        self.launch_unchecked(stream)
    }

    /// The identity of the graph the exec was instantiated from.
    pub(crate) fn graph_id(&self) -> u64 {
        self.graph.id
    }

    /// Whole-graph updates applied to the exec since it was instantiated.
    pub(crate) fn updates(&self) -> u64 {
        self.updates.get()
    }

    /// Whether the exec's graph has device-updatable kernel nodes.
    pub(crate) fn is_device_updatable(&self) -> bool {
        self.graph.is_device_updatable()
    }

    /// The key of the argument table replays must be launched through, if any.
    pub(crate) fn launch_key(&self) -> Option<u64> {
        self.launch_key
    }

    /// Launches without the argument-table check (the table itself launches so).
    #[inline]
    pub(crate) fn launch_unchecked(&self, stream: &Stream) -> Result<()> {
        if self.needs_upload.get() {
            // Device-updatable nodes: CUDA requires an upload before the first launch and after
            // host-side updates.
            self.upload(stream)?;
        }
        self.same_context(stream, "cuGraphLaunch")?;
        stream.bind_context()?;
        // SAFETY: valid exec and stream of its context; every resource the nodes use is kept
        // alive by this exec while a launch may read it, and drop parks it until the last
        // launch has finished.
        unsafe { cu!(cuGraphLaunch(self.raw, stream.as_raw())) }?;
        self.launches.set(self.launches.get() + 1);
        if self.last_raw.get() != stream.as_raw() as usize {
            self.last_raw.set(stream.as_raw() as usize);
            *self.last_stream.borrow_mut() = Some(stream.shared());
        }
        Ok(())
    }

    /// The exec's own handle of `node`: a node of the graph the exec was instantiated from (alive:
    /// the exec holds it), or of the graph it was last updated from or re-instantiated away from,
    /// paired with the exec's (see `identity`).
    fn member(&mut self, node: Node, call: &'static str) -> Result<CUgraphNode> {
        // Every host-side node update names its node here: a graph with device-updatable nodes
        // must be uploaded again before its next launch, and a host update must not meet a
        // device-side one of a launch in flight (CUDA).
        if self.graph.is_device_updatable() {
            self.wait_last_launch()?;
            self.needs_upload.set(true);
        }
        if node.graph == self.graph.id {
            return Ok(node.raw);
        }
        if self.identity.alias.as_ref().map(|a| a.id) != Some(node.graph) {
            return node.raw_in(self.graph.id, call);
        }
        self.identity.pair(&self.graph, call)?;
        let own = self.identity.from_alias.get(&node.key()).copied();
        let reason = "the node has no counterpart in the exec";
        own.ok_or_else(|| Error::misuse(call, Misuse::NoCounterpart, reason))
    }

    /// Kernel node `node`'s raw handle and what graph-rt knows of it: one lookup once known,
    /// read from the graph holding its current parameters on first use.
    fn kernel(&mut self, node: Node, call: &'static str) -> Result<(CUgraphNode, &mut KernelInfo)> {
        let raw = self.member(node, call)?;
        let slot = match self.kernels.entry(raw as usize) {
            Entry::Occupied(e) => return Ok((raw, e.into_mut())),
            Entry::Vacant(v) => v,
        };
        let (source, graph) = match self.identity.source.clone() {
            None => (raw, self.graph.clone()),
            Some(src) => {
                self.identity.pair(&self.graph, call)?;
                let s = self.identity.to_source.get(&(raw as usize)).copied();
                // Not a misuse: `pair` maps every node of the exec, so this is graph-rt's bug.
                (
                    s.ok_or_else(|| Error::invalid(call, "node pairing lost"))?,
                    src,
                )
            }
        };
        let guard = graph.lock("cuGraphKernelNodeGetParams")?;
        // SAFETY: a node of a graph we keep alive (locked while its parameters are read).
        let p = unsafe { super::raw_node::kernel_node_params(source) }
            .map_err(|_| Error::misuse(call, Misuse::WrongNodeKind, "not a kernel node"))?;
        drop(guard);
        let function = self.functions.get(&(p.func as usize)).cloned().ok_or_else(|| {
            Error::misuse(call, Misuse::ForeignKernel, "the kernel node runs a function not launched through graph-rt (capture scope or Graph::add_kernel)")
        })?;
        let config = LaunchConfig::new(
            (p.gridDimX, p.gridDimY, p.gridDimZ),
            (p.blockDimX, p.blockDimY, p.blockDimZ),
        )
        .shared_mem(p.sharedMemBytes);
        Ok((raw, slot.insert(KernelInfo { function, config })))
    }

    /// Makes `now` what `node` uses, keeping what it used before until the launches that may
    /// still read it have finished.
    fn bind(&mut self, node: CUgraphNode, now: &mut Vec<Resource>) {
        let in_flight = in_flight(&mut self.last_stream, self.launches.get());
        self.retention.bind(node as usize, now, in_flight);
    }

    /// Rebinds a kernel node's arguments, keeping its launch configuration. The arguments are
    /// checked against the kernel's parameter layout first: on a wrong count or size nothing
    /// changes and the exec replays with its old arguments.
    ///
    /// `node` is a node of the graph the exec was instantiated from, or of the graph it was last
    /// updated from; a capture hands its kernel nodes back:
    ///
    /// ```no_run
    /// use graph_rt::{CaptureMode, Context, DeviceBuffer, LaunchConfig, Module, Stream};
    ///
    /// # fn main() -> graph_rt::Result<()> {
    /// let ctx = Context::new(0)?;
    /// let stream = Stream::new(&ctx)?;
    /// let add1 = Module::from_ptx(&ctx, graph_rt_kernels::CHAIN.ptx)?.function("add1")?;
    /// let n = 4096;
    /// let (x, mut y) = (DeviceBuffer::<f32>::zeroed(&ctx, n)?, DeviceBuffer::<f32>::alloc(&ctx, n)?);
    /// let cfg = LaunchConfig::for_elements(n, 256);
    /// let mut node = None;
    /// let graph = stream.capture(CaptureMode::Global, |s| {
    ///     // SAFETY: add1(const float* x, float* y, int n) touches n elements of each buffer.
    ///     node = Some(unsafe { s.launch(&add1, &cfg, (&x, &mut y, n as i32))? });
    ///     Ok(())
    /// })?;
    /// let node = graph.node(node.expect("captured"))?;
    /// let mut exec = graph.instantiate()?;
    /// // Next replay: read another input, write another output; no re-capture.
    /// let (x2, mut y2) = (DeviceBuffer::<f32>::zeroed(&ctx, n)?, DeviceBuffer::<f32>::alloc(&ctx, n)?);
    /// // SAFETY: as above; the exec keeps x2 and y2 alive while it may read them.
    /// unsafe { exec.set_kernel_args(node, (&x2, &mut y2, n as i32))? };
    /// exec.launch(&stream)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// As [`Stream::launch`], for every later replay.
    pub unsafe fn set_kernel_args<A: KernelArgs>(&mut self, node: Node, args: A) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.rebind(node, None, args) }
    }

    /// Rebinds a kernel node's arguments and grid, block and dynamic shared memory (launch
    /// attributes of `config` are not applied: an exec update cannot change them).
    ///
    /// # Safety
    /// As [`Stream::launch`], for every later replay.
    pub unsafe fn set_kernel_node<A: KernelArgs>(
        &mut self,
        node: Node,
        config: &LaunchConfig,
        args: A,
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.rebind(node, Some(config), args) }
    }

    /// Rebinds kernel node `node` to `args` and `config` (else its current one): one lookup of
    /// the node, then one per resource the arguments use (kept unless already kept).
    ///
    /// # Safety
    /// As [`Stream::launch`], for every later replay.
    unsafe fn rebind<A: KernelArgs>(
        &mut self,
        node: Node,
        config: Option<&LaunchConfig>,
        args: A,
    ) -> Result<()> {
        const CALL: &str = "cuGraphExecKernelNodeSetParams";
        let exec = self.raw;
        let (node_raw, info) = self.kernel(node, CALL)?;
        let layout = info.function.param_layout()?;
        let c = config.unwrap_or(&info.config);
        args.with_params(|params, sizes| {
            check_layout(&info.function, layout, sizes, CALL)?;
            let p = kernel_params(&info.function, c, params.as_mut_ptr());
            // SAFETY: a kernel node of this exec; parameter values alive for the call (the
            // driver copies them).
            unsafe { cu!(cuGraphExecKernelNodeSetParams(exec, node_raw, &p)) }
        })?;
        if let Some(c) = config {
            (info.config.grid, info.config.block) = (c.grid, c.block);
            info.config.shared_mem_bytes = c.shared_mem_bytes;
        }
        let mut now = std::mem::take(&mut self.scratch);
        args.retain(&mut now);
        self.bind(node_raw, &mut now);
        self.scratch = now;
        Ok(())
    }

    /// Sets kernel node `node`'s parameters from the host, for kernels graph-rt did not launch
    /// (discovery's `HostPatcher`): the node is resolved as for every per-node update
    /// ([`GraphExec::member`]), and what an earlier rebinding of it kept is released once the
    /// launches that may read it have finished.
    ///
    /// # Safety
    /// `p` must be valid parameters for the node's kernel for every later replay (as
    /// [`Stream::launch`]); its pointers need to live across the call only.
    pub(crate) unsafe fn set_kernel_params(
        &mut self,
        node: Node,
        p: &graph_rt_sys::CUDA_KERNEL_NODE_PARAMS,
    ) -> Result<()> {
        const CALL: &str = "cuGraphExecKernelNodeSetParams";
        let raw = self.member(node, CALL)?;
        // SAFETY: a node of this exec (resolved above); the caller's promise for `p`.
        unsafe { cu!(cuGraphExecKernelNodeSetParams(self.raw, raw, p)) }?;
        // Read again from the graph on next use: the dimensions may have changed.
        self.kernels.remove(&(raw as usize));
        let mut none = std::mem::take(&mut self.scratch);
        self.bind(raw, &mut none);
        self.scratch = none;
        Ok(())
    }

    /// Sets copy or set node `node`'s parameters from the host to `p` (a step's copies of its
    /// declared buffers, pointed at the buffers bound now). Nothing is kept alive for it: the
    /// caller keeps what `p` reaches alive while a launch may use it.
    ///
    /// # Safety
    /// `p` must be the node's captured parameters with operands moved to memory that stays
    /// valid, and as long, for every launch until the next change.
    pub(crate) unsafe fn set_copy_node_params(
        &mut self,
        node: Node,
        p: &super::CopyNodeParams,
    ) -> Result<()> {
        let ctx = self.ctx.as_raw();
        match p {
            super::CopyNodeParams::Copy(p) => {
                let raw = self.member(node, "cuGraphExecMemcpyNodeSetParams")?;
                self.ctx.bind()?;
                // SAFETY: a copy node of this exec; the caller's promise for the operands.
                unsafe { cu!(cuGraphExecMemcpyNodeSetParams(self.raw, raw, p, ctx)) }
            }
            super::CopyNodeParams::Set(p) => {
                let raw = self.member(node, "cuGraphExecMemsetNodeSetParams")?;
                self.ctx.bind()?;
                // SAFETY: a set node of this exec; the caller's promise for the operand.
                unsafe { cu!(cuGraphExecMemsetNodeSetParams(self.raw, raw, p, ctx)) }
            }
        }
    }

    /// Enables or disables a node (kernel, memcpy or memset) for later launches.
    pub fn set_enabled(&mut self, node: Node, enabled: bool) -> Result<()> {
        let node_raw = self.member(node, "cuGraphNodeSetEnabled")?;
        // SAFETY: a node of this exec's graph.
        unsafe { cu!(cuGraphNodeSetEnabled(self.raw, node_raw, enabled as u32)) }
    }

    /// Points a copy node at new buffers (lengths must match each other and the original's).
    pub fn set_copy<T: Pod>(
        &mut self,
        node: Node,
        dst: &DeviceBuffer<T>,
        src: &DeviceBuffer<T>,
    ) -> Result<()> {
        let node_raw = self.member(node, "cuGraphExecMemcpyNodeSetParams")?;
        let p = copy_params("cuGraphExecMemcpyNodeSetParams", dst, src)?;
        self.ctx.bind()?;
        // SAFETY: a memcpy node of this exec; both allocations are kept alive below.
        unsafe {
            cu!(cuGraphExecMemcpyNodeSetParams(
                self.raw,
                node_raw,
                &p,
                self.ctx.as_raw()
            ))
        }?;
        self.bind(
            node_raw,
            &mut vec![dst.allocation().clone(), src.allocation().clone()],
        );
        Ok(())
    }

    /// Points a memset node at a new buffer and value.
    pub fn set_fill_u32<T: Pod>(
        &mut self,
        node: Node,
        dst: &DeviceBuffer<T>,
        value: u32,
    ) -> Result<()> {
        let node_raw = self.member(node, "cuGraphExecMemsetNodeSetParams")?;
        let p = memset_params("cuGraphExecMemsetNodeSetParams", dst, value)?;
        self.ctx.bind()?;
        // SAFETY: a memset node of this exec; the allocation is kept alive below.
        unsafe {
            cu!(cuGraphExecMemsetNodeSetParams(
                self.raw,
                node_raw,
                &p,
                self.ctx.as_raw()
            ))
        }?;
        self.bind(node_raw, &mut vec![dst.allocation().clone()]);
        Ok(())
    }
}

/// An exec to destroy once parked (destroying a large exec costs host time: a 1000-node one
/// about a millisecond), with the context it belongs to.
struct ExecToDestroy(CUgraphExec, Context);

// SAFETY: exec handles may be destroyed from any thread.
unsafe impl Send for ExecToDestroy {}

impl Drop for ExecToDestroy {
    fn drop(&mut self) {
        let inner = &self.1.inner;
        let r = inner.bind().and_then(|_| {
            // SAFETY: we own the exec; no launch of it runs any more (its fence completed) or the
            // driver frees it once the launch completes.
            unsafe { cu!(cuGraphExecDestroy(self.0)) }
        });
        inner.record(r);
    }
}

/// Released once the last launch of an exec of a graph with allocation nodes has finished:
/// returns the graph memory no exec holds any more to the driver (best effort: a trim refused
/// now, during another library's capture say, leaves it for the next).
struct TrimGraphMemory(Context);

impl Drop for TrimGraphMemory {
    fn drop(&mut self) {
        if let Err(e) = self.0.trim_graph_memory() {
            tracing::debug!(error = %e, "graph-rt: graph memory not trimmed");
        }
    }
}

impl Drop for GraphExec {
    /// Never blocks: the exec, its graph and what its nodes use are parked on the context
    /// behind an event recorded after the exec's last launch, and destroyed or released by the
    /// context's release thread once that launch has finished (or by
    /// [`Context::poll`](crate::Context::poll), [`Context::synchronize`](crate::Context::synchronize)
    /// or teardown). An exec never launched is destroyed at once, and so is the exec of a graph
    /// with memory nodes (CUDA allows one exec of such a graph at a time, and frees a running exec
    /// once its launch completes), so that the graph can be instantiated again at once.
    fn drop(&mut self) {
        let _ = self
            .graph
            .execs
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        let exec = ExecToDestroy(self.raw, self.ctx.clone());
        let inner = self.ctx.inner.clone();
        let Some(stream) = self.last_stream.get_mut().take() else {
            return drop(exec);
        };
        // CUDA allows one exec at a time of a graph with memory nodes: destroy this one now, so
        // that the graph can be instantiated again at once (CUDA frees it after its last launch).
        // Its graph memory goes back to the driver once that launch has finished.
        let exec: Parked = if self
            .graph
            .one_exec
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            drop(exec);
            Box::new(TrimGraphMemory(self.ctx.clone()))
        } else {
            Box::new(exec)
        };
        let parked: Vec<Parked> = vec![
            exec,
            Box::new(self.graph.clone()),
            Box::new(self.graph_keep.clone()),
            Box::new(std::mem::replace(
                &mut self.retention,
                Retention::new(&self.ctx),
            )),
            Box::new(std::mem::take(&mut self.functions)),
            Box::new(
                std::mem::take(&mut self.kernels)
                    .into_values()
                    .map(|k| k.function)
                    .collect::<Vec<_>>(),
            ),
        ];
        inner.park_from_drop(&stream, parked);
    }
}
