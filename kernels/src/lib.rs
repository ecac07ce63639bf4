//! Precompiled PTX for the CUDA kernels shipped with graph-rt.
//!
//! The CUDA C sources live in `kernels/cuda/`; `kernels/compile.py` compiles
//! them with NVRTC 12.4 (`--gpu-architecture=compute_70 --std=c++17`) into
//! `kernels/ptx/`, which is checked in and embedded here with `include_str!`.
//! The PTX uses ISA version 8.4, so any driver supporting CUDA 12.4 or newer
//! can JIT it. It targets `sm_70` (any GPU of compute capability 7.0 or newer)
//! except where a kernel's [`Kernel::min_compute_capability`] says otherwise
//! ([`CHAIN_PDL`] needs 9.0). No CUDA toolkit is needed to build this crate.
//!
//! All kernels operate on `f32` and take device pointers.

/// One PTX module: the compiled form of one `kernels/cuda/<name>.cu` file.
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    /// File stem of the source and PTX (`kernels/cuda/<name>.cu`).
    pub name: &'static str,
    /// NUL-free PTX text, ready for `cuModuleLoadData` after appending a NUL.
    pub ptx: &'static str,
    /// Names of the `extern "C" __global__` functions the module exports.
    pub entry_points: &'static [&'static str],
    /// The oldest GPU (major, minor compute capability) the PTX can be loaded on: its
    /// `.target`. Loading it on an older GPU fails in `cuModuleLoadData`.
    pub min_compute_capability: (u32, u32),
}

/// `chain.cu`: the workload of the kernel-chain benchmark.
///
/// ```c
/// extern "C" __global__ void add1(const float* x, float* y, int n);
/// ```
///
/// `y[i] = x[i] + 1.0f` for `i < n`, one thread per element
/// (`i = blockIdx.x * blockDim.x + threadIdx.x`), so the grid must cover `n`.
/// `x` and `y` are `__restrict__`: pass distinct buffers (ping-pong a chain).
pub const CHAIN: Kernel = Kernel {
    name: "chain",
    ptx: include_str!("../ptx/chain.ptx"),
    entry_points: &["add1"],
    min_compute_capability: (7, 0),
};

/// `chain_pdl.cu`: [`CHAIN`]'s `add1` for programmatic dependent launch (compute capability
/// 9.0+).
///
/// Same signature and result as [`CHAIN`]. The kernel first allows its dependents to be
/// scheduled (`griddepcontrol.launch_dependents`), then waits until the grids it depends on have
/// completed and their writes are visible (`griddepcontrol.wait`), and only then reads `x`. Launch
/// it with `LaunchConfig::programmatic_stream_serialization`, eagerly or in a capture (which then
/// makes programmatic graph edges), and the next kernel of a chain is scheduled while this one
/// still runs, hiding most of the kernel-to-kernel gap. Without the attribute it behaves exactly
/// as [`CHAIN`].
pub const CHAIN_PDL: Kernel = Kernel {
    name: "chain_pdl",
    ptx: include_str!("../ptx/chain_pdl.ptx"),
    entry_points: &["add1"],
    min_compute_capability: (9, 0),
};

/// `axpy.cu`.
///
/// ```c
/// extern "C" __global__ void axpy_f32(float a, const float* x, float* y, int n);
/// ```
///
/// `y[i] = a * x[i] + y[i]` for `i < n`, grid-stride loop: any launch
/// configuration covers all `n` elements. `x` and `y` must not alias.
pub const AXPY: Kernel = Kernel {
    name: "axpy",
    ptx: include_str!("../ptx/axpy.ptx"),
    entry_points: &["axpy_f32"],
    min_compute_capability: (7, 0),
};

/// `reduce.cu`: per-block partial sums.
///
/// ```c
/// extern "C" __global__ void block_sum_f32(const float* x, float* partial, int n);
/// ```
///
/// Block `b` sums its grid-stride slice of `x[0..n]` and writes the result to
/// `partial[b]`, so `partial` needs `gridDim.x` elements and the sum of
/// `partial` is the sum of `x`. `blockDim.x` must be a multiple of 32, at
/// most 1024; uses 128 bytes of static shared memory.
pub const REDUCE: Kernel = Kernel {
    name: "reduce",
    ptx: include_str!("../ptx/reduce.ptx"),
    entry_points: &["block_sum_f32"],
    min_compute_capability: (7, 0),
};

/// `rmsnorm.cu`: RMS normalisation of each row of a row-major matrix.
///
/// ```c
/// extern "C" __global__ void rmsnorm_f32(const float* x, const float* w,
///                                        float* y, int cols, float eps);
/// ```
///
/// Launch one block per row (`gridDim.x = rows`);
/// `y[r, c] = x[r, c] * rsqrtf(mean_c(x[r, :]^2) + eps) * w[c]`.
/// `blockDim.x` must be a multiple of 32, at most 1024. `x` and `y` must not
/// alias.
pub const RMSNORM: Kernel = Kernel {
    name: "rmsnorm",
    ptx: include_str!("../ptx/rmsnorm.ptx"),
    entry_points: &["rmsnorm_f32"],
    min_compute_capability: (7, 0),
};

