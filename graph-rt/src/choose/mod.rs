//! Choosing how a graph is rebound between replays, by a cost model measured on the device:
//! table + PDL, table, in-graph prelude, host per-node updates, re-capture + exec update, or
//! copying inputs into a static graph's buffers. Pure: the model is fitted from measurements
//! (the calibration that takes them runs on the GPU), kept on disk per device, and asked for a
//! prediction of each mechanism's wall time per replay of a given graph — and, for graphs that
//! mix kernels graph-rt can rewrite with kernels it cannot, of each mix ([`predict_mixes`]).
//!
//! Depends on `error` only.

#[cfg(test)]
pub(crate) mod fixtures;
mod mix;
mod model;

pub use mix::{best_mix, predict_mixes, Mix, MixPrediction, NodeKind};
pub use model::{choose, Choice, CostModel, GraphShape, Line, Mechanism, Prediction};
