//! The lifetime tracker: one per context, for everything a launch may still read once its owner
//! lets go of it — execs, graphs and tables dropped while they may run, buffers dropped while
//! bound, cuBLAS handles and workspaces. Each is *retired* with a completion point ([`Point`]):
//! an event recorded after the last work that may read it (the work of one exec, and of one
//! table, is ordered, so one point covers it), a count on a timeline the device advances (a
//! table's acknowledgements), or nothing (its own release waits where it must). It is released
//! once its point has passed, by the context's release thread, without any call of the user's.
//! Retiring never waits for the device, and the slow host work of destroying (a 1000-node exec
//! costs about a millisecond to destroy) never runs on the retiring thread. Every drop that may
//! still be read goes one way: [`Tracker::park`] (a point after the work queued so far, or, when
//! none can be recorded, a leak: nothing could tell when the device stops using it).
//!
//! What a live owner replaces many times a second (an exec's node bindings, a table's slot
//! bindings and sets) it retires on its own [`Lane`] of the same points, released on its thread
//! as they pass; a dropped owner's lane is parked with it (and lets go of everything once its
//! last launch has finished), or handed to the tracker point by point. `Context::synchronize`
//! and reclaims reach what is parked, not what a live owner's lane holds (its owner's next
//! rebinding, `ArgTable::trim` or its drop do).
//!
//! The release thread (one per context, started by the first park, deferred drop or
//! instantiation) polls the points with `cuEventQuery`, backing off up to a millisecond while
//! none has passed, and sleeps while nothing is parked. An event has passed once its query (or
//! wait) answers success, or a sticky error: the context is broken for good and runs nothing any
//! more. Any other answer, such as a refusal (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` while
//! another library's global-mode capture runs), says nothing about the work: the batch stays
//! parked and is looked at again; a refused wait polls for the capture gate's patience, then
//! gives up without releasing (at teardown and exit, such a batch is leaked, never released
//! early). `Context::poll` releases what has passed
//! on the calling thread, `Context::synchronize` everything parked before it once the device is
//! idle.
//!
//! An allocation that fails for lack of memory asks the release thread to release what is parked
//! ([`Tracker::reclaim`]): it waits for the points of what was parked so far, releases it
//! (and what that release frees in turn), waits for what other threads are releasing, and the
//! allocation is retried once.
//!
//! Parked batches hold their context, so a context whose every user handle is gone lives on
//! until its release thread has released the last batch: that release drops the context, whose
//! teardown stops the thread and releases whatever is left before the context itself is released.
//! At process exit (`main` returning, `std::process::exit`) a hook registered with `atexit` has
//! every release thread release everything still parked, waiting for the points, and stop,
//! before the libraries whose objects are parked (cuBLAS) and the driver tear themselves down
//! (`exit.rs`). The release threads do it, not the exiting thread: by the time exit handlers run,
//! that thread's thread-locals (cuBLAS's runtime keeps its own) are gone.
//!
//! Releasing frees memory, which a stream capture in global mode forbids in every thread: a
//! releasing thread holds [`capture_lock`] exclusively while it releases (never while it waits
//! for a point: it waits first, then takes the lock for what is ready), and graph-rt's captures
//! in global mode hold it shared, so the two never overlap. A global-mode capture that graph-rt
//! did not start (another library's) is not seen. The threads graph-rt starts to release (the
//! release thread, the exit hook's) run in relaxed capture interaction mode
//! (`cuThreadExchangeStreamCaptureMode`), so that the driver neither refuses their event
//! queries, event waits and frees during such a capture nor breaks the capture for them
//! (`wip/capture-modes/relaxed.c` probes this). Releases on a user's thread (`Context::poll`,
//! `Context::synchronize`, teardown) run in that thread's mode: start foreign captures in
//! thread-local mode, or make no such call while one runs. A release that waits for the whole context (a foreign owner's
//! guard, a cuBLAS handle) passes `capture_gate` too, which lets graph-rt's captures of the
//! context in any mode end first; nothing is released in place on a thread that captures.
//!
//! Files: this one (the tracker), `lane.rs` (an owner's own retirements), `point.rs` (what a
//! batch waits for), `lock.rs` (the capture lock),
//! `thread.rs` (the release thread), `exit.rs` (the exit hook).

