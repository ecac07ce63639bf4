// chain.cu's add1 in table form: x and y are the addresses of pointer slots of
// a device-resident argument table (see table.cu), read when the kernel runs.
extern "C" __global__ void add1_table(const float* const* x, float* const* y, int n)
{
    const float* xp = *x;
    float* yp = *y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        yp[i] = xp[i] + 1.0f;
    }
}
