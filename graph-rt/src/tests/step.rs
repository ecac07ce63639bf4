//! Steps: a closure of plain, table-form and cuBLAS work captured once and rebound at every
//! call; a position scalar; a closure that synchronizes (runs eagerly, says which call); a
//! closure whose work changes between runs (refused).

use std::cell::Cell;

use super::chain::{add1, buffers, fresh_input, N};
use super::{assert_close, capturing_ctx, function, sized};
use crate::cublas::{Cublas, Op as CublasOp};
use crate::foreign::{PreludeMode, PreludeOptions};
use crate::step::{
    Buf, EagerReason, Step, StepMode, StepOptions, StepParams, StepScope, Validated, Validation,
};
use crate::{Context, DeviceBuffer, LaunchConfig, Misuse, Stream};

/// Rows of the GEMM the mixed step ends with: `out (M × 16) = z (M × N/M) · ones (N/M × 16)`.
const M: usize = 16;

/// One call of a step whose closure computes `y = x + 1`, on a fresh `y`: right.
fn runs_add1<F>(step: &mut Step<F>, y: &Buf<f32>, input: &[f32])
where
    F: FnMut(&StepScope<'_>) -> crate::Result<()>,
{
    let out = DeviceBuffer::<f32>::zeroed(step.stream().context(), N).unwrap();
    step.bind(y, &out).unwrap();
    step.run().unwrap();
    let want: Vec<f64> = input.iter().map(|&v| v as f64 + 1.0).collect();
    assert_close(&out.to_vec().unwrap(), &want, 1e-6);
}

/// Parameters `x` and `y` of `N` floats, bound to `bufs[0]` and `bufs[1]`.
fn xy(ctx: &Context, bufs: &[DeviceBuffer<f32>]) -> (StepParams, Buf<f32>, Buf<f32>) {
    let mut p = StepParams::new(ctx, 4).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    p.bind(&x, &bufs[0]).unwrap();
    p.bind(&y, &bufs[1]).unwrap();
    (p, x, y)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_of_plain_table_form_and_cublas_work_is_rebound_to_fresh_buffers_every_call() {
    rebound_mixed_step(StepOptions::default(), Some(PreludeMode::Device));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_same_step_rewritten_from_the_host_or_run_eagerly_gives_the_same_results() {
    let host = StepOptions {
        prelude: PreludeOptions {
            host_only: true,
            ..PreludeOptions::default()
        },
        ..StepOptions::default()
    };
    rebound_mixed_step(host, None);
    let eager = StepOptions {
        eager: true,
        ..StepOptions::default()
    };
    rebound_mixed_step(eager, None);
}

/// A step of a plain `add1` (x → y), a table-form `add1` (y → z) and a GEMM (z → out), every
/// buffer fresh at every call, no synchronization until the end; every output checked. With
/// `device`, the step must be a graph whose foreign words are rewritten there.
pub(super) fn rebound_mixed_step(options: StepOptions, device: Option<PreludeMode>) {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let blas = Cublas::new(&stream).unwrap();
    let (plain, table_form) = (
        add1(&ctx),
        function(&ctx, &graph_rt_kernels::CHAIN_TABLE, "add1"),
    );
    let k = N / M;
    let ones = DeviceBuffer::from_host(&ctx, &vec![1.0f32; k * 16]).unwrap();
    let mut p = StepParams::new(&ctx, 16).unwrap();
    let (x, y, z) = (
        p.buffer::<f32>(N).unwrap(),
        p.buffer::<f32>(N).unwrap(),
        p.buffer::<f32>(N).unwrap(),
    );
    let out = p.buffer::<f32>(M * 16).unwrap();
    let fresh = || {
        let mut b = buffers(&ctx, 3);
        b.push(DeviceBuffer::zeroed(&ctx, M * 16).unwrap());
        b
    };
    let first = fresh();
    let xs = [&x, &y, &z];
    for (param, b) in xs.iter().zip(&first) {
        p.bind(param, b).unwrap();
    }
    p.bind(&out, &first[3]).unwrap();
    let cfg = LaunchConfig::for_elements(N, 256);
    let mut step = Step::new(&stream, p, options, |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        // SAFETY: add1 over N floats of two distinct N-float buffers.
        unsafe { s.launch(&plain, &cfg, (&xb, &yb, N as i32))? };
        // SAFETY: as above, through slots bound to distinct N-float buffers.
        unsafe { s.launch(&table_form, &cfg, (y.slot(), z.slot(), N as i32))? };
        let (zb, mut ob) = (s.buffer(&z)?, s.buffer(&out)?);
        s.cublas(&blas, |b| {
            b.sgemm(
                CublasOp::N,
                CublasOp::N,
                M,
                16,
                k,
                1.0,
                &zb,
                M,
                &ones,
                k,
                0.0,
                &mut ob,
                M,
            )
        })
    })
    .unwrap();
    match (step.mode(), device) {
        (
            StepMode::Graph {
                patched_words,
                prelude,
                ..
            },
            Some(want),
        ) => {
            assert!(*patched_words >= 4, "{patched_words}");
            let got = prelude.as_ref().map(std::mem::discriminant);
            assert_eq!(got, Some(std::mem::discriminant(&want)), "{prelude:?}");
        }
        (mode, Some(_)) => panic!("the step runs as {mode:?}"),
        (mode, None) => println!("step: {mode:?}"),
    }
    let calls = sized(100, 20, 6);
    let mut kept = Vec::new();
    for _ in 0..calls {
        let mut b = fresh();
        let input = fresh_input(&mut b[0]);
        for (param, buf) in xs.iter().zip(&b) {
            step.bind(param, buf).unwrap();
        }
        step.bind(&out, &b[3]).unwrap();
        step.run().unwrap();
        // The step keeps what it reads: only the output is kept here.
        kept.push((input, b.pop().unwrap()));
    }
    // Plain, table-form and cuBLAS work rebound to other buffers is the work captured.
    let want = match step.mode() {
        StepMode::Graph { .. } => Validated::Same,
        _ => Validated::NoGraph,
    };
    assert_eq!(step.validate().unwrap(), want);
    stream.synchronize().unwrap();
    for (input, got) in kept {
        // z = x + 2; out[i, j] = Σ_l z[i + l·M].
        let want: Vec<f64> = (0..M * 16)
            .map(|e| {
                let i = e % M;
                (0..k).map(|l| input[i + l * M] as f64 + 2.0).sum()
            })
            .collect();
        assert_close(&got.to_vec().unwrap(), &want, 1e-5);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_decode_like_step_takes_its_position_from_a_scalar_and_is_captured_once() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let axpy = function(&ctx, &graph_rt_kernels::AXPY_TABLE, "axpy_f32");
    let mut p = StepParams::new(&ctx, 8).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    let (a, len) = (p.scalar::<f32>().unwrap(), p.scalar::<i32>().unwrap());
    let mut input = buffers(&ctx, 1);
    let hx = fresh_input(&mut input[0]);
    let y0 = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    p.bind(&x, &input[0]).unwrap();
    p.bind(&y, &y0).unwrap();
    p.set(&a, 2.0).unwrap();
    p.set(&len, 1).unwrap();
    let runs = Cell::new(0);
    let cfg = LaunchConfig::for_elements(N, 256);
    // No validation, which would run the closure again (the count below).
    let options = StepOptions {
        validation: Validation::off(),
        ..StepOptions::default()
    };
    let mut step = Step::new(&stream, p, options, |s| {
        runs.set(runs.get() + 1);
        // SAFETY: axpy over the first `len` ≤ N floats of two distinct N-float buffers, every
        // argument read through its slot.
        unsafe { s.launch(&axpy, &cfg, (a.slot(), x.slot(), y.slot(), len.slot())) }
    })
    .unwrap();
    assert!(
        matches!(
            step.mode(),
            StepMode::Graph {
                patched_words: 0,
                prelude: None,
                ..
            }
        ),
        "{:?}",
        step.mode()
    );
    let made = runs.get();
    let positions = sized(100, 20, 8);
    let mut outs = Vec::new();
    for call in 1..=positions {
        let pos = call * N / positions;
        let out = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
        step.set(&len, pos as i32).unwrap();
        step.bind(&y, &out).unwrap();
        step.run().unwrap();
        outs.push((pos, out));
    }
    stream.synchronize().unwrap();
    for (pos, out) in outs {
        let want: Vec<f64> = (0..N)
            .map(|i| if i < pos { 2.0 * hx[i] as f64 } else { 0.0 })
            .collect();
        assert_close(&out.to_vec().unwrap(), &want, 1e-6);
    }
    assert_eq!(
        runs.get(),
        made,
        "the closure ran again after the step was made"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_that_synchronizes_through_its_scope_runs_eagerly_and_names_the_call() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let mut bufs = buffers(&ctx, 2);
    let input = fresh_input(&mut bufs[0]);
    let (p, x, y) = xy(&ctx, &bufs);
    let cfg = LaunchConfig::for_elements(N, 256);
    let mut step = Step::new(&stream, p, StepOptions::default(), |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        // SAFETY: add1 over N floats of two distinct N-float buffers.
        unsafe { s.launch(&f, &cfg, (&xb, &yb, N as i32))? };
        s.synchronize()
    })
    .unwrap();
    assert!(
        matches!(
            step.mode(),
            StepMode::Eager(EagerReason::Refused("StepScope::synchronize"))
        ),
        "{:?}",
        step.mode()
    );
    runs_add1(&mut step, &y, &input);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_whose_work_changes_between_runs_is_refused() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let bufs = buffers(&ctx, 2);
    let (p, x, y) = xy(&ctx, &bufs);
    let runs = Cell::new(0usize);
    let cfg = LaunchConfig::for_elements(N, 256);
    let made = Step::new(&stream, p, StepOptions::default(), |s| {
        runs.set(runs.get() + 1);
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        // One kernel in some runs, two in others.
        for _ in 0..1 + runs.get() % 2 {
            // SAFETY: add1 over N floats of two distinct N-float buffers.
            unsafe { s.launch(&f, &cfg, (&xb, &yb, N as i32))? };
        }
        Ok(())
    });
    let e = made.expect_err("a step whose node count changes was made");
    assert_eq!(e.misuse_kind(), Some(&Misuse::StepChanged), "{e}");
    // The context stays usable.
    stream.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_foreign_buffer_whose_guard_was_dropped_lives_until_the_last_replay_reading_it_finished() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let bufs = buffers(&ctx, 2);
    let (p, x, y) = xy(&ctx, &bufs);
    // Long enough that the replay still reads x when the host checks.
    let kernels = sized(400, 40, 10);
    let cfg = LaunchConfig::for_elements(N, 256);
    let mut step = Step::new(&stream, p, StepOptions::default(), |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        for _ in 0..kernels {
            // SAFETY: add1 over N floats of two distinct N-float buffers.
            unsafe { s.launch(&f, &cfg, (&xb, &yb, N as i32))? };
        }
        Ok(())
    })
    .unwrap();
    // Memory another library owns, its owner's handle the guard (here a buffer of ours).
    let mut owner = buffers(&ctx, 1).pop().unwrap();
    let input = fresh_input(&mut owner);
    let alive = std::sync::Arc::downgrade(owner.allocation());
    let ptr = owner.as_raw();
    // SAFETY: `owner` keeps N floats at `ptr` allocated while it lives; nothing else writes them.
    let foreign = unsafe { DeviceBuffer::<f32>::from_raw_guarded(&ctx, ptr, N, owner) };
    let out = buffers(&ctx, 1).pop().unwrap();
    step.bind(&x, &foreign).unwrap();
    step.bind(&y, &out).unwrap();
    drop(foreign);
    step.run().unwrap();
    assert!(
        alive.upgrade().is_some(),
        "the guard went while the replay may read its memory"
    );
    stream.synchronize().unwrap();
    let want: Vec<f64> = input.iter().map(|&v| v as f64 + 1.0).collect();
    assert_close(&out.to_vec().unwrap(), &want, 1e-6);
    // Bound elsewhere and trimmed once idle: the guard goes.
    step.bind(&x, &bufs[0]).unwrap();
    step.trim();
    ctx.synchronize().unwrap();
    assert!(alive.upgrade().is_none(), "the guard outlived every use");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_whose_capture_fails_runs_eagerly_with_the_error_and_the_context_stays_usable() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let mut bufs = buffers(&ctx, 2);
    let input = fresh_input(&mut bufs[0]);
    let cfg = LaunchConfig::for_elements(N, 256);
    let params = || xy(&ctx, &bufs);
    let body = |x: Buf<f32>, y: Buf<f32>| {
        let (f, cfg) = (&f, &cfg);
        move |s: &StepScope<'_>| {
            let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
            // SAFETY: add1 over N floats of two distinct N-float buffers.
            unsafe { s.launch(f, cfg, (&xb, &yb, N as i32))? };
            // Outside the scope: the scope cannot see it, the capture refuses it.
            s.stream().synchronize()
        }
    };
    let strict = StepOptions {
        fail_on_capture_error: true,
        ..StepOptions::default()
    };
    let (p, x, y) = params();
    let e = Step::new(&stream, p, strict, body(x, y))
        .expect_err("a capture that synchronizes was made");
    assert!(matches!(e, crate::Error::Capture { .. }), "{e}");
    let (p, x, y) = params();
    let mut step = Step::new(&stream, p, StepOptions::default(), body(x, y.clone())).unwrap();
    assert!(
        matches!(step.mode(), StepMode::Eager(EagerReason::CaptureFailed(_))),
        "{:?}",
        step.mode()
    );
    runs_add1(&mut step, &y, &input);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_on_a_default_stream_is_refused() {
    let ctx = capturing_ctx();
    let bufs = buffers(&ctx, 2);
    for raw in [0usize, 1, 2] {
        // SAFETY: the legacy and per-thread default streams are valid handles of any context;
        // graph-rt does not destroy a stream it wraps.
        let stream = unsafe { Stream::from_raw(&ctx, raw as crate::sys::CUstream) };
        let (p, _, _) = xy(&ctx, &bufs);
        let e = Step::new(&stream, p, StepOptions::default(), |_| Ok(())).unwrap_err();
        assert_eq!(e.misuse_kind(), Some(&Misuse::DefaultStream), "{e}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_that_copies_declared_buffers_is_pointed_at_the_buffers_bound_every_call() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let bufs = buffers(&ctx, 2);
    let (p, x, y) = xy(&ctx, &bufs);
    let mut scratch = buffers(&ctx, 1).pop().unwrap();
    let cfg = LaunchConfig::for_elements(N, 256);
    // x is copied into a buffer the step does not declare, add1 writes y from it: a copy node
    // reading x, a kernel writing y.
    let mut step = Step::new(&stream, p, StepOptions::default(), |s| {
        s.copy(&mut scratch, &s.buffer(&x)?)?;
        let yb = s.buffer(&y)?;
        // SAFETY: add1 over N floats of two distinct N-float buffers.
        unsafe { s.launch(&f, &cfg, (&scratch, &yb, N as i32)) }
    })
    .unwrap();
    match step.mode() {
        StepMode::Graph { prelude, .. } => assert!(
            matches!(prelude, Some(PreludeMode::Host { .. })),
            "a step with copies of declared buffers rewrites its kernels from the host: {prelude:?}"
        ),
        mode => panic!("{mode:?}"),
    }
    for _ in 0..sized(50, 10, 4) {
        let mut b = buffers(&ctx, 1);
        let input = fresh_input(&mut b[0]);
        step.bind(&x, &b[0]).unwrap();
        runs_add1(&mut step, &y, &input);
    }
    assert_eq!(step.validate().unwrap(), Validated::Same);
    // A copy past the declared length: x declared N/2 floats, the closure copying N from it
    // (a later binding need only be N/2 long).
    let mut p = StepParams::new(&ctx, 4).unwrap();
    let short = p.buffer::<f32>(N / 2).unwrap();
    p.bind(&short, &bufs[0]).unwrap();
    let mut step = Step::new(&stream, p, StepOptions::default(), |s| {
        let b = s.buffer(&short)?;
        // SAFETY: the buffer bound is N floats long; the second capture's stand-in is N/2, but
        // that capture is never launched.
        let longer =
            unsafe { DeviceBuffer::<f32>::from_raw_guarded(&ctx, b.as_raw(), N, b.alias()) };
        s.copy(&mut scratch, &longer)
    })
    .unwrap();
    match step.mode() {
        StepMode::Eager(crate::step::EagerReason::CaptureFailed(e)) => {
            assert_eq!(e.misuse_kind(), Some(&Misuse::ParamCopied), "{e}");
        }
        mode => panic!("a copy past a declared length runs as {mode:?}"),
    }
    step.run().unwrap();
    stream.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_step_on_a_raw_stream_another_library_owns() {
    let ctx = capturing_ctx();
    ctx.bind().unwrap();
    // Another library's stream: made by the driver directly, destroyed by its owner (here).
    let mut raw: crate::sys::CUstream = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    let made = unsafe { crate::sys::cuStreamCreate(&mut raw, 1) };
    assert_eq!(made, Ok(crate::sys::CUresult::CUDA_SUCCESS));
    {
        // SAFETY: a live stream of this context, destroyed below, after every use.
        let stream = unsafe { Stream::from_raw(&ctx, raw) };
        let f = add1(&ctx);
        let mut bufs = buffers(&ctx, 2);
        let input = fresh_input(&mut bufs[0]);
        let (p, x, y) = xy(&ctx, &bufs);
        let cfg = LaunchConfig::for_elements(N, 256);
        let mut step = Step::new(&stream, p, StepOptions::default(), |s| {
            let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
            // SAFETY: add1 over N floats of two distinct N-float buffers.
            unsafe { s.launch(&f, &cfg, (&xb, &yb, N as i32)) }
        })
        .unwrap();
        assert!(
            matches!(step.mode(), StepMode::Graph { .. }),
            "{:?}",
            step.mode()
        );
        for _ in 0..sized(10, 4, 2) {
            runs_add1(&mut step, &y, &input);
        }
        stream.synchronize().unwrap();
    }
    ctx.synchronize().unwrap();
    // SAFETY: nothing of graph-rt uses the stream any more (the step and its exec are gone and
    // the context is idle).
    let destroyed = unsafe { crate::sys::cuStreamDestroy(raw) };
    assert_eq!(destroyed, Ok(crate::sys::CUresult::CUDA_SUCCESS));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_recapturable_step_captures_again_when_its_work_changes() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let mut bufs = buffers(&ctx, 2);
    let input = fresh_input(&mut bufs[0]);
    let (p, x, y) = xy(&ctx, &bufs);
    let twice = Cell::new(false);
    let cfg = LaunchConfig::for_elements(N, 256);
    let options = StepOptions {
        recapturable: true,
        ..StepOptions::default()
    };
    let mut step = Step::new(&stream, p, options, |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        // SAFETY: add1 over N floats of two distinct N-float buffers.
        unsafe { s.launch(&f, &cfg, (&xb, &yb, N as i32))? };
        if twice.get() {
            // SAFETY: add1 in place over N floats (elementwise: each thread reads and writes
            // its own element).
            unsafe { s.launch(&f, &cfg, (&yb, &yb, N as i32))? };
        }
        Ok(())
    })
    .unwrap();
    runs_add1(&mut step, &y, &input);
    // The closure's work changes: the step does not see it until asked.
    twice.set(true);
    let out = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    step.bind(&y, &out).unwrap();
    let r = step.recapture().unwrap();
    assert_eq!(r.kernel_nodes.1, r.kernel_nodes.0 + 1, "{r:?}");
    step.run().unwrap();
    let want: Vec<f64> = input.iter().map(|&v| v as f64 + 2.0).collect();
    assert_close(&out.to_vec().unwrap(), &want, 1e-6);
    // Without the option, asking is a typed error.
    let (p, x2, y2) = xy(&ctx, &bufs);
    let mut plain = Step::new(&stream, p, StepOptions::default(), |s| {
        let (xb, yb) = (s.buffer(&x2)?, s.buffer(&y2)?);
        // SAFETY: as above.
        unsafe { s.launch(&f, &cfg, (&xb, &yb, N as i32)) }
    })
    .unwrap();
    let e = plain
        .recapture()
        .expect_err("recaptured without the option");
    assert_eq!(e.misuse_kind(), Some(&Misuse::NotRecapturable), "{e}");
}

/// `StepOptions::capture_mode`: a step captured thread-locally leaves another thread free to
/// allocate and copy while it captures (ranks of one process build their steps at once); the
/// same step captured globally (the default) refuses that thread's allocation.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_thread_local_step_capture_lets_other_threads_allocate_meanwhile() {
    use crate::graph::CaptureMode;
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::time::{Duration, Instant};
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let own = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    for mode in [CaptureMode::ThreadLocal, CaptureMode::Global] {
        let mut bufs = buffers(&ctx, 2);
        let input = fresh_input(&mut bufs[0]);
        let (p, x, y) = xy(&ctx, &bufs);
        let cfg = LaunchConfig::for_elements(N, 256);
        // 0: not capturing yet; 1: the first capture runs; 2: the other thread allocated;
        // 3: its allocation was refused.
        let state = AtomicU8::new(0);
        let step = std::thread::scope(|t| {
            let other = t.spawn(|| {
                while state.load(Ordering::Acquire) == 0 {
                    std::thread::yield_now();
                }
                // A plain allocation, then copies in the order of this thread's own stream:
                // from_host and to_vec wait for the whole context (cuCtxSynchronize), which no
                // capture mode allows while any stream of the context captures.
                let r = DeviceBuffer::<f32>::alloc(&ctx, 1024);
                state.store(if r.is_ok() { 2 } else { 3 }, Ordering::Release);
                // The buffer is returned and freed after the capture: cuMemFree waits for the
                // device, which the capture would not allow either.
                r.and_then(|mut b| {
                    b.write_on(&own, &[7.0f32; 1024])?;
                    let v = b.read_on(&own)?;
                    Ok((b, v))
                })
            });
            let options = StepOptions {
                capture_mode: mode,
                ..StepOptions::default()
            };
            let step = Step::new(&stream, p, options, |s| {
                let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
                // SAFETY: add1 over N floats of two distinct N-float buffers.
                unsafe { s.launch(&f, &cfg, (&xb, &yb, N as i32))? };
                // Step::new runs the closure eagerly before it captures: hold the other
                // thread only while this run is captured.
                if s.is_capturing() && state.load(Ordering::Acquire) == 0 {
                    state.store(1, Ordering::Release);
                    let start = Instant::now();
                    while state.load(Ordering::Acquire) == 1
                        && start.elapsed() < Duration::from_secs(10)
                    {
                        std::thread::yield_now();
                    }
                }
                Ok(())
            });
            let other = other.join().unwrap();
            match mode {
                CaptureMode::ThreadLocal => {
                    let (_b, v) = other.unwrap_or_else(|e| panic!("{e}"));
                    assert_eq!(v, vec![7.0f32; 1024]);
                }
                _ => assert!(
                    matches!(other, Err(ref e) if e.call() == Some("cuMemAlloc")),
                    "a global capture let another thread allocate, or refused it otherwise: {:?}",
                    other.err()
                ),
            }
            step
        });
        let mut step = step.unwrap();
        if mode == CaptureMode::ThreadLocal {
            assert!(
                matches!(step.mode(), StepMode::Graph { .. }),
                "{:?}",
                step.mode()
            );
        }
        runs_add1(&mut step, &y, &input);
    }
}
