#!/usr/bin/env python3
"""Regenerates cuda-sys/src/bindings.rs and cuda-sys/src/functions.rs from a pinned cuda.h.

Pinned inputs (change them together, then re-run and commit the output):
  * header:  PyPI nvidia-cuda-runtime-cu12==12.9.79 (cuda.h, cudaTypedefs.h; CUDA_VERSION 12090)
  * bindgen: bindgen-cli 0.72.1 (`cargo install bindgen-cli --version 0.72.1`, needs libclang)

bindings.rs holds the types and constants, as bindgen writes them. functions.rs lists every driver
function of the header with the symbol name and ABI version that cuGetProcAddress needs; the
`driver_api!` macro in src/loader.rs turns each line into a lazily resolved `unsafe fn`.

The ABI version of each function comes from cudaTypedefs.h, which declares one `PFN_<base>_v<ver>`
typedef per ABI variant of every driver entry point. The exported name tells which variant the
header declares: `cuFoo` is the first variant, `cuFoo_vK` the K-th. The parameter count and names
of the chosen typedef are checked against bindgen's declaration; a mismatch stops the generator.
Every CUresult typedef of cudaTypedefs.h must parse (see typedef_variants for the spellings), and
every function bindgen sees must get a typedef or be listed in UNREACHABLE with the reason, so
functions.rs covers the whole header.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HEADER_PIN = "nvidia-cuda-runtime-cu12==12.9.79"
BINDGEN_PIN = "0.72.1"
HERE = os.path.dirname(os.path.abspath(__file__))
# Driver functions bindgen sees in cuda.h that are deliberately left unbound, each with the reason;
# keep this in step with the "Functions not bound" section of src/lib.rs. Empty for CUDA 12.9:
# every one has a PFN typedef. A function without a typedef that is not listed here stops the
# generator, and so does an entry that no longer applies.
UNREACHABLE: dict[str, str] = {}


def include_dir():
    try:
        import nvidia.cuda_runtime as rt  # type: ignore
    except ImportError:
        sys.exit(f"cuda.h not found: run `pip install {HEADER_PIN}`")
    path = os.path.join(list(rt.__path__)[0], "include")
    version = re.search(r"#define CUDA_VERSION (\d+)", open(os.path.join(path, "cuda.h")).read())
    if not version or version.group(1) != "12090":
        sys.exit(f"expected cuda.h of CUDA 12.9 ({HEADER_PIN}), found {version and version.group(1)}")
    return path


def run_bindgen(inc):
    out = subprocess.run(["bindgen", "--version"], capture_output=True, text=True, check=True).stdout
    if BINDGEN_PIN not in out:
        sys.exit(f"expected bindgen {BINDGEN_PIN}, found {out.strip()}: "
                 f"cargo install bindgen-cli --version {BINDGEN_PIN}")
    with tempfile.NamedTemporaryFile("w", suffix=".h", delete=False) as wrapper:
        wrapper.write("#include <cuda.h>\n")
    args = [
        "bindgen", wrapper.name,
        "--allowlist-function", "cu.*",
        "--allowlist-type", "(CU|cu).*",
        "--allowlist-var", "(CU|cu).*",
        "--default-enum-style", "newtype",
        "--with-derive-default",
        "--no-doc-comments",
        "--merge-extern-blocks",
        "--use-core",
        "--", f"-I{inc}",
    ]
    try:
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(wrapper.name)


def split_params(text):
    params, depth, cur = [], 0, ""
    for ch in text:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            params.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        params.append(cur.strip())
    return params


def c_types(params):
    """Parameter types of a C parameter list, without names, qualifiers or `_vN` type suffixes."""
    params = params.strip()
    if params in ("", "void"):
        return []
    out = []
    for p in split_params(params):
        p = re.sub(r"\[\s*\]", "*", p)
        p = re.sub(r"\b(const|struct|enum|CUDAAPI)\b", " ", p)
        p = re.sub(r"\b(\w+)_v\d+\b", r"\1", p)
        toks = re.findall(r"\w+|\*|\(|\)", p)
        if len(toks) > 1 and re.match(r"\w", toks[-1]) and "(" not in toks:
            toks = toks[:-1]
        out.append(" ".join(toks))
    return out


def declarations(inc):
    """name as written in cuda.h -> parameter types of its first declaration."""
    text = open(os.path.join(inc, "cuda.h")).read()
    decls = {}
    for m in re.finditer(r"CUresult\s+CUDAAPI\s+(\w+)\s*\((.*?)\);", text, re.S):
        decls.setdefault(m.group(1), c_types(m.group(2)))
    return decls


def typedef_variants(inc):
    """base name -> sorted [(version, [param types])] for every ABI variant in cudaTypedefs.h.

    Two spellings occur besides `typedef CUresult (CUDAAPI *PFN_cuFoo_v12000)(...)`: no space
    before the parenthesis (`typedef CUresult(CUDAAPI *PFN_cuGreenCtxCreate_v12040)`), and a typedef
    named without its version (`typedef CUresult (CUDAAPI *PFN_cuModuleGetFunctionCount)`), which
    the header's own `#define PFN_cuModuleGetFunctionCount PFN_cuModuleGetFunctionCount_v12040`
    turns into the versioned name before the compiler sees it. The version of such a typedef is
    the one that `#define` gives; one without such a `#define` stops the generator.
    """
    text = open(os.path.join(inc, "cudaTypedefs.h")).read()
    latest = {}
    for m in re.finditer(r"^\s*#define\s+PFN_(\w+)\s+PFN_(\w+?)_v(\d+)\s*$", text, re.M):
        if m.group(1) == m.group(2):
            latest[m.group(1)] = int(m.group(3))
    variants = {}
    pat = re.compile(r"typedef\s+CUresult\s*\(\s*CUDAAPI\s+\*\s*PFN_(\w+?)(?:_v(\d+))?(_ptsz|_ptds)?\s*\)"
                     r"\s*\((.*?)\);", re.S)
    for m in pat.finditer(text):
        if m.group(3):
            continue
        base, params = m.group(1), m.group(4).strip()
        if m.group(2):
            ver = int(m.group(2))
        elif base in latest:
            ver = latest[base]
        else:
            sys.exit(f"cudaTypedefs.h: PFN_{base} has no version and no `#define PFN_{base} "
                     f"PFN_{base}_v<version>` to give it one")
        if ver in variants.get(base, {}):
            sys.exit(f"cudaTypedefs.h: two typedefs of PFN_{base}_v{ver}")
        variants.setdefault(base, {})[ver] = c_types(params)
    count = len(re.findall(r"\btypedef\s+CUresult\b", text))
    if count != len(list(pat.finditer(text))):
        sys.exit(f"cudaTypedefs.h: {count} CUresult typedefs, but only "
                 f"{len(list(pat.finditer(text)))} parsed: the pattern misses a spelling")
    return {b: sorted(v.items()) for b, v in variants.items()}


def aliases(inc):
    """exported symbol -> name the header's users write (`cuMemAlloc_v2` -> `cuMemAlloc`)."""
    text = open(os.path.join(inc, "cuda.h")).read()
    rev = {}
    pat = r"^\s*#define\s+(cu\w+)\s+(?:__CUDA_API_PT(?:SZ|DS)\()?(cu\w+)\)?\s*$"
    for m in re.finditer(pat, text, re.M):
        if m.group(1) != m.group(2):
            rev.setdefault(m.group(2), m.group(1))
    return rev


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the checked-in output is stale")
    opts = ap.parse_args()
    inc = include_dir()
    raw = run_bindgen(inc)
    variants = typedef_variants(inc)
    rev = aliases(inc)
    decls = declarations(inc)

    fn_pat = re.compile(r"\n\s*pub fn (\w+)\s*\((.*?)\)\s*(?:->\s*([^;]+?))?\s*;", re.S)
    block = re.search(r'unsafe extern "C" \{(.*)\n\}', raw, re.S)
    types = raw[:block.start()] + raw[block.end():]
    lines, skipped, untyped, used = [], [], [], set()
    for m in fn_pat.finditer(block.group(1)):
        exported, params, ret = m.group(1), split_params(m.group(2)), (m.group(3) or "()").strip()
        suffix = re.match(r"(\w+?)_v(\d+)$", exported)
        base = suffix.group(1) if suffix else exported
        index = int(suffix.group(2)) - 1 if suffix else 0
        known = variants.get(base)
        if exported in UNREACHABLE:
            skipped.append(f"{exported}: {UNREACHABLE[exported]}")
            continue
        if not known or index >= len(known):
            untyped.append(exported)
            continue
        version, theirs = known[index]
        written = rev.get(exported, exported)
        ours = decls.get(written, decls.get(exported))
        if ours is None or theirs != ours or len(ours) != len(params):
            skipped.append(f"{exported}: typedef v{version} has ({', '.join(theirs)}), "
                           f"cuda.h has ({', '.join(ours or ['?'])})")
            continue
        rust_name = written if written not in used else exported
        used.add(rust_name)
        if rust_name != exported and re.search(r"_v\d+$", rust_name):
            rust_name = exported
        sig = ", ".join(params)
        lines.append(f'    fn {rust_name}("{base}", {version}, "{exported}")({sig}) -> {ret};')

    fatal = [s for s in skipped if "typedef v" in s]
    if fatal:
        sys.exit("ABI mismatch between cuda.h and cudaTypedefs.h:\n  " + "\n  ".join(fatal))
    if untyped:
        sys.exit("no PFN typedef in cudaTypedefs.h, so no ABI version for cuGetProcAddress: "
                 f"{', '.join(untyped)}; teach typedef_variants() the header's spelling, or list "
                 "each in UNREACHABLE (and src/lib.rs) with the reason it cannot be bound")
    seen = {m.group(1) for m in fn_pat.finditer(block.group(1))}
    stale_entries = [n for n in UNREACHABLE if n not in seen]
    if stale_entries:
        sys.exit(f"UNREACHABLE lists {', '.join(stale_entries)}, which cuda.h does not declare: "
                 "drop the entries (and their lines in src/lib.rs)")
    head = ("// @generated by cuda-sys/generate.py from cuda.h of CUDA 12.9 "
            f"({HEADER_PIN}), bindgen {BINDGEN_PIN}. Do not edit.\n")
    functions = head + "\nuse crate::bindings::*;\n\ncrate::driver_api! {\n" + "\n".join(lines) + "\n}\n"
    bindings = head + types
    outputs = {"bindings.rs": bindings, "functions.rs": functions}
    formatted = {}
    for name, text in outputs.items():
        res = subprocess.run(["rustfmt", "--edition", "2021", "--emit", "stdout"],
                             input=text, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"rustfmt failed on {name}:\n{res.stderr}")
        formatted[name] = res.stdout
    stale = []
    for name, text in formatted.items():
        path = os.path.join(HERE, "src", name)
        if opts.check:
            if not os.path.exists(path) or open(path).read() != text:
                stale.append(path)
        else:
            with open(path, "w") as f:
                f.write(text)
    if stale:
        sys.exit("stale bindings (run cuda-sys/generate.py and commit): " + ", ".join(stale))
    print(f"{len(lines)} driver functions bound; left unbound (UNREACHABLE): "
          f"{'; '.join(skipped) or 'none'}")


if __name__ == "__main__":
    main()
