//! The end of the process: a hook registered with `atexit` stops every live context's release
//! thread and releases what is still parked on it, before the driver tears itself down.
//!
//! Exit handlers run newest first, and a library registers its own (C++ static destructors,
//! the CUDA runtime linked into cuBLAS) when it is loaded. The hook is registered when the first
//! queue is made, after the driver was loaded, and registered again whenever a batch is parked
//! after more libraries were loaded (the loader's count of loaded objects, `dl_iterate_phdr`), so
//! that it runs before the exit handlers of every library a parked batch's release calls into
//! (cuBLAS, whose handles are parked). The newest registration does the work, the others find
//! it done. Without the hook the release threads would still be calling into the driver while it
//! is torn down, and whatever was parked would never be freed.
//!
//! The hook may run on any thread (`std::process::exit` from a worker), while other threads still
//! use graph-rt, and while a capture runs: it waits a bounded time for each thread to stop and for
//! the device to finish with what is parked, and releases nothing while a global-mode capture of
//! graph-rt runs (freeing memory would fail and invalidate it; the process ends anyway).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{is_release_thread_of, Shared};

/// Every queue made so far, held weakly (a queue goes with its context and thread).
static LIVE: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());
/// The loader's count of objects loaded when the hook was last registered (0: never); taken
/// while registering.
static ARMED_AT: Mutex<u64> = Mutex::new(0);
/// The same count, read without the lock on the park path.
static ARMED_AT_FAST: AtomicU64 = AtomicU64::new(0);
/// The hook has run (its older registrations then do nothing).
static RAN: AtomicBool = AtomicBool::new(false);

/// How long the hook waits for one release thread to finish what it is releasing.
const THREAD_PATIENCE: Duration = Duration::from_secs(10);
/// How long it waits for graph-rt's global-mode captures to end before releasing.
const CAPTURE_PATIENCE: Duration = Duration::from_millis(200);
/// How long it waits for the device to finish with what is parked (a launch that never ends
/// must not hang the exit: what it uses is leaked).
const DEVICE_PATIENCE: Duration = Duration::from_secs(30);

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

/// The loader's count when the hook was last registered (for tests).
#[cfg(test)]
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

/// Closes every live queue: stops its thread and releases what is parked on it.
fn close_all() {
    // Bounded: the exiting thread may have been stopped while registering a queue.
    let Some(live) = LIVE.try_lock_for(Duration::from_millis(100)) else {
        return;
    };
    let queues: Vec<Arc<Shared>> = live.iter().filter_map(Weak::upgrade).collect();
    drop(live);
    // Each release makes its context current on this thread, which is left so: the process
    // ends, and the context that was current may be gone with the last batch that held it.
    for shared in queues {
        close(&shared);
    }
}

/// Stops the queue's release thread (unless the hook runs on it), waiting up to
/// [`THREAD_PATIENCE`] for it, then releases everything parked.
pub(super) fn close(shared: &Shared) {
    shared.close();
    if !is_release_thread_of(shared) {
        let deadline = Instant::now() + THREAD_PATIENCE;
        let mut state = shared.state.lock();
        while state.running {
            if shared.changed.wait_until(&mut state, deadline).timed_out() {
                tracing::warn!(
                    "graph-rt: a release thread did not stop at exit: leaving what it holds"
                );
                return;
            }
        }
    }
    shared.release_everything(CAPTURE_PATIENCE, Some(Instant::now() + DEVICE_PATIENCE));
}
