/* CPU implementations of the CKKS kernels (fh/ckks_kernels.h). Each kernel
 * walks groups and limbs and runs a tight loop over one contiguous row of N
 * coefficients with that row's prime; nothing is allocated per coefficient
 * (the base conversion and the decoder use fixed-size stack blocks). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckks_kernels_ifma.h"
#include "fh/ckks_kernels.h"
#include "fh/core.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* The rows (g, l) of a launch, on fh_num_threads() threads when the launch has at least
 * FH_PAR_MIN coefficients (a parallel region costs microseconds). Every row is computed by
 * one thread with no shared state, so results do not depend on the thread count. The body
 * sees g (int64_t) and l (int). */
#define FH_PAR_MIN 32768
#define FH_PRAGMA(x) _Pragma(#x)
#ifdef _OPENMP
#define FH_PARALLEL_FOR(work) FH_PRAGMA(omp parallel for schedule(static) num_threads(fh_num_threads()) if((work) >= FH_PAR_MIN))
#else
#define FH_PARALLEL_FOR(work)
#endif
#define FH_FOR_ROWS(ngroups, nlimbs, n)                                                      \
  FH_PARALLEL_FOR((int64_t)(ngroups) * (nlimbs) * (n))                                   \
  for (int64_t r_ = 0; r_ < (int64_t)(ngroups) * (nlimbs); ++r_)                         \
    for (int64_t g = r_ / (nlimbs), g_once_ = 1; g_once_; g_once_ = 0)                   \
      for (int l = (int)(r_ % (nlimbs)), l_once_ = 1; l_once_; l_once_ = 0)

const char *const fh__ckks_kernel_names[FH_K_CKKS_COUNT] = {
    "ckks_ntt",   "ckks_intt",      "ckks_ew",          "ckks_tensor",     "ckks_bconv",
    "ckks_ks_inner", "ckks_automorph", "ckks_encode", "ckks_decode", "ckks_modup", "ckks_ks_core",
    "ckks_moddown", "ckks_lt", "ckks_sample",
};

/* ---- NTT ------------------------------------------------------------------------ */
/* Forward negacyclic NTT of one row: standard residues in `in` (< q) ->
 * Montgomery evaluations in `a` (may equal in), bit-reversed order. */
static void ntt_forward_row(uint64_t *a, const uint64_t *in, int log_n, const fh_ckks_prime *p, const uint64_t *tw) {
  const int64_t n = (int64_t)1 << log_n;
  const uint64_t q = p->q, q2 = 2 * q;
  const uint64_t *w = tw, *ws = tw + n;
  int64_t t = n >> 1;
  /* stage 1 (m = 1) fused with the conversion to Montgomery form */
  {
    const uint64_t r = p->r1, rs = p->r1_shoup, w1 = p->w1r, w1s = p->w1r_shoup;
    for (int64_t j = 0; j < t; ++j) {
      uint64_t x = fh_shoup_mul_lazy(in[j], r, rs, q);      /* [0, 2q) */
      uint64_t y = fh_shoup_mul_lazy(in[j + t], w1, w1s, q); /* [0, 2q) */
      a[j] = x + y;
      a[j + t] = x - y + q2;
    }
  }
  /* middle stages (t >= 2), two at a time (radix 4: stages m and 2m on the words
   * j, j + t/2, j + t, j + 3t/2 of each group of 2t, half the loads and stores), then
   * one radix-2 stage when their number is odd */
  int64_t m = 2;
#define CT_BFLY(X, Y, W, WS)                                 \
  do {                                                       \
    uint64_t u_ = (X);                                       \
    u_ -= (u_ >= q2) ? q2 : 0;             /* [0, 2q) */     \
    uint64_t v_ = fh_shoup_mul_lazy((Y), (W), (WS), q); /* [0, 2q) */ \
    (X) = u_ + v_;                         /* [0, 4q) */     \
    (Y) = u_ - v_ + q2;                    /* (0, 4q) */     \
  } while (0)
  while (t > 4) { /* stages t/2 and t/4 both middle stages */
    t >>= 1;      /* this stage's half-size; the next one's is t/2 */
    const int64_t h = t >> 1;
    for (int64_t i = 0; i < m; ++i) {
      const uint64_t W1 = w[m + i], W1s = ws[m + i];
      const uint64_t W2 = w[2 * m + 2 * i], W2s = ws[2 * m + 2 * i];
      const uint64_t W3 = w[2 * m + 2 * i + 1], W3s = ws[2 * m + 2 * i + 1];
      uint64_t *restrict x0 = a + 2 * i * t, *restrict x1 = x0 + h, *restrict x2 = x0 + t, *restrict x3 = x2 + h;
      for (int64_t j = 0; j < h; ++j) {
        uint64_t v0 = x0[j], v1 = x1[j], v2 = x2[j], v3 = x3[j];
        CT_BFLY(v0, v2, W1, W1s);
        CT_BFLY(v1, v3, W1, W1s);
        CT_BFLY(v0, v1, W2, W2s);
        CT_BFLY(v2, v3, W3, W3s);
        x0[j] = v0;
        x1[j] = v1;
        x2[j] = v2;
        x3[j] = v3;
      }
    }
    m <<= 2;
    t >>= 1;
  }
  for (; t > 2; m <<= 1) {
    t >>= 1;
    for (int64_t i = 0; i < m; ++i) {
      const uint64_t W = w[m + i], Ws = ws[m + i];
      uint64_t *restrict x = a + 2 * i * t, *restrict y = x + t;
      for (int64_t j = 0; j < t; ++j) CT_BFLY(x[j], y[j], W, Ws);
    }
  }
#undef CT_BFLY
  /* last stage (t = 1, m = N/2) fused with the final reduction to [0, q) */
  if (m < n) {
    for (int64_t i = 0; i < m; ++i) {
      const uint64_t W = w[m + i], Ws = ws[m + i];
      uint64_t u = a[2 * i];
      u -= (u >= q2) ? q2 : 0;
      uint64_t v = fh_shoup_mul_lazy(a[2 * i + 1], W, Ws, q);
      uint64_t x = u + v, y = u - v + q2;
      x -= (x >= q2) ? q2 : 0;
      x -= (x >= q) ? q : 0;
      y -= (y >= q2) ? q2 : 0;
      y -= (y >= q) ? q : 0;
      a[2 * i] = x;
      a[2 * i + 1] = y;
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      uint64_t u = a[j];
      u -= (u >= q2) ? q2 : 0;
      u -= (u >= q) ? q : 0;
      a[j] = u;
    }
  }
}

/* Inverse: Montgomery evaluations (< q) -> standard coefficients (< q). */
static void ntt_inverse_row(uint64_t *a, const uint64_t *in, int log_n, const fh_ckks_prime *p, const uint64_t *tw) {
  const int64_t n = (int64_t)1 << log_n;
  const uint64_t q = p->q, q2 = 2 * q;
  const uint64_t *w = tw + 2 * n, *ws = tw + 3 * n;
  if (a != in) memcpy(a, in, sizeof(uint64_t) * (size_t)n);
  int64_t t = 1, m = n;
  /* first stage (t = 1): adjacent pairs */
  if (m > 2) {
    int64_t h = m >> 1;
    for (int64_t i = 0; i < h; ++i) {
      uint64_t u = a[2 * i], v = a[2 * i + 1];
      uint64_t s = u + v;
      s -= (s >= q2) ? q2 : 0;
      a[2 * i] = s;
      a[2 * i + 1] = fh_shoup_mul_lazy(u - v + q2, w[h + i], ws[h + i], q);
    }
    t = 2;
    m >>= 1;
  }
#define GS_BFLY(X, Y, W, WS)                                \
  do {                                                      \
    uint64_t u_ = (X), v_ = (Y); /* [0, 2q) */              \
    uint64_t s_ = u_ + v_;                                  \
    s_ -= (s_ >= q2) ? q2 : 0;                              \
    (X) = s_;                                               \
    (Y) = fh_shoup_mul_lazy(u_ - v_ + q2, (W), (WS), q);    \
  } while (0)
  /* middle stages two at a time (radix 4: stages t and 2t on the words j, j + t,
   * j + 2t, j + 3t of each group of 4t), while both are below the last stage */
  for (; m > 4; m >>= 2) {
    const int64_t h = m >> 1; /* stage t: groups h + i; stage 2t: h/2 + k */
    for (int64_t k = 0; k < h / 2; ++k) {
      const uint64_t Wa = w[h + 2 * k], Was = ws[h + 2 * k], Wb = w[h + 2 * k + 1], Wbs = ws[h + 2 * k + 1];
      const uint64_t W2 = w[h / 2 + k], W2s = ws[h / 2 + k];
      uint64_t *restrict x0 = a + 4 * k * t, *restrict x1 = x0 + t, *restrict x2 = x1 + t, *restrict x3 = x2 + t;
      for (int64_t j = 0; j < t; ++j) {
        uint64_t v0 = x0[j], v1 = x1[j], v2 = x2[j], v3 = x3[j];
        GS_BFLY(v0, v1, Wa, Was);
        GS_BFLY(v2, v3, Wb, Wbs);
        GS_BFLY(v0, v2, W2, W2s);
        GS_BFLY(v1, v3, W2, W2s);
        x0[j] = v0;
        x1[j] = v1;
        x2[j] = v2;
        x3[j] = v3;
      }
    }
    t <<= 2;
  }
  for (; m > 2; m >>= 1) {
    int64_t h = m >> 1;
    for (int64_t i = 0; i < h; ++i) {
      const uint64_t W = w[h + i], Ws = ws[h + i];
      uint64_t *restrict x = a + 2 * i * t, *restrict y = x + t;
      for (int64_t j = 0; j < t; ++j) GS_BFLY(x[j], y[j], W, Ws);
    }
    t <<= 1;
  }
#undef GS_BFLY
  /* last stage (m = 2, t = N/2) fused with the N^-1 R^-1 scaling */
  const uint64_t s0 = p->ninv_rinv, s0s = p->ninv_rinv_shoup, s1 = p->iw1s, s1s = p->iw1s_shoup;
  uint64_t *x = a, *y = a + t;
  for (int64_t j = 0; j < t; ++j) {
    uint64_t u = x[j], v = y[j];
    x[j] = fh_shoup_mul(u + v, s0, s0s, q);
    y[j] = fh_shoup_mul(u - v + q2, s1, s1s, q);
  }
}

