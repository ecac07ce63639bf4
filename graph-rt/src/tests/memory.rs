use rand::RngCore;

use super::ctx;
use crate::{DeviceBuffer, Misuse, PinnedHostBuffer, Stream};

#[test]
#[ignore = "needs a CUDA GPU"]
fn round_trips_of_odd_sizes() {
    let ctx = ctx();
    let stream = Stream::new(&ctx).unwrap();
    for n in [0usize, 1, 3, 17, 1023, 65_537, 1_000_003] {
        let mut src = vec![0u8; n];
        rand::rng().fill_bytes(&mut src);
        // Synchronous H2D, D2D, D2H.
        let a = DeviceBuffer::from_host(&ctx, &src).unwrap();
        let mut b = DeviceBuffer::<u8>::alloc(&ctx, n).unwrap();
        b.fill_bytes(0xAB).unwrap();
        b.copy_from_device(&a).unwrap();
        assert_eq!(b.to_vec().unwrap(), src, "sync round trip of {n} bytes");
        // Stream-ordered allocation and pinned asynchronous copies.
        let pinned_in = PinnedHostBuffer::from_slice(&ctx, &src).unwrap();
        let mut pinned_out = PinnedHostBuffer::<u8>::zeroed(&ctx, n).unwrap();
        let mut c = DeviceBuffer::<u8>::alloc_async(&stream, n).unwrap();
        let mut d = DeviceBuffer::<u8>::alloc_async(&stream, n).unwrap();
        // SAFETY: both pinned buffers outlive the copies: the stream is synchronized below.
        unsafe {
            c.copy_from_pinned_async(&pinned_in, &stream).unwrap();
            d.copy_from_device_async(&c, &stream).unwrap();
            d.copy_to_pinned_async(&mut pinned_out, &stream).unwrap();
        }
        stream.synchronize().unwrap();
        assert_eq!(&pinned_out[..], &src[..], "async round trip of {n} bytes");
    }
    assert!(ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn typed_round_trip_and_fills() {
    let ctx = ctx();
    let src: Vec<f64> = (0..4099).map(|_| rand::random::<f64>()).collect();
    let buf = DeviceBuffer::from_host(&ctx, &src).unwrap();
    assert_eq!(buf.to_vec().unwrap(), src);
    let mut f = DeviceBuffer::<f32>::alloc(&ctx, 333).unwrap();
    f.fill_u32(1.5f32.to_bits()).unwrap();
    assert!(f.to_vec().unwrap().iter().all(|&v| v == 1.5));
    f.fill_zero().unwrap();
    assert!(f.to_vec().unwrap().iter().all(|&v| v == 0.0));
    let mut odd = DeviceBuffer::<u16>::alloc(&ctx, 3).unwrap();
    let e = odd.fill_u32(0).unwrap_err();
    assert_eq!(
        e.misuse_kind(),
        Some(&Misuse::NotMultiple { multiple: 4 }),
        "{e}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn length_mismatches_are_errors_not_panics() {
    let ctx = ctx();
    let mut a = DeviceBuffer::<f32>::alloc(&ctx, 4).unwrap();
    let e = a.copy_from_host(&[1.0; 3]).unwrap_err();
    assert_eq!(
        e.misuse_kind(),
        Some(&Misuse::LengthMismatch { ours: 4, theirs: 3 }),
        "{e}"
    );
    let mut out = [0.0f32; 5];
    assert!(a.copy_to_host(&mut out).is_err());
    let b = DeviceBuffer::<f32>::alloc(&ctx, 2).unwrap();
    assert!(a.copy_from_device(&b).is_err());
    let huge = DeviceBuffer::<f64>::alloc(&ctx, usize::MAX / 4).unwrap_err();
    assert_eq!(
        huge.misuse_kind(),
        Some(&Misuse::TooLarge { what: "bytes" }),
        "{huge}"
    );
    let oom = DeviceBuffer::<u8>::alloc(&ctx, 1 << 50).unwrap_err();
    assert_eq!(oom.call(), Some("cuMemAlloc"));
    assert_eq!(
        oom.code(),
        Some(graph_rt_sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn foreign_memory_is_not_freed() {
    let ctx = ctx();
    let owner = DeviceBuffer::from_host(&ctx, &[7u32; 16]).unwrap();
    {
        // SAFETY: `owner` outlives the view and nobody writes it meanwhile.
        let view = unsafe { DeviceBuffer::<u32>::from_raw(&ctx, owner.as_raw(), 16) };
        assert_eq!(view.to_vec().unwrap(), vec![7; 16]);
    }
    assert_eq!(owner.to_vec().unwrap(), vec![7; 16]);
    assert!(ctx.take_deferred_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn host_only_addresses_are_told_from_device_pinned_and_unmapped_ones() {
    use crate::driver::is_host_only;
    let ctx = ctx();
    ctx.bind().unwrap();
    // The heap is the host's alone unless the device reaches pageable memory (HMM, ATS).
    let pageable = ctx
        .device()
        .attribute(graph_rt_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS)
        .unwrap();
    println!("pageable memory access: {pageable}");
    let is_host_only = |addr| is_host_only(addr, pageable != 0);
    let on_stack = 7u64;
    let on_heap = Box::new([0u8; 64]);
    let device = DeviceBuffer::<f32>::zeroed(&ctx, 64).unwrap();
    let pinned = PinnedHostBuffer::<f32>::zeroed(&ctx, 64).unwrap();
    assert!(is_host_only(std::ptr::addr_of!(on_stack) as u64));
    assert!(!is_host_only(device.as_raw()));
    assert!(!is_host_only(pinned.as_ptr() as u64));
    assert_eq!(is_host_only(on_heap.as_ptr() as u64), pageable == 0);
    // A freed device allocation's address: reserved by the driver, not readable by the host.
    let freed = DeviceBuffer::<f32>::zeroed(&ctx, 1 << 20).unwrap();
    let addr = freed.as_raw();
    drop(freed);
    ctx.synchronize().unwrap();
    assert!(!is_host_only(addr));
    // Small integers and the null page are no mapping.
    assert!(!is_host_only(0));
    assert!(!is_host_only(4096));
}
