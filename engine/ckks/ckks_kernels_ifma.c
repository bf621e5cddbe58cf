/* CPU kernels with AVX-512 IFMA (52-bit multiply-add) for primes q < 2^50:
 * the NTT rows, the key-switching inner product and the base conversion from
 * one source prime, eight lanes at a time.
 *
 * NTT: eight butterflies per instruction sequence instead of one. The
 * transforms are the scalar ones of ckks_kernels_cpu.c (the same stages, the
 * same twiddles, the same lazy ranges) and end, like them, fully reduced to
 * [0, q), so they give the scalar kernels' words exactly (spec/ckks_poly_spec.lua
 * compares both on every preset's primes).
 *
 * Shoup multiplication in 52 bits. For w < q and w' = floor(w 2^52 / q),
 * which is the 64-bit companion floor(w 2^64 / q) shifted right by 12
 * (floor(floor(x) / k) = floor(x / k)), and any x < 2^52:
 *   Q = floor(x w' / 2^52),  r = x w - Q q  (mod 2^52)
 * is x w mod q + {0 or q}: the same "lazy" [0, 2q) as the 64-bit form. The
 * values stay below 4q < 2^52, so every product's operands fit the 52-bit
 * multiplier. r costs two IFMA multiplies and the low half of Q q as a third
 * (added to x w's low half with -q mod 2^52, then masked).
 *
 * Layout: the stages whose butterflies are at least 8 words apart work on
 * whole vectors of 8 consecutive words; the three stages with spans 4, 2 and
 * 1 (the last three forward, the first three inverse) work on 16-word
 * chunks in registers, gathering each stage's x and y words from the
 * chunk's two vectors with one two-source permutation each.
 *
 * Key-switching inner product: out = sum_d x_d k_d R^-1 mod q (R = 2^64, the
 * keys in Montgomery form), fully reduced like the scalar kernel's. Per
 * chunk of up to 8 digits the products (< 2^100) are summed as low and high
 * 52-bit halves, V = H 2^52 + L; one Montgomery step in radix 2^52 gives
 * W = V 2^-52 mod q (W < 2^52), and Shoup's product by 2^-12 mod q the
 * remaining factor. */
#include "ckks_kernels_ifma.h"

#if FH_CKKS_HAVE_IFMA
#include <immintrin.h>

#define FH_IFMA __attribute__((target("avx512f,avx512dq,avx512ifma")))
/* specialised per `wide` (a constant at every call) */
#define FH_IFMA_INLINE FH_IFMA static inline __attribute__((always_inline))

typedef struct {
  __m512i q, q2, negq, mask;
} vmod;

FH_IFMA static inline vmod vmod_of(uint64_t q) {
  vmod m;
  m.q = _mm512_set1_epi64((long long)q);
  m.q2 = _mm512_set1_epi64((long long)(2 * q));
  m.negq = _mm512_set1_epi64((long long)(((uint64_t)1 << 52) - q));
  m.mask = _mm512_set1_epi64((long long)(((uint64_t)1 << 52) - 1));
  return m;
}

/* x w mod q + {0, q} for x < 2^52 (w52 = w's 64-bit Shoup companion >> 12) */
FH_IFMA static inline __m512i vshoup_lazy(__m512i x, __m512i w, __m512i w52, const vmod *m) {
  const __m512i zero = _mm512_setzero_si512();
  __m512i qt = _mm512_madd52hi_epu64(zero, x, w52);
  __m512i lo = _mm512_madd52lo_epu64(zero, x, w);
  return _mm512_and_si512(_mm512_madd52lo_epu64(lo, qt, m->negq), m->mask);
}

