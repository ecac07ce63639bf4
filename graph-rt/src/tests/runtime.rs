//! Contexts, streams, events, modules and launch errors.

use super::{ctx, function, random_f32};
use crate::{
    Device, DeviceBuffer, Event, EventFlags, LaunchConfig, Misuse, Module, Stream, StreamFlags,
};

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_and_context_properties() {
    let ctx = ctx();
    assert!(Device::count().unwrap() >= 1);
    let d = ctx.device();
    assert!(!d.name().unwrap().is_empty());
    assert!(d.compute_capability().unwrap().0 >= 7);
    assert!(d.total_memory().unwrap() > 1 << 30);
    assert!(ctx.is_current().unwrap());
    let (free, total) = ctx.memory_info().unwrap();
    assert!(free <= total && total > 0);
    assert!(crate::driver_version().unwrap() >= graph_rt_sys::MIN_DRIVER_VERSION);
    let features = crate::graph_features(Some(&d)).unwrap();
    assert!(features
        .iter()
        .any(|f| f.symbol == "cuFuncGetParamInfo" && f.supported));
    // Binding from another thread works and is needed there.
    let c2 = ctx.clone();
    std::thread::spawn(move || {
        c2.bind().unwrap();
        assert!(c2.is_current().unwrap());
    })
    .join()
    .unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn streams_priorities_and_cross_stream_waits() {
    let ctx = ctx();
    let (least, greatest) = Stream::priority_range(&ctx).unwrap();
    let hi = Stream::with_options(&ctx, StreamFlags::NonBlocking, greatest).unwrap();
    let lo = Stream::with_options(&ctx, StreamFlags::Blocking, least).unwrap();
    assert_eq!(hi.priority().unwrap(), greatest);
    assert_eq!(lo.priority().unwrap(), least);
    // Work on `hi` then `lo` waiting for it: lo sees hi's result.
    let f = function(&ctx, &graph_rt_kernels::AXPY, "axpy_f32");
    let n = 1 << 20;
    let x = random_f32(n);
    let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
    let mut dy = DeviceBuffer::<f32>::zeroed(&ctx, n).unwrap();
    let cfg = LaunchConfig::new(264u32, 256u32);
    // SAFETY: grid-stride over n elements of x and y.
    unsafe {
        hi.launch(&f, &cfg, (1.0f32, &dx, &mut dy, n as i32))
            .unwrap()
    };
    let done = hi.record_event().unwrap();
    lo.wait(&done).unwrap();
    // SAFETY: as above.
    unsafe {
        lo.launch(&f, &cfg, (2.0f32, &dx, &mut dy, n as i32))
            .unwrap()
    };
    lo.synchronize().unwrap();
    assert!(lo.is_idle().unwrap() && done.is_complete().unwrap());
    let y = dy.to_vec().unwrap();
    assert!(y
        .iter()
        .zip(&x)
        .all(|(y, x)| (y - 3.0 * x).abs() <= 1e-6 * x.abs().max(1.0)));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn events_time_a_known_kernel() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = function(&ctx, &graph_rt_kernels::AXPY, "axpy_f32");
    let n = 1usize << 26; // 256 MiB per buffer; axpy moves 3 × 256 MiB
    let dx = DeviceBuffer::<f32>::zeroed(&ctx, n).unwrap();
    let mut dy = DeviceBuffer::<f32>::zeroed(&ctx, n).unwrap();
    let cfg = LaunchConfig::new(132u32 * 8, 256u32);
    let (start, end) = (
        Event::new(&ctx, EventFlags::Timing).unwrap(),
        Event::new(&ctx, EventFlags::BlockingSync).unwrap(),
    );
    // SAFETY: grid-stride over n elements of both buffers.
    unsafe {
        stream
            .launch(&f, &cfg, (1.0f32, &dx, &mut dy, n as i32))
            .unwrap()
    };
    start.record(&stream).unwrap();
    for _ in 0..10 {
        // SAFETY: as above.
        unsafe {
            stream
                .launch(&f, &cfg, (1.0f32, &dx, &mut dy, n as i32))
                .unwrap()
        };
    }
    end.record(&stream).unwrap();
    end.synchronize().unwrap();
    let ms = Event::elapsed_ms(&start, &end).unwrap();
    let bytes = 10.0 * 3.0 * (n * 4) as f64;
    let tb_per_s = bytes / (ms as f64 * 1e-3) / 1e12;
    // No GPU moves more than ~10 TB/s; a timer that reports less time than that is wrong.
    assert!(
        tb_per_s < 10.0 && ms < 5_000.0,
        "{ms} ms for 10 axpy of 2^26 floats ({tb_per_s:.2} TB/s)"
    );
    println!("10 axpy of 2^26 floats: {ms:.3} ms, {tb_per_s:.2} TB/s");
    // An event without timing cannot be timed: a driver error, named.
    let untimed = Event::new(&ctx, EventFlags::DisableTiming).unwrap();
    untimed.record(&stream).unwrap();
    untimed.synchronize().unwrap();
    let e = Event::elapsed_ms(&start, &untimed).unwrap_err();
    assert_eq!(e.call(), Some("cuEventElapsedTime"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn invalid_launch_configuration_names_the_call_and_reason() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    let f = function(&ctx, &graph_rt_kernels::AXPY, "axpy_f32");
    let dx = DeviceBuffer::<f32>::zeroed(&ctx, 16).unwrap();
    let mut dy = DeviceBuffer::<f32>::zeroed(&ctx, 16).unwrap();
    // SAFETY: the launch is rejected before any kernel runs.
    let e = unsafe {
        stream.launch(
            &f,
            &LaunchConfig::new(1u32, 2048u32),
            (1.0f32, &dx, &mut dy, 16i32),
        )
    }
    .unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.call(), Some("cuLaunchKernel"));
    assert!(
        msg.contains("CUDA_ERROR_INVALID_VALUE") && msg.contains("2048 threads"),
        "{msg}"
    );
    // SAFETY: rejected before launch.
    let e = unsafe {
        stream.launch(
            &f,
            &LaunchConfig::new((1u32, 70_000u32), 32u32),
            (1.0f32, &dx, &mut dy, 16i32),
        )
    }
    .unwrap_err();
    assert!(e.to_string().contains("65535"), "{e}");
    // Wrong argument count and size: refused by graph-rt, nothing reaches the driver.
    // SAFETY: rejected before launch.
    let e = unsafe { stream.launch(&f, &LaunchConfig::new(1u32, 32u32), (1.0f32, &dx, &mut dy)) }
        .unwrap_err();
    assert!(
        matches!(e.misuse_kind(), Some(Misuse::ArgumentLayout { kernel, given })
            if *kernel == [4, 8, 8, 4] && *given == [4, 8, 8]),
        "{e}"
    );
    // SAFETY: rejected before launch.
    let e = unsafe {
        stream.launch(
            &f,
            &LaunchConfig::new(1u32, 32u32),
            (1.0f64, &dx, &mut dy, 16i32),
        )
    }
    .unwrap_err();
    assert!(
        matches!(e.misuse_kind(), Some(Misuse::ArgumentLayout { kernel, given })
            if *kernel == [4, 8, 8, 4] && *given == [8, 8, 8, 4]),
        "{e}"
    );
    // The stream is still usable.
    // SAFETY: valid launch over 16 elements.
    unsafe {
        stream
            .launch(
                &f,
                &LaunchConfig::new(1u32, 32u32),
                (1.0f32, &dx, &mut dy, 16i32),
            )
            .unwrap()
    };
    stream.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 9.0+"]
fn launch_attributes_go_through_cu_launch_kernel_ex() {
    let ctx = ctx();
    // Clusters need compute capability 9.0: fail (not pass untested) on an older GPU.
    let cc = ctx.device().compute_capability().unwrap();
    assert!(
        cc.0 >= 9,
        "thread-block clusters need compute capability 9.0; this GPU is {cc:?}"
    );
    let stream = Stream::new(&ctx).unwrap();
    let f = function(&ctx, &graph_rt_kernels::AXPY, "axpy_f32");
    let n = 4096;
    let x = random_f32(n);
    let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
    let mut dy = DeviceBuffer::<f32>::zeroed(&ctx, n).unwrap();
    let cfg = LaunchConfig::new(8u32, 128u32).cluster(2u32).priority(0);
    // SAFETY: grid-stride over n elements.
    unsafe {
        stream
            .launch(&f, &cfg, (2.0f32, &dx, &mut dy, n as i32))
            .unwrap()
    };
    stream.synchronize().unwrap();
    assert!(dy
        .to_vec()
        .unwrap()
        .iter()
        .zip(&x)
        .all(|(y, x)| *y == 2.0 * x));
    // A cluster that does not divide the grid is refused by the driver, named.
    let bad = LaunchConfig::new(3u32, 128u32).cluster(2u32);
    // SAFETY: rejected before launch.
    let e = unsafe { stream.launch(&f, &bad, (2.0f32, &dx, &mut dy, n as i32)) }.unwrap_err();
    assert_eq!(e.call(), Some("cuLaunchKernelEx"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn module_errors_carry_the_jit_log_and_the_name() {
    let ctx = ctx();
    let e = Module::from_ptx(
        &ctx,
        ".version 8.4\n.target sm_70\n.address_size 64\n.visible .entry broken( {\n",
    )
    .unwrap_err();
    assert_eq!(e.call(), Some("cuModuleLoadDataEx"));
    assert!(e.to_string().contains("JIT log"), "{e}");
    let m = Module::from_ptx(&ctx, graph_rt_kernels::AXPY.ptx).unwrap();
    let e = m.function("no_such_kernel").unwrap_err();
    assert!(e.to_string().contains("no_such_kernel"), "{e}");
    // SAFETY: refused by the magic-number check before the driver sees it.
    assert!(unsafe { Module::from_cubin(&ctx, b"not an elf") }.is_err());
    let f = m.function("axpy_f32").unwrap();
    assert_eq!(
        f.param_layout()
            .unwrap()
            .iter()
            .map(|p| p.size)
            .collect::<Vec<_>>(),
        [4, 8, 8, 4]
    );
    assert!(f.max_threads_per_block().unwrap() >= 256);
    // Occupancy: some blocks of 256 fit an SM; a block of more threads than any launch has, or
    // more dynamic shared memory than an SM has, fits none (0, not an error).
    let fit = f.max_active_blocks_per_sm(256, 0).unwrap();
    assert!((1..=64).contains(&fit), "{fit}");
    assert!(f
        .max_active_blocks_per_sm(256, 4 << 20)
        .map_or(true, |n| n == 0));
    assert!(f
        .max_active_blocks_per_sm(u32::MAX, 0)
        .map_or(true, |n| n == 0));
    // The function keeps the module loaded after the module handle is dropped.
    drop(m);
    let stream = Stream::new(&ctx).unwrap();
    let dx = DeviceBuffer::from_host(&ctx, &[1.0f32; 8]).unwrap();
    let mut dy = DeviceBuffer::<f32>::zeroed(&ctx, 8).unwrap();
    // SAFETY: 8 elements each.
    unsafe {
        stream
            .launch(
                &f,
                &LaunchConfig::new(1u32, 32u32),
                (1.0f32, &dx, &mut dy, 8i32),
            )
            .unwrap()
    };
    stream.synchronize().unwrap();
    assert_eq!(dy.to_vec().unwrap(), vec![1.0; 8]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn simulated_older_driver_reports_symbol_and_version() {
    let driver = graph_rt_sys::Driver::open()
        .unwrap()
        .simulate_version(12030);
    let e = driver.resolve(c"cuFuncGetParamInfo", 12040).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("cuFuncGetParamInfo") && msg.contains("12.4") && msg.contains("12.3"),
        "{msg}"
    );
    // What the simulated driver has still resolves.
    assert!(driver.resolve(c"cuMemAlloc", 3020).is_ok());
    // The real driver has it.
    assert!(graph_rt_sys::Driver::open()
        .unwrap()
        .resolve(c"cuFuncGetParamInfo", 12040)
        .is_ok());
}
