//! Typed kernel launch: launch configuration, the kernel-argument traits, and the launch itself.

use std::any::Any;
use std::ffi::c_void;
use std::mem::size_of;
use std::sync::Arc;

use bytemuck::Pod;
use cuda_sys::{CUdeviceptr, CUlaunchAttribute, CUlaunchAttributeID, CUlaunchConfig, CUresult};

use crate::error::{Error, Result};
use crate::memory::DeviceBuffer;
use crate::module::{Function, ParamInfo};
use crate::stream::Stream;

/// Grid or block dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dim3 {
    /// x extent.
    pub x: u32,
    /// y extent.
    pub y: u32,
    /// z extent.
    pub z: u32,
}

impl Dim3 {
    /// `x * y * z`, without overflow.
    pub fn volume(&self) -> u64 {
        self.x as u64 * self.y as u64 * self.z as u64
    }
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Self {
        Self { x, y: 1, z: 1 }
    }
}
impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Self {
        Self { x, y, z: 1 }
    }
}
impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Self {
        Self { x, y, z }
    }
}

const MAX_ATTRS: usize = 4;

/// How a kernel is launched: grid, block, dynamic shared memory, and optional launch attributes
/// (cluster dimensions, cooperative launch, priority, or any raw `CUlaunchAttribute`).
#[derive(Clone, Copy)]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
    attrs: [CUlaunchAttribute; MAX_ATTRS],
    n_attrs: usize,
}

impl std::fmt::Debug for LaunchConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchConfig")
            .field("grid", &self.grid)
            .field("block", &self.block)
            .field("shared_mem_bytes", &self.shared_mem_bytes)
            .field("attributes", &self.n_attrs)
            .finish()
    }
}

impl LaunchConfig {
    /// A launch of `grid` blocks of `block` threads, no dynamic shared memory.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> Self {
        Self {
            grid: grid.into(),
            block: block.into(),
            shared_mem_bytes: 0,
            attrs: [CUlaunchAttribute::default(); MAX_ATTRS],
            n_attrs: 0,
        }
    }

    /// One thread per element of `n`, in blocks of `block_size` threads (at least one block).
    pub fn for_elements(n: usize, block_size: u32) -> Self {
        let block_size = block_size.max(1);
        let blocks = n.div_ceil(block_size as usize).clamp(1, u32::MAX as usize) as u32;
        Self::new(blocks, block_size)
    }

    /// Sets the dynamic shared memory per block.
    pub fn shared_mem(mut self, bytes: u32) -> Self {
        self.shared_mem_bytes = bytes;
        self
    }

    /// Launches thread-block clusters of `dims` blocks (compute capability 9.0+).
    pub fn cluster(self, dims: impl Into<Dim3>) -> Result<Self> {
        let d = dims.into();
        let mut a = CUlaunchAttribute {
            id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
            ..Default::default()
        };
        a.value.clusterDim.x = d.x;
        a.value.clusterDim.y = d.y;
        a.value.clusterDim.z = d.z;
        self.attribute(a)
    }

    /// Makes the launch cooperative (grid-wide synchronization allowed).
    pub fn cooperative(self) -> Result<Self> {
        let mut a = CUlaunchAttribute {
            id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
            ..Default::default()
        };
        a.value.cooperative = 1;
        self.attribute(a)
    }

    /// Sets the launch's priority.
    pub fn priority(self, priority: i32) -> Result<Self> {
        let mut a = CUlaunchAttribute {
            id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PRIORITY,
            ..Default::default()
        };
        a.value.priority = priority;
        self.attribute(a)
    }

    /// Allows programmatic dependent launch (compute capability 9.0+;
    /// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`): this kernel may be scheduled
    /// before the previous kernel on the stream has finished, once every block of that kernel has
    /// executed `griddepcontrol.launch_dependents` or exited. Captured, such launches become
    /// [`EdgeKind::Programmatic`](crate::EdgeKind::Programmatic) graph edges, and a replayed chain
    /// hides most of each kernel-to-kernel gap.
    ///
    /// The kernel must execute `griddepcontrol.wait` (CUDA C: `cudaGridDependencySynchronize()`)
    /// before it reads anything the previous kernel writes, or it races with it: launches are
    /// `unsafe`, and this is part of their contract. `graph_rt::kernels::CHAIN_PDL` is such a
    /// kernel.
    pub fn programmatic_stream_serialization(self) -> Result<Self> {
        let mut a = CUlaunchAttribute {
            id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            ..Default::default()
        };
        a.value.programmaticStreamSerializationAllowed = 1;
        self.attribute(a)
    }

    /// Adds a raw launch attribute (at most four per launch).
    pub fn attribute(mut self, attribute: CUlaunchAttribute) -> Result<Self> {
        if self.n_attrs == MAX_ATTRS {
            return Err(Error::invalid(
                "cuLaunchKernelEx",
                format!("at most {MAX_ATTRS} launch attributes"),
            ));
        }
        self.attrs[self.n_attrs] = attribute;
        self.n_attrs += 1;
        Ok(self)
    }

    /// The launch attributes set so far.
    pub fn attributes(&self) -> &[CUlaunchAttribute] {
        &self.attrs[..self.n_attrs]
    }
}

