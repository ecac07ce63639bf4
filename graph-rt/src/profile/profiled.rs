//! A step that keeps its graph only where it wins ([`Profiled`]): measured eagerly and as a
//! graph (CUDA events, warm-up first, interleaved, medians and spreads), decided by
//! [`decide`](super::decide()), remembered in the decisions file, sampled in production and
//! profiled again when it drifts.

use std::path::PathBuf;

use super::decide::{decide, hinges_on_one_time, Decision, Mode, ModeCost, Policy, Reason, Stats};
use super::report::ProfileReport;
use super::sampler::Sampler;
use super::store::{DecisionKey, DecisionStore};
use crate::driver::{Event, EventFlags, Stream};
use crate::error::{Error, Result};
use crate::step::{Buf, EagerReason, Scalar, Step, StepMode, StepOptions, StepParams, StepScope};
use crate::table::SlotScalar;
use crate::DeviceBuffer;

/// How [`Profiled`] measures and decides.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// The closure may run extra times (it is idempotent apart from its outputs): the modes are
    /// measured at once, before the first call returns. Otherwise the first calls are the
    /// samples, the modes taking turns.
    pub rerunnable: bool,
    /// Samples per mode (after `warm_up`). Default 7.
    pub samples: usize,
    /// Calls per mode run first and not counted. Default 2.
    pub warm_up: usize,
    /// How the decision weighs what it measured.
    pub policy: Policy,
    /// The step's key within its name (a shape bucket, a batch size); part of the decision's
    /// identity.
    pub key: String,
    /// The decisions file: read first (a decision for this step, key, captured work, device,
    /// driver and build is used without profiling), written after each decision.
    pub store: Option<PathBuf>,
    /// In production, one call in this many is timed by events (no host synchronization: a
    /// sample is read at the next sampled call, if its events have completed). 0: off.
    /// Default 64.
    pub sample_every: u64,
    /// A kept mode whose sampled median (of the last 8) exceeds the profiled one by this
    /// fraction is profiled again. Default 0.25. Not for a step that makes collectives
    /// ([`Step::makes_collectives`](crate::step::Step::makes_collectives)): a rank would profile
    /// alone, its extra or changed calls unmatched by the other ranks; the drift is noted in the
    /// report instead.
    pub drift: f64,
    /// A step kept eager (its graph freed) captures and profiles again after this many calls,
    /// for work that became stable. 0: never. Default 4096. Never for a step that makes
    /// collectives (as for `drift`). Such a step, re-runnable, is profiled at its first call on
    /// every rank, on the same schedule (the decisions file is not read for it: a rank whose
    /// file has the decision would skip the calls the others run); not re-runnable, its first
    /// calls are the samples, which adds no call.
    pub retry_after: u64,
    /// Fail instead of running eagerly when the step cannot be captured.
    pub strict: bool,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        Self {
            rerunnable: false,
            samples: 7,
            warm_up: 2,
            policy: Policy::default(),
            key: String::new(),
            store: None,
            sample_every: 64,
            drift: 0.25,
            retry_after: 4096,
            strict: false,
        }
    }
}

/// Builds made again, beyond the first, when a decision hinges on the one-time cost: the
/// median of three outvotes one slow build.
const EXTRA_BUILDS: usize = 2;

/// Where a profiled step is.
enum State {
    /// Profiling from real calls: the next call's mode and what was measured so far.
    Sampling {
        next: usize,
        pending: Vec<(Mode, Event, Event)>,
    },
    /// Decided: `mode` runs every call.
    Decided,
}

/// A step whose graph is kept only where it beats eager (see the [module docs](super)).
pub struct Profiled<F> {
    name: String,
    step: Step<F>,
    options: ProfileOptions,
    store: Option<DecisionStore>,
    state: State,
    pub(super) report: ProfileReport,
    sampler: Sampler,
    eager_calls: u64,
}

