//! What the profiler decided and why: one [`ProfileReport`] a step, and a [`summary`] of many —
//! a table for people, JSON for tools — saying what share of the time ran graphed and why the
//! rest did not.

use std::fmt;

use serde_json::{json, Value};

use super::decide::{Decision, Mode, Stats};
use crate::step::{BuildCost, StepMemory};

/// A profiled step's decision and the figures behind it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProfileReport {
    /// The step's name.
    pub step: String,
    /// Its key.
    pub key: String,
    /// The decision in force (`None` while profiling from real calls).
    pub decision: Option<Decision>,
    /// Eager per-call stats (µs), if measured or read from the file.
    pub eager: Option<Stats>,
    /// The graph's per-call stats (µs).
    pub graph: Option<Stats>,
    /// Host µs of making the graph (captures, discovery, prelude, instantiation, upload): the
    /// median of [`one_time_samples`](Self::one_time_samples).
    pub one_time_us: f64,
    /// Each build's µs for the decision in force: one, or three where the decision hinged on
    /// the one-time cost ([`hinges_on_one_time`](super::hinges_on_one_time)).
    pub one_time_samples: Vec<f64>,
    /// Device memory the graph holds beyond the eager step, bytes
    /// ([`StepMemory::held_by_graph`]): what the decision charges it.
    pub memory_bytes: u64,
    /// That memory by part, as the last build measured it.
    pub memory: StepMemory,
    /// The decision came from the decisions file (nothing was profiled).
    pub from_file: bool,
    /// Calls made through the step.
    pub calls: u64,
    /// Calls run to measure the modes (extra runs of a re-runnable step, or the first real
    /// calls).
    pub profiled_calls: u64,
    /// Decisions made (the first, and one per re-profiling).
    pub decisions: u64,
    /// Times the step was profiled again (drift, or a retry of a freed graph).
    pub reprofiles: u64,
    /// Warnings and events worth reading (a corrupt file, drift, a failed capture).
    pub notes: Vec<String>,
}

impl ProfileReport {
    pub(super) fn new(step: &str, key: &str) -> Self {
        Self {
            step: step.to_owned(),
            key: key.to_owned(),
            decision: None,
            eager: None,
            graph: None,
            one_time_us: 0.0,
            one_time_samples: Vec::new(),
            memory_bytes: 0,
            memory: StepMemory::default(),
            from_file: false,
            calls: 0,
            profiled_calls: 0,
            decisions: 0,
            reprofiles: 0,
            notes: Vec::new(),
        }
    }

    /// A (re)build of the step's graph: its figures replace the last decision's.
    pub(super) fn built(&mut self, build: &BuildCost) {
        self.one_time_samples = vec![build.us];
        self.one_time_us = build.us;
        self.memory_bytes = build.memory.held_by_graph();
        self.memory = build.memory;
    }

    /// Another build of the same graph, measured to outvote a stray one: the one-time cost is
    /// the median of every build since [`built`](Self::built).
    pub(super) fn built_again(&mut self, us: f64) {
        self.one_time_samples.push(us);
        self.one_time_us = crate::timing::median(self.one_time_samples.clone());
    }

    /// µs a call in the kept mode, if known.
    pub fn kept_us(&self) -> Option<f64> {
        let d = self.decision.as_ref()?;
        match d.mode {
            Mode::Eager => self.eager.map(|s| s.median_us),
            Mode::Graph => self.graph.map(|s| s.median_us),
        }
    }

