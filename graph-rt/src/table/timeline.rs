//! A table's launches as a timeline for the context's lifetime tracker: what a table replaced
//! is retired behind a count of its launches, passed once the acknowledgements the table reads
//! on its launch path (or its stream seen idle) show that those launches have finished — no
//! event per launch, no driver call, not even a read of device-written memory to check. A
//! dropped table's lane is parked with the table behind its last launch, and lets go of what
//! it holds when released: nothing waits for launches that will not come.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::ledger::finished_by;
use crate::driver::Progress;

pub(super) struct Timeline {
    // Launches below this are known finished: from an acknowledgement the table read on its
    // launch path, or its stream seen idle.
    known: AtomicU64,
}

impl Timeline {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            known: AtomicU64::new(0),
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
}

impl Progress for Timeline {
    fn reached(&self, at: u64) -> bool {
        self.known.load(Ordering::Acquire) >= at
    }
}