/// Something a graph keeps alive while any of its nodes may use it (an allocation, a module).
pub type Resource = Arc<dyn Any + Send + Sync>;

/// A value that can be passed to a kernel parameter.
///
/// `Param` is the plain value the kernel receives (a number, a device address, a struct passed
/// by value); its size is checked against the kernel's parameter layout at launch. Implement it
/// for your own argument kinds (a foreign buffer, a table slot) to pass them directly.
///
/// Graphs keep alive what arguments name in [`KernelArg::retain`] (a [`DeviceBuffer`]'s
/// allocation). A raw device address passed as a number (`u64`) is not kept alive: the caller of
/// the (unsafe) launch, capture or update promises that the memory stays valid for every replay.
pub trait KernelArg {
    /// The value copied into the kernel's parameter buffer.
    type Param: Copy + 'static;
    /// The value for this launch.
    fn to_param(&self) -> Self::Param;
    /// Adds what must stay alive while a graph node launched with this argument exists (the
    /// allocation behind a device address). Plain values have nothing to keep.
    fn retain(&self, _keep: &mut Vec<Resource>) {}
}

macro_rules! by_value {
    ($($t:ty),*) => {$(
        impl KernelArg for $t {
            type Param = $t;
            #[inline]
            fn to_param(&self) -> $t { *self }
        }
    )*};
}
by_value!(i8, u8, i16, u16, i32, u32, i64, u64, isize, usize, f32, f64);

impl<T: Pod> KernelArg for &DeviceBuffer<T> {
    type Param = CUdeviceptr;
    #[inline]
    fn to_param(&self) -> CUdeviceptr {
        self.as_raw()
    }
    fn retain(&self, keep: &mut Vec<Resource>) {
        keep.push(self.allocation().clone());
    }
}

impl<T: Pod> KernelArg for &mut DeviceBuffer<T> {
    type Param = CUdeviceptr;
    #[inline]
    fn to_param(&self) -> CUdeviceptr {
        self.as_raw()
    }
    fn retain(&self, keep: &mut Vec<Resource>) {
        keep.push(self.allocation().clone());
    }
}

/// A whole argument list: tuples of up to 16 [`KernelArg`]s (and `()`).
pub trait KernelArgs {
    /// Calls `f` with a pointer to each parameter value and each value's size; the values live
    /// on the stack for the duration of the call.
    fn with_params<R>(&self, f: impl FnOnce(&mut [*mut c_void], &[usize]) -> R) -> R;
    /// Adds what each argument needs kept alive (see [`KernelArg::retain`]).
    fn retain(&self, keep: &mut Vec<Resource>);
}

