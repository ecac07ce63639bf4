//! Capture, replay, ownership and updates of graphs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::chain::{add1, buffers, capture_chain, check_chain, fresh_input, replay, N};
use super::{assert_close, capturing_ctx, function, sized};
use crate::{
    CaptureMode, CaptureStatus, DeviceBuffer, Error, Event, EventFlags, ExecUpdate, Graph,
    InstantiateOptions, LaunchConfig, Misuse, NodeKind, Stream, UpdateFailureKind,
};

#[test]
#[ignore = "needs a CUDA GPU"]
fn captured_1000_node_chain_replays_100_times_on_fresh_inputs() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    // Under a sanitizer every kernel of every replay is instrumented: a few replays there, of a
    // shorter chain under racecheck.
    let (nodes, replays) = sized((1000, 100), (1000, 3), (200, 2));
    let mut bufs = buffers(&ctx, nodes + 1);
    let graph = capture_chain(&stream, &f, &bufs).unwrap();
    assert_eq!(graph.nodes().unwrap().len(), nodes);
    assert_eq!(graph.edges().unwrap().len(), nodes - 1);
    let exec = graph.instantiate().unwrap();
    for _ in 0..replays {
        let x = fresh_input(&mut bufs[0]);
        bufs[nodes].fill_u32(0x7fc0_0000).unwrap();
        replay(&exec, &stream);
        check_chain(&bufs[nodes], &x, nodes);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn illegal_calls_inside_capture_are_typed_errors_and_the_stream_recovers() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let mut bufs = buffers(&ctx, 3);
    type Body<'a> = &'a dyn Fn(&crate::CaptureScope<'_>) -> crate::Result<()>;
    let cases: [(&str, Body); 3] = [
        ("cuStreamSynchronize", &|s| s.stream().synchronize()),
        ("cuMemAlloc", &|_| {
            DeviceBuffer::<f32>::alloc(&ctx, 16).map(drop)
        }),
        ("cuEventQuery", &|s| {
            let e = Event::new(&ctx, EventFlags::DisableTiming)?;
            s.record(&e)?;
            e.is_complete().map(drop)
        }),
    ];
    // The same stream captures and replays correctly afterwards. The exec is a temporary,
    // dropped right after its launch, before the synchronize.
    let recaptures_and_replays = |bufs: &mut [DeviceBuffer<f32>]| {
        let graph = capture_chain(&stream, &f, bufs).unwrap();
        let x = fresh_input(&mut bufs[0]);
        graph.instantiate().unwrap().launch(&stream).unwrap();
        stream.synchronize().unwrap();
        check_chain(&bufs[2], &x, 2);
    };
    for (call, body) in cases {
        let e = stream.capture(CaptureMode::Global, body).unwrap_err();
        assert!(matches!(e, Error::Capture { .. }), "{call}: {e}");
        assert_eq!(e.call(), Some(call), "{e}");
        assert_eq!(stream.capture_status().unwrap(), CaptureStatus::None);
        recaptures_and_replays(&mut bufs);
    }
    // A panic inside the capture closure ends the capture too.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = stream.capture(CaptureMode::Global, |s| {
            assert_eq!(s.stream().capture_status().unwrap(), CaptureStatus::Active);
            panic!("boom")
        });
    }));
    assert!(r.is_err());
    assert_eq!(stream.capture_status().unwrap(), CaptureStatus::None);
    recaptures_and_replays(&mut bufs);
}

