//! The argument table on the chain workload (shared/baseline's: `add1` over 4096 floats, kernel
//! k reads buffer k and writes buffer k+1), N ∈ {10, 50, 200, 1000}, every iteration
//! synchronized. Cases, interleaved in rounds: the plain static graph and the PDL static graph
//! replayed with no rebinding; every pointer rebound before each replay through the table
//! (plain table-form kernels) and through the table with PDL (loads before `griddepcontrol.wait`);
//! and the table + PDL exec launched with no binding in between. Wall µs per iteration, and GPU
//! µs of one replay between events. Then the host µs of binding K slots + launching (no
//! synchronization in the timed part) against the same launch with no binding, for chains of
//! N ∈ {1, 10, 100, 200, 1000} nodes (K = N + 1 slots): every slot bound one by one (two sets,
//! three and five rotating, raw addresses) and by prepared binding sets (two and three), a tenth
//! of the slots (random, and the same each launch, one by one and as a prepared set), beside
//! anchor4's two host paths rebuilt in this process (see `table_host`); then the cost of writing
//! 8 KiB into mapped host memory by store width. Criterion measures the N = 200 cases too; the
//! tables printed last are medians of interleaved rounds. `GRAPH_RT_TABLE_PARTS` picks parts of
//! "chains host big" (default: all).
//!
//! ```text
//! cargo bench --bench table
//! ```

mod common;
mod table_host;

use table_host::{host_costs, mirror_writes};

use std::time::{Duration, Instant};

use criterion::Criterion;
use std::cell::RefCell;

use graph_rt::table::PtrSlot;
use graph_rt::{
    ArgTable, CaptureMode, Context, DeviceBuffer, Event, EventFlags, ExecUpdate, Function, Graph,
    GraphExec, LaunchConfig, Module, Stream, TableOptions,
};

const ELEMS: usize = 4096;
const SIZES: [usize; 4] = [10, 50, 200, 1000];

fn load(ctx: &Context, ptx: &str, name: &str) -> Function {
    Module::from_ptx(ctx, ptx)
        .expect("module")
        .function(name)
        .expect("function")
}

fn cfg(pdl: bool) -> LaunchConfig {
    let c = LaunchConfig::for_elements(ELEMS, 256);
    if pdl {
        c.programmatic_stream_serialization()
    } else {
        c
    }
}

/// A static chain over `bufs` (plain or PDL `add1`).
fn static_chain(stream: &Stream, f: &Function, pdl: bool, bufs: &[DeviceBuffer<f32>]) -> GraphExec {
    capture_chain(stream, f, pdl, bufs)
        .instantiate()
        .expect("instantiate")
}

/// The chain over `bufs`, captured.
fn capture_chain(stream: &Stream, f: &Function, pdl: bool, bufs: &[DeviceBuffer<f32>]) -> Graph {
    let c = cfg(pdl);
    stream
        .capture(CaptureMode::Global, |s| {
            for k in 0..bufs.len() - 1 {
                // SAFETY: add1 over ELEMS floats of two distinct ELEMS-float buffers.
                unsafe { s.launch(f, &c, (&bufs[k], &bufs[k + 1], ELEMS as i32))? };
            }
            Ok(())
        })
        .expect("capture")
}

/// A table-form chain of `steps` kernels over slots 0..=steps of a new table.
struct TableChain {
    table: ArgTable,
    slots: Vec<PtrSlot<f32>>,
    exec: GraphExec,
}

fn table_chain(stream: &Stream, f: &Function, pdl: bool, steps: usize) -> TableChain {
    table_chain_ring(stream, f, pdl, steps, 4)
}

