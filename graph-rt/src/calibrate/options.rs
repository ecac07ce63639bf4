//! What a calibration measures: chain sizes, rounds, mechanisms the caller adds, and where
//! [`cost_model`](super::cost_model) keeps its file.

use std::fmt;
use std::path::PathBuf;

use super::workload::ChainStep;
use crate::choose::Mechanism;
use crate::driver::Stream;
use crate::error::{Error, Misuse, Result};

/// Builds a mechanism's chain of the given number of kernel nodes on the stream, and returns
/// its step (see [`ExtraMechanism`]).
pub type ChainSetup = Box<dyn Fn(&Stream, usize) -> Result<ChainStep>>;

/// A mechanism the caller measures with a workload of its own, in the same interleaved rounds
/// as the built-in ones (a mechanism built outside graph-rt, or a variant of a built-in one).
///
/// For each chain size N of the calibration, [`calibrate`](super::calibrate) calls `setup` once
/// with the calibration's stream and N, before anything is timed. The step it returns must do
/// what the built-in steps do (see [`chain_step`](super::chain_step)): on a chain of N kernels
/// of `add1` over N + 1 buffers of 4096 floats, rebind every pointer to another buffer set
/// (alternate two sets) and launch, queuing the work on the stream it is given and returning
/// without synchronizing; calibrate times the step and a synchronization of that stream. The
/// step is dropped, with what it owns, once size N is measured.
///
/// An extra mechanism that calibrate also measures itself replaces the built-in measurement.
///
/// ```no_run
/// use graph_rt::{Stream};
/// use graph_rt::calibrate::{chain_step, CalibrateOptions, ExtraMechanism};
/// use graph_rt::choose::Mechanism;
///
/// // Another workload measured as the prelude: here, the host-update chain.
/// let prelude = ExtraMechanism::new(Mechanism::Prelude, |stream: &Stream, nodes: usize| {
///     chain_step(stream, Mechanism::HostUpdate, nodes)
/// });
/// let options = CalibrateOptions { extra: vec![prelude], ..Default::default() };
/// ```
pub struct ExtraMechanism {
    /// The mechanism measured.
    pub mechanism: Mechanism,
    /// Its chain, per size.
    pub setup: ChainSetup,
}

impl ExtraMechanism {
    /// `mechanism`, measured on the chains `setup` builds.
    pub fn new(
        mechanism: Mechanism,
        setup: impl Fn(&Stream, usize) -> Result<ChainStep> + 'static,
    ) -> Self {
        Self {
            mechanism,
            setup: Box::new(setup),
        }
    }
}

impl fmt::Debug for ExtraMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtraMechanism")
            .field("mechanism", &self.mechanism)
            .finish_non_exhaustive()
    }
}

/// What [`calibrate`](super::calibrate) measures, and where [`cost_model`](super::cost_model)
/// caches the result.
#[derive(Debug)]
pub struct CalibrateOptions {
    /// Kernel nodes of the chains measured (default 10, 50, 200 and 1000): the points of the
    /// model's lines.
    pub sizes: Vec<usize>,
    /// Measured rounds at 200 nodes and more (default 15). Shorter chains, cheaper and noisier,
    /// take 200 / N times as many (at most ten times); a fifth more (at least two) run first as
    /// warm-up.
    pub rounds: usize,
    /// Mechanisms measured with the caller's workloads (default none).
    pub extra: Vec<ExtraMechanism>,
    /// The directory of [`cost_model`](super::cost_model)'s file, instead of the one the
    /// environment names (`GRAPH_RT_CACHE_DIR`, else `$XDG_CACHE_HOME/graph-rt`, else
    /// `$HOME/.cache/graph-rt`).
    pub cache_dir: Option<PathBuf>,
    /// Makes [`cost_model`](super::cost_model) calibrate even when its file is readable, as
    /// `GRAPH_RT_RECALIBRATE=1` does.
    pub recalibrate: bool,
}

