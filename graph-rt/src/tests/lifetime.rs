//! What drops park comes back without asking: released by the release thread once the device is
//! done (no poll, no synchronize), by an allocation out of memory, with the last handle of a
//! context, and at exit (cuBLAS handles destroyed by the release thread, never by the exiting
//! thread); the prelude's cubin loaded once per context. Each is meant to pass under
//! compute-sanitizer's memcheck with its leak check too (run.sh runs every GPU test so).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::chain::N;
use super::{capturing_ctx, ctx, function};
use crate::cublas::DESTROYED;
use crate::cublas::{Cublas, Op as CublasOp};
use crate::driver::{Allocation, ContextInner};
use crate::foreign::Prelude;
use crate::{
    ArgTable, CaptureMode, Context, DeviceBuffer, Function, GraphExec, LaunchConfig, Stream,
    TableOptions,
};

/// Under compute-sanitizer (run.sh sets GRAPH_RT_SANITIZER) launches are instrumented, nearly
/// synchronous and much slower: shorter launches, longer waits, no claims about what still runs.
fn sanitized() -> bool {
    std::env::var_os("GRAPH_RT_SANITIZER").is_some()
}

/// How long the release thread may take, once the device is done, to release everything with
/// no call of the test's.
fn patience() -> Duration {
    Duration::from_secs(if sanitized() { 60 } else { 2 })
}

