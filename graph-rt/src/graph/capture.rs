//! Stream capture: record the work queued on a stream into a [`Graph`] instead of running it.
//!
//! [`Stream::capture`] runs a closure with a [`CaptureScope`], whose methods are the operations
//! that can be captured; each keeps what it references alive in the resulting graph. Work queued
//! on the stream by other means is captured too, but what it references is not kept alive.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bytemuck::Pod;
use graph_rt_sys::{CUgraph, CUgraphNode};

use super::graph::{node_count, raw_nodes, Graph, Node};
use super::identity::{CapturedNode, Creation};
pub use crate::driver::CaptureMode;
use crate::driver::DeviceBuffer;
use crate::driver::Function;
use crate::driver::Stream;
use crate::driver::{capture_lock, enter_capture, gate_patience, CaptureEntry};
use crate::driver::{cu, Event, EventFlags};
use crate::error::{Error, Misuse, Result};
use crate::launch::{KernelArgs, LaunchConfig};
use crate::resource::Resource;

/// The operations that can be recorded while a stream captures. Given to the closure of
/// [`Stream::capture`]; it has no way to allocate or synchronize.
pub struct CaptureScope<'s> {
    stream: &'s Stream,
    keep: RefCell<Vec<Resource>>,
    functions: RefCell<HashMap<usize, Function>>,
    // The function of the last launch: most captures launch one kernel many times in a row.
    last_function: Cell<usize>,
    // Set by an argument table's refresh: replays must be launched through that table, and the
    // next launch must wait for the refresh fully (no programmatic edge).
    launch_key: Cell<Option<u64>>,
    full_next: Cell<bool>,
    // This capture's id, and the node each operation made, in order (None: not identified).
    id: u64,
    seen: RefCell<Vec<Option<CUgraphNode>>>,
}

/// The error of a capture operation on no elements, which would make no node.
fn empty(call: &'static str) -> Error {
    Error::misuse(
        call,
        Misuse::Empty,
        "no elements: the operation would make no graph node",
    )
}

/// Identifies captures for [`CapturedNode`]s; never reused.
static NEXT_CAPTURE_ID: AtomicU64 = AtomicU64::new(1);