impl Default for CalibrateOptions {
    fn default() -> Self {
        Self {
            sizes: vec![10, 50, 200, 1000],
            rounds: 15,
            extra: Vec::new(),
            cache_dir: None,
            recalibrate: false,
        }
    }
}

impl CalibrateOptions {
    /// Refuses options no model can be made of.
    pub(crate) fn check(&self) -> Result<()> {
        const CALL: &str = "calibrate";
        if self.sizes.is_empty() || self.sizes.contains(&0) {
            return Err(Error::misuse(
                CALL,
                Misuse::Zero { what: "sizes" },
                format!(
                    "sizes must be one or more kernel-node counts, none zero; got {:?}",
                    self.sizes
                ),
            ));
        }
        if self.rounds == 0 {
            let reason = "rounds must be at least 1";
            return Err(Error::misuse(CALL, Misuse::Zero { what: "rounds" }, reason));
        }
        Ok(())
    }

    /// The mechanisms a calibration measures on a device with (`pdl`) or without programmatic
    /// dependent launch, where the prelude loads (`prelude`) or not, in [`Mechanism::ALL`]'s
    /// order: the built-in ones that apply, and the
    /// extra ones.
    pub(crate) fn planned(&self, pdl: bool, prelude: bool) -> Vec<Mechanism> {
        Mechanism::ALL
            .into_iter()
            .filter(|&m| {
                let built_in = match m {
                    Mechanism::TablePdl => pdl,
                    Mechanism::Prelude => prelude,
                    _ => true,
                };
                built_in || self.extra.iter().any(|e| e.mechanism == m)
            })
            .collect()
    }

    /// The caller's setup of `m`, if it measures `m` itself.
    pub(crate) fn extra_setup(&self, m: Mechanism) -> Option<&ChainSetup> {
        self.extra
            .iter()
            .find(|e| e.mechanism == m)
            .map(|e| &e.setup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Mechanism::*;

    fn never() -> ExtraMechanism {
        ExtraMechanism::new(Prelude, |_: &Stream, _| {
            // A placeholder the test never calls: no error of graph-rt's.
            Err(Error::invalid("test", "not called"))
        })
    }

    #[test]
    fn the_plan_follows_the_device_and_the_extras() {
        let mut o = CalibrateOptions::default();
        assert_eq!(
            o.planned(true, false),
            vec![TablePdl, Table, HostUpdate, ExecUpdate, StaticCopy]
        );
        assert_eq!(
            o.planned(false, false),
            vec![Table, HostUpdate, ExecUpdate, StaticCopy]
        );
        assert_eq!(
            o.planned(true, true),
            vec![TablePdl, Table, Prelude, HostUpdate, ExecUpdate, StaticCopy]
        );
        o.extra.push(never());
        o.extra.push(ExtraMechanism::new(TablePdl, |_: &Stream, _| {
            // As in `never`: not called.
            Err(Error::invalid("test", "not called"))
        }));
        assert_eq!(
            o.planned(false, false),
            vec![TablePdl, Table, Prelude, HostUpdate, ExecUpdate, StaticCopy]
        );
        assert!(o.extra_setup(Prelude).is_some() && o.extra_setup(Table).is_none());
        assert!(format!("{o:?}").contains("mechanism: Prelude"));
    }

    #[test]
    fn options_without_a_point_are_refused() {
        assert!(CalibrateOptions::default().check().is_ok());
        for (sizes, rounds, what) in [
            (vec![], 15, "sizes"),
            (vec![10, 0], 15, "sizes"),
            (vec![10], 0, "rounds"),
        ] {
            let o = CalibrateOptions {
                sizes,
                rounds,
                ..Default::default()
            };
            let e = o.check().unwrap_err();
            assert_eq!(e.misuse_kind(), Some(&Misuse::Zero { what }), "{o:?}");
            assert_eq!(e.call(), Some("calibrate"));
        }
    }
}
