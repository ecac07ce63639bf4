//! How a kernel is launched: grid and block dimensions, dynamic shared memory and launch
//! attributes.

use graph_rt_sys::{CUlaunchAttribute, CUlaunchAttributeID};

use crate::error::{Error, Misuse, Result};

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
impl From<[u32; 3]> for Dim3 {
    fn from([x, y, z]: [u32; 3]) -> Self {
        Self { x, y, z }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Self {
        Self { x, y, z }
    }
}

/// Distinct launch attributes one configuration holds (CUDA defines fewer than this many kinds
/// that a kernel launch accepts together).
const MAX_ATTRS: usize = 8;

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
    // More distinct attributes were set than fit: the launch refuses the configuration.
    overflow: bool,
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
            overflow: false,
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
    pub fn cluster(self, dims: impl Into<Dim3>) -> Self {
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
    pub fn cooperative(self) -> Self {
        let mut a = CUlaunchAttribute {
            id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
            ..Default::default()
        };
        a.value.cooperative = 1;
        self.attribute(a)
    }

    /// Sets the launch's priority.
    pub fn priority(self, priority: i32) -> Self {
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
    pub fn programmatic_stream_serialization(self) -> Self {
        let mut a = CUlaunchAttribute {
            id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            ..Default::default()
        };
        a.value.programmaticStreamSerializationAllowed = 1;
        self.attribute(a)
    }

    /// Sets a raw launch attribute; setting an attribute kind again replaces its value. A
    /// configuration holds up to eight kinds: a launch with more is refused with
    /// [`Misuse::TooLarge`], nothing is dropped silently.
    pub fn attribute(mut self, attribute: CUlaunchAttribute) -> Self {
        let set = &mut self.attrs[..self.n_attrs];
        if let Some(a) = set.iter_mut().find(|a| a.id == attribute.id) {
            *a = attribute;
        } else if self.n_attrs < MAX_ATTRS {
            self.attrs[self.n_attrs] = attribute;
            self.n_attrs += 1;
        } else {
            self.overflow = true;
        }
        self
    }

    /// The configuration without programmatic stream serialization (a launch that must wait
    /// fully for the previous one).
    pub(crate) fn without_programmatic(&self) -> Self {
        let id = CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        let mut c = LaunchConfig::new(self.grid, self.block).shared_mem(self.shared_mem_bytes);
        for a in self.attributes().iter().filter(|a| a.id != id) {
            c = c.attribute(*a);
        }
        c.overflow = self.overflow;
        c
    }

    /// Whether the configuration can be launched as set: called by every launch and node update.
    #[inline]
    pub(crate) fn validate(&self, call: &'static str) -> Result<()> {
        if self.overflow {
            return Err(Error::misuse(
                call,
                Misuse::TooLarge {
                    what: "launch attributes",
                },
                format!("more than {MAX_ATTRS} distinct launch attributes were set on the configuration"),
            ));
        }
        Ok(())
    }

    /// The attributes, as the array `CUlaunchConfig` points into (the first
    /// [`attributes`](Self::attributes)`().len()` are set).
    #[inline]
    pub(crate) fn attrs_array(&self) -> [CUlaunchAttribute; MAX_ATTRS] {
        self.attrs
    }

    /// The launch attributes set so far.
    pub fn attributes(&self) -> &[CUlaunchAttribute] {
        &self.attrs[..self.n_attrs]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_elements_rounds_up_and_never_launches_zero_blocks() {
        let c = LaunchConfig::for_elements(1000, 256);
        assert_eq!((c.grid.x, c.block.x), (4, 256));
        assert_eq!(LaunchConfig::for_elements(0, 256).grid.x, 1);
        assert_eq!(LaunchConfig::for_elements(5, 0).block.x, 1);
    }

    #[test]
    fn attributes_replace_their_kind_and_overflow_is_refused_at_launch() {
        let c = LaunchConfig::new(1, 1)
            .priority(1)
            .priority(2)
            .cooperative();
        assert_eq!(c.attributes().len(), 2);
        // SAFETY: the union member matches the attribute's id.
        assert_eq!(unsafe { c.attributes()[0].value.priority }, 2);
        assert!(c.validate("test").is_ok());
        let mut c = LaunchConfig::new(1, 1);
        for id in 1..=MAX_ATTRS as u32 + 1 {
            c = c.attribute(CUlaunchAttribute {
                id: CUlaunchAttributeID(id),
                ..Default::default()
            });
        }
        assert_eq!(c.attributes().len(), MAX_ATTRS);
        let e = c.validate("cuLaunchKernelEx").unwrap_err();
        assert_eq!(
            e.misuse_kind(),
            Some(&Misuse::TooLarge {
                what: "launch attributes"
            })
        );
    }
}
