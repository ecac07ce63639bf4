// compile.py: --gpu-architecture=compute_90
//
// axpy_table.cu's axpy_f32_table for programmatic dependent launch (compute
// capability 9.0+); see chain_pdl.cu and chain_table_pdl.cu. The slots are
// read before griddepcontrol.wait (the table is written by a kernel that
// completed before the chain's first kernel started); x and y, which the
// previous kernel may write, only after it, through the coherent path (no
// __restrict__, no __ldg).
extern "C" __global__ void axpy_f32_table_pdl(const float* a, const float* const* x, float* const* y, const int* n)
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    float av = *a;
    const float* xp = *x;
    float* yp = *y;
    int nv = *n;
    asm volatile("griddepcontrol.wait;" ::: "memory");
    // 64-bit index: i + stride must not overflow when n is close to INT_MAX.
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
        yp[i] = av * xp[i] + yp[i];
    }
}