/* The high 64 bits of the 128-bit products a b (four 32 x 32 -> 64 products) */
FH_IFMA static inline __m512i vmulhi64(__m512i a, __m512i b) {
  const __m512i m32 = _mm512_set1_epi64(0xffffffffLL);
  const __m512i ah = _mm512_srli_epi64(a, 32), bh = _mm512_srli_epi64(b, 32);
  const __m512i ll = _mm512_mul_epu32(a, b), lh = _mm512_mul_epu32(a, bh);
  const __m512i hl = _mm512_mul_epu32(ah, b), hh = _mm512_mul_epu32(ah, bh);
  const __m512i t = _mm512_add_epi64(lh, _mm512_srli_epi64(ll, 32));       /* < 2^64 */
  const __m512i u = _mm512_add_epi64(hl, _mm512_and_si512(t, m32));       /* < 2^64 */
  return _mm512_add_epi64(_mm512_add_epi64(hh, _mm512_srli_epi64(t, 32)), _mm512_srli_epi64(u, 32));
}

/* Shoup's lazy product in either width: wide (any q < 2^62, any x): 64-bit companion wc,
 * x w - mulhi(x, wc) q mod 2^64; otherwise the 52-bit form above (wc = companion >> 12) */
FH_IFMA_INLINE __m512i vshoup(__m512i x, __m512i w, __m512i wc, const vmod *m, bool wide) {
  if (!wide) return vshoup_lazy(x, w, wc, m);
  return _mm512_sub_epi64(_mm512_mullo_epi64(x, w), _mm512_mullo_epi64(vmulhi64(x, wc), m->q));
}
/* a twiddle's companion for vshoup */
static inline uint64_t comp(uint64_t ws, bool wide) { return wide ? ws : ws >> 12; }

/* x - c where x >= c, else x (unsigned: x - c wraps above x when x < c) */
FH_IFMA static inline __m512i vsub_if_ge(__m512i x, __m512i c) { return _mm512_min_epu64(x, _mm512_sub_epi64(x, c)); }

/* Cooley-Tukey butterfly: x, y in [0, 4q) -> x + wy, x - wy + 2q in [0, 4q) */
#define CT_V(X, Y, W, W52)                                          \
  do {                                                              \
    __m512i u_ = vsub_if_ge((X), m.q2);                             \
    __m512i v_ = vshoup((Y), (W), (W52), &m, wide);                  \
    (X) = _mm512_add_epi64(u_, v_);                                 \
    (Y) = _mm512_add_epi64(_mm512_sub_epi64(u_, v_), m.q2);         \
  } while (0)

/* Gentleman-Sande butterfly: x, y in [0, 2q) -> x + y (mod 2q), w (x - y + 2q) lazily */
#define GS_V(X, Y, W, W52)                                                                 \
  do {                                                                                     \
    __m512i u_ = (X), v_ = (Y);                                                            \
    (X) = vsub_if_ge(_mm512_add_epi64(u_, v_), m.q2);                                      \
    (Y) = vshoup(_mm512_add_epi64(_mm512_sub_epi64(u_, v_), m.q2), (W), (W52), &m, wide);   \
  } while (0)

#define LOAD(p) _mm512_loadu_si512((const void *)(p))
#define STORE(p, v) _mm512_storeu_si512((void *)(p), (v))
#define IDX(a, b, c, d, e, f, g, h) _mm512_set_epi64(h, g, f, e, d, c, b, a)

/* The x and y lanes of the stages with spans 4, 2, 1 over a chunk's vectors A
 * (words 0..7) and B (8..15), and the permutations that put them back. */
FH_IFMA static inline void span_perms(int span, __m512i *ix, __m512i *iy, __m512i *ia, __m512i *ib) {
  if (span == 4) {
    *ix = IDX(0, 1, 2, 3, 8, 9, 10, 11);
    *iy = IDX(4, 5, 6, 7, 12, 13, 14, 15);
    *ia = IDX(0, 1, 2, 3, 8, 9, 10, 11);
    *ib = IDX(4, 5, 6, 7, 12, 13, 14, 15);
  } else if (span == 2) {
    *ix = IDX(0, 1, 4, 5, 8, 9, 12, 13);
    *iy = IDX(2, 3, 6, 7, 10, 11, 14, 15);
    *ia = IDX(0, 1, 8, 9, 2, 3, 10, 11);
    *ib = IDX(4, 5, 12, 13, 6, 7, 14, 15);
  } else {
    *ix = IDX(0, 2, 4, 6, 8, 10, 12, 14);
    *iy = IDX(1, 3, 5, 7, 9, 11, 13, 15);
    *ia = IDX(0, 8, 1, 9, 2, 10, 3, 11);
    *ib = IDX(4, 12, 5, 13, 6, 14, 7, 15);
  }
}

