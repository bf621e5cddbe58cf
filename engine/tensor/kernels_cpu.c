/* CPU implementations of the built-in tensor kernels (fh/kernels.h). Each
 * kernel walks the collapsed iteration space row by row: the last dimension
 * is the inner loop, outer offsets come from fh_iter_offset. */
#include <complex.h>
#include <math.h>
#include <string.h>

#include "fh/elem_convert.h"
#include "fh/internal.h"

/* Iterate rows of the iteration space: for each outer index, `body` runs
 * with `n` (row length) and the element offsets o0/o1/o2 of the row start. */
#define FOR_ROWS(it, s0, s1, s2, ...)                                      \
  do {                                                                      \
    fh_iter_shape _inner = *(it);                                           \
    int _last = (it)->ndim - 1;                                             \
    int64_t n = (it)->shape[_last];                                         \
    int64_t _rows = n ? (it)->numel / n : 0;                                \
    _inner.ndim = _last;                                                    \
    for (int64_t _r = 0; _r < _rows; ++_r) {                                \
      int64_t o0 = _last ? fh_iter_offset(&_inner, (s0), _r) : 0;           \
      int64_t o1 = (s1) && _last ? fh_iter_offset(&_inner, (s1), _r) : 0;   \
      int64_t o2 = (s2) && _last ? fh_iter_offset(&_inner, (s2), _r) : 0;   \
      (void)o1;                                                             \
      (void)o2;                                                             \
      __VA_ARGS__                                                           \
    }                                                                       \
  } while (0)

/* ---- fill / copy -------------------------------------------------------- */
static fh_status k_fill(const void *argp) {
  const fh_fill_args *a = argp;
  size_t es = fh_dtype_size((fh_dtype)a->dtype);
  FOR_ROWS(&a->it, a->out.stride, (const int64_t *)NULL, (const int64_t *)NULL, {
    char *d = a->out.data + o0 * (int64_t)es;
    int64_t st = a->out.stride[_last] * (int64_t)es;
    for (int64_t j = 0; j < n; ++j) memcpy(d + j * st, a->value, es);
  });
  return FH_OK;
}

static fh_status k_copy(const void *argp) {
  const fh_copy_args *a = argp;
  size_t des = fh_dtype_size((fh_dtype)a->dst_dtype), ses = fh_dtype_size((fh_dtype)a->src_dtype);
  bool same = a->dst_dtype == a->src_dtype;
  FOR_ROWS(&a->it, a->dst.stride, a->src.stride, (const int64_t *)NULL, {
    char *d = a->dst.data + o0 * (int64_t)des;
    const char *s = a->src.data + o1 * (int64_t)ses;
    int64_t ds = a->dst.stride[_last] * (int64_t)des, ss = a->src.stride[_last] * (int64_t)ses;
    if (same && ds == (int64_t)des && ss == (int64_t)ses) {
      memmove(d, s, (size_t)n * des);
    } else if (same) {
      for (int64_t j = 0; j < n; ++j) memcpy(d + j * ds, s + j * ss, des);
    } else {
      for (int64_t j = 0; j < n; ++j)
        fh_wide_store(a->dst_dtype, d + j * ds, fh_wide_load(a->src_dtype, s + j * ss));
    }
  });
  return FH_OK;
}

/* ---- elementwise -------------------------------------------------------- */
#define EW_INT(T, UT)                                                                 \
  static void ew_##T(const fh_ew_args *a) {                                          \
    T sc;                                                                             \
    memcpy(&sc, a->scalar, sizeof sc);                                                \
    FOR_ROWS(&a->it, a->out.stride, a->a.stride, a->b.stride, {                       \
      T *o = (T *)a->out.data + o0;                                                   \
      const T *x = (const T *)a->a.data + o1;                                         \
      const T *y = a->has_scalar ? NULL : (const T *)a->b.data + o2;                  \
      int64_t so = a->out.stride[_last], sx = a->a.stride[_last], sy = a->b.stride[_last]; \
      for (int64_t j = 0; j < n; ++j) {                                               \
        UT u = (UT)x[j * sx], v = y ? (UT)y[j * sy] : (UT)sc, r;                      \
        if (a->scalar_first) { UT t = u; u = v; v = t; }                              \
        switch (a->op) {                                                              \
          case FH_OP_ADD: r = u + v; break;                                           \
          case FH_OP_SUB: r = u - v; break;                                           \
          default: r = u * v; break;                                                  \
        }                                                                             \
        o[j * so] = (T)r;                                                             \
      }                                                                               \
    });                                                                               \
  }
