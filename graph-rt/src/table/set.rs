//! Prepared sets of bindings: the bindings of many slots, checked once when the set is built and
//! applied together by [`ArgTable::bind_set`] at the cost of copying their words, whatever the
//! number of slots. For buffers that come back (double or triple buffering, a few decode
//! buffers in rotation): a thousand slots rebound by one set cost about what writing a thousand
//! pointers does, where binding them one by one costs the checks and bookkeeping of each.

use std::sync::{Arc, Weak};

use bytemuck::Pod;
use graph_rt_sys::CUdeviceptr;

use super::keep::NOTHING;
use super::ledger::SetView;
use super::slot::{PtrSlot, ScalarSlot, SlotScalar};
use super::table::{key_of, ArgTable};
use crate::driver::{Allocation, DeviceBuffer, DeviceView, StreamInner};
use crate::error::{Error, Misuse, Result};

/// What a set keeps alive: the allocations its slots address, once each.
pub(crate) type SetKeep = Arc<[Arc<Allocation>]>;

/// The slots of a set: sets over the same slots of one table share one layout, which is what
/// lets a set take over from another with no work per slot.
pub(crate) struct Layout {
    /// Unique among layouts (an address could be reused once a layout is gone).
    id: usize,
    indices: Box<[u32]>,
    start: Option<usize>,
    blocks: Box<[(u32, u64)]>,
}

static NEXT_LAYOUT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

impl Layout {
    /// The layout of slots `indices` (distinct, ascending).
    pub(super) fn new(indices: Box<[u32]>) -> Self {
        let start = indices.first().map(|&f| f as usize);
        let contiguous = indices
            .iter()
            .enumerate()
            .all(|(j, &i)| i as usize == start.unwrap_or(0) + j);
        let mut blocks: Vec<(u32, u64)> = Vec::new();
        for &i in indices.iter() {
            let (b, bit) = (i >> 3, 1u64 << (8 * (i & 7)));
            match blocks.last_mut() {
                Some((last, flags)) if *last == b => *flags |= bit,
                _ => blocks.push((b, bit)),
            }
        }
        Self {
            id: NEXT_LAYOUT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            start: start.filter(|_| contiguous),
            indices,
            blocks: blocks.into_boxed_slice(),
        }
    }

    /// A set of this layout binding its slots to `words`, keeping what `keep_id` identifies.
    pub(super) fn view<'a>(&'a self, words: &'a [u64], keep_id: usize) -> SetView<'a> {
        SetView {
            layout: self.id,
            keep_id,
            indices: &self.indices,
            start: self.start,
            blocks: &self.blocks,
            words,
            source: None,
        }
    }
}

/// Bindings of slots of one [`ArgTable`], checked when built ([`ArgTable::binding_set`]) and
/// applied together by [`ArgTable::bind_set`]: the slots take the set's words for the launches
/// that follow, as if each had been bound in turn.
///
/// Applying costs a copy of the set's words (8 bytes a slot) and marking what changed; when
/// every slot of the set is bound from one other set over the same slots (two or three sets
/// alternating), handing them over costs nothing more, whatever their number. The set keeps its
/// buffers alive (each allocation once); the table keeps an applied set alive while a launch
/// may read its words, and lets it go once every one of its slots was bound again and those
/// launches finished.
///
/// ```no_run
/// # use graph_rt::*;
/// # use graph_rt::table::*;
/// # fn sets(table: &mut ArgTable, slots: &[PtrSlot<f32>], a: &[DeviceBuffer<f32>], b: &[DeviceBuffer<f32>], exec: &GraphExec, stream: &Stream) -> Result<()> {
/// let mut prepare = |bufs: &[DeviceBuffer<f32>]| -> Result<BindingSet> {
///     let mut set = table.binding_set();
///     for (slot, buf) in slots.iter().zip(bufs) {
///         set.bind(slot, buf)?; // checked here, once
///     }
///     set.build()
/// };
/// let (even, odd) = (prepare(a)?, prepare(b)?);
/// for step in 0..100 {
///     table.bind_set(if step % 2 == 0 { &even } else { &odd })?;
///     table.launch(exec, stream)?;
/// }
/// # Ok(())
/// # }
/// ```
pub struct BindingSet {
    table: u64,
    layout: Arc<Layout>,
    words: Arc<[u64]>,
    keep: SetKeep,
    // The streams its stream-ordered allocations were made on (each once), which a launch
    // after binding the set waits for (see the `order` module).
    ordered: Box<[Arc<StreamInner>]>,
}

