//! The in-graph prelude: kernels graph-rt cannot rewrite (cuBLAS, cuDNN, precompiled cubins)
//! rebound on the device. Discovery (`discover/`) finds which parameter words of which kernel
//! nodes hold the addresses of the buffers the caller declares dynamic; the prelude marks those
//! nodes device-updatable and puts in the place of the graph's argument-table refresh a kernel
//! that refreshes the table and then writes every such word from the table's slots
//! (`cudaGraphKernelNodeSetParam`), every patched node following it with a full edge: no
//! kernel is added to the replay. A replay is then rebound by binding the table's slots,
//! as for kernels in table form (see [`ArgTable::launch`](crate::ArgTable::launch)).
//!
//! Where the shipped prelude cannot load (a GPU it is not compiled for, a driver that refuses
//! it) or the caller asks so, the same words are rewritten from the host before each launch
//! (per-node exec updates), and [`PreludeReport`] says which and why.
//!
//! Depends on `driver/`, `launch/`, `graph/`, `table/` and `discover/`.

mod install;

pub use install::{Prelude, PreludeMode, PreludeOptions, PreludeReport};
