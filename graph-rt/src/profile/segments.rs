//! A step given as named segments ([`Segmented`]): each measured eagerly and captured alone
//! (CUDA events, warm-up first, medians), split by [`partition`] into runs captured as one
//! graph each and runs left eager, then run in that order at every call. A segment whose
//! closure a capture refuses (it synchronizes with the host, reads back, uploads), or one
//! marked as synchronizing, is never captured. Segments work on fixed buffers (no declared
//! parameters: each graph is one step of its own).

use std::cell::RefCell;
use std::rc::Rc;

use super::decide::Stats;
use super::partition::{partition, Part, PartitionPolicy, Plan, SegmentCost};
use crate::driver::{Event, EventFlags, Stream};
use crate::error::{Error, Misuse, Result};
use crate::step::{Step, StepMode, StepOptions, StepParams, StepScope};

/// A segment's work.
pub type SegmentBody<'a> = Box<dyn FnMut(&StepScope<'_>) -> Result<()> + 'a>;

/// One segment of a [`Segmented`] step.
pub struct Segment<'a> {
    /// Its name, for reports.
    pub name: String,
    /// It synchronizes with the host (never captured).
    pub synchronizes: bool,
    /// Its work, through the step scope.
    pub body: SegmentBody<'a>,
}

impl<'a> Segment<'a> {
    /// A segment named `name` doing `body`.
    pub fn new(name: &str, body: impl FnMut(&StepScope<'_>) -> Result<()> + 'a) -> Self {
        Self {
            name: name.to_owned(),
            synchronizes: false,
            body: Box::new(body),
        }
    }

    /// The same segment, marked as synchronizing with the host.
    pub fn synchronizing(mut self) -> Self {
        self.synchronizes = true;
        self
    }
}

type Shared<'a> = Rc<RefCell<Vec<Segment<'a>>>>;

/// A run of the plan: one step over segments `start..end` (a graph, or eager).
struct Run<'a> {
    step: Step<SegmentBody<'a>>,
}

/// A step split into graph and eager runs by measured cost (see the module docs).
pub struct Segmented<'a> {
    runs: Vec<Run<'a>>,
    plan: Plan,
    costs: Vec<SegmentCost>,
    names: Vec<String>,
}

/// A step over segments `range` of `shared`, captured unless `eager`.
fn step_over<'a>(
    stream: &Stream,
    shared: &Shared<'a>,
    range: std::ops::Range<usize>,
    eager: bool,
) -> Result<Step<SegmentBody<'a>>> {
    let segs = shared.clone();
    let body: SegmentBody<'a> = Box::new(move |s| {
        let mut v = segs.borrow_mut();
        for seg in &mut v[range.clone()] {
            (seg.body)(s)?;
        }
        Ok(())
    });
    let options = StepOptions {
        eager,
        ..StepOptions::default()
    };
    Step::new(stream, StepParams::new(stream.context(), 1)?, options, body)
}

/// Median µs of `calls` calls of `step` (after two), each between two events.
fn time(step: &mut Step<SegmentBody<'_>>, stream: &Stream, calls: usize) -> Result<Stats> {
    let ctx = stream.context();
    let (a, b) = (
        Event::new(ctx, EventFlags::Timing)?,
        Event::new(ctx, EventFlags::Timing)?,
    );
    let mut v = Vec::new();
    for i in 0..calls + 2 {
        a.record(stream)?;
        step.run()?;
        b.record(stream)?;
        b.synchronize()?;
        if i >= 2 {
            v.push(Event::elapsed_ms(&a, &b)? as f64 * 1e3);
        }
    }
    Stats::of(&v).ok_or_else(|| {
        Error::misuse(
            "Segmented::new",
            Misuse::Empty,
            "no finite sample of a segment",
        )
    })
}

