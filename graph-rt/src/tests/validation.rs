//! Step validation: a closure whose grid and length follow a host value it does not declare,
//! changed every call, never replays stale work where validation runs (an error, or a
//! recapture), is caught within N calls where it runs every N-th call, and a closure that
//! declares everything it reads validates as the same work.

use std::cell::Cell;

use super::chain::{add1, N};
use super::{capturing_ctx, random_f32, sized};
use crate::step::{
    Divergence, EagerReason, OnDivergence, Step, StepMode, StepOptions, StepParams, Validated,
    Validation,
};
use crate::{DeviceBuffer, LaunchConfig, Misuse, Stream};

/// What one call of the step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// It ran and wrote `x + 1` over the first `n` elements, nothing after.
    Right,
    /// It ran and wrote anything else (a stale replay).
    Wrong,
    /// It returned `Misuse::StepDiverged` and wrote nothing.
    Diverged,
}

/// The host value of call `k`: a length of 1..=N that differs from call k - 1's, and whose grid
/// (256-thread blocks) differs too every other call.
fn length(k: usize) -> usize {
    N - (k * 389) % (N / 2)
}

/// `calls` calls of a step whose closure runs `add1` over `n` elements with a grid of `n`
/// elements, `n` read from a host cell (not a declared parameter) and changed every call; `x`
/// and `y` declared and bound to fresh buffers every call. Returns each call's outcome and the
/// step.
fn undeclared_length(options: StepOptions, calls: usize) -> (Vec<Outcome>, String) {
    undeclared(options, calls, length)
}

/// As [`undeclared_length`], with `length(k)` the host value of call `k` (call 0: the capture's).
fn undeclared(
    options: StepOptions,
    calls: usize,
    length: impl Fn(usize) -> usize,
) -> (Vec<Outcome>, String) {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let n = Cell::new(length(0));
    let mut p = StepParams::new(&ctx, 4).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    let (x0, y0) = (
        DeviceBuffer::from_host(&ctx, &random_f32(N)).unwrap(),
        DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
    );
    p.bind(&x, &x0).unwrap();
    p.bind(&y, &y0).unwrap();
    let mut step = Step::new(&stream, p, options, |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        let n = n.get();
        // SAFETY: add1 over n ≤ N floats of two distinct N-float buffers.
        unsafe {
            s.launch(
                &f,
                &LaunchConfig::for_elements(n, 256),
                (&xb, &yb, n as i32),
            )
        }
    })
    .unwrap();
    assert!(
        matches!(step.mode(), StepMode::Graph { .. }),
        "{:?}",
        step.mode()
    );
    let mut outcomes = Vec::with_capacity(calls);
    for k in 1..=calls {
        n.set(length(k));
        let host = random_f32(N);
        let (xk, yk) = (
            DeviceBuffer::from_host(&ctx, &host).unwrap(),
            DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
        );
        step.bind(&x, &xk).unwrap();
        step.bind(&y, &yk).unwrap();
        let ran = step.run();
        let got = yk.to_vec().unwrap();
        outcomes.push(match ran {
            Ok(()) => {
                let right = got.iter().enumerate().all(|(i, &v)| {
                    let want = if i < length(k) { host[i] + 1.0 } else { 0.0 };
                    v == want
                });
                if right {
                    Outcome::Right
                } else {
                    Outcome::Wrong
                }
            }
            Err(e) => {
                assert!(
                    matches!(
                        e.misuse_kind(),
                        Some(Misuse::StepDiverged { node: Some(1) })
                    ),
                    "call {k}: {e}"
                );
                assert!(got.iter().all(|&v| v == 0.0), "a diverged call ran");
                Outcome::Diverged
            }
        });
    }
    (outcomes, format!("{:?}", step.mode()))
}

