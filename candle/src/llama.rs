//! A Llama-style decoder in candle, written twice: as candle's examples write it
//! ([`Llama::forward_natural`]) and as it must be written for a step to capture it once and
//! rebind it every call ([`Llama::forward_static`]); the [porting chapter](crate::porting) says
//! why each difference is there.
//!
//! Both use candle's tensors, layers (`candle_nn::Linear`, `Embedding`) and kernels (RMSNorm,
//! rotary embedding and softmax from candle-kernels, cuBLAS through candle's matmul), with the
//! same weights, and take the softmax in f32 as candle's Llama does.

use candle_core::{DType, Device, Module, Result, Tensor, D};
use candle_nn::{Embedding, Linear};

/// The shape of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// Decoder layers.
    pub layers: usize,
    /// Hidden size.
    pub dim: usize,
    /// Query heads.
    pub heads: usize,
    /// Key-value heads (grouped-query attention: each serves `heads / kv_heads` query heads).
    pub kv_heads: usize,
    /// MLP hidden size.
    pub ffn: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Positions a KV cache holds.
    pub cache: usize,
    /// Rotary embedding base.
    pub theta: f32,
    /// RMSNorm epsilon.
    pub eps: f32,
}

impl Config {
    /// 8 layers, hidden 2048, 16 heads, 4 key-value heads, MLP 5632, vocabulary 32000, a cache
    /// of 2048 positions.
    pub const fn llama_8x2048() -> Self {
        Self {
            layers: 8,
            dim: 2048,
            heads: 16,
            kv_heads: 4,
            ffn: 5632,
            vocab: 32000,
            cache: 2048,
            theta: 10000.0,
            eps: 1e-5,
        }
    }

    /// Two layers of the same shape, small (hidden 256, 8 heads, 2 key-value heads, MLP 704,
    /// vocabulary 1024, a 256-position cache): for tests and quick runs.
    pub const fn small() -> Self {
        Self {
            layers: 2,
            dim: 256,
            heads: 8,
            kv_heads: 2,
            ffn: 704,
            vocab: 1024,
            cache: 256,
            ..Self::llama_8x2048()
        }
    }

    /// Each head's size.
    pub const fn head_dim(&self) -> usize {
        self.dim / self.heads
    }

    /// The shape of one layer's key or value cache for `batch` sequences:
    /// `[batch, kv_heads, cache, head_dim]`.
    pub const fn cache_shape(&self, batch: usize) -> (usize, usize, usize, usize) {
        (batch, self.kv_heads, self.cache, self.head_dim())
    }
}

struct Block {
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

/// The model: its weights, and the tables both forms read.
pub struct Llama {
    cfg: Config,
    dtype: DType,
    embed: Embedding,
    blocks: Vec<Block>,
    norm: Tensor,
    lm_head: Linear,
    /// Rotary tables, `[cache, head_dim / 2]`, in the model's dtype.
    cos: Tensor,
    sin: Tensor,
    /// `0..cache` (u32), for the static form's mask.
    positions: Tensor,
    /// One f32 minus infinity, `[1, 1, 1, 1]`.
    neg_inf: Tensor,
}

/// The natural form's KV cache: each layer's keys and values so far, grown by one position a
/// call (`Tensor::cat`, as candle's examples do).
#[derive(Default, Clone)]
pub struct GrowingCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
}

