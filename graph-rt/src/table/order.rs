//! Buffers allocated in stream order on another stream than the table's.
//!
//! Memory of [`DeviceBuffer::alloc_async`](crate::DeviceBuffer::alloc_async) on stream A is the
//! buffer's only in A's order: the pool may still give it to work queued earlier on A, and the
//! work that fills it is usually queued on A too. A launch through the table on stream B would
//! read it as soon as B gets there. So binding such a buffer (a slot, a binding set, a step's
//! parameter) records an event on A — after what A has queued so far — and the next launch or
//! refresh staged on B waits for it first (`cuStreamWaitEvent`), as an eager cuBLAS GEMM does.
//! Its free needs nothing more: the table keeps the allocation until the launches that may read
//! it have finished, and only then queues its free on A.
//!
//! A buffer whose stream captures at the binding is refused ([`Misuse::UnorderedBuffer`]):
//! nothing recorded on A then would run before the launch. Buffers of `cuMemAlloc`, and those of
//! the table's own stream, cost nothing here: one check of the allocation's kind per binding.

use std::sync::Arc;

use graph_rt_sys::CUstreamCaptureStatus;

use super::table::ArgTable;
use crate::driver::{Event, EventFlags, Stream, StreamInner};
use crate::error::{Error, Misuse, Result};

/// The events the next launch waits for, one per stream bound from (kept alive, so that its
/// handle is not another stream's meanwhile), and spares to reuse.
#[derive(Default)]
pub(super) struct Waits {
    pending: Vec<(Arc<StreamInner>, Event)>,
    spare: Vec<Event>,
}

impl ArgTable {
    /// Orders the next launch after what `on`, a stream-ordered allocation's stream, has queued
    /// so far (nothing for the table's own stream).
    #[cold]
    #[inline(never)]
    pub(super) fn order_after(&mut self, on: &Arc<StreamInner>, call: &'static str) -> Result<()> {
        if self.stream.as_ref().is_some_and(|s| s.raw() == on.raw()) {
            return Ok(());
        }
        if on.capture_status()? != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Err(Error::misuse(
                call,
                Misuse::UnorderedBuffer,
                "the buffer was allocated in stream order on a stream that is capturing now: nothing could order its allocation before the table's launches; allocate it on the table's stream, or with DeviceBuffer::alloc",
            ));
        }
        let waits = &mut self.waits;
        if let Some((_, event)) = waits.pending.iter().find(|(s, _)| s.raw() == on.raw()) {
            // A later record on the same stream covers the earlier one.
            return event.record_on(on);
        }
        let event = match waits.spare.pop() {
            Some(e) => e,
            None => Event::new(&self.ctx, EventFlags::DisableTiming)?,
        };
        event.record_on(on)?;
        waits.pending.push((on.clone(), event));
        Ok(())
    }

    /// Makes `stream` wait for every stream a buffer bound since the last launch was allocated
    /// on (before the launch or refresh staged now).
    #[inline]
    pub(super) fn wait_for_allocations(&mut self, stream: &Stream) -> Result<()> {
        if self.waits.pending.is_empty() {
            return Ok(());
        }
        self.wait_pending(stream)
    }

    #[cold]
    #[inline(never)]
    fn wait_pending(&mut self, stream: &Stream) -> Result<()> {
        let waits = &mut self.waits;
        while let Some((on, event)) = waits.pending.pop() {
            // A wait captures the event's last record: the event may be recorded again after.
            let r = if on.raw() == stream.as_raw() {
                Ok(())
            } else {
                stream.wait(&event)
            };
            waits.spare.push(event);
            r?;
        }
        Ok(())
    }
}
