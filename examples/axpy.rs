//! Loads the shipped `axpy_f32` kernel, runs it on fresh random data and checks the result
//! against a CPU reference computed in f64.
//!
//! ```text
//! cargo run --release --example axpy
//! ```
//! Prints `axpy: PASS ...` and exits 0 when every element matches; without a GPU or driver it
//! prints the reason on one line and exits 1.

use std::process::ExitCode;

use graph_rt::{Context, DeviceBuffer, LaunchConfig, Module, Stream};
use rand::Rng;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("axpy: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> graph_rt::Result<bool> {
    let n: usize = 1 << 24;
    let ctx = Context::new(0)?;
    let stream = Stream::new(&ctx)?;
    let axpy = Module::from_ptx(&ctx, graph_rt::kernels::AXPY.ptx)?.function("axpy_f32")?;

    let mut rng = rand::rng();
    let a: f32 = rng.random_range(-2.0..2.0);
    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let y: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let dx = DeviceBuffer::from_host(&ctx, &x)?;
    let mut dy = DeviceBuffer::from_host(&ctx, &y)?;

    let sms = ctx.device().multiprocessor_count()? as u32;
    let config = LaunchConfig::new(sms * 8, 256u32);
    // SAFETY: axpy_f32(float a, const float* x, float* y, int n) reads n elements of x and
    // updates n elements of y, and both buffers hold n elements.
    unsafe { stream.launch(&axpy, &config, (a, &dx, &mut dy, n as i32))? };
    stream.synchronize()?;
    let got = dy.to_vec()?;

    let (mut num, mut den, mut bad) = (0.0f64, 0.0f64, 0usize);
    for ((g, x), y) in got.iter().zip(&x).zip(&y) {
        let want = a as f64 * *x as f64 + *y as f64;
        num += (*g as f64 - want).powi(2);
        den += want * want;
        bad += usize::from(!g.is_finite());
    }
    let rel = (num / den).sqrt();
    let pass = bad == 0 && rel < 1e-6;
    println!(
        "axpy: {} n={n} a={a:.4} relative error {rel:.2e} on {} ({} non-finite)",
        if pass { "PASS" } else { "FAIL" },
        ctx.device().name()?,
        bad
    );
    Ok(pass)
}
