/* 64-bit modular arithmetic shared by host C and CUDA device code (moduli
 * 2 <= q < 2^62). Every function is a pure inline; CPU and GPU compute the
 * same formulas, so results are bit-identical. Three reductions:
 * Barrett (general products), Shoup (products by a precomputed constant:
 * NTT twiddles, per-limb scalars) and Montgomery (products of two
 * variables in the NTT domain, whose values are Montgomery residues).
 *
 * Barrett reduction: ratio = floor(2^128 / q) as two words. For x < 2^128,
 * t = floor(x * ratio / 2^128) (computed from the high partial products)
 * satisfies x/q - 3 < t <= x/q, so r = x - t*q lies in [0, 3q) and at most
 * two conditional subtractions make it exact. */
#ifndef FH_MODARITH_H
#define FH_MODARITH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

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

/* ---- Shoup multiplication by a known constant ---------------------------
 * For a constant w < q, w' = floor(w * 2^64 / q) (fh_shoup_precompute).
 * For any x < 2^64, r = x*w - floor(x*w'/2^64)*q (mod 2^64) satisfies
 * r = x*w mod q + {0 or q}, so r < 2q ("lazy"); one conditional subtraction
 * makes it exact. Needs q < 2^63. */
static inline uint64_t fh_shoup_precompute(uint64_t w, uint64_t q) {
  return (uint64_t)(((unsigned __int128)w << 64) / q);
}
FH_HD uint64_t fh_shoup_mul_lazy(uint64_t x, uint64_t w, uint64_t wp, uint64_t q) {
  return x * w - fh_mulhi64(x, wp) * q;
}
FH_HD uint64_t fh_shoup_mul(uint64_t x, uint64_t w, uint64_t wp, uint64_t q) {
  uint64_t r = fh_shoup_mul_lazy(x, w, wp, q);
  return r >= q ? r - q : r;
}

/* ---- Montgomery multiplication, R = 2^64 --------------------------------
 * For odd q < 2^63 and qinv = q^-1 mod 2^64 (fh_mont_qinv), a product
 * T = a*b < q*2^64 (true when one operand is < q, the other any 64-bit
 * value) is reduced as
 *   m = lo(T) * qinv mod 2^64;  u = hi(T) - hi(m*q)
 * Since m*q == T mod 2^64, the low words cancel exactly, so
 * u = (T - m*q) / 2^64 lies in (-q, q) and u (+ q when negative) is
 * T * R^-1 mod q, exact and in [0, q).
 * The Montgomery form of a is a*R mod q: fh_mont_from_std(a) = MM(a, R^2),
 * fh_mont_to_std(a) = MM(a, 1). MM(aR, bR) = abR: products of Montgomery
 * residues stay Montgomery residues. Addition and subtraction are the same
 * in both forms. */
static inline uint64_t fh_mont_qinv(uint64_t q) {
  /* Newton iteration: each step doubles the number of correct low bits
   * (q*q == 1 mod 8 for odd q gives 3 bits to start). */
  uint64_t x = q;
  for (int i = 0; i < 5; ++i) x *= 2 - q * x;
  return x;
}
/* R mod q and R^2 mod q. */
static inline uint64_t fh_mont_r1(uint64_t q) { return (uint64_t)((((unsigned __int128)1) << 64) % q); }
static inline uint64_t fh_mont_r2(uint64_t q) {
  unsigned __int128 r = fh_mont_r1(q);
  return (uint64_t)((r * r) % q);
}
FH_HD uint64_t fh_mont_reduce(uint64_t lo, uint64_t hi, uint64_t q, uint64_t qinv) {
  uint64_t m = lo * qinv;
  uint64_t mh = fh_mulhi64(m, q);
  return hi >= mh ? hi - mh : hi - mh + q;
}
FH_HD uint64_t fh_mont_mul(uint64_t a, uint64_t b, uint64_t q, uint64_t qinv) {
  return fh_mont_reduce(a * b, fh_mulhi64(a, b), q, qinv);
}
FH_HD uint64_t fh_mont_from_std(uint64_t a, uint64_t q, uint64_t qinv, uint64_t r2) {
  return fh_mont_mul(a, r2, q, qinv);
}
FH_HD uint64_t fh_mont_to_std(uint64_t a, uint64_t q, uint64_t qinv) { return fh_mont_reduce(a, 0, q, qinv); }