/// [`table_chain`] with a ring of `depth` mirrors (the launch reads an acknowledgement from
/// mapped host memory once every `depth` launches).
fn table_chain_ring(
    stream: &Stream,
    f: &Function,
    pdl: bool,
    steps: usize,
    depth: usize,
) -> TableChain {
    let options = TableOptions {
        capacity: steps + 1,
        depth,
    };
    let mut table = ArgTable::new(stream.context(), options).expect("table");
    let slots: Vec<PtrSlot<f32>> = (0..=steps)
        .map(|_| table.ptr_slot().expect("slot"))
        .collect();
    let c = cfg(pdl);
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            table.record_refresh(s)?;
            for k in 0..steps {
                // SAFETY: add1_table over ELEMS floats through slots bound to ELEMS-float buffers.
                unsafe { s.launch(f, &c, (&slots[k], &slots[k + 1], ELEMS as i32))? };
            }
            Ok(())
        })
        .expect("capture");
    let exec = graph.instantiate().expect("instantiate");
    TableChain { table, slots, exec }
}

impl TableChain {
    fn bind_all(&mut self, bufs: &[DeviceBuffer<f32>]) {
        for (slot, buf) in self.slots.iter().zip(bufs) {
            self.table.bind(slot, buf).expect("bind");
        }
    }

    fn bind_all_raw(&mut self, bufs: &[DeviceBuffer<f32>]) {
        for (slot, buf) in self.slots.iter().zip(bufs) {
            // SAFETY: the buffers outlive every launch (the bench keeps them to the end).
            unsafe { self.table.bind_raw(slot, buf.as_raw()).expect("bind") };
        }
    }

    fn launch(&mut self, stream: &Stream) {
        self.table.launch(&self.exec, stream).expect("launch");
    }
}

fn timed(stream: &Stream, body: impl FnOnce()) -> f64 {
    let t = Instant::now();
    body();
    stream.synchronize().expect("sync");
    t.elapsed().as_secs_f64() * 1e6
}

fn gpu_time(stream: &Stream, mut body: impl FnMut()) -> f64 {
    let ctx = stream.context();
    let start = Event::new(ctx, EventFlags::Timing).expect("event");
    let end = Event::new(ctx, EventFlags::Timing).expect("event");
    let times = (0..200)
        .map(|_| {
            start.record(stream).expect("record");
            body();
            end.record(stream).expect("record");
            end.synchronize().expect("sync");
            Event::elapsed_ms(&start, &end).expect("elapsed") as f64 * 1e3
        })
        .collect();
    common::median(times)
}