impl std::fmt::Debug for BindingSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindingSet")
            .field("slots", &self.words.len())
            .field("allocations", &self.keep.len())
            .finish()
    }
}

impl BindingSet {
    /// Slots the set binds.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether the set binds no slot (never: [`BindingSetBuilder::build`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

/// Builds a [`BindingSet`]: the same binding calls as [`ArgTable`]'s, with the same checks,
/// made once. A slot bound twice takes the later binding.
pub struct BindingSetBuilder<'t> {
    table: &'t mut ArgTable,
    entries: Vec<(u32, u64, usize)>,
    keep: Vec<Arc<Allocation>>,
}

impl std::fmt::Debug for BindingSetBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindingSetBuilder")
            .field("bindings", &self.entries.len())
            .finish()
    }
}

impl ArgTable {
    /// Starts a prepared set of bindings of this table's slots (see [`BindingSet`]).
    pub fn binding_set(&mut self) -> BindingSetBuilder<'_> {
        BindingSetBuilder {
            table: self,
            entries: Vec::new(),
            keep: Vec::new(),
        }
    }

    /// Binds every slot of `set` to its word for the launches that follow (a host copy, no
    /// driver call; see [`BindingSet`]). Refuses a set built for another table. A set holding
    /// buffers allocated in stream order on another stream than the table's costs an event
    /// record per such stream here and a wait at the next launch (see
    /// [`ArgTable::bind`](crate::ArgTable::bind)).
    pub fn bind_set(&mut self, set: &BindingSet) -> Result<()> {
        if set.table != self.id {
            return Err(Error::misuse(
                "ArgTable::bind_set",
                Misuse::OtherTable,
                "the set was built for another table",
            ));
        }
        for on in set.ordered.iter() {
            self.order_after(on, "ArgTable::bind_set")?;
        }
        let keep_id = Arc::as_ptr(&set.keep) as *const () as usize;
        let view = SetView {
            source: Some(&set.words),
            ..set.layout.view(&set.words, keep_id)
        };
        self.ledger.apply_set(&view, || set.keep.clone());
        Ok(())
    }

    /// The layout of the slots `indices` (distinct, ascending): one this table made before if
    /// a live set has it.
    fn layout(&mut self, indices: Box<[u32]>) -> Arc<Layout> {
        self.layouts.retain(|l| l.strong_count() > 0);
        if let Some(same) = self
            .layouts
            .iter()
            .filter_map(Weak::upgrade)
            .find(|l| l.indices == indices)
        {
            return same;
        }
        let layout = Arc::new(Layout::new(indices));
        self.layouts.push(Arc::downgrade(&layout));
        layout
    }
}

