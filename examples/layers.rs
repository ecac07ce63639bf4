//! A decode-like layer stack as one step: 8 layers of `GEMM → bias + GELU → GEMM → residual`
//! (M = 16 tokens, hidden size 4096, f32; cuBLAS `sgemm` for the GEMMs, graph-rt's shipped
//! `bias_gelu` / `residual_add` for the rest), captured once through the step API and replayed
//! with a fresh input, a fresh output and one of two weight sets bound every call. The step
//! finds where the captured kernels take those buffers and rewrites them on the device at
//! every replay (the in-graph prelude); the example checks the output against the same stack
//! captured on fixed buffers and measures both (wall µs per synchronized call, interleaved,
//! medians). The mechanisms compared one by one are the `layers` bench.
//!
//! ```text
//! cargo run --release --example layers     # needs a GPU and cuBLAS (GRAPH_RT_CUBLAS)
//! GRAPH_RT_LAYERS_SHAPE=5,2560,8 cargo run --release --example layers   # another shape: layers,d,m
//! ```

use std::process::ExitCode;
use std::time::Instant;

use graph_rt::calibrate::{cost_model, CalibrateOptions};
use graph_rt::cublas::{Cublas, Op};
use graph_rt::step::{Buf, Step, StepMode, StepOptions, StepParams, StepScope};
use graph_rt::timing::median;
use graph_rt::{Context, DeviceBuffer, Function, LaunchConfig, Module, Stream};
use rand::Rng;

/// The stack's shape: `layers` layers over `m` tokens of width `d`. The default is the one
/// the benches report (8 × 4096 × 16); `GRAPH_RT_LAYERS_SHAPE=layers,d,m` (e.g. `5,2560,8`)
/// runs another, such as one the cost model was never shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub layers: usize,
    pub d: usize,
    pub m: usize,
}

impl Shape {
    pub const DEFAULT: Shape = Shape {
        layers: 8,
        d: 4096,
        m: 16,
    };

    /// The shape `GRAPH_RT_LAYERS_SHAPE` names, else the default; a clear error for a bad one.
    pub fn from_env() -> Result<Shape, String> {
        match std::env::var("GRAPH_RT_LAYERS_SHAPE") {
            Err(_) => Ok(Self::DEFAULT),
            Ok(v) => Self::parse(&v),
        }
    }

    fn parse(v: &str) -> Result<Shape, String> {
        let bad = || {
            format!("GRAPH_RT_LAYERS_SHAPE={v:?}: expected layers,d,m (e.g. 5,2560,8): 1–64 layers, d 64–8192 and a multiple of 32, m 1–256")
        };
        let n: Vec<usize> = v
            .split(',')
            .map(|x| x.trim().parse::<usize>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let [layers, d, m] = n[..] else {
            return Err(bad());
        };
        let ok = (1..=64).contains(&layers)
            && (64..=8192).contains(&d)
            && d % 32 == 0
            && (1..=256).contains(&m);
        ok.then_some(Shape { layers, d, m }).ok_or_else(bad)
    }
}

static SHAPE: std::sync::OnceLock<Shape> = std::sync::OnceLock::new();

/// The shape of this run: [`Shape::from_env`], read once (bad: an error naming the variable).
pub fn shape() -> graph_rt::Result<Shape> {
    if let Some(s) = SHAPE.get() {
        return Ok(*s);
    }
    let s = Shape::from_env().map_err(|reason| graph_rt::Error::InvalidArgument {
        call: "layers",
        reason,
    })?;
    Ok(*SHAPE.get_or_init(|| s))
}

#[allow(dead_code)]
fn main() -> ExitCode {
    match run(30) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("layers: {e}");
            ExitCode::FAILURE
        }
    }
}

pub fn random(ctx: &Context, n: usize, scale: f32) -> graph_rt::Result<DeviceBuffer<f32>> {
    let mut rng = rand::rng();
    let v: Vec<f32> = (0..n).map(|_| rng.random_range(-scale..scale)).collect();
    DeviceBuffer::from_host(ctx, &v)
}

/// One weight set: per layer W1 (D×D), b1 (D), W2 (D×D).
pub struct Weights {
    pub w1: Vec<DeviceBuffer<f32>>,
    pub b1: Vec<DeviceBuffer<f32>>,
    pub w2: Vec<DeviceBuffer<f32>>,
}

pub fn weights(ctx: &Context) -> graph_rt::Result<Weights> {
    let Shape { layers, d, .. } = shape()?;
    let s = 1.0 / (d as f32).sqrt();
    let many = |n: usize, scale: f32| {
        (0..layers)
            .map(|_| random(ctx, n, scale))
            .collect::<graph_rt::Result<Vec<_>>>()
    };
    Ok(Weights {
        w1: many(d * d, s)?,
        b1: many(d, 0.1)?,
        w2: many(d * d, s)?,
    })
}

