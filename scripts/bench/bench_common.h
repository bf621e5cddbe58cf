/* scripts/bench/bench_common.h: what the plain CUDA C baselines
 * (baseline.cu, exec_baseline.cu) share: a CUDA error check
 * that exits and graph replay timing that exits on errors; the clock,
 * medians and the add kernel's argument block come from
 * engine/exec/bench_shared.cuh.
 * Header-only (static inline functions), included by one .cu file per program.
 * Nothing here allocates: callers own every buffer they pass in. */
#ifndef FH_BENCH_COMMON_H
#define FH_BENCH_COMMON_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_shared.cuh" /* engine/exec: bench_add_args */
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

/* microseconds per cudaGraphLaunch of x on s: `reps` back-to-back launches
 * then a synchronize, the median of 15 rounds after 3 warm-up rounds */
static inline double bench_graph_replay_us(cudaGraphExec_t x, cudaStream_t s, int reps) {
  double us = 0;
  CHECK(bench_graph_replay(x, s, reps, &us));
  return us;
}

#endif
