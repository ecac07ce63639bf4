//! A table's launches as a timeline for the context's lifetime tracker: what a table replaced
//! is retired behind a count of its launches, passed once the acknowledgements the table reads
//! on its launch path (or its stream seen idle) show that those launches have finished — no
//! event per launch, no driver call, not even a read of device-written memory to check. The
//! table's drop ends the timeline with a point after its last launch, so what it retired never
//! waits for launches that will not come.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::ledger::finished_by;
use crate::driver::{Point, Progress};

pub(super) struct Timeline {
    // Launches below this are known finished: from an acknowledgement the table read on its
    // launch path, or its stream seen idle.
    known: AtomicU64,
    // After the table's last launch: set by its drop (`ended` says so without the lock).
    end: Mutex<Option<Point>>,
    ended: AtomicBool,
}

impl Timeline {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            known: AtomicU64::new(0),
            end: Mutex::new(None),
            ended: AtomicBool::new(false),
        })
    }

    /// Every one of the `n` launches made has finished.
    pub(super) fn idle(&self, n: u64) {
        self.known.fetch_max(n, Ordering::AcqRel);
    }

    /// The table read acknowledgement `ack` (checked against its launch count: see
    /// `ArgTable::latest_ack`).
    #[inline]
    pub(super) fn seen(&self, ack: u64) {
        self.known.fetch_max(finished_by(ack), Ordering::AcqRel);
    }

    /// The table is gone: `point` follows its last launch.
    pub(super) fn end(&self, point: Point) {
        *self.end.lock() = Some(point);
        self.ended.store(true, Ordering::Release);
    }
}

impl Progress for Timeline {
    fn reached(&self, at: u64) -> bool {
        self.known.load(Ordering::Acquire) >= at
            || self.ended.load(Ordering::Acquire)
                && self.end.lock().as_ref().is_some_and(Point::passed)
    }
}
