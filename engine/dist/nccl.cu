/* The NCCL backend of the distributed layer: one communicator over every
 * rank of the job, one GPU per rank (NCCL shipped with the CUDA toolkit:
 * nccl.h, libnccl). It is bootstrapped by dist.c from MPI: rank 0's
 * ncclUniqueId is broadcast over MPI_COMM_WORLD, then every rank calls
 * ncclCommInitRank. NVLink multicast (NVLS) stays off: dist.c sets
 * NCCL_NVLS_ENABLE=0 before the communicator exists, and fhelium never calls
 * cuMulticastCreate.
 *
 * The collectives are the CUDA side of kernel FH_K_DIST_COLLECTIVE: every
 * part of a launch is one NCCL call, all in one ncclGroupStart/End, enqueued
 * on the launch's stream (ordered like any kernel, and recorded by a stream
 * capture: NCCL's calls are capture-safe). */
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"
#include "dist_internal.h"

static_assert(sizeof(ncclUniqueId) == FH_NCCL_ID_BYTES, "ncclUniqueId size");

bool fh__nccl_available(void) { return true; }

const char *fh__nccl_version(void) {
  static char v[32];
  if (v[0] == '\0') {
    int code = 0;
    if (ncclGetVersion(&code) == ncclSuccess)
      snprintf(v, sizeof v, "NCCL %d.%d.%d", code / 10000, (code % 10000) / 100, code % 100);
    else
      snprintf(v, sizeof v, "NCCL %d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  }
  return v;
}

static fh_status nccl_fail(ncclResult_t r, const char *what, ncclComm_t comm) {
  const char *last = ncclGetLastError(comm);
  return fh_error_set(FH_ERR_CUDA, "%s failed: %s%s%s", what, ncclGetErrorString(r), last && *last ? ": " : "",
                      last ? last : "");
}
#define NCCL_TRY(call, what, comm)                               \
  do {                                                           \
    ncclResult_t r_ = (call);                                    \
    if (r_ != ncclSuccess) return nccl_fail(r_, what, comm);     \
  } while (0)

fh_status fh__nccl_unique_id(unsigned char id[FH_NCCL_ID_BYTES]) {
  ncclUniqueId u;
  NCCL_TRY(ncclGetUniqueId(&u), "ncclGetUniqueId", NULL);
  memcpy(id, u.internal, FH_NCCL_ID_BYTES);
  return FH_OK;
}

fh_status fh__nccl_comm_init(void **comm, int world_size, const unsigned char id[FH_NCCL_ID_BYTES], int rank,
                             int device) {
  fh_status st = fh__cuda_use_device(device);
  if (st != FH_OK) return st;
  ncclUniqueId u;
  memcpy(u.internal, id, FH_NCCL_ID_BYTES);
  ncclComm_t c = NULL;
  NCCL_TRY(ncclCommInitRank(&c, world_size, u, rank), "ncclCommInitRank", NULL);
  *comm = c;
  return FH_OK;
}

void fh__nccl_comm_destroy(void *comm) {
  if (comm != NULL) (void)ncclCommDestroy((ncclComm_t)comm);
}

static ncclDataType_t nccl_type(int t) {
  switch (t) {
    case FH_DIST_T_INT32: return ncclInt32;
    case FH_DIST_T_UINT32: return ncclUint32;
    case FH_DIST_T_INT64: return ncclInt64;
    case FH_DIST_T_UINT64: return ncclUint64;
    case FH_DIST_T_FLOAT32: return ncclFloat32;
    case FH_DIST_T_FLOAT64: return ncclFloat64;
    default: return ncclUint8;
  }
}

static const char *nccl_call_name(int op) {
  switch (op) {
    case FH_DIST_ALL_REDUCE: return "ncclAllReduce";
    case FH_DIST_ALL_GATHER: return "ncclAllGather";
    case FH_DIST_BROADCAST: return "ncclBroadcast";
    case FH_DIST_REDUCE_SCATTER: return "ncclReduceScatter";
    case FH_DIST_SEND: return "ncclSend";
    default: return "ncclRecv";
  }
}

fh_status fh__nccl_collective(const void *args, void *stream) {
  const fh_dist_coll_args *a = (const fh_dist_coll_args *)args;
  ncclComm_t comm = (ncclComm_t)a->comm;
  cudaStream_t s = (cudaStream_t)stream;
  fh_status st = fh__cuda_use_device(a->device);
  if (st != FH_OK) return st;
  if (comm == NULL) return fh_error_set(FH_ERR_STATE, "internal error: no NCCL communicator");
  const char *what = nccl_call_name(a->op);
  NCCL_TRY(ncclGroupStart(), "ncclGroupStart", comm);
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < a->nparts && r == ncclSuccess; ++i) {
    const fh_dist_part *p = &a->part[i];
    ncclDataType_t t = nccl_type(p->type);
    size_t n = (size_t)p->count;
    switch (a->op) {
      case FH_DIST_ALL_REDUCE: r = ncclAllReduce(p->send, p->recv, n, t, ncclSum, comm, s); break;
      case FH_DIST_ALL_GATHER: r = ncclAllGather(p->send, p->recv, n, t, comm, s); break;
      case FH_DIST_BROADCAST: r = ncclBroadcast(p->send, p->recv, n, t, a->peer, comm, s); break;
      case FH_DIST_REDUCE_SCATTER: r = ncclReduceScatter(p->send, p->recv, n, t, ncclSum, comm, s); break;
      case FH_DIST_SEND: r = ncclSend(p->send, n, t, a->peer, comm, s); break;
      case FH_DIST_RECV: r = ncclRecv(p->recv, n, t, a->peer, comm, s); break;
      default: r = ncclInvalidArgument; break;
    }
  }
  ncclResult_t g = ncclGroupEnd();
  if (r != ncclSuccess) return nccl_fail(r, what, comm);
  if (g != ncclSuccess) return nccl_fail(g, "ncclGroupEnd", comm);
  return FH_OK;
}
