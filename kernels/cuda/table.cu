// Refresh of a device-resident argument table from a ring of host mirrors.
//
// The table is an array of 8-byte words in device memory; table-form kernels
// (chain_table.cu, axpy_table.cu, ...) take the address of a slot where the
// plain form takes a pointer or scalar, so a graph captured once reads new
// arguments each replay. The host writes the next arguments into one of
// `depth` mirrors (mapped pinned host memory, mirror m at mirrors + m * words)
// before the launch that runs this kernel; the kernel copies mirror
// (*seq % depth) into the table, counts the refresh in *seq (device memory,
// starts at 0) and acknowledges it in acks[m] (mapped pinned host memory),
// which the host polls before writing that mirror again.
//
// Launch with ONE block (256 threads); depth must be >= 1. No
// griddepcontrol: the kernels reading the table must start after this one
// has completed.
extern "C" __global__ void table_refresh(const unsigned long long* mirrors, unsigned long long* table,
                                         unsigned int words, unsigned int depth,
                                         unsigned long long* seq, unsigned long long* acks)
{
    __shared__ unsigned long long s_seq;
    if (threadIdx.x == 0) {
        s_seq = *seq;
    }
    __syncthreads();
    unsigned long long s = s_seq;
    unsigned long long m = s % depth;
    // Volatile loads: the mirror is host memory the host wrote before the
    // launch; never the non-coherent (ld.global.nc) path.
    const volatile unsigned long long* src = mirrors + m * words;
    for (unsigned long long i = threadIdx.x; i < words; i += blockDim.x) {
        table[i] = src[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        *seq = s + 1;
        // Every thread's mirror reads completed before the barrier above.
        *(volatile unsigned long long*)(acks + m) = s + 1;
        __threadfence_system();
    }
}
