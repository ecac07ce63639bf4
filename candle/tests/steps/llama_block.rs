//! Two Llama blocks (RMSNorm, rotary embedding, grouped-query attention over a KV cache,
//! SwiGLU) written with candle's own tensors, layers and ops, captured through graph-rt's step
//! API on candle's stream and rebound every call to fresh inputs, positions, outputs and KV
//! caches: every output and cache bit-identical to the same closure run eagerly, and every
//! kernel a replay runs candle's (candle-kernels) or cuBLAS's (candle's matmul).
//!
//! Written to be captured: the position is a declared `u32` tensor that candle's kernels read
//! on the device (`index_select` of the rotary tables, `scatter_set` into the caches, the mask
//! over the whole cache), so nothing a call changes is a host value baked into the graph.

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::Linear;
use graph_rt::step::{Buf, Step, StepMode, StepOptions, StepParams, StepScope, Validated};
use graph_rt_candle::{bind, buffer_of, error, tensor, CandleStream};

const BATCH: usize = 2;
const DIM: usize = 256;
const HEADS: usize = 8;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = DIM / HEADS;
const FFN: usize = 704;
const CACHE: usize = 128;
const LAYERS: usize = 2;
const EPS: f64 = 1e-5;

/// Calls: 1000, or a few under a compute-sanitizer (`GRAPH_RT_SANITIZER`, set by `run.sh`).
fn calls() -> usize {
    match std::env::var_os("GRAPH_RT_SANITIZER") {
        Some(_) => 6,
        None => 1000,
    }
}

fn cache_shape() -> (usize, usize, usize, usize) {
    (BATCH, KV_HEADS, CACHE, HEAD_DIM)
}

