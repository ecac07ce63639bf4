#!/usr/bin/env python3
"""Random decode configurations nobody tuned for: one line of the decode example's flags each
(`--layers --d --heads --kv-heads --mlp --vocab --max-len --position --batches`), every one
valid under the example's checks (`graph_rt_dev::decode::DecodeConfig::check`, mirrored by
`decode_pytorch.py`'s `check_config`) and small enough to build its weights in seconds.

    python3 scripts/decode_configs.py --count 6 --seed 17 [--steps 8]

What is drawn: head widths even from 8 to 256 (multiples of 8 or not), 1 to 32 heads, d = heads
x head width within 256 .. 4096, kv-heads any divisor of heads (multi-query to full), 1 to 6
layers, the MLP width (16 .. 4 d) and vocabulary (2 .. 65535) any whole number, odd ones
included (the example's own matrix-vector kernels need K % 8 == 0 and shared memory to fit,
cuBLAS takes the rest), the cache 16 .. 8192 positions with the step's position anywhere in its
first 1024, three batch sizes (one of 1 .. 8, where the example's own kernels apply, one of
9 .. 64, one of 1 .. 300). The first configuration always has the extremes: head width 256 with
one kv-head, and an odd vocabulary. Parameters are capped at about 400 M (the weights are made
on the host). The same --seed gives the same lines.
"""
import argparse
import random
import sys

MAX_PARAMS = 400e6
# Both sides feed every position from 0 (PyTorch eagerly, twice): the position stays below this.
MAX_POSITION = 1024


def params(c):
    # Per layer: QKV, O (d x d), up (2 mlp x d), down, two norms; then embedding, head, norm.
    d, hd = c["d"], c["d"] // c["heads"]
    layer = d * (c["heads"] + 2 * c["kv_heads"]) * hd + d * d + 3 * d * c["mlp"] + 2 * d
    return c["layers"] * layer + 2 * c["vocab"] * d + d


def draw(rng, steps, extreme=False):
    while True:
        if extreme:
            hd = 256
            heads = rng.choice([1, 2, 4, 8, 16])
        else:
            hd = rng.choice([rng.randrange(8, 257, 2), 8 * rng.randrange(1, 33)])
            heads = rng.randrange(1, 33)
        d = heads * hd
        if not 256 <= d <= 4096:
            continue
        divisors = [k for k in range(1, heads + 1) if heads % k == 0]
        kv = 1 if extreme else rng.choice(divisors)
        mlp = rng.randrange(16, 4 * d + 1)
        vocab = rng.randrange(2, 65536)
        if extreme and vocab % 2 == 0:
            vocab += 1
        max_len = rng.randrange(max(16, steps), 8193)
        position = rng.randrange(0, min(max_len - steps, MAX_POSITION) + 1)
        batches = sorted({rng.randrange(1, 9), rng.randrange(9, 65), rng.randrange(1, 301)})
        layers = rng.randrange(1, 7)
        c = dict(layers=layers, d=d, heads=heads, kv_heads=kv, mlp=mlp, vocab=vocab,
                 max_len=max_len, position=position, batches=batches)
        while c["layers"] > 1 and params(c) > MAX_PARAMS:
            c["layers"] -= 1
        if params(c) <= MAX_PARAMS:
            return c


def flags(c):
    return (f"--layers {c['layers']} --d {c['d']} --heads {c['heads']} --kv-heads {c['kv_heads']} "
            f"--mlp {c['mlp']} --vocab {c['vocab']} --max-len {c['max_len']} --position {c['position']} "
            f"--batches {','.join(map(str, c['batches']))}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=8, help="the steps each run keeps logits of")
    a = ap.parse_args(argv)
    if a.count < 1 or a.steps < 1 or a.steps > 16:
        print("decode_configs.py: --count at least 1, --steps 1 to 16", file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    for i in range(a.count):
        print(flags(draw(rng, a.steps, extreme=(i == 0))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