/// Waits until `stream` is idle (`cuStreamQuery`, which releases nothing).
fn until_idle(stream: &Stream) {
    while !stream.is_idle().unwrap() {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits up to [`patience`] for `done`, making no call that releases anything itself.
fn eventually(done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + patience();
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

fn weak<T: bytemuck::Pod>(b: &DeviceBuffer<T>) -> Weak<Allocation> {
    Arc::downgrade(b.allocation())
}

/// A launch that runs long: `axpy_f32` (grid-stride) over `n` floats by one warp, each step
/// waiting for memory: about 0.1 s or more for 2^24 floats (2^16 under the sanitizer).
struct Long {
    f: Function,
    n: usize,
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
}

impl Long {
    fn new(ctx: &Context) -> Self {
        Self::times(ctx, 1)
    }

    /// A launch `k` times as long as [`Long::new`]'s.
    fn times(ctx: &Context, k: usize) -> Self {
        let n = k * if sanitized() { 1 << 16 } else { 1 << 24 };
        Self {
            f: function(ctx, &graph_rt_kernels::AXPY, "axpy_f32"),
            n,
            x: DeviceBuffer::zeroed(ctx, n).unwrap(),
            y: DeviceBuffer::zeroed(ctx, n).unwrap(),
        }
    }

    /// Queues the long launch on `stream`.
    fn launch(&mut self, stream: &Stream) {
        // SAFETY: axpy over n floats of two distinct n-float buffers (grid-stride), which live
        // in `self` (their memory is freed only once the device is done with it).
        unsafe {
            stream
                .launch(
                    &self.f,
                    &LaunchConfig::new(1u32, 32u32),
                    (1.0f32, &self.x, &mut self.y, self.n as i32),
                )
                .unwrap()
        };
    }

    /// Captures the long launch into an exec that also keeps `kept` alive.
    fn exec(&mut self, stream: &Stream, kept: &[DeviceBuffer<u8>]) -> GraphExec {
        let graph = stream
            .capture(CaptureMode::Global, |s| {
                // SAFETY: axpy over n floats of two distinct n-float buffers (grid-stride).
                unsafe {
                    s.launch(
                        &self.f,
                        &LaunchConfig::new(1u32, 32u32),
                        (1.0f32, &self.x, &mut self.y, self.n as i32),
                    )?
                };
                for b in kept {
                    s.keep_alive(b.allocation().clone());
                }
                Ok(())
            })
            .unwrap();
        graph.instantiate().unwrap()
    }
}

/// `count` device buffers of `bytes` each, never read by a kernel (only kept by an exec).
fn chunks(ctx: &Context, count: usize, bytes: usize) -> Vec<DeviceBuffer<u8>> {
    (0..count)
        .map(|_| DeviceBuffer::alloc(ctx, bytes).unwrap())
        .collect()
}

/// An exec dropped while it runs (with the 256 MiB it keeps), a table dropped while its launches
/// run (with the buffers bound to it, dropped after binding): everything comes back within
/// [`patience`] with no poll or synchronize, and the device memory with it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn parked_memory_comes_back_without_poll_or_synchronize() {
    // Exclusive: memory_info must see this test's memory only.
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let mut long = Long::new(&ctx);
    const CHUNK: usize = 64 << 20;
    let kept = chunks(&ctx, 4, CHUNK);
    let mut watched: Vec<Weak<Allocation>> = kept.iter().map(weak).collect();
    let exec = long.exec(&stream, &kept);

    // A table whose graph runs the long launch, then add1 through two slots.
    let mut table = ArgTable::new(&ctx, TableOptions::default()).unwrap();
    let (sx, sy) = (
        table.ptr_slot::<f32>().unwrap(),
        table.ptr_slot::<f32>().unwrap(),
    );
    let add1 = function(&ctx, &graph_rt_kernels::CHAIN_TABLE, "add1");
    let texec = {
        let long = &mut long;
        stream
            .capture(CaptureMode::Global, |s| {
                table.record_refresh(s)?;
                let cfg = LaunchConfig::for_elements(N, 256);
                // SAFETY: as in `Long::exec`; add1_table reads N floats through slot x and
                // writes N through slot y, each bound to a distinct N-float buffer.
                unsafe {
                    s.launch(
                        &long.f,
                        &LaunchConfig::new(1u32, 32u32),
                        (1.0f32, &long.x, &mut long.y, long.n as i32),
                    )?;
                    s.launch(&add1, &cfg, (&sx, &sy, N as i32))?;
                }
                Ok(())
            })
            .unwrap()
            .instantiate()
            .unwrap()
    };
    // Every buffer made (and written) before the first launch: a fill waits for the context.
    let pairs: Vec<[DeviceBuffer<f32>; 2]> = (0..2)
        .map(|_| [(); 2].map(|_| DeviceBuffer::zeroed(&ctx, N).unwrap()))
        .collect();
    watched.extend(pairs.iter().flatten().map(weak));
    let (free_before, _) = ctx.memory_info().unwrap();

    exec.launch(&stream).unwrap();
    for [x, y] in pairs {
        table.bind(&sx, &x).unwrap();
        table.bind(&sy, &y).unwrap();
        drop((x, y));
        table.launch(&texec, &stream).unwrap();
    }
    drop((exec, kept, table, texec));
    if !sanitized() {
        assert!(
            ctx.parked_batches() > 0 && !stream.is_idle().unwrap(),
            "the launches ended before the drops: nothing was parked"
        );
    }
    until_idle(&stream);
    assert!(
        eventually(|| ctx.parked_batches() == 0 && watched.iter().all(|w| w.strong_count() == 0)),
        "still parked after {:?} without poll or synchronize: {} batches, {} of {} buffers",
        patience(),
        ctx.parked_batches(),
        watched.iter().filter(|w| w.strong_count() > 0).count(),
        watched.len()
    );
    let (free_after, _) = ctx.memory_info().unwrap();
    eprintln!(
        "lifetime: {} MiB free before the drops, {} MiB after the releases",
        free_before >> 20,
        free_after >> 20
    );
    // The 256 MiB the exec kept are free again, less what the driver keeps for itself (the
    // sanitizer's own allocations blur this: its leak check says it there).
    assert!(
        sanitized() || free_after + (32 << 20) >= free_before + 4 * CHUNK,
        "the parked memory did not come back"
    );
    drop(long);
}

/// A context whose every handle is dropped while its launch runs, with no synchronize: its
/// release thread releases what was parked, which drops the context, whose teardown stops the
/// thread.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_last_handle_of_a_context_releases_everything_and_stops_its_thread() {
    let gpu = capturing_ctx();
    // A context of its own (the same primary context, another graph-rt context).
    let ctx = Context::new(0).unwrap();
    let inner: Weak<ContextInner> = Arc::downgrade(&ctx.inner);
    let queue = ctx.inner.tracker.watch();
    let stream = Stream::new(&ctx).unwrap();
    let mut long = Long::new(&ctx);
    let kept = chunks(&ctx, 2, 64 << 20);
    let watched: Vec<Weak<Allocation>> = kept.iter().map(weak).collect();
    let exec = long.exec(&stream, &kept);
    exec.launch(&stream).unwrap();
    drop((exec, kept, long, stream, ctx));
    if !sanitized() {
        assert!(
            inner.strong_count() > 0,
            "the context went before its launch ended"
        );
    }
    // Waits for the device through the test's own graph-rt context (the same primary context):
    // this releases what that one parked, nothing of the context under test.
    gpu.synchronize().unwrap();
    assert!(
        eventually(|| inner.strong_count() == 0 && queue.is_gone()),
        "after {:?}: context {}, release thread {}",
        patience(),
        if inner.strong_count() > 0 {
            "alive"
        } else {
            "gone"
        },
        if queue.is_gone() {
            "stopped"
        } else {
            "running"
        }
    );
    assert!(watched.iter().all(|w| w.strong_count() == 0));
    drop(gpu);
}

/// Buffers dropped while a long launch keeps them (parked behind its fence), then an allocation
/// that fits only once they are released: it succeeds, through the release thread waiting for
/// the fence. Under the sanitizer the device is shared with the other sanitized tests run beside
/// this one, so it is not filled: the reclaim that the out-of-memory path runs is called
/// directly on a few parked buffers instead.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_allocation_out_of_memory_releases_what_is_parked_and_retries() {
    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let mut long = Long::new(&ctx);
    if sanitized() {
        let kept = chunks(&ctx, 4, 64 << 20);
        let watched: Vec<Weak<Allocation>> = kept.iter().map(weak).collect();
        let exec = long.exec(&stream, &kept);
        exec.launch(&stream).unwrap();
        drop((exec, kept));
        // What the allocation does once out of memory (here the release thread may already
        // have released everything: then there is nothing to reclaim).
        ctx.inner.tracker.reclaim();
        assert_eq!(ctx.parked_batches(), 0, "a reclaim left batches parked");
        assert!(watched.iter().all(|w| w.strong_count() == 0));
        return;
    }
    // Fill the device up to SPARE (for the driver's own needs: the exec, events), in chunks.
    const SPARE: usize = 512 << 20;
    const WANT: usize = 2 << 30;
    let mut kept = Vec::new();
    loop {
        let (left, _) = ctx.memory_info().unwrap();
        if left < SPARE + (64 << 20) {
            break;
        }
        match DeviceBuffer::<u8>::alloc(&ctx, (left - SPARE).min(4 << 30)) {
            Ok(b) => kept.push(b),
            Err(_) => break,
        }
    }
    let (left, total) = ctx.memory_info().unwrap();
    assert!(
        left < WANT,
        "could not fill the device: {} MiB of {} left",
        left >> 20,
        total >> 20
    );
    let watched: Vec<Weak<Allocation>> = kept.iter().map(weak).collect();
    let exec = long.exec(&stream, &kept);
    exec.launch(&stream).unwrap();
    drop((exec, kept));
    let reclaims = ctx.inner.tracker.reclaims();
    // While the launch runs its fence holds every chunk: the allocation must run out of memory.
    let running = !stream.is_idle().unwrap();
    let start = Instant::now();
    let big = DeviceBuffer::<u8>::alloc(&ctx, WANT);
    let took = start.elapsed();
    let big =
        big.unwrap_or_else(|e| panic!("{} MiB not allocated after the reclaim: {e}", WANT >> 20));
    eprintln!(
        "lifetime: {} MiB allocated in {took:?} after releasing {} parked chunks (launch running: {running})",
        WANT >> 20,
        watched.len()
    );
    assert!(
        running,
        "the launch ended before the allocation: nothing was tested"
    );
    assert!(
        ctx.inner.tracker.reclaims() > reclaims,
        "the allocation did not go through a reclaim"
    );
    assert!(watched.iter().all(|w| w.strong_count() == 0));
    drop(big);
}

