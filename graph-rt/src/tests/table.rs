//! The argument table: graphs rebound per replay by host writes only, eager refreshes, scalar
//! slots, and the typed errors of bad bindings and launches.

use super::chain::{buffers, N};
use super::{assert_close, capturing_ctx, function, random_f32};
use crate::{
    ArgTable, CaptureMode, DeviceBuffer, Error, GraphExec, LaunchConfig, PinnedHostBuffer, PtrSlot,
    Stream, TableOptions,
};

/// Captures a chain of `steps` table-form `add1` kernels (PDL form when `pdl`) reading and
/// writing slots `k` and `k + 1`, after the table's refresh.
fn capture_table_chain(
    table: &mut ArgTable,
    stream: &Stream,
    steps: usize,
    pdl: bool,
) -> (GraphExec, Vec<PtrSlot<f32>>) {
    let ctx = stream.context();
    let (kernel, name) = if pdl {
        (&graph_rt_kernels::CHAIN_TABLE_PDL, "add1")
    } else {
        (&graph_rt_kernels::CHAIN_TABLE, "add1")
    };
    let f = function(ctx, kernel, name);
    let slots: Vec<PtrSlot<f32>> = (0..=steps).map(|_| table.ptr_slot().unwrap()).collect();
    let base = LaunchConfig::for_elements(N, 256);
    let cfg = if pdl {
        base.programmatic_stream_serialization()
    } else {
        base
    };
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            table.record_refresh(s)?;
            for k in 0..steps {
                // SAFETY: add1_table reads N floats through slot k and writes N through slot
                // k + 1; every slot is bound to a distinct N-float buffer before each launch.
                unsafe { s.launch(&f, &cfg, (&slots[k], &slots[k + 1], N as i32))? };
            }
            Ok(())
        })
        .unwrap();
    (graph.instantiate().unwrap(), slots)
}

