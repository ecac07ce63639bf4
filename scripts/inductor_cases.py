#!/usr/bin/env python3
"""Records real torch.compile (Inductor) Triton kernels as test cases for graph-rt's Triton loader
and PTX pass: kernels graph-rt has never seen, each with the bytes Triton's own launch gave.

    python3 scripts/inductor_cases.py OUT_DIR [--only MODEL ...] [--max-cases N] [--config KEY=VALUE ...]

Needs an NVIDIA GPU, PyTorch and Triton (the lent H200: PyTorch 2.11, Triton 3.6). It compiles a
set of small models with torch.compile in empty Inductor and Triton caches, with Inductor's static
launcher off so that every kernel goes through Triton's own launcher, and hooks that launcher: the
first launch of each compiled kernel is recorded — every argument in the kernel's parameter order,
the grid, and the bytes of every tensor storage the kernel is given, before the launch and after
it. The kernel is then launched a second time from the same inputs: when the two launches do not
give the same bytes (atomics), the case says `"deterministic": false`.

Each case is a folder in the format of triton-fixtures/ (see triton-fixtures/make.py), so that the
same checks run on both: <kernel>.json/.ptx/.cubin/.ttir (Triton's cache files), buffers.bin and
manifest.json. A buffer is a whole storage; an argument names its buffer and the byte offset of
its pointer in it (arguments that share a storage name one buffer). OUT_DIR also gets INDEX.json
(the cases), models.json (each model: compiled or the error, cases recorded) and skipped.json
(launches not recorded, with the reason). Inputs are seeded. `--config` sets Inductor options for
every model (`torch._inductor.config`, values as Python literals), e.g.
`--config coordinate_descent_tuning=True max_autotune_pointwise=True`: other kernels again.

graph-rt's GPU test `triton_cases_from_a_folder_give_tritons_bytes_in_every_form` runs the cases
(GRAPH_RT_TRITON_CASES=OUT_DIR); run.sh's `inductor` part runs both.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

SEED = 20261203
MAX_CASE_BYTES = 64 << 20
SIMPLE_TYPES = {"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64", "fp16", "bf16", "fp32", "fp64"}


class Recorder:
    """Hooks Triton's launcher; records the first launch of every compiled kernel."""

    def __init__(self, torch, out, max_cases, per_name):
        self.torch, self.out, self.max_cases, self.per_name = torch, out, max_cases, per_name
        self.by_function = {}
        self.seen = set()
        self.names = {}
        self.cases, self.skipped = [], []
        self.features = {}
        self.model = None

    def install(self):
        from triton.backends.nvidia.driver import CudaLauncher
        from triton.compiler.compiler import CompiledKernel
        init, call, rec = CompiledKernel._init_handles, CudaLauncher.__call__, self

        def init_handles(kernel):
            init(kernel)
            if kernel.function is not None:
                rec.by_function[kernel.function] = kernel

        def launch(launcher, gx, gy, gz, stream, function, *args):
            def again():
                call(launcher, gx, gy, gz, stream, function, *args)
            pending = rec.before(function, (gx, gy, gz), args)
            again()
            if pending is not None:
                rec.after(pending, again)

        CompiledKernel._init_handles = init_handles
        CudaLauncher.__call__ = launch

    def skip(self, kernel, why):
        self.skipped.append(dict(model=self.model, kernel=kernel, why=why))

    def before(self, function, grid, args):
        torch = self.torch
        kernel = self.by_function.get(function)
        if kernel is None:
            return None
        if kernel.hash in self.seen:
            return None
        self.seen.add(kernel.hash)
        name = kernel.name
        if len(self.cases) >= self.max_cases:
            return self.skip(name, f"more than {self.max_cases} cases")
        if self.names.get(name, 0) >= self.per_name:
            return self.skip(name, f"more than {self.per_name} compiled variants of one kernel name")
        if torch.cuda.is_current_stream_capturing():
            return self.skip(name, "launched while a stream captures")
        sig = list(kernel.src.signature.items())
        kargs = args[4:]  # after packed metadata, launch metadata, enter and exit hooks
        if len(kargs) != len(sig):
            return self.skip(name, f"{len(kargs)} arguments for a signature of {len(sig)}")
        storages, runtime = {}, []
        for (pname, ty), v in zip(sig, kargs):
            if ty == "constexpr":
                continue
            if not isinstance(ty, str) or not (ty.startswith("*") or ty in SIMPLE_TYPES):
                return self.skip(name, f"parameter {pname} of type {ty!r}")
            if ty.startswith("*"):
                if v is None or not hasattr(v, "untyped_storage"):
                    return self.skip(name, f"pointer parameter {pname} given {type(v).__name__}")
                st = v.untyped_storage()
                base = st.data_ptr()
                if base not in storages:
                    storages[base] = dict(name=f"b{len(storages)}", storage=st, dtype=str(v.dtype).replace("torch.", ""))
                runtime.append(dict(name=pname, type=ty, buffer=storages[base]["name"], offset=v.data_ptr() - base))
            else:
                if hasattr(v, "item"):
                    v = v.item()
                if isinstance(v, bool) or ty in ("i1", "u1"):
                    v = bool(v)
                runtime.append(dict(name=pname, type=ty, value=v))
        total = sum(s["storage"].nbytes() for s in storages.values())
        if total > MAX_CASE_BYTES:
            return self.skip(name, f"{total} bytes of buffers (at most {MAX_CASE_BYTES})")
        torch.cuda.synchronize()
        pre = {b: self.read(s["storage"]) for b, s in storages.items()}
        return dict(kernel=kernel, grid=grid, storages=storages, runtime=runtime, pre=pre)

    def read(self, storage):
        torch = self.torch
        n = storage.nbytes()
        if n == 0:
            return b""
        t = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (n,), (1,))
        return t.cpu().numpy().tobytes()

    def write(self, storage, data):
        torch = self.torch
        if not data:
            return
        t = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (len(data),), (1,))
        t.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))

    def after(self, p, again):
        torch = self.torch
        torch.cuda.synchronize()
        post = {b: self.read(s["storage"]) for b, s in p["storages"].items()}
        # Launch once more from the same inputs: the same bytes, or the kernel is not deterministic.
        for b, s in p["storages"].items():
            self.write(s["storage"], p["pre"][b])
        again()
        torch.cuda.synchronize()
        deterministic = all(self.read(s["storage"]) == post[b] for b, s in p["storages"].items())
        self.save(p, post, deterministic)

    def save(self, p, post, deterministic):
        torch, kernel = self.torch, p["kernel"]
        import triton
        md = kernel.metadata
        name = md.name
        self.names[name] = self.names.get(name, 0) + 1
        case = f"{len(self.cases):03d}-{name}"[:96]
        out = self.out / case
        out.mkdir(parents=True)
        files = {}
        for path in map(Path, kernel.metadata_group.values()):
            if path.suffix in (".json", ".ptx", ".cubin", ".ttir") and path.exists():
                shutil.copy(path, out / path.name)
                files[path.suffix[1:]] = path.name
        blob, buffers = bytearray(), {}
        for base, s in p["storages"].items():
            b, pre, after = s["name"], p["pre"][base], post[base]
            buffers[b] = dict(dtype=s["dtype"], elems=len(pre), bytes=len(pre), before=len(blob),
                              after=len(blob) + len(pre), written=pre != after)
            blob += pre + after
        (out / "buffers.bin").write_bytes(bytes(blob))
        src = kernel.src
        names = list(src.signature)
        attrs = src.attrs if isinstance(getattr(src, "attrs", None), dict) else {}
        div16 = []
        for i, a in attrs.items():
            idx = i[0] if isinstance(i, tuple) else i
            if ["tt.divisibility", 16] in [list(x) for x in a] and isinstance(idx, int) and idx < len(names):
                div16.append(names[idx])
        constants = {}
        for k, v in getattr(src, "constants", {}).items():
            key = names[k[0]] if isinstance(k, tuple) and isinstance(k[0], int) and k[0] < len(names) else str(k)
            if isinstance(v, (int, float, bool, str)) or v is None:
                constants[key] = v
        manifest = dict(
            name=case, kernel=name, files=files, grid=list(p["grid"]), args=p["runtime"], buffers=buffers,
            divisible_16=div16, equal_to_1=[], constexprs=constants, best_config=None, model=self.model,
            deterministic=deterministic, num_warps=md.num_warps, num_ctas=md.num_ctas, shared=md.shared,
            launch_pdl=getattr(md, "launch_pdl", False),
            cooperative=getattr(md, "launch_cooperative_grid", False),
            global_scratch=getattr(md, "global_scratch_size", 0), triton=triton.__version__, torch=torch.__version__,
            device=torch.cuda.get_device_name())
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        self.cases.append(case)
        for feature, on in (("PDL", manifest["launch_pdl"]), ("cooperative", manifest["cooperative"]),
                            ("global scratch", manifest["global_scratch"] > 0), ("clusters", md.num_ctas > 1),
                            ("over 48 KiB of shared memory", md.shared > 48 << 10), ("not deterministic", not deterministic),
                            ("2-D or 3-D grid", p["grid"][1] * p["grid"][2] > 1)):
            if on:
                self.features[feature] = self.features.get(feature, 0) + 1
        print(f"case {case}: {self.model} grid {manifest['grid']} warps {md.num_warps} shared {md.shared} "
              f"{len(p['runtime'])} args, {len(buffers)} buffers, {len(blob) // 2} bytes"
              f"{'' if deterministic else ', not deterministic'}", flush=True)


