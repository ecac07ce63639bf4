// decode.cuh's kernels run on the CPU (emulate.h) against plain references written from their
// comments, on random data, on the paths each takes: 16-byte and element-by-element rows,
// vocabularies that are and are not multiples of 4, head widths that are and are not multiples
// of 8, several rows of products. Built and run by scripts/decode-kernels-on-cpu; exits 1 on
// the first difference beyond bf16's rounding, naming the kernel and the element.
#include "emulate.h"
#include "decode.cuh"
#include "gemv.cuh"
#include "attention.cuh"

#include <algorithm>
#include <random>
#include <string>

static std::mt19937 rng(12345);
static int failures = 0;

static std::vector<bf16> random_bf16(size_t n, float scale = 1.f) {
    std::normal_distribution<float> nd(0.f, scale);
    std::vector<bf16> v(n);
    for (auto& x : v) x = st(nd(rng));
    return v;
}

// |a - b| within `ulps` bf16 steps of the larger (plus a floor for values near 0).
static bool close(float a, float b, float ulps = 1.5f, float floor = 1e-3f) {
    if (std::isnan(a) || std::isnan(b)) return false;
    float step = std::max(std::fabs(a), std::fabs(b)) / 128.f;
    return std::fabs(a - b) <= ulps * step + floor;
}

static void check(bool ok, const std::string& what) {
    if (!ok) {
        if (failures < 20) std::printf("FAIL %s\n", what.c_str());
        failures++;
    }
}

static void test_norms(int d, int rows) {
    auto x = random_bf16((size_t)rows * d), delta = random_bf16((size_t)rows * d, 0.5f);
    auto w = random_bf16(d, 0.3f), emb = random_bf16((size_t)7 * d);
    std::vector<bf16> y((size_t)rows * d), x2 = x;
    const float eps = 1e-6f;
    emu::launch({(unsigned)rows}, 256, 0, [&] { add_norm(x2.data(), delta.data(), w.data(), y.data(), d, eps); });
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        std::vector<float> s(d);
        for (int i = 0; i < d; i++) {
            s[i] = ld(st(ld(x[r * d + i]) + ld(delta[r * d + i])));
            ss += (double)s[i] * s[i];
        }
        float inv = 1.f / std::sqrt((float)(ss / d) + eps);
        for (int i = 0; i < d; i++) {
            check(x2[r * d + i] == st(s[i]), "add_norm x d=" + std::to_string(d) + " i=" + std::to_string(i));
            check(close(ld(y[r * d + i]), s[i] * inv * ld(w[i])), "add_norm y d=" + std::to_string(d) + " i=" + std::to_string(i));
        }
    }
    std::vector<int> tok(rows);
    for (int r = 0; r < rows; r++) tok[r] = (r * 3 + 1) % 7;
    tok[rows - 1] = 9;  // outside the vocabulary of 7: the row is NaN
    std::vector<bf16> ex((size_t)rows * d), ey((size_t)rows * d);
    emu::launch({(unsigned)rows}, 256, 0,
                [&] { embed_norm(tok.data(), emb.data(), w.data(), ex.data(), ey.data(), d, 7, eps); });
    for (int r = 0; r < rows; r++) {
        if (tok[r] >= 7) {
            check(std::isnan(ld(ex[r * d])) && std::isnan(ld(ey[r * d])), "embed_norm NaN row");
            continue;
        }
        double ss = 0;
        for (int i = 0; i < d; i++) ss += (double)ld(emb[tok[r] * d + i]) * ld(emb[tok[r] * d + i]);
        float inv = 1.f / std::sqrt((float)(ss / d) + eps);
        for (int i = 0; i < d; i++) {
            check(ex[r * d + i] == emb[tok[r] * d + i], "embed_norm x");
            check(close(ld(ey[r * d + i]), ld(emb[tok[r] * d + i]) * inv * ld(w[i])), "embed_norm y d=" + std::to_string(d));
        }
    }
}

