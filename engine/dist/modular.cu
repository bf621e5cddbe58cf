/* CUDA kernels of the modular sums (fh/dist.h, "Modular sums"): the split of
 * residues into halves before a sum that could exceed 64 bits, and the join
 * that reduces the summed values modulo each limb row's prime. The CPU
 * versions are in dist.c; both compute the same formulas (fh/modarith.h), so
 * CUDA ranks and CPU ranks give identical residues. */
#include "cuda_internal.h"
#include "dist_internal.h"

#define THREADS 256

static int blocks_for(uint64_t n) {
  uint64_t b = (n + THREADS - 1) / THREADS;
  return (int)(b > 65535 * 8 ? 65535 * 8 : (b == 0 ? 1 : b));
}

/* in [chunks * numel] -> out [chunks, 2, numel]: low 32 bits, then the rest */
__global__ void mod_split(uint64_t *out, const uint64_t *in, uint64_t numel, uint64_t total) {
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (uint64_t)gridDim.x * blockDim.x) {
    uint64_t c = i / numel, j = i - c * numel, x = in[i];
    out[c * 2 * numel + j] = x & 0xffffffffULL;
    out[c * 2 * numel + numel + j] = x >> 32;
  }
}

/* sums (split: [2, numel] halves) -> residues mod the row's prime */
__global__ void mod_join(__grid_constant__ const fh_dist_mod_args a) {
  __shared__ fh_modulus mods[FH_RNS_MAX_LIMBS];
  for (int k = threadIdx.x; k < a.nmoduli; k += blockDim.x) mods[k] = a.mod[k];
  __syncthreads();
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.numel;
       i += (uint64_t)gridDim.x * blockDim.x) {
    const fh_modulus *m = &mods[(i / a.ncols) % (uint64_t)a.nmoduli];
    uint64_t lo, hi;
    if (a.split) {
      /* x = hi_sum * 2^32 + lo_sum < 2^96 */
      uint64_t l = a.in[i], h = a.in[a.numel + i];
      lo = l + (h << 32);
      hi = (h >> 32) + (lo < l);
    } else {
      lo = a.in[i];
      hi = 0;
    }
    a.out[i] = fh_barrett128(lo, hi, m);
  }
}

static fh_status launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fh__cuda_fail(e, what);
  return FH_OK;
}

extern "C" fh_status fh__dist_cuda_mod_split(const void *args, void *stream) {
  const fh_dist_mod_args *a = (const fh_dist_mod_args *)args;
  uint64_t total = a->numel * a->chunks;
  if (total == 0) return FH_OK;
  mod_split<<<blocks_for(total), THREADS, 0, (cudaStream_t)stream>>>(a->out, a->in, a->numel, total);
  return launched("kernel 'dist_mod_split'");
}

extern "C" fh_status fh__dist_cuda_mod_join(const void *args, void *stream) {
  const fh_dist_mod_args *a = (const fh_dist_mod_args *)args;
  if (a->numel == 0) return FH_OK;
  mod_join<<<blocks_for(a->numel), THREADS, 0, (cudaStream_t)stream>>>(*a);
  return launched("kernel 'dist_mod_join'");
}
