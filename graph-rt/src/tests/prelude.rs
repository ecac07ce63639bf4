//! The in-graph prelude on real graphs: a plain `add1` chain (kernels not in table form)
//! captured twice, its pointers discovered, rebound through table slots on the device (and from
//! the host when asked), and CUDA's rules for device-updatable nodes enforced.

use super::chain::{add1, N};
use super::{assert_close, capturing_ctx, random_f32};
use crate::foreign::{discover_graphs, Dynamic, Prelude, PreludeMode, PreludeOptions};
use crate::table::PtrSlot;
use crate::{
    ArgTable, CaptureMode, DeviceBuffer, Graph, LaunchConfig, Misuse, Stream, TableOptions,
    UpdateFailureKind,
};

const KERNELS: usize = 8;

fn dynamic(b: &DeviceBuffer<f32>) -> Dynamic {
    Dynamic {
        base: b.as_raw(),
        len: b.num_bytes() as u64,
    }
}

struct Chain {
    table: ArgTable,
    slots: Vec<PtrSlot<f32>>,
    graph: Graph,
    prelude: Prelude,
}

/// A chain of `KERNELS` plain `add1` over `KERNELS + 1` buffers, captured twice after the
/// table's refresh, every buffer dynamic; the prelude installed with `options`.
fn chain(ctx: &crate::Context, stream: &Stream, options: PreludeOptions) -> Chain {
    let f = add1(ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let mut table = ArgTable::new(ctx, TableOptions::default()).unwrap();
    let slots: Vec<PtrSlot<f32>> = (0..=KERNELS)
        .map(|_| table.ptr_slot_with(16, N).unwrap())
        .collect();
    let alloc = || -> Vec<DeviceBuffer<f32>> {
        (0..=KERNELS)
            .map(|_| DeviceBuffer::zeroed(ctx, N).unwrap())
            .collect()
    };
    let (a, b) = (alloc(), alloc());
    let mut capture = |bufs: &[DeviceBuffer<f32>]| {
        stream
            .capture(CaptureMode::Global, |s| {
                table.record_refresh(s)?;
                for k in 0..KERNELS {
                    // SAFETY: add1 over N floats of two distinct N-float buffers.
                    unsafe { s.launch(&f, &cfg, (&bufs[k], &bufs[k + 1], N as i32))? };
                }
                Ok(())
            })
            .unwrap()
    };
    let (mut first, second) = (capture(&a), capture(&b));
    let da: Vec<Dynamic> = a.iter().map(dynamic).collect();
    let db: Vec<Dynamic> = b.iter().map(dynamic).collect();
    let (snaps, d) = discover_graphs(&first, &second, &da, &db).unwrap();
    assert_eq!(d.patches.len(), 2 * KERNELS);
    assert!(d.unexplained.is_empty() && d.unseen.is_empty());
    let refs: Vec<_> = slots.iter().map(PtrSlot::erased).collect();
    let prelude = Prelude::install(&mut first, &table, &snaps, &d, &da, &refs, options).unwrap();
    Chain {
        table,
        slots,
        graph: first,
        prelude,
    }
}

/// 20 replays, every buffer fresh before each, no synchronization until the end.
fn replays_stay_right(ctx: &crate::Context, stream: &Stream, c: &mut Chain) {
    let mut exec = c.graph.instantiate().unwrap();
    let mut runs = Vec::new();
    for _ in 0..20 {
        let x = random_f32(N);
        let mut bufs = vec![DeviceBuffer::from_host(ctx, &x).unwrap()];
        bufs.extend((0..KERNELS).map(|_| DeviceBuffer::<f32>::zeroed(ctx, N).unwrap()));
        for (s, b) in c.slots.iter().zip(&bufs) {
            c.table.bind(s, b).unwrap();
        }
        c.prelude.launch(&mut c.table, &mut exec, stream).unwrap();
        runs.push((x, bufs.pop().unwrap()));
    }
    stream.synchronize().unwrap();
    for (x, out) in &runs {
        let want: Vec<f64> = x.iter().map(|&v| v as f64 + KERNELS as f64).collect();
        assert_close(&out.to_vec().unwrap(), &want, 1e-6);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitized_prelude_rebinds_a_plain_chain_on_the_device() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let mut c = chain(&ctx, &stream, PreludeOptions::default());
    println!("prelude: {}", c.prelude.report());
    let (major, minor) = ctx.device().compute_capability().unwrap();
    if major == 8 || (major, minor) == (9, 0) {
        assert_eq!(c.prelude.report().mode, PreludeMode::Device);
    }
    assert_eq!(
        (c.prelude.report().nodes, c.prelude.report().words),
        (KERNELS, 2 * KERNELS)
    );
    replays_stay_right(&ctx, &stream, &mut c);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn prelude_on_the_host_when_asked_gives_the_same_results() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let options = PreludeOptions {
        host_only: true,
        ..Default::default()
    };
    let mut c = chain(&ctx, &stream, options);
    assert!(matches!(c.prelude.report().mode, PreludeMode::Host { .. }));
    replays_stay_right(&ctx, &stream, &mut c);
    // Host mode adds no device-updatable node: the graph clones and instantiates twice.
    assert!(c.graph.try_clone().is_ok());
    // Its execs launch through Prelude::launch only, which rewrites the foreign nodes first: the
    // table's own launch would run them with the addresses of an earlier launch.
    let direct = c.graph.instantiate().unwrap();
    let err = c.table.launch(&direct, &stream).unwrap_err();
    assert_eq!(err.misuse_kind(), Some(&Misuse::NotThroughTable), "{err}");
    drop(direct);
    // An exec updated from a graph since its instantiation is refused: the prelude's words are
    // of the graph it was installed in.
    let mut exec = c.graph.instantiate().unwrap();
    exec.update(&c.graph).unwrap();
    let err = c
        .prelude
        .launch(&mut c.table, &mut exec, &stream)
        .unwrap_err();
    assert_eq!(err.misuse_kind(), Some(&Misuse::ExecUpdated), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_updatable_rules_are_typed_errors() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let mut c = chain(&ctx, &stream, PreludeOptions::default());
    if c.prelude.report().mode != PreludeMode::Device {
        println!("prelude: skipped, {}", c.prelude.report());
        return;
    }
    let mut exec = c.graph.instantiate().unwrap();
    // One exec at a time, no clone, no whole-graph update, no embedding as a child.
    assert!(c.graph.instantiate().is_err());
    assert!(c.graph.try_clone().is_err());
    assert!(exec.update(&c.graph).is_err());
    assert_eq!(
        exec.try_update(&c.graph).unwrap_err().kind,
        UpdateFailureKind::DeviceUpdatable
    );
    let mut outer = Graph::new(&ctx).unwrap();
    assert!(outer.add_child_graph(&[], &c.graph).is_err());
    // A host-side update of a patched node: the next launch uploads first, and the prelude
    // still rewrites the node's pointers from the table.
    // An add1 node (three parameters; the refresh has six).
    let node = crate::foreign::kernel_snapshots(&c.graph)
        .unwrap()
        .into_iter()
        .find(|k| k.params.layout.len() == 3)
        .unwrap()
        .node;
    let junk = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    // SAFETY: add1 over N floats of an N-float buffer (kept to the end); the prelude rewrites
    // both pointers before the node runs.
    unsafe {
        exec.set_kernel_args(node, (&junk, &junk, N as i32))
            .unwrap()
    };
    let x = random_f32(N);
    let mut bufs = vec![DeviceBuffer::from_host(&ctx, &x).unwrap()];
    bufs.extend((0..KERNELS).map(|_| DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap()));
    for (s, b) in c.slots.iter().zip(&bufs) {
        c.table.bind(s, b).unwrap();
    }
    c.prelude.launch(&mut c.table, &mut exec, &stream).unwrap();
    stream.synchronize().unwrap();
    let want: Vec<f64> = x.iter().map(|&v| v as f64 + KERNELS as f64).collect();
    assert_close(&bufs[KERNELS].to_vec().unwrap(), &want, 1e-6);
    // After the exec is dropped, the graph instantiates again.
    drop(exec);
    assert!(c.graph.instantiate().is_ok());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn prelude_install_refuses_bad_slots_and_graphs() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let mut table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let short = table.ptr_slot::<f32>().unwrap(); // accepts any length
    let ok = table.ptr_slot_with::<f32>(16, N).unwrap();
    let (x, y) = (
        [
            DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
            DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
        ],
        [
            DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
            DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
        ],
    );
    // Without the refresh recorded.
    let capture = |i: usize| {
        stream
            .capture(CaptureMode::Global, |s| {
                // SAFETY: add1 over N floats of two distinct N-float buffers.
                unsafe { s.launch(&f, &cfg, (&x[i], &y[i], N as i32))? };
                Ok(())
            })
            .unwrap()
    };
    let (mut g, g2) = (capture(0), capture(1));
    let dyns = |i: usize| [dynamic(&x[i]), dynamic(&y[i])];
    let (snaps, d) = discover_graphs(&g, &g2, &dyns(0), &dyns(1)).unwrap();
    let opts = PreludeOptions::default();
    let good = [ok.erased(), ok.erased()];
    // Snapshots of another graph.
    let (other_snaps, _) = discover_graphs(&g2, &g, &dyns(1), &dyns(0)).unwrap();
    let err =
        Prelude::install(&mut g, &table, &other_snaps, &d, &dyns(0), &good, opts).unwrap_err();
    assert_eq!(err.misuse_kind(), Some(&Misuse::OtherGraph), "{err}");
    let err = Prelude::install(&mut g, &table, &snaps, &d, &dyns(0), &good, opts).unwrap_err();
    assert_eq!(err.misuse_kind(), Some(&Misuse::NoRefresh), "{err}");
    // A slot that accepts buffers shorter than the captured ones.
    let bad = [short.erased(), ok.erased()];
    assert!(Prelude::install(&mut g, &table, &snaps, &d, &dyns(0), &bad, opts).is_err());
    // A slot of another table.
    let mut other = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let foreign = other.ptr_slot_with::<f32>(16, N).unwrap();
    let bad = [foreign.erased(), ok.erased()];
    assert!(Prelude::install(&mut g, &table, &snaps, &d, &dyns(0), &bad, opts).is_err());
    // Slot count mismatch.
    assert!(Prelude::install(&mut g, &table, &snaps, &d, &dyns(0), &good[..1], opts).is_err());
}

/// A kernel the capture left unordered with the refresh (added by hand as a root) is patched
/// too: install orders it after the refresh-and-patch node with a full edge.
#[test]
#[ignore = "needs a CUDA GPU"]
fn prelude_orders_patched_nodes_the_graph_left_unordered() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = add1(&ctx);
    let cfg = LaunchConfig::for_elements(N, 256);
    let mut table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let slots: Vec<PtrSlot<f32>> = (0..2)
        .map(|_| table.ptr_slot_with(16, N).unwrap())
        .collect();
    let pair = || {
        [
            DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
            DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
        ]
    };
    let (a, b) = (pair(), pair());
    let mut build = |bufs: &[DeviceBuffer<f32>; 2]| {
        let mut g = stream
            .capture(CaptureMode::Global, |s| {
                table.record_refresh(s)?;
                Ok(())
            })
            .unwrap();
        // SAFETY: add1 over N floats of two distinct N-float buffers.
        unsafe {
            g.add_kernel(&[], &f, &cfg, (&bufs[0], &bufs[1], N as i32))
                .unwrap()
        };
        g
    };
    let (mut first, second) = (build(&a), build(&b));
    assert!(first.edges().unwrap().is_empty());
    let (da, db): (Vec<Dynamic>, Vec<Dynamic>) = (
        a.iter().map(dynamic).collect(),
        b.iter().map(dynamic).collect(),
    );
    let (snaps, d) = discover_graphs(&first, &second, &da, &db).unwrap();
    let refs: Vec<_> = slots.iter().map(PtrSlot::erased).collect();
    let mut prelude = Prelude::install(
        &mut first,
        &table,
        &snaps,
        &d,
        &da,
        &refs,
        PreludeOptions::default(),
    )
    .unwrap();
    if prelude.report().mode == PreludeMode::Device {
        let edges = first.edges().unwrap();
        assert_eq!(edges.len(), 1, "{edges:?}");
        assert_eq!(edges[0].kind, crate::EdgeKind::Full);
    }
    let mut exec = first.instantiate().unwrap();
    let mut runs = Vec::new();
    for _ in 0..10 {
        let x = random_f32(N);
        let (xi, yi) = (
            DeviceBuffer::from_host(&ctx, &x).unwrap(),
            DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
        );
        table.bind(&slots[0], &xi).unwrap();
        table.bind(&slots[1], &yi).unwrap();
        prelude.launch(&mut table, &mut exec, &stream).unwrap();
        runs.push((x, xi, yi));
    }
    stream.synchronize().unwrap();
    for (x, _, y) in &runs {
        let want: Vec<f64> = x.iter().map(|&v| v as f64 + 1.0).collect();
        assert_close(&y.to_vec().unwrap(), &want, 1e-6);
    }
}
