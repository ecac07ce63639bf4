//! The calibration workload: a chain of N shipped `add1` kernels (`graph_rt_kernels::CHAIN`, or
//! its table forms) over N + 1 buffers of 4096 floats, kernel k reading buffer k and writing
//! buffer k + 1; and, per mechanism, one step of it: every pointer moved to the other of two
//! buffer sets, then a launch.

use crate::choose::{GraphShape, Mechanism};
use crate::discover::{discover_graphs, Dynamic};
use crate::driver::{CaptureStatus, Context, DeviceBuffer, Function, Module, Stream};
use crate::error::{Error, Misuse, Result};
use crate::graph::{CaptureMode, CapturedNode, Graph, GraphExec, Node};
use crate::launch::LaunchConfig;
use crate::prelude::{Prelude, PreludeMode, PreludeOptions};
use crate::table::{ArgTable, PtrSlot, SlotRef, TableOptions};

/// Floats per buffer of the chain.
const ELEMS: usize = 4096;

/// One step of a mechanism on its chain: every pointer rebound to the other buffer set, and a
/// launch, queued on the stream it is given (not synchronized). See [`chain_step`].
pub type ChainStep = Box<dyn FnMut(&Stream) -> Result<()>>;

/// The [`GraphShape`] of the calibration chain of `nodes` kernels: every kernel in table form,
/// every pointer rebound (`nodes + 1` words), and for a static graph one buffer copied in and
/// one copied out (2 × 4096 floats) per replay. `pdl` says whether the device has programmatic
/// dependent launch (compute capability 9.0+); the prelude is not assumed.
pub fn chain_shape(nodes: usize, pdl: bool) -> GraphShape {
    GraphShape {
        kernel_nodes: nodes,
        table_nodes: nodes,
        foreign_nodes: 0,
        words: nodes + 1,
        copy_bytes: (2 * ELEMS * std::mem::size_of::<f32>()) as u64,
        pdl,
        prelude: false,
    }
}

/// The calibration chain of `nodes` kernels rebound by `mechanism`, built on `stream` (its own
/// buffers, graph and, for the table mechanisms, argument table), as the step that
/// [`calibrate`](super::calibrate) times: calling it rebinds every pointer of the chain to the
/// other of its two buffer sets and launches, on the stream it is given (which must be of the
/// same context); the caller synchronizes. Benches compare mechanisms with it on the very
/// workload the model was measured on.
///
/// - [`Mechanism::TablePdl`], [`Mechanism::Table`]: the table forms of `add1`
///   (`CHAIN_TABLE_PDL` launched with programmatic stream serialization, `CHAIN_TABLE`); each
///   step binds every slot ([`ArgTable::bind`]) and launches through the table.
/// - [`Mechanism::Prelude`]: the plain `add1` chain captured twice after a table's refresh,
///   its pointers discovered and rewritten on the device by the in-graph prelude from the
///   table's slots ([`Prelude`]); each step binds every slot and launches.
/// - [`Mechanism::HostUpdate`]: [`GraphExec::set_kernel_args`] on every node, then a launch.
/// - [`Mechanism::ExecUpdate`]: the chain captured anew over the other set, and
///   [`GraphExec::update`], then a launch.
/// - [`Mechanism::StaticCopy`]: a static graph over buffers of its own; each step copies the
///   input (device to device) into its first buffer, launches, and copies its last buffer out.
///
/// Errors: [`Mechanism::Prelude`] where the prelude does not load, [`Mechanism::TablePdl`]
/// below compute capability 9.0, `nodes == 0`, and the driver's errors.
pub fn chain_step(stream: &Stream, mechanism: Mechanism, nodes: usize) -> Result<ChainStep> {
    let mut chain = Chain::new(stream, mechanism, nodes)?;
    Ok(Box::new(move |s: &Stream| chain.step(s)))
}

