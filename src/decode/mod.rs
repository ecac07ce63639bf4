//! The decode model's configuration and weights, pure (the groundwork of the decode example;
//! the kernels and the step come with it): a decoder-only transformer's shape from the command
//! line, checked before anything touches a GPU, and its weights from a formula both sides
//! implement (`scripts/decode_weights.py` is the PyTorch side's copy; no RNG, whose streams
//! differ between Rust and PyTorch).

use std::fmt;

/// A decode model's shape and what to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeConfig {
    /// Transformer layers (1–32).
    pub layers: usize,
    /// Model width (256–4096, a multiple of `heads`).
    pub d: usize,
    /// Attention heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention: divides `heads`).
    pub kv_heads: usize,
    /// Gated MLP width.
    pub mlp: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Positions the KV cache holds.
    pub max_len: usize,
    /// Batch sizes to run, each ≥ 1.
    pub batches: Vec<usize>,
    /// The position decoded (0-based; below `max_len`).
    pub position: usize,
}

impl Default for DecodeConfig {
    /// The reference configuration: 4 layers, d 1024, 16 heads, 4 KV heads, MLP 2816,
    /// vocabulary 32000, a 1024-position cache, batches 1, 4, 16 at position 512.
    fn default() -> Self {
        Self {
            layers: 4,
            d: 1024,
            heads: 16,
            kv_heads: 4,
            mlp: 2816,
            vocab: 32000,
            max_len: 1024,
            batches: vec![1, 4, 16],
            position: 512,
        }
    }
}

/// What is wrong with a configuration, in words a user can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl DecodeConfig {
    /// Each head's width.
    pub fn head_dim(&self) -> usize {
        self.d / self.heads.max(1)
    }

    /// Reads `--name value` pairs over the default (names: layers, d, heads, kv-heads, mlp,
    /// vocab, max-len, batches as a comma list, position), then checks the result.
    pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Self, ConfigError> {
        let mut c = Self::default();
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let Some(name) = flag.strip_prefix("--") else {
                return Err(ConfigError(format!(
                    "unexpected argument {flag:?}: options are --name value"
                )));
            };
            let value = it
                .next()
                .ok_or_else(|| ConfigError(format!("--{name} needs a value")))?;
            let num = |v: &str| {
                v.parse::<usize>()
                    .map_err(|_| ConfigError(format!("--{name} {v:?}: not a whole number")))
            };
            match name {
                "layers" => c.layers = num(&value)?,
                "d" => c.d = num(&value)?,
                "heads" => c.heads = num(&value)?,
                "kv-heads" => c.kv_heads = num(&value)?,
                "mlp" => c.mlp = num(&value)?,
                "vocab" => c.vocab = num(&value)?,
                "max-len" => c.max_len = num(&value)?,
                "position" => c.position = num(&value)?,
                "batches" => {
                    c.batches = value
                        .split(',')
                        .map(|b| num(b.trim()))
                        .collect::<Result<_, _>>()?
                }
                other => {
                    return Err(ConfigError(format!(
                        "unknown option --{other}: layers, d, heads, kv-heads, mlp, vocab, max-len, batches, position"
                    )))
                }
            }
        }
        c.check()?;
        Ok(c)
    }

    /// Checks the shape: ranges, heads dividing the width, KV heads dividing the heads, an
    /// even head width (rotary embedding), batches and the position within the cache.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |s: String| Err(ConfigError(s));
        if !(1..=32).contains(&self.layers) {
            return bad(format!("layers {}: 1 to 32", self.layers));
        }
        if !(256..=4096).contains(&self.d) {
            return bad(format!("d {}: 256 to 4096", self.d));
        }
        if self.heads == 0 || self.d % self.heads != 0 {
            return bad(format!("heads {} must divide d {}", self.heads, self.d));
        }
        if self.kv_heads == 0 || self.heads % self.kv_heads != 0 {
            return bad(format!(
                "kv-heads {} must divide heads {}",
                self.kv_heads, self.heads
            ));
        }
        if self.head_dim() % 2 != 0 {
            return bad(format!(
                "the head width d / heads = {} must be even (rotary embedding)",
                self.head_dim()
            ));
        }
        if self.head_dim() > 256 {
            return bad(format!(
                "the head width d / heads = {} is above 256 (the attention kernel's limit)",
                self.head_dim()
            ));
        }
        if self.mlp == 0 || self.vocab == 0 || self.max_len == 0 {
            return bad("mlp, vocab and max-len are at least 1".into());
        }
        if self.max_len > 32768 {
            return bad(format!(
                "max-len {}: at most 32768 (attention keeps a row of scores in shared memory)",
                self.max_len
            ));
        }
        if self.vocab > i32::MAX as usize {
            return bad(format!("vocab {}: token ids are 32-bit", self.vocab));
        }
        if self.batches.is_empty() || self.batches.contains(&0) {
            return bad("batches: a list of sizes of at least 1 (e.g. 1,4,16)".into());
        }
        if let Some(b) = self.batches.iter().find(|&&b| b > 4096) {
            return bad(format!("batch {b}: at most 4096"));
        }
        if self.position >= self.max_len {
            return bad(format!(
                "position {} is beyond the cache of {} positions",
                self.position, self.max_len
            ));
        }
        Ok(())
    }

    /// Bytes of bf16 weights one step reads: every layer's, the final norm's and the head's
    /// (the embedding table is read one row a token): the weight-read floor's numerator.
    pub fn weight_read_bytes(&self) -> u64 {
        let (d, hd) = (self.d as u64, self.head_dim() as u64);
        let qkv = d * (self.heads as u64 + 2 * self.kv_heads as u64) * hd;
        let layer = qkv
            + self.heads as u64 * hd * d
            + d * 2 * self.mlp as u64
            + self.mlp as u64 * d
            + 2 * d;
        2 * (self.vocab as u64 * d + d + self.layers as u64 * layer)
    }
}