/* a twiddle's quotient by q for fh_fp_mul: the table's (w / q rounded), or formed as
 * w qinv (within 2^-52 of w / q: fh_fp_mul_w's bound) */
static double tw_quotient(uint64_t w, const fh_ckks_prime *p, bool formed) {
  return formed ? FH_DMUL((double)w, p->fp_qinv) : fh_fp_twiddle(w, p->q);
}

/* The CUDA NTT's FP64 butterflies on one row (primes below 2^FH_FP_MAX_BITS): the CPU
 * twin of that arithmetic (spec/ckks_fp_spec.lua), not a path of the CPU back end. The
 * same fh_fp_mul, twiddles (fh_fp_twiddle of the table's words, or with formed the
 * quotients w qinv of the GPU's chunk stages) and fused constants as the GPU, with ranges
 * at least as wide: forward, no reduction between stages (the GPU reduces at least every
 * 11); inverse, the centred reduction after every three stages
 * (the GPU's passes). Standard residues in, canonical words out, like the integer rows. */
void fh_ckks_ntt_row_fp(uint64_t *a, const uint64_t *in, const double *din, int log_n, const fh_ckks_prime *p,
                        const uint64_t *tw, bool forward, bool formed, double *v) {
  const int64_t n = (int64_t)1 << log_n;
  const double q = p->fp_q, qi = p->fp_qinv;
  for (int64_t j = 0; j < n; ++j) v[j] = din ? din[j] : fh_fp_of_word(in[j]);
  if (forward) {
    const uint64_t *w = tw;
    for (int64_t m = 1, t = n >> 1; m < n; m <<= 1, t >>= 1)
      for (int64_t i = 0; i < m; ++i) {
        const double W = (double)w[m + i], Wq = tw_quotient(w[m + i], p, formed);
        for (int64_t j = 2 * i * t; j < 2 * i * t + t; ++j) {
          if (m == 1) { /* the first stage times R */
            const double x = fh_fp_mul(v[j], p->fp_c[0], p->fp_c[1], q);
            const double y = fh_fp_mul(v[j + t], p->fp_c[2], p->fp_c[3], q);
            v[j] = x + y;
            v[j + t] = x - y;
          } else {
            const double r = fh_fp_mul(v[j + t], W, Wq, q);
            v[j + t] = v[j] - r;
            v[j] = v[j] + r;
          }
        }
      }
  } else {
    const uint64_t *w = tw + 2 * n;
    int stage = 0;
    for (int64_t t = 1; t < n; t <<= 1, ++stage) {
      if (stage > 0 && stage % 3 == 0)
        for (int64_t j = 0; j < n; ++j) v[j] = fh_fp_centre(v[j], q, qi);
      const int64_t groups = n / (2 * t);
      for (int64_t i = 0; i < groups; ++i) {
        const double W = (double)w[groups + i], Wq = tw_quotient(w[groups + i], p, formed);
        for (int64_t j = 2 * i * t; j < 2 * i * t + t; ++j) {
          const double s = v[j] + v[j + t], d = v[j] - v[j + t];
          if (groups == 1) { /* the last stage times N^-1 R^-1 */
            v[j] = fh_fp_mul(s, p->fp_c[4], p->fp_c[5], q);
            v[j + t] = fh_fp_mul(d, p->fp_c[6], p->fp_c[7], q);
          } else {
            v[j] = s;
            v[j + t] = fh_fp_mul(d, W, Wq, q);
          }
        }
      }
    }
  }
  for (int64_t j = 0; j < n; ++j) a[j] = fh_fp_canon(v[j], q, qi);
}

static fh_status run_ntt(const void *argp, bool forward) {
  const fh_ckks_ntt_args *a = argp;
  const int64_t n = (int64_t)1 << a->log_n;
  const char *why = fh_ckks_ntt_in_b_refusal(a, forward);
  if (!why) why = fh_ckks_ntt_scale_refusal(a, forward);
  if (why) return fh_error_set(FH_ERR_EXECUTION, "%s", why);
  const bool ifma = fh_cpu_simd()[0] == 'a'; /* "avx512ifma" */
  FH_FOR_ROWS(a->ngroups, a->nlimbs, n) {
      int p = a->prime[l];
      uint64_t *out = a->out + g * a->out_gs + fh_ckks_ntt_out_off(a, l);
      const uint64_t *in = a->in + g * a->in_gs + fh_ckks_ntt_in_off(a, l);
      const uint64_t *tw = a->ntt + (int64_t)p * 4 * n;
      if (a->in_b) {
        /* the input row formed from the two ciphertexts' words, in place in out */
        const uint64_t *b = a->in_b + g * a->in_b_gs + fh_ckks_ntt_in_off(a, l);
        const uint64_t q = a->primes[p].q, qi = a->primes[p].qinv;
        const int kind = a->prod[l];
        for (int64_t j = 0; j < n; ++j)
          out[j] = fh_ckks_tensor_word(kind, in[j], in[j + a->in_cs], b[j], b[j + a->in_b_cs], q, qi);
        if (l < a->nkeep) memcpy(a->keep + g * a->keep_gs + (int64_t)l * n, out, sizeof(uint64_t) * (size_t)n);
        in = out;
      }
      if (!(ifma && fh__ckks_ntt_row_ifma(out, in, a->log_n, &a->primes[p], tw, forward))) {
        if (forward) ntt_forward_row(out, in, a->log_n, &a->primes[p], tw);
        else ntt_inverse_row(out, in, a->log_n, &a->primes[p], tw);
      }
      if (l < a->nscale) { /* (inverse only: the refusal above) the key switch's conversion sources */
        const uint64_t w = a->scale[2 * l], ws = a->scale[2 * l + 1];
        for (int64_t j = 0; j < n; ++j) out[j] = fh_ckks_ks_source_word(out[j], w, ws, a->primes[p].q);
      }
    }
  return FH_OK;
}

static fh_status cpu_ntt(const void *args) { return run_ntt(args, true); }
static fh_status cpu_intt(const void *args) { return run_ntt(args, false); }