/* ---- FP64 products for primes below 2^FH_FP_MAX_BITS ------------------------
 * A GPU issues double-precision FMAs at the rate of its 32-bit integer
 * multiply-adds, and one modular product in doubles takes six of them against
 * about sixteen integer instructions for Shoup's 64-bit product, so the CUDA
 * NTT runs its butterflies in doubles for such primes (docs/ckks.md). Every
 * value is an integer held exactly in a double (|v| < 2^53); only
 * round-to-nearest IEEE operations are used, each named (no contraction), so
 * host and device compute the same doubles.
 *
 * fh_fp_mul(x, w, wq, q) for an integer x with |x| <= X < 2^50, a twiddle
 * w in [0, q) and wq = w / q rounded (fh_fp_twiddle):
 *   t = round(x wq)     (adding and removing 1.5 2^52 rounds to an integer;
 *                        |t - x w / q| <= 1/2 + X 2^-53)
 *   h = x w rounded, l = x w - h exactly (an FMA; h is an integer)
 *   r = (h - t q) + l   (h - t q is an integer below 2^53 in size: one FMA, exact)
 * so r = x w - t q exactly: r == x w (mod q) and |r| <= q (1/2 + X 2^-53).
 * With q < 2^45 and X <= 32 q (the NTT's ranges), |r| <= 0.625 q. */
#define FH_FP_MAX_BITS 45
#define FH_FP_ROUNDER 6755399441055744.0 /* 1.5 * 2^52 */

#if defined(__CUDA_ARCH__)
#define FH_DMUL(a, b) __dmul_rn((a), (b))
#define FH_DADD(a, b) __dadd_rn((a), (b))
#define FH_DSUB(a, b) __dsub_rn((a), (b))
#define FH_DFMA(a, b, c) __fma_rn((a), (b), (c))
#else
#define FH_DMUL(a, b) ((a) * (b))
#define FH_DADD(a, b) ((a) + (b))
#define FH_DSUB(a, b) ((a) - (b))
#define FH_DFMA(a, b, c) fma((a), (b), (c))
#endif

/* whether q takes the FP64 products */
FH_HD int fh_fp_eligible(uint64_t q) { return q < ((uint64_t)1 << FH_FP_MAX_BITS); }
/* w / q rounded to nearest (w, q below 2^53: exact as doubles, one division) */
FH_HD double fh_fp_twiddle(uint64_t w, uint64_t q) { return (double)w / (double)q; }
FH_HD double fh_fp_mul(double x, double w, double wq, double q) {
  const double t = FH_DSUB(FH_DFMA(x, wq, FH_FP_ROUNDER), FH_FP_ROUNDER);
  const double h = FH_DMUL(x, w);
  const double l = FH_DFMA(x, w, -h);
  return FH_DADD(FH_DFMA(-t, q, h), l);
}
/* fh_fp_mul for a multiplier w < q that has no stored quotient (a key word): w / q is
 * formed as w qinv, qinv = 1/q rounded, within 2^-52 of w / q, so t = round(x w qinv)
 * is within 1/2 + |x| 2^-52 of x w / q and r = x w - t q exactly, with
 * |r| <= q (1/2 + |x| 2^-52): 0.75 q for |x| <= 32 q and q < 2^45. */
