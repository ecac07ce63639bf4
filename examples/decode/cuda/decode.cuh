// The decode example's own kernels (not graph-rt's: a framework's), included by decode.cu (any
// GPU of compute capability 7.0 on) and decode_pdl.cu (9.0 on: each kernel starts with
// programmatic dependent launch's trigger and wait, so that launched programmatically it starts
// while the kernel before it finishes); kernels/compile.py compiles both into ../ptx/, the
// top-level build.rs makes their table forms. The matrix-vector kernels are in gemv.cuh, attention
// in attention.cuh.
// Storage is bf16 (raw 16-bit words: no header needed), arithmetic f32. Activations are
// row-major [batch, width]; the K/V caches [batch, kv_heads, max_len, head_dim].
//
// Every kernel bounds its own reads and writes by its arguments (a bad token, position or length
// reads and writes nothing out of bounds): the caller's checks are not the only guard — but the
// matrix-vector kernels, which take K a multiple of 8 and 16-byte aligned rows from the host
// (`gemv_fits`, cudaMalloc'd buffers).

#ifdef DECODE_PDL
// Let the next kernel launch, then wait for the previous one and its writes: everything a kernel
// body reads or writes comes after this, at its very start. (The table forms build.rs makes load
// their slots before it, at entry: safe because the table's refresh comes before the first
// kernel, which is never launched programmatically, and every later kernel starts after it.)
#define PDL_START() asm volatile("griddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;" ::: "memory")
// The two halves, for kernels that read what does not depend on the kernel before (weights)
// between them.
#define PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define PDL_START() ((void)0)
#define PDL_TRIGGER() ((void)0)
#define PDL_WAIT() ((void)0)
#endif

typedef unsigned short bf16;
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float ld(bf16 x) { return __uint_as_float(((unsigned)x) << 16); }
__device__ __forceinline__ float lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ bf16 st(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16)(u >> 16);
}

// The sum (or maximum) over the block, returned to every thread. blockDim.x: a multiple of 32.
__device__ float block_reduce(float v, bool is_max, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int warps = blockDim.x >> 5;
    v = lane < warps ? scratch[lane] : (is_max ? NEG_INF : 0.f);
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    return v;
}

// y = x / sqrt(mean(x^2) + eps) * w over one row of d, in f32 and rounded once (as PyTorch's
// fused RMSNorm).
__device__ void norm_row(const bf16* x, const bf16* w, bf16* y, int d, float eps, float* scratch) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = ld(x[i]);
        ss += v * v;
    }
    ss = block_reduce(ss, false, scratch);
    float inv = rsqrtf(ss / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) y[i] = st(ld(x[i]) * inv * ld(w[i]));
}

// Eight bf16 in 16 bytes, unpacked to f32 and packed back rounded.
__device__ __forceinline__ void unpack8(uint4 u, float (&f)[8]) {
    f[0] = lo(u.x); f[1] = hi(u.x); f[2] = lo(u.y); f[3] = hi(u.y);
    f[4] = lo(u.z); f[5] = hi(u.z); f[6] = lo(u.w); f[7] = hi(u.w);
}
__device__ __forceinline__ unsigned pack2(float a, float b) {
    return (unsigned)st(a) | ((unsigned)st(b) << 16);
}
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
}

// For chunks c = threadIdx.x + k blockDim.x < n of the block: `use(c, load(c))`, the loads of G
// chunks issued before any is used (a GPU thread stalls at the first use of a load: a plain loop
// would pay a trip to memory for each chunk).
template <int G, class Load, class Use>
__device__ __forceinline__ void grouped(int n, Load load, Use use) {
    for (int base = threadIdx.x; base < n; base += G * blockDim.x) {
        decltype(load(0)) v[G];
#pragma unroll
        for (int g = 0; g < G; g++) {
            int c = base + g * blockDim.x;
            if (c < n) v[g] = load(c);
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            int c = base + g * blockDim.x;
            if (c < n) use(c, v[g]);
        }
    }
}