/* The twiddles of chunk k at a stage of `span` whose group i uses w[base + i]:
 * span 4: groups 2k, 2k+1 (4 lanes each); span 2: 4k..4k+3 (2 lanes each);
 * span 1: 8k..8k+7. */
FH_IFMA_INLINE void span_twiddles(int span, const uint64_t *w, const uint64_t *ws, int64_t base, int64_t k,
                                   __m512i *W, __m512i *W52, bool wide) {
  __m512i tw, tws;
  if (span == 4) {
    const __m512i spread = IDX(0, 0, 0, 0, 1, 1, 1, 1);
    tw = _mm512_permutexvar_epi64(spread, _mm512_castsi128_si512(_mm_loadu_si128((const void *)(w + base + 2 * k))));
    tws = _mm512_permutexvar_epi64(spread,
                                   _mm512_castsi128_si512(_mm_loadu_si128((const void *)(ws + base + 2 * k))));
  } else if (span == 2) {
    const __m512i spread = IDX(0, 0, 1, 1, 2, 2, 3, 3);
    tw = _mm512_permutexvar_epi64(spread, _mm512_castsi256_si512(_mm256_loadu_si256((const void *)(w + base + 4 * k))));
    tws = _mm512_permutexvar_epi64(spread,
                                   _mm512_castsi256_si512(_mm256_loadu_si256((const void *)(ws + base + 4 * k))));
  } else {
    tw = LOAD(w + base + 8 * k);
    tws = LOAD(ws + base + 8 * k);
  }
  *W = tw;
  *W52 = wide ? tws : _mm512_srli_epi64(tws, 12);
}

FH_IFMA_INLINE void forward(uint64_t *a, const uint64_t *in, int log_n, const fh_ckks_prime *p, const uint64_t *tw,
                            bool wide) {
  const int64_t n = (int64_t)1 << log_n;
  const vmod m = vmod_of(p->q);
  const uint64_t *w = tw, *ws = tw + n;
  /* stage 1 (span n/2) fused with the conversion to Montgomery form */
  {
    const int64_t t = n >> 1;
    const __m512i r = _mm512_set1_epi64((long long)p->r1), r52 = _mm512_set1_epi64((long long)comp(p->r1_shoup, wide));
    const __m512i w1 = _mm512_set1_epi64((long long)p->w1r), w152 = _mm512_set1_epi64((long long)comp(p->w1r_shoup, wide));
    for (int64_t j = 0; j < t; j += 8) {
      __m512i x = vshoup(LOAD(in + j), r, r52, &m, wide);
      __m512i y = vshoup(LOAD(in + j + t), w1, w152, &m, wide);
      STORE(a + j, _mm512_add_epi64(x, y));
      STORE(a + j + t, _mm512_add_epi64(_mm512_sub_epi64(x, y), m.q2));
    }
  }
  /* stages with spans n/4 .. 8 (m groups of span t) on whole vectors */
  int64_t groups = 2, t = n >> 2;
  for (; t >= 8; groups <<= 1, t >>= 1) {
    for (int64_t i = 0; i < groups; ++i) {
      const __m512i W = _mm512_set1_epi64((long long)w[groups + i]);
      const __m512i W52 = _mm512_set1_epi64((long long)comp(ws[groups + i], wide));
      uint64_t *x = a + 2 * i * t, *y = x + t;
      for (int64_t j = 0; j < t; j += 8) {
        __m512i X = LOAD(x + j), Y = LOAD(y + j);
        CT_V(X, Y, W, W52);
        STORE(x + j, X);
        STORE(y + j, Y);
      }
    }
  }
  /* spans 4, 2, 1 (groups n/8, n/4, n/2) on 16-word chunks, then [0, 4q) -> [0, q) */
  for (int64_t k = 0; k < n / 16; ++k) {
    __m512i A = LOAD(a + 16 * k), B = LOAD(a + 16 * k + 8);
    for (int span = 4; span >= 1; span >>= 1) {
      __m512i ix, iy, ia, ib, W, W52;
      span_perms(span, &ix, &iy, &ia, &ib);
      span_twiddles(span, w, ws, n / (2 * span), k, &W, &W52, wide);
      __m512i X = _mm512_permutex2var_epi64(A, ix, B), Y = _mm512_permutex2var_epi64(A, iy, B);
      CT_V(X, Y, W, W52);
      A = _mm512_permutex2var_epi64(X, ia, Y);
      B = _mm512_permutex2var_epi64(X, ib, Y);
    }
    A = vsub_if_ge(vsub_if_ge(A, m.q2), m.q);
    B = vsub_if_ge(vsub_if_ge(B, m.q2), m.q);
    STORE(a + 16 * k, A);
    STORE(a + 16 * k + 8, B);
  }
}

