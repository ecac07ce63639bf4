//! Precompiled PTX for the CUDA kernels shipped with graph-rt.
//!
//! The CUDA C sources live in `kernels/cuda/`; `kernels/compile.py` compiles
//! them with NVRTC 12.4 (`--gpu-architecture=compute_70 --std=c++17`) into
//! `kernels/ptx/`, which is checked in and embedded here with `include_str!`.
//! The PTX uses ISA version 8.4, so any driver supporting CUDA 12.4 or newer
//! can JIT it. It targets `sm_70` (any GPU of compute capability 7.0 or newer)
//! except where a kernel's [`Kernel::min_compute_capability`] says otherwise
//! (the `*_PDL` kernels need 9.0). No CUDA toolkit is needed to build this crate.
//!
//! All kernels operate on `f32` and take device pointers. The `*_TABLE*` kernels take their
//! arguments from a device-resident argument table (see [`TABLE`]): where the plain form takes a
//! pointer or a scalar they take the address of the table slot holding it.

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

/// `table.cu`: refreshes a device-resident argument table from a ring of host mirrors.
///
/// ```c
/// extern "C" __global__ void table_refresh(const unsigned long long* mirrors,
///                                          unsigned long long* table, unsigned int words,
///                                          unsigned int depth, unsigned long long* seq,
///                                          unsigned long long* acks);
/// ```
///
/// The table is `words` 8-byte words in device memory; slot `i` is the word at `table + i`. A
/// pointer slot holds a device address; a scalar slot holds its value in the word's low bytes
/// (little endian, so an `f32` or `i32` slot is read as `*(const float*)slot`). The `*_TABLE*`
/// kernels take slot addresses where the plain forms take pointers or scalars.
///
/// `mirrors` is mapped pinned host memory holding `depth` mirrors of `words` words each (mirror
/// `m` at `mirrors + m * words`), `seq` a device-memory counter of the refreshes done so far
/// (zero before the first), `acks` mapped pinned host memory of `depth` words. The kernel reads
/// `s = *seq`, copies mirror `m = s % depth` into `table` (volatile loads, never the non-coherent
/// path: the host writes the mirror before the launch), then, after a block barrier, writes
/// `*seq = s + 1` and `acks[m] = s + 1` (a volatile store followed by `__threadfence_system()`):
/// once the host sees `acks[m] == s + 1`, mirror `m` has been read and may be rewritten.
///
/// Launch exactly one block of 256 threads (any block size copies correctly; more than one
/// block races on `seq`). `depth` must be at least 1. It executes no `griddepcontrol`
/// instruction: the kernels reading the table must not be launched as its programmatic
/// dependents.
pub const TABLE: Kernel = Kernel {
    name: "table",
    ptx: include_str!("../ptx/table.ptx"),
    entry_points: &["table_refresh"],
    min_compute_capability: (7, 0),
};

/// [`CHAIN`]'s `add1` in table form (see [`TABLE`]), made from `ptx/chain.ptx` by the PTX pass
/// (`graph-rt ptx indirect`, `kernels/make-table-forms`) into `ptx-table/chain_table.ptx`.
///
/// ```c
/// extern "C" __global__ void add1(const float* const* x, float* const* y, int n);
/// ```
///
/// `x` and `y` are the addresses of pointer slots; the kernel loads `xp = *x` and `yp = *y` at
/// entry, then computes [`CHAIN`]'s `yp[i] = xp[i] + 1.0f` for `i < n`, one thread per element,
/// so the grid must cover `n`. `xp` and `yp` should be distinct buffers (ping-pong a chain).
pub const CHAIN_TABLE: Kernel = Kernel {
    name: "chain_table",
    ptx: include_str!("../ptx-table/chain_table.ptx"),
    entry_points: &["add1"],
    min_compute_capability: (7, 0),
};

/// [`CHAIN_TABLE`] for programmatic dependent launch (compute capability 9.0+), made by the PTX
/// pass with `--pdl` from `ptx/chain.ptx`.
///
/// Same signature and result as [`CHAIN_TABLE`], launched as [`CHAIN_PDL`]: the kernel executes
/// `griddepcontrol.launch_dependents`, loads the two slots, executes `griddepcontrol.wait`, and
/// only then runs [`CHAIN`]'s body. The slots are read before the wait: the table must be written
/// only by a kernel that completed before the chain's first kernel started (as [`TABLE`]'s
/// `table_refresh`, launched without the programmatic attribute), never by a kernel this one may
/// overlap. Without the attribute it behaves exactly as [`CHAIN_TABLE`].
pub const CHAIN_TABLE_PDL: Kernel = Kernel {
    name: "chain_table_pdl",
    ptx: include_str!("../ptx-table/chain_table_pdl.ptx"),
    entry_points: &["add1"],
    min_compute_capability: (9, 0),
};

