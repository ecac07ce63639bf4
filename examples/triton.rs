//! A pipeline of three Triton kernels (Triton 3.6, from triton-fixtures/, as Triton's cache holds
//! them) captured once in their PDL table forms (made by the PTX pass at load time) and replayed
//! on fresh inputs every step through the argument table: `t = x + y` (`add_kernel`), `u = t + 1`
//! (`gdc_add1_kernel`), `out = relu(1.5 u − 0.25 y)` over the first 4000 elements
//! (`scaled_kernel`). Checks every step against a CPU reference and prints the median step of
//! eager launches of the original kernels vs table + PDL replay.
//!
//! ```text
//! cargo run --release --example triton
//! ```
//! Prints `triton: PASS ...` and exits 0 when every step matched; without a GPU it prints the
//! reason on one line and exits 1.

use std::process::ExitCode;
use std::time::Instant;

use graph_rt::table::PtrSlot;
use graph_rt::timing::median;
use graph_rt::triton::{TritonArg, TritonFiles, TritonForm, TritonKernel};
use graph_rt::{ArgTable, CaptureMode, Context, DeviceBuffer, Stream, TableOptions};
use rand::Rng;

macro_rules! triton_fixtures_dir {
    () => {
        concat!(env!("CARGO_MANIFEST_DIR"), "/triton-fixtures/")
    };
}
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/triton-fixtures/embed.rs"
));

const N: usize = 4096;
const M: usize = 4000;
const STEPS: usize = 200;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("triton: {e}");
            ExitCode::FAILURE
        }
    }
}

fn files(name: &str) -> TritonFiles {
    TRITON_FIXTURES
        .iter()
        .find(|f| f.name == name)
        .expect("fixture")
        .files()
}

fn reference(x: &[f32], y: &[f32]) -> Vec<f32> {
    x.iter()
        .zip(y)
        .take(M)
        .map(|(x, y)| (1.5 * ((x + y) + 1.0) - 0.25 * y).max(0.0))
        .collect()
}

fn right(out: &[f32], want: &[f32]) -> bool {
    out.iter()
        .zip(want)
        .all(|(o, w)| (o - w).abs() <= 1e-5 * w.abs().max(1.0))
        && out[M..].iter().all(|&v| v == -7.0)
}

fn run() -> graph_rt::Result<bool> {
    let ctx = Context::new(0)?;
    if ctx.device().compute_capability()?.0 < 9 {
        eprintln!("triton: the fixtures are built for sm_90a (an H100/H200); this GPU is older");
        return Ok(false);
    }
    let stream = Stream::new(&ctx)?;
    let pdl = TritonForm::Table(graph_rt::ptx::Options {
        pdl: true,
        ..Default::default()
    });
    let names = ["add", "gdc_add1", "scaled_masked"];
    let originals: Vec<TritonKernel> = names
        .iter()
        .map(|n| TritonKernel::load(&ctx, &files(n), TritonForm::Original))
        .collect::<Result<_, _>>()?;
    let tables: Vec<TritonKernel> = names
        .iter()
        .map(|n| TritonKernel::load(&ctx, &files(n), pdl.clone()))
        .collect::<Result<_, _>>()?;
    let (t, u) = (
        DeviceBuffer::<f32>::zeroed(&ctx, N)?,
        DeviceBuffer::<f32>::zeroed(&ctx, N)?,
    );

    // The table: x, y, t, u, out; t and u bound once.
    let mut table = ArgTable::new(&ctx, TableOptions::default())?;
    let s: Vec<PtrSlot<f32>> = (0..5).map(|_| table.ptr_slot()).collect::<Result<_, _>>()?;
    let (sx, sy, st, su, so) = (&s[0], &s[1], &s[2], &s[3], &s[4]);
    table.bind(st, &t)?;
    table.bind(su, &u)?;
    let p = TritonArg::ptr_slot;
    let exec = stream
        .capture(CaptureMode::Global, |scope| {
            table.record_refresh(scope)?;
            // SAFETY: every slot is bound to a buffer of N floats before each launch.
            unsafe {
                tables[0].record(
                    scope,
                    [4, 1, 1],
                    &[p(sx), p(sy), p(st), TritonArg::i32(N as i32)],
                )?;
                tables[1].record(scope, [4, 1, 1], &[p(st), p(su), TritonArg::i32(N as i32)])?;
                let scalars = [
                    TritonArg::f32(1.5),
                    TritonArg::f32(-0.25),
                    TritonArg::i32(M as i32),
                ];
                let mut args = vec![p(su), p(sy), p(so)];
                args.extend(scalars);
                tables[2].record(scope, [8, 1, 1], &args)?;
            }
            Ok(())
        })?
        .instantiate()?;

    let mut rng = rand::rng();
    let (mut eager, mut tabled, mut pass) = (Vec::new(), Vec::new(), true);
    for _ in 0..STEPS {
        let x: Vec<f32> = (0..N).map(|_| rng.random_range(-1.0..1.0)).collect();
        let y: Vec<f32> = (0..N).map(|_| rng.random_range(-1.0..1.0)).collect();
        let want = reference(&x, &y);
        let (dx, dy) = (
            DeviceBuffer::from_host(&ctx, &x)?,
            DeviceBuffer::from_host(&ctx, &y)?,
        );
        let fresh = || DeviceBuffer::from_host(&ctx, &vec![-7.0f32; N]);
        let (out_eager, out_table) = (fresh()?, fresh()?);

        // Eager: Triton's kernels as built, launched one by one.
        let b = TritonArg::buffer;
        let t0 = Instant::now();
        // SAFETY: buffers of N floats; the scalars as the kernels were compiled for.
        unsafe {
            originals[0].launch(
                &stream,
                [4, 1, 1],
                &[b(&dx), b(&dy), b(&t), TritonArg::i32(N as i32)],
            )?;
            originals[1].launch(
                &stream,
                [4, 1, 1],
                &[b(&t), b(&u), TritonArg::i32(N as i32)],
            )?;
            originals[2].launch(
                &stream,
                [8, 1, 1],
                &[
                    b(&u),
                    b(&dy),
                    b(&out_eager),
                    TritonArg::f32(1.5),
                    TritonArg::f32(-0.25),
                    TritonArg::i32(M as i32),
                ],
            )?;
        }
        stream.synchronize()?;
        eager.push(t0.elapsed().as_secs_f64() * 1e6);
        pass &= right(&out_eager.read_on(&stream)?, &want);

        // Table + PDL: bind this step's buffers, launch the captured pipeline.
        let t0 = Instant::now();
        table.bind(sx, &dx)?;
        table.bind(sy, &dy)?;
        table.bind(so, &out_table)?;
        table.launch(&exec, &stream)?;
        stream.synchronize()?;
        tabled.push(t0.elapsed().as_secs_f64() * 1e6);
        pass &= right(&out_table.read_on(&stream)?, &want);
    }
    let (e, t) = (median(eager), median(tabled));
    println!(
        "triton: {} {STEPS} steps of 3 Triton kernels on fresh inputs; median step: eager {e:.1} µs, table + PDL replay {t:.1} µs ({:.2}× faster) on {}",
        if pass { "PASS" } else { "FAIL" },
        e / t,
        ctx.device().name()?
    );
    Ok(pass)
}