/// `Prelude::install` (and `device_support`) load the prelude's cubin once per context.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_prelude_cubin_loads_once_per_context() {
    let ctx = ctx();
    if let Err(why) = Prelude::device_support(&ctx) {
        eprintln!("lifetime: no prelude on this GPU ({why}): nothing to cache");
        return;
    }
    for _ in 0..3 {
        Prelude::device_support(&ctx).unwrap();
    }
    assert_eq!(ctx.cached_modules(), 1);
    let (major, minor) = ctx.device().compute_capability().unwrap();
    let image = graph_rt_kernels::PRELUDE
        .for_compute_capability(major as u32, minor as u32)
        .unwrap();
    // SAFETY: the shipped cubin, the one `Prelude` loads under this key.
    let (a, b) = unsafe {
        (
            ctx.cached_cubin("graph_rt_kernels::PRELUDE", image)
                .unwrap(),
            ctx.cached_cubin("graph_rt_kernels::PRELUDE", image)
                .unwrap(),
        )
    };
    assert_eq!(a.as_raw(), b.as_raw());
    // Another context has its own, unloaded with it.
    let other = Context::new(0).unwrap();
    assert_eq!(other.cached_modules(), 0);
    Prelude::device_support(&other).unwrap();
    assert_eq!(other.cached_modules(), 1);
    drop(other);
    ctx.bind().unwrap();
}

