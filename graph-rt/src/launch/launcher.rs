//! Launching a kernel on a stream: the argument check against the kernel's parameter layout,
//! `cuLaunchKernel`/`cuLaunchKernelEx`, and the diagnosis of a failed launch.

use std::ffi::c_void;

use graph_rt_sys::CUlaunchConfig;

use crate::driver::{cu_code, Function, ParamInfo, Returned, Stream};
use crate::error::{Error, Misuse, Result};
use crate::launch::{KernelArgs, LaunchConfig};

/// Where kernels can be launched: a [`Stream`] (runs them) or a
/// [`CaptureScope`](crate::CaptureScope) (records them into a graph, keeping their arguments
/// alive). Code written against it serves both.
pub trait Launcher {
    /// Launches (or records) `f` with `args`, checked against the kernel's parameter layout.
    ///
    /// # Safety
    /// As [`Stream::launch`].
    unsafe fn launch<A: KernelArgs>(
        &self,
        f: &Function,
        config: &LaunchConfig,
        args: A,
    ) -> Result<()>;
}

impl Launcher for Stream {
    #[inline]
    unsafe fn launch<A: KernelArgs>(
        &self,
        f: &Function,
        config: &LaunchConfig,
        args: A,
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { Stream::launch(self, f, config, args) }
    }
}

/// Checks argument sizes against the kernel's parameter layout.
pub(crate) fn check_layout(
    f: &Function,
    layout: &[ParamInfo],
    sizes: &[usize],
    call: &'static str,
) -> Result<()> {
    if layout.len() == sizes.len() && layout.iter().zip(sizes).all(|(p, s)| p.size == *s) {
        return Ok(());
    }
    let expected: Vec<usize> = layout.iter().map(|p| p.size).collect();
    Err(Error::misuse(
        call,
        Misuse::ArgumentLayout {
            kernel: expected.clone(),
            given: sizes.to_vec(),
        },
        format!(
            "kernel `{}` takes {} parameters of {:?} bytes; the arguments are {} of {:?} bytes",
            f.name(),
            layout.len(),
            expected,
            sizes.len(),
            sizes
        ),
    ))
}

impl Stream {
    /// Launches `f` on this stream with `args`, after checking the arguments' count and sizes
    /// against the kernel's parameter layout. Uses `cuLaunchKernel`, or `cuLaunchKernelEx` when
    /// the configuration has launch attributes. Returns once the launch is queued.
    ///
    /// # Safety
    /// The kernel must be correct for these arguments: every address it reaches through them
    /// must be valid device memory of this context for what it reads and writes, each argument
    /// must be of the type the kernel declares (the layout check only sees sizes), and the
    /// buffers and `f` must stay alive until the kernel is done (the memory of a dropped
    /// [`DeviceBuffer`](crate::DeviceBuffer) from [`DeviceBuffer::alloc`](crate::DeviceBuffer::alloc)
    /// is freed only once the device's work is done). If the stream is capturing, "until
    /// the kernel is done" means every replay of the graph: prefer
    /// [`CaptureScope::launch`](crate::CaptureScope::launch), which keeps them alive.
    #[inline]
    pub unsafe fn launch<A: KernelArgs>(
        &self,
        f: &Function,
        config: &LaunchConfig,
        args: A,
    ) -> Result<()> {
        self.context().bind()?;
        let layout = f.param_layout()?;
        args.with_params(|params, sizes| {
            let call = if config.attributes().is_empty() {
                "cuLaunchKernel"
            } else {
                "cuLaunchKernelEx"
            };
            config.validate(call)?;
            check_layout(f, layout, sizes, call)?;
            // SAFETY: `params` holds one pointer per kernel parameter, each to a value of the
            // size the kernel expects (checked above), alive for this call; the caller upholds
            // the kernel's memory contract.
            let r = unsafe { raw_launch(f, config, self, params.as_mut_ptr())? };
            if r.ok() {
                Ok(())
            } else {
                Err(diagnose(r.error(), f, config))
            }
        })
    }
}

/// # Safety
/// `params` must point at one valid pointer per kernel parameter.
#[inline]
unsafe fn raw_launch(
    f: &Function,
    c: &LaunchConfig,
    stream: &Stream,
    params: *mut *mut c_void,
) -> Result<Returned> {
    if c.attributes().is_empty() {
        // SAFETY: forwarded from the caller.
        return unsafe {
            cu_code!(cuLaunchKernel(
                f.as_raw(),
                c.grid.x,
                c.grid.y,
                c.grid.z,
                c.block.x,
                c.block.y,
                c.block.z,
                c.shared_mem_bytes,
                stream.as_raw(),
                params,
                std::ptr::null_mut(),
            ))
        };
    }
    let mut attrs = c.attrs_array();
    let config = CUlaunchConfig {
        gridDimX: c.grid.x,
        gridDimY: c.grid.y,
        gridDimZ: c.grid.z,
        blockDimX: c.block.x,
        blockDimY: c.block.y,
        blockDimZ: c.block.z,
        sharedMemBytes: c.shared_mem_bytes,
        hStream: stream.as_raw(),
        attrs: attrs.as_mut_ptr(),
        numAttrs: c.attributes().len() as u32,
    };
    // SAFETY: forwarded from the caller; `attrs` outlives the call.
    unsafe {
        cu_code!(cuLaunchKernelEx(
            &config,
            f.as_raw(),
            params,
            std::ptr::null_mut()
        ))
    }
}

/// Explains a failed launch in terms of the configuration, when a limit it breaks is known.
#[cold]
fn diagnose(e: Error, f: &Function, c: &LaunchConfig) -> Error {
    let threads = c.block.volume();
    let max_threads = f.max_threads_per_block().unwrap_or(1024) as u64;
    let reason = if c.grid.volume() == 0 || c.block.volume() == 0 {
        format!(
            "grid {:?} and block {:?} must have no zero dimension",
            c.grid, c.block
        )
    } else if threads > max_threads {
        format!("a block of {threads} threads exceeds this kernel's limit of {max_threads} threads per block")
    } else if c.block.x > 1024 || c.block.y > 1024 || c.block.z > 64 {
        format!(
            "block {:?} exceeds the per-dimension limits (1024, 1024, 64)",
            c.block
        )
    } else if c.grid.y > 65535 || c.grid.z > 65535 || c.grid.x > i32::MAX as u32 {
        format!(
            "grid {:?} exceeds the limits (2^31-1, 65535, 65535)",
            c.grid
        )
    } else if let Ok(max) = f.max_dynamic_shared_bytes() {
        if c.shared_mem_bytes as i64 > max as i64 {
            format!(
                "{} bytes of dynamic shared memory exceed this kernel's limit of {max} (raise it with Function::set_max_dynamic_shared_bytes)",
                c.shared_mem_bytes
            )
        } else {
            return e;
        }
    } else {
        return e;
    };
    e.with_hint(reason)
}
