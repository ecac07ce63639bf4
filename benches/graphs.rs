//! Chains of N tiny kernels (shared/baseline's workload: `add1` over 4096 floats, kernel k reads
//! buffer k and writes buffer k+1), N ∈ {10, 50, 200, 1000}. Every iteration rebinds every
//! pointer (two buffer sets, alternating) where the case rebinds at all, and synchronizes.
//!
//! Cases: eager launches; graph replay without rebinding (the floor); rebinding by per-node
//! parameter update; rebinding by re-capture + exec update; and the host cost of capture +
//! instantiate through graph-rt vs the raw driver calls. Criterion measures each case with an
//! untimed run of the case it is compared with before each timed run; the table printed last
//! gives medians of interleaved rounds and their ratios to the replay floor.
//!
//! On compute capability 9.0+ it also measures eager launches and replay of the same chain built
//! from `kernels::CHAIN_PDL` launched with programmatic dependent launch (captured as
//! programmatic edges), interleaved with the plain eager and replay cases.
//!
//! ```text
//! cargo bench --bench graphs
//! ```

mod common;

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use graph_rt::sys;
use graph_rt::{
    CaptureMode, Context, DeviceBuffer, Event, EventFlags, ExecUpdate, Function, Graph,
    LaunchConfig, Module, Stream,
};

const ELEMS: usize = 4096;
const SIZES: [usize; 4] = [10, 50, 200, 1000];

/// Registers `case` with criterion. Each timed iteration `i` follows an untimed iteration `i + 1`
/// of `partner` (the case it is compared with; cases alternate buffer sets by iteration parity), so that criterion measures both in the same
/// conditions, as the interleaved table does; measured alone one after the other, cases that
/// build and destroy graphs drift far apart.
fn pair(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    case: &dyn Fn(u64),
    partner: &dyn Fn(u64),
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for i in 0..iters {
                partner(i + 1);
                let t = Instant::now();
                case(i);
                total += t.elapsed();
            }
            total
        })
    });
}

/// Runs `body` once and returns its time in µs.
fn once(body: impl FnOnce()) -> f64 {
    let t = Instant::now();
    body();
    t.elapsed().as_secs_f64() * 1e6
}

struct Chain {
    sets: [Vec<DeviceBuffer<f32>>; 2],
}

impl Chain {
    fn new(ctx: &Context, n: usize) -> Self {
        let set = || {
            (0..=n)
                .map(|_| DeviceBuffer::<f32>::zeroed(ctx, ELEMS).expect("alloc"))
                .collect::<Vec<_>>()
        };
        Self {
            sets: [set(), set()],
        }
    }

    fn capture(&self, stream: &Stream, f: &Function, which: usize) -> Graph {
        self.capture_with(stream, f, &LaunchConfig::for_elements(ELEMS, 256), which)
    }

    fn capture_with(
        &self,
        stream: &Stream,
        f: &Function,
        cfg: &LaunchConfig,
        which: usize,
    ) -> Graph {
        let set = &self.sets[which];
        stream
            .capture(CaptureMode::Global, |s| {
                for k in 0..set.len() - 1 {
                    // SAFETY: add1 touches ELEMS elements of two ELEMS-element buffers.
                    // With programmatic launch, add1 of CHAIN_PDL waits before reading.
                    unsafe { s.launch(f, cfg, (&set[k], &set[k + 1], ELEMS as i32))? };
                }
                Ok(())
            })
            .expect("capture")
    }
}

/// Medians of each case for one N, measured interleaved.
struct Row {
    n: usize,
    replay_gpu: f64,
    eager: f64,
    replay: f64,
    node_update: f64,
    recapture: f64,
    capture: f64,
    capture_raw: f64,
    pdl: Option<PdlRow>,
}

/// Eager and replay of the programmatic-dependent-launch chain, from the same rounds.
struct PdlRow {
    replay_gpu: f64,
    eager: f64,
    replay: f64,
}

/// `CHAIN_PDL`'s add1 and its launch configuration, where the GPU supports them.
fn pdl_kernel(ctx: &Context) -> Option<(Function, LaunchConfig)> {
    let cc = ctx
        .device()
        .compute_capability()
        .expect("compute capability");
    let (major, minor) = graph_rt::kernels::CHAIN_PDL.min_compute_capability;
    if cc < (major as i32, minor as i32) {
        eprintln!("programmatic dependent launch needs compute capability 9.0; skipped");
        return None;
    }
    let f = Module::from_ptx(ctx, graph_rt::kernels::CHAIN_PDL.ptx)
        .expect("module")
        .function("add1")
        .expect("add1");
    let cfg = LaunchConfig::for_elements(ELEMS, 256).programmatic_stream_serialization();
    Some((f, cfg))
}

