/* CKKS engine: tables cache, validation helpers, randomness, keys, encoding,
 * encryption, decryption and key switching (fh/ckks_engine.h). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckks_internal.h"
#include "fh/internal.h"

/* ---- tables cache (context extension slots) ------------------------------------ */
static fh_status build_cpu_tables(const fh_ckks_context *ctx, void *arg, void **out) {
  (void)arg;
  fh_ckks_tables *t = NULL;
  fh_status st = fh_ckks_tables_new_layout(ctx->log_n, ctx->primes, ctx->num_q, ctx->num_p, ctx->galois_generator,
                                           ctx->num_digits, ctx->digit_start, fh_cpu(), &t);
  if (st == FH_OK) *out = t;
  return st;
}
static void free_tables(void *p) { fh_ckks_tables_release(p); }

#define MAX_CUDA_DEVICES 64
typedef struct device_tables {
  pthread_mutex_t lock;
  fh_ckks_tables *dev[MAX_CUDA_DEVICES];
} device_tables;
static fh_status build_device_slot(const fh_ckks_context *ctx, void *arg, void **out) {
  (void)ctx;
  (void)arg;
  device_tables *d = fh_calloc(1, sizeof *d);
  if (d == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory caching CKKS tables");
  pthread_mutex_init(&d->lock, NULL);
  *out = d;
  return FH_OK;
}
static void free_device_slot(void *p) {
  device_tables *d = p;
  for (int i = 0; i < MAX_CUDA_DEVICES; ++i) fh_ckks_tables_release(d->dev[i]);
  pthread_mutex_destroy(&d->lock);
  fh_free(d);
}

fh_status fh_ckks_context_tables(fh_ckks_context *ctx, fh_device dev, fh_ckks_tables **out) {
  fh_status st = fh_device_check(dev);
  if (st != FH_OK) return st;
  void *p = NULL;
  if (dev.type == FH_DEVICE_CPU) {
    if ((st = fh_ckks_context_ext(ctx, FH_CKKS_EXT_HOST_TABLES, build_cpu_tables, free_tables, NULL, &p)) != FH_OK)
      return st;
    *out = p;
    return FH_OK;
  }
  if (dev.index < 0 || dev.index >= MAX_CUDA_DEVICES)
    return fh_error_set(FH_ERR_VALUE, "CUDA device %d is beyond the %d devices the CKKS tables cache supports", dev.index,
                        MAX_CUDA_DEVICES);
  if ((st = fh_ckks_context_ext(ctx, FH_CKKS_EXT_DEVICE_TABLES, build_device_slot, free_device_slot, NULL, &p)) != FH_OK)
    return st;
  device_tables *d = p;
  pthread_mutex_lock(&d->lock);
  if (d->dev[dev.index] == NULL)
    st = fh_ckks_tables_new_layout(ctx->log_n, ctx->primes, ctx->num_q, ctx->num_p, ctx->galois_generator,
                                   ctx->num_digits, ctx->digit_start, dev, &d->dev[dev.index]);
  fh_ckks_tables *t = d->dev[dev.index];
  pthread_mutex_unlock(&d->lock);
  if (st != FH_OK) return st;
  *out = t;
  return FH_OK;
}

/* ---- contexts from bit sizes --------------------------------------------------------- */
fh_status fh_ckks_context_from_bits(int log_n, const int *q_bits, int nq, const int *p_bits, int np, double scale,
                                    bool enforce_security, fh_ckks_context **out) {
  if (log_n < FH_CKKS_MIN_LOG_N || log_n > FH_CKKS_MAX_LOG_N)
    return fh_error_set(FH_ERR_VALUE, "log_n must be in [%d, %d], got %d", FH_CKKS_MIN_LOG_N, FH_CKKS_MAX_LOG_N, log_n);
  if (nq < 2) return fh_error_set(FH_ERR_VALUE, "q_bits needs at least 2 sizes (scale primes, then the base prime)");
  if (np < 1) return fh_error_set(FH_ERR_VALUE, "p_bits needs at least 1 size");
  if (nq + np > FH_CKKS_MAX_PRIMES)
    return fh_error_set(FH_ERR_VALUE, "at most %d primes in all, got %d", FH_CKKS_MAX_PRIMES, nq + np);
  for (int i = 0; i < nq + np; ++i) {
    int b = i < nq ? q_bits[i] : p_bits[i - nq];
    if (b < 20 || b > 60)
      return fh_error_set(FH_ERR_VALUE, "%s[%d] = %d: prime sizes must be between 20 and 60 bits",
                          i < nq ? "q_bits" : "p_bits", i < nq ? i + 1 : i - nq + 1, b);
  }
  uint64_t m = 2ULL << log_n;
  uint64_t primes[FH_CKKS_MAX_PRIMES];
  int n = 0;
  /* per bit size: the next candidate above / below 2^b (scale primes alternate,
   * starting above) and the next one below for base and P primes */
  uint64_t up[61] = {0}, down[61], low[61];
  int nscale[61] = {0};
  for (int b = 0; b <= 60; ++b) down[b] = low[b] = 1;
  for (int i = 0; i < nq + np; ++i) {
    int b = i < nq ? q_bits[i] : p_bits[i - nq];
    bool scale_prime = i < nq - 1;
    bool above = scale_prime && (nscale[b]++ % 2) == 0;
    uint64_t q = 0;
    while (q == 0) {
      uint64_t c;
      if (above) {
        c = (1ULL << b) + 1 + (up[b]++) * m;
      } else {
        uint64_t *k = scale_prime ? &down[b] : &low[b];
        if (*k * m >= (1ULL << (b - 1)))
          return fh_error_set(FH_ERR_VALUE, "not enough %d-bit primes = 1 mod 2N for the requested chain", b);
        c = (1ULL << b) + 1 - (*k)++ * m;
      }
      if (!fh_is_prime_u64(c)) continue;
      bool used = false;
      for (int k = 0; k < n && !used; ++k) used = primes[k] == c;
      if (!used) q = c;
    }
    primes[n++] = q;
  }
  fh_ckks_context_spec spec = {(int64_t)1 << log_n, scale, nq, np, primes, primes + nq, enforce_security, 0, false, 0};
  return fh_ckks_context_new(&spec, out);
}

/* ---- engine ----------------------------------------------------------------------- */
fh_status fh_ckks_engine_new(fh_ckks_context *ctx, fh_device dev, const uint64_t *seed, fh_ckks_engine **out) {
  if (ctx == NULL) return fh_error_set(FH_ERR_VALUE, "CkksEngine: a context is required");
  fh_ckks_tables *tb = NULL;
  fh_status st = fh_ckks_context_tables(ctx, dev, &tb);
  if (st != FH_OK) return st;
  fh_ckks_engine *e = fh_calloc(1, sizeof *e);
  if (e == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory creating a CKKS engine");
  if ((st = fh_ckks_rng_new(seed, &e->rng)) != FH_OK) {
    fh_free(e);
    return st;
  }
  fh_rc_init(&e->rc);
  fh_ckks_context_retain(ctx);
  e->ctx = ctx;
  e->dev = dev;
  e->tb = tb;
  *out = e;
  return FH_OK;
}

void fh_ckks_engine_retain(fh_ckks_engine *e) { fh_rc_retain(&e->rc); }
void fh_ckks_engine_release(fh_ckks_engine *e) {
  if (e == NULL || !fh_rc_release(&e->rc)) return;
  for (int i = 0; i < e->nrot; ++i) fh_value_release(e->rot_keys[i]);
  fh_free(e->rot_keys);
  if (e->conj_key) fh_value_release(e->conj_key);
  fh_ckks_rng_free(e->rng);
  fh_ckks_context_release(e->ctx);
  fh_free(e);
}
fh_ckks_context *fh_ckks_engine_context(const fh_ckks_engine *e) { return e->ctx; }
fh_device fh_ckks_engine_device(const fh_ckks_engine *e) { return e->dev; }
bool fh_ckks_engine_is_seeded(const fh_ckks_engine *e) { return fh_ckks_rng_is_seeded(e->rng); }
int fh_ckks_engine_dnum(const fh_ckks_engine *e) { return e->tb->dnum; }
fh_ckks_tables *fh_ckks_engine_tables(const fh_ckks_engine *e) { return e->tb; }

/* ---- validation ------------------------------------------------------------------------ */
fh_status fh__ckks_need_type(const char *op, const char *arg, const fh_value *v, fh_value_type t) {
  if (v == NULL) return fh_error_set(FH_ERR_TYPE, "%s: %s expected a %s, got nothing", op, arg, fh_value_type_name(t));
  if (fh_value_get_type(v) != t)
    return fh_error_set(FH_ERR_TYPE, "%s: %s expected a %s, got a %s", op, arg, fh_value_type_name(t),
                        fh_value_type_name(fh_value_get_type(v)));
  return FH_OK;
}

fh_status fh__ckks_need_engine(const fh_ckks_engine *e, const char *op, const char *arg, const fh_value *v) {
  if (v->ctx != e->ctx)
    return fh_error_set(FH_ERR_STATE, "%s: context_id of %s is '%.12s...' but the engine's context is '%.12s...'", op,
                        arg, v->ctx ? v->ctx->id : "(none)", e->ctx->id);
  if (!fh_device_eq(fh_value_device(v), e->dev)) {
    char a[FH_DEVICE_NAME_MAX], b[FH_DEVICE_NAME_MAX];
    return fh_error_set(FH_ERR_VALUE, "%s: %s is on %s but the engine runs on %s", op, arg,
                        fh_device_name(fh_value_device(v), a), fh_device_name(e->dev, b));
  }
  return FH_OK;
}

fh_status fh__ckks_need_ct(const fh_ckks_engine *e, const char *op, const char *arg, const fh_value *v) {
  fh_status st;
  if ((st = fh__ckks_need_type(op, arg, v, FH_CIPHERTEXT)) || (st = fh__ckks_need_engine(e, op, arg, v))) return st;
  if (v->state.modulus_basis != FH_BASIS_Q)
    return fh_error_set(FH_ERR_STATE, "%s: modulus_basis of %s is %s, expected Q", op, arg,
                        fh_basis_name((fh_modulus_basis)v->state.modulus_basis));
  return FH_OK;
}

fh_status fh__ckks_need_key(const fh_ckks_engine *e, const char *op, const char *arg, const fh_value *v,
                            fh_value_type type, fh_modulus_basis basis) {
  fh_status st;
  if ((st = fh__ckks_need_type(op, arg, v, type)) || (st = fh__ckks_need_engine(e, op, arg, v))) return st;
  if (v->state.level != 0)
    return fh_error_set(FH_ERR_STATE, "%s: level of %s is %d: keys must cover every prime (level 0)", op, arg,
                        v->state.level);
  if (v->state.modulus_basis != (int)basis)
    return fh_error_set(FH_ERR_STATE, "%s: modulus_basis of %s is %s, expected %s", op, arg,
                        fh_basis_name((fh_modulus_basis)v->state.modulus_basis), fh_basis_name(basis));
  if (v->state.polynomial_domain != FH_DOMAIN_NTT)
    return fh_error_set(FH_ERR_STATE, "%s: polynomial_domain of %s is %s, expected ntt", op, arg,
                        fh_domain_name((fh_polynomial_domain)v->state.polynomial_domain));
  if (type == FH_RELINEARIZATION_KEY || type == FH_ROTATION_KEY || type == FH_CONJUGATION_KEY) {
    fh_tensor *t = fh_value_data(v);
    if (t->shape[0] != e->tb->dnum)
      return fh_error_set(FH_ERR_STATE, "%s: %s has %lld digits, the engine switches keys with dnum = %d", op, arg,
                          (long long)t->shape[0], e->tb->dnum);
  }
  return FH_OK;
}

bool fh__ckks_scales_match(double a, double b) {
  double m = a > b ? a : b;
  return fabs(a - b) <= FH_CKKS_SCALE_RTOL * m;
}

/* ---- geometry ------------------------------------------------------------------------- */
void fh__ckks_geo_of(const fh_value *v, fh__ckks_geo *g) {
  const fh_tensor *t = fh_value_data(v);
  int lead = fh_value_get_type(v) == FH_CIPHERTEXT ? 1 : 0;
  g->comps = lead ? (int)t->shape[0] : 1;
  g->nbatch = t->ndim - lead - 2;
  g->B = 1;
  for (int i = 0; i < g->nbatch; ++i) {
    g->batch[i] = t->shape[lead + i];
    g->B *= g->batch[i];
  }
  g->la = (int)t->shape[t->ndim - 2];
  g->level = v->state.level;
}

bool fh__ckks_same_batch(const fh__ckks_geo *a, const fh__ckks_geo *b) {
  if (a->nbatch != b->nbatch) return false;
  for (int i = 0; i < a->nbatch; ++i)
    if (a->batch[i] != b->batch[i]) return false;
  return true;
}

int fh__ckks_active_primes(const fh_ckks_engine *e, int level, int32_t *p) {
  int n = 0;
  for (int i = level; i < e->ctx->num_q; ++i) p[n++] = i;
  return n;
}

int fh__ckks_value_primes(const fh_ckks_engine *e, const fh_value *v, int32_t *p) {
  int n = fh__ckks_active_primes(e, v->state.level, p);
  if (v->state.modulus_basis == FH_BASIS_QP)
    for (int i = 0; i < e->ctx->num_p; ++i) p[n++] = e->ctx->num_q + i;
  return n;
}

fh_status fh__ckks_alloc_poly(fh_ckks_engine *e, fh__ckks_launcher *L, int lead, const fh__ckks_geo *g, int la,
                              fh_tensor **out) {
  int64_t shape[FH_MAX_DIMS];
  int nd = 0;
  if (lead > 0) shape[nd++] = lead;
  for (int i = 0; i < g->nbatch; ++i) shape[nd++] = g->batch[i];
  shape[nd++] = la;
  shape[nd++] = e->ctx->ring_degree;
  return fh__ckks_temp(L, nd, shape, out);
}

fh_status fh__ckks_no_capture(const fh_ckks_engine *e, const char *op) {
  if (!fh_launch_capturing(e->dev)) return FH_OK;
  fh_error_set(FH_ERR_CAPTURE,
               "%s draws fresh randomness on the host; inside a capture every replay would reuse the same values "
               "(insecure): call it outside the captured function",
               op);
  fh_error_set_stage("capture");
  return FH_ERR_CAPTURE;
}

/* ---- sampling ------------------------------------------------------------------------- */
/* Host tensor -> engine device (a new reference; the CPU tensor itself on the CPU). */
static fh_status upload(fh_ckks_engine *e, fh_tensor *host, fh_tensor **out) {
  if (e->dev.type == FH_DEVICE_CPU) {
    fh_tensor_retain(host);
    *out = host;
    return FH_OK;
  }
  return fh_tensor_to(host, e->dev, false, NULL, false, out);
}

/* int64 [nt + ng, N] of small signed values on the engine's device: nt ternary rows, then ng
 * Gaussian rows, from the next run of the engine's stream (FH_K_CKKS_SAMPLE, computed on the
 * device itself: the same words, so the same rows, on every device). New tensor in L's uses. */
static fh_status sample_small(fh_ckks_engine *e, fh__ckks_launcher *L, int64_t nt, int64_t ng, fh_tensor **out) {
  const int64_t n = e->ctx->ring_degree;
  int64_t shape[2] = {nt + ng, n};
  fh_status st = fh__ckks_temp(L, 2, shape, out);
  return st == FH_OK ? fh__ckks_sample(L, e->rng, (int64_t *)fh_tensor_data(*out), n, nt, ng) : st;
}

/* uint64 [count, np, N]: row (i, l) uniform modulo primes[l]. */
static fh_status sample_uniform(fh_ckks_engine *e, fh__ckks_launcher *L, int64_t count, const int32_t *primes, int np,
                                fh_tensor **out) {
  int64_t n = e->ctx->ring_degree;
  int64_t shape[3] = {count, np, n};
  fh_tensor_options o = {FH_UINT64, fh_cpu(), false, false};
  fh_tensor *h = NULL;
  fh_status st = fh_tensor_empty(3, shape, &o, &h);
  if (st != FH_OK) return st;
  uint64_t *p = (uint64_t *)fh_tensor_data(h);
  for (int64_t i = 0; i < count; ++i)
    for (int l = 0; l < np; ++l) fh_ckks_sample_uniform(e->rng, e->ctx->primes[primes[l]], p + (i * np + l) * n, (size_t)n);
  st = upload(e, h, out);
  fh_tensor_release(h);
  if (st == FH_OK) fh__ckks_use(L, *out);
  return st;
}

/* Residues [count, nl, N] of small signed rows [count, N] (broadcast over the limbs). */
static fh_status small_to_rns(fh_ckks_engine *e, fh__ckks_launcher *L, const fh_tensor *small, int64_t count,
                              const int32_t *primes, int nl, fh_tensor **out) {
  int64_t n = e->ctx->ring_degree;
  int64_t shape[3] = {count, nl, n};
  fh_status st = fh__ckks_temp(L, 3, shape, out);
  if (st != FH_OK) return st;
  fh_ckks_ew_args a;
  fh__ckks_ew_init(L, &a, FH_CKKS_EW_SIGNED, count, primes, nl);
  a.out = fh__ckks_ptr(*out);
  a.out_gs = (int64_t)nl * n;
  a.a = (const uint64_t *)fh_tensor_data(small);
  a.a_gs = n;
  a.a_ls = 0;
  return fh__ckks_submit(L, FH_K_CKKS_EW, &a, sizeof a);
}

/* ---- keys ----------------------------------------------------------------------------- */
static int all_primes(const fh_ckks_engine *e, int32_t *p) {
  for (int i = 0; i < e->ctx->num_primes; ++i) p[i] = i;
  return e->ctx->num_primes;
}

fh_status fh_ckks_create_secret_key(fh_ckks_engine *e, fh_value **out) {
  const char *op = "create_secret_key";
  fh_status st;
  if ((st = fh__ckks_no_capture(e, op)) != FH_OK) return st;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, e->tb)) != FH_OK) return st;
  int32_t qp[FH_CKKS_MAX_PRIMES];
  int nqp = all_primes(e, qp);
  fh_tensor *s = NULL, *rns = NULL;
  int64_t n = e->ctx->ring_degree;
  if ((st = sample_small(e, &L, 1, 0, &s)) == FH_OK && (st = small_to_rns(e, &L, s, 1, qp, nqp, &rns)) == FH_OK)
    st = fh__ckks_ntt(&L, true, fh__ckks_ptr(rns), nqp * n, fh__ckks_ptr(rns), nqp * n, 1, qp, nqp);
  fh_tensor *data = NULL;
  if (st == FH_OK) {
    int64_t shape[2] = {nqp, n};
    st = fh_tensor_view(rns, 2, shape, &data);
  }
  if (st == FH_OK) st = fh_key_new(e->ctx, FH_SECRET_KEY, data, 0, FH_BASIS_QP, FH_DOMAIN_NTT, 0, out);
  if (s) fh_tensor_release(s);
  if (rns) fh_tensor_release(rns);
  if (data) fh_tensor_release(data);
  return st;
}

