//! The in-graph prelude, shipped as linked cubins: it calls the device graph API, whose device
//! runtime (`libcudadevrt.a`) no driver ships, so it is linked once, by `kernels/prelude/build.py`.

/// A kernel module shipped as linked cubins, one per GPU architecture, instead of PTX.
///
/// A cubin runs only on the architecture it was built for: pick one with
/// [`Cubins::for_compute_capability`] and load it with `cuModuleLoadData`. On any other GPU
/// there is none, and the caller must fall back to doing without the module.
#[derive(Debug, Clone, Copy)]
pub struct Cubins {
    /// File stem of the source (`kernels/<name>/<name>.cu`) and of the cubins
    /// (`kernels/<name>/<name>_sm_XY.cubin`).
    pub name: &'static str,
    /// Names of the `extern "C" __global__` functions every cubin exports.
    pub entry_points: &'static [&'static str],
    /// The ELF image for `sm_80`: loads on compute capability 8.x (8.0, 8.6, 8.7, 8.9).
    pub sm_80: &'static [u8],
    /// The ELF image for `sm_90`: loads on compute capability 9.0 only.
    pub sm_90: &'static [u8],
}

impl Cubins {
    /// The cubin that loads on a GPU of compute capability `major.minor`: [`Cubins::sm_80`] on
    /// 8.x, [`Cubins::sm_90`] on 9.0, `None` on any other GPU (7.x, 10.0, 12.0, ...), where the
    /// caller must fall back.
    pub const fn for_compute_capability(&self, major: u32, minor: u32) -> Option<&'static [u8]> {
        match (major, minor) {
            (8, _) => Some(self.sm_80),
            (9, 0) => Some(self.sm_90),
            _ => None,
        }
    }
}

/// `prelude/prelude.cu`: the in-graph prelude, which patches the kernel-parameter words of
/// device-updatable graph nodes from the device-resident argument table (see [`TABLE`]) inside
/// the graph, so that a replay reads the buffers the table holds now with no host-side node
/// update.
///
/// ```c
/// struct PreludePatch {                // 24 bytes, 8-aligned
///     cudaGraphDeviceNode_t node;      // the node's device handle
///     unsigned long long interior;     // added to the slot's value
///     unsigned int offset;             // byte offset of the word in the node's parameters
///     unsigned int slot;               // table slot holding the buffer's address
/// };
/// extern "C" __global__ void prelude_patch(const PreludePatch* patches, unsigned int count,
///                                          const unsigned long long* table);
/// extern "C" __global__ void prelude_refresh_patch(
///     const unsigned long long* mirrors, unsigned long long* table, unsigned int words,
///     unsigned int depth, unsigned long long* seq, unsigned long long* acks,
///     const PreludePatch* patches, unsigned int count);
/// ```
///
/// `prelude_refresh_patch` is [`TABLE`]'s `table_refresh` (same first six parameters, same
/// effect: both include `cuda/refresh.cuh`) with the patches spread over its grid of 256-thread
/// blocks (thread `i` of the grid patches `i`, `i + grid`, ...): graph-rt puts it in the place of
/// a graph's refresh node, one kernel fewer at the head of every replay. The rest of this section describes `prelude_patch`.
///
/// One thread per patch (`i = blockIdx.x * blockDim.x + threadIdx.x`, `i < count`), so the grid
/// must cover `count`. Thread `i` reads `p = patches[i]` (device memory) and writes the 8-byte
/// value `table[p.slot] + p.interior` at byte `p.offset` of node `p.node`'s kernel parameters
/// with `cudaGraphKernelNodeSetParam`; the change takes effect for the node's next execution,
/// including the one in this launch of the graph.
///
/// Each patched node must be device-updatable: given the kernel-node attribute
/// `CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE` (whose value holds the `node` handle) before
/// the graph is instantiated. The prelude node must run after the table's refresh ([`TABLE`]'s
/// `table_refresh`) and before every node it patches, with a full (not programmatic) edge to
/// each: the patches must be complete when a patched node starts. On an H200 (driver 580), once
/// a graph holds device-updatable nodes, a second instantiation, `cudaGraphClone` and
/// `cudaGraphExecUpdate` of it return 801 (not supported) while its exec exists.
///
/// The cubins: [`Cubins::sm_80`] loads on compute capability 8.x, [`Cubins::sm_90`] on 9.0;
/// on other GPUs neither loads, and the caller must fall back (patch the nodes from the host).
/// `kernels/prelude/build.py` makes them from `prelude.cu` with pinned PyPI wheels (NVRTC 12.4
/// with `-rdc=true`, then nvJitLink 12.9 with `libcudadevrt.a` from
/// `nvidia-cuda-runtime-cu12==12.9.79`), byte-reproducibly; CI runs `build.py --check`. No CUDA
/// toolkit is needed to build this crate or to load the cubins: the driver provides
/// `cudaGraphKernelNodeSetParam` at load (the device graph API needs a driver for CUDA 12.4 or
/// newer; checked on driver 580 with `cuModuleLoadData`).
///
/// [`TABLE`]: crate::TABLE
pub const PRELUDE: Cubins = Cubins {
    name: "prelude",
    entry_points: &["prelude_patch", "prelude_refresh_patch"],
    sm_80: include_bytes!("../prelude/prelude_sm_80.cubin"),
    sm_90: include_bytes!("../prelude/prelude_sm_90.cubin"),
};

#[cfg(test)]
mod tests {
    use super::*;

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    /// Both cubins are 64-bit CUDA ELF images for their own architecture and name the entry
    /// point.
    #[test]
    fn prelude_cubins_are_elf_and_export_prelude_patch() {
        assert_eq!(
            PRELUDE.entry_points,
            ["prelude_patch", "prelude_refresh_patch"]
        );
        for (sm, cubin) in [(80u8, PRELUDE.sm_80), (90, PRELUDE.sm_90)] {
            assert!(cubin.starts_with(b"\x7fELF"), "sm_{sm}: no ELF magic");
            assert!(
                contains(cubin, b"prelude_patch"),
                "sm_{sm}: no prelude_patch"
            );
            assert_eq!(cubin[4], 2, "sm_{sm}: not ELFCLASS64");
            // e_machine (offset 18) is EM_CUDA (190); in the CUDA ELF ABI these cubins use
            // (EI_ABIVERSION 7), e_flags' (offset 48) low byte is the SM: catches swapped files.
            assert_eq!(cubin[18..20], 190u16.to_le_bytes(), "sm_{sm}: not EM_CUDA");
            assert_eq!(cubin[8], 7, "sm_{sm}: another CUDA ELF ABI version");
            assert_eq!(cubin[48], sm, "sm_{sm}: built for sm_{}", cubin[48]);
        }
    }

    #[test]
    fn each_cubin_is_chosen_for_its_architecture_only() {
        let pick = |major, minor| PRELUDE.for_compute_capability(major, minor);
        for minor in [0, 6, 7, 9] {
            assert_eq!(pick(8, minor), Some(PRELUDE.sm_80), "8.{minor}");
        }
        assert_eq!(pick(9, 0), Some(PRELUDE.sm_90));
        for (major, minor) in [(7, 0), (7, 5), (9, 1), (10, 0), (12, 0)] {
            assert_eq!(pick(major, minor), None, "{major}.{minor}");
        }
    }
}
