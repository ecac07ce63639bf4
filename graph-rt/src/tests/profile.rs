//! The overhead profiler on the device: a chain of tiny kernels keeps its graph (and a second
//! profiler reads the decision from the file), one kernel over few expected calls runs eagerly,
//! a faster graph kept off by its build alone is built three times (the median decides), a step
//! that is not re-runnable is decided over its first calls, drift re-profiles and flips
//! the decision, a step that cannot be captured runs eagerly or fails (strict).

use super::chain::{add1, buffers, fresh_input, N};
use super::{assert_close, capturing_ctx, sanitized, sized};
use crate::profile::{
    Mode, Part, PartitionPolicy, Policy, ProfileOptions, Profiled, Reason, Segment, Segmented,
};
use crate::step::{Buf, EagerReason, StepMode, StepOptions, StepParams, StepScope};
use crate::{Context, Function, LaunchConfig, Misuse, Stream};

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
    // Timings mean nothing under a sanitizer: the decision is checked without one.
    if !sanitized() {
        assert_eq!((d.mode, d.reason), (Mode::Graph, Reason::GraphWins), "{r}");
    }
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
    assert_eq!(again.mode(), d.mode);
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
    if !sanitized() {
        assert_eq!(step.mode(), Mode::Eager, "{r}");
        assert!(
            matches!(
                step.step().mode(),
                StepMode::Eager(EagerReason::NotWorthIt(_))
            ),
            "{:?}",
            step.step().mode()
        );
    }
    calls_are_right(&mut step, &ctx, &x, &y, 5, 1);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_faster_graph_kept_off_by_its_build_alone_is_built_three_times_and_decided_on_the_median() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    // One expected call: the chain's graph saves tens of µs, its build costs hundreds.
    let options = ProfileOptions {
        rerunnable: true,
        policy: Policy {
            expected_calls: 1,
            ..Policy::default()
        },
        ..ProfileOptions::default()
    };
    let (p, x, y) = chain_params(&ctx);
    let mut step = Profiled::new(
        "built-thrice",
        &stream,
        p,
        StepOptions::default(),
        options,
        chain(&f, &x, &y, KERNELS),
    )
    .unwrap();
    let r = step.report().clone();
    println!("profile: {r}");
    let builds = r.one_time_samples.clone();
    assert!(builds.len() == 1 || builds.len() == 3, "{builds:?}");
    assert!(
        builds.iter().all(|us| us.is_finite() && *us > 0.0),
        "{builds:?}"
    );
    assert_eq!(r.one_time_us, crate::timing::median(builds.clone()));
    assert!(r.notes.is_empty(), "{r}");
    if !sanitized() {
        let d = r.decision.as_ref().expect("decided at once");
        assert_eq!(
            (d.mode, d.reason.clone()),
            (Mode::Eager, Reason::NeverPaysBack),
            "{r}"
        );
        assert!(d.saving_us > 0.0, "{r}");
        assert_eq!(builds.len(), 3, "{r}");
        assert!(r.to_string().contains("median of 3 builds"), "{r}");
        assert_eq!(
            r.to_json()["one_time_samples_us"].as_array().map(Vec::len),
            Some(3)
        );
    }
    calls_are_right(&mut step, &ctx, &x, &y, 3, KERNELS);
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
    assert!(r.decision.is_some(), "decided after {needed} calls: {r}");
    if !sanitized() {
        assert_eq!(
            r.decision.as_ref().map(|d| d.mode),
            Some(Mode::Graph),
            "{r}"
        );
    }
    calls_are_right(&mut step, &ctx, &x, &y, 3, KERNELS);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_whose_cost_changes_after_deployment_is_profiled_again_and_the_decision_flips() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    // One kernel over few expected calls: eager is kept. Then the step's eager cost grows (its
    // closure spends 500 µs on the host before launching, as a framework's dispatch might):
    // the sampled calls drift from the profiled median, the step is captured and profiled
    // again, and now the graph wins.
    let host_cost = std::cell::Cell::new(std::time::Duration::ZERO);
    let options = ProfileOptions {
        rerunnable: true,
        sample_every: 1,
        policy: Policy {
            expected_calls: 10,
            ..Policy::default()
        },
        ..ProfileOptions::default()
    };
    let (p, x, y) = chain_params(&ctx);
    let mut body = chain(&f, &x, &y, 1);
    let mut step = Profiled::new("drift", &stream, p, StepOptions::default(), options, |s| {
        if !s.is_capturing() {
            let until = std::time::Instant::now() + host_cost.get();
            while std::time::Instant::now() < until {}
        }
        body(s)
    })
    .unwrap();
    let first = step.report().clone();
    println!("profile, as made: {first}");
    let timed = !sanitized();
    if timed {
        assert_eq!(step.mode(), Mode::Eager, "{first}");
    }
    host_cost.set(std::time::Duration::from_micros(500));
    for _ in 0..60 {
        let mut b = buffers(&ctx, 2);
        let input = fresh_input(&mut b[0]);
        step.bind(&x, &b[0]).unwrap();
        step.bind(&y, &b[1]).unwrap();
        step.run().unwrap();
        // A decode loop reads its token each step.
        let want: Vec<f64> = input.iter().map(|&v| v as f64 + 1.0).collect();
        assert_close(&b[1].to_vec().unwrap(), &want, 1e-6);
        if step.report().reprofiles > 0 {
            break;
        }
    }
    let r = step.report().clone();
    println!("profile, after the cost grew: {r}");
    if timed {
        assert!(
            r.reprofiles >= 1,
            "no re-profiling after the cost grew: {r}"
        );
        assert_eq!(r.decisions, 2, "{r}");
        assert_eq!(step.mode(), Mode::Graph, "the decision did not flip: {r}");
    }
    // Right in the new mode too.
    calls_are_right(&mut step, &ctx, &x, &y, 3, 1);
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