FH_IFMA_INLINE void inverse(uint64_t *a, const uint64_t *in, int log_n, const fh_ckks_prime *p, const uint64_t *tw,
                            bool wide) {
  const int64_t n = (int64_t)1 << log_n;
  const vmod m = vmod_of(p->q);
  const uint64_t *w = tw + 2 * n, *ws = tw + 3 * n;
  /* spans 1, 2, 4 (groups n/2, n/4, n/8) on 16-word chunks */
  for (int64_t k = 0; k < n / 16; ++k) {
    __m512i A = LOAD(in + 16 * k), B = LOAD(in + 16 * k + 8);
    for (int span = 1; span <= 4; span <<= 1) {
      __m512i ix, iy, ia, ib, W, W52;
      span_perms(span, &ix, &iy, &ia, &ib);
      span_twiddles(span, w, ws, n / (2 * span), k, &W, &W52, wide);
      __m512i X = _mm512_permutex2var_epi64(A, ix, B), Y = _mm512_permutex2var_epi64(A, iy, B);
      GS_V(X, Y, W, W52);
      A = _mm512_permutex2var_epi64(X, ia, Y);
      B = _mm512_permutex2var_epi64(X, ib, Y);
    }
    STORE(a + 16 * k, A);
    STORE(a + 16 * k + 8, B);
  }
  /* spans 8 .. n/4 on whole vectors */
  int64_t groups = n / 16, t = 8;
  for (; groups > 1; groups >>= 1, t <<= 1) {
    for (int64_t i = 0; i < groups; ++i) {
      const __m512i W = _mm512_set1_epi64((long long)w[groups + i]);
      const __m512i W52 = _mm512_set1_epi64((long long)comp(ws[groups + i], wide));
      uint64_t *x = a + 2 * i * t, *y = x + t;
      for (int64_t j = 0; j < t; j += 8) {
        __m512i X = LOAD(x + j), Y = LOAD(y + j);
        GS_V(X, Y, W, W52);
        STORE(x + j, X);
        STORE(y + j, Y);
      }
    }
  }
  /* the last stage (span n/2) fused with the N^-1 R^-1 scaling, fully reduced */
  {
    const __m512i s0 = _mm512_set1_epi64((long long)p->ninv_rinv);
    const __m512i s052 = _mm512_set1_epi64((long long)comp(p->ninv_rinv_shoup, wide));
    const __m512i s1 = _mm512_set1_epi64((long long)p->iw1s);
    const __m512i s152 = _mm512_set1_epi64((long long)comp(p->iw1s_shoup, wide));
    uint64_t *x = a, *y = a + t;
    for (int64_t j = 0; j < t; j += 8) {
      __m512i u = LOAD(x + j), v = LOAD(y + j);
      STORE(x + j, vsub_if_ge(vshoup(_mm512_add_epi64(u, v), s0, s052, &m, wide), m.q));
      STORE(y + j, vsub_if_ge(vshoup(_mm512_add_epi64(_mm512_sub_epi64(u, v), m.q2), s1, s152, &m, wide), m.q));
    }
  }
}

