// axpy.cu's axpy_f32 in table form: a and n are the addresses of scalar slots,
// x and y of pointer slots, of a device-resident argument table (see table.cu).
// y = a * x + y. Grid-stride loop, so any grid size covers any n.
extern "C" __global__ void axpy_f32_table(const float* a, const float* const* x, float* const* y, const int* n)
{
    float av = *a;
    const float* xp = *x;
    float* yp = *y;
    int nv = *n;
    // 64-bit index: i + stride must not overflow when n is close to INT_MAX.
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
        yp[i] = av * xp[i] + yp[i];
    }
}
