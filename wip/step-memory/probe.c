// Whether a graph can hold both device-updatable kernel nodes (what graph-rt's in-graph prelude
// patches) and memory nodes (what a framework's stream-ordered allocations inside a capture
// become), and what the device's graph-memory attributes say before, during and after.
// Build and run on a GPU machine: nvcc -o probe probe.c -lcuda && ./probe
#include <cuda.h>
#include <stdio.h>
#include <string.h>

static const char *ptx =
    ".version 7.8\n.target sm_90\n.address_size 64\n"
    ".visible .entry fill(.param .u64 p, .param .u32 v) {\n"
    "  .reg .b64 %rd<4>; .reg .b32 %r<4>;\n"
    "  ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [v];\n"
    "  mov.u32 %r2, %tid.x; mul.wide.u32 %rd2, %r2, 4; add.s64 %rd3, %rd1, %rd2;\n"
    "  st.global.u32 [%rd3], %r1; ret; }\n"
    ".visible .entry copy(.param .u64 src, .param .u64 dst) {\n"
    "  .reg .b64 %rd<6>; .reg .b32 %r<4>;\n"
    "  ld.param.u64 %rd1, [src]; ld.param.u64 %rd4, [dst];\n"
    "  mov.u32 %r2, %tid.x; mul.wide.u32 %rd2, %r2, 4; add.s64 %rd3, %rd1, %rd2; add.s64 %rd5, %rd4, %rd2;\n"
    "  ld.global.u32 %r1, [%rd3]; st.global.u32 [%rd5], %r1; ret; }\n";

static const char *name(CUresult r) { const char *s = 0; cuGetErrorName(r, &s); return s ? s : "?"; }
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("%s -> %s\n", #x, name(r_)); } } while (0)

static void attrs(CUdevice dev, const char *when) {
  cuuint64_t used = 0, reserved = 0, hu = 0, hr = 0;
  cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used);
  cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved);
  cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &hu);
  cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &hr);
  size_t fr = 0, tot = 0;
  cuMemGetInfo(&fr, &tot);
  printf("%-40s graph mem used %llu reserved %llu (high %llu / %llu); free %zu MiB\n", when,
         (unsigned long long)used, (unsigned long long)reserved, (unsigned long long)hu,
         (unsigned long long)hr, fr >> 20);
}

// Captures: alloc t (bytes), fill(t, v) [device-updatable if `upd`], copy(t, out), free t.
static CUresult capture(CUstream s, CUfunction fill, CUfunction copy, CUdeviceptr out, size_t bytes,
                        int upd, int free_inside, CUgraph *g, CUdeviceptr *t_out) {
  CUresult r = cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
  if (r) return r;
  CUdeviceptr t = 0;
  CK(cuMemAllocAsync(&t, bytes, s));
  unsigned v = 7;
  void *a1[] = {&t, &v};
  CUlaunchConfig cfg; memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1; cfg.blockDimX = 256; cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = s;
  CUlaunchAttribute at; memset(&at, 0, sizeof at);
  at.id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
  at.value.deviceUpdatableKernelNode.deviceUpdatable = 1;
  cfg.attrs = upd ? &at : 0; cfg.numAttrs = upd ? 1 : 0;
  CK(cuLaunchKernelEx(&cfg, fill, a1, 0));
  void *a2[] = {&t, &out};
  CK(cuLaunchKernel(copy, 1, 1, 1, 256, 1, 1, 0, s, a2, 0));
  if (free_inside) CK(cuMemFreeAsync(t, s));
  *t_out = t;
  return cuStreamEndCapture(s, g);
}