// `f(u, c)` for this thread's chunks c = threadIdx.x + u blockDim.x < n, u < 2.
template <class F>
__device__ __forceinline__ void each2(int n, F f) {
#pragma unroll
    for (int u = 0; u < 2; u++) {
        int c = threadIdx.x + u * blockDim.x;
        if (c < n) f(u, c);
    }
}

struct Chunk2 {
    uint4 a, b;
};

// Whether rows of d bf16 at p can be read 16 bytes at a time.
__device__ __forceinline__ bool by16(const void* p, int d) {
    return (d & 7) == 0 && ((size_t)p & 15) == 0;
}

// One row of d (a multiple of 8, 16-byte aligned): xr = src (+ delta, rounded, when delta is
// not null), then yr = RMSNorm(xr) * w rounded once, every load of a phase issued together; xr
// may be src (then each thread reads back only what it wrote).
__device__ void norm_row16(const bf16* src, const bf16* delta, const bf16* w, bf16* xr, bf16* yr,
                           int d, float eps, float* scratch) {
    const uint4* s4 = (const uint4*)src;
    const uint4* d4 = (const uint4*)delta;
    const uint4* w4 = (const uint4*)w;
    uint4* x4 = (uint4*)xr;
    uint4* y4 = (uint4*)yr;
    int n = d / 8;
    float ss = 0.f;
    if (n <= 2 * (int)blockDim.x) {
        // Up to two chunks a thread (d ≤ 4096 at 256 threads): the row, delta and the weights
        // loaded at once and kept in registers — one trip to memory, not one to read the row and
        // another to read back the sum written.
        uint4 xv[2], dv[2], wv[2];
        each2(n, [&](int u, int c) {
            xv[u] = s4[c];
            dv[u] = delta ? d4[c] : make_uint4(0u, 0u, 0u, 0u);
            wv[u] = w4[c];
        });
        each2(n, [&](int u, int c) {
            float f[8], g[8];
            unpack8(xv[u], f);
            if (delta) {
                unpack8(dv[u], g);
                for (int e = 0; e < 8; e++) f[e] = ld(st(f[e] + g[e]));
                xv[u] = pack8(f);
            }
            for (int e = 0; e < 8; e++) ss += f[e] * f[e];
            x4[c] = xv[u];
        });
        ss = block_reduce(ss, false, scratch);
        float inv = rsqrtf(ss / (float)d + eps);
        each2(n, [&](int u, int c) {
            float f[8], g[8];
            unpack8(xv[u], f);
            unpack8(wv[u], g);
            for (int e = 0; e < 8; e++) f[e] = f[e] * inv * g[e];
            y4[c] = pack8(f);
        });
        return;
    }
    grouped<4>(
        n, [&](int c) { return Chunk2{s4[c], delta ? d4[c] : make_uint4(0u, 0u, 0u, 0u)}; },
        [&](int c, Chunk2 v) {
            float f[8], g[8];
            unpack8(v.a, f);
            if (delta) {
                unpack8(v.b, g);
                for (int e = 0; e < 8; e++) f[e] = ld(st(f[e] + g[e]));
            }
            for (int e = 0; e < 8; e++) ss += f[e] * f[e];
            x4[c] = delta ? pack8(f) : v.a;
        });
    ss = block_reduce(ss, false, scratch);
    float inv = rsqrtf(ss / (float)d + eps);
    grouped<4>(
        n, [&](int c) { return Chunk2{x4[c], w4[c]}; },
        [&](int c, Chunk2 v) {
            float f[8], g[8];
            unpack8(v.a, f);
            unpack8(v.b, g);
            for (int e = 0; e < 8; e++) f[e] = f[e] * inv * g[e];
            y4[c] = pack8(f);
        });
}

