/* CKKS randomness: a ChaCha20 keystream (libsodium) and the samplers built
 * on it. Sampling runs on the host at call time (like fh_tensor_rand); the
 * results then travel to the engine's device.
 *
 * Streams. fh_ckks_rng_new(NULL) keys ChaCha20-IETF with 32 bytes from the
 * operating system (randombytes_buf): the secure default. With a seed, the
 * key is BLAKE2b-256("fhelium.ckks.seed.v1" || seed as 8 little-endian
 * bytes): the stream, and so every key, mask and error the engine draws,
 * is a deterministic function of the seed. A seeded stream is FOR TESTS
 * AND REPRODUCIBLE EXPERIMENTS ONLY: anyone who knows or guesses the seed
 * can recompute the secret key. Never use a seed for real data.
 *
 * Distributions. Words are the keystream's consecutive 8-byte little-endian
 * chunks.
 *   uniform mod q: rejection sampling on ceil(log2 q)-bit words (no modulo bias);
 *   ternary (the secret, an encryption's mask): coefficient i from word i alone,
 *     floor(3 w / 2^64) - 1 (fh_ckks_ternary_of): each of -1, 0, 1 with
 *     probability within 2^-64 of 1/3 (the distribution of the homomorphic
 *     encryption standard's tables, to a statistical distance of n 2^-64);
 *   error: centred discrete Gaussian with sigma = 3.2, support bounded at
 *     |x| <= 19 (6 sigma, as SEAL and the HE standard's estimates), sampled by
 *     inversion with a 64-bit cumulative distribution table computed in long
 *     double at first use (a constant-time scan of the whole table): per 64
 *     coefficients one word of sign bits, then one word per coefficient.
 * Both small samplers take a fixed number of words per coefficient, so a run
 * of them can be reserved (fh_ckks_rng_reserve) and computed anywhere, on the
 * host or on a GPU (FH_K_CKKS_SAMPLE), with the same results.
 *
 * Ownership: fh_ckks_rng_new returns an owned generator (fh_ckks_rng_free).
 * A generator is not thread-safe. */
#ifndef FH_CKKS_RANDOM_H
#define FH_CKKS_RANDOM_H

#include "fh/core.h"
#include "fh/modarith.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FH_CKKS_SIGMA 3.2
#define FH_CKKS_GAUSS_BOUND 19

typedef struct fh_ckks_rng fh_ckks_rng;
/* seed NULL: keyed from the OS (secure). */
fh_status fh_ckks_rng_new(const uint64_t *seed, fh_ckks_rng **out);
void fh_ckks_rng_free(fh_ckks_rng *r);
bool fh_ckks_rng_is_seeded(const fh_ckks_rng *r);
void fh_ckks_rng_bytes(fh_ckks_rng *r, void *buf, size_t n);
uint64_t fh_ckks_rng_u64(fh_ckks_rng *r);

void fh_ckks_sample_uniform(fh_ckks_rng *r, uint64_t q, uint64_t *out, size_t n);
void fh_ckks_sample_ternary(fh_ckks_rng *r, int64_t *out, size_t n);
void fh_ckks_sample_gaussian(fh_ckks_rng *r, int64_t *out, size_t n);

/* ---- reserved runs of the keystream ----------------------------------------
 * A run of words: the stream's key and nonce (little-endian 32-bit words, as
 * ChaCha20's state holds them), the ChaCha20-IETF block of its first word and
 * the word's offset (0..7) in that block. Holds the stream key: zero it
 * (sodium_memzero) when done. */
typedef struct fh_ckks_stream_pos {
  uint32_t key[8];
  uint32_t nonce[3];
  uint32_t block, word;
} fh_ckks_stream_pos;
/* The next nwords words of r's stream (from its next unread word; a run that
 * would reach the last 64 blocks of a nonce starts at block 0 of the next
 * nonce, as the generator's own refills do); r continues after them. nwords
 * < 2^34. */
