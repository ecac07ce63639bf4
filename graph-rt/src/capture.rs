//! Stream capture: record the work queued on a stream into a [`Graph`] instead of running it.
//!
//! [`Stream::capture`] runs a closure with a [`CaptureScope`], whose methods are the operations
//! that can be captured; each keeps what it references alive in the resulting graph. Work queued
//! on the stream by other means is captured too, but what it references is not kept alive.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use bytemuck::Pod;
use cuda_sys::{CUgraph, CUstreamCaptureMode, CUstreamCaptureStatus};

use crate::error::{check, Error, Result};
use crate::event::{Event, EventFlags};
use crate::graph::{Graph, Node};
use crate::launch::{KernelArgs, LaunchConfig, Resource};
use crate::memory::DeviceBuffer;
use crate::module::Function;
use crate::stream::Stream;

/// Which CUDA calls from other threads may interrupt a capture (`CUstreamCaptureMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaptureMode {
    /// Potentially unsafe calls (plain allocations, synchronous copies, …) are refused in every
    /// thread while the capture is active.
    #[default]
    Global,
    /// Only in this thread.
    ThreadLocal,
    /// Nowhere: the caller takes responsibility.
    Relaxed,
}

impl CaptureMode {
    fn raw(self) -> CUstreamCaptureMode {
        match self {
            CaptureMode::Global => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }
}

/// Whether a stream is capturing (`cuStreamIsCapturing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureStatus {
    /// Not capturing.
    None,
    /// Capturing.
    Active,
    /// Capturing, but an illegal operation invalidated the capture; it must be ended.
    Invalidated,
}

/// The operations that can be recorded while a stream captures. Given to the closure of
/// [`Stream::capture`]; it has no way to allocate or synchronize.
pub struct CaptureScope<'s> {
    stream: &'s Stream,
    keep: RefCell<Vec<Resource>>,
    functions: RefCell<HashMap<usize, Function>>,
    // The function of the last launch: most captures launch one kernel many times in a row.
    last_function: Cell<usize>,
}

impl<'s> CaptureScope<'s> {
    /// The capturing stream.
    pub fn stream(&self) -> &'s Stream {
        self.stream
    }

    /// Records a kernel launch on the capturing stream (see [`Stream::launch`]).
    ///
    /// # Safety
    /// As [`Stream::launch`], for every replay of the graph.
    pub unsafe fn launch<A: KernelArgs>(
        &self,
        f: &Function,
        config: &LaunchConfig,
        args: A,
    ) -> Result<()> {
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
    ) -> Result<()> {
        args.retain(&mut self.keep.borrow_mut());
        if self.last_function.replace(f.as_raw() as usize) != f.as_raw() as usize {
            self.functions
                .borrow_mut()
                .entry(f.as_raw() as usize)
                .or_insert_with(|| f.clone());
        }
        // SAFETY: forwarded; the arguments are kept alive by the graph.
        unsafe { stream.launch(f, config, args) }
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
    pub fn copy<T: Pod>(&self, dst: &mut DeviceBuffer<T>, src: &DeviceBuffer<T>) -> Result<()> {
        dst.copy_from_device_async(src, self.stream)?;
        let mut keep = self.keep.borrow_mut();
        keep.push(dst.allocation().clone());
        keep.push(src.allocation().clone());
        Ok(())
    }

    /// Records a zero fill of `dst`.
    pub fn fill_zero<T: Pod>(&self, dst: &mut DeviceBuffer<T>) -> Result<()> {
        dst.fill_zero_async(self.stream)?;
        self.keep.borrow_mut().push(dst.allocation().clone());
        Ok(())
    }

    /// Records `event` on the capturing stream (an event-record node).
    pub fn record(&self, event: &Event) -> Result<()> {
        event.record(self.stream)?;
        self.keep.borrow_mut().push(event.resource());
        Ok(())
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
        unsafe { CaptureScope::launch(self, f, config, args) }
    }
}

/// Ends a capture when dropped, also on an early return or a panic, and destroys what it made.
struct ActiveCapture<'s> {
    stream: &'s Stream,
    ended: bool,
}

