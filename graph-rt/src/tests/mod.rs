//! GPU tests of the safe core. Each is `#[ignore = "needs a CUDA GPU"]`: a machine without one
//! reports them as ignored; the GPU suite runs them with `--include-ignored`.

mod args;
mod calibrate;
mod capture_threads;
mod chain;
mod cublas;
mod cublas_shapes;
#[cfg(feature = "cudarc")]
mod cudarc;
mod discover;
#[cfg(graph_rt_fault)]
mod faults;
mod graphs;
mod identity;
mod instantiate;
mod kernels;
mod lifetime;
mod memory;
mod nccl;
mod nccl_processes;
mod prelude;
mod profile;
mod programmatic;
mod retention;
mod runtime;
mod step;
mod step_foreign;
mod step_memory;
mod step_mix;
mod table;
mod table_forms;
mod table_sets;
mod triton;
mod triton_case;
mod validation;
mod views;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use rand::Rng;

use crate::{Context, Function, Module};

/// A capture in global mode makes the driver refuse allocations and synchronous copies in every
/// thread of the process, and such a call from another thread invalidates the capture. Tests that
/// capture hold this lock exclusively; the others share it, so the tests may run in parallel.
static GPU: RwLock<()> = RwLock::new(());

/// The primary context of device 0, with this test's share of [`GPU`].
pub(crate) struct TestContext {
    ctx: Context,
    _guard: Guard,
}

enum Guard {
    Shared(#[allow(dead_code)] RwLockReadGuard<'static, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'static, ()>),
}

impl std::ops::Deref for TestContext {
    type Target = Context;
    fn deref(&self) -> &Context {
        &self.ctx
    }
}

impl Drop for TestContext {
    /// Each test leaves its context idle and releases what its drops parked, so that a leak
    /// check at exit sees only real leaks.
    fn drop(&mut self) {
        let r = self.ctx.synchronize();
        if !std::thread::panicking() {
            r.unwrap_or_else(|e| panic!("the test left its context broken: {e}"));
        }
    }
}

fn open(guard: Guard) -> TestContext {
    let ctx = Context::new(0).unwrap_or_else(|e| panic!("no CUDA context: {e}"));
    TestContext { ctx, _guard: guard }
}

/// For tests that do not capture; panics (failing the test) with the driver's reason.
pub(crate) fn ctx() -> TestContext {
    open(Guard::Shared(GPU.read()))
}

/// For tests that capture: no other GPU test runs meanwhile.
pub(crate) fn capturing_ctx() -> TestContext {
    open(Guard::Exclusive(GPU.write()))
}

/// Holds [`GPU`] exclusively without opening a context.
#[cfg(feature = "cudarc")]
pub(crate) fn exclusive() -> RwLockWriteGuard<'static, ()> {
    GPU.write()
}

/// A test's size by the compute-sanitizer tool it runs under (`run.sh sanitize` sets
/// GRAPH_RT_SANITIZER to the tool's name): `plain` without one, `racecheck` under racecheck
/// (tens of milliseconds a launch with 14 sanitizers at once, shared-memory kernels such as
/// GEMMs far more), `sanitized` under the others (memcheck, synccheck, initcheck: a few
/// milliseconds a launch). Every launch and allocation is instrumented there: the sizes shrink,
/// what the test checks stays.
/// Whether the test runs under a compute-sanitizer tool: timings mean nothing there (every
/// launch is instrumented), so decisions made from them are not checked.
pub(crate) fn sanitized() -> bool {
    std::env::var_os("GRAPH_RT_SANITIZER").is_some()
}

pub(crate) fn sized<T>(plain: T, sanitized: T, racecheck: T) -> T {
    match std::env::var_os("GRAPH_RT_SANITIZER") {
        None => plain,
        Some(tool) if tool == "racecheck" => racecheck,
        Some(_) => sanitized,
    }
}

/// Function `name` of the shipped kernel module `kernel`, loaded in `ctx`.
pub(crate) fn function(ctx: &Context, kernel: &graph_rt_kernels::Kernel, name: &str) -> Function {
    Module::from_ptx(ctx, kernel.ptx)
        .unwrap_or_else(|e| panic!("{}: {e}", kernel.name))
        .function(name)
        .unwrap()
}

/// `n` fresh random floats in [-1, 1).
pub(crate) fn random_f32(n: usize) -> Vec<f32> {
    let mut rng = rand::rng();
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// Asserts `‖got − want‖ / ‖want‖ ≤ tol` and that nothing is NaN (outputs are poisoned with NaN).
pub(crate) fn assert_close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    assert!(
        got.iter().all(|v| v.is_finite()),
        "an output was not written (NaN poison left)"
    );
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| (*g as f64 - w).powi(2))
        .sum();
    let den: f64 = want
        .iter()
        .map(|w| w * w)
        .sum::<f64>()
        .max(f64::MIN_POSITIVE);
    let rel = (num / den).sqrt();
    assert!(rel <= tol, "relative error {rel:e} > {tol:e}");
}
