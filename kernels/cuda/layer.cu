// Elementwise kernels of a transformer-like layer stack, on f32 activations laid out as cuBLAS
// writes them: an m x n matrix (m tokens, n features) column-major, element (t, f) at f * m + t.
// One thread per element; m * n must fit in an int.

// y = gelu(x + bias[feature]), GELU's tanh approximation.
extern "C" __global__ void bias_gelu(const float* __restrict__ x, const float* __restrict__ bias,
                                     float* __restrict__ y, int m, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m * n) {
        float v = x[i] + bias[i / m];  // column-major: element i is in feature column i / m
        // f suffixes throughout: a double constant would make the whole expression double.
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
}

// y = x + r: the residual connection.
extern "C" __global__ void residual_add(const float* __restrict__ x, const float* __restrict__ r,
                                        float* __restrict__ y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] + r[i];
    }
}
