/* What the engine's benchmark aids (engine/exec/bench_aid.cu) share with
 * the plain CUDA C baselines (the .cu files of scripts/bench, through bench_common.h):
 * the clock, medians, graph replay timing and the argument block of the
 * engine's add kernel. Not API. Everything here is static: each
 * including file gets its own copy. Nothing here allocates; callers own
 * every buffer they pass in. */
#ifndef FH_BENCH_SHARED_CUH
#define FH_BENCH_SHARED_CUH

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fh/kernels.h"

/* CLOCK_MONOTONIC in microseconds */
static inline double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
/* the median of v[0..n) (sorts v in place) */
static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* *us = microseconds per cudaGraphLaunch of x on s: `reps` back-to-back
 * launches then a synchronize, the median of 15 rounds after 3 warm-up
 * rounds; the first CUDA error stops it */
static inline cudaError_t bench_graph_replay(cudaGraphExec_t x, cudaStream_t s, int reps, double *us) {
  double t[15];
  cudaError_t e = cudaSuccess;
  for (int r = -3; r < 15 && e == cudaSuccess; ++r) {
    if ((e = cudaStreamSynchronize(s)) != cudaSuccess) break;
    double t0 = now_us();
    for (int i = 0; i < reps && e == cudaSuccess; ++i) e = cudaGraphLaunch(x, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (r >= 0) t[r] = (now_us() - t0) / reps;
  }
  if (e == cudaSuccess) *us = median(t, 15);
  return e;
}

/* the FH_K_BINARY argument block of o = a + b over n contiguous float32 */
static inline fh_ew_args bench_add_args(float *o, const float *a, const float *b, int n) {
  fh_ew_args args;
  memset(&args, 0, sizeof args);
  args.it.ndim = 1;
  args.it.numel = n;
  args.it.shape[0] = n;
  args.op = FH_OP_ADD;
  args.dtype = FH_FLOAT32;
  args.out.data = (char *)o;
  args.a.data = (char *)a;
  args.b.data = (char *)b;
  args.out.stride[0] = args.a.stride[0] = args.b.stride[0] = 1;
  return args;
}

#endif
