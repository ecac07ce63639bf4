"""Generation for the decode comparison (`decode_pytorch.py --generate N --prompt L`): PyTorch's
best mode prefilled and generating as graph-rt's example does (the prompt one position at a time,
then N greedy steps fed back on the device, one synchronization at the end), tokens per second,
and graph-rt's generated tokens compared (a divergence is explained only at a top-1 margin within
twice PyTorch's own bf16 error). Imported by decode_pytorch.py; not run on its own."""
import os
import time

import numpy as np
import torch

from decode_pytorch import REPEATS, Decoder, fmt, free, num, ratio, say, tokens

FIXED_E = 0.05  # max|torch bf16 - fp32| taken when the teacher-forced logits did not run
GEN_MODES = {"best": "torch.compile reduce-overhead, caches as buffers",
             "eager": "eager (the best mode here: no torch.compile on CPU or with --no-compile)"}


def gen_inputs(a, B, dev):
    """The generation's device inputs, a tensor each, made before any timing: the prompt's
    tokens tok(p, ·) [B] for p in 0 .. L-1 and the positions [1] for p in 0 .. L+N-2."""
    prompt = [tokens(a, p, B, dev) for p in range(a.prompt)]
    pos = [torch.tensor([p], device=dev) for p in range(a.prompt + a.generate - 1)]
    return prompt, pos


def zero_caches(m):
    for i in range(m.L):
        getattr(m, f"k{i}").zero_()
        getattr(m, f"v{i}").zero_()


def generate_once(step, m, prompt, pos, n, sync):
    """One timed generation from zeroed caches: the prefill (positions 0 .. L-2), then `n` steps
    each fed the argmax of the one before (cloned: cudagraph trees reuse their output memory),
    one synchronization at the end. The tokens ([B] each, on the device), prefill_s, generate_s."""
    L = len(prompt)
    zero_caches(m)
    sync()
    t0 = time.perf_counter()
    for p in range(L - 1):
        step(prompt[p], pos[p])
    sync()
    prefill_s = time.perf_counter() - t0
    out, nxt = [], prompt[L - 1]
    t0 = time.perf_counter()
    for k in range(n):
        nxt = step(nxt, pos[L - 1 + k])[1].clone()
        out.append(nxt)
    sync()
    return out, prefill_s, time.perf_counter() - t0


def replay(step, m, prompt, pos, out):
    """Untimed: the prefill and the generating steps again from zeroed caches, fed the timed
    run's tokens `out`; each step's top-1 margin of its bf16 logits (top - second, as float) and
    its argmax, [N, B] each on the CPU."""
    L = len(prompt)
    zero_caches(m)
    for p in range(L - 1):
        step(prompt[p], pos[p])
    margins, picks = [], []
    for k in range(len(out)):
        logits, nxt = step(prompt[L - 1] if k == 0 else out[k - 1], pos[L - 1 + k])
        top = logits.topk(2, -1).values.float()
        margins.append(top[:, 0] - top[:, 1])
        picks.append(nxt.clone())
    return torch.stack(margins).cpu(), torch.stack(picks).cpu()


def generate_with(a, step, mode, m, prompt, pos, sync):
    """Warm-up (for "best": compilation and cudagraph recording), REPEATS timed generations (the
    fastest kept), the margins pass. (metrics, tokens [N, B] int64 CPU, margins [N, B] CPU)."""
    t0 = time.perf_counter()
    for _ in range(5):
        step(prompt[0], pos[0])
    sync()
    r = {"mode": mode, "warmup_s": time.perf_counter() - t0}
    runs = [generate_once(step, m, prompt, pos, a.generate, sync) for _ in range(REPEATS)]
    toks = [torch.stack(out).cpu() for out, _, _ in runs]
    r["prefill_runs_s"] = [pf for _, pf, _ in runs]
    r["generate_runs_s"] = [g for _, _, g in runs]
    r["prefill_s"], r["generate_s"] = min(r["prefill_runs_s"]), min(r["generate_runs_s"])
    r["repeats_identical"] = all(bool((t == toks[0]).all()) for t in toks)
    margins, picks = replay(step, m, prompt, pos, runs[0][0])
    r["replay_same"] = (picks == toks[0]).float().mean().item()
    return r, toks[0], margins, runs[0][0]


