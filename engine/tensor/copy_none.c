/* The CUDA side of the tensor layer in a build without CUDA
 * (engine/tensor/copy.cu otherwise): copies that involve a CUDA device fail
 * with CudaError. */
#include "fh/internal.h"

fh_status fh__cuda_copy_across(fh_tensor *dst, fh_tensor *src, fh_stream *stream, bool non_blocking) {
  (void)dst;
  (void)src;
  (void)stream;
  (void)non_blocking;
  return fh_error_set(FH_ERR_CUDA, "no CUDA device is present (fhelium was built without CUDA)");
}