/// Run under compute-sanitizer memcheck by the GPU suite (`run.sh sanitize`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitized_replay_after_user_drops_every_handle() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let (exec, x, out_ptr) = {
        let f = add1(&ctx);
        let mut bufs = buffers(&ctx, 5);
        // Fresh random input written before the capture: a replay reading freed (and reused,
        // poisoned) memory gives wrong values, not the right ones by luck.
        let x = fresh_input(&mut bufs[0]);
        // Outputs poisoned: initcheck checks a graph's copy node when the graph is launched,
        // before the kernels that write its source have run.
        for b in &mut bufs[1..] {
            b.fill_u32(0x7fc0_0000).unwrap();
        }
        let graph = stream
            .capture(CaptureMode::Global, |s| {
                let cfg = LaunchConfig::for_elements(N, 256);
                let (a, rest) = bufs.split_at_mut(1);
                let (b, rest) = rest.split_at_mut(1);
                let (c, rest) = rest.split_at_mut(1);
                let (d, e) = rest.split_at_mut(1);
                s.fill_zero(&mut e[0])?;
                // SAFETY: N-element distinct buffers.
                unsafe {
                    s.launch(&f, &cfg, (&a[0], &mut b[0], N as i32))?;
                    s.launch(&f, &cfg, (&b[0], &mut c[0], N as i32))?;
                }
                s.copy(&mut d[0], &c[0]).map(drop)
            })
            .unwrap();
        let out_ptr = bufs[3].as_raw();
        let exec = graph.instantiate().unwrap();
        (exec, x, out_ptr) // buffers, function, module and graph dropped here
    };
    // Churn the allocator so freed memory would be reused, poisoned with NaN.
    let churn: Vec<_> = (0..8)
        .map(|_| {
            let mut b = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
            b.fill_u32(0x7fc0_0000).unwrap();
            b
        })
        .collect();
    for _ in 0..3 {
        exec.launch(&stream).unwrap();
    }
    stream.synchronize().unwrap();
    // SAFETY: the exec keeps the allocation alive; nothing else writes it now.
    let out = unsafe { DeviceBuffer::<f32>::from_raw(&ctx, out_ptr, N) };
    check_chain(&out, &x, 2);
    drop(churn);
    drop(out);
    drop(exec);
    assert!(ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn wrong_argument_size_update_is_an_error_and_the_old_arguments_stay() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let mut bufs = buffers(&ctx, 2);
    let graph = capture_chain(&stream, &f, &bufs).unwrap();
    let node = graph.nodes().unwrap()[0];
    let mut exec = graph.instantiate().unwrap();
    let other = buffers(&ctx, 2);
    // SAFETY: refused before reaching the driver.
    let e = unsafe { exec.set_kernel_args(node, (&other[0], &other[1], N as i64)) }.unwrap_err();
    assert!(
        matches!(e.misuse_kind(), Some(Misuse::ArgumentLayout { kernel, given })
            if *kernel == [8, 8, 4] && *given == [8, 8, 8]),
        "{e}"
    );
    // SAFETY: refused before reaching the driver.
    assert!(unsafe { exec.set_kernel_args(node, (&other[0], &other[1])) }.is_err());
    let x = fresh_input(&mut bufs[0]);
    replay(&exec, &stream);
    check_chain(&bufs[1], &x, 1);
    // A valid rebinding takes effect.
    let mut other = other;
    other[0].copy_from_host(&x).unwrap();
    // SAFETY: N-element distinct buffers.
    unsafe {
        exec.set_kernel_args(node, (&other[0], &other[1], N as i32))
            .unwrap()
    };
    replay(&exec, &stream);
    check_chain(&other[1], &x, 1);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn exec_update_rebinds_in_place_and_falls_back_when_topology_changes() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let (mut a, mut b) = (buffers(&ctx, 11), buffers(&ctx, 11));
    let ga = capture_chain(&stream, &f, &a).unwrap();
    let exec_nodes = ga.nodes().unwrap();
    let mut exec = ga.instantiate().unwrap();
    drop(ga);
    let gb = capture_chain(&stream, &f, &b).unwrap();
    assert_eq!(exec.update(&gb).unwrap(), ExecUpdate::Updated);
    drop(gb);
    let _xa = fresh_input(&mut a[0]);
    let xb = fresh_input(&mut b[0]);
    a[10].fill_u32(0x7fc0_0000).unwrap();
    replay(&exec, &stream);
    check_chain(&b[10], &xb, 10);
    assert!(
        a[10].to_vec().unwrap().iter().all(|v| v.is_nan()),
        "the old binding ran"
    );
    // Per-node rebinding after an in-place update uses the nodes of the exec's own graph, which
    // the exec keeps alive although the user dropped it.
    let x2 = fresh_input(&mut a[0]);
    let first = exec_nodes[0];
    // SAFETY: N-element distinct buffers.
    unsafe {
        exec.set_kernel_args(first, (&a[0], &b[1], N as i32))
            .unwrap()
    };
    replay(&exec, &stream);
    check_chain(&b[10], &x2, 10);
    // A chain of another length: topology changed, re-instantiated, right values.
    let mut c = buffers(&ctx, 6);
    let gc = capture_chain(&stream, &f, &c).unwrap();
    match exec.update(&gc).unwrap() {
        ExecUpdate::Reinstantiated(failure) => assert_eq!(
            failure.kind,
            UpdateFailureKind::TopologyChanged,
            "{failure}"
        ),
        other => panic!("expected a fallback, got {other:?}"),
    }
    let xc = fresh_input(&mut c[0]);
    replay(&exec, &stream);
    check_chain(&c[5], &xc, 5);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fork_join_over_three_streams_replays_right() {
    let ctx = capturing_ctx();
    let (s0, s1, s2) = (
        Stream::new(&ctx).unwrap(),
        Stream::new(&ctx).unwrap(),
        Stream::new(&ctx).unwrap(),
    );
    let (f, g) = (
        add1(&ctx),
        function(&ctx, &graph_rt_kernels::AXPY, "axpy_f32"),
    );
    let x = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let (mut a, mut b, mut c) = (
        buffers(&ctx, 1).remove(0),
        buffers(&ctx, 1).remove(0),
        buffers(&ctx, 1).remove(0),
    );
    let cfg = LaunchConfig::for_elements(N, 256);
    let graph = s0
        .capture(CaptureMode::Global, |s| {
            s.fork(&s1)?;
            s.fork(&s2)?;
            // SAFETY: N-element distinct buffers throughout.
            unsafe {
                s.launch_on(&s1, &f, &cfg, (&x, &mut a, N as i32))?;
                s.launch_on(&s2, &f, &cfg, (&x, &mut b, N as i32))?;
                s.launch(&f, &cfg, (&x, &mut c, N as i32))?;
            }
            s.join(&s1)?;
            s.join(&s2)?;
            // SAFETY: as above.
            unsafe {
                s.launch(&g, &cfg, (1.0f32, &a, &mut b, N as i32))?;
                s.launch(&g, &cfg, (1.0f32, &c, &mut b, N as i32)).map(drop)
            }
        })
        .unwrap();
    let kernels = graph
        .nodes()
        .unwrap()
        .into_iter()
        .filter(|n| graph.node_kind(*n).unwrap() == NodeKind::Kernel)
        .count();
    assert_eq!(kernels, 5);
    let exec = graph.instantiate().unwrap();
    let mut x = x;
    for _ in 0..5 {
        let h = fresh_input(&mut x);
        replay(&exec, &s0);
        let want: Vec<f64> = h.iter().map(|&v| 3.0 * (v as f64 + 1.0)).collect();
        assert_close(&b.to_vec().unwrap(), &want, 1e-6);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn explicit_graph_with_every_node_kind() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let (f, g) = (
        add1(&ctx),
        function(&ctx, &graph_rt_kernels::AXPY, "axpy_f32"),
    );
    let cfg = LaunchConfig::for_elements(N, 256);
    let (x, mut y, mut z) = (
        DeviceBuffer::<f32>::alloc(&ctx, N).unwrap(),
        buffers(&ctx, 1).remove(0),
        buffers(&ctx, 1).remove(0),
    );
    let count = Arc::new(AtomicUsize::new(0));
    let mut graph = Graph::new(&ctx).unwrap();
    let fill = graph.add_fill_u32(&[], &z, 0).unwrap();
    // SAFETY: N-element buffers.
    let k1 = unsafe {
        graph
            .add_kernel(&[fill], &f, &cfg, (&x, &mut y, N as i32))
            .unwrap()
    };
    let (alloc_node, tmp) = graph.add_mem_alloc(&[k1], N * 4).unwrap();
    // SAFETY: tmp holds N floats between its alloc and free nodes.
    let k2 = unsafe {
        graph
            .add_kernel(&[alloc_node], &f, &cfg, (&y, tmp, N as i32))
            .unwrap()
    };
    // SAFETY: as above: z += 1 * tmp.
    let k3 = unsafe {
        graph
            .add_kernel(&[k2], &g, &cfg, (1.0f32, tmp, &mut z, N as i32))
            .unwrap()
    };
    let free = graph.add_mem_free(&[k3], tmp).unwrap();
    let counter = count.clone();
    let host = graph
        .add_host_callback(&[free], move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    let ev = Event::new(&ctx, EventFlags::DisableTiming).unwrap();
    let rec = graph.add_event_record(&[host], &ev).unwrap();
    let wait = graph.add_event_wait(&[rec], &ev).unwrap();
    let mut child = Graph::new(&ctx).unwrap();
    let w = buffers(&ctx, 1).remove(0);
    child.add_copy(&[], &w, &z).unwrap();
    let child = child.try_clone().unwrap();
    let child_node = graph.add_child_graph(&[wait], &child).unwrap();
    let join = graph.add_empty(&[child_node]).unwrap();
    drop(child);
    let kinds: Vec<NodeKind> = graph
        .nodes()
        .unwrap()
        .iter()
        .map(|n| graph.node_kind(*n).unwrap())
        .collect();
    for k in [
        NodeKind::Memset,
        NodeKind::Kernel,
        NodeKind::MemAlloc,
        NodeKind::MemFree,
        NodeKind::Host,
        NodeKind::EventRecord,
        NodeKind::WaitEvent,
        NodeKind::ChildGraph,
        NodeKind::Empty,
    ] {
        assert!(kinds.contains(&k), "{k:?} missing from {kinds:?}");
    }
    assert!(graph
        .edges()
        .unwrap()
        .iter()
        .any(|e| (e.from, e.to) == (child_node, join)));
    let dot = std::env::temp_dir().join(format!("graph-rt-{}.dot", std::process::id()));
    graph.write_dot(&dot).unwrap();
    assert!(std::fs::read_to_string(&dot).unwrap().contains("digraph"));
    let _ = std::fs::remove_file(dot);
    // Graphs with memory-allocation nodes cannot be cloned (CUDA); the error says so, typed.
    assert_eq!(graph.try_clone().unwrap_err().call(), Some("cuGraphClone"));
    let exec = graph
        .instantiate_with(&InstantiateOptions {
            upload: Some(&stream),
            ..Default::default()
        })
        .unwrap();
    drop(graph);
    let mut x = x;
    for round in 1..=3 {
        let h = fresh_input(&mut x);
        replay(&exec, &stream);
        let want: Vec<f64> = h.iter().map(|&v| v as f64 + 2.0).collect();
        assert_close(&z.to_vec().unwrap(), &want, 1e-6);
        assert_close(&w.to_vec().unwrap(), &want, 1e-6);
        assert_eq!(count.load(Ordering::SeqCst), round);
    }
    z.fill_zero().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn per_node_updates_enable_grid_copy_and_memset() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    // Poisoned (initialized) buffers: initcheck checks the copy node's source when the graph
    // is launched, before the kernel that writes it has run.
    let mut bufs = buffers(&ctx, 4);
    let cfg = LaunchConfig::for_elements(N, 256);
    let mut graph = Graph::new(&ctx).unwrap();
    let set = graph.add_fill_u32(&[], &bufs[0], 1.0f32.to_bits()).unwrap();
    // SAFETY: N-element buffers.
    let k = unsafe {
        graph
            .add_kernel(&[set], &f, &cfg, (&bufs[0], &bufs[1], N as i32))
            .unwrap()
    };
    let copy = graph.add_copy(&[k], &bufs[2], &bufs[1]).unwrap();
    let mut exec = graph.instantiate().unwrap();
    replay(&exec, &stream);
    assert_eq!(bufs[2].to_vec().unwrap(), vec![2.0; N]);
    // Memset value and copy target.
    exec.set_fill_u32(set, &bufs[0], 5.0f32.to_bits()).unwrap();
    exec.set_copy(copy, &bufs[3], &bufs[1]).unwrap();
    replay(&exec, &stream);
    assert_eq!(bufs[3].to_vec().unwrap(), vec![6.0; N]);
    // A smaller grid covers only the first 256 elements.
    bufs[1].fill_zero().unwrap();
    // SAFETY: N-element buffers; the grid covers fewer.
    unsafe {
        exec.set_kernel_node(
            k,
            &LaunchConfig::new(1u32, 256u32),
            (&bufs[0], &bufs[1], N as i32),
        )
        .unwrap()
    };
    replay(&exec, &stream);
    let y = bufs[1].to_vec().unwrap();
    assert!(y[..256].iter().all(|&v| v == 6.0) && y[256..].iter().all(|&v| v == 0.0));
    // Disabled kernel: nothing written.
    bufs[1].fill_zero().unwrap();
    exec.set_enabled(k, false).unwrap();
    replay(&exec, &stream);
    assert!(bufs[1].to_vec().unwrap().iter().all(|&v| v == 0.0));
    exec.set_enabled(k, true).unwrap();
    // A node of another graph is refused.
    let g2 = capture_chain(&stream, &f, &bufs[..2]).unwrap();
    let foreign = g2.nodes().unwrap()[0];
    assert!(exec.set_enabled(foreign, false).is_err());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn capture_into_an_existing_graph_and_launch_on_another_stream() {
    let ctx = capturing_ctx();
    let (s0, s1) = (Stream::new(&ctx).unwrap(), Stream::new(&ctx).unwrap());
    let f = add1(&ctx);
    let mut bufs = buffers(&ctx, 3);
    let mut graph = Graph::new(&ctx).unwrap();
    let cfg = LaunchConfig::for_elements(N, 256);
    // SAFETY: N-element buffers.
    let first = unsafe {
        graph
            .add_kernel(&[], &f, &cfg, (&bufs[0], &bufs[1], N as i32))
            .unwrap()
    };
    let (head, tail) = bufs.split_at_mut(2);
    s0.capture_into(&mut graph, &[first], CaptureMode::ThreadLocal, |s| {
        // SAFETY: N-element buffers.
        unsafe {
            s.launch(&f, &cfg, (&head[1], &mut tail[0], N as i32))
                .map(drop)
        }
    })
    .unwrap();
    assert_eq!(graph.nodes().unwrap().len(), 2);
    let exec = graph.instantiate().unwrap();
    let x = fresh_input(&mut bufs[0]);
    exec.upload(&s1).unwrap();
    replay(&exec, &s1);
    check_chain(&bufs[2], &x, 2);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn rebinding_every_node_of_a_captured_chain_in_node_order() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let (a, b) = (buffers(&ctx, 21), buffers(&ctx, 21));
    let graph = capture_chain(&stream, &f, &a).unwrap();
    let nodes = graph.nodes().unwrap();
    let mut exec = graph.instantiate().unwrap();
    for (k, node) in nodes.iter().enumerate() {
        // SAFETY: N-element distinct buffers.
        unsafe {
            exec.set_kernel_args(*node, (&b[k], &b[k + 1], N as i32))
                .unwrap()
        };
    }
    let mut b = b;
    let x = fresh_input(&mut b[0]);
    replay(&exec, &stream);
    check_chain(&b[20], &x, 20);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn failed_capture_into_keeps_the_callers_graph_and_foreign_nodes_are_refused() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let bufs = buffers(&ctx, 3);
    let cfg = LaunchConfig::for_elements(N, 256);
    let mut graph = Graph::new(&ctx).unwrap();
    let first = graph.add_empty(&[]).unwrap();
    let e = stream
        .capture_into(&mut graph, &[first], CaptureMode::Global, |s| {
            // SAFETY: N-element buffers, kept alive by `graph` even though the capture fails.
            unsafe { s.launch(&f, &cfg, (&bufs[0], &bufs[1], N as i32))? };
            s.stream().synchronize()
        })
        .unwrap_err();
    assert_eq!(e.call(), Some("cuStreamSynchronize"), "{e}");
    assert_eq!(stream.capture_status().unwrap(), CaptureStatus::None);
    // CUDA leaves the graph undefined: graph-rt refuses to use it (dropping it is fine).
    let e = graph.nodes().unwrap_err();
    assert_eq!(e.misuse_kind(), Some(&Misuse::GraphBroken), "{e}");
    drop(graph);
    let mut graph = Graph::new(&ctx).unwrap();
    // Allocating in stream order on a capturing stream is refused, named.
    let e = stream
        .capture(CaptureMode::Global, |s| {
            DeviceBuffer::<f32>::alloc_async(s.stream(), 16).map(drop)
        })
        .unwrap_err();
    assert_eq!(e.call(), Some("cuMemAllocAsync"), "{e}");
    assert_eq!(e.misuse_kind(), Some(&Misuse::Capturing), "{e}");
    // A node of another graph, live or dropped, is refused rather than handed to the driver.
    let other = capture_chain(&stream, &f, &bufs).unwrap();
    let foreign = other.nodes().unwrap()[0];
    let e = graph.add_empty(&[foreign]).unwrap_err();
    assert_eq!(e.misuse_kind(), Some(&Misuse::OtherGraph), "{e}");
    drop(other);
    let e = graph.node_kind(foreign).unwrap_err();
    assert_eq!(e.misuse_kind(), Some(&Misuse::OtherGraph), "{e}");
    // CaptureScope::record makes an event-record node.
    let ev = Event::new(&ctx, EventFlags::DisableTiming).unwrap();
    let g = stream
        .capture(CaptureMode::Global, |s| s.record(&ev).map(drop))
        .unwrap();
    let kinds: Vec<_> = g
        .nodes()
        .unwrap()
        .iter()
        .map(|n| g.node_kind(*n).unwrap())
        .collect();
    assert_eq!(kinds, vec![NodeKind::EventRecord]);
    drop(graph);
    assert!(ctx.take_deferred_errors().is_empty());
}