FH_HD double fh_fp_mul_w(double x, double w, double q, double qinv) { return fh_fp_mul(x, w, FH_DMUL(w, qinv), q); }
/* a centred representative of x (|x| < 2^50): |r| <= q (1/2 + |x| 2^-53); qinv = 1/q rounded */
FH_HD double fh_fp_centre(double x, double q, double qinv) {
  const double t = FH_DSUB(FH_DFMA(x, qinv, FH_FP_ROUNDER), FH_FP_ROUNDER);
  return FH_DFMA(-t, q, x);
}
/* Words and doubles without the conversion instructions (a quarter of the FP64 rate on
 * a GPU): a word x < 2^52 is the mantissa of 2^52 + x, so its double is that number's
 * bits minus 2^52 (exact), and an integer r in [0, 2^52) is the mantissa of r + 2^52. */
#define FH_FP_TWO52 4503599627370496.0
#define FH_FP_TWO52_BITS 0x4330000000000000ULL
FH_HD double fh_fp_bits_double(uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double((long long)b);
#else
  double d;
  memcpy(&d, &b, sizeof d);
  return d;
#endif
}
FH_HD uint64_t fh_fp_double_bits(double d) {
#if defined(__CUDA_ARCH__)
  return (uint64_t)__double_as_longlong(d);
#else
  uint64_t b;
  memcpy(&b, &d, sizeof b);
  return b;
#endif
}
FH_HD double fh_fp_of_word(uint64_t x) { return FH_DSUB(fh_fp_bits_double(x | FH_FP_TWO52_BITS), FH_FP_TWO52); }
/* the canonical residue of x (|x| <= 2^49 and q < 2^45: the centred r is in (-q, q)) */
FH_HD uint64_t fh_fp_canon(double x, double q, double qinv) {
  const double r = fh_fp_centre(x, q, qinv);
  const double b = FH_DADD(r, r < 0 ? FH_DADD(q, FH_FP_TWO52) : FH_FP_TWO52); /* 2^52 + [r]_q, exact */
  return fh_fp_double_bits(b) & 0xFFFFFFFFFFFFFULL;
}
/* One term of a centred base conversion in doubles (CUDA ks1, for a target t below
 * 2^45 and sources below 2^50): y a scaled source residue with the lift's flag in bit 63
 * (ignored here; the caller counts the flags), w = Shat_i mod t, wq = w / t rounded.
 * The term is y w mod t within t (1/2 + 2^-3); a conversion from ns sources is the sum
 * of its terms minus [v S]_t (v the flags counted), below (0.63 ns + 1) t in size, and
 * its word is fh_fp_canon of that. */
FH_HD double fh_fp_conv_term(uint64_t y, double w, double wq, double t) {
  return fh_fp_mul(fh_fp_of_word(y & ~((uint64_t)1 << 63)), w, wq, t);
}
/* The key switch's inner product in doubles (CUDA ks2 for primes below 2^45): the sum
 * acc of fh_fp_mul_w(x_j, k_j) over the digits (|acc| <= 2^49) as the word the integer
 * path gives, sum_j fh_mont_mul(x_j, k_j) = [acc R^-1]_q (the keys are in Montgomery
 * form); qd = q and qinv = 1/q rounded as doubles, mqinv = fh_mont_qinv(q). */
FH_HD uint64_t fh_fp_mac_word(double acc, double qd, double qinv, uint64_t q, uint64_t mqinv) {
  return fh_mont_to_std(fh_fp_canon(acc, qd, qinv), q, mqinv);
}

/* ---- host helpers ---------------------------------------------------------- */
/* a^e mod q (Barrett). */
static inline uint64_t fh_mod_pow(uint64_t a, uint64_t e, const fh_modulus *m) {
  uint64_t r = 1 % m->q, b = a % m->q;
  while (e) {
    if (e & 1) r = fh_mod_mul(r, b, m);
    b = fh_mod_mul(b, b, m);
    e >>= 1;
  }
  return r;
}
/* a^-1 mod q for prime q (Fermat); 0 when a == 0 mod q. */
static inline uint64_t fh_mod_inv_prime(uint64_t a, const fh_modulus *m) { return fh_mod_pow(a, m->q - 2, m); }

#endif
