/* fhelium_bench_exec_baseline: the plain CUDA C side of
 * scripts/bench/buffer_copy.lua and scripts/bench/graph.lua. Prints
 * "key value" lines (medians; host wall clock):
 *   memcpy_64mib_us        one cudaMemcpyAsync of 64 MiB, pinned host to
 *                          device, then a synchronize
 *   memcpy_4kib_host_us    host time of one cudaMemcpyAsync of 4 KiB pinned
 *                          host to device plus one cudaEventRecord (enqueue
 *                          only), per call, averaged over 1000 calls
 *   graph_K<k>_us          a CUDA graph of k launches of the engine's add
 *                          kernel (fh__tensor_cuda_kernels[FH_K_BINARY], 4096
 *                          float32, out = in + w chained through k buffers),
 *                          replayed 200 times back to back with
 *                          cudaGraphLaunch, then a synchronize: microseconds
 *                          per replay (k = 10, 100, 1000)
 *   graph_K100_scattered_us  the K = 100 graph with each of its 101 buffers
 *                          a separate cudaMalloc of 16 KiB (the layout of a
 *                          capture pool whose blocks are one cudaMalloc each),
 *                          to tell allocation layout from replay overhead
 *   graph_K<k>_2stream_us  the same graphs (k = 10, 100, 1000) measured again
 *                          after eager launches of the add kernel on two
 *                          streams (100 on each of two fresh non-blocking
 *                          streams): the device state every process that
 *                          launches kernels on more than one stream is in,
 *                          fhelium's after any CudaGraphProgram warmup (its
 *                          side stream) -- on the H200 it adds ~175 ns
 *                          between consecutive kernel nodes of every graph
 *                          launched afterwards (scripts/bench/README.md,
 *                          "The two-stream state")
 *   capture_K1000_ms       stream capture of those 1000 launches
 *   instantiate_K1000_ms   cudaGraphInstantiate of that graph
 * Built by CMake (target fhelium_bench_exec_baseline) when CUDA is on. */
#include "bench_common.h"
#include "fh/cuda_alloc.h"

static void add_launch(fh_cuda_kernel_fn fn, float *o, const float *a, const float *b, int n, cudaStream_t s) {
  fh_ew_args args = bench_add_args(o, a, b, n);
  if (fn(&args, (void *)s) != FH_OK) {
    fprintf(stderr, "kernel launch failed\n");
    exit(1);
  }
}

/* A graph of K chained adds (out = in + w through K + 1 buffers of one
 * allocation), zeros or uniform [0, 1) data; microseconds per replay
 * (median of 15 rounds of `reps` back-to-back launches). */
