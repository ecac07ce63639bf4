#!/usr/bin/env python3
"""Build the in-graph prelude's cubins (kernels/prelude/prelude_sm_{80,90}.cubin), no CUDA toolkit.

Usage:
    python3 kernels/prelude/build.py           # (re)write the two cubins beside this file
    python3 kernels/prelude/build.py --check   # rebuild in a temp dir; exit 1 naming each stale cubin

prelude.cu calls cudaGraphKernelNodeSetParam, a device-runtime function, so it is compiled
relocatable and linked with libcudadevrt.a here, once, into cubins that need neither a toolkit nor
a link step where graph-rt builds or runs. Per architecture (sm_80, sm_90):

    NVRTC 12.4 (nvidia-cuda-nvrtc-cu12==12.4.127), -rdc=true     -> relocatable cubin (not kept)
    nvJitLink 12.9 (nvidia-nvjitlink-cu12==12.9.86) + libcudadevrt.a
      (nvidia-cuda-runtime-cu12==12.9.79)                         -> linked cubin (checked in)

    pip install nvidia-cuda-nvrtc-cu12==12.4.127 nvidia-nvjitlink-cu12==12.9.86 \
        nvidia-cuda-runtime-cu12==12.9.79

Every wheel is checked with importlib.metadata; a missing one or another version exits 2 with the
pip command (another build of any of the three may change the bytes, so --check would fail).
Linux only (the wheels' .so and .a files). Standard library only (ctypes).

Why these versions (2026-11-30, no GPU): NVRTC 12.4 (compile.py's compiler) knows
cudaGraphKernelNodeSetParam with -rdc=true; nvidia-cuda-runtime-cu12 12.4.127 / 12.4.99 / 12.6.77
ship no libcudadevrt.a, 12.9.79 does; nvJitLink 12.4 refuses the 12.9 archive ("bad input"),
nvJitLink 12.9 links it, and its output is byte-for-byte reproducible. The linked cubin
(~190-200 KB) still lists cudaGraphKernelNodeSetParam and .nv.reservedSmem* as undefined:
device-runtime builtins the driver provides at load.

Verified on an H200 (driver 580 / CUDA 13.0, wip/prelude/probe.cu): the linked sm_90 cubin (and
the unlinked relocatable one) load with cuModuleLoadData, the sm_80 one does not (209,
CUDA_ERROR_NO_BINARY_FOR_GPU: an sm_80 cubin loads on compute capability 8.x, sm_90 on 9.0); a
device-updatable kernel node patched by prelude_patch from a table reads the new buffer in the
same launch, and the old one again when the table changes back. Not tried: a 12.4 driver.
"""

import argparse
import ctypes
import importlib.metadata
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "prelude.cu"
# prelude.cu includes the refresh protocol it shares with kernels/cuda/table.cu.
HEADERS_DIR = HERE.parent / "cuda"
# The shared headers are found and handed to NVRTC as kernels/compile.py does it.
sys.path.insert(0, str(HERE.parent))
from compile import create_program, headers_of  # noqa: E402
ARCHS = ["sm_80", "sm_90"]
# The options the cubins on an H200 were verified with; the program is named by file name only,
# so nothing machine-specific reaches the output.
NVRTC_OPTIONS = ["-rdc=true", "--std=c++17"]

# distribution: (the only version accepted, the file of it this script uses)
WHEELS = {
    "nvidia-cuda-nvrtc-cu12": ("12.4.127", "libnvrtc.so.12"),
    "nvidia-nvjitlink-cu12": ("12.9.86", "libnvJitLink.so.12"),
    "nvidia-cuda-runtime-cu12": ("12.9.79", "libcudadevrt.a"),
}
PIP_INSTALL = "pip install " + " ".join(f"{d}=={v}" for d, (v, _) in WHEELS.items())
NVRTC_VERSION = (12, 4)
NVJITLINK_VERSION = (12, 9)
# nvJitLink.h maps each call to its versioned symbol (nvJitLinkCreate -> __nvJitLinkCreate_12_9);
# resolve those, as a program compiled against the 12.9 header would.
NVJITLINK_SUFFIX = "_12_9"
NVJITLINK_INPUT_CUBIN, NVJITLINK_INPUT_LIBRARY = 1, 6


