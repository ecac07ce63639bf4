//! Node identity across exec updates: handles a capture gives back, paired with the exec's
//! nodes after an in-place update, a re-instantiation and a clone; refused where unknown.

use super::chain::{add1, buffers, fresh_input, replay, N};
use super::{assert_close, capturing_ctx, function};
use crate::{
    CaptureMode, CapturedNode, DeviceBuffer, Error, ExecUpdate, Function, Graph, GraphExec,
    LaunchConfig, Node, NodeKind, Stream, UpdateFailureKind,
};

/// One diamond's buffers: input `x`, the two branches `a` and `c`, and `y` for rebinding.
struct Set {
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
    a: DeviceBuffer<f32>,
    c: DeviceBuffer<f32>,
}

fn set(ctx: &crate::Context) -> Set {
    let mut b = buffers(ctx, 4);
    let (c, a, y, x) = (b.pop(), b.pop(), b.pop(), b.pop());
    Set {
        x: x.unwrap(),
        y: y.unwrap(),
        a: a.unwrap(),
        c: c.unwrap(),
    }
}

/// The diamond's three kernel nodes: `a = x + 1` on a forked stream, `c = x + 1` on the
/// capturing one, then `c = alpha * a + c`.
struct Diamond {
    graph: Graph,
    a: CapturedNode,
    c: CapturedNode,
    axpy: CapturedNode,
}

/// Captures `c = (x + 1) + (x + 1)`; `cooperative` makes the last launch cooperative (an exec
/// update cannot change that, so updating to it re-instantiates with the same topology).
fn diamond(
    streams: (&Stream, &Stream),
    (f, g): (&Function, &Function),
    s: &mut Set,
    cooperative: bool,
) -> Diamond {
    let cfg = LaunchConfig::for_elements(N, 256);
    let last = if cooperative { cfg.cooperative() } else { cfg };
    let mut nodes = None;
    let graph = streams
        .0
        .capture(CaptureMode::Global, |sc| {
            sc.fork(streams.1)?;
            // SAFETY: N-element distinct buffers throughout.
            let (a, c) = unsafe {
                (
                    sc.launch_on(streams.1, f, &cfg, (&s.x, &mut s.a, N as i32))?,
                    sc.launch(f, &cfg, (&s.x, &mut s.c, N as i32))?,
                )
            };
            sc.join(streams.1)?;
            // SAFETY: as above.
            let axpy = unsafe { sc.launch(g, &last, (1.0f32, &s.a, &mut s.c, N as i32))? };
            nodes = Some((a, c, axpy));
            Ok(())
        })
        .unwrap();
    let (a, c, axpy) = nodes.unwrap();
    Diamond { graph, a, c, axpy }
}

