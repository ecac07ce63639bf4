//! A decode-like layer stack replayed as one graph whose input, output and weights change every
//! replay: 8 layers of `GEMM → bias + GELU → GEMM → residual` (M = 16 tokens, hidden size 4096,
//! f32; cuBLAS `sgemm` for the GEMMs, graph-rt's shipped `bias_gelu` / `residual_add` for the
//! rest). Every replay binds a fresh input, a fresh output and one of two weight sets.
//!
//! Mechanisms, measured in interleaved rounds (wall µs per synchronized replay, medians):
//! - **plain**: the stack captured with plain kernels, replayed with no rebinding (the floor);
//! - **chosen**: the faster, in this run, of two per-node mixes that bind everything through one
//!   argument table: (a) the shipped kernels in table form (PDL on compute capability 9.0+)
//!   read their pointers from the table while the cuBLAS nodes' pointers, found by discovery
//!   (two captures), are rewritten on the device by the in-graph prelude; (b) the prelude
//!   rewrites every kernel's dynamic words (plain shipped kernels, no slot loads). After a
//!   cuBLAS kernel, which does not trigger its dependents early, a table-form kernel's slot
//!   loads cannot hide behind PDL, and (b) wins on the H200;
//! - **host updates**: the plain graph's discovered words rewritten node by node from the host;
//! - **re-capture**: the plain stack captured again with the new pointers, then an exec update.
//!
//! Every mechanism's output is checked against the plain graph's on the same input and weights.
//!
//! The shape is `GRAPH_RT_LAYERS_SHAPE` (layers,d,m; the example's `Shape`) when set: the cost
//! model's prediction of the best mix is printed beside the measured best for any shape.
//!
//! This is the layers bench's mechanism comparison (`cargo bench --bench layers`); the `layers`
//! example builds the same stack on the step API.

use std::time::Instant;

use graph_rt::calibrate::{cost_model, CalibrateOptions};
use graph_rt::choose::{best_mix, predict_mixes, Mix, NodeKind};
use graph_rt::cublas::{Cublas, Op as CublasOp};
use graph_rt::foreign::{discover_graphs, Dynamic, HostPatcher, Prelude, PreludeOptions};
use graph_rt::table::{PtrSlot, TableKernel};
use graph_rt::timing::median;
use graph_rt::{
    ArgTable, CaptureMode, CaptureScope, Context, DeviceBuffer, Event, EventFlags, Function, Graph,
    LaunchConfig, Module, Stream, TableOptions,
};

use super::layers::{random, shape, weights, Shape, Weights};

/// Intermediate activations (M×D each, column-major): per layer h, a, o, and y (the next
/// layer's input; the last layer writes the stack's output instead).
struct Acts {
    h: Vec<DeviceBuffer<f32>>,
    a: Vec<DeviceBuffer<f32>>,
    o: Vec<DeviceBuffer<f32>>,
    y: Vec<DeviceBuffer<f32>>,
}

fn acts(ctx: &Context) -> graph_rt::Result<Acts> {
    let Shape { layers, d, m } = shape()?;
    let v = || -> graph_rt::Result<Vec<DeviceBuffer<f32>>> {
        (0..layers)
            .map(|_| DeviceBuffer::zeroed(ctx, m * d))
            .collect()
    };
    Ok(Acts {
        h: v()?,
        a: v()?,
        o: v()?,
        y: v()?,
    })
}

/// The kernels of the stack's elementwise steps, plain and in table form.
struct Kernels {
    bias_gelu: Function,
    residual: Function,
    bias_gelu_t: TableKernel,
    residual_t: TableKernel,
    plain: LaunchConfig,
    table: LaunchConfig,
}

