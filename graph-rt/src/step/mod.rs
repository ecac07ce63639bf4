//! One step, captured once and replayed with one call: the user's closure enqueues the step's
//! work through a [`StepScope`] — graph-rt's kernels, table-form and Triton kernels, cuBLAS,
//! copies — and [`StepParams`] declares what changes between calls: buffers ([`Buf`]) and
//! scalars ([`Scalar`]).
//!
//! [`Step::new`] runs the closure eagerly first (the warm-up: modules loaded, cuBLAS's one-time
//! setup done; a call through the scope that a capture refuses — a synchronization, a host
//! read, an upload — is noted here, before any capture, and the step then runs eagerly, saying
//! which call). Then it captures the closure twice, the second time with stand-ins for the
//! declared buffers, and discovers where the captured kernels take those buffers
//! ([`discover_graphs`]): kernels graph-rt cannot rewrite (cuBLAS, plain launches) get their
//! words rewritten at every replay by the in-graph prelude ([`Prelude`]); table-form kernels
//! read the slots themselves; copies and sets over declared buffers (a library's
//! `cudaMemcpyAsync`, [`StepScope::copy`]) are pointed at the buffers bound before each launch
//! that moved them, from the host (`copies.rs`; the prelude then rewrites from the host too).
//! Work that differs between the two captures beyond the declared buffers (node count,
//! kernels, by-value arguments) is refused as [`Misuse::StepChanged`], a copy that reaches past
//! a declared buffer's declared length as [`Misuse::ParamCopied`]. A capture that
//! fails makes the step run eagerly, with the error in [`Step::mode`]
//! ([`StepOptions::fail_on_capture_error`] makes it an error instead); the context stays usable.
//!
//! The closure may allocate its intermediates ([`StepScope::alloc`], or a framework's
//! stream-ordered allocations on the step's stream): in a capture they are the graph's memory
//! nodes, valid during a replay only (see `memory.rs`, and the manual's step chapter, for
//! CUDA's rules and what they mean for a step).
//!
//! A replay does what the closure did when it was captured. What the closure enqueues may depend
//! only on its declared parameters and on what stays the same for the step's life, and it must
//! make the same work each time it runs (it runs again: eagerly first, then captured, and when it
//! validates): [`Step::validate`] checks that with a capture of the closure as it is now,
//! compared node by node with the graph, as [`StepOptions::validation`] schedules (by default in
//! debug builds only).
//!
//! Each call then binds ([`Step::bind`], [`Step::set`]) and launches ([`Step::run`]): one
//! launch through the step's table, which keeps every bound buffer alive until the replays that
//! may read it have finished. (The buffers bound when the step was made stay alive as long as
//! the step: its graph was captured with them.)
//!
//! The mechanism is the device-updatable mix: table forms and the prelude, one exec, no
//! host-side node updates (the layer stack's best mix in BENCHMARKS.md), or the prelude
//! from the host ([`PreludeOptions::host_only`]), or the closure run eagerly
//! ([`StepOptions::eager`]). Given a cost model ([`StepOptions::cost_model`]), the step predicts
//! every mix over its captured kernels in launch order (graph-rt's kernels rewritable, the rest
//! foreign: [`crate::choose::predict_mixes`]), reports it ([`MixReport`]), rewrites from the
//! host where that is predicted fastest, and advises where the model prefers the closure's
//! other form (a step cannot turn a table form into a plain kernel or back).
//!
//! Programmatic edges: the step adds none. An edge is programmatic only where a launch asked
//! for it — a PDL table form, a Triton kernel compiled with `gdc_wait`, a configuration made
//! programmatic — and each such kernel waits (`griddepcontrol.wait`) by its launch's contract;
//! graph-rt never makes a cuBLAS launch programmatic; eagerly, the first kernel after the
//! table's refresh is launched without it (it reads what the refresh writes).
//!
//! Depends on `driver`, `launch`, `graph`, `table`, `discover`, `prelude`, `cublas`, `nccl`, `triton`,
//! `choose` and `error`; nothing depends on it.

mod choice;
mod copies;
mod memory;
mod params;
mod scope;
mod validate;

pub use choice::MixReport;
pub use memory::StepMemory;
pub use params::{Buf, Scalar, StepParams};
pub use scope::{StepBuffer, StepScope};
pub use validate::{Divergence, LaunchDims, OnDivergence, Validation};

use bytemuck::Pod;

