//! The overhead profiler: keep a graph only where it wins ([`crate::profile`]).
//!
//! A graph that can be captured is not always worth deploying: it loses when its one-time cost
//! (two captures, discovery, the prelude, instantiation, upload) is never paid back over the
//! calls it will make, when its kernels are long enough that eager launches hide behind them,
//! or when it beats eager by less than the noise. [`crate::profile::Profiled`] makes a
//! [`crate::step::Step`] and measures it both ways — CUDA events around each call, warm-up
//! first, the modes interleaved, medians and spreads — and keeps the graph only where it beats
//! eager by more than twice the noise of the two medians' difference (each median's standard
//! error from the median absolute deviation, so that a call held up on the host does not make a
//! faster graph look like noise) once its one-time cost and the memory it holds are charged
//! over [`crate::profile::Policy::expected_calls`]; otherwise the graph is freed and the step
//! runs eagerly. A graph kept off by its one-time cost alone — one host-timed build, which the
//! first build in a process inflates — is built twice more and the median build decides
//! ([`crate::profile::hinges_on_one_time`]). Every decision has a reason code, is logged
//! with `tracing`, and is in the step's [`crate::profile::ProfileReport`]
//! ([`crate::profile::summary`] sums many up: a table, and JSON).
//!
//! A step declared re-runnable ([`crate::profile::ProfileOptions::rerunnable`]: idempotent
//! apart from its outputs) is measured at once, before [`crate::profile::Profiled::new`]
//! returns; otherwise its first calls are the samples, the modes taking turns. Decisions
//! persist in a file ([`crate::profile::ProfileOptions::store`]) keyed by step name, key, a
//! fingerprint of the captured work (kernels by name, launch dimensions), device, driver and
//! graph-rt build: a second process profiles nothing. In production one call in
//! [`crate::profile::ProfileOptions::sample_every`] is timed by events read without
//! synchronizing, and a kept mode that drifts from its profiled median is profiled again.
//!
//! ```no_run
//! use graph_rt::profile::{Mode, ProfileOptions, Profiled};
//! use graph_rt::step::{StepOptions, StepParams};
//! use graph_rt::{kernels, Context, DeviceBuffer, LaunchConfig, Module, Stream};
//!
//! # fn main() -> graph_rt::Result<()> {
//! let n = 4096;
//! let ctx = Context::new(0)?;
//! let stream = Stream::new(&ctx)?;
//! let add1 = Module::from_ptx(&ctx, kernels::CHAIN.ptx)?.function("add1")?;
//! let mut p = StepParams::new(&ctx, 4)?;
//! let (x, y) = (p.buffer::<f32>(n)?, p.buffer::<f32>(n)?);
//! p.bind(&x, &DeviceBuffer::zeroed(&ctx, n)?)?;
//! p.bind(&y, &DeviceBuffer::zeroed(&ctx, n)?)?;
//! let options = ProfileOptions {
//!     rerunnable: true, // may run extra times: decided before `new` returns
//!     store: Some("decisions.json".into()),
//!     ..ProfileOptions::default()
//! };
//! let cfg = LaunchConfig::for_elements(n, 256);
//! let mut step = Profiled::new("decode", &stream, p, StepOptions::default(), options, |s| {
//!     let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
//!     // SAFETY: add1 over n floats of two distinct n-float buffers, then in place.
//!     unsafe { s.launch(&add1, &cfg, (&xb, &yb, n as i32))? };
//!     for _ in 0..39 {
//!         unsafe { s.launch(&add1, &cfg, (&yb, &yb, n as i32))? };
//!     }
//!     Ok(())
//! })?;
//! println!("{}", step.report()); // mode, reason, eager and graph medians, break-even calls
//! if step.mode() == Mode::Graph { /* 40 tiny kernels: the graph wins */ }
//! for _ in 0..100 {
//!     step.bind(&y, &DeviceBuffer::zeroed(&ctx, n)?)?;
//!     step.run()?;
//! }
//! # Ok(()) }
//! ```
//!
//! A step given as segments ([`crate::profile::Segmented`]), one of which synchronizes with the
//! host, is split into graph and eager runs by measured cost ([`crate::profile::partition`]:
//! exact, time saved minus each graph's one-time cost and a memory charge).
//!
//! What the profiler does not do yet: modes beyond eager and the step's graph (a static-copy
//! graph, a graph re-captured per shape), shapes changing between calls (one step per shape, or
//! a key per shape bucket), declared parameters in a segmented step (its segments work on fixed
//! buffers), and several GPUs.