struct Layer {
    attn_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    mlp_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

struct Model {
    layers: Vec<Layer>,
    /// Rotary tables, `[CACHE, HEAD_DIM / 2]`.
    cos: Tensor,
    sin: Tensor,
    /// `0..CACHE`, for the mask.
    positions: Tensor,
    neg_inf: Tensor,
}

impl Model {
    /// Llama's initialisation (std 0.02), norms near one.
    fn new(dev: &Device) -> candle_core::Result<Self> {
        let linear = |out: usize, inp: usize| {
            Ok::<_, candle_core::Error>(Linear::new(
                Tensor::randn(0f32, 0.02, (out, inp), dev)?,
                None,
            ))
        };
        let norm = || Tensor::rand(0.9f32, 1.1, DIM, dev);
        let layers = (0..LAYERS)
            .map(|_| {
                Ok(Layer {
                    attn_norm: norm()?,
                    q: linear(HEADS * HEAD_DIM, DIM)?,
                    k: linear(KV_HEADS * HEAD_DIM, DIM)?,
                    v: linear(KV_HEADS * HEAD_DIM, DIM)?,
                    o: linear(DIM, HEADS * HEAD_DIM)?,
                    mlp_norm: norm()?,
                    gate: linear(FFN, DIM)?,
                    up: linear(FFN, DIM)?,
                    down: linear(DIM, FFN)?,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let inv_freq: Vec<f32> = (0..HEAD_DIM / 2)
            .map(|i| 1.0 / 10000f32.powf(2.0 * i as f32 / HEAD_DIM as f32))
            .collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, HEAD_DIM / 2), dev)?;
        let t = Tensor::arange(0u32, CACHE as u32, dev)?
            .to_dtype(DType::F32)?
            .reshape((CACHE, 1))?;
        let angles = t.matmul(&inv_freq)?;
        Ok(Self {
            layers,
            cos: angles.cos()?,
            sin: angles.sin()?,
            positions: Tensor::arange(0u32, CACHE as u32, dev)?,
            neg_inf: Tensor::new(&[[[[f32::NEG_INFINITY]]]], dev)?,
        })
    }
}

/// One block at position `pos` (`[1]`, u32, on the device): writes this position's key and
/// value into `kc` and `vc` (`[BATCH, KV_HEADS, CACHE, HEAD_DIM]`), attends over the whole
/// cache with the positions after `pos` masked, returns the block's output `[BATCH, DIM]`.
fn block(
    m: &Model,
    l: &Layer,
    x: &Tensor,
    pos: &Tensor,
    kc: &Tensor,
    vc: &Tensor,
) -> candle_core::Result<Tensor> {
    let n_rep = HEADS / KV_HEADS;
    let h = candle_nn::ops::rms_norm(x, &l.attn_norm, EPS as f32)?;
    let (cos, sin) = (m.cos.index_select(pos, 0)?, m.sin.index_select(pos, 0)?);
    let q = l.q.forward(&h)?.reshape((BATCH, HEADS, 1, HEAD_DIM))?;
    let q = candle_nn::rotary_emb::rope(&q, &cos, &sin)?;
    let k = l.k.forward(&h)?.reshape((BATCH, KV_HEADS, 1, HEAD_DIM))?;
    let k = candle_nn::rotary_emb::rope(&k, &cos, &sin)?;
    let v = l.v.forward(&h)?.reshape((BATCH, KV_HEADS, 1, HEAD_DIM))?;
    // The cache row at `pos`, chosen on the device.
    let rows = pos
        .reshape((1, 1, 1, 1))?
        .broadcast_as((BATCH, KV_HEADS, 1, HEAD_DIM))?
        .contiguous()?;
    kc.scatter_set(&rows, &k, 2)?;
    vc.scatter_set(&rows, &v, 2)?;
    // Grouped-query attention: each key-value head serves n_rep query heads.
    let q = q.reshape((BATCH, KV_HEADS, n_rep, HEAD_DIM))?;
    let scores = (q.matmul(&kc.t()?)? * (1.0 / (HEAD_DIM as f64).sqrt()))?;
    let shape = scores.shape().clone();
    let visible = m
        .positions
        .broadcast_le(pos)?
        .reshape((1, 1, 1, CACHE))?
        .broadcast_as(&shape)?;
    let scores = visible.where_cond(&scores, &m.neg_inf.broadcast_as(&shape)?)?;
    let probs = candle_nn::ops::softmax_last_dim(&scores)?;
    let attn = probs.matmul(vc)?.reshape((BATCH, HEADS * HEAD_DIM))?;
    let h = (x + l.o.forward(&attn)?)?;
    let n = candle_nn::ops::rms_norm(&h, &l.mlp_norm, EPS as f32)?;
    let act = (candle_nn::ops::silu(&l.gate.forward(&n)?)? * l.up.forward(&n)?)?;
    &h + l.down.forward(&act)?
}

/// The step's declared buffers.
struct Params {
    x: Buf<f32>,
    pos: Buf<u32>,
    y: Buf<f32>,
    caches: Vec<(Buf<f32>, Buf<f32>)>,
}

/// What one call reads and writes.
struct Io {
    x: Tensor,
    pos: Tensor,
    y: Tensor,
    caches: Vec<(Tensor, Tensor)>,
}

impl Io {
    fn fresh(dev: &Device, position: u32) -> Self {
        let cache = || Tensor::rand(-1f32, 1f32, cache_shape(), dev).unwrap();
        Self {
            x: Tensor::randn(0f32, 1f32, (BATCH, DIM), dev).unwrap(),
            pos: Tensor::new(&[position], dev).unwrap(),
            y: Tensor::zeros((BATCH, DIM), DType::F32, dev).unwrap(),
            caches: (0..LAYERS).map(|_| (cache(), cache())).collect(),
        }
    }

    /// The same inputs, with outputs and caches of its own (copies of this one's caches).
    fn twin(&self) -> Self {
        Self {
            x: self.x.clone(),
            pos: self.pos.clone(),
            y: self.y.zeros_like().unwrap(),
            caches: self
                .caches
                .iter()
                .map(|(k, v)| (k.copy().unwrap(), v.copy().unwrap()))
                .collect(),
        }
    }

    fn bind<F>(&self, step: &mut Step<F>, p: &Params)
    where
        F: FnMut(&StepScope<'_>) -> graph_rt::Result<()>,
    {
        bind(step, &p.x, &self.x).unwrap();
        bind(step, &p.pos, &self.pos).unwrap();
        bind(step, &p.y, &self.y).unwrap();
        for ((kb, vb), (k, v)) in p.caches.iter().zip(&self.caches) {
            bind(step, kb, k).unwrap();
            bind(step, vb, v).unwrap();
        }
    }

    /// Every value this call wrote: the output, then each cache.
    fn written(&self) -> Vec<Vec<f32>> {
        let mut out = vec![self.y.flatten_all().unwrap().to_vec1::<f32>().unwrap()];
        for (k, v) in &self.caches {
            out.push(k.flatten_all().unwrap().to_vec1::<f32>().unwrap());
            out.push(v.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        }
        out
    }
}

fn declare(on: &CandleStream, io: &Io) -> (StepParams, Params) {
    let ctx = on.stream().context();
    let mut sp = StepParams::new(ctx, 3 + 2 * LAYERS).unwrap();
    let cache_len = BATCH * KV_HEADS * CACHE * HEAD_DIM;
    let p = Params {
        x: sp.buffer(BATCH * DIM).unwrap(),
        pos: sp.buffer(1).unwrap(),
        y: sp.buffer(BATCH * DIM).unwrap(),
        caches: (0..LAYERS)
            .map(|_| (sp.buffer(cache_len).unwrap(), sp.buffer(cache_len).unwrap()))
            .collect(),
    };
    let s = on.stream();
    sp.bind(&p.x, &buffer_of(s, &io.x).unwrap()).unwrap();
    sp.bind(&p.pos, &buffer_of(s, &io.pos).unwrap()).unwrap();
    sp.bind(&p.y, &buffer_of(s, &io.y).unwrap()).unwrap();
    for ((kb, vb), (k, v)) in p.caches.iter().zip(&io.caches) {
        sp.bind(kb, &buffer_of(s, k).unwrap()).unwrap();
        sp.bind(vb, &buffer_of(s, v).unwrap()).unwrap();
    }
    (sp, p)
}

/// The closure: the blocks over the declared tensors, the result written into `y` by candle's
/// own copy kernel.
fn body<'a>(
    on: &'a CandleStream,
    m: &'a Model,
    p: &'a Params,
) -> impl FnMut(&StepScope<'_>) -> graph_rt::Result<()> + 'a {
    move |s| {
        // candle's uploads of dims and strides come from its cache, filled by the eager run.
        let _cache = on.cuda_device()?.enable_cuda_graph_htod_cache();
        // SAFETY: these tensors, and what shares their storage, live in this run only.
        let (x, pos, y) = unsafe {
            (
                tensor(s, on, &p.x, (BATCH, DIM))?,
                tensor(s, on, &p.pos, 1)?,
                tensor(s, on, &p.y, (BATCH, DIM))?,
            )
        };
        let mut h = x;
        for (l, (kb, vb)) in m.layers.iter().zip(&p.caches) {
            // SAFETY: as above.
            let (kc, vc) = unsafe {
                (
                    tensor(s, on, kb, cache_shape())?,
                    tensor(s, on, vb, cache_shape())?,
                )
            };
            h = block(m, l, &h, &pos, &kc, &vc).map_err(error)?;
        }
        y.slice_set(&h, 0, 0).map_err(error)
    }
}

/// The names of the kernels candle-kernels ships for unquantized tensors (`.entry` in its PTX
/// modules).
fn candle_kernel_names() -> std::collections::HashSet<String> {
    use candle_core::cuda_backend::kernels as k;
    let mut names = std::collections::HashSet::new();
    for m in [
        k::AFFINE,
        k::BINARY,
        k::CAST,
        k::CONV,
        k::FILL,
        k::INDEXING,
        k::REDUCE,
        k::SORT,
        k::TERNARY,
        k::UNARY,
    ] {
        for line in m.ptx().lines() {
            if let Some(rest) = line.trim_start().split(".entry ").nth(1) {
                let name = rest.split(['(', ' ']).next().unwrap_or_default();
                names.insert(name.to_owned());
            }
        }
    }
    names
}

/// Whether `name` reads as a cuBLAS or cuBLASLt kernel (their GEMM, GEMV and reduction
/// kernels, by family).
fn is_cublas(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "gemm",
        "gemv",
        "splitk",
        "xmma",
        "cutlass",
        "cublas",
        "nvjet",
        "dot_kernel",
    ]
    .iter()
    .any(|k| n.contains(k))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn two_llama_blocks_in_candle_are_rebound_every_call_and_equal_candle_eager() {
    let on = CandleStream::new(0).unwrap();
    let dev = on.device().clone();
    let ctx = on.stream().context().clone();
    let model = Model::new(&dev).unwrap();
    let first = Io::fresh(&dev, 5);
    let (sp, gp) = declare(&on, &first);
    let mut graphed = Step::new(
        on.stream(),
        sp,
        StepOptions::default(),
        body(&on, &model, &gp),
    )
    .unwrap();
    assert!(
        matches!(graphed.mode(), StepMode::Graph { .. }),
        "{:?}",
        graphed.mode()
    );
    // Every kernel a replay runs is candle's or cuBLAS's: no graph-rt kernel, no custom op.
    let kernels = graphed.kernels();
    let graph_rts: Vec<&str> = graph_rt::kernels::ALL
        .iter()
        .flat_map(|k| k.entry_points.iter().copied())
        .collect();
    assert!(
        kernels
            .iter()
            .all(|k| !graph_rts.contains(&k.name.as_str())),
        "a graph-rt kernel among the step's"
    );
    let ours = candle_kernel_names();
    let (candle, rest): (Vec<_>, Vec<_>) = kernels.iter().partition(|k| ours.contains(&k.name));
    println!(
        "{} kernel nodes: {} candle's, {} cuBLAS's",
        kernels.len(),
        candle.len(),
        rest.len()
    );
    for k in &kernels {
        println!("  {} {:?} {:?}", k.name, k.dims.grid, k.dims.block);
    }
    assert!(
        rest.iter().all(|k| is_cublas(&k.name)),
        "kernels neither candle's nor cuBLAS's: {:?}",
        rest.iter().map(|k| &k.name).collect::<Vec<_>>()
    );
    // Two blocks: q, k, v, o, gate, up, down and two attention products each.
    assert!(rest.len() >= 9 * LAYERS, "{} cuBLAS kernels", rest.len());
    let eager_first = first.twin();
    let (sp, ep) = declare(&on, &eager_first);
    let eager_options = StepOptions {
        eager: true,
        ..StepOptions::default()
    };
    let mut eager = Step::new(on.stream(), sp, eager_options, body(&on, &model, &ep)).unwrap();
    let mut kept = Vec::new();
    let mut positions = std::collections::HashSet::new();
    for call in 0..calls() {
        let position = ((call * 37 + 11) % CACHE) as u32;
        positions.insert(position);
        let g = Io::fresh(&dev, position);
        let e = g.twin();
        g.bind(&mut graphed, &gp);
        graphed.run().unwrap();
        e.bind(&mut eager, &ep);
        eager.run().unwrap();
        kept.push((g, e));
        if kept.len() == 50 || call + 1 == calls() {
            for (g, e) in kept.drain(..) {
                let (gw, ew) = (g.written(), e.written());
                for (i, (a, b)) in gw.iter().zip(&ew).enumerate() {
                    let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "call {call}: written value {i} (0: the output, then k, v of each layer) differs from eager's");
                }
                assert!(gw[0].iter().all(|v| v.is_finite()));
            }
        }
    }
    assert!(positions.len() > CACHE / 2 || calls() < CACHE);
    assert_eq!(graphed.validate().unwrap(), Validated::Same);
    assert!(ctx.take_deferred_errors().is_empty());
}

/// The control for the sanitizers (`run.sh candle-sanitize`): the same blocks in candle alone,
/// no step, on the same device.
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_llama_blocks_in_candle_alone_control() {
    let on = CandleStream::new(0).unwrap();
    let dev = on.device().clone();
    let model = Model::new(&dev).unwrap();
    for call in 0..calls() {
        let io = Io::fresh(&dev, ((call * 37 + 11) % CACHE) as u32);
        let mut h = io.x.clone();
        for (l, (k, v)) in model.layers.iter().zip(&io.caches) {
            h = block(&model, l, &h, &io.pos, k, v).unwrap();
        }
        io.y.slice_set(&h, 0, 0).unwrap();
        assert!(io.written()[0].iter().all(|v| v.is_finite()));
    }
}