use self::copies::CopyRebinds;
use self::scope::Run;
use self::validate::Signature;
use crate::choose::{CostModel, Mix};
use crate::discover::{discover_graphs, Dynamic};
use crate::driver::{DeviceBuffer, Stream};
use crate::error::{Error, Misuse, Result};
use crate::graph::{CaptureMode, Graph, GraphExec, NodeKind};
use crate::prelude::{Prelude, PreludeMode, PreludeOptions};
use crate::table::SlotScalar;

/// How [`Step::new`] builds the step.
#[derive(Debug, Clone, Default)]
pub struct StepOptions {
    /// Run every call eagerly (no capture): for comparisons and debugging.
    pub eager: bool,
    /// A capture that fails is returned as the error, instead of the step running eagerly.
    pub fail_on_capture_error: bool,
    /// How the prelude rewrites the words of kernels graph-rt cannot rewrite.
    pub prelude: PreludeOptions,
    /// Keep a handle on each buffer bound, so that [`Step::recapture`] can run the closure
    /// again (a handle a binding: a few ns each).
    pub recapturable: bool,
    /// The cost model (`calibrate::cost_model`) to choose the mix by: the step reports the
    /// model's prediction for its kernels ([`StepMode::Graph`]'s `mix`), applies host updates
    /// where predicted fastest, and advises where the closure's other form is. `None`: the
    /// mix the closure is written as.
    pub cost_model: Option<CostModel>,
    /// The mode of the step's captures. [`CaptureMode::Global`] (the default) refuses the calls
    /// a capture cannot hold (plain allocations, synchronous copies, …) in every thread while
    /// the step captures, and graph-rt holds its own releases back meanwhile;
    /// [`CaptureMode::ThreadLocal`] refuses them only in the capturing thread: for threads that
    /// build steps at the same time, each on its own device (the ranks of one process, whose
    /// collectives wait for each other), where global captures would refuse each other's
    /// allocations.
    pub capture_mode: CaptureMode,
    /// When calls check that the closure still does what the graph replays, and what a
    /// difference does ([`Validation`]; see [`Step::validate`]).
    pub validation: Validation,
}

/// What [`Step::validate`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Validated {
    /// The closure does what the graph replays.
    Same,
    /// It did other work; the step captured it again ([`OnDivergence::Recapture`]).
    Recaptured(Divergence),
    /// It did other work [`OnDivergence::MAX_RECAPTURES`] times in a row: the step runs the
    /// closure eagerly from now on.
    GaveUp(Divergence),
    /// The step has no graph: every call runs the closure eagerly.
    NoGraph,
}

/// What [`Step::recapture`] found.
#[derive(Debug)]
#[non_exhaustive]
pub struct Recaptured {
    /// Kernel nodes before and after (the table's refresh included).
    pub kernel_nodes: (usize, usize),
    /// Foreign words the prelude rewrites, before and after.
    pub patched_words: (usize, usize),
}

/// Why a step runs eagerly.
#[derive(Debug)]
#[non_exhaustive]
pub enum EagerReason {
    /// [`StepOptions::eager`] asked for it.
    Asked,
    /// The closure made this call through the scope, which a capture refuses.
    Refused(&'static str),
    /// The capture failed with this error.
    CaptureFailed(Error),
    /// The graph was freed ([`Step::free_graph`]): the profiler found it not worth keeping
    /// (its reason code).
    NotWorthIt(&'static str),
    /// Validation found the closure doing other work than the graph ([`Step::validate`]).
    Diverged(Divergence),
}

/// How a step runs its calls.
#[derive(Debug)]
#[non_exhaustive]
pub enum StepMode {
    /// Replays of one captured graph.
    #[non_exhaustive]
    Graph {
        /// Kernel nodes of the graph (the table's refresh included).
        kernel_nodes: usize,
        /// Words of kernels graph-rt cannot rewrite that the prelude rewrites at each replay.
        patched_words: usize,
        /// Where the prelude rewrites them (`None` when no such word exists).
        prelude: Option<PreludeMode>,
        /// The cost model's prediction and the mix applied, when the step was given a model
        /// ([`StepOptions::cost_model`]).
        mix: Option<MixReport>,
        /// A fingerprint of the captured work: its nodes of each kind, its kernel nodes' kernels
        /// (by name) and launch dimensions in order — the same in every process for the same
        /// work.
        fingerprint: u64,
        /// What capturing, instantiating and uploading the graph cost.
        build: BuildCost,
    },
    /// The closure, run eagerly at each call.
    Eager(EagerReason),
}

/// A kernel node of a step's graph, as the closure's capture launched it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CapturedKernel {
    /// The kernel's name as its module has it (mangled where the module's is), or its handle
    /// in hex where the driver does not say.
    pub name: String,
    /// Its launch dimensions.
    pub dims: LaunchDims,
}

/// What making a step's graph cost, once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuildCost {
    /// Host µs of the two captures, discovery, the prelude, instantiation and upload.
    pub us: f64,
    /// The device memory the graph holds, by part, and the parameter table's
    /// ([`StepMemory::held_by_graph`] is what the profiler charges the graph).
    pub memory: StepMemory,
}

