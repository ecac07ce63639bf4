//! The ring of mirrors, seen from the host: waiting for a mirror's acknowledgement, counting
//! launches, releasing replaced bindings once acknowledged, and what a dropped table parks.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::table::ArgTable;
use crate::driver::{Parked, Stream};
use crate::error::{Error, Result};
use crate::resource::Resource;

impl ArgTable {
    /// Spins until acknowledgement word `mirror` reaches `at_least`, checking the stream for
    /// errors meanwhile; returns the word.
    pub(super) fn wait_ack(
        &mut self,
        mirror: usize,
        at_least: u64,
        stream: &Stream,
    ) -> Result<u64> {
        let ack = |t: &Self| t.shared.acks.read(mirror).unwrap_or(0);
        // The mirror's acknowledgement is its last launch's number + 1: `at_least` once that
        // launch refreshed, an earlier one before. More means the device refreshed the table
        // more often than the host launched through it: refuse, rather than release bindings
        // early on that count.
        let ahead = |v: u64| {
            Error::invalid(
                "ArgTable::launch",
                format!("the device acknowledged refresh {v} of a mirror the host expected at {at_least}: the table's refresh ran outside ArgTable::launch (a graph holding it launched another way)"),
            )
        };
        let first = ack(self);
        if first > at_least {
            return Err(ahead(first));
        }
        if first == at_least {
            // Writes to the mirror below happen after the device's acknowledgement of its
            // reads.
            std::sync::atomic::fence(Ordering::Acquire);
            return Ok(first);
        }
        self.stats.waits += 1;
        let start = std::time::Instant::now();
        let mut spins = 0u32;
        loop {
            let v = ack(self);
            if v > at_least {
                return Err(ahead(v));
            }
            if v == at_least {
                std::sync::atomic::fence(Ordering::Acquire);
                return Ok(v);
            }
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                // A failed launch never acknowledges: surface its error instead of spinning.
                if stream.is_idle()? && ack(self) < at_least {
                    return Err(Error::invalid(
                        "ArgTable::launch",
                        "the stream is idle but the launch that reads this mirror never acknowledged it: was a graph that refreshes the table launched another way?",
                    ));
                }
                if start.elapsed() > std::time::Duration::from_secs(60) {
                    return Err(Error::invalid(
                        "ArgTable::launch",
                        "no acknowledgement from the device for 60 s",
                    ));
                }
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    }

    /// After a launch: counts it and releases the bindings replaced before launches whose
    /// refresh has run (known from the acknowledgement read before reusing a mirror: no extra
    /// read of device-written memory on the launch path).
    pub(super) fn launched(&mut self) {
        self.next_seq += 1;
        self.stats.launches += 1;
        self.release_finished();
    }

    fn release_finished(&mut self) {
        // Replaced at launch count `seq` (read by launches below `seq` only): free once the
        // refresh of launch `seq` has run, i.e. `done > seq`. `replaced` is in `seq` order.
        let free = self.replaced.partition_point(|(seq, _)| *seq < self.done);
        if free == 0 {
            return;
        }
        // Dropping the last reference frees device memory (a driver call): hand those to the
        // release thread, off the launch path; others only lose a count here.
        if self.replaced[..free]
            .iter()
            .any(|(_, r)| Arc::strong_count(r) == 1)
        {
            let batch: Vec<(u64, Resource)> = self.replaced.drain(..free).collect();
            self.ctx.inner.released.release_later(Box::new(batch));
        } else {
            self.replaced.drain(..free);
        }
    }

    /// Lets go of every slot's previous binding (kept so that rebinding a slot back to it costs
    /// no reference counting), and releases every replaced binding whose launches the device
    /// has acknowledged. A slot keeps its current binding and the one before it alive, and a
    /// replaced binding is otherwise released by a later launch that sees its acknowledgement;
    /// call this when buffers bound earlier should be freed while the table lives (after a
    /// synchronize, everything but the current bindings goes).
    pub fn trim(&mut self) {
        // What the device has acknowledged so far (the launch path reads only the one
        // acknowledgement it must wait for).
        let seen = (0..self.depth)
            .filter_map(|m| self.shared.acks.read(m))
            .max()
            .unwrap_or(0);
        self.done = self.done.max(seen.min(self.next_seq));
        for i in 0..self.keeps.len() {
            if let Some((until, r)) = self.keeps.drop_previous(i, self.next_seq) {
                self.replaced.push((until, r));
            }
        }
        self.release_finished();
    }
}

impl Drop for ArgTable {
    /// Never blocks: what launches may still read (the bindings, the table's memory) is parked
    /// on the context behind an event after the table's last launch.
    fn drop(&mut self) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        let parked: Vec<Parked> = vec![
            Box::new(std::mem::take(&mut self.keeps)),
            Box::new(std::mem::take(&mut self.replaced)),
            Box::new(self.shared.clone()),
        ];
        let inner = &self.ctx.inner;
        let r = match inner.bind() {
            Ok(()) => inner.released.park(&stream, parked),
            Err(e) => {
                std::mem::forget(parked);
                Err(e)
            }
        };
        inner.record(r);
    }
}
