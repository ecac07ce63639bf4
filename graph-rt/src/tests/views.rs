//! Views of buffers ([`DeviceView`]) as kernel arguments, eager, captured and rebound, and
//! host transfers: stream-ordered ones, and unordered ones that wait for the whole context.

use rand::RngCore;

use super::chain::{add1, N};
use super::{assert_close, capturing_ctx, ctx, random_f32, sized};
use crate::{CaptureMode, DeviceBuffer, KernelArgList, LaunchConfig, Misuse, Stream};

const NAN: u32 = 0x7fc0_0000;

fn plus(x: &[f32], k: usize) -> Vec<f64> {
    x.iter().map(|&v| v as f64 + k as f64).collect()
}

fn all_nan(v: &[f32]) -> bool {
    v.iter().all(|v| v.to_bits() == NAN)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn view_as_kernel_argument_reads_and_writes_only_its_elements() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let x = random_f32(N + 37);
    let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
    let mut dy = DeviceBuffer::<f32>::alloc(&ctx, N + 100).unwrap();
    // A view by value, a view of a view by reference, and views in a run-time list.
    for way in 0..3 {
        dy.fill_u32(NAN).unwrap();
        let src = dx.slice(37..).unwrap();
        let dst = dy.slice(10..).unwrap().slice(40..40 + N).unwrap();
        assert_eq!((src.len(), dst.len()), (N, N));
        assert_eq!(dst.as_raw(), dy.as_raw() + 50 * 4);
        // SAFETY: add1 touches N elements of two N-element views of distinct buffers.
        unsafe {
            match way {
                0 => stream.launch(&f, &cfg, (src, dst, N as i32)),
                1 => stream.launch(&f, &cfg, (&src, &dst, N as i32)),
                _ => {
                    let mut args = KernelArgList::new();
                    args.push(&src).unwrap().push(dst).unwrap();
                    args.push(N as i32).unwrap();
                    stream.launch(&f, &cfg, &args)
                }
            }
            .unwrap()
        };
        let got = dy.read_on(&stream).unwrap();
        assert_close(&got[50..50 + N], &plus(&x[37..], 1), 1e-6);
        assert!(all_nan(&got[..50]) && all_nan(&got[50 + N..]), "way {way}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn views_in_a_capture_stay_valid_after_every_handle_is_dropped() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let x = random_f32(N + 16);
    let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
    let mid = DeviceBuffer::<f32>::alloc(&ctx, N + 16).unwrap();
    let mut out = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            let m = mid.slice(3..3 + N)?;
            // SAFETY: add1 touches N elements of N-element views of distinct buffers.
            unsafe {
                s.launch(&f, &cfg, (dx.slice(16..)?, &m, N as i32))?;
                s.launch(&f, &cfg, (&m, &mut out, N as i32))?;
            }
            Ok(())
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    drop((dx, mid, graph));
    // Memory allocated now would take the place of freed buffers: poisoned, it would show.
    let mut churn: Vec<DeviceBuffer<f32>> = (0..4)
        .map(|_| DeviceBuffer::alloc(&ctx, N + 16).unwrap())
        .collect();
    for c in &mut churn {
        c.fill_u32(NAN).unwrap();
    }
    for _ in 0..2 {
        out.fill_u32(NAN).unwrap();
        exec.launch(&stream).unwrap();
        assert_close(&out.read_on(&stream).unwrap(), &plus(&x[16..], 2), 1e-6);
    }
    drop((exec, churn));
    assert!(ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn views_rebound_into_an_exec_are_kept_alive_by_it() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let a = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    let mut b = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            // SAFETY: add1 touches N elements of two distinct N-element buffers.
            unsafe { s.launch(&f, &cfg, (&a, &mut b, N as i32))? };
            Ok(())
        })
        .unwrap();
    let node = graph.nodes().unwrap()[0];
    let mut exec = graph.instantiate().unwrap();
    let x = random_f32(N + 7);
    let p = DeviceBuffer::from_host(&ctx, &x).unwrap();
    let q = DeviceBuffer::<f32>::alloc(&ctx, N + 5).unwrap();
    let q_all = q.slice(..).unwrap();
    // SAFETY: N-element views of distinct buffers.
    unsafe {
        exec.set_kernel_args(
            node,
            (p.slice(7..).unwrap(), q.slice(5..).unwrap(), N as i32),
        )
        .unwrap()
    };
    drop((p, q));
    let mut churn = DeviceBuffer::<f32>::alloc(&ctx, N + 7).unwrap();
    churn.fill_u32(NAN).unwrap();
    for _ in 0..2 {
        b.fill_u32(NAN).unwrap();
        q_all.write_on(&stream, &vec![f32::NAN; N + 5]).unwrap();
        exec.launch(&stream).unwrap();
        let got = q_all.read_on(&stream).unwrap();
        assert_close(&got[5..], &plus(&x[7..], 1), 1e-6);
        assert!(all_nan(&got[..5]));
        assert!(all_nan(&b.to_vec().unwrap()), "the old output was written");
    }
}

/// Elements of the ping-pong buffers: enough that the host gets ahead of the launches. Under
/// racecheck every thread's accesses are tracked (it took 100 s over the 82 launches of 4M
/// elements of each test) and launches are nearly synchronous anyway: fewer there, the ordering
/// checked all the same.
fn ping_pong_elements() -> usize {
    sized(1 << 22, 1 << 22, 1 << 16)
}

/// Queues `steps` (odd) launches of add1 on `stream`, ping-ponging from `a` to `b` and back, over
/// enough elements that the host gets ahead of them: `b` ends `steps` above `a`'s input and `a`
/// one below `b`.
fn queue_ping_pong(stream: &Stream, a: &DeviceBuffer<f32>, b: &DeviceBuffer<f32>, steps: usize) {
    assert!(steps % 2 == 1);
    let f = add1(stream.context());
    let n = a.len();
    let cfg = LaunchConfig::for_elements(n, 256);
    for k in 0..steps {
        let (src, dst) = if k % 2 == 0 { (a, b) } else { (b, a) };
        // SAFETY: add1 touches n elements of two distinct n-element buffers, which the callers
        // drop only after reading the result (which waits for the stream or the context).
        unsafe { stream.launch(&f, &cfg, (src, dst, n as i32)).unwrap() };
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn stream_ordered_copies_need_no_synchronize_on_a_non_blocking_stream() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let n = ping_pong_elements();
    let x = random_f32(n);
    let mut a = DeviceBuffer::<f32>::alloc(&ctx, n).unwrap();
    let mut b = DeviceBuffer::<f32>::alloc(&ctx, n).unwrap();
    b.fill_u32(NAN).unwrap();
    a.write_on(&stream, &x).unwrap();
    queue_ping_pong(&stream, &a, &b, 41);
    assert_close(&b.read_on(&stream).unwrap(), &plus(&x, 41), 1e-5);
    // Into a caller's slice, through a view.
    queue_ping_pong(&stream, &a, &b, 41);
    let mut got = vec![f32::NAN; n - 3];
    b.slice(3..)
        .unwrap()
        .copy_to_host_on(&stream, &mut got)
        .unwrap();
    assert_close(&got, &plus(&x[3..], 81), 1e-5);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn unordered_copies_after_a_non_blocking_launch_wait_for_the_context() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let n = ping_pong_elements();
    let x = random_f32(n);
    let mut a = DeviceBuffer::from_host(&ctx, &x).unwrap();
    let mut b = DeviceBuffer::<f32>::alloc(&ctx, n).unwrap();
    b.fill_u32(NAN).unwrap();
    queue_ping_pong(&stream, &a, &b, 41);
    assert_close(&b.to_vec().unwrap(), &plus(&x, 41), 1e-5);
    // A write without a stream waits too: it cannot overtake the kernels still reading `a`.
    queue_ping_pong(&stream, &a, &b, 41);
    let y = random_f32(n);
    a.copy_from_host(&y).unwrap();
    assert_close(&b.to_vec().unwrap(), &plus(&x, 81), 1e-5);
    assert_eq!(a.to_vec().unwrap(), y);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn view_copies_touch_only_their_elements_and_check_ranges() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let mut src = vec![0u32; 100];
    rand::rng().fill_bytes(bytemuck::cast_slice_mut(&mut src));
    let mut buf = DeviceBuffer::from_host(&ctx, &src).unwrap();
    let mut part = vec![0u32; 20];
    rand::rng().fill_bytes(bytemuck::cast_slice_mut(&mut part));
    let view = buf.slice(10..30).unwrap();
    view.write_on(&stream, &part).unwrap();
    src[10..30].copy_from_slice(&part);
    assert_eq!(buf.read_on(&stream).unwrap(), src);
    assert_eq!(
        view.slice(5..=6).unwrap().read_on(&stream).unwrap(),
        &part[5..7]
    );
    assert!(buf.slice(100..).unwrap().is_empty());
    assert!(view.write_on(&stream, &part[1..]).is_err());
    let (start, end) = (30, 20);
    for e in [
        buf.slice(5..101).unwrap_err(),
        buf.slice(start..end).unwrap_err(),
        buf.slice(..=usize::MAX).unwrap_err(),
        view.slice(0..21).unwrap_err(),
    ] {
        assert!(
            matches!(e.misuse_kind(), Some(Misuse::OutOfRange { .. })),
            "{e}"
        );
    }
    // Whole-buffer stream-ordered copies check lengths as well.
    assert!(buf.write_on(&stream, &part).is_err());
    assert!(buf.copy_to_host_on(&stream, &mut part).is_err());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn stream_ordered_copies_refuse_a_capturing_stream() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let x = random_f32(N);
    let mut dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
    let mut dy = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            for e in [
                dx.read_on(s.stream()).unwrap_err(),
                dx.write_on(s.stream(), &x).unwrap_err(),
                dx.slice(..)?.read_on(s.stream()).unwrap_err(),
            ] {
                assert_eq!(e.misuse_kind(), Some(&Misuse::Capturing), "{e}");
            }
            // The capture goes on.
            // SAFETY: add1 touches N elements of two distinct N-element buffers.
            unsafe {
                s.launch(
                    &f,
                    &LaunchConfig::for_elements(N, 256),
                    (&dx, &mut dy, N as i32),
                )?
            };
            Ok(())
        })
        .unwrap();
    dy.fill_u32(NAN).unwrap();
    graph.instantiate().unwrap().launch(&stream).unwrap();
    assert_close(&dy.read_on(&stream).unwrap(), &plus(&x, 1), 1e-6);
}