struct Row {
    n: usize,
    wall: Vec<(&'static str, f64)>,
    gpu: [f64; 5],
}

fn chains(c: &mut Criterion, ctx: &Context, stream: &Stream) -> Vec<Row> {
    let plain = load(ctx, graph_rt::kernels::CHAIN.ptx, "add1");
    let pdl = load(ctx, graph_rt::kernels::CHAIN_PDL.ptx, "add1");
    let table = load(ctx, graph_rt::kernels::CHAIN_TABLE.ptx, "add1");
    let table_pdl = load(ctx, graph_rt::kernels::CHAIN_TABLE_PDL.ptx, "add1");
    let mut rows = Vec::new();
    for n in SIZES {
        let sets: Vec<Vec<DeviceBuffer<f32>>> = (0..2)
            .map(|_| {
                (0..=n)
                    .map(|_| DeviceBuffer::zeroed(ctx, ELEMS).expect("alloc"))
                    .collect()
            })
            .collect();
        let s_plain = static_chain(stream, &plain, false, &sets[0]);
        let s_pdl = static_chain(stream, &pdl, true, &sets[0]);
        let mut t_plain = table_chain(stream, &table, false, n);
        let mut t_pdl = table_chain(stream, &table_pdl, true, n);
        let mut t_still = table_chain(stream, &table_pdl, true, n);
        let mut t_same = table_chain(stream, &table_pdl, true, n);
        t_same.bind_all(&sets[0]);
        t_plain.bind_all(&sets[0]);
        t_pdl.bind_all(&sets[0]);
        t_still.bind_all(&sets[0]);
        // Rebinding through the driver: per-node parameter update, and re-capture + exec update.
        let node_graph = capture_chain(stream, &plain, false, &sets[0]);
        let nodes = node_graph.nodes().expect("nodes");
        let node_exec = RefCell::new(node_graph.instantiate().expect("instantiate"));
        let recap_exec = RefCell::new(
            capture_chain(stream, &plain, false, &sets[0])
                .instantiate()
                .expect("instantiate"),
        );
        let (mut i_plain, mut i_pdl, mut i_node, mut i_recap) = (0usize, 0usize, 0usize, 0usize);
        let variants: Vec<common::Variant> = vec![
            (
                "static",
                Box::new(|| timed(stream, || s_plain.launch(stream).expect("launch"))),
            ),
            (
                "static PDL",
                Box::new(|| timed(stream, || s_pdl.launch(stream).expect("launch"))),
            ),
            (
                "table, every pointer rebound",
                Box::new(|| {
                    i_plain += 1;
                    let set = &sets[i_plain % 2];
                    timed(stream, || {
                        t_plain.bind_all(set);
                        t_plain.launch(stream)
                    })
                }),
            ),
            (
                "table+PDL, every pointer rebound",
                Box::new(|| {
                    i_pdl += 1;
                    let set = &sets[i_pdl % 2];
                    timed(stream, || {
                        t_pdl.bind_all(set);
                        t_pdl.launch(stream)
                    })
                }),
            ),
            (
                "table+PDL, no bind",
                Box::new(|| timed(stream, || t_still.launch(stream))),
            ),
            (
                "table+PDL, rebound to the same buffers",
                Box::new(|| {
                    timed(stream, || {
                        t_same.bind_all(&sets[0]);
                        t_same.launch(stream)
                    })
                }),
            ),
            (
                "per-node update",
                Box::new(|| {
                    i_node += 1;
                    let set = &sets[i_node % 2];
                    timed(stream, || {
                        let mut exec = node_exec.borrow_mut();
                        for (k, node) in nodes.iter().enumerate() {
                            // SAFETY: add1 over ELEMS floats of two distinct ELEMS-float buffers.
                            unsafe {
                                exec.set_kernel_args(*node, (&set[k], &set[k + 1], ELEMS as i32))
                                    .expect("update")
                            };
                        }
                        exec.launch(stream).expect("launch")
                    })
                }),
            ),
            (
                "re-capture + exec update",
                Box::new(|| {
                    i_recap += 1;
                    let set = &sets[i_recap % 2];
                    timed(stream, || {
                        let g = capture_chain(stream, &plain, false, set);
                        let mut exec = recap_exec.borrow_mut();
                        assert_eq!(exec.update(&g).expect("update"), ExecUpdate::Updated);
                        exec.launch(stream).expect("launch")
                    })
                }),
            ),
        ];
        let wall = common::interleave(if n >= 1000 { 60 } else { 200 }, variants);
        let gpu = [
            gpu_time(stream, || s_plain.launch(stream).expect("launch")),
            gpu_time(stream, || s_pdl.launch(stream).expect("launch")),
            {
                let mut i = 0usize;
                gpu_time(stream, || {
                    i += 1;
                    t_plain.bind_all(&sets[i % 2]);
                    t_plain.launch(stream)
                })
            },
            {
                let mut i = 0usize;
                gpu_time(stream, || {
                    i += 1;
                    t_pdl.bind_all(&sets[i % 2]);
                    t_pdl.launch(stream)
                })
            },
            gpu_time(stream, || t_still.launch(stream)),
        ];
        if n == 200 {
            let mut group = c.benchmark_group("table_chain_200");
            group
                .sample_size(20)
                .measurement_time(Duration::from_secs(2));
            group.bench_function("static_replay", |b| {
                b.iter(|| timed(stream, || s_plain.launch(stream).expect("launch")))
            });
            let mut i = 0usize;
            group.bench_function("table_pdl_rebind_every_pointer", |b| {
                b.iter(|| {
                    i += 1;
                    timed(stream, || {
                        t_pdl.bind_all(&sets[i % 2]);
                        t_pdl.launch(stream)
                    })
                })
            });
            group.finish();
        }
        rows.push(Row { n, wall, gpu });
    }
    rows
}

/// A graph reading 16 KiB of an input of 1 MiB, 64 MiB or 1 GiB, where only the input moves
/// between steps (two inputs of each size, alternating): the static graph with the whole input
/// copied into the buffer it reads, vs the table + PDL form with the input's slot rebound. Wall
/// µs per synchronized step (1,000 rounds), and GPU µs of the table steps between events. The
/// three table cases run interleaved with each other, as do the
/// three copies: a 1 GiB copy between table steps would evict the L2 cache and the TLB the
/// table steps read through, and measure that instead of the table.
fn big_inputs(ctx: &Context, stream: &Stream) -> Vec<(usize, f64, f64, f64)> {
    const MIBS: [usize; 3] = [1, 64, 1024];
    let plain = load(ctx, graph_rt::kernels::CHAIN.ptx, "add1");
    let table_pdl = load(ctx, graph_rt::kernels::CHAIN_TABLE_PDL.ptx, "add1");
    let out = DeviceBuffer::<f32>::zeroed(ctx, ELEMS).expect("alloc");
    struct Size {
        inputs: Vec<DeviceBuffer<f32>>,
        fixed: RefCell<DeviceBuffer<f32>>,
        static_exec: GraphExec,
        chain: RefCell<TableChain>,
    }
    let sizes: Vec<Size> = MIBS
        .iter()
        .map(|mib| {
            let elems = mib << 18;
            let inputs: Vec<DeviceBuffer<f32>> = (0..2)
                .map(|_| DeviceBuffer::zeroed(ctx, elems).expect("alloc"))
                .collect();
            let fixed = DeviceBuffer::<f32>::zeroed(ctx, elems).expect("alloc");
            let c = cfg(false);
            let static_exec = stream
                .capture(CaptureMode::Global, |s| {
                    // SAFETY: add1 reads ELEMS floats of `fixed` (at least ELEMS), writes `out`.
                    unsafe { s.launch(&plain, &c, (&fixed, &out, ELEMS as i32))? };
                    Ok(())
                })
                .expect("capture")
                .instantiate()
                .expect("instantiate");
            let mut chain = table_chain(stream, &table_pdl, true, 1);
            chain.table.bind(&chain.slots[1], &out).expect("bind");
            chain.table.bind(&chain.slots[0], &inputs[0]).expect("bind");
            Size {
                inputs,
                fixed: RefCell::new(fixed),
                static_exec,
                chain: RefCell::new(chain),
            }
        })
        .collect();
    let turns: Vec<std::cell::Cell<usize>> = (0..6).map(|_| std::cell::Cell::new(0)).collect();
    let next = |i: usize| {
        turns[i].set(turns[i].get() + 1);
        turns[i].get() % 2
    };
    let names = ["1 MiB", "64 MiB", "1 GiB"];
    let table_cases: Vec<common::Variant> = sizes
        .iter()
        .enumerate()
        .map(|(i, size)| {
            let next = &next;
            let f: Box<dyn FnMut() -> f64 + '_> = Box::new(move || {
                let input = &size.inputs[next(i)];
                timed(stream, || {
                    let mut c = size.chain.borrow_mut();
                    let TableChain { table, slots, .. } = &mut *c;
                    table.bind(&slots[0], input).expect("bind");
                    c.launch(stream)
                })
            });
            (names[i], f)
        })
        .collect();
    let table = common::interleave(1000, table_cases);
    // The same steps' GPU time between events (refresh + kernel), interleaved likewise.
    let (start, end) = (
        Event::new(stream.context(), EventFlags::Timing).expect("event"),
        Event::new(stream.context(), EventFlags::Timing).expect("event"),
    );
    let gpu_cases: Vec<common::Variant> = sizes
        .iter()
        .enumerate()
        .map(|(i, size)| {
            let (next, start, end) = (&next, &start, &end);
            let f: Box<dyn FnMut() -> f64 + '_> = Box::new(move || {
                let input = &size.inputs[next(i)];
                let mut c = size.chain.borrow_mut();
                let TableChain { table, slots, .. } = &mut *c;
                table.bind(&slots[0], input).expect("bind");
                start.record(stream).expect("record");
                c.launch(stream);
                end.record(stream).expect("record");
                end.synchronize().expect("sync");
                Event::elapsed_ms(start, end).expect("elapsed") as f64 * 1e3
            });
            (names[i], f)
        })
        .collect();
    let gpu = common::interleave(1000, gpu_cases);
    let copy_cases: Vec<common::Variant> = sizes
        .iter()
        .enumerate()
        .map(|(i, size)| {
            let next = &next;
            let f: Box<dyn FnMut() -> f64 + '_> = Box::new(move || {
                let input = &size.inputs[next(3 + i)];
                timed(stream, || {
                    // SAFETY: both buffers outlive the synchronization that ends `timed`.
                    unsafe {
                        size.fixed
                            .borrow_mut()
                            .copy_from_device_async(input, stream)
                            .expect("copy")
                    };
                    size.static_exec.launch(stream).expect("launch")
                })
            });
            (names[i], f)
        })
        .collect();
    let copy = common::interleave(100, copy_cases);
    MIBS.iter()
        .zip(table.iter().zip(&copy).zip(&gpu))
        .map(|(mib, ((t, c), g))| (*mib, c.1, t.1, g.1))
        .collect()
}

