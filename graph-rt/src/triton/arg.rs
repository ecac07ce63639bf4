//! Arguments of a Triton kernel launch: buffers, table slots and scalars, each checked against
//! the parameter it feeds and the specialization the kernel was compiled for.

use std::marker::PhantomData;

use bytemuck::Pod;
use graph_rt_sys::CUdeviceptr;

use crate::driver::{DeviceBuffer, DeviceView};
use crate::launch::{ArgSlot, KernelArg};
use crate::resource::Resource;
use crate::table::{PtrSlot, ScalarSlot};

/// One argument of a [`TritonKernel`](super::TritonKernel) launch, for one runtime parameter of
/// the kernel (Triton's constexprs and the trailing scratch pointers are not passed).
///
/// Scalars are passed in the parameter's own width: integers of 8 to 64 bits, `f32`/`f64`,
/// `fp16`/`bf16` as their 16 raw bits (as Triton's launcher does), booleans (`i1`) as one byte.
#[derive(Clone)]
pub struct TritonArg<'a> {
    pub(super) kind: ArgKind,
    _borrow: PhantomData<&'a ()>,
}

#[derive(Clone)]
pub(super) enum ArgKind {
    /// A device address, and what keeps its memory alive (none for a raw address).
    Pointer {
        addr: CUdeviceptr,
        keep: Option<Resource>,
    },
    /// A value: its little-endian bytes, size, and whether it is a float.
    Value { bits: u64, size: usize, float: bool },
    /// A table slot's address.
    Slot {
        addr: CUdeviceptr,
        slot: ArgSlot,
        keep: Resource,
    },
}

impl std::fmt::Debug for TritonArg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            ArgKind::Pointer { addr, .. } => write!(f, "pointer {addr:#x}"),
            ArgKind::Value { bits, size, float } => {
                let t = if *float { "float" } else { "integer" };
                write!(f, "{size}-byte {t} {bits:#x}")
            }
            ArgKind::Slot { slot, .. } => write!(f, "{slot:?}"),
        }
    }
}

fn value<'a>(bits: u64, size: usize, float: bool) -> TritonArg<'a> {
    TritonArg {
        kind: ArgKind::Value { bits, size, float },
        _borrow: PhantomData,
    }
}

impl<'a> TritonArg<'a> {
    /// A buffer's address (kept alive by graphs that launch with it).
    pub fn buffer<T: Pod>(buffer: &'a DeviceBuffer<T>) -> Self {
        Self::pointer(buffer.as_raw(), Some(buffer.allocation().clone()))
    }

    /// A view's address (kept alive by graphs that launch with it).
    pub fn view<T: Pod>(view: &'a DeviceView<T>) -> Self {
        Self::pointer(view.as_raw(), Some(view.allocation().clone()))
    }

    /// A raw device address.
    ///
    /// # Safety
    /// The memory must stay valid for every launch (and replay) that reads it.
    pub unsafe fn raw_pointer(addr: CUdeviceptr) -> Self {
        Self::pointer(addr, None)
    }

    fn pointer(addr: CUdeviceptr, keep: Option<Resource>) -> Self {
        Self {
            kind: ArgKind::Pointer { addr, keep },
            _borrow: PhantomData,
        }
    }

    /// A pointer slot of an argument table (for a parameter the PTX pass made a slot).
    pub fn ptr_slot<T>(slot: &'a PtrSlot<T>) -> Self {
        Self::slot(slot)
    }

    /// A scalar slot of an argument table (for a scalar parameter the PTX pass made a slot).
    pub fn scalar_slot<T: crate::table::SlotScalar>(slot: &'a ScalarSlot<T>) -> Self {
        Self::slot(slot)
    }

    fn slot(arg: &impl KernelArg<Param = CUdeviceptr>) -> Self {
        let mut keep = None;
        arg.retain(&mut |r| keep = Some(r));
        let keep = keep.unwrap_or_else(|| std::sync::Arc::new(()));
        Self {
            kind: ArgKind::Slot {
                addr: arg.to_param(),
                slot: arg.slot(),
                keep,
            },
            _borrow: PhantomData,
        }
    }

    /// An `i8`.
    pub fn i8(v: i8) -> Self {
        value(v as u8 as u64, 1, false)
    }
    /// A `u8`.
    pub fn u8(v: u8) -> Self {
        value(v as u64, 1, false)
    }
    /// A boolean (`i1`, passed as one byte).
    pub fn bool(v: bool) -> Self {
        value(v as u64, 1, false)
    }
    /// An `i16`.
    pub fn i16(v: i16) -> Self {
        value(v as u16 as u64, 2, false)
    }
    /// A `u16`.
    pub fn u16(v: u16) -> Self {
        value(v as u64, 2, false)
    }
    /// An `i32`.
    pub fn i32(v: i32) -> Self {
        value(v as u32 as u64, 4, false)
    }
    /// A `u32`.
    pub fn u32(v: u32) -> Self {
        value(v as u64, 4, false)
    }
    /// An `i64`.
    pub fn i64(v: i64) -> Self {
        value(v as u64, 8, false)
    }
    /// A `u64`.
    pub fn u64(v: u64) -> Self {
        value(v, 8, false)
    }
    /// An `f32`.
    pub fn f32(v: f32) -> Self {
        value(v.to_bits() as u64, 4, true)
    }
    /// An `f64`.
    pub fn f64(v: f64) -> Self {
        value(v.to_bits(), 8, true)
    }
    /// An `fp16` value's raw bits.
    pub fn f16_bits(bits: u16) -> Self {
        value(bits as u64, 2, true)
    }
    /// A `bf16` value's raw bits.
    pub fn bf16_bits(bits: u16) -> Self {
        value(bits as u64, 2, true)
    }
}