/// A chain, its two buffer sets and the form its mechanism rebinds.
pub(crate) struct Chain {
    /// Two sets of buffers; each set's first buffer is the chain's input and its last the
    /// output (a static graph's sets hold only those two).
    sets: [Vec<DeviceBuffer<f32>>; 2],
    /// The set the last step bound.
    turn: usize,
    form: Form,
}

enum Form {
    Table {
        table: ArgTable,
        slots: Vec<PtrSlot<f32>>,
        exec: GraphExec,
    },
    Prelude {
        table: ArgTable,
        slots: Vec<PtrSlot<f32>>,
        exec: GraphExec,
        prelude: Prelude,
    },
    HostUpdate {
        exec: GraphExec,
        nodes: Vec<Node>,
    },
    ExecUpdate {
        exec: GraphExec,
        add1: Function,
    },
    StaticCopy {
        exec: GraphExec,
        /// The graph's own buffers.
        fixed: Vec<DeviceBuffer<f32>>,
    },
}

fn add1(ctx: &Context, kernel: &graph_rt_kernels::Kernel) -> Result<Function> {
    Module::from_ptx(ctx, kernel.ptx)?.function("add1")
}

fn config(pdl: bool) -> LaunchConfig {
    let c = LaunchConfig::for_elements(ELEMS, 256);
    if pdl {
        c.programmatic_stream_serialization()
    } else {
        c
    }
}

fn buffers(ctx: &Context, count: usize) -> Result<Vec<DeviceBuffer<f32>>> {
    (0..count)
        .map(|_| DeviceBuffer::zeroed(ctx, ELEMS))
        .collect()
}

/// The plain chain over `bufs`, captured; with each kernel's capture handle, in chain order.
fn capture(
    stream: &Stream,
    add1: &Function,
    bufs: &[DeviceBuffer<f32>],
) -> Result<(Graph, Vec<CapturedNode>)> {
    let c = config(false);
    let mut captured = Vec::with_capacity(bufs.len() - 1);
    let graph = stream.capture(CaptureMode::Global, |s| {
        for k in 0..bufs.len() - 1 {
            // SAFETY: add1(x, y, n) reads n floats of x and writes n of y: two distinct
            // buffers of ELEMS floats, which the graph keeps alive for every replay.
            captured.push(unsafe { s.launch(add1, &c, (&bufs[k], &bufs[k + 1], ELEMS as i32))? });
        }
        Ok(())
    })?;
    Ok((graph, captured))
}

/// The table-form chain of `nodes` kernels over slots 0..=nodes of a new table (the PDL form
/// when `pdl`).
fn table_form(stream: &Stream, nodes: usize, pdl: bool) -> Result<Form> {
    let ctx = stream.context();
    let kernel = if pdl {
        let cc = ctx.device().compute_capability()?;
        if cc.0 < 9 {
            return Err(Error::misuse(
                "chain_step",
                Misuse::DeviceUnsupported,
                format!(
                    "table+pdl needs compute capability 9.0 (programmatic dependent launch); \
                     this device has {}.{}",
                    cc.0, cc.1
                ),
            ));
        }
        &graph_rt_kernels::CHAIN_TABLE_PDL
    } else {
        &graph_rt_kernels::CHAIN_TABLE
    };
    let f = add1(ctx, kernel)?;
    let options = TableOptions {
        capacity: nodes + 1,
        depth: 4,
    };
    let mut table = ArgTable::new(ctx, options)?;
    let slots = (0..=nodes)
        .map(|_| table.ptr_slot())
        .collect::<Result<Vec<PtrSlot<f32>>>>()?;
    let c = config(pdl);
    let graph = stream.capture(CaptureMode::Global, |s| {
        table.record_refresh(s)?;
        for k in 0..nodes {
            // SAFETY: the table form of add1 reads ELEMS floats through slot k and writes ELEMS
            // through slot k + 1; every step binds each slot to a distinct ELEMS-float buffer
            // before launching, and the table keeps bound buffers alive while a launch may read
            // them.
            unsafe { s.launch(&f, &c, (&slots[k], &slots[k + 1], ELEMS as i32))? };
        }
        Ok(())
    })?;
    let exec = graph.instantiate()?;
    Ok(Form::Table { table, slots, exec })
}

