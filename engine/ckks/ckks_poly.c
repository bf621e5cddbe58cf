/* Polynomial-level CKKS operators and the evaluator's launch helper
 * (fh/ckks_poly.h). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fh/ckks_poly.h"
#include "fh/internal.h"

/* ---- launcher ------------------------------------------------------------------ */
fh_status fh__ckks_launcher_init(fh__ckks_launcher *L, fh_ckks_tables *tb) {
  memset(L, 0, sizeof *L);
  L->tb = tb;
  L->dev = tb->device;
  fh_status st = fh_device_check(L->dev);
  if (st == FH_OK) st = fh__op_stream(L->dev, NULL, &L->stream);
  if (st != FH_OK) return st;
  L->uses[L->nuses++] = fh_ckks_tables_storage(tb);
  return FH_OK;
}

void fh__ckks_use(fh__ckks_launcher *L, const fh_tensor *t) {
  if (t == NULL) return;
  for (int i = 0; i < L->nuses; ++i)
    if (L->uses[i] == t->storage) return;
  if (L->nuses < FH_CKKS_MAX_USES) L->uses[L->nuses++] = t->storage;
  else L->overflow = true;
}

static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;
static void register_kernels(void) {
#ifdef FH_WITH_CUDA
  const fh_cuda_kernel_fn *cuda = fh__ckks_cuda_kernels;
#else
  const fh_cuda_kernel_fn *cuda = NULL;
#endif
  fh_launch_register(FH_K_CKKS_NTT, FH_K_CKKS_COUNT, fh__ckks_kernel_names, fh__ckks_cpu_kernels, cuda);
}

fh_status fh__ckks_submit(fh__ckks_launcher *L, int kernel, const void *args, size_t size) {
  pthread_once(&kernels_once, register_kernels);
  if (L->overflow) /* a launch must list every storage it touches (tapes retain them) */
    return fh_error_set(FH_ERR_EXECUTION, "internal error: a CKKS operation uses more than %d storages",
                        FH_CKKS_MAX_USES);
  return fh__submit(kernel, L->dev, L->stream, args, size, L->uses, L->nuses);
}

fh_status fh__ckks_ntt(fh__ckks_launcher *L, bool forward, uint64_t *out, int64_t out_gs, const uint64_t *in,
                       int64_t in_gs, int64_t ngroups, const int32_t *prime, int nlimbs) {
  return fh__ckks_ntt_rows(L, forward, out, out_gs, in, in_gs, ngroups, prime, nlimbs, NULL, NULL);
}

void fh__ckks_ntt_rows_args(const fh__ckks_launcher *L, fh_ckks_ntt_args *a, uint64_t *out, int64_t out_gs,
                            const uint64_t *in, int64_t in_gs, int64_t ngroups, const int32_t *prime, int nlimbs,
                            const int32_t *in_row, const int32_t *out_row) {
  memset(a, 0, sizeof *a);
  a->out = out;
  a->in = in;
  a->out_gs = out_gs;
  a->in_gs = in_gs;
  a->ngroups = ngroups;
  a->nlimbs = nlimbs;
  a->log_n = L->tb->log_n;
  a->primes = L->tb->primes_dev;
  a->ntt = L->tb->ntt;
  memcpy(a->prime, prime, sizeof(int32_t) * (size_t)nlimbs);
  if (in_row && out_row) {
    a->rows = 1;
    memcpy(a->in_row, in_row, sizeof(int32_t) * (size_t)nlimbs);
    memcpy(a->out_row, out_row, sizeof(int32_t) * (size_t)nlimbs);
  }
}

void fh__ckks_source_scale_rows(const fh_ckks_tables *tb, int level, bool moddown, fh_ckks_ntt_args *a) {
  /* a mod-down's sources: the np pairs at the head of its constants; a mod-up's: the level's
   * row of fh_ckks_tables.sources */
  a->scale = moddown ? tb->moddown[level] : tb->sources + 2 * (size_t)level * (size_t)tb->nq;
  a->nscale = moddown ? tb->np : tb->nq - level;
}

fh_status fh__ckks_ntt_rows(fh__ckks_launcher *L, bool forward, uint64_t *out, int64_t out_gs, const uint64_t *in,
                            int64_t in_gs, int64_t ngroups, const int32_t *prime, int nlimbs, const int32_t *in_row,
                            const int32_t *out_row) {
  fh_ckks_ntt_args a;
  fh__ckks_ntt_rows_args(L, &a, out, out_gs, in, in_gs, ngroups, prime, nlimbs, in_row, out_row);
  if (ngroups == 0 || nlimbs == 0) return FH_OK;
  return fh__ckks_submit(L, forward ? FH_K_CKKS_NTT : FH_K_CKKS_INTT, &a, sizeof a);
}

fh_status fh__ckks_automorph(fh__ckks_launcher *L, bool ntt_domain, uint64_t galois, uint64_t *out, int64_t out_gs,
                             const uint64_t *in, int64_t in_gs, int64_t ngroups, const int32_t *prime, int nlimbs) {
  fh_ckks_automorph_args a;
  memset(&a, 0, sizeof a);
  a.out = out;
  a.in = in;
  a.out_gs = out_gs;
  a.in_gs = in_gs;
  a.ngroups = ngroups;
  a.nlimbs = nlimbs;
  a.log_n = L->tb->log_n;
  a.ntt_domain = ntt_domain;
  a.galois = galois;
  a.primes = L->tb->primes_dev;
  memcpy(a.prime, prime, sizeof(int32_t) * (size_t)nlimbs);
  if (ngroups == 0 || nlimbs == 0) return FH_OK;
  return fh__ckks_submit(L, FH_K_CKKS_AUTOMORPH, &a, sizeof a);
}

fh_status fh__ckks_ew(fh__ckks_launcher *L, int op, int64_t ngroups, const int32_t *primes, int nl, uint64_t *out,
                     int64_t out_gs, const uint64_t *x, int64_t x_gs, const uint64_t *y, int64_t y_gs) {
  fh_ckks_ew_args a;
  fh__ckks_ew_init(L, &a, op, ngroups, primes, nl);
  a.out = out;
  a.out_gs = out_gs;
  a.a = x;
  a.a_gs = x_gs;
  a.b = y;
  a.b_gs = y_gs;
  if (ngroups == 0) return FH_OK;
  return fh__ckks_submit(L, FH_K_CKKS_EW, &a, sizeof a);
}