// One block per batch row: x = embedding[token] (the residual stream), y = RMSNorm(x) * w.
// A token outside the vocabulary makes the row NaN (it shows in the logits), reading nothing.
extern "C" __global__ void embed_norm(const int* tokens, const bf16* embedding, const bf16* w,
                                      bf16* x, bf16* y, int d, int vocab, float eps) {
    PDL_START();
    __shared__ float scratch[32];
    int b = blockIdx.x;
    int tok = tokens[b];
    bf16* xr = x + (size_t)b * d;
    bf16* yr = y + (size_t)b * d;
    if (tok < 0 || tok >= vocab) {
        for (int i = threadIdx.x; i < d; i += blockDim.x) xr[i] = yr[i] = 0x7fc0;
        return;
    }
    const bf16* e = embedding + (size_t)tok * d;
    if (by16(embedding, d) && by16(x, d) && by16(y, d) && by16(w, d)) {
        norm_row16(e, 0, w, xr, yr, d, eps, scratch);
        return;
    }
    for (int i = threadIdx.x; i < d; i += blockDim.x) xr[i] = e[i];
    norm_row(e, w, yr, d, eps, scratch);
}

// One block per batch row: the residual x += delta (rounded to bf16, as PyTorch's `x + f(x)`:
// delta arrives rounded from its GEMM), then y = RMSNorm(x) * w. Each thread reads back only
// the elements it wrote.
extern "C" __global__ void add_norm(bf16* x, const bf16* delta, const bf16* w, bf16* y, int d,
                                    float eps) {
    PDL_START();
    __shared__ float scratch[32];
    size_t row = (size_t)blockIdx.x * d;
    bf16* xr = x + row;
    const bf16* dr = delta + row;
    if (by16(x, d) && by16(delta, d) && by16(y, d) && by16(w, d)) {
        norm_row16(xr, dr, w, xr, y + row, d, eps, scratch);
        return;
    }
    for (int i = threadIdx.x; i < d; i += blockDim.x) xr[i] = st(ld(xr[i]) + ld(dr[i]));
    norm_row(xr, w, y + row, d, eps, scratch);
}

// The rotary embedding of one pair (i, i + half) of a head at position `pos` (halves rotated,
// base 10000): the angle in f32, cos and sin rounded to bf16 and every product and sum rounded,
// as PyTorch's bf16 `t1 * cos - t2 * sin` computes it.
struct Pair16 {
    bf16 r0, r1;
};
__device__ __forceinline__ Pair16 rope_pair(bf16 a16, bf16 z16, int i, int half, int pos) {
    float inv = 1.f / powf(10000.f, (float)i / (float)half);
    float ang = (float)pos * inv;
    float c = ld(st(cosf(ang))), s = ld(st(sinf(ang)));
    float a = ld(a16), z = ld(z16);
    return Pair16{st(ld(st(a * c)) - ld(st(z * s))), st(ld(st(z * c)) + ld(st(a * s)))};
}

// out[b, i] = silu(gate) * up over [batch, 2 mlp] (gate first, then up); n = batch * mlp. The
// SiLU rounded to bf16 before the product, as PyTorch's `F.silu(g) * u`.
extern "C" __global__ void silu_mul(const bf16* gate_up, bf16* out, int mlp, int n) {
    PDL_START();
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    int b = idx / mlp, i = idx % mlp;
    const bf16* row = gate_up + (size_t)b * 2 * mlp;
    float g = ld(row[i]), u = ld(row[mlp + i]);
    out[idx] = st(ld(st(g / (1.f + expf(-g)))) * u);
}

// (value, index) a beats (value, index) b: larger, NaN largest, ties to the lower index.
__device__ __forceinline__ bool beats(float v, int i, float bv, int bi) {
    if (v != v) return bv == bv || i < bi;
    if (bv != bv) return false;
    return v > bv || (v == bv && i < bi);
}

// The order argmax picks by, as one 64-bit key (larger wins): the logit rounded to bf16 (NaN
// above everything, -0 as +0), then the lower index.
__device__ __forceinline__ unsigned long long argmax_key(float v, int i) {
    unsigned bits = __float_as_uint(v);
    unsigned ord;
    if (v != v) ord = 0xffffffffu;
    else if (v == 0.f) ord = 0x80000000u;
    else ord = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    return ((unsigned long long)ord << 32) | (unsigned long long)(0xffffffffu - (unsigned)i);
}

