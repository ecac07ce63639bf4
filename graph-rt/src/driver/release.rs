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
enum Fence {
    /// Once this event (recorded after the last work that can use the batch) has completed, or
    /// the context is known idle since the batch was parked.
    Event(CUevent),
    /// At once: the batch's own release waits for the device where it must (`cuMemFree`).
    None,
    /// The stream of the last work was capturing, so no event could be recorded: the release
    /// thread records one once the capture has ended.
    Capturing(Arc<StreamInner>),
}

struct Entry {
    // Parking order: `synchronize` releases the batches parked before it waited.
    seq: u64,
    fence: Fence,
    parked: Vec<Parked>,
}

#[derive(Default)]
struct State {
    entries: VecDeque<Entry>,
    next_seq: u64,
    // Taken by the release thread, being released now.
    in_progress: usize,
    stop: bool,
    started: bool,
    // The release thread runs (false before it starts, and if it could not be started).
    running: bool,
}

struct Shared {
    ctx: usize,
    state: Mutex<State>,
    // Signals new entries and stop to the thread, and finished releases to `synchronized`.
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
    pub(crate) fn park(&self, stream: &Arc<StreamInner>, parked: Vec<Parked>) -> Result<()> {
        match fence_after(stream) {
            Ok(fence) => {
                self.push(fence, parked);
                Ok(())
            }
            Err(e) => {
                std::mem::forget(parked);
                Err(e)
            }
        }
    }

    /// Drops `parked` on the release thread (its drop waits for the device itself where it
    /// must), or here when there is no release thread.
    pub(crate) fn release_later(&self, parked: Parked) {
        if !self.shared.state.lock().running {
            return drop(parked);
        }
        self.push(Fence::None, vec![parked]);
    }

    fn push(&self, fence: Fence, parked: Vec<Parked>) {
        let mut state = self.shared.state.lock();
        let seq = state.next_seq;
        state.next_seq += 1;
        state.entries.push_back(Entry { seq, fence, parked });
        drop(state);
        self.start();
        self.shared.changed.notify_all();
    }

    /// Starts the release thread unless it was started. Instantiation calls this, so that the
    /// first drop of an exec does not pay for starting a thread.
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
            Ok(handle) => {
                self.shared.state.lock().running = true;
                *self.thread.lock() = Some(handle);
            }
            // No thread: batches wait for `poll`, `synchronize` or teardown, and memory is
            // freed where it is dropped.
            Err(e) => tracing::warn!(error = %e, "graph-rt: no release thread"),
        }
    }

    /// Releases, on this thread, what the device is done with. Returns how many batches stay
    /// parked. The context must be current. Releases nothing while a global-mode capture of
    /// graph-rt runs (freeing memory would invalidate it), also when called inside one.
    pub(crate) fn poll(&self) -> usize {
        self.release_ready(None)
    }

    /// The point `synchronized` releases up to: call before waiting for the context.
    pub(crate) fn mark(&self) -> u64 {
        self.shared.state.lock().next_seq
    }

    /// After the context was synchronized: releases every batch parked before `mark` (and what
    /// their release hands back), waiting for what the release thread is releasing.
    pub(crate) fn synchronized(&self, mark: u64) -> usize {
        self.release_ready(Some(mark));
        let mut state = self.shared.state.lock();
        if !RELEASE_THREAD.with(|t| t.get()) {
            while state.in_progress > 0 {
                self.shared.changed.wait(&mut state);
            }
        }
        drop(state);
        self.release_ready(Some(mark))
    }

    fn release_ready(&self, idle_before: Option<u64>) -> usize {
        let Some(_no_capture) = CAPTURE_LOCK.try_write() else {
            return self.len();
        };
        // Released drops may park again (a buffer's memory): loop until nothing is ready.
        loop {
            let done = take_ready(&mut self.shared.state.lock().entries, idle_before);
            if done.is_empty() {
                return self.len();
            }
            release(done);
        }
    }

    /// Teardown, with nothing of the context left in use: stops the thread, waits for the
    /// device and releases everything.
    pub(crate) fn teardown(&self, synchronize: impl FnOnce()) {
        self.stop();
        if self.len() == 0 {
            return;
        }
        synchronize();
        // Not while a global-mode capture runs in another thread (give it a moment to end).
        let Some(_no_capture) = CAPTURE_LOCK.try_write_for(Duration::from_millis(100)) else {
            let n = self.len();
            tracing::warn!("graph-rt: a capture runs while its context is torn down: leaking {n} parked batches");
            return std::mem::forget(std::mem::take(&mut self.shared.state.lock().entries));
        };
        let entries = std::mem::take(&mut self.shared.state.lock().entries);
        release(entries.into());
    }

    /// How many batches are parked (not counting those being released).
    pub(crate) fn len(&self) -> usize {
        self.shared.state.lock().entries.len()
    }

    /// Stops the release thread (after the batch it is releasing, if any).
    fn stop(&self) {
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

/// Takes the entries that may be released now (events completed, or parked before
/// `idle_before` when the context has been synchronized since), keeping the others in order.
fn take_ready(entries: &mut VecDeque<Entry>, idle_before: Option<u64>) -> Vec<Entry> {
    let mut done = Vec::new();
    let mut i = 0;
    while i < entries.len() {
        let e = &entries[i];
        let ready = match &e.fence {
            Fence::None => true,
            Fence::Capturing(_) => false,
            Fence::Event(event) => {
                idle_before.is_some_and(|m| e.seq < m) || {
                    // SAFETY: a live event we created, of the current context.
                    let query = unsafe { cuda_sys::cuEventQuery(*event) };
                    query == Ok(CUresult::CUDA_SUCCESS)
                }
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

/// Gives the batches parked while their stream captured an event fence, once it no longer
/// captures. Returns whether any batch may be released by waiting.
fn fence_captured(entries: &mut VecDeque<Entry>) -> bool {
    let mut waiting = false;
    for e in entries.iter_mut() {
        if let Fence::Capturing(stream) = &e.fence {
            match fence_after(stream) {
                Ok(Fence::Capturing(_)) => continue,
                Ok(fence) => e.fence = fence,
                // Cannot tell when the work ends: this batch stays for synchronize/teardown.
                Err(_) => continue,
            }
        }
        waiting = true;
    }
    waiting
}

fn release_thread(shared: &Shared) {
    RELEASE_THREAD.with(|t| t.set(true));
    let mut backoff = Duration::from_micros(20);
    loop {
        let mut state = shared.state.lock();
        if state.stop {
            return;
        }
        if state.entries.is_empty() {
            shared.changed.wait(&mut state);
            continue;
        }
        drop(state);
        // Waits for graph-rt's global-mode captures to end, checking for stop meanwhile (the
        // context may be torn down by a thread that captures).
        let Some(no_capture) = CAPTURE_LOCK.try_write_for(Duration::from_millis(1)) else {
            continue;
        };
        // SAFETY: the context is alive while batches that hold it are parked.
        let _ = unsafe { cuda_sys::cuCtxSetCurrent(shared.ctx as CUcontext) };
        let done = {
            let mut state = shared.state.lock();
            fence_captured(&mut state.entries);
            let done = take_ready(&mut state.entries, None);
            state.in_progress += done.len();
            done
        };
        let released = done.len();
        release(done);
        drop(no_capture);
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

/// A new event recorded at the current end of `stream`, or [`Fence::Capturing`] while the
/// stream captures (the record would become a node of the user's graph).
fn fence_after(stream: &Arc<StreamInner>) -> Result<Fence> {
    let none = cuda_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    if stream.capture_status()? != none {
        return Ok(Fence::Capturing(stream.clone()));
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