fh_status fh_ckks_create_public_key(fh_ckks_engine *e, const fh_value *sk, fh_value **out) {
  const char *op = "create_public_key";
  fh_status st;
  if ((st = fh__ckks_need_key(e, op, "sk", sk, FH_SECRET_KEY, FH_BASIS_QP)) || (st = fh__ckks_no_capture(e, op)))
    return st;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, e->tb)) != FH_OK) return st;
  int nq = e->ctx->num_q;
  int64_t n = e->ctx->ring_degree;
  int32_t q[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, 0, q);
  fh_tensor *skd = NULL, *a = NULL, *es = NULL, *er = NULL, *data = NULL;
  int64_t shape[3] = {2, nq, n};
  if ((st = fh_tensor_contiguous(fh_value_data(sk), &skd)) != FH_OK) return st;
  fh__ckks_use(&L, skd);
  if ((st = sample_uniform(e, &L, 1, q, nq, &a)) == FH_OK && (st = sample_small(e, &L, 0, 1, &es)) == FH_OK &&
      (st = small_to_rns(e, &L, es, 1, q, nq, &er)) == FH_OK && (st = fh__ckks_temp(&L, 3, shape, &data)) == FH_OK &&
      (st = fh__ckks_ntt(&L, true, fh__ckks_ptr(er), 0, fh__ckks_ptr(er), 0, 1, q, nq)) == FH_OK) {
    uint64_t *b = fh__ckks_ptr(data), *ap = b + (int64_t)nq * n;
    /* b = e - a s ; second row = a */
    if ((st = fh__ckks_ew(&L, FH_CKKS_EW_MONT_MUL, 1, q, nq,
                          b, 0, fh__ckks_ptr(a), 0, fh__ckks_ptr(skd), 0)) == FH_OK &&
        (st = fh__ckks_ew(&L, FH_CKKS_EW_SUB, 1, q, nq, b, 0, fh__ckks_ptr(er), 0, b, 0)) == FH_OK)
      st = fh__ckks_ew(&L, FH_CKKS_EW_COPY, 1, q, nq, ap, 0, fh__ckks_ptr(a), 0, NULL, 0);
  }
  if (st == FH_OK) st = fh_key_new(e->ctx, FH_PUBLIC_KEY, data, 0, FH_BASIS_Q, FH_DOMAIN_NTT, 0, out);
  fh_tensor *ts[5] = {skd, a, es, er, data};
  for (int i = 0; i < 5; ++i)
    if (ts[i]) fh_tensor_release(ts[i]);
  return st;
}

