//! The workload most graph tests share: chains of `add1` (`kernels::CHAIN`) over buffers of `N`
//! floats, kernel k reading buffer k and writing buffer k + 1, checked against `x + steps`.

use super::{assert_close, function, random_f32};
use crate::{CaptureMode, Context, DeviceBuffer, Function, Graph, GraphExec, LaunchConfig, Stream};

/// Floats per buffer.
pub(crate) const N: usize = 4096;

/// `add1(const float* x, float* y, int n)` of `kernels::CHAIN`.
pub(crate) fn add1(ctx: &Context) -> Function {
    function(ctx, &graph_rt_kernels::CHAIN, "add1")
}

/// `count` buffers of `N` floats, poisoned with NaN: a kernel that reads one nothing wrote
/// computes NaN, which the checks catch, and initcheck sees the memory initialized. The fill
/// waits for all work of the context: a test that allocates while a launch must still run
/// allocates with `DeviceBuffer::alloc`.
pub(crate) fn buffers(ctx: &Context, count: usize) -> Vec<DeviceBuffer<f32>> {
    (0..count)
        .map(|_| {
            let mut b = DeviceBuffer::alloc(ctx, N).unwrap();
            b.fill_u32(f32::NAN.to_bits()).unwrap();
            b
        })
        .collect()
}

/// Captures `add1` from buffer k to buffer k+1 for every k.
pub(crate) fn capture_chain(
    stream: &Stream,
    f: &Function,
    bufs: &[DeviceBuffer<f32>],
) -> crate::Result<Graph> {
    capture_chain_with(stream, f, &LaunchConfig::for_elements(N, 256), bufs)
}

/// As [`capture_chain`], each launch configured by `cfg`.
pub(crate) fn capture_chain_with(
    stream: &Stream,
    f: &Function,
    cfg: &LaunchConfig,
    bufs: &[DeviceBuffer<f32>],
) -> crate::Result<Graph> {
    stream.capture(CaptureMode::Global, |s| {
        for k in 0..bufs.len() - 1 {
            // SAFETY: add1 touches N elements of two distinct N-element buffers (a kernel
            // launched programmatically waits before reading: see kernels::CHAIN_PDL).
            unsafe { s.launch(f, cfg, (&bufs[k], &bufs[k + 1], N as i32))? };
        }
        Ok(())
    })
}

/// Asserts that `out` holds `x + steps`.
pub(crate) fn check_chain(out: &DeviceBuffer<f32>, x: &[f32], steps: usize) {
    let want: Vec<f64> = x.iter().map(|&v| v as f64 + steps as f64).collect();
    assert_close(&out.to_vec().unwrap(), &want, 1e-6);
}

/// Writes `N` fresh random floats into `input` (done on the device when this returns) and
/// returns them, for the CPU reference.
pub(crate) fn fresh_input(input: &mut DeviceBuffer<f32>) -> Vec<f32> {
    let x = random_f32(N);
    input.copy_from_host(&x).unwrap();
    x
}

/// Launches `exec` on `stream` and waits for it, so its outputs can be read back.
pub(crate) fn replay(exec: &GraphExec, stream: &Stream) {
    exec.launch(stream).unwrap();
    stream.synchronize().unwrap();
}