static void test_argmax(int vocab, int rows) {
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> logits((size_t)rows * vocab);
    for (auto& v : logits) v = nd(rng);
    // Ties in bf16 (the first of equals wins) and a NaN row (NaN counts largest).
    logits[7] = logits[vocab - 3] = 50.f;
    if (rows > 1) logits[vocab + 5] = NAN;
    std::vector<int> out(rows, -1);
    std::vector<unsigned long long> best(rows, 0);
    std::vector<unsigned> done(rows, 0);
    // With one block and with several a row: the last block of a row resets the two counts.
    for (unsigned blocks : {1u, 7u}) {
        std::fill(out.begin(), out.end(), -1);
        emu::launch({blocks, (unsigned)rows}, 1024, 0,
                    [&] { argmax(logits.data(), out.data(), vocab, best.data(), done.data()); });
        for (int r = 0; r < rows; r++) {
            check(best[r] == 0 && done[r] == 0, "argmax resets its counts");
            int want = 0;
            for (int i = 1; i < vocab; i++) {
                float v = ld(st(logits[r * vocab + i])), w = ld(st(logits[r * vocab + want]));
                if (std::isnan(w)) break;
                if (std::isnan(v) || v > w) want = i;
            }
            check(out[r] == want, "argmax vocab=" + std::to_string(vocab) + " blocks=" + std::to_string(blocks) +
                                      " row " + std::to_string(r) + ": " + std::to_string(out[r]) + " vs " +
                                      std::to_string(want));
        }
    }
}

// The products: plain, the f32 head with the residual add + norm and the argmax fused in, with
// SiLU·up.
static void test_gemv(int M, int K, int rows) {
    auto W = random_bf16((size_t)M * K, 0.05f);
    // Two equal rows: equal logits (the fused argmax takes the first of equals).
    std::copy(W.begin() + K, W.begin() + 2 * K, W.begin() + (size_t)(M - 1) * K);
    const float eps = 1e-6f;
    size_t smem = (size_t)rows * K * 2;
    unsigned blocks = std::min<unsigned>((M + 7) / 8, 3);  // fewer blocks than rows of 8: warps stream
    // Plain.
    auto x = random_bf16((size_t)rows * K);
    std::vector<bf16> y((size_t)rows * M);
    emu::launch({blocks}, 256, smem, [&] { gemv_bf16(W.data(), x.data(), y.data(), M, K, rows); });
    for (int r = 0; r < rows; r++)
        for (int m = 0; m < M; m++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)ld(W[(size_t)m * K + k]) * ld(x[r * K + k]);
            check(close(ld(y[r * M + m]), (float)acc, 1.5f, 2e-3f), "gemv_bf16 r=" + std::to_string(r) + " m=" + std::to_string(m));
        }
    // Residual add + norm staged, the sum written by block 0.
    auto delta = random_bf16((size_t)rows * K, 0.5f), w = random_bf16(K, 0.3f);
    std::vector<bf16> xo((size_t)rows * K);
    std::vector<float> y32((size_t)rows * M);
    // The f32 head with the argmax fused in: the logits, the argmax kernel's token a row over
    // them, the keys and the count reset (launched twice: the second starts from the first's
    // reset).
    std::vector<unsigned long long> best(rows, 0);
    std::vector<unsigned> done(rows, 0);
    std::vector<int> tok(rows, -1);
    for (int rep = 0; rep < 2; rep++) {
        std::fill(tok.begin(), tok.end(), -1);
        emu::launch({blocks}, 256, smem, [&] {
            gemv_norm_argmax(W.data(), x.data(), delta.data(), xo.data(), w.data(), y32.data(), M, K, rows, eps,
                             tok.data(), best.data(), done.data());
        });
        for (int r = 0; r < rows; r++) check(best[r] == 0 && done[r] == 0, "gemv_norm_argmax reset");
        std::vector<int> am(rows, -1);
        emu::launch({1, (unsigned)rows}, 1024, 0, [&] { argmax(y32.data(), am.data(), M, best.data(), done.data()); });
        for (int r = 0; r < rows; r++)
            check(tok[r] == am[r], "gemv_norm_argmax token r=" + std::to_string(r) + ": " + std::to_string(tok[r]) +
                                       " vs the argmax kernel's " + std::to_string(am[r]));
    }
    for (int r = 0; r < rows; r++) {
        std::vector<float> s(K), h(K);
        double ss = 0;
        for (int k = 0; k < K; k++) {
            s[k] = ld(st(ld(x[r * K + k]) + ld(delta[r * K + k])));
            ss += (double)s[k] * s[k];
            check(xo[r * K + k] == st(s[k]), "gemv_norm x_out");
        }
        float inv = 1.f / std::sqrt((float)(ss / K) + eps);
        for (int k = 0; k < K; k++) h[k] = ld(st(s[k] * inv * ld(w[k])));
        for (int m = 0; m < M; m++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)ld(W[(size_t)m * K + k]) * h[k];
            check(std::fabs(y32[r * M + m] - acc) <= 2e-2 * std::max(1.0, std::fabs(acc)),
                  "gemv_norm_argmax logits r=" + std::to_string(r) + " m=" + std::to_string(m));
        }
    }
    // SiLU(gate) · up staged from gate_up [rows, 2K].
    auto gu = random_bf16((size_t)rows * 2 * K);
    emu::launch({blocks}, 256, smem, [&] { gemv_silu_bf16(W.data(), gu.data(), y.data(), M, K, rows); });
    for (int r = 0; r < rows; r++) {
        std::vector<float> a(K);
        for (int k = 0; k < K; k++) {
            float g = ld(gu[(size_t)r * 2 * K + k]), u = ld(gu[(size_t)r * 2 * K + K + k]);
            a[k] = ld(st(ld(st(g / (1.f + std::exp(-g)))) * u));
        }
        for (int m = 0; m < M; m++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)ld(W[(size_t)m * K + k]) * a[k];
            check(close(ld(y[r * M + m]), (float)acc, 1.5f, 2e-3f), "gemv_silu_bf16 r=" + std::to_string(r) + " m=" + std::to_string(m));
        }
    }
}

