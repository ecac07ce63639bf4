//! Captures and other threads: a wait for the whole context on another thread
//! (`Context::synchronize`, `DeviceBuffer::to_vec` and the other copies that wait for every
//! stream), which CUDA refuses while any stream of the context captures and whose refusal breaks
//! that capture, waits for graph-rt's capture to end instead, in every capture mode.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::capturing_ctx;
use super::chain::{add1, N};
use crate::{CaptureMode, DeviceBuffer, LaunchConfig, Stream};

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_whole_context_wait_on_another_thread_waits_for_a_capture_instead_of_breaking_it() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let input: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let other_data = vec![7.0f32; 1024];
    for mode in [
        CaptureMode::Global,
        CaptureMode::ThreadLocal,
        CaptureMode::Relaxed,
    ] {
        let x = DeviceBuffer::from_host(&ctx, &input).unwrap();
        let mut y = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
        let other_buf = DeviceBuffer::from_host(&ctx, &other_data).unwrap();
        let started = AtomicBool::new(false);
        let mut closure_end = None;
        let (graph, (read, read_at)) = std::thread::scope(|t| {
            let other = t.spawn(|| {
                while !started.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                let r = ctx.synchronize().and_then(|()| other_buf.to_vec());
                (r, Instant::now())
            });
            let graph = stream.capture(mode, |s| {
                // SAFETY: add1 over N floats of two distinct N-float buffers.
                unsafe { s.launch(&f, &cfg, (&x, &mut y, N as i32))? };
                started.store(true, Ordering::Release);
                // The other thread is waiting now (without the gate its cuCtxSynchronize
                // would have been refused and this capture broken).
                std::thread::sleep(Duration::from_millis(100));
                // SAFETY: as above.
                unsafe { s.launch(&f, &cfg, (&x, &mut y, N as i32))? };
                closure_end = Some(Instant::now());
                Ok(())
            });
            (graph, other.join().unwrap())
        });
        let graph = graph.unwrap_or_else(|e| panic!("{mode:?}: the capture broke: {e}"));
        assert_eq!(
            read.unwrap_or_else(|e| panic!("{mode:?}: {e}")),
            other_data,
            "{mode:?}"
        );
        assert!(
            read_at > closure_end.unwrap(),
            "{mode:?}: the other thread's wait ran during the capture"
        );
        let exec = graph.instantiate().unwrap();
        exec.launch(&stream).unwrap();
        let got = y.read_on(&stream).unwrap();
        assert!(
            got.iter().zip(&input).all(|(g, i)| *g == i + 1.0),
            "{mode:?}: wrong replay"
        );
    }
}
