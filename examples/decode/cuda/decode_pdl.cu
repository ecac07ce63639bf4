// compile.py: --gpu-architecture=compute_90
// The decode example's kernels with programmatic dependent launch, compute capability 9.0 on
// (decode.cuh).
#define DECODE_PDL
#include "decode.cuh"
#include "gemv.cuh"
#include "attention.cuh"
