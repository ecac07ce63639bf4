// RMSNorm over rows of a row-major [rows, cols] matrix, one block per row:
//   y[r, c] = x[r, c] * rsqrtf(mean_c(x[r, :]^2) + eps) * w[c]
// blockDim.x must be a multiple of 32 and at most 1024.

__device__ __forceinline__ float warp_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

extern "C" __global__ void rmsnorm_f32(const float* __restrict__ x, const float* __restrict__ w,
                                       float* __restrict__ y, int cols, float eps)
{
    __shared__ float warp_sums[32];  // one slot per warp; 1024 / 32 = 32 warps at most
    __shared__ float inv_rms;

    // 64-bit row offset: rows * cols may exceed INT_MAX.
    size_t base = (size_t)blockIdx.x * (size_t)cols;
    const float* xr = x + base;
    float* yr = y + base;

    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = xr[c];
        acc += v * v;
    }

    unsigned lane = threadIdx.x & 31u;
    unsigned warp = threadIdx.x >> 5;
    acc = warp_sum(acc);
    if (lane == 0) {
        warp_sums[warp] = acc;
    }
    __syncthreads();

    if (warp == 0) {
        acc = lane < (blockDim.x >> 5) ? warp_sums[lane] : 0.0f;
        acc = warp_sum(acc);
        if (lane == 0) {
            inv_rms = rsqrtf(acc / (float)cols + eps);
        }
    }
    __syncthreads();

    float s = inv_rms;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        yr[c] = xr[c] * s * w[c];
    }
}