/* ---- element-wise ------------------------------------------------------------------- */
static fh_status cpu_ew(const void *argp) {
  const fh_ckks_ew_args *a = argp;
  const int64_t n = (int64_t)1 << a->log_n;
  if (a->op < 0 || a->op >= FH_CKKS_EW_OP_COUNT)
    return fh_error_set(FH_ERR_EXECUTION, "ckks_ew: invalid operation %d", (int)a->op);
  FH_FOR_ROWS(a->ngroups, a->nlimbs, n) {
      const fh_ckks_prime *pr = &a->primes[a->prime[l]];
      const uint64_t q = pr->q, qi = pr->qinv;
      uint64_t *o = a->out + g * a->out_gs + (int64_t)l * n;
      const bool one_row = a->op == FH_CKKS_EW_RESCALE;
      const uint64_t *x = a->a + g * a->a_gs + (int64_t)l * a->a_ls;
      const uint64_t *y = a->b ? a->b + g * a->b_gs + (one_row ? 0 : (int64_t)l * n) : NULL;
      const uint64_t *z = a->c ? a->c + g * a->c_gs + (int64_t)l * n : NULL;
      const uint64_t k = a->k[l], c = a->c_const[l], cs = a->c_shoup[l];
      switch (a->op) {
        case FH_CKKS_EW_COPY:
          if (o != x) memmove(o, x, sizeof(uint64_t) * (size_t)n);
          break;
        case FH_CKKS_EW_ADD:
          for (int64_t j = 0; j < n; ++j) o[j] = fh_mod_add(x[j], y[j], q);
          break;
        case FH_CKKS_EW_SUB:
          for (int64_t j = 0; j < n; ++j) o[j] = fh_mod_sub(x[j], y[j], q);
          break;
        case FH_CKKS_EW_NEG:
          for (int64_t j = 0; j < n; ++j) o[j] = fh_mod_neg(x[j], q);
          break;
        case FH_CKKS_EW_MONT_MUL:
          for (int64_t j = 0; j < n; ++j) o[j] = fh_mont_mul(x[j], y[j], q, qi);
          break;
        case FH_CKKS_EW_MONT_MAC:
          for (int64_t j = 0; j < n; ++j) o[j] = fh_mod_add(fh_mont_mul(x[j], y[j], q, qi), z[j], q);
          break;
        case FH_CKKS_EW_MUL_CONST:
          for (int64_t j = 0; j < n; ++j) o[j] = fh_shoup_mul(x[j], c, cs, q);
          break;
        case FH_CKKS_EW_ADD_CONST:
          for (int64_t j = 0; j < n; ++j) o[j] = fh_mod_add(x[j], k, q);
          break;
        case FH_CKKS_EW_SUB_ADD_MUL:
          /* x - y + k < 3q < 2^64; Shoup takes any 64-bit input */
          if (z)
            for (int64_t j = 0; j < n; ++j) o[j] = fh_mod_add(fh_shoup_mul(x[j] + (q - y[j]) + k, c, cs, q), z[j], q);
          else
            for (int64_t j = 0; j < n; ++j) o[j] = fh_shoup_mul(x[j] + (q - y[j]) + k, c, cs, q);
          break;
        case FH_CKKS_EW_ADD_MUL_CONST:
          for (int64_t j = 0; j < n; ++j) o[j] = fh_mod_add(x[j], fh_shoup_mul(y[j], c, cs, q), q);
          break;
        case FH_CKKS_EW_TO_MONT:
          for (int64_t j = 0; j < n; ++j) o[j] = fh_mont_from_std(x[j], q, qi, pr->r2);
          break;
        case FH_CKKS_EW_FROM_MONT:
          for (int64_t j = 0; j < n; ++j) o[j] = fh_mont_to_std(x[j], q, qi);
          break;
        case FH_CKKS_EW_SIGNED: {
          const int64_t *s = (const int64_t *)x;
          for (int64_t j = 0; j < n; ++j) {
            int64_t v = s[j];
            uint64_t r = fh_barrett128(v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, 0, &pr->bar);
            o[j] = v < 0 ? fh_mod_neg(r, q) : r;
          }
          break;
        }
        case FH_CKKS_EW_RESCALE:
          /* v mod q: Shoup's product by 1 (floor(2^64 / q) is the Barrett ratio's high word) */
          for (int64_t j = 0; j < n; ++j) {
            const uint64_t v = y[j];
            uint64_t t = fh_shoup_mul(v, 1, pr->bar.ratio_hi, q);
            if (v > a->drop_half) t = fh_mod_sub(t, k, q);
            o[j] = fh_shoup_mul(x[j] + (q - t), c, cs, q);
          }
          break;
        default: break; /* checked above */
      }
    }
  return FH_OK;
}

/* ---- tensor product ---------------------------------------------------------------- */
static fh_status cpu_tensor(const void *argp) {
  const fh_ckks_tensor_args *a = argp;
  const int64_t n = (int64_t)1 << a->log_n;
  FH_FOR_ROWS(a->ngroups, a->nlimbs, n) {
      const fh_ckks_prime *pr = &a->primes[a->prime[l]];
      const uint64_t q = pr->q, qi = pr->qinv;
      int64_t off = (int64_t)l * n;
      const uint64_t *a0 = a->a + g * a->a_gs + off, *a1 = a0 + a->a_cs;
      const uint64_t *b0 = a->b + g * a->b_gs + off, *b1 = b0 + a->b_cs;
      uint64_t *d0 = a->out + g * a->out_gs + off, *d1 = d0 + a->out_cs, *d2 = d1 + a->out_cs;
      for (int64_t j = 0; j < n; ++j) {
        const uint64_t x0 = a0[j], x1 = a1[j], y0 = b0[j], y1 = b1[j];
        d0[j] = fh_ckks_tensor_word(FH_CKKS_PROD_00, x0, x1, y0, y1, q, qi);
        d1[j] = fh_ckks_tensor_word(FH_CKKS_PROD_X, x0, x1, y0, y1, q, qi);
        d2[j] = fh_ckks_tensor_word(FH_CKKS_PROD_11, x0, x1, y0, y1, q, qi);
      }
    }
  return FH_OK;
}

/* ---- fast base conversion ------------------------------------------------------------ */
#define BCONV_BLOCK 64
/* prescaled: the sources are already the scaled residues with the lift's flag in bit 63
 * (fh_ckks_ks_source_word; fh_ckks_ks_core_args.prescaled, fh_ckks_moddown_args.prescaled) */
