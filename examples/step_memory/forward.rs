//! The step's work, shared with the `step_memory` bench: a chain of `spread` kernels through
//! intermediates that cudarc allocates on the capturing stream (or that the caller made
//! before, to compare).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};

/// `spread(x, y, nx, ny)`: `y[i] = x[i % nx] + 1` for every `i < ny` (a grid-stride loop).
pub const SPREAD_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64
.visible .entry spread(.param .u64 x, .param .u64 y, .param .u32 nx, .param .u32 ny)
{
    .reg .b64 %rd<8>;
    .reg .b32 %r<10>;
    .reg .f32 %f<3>;
    .reg .pred %p<2>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u32 %r1, [nx];
    ld.param.u32 %r2, [ny];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.u32 %r6, %r3, %r4, %r5;
    mov.u32 %r7, %nctaid.x;
    mul.lo.u32 %r8, %r7, %r4;
LOOP:
    setp.ge.u32 %p1, %r6, %r2;
    @%p1 bra DONE;
    rem.u32 %r9, %r6, %r1;
    mul.wide.u32 %rd3, %r9, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.f32 %f2, %f1, 0f3F800000;
    mul.wide.u32 %rd5, %r6, 4;
    add.u64 %rd6, %rd2, %rd5;
    st.global.f32 [%rd6], %f2;
    add.u32 %r6, %r6, %r8;
    bra LOOP;
DONE:
    ret;
}
"#;

/// Intermediates a call allocates.
pub const TEMPORARIES: usize = 24;

/// The multiples of `n` floats the intermediates have: 1, 2, 4, 8, 16, 1, 2, ….
pub fn multiple(i: usize) -> usize {
    1 << (i % 5)
}

/// Floats of the input and output for intermediates adding up to at least `mib` MiB.
pub fn floats_for(mib: usize) -> usize {
    let units: usize = (0..TEMPORARIES).map(multiple).sum();
    (mib.max(1) << 20).div_ceil(units * 4).next_multiple_of(256)
}

/// `y = x + 25` (`n` floats each) on `cu` through [`TEMPORARIES`] intermediates, alive to the
/// end of the call as a forward pass keeps its activations: allocated here (`alloc`, freed when
/// each drops) or, with `made`, the buffers at those addresses (made before, at least as long;
/// their addresses taken before any capture, which a cudarc slice's event would join).
pub fn forward(
    cu: &Arc<CudaStream>,
    spread: &CudaFunction,
    x: u64,
    y: u64,
    n: usize,
    made: Option<&[u64]>,
) -> Result<(), cudarc::driver::DriverError> {
    let config = LaunchConfig {
        grid_dim: (1024, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut kept = Vec::with_capacity(TEMPORARIES);
    let (mut from, mut from_len) = (x, n as u32);
    for i in 0..TEMPORARIES {
        let len = n * multiple(i);
        let to = match made {
            Some(made) => made[i],
            None => {
                // SAFETY: spread writes every element before anything reads it.
                let t = unsafe { cu.alloc::<f32>(len) }?;
                let ptr = t.device_ptr(cu).0;
                kept.push(t);
                ptr
            }
        };
        let to_len = len as u32;
        // SAFETY: spread reads `from_len` floats at `from` and writes `to_len` floats at `to`.
        unsafe {
            cu.launch_builder(spread)
                .arg(&from)
                .arg(&to)
                .arg(&from_len)
                .arg(&to_len)
                .launch(config)?
        };
        (from, from_len) = (to, to_len);
    }
    let n = n as u32;
    // SAFETY: spread reads the last intermediate and writes `n` floats at `y`.
    unsafe {
        cu.launch_builder(spread)
            .arg(&from)
            .arg(&y)
            .arg(&from_len)
            .arg(&n)
            .launch(config)?
    };
    drop(kept);
    Ok(())
}