/// Launches add1 over every link of `set`, one launch at a time.
fn eager(stream: &Stream, f: &Function, cfg: &LaunchConfig, set: &[DeviceBuffer<f32>]) {
    for k in 0..set.len() - 1 {
        // SAFETY: as in Chain::capture.
        unsafe {
            stream
                .launch(f, cfg, (&set[k], &set[k + 1], ELEMS as i32))
                .expect("launch")
        };
    }
}

fn bench_chains(c: &mut Criterion, ctx: &Context) -> Vec<Row> {
    let mut rows = Vec::new();
    let stream = Stream::new(ctx).expect("stream");
    let f = Module::from_ptx(ctx, graph_rt::kernels::CHAIN.ptx)
        .expect("module")
        .function("add1")
        .expect("add1");
    let cfg = LaunchConfig::for_elements(ELEMS, 256);
    let pdl = pdl_kernel(ctx);
    let sync = || stream.synchronize().expect("sync");
    for n in SIZES {
        let chain = Chain::new(ctx, n);
        let mut group = c.benchmark_group(format!("chain_{n}"));
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));

        let graph = chain.capture(&stream, &f, 0);
        let nodes = graph.nodes().expect("nodes");
        // One exec per case, so that neither case's changes fall on the other's measurement
        // (an exec update makes the next per-node update read the kernel nodes anew).
        let exec = RefCell::new(graph.instantiate().expect("instantiate"));
        let updated = RefCell::new(graph.instantiate().expect("instantiate"));
        let set = |i: u64| &chain.sets[(i % 2) as usize];
        let eager_case = |i| {
            eager(&stream, &f, &cfg, set(i));
            sync();
        };
        let replay_case = |_| {
            exec.borrow().launch(&stream).expect("launch");
            sync();
        };
        let node_update = |i| {
            let set = set(i);
            let mut exec = exec.borrow_mut();
            for (k, node) in nodes.iter().enumerate() {
                // SAFETY: as in Chain::capture.
                unsafe {
                    exec.set_kernel_args(*node, (&set[k], &set[k + 1], ELEMS as i32))
                        .expect("update")
                };
            }
            exec.launch(&stream).expect("launch");
            sync();
        };
        let recapture = |i| {
            let g = chain.capture(&stream, &f, (i % 2) as usize);
            let mut exec = updated.borrow_mut();
            assert_eq!(exec.update(&g).expect("update"), ExecUpdate::Updated);
            exec.launch(&stream).expect("launch");
            sync();
        };
        let ptrs: Vec<u64> = chain.sets[0].iter().map(|b| b.as_raw()).collect();
        let capture = |_| {
            drop(
                chain
                    .capture(&stream, &f, 0)
                    .instantiate()
                    .expect("instantiate"),
            )
        };
        let capture_raw = |_| raw_capture_instantiate(&stream, &f, &cfg, &ptrs);
        pair(&mut group, "eager", &eager_case, &replay_case);
        pair(&mut group, "replay", &replay_case, &eager_case);
        pair(&mut group, "node_update", &node_update, &recapture);
        pair(&mut group, "recapture_update", &recapture, &node_update);
        pair(&mut group, "capture_instantiate", &capture, &capture_raw);
        pair(
            &mut group,
            "capture_instantiate_raw",
            &capture_raw,
            &capture,
        );
        drop((exec, updated));
        drop(graph);
        if let Some((pf, pcfg)) = &pdl {
            let exec = chain
                .capture_with(&stream, pf, pcfg, 0)
                .instantiate()
                .expect("instantiate");
            let eager_case = |i| {
                eager(&stream, pf, pcfg, set(i));
                sync();
            };
            let replay_case = |_| {
                exec.launch(&stream).expect("launch");
                sync();
            };
            pair(&mut group, "eager_pdl", &eager_case, &replay_case);
            pair(&mut group, "replay_pdl", &replay_case, &eager_case);
        }
        group.finish();
        rows.push(interleaved_row(
            n,
            &chain,
            &stream,
            (&f, &cfg),
            pdl.as_ref(),
        ));
    }
    rows
}