FH_IFMA static void forward52(uint64_t *a, const uint64_t *in, int log_n, const fh_ckks_prime *p, const uint64_t *tw) {
  forward(a, in, log_n, p, tw, false);
}
FH_IFMA static void inverse52(uint64_t *a, const uint64_t *in, int log_n, const fh_ckks_prime *p, const uint64_t *tw) {
  inverse(a, in, log_n, p, tw, false);
}
FH_IFMA static void forward64(uint64_t *a, const uint64_t *in, int log_n, const fh_ckks_prime *p, const uint64_t *tw) {
  forward(a, in, log_n, p, tw, true);
}
FH_IFMA static void inverse64(uint64_t *a, const uint64_t *in, int log_n, const fh_ckks_prime *p, const uint64_t *tw) {
  inverse(a, in, log_n, p, tw, true);
}

/* 2^-12 mod q (halving 12 times: x/2 = x even ? x/2 : (x + q)/2) */
static uint64_t inv_2_12(uint64_t q) {
  uint64_t c = 1;
  for (int i = 0; i < 12; ++i) c = (c & 1) ? (c >> 1) + (q >> 1) + 1 : c >> 1; /* (c + q) / 2, q odd */
  return c;
}

FH_IFMA static void ks_inner(uint64_t *restrict o, const uint64_t *const *dig, const uint64_t *const *key, int nd,
                             int64_t n, const fh_ckks_prime *p) {
  const uint64_t q = p->q, mask52 = ((uint64_t)1 << 52) - 1;
  const vmod m = vmod_of(q);
  const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi64(1);
  const __m512i nqinv = _mm512_set1_epi64((long long)((((uint64_t)1 << 52) - (p->qinv & mask52)) & mask52));
  const uint64_t c = inv_2_12(q);
  const __m512i cv = _mm512_set1_epi64((long long)c);
  const __m512i c52 = _mm512_set1_epi64((long long)(fh_shoup_precompute(c, q) >> 12));
  for (int64_t j = 0; j < n; j += 8) {
    __m512i out = zero;
    for (int d0 = 0; d0 < nd; d0 += 8) {
      const int d1 = d0 + 8 < nd ? d0 + 8 : nd;
      /* V = H 2^52 + L = sum of the chunk's products (each < 2^100) */
      __m512i L = zero, H = zero;
      for (int d = d0; d < d1; ++d) {
        const __m512i x = LOAD(dig[d] + j), k = LOAD(key[d] + j);
        L = _mm512_madd52lo_epu64(L, x, k);
        H = _mm512_madd52hi_epu64(H, x, k);
      }
      H = _mm512_add_epi64(H, _mm512_srli_epi64(L, 52));
      L = _mm512_and_si512(L, m.mask);
      /* W = (V + mq) / 2^52 = V 2^-52 mod q, for m = -L q^-1 mod 2^52: L + lo52(mq) is 0 or 2^52 */
      const __m512i mm = _mm512_madd52lo_epu64(zero, L, nqinv);
      __m512i W = _mm512_madd52hi_epu64(H, mm, m.q);
      W = _mm512_mask_add_epi64(W, _mm512_cmpneq_epu64_mask(L, zero), W, one);
      /* W < 8 2^48 + q + 1 < 2^52: times 2^-12 gives V 2^-64 mod q */
      __m512i r = vsub_if_ge(vshoup_lazy(W, cv, c52, &m), m.q);
      out = vsub_if_ge(_mm512_add_epi64(out, r), m.q);
    }
    STORE(o + j, out);
  }
}

bool fh__ckks_ks_inner_row_ifma(uint64_t *o, const uint64_t *const *dig, const uint64_t *const *key, int nd, int log_n,
                                const fh_ckks_prime *p) {
  if (log_n < 3 || p->q >= ((uint64_t)1 << 50)) return false;
  ks_inner(o, dig, key, nd, (int64_t)1 << log_n, p);
  return true;
}

