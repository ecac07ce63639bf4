//! What changes between a step's calls: its declared buffers and scalars, each a slot of the
//! step's argument table, and the buffers bound to them now.

use std::any::Any;

use bytemuck::Pod;
use graph_rt_sys::CUdeviceptr;

use crate::discover::Dynamic;
use std::sync::Arc;

use crate::driver::{Allocation, Context, DeviceBuffer};
use crate::error::{Error, Misuse, Result};
use crate::table::{PtrSlot, ScalarSlot, SlotRef, SlotScalar};
use crate::{ArgTable, TableOptions};

/// A buffer of `T` declared to change between a step's calls (see [`StepParams::buffer`]).
/// Pass it to [`StepScope::buffer`](super::StepScope::buffer) inside the closure, or its
/// [`Buf::slot`] to a table-form kernel.
///
/// A `Buf` is its table slot and nothing more (what binding reads is what a table binding
/// reads): the step it belongs to is the slot's table.
pub struct Buf<T> {
    pub(super) slot: PtrSlot<T>,
}

impl<T> Clone for Buf<T> {
    fn clone(&self) -> Self {
        Self {
            slot: self.slot.clone(),
        }
    }
}

impl<T> std::fmt::Debug for Buf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buf")
            .field("slot", &self.slot.index)
            .finish()
    }
}

impl<T> Buf<T> {
    /// The table slot behind the buffer, for table-form kernels (which read the slot, so their
    /// replays follow every rebinding with no patching).
    pub fn slot(&self) -> &PtrSlot<T> {
        &self.slot
    }
}

/// A scalar of `T` declared to change between a step's calls, such as a decode position (see
/// [`StepParams::scalar`]). Table-form kernels read it through [`Scalar::slot`]; kernels
/// graph-rt cannot rewrite cannot take it (their by-value arguments are baked into the graph:
/// such a step is refused as [`Misuse::StepChanged`]).
pub struct Scalar<T> {
    slot: ScalarSlot<T>,
}

impl<T> Clone for Scalar<T> {
    fn clone(&self) -> Self {
        Self {
            slot: self.slot.clone(),
        }
    }
}

impl<T> std::fmt::Debug for Scalar<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scalar").finish()
    }
}

impl<T> Scalar<T> {
    /// The table slot behind the scalar, for table-form kernels.
    pub fn slot(&self) -> &ScalarSlot<T> {
        &self.slot
    }
}

/// A buffer bound to a declared parameter: another handle on it (for the closure) and its range.
pub(super) struct Bound {
    /// A `DeviceBuffer<T>` of the parameter's `T`.
    pub(super) buffer: Box<dyn Any + Send + Sync>,
    pub(super) base: CUdeviceptr,
    pub(super) len: usize,
    pub(super) bytes: usize,
}

/// A declared buffer: its slot, the bytes its kernels read, how to allocate a stand-in.
pub(super) struct Param {
    pub(super) slot: SlotRef,
    pub(super) min_bytes: usize,
    /// What the closure's runs see: bound before the step was made, or for a step that runs
    /// eagerly (a captured step's later bindings go to the table alone).
    pub(super) bound: Option<Bound>,
    /// A stand-in of `len` elements (the second capture's, for discovery).
    pub(super) stand_in: fn(&Context, usize) -> Result<Bound>,
    /// The handle the closure sees, at `ptr` in `alloc`, of the declared length (`min_bytes`).
    pub(super) rebuild: fn(CUdeviceptr, usize, Arc<Allocation>) -> Bound,
}

fn rebuild<T: Pod>(ptr: CUdeviceptr, min_bytes: usize, alloc: Arc<Allocation>) -> Bound {
    let len = min_bytes / std::mem::size_of::<T>();
    let b = DeviceBuffer::<T>::from_parts(ptr, len, alloc);
    Bound {
        base: ptr,
        len,
        bytes: b.num_bytes(),
        buffer: Box::new(b),
    }
}

fn stand_in<T: Pod>(ctx: &Context, len: usize) -> Result<Bound> {
    let b = DeviceBuffer::<T>::zeroed(ctx, len)?;
    Ok(Bound {
        base: b.as_raw(),
        len: b.len(),
        bytes: b.num_bytes(),
        buffer: Box::new(b),
    })
}

/// The parameters of a step: the buffers and scalars that change between its calls, declared
/// before the step is made, each bound before its first call.
// `repr(C)`, the table first: a step's call reads its first fields beside the step's own.
#[repr(C)]
pub struct StepParams {
    pub(super) table: ArgTable,
    pub(super) ctx: Context,
    /// The declared buffers, in order.
    pub(super) params: Vec<Param>,
    /// Per slot of the table, its buffer's place in `params` (`None`: a scalar).
    by_slot: Vec<Option<usize>>,
    /// Whether every `bound` is the table's current binding (else `materialize` rebuilds).
    materialized: bool,
}

impl std::fmt::Debug for StepParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepParams")
            .field("buffers", &self.params.len())
            .field("table", &self.table)
            .finish()
    }
}

impl StepParams {
    /// Parameters of a step in `ctx`, held in an argument table of up to `capacity` slots
    /// (buffers and scalars).
    pub fn new(ctx: &Context, capacity: usize) -> Result<Self> {
        let options = TableOptions {
            capacity,
            ..TableOptions::default()
        };
        Ok(Self {
            ctx: ctx.clone(),
            table: ArgTable::new(ctx, options)?,
            params: Vec::new(),
            by_slot: Vec::new(),
            materialized: true,
        })
    }

