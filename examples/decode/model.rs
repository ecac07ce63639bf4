//! The decode model on the GPU: its weights (the formula of `graph_rt_dev::decode`, bf16), the
//! example's own kernels (their table forms made by the top-level build.rs), one batch size's
//! activations and K/V caches, and the step's work as the closure enqueues it.

use std::sync::Mutex;

use graph_rt::cublas::Cublas;
use graph_rt::half::bf16;
use graph_rt::step::{Buf, Scalar, StepParams};
use graph_rt::table::TableKernel;
use graph_rt::{Context, DeviceBuffer, Function, LaunchConfig, Module, Stream};
use graph_rt_dev::decode::{head_weight, seed, weight, DecodeConfig, Tensor};

mod table {
    include!(concat!(env!("OUT_DIR"), "/decode_table.rs"));
}

/// The example's kernels with the rewritten parameters' table slots (build.rs).
const TABLE_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/decode_table.ptx"));
/// The same with programmatic dependent launch (compute capability 9.0 on).
const TABLE_PDL_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/decode_pdl_table.ptx"));

/// The formula's matrix `rows × cols` of `tensor` of `layer`, rounded to bf16 (through f32, as
/// PyTorch rounds a float64 tensor), made on every core.
fn matrix(tensor: Tensor, layer: usize, rows: usize, cols: usize, scale: f64) -> Vec<bf16> {
    let s = seed(tensor, layer);
    made(rows, cols, |r, c| weight(s, r, c, scale))
}

/// `rows × cols` values of `f` (row, column), rounded to bf16 through f32, made on every core.
fn made(rows: usize, cols: usize, f: impl Fn(usize, usize) -> f64 + Sync) -> Vec<bf16> {
    let f = &f;
    let mut out = vec![bf16::ZERO; rows * cols];
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get().min(32));
    let chunk = rows.div_ceil(threads).max(1) * cols;
    std::thread::scope(|scope| {
        for (i, part) in out.chunks_mut(chunk).enumerate() {
            scope.spawn(move || {
                for (j, v) in part.iter_mut().enumerate() {
                    let at = i * chunk + j;
                    *v = bf16::from_f32(f(at / cols, at % cols) as f32);
                }
            });
        }
    });
    out
}

fn projection(tensor: Tensor, layer: usize, rows: usize, cols: usize) -> Vec<bf16> {
    matrix(tensor, layer, rows, cols, 1.0 / (cols as f64).sqrt())
}

/// Norm weights: 1 ± 0.1.
fn norm(tensor: Tensor, layer: usize, d: usize) -> Vec<bf16> {
    let s = seed(tensor, layer);
    (0..d)
        .map(|i| bf16::from_f32((1.0 + weight(s, 0, i, 0.1)) as f32))
        .collect()
}

/// One layer's weights (row-major `[out, in]`, as `nn.Linear` keeps them).
pub struct LayerWeights {
    pub(crate) n1: DeviceBuffer<bf16>,
    pub(crate) n2: DeviceBuffer<bf16>,
    pub(crate) qkv: DeviceBuffer<bf16>,
    pub(crate) o: DeviceBuffer<bf16>,
    pub(crate) up: DeviceBuffer<bf16>,
    pub(crate) down: DeviceBuffer<bf16>,
}

/// The model's weights on the device.
pub struct Weights {
    pub(crate) embedding: DeviceBuffer<bf16>,
    pub(crate) layers: Vec<LayerWeights>,
    pub(crate) final_norm: DeviceBuffer<bf16>,
    pub(crate) head: DeviceBuffer<bf16>,
}

impl Weights {
    /// The formula's weights of `c`, uploaded.
    pub fn new(ctx: &Context, c: &DecodeConfig) -> graph_rt::Result<Self> {
        let (d, hd) = (c.d, c.head_dim());
        let up = |v: Vec<bf16>| DeviceBuffer::from_host(ctx, &v);
        let layers = (0..c.layers)
            .map(|l| {
                Ok(LayerWeights {
                    n1: up(norm(Tensor::Norm1, l, d))?,
                    n2: up(norm(Tensor::Norm2, l, d))?,
                    qkv: up(projection(
                        Tensor::Qkv,
                        l,
                        (c.heads + 2 * c.kv_heads) * hd,
                        d,
                    ))?,
                    o: up(projection(Tensor::O, l, d, c.heads * hd))?,
                    up: up(projection(Tensor::Up, l, 2 * c.mlp, d))?,
                    down: up(projection(Tensor::Down, l, d, c.mlp))?,
                })
            })
            .collect::<graph_rt::Result<_>>()?;
        Ok(Self {
            embedding: up(matrix(Tensor::Embedding, 0, c.vocab, d, 1.0))?,
            layers,
            final_norm: up(norm(Tensor::FinalNorm, 0, d))?,
            head: up(made(c.vocab, d, |v, col| head_weight(d, c.vocab, v, col)))?,
        })
    }
}