void fh__ckks_ew_init(fh__ckks_launcher *L, fh_ckks_ew_args *a, int op, int64_t ngroups, const int32_t *prime,
                      int nlimbs) {
  memset(a, 0, sizeof *a);
  a->op = op;
  a->ngroups = ngroups;
  a->nlimbs = nlimbs;
  a->log_n = L->tb->log_n;
  a->a_ls = L->tb->n;
  a->primes = L->tb->primes_dev;
  memcpy(a->prime, prime, sizeof(int32_t) * (size_t)nlimbs);
}

void fh__ckks_ew_set_const(fh__ckks_launcher *L, fh_ckks_ew_args *a, int l, uint64_t c) {
  a->c_const[l] = c;
  a->c_shoup[l] = fh_shoup_precompute(c, L->tb->primes[a->prime[l]]);
}

fh_status fh__ckks_temp(fh__ckks_launcher *L, int ndim, const int64_t *shape, fh_tensor **out) {
  fh_tensor_options o = {FH_UINT64, L->dev, false, false};
  fh_status st = fh_tensor_empty(ndim, shape, &o, out);
  if (st == FH_OK) fh__ckks_use(L, *out);
  return st;
}

/* ---- validation helpers ------------------------------------------------------------ */
static fh_status check_device(const char *what, const fh_ckks_tables *tb, const fh_tensor *t) {
  if (!fh_device_eq(fh_tensor_device(t), tb->device)) {
    char a[FH_DEVICE_NAME_MAX], b[FH_DEVICE_NAME_MAX];
    return fh_error_set(FH_ERR_VALUE, "%s: tensor is on %s but the CKKS tables are on %s", what,
                        fh_device_name(fh_tensor_device(t), a), fh_device_name(tb->device, b));
  }
  return FH_OK;
}

static fh_status check_ids(const char *what, const fh_ckks_tables *tb, const int *ids, int nids) {
  if (nids < 1 || nids > FH_CKKS_MAX_PRIMES)
    return fh_error_set(FH_ERR_VALUE, "%s: between 1 and %d prime ids are needed, got %d", what, FH_CKKS_MAX_PRIMES,
                        nids);
  for (int i = 0; i < nids; ++i)
    if (ids[i] < 0 || ids[i] >= tb->nq + tb->np)
      return fh_error_set(FH_ERR_VALUE, "%s: prime id %d is out of range [0, %d)", what, ids[i], tb->nq + tb->np);
  return FH_OK;
}

/* t is uint64 (or `dtype`) [*, nids, N]; returns the number of groups. */
static fh_status check_rows(const char *what, const fh_ckks_tables *tb, const fh_tensor *t, int nids, fh_dtype dtype,
                            int64_t *ngroups) {
  fh_status st = check_device(what, tb, t);
  if (st != FH_OK) return st;
  if (t->dtype != (int)dtype)
    return fh_error_set(FH_ERR_TYPE, "%s: expected a %s tensor, got %s", what, fh_dtype_name(dtype),
                        fh_dtype_name(t->dtype));
  if (t->ndim < 2 || t->shape[t->ndim - 1] != tb->n || t->shape[t->ndim - 2] != nids)
    return fh_error_set(FH_ERR_VALUE, "%s: expected shape [*, %d, %lld] (limb rows, N), got a %d-dimensional tensor%s",
                        what, nids, (long long)tb->n, t->ndim,
                        t->ndim >= 2 ? " with other trailing sizes" : "");
  int64_t numel = fh_tensor_numel(t);
  *ngroups = numel / ((int64_t)nids * tb->n);
  return FH_OK;
}

static fh_status new_like(const fh_tensor *t, fh_dtype dtype, fh_tensor **out) {
  fh_tensor_options o = {dtype, fh_tensor_device(t), false, false};
  return fh_tensor_empty(t->ndim, t->shape, &o, out);
}

/* The rows of t [*, nids, N] as the kernels read them: t itself (a new
 * reference) when its coefficients and limbs are contiguous and its leading
 * dimensions collapse to one group stride *gs, else a contiguous copy (group
 * stride nids * N). So a view such as t:narrow(1, 2, 3) of a batch reaches
 * the kernels as strided groups, without a copy. */
static fh_status rows_of(fh_tensor *t, int64_t n, fh_tensor **out, int64_t *gs) {
  const int nd = t->ndim;
  const int64_t nids = t->shape[nd - 2];
  bool direct = (t->stride[nd - 1] == 1 || n == 1) && (t->stride[nd - 2] == n || nids == 1);
  int64_t g = nids * n;
  /* the innermost leading dimension of extent > 1 sets the stride; outer ones must follow it */
  int64_t expect = -1;
  for (int d = nd - 3; d >= 0 && direct; --d) {
    if (t->shape[d] == 1) continue;
    if (expect < 0) g = t->stride[d];
    else direct = t->stride[d] == expect;
    expect = t->stride[d] * t->shape[d];
  }
  if (direct && g >= 0) {
    fh_tensor_retain(t);
    *out = t;
    *gs = g;
    return FH_OK;
  }
  *gs = nids * n;
  return fh_tensor_contiguous(t, out);
}

/* The rows of `t` (rows_of: in, with group stride *in_gs) and a new
 * contiguous uint64 output of its shape, both registered as uses of the
 * launcher. New references; on failure nothing is held. */
static fh_status unary_io(fh__ckks_launcher *L, fh_tensor *t, fh_tensor **in, int64_t *in_gs, fh_tensor **out) {
  fh_status st = rows_of(t, L->tb->n, in, in_gs);
  if (st != FH_OK) return st;
  if ((st = new_like(t, FH_UINT64, out)) != FH_OK) {
    fh_tensor_release(*in);
    *in = NULL;
    return st;
  }
  fh__ckks_use(L, *in);
  fh__ckks_use(L, *out);
  return FH_OK;
}

/* ---- NTT ------------------------------------------------------------------------------ */
/* The NTT / INTT entries' launch: t's nids rows (primes prime) into a new tensor; with
 * scale_level >= 0 (inverse) the outputs made conversion sources (fh__ckks_source_scale_rows) */