macro_rules! tuple_args {
    ($($name:ident $idx:tt),*) => {
        impl<$($name: KernelArg),*> KernelArgs for ($($name,)*) {
            #[inline]
            #[allow(unused_mut, unused_variables)]
            fn with_params<R>(&self, f: impl FnOnce(&mut [*mut c_void], &[usize]) -> R) -> R {
                let values = ($(self.$idx.to_param(),)*);
                let mut ptrs = [$(&values.$idx as *const $name::Param as *mut c_void),*];
                f(&mut ptrs, &[$(size_of::<$name::Param>()),*])
            }
            #[allow(unused_variables)]
            fn retain(&self, keep: &mut Vec<Resource>) {
                $(self.$idx.retain(keep);)*
            }
        }
    };
}
tuple_args!();
tuple_args!(A 0);
tuple_args!(A 0, B 1);
tuple_args!(A 0, B 1, C 2);
tuple_args!(A 0, B 1, C 2, D 3);
tuple_args!(A 0, B 1, C 2, D 3, E 4);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);

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
    Err(Error::invalid(
        call,
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
    /// buffers and `f` must stay alive until the kernel is done (dropping a [`DeviceBuffer`]
    /// allocated by [`DeviceBuffer::alloc`] waits for it). If the stream is capturing, "until
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
            let call = if config.n_attrs == 0 {
                "cuLaunchKernel"
            } else {
                "cuLaunchKernelEx"
            };
            check_layout(f, layout, sizes, call)?;
            // SAFETY: `params` holds one pointer per kernel parameter, each to a value of the
            // size the kernel expects (checked above), alive for this call; the caller upholds
            // the kernel's memory contract.
            let code = unsafe { raw_launch(f, config, self, params.as_mut_ptr())? };
            if code == CUresult::CUDA_SUCCESS {
                Ok(())
            } else {
                Err(diagnose(Error::driver(call, code), f, config))
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
) -> Result<CUresult> {
    if c.n_attrs == 0 {
        // SAFETY: forwarded from the caller.
        return Ok(unsafe {
            cuda_sys::cuLaunchKernel(
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
            )
        }?);
    }
    let mut attrs = c.attrs;
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
        numAttrs: c.n_attrs as u32,
    };
    // SAFETY: forwarded from the caller; `attrs` outlives the call.
    Ok(unsafe { cuda_sys::cuLaunchKernelEx(&config, f.as_raw(), params, std::ptr::null_mut()) }?)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuple_args_expose_values_and_sizes() {
        let n = 7i32;
        let a = 2.5f32;
        (a, n, 3u64).with_params(|ptrs, sizes| {
            assert_eq!(sizes, &[4, 4, 8]);
            // SAFETY: the pointers point at the values just converted.
            unsafe {
                assert_eq!(*(ptrs[0] as *const f32), 2.5);
                assert_eq!(*(ptrs[1] as *const i32), 7);
                assert_eq!(*(ptrs[2] as *const u64), 3);
            }
        });
        ().with_params(|ptrs, sizes| assert!(ptrs.is_empty() && sizes.is_empty()));
    }

    #[test]
    fn for_elements_rounds_up_and_never_launches_zero_blocks() {
        let c = LaunchConfig::for_elements(1000, 256);
        assert_eq!((c.grid.x, c.block.x), (4, 256));
        assert_eq!(LaunchConfig::for_elements(0, 256).grid.x, 1);
        assert_eq!(LaunchConfig::for_elements(5, 0).block.x, 1);
    }

    #[test]
    fn at_most_four_attributes() {
        let mut c = LaunchConfig::new(1, 1);
        for _ in 0..4 {
            c = c.priority(0).unwrap();
        }
        assert_eq!(c.attributes().len(), 4);
        assert!(c.priority(0).is_err());
    }
}