/// The stack's kernels and its activations (h, a, o, y per layer; fixed buffers).
struct Stack {
    blas: Cublas,
    bias_gelu: Function,
    residual: Function,
    cfg: LaunchConfig,
    acts: Vec<[DeviceBuffer<f32>; 4]>,
}

impl Stack {
    /// Enqueues the stack on `x`, writing `out`, with weights `w`.
    fn enqueue(
        &mut self,
        s: &StepScope<'_>,
        x: &DeviceBuffer<f32>,
        out: &DeviceBuffer<f32>,
        w: &Weights,
    ) -> graph_rt::Result<()> {
        let Shape { layers, d, m } = shape()?;
        for l in 0..layers {
            let (done, rest) = self.acts.split_at_mut(l);
            let [h, a, o, y] = &mut rest[0];
            let input = if l == 0 { x } else { &done[l - 1][3] };
            let gemm = |b: &Cublas,
                        a: &DeviceBuffer<f32>,
                        w: &DeviceBuffer<f32>,
                        c: &mut DeviceBuffer<f32>| {
                b.sgemm(Op::N, Op::N, m, d, d, 1.0, a, m, w, d, 0.0, c, m)
            };
            s.cublas(&self.blas, |b| gemm(b, input, &w.w1[l], h))?;
            // SAFETY: bias_gelu over M×D floats of h (read), D of b1, M×D of a (written).
            unsafe {
                s.launch(
                    &self.bias_gelu,
                    &self.cfg,
                    (&*h, &w.b1[l], &*a, m as i32, d as i32),
                )?
            };
            s.cublas(&self.blas, |b| gemm(b, a, &w.w2[l], o))?;
            let y = if l == layers - 1 { out } else { &*y };
            // SAFETY: residual_add over M×D floats of three distinct buffers.
            unsafe { s.launch(&self.residual, &self.cfg, (input, &*o, y, (m * d) as i32))? };
        }
        Ok(())
    }
}

/// The step's parameters: input, output and every weight.
struct Params {
    x: Buf<f32>,
    out: Buf<f32>,
    w1: Vec<Buf<f32>>,
    b1: Vec<Buf<f32>>,
    w2: Vec<Buf<f32>>,
}

impl Params {
    /// Each weight parameter with its buffer of set `w`.
    fn weights<'a>(
        &'a self,
        w: &'a Weights,
    ) -> impl Iterator<Item = (&'a Buf<f32>, &'a DeviceBuffer<f32>)> {
        let params = self.w1.iter().chain(&self.b1).chain(&self.w2);
        params.zip(w.w1.iter().chain(&w.b1).chain(&w.w2))
    }
}

