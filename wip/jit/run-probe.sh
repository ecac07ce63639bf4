#!/usr/bin/env bash
# The JIT probe on a GPU machine: the decode example's two modules whole, then split one file a
# kernel, each set loaded one after another and all at once. Usage: run-probe.sh (from the repo).
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
nvcc -O2 -x cu "$here/jit-probe.c" -lcuda -lpthread -o "$tmp/jit-probe" || exit 2
ptx=$here/../../examples/decode/ptx
export CUDA_CACHE_DISABLE=1
nproc
"$tmp/jit-probe" "$ptx/decode.ptx" "$ptx/decode_pdl.ptx"
for m in decode decode_pdl; do python3 "$here/split_ptx.py" "$ptx/$m.ptx" "$tmp/split-$m"; done
"$tmp/jit-probe" "$tmp"/split-decode/*.ptx
"$tmp/jit-probe" "$tmp"/split-decode/*.ptx "$tmp"/split-decode_pdl/*.ptx
