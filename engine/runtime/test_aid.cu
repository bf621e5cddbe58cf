/* Test aid (not API): a kernel that faults on purpose (fh_cuda_fault_kernel,
 * fh/cuda_alloc.h), for the specs of the engine's handling of a sticky CUDA
 * error (spec/cuda_fault_spec.lua, docs/faults.md "After a CUDA error"). It
 * poisons the CUDA context of its device for the rest of the process: the
 * specs call it in a subprocess. In a build without CUDA it fails with
 * CudaError (test_aid_none.c). */
#include "cuda_internal.h"

/* A word of device memory the kernel indexes far out of bounds. */
__device__ unsigned long long fault_target[32];

/* Writes 2^45 bytes (32 TiB) past fault_target: no allocation of a device
 * is that close (an H200 has 141 GB, and the runtime keeps the unified
 * address space's regions far apart), so the store hits unmapped memory and
 * the kernel ends with cudaErrorIllegalAddress. `offset` is a parameter so
 * that the compiler cannot prove the store out of bounds. */
__global__ void fault_kernel(size_t offset) {
  volatile unsigned long long *p = fault_target + offset / sizeof(unsigned long long);
  *p = 0xfa17ull;
}

fh_status fh_cuda_fault_kernel(fh_stream *s) {
  fh_status st = fh__cuda_use_device(s->dev.index);
  if (st != FH_OK) return st;
  fault_kernel<<<1, 1, 0, s->h>>>((size_t)1 << 45);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fh__cuda_fail(e, "kernel 'fault'");
  /* the fault is asynchronous: wait for it, so that the error names the kernel */
  e = cudaStreamSynchronize(s->h);
  if (e != cudaSuccess) return fh__cuda_fail(e, "kernel 'fault'");
  return fh_error_set(FH_ERR_CUDA, "kernel 'fault': the out-of-bounds write did not fault (expected "
                                   "cudaErrorIllegalAddress); the context is usable");
}