    /// Declares a buffer of at least `min_len` elements of `T`, 16-byte aligned (libraries pick
    /// kernels by their operands' alignment), that changes between calls. Kernels of the step
    /// may read its first `min_len` elements: declare the length they read.
    pub fn buffer<T: Pod>(&mut self, min_len: usize) -> Result<Buf<T>> {
        let min_bytes = min_len
            .checked_mul(std::mem::size_of::<T>())
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                Error::misuse(
                    "StepParams::buffer",
                    Misuse::Zero { what: "min_len" },
                    "a declared buffer holds at least one element of a sized type, and fewer than 2^64 bytes",
                )
            })?;
        let slot = self.table.ptr_slot_with::<T>(16, min_len)?;
        self.by_slot.resize(slot.index as usize + 1, None);
        self.by_slot[slot.index as usize] = Some(self.params.len());
        self.params.push(Param {
            slot: slot.erased(),
            min_bytes,
            bound: None,
            stand_in: stand_in::<T>,
            rebuild: rebuild::<T>,
        });
        Ok(Buf { slot })
    }

    /// Declares a scalar that changes between calls.
    pub fn scalar<T: SlotScalar>(&mut self) -> Result<Scalar<T>> {
        Ok(Scalar {
            slot: self.table.scalar_slot::<T>()?,
        })
    }

    /// Binds `buffer` to `param` for the calls that follow (kept alive while a replay may read
    /// it, whatever the caller drops). The closure's [`StepScope::buffer`](super::StepScope::buffer)
    /// gives it with the declared length, whatever its own.
    pub fn bind<T: Pod>(&mut self, param: &Buf<T>, buffer: &DeviceBuffer<T>) -> Result<()> {
        let index = self.index(param, "StepParams::bind")?;
        self.table.bind(&param.slot, buffer)?;
        // The closure sees the declared length (what the step's kernels may read), as it does
        // when its handles are rebuilt from the table: every run does the same work.
        let p = &mut self.params[index];
        let alloc = buffer.allocation().clone();
        p.bound = Some((p.rebuild)(buffer.as_raw(), p.min_bytes, alloc));
        Ok(())
    }

    /// [`StepParams::bind`] without the closure's handle: the table binds (and keeps the buffer
    /// alive), the handle is rebuilt from the table when the closure next runs
    /// ([`StepParams::materialize`]), with the declared length (what the step's kernels may
    /// read). As fast as a table binding.
    #[inline]
    pub(super) fn bind_lazily<T: Pod>(
        &mut self,
        param: &Buf<T>,
        buffer: &DeviceBuffer<T>,
    ) -> Result<()> {
        // The table refuses another table's slot: `param` is one of these parameters.
        self.table.bind(&param.slot, buffer)?;
        self.materialized = false;
        Ok(())
    }

    /// Rebuilds the closure's handle of every buffer bound lazily since it last ran, from the
    /// table's current bindings.
    pub(super) fn materialize(&mut self) -> Result<()> {
        if self.materialized {
            return Ok(());
        }
        for (k, p) in self.params.iter_mut().enumerate() {
            let Some((ptr, alloc)) = self.table.current_buffer(p.slot.index as usize) else {
                return Err(Error::misuse(
                    "Step::run",
                    Misuse::Unbound { slot: k },
                    format!("declared buffer {k} is not bound to a buffer the step can hand its closure"),
                ));
            };
            p.bound = Some((p.rebuild)(ptr, p.min_bytes, alloc));
        }
        self.materialized = true;
        Ok(())
    }

    /// Sets `param` to `value` for the calls that follow.
    pub fn set<T: SlotScalar>(&mut self, param: &Scalar<T>, value: T) -> Result<()> {
        self.table.set_scalar(&param.slot, value)
    }

    /// Where `param` is in `params`, if it is one of these parameters.
    pub(super) fn index<T>(&self, param: &Buf<T>, call: &'static str) -> Result<usize> {
        let slot = param.slot.erased();
        let index = self
            .table
            .owns(&slot)
            .then(|| self.by_slot.get(slot.index as usize))
            .flatten()
            .copied()
            .flatten();
        index.ok_or_else(|| {
            Error::misuse(
                call,
                Misuse::UnknownParam,
                "the parameter was declared for another step",
            )
        })
    }

    /// Lets go of the handles on the buffers bound (a captured step's closure does not run
    /// again; the table keeps what later calls bind as long as a replay may read it, the graph
    /// what it was captured with as long as it lives).
    pub(super) fn forget_bound(&mut self) {
        self.params.iter_mut().for_each(|p| p.bound = None);
        self.materialized = false;
    }

    /// The buffers bound now, as discovery's dynamic ranges (the bytes the kernels read).
    pub(super) fn dynamic(&self) -> Result<Vec<Dynamic>> {
        self.params
            .iter()
            .enumerate()
            .map(|(k, p)| match &p.bound {
                Some(b) => Ok(Dynamic {
                    base: b.base,
                    len: p.min_bytes as u64,
                }),
                None => Err(Error::misuse(
                    "Step::new",
                    Misuse::Unbound { slot: k },
                    format!("declared buffer {k} is not bound"),
                )),
            })
            .collect()
    }

    /// A stand-in for every declared buffer, as long as the one bound now.
    pub(super) fn stand_ins(&self) -> Result<Vec<Bound>> {
        self.params
            .iter()
            .map(|p| {
                let len = p.bound.as_ref().map_or(0, |b| b.len).max(1);
                (p.stand_in)(&self.ctx, len)
            })
            .collect()
    }
}
