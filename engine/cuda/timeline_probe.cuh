/* The timeline probe's device code (benchmark aid, not API), shared by
 * engine/cuda/bench_aid.cu (fh_cuda_raw_graph_probe) and
 * scripts/bench/gap_probe.cu: an add kernel that stamps when each launch
 * starts and ends, a kernel that counts SM cycles against the global timer,
 * and the host-side summary of the stamps. Everything here is static: each
 * including file gets its own copy. Nothing here allocates; callers own
 * every buffer they pass in. */
#ifndef FH_TIMELINE_PROBE_CUH
#define FH_TIMELINE_PROBE_CUH

/* %globaltimer, ns */
static __device__ __forceinline__ unsigned long long fh_probe_gtime(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* out = a + b over n floats; atomically lowers *first to this launch's
 * earliest block start and raises *last to its latest block end (so reset
 * them to ~0 and 0 before a stamped replay) */
static __global__ void fh_probe_stamped_add(float *out, const float *a, const float *b, int n,
                                            unsigned long long *first, unsigned long long *last) {
  if (threadIdx.x == 0) atomicMin(first, fh_probe_gtime());
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = a[i] + b[i];
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(last, fh_probe_gtime());
}

/* one thread spins for `cycles` SM clock cycles: out[0] cycles counted,
 * out[1] ns elapsed on the global timer */
static __global__ void fh_probe_clock_rate(unsigned long long cycles, unsigned long long *out) {
  unsigned long long t0 = fh_probe_gtime();
  long long c0 = clock64(), c;
  do {
    c = clock64();
  } while ((unsigned long long)(c - c0) < cycles);
  unsigned long long t1 = fh_probe_gtime();
  out[0] = (unsigned long long)(c - c0);
  out[1] = t1 - t0;
}

/* stamps[2k], stamps[2k + 1]: first start and last end of launch k of a
 * chain of K >= 2; *kernel_ns = mean launch duration, *gap_ns = mean time
 * from one launch's end to the next one's start */
static inline void fh_probe_summarize(const unsigned long long *stamps, int K, double *kernel_ns, double *gap_ns) {
  double sd = 0, sg = 0;
  for (int k = 0; k < K; ++k) sd += (double)(stamps[2 * k + 1] - stamps[2 * k]);
  for (int k = 1; k < K; ++k) sg += (double)stamps[2 * k] - (double)stamps[2 * k - 1];
  *kernel_ns = sd / K;
  *gap_ns = sg / (K - 1);
}

#endif