static fh_status ntt_entry(fh_ckks_tables *tb, fh_tensor *t, const int32_t *prime, int nids, bool forward,
                           int scale_level, bool moddown, const char *what, fh_tensor **result) {
  int64_t ngroups = 0;
  fh_status st;
  if ((st = check_rows(what, tb, t, nids, FH_UINT64, &ngroups))) return st;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, tb)) != FH_OK) return st;
  fh_tensor *in = NULL, *out = NULL;
  int64_t in_gs;
  if ((st = unary_io(&L, t, &in, &in_gs, &out)) != FH_OK) return st;
  fh_ckks_ntt_args a;
  fh__ckks_ntt_rows_args(&L, &a, fh__ckks_ptr(out), (int64_t)nids * tb->n, fh__ckks_ptr(in), in_gs, ngroups, prime,
                         nids, NULL, NULL);
  if (scale_level >= 0) fh__ckks_source_scale_rows(tb, scale_level, moddown, &a);
  if (ngroups > 0 && nids > 0) st = fh__ckks_submit(&L, forward ? FH_K_CKKS_NTT : FH_K_CKKS_INTT, &a, sizeof a);
  fh_tensor_release(in);
  return fh__deliver(st, out, result);
}

fh_status fh_ckks_poly_ntt(fh_ckks_tables *tb, fh_tensor *t, const int *ids, int nids, bool forward,
                           fh_tensor **result) {
  const char *what = forward ? "ckks ntt" : "ckks intt";
  fh_status st;
  if ((st = check_ids(what, tb, ids, nids))) return st;
  int32_t prime[FH_CKKS_MAX_PRIMES];
  for (int i = 0; i < nids; ++i) prime[i] = ids[i];
  return ntt_entry(tb, t, prime, nids, forward, -1, false, what, result);
}

/* ---- element-wise --------------------------------------------------------------------- */
static const char *const ew_names[FH_CKKS_EW_OP_COUNT] = {
    "copy", "add", "sub", "neg", "mont_mul", "mont_mac", "mul_const", "add_const", "sub_add_mul",
    "add_mul_const", "to_mont", "from_mont", "signed",
};

static int ew_inputs(int op) {
  switch (op) {
    case FH_CKKS_EW_ADD:
    case FH_CKKS_EW_SUB:
    case FH_CKKS_EW_MONT_MUL:
    case FH_CKKS_EW_SUB_ADD_MUL:
    case FH_CKKS_EW_ADD_MUL_CONST: return 2;
    case FH_CKKS_EW_MONT_MAC: return 3;
    default: return 1;
  }
}

fh_status fh_ckks_poly_ew(fh_ckks_tables *tb, int op, fh_tensor *a, fh_tensor *b, fh_tensor *c, const int *ids,
                          int nids, const uint64_t *k, const uint64_t *cst, fh_tensor **result) {
  if (op < 0 || op >= FH_CKKS_EW_OP_COUNT) return fh_error_set(FH_ERR_VALUE, "ckks ew: invalid operation %d", op);
  char what[64];
  snprintf(what, sizeof what, "ckks %s", ew_names[op]);
  fh_status st = FH_OK;
  if ((st = check_ids(what, tb, ids, nids)) != FH_OK) return st;
  int nin = ew_inputs(op);
  if ((nin >= 2 && b == NULL) || (nin >= 3 && c == NULL))
    return fh_error_set(FH_ERR_VALUE, "%s: needs %d operands", what, nin);
  int64_t ngroups = 0;
  bool broadcast = false;
  int64_t out_shape[FH_MAX_DIMS];
  int out_ndim;
  if (op == FH_CKKS_EW_SIGNED) {
    if ((st = check_device(what, tb, a)) != FH_OK) return st;
    if (a->dtype != FH_INT64)
      return fh_error_set(FH_ERR_TYPE, "%s: expected an int64 tensor, got %s", what, fh_dtype_name(a->dtype));
    if (a->ndim < 1 || a->shape[a->ndim - 1] != tb->n)
      return fh_error_set(FH_ERR_VALUE, "%s: expected shape [*, %lld]", what, (long long)tb->n);
    broadcast = !(a->ndim >= 2 && a->shape[a->ndim - 2] == nids);
    if (broadcast && a->ndim >= FH_MAX_DIMS) return fh_error_set(FH_ERR_VALUE, "%s: too many dimensions", what);
    out_ndim = broadcast ? a->ndim + 1 : a->ndim;
    memcpy(out_shape, a->shape, sizeof(int64_t) * (size_t)(a->ndim - 1));
    if (broadcast) out_shape[a->ndim - 1] = nids;
    out_shape[out_ndim - 1] = tb->n;
    ngroups = fh_tensor_numel(a) / (broadcast ? tb->n : (int64_t)nids * tb->n);
  } else {
    if ((st = check_rows(what, tb, a, nids, FH_UINT64, &ngroups)) != FH_OK) return st;
    out_ndim = a->ndim;
    memcpy(out_shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  }
  fh_tensor *ops[3] = {b, c, NULL};
  for (int i = 0; i < nin - 1; ++i) {
    int64_t g2 = 0;
    if ((st = check_rows(what, tb, ops[i], nids, FH_UINT64, &g2)) != FH_OK) return st;
    bool same = ops[i]->ndim == out_ndim;
    for (int d = 0; same && d < out_ndim; ++d) same = ops[i]->shape[d] == out_shape[d];
    if (!same) return fh_error_set(FH_ERR_VALUE, "%s: operand %d has a different shape", what, i + 2);
  }
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, tb)) != FH_OK) return st;
  fh_tensor *in[3] = {NULL, NULL, NULL}, *src[3] = {a, b, c}, *out = NULL;
  int64_t in_gs[3] = {0, 0, 0};
  for (int i = 0; i < nin && st == FH_OK; ++i) {
    if (i == 0 && op == FH_CKKS_EW_SIGNED) st = fh_tensor_contiguous(src[i], &in[i]);
    else st = rows_of(src[i], tb->n, &in[i], &in_gs[i]);
  }
  if (st == FH_OK) {
    fh_tensor_options o = {FH_UINT64, tb->device, false, false};
    st = fh_tensor_empty(out_ndim, out_shape, &o, &out);
  }
  if (st == FH_OK) {
    for (int i = 0; i < nin; ++i) fh__ckks_use(&L, in[i]);
    fh__ckks_use(&L, out);
    int32_t prime[FH_CKKS_MAX_PRIMES];
    for (int i = 0; i < nids; ++i) prime[i] = ids[i];
    fh_ckks_ew_args args;
    fh__ckks_ew_init(&L, &args, op, ngroups, prime, nids);
    int64_t gs = (int64_t)nids * tb->n;
    args.out = fh__ckks_ptr(out);
    args.out_gs = gs;
    args.a = fh__ckks_ptr(in[0]);
    args.a_gs = op != FH_CKKS_EW_SIGNED ? in_gs[0] : broadcast ? tb->n : gs;
    args.a_ls = broadcast ? 0 : tb->n;
    if (nin >= 2) {
      args.b = fh__ckks_ptr(in[1]);
      args.b_gs = in_gs[1];
    }
    if (nin >= 3) {
      args.c = fh__ckks_ptr(in[2]);
      args.c_gs = in_gs[2];
    }
    for (int l = 0; l < nids; ++l) {
      uint64_t q = tb->primes[ids[l]];
      args.k[l] = k ? k[l] % q : 0;
      fh__ckks_ew_set_const(&L, &args, l, cst ? cst[l] % q : 0);
    }
    if (ngroups > 0) st = fh__ckks_submit(&L, FH_K_CKKS_EW, &args, sizeof args);
  }
  for (int i = 0; i < 3; ++i) fh_tensor_release(in[i]);
  return fh__deliver(st, out, result);
}