/// Every kernel module in this crate.
pub const ALL: &[Kernel] = &[CHAIN, CHAIN_PDL, AXPY, REDUCE, RMSNORM];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn has_line(ptx: &str, line: &str) -> bool {
        ptx.lines().any(|l| l.trim_end() == line)
    }

    #[test]
    fn ptx_version_and_target() {
        for k in ALL {
            assert!(
                has_line(k.ptx, ".version 8.4"),
                "{}: not PTX ISA 8.4",
                k.name
            );
            let (major, minor) = k.min_compute_capability;
            let target = format!(".target sm_{major}{minor}");
            assert!(has_line(k.ptx, &target), "{}: not {target}", k.name);
            assert!(
                has_line(k.ptx, ".address_size 64"),
                "{}: not 64-bit",
                k.name
            );
        }
    }

    #[test]
    fn entry_points_declared() {
        for k in ALL {
            assert!(!k.entry_points.is_empty(), "{}: no entry points", k.name);
            for e in k.entry_points {
                let decl = format!(".visible .entry {e}(");
                assert!(k.ptx.contains(&decl), "{}: missing {decl}", k.name);
            }
            let declared = k.ptx.matches(".visible .entry ").count();
            assert_eq!(
                declared,
                k.entry_points.len(),
                "{}: entry_points does not list every .entry",
                k.name
            );
        }
    }

    #[test]
    fn programmatic_kernels_read_through_the_coherent_path() {
        // A kernel launched before its predecessor finished must not use non-coherent loads.
        assert!(!CHAIN_PDL.ptx.contains("ld.global.nc"));
        assert!(CHAIN_PDL.ptx.contains("griddepcontrol.wait;"));
    }

    #[test]
    fn ptx_has_no_nul() {
        for k in ALL {
            assert!(!k.ptx.contains('\0'), "{}: embedded NUL", k.name);
        }
    }

    include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

    #[test]
    fn all_lists_every_ptx_file() {
        let on_disk: BTreeSet<&str> = PTX_FILES.iter().map(|(stem, _)| *stem).collect();
        let listed: BTreeSet<&str> = ALL.iter().map(|k| k.name).collect();
        assert_eq!(listed.len(), ALL.len(), "duplicate names in ALL");
        assert_eq!(on_disk, listed);
    }

    #[test]
    fn embedded_ptx_matches_files() {
        for k in ALL {
            let (_, text) = PTX_FILES
                .iter()
                .find(|(stem, _)| *stem == k.name)
                .unwrap_or_else(|| panic!("{}: no ptx/{}.ptx", k.name, k.name));
            assert_eq!(*text, k.ptx, "{}: name does not match file", k.name);
        }
    }

    fn sha256_hex(bytes: &[u8]) -> String {
        use sha2::{Digest, Sha256};
        format!("{:x}", Sha256::digest(bytes))
    }

    /// What `python3 kernels/compile.py --check` checks, less the compiling: each MANIFEST line
    /// (`name sha256(cuda/<name>.cu) sha256(ptx/<name>.ptx)`) matches the files, and it lists
    /// every source.
    #[test]
    fn manifest_matches_sources_and_ptx() {
        let mut listed = BTreeSet::new();
        for line in MANIFEST
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let &[name, source_hash, ptx_hash] = fields.as_slice() else {
                panic!("malformed MANIFEST line: {line:?}");
            };
            let (_, source) = CUDA_FILES
                .iter()
                .find(|(stem, _)| *stem == name)
                .unwrap_or_else(|| panic!("MANIFEST lists {name}, but there is no cuda/{name}.cu"));
            assert_eq!(
                sha256_hex(source),
                source_hash,
                "cuda/{name}.cu changed since its PTX was compiled: run python3 kernels/compile.py"
            );
            let (_, ptx) = PTX_FILES
                .iter()
                .find(|(stem, _)| *stem == name)
                .unwrap_or_else(|| panic!("MANIFEST lists {name}, but there is no ptx/{name}.ptx"));
            assert_eq!(
                sha256_hex(ptx.as_bytes()),
                ptx_hash,
                "ptx/{name}.ptx is not what MANIFEST records: run python3 kernels/compile.py"
            );
            assert!(listed.insert(name), "MANIFEST lists {name} twice");
        }
        let sources: BTreeSet<&str> = CUDA_FILES.iter().map(|(stem, _)| *stem).collect();
        assert_eq!(listed, sources, "MANIFEST does not list every cuda/*.cu");
    }
}
