//! Triton kernels: loaded from what Triton 3.3–3.6 write to their cache (metadata JSON, PTX or
//! cubin, TTIR), launched as Triton's own launcher launches them, eagerly or into captures, in
//! their original form or rewritten by the PTX pass to read their arguments from an
//! [`ArgTable`](crate::ArgTable); every argument checked against the specialization Triton
//! compiled for.
//!
//! Depends on `driver/`, `launch/`, `graph/` and `table/`.

mod arg;
mod check;
mod files;
mod kernel;
mod meta;

pub use arg::TritonArg;
pub use files::TritonFiles;
pub use kernel::{TritonForm, TritonKernel, TritonParam};
pub use meta::{ttir_args, TritonMetadata, TtirArg};

#[cfg(test)]
mod tests;