/* ---- automorphism ----------------------------------------------------------------------- */
fh_status fh_ckks_poly_automorph(fh_ckks_tables *tb, fh_tensor *t, const int *ids, int nids, uint64_t galois,
                                 bool ntt_domain, fh_tensor **result) {
  const char *what = "ckks automorphism";
  int64_t ngroups = 0;
  fh_status st;
  if ((st = check_ids(what, tb, ids, nids)) || (st = check_rows(what, tb, t, nids, FH_UINT64, &ngroups))) return st;
  if ((galois & 1) == 0 || galois >= 2 * (uint64_t)tb->n)
    return fh_error_set(FH_ERR_VALUE, "%s: the Galois element must be odd and below 2N = %lld, got %llu", what,
                        (long long)(2 * tb->n), (unsigned long long)galois);
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, tb)) != FH_OK) return st;
  fh_tensor *in = NULL, *out = NULL;
  int64_t in_gs;
  if ((st = unary_io(&L, t, &in, &in_gs, &out)) != FH_OK) return st;
  int32_t prime[FH_CKKS_MAX_PRIMES];
  for (int i = 0; i < nids; ++i) prime[i] = ids[i];
  int64_t gs = (int64_t)nids * tb->n;
  st = fh__ckks_automorph(&L, ntt_domain, galois, fh__ckks_ptr(out), gs, fh__ckks_ptr(in), in_gs, ngroups, prime,
                          nids);
  fh_tensor_release(in);
  return fh__deliver(st, out, result);
}

/* ---- encode / decode ----------------------------------------------------------------------- */
/* log2 of the product of the last nlimbs Q primes */
static double log2_q(const fh_ckks_tables *tb, int nlimbs) {
  double s = 0;
  for (int i = tb->nq - nlimbs; i < tb->nq; ++i) s += log2((double)tb->primes[i]);
  return s;
}

fh_status fh_ckks_check_message(const fh_ckks_tables *tb, const fh_tensor *msg, double scale, int nlimbs) {
  const char *what = "ckks encode";
  /* the canonical-embedding coefficients are bounded by the largest slot
   * magnitude, so |slot| * scale < Q/2 keeps every coefficient in range */
  const bool complex_in = msg->dtype == FH_COMPLEX128;
  fh_tensor *c = NULL;
  fh_status st = fh_tensor_contiguous((fh_tensor *)msg, &c);
  if (st != FH_OK) return st;
  const double *v = (const double *)fh_tensor_data(c);
  int64_t cnt = fh_tensor_numel(c) * (complex_in ? 2 : 1);
  double mx = 0;
  for (int64_t i = 0; i < cnt && st == FH_OK; ++i) {
    if (!isfinite(v[i]))
      st = fh_error_set(FH_ERR_VALUE, "%s: message element %lld is not finite (%g)", what,
                        (long long)(complex_in ? i / 2 : i) + 1, v[i]);
    else if (fabs(v[i]) > mx) mx = fabs(v[i]);
  }
  fh_tensor_release(c);
  if (st != FH_OK) return st;
  double lim = log2_q(tb, nlimbs) - 1;
  if (mx > 0 && log2(mx * (complex_in ? M_SQRT2 : 1.0)) + log2(scale) >= lim)
    return fh_error_set(FH_ERR_VALUE,
                        "%s: message magnitude %g at scale 2^%.2f exceeds the modulus of %d prime%s (2^%.1f): it "
                        "would wrap around",
                        what, mx, log2(scale), nlimbs, nlimbs == 1 ? "" : "s", lim + 1);
  return FH_OK;
}

fh_status fh_ckks_poly_encode(fh_ckks_tables *tb, fh_tensor *msg, double scale, int nlimbs, bool with_p,
                              fh_tensor **result) {
  const char *what = "ckks encode";
  fh_status st;
  if (nlimbs < 1 || nlimbs > tb->nq)
    return fh_error_set(FH_ERR_VALUE, "%s: between 1 and %d Q primes, got %d", what, tb->nq, nlimbs);
  if (!(scale > 0) || !isfinite(scale))
    return fh_error_set(FH_ERR_VALUE, "%s: scale must be positive and finite, got %g", what, scale);
  if ((st = check_device(what, tb, msg)) != FH_OK) return st;
  if (msg->dtype != FH_FLOAT64 && msg->dtype != FH_COMPLEX128)
    return fh_error_set(FH_ERR_TYPE, "%s: messages must be float64 or complex128, got %s", what,
                        fh_dtype_name(msg->dtype));
  if (msg->ndim < 1 || msg->ndim >= FH_MAX_DIMS)
    return fh_error_set(FH_ERR_VALUE, "%s: expected a message of shape [*, slots]", what);
  int64_t slots = tb->n / 2, s = msg->shape[msg->ndim - 1];
  if (s > slots)
    return fh_error_set(FH_ERR_VALUE, "%s: %lld message slots given but the context has %lld", what, (long long)s,
                        (long long)slots);
  bool complex_in = msg->dtype == FH_COMPLEX128;
  int64_t ngroups = s > 0 ? fh_tensor_numel(msg) / s : 0;
  for (int d = 0; d < msg->ndim - 1; ++d)
    if (msg->shape[d] == 0) ngroups = 0;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, tb)) != FH_OK) return st;
  fh_tensor *in = NULL, *out = NULL, *work = NULL;
  if ((st = fh_tensor_contiguous(msg, &in)) != FH_OK) return st;
  if (fh_tensor_device(in).type == FH_DEVICE_CPU && !fh_launch_capturing(fh_cpu()) &&
      (st = fh_ckks_check_message(tb, in, scale, nlimbs)) != FH_OK) {
    fh_tensor_release(in);
    return st;
  }
  int64_t shape[FH_MAX_DIMS];
  memcpy(shape, msg->shape, sizeof(int64_t) * (size_t)(msg->ndim - 1));
  const int nrows = nlimbs + (with_p ? tb->np : 0);
  shape[msg->ndim - 1] = nrows;
  shape[msg->ndim] = tb->n;
  fh_tensor_options o = {FH_UINT64, tb->device, false, false};
  int64_t wshape[2] = {ngroups, tb->n};
  fh_tensor_options wo = {FH_FLOAT64, tb->device, false, false};
  if ((st = fh_tensor_empty(msg->ndim + 1, shape, &o, &out)) == FH_OK) st = fh_tensor_empty(2, wshape, &wo, &work);
  if (st == FH_OK) {
    fh__ckks_use(&L, in);
    fh__ckks_use(&L, out);
    fh__ckks_use(&L, work);
    fh_ckks_encode_args a;
    memset(&a, 0, sizeof a);
    a.out = fh__ckks_ptr(out);
    a.in = (const double *)fh_tensor_data(in);
    a.work = (double *)fh_tensor_data(work);
    a.out_gs = (int64_t)nrows * tb->n;
    a.in_gs = s * (complex_in ? 2 : 1);
    a.work_gs = tb->n;
    a.ngroups = ngroups;
    a.nslots_in = s;
    a.in_complex = complex_in;
    a.nlimbs = nrows;
    a.log_n = tb->log_n;
    a.scale = scale;
    a.primes = tb->primes_dev;
    a.rot_group = tb->rot_group;
    a.ksi = tb->ksi;
    for (int i = 0; i < nlimbs; ++i) a.prime[i] = tb->nq - nlimbs + i;
    for (int i = nlimbs; i < nrows; ++i) a.prime[i] = tb->nq + i - nlimbs; /* the P primes */
    if (ngroups > 0) st = fh__ckks_submit(&L, FH_K_CKKS_ENCODE, &a, sizeof a);
  }
  fh_tensor_release(in);
  fh_tensor_release(work);
  return fh__deliver(st, out, result);
}

