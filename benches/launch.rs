//! Eager launch overhead: graph-rt's typed launch (a tuple) and its run-time argument list (a
//! `KernelArgList` built for each launch) vs a raw `cuLaunchKernel` through cuda-sys vs cudarc's
//! launch builder, same kernel (`add1` over 4096 floats), same run.
//!
//! Each sample times a batch of launches on the host and synchronizes outside the timed region,
//! so it measures what the host pays per launch, not the kernel. Criterion measures each variant
//! in turn, but before each timed batch it runs an untimed batch of each other variant, so every
//! variant is measured in the conditions of the others (measured one after the other alone, their
//! medians drift by ±20% between variants). The table printed last measures them in interleaved
//! rounds: ratios from the same rounds, immune to drift over the run.
//!
//! ```text
//! cargo bench --bench launch
//! ```

mod common;

use std::ffi::c_void;
use std::time::{Duration, Instant};

use criterion::Criterion;
use cudarc::driver::PushKernelArg;
use graph_rt::sys;
use graph_rt::{DeviceBuffer, KernelArgList, LaunchConfig, Module, Stream};

const N: usize = 4096;
const BATCH: u64 = 256;

/// Times `iters` launches in batches of BATCH, synchronizing (untimed) before each batch so the
/// launch queue never fills.
fn time_batches(iters: u64, sync: &dyn Fn(), launch: &mut dyn FnMut()) -> Duration {
    time_batches_among(iters, sync, launch, &mut [])
}