/// The plain chain over each set, captured after a new table's refresh, its pointers found by
/// discovery and rewritten by the prelude from slots 0..=nodes.
fn prelude_form(stream: &Stream, nodes: usize, sets: &[Vec<DeviceBuffer<f32>>; 2]) -> Result<Form> {
    const CALL: &str = "chain_step";
    let ctx = stream.context();
    let f = add1(ctx, &graph_rt_kernels::CHAIN)?;
    let options = TableOptions {
        capacity: nodes + 1,
        depth: 4,
    };
    let mut table = ArgTable::new(ctx, options)?;
    let slots = (0..=nodes)
        .map(|_| table.ptr_slot_with(16, ELEMS))
        .collect::<Result<Vec<PtrSlot<f32>>>>()?;
    let c = config(false);
    let mut capture = |bufs: &[DeviceBuffer<f32>]| {
        stream.capture(CaptureMode::Global, |s| {
            table.record_refresh(s)?;
            for k in 0..nodes {
                // SAFETY: as in `capture`; the prelude rewrites both pointers to buffers of
                // ELEMS floats bound to the slots (checked by the slots' minimum length).
                unsafe { s.launch(&f, &c, (&bufs[k], &bufs[k + 1], ELEMS as i32))? };
            }
            Ok(())
        })
    };
    let (mut first, second) = (capture(&sets[0])?, capture(&sets[1])?);
    let dynamic = |set: &[DeviceBuffer<f32>]| -> Vec<Dynamic> {
        set.iter()
            .map(|b| Dynamic {
                base: b.as_raw(),
                len: b.num_bytes() as u64,
            })
            .collect()
    };
    let (snaps, found) = discover_graphs(&first, &second, &dynamic(&sets[0]), &dynamic(&sets[1]))?;
    drop(second);
    let refs: Vec<SlotRef> = slots.iter().map(PtrSlot::erased).collect();
    let prelude = Prelude::install(
        &mut first,
        &table,
        &snaps,
        &found,
        &dynamic(&sets[0]),
        &refs,
        PreludeOptions::default(),
    )?;
    if let PreludeMode::Host { reason } = &prelude.report().mode {
        return Err(Error::misuse(
            CALL,
            Misuse::DeviceUnsupported,
            format!("the prelude does not load here: {reason}"),
        ));
    }
    let exec = first.instantiate()?;
    Ok(Form::Prelude {
        table,
        slots,
        exec,
        prelude,
    })
}

impl Chain {
    /// The chain of `nodes` kernels for `mechanism`, captured on `stream`.
    pub(crate) fn new(stream: &Stream, mechanism: Mechanism, nodes: usize) -> Result<Self> {
        const CALL: &str = "chain_step";
        if nodes == 0 {
            let reason = "a chain needs at least one kernel";
            return Err(Error::misuse(CALL, Misuse::Zero { what: "nodes" }, reason));
        }
        let ctx = stream.context();
        let full = || -> Result<[Vec<DeviceBuffer<f32>>; 2]> {
            Ok([buffers(ctx, nodes + 1)?, buffers(ctx, nodes + 1)?])
        };
        let (sets, form) = match mechanism {
            Mechanism::TablePdl | Mechanism::Table => {
                let form = table_form(stream, nodes, mechanism == Mechanism::TablePdl)?;
                (full()?, form)
            }
            Mechanism::HostUpdate | Mechanism::ExecUpdate => {
                let sets = full()?;
                let f = add1(ctx, &graph_rt_kernels::CHAIN)?;
                let (graph, captured) = capture(stream, &f, &sets[1])?;
                let nodes = captured
                    .into_iter()
                    .map(|c| graph.node(c))
                    .collect::<Result<Vec<Node>>>()?;
                let exec = graph.instantiate()?;
                let form = if mechanism == Mechanism::HostUpdate {
                    Form::HostUpdate { exec, nodes }
                } else {
                    Form::ExecUpdate { exec, add1: f }
                };
                (sets, form)
            }
            Mechanism::StaticCopy => {
                let f = add1(ctx, &graph_rt_kernels::CHAIN)?;
                let fixed = buffers(ctx, nodes + 1)?;
                let exec = capture(stream, &f, &fixed)?.0.instantiate()?;
                (
                    [buffers(ctx, 2)?, buffers(ctx, 2)?],
                    Form::StaticCopy { exec, fixed },
                )
            }
            Mechanism::Prelude => {
                let sets = full()?;
                let form = prelude_form(stream, nodes, &sets)?;
                (sets, form)
            }
        };
        Ok(Self {
            sets,
            turn: 1,
            form,
        })
    }

