#!/usr/bin/env python3
"""Makes the Triton fixtures of graph-rt's Triton loader (triton-fixtures/<name>/) on a machine with
an NVIDIA GPU, PyTorch and Triton 3.6 (the lent H200 has PyTorch 2.11 and Triton 3.6).

For each fixture it launches the kernel with Triton's own launcher (`kernel[grid](...)`) on fixed
inputs, in an empty Triton cache, and writes into triton-fixtures/<name>/:

  <kernel>.json, .ptx, .cubin, .ttir   what Triton wrote to its cache for the kernel it launched
                                       (for the autotuned matmul: the best config's)
  buffers.bin                          every buffer's bytes before the launch, then after it
  manifest.json                        the runtime arguments in the kernel's parameter order
                                       (buffers by name, scalars with their Triton type and
                                       value), the grid, each buffer's dtype, length and offsets
                                       in buffers.bin, the specialization Triton compiled for
                                       (16-divisible arguments, arguments equal to 1), and the
                                       Triton, PyTorch and device it ran on

Run from anywhere:  python3 triton-fixtures/make.py [--out DIR]
Inputs are seeded: a rerun on the same software gives the same files.
"""

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261130


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="triton-cache-"))
    import os
    os.environ["TRITON_CACHE_DIR"] = str(cache)
    import torch
    import triton
    import triton.language as tl
    kernels = define_kernels(triton, tl)
    made = []
    for fx in fixtures(torch, triton, kernels):
        if args.only and fx["name"] not in args.only:
            continue
        made.append(run_fixture(torch, triton, fx, args.out))
    (args.out / "INDEX.json").write_text(json.dumps(made, indent=1) + "\n")
    write_embed(args.out, made)
    print(f"make.py: {len(made)} fixtures in {args.out}")


def define_kernels(triton, tl):
    k = {}

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)

    @triton.jit
    def scaled_kernel(x_ptr, y_ptr, out_ptr, alpha, beta, n, stride, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs * stride, mask=mask, other=0.0)
        y = tl.load(y_ptr + offs, mask=mask, other=0.0)
        out = alpha * x + beta * y
        out = tl.where(out > 0, out, 0.0)
        tl.store(out_ptr + offs * stride, out, mask=mask)

    @triton.jit
    def row_sum_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            c = start + cols
            acc += tl.load(x_ptr + row * row_stride + c, mask=c < n_cols, other=0.0)
        tl.store(out_ptr + row, tl.sum(acc, axis=0))

    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, BLOCK: tl.constexpr):
        row_start = tl.program_id(0)
        row_step = tl.num_programs(0)
        for row in tl.range(row_start, n_rows, row_step):
            cols = tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
            x = x - tl.max(x, axis=0)
            num = tl.exp(x)
            y = num / tl.sum(num, axis=0)
            tl.store(out_ptr + row * out_row_stride + cols, y, mask=mask)

    @triton.jit
    def layernorm_kernel(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        Y += row * stride
        X += row * stride
        _mean = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
            _mean += a
        mean = tl.sum(_mean, axis=0) / N
        _var = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
            x = tl.where(cols < N, x - mean, 0.)
            _var += x * x
        var = tl.sum(_var, axis=0) / N
        rstd = 1 / tl.sqrt(var + eps)
        tl.store(Mean + row, mean)
        tl.store(Rstd + row, rstd)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            w = tl.load(W + cols, mask=mask)
            b = tl.load(B + cols, mask=mask)
            x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
            y = (x - mean) * rstd * w + b
            tl.store(Y + cols, y.to(Y.dtype.element_ty), mask=mask)

    @triton.autotune(
        configs=[
            triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
            triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=4, num_warps=4),
            triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=4, num_warps=4),
        ],
        key=["M", "N", "K"],
    )
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                      stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        c = acc.to(tl.float16)
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))

    @triton.jit
    def gdc_add1_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.extra.cuda.gdc_wait()
        x = tl.load(x_ptr + offs, mask=mask)
        tl.extra.cuda.gdc_launch_dependents()
        tl.store(y_ptr + offs, x + 1.0, mask=mask)

    @triton.jit
    def scale_bf16_kernel(x_ptr, out_ptr, s, n, flip, BLOCK: tl.constexpr):
        # bf16 in and out (u16 storage), an fp32 scalar and an i1 scalar (Triton passes it as i8).
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
        y = x * s.to(tl.float32)
        y = tl.where(flip, -y, y)
        tl.store(out_ptr + offs, y.to(tl.bfloat16), mask=mask)

    for f in [add_kernel, scaled_kernel, row_sum_kernel, softmax_kernel, layernorm_kernel, matmul_kernel,
              gdc_add1_kernel, scale_bf16_kernel]:
        k[getattr(f, "fn", f).__name__] = f
    return k