impl<F> Profiled<F>
where
    F: FnMut(&StepScope<'_>) -> Result<()>,
{
    /// Makes the step `name` of `body` (as [`Step::new`]: every declared buffer bound) and
    /// decides how it runs: from the decisions file, by measuring now
    /// ([`ProfileOptions::rerunnable`]), or over the first calls.
    pub fn new(
        name: &str,
        stream: &Stream,
        params: StepParams,
        step_options: StepOptions,
        options: ProfileOptions,
        body: F,
    ) -> Result<Self> {
        if options.sample_every > 0 && !(options.drift >= 0.01 && options.drift.is_finite()) {
            return Err(Error::misuse(
                "Profiled::new",
                crate::Misuse::Zero { what: "drift" },
                "the drift threshold is a fraction of at least 0.01 (0.25: a quarter above the profiled median)",
            ));
        }
        let step_options = StepOptions {
            recapturable: true,
            ..step_options
        };
        let step = Step::new(stream, params, step_options, body)?;
        let store = options.store.as_ref().map(DecisionStore::open);
        let mut this = Self {
            name: name.to_owned(),
            report: ProfileReport::new(name, &options.key),
            step,
            store,
            state: State::Decided,
            sampler: Sampler::new(options.sample_every, options.drift),
            options,
            eager_calls: 0,
        };
        if let Some(w) = this.store.as_ref().and_then(|s| s.warning.clone()) {
            this.report.notes.push(w);
        }
        this.begin()?;
        Ok(this)
    }

    /// What happens after the step was (re)captured: the file's decision, or profiling.
    fn begin(&mut self) -> Result<()> {
        let StepMode::Graph { build, .. } = self.step.mode() else {
            return self.not_captured();
        };
        self.report.built(build);
        let key = self.key()?;
        // A step of collectives measured now runs extra calls: every rank must, so no rank
        // takes a stored decision that another may lack.
        let lockstep = self.step.makes_collectives() && self.options.rerunnable;
        if let Some(stored) = self
            .store
            .as_ref()
            .filter(|_| !lockstep)
            .and_then(|s| s.get(&key))
        {
            let decision = stored.decision();
            self.report.eager = Some(stats_at(stored.eager_us));
            self.report.graph = Some(stats_at(stored.graph_us));
            self.report.from_file = true;
            return self.apply(decision);
        }
        if let Some(s) = self.store.as_ref() {
            let stale = s.stale(&key);
            if stale > 0 {
                self.report.notes.push(format!(
                    "{stale} stale decision(s) in the file (another device, driver, build or captured work): profiling again"
                ));
            }
        }
        self.start_profiling()
    }

    /// Profiles now (re-runnable) or over the next calls.
    fn start_profiling(&mut self) -> Result<()> {
        if self.options.rerunnable {
            return self.profile_now();
        }
        self.state = State::Sampling {
            next: 0,
            pending: Vec::new(),
        };
        Ok(())
    }

    /// The step could not be captured: eager (or the error, strict).
    fn not_captured(&mut self) -> Result<()> {
        let why = format!("{:?}", self.step.mode());
        if self.options.strict {
            return Err(Error::misuse(
                "Profiled::new",
                crate::Misuse::CaptureRefused {
                    call: "Profiled::new",
                },
                format!("the step cannot be captured ({why}) and the profiler is strict"),
            ));
        }
        self.report.notes.push(format!("not captured: {why}"));
        self.record(Decision {
            mode: Mode::Eager,
            reason: Reason::NotCaptured,
            saving_us: 0.0,
            break_even_calls: None,
        });
        self.state = State::Decided;
        Ok(())
    }

    /// The decision's identity for this step as captured now.
    fn key(&self) -> Result<DecisionKey> {
        let fingerprint = match self.step.mode() {
            StepMode::Graph { fingerprint, .. } => *fingerprint,
            StepMode::Eager(_) => 0,
        };
        let ctx = self.step.stream().context();
        let (major, minor) = ctx.device().compute_capability()?;
        Ok(DecisionKey {
            step: self.name.clone(),
            key: self.options.key.clone(),
            fingerprint,
            device: format!("{} ({major}.{minor})", ctx.device().name()?),
            driver: crate::driver::driver_version()?,
            build: env!("CARGO_PKG_VERSION").to_owned(),
        })
    }

    /// Measures both modes now: warm-up, then rounds in which each mode runs once (the order
    /// alternating), each call from an idle stream between two events.
    fn profile_now(&mut self) -> Result<()> {
        let ctx = self.step.stream().context().clone();
        let rounds = self.options.warm_up + self.options.samples.max(1);
        let (mut eager, mut graph) = (Vec::new(), Vec::new());
        let pair = || -> Result<(Event, Event)> {
            Ok((
                Event::new(&ctx, EventFlags::Timing)?,
                Event::new(&ctx, EventFlags::Timing)?,
            ))
        };
        let (a, b) = (pair()?, pair()?);
        for r in 0..rounds {
            let order = if r % 2 == 0 {
                [Mode::Eager, Mode::Graph]
            } else {
                [Mode::Graph, Mode::Eager]
            };
            // Each call from an idle stream: neither mode's launch cost hides behind the other's
            // work.
            for (mode, (start, end)) in order.into_iter().zip([&a, &b]) {
                self.step.stream().synchronize()?;
                start.record(self.step.stream())?;
                self.run_as(mode)?;
                end.record(self.step.stream())?;
            }
            self.step.stream().synchronize()?;
            if r >= self.options.warm_up {
                for (mode, (start, end)) in order.into_iter().zip([&a, &b]) {
                    let us = Event::elapsed_ms(start, end)? as f64 * 1e3;
                    match mode {
                        Mode::Eager => eager.push(us),
                        Mode::Graph => graph.push(us),
                    }
                }
            }
        }
        self.report.profiled_calls += 2 * rounds as u64;
        self.conclude(&eager, &graph)
    }

    /// Decides from the samples, records and applies.
    fn conclude(&mut self, eager: &[f64], graph: &[f64]) -> Result<()> {
        let (Some(e), Some(g)) = (Stats::of(eager), Stats::of(graph)) else {
            return Err(Error::misuse(
                "Profiled",
                crate::Misuse::Empty,
                "no usable sample of a mode (non-finite event times)",
            ));
        };
        let mut policy = self.options.policy;
        if policy.free_memory_bytes == 0 {
            policy.free_memory_bytes = self.step.stream().context().memory_info()?.0 as u64;
        }
        let costs = |mode, stats, one_time_us, memory_bytes| ModeCost {
            mode,
            stats,
            one_time_us,
            memory_bytes,
        };
        let eager_cost = costs(Mode::Eager, e, 0.0, 0);
        let memory = self.report.memory_bytes;
        let graph_cost = |one_time_us| costs(Mode::Graph, g, one_time_us, memory);
        // Not for collectives: a rank alone would capture them again.
        if !self.step.makes_collectives()
            && hinges_on_one_time(&eager_cost, &graph_cost(self.report.one_time_us), &policy)
        {
            self.measure_builds_again()?;
        }
        let decision = decide(&eager_cost, &graph_cost(self.report.one_time_us), &policy);
        self.report.eager = Some(e);
        self.report.graph = Some(g);
        self.report.from_file = false;
        if let Some(mut store) = self.store.take() {
            let saved = self
                .key()
                .and_then(|key| store.put(key, &decision, e.median_us, g.median_us));
            if let Err(err) = saved {
                self.report.notes.push(format!("decision not saved: {err}"));
                tracing::warn!(error = %err, "graph-rt: decisions file not written");
            }
            self.store = Some(store);
        }
        self.apply(decision)
    }

    /// The graph kept off by its one-time cost alone ([`hinges_on_one_time`]): the step is
    /// built again ([`Step::recapture`], no work run) [`EXTRA_BUILDS`] times and the median
    /// build taken. A capture that fails (the closure changed, or a capture refused it) leaves
    /// the figures measured so far (noted; the step keeps its graph); any other error, or any
    /// in strict mode, is returned. Never for a step that makes collectives: each rank decides
    /// from its own timings, and one rank alone would capture its collectives again.
    fn measure_builds_again(&mut self) -> Result<()> {
        for _ in 0..EXTRA_BUILDS {
            if let Err(e) = self.step.recapture() {
                if self.options.strict || !capture_failed(&e) {
                    return Err(e);
                }
                self.report.notes.push(format!(
                    "building again to measure the one-time cost failed: {e}"
                ));
                tracing::warn!(step = %self.name, error = %e, "graph-rt: profiler re-build failed");
                break;
            }
            if let StepMode::Graph { build, .. } = self.step.mode() {
                self.report.built_again(build.us);
            }
        }
        Ok(())
    }

    /// Applies `decision`: the graph freed when eager is kept; the sampler set for drift.
    fn apply(&mut self, decision: Decision) -> Result<()> {
        if decision.mode == Mode::Eager {
            self.step
                .free_graph(EagerReason::NotWorthIt(decision.reason.code()));
        }
        let baseline = match decision.mode {
            Mode::Eager => self.report.eager,
            Mode::Graph => self.report.graph,
        };
        self.sampler.reset(baseline.map(|s| s.median_us));
        self.record(decision);
        self.state = State::Decided;
        self.eager_calls = 0;
        Ok(())
    }

    fn record(&mut self, decision: Decision) {
        tracing::info!(
            step = %self.name,
            key = %self.options.key,
            mode = %decision.mode,
            reason = decision.reason.code(),
            saving_us = decision.saving_us,
            "graph-rt: profiler decision"
        );
        self.report.decisions += 1;
        self.report.decision = Some(decision);
    }

    /// One call in `mode`.
    fn run_as(&mut self, mode: Mode) -> Result<()> {
        match mode {
            Mode::Graph => self.step.run(),
            Mode::Eager => self.step.run_eagerly(),
        }
    }

    /// Runs one call: in the kept mode, or, while profiling from real calls, in the next mode
    /// to measure.
    pub fn run(&mut self) -> Result<()> {
        self.report.calls += 1;
        if let State::Sampling { next, .. } = &mut self.state {
            let modes = [Mode::Eager, Mode::Graph];
            let mode = modes[*next % 2];
            *next += 1;
            let ctx = self.step.stream().context();
            let (start, end) = (
                Event::new(ctx, EventFlags::Timing)?,
                Event::new(ctx, EventFlags::Timing)?,
            );
            start.record(self.step.stream())?;
            let r = self.run_as(mode);
            end.record(self.step.stream())?;
            r?;
            let needed = 2 * (self.options.warm_up + self.options.samples.max(1));
            let mut done = Vec::new();
            if let State::Sampling { pending, .. } = &mut self.state {
                pending.push((mode, start, end));
                if pending.len() >= needed {
                    done = std::mem::take(pending);
                }
            }
            if !done.is_empty() {
                self.step.stream().synchronize()?;
                let (mut eager, mut graph) = (Vec::new(), Vec::new());
                for (i, (mode, start, end)) in done.iter().enumerate() {
                    if i < 2 * self.options.warm_up {
                        continue;
                    }
                    let us = Event::elapsed_ms(start, end)? as f64 * 1e3;
                    [&mut eager, &mut graph][(*mode == Mode::Graph) as usize].push(us);
                }
                self.report.profiled_calls += done.len() as u64;
                self.conclude(&eager, &graph)?;
            }
            return Ok(());
        }
        let mode = self.mode();
        let sampled = self.sampler.begin(self.step.stream())?;
        self.run_as(mode)?;
        if sampled {
            self.sampler.end(self.step.stream())?;
        }
        if self.sampler.drifted() && self.step.makes_collectives() {
            // A rank alone would run extra calls (or change its captures): never for collectives.
            if !self
                .report
                .notes
                .iter()
                .any(|n| n.starts_with("drift seen"))
            {
                self.report.notes.push(
                    "drift seen, not profiled again: the step makes collectives, and no rank re-profiles alone".into(),
                );
            }
        } else if self.sampler.drifted() {
            self.report.reprofiles += 1;
            self.report.notes.push(format!(
                "drift: the {mode} mode's sampled median left the profiled one by more than {:.0}%",
                self.options.drift * 100.0
            ));
            return self.reprofile();
        }
        if mode == Mode::Eager && self.options.retry_after > 0 && !self.step.makes_collectives() {
            self.eager_calls += 1;
            let retry = matches!(
                self.report.decision.as_ref().map(|d| &d.reason),
                Some(Reason::WithinNoise | Reason::NeverPaysBack | Reason::FromFile)
            );
            if retry && self.eager_calls >= self.options.retry_after {
                self.report.reprofiles += 1;
                return self.reprofile();
            }
        }
        Ok(())
    }

    /// Captures again if the graph was freed, and profiles again (the file's decision ignored).
    fn reprofile(&mut self) -> Result<()> {
        if !matches!(self.step.mode(), StepMode::Graph { .. }) {
            if let Err(e) = self.step.recapture() {
                // Stay as decided, counting afresh: no attempt again before `retry_after` calls
                // or a new drift measured from now.
                self.eager_calls = 0;
                let baseline = self.report.eager.map(|s| s.median_us);
                self.sampler.reset(baseline);
                if self.options.strict || !capture_failed(&e) {
                    return Err(e);
                }
                if self.report.notes.len() < 32 {
                    self.report
                        .notes
                        .push(format!("capturing again failed, staying eager: {e}"));
                }
                tracing::warn!(step = %self.name, error = %e, "graph-rt: profiler re-capture failed");
                return Ok(());
            }
        }
        let StepMode::Graph { build, .. } = self.step.mode() else {
            return self.not_captured();
        };
        self.report.built(build);
        self.start_profiling()
    }

    /// The mode kept (the decision in force; eager before the first decision). While the step
    /// profiles from real calls ([`Profiled::is_profiling`]) its calls take turns in both modes.
    pub fn mode(&self) -> Mode {
        self.report
            .decision
            .as_ref()
            .map(|d| d.mode)
            .unwrap_or(Mode::Eager)
    }

    /// Whether the step is profiling from real calls (its modes taking turns).
    pub fn is_profiling(&self) -> bool {
        matches!(self.state, State::Sampling { .. })
    }

    /// Binds `buffer` to `param` for the calls that follow, as [`Step::bind`].
    #[inline]
    pub fn bind<T: bytemuck::Pod>(
        &mut self,
        param: &Buf<T>,
        buffer: &DeviceBuffer<T>,
    ) -> Result<()> {
        self.step.bind(param, buffer)
    }

    /// Sets `param` to `value`, as [`Step::set`].
    pub fn set<T: SlotScalar>(&mut self, param: &Scalar<T>, value: T) -> Result<()> {
        self.step.set(param, value)
    }

    /// The decision so far and the figures behind it.
    pub fn report(&self) -> &ProfileReport {
        &self.report
    }

    /// The step.
    pub fn step(&self) -> &Step<F> {
        &self.step
    }
}

/// Whether `e` is a capture that failed (the closure changed, or a capture refused it), which
/// leaves a profiled step as it was, rather than an error of the device or of the call.
fn capture_failed(e: &Error) -> bool {
    e.is_capture_error()
        || matches!(
            e.misuse_kind(),
            Some(crate::Misuse::StepChanged | crate::Misuse::CaptureRefused { .. })
        )
}

/// Stats of a single stored median.
fn stats_at(median_us: f64) -> Stats {
    Stats {
        median_us,
        spread_us: 0.0,
        mad_us: 0.0,
        samples: 0,
    }
}