/// Rebinds node `c` to `y + 1` and the axpy to `alpha = 3`, through the given handles, then
/// checks `c = 3 (x + 1) + (y + 1)`: rebinding the wrong branch would give `3 (y + 1) + (x + 1)`.
fn rebind_and_check(exec: &mut GraphExec, stream: &Stream, (c, axpy): (Node, Node), s: &mut Set) {
    let (hx, hy) = (fresh_input(&mut s.x), fresh_input(&mut s.y));
    // SAFETY: N-element distinct buffers; add1 and axpy signatures.
    unsafe {
        exec.set_kernel_args(c, (&s.y, &mut s.c, N as i32)).unwrap();
        exec.set_kernel_args(axpy, (3.0f32, &s.a, &mut s.c, N as i32))
            .unwrap();
    }
    s.c.fill_u32(0x7fc0_0000).unwrap();
    replay(exec, stream);
    let want: Vec<f64> = hx
        .iter()
        .zip(&hy)
        .map(|(&x, &y)| 3.0 * (x as f64 + 1.0) + (y as f64 + 1.0))
        .collect();
    assert_close(&s.c.to_vec().unwrap(), &want, 1e-6);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn captured_node_handles_rebind_the_right_nodes_across_update_reinstantiation_and_clone() {
    let ctx = capturing_ctx();
    let (s0, s1) = (Stream::new(&ctx).unwrap(), Stream::new(&ctx).unwrap());
    let fg = (
        &add1(&ctx),
        &function(&ctx, &graph_rt_kernels::AXPY, "axpy_f32"),
    );
    let (mut s1set, mut s2set, mut s3set) = (set(&ctx), set(&ctx), set(&ctx));
    let d1 = diamond((&s0, &s1), fg, &mut s1set, false);
    let mut exec = d1.graph.instantiate().unwrap();
    let node = |d: &Diamond, n| d.graph.node(n).unwrap();

    // In place: the update's handles (and the exec's own) name the exec's nodes.
    let d2 = diamond((&s0, &s1), fg, &mut s2set, false);
    assert_eq!(exec.update(&d2.graph).unwrap(), ExecUpdate::Updated);
    rebind_and_check(
        &mut exec,
        &s0,
        (node(&d2, d2.c), node(&d2, d2.axpy)),
        &mut s2set,
    );
    rebind_and_check(
        &mut exec,
        &s0,
        (node(&d1, d1.c), node(&d1, d1.axpy)),
        &mut s2set,
    );

    // Re-instantiated with the same topology: the graph run before names the new nodes.
    let d3 = diamond((&s0, &s1), fg, &mut s3set, true);
    match exec.update(&d3.graph).unwrap() {
        ExecUpdate::Reinstantiated(f) => {
            assert_ne!(f.kind, UpdateFailureKind::TopologyChanged, "{f}");
            rebind_and_check(
                &mut exec,
                &s0,
                (node(&d2, d2.c), node(&d2, d2.axpy)),
                &mut s3set,
            );
        }
        ExecUpdate::Updated => {}
    }
    rebind_and_check(
        &mut exec,
        &s0,
        (node(&d3, d3.c), node(&d3, d3.axpy)),
        &mut s3set,
    );

    // A clone pairs with its original; node_in_clone finds a node's copy.
    let clone = d1.graph.try_clone().unwrap();
    let mut exec1 = d1.graph.instantiate().unwrap();
    assert_eq!(exec1.update(&clone).unwrap(), ExecUpdate::Updated);
    let in_clone = |n| clone.node_in_clone(node(&d1, n)).unwrap();
    rebind_and_check(
        &mut exec1,
        &s0,
        (in_clone(d1.c), in_clone(d1.axpy)),
        &mut s1set,
    );
    assert_eq!(clone.node_kind(in_clone(d1.a)).unwrap(), NodeKind::Kernel);
    // A handle of a capture into another graph is refused.
    assert!(d2.graph.node(d1.c).is_err());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn per_node_update_after_in_place_update_of_an_unknown_order_fork_join_is_refused() {
    let ctx = capturing_ctx();
    let (s0, s1) = (Stream::new(&ctx).unwrap(), Stream::new(&ctx).unwrap());
    let (f, g) = (
        add1(&ctx),
        function(&ctx, &graph_rt_kernels::AXPY, "axpy_f32"),
    );
    let cfg = LaunchConfig::for_elements(N, 256);
    // One branch is launched on the forked stream directly, not through the scope: graph-rt
    // does not see that node made, so the graph's creation order is unknown.
    let capture = |s: &mut Set| -> Graph {
        s0.capture(CaptureMode::Global, |sc| {
            sc.fork(&s1)?;
            // SAFETY: N-element distinct buffers, kept alive by the test past every replay.
            unsafe {
                s1.launch(&f, &cfg, (&s.x, &mut s.a, N as i32))?;
                sc.launch(&f, &cfg, (&s.x, &mut s.c, N as i32))?;
            }
            sc.join(&s1)?;
            // SAFETY: as above.
            unsafe { sc.launch(&g, &cfg, (1.0f32, &s.a, &mut s.c, N as i32)) }.map(drop)
        })
        .unwrap()
    };
    let (mut one, mut two) = (set(&ctx), set(&ctx));
    let g1 = capture(&mut one);
    let old_nodes = g1.nodes().unwrap();
    let mut exec = g1.instantiate().unwrap();
    let g2 = capture(&mut two);
    assert_eq!(exec.update(&g2).unwrap(), ExecUpdate::Updated);
    let kernel = *old_nodes
        .iter()
        .find(|n| g1.node_kind(**n).unwrap() == NodeKind::Kernel)
        .unwrap();
    // SAFETY: refused before anything reaches the driver.
    let refused = unsafe { exec.set_kernel_args(kernel, (&one.x, &mut one.a, N as i32)) };
    assert!(
        matches!(refused, Err(Error::NodeIdentityUnknown { .. })),
        "{refused:?}"
    );
    // The exec still runs the update's bindings, untouched by the refused call.
    let h = fresh_input(&mut two.x);
    one.c.fill_u32(0x7fc0_0000).unwrap();
    replay(&exec, &s0);
    let want: Vec<f64> = h.iter().map(|&v| 2.0 * (v as f64 + 1.0)).collect();
    assert_close(&two.c.to_vec().unwrap(), &want, 1e-6);
    assert!(one.c.to_vec().unwrap().iter().all(|v| v.is_nan()));
}