fn main() {
    let Some(ctx) = common::start("table", true) else {
        return;
    };
    let stream = Stream::new(&ctx).expect("stream");
    let mut c = Criterion::default().configure_from_args();
    // GRAPH_RT_TABLE_PARTS: the parts to run, of "chains host big" (default: all).
    let parts = std::env::var("GRAPH_RT_TABLE_PARTS").unwrap_or_else(|_| "chains host big".into());
    let want = |p: &str| parts.split_whitespace().any(|x| x == p);
    let rows = if want("chains") {
        chains(&mut c, &ctx, &stream)
    } else {
        Vec::new()
    };
    let host = if want("host") {
        host_costs(&ctx, &stream)
    } else {
        Vec::new()
    };
    let big = if want("big") {
        big_inputs(&ctx, &stream)
    } else {
        Vec::new()
    };
    let writes = mirror_writes(&ctx);
    c.final_summary();
    println!("\ntable: argument table, chains of N add1, wall µs per synchronized iteration (median of interleaved rounds)");
    for r in &rows {
        let get = |name: &str| {
            r.wall
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(f64::NAN, |v| v.1)
        };
        let (st, still) = (get("static"), get("table+PDL, no bind"));
        let cells: Vec<String> = r
            .wall
            .iter()
            .map(|(name, v)| format!("{name} {v:.1}"))
            .collect();
        println!("table: N={:<5} {}", r.n, cells.join(" · "));
        let tp = get("table+PDL, every pointer rebound");
        println!(
            "table: N={:<5} table+PDL rebound / no bind {:.3}× · / static {:.3}× · table (no PDL) rebound / static {:.3}×",
            r.n,
            tp / still,
            tp / st,
            get("table, every pointer rebound") / st
        );
        println!(
            "table: N={:<5} GPU µs per replay: static {:.1} · static PDL {:.1} ({:.3}×) · table rebound {:.1} ({:.3}×) · table+PDL rebound {:.1} ({:.3}×) · table+PDL no bind {:.1} (rebound / no bind {:.3}×)",
            r.n,
            r.gpu[0],
            r.gpu[1],
            r.gpu[1] / r.gpu[0],
            r.gpu[2],
            r.gpu[2] / r.gpu[0],
            r.gpu[3],
            r.gpu[3] / r.gpu[0],
            r.gpu[4],
            r.gpu[3] / r.gpu[4]
        );
    }
    table_host::print(&host);
    let cells: Vec<String> = writes
        .iter()
        .map(|(n, ns)| format!("{n} {ns:.0} ns"))
        .collect();
    println!(
        "\ntable: writing 8 KiB (1,024 words): {}",
        cells.join(" · ")
    );
    println!("\ntable: a graph reading 16 KiB of a large input, only the input moving; wall µs per synchronized step");
    let (one_mib, one_mib_gpu) = big.first().map_or((f64::NAN, f64::NAN), |r| (r.2, r.3));
    for (mib, copy, table, gpu) in &big {
        println!(
            "table: input {:>4} MiB: static, input copied in {:.1} · table+PDL, input rebound {:.2} ({:.3}× the 1 MiB case; GPU time {:.2} µs, {:.3}×)",
            mib,
            copy,
            table,
            table / one_mib,
            gpu,
            gpu / one_mib_gpu
        );
    }
}