def models(torch):
    """(name, function, inputs, torch.compile options, a second set of inputs or None)."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(SEED)
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16

    def rn(*shape, dtype=f32):
        return torch.randn(*shape, generator=g).to(dtype).cuda()

    def ri(hi, *shape, dtype=torch.int64):
        return torch.randint(0, hi, shape, generator=g).to(dtype).cuda()

    yield "pointwise", lambda x, y, z: torch.sin(x) * y + torch.relu(z) - x.exp().clamp(max=3), \
        (rn(1000, 333), rn(1000, 333), rn(333)), {}, None
    yield "gelu_bf16", lambda x, y: (F.gelu(x, approximate="tanh") * y.float()).to(bf16), \
        (rn(517, 768, dtype=bf16), rn(517, 768, dtype=bf16)), {}, None
    yield "layer_norm_f16", lambda x, w, b: F.layer_norm(x, (777,), w, b, 1e-5), \
        (rn(96, 777, dtype=f16), rn(777, dtype=f16), rn(777, dtype=f16)), {}, None
    yield "rms_norm_residual", lambda x, r, w: (lambda h: h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w)(x + r), \
        (rn(64, 4096), rn(64, 4096), rn(4096)), {}, None
    yield "softmax_rows", lambda x: F.softmax(x, dim=-1), (rn(128, 1000),), {}, None
    yield "softmax_long_rows", lambda x: F.softmax(x * 0.5, dim=-1), (rn(8, 50000),), {}, None
    yield "cross_entropy", lambda x, t: F.cross_entropy(x, t), (rn(64, 32000), ri(32000, 64)), {}, None
    yield "max_argmax", lambda x: (x.max(dim=1), torch.argmax(x, dim=0)), (rn(256, 1000),), {}, None
    yield "cumsum", lambda x: torch.cumsum(x, dim=1) + torch.cumprod(x[:, :64] * 0.1 + 1, dim=1).sum(), \
        (rn(64, 1000),), {}, None
    yield "permute_4d", lambda x: x.permute(0, 2, 1, 3).contiguous() * 2 + 1, (rn(4, 64, 12, 65),), {}, None
    yield "transpose_2d", lambda x, y: x.t() @ y + x.t().contiguous().sum(), (rn(333, 250), rn(333, 17)), {}, None
    yield "strided_slices", lambda x: x[:, ::3] + x[:, 1::3] * x[:, 2::3], (rn(300, 999),), {}, None
    yield "embedding", lambda i, w, p: F.embedding(i, w) * 0.125 + p, (ri(5000, 4, 77), rn(5000, 96), rn(77, 96)), {}, None
    yield "where_mask", lambda x, y, m: torch.where(m & (x > 0), x, y * 0.1), \
        (rn(1024, 129), rn(1024, 129), torch.rand(1024, 129, generator=g).cuda() > 0.3), {}, None
    yield "index_add", lambda o, i, s: o.index_add(0, i, s), (rn(100, 64), ri(100, 5000), rn(5000, 64)), {}, None
    yield "dropout", lambda x: F.dropout(x, 0.3, training=True) + 1, (rn(4096, 33),), {}, None
    yield "pools", lambda x: F.avg_pool2d(x, 3, 2, 1) + F.max_pool2d(x, 3, 2, 1), (rn(2, 8, 33, 33),), {}, None
    yield "sort_topk", lambda x, y: (torch.sort(x, dim=-1).values, torch.topk(y, 5).values), \
        (rn(32, 64), rn(16, 1000)), {}, None
    yield "var_mean_columns", lambda x: torch.var_mean(x, dim=0), (rn(1000, 257),), {}, None
    yield "fp8_round_trip", lambda x: x.to(torch.float8_e4m3fn).to(f32) * 2, (rn(2048, 65),), {}, None
    yield "integer_ops", lambda a, b: ((a // 7 + a % 5) ^ b, (a.to(torch.int64) * 3) >> 1), \
        (ri(1 << 20, 1000, 31, dtype=torch.int32), ri(1 << 20, 1000, 31, dtype=torch.int32)), {}, None
    yield "dynamic_shapes", lambda x, w: F.silu(x) * w + x.mean(-1, keepdim=True), \
        (rn(37, 512), rn(512)), dict(dynamic=True), (rn(91, 512), rn(512))
    mm = dict(mode="max-autotune-no-cudagraphs")
    yield "mm_bias_relu", lambda a, b, c: torch.relu(a @ b + c), \
        (rn(256, 512, dtype=f16), rn(512, 384, dtype=f16), rn(384, dtype=f16)), mm, None
    yield "bmm", lambda a, b: torch.bmm(a, b) * 0.5, (rn(8, 64, 128, dtype=bf16), rn(8, 128, 96, dtype=bf16)), mm, None

    def flex_mask():
        from torch.nn.attention.flex_attention import create_block_mask
        return create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, 256, 256)

    def flex(q, k, v, mask):
        from torch.nn.attention.flex_attention import flex_attention
        return flex_attention(q, k, v, block_mask=mask)
    try:
        yield "flex_attention", flex, (*(rn(1, 4, 256, 64, dtype=f16) for _ in range(3)), flex_mask()), {}, None
    except Exception as e:  # no flex attention in this PyTorch: reported as a model that failed
        err = RuntimeError(f"flex attention's block mask: {type(e).__name__}: {e}")

        def failing():
            raise err
        yield "flex_attention", failing, (), {}, None

    def block(x, wq, wk, wv, wo, w1, w2, w3, g1, g2, cos, sin):
        def rms(h, w):
            return h * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(h.dtype) * w

        def rope(t):
            a, b = t[..., ::2], t[..., 1::2]
            return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)
        b_, s_, d_ = x.shape
        h = rms(x, g1)
        q, k, v = (t.view(b_, s_, 4, d_ // 4).transpose(1, 2) for t in (h @ wq, h @ wk, h @ wv))
        a = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(b_, s_, d_) @ wo
        h = rms(x, g2)
        return x + (F.silu(h @ w1) * (h @ w3)) @ w2
    d, s = 256, 48
    yield "transformer_block_bf16", block, (rn(2, s, d, dtype=bf16), *(rn(d, d, dtype=bf16) * 0.05 for _ in range(4)),
                                            rn(d, 688, dtype=bf16) * 0.05, rn(688, d, dtype=bf16) * 0.05,
                                            rn(d, 688, dtype=bf16) * 0.05, rn(d, dtype=bf16), rn(d, dtype=bf16),
                                            rn(s, 32, dtype=bf16), rn(s, 32, dtype=bf16)), {}, None

    # Inductor's less common code paths, each switched on by its configuration (the third field
    # may carry "config": options for torch._inductor.config.patch).
    yield "math_functions", lambda x, y: (torch.erfinv(x.clamp(-0.9, 0.9)) + torch.pow(y.abs(), 2.7)
                                          + torch.lgamma(y.abs() + 1) + torch.atan2(x, y) + torch.log1p(y.abs())), \
        (rn(777, 129), rn(777, 129)), {}, None
    yield "scatter_amax_bucketize", lambda x, i, b: (torch.zeros(64, 32, device=x.device).scatter_reduce(0, i, x, "amax"),
                                                     torch.bucketize(x, b)), \
        (rn(1000, 32), ri(64, 1000, 32), torch.linspace(-2, 2, 17).cuda()), {}, None
    yield "cooperative_reduction", lambda x: x.sum(-1) + x.amax(-1), (rn(4, 200000),), \
        dict(config={"triton.cooperative_reductions": True, "triton.force_cooperative_reductions": True}), None
    yield "multi_kernel", lambda x: F.softmax(x, -1) * x.sum(-1, keepdim=True), (rn(64, 3000),), \
        dict(config={"triton.multi_kernel": 1}), None
    yield "combo_kernels", lambda a, b, c: (a.sin() + 1, b.cos() * 2, c.sum(0)), (rn(333, 65), rn(1000), rn(100, 77)), \
        dict(config={"combo_kernels": True}), None
    yield "pdl", lambda x, w: F.layer_norm(torch.relu(x) * 2, (512,), w) + 1, (rn(300, 512), rn(512)), \
        dict(config={"triton.enable_pdl": True}), None
    yield "tensor_descriptor", lambda x, y: (x * y + 1).sum(-1), (rn(256, 512), rn(256, 512)), \
        dict(config={"triton.use_tensor_descriptor": True}), None
    yield "persistent_tma_mm", lambda a, b: (a @ b).relu(), (rn(512, 768, dtype=f16), rn(768, 1024, dtype=f16)), \
        dict(mode="max-autotune-no-cudagraphs", config={"triton.enable_persistent_tma_matmul": True,
                                                        "max_autotune_gemm_backends": "TRITON"}), None
    yield "conv_template", lambda x, w: F.conv2d(x, w, padding=1).relu(), \
        (rn(2, 16, 32, 32, dtype=f16), rn(32, 16, 3, 3, dtype=f16)), \
        dict(mode="max-autotune-no-cudagraphs", config={"max_autotune_conv_backends": "TRITON"}), None
    yield "split_k_mm", lambda a, b: a @ b, (rn(32, 16384, dtype=bf16), rn(16384, 32, dtype=bf16)), \
        dict(mode="max-autotune-no-cudagraphs", config={"max_autotune_gemm_backends": "TRITON"}), None

    def layer_norm_backward(x, w, b):
        x = x.detach().requires_grad_()
        y = F.layer_norm(x, (x.shape[-1],), w, b)
        (y * y).sum().backward()
        return x.grad
    yield "layer_norm_backward_mix_order", layer_norm_backward, \
        (rn(2048, 256), rn(256).requires_grad_(), rn(256).requires_grad_()), \
        dict(config={"triton.mix_order_reduction": True}), None

    try:
        import triton
        import triton.language as tl

        @triton.jit
        def user_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 3 + 1, mask=m)

        def with_user_kernel(x):
            y = torch.empty_like(x)
            user_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
            return y.relu() + x
        yield "user_triton_kernel", with_user_kernel, (rn(10000),), {}, None
    except ImportError:
        pass

    lin1, lin2 = torch.nn.Linear(256, 512).cuda(), torch.nn.Linear(512, 256).cuda()

    def train_step(x, y):
        loss = (lin2(F.gelu(lin1(x))) - y).pow(2).mean()
        loss.backward()
        return loss
    yield "mlp_backward", train_step, (rn(64, 256), rn(64, 256)), {}, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--max-cases", type=int, default=300)
    ap.add_argument("--per-name", type=int, default=6)
    ap.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    import ast
    overall = {}
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--config {item}: KEY=VALUE")
        try:
            overall[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overall[key] = value
    tmp = Path(tempfile.mkdtemp(prefix="inductor-cases-"))
    try:
        os.environ["TRITON_CACHE_DIR"] = str(tmp / "triton")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor")
        os.environ["TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER"] = "0"
        os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
        import torch
        torch._inductor.config.use_static_cuda_launcher = False
        torch._inductor.config.max_autotune_gemm_backends = "TRITON,ATEN"
        torch.manual_seed(SEED)
        if args.out.exists():
            shutil.rmtree(args.out)
        args.out.mkdir(parents=True)
        rec = Recorder(torch, args.out, args.max_cases, args.per_name)
        rec.install()
        report = []
        for name, fn, inputs, options, second in models(torch):
            if args.only and name not in args.only:
                continue
            rec.model, before = name, len(rec.cases)
            try:
                torch._dynamo.reset()
                options = dict(options)
                config = {**overall, **options.pop("config", {})}
                with torch._inductor.config.patch(config):
                    compiled = torch.compile(fn, **options)
                    compiled(*inputs)
                    if second is not None:
                        compiled(*second)
                torch.cuda.synchronize()
                report.append(dict(model=name, ok=True, cases=len(rec.cases) - before))
            except Exception as e:  # a model that does not compile here is reported, not fatal
                traceback.print_exc()
                report.append(dict(model=name, ok=False, error=f"{type(e).__name__}: {e}"[:2000],
                                   cases=len(rec.cases) - before))
            print(f"model {name}: {report[-1]}", flush=True)
        (args.out / "INDEX.json").write_text(json.dumps(rec.cases, indent=1) + "\n")
        (args.out / "models.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / "skipped.json").write_text(json.dumps(rec.skipped, indent=1) + "\n")
        failed = [r["model"] for r in report if not r["ok"]]
        if overall:
            print(f"inductor_cases.py: every model compiled with {overall}")
        print("inductor_cases.py: kernels with " + ", ".join(f"{k} {v}" for k, v in sorted(rec.features.items())))
        print(f"inductor_cases.py: {len(rec.cases)} cases from {len(report) - len(failed)} models "
              f"({len(rec.skipped)} launches skipped; models that failed to compile: {failed or 'none'}) in {args.out}")
        return 0 if rec.cases else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