void fh_ckks_rng_reserve(fh_ckks_rng *r, uint64_t nwords, fh_ckks_stream_pos *pos);
/* ChaCha20 block `block` of the stream (key, nonce) as RFC 8439 defines it (the IETF variant:
 * 32-bit block counter, 96-bit nonce; libsodium's crypto_stream_chacha20_ietf): out receives
 * the block's 16 little-endian words (keystream bytes 4 i .. 4 i + 3 in out[i]). Host and device
 * code: the samplers' kernel (FH_K_CKKS_SAMPLE) computes its words with it on both, and the
 * specs compare them with libsodium's stream. */
#define FH_CHACHA_ROTL(x, r) (((x) << (r)) | ((x) >> (32 - (r))))
#define FH_CHACHA_QR(a, b, c, d)                          \
  (a += b, d = FH_CHACHA_ROTL(d ^ a, 16), c += d, b = FH_CHACHA_ROTL(b ^ c, 12), \
   a += b, d = FH_CHACHA_ROTL(d ^ a, 8), c += d, b = FH_CHACHA_ROTL(b ^ c, 7))
FH_HD void fh_chacha20_block(const uint32_t *key, const uint32_t *nonce, uint32_t block, uint32_t *out) {
  const uint32_t s[16] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u, key[0], key[1],   key[2],   key[3],
                          key[4],      key[5],      key[6],      key[7],      block,  nonce[0], nonce[1], nonce[2]};
  uint32_t x[16];
  for (int i = 0; i < 16; ++i) x[i] = s[i];
  for (int i = 0; i < 10; ++i) { /* double rounds: the columns, then the diagonals */
    FH_CHACHA_QR(x[0], x[4], x[8], x[12]);
    FH_CHACHA_QR(x[1], x[5], x[9], x[13]);
    FH_CHACHA_QR(x[2], x[6], x[10], x[14]);
    FH_CHACHA_QR(x[3], x[7], x[11], x[15]);
    FH_CHACHA_QR(x[0], x[5], x[10], x[15]);
    FH_CHACHA_QR(x[1], x[6], x[11], x[12]);
    FH_CHACHA_QR(x[2], x[7], x[8], x[13]);
    FH_CHACHA_QR(x[3], x[4], x[9], x[14]);
  }
  for (int i = 0; i < 16; ++i) out[i] = x[i] + s[i];
}
#undef FH_CHACHA_QR
#undef FH_CHACHA_ROTL
/* Zero n bytes at p in a way the compiler keeps (sodium_memzero): keystream, keys. */
void fh_ckks_wipe(void *p, size_t n);
/* The Gaussian sampler's cumulative table (FH_CKKS_GAUSS_BOUND words, built at
 * first use). */
const uint64_t *fh_ckks_gaussian_table(void);
/* Words the small samplers take for n coefficients. */
FH_HD uint64_t fh_ckks_ternary_words(uint64_t n) { return n; }
FH_HD uint64_t fh_ckks_gaussian_words(uint64_t n) { return n + (n + 63) / 64; }
/* Coefficient i of a ternary run from its word w; of a Gaussian run from its
 * value word u, its sign word (the word of the 64 coefficients i belongs to)
 * and bit i mod 64 of it. Shared by host and device code. */
FH_HD int64_t fh_ckks_ternary_of(uint64_t w) { return (int64_t)fh_mulhi64(w, 3) - 1; }
FH_HD int64_t fh_ckks_gaussian_of(uint64_t u, uint64_t signs, int bit, const uint64_t *cdt) {
  int64_t k = 0;
  for (int j = 0; j < FH_CKKS_GAUSS_BOUND; ++j) k += u >= cdt[j];
  /* |x| = 0 has one sign: the sign bit is used but changes nothing */
  return (signs >> bit) & 1 ? -k : k;
}

#ifdef __cplusplus
}
#endif
#endif