/// Where the kernels' machine code comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelSource {
    /// The shipped cubin for this device's compute capability (`examples/decode/cubin/`, which
    /// build.rs embeds while it matches the PTX), else the PTX.
    Shipped,
    /// The PTX, compiled by the driver (`--jit`): about 30 s on a machine's first run for the two
    /// modules (H100), then cached by the driver.
    Ptx,
}

/// What a module was loaded from; shown as `cubin sm_XY` or `PTX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The shipped cubin for this compute capability.
    Cubin(i32, i32),
    /// The PTX, compiled by the driver.
    Ptx,
}

impl std::fmt::Display for Form {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Form::Cubin(major, minor) => write!(f, "cubin sm_{major}{minor}"),
            Form::Ptx => f.write_str("PTX"),
        }
    }
}

/// The example's kernels: table forms where a parameter changes between calls, plain elsewhere.
pub struct Kernels {
    /// What the module was loaded from.
    pub form: Form,
    /// Each kernel starts with PDL's trigger and wait: every launch but the first after the
    /// table's refresh is made programmatic.
    pdl: bool,
    pub(crate) embed_norm: TableKernel,
    pub(crate) attention: TableKernel,
    pub(crate) argmax: TableKernel,
    pub(crate) add_norm: Function,
    pub(crate) silu_mul: Function,
    pub(crate) gemv: Function,
    pub(crate) gemv_norm: Function,
    /// The head's product (the final residual add and norm fused in) with the argmax fused in;
    /// its logits and next tokens are table slots.
    pub(crate) gemv_norm_argmax: TableKernel,
    pub(crate) gemv_silu: Function,
    /// A plain copy kernel: the bandwidth the weight-read floor is measured with.
    pub copy: Function,
    /// The most input bytes a matrix-vector kernel stages (dynamic shared memory): what the
    /// device allows a block, less the kernels' own static shared memory (gemv.cuh's ring).
    gemv_staged_limit: usize,
    /// Blocks of the matrix-vector kernels an SM holds, by staged bytes (the driver's
    /// occupancy, asked once a size).
    gemv_blocks: Mutex<Vec<(usize, u32)>>,
}