EW_INT(uint8_t, uint32_t)
EW_INT(int32_t, uint32_t)
EW_INT(uint32_t, uint32_t)
EW_INT(int64_t, uint64_t)
EW_INT(uint64_t, uint64_t)

#define EW_FLOAT(T)                                                                   \
  static void ew_##T(const fh_ew_args *a) {                                          \
    T sc;                                                                             \
    memcpy(&sc, a->scalar, sizeof sc);                                                \
    FOR_ROWS(&a->it, a->out.stride, a->a.stride, a->b.stride, {                       \
      T *o = (T *)a->out.data + o0;                                                   \
      const T *x = (const T *)a->a.data + o1;                                         \
      const T *y = a->has_scalar ? NULL : (const T *)a->b.data + o2;                  \
      int64_t so = a->out.stride[_last], sx = a->a.stride[_last], sy = a->b.stride[_last]; \
      for (int64_t j = 0; j < n; ++j) {                                               \
        T u = x[j * sx], v = y ? y[j * sy] : sc, r;                                   \
        if (a->scalar_first) { T t = u; u = v; v = t; }                               \
        switch (a->op) {                                                              \
          case FH_OP_ADD: r = u + v; break;                                           \
          case FH_OP_SUB: r = u - v; break;                                           \
          case FH_OP_MUL: r = u * v; break;                                           \
          default: r = u / v; break;                                                  \
        }                                                                             \
        o[j * so] = r;                                                                \
      }                                                                               \
    });                                                                               \
  }
EW_FLOAT(float)
EW_FLOAT(double)

/* Complex arithmetic spelled out (no C99 complex division rules), so CUDA
 * computes the identical formulas. */
static void ew_complex(const fh_ew_args *a) {
  double sc[2];
  memcpy(sc, a->scalar, sizeof sc);
  FOR_ROWS(&a->it, a->out.stride, a->a.stride, a->b.stride, {
    double *o = (double *)a->out.data + 2 * o0;
    const double *x = (const double *)a->a.data + 2 * o1;
    const double *y = a->has_scalar ? NULL : (const double *)a->b.data + 2 * o2;
    int64_t so = 2 * a->out.stride[_last], sx = 2 * a->a.stride[_last], sy = 2 * a->b.stride[_last];
    for (int64_t j = 0; j < n; ++j) {
      double ur = x[j * sx], ui = x[j * sx + 1];
      double vr = y ? y[j * sy] : sc[0], vi = y ? y[j * sy + 1] : sc[1], rr, ri;
      if (a->scalar_first) {
        double t = ur; ur = vr; vr = t;
        t = ui; ui = vi; vi = t;
      }
      switch (a->op) {
        case FH_OP_ADD: rr = ur + vr; ri = ui + vi; break;
        case FH_OP_SUB: rr = ur - vr; ri = ui - vi; break;
        case FH_OP_MUL: rr = ur * vr - ui * vi; ri = ur * vi + ui * vr; break;
        default: {
          double d = vr * vr + vi * vi;
          rr = (ur * vr + ui * vi) / d;
          ri = (ui * vr - ur * vi) / d;
        }
      }
      o[j * so] = rr;
      o[j * so + 1] = ri;
    }
  });
}