    /// Rebinds every pointer to the other buffer set and launches on `stream`.
    pub(crate) fn step(&mut self, stream: &Stream) -> Result<()> {
        self.turn ^= 1;
        let set = &mut self.sets[self.turn];
        match &mut self.form {
            Form::Table { table, slots, exec } => {
                for (slot, buf) in slots.iter().zip(set.iter()) {
                    table.bind(slot, buf)?;
                }
                table.launch(exec, stream)
            }
            Form::Prelude {
                table,
                slots,
                exec,
                prelude,
            } => {
                for (slot, buf) in slots.iter().zip(set.iter()) {
                    table.bind(slot, buf)?;
                }
                prelude.launch(table, exec, stream)
            }
            Form::HostUpdate { exec, nodes } => {
                for (k, node) in nodes.iter().enumerate() {
                    // SAFETY: as in the capture: two distinct ELEMS-float buffers, which the
                    // exec keeps alive for every later replay.
                    unsafe { exec.set_kernel_args(*node, (&set[k], &set[k + 1], ELEMS as i32))? };
                }
                exec.launch(stream)
            }
            Form::ExecUpdate { exec, add1 } => {
                let (graph, _) = capture(stream, add1, set)?;
                // An update that falls back to instantiating anew is what this mechanism costs
                // then: measured as it comes.
                exec.update(&graph)?;
                exec.launch(stream)
            }
            Form::StaticCopy { exec, fixed } => {
                // The copies below keep nothing alive: captured, they would outlive the buffers.
                if stream.capture_status()? != CaptureStatus::None {
                    return Err(Error::misuse(
                        "chain_step",
                        Misuse::Capturing,
                        "the static-copy step copies buffers it owns: not on a capturing stream",
                    ));
                }
                let last = fixed.len() - 1;
                // SAFETY: ELEMS floats each; every buffer was allocated by DeviceBuffer::zeroed
                // (its drop frees it with cuMemFree, which waits for queued work), and the stream
                // is not capturing (checked above).
                unsafe { fixed[0].copy_from_device_async(&set[0], stream)? };
                exec.launch(stream)?;
                // SAFETY: as above.
                unsafe { set[1].copy_from_device_async(&fixed[last], stream) }
            }
        }
    }

    /// The input and the output buffer of the set the next step binds.
    #[cfg(test)]
    pub(crate) fn next_io(&mut self) -> (&mut DeviceBuffer<f32>, &mut DeviceBuffer<f32>) {
        let set = &mut self.sets[self.turn ^ 1];
        let (first, rest) = set
            .split_first_mut()
            .expect("a set has two buffers or more");
        (
            first,
            rest.last_mut().expect("a set has two buffers or more"),
        )
    }

    /// The output buffer of the set the last step bound.
    #[cfg(test)]
    pub(crate) fn bound_output(&self) -> &DeviceBuffer<f32> {
        let set = &self.sets[self.turn];
        &set[set.len() - 1]
    }
}