/// Another variant, run untimed between timed batches: its synchronize and its launch.
type Other<'a, 'b> = (&'a dyn Fn(), &'a mut (dyn FnMut() + 'b));

/// As [`time_batches`], with a batch of each of `others` run untimed before each timed batch.
fn time_batches_among(
    iters: u64,
    sync: &dyn Fn(),
    launch: &mut dyn FnMut(),
    others: &mut [Other<'_, '_>],
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let k = left.min(BATCH);
        for (other_sync, other) in others.iter_mut() {
            other_sync();
            for _ in 0..k {
                other();
            }
            // Every variant is timed on an idle GPU.
            other_sync();
        }
        sync();
        let t = Instant::now();
        for _ in 0..k {
            launch();
        }
        total += t.elapsed();
        left -= k;
    }
    sync();
    total
}

fn main() {
    let Some(ctx) = common::start("launch", false) else {
        return;
    };
    let stream = Stream::new(&ctx).expect("stream");
    let add1 = Module::from_ptx(&ctx, graph_rt::kernels::CHAIN.ptx)
        .expect("module")
        .function("add1")
        .expect("add1");
    let x = DeviceBuffer::<f32>::zeroed(&ctx, N).expect("x");
    let y = DeviceBuffer::<f32>::zeroed(&ctx, N).expect("y");
    let cfg = LaunchConfig::for_elements(N, 256);
    let n = N as i32;
    let sync = || stream.synchronize().expect("sync");

    let mut typed = || {
        // SAFETY: add1 touches N elements of x and y.
        unsafe { stream.launch(&add1, &cfg, (&x, &y, n)).expect("launch") }
    };
    let mut listed = || {
        let mut args = KernelArgList::new();
        args.push(&x)
            .and_then(|a| a.push(&y))
            .and_then(|a| a.push(n))
            .expect("arguments");
        // SAFETY: as above.
        unsafe { stream.launch(&add1, &cfg, &args).expect("launch") }
    };
    let (xp, yp) = (x.as_raw(), y.as_raw());
    let mut raw = || {
        let mut params = [
            &xp as *const u64 as *mut c_void,
            &yp as *const u64 as *mut c_void,
            &n as *const i32 as *mut c_void,
        ];
        // SAFETY: as above; the context is current on this thread (Context::new bound it).
        let r = unsafe {
            sys::cuLaunchKernel(
                add1.as_raw(),
                cfg.grid.x,
                1,
                1,
                cfg.block.x,
                1,
                1,
                0,
                stream.as_raw(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(r, Ok(sys::CUresult::CUDA_SUCCESS));
    };

    let cu_ctx = cudarc::driver::CudaContext::new(0).expect("cudarc context");
    let cu_stream = cu_ctx.new_stream().expect("cudarc stream");
    let cu_add1 = cu_ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(graph_rt::kernels::CHAIN.ptx))
        .expect("cudarc module")
        .load_function("add1")
        .expect("cudarc add1");
    let cx = cu_stream.alloc_zeros::<f32>(N).expect("cudarc x");
    let mut cy = cu_stream.alloc_zeros::<f32>(N).expect("cudarc y");
    let cu_cfg = cudarc::driver::LaunchConfig {
        grid_dim: (cfg.grid.x, 1, 1),
        block_dim: (cfg.block.x, 1, 1),
        shared_mem_bytes: 0,
    };
    let cu_sync = || cu_stream.synchronize().expect("cudarc sync");
    let mut cudarc_launch = || {
        let mut builder = cu_stream.launch_builder(&cu_add1);
        builder.arg(&cx).arg(&mut cy).arg(&n);
        // SAFETY: as above.
        unsafe { builder.launch(cu_cfg).expect("cudarc launch") };
    };

    let mut c = Criterion::default().configure_from_args();
    {
        let mut group = c.benchmark_group("eager_launch");
        group
            .sample_size(60)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));
        group.bench_function("graph_rt_typed", |b| {
            b.iter_custom(|iters| {
                let others: &mut [Other] = &mut [
                    (&sync, &mut listed),
                    (&sync, &mut raw),
                    (&cu_sync, &mut cudarc_launch),
                ];
                time_batches_among(iters, &sync, &mut typed, others)
            })
        });
        group.bench_function("graph_rt_arg_list", |b| {
            b.iter_custom(|iters| {
                let others: &mut [Other] = &mut [
                    (&sync, &mut raw),
                    (&cu_sync, &mut cudarc_launch),
                    (&sync, &mut typed),
                ];
                time_batches_among(iters, &sync, &mut listed, others)
            })
        });
        group.bench_function("raw_cuLaunchKernel", |b| {
            b.iter_custom(|iters| {
                let others: &mut [Other] = &mut [
                    (&cu_sync, &mut cudarc_launch),
                    (&sync, &mut typed),
                    (&sync, &mut listed),
                ];
                time_batches_among(iters, &sync, &mut raw, others)
            })
        });
        group.bench_function("cudarc_launch_builder", |b| {
            b.iter_custom(|iters| {
                let others: &mut [Other] =
                    &mut [(&sync, &mut typed), (&sync, &mut listed), (&sync, &mut raw)];
                time_batches_among(iters, &cu_sync, &mut cudarc_launch, others)
            })
        });
        group.finish();
    }
    c.final_summary();

    let per_launch = |sync: &dyn Fn(), launch: &mut dyn FnMut()| {
        time_batches(BATCH, sync, launch).as_secs_f64() * 1e6 / BATCH as f64
    };
    let medians = common::interleave(
        300,
        vec![
            ("graph_rt_typed", Box::new(|| per_launch(&sync, &mut typed))),
            (
                "graph_rt_arg_list",
                Box::new(|| per_launch(&sync, &mut listed)),
            ),
            (
                "raw_cuLaunchKernel",
                Box::new(|| per_launch(&sync, &mut raw)),
            ),
            (
                "cudarc_launch_builder",
                Box::new(|| per_launch(&cu_sync, &mut cudarc_launch)),
            ),
        ],
    );
    let raw_us = medians
        .iter()
        .find(|(name, _)| *name == "raw_cuLaunchKernel")
        .map_or(f64::NAN, |m| m.1);
    println!(
        "\ntable: eager launch, host µs per launch, median of 300 interleaved batches of {BATCH}"
    );
    for (name, us) in &medians {
        println!(
            "table: {name:>22}: {us:.3} µs ({:.3}× raw cuLaunchKernel)",
            us / raw_us
        );
    }
}
