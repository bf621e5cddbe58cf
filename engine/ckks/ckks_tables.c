/* CKKS prime utilities and constant tables (fh/ckks_tables.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fh/ckks_tables.h"

/* ---- primes ----------------------------------------------------------------- */
fh_status fh_ckks_find_primes(int bits, int log_n, int count, const uint64_t *exclude, int nexclude, uint64_t *out) {
  if (bits < 20 || bits > 61)
    return fh_error_set(FH_ERR_VALUE, "prime size must be between 20 and 61 bits, got %d", bits);
  if (log_n < FH_CKKS_MIN_LOG_N || log_n > FH_CKKS_MAX_LOG_N)
    return fh_error_set(FH_ERR_VALUE, "log N must be between %d and %d, got %d", FH_CKKS_MIN_LOG_N, FH_CKKS_MAX_LOG_N,
                        log_n);
  if (count < 0) return fh_error_set(FH_ERR_VALUE, "prime count must be non-negative, got %d", count);
  uint64_t m = 2ULL << log_n; /* 2N */
  /* largest q < 2^bits with q = 1 mod 2N, then downwards while above 2^(bits-1) */
  uint64_t top = (1ULL << bits) - 1;
  uint64_t q = top - ((top - 1) % m);
  int found = 0;
  for (; q > (1ULL << (bits - 1)) && found < count; q -= m) {
    bool skip = false;
    for (int i = 0; i < nexclude && !skip; ++i) skip = exclude[i] == q;
    if (!skip && fh_is_prime_u64(q)) out[found++] = q;
  }
  if (found < count)
    return fh_error_set(FH_ERR_VALUE, "only %d %d-bit primes q = 1 mod 2^%d exist (after exclusions), %d requested",
                        found, bits, log_n + 1, count);
  return FH_OK;
}

fh_status fh_ckks_min_root(uint64_t q, int log_n, uint64_t *out) {
  uint64_t m = 2ULL << log_n;
  if (q < 3 || q >= (1ULL << 62) || (q - 1) % m != 0 || !fh_is_prime_u64(q))
    return fh_error_set(FH_ERR_VALUE, "%llu is not a prime q < 2^62 with q = 1 mod 2N = %llu", (unsigned long long)q,
                        (unsigned long long)m);
  fh_modulus md;
  fh_modulus_init(&md, q);
  uint64_t n = m / 2;
  /* g = x^((q-1)/2N) is a primitive 2N-th root iff g^N = -1 */
  uint64_t g = 0;
  for (uint64_t x = 2; x < q; ++x) {
    uint64_t c = fh_mod_pow(x, (q - 1) / m, &md);
    if (fh_mod_pow(c, n, &md) == q - 1) {
      g = c;
      break;
    }
  }
  if (g == 0) return fh_error_set(FH_ERR_VALUE, "no primitive 2N-th root of unity modulo %llu", (unsigned long long)q);
  /* the primitive 2N-th roots are g^k for odd k: take the smallest */
  uint64_t g2 = fh_mod_mul(g, g, &md), best = g, cur = g;
  for (uint64_t k = 1; k < n; ++k) {
    cur = fh_mod_mul(cur, g2, &md);
    if (cur < best) best = cur;
  }
  *out = best;
  return FH_OK;
}

/* ---- tables ------------------------------------------------------------------ */
fh_status fh_ckks_fhelium_ntt_order(uint64_t q, int log_n, uint64_t psi, uint32_t *perm) {
  uint64_t m = 2ULL << log_n, n = m / 2;
  if (log_n < FH_CKKS_MIN_LOG_N || log_n > FH_CKKS_MAX_LOG_N || q < 3 || q >= (1ULL << 62) || (q - 1) % m != 0 ||
      !fh_is_prime_u64(q))
    return fh_error_set(FH_ERR_VALUE, "%llu is not a prime q < 2^62 with q = 1 mod 2N = %llu", (unsigned long long)q,
                        (unsigned long long)m);
  fh_modulus md;
  fh_modulus_init(&md, q);
  uint64_t root = 0;
  for (uint64_t c = 2; c < q && root == 0; ++c) {
    uint64_t r = fh_mod_pow(c, (q - 1) / m, &md);
    if (fh_mod_pow(r, n, &md) == q - 1) root = r;
  }
  if (root == 0 || fh_mod_pow(psi, n, &md) != q - 1)
    return fh_error_set(FH_ERR_VALUE, "no primitive 2N-th root of unity modulo %llu", (unsigned long long)q);
  /* t: psi^t = root (t odd, < 2N) */
  uint64_t psi2 = fh_mod_mul(psi, psi, &md), cur = psi, t = 1;
  while (cur != root && t < m) {
    cur = fh_mod_mul(cur, psi2, &md);
    t += 2;
  }
  if (cur != root) return fh_error_set(FH_ERR_VALUE, "FHElium's root modulo %llu is no power of ours", (unsigned long long)q);
  /* FHElium's slot i is ours at the automorphism X -> X^t's source slot */
  for (uint64_t i = 0; i < n; ++i) perm[i] = fh_ckks_automorph_src((uint32_t)i, t, log_n);
  return FH_OK;
}

