/* CUDA implementations of the CKKS kernels (fh/ckks_kernels.h). None yet:
 * every CKKS launch on a CUDA device fails with "kernel '<name>' has no CUDA
 * implementation" until they land. */
#include "fh/ckks_kernels.h"

const fh_cuda_kernel_fn fh__ckks_cuda_kernels[FH_K_CKKS_COUNT] = {};
