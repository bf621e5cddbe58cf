/* Benchmark aids of the execution layer (engine/exec/bench_aid.cu; not
 * API): plain CUDA code run inside the fhelium process, so a benchmark can
 * compare fhelium against a baseline in the same process and device state
 * (scripts/bench/graph.lua). In a build without CUDA every function fails
 * with CudaError (engine/exec/bench_aid_none.c). Nothing is returned but
 * numbers. */
#ifndef FH_BENCH_AID_H
#define FH_BENCH_AID_H

#include "fh/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The raw CUDA graph of scripts/bench/exec_baseline.cu inside this process:
 * a chain of K launches of the add kernel over 4096 float32 in its own
 * cudaMalloc'd buffers (zeros, or uniform [0, 1) when `random`), captured on
 * a fresh non-blocking cudaStream and replayed `reps` times back to back per
 * round; *us gets the median of 15 rounds in microseconds per replay.
 * Synchronizes the device; fails while a capture runs. */
fh_status fh_cuda_raw_graph_bench(int dev, int K, int reps, bool random, double *us);

#ifdef __cplusplus
}
#endif
#endif
