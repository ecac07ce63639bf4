// The CUDA that decode.cuh uses, on the CPU: a block runs as one std::thread per CUDA thread
// (so __syncthreads and the warp shuffles behave as on the GPU, for code that reaches them with
// every thread of its block or warp, as decode.cuh's does), blocks one after another; shared
// memory is a function's `static` arrays (one block at a time) and one dynamic buffer. For
// checking what the kernels compute without a GPU (scripts/decode-kernels-on-cpu), not how fast.
// The driver rewrites `extern __shared__ T name[];` into a pointer to emu::dynamic and
// `asm volatile(` into EMU_ASM( (PDL's and the prefetch's PTX: nothing to do on the CPU).
#pragma once
#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct uint4 {
    unsigned x, y, z, w;
};
struct float4 {
    float x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
};
inline thread_local Dim3 threadIdx;
inline Dim3 blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define EMU_ASM(...) ((void)0)
// Code of the headers with a CPU form of its own (gemv.cuh's GemvRing: its cp.async slots).
#define DECODE_EMULATED 1

inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
template <class T>
inline T __ldg(const T* p) { return *p; }
inline int min(int a, int b) { return a < b ? a : b; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <class T>
inline T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
    std::atomic_ref<unsigned long long> a(*p);
    unsigned long long old = a.load();
    while (old < v && !a.compare_exchange_weak(old, v)) {
    }
    return old;
}

namespace emu {
struct Warp {
    std::barrier<> bar{32};
    uint64_t slot[32];
};
inline std::barrier<>* block_bar;
inline std::vector<std::unique_ptr<Warp>> warps;
inline std::vector<unsigned char> dynamic_bytes(1 << 20);
inline void* dynamic = dynamic_bytes.data();

// Runs `body` as a kernel of `grid` blocks of `threads` threads (1-D blocks, a multiple of 32)
// with `smem` bytes of dynamic shared memory.
template <class F>
void launch(Dim3 grid, unsigned threads, size_t smem, F body) {
    if (threads % 32 != 0 || smem > dynamic_bytes.size()) {
        std::fprintf(stderr, "emu::launch: %u threads, %zu bytes of shared memory\n", threads, smem);
        std::exit(2);
    }
    gridDim = grid;
    blockDim = {threads, 1, 1};
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = {x, y, z};
                std::memset(dynamic, 0xff, smem);  // garbage, as the GPU's: NaN if read unwritten
                std::barrier<> bar(threads);
                block_bar = &bar;
                warps.clear();
                for (unsigned w = 0; w < threads / 32; w++) warps.push_back(std::make_unique<Warp>());
                std::vector<std::thread> ts;
                ts.reserve(threads);
                for (unsigned t = 0; t < threads; t++)
                    ts.emplace_back([t, &body] {
                        threadIdx = {t, 0, 0};
                        body();
                    });
                for (auto& t : ts) t.join();
            }
}
}  // namespace emu

inline void __syncthreads() { emu::block_bar->arrive_and_wait(); }

template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "32- or 64-bit values");
    emu::Warp& w = *emu::warps[threadIdx.x / 32];
    unsigned lane = threadIdx.x % 32;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    w.slot[lane] = bits;
    w.bar.arrive_and_wait();
    T r;
    std::memcpy(&r, &w.slot[lane ^ lane_mask], sizeof(T));
    w.bar.arrive_and_wait();
    return r;
}

// The warp's barrier (every lane calls it: the decode kernels never diverge around one).
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warps[threadIdx.x / 32]->bar.arrive_and_wait(); }