/// Captures the plain stack: input `x`, output `out`, weights `w` (after `refresh`'s refresh).
#[allow(clippy::too_many_arguments)]
fn capture_plain(
    stream: &Stream,
    blas: &Cublas,
    k: &Kernels,
    acts: &mut Acts,
    x: &DeviceBuffer<f32>,
    out: &DeviceBuffer<f32>,
    w: &Weights,
    refresh: Option<&mut ArgTable>,
) -> graph_rt::Result<Graph> {
    let Shape { layers, d, m } = shape()?;
    stream.capture(CaptureMode::Global, |s| {
        if let Some(t) = refresh {
            t.record_refresh(s)?;
        }
        for l in 0..layers {
            let (h, a, o) = (&mut acts.h[l], &mut acts.a[l], &mut acts.o[l]);
            let input = if l == 0 { x } else { &acts.y[l - 1] };
            gemm(blas, s, input, &w.w1[l], h)?;
            // SAFETY: bias_gelu over M×D floats of h (read), D of b1, M×D of a (written).
            unsafe {
                s.launch(
                    &k.bias_gelu,
                    &k.plain,
                    (&*h, &w.b1[l], &*a, m as i32, d as i32),
                )?
            };
            gemm(blas, s, a, &w.w2[l], o)?;
            let y = if l == layers - 1 { out } else { &acts.y[l] };
            // SAFETY: residual_add over M×D floats of three distinct buffers.
            unsafe { s.launch(&k.residual, &k.plain, (input, &*o, y, (m * d) as i32))? };
        }
        Ok(())
    })
}

/// Records `c = a · w` (M×D times D×D, column-major) on the capture `s`.
fn gemm(
    blas: &Cublas,
    s: &CaptureScope<'_>,
    a: &DeviceBuffer<f32>,
    w: &DeviceBuffer<f32>,
    c: &mut DeviceBuffer<f32>,
) -> graph_rt::Result<()> {
    let Shape { d, m, .. } = shape()?;
    blas.record(s, |b| {
        b.sgemm(
            CublasOp::N,
            CublasOp::N,
            m,
            d,
            d,
            1.0,
            a,
            m,
            w,
            d,
            0.0,
            c,
            m,
        )
    })
}

/// The table slots of the chosen mechanism.
struct Slots {
    x: PtrSlot<f32>,
    out: PtrSlot<f32>,
    w1: Vec<PtrSlot<f32>>,
    b1: Vec<PtrSlot<f32>>,
    w2: Vec<PtrSlot<f32>>,
    // h, a, o, y of every layer (bound once).
    acts: Vec<[PtrSlot<f32>; 4]>,
}

/// Captures the stack for the chosen mechanism: the table's refresh, cuBLAS reading `x` and
/// `w` (rewritten by the prelude later), the shipped kernels in table form reading slots.
#[allow(clippy::too_many_arguments)]
fn capture_chosen(
    stream: &Stream,
    blas: &Cublas,
    k: &Kernels,
    table: &mut ArgTable,
    sl: &Slots,
    acts: &mut Acts,
    x: &DeviceBuffer<f32>,
    w: &Weights,
) -> graph_rt::Result<Graph> {
    let Shape { layers, d, m } = shape()?;
    stream.capture(CaptureMode::Global, |s| {
        table.record_refresh(s)?;
        for l in 0..layers {
            let (h, a, o) = (&mut acts.h[l], &mut acts.a[l], &mut acts.o[l]);
            let input = if l == 0 { x } else { &acts.y[l - 1] };
            gemm(blas, s, input, &w.w1[l], h)?;
            let [hs, as_, os, ys] = &sl.acts[l];
            // SAFETY: as in `capture_plain`, through slots bound to buffers of those sizes.
            unsafe {
                k.bias_gelu_t
                    .record(s, &k.table, (hs, &sl.b1[l], as_, m as i32, d as i32))?
            };
            gemm(blas, s, a, &w.w2[l], o)?;
            let xs = if l == 0 { &sl.x } else { &sl.acts[l - 1][3] };
            let ys = if l == layers - 1 { &sl.out } else { ys };
            // SAFETY: as above.
            unsafe {
                k.residual_t
                    .record(s, &k.table, (xs, os, ys, (m * d) as i32))?
            };
        }
        Ok(())
    })
}

fn dynamic(b: &DeviceBuffer<f32>) -> Dynamic {
    Dynamic {
        base: b.as_raw(),
        len: b.num_bytes() as u64,
    }
}