// Attention at `pos` over `len` positions, the rotary embedding and the cache append fused in.
static void test_attention(int heads, int kv_heads, int hd, int max_len, int pos, int len, int rows) {
    int width = (heads + 2 * kv_heads) * hd;
    auto qkv = random_bf16((size_t)rows * width);
    size_t cache = (size_t)rows * kv_heads * max_len * hd;
    auto kc = random_bf16(cache), vc = random_bf16(cache);
    auto kc0 = kc, vc0 = vc;
    std::vector<bf16> out((size_t)rows * heads * hd);
    float scale = 1.f / std::sqrt((float)hd);
    size_t smem = 4 * ((size_t)max_len + 32 * hd + 2048);
    emu::launch({(unsigned)heads, (unsigned)rows}, 1024, smem, [&] {
        attention(qkv.data(), kc.data(), vc.data(), out.data(), heads, kv_heads, hd, max_len, scale, pos, len);
    });
    int half = hd / 2, group = heads / kv_heads;
    bool fresh = pos >= 0 && pos < max_len;
    auto rope = [&](const bf16* t, std::vector<bf16>& r) {
        r.assign(t, t + hd);
        if (!fresh) return;
        for (int i = 0; i < half; i++) {
            Pair16 p = rope_pair(t[i], t[i + half], i, half, pos);
            r[i] = p.r0, r[i + half] = p.r1;
        }
    };
    std::string at = " (heads " + std::to_string(heads) + "/" + std::to_string(kv_heads) + ", hd " + std::to_string(hd) + ", pos " + std::to_string(pos) + ", len " + std::to_string(len) + ")";
    for (int b = 0; b < rows; b++) {
        const bf16* row = qkv.data() + (size_t)b * width;
        for (int kh = 0; kh < kv_heads; kh++) {
            std::vector<bf16> k;
            rope(row + (heads + kh) * hd, k);
            const bf16* v = row + (heads + kv_heads + kh) * hd;
            size_t base = ((size_t)b * kv_heads + kh) * max_len * hd;
            for (int t = 0; t < max_len; t++)
                for (int i = 0; i < hd; i++) {
                    size_t at_i = base + (size_t)t * hd + i;
                    bf16 ek = (fresh && t == pos) ? k[i] : kc0[at_i], ev = (fresh && t == pos) ? v[i] : vc0[at_i];
                    check(kc[at_i] == ek && vc[at_i] == ev, "attention cache t=" + std::to_string(t) + at);
                }
        }
        for (int h = 0; h < heads; h++) {
            int kh = h / group, n = std::min(len, max_len);
            std::vector<bf16> q, k;
            rope(row + h * hd, q);
            rope(row + (heads + kh) * hd, k);
            const bf16* v = row + (heads + kv_heads + kh) * hd;
            size_t base = ((size_t)b * kv_heads + kh) * max_len * hd;
            std::vector<double> s(std::max(n, 1));
            double mx = -1e300;
            for (int t = 0; t < n; t++) {
                double acc = 0;
                for (int i = 0; i < hd; i++) {
                    float kv = (t == pos) ? ld(k[i]) : ld(kc0[base + (size_t)t * hd + i]);
                    acc += (double)(ld(q[i]) * scale) * kv;
                }
                s[t] = acc;
                mx = std::max(mx, acc);
            }
            for (int i = 0; i < hd; i++) {
                double num = 0, den = 0;
                for (int t = 0; t < n; t++) {
                    double p = std::exp(s[t] - mx);
                    float vv = (t == pos) ? ld(v[i]) : ld(vc0[base + (size_t)t * hd + i]);
                    num += p * vv;
                    den += p;
                }
                float want = n < 1 ? 0.f : (float)(num / den);
                check(close(ld(out[((size_t)b * heads + h) * hd + i]), want, 1.5f, 2e-3f),
                      "attention out b=" + std::to_string(b) + " h=" + std::to_string(h) + " i=" + std::to_string(i) + at);
            }
        }
    }
}