mod exit;
mod lane;
mod lock;
#[cfg(all(test, loom))]
mod loom_models;
mod point;
#[cfg(all(test, not(loom)))]
mod tests;
mod thread;

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use graph_rt_sys::CUcontext;

pub(crate) use self::exit::{exiting, CAPTURE_PATIENCE as EXIT_CAPTURE_PATIENCE};
pub(crate) use self::lane::Lane;
pub(crate) use self::lock::capture_lock;
use self::lock::{capturing, releasing, Blocked, Exclusive};
pub(crate) use self::point::{is_sticky, point_after, Point, Progress};
use self::thread::{is_release_thread_of, release_thread};
pub(crate) use self::thread::{on_release_thread, DEVICE_PATIENCE};
use super::stream::StreamInner;
use super::sync::{Condvar, Mutex};
use crate::driver::cu;
use crate::error::Result;

/// What a reclaim did ([`Tracker::reclaim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reclaim {
    /// Nothing could be released (nothing parked, or no wait allowed here).
    Nothing,
    /// What was parked has been released: retrying may succeed.
    Released,
    /// The device did not finish the work what is parked waits for within this long.
    TimedOut(Duration),
}

/// Something parked: anything whose drop frees what the device may use.
pub(crate) type Parked = Box<dyn Any + Send>;

/// How long teardown (and what is parked on a closed queue, but at exit) waits for graph-rt's
/// global-mode captures to end before it leaks what it would release.
const TEARDOWN_PATIENCE: Duration = Duration::from_millis(100);
struct Entry {
    // Parking order: `synchronize` releases the batches parked before it waited.
    seq: u64,
    point: Point,
    parked: Vec<Parked>,
}

#[derive(Default)]
struct State {
    entries: VecDeque<Entry>,
    next_seq: u64,
    // Taken by a releasing thread, being released now.
    in_progress: usize,
    started: bool,
    // The release thread runs (false before it starts, after it stopped, and if it could not
    // be started).
    running: bool,
    // Torn down, or the process exits: no release thread; what is parked from now on is
    // released where it is parked, once its point has passed.
    closed: bool,
    // The process exits: the release thread releases everything parked, waiting for the points
    // until this deadline, before it stops (see `exit.rs`).
    exit_deadline: Option<Instant>,
    // The process exits: what is parked from now on waits for its point until this deadline at
    // most (set whether or not the release thread was handed the rest).
    device_deadline: Option<Instant>,
    // Reclaims (allocations out of memory): the release thread waits for the points of what was
    // parked before `drain_mark`, releases it, waits for what other threads are releasing, and
    // sets `drained` to the ticket it served.
    drain_ticket: u64,
    drained: u64,
    drain_mark: u64,
}

struct Shared {
    // The context (a raw handle as an integer; 0 in CPU tests, which make no driver call).
    ctx: usize,
    state: Mutex<State>,
    // Signals new entries, reclaims and closing to the thread, and finished releases, served
    // reclaims and the thread's end to the others.
    changed: Condvar,
    // Reclaims served (for tests).
    reclaims: AtomicUsize,
    // Batches released and leaked by `release_everything` at exit (for the exit hook's report).
    exit_released: AtomicUsize,
    exit_leaked: AtomicUsize,
    // The release thread, until teardown or the exit hook joins it (or hands it to the exit
    // hook: see `exit::leave_unjoined`).
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A context's parked batches and its release thread.
pub(crate) struct Tracker {
    shared: Arc<Shared>,
}

/// Tells, without keeping it, whether a queue and its release thread are gone (for tests).
#[cfg(test)]
pub(crate) struct QueueWatch(std::sync::Weak<Shared>);

#[cfg(test)]
impl QueueWatch {
    /// Whether the queue was dropped and its release thread has ended.
    pub(crate) fn is_gone(&self) -> bool {
        self.0.strong_count() == 0
    }
}

// SAFETY: the context handle is only used with the driver, which accepts it from any thread;
// everything else is behind the state mutex.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Tracker {
    pub(crate) fn new(ctx: CUcontext) -> Self {
        let shared = Arc::new(Shared {
            ctx: ctx as usize,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            reclaims: AtomicUsize::new(0),
            exit_released: AtomicUsize::new(0),
            exit_leaked: AtomicUsize::new(0),
            thread: Mutex::new(None),
        });
        exit::register(&shared);
        Self { shared }
    }