fh_status fh_ckks_poly_decode(fh_ckks_tables *tb, fh_tensor *coeffs, double scale, bool complex_out,
                              fh_tensor **result) {
  const char *what = "ckks decode";
  fh_status st;
  if (!(scale > 0) || !isfinite(scale))
    return fh_error_set(FH_ERR_VALUE, "%s: scale must be positive and finite, got %g", what, scale);
  if (coeffs->ndim < 2)
    return fh_error_set(FH_ERR_VALUE, "%s: expected shape [*, limb, N], got %d dimension%s", what, coeffs->ndim,
                        coeffs->ndim == 1 ? "" : "s");
  int nlimbs = (int)coeffs->shape[coeffs->ndim - 2];
  if (nlimbs < 1 || nlimbs > tb->nq)
    return fh_error_set(FH_ERR_VALUE, "%s: between 1 and %d Q primes, got %d limb rows", what, tb->nq, nlimbs);
  int64_t ngroups = 0;
  if ((st = check_rows(what, tb, coeffs, nlimbs, FH_UINT64, &ngroups)) != FH_OK) return st;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, tb)) != FH_OK) return st;
  fh_tensor *in = NULL, *out = NULL, *work = NULL;
  if ((st = fh_tensor_contiguous(coeffs, &in)) != FH_OK) return st;
  int64_t shape[FH_MAX_DIMS];
  memcpy(shape, coeffs->shape, sizeof(int64_t) * (size_t)(coeffs->ndim - 2));
  shape[coeffs->ndim - 2] = tb->n / 2;
  fh_tensor_options o = {complex_out ? FH_COMPLEX128 : FH_FLOAT64, tb->device, false, false};
  int64_t wshape[2] = {ngroups, 2 * tb->n}; /* fh_ckks_decode_args.work */
  fh_tensor_options wo = {FH_FLOAT64, tb->device, false, false};
  if ((st = fh_tensor_empty(coeffs->ndim - 1, shape, &o, &out)) == FH_OK) st = fh_tensor_empty(2, wshape, &wo, &work);
  if (st == FH_OK) {
    fh__ckks_use(&L, in);
    fh__ckks_use(&L, out);
    fh__ckks_use(&L, work);
    fh_ckks_decode_args a;
    memset(&a, 0, sizeof a);
    a.out = (double *)fh_tensor_data(out);
    a.in = fh__ckks_ptr(in);
    a.work = (double *)fh_tensor_data(work);
    a.out_gs = complex_out ? tb->n : tb->n / 2;
    a.in_gs = (int64_t)nlimbs * tb->n;
    a.work_gs = 2 * tb->n;
    a.ngroups = ngroups;
    a.out_complex = complex_out;
    a.nlimbs = nlimbs;
    a.log_n = tb->log_n;
    a.nq = tb->nq;
    a.scale = scale;
    a.primes = tb->primes_dev;
    a.rot_group = tb->rot_group;
    a.ksi = tb->ksi;
    a.garner = tb->garner;
    for (int i = 0; i < nlimbs; ++i) a.prime[i] = tb->nq - nlimbs + i;
    if (ngroups > 0) st = fh__ckks_submit(&L, FH_K_CKKS_DECODE, &a, sizeof a);
  }
  fh_tensor_release(in);
  fh_tensor_release(work);
  return fh__deliver(st, out, result);
}

