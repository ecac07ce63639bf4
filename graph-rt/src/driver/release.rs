//! Deferred release: what a drop must not free while the device may still use it is parked on
//! its context, behind a fence (an event recorded after the last work that can use it), and
//! released by the context's release thread once the fence has completed. Dropping never waits
//! for the device, and never does the slow host work of destroying (a 1000-node exec costs about
//! a millisecond to destroy) on the dropping thread.
//!
//! The release thread (one per context, started by the first park) polls the fences with
//! `cuEventQuery`, backing off while none has completed, and sleeps while nothing is parked.
//! `Context::poll` releases what has completed on the calling thread, `Context::synchronize`
//! releases everything once the device is idle, and so does the context's teardown.
//!
//! Releasing frees memory, which a stream capture in global mode forbids in every thread: the
//! release thread holds [`capture_lock`] exclusively while it releases, and graph-rt's captures in
//! global mode hold it shared, so the two never overlap. A global-mode capture that graph-rt did
//! not start (another library's) is not seen: start those in thread-local mode, or call
//! `Context::synchronize` first.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use cuda_sys::{CUcontext, CUevent, CUevent_flags, CUresult};
use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};

use super::stream::StreamInner;
use crate::error::{check, Result};

/// Something parked: anything whose drop frees what the device may use.
pub(crate) type Parked = Box<dyn Any + Send>;

/// Held shared by graph-rt's global-mode captures, exclusively by a release thread releasing.
static CAPTURE_LOCK: RwLock<()> = RwLock::new(());

thread_local! {
    /// Whether this thread is a release thread (which must not wait for its own releases).
    static RELEASE_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A share of [`CAPTURE_LOCK`] for a global-mode capture (re-entrant: captures may nest).
pub(crate) fn capture_lock() -> RwLockReadGuard<'static, ()> {
    CAPTURE_LOCK.read_recursive()
}

/// When a parked batch may be released.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fence {
    /// Once this event (recorded after the last work that can use the batch) has completed.
    Event(CUevent),
    /// At once: the batch's own release waits for the device where it must (`cuMemFree`).
    None,
    /// Only once the whole context is known idle: no event could be recorded (the stream was
    /// capturing).
    Idle,
}

struct Entry {
    fence: Fence,
    parked: Vec<Parked>,
}

#[derive(Default)]
struct State {
    entries: VecDeque<Entry>,
    // Taken by the release thread, being released now.
    in_progress: usize,
    stop: bool,
    started: bool,
}

struct Shared {
    ctx: usize,
    state: Mutex<State>,
    // Signals new entries and stop to the thread, and finished releases to `drain`.
    changed: Condvar,
}