def die(msg, code=1):
    print(f"build.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


def wheel_files():
    """{distribution: path of its file}; exit 2 naming every wheel missing or of another version."""
    found, problems = {}, []
    for dist, (version, name) in WHEELS.items():
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{dist} is not installed (need {version})")
            continue
        if installed != version:
            problems.append(f"{dist} {installed} is installed, need exactly {version}")
            continue
        files = importlib.metadata.distribution(dist).files or []
        paths = [Path(f.locate()) for f in files if f.name == name and Path(f.locate()).is_file()]
        if not paths:
            problems.append(f"{dist} {version} is installed but has no {name} (reinstall it)")
            continue
        found[dist] = paths[0]
    if problems:
        for p in problems:
            print(f"build.py: error: {p}", file=sys.stderr)
        die(f"the pinned wheels are needed; run: {PIP_INSTALL}", code=2)
    return found


def load(path):
    try:
        return ctypes.CDLL(str(path))
    except OSError as e:
        die(f"cannot load {path}: {e}", code=2)


def load_nvrtc(path):
    lib = load(path)
    p, i, size = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)
    signatures = {
        "nvrtcVersion": [ctypes.POINTER(i), ctypes.POINTER(i)],
        "nvrtcCreateProgram": [
            ctypes.POINTER(p),
            ctypes.c_char_p,
            ctypes.c_char_p,
            i,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.POINTER(ctypes.c_char_p),
        ],
        "nvrtcCompileProgram": [p, i, ctypes.POINTER(ctypes.c_char_p)],
        "nvrtcGetProgramLogSize": [p, size],
        "nvrtcGetProgramLog": [p, ctypes.c_char_p],
        "nvrtcGetCUBINSize": [p, size],
        "nvrtcGetCUBIN": [p, ctypes.c_char_p],
        "nvrtcDestroyProgram": [ctypes.POINTER(p)],
    }
    for name, args in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, i
    lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [i], ctypes.c_char_p
    major, minor = i(), i()
    nvrtc_check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    if (major.value, minor.value) != NVRTC_VERSION:
        found = f"{major.value}.{minor.value}"
        die(f"{path} reports NVRTC {found}, need {NVRTC_VERSION}; run: {PIP_INSTALL}", code=2)
    return lib


def nvrtc_check(lib, result, what):
    if result != 0:
        die(f"{what} failed: {lib.nvrtcGetErrorString(result).decode()} ({result})")


def load_nvjitlink(path):
    lib = load(path)
    p, u32, size = ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_size_t)
    signatures = {
        "Create": [ctypes.POINTER(p), u32, ctypes.POINTER(ctypes.c_char_p)],
        "AddData": [p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p],
        "AddFile": [p, ctypes.c_int, ctypes.c_char_p],
        "Complete": [p],
        "GetErrorLogSize": [p, size],
        "GetErrorLog": [p, ctypes.c_char_p],
        "GetLinkedCubinSize": [p, size],
        "GetLinkedCubin": [p, ctypes.c_char_p],
        "Destroy": [ctypes.POINTER(p)],
    }
    fns = {}
    for name, args in signatures.items():
        fn = getattr(lib, f"__nvJitLink{name}{NVJITLINK_SUFFIX}")
        fn.argtypes, fn.restype = args, ctypes.c_int
        fns[name] = fn
    lib.nvJitLinkVersion.argtypes = [ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint)]
    lib.nvJitLinkVersion.restype = ctypes.c_int
    major, minor = ctypes.c_uint(), ctypes.c_uint()
    if lib.nvJitLinkVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
        die(f"nvJitLinkVersion failed ({path})")
    if (major.value, minor.value) != NVJITLINK_VERSION:
        found = f"{major.value}.{minor.value}"
        die(f"{path} reports nvJitLink {found}, need {NVJITLINK_VERSION}; run: {PIP_INSTALL}", code=2)
    return fns


