//! Deferred release: what a drop must not free while the device may still use it is parked on
//! its context behind a fence (an event recorded after the last work that can use it), and
//! released once the fence has completed. Nothing blocks the dropping thread.
//!
//! The queue is drained off the launch path: by [`Context::poll`](super::Context::poll), by
//! [`Context::synchronize`](super::Context::synchronize) (which releases everything), by
//! `Graph::instantiate`, and at context teardown. Draining does the deferred host work (destroying
//! a 1000-node exec costs about a millisecond), which is why drops themselves never drain. What
//! is parked keeps its context alive until released.

use std::any::Any;
use std::collections::VecDeque;

use cuda_sys::{CUevent, CUevent_flags, CUresult};
use parking_lot::Mutex;

use super::stream::StreamInner;
use crate::error::{check, Result};

/// Something parked: anything whose drop frees what the device may use.
pub(crate) type Parked = Box<dyn Any + Send>;

struct Entry {
    // Null when no fence could be recorded (the stream was capturing): released only once the
    // whole context is known idle.
    fence: CUevent,
    parked: Vec<Parked>,
}

/// A context's parked resources.
#[derive(Default)]
pub(crate) struct ReleaseQueue {
    entries: Mutex<VecDeque<Entry>>,
}

// SAFETY: the raw events are only used under the mutex, with their context current.
unsafe impl Send for ReleaseQueue {}
// SAFETY: as above.
unsafe impl Sync for ReleaseQueue {}

impl ReleaseQueue {
    /// Parks `parked` until the work queued on `stream` so far has finished. The context must
    /// be current. When no fence can be recorded, `parked` is leaked (kept alive for good): it
    /// may still be in use, and nothing could tell when it stops being.
    pub(crate) fn park(&self, stream: &StreamInner, parked: Vec<Parked>) -> Result<()> {
        match fence_after(stream) {
            Ok(fence) => {
                self.entries.lock().push_back(Entry { fence, parked });
                Ok(())
            }
            Err(e) => {
                std::mem::forget(parked);
                Err(e)
            }
        }
    }

    /// Releases what completed fences hold (all of it when `idle`: the caller knows the context
    /// has finished all work). Returns how many entries stay parked. The context must be current.
    pub(crate) fn drain(&self, idle: bool) -> usize {
        let mut done = Vec::new();
        let left = {
            let mut entries = self.entries.lock();
            let mut i = 0;
            while i < entries.len() {
                let e = &entries[i];
                let complete = idle
                    || !e.fence.is_null()
                        // SAFETY: a live event we created.
                        && unsafe { cuda_sys::cuEventQuery(e.fence) }
                            == Ok(CUresult::CUDA_SUCCESS);
                if complete {
                    done.extend(entries.remove(i));
                } else {
                    i += 1;
                }
            }
            entries.len()
        };
        // Dropped outside the lock: a parked drop may park again.
        for e in done {
            destroy(e.fence);
            drop(e.parked);
        }
        left
    }

    /// How many entries are parked.
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().len()
    }
}

/// A new event recorded at the current end of `stream`, or null while the stream captures
/// (the record would become a node of the user's graph).
fn fence_after(stream: &StreamInner) -> Result<CUevent> {
    let none = cuda_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    if stream.capture_status()? != none {
        return Ok(std::ptr::null_mut());
    }
    let mut event = std::ptr::null_mut();
    let flags = CUevent_flags::CU_EVENT_DISABLE_TIMING.0;
    // SAFETY: valid out-pointer; the context is current.
    check("cuEventCreate", unsafe {
        cuda_sys::cuEventCreate(&mut event, flags)
    })?;
    // SAFETY: a fresh event and a live stream of this context.
    let r = check("cuEventRecord", unsafe {
        cuda_sys::cuEventRecord(event, stream.raw())
    });
    if let Err(e) = r {
        destroy(event);
        return Err(e);
    }
    Ok(event)
}

fn destroy(event: CUevent) {
    if !event.is_null() {
        // SAFETY: an event we created and no longer use.
        let _ = unsafe { cuda_sys::cuEventDestroy(event) };
    }
}