def generate_batch(a, w, B, dev, failures):
    """Generation at batch B with PyTorch's best mode (eager when it is not available or fails
    to compile); the metrics, the tokens [N, B] and the margins [N, B] (CPU)."""
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    m = Decoder(a, w, torch.bfloat16, B)
    prompt, pos = gen_inputs(a, B, dev)
    res, err = None, None
    if cuda and not a.no_compile:
        try:
            cm = torch.compile(m, mode="reduce-overhead", fullgraph=True)
            res = generate_with(a, cm, "best", m, prompt, pos, sync)
        except Exception as e:  # noqa: BLE001 - recorded, generation goes on eagerly
            err = f"{type(e).__name__}: {e}"
            failures.append(f"B={B}: generation's torch.compile failed: {err}")
            say(f"B={B}: generation's torch.compile FAILED ({err}): generating eagerly")
            torch._dynamo.reset()
    if res is None:
        res = generate_with(a, m, "eager", m, prompt, pos, sync)
    r, toks, margins, out = res
    if err:
        r["compile_error"] = err
    n = a.generate
    r.update(prompt=a.prompt, tokens=n, tokens_per_s=n / r["generate_s"], batch_tokens_per_s=n * B / r["generate_s"],
             margin_min=margins.min().item(), margin_median=margins.median().item())
    if r["mode"] == "best":  # the eager bf16 model over the same tokens: its picks and margins
        em, ep = replay(m, m, prompt, pos, out)
        r["eager_agree"] = (ep == toks).float().mean().item()
        r["eager_margin_min"] = em.min().item()
    r["generated"] = toks.tolist()
    say(f"B={B}: generation, {GEN_MODES[r['mode']]}: warm-up {r['warmup_s']:.1f} s; prefill of {a.prompt - 1} "
        f"steps {r['prefill_s'] * 1e3:.1f} ms; {n} tokens in {r['generate_s'] * 1e3:.1f} ms (fastest of "
        f"{REPEATS}), {r['tokens_per_s']:.0f} tokens/s a sequence ({r['batch_tokens_per_s']:.0f} over the batch)")
    extra = f"; eager picks the same at {fmt(r['eager_agree'], '.4f')} of the steps" if "eager_agree" in r else ""
    say(f"B={B}: generation top-1 margin min {fmt(r['margin_min'], '.4f')} median {fmt(r['margin_median'], '.4f')}; "
        f"repeats identical {r['repeats_identical']}; the margins pass picks the same "
        f"{fmt(r['replay_same'], '.4f')}{extra}")
    del m, prompt, pos, out, res
    torch._dynamo.reset()
    free()
    return r, toks, margins


def read_generated(path, n, B):
    """graph-rt's generated tokens as int64 [n, B], or an error string."""
    if not os.path.exists(path):
        return f"missing {path}"
    size = os.path.getsize(path)
    if size != 4 * n * B:
        return f"{path}: {size} bytes, expected N {n} x B {B} int32 values = {4 * n * B}"
    return torch.from_numpy(np.fromfile(path, dtype="<i4").reshape(n, B).astype(np.int64))


def compare_generation(mine, margins, theirs, threshold):
    """Per row, the first step where PyTorch's tokens `mine` and graph-rt's `theirs` differ, and
    whether PyTorch's top-1 margin there is within `threshold` (explained)."""
    rows = []
    for b in range(mine.shape[1]):
        diff = (mine[:, b] != theirs[:, b]).nonzero().flatten()
        if len(diff) == 0:
            rows.append({"row": b, "first_diff": None})
            continue
        k = int(diff[0])
        mg = margins[k, b].item()
        rows.append({"row": b, "first_diff": k, "torch": int(mine[k, b]), "graph_rt": int(theirs[k, b]),
                     "margin": mg, "explained": mg <= threshold})
    c = {"rows": rows, "threshold": threshold, "same_tokens": (mine == theirs).float().mean().item(),
         "identical": sum(r["first_diff"] is None for r in rows),
         "explained": sum(r.get("explained") is True for r in rows),
         "unexplained": sum(r.get("explained") is False for r in rows),
         "close_steps": int((margins <= threshold).sum())}
    c["pass"] = c["unexplained"] == 0
    return c


