/* The distributed layer (fh/dist.h): the job's state, agreement across
 * ranks, local checks, and the collectives as launches. The backends are
 * mpi.c (or mpi_absent.c) and nccl.cu (or nccl_absent.c); the CUDA modular
 * kernels are in modular.cu. */
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist_internal.h"
#include "fh/internal.h"

static fh_dist_info g_info;
static bool g_init;
static bool g_mpi_up; /* MPI initialised by fh_dist_init */
static void *g_comm;  /* ncclComm_t */
static bool g_exit_registered, g_comm_exit_registered;

bool fh_dist_initialized(void) { return g_init; }
const fh_dist_info *fh_dist_info_get(void) { return &g_info; }
bool fh_dist_built_with_mpi(void) { return fh__mpi_available(); }
bool fh_dist_built_with_nccl(void) { return fh__nccl_available(); }
const char *fh_dist_mpi_version(void) { return fh__mpi_version(); }
const char *fh_dist_nccl_version(void) { return fh__nccl_version(); }

bool fh_dist_launched_env(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", NULL};
  for (int i = 0; vars[i]; ++i) {
    const char *v = getenv(vars[i]);
    if (v && *v) return true;
  }
  return false;
}

const char *fh_dist_op_name(fh_dist_op op) {
  static const char *const names[FH_DIST_OP_COUNT] = {"all_reduce", "all_gather", "broadcast", "reduce_scatter",
                                                       "send", "recv"};
  return op >= 0 && op < FH_DIST_OP_COUNT ? names[op] : "?";
}

static const char *kind_name(int k) { return k == FH_DIST_CUDA ? "cuda" : k == FH_DIST_CPU ? "cpu" : "auto"; }

/* ---- exit ------------------------------------------------------------------------- */
static void destroy_comm(void) {
  void *c = g_comm;
  g_comm = NULL;
  fh__nccl_comm_destroy(c);
}

void fh_dist_finalize(void) {
  destroy_comm();
  g_init = false;
  if (g_mpi_up) {
    g_mpi_up = false;
    fh__mpi_finalize();
  }
}

static void at_exit(void) { fh_dist_finalize(); }

void fh_dist_abort(int code) {
  fflush(stdout);
  fflush(stderr);
  if (g_mpi_up) fh__mpi_abort(code);
  exit(code);
}

fh_status fh_dist_barrier(void) {
  if (!g_init) return fh_error_set(FH_ERR_STATE, "fh.distributed.barrier: fh.distributed.init() has not been called");
  if (g_info.world_size == 1) return FH_OK;
  return fh__mpi_barrier();
}

/* ---- agreement -------------------------------------------------------------------- */
typedef struct claim {
  int32_t status;
  uint32_t len; /* of the description (status OK) or of the message (failed) */
  unsigned char hash[crypto_hash_sha256_BYTES];
} claim;

static void excerpt(const char *d, size_t len, size_t at, char *buf, size_t size) {
  size_t start = at > 60 ? at - 60 : 0, end = at + 90 < len ? at + 90 : len;
  snprintf(buf, size, "%s%.*s%s", start ? "..." : "", (int)(end - start), d + start, end < len ? "..." : "");
}

