//! NCCL on one GPU (communicators of one rank, the probe of what a captured collective is, a
//! step rebinding one every call, timeouts, misuse) and on two (`two_gpus_*`: results against
//! the single-GPU reference, a step on each GPU rebound every call, the probe's figures). The
//! two-GPU tests fail with a clear message on a machine with one GPU; the suite's `run.sh`
//! skips them there and says so.

use std::time::{Duration, Instant};

use super::chain::{add1, buffers, fresh_input, N};
use super::{capturing_ctx, ctx, random_f32, sized};
use crate::foreign::{discover_graphs, kernel_snapshots, Dynamic, PreludeMode};
use crate::nccl::{group, CommOptions, Communicator, ReduceOp, UniqueId};
use crate::step::{Step, StepMode, StepOptions, StepParams};
use crate::{CaptureMode, Context, DeviceBuffer, Error, LaunchConfig, Misuse, NodeKind, Stream};

fn one_rank(ctx: &Context) -> Communicator {
    let mut comms = Communicator::init_all(std::slice::from_ref(ctx), &CommOptions::default())
        .unwrap_or_else(|e| {
            panic!("no NCCL communicator (GRAPH_RT_NCCL, PyTorch's wheel or libnccl.so.2): {e}")
        });
    comms.pop().unwrap()
}

fn misuse(e: Error) -> Misuse {
    e.misuse_kind()
        .cloned()
        .unwrap_or_else(|| panic!("not a misuse: {e}"))
}

fn dynamic<T: bytemuck::Pod>(b: &DeviceBuffer<T>) -> Dynamic {
    Dynamic {
        base: b.as_raw(),
        len: b.num_bytes() as u64,
    }
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_one_rank_collectives_give_what_one_rank_would() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let comm = one_rank(&ctx);
    let (major, minor, _) = comm.nccl_version();
    assert!((major, minor) >= (2, 14));
    eprintln!(
        "NCCL {:?} from {}",
        comm.nccl_version(),
        comm.library_path().display()
    );
    assert_eq!((comm.rank(), comm.nranks()), (0, 1));
    let x_host = random_f32(N);
    let x = DeviceBuffer::from_host(&ctx, &x_host).unwrap();
    for op in [
        ReduceOp::Sum,
        ReduceOp::Avg,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ] {
        let mut y = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
        comm.all_reduce(&x, &mut y, op, &stream).unwrap();
        comm.synchronize(&stream, Duration::from_secs(30)).unwrap();
        assert_eq!(y.read_on(&stream).unwrap(), x_host, "{op:?} over one rank");
    }
    let b_host: Vec<half::bf16> = x_host.iter().map(|v| half::bf16::from_f32(*v)).collect();
    let mut b = DeviceBuffer::from_host(&ctx, &b_host).unwrap();
    comm.all_reduce_in_place(&mut b, ReduceOp::Sum, &stream)
        .unwrap();
    let ints: Vec<i32> = (0..N as i32).collect();
    let xi = DeviceBuffer::from_host(&ctx, &ints).unwrap();
    let mut gathered = DeviceBuffer::<i32>::zeroed(&ctx, N).unwrap();
    comm.all_gather(&xi, &mut gathered, &stream).unwrap();
    let mut scattered = DeviceBuffer::<i32>::zeroed(&ctx, N).unwrap();
    comm.reduce_scatter(&xi, &mut scattered, ReduceOp::Sum, &stream)
        .unwrap();
    // A send to oneself and its receive, paired in one group.
    let mut received = DeviceBuffer::<i32>::zeroed(&ctx, N).unwrap();
    group(|| {
        comm.send(&xi, 0, &stream)?;
        comm.recv(&mut received, 0, &stream)
    })
    .unwrap();
    comm.synchronize(&stream, Duration::from_secs(30)).unwrap();
    assert_eq!(b.read_on(&stream).unwrap(), b_host);
    assert_eq!(gathered.read_on(&stream).unwrap(), ints);
    assert_eq!(scattered.read_on(&stream).unwrap(), ints);
    assert_eq!(received.read_on(&stream).unwrap(), ints);
}

