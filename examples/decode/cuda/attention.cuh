// The decode example's attention kernel, included by decode.cu and decode_pdl.cu after
// decode.cuh, whose helpers it uses (its own file: decode.cuh and gemv.cuh hold the rest).

// Attention of one head of one batch row at position `pos` (grid: heads × batch; up to 1024
// threads, a multiple of 32; dynamic shared memory: attention_smem_floats(max_len, head_dim)
// floats), the rotary embedding and the cache append fused in: from qkv ([batch, (heads + 2
// kv_heads) head_dim]: q heads, k heads, v heads, as the product wrote them) it rotates its q
// head and its K/V head's k to `pos`, attends over the first `len` cache positions (clamped to
// the cache; below 1 the row is zero) with position `pos` taken from the fresh k and v (the
// caches' older rows were written by earlier calls), scores scaled by `scale`, and the first
// block of each K/V head writes k and v into the caches at `pos`; out is [batch, heads
// head_dim]. Its K/V head is h / (heads / kv_heads). A position outside the cache rotates
// nothing and writes nothing (as PyTorch's index_copy_ would refuse it). head_dim: even, at
// most 256. The older rows are prefetched into L2 before PDL's wait: no kernel of this call
// writes them.
extern "C" __global__ void __launch_bounds__(1024)
    attention(const bf16* qkv, bf16* k_cache, bf16* v_cache, bf16* out, int heads, int kv_heads,
              int head_dim, int max_len, float scale, int pos, int len) {
    PDL_TRIGGER();
    extern __shared__ float smem[];
    float* scores = smem;               // max_len
    float* part = smem + max_len;       // 32 * head_dim + 2048: per-warp or per-group sums
    __shared__ float q[256];
    __shared__ __align__(16) bf16 kp[256];  // k and v at `pos` (k rotated)
    __shared__ __align__(16) bf16 vp[256];
    __shared__ float scratch[32];
    int h = blockIdx.x, b = blockIdx.y;
    int group = heads / kv_heads, kh = h / group;
    bf16* o = out + ((size_t)b * heads + h) * head_dim;
    if (len > max_len) len = max_len;
    bool fresh = pos >= 0 && pos < max_len;
    size_t base = ((size_t)b * kv_heads + kh) * max_len * head_dim;
    bf16* K = k_cache + base;
    bf16* V = v_cache + base;
    if (head_dim <= 256) {
        for (int t = threadIdx.x; t < len; t += blockDim.x) {
            if (t == pos) continue;
            for (int off = 0; off < head_dim * 2; off += 128) {
                asm volatile("prefetch.global.L2 [%0];" ::"l"((const char*)(K + (size_t)t * head_dim) + off));
                asm volatile("prefetch.global.L2 [%0];" ::"l"((const char*)(V + (size_t)t * head_dim) + off));
            }
        }
    }
    PDL_WAIT();
    if (head_dim > 256) {
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) o[i] = 0;
        return;
    }
    int half = head_dim / 2;
    const bf16* row = qkv + (size_t)b * (heads + 2 * kv_heads) * head_dim;
    const bf16* qr = row + h * head_dim;
    const bf16* kr = row + (heads + kh) * head_dim;
    const bf16* vr = row + (heads + kv_heads + kh) * head_dim;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        bf16 q0 = qr[i], q1 = qr[i + half], k0 = kr[i], k1 = kr[i + half];
        if (fresh) {
            Pair16 rq = rope_pair(q0, q1, i, half, pos), rk = rope_pair(k0, k1, i, half, pos);
            q0 = rq.r0, q1 = rq.r1, k0 = rk.r0, k1 = rk.r1;
        }
        q[i] = ld(q0) * scale;
        q[i + half] = ld(q1) * scale;
        kp[i] = k0;
        kp[i + half] = k1;
    }
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) vp[i] = vr[i];
    __syncthreads();
    if (fresh && h % group == 0) {
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
            K[(size_t)pos * head_dim + i] = kp[i];
            V[(size_t)pos * head_dim + i] = vp[i];
        }
    }
    if (len < 1) {
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) o[i] = 0;
        return;
    }

    // Scores, one position a thread.
    float mx = NEG_INF;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        float s = 0.f;
        const bf16* krow = t == pos ? kp : K + (size_t)t * head_dim;
        if ((head_dim & 7) == 0) {
            // The row's chunks four at a time, loaded before any is used (a thread stalls at
            // the first use of a load: one trip to memory for four chunks, not one each).
            const uint4* kr = (const uint4*)krow;
            int chunks = head_dim / 8;
            for (int c0 = 0; c0 < chunks; c0 += 4) {
                uint4 w[4];
#pragma unroll
                for (int u = 0; u < 4; u++)
                    if (c0 + u < chunks) w[u] = kr[c0 + u];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    if (c0 + u >= chunks) break;
                    const float* qc = q + 8 * (c0 + u);
                    s += qc[0] * lo(w[u].x) + qc[1] * hi(w[u].x) + qc[2] * lo(w[u].y) +
                         qc[3] * hi(w[u].y) + qc[4] * lo(w[u].z) + qc[5] * hi(w[u].z) +
                         qc[6] * lo(w[u].w) + qc[7] * hi(w[u].w);
                }
            }
        } else {
            const unsigned* kr = (const unsigned*)krow;
            for (int c = 0; c < head_dim / 2; c++) {
                unsigned w = kr[c];
                s += q[2 * c] * lo(w) + q[2 * c + 1] * hi(w);
            }
        }
        scores[t] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_reduce(mx, true, scratch);
    float sum = 0.f;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        float p = expf(scores[t] - mx);
        scores[t] = p;
        sum += p;
    }
    sum = block_reduce(sum, false, scratch);  // its barriers also publish scores[]

    int lanes = head_dim / 8;  // 16-byte chunks of a row
    if ((head_dim & 7) == 0 && 32 % lanes == 0) {
        // Weighted values, 8 dimensions a thread: thread (group g, chunk j) sums chunk j of
        // every G-th position from g; then the groups of a warp are summed by shuffles, and the
        // warps through shared memory.
        int j = threadIdx.x % lanes, g = threadIdx.x / lanes, groups = blockDim.x / lanes;
        float a[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        const uint4* vc = (const uint4*)V + j;
        // Four positions' chunks loaded before any is used (as the scores above).
        for (int t0 = g; t0 < len; t0 += 4 * groups) {
            uint4 w[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int t = t0 + u * groups;
                if (t < len) w[u] = t == pos ? ((const uint4*)vp)[j] : vc[(size_t)t * lanes];
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int t = t0 + u * groups;
                if (t >= len) break;
                float p = scores[t];
                a[0] += p * lo(w[u].x); a[1] += p * hi(w[u].x); a[2] += p * lo(w[u].y);
                a[3] += p * hi(w[u].y); a[4] += p * lo(w[u].z); a[5] += p * hi(w[u].z);
                a[6] += p * lo(w[u].w); a[7] += p * hi(w[u].w);
            }
        }
        for (int off = lanes; off < 32; off <<= 1)
            for (int e = 0; e < 8; e++) a[e] += __shfl_xor_sync(0xffffffffu, a[e], off);
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (lane < lanes)
            for (int e = 0; e < 8; e++) part[warp * head_dim + 8 * lane + e] = a[e];
        __syncthreads();
        float inv = 1.f / sum;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
            float acc = 0.f;
            for (int w = 0; w < (int)(blockDim.x >> 5); w++) acc += part[w * head_dim + i];
            o[i] = st(acc * inv);
        }
        return;
    }

    // Any other even width: thread (group g, pair j) sums pair j of every G-th position from g.
    int pairs = head_dim / 2, groups = blockDim.x / pairs;
    if (groups * head_dim > 32 * head_dim + 2048) groups = (32 * head_dim + 2048) / head_dim;
    int j = threadIdx.x % pairs, g = threadIdx.x / pairs;
    if (g < groups) {
        float a0 = 0.f, a1 = 0.f;
        const unsigned* vc = (const unsigned*)V + j;
        for (int t = g; t < len; t += groups) {
            unsigned w = t == pos ? ((const unsigned*)vp)[j] : vc[(size_t)t * pairs];
            a0 += scores[t] * lo(w);
            a1 += scores[t] * hi(w);
        }
        part[g * head_dim + 2 * j] = a0;
        part[g * head_dim + 2 * j + 1] = a1;
    }
    __syncthreads();
    float inv = 1.f / sum;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        float a = 0.f;
        for (int k = 0; k < groups; k++) a += part[k * head_dim + i];
        o[i] = st(a * inv);
    }
}