/// [`AXPY`]'s `axpy_f32` in table form (see [`TABLE`]), made by the PTX pass from `ptx/axpy.ptx`
/// with `a` and `n` as scalar slots.
///
/// ```c
/// extern "C" __global__ void axpy_f32(const float* a, const float* const* x, float* const* y,
///                                     const int* n);
/// ```
///
/// `a` (`f32`) and `n` (`i32`) are the addresses of scalar slots, `x` and `y` of pointer slots;
/// the kernel loads the four at entry, then computes [`AXPY`]'s `yp[i] = a * xp[i] + yp[i]` for
/// `i < n`, grid-stride loop. `xp` and `yp` must not alias.
pub const AXPY_TABLE: Kernel = Kernel {
    name: "axpy_table",
    ptx: include_str!("../ptx-table/axpy_table.ptx"),
    entry_points: &["axpy_f32"],
    min_compute_capability: (7, 0),
};

/// [`AXPY_TABLE`] for programmatic dependent launch (compute capability 9.0+), made by the PTX
/// pass with `--pdl`: `griddepcontrol.launch_dependents`, the four slot loads,
/// `griddepcontrol.wait`, then [`AXPY`]'s body. As for [`CHAIN_TABLE_PDL`], the table must not
/// be written by a kernel this one may overlap. Without the attribute it behaves exactly as
/// [`AXPY_TABLE`].
pub const AXPY_TABLE_PDL: Kernel = Kernel {
    name: "axpy_table_pdl",
    ptx: include_str!("../ptx-table/axpy_table_pdl.ptx"),
    entry_points: &["axpy_f32"],
    min_compute_capability: (9, 0),
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
pub const ALL: &[Kernel] = &[
    CHAIN,
    CHAIN_PDL,
    AXPY,
    TABLE,
    CHAIN_TABLE,
    CHAIN_TABLE_PDL,
    AXPY_TABLE,
    AXPY_TABLE_PDL,
    REDUCE,
    RMSNORM,
];

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

    /// The kernels made for programmatic dependent launch.
    const PDL: &[Kernel] = &[CHAIN_PDL, CHAIN_TABLE_PDL, AXPY_TABLE_PDL];

    /// The trimmed instruction lines of a PTX module (no comments, labels or blank lines).
    fn instructions(ptx: &str) -> Vec<&str> {
        ptx.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.ends_with(':'))
            .collect()
    }

    #[test]
    fn programmatic_kernels_read_through_the_coherent_path() {
        // A kernel launched before its predecessor finished must not use non-coherent loads.
        for k in PDL {
            assert!(!k.ptx.contains("ld.global.nc"), "{}: ld.global.nc", k.name);
            assert!(
                k.ptx.contains("griddepcontrol.wait;"),
                "{}: no griddepcontrol.wait",
                k.name
            );
            assert!(
                k.ptx.contains("griddepcontrol.launch_dependents;"),
                "{}: no griddepcontrol.launch_dependents",
                k.name
            );
            assert_eq!(k.min_compute_capability, (9, 0), "{}", k.name);
        }
    }

    #[test]
    fn only_programmatic_kernels_use_griddepcontrol() {
        for k in ALL {
            let is_pdl = PDL.iter().any(|p| p.name == k.name);
            assert_eq!(
                is_pdl,
                k.name.ends_with("_pdl"),
                "{}: PDL lists it?",
                k.name
            );
            assert_eq!(
                k.ptx.contains("griddepcontrol"),
                is_pdl,
                "{}: griddepcontrol only in _pdl kernels",
                k.name
            );
        }
    }

    /// In the table-form PDL kernels, `griddepcontrol.launch_dependents` comes first, then the
    /// slot loads (every `ld.global` before the wait, one per slot), then `griddepcontrol.wait`,
    /// and no load from global memory follows until the wait.
    #[test]
    fn table_pdl_kernels_load_slots_between_launch_dependents_and_wait() {
        for (k, slots) in [(CHAIN_TABLE_PDL, 2), (AXPY_TABLE_PDL, 4)] {
            let ins = instructions(k.ptx);
            let pos = |what: &str| {
                let found: Vec<usize> = (0..ins.len()).filter(|&i| ins[i] == what).collect();
                assert_eq!(found.len(), 1, "{}: {what} {} times", k.name, found.len());
                found[0]
            };
            let launch = pos("griddepcontrol.launch_dependents;");
            let wait = pos("griddepcontrol.wait;");
            assert!(launch < wait, "{}: wait before launch_dependents", k.name);
            let is_load = |l: &&str| l.starts_with("ld.") && !l.starts_with("ld.param.");
            assert!(
                !ins[..launch].iter().any(is_load),
                "{}: a load before launch_dependents",
                k.name
            );
            let slot_loads: Vec<&str> = ins[launch..wait]
                .iter()
                .copied()
                .filter(|l| is_load(l))
                .collect();
            assert_eq!(
                slot_loads.len(),
                slots,
                "{}: slot loads before the wait: {slot_loads:?}",
                k.name
            );
            assert!(
                slot_loads.iter().all(|l| l.starts_with("ld.global.")),
                "{}: slot loads not ld.global: {slot_loads:?}",
                k.name
            );
            assert!(
                ins[wait..].iter().any(is_load),
                "{}: no data load after the wait",
                k.name
            );
        }
    }

    #[test]
    fn table_refresh_reads_mirrors_coherently_and_fences_the_ack() {
        let ins = instructions(TABLE.ptx);
        assert!(
            !TABLE.ptx.contains("ld.global.nc"),
            "mirror read through ld.global.nc"
        );
        assert!(
            ins.iter().any(|l| l.starts_with("ld.volatile.global.u64")),
            "mirror not read with volatile loads"
        );
        let ack = ins
            .iter()
            .position(|l| l.starts_with("st.volatile.global.u64"))
            .expect("no volatile store of the ack");
        assert!(
            ins[ack..]
                .iter()
                .any(|l| *l == "membar.sys;" || *l == "fence.sc.sys;"),
            "no system fence after the ack"
        );
    }

    #[test]
    fn ptx_has_no_nul() {
        for k in ALL {
            assert!(!k.ptx.contains('\0'), "{}: embedded NUL", k.name);
        }
    }

    include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

    /// Every embedded PTX file: `ptx/` (compiled) and `ptx-table/` (made by the PTX pass).
    fn ptx_files() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
        PTX_FILES.iter().chain(TABLE_FILES)
    }

    #[test]
    fn all_lists_every_ptx_file() {
        let on_disk: BTreeSet<&str> = ptx_files().map(|(stem, _)| *stem).collect();
        let listed: BTreeSet<&str> = ALL.iter().map(|k| k.name).collect();
        assert_eq!(listed.len(), ALL.len(), "duplicate names in ALL");
        assert_eq!(on_disk, listed);
    }

    #[test]
    fn embedded_ptx_matches_files() {
        for k in ALL {
            let (_, text) = ptx_files()
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

    /// The table forms are what the PTX pass makes of the shipped PTX today
    /// (`kernels/make-table-forms` remakes them).
    #[test]
    fn table_forms_are_what_the_pass_makes() {
        use graph_rt_ptx::{indirect, Options};
        let scalars = || vec!["axpy_f32:0".parse().unwrap(), "axpy_f32:3".parse().unwrap()];
        let forms = [
            (CHAIN_TABLE, CHAIN, Options::default()),
            (
                CHAIN_TABLE_PDL,
                CHAIN,
                Options {
                    pdl: true,
                    ..Options::default()
                },
            ),
            (
                AXPY_TABLE,
                AXPY,
                Options {
                    scalars: scalars(),
                    ..Options::default()
                },
            ),
            (
                AXPY_TABLE_PDL,
                AXPY,
                Options {
                    scalars: scalars(),
                    pdl: true,
                    ..Options::default()
                },
            ),
        ];
        for (form, source, options) in forms {
            let made = indirect(source.ptx.as_bytes(), &options)
                .unwrap_or_else(|e| panic!("{}: {e}", form.name));
            assert!(
                made.ptx == form.ptx,
                "ptx-table/{}.ptx is stale: run kernels/make-table-forms",
                form.name
            );
        }
    }
}
