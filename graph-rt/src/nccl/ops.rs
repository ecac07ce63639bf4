//! The collectives (all-reduce, all-gather, reduce-scatter) and point-to-point calls (send,
//! recv) of a [`Communicator`], eagerly, in NCCL groups and inside captures, with what each
//! must keep alive until the device has run it.

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytemuck::Pod;

use super::comm::{check, check_or_progress, CommInner, Communicator};
use super::sys::{self, dtype, Comm, Status};
use super::{check_counts, check_rank, Collective};
use crate::driver::{Allocation, CaptureStatus, DeviceBuffer, Parked, Stream, StreamInner};
use crate::error::{Error, Misuse, Result};
use crate::graph::CaptureScope;
use crate::resource::Resource;

mod sealed {
    pub trait Sealed {}
}

/// An element type NCCL reduces and moves: `i8`, `u8`, `i32`, `u32`, `i64`, `u64`,
/// [`half::f16`], [`half::bf16`], `f32`, `f64` (each its own `ncclDataType_t`, so a bf16 buffer
/// is never reduced as f16).
pub trait NcclElement: Pod + sealed::Sealed {
    /// Its `ncclDataType_t`.
    const DTYPE: c_int;
}

macro_rules! element {
    ($($t:ty => $d:expr),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl NcclElement for $t {
            const DTYPE: c_int = $d;
        }
    )*};
}

element! {
    i8 => dtype::INT8,
    u8 => dtype::UINT8,
    i32 => dtype::INT32,
    u32 => dtype::UINT32,
    i64 => dtype::INT64,
    u64 => dtype::UINT64,
    half::f16 => dtype::FLOAT16,
    f32 => dtype::FLOAT32,
    f64 => dtype::FLOAT64,
    half::bf16 => dtype::BFLOAT16,
}

/// How a reduction combines the ranks' elements (`ncclRedOp_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum (`ncclSum`).
    Sum,
    /// The product (`ncclProd`).
    Prod,
    /// The largest (`ncclMax`).
    Max,
    /// The smallest (`ncclMin`).
    Min,
    /// The mean (`ncclAvg`; integer types divide with truncation).
    Avg,
}

impl ReduceOp {
    fn raw(self) -> c_int {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Prod => 1,
            ReduceOp::Max => 2,
            ReduceOp::Min => 3,
            ReduceOp::Avg => 4,
        }
    }
}

/// One open [`group`] of this thread: the communicators its calls used, and what their eager
/// calls keep alive until the group's end has queued them.
#[derive(Default)]
struct Group {
    depth: usize,
    comms: Vec<Arc<CommInner>>,
    parked: Vec<(Arc<CommInner>, Arc<StreamInner>, Vec<Parked>)>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// Runs `calls` (collectives and sends/receives of any communicators, on any streams) as one
/// NCCL group (`ncclGroupStart` … `ncclGroupEnd`): NCCL queues them together at the group's
/// end. Needed to drive several ranks from one thread (a collective of every rank made by
/// [`Communicator::init_all`]), and for a send and a receive that pair up. Groups nest; the
/// outermost queues. The group is ended even when `calls` fails.
pub fn group<R>(calls: impl FnOnce() -> Result<R>) -> Result<R> {
    let lib = sys::library()?;
    // SAFETY: no arguments; balanced by the group end below on every path.
    let status = unsafe { (lib.group_start)() };
    check(lib, "ncclGroupStart", status, std::ptr::null_mut())?;
    GROUP.with(|g| g.borrow_mut().depth += 1);
    let r = calls();
    // SAFETY: closes the group opened above.
    let status = unsafe { (lib.group_end)() };
    let outermost = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.depth -= 1;
        (g.depth == 0).then(|| (std::mem::take(&mut g.comms), std::mem::take(&mut g.parked)))
    });
    let mut ended = check_or_progress(lib, "ncclGroupEnd", status, std::ptr::null_mut());
    if let Some((comms, parked)) = outermost {
        if ended.is_ok() && status == sys::NCCL_IN_PROGRESS {
            for c in &comms {
                ended = ended.and_then(|_| c.wait("ncclGroupEnd", Instant::now() + c.timeout));
            }
        }
        for (comm, stream, keep) in parked {
            // After the group's end: the point follows what NCCL queued.
            let r = comm.ctx.inner.tracker.park(&stream, keep);
            ended = ended.and(r);
        }
    }
    let r = r?;
    ended.map(|_| r)
}

/// A [`Communicator::record`] under way: its end, on every path (a panic of the calls'
/// closure included), hands the scope what the collectives used and a hold on the
/// communicator, and restores the stream whose collectives are let through while it captures.
struct Recording<'a, 's> {
    comm: &'a Communicator,
    scope: &'a CaptureScope<'s>,
    was: Option<graph_rt_sys::CUstream>,
}