static fh_status bconv_impl(const fh_ckks_bconv_args *a, bool prescaled) {
  const int64_t n = (int64_t)1 << a->log_n;
  const int ns = a->nsrc, ndst = a->ndst;
  const bool center = a->center;
  const uint64_t *shat_inv = a->consts, *mat = a->consts + 2 * ns;
  const int64_t nblk = (n + BCONV_BLOCK - 1) / BCONV_BLOCK, work = a->ngroups * n * (ndst > 0 ? ndst : 1);
  const bool ifma = fh_cpu_simd()[0] == 'a'; /* "avx512ifma" */
  /* every thread's scaled residues, allocated before anything is written */
  const int nthreads = work >= FH_PAR_MIN ? fh_num_threads() : 1;
  const size_t per = (size_t)(ns > 0 ? ns : 1) * BCONV_BLOCK;
  uint64_t *ys = fh_malloc(sizeof *ys * per * (size_t)nthreads);
  if (ys == NULL) return fh_error_set(FH_ERR_MEMORY, "ckks_bconv: out of memory");
  /* centered: v = #{i : y_i > s_i / 2} per coefficient; sum_i (y_i - [y_i > s_i/2] s_i) Shat_i
   * = sum_i y_i Shat_i - v S, and S mod t = Shat_0 * s_0 mod t (once per target) */
  uint64_t smt[FH_CKKS_MAX_PRIMES];
  for (int t = 0; t < ndst; ++t) {
    const fh_modulus *m = &a->primes[a->dst_prime[t]].bar;
    smt[t] = center && ns > 0 ? fh_mod_mul(mat[(int64_t)t * ns], a->primes[a->src_prime[0]].q % m->q, m) : 0;
  }
  /* one source prime with Shat^-1 = 1 and Shat = 1 (a mod-up digit of one prime, a rescale, a
   * mod-down from one P prime): the scaled residues are the inputs themselves */
  bool direct = !prescaled && ns == 1 && shat_inv[0] == 1;
  for (int t = 0; t < ndst && direct; ++t) direct = mat[t] == 1;
  if (a->copy_src)
    for (int64_t g = 0; g < a->ngroups; ++g)
      for (int i = 0; i < ns; ++i)
        memcpy(a->out + g * a->out_gs + (int64_t)a->src_out_row[i] * n, a->in + g * a->in_gs + (int64_t)a->src_row[i] * n,
               sizeof(uint64_t) * (size_t)n);
#ifdef _OPENMP
  FH_PRAGMA(omp parallel for schedule(static) num_threads(nthreads) if(nthreads > 1))
#endif
  for (int64_t r = 0; r < a->ngroups * nblk; ++r) {
#ifdef _OPENMP
    uint64_t (*y)[BCONV_BLOCK] = (uint64_t (*)[BCONV_BLOCK])(ys + per * (size_t)omp_get_thread_num());
#else
    uint64_t (*y)[BCONV_BLOCK] = (uint64_t (*)[BCONV_BLOCK])ys;
#endif
    uint32_t v[BCONV_BLOCK];
    const int64_t g = r / nblk, j0 = (r % nblk) * BCONV_BLOCK;
    const uint64_t *in = a->in + g * a->in_gs;
    uint64_t *out = a->out + g * a->out_gs;
    const int64_t bl = n - j0 < BCONV_BLOCK ? n - j0 : BCONV_BLOCK;
    for (int i = 0; i < ns && !direct; ++i) {
      const uint64_t *x = in + (int64_t)a->src_row[i] * n + j0;
      const uint64_t q = a->primes[a->src_prime[i]].q, w = shat_inv[2 * i], ws = shat_inv[2 * i + 1];
      if (prescaled)
        for (int64_t j = 0; j < bl; ++j) y[i][j] = x[j] & ~FH_CKKS_KS_FLAG;
      else
        for (int64_t j = 0; j < bl; ++j) y[i][j] = fh_shoup_mul(x[j], w, ws, q);
    }
    if (center && !direct) {
      for (int64_t j = 0; j < bl; ++j) v[j] = 0;
      for (int i = 0; i < ns; ++i) {
        const uint64_t half = a->primes[a->src_prime[i]].q >> 1; /* (s_i - 1) / 2: s_i is odd */
        for (int64_t j = 0; j < bl; ++j) v[j] += y[i][j] > half;
      }
    }
    for (int t = 0; t < ndst; ++t) {
      const fh_modulus m = a->primes[a->dst_prime[t]].bar; /* a copy: registers, not reloads */
      const uint64_t *row = mat + (int64_t)t * ns;
      uint64_t *restrict o = out + (int64_t)a->dst_row[t] * n + j0;
      const uint64_t st = smt[t];
      if (ns == 1 && row[0] == 1) {
        /* one source prime (a rescale, a mod-down from one P prime): y mod t (Shoup's
         * product by 1: any 64-bit y), minus S mod t where the centred lift is negative */
        const uint64_t s0 = a->primes[a->src_prime[0]].q, half = s0 >> 1;
        const uint64_t one_s = fh_shoup_precompute(1, m.q), tq = m.q;
        const uint64_t *yx = direct ? in + (int64_t)a->src_row[0] * n + j0 : y[0];
        if (ifma && fh__ckks_bconv1_row_ifma(o, yx, bl, s0, center, st, tq)) continue;
        if (s0 < tq) {
          for (int64_t j = 0; j < bl; ++j) {
            const uint64_t x = yx[j];
            o[j] = center && x > half ? fh_mod_sub(x, st, tq) : x;
          }
        } else {
          for (int64_t j = 0; j < bl; ++j) {
            const uint64_t x = yx[j];
            const uint64_t r = fh_shoup_mul(x, 1, one_s, tq);
            o[j] = center && x > half ? fh_mod_sub(r, st, tq) : r;
          }
        }
        continue;
      }
      for (int64_t j = 0; j < bl; ++j) {
        /* each product < 2^124: reduce every 16 terms */
        uint64_t acc_r = 0;
        for (int i0 = 0; i0 < ns; i0 += 16) {
          unsigned __int128 acc = 0;
          const int i1 = i0 + 16 < ns ? i0 + 16 : ns;
          for (int i = i0; i < i1; ++i) acc += (unsigned __int128)y[i][j] * row[i];
          acc_r = fh_mod_add(acc_r, fh_barrett128((uint64_t)acc, (uint64_t)(acc >> 64), &m), m.q);
        }
        if (center && v[j]) acc_r = fh_mod_sub(acc_r, fh_mod_mul(v[j], st, &m), m.q);
        o[j] = acc_r;
      }
    }
  }
  fh_free(ys);
  return FH_OK;
}
static fh_status cpu_bconv(const void *argp) { return bconv_impl(argp, false); }

/* The NTT-domain automorphism X -> X^galois as the source slot of every slot
 * (fh_ckks_automorph_src), once per launch: *perm NULL for galois 0 or 1 (none), else a new
 * array the caller frees (fh_free); `what` names the kernel in the out-of-memory error. */
static fh_status ntt_perm(uint64_t galois, int log_n, const char *what, uint32_t **perm) {
  *perm = NULL;
  if (galois <= 1) return FH_OK;
  const int64_t n = (int64_t)1 << log_n;
  uint32_t *p = fh_malloc(sizeof *p * (size_t)n);
  if (p == NULL) return fh_error_set(FH_ERR_MEMORY, "%s: out of memory", what);
  for (int64_t s = 0; s < n; ++s) p[s] = fh_ckks_automorph_src((uint32_t)s, galois, log_n);
  *perm = p;
  return FH_OK;
}

/* ---- key-switching inner product ---------------------------------------------------- */
/* One output row of the inner product: o[j] = sum_d dig[d][src(j)] key[d][j] (src(j) = perm[j],
 * or j without perm). Sums of 4 products < 4 q^2 < q 2^64 (q < 2^62): one Montgomery reduction
 * per 4 digits, partial results added mod q; the chunk's rows in locals, so the inner loop is
 * two loads, a multiply and an add per product. Inlined twice: with perm NULL (contiguous) and
 * with it (the rotation's automorphism read in place, FH_K_CKKS_KS_INNER's galois). */
static inline void ks_inner_row(uint64_t *restrict o, const uint64_t *const *dig, const uint64_t *const *key, int nd,
                                int64_t n, uint64_t q, uint64_t qi, const uint32_t *perm) {
  if (nd == 0) memset(o, 0, sizeof(uint64_t) * (size_t)n);
  for (int d0 = 0; d0 < nd; d0 += 4) {
    const int cnt = nd - d0 < 4 ? nd - d0 : 4;
    const uint64_t *p0 = dig[d0], *k0 = key[d0];
    const uint64_t *p1 = cnt > 1 ? dig[d0 + 1] : p0, *k1 = cnt > 1 ? key[d0 + 1] : k0;
    const uint64_t *p2 = cnt > 2 ? dig[d0 + 2] : p0, *k2 = cnt > 2 ? key[d0 + 2] : k0;
    const uint64_t *p3 = cnt > 3 ? dig[d0 + 3] : p0, *k3 = cnt > 3 ? key[d0 + 3] : k0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t s = perm ? (int64_t)perm[j] : j;
      unsigned __int128 acc = (unsigned __int128)p0[s] * k0[j];
      if (cnt > 1) acc += (unsigned __int128)p1[s] * k1[j];
      if (cnt > 2) acc += (unsigned __int128)p2[s] * k2[j];
      if (cnt > 3) acc += (unsigned __int128)p3[s] * k3[j];
      const uint64_t r = fh_mont_reduce((uint64_t)acc, (uint64_t)(acc >> 64), q, qi);
      o[j] = d0 == 0 ? r : fh_mod_add(o[j], r, q);
    }
  }
}

static fh_status cpu_ks_inner(const void *argp) {
  const fh_ckks_ks_args *a = argp;
  if (a->nsteps > 0) { /* the steps one by one: the words of one launch each */
    fh_status st = FH_OK;
    for (int s = 0; s < a->nsteps && s < FH_CKKS_KS_MAX_STEPS && st == FH_OK; ++s) {
      fh_ckks_ks_args one = *a;
      one.nsteps = 0;
      one.out = a->step_out[s];
      one.key = a->step_key[s];
      one.galois = a->step_galois[s];
      st = cpu_ks_inner(&one);
    }
    return st;
  }
  const int64_t n = (int64_t)1 << a->log_n;
  const int nd = a->ndigits;
  const bool ifma = fh_cpu_simd()[0] == 'a'; /* "avx512ifma" */
  /* a rotation's automorphism: the source slot of every output slot, once per launch */
  uint32_t *perm = NULL;
  fh_status pst = ntt_perm(a->galois, a->log_n, "ckks_ks_inner", &perm);
  if (pst != FH_OK) return pst;
  /* row pointers up front: the stores below would otherwise make the compiler reload
   * every field of *a in the inner loop (uint64_t and int64_t may alias) */
  FH_FOR_ROWS(a->ngroups, a->nlimbs, n) {
      const uint64_t *dig[FH_CKKS_MAX_DIGITS], *key[FH_CKKS_MAX_DIGITS];
      const fh_ckks_prime *pr = &a->primes[a->prime[l]];
      const uint64_t q = pr->q, qi = pr->qinv;
      for (int d = 0; d < nd; ++d) dig[d] = a->digits + g * a->digits_gs + d * a->digit_stride + (int64_t)l * n;
      for (int c = 0; c < 2; ++c) {
        uint64_t *restrict o = a->out + g * a->out_gs + c * a->out_cs + (int64_t)l * n;
        for (int d = 0; d < nd; ++d) key[d] = a->key + d * a->key_ds + c * a->key_cs + (int64_t)a->key_row[l] * n;
        if (perm) ks_inner_row(o, dig, key, nd, n, q, qi, perm);
        else if (!(ifma && nd > 0 && fh__ckks_ks_inner_row_ifma(o, dig, key, nd, a->log_n, pr)))
          ks_inner_row(o, dig, key, nd, n, q, qi, NULL);
      }
    }
  fh_free(perm);
  return FH_OK;
}