impl ActiveCapture<'_> {
    fn end(mut self) -> Result<CUgraph> {
        self.ended = true;
        let mut graph = std::ptr::null_mut();
        self.stream.context().bind()?;
        // SAFETY: the stream is capturing (we began it).
        let r = check("cuStreamEndCapture", unsafe {
            cuda_sys::cuStreamEndCapture(self.stream.as_raw(), &mut graph)
        });
        match r {
            Ok(()) => Ok(graph),
            Err(e) => {
                destroy(graph);
                Err(e.into_capture())
            }
        }
    }
}

impl Drop for ActiveCapture<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let mut graph = std::ptr::null_mut();
            let _ = self.stream.context().bind();
            // SAFETY: the stream is capturing (we began it); the partial graph is discarded.
            let _ = unsafe { cuda_sys::cuStreamEndCapture(self.stream.as_raw(), &mut graph) };
            destroy(graph);
        }
    }
}

fn destroy(graph: CUgraph) {
    if !graph.is_null() {
        // SAFETY: the capture made this graph and nothing else refers to it.
        let _ = unsafe { cuda_sys::cuGraphDestroy(graph) };
    }
}

impl Stream {
    /// Captures the work `record` queues into a new graph.
    ///
    /// An operation capture does not allow gives [`Error::Capture`] naming the call; the capture
    /// is then ended (also when `record` panics or returns early) and the stream is usable.
    pub fn capture<F>(&self, mode: CaptureMode, record: F) -> Result<Graph>
    where
        F: FnOnce(&CaptureScope<'_>) -> Result<()>,
    {
        self.context().bind()?;
        // SAFETY: valid stream of the current context.
        check("cuStreamBeginCapture", unsafe {
            cuda_sys::cuStreamBeginCapture(self.as_raw(), mode.raw())
        })
        .map_err(Error::into_capture)?;
        let (raw, keep, functions) = self.record_and_end(record)?;
        Ok(Graph::from_parts(self.context(), raw, keep, functions))
    }

    /// Captures the work `record` queues into `graph`, after the nodes `after`
    /// (`cuStreamBeginCaptureToGraph`, CUDA 12.3).
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
        let handle = graph.handle.clone();
        let _guard = handle.lock();
        let deps: Vec<_> = after.iter().map(|n| n.raw).collect();
        // SAFETY: valid stream, graph and dependency list; no edge data.
        check("cuStreamBeginCaptureToGraph", unsafe {
            cuda_sys::cuStreamBeginCaptureToGraph(
                self.as_raw(),
                graph.raw,
                deps.as_ptr(),
                std::ptr::null(),
                deps.len(),
                mode.raw(),
            )
        })
        .map_err(Error::into_capture)?;
        let (_, keep, functions) = self.record_and_end(record)?;
        graph.kept().extend(keep);
        graph.functions.extend(functions);
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    fn record_and_end<F>(
        &self,
        record: F,
    ) -> Result<(CUgraph, Vec<Resource>, HashMap<usize, Function>)>
    where
        F: FnOnce(&CaptureScope<'_>) -> Result<()>,
    {
        let active = ActiveCapture {
            stream: self,
            ended: false,
        };
        let scope = CaptureScope {
            stream: self,
            keep: RefCell::new(Vec::new()),
            functions: RefCell::new(HashMap::new()),
            last_function: Cell::new(0),
        };
        // On error or panic, `active` ends the capture when dropped.
        record(&scope).map_err(Error::into_capture)?;
        let raw = active.end()?;
        Ok((raw, scope.keep.into_inner(), scope.functions.into_inner()))
    }

    /// Whether the stream is capturing (`cuStreamIsCapturing`).
    pub fn capture_status(&self) -> Result<CaptureStatus> {
        let mut s = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: valid stream and out-pointer.
        check("cuStreamIsCapturing", unsafe {
            cuda_sys::cuStreamIsCapturing(self.as_raw(), &mut s)
        })?;
        Ok(match s {
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED => {
                CaptureStatus::Invalidated
            }
            _ => CaptureStatus::None,
        })
    }
}
