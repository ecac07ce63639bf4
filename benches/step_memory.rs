//! Memory inside steps, with the `step_memory` example's work (cudarc allocations on the
//! capturing stream, kept to the end of each call):
//!
//! - eight such steps on one stream, their intermediates 1× to 16× apart, made smallest first
//!   and largest first: the device's graph memory they hold against the largest alone, and
//!   against the same eight each on a stream of its own; each exec's own memory;
//! - one step's memory by part against what `cuMemGetInfo` shows less a baseline, and the
//!   estimate from its eager run against the graph memory it holds;
//! - wall µs of a synchronized call and host µs of binding + calling, against the same step on
//!   intermediates made before (no memory nodes), interleaved, median of three runs;
//! - how long a dropped step's graph memory takes to go back to the driver, with no
//!   synchronize.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr};
use graph_rt::step::{Buf, Step, StepMode, StepOptions, StepParams, StepScope};
use graph_rt::{Context, DeviceBuffer, Stream};

mod common;
#[path = "../examples/step_memory/forward.rs"]
mod forward;

use forward::{floats_for, forward, multiple, SPREAD_PTX, TEMPORARIES};

/// The intermediates of the eight steps, MiB a call: 1× to 16× apart.
const SIZES_MIB: [usize; 8] = [64, 128, 192, 256, 384, 512, 768, 1024];
const GRANULE: u64 = 2 << 20;