def fixtures(torch, triton, k):
    g = torch.Generator().manual_seed(SEED)

    def rand(n, dtype=torch.float32):
        return (torch.rand(n, generator=g) * 2 - 1).to(dtype).cuda()

    def sentinel(n, dtype=torch.float32):
        return torch.full((n,), -7.0, dtype=dtype).cuda()

    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
    rows, cols = 64, 1000
    mm = 256
    yield dict(name="add", kernel=k["add_kernel"], grid=(4, ), bufs=dict(x=rand(4096), y=rand(4096), out=sentinel(4096)),
               args=["x", "y", "out", 4096], constexprs=dict(BLOCK=1024))
    yield dict(name="add_nodiv", kernel=k["add_kernel"], grid=(5, ),
               bufs=dict(x=rand(4100), y=rand(4100), out=sentinel(4100)), args=["x", "y", "out", 4100],
               constexprs=dict(BLOCK=1024))
    # stride == 1: Triton specializes it (a constant of the compiled kernel, not a parameter).
    yield dict(name="scaled_masked", kernel=k["scaled_kernel"], grid=(8, ),
               bufs=dict(x=rand(4000), y=rand(4000), out=sentinel(4000)), args=["x", "y", "out", 1.5, -0.25, 4000, 1],
               constexprs=dict(BLOCK=512))
    yield dict(name="row_sum", kernel=k["row_sum_kernel"], grid=(rows, ),
               bufs=dict(x=rand(rows * cols), out=sentinel(rows)), args=["x", "out", cols, cols],
               constexprs=dict(BLOCK=256))
    yield dict(name="softmax", kernel=k["softmax_kernel"], grid=(32, ),
               bufs=dict(out=sentinel(rows * 781), inp=rand(rows * 781)), args=["out", "inp", 781, 781, rows, 781],
               constexprs=dict(BLOCK=1024), options=dict(num_warps=8))
    yield dict(name="layernorm", kernel=k["layernorm_kernel"], grid=(rows, ),
               bufs=dict(x=rand(rows * cols, f16), y=sentinel(rows * cols, f16), w=rand(cols, f16), b=rand(cols, f16),
                         mean=sentinel(rows), rstd=sentinel(rows)),
               args=["x", "y", "w", "b", "mean", "rstd", cols, cols, 1e-5], constexprs=dict(BLOCK=1024),
               options=dict(num_warps=8))
    yield dict(name="matmul_autotuned", kernel=k["matmul_kernel"],
               grid=lambda META: (triton.cdiv(mm, META["BLOCK_M"]) * triton.cdiv(mm, META["BLOCK_N"]), ),
               bufs=dict(a=rand(mm * mm, f16), b=rand(mm * mm, f16), c=sentinel(mm * mm, f16)),
               args=["a", "b", "c", mm, mm, mm, mm, 1, mm, 1, mm, 1], constexprs={})
    # One config, 96 KiB of shared memory: launched above the 48 KiB default (opt-in).
    yield dict(name="matmul_smem96k", kernel=k["matmul_kernel"].fn, grid=(4, ),
               bufs=dict(a=rand(mm * mm, f16), b=rand(mm * mm, f16), c=sentinel(mm * mm, f16)),
               args=["a", "b", "c", mm, mm, mm, mm, 1, mm, 1, mm, 1],
               constexprs=dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8), options=dict(num_warps=8, num_stages=3))
    yield dict(name="gdc_add1", kernel=k["gdc_add1_kernel"], grid=(4, ), bufs=dict(x=rand(4096), y=sentinel(4096)),
               args=["x", "y", 4096], constexprs=dict(BLOCK=1024), options=dict(launch_pdl=True))
    yield dict(name="add_cluster2", kernel=k["add_kernel"], grid=(4, ),
               bufs=dict(x=rand(4096), y=rand(4096), out=sentinel(4096)), args=["x", "y", "out", 4096],
               constexprs=dict(BLOCK=1024), options=dict(num_ctas=2))
    yield dict(name="scale_bf16", kernel=k["scale_bf16_kernel"], grid=(4, ),
               bufs=dict(x=rand(4096, bf16), out=sentinel(4096, bf16)),
               args=["x", "out", 0.75, 4096, True], constexprs=dict(BLOCK=1024))