    /// Parks `parked` until the work queued on `stream` so far has finished. The context must
    /// be current. When no point can be recorded, `parked` is leaked (kept alive for good): it
    /// may still be in use, and nothing could tell when it stops being.
    pub(crate) fn park(&self, stream: &Arc<StreamInner>, parked: Vec<Parked>) -> Result<()> {
        match point_after(stream) {
            Ok(point) => {
                self.retire(point, parked);
                Ok(())
            }
            Err(e) => {
                std::mem::forget(parked);
                Err(e)
            }
        }
    }

    /// Drops `parked` on the release thread (its drop waits for the device itself where it
    /// must), starting it if it was not. Where no release thread can be started, drops it here
    /// (after other threads' releases) unless a global-mode capture of graph-rt runs: then it
    /// waits for `poll`, `synchronize`, a reclaim or teardown.
    pub(crate) fn release_later(&self, parked: Parked) {
        self.start();
        let state = self.shared.state.lock();
        let queued = state.running || state.closed;
        drop(state);
        // Not in place on a thread that captures: what it releases may wait for the whole
        // context, which that thread's capture forbids.
        if !queued && !super::capture_gate::this_thread_captures() {
            if let Ok(_no_capture) = Exclusive::take_after_releases(Duration::ZERO, None) {
                return release_guarded(parked);
            }
        }
        self.retire(Point::None, vec![parked]);
    }

    /// Retires `parked`: released once `point` has passed (or the context was synchronized
    /// after this call), on the release thread, in `poll` or in `synchronize`; never here.
    pub(crate) fn retire(&self, point: Point, parked: Vec<Parked>) {
        // The exit hook must run before the exit handlers of the libraries this batch's release
        // may call into, all loaded by now.
        exit::arm();
        let mut state = self.shared.state.lock();
        if state.closed {
            let deadline = state.device_deadline;
            drop(state);
            return self.shared.release_in_place(point, parked, deadline);
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        state.entries.push_back(Entry { seq, point, parked });
        drop(state);
        self.start();
        self.shared.changed.notify_all();
    }

    /// Starts the release thread unless it was started. Instantiation calls this, so that the
    /// first drop of an exec does not pay for starting a thread; so does
    /// [`Tracker::release_later`], so that memory is freed there and not where it is dropped.
    pub(crate) fn start(&self) {
        let mut state = self.shared.state.lock();
        if state.started || state.closed {
            return;
        }
        state.started = true;
        // Running from now on: what is pushed meanwhile waits for the thread.
        state.running = true;
        drop(state);
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("graph-rt-release".into())
            .spawn(move || release_thread(&shared));
        match spawned {
            Ok(handle) => *self.shared.thread.lock() = Some(handle),
            // No thread: batches wait for `poll`, `synchronize`, a reclaim or teardown, and
            // memory is freed where it is dropped.
            Err(e) => {
                tracing::warn!(error = %e, "graph-rt: no release thread");
                self.shared.state.lock().running = false;
                self.shared.changed.notify_all();
            }
        }
    }

    /// Releases, on this thread, what the device is done with. Returns how many batches stay
    /// parked. The context must be current. Releases nothing while a global-mode capture of
    /// graph-rt runs (freeing memory would invalidate it), also when called inside one.
    pub(crate) fn poll(&self) -> usize {
        if let Some(_no_capture) = Exclusive::take(Duration::ZERO) {
            self.shared.release_round(None);
        }
        self.len()
    }

    /// The point `synchronized` releases up to: call before waiting for the context.
    pub(crate) fn mark(&self) -> u64 {
        self.shared.state.lock().next_seq
    }

    /// After the context was synchronized: releases every batch parked before `mark` (and what
    /// their release hands back), waiting for what the release thread is releasing. The
    /// context must be current.
    pub(crate) fn synchronized(&self, mark: u64) -> usize {
        if let Some(_no_capture) = Exclusive::take(Duration::ZERO) {
            self.shared.release_round(Some(mark));
        }
        let mut state = self.shared.state.lock();
        // A thread releasing (this one, further up) would wait for itself.
        if !on_release_thread() && !releasing() {
            while state.in_progress > 0 {
                self.shared.changed.wait(&mut state);
            }
        }
        drop(state);
        // The release thread takes the lock for each round of its own (short once nothing is
        // being released): a moment's patience gets it between two; a capture keeps it longer.
        if let Some(_no_capture) = Exclusive::take(Duration::from_millis(10)) {
            self.shared.release_round(Some(mark));
        }
        self.len()
    }

    /// After an allocation failed for lack of memory: has the release thread wait for the
    /// points of everything parked so far and release it (with what that release frees in
    /// turn), and for what other threads are releasing (up to a second), and waits until it
    /// has, for at most [`DEVICE_PATIENCE`] (work that never ends, such as a collective whose
    /// peer died, holds its memory past any wait). Returns whether anything was parked and
    /// released, i.e. whether retrying the allocation may succeed. Waits for nothing, and
    /// returns [`Reclaim::Nothing`], on a release thread, while this thread releases, and while a
    /// global-mode capture of graph-rt runs (perhaps on this thread: freeing memory would
    /// invalidate it). Without a release thread, releases on this thread what has passed,
    /// without waiting. The context must be current.
    pub(crate) fn reclaim(&self) -> Reclaim {
        self.reclaim_within(DEVICE_PATIENCE)
    }

    /// [`Tracker::reclaim`], waiting at most `patience` for the device.
    pub(crate) fn reclaim_within(&self, patience: Duration) -> Reclaim {
        if on_release_thread() || releasing() || self.parked() == 0 || capturing() {
            return Reclaim::Nothing;
        }
        let mut state = self.shared.state.lock();
        if !state.running || state.closed {
            drop(state);
            self.poll();
            return Reclaim::Released;
        }
        state.drain_ticket += 1;
        let ticket = state.drain_ticket;
        state.drain_mark = state.next_seq;
        self.shared.changed.notify_all();
        let deadline = Instant::now() + patience;
        while state.drained < ticket && state.running && !state.closed {
            if Instant::now() >= deadline {
                return Reclaim::TimedOut(patience);
            }
            self.shared.changed.wait_until(&mut state, deadline);
        }
        drop(state);
        self.shared.reclaims.fetch_add(1, Ordering::Relaxed);
        Reclaim::Released
    }

    /// Teardown, with nothing of the context left in use (nothing parked holds it any more):
    /// stops the release thread, then releases what is still parked, waiting for its points.
    pub(crate) fn teardown(&self) {
        self.shared.close();
        if let Some(handle) = self.shared.thread.lock().take() {
            // The context may be torn down by the release thread itself, dropping the last
            // batch that held it: it cannot wait for itself, and stops once that release
            // returns; the exit hook joins it if the process ends first.
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            } else {
                exit::leave_unjoined(handle);
            }
        }
        self.shared.release_everything(TEARDOWN_PATIENCE, None);
    }

