// The decode example's matrix-vector kernels (batches up to 8 rows), included by decode.cu and
// decode_pdl.cu after decode.cuh, whose helpers they use (the staged norms, argmax's keys).

// Matrix-vector products for small batches: y[r, m] = sum_k W[m, k] s[r, k] for the `rows`
// rows (at most 8) of s, the input staged in dynamic shared memory (rows * K * 2 bytes) — as
// given, or RMSNorm(x + delta) * w (the residual add and norm fused in: every block computes
// them, block 0 writes the sum), or SiLU(gate) * up — W row-major [M, K] bf16 (K a multiple of
// 8), 256 threads a block; y [rows, M] bf16 rounded once, or f32.
// The grid is at most what the device holds at once (the host sizes it by the kernel's
// occupancy): warp w of the W warps takes rows w, w + W, …, and streams them as one sequence of
// 16-byte chunks (lane l takes chunks l, l + 32, … of a row), GEMV_PRE chunks a lane in flight.
// The first GEMV_PRE are requested before PDL's wait: the weights do not depend on the kernel
// before, so launched programmatically their reads overlap its end.
// Where the chunks in flight wait (GemvRing): in the PDL build (DECODE_PDL, compute capability
// 9.0 on), in a ring of shared memory that cp.async fills — no registers held, so a block needs
// few and an SM holds four, 32 warps and 128 KiB of weights in flight (on an H200 at batch 1,
// `run.sh kernels`: the 32000 × 1024 head with its argmax 39.3 → 24.5 µs, 1.67 → 2.68 TB/s);
// elsewhere in registers, two blocks an SM (scripts/decode-kernels-on-cpu runs both builds).
#ifdef DECODE_PDL
#define GEMV_ASYNC 1
#endif
#ifndef GEMV_PRE
#define GEMV_PRE 8
#endif
// Blocks of 256 threads an SM holds, the register bound this asks of the compiler (the host
// sizes the grid by the occupancy the driver reports, shared memory included).
#ifndef GEMV_BLOCKS_PER_SM
#ifdef GEMV_ASYNC
#define GEMV_BLOCKS_PER_SM 4
#else
#define GEMV_BLOCKS_PER_SM 2
#endif
#endif

// The matrix-vector kernels' rows: warp w of the grid's W warps takes rows w, w + W, … .
__device__ __forceinline__ int gemv_first_row() { return blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); }
__device__ __forceinline__ int gemv_row_stride() { return gridDim.x * (blockDim.x >> 5); }

// The chunks a lane has in flight, slot j for j < GEMV_PRE: `put(j, src, ok)` requests the
// chunk at src into slot j (zero when !ok), `take(j)` waits for slot j's chunk and returns it
// (the slots are taken in the order they were put, one put between two takes of a slot).
#ifdef GEMV_ASYNC
struct GemvRing {
    uint4* slot0;  // this lane's slot 0: slot j is slot0[32 j]

    __device__ __forceinline__ GemvRing() {
        // 256 threads a block (the host's launch): 8 warps × GEMV_PRE × 32 lanes × 16 bytes.
        __shared__ uint4 ring[8 * GEMV_PRE * 32];
        slot0 = ring + (threadIdx.x >> 5) * GEMV_PRE * 32 + (threadIdx.x & 31);
    }
    // One commit group a put, so that GEMV_PRE - 1 groups pending at a take means slot j's is
    // done (cp.async's writes are this thread's: seen by it after the wait, no barrier).
#ifndef DECODE_EMULATED
    __device__ __forceinline__ void put(int j, const uint4* src, bool ok) {
        unsigned dst = (unsigned)__cvta_generic_to_shared(slot0 + 32 * j);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n\tcp.async.commit_group;"
                     ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
    }
    // A put with nothing to request: a group all the same, to keep the count.
    __device__ __forceinline__ void skip(int) { asm volatile("cp.async.commit_group;" ::: "memory"); }
    __device__ __forceinline__ uint4 take(int j) {
        asm volatile("cp.async.wait_group %0;" ::"n"(GEMV_PRE - 1) : "memory");
        return slot0[32 * j];
    }
#else
    // On the CPU (scripts/decode-kernels-on-cpu): the same slots, filled at once.
    void put(int j, const uint4* src, bool ok) { slot0[32 * j] = ok ? *src : make_uint4(0u, 0u, 0u, 0u); }
    void skip(int) {}
    uint4 take(int j) { return slot0[32 * j]; }
#endif
};
#else
struct GemvRing {
    uint4 v[GEMV_PRE];
    __device__ __forceinline__ void put(int j, const uint4* src, bool ok) {
        v[j] = ok ? __ldg(src) : make_uint4(0u, 0u, 0u, 0u);
    }
    __device__ __forceinline__ void skip(int) {}
    __device__ __forceinline__ uint4 take(int j) { return v[j]; }
};
#endif

