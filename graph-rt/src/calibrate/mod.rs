//! Calibration of the cost model on the device, and its cache on disk.
//!
//! [`calibrate`] times every rebinding mechanism on one workload, the chain of `add1` kernels
//! ([`chain_step`]), at a few chain lengths, in interleaved rounds, and fits the
//! [`CostModel`](crate::choose::CostModel) that [`choose`](crate::choose::choose) asks; [`cost_model`] keeps
//! that model in a file per device so that a process calibrates once per machine. A caller's
//! own workload for a mechanism joins the same rounds as an [`ExtraMechanism`].
//!
//! Depends on `driver`, `launch`, `graph`, `table`, `discover`, `prelude`, `choose` and
//! `error`; nothing depends on it.

mod cache;
mod device;
mod measure;
mod options;
mod workload;

pub use cache::{ModelSource, Recalibration};
pub use measure::{calibrate, cost_model};
pub use options::{CalibrateOptions, ChainSetup, ExtraMechanism};
pub use workload::{chain_shape, chain_step, ChainStep};

#[cfg(test)]
pub(crate) use cache::flag;
#[cfg(test)]
pub(crate) use workload::Chain;
