//! An owner's lane of the tracker: retirements that one exec or one table makes many times a
//! second (the bindings it replaced while a launch may read them), kept by the owner and
//! released on its thread, where dropping a reference is a count on a cache line that thread
//! already holds. Each is retired with a [`Point`] like everything the tracker holds, and
//! released once it has passed. What a lane still holds when it is dropped goes to the
//! context's [`Tracker`](super::Tracker) point by point (an exec's lane, parked with the exec);
//! an owner that knows its launches have finished takes everything first ([`Lane::idle`]: a
//! dropped table's lane, released with the table's parked batch).

use std::collections::VecDeque;
use std::sync::Arc;

use smallvec::SmallVec;

use super::point::Point;
use crate::driver::ContextInner;

/// Retirements of one owner, in order, each behind its point.
pub(crate) struct Lane<T: Send + 'static> {
    ctx: Arc<ContextInner>,
    // One item a retirement inline (a table's launch retires one): no allocation for it.
    entries: VecDeque<(Point, Items<T>)>,
}

/// What one retirement holds.
pub(crate) type Items<T> = SmallVec<[T; 1]>;

impl<T: Send + 'static> Lane<T> {
    pub(crate) fn new(ctx: &Arc<ContextInner>) -> Self {
        Self {
            ctx: ctx.clone(),
            entries: VecDeque::new(),
        }
    }

    /// The context whose tracker the lane hands on to.
    pub(crate) fn ctx_inner(&self) -> &Arc<ContextInner> {
        &self.ctx
    }

    /// Retires `items` behind `point`.
    pub(crate) fn retire(&mut self, point: Point, items: impl Into<Items<T>>) {
        self.entries.push_back((point, items.into()));
    }

    /// Adds `items` to the newest retirement (its point covers them too). Call only when the
    /// lane is not empty.
    pub(crate) fn join_newest(&mut self, items: Vec<T>) {
        debug_assert!(!self.entries.is_empty());
        if let Some((_, held)) = self.entries.back_mut() {
            held.extend(items);
        }
    }

    /// Whether nothing is retired.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes the retirements whose points have passed, for the owner to drop (here, or the
    /// last references of device memory in one batch on the release thread). When `ordered`
    /// (the owner's launches run in order), the newest passed point proves every older one
    /// passed too.
    pub(crate) fn collect(&mut self, ordered: bool) -> impl Iterator<Item = T> + '_ {
        let done = if ordered {
            self.entries
                .iter()
                .rposition(|(p, _)| p.passed())
                .map_or(0, |i| i + 1)
        } else {
            self.entries.iter().take_while(|(p, _)| p.passed()).count()
        };
        self.entries.drain(..done).flat_map(|(_, items)| items)
    }

    /// The owner's every launch has finished: takes everything, for the owner to drop.
    pub(crate) fn idle(&mut self) -> impl Iterator<Item = T> + '_ {
        self.entries.drain(..).flat_map(|(_, items)| items)
    }

    /// How many items are held.
    pub(crate) fn len(&self) -> usize {
        self.entries.iter().map(|(_, items)| items.len()).sum()
    }
}

impl<T: Send + 'static> Drop for Lane<T> {
    /// The owner let go: what is still retired goes to the context's tracker behind its point.
    fn drop(&mut self) {
        for (point, items) in self.entries.drain(..) {
            self.ctx.tracker.retire(point, vec![Box::new(items)]);
        }
    }
}