    /// The report as JSON.
    pub fn to_json(&self) -> Value {
        let stats = |s: &Option<Stats>| {
            s.map(|s| json!({"median_us": s.median_us, "spread_us": s.spread_us, "mad_us": s.mad_us, "samples": s.samples}))
        };
        let m = &self.memory;
        json!({
            "step": self.step, "key": self.key,
            "mode": self.decision.as_ref().map(|d| d.mode.name()),
            "reason": self.decision.as_ref().map(|d| d.reason.code()),
            "saving_us": self.decision.as_ref().map(|d| d.saving_us),
            "break_even_calls": self.decision.as_ref().and_then(|d| d.break_even_calls),
            "eager": stats(&self.eager), "graph": stats(&self.graph),
            "one_time_us": self.one_time_us,
            "one_time_samples_us": self.one_time_samples, "memory_bytes": self.memory_bytes,
            "memory": {
                "graph_allocations": m.graph_allocations, "graph_reserved": m.graph_reserved,
                "exec": m.exec, "prelude": m.prelude, "table": m.table, "estimate": m.estimate,
            },
            "from_file": self.from_file, "calls": self.calls,
            "profiled_calls": self.profiled_calls, "decisions": self.decisions,
            "reprofiles": self.reprofiles, "notes": self.notes,
        })
    }
}

impl fmt::Display for ProfileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = |s: &Option<Stats>| match s {
            Some(s) if s.samples > 0 => format!("{:.1} ±{:.1}", s.median_us, s.spread_us),
            Some(s) => format!("{:.1}", s.median_us),
            None => "-".into(),
        };
        let (mode, reason) = match &self.decision {
            Some(d) => (d.mode.name(), d.reason.code()),
            None => ("profiling", "-"),
        };
        let builds = match self.one_time_samples.len() {
            0 | 1 => String::new(),
            n => format!(" (median of {n} builds)"),
        };
        let be = match self.decision.as_ref().and_then(|d| d.break_even_calls) {
            Some(n) => n.to_string(),
            None => "-".into(),
        };
        write!(
            f,
            "{:<16} {:<8} {:<6} {:<16} eager {:>14} · graph {:>14} µs · one-time {:.0} µs{builds}, {:.1} MiB · break-even {be} calls · {} calls ({} profiling){}",
            self.step,
            self.key,
            mode,
            reason,
            us(&self.eager),
            us(&self.graph),
            self.one_time_us,
            self.memory_bytes as f64 / (1 << 20) as f64,
            self.calls,
            self.profiled_calls,
            if self.from_file { " · from the file" } else { "" },
        )
    }
}

/// Many steps' reports: what share of the time (each step's kept µs × its calls) ran graphed,
/// and why the rest did not.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Share of the time that ran graphed, 0 to 1.
    pub graphed_share: f64,
    /// For the time not graphed: each reason code and its share of the total.
    pub not_graphed: Vec<(String, f64)>,
    /// Steps whose time is not known (not captured, so never measured): not in the shares.
    pub unmeasured: Vec<String>,
    /// The table for people.
    pub table: String,
    /// The same as JSON.
    pub json: Value,
}

/// Sums `reports` up (see [`Summary`]).
pub fn summary(reports: &[&ProfileReport]) -> Summary {
    let time = |r: &ProfileReport| r.kept_us().unwrap_or(0.0) * r.calls as f64;
    let total: f64 = reports.iter().map(|r| time(r)).sum();
    let share = |t: f64| if total > 0.0 { t / total } else { 0.0 };
    let graphed: f64 = reports
        .iter()
        .filter(|r| r.decision.as_ref().map(|d| d.mode) == Some(Mode::Graph))
        .map(|r| time(r))
        .sum();
    let mut not_graphed: Vec<(String, f64)> = Vec::new();
    for r in reports {
        let Some(d) = r.decision.as_ref().filter(|d| d.mode == Mode::Eager) else {
            continue;
        };
        let code = d.reason.code().to_owned();
        match not_graphed.iter_mut().find(|(c, _)| *c == code) {
            Some(e) => e.1 += share(time(r)),
            None => not_graphed.push((code, share(time(r)))),
        }
    }
    let unmeasured: Vec<String> = reports
        .iter()
        .filter(|r| r.kept_us().is_none())
        .map(|r| r.step.clone())
        .collect();
    let mut table = String::from("step             key      mode   reason           figures\n");
    for r in reports {
        table += &format!("{r}\n");
    }
    table += &format!("graphed: {:.1}% of the time", 100.0 * share(graphed));
    for (code, s) in &not_graphed {
        table += &format!(" · eager ({code}): {:.1}%", 100.0 * s);
    }
    if !unmeasured.is_empty() {
        table += &format!(
            " · not measured (not in the shares): {}",
            unmeasured.join(", ")
        );
    }
    let json = json!({
        "graphed_share": share(graphed),
        "not_graphed": not_graphed.iter().map(|(c, s)| json!({"reason": c, "share": s})).collect::<Vec<_>>(),
        "steps": reports.iter().map(|r| r.to_json()).collect::<Vec<_>>(),
        "unmeasured": unmeasured,
    });
    Summary {
        graphed_share: share(graphed),
        not_graphed,
        unmeasured,
        table,
        json,
    }
}

