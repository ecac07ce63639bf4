S=/tmp/gpu-suite
ab() { echo "== $1 $2"; env $1 $S/examples/decode --gemm own --batches 1,8 --iters 200 $2 --out /tmp/ab 2>&1 | grep -E "^decode: (4 layers|batch \||    [0-9]|PASS|FAIL)" | sed -E 's/weights .* MB made and uploaded in [0-9.]+ s, //' | cut -c1-300; }
ab CUDA_CACHE_DISABLE=1 ""
ab CUDA_CACHE_DISABLE=1 --jit
ab X=1 ""
ab X=1 --jit
ab X=1 ""
