#!/usr/bin/env python3
"""Compile kernels/cuda/*.cu to kernels/ptx/*.ptx (and the decode example's own kernels,
examples/decode/cuda/*.cu to examples/decode/ptx/) with a pinned NVRTC.

Usage:
    python3 kernels/compile.py           # (re)write kernels/ptx/
    python3 kernels/compile.py --check   # exit 1 if kernels/ptx/ is stale

NVRTC comes from the PyPI wheel nvidia-cuda-nvrtc-cu12==12.4.127. NVRTC 12.4
emits PTX ISA 8.4, which any driver supporting CUDA >= 12.4 can JIT; a newer
compiler would emit a newer PTX ISA that older drivers refuse to load.

Standard library only (ctypes for NVRTC).
"""

import argparse
import ctypes
import hashlib
import importlib.metadata
import os
import re
import sys
from pathlib import Path

NVRTC_PACKAGE = "nvidia-cuda-nvrtc-cu12"
NVRTC_PACKAGE_VERSION = "12.4.127"
NVRTC_VERSION = (12, 4)
PIP_INSTALL = f"pip install {NVRTC_PACKAGE}=={NVRTC_PACKAGE_VERSION}"

# No -lineinfo (it embeds file paths and grows the PTX) and no --use_fast_math
# (keeps IEEE division/sqrt semantics callers may rely on).
OPTIONS = ["--gpu-architecture=compute_70", "--std=c++17"]
# A source whose first line is "// compile.py: --gpu-architecture=compute_XY"
# is compiled for that virtual architecture instead (kernels that use
# instructions older GPUs lack); nothing else may be overridden.
ARCH_DIRECTIVE = re.compile(rb"\A// compile\.py: (--gpu-architecture=compute_(\d+))\r?\n")

KERNELS_DIR = Path(__file__).resolve().parent
CUDA_DIR = KERNELS_DIR / "cuda"
PTX_DIR = KERNELS_DIR / "ptx"
# Every tree compiled: (sources, output) — graph-rt's shipped kernels, then the decode example's
# own (a framework's kernels, whose table forms the top-level build.rs makes).
TREES = [
    (CUDA_DIR, PTX_DIR),
    (KERNELS_DIR.parent / "examples" / "decode" / "cuda", KERNELS_DIR.parent / "examples" / "decode" / "ptx"),
]
MANIFEST = "MANIFEST"


def die(msg):
    print(f"compile.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_nvrtc():
    try:
        import nvidia.cuda_nvrtc as pkg
    except ImportError:
        die(f"NVRTC wheel not installed; run: {PIP_INSTALL}")
    try:
        installed = importlib.metadata.version(NVRTC_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != NVRTC_PACKAGE_VERSION:
        # The PTX header names the exact compiler build, so another patch
        # release would make the checked-in output look stale.
        die(
            f"{NVRTC_PACKAGE} {installed or '(unknown version)'} is installed, "
            f"need exactly {NVRTC_PACKAGE_VERSION}; run: {PIP_INSTALL}"
        )
    lib_path = None
    for d in pkg.__path__:
        candidate = Path(d) / "lib" / "libnvrtc.so.12"
        if candidate.is_file():
            lib_path = candidate
            break
    if lib_path is None:
        die(f"libnvrtc.so.12 not found under {list(pkg.__path__)}/lib; run: {PIP_INSTALL}")
    try:
        lib = ctypes.CDLL(str(lib_path))
    except OSError as e:
        die(f"cannot load {lib_path}: {e}")

    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    lib.nvrtcVersion.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
    lib.nvrtcCreateProgram.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_char_p),
    ]
    lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.nvrtcGetProgramLogSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetProgramLog.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.nvrtcGetPTXSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetPTX.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    for fn in (
        lib.nvrtcVersion,
        lib.nvrtcCreateProgram,
        lib.nvrtcCompileProgram,
        lib.nvrtcGetProgramLogSize,
        lib.nvrtcGetProgramLog,
        lib.nvrtcGetPTXSize,
        lib.nvrtcGetPTX,
        lib.nvrtcDestroyProgram,
    ):
        fn.restype = ctypes.c_int

    major, minor = ctypes.c_int(), ctypes.c_int()
    check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    version = (major.value, minor.value)
    if version != NVRTC_VERSION:
        die(
            f"{lib_path} reports NVRTC {version[0]}.{version[1]}, need exactly "
            f"{NVRTC_VERSION[0]}.{NVRTC_VERSION[1]} (PTX ISA 8.4); run: {PIP_INSTALL}"
        )
    return lib, version


def check(lib, result, what):
    if result != 0:
        die(f"{what} failed: {lib.nvrtcGetErrorString(result).decode()} ({result})")


def options_for(src_path, source):
    """The NVRTC options for one source: OPTIONS, or its architecture directive."""
    m = ARCH_DIRECTIVE.match(source)
    if m is None:
        if source.startswith(b"// compile.py:"):
            die(f"{src_path}: malformed directive; expected '// compile.py: --gpu-architecture=compute_XY'")
        return OPTIONS
    return [m.group(1).decode()] + [o for o in OPTIONS if not o.startswith("--gpu-architecture=")]


INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]+"([A-Za-z0-9_]+\.cuh)"', re.M)


def headers_of(src_path, source, cuda_dir=None):
    """The *.cuh headers of `cuda_dir` (its tree's sources) that `source` includes, in order:
    [(name, bytes)]. A header may
    not include another (one level keeps the freshness record simple); a missing one is an error."""
    cuda_dir = cuda_dir or CUDA_DIR
    out = []
    for m in INCLUDE.finditer(source):
        name = m.group(1).decode()
        path = cuda_dir / name
        if not path.is_file():
            die(f"{src_path}: includes {name}, which is not in {cuda_dir}")
        text = path.read_bytes()
        if INCLUDE.search(text):
            die(f"{path}: a header may not include another header")
        out.append((name, text))
    return out