impl<'a, 's> Recording<'a, 's> {
    fn begin(comm: &'a Communicator, scope: &'a CaptureScope<'s>) -> Self {
        let was = comm.recording.replace(Some(scope.stream().as_raw()));
        Self { comm, scope, was }
    }
}

impl Drop for Recording<'_, '_> {
    fn drop(&mut self) {
        self.comm.recording.set(self.was);
        for res in self.comm.kept.take() {
            self.scope.keep_alive(res);
        }
        self.comm.inner.graphs.fetch_add(1, Ordering::AcqRel);
        let held: Resource = Arc::new(GraphHold(self.comm.inner.clone()));
        self.scope.keep_alive(held);
    }
}

fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

impl Communicator {
    /// Runs `calls` (this communicator's collectives on `scope`'s stream) inside the capture
    /// `scope`, and has the capture's graph keep alive every buffer they use and the
    /// communicator itself: replays then read valid memory whatever the caller drops. Outside
    /// `record`, a collective on a capturing stream is refused (its graph would keep nothing
    /// alive).
    pub fn record<R>(
        &self,
        scope: &CaptureScope<'_>,
        calls: impl FnOnce(&Self) -> Result<R>,
    ) -> Result<R> {
        let recording = Recording::begin(self, scope);
        let r = calls(self);
        drop(recording);
        r
    }