#[cfg(test)]
mod tests {
    use super::super::decide::Reason;
    use super::*;

    fn report(
        step: &str,
        mode: Mode,
        reason: Reason,
        eager: f64,
        graph: f64,
        calls: u64,
    ) -> ProfileReport {
        let at = |m| {
            Some(Stats {
                median_us: m,
                spread_us: 0.5,
                mad_us: 0.5,
                samples: 7,
            })
        };
        ProfileReport {
            decision: Some(Decision {
                mode,
                reason,
                saving_us: eager - graph,
                break_even_calls: Some(3),
            }),
            eager: at(eager),
            graph: at(graph),
            calls,
            ..ProfileReport::new(step, "")
        }
    }

    #[test]
    fn the_one_time_cost_is_the_median_of_the_builds_since_the_last_build() {
        let mut r = ProfileReport::new("s", "");
        r.built(&BuildCost {
            us: 4400.0,
            memory: StepMemory {
                graph_reserved: 7,
                ..StepMemory::default()
            },
        });
        assert_eq!((r.one_time_us, r.memory_bytes), (4400.0, 7));
        r.built_again(500.0);
        r.built_again(450.0);
        assert_eq!(r.one_time_samples, [4400.0, 500.0, 450.0]);
        assert_eq!(r.one_time_us, 500.0);
        assert!(
            r.to_string()
                .contains("one-time 500 µs (median of 3 builds)"),
            "{r}"
        );
        // A new build (a re-profiling) starts the samples afresh.
        r.built(&BuildCost {
            us: 600.0,
            memory: StepMemory::default(),
        });
        assert_eq!((r.one_time_samples.len(), r.one_time_us), (1, 600.0));
        assert!(!r.to_string().contains("builds"), "{r}");
    }

    #[test]
    fn the_summary_gives_the_graphed_share_and_why_the_rest_is_not() {
        let a = report("decode", Mode::Graph, Reason::GraphWins, 100.0, 30.0, 100);
        let b = report("prefill", Mode::Eager, Reason::WithinNoise, 70.0, 69.0, 100);
        let s = summary(&[&a, &b]);
        // 30 × 100 graphed of 30 × 100 + 70 × 100.
        assert!((s.graphed_share - 0.3).abs() < 1e-12);
        assert_eq!(s.not_graphed.len(), 1);
        assert_eq!(s.not_graphed[0].0, "within-noise");
        assert!((s.not_graphed[0].1 - 0.7).abs() < 1e-12);
        assert!(
            s.table.contains("decode") && s.table.contains("graphed: 30.0%"),
            "{}",
            s.table
        );
        assert_eq!(s.json["steps"].as_array().map(|v| v.len()), Some(2));
        assert_eq!(s.json["steps"][0]["reason"], "graph-wins");
        assert!(s.unmeasured.is_empty());
        // A step never measured (not captured) is named, not counted in the shares.
        let mut c = ProfileReport::new("sync", "");
        c.decision = Some(Decision {
            mode: Mode::Eager,
            reason: Reason::NotCaptured,
            saving_us: 0.0,
            break_even_calls: None,
        });
        c.calls = 100;
        let s = summary(&[&a, &b, &c]);
        assert!((s.graphed_share - 0.3).abs() < 1e-12);
        assert_eq!(s.unmeasured, ["sync"]);
        assert!(s.table.contains("not measured"), "{}", s.table);
    }
}
