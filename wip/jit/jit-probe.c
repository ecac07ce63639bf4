// Times the driver's JIT of PTX files: every file loaded one after another, then every file
// loaded at once, one thread a file (CUDA_CACHE_DISABLE=1 so that every load compiles).
// nvcc -O2 jit-probe.c -lcuda -lpthread -o jit-probe && CUDA_CACHE_DISABLE=1 ./jit-probe a.ptx b.ptx ...
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static CUcontext ctx;
static char **texts;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static char *slurp(const char *p) {
  FILE *f = fopen(p, "rb"); if (!f) { perror(p); exit(2); }
  fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
  char *b = (char *)malloc(n + 1); if (fread(b, 1, n, f) != (size_t)n) exit(2); b[n] = 0; fclose(f); return b;
}
static void *load(void *arg) {
  long i = (long)arg; CUmodule m;
  cuCtxSetCurrent(ctx);
  CUresult r = cuModuleLoadData(&m, texts[i]);
  if (r) { fprintf(stderr, "load %ld: %d\n", i, r); exit(1); }
  cuModuleUnload(m);
  return 0;
}
int main(int argc, char **argv) {
  int n = argc - 1; cuInit(0); CUdevice d; cuDeviceGet(&d, 0); cuDevicePrimaryCtxRetain(&ctx, d);
  cuCtxSetCurrent(ctx);
  texts = (char **)malloc(sizeof(char *) * n);
  for (int i = 0; i < n; i++) texts[i] = slurp(argv[i + 1]);
  double t = now();
  for (long i = 0; i < n; i++) load((void *)i);
  double seq = now() - t;
  pthread_t th[256]; t = now();
  for (long i = 0; i < n; i++) pthread_create(&th[i], 0, load, (void *)i);
  for (int i = 0; i < n; i++) pthread_join(th[i], 0);
  double par = now() - t;
  printf("jit %d files: one after another %.2f s, at once %.2f s (%.2fx)\n", n, seq, par, seq / par);
  return 0;
}
