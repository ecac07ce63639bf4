#!/usr/bin/env python3
"""Experiment (not wired into CI): compile wip/prelude/prelude.cu, the in-graph prelude of issue
12, into cubins for sm_80 and sm_90, with no CUDA toolkit:

    NVRTC 12.4 (nvidia-cuda-nvrtc-cu12==12.4.127) -rdc=true  -> relocatable cubin
    nvJitLink 12.9 (nvidia-nvjitlink-cu12==12.9.86) + libcudadevrt.a
      (nvidia-cuda-runtime-cu12==12.9.79)                      -> linked cubin

    pip install nvidia-cuda-nvrtc-cu12==12.4.127 nvidia-nvjitlink-cu12==12.9.86 \
        nvidia-cuda-runtime-cu12==12.9.79
    python3 wip/prelude/build.py OUT_DIR

Findings (2026-11-30, no GPU): NVRTC 12.4 knows cudaGraphKernelNodeSetParam with -rdc=true;
nvidia-cuda-runtime-cu12 12.4.127 / 12.4.99 / 12.6.77 ship no libcudadevrt.a, 12.9.79 does;
nvJitLink 12.4 refuses the 12.9 archive ("bad input"), nvJitLink 12.9 links it and its output
is byte-for-byte reproducible. The linked cubin (~190-200 KB) still lists
cudaGraphKernelNodeSetParam and .nv.reservedSmem* as undefined: device-runtime builtins the
driver provides at load, it seems. To check on a GPU: cuModuleLoadData of the linked cubin, and
of the unlinked relocatable one (~4 KB), on driver 580 and (if one can be had) a 12.4 driver.
"""
import ctypes
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NVJITLINK_INPUT_CUBIN, NVJITLINK_INPUT_LIBRARY = 1, 6


def lib_in(package, name):
    spec = importlib.util.find_spec(package)
    if spec is None:
        sys.exit(f"build.py: pip install the wheel that provides {package}")
    hits = sorted(Path(list(spec.submodule_search_locations)[0]).rglob(name))
    if not hits:
        sys.exit(f"build.py: no {name} in {package}")
    return hits[0]


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    nvrtc = ctypes.CDLL(str(lib_in("nvidia.cuda_nvrtc", "libnvrtc.so.12")))
    jl = ctypes.CDLL(str(lib_in("nvidia.nvjitlink", "libnvJitLink.so.12")))
    devrt = lib_in("nvidia.cuda_runtime", "libcudadevrt.a")
    src = (HERE / "prelude.cu").read_bytes()
    for arch in ["sm_80", "sm_90"]:
        prog = ctypes.c_void_p()
        assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"prelude.cu", 0, None, None) == 0
        opts = [f"--gpu-architecture={arch}".encode(), b"-rdc=true", b"--std=c++17"]
        r = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        n = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        if r:
            sys.exit(f"build.py: NVRTC ({arch}): {log.value.decode()}")
        nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n))
        rel = ctypes.create_string_buffer(n.value)
        nvrtc.nvrtcGetCUBIN(prog, rel)
        (out / f"prelude_{arch}.rdc.cubin").write_bytes(rel.raw)
        h = ctypes.c_void_p()
        jopts = (ctypes.c_char_p * 1)(f"-arch={arch}".encode())
        assert jl.nvJitLinkCreate(ctypes.byref(h), 1, jopts) == 0
        assert jl.nvJitLinkAddData(h, NVJITLINK_INPUT_CUBIN, rel, n.value, b"prelude") == 0
        assert jl.nvJitLinkAddFile(h, NVJITLINK_INPUT_LIBRARY, str(devrt).encode()) == 0
        rc = jl.nvJitLinkComplete(h)
        m = ctypes.c_size_t()
        jl.nvJitLinkGetErrorLogSize(h, ctypes.byref(m))
        elog = ctypes.create_string_buffer(m.value + 1)
        jl.nvJitLinkGetErrorLog(h, elog)
        if rc:
            sys.exit(f"build.py: nvJitLink ({arch}): {elog.value.decode()}")
        jl.nvJitLinkGetLinkedCubinSize(h, ctypes.byref(m))
        cubin = ctypes.create_string_buffer(m.value)
        jl.nvJitLinkGetLinkedCubin(h, cubin)
        (out / f"prelude_{arch}.cubin").write_bytes(cubin.raw)
        print(f"prelude_{arch}.cubin: {m.value} bytes (relocatable: {n.value})")


if __name__ == "__main__":
    main()