/// The captured step: its exec, the prelude that rewrites the foreign kernels' words, and what
/// the capture did (for validation).
struct Graphed {
    exec: GraphExec,
    prelude: Option<Prelude>,
    signature: Signature,
    /// Its copies and sets over declared buffers, pointed at the bindings before each launch.
    copies: CopyRebinds,
}

/// How a call runs, decided when the graph is made or freed (so that a call reads it beside the
/// table's first fields, not the graph's and the options' own lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// The closure, eagerly.
    Eager,
    /// The exec, launched plainly (no parameter).
    Exec,
    /// The exec, launched through the table.
    Table,
    /// The exec, launched through the prelude and the table.
    Prelude,
}

/// A step: a closure captured once and replayed with one call, rebound through its parameters
/// (see the [module docs](self)).
// `repr(C)`, the fields in this order: what every call reads (how it runs, whether a binding
// goes to the table alone, the stream) shares a cache line with the table's first fields.
#[repr(C)]
pub struct Step<F> {
    via: Via,
    // A binding goes to the table alone: the step has its graph and is not recapturable (the
    // closure does not run again, so no handle of it is kept).
    direct: bool,
    // Calls of the graph since it was made, and the call that validates next.
    calls: u64,
    check_at: u64,
    stream: Stream,
    params: StepParams,
    // `None`: every call runs the closure eagerly.
    graph: Option<Graphed>,
    options: StepOptions,
    body: F,
    report: StepMode,
    // The closure made collectives in its first run (`StepScope::nccl`).
    collectives: bool,
    // Divergences since a validation last passed (`OnDivergence::Recapture`).
    divergences: u32,
    // The graph memory expected from the first eager run (`StepMemory::estimate`).
    estimate: Option<u64>,
}

impl<F> std::fmt::Debug for Step<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step")
            .field("mode", &self.report)
            .field("params", &self.params)
            .finish()
    }
}

