//! The end of the process: a hook registered with `atexit` has every live context's release
//! thread release what is still parked on it and stop, before the libraries whose objects are
//! parked (cuBLAS) and the driver tear themselves down.
//!
//! Exit handlers run newest first, and a library registers its own (C++ static destructors,
//! the CUDA runtime linked into cuBLAS) when it is loaded, or later, when it first initialises
//! something. The hook is registered when the first queue is made, after the driver was loaded,
//! registered again whenever a batch is parked after more libraries were loaded (the loader's
//! count of loaded objects, `dl_iterate_phdr`), and registered again by cuBLAS after its first
//! handle and its first GEMM ([`arm_now`]), so that it runs before the exit handlers of every
//! library a parked batch's release calls into. The newest registration does the work, the others
//! find it done. Without the hook the release threads would still be calling into the driver
//! while it is torn down, and whatever was parked would never be freed.
//!
//! The releasing is done by each queue's release thread, never by the thread that runs the hook
//! (the one that called `exit`, or returned from `main`): glibc destroys that thread's
//! thread-locals before it runs the exit handlers, so a parked drop run there finds the thread
//! half torn down (Rust's own thread-locals, and those of the libraries it calls into: the CUDA
//! runtime inside cuBLAS keeps per-thread state), while the release thread is whole until the hook
//! has waited for it. All release threads work at once: each waits for the device without the lock
//! that releasing takes, and takes it only to release what is ready, so that none keeps the others
//! (or graph-rt's captures) waiting for its points, and each waits for the others' releases rather
//! than give up on them. Where a queue has no release thread (it could not be started, or the hook
//! runs on it), a thread started for the purpose does it, or, failing that, the hook's own.
//!
//! A thread that has returned from its work has not ended yet: its thread-local destructors still
//! run, the driver's per-thread state among them, and must not meet the driver's own teardown (a
//! fault at exit, seen once under racecheck). So the hook joins every thread graph-rt started
//! before it returns: each live queue's release thread once it has stopped, a release thread that
//! tore its own context down (it could not join itself: [`leave_unjoined`]), and the thread it
//! starts to release elsewhere.
//!
//! The hook may run on any thread (`std::process::exit` from a worker), while other threads still
//! use graph-rt, and while a capture runs: it waits a bounded time for the device to finish with
//! what is parked and for each thread to stop, and releases nothing while a global-mode capture
//! of graph-rt runs (freeing memory would fail and invalidate it; the process ends anyway).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{releasing, Shared};

/// Every queue made so far, held weakly (a queue goes with its context and thread).
static LIVE: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());
/// The loader's count of objects loaded when the hook was last registered (0: never); taken
/// while registering.
static ARMED_AT: Mutex<u64> = Mutex::new(0);
/// The same count, read without the lock on the park path.
static ARMED_AT_FAST: AtomicU64 = AtomicU64::new(0);
/// The hook has run (its older registrations then do nothing).
static RAN: AtomicBool = AtomicBool::new(false);
/// Release threads that tore their own context down, for the hook to join (see
/// [`leave_unjoined`]).
static UNJOINED: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// How long the hook waits, past [`DEVICE_PATIENCE`], for the release threads to finish
/// releasing and stop.
const THREAD_PATIENCE: Duration = Duration::from_secs(10);
/// How long the releasing waits for graph-rt's global-mode captures to end.
pub(crate) const CAPTURE_PATIENCE: Duration = Duration::from_millis(200);
/// How long it waits for the device to finish with what is parked (a launch that never ends
/// must not hang the exit: what it uses is leaked).
const DEVICE_PATIENCE: Duration = Duration::from_secs(30);

/// Keeps `handle`, a release thread whose context was torn down on it (it stops once that
/// release returns), for the hook to join, and joins those kept before that have ended.
pub(super) fn leave_unjoined(handle: JoinHandle<()>) {
    let ended: Vec<JoinHandle<()>> = {
        let mut kept = UNJOINED.lock();
        let (ended, running) = kept.drain(..).partition(|h| h.is_finished());
        *kept = running;
        kept.push(handle);
        ended
    };
    for h in ended {
        let _ = h.join();
    }
}