impl GrowingCache {
    /// A cache holding `k` and `v` per layer (`[batch, kv_heads, positions, head_dim]`).
    pub fn from_tensors(layers: Vec<(Tensor, Tensor)>) -> Self {
        Self {
            layers: layers.into_iter().map(Some).collect(),
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        match self.layers.first() {
            Some(Some((k, _))) => k.dim(2).unwrap_or(0),
            _ => 0,
        }
    }

    /// Whether it holds no position.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Llama {
    /// Llama's initialisation: every matrix normal with std 0.02 from candle's generator,
    /// seeded with `seed` on a GPU (the same seed gives the same weights; candle's CPU generator
    /// takes no seed); norms at one. Made in f32, then cast to `dtype`.
    pub fn new(cfg: Config, dtype: DType, seed: u64, dev: &Device) -> Result<Self> {
        if dev.is_cuda() {
            dev.set_seed(seed)?;
        }
        let matrix = |rows: usize, cols: usize| -> Result<Tensor> {
            Tensor::randn(0f32, 0.02, (rows, cols), dev)?.to_dtype(dtype)
        };
        let (hd, d) = (cfg.head_dim(), cfg.dim);
        let ones = || Tensor::ones(d, dtype, dev);
        let blocks = (0..cfg.layers)
            .map(|_| {
                Ok(Block {
                    attn_norm: ones()?,
                    q: Linear::new(matrix(cfg.heads * hd, d)?, None),
                    k: Linear::new(matrix(cfg.kv_heads * hd, d)?, None),
                    v: Linear::new(matrix(cfg.kv_heads * hd, d)?, None),
                    o: Linear::new(matrix(d, cfg.heads * hd)?, None),
                    mlp_norm: ones()?,
                    gate: Linear::new(matrix(cfg.ffn, d)?, None),
                    up: Linear::new(matrix(cfg.ffn, d)?, None),
                    down: Linear::new(matrix(d, cfg.ffn)?, None),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embed = Embedding::new(matrix(cfg.vocab, d)?, d);
        let lm_head = Linear::new(matrix(cfg.vocab, d)?, None);
        let inv_freq: Vec<f32> = (0..hd / 2)
            .map(|i| 1.0 / cfg.theta.powf(2.0 * i as f32 / hd as f32))
            .collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, hd / 2), dev)?;
        let t = Tensor::arange(0u32, cfg.cache as u32, dev)?
            .to_dtype(DType::F32)?
            .reshape((cfg.cache, 1))?;
        let angles = t.matmul(&inv_freq)?;
        Ok(Self {
            cfg,
            dtype,
            embed,
            blocks,
            norm: ones()?,
            lm_head,
            cos: angles.cos()?.to_dtype(dtype)?,
            sin: angles.sin()?.to_dtype(dtype)?,
            positions: Tensor::arange(0u32, cfg.cache as u32, dev)?,
            neg_inf: Tensor::new(&[[[[f32::NEG_INFINITY]]]], dev)?,
        })
    }

    /// The same model with its weights cast to `dtype`.
    pub fn to_dtype(&self, dtype: DType) -> Result<Self> {
        let linear =
            |l: &Linear| -> Result<Linear> { Ok(Linear::new(l.weight().to_dtype(dtype)?, None)) };
        let blocks = self
            .blocks
            .iter()
            .map(|b| {
                Ok(Block {
                    attn_norm: b.attn_norm.to_dtype(dtype)?,
                    q: linear(&b.q)?,
                    k: linear(&b.k)?,
                    v: linear(&b.v)?,
                    o: linear(&b.o)?,
                    mlp_norm: b.mlp_norm.to_dtype(dtype)?,
                    gate: linear(&b.gate)?,
                    up: linear(&b.up)?,
                    down: linear(&b.down)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            cfg: self.cfg,
            dtype,
            embed: Embedding::new(self.embed.embeddings().to_dtype(dtype)?, self.cfg.dim),
            blocks,
            norm: self.norm.to_dtype(dtype)?,
            lm_head: linear(&self.lm_head)?,
            cos: self.cos.to_dtype(dtype)?,
            sin: self.sin.to_dtype(dtype)?,
            positions: self.positions.clone(),
            neg_inf: self.neg_inf.clone(),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Its dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device its weights are on.
    pub fn device(&self) -> &Device {
        self.positions.device()
    }

    /// A zeroed KV cache for the static form: per layer, keys and values of
    /// [`Config::cache_shape`].
    pub fn static_cache(&self, batch: usize) -> Result<Vec<(Tensor, Tensor)>> {
        let dev = self.device();
        let shape = self.cfg.cache_shape(batch);
        (0..self.cfg.layers)
            .map(|_| {
                Ok((
                    Tensor::zeros(shape, self.dtype, dev)?,
                    Tensor::zeros(shape, self.dtype, dev)?,
                ))
            })
            .collect()
    }

    /// One decode position as candle's examples write it: `tokens` (`[batch]`, u32) at host
    /// position `pos`, each layer's keys and values appended to `cache` (a new, longer tensor
    /// each call), attention over the `pos + 1` positions held; returns the logits
    /// (`[batch, vocab]`, f32). The cache must hold `pos` positions.
    pub fn forward_natural(
        &self,
        tokens: &Tensor,
        pos: usize,
        cache: &mut GrowingCache,
    ) -> Result<Tensor> {
        let (cfg, hd) = (&self.cfg, self.cfg.head_dim());
        let b = tokens.dim(0)?;
        if cache.layers.len() != cfg.layers {
            cache.layers = vec![None; cfg.layers];
        }
        let mut x = self.embed.forward(&tokens.reshape((b, 1))?)?;
        let (cos, sin) = (self.cos.narrow(0, pos, 1)?, self.sin.narrow(0, pos, 1)?);
        for (blk, kv) in self.blocks.iter().zip(&mut cache.layers) {
            let h = candle_nn::ops::rms_norm(&x, &blk.attn_norm, cfg.eps)?;
            let q = blk
                .q
                .forward(&h)?
                .reshape((b, 1, cfg.heads, hd))?
                .transpose(1, 2)?
                .contiguous()?;
            let k = blk
                .k
                .forward(&h)?
                .reshape((b, 1, cfg.kv_heads, hd))?
                .transpose(1, 2)?
                .contiguous()?;
            let v = blk
                .v
                .forward(&h)?
                .reshape((b, 1, cfg.kv_heads, hd))?
                .transpose(1, 2)?;
            let q = candle_nn::rotary_emb::rope(&q, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&k, &cos, &sin)?;
            let (k, v) = match kv.take() {
                Some((ck, cv)) => (Tensor::cat(&[&ck, &k], 2)?, Tensor::cat(&[&cv, &v], 2)?),
                None => (k, v.contiguous()?),
            };
            *kv = Some((k.clone(), v.clone()));
            let n_rep = cfg.heads / cfg.kv_heads;
            let (k, v) = (repeat_kv(&k, n_rep)?, repeat_kv(&v, n_rep)?);
            let att = (q.matmul(&k.t()?)? / (hd as f64).sqrt())?;
            let att = candle_nn::ops::softmax_last_dim(&att.to_dtype(DType::F32)?)?
                .to_dtype(self.dtype)?;
            let y =
                att.matmul(&v.contiguous()?)?
                    .transpose(1, 2)?
                    .reshape((b, 1, cfg.heads * hd))?;
            x = (x + blk.o.forward(&y)?)?;
            let h = candle_nn::ops::rms_norm(&x, &blk.mlp_norm, cfg.eps)?;
            let act = (candle_nn::ops::silu(&blk.gate.forward(&h)?)? * blk.up.forward(&h)?)?;
            x = (x + blk.down.forward(&act)?)?;
        }
        let x = candle_nn::ops::rms_norm(&x, &self.norm, cfg.eps)?;
        self.lm_head.forward(&x)?.squeeze(1)?.to_dtype(DType::F32)
    }

    /// One decode position written to be captured once and rebound every call: `tokens`
    /// (`[batch]`, u32) at the position `pos` holds (`[1]`, u32, on the device), each layer's
    /// key and value written into row `pos` of `caches` (per layer, keys and values of
    /// [`Config::cache_shape`]) with `scatter_set`, attention over the whole cache with the
    /// rows after `pos` masked, the logits written into `logits` (`[batch, vocab]`, f32). Every
    /// shape is the same at every position; nothing the call changes is a host value.
    pub fn forward_static(
        &self,
        tokens: &Tensor,
        pos: &Tensor,
        caches: &[(Tensor, Tensor)],
        logits: &Tensor,
    ) -> Result<()> {
        let out = self.logits_static(tokens, pos, caches)?;
        logits.slice_set(&out, 0, 0)
    }

    /// [`Llama::forward_static`], then each sequence's greedy next token (the logits' argmax)
    /// written into `next` (`[batch]`, u32): a generation loop binds it as the next call's
    /// tokens, with no host round trip.
    pub fn forward_static_greedy(
        &self,
        tokens: &Tensor,
        pos: &Tensor,
        caches: &[(Tensor, Tensor)],
        logits: &Tensor,
        next: &Tensor,
    ) -> Result<()> {
        let out = self.logits_static(tokens, pos, caches)?;
        logits.slice_set(&out, 0, 0)?;
        next.slice_set(&out.argmax(D::Minus1)?, 0, 0)
    }

    fn logits_static(
        &self,
        tokens: &Tensor,
        pos: &Tensor,
        caches: &[(Tensor, Tensor)],
    ) -> Result<Tensor> {
        let (cfg, hd) = (&self.cfg, self.cfg.head_dim());
        let b = tokens.dim(0)?;
        let n_rep = cfg.heads / cfg.kv_heads;
        let mut x = self.embed.forward(tokens)?;
        // The rotary rows and the cache row at `pos`, chosen on the device.
        let (cos, sin) = (
            self.cos.index_select(pos, 0)?,
            self.sin.index_select(pos, 0)?,
        );
        let rows = pos
            .reshape((1, 1, 1, 1))?
            .broadcast_as((b, cfg.kv_heads, 1, hd))?
            .contiguous()?;
        // Positions after `pos` are masked: the cache's every row is read, the same work at
        // every position.
        let visible = self
            .positions
            .broadcast_le(pos)?
            .reshape((1, 1, 1, cfg.cache))?;
        let scores_shape = (b, cfg.kv_heads, n_rep, cfg.cache);
        let visible = visible.broadcast_as(scores_shape)?;
        let neg_inf = self.neg_inf.broadcast_as(scores_shape)?;
        for (blk, (kc, vc)) in self.blocks.iter().zip(caches) {
            let h = candle_nn::ops::rms_norm(&x, &blk.attn_norm, cfg.eps)?;
            let q = blk.q.forward(&h)?.reshape((b, cfg.heads, 1, hd))?;
            let k = blk.k.forward(&h)?.reshape((b, cfg.kv_heads, 1, hd))?;
            let v = blk.v.forward(&h)?.reshape((b, cfg.kv_heads, 1, hd))?;
            let q = candle_nn::rotary_emb::rope(&q, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&k, &cos, &sin)?;
            kc.scatter_set(&rows, &k, 2)?;
            vc.scatter_set(&rows, &v, 2)?;
            // Grouped-query attention without repeating the cache: each key-value head's
            // n_rep query heads as one matrix.
            let q = q.reshape((b, cfg.kv_heads, n_rep, hd))?;
            let att = (q.matmul(&kc.t()?)? / (hd as f64).sqrt())?.to_dtype(DType::F32)?;
            let att = visible.where_cond(&att, &neg_inf)?;
            let att = candle_nn::ops::softmax_last_dim(&att)?.to_dtype(self.dtype)?;
            let y = att.matmul(vc)?.reshape((b, cfg.heads * hd))?;
            x = (x + blk.o.forward(&y)?)?;
            let h = candle_nn::ops::rms_norm(&x, &blk.mlp_norm, cfg.eps)?;
            let act = (candle_nn::ops::silu(&blk.gate.forward(&h)?)? * blk.up.forward(&h)?)?;
            x = (x + blk.down.forward(&act)?)?;
        }
        let x = candle_nn::ops::rms_norm(&x, &self.norm, cfg.eps)?;
        self.lm_head.forward(&x)?.to_dtype(DType::F32)
    }
}

/// Each key-value head repeated `n_rep` times along the heads (candle-transformers' way).
fn repeat_kv(x: &Tensor, n_rep: usize) -> Result<Tensor> {
    if n_rep == 1 {
        return Ok(x.clone());
    }
    let (b, kv, s, d) = x.dims4()?;
    Tensor::cat(&vec![x; n_rep], 2)?.reshape((b, kv * n_rep, s, d))
}

#[cfg(test)]
mod tests {
    use super::{Config, GrowingCache, Llama};
    use candle_core::{DType, Device, Tensor, D};

    /// The capture-safe form computes what candle's natural form does (on the CPU, in f32):
    /// the cache row written by `scatter_set` at the position on the device, the attention over
    /// the whole cache with the later rows masked, the grouped heads without repeating the
    /// cache, the greedy token.
    #[test]
    fn the_capture_safe_form_computes_what_the_natural_form_does() {
        let dev = Device::Cpu;
        let cfg = Config {
            layers: 2,
            dim: 64,
            heads: 4,
            kv_heads: 2,
            ffn: 96,
            vocab: 50,
            cache: 16,
            ..Config::small()
        };
        let model = Llama::new(cfg, DType::F32, 0, &dev).unwrap();
        let batch = 3;
        let caches = model.static_cache(batch).unwrap();
        let mut natural = GrowingCache::default();
        let logits = Tensor::zeros((batch, cfg.vocab), DType::F32, &dev).unwrap();
        let next = Tensor::zeros(batch, DType::U32, &dev).unwrap();
        for pos in 0..12usize {
            let ids: Vec<u32> = (0..batch)
                .map(|b| ((pos * 7 + b * 13) % cfg.vocab) as u32)
                .collect();
            let tokens = Tensor::new(ids.as_slice(), &dev).unwrap();
            let at = Tensor::new(&[pos as u32], &dev).unwrap();
            model
                .forward_static_greedy(&tokens, &at, &caches, &logits, &next)
                .unwrap();
            let want = model.forward_natural(&tokens, pos, &mut natural).unwrap();
            assert_eq!(natural.len(), pos + 1);
            let max_abs = |t: &Tensor| {
                t.abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap()
            };
            let (diff, scale) = (max_abs(&(&logits - &want).unwrap()), max_abs(&want));
            assert!(
                scale > 1e-3 && diff <= 1e-4 * scale,
                "position {pos}: {diff} (logits up to {scale})"
            );
            let greedy = want.argmax(D::Minus1).unwrap().to_vec1::<u32>().unwrap();
            assert_eq!(next.to_vec1::<u32>().unwrap(), greedy, "position {pos}");
        }
        // The cache rows after the last position were never written.
        let (k, _) = &caches[0];
        let tail = k
            .narrow(2, 12, cfg.cache - 12)
            .unwrap()
            .abs()
            .unwrap()
            .sum_all()
            .unwrap();
        assert_eq!(tail.to_scalar::<f32>().unwrap(), 0.0);
    }
}