fh_status fh_ckks_poly_decode_real(fh_ckks_tables *tb, fh_tensor *coeffs, double scale, bool complex_out,
                                   fh_tensor **result) {
  const char *what = "ckks decode";
  fh_status st;
  if (!(scale > 0) || !isfinite(scale))
    return fh_error_set(FH_ERR_VALUE, "%s: scale must be positive and finite, got %g", what, scale);
  if ((st = check_device(what, tb, coeffs)) != FH_OK) return st;
  if (coeffs->dtype != FH_FLOAT64)
    return fh_error_set(FH_ERR_TYPE, "%s: expected a float64 tensor of coefficients, got %s", what,
                        fh_dtype_name(coeffs->dtype));
  if (coeffs->ndim < 1 || coeffs->shape[coeffs->ndim - 1] != tb->n)
    return fh_error_set(FH_ERR_VALUE, "%s: expected shape [*, %lld] (coefficients), got a %d-dimensional tensor", what,
                        (long long)tb->n, coeffs->ndim);
  int64_t ngroups = fh_tensor_numel(coeffs) / tb->n;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, tb)) != FH_OK) return st;
  fh_tensor *in = NULL, *out = NULL, *work = NULL;
  if ((st = fh_tensor_contiguous(coeffs, &in)) != FH_OK) return st;
  int64_t shape[FH_MAX_DIMS];
  memcpy(shape, coeffs->shape, sizeof(int64_t) * (size_t)coeffs->ndim);
  shape[coeffs->ndim - 1] = tb->n / 2;
  fh_tensor_options o = {complex_out ? FH_COMPLEX128 : FH_FLOAT64, tb->device, false, false};
  int64_t wshape[2] = {ngroups, 2 * tb->n};
  fh_tensor_options wo = {FH_FLOAT64, tb->device, false, false};
  if ((st = fh_tensor_empty(coeffs->ndim, shape, &o, &out)) == FH_OK) st = fh_tensor_empty(2, wshape, &wo, &work);
  if (st == FH_OK) {
    fh__ckks_use(&L, in);
    fh__ckks_use(&L, out);
    fh__ckks_use(&L, work);
    fh_ckks_decode_args a;
    memset(&a, 0, sizeof a);
    a.out = (double *)fh_tensor_data(out);
    a.in_real = (const double *)fh_tensor_data(in);
    a.work = (double *)fh_tensor_data(work);
    a.out_gs = complex_out ? tb->n : tb->n / 2;
    a.in_gs = tb->n;
    a.work_gs = 2 * tb->n;
    a.ngroups = ngroups;
    a.out_complex = complex_out;
    a.nlimbs = 0;
    a.log_n = tb->log_n;
    a.nq = tb->nq;
    a.scale = scale;
    a.primes = tb->primes_dev;
    a.rot_group = tb->rot_group;
    a.ksi = tb->ksi;
    a.garner = tb->garner;
    if (ngroups > 0) st = fh__ckks_submit(&L, FH_K_CKKS_DECODE, &a, sizeof a);
  }
  fh_tensor_release(in);
  fh_tensor_release(work);
  return fh__deliver(st, out, result);
}

/* ---- tensor product, base conversion, key-switching inner product ------------------------- */
/* t is uint64 [lead, *, nids, N] with lead components; returns the groups per component. */
static fh_status check_components(const char *what, const fh_ckks_tables *tb, const fh_tensor *t, int lead, int nids,
                                  int64_t *ngroups) {
  fh_status st = check_rows(what, tb, t, nids, FH_UINT64, ngroups);
  if (st != FH_OK) return st;
  if (t->ndim < 3 || t->shape[0] != lead)
    return fh_error_set(FH_ERR_VALUE, "%s: expected %d components (shape [%d, *, %d, %lld])", what, lead, lead, nids,
                        (long long)tb->n);
  *ngroups /= lead;
  return FH_OK;
}

fh_status fh_ckks_poly_tensor(fh_ckks_tables *tb, fh_tensor *a, fh_tensor *b, const int *ids, int nids,
                              fh_tensor **result) {
  const char *what = "ckks tensor";
  int64_t ga, gb;
  fh_status st;
  if ((st = check_ids(what, tb, ids, nids)) || (st = check_components(what, tb, a, 2, nids, &ga)) ||
      (st = check_components(what, tb, b, 2, nids, &gb)))
    return st;
  if (ga != gb || a->ndim != b->ndim) return fh_error_set(FH_ERR_VALUE, "%s: a and b have different shapes", what);
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, tb)) != FH_OK) return st;
  fh_tensor *x = NULL, *y = NULL, *out = NULL;
  int64_t shape[FH_MAX_DIMS];
  memcpy(shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  shape[0] = 3;
  fh_tensor_options o = {FH_UINT64, tb->device, false, false};
  if ((st = fh_tensor_contiguous(a, &x)) == FH_OK && (st = fh_tensor_contiguous(b, &y)) == FH_OK)
    st = fh_tensor_empty(a->ndim, shape, &o, &out);
  if (st == FH_OK && ga > 0) {
    fh__ckks_use(&L, x);
    fh__ckks_use(&L, y);
    fh__ckks_use(&L, out);
    fh_ckks_tensor_args k;
    memset(&k, 0, sizeof k);
    int64_t gs = (int64_t)nids * tb->n, cs = ga * gs;
    k.out = fh__ckks_ptr(out);
    k.a = fh__ckks_ptr(x);
    k.b = fh__ckks_ptr(y);
    k.out_cs = k.a_cs = k.b_cs = cs;
    k.out_gs = k.a_gs = k.b_gs = gs;
    k.ngroups = ga;
    k.nlimbs = nids;
    k.log_n = tb->log_n;
    k.primes = tb->primes_dev;
    for (int i = 0; i < nids; ++i) k.prime[i] = ids[i];
    st = fh__ckks_submit(&L, FH_K_CKKS_TENSOR, &k, sizeof k);
  }
  if (x) fh_tensor_release(x);
  if (y) fh_tensor_release(y);
  return fh__deliver(st, out, result);
}