/// 100 replays of a 200-kernel chain, every slot bound to fresh buffers before each (with
/// `drop_after_bind`, the intermediate ones dropped by the test right after binding), no
/// synchronization until the end; then every replay's output is checked. Returns the table's
/// wait count.
fn rebind_every_replay(depth: usize, pdl: bool, drop_after_bind: bool) -> u64 {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let options = TableOptions {
        capacity: 256,
        depth,
    };
    let mut table = ArgTable::new(&ctx, options).unwrap();
    // Under compute-sanitizer (run.sh sets GRAPH_RT_SANITIZER) every allocation and launch is
    // instrumented: a smaller chain keeps the sanitize part within its minutes.
    let sanitized = std::env::var_os("GRAPH_RT_SANITIZER").is_some();
    let (steps, replays) = if sanitized { (20, 10) } else { (200, 100) };
    let (exec, slots) = capture_table_chain(&mut table, &stream, steps, pdl);
    // Every buffer made up front: allocating between launches would pace them.
    let nan = PinnedHostBuffer::from_slice(&ctx, &vec![f32::NAN; N]).unwrap();
    let mut sets: Vec<_> = (0..replays)
        .map(|_| {
            let x = random_f32(N);
            let pinned = PinnedHostBuffer::from_slice(&ctx, &x).unwrap();
            (x, pinned, buffers(&ctx, steps + 1))
        })
        .collect();
    let mut kept = Vec::new();
    for (x, pinned, mut bufs) in sets.drain(..) {
        let mut out = bufs.pop().unwrap();
        // SAFETY: the pinned sources are kept (`nan`, `kept`) until the stream is synchronized.
        unsafe {
            out.copy_from_pinned_async(&nan, &stream).unwrap();
            bufs[0].copy_from_pinned_async(&pinned, &stream).unwrap();
        }
        for (slot, buf) in slots.iter().zip(&bufs) {
            table.bind(slot, buf).unwrap();
        }
        table.bind(&slots[steps], &out).unwrap();
        if drop_after_bind {
            drop(std::mem::take(&mut bufs));
        }
        table.launch(&exec, &stream).unwrap();
        kept.push((x, pinned, out, bufs));
    }
    stream.synchronize().unwrap();
    for (x, _, out, _) in &kept {
        let want: Vec<f64> = x.iter().map(|&v| v as f64 + steps as f64).collect();
        assert_close(&out.to_vec().unwrap(), &want, 1e-6);
    }
    assert_eq!(table.stats().launches, replays as u64);
    table.stats().waits
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0+"]
fn table_pdl_chain_rebound_before_every_replay_stays_right() {
    rebind_every_replay(4, true, true);
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0+"]
fn table_ring_of_two_mirrors_waits_and_stays_right() {
    let waits = rebind_every_replay(2, true, false);
    // Under compute-sanitizer launches are nearly synchronous: nothing is in flight to wait for.
    if std::env::var_os("GRAPH_RT_SANITIZER").is_none() {
        assert!(
            waits > 0,
            "100 launches in flight on a ring of 2 never waited"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitized_table_chain_rebound_before_every_replay_stays_right() {
    rebind_every_replay(3, false, true);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn eager_refresh_feeds_scalar_and_pointer_slots() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = function(&ctx, &graph_rt_kernels::AXPY_TABLE, "axpy_f32");
    let mut table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let a = table.scalar_slot::<f32>().unwrap();
    let x = table.ptr_slot::<f32>().unwrap();
    let y = table.ptr_slot::<f32>().unwrap();
    let n = table.scalar_slot::<i32>().unwrap();
    let cfg = LaunchConfig::for_elements(N, 256);
    for alpha in [2.0f32, -0.5, 3.25] {
        let (hx, hy) = (random_f32(N), random_f32(N));
        let dx = DeviceBuffer::from_host(&ctx, &hx).unwrap();
        let dy = DeviceBuffer::from_host(&ctx, &hy).unwrap();
        table.set_scalar(&a, alpha).unwrap();
        table.set_scalar(&n, N as i32).unwrap();
        table.bind(&x, &dx).unwrap();
        table.bind(&y, &dy).unwrap();
        table.refresh(&stream).unwrap();
        // SAFETY: axpy_f32_table reads a, x, y and n through their slots, bound above to N
        // floats each.
        unsafe { stream.launch(&f, &cfg, (&a, &x, &y, &n)).unwrap() };
        let want: Vec<f64> = hx
            .iter()
            .zip(&hy)
            .map(|(&x, &y)| alpha as f64 * x as f64 + y as f64)
            .collect();
        assert_close(&dy.read_on(&stream).unwrap(), &want, 1e-6);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bad_bindings_and_launches_are_typed_errors_and_change_nothing() {
    let ctx = capturing_ctx();
    let (stream, other_stream) = (Stream::new(&ctx).unwrap(), Stream::new(&ctx).unwrap());
    let mut table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let mut other = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let (exec, slots) = capture_table_chain(&mut table, &stream, 2, false);
    let foreign = other.ptr_slot::<f32>().unwrap();
    let bufs = buffers(&ctx, 3);
    let invalid = |r: crate::Result<()>| matches!(r, Err(Error::InvalidArgument { .. }));
    // A launch with an unbound slot; the exec launched directly.
    assert!(invalid(table.launch(&exec, &stream)));
    assert!(invalid(exec.launch(&stream)));
    // A slot of another table; a misaligned address; too short a buffer.
    assert!(invalid(table.bind(&foreign, &bufs[0])));
    let offset = bufs[0].slice(1..).unwrap();
    assert!(invalid(table.bind_view(&slots[0], &offset)));
    let short = DeviceBuffer::<f32>::alloc(&ctx, 8).unwrap();
    let mut sized = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let long = sized.ptr_slot_with::<f32>(16, N).unwrap();
    assert!(invalid(sized.bind(&long, &short)));
    // Slots are fixed once a refresh was recorded.
    assert!(invalid(table.ptr_slot::<f32>().map(drop)));
    assert_eq!(
        table.stats().binds,
        0,
        "a refused binding changed the table"
    );
    // Bound properly it runs; on another stream it is refused.
    for (slot, buf) in slots.iter().zip(&bufs) {
        table.bind(slot, buf).unwrap();
    }
    table.launch(&exec, &stream).unwrap();
    assert!(invalid(table.launch(&exec, &other_stream)));
    stream.synchronize().unwrap();
    drop(other);
}

/// Every way the device could refresh a table more often than the host launches through it is
/// refused: a refresh or table launch on a capturing stream, a second refresh in one graph
/// (recorded twice, captured into a graph that has one, or through a child graph), and a
/// graph holding a refresh launched without the table.
#[test]
#[ignore = "needs a CUDA GPU"]
fn refreshes_outside_the_tables_count_are_refused() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let mut table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let (exec, slots) = capture_table_chain(&mut table, &stream, 2, false);
    let bufs = buffers(&ctx, 3);
    for (slot, buf) in slots.iter().zip(&bufs) {
        table.bind(slot, buf).unwrap();
    }
    let invalid = |r: crate::Result<()>| matches!(r, Err(Error::InvalidArgument { .. }));
    // On a capturing stream: refused, and the capture ends normally.
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            assert!(invalid(table.refresh(s.stream())));
            assert!(invalid(table.launch(&exec, s.stream())));
            Ok(())
        })
        .unwrap();
    drop(graph);
    // Twice in one capture.
    let r = stream.capture(CaptureMode::Global, |s| {
        table.record_refresh(s)?;
        table.record_refresh(s)?;
        Ok(())
    });
    assert!(r.is_err());
    // Into a graph that already refreshes it, and as a child of one.
    fn with_refresh(stream: &Stream, table: &mut ArgTable) -> crate::Graph {
        stream
            .capture(CaptureMode::Global, |s| table.record_refresh(s).map(drop))
            .unwrap()
    }
    let mut parent = with_refresh(&stream, &mut table);
    let child = with_refresh(&stream, &mut table);
    assert!(matches!(
        parent.add_child_graph(&[], &child),
        Err(Error::InvalidArgument { .. })
    ));
    let r = stream.capture_into(&mut parent, &[], CaptureMode::Global, |s| {
        table.record_refresh(s).map(drop)
    });
    assert!(r.is_err());
    // A graph holding the refresh only as a child node is launched through the table only.
    let mut outer = crate::Graph::new(&ctx).unwrap();
    outer
        .add_child_graph(&[], &with_refresh(&stream, &mut table))
        .unwrap();
    let outer_exec = outer.instantiate().unwrap();
    assert!(invalid(outer_exec.launch(&stream)));
    table.launch(&outer_exec, &stream).unwrap();
    table.launch(&exec, &stream).unwrap();
    stream.synchronize().unwrap();
    table.trim();
    assert_eq!(table.stats().launches, 2);
}
