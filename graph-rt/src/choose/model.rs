//! The cost model and the choice.

use std::fmt;

use serde_json::{json, Map, Value};

use crate::error::{Error, Misuse, Result};

/// A way of rebinding a captured graph's kernels to new buffers between replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    /// Kernels rewritten to read the argument table, loads hidden by programmatic dependent
    /// launch (compute capability 9.0+).
    TablePdl,
    /// Kernels rewritten to read the argument table.
    Table,
    /// Kernels graph-rt cannot rewrite, patched on the device by a prelude kernel
    /// (device-updatable nodes).
    Prelude,
    /// Per-node parameter updates from the host before each launch.
    HostUpdate,
    /// Re-capture and whole-graph exec update (not for graphs with device-updatable nodes).
    ExecUpdate,
    /// Inputs copied into a static graph's buffers before each launch.
    StaticCopy,
}

impl Mechanism {
    /// Every mechanism, in the order reports list them.
    pub const ALL: [Mechanism; 6] = [
        Mechanism::TablePdl,
        Mechanism::Table,
        Mechanism::Prelude,
        Mechanism::HostUpdate,
        Mechanism::ExecUpdate,
        Mechanism::StaticCopy,
    ];

    /// The name used in reports and in the model's file.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::TablePdl => "table+pdl",
            Mechanism::Table => "table",
            Mechanism::Prelude => "prelude",
            Mechanism::HostUpdate => "host-update",
            Mechanism::ExecUpdate => "exec-update",
            Mechanism::StaticCopy => "static-copy",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Wall µs per replay, rebinding included, against the graph's kernel nodes: measured points,
/// joined by straight lines (and the last segment carried on beyond the last point, the first
/// before the first), so the model returns exactly what was measured at the calibrated sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// (kernel nodes, µs per replay), by node count.
    pub points: Vec<(usize, f64)>,
}

impl Line {
    /// µs per replay of a graph of `nodes` kernel nodes.
    pub fn at(&self, nodes: usize) -> f64 {
        let p = &self.points;
        match p.len() {
            0 => f64::NAN,
            1 => p[0].1,
            _ => {
                let i = p.partition_point(|q| q.0 < nodes).clamp(1, p.len() - 1);
                let ((x0, y0), (x1, y1)) = (p[i - 1], p[i]);
                let t = (nodes as f64 - x0 as f64) / (x1 as f64 - x0 as f64);
                (y0 + t * (y1 - y0)).max(0.0)
            }
        }
    }
}

/// What the choice needs to know of a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphShape {
    /// Kernel nodes.
    pub kernel_nodes: usize,
    /// Of them, kernels in table form (rewritten by the PTX pass).
    pub table_nodes: usize,
    /// Of them, kernels graph-rt cannot rewrite whose words discovery found.
    pub foreign_nodes: usize,
    /// Words rebound each replay (slots and discovered words).
    pub words: usize,
    /// Bytes a static graph would copy in each replay.
    pub copy_bytes: u64,
    /// Whether the device runs programmatic dependent launch (compute capability 9.0+).
    pub pdl: bool,
    /// Whether the prelude loads on this device (device runtime available).
    pub prelude: bool,
}

/// A cost model of one device: one [`Line`] per mechanism, and the copy bandwidth.
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    /// The device it was measured on (name and UUID).
    pub device: String,
    /// Each mechanism's line, where measured.
    pub lines: Vec<(Mechanism, Line)>,
    /// Device-to-device copy bandwidth, bytes per µs.
    pub copy_bytes_per_us: f64,
}

/// One mechanism's predicted wall µs per replay, or why it does not apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// The mechanism.
    pub mechanism: Mechanism,
    /// µs per replay, or why not.
    pub us: std::result::Result<f64, &'static str>,
}

