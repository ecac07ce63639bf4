//! The step's choice of mix: which of its captured kernels are graph-rt's (rewritable into table
//! form) and which are foreign, the cost model's prediction of each mix over that sequence, the
//! mix the step applies (the device-updatable mix the closure was written as, or host updates
//! when the model predicts those fastest), and advice when the model prefers the other way of
//! writing the closure.

use crate::choose::{best_mix, predict_mixes, CostModel, Mix, MixPrediction, NodeKind};
use crate::discover::KernelSnapshot;

/// How the closure launched one of graph-rt's kernels (recorded by the scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Launched {
    /// The kernel (`CUfunction`, as an address).
    pub(super) function: usize,
    /// A table form (it reads its slots; nothing to rewrite).
    pub(super) table_form: bool,
}

/// The cost model's view of a step, and what the step did with it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MixReport {
    /// The mix the closure is written as: table forms + prelude when it launches a table form,
    /// else the prelude everywhere.
    pub written: Mix,
    /// The mix the step applies: `written`, or host updates when the model predicts them
    /// fastest or the step has copies over declared buffers to point from the host.
    pub applied: Mix,
    /// The model's prediction of every mix over the step's kernels, in launch order.
    pub predicted: Vec<MixPrediction>,
    /// What the model would have the closure written as, when that is not how it is (a step
    /// cannot turn a table form into a plain kernel or back): e.g. launch the shipped kernels
    /// plain (`StepScope::launch` with `s.buffer(..)`) for the prelude everywhere.
    pub advice: Option<String>,
}

/// Each captured kernel node's kind, in the order of `snapshots` (the capture's launch order),
/// leaving out the table's refresh (`refresh`): graph-rt's kernels (those the closure launched
/// through the scope) are rewritable, every other kernel (cuBLAS, a framework's launch) foreign.
pub(super) fn kinds(
    snapshots: &[KernelSnapshot],
    launched: &[Launched],
    refresh: usize,
) -> Vec<NodeKind> {
    snapshots
        .iter()
        .filter(|s| s.params.function != refresh)
        .map(
            |s| match launched.iter().any(|l| l.function == s.params.function) {
                true => NodeKind::Rewritable,
                false => NodeKind::Foreign,
            },
        )
        .collect()
}

/// The mix the closure is written as.
pub(super) fn written(launched: &[Launched]) -> Mix {
    match launched.iter().any(|l| l.table_form) {
        true => Mix::TableAndPrelude,
        false => Mix::PreludeEverywhere,
    }
}

/// The model's prediction for the step's `kinds`, the mix to apply and the advice (see
/// [`MixReport`]). Pure.
pub(super) fn decide(
    kinds: &[NodeKind],
    launched: &[Launched],
    model: &CostModel,
    pdl: bool,
) -> MixReport {
    let written = written(launched);
    let predicted = predict_mixes(kinds, model, pdl, true);
    let best = best_mix(&predicted);
    let applied = match best {
        Some(Mix::HostUpdates) => Mix::HostUpdates,
        _ => written,
    };
    let us = |m: Mix| {
        predicted
            .iter()
            .find(|p| p.mix == m)
            .and_then(|p| p.us.ok())
    };
    let advice = match best {
        Some(b) if b != written && b != Mix::HostUpdates => {
            let how = match b {
                Mix::PreludeEverywhere => {
                    "launch graph-rt's kernels plain, on `s.buffer(..)`, instead of in table form"
                }
                _ => "launch graph-rt's kernels in table form, on their slots",
            };
            Some(format!(
                "the model predicts {b} ({:.1} µs) faster than {written} ({:.1} µs) as written: {how}",
                us(b).unwrap_or(f64::NAN),
                us(written).unwrap_or(f64::NAN),
            ))
        }
        _ => None,
    };
    MixReport {
        written,
        applied,
        predicted,
        advice,
    }
}

/// A fingerprint of captured work, the same in every process for the same work: how many nodes
/// of each kind the graph has (`kinds`, any order), then each kernel node's kernel (by name,
/// `cuFuncGetName`) and launch dimensions, in order (FNV-1a). By-value arguments are not in it
/// (a table form's slot addresses differ from process to process).
pub(super) fn fingerprint(snapshots: &[KernelSnapshot], kinds: &[crate::graph::NodeKind]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    let mut counts: Vec<(String, u64)> = Vec::new();
    for k in kinds {
        let name = format!("{k:?}");
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some(c) => c.1 += 1,
            None => counts.push((name, 1)),
        }
    }
    counts.sort();
    for (name, n) in &counts {
        eat(name.as_bytes());
        eat(&n.to_le_bytes());
    }
    eat(&(snapshots.len() as u64).to_le_bytes());
    for s in snapshots {
        let name = crate::driver::kernel_name(s.func).unwrap_or_default();
        eat(name.as_bytes());
        eat(&[0]);
        let (grid, block, shared) = s.dims;
        for d in grid.iter().chain(&block).chain([&shared]) {
            eat(&d.to_le_bytes());
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choose::fixtures::{h200, host_updates_cheapest};

    fn launched(table_form: bool) -> Vec<Launched> {
        vec![Launched {
            function: 7,
            table_form,
        }]
    }

    #[test]
    fn a_stack_of_foreign_kernels_with_a_shipped_one_after_each_prefers_the_prelude_everywhere() {
        use NodeKind::*;
        let kinds: Vec<_> = (0..16).flat_map(|_| [Foreign, Rewritable]).collect();
        let r = decide(&kinds, &launched(true), &h200(), true);
        assert_eq!(r.written, Mix::TableAndPrelude);
        assert_eq!(
            r.applied,
            Mix::TableAndPrelude,
            "a device mix stays as written"
        );
        let advice = r.advice.expect("advice");
        assert!(advice.contains("prelude everywhere"), "{advice}");
        // Written plain: no advice.
        let r = decide(&kinds, &launched(false), &h200(), true);
        assert_eq!(r.written, Mix::PreludeEverywhere);
        assert_eq!(r.advice, None);
    }

    #[test]
    fn host_updates_are_applied_when_predicted_fastest() {
        let m = host_updates_cheapest();
        let r = decide(&[NodeKind::Foreign; 20], &launched(false), &m, true);
        assert_eq!(r.applied, Mix::HostUpdates);
        assert_eq!(r.advice, None);
    }

    #[test]
    fn a_chain_of_table_forms_keeps_its_form() {
        let r = decide(&[NodeKind::Rewritable; 200], &launched(true), &h200(), true);
        assert_eq!(r.applied, Mix::TableAndPrelude);
        assert_eq!(r.advice, None, "{:?}", r.predicted);
    }
}
