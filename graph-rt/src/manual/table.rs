//! The argument table: kernels in table form read their pointers and scalars from slots of a
//! table in device memory, so a graph captured once is rebound by host writes.
//!
//! # The workflow
//!
//! 1. Make an [`crate::ArgTable`] ([`crate::TableOptions`]: `capacity` slots of 8 bytes,
//!    `depth` host mirrors) and its slots: [`crate::ArgTable::ptr_slot`] (or
//!    [`crate::ArgTable::ptr_slot_with`], declaring an alignment and a minimum length),
//!    [`crate::ArgTable::scalar_slot`] (or [`crate::ArgTable::scalar_slot_with`], for integers
//!    that are always a multiple of a power of two).
//! 2. Load the kernels in table form: [`crate::table::TableKernel::load`] rewrites a kernel of any
//!    PTX with the PTX pass and loads it in one call.
//! 3. Capture a graph that begins with [`crate::ArgTable::record_refresh`] and then launches
//!    the table-form kernels with slots where the plain kernels take buffers
//!    ([`crate::table::TableKernel::record`]); instantiate it.
//! 4. Each replay: bind the slots ([`crate::ArgTable::bind`], [`crate::ArgTable::bind_view`],
//!    [`crate::ArgTable::set_scalar`], the unsafe [`crate::ArgTable::bind_raw`]), then
//!    [`crate::ArgTable::launch`]. No copy and no driver call but the launch (and a query of
//!    the stream's capture status).
//!
//! ```no_run
//! use graph_rt::{ArgTable, CaptureMode, Context, DeviceBuffer, LaunchConfig, Stream};
//! use graph_rt::{TableOptions};
//! use graph_rt::table::TableKernel;
//!
//! # fn main() -> graph_rt::Result<()> {
//! let ctx = Context::new(0)?;
//! let stream = Stream::new(&ctx)?;
//! let pdl = ctx.device().compute_capability()?.0 >= 9;
//! let options = graph_rt::ptx::Options { pdl, ..Default::default() };
//! let add1 = TableKernel::load(&ctx, graph_rt::kernels::CHAIN.ptx, "add1", &options)?;
//! let plain = LaunchConfig::for_elements(1024, 256);
//! let cfg = if pdl { plain.programmatic_stream_serialization() } else { plain };
//! let mut table = ArgTable::new(&ctx, TableOptions::default())?;
//! let (x, t, y) = (table.ptr_slot::<f32>()?, table.ptr_slot::<f32>()?, table.ptr_slot::<f32>()?);
//! table.bind(&t, &DeviceBuffer::<f32>::alloc(&ctx, 1024)?)?; // bound once
//! let exec = stream
//!     .capture(CaptureMode::Global, |s| {
//!         table.record_refresh(s)?;
//!         // SAFETY: add1 reads 1024 floats through its first slot and writes 1024 through
//!         // its second; every slot is bound to a buffer of 1024 floats before each launch.
//!         unsafe {
//!             add1.record(s, &cfg, (&x, &t, 1024i32))?;
//!             add1.record(s, &cfg, (&t, &y, 1024i32))?;
//!         }
//!         Ok(())
//!     })?
//!     .instantiate()?;
//! for step in 0..10 {
//!     let input = DeviceBuffer::from_host(&ctx, &vec![step as f32; 1024])?;
//!     let output = DeviceBuffer::<f32>::alloc(&ctx, 1024)?;
//!     table.bind(&x, &input)?;
//!     table.bind(&y, &output)?;
//!     table.launch(&exec, &stream)?; // input and output are kept until the replay is done
//! }
//! stream.synchronize()?;
//! # Ok(()) }
//! ```
//!
//! # What binding checks, and what a launch does
//!
//! [`crate::ArgTable::bind`] checks the slot's table, its element type, the context, and the
//! alignment and minimum length the slot declares; nothing else, and an error changes
//! nothing. Binding is a host write and bookkeeping, no driver call; each launch reads the
//! bindings made before it, whatever launches are still in flight.
//!
//! The graph's first node, recorded by [`crate::ArgTable::record_refresh`], is the shipped
//! `table_refresh` kernel: it copies the launch's bindings from a ring of mapped host mirrors
//! into the device table and acknowledges each mirror by writing into mapped host memory. A
//! mirror is reused only once acknowledged, so rebinding while replays are in flight is
//! correct by construction; when every mirror is in flight the launch waits, counted in
//! [`crate::ArgTable::stats`]. A launch writes into its mirror only the 64-byte blocks changed
//! since that mirror was last written.
//!
//! Bound buffers live until the launches that may read them have finished. A slot remembers
//! its current binding and the three before it, so double or triple buffering costs no
//! reference counting; [`crate::ArgTable::trim`] lets go of the earlier ones.
//!
//! One stream per table: every launch and refresh through a table goes to the stream it first
//! used, and another stream is an error (the stream's order is what keeps each launch's
//! bindings its own). Execs and eager launches may share a table on that stream.
//!
//! # Eager launches and scalar slots
//!
//! Kernels in table form also launch eagerly after [`crate::ArgTable::refresh`]; the first
//! kernel after it must not be launched programmatically (it reads what the refresh writes).
//! Scalars read from slots are set with [`crate::ArgTable::set_scalar`]. Here the shipped
//! [`crate::kernels::AXPY_TABLE`], whose `axpy_f32` reads all four of its arguments from
//! slots:
//!
//! ```no_run
//! # use graph_rt::{ArgTable, Context, DeviceBuffer, LaunchConfig, Module, Stream, TableOptions};
//! # fn main() -> graph_rt::Result<()> {
//! # let ctx = Context::new(0)?;
//! # let stream = Stream::new(&ctx)?;
//! let axpy = Module::from_ptx(&ctx, graph_rt::kernels::AXPY_TABLE.ptx)?.function("axpy_f32")?;
//! let mut table = ArgTable::new(&ctx, TableOptions::default())?;
//! let (a, x) = (table.scalar_slot::<f32>()?, table.ptr_slot::<f32>()?);
//! let (y, n) = (table.ptr_slot::<f32>()?, table.scalar_slot::<i32>()?);
//! let (dx, dy) = (DeviceBuffer::from_host(&ctx, &[1.0f32; 4096])?, DeviceBuffer::from_host(&ctx, &[2.0f32; 4096])?);
//! table.set_scalar(&a, 3.0)?;
//! table.set_scalar(&n, 4096)?;
//! table.bind(&x, &dx)?;
//! table.bind(&y, &dy)?;
//! table.refresh(&stream)?;
//! // SAFETY: axpy_f32's table form reads a, x, y and n through their slots, bound above to
//! // 4096 floats each.
//! unsafe { stream.launch(&axpy, &LaunchConfig::for_elements(4096, 256), (&a, &x, &y, &n))? };
//! assert_eq!(dy.read_on(&stream)?[0], 5.0);
//! # Ok(()) }
//! ```
//!
//! # Prepared binding sets
//!
//! Buffers that come back (double buffering, a few decode buffers in rotation) go faster as
//! prepared sets: [`crate::ArgTable::binding_set`] takes the same binding calls, checked once,
//! and [`crate::table::BindingSetBuilder::build`] makes a [`crate::table::BindingSet`];
//! [`crate::ArgTable::bind_set`] then costs a copy of its words whatever the number of slots.
//! On an H200, a thousand slots rebound and launched took 1.15–1.35× the host time of a raw
//! write of every pointer + launch, against 2–3.6× bound one by one.
//!
//! ```no_run
//! # use graph_rt::{ArgTable, DeviceBuffer, GraphExec, Stream};
//! # use graph_rt::table::{BindingSet, PtrSlot};
//! # fn sets(table: &mut ArgTable, slots: &[PtrSlot<f32>], a: &[DeviceBuffer<f32>], b: &[DeviceBuffer<f32>], exec: &GraphExec, stream: &Stream) -> graph_rt::Result<()> {
//! let mut prepare = |bufs: &[DeviceBuffer<f32>]| -> graph_rt::Result<BindingSet> {
//!     let mut set = table.binding_set();
//!     for (slot, buf) in slots.iter().zip(bufs) {
//!         set.bind(slot, buf)?; // checked here, once
//!     }
//!     set.build()
//! };
//! let (even, odd) = (prepare(a)?, prepare(b)?);
//! for step in 0..100 {
//!     table.bind_set(if step % 2 == 0 { &even } else { &odd })?;
//!     table.launch(exec, stream)?;
//! }
//! # Ok(()) }
//! # fn main() {}
//! ```
//!
//! # Table forms and the PTX pass
//!
//! A [`crate::table::TableKernel`] holds a table-form kernel with the signature the PTX pass reported
//! for it, and checks every launch's arguments against it: a slot where it reads one (a
//! pointer slot, or a scalar slot of the right size; alignment at least the kernel's; all of
//! one table), values elsewhere. [`crate::table::TableKernel::load`] runs the pass at load time;
//! [`crate::table::TableKernel::from_signature`] takes a pass run earlier (a build script, say).
//! [`crate::kernels::CHAIN_TABLE`], [`crate::kernels::CHAIN_TABLE_PDL`],
//! [`crate::kernels::AXPY_TABLE`], [`crate::kernels::AXPY_TABLE_PDL`] and the layer kernels'
//! [`crate::kernels::LAYER_TABLE`] / [`crate::kernels::LAYER_TABLE_PDL`] are shipped table
//! forms, made by the pass.
//!
//! The pass ([`crate::ptx`], crate `graph-rt-ptx`, usable from a build script; and the CLI's
//! `graph-rt ptx indirect IN -o OUT [--kernels …] [--params …] [--scalars …] [--pdl]` and
//! `graph-rt ptx inspect IN`) rewrites the chosen parameters of the chosen kernels of any PTX
//! (Triton 3.3–3.6, nvcc/NVRTC) so that each takes the address of an argument-table slot,
//! loaded once at entry. By default it chooses every pointer it can prove is one (Triton's
//! `.ptr` parameters but its trailing scratch pointers; nvcc `.u64` parameters used only as
//! addresses), and scalars on request ([`crate::ptx::Options`]). With `pdl` the entry is
//! `griddepcontrol.launch_dependents`, the slot loads, then `griddepcontrol.wait` (the target
//! raised to `sm_90` where lower, and `ld.global.nc` made coherent). Everything else is kept
//! byte for byte; a use it does not understand is refused, naming the kernel, the parameter
//! and the line. It reports each kernel's new signature: which parameters became slots, of
//! what type and alignment.