impl<'s> CaptureScope<'s> {
    /// The capturing stream.
    pub fn stream(&self) -> &'s Stream {
        self.stream
    }

    /// Records a kernel launch on the capturing stream (see [`Stream::launch`]). The handle it
    /// returns resolves to the kernel node once the capture has ended
    /// ([`Graph::node`](crate::Graph::node)), to rebind it in an exec.
    ///
    /// # Safety
    /// As [`Stream::launch`], for every replay of the graph.
    pub unsafe fn launch<A: KernelArgs>(
        &self,
        f: &Function,
        config: &LaunchConfig,
        args: A,
    ) -> Result<CapturedNode> {
        // SAFETY: forwarded.
        unsafe { self.launch_on(self.stream, f, config, args) }
    }

    /// Records a kernel launch on `stream`, which must have been forked from the capture
    /// ([`CaptureScope::fork`]) or be the capturing stream.
    ///
    /// # Safety
    /// As [`Stream::launch`], for every replay of the graph.
    pub unsafe fn launch_on<A: KernelArgs>(
        &self,
        stream: &Stream,
        f: &Function,
        config: &LaunchConfig,
        args: A,
    ) -> Result<CapturedNode> {
        let mut keep = self.keep.try_borrow_mut().map_err(|_| {
            Error::misuse(
                "CaptureScope::launch",
                Misuse::Reentrant,
                "called from inside KernelArg::retain",
            )
        })?;
        args.retain(&mut keep);
        drop(keep);
        if self.last_function.replace(f.as_raw() as usize) != f.as_raw() as usize {
            self.functions
                .borrow_mut()
                .entry(f.as_raw() as usize)
                .or_insert_with(|| f.clone());
        }
        let full;
        let config = if self.full_next.replace(false) {
            full = config.without_programmatic();
            &full
        } else {
            config
        };
        // SAFETY: forwarded; the arguments are kept alive by the graph.
        unsafe { stream.launch(f, config, args)? };
        Ok(self.observe(stream))
    }

    /// Makes replays of the graph launchable only through the owner of `key` (an argument table,
    /// which refreshes what the graph reads before each launch), and the next launch wait fully
    /// for the one just recorded (no programmatic edge: it reads what that one writes before its
    /// `griddepcontrol.wait`).
    pub(crate) fn require_launcher(&self, key: u64, call: &'static str) -> Result<()> {
        match self.launch_key.get() {
            Some(k) if k != key => Err(Error::misuse(
                call,
                Misuse::SecondRefresh,
                "the graph already refreshes another argument table: one table per graph",
            )),
            // Two refreshes per launch would run the table's device counter ahead of its
            // launches (each refresh takes the next mirror).
            Some(_) => Err(Error::misuse(
                call,
                Misuse::SecondRefresh,
                "the graph already refreshes this table: record its refresh once per graph",
            )),
            None => {
                self.launch_key.set(Some(key));
                self.full_next.set(true);
                Ok(())
            }
        }
    }

    /// The node the last operation on `stream` made: the stream's only capture dependency now
    /// (`cuStreamGetCaptureInfo`).
    fn observe(&self, stream: &Stream) -> CapturedNode {
        let mut status = graph_rt_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let (mut deps, mut n) = (std::ptr::null(), 0usize);
        // SAFETY: valid stream and out-pointers; the optional ones are null.
        let r = unsafe {
            graph_rt_sys::cuStreamGetCaptureInfo(
                stream.as_raw(),
                &mut status,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut deps,
                &mut n,
            )
        };
        let ok = r == Ok(graph_rt_sys::CUresult::CUDA_SUCCESS) && n == 1 && !deps.is_null();
        // SAFETY: the driver returned one dependency, valid until the next capture call.
        let node = ok.then(|| unsafe { *deps });
        let mut seen = self.seen.borrow_mut();
        // An operation that made no node would leave the previous one as the dependency (the
        // scope refuses those it knows, such as empty copies): unknown, never a wrong node.
        let node = node.filter(|n| seen.last() != Some(&Some(*n)));
        seen.push(node);
        CapturedNode {
            capture: self.id,
            index: seen.len() - 1,
        }
    }

    /// Makes `other` join the capture: work queued on it from now on is part of the graph,
    /// after everything captured so far. Join it back with [`CaptureScope::join`].
    pub fn fork(&self, other: &Stream) -> Result<()> {
        self.order(self.stream, other)
    }

    /// Makes the capturing stream wait for everything captured on `other` (required before the
    /// capture ends for every forked stream).
    pub fn join(&self, other: &Stream) -> Result<()> {
        self.order(other, self.stream)
    }

    fn order(&self, first: &Stream, then: &Stream) -> Result<()> {
        let event = Event::new(first.context(), EventFlags::DisableTiming)?;
        event.record(first)?;
        then.wait(&event)?;
        self.keep.borrow_mut().push(event.resource());
        Ok(())
    }

    /// Records a device-to-device copy of `src` into `dst` (lengths must match).
    pub fn copy<T: Pod>(
        &self,
        dst: &mut DeviceBuffer<T>,
        src: &DeviceBuffer<T>,
    ) -> Result<CapturedNode> {
        if dst.is_empty() || src.is_empty() {
            return Err(empty("CaptureScope::copy"));
        }
        // SAFETY: the graph keeps both buffers alive (below) for every replay.
        unsafe { dst.copy_from_device_async(src, self.stream)? };
        let mut keep = self.keep.borrow_mut();
        keep.push(dst.allocation().clone());
        keep.push(src.allocation().clone());
        Ok(self.observe(self.stream))
    }

    /// Records a zero fill of `dst`.
    pub fn fill_zero<T: Pod>(&self, dst: &mut DeviceBuffer<T>) -> Result<CapturedNode> {
        if dst.is_empty() {
            return Err(empty("CaptureScope::fill_zero"));
        }
        // SAFETY: the graph keeps the buffer alive (below) for every replay.
        unsafe { dst.fill_zero_async(self.stream)? };
        self.keep.borrow_mut().push(dst.allocation().clone());
        Ok(self.observe(self.stream))
    }

    /// Records `event` on the capturing stream as an event-record node: each replay records it
    /// (`cuEventRecordWithFlags`, `CU_EVENT_RECORD_EXTERNAL`). For ordering streams inside the
    /// capture use [`CaptureScope::fork`] and [`CaptureScope::join`].
    pub fn record(&self, event: &Event) -> Result<CapturedNode> {
        event.record_external(self.stream)?;
        self.keep.borrow_mut().push(event.resource());
        Ok(self.observe(self.stream))
    }

    /// Keeps `resource` alive as long as the graph (for work queued by other means).
    pub fn keep_alive(&self, resource: Resource) {
        self.keep.borrow_mut().push(resource);
    }
}

impl crate::launch::Launcher for CaptureScope<'_> {
    unsafe fn launch<A: KernelArgs>(
        &self,
        f: &Function,
        config: &LaunchConfig,
        args: A,
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { CaptureScope::launch(self, f, config, args).map(drop) }
    }
}

