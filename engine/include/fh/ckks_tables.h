/* CKKS constant tables of one prime chain on one device: per-prime
 * constants, NTT twiddles, encoding tables, Garner (CRT) constants and the
 * fast-base-conversion constants of every key-switching and rescaling step.
 * Built once per (context, device) and cached by the engine; kernels read
 * them through the device addresses below.
 *
 * Prime chain (fh/ckks_context.h). primes[0..nq-1] are the Q primes
 * (scale primes, then the base prime; level l keeps the suffix
 * q_l..q_{nq-1}, and rescaling at level l drops q_l),
 * primes[nq..nq+np-1] the P (special) primes. Every prime is an odd prime
 * q = 1 mod 2N with q < 2^62.
 *
 * Hybrid key switching. The Q primes are split into dnum digits of
 * consecutive primes, digit j holding q_{digit_start[j]} ..
 * q_{digit_start[j+1] - 1} (the context's split, fh/ckks_context.h; by
 * default np primes per digit, dnum = ceil(nq / np)). At level l only the
 * digits' active primes (those >= l) count.
 *
 * Slot order. rot_group[j] is the exponent e_j of slot j, z_j =
 * m(zeta^(e_j)): 5^j mod 2N for generator 5, 3^-j mod 2N for generator 3
 * (fh/ckks_context.h). The special FFT needs exponents = 1 mod 4; a slot with
 * e_j = 3 mod 4 is evaluated at 2N - e_j (= h^j for h = -3^-1 mod 2N, a
 * generator of the exponents = 1 mod 4) and conjugated (m has real
 * coefficients, so m(zeta^-e) is the conjugate of m(zeta^e)): the encode and
 * decode kernels, CPU and CUDA, do both through fh_ckks_slot_exponent.
 *
 * Ownership: fh_ckks_tables_new returns a new reference (refcounted;
 * fh_ckks_tables_release). The storage stays alive while any tape or
 * launch that uses it holds the storage (kernels list it in their uses). */
#ifndef FH_CKKS_TABLES_H
#define FH_CKKS_TABLES_H

#include "fh/ckks_kernels.h"
#include "fh/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- primes (primality: fh_is_prime_u64, fh/ckks_context.h) --------------- */
/* The `count` largest primes q < 2^bits with q = 1 mod 2^(log_n+1), in
 * descending order, skipping any in exclude[0..nexclude-1]. 20 <= bits <= 61.
 * ValueError when fewer exist. */
fh_status fh_ckks_find_primes(int bits, int log_n, int count, const uint64_t *exclude, int nexclude, uint64_t *out);
/* The smallest primitive 2N-th root of unity mod q (q = 1 mod 2N prime).
 * ValueError when q is not such a prime. */
fh_status fh_ckks_min_root(uint64_t q, int log_n, uint64_t *out);

/* FHElium 0.30's NTT evaluation order for the prime q (N = 2^log_n), as
 * derived from its value files and proved with the fixture's secret key
 * (spec/fhelium030_spec.lua): FHElium's forward transform uses the root
 * psi_F = c^((q-1)/2N) for the smallest c >= 2 with psi_F^N = -1, and its
 * slot i holds a(psi_F^(2 bitrev(i) + 1)); ours (fh/ckks_kernels.h) holds
 * a(psi^(2 bitrev(j) + 1)) for our root psi (fh_ckks_min_root). perm[i]
 * (N entries) receives j, our slot at FHElium's slot i's point
 * (psi_F = psi^t for an odd t, j = bitrev((t (2 bitrev(i) + 1) mod 2N - 1) / 2)).
 * ValueError when q is not a prime = 1 mod 2N below 2^62. */
fh_status fh_ckks_fhelium_ntt_order(uint64_t q, int log_n, uint64_t psi, uint32_t *perm);

