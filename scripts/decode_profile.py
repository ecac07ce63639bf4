#!/usr/bin/env python3
"""Where PyTorch's best decode step spends its GPU time: the model of decode_pytorch.py under
torch.compile(mode="reduce-overhead", fullgraph=True), warmed up, then STEPS steps at positions
from --position on, each fed the argmax of the one before (as generation does), under
torch.profiler; prints each kernel's name, calls a step and mean µs, and the GPU time of a step.
A diagnostic for the decode comparison (graph-rt's side: ncu over examples/decode).

    python3 scripts/decode_profile.py --batches 1 --position 256
"""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_pytorch import Decoder, build_weights, check_config, parse_args, say, tokens  # noqa: E402

STEPS = 20


def main(argv=None):
    a = parse_args(argv)
    problem = check_config(a)
    if problem:
        print(f"decode_profile: bad configuration: {problem}", file=sys.stderr)
        return 2
    dev = torch.device(a.device)
    with torch.no_grad():
        w = build_weights(a, dev)
        for B in a.batch_list:
            m = Decoder(a, w, torch.bfloat16, B)
            cm = torch.compile(m, mode="reduce-overhead", fullgraph=True)
            pos = [torch.tensor([a.position + k], device=dev) for k in range(STEPS + 5)]
            tok = tokens(a, a.position, B, dev)
            for k in range(5):
                tok = cm(tok, pos[k])[1].clone()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for k in range(STEPS):
                    tok = cm(tok, pos[5 + k])[1].clone()
                torch.cuda.synchronize()
            rows, total = [], 0.0
            for e in prof.key_averages():
                t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
                if t <= 0 or e.count < STEPS:
                    continue
                rows.append((t / STEPS, e.count / STEPS, e.key))
                total += t / STEPS
            rows.sort(reverse=True)
            say(f"profile B={B}: {len(rows)} kernels, GPU time a step {total:.1f} us (kernels' sum)")
            for us, calls, name in rows:
                say(f"profile B={B}: {us:8.2f} us  x{calls:5.2f}  {name[:150]}")
            del m, cm
            torch._dynamo.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
