//! The device-resident argument table: kernels read their pointers and scalars from slots of a
//! table in device memory, so that a captured graph is rebound to new buffers and values by
//! writing a few bytes on the host, with no driver call.
//!
//! Depends on `driver/`, `launch/` and `graph/`.

mod bind;
mod changes;
mod keep;
mod kernel;
mod ledger;
mod order;
mod owners;
mod refresh;
mod ring;
mod set;
mod slot;
#[allow(clippy::module_inception)]
mod table;
mod timeline;

pub use kernel::{TableKernel, TableParam};
pub use set::{BindingSet, BindingSetBuilder};
pub use slot::{PtrSlot, ScalarSlot, SlotRef, SlotScalar};
pub use table::{ArgTable, TableOptions, TableStats};
