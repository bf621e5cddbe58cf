/* CKKS contexts: validation, ids, interning, presets, prime generation. */
#include "fh/ckks_context.h"

#include <math.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckks_presets_030.h"

/* ---- number theory ------------------------------------------------------ */
static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) { return (uint64_t)(((unsigned __int128)a * b) % m); }

static uint64_t powmod(uint64_t a, uint64_t e, uint64_t m) {
  uint64_t r = 1 % m;
  a %= m;
  while (e) {
    if (e & 1) r = mulmod(r, a, m);
    a = mulmod(a, a, m);
    e >>= 1;
  }
  return r;
}

/* Miller-Rabin with the first twelve primes as bases: deterministic for
 * n < 3.3 * 10^24 (Sorenson and Webster 2015), so exact for 64-bit n. */
bool fh_is_prime_u64(uint64_t n) {
  static const uint64_t bases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  if (n < 2) return false;
  for (size_t i = 0; i < sizeof bases / sizeof bases[0]; ++i) {
    if (n == bases[i]) return true;
    if (n % bases[i] == 0) return false;
  }
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  for (size_t i = 0; i < sizeof bases / sizeof bases[0]; ++i) {
    uint64_t x = powmod(bases[i], d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s; ++r) {
      x = mulmod(x, x, n);
      if (x == n - 1) {
        composite = false;
        break;
      }
    }
    if (composite) return false;
  }
  return true;
}

/* Maximum bit length of the complete modulus Q*P for 128-bit classical
 * security, uniform ternary secret, error standard deviation 3.19.
 * Source: "Security Guidelines for Implementing Homomorphic Encryption",
 * IACR Communications in Cryptology 2025 (doi:10.62056/anxra69p1), the
 * table FHElium reproduces (lattice-estimator, RC.MATZOV cost model). The
 * 2018 HomomorphicEncryption.org standard gives slightly larger values for
 * N <= 32768 (27, 54, 109, 218, 438, 881); we use the newer, stricter row. */
static const struct { int64_t n; int32_t bits; } security_table[] = {
    {1024, 26}, {2048, 53}, {4096, 106}, {8192, 214}, {16384, 430}, {32768, 868}, {65536, 1747}, {131072, 3523},
};

int32_t fh_ckks_security_budget_bits(int64_t ring_degree) {
  for (size_t i = 0; i < sizeof security_table / sizeof security_table[0]; ++i)
    if (security_table[i].n == ring_degree) return security_table[i].bits;
  return 0;
}

/* Exact bit length of the product of `n` primes (each < 2^62): a
 * little-endian multi-word product. */
static int32_t product_bits(const uint64_t *p, int n) {
  uint64_t w[FH_CKKS_MAX_PRIMES + 1];
  int len = 1;
  w[0] = 1;
  for (int i = 0; i < n; ++i) {
    unsigned __int128 carry = 0;
    for (int j = 0; j < len; ++j) {
      unsigned __int128 t = (unsigned __int128)w[j] * p[i] + carry;
      w[j] = (uint64_t)t;
      carry = t >> 64;
    }
    if (carry) w[len++] = (uint64_t)carry;
  }
  while (len > 1 && w[len - 1] == 0) --len;
  return (int32_t)(64 * (len - 1) + (64 - __builtin_clzll(w[len - 1])));
}

/* ---- key digits ------------------------------------------------------------ */
static const char *const digit_names[] = {NULL, "p_count", "below_p"};
const char *fh_key_digits_name(fh_key_digits d) { return (unsigned)d < 3 ? digit_names[d] : NULL; }
fh_status fh_key_digits_parse(const char *s, fh_key_digits *out) {
  for (int i = 1; i < 3; ++i)
    if (s && strcmp(s, digit_names[i]) == 0) {
      *out = (fh_key_digits)i;
      return FH_OK;
    }
  return fh_error_set(FH_ERR_VALUE, "key_digits must be \"p_count\" or \"below_p\", got \"%.64s\"", s ? s : "(null)");
}

