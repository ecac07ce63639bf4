// Device probe (not shipped): does the toolkit-free prelude cubin load and patch a node?
// nvcc -arch=sm_90 probe.cu -lcuda -o probe && ./probe prelude_sm_90.cubin prelude_sm_90.rdc.cubin
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#define CK(x) do { auto e = (x); if (e) { printf("FAIL %s = %d line %d\n", #x, (int)e, __LINE__); return 1; } } while (0)
struct PreludePatch { cudaGraphDeviceNode_t node; unsigned long long interior; unsigned int offset; unsigned int slot; };
__global__ void add1(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] + 1.f; }
static std::vector<char> slurp(const char* p) { FILE* f = fopen(p, "rb"); std::vector<char> v; if (!f) return v; fseek(f, 0, SEEK_END); v.resize(ftell(f)); fseek(f, 0, SEEK_SET); fread(v.data(), 1, v.size(), f); fclose(f); return v; }
int main(int argc, char** argv) {
  CK(cudaFree(0));
  int drv; cuDriverGetVersion(&drv); printf("driver %d\n", drv);
  for (int a = 2; a < argc; a++) { auto b = slurp(argv[a]); CUmodule m; CUresult r = cuModuleLoadData(&m, b.data()); printf("load %s: %d\n", argv[a], (int)r); }
  auto bin = slurp(argv[1]); CUmodule mod; CK(cuModuleLoadData(&mod, bin.data())); printf("load %s: 0\n", argv[1]);
  CUfunction pre; CK(cuModuleGetFunction(&pre, mod, "prelude_patch"));
  const int n = 1024; float *x1, *x2, *y; CK(cudaMalloc(&x1, n * 4)); CK(cudaMalloc(&x2, n * 4)); CK(cudaMalloc(&y, n * 4));
  std::vector<float> h(n); for (int i = 0; i < n; i++) h[i] = i; CK(cudaMemcpy(x1, h.data(), n * 4, cudaMemcpyHostToDevice));
  for (int i = 0; i < n; i++) h[i] = 1000 + i; CK(cudaMemcpy(x2, h.data(), n * 4, cudaMemcpyHostToDevice));
  cudaGraph_t g; CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t tn; { const float* xa = x1; float* ya = y; int nn = n; void* args[] = {&xa, &ya, &nn};
    cudaKernelNodeParams p = {}; p.func = (void*)add1; p.gridDim = dim3(n / 256); p.blockDim = dim3(256); p.kernelParams = args;
    CK(cudaGraphAddKernelNode(&tn, g, nullptr, 0, &p)); }
  cudaLaunchAttributeValue av = {}; av.deviceUpdatableKernelNode.deviceUpdatable = 1;
  CK(cudaGraphKernelNodeSetAttribute(tn, cudaLaunchAttributeDeviceUpdatableKernelNode, &av));
  PreludePatch pp = {av.deviceUpdatableKernelNode.devNode, 16, 0, 1};
  PreludePatch* dpp; CK(cudaMalloc(&dpp, sizeof pp)); CK(cudaMemcpy(dpp, &pp, sizeof pp, cudaMemcpyHostToDevice));
  unsigned long long* tab; CK(cudaMalloc(&tab, 16)); unsigned long long ht[2] = {0, (unsigned long long)x2 - 16};
  CK(cudaMemcpy(tab, ht, 16, cudaMemcpyHostToDevice));
  CUgraphNode pn; { unsigned int cnt = 1; void* args[] = {&dpp, &cnt, &tab}; CUDA_KERNEL_NODE_PARAMS p = {}; p.func = pre; p.gridDimX = p.gridDimY = p.gridDimZ = 1; p.blockDimX = 32; p.blockDimY = p.blockDimZ = 1; p.kernelParams = args;
    CK(cuGraphAddKernelNode(&pn, (CUgraph)g, nullptr, 0, &p)); }
  CK(cudaGraphAddDependencies(g, (cudaGraphNode_t*)&pn, &tn, nullptr, 1));
  cudaGraphExec_t ge; CK(cudaGraphInstantiate(&ge, g, 0));
  cudaStream_t s; CK(cudaStreamCreate(&s)); CK(cudaGraphUpload(ge, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(h.data(), y, n * 4, cudaMemcpyDeviceToHost));
  printf("y[0]=%g y[%d]=%g (want 1001, %d) -> %s\n", h[0], n - 1, h[n - 1], 1000 + n, h[0] == 1001.f && h[n-1] == 1000.f + n ? "PATCHED" : "NOT PATCHED");
  // second launch with the table back on x1
  ht[1] = (unsigned long long)x1 - 16; CK(cudaMemcpy(tab, ht, 16, cudaMemcpyHostToDevice));
  CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s)); CK(cudaMemcpy(h.data(), y, n * 4, cudaMemcpyDeviceToHost));
  printf("relaunch y[0]=%g (want 1)\n", h[0]);
  cudaGraphExec_t ge2; printf("second instantiate: %d\n", (int)cudaGraphInstantiate(&ge2, g, 0));
  cudaGraph_t gc; printf("clone: %d\n", (int)cudaGraphClone(&gc, g));
  cudaGraphExecUpdateResultInfo info; printf("exec update: %d\n", (int)cudaGraphExecUpdate(ge, g, &info));
  printf("PROBE DONE\n");
  return 0;
}