/* Key-switching key from s' (NTT rows over every prime, device pointer) to s. */
static fh_status make_ks_key(fh_ckks_engine *e, fh__ckks_launcher *L, const uint64_t *s_src, const uint64_t *s,
                             fh_value_type type, int64_t step, fh_value **out) {
  const fh_ckks_tables *tb = e->tb;
  int nq = e->ctx->num_q, nall = e->ctx->num_primes, dnum = tb->dnum;
  int64_t n = e->ctx->ring_degree, rows = (int64_t)nall * n;
  int32_t qp[FH_CKKS_MAX_PRIMES];
  all_primes(e, qp);
  fh_tensor *a = NULL, *es = NULL, *er = NULL, *data = NULL;
  int64_t shape[4] = {dnum, 2, nall, n};
  fh_status st = FH_OK;
  if ((st = sample_uniform(e, L, dnum, qp, nall, &a)) == FH_OK && (st = sample_small(e, L, 0, dnum, &es)) == FH_OK &&
      (st = small_to_rns(e, L, es, dnum, qp, nall, &er)) == FH_OK && (st = fh__ckks_temp(L, 4, shape, &data)) == FH_OK &&
      (st = fh__ckks_ntt(L, true, fh__ckks_ptr(er), rows, fh__ckks_ptr(er), rows, dnum, qp, nall)) == FH_OK) {
    uint64_t *b = fh__ckks_ptr(data), *ap = b + rows;
    if ((st = fh__ckks_ew(L, FH_CKKS_EW_MONT_MUL, dnum, qp, nall, b, 2 * rows, fh__ckks_ptr(a), rows, s, 0)) == FH_OK &&
        (st = fh__ckks_ew(L, FH_CKKS_EW_SUB, dnum, qp, nall,
                          b, 2 * rows, fh__ckks_ptr(er), rows, b, 2 * rows)) == FH_OK)
      st = fh__ckks_ew(L, FH_CKKS_EW_COPY, dnum, qp, nall, ap, 2 * rows, fh__ckks_ptr(a), rows, NULL, 0);
    /* gadget: digit j gets + (P mod q_i) s' on its own Q rows */
    for (int j = 0; j < dnum && st == FH_OK; ++j) {
      int lo = tb->digit_start[j], hi = tb->digit_start[j + 1];
      fh_ckks_ew_args g;
      fh__ckks_ew_init(L, &g, FH_CKKS_EW_ADD_MUL_CONST, 1, qp + lo, hi - lo);
      g.out = b + j * 2 * rows + (int64_t)lo * n;
      g.a = g.out;
      g.b = s_src + (int64_t)lo * n;
      for (int i = lo; i < hi; ++i) {
        const fh_modulus *m = &tb->host[i].bar;
        uint64_t pm = 1 % m->q;
        for (int k = 0; k < e->ctx->num_p; ++k) pm = fh_mod_mul(pm, e->ctx->primes[nq + k] % m->q, m);
        fh__ckks_ew_set_const(L, &g, i - lo, pm);
      }
      st = fh__ckks_submit(L, FH_K_CKKS_EW, &g, sizeof g);
    }
  }
  if (st == FH_OK) st = fh_key_new(e->ctx, type, data, 0, FH_BASIS_QP, FH_DOMAIN_NTT, step, out);
  fh_tensor *ts[4] = {a, es, er, data};
  for (int i = 0; i < 4; ++i)
    if (ts[i]) fh_tensor_release(ts[i]);
  return st;
}

static fh_status ks_key_common(fh_ckks_engine *e, const char *op, const fh_value *sk, fh_value_type type,
                               uint64_t galois, int64_t step, fh_value **out) {
  fh_status st;
  if ((st = fh__ckks_need_key(e, op, "sk", sk, FH_SECRET_KEY, FH_BASIS_QP)) || (st = fh__ckks_no_capture(e, op)))
    return st;
  if (e->tb->dnum == 0) return fh_error_set(FH_ERR_VALUE, "%s: the context has no P primes for key switching", op);
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, e->tb)) != FH_OK) return st;
  int nall = e->ctx->num_primes;
  int64_t n = e->ctx->ring_degree;
  int32_t qp[FH_CKKS_MAX_PRIMES];
  all_primes(e, qp);
  fh_tensor *skd = NULL, *src = NULL;
  int64_t shape[2] = {nall, n};
  if ((st = fh_tensor_contiguous(fh_value_data(sk), &skd)) != FH_OK) return st;
  fh__ckks_use(&L, skd);
  if ((st = fh__ckks_temp(&L, 2, shape, &src)) == FH_OK) {
    if (type == FH_RELINEARIZATION_KEY) {
      st = fh__ckks_ew(&L, FH_CKKS_EW_MONT_MUL, 1, qp, nall,
                       fh__ckks_ptr(src), 0, fh__ckks_ptr(skd), 0, fh__ckks_ptr(skd), 0);
    } else {
      st = fh__ckks_automorph(&L, true, galois, fh__ckks_ptr(src), 0, fh__ckks_ptr(skd), 0, 1, qp, nall);
    }
  }
  if (st == FH_OK) st = make_ks_key(e, &L, fh__ckks_ptr(src), fh__ckks_ptr(skd), type, step, out);
  if (skd) fh_tensor_release(skd);
  if (src) fh_tensor_release(src);
  return st;
}

fh_status fh_ckks_create_relinearization_key(fh_ckks_engine *e, const fh_value *sk, fh_value **out) {
  return ks_key_common(e, "create_relinearization_key", sk, FH_RELINEARIZATION_KEY, 0, 0, out);
}

int64_t fh_ckks_canonical_step(const fh_ckks_engine *e, int64_t r) {
  int64_t S = e->ctx->num_slots;
  int64_t c = r % S;
  if (c < 0) c += S;
  if (c > S / 2) c -= S;
  return c;
}

/* Rotation by r (torch.roll of the slots by r): X -> X^(5^-r) in the
 * generator-5 slot order, X -> X^(3^r) in the generator-3 one (slot j at
 * zeta^(3^-j)), as FHElium 0.30 does. */
uint64_t fh__ckks_galois_of_step(const fh_ckks_engine *e, int64_t r) {
  int64_t S = e->ctx->num_slots;
  uint64_t m2 = 2 * (uint64_t)e->ctx->ring_degree;
  bool three = e->ctx->galois_generator == 3;
  int64_t k = (three ? r : -r) % S;
  if (k < 0) k += S;
  uint64_t g = 1, b = (uint64_t)e->ctx->galois_generator % m2;
  for (uint64_t x = (uint64_t)k; x; x >>= 1) {
    if (x & 1) g = (g * b) % m2;
    b = (b * b) % m2;
  }
  return g;
}