#define PRIME_WORDS (sizeof(fh_ckks_prime) / sizeof(uint64_t))
_Static_assert(sizeof(fh_ckks_prime) % sizeof(uint64_t) == 0, "fh_ckks_prime is a whole number of words");

typedef struct layout {
  size_t primes, ntt, rot, ksi, garner, bconv, rescale, sources, total;
} layout;

/* words before level l's one-prime rescale conversion (q_l -> the nq - l - 1 primes above it),
 * from lo.rescale: the sum of bconv_words(1, nq - k - 1) = nq - k + 1 over k < l */
static size_t rescale_at(int nq, int l) { return (size_t)l * (size_t)(nq + 1) - (size_t)l * (size_t)(l - 1) / 2; }

static int digit_lo(const fh_ckks_tables *t, int j) { return t->digit_start[j]; }
static int digit_hi(const fh_ckks_tables *t, int j) { return t->digit_start[j + 1]; } /* exclusive */
/* first active prime of digit j at `level` and the count of active ones */
static int digit_first(const fh_ckks_tables *t, int j, int level) {
  int lo = digit_lo(t, j);
  return lo > level ? lo : level;
}
static int digit_active(const fh_ckks_tables *t, int j, int level) {
  int lo = digit_first(t, j, level), hi = digit_hi(t, j);
  return hi > lo ? hi - lo : 0;
}

static size_t bconv_words(int nsrc, int ndst) { return fh_ckks_bconv_words(nsrc, ndst); }

void fh_ckks_bconv_constants(const fh_ckks_tables *t, const int *src, int nsrc, const int *dst, int ndst,
                             uint64_t *w) {
  for (int i = 0; i < nsrc; ++i) {
    const fh_modulus *m = &t->host[src[i]].bar;
    uint64_t prod = 1 % m->q;
    for (int k = 0; k < nsrc; ++k)
      if (k != i) prod = fh_mod_mul(prod, t->primes[src[k]] % m->q, m);
    uint64_t inv = fh_mod_inv_prime(prod, m);
    w[2 * i] = inv;
    w[2 * i + 1] = fh_shoup_precompute(inv, m->q);
  }
  uint64_t *mat = w + 2 * nsrc;
  for (int j = 0; j < ndst; ++j) {
    const fh_modulus *m = &t->host[dst[j]].bar;
    for (int i = 0; i < nsrc; ++i) {
      uint64_t prod = 1 % m->q;
      for (int k = 0; k < nsrc; ++k)
        if (k != i) prod = fh_mod_mul(prod, t->primes[src[k]] % m->q, m);
      mat[(size_t)j * nsrc + i] = prod;
    }
  }
}

static void tables_free(fh_ckks_tables *t) {
  if (t == NULL) return;
  if (t->data) fh_tensor_release(t->data);
  fh_free(t->modup);
  fh_free(t->moddown);
  fh_free(t->rescale);
  fh_free(t->rescale_inv);
  fh_free(t->p_inv);
  fh_free(t->p_mod);
  fh_free(t);
}

void fh_ckks_tables_retain(fh_ckks_tables *t) { fh_rc_retain(&t->rc); }
void fh_ckks_tables_release(fh_ckks_tables *t) {
  if (t != NULL && fh_rc_release(&t->rc)) tables_free(t);
}

