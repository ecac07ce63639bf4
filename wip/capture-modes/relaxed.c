// Which calls a thread in RELAXED interaction mode (cuThreadExchangeStreamCaptureMode) may make
// while another thread's GLOBAL-mode capture runs on a non-blocking stream of the same context,
// and whether they break that capture: what graph-rt's release thread does during a capture
// another library began. The "global" rows are the same calls from a thread in the default
// (global) interaction mode. One capture per (interaction mode, call).
// Build and run on a GPU machine: nvcc -o relaxed relaxed.c -lcuda -lpthread && ./relaxed
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>

static CUcontext ctx;
static CUstream cap, own;
static CUdeviceptr scratch;
static void *host_scratch;
static CUevent done_event, busy_event;
static CUgraph graph;
static CUgraphExec exec;
static CUmodule module;
static CUstream spare;

static const char *ptx =
    ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry noop() { ret; }\n";

static const char *name(CUresult r) { const char *s = 0; cuGetErrorName(r, &s); return s ? s : "?"; }

typedef CUresult (*op_fn)(void);
static CUresult op_query_done(void) { return cuEventQuery(done_event); }
static CUresult op_query_busy(void) { return cuEventQuery(busy_event); }
static CUresult op_event_sync(void) { return cuEventSynchronize(done_event); }
static CUresult op_free(void) { CUresult r = cuMemFree(scratch); if (!r) scratch = 0; return r; }
static CUresult op_free_async(void) { CUresult r = cuMemFreeAsync(scratch, own); if (!r) scratch = 0; return r; }
static CUresult op_free_host(void) { CUresult r = cuMemFreeHost(host_scratch); if (!r) host_scratch = 0; return r; }
static CUresult op_exec_destroy(void) { CUresult r = cuGraphExecDestroy(exec); if (!r) exec = 0; return r; }
static CUresult op_graph_destroy(void) { CUresult r = cuGraphDestroy(graph); if (!r) graph = 0; return r; }
static CUresult op_module_unload(void) { CUresult r = cuModuleUnload(module); if (!r) module = 0; return r; }
static CUresult op_event_destroy(void) { CUresult r = cuEventDestroy(done_event); if (!r) done_event = 0; return r; }
static CUresult op_stream_destroy(void) { CUresult r = cuStreamDestroy(spare); if (!r) spare = 0; return r; }
static CUresult op_own_sync(void) { return cuStreamSynchronize(own); }
static CUresult op_ctx_sync(void) { return cuCtxSynchronize(); }

struct { const char *name; op_fn fn; } ops[] = {
  {"cuEventQuery(done)", op_query_done}, {"cuEventQuery(busy)", op_query_busy},
  {"cuEventSynchronize(done)", op_event_sync}, {"cuMemFree", op_free},
  {"cuMemFreeAsync(own)", op_free_async}, {"cuMemFreeHost", op_free_host},
  {"cuGraphExecDestroy", op_exec_destroy}, {"cuGraphDestroy", op_graph_destroy},
  {"cuModuleUnload", op_module_unload}, {"cuEventDestroy", op_event_destroy},
  {"cuStreamDestroy", op_stream_destroy}, {"cuStreamSynchronize(own)", op_own_sync},
  {"cuCtxSynchronize", op_ctx_sync},
};

static volatile int phase;
static int cur, relaxed;
static CUresult got, exchanged;
static void *other(void *arg) {
  (void)arg;
  cuCtxSetCurrent(ctx);
  CUstreamCaptureMode mode = relaxed ? CU_STREAM_CAPTURE_MODE_RELAXED : CU_STREAM_CAPTURE_MODE_GLOBAL;
  exchanged = cuThreadExchangeStreamCaptureMode(&mode);
  while (phase != 1) {}
  got = ops[cur].fn();
  phase = 2;
  return 0;
}

static void fresh(void) {
  if (!scratch) cuMemAlloc(&scratch, 4096);
  if (!host_scratch) cuMemAllocHost(&host_scratch, 4096);
  if (!done_event) cuEventCreate(&done_event, CU_EVENT_DISABLE_TIMING);
  if (!busy_event) cuEventCreate(&busy_event, CU_EVENT_DISABLE_TIMING);
  if (!graph) { cuGraphCreate(&graph, 0); CUgraphNode n; cuGraphAddEmptyNode(&n, graph, 0, 0); }
  if (!exec) { CUgraph g; cuGraphCreate(&g, 0); CUgraphNode n; cuGraphAddEmptyNode(&n, g, 0, 0); cuGraphInstantiate(&exec, g, 0); cuGraphDestroy(g); }
  if (!module) cuModuleLoadData(&module, ptx);
  if (!spare) cuStreamCreate(&spare, CU_STREAM_NON_BLOCKING);
  cuEventRecord(done_event, own);
  cuCtxSynchronize();
}

int main(void) {
  cuInit(0);
  CUdevice dev; cuDeviceGet(&dev, 0);
  cuDevicePrimaryCtxRetain(&ctx, dev); cuCtxSetCurrent(ctx);
  cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING); cuStreamCreate(&own, CU_STREAM_NON_BLOCKING);
  CUdeviceptr node_mem; cuMemAlloc(&node_mem, 1 << 20);
  printf("%-9s %-28s %-40s %s\n", "other", "call during a global capture", "its result", "the capture");
  for (relaxed = 1; relaxed >= 0; relaxed--) {
    for (cur = 0; cur < (int)(sizeof ops / sizeof ops[0]); cur++) {
      fresh();
      pthread_t t; phase = 0;
      pthread_create(&t, 0, other, 0);
      // Keep `own` busy past the query (a long fill), so the busy event is NOT_READY.
      for (int i = 0; i < 200; i++) cuMemsetD8Async(node_mem, (unsigned char)i, 1 << 20, own);
      cuEventRecord(busy_event, own);
      CUresult b = cuStreamBeginCapture(cap, CU_STREAM_CAPTURE_MODE_GLOBAL);
      cuMemsetD8Async(node_mem, 1, 4096, cap);
      phase = 1;
      while (phase != 2) {}
      cuMemsetD8Async(node_mem, 2, 4096, cap);
      CUgraph g = 0;
      CUresult e = cuStreamEndCapture(cap, &g);
      pthread_join(t, 0);
      CUresult run = CUDA_SUCCESS;
      if (g) { CUgraphExec x; run = cuGraphInstantiate(&x, g, 0); if (!run) { run = cuGraphLaunch(x, cap); if (!run) run = cuStreamSynchronize(cap); cuGraphExecDestroy(x); } cuGraphDestroy(g); }
      printf("%-9s %-28s %-40s %s%s%s%s\n", relaxed ? "relaxed" : "global", ops[cur].name, name(got),
             b ? "begin failed " : "", exchanged ? "exchange failed " : "", e ? name(e) : "ended fine",
             run ? " (replay failed)" : "");
      cuCtxSynchronize();
    }
  }
  return 0;
}