/// The choice for a graph, with every alternative's prediction.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The mechanism chosen.
    pub chosen: Mechanism,
    /// Whether the caller chose it.
    pub overridden: bool,
    /// Every mechanism's prediction.
    pub predictions: Vec<Prediction>,
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = if self.overridden {
            "chosen by the caller"
        } else {
            "predicted fastest"
        };
        write!(f, "{} ({how});", self.chosen)?;
        for p in &self.predictions {
            match p.us {
                Ok(us) => write!(f, " {} {us:.1} µs", p.mechanism)?,
                Err(why) => write!(f, " {} n/a ({why})", p.mechanism)?,
            }
        }
        Ok(())
    }
}

impl CostModel {
    /// The line of `m`, if measured.
    pub fn line(&self, m: Mechanism) -> Option<&Line> {
        self.lines.iter().find(|(k, _)| *k == m).map(|(_, l)| l)
    }

    /// The model of `samples` of (mechanism, kernel nodes, wall µs per replay): each
    /// mechanism's points by node count (a node count measured twice keeps the median).
    pub fn fit(
        device: &str,
        samples: &[(Mechanism, usize, f64)],
        copy_bytes_per_us: f64,
    ) -> Result<Self> {
        let mut lines = Vec::new();
        for m in Mechanism::ALL {
            let mut points: Vec<(usize, f64)> = Vec::new();
            let mut ns: Vec<usize> = samples.iter().filter(|s| s.0 == m).map(|s| s.1).collect();
            ns.sort_unstable();
            ns.dedup();
            for n in ns {
                let v: Vec<f64> = samples
                    .iter()
                    .filter(|s| s.0 == m && s.1 == n)
                    .map(|s| s.2)
                    .collect();
                if v.iter().any(|x| !x.is_finite() || *x < 0.0) {
                    return Err(Error::misuse(
                        "CostModel::fit",
                        Misuse::Malformed,
                        format!("{m}: a time that is not a non-negative number"),
                    ));
                }
                points.push((n, crate::timing::median(v)));
            }
            if !points.is_empty() {
                lines.push((m, Line { points }));
            }
        }
        Ok(Self {
            device: device.to_string(),
            lines,
            copy_bytes_per_us,
        })
    }

    /// The model as JSON (what [`CostModel::from_json`] reads back), for a per-device file.
    pub fn to_json(&self) -> String {
        let mut lines = Map::new();
        for (m, l) in &self.lines {
            lines.insert(m.name().into(), json!(l.points));
        }
        json!({"version": 1, "device": self.device, "copy_bytes_per_us": self.copy_bytes_per_us, "lines": lines})
            .to_string()
    }

    /// Reads a model written by [`CostModel::to_json`]; anything else is an error.
    pub fn from_json(text: &str) -> Result<Self> {
        const CALL: &str = "CostModel::from_json";
        let bad = |what: &str| Error::misuse(CALL, Misuse::Malformed, what.to_string());
        let v: Value = serde_json::from_str(text).map_err(|e| bad(&format!("not JSON: {e}")))?;
        if v["version"].as_u64() != Some(1) {
            return Err(bad("not a version-1 cost model"));
        }
        let mut lines = Vec::new();
        for (name, l) in v["lines"]
            .as_object()
            .ok_or_else(|| bad("`lines` missing"))?
        {
            let m = Mechanism::from_name(name).ok_or_else(|| bad(&format!("unknown `{name}`")))?;
            let points = l
                .as_array()
                .ok_or_else(|| bad("a line is not a list of points"))?
                .iter()
                .map(|p| match (p[0].as_u64(), p[1].as_f64()) {
                    (Some(n), Some(us)) if us.is_finite() && us >= 0.0 => Ok((n as usize, us)),
                    _ => Err(bad("a point is not [nodes, µs]")),
                })
                .collect::<Result<Vec<_>>>()?;
            if points.is_empty() || points.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(bad("a line's points are not in increasing node counts"));
            }
            lines.push((m, Line { points }));
        }
        lines.sort_by_key(|(m, _)| *m);
        Ok(Self {
            device: v["device"]
                .as_str()
                .ok_or_else(|| bad("`device` missing"))?
                .into(),
            lines,
            copy_bytes_per_us: v["copy_bytes_per_us"]
                .as_f64()
                .filter(|b| *b > 0.0)
                .ok_or_else(|| bad("`copy_bytes_per_us` missing"))?,
        })
    }
}

