/* The test aid of test_aid.cu in a build without CUDA. */
#include "fh/cuda_alloc.h"

fh_status fh_cuda_fault_kernel(fh_stream *s) {
  (void)s;
  return fh_error_set(FH_ERR_CUDA, "no CUDA device is present (fhelium was built without CUDA)");
}
