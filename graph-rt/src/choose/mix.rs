//! Predicting mixes: a graph whose kernels are of two kinds — kernels graph-rt can rewrite into
//! table form (shipped, PTX, Triton) and kernels it cannot (cuBLAS, cubins: rewritten by the
//! prelude or from the host) — rebound one way for each kind, not one mechanism for all.
//!
//! The model's lines are measured on chains of one kernel. A mix of one mechanism is that
//! mechanism's line at the graph's node count; the mixed one starts from the prelude's line and
//! replaces each rewritable node's share (the prelude line's slope there) by its table form's
//! (the table or table + PDL line's slope there). One rule makes mixes differ from what the
//! chains show: a table-form kernel hides
//! its slot loads behind programmatic dependent launch only after a kernel that lets its
//! dependents start early — a graph-rt kernel launched with PDL. After a foreign kernel (cuBLAS
//! does not trigger its dependents early) or at the graph's start, it pays the table form's
//! cost without PDL. Kernels common to every mix cost the same in each (a cuBLAS kernel's own
//! run time), so the predictions compare mixes; their absolute values are the chains'.

use std::fmt;

use super::model::{CostModel, Line, Mechanism};

/// What a kernel node of a graph is, for predicting mixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A kernel graph-rt can rewrite into table form (shipped, PTX, Triton).
    Rewritable,
    /// A kernel it cannot (cuBLAS, a cubin): its words are found by discovery.
    Foreign,
}

/// A way of rebinding a graph of both kinds of kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mix {
    /// Rewritable kernels in table form (with PDL where the device has it), foreign kernels
    /// rewritten on the device by the prelude.
    TableAndPrelude,
    /// Every kernel's words rewritten on the device by the prelude (no table forms).
    PreludeEverywhere,
    /// Every kernel's words rewritten from the host, node by node, before each launch.
    HostUpdates,
}

impl Mix {
    /// Every mix, in the order reports list them.
    pub const ALL: [Mix; 3] = [
        Mix::TableAndPrelude,
        Mix::PreludeEverywhere,
        Mix::HostUpdates,
    ];

    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mix::TableAndPrelude => "table forms + prelude",
            Mix::PreludeEverywhere => "prelude everywhere",
            Mix::HostUpdates => "host updates",
        }
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One mix's predicted wall µs per replay, or why it does not apply.
#[derive(Debug, Clone, PartialEq)]
pub struct MixPrediction {
    /// The mix.
    pub mix: Mix,
    /// µs per replay, or why not.
    pub us: std::result::Result<f64, &'static str>,
}

/// A line's slope (µs a node) at `n` nodes: its segment there.
fn slope_at(line: &Line, n: usize) -> f64 {
    let n = n.max(2);
    line.at(n) - line.at(n - 1)
}

/// Predicts each mix for a graph whose kernel nodes, in launch order, are `nodes`, on a device
/// with (`pdl`) or without programmatic dependent launch and where the prelude loads
/// (`prelude`) or not. A mix of one mechanism is that mechanism's line at the graph's node
/// count; the mixed one starts from the prelude's line and replaces each rewritable kernel's
/// share (the prelude line's slope there) by its table form's: the table + PDL line's slope
/// after a graph-rt kernel launched with PDL, the table line's after a foreign kernel (which
/// does not let its dependents start early) or first. Kernels common to every mix cost the
/// same in each, so the predictions compare mixes.
pub fn predict_mixes(
    nodes: &[NodeKind],
    model: &CostModel,
    pdl: bool,
    prelude: bool,
) -> Vec<MixPrediction> {
    let n = nodes.len();
    let line = |m: Mechanism| model.line(m);
    let foreign = nodes.contains(&NodeKind::Foreign);
    Mix::ALL
        .into_iter()
        .map(|mix| {
            let us = match mix {
                _ if nodes.is_empty() => Err("no kernel node"),
                Mix::TableAndPrelude | Mix::PreludeEverywhere if foreign && !prelude => {
                    Err("the prelude does not load here")
                }
                // Rewritable kernels only: the chains of the calibration.
                Mix::TableAndPrelude if !foreign => {
                    let table = if pdl {
                        Mechanism::TablePdl
                    } else {
                        Mechanism::Table
                    };
                    line(table)
                        .map(|l| l.at(n))
                        .ok_or("table forms not measured on this device")
                }
                Mix::TableAndPrelude => match (
                    line(Mechanism::Table),
                    line(if pdl {
                        Mechanism::TablePdl
                    } else {
                        Mechanism::Table
                    }),
                    line(Mechanism::Prelude),
                ) {
                    (Some(t), Some(h), Some(p)) => {
                        let (t, h, ps) = (slope_at(t, n), slope_at(h, n), slope_at(p, n));
                        let mut us = p.at(n);
                        let mut after_pdl_kernel = false;
                        for &k in nodes {
                            if k == NodeKind::Rewritable {
                                us += if after_pdl_kernel { h } else { t } - ps;
                            }
                            after_pdl_kernel = pdl && k == NodeKind::Rewritable;
                        }
                        Ok(us)
                    }
                    _ => Err("table or prelude not measured on this device"),
                },
                Mix::PreludeEverywhere => line(Mechanism::Prelude)
                    .map(|l| l.at(n))
                    .ok_or("prelude not measured on this device"),
                Mix::HostUpdates => line(Mechanism::HostUpdate)
                    .map(|l| l.at(n))
                    .ok_or("host updates not measured on this device"),
            };
            MixPrediction { mix, us }
        })
        .collect()
}