def run_fixture(torch, triton, fx, out_root):
    name, kernel, bufs = fx["name"], fx["kernel"], fx["bufs"]
    before = {b: t.clone() for b, t in bufs.items()}
    call = [bufs[a] if isinstance(a, str) else a for a in fx["args"]]
    options = fx.get("options", {})
    compiled = kernel[fx["grid"]](*call, **fx["constexprs"], **options)
    torch.cuda.synchronize()
    if hasattr(kernel, "best_config"):
        # The autotuner benchmarked every config on these buffers: launch the best once more on
        # the fixture's inputs, with Triton's launcher, for the reference.
        for b, t in bufs.items():
            t.copy_(before[b])
        compiled = kernel[fx["grid"]](*call, **fx["constexprs"], **options)
        torch.cuda.synchronize()
    fn = kernel  # the JITFunction (under an autotuner's .fn)
    while not hasattr(fn, "arg_names"):
        fn = fn.fn
    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    files = {}
    for key, path in compiled.metadata_group.items():
        path = Path(path)
        if path.suffix in (".json", ".ptx", ".cubin", ".ttir"):
            shutil.copy(path, out / path.name)
            files[path.suffix[1:]] = path.name
    # The runtime arguments, in the kernel's parameter order (constexprs and arguments Triton
    # specialized as constants are not parameters).
    src = compiled.src
    sig = dict(src.signature)
    names = list(sig)
    constants = {names[i[0]] if isinstance(i, tuple) else i: v for i, v in src.constants.items()}
    attrs = src.attrs if isinstance(src.attrs, dict) else {}
    div16 = [names[i[0]] for i, a in attrs.items() if ["tt.divisibility", 16] in [list(x) for x in a]]
    runtime = []
    py_args = fn.arg_names
    values = dict(zip(py_args, fx["args"]))
    for n in names:
        ty = sig[n]
        if ty == "constexpr":
            continue
        v = values[n]
        if isinstance(v, str):
            runtime.append(dict(name=n, type=ty, buffer=v))
        else:
            runtime.append(dict(name=n, type=ty, value=v))
    equal_to_1 = [n for n in names if n in values and sig[n] == "constexpr" and n in constants
                  and not isinstance(values[n], str) and n not in fx["constexprs"] and values[n] == 1]
    blob = bytearray()
    buffers = {}
    for b, t in bufs.items():
        def raw(x):
            return x.contiguous().view(torch.uint8).cpu().numpy().tobytes()
        pre, post = raw(before[b]), raw(t)
        buffers[b] = dict(dtype=str(t.dtype).replace("torch.", ""), elems=t.numel(), bytes=len(pre),
                          before=len(blob), after=len(blob) + len(pre), written=pre != post)
        blob += pre + post
    (out / "buffers.bin").write_bytes(bytes(blob))
    grid = fx["grid"]
    if callable(grid):
        grid = grid(kernel.best_config.all_kwargs())
    md = compiled.metadata
    manifest = dict(
        name=name, kernel=md.name, files=files, grid=list(grid) + [1] * (3 - len(grid)), args=runtime,
        buffers=buffers, divisible_16=div16, equal_to_1=equal_to_1, constexprs={k: v for k, v in constants.items()
                                                                                  if k in fx["constexprs"]},
        best_config=str(kernel.best_config) if hasattr(kernel, "best_config") else None,
        triton=triton.__version__, torch=torch.__version__, device=torch.cuda.get_device_name())
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{name}: {md.name} grid {manifest['grid']} warps {md.num_warps} ctas {md.num_ctas} shared {md.shared} "
          f"pdl {md.launch_pdl} args {[a['name'] for a in runtime]} div16 {div16} equal_to_1 {equal_to_1} "
          f"files {sorted(files)}")
    return name


def write_embed(out, made):
    """embed.rs: the fixtures as include_bytes!/include_str! for tests and examples."""
    rows = []
    for name in made:
        kernel = json.loads((out / name / "manifest.json").read_text())["kernel"]
        rows.append(f'    triton_fixture!("{name}", "{kernel}"),')
    text = (HERE / "embed.rs").read_text()
    head, _, tail = text.partition("pub const TRITON_FIXTURES: &[TritonFixture] = &[\n")
    tail = tail[tail.index("];"):]
    (out / "embed.rs").write_text(head + "pub const TRITON_FIXTURES: &[TritonFixture] = &[\n" + "\n".join(rows) + "\n" + tail)


if __name__ == "__main__":
    sys.exit(main())