fh_status fh_ckks_poly_bconv(fh_ckks_tables *tb, fh_tensor *t, const int *src, int nsrc, const int *dst, int ndst,
                             bool center, fh_tensor **result) {
  const char *what = "ckks bconv";
  int64_t ngroups;
  fh_status st;
  if ((st = check_ids(what, tb, src, nsrc)) || (st = check_ids(what, tb, dst, ndst)) ||
      (st = check_rows(what, tb, t, nsrc, FH_UINT64, &ngroups)))
    return st;
  for (int i = 0; i < nsrc; ++i)
    for (int j = 0; j < i; ++j)
      if (src[i] == src[j]) return fh_error_set(FH_ERR_VALUE, "%s: source prime id %d appears twice", what, src[i]);
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, tb)) != FH_OK) return st;
  /* the constants for this pair of bases, computed on the host and moved to the device */
  size_t words = fh_ckks_bconv_words(nsrc, ndst);
  int64_t cshape[1] = {(int64_t)words};
  fh_tensor_options ho = {FH_UINT64, fh_cpu(), false, false};
  fh_tensor *hc = NULL, *consts = NULL, *in = NULL, *out = NULL;
  if ((st = fh_tensor_empty(1, cshape, &ho, &hc)) != FH_OK) return st;
  fh_ckks_bconv_constants(tb, src, nsrc, dst, ndst, fh__ckks_ptr(hc));
  if (tb->device.type == FH_DEVICE_CPU) {
    consts = hc;
    hc = NULL;
  } else {
    st = fh_tensor_to(hc, tb->device, false, NULL, false, &consts);
  }
  int64_t in_gs = 0;
  if (st == FH_OK) st = rows_of(t, tb->n, &in, &in_gs);
  if (st == FH_OK) {
    int64_t shape[FH_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[t->ndim - 2] = ndst;
    fh_tensor_options o = {FH_UINT64, tb->device, false, false};
    st = fh_tensor_empty(t->ndim, shape, &o, &out);
  }
  if (st == FH_OK && ngroups > 0) {
    fh__ckks_use(&L, consts);
    fh__ckks_use(&L, in);
    fh__ckks_use(&L, out);
    fh_ckks_bconv_args b;
    memset(&b, 0, sizeof b);
    b.out = fh__ckks_ptr(out);
    b.in = fh__ckks_ptr(in);
    b.out_gs = (int64_t)ndst * tb->n;
    b.in_gs = in_gs;
    b.ngroups = ngroups;
    b.nsrc = nsrc;
    b.ndst = ndst;
    b.log_n = tb->log_n;
    b.primes = tb->primes_dev;
    b.consts = fh__ckks_ptr(consts);
    b.center = center;
    for (int i = 0; i < nsrc; ++i) {
      b.src_prime[i] = src[i];
      b.src_row[i] = i;
    }
    for (int j = 0; j < ndst; ++j) {
      b.dst_prime[j] = dst[j];
      b.dst_row[j] = j;
    }
    st = fh__ckks_submit(&L, FH_K_CKKS_BCONV, &b, sizeof b);
  }
  if (hc) fh_tensor_release(hc);
  if (consts) fh_tensor_release(consts);
  if (in) fh_tensor_release(in);
  return fh__deliver(st, out, result);
}

/* steps 0: one product with galois[0]; else `steps` (1 to FH_CKKS_KS_MAX_STEPS, the caller's
 * check) products in one launch, result [steps, ...] */
static fh_status ks_inner_impl(fh_ckks_tables *tb, fh_tensor *digits, fh_tensor *key, const int *ids,
                               const int *key_rows, int nids, const uint64_t *galois, int steps,
                               fh_tensor **result) {
  const char *what = "ckks ks_inner";
  int64_t ng, nk;
  fh_status st;
  for (int s = 0; s < (steps > 0 ? steps : 1); ++s)
    if ((galois[s] & 1) == 0 || galois[s] >= 2 * (uint64_t)tb->n)
      return fh_error_set(FH_ERR_VALUE, "%s: the Galois element must be odd and below 2N = %lld, got %llu", what,
                          (long long)(2 * tb->n), (unsigned long long)galois[s]);
  if ((st = check_ids(what, tb, ids, nids)) || (st = check_rows(what, tb, digits, nids, FH_UINT64, &ng)))
    return st;
  if (digits->ndim < 3)
    return fh_error_set(FH_ERR_VALUE, "%s: digits expected shape [*, digit, %d, %lld]", what, nids, (long long)tb->n);
  int nd = (int)digits->shape[digits->ndim - 3];
  if (key->ndim != 4 || key->shape[0] != nd || key->shape[1] != 2)
    return fh_error_set(FH_ERR_VALUE, "%s: key expected shape [%d, 2, rows, %lld]", what, nd, (long long)tb->n);
  if ((st = check_rows(what, tb, key, (int)key->shape[2], FH_UINT64, &nk)) != FH_OK) return st;
  for (int i = 0; i < nids; ++i)
    if (key_rows[i] < 0 || key_rows[i] >= key->shape[2])
      return fh_error_set(FH_ERR_VALUE, "%s: key row %d is out of range [0, %lld)", what, key_rows[i],
                          (long long)key->shape[2]);
  int64_t groups = nd > 0 ? ng / nd : 0;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, tb)) != FH_OK) return st;
  fh_tensor *x = NULL, *k = NULL, *out = NULL;
  int64_t shape[FH_MAX_DIMS + 1];
  const int lead = steps > 0 ? 1 : 0;
  if (lead && digits->ndim + 1 > FH_MAX_DIMS)
    return fh_error_set(FH_ERR_VALUE, "%s: digits have %d dimensions; the steps' result needs one more (at most %d)",
                        what, digits->ndim, FH_MAX_DIMS);
  shape[0] = steps;
  memcpy(shape + lead, digits->shape, sizeof(int64_t) * (size_t)digits->ndim);
  shape[lead + digits->ndim - 3] = 2;
  fh_tensor_options o = {FH_UINT64, tb->device, false, false};
  if ((st = fh_tensor_contiguous(digits, &x)) == FH_OK && (st = fh_tensor_contiguous(key, &k)) == FH_OK)
    st = fh_tensor_empty(digits->ndim + lead, shape, &o, &out);
  if (st == FH_OK && groups > 0 && nd > 0) {
    fh__ckks_use(&L, x);
    fh__ckks_use(&L, k);
    fh__ckks_use(&L, out);
    int64_t rows = (int64_t)nids * tb->n, krows = key->shape[2] * tb->n;
    fh_ckks_ks_args a;
    memset(&a, 0, sizeof a);
    a.out = fh__ckks_ptr(out);
    a.digits = fh__ckks_ptr(x);
    a.key = fh__ckks_ptr(k);
    a.out_gs = 2 * rows;
    a.out_cs = rows;
    a.digits_gs = (int64_t)nd * rows;
    a.digit_stride = rows;
    a.key_ds = 2 * krows;
    a.key_cs = krows;
    a.ngroups = groups;
    a.ndigits = nd;
    a.nlimbs = nids;
    a.log_n = tb->log_n;
    a.galois = galois[0];
    a.nsteps = steps;
    for (int s = 0; s < steps; ++s) {
      a.step_out[s] = fh__ckks_ptr(out) + (int64_t)s * groups * 2 * rows;
      a.step_key[s] = a.key;
      a.step_galois[s] = galois[s];
    }
    a.primes = tb->primes_dev;
    for (int i = 0; i < nids; ++i) {
      a.prime[i] = ids[i];
      a.key_row[i] = key_rows[i];
    }
    st = fh__ckks_submit(&L, FH_K_CKKS_KS_INNER, &a, sizeof a);
  }
  if (x) fh_tensor_release(x);
  if (k) fh_tensor_release(k);
  return fh__deliver(st, out, result);
}

fh_status fh_ckks_poly_ks_inner(fh_ckks_tables *tb, fh_tensor *digits, fh_tensor *key, const int *ids,
                                const int *key_rows, int nids, uint64_t galois, fh_tensor **result) {
  return ks_inner_impl(tb, digits, key, ids, key_rows, nids, &galois, 0, result);
}