/// An active capture and its scope. Dropped on any exit (an error, an early return, a panic), it
/// ends the capture first and only then releases what the scope kept, so no free is captured.
/// Capturing into a new graph, it destroys the partial graph; capturing into a caller's graph,
/// whose nodes stay, it hands the graph what those nodes use.
struct ActiveCapture<'s, 'g> {
    // Whole-context waits of graph-rt on other threads wait for the capture (dropped after
    // `drop` has ended the capture, and before what the scope keeps, whose release may wait
    // for the whole context, which this thread's capture would forbid).
    _gate: CaptureEntry,
    scope: CaptureScope<'s>,
    into: Option<&'g mut Graph>,
    ended: bool,
    succeeded: bool,
    // A global-mode capture keeps the release threads from freeing memory meanwhile (dropped
    // after `drop` has ended the capture).
    _no_release: Option<crate::driver::sync::RwLockReadGuard<'static, ()>>,
}

impl<'s, 'g> ActiveCapture<'s, 'g> {
    fn new(
        stream: &'s Stream,
        into: Option<&'g mut Graph>,
        gate: CaptureEntry,
        no_release: Option<crate::driver::sync::RwLockReadGuard<'static, ()>>,
    ) -> Self {
        let scope = CaptureScope {
            stream,
            keep: RefCell::new(Vec::new()),
            functions: RefCell::new(HashMap::new()),
            last_function: Cell::new(0),
            launch_key: Cell::new(None),
            full_next: Cell::new(false),
            id: NEXT_CAPTURE_ID.fetch_add(1, Ordering::Relaxed),
            seen: RefCell::new(Vec::new()),
        };
        Self {
            scope,
            into,
            ended: false,
            succeeded: false,
            _gate: gate,
            _no_release: no_release,
        }
    }

    /// Ends the capture; a graph the capture made is returned (null when capturing into one).
    fn end(&mut self) -> Result<CUgraph> {
        self.ended = true;
        let stream = self.scope.stream;
        stream.context().bind()?;
        let mut graph = std::ptr::null_mut();
        // SAFETY: the stream is capturing (we began it).
        let r = unsafe { cu!(cuStreamEndCapture(stream.as_raw(), &mut graph)) };
        if self.into.is_some() {
            // The caller's graph: never ours to destroy.
            return r
                .map(|()| std::ptr::null_mut())
                .map_err(Error::into_capture);
        }
        r.map(|()| graph).map_err(|e| {
            destroy(graph);
            e.into_capture()
        })
    }
}

impl Drop for ActiveCapture<'_, '_> {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.end();
        }
        if let Some(graph) = self.into.take() {
            if !self.succeeded {
                // CUDA leaves a graph whose capture failed undefined: refuse further use.
                graph.handle.set_broken();
            }
            let seen = std::mem::take(self.scope.seen.get_mut());
            let total = node_count(graph.raw).unwrap_or(usize::MAX);
            graph
                .handle
                .creation
                .lock()
                .add_capture(self.scope.id, seen, total);
            graph.kept().append(self.scope.keep.get_mut());
            graph
                .functions
                .extend(self.scope.functions.get_mut().drain());
        }
    }
}

fn destroy(graph: CUgraph) {
    if !graph.is_null() {
        // SAFETY: the capture made this graph and nothing else refers to it.
        let _ = unsafe { graph_rt_sys::cuGraphDestroy(graph) };
    }
}

impl Stream {
    /// Records a capture of graph-rt about to begin in the stream's context, once no
    /// whole-context wait of graph-rt is under way there (it would break the capture).
    fn enter_gate(&self, mode: CaptureMode, call: &'static str) -> Result<CaptureEntry> {
        enter_capture(
            self.context().as_raw() as usize,
            mode,
            call,
            gate_patience(),
        )
    }