/// The mix predicted fastest, if any applies.
pub fn best_mix(predictions: &[MixPrediction]) -> Option<Mix> {
    predictions
        .iter()
        .filter_map(|p| p.us.ok().map(|us| (p.mix, us)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(m, _)| m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choose::fixtures::h200;
    use crate::choose::Mechanism::*;

    /// The layer stack of the layers bench: 8 × (GEMM, bias + GELU, GEMM, residual), each GEMM
    /// one cuBLAS kernel or two.
    fn layer_stack() -> Vec<NodeKind> {
        use NodeKind::*;
        (0..8)
            .flat_map(|l| {
                let gemm: &[NodeKind] = if l % 2 == 0 {
                    &[Foreign, Foreign]
                } else {
                    &[Foreign]
                };
                [gemm, &[Rewritable], gemm, &[Rewritable]].concat()
            })
            .collect()
    }

    #[test]
    fn after_cublas_a_table_form_pays_its_loads_and_the_prelude_everywhere_wins() {
        // Measured on the H200 (layers bench): table + PDL for the shipped kernels with the
        // prelude for cuBLAS 1.045–1.048× the plain graph; the prelude everywhere 1.018–1.023×.
        let p = predict_mixes(&layer_stack(), &h200(), true, true);
        assert_eq!(best_mix(&p), Some(Mix::PreludeEverywhere), "{p:?}");
        let us = |m: Mix| p.iter().find(|x| x.mix == m).unwrap().us.unwrap();
        assert!(us(Mix::HostUpdates) > us(Mix::TableAndPrelude));
    }

    #[test]
    fn a_chain_of_rewritable_kernels_is_best_in_table_form_with_pdl() {
        let chain = vec![NodeKind::Rewritable; 200];
        let p = predict_mixes(&chain, &h200(), true, true);
        assert_eq!(best_mix(&p), Some(Mix::TableAndPrelude), "{p:?}");
        // The chain of the model's own calibration: the mix is its table + PDL line.
        assert_eq!(p[0].us, Ok(h200().line(TablePdl).unwrap().at(200)));
    }

    #[test]
    fn without_pdl_or_the_prelude_the_mixes_say_why() {
        let p = predict_mixes(&layer_stack(), &h200(), false, false);
        assert_eq!(p[0].us, Err("the prelude does not load here"));
        let chain = predict_mixes(&[NodeKind::Rewritable; 50], &h200(), false, false);
        assert_eq!(
            chain[0].us,
            Ok(h200().line(Table).unwrap().at(50)),
            "no PDL: the table line"
        );
        assert_eq!(best_mix(&p), Some(Mix::HostUpdates));
        let empty = predict_mixes(&[], &h200(), true, true);
        assert!(empty.iter().all(|m| m.us == Err("no kernel node")));
        assert_eq!(best_mix(&empty), None);
        let only_host = CostModel::fit("d", &[(HostUpdate, 10, 1.0)], 1.0).unwrap();
        let p = predict_mixes(&layer_stack(), &only_host, true, true);
        assert!(p[..2].iter().all(|m| m.us.is_err()), "{p:?}");
        assert_eq!(best_mix(&p), Some(Mix::HostUpdates));
    }
}