/// The model's tensors, in the order their seeds count them (as `scripts/decode_weights.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tensor {
    /// Token embedding (vocab × d).
    Embedding,
    /// Fused Q, K, V projection.
    Qkv,
    /// Attention output projection.
    O,
    /// Gated MLP up projection (gate and up).
    Up,
    /// MLP down projection.
    Down,
    /// RMSNorm before attention.
    Norm1,
    /// RMSNorm before the MLP.
    Norm2,
    /// The final RMSNorm.
    FinalNorm,
    /// The output head (vocab × d).
    Head,
}

/// The seed of `tensor` of `layer` (layer 0 for the model's own tensors).
pub fn seed(tensor: Tensor, layer: usize) -> u64 {
    1 + tensor as u64 + 16 * layer as u64
}

/// The formula's value in [0, 1) at row `r`, column `c` of the tensor of seed `s` (the classic
/// shader hash, in f64).
pub fn unit(s: u64, r: usize, c: usize) -> f64 {
    let x = (12.9898 * r as f64 + 78.233 * c as f64 + 37.719 * s as f64).sin() * 43758.5453;
    x - x.floor()
}

/// The weight at row `r`, column `c` of the tensor of seed `s`: uniform in (−scale, scale).
pub fn weight(s: u64, r: usize, c: usize, scale: f64) -> f64 {
    (2.0 * unit(s, r, c) - 1.0) * scale
}

/// The output head's successor bias: row `v` also carries `SUCCESSOR / d` times the embedding
/// of token `v − 1`, so that each token's successor stands out of the other logits by about six
/// of their standard deviations (a clear top-1, not one decided by rounding).
pub const SUCCESSOR: f64 = 6.0;