/// A cuBLAS handle on `stream` that has run a GEMM, and the address of its handle.
fn used_cublas(ctx: &Context, stream: &Stream) -> (Cublas, *mut std::ffi::c_void) {
    const D: usize = 64;
    let blas = Cublas::new(stream).unwrap();
    let a = DeviceBuffer::from_host(ctx, &vec![1.0f32; D * D]).unwrap();
    let mut c = DeviceBuffer::<f32>::zeroed(ctx, D * D).unwrap();
    blas.sgemm(
        CublasOp::N,
        CublasOp::N,
        D,
        D,
        D,
        1.0,
        &a,
        D,
        &a,
        D,
        0.0,
        &mut c,
        D,
    )
    .unwrap();
    let raw = blas.as_raw();
    (blas, raw)
}

/// A used cuBLAS handle on `stream` dropped right after a long launch there: its address, its
/// destroys counted before the drop, and the launch. `ready(raw, before)`, checked right after
/// the drop (not under a sanitizer, which slows the host), says whether the test can go on
/// (Ok) or why not: a launch that ended first (the host thread descheduled between the launch
/// and the check, now and then) is not a failure of
/// what is tested but a test that did not happen, so it is made again behind a launch four
/// times as long, up to four times.
fn dropped_behind_a_launch(
    ctx: &Context,
    stream: &Stream,
    mut ready: impl FnMut(*mut std::ffi::c_void, usize) -> Result<(), String>,
) -> (*mut std::ffi::c_void, usize, Long) {
    for attempt in 0..4 {
        let (blas, raw) = used_cublas(ctx, stream);
        let before = DESTROYED.destroys_of(raw).len();
        let mut long = Long::times(ctx, 1 << (2 * attempt));
        long.launch(stream);
        drop(blas);
        let why = if sanitized() {
            Ok(())
        } else {
            ready(raw, before)
        };
        match why {
            Ok(()) => return (raw, before, long),
            Err(why) if attempt == 3 => panic!("nothing to test after 4 attempts: {why}"),
            Err(_) => {
                stream.synchronize().unwrap();
                ctx.poll().unwrap();
            }
        }
    }
    unreachable!("the last attempt returns or panics")
}

