/* The MPI backend of the distributed layer (Open MPI from Debian,
 * libopenmpi-dev): startup, host exchanges for agreement and serialized
 * trees, and the CPU collectives (kernel FH_K_DIST_COLLECTIVE on the CPU).
 *
 * Errors: MPI_COMM_WORLD keeps MPI's default handler (MPI_ERRORS_ARE_FATAL):
 * a failing MPI call ends the job with MPI's own message, as does a rank that
 * dies (mpirun then stops every rank). Return codes are checked anyway.
 *
 * Counts: MPI counts are int; host byte exchanges go in pieces of at most
 * INT_MAX bytes, and collectives on tensors were limited to INT_MAX
 * elements per tensor by fh_dist_check. */
#include <dlfcn.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_internal.h"

/* In a sanitizer build, what Open MPI allocates inside its calls (process
 * lifetime state it never frees) is not fhelium's to report: LeakSanitizer
 * ignores the allocations this thread makes inside every MPI call. */
#ifdef FH_SANITIZE
#include <link.h>
#include <sanitizer/lsan_interface.h>
#define LSAN_OFF() __lsan_disable()
#define LSAN_ON() __lsan_enable()
/* Open MPI's helper threads (PMIx) allocate outside MPI calls, and Open MPI
 * unloads its plugins at MPI_Finalize, so LeakSanitizer could not even name
 * them: keep every loaded Open MPI / PMIx object loaded (RTLD_NODELETE), so
 * that scripts/lsan-mpi.supp can suppress those allocations by library. */
static int pin_object(struct dl_phdr_info *info, size_t size, void *data) {
  const char *n = info->dlpi_name;
  if (n && (strstr(n, "pmix") || strstr(n, "openmpi") || strstr(n, "libmpi") || strstr(n, "libopen-") ||
            strstr(n, "hwloc") || strstr(n, "libevent")))
    (void)dlopen(n, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  return 0;
}
static void pin_mpi_objects(void) { dl_iterate_phdr(pin_object, NULL); }
#else
static void pin_mpi_objects(void) {}
#define LSAN_OFF() ((void)0)
#define LSAN_ON() ((void)0)
#endif

static bool mpi_inited_here;

bool fh__mpi_available(void) { return true; }

const char *fh__mpi_version(void) {
  static char v[MPI_MAX_LIBRARY_VERSION_STRING + 1];
  if (v[0] == '\0') {
    int n = 0;
    MPI_Get_library_version(v, &n);
    /* first line only ("Open MPI v4.1.4, package: ...") */
    char *nl = strchr(v, '\n');
    if (nl) *nl = '\0';
    char *comma = strstr(v, ", package");
    if (comma) *comma = '\0';
  }
  return v;
}

static fh_status mpi_fail(int rc, const char *what) {
  char s[MPI_MAX_ERROR_STRING + 1];
  int n = 0;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
  return fh_error_set(FH_ERR_EXECUTION, "%s failed: %s", what, s);
}
#define MPI_TRY(call, what)                                 \
  do {                                                      \
    LSAN_OFF();                                             \
    int rc_ = (call);                                       \
    LSAN_ON();                                              \
    if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, what);     \
  } while (0)

/* Open MPI loads its components (mca_*.so) with dlopen, and they resolve
 * symbols of libmpi and libopen-pal globally. When fhelium is a Lua module
 * loaded by plain LuaJIT (RTLD_LOCAL), libmpi came in locally: promote it to
 * the global scope first (what mpi4py does). The fhelium executable links
 * it directly, where this changes nothing. */
static void promote_libmpi(void) {
  Dl_info info;
  if (dladdr((void *)&MPI_Init_thread, &info) && info.dli_fname) {
    void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    (void)h; /* kept open for the life of the process */
  }
}