/// The output head's weight at row `v`, column `c` (before rounding): the formula's, scaled by
/// 1/√d, plus the successor bias ([`SUCCESSOR`]).
pub fn head_weight(d: usize, vocab: usize, v: usize, c: usize) -> f64 {
    let prev = (v + vocab - 1) % vocab;
    weight(seed(Tensor::Head, 0), v, c, 1.0 / (d as f64).sqrt())
        + SUCCESSOR / d as f64 * weight(seed(Tensor::Embedding, 0), prev, c, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_formula_is_the_python_scripts() {
        // `python3 scripts/decode_weights.py`, copied.
        let golden = [
            (Tensor::Embedding, 0, 0, 0, 1.0, -0.5611092238375477),
            (Tensor::Embedding, 0, 31999, 1023, 1.0, 0.5811075886422259),
            (
                Tensor::Qkv,
                3,
                5,
                7,
                1.0 / 1024f64.sqrt(),
                -0.015430492817358754,
            ),
            (
                Tensor::Down,
                1,
                1023,
                2815,
                1.0 / 2816f64.sqrt(),
                0.01196295891487854,
            ),
            (
                Tensor::Head,
                0,
                123,
                456,
                1.0 / 1024f64.sqrt(),
                0.005580518856504568,
            ),
        ];
        for (t, l, r, c, scale, want) in golden {
            let got = weight(seed(t, l), r, c, scale);
            assert!(
                (got - want).abs() < 1e-9,
                "{t:?} {l} ({r}, {c}): {got} vs {want}"
            );
        }
    }

    #[test]
    fn weights_are_spread_not_degenerate() {
        let v: Vec<f64> = (0..4096)
            .map(|i| weight(seed(Tensor::Up, 2), i / 64, i % 64, 1.0))
            .collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.05, "mean {mean}");
        assert!(
            (var - 1.0 / 3.0).abs() < 0.03,
            "variance {var} (uniform on (-1, 1): 1/3)"
        );
    }

    #[test]
    fn configurations_are_checked_with_a_reason() {
        assert_eq!(
            DecodeConfig::parse(args("")).unwrap(),
            DecodeConfig::default()
        );
        let c = DecodeConfig::parse(args(
            "--layers 16 --d 512 --heads 8 --kv-heads 2 --mlp 1408 --batches 1,4,16",
        ))
        .unwrap();
        assert_eq!((c.layers, c.head_dim(), c.batches.len()), (16, 64, 3));
        for (bad, says) in [
            ("--heads 12", "must divide d"),
            ("--kv-heads 3", "must divide heads"),
            ("--position 1024", "beyond the cache"),
            ("--batches 1,0", "at least 1"),
            ("--batches 1,5000", "at most 4096"),
            ("--layers 0", "1 to 32"),
            ("--d 8192", "256 to 4096"),
            ("--d 1024 --heads 2 --kv-heads 1", "above 256"),
            ("--max-len 40000", "at most 32768"),
            ("--width 3", "unknown option"),
            ("--layers", "needs a value"),
            ("--layers four", "not a whole number"),
            ("layers 4", "unexpected argument"),
        ] {
            let e = DecodeConfig::parse(args(bad)).unwrap_err();
            assert!(e.0.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_reference_weights_are_what_the_issue_says() {
        // 155.7 MB read a step in bf16 for the reference configuration.
        let mb = DecodeConfig::default().weight_read_bytes() as f64 / 1e6;
        assert!((mb - 155.7).abs() < 1.0, "{mb} MB");
        // The wide and deep configurations of the issue after it: 1.13 GB (291 µs at 3.89 TB/s)
        // and about 32 µs' worth.
        let wide = DecodeConfig::parse(args(
            "--layers 2 --d 4096 --heads 32 --kv-heads 8 --mlp 14336",
        ))
        .unwrap();
        let gb = wide.weight_read_bytes() as f64 / 1e9;
        assert!((gb - 1.13).abs() < 0.02, "{gb} GB");
        let deep = DecodeConfig::parse(args(
            "--layers 16 --d 512 --heads 8 --kv-heads 2 --mlp 1408",
        ))
        .unwrap();
        let us = deep.weight_read_bytes() as f64 / 3.89e12 * 1e6;
        assert!((us - 32.0).abs() < 2.0, "{us} µs");
    }
}

pub mod reference;
