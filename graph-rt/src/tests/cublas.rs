//! cuBLAS handles on real streams: dropped inside a capture (destroyed once it has ended), and
//! GEMMs on buffers allocated in stream order on another stream (ordered by graph-rt, eagerly
//! and in a recording).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::chain::{add1, N};
use super::{assert_close, capturing_ctx, ctx, random_f32, sized};
use crate::cublas::DESTROYED;
use crate::cublas::{Cublas, Op as CublasOp};
use crate::step::{Step, StepMode, StepOptions, StepParams, Validation};
use crate::{
    CaptureMode, Context, DeviceBuffer, Function, LaunchConfig, Misuse, NodeKind, Result, Stream,
};

/// The GEMMs checked: `D × D × D`, so that an operand holds `N` floats (one `add1` launch).
const D: usize = 64;
/// The GEMMs that keep a stream busy for a few milliseconds each: `big() × big() × big()` in
/// f32: 4096, or less under a sanitizer (which tracks every access of cuBLAS's kernels, the
/// shared-memory ones most under racecheck: 14 GEMMs of 4096 ran past 180 s there). Launches
/// are nearly synchronous there anyway; the ordering is checked all the same.
fn big() -> usize {
    sized(4096, 512, 256)
}

/// C = A · B, `D × D`, column-major.
fn gemm(
    blas: &Cublas,
    a: &DeviceBuffer<f32>,
    b: &DeviceBuffer<f32>,
    c: &mut DeviceBuffer<f32>,
) -> Result<()> {
    blas.sgemm(
        CublasOp::N,
        CublasOp::N,
        D,
        D,
        D,
        1.0,
        a,
        D,
        b,
        D,
        0.0,
        c,
        D,
    )
}

/// Queues `count` large GEMMs (`out = x · x`) on the handle's stream.
fn busy(blas: &Cublas, x: &DeviceBuffer<f32>, out: &mut DeviceBuffer<f32>, count: usize) {
    let big = big();
    for _ in 0..count {
        blas.sgemm(
            CublasOp::N,
            CublasOp::N,
            big,
            big,
            big,
            1.0,
            x,
            big,
            x,
            big,
            0.0,
            out,
            big,
        )
        .unwrap();
    }
}

/// What `gemm` of an all-ones A and `b` gives: every column of C holds the sum of b's column.
fn ones_times(b: &[f32]) -> Vec<f64> {
    (0..D * D)
        .map(|e| {
            let j = e / D;
            (0..D).map(|l| b[l + j * D] as f64).sum()
        })
        .collect()
}

/// Writes `from + 1` into `to` on `stream` (`add1` over `N` floats).
fn add1_on(stream: &Stream, f: &Function, from: &DeviceBuffer<f32>, to: &mut DeviceBuffer<f32>) {
    let cfg = LaunchConfig::for_elements(N, 256);
    // SAFETY: add1 over N floats of two distinct N-float buffers, alive until the test has
    // synchronized (stream-ordered ones are freed on their stream, after the launch).
    unsafe { stream.launch(f, &cfg, (from, to, N as i32)).unwrap() };
}

