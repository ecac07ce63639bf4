//! How long an executable graph keeps what its nodes use: the current binding of each node it
//! rebound, and every binding it replaced until the launches that may still read it have
//! finished. Replaced bindings are retired on the exec's lane of the context's lifetime tracker,
//! behind a point after the exec's last launch (one per launch that had replacements), so an
//! exec rebound to fresh buffers every step holds a bounded set of them, not every buffer it was
//! ever bound to.

use std::collections::HashMap;
use std::sync::Arc;

use crate::driver::StreamInner;
use crate::driver::{point_after, Context, Lane};
use crate::resource::Resource;

/// A map keyed by address (of a node or of a kept resource). Addresses are not chosen by an
/// adversary, so a fast unkeyed hash (Fx) replaces SipHash, which would cost more than the rest
/// of a rebinding's lookups.
pub(crate) type AddrMap<V> = HashMap<usize, V, rustc_hash::FxBuildHasher>;

/// The exec's last launch, while it may still run: its stream and its sequence number.
#[derive(Clone, Copy)]
pub(crate) struct InFlight<'a> {
    pub(crate) stream: &'a Arc<StreamInner>,
    pub(crate) launch: u64,
}

pub(crate) struct Retention {
    ctx: Context,
    // Per node (by address): what its current binding uses.
    bound: AddrMap<Vec<Resource>>,
    // Replaced bindings, one retirement per launch that had replacements, behind a point
    // recorded after that launch when its first replacement came (launches of one exec run in
    // order, so it follows every earlier launch too).
    lane: Lane<Resource>,
    // The launch the lane's newest retirement follows.
    newest: Option<u64>,
}

impl Retention {
    pub(crate) fn new(ctx: &Context) -> Self {
        Self {
            ctx: ctx.clone(),
            bound: AddrMap::default(),
            lane: Lane::new(&ctx.inner),
            newest: None,
        }
    }

    /// Makes `now` what node `node` uses, retiring what it used before. `now` is left empty
    /// (holding the previous binding's storage, for reuse).
    pub(crate) fn bind(
        &mut self,
        node: usize,
        now: &mut Vec<Resource>,
        in_flight: Option<InFlight>,
    ) {
        let slot = self.bound.entry(node).or_default();
        let same =
            slot.len() == now.len() && slot.iter().zip(now.iter()).all(|(a, b)| Arc::ptr_eq(a, b));
        if same {
            now.clear();
            return;
        }
        std::mem::swap(slot, now);
        self.retire(now.drain(..), in_flight);
    }

    /// Retires every node's binding (the exec's nodes now use what another graph keeps).
    pub(crate) fn retire_bindings(&mut self, in_flight: Option<InFlight>) {
        let bound = std::mem::take(&mut self.bound);
        self.retire(bound.into_values().flatten(), in_flight);
    }

    /// Releases `old` once no launch that may use it runs: now if none is in flight, else
    /// behind a point after the last launch. The first replacement after a launch also
    /// releases what earlier launches' replacements kept, if they have finished.
    pub(crate) fn retire(
        &mut self,
        old: impl IntoIterator<Item = Resource>,
        in_flight: Option<InFlight>,
    ) {
        let Some(InFlight { stream, launch }) = in_flight else {
            return drop(old.into_iter());
        };
        let old: Vec<Resource> = old.into_iter().collect();
        if self.newest == Some(launch) && !self.lane.is_empty() {
            return self.lane.join_newest(old);
        }
        self.lane.collect(true).for_each(drop);
        let inner = &self.ctx.inner;
        match point_after(stream) {
            Ok(point) => {
                self.lane.retire(point, old);
                self.newest = Some(launch);
            }
            // Cannot tell when the launch ends: wait for it here, else keep them for good (a
            // leak: nothing can tell when the device stops reading them).
            Err(e) => {
                inner.record(Err(e));
                match stream.synchronize() {
                    Ok(()) => drop(old),
                    Err(e) => {
                        inner.record(Err(e));
                        std::mem::forget(old);
                    }
                }
            }
        }
    }

    /// Every launch of the exec has finished: releases every replaced binding.
    pub(crate) fn idle(&mut self) {
        self.lane.idle().for_each(drop);
        self.newest = None;
    }

    /// How many references to resources are held (current bindings and replaced ones).
    pub(crate) fn count(&self) -> usize {
        self.bound.values().map(Vec::len).sum::<usize>() + self.lane.len()
    }
}
