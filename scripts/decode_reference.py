#!/usr/bin/env python3
"""The decode step of `graph_rt_dev::decode::reference` in NumPy (float64), on the same formula
weights (`decode_weights.py`): the PyTorch script's model written once more without PyTorch, so
that the Python side's model can be checked against graph-rt's CPU reference anywhere. Run it to
print the logits' checksums graph-rt's tests compare with (a tiny configuration).

    python3 scripts/decode_reference.py      # needs numpy
"""
import math
import sys

import numpy as np

sys.path.insert(0, __import__("os").path.dirname(__file__))
from decode_weights import SUCCESSOR, seed  # noqa: E402

EPS = 1e-6


def matrix64(kind, layer, rows, cols, scale):
    s = seed(kind, layer)
    r = np.arange(rows, dtype=np.float64)[:, None]
    c = np.arange(cols, dtype=np.float64)[None, :]
    x = np.sin(12.9898 * r + 78.233 * c + 37.719 * s) * 43758.5453
    u = x - np.floor(x)
    return (2.0 * u - 1.0) * scale


def matrix(kind, layer, rows, cols, scale):
    return matrix64(kind, layer, rows, cols, scale).astype(np.float32).astype(np.float64)


def projection(kind, layer, rows, cols):
    return matrix(kind, layer, rows, cols, 1.0 / math.sqrt(cols))


def norm(kind, layer, d):
    return (1.0 + matrix(kind, layer, 1, d, 0.1)[0]).astype(np.float32).astype(np.float64)


def rms_norm(x, w):
    return x / np.sqrt(np.mean(x * x) + EPS) * w


class Model:
    def __init__(self, layers, d, heads, kv_heads, mlp, vocab, max_len):
        self.L, self.D, self.H, self.KVH, self.MLP, self.V, self.T = layers, d, heads, kv_heads, mlp, vocab, max_len
        hd = d // heads
        self.HD = hd
        self.emb = matrix("embedding", 0, vocab, d, 1.0)
        self.layers = []
        for l in range(layers):
            self.layers.append(dict(
                n1=norm("norm1", l, d), n2=norm("norm2", l, d),
                qkv=projection("qkv", l, (heads + 2 * kv_heads) * hd, d),
                o=projection("o", l, d, heads * hd),
                up=projection("up", l, 2 * mlp, d),
                down=projection("down", l, d, mlp),
            ))
        self.fn = norm("final_norm", 0, d)
        # The head's successor bias (decode_weights.head_weight), in float64 before rounding.
        emb64 = matrix64("embedding", 0, vocab, d, 1.0)
        self.head = (matrix64("head", 0, vocab, d, 1.0 / math.sqrt(d)) + SUCCESSOR / d * np.roll(emb64, 1, axis=0)
                     ).astype(np.float32).astype(np.float64)
        self.cache = {}

    def rope(self, t, pos):
        half = self.HD // 2
        inv = 1.0 / 10000.0 ** (np.arange(half) / half)
        ang = pos * inv
        a, b = t[..., :half], t[..., half:]
        return np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], -1)

    def step(self, tokens, pos):
        out = []
        H, KVH, HD = self.H, self.KVH, self.HD
        for b, tok in enumerate(tokens):
            x = self.emb[tok].copy()
            for l, p in enumerate(self.layers):
                qkv = p["qkv"] @ rms_norm(x, p["n1"])
                q = self.rope(qkv[: H * HD].reshape(H, HD), pos)
                k = self.rope(qkv[H * HD:(H + KVH) * HD].reshape(KVH, HD), pos)
                v = qkv[(H + KVH) * HD:].reshape(KVH, HD)
                kc, vc = self.cache.setdefault((b, l), (np.full((self.T, KVH, HD), np.nan), np.full((self.T, KVH, HD), np.nan)))
                kc[pos], vc[pos] = k, v
                attn = np.zeros((H, HD))
                for h in range(H):
                    g = h // (H // KVH)
                    s = kc[: pos + 1, g] @ q[h] / math.sqrt(HD)
                    w = np.exp(s - s.max())
                    attn[h] = (w / w.sum()) @ vc[: pos + 1, g]
                x = x + p["o"] @ attn.reshape(-1)
                gu = p["up"] @ rms_norm(x, p["n2"])
                g, u = gu[: self.MLP], gu[self.MLP:]
                x = x + p["down"] @ (g / (1.0 + np.exp(-g)) * u)
            out.append(self.head @ rms_norm(x, self.fn))
        return out


if __name__ == "__main__":
    m = Model(2, 256, 4, 2, 384, 500, 16)
    for pos in range(4):
        logits = m.step([7 + pos, 400 - pos], pos)
    for row in logits:
        top = np.argsort(-row)[:2]
        print(f"argmax {top[0]} margin {row[top[0]] - row[top[1]]!r} sum {row.sum()!r} first {row[:3].tolist()!r}")