fh_status fh_ckks_poly_ks_inner_steps(fh_ckks_tables *tb, fh_tensor *digits, fh_tensor *key, const int *ids,
                                      const int *key_rows, int nids, const uint64_t *galois, int nsteps,
                                      fh_tensor **result) {
  if (nsteps < 1 || nsteps > FH_CKKS_KS_MAX_STEPS)
    return fh_error_set(FH_ERR_VALUE, "ckks ks_inner: between 1 and %d steps are needed, got %d", FH_CKKS_KS_MAX_STEPS,
                        nsteps);
  return ks_inner_impl(tb, digits, key, ids, key_rows, nids, galois, nsteps, result);
}

fh_status fh_ckks_poly_modup(fh_ckks_tables *tb, fh_tensor *t, int level, fh_tensor **result) {
  const char *what = "ckks modup";
  fh_status st;
  if (tb->np == 0) return fh_error_set(FH_ERR_VALUE, "%s: the tables have no P primes", what);
  if (level < 0 || level >= tb->nq)
    return fh_error_set(FH_ERR_VALUE, "%s: level %d is outside [0, %d)", what, level, tb->nq);
  const int nq = tb->nq, np = tb->np, dnum = tb->dnum;
  const int la = nq - level, lk = la + np, j0 = fh_ckks_tables_first_digit(tb, level), ndig = dnum - j0;
  int64_t ngroups;
  if ((st = check_rows(what, tb, t, la, FH_UINT64, &ngroups)) != FH_OK) return st;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, tb)) != FH_OK) return st;
  fh_tensor *in = NULL, *out = NULL;
  int64_t in_gs = 0;
  if ((st = rows_of(t, tb->n, &in, &in_gs)) != FH_OK) return st;
  int64_t shape[FH_MAX_DIMS];
  memcpy(shape, t->shape, sizeof(int64_t) * (size_t)(t->ndim - 2));
  shape[t->ndim - 2] = ndig;
  shape[t->ndim - 1] = lk;
  shape[t->ndim] = tb->n;
  fh_tensor_options o = {FH_UINT64, tb->device, false, false};
  if (t->ndim + 1 > FH_MAX_DIMS) st = fh_error_set(FH_ERR_VALUE, "%s: too many dimensions", what);
  if (st == FH_OK) st = fh_tensor_empty(t->ndim + 1, shape, &o, &out);
  if (st == FH_OK && ngroups > 0) {
    fh__ckks_use(&L, in);
    fh__ckks_use(&L, out);
    fh_ckks_modup_args u;
    memset(&u, 0, sizeof u);
    u.out = fh__ckks_ptr(out);
    u.in = fh__ckks_ptr(in);
    u.out_gs = (int64_t)ndig * lk * tb->n;
    u.out_ds = (int64_t)lk * tb->n;
    u.in_gs = in_gs;
    u.ngroups = ngroups;
    u.ndigits = ndig;
    u.nrows = lk;
    u.log_n = tb->log_n;
    u.center = 1;
    u.primes = tb->primes_dev;
    for (int jj = 0; jj < ndig; ++jj) {
      int j = j0 + jj;
      int first = tb->digit_start[j] > level ? tb->digit_start[j] : level;
      int last = tb->digit_start[j + 1];
      u.consts[jj] = tb->modup[level * dnum + j];
      u.first[jj] = first - level;
      u.nsrc[jj] = last - first;
    }
    for (int i = 0; i < la; ++i) u.prime[i] = level + i;
    for (int k = 0; k < np; ++k) u.prime[la + k] = nq + k;
    st = fh__ckks_submit(&L, FH_K_CKKS_MODUP, &u, sizeof u);
  }
  fh_tensor_release(in);
  return fh__deliver(st, out, result);
}

fh_status fh_ckks_poly_intt_sources(fh_ckks_tables *tb, fh_tensor *t, int level, bool moddown, fh_tensor **result) {
  const char *what = "ckks intt_sources";
  if (tb->np == 0) return fh_error_set(FH_ERR_VALUE, "%s: the tables have no P primes", what);
  if (level < 0 || level >= tb->nq)
    return fh_error_set(FH_ERR_VALUE, "%s: level %d is outside [0, %d)", what, level, tb->nq);
  const int rows = moddown ? tb->np : tb->nq - level;
  int32_t prime[FH_CKKS_MAX_PRIMES];
  for (int i = 0; i < rows; ++i) prime[i] = moddown ? tb->nq + i : level + i;
  return ntt_entry(tb, t, prime, rows, false, level, moddown, what, result);
}

fh_status fh_ckks_poly_sample(fh_ckks_tables *tb, fh_ckks_rng *r, int nt, int ng, fh_tensor **result) {
  const char *what = "ckks sample";
  if (nt < 0 || ng < 0) return fh_error_set(FH_ERR_VALUE, "%s: %d ternary and %d Gaussian rows", what, nt, ng);
  fh__ckks_launcher L;
  fh_status st = fh__ckks_launcher_init(&L, tb);
  if (st != FH_OK) return st;
  int64_t shape[2] = {(int64_t)nt + ng, tb->n};
  fh_tensor_options o = {FH_INT64, tb->device, false, false};
  fh_tensor *out = NULL;
  if ((st = fh_tensor_empty(2, shape, &o, &out)) != FH_OK) return st;
  fh__ckks_use(&L, out);
  st = fh__ckks_sample(&L, r, (int64_t *)fh_tensor_data(out), tb->n, nt, ng);
  return fh__deliver(st, out, result);
}

fh_status fh__ckks_sample(fh__ckks_launcher *L, fh_ckks_rng *r, int64_t *out, int64_t n, int64_t nt, int64_t ng) {
  fh_ckks_sample_args a;
  memset(&a, 0, sizeof a);
  a.out = out;
  a.n = n;
  a.nt = (int32_t)nt;
  a.ng = (int32_t)ng;
  fh_ckks_rng_reserve(r, (uint64_t)nt * fh_ckks_ternary_words((uint64_t)n) + (uint64_t)ng * fh_ckks_gaussian_words((uint64_t)n),
                      &a.pos);
  memcpy(a.cdt, fh_ckks_gaussian_table(), sizeof a.cdt);
  fh_status st = fh__ckks_submit(L, FH_K_CKKS_SAMPLE, &a, sizeof a);
  fh_ckks_wipe(&a.pos, sizeof a.pos); /* the stream's key */
  return st;
}