/* a < b for little-endian multi-word integers */
static bool big_less(const uint64_t *a, int la, const uint64_t *b, int lb) {
  while (la > 1 && a[la - 1] == 0) --la;
  while (lb > 1 && b[lb - 1] == 0) --lb;
  if (la != lb) return la < lb;
  for (int i = la - 1; i >= 0; --i)
    if (a[i] != b[i]) return a[i] < b[i];
  return false;
}
static int big_mul_small(uint64_t *w, int len, uint64_t m) {
  unsigned __int128 carry = 0;
  for (int j = 0; j < len; ++j) {
    unsigned __int128 t = (unsigned __int128)w[j] * m + carry;
    w[j] = (uint64_t)t;
    carry = t >> 64;
  }
  if (carry) w[len++] = (uint64_t)carry;
  return len;
}

/* The digit split of the Q primes (see the header). */
static void split_digits(fh_ckks_context *c) {
  int nq = c->num_q, np = c->num_p, k = 0, start = 0;
  if (c->key_digits == FH_DIGITS_P_COUNT) {
    for (; start < nq; start += np) c->digit_start[k++] = start;
  } else {
    uint64_t P[FH_CKKS_MAX_PRIMES + 1] = {1};
    int lp = 1;
    for (int i = 0; i < np; ++i) lp = big_mul_small(P, lp, c->primes[nq + i]);
    while (start < nq) {
      c->digit_start[k++] = start;
      uint64_t prod[FH_CKKS_MAX_PRIMES + 1] = {1};
      int lprod = 1, stop = start;
      for (;;) {
        if (stop >= nq) break;
        uint64_t t[FH_CKKS_MAX_PRIMES + 1];
        memcpy(t, prod, sizeof(uint64_t) * (size_t)lprod);
        int lt = big_mul_small(t, lprod, c->primes[stop]);
        if (!big_less(t, lt, P, lp)) break;
        memcpy(prod, t, sizeof(uint64_t) * (size_t)lt);
        lprod = lt;
        ++stop;
      }
      start = stop > start ? stop : start + 1;
    }
  }
  c->num_digits = k;
  c->digit_start[k] = nq;
}

/* ---- registry ------------------------------------------------------------- */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
/* recursive: a builder may look up another slot of the same context */
static pthread_mutex_t ext_lock;
static pthread_once_t ext_once = PTHREAD_ONCE_INIT;
static void ext_lock_init(void) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&ext_lock, &a);
  pthread_mutexattr_destroy(&a);
}
typedef struct reg_entry {
  fh_ckks_context *ctx;
  struct reg_entry *next;
} reg_entry;
static reg_entry *registry;

static fh_ckks_context *registry_find_locked(const char *id) {
  for (reg_entry *e = registry; e; e = e->next)
    if (strcmp(e->ctx->id, id) == 0) return e->ctx;
  return NULL;
}

static void context_destroy(fh_ckks_context *c) {
  for (int i = 0; i < FH_CKKS_EXT_SLOTS; ++i)
    if (c->ext[i] && c->ext_free[i]) c->ext_free[i](c->ext[i]);
  fh_free(c);
}

void fh_ckks_context_release(fh_ckks_context *c) {
  if (c == NULL) return;
  /* under the registry lock so a concurrent lookup never revives a
   * context whose count reached zero */
  pthread_mutex_lock(&registry_lock);
  bool last = fh_rc_release(&c->rc);
  if (last) {
    for (reg_entry **pe = &registry; *pe; pe = &(*pe)->next)
      if ((*pe)->ctx == c) {
        reg_entry *dead = *pe;
        *pe = dead->next;
        fh_free(dead);
        break;
      }
  }
  pthread_mutex_unlock(&registry_lock);
  if (last) context_destroy(c);
}

