//! The ring of mirrors, seen from the host: waiting for a mirror's acknowledgement, counting
//! launches, releasing replaced bindings once acknowledged, and what a dropped table parks.

use std::sync::atomic::Ordering;

use super::table::ArgTable;
use std::sync::Arc;

use super::ledger::Replaced;
use super::set::SetKeep;
use crate::driver::{Allocation, ContextInner, Lane, Parked, Point, Stream};
use crate::error::{Error, Misuse, Result};

/// The device acknowledged refresh `seen` where the host expected at most `expected`: it
/// refreshed the table more often than the host launched through it. Refused, rather than
/// release bindings early on that count.
fn refreshed_outside(seen: u64, expected: u64) -> Error {
    Error::misuse(
        "ArgTable::launch",
        Misuse::NotThroughTable,
        format!("the device acknowledged refresh {seen} where the host expected at most {expected}: the table's refresh ran outside ArgTable::launch (a graph holding it launched another way)"),
    )
}

impl ArgTable {
    /// The highest acknowledgement known once the next launch's mirror may be rewritten (its
    /// launch acknowledged `at_least`). Reads the acknowledgement of the latest launch first:
    /// once that one has refreshed, so have all before it, and the next `depth - 1` launches
    /// need no read at all (mapped memory may be uncached: a read costs a trip to memory).
    pub(super) fn latest_ack(
        &mut self,
        at_least: u64,
        mirror: usize,
        stream: &Stream,
    ) -> Result<u64> {
        let launched = self.ledger.next_seq;
        let depth = self.ledger.depth() as u64;
        let latest = self
            .shared
            .acks
            .read(((launched - 1) % depth) as usize)
            .unwrap_or(0);
        if latest > launched {
            return Err(refreshed_outside(latest, launched));
        }
        if latest >= at_least {
            // Writes to the mirror happen after the device's acknowledgement of its reads.
            std::sync::atomic::fence(Ordering::Acquire);
            return Ok(latest);
        }
        self.wait_ack(mirror, at_least, stream)
    }

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
        let ahead = |v: u64| refreshed_outside(v, at_least);
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
                    return Err(Error::misuse(
                        "ArgTable::launch",
                        Misuse::NotThroughTable,
                        "the stream is idle but the launch that reads this mirror never acknowledged it: was a graph that refreshes the table launched another way?",
                    ));
                }
                if start.elapsed() > std::time::Duration::from_secs(60) {
                    // Not a misuse: the device stopped answering (a hung kernel, a lost GPU).
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

    /// After a launch: counts it, retires on the table's lane what was replaced before it
    /// (behind its launch count on the table's timeline) and releases what earlier launches
    /// replaced once the acknowledgements show their launches finished (those read before
    /// reusing a mirror: no extra read of device-written memory).
    pub(super) fn launched(&mut self) {
        self.ledger.launched();
        self.stats.launches += 1;
        self.retire_replaced();
    }

    fn retire_replaced(&mut self) {
        if let Some(replaced) = self.ledger.take_replaced() {
            let point = Point::Progress(self.timeline.clone(), replaced.through);
            self.lane.retire(point, [replaced]);
        }
        release(&self.ctx.inner, self.lane.collect(true));
    }

    /// Lets go of every slot's earlier bindings (the three it remembers, so that rebinding a slot
    /// back to one costs no reference counting), and releases every replaced binding no launch
    /// may read any more. A slot keeps its current binding and three before it alive, and a
    /// replaced binding is otherwise released by a later launch once the acknowledgements show
    /// the launches that may read it finished; call this when buffers bound earlier should be
    /// freed while the table lives (once the table's stream is idle, after a synchronize say,
    /// everything but the current bindings goes).
    pub fn trim(&mut self) {
        // What the device has acknowledged so far (the launch path reads only the one
        // acknowledgement it must wait for), or every launch if the stream is idle.
        let launched = self.ledger.next_seq;
        let seen = (0..self.ledger.depth())
            .filter_map(|m| self.shared.acks.read(m))
            .max()
            .unwrap_or(0);
        if seen <= launched {
            self.timeline.seen(seen);
        }
        let idle = self
            .stream
            .as_ref()
            .is_some_and(|s| s.is_idle().unwrap_or(false));
        if idle || self.stream.is_none() {
            self.timeline.idle(self.ledger.next_seq);
        }
        self.ledger.drop_previous();
        self.retire_replaced();
    }
}

/// A dropped table's lane, parked with the table behind its last launch: released, it lets go
/// of everything it holds (those launches have finished), rather than handing it on.
struct Finished(Lane<Replaced<Arc<Allocation>, SetKeep>>);

impl Drop for Finished {
    fn drop(&mut self) {
        let ctx = self.0.ctx_inner().clone();
        release(&ctx, self.0.idle());
    }
}

/// Drops what launches replaced and no launch reads any more: a reference count here (on a
/// line this thread touched when it took the reference); the last references of allocations,
/// whose drop frees device memory, in one batch on the context's release thread.
fn release(ctx: &ContextInner, done: impl Iterator<Item = Replaced<Arc<Allocation>, SetKeep>>) {
    let (mut last, mut last_sets) = (Vec::new(), Vec::new());
    for r in done {
        last.extend(
            r.bindings
                .into_iter()
                .map(|e| e.1)
                .filter(|a| Arc::strong_count(a) == 1),
        );
        last_sets.extend(
            r.sets
                .into_iter()
                .map(|e| e.1)
                .filter(|s| Arc::strong_count(s) == 1),
        );
    }
    if !last.is_empty() || !last_sets.is_empty() {
        ctx.tracker.release_later(Box::new((last, last_sets)));
    }
}

impl Drop for ArgTable {
    /// Never blocks: what launches may still read (the bindings, the table's memory) is parked
    /// on the context behind an event after the table's last launch.
    fn drop(&mut self) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        let ledger = std::mem::replace(&mut self.ledger, super::ledger::Ledger::new(1));
        let lane = std::mem::replace(&mut self.lane, Lane::new(&self.ctx.inner));
        // Released once the table's last launch has finished (or the context was synchronized
        // since): then nothing the lane holds is read any more either.
        let parked: Vec<Parked> = vec![
            Box::new(ledger),
            Box::new(self.shared.clone()),
            Box::new(Finished(lane)),
        ];
        self.ctx.inner.park_from_drop(&stream, parked);
    }
}