static fh_status validate(int log_n, const uint64_t *primes, int nq, int np) {
  if (log_n < FH_CKKS_MIN_LOG_N || log_n > FH_CKKS_MAX_LOG_N)
    return fh_error_set(FH_ERR_VALUE, "log N must be between %d and %d, got %d", FH_CKKS_MIN_LOG_N, FH_CKKS_MAX_LOG_N,
                        log_n);
  if (nq < 1) return fh_error_set(FH_ERR_VALUE, "a CKKS context needs at least one Q prime, got %d", nq);
  if (np < 0 || nq + np > FH_CKKS_MAX_PRIMES)
    return fh_error_set(FH_ERR_VALUE, "at most %d primes (Q + P) are supported, got %d + %d", FH_CKKS_MAX_PRIMES, nq,
                        np);
  uint64_t m = 2ULL << log_n;
  for (int i = 0; i < nq + np; ++i) {
    uint64_t q = primes[i];
    const char *set = i < nq ? "Q" : "P";
    int idx = i < nq ? i : i - nq;
    if (q >= (1ULL << 62) || q < 3)
      return fh_error_set(FH_ERR_VALUE, "%s prime %d is %llu; primes must be below 2^62", set, idx + 1,
                          (unsigned long long)q);
    if ((q - 1) % m != 0)
      return fh_error_set(FH_ERR_VALUE, "%s prime %d (%llu) is not 1 mod 2N = %llu (not NTT-friendly)", set, idx + 1,
                          (unsigned long long)q, (unsigned long long)m);
    if (!fh_is_prime_u64(q))
      return fh_error_set(FH_ERR_VALUE, "%s prime %d (%llu) is not prime", set, idx + 1, (unsigned long long)q);
    for (int k = 0; k < i; ++k)
      if (primes[k] == q)
        return fh_error_set(FH_ERR_VALUE, "prime %llu appears twice in the chain", (unsigned long long)q);
  }
  return FH_OK;
}

fh_status fh_ckks_tables_new(int log_n, const uint64_t *primes, int nq, int np, fh_device dev, fh_ckks_tables **out) {
  return fh_ckks_tables_new_layout(log_n, primes, nq, np, 0, 0, NULL, dev, out);
}

