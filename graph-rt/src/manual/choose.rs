//! Choosing how a graph is rebound between replays, from a cost model measured on the device.
//!
//! The mechanisms ([`crate::choose::Mechanism`]) are table + PDL, table, the in-graph prelude, host
//! per-node updates, re-capture + exec update, and copying inputs into a static graph's
//! buffers. Which is fastest depends on the graph (how many kernel nodes, which of them are in
//! table form, how many words change, how many bytes a static graph would copy) and on the
//! machine.
//!
//! # The cost model
//!
//! [`crate::calibrate::cost_model`]`(&stream, &`[`crate::calibrate::CalibrateOptions`]`::default())` measures every
//! mechanism on chains of 10 / 50 / 200 / 1000 `add1` kernels in interleaved rounds, once per
//! device: the model is cached as `cost-model-<device UUID>.json` under `GRAPH_RT_CACHE_DIR`,
//! `$XDG_CACHE_HOME/graph-rt` or `~/.cache/graph-rt`, and `GRAPH_RT_RECALIBRATE=1` (or
//! `CalibrateOptions::recalibrate`) measures anew. It returns the [`crate::choose::CostModel`] and a
//! [`crate::calibrate::ModelSource`] saying whether it was read or measured, and why.
//! [`crate::calibrate::calibrate`] measures without the cache; a workload of your own joins the same
//! rounds as an [`crate::calibrate::ExtraMechanism`].
//!
//! # The choice
//!
//! [`crate::choose::choose`]`(&shape, &model, override)` predicts each mechanism's wall time per
//! replay of a graph of the given [`crate::choose::GraphShape`] (piecewise linear in kernel nodes,
//! plus the copy for static graphs), picks the fastest that applies, and reports every
//! alternative, or why it does not apply ([`crate::choose::Choice`], [`crate::choose::Prediction`]). An
//! override picks a mechanism instead, and is an error where that mechanism cannot rebind
//! such a graph or was not measured.
//!
//! ```no_run
//! use graph_rt::{Context};
//! use graph_rt::calibrate::{cost_model, CalibrateOptions};
//! use graph_rt::choose::{choose, GraphShape, Mechanism};
//! use graph_rt::{Stream};
//! use graph_rt::foreign::Prelude;
//!
//! # fn main() -> graph_rt::Result<()> {
//! let ctx = Context::new(0)?;
//! let stream = Stream::new(&ctx)?;
//! let (model, source) = cost_model(&stream, &CalibrateOptions::default())?;
//! println!("cost model of {}: {source}", model.device);
//! // A graph of 48 kernels: 32 shipped ones in table form, 16 cuBLAS ones found by discovery.
//! let shape = GraphShape {
//!     kernel_nodes: 48,
//!     table_nodes: 32,
//!     foreign_nodes: 16,
//!     words: 50,
//!     copy_bytes: 2 * 16 * 4096 * 4,
//!     pdl: ctx.device().compute_capability()?.0 >= 9,
//!     prelude: Prelude::device_support(&ctx).is_ok(),
//! };
//! let choice = choose(&shape, &model, None)?;
//! println!("{choice}"); // the mechanism chosen, then every prediction
//! for p in &choice.predictions {
//!     match p.us {
//!         Ok(us) => println!("{}: {us:.1} µs a replay", p.mechanism),
//!         Err(why) => println!("{}: does not apply ({why})", p.mechanism),
//!     }
//! }
//! let forced = choose(&shape, &model, Some(Mechanism::HostUpdate))?;
//! assert!(forced.overridden);
//! # Ok(()) }
//! ```
//!
//! The model is measured on chains of one kernel kind. For a graph that mixes kernels graph-rt
//! can rewrite with kernels it cannot, [`crate::choose::predict_mixes`] predicts each mix —
//! table forms with the prelude for the foreign kernels, the prelude everywhere, host updates —
//! node by node from the lines' slopes, with one rule the chains do not show: after a cuBLAS
//! kernel, which does not let its dependents start early, a table-form kernel's slot loads
//! cannot hide behind PDL. On the H200's calibration it predicts the prelude everywhere for the
//! layer stack, the mix measured fastest there (the repository's `layers` bench prints both).
//! [`crate::calibrate::chain_step`] and [`crate::calibrate::chain_shape`] give the
//! calibration's own workload and its shape, to compare the mechanisms on it.
