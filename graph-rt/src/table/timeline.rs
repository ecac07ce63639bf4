//! A table's launches as a timeline for the context's lifetime tracker: what a table replaced
//! is retired behind a count of its launches, passed once the device's acknowledgements show
//! that those launches have finished — no event per launch, no driver call to check (a read of
//! mapped memory). The table's drop ends the timeline with a point after its last launch, so
//! what it retired never waits for launches that will not come.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::ledger::finished_by;
use super::table::Shared;
use crate::driver::{Point, Progress};

pub(super) struct Timeline {
    shared: Arc<Shared>,
    depth: usize,
    // Launches made through the table: no acknowledgement above it counts (the table refuses a
    // refresh run outside its launches; its timeline never believes one).
    launched: AtomicU64,
    // Launches below this are known finished: from an acknowledgement the table read on its
    // launch path, or its stream seen idle.
    known: AtomicU64,
    // After the table's last launch: set by its drop.
    end: Mutex<Option<Point>>,
}

impl Timeline {
    pub(super) fn new(shared: &Arc<Shared>, depth: usize) -> Arc<Self> {
        Arc::new(Self {
            shared: shared.clone(),
            depth,
            launched: AtomicU64::new(0),
            known: AtomicU64::new(0),
            end: Mutex::new(None),
        })
    }

    /// `n` launches have been made.
    #[inline]
    pub(super) fn launched(&self, n: u64) {
        self.launched.store(n, Ordering::Release);
    }

    /// Every one of the `n` launches made has finished.
    pub(super) fn idle(&self, n: u64) {
        self.known.fetch_max(n, Ordering::AcqRel);
    }

    /// The table read acknowledgement `ack` (at most its launch count).
    #[inline]
    pub(super) fn seen(&self, ack: u64) {
        self.known.fetch_max(finished_by(ack), Ordering::AcqRel);
    }

    /// The table is gone: `point` follows its last launch.
    pub(super) fn end(&self, point: Point) {
        *self.end.lock() = Some(point);
    }

    /// How many launches the acknowledgements show finished, at most the launches made.
    pub(super) fn finished(&self) -> u64 {
        let launched = self.launched.load(Ordering::Acquire);
        let ack = (0..self.depth)
            .filter_map(|m| self.shared.acks.read(m))
            .max()
            .unwrap_or(0);
        finished_by(ack.min(launched))
    }
}

impl Progress for Timeline {
    fn reached(&self, at: u64) -> bool {
        if self.known.load(Ordering::Acquire) >= at {
            return true;
        }
        let finished = self.finished();
        self.known.fetch_max(finished, Ordering::AcqRel);
        finished >= at || self.end.lock().as_ref().is_some_and(Point::passed)
    }
}