impl BindingSetBuilder<'_> {
    fn push(&mut self, index: u32, word: u64, alloc: Option<&Arc<Allocation>>) {
        let key = alloc.map_or(NOTHING, key_of);
        if let Some(a) = alloc {
            self.keep.push(a.clone());
        }
        self.entries.push((index, word, key));
    }

    fn buffer<T: Pod>(
        &mut self,
        slot: &PtrSlot<T>,
        addr: CUdeviceptr,
        len: usize,
        alloc: &Arc<Allocation>,
        call: &'static str,
    ) -> Result<&mut Self> {
        self.table.check_ptr(slot, addr, len, call)?;
        if !alloc.in_context(&self.table.ctx) {
            return Err(Error::misuse(
                call,
                Misuse::OtherContext,
                "the buffer belongs to another context",
            ));
        }
        if alloc.is_graph_memory() {
            return Err(super::bind::graph_memory(call));
        }
        self.push(slot.index, addr, Some(alloc));
        Ok(self)
    }

    /// Binds `slot` to `buffer` in the set (checked as [`ArgTable::bind`] checks it).
    pub fn bind<T: Pod>(
        &mut self,
        slot: &PtrSlot<T>,
        buffer: &DeviceBuffer<T>,
    ) -> Result<&mut Self> {
        let call = "BindingSetBuilder::bind";
        self.buffer(
            slot,
            buffer.as_raw(),
            buffer.len(),
            buffer.allocation(),
            call,
        )
    }

    /// Binds `slot` to the elements of `view` in the set (see [`ArgTable::bind_view`]).
    pub fn bind_view<T: Pod>(
        &mut self,
        slot: &PtrSlot<T>,
        view: &DeviceView<T>,
    ) -> Result<&mut Self> {
        let call = "BindingSetBuilder::bind_view";
        self.buffer(slot, view.as_raw(), view.len(), view.allocation(), call)
    }

    /// Binds `slot` to a raw device address in the set (alignment checked; nothing kept alive).
    ///
    /// # Safety
    /// As for [`ArgTable::bind_raw`]: `addr` must address at least the slot's minimum length of
    /// `T` elements of the table's context, valid for every launch made while the slot is bound
    /// from this set, until those launches have finished.
    pub unsafe fn bind_raw<T: Pod>(
        &mut self,
        slot: &PtrSlot<T>,
        addr: CUdeviceptr,
    ) -> Result<&mut Self> {
        self.table
            .check_ptr(slot, addr, usize::MAX, "BindingSetBuilder::bind_raw")?;
        self.push(slot.index, addr, None);
        Ok(self)
    }

    /// Sets `slot` to `value` in the set (checked as [`ArgTable::set_scalar`] checks it).
    pub fn set_scalar<T: SlotScalar>(
        &mut self,
        slot: &ScalarSlot<T>,
        value: T,
    ) -> Result<&mut Self> {
        let word = self
            .table
            .scalar_word(slot, value, "BindingSetBuilder::set_scalar")?;
        self.push(slot.index, word, None);
        Ok(self)
    }

    /// The set. Refuses a set that binds no slot.
    pub fn build(self) -> Result<BindingSet> {
        let Self {
            table,
            mut entries,
            mut keep,
        } = self;
        if entries.is_empty() {
            return Err(Error::misuse(
                "BindingSetBuilder::build",
                Misuse::EmptySet,
                "a binding set binds at least one slot",
            ));
        }
        // By slot, the later binding of a slot bound twice winning (a stable sort keeps the
        // order of bindings within a slot).
        entries.sort_by_key(|e| e.0);
        let mut last: Vec<(u32, u64, usize)> = Vec::with_capacity(entries.len());
        for e in entries {
            match last.last_mut() {
                Some(l) if l.0 == e.0 => *l = e,
                _ => last.push(e),
            }
        }
        // Each allocation once, and only those a binding that stayed addresses.
        let mut used: Vec<usize> = last.iter().map(|e| e.2).filter(|&k| k != NOTHING).collect();
        used.sort_unstable();
        used.dedup();
        keep.sort_unstable_by_key(key_of);
        keep.dedup_by_key(|a| key_of(a));
        keep.retain(|a| used.binary_search(&key_of(a)).is_ok());
        let indices: Box<[u32]> = last.iter().map(|e| e.0).collect();
        let words: Arc<[u64]> = last.iter().map(|e| e.1).collect();
        let mut ordered: Vec<Arc<StreamInner>> = Vec::new();
        for on in keep.iter().filter_map(|a| a.ordered_on()) {
            if !ordered.iter().any(|o| o.raw() == on.raw()) {
                ordered.push(on.clone());
            }
        }
        Ok(BindingSet {
            table: table.id,
            layout: table.layout(indices),
            words,
            keep: keep.into(),
            ordered: ordered.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Layout;

    #[test]
    fn a_layout_knows_its_run_and_its_blocks() {
        let run = Layout::new((5..21).collect());
        assert_eq!(run.start, Some(5));
        // Slots 5..8 in block 0, 8..16 in block 1, 16..21 in block 2.
        let blocks: Vec<u32> = run.blocks.iter().map(|b| b.0).collect();
        assert_eq!(blocks, [0, 1, 2]);
        assert_eq!(run.blocks[0].1, 0x0101_0100_0000_0000);
        assert_eq!(run.blocks[1].1, 0x0101_0101_0101_0101);
        let sparse = Layout::new(vec![0, 9, 10, 64].into_boxed_slice());
        assert_eq!(sparse.start, None);
        let blocks: Vec<(u32, u64)> = sparse.blocks.to_vec();
        assert_eq!(blocks, [(0, 0x01), (1, 0x0001_0100), (8, 0x01)]);
        assert_ne!(run.id, sparse.id, "layouts are told apart by identity");
    }
}
