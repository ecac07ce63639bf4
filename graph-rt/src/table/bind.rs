//! Binding one slot at a time: the checks a binding makes (the table, the slot's alignment and
//! minimum length, the buffer's context) and what it writes into the ledger.

use std::sync::Arc;

use bytemuck::Pod;
use graph_rt_sys::CUdeviceptr;

use super::keep::NOTHING;
use super::slot::{PtrSlot, ScalarSlot, SlotScalar};
use super::table::{key_of, ArgTable};
use crate::driver::{Allocation, DeviceBuffer, DeviceView};
use crate::error::{Error, Misuse, Result};

impl ArgTable {
    #[inline]
    pub(super) fn own(&self, table: u64, index: u32, call: &'static str) -> Result<()> {
        if table != self.id {
            return Err(Error::misuse(
                call,
                Misuse::OtherTable,
                "the slot belongs to another table",
            ));
        }
        if index as usize >= self.ledger.words.len() {
            return Err(Error::misuse(
                call,
                Misuse::SlotOutOfRange {
                    slot: index as usize,
                },
                format!("slot {index} is out of range"),
            ));
        }
        Ok(())
    }

    /// Writes `word` into slot `index` for the next launch, keeping the allocation `keep` (whose
    /// identity is `key`, [`NOTHING`] for none) alive while a launch may read it.
    #[inline]
    fn set(&mut self, index: usize, word: u64, key: usize, keep: Option<&Arc<Allocation>>) {
        self.ledger.set(index, word, key, || keep.cloned());
    }

    /// Binds slot `index` to `word` in `alloc` (identity `key`) after checking that `alloc` is
    /// of this table's context, unless the slot remembers it (checked when first bound).
    #[inline]
    fn set_checked(
        &mut self,
        index: usize,
        word: u64,
        key: usize,
        alloc: &Arc<Allocation>,
        call: &'static str,
    ) -> Result<()> {
        let at = self.ledger.keeps.position(index, key);
        if at.is_none() && !alloc.in_context(&self.ctx) {
            return Err(Error::misuse(
                call,
                Misuse::OtherContext,
                "the buffer belongs to another context",
            ));
        }
        if at.is_none() && alloc.is_graph_memory() {
            return Err(graph_memory(call));
        }
        if let Some(on) = alloc.ordered_on() {
            self.order_after(on, call)?;
        }
        self.ledger
            .set_at(index, word, key, at, || Some(alloc.clone()));
        Ok(())
    }

    /// Checks a binding of `slot` to `len` elements at `addr`.
    #[inline]
    pub(super) fn check_ptr<T>(
        &self,
        slot: &PtrSlot<T>,
        addr: CUdeviceptr,
        len: usize,
        call: &'static str,
    ) -> Result<()> {
        self.own(slot.table, slot.index, call)?;
        if addr & (slot.align as u64 - 1) != 0 {
            return Err(Error::misuse(
                call,
                Misuse::Misaligned {
                    addr,
                    align: slot.align as usize,
                },
                format!(
                    "address {addr:#x} is not aligned to the {} bytes the slot declares",
                    slot.align
                ),
            ));
        }
        if len < slot.min_len {
            return Err(Error::misuse(
                call,
                Misuse::TooShort {
                    len,
                    min: slot.min_len,
                },
                format!(
                    "{len} elements; the slot declares at least {}",
                    slot.min_len
                ),
            ));
        }
        Ok(())
    }

    /// Binds `slot` to `buffer` for the launches that follow (a host write; the buffer is kept
    /// alive while a launch may read it). Checks the table, the context, the alignment and the
    /// length the slot declares; on error the table is unchanged. A buffer allocated in stream
    /// order on another stream than the table's ([`DeviceBuffer::alloc_async`]) orders the next
    /// launch after what that stream has queued now (an event recorded here, waited for at the
    /// launch), and is refused ([`Misuse::UnorderedBuffer`]) while that stream captures.
    #[inline]
    pub fn bind<T: Pod>(&mut self, slot: &PtrSlot<T>, buffer: &DeviceBuffer<T>) -> Result<()> {
        self.check_ptr(slot, buffer.as_raw(), buffer.len(), "ArgTable::bind")?;
        let alloc = buffer.allocation();
        let key = key_of(alloc);
        self.set_checked(
            slot.index as usize,
            buffer.as_raw(),
            key,
            alloc,
            "ArgTable::bind",
        )
    }

    /// Slot `index`'s current binding: its address and the allocation it keeps alive (`None`
    /// for a raw address, a scalar, a binding set's slot or a slot never bound).
    pub(crate) fn current_buffer(&self, index: usize) -> Option<(CUdeviceptr, Arc<Allocation>)> {
        let alloc = self.ledger.keeps.current(index)?.clone();
        Some((self.ledger.word(index)?, alloc))
    }

    /// Binds `slot` to the elements of `view` (see [`ArgTable::bind`]).
    pub fn bind_view<T: Pod>(&mut self, slot: &PtrSlot<T>, view: &DeviceView<T>) -> Result<()> {
        self.check_ptr(slot, view.as_raw(), view.len(), "ArgTable::bind_view")?;
        let alloc = view.allocation();
        let key = key_of(alloc);
        self.set_checked(
            slot.index as usize,
            view.as_raw(),
            key,
            alloc,
            "ArgTable::bind_view",
        )
    }

    /// Binds `slot` to a raw device address (alignment checked; nothing kept alive).
    ///
    /// # Safety
    /// `addr` must address at least the slot's minimum length of `T` elements of this context,
    /// valid for every launch until the slot is bound again and that launch has finished.
    pub unsafe fn bind_raw<T: Pod>(&mut self, slot: &PtrSlot<T>, addr: CUdeviceptr) -> Result<()> {
        self.check_ptr(slot, addr, usize::MAX, "ArgTable::bind_raw")?;
        self.set(slot.index as usize, addr, NOTHING, None);
        Ok(())
    }

    /// Sets `slot` to `value` for the launches that follow.
    pub fn set_scalar<T: SlotScalar>(&mut self, slot: &ScalarSlot<T>, value: T) -> Result<()> {
        let word = self.scalar_word(slot, value, "ArgTable::set_scalar")?;
        self.set(slot.index as usize, word, NOTHING, None);
        Ok(())
    }

    /// The word `value` is in `slot`, after checking the slot's table and the multiple it takes.
    pub(super) fn scalar_word<T: SlotScalar>(
        &self,
        slot: &ScalarSlot<T>,
        value: T,
        call: &'static str,
    ) -> Result<u64> {
        self.own(slot.table, slot.index, call)?;
        let mut word = [0u8; 8];
        word[..std::mem::size_of::<T>()].copy_from_slice(bytemuck::bytes_of(&value));
        // As an integer of T's width: a power-of-two multiple whatever the signedness.
        let word = u64::from_le_bytes(word);
        if word & (slot.multiple_of as u64 - 1) != 0 {
            return Err(Error::misuse(
                call,
                Misuse::NotMultiple {
                    multiple: slot.multiple_of as u64,
                },
                format!(
                    "the slot takes multiples of {} (the kernel was compiled for them)",
                    slot.multiple_of
                ),
            ));
        }
        Ok(word)
    }
}

/// The refusal of a graph's own memory as a binding.
pub(super) fn graph_memory(call: &'static str) -> Error {
    Error::misuse(
        call,
        Misuse::GraphMemory,
        "the buffer is a graph's own memory (a step's temporary), valid during its replays only: bind a buffer of your own",
    )
}
