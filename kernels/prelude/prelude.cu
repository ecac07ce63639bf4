// In-graph prelude (issue 12), shipped as the linked cubins prelude_sm_80.cubin and
// prelude_sm_90.cubin beside this file (graph_rt_kernels::PRELUDE; build.py makes them, with no
// CUDA toolkit, and `build.py --check` fails when they are stale): the graph's first kernel after
// the argument table's refresh. Each thread patches one discovered 8-byte word of a
// device-updatable kernel node (cuBLAS's, say) with the address the table now holds for its
// buffer plus the word's interior offset, through the device graph API (CUDA 12.4+). Launch with
// one thread per patch, then a full (not programmatic) edge to the patched nodes.
// The ABI (this struct, 24 bytes and 8-aligned, and the entry point's parameters) is what
// graph-rt passes: change it only together with its callers.
struct PreludePatch {
    cudaGraphDeviceNode_t node;   // the node's device handle (CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE)
    unsigned long long interior;  // added to the slot's value
    unsigned int offset;          // byte offset of the word in the node's parameters
    unsigned int slot;            // table slot holding the buffer's address
};
static_assert(sizeof(PreludePatch) == 24 && alignof(PreludePatch) == 8, "PreludePatch ABI");

extern "C" __global__ void prelude_patch(const PreludePatch* patches, unsigned int count,
                                         const unsigned long long* table)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) {
        PreludePatch p = patches[i];
        unsigned long long value = table[p.slot] + p.interior;
        // A patch that did not take would leave the node on the last replay's buffer: stop the
        // graph (the launch fails with an error the host sees) rather than run it.
        if (cudaGraphKernelNodeSetParam(p.node, p.offset, &value, sizeof(value)) != cudaSuccess) {
            __trap();
        }
    }
}

// The argument table's refresh (kernels/cuda/refresh.cuh, shared with kernels/cuda/table.cu)
// and the prelude in one kernel, which graph-rt puts in the place of the graph's
// `table_refresh` node (one kernel launch fewer at the head of every replay): copy mirror
// (seq[0] % depth) into the table, spread over the grid; patch words (one thread a patch, spread
// over the grid) with the values the mirror holds (another block may not have written its part
// of the table yet); then the last block to finish counts the refresh in seq[0] and acknowledges
// it in acks[m] (seq[1] counts the blocks that finished). Launch with 256 threads a block and any
// number of blocks; depth >= 1. The patched nodes follow it with full edges.
#include "refresh.cuh"

extern "C" __global__ void prelude_refresh_patch(const unsigned long long* mirrors,
                                                 unsigned long long* table, unsigned int words,
                                                 unsigned int depth, unsigned long long* seq,
                                                 unsigned long long* acks,
                                                 const PreludePatch* patches, unsigned int count)
{
    // The thread's first patch (device memory, fixed since the install) is read together with
    // the count, and the mirror's word it needs is read together with the copy's (both host
    // memory): one trip to each memory on the way to the patch, not two.
    const unsigned int stride = gridDim.x * blockDim.x;
    const unsigned int first = blockIdx.x * blockDim.x + threadIdx.x;
    const bool has_first = first < count;
    PreludePatch p0 = {};
    if (has_first) {
        p0 = patches[first];
    }
    const unsigned long long s = refresh_number(seq);
    const unsigned long long m = s % depth;
    const volatile unsigned long long* src = mirrors + m * words;
    unsigned long long v0 = 0;
    if (has_first) {
        v0 = src[p0.slot];
    }
    refresh_copy(src, table, words);
    for (unsigned int i = first; i < count; i += stride) {
        PreludePatch p = i == first ? p0 : patches[i];
        unsigned long long value = (i == first ? v0 : src[p.slot]) + p.interior;
        // A patch that did not take would leave the node on the last replay's buffer: stop the
        // graph (the launch fails with an error the host sees) rather than run it.
        if (cudaGraphKernelNodeSetParam(p.node, p.offset, &value, sizeof(value)) != cudaSuccess) {
            __trap();
        }
    }
    refresh_acknowledge(seq, acks, s, m);
}
