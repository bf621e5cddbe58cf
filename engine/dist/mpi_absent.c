/* The distributed layer in a build without MPI (CMake found no MPI): a job
 * is one rank. fh_dist_init refuses a process started by a launcher, so none
 * of the exchanges below is reached with more than one rank. */
#include <stdlib.h>

#include "dist_internal.h"

#define NO_MPI "fhelium was built without MPI (install libopenmpi-dev, then reconfigure and rebuild)"

bool fh__mpi_available(void) { return false; }
const char *fh__mpi_version(void) { return ""; }
fh_status fh__mpi_init(fh_dist_info *info) {
  (void)info;
  return fh_error_set(FH_ERR_STATE, NO_MPI);
}
fh_status fh__mpi_allgather(const void *send, size_t n, void *recv) { return fh_error_set(FH_ERR_STATE, NO_MPI); }
fh_status fh__mpi_allgatherv(const void *send, size_t n, const size_t *lens, void *recv) {
  return fh_error_set(FH_ERR_STATE, NO_MPI);
}
fh_status fh__mpi_sendrecv(int peer, const void *send, size_t n, void *recv, size_t m) {
  return fh_error_set(FH_ERR_STATE, NO_MPI);
}
fh_status fh__mpi_bcast(void *buf, size_t n, int root) { return fh_error_set(FH_ERR_STATE, NO_MPI); }
fh_status fh__mpi_send(int peer, const void *buf, size_t n, int tag) { return fh_error_set(FH_ERR_STATE, NO_MPI); }
fh_status fh__mpi_recv(int peer, void *buf, size_t n, int tag) { return fh_error_set(FH_ERR_STATE, NO_MPI); }
fh_status fh__mpi_barrier(void) { return fh_error_set(FH_ERR_STATE, NO_MPI); }
void fh__mpi_abort(int code) { exit(code); }
void fh__mpi_finalize(void) {}
fh_status fh__mpi_collective(const fh_dist_coll_args *a) { return fh_error_set(FH_ERR_STATE, NO_MPI); }