fh_status fh_ckks_tables_new_layout(int log_n, const uint64_t *primes, int nq, int np, int galois_generator,
                                    int ndigits, const int32_t *digit_start, fh_device dev, fh_ckks_tables **out) {
  fh_status st = validate(log_n, primes, nq, np);
  if (st != FH_OK) return st;
  if (galois_generator == 0) galois_generator = 5;
  if (galois_generator != 5 && galois_generator != 3)
    return fh_error_set(FH_ERR_VALUE, "the slot-order generator must be 5 or 3, got %d", galois_generator);
  if (ndigits != 0 && np > 0) {
    if (ndigits < 1 || ndigits > nq || digit_start == NULL || digit_start[0] != 0 || digit_start[ndigits] != nq)
      return fh_error_set(FH_ERR_VALUE, "key-switching digits must split the %d Q primes (1..%d digits)", nq, nq);
    for (int j = 0; j < ndigits; ++j)
      if (digit_start[j + 1] <= digit_start[j])
        return fh_error_set(FH_ERR_VALUE, "key-switching digit %d is empty or out of order", j);
  }
  if ((st = fh_device_check(dev)) != FH_OK) return st;
  fh_ckks_tables *t = fh_calloc(1, sizeof *t);
  if (t == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory building CKKS tables");
  fh_rc_init(&t->rc);
  t->log_n = log_n;
  t->n = (int64_t)1 << log_n;
  t->nq = nq;
  t->np = np;
  t->galois_generator = galois_generator;
  if (np > 0 && ndigits > 0) {
    t->dnum = ndigits;
    memcpy(t->digit_start, digit_start, sizeof(int32_t) * (size_t)(ndigits + 1));
  } else if (np > 0) {
    t->dnum = (nq + np - 1) / np;
    for (int j = 0; j < t->dnum; ++j) t->digit_start[j] = j * np;
    t->digit_start[t->dnum] = nq;
  }
  t->device = dev;
  int np_all = nq + np;
  int64_t n = t->n;
  memcpy(t->primes, primes, sizeof(uint64_t) * (size_t)np_all);

  /* host per-prime constants (the root search is the slow part: O(N)) */
  for (int p = 0; p < np_all; ++p) {
    fh_ckks_prime *c = &t->host[p];
    uint64_t q = primes[p];
    fh_modulus_init(&c->bar, q);
    c->q = q;
    c->qinv = fh_mont_qinv(q);
    c->r1 = fh_mont_r1(q);
    c->r1_shoup = fh_shoup_precompute(c->r1, q);
    c->r2 = fh_mont_r2(q);
    if ((st = fh_ckks_min_root(q, log_n, &c->psi)) != FH_OK) {
      tables_free(t);
      return st;
    }
    c->psi_inv = fh_mod_inv_prime(c->psi, &c->bar);
    uint64_t w1 = fh_mod_pow(c->psi, (uint64_t)n / 2, &c->bar); /* psi^bitrev(1) */
    c->w1r = fh_mod_mul(w1, c->r1, &c->bar);
    c->w1r_shoup = fh_shoup_precompute(c->w1r, q);
    uint64_t ninv = fh_mod_inv_prime((uint64_t)n % q, &c->bar);
    uint64_t rinv = fh_mod_inv_prime(c->r1, &c->bar);
    c->ninv_rinv = fh_mod_mul(ninv, rinv, &c->bar);
    c->ninv_rinv_shoup = fh_shoup_precompute(c->ninv_rinv, q);
    uint64_t iw1 = fh_mod_inv_prime(w1, &c->bar);
    c->iw1s = fh_mod_mul(iw1, c->ninv_rinv, &c->bar);
    c->iw1s_shoup = fh_shoup_precompute(c->iw1s, q);
    c->fp_q = (double)q;
    c->fp_qinv = 1.0 / (double)q;
    const uint64_t fused[4] = {c->r1, c->w1r, c->ninv_rinv, c->iw1s};
    for (int k = 0; k < 4; ++k) {
      c->fp_c[2 * k] = (double)fused[k];
      c->fp_c[2 * k + 1] = fh_fp_twiddle(fused[k], q);
    }
  }

  /* layout */
  layout lo;
  size_t w = 0;
  lo.primes = w;
  w += PRIME_WORDS * (size_t)np_all;
  lo.ntt = w;
  w += (size_t)np_all * 4 * (size_t)n;
  /* the key switch's sources scaled by the INTTs before it (fh_ckks_tables.fold_sources) */
  const char *fold_env = getenv("FHELIUM_CUDA_FOLD");
  t->fold_sources = np > 0 && fold_env && strcmp(fold_env, "1") == 0 &&
                    (dev.type == FH_DEVICE_CPU || log_n > FH_CKKS_CUDA_ROW_LOG);
  /* the FP64 twiddle rows of the primes that take FP64 butterflies on CUDA */
  const char *fp_env = getenv("FHELIUM_CUDA_FP");
  const bool use_fp = dev.type != FH_DEVICE_CPU && !(fp_env && strcmp(fp_env, "0") == 0);
  for (int p = 0; p < np_all; ++p) {
    t->host[p].fp_tw = 0;
    if (use_fp && fh_fp_eligible(t->host[p].q)) {
      t->host[p].fp_tw = (int64_t)(w - lo.ntt);
      w += 4 * (size_t)n;
    }
  }
  lo.rot = w;
  w += (size_t)n / 2;
  lo.ksi = w;
  w += 2 * (2 * (size_t)n + 1);
  lo.garner = w;
  w += (size_t)nq * (size_t)nq;
  lo.bconv = w;
  size_t *modup_off = NULL, *moddown_off = NULL;
  if (np > 0) {
    modup_off = fh_calloc((size_t)nq * (size_t)t->dnum, sizeof *modup_off);
    moddown_off = fh_calloc((size_t)nq, sizeof *moddown_off);
    t->modup = fh_calloc((size_t)nq * (size_t)t->dnum, sizeof *t->modup);
    t->moddown = fh_calloc((size_t)nq, sizeof *t->moddown);
    if (!modup_off || !moddown_off || !t->modup || !t->moddown) {
      fh_free(modup_off);
      fh_free(moddown_off);
      tables_free(t);
      return fh_error_set(FH_ERR_MEMORY, "out of memory building CKKS tables");
    }
    for (int l = 0; l < nq; ++l) {
      int la = nq - l;
      for (int j = 0; j < t->dnum; ++j) {
        int ns = digit_active(t, j, l);
        if (ns == 0) continue;
        modup_off[l * t->dnum + j] = w;
        w += bconv_words(ns, la - ns + np);
      }
      moddown_off[l] = w;
      w += bconv_words(np, la);
    }
  }
  /* the rescales' one-prime conversions, level after level */
  lo.rescale = w;
  w += rescale_at(nq, nq - 1);
  /* the key switch's conversion sources' pairs, [level][row][2] (fh_ckks_tables.sources) */
  lo.sources = w;
  if (np > 0) w += 2 * (size_t)nq * (size_t)nq;
  lo.total = w;

  t->rescale_inv = fh_calloc((size_t)nq * (size_t)nq, sizeof(uint64_t));
  t->p_inv = fh_calloc((size_t)nq, sizeof(uint64_t));
  t->p_mod = fh_calloc((size_t)nq, sizeof(uint64_t));
  t->rescale = fh_calloc((size_t)nq, sizeof *t->rescale);
  fh_tensor *host = NULL;
  fh_tensor_options o = {FH_UINT64, fh_cpu(), false, false};
  int64_t shape[1] = {(int64_t)lo.total};
  if (!t->rescale_inv || !t->p_inv || !t->p_mod || !t->rescale) {
    st = fh_error_set(FH_ERR_MEMORY, "out of memory building CKKS tables");
  } else {
    st = fh_tensor_empty(1, shape, &o, &host);
  }
  if (st != FH_OK) {
    fh_free(modup_off);
    fh_free(moddown_off);
    tables_free(t);
    return st;
  }
  uint64_t *base = (uint64_t *)fh_tensor_data(host);
  memset(base, 0, lo.total * sizeof(uint64_t));

  /* per-prime records and NTT twiddles */
  memcpy(base + lo.primes, t->host, sizeof(fh_ckks_prime) * (size_t)np_all);
  uint64_t *pw = fh_malloc(sizeof(uint64_t) * (size_t)n);
  if (pw == NULL) {
    fh_free(modup_off);
    fh_free(moddown_off);
    fh_tensor_release(host);
    tables_free(t);
    return fh_error_set(FH_ERR_MEMORY, "out of memory building CKKS tables");
  }
  for (int p = 0; p < np_all; ++p) {
    const fh_ckks_prime *c = &t->host[p];
    uint64_t q = c->q;
    uint64_t *tw = base + lo.ntt + (size_t)p * 4 * (size_t)n;
    pw[0] = 1;
    for (int64_t i = 1; i < n; ++i) pw[i] = fh_mod_mul(pw[i - 1], c->psi, &c->bar);
    for (int64_t k = 0; k < n; ++k) {
      uint32_t r = fh_ckks_bitrev((uint32_t)k, log_n);
      uint64_t f = pw[r];
      uint64_t inv = r == 0 ? 1 : q - pw[n - r]; /* psi^-r = -psi^(N-r) */
      tw[k] = f;
      tw[n + k] = fh_shoup_precompute(f, q);
      tw[2 * n + k] = inv;
      tw[3 * n + k] = fh_shoup_precompute(inv, q);
    }
    if (c->fp_tw) {
      double *fw = (double *)(base + lo.ntt + c->fp_tw);
      for (int64_t k = 0; k < n; ++k) {
        fw[k] = (double)tw[k];
        fw[n + k] = fh_fp_twiddle(tw[k], q);
        fw[2 * n + k] = (double)tw[2 * n + k];
        fw[3 * n + k] = fh_fp_twiddle(tw[2 * n + k], q);
      }
    }
  }
  fh_free(pw);

  /* encoding tables */
  uint64_t m2 = 2 * (uint64_t)n;
  uint64_t *rot = base + lo.rot;
  uint64_t g = 1, step = 5;
  if (galois_generator == 3) { /* e_j = 3^-j: steps of 3^-1 mod 2N (Newton's iteration for an inverse mod 2^64) */
    uint64_t x = 3;
    for (int i = 0; i < 6; ++i) x *= 2 - 3 * x;
    step = x % m2;
  }
  for (int64_t j = 0; j < n / 2; ++j) {
    rot[j] = g;
    g = (g * step) % m2;
  }
  double *ksi = (double *)(base + lo.ksi);
  for (uint64_t k = 0; k <= m2; ++k) {
    long double ang = 2.0L * 3.14159265358979323846264338327950288L * (long double)k / (long double)m2;
    ksi[2 * k] = (double)cosl(ang);
    ksi[2 * k + 1] = (double)sinl(ang);
  }

  /* Garner constants over the reversed chain r_k = q_{nq-1-k} */
  uint64_t *gar = base + lo.garner;
  for (int i = 0; i < nq; ++i) {
    const fh_modulus *m = &t->host[nq - 1 - i].bar;
    uint64_t prod = 1 % m->q;
    for (int mm = 0; mm < i; ++mm) {
      gar[(size_t)i * nq + mm] = prod;
      prod = fh_mod_mul(prod, primes[nq - 1 - mm] % m->q, m);
    }
    gar[(size_t)i * nq + i] = fh_mod_inv_prime(prod, m);
  }

  /* key-switching base conversions and host constants */
  int src[FH_CKKS_MAX_PRIMES], dst[FH_CKKS_MAX_PRIMES];
  for (int l = 0; l < nq && np > 0; ++l) {
    int la = nq - l;
    for (int j = 0; j < t->dnum; ++j) {
      int ns = digit_active(t, j, l);
      if (ns == 0) continue;
      int lo_j = digit_first(t, j, l), nd = 0;
      for (int i = 0; i < ns; ++i) src[i] = lo_j + i;
      for (int i = l; i < nq; ++i)
        if (i < lo_j || i >= lo_j + ns) dst[nd++] = i;
      for (int k = 0; k < np; ++k) dst[nd++] = nq + k;
      fh_ckks_bconv_constants(t, src, ns, dst, nd, base + modup_off[l * t->dnum + j]);
      /* the digit's (shat_inv, Shoup companion) pairs, at its rows' places among the level's */
      memcpy(base + lo.sources + 2 * ((size_t)l * (size_t)nq + (size_t)(lo_j - l)), base + modup_off[l * t->dnum + j],
             2 * (size_t)ns * sizeof(uint64_t));
    }
    for (int k = 0; k < np; ++k) src[k] = nq + k;
    for (int i = 0; i < la; ++i) dst[i] = l + i;
    fh_ckks_bconv_constants(t, src, np, dst, la, base + moddown_off[l]);
  }
  for (int l = 0; l + 1 < nq; ++l) {
    src[0] = l;
    for (int i = l + 1; i < nq; ++i) dst[i - l - 1] = i;
    fh_ckks_bconv_constants(t, src, 1, dst, nq - l - 1, base + lo.rescale + rescale_at(nq, l));
  }
  for (int l = 0; l + 1 < nq; ++l) {
    uint64_t qd = primes[l]; /* dropped by a rescale at level l */
    for (int i = l + 1; i < nq; ++i) {
      const fh_modulus *m = &t->host[i].bar;
      t->rescale_inv[(size_t)l * nq + i] = fh_mod_inv_prime(qd % m->q, m);
    }
  }
  if (np > 0) {
    for (int i = 0; i < nq; ++i) {
      const fh_modulus *m = &t->host[i].bar;
      uint64_t pm = 1 % m->q;
      for (int k = 0; k < np; ++k) pm = fh_mod_mul(pm, primes[nq + k] % m->q, m);
      t->p_mod[i] = pm;
      t->p_inv[i] = fh_mod_inv_prime(pm, m);
    }
  }

  /* move to the device */
  fh_tensor *data = host;
  if (dev.type != FH_DEVICE_CPU) {
    st = fh_tensor_to(host, dev, false, NULL, false, &data);
    fh_tensor_release(host);
    if (st != FH_OK) {
      fh_free(modup_off);
      fh_free(moddown_off);
      tables_free(t);
      return st;
    }
  }
  t->data = data;
  uint64_t *d = (uint64_t *)fh_tensor_data(data);
  t->primes_dev = (const fh_ckks_prime *)(d + lo.primes);
  t->ntt = d + lo.ntt;
  t->rot_group = d + lo.rot;
  t->ksi = (const double *)(d + lo.ksi);
  t->garner = d + lo.garner;
  for (int l = 0; l < nq && np > 0; ++l) {
    for (int j = 0; j < t->dnum; ++j)
      t->modup[l * t->dnum + j] = digit_active(t, j, l) ? d + modup_off[l * t->dnum + j] : NULL;
    t->moddown[l] = d + moddown_off[l];
  }
  for (int l = 0; l + 1 < nq; ++l) t->rescale[l] = d + lo.rescale + rescale_at(nq, l);
  t->sources = np > 0 ? d + lo.sources : NULL;
  fh_free(modup_off);
  fh_free(moddown_off);
  *out = t;
  return FH_OK;
}