fh_status fh__mpi_init(fh_dist_info *info) {
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    promote_libmpi();
    MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    mpi_inited_here = true;
    pin_mpi_objects();
  }
  int rank = 0, size = 1;
  MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  MPI_TRY(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  MPI_Comm local;
  MPI_TRY(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
  int lrank = 0, lsize = 1;
  LSAN_OFF();
  MPI_Comm_rank(local, &lrank);
  MPI_Comm_size(local, &lsize);
  MPI_Comm_free(&local);
  char host[MPI_MAX_PROCESSOR_NAME + 1];
  int hl = 0;
  int hrc = MPI_Get_processor_name(host, &hl);
  LSAN_ON();
  if (hrc != MPI_SUCCESS) snprintf(host, sizeof host, "?");
  info->rank = rank;
  info->world_size = size;
  info->local_rank = lrank;
  info->local_size = lsize;
  snprintf(info->host, sizeof info->host, "%.63s", host);
  return FH_OK;
}

fh_status fh__mpi_allgather(const void *send, size_t n, void *recv) {
  if (n > INT_MAX) return fh_error_set(FH_ERR_VALUE, "internal error: %zu bytes in one host exchange", n);
  MPI_TRY(MPI_Allgather(send, (int)n, MPI_BYTE, recv, (int)n, MPI_BYTE, MPI_COMM_WORLD), "MPI_Allgather");
  return FH_OK;
}

fh_status fh__mpi_allgatherv(const void *send, size_t n, const size_t *lens, void *recv) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int *counts = fh_malloc(sizeof(int) * (size_t)size * 2);
  if (counts == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory exchanging host data");
  int *displs = counts + size;
  size_t off = 0;
  for (int r = 0; r < size; ++r) {
    if (lens[r] > INT_MAX || off > INT_MAX) {
      fh_free(counts);
      return fh_error_set(FH_ERR_VALUE, "internal error: too many bytes in one host exchange");
    }
    counts[r] = (int)lens[r];
    displs[r] = (int)off;
    off += lens[r];
  }
  LSAN_OFF();
  int rc = MPI_Allgatherv(send, (int)n, MPI_BYTE, recv, counts, displs, MPI_BYTE, MPI_COMM_WORLD);
  LSAN_ON();
  fh_free(counts);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Allgatherv");
  return FH_OK;
}

fh_status fh__mpi_sendrecv(int peer, const void *send, size_t n, void *recv, size_t m) {
  if (n > INT_MAX || m > INT_MAX) return fh_error_set(FH_ERR_VALUE, "internal error: too many bytes in one exchange");
  MPI_TRY(MPI_Sendrecv(send, (int)n, MPI_BYTE, peer, 7, recv, (int)m, MPI_BYTE, peer, 7, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE),
          "MPI_Sendrecv");
  return FH_OK;
}

fh_status fh__mpi_bcast(void *buf, size_t n, int root) {
  for (size_t off = 0; off < n;) {
    size_t k = n - off > INT_MAX ? INT_MAX : n - off;
    MPI_TRY(MPI_Bcast((char *)buf + off, (int)k, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    off += k;
  }
  return FH_OK;
}

fh_status fh__mpi_send(int peer, const void *buf, size_t n, int tag) {
  for (size_t off = 0; off < n;) {
    size_t k = n - off > INT_MAX ? INT_MAX : n - off;
    MPI_TRY(MPI_Send((const char *)buf + off, (int)k, MPI_BYTE, peer, tag, MPI_COMM_WORLD), "MPI_Send");
    off += k;
  }
  return FH_OK;
}

fh_status fh__mpi_recv(int peer, void *buf, size_t n, int tag) {
  for (size_t off = 0; off < n;) {
    size_t k = n - off > INT_MAX ? INT_MAX : n - off;
    MPI_TRY(MPI_Recv((char *)buf + off, (int)k, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
    off += k;
  }
  return FH_OK;
}

fh_status fh__mpi_barrier(void) {
  MPI_TRY(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  return FH_OK;
}

void fh__mpi_abort(int code) {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

void fh__mpi_finalize(void) {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin && mpi_inited_here) {
    LSAN_OFF();
    MPI_Finalize();
    LSAN_ON();
  }
}

static MPI_Datatype mpi_type(int t) {
  switch (t) {
    case FH_DIST_T_INT32: return MPI_INT32_T;
    case FH_DIST_T_UINT32: return MPI_UINT32_T;
    case FH_DIST_T_INT64: return MPI_INT64_T;
    case FH_DIST_T_UINT64: return MPI_UINT64_T;
    case FH_DIST_T_FLOAT32: return MPI_FLOAT;
    case FH_DIST_T_FLOAT64: return MPI_DOUBLE;
    default: return MPI_UINT8_T;
  }
}

static size_t type_size(int t) {
  switch (t) {
    case FH_DIST_T_INT32: case FH_DIST_T_UINT32: case FH_DIST_T_FLOAT32: return 4;
    case FH_DIST_T_INT64: case FH_DIST_T_UINT64: case FH_DIST_T_FLOAT64: return 8;
    default: return 1;
  }
}

fh_status fh__mpi_collective(const fh_dist_coll_args *a) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int i = 0; i < a->nparts; ++i) {
    const fh_dist_part *p = &a->part[i];
    MPI_Datatype t = mpi_type(p->type);
    int count = (int)p->count; /* <= INT_MAX: fh_dist_check */
    const void *send = p->send == p->recv ? MPI_IN_PLACE : p->send;
    switch (a->op) {
      case FH_DIST_ALL_REDUCE:
        MPI_TRY(MPI_Allreduce(send, p->recv, count, t, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        break;
      case FH_DIST_ALL_GATHER:
        MPI_TRY(MPI_Allgather(p->send, count, t, p->recv, count, t, MPI_COMM_WORLD), "MPI_Allgather");
        break;
      case FH_DIST_BROADCAST:
        if (rank == a->peer && p->send != p->recv) memcpy(p->recv, p->send, p->count * type_size(p->type));
        MPI_TRY(MPI_Bcast(p->recv, count, t, a->peer, MPI_COMM_WORLD), "MPI_Bcast");
        break;
      case FH_DIST_REDUCE_SCATTER:
        MPI_TRY(MPI_Reduce_scatter_block(p->send, p->recv, count, t, MPI_SUM, MPI_COMM_WORLD),
                "MPI_Reduce_scatter_block");
        break;
      case FH_DIST_SEND:
        MPI_TRY(MPI_Send(p->send, count, t, a->peer, 100 + i, MPI_COMM_WORLD), "MPI_Send");
        break;
      case FH_DIST_RECV:
        MPI_TRY(MPI_Recv(p->recv, count, t, a->peer, 100 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
        break;
      default: return fh_error_set(FH_ERR_EXECUTION, "internal error: collective %d", (int)a->op);
    }
  }
  return FH_OK;
}
