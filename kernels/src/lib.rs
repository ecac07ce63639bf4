//! The CUDA kernels shipped with graph-rt: precompiled PTX, and the in-graph prelude as cubins.
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
//!
//! [`PRELUDE`], which calls the device graph API, ships as linked cubins for `sm_80` and `sm_90`
//! instead (`kernels/prelude/`), embedded with `include_bytes!`.
//!
//! ```
//! use graph_rt_kernels::{ALL, PRELUDE};
//!
//! // On a GPU of compute capability 8.6: the PTX modules whose target it meets, and the sm_80
//! // cubin of the prelude.
//! let (major, minor) = (8, 6);
//! let ptx: Vec<&str> = ALL
//!     .iter()
//!     .filter(|k| k.min_compute_capability <= (major, minor))
//!     .map(|k| k.name)
//!     .collect();
//! assert!(ptx.contains(&"layer_table") && !ptx.contains(&"layer_table_pdl"));
//! let prelude = PRELUDE
//!     .for_compute_capability(major, minor)
//!     .expect("8.x loads the sm_80 cubin");
//! assert_eq!(prelude, PRELUDE.sm_80);
//! ```

mod prelude;

pub use prelude::{Cubins, PRELUDE};

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
/// `s = *seq`, copies mirror `m = s % depth` into `table` spread over the grid (volatile loads,
/// never the non-coherent path: the host writes the mirror before the launch); the last block to
/// finish (counted in `seq[1]`) writes `*seq = s + 1` and `acks[m] = s + 1` (a volatile store
/// followed by `__threadfence_system()`): once the host sees `acks[m] == s + 1`, mirror `m` has
/// been read and may be rewritten. The protocol is `cuda/refresh.cuh`, which `prelude.cu`
/// includes too.
///
/// Launch any number of 256-thread blocks (graph-rt: one per 1,024 words). `depth` must be at
/// least 1. It executes no `griddepcontrol` instruction: the kernels reading the table must not
/// be launched as its programmatic dependents.
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

/// `layer.cu`: the elementwise kernels of a transformer-like layer stack, on `f32` activations
/// laid out as cuBLAS writes them: an `m`×`n` matrix (`m` tokens, `n` features) column-major,
/// element `(t, f)` at `f * m + t`.
///
/// ```c
/// extern "C" __global__ void bias_gelu(const float* x, const float* bias, float* y, int m, int n);
/// extern "C" __global__ void residual_add(const float* x, const float* r, float* y, int n);
/// ```
///
/// `bias_gelu`: `y[i] = gelu(x[i] + bias[i / m])` for `i < m * n`, with `bias` one value per
/// feature (`n` of them) and GELU's tanh approximation,
/// `gelu(v) = 0.5 * v * (1 + tanhf(0.7978845608 * (v + 0.044715 * v³)))`.
/// `residual_add`: `y[i] = x[i] + r[i]` for `i < n` (here `n` counts elements).
///
/// Both run one thread per element (`i = blockIdx.x * blockDim.x + threadIdx.x`), so the grid
/// must cover the elements (`m * n`, or `n`); `m * n` must fit in an `int`. Every pointer is
/// `__restrict__`: `y` must not alias an input (write the output to another buffer).
pub const LAYER: Kernel = Kernel {
    name: "layer",
    ptx: include_str!("../ptx/layer.ptx"),
    entry_points: &["bias_gelu", "residual_add"],
    min_compute_capability: (7, 0),
};

/// [`LAYER`]'s `bias_gelu` and `residual_add` in table form (see [`TABLE`]), made from
/// `ptx/layer.ptx` by the PTX pass (`graph-rt ptx indirect`, `kernels/make-table-forms`) into
/// `ptx-table/layer_table.ptx`.
///
/// ```c
/// extern "C" __global__ void bias_gelu(const float* const* x, const float* const* bias,
///                                      float* const* y, int m, int n);
/// extern "C" __global__ void residual_add(const float* const* x, const float* const* r,
///                                         float* const* y, int n);
/// ```
///
/// Every pointer parameter (`x`, `bias`, `r`, `y`) is the address of a pointer slot; `m` and `n`
/// stay plain values. The kernels load their slots at entry, then compute [`LAYER`]'s results,
/// one thread per element, so the grid must cover the elements. The output buffer must not alias
/// an input.
pub const LAYER_TABLE: Kernel = Kernel {
    name: "layer_table",
    ptx: include_str!("../ptx-table/layer_table.ptx"),
    entry_points: &["bias_gelu", "residual_add"],
    min_compute_capability: (7, 0),
};

/// [`LAYER_TABLE`] for programmatic dependent launch (compute capability 9.0+), made by the PTX
/// pass with `--pdl` from `ptx/layer.ptx`.
///
/// Same signatures and results as [`LAYER_TABLE`]. Launch with
/// `LaunchConfig::programmatic_stream_serialization`: each kernel executes
/// `griddepcontrol.launch_dependents`, loads its three pointer slots, executes
/// `griddepcontrol.wait`, and only then runs [`LAYER`]'s body. As for [`CHAIN_TABLE_PDL`], the
/// table must not be written by a kernel this one may overlap. Without the attribute it behaves
/// exactly as [`LAYER_TABLE`].
pub const LAYER_TABLE_PDL: Kernel = Kernel {
    name: "layer_table_pdl",
    ptx: include_str!("../ptx-table/layer_table_pdl.ptx"),
    entry_points: &["bias_gelu", "residual_add"],
    min_compute_capability: (9, 0),
};

/// Every PTX module in this crate ([`PRELUDE`] ships as cubins and is not one of them).
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
    LAYER,
    LAYER_TABLE,
    LAYER_TABLE_PDL,
];

#[cfg(test)]
mod tests;