/// Every case of one N, in interleaved pairs; rebinding cases alternate buffer sets.
fn interleaved_row(
    n: usize,
    chain: &Chain,
    stream: &Stream,
    (f, cfg): (&Function, &LaunchConfig),
    pdl: Option<&(Function, LaunchConfig)>,
) -> Row {
    let sync = || stream.synchronize().expect("sync");
    let graph = chain.capture(stream, f, 0);
    let nodes = graph.nodes().expect("nodes");
    let exec = RefCell::new(graph.instantiate().expect("instantiate"));
    let updated = RefCell::new(graph.instantiate().expect("instantiate"));
    // Each rebinding case alternates buffer sets on its own turns.
    let turns = [Cell::new(0usize), Cell::new(0usize), Cell::new(0usize)];
    let next = |case: usize| {
        turns[case].set(turns[case].get() + 1);
        turns[case].get() % 2
    };
    let ptrs: Vec<u64> = chain.sets[0].iter().map(|b| b.as_raw()).collect();
    let rounds = if n >= 1000 { 60 } else { 150 };
    let pdl_exec = pdl.map(|(pf, pcfg)| {
        chain
            .capture_with(stream, pf, pcfg, 0)
            .instantiate()
            .expect("instantiate")
    });
    // Interleaved groups, so that no case follows one that leaves the driver other work.
    let mut eager_replay: Vec<common::Variant> = vec![
        (
            "eager",
            Box::new(|| {
                once(|| {
                    eager(stream, f, cfg, &chain.sets[next(0)]);
                    sync();
                })
            }),
        ),
        (
            "replay",
            Box::new(|| {
                once(|| {
                    exec.borrow().launch(stream).expect("launch");
                    sync();
                })
            }),
        ),
    ];
    if let (Some((pf, pcfg)), Some(pexec)) = (pdl, &pdl_exec) {
        eager_replay.push((
            "eager_pdl",
            Box::new(move || {
                once(|| {
                    eager(stream, pf, pcfg, &chain.sets[next(0)]);
                    sync();
                })
            }),
        ));
        eager_replay.push((
            "replay_pdl",
            Box::new(|| {
                once(|| {
                    pexec.launch(stream).expect("launch");
                    sync();
                })
            }),
        ));
    }
    let a = common::interleave(rounds, eager_replay);
    let b = common::interleave(
        rounds,
        vec![
            (
                "node_update",
                Box::new(|| {
                    once(|| {
                        let set = &chain.sets[next(1)];
                        let mut exec = exec.borrow_mut();
                        for (k, node) in nodes.iter().enumerate() {
                            // SAFETY: as in Chain::capture.
                            unsafe {
                                exec.set_kernel_args(*node, (&set[k], &set[k + 1], ELEMS as i32))
                                    .expect("update")
                            };
                        }
                        exec.launch(stream).expect("launch");
                        sync();
                    })
                }),
            ),
            (
                "recapture_update",
                Box::new(|| {
                    once(|| {
                        let g = chain.capture(stream, f, next(2));
                        let mut exec = updated.borrow_mut();
                        assert_eq!(exec.update(&g).expect("update"), ExecUpdate::Updated);
                        exec.launch(stream).expect("launch");
                        sync();
                    })
                }),
            ),
        ],
    );
    let c = common::interleave(
        rounds,
        vec![
            (
                "capture_instantiate",
                Box::new(|| {
                    once(|| {
                        let g = chain.capture(stream, f, 0);
                        drop(g.instantiate().expect("instantiate"));
                    })
                }),
            ),
            (
                "capture_instantiate_raw",
                Box::new(|| once(|| raw_capture_instantiate(stream, f, cfg, &ptrs))),
            ),
        ],
    );
    let replay_gpu = replay_gpu_time(&exec.borrow(), stream);
    let pdl = pdl_exec.map(|pexec| PdlRow {
        replay_gpu: replay_gpu_time(&pexec, stream),
        eager: a[2].1,
        replay: a[3].1,
    });
    Row {
        n,
        replay_gpu,
        eager: a[0].1,
        replay: a[1].1,
        node_update: b[0].1,
        recapture: b[1].1,
        capture: c[0].1,
        capture_raw: c[1].1,
        pdl,
    }
}