    /// Captures the work `record` queues into a new graph.
    ///
    /// An operation capture does not allow gives [`Error::Capture`] naming the call; the capture
    /// is then ended (also when `record` panics or returns early) and the stream is usable.
    ///
    /// Capture once, replay many times:
    ///
    /// ```no_run
    /// use graph_rt::{CaptureMode, Context, DeviceBuffer, LaunchConfig, Module, Stream};
    ///
    /// # fn main() -> graph_rt::Result<()> {
    /// let ctx = Context::new(0)?;
    /// let stream = Stream::new(&ctx)?;
    /// let add1 = Module::from_ptx(&ctx, graph_rt_kernels::CHAIN.ptx)?.function("add1")?;
    /// let n = 1 << 20;
    /// let mut x = DeviceBuffer::from_host(&ctx, &vec![1.0f32; n])?;
    /// let (mut y, mut z) = (DeviceBuffer::<f32>::alloc(&ctx, n)?, DeviceBuffer::<f32>::alloc(&ctx, n)?);
    /// let cfg = LaunchConfig::for_elements(n, 256);
    /// let graph = stream.capture(CaptureMode::Global, |s| {
    ///     // SAFETY: add1(const float* x, float* y, int n) touches n elements of each buffer.
    ///     unsafe {
    ///         s.launch(&add1, &cfg, (&x, &mut y, n as i32))?;
    ///         s.launch(&add1, &cfg, (&y, &mut z, n as i32))?;
    ///     }
    ///     Ok(())
    /// })?;
    /// let exec = graph.instantiate()?; // the graph keeps x, y, z and the module alive
    /// for step in 0..100 {
    ///     x.write_on(&stream, &vec![step as f32; n])?;
    ///     exec.launch(&stream)?;
    ///     assert_eq!(z.read_on(&stream)?[0], step as f32 + 2.0);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn capture<F>(&self, mode: CaptureMode, record: F) -> Result<Graph>
    where
        F: FnOnce(&CaptureScope<'_>) -> Result<()>,
    {
        self.context().bind()?;
        // A cudarc stream: cudarc's launches inside the capture must not wait on its events.
        #[cfg(feature = "cudarc")]
        let _tracking = self.pause_foreign_tracking();
        let no_release = (mode == CaptureMode::Global).then(capture_lock);
        let gate = self.enter_gate(mode, "cuStreamBeginCapture")?;
        // SAFETY: valid stream of the current context.
        unsafe { cu!(cuStreamBeginCapture(self.as_raw(), mode.raw())) }
            .map_err(Error::into_capture)?;
        let mut active = ActiveCapture::new(self, None, gate, no_release);
        record(&active.scope).map_err(Error::into_capture)?;
        let raw = active.end()?;
        let keep = std::mem::take(active.scope.keep.get_mut());
        let functions = std::mem::take(active.scope.functions.get_mut());
        let mut creation = Creation::empty();
        let seen = std::mem::take(active.scope.seen.get_mut());
        let total = node_count(raw);
        let mut graph =
            Graph::from_parts(self.context(), raw, keep, functions, Creation::default());
        graph.launch_key = active.scope.launch_key.get();
        creation.add_capture(active.scope.id, seen, total?);
        *graph.handle.creation.lock() = creation;
        Ok(graph)
    }

    /// Captures the work `record` queues into `graph`, after the nodes `after`
    /// (`cuStreamBeginCaptureToGraph`, CUDA 12.3). On failure CUDA leaves `graph` undefined:
    /// graph-rt refuses every later use of it (drop it; execs made from it earlier are unaffected),
    /// and it still keeps alive what its nodes use until dropped.
    pub fn capture_into<F>(
        &self,
        graph: &mut Graph,
        after: &[Node],
        mode: CaptureMode,
        record: F,
    ) -> Result<()>
    where
        F: FnOnce(&CaptureScope<'_>) -> Result<()>,
    {
        self.context().bind()?;
        // A cudarc stream: cudarc's launches inside the capture must not wait on its events.
        #[cfg(feature = "cudarc")]
        let _tracking = self.pause_foreign_tracking();
        let handle = graph.handle.clone();
        let _guard = handle.lock("cuStreamBeginCaptureToGraph")?;
        let deps = raw_nodes(after, handle.id, "cuStreamBeginCaptureToGraph")?;
        let no_release = (mode == CaptureMode::Global).then(capture_lock);
        let gate = self.enter_gate(mode, "cuStreamBeginCaptureToGraph")?;
        // SAFETY: valid stream, graph and dependency list; no edge data.
        unsafe {
            cu!(cuStreamBeginCaptureToGraph(
                self.as_raw(),
                graph.raw,
                deps.as_ptr(),
                std::ptr::null(),
                deps.len(),
                mode.raw(),
            ))
        }
        .map_err(Error::into_capture)?;
        let existing_key = graph.launch_key;
        let mut active = ActiveCapture::new(self, Some(graph), gate, no_release);
        // A refresh recorded into a graph that already refreshes a table is refused.
        active.scope.launch_key.set(existing_key);
        record(&active.scope).map_err(Error::into_capture)?;
        active.end()?;
        active.succeeded = true;
        let key = active.scope.launch_key.get();
        drop(active);
        graph.launch_key = key;
        Ok(())
    }
}