impl Kernels {
    /// Loads a module build.rs made (with PDL or without), from the cubin for this device where
    /// `source` allows and one is shipped, else from its PTX; attention may use
    /// `attention_smem` bytes of dynamic shared memory (a row of scores and partial sums).
    pub fn load(
        ctx: &Context,
        attention_smem: usize,
        pdl: bool,
        source: KernelSource,
    ) -> graph_rt::Result<Self> {
        let name = if pdl {
            "decode_pdl_table"
        } else {
            "decode_table"
        };
        let cc = ctx.device().compute_capability()?;
        let cubin = table::CUBINS
            .iter()
            .find(|c| source == KernelSource::Shipped && c.module == name && c.arch == cc);
        let (module, form) = match cubin {
            Some(c) => {
                // SAFETY: the image is a whole cubin made by ptxas (scripts/decode-cubins), its
                // bytes checked against the MANIFEST's hash by build.rs.
                let m = unsafe { Module::from_cubin(ctx, c.image) }.map_err(|e| {
                    e.with_hint(format!(
                        "loading the shipped cubin of {name} for sm_{}{}; --jit compiles the PTX instead",
                        cc.0, cc.1
                    ))
                })?;
                (m, Form::Cubin(cc.0, cc.1))
            }
            None => {
                let ptx = if pdl { TABLE_PDL_PTX } else { TABLE_PTX };
                (Module::from_ptx(ctx, ptx)?, Form::Ptx)
            }
        };
        let sigs = table::signatures();
        let table = |name: &str| {
            let sig = sigs
                .iter()
                .find(|s| s.name == name)
                .ok_or_else(|| fail(format!("build.rs made no table form of `{name}`")))?;
            TableKernel::from_signature(module.function(name)?, sig)
        };
        let attention = table("attention")?;
        // Dynamic and static shared memory together above 48 KiB need the opt-in, up to what
        // the device allows a block.
        let f = attention.function();
        let total = attention_smem + f.static_shared_bytes()?.max(0) as usize;
        if total > 48 * 1024 {
            let limit = ctx.device().attribute(
                graph_rt::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )?;
            if total > limit.max(0) as usize {
                return Err(fail(format!(
                    "attention needs {total} bytes of shared memory a block (a row of scores over the cache and partial sums), this device allows {limit}: use a shorter --max-len"
                )));
            }
            f.set_max_dynamic_shared_bytes(attention_smem as i32)?;
        }
        let mut k = Self {
            form,
            pdl,
            embed_norm: table("embed_norm")?,
            attention,
            argmax: table("argmax")?,
            add_norm: module.function("add_norm")?,
            silu_mul: module.function("silu_mul")?,
            gemv: module.function("gemv_bf16")?,
            gemv_norm: module.function("gemv_norm_bf16")?,
            gemv_norm_argmax: table("gemv_norm_argmax")?,
            gemv_silu: module.function("gemv_silu_bf16")?,
            copy: module.function("copy_words")?,
            gemv_staged_limit: 0,
            gemv_blocks: Mutex::new(Vec::new()),
        };
        // The matrix-vector kernels stage their input rows in dynamic shared memory, beside
        // their static ring (32 KiB in the PDL build): let them have what the device allows.
        let optin = ctx.device().attribute(
            graph_rt::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?;
        let mut limit = usize::MAX;
        for f in k.gemvs() {
            let staged =
                (optin.max(0) as usize).saturating_sub(f.static_shared_bytes()?.max(0) as usize);
            f.set_max_dynamic_shared_bytes(staged as i32)?;
            limit = limit.min(staged);
        }
        k.gemv_staged_limit = limit;
        Ok(k)
    }

    /// The matrix-vector kernels.
    fn gemvs(&self) -> [&Function; 4] {
        [
            &self.gemv,
            &self.gemv_norm,
            &self.gemv_silu,
            self.gemv_norm_argmax.function(),
        ]
    }

    /// Whether the matrix-vector kernels take a product of `rows` rows over `k`: at most 8
    /// rows, `k` a multiple of 8, the rows within the shared memory they may stage.
    pub fn gemv_fits(&self, rows: usize, k: usize) -> bool {
        rows <= 8 && k % 8 == 0 && rows * k * 2 <= self.gemv_staged_limit
    }

    /// A matrix-vector kernel's launch (programmatic as [`Kernels::cfg`]) for `m` output rows
    /// of `rows` products over `k`: 8 warps a block, each warp streaming every (warps)-th
    /// output row; as many blocks as the device holds at once with the input rows staged (or
    /// one a row of 8).
    pub(crate) fn gemv_cfg(
        &self,
        m: usize,
        rows: usize,
        k: usize,
        sms: u32,
    ) -> graph_rt::Result<LaunchConfig> {
        let staged = rows * k * 2;
        let known = {
            let cache = self.gemv_blocks.lock().unwrap_or_else(|e| e.into_inner());
            cache.iter().find(|(b, _)| *b == staged).map(|&(_, n)| n)
        };
        let per_sm = match known {
            Some(n) => n,
            None => {
                let mut n = u32::MAX;
                for f in self.gemvs() {
                    n = n.min(f.max_active_blocks_per_sm(256, staged)?);
                }
                let mut cache = self.gemv_blocks.lock().unwrap_or_else(|e| e.into_inner());
                cache.push((staged, n));
                n
            }
        };
        if per_sm == 0 {
            return Err(fail(format!(
                "the matrix-vector kernels cannot stage {rows} rows of {k} ({staged} bytes of shared memory) on this device"
            )));
        }
        let blocks = (m.div_ceil(8) as u32).min(per_sm.saturating_mul(sms.max(1)));
        Ok(self.cfg(LaunchConfig::new(blocks, 256u32).shared_mem(staged as u32)))
    }

    /// `c`, programmatic when these kernels are the PDL ones.
    pub(crate) fn cfg(&self, c: LaunchConfig) -> LaunchConfig {
        if self.pdl {
            c.programmatic_stream_serialization()
        } else {
            c
        }
    }
}

/// How the step runs: its matrix products, and whether its kernels are launched with
/// programmatic dependent launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub gemms: Gemms,
    pub pdl: bool,
}

/// Which matrix products the step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gemms {
    /// cuBLAS (`cublasGemmEx`) for every product.
    Cublas,
    /// The example's matrix-vector kernel where it applies ([`Kernels::gemv_fits`]), cuBLAS
    /// elsewhere.
    Own,
}

/// What changes between a step's calls: the tokens in, the logits (f32: the head GEMM's result
/// unrounded) and next tokens out, the position written and the positions attended (`pos + 1`).
pub struct Params {
    pub tokens: Buf<i32>,
    pub logits: Buf<f32>,
    pub next: Buf<i32>,
    pub pos: Scalar<i32>,
    pub len: Scalar<i32>,
}

impl Params {
    /// Declares them in `p` for `batch` rows of a vocabulary of `vocab`.
    pub fn declare(p: &mut StepParams, batch: usize, vocab: usize) -> graph_rt::Result<Self> {
        Ok(Self {
            tokens: p.buffer(batch)?,
            logits: p.buffer(batch * vocab)?,
            next: p.buffer(batch)?,
            pos: p.scalar()?,
            len: p.scalar()?,
        })
    }
}

