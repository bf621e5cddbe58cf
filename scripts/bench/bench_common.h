/* scripts/bench/bench_common.h: what the plain CUDA C baselines
 * (baseline.cu, exec_baseline.cu) share: a CUDA error check that exits, a
 * monotonic clock, medians, the argument block of the engine's add kernel.
 * Header-only (static inline functions), included by one .cu file per program.
 * Nothing here allocates: callers own every buffer they pass in. */
#ifndef FH_BENCH_COMMON_H
#define FH_BENCH_COMMON_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fh/kernels.h"
#include "fh/launch.h"

/* aborts the program with file, line and CUDA's message when x fails */
#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

/* CLOCK_MONOTONIC in microseconds */
static inline double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
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

/* microseconds per cudaGraphLaunch of x on s: `reps` back-to-back launches
 * then a synchronize, the median of 15 rounds after 3 warm-up rounds */
static inline double bench_graph_replay_us(cudaGraphExec_t x, cudaStream_t s, int reps) {
  double t[15];
  for (int r = -3; r < 15; ++r) {
    CHECK(cudaStreamSynchronize(s));
    double t0 = now_us();
    for (int i = 0; i < reps; ++i) CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    if (r >= 0) t[r] = (now_us() - t0) / reps;
  }
  return median(t, 15);
}

#endif
