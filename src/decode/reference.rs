//! The decode step on the CPU, in f32 with f64 sums: the reference a GPU implementation (and the
//! PyTorch script) is checked against on small configurations. The same model as
//! `shared/baseline/decode_torch.py`: token embedding; per layer RMSNorm, a fused Q/K/V
//! projection, rotary embedding (halves rotated, base 10000), the K/V cache written at the
//! position, attention of every head over the positions written so far (grouped K/V heads,
//! scaled by 1/√head width), the output projection and a residual, RMSNorm, a gated MLP
//! (SiLU(gate) · up) and a residual; a final RMSNorm and the output head. RMSNorm's ε is 1e-6.
//! Weights from [`weight`]: projections scaled by 1/√fan-in, the embedding by 1,
//! norm weights 1 ± 0.1.

use super::{head_weight, seed, weight, DecodeConfig, Tensor};

/// RMSNorm's ε.
pub const EPS: f32 = 1e-6;

/// A weight matrix, row-major `rows × cols` (`y = W x` takes `x` of `cols`).
struct Matrix {
    rows: usize,
    cols: usize,
    w: Vec<f32>,
}

impl Matrix {
    fn new(tensor: Tensor, layer: usize, rows: usize, cols: usize, scale: f64) -> Self {
        let s = seed(tensor, layer);
        let w = (0..rows * cols)
            .map(|i| weight(s, i / cols, i % cols, scale) as f32)
            .collect();
        Self { rows, cols, w }
    }

    fn projection(tensor: Tensor, layer: usize, rows: usize, cols: usize) -> Self {
        Self::new(tensor, layer, rows, cols, 1.0 / (cols as f64).sqrt())
    }

    fn apply(&self, x: &[f32]) -> Vec<f32> {
        (0..self.rows)
            .map(|r| {
                let row = &self.w[r * self.cols..(r + 1) * self.cols];
                row.iter()
                    .zip(x)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>() as f32
            })
            .collect()
    }
}

/// Norm weights: 1 ± 0.1.
fn norm_weights(tensor: Tensor, layer: usize, d: usize) -> Vec<f32> {
    let s = seed(tensor, layer);
    (0..d)
        .map(|i| (1.0 + weight(s, 0, i, 0.1)) as f32)
        .collect()
}

fn rms_norm(x: &[f32], w: &[f32]) -> Vec<f32> {
    let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + EPS as f64).sqrt();
    x.iter()
        .zip(w)
        .map(|(&v, &g)| (v as f64 * inv) as f32 * g)
        .collect()
}

struct Layer {
    n1: Vec<f32>,
    n2: Vec<f32>,
    qkv: Matrix,
    o: Matrix,
    up: Matrix,
    down: Matrix,
}

/// The model's weights and a K/V cache per batch row.
pub struct Reference {
    c: DecodeConfig,
    embedding: Matrix,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
    head: Matrix,
    /// Per batch row, per layer: keys and values, `max_len × kv_heads × head_dim` each.
    cache: Vec<Vec<(Vec<f32>, Vec<f32>)>>,
}

impl Reference {
    /// The model of `c` with `batch` cache rows (every cache position NaN until written: a read
    /// of a position not yet written shows in the logits).
    pub fn new(c: &DecodeConfig, batch: usize) -> Self {
        let (d, hd) = (c.d, c.head_dim());
        let qkv_rows = (c.heads + 2 * c.kv_heads) * hd;
        let layers = (0..c.layers)
            .map(|l| Layer {
                n1: norm_weights(Tensor::Norm1, l, d),
                n2: norm_weights(Tensor::Norm2, l, d),
                qkv: Matrix::projection(Tensor::Qkv, l, qkv_rows, d),
                o: Matrix::projection(Tensor::O, l, d, c.heads * hd),
                up: Matrix::projection(Tensor::Up, l, 2 * c.mlp, d),
                down: Matrix::projection(Tensor::Down, l, d, c.mlp),
            })
            .collect();
        let slab = c.max_len * c.kv_heads * hd;
        Self {
            c: c.clone(),
            embedding: Matrix::new(Tensor::Embedding, 0, c.vocab, d, 1.0),
            layers,
            final_norm: norm_weights(Tensor::FinalNorm, 0, d),
            head: Matrix {
                rows: c.vocab,
                cols: d,
                w: (0..c.vocab * d)
                    .map(|i| head_weight(d, c.vocab, i / d, i % d) as f32)
                    .collect(),
            },
            cache: (0..batch)
                .map(|_| {
                    (0..c.layers)
                        .map(|_| (vec![f32::NAN; slab], vec![f32::NAN; slab]))
                        .collect()
                })
                .collect(),
        }
    }

    /// Rotates `t` (one head, `head_dim` wide) to position `pos`.
    fn rope(&self, t: &mut [f32], pos: usize) {
        let half = t.len() / 2;
        for i in 0..half {
            let inv = 1.0 / 10000f64.powf(i as f64 / half as f64);
            let (sin, cos) = (pos as f64 * inv).sin_cos();
            let (a, b) = (t[i] as f64, t[i + half] as f64);
            t[i] = (a * cos - b * sin) as f32;
            t[i + half] = (b * cos + a * sin) as f32;
        }
    }

