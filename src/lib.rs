//! graph-rt: a CUDA runtime with safe CUDA-graph wrappers, for Rust ML frameworks.
//!
//! This is the package to depend on. It re-exports the safe runtime ([`graph_rt_core`]), the
//! raw driver bindings as [`sys`], and the kernels graph-rt ships as [`kernels`].
//!
//! ```no_run
//! use graph_rt::{Context, DeviceBuffer, LaunchConfig, Module, Stream};
//!
//! # fn main() -> graph_rt::Result<()> {
//! let ctx = Context::new(0)?;
//! let stream = Stream::new(&ctx)?;
//! let add1 = Module::from_ptx(&ctx, graph_rt::kernels::CHAIN.ptx)?.function("add1")?;
//! let x = DeviceBuffer::from_host(&ctx, &[1.0f32; 4096])?;
//! let mut y = DeviceBuffer::<f32>::alloc(&ctx, 4096)?;
//! // SAFETY: add1(const float* x, float* y, int n) touches n elements of each buffer.
//! unsafe { stream.launch(&add1, &LaunchConfig::for_elements(4096, 256), (&x, &mut y, 4096i32))? };
//! stream.synchronize()?;
//! assert_eq!(y.to_vec()?, vec![2.0; 4096]);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub use graph_rt_core::*;
pub use graph_rt_kernels as kernels;

/// The manual: graph-rt's workflows, each with an example that compiles (start here).
pub mod manual;