/// Joins `handle` once its thread has returned from its work, waiting until `until` at most
/// (then it is left running); not the calling thread. Returns whether it was joined.
fn join_by(handle: JoinHandle<()>, until: Instant) -> bool {
    if handle.thread().id() == std::thread::current().id() {
        return false;
    }
    while !handle.is_finished() {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    // Returned: `join` waits for the thread-local destructors that remain.
    let _ = handle.join();
    true
}

/// Registers a new queue, and the exit hook unless it is registered after every library loaded
/// so far.
pub(super) fn register(shared: &Arc<Shared>) {
    arm();
    let mut live = LIVE.lock();
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(shared));
}

/// Registers the exit hook (again) if libraries were loaded since it last was. Cheap when
/// none was: one call into the loader, which stops at its first object.
pub(super) fn arm() {
    let loaded = loaded_objects();
    let armed = ARMED_AT_FAST.load(Ordering::Acquire);
    if armed != 0 && loaded.is_none_or(|n| n == armed) {
        return;
    }
    let mut armed = ARMED_AT.lock();
    if *armed != 0 && loaded.is_none_or(|n| n == *armed) {
        return;
    }
    register_hook(&mut armed, loaded);
}

/// Registers the exit hook again, whether or not libraries were loaded since it last was: after
/// a library registered exit handlers without loading anything (cuBLAS, on its first handle and
/// its first GEMM; a few times a process, since each registration stays until exit).
pub(super) fn arm_now() {
    let loaded = loaded_objects();
    register_hook(&mut ARMED_AT.lock(), loaded);
}

fn register_hook(armed: &mut u64, loaded: Option<u64>) {
    // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds (it catches panics).
    if unsafe { libc::atexit(at_exit) } != 0 {
        tracing::warn!(
            "graph-rt: atexit refused the exit hook: parked batches may not be released at exit"
        );
    }
    *armed = loaded.unwrap_or(u64::MAX).max(1);
    ARMED_AT_FAST.store(*armed, Ordering::Release);
}

/// How many objects the dynamic loader has loaded since the process started (`dlpi_adds`), or
/// `None` where it does not say.
#[cfg(target_os = "linux")]
pub(super) fn loaded_objects() -> Option<u64> {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        let end = std::mem::offset_of!(libc::dl_phdr_info, dlpi_adds) + 8;
        if size >= end {
            // SAFETY: the loader passes a valid `dl_phdr_info` of `size` bytes, which holds
            // `dlpi_adds`; `data` is the `u64` below.
            unsafe { *data.cast::<u64>() = (*info).dlpi_adds };
        }
        // Stop at the first object: the count is the same in every one.
        1
    }
    let mut adds = 0u64;
    // SAFETY: `first` matches the callback's C signature and writes only `adds`.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut adds as *mut u64).cast()) };
    (adds != 0).then_some(adds)
}

#[cfg(not(target_os = "linux"))]
pub(super) fn loaded_objects() -> Option<u64> {
    None
}

/// Whether the exit hook has begun (the process is exiting): waits shorten to its patience.
pub(crate) fn exiting() -> bool {
    RAN.load(Ordering::Acquire)
}

/// The loader's count when the hook was last registered (for tests).
#[cfg(all(test, not(loom)))]
pub(super) fn armed_at() -> u64 {
    *ARMED_AT.lock()
}

extern "C" fn at_exit() {
    if RAN.swap(true, Ordering::AcqRel) {
        return;
    }
    // A panic must not unwind into libc.
    let _ = std::panic::catch_unwind(close_all);
}

/// Closes every live queue: has its release thread release what is parked on it and stop, all
/// threads at once, and waits for them.
fn close_all() {
    // Bounded: the exiting thread may have been stopped while registering a queue.
    let Some(live) = LIVE.try_lock_for(Duration::from_millis(100)) else {
        return;
    };
    let queues: Vec<Arc<Shared>> = live.iter().filter_map(Weak::upgrade).collect();
    drop(live);
    if queues.is_empty() {
        return;
    }
    close_queues(&queues);
}