impl<F> Step<F>
where
    F: FnMut(&StepScope<'_>) -> Result<()>,
{
    /// Makes the step of `body` on `stream` with `params` (every declared buffer bound): runs
    /// it eagerly once, then captures it (see the [module docs](self)).
    pub fn new(stream: &Stream, params: StepParams, options: StepOptions, body: F) -> Result<Self> {
        let mut step = Self {
            via: Via::Eager,
            direct: false,
            calls: 0,
            check_at: u64::MAX,
            stream: stream.handle(),
            params,
            options: options.clone(),
            body,
            graph: None,
            report: StepMode::Eager(EagerReason::Asked),
            collectives: false,
            divergences: 0,
            estimate: None,
        };
        if step.params.ctx.as_raw() != stream.context().as_raw() {
            return Err(Error::misuse(
                "Step::new",
                Misuse::OtherContext,
                "the stream belongs to another context than the step's parameters",
            ));
        }
        // The null handle is the legacy default stream; 1 and 2 are cuda.h's CU_STREAM_LEGACY
        // and CU_STREAM_PER_THREAD.
        if (stream.as_raw() as usize) <= 2 {
            return Err(Error::misuse(
                "Step::new",
                Misuse::DefaultStream,
                "a default stream cannot be captured: make the step on a stream of your own",
            ));
        }
        let dyn_first = step.params.dynamic()?;
        let refused = step.estimated_eager_run()?;
        if let Some(call) = refused {
            step.report = StepMode::Eager(EagerReason::Refused(call));
            return Ok(step);
        }
        if options.eager {
            return Ok(step);
        }
        match step.capture(&dyn_first, &options) {
            Ok((graph, report)) => {
                step.set_graph(Some(graph));
                // The closure does not run again (unless recapturable): the table keeps what
                // later calls bind.
                if !options.recapturable {
                    step.params.forget_bound();
                }
                step.report = report;
                Ok(step)
            }
            Err(e) if is_capture_failure(&e) && !options.fail_on_capture_error => {
                step.report = StepMode::Eager(EagerReason::CaptureFailed(e));
                Ok(step)
            }
            Err(e) => Err(e),
        }
    }

    /// [`Step::eager_run`], noting the most the device's stream-ordered pool lent at once
    /// during it beyond what it lent before: the estimate of the graph's memory (the pool's
    /// high-water mark is reset for it).
    fn estimated_eager_run(&mut self) -> Result<Option<&'static str>> {
        if self.options.eager {
            // No graph to estimate, and the pool's mark is left alone.
            return self.eager_run();
        }
        let ctx = self.stream.context().clone();
        let before = ctx.reset_pool_high().and_then(|_| ctx.pool_used());
        let refused = self.eager_run()?;
        self.estimate = match (before, ctx.pool_used()) {
            (Ok((used, _)), Ok((_, high))) => Some(high.saturating_sub(used)),
            _ => None,
        };
        Ok(refused)
    }

    /// Runs the closure eagerly on the step's stream, after an eager refresh of the table.
    /// Returns the first call it made that a capture refuses.
    fn eager_run(&mut self) -> Result<Option<&'static str>> {
        self.params.materialize()?;
        if !self.params.table.is_empty() {
            self.params.table.refresh(&self.stream)?;
        }
        let scope = StepScope::new(Run::Eager(&self.stream), &self.params, None);
        (self.body)(&scope)?;
        self.collectives |= scope.collectives.get();
        Ok(scope.refused.get())
    }

    /// Captures the closure with the bindings made now and with stand-ins, discovers the
    /// declared buffers' words, installs the prelude where needed, instantiates.
    fn capture(
        &mut self,
        dyn_first: &[Dynamic],
        options: &StepOptions,
    ) -> Result<(Graphed, StepMode)> {
        let started = std::time::Instant::now();
        let stand_ins = self.params.stand_ins()?;
        let dyn_second: Vec<Dynamic> = stand_ins
            .iter()
            .zip(dyn_first)
            .map(|(b, d)| Dynamic {
                base: b.base,
                len: d.len,
            })
            .collect();
        let (mut first, launched) = self.capture_once(None)?;
        let (second, _) = self.capture_once(Some(&stand_ins))?;
        let (snapshots, discovery) = discover_graphs(&first, &second, dyn_first, &dyn_second)
            .map_err(|e| changed(format!("{e}")))?;
        if let Some(u) = discovery.unexplained.first() {
            return Err(changed(format!(
                "{} difference(s) between two captures are not declared buffers (first: {u:?}); declare them, or keep them the same each run",
                discovery.unexplained.len()
            )));
        }
        // The fingerprint of the closure's work, before the prelude adds nodes of its own
        // (which depend on the mix and the driver, not on the work); read once, for the
        // copies too.
        let nodes = first.nodes()?;
        let kinds = nodes
            .iter()
            .map(|n| first.node_kind(*n))
            .collect::<Result<Vec<_>>>()?;
        let slots: Vec<u32> = self
            .params
            .params
            .iter()
            .map(|p| p.slot.index() as u32)
            .collect();
        let (copies, copied_ranges) = CopyRebinds::find(
            &first, &nodes, &kinds, &second, dyn_first, &stand_ins, &slots,
        )?;
        drop((second, stand_ins));
        let memory_nodes = kinds
            .iter()
            .any(|k| matches!(k, NodeKind::MemAlloc | NodeKind::MemFree));
        let mut graph_allocations = 0;
        if memory_nodes {
            first.note_memory_nodes();
            let memory = nodes
                .iter()
                .zip(&kinds)
                .filter(|(_, k)| matches!(k, NodeKind::MemAlloc | NodeKind::MemFree))
                .filter_map(|(n, _)| first.memory_node(*n).transpose())
                .collect::<Result<Vec<_>>>()?;
            memory::check_memory_nodes(&memory)?;
            graph_allocations = memory::allocated_bytes(&memory);
        }
        let kernel_nodes = snapshots.len();
        let patched_words = discovery.patches.len();
        let mut mix = match &options.cost_model {
            Some(model) => {
                let refresh = self.params.table.refresh_function().as_raw() as usize;
                let kinds = choice::kinds(&snapshots, &launched, refresh);
                let pdl = self.stream.context().device().compute_capability()?.0 >= 9;
                Some(choice::decide(&kinds, &launched, model, pdl))
            }
            None => None,
        };
        let mut prelude_options = options.prelude;
        // Copies are pointed at their buffers from the host, which a graph with
        // device-updatable nodes allows only between launches (each update would wait for the
        // last launch): the foreign kernels' words are rewritten from the host too.
        if !copies.is_empty() || mix.as_ref().is_some_and(|m| m.applied == Mix::HostUpdates) {
            prelude_options.host_only = true;
            if let Some(m) = &mut mix {
                m.applied = Mix::HostUpdates;
            }
        }
        let fingerprint = choice::fingerprint(&snapshots, &kinds);
        let sigs = validate::sigs_of(&first, &nodes, &kinds, &snapshots)?;
        let mut signature = Signature::new(sigs, discovery.patches.clone(), copied_ranges.clone());
        let install = |step: &Self, graph: &mut Graph, snapshots: &[_], options| {
            if patched_words == 0 {
                return Ok(None);
            }
            let slots: Vec<_> = step.params.params.iter().map(|p| p.slot).collect();
            let table = &step.params.table;
            Prelude::install(
                graph, table, snapshots, &discovery, dyn_first, &slots, options,
            )
            .map(Some)
        };
        let mut prelude = install(self, &mut first, &snapshots, prelude_options)?;
        drop(snapshots);
        // Instantiated, then uploaded (which maps the graph's memory), each measured.
        let ctx = self.stream.context().clone();
        let stream = self.stream.handle();
        let (mut exec_bytes, mut graph_reserved) = (0, 0);
        let reserved = |ctx: &crate::Context| -> Result<u64> {
            match memory_nodes {
                true => Ok(ctx.graph_memory()?.reserved),
                false => Ok(0),
            }
        };
        let mut instantiate = |graph: &mut Graph| {
            let free = ctx.memory_info()?.0;
            let exec = graph.instantiate()?;
            exec_bytes = free.saturating_sub(ctx.memory_info()?.0) as u64;
            let before = reserved(&ctx)?;
            exec.upload(&stream)?;
            stream.synchronize()?;
            graph_reserved = reserved(&ctx)?.saturating_sub(before);
            Ok::<_, Error>(exec)
        };
        let in_graph = prelude
            .as_ref()
            .is_some_and(|p| p.report().mode == PreludeMode::Device);
        let mut fell_back = None;
        let exec = match instantiate(&mut first) {
            Ok(exec) => exec,
            // Whether CUDA instantiates device-updatable kernel nodes beside memory nodes is
            // the driver's to say: where it does not, the same work is captured again and its
            // words rewritten from the host instead (a graph once given device-updatable nodes
            // cannot lose them).
            // (Not for a device out of memory, or a broken context: those are no answer.)
            Err(e)
                if memory_nodes
                    && in_graph
                    && !e.code().is_some_and(|c| {
                        c == graph_rt_sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY
                            || crate::driver::is_sticky(c)
                    }) =>
            {
                drop((prelude.take(), first));
                let (mut again, _) = self.capture_once(None)?;
                again.note_memory_nodes();
                let snapshots = crate::discover::kernel_snapshots(&again)?;
                let sigs = validate::read_sigs(&again)?;
                // No copies here: a step with copies rewrites from the host from the start.
                signature = Signature::new(sigs, discovery.patches.clone(), copied_ranges);
                let host = PreludeOptions {
                    host_only: true,
                    ..prelude_options
                };
                prelude = install(self, &mut again, &snapshots, host)?;
                drop(snapshots);
                fell_back = Some(format!(
                    "the graph has memory nodes (the closure allocates), and instantiating them beside the in-graph prelude's device-updatable nodes failed: {e}"
                ));
                instantiate(&mut again)?
            }
            Err(e) => return Err(e),
        };
        let memory = StepMemory {
            graph_allocations,
            graph_reserved,
            exec: exec_bytes,
            prelude: prelude.as_ref().map_or(0, |p| p.device_bytes()),
            table: self.params.table.memory_bytes().0,
            estimate: self.estimate,
        };
        let build = BuildCost {
            us: started.elapsed().as_secs_f64() * 1e6,
            memory,
        };
        tracing::info!(
            kernel_nodes,
            patched_words,
            build_us = build.us,
            graph_allocations = memory.graph_allocations,
            graph_reserved = memory.graph_reserved,
            exec = memory.exec,
            prelude = memory.prelude,
            table = memory.table,
            estimate = memory.estimate,
            "graph-rt: a step's graph made"
        );
        let report = StepMode::Graph {
            kernel_nodes,
            patched_words,
            prelude: match fell_back {
                Some(reason) => Some(PreludeMode::Host { reason }),
                None => prelude.as_ref().map(|p| p.report().mode.clone()),
            },
            mix,
            fingerprint,
            build,
        };
        let graphed = Graphed {
            exec,
            prelude,
            signature,
            copies,
        };
        Ok((graphed, report))
    }

    /// Captures the closure once, after the table's refresh, with the bindings made now or
    /// with `stand_ins`; returns the graph and graph-rt's kernels it launched.
    fn capture_once(
        &mut self,
        stand_ins: Option<&[params::Bound]>,
    ) -> Result<(crate::graph::Graph, Vec<choice::Launched>)> {
        let (params, body) = (&mut self.params, &mut self.body);
        let mut launched = Vec::new();
        crate::driver::take_freed_in_capture();
        let graph = self.stream.capture(self.options.capture_mode, |s| {
            if !params.table.is_empty() {
                params.table.record_refresh(s)?;
            }
            let scope = StepScope::new(Run::Capture(s), params, stand_ins);
            body(&scope)?;
            if let Some(e) = scope.failed_free.take() {
                return Err(e);
            }
            if crate::driver::take_freed_in_capture() {
                return Err(Error::misuse(
                    "Step::new",
                    Misuse::FreedInCapture,
                    "the closure dropped a stream-ordered buffer made before the capture, which a capture cannot free (it is freed after the capture): the step runs eagerly; keep such buffers alive outside the closure",
                ));
            }
            launched = scope.launched.take();
            Ok(())
        })?;
        Ok((graph, launched))
    }

    /// Runs one call of the step with the bindings made so far: one launch of its graph, or
    /// the closure run eagerly. A call that [`StepOptions::validation`] schedules validates
    /// first ([`Step::validate`]): on a divergence it runs the recaptured graph, or returns
    /// [`Misuse::StepDiverged`] without running.
    pub fn run(&mut self) -> Result<()> {
        if self.via != Via::Eager {
            self.calls += 1;
            if self.calls == self.check_at {
                // The next one first: a recapture below schedules its graph's own.
                self.check_at = self.options.validation.next_after(self.calls);
                self.validate()?;
            }
        }
        self.launch()
    }

    /// One launch of the graph, or the closure run eagerly.
    fn launch(&mut self) -> Result<()> {
        if let Some(g) = &mut self.graph {
            if !g.copies.is_empty() {
                g.copies.apply(&mut g.exec, &self.params.table)?;
            }
        }
        let table = &mut self.params.table;
        match (self.via, &mut self.graph) {
            (Via::Table, Some(g)) => table.launch(&g.exec, &self.stream),
            (Via::Exec, Some(g)) => g.exec.launch(&self.stream),
            (
                Via::Prelude,
                Some(Graphed {
                    exec,
                    prelude: Some(p),
                    ..
                }),
            ) => p.launch(table, exec, &self.stream),
            _ => self.eager_run().map(drop),
        }
    }

    /// Makes `graph` the step's graph (`None`: every call runs eagerly) and decides how calls
    /// run; returns the graph it had.
    fn set_graph(&mut self, graph: Option<Graphed>) -> Option<Graphed> {
        self.via = match &graph {
            None => Via::Eager,
            Some(Graphed {
                prelude: Some(_), ..
            }) => Via::Prelude,
            Some(_) if self.params.table.is_empty() => Via::Exec,
            Some(_) => Via::Table,
        };
        self.direct = graph.is_some() && !self.options.recapturable;
        self.calls = 0;
        // A step that makes collectives validates on demand only: every rank's closure must
        // run as often as the others'.
        self.check_at = match graph {
            Some(_) if !self.collectives => self.options.validation.next_after(0),
            _ => u64::MAX,
        };
        std::mem::replace(&mut self.graph, graph)
    }

    /// Runs one call eagerly — the closure through its scope, on the bindings made so far —
    /// whatever the step's mode: to compare or profile the modes. A captured step must have
    /// been made [`recapturable`](StepOptions::recapturable) (else the closure cannot see what
    /// was bound since).
    pub fn run_eagerly(&mut self) -> Result<()> {
        if self.graph.is_some() && !self.options.recapturable {
            return Err(Error::misuse(
                "Step::run_eagerly",
                Misuse::NotRecapturable,
                "the step keeps no handle on its buffers: make it with StepOptions::recapturable to run it eagerly too",
            ));
        }
        self.eager_run().map(drop)
    }

    /// Checks that the closure, run now with the bindings made so far, does what the step's
    /// graph replays: captures it into a graph that is never launched and compares the two
    /// node by node — kinds, kernels, launch dimensions, every argument byte that is not a
    /// declared buffer's word, copies' ranges ([`Divergence`] says what differs). Calls run it
    /// as [`StepOptions::validation`] schedules; its cost is [`Validation`]'s.
    ///
    /// On a divergence, as [`Validation::on_divergence`] says: [`OnDivergence::Fail`] frees the
    /// graph (every call runs the closure eagerly from then on, [`Step::mode`] says why) and
    /// returns [`Misuse::StepDiverged`]; [`OnDivergence::Recapture`] captures a recapturable
    /// step again. The closure runs once more, captured: it must make the same work whenever
    /// its parameters and what it reads on the host are the same, and nothing but the work it
    /// enqueues may depend on how often it runs.
    pub fn validate(&mut self) -> Result<Validated> {
        if self.graph.is_none() {
            return Ok(Validated::NoGraph);
        }
        // The closure's handles on what is bound now (a direct step keeps none between runs).
        self.params.materialize()?;
        let bound = self.params.dynamic()?;
        let now = self
            .capture_once(None)
            .and_then(|(g, _)| validate::read_sigs(&g));
        if self.direct {
            self.params.forget_bound();
        }
        let now = now?;
        let Some(graphed) = &self.graph else {
            return Ok(Validated::NoGraph);
        };
        let pageable = graph_rt_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS;
        let reaches_pageable = self.stream.context().device().attribute(pageable)? != 0;
        let host_only = |addr| crate::driver::is_host_only(addr, reaches_pageable);
        let Some(divergence) =
            graphed
                .signature
                .diverges(&now, &bound, validate::kernel_name, &host_only)
        else {
            self.divergences = 0;
            return Ok(Validated::Same);
        };
        self.divergences += 1;
        let recapture = self.options.validation.divergence_policy() == OnDivergence::Recapture
            && self.options.recapturable;
        if recapture && self.divergences < OnDivergence::MAX_RECAPTURES {
            return match self.recapture() {
                Ok(_) => Ok(Validated::Recaptured(divergence)),
                Err(e) => {
                    self.free_graph(EagerReason::Diverged(divergence));
                    Err(e)
                }
            };
        }
        if recapture {
            self.free_graph(EagerReason::Diverged(divergence.clone()));
            return Ok(Validated::GaveUp(divergence));
        }
        let error = Error::misuse(
            "Step::validate",
            Misuse::StepDiverged {
                node: divergence.node(),
            },
            format!(
                "the closure does other work than the step's graph replays ({divergence}): it depends on something that is not a declared parameter; declare it (StepParams::buffer, StepParams::scalar), or make the step recapturable with OnDivergence::Recapture. The step runs eagerly from now on"
            ),
        );
        self.free_graph(EagerReason::Diverged(divergence));
        Err(error)
    }

    /// Frees the step's graph (parked until its launches have finished): every call runs the
    /// closure eagerly from now on, with `reason` in [`Step::mode`]. A recapturable step can
    /// make its graph again ([`Step::recapture`]).
    pub fn free_graph(&mut self, reason: EagerReason) {
        if self.set_graph(None).is_some() {
            self.report = StepMode::Eager(reason);
        }
    }

    /// Binds `buffer` to `param` for the calls that follow (kept alive while a call may read
    /// it).
    #[inline]
    pub fn bind<T: Pod>(&mut self, param: &Buf<T>, buffer: &DeviceBuffer<T>) -> Result<()> {
        if self.direct {
            // The closure does not run again: the table alone (which refuses another
            // table's slot, so another step's parameter).
            self.params.table.bind(&param.slot, buffer)
        } else {
            // The closure's handle is rebuilt from the table when it next runs.
            self.params.bind_lazily(param, buffer)
        }
    }

    /// Sets `param` to `value` for the calls that follow.
    pub fn set<T: SlotScalar>(&mut self, param: &Scalar<T>, value: T) -> Result<()> {
        self.params.set(param, value)
    }

    /// Captures the closure again with the bindings made now (twice, for discovery, as
    /// [`Step::new`] did) and replays that graph from now on: for a closure whose work changed
    /// (other kernels, dimensions or node count — which the step cannot see by itself, since
    /// the closure does not run at each call). Returns what changed in the graph. On error the
    /// step keeps its graph. Needs [`StepOptions::recapturable`]; a step whose closure a
    /// capture refuses has nothing to capture and returns at once; a step whose graph was freed
    /// ([`Step::free_graph`]) or whose capture failed captures again.
    pub fn recapture(&mut self) -> Result<Recaptured> {
        const CALL: &str = "Step::recapture";
        let before = match &self.report {
            StepMode::Graph {
                kernel_nodes,
                patched_words,
                ..
            } => (*kernel_nodes, *patched_words),
            // A closure a capture refuses stays eager.
            StepMode::Eager(EagerReason::Refused(_)) => {
                return Ok(Recaptured {
                    kernel_nodes: (0, 0),
                    patched_words: (0, 0),
                })
            }
            StepMode::Eager(_) => (0, 0),
        };
        if !self.options.recapturable {
            return Err(Error::misuse(
                CALL,
                Misuse::NotRecapturable,
                "the step keeps no handle on its buffers: make it with StepOptions::recapturable",
            ));
        }
        self.params.materialize()?;
        let dyn_first = self.params.dynamic()?;
        let options = self.options.clone();
        let (graph, report) = self.capture(&dyn_first, &options)?;
        let after = match &report {
            StepMode::Graph {
                kernel_nodes,
                patched_words,
                ..
            } => (*kernel_nodes, *patched_words),
            StepMode::Eager(_) => (0, 0),
        };
        self.set_graph(Some(graph));
        self.report = report;
        Ok(Recaptured {
            kernel_nodes: (before.0, after.0),
            patched_words: (before.1, after.1),
        })
    }

    /// Lets go of buffers bound before the current bindings (see
    /// [`ArgTable::trim`](crate::ArgTable::trim)): once the step's stream is idle, only the
    /// current bindings stay alive.
    pub fn trim(&mut self) {
        self.params.table.trim();
    }

    /// The kernels the closure's capture launched, in order, with their launch dimensions:
    /// what each replay runs besides graph-rt's own table refresh and prelude (left out).
    /// Empty for a step that runs eagerly.
    pub fn kernels(&self) -> Vec<CapturedKernel> {
        let Some(g) = &self.graph else {
            return Vec::new();
        };
        let refresh = self.params.table.refresh_function().as_raw() as usize;
        g.signature
            .kernels()
            .filter(|(function, _)| *function != refresh)
            .map(|(function, dims)| CapturedKernel {
                name: validate::kernel_name(function),
                dims,
            })
            .collect()
    }

    /// How the step runs its calls, and why.
    pub fn mode(&self) -> &StepMode {
        &self.report
    }

    /// Whether the closure makes collectives ([`StepScope::nccl`]): every rank's step must then
    /// run the closure the same number of times, so nothing runs it on one rank alone (the
    /// profiler re-profiles no such step; see [`crate::profile::ProfileOptions`]).
    pub fn makes_collectives(&self) -> bool {
        self.collectives
    }

    /// The step's stream.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }
}

