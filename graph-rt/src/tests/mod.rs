//! GPU tests of the safe core. Each is `#[ignore = "needs a CUDA GPU"]`: a machine without one
//! reports them as ignored; the GPU suite runs them with `--include-ignored`.

#[cfg(feature = "cudarc")]
mod cudarc;
mod graphs;
mod kernels;
mod memory;
mod runtime;

use rand::Rng;

use crate::Context;

/// The primary context of device 0; panics (failing the test) with the driver's reason.
pub(crate) fn ctx() -> Context {
    Context::new(0).unwrap_or_else(|e| panic!("no CUDA context: {e}"))
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