fh_status fh_ckks_context_lookup(const char *id, fh_ckks_context **out) {
  pthread_mutex_lock(&registry_lock);
  fh_ckks_context *c = id ? registry_find_locked(id) : NULL;
  if (c) fh_ckks_context_retain(c);
  pthread_mutex_unlock(&registry_lock);
  if (c == NULL)
    return fh_error_set(FH_ERR_VALUE,
                        "unknown context_id '%.80s': no live CKKS context has this id (create it first, e.g. with "
                        "fh.CkksContext, or pass context=)",
                        id ? id : "(null)");
  *out = c;
  return FH_OK;
}

/* ---- ids ------------------------------------------------------------------ */
static void put_u32(unsigned char **p, uint32_t v) {
  for (int i = 0; i < 4; ++i) *(*p)++ = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char **p, uint64_t v) {
  for (int i = 0; i < 8; ++i) *(*p)++ = (unsigned char)(v >> (8 * i));
}

static bool context_is_default(const fh_ckks_context *c) {
  return c->galois_generator == 5 && c->max_level == c->num_q - 2 && c->key_digits == FH_DIGITS_P_COUNT;
}

static fh_status compute_id(fh_ckks_context *c) {
  static const char tag1[] = "fhelium.ckks_context.v1\n", tag2[] = "fhelium.ckks_context.v2\n";
  bool v2 = !context_is_default(c);
  const char *tag = v2 ? tag2 : tag1;
  unsigned char buf[sizeof tag1 + 4 + 8 + 4 + 4 + 8 * FH_CKKS_MAX_PRIMES + 12];
  unsigned char *p = buf;
  memcpy(p, tag, sizeof tag1 - 1);
  p += sizeof tag1 - 1;
  put_u32(&p, (uint32_t)c->log_n);
  uint64_t scale_bits = 0;
  memcpy(&scale_bits, &c->default_scale, 8);
  put_u64(&p, scale_bits);
  put_u32(&p, (uint32_t)c->num_q);
  for (int i = 0; i < c->num_q; ++i) put_u64(&p, c->primes[i]);
  put_u32(&p, (uint32_t)c->num_p);
  for (int i = 0; i < c->num_p; ++i) put_u64(&p, c->primes[c->num_q + i]);
  if (v2) {
    put_u32(&p, (uint32_t)c->galois_generator);
    put_u32(&p, (uint32_t)c->max_level);
    put_u32(&p, (uint32_t)c->key_digits);
  }
  if (sodium_init() < 0) return fh_error_set(FH_ERR_GENERIC, "libsodium failed to initialise");
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, buf, (unsigned long long)(p - buf));
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < (int)sizeof h; ++i) {
    c->id[2 * i] = hex[h[i] >> 4];
    c->id[2 * i + 1] = hex[h[i] & 15];
  }
  c->id[FH_CKKS_CONTEXT_ID_LEN] = '\0';
  return FH_OK;
}

/* ---- creation ----------------------------------------------------------- */
static fh_status check_prime(const char *field, int i, uint64_t q, int64_t n) {
  uint64_t m = 2 * (uint64_t)n;
  if (q < 2 || q >= FH_CKKS_PRIME_BOUND)
    return fh_error_set(FH_ERR_VALUE, "%s[%d] = %llu is outside [2, 2^62)", field, i + 1, (unsigned long long)q);
  if (q % m != 1)
    return fh_error_set(FH_ERR_VALUE, "%s[%d] = %llu is not NTT-friendly: q mod 2N = %llu, expected 1 (N = %lld)",
                        field, i + 1, (unsigned long long)q, (unsigned long long)(q % m), (long long)n);
  if (!fh_is_prime_u64(q))
    return fh_error_set(FH_ERR_VALUE, "%s[%d] = %llu is not prime", field, i + 1, (unsigned long long)q);
  return FH_OK;
}

