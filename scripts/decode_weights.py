#!/usr/bin/env python3
"""The decode model's weights as a formula both sides implement (graph-rt's `graph_rt_dev::decode`
and the PyTorch script): no RNG, whose streams differ between Rust and PyTorch.

    w(seed, r, c) = (2 u - 1) * scale,   u = frac(sin(12.9898 r + 78.233 c + 37.719 seed) * 43758.5453)

computed in float64 (the classic shader hash; `frac` is x - floor(x)); `seed` names the tensor
(see `seed` below), `r`, `c` its row and column, `scale` 1 / sqrt(fan-in) for projections. Run as
a script it prints the golden values graph-rt's tests check against.
"""
import math

# Tensor kinds, in the order the seed counts them.
KINDS = ["embedding", "qkv", "o", "up", "down", "norm1", "norm2", "final_norm", "head"]


def seed(kind: str, layer: int) -> int:
    """The seed of tensor `kind` of `layer` (layer 0 for the model's own tensors)."""
    return 1 + KINDS.index(kind) + 16 * layer


def unit(s: int, r: int, c: int) -> float:
    x = math.sin(12.9898 * r + 78.233 * c + 37.719 * s) * 43758.5453
    return x - math.floor(x)


def weight(s: int, r: int, c: int, scale: float) -> float:
    return (2.0 * unit(s, r, c) - 1.0) * scale


# The output head's successor bias: row v also carries SUCCESSOR / d times the embedding of token
# v - 1, so that each token's successor stands out of the other logits by about six of their
# standard deviations: a clear top-1, not one decided by rounding.
SUCCESSOR = 6.0


def head_weight(d: int, vocab: int, v: int, c: int) -> float:
    """The output head's weight at row v, column c (float64, before rounding)."""
    return weight(seed("head", 0), v, c, 1.0 / math.sqrt(d)) + SUCCESSOR / d * weight(
        seed("embedding", 0), (v - 1) % vocab, c, 1.0)


if __name__ == "__main__":
    for kind, layer, r, c, scale in [
        ("embedding", 0, 0, 0, 1.0),
        ("embedding", 0, 31999, 1023, 1.0),
        ("qkv", 3, 5, 7, 1.0 / math.sqrt(1024)),
        ("down", 1, 1023, 2815, 1.0 / math.sqrt(2816)),
        ("head", 0, 123, 456, 1.0 / math.sqrt(1024)),
    ]:
        print(f"({kind!r}, {layer}, {r}, {c}, {scale!r}) -> {weight(seed(kind, layer), r, c, scale)!r}")