def compile_relocatable(nvrtc, source, arch):
    """The relocatable cubin NVRTC makes of prelude.cu for arch, or exit 1 with the compile log."""
    prog = ctypes.c_void_p()
    # A --check rebuild reads the headers again, so a changed header makes the cubins stale.
    headers = headers_of(SOURCE, source, HEADERS_DIR)
    nvrtc_check(nvrtc, create_program(nvrtc, prog, source, SOURCE.name, headers), "nvrtcCreateProgram")
    try:
        options = [f"--gpu-architecture={arch}"] + NVRTC_OPTIONS
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        result = nvrtc.nvrtcCompileProgram(prog, len(options), opts)
        n = ctypes.c_size_t()
        nvrtc_check(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n)), "nvrtcGetProgramLogSize")
        log = ctypes.create_string_buffer(n.value)
        nvrtc_check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        log_text = log.value.decode(errors="replace").strip()
        if result != 0:
            die(f"NVRTC ({arch}) failed on {SOURCE}:\n{log_text or '(empty compile log)'}")
        if log_text:
            print(f"{SOURCE.name} ({arch}): {log_text}", file=sys.stderr)
        nvrtc_check(nvrtc, nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n)), "nvrtcGetCUBINSize")
        cubin = ctypes.create_string_buffer(n.value)
        nvrtc_check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin.raw
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))


def link(jl, relocatable, devrt, arch):
    """The cubin nvJitLink makes of the relocatable cubin and libcudadevrt.a, or exit 1 with its log."""
    h = ctypes.c_void_p()
    options = (ctypes.c_char_p * 1)(f"-arch={arch}".encode())
    if jl["Create"](ctypes.byref(h), 1, options) != 0:
        die(f"nvJitLinkCreate ({arch}) failed")
    try:
        size = len(relocatable)
        steps = [
            ("AddData", lambda: jl["AddData"](h, NVJITLINK_INPUT_CUBIN, relocatable, size, b"prelude")),
            ("AddFile", lambda: jl["AddFile"](h, NVJITLINK_INPUT_LIBRARY, str(devrt).encode())),
            ("Complete", lambda: jl["Complete"](h)),
        ]
        for what, step in steps:
            result = step()
            if result != 0:
                n = ctypes.c_size_t()
                jl["GetErrorLogSize"](h, ctypes.byref(n))
                log = ctypes.create_string_buffer(n.value + 1)
                jl["GetErrorLog"](h, log)
                text = log.value.decode(errors="replace").strip() or "(empty error log)"
                die(f"nvJitLink{what} ({arch}) failed with {result}:\n{text}")
        n = ctypes.c_size_t()
        if jl["GetLinkedCubinSize"](h, ctypes.byref(n)) != 0:
            die(f"nvJitLinkGetLinkedCubinSize ({arch}) failed")
        cubin = ctypes.create_string_buffer(n.value)
        if jl["GetLinkedCubin"](h, cubin) != 0:
            die(f"nvJitLinkGetLinkedCubin ({arch}) failed")
        return cubin.raw
    finally:
        jl["Destroy"](ctypes.byref(h))


def build(out_dir):
    """Write prelude_<arch>.cubin for every arch into out_dir; return their file names."""
    wheels = wheel_files()
    nvrtc = load_nvrtc(wheels["nvidia-cuda-nvrtc-cu12"])
    jl = load_nvjitlink(wheels["nvidia-nvjitlink-cu12"])
    devrt = wheels["nvidia-cuda-runtime-cu12"]
    source = SOURCE.read_bytes()
    names = []
    for arch in ARCHS:
        cubin = link(jl, compile_relocatable(nvrtc, source, arch), devrt, arch)
        name = f"prelude_{arch}.cubin"
        (out_dir / name).write_bytes(cubin)
        names.append(name)
    return names


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="rebuild in a temporary directory and fail if a checked-in cubin differs",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="prelude-") as tmp:
        tmp = Path(tmp)
        names = build(tmp)
        if args.check:
            stale = []
            for name in names:
                path = HERE / name
                if not path.is_file():
                    stale.append(f"missing: {path}")
                elif path.read_bytes() != (tmp / name).read_bytes():
                    stale.append(f"stale:   {path}")
            if stale:
                print(f"build.py: the prelude's cubins are out of date with {SOURCE}:", file=sys.stderr)
                for s in stale:
                    print(f"  {s}", file=sys.stderr)
                print(f"regenerate with: {PIP_INSTALL} && python3 kernels/prelude/build.py", file=sys.stderr)
                sys.exit(1)
            print(f"kernels/prelude/ is up to date ({', '.join(names)})")
            return
        for name in names:
            path, data = HERE / name, (tmp / name).read_bytes()
            if path.is_file() and path.read_bytes() == data:
                continue
            part = path.with_suffix(".cubin.tmp")
            part.write_bytes(data)
            os.replace(part, path)
            print(f"wrote {path} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
