//! The argument table: graphs rebound per replay by host writes only, eager refreshes, scalar
//! slots, and the typed errors of bad bindings and launches.

use super::chain::{buffers, N};
use super::{assert_close, capturing_ctx, function, random_f32, sized};
use crate::table::PtrSlot;
use crate::{
    ArgTable, CaptureMode, DeviceBuffer, GraphExec, LaunchConfig, Misuse, PinnedHostBuffer, Stream,
    TableOptions,
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
    let (steps, replays) = sized((200, 100), (20, 10), (10, 6));
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
    // Initialized (poisoned): the launch that succeeds reads the first.
    let bufs = buffers(&ctx, 3);
    let misuse = |r: crate::Result<()>| r.err().and_then(|e| e.misuse_kind().cloned());
    // A launch with an unbound slot; the exec launched directly.
    assert_eq!(
        misuse(table.launch(&exec, &stream)),
        Some(Misuse::Unbound { slot: 0 })
    );
    assert_eq!(misuse(exec.launch(&stream)), Some(Misuse::NotThroughTable));
    // A slot of another table; a misaligned address; too short a buffer.
    assert_eq!(
        misuse(table.bind(&foreign, &bufs[0])),
        Some(Misuse::OtherTable)
    );
    let offset = bufs[0].slice(1..).unwrap();
    assert_eq!(
        misuse(table.bind_view(&slots[0], &offset)),
        Some(Misuse::Misaligned {
            addr: offset.as_raw(),
            align: 16
        })
    );
    let short = DeviceBuffer::<f32>::alloc(&ctx, 8).unwrap();
    let mut sized = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let long = sized.ptr_slot_with::<f32>(16, N).unwrap();
    assert_eq!(
        misuse(sized.bind(&long, &short)),
        Some(Misuse::TooShort { len: 8, min: N })
    );
    // Slots are fixed once a refresh was recorded.
    assert_eq!(
        misuse(table.ptr_slot::<f32>().map(drop)),
        Some(Misuse::TableSealed)
    );
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
    assert_eq!(
        misuse(table.launch(&exec, &other_stream)),
        Some(Misuse::OtherStream)
    );
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
    // Initialized (poisoned): the launches that succeed read the first.
    let bufs = buffers(&ctx, 3);
    for (slot, buf) in slots.iter().zip(&bufs) {
        table.bind(slot, buf).unwrap();
    }
    let misuse = |r: crate::Result<()>| r.err().and_then(|e| e.misuse_kind().cloned());
    // On a capturing stream: refused, and the capture ends normally.
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            assert_eq!(misuse(table.refresh(s.stream())), Some(Misuse::Capturing));
            assert_eq!(
                misuse(table.launch(&exec, s.stream())),
                Some(Misuse::Capturing)
            );
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
    assert_eq!(
        parent
            .add_child_graph(&[], &child)
            .unwrap_err()
            .misuse_kind(),
        Some(&Misuse::SecondRefresh)
    );
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
    assert_eq!(
        misuse(outer_exec.launch(&stream)),
        Some(Misuse::NotThroughTable)
    );
    table.launch(&outer_exec, &stream).unwrap();
    table.launch(&exec, &stream).unwrap();
    stream.synchronize().unwrap();
    table.trim();
    assert_eq!(table.stats().launches, 2);
}

/// A table of `2 × nodes` slots (depth 4) read by a graph of `nodes` independent table-form
/// `add1` kernels over `elems` floats: node k reads slot 2k and writes slot 2k + 1, after the
/// table's refresh.
pub(super) fn independent_add1s(
    stream: &Stream,
    nodes: usize,
    elems: usize,
) -> (ArgTable, Vec<PtrSlot<f32>>, GraphExec) {
    let ctx = stream.context();
    let options = TableOptions {
        capacity: 2 * nodes,
        depth: 4,
    };
    let mut table = ArgTable::new(ctx, options).unwrap();
    let slots: Vec<PtrSlot<f32>> = (0..2 * nodes).map(|_| table.ptr_slot().unwrap()).collect();
    let f = function(ctx, &graph_rt_kernels::CHAIN_TABLE, "add1");
    let cfg = LaunchConfig::for_elements(elems, 256);
    let exec = stream
        .capture(CaptureMode::Global, |s| {
            table.record_refresh(s)?;
            for k in 0..nodes {
                // SAFETY: add1_table reads `elems` floats through slot 2k and writes `elems`
                // through slot 2k + 1; the callers bind both to buffers or views that long.
                unsafe { s.launch(&f, &cfg, (&slots[2 * k], &slots[2 * k + 1], elems as i32))? };
            }
            Ok(())
        })
        .unwrap()
        .instantiate()
        .unwrap();
    (table, slots, exec)
}