fn changed(reason: String) -> Error {
    Error::misuse("Step::new", Misuse::StepChanged, reason)
}

/// Whether `e` is a capture's failure (rather than the closure's own error, which the eager
/// run would have met first): a capture the step cannot replay as captured — the capture
/// failed, a framework's call that ran eagerly failed in it (candle's refusals carry no
/// driver code), a copy reaches past a declared buffer's declared length, or its memory nodes
/// break CUDA's rules for them (see `memory`). The step runs eagerly then, unless
/// [`StepOptions::fail_on_capture_error`].
fn is_capture_failure(e: &Error) -> bool {
    e.is_capture_error()
        || matches!(e, Error::Framework { .. })
        || matches!(
            e.misuse_kind(),
            Some(Misuse::ParamCopied | Misuse::FreedInCapture | Misuse::AllocationKept { .. })
        )
}

#[cfg(test)]
mod tests {
    use super::is_capture_failure;
    use crate::error::{Error, Misuse};

    #[test]
    fn a_frameworks_error_in_a_capture_is_the_captures_failure_and_the_closures_own_is_not() {
        let refused = std::io::Error::other("h2d param cache miss during CUDA graph capture");
        assert!(is_capture_failure(&Error::framework(
            "candle", None, refused
        )));
        let copied = Error::misuse("Step::new", Misuse::ParamCopied, "past the declared length");
        assert!(is_capture_failure(&copied));
        let own = Error::misuse("StepScope::buffer", Misuse::UnknownParam, "another step's");
        assert!(!is_capture_failure(&own));
    }
}