/// GPU time of one replay without rebinding, between events (as shared/baseline measures it).
fn replay_gpu_time(exec: &graph_rt::GraphExec, stream: &Stream) -> f64 {
    let ctx = stream.context();
    let (start, end) = (
        Event::new(ctx, EventFlags::Timing).expect("event"),
        Event::new(ctx, EventFlags::Timing).expect("event"),
    );
    let times = (0..50)
        .map(|_| {
            start.record(stream).expect("record");
            exec.launch(stream).expect("launch");
            end.record(stream).expect("record");
            end.synchronize().expect("sync");
            Event::elapsed_ms(&start, &end).expect("elapsed") as f64 * 1e3
        })
        .collect();
    common::median(times)
}

fn print_table(rows: &[Row]) {
    println!("\ntable: chains of N add1 kernels, median µs per iteration (interleaved rounds); ratio to the replay floor");
    println!(
        "table: {:>5} | {:>16} | {:>8} | {:>16} | {:>18} | {:>9} | {:>9} | {:>7}",
        "N", "eager", "replay", "node update", "recapture+update", "cap+inst", "raw", "ratio"
    );
    for r in rows {
        println!(
            "table: N={:<5} replay GPU time between events: {:.1} µs",
            r.n, r.replay_gpu
        );
    }
    for r in rows {
        let cell = |v: f64| format!("{v:.1} ({:.2}×)", v / r.replay);
        println!(
            "table: {:>5} | {:>16} | {:>8.1} | {:>16} | {:>18} | {:>9.1} | {:>9.1} | {:>6.3}×",
            r.n,
            cell(r.eager),
            r.replay,
            cell(r.node_update),
            cell(r.recapture),
            r.capture,
            r.capture_raw,
            r.capture / r.capture_raw
        );
    }
    println!("\ntable: eager vs replay, plain add1 (CHAIN) and programmatic dependent launch (CHAIN_PDL), same rounds");
    println!(
        "table: {:>5} | {:>8} | {:>8} | {:>13} | {:>9} | {:>9} | {:>13} | {:>15}",
        "N",
        "eager",
        "replay",
        "eager/replay",
        "PDL eager",
        "PDL repl.",
        "eager/replay",
        "PDL replay GPU"
    );
    for r in rows {
        let Some(p) = &r.pdl else { continue };
        println!(
            "table: {:>5} | {:>8.1} | {:>8.1} | {:>12.2}× | {:>9.1} | {:>9.1} | {:>12.2}× | {:>15.1}",
            r.n,
            r.eager,
            r.replay,
            r.eager / r.replay,
            p.eager,
            p.replay,
            p.eager / p.replay,
            p.replay_gpu
        );
    }
}

/// The same capture and instantiation through the driver API alone.
fn raw_capture_instantiate(stream: &Stream, f: &Function, cfg: &LaunchConfig, ptrs: &[u64]) {
    let ok = Ok(sys::CUresult::CUDA_SUCCESS);
    let n = ELEMS as i32;
    // SAFETY: valid stream, function and buffers; every handle made here is destroyed here.
    unsafe {
        assert_eq!(
            sys::cuStreamBeginCapture(
                stream.as_raw(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL
            ),
            ok
        );
        for k in 0..ptrs.len() - 1 {
            let mut params = [
                &ptrs[k] as *const u64 as *mut c_void,
                &ptrs[k + 1] as *const u64 as *mut c_void,
                &n as *const i32 as *mut c_void,
            ];
            let r = sys::cuLaunchKernel(
                f.as_raw(),
                cfg.grid.x,
                1,
                1,
                cfg.block.x,
                1,
                1,
                0,
                stream.as_raw(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            );
            assert_eq!(r, ok);
        }
        let mut graph = std::ptr::null_mut();
        assert_eq!(sys::cuStreamEndCapture(stream.as_raw(), &mut graph), ok);
        let mut exec = std::ptr::null_mut();
        assert_eq!(sys::cuGraphInstantiate(&mut exec, graph, 0), ok);
        assert_eq!(sys::cuGraphExecDestroy(exec), ok);
        assert_eq!(sys::cuGraphDestroy(graph), ok);
    }
}

fn main() {
    let Some(ctx) = common::start("graphs", false) else {
        return;
    };
    let mut c = Criterion::default().configure_from_args();
    let rows = bench_chains(&mut c, &ctx);
    c.final_summary();
    print_table(&rows);
}
