/* The distributed layer in a build without NCCL (no CUDA, or CMake found no
 * nccl.h / libnccl): no rank can choose the CUDA device kind, so CUDA tensors
 * never reach a collective (fh_dist_check refuses them first). */
#include "dist_internal.h"

#define NO_NCCL "fhelium was built without NCCL (it comes with the CUDA toolkit: nccl.h and libnccl; reconfigure " \
                "with them found), so ranks cannot use their GPUs for collectives"

bool fh__nccl_available(void) { return false; }
const char *fh__nccl_version(void) { return ""; }
fh_status fh__nccl_unique_id(unsigned char id[FH_NCCL_ID_BYTES]) { return fh_error_set(FH_ERR_CUDA, NO_NCCL); }
fh_status fh__nccl_comm_init(void **comm, int world_size, const unsigned char id[FH_NCCL_ID_BYTES], int rank,
                             int device) {
  return fh_error_set(FH_ERR_CUDA, NO_NCCL);
}
void fh__nccl_comm_destroy(void *comm) {}
fh_status fh__nccl_collective(const void *args, void *stream) { return fh_error_set(FH_ERR_CUDA, NO_NCCL); }
