/* 64-bit modular arithmetic shared by host C and CUDA device code (moduli
 * 2 <= q < 2^62). Every function is a pure inline; CPU and GPU compute the
 * same formulas, so results are bit-identical.
 *
 * Barrett reduction: ratio = floor(2^128 / q) as two words. For x < 2^128,
 * t = floor(x * ratio / 2^128) (computed from the high partial products)
 * satisfies x/q - 3 < t <= x/q, so r = x - t*q lies in [0, 3q) and at most
 * two conditional subtractions make it exact. */
#ifndef FH_MODARITH_H
#define FH_MODARITH_H

#include <stdint.h>

#if defined(__CUDACC__)
#define FH_HD __host__ __device__ __forceinline__
#else
#define FH_HD static inline
#endif

typedef struct fh_modulus {
  uint64_t q;
  uint64_t ratio_lo, ratio_hi; /* floor(2^128 / q) */
} fh_modulus;

FH_HD uint64_t fh_mulhi64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return (uint64_t)(((unsigned __int128)a * b) >> 64);
#endif
}

/* Host-side: ratio = floor(2^128 / q). */
static inline void fh_modulus_init(fh_modulus *m, uint64_t q) {
  unsigned __int128 max = ~(unsigned __int128)0; /* 2^128 - 1 */
  unsigned __int128 r = max / q;
  /* floor((2^128 - 1)/q) == floor(2^128/q) unless q divides 2^128 (q a power
   * of two), where it is one less. */
  if ((q & (q - 1)) == 0) r += 1;
  m->q = q;
  m->ratio_lo = (uint64_t)r;
  m->ratio_hi = (uint64_t)(r >> 64);
}

/* x = hi:lo (< 2^128) mod q. */
FH_HD uint64_t fh_barrett128(uint64_t lo, uint64_t hi, const fh_modulus *m) {
  /* floor((hi*2^64 + lo) * (rh*2^64 + rl) / 2^128), dropping only the
   * carry out of the lowest word (which costs at most 1 in t). */
  uint64_t rl = m->ratio_lo, rh = m->ratio_hi;
  uint64_t c1 = fh_mulhi64(lo, rl);
  uint64_t p2lo = lo * rh, p2hi = fh_mulhi64(lo, rh);
  uint64_t p3lo = hi * rl, p3hi = fh_mulhi64(hi, rl);
  uint64_t s = p2lo + c1;
  uint64_t carry = s < c1;
  uint64_t s2 = s + p3lo;
  carry += s2 < s;
  uint64_t t = hi * rh + p2hi + p3hi + carry;
  uint64_t r = lo - t * m->q;
  if (r >= m->q) r -= m->q;
  if (r >= m->q) r -= m->q;
  return r;
}

FH_HD uint64_t fh_mod_mul(uint64_t a, uint64_t b, const fh_modulus *m) {
  return fh_barrett128(a * b, fh_mulhi64(a, b), m);
}
FH_HD uint64_t fh_mod_add(uint64_t a, uint64_t b, uint64_t q) {
  uint64_t s = a + b;
  return s >= q ? s - q : s;
}
FH_HD uint64_t fh_mod_sub(uint64_t a, uint64_t b, uint64_t q) {
  return a >= b ? a - b : a + q - b;
}
FH_HD uint64_t fh_mod_neg(uint64_t a, uint64_t q) { return a == 0 ? 0 : q - a; }

#endif