/// A cuBLAS handle dropped while its stream still runs, in a live program: the release thread
/// destroys it (`cublasDestroy_v2`) once the stream's work is done, with no poll or synchronize.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_dropped_cublas_handle_is_destroyed_by_the_release_thread_without_any_call() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    // The handle must be dropped while the launch still runs (see `dropped_behind_a_launch`);
    // one destroyed under running work fails at once.
    let (raw, before, long) = dropped_behind_a_launch(&ctx, &stream, |raw, before| {
        // Destroyed first, idle after: destroyed and then still running is destroyed under it.
        let destroyed = DESTROYED.destroys_of(raw).len() > before;
        let idle = stream.is_idle().unwrap();
        assert!(
            idle || !destroyed,
            "the handle was destroyed under running work"
        );
        (!idle)
            .then_some(())
            .ok_or("the launch ended before the drop".to_string())
    });
    assert!(
        eventually(|| DESTROYED.destroys_of(raw).len() > before),
        "the handle was not destroyed within {:?} without poll or synchronize",
        patience()
    );
    assert_eq!(
        DESTROYED.destroys_of(raw)[before].as_deref(),
        Some("graph-rt-release"),
        "not destroyed by the release thread"
    );
    drop((long, stream));
}

/// What the exit hook does, on one context: a cuBLAS handle parked behind work that still runs
/// is destroyed by the context's release thread, which waits for the work, and never by the
/// thread that runs the hook (at exit, the thread that called `exit`, whose thread-locals glibc
/// has destroyed by then). Nothing stays parked, and the thread stops.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_exit_path_has_the_release_thread_destroy_parked_cublas_handles() {
    let _gpu = ctx();
    // A context of its own (the same primary context), since the exit path closes its queue.
    let ctx = Context::new(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    // The handle must be parked behind work that still runs when the exit path starts.
    let (raw, before, long) = dropped_behind_a_launch(&ctx, &stream, |_, _| {
        // Two checks, so that a failure says which.
        let (parked, idle) = (ctx.parked_batches(), stream.is_idle().unwrap());
        (parked > 0 && !idle).then_some(()).ok_or(format!(
            "{parked} batches parked, stream idle: {idle} (the launch ended before the drop, or \
             the handle was not parked behind it)"
        ))
    });
    ctx.inner.tracker.close_as_at_exit();
    assert_eq!(ctx.parked_batches(), 0, "left parked by the exit path");
    assert!(
        stream.is_idle().unwrap(),
        "released before the work it waited for"
    );
    let destroys = DESTROYED.destroys_of(raw);
    assert_eq!(
        destroys.len(),
        before + 1,
        "the handle was not destroyed by the exit path"
    );
    assert_eq!(
        destroys[before].as_deref(),
        Some("graph-rt-release"),
        "not destroyed by the release thread"
    );
    // Closed as at exit: what is dropped now is released where it is dropped.
    drop((long, stream, ctx));
}