/// Waits (up to 10 s) until nothing stays parked on `ctx`: what was parked while its stream
/// captured is fenced by the release thread once the capture has ended.
fn wait_released(ctx: &Context) {
    let start = Instant::now();
    while ctx.poll().unwrap() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "parked batches were never released"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    ctx.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn a_handle_dropped_inside_a_capture_of_its_stream_is_destroyed_after_it() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let kept = Cublas::new(&stream).unwrap();
    let dropped = Cublas::new(&stream).unwrap();
    let (x_host, b_host) = (random_f32(N), random_f32(N));
    let x = DeviceBuffer::from_host(&ctx, &x_host).unwrap();
    let ones = DeviceBuffer::from_host(&ctx, &vec![1.0f32; N]).unwrap();
    let b = DeviceBuffer::from_host(&ctx, &b_host).unwrap();
    let (mut y, mut c) = (
        DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
        DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
    );
    // Warm-up outside the capture, on both handles.
    gemm(&kept, &ones, &b, &mut c).unwrap();
    gemm(&dropped, &ones, &b, &mut c).unwrap();
    stream.synchronize().unwrap();
    let destroyed = DESTROYED.load(Ordering::SeqCst);
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            let cfg = LaunchConfig::for_elements(N, 256);
            // SAFETY: add1 over N floats of two distinct N-float buffers the test keeps.
            unsafe { s.launch(&f, &cfg, (&x, &mut y, N as i32))? };
            // cublasDestroy_v2 here would invalidate the capture: the drop parks the handle.
            drop(dropped);
            kept.record(s, |blas| gemm(blas, &ones, &b, &mut c))
        })
        .unwrap();
    assert_eq!(
        DESTROYED.load(Ordering::SeqCst),
        destroyed,
        "destroyed during the capture"
    );
    y.fill_u32(f32::NAN.to_bits()).unwrap();
    c.fill_u32(f32::NAN.to_bits()).unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    let want: Vec<f64> = x_host.iter().map(|&v| v as f64 + 1.0).collect();
    assert_close(&y.to_vec().unwrap(), &want, 1e-7);
    assert_close(&c.to_vec().unwrap(), &ones_times(&b_host), 1e-5);
    // Destroyed once the capture had ended, without error.
    wait_released(&ctx);
    assert_eq!(DESTROYED.load(Ordering::SeqCst), destroyed + 1);
    assert!(ctx.take_deferred_errors().is_empty());
    // Dropped outside a capture: parked behind an event, destroyed by the next synchronize;
    // the exec still replays (the graph keeps the workspace).
    drop(kept);
    c.fill_u32(f32::NAN.to_bits()).unwrap();
    exec.launch(&stream).unwrap();
    ctx.synchronize().unwrap();
    wait_released(&ctx);
    assert_eq!(DESTROYED.load(Ordering::SeqCst), destroyed + 2);
    // The graph kept the workspace: the replay after the handle's destroy is right too.
    assert_close(&c.to_vec().unwrap(), &ones_times(&b_host), 1e-5);
    assert!(ctx.take_deferred_errors().is_empty());
}

/// Two streams, A and B, a handle on each, and the buffers of the checks (allocated first:
/// synchronous allocations and copies wait for the whole context).
struct TwoStreams {
    sa: Stream,
    sb: Stream,
    on_a: Cublas,
    on_b: Cublas,
    f: Function,
    zeros: DeviceBuffer<f32>,
    b_host: Vec<f32>,
    b: DeviceBuffer<f32>,
    c: DeviceBuffer<f32>,
    thousand: DeviceBuffer<f32>,
    x: DeviceBuffer<f32>,
    out: [DeviceBuffer<f32>; 2],
    // Last: dropped after the handles (which park on it), releasing what they parked while the
    // test still holds its share of the GPU.
    ctx: super::TestContext,
}

