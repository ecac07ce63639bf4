// Per-block partial sums: block b writes the sum of its grid-stride slice of x
// to partial[b]. Sum partial[] again (or on the host) for the total.
// blockDim.x must be a multiple of 32 and at most 1024.

__device__ __forceinline__ float warp_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

extern "C" __global__ void block_sum_f32(const float* __restrict__ x, float* __restrict__ partial, int n)
{
    __shared__ float warp_sums[32];  // one slot per warp; 1024 / 32 = 32 warps at most

    float acc = 0.0f;
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        acc += x[i];
    }

    unsigned lane = threadIdx.x & 31u;
    unsigned warp = threadIdx.x >> 5;
    acc = warp_sum(acc);
    if (lane == 0) {
        warp_sums[warp] = acc;
    }
    __syncthreads();

    if (warp == 0) {
        // Lanes past the number of warps contribute 0, so any block size works.
        acc = lane < (blockDim.x >> 5) ? warp_sums[lane] : 0.0f;
        acc = warp_sum(acc);
        if (lane == 0) {
            partial[blockIdx.x] = acc;
        }
    }
}
