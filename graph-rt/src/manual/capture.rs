//! Capture once, replay many times, and rebind the replay without capturing again: node by
//! node, or by a whole-graph update from a new capture. What graphs and execs keep alive.
//!
//! # Capture and replay
//!
//! [`crate::Stream::capture`] records into a [`crate::Graph`] what its closure launches
//! through the [`crate::CaptureScope`] it is given: kernels, copies, fills, events, and work
//! forked onto other streams ([`crate::CaptureScope::fork`]) and joined back
//! ([`crate::CaptureScope::join`]). Each scope operation returns a [`crate::CapturedNode`]
//! that [`crate::Graph::node`] resolves to a [`crate::Node`] once the capture has ended. A
//! call that capture does not allow (synchronize, a synchronous copy, a plain allocation,
//! querying an event of the capture) is an [`crate::Error::Capture`] naming the call, and the
//! capture is ended, also when the closure panics. [`crate::CaptureMode`] says where such calls
//! are refused (every thread, this thread, nowhere).
//!
//! [`crate::Graph::instantiate`] gives a [`crate::GraphExec`] to launch on any stream of the
//! context. Code that should run both eagerly and in a capture takes an `&impl`
//! [`crate::Launcher`]: streams and capture scopes both launch.
//!
//! ```no_run
//! use graph_rt::{CaptureMode, Context, DeviceBuffer, LaunchConfig, Module, Stream};
//!
//! # fn main() -> graph_rt::Result<()> {
//! let ctx = Context::new(0)?;
//! let stream = Stream::new(&ctx)?;
//! let add1 = Module::from_ptx(&ctx, graph_rt::kernels::CHAIN.ptx)?.function("add1")?;
//! let n = 1 << 20;
//! let mut x = DeviceBuffer::from_host(&ctx, &vec![1.0f32; n])?;
//! let (mut y, mut z) = (DeviceBuffer::<f32>::alloc(&ctx, n)?, DeviceBuffer::<f32>::alloc(&ctx, n)?);
//! let cfg = LaunchConfig::for_elements(n, 256);
//! let graph = stream.capture(CaptureMode::Global, |s| {
//!     // SAFETY: add1(const float* x, float* y, int n) touches n elements of each buffer.
//!     unsafe {
//!         s.launch(&add1, &cfg, (&x, &mut y, n as i32))?;
//!         s.launch(&add1, &cfg, (&y, &mut z, n as i32))?;
//!     }
//!     Ok(())
//! })?;
//! let exec = graph.instantiate()?; // the graph keeps x, y, z and the module alive
//! for step in 0..100 {
//!     x.write_on(&stream, &vec![step as f32; n])?;
//!     exec.launch(&stream)?;
//!     assert_eq!(z.read_on(&stream)?[0], step as f32 + 2.0);
//! }
//! # Ok(()) }
//! ```
//!
//! Graphs can also be built node by node ([`crate::Graph::new`], then kernel, copy, memset,
//! empty, event record and wait, child graph, host callback, graph memory alloc and free
//! nodes: [`crate::Graph::add_kernel`] and its neighbours), walked ([`crate::Graph::nodes`],
//! [`crate::Graph::edges`], [`crate::Graph::node_kind`]), cloned ([`crate::Graph::try_clone`];
//! [`crate::Graph::node_in_clone`] finds a node's copy) and written as DOT
//! ([`crate::Graph::write_dot`]).
//!
//! # Rebinding node by node
//!
//! An exec's nodes change in place, for the launches that follow:
//! [`crate::GraphExec::set_kernel_args`] (checked against the kernel's parameter layout: a
//! wrong count or size is an error and the exec keeps its old arguments),
//! [`crate::GraphExec::set_kernel_node`] (the grid too), [`crate::GraphExec::set_enabled`],
//! [`crate::GraphExec::set_copy`] and [`crate::GraphExec::set_fill_u32`].
//!
//! ```no_run
//! # use graph_rt::{CaptureMode, Context, DeviceBuffer, LaunchConfig, Module, Stream};
//! # fn main() -> graph_rt::Result<()> {
//! # let ctx = Context::new(0)?;
//! # let stream = Stream::new(&ctx)?;
//! # let add1 = Module::from_ptx(&ctx, graph_rt::kernels::CHAIN.ptx)?.function("add1")?;
//! let n = 4096;
//! let (x, mut y) = (DeviceBuffer::<f32>::zeroed(&ctx, n)?, DeviceBuffer::<f32>::alloc(&ctx, n)?);
//! let cfg = LaunchConfig::for_elements(n, 256);
//! let mut first = None;
//! let graph = stream.capture(CaptureMode::Global, |s| {
//!     // SAFETY: add1(const float* x, float* y, int n) touches n elements of each buffer.
//!     first = Some(unsafe { s.launch(&add1, &cfg, (&x, &mut y, n as i32))? });
//!     Ok(())
//! })?;
//! let node = graph.node(first.expect("captured"))?;
//! let mut exec = graph.instantiate()?;
//! for _ in 0..10 {
//!     // A fresh input and output for this replay; no re-capture.
//!     let x2 = DeviceBuffer::from_host(&ctx, &vec![1.0f32; n])?;
//!     let mut y2 = DeviceBuffer::<f32>::alloc(&ctx, n)?;
//!     // SAFETY: as above; the exec keeps x2 and y2 alive while a launch may read them.
//!     unsafe { exec.set_kernel_args(node, (&x2, &mut y2, n as i32))? };
//!     exec.launch(&stream)?;
//! }
//! stream.synchronize()?;
//! # Ok(()) }
//! ```
//!
//! # Rebinding by a new capture
//!
//! [`crate::GraphExec::update`] takes a graph captured anew (the same work over other
//! buffers): it updates the exec in place or, when the topology changed, instantiates the new
//! graph in its place, and says which ([`crate::ExecUpdate`], with the
//! [`crate::UpdateFailure`] that made it re-instantiate); [`crate::GraphExec::try_update`]
//! only tries in place. Node handles survive either way: after an in-place update the exec
//! takes the nodes of its own graph and of the update's graph; after a re-instantiation, those
//! of the new graph and of the one it ran before, paired by the order graph-rt made the nodes
//! in (or, for graphs with nodes graph-rt did not make, when both are chains). Where the
//! pairing is not known the call is refused with [`crate::Error::NodeIdentityUnknown`].
//! Re-instantiating waits for the old exec's last launch (their launches would not be ordered
//! otherwise); CUDA allows one exec at a time for graphs with device-updatable or memory
//! nodes.
//!
//! ```no_run
//! # use graph_rt::{CaptureMode, Context, DeviceBuffer, ExecUpdate, Graph, LaunchConfig, Module, Stream};
//! # fn main() -> graph_rt::Result<()> {
//! # let ctx = Context::new(0)?;
//! # let stream = Stream::new(&ctx)?;
//! # let add1 = Module::from_ptx(&ctx, graph_rt::kernels::CHAIN.ptx)?.function("add1")?;
//! # let n = 4096;
//! let cfg = LaunchConfig::for_elements(n, 256);
//! let capture = |x: &DeviceBuffer<f32>, y: &DeviceBuffer<f32>| -> graph_rt::Result<Graph> {
//!     stream.capture(CaptureMode::Global, |s| {
//!         // SAFETY: add1 over n floats of two distinct n-float buffers.
//!         unsafe { s.launch(&add1, &cfg, (x, y, n as i32))? };
//!         Ok(())
//!     })
//! };
//! let alloc = || DeviceBuffer::<f32>::zeroed(&ctx, n);
//! let mut exec = capture(&alloc()?, &alloc()?)?.instantiate()?;
//! let (x2, y2) = (alloc()?, alloc()?);
//! match exec.update(&capture(&x2, &y2)?)? {
//!     ExecUpdate::Updated => {}
//!     ExecUpdate::Reinstantiated(why) => eprintln!("re-instantiated: {why}"),
//! }
//! exec.launch(&stream)?;
//! # Ok(()) }
//! ```
//!
//! # Ownership
//!
//! A graph keeps alive every buffer, module, event and callback its nodes use, and so does
//! every exec made from it and every rebinding: drop your handles whenever you like, and
//! replays still read valid memory. What a rebinding or an update replaces is released once
//! the launches made before it have finished (an event recorded after the last launch tells),
//! so an exec rebound to fresh buffers every step holds a bounded set.
//!
//! Dropping an exec never blocks: it is destroyed at once, and what it used is parked on its
//! context behind an event, released by [`crate::Context::poll`],
//! [`crate::Context::synchronize`], later instantiations, or the context's teardown (a
//! running 1000-node exec drops in microseconds). Graphs and execs are `Send` but not `Sync`,
//! as CUDA requires.