static fh_status remember_rotation_key(fh_ckks_engine *e, fh_value *k) {
  for (int i = 0; i < e->nrot; ++i)
    if (e->rot_keys[i]->state.step == k->state.step) {
      fh_value_release(e->rot_keys[i]);
      fh_value_retain(k);
      e->rot_keys[i] = k;
      return FH_OK;
    }
  if (e->nrot == e->caprot) {
    int cap = e->caprot ? 2 * e->caprot : 8;
    fh_value **p = fh_realloc(e->rot_keys, sizeof *p * (size_t)cap);
    if (p == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory remembering a rotation key");
    e->rot_keys = p;
    e->caprot = cap;
  }
  fh_value_retain(k);
  e->rot_keys[e->nrot++] = k;
  return FH_OK;
}

fh_status fh_ckks_create_rotation_key(fh_ckks_engine *e, const fh_value *sk, int64_t step, fh_value **out) {
  int64_t c = fh_ckks_canonical_step(e, step);
  if (c == 0)
    return fh_error_set(FH_ERR_VALUE, "create_rotation_key: step %lld is 0 modulo num_slots %lld (not a rotation)",
                        (long long)step, (long long)e->ctx->num_slots);
  fh_value *k = NULL;
  fh_status st = ks_key_common(e, "create_rotation_key", sk, FH_ROTATION_KEY, fh__ckks_galois_of_step(e, c), c, &k);
  if (st != FH_OK) return st;
  if ((st = remember_rotation_key(e, k)) != FH_OK) {
    fh_value_release(k);
    return st;
  }
  *out = k;
  return FH_OK;
}

fh_status fh_ckks_create_conjugation_key(fh_ckks_engine *e, const fh_value *sk, fh_value **out) {
  fh_value *k = NULL;
  fh_status st = ks_key_common(e, "create_conjugation_key", sk, FH_CONJUGATION_KEY,
                               2 * (uint64_t)e->ctx->ring_degree - 1, 0, &k);
  if (st != FH_OK) return st;
  if (e->conj_key) fh_value_release(e->conj_key);
  fh_value_retain(k);
  e->conj_key = k;
  *out = k;
  return FH_OK;
}

/* ---- encoding ---------------------------------------------------------------------------- */
fh_status fh_ckks_encode(fh_ckks_engine *e, fh_tensor *msg, int32_t level, double scale, fh_value **out) {
  return fh_ckks_encode_basis(e, msg, level, scale, FH_BASIS_Q, out);
}

fh_status fh_ckks_encode_basis(fh_ckks_engine *e, fh_tensor *msg, int32_t level, double scale, fh_modulus_basis basis,
                               fh_value **out) {
  const char *op = "encode";
  if (basis != FH_BASIS_Q && basis != FH_BASIS_QP)
    return fh_error_set(FH_ERR_VALUE, "%s: basis must be Q or QP, got %d", op, (int)basis);
  if (level < 0 || level > e->ctx->max_level)
    return fh_error_set(FH_ERR_STATE, "%s: level %d is outside [0, %d] (max_level)", op, level, e->ctx->max_level);
  if (!(scale > 0) || !isfinite(scale))
    return fh_error_set(FH_ERR_VALUE, "%s: scale must be positive and finite, got %.17g", op, scale);
  if (msg->dtype != FH_FLOAT64 && msg->dtype != FH_COMPLEX128)
    return fh_error_set(FH_ERR_TYPE, "%s: the message must be a float64 or complex128 tensor, got %s", op,
                        fh_dtype_name(msg->dtype));
  for (int i = 0; i < msg->ndim; ++i)
    if (msg->shape[i] < 1)
      return fh_error_set(FH_ERR_VALUE, "%s: message extents must be >= 1, dimension %d is %lld", op, i + 1,
                          (long long)msg->shape[i]);
  if (msg->ndim > 0 && msg->shape[msg->ndim - 1] > e->ctx->num_slots)
    return fh_error_set(FH_ERR_VALUE, "%s: the message has %lld slots but the context has %lld", op,
                        (long long)msg->shape[msg->ndim - 1], (long long)e->ctx->num_slots);
  if (msg->ndim >= FH_MAX_DIMS - 1) return fh_error_set(FH_ERR_VALUE, "%s: too many message dimensions", op);
  fh_status st;
  fh_tensor *m = NULL, *exp = NULL, *data = NULL;
  if (msg->ndim == 0) { /* one value in every slot */
    int64_t shape[1] = {e->ctx->num_slots};
    st = fh_tensor_expand(msg, 1, shape, &exp);
  } else {
    fh_tensor_retain(msg);
    exp = msg;
    st = FH_OK;
  }
  int la = e->ctx->num_q - level;
  if (st == FH_OK) {
    if (fh_device_eq(fh_tensor_device(exp), e->dev)) {
      st = fh_tensor_contiguous(exp, &m);
    } else {
      /* a CPU message for a device engine: checked here, where it is readable */
      if (fh_tensor_device(exp).type == FH_DEVICE_CPU) st = fh_ckks_check_message(e->tb, exp, scale, la);
      if (st == FH_OK) st = fh_tensor_to(exp, e->dev, false, NULL, false, &m);
    }
  }
  if (st == FH_OK) st = fh_ckks_poly_encode(e->tb, m, scale, la, basis == FH_BASIS_QP, &data);
  if (st == FH_OK)
    st = fh_plaintext_rns_new(e->ctx, data, level, scale, basis, FH_DOMAIN_COEFFICIENT, FH_RESIDUE_STANDARD, out);
  if (exp) fh_tensor_release(exp);
  if (m) fh_tensor_release(m);
  if (data) fh_tensor_release(data);
  return st;
}

/* An integer_coefficients plaintext [*batch, N] as coefficient-domain RNS
 * rows at its level (each coefficient reduced exactly into each prime). */
static fh_status integer_to_rns(fh_ckks_engine *e, const fh_value *pt, fh_value **out) {
  fh_status st;
  fh_tensor *d = NULL, *data = NULL;
  if ((st = fh_tensor_contiguous(fh_value_data(pt), &d)) != FH_OK) return st;
  const fh_tensor *t = d;
  int64_t n = e->ctx->ring_degree, B = fh_tensor_numel(t) / n;
  int la = e->ctx->num_q - pt->state.level;
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, pt->state.level, p);
  int64_t shape[FH_MAX_DIMS];
  memcpy(shape, t->shape, sizeof(int64_t) * (size_t)(t->ndim - 1));
  shape[t->ndim - 1] = la;
  shape[t->ndim] = n;
  fh__ckks_launcher L;
  if (t->ndim + 1 > FH_MAX_DIMS) st = fh_error_set(FH_ERR_VALUE, "encode: too many plaintext dimensions");
  else st = fh__ckks_launcher_init(&L, e->tb);
  if (st == FH_OK) {
    fh__ckks_use(&L, d);
    st = fh__ckks_temp(&L, t->ndim + 1, shape, &data);
  }
  if (st == FH_OK && B > 0) {
    fh_ckks_ew_args a;
    fh__ckks_ew_init(&L, &a, FH_CKKS_EW_SIGNED, B, p, la);
    a.out = fh__ckks_ptr(data);
    a.out_gs = (int64_t)la * n;
    a.a = (const uint64_t *)fh_tensor_data(d);
    a.a_gs = n;
    a.a_ls = 0;
    st = fh__ckks_submit(&L, FH_K_CKKS_EW, &a, sizeof a);
  }
  if (st == FH_OK)
    st = fh_plaintext_rns_new(e->ctx, data, pt->state.level, pt->state.scale, FH_BASIS_Q, FH_DOMAIN_COEFFICIENT,
                              FH_RESIDUE_STANDARD, out);
  fh_tensor_release(d);
  if (data) fh_tensor_release(data);
  return st;
}

fh_status fh_ckks_encode_plaintext(fh_ckks_engine *e, const fh_value *pt, fh_value **out) {
  fh_status st = fh__ckks_need_type("encode", "plaintext", pt, FH_PLAINTEXT);
  if (st != FH_OK) return st;
  if (pt->state.representation == FH_REPR_RNS) {
    if ((st = fh__ckks_need_engine(e, "encode", "plaintext", pt)) != FH_OK) return st;
    fh_value_retain((fh_value *)pt);
    *out = (fh_value *)pt;
    return FH_OK;
  }
  if (pt->state.representation == FH_REPR_INTEGER_COEFFICIENTS) {
    if ((st = fh__ckks_need_engine(e, "encode", "plaintext", pt)) != FH_OK) return st;
    return integer_to_rns(e, pt, out);
  }
  if (pt->state.representation == FH_REPR_APPROXIMATE_COEFFICIENTS)
    return fh_error_set(FH_ERR_STATE,
                        "encode: representation of the plaintext is approximate_coefficients (float64 values such as "
                        "a decrypted phase), which have no exact RNS form; decode it, or round it to "
                        "integer_coefficients first");
  if (pt->ctx != NULL && pt->ctx != e->ctx)
    return fh_error_set(FH_ERR_STATE, "encode: context_id of the plaintext is '%.12s...' but the engine's is '%.12s...'",
                        pt->ctx->id, e->ctx->id);
  return fh_ckks_encode(e, fh_value_data(pt), pt->state.level, pt->state.scale, out);
}

/* A plaintext's rows as standard coefficients (new tensor or a retained one). */
static fh_status pt_coefficients(fh_ckks_engine *e, const fh_value *pt, fh_tensor **out) {
  fh_tensor *d = NULL;
  fh_status st = fh_tensor_contiguous(fh_value_data(pt), &d);
  if (st != FH_OK) return st;
  if (pt->state.polynomial_domain == FH_DOMAIN_COEFFICIENT && pt->state.residue_representation == FH_RESIDUE_STANDARD) {
    *out = d;
    return FH_OK;
  }
  fh__ckks_launcher L;
  fh__ckks_geo g;
  fh__ckks_geo_of(pt, &g);
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, g.level, p);
  int64_t gs = (int64_t)g.la * e->ctx->ring_degree;
  fh_tensor *r = NULL;
  if ((st = fh__ckks_launcher_init(&L, e->tb)) == FH_OK) {
    fh__ckks_use(&L, d);
    st = fh__ckks_alloc_poly(e, &L, 0, &g, g.la, &r);
  }
  if (st == FH_OK) {
    if (pt->state.polynomial_domain == FH_DOMAIN_NTT)
      st = fh__ckks_ntt(&L, false, fh__ckks_ptr(r), gs, fh__ckks_ptr(d), gs, g.B, p, g.la);
    else
      st = fh__ckks_ew(&L, FH_CKKS_EW_FROM_MONT, g.B, p, g.la, fh__ckks_ptr(r), gs, fh__ckks_ptr(d), gs, NULL, 0);
  }
  fh_tensor_release(d);
  return fh__deliver(st, r, out);
}

fh_status fh_ckks_decode(fh_ckks_engine *e, const fh_value *pt, bool is_real, fh_tensor **out) {
  const char *op = "decode";
  fh_status st;
  if ((st = fh__ckks_need_type(op, "plaintext", pt, FH_PLAINTEXT)) != FH_OK) return st;
  if (pt->state.representation == FH_REPR_SLOTS)
    return fh_error_set(FH_ERR_STATE,
                        "%s: representation of the plaintext is slots, expected rns, integer_coefficients or "
                        "approximate_coefficients",
                        op);
  if ((st = fh__ckks_need_engine(e, op, "plaintext", pt)) != FH_OK) return st;
  if (pt->state.representation == FH_REPR_APPROXIMATE_COEFFICIENTS) {
    fh_tensor *c = NULL;
    if ((st = fh_tensor_contiguous(fh_value_data(pt), &c)) != FH_OK) return st;
    st = fh_ckks_poly_decode_real(e->tb, c, pt->state.scale, !is_real, out);
    fh_tensor_release(c);
    return st;
  }
  if (pt->state.representation == FH_REPR_INTEGER_COEFFICIENTS) {
    fh_value *rns = NULL;
    if ((st = integer_to_rns(e, pt, &rns)) != FH_OK) return st;
    st = fh_ckks_decode(e, rns, is_real, out);
    fh_value_release(rns);
    return st;
  }
  if (pt->state.modulus_basis != FH_BASIS_Q)
    return fh_error_set(FH_ERR_STATE, "%s: modulus_basis of the plaintext is %s, expected Q", op,
                        fh_basis_name((fh_modulus_basis)pt->state.modulus_basis));
  fh_tensor *c = NULL;
  if ((st = pt_coefficients(e, pt, &c)) != FH_OK) return st;
  st = fh_ckks_poly_decode(e->tb, c, pt->state.scale, !is_real, out);
  fh_tensor_release(c);
  return st;
}

/* ---- encryption ----------------------------------------------------------------------------- */
static fh_status check_pk(fh_ckks_engine *e, const char *op, const fh_value *pk) {
  return fh__ckks_need_key(e, op, "pk", pk, FH_PUBLIC_KEY, FH_BASIS_Q);
}