    /// One decode step: `tokens[b]` at position `pos` for each batch row `b` (its K/V written
    /// there); returns each row's logits.
    pub fn step(&mut self, tokens: &[usize], pos: usize) -> Vec<Vec<f32>> {
        let c = self.c.clone();
        let (hd, group) = (c.head_dim(), c.heads / c.kv_heads);
        let mut out = Vec::new();
        for (b, &tok) in tokens.iter().enumerate() {
            let mut x = self.embedding.w[tok * c.d..(tok + 1) * c.d].to_vec();
            for l in 0..c.layers {
                let layer = &self.layers[l];
                let qkv = layer.qkv.apply(&rms_norm(&x, &layer.n1));
                let (q, rest) = qkv.split_at(c.heads * hd);
                let (k, v) = rest.split_at(c.kv_heads * hd);
                let mut q = q.to_vec();
                let mut k = k.to_vec();
                for h in 0..c.heads {
                    self.rope(&mut q[h * hd..(h + 1) * hd], pos);
                }
                for h in 0..c.kv_heads {
                    self.rope(&mut k[h * hd..(h + 1) * hd], pos);
                }
                let (kc, vc) = &mut self.cache[b][l];
                let at = pos * c.kv_heads * hd;
                kc[at..at + k.len()].copy_from_slice(&k);
                vc[at..at + v.len()].copy_from_slice(v);
                let mut attn = vec![0f32; c.heads * hd];
                for h in 0..c.heads {
                    let kvh = h / group;
                    let qh = &q[h * hd..(h + 1) * hd];
                    let scores: Vec<f64> = (0..=pos)
                        .map(|p| {
                            let kp = &kc[(p * c.kv_heads + kvh) * hd..][..hd];
                            qh.iter()
                                .zip(kp)
                                .map(|(&a, &b)| a as f64 * b as f64)
                                .sum::<f64>()
                                / (hd as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for (p, w) in e.iter().enumerate() {
                        let vp = &vc[(p * c.kv_heads + kvh) * hd..][..hd];
                        for (a, &vv) in attn[h * hd..(h + 1) * hd].iter_mut().zip(vp) {
                            *a += (w / sum * vv as f64) as f32;
                        }
                    }
                }
                for (xi, oi) in x.iter_mut().zip(layer.o.apply(&attn)) {
                    *xi += oi;
                }
                let gu = layer.up.apply(&rms_norm(&x, &layer.n2));
                let (g, u) = gu.split_at(c.mlp);
                let act: Vec<f32> = g
                    .iter()
                    .zip(u)
                    .map(|(&g, &u)| (g as f64 / (1.0 + (-(g as f64)).exp())) as f32 * u)
                    .collect();
                for (xi, di) in x.iter_mut().zip(layer.down.apply(&act)) {
                    *xi += di;
                }
            }
            out.push(self.head.apply(&rms_norm(&x, &self.final_norm)));
        }
        out
    }
}

/// The top token and its margin over the second (logits), for reports: a margin near 0 means
/// the argmax is decided by rounding.
pub fn top1_margin(logits: &[f32]) -> (usize, f32) {
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    match idx.as_slice() {
        [a, b, ..] => (*a, logits[*a] - logits[*b]),
        [a] => (*a, f32::INFINITY),
        [] => (0, 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> DecodeConfig {
        DecodeConfig {
            layers: 2,
            d: 256,
            heads: 4,
            kv_heads: 2,
            mlp: 384,
            vocab: 500,
            max_len: 16,
            batches: vec![2],
            position: 3,
        }
    }

    #[test]
    fn a_step_reads_only_the_positions_written_and_its_logits_are_not_degenerate() {
        let c = tiny();
        let mut m = Reference::new(&c, 2);
        let mut last = Vec::new();
        // Teacher-forced: positions 0..=3, the cache beyond each position NaN.
        for pos in 0..=c.position {
            last = m.step(&[7 + pos, 400 - pos], pos);
            assert!(
                last.iter().flatten().all(|v| v.is_finite()),
                "position {pos}: a read past the cache"
            );
        }
        for row in &last {
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / row.len() as f64;
            let sd = (row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>()
                / row.len() as f64)
                .sqrt();
            let (_, margin) = top1_margin(row);
            assert!(sd > 0.1, "logits' standard deviation {sd}");
            assert!(
                margin as f64 > 1e-3 * sd,
                "top-1 margin {margin} of sd {sd}"
            );
        }
        assert_ne!(last[0], last[1], "two rows, two tokens, two answers");
    }

    #[test]
    fn the_logits_are_the_numpy_models() {
        // `python3 scripts/decode_reference.py` (NumPy, float64 over the same f32 weights), copied.
        // Each row's top token is the successor of its last (the head's successor bias).
        let want = [
            (
                11,
                -0.9343893688515994,
                [0.4007408642264192, 0.11192646460298805, -0.0446121385874611],
            ),
            (
                398,
                24.573362630269305,
                [0.8608367921829728, -0.5575377418875936, 1.3104882565845402],
            ),
        ];
        let c = tiny();
        let mut m = Reference::new(&c, 2);
        let mut logits = Vec::new();
        for pos in 0..=3 {
            logits = m.step(&[7 + pos, 400 - pos], pos);
        }
        for (row, (argmax, sum, first)) in logits.iter().zip(want) {
            assert_eq!(top1_margin(row).0, argmax);
            let got: f64 = row.iter().map(|&v| v as f64).sum();
            assert!((got - sum).abs() < 1e-3, "sum {got} vs {sum}");
            for (g, w) in row.iter().zip(first) {
                assert!((*g as f64 - w).abs() < 1e-4, "{g} vs {w}");
            }
        }
    }

    #[test]
    fn the_same_tokens_give_the_same_logits() {
        let c = tiny();
        let (mut a, mut b) = (Reference::new(&c, 1), Reference::new(&c, 1));
        for pos in 0..3 {
            assert_eq!(a.step(&[11], pos), b.step(&[11], pos));
        }
    }
}
