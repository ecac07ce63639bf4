//! The lock between releasing and capturing: freeing memory is forbidden in every thread while a
//! stream capture in global mode runs, so graph-rt's global-mode captures hold [`CAPTURE_LOCK`]
//! shared and a releasing thread holds it exclusively (never while it waits for the device).

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::driver::sync::{
    pause, thread_local, AtomicUsize, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

/// Held shared by graph-rt's global-mode captures, exclusively by a thread releasing.
#[cfg(not(loom))]
pub(super) static CAPTURE_LOCK: RwLock<()> = RwLock::new(());

/// How many threads hold [`CAPTURE_LOCK`] exclusively to release (0 or 1), as opposed to the
/// captures that hold it shared: a release waits for other releases, and gives up only on a
/// capture.
#[cfg(not(loom))]
pub(super) static RELEASES: AtomicUsize = AtomicUsize::new(0);

#[cfg(loom)]
loom::lazy_static! {
    pub(super) static ref CAPTURE_LOCK: RwLock<()> = RwLock::new(());
    pub(super) static ref RELEASES: AtomicUsize = AtomicUsize::new(0);
}

thread_local! {
    /// Whether this thread holds [`CAPTURE_LOCK`] exclusively (it is releasing): a teardown
    /// that a release runs must not wait for the lock it holds.
    static RELEASING: Cell<bool> = const { Cell::new(false) };
}

/// A share of [`CAPTURE_LOCK`] for a global-mode capture (re-entrant: captures may nest).
pub(crate) fn capture_lock() -> RwLockReadGuard<'static, ()> {
    CAPTURE_LOCK.read_recursive()
}

pub(super) fn releasing() -> bool {
    RELEASING.try_with(Cell::get).unwrap_or(false)
}

/// Whether a global-mode capture of graph-rt runs (perhaps on this thread), as opposed to a
/// thread releasing (which holds the lock too, briefly).
pub(super) fn capturing() -> bool {
    loop {
        if CAPTURE_LOCK.try_write().is_some() {
            return false;
        }
        // Shared holders are captures.
        if CAPTURE_LOCK.is_locked() && !CAPTURE_LOCK.is_locked_exclusive() {
            return true;
        }
        // A release holds it: look again once it is done.
        pause(Duration::from_micros(50));
    }
}

/// [`CAPTURE_LOCK`] held exclusively by this thread, or already held by it further up.
pub(super) struct Exclusive(Option<RwLockWriteGuard<'static, ()>>);

/// Why [`Exclusive::take_after_releases`] gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Blocked {
    /// A global-mode capture of graph-rt still ran after the patience.
    Capture,
    /// Releases on other threads still held the lock at the deadline.
    Releases,
}

impl Exclusive {
    /// Waits up to `patience` for graph-rt's global-mode captures to end (and for releases on
    /// other threads meanwhile).
    pub(super) fn take(patience: Duration) -> Option<Self> {
        if releasing() {
            return Some(Self(None));
        }
        let guard = CAPTURE_LOCK.try_write_for(patience)?;
        let _ = RELEASING.try_with(|r| r.set(true));
        RELEASES.fetch_add(1, Ordering::AcqRel);
        Some(Self(Some(guard)))
    }

    /// Waits as long as releases on other threads hold the lock (until `deadline`, if any:
    /// they take it a batch at a time, and never wait for the device with it), and up to
    /// `patience` in all for graph-rt's global-mode captures to end.
    pub(super) fn take_after_releases(
        patience: Duration,
        deadline: Option<Instant>,
    ) -> Result<Self, Blocked> {
        let start = Instant::now();
        loop {
            if let Some(exclusive) = Self::take(Duration::from_millis(1)) {
                return Ok(exclusive);
            }
            let now = Instant::now();
            if RELEASES.load(Ordering::Acquire) > 0 {
                if deadline.is_some_and(|d| now >= d) {
                    return Err(Blocked::Releases);
                }
            } else if now.duration_since(start) >= patience {
                return Err(Blocked::Capture);
            }
        }
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        if self.0.is_some() {
            RELEASES.fetch_sub(1, Ordering::AcqRel);
            let _ = RELEASING.try_with(|r| r.set(false));
        }
    }
}