/// Why `m` cannot rebind a graph of `shape`, if it cannot.
fn unusable(m: Mechanism, shape: &GraphShape) -> Option<&'static str> {
    let all_table = shape.table_nodes == shape.kernel_nodes;
    match m {
        Mechanism::TablePdl if !shape.pdl => Some("no programmatic dependent launch here"),
        Mechanism::TablePdl | Mechanism::Table if !all_table => {
            Some("not every kernel is in table form")
        }
        Mechanism::Prelude if !shape.prelude => Some("the prelude does not load here"),
        Mechanism::ExecUpdate if shape.prelude && shape.foreign_nodes > 0 => {
            Some("a graph with device-updatable nodes takes no whole-graph update")
        }
        _ => None,
    }
}

/// Predicts every mechanism's wall µs per replay for a graph of `shape` and picks the fastest
/// that applies, or `forced` (an error if it cannot rebind such a graph or was not measured).
pub fn choose(shape: &GraphShape, model: &CostModel, forced: Option<Mechanism>) -> Result<Choice> {
    let predictions: Vec<Prediction> = Mechanism::ALL
        .into_iter()
        .map(|m| {
            let us = match (unusable(m, shape), model.line(m)) {
                (Some(why), _) => Err(why),
                (None, None) => Err("not measured on this device"),
                (None, Some(l)) => {
                    let copy = if m == Mechanism::StaticCopy {
                        shape.copy_bytes as f64 / model.copy_bytes_per_us.max(f64::MIN_POSITIVE)
                    } else {
                        0.0
                    };
                    Ok(l.at(shape.kernel_nodes) + copy)
                }
            };
            Prediction { mechanism: m, us }
        })
        .collect();
    let chosen = match forced {
        Some(m) => {
            let p = predictions.iter().find(|p| p.mechanism == m);
            if let Some(Err(why)) = p.map(|p| p.us) {
                return Err(Error::misuse(
                    "choose",
                    Misuse::DeviceUnsupported,
                    format!("{m} cannot rebind this graph: {why}"),
                ));
            }
            m
        }
        None => predictions
            .iter()
            .filter_map(|p| p.us.ok().map(|us| (p.mechanism, us)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(m, _)| m)
            .ok_or_else(|| {
                Error::misuse(
                    "choose",
                    Misuse::DeviceUnsupported,
                    "no measured mechanism can rebind this graph",
                )
            })?,
    };
    Ok(Choice {
        chosen,
        overridden: forced.is_some(),
        predictions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Times read back from a cached model are the times measured, to the last bit (a
    /// calibration can give 22.444500000000002, one ulp above 22.4445, which serde_json without
    /// `float_roundtrip` reads back as 22.4445).
    #[test]
    fn json_round_trip_is_exact() {
        let up = |x: f64| f64::from_bits(x.to_bits() + 1);
        let model = CostModel::fit(
            "d",
            &[
                (Mechanism::Table, 10, up(22.4445)),
                (Mechanism::Table, 50, 76.255),
                (Mechanism::HostUpdate, 10, 27.0495),
                (Mechanism::Prelude, 10, up(21.4385)),
                (Mechanism::Prelude, 50, 0.1 + 0.2),
            ],
            1_739_653.281_220_405_8,
        )
        .unwrap();
        assert_eq!(CostModel::from_json(&model.to_json()).unwrap(), model);
    }

    /// Samples shaped like a GPU's chain figures (wall µs per synchronized replay, every
    /// pointer rebound, N = 10 / 200 / 1000).
    fn h200() -> CostModel {
        use Mechanism::*;
        let s = [
            (TablePdl, 10, 15.4),
            (TablePdl, 200, 139.0),
            (TablePdl, 1000, 656.0),
            (Table, 10, 20.0),
            (Table, 200, 234.1),
            (Table, 1000, 1139.8),
            (HostUpdate, 10, 23.0),
            (HostUpdate, 200, 324.3),
            (HostUpdate, 1000, 1868.7),
            (ExecUpdate, 10, 28.2),
            (ExecUpdate, 200, 411.7),
            (ExecUpdate, 1000, 2369.9),
            (StaticCopy, 10, 15.6),
            (StaticCopy, 200, 199.7),
            (StaticCopy, 1000, 978.7),
        ];
        CostModel::fit("NVIDIA H200", &s, 2.0e6).unwrap()
    }

    fn chain(n: usize) -> GraphShape {
        GraphShape {
            kernel_nodes: n,
            table_nodes: n,
            copy_bytes: 16 << 10,
            pdl: true,
            ..Default::default()
        }
    }

    #[test]
    fn lines_give_the_measured_points_and_join_them() {
        let m = h200();
        let l = m.line(Mechanism::TablePdl).unwrap();
        assert_eq!((l.at(10), l.at(200), l.at(1000)), (15.4, 139.0, 656.0));
        assert!((l.at(105) - (15.4 + 139.0) / 2.0).abs() < 1e-9);
        assert!(l.at(2000) > 656.0 && l.at(0) >= 0.0);
        let back = CostModel::from_json(&m.to_json()).unwrap();
        assert_eq!(back, m);
        let e = CostModel::fit("x", &[(Mechanism::Table, 5, f64::NAN)], 1.0).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&crate::Misuse::Malformed), "{e}");
        for bad in [
            "{}",
            "[]",
            r#"{"version":2}"#,
            r#"{"version":1,"device":"d","copy_bytes_per_us":1,"lines":{"warp":[[1,1]]}}"#,
            r#"{"version":1,"device":"d","copy_bytes_per_us":1,"lines":{"table":[[5,1],[5,2]]}}"#,
            r#"{"version":1,"device":"d","copy_bytes_per_us":0,"lines":{}}"#,
            "x",
        ] {
            let e = CostModel::from_json(bad).unwrap_err();
            assert_eq!(
                e.misuse_kind(),
                Some(&crate::Misuse::Malformed),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_choice_follows_the_graph_and_the_device() {
        let m = h200();
        // A rewritten chain on a PDL device: table + PDL at every size.
        for n in [10, 50, 200, 1000] {
            assert_eq!(
                choose(&chain(n), &m, None).unwrap().chosen,
                Mechanism::TablePdl,
                "N={n}"
            );
        }
        // Without PDL: a 16 KiB copy into the static graph beats the table; with 1 GiB to copy,
        // the table.
        let no_pdl = GraphShape {
            pdl: false,
            ..chain(200)
        };
        assert_eq!(
            choose(&no_pdl, &m, None).unwrap().chosen,
            Mechanism::StaticCopy
        );
        let big = GraphShape {
            copy_bytes: 1 << 30,
            ..no_pdl
        };
        assert_eq!(choose(&big, &m, None).unwrap().chosen, Mechanism::Table);
        // Kernels not in table form: the table does not apply.
        let foreign = GraphShape {
            table_nodes: 0,
            foreign_nodes: 200,
            copy_bytes: 1 << 30,
            ..chain(200)
        };
        let c = choose(&foreign, &m, None).unwrap();
        assert_eq!(c.chosen, Mechanism::HostUpdate);
        assert!(c
            .predictions
            .iter()
            .any(|p| p.mechanism == Mechanism::Table && p.us.is_err()));
        // An override is honoured, or refused when the mechanism cannot apply.
        assert_eq!(
            choose(&chain(200), &m, Some(Mechanism::ExecUpdate))
                .unwrap()
                .chosen,
            Mechanism::ExecUpdate
        );
        let e = choose(&foreign, &m, Some(Mechanism::TablePdl)).unwrap_err();
        assert_eq!(
            e.misuse_kind(),
            Some(&crate::Misuse::DeviceUnsupported),
            "{e}"
        );
        assert!(choose(&foreign, &m, Some(Mechanism::Prelude)).is_err());
        let report = choose(&chain(200), &m, None).unwrap().to_string();
        assert!(
            report.starts_with("table+pdl (predicted fastest);") && report.contains("prelude n/a"),
            "{report}"
        );
    }
}