def create_program(lib, prog, source, name, headers):
    """nvrtcCreateProgram with `headers` ([(include name, bytes)]) given in memory: no include
    path, nothing of this machine in the output."""
    n = len(headers)
    contents = (ctypes.c_char_p * n)(*[h[1] for h in headers]) if n else None
    names = (ctypes.c_char_p * n)(*[h[0].encode() for h in headers]) if n else None
    return lib.nvrtcCreateProgram(ctypes.byref(prog), source, name.encode(), n, contents, names)


def compile_one(lib, src_path, cuda_dir):
    """Return (the bytes the MANIFEST hashes, PTX bytes) for one .cu file, or exit 1 printing the
    compile log. What is hashed: the source, then each header it includes."""
    source = src_path.read_bytes()
    options = options_for(src_path, source)
    headers = headers_of(src_path, source, cuda_dir)
    prog = ctypes.c_void_p()
    # Name the program by file name only, so nothing machine-specific can leak
    # into the output.
    check(
        lib,
        create_program(lib, prog, source, src_path.name, headers),
        f"nvrtcCreateProgram({src_path.name})",
    )
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        result = lib.nvrtcCompileProgram(prog, len(options), opts)

        log_size = ctypes.c_size_t()
        check(lib, lib.nvrtcGetProgramLogSize(prog, ctypes.byref(log_size)), "nvrtcGetProgramLogSize")
        log = ctypes.create_string_buffer(log_size.value)
        check(lib, lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        log_text = log.value.decode(errors="replace").strip()

        if result != 0:
            print(f"compile.py: compiling {src_path} failed:", file=sys.stderr)
            print(log_text or "(empty compile log)", file=sys.stderr)
            die(f"nvrtcCompileProgram({src_path.name}): {lib.nvrtcGetErrorString(result).decode()}")
        if log_text:
            print(f"{src_path.name}: {log_text}", file=sys.stderr)

        ptx_size = ctypes.c_size_t()
        check(lib, lib.nvrtcGetPTXSize(prog, ctypes.byref(ptx_size)), "nvrtcGetPTXSize")
        ptx = ctypes.create_string_buffer(ptx_size.value)
        check(lib, lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        # The size includes the terminating NUL; .value stops before it.
        return source + b"".join(h[1] for h in headers), ptx.value
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def build_outputs(lib, version, cuda_dir):
    """Return {file name in the output folder: bytes} for every source of `cuda_dir`."""
    sources = sorted(cuda_dir.glob("*.cu"))
    if not sources:
        die(f"no .cu files in {cuda_dir}")
    outputs = {}
    lines = [
        f"# nvrtc {version[0]}.{version[1]} ({NVRTC_PACKAGE}=={NVRTC_PACKAGE_VERSION}) "
        f"options: {' '.join(OPTIONS)} (a source's '// compile.py:' first line may set another "
        "--gpu-architecture)",
        "# name sha256(cuda/<name>.cu, then each cuda/*.cuh it includes) sha256(ptx/<name>.ptx)",
    ]
    for src in sources:
        name = src.stem
        source, ptx = compile_one(lib, src, cuda_dir)
        outputs[f"{name}.ptx"] = ptx
        lines.append(f"{name} {sha256(source)} {sha256(ptx)}")
    outputs[MANIFEST] = ("\n".join(lines) + "\n").encode()
    return outputs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="compile in memory and fail if kernels/ptx/ differs from the sources",
    )
    args = parser.parse_args()

    lib, version = load_nvrtc()
    stale = False
    for cuda_dir, ptx_dir in TREES:
        stale |= write_or_check(lib, version, cuda_dir, ptx_dir, args.check)
    if stale:
        print(f"regenerate with: {PIP_INSTALL} && python3 kernels/compile.py", file=sys.stderr)
        sys.exit(1)


def rel(path):
    """`path` from the repository's root, for messages."""
    return path.relative_to(KERNELS_DIR.parent)


def write_or_check(lib, version, cuda_dir, ptx_dir, check_only):
    """Compiles one tree; with `check_only`, returns whether its output folder is stale (naming
    every stale or missing file), else (re)writes it."""
    outputs = build_outputs(lib, version, cuda_dir)
    existing = {p.name for p in ptx_dir.glob("*.ptx")} if ptx_dir.is_dir() else set()
    extra = sorted(existing - outputs.keys())

    if check_only:
        problems = []
        for name, data in sorted(outputs.items()):
            path = ptx_dir / name
            if not path.is_file():
                problems.append(f"missing: {rel(path)}")
            elif path.read_bytes() != data:
                problems.append(f"stale:   {rel(path)}")
        for name in extra:
            problems.append(f"stale:   {rel(ptx_dir / name)} (no matching .cu source)")
        if problems:
            print(f"compile.py: {rel(ptx_dir)}/ is out of date with {rel(cuda_dir)}/:", file=sys.stderr)
            for p in problems:
                print(f"  {p}", file=sys.stderr)
            return True
        print(f"{rel(ptx_dir)}/ is up to date ({len(outputs) - 1} kernels, NVRTC {version[0]}.{version[1]})")
        return False

    ptx_dir.mkdir(exist_ok=True)
    for name in extra:
        (ptx_dir / name).unlink()
        print(f"removed {rel(ptx_dir / name)} (no matching .cu source)")
    for name, data in sorted(outputs.items()):
        path = ptx_dir / name
        if path.is_file() and path.read_bytes() == data:
            continue
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        print(f"wrote {rel(path)}")
    return False


if __name__ == "__main__":
    main()