type Body = Box<dyn FnMut(&StepScope<'_>) -> graph_rt::Result<()>>;

struct Made {
    step: Step<Body>,
    x: Buf<f32>,
    y: Buf<f32>,
    n: usize,
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// A step on `cu` (whose graph-rt stream is `stream`) of intermediates adding up to `mib` MiB:
/// allocated in the closure, or the buffers `made`.
fn make(
    ctx: &Context,
    stream: &Stream,
    cu: &Arc<CudaStream>,
    spread: &CudaFunction,
    mib: usize,
    made: Option<Arc<Vec<u64>>>,
) -> Made {
    let n = floats_for(mib);
    let mut params = StepParams::new(ctx, 4).expect("params");
    let (x, y) = (
        params.buffer::<f32>(n).expect("x"),
        params.buffer::<f32>(n).expect("y"),
    );
    params
        .bind(&x, &DeviceBuffer::zeroed(ctx, n).expect("x"))
        .expect("bind");
    params
        .bind(&y, &DeviceBuffer::zeroed(ctx, n).expect("y"))
        .expect("bind");
    let (bx, by, cu, spread) = (x.clone(), y.clone(), cu.clone(), spread.clone());
    let body: Body = Box::new(move |s| {
        let (xp, yp) = (s.buffer(&bx)?.as_raw(), s.buffer(&by)?.as_raw());
        let made = made.as_deref().map(Vec::as_slice);
        forward(&cu, &spread, xp, yp, n, made).map_err(graph_rt::Error::from)
    });
    let step = Step::new(stream, params, StepOptions::default(), body).expect("step");
    assert!(
        matches!(step.mode(), StepMode::Graph { .. }),
        "{:?}",
        step.mode()
    );
    Made { step, x, y, n }
}

fn memory(m: &Made) -> graph_rt::step::StepMemory {
    match m.step.mode() {
        StepMode::Graph { build, .. } => build.memory,
        mode => panic!("{mode:?}"),
    }
}

/// Runs every step once (bound to buffers of its own, returned), waits for `streams`.
fn run_all(steps: &mut [Made], streams: &[&Stream]) -> Vec<(DeviceBuffer<f32>, DeviceBuffer<f32>)> {
    let ctx = streams[0].context().clone();
    let mut kept = Vec::new();
    for m in steps.iter_mut() {
        let (x, y) = (
            DeviceBuffer::<f32>::zeroed(&ctx, m.n).expect("x"),
            DeviceBuffer::<f32>::zeroed(&ctx, m.n).expect("y"),
        );
        m.step.bind(&m.x, &x).expect("bind");
        m.step.bind(&m.y, &y).expect("bind");
        m.step.run().expect("run");
        kept.push((x, y));
    }
    for s in streams {
        s.synchronize().expect("sync");
    }
    kept
}

/// Free device memory (`cuMemGetInfo`) once the device's stream-ordered pool has returned what
/// it keeps (the closures' eager runs allocate there) and the reading is steady.
fn settled_free(ctx: &Context) -> u64 {
    let mut last = 0;
    loop {
        ctx.synchronize().expect("sync");
        ctx.trim_pool().expect("trim pool");
        let free = ctx.memory_info().expect("memory info").0 as u64;
        if free == last {
            return free;
        }
        last = free;
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The device's graph memory reserved now (a trim would return even idle execs' memory).
fn reserved(ctx: &Context) -> u64 {
    ctx.synchronize().expect("sync");
    ctx.graph_memory().expect("graph memory").reserved
}

/// [`reserved`] after returning what no live exec holds to the driver (once dropped steps'
/// execs, released by the context's thread, are gone).
fn trimmed(ctx: &Context) -> u64 {
    let start = Instant::now();
    let mut last = u64::MAX;
    loop {
        ctx.synchronize().expect("sync");
        ctx.trim_graph_memory().expect("trim");
        let now = reserved(ctx);
        if now == 0 || (now == last && start.elapsed() > Duration::from_millis(200)) {
            return now;
        }
        last = now;
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn main() {
    let Some(ctx) = common::start("step_memory", false) else {
        return;
    };
    let cctx = CudaContext::new(0).expect("cudarc context");
    let cu = cctx.new_stream().expect("cudarc stream");
    let stream = Stream::from_cudarc(&cu).expect("stream");
    let module = cctx
        .load_module(cudarc::nvrtc::Ptx::from_src(SPREAD_PTX))
        .expect("spread");
    let spread = module.load_function("spread").expect("spread");

    // The largest alone: the graph memory it holds, and its estimate.
    let largest = *SIZES_MIB.last().unwrap_or(&1024);
    let base = trimmed(&ctx);
    let mut alone = vec![make(&ctx, &stream, &cu, &spread, largest, None)];
    run_all(&mut alone, &[&stream]);
    let alone_bytes = reserved(&ctx).saturating_sub(base);
    let m = memory(&alone[0]);
    let estimate = m.estimate.unwrap_or(0);
    println!(
        "step_memory: the {largest} MiB step alone: graph memory {:.1} MiB reserved ({:.1} MiB allocated), its estimate {:.1} MiB ({:+.1}%, {:+.1} granules)",
        mib(alone_bytes),
        mib(m.graph_allocations),
        mib(estimate),
        (estimate as f64 / alone_bytes as f64 - 1.0) * 100.0,
        (estimate as f64 - alone_bytes as f64) / GRANULE as f64
    );
    drop(alone);

    // Eight on one stream, in both creation orders; then each on its own stream.
    for (order, sizes) in [
        ("smallest first", SIZES_MIB.to_vec()),
        ("largest first", SIZES_MIB.iter().rev().copied().collect()),
    ] {
        let base = trimmed(&ctx);
        let mut steps: Vec<Made> = sizes
            .iter()
            .map(|&s| make(&ctx, &stream, &cu, &spread, s, None))
            .collect();
        run_all(&mut steps, &[&stream]);
        let held = reserved(&ctx).saturating_sub(base);
        let execs: Vec<String> = steps
            .iter()
            .map(|m| format!("{:.1}", mib(memory(m).exec)))
            .collect();
        println!(
            "step_memory: eight steps on one stream ({order}): graph memory {:.1} MiB = {:.3}× the largest alone; each exec's own MiB: {}",
            mib(held),
            held as f64 / alone_bytes as f64,
            execs.join(" ")
        );
    }
    {
        let base = trimmed(&ctx);
        let streams: Vec<(Arc<CudaStream>, Stream)> = SIZES_MIB
            .iter()
            .map(|_| {
                let c = cctx.new_stream().expect("cudarc stream");
                let s = Stream::from_cudarc(&c).expect("stream");
                (c, s)
            })
            .collect();
        let mut steps: Vec<Made> = SIZES_MIB
            .iter()
            .zip(&streams)
            .map(|(&size, (c, s))| make(&ctx, s, c, &spread, size, None))
            .collect();
        let all: Vec<&Stream> = streams.iter().map(|(_, s)| s).collect();
        run_all(&mut steps, &all);
        let held = reserved(&ctx).saturating_sub(base);
        let sum: u64 = steps.iter().map(|m| memory(m).graph_allocations).sum();
        println!(
            "step_memory: the same eight each on its own stream: graph memory {:.1} MiB = {:.3}× the largest alone (their allocations add up to {:.1} MiB)",
            mib(held),
            held as f64 / alone_bytes as f64,
            mib(sum)
        );
    }

    // One step's parts against cuMemGetInfo less a baseline (modules loaded by the steps above).
    {
        let graph_before = trimmed(&ctx);
        let before = settled_free(&ctx);
        let mut one = vec![make(&ctx, &stream, &cu, &spread, 256, None)];
        let kept = run_all(&mut one, &[&stream]);
        // No graph-memory trim here: it would return the idle exec's memory too.
        let after = settled_free(&ctx);
        let graph_after = reserved(&ctx);
        let m = memory(&one[0]);
        let parts = m.graph_reserved + m.exec + m.prelude + m.table;
        // The step's x and y, and the two run_all bound: buffers of the bench, not the step's.
        let bound = 4 * ((floats_for(256) * 4) as u64).next_multiple_of(GRANULE);
        let used = before.saturating_sub(after).saturating_sub(bound);
        println!(
            "step_memory: a 256 MiB step's parts: graph {:.1} MiB reserved, exec {:.1} MiB, prelude {} B, table {} B = {:.1} MiB; cuMemGetInfo less the baseline and the bench's 4 buffers ({:.1} MiB) {:.1} MiB ({:+.2} granules; the device's graph memory {:.1} → {:.1} MiB reserved)",
            mib(m.graph_reserved),
            mib(m.exec),
            m.prelude,
            m.table,
            mib(parts),
            mib(bound),
            mib(used),
            (used as f64 - parts as f64) / GRANULE as f64,
            mib(graph_before),
            mib(graph_after)
        );
        drop(kept);
    }

    // Replay and host time against the same step on intermediates made before.
    let n = floats_for(256);
    let made: Vec<CudaSlice<f32>> = (0..TEMPORARIES)
        .map(|i| cu.alloc_zeros::<f32>(n * multiple(i)).expect("alloc"))
        .collect();
    let addresses: Vec<u64> = made.iter().map(|t| t.device_ptr(&cu).0).collect();
    cu.synchronize().expect("sync");
    let allocating = RefCell::new(make(&ctx, &stream, &cu, &spread, 256, None));
    let preallocated = RefCell::new(make(
        &ctx,
        &stream,
        &cu,
        &spread,
        256,
        Some(Arc::new(addresses)),
    ));
    let sets: Vec<(DeviceBuffer<f32>, DeviceBuffer<f32>)> = (0..2)
        .map(|_| {
            (
                DeviceBuffer::zeroed(&ctx, n).expect("x"),
                DeviceBuffer::zeroed(&ctx, n).expect("y"),
            )
        })
        .collect();
    let call = |m: &RefCell<Made>, turn: usize, wall: bool| {
        let mut m = m.borrow_mut();
        let (x, y) = &sets[turn % 2];
        let (px, py) = (m.x.clone(), m.y.clone());
        let t = Instant::now();
        m.step.bind(&px, x).expect("bind");
        m.step.bind(&py, y).expect("bind");
        m.step.run().expect("run");
        if wall {
            stream.synchronize().expect("sync");
        }
        let us = t.elapsed().as_secs_f64() * 1e6;
        stream.synchronize().expect("sync");
        us
    };
    let (mut a, mut b, mut c, mut d) = (0, 0, 0, 0);
    let runs = common::interleave_repeated(
        3,
        30,
        vec![
            (
                "allocating, wall",
                Box::new(|| {
                    a += 1;
                    call(&allocating, a, true)
                }),
            ),
            (
                "preallocated, wall",
                Box::new(|| {
                    b += 1;
                    call(&preallocated, b, true)
                }),
            ),
            (
                "allocating, host",
                Box::new(|| {
                    c += 1;
                    call(&allocating, c, false)
                }),
            ),
            (
                "preallocated, host",
                Box::new(|| {
                    d += 1;
                    call(&preallocated, d, false)
                }),
            ),
        ],
    );
    let ratio = |k: usize| -> Vec<f64> { runs.iter().map(|r| r[k].1 / r[k + 1].1).collect() };
    let (wall, host) = (ratio(0), ratio(2));
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    for r in &runs {
        let parts: Vec<String> = r.iter().map(|(n, us)| format!("{n} {us:.2} µs")).collect();
        println!("step_memory: run: {}", parts.join(" · "));
    }
    println!(
        "step_memory: a 256 MiB step allocating its intermediates ÷ the same on intermediates made before: wall {:.3}×, host {:.3}× (median of 3 runs; wall {}, host {})",
        common::median(wall.clone()),
        common::median(host.clone()),
        fmt(&wall),
        fmt(&host)
    );
    drop((preallocated, made));

    // A dropped step's graph memory back to the driver, with no synchronize.
    call(&allocating, 0, false);
    let held = ctx.graph_memory().expect("graph memory");
    drop(allocating);
    let dropped = Instant::now();
    let back = loop {
        let now = ctx.graph_memory().expect("graph memory").reserved;
        if now + GRANULE < held.reserved {
            break Some(dropped.elapsed());
        }
        if dropped.elapsed() > Duration::from_secs(5) {
            break None;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    match back {
        Some(t) => println!(
            "step_memory: a dropped step's graph memory went back to the driver {:.2} ms after the drop",
            t.as_secs_f64() * 1e3
        ),
        None => {
            // What stays, and whether the release thread or the driver keeps it.
            let now = ctx.graph_memory().expect("graph memory");
            let parked = ctx.poll().expect("poll");
            ctx.synchronize().expect("sync");
            ctx.trim_graph_memory().expect("trim");
            let after = ctx.graph_memory().expect("graph memory");
            println!(
                "step_memory: a dropped step's graph memory did not go back within 5 s: held {held:?}, 5 s after the drop {now:?} with {parked} batch(es) parked; after a synchronize and a trim {after:?}"
            );
        }
    }
    let deferred = ctx.take_deferred_errors();
    assert!(deferred.is_empty(), "{deferred:?}");
}