    /// How many batches are parked (not counting those being released).
    pub(crate) fn len(&self) -> usize {
        self.shared.state.lock().entries.len()
    }

    /// How many batches are parked or being released.
    pub(crate) fn parked(&self) -> usize {
        let state = self.shared.state.lock();
        state.entries.len() + state.in_progress
    }

    /// How many reclaims the release thread has served.
    #[cfg(test)]
    pub(crate) fn reclaims(&self) -> usize {
        self.shared.reclaims.load(Ordering::Relaxed)
    }

    /// A watch on this queue and its thread.
    #[cfg(test)]
    pub(crate) fn watch(&self) -> QueueWatch {
        QueueWatch(Arc::downgrade(&self.shared))
    }

    /// What the exit hook does to every queue, for this one alone (for tests): the release
    /// thread releases everything parked, waiting for the points, and stops. The queue stays
    /// closed: what is parked later is released where it is parked.
    #[cfg(test)]
    pub(crate) fn close_as_at_exit(&self) {
        exit::close(&self.shared);
    }

    /// Registers the exit hook again now, after a library that parked releases call into may
    /// have registered exit handlers of its own without loading anything (cuBLAS on its first
    /// handle and its first GEMM): the hook must run before them.
    pub(crate) fn arm_exit_hook_again(&self) {
        exit::arm_now();
    }
}

impl Drop for Tracker {
    /// Tears the queue down if its owner did not (a no-op after [`Tracker::teardown`]).
    fn drop(&mut self) {
        self.teardown();
    }
}

