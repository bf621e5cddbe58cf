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
 * Distributions.
 *   uniform mod q: rejection sampling on ceil(log2 q)-bit words (no modulo bias);
 *   ternary secret: each coefficient independently uniform in {-1, 0, 1}
 *     (the distribution of the homomorphic encryption standard's tables),
 *     by rejection sampling 2-bit values;
 *   error: centred discrete Gaussian with sigma = 3.2, support bounded at
 *     |x| <= 19 (6 sigma, as SEAL and the HE standard's estimates), sampled by
 *     inversion with a 64-bit cumulative distribution table computed in long
 *     double at first use (a constant-time scan of the whole table).
 *
 * Ownership: fh_ckks_rng_new returns an owned generator (fh_ckks_rng_free).
 * A generator is not thread-safe. */
#ifndef FH_CKKS_RANDOM_H
#define FH_CKKS_RANDOM_H

#include "fh/core.h"

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

#ifdef __cplusplus
}
#endif
#endif