fn two_streams(ctx: super::TestContext) -> TwoStreams {
    let (sa, sb) = (Stream::new(&ctx).unwrap(), Stream::new(&ctx).unwrap());
    let (on_a, on_b) = (Cublas::new(&sa).unwrap(), Cublas::new(&sb).unwrap());
    let b_host = random_f32(N);
    let square = || DeviceBuffer::<f32>::zeroed(&ctx, big() * big()).unwrap();
    let mut t = TwoStreams {
        f: add1(&ctx),
        zeros: DeviceBuffer::zeroed(&ctx, N).unwrap(),
        b: DeviceBuffer::from_host(&ctx, &b_host).unwrap(),
        c: DeviceBuffer::zeroed(&ctx, N).unwrap(),
        thousand: DeviceBuffer::from_host(&ctx, &vec![1000.0f32; N]).unwrap(),
        x: square(),
        out: [square(), square()],
        b_host,
        ctx,
        sa,
        sb,
        on_a,
        on_b,
    };
    // Warm-up: cuBLAS picks and loads its kernels.
    busy(&t.on_a, &t.x, &mut t.out[0], 1);
    busy(&t.on_b, &t.x, &mut t.out[1], 1);
    gemm(&t.on_b, &t.zeros, &t.b, &mut t.c).unwrap();
    t.ctx.synchronize().unwrap();
    t.c.fill_u32(f32::NAN.to_bits()).unwrap();
    t
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn an_eager_gemm_orders_a_buffer_allocated_on_another_stream() {
    let mut t = two_streams(ctx());
    // Before: A is busy, then allocates and writes the GEMM's A operand (ones); the GEMM on B
    // must wait for that write.
    busy(&t.on_a, &t.x, &mut t.out[0], 6);
    let mut a = DeviceBuffer::<f32>::alloc_async(&t.sa, N).unwrap();
    add1_on(&t.sa, &t.f, &t.zeros, &mut a);
    gemm(&t.on_b, &a, &t.b, &mut t.c).unwrap();
    drop(a);
    t.sb.synchronize().unwrap();
    assert_close(&t.c.to_vec().unwrap(), &ones_times(&t.b_host), 1e-5);
    t.ctx.synchronize().unwrap();
    t.c.fill_u32(f32::NAN.to_bits()).unwrap();

    // After: B is busy, so the GEMM runs late; the operand, dropped at once, must not go back
    // to A's pool before (A would hand its memory to the next allocation there).
    let mut a = DeviceBuffer::<f32>::alloc_async(&t.sa, N).unwrap();
    add1_on(&t.sa, &t.f, &t.zeros, &mut a);
    busy(&t.on_b, &t.x, &mut t.out[1], 6);
    gemm(&t.on_b, &a, &t.b, &mut t.c).unwrap();
    let freed = a.as_raw();
    drop(a);
    let mut junk = DeviceBuffer::<f32>::alloc_async(&t.sa, N).unwrap();
    assert_ne!(
        junk.as_raw(),
        freed,
        "the operand's memory was reused before the GEMM ran"
    );
    add1_on(&t.sa, &t.f, &t.thousand, &mut junk);
    drop(junk);
    t.sb.synchronize().unwrap();
    assert_close(&t.c.to_vec().unwrap(), &ones_times(&t.b_host), 1e-5);
    t.ctx.synchronize().unwrap();
    wait_released(&t.ctx);
    assert!(t.ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn a_recorded_gemm_orders_a_buffer_allocated_on_another_stream() {
    let mut t = two_streams(capturing_ctx());
    // A is busy, then allocates and writes the operand; the capture of B records the GEMM and
    // an event-wait node for A.
    busy(&t.on_a, &t.x, &mut t.out[0], 6);
    let mut a = DeviceBuffer::<f32>::alloc_async(&t.sa, N).unwrap();
    add1_on(&t.sa, &t.f, &t.zeros, &mut a);
    let (blas, b, c) = (&t.on_b, &t.b, &mut t.c);
    let graph =
        t.sb.capture(CaptureMode::Global, |s| {
            blas.record(s, |blas| gemm(blas, &a, b, c))
        })
        .unwrap();
    let kinds: Vec<NodeKind> = graph
        .nodes()
        .unwrap()
        .into_iter()
        .map(|n| graph.node_kind(n).unwrap())
        .collect();
    assert!(kinds.contains(&NodeKind::WaitEvent), "{kinds:?}");
    // The graph keeps the operand alive.
    drop(a);
    let exec = graph.instantiate().unwrap();
    // Replayed while A may still be busy: the replay waits for A's write.
    exec.launch(&t.sb).unwrap();
    t.sb.synchronize().unwrap();
    assert_close(&t.c.to_vec().unwrap(), &ones_times(&t.b_host), 1e-5);

    // An operand whose stream captures now cannot be ordered: refused, nothing queued.
    let a = DeviceBuffer::<f32>::alloc_async(&t.sa, N).unwrap();
    let mut y = DeviceBuffer::<f32>::zeroed(&t.ctx, N).unwrap();
    let (f, zeros, blas, b, c) = (&t.f, &t.zeros, &t.on_b, &t.b, &mut t.c);
    let mut err = None;
    let on_a =
        t.sa.capture(CaptureMode::Global, |s| {
            let cfg = LaunchConfig::for_elements(N, 256);
            // SAFETY: add1 over N floats of two distinct N-float buffers the test keeps.
            unsafe { s.launch(f, &cfg, (zeros, &mut y, N as i32))? };
            err = gemm(blas, &a, b, c).err();
            Ok(())
        })
        .unwrap();
    let err = err.expect("the GEMM was refused");
    assert_eq!(err.misuse_kind(), Some(&Misuse::UnorderedBuffer), "{err}");
    drop((on_a, a, exec, graph));
    t.ctx.synchronize().unwrap();
    wait_released(&t.ctx);
    assert!(t.ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn a_step_and_a_binding_set_order_a_buffer_allocated_on_another_stream() {
    let mut t = two_streams(capturing_ctx());
    // A step on B: y = x + 1, both declared (cuBLAS only keeps A busy).
    let mut p = StepParams::new(&t.ctx, 4).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    let outs: Vec<DeviceBuffer<f32>> = (0..3)
        .map(|_| DeviceBuffer::zeroed(&t.ctx, N).unwrap())
        .collect();
    p.bind(&x, &t.zeros).unwrap();
    p.bind(&y, &outs[0]).unwrap();
    let (f, cfg) = (&t.f, LaunchConfig::for_elements(N, 256));
    let options = StepOptions {
        validation: Validation::off(),
        ..StepOptions::default()
    };
    let mut step = Step::new(&t.sb, p, options, |s| {
        let (xb, yb) = (s.buffer(&x)?, s.buffer(&y)?);
        // SAFETY: add1 over N floats of two distinct N-float buffers.
        unsafe { s.launch(f, &cfg, (&xb, &yb, N as i32)) }
    })
    .unwrap();
    assert!(
        matches!(step.mode(), StepMode::Graph { .. }),
        "{:?}",
        step.mode()
    );
    t.ctx.synchronize().unwrap();
    // A is busy, then allocates x and writes ones into it; the replay on B must wait for that.
    busy(&t.on_a, &t.x, &mut t.out[0], 6);
    let mut a = DeviceBuffer::<f32>::alloc_async(&t.sa, N).unwrap();
    add1_on(&t.sa, &t.f, &t.zeros, &mut a);
    step.bind(&x, &a).unwrap();
    step.bind(&y, &outs[1]).unwrap();
    step.run().unwrap();
    drop(a);
    t.sb.synchronize().unwrap();
    assert!(
        outs[1].to_vec().unwrap().iter().all(|&v| v == 2.0),
        "the replay read x before A wrote it"
    );

    // The same through a binding set of the step's table.
    t.ctx.synchronize().unwrap();
    busy(&t.on_a, &t.x, &mut t.out[0], 6);
    let mut a = DeviceBuffer::<f32>::alloc_async(&t.sa, N).unwrap();
    add1_on(&t.sa, &t.f, &t.zeros, &mut a);
    let mut table = crate::ArgTable::new(&t.ctx, crate::TableOptions::default()).unwrap();
    let slot = table.ptr_slot::<f32>().unwrap();
    let table_form = super::function(&t.ctx, &graph_rt_kernels::CHAIN_TABLE, "add1");
    let out_slot = table.ptr_slot::<f32>().unwrap();
    let set = {
        let mut b = table.binding_set();
        b.bind(&slot, &a).unwrap();
        b.bind(&out_slot, &outs[2]).unwrap();
        b.build().unwrap()
    };
    drop(a);
    table.bind_set(&set).unwrap();
    table.refresh(&t.sb).unwrap();
    // SAFETY: the table-form add1 over N floats through slots bound to distinct N-float buffers.
    unsafe {
        t.sb.launch(
            &table_form,
            &cfg.without_programmatic(),
            (&slot, &out_slot, N as i32),
        )
        .unwrap()
    };
    t.sb.synchronize().unwrap();
    assert!(
        outs[2].to_vec().unwrap().iter().all(|&v| v == 2.0),
        "the launch read the slot's buffer before A wrote it"
    );

    // A buffer whose stream captures at the binding cannot be ordered: refused, the binding
    // unchanged.
    let a = DeviceBuffer::<f32>::alloc_async(&t.sa, N).unwrap();
    let mut err = None;
    let (zeros, y_out) = (&t.zeros, &outs[0]);
    let on_a =
        t.sa.capture(CaptureMode::Global, |s| {
            // SAFETY: add1 over N floats of two distinct N-float buffers the test keeps.
            unsafe { s.launch(f, &cfg, (zeros, y_out, N as i32))? };
            err = step.bind(&x, &a).err();
            Ok(())
        })
        .unwrap();
    let err = err.expect("the binding was refused");
    assert_eq!(err.misuse_kind(), Some(&Misuse::UnorderedBuffer), "{err}");
    drop((on_a, a, set, table, step));
    t.ctx.synchronize().unwrap();
    wait_released(&t.ctx);
    assert!(t.ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn bf16_gemms_with_an_f32_result_are_the_bf16_products_unrounded() -> Result<()> {
    use half::bf16;
    let ctx = ctx();
    let stream = Stream::new(&ctx)?;
    let blas = Cublas::new(&stream)?;
    // y (m × n) = Wᵀ x with W k × m (row-major m × k, as a model keeps it), x k × n.
    let (m, n, k) = (96, 3, 80);
    let w: Vec<bf16> = (0..m * k)
        .map(|i| bf16::from_f32(((i * 37 % 101) as f32 - 50.0) / 64.0))
        .collect();
    let x: Vec<bf16> = (0..k * n)
        .map(|i| bf16::from_f32(((i * 13 % 29) as f32 - 14.0) / 16.0))
        .collect();
    let (wd, xd) = (
        DeviceBuffer::from_host(&ctx, &w)?,
        DeviceBuffer::from_host(&ctx, &x)?,
    );
    let mut y32 = DeviceBuffer::<f32>::zeroed(&ctx, m * n)?;
    let mut y16 = DeviceBuffer::<bf16>::zeroed(&ctx, m * n)?;
    blas.gemm_bf16_f32(
        CublasOp::T,
        CublasOp::N,
        m,
        n,
        k,
        1.0,
        &wd,
        k,
        &xd,
        k,
        0.0,
        &mut y32,
        m,
    )?;
    blas.gemm_bf16(
        CublasOp::T,
        CublasOp::N,
        m,
        n,
        k,
        1.0,
        &wd,
        k,
        &xd,
        k,
        0.0,
        &mut y16,
        m,
    )?;
    stream.synchronize()?;
    let (got32, got16) = (y32.to_vec()?, y16.to_vec()?);
    let mut unrounded = 0;
    for j in 0..n {
        for i in 0..m {
            // Every product and partial sum is exact in f32 here (small multiples of 2⁻¹⁰).
            let want: f64 = (0..k)
                .map(|p| w[i * k + p].to_f64() * x[j * k + p].to_f64())
                .sum();
            let (a, b) = (got32[j * m + i], got16[j * m + i]);
            assert_eq!(a as f64, want, "({i}, {j})");
            assert_eq!(
                b,
                bf16::from_f32(a),
                "({i}, {j}): the bf16 result is the f32 one rounded"
            );
            unrounded += usize::from(bf16::from_f32(a).to_f32() != a);
        }
    }
    assert!(unrounded > 0, "some results need more than bf16's 8 bits");
    // C of the wrong length is refused before anything is queued.
    let mut short = DeviceBuffer::<f32>::zeroed(&ctx, m * n - 1)?;
    let e = blas
        .gemm_bf16_f32(
            CublasOp::T,
            CublasOp::N,
            m,
            n,
            k,
            1.0,
            &wd,
            k,
            &xd,
            k,
            0.0,
            &mut short,
            m,
        )
        .unwrap_err();
    assert_eq!(
        e.misuse_kind(),
        Some(&Misuse::TooShort {
            len: m * n - 1,
            min: m * n
        }),
        "{e}"
    );
    assert!(
        matches!(
            e,
            crate::Error::Misuse {
                call: "cublasGemmEx",
                ..
            }
        ),
        "{e}"
    );
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn a_panic_inside_record_leaves_gemms_on_a_capturing_stream_refused() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let blas = Cublas::new(&stream).unwrap();
    let b_host = random_f32(N);
    let ones = DeviceBuffer::from_host(&ctx, &vec![1.0f32; N]).unwrap();
    let b = DeviceBuffer::from_host(&ctx, &b_host).unwrap();
    let mut c = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    gemm(&blas, &ones, &b, &mut c).unwrap();
    stream.synchronize().unwrap();
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                blas.record(s, |_| -> Result<()> { panic!("the GEMMs' closure panics") })
            }));
            assert!(panicked.is_err());
            // Outside `record` again: refused, as before the panic (its graph would keep
            // nothing alive).
            let e = gemm(&blas, &ones, &b, &mut c).unwrap_err();
            assert_eq!(e.misuse_kind(), Some(&Misuse::Capturing), "{e}");
            blas.record(s, |blas| gemm(blas, &ones, &b, &mut c))
        })
        .unwrap();
    c.fill_u32(f32::NAN.to_bits()).unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_close(&c.to_vec().unwrap(), &ones_times(&b_host), 1e-5);
    // The next eager GEMM works, and a GEMM on a capturing stream is still refused.
    c.fill_u32(f32::NAN.to_bits()).unwrap();
    gemm(&blas, &ones, &b, &mut c).unwrap();
    stream.synchronize().unwrap();
    assert_close(&c.to_vec().unwrap(), &ones_times(&b_host), 1e-5);
    let r = stream.capture(CaptureMode::Global, |_| gemm(&blas, &ones, &b, &mut c));
    assert_eq!(r.unwrap_err().misuse_kind(), Some(&Misuse::Capturing));
    drop((exec, graph));
    ctx.synchronize().unwrap();
    assert!(ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU and cuBLAS (GRAPH_RT_CUBLAS or libcublas.so.13/.12 on the loader path)"]
fn a_panicking_step_closure_leaves_gemms_on_a_capturing_stream_refused() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let blas = Cublas::new(&stream).unwrap();
    let b_host = random_f32(N);
    let ones = DeviceBuffer::from_host(&ctx, &vec![1.0f32; N]).unwrap();
    let b = DeviceBuffer::from_host(&ctx, &b_host).unwrap();
    let mut c = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    // The step's closure panics inside `StepScope::cublas` while its run is captured (its
    // first, eager run does not).
    let captured = std::cell::Cell::new(false);
    let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::step::Step::new(
            &stream,
            crate::step::StepParams::new(&ctx, 1).unwrap(),
            crate::step::StepOptions::default(),
            |s| {
                s.cublas(&blas, |blas| {
                    if stream.capture_status()? != crate::CaptureStatus::None {
                        captured.set(true);
                        panic!("the step's GEMMs panic while captured");
                    }
                    gemm(blas, &ones, &b, &mut c)
                })
            },
        )
        .map(drop)
    }));
    assert!(step.is_err(), "the step's capture did not panic");
    assert!(captured.get(), "the panic was not inside the capture");
    assert_eq!(stream.capture_status().unwrap(), crate::CaptureStatus::None);
    let r = stream.capture(CaptureMode::Global, |_| gemm(&blas, &ones, &b, &mut c));
    assert_eq!(r.unwrap_err().misuse_kind(), Some(&Misuse::Capturing));
    c.fill_u32(f32::NAN.to_bits()).unwrap();
    gemm(&blas, &ones, &b, &mut c).unwrap();
    stream.synchronize().unwrap();
    assert_close(&c.to_vec().unwrap(), &ones_times(&b_host), 1e-5);
}