/* The message of rank r's failure, without a leading "<what>: ". */
static const char *strip_name(const char *what, const char *msg) {
  size_t n = strlen(what);
  if (strncmp(msg, what, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') return msg + n + 2;
  return msg;
}

fh_status fh_dist_agree(const char *what, fh_status local, const char *desc, size_t desc_len, int peer) {
  int W = g_info.world_size, me = g_info.rank;
  if (W <= 1) return local; /* a job of one rank (or before init): nobody to tell */
  /* keep this rank's own error: the exchanges below may record others */
  char own[FH_ERROR_MESSAGE_MAX + 1] = "";
  if (local != FH_OK) snprintf(own, sizeof own, "%s", fh_error_message());
  const char *payload = local != FH_OK ? own : desc;
  size_t plen = local != FH_OK ? strlen(own) : desc_len;
  if (plen > INT_MAX / 4) plen = INT_MAX / 4;
  claim mine;
  memset(&mine, 0, sizeof mine);
  mine.status = (int32_t)local;
  mine.len = (uint32_t)plen;
  if (local == FH_OK) crypto_hash_sha256(mine.hash, (const unsigned char *)desc, (unsigned long long)desc_len);

  int n = peer >= 0 ? 2 : W;
  claim *all = fh_calloc((size_t)n, sizeof *all);
  if (all == NULL) return fh_error_set(FH_ERR_MEMORY, "%s: out of memory comparing the ranks' arguments", what);
  /* all[k] is rank ranks[k]'s claim */
  int ranks[2] = {me < peer ? me : peer, me < peer ? peer : me};
  fh_status st;
  if (peer >= 0) {
    int mi = me < peer ? 0 : 1;
    all[mi] = mine;
    st = fh__mpi_sendrecv(peer, &mine, sizeof mine, &all[1 - mi], sizeof mine);
  } else {
    st = fh__mpi_allgather(&mine, sizeof mine, all);
  }
  if (st != FH_OK) {
    fh_free(all);
    return st;
  }
#define RANK_OF(k) (peer >= 0 ? ranks[k] : (k))
  bool agree = true;
  for (int k = 0; k < n; ++k) {
    if (all[k].status != FH_OK || all[k].len != all[0].len || memcmp(all[k].hash, all[0].hash, sizeof mine.hash)) {
      agree = false;
      break;
    }
  }
  if (agree) {
    fh_free(all);
    return FH_OK;
  }
  /* details: every rank's payload (its message or its description) */
  size_t *lens = fh_malloc(sizeof(size_t) * (size_t)n), total = 0;
  if (lens == NULL) {
    fh_free(all);
    return fh_error_set(FH_ERR_MEMORY, "%s: out of memory comparing the ranks' arguments", what);
  }
  for (int k = 0; k < n; ++k) total += (lens[k] = all[k].len);
  char *buf = fh_malloc(total + 1);
  if (buf == NULL) {
    fh_free(all);
    fh_free(lens);
    return fh_error_set(FH_ERR_MEMORY, "%s: out of memory comparing the ranks' arguments", what);
  }
  if (peer >= 0) {
    int mi = me < peer ? 0 : 1;
    char *mine_at = buf + (mi == 0 ? 0 : lens[0]);
    char *theirs_at = buf + (mi == 0 ? lens[0] : 0);
    memcpy(mine_at, payload, plen);
    st = fh__mpi_sendrecv(peer, payload, plen, theirs_at, lens[1 - mi]);
  } else {
    st = fh__mpi_allgatherv(payload, plen, lens, buf);
  }
  if (st != FH_OK) {
    fh_free(all);
    fh_free(lens);
    fh_free(buf);
    return st;
  }
  buf[total] = '\0';
  size_t *off = fh_malloc(sizeof(size_t) * (size_t)n);
  if (off == NULL) {
    fh_free(all);
    fh_free(lens);
    fh_free(buf);
    return fh_error_set(FH_ERR_MEMORY, "%s: out of memory comparing the ranks' arguments", what);
  }
  for (int k = 0, o = 0; k < n; o += (int)lens[k], ++k) off[k] = (size_t)o;
  int failed = -1;
  for (int k = 0; k < n && failed < 0; ++k)
    if (all[k].status != FH_OK) failed = k;
  fh_status result;
  if (local != FH_OK) {
    result = fh_error_set(local, "%s", own); /* this rank's own error, unchanged */
  } else if (failed >= 0) {
    char msg[FH_ERROR_MESSAGE_MAX + 1];
    snprintf(msg, sizeof msg, "%.*s", (int)lens[failed], buf + off[failed]);
    result = fh_error_set((fh_status)all[failed].status,
                          "%s: rank %d failed, so no rank runs the %s (every rank raises): %s: %s", what,
                          RANK_OF(failed), peer >= 0 ? "transfer" : "collective",
                          fh_status_kind((fh_status)all[failed].status), strip_name(what, msg));
  } else {
    int other = 1;
    for (int k = 1; k < n; ++k)
      if (lens[k] != lens[0] || memcmp(buf + off[k], buf + off[0], lens[0]) != 0) {
        other = k;
        break;
      }
    const char *a = buf + off[0], *b = buf + off[other];
    size_t la = lens[0], lb = lens[other], at = 0;
    while (at < la && at < lb && a[at] == b[at]) ++at;
    char ea[320], eb[320];
    excerpt(a, la, at, ea, sizeof ea);
    excerpt(b, lb, at, eb, sizeof eb);
    result = fh_error_set(FH_ERR_EXEC_INPUT,
                          "%s: the ranks' arguments differ (signatures are compared before anything moves): "
                          "rank %d has %s; rank %d has %s",
                          what, RANK_OF(0), ea, RANK_OF(other), eb);
  }
#undef RANK_OF
  fh_free(all);
  fh_free(lens);
  fh_free(buf);
  fh_free(off);
  return result;
}

/* ---- init -------------------------------------------------------------------------- */
fh_status fh_dist_init(fh_dist_kind kind) {
  const char *fn = "fh.distributed.init";
  if (kind == FH_DIST_AUTO) {
    const char *env = getenv("FHELIUM_DIST_DEVICE");
    if (env && *env && strcmp(env, "auto") != 0) {
      if (strcmp(env, "cpu") == 0) kind = FH_DIST_CPU;
      else if (strcmp(env, "cuda") == 0) kind = FH_DIST_CUDA;
      else
        return fh_error_set(FH_ERR_VALUE, "%s: FHELIUM_DIST_DEVICE is '%.40s' (expected \"cpu\", \"cuda\" or \"auto\")",
                            fn, env);
    }
  }
  if (g_init) {
    if (kind == FH_DIST_AUTO || (int)kind == g_info.kind) return FH_OK;
    return fh_error_set(FH_ERR_STATE, "%s: already initialised with device \"%s\", asked for \"%s\" (one device kind "
                        "per job)", fn, kind_name(g_info.kind), kind_name(kind));
  }
  int ndev = fh_cuda_device_count(); /* initialises the CUDA runtime before atexit below */
  bool launched = fh_dist_launched_env();
  fh_dist_info info;
  memset(&info, 0, sizeof info);
  info.world_size = 1;
  info.local_size = 1;
  if (launched) {
    if (!fh__mpi_available())
      return fh_error_set(FH_ERR_STATE, "%s: this process was started by a launcher (mpirun) but fhelium was built "
                          "without MPI (install libopenmpi-dev: scripts/setup, then rebuild)", fn);
    fh_status st = fh__mpi_init(&info);
    if (st != FH_OK) return st;
    g_mpi_up = true;
    info.launched = true;
    g_info.rank = info.rank; /* for the agreement below */
    g_info.world_size = info.world_size;
    if (!g_exit_registered) {
      g_exit_registered = true;
      atexit(at_exit);
    }
  } else {
    if (gethostname(info.host, sizeof info.host - 1) != 0) snprintf(info.host, sizeof info.host, "?");
  }
  /* the device kind: decided locally, then agreed */
  fh_status local = FH_OK;
  if (kind == FH_DIST_AUTO)
    kind = fh__nccl_available() && ndev > info.local_rank && info.local_size <= ndev ? FH_DIST_CUDA : FH_DIST_CPU;
  if (kind == FH_DIST_CUDA) {
    if (!fh__nccl_available())
      local = fh_error_set(FH_ERR_CUDA, "%s: device \"cuda\": fhelium was built without NCCL (nccl.h and libnccl of "
                           "the CUDA toolkit were not found when it was configured)", fn);
    else if (ndev == 0)
      local = fh_error_set(FH_ERR_CUDA, "%s: device \"cuda\": rank %d has no CUDA device: %s", fn, info.rank,
                           fh_cuda_unavailable_reason());
    else if (info.local_rank >= ndev)
      local = fh_error_set(FH_ERR_CUDA, "%s: device \"cuda\": rank %d is local rank %d of host %s, which has %d CUDA "
                           "device%s: one rank per GPU (start at most %d ranks per host, or init{device = \"cpu\"})",
                           fn, info.rank, info.local_rank, info.host, ndev, ndev == 1 ? "" : "s", ndev);
  }
  char desc[64];
  int dl = snprintf(desc, sizeof desc, "init device=%s", kind_name(kind));
  fh_status st = fh_dist_agree(fn, local, desc, (size_t)dl, -1);
  if (st != FH_OK) return st;
  info.kind = kind;
  info.device = fh_cpu();
  if (kind == FH_DIST_CUDA) {
    /* NVLink multicast (NVLS, cuMulticastCreate) stays off */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    fh_status cs = fh_cuda_set_device(info.local_rank);
    unsigned char id[FH_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    if (cs == FH_OK && info.rank == 0) cs = fh__nccl_unique_id(id);
    /* everyone learns whether rank 0 has an id before waiting for it */
    st = fh_dist_agree(fn, cs, "nccl id", 7, -1);
    if (st != FH_OK) return st;
    if (info.world_size > 1 && (st = fh__mpi_bcast(id, sizeof id, 0)) != FH_OK) return st;
    void *comm = NULL;
    cs = fh__nccl_comm_init(&comm, info.world_size, id, info.rank, info.local_rank);
    st = fh_dist_agree(fn, cs, "nccl comm", 9, -1);
    if (st != FH_OK) {
      fh__nccl_comm_destroy(comm);
      return st;
    }
    g_comm = comm;
    info.device.type = FH_DEVICE_CUDA;
    info.device.index = info.local_rank;
    if (!g_comm_exit_registered) { /* after the CUDA context exists: runs before CUDA's own teardown */
      g_comm_exit_registered = true;
      atexit(destroy_comm);
    }
  }
  g_info = info;
  g_init = true;
  return FH_OK;
}

/* ---- types and checks --------------------------------------------------------------- */
/* The element type a tensor moves as, and elements per tensor element. */
static int dist_type(fh_dtype d, uint64_t *factor) {
  *factor = 1;
  switch (d) {
    case FH_INT32: return FH_DIST_T_INT32;
    case FH_UINT32: return FH_DIST_T_UINT32;
    case FH_INT64: return FH_DIST_T_INT64;
    case FH_UINT64: return FH_DIST_T_UINT64;
    case FH_FLOAT32: return FH_DIST_T_FLOAT32;
    case FH_FLOAT64: return FH_DIST_T_FLOAT64;
    case FH_COMPLEX128: *factor = 2; return FH_DIST_T_FLOAT64;
    default: return FH_DIST_T_BYTE; /* bool, uint8 */
  }
}

static bool is_mod(const fh_dist_moduli *mods, int i) { return mods && mods[i].nmoduli > 0; }

static bool g_force_split;
void fh__dist_force_split(bool on) { g_force_split = on; }

/* The modular sum of W ranks cannot overflow uint64 when W (q - 1) < 2^64. */
static bool mod_needs_split(const fh_dist_moduli *m) {
  if (g_force_split) return true;
  uint64_t qmax = 0;
  for (int j = 0; j < m->nmoduli; ++j)
    if (m->moduli[j] > qmax) qmax = m->moduli[j];
  uint64_t W = (uint64_t)g_info.world_size;
  return W > 1 && qmax - 1 > UINT64_MAX / W;
}

fh_status fh_dist_check(const char *what, fh_dist_op op, int n, fh_tensor *const *t, const fh_dist_moduli *mods,
                        int root_or_peer) {
  if (!g_init) return fh_error_set(FH_ERR_STATE, "%s: fh.distributed.init() has not been called", what);
  int W = g_info.world_size;
  if (op == FH_DIST_BROADCAST && (root_or_peer < 0 || root_or_peer >= W))
    return fh_error_set(FH_ERR_VALUE, "%s: root %d is not a rank (expected 0 .. %d)", what, root_or_peer, W - 1);
  if (op == FH_DIST_SEND || op == FH_DIST_RECV) {
    const char *arg = op == FH_DIST_SEND ? "dst" : "src";
    if (root_or_peer < 0 || root_or_peer >= W)
      return fh_error_set(FH_ERR_VALUE, "%s: %s %d is not a rank (expected 0 .. %d)", what, arg, root_or_peer, W - 1);
    if (root_or_peer == g_info.rank)
      return fh_error_set(FH_ERR_VALUE, "%s: %s %d is this rank (a rank does not %s itself)", what, arg, root_or_peer,
                          op == FH_DIST_SEND ? "send to" : "receive from");
  }
  int k = n;
  if (op == FH_DIST_REDUCE_SCATTER) {
    if (n % W != 0)
      return fh_error_set(FH_ERR_VALUE, "%s: %d tensors for %d ranks (expected one chunk per rank)", what, n, W);
    k = n / W;
  }
  bool sum = op == FH_DIST_ALL_REDUCE || op == FH_DIST_REDUCE_SCATTER;
  char d0[FH_DEVICE_NAME_MAX], d1[FH_DEVICE_NAME_MAX];
  for (int i = 0; i < n; ++i) {
    fh_device dev = fh_tensor_device(t[i]);
    if (!fh_device_eq(dev, fh_tensor_device(t[0])))
      return fh_error_set(FH_ERR_VALUE, "%s: tensor %d is on %s and tensor 1 on %s (one device per collective)", what,
                          i + 1, fh_device_name(dev, d0), fh_device_name(fh_tensor_device(t[0]), d1));
    if (fh_device_is_cuda(dev)) {
      if (g_info.kind != FH_DIST_CUDA)
        return fh_error_set(FH_ERR_STATE, "%s: tensor %d is on %s, but this job was initialised for CPU ranks (CUDA "
                            "tensors need fh.distributed.init{device = \"cuda\"}, one GPU per rank)", what, i + 1,
                            fh_device_name(dev, d0));
      if (dev.index != g_info.device.index)
        return fh_error_set(FH_ERR_VALUE, "%s: tensor %d is on %s; this rank's GPU is %s (fh.distributed.device)",
                            what, i + 1, fh_device_name(dev, d0), fh_device_name(g_info.device, d1));
    }
    fh_dtype dt = (fh_dtype)t[i]->dtype;
    if (sum && dt == FH_BOOL)
      return fh_error_set(FH_ERR_TYPE, "%s: tensor %d is bool, which has no sum", what, i + 1);
    uint64_t factor;
    (void)dist_type(dt, &factor);
    int ci = op == FH_DIST_REDUCE_SCATTER ? i % k : i;
    bool m = sum && is_mod(mods, ci);
    uint64_t count = (uint64_t)fh_tensor_numel(t[i]) * factor * (m ? 2 : 1);
    if (!fh_device_is_cuda(dev) && count > INT_MAX)
      return fh_error_set(FH_ERR_VALUE, "%s: tensor %d has %lld elements; a CPU collective moves at most %d per "
                          "tensor (MPI counts are int)%s", what, i + 1, (long long)fh_tensor_numel(t[i]),
                          (int)(INT_MAX / factor / (m ? 2 : 1)), m ? " for a modular sum" : "");
    if (op == FH_DIST_REDUCE_SCATTER && i >= k) {
      const fh_tensor *c = t[ci];
      bool same = c->dtype == t[i]->dtype && c->ndim == t[i]->ndim;
      for (int d = 0; same && d < c->ndim; ++d) same = c->shape[d] == t[i]->shape[d];
      if (!same)
        return fh_error_set(FH_ERR_VALUE, "%s: chunk %d tensor %d differs from chunk 1 tensor %d in shape or dtype "
                            "(every rank's chunk has the same signature)", what, i / k + 1, ci + 1, ci + 1);
    }
    if (m && i < k) {
      const fh_dist_moduli *md = &mods[ci];
      if (dt != FH_UINT64)
        return fh_error_set(FH_ERR_TYPE, "%s: a modular sum needs uint64 residues; tensor %d is %s", what, i + 1,
                            fh_dtype_name(dt));
      if (t[i]->ndim < 2)
        return fh_error_set(FH_ERR_VALUE, "%s: a modular sum needs tensors [*, limb, n]; tensor %d has %d "
                            "dimension%s", what, i + 1, (int)t[i]->ndim, t[i]->ndim == 1 ? "" : "s");
      if (md->nmoduli > FH_RNS_MAX_LIMBS)
        return fh_error_set(FH_ERR_VALUE, "%s: at most %d limb rows are supported, got %d", what, FH_RNS_MAX_LIMBS,
                            (int)md->nmoduli);
      if (t[i]->shape[t[i]->ndim - 2] != md->nmoduli)
        return fh_error_set(FH_ERR_VALUE, "%s: %d moduli given for tensor %d's %lld limb rows (one modulus per row "
                            "of dimension %d)", what, (int)md->nmoduli, i + 1,
                            (long long)t[i]->shape[t[i]->ndim - 2], (int)t[i]->ndim - 1);
      for (int j = 0; j < md->nmoduli; ++j)
        if (md->moduli[j] < 2 || md->moduli[j] >= (1ULL << 62))
          return fh_error_set(FH_ERR_VALUE, "%s: modulus %d of tensor %d is %llu; moduli must satisfy 2 <= q < 2^62",
                              what, j + 1, i + 1, (unsigned long long)md->moduli[j]);
    }
  }
  return FH_OK;
}

/* ---- kernels ---------------------------------------------------------------------- */
static fh_status cpu_collective(const void *args) {
  const fh_dist_coll_args *a = args;
  if (g_info.world_size > 1) return fh__mpi_collective(a);
  /* one rank: every collective is a copy */
  static const size_t tsize[FH_DIST_T_COUNT] = {1, 4, 4, 8, 8, 4, 8};
  for (int i = 0; i < a->nparts; ++i) {
    const fh_dist_part *p = &a->part[i];
    if (a->op == FH_DIST_SEND || a->op == FH_DIST_RECV)
      return fh_error_set(FH_ERR_EXECUTION, "internal error: point-to-point transfer in a job of one rank");
    if (p->send != p->recv && p->send != NULL) memmove(p->recv, p->send, p->count * tsize[p->type]);
  }
  return FH_OK;
}

static fh_status cpu_mod_split(const void *args) {
  const fh_dist_mod_args *a = args;
  uint64_t total = a->numel * a->chunks;
  for (uint64_t i = 0; i < total; ++i) {
    uint64_t c = i / a->numel, j = i - c * a->numel, x = a->in[i];
    a->out[c * 2 * a->numel + j] = x & 0xffffffffULL;
    a->out[c * 2 * a->numel + a->numel + j] = x >> 32;
  }
  return FH_OK;
}

static fh_status cpu_mod_join(const void *args) {
  const fh_dist_mod_args *a = args;
  for (uint64_t i = 0; i < a->numel; ++i) {
    const fh_modulus *m = &a->mod[(i / a->ncols) % (uint64_t)a->nmoduli];
    uint64_t lo, hi;
    if (a->split) {
      uint64_t l = a->in[i], h = a->in[a->numel + i];
      lo = l + (h << 32);
      hi = (h >> 32) + (lo < l);
    } else {
      lo = a->in[i];
      hi = 0;
    }
    a->out[i] = fh_barrett128(lo, hi, m);
  }
  return FH_OK;
}

static const char *const kernel_names[FH_K_DIST_COUNT] = {"dist_collective", "dist_mod_split", "dist_mod_join"};
static const fh_cpu_kernel_fn cpu_kernels[FH_K_DIST_COUNT] = {cpu_collective, cpu_mod_split, cpu_mod_join};
#ifdef FH_WITH_CUDA
static const fh_cuda_kernel_fn cuda_kernels[FH_K_DIST_COUNT] = {fh__nccl_collective, fh__dist_cuda_mod_split,
                                                                 fh__dist_cuda_mod_join};
#endif
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;
static void register_kernels(void) {
#ifdef FH_WITH_CUDA
  fh_launch_register(FH_K_DIST_COLLECTIVE, FH_K_DIST_COUNT, kernel_names, cpu_kernels, cuda_kernels);
#else
  fh_launch_register(FH_K_DIST_COLLECTIVE, FH_K_DIST_COUNT, kernel_names, cpu_kernels, NULL);
#endif
}

static fh_status submit(int kernel, fh_device dev, fh_stream *s, const void *args, size_t size,
                        fh_storage *const *uses, int nuses) {
  pthread_once(&kernels_once, register_kernels);
  fh_launch l = {kernel, dev, s, args, size, uses, nuses};
  return fh_launch_submit(&l);
}

/* A collective launch under construction: up to FH_DIST_MAX_PARTS parts. */
typedef struct batch {
  fh_dist_coll_args a;
  fh_storage *uses[2 * FH_DIST_MAX_PARTS];
  int nuses;
  fh_device dev;
  fh_stream *s;
} batch;

static void batch_init(batch *b, fh_dist_op op, int peer, fh_device dev, fh_stream *s) {
  memset(&b->a, 0, offsetof(fh_dist_coll_args, part));
  b->a.op = op;
  b->a.peer = peer;
  b->a.device = dev.index;
  b->a.comm = g_comm;
  b->nuses = 0;
  b->dev = dev;
  b->s = s;
}

static fh_status batch_flush(batch *b) {
  if (b->a.nparts == 0) return FH_OK;
  size_t size = offsetof(fh_dist_coll_args, part) + sizeof(fh_dist_part) * (size_t)b->a.nparts;
  fh_status st = submit(FH_K_DIST_COLLECTIVE, b->dev, b->s, &b->a, size, b->uses, b->nuses);
  b->a.nparts = 0;
  b->nuses = 0;
  return st;
}

static fh_status batch_add(batch *b, const fh_tensor *send, const fh_tensor *recv, uint64_t count, int type, int sum) {
  if (b->a.nparts == FH_DIST_MAX_PARTS) {
    fh_status st = batch_flush(b);
    if (st != FH_OK) return st;
  }
  fh_dist_part *p = &b->a.part[b->a.nparts++];
  p->send = send ? fh_tensor_data(send) : NULL;
  p->recv = recv ? fh_tensor_data(recv) : NULL;
  p->count = count;
  p->type = type;
  p->sum = sum;
  if (send) b->uses[b->nuses++] = send->storage;
  if (recv && (!send || recv->storage != send->storage)) b->uses[b->nuses++] = recv->storage;
  return FH_OK;
}

static fh_status mod_launch(int kernel, fh_device dev, fh_stream *s, fh_tensor *out, const fh_tensor *in,
                            uint64_t numel, uint64_t chunks, uint64_t ncols, bool split, const fh_dist_moduli *m) {
  fh_dist_mod_args a;
  memset(&a, 0, sizeof a);
  a.out = (uint64_t *)fh_tensor_data(out);
  a.in = (const uint64_t *)fh_tensor_data(in);
  a.numel = numel;
  a.chunks = chunks;
  a.ncols = ncols;
  a.split = split;
  if (m) {
    a.nmoduli = m->nmoduli;
    for (int j = 0; j < m->nmoduli; ++j) fh_modulus_init(&a.mod[j], m->moduli[j]);
  }
  fh_storage *uses[2] = {out->storage, in->storage};
  return submit(kernel, dev, s, &a, sizeof a, uses, out->storage == in->storage ? 1 : 2);
}

/* ---- collectives -------------------------------------------------------------------- */
static fh_status new_like(const fh_tensor *t, int64_t lead, int64_t mult, fh_dtype dtype, fh_tensor **out) {
  int64_t shape[FH_MAX_DIMS + 1];
  int nd = 0;
  if (lead > 0) shape[nd++] = lead;
  if (mult > 0) {
    shape[nd++] = mult * fh_tensor_numel(t); /* flat staging */
  } else {
    for (int d = 0; d < t->ndim; ++d) shape[nd++] = t->shape[d];
  }
  fh_tensor_options o = fh_tensor_options_default();
  o.dtype = dtype;
  o.device = fh_tensor_device(t);
  return fh_tensor_empty(nd, shape, &o, out);
}

static void release_all(fh_tensor **t, int n) {
  for (int i = 0; i < n; ++i) {
    fh_tensor_release(t[i]);
    t[i] = NULL;
  }
}

static fh_status prepare(int n, fh_tensor *const *t, fh_device *dev, fh_stream **s) {
  *dev = n > 0 ? fh_tensor_device(t[0]) : fh_cpu();
  fh_status st = fh_device_check(*dev);
  if (st == FH_OK) st = fh__op_stream(*dev, NULL, s);
  return st;
}

static int64_t ncols_of(const fh_tensor *t) { return t->ndim >= 1 ? t->shape[t->ndim - 1] : 1; }

/* all_reduce: one launch for every part (grouped); a modular part whose sum
 * could pass 2^64 goes through staging [2 * numel] (split, summed in place,
 * joined into the result), the others are summed into the result, then
 * reduced modulo q in place. */
fh_status fh_dist_all_reduce(int n, fh_tensor *const *t, const fh_dist_moduli *mods, fh_tensor **out) {
  fh_device dev;
  fh_stream *s = NULL;
  fh_status st = prepare(n, t, &dev, &s);
  if (st != FH_OK) return st;
  fh_tensor **c = fh_calloc((size_t)n * 3 + 1, sizeof *c); /* contiguous inputs, results, staging */
  if (c == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory in a collective");
  fh_tensor **r = c + n, **stg = c + 2 * n;
  batch *b = fh_malloc(sizeof *b);
  if (b == NULL) {
    fh_free(c);
    return fh_error_set(FH_ERR_MEMORY, "out of memory in a collective");
  }
  batch_init(b, FH_DIST_ALL_REDUCE, 0, dev, s);
  for (int i = 0; i < n && st == FH_OK; ++i) {
    st = fh_tensor_contiguous(t[i], &c[i]);
    if (st == FH_OK) st = new_like(t[i], 0, 0, (fh_dtype)t[i]->dtype, &r[i]);
    if (st != FH_OK) break;
    uint64_t factor, numel = (uint64_t)fh_tensor_numel(t[i]);
    int type = dist_type((fh_dtype)t[i]->dtype, &factor);
    if (is_mod(mods, i) && mod_needs_split(&mods[i])) {
      st = new_like(t[i], 0, 2, FH_UINT64, &stg[i]);
      if (st == FH_OK)
        st = mod_launch(FH_K_DIST_MOD_SPLIT, dev, s, stg[i], c[i], numel, 1, (uint64_t)ncols_of(t[i]), false, NULL);
      if (st == FH_OK) st = batch_add(b, stg[i], stg[i], 2 * numel, FH_DIST_T_UINT64, 1);
    } else {
      st = batch_add(b, c[i], r[i], numel * factor, type, 1);
    }
  }
  if (st == FH_OK) st = batch_flush(b);
  for (int i = 0; i < n && st == FH_OK; ++i) {
    if (!is_mod(mods, i)) continue;
    uint64_t numel = (uint64_t)fh_tensor_numel(t[i]);
    if (stg[i])
      st = mod_launch(FH_K_DIST_MOD_JOIN, dev, s, r[i], stg[i], numel, 1, (uint64_t)ncols_of(t[i]), true, &mods[i]);
    else
      st = mod_launch(FH_K_DIST_MOD_JOIN, dev, s, r[i], r[i], numel, 1, (uint64_t)ncols_of(t[i]), false, &mods[i]);
  }
  release_all(c, n);
  release_all(stg, n);
  if (st == FH_OK) memcpy(out, r, sizeof *r * (size_t)n);
  else release_all(r, n);
  fh_free(c);
  fh_free(b);
  return st;
}

fh_status fh_dist_reduce_scatter(int k, fh_tensor *const *t, const fh_dist_moduli *mods, fh_tensor **out) {
  int W = g_info.world_size, n = k * W;
  fh_device dev;
  fh_stream *s = NULL;
  fh_status st = prepare(n, t, &dev, &s);
  if (st != FH_OK) return st;
  fh_tensor **c = fh_calloc((size_t)k * 3 + 1, sizeof *c); /* packed inputs, results, result staging */
  if (c == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory in a collective");
  fh_tensor **r = c + k, **stg = c + 2 * k;
  batch *b = fh_malloc(sizeof *b);
  if (b == NULL) {
    fh_free(c);
    return fh_error_set(FH_ERR_MEMORY, "out of memory in a collective");
  }
  batch_init(b, FH_DIST_REDUCE_SCATTER, 0, dev, s);
  for (int i = 0; i < k && st == FH_OK; ++i) {
    uint64_t factor, numel = (uint64_t)fh_tensor_numel(t[i]);
    int type = dist_type((fh_dtype)t[i]->dtype, &factor);
    bool split = is_mod(mods, i) && mod_needs_split(&mods[i]);
    st = new_like(t[i], 0, 0, (fh_dtype)t[i]->dtype, &r[i]);
    /* the packed chunks: [W, *shape], or [W, 2 * numel] split halves */
    if (st == FH_OK)
      st = split ? new_like(t[i], W, 2, FH_UINT64, &c[i]) : new_like(t[i], W, 0, (fh_dtype)t[i]->dtype, &c[i]);
    for (int j = 0; j < W && st == FH_OK; ++j) {
      fh_tensor *chunk = t[j * k + i], *dst = NULL;
      if (split) {
        fh_tensor *cc = NULL;
        if ((st = fh_tensor_contiguous(chunk, &cc)) == FH_OK && (st = fh_tensor_select(c[i], 0, j, &dst)) == FH_OK)
          st = mod_launch(FH_K_DIST_MOD_SPLIT, dev, s, dst, cc, numel, 1, 1, false, NULL);
        fh_tensor_release(cc);
      } else if ((st = fh_tensor_select(c[i], 0, j, &dst)) == FH_OK) {
        st = fh__copy_submit(dst, chunk, s);
      }
      fh_tensor_release(dst);
    }
    if (st != FH_OK) break;
    if (split) {
      if ((st = new_like(t[i], 0, 2, FH_UINT64, &stg[i])) == FH_OK)
        st = batch_add(b, c[i], stg[i], 2 * numel, FH_DIST_T_UINT64, 1);
    } else {
      st = batch_add(b, c[i], r[i], numel * factor, type, 1);
    }
  }
  if (st == FH_OK) st = batch_flush(b);
  for (int i = 0; i < k && st == FH_OK; ++i) {
    if (!is_mod(mods, i)) continue;
    uint64_t numel = (uint64_t)fh_tensor_numel(t[i]);
    if (stg[i])
      st = mod_launch(FH_K_DIST_MOD_JOIN, dev, s, r[i], stg[i], numel, 1, (uint64_t)ncols_of(t[i]), true, &mods[i]);
    else
      st = mod_launch(FH_K_DIST_MOD_JOIN, dev, s, r[i], r[i], numel, 1, (uint64_t)ncols_of(t[i]), false, &mods[i]);
  }
  release_all(c, k);
  release_all(stg, k);
  if (st == FH_OK) memcpy(out, r, sizeof *r * (size_t)k);
  else release_all(r, k);
  fh_free(c);
  fh_free(b);
  return st;
}

/* all_gather, broadcast, send, recv: data movement, no arithmetic. */
static fh_status move(fh_dist_op op, int n, fh_tensor *const *t, int peer, fh_tensor **out) {
  fh_device dev;
  fh_stream *s = NULL;
  fh_status st = prepare(n, t, &dev, &s);
  if (st != FH_OK) return st;
  fh_tensor **c = fh_calloc((size_t)n * 2 + 1, sizeof *c);
  if (c == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory in a collective");
  fh_tensor **r = c + n;
  batch *b = fh_malloc(sizeof *b);
  if (b == NULL) {
    fh_free(c);
    return fh_error_set(FH_ERR_MEMORY, "out of memory in a collective");
  }
  batch_init(b, op, peer, dev, s);
  int W = g_info.world_size;
  bool sends = op == FH_DIST_SEND || op == FH_DIST_ALL_GATHER || (op == FH_DIST_BROADCAST && g_info.rank == peer);
  for (int i = 0; i < n && st == FH_OK; ++i) {
    uint64_t factor, numel = (uint64_t)fh_tensor_numel(t[i]);
    int type = dist_type((fh_dtype)t[i]->dtype, &factor);
    if (sends) st = fh_tensor_contiguous(t[i], &c[i]);
    if (st == FH_OK && op != FH_DIST_SEND)
      st = new_like(t[i], op == FH_DIST_ALL_GATHER ? W : 0, 0, (fh_dtype)t[i]->dtype, &r[i]);
    if (st == FH_OK) st = batch_add(b, c[i], r[i], numel * factor, type, 0);
  }
  if (st == FH_OK) st = batch_flush(b);
  release_all(c, n);
  if (st == FH_OK && out) memcpy(out, r, sizeof *r * (size_t)n);
  else release_all(r, n);
  fh_free(c);
  fh_free(b);
  return st;
}

fh_status fh_dist_all_gather(int n, fh_tensor *const *t, fh_tensor **out) {
  return move(FH_DIST_ALL_GATHER, n, t, 0, out);
}
fh_status fh_dist_broadcast(int n, fh_tensor *const *t, int root, fh_tensor **out) {
  return move(FH_DIST_BROADCAST, n, t, root, out);
}
fh_status fh_dist_send(int n, fh_tensor *const *t, int peer) { return move(FH_DIST_SEND, n, t, peer, NULL); }
fh_status fh_dist_recv(int n, fh_tensor *const *like, int peer, fh_tensor **out) {
  return move(FH_DIST_RECV, n, like, peer, out);
}

fh_status fh_dist_allgather_bytes(const void *send, size_t n, void *recv) {
  if (g_info.world_size <= 1) {
    memcpy(recv, send, n);
    return FH_OK;
  }
  return fh__mpi_allgather(send, n, recv);
}

fh_status fh_dist_exchange_bytes(int peer, const void *send, size_t n, void *recv) {
  return fh__mpi_sendrecv(peer, send, n, recv, n);
}

/* ---- host bytes ---------------------------------------------------------------------- */
fh_status fh_dist_broadcast_bytes(int root, void **data, size_t *len) {
  if (!g_init) return fh_error_set(FH_ERR_STATE, "fh.distributed.init() has not been called");
  if (g_info.world_size == 1) return FH_OK;
  uint64_t n = g_info.rank == root ? (uint64_t)*len : 0;
  fh_status st = fh__mpi_bcast(&n, sizeof n, root);
  if (st != FH_OK) return st;
  if (g_info.rank == root) return fh__mpi_bcast(*data, (size_t)n, root);
  void *buf = fh_malloc(n ? (size_t)n : 1);
  if (buf == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory receiving %llu bytes", (unsigned long long)n);
  if ((st = fh__mpi_bcast(buf, (size_t)n, root)) != FH_OK) {
    fh_free(buf);
    return st;
  }
  *data = buf;
  *len = (size_t)n;
  return FH_OK;
}

fh_status fh_dist_send_bytes(int peer, const void *data, size_t len) {
  uint64_t n = len;
  fh_status st = fh__mpi_send(peer, &n, sizeof n, 1);
  return st != FH_OK ? st : fh__mpi_send(peer, data, len, 2);
}

fh_status fh_dist_recv_bytes(int peer, void **data, size_t *len) {
  uint64_t n = 0;
  fh_status st = fh__mpi_recv(peer, &n, sizeof n, 1);
  if (st != FH_OK) return st;
  void *buf = fh_malloc(n ? (size_t)n : 1);
  if (buf == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory receiving %llu bytes", (unsigned long long)n);
  if ((st = fh__mpi_recv(peer, buf, (size_t)n, 2)) != FH_OK) {
    fh_free(buf);
    return st;
  }
  *data = buf;
  *len = (size_t)n;
  return FH_OK;
}