/// One batch size's activations and K/V caches.
pub struct Batch {
    pub rows: usize,
    /// The residual stream: one buffer, or two taking turns where the residual add is fused
    /// into a matrix-vector product (its blocks still read the one while block 0 writes the
    /// other).
    pub(crate) x: [DeviceBuffer<bf16>; 2],
    pub(crate) h: DeviceBuffer<bf16>,
    pub(crate) qkv: DeviceBuffer<bf16>,
    pub(crate) attn: DeviceBuffer<bf16>,
    /// The output and down projections' results, added to the residual by the next norm.
    pub(crate) delta: DeviceBuffer<bf16>,
    pub(crate) gate_up: DeviceBuffer<bf16>,
    pub(crate) act: DeviceBuffer<bf16>,
    pub(crate) k: Vec<DeviceBuffer<bf16>>,
    pub(crate) v: Vec<DeviceBuffer<bf16>>,
    /// Argmax's per-row best key and count of blocks done (zero between launches: its last
    /// block of a row resets them); the head's fused argmax counts its blocks in the first.
    pub(crate) argmax_best: DeviceBuffer<u64>,
    pub(crate) argmax_done: DeviceBuffer<u32>,
}

impl Batch {
    /// Zeroed buffers for `rows` rows of `c`.
    pub fn new(ctx: &Context, c: &DecodeConfig, rows: usize) -> graph_rt::Result<Self> {
        let hd = c.head_dim();
        let z = |n: usize| DeviceBuffer::zeroed(ctx, rows * n);
        let cache = c.kv_heads * c.max_len * hd;
        Ok(Self {
            rows,
            x: [z(c.d)?, z(c.d)?],
            h: z(c.d)?,
            qkv: z((c.heads + 2 * c.kv_heads) * hd)?,
            attn: z(c.heads * hd)?,
            delta: z(c.d)?,
            gate_up: z(2 * c.mlp)?,
            act: z(c.mlp)?,
            k: (0..c.layers)
                .map(|_| z(cache))
                .collect::<graph_rt::Result<_>>()?,
            v: (0..c.layers)
                .map(|_| z(cache))
                .collect::<graph_rt::Result<_>>()?,
            argmax_best: DeviceBuffer::zeroed(ctx, rows)?,
            argmax_done: DeviceBuffer::zeroed(ctx, rows)?,
        })
    }
}

/// The model on one stream: configuration, weights, kernels (with PDL where the device has it)
/// and the cuBLAS handle.
pub struct Model {
    pub c: DecodeConfig,
    /// The device's multiprocessors (the matrix-vector kernels' grids are capped by them).
    pub sms: u32,
    pub w: Weights,
    pub k: Kernels,
    pub k_pdl: Option<Kernels>,
    pub blas: Cublas,
    /// Seconds spent making and uploading the weights.
    pub weights_s: f64,
    /// Seconds spent loading the kernels and cuBLAS (the driver compiles the modules' PTX for
    /// the device on a first run and caches the result: seconds then, a fraction after).
    pub kernels_s: f64,
}

impl Model {
    pub fn new(
        ctx: &Context,
        stream: &Stream,
        c: &DecodeConfig,
        source: KernelSource,
    ) -> graph_rt::Result<Self> {
        let pdl = ctx.device().compute_capability()?.0 >= 9;
        let smem = attention_smem(c);
        let t = std::time::Instant::now();
        let w = Weights::new(ctx, c)?;
        let weights_s = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let k = Kernels::load(ctx, smem, false, source)?;
        let k_pdl = pdl
            .then(|| Kernels::load(ctx, smem, true, source))
            .transpose()?;
        let blas = Cublas::new(stream)?;
        Ok(Self {
            w,
            k,
            k_pdl,
            blas,
            sms: ctx.device().multiprocessor_count()?.max(1) as u32,
            c: c.clone(),
            weights_s,
            kernels_s: t.elapsed().as_secs_f64(),
        })
    }
}

/// An error of the example's own (no GPU, a file, a missing kernel), in graph-rt's error type.
pub fn fail(reason: String) -> graph_rt::Error {
    graph_rt::Error::InvalidArgument {
        call: "decode",
        reason,
    }
}

/// The token of batch row `row` at position `pos` (the PyTorch script's formula).
pub fn token(pos: usize, row: usize, vocab: usize) -> i32 {
    ((7919 * pos as u64 + 104729 * row as u64 + 17) % vocab as u64) as i32
}

/// Attention's dynamic shared memory: a row of f32 scores over the cache and the partial sums
/// of its weighted values (decode.cu).
pub fn attention_smem(c: &DecodeConfig) -> usize {
    4 * (c.max_len + 32 * c.head_dim() + 2048)
}

/// Argmax's blocks a row: a share of about 4096 logits each, 1 to 32.
pub(crate) fn argmax_blocks(vocab: usize) -> u32 {
    vocab.div_ceil(4096).clamp(1, 32) as u32
}
