//! Choosing how a graph is rebound between replays, by a cost model measured on the device:
//! table + PDL, table, in-graph prelude, host per-node updates, re-capture + exec update, or
//! copying inputs into a static graph's buffers. Pure: the model is fitted from measurements
//! (the calibration that takes them runs on the GPU), kept on disk per device, and asked for a
//! prediction of each mechanism's wall time per replay of a given graph.
//!
//! Depends on `error` only.

mod model;

pub use model::{choose, Choice, CostModel, GraphShape, Line, Mechanism, Prediction};