struct GemvWarp {
    const uint4* w0;    // W: a valid address for a put that requests nothing
    const uint4* next;  // the load cursor: this lane's chunk `part` of its current row
    int M, words, per_lane, first, stride, lane, part, steps, issued;
    GemvRing ring;

    __device__ __forceinline__ GemvWarp(const bf16* w, int m, int k) {
        M = m;
        words = k / 8;
        per_lane = (words + 31) / 32;
        lane = threadIdx.x & 31;
        first = gemv_first_row();
        stride = gemv_row_stride();
        int rows = first < M ? (M - first + stride - 1) / stride : 0;
        steps = rows * per_lane;
        w0 = (const uint4*)w;
        next = w0 + (size_t)(first < M ? first : 0) * words + lane;
        part = 0;
        issued = 0;
    }

    // Puts the stream's next chunk (zero past a row's end) into slot j, the cursor moved on;
    // past the stream's end, nothing.
    __device__ __forceinline__ void load(int j) {
        if (issued >= steps) {
            ring.skip(j);
            return;
        }
        bool ok = lane + 32 * part < words;
        ring.put(j, ok ? next + 32 * part : w0, ok);
        if (++part == per_lane) {
            part = 0;
            next += (size_t)stride * words;
        }
        issued++;
    }

    __device__ __forceinline__ void prefetch() {
#pragma unroll
        for (int j = 0; j < GEMV_PRE; j++) load(j);
    }

    // The products over the ROWS staged rows (published by the staging's barrier), from the
    // chunks prefetch() put on. ROWS is a template parameter: the loop is unrolled over the ring
    // and the rows, and with the rows a run-time count it held every row's branch eight times
    // over (about 8000 instructions, more than the instruction cache keeps for the hot loop).
    template <int ROWS>
    __device__ __forceinline__ void run_rows(bf16* y16, float* y32) {
        extern __shared__ uint4 xs[];
        float acc[ROWS];
#pragma unroll
        for (int b = 0; b < ROWS; b++) acc[b] = 0.f;
        int cpart = 0, m = first;  // the consume cursor
        for (int t0 = 0; t0 < steps; t0 += GEMV_PRE) {
#pragma unroll
            for (int j = 0; j < GEMV_PRE; j++) {
                if (t0 + j >= steps) break;
                uint4 w = ring.take(j);
                load(j);
                int c = lane + 32 * cpart;
                if (c < words) {
                    float f0 = lo(w.x), f1 = hi(w.x), f2 = lo(w.y), f3 = hi(w.y);
                    float f4 = lo(w.z), f5 = hi(w.z), f6 = lo(w.w), f7 = hi(w.w);
#pragma unroll
                    for (int b = 0; b < ROWS; b++) {
                        uint4 v = xs[b * words + c];
                        acc[b] += f0 * lo(v.x) + f1 * hi(v.x) + f2 * lo(v.y) + f3 * hi(v.y) +
                                  f4 * lo(v.z) + f5 * hi(v.z) + f6 * lo(v.w) + f7 * hi(v.w);
                    }
                }
                if (++cpart == per_lane) {
                    // The row's last chunk (warp-uniform): its sums, then the next row from 0.
#pragma unroll
                    for (int b = 0; b < ROWS; b++) {
                        float v = acc[b];
                        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
                        if (lane == 0) {
                            if (y32) y32[(size_t)b * M + m] = v;
                            else y16[(size_t)b * M + m] = st(v);
                        }
                        acc[b] = 0.f;
                    }
                    cpart = 0;
                    m += stride;
                }
            }
        }
    }

