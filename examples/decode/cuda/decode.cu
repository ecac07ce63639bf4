// The decode example's kernels for any GPU of compute capability 7.0 on (decode.cuh).
#include "decode.cuh"
#include "gemv.cuh"
#include "attention.cuh"
