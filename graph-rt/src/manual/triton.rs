//! Triton kernels: loaded from what Triton writes to its cache, launched as Triton's own
//! launcher launches them, eagerly or into captures, in their original form or in table form.
//!
//! # Loading
//!
//! [`crate::triton::TritonFiles::read`]`(dir, kernel)` takes what Triton 3.3–3.6 write to their cache
//! for a kernel: `<kernel>.json` (the metadata), `.cubin` and/or `.ptx`, and `.ttir`.
//! [`crate::triton::TritonKernel::load`]`(ctx, &files, form)` loads it in one of two forms
//! ([`crate::triton::TritonForm`]):
//!
//! * `TritonForm::Original`: Triton's cubin, or its PTX where the cubin does not load on this
//!   GPU ([`crate::triton::TritonKernel::from_cubin`] says which);
//! * `TritonForm::Table(options)`: the PTX pass's table form (see [`super::table`]), whose
//!   pointers are read from argument-table slots; with `pdl` in the options its launches are
//!   programmatic.
//!
//! # Launching
//!
//! Launches ([`crate::triton::TritonKernel::launch`], [`crate::triton::TritonKernel::record`] into a capture)
//! do what Triton's launcher does: `32 × num_warps` threads a block, `shared` bytes of dynamic
//! shared memory (opted in above 48 KiB), `num_ctas` CTAs a program as a cluster (Triton 3.3's
//! `cluster_dims` too), global and profile scratch buffers of the metadata's sizes made once per
//! grid size, and the cooperative and PDL launch flags. Eager launches share scratch per
//! stream and grid size; each recorded node needs its own, made before the capture by
//! [`crate::triton::TritonKernel::reserve_scratch`] (nothing to do for kernels without scratch). The
//! first kernel after an eager [`crate::ArgTable::refresh`] is launched with
//! [`crate::triton::TritonKernel::launch_after_refresh`]; in captures `record` does that by itself
//! after `record_refresh`.
//!
//! Arguments ([`crate::triton::TritonArg`]: buffers, views, table slots, scalars of the parameter's
//! width, fp16 / bf16 as bits, `i1` as a byte) are checked against the PTX parameters and the
//! specialization Triton compiled for, read from the TTIR (`tt.divisibility = 16`) or given by
//! the caller ([`crate::triton::TritonKernel::load_with`]). A pointer not 16-byte aligned, an integer
//! not a multiple of 16, a pointer slot declaring less alignment, or a scalar slot not
//! restricted to multiples of 16 ([`crate::ArgTable::scalar_slot_with`]) is an error, and
//! nothing is launched.
//!
//! # Example
//!
//! Triton's `add_kernel(x, y, out, n)` (1024 elements a program), eagerly as Triton built it,
//! then captured once in its PDL table form and replayed on fresh buffers through the table:
//!
//! ```no_run
//! use graph_rt::{ArgTable, CaptureMode, Context, DeviceBuffer, Stream, TableOptions};
//! use graph_rt::triton::{TritonArg, TritonFiles, TritonForm, TritonKernel};
//!
//! # fn main() -> graph_rt::Result<()> {
//! # let dir = std::path::Path::new("triton-fixtures/add"); // a folder of Triton's cache
//! let ctx = Context::new(0)?;
//! let stream = Stream::new(&ctx)?;
//! let files = TritonFiles::read(dir, "add_kernel")?;
//! let original = TritonKernel::load(&ctx, &files, TritonForm::Original)?;
//! let pdl = graph_rt::ptx::Options { pdl: true, ..Default::default() };
//! let table_form = TritonKernel::load(&ctx, &files, TritonForm::Table(pdl))?;
//! let n = 4096;
//! let fresh = || DeviceBuffer::from_host(&ctx, &vec![1.0f32; n]);
//! let (x, y, out) = (fresh()?, fresh()?, fresh()?);
//!
//! // Eager, as Triton's launcher would launch it.
//! let b = TritonArg::buffer;
//! // SAFETY: three buffers of n floats; n as the kernel was compiled for (a multiple of 16).
//! unsafe { original.launch(&stream, [4, 1, 1], &[b(&x), b(&y), b(&out), TritonArg::i32(n as i32)])? };
//!
//! // Captured once in table form, rebound every replay.
//! let mut table = ArgTable::new(&ctx, TableOptions::default())?;
//! let (sx, sy, so) = (table.ptr_slot::<f32>()?, table.ptr_slot::<f32>()?, table.ptr_slot::<f32>()?);
//! let p = TritonArg::ptr_slot;
//! let exec = stream
//!     .capture(CaptureMode::Global, |s| {
//!         table.record_refresh(s)?;
//!         // SAFETY: every slot is bound to a buffer of n floats before each launch.
//!         unsafe { table_form.record(s, [4, 1, 1], &[p(&sx), p(&sy), p(&so), TritonArg::i32(n as i32)])? };
//!         Ok(())
//!     })?
//!     .instantiate()?;
//! for _ in 0..10 {
//!     let (x, y, out) = (fresh()?, fresh()?, fresh()?);
//!     table.bind(&sx, &x)?;
//!     table.bind(&sy, &y)?;
//!     table.bind(&so, &out)?;
//!     table.launch(&exec, &stream)?;
//! }
//! stream.synchronize()?;
//! # Ok(()) }
//! ```