int main(void) {
  CUdevice dev; CUcontext ctx; CUmodule m; CUfunction fill, copy; CUstream s;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CK(cuModuleLoadData(&m, ptx)); CK(cuModuleGetFunction(&fill, m, "fill")); CK(cuModuleGetFunction(&copy, m, "copy"));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr out; CK(cuMemAlloc(&out, 1024));
  attrs(dev, "start");
  for (int upd = 0; upd < 2; upd++) {
    for (int free_inside = 1; free_inside >= 0; free_inside--) {
      CUgraph g = 0; CUdeviceptr t = 0;
      CUresult r = capture(s, fill, copy, out, 64 << 20, upd, free_inside, &g, &t);
      printf("\ncapture (device-updatable %d, free inside %d): %s\n", upd, free_inside, name(r));
      if (r) continue;
      size_t n = 0; cuGraphGetNodes(g, 0, &n);
      printf("nodes: %zu\n", n);
      CUgraphExec e = 0;
      r = cuGraphInstantiate(&e, g, 0);
      printf("instantiate: %s\n", name(r));
      if (!r) {
        attrs(dev, "after instantiate");
        r = cuGraphLaunch(e, s); printf("launch 1: %s\n", name(r));
        CK(cuStreamSynchronize(s));
        attrs(dev, "after launch 1");
        r = cuGraphLaunch(e, s); printf("launch 2: %s\n", name(r));
        CK(cuStreamSynchronize(s));
        if (!free_inside) { CK(cuMemFreeAsync(t, s)); CK(cuStreamSynchronize(s)); printf("freed outside\n");
          r = cuGraphLaunch(e, s); printf("launch 3 after the free: %s\n", name(r)); CK(cuStreamSynchronize(s)); CK(cuMemFreeAsync(t, s)); CK(cuStreamSynchronize(s)); }
        unsigned host[4] = {0}; CK(cuMemcpyDtoH(host, out, 16)); printf("out[0] = %u\n", host[0]);
        CK(cuGraphExecDestroy(e));
        attrs(dev, "after exec destroy");
        CK(cuDeviceGraphMemTrim(dev));
        attrs(dev, "after trim");
      }
      CK(cuGraphDestroy(g));
    }
  }
  // Two graphs of one stream: the second reuses the first's memory?
  {
    CUgraph g1, g2; CUdeviceptr t1, t2; CUgraphExec e1, e2;
    CK(capture(s, fill, copy, out, 256 << 20, 0, 1, &g1, &t1));
    CK(capture(s, fill, copy, out, 128 << 20, 0, 1, &g2, &t2));
    CK(cuGraphInstantiate(&e1, g1, 0)); CK(cuGraphInstantiate(&e2, g2, 0));
    CK(cuGraphLaunch(e1, s)); CK(cuGraphLaunch(e2, s)); CK(cuStreamSynchronize(s));
    attrs(dev, "\ntwo graphs, 256 + 128 MiB, one stream");
    printf("addresses: %llx %llx\n", (unsigned long long)t1, (unsigned long long)t2);
    CK(cuGraphExecDestroy(e1)); CK(cuGraphExecDestroy(e2)); CK(cuDeviceGraphMemTrim(dev));
    attrs(dev, "after destroy + trim");
  }
  // Address reuse inside one graph: two allocations of one size, the second made after the
  // first is freed. Do they share an address (discovery and validation pair allocations by
  // order, and must resolve a word to the allocation live at its node)?
  {
    CUgraph g; CUdeviceptr a = 0, b = 0;
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(cuMemAllocAsync(&a, 1 << 20, s)); CK(cuMemFreeAsync(a, s));
    CK(cuMemAllocAsync(&b, 1 << 20, s)); CK(cuMemFreeAsync(b, s));
    CK(cuStreamEndCapture(s, &g));
    printf("\nreuse inside one capture: first %llx, second %llx (%s)\n", (unsigned long long)a,
           (unsigned long long)b, a == b ? "shared" : "distinct");
    CUgraph g2; CUdeviceptr a2 = 0, b2 = 0;
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(cuMemAllocAsync(&a2, 1 << 20, s)); CK(cuMemFreeAsync(a2, s));
    CK(cuMemAllocAsync(&b2, 1 << 20, s)); CK(cuMemFreeAsync(b2, s));
    CK(cuStreamEndCapture(s, &g2));
    printf("a second capture of the same: %llx, %llx\n", (unsigned long long)a2, (unsigned long long)b2);
    CK(cuGraphDestroy(g)); CK(cuGraphDestroy(g2));
  }
  return 0;
}
