/* Benchmark aid (not API): the raw CUDA graph of scripts/bench/exec_baseline.cu
 * run inside the fhelium process (fh_cuda_raw_graph_bench, fh/bench_aid.h).
 *
 * The baseline program measures cudaGraphLaunch of a chain of K launches of
 * the engine's add kernel in its own process. Running the baseline's exact
 * code here (its own cudaMalloc'd buffers, a fresh non-blocking cudaStream,
 * capture and instantiate by hand, no allocator, no fhelium stream) tells a
 * difference of process or device state from a difference in what fhelium
 * captures (it found the two-stream state, scripts/bench/README.md). */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "fh/bench_aid.h"
#include "fh/kernels.h"
#include "fh/launch.h"
#include "bench_shared.cuh"

struct raw_bench {
  cudaStream_t s;
  float *buf, *w;
  cudaGraph_t g;
  cudaGraphExec_t x;
};

static void raw_bench_free(raw_bench *r) {
  if (r->s) (void)cudaStreamSynchronize(r->s);
  if (r->x) (void)cudaGraphExecDestroy(r->x);
  if (r->g) (void)cudaGraphDestroy(r->g);
  if (r->buf) (void)cudaFree(r->buf);
  if (r->w) (void)cudaFree(r->w);
  if (r->s) (void)cudaStreamDestroy(r->s);
  (void)cudaGetLastError();
}

#define TRY(call, what)                         \
  do {                                          \
    cudaError_t e_ = (call);                    \
    if (e_ != cudaSuccess) {                    \
      fh_status st_ = fh__cuda_fail(e_, what);  \
      raw_bench_free(&r);                       \
      return st_;                               \
    }                                           \
  } while (0)

fh_status fh_cuda_raw_graph_bench(int dev, int K, int reps, bool random, double *us) {
  if (K < 1 || K > 10000 || reps < 1 || reps > 100000)
    return fh_error_set(FH_ERR_VALUE, "raw graph bench: K must be in [1, 10000] and reps in [1, 100000]");
  fh_device d = {FH_DEVICE_CUDA, dev};
  fh_status st = fh_device_check(d);
  if (st != FH_OK) return st;
  if ((st = fh__cuda_use_device(dev)) != FH_OK) return st;
  if (fh__cuda_captures_active()) return fh_error_set(FH_ERR_EXECUTION, "raw graph bench: a capture is running");
  const int n = 4096;
  raw_bench r;
  memset(&r, 0, sizeof r);
  TRY(cudaStreamCreateWithFlags(&r.s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  TRY(cudaMalloc((void **)&r.buf, (size_t)(K + 1) * n * sizeof(float)), "cudaMalloc");
  TRY(cudaMalloc((void **)&r.w, n * sizeof(float)), "cudaMalloc");
  if (random) {
    /* the data of graph.lua's chain: uniform [0, 1) (values play no part in
     * the kernel's timing unless the hardware says otherwise) */
    float *h = (float *)fh_malloc((size_t)(K + 2) * n * sizeof(float));
    if (h == NULL) {
      raw_bench_free(&r);
      return fh_error_set(FH_ERR_MEMORY, "out of memory");
    }
    uint32_t x = 12345;
    for (size_t i = 0; i < (size_t)(K + 2) * n; ++i) {
      x = x * 1664525u + 1013904223u;
      h[i] = (float)(x >> 8) * (1.0f / 16777216.0f);
    }
    cudaError_t e = cudaMemcpy(r.buf, h, (size_t)(K + 1) * n * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(r.w, h + (size_t)(K + 1) * n, n * sizeof(float), cudaMemcpyHostToDevice);
    fh_free(h);
    TRY(e, "cudaMemcpy");
  } else {
    TRY(cudaMemset(r.buf, 0, (size_t)(K + 1) * n * sizeof(float)), "cudaMemset");
    TRY(cudaMemset(r.w, 0, n * sizeof(float)), "cudaMemset");
  }
  TRY(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  fh_cuda_kernel_fn fn = fh__tensor_cuda_kernels[FH_K_BINARY];
  TRY(cudaStreamBeginCapture(r.s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int k = 0; k < K; ++k) {
    fh_ew_args a = bench_add_args(r.buf + (size_t)(k + 1) * n, r.buf + (size_t)k * n, r.w, n);
    if (fn(&a, (void *)r.s) != FH_OK) {
      cudaGraph_t g = NULL;
      (void)cudaStreamEndCapture(r.s, &g);
      if (g) (void)cudaGraphDestroy(g);
      raw_bench_free(&r);
      return FH_ERR_CUDA;
    }
  }
  TRY(cudaStreamEndCapture(r.s, &r.g), "cudaStreamEndCapture");
  TRY(cudaGraphInstantiate(&r.x, r.g, 0), "cudaGraphInstantiate");
  TRY(bench_graph_replay(r.x, r.s, reps, us), "cudaGraphLaunch");
  raw_bench_free(&r);
  return FH_OK;
}