static double chain_graph(fh_cuda_kernel_fn fn, cudaStream_t s, int K, int n, int reps, int random, double *cap_ms,
                          double *inst_ms) {
  float *buf, *w;
  size_t total = (size_t)(K + 1) * n;
  CHECK(cudaMalloc((void **)&buf, total * sizeof(float)));
  CHECK(cudaMalloc((void **)&w, n * sizeof(float)));
  if (random) {
    float *h = (float *)malloc((total + n) * sizeof(float));
    unsigned x = 12345;
    for (size_t i = 0; i < total + n; ++i) {
      x = x * 1664525u + 1013904223u;
      h[i] = (float)(x >> 8) * (1.0f / 16777216.0f);
    }
    CHECK(cudaMemcpy(buf, h, total * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(w, h + total, n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
  } else {
    CHECK(cudaMemset(buf, 0, total * sizeof(float)));
    CHECK(cudaMemset(w, 0, n * sizeof(float)));
  }
  CHECK(cudaDeviceSynchronize());
  double c0 = now_us();
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < K; ++k) add_launch(fn, buf + (size_t)(k + 1) * n, buf + (size_t)k * n, w, n, s);
  cudaGraph_t g;
  CHECK(cudaStreamEndCapture(s, &g));
  double c1 = now_us();
  if (K == 10 && !random && getenv("FHELIUM_GRAPH_DOT")) {
    char path[1024];
    snprintf(path, sizeof path, "%sbaseline_K10.dot", getenv("FHELIUM_GRAPH_DOT"));
    (void)cudaGraphDebugDotPrint(g, path, cudaGraphDebugDotFlagsVerbose);
  }
  cudaGraphExec_t x;
  CHECK(cudaGraphInstantiate(&x, g, 0));
  double c2 = now_us();
  *cap_ms = (c1 - c0) / 1e3;
  *inst_ms = (c2 - c1) / 1e3;
  double us = bench_graph_replay_us(x, s, reps);
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(buf));
  CHECK(cudaFree(w));
  return us;
}

int main(void) {
  CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* ---- copies ---- */
  {
    const size_t N = (size_t)64 << 20;
    void *d, *h;
    CHECK(cudaMalloc(&d, N));
    CHECK(cudaHostAlloc(&h, N, cudaHostAllocPortable));
    memset(h, 1, N);
    double t[21];
    for (int r = -3; r < 21; ++r) {
      CHECK(cudaStreamSynchronize(s));
      double t0 = now_us();
      CHECK(cudaMemcpyAsync(d, h, N, cudaMemcpyHostToDevice, s));
      CHECK(cudaStreamSynchronize(s));
      if (r >= 0) t[r] = now_us() - t0;
    }
    printf("memcpy_64mib_us %.3f\n", median(t, 21));
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    double small[21];
    for (int r = -3; r < 21; ++r) {
      CHECK(cudaStreamSynchronize(s));
      double t0 = now_us();
      for (int i = 0; i < 1000; ++i) {
        CHECK(cudaMemcpyAsync(d, h, 4096, cudaMemcpyHostToDevice, s));
        CHECK(cudaEventRecord(ev, s));
      }
      double t1 = now_us();
      if (r >= 0) small[r] = (t1 - t0) / 1000;
    }
    CHECK(cudaStreamSynchronize(s));
    printf("memcpy_4kib_host_us %.3f\n", median(small, 21));
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(h));
  }

  /* ---- graphs of chained adds ---- */
  const int n = 4096, REPS = 200;
  fh_cuda_kernel_fn fn = fh__tensor_cuda_kernels[FH_K_BINARY];
  const int ks[3] = {10, 100, 1000};
  for (int ki = 0; ki < 3; ++ki) {
    int K = ks[ki];
    double cap_ms, inst_ms;
    double us = chain_graph(fn, s, K, n, REPS, 0, &cap_ms, &inst_ms);
    if (K == 1000) {
      printf("capture_K1000_ms %.3f\n", cap_ms);
      printf("instantiate_K1000_ms %.3f\n", inst_ms);
    }
    printf("graph_K%d_us %.3f\n", K, us);
  }
  /* ---- the K = 100 graph over separately allocated buffers ---- */
  {
    const int K = 100;
    float *bufs[K + 1], *w;
    for (int k = 0; k <= K; ++k) {
      CHECK(cudaMalloc((void **)&bufs[k], n * sizeof(float)));
      CHECK(cudaMemset(bufs[k], 0, n * sizeof(float)));
    }
    CHECK(cudaMalloc((void **)&w, n * sizeof(float)));
    CHECK(cudaMemset(w, 0, n * sizeof(float)));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < K; ++k) add_launch(fn, bufs[k + 1], bufs[k], w, n, s);
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    printf("graph_K100_scattered_us %.3f\n", bench_graph_replay_us(x, s, REPS));
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    for (int k = 0; k <= K; ++k) CHECK(cudaFree(bufs[k]));
    CHECK(cudaFree(w));
  }
  /* ---- the same chains in the two-stream state (this must come last: the
   * state lasts for the rest of the process) ---- */
  {
    float *a, *w;
    CHECK(cudaMalloc((void **)&a, n * sizeof(float)));
    CHECK(cudaMalloc((void **)&w, n * sizeof(float)));
    CHECK(cudaMemset(a, 0, n * sizeof(float)));
    CHECK(cudaMemset(w, 0, n * sizeof(float)));
    for (int j = 0; j < 2; ++j) {
      cudaStream_t e;
      CHECK(cudaStreamCreateWithFlags(&e, cudaStreamNonBlocking));
      for (int i = 0; i < 100; ++i) add_launch(fn, a, a, w, n, e);
      CHECK(cudaStreamSynchronize(e));
      CHECK(cudaStreamDestroy(e));
    }
    CHECK(cudaFree(a));
    CHECK(cudaFree(w));
    for (int ki = 0; ki < 3; ++ki) {
      double cap_ms, inst_ms;
      printf("graph_K%d_2stream_us %.3f\n", ks[ki], chain_graph(fn, s, ks[ki], n, REPS, 0, &cap_ms, &inst_ms));
    }
  }
  CHECK(cudaStreamDestroy(s));
  return 0;
}
