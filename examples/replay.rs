//! Captures a multi-kernel step once and replays it many times with fresh inputs, rebinding the
//! step's input between two buffers without re-capturing; checks every result against a CPU
//! reference, and prints eager vs replay time for the step.
//!
//! The step, on a `rows × cols` matrix: `t = x + 1` (add1), `y = rmsnorm(t) * w`, `z = 0`,
//! `z += 2 y` (axpy).
//!
//! ```text
//! cargo run --release --example replay
//! ```
//! Prints `replay: PASS ...` and exits 0 when every replay matched; without a GPU or driver it
//! prints the reason on one line and exits 1.

use std::process::ExitCode;
use std::time::Instant;

use graph_rt::timing::median;
use graph_rt::{
    CaptureMode, Context, DeviceBuffer, Function, LaunchConfig, Launcher, Module, NodeKind, Stream,
};
use rand::Rng;

const ROWS: usize = 64;
const COLS: usize = 1024;
const ITERS: usize = 200;
const EPS: f32 = 1e-5;

struct Kernels {
    add1: Function,
    rmsnorm: Function,
    axpy: Function,
}

struct Buffers {
    inputs: [DeviceBuffer<f32>; 2],
    t: DeviceBuffer<f32>,
    w: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("replay: {e}");
            ExitCode::FAILURE
        }
    }
}

fn random(n: usize) -> Vec<f32> {
    let mut rng = rand::rng();
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// Launches the step's kernels on a stream, or records them in a capture: the same code.
///
/// # Safety
/// The buffers hold ROWS × COLS elements (`w`: COLS).
unsafe fn step(
    on: &impl Launcher,
    k: &Kernels,
    b: &Buffers,
    input: &DeviceBuffer<f32>,
    z: &DeviceBuffer<f32>,
) -> graph_rt::Result<()> {
    let n = (ROWS * COLS) as i32;
    let flat = LaunchConfig::for_elements(ROWS * COLS, 256);
    // SAFETY: see the function's contract; the kernels' signatures are in graph_rt::kernels.
    unsafe {
        on.launch(&k.add1, &flat, (input, &b.t, n))?;
        on.launch(
            &k.rmsnorm,
            &LaunchConfig::new(ROWS as u32, 256u32),
            (&b.t, &b.w, &b.y, COLS as i32, EPS),
        )?;
        on.launch(&k.axpy, &flat, (2.0f32, &b.y, z, n))
    }
}

fn reference(x: &[f32], w: &[f32]) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(COLS) {
        let t: Vec<f64> = row.iter().map(|&v| v as f64 + 1.0).collect();
        let inv = 1.0 / (t.iter().map(|v| v * v).sum::<f64>() / COLS as f64 + EPS as f64).sqrt();
        out.extend(t.iter().zip(w).map(|(t, &w)| 2.0 * t * inv * w as f64));
    }
    out
}

fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    if got.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| (*g as f64 - w).powi(2))
        .sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

fn run() -> graph_rt::Result<bool> {
    let ctx = Context::new(0)?;
    let stream = Stream::new(&ctx)?;
    let load = |src: &str, name: &str| Module::from_ptx(&ctx, src)?.function(name);
    let k = Kernels {
        add1: load(graph_rt::kernels::CHAIN.ptx, "add1")?,
        rmsnorm: load(graph_rt::kernels::RMSNORM.ptx, "rmsnorm_f32")?,
        axpy: load(graph_rt::kernels::AXPY.ptx, "axpy_f32")?,
    };
    let w_host = random(COLS);
    let alloc = || DeviceBuffer::<f32>::alloc(&ctx, ROWS * COLS);
    let mut b = Buffers {
        inputs: [alloc()?, alloc()?],
        t: alloc()?,
        w: DeviceBuffer::from_host(&ctx, &w_host)?,
        y: alloc()?,
    };
    let mut z = alloc()?;

    // Capture the step once, reading inputs[0]; the graph keeps every buffer it uses alive.
    let graph = stream.capture(CaptureMode::Global, |s| {
        s.fill_zero(&mut z)?;
        // SAFETY: every buffer holds ROWS × COLS elements.
        unsafe { step(s, &k, &b, &b.inputs[0], &z) }
    })?;
    // The add1 node, the one that reads the input: the first kernel node.
    let mut kernels = graph
        .nodes()?
        .into_iter()
        .filter(|n| graph.node_kind(*n).ok() == Some(NodeKind::Kernel));
    let first = kernels
        .next()
        .ok_or_else(|| graph_rt::Error::InvalidArgument {
            call: "Stream::capture",
            reason: "the capture recorded no kernel node".into(),
        })?;
    let mut exec = graph.instantiate()?;
    drop(graph);

    let (mut eager, mut replay, mut worst) = (Vec::new(), Vec::new(), 0.0f64);
    for i in 0..ITERS {
        let slot = i % 2;
        let x = random(ROWS * COLS);
        b.inputs[slot].copy_from_host(&x)?;
        let want = reference(&x, &w_host);

        // Eager: the same kernels launched one by one.
        z.fill_u32(f32::NAN.to_bits())?;
        let t0 = Instant::now();
        // SAFETY: z was allocated by `alloc`, so dropping it waits for the fill.
        unsafe { z.fill_zero_async(&stream)? };
        // SAFETY: as in `step`.
        unsafe { step(&stream, &k, &b, &b.inputs[slot], &z)? };
        stream.synchronize()?;
        eager.push(t0.elapsed().as_secs_f64() * 1e6);
        worst = worst.max(relative_error(&z.to_vec()?, &want));

        // Replay, with the first node rebound to this iteration's input.
        z.fill_u32(f32::NAN.to_bits())?;
        let t0 = Instant::now();
        // SAFETY: add1(const float* x, float* y, int n) over ROWS × COLS elements.
        unsafe { exec.set_kernel_args(first, (&b.inputs[slot], &b.t, (ROWS * COLS) as i32))? };
        exec.launch(&stream)?;
        stream.synchronize()?;
        replay.push(t0.elapsed().as_secs_f64() * 1e6);
        worst = worst.max(relative_error(&z.to_vec()?, &want));
    }
    let (e, r) = (median(eager), median(replay));
    let pass = worst < 1e-5;
    println!(
        "replay: {} {ITERS} steps on fresh inputs, worst relative error {worst:.2e}; median step: eager {e:.1} µs, replay {r:.1} µs ({:.2}× faster) on {}",
        if pass { "PASS" } else { "FAIL" },
        e / r,
        ctx.device().name()?
    );
    Ok(pass)
}