/// A table of 1,000 slots (500 table-form `add1` nodes, each reading slot 2k and writing slot
/// 2k + 1), a random subset of the slots rebound before each of 200 replays — inputs to one of
/// eight constant buffers, outputs to fresh views of one arena — with no synchronization until
/// the end. Then every output view holds what the last replay that wrote it computed: each
/// replay's rebinding reached the device whatever else was staged and in flight. (Under a
/// sanitizer fewer replays, and under racecheck 160 slots: every kernel is instrumented.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn random_subsets_of_1000_slots_rebound_before_each_of_200_replays_stay_right() {
    use rand::{Rng, SeedableRng};
    const ELEMS: usize = 256;
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    // More replays than the table's depth (4) in every case: the ring of mirrors wraps.
    let (nodes, replays) = sized((500, 200), (500, 6), (80, 6));
    let (mut table, slots, exec) = independent_add1s(&stream, nodes, ELEMS);
    let inputs: Vec<DeviceBuffer<f32>> = (0..8)
        .map(|j| DeviceBuffer::from_host(&ctx, &vec![10.0 * (j + 1) as f32; ELEMS]).unwrap())
        .collect();
    // Views enough for every output slot rebound in every replay, and the first binding.
    let views = nodes * (replays + 1);
    let arena = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; views * ELEMS]).unwrap();
    let view = |v: usize| arena.slice(v * ELEMS..(v + 1) * ELEMS).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1000);
    // Per node: the input it reads and the view it writes; per view: what was last written.
    let mut input_of = vec![0usize; nodes];
    let mut view_of = vec![0usize; nodes];
    let mut next_view = 0;
    let mut last = vec![None::<f32>; views];
    for k in 0..nodes {
        input_of[k] = rng.random_range(0..inputs.len());
        table.bind(&slots[2 * k], &inputs[input_of[k]]).unwrap();
        view_of[k] = next_view;
        table
            .bind_view(&slots[2 * k + 1], &view(next_view))
            .unwrap();
        next_view += 1;
    }
    let mut rebound = 0usize;
    for _ in 0..replays {
        let count = rng.random_range(1..=2 * nodes);
        for _ in 0..count {
            let i = rng.random_range(0..2 * nodes);
            let k = i / 2;
            if i % 2 == 0 {
                input_of[k] = rng.random_range(0..inputs.len());
                table.bind(&slots[i], &inputs[input_of[k]]).unwrap();
            } else if next_view < views {
                view_of[k] = next_view;
                table.bind_view(&slots[i], &view(next_view)).unwrap();
                next_view += 1;
            }
        }
        rebound += count;
        table.launch(&exec, &stream).unwrap();
        for k in 0..nodes {
            last[view_of[k]] = Some(10.0 * (input_of[k] + 1) as f32 + 1.0);
        }
    }
    stream.synchronize().unwrap();
    let got = arena.to_vec().unwrap();
    for (v, want) in last.iter().enumerate() {
        let got = &got[v * ELEMS..(v + 1) * ELEMS];
        match want {
            Some(w) => assert!(
                got.iter().all(|g| g == w),
                "view {v}: want {w}, got {:?}",
                &got[..4]
            ),
            None => assert!(got.iter().all(|g| g.is_nan()), "view {v} was written"),
        }
    }
    assert_eq!(table.stats().launches, replays as u64);
    assert!(rebound > replays, "{rebound} rebindings");
}
