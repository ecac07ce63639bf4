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
        cudaGraphKernelNodeSetParam(p.node, p.offset, &value, sizeof(value));
    }
}
