// compile.py: --gpu-architecture=compute_90
//
// The chain kernel of chain.cu for programmatic dependent launch (compute
// capability 9.0+). Launched with the programmatic-stream-serialization
// attribute (or captured so, which makes programmatic graph edges), the next
// kernel of a chain may be scheduled while this one still runs: each kernel
// first lets its dependents launch, then waits until the kernels it depends on
// have completed and their writes are visible, and only then reads its input.
// Launched without the attribute both instructions do nothing.
//
// No __restrict__ (unlike chain.cu): with it the compiler may read x through
// the non-coherent path (ld.global.nc), which assumes x does not change while
// the kernel is resident; here the previous kernel may still be writing x when
// this one starts, and only griddepcontrol.wait orders the two.
extern "C" __global__ void add1(const float* x, float* y, int n)
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] + 1.0f;
    }
}