    // run_rows for 1 to 8 rows.
    __device__ __forceinline__ void run(bf16* y16, float* y32, int rows) {
        switch (rows) {
            case 1: run_rows<1>(y16, y32); break;
            case 2: run_rows<2>(y16, y32); break;
            case 3: run_rows<3>(y16, y32); break;
            case 4: run_rows<4>(y16, y32); break;
            case 5: run_rows<5>(y16, y32); break;
            case 6: run_rows<6>(y16, y32); break;
            case 7: run_rows<7>(y16, y32); break;
            case 8: run_rows<8>(y16, y32); break;
            default: break;
        }
    }
};

// The stagings below read 16 bytes at a time, the loads of four chunks a thread issued together
// (`grouped`): rows of K (a multiple of 8) bf16, 16-byte aligned.

// Stages x [rows, K] as given.
__device__ __forceinline__ void stage_plain(const bf16* x, int K, int rows) {
    extern __shared__ uint4 xs[];
    const uint4* xg = (const uint4*)x;
    grouped<4>(rows * (K / 8), [&](int c) { return xg[c]; }, [&](int c, uint4 v) { xs[c] = v; });
    __syncthreads();
}

// Stages RMSNorm(x_in + delta) * w, rounded as add_norm rounds (delta null: x_in alone); block 0
// writes the sum to x_out (another buffer than x_in: the other blocks still read x_in). Row r's
// scale is summed by warp r.
__device__ void stage_norm(const bf16* x_in, const bf16* delta, bf16* x_out, const bf16* w,
                           int K, int rows, float eps) {
    extern __shared__ uint4 xs[];
    __shared__ float inv[8];
    const uint4* xi = (const uint4*)x_in;
    const uint4* dl = (const uint4*)delta;
    const uint4* w4 = (const uint4*)w;
    uint4* xo = (uint4*)x_out;
    int words = K / 8, n = rows * words;
    grouped<4>(
        n, [&](int c) { return Chunk2{xi[c], delta ? dl[c] : make_uint4(0u, 0u, 0u, 0u)}; },
        [&](int c, Chunk2 v) {
            uint4 u = v.a;
            if (delta) {
                float f[8], g[8];
                unpack8(v.a, f);
                unpack8(v.b, g);
                for (int e = 0; e < 8; e++) f[e] += g[e];
                u = pack8(f);
            }
            xs[c] = u;
            if (blockIdx.x == 0) xo[c] = u;
        });
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp < rows) {
        float ss = 0.f;
        for (int i = lane; i < words; i += 32) {
            float f[8];
            unpack8(xs[warp * words + i], f);
            for (int e = 0; e < 8; e++) ss += f[e] * f[e];
        }
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) inv[warp] = rsqrtf(ss / (float)K + eps);
    }
    __syncthreads();
    grouped<4>(
        n, [&](int c) { return w4[c % words]; },
        [&](int c, uint4 wv) {
            float f[8], g[8];
            unpack8(xs[c], f);
            unpack8(wv, g);
            float r = inv[c / words];
            for (int e = 0; e < 8; e++) f[e] = f[e] * r * g[e];
            xs[c] = pack8(f);
        });
    __syncthreads();
}

// Stages SiLU(gate) * up from gate_up [rows, 2 K] (gate first), rounded as silu_mul rounds.
__device__ void stage_silu(const bf16* gate_up, int K, int rows) {
    extern __shared__ uint4 xs[];
    const uint4* gu = (const uint4*)gate_up;
    int words = K / 8;
    grouped<4>(
        rows * words,
        [&](int c) {
            int r = c / words, k = c - r * words;
            return Chunk2{gu[(size_t)r * 2 * words + k], gu[(size_t)r * 2 * words + words + k]};
        },
        [&](int c, Chunk2 v) {
            float g[8], u[8];
            unpack8(v.a, g);
            unpack8(v.b, u);
            for (int e = 0; e < 8; e++) g[e] = ld(st(g[e] / (1.f + expf(-g[e])))) * u[e];
            xs[c] = pack8(g);
        });
    __syncthreads();
}

