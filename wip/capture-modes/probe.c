// Which calls on another thread, during a capture on a non-blocking stream of the same context,
// are refused, and which of them break (invalidate) the capture. One capture per (mode, call).
// Build and run on a GPU machine: nvcc -o probe probe.c -lcuda -lpthread && ./probe
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static CUcontext ctx;
static CUstream cap, own;
static CUdeviceptr scratch;
static float host[1024];

static const char *name(CUresult r) { const char *s = 0; cuGetErrorName(r, &s); return s ? s : "?"; }

typedef CUresult (*op_fn)(void);
static CUresult op_alloc(void) { CUdeviceptr p; CUresult r = cuMemAlloc(&p, 4096); if (r == CUDA_SUCCESS) { scratch = p; } return r; }
static CUresult op_free(void) { return cuMemFree(scratch); }
static CUresult op_ctx_sync(void) { return cuCtxSynchronize(); }
static CUresult op_own_sync(void) { return cuStreamSynchronize(own); }
static CUresult op_own_copy(void) { CUresult r = cuMemcpyHtoDAsync(scratch, host, sizeof host, own); return r ? r : cuStreamSynchronize(own); }
static CUresult op_sync_copy(void) { return cuMemcpyHtoD(scratch, host, sizeof host); }
static CUresult op_legacy_sync(void) { return cuStreamSynchronize(0); }
static CUresult op_event(void) { CUevent e; CUresult r = cuEventCreate(&e, CU_EVENT_DISABLE_TIMING); if (r) return r; r = cuEventRecord(e, own); if (!r) r = cuEventSynchronize(e); cuEventDestroy(e); return r; }
static CUresult op_memset_sync(void) { return cuMemsetD8(scratch, 0, 4096); }
static CUresult op_alloc_async(void) { CUdeviceptr p; CUresult r = cuMemAllocAsync(&p, 4096, own); if (r) return r; r = cuMemFreeAsync(p, own); return r ? r : cuStreamSynchronize(own); }
static CUresult op_host_alloc(void) { void *p; CUresult r = cuMemAllocHost(&p, 4096); if (r) return r; return cuMemFreeHost(p); }

struct { const char *name; op_fn fn; int needs_scratch; } ops[] = {
  {"cuMemAlloc", op_alloc, 0}, {"cuMemFree", op_free, 1}, {"cuCtxSynchronize", op_ctx_sync, 0},
  {"cuStreamSynchronize(own non-blocking)", op_own_sync, 0}, {"cuMemcpyHtoDAsync(own)+sync", op_own_copy, 1},
  {"cuMemcpyHtoD (sync)", op_sync_copy, 1}, {"cuStreamSynchronize(legacy)", op_legacy_sync, 0},
  {"cuEventRecord(own)+cuEventSynchronize", op_event, 0}, {"cuMemsetD8 (sync)", op_memset_sync, 1},
  {"cuMemAllocAsync/FreeAsync(own)+sync", op_alloc_async, 0}, {"cuMemAllocHost/FreeHost", op_host_alloc, 0},
};

static volatile int phase;
static int cur;
static CUresult got;
static void *other(void *arg) {
  (void)arg;
  cuCtxSetCurrent(ctx);
  while (phase != 1) {}
  got = ops[cur].fn();
  phase = 2;
  return 0;
}

int main(void) {
  cuInit(0);
  CUdevice dev; cuDeviceGet(&dev, 0);
  cuDevicePrimaryCtxRetain(&ctx, dev); cuCtxSetCurrent(ctx);
  cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING); cuStreamCreate(&own, CU_STREAM_NON_BLOCKING);
  CUstreamCaptureMode modes[] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_RELAXED};
  const char *mode_names[] = {"global", "thread-local", "relaxed"};
  CUdeviceptr node_mem; cuMemAlloc(&node_mem, 4096);
  printf("%-13s %-40s %-40s %s\n", "capture mode", "call on another thread", "its result", "the capture");
  for (int m = 0; m < 3; m++) {
    for (cur = 0; cur < (int)(sizeof ops / sizeof ops[0]); cur++) {
      if (ops[cur].needs_scratch || 1) { if (scratch) cuMemFree(scratch); cuMemAlloc(&scratch, 4096); }
      cuCtxSynchronize();
      pthread_t t; phase = 0;
      pthread_create(&t, 0, other, 0);
      CUresult b = cuStreamBeginCapture(cap, modes[m]);
      cuMemsetD8Async(node_mem, 1, 4096, cap);
      phase = 1;
      while (phase != 2) {}
      cuMemsetD8Async(node_mem, 2, 4096, cap);
      CUgraph g = 0;
      CUresult e = cuStreamEndCapture(cap, &g);
      pthread_join(t, 0);
      printf("%-13s %-40s %-40s %s%s\n", mode_names[m], ops[cur].name, name(got),
             b ? "begin failed " : "", e ? name(e) : "ended fine");
      if (g) cuGraphDestroy(g);
      if (ops[cur].fn == op_free || ops[cur].fn == op_alloc) { if (got == CUDA_SUCCESS && ops[cur].fn == op_free) scratch = 0; }
      cuCtxSynchronize();
    }
  }
  return 0;
}