FH_IFMA_INLINE void bconv1(uint64_t *restrict o, const uint64_t *restrict x, int64_t n, uint64_t s0, bool center,
                           uint64_t st, uint64_t tq, bool wide) {
  const vmod m = vmod_of(tq);
  const __m512i half = _mm512_set1_epi64((long long)(s0 >> 1)), stv = _mm512_set1_epi64((long long)st);
  const __m512i one = _mm512_set1_epi64(1);
  const uint64_t one_s = fh_shoup_precompute(1, tq);
  const __m512i onec = _mm512_set1_epi64((long long)comp(one_s, wide));
  const bool reduce = s0 > tq;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m512i xv = LOAD(x + j);
    __m512i r = reduce ? vsub_if_ge(vshoup(xv, one, onec, &m, wide), m.q) : xv;
    if (center) {
      /* r - st mod t where the centred lift is negative */
      const __mmask8 neg = _mm512_cmpgt_epu64_mask(xv, half);
      const __m512i d = _mm512_sub_epi64(r, stv);
      const __m512i dm = _mm512_mask_add_epi64(d, _mm512_cmplt_epu64_mask(r, stv), d, m.q);
      r = _mm512_mask_mov_epi64(r, neg, dm);
    }
    STORE(o + j, r);
  }
  for (; j < n; ++j) { /* a block's tail */
    uint64_t r = reduce ? fh_shoup_mul(x[j], 1, one_s, tq) : x[j];
    if (center && x[j] > (s0 >> 1)) r = r >= st ? r - st : r - st + tq;
    o[j] = r;
  }
}
FH_IFMA static void bconv1_52(uint64_t *o, const uint64_t *x, int64_t n, uint64_t s0, bool center, uint64_t st,
                              uint64_t tq) {
  bconv1(o, x, n, s0, center, st, tq, false);
}
FH_IFMA static void bconv1_64(uint64_t *o, const uint64_t *x, int64_t n, uint64_t s0, bool center, uint64_t st,
                              uint64_t tq) {
  bconv1(o, x, n, s0, center, st, tq, true);
}

bool fh__ckks_bconv1_row_ifma(uint64_t *o, const uint64_t *x, int64_t n, uint64_t s0, bool center, uint64_t st,
                              uint64_t tq) {
  if (tq < ((uint64_t)1 << 50) && s0 < ((uint64_t)1 << 52)) bconv1_52(o, x, n, s0, center, st, tq);
  else bconv1_64(o, x, n, s0, center, st, tq);
  return true;
}

bool fh__ckks_ntt_row_ifma(uint64_t *a, const uint64_t *in, int log_n, const fh_ckks_prime *p, const uint64_t *tw,
                           bool fwd) {
  if (log_n < 4) return false;
  if (p->q < ((uint64_t)1 << 50)) {
    if (fwd) forward52(a, in, log_n, p, tw);
    else inverse52(a, in, log_n, p, tw);
  } else {
    if (fwd) forward64(a, in, log_n, p, tw);
    else inverse64(a, in, log_n, p, tw);
  }
  return true;
}

#else /* no AVX-512 IFMA in this compiler or target */

bool fh__ckks_bconv1_row_ifma(uint64_t *o, const uint64_t *x, int64_t n, uint64_t s0, bool center, uint64_t st,
                              uint64_t tq) {
  (void)o, (void)x, (void)n, (void)s0, (void)center, (void)st, (void)tq;
  return false;
}

bool fh__ckks_ks_inner_row_ifma(uint64_t *o, const uint64_t *const *dig, const uint64_t *const *key, int nd, int log_n,
                                const fh_ckks_prime *p) {
  (void)o, (void)dig, (void)key, (void)nd, (void)log_n, (void)p;
  return false;
}

bool fh__ckks_ntt_row_ifma(uint64_t *a, const uint64_t *in, int log_n, const fh_ckks_prime *p, const uint64_t *tw,
                           bool fwd) {
  (void)a, (void)in, (void)log_n, (void)p, (void)tw, (void)fwd;
  return false;
}
#endif
