// The argument table's refresh protocol, shared by kernels/cuda/table.cu (`table_refresh`) and
// kernels/prelude/prelude.cu (`prelude_refresh_patch`, the refresh fused with the prelude): both
// include this file, and both build routes (kernels/compile.py, kernels/prelude/build.py) hand it
// to NVRTC and record it in their freshness checks.
//
// The host writes the next arguments into one of `depth` mirrors (mapped pinned host memory,
// mirror m at mirrors + m * words) before the launch; the kernel copies mirror (seq[0] % depth)
// into the table, counts the refresh in seq[0] (device memory, starts at 0) and acknowledges it in
// acks[m] (mapped pinned host memory), which the host polls before writing that mirror again.
// seq[1] (device memory, starts at 0) counts the blocks that have finished reading. Any number of
// 256-thread blocks; the last block to finish acknowledges. The kernel parameters both entry
// points begin with, in this order (graph-rt's `RefreshArgs`, graph-rt/src/table/refresh.rs):
//     const unsigned long long* mirrors, unsigned long long* table, unsigned int words,
//     unsigned int depth, unsigned long long* seq, unsigned long long* acks
#pragma once

// The launch's refresh number and the mirror it reads. Every block reads the count before any
// block can change it (the last one, after all have arrived).
__device__ __forceinline__ unsigned long long refresh_number(const unsigned long long* seq)
{
    return *(const volatile unsigned long long*)seq;
}

// Copies the mirror's words into the table, spread over the grid.
__device__ __forceinline__ void refresh_copy(const volatile unsigned long long* src,
                                             unsigned long long* table, unsigned int words)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long base = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         base < words; base += 4 * stride) {
        unsigned long long v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const unsigned long long i = base + k * stride;
            if (i < words) {
                // Volatile: host memory the host wrote before the launch; never the
                // non-coherent (ld.global.nc) path.
                v[k] = src[i];
            }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const unsigned long long i = base + k * stride;
            if (i < words) {
                table[i] = v[k];
            }
        }
    }
}

// Once every block has read what it reads of the mirror: the last block counts
// the refresh and acknowledges mirror m.
__device__ __forceinline__ void refresh_acknowledge(unsigned long long* seq, unsigned long long* acks,
                                                    unsigned long long s, unsigned long long m)
{
    // Every thread's mirror loads completed: their values were stored before the barrier.
    __syncthreads();
    if (threadIdx.x != 0) {
        return;
    }
    if (gridDim.x > 1) {
        __threadfence();
        if (atomicAdd(seq + 1, 1ULL) != gridDim.x - 1) {
            return;
        }
        // Every other block's mirror reads happened before its arrival: order them before the
        // acknowledgement below.
        __threadfence();
        // Every block has read seq[0] and the mirror: reset the count for the next refresh.
        seq[1] = 0;
    }
    *(volatile unsigned long long*)seq = s + 1;
    *(volatile unsigned long long*)(acks + m) = s + 1;
    __threadfence_system();
}