pub fn run(rounds: usize) -> graph_rt::Result<bool> {
    let Shape { layers, d, m } = shape()?;
    let ctx = Context::new(0)?;
    let stream = Stream::new(&ctx)?;
    let module = Module::from_ptx(&ctx, graph_rt::kernels::LAYER.ptx)?;
    let acts = || -> graph_rt::Result<Vec<[DeviceBuffer<f32>; 4]>> {
        let z = || DeviceBuffer::zeroed(&ctx, m * d);
        (0..layers).map(|_| Ok([z()?, z()?, z()?, z()?])).collect()
    };
    let stack = |acts| -> graph_rt::Result<Stack> {
        Ok(Stack {
            blas: Cublas::new(&stream)?,
            bias_gelu: module.function("bias_gelu")?,
            residual: module.function("residual_add")?,
            cfg: LaunchConfig::for_elements(m * d, 256),
            acts,
        })
    };
    let sets = [weights(&ctx)?, weights(&ctx)?];
    let io = || DeviceBuffer::<f32>::zeroed(&ctx, m * d);
    let (x0, plain_out) = (random(&ctx, m * d, 1.0)?, io()?);

    // The floor: the same stack captured on fixed buffers, replayed with no rebinding.
    let mut fixed = stack(acts()?)?;
    let mut plain = Step::new(
        &stream,
        StepParams::new(&ctx, 1)?,
        StepOptions::default(),
        |s| fixed.enqueue(s, &x0, &plain_out, &sets[0]),
    )?;

    // The step: input, output and weights declared, rebound every call.
    let mut p = StepParams::new(&ctx, 2 + 3 * layers)?;
    let many = |p: &mut StepParams, n| {
        (0..layers)
            .map(|_| p.buffer::<f32>(n))
            .collect::<graph_rt::Result<Vec<_>>>()
    };
    let params = Params {
        x: p.buffer(m * d)?,
        out: p.buffer(m * d)?,
        w1: many(&mut p, d * d)?,
        b1: many(&mut p, d)?,
        w2: many(&mut p, d * d)?,
    };
    let first_out = io()?;
    p.bind(&params.x, &x0)?;
    p.bind(&params.out, &first_out)?;
    for (b, d) in params.weights(&sets[0]) {
        p.bind(b, d)?;
    }
    let mut rebound = stack(acts()?)?;
    // The cost model of this device (calibrated once, then read from its cache file): the step
    // reports its prediction for the stack and applies host updates if they are predicted
    // fastest.
    let (model, source) = cost_model(&stream, &CalibrateOptions::default())?;
    let options = StepOptions {
        cost_model: Some(model),
        ..StepOptions::default()
    };
    let mut step = Step::new(&stream, p, options, |s| {
        let (x, out) = (s.buffer(&params.x)?, s.buffer(&params.out)?);
        let resolve = |v: &[Buf<f32>]| {
            v.iter()
                .map(|b| s.buffer(b))
                .collect::<graph_rt::Result<Vec<_>>>()
        };
        let w = Weights {
            w1: resolve(&params.w1)?,
            b1: resolve(&params.b1)?,
            w2: resolve(&params.w2)?,
        };
        rebound.enqueue(s, &x, &out, &w)
    })?;
    let StepMode::Graph {
        kernel_nodes,
        patched_words,
        prelude,
        mix,
        ..
    } = step.mode()
    else {
        eprintln!("layers: the step runs eagerly: {:?}", step.mode());
        return Ok(false);
    };
    let how = format!(
        "{kernel_nodes} kernel nodes, {patched_words} words rewritten per replay ({prelude:?})"
    );
    if let Some(mix) = mix {
        let predicted: Vec<String> = mix
            .predicted
            .iter()
            .map(|p| match p.us {
                Ok(us) => format!("{} {us:.1}", p.mix),
                Err(why) => format!("{}: {why}", p.mix),
            })
            .collect();
        println!(
            "layers: the step's mix: written as {}, applied {}; the cost model ({source:?}) predicts {}{}",
            mix.written,
            mix.applied,
            predicted.join(" · "),
            mix.advice.as_ref().map(|a| format!("; advice: {a}")).unwrap_or_default(),
        );
    }

    // Correctness: the step on the floor's input and weights, against the floor.
    plain.run()?;
    let check_out = io()?;
    step.bind(&params.out, &check_out)?;
    step.run()?;
    stream.synchronize()?;
    let (want, got) = (plain_out.to_vec()?, check_out.to_vec()?);
    let err = got
        .iter()
        .zip(&want)
        .map(|(a, b)| ((a - b).abs() / (b.abs() + 1.0)) as f64)
        .fold(0.0, f64::max);
    let pass = err < 1e-4;

    // Timing: each call of the step on a fresh input and output and the other weight set.
    let inputs: Vec<_> = (0..4)
        .map(|_| random(&ctx, m * d, 1.0))
        .collect::<graph_rt::Result<_>>()?;
    let outputs: Vec<_> = (0..4).map(|_| io()).collect::<graph_rt::Result<_>>()?;
    let (mut floor, mut steps) = (Vec::new(), Vec::new());
    for r in 0..rounds + 3 {
        for i in [r % 2, (r + 1) % 2] {
            stream.synchronize()?;
            let t = Instant::now();
            if i == 0 {
                plain.run()?;
            } else {
                step.bind(&params.x, &inputs[r % 4])?;
                step.bind(&params.out, &outputs[r % 4])?;
                for (b, d) in params.weights(&sets[r % 2]) {
                    step.bind(b, d)?;
                }
                step.run()?;
            }
            stream.synchronize()?;
            let us = t.elapsed().as_secs_f64() * 1e6;
            if r >= 3 {
                [&mut floor, &mut steps][i].push(us);
            }
        }
    }
    let (f, st) = (median(floor), median(steps));
    println!(
        "layers: {} {layers} layers (m={m}, d={d}, f32 cuBLAS sgemm + shipped bias_gelu/residual_add) as one step; {how}; input, output and weight set rebound every call; output vs the fixed-buffer graph: worst relative difference {err:.1e}",
        if pass { "PASS" } else { "FAIL" },
    );
    println!(
        "layers: wall µs per synchronized call, median of {rounds} interleaved rounds on {}: the graph on fixed buffers {f:.1} · the step, everything rebound {st:.1} ({:.3}×)",
        ctx.device().name()?,
        st / f
    );
    Ok(pass)
}
