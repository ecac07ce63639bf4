//! Run-time argument lists ([`KernelArgList`]): launched, captured and rebound they give the values
//! tuples give, and a wrong count or size is refused before the driver runs anything.

use super::chain::{add1, check_chain, fresh_input, replay, N};
use super::{assert_close, capturing_ctx, ctx, function, random_f32};
use crate::{CaptureMode, DeviceBuffer, KernelArgList, LaunchConfig, Misuse, Stream};

const NAN: u32 = 0x7fc0_0000;

#[test]
#[ignore = "needs a CUDA GPU"]
fn arg_list_axpy_matches_cpu() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = function(&ctx, &graph_rt_kernels::AXPY, "axpy_f32");
    for (n, blocks) in [(1usize, 1u32), (1000, 3), (1 << 20, 1024)] {
        let (x, y) = (random_f32(n), random_f32(n));
        let a = rand::random::<f32>() * 4.0 - 2.0;
        let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
        let mut dy = DeviceBuffer::from_host(&ctx, &y).unwrap();
        let mut args = KernelArgList::new();
        args.push(a).unwrap().push(&dx).unwrap();
        args.push(&mut dy).unwrap().push(n as i32).unwrap();
        // SAFETY: grid-stride over n elements of x and y.
        unsafe {
            stream
                .launch(&f, &LaunchConfig::new(blocks, 256), &args)
                .unwrap()
        };
        let want: Vec<f64> = x
            .iter()
            .zip(&y)
            .map(|(&x, &y)| a as f64 * x as f64 + y as f64)
            .collect();
        assert_close(&dy.read_on(&stream).unwrap(), &want, 1e-6);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn arg_list_of_raw_bytes_launches_like_typed_values() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let x = random_f32(N);
    let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
    let mut dy = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    dy.fill_u32(NAN).unwrap();
    let mut args = KernelArgList::new();
    // SAFETY: two device addresses of N-float buffers kept alive by the list, and an int.
    unsafe {
        args.push_bytes(&dx.as_raw().to_ne_bytes(), 8).unwrap();
        args.push_bytes(&dy.as_raw().to_ne_bytes(), 8).unwrap();
        args.push_bytes(&(N as i32).to_ne_bytes(), 4).unwrap();
    }
    args.keep_alive(dx.allocation().clone())
        .keep_alive(dy.allocation().clone());
    // SAFETY: add1 touches N elements of each buffer.
    unsafe {
        stream
            .launch(&f, &LaunchConfig::for_elements(N, 256), args)
            .unwrap()
    };
    let want: Vec<f64> = x.iter().map(|&v| v as f64 + 1.0).collect();
    assert_close(&dy.read_on(&stream).unwrap(), &want, 1e-6);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn arg_list_of_wrong_count_or_size_is_refused_and_nothing_runs() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let mut bufs = [
        DeviceBuffer::<f32>::alloc(&ctx, N).unwrap(),
        DeviceBuffer::<f32>::alloc(&ctx, N).unwrap(),
    ];
    let x = fresh_input(&mut bufs[0]);
    bufs[1].fill_u32(NAN).unwrap();
    let [dx, dy] = &mut bufs;
    let mut short = KernelArgList::new();
    short.push(&*dx).unwrap().push(&mut *dy).unwrap();
    // SAFETY: refused before reaching the driver.
    let e = unsafe { stream.launch(&f, &cfg, &short) }.unwrap_err();
    assert!(
        matches!(e.misuse_kind(), Some(Misuse::ArgumentLayout { kernel, given })
            if *kernel == [8, 8, 4] && *given == [8, 8]),
        "{e}"
    );
    let mut wide = KernelArgList::new();
    wide.push(&*dx).unwrap().push(&mut *dy).unwrap();
    wide.push(N as i64).unwrap();
    // SAFETY: refused before reaching the driver.
    let e = unsafe { stream.launch(&f, &cfg, &wide) }.unwrap_err();
    assert!(
        matches!(e.misuse_kind(), Some(Misuse::ArgumentLayout { kernel, given })
            if *kernel == [8, 8, 4] && *given == [8, 8, 8]),
        "{e}"
    );
    let untouched = dy.read_on(&stream).unwrap();
    assert!(
        untouched.iter().all(|v| v.to_bits() == NAN),
        "a refused launch ran"
    );
    let mut right = KernelArgList::new();
    right.push(&*dx).unwrap().push(&mut *dy).unwrap();
    right.push(N as i32).unwrap();
    // SAFETY: add1 touches N elements of each buffer.
    unsafe { stream.launch(&f, &cfg, &right).unwrap() };
    stream.synchronize().unwrap();
    check_chain(dy, &x, 1);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn arg_list_captured_and_rebound_keeps_its_buffers() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let alloc = || DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let (mut x, mut y) = (alloc(), alloc());
    let mut args = KernelArgList::new();
    args.push(&x).unwrap().push(&mut y).unwrap();
    args.push(N as i32).unwrap();
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            // SAFETY: add1 touches N elements of two distinct N-element buffers.
            unsafe { s.launch(&f, &cfg, &args)? };
            Ok(())
        })
        .unwrap();
    drop(args);
    let node = graph.nodes().unwrap()[0];
    let mut exec = graph.instantiate().unwrap();
    let input = fresh_input(&mut x);
    y.fill_u32(NAN).unwrap();
    replay(&exec, &stream);
    check_chain(&y, &input, 1);

    // Rebound to buffers whose only other owner is dropped before the replay: the exec keeps the
    // input alive, and memory allocated meanwhile cannot take its place.
    let (mut x2, mut y2) = (alloc(), alloc());
    let input2 = fresh_input(&mut x2);
    y2.fill_u32(NAN).unwrap();
    y.fill_u32(NAN).unwrap();
    let mut args = KernelArgList::new();
    args.push(&x2).unwrap().push(&mut y2).unwrap();
    args.push(N as i32).unwrap();
    // SAFETY: as captured.
    unsafe { exec.set_kernel_args(node, &args).unwrap() };
    drop((args, x2));
    let mut churn = alloc();
    churn.fill_u32(NAN).unwrap();
    replay(&exec, &stream);
    check_chain(&y2, &input2, 1);
    let old = y.to_vec().unwrap();
    assert!(
        old.iter().all(|v| v.to_bits() == NAN),
        "the rebound node still wrote its old output"
    );
    drop((exec, graph));
    assert!(ctx.take_deferred_errors().is_empty());
}