impl Shared {
    /// Makes the queue's context current on this thread (not in CPU tests: no context).
    fn make_current(&self) {
        if self.ctx != 0 {
            // SAFETY: the context is alive while batches that hold it are parked, and the
            // callers only release with batches parked.
            let _ = unsafe { graph_rt_sys::cuCtxSetCurrent(self.ctx as CUcontext) };
        }
    }

    /// Puts this thread, one that graph-rt started for the queue, in relaxed stream-capture
    /// interaction mode (`cuThreadExchangeStreamCaptureMode`): in the default (global) mode, a
    /// capture in global mode that graph-rt does not see (another library's) would have the
    /// driver refuse this thread's event queries and frees, and each refusal breaks that
    /// capture. Not in CPU tests (no context).
    fn relax_capture_interaction(&self) {
        if self.ctx == 0 {
            return;
        }
        let mut mode = graph_rt_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a valid in/out pointer; the call changes this thread's mode only.
        if let Err(e) = unsafe { cu!(cuThreadExchangeStreamCaptureMode(&mut mode)) } {
            tracing::warn!(error = %e, "graph-rt: a release thread stays in the global capture interaction mode: another library's global-mode capture may refuse (and lose) its calls");
        }
    }

    /// Releases what may be released now (points passed, or parked before `idle_before` when
    /// the context has been synchronized since), and what those releases park in turn, until
    /// nothing more is ready. The caller holds [`Exclusive`]. Returns how many batches it
    /// released.
    fn release_round(&self, idle_before: Option<u64>) -> usize {
        let mut total = 0;
        loop {
            let done = {
                let mut state = self.state.lock();
                let done = take_ready(&mut state.entries, idle_before);
                state.in_progress += done.len();
                done
            };
            if done.is_empty() {
                return total;
            }
            let n = done.len();
            release(done);
            self.state.lock().in_progress -= n;
            self.changed.notify_all();
            total += n;
        }
    }

