/* The benchmark aids (fh/bench_aid.h) in a build without CUDA
 * (engine/exec/bench_aid.cu otherwise). */
#include "fh/bench_aid.h"

fh_status fh_cuda_raw_graph_bench(int dev, int K, int reps, bool random, double *us) {
  (void)dev;
  (void)K;
  (void)reps;
  (void)random;
  *us = 0;
  return fh_error_set(FH_ERR_CUDA, "no CUDA device is present (fhelium was built without CUDA)");
}
