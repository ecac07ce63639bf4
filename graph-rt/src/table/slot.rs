//! Slot handles: what a table-form kernel takes where the plain form takes a buffer or a value.

use std::marker::PhantomData;
use std::sync::Arc;

use graph_rt_sys::CUdeviceptr;

use super::table::Shared;
use crate::launch::{ArgSlot, KernelArg, ScalarKind};
use crate::resource::Resource;

/// The device address of slot `index` of the table in `shared`.
#[inline]
fn slot_addr(shared: &Shared, index: u32) -> CUdeviceptr {
    shared.table.as_raw() + 8 * index as CUdeviceptr
}

/// A pointer slot of an [`ArgTable`](super::ArgTable) holding the address of `T` elements.
///
/// As a kernel argument it passes the slot's device address (a `T* const*` in the kernel), and
/// keeps the table's device memory alive in graphs.
pub struct PtrSlot<T> {
    // What binding reads first, in 32 bytes.
    pub(crate) table: u64,
    pub(crate) index: u32,
    pub(crate) align: u32,
    pub(crate) min_len: usize,
    pub(crate) keep: Arc<Shared>,
    pub(crate) _t: PhantomData<fn() -> T>,
}

/// A scalar slot of an [`ArgTable`](super::ArgTable) holding a `T` (at most 8 bytes), such as a
/// decode step's sequence length.
///
/// As a kernel argument it passes the slot's device address (a `const T*` in the kernel).
pub struct ScalarSlot<T> {
    pub(crate) table: u64,
    pub(crate) index: u32,
    // Values must be multiples of this (a power of two; 1 for any), as integers.
    pub(crate) multiple_of: u32,
    pub(crate) keep: Arc<Shared>,
    pub(crate) _t: PhantomData<fn() -> T>,
}

impl<T> Clone for PtrSlot<T> {
    fn clone(&self) -> Self {
        Self {
            keep: self.keep.clone(),
            _t: PhantomData,
            ..*self
        }
    }
}

impl<T> Clone for ScalarSlot<T> {
    fn clone(&self) -> Self {
        Self {
            keep: self.keep.clone(),
            _t: PhantomData,
            ..*self
        }
    }
}

impl<T> std::fmt::Debug for PtrSlot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtrSlot")
            .field("index", &self.index)
            .field("align", &self.align)
            .field("min_len", &self.min_len)
            .finish()
    }
}

impl<T> std::fmt::Debug for ScalarSlot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScalarSlot")
            .field("index", &self.index)
            .finish()
    }
}

impl<T> PtrSlot<T> {
    /// The slot's index in its table.
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The slot's device address (what a kernel receives).
    pub fn device_addr(&self) -> CUdeviceptr {
        slot_addr(&self.keep, self.index)
    }
}

impl<T> ScalarSlot<T> {
    /// The slot's index in its table.
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The slot's device address (what a kernel receives).
    pub fn device_addr(&self) -> CUdeviceptr {
        slot_addr(&self.keep, self.index)
    }
}

// SAFETY: the slot's address is inside the table's device memory, which `retain` hands over.
unsafe impl<T> KernelArg for PtrSlot<T> {
    type Param = CUdeviceptr;
    #[inline]
    fn to_param(&self) -> CUdeviceptr {
        slot_addr(&self.keep, self.index)
    }
    fn retain(&self, keep: &mut dyn FnMut(Resource)) {
        keep(self.keep.clone())
    }
    fn slot(&self) -> ArgSlot {
        ArgSlot::Pointer {
            table: self.table,
            align: self.align as usize,
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// What a [`ScalarSlot`] may hold: the integers and floating-point numbers of at most 8 bytes,
/// each with its [`ScalarKind`], which a table-form kernel's parameter must share.
pub trait SlotScalar: bytemuck::Pod + sealed::Sealed {
    /// Integer or floating point.
    const KIND: ScalarKind;
}

macro_rules! slot_scalar {
    ($kind:ident: $($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl SlotScalar for $t {
            const KIND: ScalarKind = ScalarKind::$kind;
        }
    )*};
}
slot_scalar!(Integer: u8, i8, u16, i16, u32, i32, u64, i64);
slot_scalar!(Float: f32, f64);

// SAFETY: as for pointer slots.
unsafe impl<T: SlotScalar> KernelArg for ScalarSlot<T> {
    type Param = CUdeviceptr;
    #[inline]
    fn to_param(&self) -> CUdeviceptr {
        slot_addr(&self.keep, self.index)
    }
    fn retain(&self, keep: &mut dyn FnMut(Resource)) {
        keep(self.keep.clone())
    }
    fn slot(&self) -> ArgSlot {
        ArgSlot::Scalar {
            table: self.table,
            size: std::mem::size_of::<T>(),
            multiple_of: self.multiple_of as u64,
            kind: T::KIND,
        }
    }
}

/// A pointer slot with its element type erased, for code that rebinds words of kernels it did
/// not launch (the in-graph prelude): which table, which slot, and what the slot accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRef {
    pub(crate) table: u64,
    pub(crate) index: u32,
    pub(crate) align: u32,
    pub(crate) min_bytes: u64,
}

impl<T> PtrSlot<T> {
    /// The slot with its element type erased.
    pub fn erased(&self) -> SlotRef {
        SlotRef {
            table: self.table,
            index: self.index,
            align: self.align,
            min_bytes: (self.min_len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        }
    }
}

impl SlotRef {
    /// The slot's index in its table.
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The alignment every address bound to it has.
    pub fn align(&self) -> usize {
        self.align as usize
    }

    /// The fewest bytes every buffer bound to it has.
    pub fn min_bytes(&self) -> u64 {
        self.min_bytes
    }
}

impl super::ArgTable {
    /// Whether `slot` is one of this table's.
    pub(crate) fn owns(&self, slot: &SlotRef) -> bool {
        slot.table == self.id && (slot.index as usize) < self.ledger.words.len()
    }

    /// The address the next launch will see in slot `index` (0 if never bound).
    pub(crate) fn word(&self, index: u32) -> u64 {
        self.ledger.word(index as usize).unwrap_or(0)
    }

    /// The table's refresh kernel (to find its node in a graph).
    pub(crate) fn refresh_function(&self) -> &crate::driver::Function {
        &self.shared.refresh
    }

    /// The table's identity (a graph's launch key when it refreshes the table).
    pub(crate) fn key(&self) -> u64 {
        self.id
    }

    /// The launch key of a graph that refreshes this table and whose foreign nodes a host-mode
    /// [`Prelude`](crate::foreign::Prelude) rewrites before each launch: [`ArgTable::launch`]
    /// (super::ArgTable::launch) refuses it, so that the nodes never run with the addresses of
    /// an earlier launch (which nothing keeps alive).
    pub(crate) fn host_patched_key(&self) -> u64 {
        self.id | super::table::HOST_PATCHED
    }

    /// Whether slot `index` was ever bound (one by one or by a binding set).
    pub(crate) fn is_bound(&self, index: u32) -> bool {
        (index as usize) < self.ledger.words.len() && self.ledger.is_bound(index as usize)
    }
}