/// Segments of a step over one buffer: four runs of `per_run` in-place add1 around a segment
/// that synchronizes with the host.
pub(super) fn segments_around_a_sync<'a>(
    f: &'a Function,
    buf: &'a crate::DeviceBuffer<f32>,
    per_run: usize,
) -> Vec<Segment<'a>> {
    let cfg = LaunchConfig::for_elements(N, 256);
    let run = move |s: &StepScope<'_>| -> crate::Result<()> {
        for _ in 0..per_run {
            // SAFETY: add1 in place over N floats (each thread its own element).
            unsafe { s.launch(f, &cfg, (buf, buf, N as i32))? };
        }
        Ok(())
    };
    vec![
        Segment::new("run 1", run),
        Segment::new("run 2", run),
        Segment::new("sync", move |s| {
            // SAFETY: as above.
            unsafe { s.launch(f, &cfg, (buf, buf, N as i32))? };
            s.synchronize()
        }),
        Segment::new("run 3", run),
        Segment::new("run 4", run),
    ]
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiny_kernel_runs_around_a_synchronizing_segment_are_captured_around_it() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let mut b = buffers(&ctx, 1);
    let input = fresh_input(&mut b[0]);
    let buf = &b[0];
    let mut step = Segmented::new(
        &stream,
        segments_around_a_sync(&f, buf, 20),
        sized(7, 3, 2),
        &PartitionPolicy::default(),
    )
    .unwrap();
    println!("profile: segments {:?}: {}", step.costs(), step.describe());
    if !sanitized() {
        let want = [
            Part {
                start: 0,
                end: 2,
                captured: true,
            },
            Part {
                start: 2,
                end: 3,
                captured: false,
            },
            Part {
                start: 3,
                end: 5,
                captured: true,
            },
        ];
        assert_eq!(step.plan().parts, want, "{}", step.describe());
    }
    // Every call adds 81 (four runs of 20 and the synchronizing segment's one).
    stream.synchronize().unwrap();
    let before = buf.to_vec().unwrap();
    for _ in 0..5 {
        step.run().unwrap();
    }
    stream.synchronize().unwrap();
    let want: Vec<f64> = before.iter().map(|&v| v as f64 + 5.0 * 81.0).collect();
    assert_close(&buf.to_vec().unwrap(), &want, 1e-4);
    let _ = input;
}