int main() {
    test_norms(256, 3);   // 16-byte rows
    test_norms(260, 2);   // element by element (260 % 8 != 0)
    test_norms(4096, 1);  // two chunks a thread, in registers
    test_norms(8192, 1);  // four chunks a thread: the grouped path
    test_argmax(500, 3);  // four logits a load
    test_argmax(333, 2);  // one a load
    test_argmax(32000, 1);
    test_gemv(37, 256, 1);
    test_gemv(100, 384, 3);  // a row's chunks not a multiple of 32 lanes
    test_gemv(20, 2816, 8);
    test_gemv(2000, 64, 8);  // the head's fold: a lane over several of its warp's rows
    test_attention(4, 2, 64, 24, 10, 11, 2);   // 16-byte chunks, a cache row at pos from the fresh k/v
    test_attention(8, 1, 48, 40, 0, 1, 1);     // pairs (48 % 8 != 0), the first position
    test_attention(4, 4, 128, 16, 15, 16, 1);  // one KV head a head, the cache's last position
    test_attention(4, 2, 64, 24, 30, 24, 1);   // a position outside the cache: nothing rotated or written
    test_attention(4, 2, 64, 24, 5, 0, 1);     // nothing attended: the row is zero, the append still made
    if (failures) {
        std::printf("decode kernels on the CPU: FAIL (%d differences)\n", failures);
        return 1;
    }
    std::printf("decode kernels on the CPU: PASS (norms, argmax, matrix-vector products, attention)\n");
    return 0;
}