fn count(outcomes: &[Outcome], which: Outcome) -> usize {
    outcomes.iter().filter(|&&o| o == which).count()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_undeclared_grid_changed_every_call_gives_no_wrong_result_under_the_debug_default() {
    // What `Validation::default()` is in a build with debug assertions (checked on the CPU).
    let options = StepOptions {
        validation: Validation::first_then_every(8, 256),
        ..StepOptions::default()
    };
    let calls = sized(200, 20, 10);
    let (outcomes, mode) = undeclared_length(options, calls);
    assert_eq!(outcomes[0], Outcome::Diverged, "{outcomes:?}");
    assert_eq!(count(&outcomes, Outcome::Wrong), 0, "{outcomes:?}");
    assert_eq!(count(&outcomes, Outcome::Right), calls - 1, "{outcomes:?}");
    assert!(mode.contains("Diverged(Dimensions"), "{mode}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn without_validation_an_undeclared_grid_replays_the_captured_work_silently() {
    // What every step did before validation (and does with it off): the captured grid and
    // length replayed, no error.
    let options = StepOptions {
        validation: Validation::off(),
        ..StepOptions::default()
    };
    let calls = sized(200, 20, 10);
    let (outcomes, mode) = undeclared_length(options, calls);
    assert_eq!(count(&outcomes, Outcome::Diverged), 0, "{outcomes:?}");
    assert_eq!(count(&outcomes, Outcome::Wrong), calls, "{outcomes:?}");
    assert!(mode.starts_with("Graph"), "{mode}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_undeclared_grid_is_caught_within_n_calls_when_every_nth_call_validates() {
    const EVERY: u32 = 16;
    let options = StepOptions {
        validation: Validation::every(EVERY),
        ..StepOptions::default()
    };
    let calls = sized(200, 40, 20);
    let (outcomes, _) = undeclared_length(options, calls);
    let caught = outcomes.iter().position(|&o| o == Outcome::Diverged);
    assert_eq!(caught, Some(EVERY as usize - 1), "{outcomes:?}");
    // Before: the stale replays validation did not look at; after: the closure, right.
    let after = &outcomes[EVERY as usize..];
    assert_eq!(count(after, Outcome::Right), after.len(), "{outcomes:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn validations_keep_to_their_schedule_after_the_first_passes() {
    // Validated at calls 1, 2, 5, 10, …; the host value changes from call 6 on: calls 6 to 9
    // replay stale work (no validation there), call 10 is caught.
    let options = StepOptions {
        validation: Validation::first_then_every(2, 5),
        ..StepOptions::default()
    };
    let (outcomes, mode) = undeclared(options, 16, |k| if k < 6 { N } else { length(k) });
    use Outcome::*;
    let want = [
        Right, Right, Right, Right, Right, Wrong, Wrong, Wrong, Wrong, Diverged,
    ];
    assert_eq!(outcomes[..10], want, "{outcomes:?}");
    assert!(outcomes[10..].iter().all(|&o| o == Right), "{outcomes:?}");
    assert!(mode.contains("Diverged("), "{mode}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_recapturable_step_recaptures_on_a_divergence_then_runs_eagerly_and_is_always_right() {
    let options = StepOptions {
        recapturable: true,
        validation: Validation::first_then_every(8, 256).on_divergence(OnDivergence::Recapture),
        ..StepOptions::default()
    };
    let calls = sized(100, 20, 10);
    let (outcomes, mode) = undeclared_length(options, calls);
    assert_eq!(count(&outcomes, Outcome::Right), calls, "{outcomes:?}");
    // Recaptured at calls 1 and 2, given up at call 3.
    assert!(mode.contains("Diverged("), "{mode}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_whose_closure_declares_what_it_reads_validates_as_the_same_work_at_every_call() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let mut p = StepParams::new(&ctx, 4).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    let bufs: Vec<DeviceBuffer<f32>> = (0..4)
        .map(|_| DeviceBuffer::from_host(&ctx, &random_f32(N)).unwrap())
        .collect();
    p.bind(&x, &bufs[0]).unwrap();
    p.bind(&y, &bufs[1]).unwrap();
    let options = StepOptions {
        validation: Validation::first_then_every(u32::MAX, 0),
        ..StepOptions::default()
    };
    let cfg = LaunchConfig::for_elements(N, 256);
    let mut step = Step::new(&stream, p, options, |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        // SAFETY: add1 over N floats of two distinct N-float buffers.
        unsafe { s.launch(&f, &cfg, (&xb, &yb, N as i32)) }
    })
    .unwrap();
    for k in 0..sized(50, 10, 6) {
        // Bound to each other's buffers in turn: the same allocations, other parameters.
        let (a, b) = (&bufs[k % 4], &bufs[(k + 1) % 4]);
        step.bind(&x, a).unwrap();
        step.bind(&y, b).unwrap();
        step.run().unwrap();
        let (input, out) = (a.to_vec().unwrap(), b.to_vec().unwrap());
        assert!(
            input.iter().zip(&out).all(|(i, o)| *o == i + 1.0),
            "call {k}"
        );
        assert_eq!(step.validate().unwrap(), Validated::Same, "call {k}");
    }
    assert!(
        matches!(step.mode(), StepMode::Graph { .. }),
        "{:?}",
        step.mode()
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_divergence_names_the_node_and_what_changed() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let blocks = Cell::new(16u32);
    let mut p = StepParams::new(&ctx, 4).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    let bufs: Vec<DeviceBuffer<f32>> = (0..2)
        .map(|_| DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap())
        .collect();
    p.bind(&x, &bufs[0]).unwrap();
    p.bind(&y, &bufs[1]).unwrap();
    let options = StepOptions {
        validation: Validation::off(),
        ..StepOptions::default()
    };
    let mut step = Step::new(&stream, p, options, |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        let cfg = LaunchConfig::new(blocks.get(), 256u32);
        // SAFETY: add1 over N floats (16 blocks of 256 threads at most cover them; the kernel
        // checks its index against N).
        unsafe { s.launch(&f, &cfg, (&xb, &yb, N as i32)) }
    })
    .unwrap();
    assert_eq!(step.validate().unwrap(), Validated::Same);
    blocks.set(8);
    let e = step.validate().unwrap_err();
    assert!(
        matches!(
            e.misuse_kind(),
            Some(Misuse::StepDiverged { node: Some(1) })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("grid [8, 1, 1]"), "{e}");
    let StepMode::Eager(EagerReason::Diverged(Divergence::Dimensions {
        kernel,
        captured,
        now,
        ..
    })) = step.mode()
    else {
        panic!("{:?}", step.mode());
    };
    assert_eq!(
        (kernel.as_str(), captured.grid[0], now.grid[0]),
        ("add1", 16, 8)
    );
    // The step runs eagerly from now on, with the grid of now.
    step.run().unwrap();
    assert_eq!(step.validate().unwrap(), Validated::NoGraph);
}