// The matrix-vector kernels' one body: the weights' first chunks loaded before PDL's wait,
// then `stage()` (the input rows into shared memory), then the products into y16 or y32.
template <class Stage>
__device__ __forceinline__ void gemv_body(const bf16* W, int M, int K, int rows, bf16* y16,
                                          float* y32, Stage stage) {
    PDL_TRIGGER();
    // GemvRing's slots are 8 warps' (256 threads: the host's launch).
    if (rows > 8 || blockDim.x > 256) return;
    GemvWarp g(W, M, K);
    g.prefetch();
    PDL_WAIT();
    stage();
    g.run(y16, y32, rows);
}

extern "C" __global__ void __launch_bounds__(256, GEMV_BLOCKS_PER_SM)
    gemv_bf16(const bf16* __restrict__ W, const bf16* x, bf16* y, int M, int K, int rows) {
    gemv_body(W, M, K, rows, y, 0, [&] { stage_plain(x, K, rows); });
}

extern "C" __global__ void __launch_bounds__(256, GEMV_BLOCKS_PER_SM)
    gemv_norm_bf16(const bf16* __restrict__ W, const bf16* x_in, const bf16* delta, bf16* x_out,
                   const bf16* w, bf16* y, int M, int K, int rows, float eps) {
    gemv_body(W, M, K, rows, y, 0, [&] { stage_norm(x_in, delta, x_out, w, K, rows, eps); });
}

extern "C" __global__ void __launch_bounds__(256, GEMV_BLOCKS_PER_SM)
    gemv_silu_bf16(const bf16* __restrict__ W, const bf16* gate_up, bf16* y, int M, int K,
                   int rows) {
    gemv_body(W, M, K, rows, y, 0, [&] { stage_silu(gate_up, K, rows); });
}

// The head: gemv_norm_bf16's product into f32 logits y, with the argmax fused in: out[r] = the
// token the argmax kernel above picks from row r of y. Once its products are written, each warp
// folds the argmax keys of the rows it wrote (the lanes over them, then shuffles) into the
// block's, and each block its keys into best[r], the grid's blocks counting in done[0]
// (argmax_publish). The fold is outside the products' unrolled loop: their code is
// gemv_norm_bf16's.
extern "C" __global__ void __launch_bounds__(256, GEMV_BLOCKS_PER_SM)
    gemv_norm_argmax(const bf16* __restrict__ W, const bf16* x_in, const bf16* delta,
                     bf16* x_out, const bf16* w, float* y, int M, int K, int rows, float eps,
                     int* out, unsigned long long* best, unsigned* done) {
    __shared__ unsigned long long sbest[8];
    // Published by the staging's barriers before any fold.
    if (threadIdx.x < 8) sbest[threadIdx.x] = 0;
    gemv_body(W, M, K, rows, 0, y, [&] { stage_norm(x_in, delta, x_out, w, K, rows, eps); });
    if (rows > 8 || blockDim.x > 256) return;
    // This warp's rows, as GemvWarp takes them; lane 0 wrote their sums (ordered by the warp's
    // barrier).
    int lane = threadIdx.x & 31, first = gemv_first_row(), stride = gemv_row_stride();
    __syncwarp();
    for (int r = 0; r < rows; r++) {
        unsigned long long k = 0;
        for (int m = first + stride * lane; m < M; m += 32 * stride) {
            unsigned long long km = argmax_key(ld(st(y[(size_t)r * M + m])), m);
            k = km > k ? km : k;
        }
        for (int o = 16; o > 0; o >>= 1) {
            unsigned long long ko = __shfl_xor_sync(0xffffffffu, k, o);
            k = ko > k ? ko : k;
        }
        if (lane == 0 && k != 0) atomicMax(sbest + r, k);
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int r = 0; r < rows; r++)
        if (sbest[r] != 0) atomicMax(best + r, sbest[r]);
    argmax_publish(best, done, out, rows, gridDim.x);
}