/// A context's parked batches and its release thread.
pub(crate) struct ReleaseQueue {
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

// SAFETY: the raw events are only used with their context current, under the state mutex or
// after being taken out of it by one thread.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl ReleaseQueue {
    pub(crate) fn new(ctx: CUcontext) -> Self {
        Self {
            shared: Arc::new(Shared {
                ctx: ctx as usize,
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
            thread: Mutex::new(None),
        }
    }

    /// Parks `parked` until the work queued on `stream` so far has finished. The context must
    /// be current. When no fence can be recorded, `parked` is leaked (kept alive for good): it
    /// may still be in use, and nothing could tell when it stops being.
    pub(crate) fn park(&self, stream: &StreamInner, parked: Vec<Parked>) -> Result<()> {
        match fence_after(stream) {
            Ok(fence) => {
                self.push(Entry { fence, parked });
                Ok(())
            }
            Err(e) => {
                std::mem::forget(parked);
                Err(e)
            }
        }
    }

    /// Hands `parked` to the release thread, to be dropped there at once (its drop waits for
    /// the device itself where it must).
    pub(crate) fn release_later(&self, parked: Parked) {
        self.push(Entry {
            fence: Fence::None,
            parked: vec![parked],
        });
    }

    fn push(&self, entry: Entry) {
        self.shared.state.lock().entries.push_back(entry);
        self.start();
        self.shared.changed.notify_all();
    }

    /// Starts the release thread unless it runs. Instantiation calls this, so that the first
    /// drop of an exec does not pay for starting a thread.
    pub(crate) fn start(&self) {
        let mut state = self.shared.state.lock();
        if state.started {
            return;
        }
        state.started = true;
        drop(state);
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("graph-rt-release".into())
            .spawn(move || release_thread(&shared));
        match spawned {
            Ok(handle) => *self.thread.lock() = Some(handle),
            // No thread: batches wait for `poll`, `synchronize` or teardown.
            Err(e) => tracing::warn!(error = %e, "graph-rt: no release thread"),
        }
    }

    /// Releases, on this thread, what completed fences hold, or everything when `idle` (the
    /// caller knows the context has finished all work; then it also waits for what the release
    /// thread is releasing). Returns how many batches stay parked. The context must be current.
    pub(crate) fn drain(&self, idle: bool) -> usize {
        let (done, left) = {
            let mut state = self.shared.state.lock();
            let done = take_ready(&mut state.entries, idle);
            if idle && !RELEASE_THREAD.with(|t| t.get()) {
                while state.in_progress > 0 {
                    self.shared.changed.wait(&mut state);
                }
            }
            (done, state.entries.len())
        };
        release(done);
        left
    }

    /// How many batches are parked (not counting those being released).
    pub(crate) fn len(&self) -> usize {
        self.shared.state.lock().entries.len()
    }

    /// Stops the release thread (after the batch it is releasing, if any).
    pub(crate) fn stop(&self) {
        self.shared.state.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(handle) = self.thread.lock().take() {
            // The context may be torn down by the release thread itself, dropping the last
            // batch that held it: it cannot wait for itself, and exits on its own.
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

/// Takes the entries that may be released now, keeping the others in order.
fn take_ready(entries: &mut VecDeque<Entry>, idle: bool) -> Vec<Entry> {
    let mut done = Vec::new();
    let mut i = 0;
    while i < entries.len() {
        let ready = match entries[i].fence {
            Fence::None => true,
            Fence::Idle => idle,
            Fence::Event(e) => {
                // SAFETY: a live event we created, of the current context.
                let query = unsafe { cuda_sys::cuEventQuery(e) };
                idle || query == Ok(CUresult::CUDA_SUCCESS)
            }
        };
        if ready {
            done.extend(entries.remove(i));
        } else {
            i += 1;
        }
    }
    done
}

/// Drops released batches and destroys their fences (outside the state lock: a parked drop may
/// park again).
fn release(done: Vec<Entry>) {
    for e in done {
        if let Fence::Event(event) = e.fence {
            destroy(event);
        }
        drop(e.parked);
    }
}

fn release_thread(shared: &Shared) {
    RELEASE_THREAD.with(|t| t.set(true));
    let mut backoff = Duration::from_micros(20);
    loop {
        let mut state = shared.state.lock();
        if state.stop {
            return;
        }
        let waiting = state.entries.iter().any(|e| e.fence != Fence::Idle);
        if !waiting {
            shared.changed.wait(&mut state);
            continue;
        }
        drop(state);
        // Waits for graph-rt's global-mode captures to end, checking for stop meanwhile (the
        // context may be torn down by a thread that captures).
        let Some(_no_capture) = CAPTURE_LOCK.try_write_for(Duration::from_millis(1)) else {
            continue;
        };
        let released = {
            // SAFETY: the context is alive while batches that hold it are parked.
            let _ = unsafe { cuda_sys::cuCtxSetCurrent(shared.ctx as CUcontext) };
            let done = {
                let mut state = shared.state.lock();
                let done = take_ready(&mut state.entries, false);
                state.in_progress += done.len();
                done
            };
            let n = done.len();
            release(done);
            n
        };
        drop(_no_capture);
        if released > 0 {
            shared.state.lock().in_progress -= released;
            shared.changed.notify_all();
            backoff = Duration::from_micros(20);
        } else {
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(1));
        }
    }
}

/// A new event recorded at the current end of `stream`, or [`Fence::Idle`] while the stream
/// captures (the record would become a node of the user's graph).
fn fence_after(stream: &StreamInner) -> Result<Fence> {
    let none = cuda_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    if stream.capture_status()? != none {
        return Ok(Fence::Idle);
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
    Ok(Fence::Event(event))
}

fn destroy(event: CUevent) {
    // SAFETY: an event we created and no longer use.
    let _ = unsafe { cuda_sys::cuEventDestroy(event) };
}
