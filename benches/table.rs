//! The argument table on the chain workload (shared/baseline's: `add1` over 4096 floats, kernel
//! k reads buffer k and writes buffer k+1), N ∈ {10, 50, 200, 1000}, every iteration
//! synchronized. Cases, interleaved in rounds: the plain static graph and the PDL static graph
//! replayed with no rebinding; every pointer rebound before each replay through the table
//! (plain table-form kernels) and through the table with PDL (loads before `griddepcontrol.wait`);
//! and the table + PDL exec launched with no binding in between. Wall µs per iteration, and GPU
//! µs of one replay between events. Then the host µs of binding K slots + launching (no
//! synchronization in the timed part) against the same launch with no binding, for K ∈ {1, 10,
//! 100, 1000}, with safe bindings and with raw addresses. Criterion measures the N = 200 cases
//! too; the tables printed last are medians of interleaved rounds.
//!
//! ```text
//! cargo bench --bench table
//! ```

mod common;

use std::time::{Duration, Instant};

use criterion::Criterion;
use graph_rt::{
    ArgTable, CaptureMode, Context, DeviceBuffer, Event, EventFlags, Function, GraphExec,
    LaunchConfig, Module, PtrSlot, Stream, TableOptions,
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
    let c = cfg(pdl);
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            for k in 0..bufs.len() - 1 {
                // SAFETY: add1 over ELEMS floats of two distinct ELEMS-float buffers.
                unsafe { s.launch(f, &c, (&bufs[k], &bufs[k + 1], ELEMS as i32))? };
            }
            Ok(())
        })
        .expect("capture");
    graph.instantiate().expect("instantiate")
}

/// A table-form chain of `steps` kernels over slots 0..=steps of a new table.
struct TableChain {
    table: ArgTable,
    slots: Vec<PtrSlot<f32>>,
    exec: GraphExec,
}

fn table_chain(stream: &Stream, f: &Function, pdl: bool, steps: usize) -> TableChain {
    let options = TableOptions {
        capacity: steps + 1,
        depth: 4,
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
    let times = (0..50)
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
    gpu: [f64; 3],
}

fn chains(c: &mut Criterion, ctx: &Context, stream: &Stream) -> Vec<Row> {
    let plain = load(ctx, graph_rt::kernels::CHAIN.ptx, "add1");
    let pdl = load(ctx, graph_rt::kernels::CHAIN_PDL.ptx, "add1");
    let table = load(ctx, graph_rt::kernels::CHAIN_TABLE.ptx, "add1_table");
    let table_pdl = load(
        ctx,
        graph_rt::kernels::CHAIN_TABLE_PDL.ptx,
        "add1_table_pdl",
    );
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
        t_plain.bind_all(&sets[0]);
        t_pdl.bind_all(&sets[0]);
        t_still.bind_all(&sets[0]);
        let (mut i_plain, mut i_pdl) = (0usize, 0usize);
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
        ];
        let wall = common::interleave(if n >= 1000 { 60 } else { 200 }, variants);
        let gpu = [
            gpu_time(stream, || s_plain.launch(stream).expect("launch")),
            gpu_time(stream, || s_pdl.launch(stream).expect("launch")),
            {
                let mut i = 0usize;
                gpu_time(stream, || {
                    i += 1;
                    t_pdl.bind_all(&sets[i % 2]);
                    t_pdl.launch(stream)
                })
            },
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

/// Host µs of binding every slot of a K-slot table + launching, safe and raw, vs launching alone.
fn host_costs(ctx: &Context, stream: &Stream) -> Vec<(usize, Vec<(&'static str, f64)>)> {
    let table_pdl = load(
        ctx,
        graph_rt::kernels::CHAIN_TABLE_PDL.ptx,
        "add1_table_pdl",
    );
    let mut out = Vec::new();
    for k in [1usize, 10, 100, 1000] {
        let sets: Vec<Vec<DeviceBuffer<f32>>> = (0..2)
            .map(|_| {
                (0..k)
                    .map(|_| DeviceBuffer::zeroed(ctx, ELEMS).expect("alloc"))
                    .collect()
            })
            .collect();
        let mut chain = table_chain(stream, &table_pdl, true, k - 1);
        chain.bind_all(&sets[0]);
        let chain = std::cell::RefCell::new(chain);
        let host = |f: &mut dyn FnMut()| {
            let t = Instant::now();
            f();
            let us = t.elapsed().as_secs_f64() * 1e6;
            stream.synchronize().expect("sync");
            us
        };
        let (mut i, mut j) = (0usize, 0usize);
        let variants: Vec<common::Variant> = vec![
            (
                "launch, no bind",
                Box::new(|| host(&mut || chain.borrow_mut().launch(stream))),
            ),
            (
                "bind K + launch",
                Box::new(|| {
                    i += 1;
                    host(&mut || {
                        let mut c = chain.borrow_mut();
                        c.bind_all(&sets[i % 2]);
                        c.launch(stream)
                    })
                }),
            ),
            (
                "bind K raw + launch",
                Box::new(|| {
                    j += 1;
                    host(&mut || {
                        let mut c = chain.borrow_mut();
                        c.bind_all_raw(&sets[j % 2]);
                        c.launch(stream)
                    })
                }),
            ),
        ];
        out.push((k, common::interleave(300, variants)));
    }
    out
}

fn main() {
    let ctx = match Context::new(0) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("table bench skipped: {e}");
            return;
        }
    };
    if ctx
        .device()
        .compute_capability()
        .map_or(true, |cc| cc.0 < 9)
    {
        eprintln!(
            "table bench skipped: programmatic dependent launch needs compute capability 9.0"
        );
        return;
    }
    let stream = Stream::new(&ctx).expect("stream");
    let mut c = Criterion::default().configure_from_args();
    let rows = chains(&mut c, &ctx, &stream);
    let host = host_costs(&ctx, &stream);
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
            "table: N={:<5} GPU µs per replay: static {:.1} · static PDL {:.1} ({:.3}×) · table+PDL rebound {:.1} ({:.3}×)",
            r.n,
            r.gpu[0],
            r.gpu[1],
            r.gpu[1] / r.gpu[0],
            r.gpu[2],
            r.gpu[2] / r.gpu[0]
        );
    }
    println!("\ntable: host µs of binding K slots + launch (no sync in the timed part), median of interleaved rounds");
    for (k, v) in &host {
        let cells: Vec<String> = v.iter().map(|(name, t)| format!("{name} {t:.2}")).collect();
        let base = v[0].1;
        println!(
            "table: K={:<5} {} · extra: safe {:+.2} µs, raw {:+.2} µs",
            k,
            cells.join(" · "),
            v[1].1 - base,
            v[2].1 - base
        );
    }
}