/* Encrypt `m` (rows [B, la, N] in `domain`, or NULL for zero). */
static fh_status encrypt_core(fh_ckks_engine *e, const fh__ckks_geo *g, fh_polynomial_domain domain, double scale,
                              const fh_tensor *m, const fh_value *pk, fh_value **out) {
  fh__ckks_launcher L;
  fh_status st = fh__ckks_launcher_init(&L, e->tb);
  if (st != FH_OK) return st;
  int64_t n = e->ctx->ring_degree, B = g->B;
  int la = g->la, nq = e->ctx->num_q;
  int64_t gs = (int64_t)la * n;
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, g->level, p);
  fh_tensor *pkd = NULL, *small = NULL, *r = NULL, *data = NULL;
  if ((st = fh_tensor_contiguous(fh_value_data(pk), &pkd)) == FH_OK) {
    fh__ckks_use(&L, pkd);
    if (m) fh__ckks_use(&L, m);
    if ((st = sample_small(e, &L, B, 2 * B, &small)) == FH_OK &&
        (st = small_to_rns(e, &L, small, 3 * B, p, la, &r)) == FH_OK &&
        (st = fh__ckks_alloc_poly(e, &L, 2, g, la, &data)) == FH_OK &&
        (st = fh__ckks_ntt(&L, true, fh__ckks_ptr(r), gs, fh__ckks_ptr(r), gs, B, p, la)) == FH_OK) {
      uint64_t *c = fh__ckks_ptr(data), *u = fh__ckks_ptr(r), *err = u + B * gs;
      const uint64_t *pk0 = fh__ckks_ptr(pkd) + (int64_t)g->level * n, *pk1 = pk0 + (int64_t)nq * n;
      if ((st = fh__ckks_ew(&L, FH_CKKS_EW_MONT_MUL, B, p, la, c, gs, pk0, 0, u, gs)) == FH_OK &&
          (st = fh__ckks_ew(&L, FH_CKKS_EW_MONT_MUL, B, p, la, c + B * gs, gs, pk1, 0, u, gs)) == FH_OK) {
        if (domain == FH_DOMAIN_COEFFICIENT) st = fh__ckks_ntt(&L, false, c, gs, c, gs, 2 * B, p, la);
        else st = fh__ckks_ntt(&L, true, err, gs, err, gs, 2 * B, p, la);
      }
      if (st == FH_OK) st = fh__ckks_ew(&L, FH_CKKS_EW_ADD, 2 * B, p, la, c, gs, c, gs, err, gs);
      if (st == FH_OK && m) st = fh__ckks_ew(&L, FH_CKKS_EW_ADD, B, p, la, c, gs, c, gs, fh__ckks_ptr(m), gs);
    }
  }
  if (st == FH_OK) st = fh_ciphertext_new(e->ctx, data, g->level, scale, FH_BASIS_Q, domain, out);
  fh_tensor *ts[4] = {pkd, small, r, data};
  for (int i = 0; i < 4; ++i)
    if (ts[i]) fh_tensor_release(ts[i]);
  return st;
}

fh_status fh_ckks_encrypt(fh_ckks_engine *e, const fh_value *pt, const fh_value *pk, fh_value **out) {
  const char *op = "encrypt";
  fh_status st;
  if ((st = fh__ckks_need_type(op, "plaintext", pt, FH_PLAINTEXT)) || (st = check_pk(e, op, pk)) ||
      (st = fh__ckks_no_capture(e, op)))
    return st;
  fh_value *rns = NULL;
  if (pt->state.representation != FH_REPR_RNS) { /* slots or coefficients */
    if ((st = fh_ckks_encode_plaintext(e, pt, &rns)) != FH_OK) return st;
  } else {
    if ((st = fh__ckks_need_engine(e, op, "plaintext", pt)) != FH_OK) return st;
    if (pt->state.modulus_basis != FH_BASIS_Q)
      return fh_error_set(FH_ERR_STATE, "%s: modulus_basis of the plaintext is %s, expected Q", op,
                          fh_basis_name((fh_modulus_basis)pt->state.modulus_basis));
    if (pt->state.polynomial_domain == FH_DOMAIN_COEFFICIENT && pt->state.residue_representation != FH_RESIDUE_STANDARD)
      return fh_error_set(FH_ERR_STATE,
                          "%s: residue_representation of the coefficient-domain plaintext is montgomery, expected "
                          "standard",
                          op);
    fh_value_retain((fh_value *)pt);
    rns = (fh_value *)pt;
  }
  fh__ckks_geo g;
  fh__ckks_geo_of(rns, &g);
  fh_tensor *m = NULL;
  if ((st = fh_tensor_contiguous(fh_value_data(rns), &m)) == FH_OK)
    st = encrypt_core(e, &g, (fh_polynomial_domain)rns->state.polynomial_domain, rns->state.scale, m, pk, out);
  if (m) fh_tensor_release(m);
  fh_value_release(rns);
  return st;
}

fh_status fh_ckks_encrypt_zero_like(fh_ckks_engine *e, const fh_value *like, const fh_value *pk, fh_value **out) {
  const char *op = "encrypt_zero_like";
  fh_status st;
  if (like == NULL) return fh_error_set(FH_ERR_TYPE, "%s: like expected a Ciphertext or an RNS Plaintext", op);
  fh_value_type t = fh_value_get_type(like);
  if (t != FH_CIPHERTEXT && !(t == FH_PLAINTEXT && like->state.representation == FH_REPR_RNS))
    return fh_error_set(FH_ERR_TYPE, "%s: like expected a Ciphertext or an RNS Plaintext, got a %s", op,
                        fh_value_type_name(t));
  if ((st = fh__ckks_need_engine(e, op, "like", like)) || (st = check_pk(e, op, pk)) ||
      (st = fh__ckks_no_capture(e, op)))
    return st;
  if (like->state.modulus_basis != FH_BASIS_Q)
    return fh_error_set(FH_ERR_STATE, "%s: modulus_basis of like is %s, expected Q", op,
                        fh_basis_name((fh_modulus_basis)like->state.modulus_basis));
  fh__ckks_geo g;
  fh__ckks_geo_of(like, &g);
  return encrypt_core(e, &g, (fh_polynomial_domain)like->state.polynomial_domain, like->state.scale, NULL, pk, out);
}

fh_status fh_ckks_decrypt(fh_ckks_engine *e, const fh_value *ct, const fh_value *sk, fh_value **out) {
  const char *op = "decrypt";
  fh_status st;
  if ((st = fh__ckks_need_ct(e, op, "ct", ct)) || (st = fh__ckks_need_key(e, op, "sk", sk, FH_SECRET_KEY, FH_BASIS_QP)))
    return st;
  fh__ckks_geo g;
  fh__ckks_geo_of(ct, &g);
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, e->tb)) != FH_OK) return st;
  int64_t n = e->ctx->ring_degree, B = g.B, gs = (int64_t)g.la * n;
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, g.level, p);
  bool ntt = ct->state.polynomial_domain == FH_DOMAIN_NTT;
  fh_tensor *cd = NULL, *skd = NULL, *s2 = NULL, *t = NULL, *data = NULL;
  if ((st = fh_tensor_contiguous(fh_value_data(ct), &cd)) == FH_OK &&
      (st = fh_tensor_contiguous(fh_value_data(sk), &skd)) == FH_OK) {
    fh__ckks_use(&L, cd);
    fh__ckks_use(&L, skd);
    const uint64_t *c = fh__ckks_ptr(cd), *s = fh__ckks_ptr(skd) + (int64_t)g.level * n;
    int64_t s2shape[2] = {g.la, n};
    if ((st = fh__ckks_alloc_poly(e, &L, 0, &g, g.la, &data)) == FH_OK && g.comps == 3) {
      if ((st = fh__ckks_temp(&L, 2, s2shape, &s2)) == FH_OK)
        st = fh__ckks_ew(&L, FH_CKKS_EW_MONT_MUL, 1, p, g.la, fh__ckks_ptr(s2), 0, s, 0, s, 0);
    }
    const uint64_t *c1 = c + B * gs, *c2 = c + 2 * B * gs;
    if (st == FH_OK && !ntt) { /* NTT of c1 (and c2) */
      int64_t tshape[3] = {g.comps - 1, B * g.la, n};
      if ((st = fh__ckks_temp(&L, 3, tshape, &t)) == FH_OK) {
        st = fh__ckks_ntt(&L, true, fh__ckks_ptr(t), gs, c1, gs, (g.comps - 1) * B, p, g.la);
        c1 = fh__ckks_ptr(t);
        c2 = c1 + B * gs;
      }
    }
    if (st == FH_OK) {
      uint64_t *o = fh__ckks_ptr(data);
      fh_ckks_ew_args a;
      fh__ckks_ew_init(&L, &a, ntt ? FH_CKKS_EW_MONT_MAC : FH_CKKS_EW_MONT_MUL, B, p, g.la);
      a.out = o;
      a.out_gs = gs;
      a.a = c1;
      a.a_gs = gs;
      a.b = s;
      a.b_gs = 0;
      a.c = ntt ? c : NULL;
      a.c_gs = gs;
      st = fh__ckks_submit(&L, FH_K_CKKS_EW, &a, sizeof a);
      if (st == FH_OK && g.comps == 3) {
        fh__ckks_ew_init(&L, &a, FH_CKKS_EW_MONT_MAC, B, p, g.la);
        a.out = o;
        a.out_gs = gs;
        a.a = c2;
        a.a_gs = gs;
        a.b = fh__ckks_ptr(s2);
        a.b_gs = 0;
        a.c = o;
        a.c_gs = gs;
        st = fh__ckks_submit(&L, FH_K_CKKS_EW, &a, sizeof a);
      }
      if (st == FH_OK && !ntt) {
        if ((st = fh__ckks_ntt(&L, false, o, gs, o, gs, B, p, g.la)) == FH_OK)
          st = fh__ckks_ew(&L, FH_CKKS_EW_ADD, B, p, g.la, o, gs, o, gs, c, gs);
      }
    }
  }
  if (st == FH_OK)
    st = fh_plaintext_rns_new(e->ctx, data, g.level, ct->state.scale, FH_BASIS_Q,
                              (fh_polynomial_domain)ct->state.polynomial_domain,
                              ntt ? FH_RESIDUE_MONTGOMERY : FH_RESIDUE_STANDARD, out);
  fh_tensor *ts[5] = {cd, skd, s2, t, data};
  for (int i = 0; i < 5; ++i)
    if (ts[i]) fh_tensor_release(ts[i]);
  return st;
}

