//! How long an executable graph keeps what its nodes use: the current binding of each node it
//! rebound, and every binding it replaced until the launches that may still read it have
//! finished. Replaced bindings wait behind a fence (an event recorded after the exec's last
//! launch), so an exec rebound to fresh buffers every step holds a bounded set of them, not every
//! buffer it was ever bound to.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::driver::Context;
use crate::driver::StreamInner;
use crate::driver::{Event, EventFlags};
use crate::resource::Resource;

/// A map keyed by address (of a node or of a kept resource). Addresses are not chosen by an
/// adversary, so a fast unkeyed hash (Fx) replaces SipHash, which would cost more than the rest
/// of a rebinding's lookups.
pub(crate) type AddrMap<V> = HashMap<usize, V, rustc_hash::FxBuildHasher>;

/// The exec's last launch, while it may still run: its stream and its sequence number.
#[derive(Clone, Copy)]
pub(crate) struct InFlight<'a> {
    pub(crate) stream: &'a StreamInner,
    pub(crate) launch: u64,
}

/// Resources replaced after launch number `launch`, released when `event` (recorded after that
/// launch, hence after every earlier one: launches of one exec run in order) has completed.
struct Fence {
    event: Event,
    launch: u64,
    keep: Vec<Resource>,
}

pub(crate) struct Retention {
    ctx: Context,
    // Per node (by address): what its current binding uses.
    bound: AddrMap<Vec<Resource>>,
    fences: VecDeque<Fence>,
    // Events of released fences, for reuse.
    spare: Vec<Event>,
    // Replaced while a launch may run, when no fence could be recorded: kept until a later
    // fence or until the exec is known idle.
    unfenced: Vec<Resource>,
}

impl Retention {
    pub(crate) fn new(ctx: &Context) -> Self {
        Self {
            ctx: ctx.clone(),
            bound: AddrMap::default(),
            fences: VecDeque::new(),
            spare: Vec::new(),
            unfenced: Vec::new(),
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
    /// behind a fence after the last launch.
    pub(crate) fn retire(
        &mut self,
        old: impl IntoIterator<Item = Resource>,
        in_flight: Option<InFlight>,
    ) {
        let Some(InFlight { stream, launch }) = in_flight else {
            return drop(old.into_iter());
        };
        if let Some(fence) = self.fences.back_mut().filter(|f| f.launch == launch) {
            return fence.keep.extend(old);
        }
        self.release_finished();
        match self.fence_after(stream) {
            // The fence also covers what earlier retirements could not fence: it follows every
            // launch made before them.
            Ok(Some(event)) => {
                let keep = old.into_iter().chain(self.unfenced.drain(..)).collect();
                self.fences.push_back(Fence {
                    event,
                    launch,
                    keep,
                })
            }
            // The stream captures: no event can be recorded on it, nor can it be waited for.
            Ok(None) => self.unfenced.extend(old),
            Err(e) => {
                // Cannot tell when the launch ends: wait for it here, else keep them until the
                // exec is known idle.
                self.ctx.inner.record(Err(e));
                match stream.synchronize() {
                    Ok(()) => drop(old.into_iter()),
                    Err(e) => {
                        self.ctx.inner.record(Err(e));
                        self.unfenced.extend(old);
                    }
                }
            }
        }
    }

    /// An event recorded at the current end of `stream`, or `None` while it captures (the
    /// record would become a node of the user's graph).
    fn fence_after(&mut self, stream: &StreamInner) -> crate::Result<Option<Event>> {
        let none = graph_rt_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        if stream.capture_status()? != none {
            return Ok(None);
        }
        let event = match self.spare.pop() {
            Some(e) => e,
            None => Event::new(&self.ctx, EventFlags::DisableTiming)?,
        };
        event.record_on(stream)?;
        Ok(Some(event))
    }

    /// Releases what completed fences hold. The newest completed fence proves every older
    /// launch finished too (launches of one exec run in order), whatever the older fences'
    /// streams are still doing.
    fn release_finished(&mut self) {
        let newest_done = self
            .fences
            .iter()
            .rposition(|f| matches!(f.event.is_complete(), Ok(true)));
        if let Some(i) = newest_done {
            let done: Vec<Fence> = self.fences.drain(..=i).collect();
            self.spare.extend(done.into_iter().map(|f| f.event));
        }
    }

    /// Every launch of the exec has finished: releases every replaced binding.
    pub(crate) fn idle(&mut self) {
        self.spare.extend(self.fences.drain(..).map(|f| f.event));
        self.unfenced.clear();
    }

    /// How many references to resources are held (current bindings and replaced ones).
    pub(crate) fn count(&self) -> usize {
        self.bound.values().map(Vec::len).sum::<usize>()
            + self.fences.iter().map(|f| f.keep.len()).sum::<usize>()
            + self.unfenced.len()
    }
}