// Argmax's last step, by one thread of each block once it has folded its keys into best[0..n)
// (atomicMax of argmax_key): counts the block in *done; the grid's last block writes out[0..n)
// from the keys (0: no key, token 0) and resets best[0..n) and *done for the next launch (zero
// at first: a launch stopped half-way leaves them dirty).
__device__ __forceinline__ void argmax_publish(unsigned long long* best, unsigned* done, int* out,
                                               int n, unsigned blocks) {
    __threadfence();
    if (atomicAdd(done, 1u) != blocks - 1) return;
    // The last block: every other block's fold happened before its count.
    __threadfence();
    for (int r = 0; r < n; r++) {
        unsigned long long k = atomicAdd(best + r, 0ull);
        out[r] = k == 0 ? 0 : (int)(0xffffffffu - (unsigned)(k & 0xffffffffu));
        best[r] = 0;
    }
    *done = 0;
}

// out[b] = the token PyTorch's bf16 model picks from these f32 logits: the index of the largest
// logit rounded to bf16, the first of equal ones (NaN counted largest), as torch.argmax over
// bf16 logits. Grid (blocks, batch), 1024 threads: block x takes the x-th share of the row (a
// multiple of 4 logits) and folds its best into best[b]; the row's blocks count in done[b]
// (argmax_publish).
extern "C" __global__ void argmax(const float* logits, int* out, int vocab,
                                  unsigned long long* best, unsigned* done) {
    PDL_START();
    __shared__ float sv[32];
    __shared__ int si[32];
    int b = blockIdx.y;
    const float* row = logits + (size_t)b * vocab;
    int share = (vocab + gridDim.x - 1) / gridDim.x;
    share = (share + 3) & ~3;
    int lo_i = blockIdx.x * share, hi_i = min(vocab, lo_i + share);
    float bv = NEG_INF;
    int bi = 0x7fffffff;
    if ((vocab & 3) == 0 && ((size_t)logits & 15) == 0) {
        // Four logits a load, eight loads issued before any is compared (the share starts at a
        // multiple of 4: every row and share 16-byte aligned).
        const float4* row4 = (const float4*)(row + lo_i);
        int n4 = hi_i > lo_i ? (hi_i - lo_i) / 4 : 0;
        for (int base = threadIdx.x; base < n4; base += 8 * blockDim.x) {
            float4 v4[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int i = base + u * blockDim.x;
                v4[u] = i < n4 ? row4[i] : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int i = lo_i + 4 * (base + u * blockDim.x);
                if (i >= hi_i) break;
                float e[4] = {v4[u].x, v4[u].y, v4[u].z, v4[u].w};
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    float v = ld(st(e[q]));
                    if (beats(v, i + q, bv, bi)) bv = v, bi = i + q;
                }
            }
        }
    } else {
        for (int i = lo_i + threadIdx.x; i < hi_i; i += blockDim.x) {
            float v = ld(st(row[i]));
            if (beats(v, i, bv, bi)) bv = v, bi = i;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, bv, o);
        int i = __shfl_xor_sync(0xffffffffu, bi, o);
        if (beats(v, i, bv, bi)) bv = v, bi = i;
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        int warps = blockDim.x >> 5;
        for (int w = 1; w < warps; w++)
            if (beats(sv[w], si[w], bv, bi)) bv = sv[w], bi = si[w];
        if (bi != 0x7fffffff) atomicMax(best + b, argmax_key(bv, bi));
        argmax_publish(best + b, done + b, out + b, 1, gridDim.x);
    }
}

// dst[i] = src[i] over n 16-byte words (grid-stride): the copy whose bandwidth the example's
// weight-read floor is measured with.
extern "C" __global__ void copy_words(const uint4* src, uint4* dst, unsigned long long n) {
    PDL_START();
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = src[i];
}