    /// `recv[i] = op over ranks of send[i]` for every `i` (`ncclAllReduce`): both buffers of
    /// one length, on `stream` (of the communicator's context).
    pub fn all_reduce<T: NcclElement>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        const CALL: &str = "ncclAllReduce";
        let count = check_counts(
            CALL,
            Collective::AllReduce,
            send.len(),
            recv.len(),
            self.nranks(),
        )?;
        let (s, r) = (send.as_raw() as *const _, recv.as_raw() as *mut _);
        self.enqueue(
            CALL,
            stream,
            [send.allocation(), recv.allocation()],
            |lib, comm, st| {
                // SAFETY: both buffers of the communicator's context hold `count` elements of
                // `T` (checked); the stream is of that context; kept alive until the call has run.
                unsafe { (lib.all_reduce)(s, r, count, T::DTYPE, op.raw(), comm, st) }
            },
        )
    }

    /// [`Communicator::all_reduce`] in place: `buffer[i] = op over ranks of buffer[i]`.
    pub fn all_reduce_in_place<T: NcclElement>(
        &self,
        buffer: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        const CALL: &str = "ncclAllReduce";
        let count = check_counts(
            CALL,
            Collective::AllReduce,
            buffer.len(),
            buffer.len(),
            self.nranks(),
        )?;
        let p = buffer.as_raw() as *mut std::ffi::c_void;
        self.enqueue(
            CALL,
            stream,
            [buffer.allocation(), buffer.allocation()],
            |lib, comm, st| {
                // SAFETY: as `all_reduce`, the same buffer for both sides (NCCL allows it).
                unsafe { (lib.all_reduce)(p, p, count, T::DTYPE, op.raw(), comm, st) }
            },
        )
    }

    /// Every rank's `send` side by side in `recv`, rank `r`'s at `r · send.len()`
    /// (`ncclAllGather`): `recv` holds `nranks · send.len()` elements.
    pub fn all_gather<T: NcclElement>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        stream: &Stream,
    ) -> Result<()> {
        const CALL: &str = "ncclAllGather";
        let count = check_counts(
            CALL,
            Collective::AllGather,
            send.len(),
            recv.len(),
            self.nranks(),
        )?;
        let (s, r) = (send.as_raw() as *const _, recv.as_raw() as *mut _);
        self.enqueue(
            CALL,
            stream,
            [send.allocation(), recv.allocation()],
            |lib, comm, st| {
                // SAFETY: `send` holds `count` elements and `recv` `nranks · count` (checked).
                unsafe { (lib.all_gather)(s, r, count, T::DTYPE, comm, st) }
            },
        )
    }

    /// Block `r` of the reduction over ranks of `send` into rank `r`'s `recv`
    /// (`ncclReduceScatter`): `send` holds `nranks · recv.len()` elements.
    pub fn reduce_scatter<T: NcclElement>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        const CALL: &str = "ncclReduceScatter";
        let count = check_counts(
            CALL,
            Collective::ReduceScatter,
            send.len(),
            recv.len(),
            self.nranks(),
        )?;
        let (s, r) = (send.as_raw() as *const _, recv.as_raw() as *mut _);
        self.enqueue(
            CALL,
            stream,
            [send.allocation(), recv.allocation()],
            |lib, comm, st| {
                // SAFETY: `send` holds `nranks · count` elements and `recv` `count` (checked).
                unsafe { (lib.reduce_scatter)(s, r, count, T::DTYPE, op.raw(), comm, st) }
            },
        )
    }

    /// Sends `buffer` to rank `peer` (`ncclSend`), which receives as many elements with
    /// [`Communicator::recv`]. A send and its receive on one thread go in one [`group`].
    pub fn send<T: NcclElement>(
        &self,
        buffer: &DeviceBuffer<T>,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        const CALL: &str = "ncclSend";
        let peer = self.peer(CALL, peer, buffer.len())?;
        let (p, count) = (buffer.as_raw() as *const _, buffer.len());
        self.enqueue(
            CALL,
            stream,
            [buffer.allocation(), buffer.allocation()],
            |lib, comm, st| {
                // SAFETY: `buffer` holds `count` elements of the communicator's context.
                unsafe { (lib.send)(p, count, T::DTYPE, peer, comm, st) }
            },
        )
    }

    /// Receives `buffer.len()` elements from rank `peer` into `buffer` (`ncclRecv`).
    pub fn recv<T: NcclElement>(
        &self,
        buffer: &mut DeviceBuffer<T>,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        const CALL: &str = "ncclRecv";
        let peer = self.peer(CALL, peer, buffer.len())?;
        let (p, count) = (buffer.as_raw() as *mut _, buffer.len());
        self.enqueue(
            CALL,
            stream,
            [buffer.allocation(), buffer.allocation()],
            |lib, comm, st| {
                // SAFETY: `buffer` holds `count` elements of the communicator's context.
                unsafe { (lib.recv)(p, count, T::DTYPE, peer, comm, st) }
            },
        )
    }

    fn peer(&self, call: &'static str, peer: usize, len: usize) -> Result<c_int> {
        check_rank(call, peer, self.nranks())?;
        if len == 0 {
            return Err(Error::misuse(
                call,
                Misuse::Empty,
                "an empty buffer: send at least one element",
            ));
        }
        Ok(peer as c_int)
    }

    /// Checks where `call` runs and what it reads, queues it (`issue`), waits for NCCL to have
    /// taken it, and keeps the buffers and the communicator alive until the device has run it
    /// (eagerly: behind a point of the stream, after the outermost group's end in a group; in a
    /// recording: by the graph).
    fn enqueue(
        &self,
        call: &'static str,
        stream: &Stream,
        buffers: [&Arc<Allocation>; 2],
        issue: impl FnOnce(&sys::NcclLib, Comm, graph_rt_sys::CUstream) -> Status,
    ) -> Result<()> {
        let inner = &self.inner;
        inner.refuse_if_aborted(call)?;
        if stream.context().as_raw() != inner.ctx.as_raw() {
            return Err(Error::misuse(
                call,
                Misuse::OtherContext,
                "the stream belongs to another context than the communicator's",
            ));
        }
        for b in buffers {
            if !b.in_context(&inner.ctx) {
                return Err(Error::misuse(
                    call,
                    Misuse::OtherContext,
                    "a buffer belongs to another context than the communicator's",
                ));
            }
            if b.ordered_on().is_some_and(|on| on.raw() != stream.as_raw()) {
                return Err(Error::misuse(
                    call,
                    Misuse::UnorderedBuffer,
                    "a buffer allocated in stream order on another stream: allocate it on the collective's stream, or with DeviceBuffer::alloc",
                ));
            }
        }
        let recording = self.recording.get() == Some(stream.as_raw());
        if !recording && stream.capture_status()? != CaptureStatus::None {
            return Err(Error::misuse(
                call,
                Misuse::Capturing,
                "the stream is capturing: call the collectives inside Communicator::record(scope, ..) (or a step's scope), so that the graph keeps their buffers alive",
            ));
        }
        inner.ctx.bind()?;
        let status = issue(inner.lib, inner.comm, stream.as_raw());
        check_or_progress(inner.lib, call, status, inner.comm)?;
        let grouped = in_group();
        if status == sys::NCCL_IN_PROGRESS && !grouped {
            inner.wait(call, Instant::now() + inner.timeout)?;
        }
        let keep = buffers.map(|b| -> Resource { b.clone() });
        if recording {
            self.kept.borrow_mut().extend(keep);
            return Ok(());
        }
        let [a, b] = keep;
        let parked: Vec<Parked> = vec![Box::new(a), Box::new(b), Box::new(inner.clone())];
        {
            let mut streams = inner.eager_streams.lock();
            if !streams.iter().any(|s| s.raw() == stream.as_raw()) {
                streams.push(stream.shared());
            }
        }
        if grouped {
            GROUP.with(|g| {
                let mut g = g.borrow_mut();
                if !g.comms.iter().any(|c| Arc::ptr_eq(c, inner)) {
                    g.comms.push(inner.clone());
                }
                g.parked.push((inner.clone(), stream.shared(), parked));
            });
            return Ok(());
        }
        stream.ctx_inner().tracker.park(&stream.shared(), parked)
    }
}

/// What a graph that captured collectives of a communicator holds: the communicator, and a
/// count of such graphs that [`Communicator::abort`] reads.
struct GraphHold(Arc<CommInner>);

impl Drop for GraphHold {
    fn drop(&mut self) {
        self.0.graphs.fetch_sub(1, Ordering::AcqRel);
    }
}
