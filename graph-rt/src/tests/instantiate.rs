//! Instantiation options: auto-free on launch, device launch, node priority.

use super::capturing_ctx;
use super::chain::{add1, buffers, capture_chain_with, check_chain, fresh_input, replay, N};
use crate::{DeviceBuffer, Graph, GraphExec, InstantiateOptions, LaunchConfig, Stream};

/// Launches `exec` on fresh input in `x` and checks `out == x + steps`.
fn replays_right(
    exec: &GraphExec,
    stream: &Stream,
    x: &mut DeviceBuffer<f32>,
    out: &DeviceBuffer<f32>,
    steps: usize,
) {
    let h = fresh_input(x);
    replay(exec, stream);
    check_chain(out, &h, steps);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn auto_free_on_launch_relaunches_a_graph_whose_allocation_is_never_freed() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let mut x = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let out = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let cfg = LaunchConfig::for_elements(N, 256);
    // x -> scratch (graph memory, never freed by the graph) -> out.
    let mut graph = Graph::new(&ctx).unwrap();
    let (alloc, scratch) = graph.add_mem_alloc(&[], N * 4).unwrap();
    // SAFETY: add1 touches N elements of x, of the N-float allocation and of out.
    let first = unsafe { graph.add_kernel(&[alloc], &f, &cfg, (&x, scratch, N as i32)) }.unwrap();
    // SAFETY: as above.
    unsafe { graph.add_kernel(&[first], &f, &cfg, (scratch, &out, N as i32)) }.unwrap();

    // Without the flag, CUDA refuses to relaunch while the allocation is live.
    let exec = graph.instantiate().unwrap();
    replays_right(&exec, &stream, &mut x, &out, 2);
    let e = exec.launch(&stream).unwrap_err();
    assert_eq!(e.call(), Some("cuGraphLaunch"), "{e}");
    // SAFETY: the allocation of the first launch, which has completed; nothing uses it any more.
    let freed = unsafe { crate::sys::cuMemFreeAsync(scratch.ptr, stream.as_raw()) };
    assert_eq!(freed, Ok(crate::sys::CUresult::CUDA_SUCCESS));
    stream.synchronize().unwrap();
    drop(exec);

    let exec = graph
        .instantiate_with(&InstantiateOptions {
            auto_free_on_launch: true,
            upload: Some(&stream),
            ..Default::default()
        })
        .unwrap();
    for _ in 0..3 {
        replays_right(&exec, &stream, &mut x, &out, 2);
    }
    // The last launch's allocation is freed with the exec's next launch, or here.
    // SAFETY: as above.
    let freed = unsafe { crate::sys::cuMemFreeAsync(scratch.ptr, stream.as_raw()) };
    assert_eq!(freed, Ok(crate::sys::CUresult::CUDA_SUCCESS));
    stream.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_launchable_and_node_priority_execs_replay_right_from_the_host() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let mut bufs = buffers(&ctx, 11);
    let (low, high) = Stream::priority_range(&ctx).unwrap();
    let plain = LaunchConfig::for_elements(N, 256);
    let device_launch = InstantiateOptions {
        device_launch: true,
        upload: Some(&stream),
        ..Default::default()
    };
    let node_priority = InstantiateOptions {
        use_node_priority: true,
        ..Default::default()
    };
    for (cfg, options) in [
        (plain, device_launch),
        (plain.priority(low), node_priority),
        (plain.priority(high), node_priority),
    ] {
        let graph = capture_chain_with(&stream, &f, &cfg, &bufs).unwrap();
        let exec = graph.instantiate_with(&options).unwrap();
        let (input, rest) = bufs.split_at_mut(1);
        replays_right(&exec, &stream, &mut input[0], &rest[9], 10);
    }
}