static fh_status context_build(const fh_ckks_context_spec *s, const char *preset, fh_ckks_context **out) {
  if (s == NULL) return fh_error_set(FH_ERR_VALUE, "CKKS context: no parameters");
  int64_t n = s->ring_degree;
  if (n < 2 || n > ((int64_t)1 << FH_CKKS_MAX_LOG_N) || (n & (n - 1)) != 0)
    return fh_error_set(FH_ERR_VALUE, "ring_degree must be a power of two in [2, 2^%d], got %lld", FH_CKKS_MAX_LOG_N,
                        (long long)n);
  if (!(s->default_scale > 0) || !isfinite(s->default_scale))
    return fh_error_set(FH_ERR_VALUE, "default_scale must be positive and finite, got %.17g", s->default_scale);
  if (s->num_q < 2)
    return fh_error_set(FH_ERR_VALUE,
                        "q_primes needs at least 2 primes (scale primes followed by the base prime), got %d",
                        s->num_q);
  if (s->num_p < 1) return fh_error_set(FH_ERR_VALUE, "p_primes needs at least 1 prime, got %d", s->num_p);
  if (s->num_q + s->num_p > FH_CKKS_MAX_PRIMES)
    return fh_error_set(FH_ERR_VALUE, "at most %d primes in all (q_primes and p_primes), got %d", FH_CKKS_MAX_PRIMES,
                        s->num_q + s->num_p);
  if (s->q_primes == NULL || s->p_primes == NULL) return fh_error_set(FH_ERR_VALUE, "CKKS context: missing primes");
  int32_t gen = s->galois_generator ? s->galois_generator : 5;
  if (gen != 5 && gen != 3)
    return fh_error_set(FH_ERR_VALUE, "galois_generator must be 5 or 3 (the slot order's generator), got %d",
                        s->galois_generator);
  int32_t digits = s->key_digits ? s->key_digits : FH_DIGITS_P_COUNT;
  if (digits != FH_DIGITS_P_COUNT && digits != FH_DIGITS_BELOW_P)
    return fh_error_set(FH_ERR_VALUE, "key_digits must be \"p_count\" or \"below_p\", got %d", s->key_digits);
  for (int i = 0; i < s->num_q; ++i) {
    fh_status st = check_prime("q_primes", i, s->q_primes[i], n);
    if (st) return st;
  }
  for (int i = 0; i < s->num_p; ++i) {
    fh_status st = check_prime("p_primes", i, s->p_primes[i], n);
    if (st) return st;
  }
  uint64_t all[FH_CKKS_MAX_PRIMES];
  memcpy(all, s->q_primes, sizeof(uint64_t) * (size_t)s->num_q);
  memcpy(all + s->num_q, s->p_primes, sizeof(uint64_t) * (size_t)s->num_p);
  int total = s->num_q + s->num_p;
  for (int i = 0; i < total; ++i)
    for (int j = 0; j < i; ++j)
      if (all[i] == all[j])
        return fh_error_set(FH_ERR_VALUE, "%s[%d] = %llu repeats %s[%d]; primes must be distinct",
                            i < s->num_q ? "q_primes" : "p_primes", i < s->num_q ? i + 1 : i - s->num_q + 1,
                            (unsigned long long)all[i], j < s->num_q ? "q_primes" : "p_primes",
                            j < s->num_q ? j + 1 : j - s->num_q + 1);
  int32_t bits = product_bits(all, total);
  int32_t budget = fh_ckks_security_budget_bits(n);
  if (s->enforce_security_budget) {
    if (budget == 0)
      return fh_error_set(FH_ERR_VALUE,
                          "no 128-bit security budget is tabulated for ring_degree %lld (1024 .. 131072 are); pass "
                          "enforce_security_budget=false for insecure test parameters",
                          (long long)n);
    if (bits > budget)
      return fh_error_set(FH_ERR_VALUE,
                          "log2(QP) = %d bits exceeds the 128-bit security budget of %d bits for ring_degree %lld",
                          bits, budget, (long long)n);
  }
  fh_ckks_context *c = fh_calloc(1, sizeof *c);
  if (c == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory creating a CKKS context");
  fh_rc_init(&c->rc);
  c->log_n = __builtin_ctzll((unsigned long long)n);
  c->ring_degree = n;
  c->num_slots = n / 2;
  c->default_scale = s->default_scale;
  c->num_q = s->num_q;
  c->num_p = s->num_p;
  c->num_primes = total;
  c->max_level = s->all_q_levels ? s->num_q - 1 : s->num_q - 2;
  c->galois_generator = gen;
  c->key_digits = digits;
  memcpy(c->primes, all, sizeof(uint64_t) * (size_t)total);
  split_digits(c);
  c->modulus_bits = bits;
  c->security_budget_bits = budget;
  snprintf(c->preset, sizeof c->preset, "%s", preset ? preset : "");
  fh_status st = compute_id(c);
  if (st) {
    fh_free(c);
    return st;
  }
  /* intern */
  pthread_mutex_lock(&registry_lock);
  fh_ckks_context *live = registry_find_locked(c->id);
  if (live) {
    fh_ckks_context_retain(live);
    pthread_mutex_unlock(&registry_lock);
    fh_free(c);
    *out = live;
    return FH_OK;
  }
  reg_entry *e = fh_malloc(sizeof *e);
  if (e == NULL) {
    pthread_mutex_unlock(&registry_lock);
    fh_free(c);
    return fh_error_set(FH_ERR_MEMORY, "out of memory registering a CKKS context");
  }
  e->ctx = c;
  e->next = registry;
  registry = e;
  pthread_mutex_unlock(&registry_lock);
  *out = c;
  return FH_OK;
}

fh_status fh_ckks_context_new(const fh_ckks_context_spec *spec, fh_ckks_context **out) {
  return context_build(spec, NULL, out);
}

fh_status fh_ckks_context_prime_ids(const fh_ckks_context *c, int32_t level, fh_modulus_basis basis, int32_t *ids,
                                    int32_t *n) {
  if (basis != FH_BASIS_Q && basis != FH_BASIS_QP)
    return fh_error_set(FH_ERR_VALUE, "modulus_basis must be \"Q\" or \"QP\"");
  if (level < 0 || level > c->max_level)
    return fh_error_set(FH_ERR_STATE, "level %d is outside [0, %d] (max_level of context %.8s)", level, c->max_level,
                        c->id);
  int32_t k = 0;
  for (int32_t i = level; i < c->num_q; ++i) ids[k++] = i;
  if (basis == FH_BASIS_QP)
    for (int32_t i = 0; i < c->num_p; ++i) ids[k++] = c->num_q + i;
  *n = k;
  return FH_OK;
}

fh_status fh_ckks_context_ext(fh_ckks_context *c, int slot, fh_ckks_ext_build_fn build, fh_ckks_ext_free_fn free_fn,
                              void *arg, void **out) {
  if (slot < 0 || slot >= FH_CKKS_EXT_SLOTS)
    return fh_error_set(FH_ERR_VALUE, "context extension slot %d outside [0, %d)", slot, FH_CKKS_EXT_SLOTS);
  pthread_once(&ext_once, ext_lock_init);
  pthread_mutex_lock(&ext_lock);
  void *p = c->ext[slot];
  fh_status st = FH_OK;
  if (p == NULL && build != NULL) {
    st = build(c, arg, &p);
    if (st == FH_OK) {
      c->ext[slot] = p;
      c->ext_free[slot] = free_fn;
    } else {
      p = NULL;
    }
  }
  pthread_mutex_unlock(&ext_lock);
  if (st != FH_OK) return st;
  if (p == NULL) return fh_error_set(FH_ERR_VALUE, "context extension slot %d is empty and no builder was given", slot);
  *out = p;
  return FH_OK;
}

/* ---- presets -------------------------------------------------------------- */
static const fh_ckks_preset presets[] = {
    {"slots8192-scale30-levels9-int64", "slots8192_scale30_levels9_int64", 14, 30, 9, 1, FH_PRESET_LEVELS, 10, 8, 5, 64, NULL},
    {"slots8192-scale40-levels7-int64", "slots8192_scale40_levels7_int64", 14, 40, 7, 1, FH_PRESET_LEVELS, 8, 6, 5, 64, NULL},
    {"slots8192-scale50-levels5-int64", "slots8192_scale50_levels5_int64", 14, 50, 5, 1, FH_PRESET_LEVELS, 6, 4, 5, 64, NULL},
    {"slots16384-scale30-levels21-int64", "slots16384_scale30_levels21_int64", 15, 30, 21, 2, FH_PRESET_LEVELS, 22, 20, 5, 64, NULL},
    {"slots16384-scale40-levels16-int64", "slots16384_scale40_levels16_int64", 15, 40, 16, 2, FH_PRESET_LEVELS, 17, 15, 5, 64, NULL},
    {"slots16384-scale50-levels12-int64", "slots16384_scale50_levels12_int64", 15, 50, 12, 2, FH_PRESET_LEVELS, 13, 11, 5, 64, NULL},
    {"slots32768-scale30-levels45-int64", "slots32768_scale30_levels45_int64", 16, 30, 45, 4, FH_PRESET_LEVELS, 46, 44, 5, 64, NULL},
    {"slots32768-scale40-levels34-int64", "slots32768_scale40_levels34_int64", 16, 40, 34, 4, FH_PRESET_LEVELS, 35, 33, 5, 64, NULL},
    {"slots32768-scale50-levels27-int64", "slots32768_scale50_levels27_int64", 16, 50, 27, 4, FH_PRESET_LEVELS, 28, 26, 5, 64, NULL},
    {"slots65536-scale30-levels95-int64", "slots65536_scale30_levels95_int64", 17, 30, 95, 6, FH_PRESET_LEVELS, 96, 94, 5, 64, NULL},
    {"slots65536-scale40-levels72-int64", "slots65536_scale40_levels72_int64", 17, 40, 72, 6, FH_PRESET_LEVELS, 73, 71, 5, 64, NULL},
    {"slots65536-scale50-levels58-int64", "slots65536_scale50_levels58_int64", 17, 50, 58, 6, FH_PRESET_LEVELS, 59, 57, 5, 64, NULL},
    FH_PRESETS_030,
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

int fh_ckks_preset_count(void) { return NPRESETS; }
const fh_ckks_preset *fh_ckks_preset_at(int i) { return i >= 0 && i < NPRESETS ? &presets[i] : NULL; }
const fh_ckks_preset *fh_ckks_preset_find(const char *name) {
  if (name == NULL) return NULL;
  for (int i = 0; i < NPRESETS; ++i)
    if (strcmp(name, presets[i].name) == 0 || strcmp(name, presets[i].member) == 0) return &presets[i];
  return NULL;
}

/* The rule documented in the header. */
static fh_status preset_primes(const fh_ckks_preset *p, uint64_t *q, uint64_t *pp) {
  uint64_t m = (uint64_t)2 << p->log_n;
  /* 60-bit primes, descending */
  uint64_t top = ((uint64_t)1 << 60) + 1;
  int found = 0, need = 1 + p->num_p_primes;
  uint64_t big[16] = {0};
  for (uint64_t k = 1; found < need; ++k) {
    if (k * m >= ((uint64_t)1 << 59)) return fh_error_set(FH_ERR_GENERIC, "preset %s: ran out of 60-bit primes", p->name);
    uint64_t c = top - k * m;
    if (fh_is_prime_u64(c)) big[found++] = c;
  }
  /* scale primes alternating above / below 2^b */
  uint64_t center = ((uint64_t)1 << p->scale_bits) + 1;
  uint64_t up = 0, down = 1; /* next k on each side */
  for (int i = 0; i < p->num_scale_primes; ++i) {
    bool above = (i % 2) == 0;
    for (;;) {
      uint64_t c;
      if (above) {
        c = center + up * m;
        ++up;
      } else {
        if (down * m >= center - 2) return fh_error_set(FH_ERR_GENERIC, "preset %s: ran out of scale primes", p->name);
        c = center - down * m;
        ++down;
      }
      if (fh_is_prime_u64(c)) {
        q[i] = c;
        break;
      }
    }
  }
  q[p->num_scale_primes] = big[0];
  for (int i = 0; i < p->num_p_primes; ++i) pp[i] = big[1 + i];
  return FH_OK;
}

/* Presets are built once per process and cached (their contexts live
 * until exit, so repeated lookups are cheap and ids are stable). */
static fh_ckks_context *preset_cache[NPRESETS];
static pthread_mutex_t preset_lock = PTHREAD_MUTEX_INITIALIZER;

/* Drop the cache's references when the engine is unloaded (the Lua module
 * is dlclose'd by lua_close) or the process exits, so leak checkers see every
 * context released; contexts still referenced elsewhere stay alive. */
__attribute__((destructor)) static void preset_cache_clear(void) {
  for (int i = 0; i < NPRESETS; ++i) {
    fh_ckks_context *c = preset_cache[i];
    preset_cache[i] = NULL;
    fh_ckks_context_release(c);
  }
}

fh_status fh_ckks_context_from_preset(const char *name, fh_ckks_context **out) {
  const fh_ckks_preset *p = fh_ckks_preset_find(name);
  if (p == NULL) {
    char list[2048];
    size_t l = 0;
    for (int i = 0; i < NPRESETS && l < sizeof list; ++i)
      l += (size_t)snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", presets[i].member);
    return fh_error_set(FH_ERR_VALUE, "unknown preset '%.80s' (expected one of %s)", name ? name : "(null)", list);
  }
  int idx = (int)(p - presets);
  pthread_mutex_lock(&preset_lock);
  fh_status st = FH_OK;
  if (preset_cache[idx] == NULL) {
    if (p->family == FH_PRESET_FHELIUM_030) {
      fh_ckks_context_spec s = {(int64_t)1 << p->log_n, ldexp(1.0, p->scale_bits), p->num_q, p->num_p_primes,
                                p->primes, p->primes + p->num_q, true, p->galois_generator, true, FH_DIGITS_BELOW_P};
      st = context_build(&s, p->name, &preset_cache[idx]);
    } else {
      uint64_t q[FH_CKKS_MAX_PRIMES], pp[16];
      st = preset_primes(p, q, pp);
      if (st == FH_OK) {
        fh_ckks_context_spec s = {(int64_t)1 << p->log_n, ldexp(1.0, p->scale_bits), p->num_scale_primes + 1,
                                  p->num_p_primes, q, pp, true, 0, false, 0};
        st = context_build(&s, p->name, &preset_cache[idx]);
      }
    }
  }
  if (st == FH_OK) fh_ckks_context_retain(preset_cache[idx]);
  pthread_mutex_unlock(&preset_lock);
  if (st != FH_OK) return st;
  *out = preset_cache[idx];
  return FH_OK;
}

const fh_ckks_preset *fh_ckks_preset_of_context(const fh_ckks_context *c) {
  if (c == NULL) return NULL;
  for (int i = 0; i < NPRESETS; ++i) {
    if (((int64_t)1 << presets[i].log_n) != c->ring_degree) continue;
    fh_ckks_context *pc = NULL;
    if (fh_ckks_context_from_preset(presets[i].name, &pc) != FH_OK) {
      fh_error_clear();
      continue;
    }
    bool same = pc == c;
    fh_ckks_context_release(pc);
    if (same) return &presets[i];
  }
  return NULL;
}
