/* The distributed layer's backends (not engine API): MPI (mpi.c, or
 * mpi_absent.c in a build without MPI) and NCCL (nccl.cu, or nccl_absent.c
 * in a build without NCCL), and the modular kernels. dist.c holds what is
 * common: the job's state, agreement, planning, and the launches. */
#ifndef FH_DIST_INTERNAL_H
#define FH_DIST_INTERNAL_H

#include "fh/dist.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- MPI ------------------------------------------------------------------------ */
/* MPI_Init_thread(FUNNELED) unless MPI is already initialised; fills rank,
 * world_size, local_rank, local_size (MPI_COMM_TYPE_SHARED) and host. */
fh_status fh__mpi_init(fh_dist_info *info);
/* Every rank's `n` bytes into recv (world_size * n bytes, rank order). */
fh_status fh__mpi_allgather(const void *send, size_t n, void *recv);
/* Every rank's lens[r] bytes (known to all) into recv (their sum, in rank order). */
fh_status fh__mpi_allgatherv(const void *send, size_t n, const size_t *lens, void *recv);
/* Exchange with `peer`: send n bytes, receive m bytes. */
fh_status fh__mpi_sendrecv(int peer, const void *send, size_t n, void *recv, size_t m);
fh_status fh__mpi_bcast(void *buf, size_t n, int root);
fh_status fh__mpi_send(int peer, const void *buf, size_t n, int tag);
fh_status fh__mpi_recv(int peer, void *buf, size_t n, int tag);
fh_status fh__mpi_barrier(void);
void fh__mpi_abort(int code);
void fh__mpi_finalize(void);
const char *fh__mpi_version(void);
bool fh__mpi_available(void);
/* The CPU implementation of FH_K_DIST_COLLECTIVE with world_size > 1. */
fh_status fh__mpi_collective(const fh_dist_coll_args *a);

/* ---- NCCL ----------------------------------------------------------------------- */
#define FH_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */
bool fh__nccl_available(void);
const char *fh__nccl_version(void);
/* ncclGetUniqueId (rank 0 of the job). */
fh_status fh__nccl_unique_id(unsigned char id[FH_NCCL_ID_BYTES]);
/* ncclCommInitRank on CUDA device `device` (collective over every rank). */
fh_status fh__nccl_comm_init(void **comm, int world_size, const unsigned char id[FH_NCCL_ID_BYTES], int rank,
                             int device);
void fh__nccl_comm_destroy(void *comm);
/* The CUDA implementation of FH_K_DIST_COLLECTIVE (grouped NCCL calls on `stream`). */
fh_status fh__nccl_collective(const void *args, void *stream);

/* ---- modular kernels --------------------------------------------------------------- */
fh_status fh__dist_cuda_mod_split(const void *args, void *stream);
fh_status fh__dist_cuda_mod_join(const void *args, void *stream);

#ifdef __cplusplus
}
#endif
#endif
