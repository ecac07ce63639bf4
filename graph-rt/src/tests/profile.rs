//! The overhead profiler on the device: a chain of tiny kernels keeps its graph (and a second
//! profiler reads the decision from the file), one kernel over few expected calls runs eagerly,
//! a step that is not re-runnable is decided over its first calls, drift re-profiles and flips
//! the decision, a step that cannot be captured runs eagerly or fails (strict).

use super::chain::{add1, buffers, fresh_input, N};
use super::{assert_close, capturing_ctx, function, sized};
use crate::profile::{Mode, Policy, ProfileOptions, Profiled, Reason};
use crate::step::{Buf, EagerReason, StepMode, StepOptions, StepParams, StepScope};
use crate::{Context, DeviceBuffer, Function, LaunchConfig, Misuse, Stream};

/// Kernels of the chain: y = x + 1, then y += 1 in place, `KERNELS` in all.
const KERNELS: usize = 40;

fn chain_params(ctx: &Context) -> (StepParams, Buf<f32>, Buf<f32>) {
    let mut p = StepParams::new(ctx, 4).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    let b = buffers(ctx, 2);
    p.bind(&x, &b[0]).unwrap();
    p.bind(&y, &b[1]).unwrap();
    (p, x, y)
}

/// The chain's closure.
fn chain<'a>(
    f: &'a Function,
    x: &'a Buf<f32>,
    y: &'a Buf<f32>,
    kernels: usize,
) -> impl FnMut(&StepScope<'_>) -> crate::Result<()> + 'a {
    let cfg = LaunchConfig::for_elements(N, 256);
    move |s| {
        let (xb, yb) = (s.buffer(x)?, s.buffer(y)?);
        // SAFETY: add1 over N floats of two distinct N-float buffers, then in place (each
        // thread reads and writes its own element).
        unsafe { s.launch(f, &cfg, (&xb, &yb, N as i32))? };
        for _ in 1..kernels {
            // SAFETY: as above, in place.
            unsafe { s.launch(f, &cfg, (&yb, &yb, N as i32))? };
        }
        Ok(())
    }
}

/// Calls on fresh buffers, every result checked.
fn calls_are_right<F>(
    step: &mut Profiled<F>,
    ctx: &Context,
    x: &Buf<f32>,
    y: &Buf<f32>,
    calls: usize,
    kernels: usize,
) where
    F: FnMut(&StepScope<'_>) -> crate::Result<()>,
{
    let mut kept = Vec::new();
    for _ in 0..calls {
        let mut b = buffers(ctx, 2);
        let input = fresh_input(&mut b[0]);
        step.bind(x, &b[0]).unwrap();
        step.bind(y, &b[1]).unwrap();
        step.run().unwrap();
        kept.push((input, b.pop().unwrap()));
    }
    for (input, out) in kept {
        let want: Vec<f64> = input.iter().map(|&v| v as f64 + kernels as f64).collect();
        assert_close(&out.to_vec().unwrap(), &want, 1e-5);
    }
}

fn temp_store(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("graph-rt-profile-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("decisions.json")
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_chain_of_tiny_kernels_keeps_its_graph_and_a_second_profiler_reads_the_decision() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let store = temp_store("chain");
    let options = ProfileOptions {
        rerunnable: true,
        store: Some(store.clone()),
        ..ProfileOptions::default()
    };
    let (p, x, y) = chain_params(&ctx);
    let mut step = Profiled::new(
        "chain",
        &stream,
        p,
        StepOptions::default(),
        options.clone(),
        chain(&f, &x, &y, KERNELS),
    )
    .unwrap();
    let r = step.report().clone();
    println!("profile: {r}");
    let d = r.decision.clone().expect("decided at once");
    assert_eq!((d.mode, d.reason), (Mode::Graph, Reason::GraphWins), "{r}");
    assert_eq!(
        r.profiled_calls,
        2 * (options.warm_up + options.samples) as u64
    );
    assert!(!r.from_file);
    calls_are_right(&mut step, &ctx, &x, &y, sized(20, 6, 3), KERNELS);
    drop(step);
    // A second profiler of the same step: the decision is the file's, nothing profiled.
    let (p, x, y) = chain_params(&ctx);
    let mut again = Profiled::new(
        "chain",
        &stream,
        p,
        StepOptions::default(),
        options.clone(),
        chain(&f, &x, &y, KERNELS),
    )
    .unwrap();
    let r = again.report().clone();
    assert!(r.from_file, "{r}");
    assert_eq!(r.profiled_calls, 0);
    assert_eq!(again.mode(), Mode::Graph);
    calls_are_right(&mut again, &ctx, &x, &y, 3, KERNELS);
    // A corrupt file: profiled again, with a note.
    std::fs::write(&store, "{ corrupt").unwrap();
    let (p, x, y) = chain_params(&ctx);
    let third = Profiled::new(
        "chain",
        &stream,
        p,
        StepOptions::default(),
        options,
        chain(&f, &x, &y, KERNELS),
    )
    .unwrap();
    assert!(!third.report().from_file);
    assert!(
        !third.report().notes.is_empty(),
        "{:?}",
        third.report().notes
    );
    let _ = std::fs::remove_dir_all(store.parent().unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_kernel_over_few_expected_calls_runs_eagerly_and_frees_its_graph() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let options = ProfileOptions {
        rerunnable: true,
        policy: Policy {
            expected_calls: 10,
            ..Policy::default()
        },
        ..ProfileOptions::default()
    };
    let (p, x, y) = chain_params(&ctx);
    let mut step = Profiled::new(
        "one",
        &stream,
        p,
        StepOptions::default(),
        options,
        chain(&f, &x, &y, 1),
    )
    .unwrap();
    let r = step.report().clone();
    println!("profile: {r}");
    assert_eq!(step.mode(), Mode::Eager, "{r}");
    assert!(
        matches!(
            step.step().mode(),
            StepMode::Eager(EagerReason::NotWorthIt(_))
        ),
        "{:?}",
        step.step().mode()
    );
    calls_are_right(&mut step, &ctx, &x, &y, 5, 1);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_that_is_not_rerunnable_is_decided_over_its_first_calls_all_of_them_right() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let options = ProfileOptions::default();
    let needed = 2 * (options.warm_up + options.samples);
    let (p, x, y) = chain_params(&ctx);
    let mut step = Profiled::new(
        "first-calls",
        &stream,
        p,
        StepOptions::default(),
        options,
        chain(&f, &x, &y, KERNELS),
    )
    .unwrap();
    assert!(
        step.report().decision.is_none(),
        "profiling from real calls"
    );
    calls_are_right(&mut step, &ctx, &x, &y, needed, KERNELS);
    let r = step.report().clone();
    println!("profile: {r}");
    assert_eq!(r.profiled_calls, needed as u64);
    assert_eq!(r.decision.as_ref().map(|d| d.mode), Some(Mode::Graph), "{r}");
    calls_are_right(&mut step, &ctx, &x, &y, 3, KERNELS);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_whose_cost_changes_after_deployment_is_profiled_again_and_the_decision_flips() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let axpy = function(&ctx, &graph_rt_kernels::AXPY_TABLE, "axpy_f32");
    // Buffers large enough that, at full length, each kernel runs long behind its launch.
    let big = sized(8 << 20, 1 << 20, 1 << 16);
    let mut p = StepParams::new(&ctx, 8).unwrap();
    let (x, y) = (p.buffer::<f32>(big).unwrap(), p.buffer::<f32>(big).unwrap());
    let (a, len) = (p.scalar::<f32>().unwrap(), p.scalar::<i32>().unwrap());
    let (bx, by) = (
        DeviceBuffer::<f32>::zeroed(&ctx, big).unwrap(),
        DeviceBuffer::<f32>::zeroed(&ctx, big).unwrap(),
    );
    p.bind(&x, &bx).unwrap();
    p.bind(&y, &by).unwrap();
    p.set(&a, 1.0).unwrap();
    p.set(&len, 1).unwrap();
    let cfg = LaunchConfig::for_elements(big, 256);
    let options = ProfileOptions {
        rerunnable: true,
        sample_every: 1,
        policy: Policy {
            noise_factor: 4.0,
            expected_calls: 100,
            ..Policy::default()
        },
        ..ProfileOptions::default()
    };
    let mut step = Profiled::new("drift", &stream, p, StepOptions::default(), options, |s| {
        for _ in 0..KERNELS {
            // SAFETY: axpy over the first `len` ≤ big floats of two distinct big-float buffers,
            // every argument through its slot.
            unsafe { s.launch(&axpy, &cfg, (a.slot(), x.slot(), y.slot(), len.slot()))? };
        }
        Ok(())
    })
    .unwrap();
    let first = step.report().clone();
    println!("profile, one element: {first}");
    assert_eq!(step.mode(), Mode::Graph, "{first}");
    // The work grows: every kernel now runs over every element.
    step.set(&len, big as i32).unwrap();
    for _ in 0..40 {
        step.run().unwrap();
        if step.report().reprofiles > 0 {
            break;
        }
    }
    stream.synchronize().unwrap();
    let r = step.report().clone();
    println!("profile, every element: {r}");
    assert!(
        r.reprofiles >= 1,
        "no re-profiling after the cost grew: {r}"
    );
    assert_eq!(r.decisions, 2, "{r}");
    assert_eq!(step.mode(), Mode::Eager, "the decision did not flip: {r}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_that_cannot_be_captured_runs_eagerly_or_fails_when_strict() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    for strict in [false, true] {
        let (p, x, y) = chain_params(&ctx);
        let options = ProfileOptions {
            rerunnable: true,
            strict,
            ..ProfileOptions::default()
        };
        let made = Profiled::new("sync", &stream, p, StepOptions::default(), options, |s| {
            let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
            // SAFETY: add1 over N floats of two distinct N-float buffers.
            unsafe { s.launch(&f, &cfg, (&xb, &yb, N as i32))? };
            s.synchronize()
        });
        match (strict, made) {
            (false, Ok(step)) => {
                let d = step.report().decision.clone().expect("decided");
                assert_eq!((d.mode, d.reason), (Mode::Eager, Reason::NotCaptured));
            }
            (true, Err(e)) => assert!(
                matches!(e.misuse_kind(), Some(Misuse::CaptureRefused { .. })),
                "{e}"
            ),
            (strict, made) => panic!("strict {strict}: {:?}", made.map(|s| s.report().clone())),
        }
    }
}