def report_generation(a, gen, logits, gr_json):
    """The generation's table and comparison; (verdict text, the JSON part)."""
    gr_gen = gr_json.get("generation") if isinstance(gr_json, dict) else None
    gr_gen = gr_gen if isinstance(gr_gen, dict) else {}
    if a.graph_rt and not gr_gen:
        say("generation: graph-rt.json has no \"generation\" (graph-rt's tokens/s are not in the table)")
    say("generation: batch | graph-rt tokens/s | PyTorch best tokens/s | ratio (graph-rt / PyTorch) "
        "| graph-rt prefill ms | PyTorch prefill ms")
    ratios = {}
    for B in a.batch_list:
        r = gen[B][0]
        gb = gr_gen.get(str(B)) if isinstance(gr_gen.get(str(B)), dict) else {}
        g_tps, g_pf = num(gb.get("tokens_per_s")), num(gb.get("prefill_s"))
        ratios[B] = g_tps / r["tokens_per_s"] if g_tps is not None else None
        label = "" if r["mode"] == "best" else " (eager)"
        say(f"generation: {B:5d} | {fmt(g_tps, '.0f'):>17} | {fmt(r['tokens_per_s'], '.0f') + label:>21} | "
            f"{fmt(ratios[B], '.3f'):>27} | {fmt(g_pf * 1e3 if g_pf is not None else None):>19} | "
            f"{fmt(r['prefill_s'] * 1e3):>18}")
    if ratios.get(1) is not None:
        vs = "the compiled best" if gen[1][0]["mode"] == "best" else "eager PyTorch, not the compiled best"
        say(f"generation: batch 1 graph-rt / PyTorch = {ratios[1]:.3f} against {vs} "
            f"(acceptance >= 1.25: {'met' if ratios[1] >= 1.25 else 'NOT met'})")
    part = {"prompt": a.prompt, "tokens": a.generate, "batches": {str(B): gen[B][0] for B in a.batch_list},
            "graph_rt": gr_gen or None, "ratio_graph_rt_over_torch": {str(B): v for B, v in ratios.items()},
            "compare": {}}
    if not a.graph_rt:
        return "not compared (no --graph-rt DIR)", part
    verdict = True
    for B in a.batch_list:
        _, mine, margins = gen[B]
        if B in logits:
            e, src = max(logits[B]["e_torch"]), "max |torch bf16 - fp32| of the teacher-forced logits"
        else:
            e, src = FIXED_E, f"a fixed {FIXED_E} for max |torch bf16 - fp32| (the teacher-forced logits were skipped)"
        threshold = 2 * e
        problems = []
        gb = gr_gen.get(str(B)) if isinstance(gr_gen.get(str(B)), dict) else {}
        for key, want in (("prompt", a.prompt), ("tokens", a.generate)):
            if num(gb.get(key)) is not None and gb[key] != want:
                problems.append(f"graph-rt.json says {key} {gb[key]}, this run {want}")
        theirs = read_generated(os.path.join(a.graph_rt, f"generated-b{B}.bin"), a.generate, B)
        if isinstance(theirs, str):
            problems.append(theirs)
            c = {}
        else:
            c = compare_generation(mine, margins, theirs, threshold)
        c.update(e_torch_max=e, e_source=src, threshold=threshold)
        if problems:
            c.update(error="; ".join(problems), **{"pass": False})
        part["compare"][str(B)] = c
        verdict = verdict and c["pass"]
        if problems:
            say(f"generation B={B}: FAIL: {c['error']}")
            continue
        divs = [r for r in c["rows"] if r["first_diff"] is not None]
        shown = "; ".join(f"row {r['row']} at step {r['first_diff']} (torch {r['torch']}, graph-rt {r['graph_rt']}, "
                          f"margin {r['margin']:.4f}: {'explained' if r['explained'] else 'UNEXPLAINED'})"
                          for r in divs[:4]) + ("; …" if len(divs) > 4 else "")
        say(f"generation B={B}: {c['identical']} of {B} rows identical to the end, {c['explained']} diverging "
            f"explained, {c['unexplained']} unexplained; same tokens {fmt(c['same_tokens'], '.4f')}; "
            f"threshold 2 x {e:.4f} = {threshold:.4f} ({src}); {c['close_steps']} of {a.generate * B} steps "
            f"x rows have a margin within it: {'PASS' if c['pass'] else 'FAIL'}" + (f"; {shown}" if shown else ""))
    return ("PASS" if verdict else "FAIL"), part