/* ---- automorphisms -------------------------------------------------------------------- */
static fh_status cpu_automorph(const void *argp) {
  const fh_ckks_automorph_args *a = argp;
  const int64_t n = (int64_t)1 << a->log_n;
  const uint64_t m2 = 2 * (uint64_t)n, gal = a->galois;
  /* the permutation once per launch (it is the same for every row): NTT domain, the source
   * slot of each output slot; coefficient domain, the destination of each input coefficient
   * with its sign in the top bit */
  uint32_t *perm = fh_malloc(sizeof *perm * (size_t)n);
  if (perm == NULL) return fh_error_set(FH_ERR_MEMORY, "ckks_automorph: out of memory");
  if (a->ntt_domain) {
    for (int64_t s = 0; s < n; ++s) perm[s] = fh_ckks_automorph_src((uint32_t)s, gal, a->log_n);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint64_t e = ((uint64_t)i * gal) & (m2 - 1);
      perm[i] = e < (uint64_t)n ? (uint32_t)e : (uint32_t)(e - (uint64_t)n) | 0x80000000u;
    }
  }
  FH_FOR_ROWS(a->ngroups, a->nlimbs, n) {
      uint64_t q = a->primes[a->prime[l]].q;
      uint64_t *o = a->out + g * a->out_gs + (int64_t)l * n;
      const uint64_t *x = a->in + g * a->in_gs + (int64_t)l * n;
      if (a->ntt_domain) {
        for (int64_t s = 0; s < n; ++s) o[s] = x[perm[s]];
      } else {
        for (int64_t i = 0; i < n; ++i) {
          uint32_t d = perm[i];
          if (d & 0x80000000u) o[d & 0x7fffffffu] = fh_mod_neg(x[i], q);
          else o[d] = x[i];
        }
      }
    }
  fh_free(perm);
  return FH_OK;
}

/* ---- special FFT (canonical embedding) --------------------------------------------------
 * v is an array of `size` = N/2 complex numbers (re, im pairs); rot[j] = 5^j
 * mod 2N; ksi[2k], ksi[2k+1] = cos, sin (2 pi k / 2N). */
static void bitrev_complex(double *v, int64_t size) {
  for (int64_t i = 1, j = 0; i < size; ++i) {
    int64_t bit = size >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      double r = v[2 * i], im = v[2 * i + 1];
      v[2 * i] = v[2 * j];
      v[2 * i + 1] = v[2 * j + 1];
      v[2 * j] = r;
      v[2 * j + 1] = im;
    }
  }
}

/* Evaluation: v_j <- sum_i v_i zeta^(5^j i) (decode direction). */
static void fft_special(double *v, int64_t size, uint64_t m2, const uint64_t *rot, const double *ksi) {
  bitrev_complex(v, size);
  for (int64_t len = 2; len <= size; len <<= 1) {
    int64_t lenh = len >> 1;
    uint64_t lenq = (uint64_t)len << 2, gap = m2 / lenq;
    for (int64_t i = 0; i < size; i += len)
      for (int64_t j = 0; j < lenh; ++j) {
        uint64_t idx = (fh_ckks_fft_exponent(rot[j], m2) % lenq) * gap;
        double wr = ksi[2 * idx], wi = ksi[2 * idx + 1];
        double *u = v + 2 * (i + j), *t = v + 2 * (i + j + lenh);
        double vr = t[0] * wr - t[1] * wi, vi = t[0] * wi + t[1] * wr;
        t[0] = u[0] - vr;
        t[1] = u[1] - vi;
        u[0] += vr;
        u[1] += vi;
      }
  }
}

/* Interpolation: the inverse of fft_special (encode direction). */
static void fft_special_inv(double *v, int64_t size, uint64_t m2, const uint64_t *rot, const double *ksi) {
  for (int64_t len = size; len >= 2; len >>= 1) {
    int64_t lenh = len >> 1;
    uint64_t lenq = (uint64_t)len << 2, gap = m2 / lenq;
    for (int64_t i = 0; i < size; i += len)
      for (int64_t j = 0; j < lenh; ++j) {
        uint64_t idx = (lenq - (fh_ckks_fft_exponent(rot[j], m2) % lenq)) * gap;
        double wr = ksi[2 * idx], wi = ksi[2 * idx + 1];
        double *u = v + 2 * (i + j), *t = v + 2 * (i + j + lenh);
        double sr = u[0] + t[0], si = u[1] + t[1];
        double dr = u[0] - t[0], di = u[1] - t[1];
        u[0] = sr;
        u[1] = si;
        t[0] = dr * wr - di * wi;
        t[1] = dr * wi + di * wr;
      }
  }
  bitrev_complex(v, size);
  double inv = 1.0 / (double)size;
  for (int64_t i = 0; i < 2 * size; ++i) v[i] *= inv;
}

/* Round x to the nearest integer and reduce it modulo q exactly, for any
 * finite double (NaN and infinities give 0; the host rejects them). */
static uint64_t round_mod(double x, const fh_modulus *m) {
  if (!isfinite(x)) return 0;
  double r = nearbyint(x); /* ties to even, the default rounding mode */
  double ax = fabs(r);
  uint64_t res;
  if (ax < 0x1p63) {
    res = fh_barrett128((uint64_t)ax, 0, m);
  } else {
    /* |r| = M * 2^e with M < 2^53 (r is an integer: its ulp is >= 2^11) */
    int e = 0;
    double f = frexp(ax, &e);
    uint64_t mant = (uint64_t)ldexp(f, 53);
    uint64_t p2 = fh_mod_pow(2, (uint64_t)(e - 53), m);
    res = fh_mod_mul(fh_barrett128(mant, 0, m), p2, m);
  }
  return r < 0 ? fh_mod_neg(res, m->q) : res;
}

static fh_status cpu_encode(const void *argp) {
  const fh_ckks_encode_args *a = argp;
  const int64_t n = (int64_t)1 << a->log_n, slots = n / 2;
  const uint64_t m2 = 2 * (uint64_t)n;
  FH_PARALLEL_FOR(a->ngroups * n)
  for (int64_t g = 0; g < a->ngroups; ++g) {
    double *w = a->work + g * a->work_gs;
    const double *in = a->in + g * a->in_gs;
    for (int64_t j = 0; j < slots; ++j) {
      bool have = j < a->nslots_in;
      w[2 * j] = have ? (a->in_complex ? in[2 * j] : in[j]) : 0.0;
      w[2 * j + 1] = have && a->in_complex ? in[2 * j + 1] : 0.0;
      if (fh_ckks_slot_conjugated(a->rot_group[j])) w[2 * j + 1] = -w[2 * j + 1];
    }
    fft_special_inv(w, slots, m2, a->rot_group, a->ksi);
    for (int l = 0; l < a->nlimbs; ++l) {
      const fh_modulus *m = &a->primes[a->prime[l]].bar;
      uint64_t *o = a->out + g * a->out_gs + (int64_t)l * n;
      for (int64_t i = 0; i < slots; ++i) {
        o[i] = round_mod(w[2 * i] * a->scale, m);
        o[i + slots] = round_mod(w[2 * i + 1] * a->scale, m);
      }
    }
  }
  return FH_OK;
}

/* ---- decoding: exact CRT ------------------------------------------------------------------ */
/* x = x * m + add over `len` words; returns the new length. */
static int big_muladd(uint64_t *x, int len, uint64_t m, uint64_t add) {
  unsigned __int128 carry = add;
  for (int i = 0; i < len; ++i) {
    unsigned __int128 t = (unsigned __int128)x[i] * m + carry;
    x[i] = (uint64_t)t;
    carry = t >> 64;
  }
  if (carry) x[len++] = (uint64_t)carry;
  return len;
}

