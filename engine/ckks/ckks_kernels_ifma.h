/* The AVX-512 kernels of the CPU (IFMA, F, DQ; ckks_kernels_ifma.c), internal to
 * the ckks layer. fh__ckks_ntt_row_ifma transforms one row like
 * ckks_kernels_cpu.c's scalar rows (forward: standard residues -> Montgomery
 * evaluations; inverse: back; `a` may equal `in`; 52-bit products for primes
 * below 2^50, emulated 64-bit ones above) and returns true, or returns false
 * without touching anything when it does not apply (N < 16, or a build
 * without IFMA). The caller checks fh_cpu_simd()
 * (fh/core.h) first: the CPU must support the instructions. */
#ifndef FH_CKKS_KERNELS_IFMA_H
#define FH_CKKS_KERNELS_IFMA_H

#include "fh/ckks_kernels.h"

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8))
#define FH_CKKS_HAVE_IFMA 1
#else
#define FH_CKKS_HAVE_IFMA 0
#endif

/* The key-switching inner product of one output row (fh_ckks_ks_args): o[j] =
 * sum_d dig[d][j] key[d][j] R^-1 mod q over nd digits, as the scalar kernel;
 * false (nothing written) when it does not apply (q >= 2^50, N < 8, no IFMA). */
bool fh__ckks_ks_inner_row_ifma(uint64_t *o, const uint64_t *const *dig, const uint64_t *const *key, int nd, int log_n,
                                const fh_ckks_prime *p);
/* The base conversion of one block of n words from one source prime s0 (Shat = 1) into the
 * target prime tq: o[j] = x[j] mod tq, minus st (S mod tq) where the centred lift of x[j] is
 * negative (center), as the scalar kernel (52-bit products when tq < 2^50 and s0 < 2^52,
 * emulated 64-bit ones otherwise); false (nothing written) in a build without IFMA. */
bool fh__ckks_bconv1_row_ifma(uint64_t *o, const uint64_t *x, int64_t n, uint64_t s0, bool center, uint64_t st,
                              uint64_t tq);
bool fh__ckks_ntt_row_ifma(uint64_t *a, const uint64_t *in, int log_n, const fh_ckks_prime *p, const uint64_t *tw,
                           bool fwd);

#endif
