//! A step whose closure allocates its intermediates as a framework does: cudarc's stream-ordered
//! allocations on the capturing stream (`alloc`, freed when each slice drops), kernels launched
//! through cudarc's builder. Captured once, the allocations become the graph's memory nodes;
//! every call is rebound to a fresh input and output and checked against the same closure run
//! eagerly (bit for bit) and against the host's reference.
//!
//! ```text
//! cargo run --release --features cudarc --example step_memory [-- --calls N --mib M]
//! ```
//! `--calls` (default 1000) calls, `--mib` (default 1024, at least) of intermediates a call in 24
//! allocations. Prints `step_memory: PASS ...` with the step's memory by part and exits 0 when
//! every call matches; without a GPU or driver it prints the reason on one line and exits 1.

use std::process::ExitCode;

use cudarc::driver::CudaContext;
use graph_rt::step::{Step, StepMode, StepOptions, StepParams};
use graph_rt::{DeviceBuffer, Stream};

mod forward;

use forward::{floats_for, forward, SPREAD_PTX, TEMPORARIES};

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("step_memory: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The value of `--name`, or `default`.
fn arg(name: &str, default: usize) -> Result<usize, String> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} takes a whole number")),
    }
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let calls = arg("--calls", 1000)?;
    let mib = arg("--mib", 1024)?.max(1);
    let n = floats_for(mib);
    let cctx = CudaContext::new(0)?;
    let cu = cctx.new_stream()?;
    let stream = Stream::from_cudarc(&cu)?;
    let ctx = stream.context().clone();
    let module = cctx.load_module(cudarc::nvrtc::Ptx::from_src(SPREAD_PTX))?;
    let spread = module.load_function("spread")?;

    // The step: x → t0 → … → t23 → y, every intermediate a cudarc allocation on the capturing
    // stream, alive to the end of the call (as a forward pass keeps its activations).
    let make = |options: StepOptions| -> graph_rt::Result<_> {
        let mut params = StepParams::new(&ctx, 4)?;
        let (x, y) = (params.buffer::<f32>(n)?, params.buffer::<f32>(n)?);
        params.bind(&x, &DeviceBuffer::zeroed(&ctx, n)?)?;
        params.bind(&y, &DeviceBuffer::zeroed(&ctx, n)?)?;
        let (bx, by) = (x.clone(), y.clone());
        let (cu, spread) = (cu.clone(), spread.clone());
        let step = Step::new(&stream, params, options, move |s| {
            let (xp, yp) = (s.buffer(&bx)?.as_raw(), s.buffer(&by)?.as_raw());
            forward(&cu, &spread, xp, yp, n, None).map_err(graph_rt::Error::from)
        })?;
        Ok((step, x, y))
    };
    let (mut graphed, gx, gy) = make(StepOptions::default())?;
    let (mut eager, ex, ey) = make(StepOptions {
        eager: true,
        ..StepOptions::default()
    })?;
    let (patched_words, build) = match graphed.mode() {
        StepMode::Graph {
            patched_words,
            build,
            ..
        } => (*patched_words, *build),
        mode => {
            println!("step_memory: FAIL the step runs eagerly: {mode:?}");
            return Ok(false);
        }
    };

    let mut bad = 0;
    let want_add = (TEMPORARIES + 1) as f32;
    for call in 0..calls {
        let input: Vec<f32> = (0..n).map(|i| ((i * 7 + call) % 1000) as f32).collect();
        let x = DeviceBuffer::from_host(&ctx, &input)?;
        let (y, z) = (
            DeviceBuffer::zeroed(&ctx, n)?,
            DeviceBuffer::zeroed(&ctx, n)?,
        );
        graphed.bind(&gx, &x)?;
        graphed.bind(&gy, &y)?;
        graphed.run()?;
        eager.bind(&ex, &x)?;
        eager.bind(&ey, &z)?;
        eager.run()?;
        let (got, want) = (y.to_vec()?, z.to_vec()?);
        let right = got == want && got.iter().zip(&input).all(|(g, i)| *g == i + want_add);
        if !right {
            bad += 1;
            if bad <= 3 {
                eprintln!("step_memory: call {call}: the graph's output differs");
            }
        }
    }
    let m = build.memory;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let verdict = if bad == 0 { "PASS" } else { "FAIL" };
    println!(
        "step_memory: {verdict} {calls} calls rebound to fresh buffers, {bad} wrong; {TEMPORARIES} cudarc allocations of {:.0} MiB a call, {patched_words} patched words; graph memory {:.0} MiB allocated, {:.0} MiB reserved (estimated {}), exec {:.1} MiB, prelude {} B, table {} B",
        mib(m.graph_allocations),
        mib(m.graph_allocations),
        mib(m.graph_reserved),
        m.estimate.map_or("-".into(), |e| format!("{:.0} MiB", mib(e))),
        mib(m.exec),
        m.prelude,
        m.table,
    );
    Ok(bad == 0)
}