    /// Closes the queue: the release thread stops after what it is releasing, and what is
    /// parked from now on is released where it is parked.
    fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
    }

    /// Closes the queue at process exit: the release thread, if it runs (and unless it is the
    /// calling thread, or `hand` is false), releases everything parked before it stops, waiting
    /// for the points until `deadline`. Returns whether it will.
    fn close_for_exit(&self, deadline: Instant, hand: bool) -> bool {
        let mut state = self.state.lock();
        state.closed = true;
        state.device_deadline = Some(deadline);
        let handed = hand && state.running && !is_release_thread_of(self);
        if handed {
            state.exit_deadline = Some(deadline);
        }
        drop(state);
        self.changed.notify_all();
        handed
    }

    /// After `close`, with the thread stopped (or on the thread itself, at exit): releases
    /// every batch, waiting for its point first (until `device_deadline`, if any: at exit), in
    /// parking order; batches whose point did not pass (a capture that has not ended, work past
    /// the deadline) are leaked. The points are waited for without [`CAPTURE_LOCK`], which is
    /// taken for each run of batches that are ready: other threads' releases (other contexts
    /// at exit) are waited for (until `device_deadline`), graph-rt's global-mode captures up to
    /// `patience`; if one still runs, everything left is leaked.
    fn release_everything(&self, patience: Duration, device_deadline: Option<Instant>) {
        let at_exit = device_deadline.is_some();
        loop {
            let Some(mut first) = self.state.lock().entries.pop_front() else {
                return;
            };
            // Waiting, and recording the event of a point whose capture has ended, need the
            // context (a parked drop may have made another one current).
            self.make_current();
            if !wait_for(&mut first.point, device_deadline) {
                self.leak_unpassed(first, at_exit);
                continue;
            }
            // And the batches after it whose points have passed meanwhile.
            let mut ready = vec![first];
            {
                let mut state = self.state.lock();
                while let Some(e) = state.entries.front_mut() {
                    e.point.refresh();
                    if !e.point.passed() {
                        break;
                    }
                    ready.extend(state.entries.pop_front());
                }
            }
            let _no_capture = match Exclusive::take_after_releases(patience, device_deadline) {
                Ok(exclusive) => exclusive,
                Err(blocked) => {
                    // Leaked, not dropped with the queue later: freeing would invalidate the
                    // capture (or the releases holding the lock went past the exit's deadline).
                    let rest = std::mem::take(&mut self.state.lock().entries);
                    let n = ready.len() + rest.len();
                    if at_exit {
                        self.exit_leaked.fetch_add(n, Ordering::Relaxed);
                    }
                    match blocked {
                        Blocked::Capture => tracing::warn!("graph-rt: a capture runs while a context's parked batches are released at teardown or exit: leaking {n} batches"),
                        Blocked::Releases => tracing::warn!("graph-rt: other releases held the capture lock past the exit's deadline: leaking {n} batches"),
                    }
                    std::mem::forget(ready);
                    return std::mem::forget(rest);
                }
            };
            self.make_current();
            let n = ready.len();
            release(ready);
            if at_exit {
                self.exit_released.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Leaks a batch whose point has not passed (in [`Shared::release_everything`]).
    fn leak_unpassed(&self, e: Entry, at_exit: bool) {
        if at_exit {
            tracing::warn!("graph-rt: the device still uses a parked batch at exit: leaking it");
            self.exit_leaked.fetch_add(1, Ordering::Relaxed);
        } else {
            tracing::warn!(
                "graph-rt: a batch whose point has not passed (a capture that has not ended, or an event whose wait stays refused) is leaked"
            );
        }
        std::mem::forget(e.parked);
    }

    /// Releases a batch parked on the closed queue, on this thread, once its point has passed
    /// (waiting for it until `device_deadline`, if any: at exit), holding [`CAPTURE_LOCK`]
    /// (taken after the wait, as [`Shared::release_everything`] takes it). One whose stream
    /// still captures, whose point has not passed by the deadline, or that a global-mode
    /// capture of graph-rt keeps from being freed, is leaked: nothing can tell when the device
    /// stops using it, or freeing it would invalidate the capture.
    fn release_in_place(&self, mut point: Point, parked: Vec<Parked>, deadline: Option<Instant>) {
        let at_exit = deadline.is_some();
        if !wait_for(&mut point, deadline) {
            return self.leak_unpassed(
                Entry {
                    seq: 0,
                    point,
                    parked,
                },
                at_exit,
            );
        }
        let patience = if at_exit {
            exit::CAPTURE_PATIENCE
        } else {
            TEARDOWN_PATIENCE
        };
        let _no_capture = match Exclusive::take_after_releases(patience, deadline) {
            Ok(exclusive) => exclusive,
            Err(blocked) => {
                if at_exit {
                    self.exit_leaked.fetch_add(1, Ordering::Relaxed);
                }
                match blocked {
                    Blocked::Capture => tracing::warn!("graph-rt: a capture runs while a batch parked on a closed context is released: leaking it"),
                    Blocked::Releases => tracing::warn!("graph-rt: other releases held the capture lock past the exit's deadline: leaking a batch"),
                }
                return std::mem::forget(parked);
            }
        };
        drop(point);
        parked.into_iter().for_each(release_guarded);
        if at_exit {
            self.exit_released.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Waits for `point` to pass, until `deadline` if any. Returns false when it has not passed
/// then, or cannot be waited for (a capture still running).
fn wait_for(point: &mut Point, deadline: Option<Instant>) -> bool {
    match deadline {
        Some(deadline) => point.wait_until(deadline),
        None => point.wait(),
    }
}

/// Takes the entries that may be released now (points passed, or parked before
/// `idle_before`), keeping the others in order. Points of captures that have ended become
/// events first.
fn take_ready(entries: &mut VecDeque<Entry>, idle_before: Option<u64>) -> Vec<Entry> {
    let mut done = Vec::new();
    let mut i = 0;
    while i < entries.len() {
        let e = &mut entries[i];
        e.point.refresh();
        let idle = idle_before.is_some_and(|m| e.seq < m) && !e.point.is_capturing();
        if idle || e.point.passed() {
            done.extend(entries.remove(i));
        } else {
            i += 1;
        }
    }
    done
}

/// Drops released batches, each point first (outside the state lock: a parked drop may park
/// again).
fn release(done: Vec<Entry>) {
    for e in done {
        drop(e.point);
        e.parked.into_iter().for_each(release_guarded);
    }
}

/// Drops `parked`; a panic in its drop is logged, never unwinds into the release machinery.
fn release_guarded(parked: Parked) {
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(parked)));
    if dropped.is_err() {
        tracing::error!("graph-rt: a parked resource panicked while being released");
    }
}