static int big_cmp(const uint64_t *a, int la, const uint64_t *b, int lb) {
  while (la > 0 && a[la - 1] == 0) --la;
  while (lb > 0 && b[lb - 1] == 0) --lb;
  if (la != lb) return la < lb ? -1 : 1;
  for (int i = la - 1; i >= 0; --i)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

/* r = a - b (a >= b), len words */
static void big_sub(uint64_t *r, const uint64_t *a, int la, const uint64_t *b, int lb) {
  uint64_t borrow = 0;
  for (int i = 0; i < la; ++i) {
    uint64_t bi = i < lb ? b[i] : 0;
    uint64_t d = a[i] - bi - borrow;
    borrow = (a[i] < bi) || (a[i] - bi < borrow);
    r[i] = d;
  }
}

static double big_to_double(const uint64_t *x, int len) {
  while (len > 0 && x[len - 1] == 0) --len;
  if (len == 0) return 0.0;
  /* the top three words carry 129+ significant bits: more than enough */
  double r = 0;
  for (int i = len - 1; i >= 0 && i >= len - 3; --i) r += ldexp((double)x[i], 64 * i);
  return r;
}

static fh_status cpu_decode(const void *argp) {
  const fh_ckks_decode_args *a = argp;
  const int64_t n = (int64_t)1 << a->log_n, slots = n / 2;
  const uint64_t m2 = 2 * (uint64_t)n;
  const int k = a->nlimbs;
  const int nq = a->nq, first = nq - k;
  for (int l = 0; l < k; ++l)
    if (a->prime[l] != first + l)
      return fh_error_set(FH_ERR_EXECUTION, "ckks_decode: row %d is prime %d, expected %d (the active Q rows)", l,
                          a->prime[l], first + l);
  /* Q and floor(Q/2) as big integers (k + 1 words) */
  uint64_t Q[FH_CKKS_MAX_PRIMES + 1] = {1}, H[FH_CKKS_MAX_PRIMES + 1];
  int lq = 1;
  for (int l = 0; l < k; ++l) lq = big_muladd(Q, lq, a->primes[first + l].q, 0);
  for (int i = lq - 1, carry = 0; i >= 0; --i) {
    H[i] = (Q[i] >> 1) | ((uint64_t)carry << 63);
    carry = (int)(Q[i] & 1);
  }
  /* Fast path: the first r primes of the reversed chain whose product Q'
   * stays below 2^126 give the centred value x' modulo Q' in 128-bit
   * arithmetic; when x' agrees with every other active residue, x' is the
   * centred representative modulo Q (CRT uniqueness, |x'| < Q'/2 <= Q/2),
   * so typical plaintexts cost O(k) per coefficient. Otherwise the full
   * multi-word reconstruction below runs. */
  int r_fast = 0;
  unsigned __int128 qf = 1;
  while (r_fast < k && r_fast < 8) {
    uint64_t q = a->primes[nq - 1 - r_fast].q;
    if (qf > (((unsigned __int128)1) << 126) / q) break;
    qf *= q;
    ++r_fast;
  }
  const double inv_scale = 1.0 / a->scale;
  FH_PARALLEL_FOR(a->ngroups * n * k)
  for (int64_t g = 0; g < a->ngroups; ++g) {
    const uint64_t *in = a->in_real ? NULL : a->in + g * a->in_gs;
    const double *in_real = a->in_real ? a->in_real + g * a->in_gs : NULL;
    double *w = a->work + g * a->work_gs;
    for (int64_t i = 0; i < n; ++i) {
      double val = 0;
      bool done = false;
      if (in_real) {
        val = in_real[i];
        done = true;
      } else if (k == 1) {
        uint64_t x = in[i], q = a->primes[first].q;
        val = x > q / 2 ? -(double)(q - x) : (double)x;
        done = true;
      } else if (r_fast >= 2) {
        /* Garner over r_fast primes into 128 bits */
        uint64_t v[8];
        unsigned __int128 x = in[(int64_t)(k - 1) * n + i], prod = a->primes[nq - 1].q;
        v[0] = (uint64_t)x;
        for (int r = 1; r < r_fast; ++r) {
          const fh_modulus *m = &a->primes[nq - 1 - r].bar;
          const uint64_t *gr = a->garner + (int64_t)r * nq;
          uint64_t s = 0;
          for (int j = 0; j < r; ++j) s = fh_mod_add(s, fh_mod_mul(v[j], gr[j], m), m->q);
          v[r] = fh_mod_mul(fh_mod_sub(in[(int64_t)(k - 1 - r) * n + i], s, m->q), gr[r], m);
          x += (unsigned __int128)v[r] * prod;
          prod *= m->q;
        }
        bool neg = x > qf / 2;
        unsigned __int128 mag = neg ? qf - x : x;
        bool ok = true;
        for (int r = r_fast; r < k && ok; ++r) {
          const fh_modulus *m = &a->primes[nq - 1 - r].bar;
          uint64_t res = fh_barrett128((uint64_t)mag, (uint64_t)(mag >> 64), m);
          if (neg) res = fh_mod_neg(res, m->q);
          ok = res == in[(int64_t)(k - 1 - r) * n + i];
        }
        if (ok) {
          val = neg ? -(double)mag : (double)mag;
          done = true;
        }
      }
      if (!done) {
        uint64_t v[FH_CKKS_MAX_PRIMES], X[FH_CKKS_MAX_PRIMES + 1], D[FH_CKKS_MAX_PRIMES + 1];
        /* Garner over the reversed chain r_j = q_{nq-1-j} (row k-1-j):
         * x = v_0 + v_1 r_0 + v_2 r_0 r_1 + ... */
        v[0] = in[(int64_t)(k - 1) * n + i];
        for (int r = 1; r < k; ++r) {
          const fh_modulus *m = &a->primes[nq - 1 - r].bar;
          const uint64_t *gr = a->garner + (int64_t)r * nq;
          uint64_t s = 0;
          for (int j = 0; j < r; ++j) s = fh_mod_add(s, fh_mod_mul(v[j], gr[j], m), m->q);
          v[r] = fh_mod_mul(fh_mod_sub(in[(int64_t)(k - 1 - r) * n + i], s, m->q), gr[r], m);
        }
        X[0] = v[k - 1];
        int lx = 1;
        for (int r = k - 2; r >= 0; --r) lx = big_muladd(X, lx, a->primes[nq - 1 - r].q, v[r]);
        if (big_cmp(X, lx, H, lq) > 0) {
          big_sub(D, Q, lq, X, lx);
          val = -big_to_double(D, lq);
        } else {
          val = big_to_double(X, lx);
        }
      }
      /* coefficient i -> real part of w_i; i + N/2 -> imaginary part */
      if (i < slots) w[2 * i] = val * inv_scale;
      else w[2 * (i - slots) + 1] = val * inv_scale;
    }
    fft_special(w, slots, m2, a->rot_group, a->ksi);
    for (int64_t j = 0; j < slots; ++j)
      if (fh_ckks_slot_conjugated(a->rot_group[j])) w[2 * j + 1] = -w[2 * j + 1];
    double *o = a->out + g * a->out_gs;
    if (a->out_complex) {
      if (o != w) memcpy(o, w, sizeof(double) * 2 * (size_t)slots);
    } else {
      for (int64_t j = 0; j < slots; ++j) o[j] = w[2 * j];
    }
  }
  return FH_OK;
}

/* ---- mod-up of every digit: one base conversion per digit -------------------------------- */
/* in, in_gs: the sources (a->in, or prescaled: the scaled rows of fh_ckks_ks_core_args) */
static fh_status modup_impl(const fh_ckks_modup_args *a, const uint64_t *in, int64_t in_gs, bool prescaled) {
  const int64_t n = (int64_t)1 << a->log_n;
  for (int j = 0; j < a->ndigits; ++j) {
    fh_ckks_bconv_args b;
    memset(&b, 0, sizeof b);
    b.out = a->out + (int64_t)j * a->out_ds;
    b.in = in;
    b.out_gs = a->out_gs;
    b.in_gs = in_gs;
    b.ngroups = a->ngroups;
    b.nsrc = a->nsrc[j];
    b.log_n = a->log_n;
    b.primes = a->primes;
    b.consts = a->consts[j];
    b.copy_src = 1;
    b.center = a->center;
    for (int i = 0; i < b.nsrc; ++i) {
      b.src_row[i] = b.src_out_row[i] = a->first[j] + i;
      b.src_prime[i] = a->prime[a->first[j] + i];
    }
    for (int r = 0; r < a->nrows; ++r) {
      if (r >= a->first[j] && r < a->first[j] + a->nsrc[j]) continue;
      b.dst_prime[b.ndst] = a->prime[r];
      b.dst_row[b.ndst] = r;
      b.ndst++;
    }
    (void)n;
    fh_status st = bconv_impl(&b, prescaled);
    if (st != FH_OK) return st;
  }
  return FH_OK;
}
static fh_status cpu_modup(const void *argp) {
  const fh_ckks_modup_args *a = argp;
  return modup_impl(a, a->in, a->in_gs, false);
}

/* ---- key-switch core: mod-up, NTT, inner product in turn ---------------------------------- */
static fh_status cpu_ks_core(const void *argp) {
  const fh_ckks_ks_core_args *a = argp;
  const fh_ckks_modup_args *u = &a->up;
  const char *why = fh_ckks_ks_core_prescaled_refusal(a, false);
  if (why) return fh_error_set(FH_ERR_EXECUTION, "%s", why);
  /* prescaled: the conversions from the scaled rows (the own rows they copy are then
   * replaced by in_ntt's, which prescaled requires) */
  fh_status st = a->prescaled ? modup_impl(u, a->scaled, a->scaled_gs, true) : cpu_modup(u);
  if (st != FH_OK) return st;
  const int64_t n = (int64_t)1 << u->log_n;
  fh_ckks_ntt_args t;
  memset(&t, 0, sizeof t);
  t.in_gs = t.out_gs = u->out_ds;
  t.log_n = u->log_n;
  t.primes = u->primes;
  t.ntt = a->ntt;
  for (int64_t g = 0; g < u->ngroups && st == FH_OK; ++g) {
    uint64_t *D = u->out + g * u->out_gs;
    if (a->in_ntt == NULL) { /* every row of every digit */
      t.out = D;
      t.in = t.out;
      t.ngroups = u->ndigits;
      t.nlimbs = u->nrows;
      memcpy(t.prime, u->prime, sizeof(int32_t) * (size_t)u->nrows);
      st = cpu_ntt(&t);
      continue;
    }
    /* the rows before and after each digit's own rows, which are the input's NTT rows */
    t.ngroups = 1;
    for (int j = 0; j < u->ndigits && st == FH_OK; ++j) {
      uint64_t *Dj = D + j * u->out_ds;
      const int f = u->first[j], e = f + u->nsrc[j];
      const int lo[2] = {0, e}, hi[2] = {f, u->nrows};
      for (int k = 0; k < 2 && st == FH_OK; ++k) {
        if (hi[k] <= lo[k]) continue;
        t.out = Dj + lo[k] * n;
        t.in = t.out;
        t.nlimbs = hi[k] - lo[k];
        memcpy(t.prime, u->prime + lo[k], sizeof(int32_t) * (size_t)t.nlimbs);
        st = cpu_ntt(&t);
      }
      memcpy(Dj + f * n, a->in_ntt + g * a->in_ntt_gs + f * n, sizeof(uint64_t) * (size_t)(e - f) * (size_t)n);
    }
  }
  if (st != FH_OK || a->key == NULL) return st;
  fh_ckks_ks_args k;
  fh_ckks_ks_args_of_core(a, &k);
  return cpu_ks_inner(&k);
}

/* ---- mod-down to the NTT domain: conversion, NTT, (a - t) P^-1 in turn --------------------- */
static fh_status cpu_moddown(const void *argp) {
  const fh_ckks_moddown_args *a = argp;
  const fh_ckks_bconv_args *b = &a->conv;
  const int64_t n = (int64_t)1 << b->log_n;
  const char *why = fh_ckks_moddown_add_b_refusal(a);
  if (!why) why = fh_ckks_moddown_prescaled_refusal(a, false);
  if (why) return fh_error_set(FH_ERR_EXECUTION, "%s", why);
  fh_status st = bconv_impl(b, a->prescaled != 0);
  if (st != FH_OK) return st;
  /* fused rescale: y0, the unrescaled result's row 0 in coefficients, from the conversion's
   * row 0 (before its NTT), then P [y0]_{q_l} added to the conversion's other rows */
  const int l0 = a->rescale ? 1 : 0;
  if (a->rescale) {
    if (b->ndst < 2 || (a->add[0] == NULL) != (a->v0 == NULL) || (a->add[1] == NULL) != (a->v0 == NULL))
      return fh_error_set(FH_ERR_EXECUTION, "ckks_moddown: a fused rescale needs two Q rows, and add with v0 or neither");
    /* y0 into conv.in's scratch row nsrc + 1, as CUDA's md0r does; then the lift row by row */
    const uint64_t q0 = b->primes[b->dst_prime[0]].q, w0 = a->c_const[0], ws0 = a->c_shoup[0];
    FH_FOR_ROWS(b->ngroups, 1, n) {
      (void)l;
      const uint64_t *u0 = b->in + g * b->in_gs + (int64_t)b->nsrc * n;
      const uint64_t *v0 = a->v0 ? a->v0 + (g / 2) * a->v0_gs + (g % 2) * a->v0_cs : NULL;
      const uint64_t *t0 = b->out + g * b->out_gs + (int64_t)b->dst_row[0] * n;
      uint64_t *y0 = (uint64_t *)b->in + g * b->in_gs + (int64_t)(b->nsrc + 1) * n;
      for (int64_t j = 0; j < n; ++j)
        y0[j] = fh_ckks_rescale_y0(u0[j], t0[j], v0 ? v0[j] : 0, w0, ws0, q0);
    }
    FH_FOR_ROWS(b->ngroups, b->ndst - 1, n) {
      const int r = l + 1;
      const fh_ckks_prime *pr = &b->primes[b->dst_prime[r]];
      const uint64_t *y0 = b->in + g * b->in_gs + (int64_t)(b->nsrc + 1) * n;
      uint64_t *tr = b->out + g * b->out_gs + (int64_t)b->dst_row[r] * n;
      for (int64_t j = 0; j < n; ++j) {
        uint64_t lift = fh_mont_mul(y0[j], a->pr[r], pr->q, pr->qinv);
        if (y0[j] > q0 / 2) lift = fh_mod_sub(lift, a->pq[r], pr->q);
        tr[j] = fh_mod_add(tr[j], lift, pr->q);
      }
    }
  }
  fh_ckks_ntt_args t;
  memset(&t, 0, sizeof t);
  t.out = b->out;
  t.in = b->out;
  t.out_gs = t.in_gs = b->out_gs;
  t.ngroups = b->ngroups;
  t.nlimbs = b->ndst - l0;
  t.log_n = b->log_n;
  t.primes = b->primes;
  t.ntt = a->ntt;
  t.rows = 1;
  for (int l = l0; l < b->ndst; ++l) {
    t.prime[l - l0] = b->dst_prime[l];
    t.in_row[l - l0] = t.out_row[l - l0] = b->dst_row[l];
  }
  if ((st = cpu_ntt(&t)) != FH_OK) return st;
  /* add read through an automorphism: the source slot of every slot, once per launch */
  uint32_t *perm = NULL;
  if ((st = ntt_perm(a->add_galois, b->log_n, "ckks_moddown", &perm)) != FH_OK) return st;
  FH_FOR_ROWS(b->ngroups, b->ndst, n) {
    if (l < l0) continue;
    const int64_t gg = g, gp = gg / 2;
    const int c = (int)(gg % 2);
    {
      const uint64_t q = b->primes[b->dst_prime[l]].q, w = a->c_const[l], ws = a->c_shoup[l];
      const uint64_t *x = a->a + gg * a->a_gs + (int64_t)l * n;
      const uint64_t *y = b->out + gg * b->out_gs + (int64_t)b->dst_row[l] * n;
      const uint64_t *z = a->add[c] ? a->add[c] + gp * a->add_gs + (int64_t)l * n : NULL;
      uint64_t *o = a->out[c] + gp * a->out_gs + (int64_t)(l - l0) * n;
      /* add as a tensor product: A0, A1 = add[0], add[1], B0, B1 = add_b[0], add_b[1] */
      const int64_t zo = gp * a->add_gs + (int64_t)l * n;
      const uint64_t *za0 = a->add_b[0] ? a->add[0] + zo : NULL, *za1 = za0 ? a->add[1] + zo : NULL;
      const uint64_t *zb0 = za0 ? a->add_b[0] + zo : NULL, *zb1 = za0 ? a->add_b[1] + zo : NULL;
      const int zk = c == 0 ? FH_CKKS_PROD_00 : FH_CKKS_PROD_X;
      const uint64_t qi = b->primes[b->dst_prime[l]].qinv;
      for (int64_t j = 0; j < n; ++j) {
        uint64_t r = fh_shoup_mul(x[j] + (q - y[j]), w, ws, q);
        if (za0) r = fh_mod_add(r, fh_ckks_tensor_word(zk, za0[j], za1[j], zb0[j], zb1[j], q, qi), q);
        else r = z ? fh_mod_add(r, z[perm ? perm[j] : j], q) : r;
        o[j] = l0 ? fh_shoup_mul(r, a->d_const[l], a->d_shoup[l], q) : r;
      }
    }
  }
  fh_free(perm);
  return FH_OK;
}

/* ---- a linear transform's sum over QP (double hoisting) --------------------------------- */

/* The CPU's linear-transform sum works on chunks of LT_CHUNK coefficients of a row: with
 * AVX-512 IFMA (primes below 2^50) each keyed step gathers its digits' chunk through the
 * permutation into per-thread scratch and takes the vector inner product with the key
 * (fh__ckks_ks_inner_row_ifma), then the scalar pass adds P x, multiplies by the plaintext
 * and accumulates; otherwise the scalar loop does it all. */
#define LT_CHUNK 512
static fh_status cpu_lt(const void *argp) {
  const fh_ckks_lt_args *a = argp;
  const int64_t n = (int64_t)1 << a->log_n;
  const int nd = a->ndigits, ns = a->nsteps;
  if (ns <= 0 || a->ngroups <= 0) return FH_OK;
  const int64_t chunk = n < LT_CHUNK ? n : LT_CHUNK;
  const bool ifma = fh_cpu_simd()[0] == 'a' && nd > 0 && chunk >= 8; /* "avx512ifma" */
  const int nthreads = fh_num_threads() > 0 ? fh_num_threads() : 1;
  /* each keyed step's permutation once per launch (the same for every row), and each thread's
   * scratch: nd gathered digit chunks and the two inner products */
  uint32_t *perm = fh_malloc(sizeof *perm * (size_t)n * (size_t)ns);
  uint64_t *scratch = ifma ? fh_malloc(sizeof *scratch * (size_t)nthreads * (size_t)(nd + 2) * (size_t)chunk) : NULL;
  if (perm == NULL || (ifma && scratch == NULL)) {
    fh_free(perm);
    fh_free(scratch);
    return fh_error_set(FH_ERR_MEMORY, "ckks_lt: out of memory");
  }
  for (int s = 0; s < ns; ++s)
    for (int64_t i = 0; i < n; ++i)
      perm[(int64_t)s * n + i] = a->key[s] ? fh_ckks_automorph_src((uint32_t)i, a->galois[s], a->log_n) : (uint32_t)i;
  int log_chunk = 0;
  while (((int64_t)1 << log_chunk) < chunk) ++log_chunk;
  FH_FOR_ROWS(a->ngroups, a->nrows, n) {
      const fh_ckks_prime *pr = &a->primes[a->prime[l]];
      const uint64_t q = pr->q, qi = pr->qinv;
      const bool qrow = l < a->nq_rows, vec = ifma && q < ((uint64_t)1 << 50);
      const uint64_t pm = qrow ? a->pmod[l] : 0, pms = qrow ? a->pmod_shoup[l] : 0;
      uint64_t *restrict o0 = a->out + g * a->out_gs + (int64_t)l * n, *restrict o1 = o0 + a->out_cs;
      const uint64_t *x0 = qrow ? a->x + g * a->x_gs + (int64_t)l * n : NULL, *x1 = qrow ? x0 + a->x_cs : NULL;
      const uint64_t *dig[FH_CKKS_MAX_DIGITS], *k0[FH_CKKS_MAX_DIGITS], *k1[FH_CKKS_MAX_DIGITS];
      const uint64_t *d0p = nd > 0 ? a->d + g * a->d_gs + (int64_t)l * n : NULL; /* digit 0's row */
      for (int d = 0; d < nd; ++d) dig[d] = d0p + d * a->d_ds;
#ifdef _OPENMP
      uint64_t *mine = vec ? scratch + (size_t)omp_get_thread_num() * (size_t)(nd + 2) * (size_t)chunk : NULL;
#else
      uint64_t *mine = vec ? scratch : NULL;
#endif
      for (int s = 0; s < ns; ++s) {
        const uint32_t *ps = perm + (int64_t)s * n;
        const uint64_t *pt = a->pt[s] + g * a->pt_gs[s] + (int64_t)l * n;
        const bool keyed = a->key[s] != NULL, first = s == 0 && !a->accumulate;
        for (int d = 0; keyed && d < nd; ++d) {
          k0[d] = a->key[s] + d * a->key_ds + (int64_t)a->key_row[l] * n;
          k1[d] = k0[d] + a->key_cs;
        }
        for (int64_t i0 = 0; i0 < n; i0 += chunk) {
          const uint64_t *t0v = NULL, *t1v = NULL;
          if (keyed && vec) { /* the chunk's inner products, vectorised */
            const uint64_t *g_[FH_CKKS_MAX_DIGITS], *kc0[FH_CKKS_MAX_DIGITS], *kc1[FH_CKKS_MAX_DIGITS];
            for (int d = 0; d < nd; ++d) {
              uint64_t *gd = mine + (size_t)d * (size_t)chunk;
              for (int64_t k = 0; k < chunk; ++k) gd[k] = dig[d][ps[i0 + k]];
              g_[d] = gd;
              kc0[d] = k0[d] + i0;
              kc1[d] = k1[d] + i0;
            }
            uint64_t *r0 = mine + (size_t)nd * (size_t)chunk, *r1 = r0 + chunk;
            fh__ckks_ks_inner_row_ifma(r0, g_, kc0, nd, log_chunk, pr);
            fh__ckks_ks_inner_row_ifma(r1, g_, kc1, nd, log_chunk, pr);
            t0v = r0;
            t1v = r1;
          }
          for (int64_t k = 0; k < chunk; ++k) {
            const int64_t i = i0 + k;
            const uint32_t src = ps[i];
            uint64_t t0, t1;
            if (t0v) { /* a keyed step: the vector inner products, then P x_0 as the scalar path adds it */
              t0 = x0 ? fh_mod_add(t0v[k], fh_shoup_mul(x0[src], pm, pms, q), q) : t0v[k];
              t1 = t1v[k];
            } else {
              fh_ckks_lt_terms(d0p, a->d_ds, keyed && nd > 0 ? k0[0] + i : NULL, a->key_ds, a->key_cs, nd, src, x0, x1, pm, pms, q,
                               qi, &t0, &t1);
            }
            const uint64_t v0 = fh_mont_mul(t0, pt[i], q, qi), v1 = fh_mont_mul(t1, pt[i], q, qi);
            o0[i] = first ? v0 : fh_mod_add(o0[i], v0, q);
            o1[i] = first ? v1 : fh_mod_add(o1[i], v1, q);
          }
        }
      }
    }
  fh_free(perm);
  fh_free(scratch);
  return FH_OK;
}

/* ---- small random rows from a keystream run ------------------------------------------------ */
static fh_status cpu_sample(const void *argp) {
  const fh_ckks_sample_args *a = argp;
  const int64_t n = a->n;
  const uint64_t tw = fh_ckks_ternary_words((uint64_t)n), gw = fh_ckks_gaussian_words((uint64_t)n);
  const uint64_t total = (uint64_t)a->nt * tw + (uint64_t)a->ng * gw;
  if (total == 0) return FH_OK;
  uint64_t *w = fh_malloc(sizeof *w * (size_t)total);
  if (w == NULL) return fh_error_set(FH_ERR_MEMORY, "ckks_sample: out of memory");
  /* the run's words, block after block (fh_chacha20_block: the code the CUDA kernel runs) */
  uint32_t blk[16];
  uint64_t done = 0;
  for (uint32_t b = a->pos.block; done < total; ++b) {
    fh_chacha20_block(a->pos.key, a->pos.nonce, b, blk);
    for (uint32_t k = b == a->pos.block ? a->pos.word : 0; k < 8 && done < total; ++k)
      w[done++] = (uint64_t)blk[2 * k] | (uint64_t)blk[2 * k + 1] << 32;
  }
  fh_ckks_wipe(blk, sizeof blk);
  for (int r = 0; r < a->nt; ++r)
    for (int64_t i = 0; i < n; ++i) a->out[r * n + i] = fh_ckks_ternary_of(w[r * tw + (uint64_t)i]);
  for (int k = 0; k < a->ng; ++k) {
    const uint64_t *g = w + (uint64_t)a->nt * tw + (uint64_t)k * gw;
    int64_t *o = a->out + (int64_t)(a->nt + k) * n;
    for (int64_t i = 0; i < n; ++i) o[i] = fh_ckks_gaussian_of(g[65 * (i / 64) + 1 + i % 64], g[65 * (i / 64)], (int)(i % 64), a->cdt);
  }
  fh_ckks_wipe(w, sizeof *w * (size_t)total);
  fh_free(w);
  return FH_OK;
}

const fh_cpu_kernel_fn fh__ckks_cpu_kernels[FH_K_CKKS_COUNT] = {
    cpu_ntt, cpu_intt, cpu_ew, cpu_tensor, cpu_bconv, cpu_ks_inner, cpu_automorph, cpu_encode, cpu_decode, cpu_modup,
    cpu_ks_core, cpu_moddown, cpu_lt, cpu_sample,
};
