// y = a * x + y. Grid-stride loop, so any grid size covers any n.
extern "C" __global__ void axpy_f32(float a, const float* __restrict__ x, float* __restrict__ y, int n)
{
    // 64-bit index: i + stride must not overflow when n is close to INT_MAX.
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = a * x[i] + y[i];
    }
}
