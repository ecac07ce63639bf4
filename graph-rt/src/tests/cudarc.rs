//! cudarc interop with cudarc's defaults (event tracking on, two streams in the context).

use cudarc::driver::{CudaContext, PushKernelArg};

use super::{assert_close, function, random_f32};
use crate::step::{Step, StepMode, StepOptions, StepParams};
use crate::{CaptureMode, Context, DeviceBuffer, Error, LaunchConfig, Stream};

const N: usize = 4096;

/// `add1(x, y, n)` of `kernels::CHAIN`, loaded through cudarc.
pub(super) fn add1_of(cctx: &std::sync::Arc<CudaContext>) -> cudarc::driver::CudaFunction {
    let ptx = cudarc::nvrtc::Ptx::from_src(graph_rt_kernels::CHAIN.ptx);
    cctx.load_module(ptx)
        .unwrap()
        .load_function("add1")
        .unwrap()
}

/// cudarc's launch configuration over `N` elements.
pub(super) fn cudarc_config() -> cudarc::driver::LaunchConfig {
    cudarc::driver::LaunchConfig {
        grid_dim: (N as u32 / 256, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cudarc_buffers_moved_into_graph_rt_capture_on_a_cudarc_stream() {
    let _capturing = super::exclusive();
    let cctx = CudaContext::new(0).unwrap();
    let (s1, s2) = (cctx.new_stream().unwrap(), cctx.new_stream().unwrap());
    assert!(
        cctx.is_managing_stream_synchronization(),
        "cudarc's defaults track events with two streams"
    );
    let h = random_f32(N);
    let x = s2.clone_htod(&h).unwrap();
    let mut y = s2.alloc_zeros::<f32>(N).unwrap();
    let n = N as i32;
    let cfg = LaunchConfig::for_elements(N, 256);

    // cudarc's own launches on its slices, captured on its stream made with the opt-in:
    // cudarc's event tracking (whose waits would cross the capture's boundary:
    // CUDA_ERROR_STREAM_CAPTURE_ISOLATION) is off for the capture and back on after it, whatever
    // way the capture ends.
    // SAFETY: the slices captured below are kept alive and unwritten by cudarc's other stream
    // while the graph replays (the test synchronizes before touching them).
    let stream = unsafe { Stream::from_cudarc_pausing_tracking(&s1) }.unwrap();
    let cu_f = add1_of(&cctx);
    let cu_cfg = cudarc_config();
    let launch = |x: &cudarc::driver::CudaSlice<f32>, y: &mut cudarc::driver::CudaSlice<f32>| {
        let mut b = s1.launch_builder(&cu_f);
        b.arg(x).arg(y).arg(&n);
        // SAFETY: add1 over N elements of N-element slices.
        unsafe { b.launch(cu_cfg) }
            .map(drop)
            .map_err(|e| Error::InvalidArgument {
                call: "cudarc launch",
                reason: format!("{e:?}"),
            })
    };
    let graph = stream
        .capture(CaptureMode::Global, |_| launch(&x, &mut y))
        .unwrap();
    assert!(
        cctx.is_event_tracking(),
        "tracking restored after the capture"
    );
    let failed = stream.capture(CaptureMode::Global, |_| {
        launch(&x, &mut y)?;
        Err(Error::InvalidArgument {
            call: "test",
            reason: "a capture that fails".into(),
        })
    });
    assert!(failed.is_err());
    assert!(
        cctx.is_event_tracking(),
        "tracking restored after a failed capture"
    );
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = stream.capture(CaptureMode::Global, |_| -> crate::Result<()> {
            panic!("a capture that panics (on purpose)")
        });
    }));
    assert!(panicked.is_err());
    assert!(
        cctx.is_event_tracking(),
        "tracking restored after a capture that panicked"
    );
    // Replays read and write the slices, which the test keeps alive (the graph cannot).
    let exec = graph.instantiate().unwrap();
    for _ in 0..3 {
        exec.launch(&stream).unwrap();
    }
    stream.synchronize().unwrap();
    let want: Vec<f64> = h.iter().map(|&v| v as f64 + 1.0).collect();
    assert_close(&s1.clone_dtoh(&y).unwrap(), &want, 1e-6);
    drop(exec);

    // What to do: move the slices into graph-rt (no copy), then capture on the same stream.
    let ctx = Context::from_cudarc(&cctx).unwrap();
    let f = function(&ctx, &graph_rt_kernels::CHAIN, "add1");
    let x = DeviceBuffer::from_cudarc(&ctx, x).unwrap();
    let y = DeviceBuffer::from_cudarc(&ctx, y).unwrap();
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            // SAFETY: N-element buffers.
            unsafe { s.launch(&f, &cfg, (&x, &y, n)).map(drop) }
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    drop(x);
    for _ in 0..3 {
        exec.launch(&stream).unwrap();
    }
    stream.synchronize().unwrap();
    let want: Vec<f64> = h.iter().map(|&v| v as f64 + 1.0).collect();
    assert_close(&y.to_vec().unwrap(), &want, 1e-6);
    drop(exec);
    assert!(ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cudarc_launches_on_a_cudarc_stream_as_a_step_rebound_to_fresh_cudarc_slices() {
    let _capturing = super::exclusive();
    let cctx = CudaContext::new(0).unwrap();
    let (s1, s2) = (cctx.new_stream().unwrap(), cctx.new_stream().unwrap());
    assert!(cctx.is_managing_stream_synchronization());
    // SAFETY: the step keeps the slices it is bound to (moved into graph-rt) alive.
    let stream = unsafe { Stream::from_cudarc_pausing_tracking(&s1) }.unwrap();
    let ctx = stream.context().clone();
    let cu_f = add1_of(&cctx);
    let cu_cfg = cudarc_config();
    let n = N as i32;
    // Fresh cudarc slices, written on cudarc's other stream (tracked), moved into graph-rt.
    let fresh = || {
        let h = random_f32(N);
        let x = DeviceBuffer::from_cudarc(&ctx, s2.clone_htod(&h).unwrap()).unwrap();
        let y = DeviceBuffer::from_cudarc(&ctx, s2.alloc_zeros::<f32>(N).unwrap()).unwrap();
        (h, x, y)
    };
    let mut p = StepParams::new(&ctx, 4).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    let (_, x0, y0) = fresh();
    p.bind(&x, &x0).unwrap();
    p.bind(&y, &y0).unwrap();
    // The framework's own launch, through cudarc's builder on its stream: graph-rt finds the
    // pointers in the captured node and rewrites them at every call.
    let mut step = Step::new(&stream, p, StepOptions::default(), |s| {
        let (xp, yp) = (s.buffer(&x)?.as_raw(), s.buffer(&y)?.as_raw());
        // SAFETY: add1 over N elements of two distinct N-float buffers the step keeps alive.
        unsafe {
            s1.launch_builder(&cu_f)
                .arg(&xp)
                .arg(&yp)
                .arg(&n)
                .launch(cu_cfg)?
        };
        Ok(())
    })
    .unwrap();
    assert!(
        cctx.is_event_tracking(),
        "tracking restored after the step's captures"
    );
    match step.mode() {
        StepMode::Graph { patched_words, .. } => assert_eq!(*patched_words, 2),
        mode => panic!("the step runs as {mode:?}"),
    }
    let mut kept = Vec::new();
    for _ in 0..super::sized(100, 20, 6) {
        let (h, xb, yb) = fresh();
        step.bind(&x, &xb).unwrap();
        step.bind(&y, &yb).unwrap();
        step.run().unwrap();
        kept.push((h, yb));
    }
    // cudarc's own launch, rebound to other buffers, is the work captured.
    assert_eq!(step.validate().unwrap(), crate::step::Validated::Same);
    stream.synchronize().unwrap();
    for (h, y) in kept {
        let want: Vec<f64> = h.iter().map(|&v| v as f64 + 1.0).collect();
        assert_close(&y.to_vec().unwrap(), &want, 1e-6);
    }
    drop(step);
    assert!(ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_cudarc_stream_leaves_cudarc_event_tracking_on_in_its_captures_unless_the_caller_opts_in() {
    let _capturing = super::exclusive();
    let cctx = CudaContext::new(0).unwrap();
    let (s1, s2) = (cctx.new_stream().unwrap(), cctx.new_stream().unwrap());
    assert!(cctx.is_event_tracking());
    let x = s2.clone_htod(&random_f32(N)).unwrap();
    let mut y = s2.alloc_zeros::<f32>(N).unwrap();
    let cu_f = add1_of(&cctx);
    let cu_cfg = cudarc_config();
    let n = N as i32;
    let stream = Stream::from_cudarc(&s1).unwrap();
    let mut tracking_inside = None;
    let captured = stream.capture(CaptureMode::Global, |_| {
        tracking_inside = Some(cctx.is_event_tracking());
        let mut b = s1.launch_builder(&cu_f);
        b.arg(&x).arg(&mut y).arg(&n);
        // SAFETY: add1 over N elements of N-element slices.
        unsafe { b.launch(cu_cfg) }.map(drop)?;
        Ok(())
    });
    assert_eq!(
        tracking_inside,
        Some(true),
        "a safe cudarc stream switched cudarc's tracking off"
    );
    assert!(cctx.is_event_tracking());
    // cudarc's wait on the slices' events crosses the capture's boundary: the driver refuses it.
    println!(
        "capture of a tracked cudarc launch: {:?}",
        captured.as_ref().map(drop)
    );
    assert!(
        captured.is_err(),
        "the capture of a tracked launch was taken"
    );
    drop(captured);
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
}