/// Another library's capture (raw `cuStreamBeginCapture` in global mode, which graph-rt's
/// capture gate and capture lock do not see) runs while graph-rt's release thread polls and
/// releases an exec and 256 MiB parked behind a long launch: the release thread, in relaxed
/// capture interaction mode, is neither refused nor breaks the capture; the memory comes back
/// during it, once the launch has ended; the captured graph ends, instantiates and runs.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_foreign_global_capture_survives_the_release_thread_releasing_meanwhile() {
    use graph_rt_sys::{CUresult, CUstreamCaptureMode};

    let ctx = capturing_ctx();
    let stream = Stream::new(&ctx).unwrap();
    let foreign = Stream::new(&ctx).unwrap();
    let add1 = function(&ctx, &graph_rt_kernels::CHAIN, "add1");
    let (x, y) = (
        DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
        DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap(),
    );
    let mut long = Long::new(&ctx);
    let kept = chunks(&ctx, 4, 64 << 20);
    let watched: Vec<Weak<Allocation>> = kept.iter().map(weak).collect();
    let exec = long.exec(&stream, &kept);
    exec.launch(&stream).unwrap();
    // Parked behind the launch: released by the release thread once it has ended.
    drop((exec, kept));

    let raw_ctx = ctx.as_raw() as usize;
    let (raw_foreign, raw_add1) = (foreign.as_raw() as usize, add1.as_raw() as usize);
    let (px, py) = (x.as_raw(), y.as_raw());
    // The other library's thread: nothing of graph-rt, raw driver calls only; between the
    // capture's begin and end it makes no call, only watches the parked memory go.
    let (begun, released, ended, graph) = std::thread::spawn(move || {
        let s = raw_foreign as graph_rt_sys::CUstream;
        let global = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
        // SAFETY: a live context, made current on this thread; a live non-blocking stream of it
        // that nothing else uses; x and y are N-float buffers of the context, alive until the
        // graph has run; add1's three arguments are (x, y, n), each passed by address.
        unsafe {
            graph_rt_sys::cuCtxSetCurrent(raw_ctx as graph_rt_sys::CUcontext).unwrap();
            let begun = graph_rt_sys::cuStreamBeginCapture(s, global).unwrap();
            graph_rt_sys::cuMemsetD32Async(px, 7.0f32.to_bits(), N, s).unwrap();
            let (mut ax, mut ay, mut an) = (px, py, N as i32);
            let mut args = [
                &mut ax as *mut _ as *mut std::ffi::c_void,
                &mut ay as *mut _ as *mut std::ffi::c_void,
                &mut an as *mut _ as *mut std::ffi::c_void,
            ];
            let grid = N.div_ceil(256) as u32;
            graph_rt_sys::cuLaunchKernel(
                raw_add1 as graph_rt_sys::CUfunction,
                grid,
                1,
                1,
                256,
                1,
                1,
                0,
                s,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
            .unwrap();
            let released = eventually(|| watched.iter().all(|w| w.strong_count() == 0));
            std::thread::sleep(Duration::from_millis(50));
            let mut graph = std::ptr::null_mut();
            let ended = graph_rt_sys::cuStreamEndCapture(s, &mut graph).unwrap();
            (begun, released, ended, graph as usize)
        }
    })
    .join()
    .unwrap();
    assert_eq!(begun, CUresult::CUDA_SUCCESS);
    assert_eq!(
        ended,
        CUresult::CUDA_SUCCESS,
        "the foreign capture broke (the release thread's calls were refused)"
    );
    assert!(
        released,
        "the parked memory was not released during the capture within {:?}",
        patience()
    );
    let graph = graph as graph_rt_sys::CUgraph;
    let mut exec = std::ptr::null_mut();
    // SAFETY: the graph the capture made, instantiated, run on the foreign stream and waited
    // for, then destroyed; x and y outlive the run.
    unsafe {
        let r = graph_rt_sys::cuGraphInstantiate(&mut exec, graph, 0).unwrap();
        assert_eq!(r, CUresult::CUDA_SUCCESS);
        let r = graph_rt_sys::cuGraphLaunch(exec, foreign.as_raw()).unwrap();
        assert_eq!(r, CUresult::CUDA_SUCCESS);
        let r = graph_rt_sys::cuStreamSynchronize(foreign.as_raw()).unwrap();
        assert_eq!(r, CUresult::CUDA_SUCCESS);
        graph_rt_sys::cuGraphExecDestroy(exec).unwrap();
        graph_rt_sys::cuGraphDestroy(graph).unwrap();
    }
    assert!(
        y.to_vec().unwrap().iter().all(|&v| v == 8.0),
        "the captured add1 did not run"
    );
    assert!(eventually(|| ctx.parked_batches() == 0));
    assert!(ctx.take_deferred_errors().is_empty());
    drop(long);
}