/// What the hook does to `queues`: has each one's release thread release what is parked on it
/// and stop, all threads at once, and waits for them.
pub(super) fn close_queues(queues: &[Arc<Shared>]) {
    let parked: usize = queues
        .iter()
        .map(|q| {
            let state = q.state.lock();
            state.entries.len() + state.in_progress
        })
        .sum();
    if parked > 0 {
        tracing::debug!(
            "graph-rt: exit hook: releasing {parked} batches parked on {} contexts",
            queues.len()
        );
    }
    let deadline = Instant::now() + DEVICE_PATIENCE;
    // A thread that exits while it releases (from inside a parked drop) holds the lock every
    // release takes: the release threads would wait for it in vain, so it releases everything.
    let hand = !releasing();
    let handed: Vec<bool> = queues
        .iter()
        .map(|q| q.close_for_exit(deadline, hand))
        .collect();
    // Each release makes its context current on its thread; the context that was current on
    // this one may be gone with the last batch that held it, and the process ends.
    for (shared, handed) in queues.iter().zip(handed) {
        finish(shared, handed, deadline);
    }
    let patience = deadline + THREAD_PATIENCE;
    let threads = queues
        .iter()
        .filter_map(|q| q.thread.lock().take())
        .chain(std::mem::take(&mut *UNJOINED.lock()));
    for handle in threads {
        if !join_by(handle, patience) {
            tracing::warn!("graph-rt: a release thread did not end at exit");
        }
    }
    if parked > 0 {
        let count = |c: fn(&Shared) -> &std::sync::atomic::AtomicUsize| -> usize {
            queues.iter().map(|q| c(q).load(Ordering::Relaxed)).sum()
        };
        tracing::debug!(
            released = count(|q| &q.exit_released),
            leaked = count(|q| &q.exit_leaked),
            "graph-rt: exit hook: done"
        );
    }
}

/// What the hook does to one queue: its release thread releases everything parked, waiting for
/// the points, and stops (for tests).
#[cfg(test)]
pub(super) fn close(shared: &Arc<Shared>) {
    close_queues(std::slice::from_ref(shared));
}

/// After [`Shared::close_for_exit`]: waits for the release thread (if `handed` the work) to
/// release and stop, up to `deadline` and [`THREAD_PATIENCE`] past it, then releases what is
/// left (what nobody released: no release thread ran, or the hook runs on it) elsewhere.
fn finish(shared: &Arc<Shared>, handed: bool, deadline: Instant) {
    if handed {
        let mut state = shared.state.lock();
        while state.running {
            if shared
                .changed
                .wait_until(&mut state, deadline + THREAD_PATIENCE)
                .timed_out()
            {
                tracing::warn!(
                    "graph-rt: a release thread did not stop at exit: leaving what it holds"
                );
                return;
            }
        }
    }
    release_elsewhere(shared, deadline);
}

/// Releases what is still parked on `shared` on a thread started for it, waiting for it as long
/// as [`finish`] waits for a release thread: not on this one, whose thread-locals are gone
/// (see the module's documentation). On this one where no thread can be started, or where this
/// thread is releasing (it holds the lock that releasing takes).
fn release_elsewhere(shared: &Arc<Shared>, deadline: Instant) {
    if shared.state.lock().entries.is_empty() {
        return;
    }
    let here = || shared.release_everything(CAPTURE_PATIENCE, Some(deadline));
    if releasing() {
        return here();
    }
    let theirs = shared.clone();
    // Starting a thread inside an exit handler may fail, or panic in std's bookkeeping of the
    // exiting thread: then the releasing is done here.
    let spawned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        std::thread::Builder::new()
            .name("graph-rt-exit".into())
            .spawn(move || {
                theirs.relax_capture_interaction();
                theirs.release_everything(CAPTURE_PATIENCE, Some(deadline))
            })
    }));
    match spawned {
        Ok(Ok(handle)) => {
            if !join_by(handle, deadline + THREAD_PATIENCE) {
                tracing::warn!(
                    "graph-rt: the releasing at exit did not finish: leaving what it holds"
                );
            }
        }
        _ => here(),
    }
}
