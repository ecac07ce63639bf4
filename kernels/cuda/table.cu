// Refresh of a device-resident argument table from a ring of host mirrors.
//
// The table is an array of 8-byte words in device memory; table-form kernels
// (chain_table.cu, axpy_table.cu, ...) take the address of a slot where the
// plain form takes a pointer or scalar, so a graph captured once reads new
// arguments each replay. The protocol (mirrors, counts, acknowledgements) is
// refresh.cuh's, shared with the prelude's fused refresh.
//
// Launch with 256 threads a block and any number of blocks (graph-rt: one per
// 1024 words); depth must be >= 1. The copy is spread over the grid, four
// words in flight per thread: each load of mapped host memory is a round trip
// over the bus. The last block to finish acknowledges. No griddepcontrol: the
// kernels reading the table must start after this one has completed.
//
// kernels/prelude/prelude.cu fuses the same refresh (refresh.cuh) with the
// prelude's patches.

#include "refresh.cuh"

extern "C" __global__ void table_refresh(const unsigned long long* mirrors, unsigned long long* table,
                                         unsigned int words, unsigned int depth,
                                         unsigned long long* seq, unsigned long long* acks)
{
    const unsigned long long s = refresh_number(seq);
    const unsigned long long m = s % depth;
    refresh_copy(mirrors + m * words, table, words);
    refresh_acknowledge(seq, acks, s, m);
}
