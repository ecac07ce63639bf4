//! How long an exec keeps what it was rebound to: until the launches that may read it finish,
//! and no longer.

use std::sync::{Arc, Weak};

use super::chain::{add1, buffers, capture_chain, check_chain, fresh_input, N};
use super::{capturing_ctx, sized};
use crate::driver::Allocation;
use crate::{DeviceBuffer, ExecUpdate, Stream};

fn weak(bufs: &[DeviceBuffer<f32>]) -> Vec<Weak<Allocation>> {
    bufs.iter()
        .map(|b| Arc::downgrade(b.allocation()))
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fresh_buffers_every_step_are_released_once_their_launches_finish() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let graph = capture_chain(&stream, &f, &buffers(&ctx, 3)).unwrap();
    let nodes = graph.nodes().unwrap();
    let mut exec = graph.instantiate().unwrap();
    let own = exec.retained_count();
    // Fewer steps under a sanitizer (each allocation, update and launch instrumented).
    let (rebinds, updates_count) = sized((100, 20), (40, 10), (20, 8));
    let mut steps = Vec::new();
    for _ in 0..rebinds {
        let mut fresh = buffers(&ctx, 3);
        let x = fresh_input(&mut fresh[0]);
        for (k, node) in nodes.iter().enumerate() {
            // SAFETY: as in capture_chain.
            unsafe { exec.set_kernel_args(*node, (&fresh[k], &fresh[k + 1], N as i32)) }.unwrap();
        }
        exec.launch(&stream).unwrap();
        steps.push(weak(&fresh));
        let out = fresh.pop().unwrap();
        drop(fresh); // input and intermediate handles gone while the launch may run
        stream.synchronize().unwrap();
        check_chain(&out, &x, 2);
        // The graph's own, the current bindings, and at most two replaced generations.
        assert!(
            exec.retained_count() <= own + 4 + 8,
            "{}",
            exec.retained_count()
        );
    }
    let released = steps[..steps.len() - 2].iter().flatten();
    assert!(
        released.clone().all(|w| w.upgrade().is_none()),
        "replaced buffers still held"
    );

    // Whole-graph updates from graphs of fresh buffers: the old ones go the same way.
    let mut updates = Vec::new();
    for _ in 0..updates_count {
        let mut fresh = buffers(&ctx, 3);
        let g = capture_chain(&stream, &f, &fresh).unwrap();
        assert_eq!(exec.update(&g).unwrap(), ExecUpdate::Updated);
        drop(g);
        let x = fresh_input(&mut fresh[0]);
        exec.launch(&stream).unwrap();
        updates.push(weak(&fresh));
        let out = fresh.pop().unwrap();
        drop(fresh);
        stream.synchronize().unwrap();
        check_chain(&out, &x, 2);
    }
    let released = updates[..updates.len() - 2].iter().flatten();
    assert!(
        released.clone().all(|w| w.upgrade().is_none()),
        "old graphs' buffers still held"
    );
    drop(exec);
    // The exec's drop parks what it used; the device is idle, so synchronize releases it.
    ctx.synchronize().unwrap();
    assert!(updates.iter().flatten().all(|w| w.upgrade().is_none()));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitized_rebinding_while_a_launch_runs_keeps_what_it_reads() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    // A shorter chain under racecheck (every kernel instrumented, tens of milliseconds each).
    let nodes = sized(200, 200, 50);
    let bufs = buffers(&ctx, nodes + 1);
    let graph = capture_chain(&stream, &f, &bufs).unwrap();
    let first = graph.nodes().unwrap()[0];
    let mut exec = graph.instantiate().unwrap();
    drop(graph);
    let mut previous: Option<Weak<Allocation>> = None;
    for _ in 0..5 {
        let mut input = buffers(&ctx, 1);
        let x = fresh_input(&mut input[0]);
        // SAFETY: as in capture_chain.
        unsafe { exec.set_kernel_args(first, (&input[0], &bufs[1], N as i32)) }.unwrap();
        exec.launch(&stream).unwrap();
        // Rebind while the 200-kernel launch may run, and drop the input it reads: the exec
        // must hold it (dropping the handle alone would wait for the device: cuMemFree). Not
        // `buffers`: its fill would wait for the launch. (Nothing reads `next`: the next step
        // rebinds the node before launching.)
        let next = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
        // SAFETY: as in capture_chain.
        unsafe { exec.set_kernel_args(first, (&next, &bufs[1], N as i32)) }.unwrap();
        // That change, the first after a new launch, released what finished launches read: the
        // previous step's input.
        if let Some(w) = previous.take() {
            assert!(
                w.upgrade().is_none(),
                "a replaced input outlived its launches"
            );
        }
        let w = Arc::downgrade(input[0].allocation());
        drop(input);
        assert!(w.upgrade().is_some(), "released while a launch may read it");
        previous = Some(w);
        drop(next);
        stream.synchronize().unwrap();
        check_chain(&bufs[nodes], &x, nodes);
    }
    drop(exec);
    ctx.synchronize().unwrap();
    assert!(previous.is_some_and(|w| w.upgrade().is_none()));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dropping_a_running_1000_node_exec_returns_in_microseconds_and_parks_what_it_uses() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    // Under a sanitizer fewer execs, each launched once, and under racecheck a shorter chain:
    // every kernel is instrumented there.
    let (nodes, execs, replays) = sized((1000, 7, 3), (1000, 3, 1), (100, 3, 1));
    let mut bufs = buffers(&ctx, nodes + 1);
    let graph = capture_chain(&stream, &f, &bufs).unwrap();
    let x = fresh_input(&mut bufs[0]);
    let last = bufs.pop().unwrap();
    let first = bufs.remove(0);
    // Only the graph and its execs hold the middle buffers from here on.
    let middle = weak(&bufs);
    drop(bufs);
    // Under compute-sanitizer (run.sh sets GRAPH_RT_SANITIZER) launches are instrumented and
    // nearly synchronous: the timing says nothing there, the ownership checks still hold.
    let timed = std::env::var_os("GRAPH_RT_SANITIZER").is_none();
    let mut times = Vec::new();
    for _ in 0..execs {
        let exec = graph.instantiate().unwrap();
        exec.upload(&stream).unwrap();
        // Three replays queued (about 3.5 ms of device work; one under a sanitizer), then the
        // drop.
        for _ in 0..replays {
            exec.launch(&stream).unwrap();
        }
        let start = std::time::Instant::now();
        drop(exec);
        times.push(start.elapsed());
        let running = !stream.is_idle().unwrap();
        assert!(
            running || !timed,
            "the exec finished before the drop returned: nothing was measured"
        );
        stream.synchronize().unwrap();
        check_chain(&last, &x, nodes);
    }
    times.sort();
    let median = times[execs / 2];
    eprintln!(
        "drop of a running {nodes}-node exec returned in {median:?} (median of {execs}; min {:?}, max {:?})",
        times[0],
        times[execs - 1]
    );
    assert!(
        !timed || median < std::time::Duration::from_micros(50),
        "the drop took {median:?} (median of {execs})"
    );
    // Last, with the graph gone too: only the running exec's parked batch holds the buffers.
    let exec = graph.instantiate().unwrap();
    drop(graph);
    for _ in 0..replays {
        exec.launch(&stream).unwrap();
    }
    drop(exec);
    if !stream.is_idle().unwrap() {
        assert!(
            middle.iter().all(|w| w.upgrade().is_some()),
            "a buffer a running launch reads was released"
        );
    }
    stream.synchronize().unwrap();
    check_chain(&last, &x, nodes);
    ctx.synchronize().unwrap();
    assert_eq!(
        ctx.poll().unwrap(),
        0,
        "parked batches left after synchronize"
    );
    assert!(
        middle.iter().all(|w| w.upgrade().is_none()),
        "the parked buffers were not released"
    );
    drop(first);
}