/* ---- key switching ---------------------------------------------------------------------------- */
static void ks_geo_of(const fh_ckks_tables *tb, int level, fh__ckks_ks_geo *k) {
  k->nq = tb->nq;
  k->np = tb->np;
  k->dnum = tb->dnum;
  k->n = tb->n;
  k->la = k->nq - level;
  k->lk = k->la + k->np;
  k->j0 = fh_ckks_tables_first_digit(tb, level);
  k->ndig = k->dnum - k->j0;
  for (int i = 0; i < k->la; ++i) k->qp[i] = level + i;
  for (int i = 0; i < k->np; ++i) k->qp[k->la + i] = k->nq + i;
}

/* The mod-up arguments for d (coefficient rows of the active Q primes, group stride gs_d) into
 * D [G][ndig][lk][N]: each digit's residues extended to every other active row and P, centred
 * (zero-mean digits, see fh_ckks_bconv_args). */
static void modup_args(const fh_ckks_tables *tb, int level, const fh__ckks_ks_geo *k, int64_t G, const uint64_t *d,
                       int64_t gs_d, uint64_t *D, fh_ckks_modup_args *u) {
  memset(u, 0, sizeof *u);
  u->out = D;
  u->in = d;
  u->out_gs = (int64_t)k->ndig * k->lk * k->n;
  u->out_ds = (int64_t)k->lk * k->n;
  u->in_gs = gs_d;
  u->ngroups = G;
  u->ndigits = k->ndig;
  u->nrows = k->lk;
  u->log_n = tb->log_n;
  u->center = 1;
  u->primes = tb->primes_dev;
  for (int jj = 0; jj < k->ndig; ++jj) {
    int j = k->j0 + jj;
    int first = tb->digit_start[j] > level ? tb->digit_start[j] : level;
    int last = tb->digit_start[j + 1];
    u->consts[jj] = tb->modup[level * k->dnum + j];
    u->first[jj] = first - level;
    u->nsrc[jj] = last - first;
  }
  memcpy(u->prime, k->qp, sizeof(int32_t) * (size_t)k->lk);
}

bool fh__ckks_ks_source_scale(const fh_ckks_tables *tb, int level, bool moddown, fh_ckks_ntt_args *t) {
  if (!tb->fold_sources) return false;
  fh__ckks_source_scale_rows(tb, level, moddown, t);
  return true;
}

fh_status fh__ckks_ks_intt(fh__ckks_launcher *L, int level, bool moddown, uint64_t *d, int64_t d_gs,
                           const uint64_t *in, int64_t in_gs, int64_t G, const int32_t *prime, int nlimbs,
                           bool *scaled) {
  fh_ckks_ntt_args t;
  fh__ckks_ntt_rows_args(L, &t, d, d_gs, in, in_gs, G, prime, nlimbs, NULL, NULL);
  *scaled = fh__ckks_ks_source_scale(L->tb, level, moddown, &t);
  if (G == 0 || nlimbs == 0) return FH_OK;
  return fh__ckks_submit(L, FH_K_CKKS_INTT, &t, sizeof t);
}

/* The key's digits from j0 on, as the inner product reads them. */
const uint64_t *fh__ckks_key_digits(const fh__ckks_ks_geo *k, const fh_tensor *key, int64_t *ds, int64_t *cs) {
  int64_t krows = (int64_t)(k->nq + k->np) * k->n;
  *ds = 2 * krows;
  *cs = krows;
  return (const uint64_t *)fh_tensor_data(key) + (int64_t)k->j0 * 2 * krows;
}

/* 4. mod-down of acc [G][2][lk][N] (NTT domain): out = (A - conv(A mod P)) * P^-1 (+ add) with
 * the centered conversion from the P rows: conv(x) = x + u P with x + u P = sum_k y'_k Phat_k, so
 * the result is A / P minus sum_k y'_k / p_k, a zero-mean rounding error in (-np/2, np/2] (for one
 * P prime: exact rounding to nearest). Centering replaces the usual "+ floor(P/2), then floor"
 * rounding, whose approximate conversion would leave an offset of about (np - 1) / 2 in every
 * coefficient. */
/* W [2G][np + extra][N] and T [2G][la][N]: scratch (fh__ckks_temp, in L's uses); extra = 2
 * for a fused rescale's rows (ks_moddown_rescale), else 0 */
static fh_status ks_temps(fh__ckks_launcher *L, const fh__ckks_ks_geo *k, int64_t G, int extra, fh_tensor **W,
                          fh_tensor **T) {
  int64_t wshape[3] = {2 * G, k->np + extra, k->n}, tshape[3] = {2 * G, k->la, k->n};
  fh_status st = fh__ckks_temp(L, 3, wshape, W);
  if (st == FH_OK && (st = fh__ckks_temp(L, 3, tshape, T)) != FH_OK) {
    fh_tensor_release(*W);
    *W = NULL;
  }
  return st;
}

void fh__ckks_moddown_args(const fh_ckks_tables *tb, fh_ckks_moddown_args *m, uint64_t *w, int64_t w_gs,
                           int64_t ngroups, int src0, int nsrc, int dst0, int ndst, const uint64_t *consts,
                           const uint64_t *c_const, uint64_t *t, const uint64_t *a, int64_t a_gs) {
  memset(m, 0, sizeof *m);
  fh_ckks_bconv_args *b = &m->conv;
  b->out = t;
  b->out_gs = (int64_t)ndst * tb->n;
  b->in = w;
  b->in_gs = w_gs;
  b->ngroups = ngroups;
  b->nsrc = nsrc;
  b->ndst = ndst;
  b->log_n = tb->log_n;
  b->primes = tb->primes_dev;
  b->consts = consts;
  b->center = 1;
  for (int i = 0; i < nsrc; ++i) {
    b->src_prime[i] = src0 + i;
    b->src_row[i] = i;
  }
  m->ntt = tb->ntt;
  m->a = a;
  m->a_gs = a_gs;
  for (int i = 0; i < ndst; ++i) {
    b->dst_prime[i] = dst0 + i;
    b->dst_row[i] = i;
    m->c_const[i] = c_const[i];
    m->c_shoup[i] = fh_shoup_precompute(c_const[i], tb->primes[dst0 + i]);
  }
}

/* a mod-down's outputs and addends (fh_ckks_moddown_args) */
static void moddown_outputs(fh_ckks_moddown_args *m, uint64_t *out0, uint64_t *out1, int64_t out_gs,
                            const uint64_t *add0, const uint64_t *add1, int64_t add_gs, uint64_t add_galois,
                            const uint64_t *const *add_b) {
  m->add_galois = add_galois;
  m->add_b[0] = add_b ? add_b[0] : NULL;
  m->add_b[1] = add_b ? add_b[1] : NULL;
  m->out[0] = out0;
  m->out[1] = out1;
  m->add[0] = add0;
  m->add[1] = add1;
  m->out_gs = out_gs;
  m->add_gs = add_gs;
}

static fh_status ks_moddown_from(fh_ckks_engine *e, fh__ckks_launcher *L, int level, const fh__ckks_ks_geo *k,
                                 int64_t G, uint64_t *A, uint64_t *w, bool w_scaled, uint64_t *t, bool ntt_out,
                                 uint64_t *out0, uint64_t *out1, int64_t out_gs, const uint64_t *add0,
                                 const uint64_t *add1, int64_t add_gs, uint64_t add_galois,
                                 const uint64_t *const *add_b);
/* add_galois (0: none): add0 and add1 read through that NTT-domain automorphism
 * (fh_ckks_moddown_args.add_galois; ntt_out only); add_b (NULL: none): the addends are the
 * tensor product of (add0, add1) and (add_b[0], add_b[1]) (fh_ckks_moddown_args.add_b;
 * ntt_out only) */
static fh_status ks_moddown(fh_ckks_engine *e, fh__ckks_launcher *L, int level, const fh__ckks_ks_geo *k, int64_t G,
                            uint64_t *A, uint64_t *w, uint64_t *t, bool ntt_out, uint64_t *out0, uint64_t *out1,
                            int64_t out_gs, const uint64_t *add0, const uint64_t *add1, int64_t add_gs,
                            uint64_t add_galois, const uint64_t *const *add_b) {
  const int la = k->la, lk = k->lk, np = k->np;
  const int64_t n = k->n;
  fh_status st;
  /* (the conversion sources folded into the INTT for the NTT-domain mod-down only) */
  bool scaled = false;
  if (ntt_out)
    st = fh__ckks_ks_intt(L, level, true, w, (int64_t)np * n, A + (int64_t)la * n, (int64_t)lk * n, 2 * G,
                          k->qp + la, np, &scaled);
  else st = fh__ckks_ntt(L, false, w, (int64_t)np * n, A + (int64_t)la * n, (int64_t)lk * n, 2 * G, k->qp + la, np);
  if (st != FH_OK) return st;
  return ks_moddown_from(e, L, level, k, G, A, w, scaled, t, ntt_out, out0, out1, out_gs, add0, add1, add_gs,
                         add_galois, add_b);
}

/* ks_moddown once w holds the INTT of A's P rows ([2G][np][N]; w_scaled: made the
 * conversion's sources by fh__ckks_ks_intt, ntt_out only) */
