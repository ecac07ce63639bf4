//! Every shipped kernel loads and computes the CPU reference's values on fresh random inputs,
//! with outputs poisoned (NaN) before the run.

use super::{assert_close, ctx, function, random_f32};
use crate::{DeviceBuffer, LaunchConfig, Module, Stream};

const NAN: u32 = 0x7fc0_0000;

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_shipped_kernel_loads() {
    let ctx = ctx();
    let cc = ctx.device().compute_capability().unwrap();
    for k in graph_rt_kernels::ALL {
        let (major, minor) = k.min_compute_capability;
        if cc < (major as i32, minor as i32) {
            assert!(
                Module::from_ptx(&ctx, k.ptx).is_err(),
                "{}: loaded on {cc:?}",
                k.name
            );
            continue;
        }
        let m = Module::from_ptx(&ctx, k.ptx).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        for name in k.entry_points {
            let f = m.function(name).unwrap();
            assert!(
                !f.param_layout().unwrap().is_empty(),
                "{name}: no parameters read"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn add1_matches_cpu() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = function(&ctx, &graph_rt_kernels::CHAIN, "add1");
    for n in [1usize, 255, 4096, 100_001] {
        let x = random_f32(n);
        let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
        let mut dy = DeviceBuffer::<f32>::alloc(&ctx, n).unwrap();
        dy.fill_u32(NAN).unwrap();
        // SAFETY: add1 touches n elements of x and y, which both hold.
        unsafe {
            stream
                .launch(
                    &f,
                    &LaunchConfig::for_elements(n, 256),
                    (&dx, &mut dy, n as i32),
                )
                .unwrap()
        };
        stream.synchronize().unwrap();
        let want: Vec<f64> = x.iter().map(|&v| v as f64 + 1.0).collect();
        assert_close(&dy.to_vec().unwrap(), &want, 1e-6);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn axpy_matches_cpu() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = function(&ctx, &graph_rt_kernels::AXPY, "axpy_f32");
    for (n, blocks) in [(1usize, 1u32), (1000, 3), (1 << 20, 1024)] {
        let (x, y) = (random_f32(n), random_f32(n));
        let a = rand::random::<f32>() * 4.0 - 2.0;
        let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
        let mut dy = DeviceBuffer::from_host(&ctx, &y).unwrap();
        // SAFETY: grid-stride over n elements of x and y.
        unsafe {
            stream
                .launch(
                    &f,
                    &LaunchConfig::new(blocks, 256),
                    (a, &dx, &mut dy, n as i32),
                )
                .unwrap()
        };
        stream.synchronize().unwrap();
        let want: Vec<f64> = x
            .iter()
            .zip(&y)
            .map(|(&x, &y)| a as f64 * x as f64 + y as f64)
            .collect();
        assert_close(&dy.to_vec().unwrap(), &want, 1e-6);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn shmem_block_sum_matches_cpu() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = function(&ctx, &graph_rt_kernels::REDUCE, "block_sum_f32");
    for (n, blocks, threads) in [(1usize, 1u32, 32u32), (1000, 4, 96), (1 << 22, 132, 1024)] {
        let x = random_f32(n);
        let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
        let mut partial = DeviceBuffer::<f32>::alloc(&ctx, blocks as usize).unwrap();
        partial.fill_u32(NAN).unwrap();
        // SAFETY: reads n elements of x, writes `blocks` elements of partial.
        unsafe {
            stream
                .launch(
                    &f,
                    &LaunchConfig::new(blocks, threads),
                    (&dx, &mut partial, n as i32),
                )
                .unwrap()
        };
        stream.synchronize().unwrap();
        let got = partial.to_vec().unwrap();
        assert!(
            got.iter().all(|v| v.is_finite()),
            "a block did not write its sum"
        );
        let total: f64 = got.iter().map(|&v| v as f64).sum();
        let want: f64 = x.iter().map(|&v| v as f64).sum();
        let scale: f64 = x.iter().map(|&v| (v as f64).abs()).sum::<f64>().max(1.0);
        assert!(
            (total - want).abs() / scale < 1e-5,
            "n={n}: {total} vs {want}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn shmem_rmsnorm_matches_cpu() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = function(&ctx, &graph_rt_kernels::RMSNORM, "rmsnorm_f32");
    for (rows, cols, threads) in [(1usize, 1usize, 32u32), (7, 1000, 256), (64, 4096, 1024)] {
        let (x, w) = (random_f32(rows * cols), random_f32(cols));
        let eps = 1e-5f32;
        let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
        let dw = DeviceBuffer::from_host(&ctx, &w).unwrap();
        let mut dy = DeviceBuffer::<f32>::alloc(&ctx, rows * cols).unwrap();
        dy.fill_u32(NAN).unwrap();
        // SAFETY: one block per row of `cols` elements in x and y; w holds `cols`.
        unsafe {
            stream
                .launch(
                    &f,
                    &LaunchConfig::new(rows as u32, threads),
                    (&dx, &dw, &mut dy, cols as i32, eps),
                )
                .unwrap()
        };
        stream.synchronize().unwrap();
        let mut want = Vec::with_capacity(rows * cols);
        for r in x.chunks(cols) {
            let ms = r.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / cols as f64;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            want.extend(r.iter().zip(&w).map(|(&v, &w)| v as f64 * inv * w as f64));
        }
        assert_close(&dy.to_vec().unwrap(), &want, 1e-5);
    }
}
