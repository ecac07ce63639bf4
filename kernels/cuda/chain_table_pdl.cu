// compile.py: --gpu-architecture=compute_90
//
// chain_table.cu's add1_table for programmatic dependent launch (compute
// capability 9.0+); see chain_pdl.cu. The slots are read before
// griddepcontrol.wait on purpose: the table is written by a kernel that
// completed before the chain's first kernel started, so no kernel this one may
// overlap writes it. The data x points to is written by the previous kernel,
// so it is read only after the wait, and through the coherent path: no
// __restrict__ and no __ldg (which could make ld.global.nc).
extern "C" __global__ void add1_table_pdl(const float* const* x, float* const* y, int n)
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const float* xp = *x;
    float* yp = *y;
    asm volatile("griddepcontrol.wait;" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        yp[i] = xp[i] + 1.0f;
    }
}