static fh_status k_binary(const void *argp) {
  const fh_ew_args *a = argp;
  switch (a->dtype) {
    case FH_UINT8: ew_uint8_t(a); break;
    case FH_INT32: ew_int32_t(a); break;
    case FH_UINT32: ew_uint32_t(a); break;
    case FH_INT64: ew_int64_t(a); break;
    case FH_UINT64: ew_uint64_t(a); break;
    case FH_FLOAT32: ew_float(a); break;
    case FH_FLOAT64: ew_double(a); break;
    case FH_COMPLEX128: ew_complex(a); break;
    default: return fh_error_set(FH_ERR_TYPE, "binary kernel: unsupported dtype %s", fh_dtype_name(a->dtype));
  }
  return FH_OK;
}

/* neg = 0 - a through the binary kernels */
static fh_status k_unary(const void *argp) {
  fh_ew_args b = *(const fh_ew_args *)argp;
  b.op = FH_OP_SUB;
  b.has_scalar = 1;
  b.scalar_first = 1;
  memset(b.scalar, 0, sizeof b.scalar);
  return k_binary(&b);
}

/* ---- RNS ---------------------------------------------------------------- */
static fh_status k_rns(const void *argp) {
  const fh_rns_args *a = argp;
  const int64_t *sb = a->op == FH_RNS_NEG ? NULL : a->b.stride;
  int ld = a->limb_dim;
  /* the limb index of a row's elements: the limb dim is never the last
   * (n follows it), so it is constant along a row */
  fh_iter_shape inner = a->it;
  inner.ndim = a->it.ndim - 1;
  int64_t lstride_inner = 1;
  for (int d = inner.ndim - 1; d > ld; --d) lstride_inner *= inner.shape[d];
  FOR_ROWS(&a->it, a->out.stride, a->a.stride, sb, {
    const fh_modulus *m = &a->mod[(_r / lstride_inner) % a->it.shape[ld]];
    uint64_t q = m->q;
    uint64_t *o = (uint64_t *)a->out.data + o0;
    const uint64_t *x = (const uint64_t *)a->a.data + o1;
    const uint64_t *y = sb ? (const uint64_t *)a->b.data + o2 : NULL;
    int64_t so = a->out.stride[_last], sx = a->a.stride[_last], sy = sb ? a->b.stride[_last] : 0;
    switch (a->op) {
      case FH_RNS_ADD: for (int64_t j = 0; j < n; ++j) o[j * so] = fh_mod_add(x[j * sx], y[j * sy], q); break;
      case FH_RNS_SUB: for (int64_t j = 0; j < n; ++j) o[j * so] = fh_mod_sub(x[j * sx], y[j * sy], q); break;
      case FH_RNS_MUL: for (int64_t j = 0; j < n; ++j) o[j * so] = fh_mod_mul(x[j * sx], y[j * sy], m); break;
      default: for (int64_t j = 0; j < n; ++j) o[j * so] = fh_mod_neg(x[j * sx], q); break;
    }
  });
  return FH_OK;
}

/* ---- reductions --------------------------------------------------------- */
static fh_status k_sum(const void *argp) {
  const fh_reduce_args *a = argp;
  size_t es = fh_dtype_size((fh_dtype)a->dtype);
  uint64_t acc_u = 0;
  double acc_f = 0, acc_im = 0;
  if (a->it.numel > 0)
    FOR_ROWS(&a->it, a->in.stride, (const int64_t *)NULL, (const int64_t *)NULL, {
      const char *p = a->in.data + o0 * (int64_t)es;
      int64_t st = a->in.stride[_last] * (int64_t)es;
      for (int64_t j = 0; j < n; ++j) {
        fh_wide w = fh_wide_load(a->dtype, p + j * st);
        if (w.kind == 0) acc_u += (uint64_t)w.i;
        else if (w.kind == 1) acc_u += w.u;
        else {
          acc_f += w.f;
          acc_im += w.im;
        }
      }
    });
  fh_wide r = {0, 0, 0, 0, 0};
  if (fh_dtype_is_floating((fh_dtype)a->dtype) || fh_dtype_is_complex((fh_dtype)a->dtype)) {
    r.kind = fh_dtype_is_complex((fh_dtype)a->dtype) ? 3 : 2;
    r.f = acc_f;
    r.im = acc_im;
  } else {
    r.kind = 1;
    r.u = acc_u;
  }
  fh_wide_store(a->out_dtype, a->out, r);
  return FH_OK;
}

