//! Cost models for tests: an H200's calibration, and a model in which host updates are cheapest.

use super::model::{CostModel, Mechanism::*};

/// A GPU's calibration (the choose bench's model lines, µs per replay of chains of add1, every
/// pointer rebound).
pub(crate) fn h200() -> CostModel {
    let s = [
        (TablePdl, 10, 17.0),
        (TablePdl, 50, 46.3),
        (TablePdl, 200, 147.1),
        (TablePdl, 1000, 1006.4),
        (Table, 10, 22.8),
        (Table, 50, 74.2),
        (Table, 200, 271.6),
        (Table, 1000, 1506.4),
        (Prelude, 10, 23.9),
        (Prelude, 50, 72.5),
        (Prelude, 200, 252.7),
        (Prelude, 1000, 1537.8),
        (HostUpdate, 10, 29.6),
        (HostUpdate, 50, 96.4),
        (HostUpdate, 200, 369.3),
        (HostUpdate, 1000, 2621.6),
    ];
    CostModel::fit("H200", &s, 1.6e6).unwrap()
}

/// A model in which rewriting from the host is the cheapest way, whatever the kernels.
pub(crate) fn host_updates_cheapest() -> CostModel {
    let s = [
        (TablePdl, 10, 50.0),
        (TablePdl, 200, 900.0),
        (Table, 10, 50.0),
        (Table, 200, 900.0),
        (Prelude, 10, 50.0),
        (Prelude, 200, 900.0),
        (HostUpdate, 10, 20.0),
        (HostUpdate, 200, 300.0),
    ];
    CostModel::fit("test: host updates cheapest", &s, 1.6e6).unwrap()
}
