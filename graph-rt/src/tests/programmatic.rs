//! Programmatic dependent launch: eager launches and captured chains of the `CHAIN_PDL` kernel,
//! the programmatic edges a capture makes, and rebinding such nodes.

use super::chain::{add1, buffers, capture_chain, capture_chain_with, check_chain, N};
use super::{capturing_ctx, function, random_f32, sized};
use crate::{Context, DeviceBuffer, EdgeKind, ExecUpdate, Function, LaunchConfig, Stream};

/// `CHAIN_PDL`'s `add1`. On a GPU older than compute capability 9.0 the test fails saying so
/// (it does not pass without testing anything).
fn add1_pdl(ctx: &Context) -> Function {
    let cc = ctx.device().compute_capability().unwrap();
    let (major, minor) = graph_rt_kernels::CHAIN_PDL.min_compute_capability;
    assert!(
        cc >= (major as i32, minor as i32),
        "programmatic dependent launch needs compute capability 9.0; this GPU is {cc:?}"
    );
    function(ctx, &graph_rt_kernels::CHAIN_PDL, "add1")
}

fn config() -> LaunchConfig {
    LaunchConfig::for_elements(N, 256).programmatic_stream_serialization()
}

/// Writes fresh random floats into `bufs[0]`, poisons the output, runs `run`, and checks that
/// the last buffer holds the input plus the chain's length.
fn check_on_fresh_input(bufs: &mut [DeviceBuffer<f32>], run: impl FnOnce(&[DeviceBuffer<f32>])) {
    let x = random_f32(N);
    bufs[0].copy_from_host(&x).unwrap();
    let last = bufs.len() - 1;
    bufs[last].copy_from_host(&vec![f32::NAN; N]).unwrap();
    run(bufs);
    check_chain(&bufs[last], &x, last);
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0+"]
fn programmatic_chain_runs_eagerly_and_replays_with_programmatic_edges() {
    let ctx = capturing_ctx();
    let f = add1_pdl(&ctx);
    let stream = Stream::new(&ctx).unwrap();
    // Under a sanitizer every kernel is instrumented: a few replays there, of a shorter chain
    // under racecheck.
    let (nodes, replays) = sized((1000, 50), (1000, 2), (100, 2));
    let mut bufs = buffers(&ctx, nodes + 1);
    let cfg = config();
    check_on_fresh_input(&mut bufs, |bufs| {
        for k in 0..bufs.len() - 1 {
            // SAFETY: as in chain::capture_chain_with.
            unsafe { stream.launch(&f, &cfg, (&bufs[k], &bufs[k + 1], N as i32)) }.unwrap();
        }
        stream.synchronize().unwrap();
    });

    let graph = capture_chain_with(&stream, &f, &config(), &bufs).unwrap();
    let edges = graph.edges().unwrap();
    assert_eq!(edges.len(), nodes - 1);
    assert!(
        edges.iter().all(|e| e.kind == EdgeKind::Programmatic),
        "a capture of programmatic launches made {:?}",
        edges.iter().find(|e| e.kind != EdgeKind::Programmatic)
    );
    let exec = graph.instantiate().unwrap();
    for _ in 0..replays {
        check_on_fresh_input(&mut bufs, |_| {
            exec.launch(&stream).unwrap();
            stream.synchronize().unwrap();
        });
    }
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0+"]
fn programmatic_nodes_rebind_by_node_update_and_exec_update() {
    let ctx = capturing_ctx();
    let f = add1_pdl(&ctx);
    let stream = Stream::new(&ctx).unwrap();
    // Shorter chains under a sanitizer (every kernel instrumented), shortest under racecheck.
    let nodes = sized(200, 60, 30);
    let mut sets = [buffers(&ctx, nodes + 1), buffers(&ctx, nodes + 1)];
    let graph = capture_chain_with(&stream, &f, &config(), &sets[0]).unwrap();
    let nodes = graph.nodes().unwrap();
    let mut exec = graph.instantiate().unwrap();
    for i in 0..6 {
        check_on_fresh_input(&mut sets[i % 2], |set| {
            for (k, node) in nodes.iter().enumerate() {
                // SAFETY: as in chain::capture_chain_with.
                unsafe { exec.set_kernel_args(*node, (&set[k], &set[k + 1], N as i32)) }.unwrap();
            }
            exec.launch(&stream).unwrap();
            stream.synchronize().unwrap();
        });
    }
    for i in 0..4 {
        let g = capture_chain_with(&stream, &f, &config(), &sets[i % 2]).unwrap();
        assert_eq!(exec.update(&g).unwrap(), ExecUpdate::Updated);
        check_on_fresh_input(&mut sets[i % 2], |_| {
            exec.launch(&stream).unwrap();
            stream.synchronize().unwrap();
        });
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn plain_capture_makes_full_edges() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let graph = capture_chain(&stream, &add1(&ctx), &buffers(&ctx, 4)).unwrap();
    let edges = graph.edges().unwrap();
    assert_eq!(edges.len(), 2);
    assert!(edges.iter().all(|e| e.kind == EdgeKind::Full));
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0+"]
fn explicit_programmatic_edges_replay_right() {
    let ctx = capturing_ctx();
    let f = add1_pdl(&ctx);
    let stream = Stream::new(&ctx).unwrap();
    let mut bufs = buffers(&ctx, 3);
    let cfg = LaunchConfig::for_elements(N, 256);
    let mut graph = crate::Graph::new(&ctx).unwrap();
    // SAFETY: add1 touches N elements of two distinct N-element buffers.
    let a = unsafe { graph.add_kernel(&[], &f, &cfg, (&bufs[0], &bufs[1], N as i32)) }.unwrap();
    // SAFETY: as above.
    let b = unsafe { graph.add_kernel(&[], &f, &cfg, (&bufs[1], &bufs[2], N as i32)) }.unwrap();
    // SAFETY: CHAIN_PDL's add1 waits (griddepcontrol.wait) before reading its input.
    unsafe { graph.add_dependencies_of_kind(&[a], &[b], EdgeKind::Programmatic) }.unwrap();
    let edges = graph.edges().unwrap();
    assert_eq!(edges.len(), 1);
    assert_eq!(
        (edges[0].from, edges[0].to, edges[0].kind),
        (a, b, EdgeKind::Programmatic)
    );
    let exec = graph.instantiate().unwrap();
    for _ in 0..20 {
        check_on_fresh_input(&mut bufs, |_| {
            exec.launch(&stream).unwrap();
            stream.synchronize().unwrap();
        });
    }
}