/* ---- tables ----------------------------------------------------------------- */
typedef struct fh_ckks_tables {
  fh_refcount rc;
  int32_t log_n;
  int64_t n;
  int32_t nq, np;
  int32_t dnum;                                /* key-switching digits (0 when np == 0) */
  int32_t digit_start[FH_CKKS_MAX_PRIMES + 1]; /* digit j: Q rows [digit_start[j], digit_start[j+1]) */
  int32_t galois_generator;                    /* 5 or 3: the slot order of rot_group */
  uint64_t primes[FH_CKKS_MAX_PRIMES];
  fh_ckks_prime host[FH_CKKS_MAX_PRIMES]; /* host copy of the per-prime constants */
  fh_device device;
  fh_tensor *data; /* uint64 tensor on `device` holding every table (one reference) */
  /* device addresses inside data */
  const fh_ckks_prime *primes_dev;
  const uint64_t *ntt;       /* [nprimes][4][N] */
  const uint64_t *rot_group; /* [N/2] slot exponents (see above) */
  const double *ksi;         /* [2N+1][2] */
  /* Garner table [nq][nq] over the reversed chain r_k = q_{nq-1-k}:
   * [i][m] = prod_{k<m} r_k mod r_i (m < i), [i][i] = (prod_{k<i} r_k)^-1 mod r_i */
  const uint64_t *garner;
  /* fast base conversion constants (fh_ckks_bconv_args.consts):
   * modup[level * dnum + digit]: the digit's active primes -> every other active Q prime (in chain
   * order), then all P primes; moddown[level]: P primes -> active Q primes. NULL where the digit
   * has no active prime. */
  const uint64_t **modup;
  const uint64_t **moddown;
  /* rescale[level] (level < nq - 1): q_level -> the Q primes above it (the NTT-domain rescale's
   * centred lift as a conversion from one prime, for FH_K_CKKS_MODDOWN) */
  const uint64_t **rescale;
  /* host-side per-level constants, [level][i] for the Q prime rows i > level:
   * rescale at `level` (dropping q_level): q_level^-1 mod q_i;
   * mod-down: P^-1 mod q_i (any level; the mod-down rounds by a centered conversion); P mod q_i. */
  uint64_t *rescale_inv;  /* [nq][nq] (level-major) */
  uint64_t *p_inv;        /* [nq] */
  uint64_t *p_mod;        /* [nq]: P mod q_i (a linear transform's P x terms, FH_K_CKKS_LT) */
  /* the key switch's conversion sources' constants, [level][row][2] (nq x nq pairs; NULL
   * without P primes): level l's active Q row r (prime l + r) has its digit's (shat_inv,
   * Shoup companion) pair at sources + 2 (l nq + r), the pair of the mod-up's constants
   * (modup above) that scales it (fh_ckks_ntt_args.scale) */
  const uint64_t *sources;
  /* 1: a key switch's INTTs write its conversion sources scaled (fh_ckks_ntt_args.scale), so
   * that CUDA's passes of their own that scale them do not run: FHELIUM_CUDA_FOLD=1 at their
   * creation (not yet the default: these kernels have not run on a GPU), tables with P
   * primes, on CUDA with N > 2^FH_CKKS_CUDA_ROW_LOG; the CPU takes it at every size (the
   * same words: the CPU specs run the evaluator's folded calls) */
  int32_t fold_sources;
} fh_ckks_tables;

/* Build the tables for N = 2^log_n and the chain primes[0..nq+np-1] on
 * `dev`. Validates the primes (distinct, prime, = 1 mod 2N, < 2^62) and
 * sizes (ValueError). New reference. */
fh_status fh_ckks_tables_new(int log_n, const uint64_t *primes, int nq, int np, fh_device dev, fh_ckks_tables **out);
/* The same with the slot-order generator (5 or 3) and the digit split
 * digit_start[0..ndigits] (0 = digit_start[0] < ... < digit_start[ndigits]
 * = nq); generator 0 and ndigits 0 mean the defaults (5, np primes per
 * digit). ValueError for anything else. */
fh_status fh_ckks_tables_new_layout(int log_n, const uint64_t *primes, int nq, int np, int galois_generator,
                                    int ndigits, const int32_t *digit_start, fh_device dev, fh_ckks_tables **out);
/* The first digit with a Q row at or above `level` (the digits of a level
 * are j0 .. dnum-1). */
static inline int fh_ckks_tables_first_digit(const fh_ckks_tables *t, int level) {
  int j = 0;
  while (j + 1 < t->dnum && t->digit_start[j + 1] <= level) ++j;
  return j;
}
void fh_ckks_tables_retain(fh_ckks_tables *t);
void fh_ckks_tables_release(fh_ckks_tables *t);
/* The storage holding the tables (borrowed), for launch `uses`. */
/* Base-conversion constants (fh_ckks_bconv_args.consts) from the prime ids
 * src[0..nsrc) to dst[0..ndst) into w (host memory, fh_ckks_bconv_words
 * words): (shat_inv_i, Shoup companion) per source, then the ndst x nsrc
 * matrix Shat_i mod t_j, j major. */
static inline size_t fh_ckks_bconv_words(int nsrc, int ndst) {
  return 2 * (size_t)nsrc + (size_t)nsrc * (size_t)ndst;
}
void fh_ckks_bconv_constants(const fh_ckks_tables *t, const int *src, int nsrc, const int *dst, int ndst,
                             uint64_t *w);

static inline fh_storage *fh_ckks_tables_storage(const fh_ckks_tables *t) { return t->data->storage; }
/* Shoup companion of constant w modulo prime index p. */
static inline uint64_t fh_ckks_tables_shoup(const fh_ckks_tables *t, int p, uint64_t w) {
  return fh_shoup_precompute(w, t->primes[p]);
}

#ifdef __cplusplus
}
#endif
#endif
