//! GEMMs on buffers allocated in stream order on another stream than the handle's.
//!
//! Memory of [`DeviceBuffer::alloc_async`](crate::DeviceBuffer::alloc_async) on stream A
//! belongs to the buffer only in A's order: from the allocation, which A may not have reached
//! yet (the pool may still give the memory to work queued earlier on A), to the free, which the
//! buffer's drop queues on A right away (`cuMemFreeAsync`), after A's work but not after the
//! GEMM's on the handle's stream B. Since the GEMMs are safe, graph-rt orders them itself:
//!
//! * Eagerly, B first waits for what A has queued so far (an event recorded on A), and the
//!   allocation is kept alive by the context's lifetime tracker behind a point after the GEMM on
//!   B: it is freed on A only once the GEMM has finished. A does not wait for B.
//! * In a capture of B ([`Cublas::record`](super::Cublas::record)), the graph waits for what
//!   A has queued so far through an event-wait node (`cuStreamWaitEvent` with
//!   `CU_EVENT_WAIT_EXTERNAL`, the event recorded on A once, at capture time, and kept by the
//!   graph): every replay, on any stream, runs after the allocation. The graph keeps the
//!   allocation alive, as every buffer of a recorded GEMM, until its last replay has finished.
//!
//! A buffer whose allocating stream is capturing itself is refused (nothing recorded on A then
//! would run before the GEMM). Buffers of `cuMemAlloc` and stream-ordered buffers of the
//! handle's own stream need none of this: B's order covers them. (Replays of a graph that
//! captured a stream-ordered buffer of B, launched on another stream than B, are ordered after
//! its allocation only by the caller, as for every captured operation.)

use std::sync::Arc;

use crate::driver::{Allocation, Event, EventFlags, Parked, Stream, StreamInner};
use crate::error::{Error, Misuse, Result};
use crate::resource::Resource;

/// The operands' names, in the order the GEMMs hand their buffers over.
const NAMES: [&str; 3] = ["A", "B", "C"];

/// The stream-ordered allocations among `allocations` (A, B, C) made on another stream than
/// `stream`, with their operands' names.
pub(super) fn foreign<'a>(
    stream: &Stream,
    allocations: [&'a Arc<Allocation>; 3],
) -> Vec<(&'static str, &'a Arc<Allocation>, &'a Arc<StreamInner>)> {
    NAMES
        .into_iter()
        .zip(allocations)
        .filter_map(|(name, a)| {
            let on = a.ordered_on()?;
            (on.raw() != stream.as_raw()).then_some((name, a, on))
        })
        .collect()
}

/// Makes the GEMM about to be queued on `stream` wait for what each foreign allocation's stream
/// has queued so far: through `eager` (an event reused from call to call) when `stream` runs
/// its work, else through an event-wait node of the capture, its event pushed on `kept`.
/// Returns the foreign allocations, for [`after_eager`].
pub(super) fn before(
    call: &'static str,
    stream: &Stream,
    foreign: &[(&'static str, &Arc<Allocation>, &Arc<StreamInner>)],
    eager: Option<&Event>,
    kept: &mut Vec<Resource>,
) -> Result<Vec<Arc<Allocation>>> {
    let none = graph_rt_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut waited: Vec<graph_rt_sys::CUstream> = Vec::new();
    for (name, _, on) in foreign {
        if waited.contains(&on.raw()) {
            continue;
        }
        if on.capture_status()? != none {
            return Err(Error::misuse(
                call,
                Misuse::UnorderedBuffer,
                format!(
                    "{name} was allocated in stream order on another stream than the handle's, which is capturing now: \
                     nothing could order its allocation before the GEMM; allocate it on the handle's stream, or with DeviceBuffer::alloc"
                ),
            ));
        }
        match eager {
            Some(event) => {
                event.record_on(on)?;
                stream.wait(event)?;
            }
            None => {
                let event = Event::new(stream.context(), EventFlags::DisableTiming)?;
                event.record_on(on)?;
                // A live event of the stream's context (the buffers' context is the handle's,
                // checked before); the graph keeps the event alive (below).
                stream.wait_external(&event)?;
                kept.push(event.resource());
            }
        }
        waited.push(on.raw());
    }
    Ok(foreign.iter().map(|(_, a, _)| Arc::clone(a)).collect())
}

/// After an eager GEMM on `stream`: keeps `allocations` alive until the work queued on
/// `stream` so far has finished (their drop frees them on their own streams).
pub(super) fn after_eager(stream: &Stream, allocations: Vec<Arc<Allocation>>) -> Result<()> {
    if allocations.is_empty() {
        return Ok(());
    }
    let parked: Vec<Parked> = allocations
        .into_iter()
        .map(|a| Box::new(a) as Parked)
        .collect();
    // A fence that cannot be recorded leaks the allocations: they stay valid for the GEMM.
    stream.ctx_inner().tracker.park(&stream.shared(), parked)
}