static fh_status ks_moddown_from(fh_ckks_engine *e, fh__ckks_launcher *L, int level, const fh__ckks_ks_geo *k,
                                 int64_t G, uint64_t *A, uint64_t *w, bool w_scaled, uint64_t *t, bool ntt_out,
                                 uint64_t *out0, uint64_t *out1, int64_t out_gs, const uint64_t *add0,
                                 const uint64_t *add1, int64_t add_gs, uint64_t add_galois,
                                 const uint64_t *const *add_b) {
  const fh_ckks_tables *tb = e->tb;
  const int la = k->la, lk = k->lk, np = k->np, nq = k->nq;
  const int64_t n = k->n;
  const int32_t *qp = k->qp;
  fh_status st;
  fh_ckks_moddown_args m;
  fh__ckks_moddown_args(tb, &m, w, (int64_t)np * n, 2 * G, nq, np, level, la, tb->moddown[level], tb->p_inv + level, t,
                        A, (int64_t)lk * n);
  if (ntt_out) {
    /* conversion, NTT and (A - t) P^-1 (+ add) in one launch (fh_ckks_moddown_args) */
    moddown_outputs(&m, out0, out1, out_gs, add0, add1, add_gs, add_galois, add_b);
    m.prescaled = w_scaled;
    return fh__ckks_submit(L, FH_K_CKKS_MODDOWN, &m, sizeof m);
  }
  if (add_galois > 1 || add_b || w_scaled)
    return fh_error_set(FH_ERR_EXECUTION,
                        "internal error: a coefficient-domain mod-down reads no automorphism or tensor product of "
                        "add, and no scaled sources");
  if ((st = fh__ckks_submit(L, FH_K_CKKS_BCONV, &m.conv, sizeof m.conv))) return st;
  if ((st = fh__ckks_ntt(L, false, A, (int64_t)lk * n, A, (int64_t)lk * n, 2 * G, qp, la))) return st;
  uint64_t *outs[2] = {out0, out1};
  const uint64_t *adds[2] = {add0, add1};
  for (int c = 0; c < 2 && st == FH_OK; ++c) {
    fh_ckks_ew_args f;
    fh__ckks_ew_init(L, &f, FH_CKKS_EW_SUB_ADD_MUL, G, qp, la);
    f.out = outs[c];
    f.out_gs = out_gs;
    f.a = A + (int64_t)c * lk * n;
    f.a_gs = 2 * (int64_t)lk * n;
    f.b = t + (int64_t)c * la * n;
    f.b_gs = 2 * (int64_t)la * n;
    f.c = adds[c];
    f.c_gs = add_gs;
    for (int i = 0; i < la; ++i) {
      f.k[i] = 0;
      fh__ckks_ew_set_const(L, &f, i, tb->p_inv[level + i]);
    }
    st = fh__ckks_submit(L, FH_K_CKKS_EW, &f, sizeof f);
  }
  return st;
}

/* The mod-down of acc fused with a rescale by the first active Q prime (fh_ckks_moddown_args.
 * rescale): the INTT of acc's P rows and of its row 0 in one launch (rows nsrc and nsrc + 1 of
 * W: u0 and md0r's y0), then FH_K_CKKS_MODDOWN into the la - 1 rows of out. v0: the INTT of
 * add's row 0 (see fh__ckks_keyswitch_rescale). W [2G][np + 2][N], T [2G][la][N]: scratch. */
static fh_status ks_moddown_rescale(fh_ckks_engine *e, fh__ckks_launcher *L, int level, const fh__ckks_ks_geo *k,
                                    int64_t G, uint64_t *A, uint64_t *w, uint64_t *t, uint64_t *out0, uint64_t *out1,
                                    int64_t out_gs, const uint64_t *add0, const uint64_t *add1, int64_t add_gs,
                                    const uint64_t *v0, int64_t v0_gs, int64_t v0_cs, const uint64_t *const *add_b) {
  const fh_ckks_tables *tb = e->tb;
  const int la = k->la, lk = k->lk, np = k->np, nq = k->nq;
  const int64_t n = k->n, w_gs = (int64_t)(np + 2) * n;
  int32_t prime[FH_CKKS_MAX_PRIMES], in_row[FH_CKKS_MAX_PRIMES], out_row[FH_CKKS_MAX_PRIMES];
  for (int i = 0; i <= np; ++i) {
    prime[i] = k->qp[i < np ? la + i : 0];
    in_row[i] = i < np ? la + i : 0;
    out_row[i] = i;
  }
  fh_status st = fh__ckks_ntt_rows(L, false, w, w_gs, A, (int64_t)lk * n, 2 * G, prime, np + 1, in_row, out_row);
  if (st != FH_OK) return st;
  fh_ckks_moddown_args m;
  fh__ckks_moddown_args(tb, &m, w, w_gs, 2 * G, nq, np, level, la, tb->moddown[level], tb->p_inv + level, t, A,
                        (int64_t)lk * n);
  moddown_outputs(&m, out0, out1, out_gs, add0, add1, add_gs, 0, add_b);
  m.rescale = 1;
  m.v0 = v0;
  m.v0_gs = v0_gs;
  m.v0_cs = v0_cs;
  const uint64_t q0 = tb->host[level].q;
  for (int l = 1; l < la; ++l) {
    const fh_ckks_prime *pl = &tb->host[level + l];
    const uint64_t pm = tb->p_mod[level + l];
    m.pr[l] = fh_mont_from_std(pm, pl->q, pl->qinv, pl->r2);
    m.pq[l] = fh_mod_mul(pm, q0 % pl->q, &pl->bar);
    m.d_const[l] = tb->rescale_inv[(size_t)level * nq + level + l];
    m.d_shoup[l] = fh_shoup_precompute(m.d_const[l], pl->q);
  }
  return fh__ckks_submit(L, FH_K_CKKS_MODDOWN, &m, sizeof m);
}

/* A key-switch core's mod-up of d into the digits D (c: everything but the key and the
 * outputs), with its scratch of scaled sources *S on CUDA for N > 2^11 (a new temp in L's
 * uses; else NULL) */
/* d_scaled: d's rows are already the scaled sources (fh__ckks_ks_intt): no scratch, and they
 * are the core's `scaled` rows (prescaled) */
static fh_status ks_core_modup(fh__ckks_launcher *L, const fh_ckks_tables *tb, int level, const fh__ckks_ks_geo *k,
                               int64_t G, const uint64_t *d, int64_t gs_d, bool d_scaled, uint64_t *D, fh_tensor **S,
                               fh_ckks_ks_core_args *c) {
  int64_t sshape[3] = {G, k->la, k->n};
  fh_status st;
  *S = NULL;
  if (!d_scaled && fh_device_is_cuda(L->dev) && tb->log_n > FH_CKKS_CUDA_ROW_LOG &&
      (st = fh__ckks_temp(L, 3, sshape, S)) != FH_OK)
    return st;
  memset(c, 0, sizeof *c);
  modup_args(tb, level, k, G, d, gs_d, D, &c->up);
  c->ntt = tb->ntt;
  /* (d read only: with prescaled no kernel writes the scaled rows) */
  c->prescaled = d_scaled;
  c->scaled = d_scaled ? (uint64_t *)(uintptr_t)d : *S ? fh__ckks_ptr(*S) : NULL;
  c->scaled_gs = d_scaled ? gs_d : (int64_t)k->la * k->n;
  return FH_OK;
}

/* fh__ckks_keyswitch, or with v0 (not NULL) its fused rescale (ks_moddown_rescale) */
static fh_status keyswitch_impl(fh_ckks_engine *e, fh__ckks_launcher *L, int level, int64_t G, const uint64_t *d,
                                int64_t gs_d, const uint64_t *d_ntt, int64_t d_ntt_gs, bool d_scaled,
                                const fh_tensor *key,
                                bool ntt_out, uint64_t *out0,
                                uint64_t *out1, int64_t out_gs, const uint64_t *add0, const uint64_t *add1,
                                int64_t add_gs, const uint64_t *v0, int64_t v0_gs, int64_t v0_cs,
                                uint64_t add_galois, const uint64_t *const *add_b) {
  const fh_ckks_tables *tb = e->tb;
  fh__ckks_ks_geo k;
  ks_geo_of(tb, level, &k);
  const int64_t n = k.n;
  fh_tensor *D = NULL, *acc = NULL, *W = NULL, *T = NULL, *S = NULL;
  int64_t dshape[4] = {G, k.ndig, k.lk, n}, ashape[4] = {G, 2, k.lk, n};
  fh_ckks_ks_core_args c;
  fh_status st;
  if ((st = fh__ckks_temp(L, 4, dshape, &D)) || (st = fh__ckks_temp(L, 4, ashape, &acc)) ||
      (st = ks_temps(L, &k, G, v0 ? 2 : 0, &W, &T)) ||
      (st = ks_core_modup(L, tb, level, &k, G, d, gs_d, d_scaled, fh__ckks_ptr(D), &S, &c)))
    goto done;
  /* 1-3. mod-up, NTT of the extended digits, inner product with the key: one launch
   * (fh_ckks_ks_core_args), D its scratch */
  {
    c.out = fh__ckks_ptr(acc);
    c.out_gs = 2 * (int64_t)k.lk * n;
    c.out_cs = (int64_t)k.lk * n;
    c.key = fh__ckks_key_digits(&k, key, &c.key_ds, &c.key_cs);
    memcpy(c.key_row, k.qp, sizeof(int32_t) * (size_t)k.lk);
    c.in_ntt = d_ntt;
    c.in_ntt_gs = d_ntt_gs;
    if ((st = fh__ckks_submit(L, FH_K_CKKS_KS_CORE, &c, sizeof c))) goto done;
  }
  if (v0)
    st = ks_moddown_rescale(e, L, level, &k, G, fh__ckks_ptr(acc), fh__ckks_ptr(W), fh__ckks_ptr(T), out0, out1,
                            out_gs, add0, add1, add_gs, v0, v0_gs, v0_cs, add_b);
  else
    st = ks_moddown(e, L, level, &k, G, fh__ckks_ptr(acc), fh__ckks_ptr(W), fh__ckks_ptr(T), ntt_out, out0, out1,
                    out_gs, add0, add1, add_gs, add_galois, add_b);
done:
  if (D) fh_tensor_release(D);
  if (acc) fh_tensor_release(acc);
  if (W) fh_tensor_release(W);
  if (T) fh_tensor_release(T);
  if (S) fh_tensor_release(S);
  return st;
}

fh_status fh__ckks_keyswitch(fh_ckks_engine *e, fh__ckks_launcher *L, int level, int64_t G, const uint64_t *d,
                             int64_t gs_d, const uint64_t *d_ntt, bool d_scaled, const fh_tensor *key, bool ntt_out,
                             uint64_t *out0, uint64_t *out1, int64_t out_gs, const uint64_t *add0,
                             const uint64_t *add1, int64_t add_gs, uint64_t add_galois) {
  return keyswitch_impl(e, L, level, G, d, gs_d, d_ntt, gs_d, d_scaled, key, ntt_out, out0, out1, out_gs, add0, add1,
                        add_gs, NULL, 0, 0, add_galois, NULL);
}

fh_status fh__ckks_keyswitch_rescale(fh_ckks_engine *e, fh__ckks_launcher *L, int level, int64_t G,
                                     const uint64_t *d, int64_t gs_d, const uint64_t *d_ntt, int64_t d_ntt_gs,
                                     bool d_scaled, const fh_tensor *key, uint64_t *out0, uint64_t *out1,
                                     int64_t out_gs, const uint64_t *add0, const uint64_t *add1, int64_t add_gs,
                                     const uint64_t *v0, int64_t v0_gs, int64_t v0_cs) {
  return keyswitch_impl(e, L, level, G, d, gs_d, d_ntt, d_ntt_gs, d_scaled, key, true, out0, out1, out_gs, add0, add1, add_gs, v0,
                        v0_gs, v0_cs, 0, NULL);
}