/// A group's calls are parked (their buffers kept until the device is done) after the group's
/// end with each stream's own context bound, whatever the calls left current: driving every
/// rank of a process from one thread leaves the last rank's device current, and the event that
/// marks rank 0's calls must be of rank 0's context. Here the group leaves no context current.
#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_a_group_parks_its_calls_in_their_streams_context_whatever_is_current() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let comm = one_rank(&ctx);
    let x = DeviceBuffer::from_host(&ctx, &vec![1.5f32; N]).unwrap();
    let mut y = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    group(|| {
        comm.all_reduce(&x, &mut y, ReduceOp::Sum, &stream)?;
        // SAFETY: only unbinds this thread's context; graph-rt binds before each of its calls.
        let r = unsafe { graph_rt_sys::cuCtxSetCurrent(std::ptr::null_mut()) };
        assert_eq!(r.ok(), Some(graph_rt_sys::CUresult::CUDA_SUCCESS));
        Ok(())
    })
    .unwrap();
    comm.synchronize(&stream, Duration::from_secs(30)).unwrap();
    assert_eq!(y.read_on(&stream).unwrap(), vec![1.5f32; N]);
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_the_probe_a_captured_collective_is_kernel_nodes_whose_buffers_discovery_finds() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let comm = one_rank(&ctx);
    let xs: Vec<DeviceBuffer<f32>> = (0..2)
        .map(|_| DeviceBuffer::from_host(&ctx, &random_f32(N)).unwrap())
        .collect();
    let mut ys = buffers(&ctx, 2);
    // Warm-up outside the capture: NCCL connects lazily.
    comm.all_reduce(&xs[0], &mut ys[0], ReduceOp::Avg, &stream)
        .unwrap();
    comm.synchronize(&stream, Duration::from_secs(30)).unwrap();
    for op in [ReduceOp::Avg, ReduceOp::Sum] {
        let mut graphs = Vec::new();
        for (x, y) in xs.iter().zip(ys.iter_mut()) {
            let g = stream
                .capture(CaptureMode::ThreadLocal, |s| {
                    comm.record(s, |c| c.all_reduce(x, y, op, s.stream()))
                })
                .unwrap();
            graphs.push(g);
        }
        let kinds: Vec<NodeKind> = graphs[0]
            .nodes()
            .unwrap()
            .into_iter()
            .map(|n| graphs[0].node_kind(n).unwrap())
            .collect();
        let snaps = kernel_snapshots(&graphs[0]).unwrap();
        let extra = snaps.iter().filter(|s| s.via_extra).count();
        let dyn_a = [dynamic(&xs[0]), dynamic(&ys[0])];
        let dyn_b = [dynamic(&xs[1]), dynamic(&ys[1])];
        let (_, found) = discover_graphs(&graphs[0], &graphs[1], &dyn_a, &dyn_b).unwrap();
        eprintln!(
            "probe, one rank, {op:?}: nodes {kinds:?}; {} kernel nodes ({extra} through `extra`); discovery: {} words to patch, {} unexplained, buffers unseen {:?}",
            snaps.len(),
            found.patches.len(),
            found.unexplained.len(),
            found.unseen
        );
        if op == ReduceOp::Avg {
            // NCCL reduces one rank's average with a kernel of its own, whose parameters hold
            // both buffers: discovery explains every difference.
            assert!(
                !snaps.is_empty(),
                "no kernel node for a one-rank average: {kinds:?}"
            );
            assert!(found.unexplained.is_empty(), "{:?}", found.unexplained);
            assert!(
                found.unseen.is_empty(),
                "buffers no kernel reads: {:?}",
                found.unseen
            );
        }
        // Each graph replays what it captured.
        for (g, (x, y)) in graphs.iter().zip(xs.iter().zip(ys.iter_mut())) {
            y.fill_u32(f32::NAN.to_bits()).unwrap();
            let exec = g.instantiate().unwrap();
            exec.launch(&stream).unwrap();
            stream.synchronize().unwrap();
            assert_eq!(y.read_on(&stream).unwrap(), x.read_on(&stream).unwrap());
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_a_step_with_a_kernel_and_an_all_reduce_is_rebound_to_fresh_buffers_every_call() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let comm = one_rank(&ctx);
    let f = add1(&ctx);
    let mut p = StepParams::new(&ctx, 4).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    let mut first = buffers(&ctx, 2);
    fresh_input(&mut first[0]);
    p.bind(&x, &first[0]).unwrap();
    p.bind(&y, &first[1]).unwrap();
    let mut t = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let mut step = Step::new(&stream, p, StepOptions::default(), |s| {
        let (xb, mut yb) = (s.buffer(&x)?, s.buffer(&y)?);
        // SAFETY: add1 over N floats of two distinct N-float buffers that outlive the step.
        unsafe {
            s.launch(
                &f,
                &LaunchConfig::for_elements(N, 256),
                (&xb, &mut t, N as i32),
            )?
        };
        s.nccl(&comm, |c| {
            c.all_reduce(&t, &mut yb, ReduceOp::Avg, s.stream())
        })
    })
    .unwrap();
    match step.mode() {
        StepMode::Graph {
            patched_words,
            prelude,
            ..
        } => {
            eprintln!("step: {patched_words} foreign words patched, prelude {prelude:?}");
            assert!(*patched_words >= 1);
            assert_eq!(prelude.as_ref(), Some(&PreludeMode::Device));
        }
        mode => panic!("the step runs as {mode:?}"),
    }
    let calls = sized(1000, 40, 10);
    let mut kept = Vec::new();
    for call in 0..calls {
        let mut b = buffers(&ctx, 2);
        let input = fresh_input(&mut b[0]);
        step.bind(&x, &b[0]).unwrap();
        step.bind(&y, &b[1]).unwrap();
        step.run().unwrap();
        if call % 10 == 0 {
            kept.push((input, b));
        }
    }
    comm.synchronize(&stream, Duration::from_secs(60)).unwrap();
    for (input, b) in kept {
        let want: Vec<f32> = input.iter().map(|v| v + 1.0).collect();
        assert_eq!(b[1].read_on(&stream).unwrap(), want);
    }
}

/// Rank 0 of two on `ctx`, alone: its init waits for a rank 1 that never comes.
fn lonely_rank(
    ctx: &Context,
    id: UniqueId,
    options: CommOptions,
) -> std::thread::JoinHandle<(crate::Result<()>, Duration)> {
    let ctx = ctx.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        let r = Communicator::init_rank(&ctx, &id, 0, 2, &options);
        (r.map(drop), start.elapsed())
    })
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_a_rank_whose_peer_never_comes_times_out() {
    let ctx = ctx();
    let options = CommOptions {
        init_timeout: Duration::from_secs(3),
        ..CommOptions::default()
    };
    let (r, took) = lonely_rank(&ctx, UniqueId::new().unwrap(), options)
        .join()
        .unwrap();
    match r {
        Err(Error::Timeout { call, after, .. }) => {
            assert_eq!(call, "ncclCommInitRankConfig");
            assert_eq!(after, options.init_timeout);
            // The abort's own time on top (long under a sanitizer): it returns, it does not hang.
            assert!(
                took < options.init_timeout + Duration::from_secs(60),
                "took {took:?}"
            );
            eprintln!(
                "a rank alone: Timeout after {took:?} (deadline {:?})",
                options.init_timeout
            );
        }
        r => panic!("a rank alone made a communicator of two: {r:?}"),
    }
    // The device is free again for a new communicator.
    drop(one_rank(&ctx));
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_a_second_rank_of_one_communicator_on_the_same_gpu_is_refused() {
    let ctx = ctx();
    let id = UniqueId::new().unwrap();
    let options = CommOptions {
        init_timeout: Duration::from_secs(2),
        ..CommOptions::default()
    };
    let lonely = lonely_rank(&ctx, id, options);
    std::thread::sleep(Duration::from_millis(300));
    // Rank 1 of the same communicator on the same GPU, while rank 0's init waits: refused
    // before NCCL sees it.
    let e = Communicator::init_rank(&ctx, &id, 1, 2, &options).unwrap_err();
    assert_eq!(misuse(e), Misuse::RankPerGpu { device: 0 });
    assert!(matches!(
        lonely.join().unwrap().0,
        Err(Error::Timeout { .. })
    ));
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_misuse_is_refused_with_its_variant() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let e =
        Communicator::init_all(&[ctx.clone(), ctx.clone()], &CommOptions::default()).unwrap_err();
    assert_eq!(misuse(e), Misuse::RankPerGpu { device: 0 });
    let id = UniqueId::new().unwrap();
    let e = Communicator::init_rank(&ctx, &id, 1, 1, &CommOptions::default()).unwrap_err();
    assert_eq!(misuse(e), Misuse::BadRank { rank: 1, nranks: 1 });
    let comm = one_rank(&ctx);
    let x = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    let mut short = DeviceBuffer::<f32>::zeroed(&ctx, N - 1).unwrap();
    let e = comm
        .all_reduce(&x, &mut short, ReduceOp::Sum, &stream)
        .unwrap_err();
    assert_eq!(
        misuse(e),
        Misuse::LengthMismatch {
            ours: N - 1,
            theirs: N
        }
    );
    let e = comm.all_gather(&x, &mut short, &stream).unwrap_err();
    assert!(matches!(misuse(e), Misuse::LengthMismatch { .. }));
    let e = comm.send(&x, 1, &stream).unwrap_err();
    assert_eq!(misuse(e), Misuse::BadRank { rank: 1, nranks: 1 });
    // On a capturing stream outside `record`: the graph would keep nothing alive.
    let mut y = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    let r = stream.capture(CaptureMode::ThreadLocal, |_| {
        comm.all_reduce(&x, &mut y, ReduceOp::Sum, &stream)
    });
    assert_eq!(misuse(r.unwrap_err()), Misuse::Capturing);
    // The stream and the communicator still work.
    comm.all_reduce(&x, &mut y, ReduceOp::Sum, &stream).unwrap();
    comm.synchronize(&stream, Duration::from_secs(30)).unwrap();
    // Aborted: every later call is refused.
    comm.abort().unwrap();
    let e = comm
        .all_reduce(&x, &mut y, ReduceOp::Sum, &stream)
        .unwrap_err();
    assert_eq!(misuse(e), Misuse::Aborted);
}

/// Two contexts, on devices 0 and 1, or a clear failure on a machine with fewer GPUs.
pub(super) fn two_gpus() -> (super::TestContext, Context) {
    let count = crate::Device::count().unwrap();
    assert!(
        count >= 2,
        "this test needs two GPUs; this machine has {count} (run.sh skips two_gpus_* there)"
    );
    (capturing_ctx(), Context::new(1).unwrap())
}

#[test]
#[ignore = "needs two CUDA GPUs and NCCL"]
fn two_gpus_collectives_equal_the_single_gpu_reference() {
    let (c0, c1) = two_gpus();
    let contexts = [c0.clone(), c1.clone()];
    let comms = Communicator::init_all(&contexts, &CommOptions::default()).unwrap();
    let streams: Vec<Stream> = contexts.iter().map(|c| Stream::new(c).unwrap()).collect();
    let hosts: Vec<Vec<f32>> = (0..2).map(|_| random_f32(N)).collect();
    let xs: Vec<DeviceBuffer<f32>> = contexts
        .iter()
        .zip(&hosts)
        .map(|(c, h)| DeviceBuffer::from_host(c, h).unwrap())
        .collect();
    let mut sums: Vec<DeviceBuffer<f32>> = contexts
        .iter()
        .map(|c| DeviceBuffer::zeroed(c, N).unwrap())
        .collect();
    let mut maxes: Vec<DeviceBuffer<f32>> = contexts
        .iter()
        .map(|c| DeviceBuffer::zeroed(c, N).unwrap())
        .collect();
    let mut gathered: Vec<DeviceBuffer<f32>> = contexts
        .iter()
        .map(|c| DeviceBuffer::zeroed(c, 2 * N).unwrap())
        .collect();
    let mut scattered: Vec<DeviceBuffer<f32>> = contexts
        .iter()
        .map(|c| DeviceBuffer::zeroed(c, N / 2).unwrap())
        .collect();
    let mut swapped: Vec<DeviceBuffer<f32>> = contexts
        .iter()
        .map(|c| DeviceBuffer::zeroed(c, N).unwrap())
        .collect();
    group(|| {
        for r in 0..2 {
            let (c, s) = (&comms[r], &streams[r]);
            c.all_reduce(&xs[r], &mut sums[r], ReduceOp::Sum, s)?;
            c.all_reduce(&xs[r], &mut maxes[r], ReduceOp::Max, s)?;
            c.all_gather(&xs[r], &mut gathered[r], s)?;
            c.reduce_scatter(&xs[r], &mut scattered[r], ReduceOp::Sum, s)?;
            c.send(&xs[r], 1 - r, s)?;
            c.recv(&mut swapped[r], 1 - r, s)?;
        }
        Ok(())
    })
    .unwrap();
    for (c, s) in comms.iter().zip(&streams) {
        c.synchronize(s, Duration::from_secs(60)).unwrap();
    }
    // Two ranks: a + b is one rounding whatever the order, so the sums are bit-identical.
    let sum: Vec<f32> = hosts[0].iter().zip(&hosts[1]).map(|(a, b)| a + b).collect();
    let max: Vec<f32> = hosts[0]
        .iter()
        .zip(&hosts[1])
        .map(|(a, b)| a.max(*b))
        .collect();
    let cat: Vec<f32> = hosts.concat();
    for r in 0..2 {
        let s = &streams[r];
        assert_eq!(sums[r].read_on(s).unwrap(), sum, "rank {r} sum");
        assert_eq!(maxes[r].read_on(s).unwrap(), max, "rank {r} max");
        assert_eq!(gathered[r].read_on(s).unwrap(), cat, "rank {r} gather");
        assert_eq!(
            scattered[r].read_on(s).unwrap(),
            sum[r * N / 2..(r + 1) * N / 2].to_vec(),
            "rank {r} scatter"
        );
        assert_eq!(
            swapped[r].read_on(s).unwrap(),
            hosts[1 - r],
            "rank {r} recv"
        );
    }
}

/// One rank's side of [`two_gpus_a_step_on_each_gpu_rebinds_its_all_reduce_every_call`]: the
/// host-synchronized µs of an eager all-reduce and of the step, medians, and whether every
/// checked call summed right.
pub(super) fn rank_of_two(ctx: Context, id: UniqueId, rank: usize, calls: usize) -> (f64, f64) {
    let comm = Communicator::init_rank(&ctx, &id, rank, 2, &CommOptions::default()).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    // 4 KiB of bf16, as the probe's first size.
    const M: usize = 2048;
    let value = |call: usize| half::bf16::from_f32((call % 64) as f32 + rank as f32);
    let fresh = |call: usize| DeviceBuffer::from_host(&ctx, &vec![value(call); M]).unwrap();
    let mut p = StepParams::new(&ctx, 4).unwrap();
    let (x, y) = (
        p.buffer::<half::bf16>(M).unwrap(),
        p.buffer::<half::bf16>(M).unwrap(),
    );
    let (x0, y0) = (
        fresh(0),
        DeviceBuffer::<half::bf16>::zeroed(&ctx, M).unwrap(),
    );
    p.bind(&x, &x0).unwrap();
    p.bind(&y, &y0).unwrap();
    // The other rank may be a thread of this process building its step at the same time: a
    // global capture here would refuse its allocations (and its capture ours).
    let options = StepOptions {
        capture_mode: CaptureMode::ThreadLocal,
        ..StepOptions::default()
    };
    let mut step = Step::new(&stream, p, options, |s| {
        let (xb, mut yb) = (s.buffer(&x)?, s.buffer(&y)?);
        s.nccl(&comm, |c| {
            c.all_reduce(&xb, &mut yb, ReduceOp::Sum, s.stream())
        })
    })
    .unwrap();
    assert!(
        matches!(step.mode(), StepMode::Graph { .. }),
        "rank {rank}: {:?}",
        step.mode()
    );
    let (mut eager, mut replay) = (Vec::new(), Vec::new());
    let mut out = DeviceBuffer::<half::bf16>::zeroed(&ctx, M).unwrap();
    for call in 0..calls {
        let (xb, yb) = (
            fresh(call),
            DeviceBuffer::<half::bf16>::zeroed(&ctx, M).unwrap(),
        );
        let t = Instant::now();
        comm.all_reduce(&xb, &mut out, ReduceOp::Sum, &stream)
            .unwrap();
        comm.synchronize(&stream, Duration::from_secs(30)).unwrap();
        eager.push(t.elapsed().as_secs_f64() * 1e6);
        step.bind(&x, &xb).unwrap();
        step.bind(&y, &yb).unwrap();
        let t = Instant::now();
        step.run().unwrap();
        comm.synchronize(&stream, Duration::from_secs(30)).unwrap();
        replay.push(t.elapsed().as_secs_f64() * 1e6);
        let want = half::bf16::from_f32(2.0 * (call % 64) as f32 + 1.0);
        assert!(
            yb.read_on(&stream).unwrap().iter().all(|v| *v == want),
            "rank {rank} call {call}"
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.drain(..v.len() / 10).for_each(drop);
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (median(&mut eager), median(&mut replay))
}

#[test]
#[ignore = "needs two CUDA GPUs and NCCL"]
fn two_gpus_a_step_on_each_gpu_rebinds_its_all_reduce_every_call() {
    let (c0, c1) = two_gpus();
    let id = UniqueId::new().unwrap();
    let calls = 1000;
    let threads: Vec<_> = [c0.clone(), c1]
        .into_iter()
        .enumerate()
        .map(|(rank, ctx)| std::thread::spawn(move || rank_of_two(ctx, id, rank, calls)))
        .collect();
    for (rank, t) in threads.into_iter().enumerate() {
        let (eager, replay) = t.join().unwrap();
        eprintln!("rank {rank}: all-reduce 4 KiB bf16, host-synchronized µs: eager {eager:.1}, step (rebound every call) {replay:.1}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_a_profiled_step_of_collectives_profiles_on_the_same_schedule_in_every_process() {
    use crate::profile::{ProfileOptions, Profiled};
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let comm = one_rank(&ctx);
    let store = std::env::temp_dir().join(format!(
        "graph-rt-nccl-decisions-{}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&store);
    let options = ProfileOptions {
        rerunnable: true,
        store: Some(store.clone()),
        sample_every: 1,
        ..ProfileOptions::default()
    };
    let x_host = random_f32(N);
    let x = DeviceBuffer::from_host(&ctx, &x_host).unwrap();
    let mut reports = Vec::new();
    // Twice, as two processes would: the second finds the first's decision in the file and
    // still profiles, as a rank without the file would.
    for _ in 0..2 {
        let mut p = StepParams::new(&ctx, 2).unwrap();
        let y = p.buffer::<f32>(N).unwrap();
        let out = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
        p.bind(&y, &out).unwrap();
        let mut step = Profiled::new(
            "all-reduce",
            &stream,
            p,
            StepOptions::default(),
            options.clone(),
            |s| {
                let mut yb = s.buffer(&y)?;
                s.nccl(&comm, |c| {
                    c.all_reduce(&x, &mut yb, ReduceOp::Avg, s.stream())
                })
            },
        )
        .unwrap();
        assert!(step.step().makes_collectives());
        for _ in 0..sized(200, 20, 10) {
            step.run().unwrap();
        }
        comm.synchronize(&stream, Duration::from_secs(30)).unwrap();
        assert_eq!(out.read_on(&stream).unwrap(), x_host);
        reports.push(step.report().clone());
    }
    for r in &reports {
        assert!(!r.from_file, "{r:?}");
        assert_eq!(r.reprofiles, 0, "{r:?}");
    }
    assert_eq!(reports[0].profiled_calls, reports[1].profiled_calls);
    let _ = std::fs::remove_file(&store);
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_a_step_whose_collective_is_a_copy_is_pointed_at_the_buffers_bound_every_call() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let comm = one_rank(&ctx);
    let mut p = StepParams::new(&ctx, 4).unwrap();
    let (x, y) = (p.buffer::<f32>(N).unwrap(), p.buffer::<f32>(N).unwrap());
    let first = buffers(&ctx, 2);
    p.bind(&x, &first[0]).unwrap();
    p.bind(&y, &first[1]).unwrap();
    let body = |s: &crate::step::StepScope<'_>| {
        let (xb, mut yb) = (s.buffer(&x)?, s.buffer(&y)?);
        // One rank's sum: NCCL copies (a copy node in a capture), which each call points at
        // the buffers bound.
        s.nccl(&comm, |c| {
            c.all_reduce(&xb, &mut yb, ReduceOp::Sum, s.stream())
        })
    };
    let strict = StepOptions {
        fail_on_capture_error: true,
        ..StepOptions::default()
    };
    let mut step = Step::new(&stream, p, strict, body).unwrap();
    assert!(
        matches!(step.mode(), StepMode::Graph { .. }),
        "a step whose collective is a copy runs as {:?}",
        step.mode()
    );
    let mut kept = Vec::new();
    for _ in 0..sized(20, 5, 3) {
        let mut b = buffers(&ctx, 2);
        let input = fresh_input(&mut b[0]);
        step.bind(&x, &b[0]).unwrap();
        step.bind(&y, &b[1]).unwrap();
        step.run().unwrap();
        kept.push((input, b));
    }
    comm.synchronize(&stream, Duration::from_secs(30)).unwrap();
    for (input, b) in kept {
        assert_eq!(b[1].read_on(&stream).unwrap(), input);
    }
}

#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_a_panic_inside_record_leaves_collectives_on_a_capturing_stream_refused() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let comm = one_rank(&ctx);
    let host = random_f32(N);
    let x = DeviceBuffer::from_host(&ctx, &host).unwrap();
    let mut y = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    let graph = stream
        .capture(CaptureMode::ThreadLocal, |s| {
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                comm.record(s, |_| -> crate::Result<()> {
                    panic!("the collectives' closure panics")
                })
            }));
            assert!(panicked.is_err());
            // Outside `record` again: refused, as before the panic.
            let e = comm
                .all_reduce(&x, &mut y, ReduceOp::Sum, &stream)
                .unwrap_err();
            assert_eq!(misuse(e), Misuse::Capturing);
            comm.record(s, |c| c.all_reduce(&x, &mut y, ReduceOp::Sum, s.stream()))
        })
        .unwrap();
    y.fill_u32(f32::NAN.to_bits()).unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(y.to_vec().unwrap(), host, "the recorded sum of one rank");
    // Eager collectives work, and one on a capturing stream is still refused.
    y.fill_u32(f32::NAN.to_bits()).unwrap();
    comm.all_reduce(&x, &mut y, ReduceOp::Sum, &stream).unwrap();
    comm.synchronize(&stream, Duration::from_secs(30)).unwrap();
    assert_eq!(y.to_vec().unwrap(), host, "the eager sum of one rank");
    let r = stream.capture(CaptureMode::ThreadLocal, |_| {
        comm.all_reduce(&x, &mut y, ReduceOp::Sum, &stream)
    });
    assert_eq!(misuse(r.unwrap_err()), Misuse::Capturing);
    drop((exec, graph));
    ctx.synchronize().unwrap();
    assert!(ctx.take_deferred_errors().is_empty());
}

/// `spin(flag)`: waits until the mapped host word `flag` is non-zero (a collective's peer that
/// never comes, as far as the stream can tell).
const SPIN_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 flag)
{
    .reg .b64 %rd<2>;
    .reg .b32 %r<2>;
    .reg .pred %p<2>;
    ld.param.u64 %rd1, [flag];
WAIT:
    ld.volatile.global.u32 %r1, [%rd1];
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra WAIT;
    ret;
}
"#;

#[test]
#[ignore = "needs a CUDA GPU and NCCL (GRAPH_RT_NCCL, PyTorch's nvidia/nccl wheel or libnccl.so.2)"]
fn nccl_a_communicator_dropped_with_collectives_that_never_finish_is_aborted_after_its_timeout() {
    // Its only kernel spins on mapped host memory (nothing for initcheck to check), and under
    // initcheck NCCL's abort outlasts the sanitizer run's limit for one test.
    if std::env::var_os("GRAPH_RT_SANITIZER").is_some_and(|t| t == "initcheck") {
        return;
    }
    let ctx = ctx();
    // Joining takes its time (a slow init is no collective that never finishes).
    let options = CommOptions {
        timeout: Duration::from_millis(300),
        ..CommOptions::default()
    };
    let comm = Communicator::init_all(std::slice::from_ref(&*ctx), &options)
        .unwrap()
        .pop()
        .unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let spin = crate::Module::from_ptx(&ctx, SPIN_PTX)
        .unwrap()
        .function("spin")
        .unwrap();
    let mut flag = crate::MappedHostBuffer::<u32>::zeroed(&ctx, 1).unwrap();
    let (send, mut recv) = (
        DeviceBuffer::from_host(&ctx, &[1.0f32; 256]).unwrap(),
        DeviceBuffer::<f32>::zeroed(&ctx, 256).unwrap(),
    );
    // SAFETY: spin reads one u32 of mapped host memory the test keeps until the stream is idle.
    unsafe {
        stream
            .launch(&spin, &LaunchConfig::new(1u32, 1u32), (flag.device_ptr(),))
            .unwrap()
    };
    // Queued behind the spinning kernel: it does not finish while the flag is 0.
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
        .unwrap();
    let dropped = Instant::now();
    drop(comm);
    assert!(
        dropped.elapsed() < Duration::from_millis(100),
        "the drop waited"
    );
    let start = Instant::now();
    // NCCL's abort waits for the device (it frees memory), which the spinning kernel keeps
    // busy: it ends a while after the watchdog's deadline, whatever the asserts below say.
    // The flag comes back to be dropped once the stream is idle (the kernel reads it until then).
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        (flag.write(0, 1), flag)
    });
    let deferred = loop {
        let errors = ctx.take_deferred_errors();
        if !errors.is_empty() || start.elapsed() > Duration::from_secs(30) {
            break errors;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        matches!(
            deferred.as_slice(),
            [Error::Timeout {
                call: "Communicator (dropped)",
                ..
            }]
        ),
        "{deferred:?}"
    );
    assert!(
        start.elapsed() >= Duration::from_millis(250),
        "aborted before its timeout"
    );
    // The stream drains once the kernel ahead of the collective ends.
    let (written, flag) = release.join().unwrap();
    assert!(written);
    stream.synchronize().unwrap();
    drop(flag);
}