impl<'a> Segmented<'a> {
    /// Measures each of `segments` eagerly and captured alone (`samples` calls each; the
    /// segments must be re-runnable), plans with `policy` (its launch and instantiation costs
    /// replaced by an empty graph's, measured) and builds the plan's runs on `stream`.
    pub fn new(
        stream: &Stream,
        segments: Vec<Segment<'a>>,
        samples: usize,
        policy: &PartitionPolicy,
    ) -> Result<Self> {
        if segments.is_empty() {
            return Err(Error::misuse(
                "Segmented::new",
                Misuse::Empty,
                "a step of no segment",
            ));
        }
        let names: Vec<String> = segments.iter().map(|s| s.name.clone()).collect();
        let marked: Vec<bool> = segments.iter().map(|s| s.synchronizes).collect();
        let shared: Shared<'a> = Rc::new(RefCell::new(segments));
        let mut costs = Vec::new();
        for (i, &sync) in marked.iter().enumerate() {
            let mut eager = step_over(stream, &shared, i..i + 1, true)?;
            let e = time(&mut eager, stream, samples)?;
            let (captured, one_time, memory) = if sync {
                (None, 0.0, 0)
            } else {
                let mut g = step_over(stream, &shared, i..i + 1, false)?;
                match g.mode() {
                    StepMode::Graph { build, .. } => {
                        let build = *build;
                        (
                            Some(time(&mut g, stream, samples)?.median_us),
                            build.us,
                            build.memory.held_by_graph(),
                        )
                    }
                    StepMode::Eager(_) => (None, 0.0, 0),
                }
            };
            costs.push(SegmentCost {
                eager_us: e.median_us,
                captured_us: captured,
                one_time_us: one_time,
                memory_bytes: memory,
            });
        }
        let mut policy = *policy;
        // Each segment's graph was measured whole: its launch and its instantiation are in its
        // figures. Measured on an empty graph, they are taken out of each segment and charged
        // once a graph instead (the policy's own figures where an empty graph cannot be made).
        if let Ok(mut empty) = step_over(stream, &shared, 0..0, false) {
            if let StepMode::Graph { build, .. } = empty.mode() {
                let instantiate = build.us;
                if let Ok(launch) = time(&mut empty, stream, samples) {
                    policy.launch_us = launch.median_us;
                    policy.instantiate_us = instantiate;
                    for c in &mut costs {
                        if let Some(us) = &mut c.captured_us {
                            *us = (*us - launch.median_us).max(0.0);
                        }
                        c.one_time_us = (c.one_time_us - instantiate).max(0.0);
                    }
                }
            }
        }
        if policy.free_memory_bytes == 0 {
            policy.free_memory_bytes = stream.context().memory_info()?.0 as u64;
        }
        let plan = partition(&costs, &policy);
        tracing::info!(plan = ?plan.parts, saved_us = plan.saved_us, "graph-rt: segmented step planned");
        Self::build(stream, shared, plan, costs, names)
    }

    /// The step over `segments` run as `parts` say (to compare a plan with others): no
    /// measurement. The parts must cover the segments in order; a part marked captured whose
    /// segments a capture refuses runs eagerly (its step says why).
    pub fn with_plan(
        stream: &Stream,
        segments: Vec<Segment<'a>>,
        parts: Vec<Part>,
    ) -> Result<Self> {
        let mut at = 0;
        for p in &parts {
            if p.start != at || p.end <= p.start {
                return Err(Error::misuse(
                    "Segmented::with_plan",
                    Misuse::OutOfRange {
                        len: segments.len(),
                    },
                    "the parts must cover the segments in order, each at least one",
                ));
            }
            at = p.end;
        }
        if at != segments.len() {
            return Err(Error::misuse(
                "Segmented::with_plan",
                Misuse::CountMismatch {
                    expected: segments.len(),
                    got: at,
                },
                "the parts must cover every segment",
            ));
        }
        let names = segments.iter().map(|s| s.name.clone()).collect();
        let plan = Plan {
            parts,
            saved_us: f64::NAN,
        };
        Self::build(
            stream,
            Rc::new(RefCell::new(segments)),
            plan,
            Vec::new(),
            names,
        )
    }

    fn build(
        stream: &Stream,
        shared: Shared<'a>,
        plan: Plan,
        costs: Vec<SegmentCost>,
        names: Vec<String>,
    ) -> Result<Self> {
        let runs = plan
            .parts
            .iter()
            .map(|p| {
                Ok(Run {
                    step: step_over(stream, &shared, p.start..p.end, !p.captured)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            runs,
            plan,
            costs,
            names,
        })
    }

    /// Runs one call: the plan's runs in order.
    pub fn run(&mut self) -> Result<()> {
        for r in &mut self.runs {
            r.step.run()?;
        }
        Ok(())
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Each segment's measured cost, in order (empty for [`Segmented::with_plan`]).
    pub fn costs(&self) -> &[SegmentCost] {
        &self.costs
    }

    /// The plan in words: each run's segments and whether it is a graph.
    pub fn describe(&self) -> String {
        self.plan
            .parts
            .iter()
            .map(|p| {
                format!(
                    "{} [{}]",
                    if p.captured { "graph" } else { "eager" },
                    self.names[p.start..p.end].join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join(" → ")
    }
}