fh_status fh__ckks_keyswitch_tensor(fh_ckks_engine *e, fh__ckks_launcher *L, int level, int64_t G, const uint64_t *d,
                                    int64_t gs_d, const uint64_t *d_ntt, int64_t d_ntt_gs, bool d_scaled,
                                    const fh_tensor *key,
                                    uint64_t *out0, uint64_t *out1, int64_t out_gs, const uint64_t *a0,
                                    const uint64_t *a1, const uint64_t *b0, const uint64_t *b1, int64_t ab_gs,
                                    const uint64_t *v0, int64_t v0_gs, int64_t v0_cs) {
  const uint64_t *add_b[2] = {b0, b1};
  return keyswitch_impl(e, L, level, G, d, gs_d, d_ntt, d_ntt_gs, d_scaled, key, true, out0, out1, out_gs, a0, a1,
                        ab_gs, v0,
                        v0_gs, v0_cs, 0, add_b);
}

fh_status fh__ckks_hoist_begin(fh_ckks_engine *e, fh__ckks_launcher *L, int level, int64_t G, const uint64_t *d,
                               int64_t gs_d, const uint64_t *d_ntt, bool d_scaled, bool steps, fh__ckks_hoist *h) {
  const fh_ckks_tables *tb = e->tb;
  memset(h, 0, sizeof *h);
  ks_geo_of(tb, level, &h->k);
  h->level = level;
  h->G = G;
  const fh__ckks_ks_geo *k = &h->k;
  const int64_t n = k->n;
  int64_t dshape[4] = {G, k->ndig, k->lk, n}, ashape[4] = {G, 2, k->lk, n};
  fh_status st;
  /* CUDA's inner product reads each step's automorphism of D in place (FH_K_CKKS_KS_INNER's
   * galois); the CPU permutes a copy, Dr, and keeps its contiguous SIMD rows */
  h->in_place = tb->device.type == FH_DEVICE_CUDA;
  if ((st = fh__ckks_temp(L, 4, dshape, &h->D)) ||
      (steps && !h->in_place && (st = fh__ckks_temp(L, 4, dshape, &h->Dr))) ||
      (!steps && (st = fh__ckks_temp(L, 4, ashape, &h->acc))) ||
      (st = ks_temps(L, k, G, steps ? 0 : 2, &h->W, &h->T))) {
    fh__ckks_hoist_end(h);
    return st;
  }
  /* the mod-up and the NTT of the extended digits, once: a key-switch core without a key
   * (on CUDA the conversion fused into the NTT's first kernel, as a key switch does); where
   * the tables fold, the digits' own rows copied from d's NTT rows */
  /* (S stays with h: L lists it among the storages of every later submit) */
  fh_ckks_ks_core_args c;
  if (d_scaled && (d_ntt == NULL || !tb->fold_sources))
    st = fh_error_set(FH_ERR_EXECUTION, "internal error: a hoisted mod-up of scaled sources without NTT rows");
  else if ((st = ks_core_modup(L, tb, level, k, G, d, gs_d, d_scaled, fh__ckks_ptr(h->D), &h->S, &c)) == FH_OK) {
    if (tb->fold_sources) {
      c.in_ntt = d_ntt;
      c.in_ntt_gs = gs_d;
    }
    st = fh__ckks_submit(L, FH_K_CKKS_KS_CORE, &c, sizeof c);
  }
  if (st != FH_OK) fh__ckks_hoist_end(h);
  return st;
}

fh_status fh__ckks_hoist_inner_steps(fh_ckks_engine *e, fh__ckks_launcher *L, fh__ckks_hoist *h, int nsteps,
                                     const uint64_t *galois, const fh_tensor *const *key, uint64_t *const *acc) {
  const fh_ckks_tables *tb = e->tb;
  const fh__ckks_ks_geo *k = &h->k;
  const int64_t rs = (int64_t)k->lk * k->n;
  if (nsteps < 1 || nsteps > FH_CKKS_KS_MAX_STEPS)
    return fh_error_set(FH_ERR_EXECUTION, "internal error: %d hoisted steps in one launch (1 to %d)", nsteps,
                        FH_CKKS_KS_MAX_STEPS);
  fh_ckks_ks_args ip;
  memset(&ip, 0, sizeof ip);
  ip.out_gs = 2 * rs;
  ip.out_cs = rs;
  ip.digits_gs = (int64_t)k->ndig * rs;
  ip.digit_stride = rs;
  ip.ngroups = h->G;
  ip.ndigits = k->ndig;
  ip.nlimbs = k->lk;
  ip.log_n = tb->log_n;
  ip.primes = tb->primes_dev;
  memcpy(ip.prime, k->qp, sizeof(int32_t) * (size_t)k->lk);
  memcpy(ip.key_row, k->qp, sizeof(int32_t) * (size_t)k->lk);
  fh_status st = FH_OK;
  if (h->in_place) {
    /* CUDA: every step in one launch, the automorphisms read in place */
    ip.digits = fh__ckks_ptr(h->D);
    ip.nsteps = nsteps;
    for (int s = 0; s < nsteps; ++s) {
      ip.step_out[s] = acc[s];
      ip.step_galois[s] = galois[s];
      int64_t kd, kc;
      ip.step_key[s] = fh__ckks_key_digits(k, key[s], &kd, &kc);
      ip.key_ds = kd; /* the same geometry for every key of this level */
      ip.key_cs = kc;
    }
    return fh__ckks_submit(L, FH_K_CKKS_KS_INNER, &ip, sizeof ip);
  }
  /* the CPU: the automorphism of the extended digits into a permuted copy, then its
   * contiguous (SIMD) rows, a step at a time: it commutes with the centred conversion and
   * with the NTT, so these are the digits of the rotated polynomial, word for word */
  ip.digits = fh__ckks_ptr(h->Dr);
  for (int s = 0; s < nsteps && st == FH_OK; ++s) {
    if ((st = fh__ckks_automorph(L, true, galois[s], fh__ckks_ptr(h->Dr), rs, fh__ckks_ptr(h->D), rs,
                                 h->G * k->ndig, k->qp, k->lk)) != FH_OK)
      break;
    ip.out = acc[s];
    ip.key = fh__ckks_key_digits(k, key[s], &ip.key_ds, &ip.key_cs);
    st = fh__ckks_submit(L, FH_K_CKKS_KS_INNER, &ip, sizeof ip);
  }
  return st;
}

fh_status fh__ckks_hoist_moddown_of(fh_ckks_engine *e, fh__ckks_launcher *L, fh__ckks_hoist *h, uint64_t *acc,
                                    bool ntt_out, uint64_t *out0, uint64_t *out1, int64_t out_gs,
                                    const uint64_t *add0, int64_t add_gs, uint64_t add_galois) {
  return ks_moddown(e, L, h->level, &h->k, h->G, acc, fh__ckks_ptr(h->W), fh__ckks_ptr(h->T), ntt_out, out0, out1,
                    out_gs, add0, NULL, add_gs, add_galois, NULL);
}

fh_status fh__ckks_hoist_moddown_steps(fh_ckks_engine *e, fh__ckks_launcher *L, fh__ckks_hoist *h, int nsteps,
                                       uint64_t *acc, uint64_t *const *out, int64_t out_cs, int64_t out_gs,
                                       const uint64_t *add0, int64_t add_gs, const uint64_t *add_galois) {
  const fh__ckks_ks_geo *k = &h->k;
  const int64_t n = k->n, G = h->G, step = 2 * G * (int64_t)k->lk * n, wstep = 2 * G * (int64_t)k->np * n;
  /* the INTT of every step's P rows in one launch: nsteps x 2G groups of np rows */
  int64_t wshape[3] = {nsteps * 2 * G, k->np, n};
  fh_tensor *W = NULL;
  fh_status st = fh__ckks_temp(L, 3, wshape, &W);
  bool scaled = false;
  if (st == FH_OK)
    st = fh__ckks_ks_intt(L, h->level, true, fh__ckks_ptr(W), (int64_t)k->np * n, acc + (int64_t)k->la * n,
                          (int64_t)k->lk * n, nsteps * 2 * G, k->qp + k->la, k->np, &scaled);
  for (int s = 0; s < nsteps && st == FH_OK; ++s)
    st = ks_moddown_from(e, L, h->level, k, G, acc + s * step, fh__ckks_ptr(W) + s * wstep, scaled,
                         fh__ckks_ptr(h->T), true,
                         out[s], out[s] + out_cs, out_gs, add0, NULL, add_gs, add_galois[s], NULL);
  /* (released after its last launch: the device's allocator orders its reuse after it) */
  if (W) fh_tensor_release(W);
  return st;
}

fh_status fh__ckks_hoist_moddown(fh_ckks_engine *e, fh__ckks_launcher *L, fh__ckks_hoist *h, uint64_t *out0,
                                 uint64_t *out1, int64_t out_gs) {
  return fh__ckks_hoist_moddown_of(e, L, h, fh__ckks_ptr(h->acc), true, out0, out1, out_gs, NULL, 0, 0);
}

/* (without steps, h->W has the two extra rows of a fused rescale: fh__ckks_hoist_begin) */
fh_status fh__ckks_hoist_moddown_rescale(fh_ckks_engine *e, fh__ckks_launcher *L, fh__ckks_hoist *h, uint64_t *out0,
                                         uint64_t *out1, int64_t out_gs) {
  if (h->W->shape[1] < h->k.np + 2)
    return fh_error_set(FH_ERR_EXECUTION, "ckks: a hoist begun with steps has no rows for a fused rescale");
  return ks_moddown_rescale(e, L, h->level, &h->k, h->G, fh__ckks_ptr(h->acc), fh__ckks_ptr(h->W), fh__ckks_ptr(h->T),
                            out0, out1, out_gs, NULL, NULL, 0, NULL, 0, 0, NULL);
}

void fh__ckks_hoist_end(fh__ckks_hoist *h) {
  fh_tensor *ts[6] = {h->D, h->Dr, h->acc, h->W, h->T, h->S};
  for (int i = 0; i < 6; ++i)
    if (ts[i]) fh_tensor_release(ts[i]);
  memset(h, 0, sizeof *h);
}