/// Largest |a − b| / (|b| + 1).
fn diff(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).abs() / (y.abs() as f64 + 1.0))
        .fold(0.0, f64::max)
}

/// Builds everything, checks every mechanism against the plain graph, then times them over
/// `rounds` interleaved rounds. Returns whether every check passed.
pub fn run(rounds: usize) -> graph_rt::Result<bool> {
    let Shape { layers, d, m } = shape()?;
    let ctx = Context::new(0)?;
    let stream = Stream::new(&ctx)?;
    let pdl = ctx.device().compute_capability()?.0 >= 9;
    let blas = Cublas::new(&stream)?;
    let layer = graph_rt::kernels::LAYER.ptx;
    let module = Module::from_ptx(&ctx, layer)?;
    let options = graph_rt::ptx::Options {
        pdl,
        ..Default::default()
    };
    let plain = LaunchConfig::for_elements(m * d, 256);
    let k = Kernels {
        bias_gelu: module.function("bias_gelu")?,
        residual: module.function("residual_add")?,
        bias_gelu_t: TableKernel::load(&ctx, layer, "bias_gelu", &options)?,
        residual_t: TableKernel::load(&ctx, layer, "residual_add", &options)?,
        plain,
        table: if pdl {
            plain.programmatic_stream_serialization()
        } else {
            plain
        },
    };
    let sets = [weights(&ctx)?, weights(&ctx)?];
    let mut acts = acts(&ctx)?;
    let io = || DeviceBuffer::<f32>::zeroed(&ctx, m * d);
    let fresh_input = || random(&ctx, m * d, 1.0);

    // Plain graph on fixed buffers (weights of set 0), and a second capture for discovery.
    let (x_p, out_p) = (fresh_input()?, io()?);
    let (x_q, out_q) = (fresh_input()?, io()?);
    // cuBLAS picks and loads its kernels outside any capture.
    let warm = capture_plain(&stream, &blas, &k, &mut acts, &x_p, &out_p, &sets[0], None);
    drop(warm);
    let plain_graph = capture_plain(&stream, &blas, &k, &mut acts, &x_p, &out_p, &sets[0], None)?;
    let plain_exec = plain_graph.instantiate()?;
    let plain_second = capture_plain(&stream, &blas, &k, &mut acts, &x_q, &out_q, &sets[1], None)?;

    // Host updates: every dynamic word of the plain graph, found by discovery.
    let plain_dyn = |x: &DeviceBuffer<f32>, out: &DeviceBuffer<f32>, w: &Weights| {
        let mut v = vec![dynamic(x), dynamic(out)];
        v.extend(w.w1.iter().chain(&w.b1).chain(&w.w2).map(dynamic));
        v
    };
    let (snaps, disc) = discover_graphs(
        &plain_graph,
        &plain_second,
        &plain_dyn(&x_p, &out_p, &sets[0]),
        &plain_dyn(&x_q, &out_q, &sets[1]),
    )?;
    drop(plain_second);
    // The stack's kernels by kind, in launch order, for the cost model's prediction of mixes.
    let shipped = [k.bias_gelu.as_raw() as usize, k.residual.as_raw() as usize];
    let kinds: Vec<NodeKind> = snaps
        .iter()
        .map(|s| match shipped.contains(&s.params.function) {
            true => NodeKind::Rewritable,
            false => NodeKind::Foreign,
        })
        .collect();
    let mut patcher = HostPatcher::new(&snaps, &disc, 2 + 3 * layers)?;
    let mut host_exec = plain_graph.instantiate()?;
    let mut recapture_exec = plain_graph.instantiate()?;

    // The chosen mechanism: the table (shipped kernels in table form) + the prelude (cuBLAS).
    let mut table = ArgTable::new(
        &ctx,
        TableOptions {
            capacity: 2 + 3 * layers + 4 * layers,
            depth: 4,
        },
    )?;
    let mat = |t: &mut ArgTable, n: usize| t.ptr_slot_with::<f32>(16, n);
    let sl = Slots {
        x: mat(&mut table, m * d)?,
        out: mat(&mut table, m * d)?,
        w1: (0..layers)
            .map(|_| mat(&mut table, d * d))
            .collect::<Result<_, _>>()?,
        b1: (0..layers)
            .map(|_| mat(&mut table, d))
            .collect::<Result<_, _>>()?,
        w2: (0..layers)
            .map(|_| mat(&mut table, d * d))
            .collect::<Result<_, _>>()?,
        acts: (0..layers)
            .map(|_| -> graph_rt::Result<[PtrSlot<f32>; 4]> {
                Ok([
                    mat(&mut table, m * d)?,
                    mat(&mut table, m * d)?,
                    mat(&mut table, m * d)?,
                    mat(&mut table, m * d)?,
                ])
            })
            .collect::<Result<_, _>>()?,
    };
    for (l, s) in sl.acts.iter().enumerate() {
        table.bind(&s[0], &acts.h[l])?;
        table.bind(&s[1], &acts.a[l])?;
        table.bind(&s[2], &acts.o[l])?;
        table.bind(&s[3], &acts.y[l])?;
    }
    let mut chosen = capture_chosen(
        &stream, &blas, &k, &mut table, &sl, &mut acts, &x_p, &sets[0],
    )?;
    let second = capture_chosen(
        &stream, &blas, &k, &mut table, &sl, &mut acts, &x_q, &sets[1],
    )?;
    let chosen_dyn = |x: &DeviceBuffer<f32>, w: &Weights| {
        let mut v = vec![dynamic(x)];
        v.extend(w.w1.iter().chain(&w.w2).map(dynamic));
        v
    };
    let (csnaps, cd) = discover_graphs(
        &chosen,
        &second,
        &chosen_dyn(&x_p, &sets[0]),
        &chosen_dyn(&x_q, &sets[1]),
    )?;
    drop(second);
    let mut refs = vec![sl.x.erased()];
    refs.extend(sl.w1.iter().chain(&sl.w2).map(PtrSlot::erased));
    let mut prelude = Prelude::install(
        &mut chosen,
        &table,
        &csnaps,
        &cd,
        &chosen_dyn(&x_p, &sets[0]),
        &refs,
        PreludeOptions::default(),
    )?;
    let mut chosen_exec = chosen.instantiate()?;

    // The other mix: plain shipped kernels too, every dynamic word rewritten by the prelude
    // (no slot loads in any kernel; more device-updatable nodes).
    let mut all = capture_plain(
        &stream,
        &blas,
        &k,
        &mut acts,
        &x_p,
        &out_p,
        &sets[0],
        Some(&mut table),
    )?;
    let all2 = capture_plain(
        &stream,
        &blas,
        &k,
        &mut acts,
        &x_q,
        &out_q,
        &sets[1],
        Some(&mut table),
    )?;
    let (asnaps, ad) = discover_graphs(
        &all,
        &all2,
        &plain_dyn(&x_p, &out_p, &sets[0]),
        &plain_dyn(&x_q, &out_q, &sets[1]),
    )?;
    drop(all2);
    let mut arefs = vec![sl.x.erased(), sl.out.erased()];
    arefs.extend(
        sl.w1
            .iter()
            .chain(&sl.b1)
            .chain(&sl.w2)
            .map(PtrSlot::erased),
    );
    let mut prelude_all = Prelude::install(
        &mut all,
        &table,
        &asnaps,
        &ad,
        &plain_dyn(&x_p, &out_p, &sets[0]),
        &arefs,
        PreludeOptions::default(),
    )?;
    let mut all_exec = all.instantiate()?;

    // One replay of each mechanism on the same input and weight set `s`.
    let bind_chosen = |table: &mut ArgTable,
                       x: &DeviceBuffer<f32>,
                       out: &DeviceBuffer<f32>,
                       w: &Weights|
     -> graph_rt::Result<()> {
        table.bind(&sl.x, x)?;
        table.bind(&sl.out, out)?;
        for l in 0..layers {
            table.bind(&sl.w1[l], &w.w1[l])?;
            table.bind(&sl.b1[l], &w.b1[l])?;
            table.bind(&sl.w2[l], &w.w2[l])?;
        }
        Ok(())
    };
    let bases = |x: &DeviceBuffer<f32>, out: &DeviceBuffer<f32>, w: &Weights| -> Vec<u64> {
        plain_dyn(x, out, w).iter().map(|d| d.base).collect()
    };

    // Correctness: each mechanism against the plain graph on set 0 and the plain graph's input.
    let mut pass = true;
    plain_exec.launch(&stream)?;
    stream.synchronize()?;
    let want = out_p.to_vec()?;
    let check = |name: &str, got: &DeviceBuffer<f32>, pass: &mut bool| -> graph_rt::Result<()> {
        let e = diff(&got.to_vec()?, &want);
        let ok = e < 1e-4;
        *pass &= ok;
        println!(
            "layers: {name}: output vs the plain graph's, worst relative difference {e:.1e} {}",
            if ok { "ok" } else { "WRONG" }
        );
        Ok(())
    };
    let out_c = io()?;
    bind_chosen(&mut table, &x_p, &out_c, &sets[0])?;
    prelude.launch(&mut table, &mut chosen_exec, &stream)?;
    stream.synchronize()?;
    check("chosen", &out_c, &mut pass)?;
    let out_a = io()?;
    bind_chosen(&mut table, &x_p, &out_a, &sets[0])?;
    prelude_all.launch(&mut table, &mut all_exec, &stream)?;
    stream.synchronize()?;
    check("prelude everywhere", &out_a, &mut pass)?;
    let out_h = io()?;
    // SAFETY: buffers of the captured sizes, alive until after the synchronize.
    unsafe { patcher.rebind(&mut host_exec, &bases(&x_p, &out_h, &sets[0]))? };
    host_exec.launch(&stream)?;
    stream.synchronize()?;
    check("host updates", &out_h, &mut pass)?;
    let out_r = io()?;
    let g = capture_plain(&stream, &blas, &k, &mut acts, &x_p, &out_r, &sets[0], None)?;
    recapture_exec.update(&g)?;
    recapture_exec.launch(&stream)?;
    stream.synchronize()?;
    check("re-capture", &out_r, &mut pass)?;
    drop(g);

    // Timing: wall µs per synchronized replay, every replay on a fresh input and output and
    // the other weight set; interleaved rounds, medians.
    let inputs: Vec<DeviceBuffer<f32>> = (0..4).map(|_| fresh_input()).collect::<Result<_, _>>()?;
    let outputs: Vec<DeviceBuffer<f32>> = (0..4).map(|_| io()).collect::<Result<_, _>>()?;
    // Variants: 0 plain, 1 table+PDL and prelude, 2 host updates, 3 re-capture, 4 prelude
    // everywhere.
    const VARIANTS: usize = 5;
    let mut times: [Vec<f64>; VARIANTS] = Default::default();
    let mut gpu: [Vec<f64>; VARIANTS] = Default::default();
    let (start, end) = (
        Event::new(&ctx, EventFlags::Timing)?,
        Event::new(&ctx, EventFlags::Timing)?,
    );
    for r in 0..rounds + 3 {
        for m in 0..VARIANTS {
            let i = (r + m) % VARIANTS;
            let (x, out) = (&inputs[r % 4], &outputs[(r + i) % 4]);
            let w = &sets[r % 2];
            stream.synchronize()?;
            let t0 = Instant::now();
            match i {
                0 => {
                    start.record(&stream)?;
                    plain_exec.launch(&stream)?;
                    end.record(&stream)?;
                }
                1 => {
                    bind_chosen(&mut table, x, out, w)?;
                    start.record(&stream)?;
                    prelude.launch(&mut table, &mut chosen_exec, &stream)?;
                    end.record(&stream)?;
                }
                4 => {
                    bind_chosen(&mut table, x, out, w)?;
                    start.record(&stream)?;
                    prelude_all.launch(&mut table, &mut all_exec, &stream)?;
                    end.record(&stream)?;
                }
                2 => {
                    // SAFETY: buffers of the captured sizes, alive for the whole run.
                    unsafe { patcher.rebind(&mut host_exec, &bases(x, out, w))? };
                    host_exec.launch(&stream)?;
                }
                _ => {
                    let g = capture_plain(&stream, &blas, &k, &mut acts, x, out, w, None)?;
                    recapture_exec.update(&g)?;
                    recapture_exec.launch(&stream)?;
                }
            }
            stream.synchronize()?;
            if r >= 3 {
                times[i].push(t0.elapsed().as_secs_f64() * 1e6);
                if matches!(i, 0 | 1 | 4) {
                    gpu[i].push(Event::elapsed_ms(&start, &end)? as f64 * 1e3);
                }
            }
        }
    }
    let [p, c, h, rc, e] = times.map(median);
    let [gp, gc, _, _, ge] = gpu.map(|v| if v.is_empty() { f64::NAN } else { median(v) });
    println!(
        "layers: {} {layers} layers (m={m}, d={d}, f32 cuBLAS sgemm + shipped bias_gelu/residual_add), {} kernel nodes; input, output and weight set rebound every replay; wall µs per synchronized replay, median of {rounds} interleaved rounds on {}",
        if pass { "PASS" } else { "FAIL" },
        csnaps.len(),
        ctx.device().name()?
    );
    let t = if pdl { "table+PDL" } else { "table" };
    // The mix chosen: the faster of the two measured in this run.
    let (chosen_name, best) = if e <= c {
        ("prelude for every kernel", e)
    } else {
        ("shipped kernels in table form, prelude for cuBLAS", c)
    };
    let faster = best < h && best < rc;
    pass &= faster;
    println!(
        "layers: plain graph, no rebinding {p:.1} · chosen ({chosen_name}) {best:.1} ({:.3}×) · host per-node updates {h:.1} ({:.3}×) · re-capture + exec update {rc:.1} ({:.3}×){}",
        best / p,
        h / p,
        rc / p,
        if faster { "" } else { " — NOT faster than both" }
    );
    println!(
        "layers: mixes measured: {t} for the shipped kernels + prelude for cuBLAS {c:.1} ({:.3}×; {}) · prelude for every kernel {e:.1} ({:.3}×; {})",
        c / p,
        prelude.report(),
        e / p,
        prelude_all.report()
    );
    println!(
        "layers: GPU µs per replay between events: plain {gp:.1} · {t} + prelude {gc:.1} ({:.3}×) · prelude everywhere {ge:.1} ({:.3}×)",
        gc / gp,
        ge / gp
    );
    // The cost model's prediction of the mixes (the choose bench, run before, cached it).
    match cost_model(&stream, &CalibrateOptions::default()) {
        Ok((model, source)) => {
            let predicted =
                predict_mixes(&kinds, &model, pdl, Prelude::device_support(&ctx).is_ok());
            let best = best_mix(&predicted);
            let measured = [
                (Mix::TableAndPrelude, c),
                (Mix::PreludeEverywhere, e),
                (Mix::HostUpdates, h),
            ];
            let fastest = measured
                .iter()
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|m| m.0);
            let within = best
                .and_then(|b| measured.iter().find(|m| m.0 == b))
                .zip(fastest.and_then(|f| measured.iter().find(|m| m.0 == f)))
                .map(|(b, f)| b.1 / f.1);
            let cells: Vec<String> = predicted
                .iter()
                .map(|p| match p.us {
                    Ok(us) => format!("{} {us:.1}", p.mix),
                    Err(why) => format!("{} n/a ({why})", p.mix),
                })
                .collect();
            println!(
                "layers: the cost model ({source:?}) predicts, over {} kernel nodes ({} rewritable): {} · best {}; measured best {}; the predicted mix measures {:.3}× the measured best",
                kinds.len(),
                kinds.iter().filter(|k| **k == NodeKind::Rewritable).count(),
                cells.join(" · "),
                best.map_or("none".into(), |m| m.to_string()),
                fastest.map_or("none".into(), |m| m.to_string()),
                within.unwrap_or(f64::NAN),
            );
        }
        Err(e) => println!("layers: no cost model to predict the mixes: {e}"),
    }
    Ok(pass)
}