static fh_status k_compare(const void *argp) {
  const fh_compare_args *a = argp;
  size_t es = fh_dtype_size((fh_dtype)a->dtype);
  int64_t bad = 0;
  double maxd = 0;
  bool nan = false;
  if (a->it.numel > 0)
    FOR_ROWS(&a->it, a->a.stride, a->b.stride, (const int64_t *)NULL, {
      const char *p = a->a.data + o0 * (int64_t)es;
      const char *q = a->b.data + o1 * (int64_t)es;
      int64_t sp = a->a.stride[_last] * (int64_t)es, sq = a->b.stride[_last] * (int64_t)es;
      for (int64_t j = 0; j < n; ++j) {
        fh_wide x = fh_wide_load(a->dtype, p + j * sp), y = fh_wide_load(a->dtype, q + j * sq);
        double d = 0, ay;
        if (x.kind == 0) {
          if (a->mode == FH_CMP_EQUAL) { bad += x.i != y.i; continue; }
          d = x.i > y.i ? (double)((uint64_t)x.i - (uint64_t)y.i) : (double)((uint64_t)y.i - (uint64_t)x.i);
          ay = fabs((double)y.i);
        } else if (x.kind == 1) {
          if (a->mode == FH_CMP_EQUAL) { bad += x.u != y.u; continue; }
          d = x.u > y.u ? (double)(x.u - y.u) : (double)(y.u - x.u);
          ay = (double)y.u;
        } else {
          bool same = x.f == y.f && x.im == y.im; /* equal infinities too */
          if (a->mode == FH_CMP_EQUAL) { bad += !same; continue; }
          if (x.f != x.f || x.im != x.im || y.f != y.f || y.im != y.im) d = NAN; /* hypot(inf, NaN) is inf */
          else d = same ? 0.0 : hypot(x.f - y.f, x.im - y.im);
          ay = hypot(y.f, y.im);
        }
        /* close: equal, or a finite difference within atol + rtol * |b|
         * (so 1 is not close to inf however large rtol is; NaN never) */
        if (a->mode == FH_CMP_CLOSE) bad += !(d == 0 || (isfinite(d) && d <= a->atol + a->rtol * ay));
        else if (d != d) nan = true;
        else if (d > maxd) maxd = d;
      }
    });
  if (a->mode == FH_CMP_MAXDIFF) {
    double r = nan ? NAN : maxd;
    memcpy(a->out, &r, sizeof r);
  } else {
    memcpy(a->out, &bad, sizeof bad);
  }
  return FH_OK;
}

const char *const fh__tensor_kernel_names[FH_K_TENSOR_END] = {
    [FH_K_FILL] = "fill", [FH_K_COPY] = "copy",       [FH_K_UNARY] = "unary",     [FH_K_BINARY] = "binary",
    [FH_K_RNS] = "rns",   [FH_K_SUM] = "sum",         [FH_K_COMPARE] = "compare", [FH_K_COPY_BATCH] = "copy_batch",
};

/* FH_K_COPY_BATCH has no CPU entry: host copies are plain memcpy. */
const fh_cpu_kernel_fn fh__tensor_cpu_kernels[FH_K_TENSOR_END] = {
    [FH_K_FILL] = k_fill, [FH_K_COPY] = k_copy, [FH_K_UNARY] = k_unary, [FH_K_BINARY] = k_binary,
    [FH_K_RNS] = k_rns,   [FH_K_SUM] = k_sum,   [FH_K_COMPARE] = k_compare,
};
