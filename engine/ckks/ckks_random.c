/* CKKS randomness (fh/ckks_random.h): ChaCha20-IETF keystream from libsodium. */
#include <math.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "fh/ckks_random.h"

#define RNG_BUF 4096 /* bytes of keystream generated at a time (64 blocks) */

struct fh_ckks_rng {
  unsigned char key[crypto_stream_chacha20_ietf_KEYBYTES];
  unsigned char nonce[crypto_stream_chacha20_ietf_NONCEBYTES];
  uint32_t counter; /* next block */
  bool seeded;
  size_t pos;
  unsigned char buf[RNG_BUF];
};

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_ok;
static void sodium_start(void) { sodium_ok = sodium_init() >= 0; }

static void refill(fh_ckks_rng *r) {
  static const unsigned char zeros[RNG_BUF];
  const uint32_t blocks = RNG_BUF / 64;
  if (r->counter > UINT32_MAX - blocks) { /* 256 GiB per nonce: move to the next nonce */
    sodium_increment(r->nonce, sizeof r->nonce);
    r->counter = 0;
  }
  crypto_stream_chacha20_ietf_xor_ic(r->buf, zeros, RNG_BUF, r->nonce, r->counter, r->key);
  r->counter += blocks;
  r->pos = 0;
}

fh_status fh_ckks_rng_new(const uint64_t *seed, fh_ckks_rng **out) {
  pthread_once(&sodium_once, sodium_start);
  if (!sodium_ok) return fh_error_set(FH_ERR_GENERIC, "libsodium could not be initialised (sodium_init failed)");
  fh_ckks_rng *r = sodium_malloc(sizeof *r);
  if (r == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory creating a random generator");
  memset(r, 0, sizeof *r);
  if (seed != NULL) {
    static const char domain[] = "fhelium.ckks.seed.v1";
    unsigned char msg[sizeof domain - 1 + 8];
    memcpy(msg, domain, sizeof domain - 1);
    for (int i = 0; i < 8; ++i) msg[sizeof domain - 1 + i] = (unsigned char)(*seed >> (8 * i));
    crypto_generichash(r->key, sizeof r->key, msg, sizeof msg, NULL, 0);
    r->seeded = true;
  } else {
    randombytes_buf(r->key, sizeof r->key);
  }
  refill(r);
  *out = r;
  return FH_OK;
}

void fh_ckks_rng_free(fh_ckks_rng *r) {
  if (r != NULL) sodium_free(r); /* zeroes the key */
}

bool fh_ckks_rng_is_seeded(const fh_ckks_rng *r) { return r->seeded; }

/* Consumed keystream stays in the buffer until the next refill overwrites
 * it (fh_ckks_rng_free zeroes the whole record). */
void fh_ckks_rng_bytes(fh_ckks_rng *r, void *buf, size_t n) {
  unsigned char *p = buf;
  while (n > 0) {
    if (r->pos == RNG_BUF) refill(r);
    size_t take = RNG_BUF - r->pos < n ? RNG_BUF - r->pos : n;
    memcpy(p, r->buf + r->pos, take);
    r->pos += take;
    p += take;
    n -= take;
  }
}

/* little-endian word from the keystream (RNG_BUF is a multiple of 8 and
 * pos stays 8-aligned when only words are drawn) */
uint64_t fh_ckks_rng_u64(fh_ckks_rng *r) {
  if (r->pos + 8 > RNG_BUF) {
    unsigned char b[8];
    fh_ckks_rng_bytes(r, b, 8);
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x |= (uint64_t)b[i] << (8 * i);
    return x;
  }
  const unsigned char *b = r->buf + r->pos;
  r->pos += 8;
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i) x |= (uint64_t)b[i] << (8 * i);
  return x;
}

void fh_ckks_sample_uniform(fh_ckks_rng *r, uint64_t q, uint64_t *out, size_t n) {
  int bits = 64 - __builtin_clzll(q - 1);
  uint64_t mask = bits >= 64 ? ~0ULL : ((1ULL << bits) - 1);
  for (size_t i = 0; i < n; ++i) {
    uint64_t x;
    do x = fh_ckks_rng_u64(r) & mask;
    while (x >= q);
    out[i] = x;
  }
}

void fh_ckks_sample_ternary(fh_ckks_rng *r, int64_t *out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = fh_ckks_ternary_of(fh_ckks_rng_u64(r));
}

/* cdt[k] = floor(2^64 * P(|x| <= k)) for k < BOUND; P(|x| <= BOUND) = 1. */
static uint64_t cdt[FH_CKKS_GAUSS_BOUND];
static pthread_once_t cdt_once = PTHREAD_ONCE_INIT;
static void cdt_build(void) {
  long double rho[FH_CKKS_GAUSS_BOUND + 1], total = 0;
  const long double s2 = 2.0L * FH_CKKS_SIGMA * FH_CKKS_SIGMA;
  for (int k = 0; k <= FH_CKKS_GAUSS_BOUND; ++k) {
    rho[k] = expl(-(long double)k * k / s2) * (k == 0 ? 1.0L : 2.0L); /* |x| = k has two signs */
    total += rho[k];
  }
  long double acc = 0;
  for (int k = 0; k < FH_CKKS_GAUSS_BOUND; ++k) {
    acc += rho[k] / total;
    cdt[k] = (uint64_t)(acc * 18446744073709551616.0L);
  }
}

const uint64_t *fh_ckks_gaussian_table(void) {
  pthread_once(&cdt_once, cdt_build);
  return cdt;
}

void fh_ckks_sample_gaussian(fh_ckks_rng *r, int64_t *out, size_t n) {
  const uint64_t *t = fh_ckks_gaussian_table();
  uint64_t signs = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i % 64 == 0) signs = fh_ckks_rng_u64(r); /* one sign bit per sample */
    uint64_t u = fh_ckks_rng_u64(r);
    out[i] = fh_ckks_gaussian_of(u, signs, (int)(i % 64), t);
  }
}

/* ---- reserved runs -------------------------------------------------------------------------- */
void fh_ckks_wipe(void *p, size_t n) { sodium_memzero(p, n); }

static uint32_t le32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

void fh_ckks_rng_reserve(fh_ckks_rng *r, uint64_t nwords, fh_ckks_stream_pos *p) {
  const uint64_t blocks = RNG_BUF / 64;
  /* usable bytes of a nonce: blocks [0, 2^32 - 64) (refill moves on before the last 64) */
  const uint64_t limit = ((uint64_t)UINT32_MAX + 1 - blocks) * 64;
  /* the next unread byte (the buffer holds blocks [counter - 64, counter)), rounded up to a word */
  uint64_t at = ((uint64_t)r->counter - blocks) * 64 + ((r->pos + 7) & ~(size_t)7);
  uint64_t end = at + 8 * nwords;
  if (end > limit) {
    sodium_increment(r->nonce, sizeof r->nonce);
    at = 0;
    end = 8 * nwords;
  }
  for (int i = 0; i < 8; ++i) p->key[i] = le32(r->key + 4 * i);
  for (int i = 0; i < 3; ++i) p->nonce[i] = le32(r->nonce + 4 * i);
  p->block = (uint32_t)(at / 64);
  p->word = (uint32_t)(at % 64 / 8);
  /* continue after the run: refill from the block holding `end` (the next nonce when that is
   * the first unusable block: then end % 64 is 0) */
  r->counter = (uint32_t)(end / 64);
  refill(r);
  r->pos = (size_t)(end % 64);
}
