/* Tensors: dtypes, scalars, creation, views, copies. */
#include "fh/tensor.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fh/internal.h"
#include "fh/trace.h"

/* ---- dtypes ------------------------------------------------------------- */
static const char *const dtype_names[FH_DTYPE_COUNT] = {
    "bool", "uint8", "int32", "int64", "uint32", "uint64", "float32", "float64", "complex128",
};
static const size_t dtype_sizes[FH_DTYPE_COUNT] = {1, 1, 4, 8, 4, 8, 4, 8, 16};

const char *fh_dtype_name(fh_dtype d) { return (unsigned)d < FH_DTYPE_COUNT ? dtype_names[d] : "?"; }
size_t fh_dtype_size(fh_dtype d) { return (unsigned)d < FH_DTYPE_COUNT ? dtype_sizes[d] : 0; }
bool fh_dtype_is_floating(fh_dtype d) { return d == FH_FLOAT32 || d == FH_FLOAT64; }
bool fh_dtype_is_complex(fh_dtype d) { return d == FH_COMPLEX128; }
bool fh_dtype_is_integer(fh_dtype d) { return d >= FH_UINT8 && d <= FH_UINT64; }

fh_status fh_dtype_parse(const char *s, fh_dtype *out) {
  for (int i = 0; i < FH_DTYPE_COUNT; ++i)
    if (s && strcmp(s, dtype_names[i]) == 0) {
      *out = (fh_dtype)i;
      return FH_OK;
    }
  return fh_error_set(FH_ERR_VALUE,
                      "unknown dtype '%s' (expected one of bool, uint8, int32, int64, uint32, uint64, float32, "
                      "float64, complex128)",
                      s ? s : "(nil)");
}

/* ---- scalars ------------------------------------------------------------ */
fh_scalar fh_scalar_float(double x) { fh_scalar s; s.kind = FH_SCALAR_FLOAT; s.v.f = x; return s; }
fh_scalar fh_scalar_int(int64_t x) { fh_scalar s; s.kind = FH_SCALAR_INT; s.v.i = x; return s; }
fh_scalar fh_scalar_uint(uint64_t x) { fh_scalar s; s.kind = FH_SCALAR_UINT; s.v.u = x; return s; }

static fh_status int_range(const fh_scalar *s, fh_dtype d, int64_t lo, uint64_t hi, uint64_t *bits) {
  switch (s->kind) {
    case FH_SCALAR_BOOL: *bits = s->v.b; return FH_OK;
    case FH_SCALAR_INT:
      if (s->v.i < lo || (s->v.i > 0 && (uint64_t)s->v.i > hi)) break;
      *bits = (uint64_t)s->v.i;
      return FH_OK;
    case FH_SCALAR_UINT:
      if (s->v.u > hi) break;
      *bits = s->v.u;
      return FH_OK;
    case FH_SCALAR_FLOAT: {
      double x = s->v.f;
      if (!isfinite(x) || x != floor(x))
        return fh_error_set(FH_ERR_VALUE, "%.17g is not an integer and cannot be stored as %s", x, fh_dtype_name(d));
      /* 2^63 and 2^64 are exact doubles */
      if (x < (double)lo || x >= 18446744073709551616.0 || (hi < UINT64_MAX && x > (double)hi)) break;
      if (x < 0) *bits = (uint64_t)(int64_t)x;
      else *bits = (uint64_t)x;
      if (x >= 0 && (uint64_t)x > hi) break;
      return FH_OK;
    }
    default:
      return fh_error_set(FH_ERR_TYPE, "a complex value cannot be stored as %s", fh_dtype_name(d));
  }
  switch (s->kind) {
    case FH_SCALAR_INT:
      return fh_error_set(FH_ERR_VALUE, "value %lld is out of range for %s", (long long)s->v.i, fh_dtype_name(d));
    case FH_SCALAR_UINT:
      return fh_error_set(FH_ERR_VALUE, "value %llu is out of range for %s", (unsigned long long)s->v.u,
                          fh_dtype_name(d));
    default: return fh_error_set(FH_ERR_VALUE, "value %.17g is out of range for %s", s->v.f, fh_dtype_name(d));
  }
}

fh_status fh_scalar_to_dtype(const fh_scalar *s, fh_dtype d, void *dst) {
  uint64_t bits = 0;
  fh_status st;
  switch (d) {
    case FH_BOOL: {
      bool b;
      if (s->kind == FH_SCALAR_BOOL) b = s->v.b;
      else if (s->kind == FH_SCALAR_INT) b = s->v.i != 0;
      else if (s->kind == FH_SCALAR_UINT) b = s->v.u != 0;
      else if (s->kind == FH_SCALAR_FLOAT) b = s->v.f != 0;
      else return fh_error_set(FH_ERR_TYPE, "a complex value cannot be stored as bool");
      *(uint8_t *)dst = b;
      return FH_OK;
    }
    case FH_UINT8:
      if ((st = int_range(s, d, 0, UINT8_MAX, &bits))) return st;
      *(uint8_t *)dst = (uint8_t)bits;
      return FH_OK;
    case FH_INT32:
      if ((st = int_range(s, d, INT32_MIN, INT32_MAX, &bits))) return st;
      *(int32_t *)dst = (int32_t)(int64_t)bits;
      return FH_OK;
    case FH_UINT32:
      if ((st = int_range(s, d, 0, UINT32_MAX, &bits))) return st;
      *(uint32_t *)dst = (uint32_t)bits;
      return FH_OK;
    case FH_INT64:
      if ((st = int_range(s, d, INT64_MIN, INT64_MAX, &bits))) return st;
      *(int64_t *)dst = (int64_t)bits;
      return FH_OK;
    case FH_UINT64:
      if ((st = int_range(s, d, 0, UINT64_MAX, &bits))) return st;
      *(uint64_t *)dst = bits;
      return FH_OK;
    case FH_FLOAT32:
    case FH_FLOAT64: {
      double x;
      if (s->kind == FH_SCALAR_FLOAT) x = s->v.f;
      else if (s->kind == FH_SCALAR_INT) x = (double)s->v.i;
      else if (s->kind == FH_SCALAR_UINT) x = (double)s->v.u;
      else if (s->kind == FH_SCALAR_BOOL) x = s->v.b;
      else return fh_error_set(FH_ERR_TYPE, "a complex value cannot be stored as %s", fh_dtype_name(d));
      if (d == FH_FLOAT32) *(float *)dst = (float)x;
      else *(double *)dst = x;
      return FH_OK;
    }
    case FH_COMPLEX128: {
      double c[2] = {0, 0};
      if (s->kind == FH_SCALAR_COMPLEX) { c[0] = s->v.c[0]; c[1] = s->v.c[1]; }
      else if (s->kind == FH_SCALAR_FLOAT) c[0] = s->v.f;
      else if (s->kind == FH_SCALAR_INT) c[0] = (double)s->v.i;
      else if (s->kind == FH_SCALAR_UINT) c[0] = (double)s->v.u;
      else c[0] = s->v.b;
      memcpy(dst, c, sizeof c);
      return FH_OK;
    }
    default: return fh_error_set(FH_ERR_TYPE, "invalid dtype");
  }
}

/* ---- basic queries ------------------------------------------------------ */
fh_tensor_options fh_tensor_options_default(void) {
  fh_tensor_options o = {FH_FLOAT32, {FH_DEVICE_CPU, 0}, false, false};
  return o;
}

void fh_tensor_retain(fh_tensor *t) { fh_rc_retain(&t->rc); }
void fh_tensor_release(fh_tensor *t) {
  if (t == NULL || !fh_rc_release(&t->rc)) return;
  fh_storage_release(t->storage);
  fh_free(t);
}

int64_t fh_tensor_numel(const fh_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}
size_t fh_tensor_element_size(const fh_tensor *t) { return fh_dtype_size((fh_dtype)t->dtype); }
size_t fh_tensor_nbytes(const fh_tensor *t) { return (size_t)fh_tensor_numel(t) * fh_tensor_element_size(t); }

bool fh_tensor_is_contiguous(const fh_tensor *t) {
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] == 1) continue;
    if (t->shape[i] == 0) return true;
    if (t->stride[i] != expect) return false;
    expect *= t->shape[i];
  }
  return true;
}

bool fh_tensor_is_self_overlapping(const fh_tensor *t) {
  /* exact fast path: a contiguous layout (also any tensor of <= 1 element)
   * never repeats a location */
  if (fh_tensor_is_contiguous(t) || fh_tensor_numel(t) <= 1) return false;
  /* general: the dims of size > 1 sorted by stride (insertion sort, at most
   * FH_MAX_DIMS); each stride must step past every location the smaller
   * strides reach. A stride-0 dim of size > 1 fails at once (0 <= extent). */
  int64_t st[FH_MAX_DIMS], sz[FH_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] <= 1) continue;
    int j = n++;
    while (j > 0 && st[j - 1] > t->stride[i]) {
      st[j] = st[j - 1];
      sz[j] = sz[j - 1];
      --j;
    }
    st[j] = t->stride[i];
    sz[j] = t->shape[i];
  }
  int64_t extent = 0; /* the highest offset the smaller-stride dims reach */
  for (int i = 0; i < n; ++i) {
    if (st[i] <= extent) return true;
    extent += (sz[i] - 1) * st[i];
  }
  return false;
}

fh_status fh__check_writable(const fh_tensor *t, const char *what, const char *arg) {
  if (!fh_tensor_is_self_overlapping(t)) return FH_OK;
  return fh_error_set(FH_ERR_VALUE,
                      "%s: unsupported operation: more than one element of the written-to tensor refers to a single "
                      "memory location (%s is an expanded or otherwise self-overlapping view; reading it is fine, "
                      "writing into it is not: write into a clone() or contiguous() copy)",
                      what, arg);
}

/* Sizes are limited so that every element count, byte count and stride
 * fits in int64 with room for the largest element: the product of the
 * sizes, with zero sizes counted as one (contiguous strides of a tensor
 * with a zero dimension still multiply the others), is at most 2^59. */
#define FH_MAX_SPAN (INT64_MAX / 16)

static void shape_string(int ndim, const int64_t *shape, char *buf, size_t n) {
  size_t l = (size_t)snprintf(buf, n, "{");
  for (int i = 0; i < ndim && l + 24 < n; ++i) l += (size_t)snprintf(buf + l, n - l, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (l + 2 < n) snprintf(buf + l, n - l, "}");
}

fh_status fh_shape_check(int ndim, const int64_t *shape, int64_t *numel) {
  if (ndim < 0 || ndim > FH_MAX_DIMS)
    return fh_error_set(FH_ERR_VALUE, "a tensor has at most %d dimensions, got %d", FH_MAX_DIMS, ndim);
  int64_t n = 1, span = 1;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] < 0)
      return fh_error_set(FH_ERR_VALUE, "invalid shape: dimension %d has negative size %lld", i + 1,
                          (long long)shape[i]);
    int64_t m = shape[i] > 1 ? shape[i] : 1;
    if (span > FH_MAX_SPAN / m) {
      char buf[512];
      shape_string(ndim, shape, buf, sizeof buf);
      return fh_error_set(FH_ERR_VALUE, "invalid shape %s: the number of elements overflows (at most 2^59)", buf);
    }
    span *= m;
    n *= shape[i];
  }
  if (numel) *numel = n;
  return FH_OK;
}

void fh_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    stride[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;
  }
}

static fh_status tensor_alloc_record(fh_tensor **out) {
  fh_tensor *t = fh_calloc(1, sizeof *t);
  if (t == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory allocating a tensor record");
  fh_rc_init(&t->rc);
  *out = t;
  return FH_OK;
}

/* ---- creation ----------------------------------------------------------- */
fh_status fh_tensor_empty(int ndim, const int64_t *shape, const fh_tensor_options *o, fh_tensor **out) {
  int64_t numel = 0;
  fh_status st = fh_shape_check(ndim, shape, &numel);
  if (st != FH_OK) return st;
  if ((unsigned)o->dtype >= FH_DTYPE_COUNT) return fh_error_set(FH_ERR_VALUE, "invalid dtype");
  if (o->pin_memory && o->device.type != FH_DEVICE_CPU)
    return fh_error_set(FH_ERR_VALUE, "pin_memory=true requires device \"cpu\"");
  fh_storage *s = NULL;
  st = fh_storage_new(o->device, (size_t)numel * fh_dtype_size(o->dtype), o->pin_memory ? FH_STORAGE_PINNED : 0, &s);
  if (st != FH_OK) return st;
  fh_tensor *t = NULL;
  if ((st = tensor_alloc_record(&t)) != FH_OK) {
    fh_storage_release(s);
    return st;
  }
  t->storage = s;
  t->ndim = ndim;
  t->dtype = o->dtype;
  t->requires_grad = o->requires_grad;
  if (ndim > 0) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim); /* shape may be NULL for 0-dim */
  fh_contiguous_strides(ndim, shape, t->stride);
  *out = t;
  return FH_OK;
}

fh_status fh_tensor_full(int ndim, const int64_t *shape, const fh_scalar *value, const fh_tensor_options *o,
                         fh_tensor **out) {
  unsigned char elem[16];
  fh_status st = fh_scalar_to_dtype(value, o->dtype, elem);
  if (st != FH_OK) return st;
  fh_tensor *t = NULL;
  if ((st = fh_tensor_empty(ndim, shape, o, &t)) != FH_OK) return st;
  if ((st = fh_tensor_fill_(t, value)) != FH_OK) {
    fh_tensor_release(t);
    return st;
  }
  *out = t;
  return FH_OK;
}

fh_status fh_tensor_from_storage(fh_storage *s, int64_t offset, int ndim, const int64_t *shape, const int64_t *stride,
                                 fh_dtype dtype, fh_tensor **out) {
  int64_t numel = 0;
  fh_status st = fh_shape_check(ndim, shape, &numel);
  if (st != FH_OK) return st;
  if (offset < 0) return fh_error_set(FH_ERR_VALUE, "negative storage offset %lld", (long long)offset);
  int64_t hi = offset;
  if (numel > 0)
    for (int i = 0; i < ndim; ++i) {
      if (stride[i] < 0) return fh_error_set(FH_ERR_VALUE, "negative stride %lld", (long long)stride[i]);
      hi += (shape[i] - 1) * stride[i];
    }
  size_t es = fh_dtype_size(dtype);
  if (numel > 0 && (size_t)(hi + 1) * es > s->nbytes)
    return fh_error_set(FH_ERR_VALUE, "view reaches element %lld but the storage holds %zu bytes", (long long)hi,
                        s->nbytes);
  fh_tensor *t = NULL;
  if ((st = tensor_alloc_record(&t)) != FH_OK) return st;
  fh_storage_retain(s);
  t->storage = s;
  t->offset = offset;
  t->ndim = ndim;
  t->dtype = dtype;
  if (ndim > 0) {
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(t->stride, stride, sizeof(int64_t) * (size_t)ndim);
  }
  *out = t;
  return FH_OK;
}

fh_status fh_tensor_from_host(const void *src, int ndim, const int64_t *shape, const fh_tensor_options *o,
                              fh_tensor **out) {
  fh_tensor_options host = *o;
  host.device = fh_cpu();
  fh_tensor *t = NULL;
  fh_status st = fh_tensor_empty(ndim, shape, &host, &t);
  if (st != FH_OK) return st;
  if (fh_tensor_nbytes(t)) memcpy(t->storage->data, src, fh_tensor_nbytes(t));
  if (o->device.type == FH_DEVICE_CPU) {
    *out = t;
    return FH_OK;
  }
  fh_tensor *d = NULL;
  st = fh_tensor_to(t, o->device, false, NULL, false, &d);
  fh_tensor_release(t);
  if (st != FH_OK) return st;
  d->requires_grad = o->requires_grad;
  *out = d;
  return FH_OK;
}

fh_status fh_tensor_arange(double start, double end, double step, const fh_tensor_options *o, fh_tensor **out) {
  if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end))
    return fh_error_set(FH_ERR_VALUE, "arange: start, end and step must be finite and step non-zero");
  double n = ceil((end - start) / step);
  if (n < 0) n = 0;
  if (n > 1e15) return fh_error_set(FH_ERR_VALUE, "arange: too many elements (%.0f)", n);
  if (fh_dtype_is_complex(o->dtype) || o->dtype == FH_BOOL)
    return fh_error_set(FH_ERR_TYPE, "arange does not support dtype %s", fh_dtype_name(o->dtype));
  int64_t shape[1] = {(int64_t)n};
  size_t es = fh_dtype_size(o->dtype);
  unsigned char *buf = fh_malloc((size_t)shape[0] * es + 1);
  if (buf == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory in arange");
  for (int64_t i = 0; i < shape[0]; ++i) {
    fh_scalar v = fh_scalar_float(start + (double)i * step);
    fh_status st = fh_scalar_to_dtype(&v, o->dtype, buf + (size_t)i * es);
    if (st != FH_OK) {
      fh_free(buf);
      fh_error_prefix("arange");
      return st;
    }
  }
  fh_status st = fh_tensor_from_host(buf, 1, shape, o, out);
  fh_free(buf);
  return st;
}

/* ---- views -------------------------------------------------------------- */
static fh_status view_of(fh_tensor *t, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset,
                         fh_tensor **out) {
  fh_tensor *v = NULL;
  fh_status st = tensor_alloc_record(&v);
  if (st != FH_OK) return st;
  fh_storage_retain(t->storage);
  v->storage = t->storage;
  v->offset = offset;
  v->ndim = ndim;
  v->dtype = t->dtype;
  v->requires_grad = t->requires_grad;
  memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
  memcpy(v->stride, stride, sizeof(int64_t) * (size_t)ndim);
  *out = v;
  return FH_OK;
}

static fh_status infer_shape(const fh_tensor *t, int ndim, const int64_t *shape, int64_t *res) {
  if (ndim < 0 || ndim > FH_MAX_DIMS)
    return fh_error_set(FH_ERR_VALUE, "a tensor has at most %d dimensions, got %d", FH_MAX_DIMS, ndim);
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) return fh_error_set(FH_ERR_VALUE, "only one dimension can be -1");
      infer = i;
      continue;
    }
    if (shape[i] < 0)
      return fh_error_set(FH_ERR_VALUE, "invalid shape: dimension %d has negative size %lld", i + 1,
                          (long long)shape[i]);
    if (shape[i] != 0 && known > FH_MAX_SPAN / shape[i]) {
      char buf[512];
      shape_string(ndim, shape, buf, sizeof buf);
      return fh_error_set(FH_ERR_VALUE, "invalid shape %s: the number of elements overflows (at most 2^59)", buf);
    }
    known *= shape[i];
    res[i] = shape[i];
  }
  int64_t numel = fh_tensor_numel(t);
  if (infer >= 0) {
    if (known == 0)
      return fh_error_set(FH_ERR_VALUE,
                          "the size of the -1 dimension is ambiguous: the other sizes multiply to 0 (tensor of "
                          "%lld elements)",
                          (long long)numel);
    if (numel % known != 0)
      return fh_error_set(FH_ERR_VALUE, "shape with a -1 dimension is invalid for a tensor of %lld elements: %lld is not a multiple of %lld",
                          (long long)numel, (long long)numel, (long long)known);
    res[infer] = numel / known;
    known *= res[infer];
  }
  if (known != numel)
    return fh_error_set(FH_ERR_VALUE, "shape of %lld elements is invalid for a tensor of %lld elements",
                        (long long)known, (long long)numel);
  return fh_shape_check(ndim, res, NULL);
}

/* Strides for viewing t as `shape` without copying (the algorithm of
 * torch's computeStride); false when impossible. */
static bool view_strides(const fh_tensor *t, int ndim, const int64_t *shape, int64_t *stride) {
  int64_t numel = fh_tensor_numel(t);
  if (numel == 0) {
    fh_contiguous_strides(ndim, shape, stride);
    return true;
  }
  int view_d = ndim - 1;
  int64_t chunk_base_stride = t->ndim ? t->stride[t->ndim - 1] : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int td = t->ndim - 1; td >= 0; td--) {
    tensor_numel *= t->shape[td];
    if (td == 0 || (t->shape[td - 1] != 1 && t->stride[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        stride[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (td > 0) {
        chunk_base_stride = t->stride[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) {
    for (; view_d >= 0; --view_d) {
      if (shape[view_d] != 1) return false;
      stride[view_d] = 1;
    }
  }
  return true;
}

fh_status fh_tensor_view(fh_tensor *t, int ndim, const int64_t *shape, fh_tensor **out) {
  int64_t res[FH_MAX_DIMS], stride[FH_MAX_DIMS];
  fh_status st = infer_shape(t, ndim, shape, res);
  if (st != FH_OK) {
    fh_error_prefix("view");
    return st;
  }
  if (!view_strides(t, ndim, res, stride))
    return fh_error_set(FH_ERR_VALUE,
                        "view: the requested shape is not compatible with the tensor's strides (the tensor is not "
                        "contiguous); use reshape, or contiguous first");
  return view_of(t, ndim, res, stride, t->offset, out);
}

fh_status fh_tensor_reshape(fh_tensor *t, int ndim, const int64_t *shape, fh_tensor **out) {
  int64_t res[FH_MAX_DIMS], stride[FH_MAX_DIMS];
  fh_status st = infer_shape(t, ndim, shape, res);
  if (st != FH_OK) {
    fh_error_prefix("reshape");
    return st;
  }
  if (view_strides(t, ndim, res, stride)) return view_of(t, ndim, res, stride, t->offset, out);
  fh_tensor *c = NULL;
  if ((st = fh_tensor_clone(t, &c)) != FH_OK) return st;
  st = fh_tensor_view(c, ndim, res, out);
  fh_tensor_release(c);
  return st;
}

static fh_status check_dim(const fh_tensor *t, int d, const char *what) {
  if (d < 0 || d >= t->ndim)
    return fh_error_set(FH_ERR_VALUE, "%s: dimension %d out of range for a %d-dimensional tensor (expected 1..%d)",
                        what, d + 1, t->ndim, t->ndim);
  return FH_OK;
}

fh_status fh_tensor_transpose(fh_tensor *t, int d1, int d2, fh_tensor **out) {
  fh_status st;
  if ((st = check_dim(t, d1, "transpose")) || (st = check_dim(t, d2, "transpose"))) return st;
  int64_t shape[FH_MAX_DIMS], stride[FH_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  memcpy(stride, t->stride, sizeof stride);
  shape[d1] = t->shape[d2], shape[d2] = t->shape[d1];
  stride[d1] = t->stride[d2], stride[d2] = t->stride[d1];
  return view_of(t, t->ndim, shape, stride, t->offset, out);
}

fh_status fh_tensor_permute(fh_tensor *t, int ndim, const int *perm, fh_tensor **out) {
  if (ndim != t->ndim)
    return fh_error_set(FH_ERR_VALUE, "permute: expected %d dimensions, got %d", t->ndim, ndim);
  bool seen[FH_MAX_DIMS] = {false};
  int64_t shape[FH_MAX_DIMS], stride[FH_MAX_DIMS];
  for (int i = 0; i < ndim; ++i) {
    fh_status st = check_dim(t, perm[i], "permute");
    if (st != FH_OK) return st;
    if (seen[perm[i]]) return fh_error_set(FH_ERR_VALUE, "permute: dimension %d repeated", perm[i] + 1);
    seen[perm[i]] = true;
    shape[i] = t->shape[perm[i]];
    stride[i] = t->stride[perm[i]];
  }
  return view_of(t, ndim, shape, stride, t->offset, out);
}

fh_status fh_tensor_narrow(fh_tensor *t, int dim, int64_t start, int64_t length, fh_tensor **out) {
  fh_status st = check_dim(t, dim, "narrow");
  if (st != FH_OK) return st;
  if (start < 0 || length < 0 || start > t->shape[dim] || length > t->shape[dim] - start)
    return fh_error_set(FH_ERR_VALUE, "narrow: start %lld and length %lld out of range for dimension %d of size %lld",
                        (long long)start + 1, (long long)length, dim + 1, (long long)t->shape[dim]);
  int64_t shape[FH_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  shape[dim] = length;
  return view_of(t, t->ndim, shape, t->stride, t->offset + start * t->stride[dim], out);
}

fh_status fh_tensor_select(fh_tensor *t, int dim, int64_t index, fh_tensor **out) {
  fh_status st = check_dim(t, dim, "select");
  if (st != FH_OK) return st;
  if (index < 0 || index >= t->shape[dim])
    return fh_error_set(FH_ERR_VALUE, "select: index %lld out of range for dimension %d of size %lld",
                        (long long)index + 1, dim + 1, (long long)t->shape[dim]);
  int64_t shape[FH_MAX_DIMS], stride[FH_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < t->ndim; ++i)
    if (i != dim) {
      shape[k] = t->shape[i];
      stride[k++] = t->stride[i];
    }
  return view_of(t, t->ndim - 1, shape, stride, t->offset + index * t->stride[dim], out);
}

fh_status fh_tensor_expand(fh_tensor *t, int ndim, const int64_t *shape, fh_tensor **out) {
  if (ndim < t->ndim || ndim > FH_MAX_DIMS)
    return fh_error_set(FH_ERR_VALUE, "expand: cannot expand %d dimensions to %d", t->ndim, ndim);
  int64_t stride[FH_MAX_DIMS];
  int lead = ndim - t->ndim;
  for (int i = 0; i < ndim; ++i) {
    if (i < lead) {
      stride[i] = 0;
      continue;
    }
    int64_t n = t->shape[i - lead];
    if (n == shape[i]) stride[i] = t->stride[i - lead];
    else if (n == 1) stride[i] = 0;
    else
      return fh_error_set(FH_ERR_VALUE, "shape mismatch: size %lld at dimension %d cannot broadcast to %lld",
                          (long long)n, i - lead + 1, (long long)shape[i]);
  }
  return view_of(t, ndim, shape, stride, t->offset, out);
}

/* ---- operator plumbing -------------------------------------------------- */
fh_status fh__op_stream(fh_device dev, fh_stream *s, fh_stream **out) {
  if (dev.type == FH_DEVICE_CPU) {
    *out = NULL;
    return FH_OK;
  }
  if (s != NULL) {
    if (!fh_device_eq(fh_stream_device(s), dev)) {
      char a[FH_DEVICE_NAME_MAX], b[FH_DEVICE_NAME_MAX];
      return fh_error_set(FH_ERR_VALUE, "stream belongs to %s but the operation runs on %s",
                          fh_device_name(fh_stream_device(s), a), fh_device_name(dev, b));
    }
    *out = s;
    return FH_OK;
  }
  return fh_stream_current(dev, out);
}

void fh__operand_from(fh_operand *op, const fh_tensor *t) {
  op->data = fh_tensor_data(t);
  memset(op->stride, 0, sizeof op->stride);
  memcpy(op->stride, t->stride, sizeof(int64_t) * (size_t)t->ndim);
}

static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;
static void register_kernels(void) {
#ifdef FH_WITH_CUDA
  const fh_cuda_kernel_fn *cuda = fh__tensor_cuda_kernels;
#else
  const fh_cuda_kernel_fn *cuda = NULL;
#endif
  fh_launch_register(0, FH_K_TENSOR_END, fh__tensor_kernel_names, fh__tensor_cpu_kernels, cuda);
}

fh_status fh__submit(int kernel, fh_device dev, fh_stream *stream, const void *args, size_t size,
                     fh_storage *const *uses, int nuses) {
  pthread_once(&kernels_once, register_kernels);
  fh_launch l = {kernel, dev, stream, args, size, uses, nuses};
  return fh_launch_submit(&l);
}

static void iter_init(fh_iter_shape *it, const fh_tensor *t) {
  it->ndim = t->ndim;
  it->numel = fh_tensor_numel(t);
  memset(it->shape, 0, sizeof it->shape);
  memcpy(it->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
}

void fh_iter_collapse(fh_iter_shape *it, int64_t *s0, int64_t *s1, int64_t *s2, int *keep_dim) {
  int64_t *ss[3] = {s0, s1, s2};
  if (it->ndim == 0) {
    it->ndim = 1;
    it->shape[0] = 1;
    for (int k = 0; k < 3; ++k)
      if (ss[k]) ss[k][0] = 0;
    if (keep_dim) *keep_dim = 0;
    return;
  }
  if (it->ndim == 1 && it->shape[0] != 1 && keep_dim == NULL) return; /* nothing to collapse (hot path) */
  /* drop size-1 dims (except keep_dim), then merge adjacent dims */
  int64_t shape[FH_MAX_DIMS], st[3][FH_MAX_DIMS];
  int n = 0, newkeep = -1;
  for (int d = 0; d < it->ndim; ++d) {
    bool keep = keep_dim && *keep_dim == d;
    if (it->shape[d] == 1 && !keep) continue;
    if (n > 0 && !keep && !(keep_dim && newkeep == n - 1)) {
      bool ok = true;
      for (int k = 0; k < 3; ++k)
        if (ss[k] && st[k][n - 1] != ss[k][d] * it->shape[d]) ok = false;
      if (ok) {
        shape[n - 1] *= it->shape[d];
        for (int k = 0; k < 3; ++k)
          if (ss[k]) st[k][n - 1] = ss[k][d];
        continue;
      }
    }
    if (keep) newkeep = n;
    shape[n] = it->shape[d];
    for (int k = 0; k < 3; ++k)
      if (ss[k]) st[k][n] = ss[k][d];
    n++;
  }
  if (n == 0) {
    n = 1;
    shape[0] = 1;
    for (int k = 0; k < 3; ++k)
      if (ss[k]) st[k][0] = 0;
  }
  it->ndim = n;
  memset(it->shape, 0, sizeof it->shape);
  memcpy(it->shape, shape, sizeof(int64_t) * (size_t)n);
  for (int k = 0; k < 3; ++k)
    if (ss[k]) {
      memset(ss[k], 0, sizeof(int64_t) * FH_MAX_DIMS);
      memcpy(ss[k], st[k], sizeof(int64_t) * (size_t)n);
    }
  if (keep_dim) *keep_dim = newkeep;
}

/* ---- aliasing ----------------------------------------------------------- */
/* [lo, hi) byte range spanned by a tensor's elements (strides are >= 0). */
static void byte_range(const fh_tensor *t, uintptr_t *lo, uintptr_t *hi) {
  int64_t last = 0;
  for (int i = 0; i < t->ndim; ++i) last += (t->shape[i] - 1) * t->stride[i];
  size_t es = fh_dtype_size((fh_dtype)t->dtype);
  *lo = (uintptr_t)fh_tensor_data(t);
  *hi = *lo + (uintptr_t)(last + 1) * es;
}

fh__overlap_kind fh__overlap(const fh_tensor *out, const fh_tensor *in) {
  if (out->storage != in->storage || fh_tensor_numel(out) == 0 || fh_tensor_numel(in) == 0) return FH__NO_OVERLAP;
  uintptr_t olo = 0, ohi = 0, ilo = 0, ihi = 0;
  byte_range(out, &olo, &ohi);
  byte_range(in, &ilo, &ihi);
  if (ohi <= ilo || ihi <= olo) return FH__NO_OVERLAP;
  if (olo != ilo || out->dtype != in->dtype || in->ndim > out->ndim) return FH__PARTIAL_OVERLAP;
  int lead = out->ndim - in->ndim;
  for (int d = 0; d < out->ndim; ++d) {
    if (out->shape[d] == 1) continue;
    int64_t s = d < lead || in->shape[d - lead] == 1 ? 0 : in->stride[d - lead];
    if (s != out->stride[d]) return FH__PARTIAL_OVERLAP;
  }
  return FH__SAME_ELEMENTS;
}

/* ---- copies ------------------------------------------------------------- */
static fh_status check_same_shape(const fh_tensor *a, const fh_tensor *b, const char *what) {
  bool same = a->ndim == b->ndim;
  for (int i = 0; same && i < a->ndim; ++i) same = a->shape[i] == b->shape[i];
  if (!same) {
    /* equal numel is not enough: be explicit */
    char sa[256] = "", sb[256] = "";
    size_t la = 0, lb = 0;
    for (int i = 0; i < a->ndim && la < 200; ++i)
      la += (size_t)snprintf(sa + la, sizeof sa - la, "%s%lld", i ? "x" : "", (long long)a->shape[i]);
    for (int i = 0; i < b->ndim && lb < 200; ++i)
      lb += (size_t)snprintf(sb + lb, sizeof sb - lb, "%s%lld", i ? "x" : "", (long long)b->shape[i]);
    return fh_error_set(FH_ERR_VALUE, "%s: shape mismatch: %s vs %s", what, a->ndim ? sa : "scalar",
                        b->ndim ? sb : "scalar");
  }
  return FH_OK;
}

fh_status fh__copy_submit(fh_tensor *dst, fh_tensor *src, fh_stream *s) {
  fh_copy_args a;
  memset(&a, 0, sizeof a);
  iter_init(&a.it, dst);
  a.dst_dtype = dst->dtype;
  a.src_dtype = src->dtype;
  fh__operand_from(&a.dst, dst);
  fh__operand_from(&a.src, src);
  fh_iter_collapse(&a.it, a.dst.stride, a.src.stride, NULL, NULL);
  fh_storage *uses[2] = {dst->storage, src->storage};
  return fh__submit(FH_K_COPY, fh_tensor_device(dst), s, &a, sizeof a, uses, 2);
}

static fh_status copy_impl(fh_tensor *dst, fh_tensor *src, fh_stream *stream, bool non_blocking);

/* A traced copy (fh/trace.h): one copy event on the stream the copy runs on
 * (the CUDA side's), or on the host for cpu to cpu. */
static fh_status copy_traced(fh_tensor *dst, fh_tensor *src, fh_stream *stream, bool non_blocking) {
  fh_device dd = fh_tensor_device(dst), sd = fh_tensor_device(src);
  fh_device side = dd.type == FH_DEVICE_CUDA ? dd : sd;
  fh_stream *s = NULL;
  if (side.type == FH_DEVICE_CUDA && (fh_device_check(side) != FH_OK || fh__op_stream(side, stream, &s) != FH_OK)) {
    fh_error_clear(); /* copy_impl reports it */
    return copy_impl(dst, src, stream, non_blocking);
  }
  int tr = fh__trace_begin(FH_TRACE_COPY, "copy_", side, s);
  fh_status st = copy_impl(dst, src, stream, non_blocking);
  if (tr != FH_TRACE_SKIP) {
    char d[96];
    fh__trace_direction(d, sizeof d, sd, fh_tensor_is_pinned(src), dd, fh_tensor_is_pinned(dst));
    fh__trace_end(tr, st == FH_OK ? fh_tensor_nbytes(dst) : 0, 1, d);
  }
  return st;
}

fh_status fh_tensor_copy_(fh_tensor *dst, fh_tensor *src, fh_stream *stream, bool non_blocking) {
  if (fh__trace_on) return copy_traced(dst, src, stream, non_blocking);
  return copy_impl(dst, src, stream, non_blocking);
}

static fh_status copy_impl(fh_tensor *dst, fh_tensor *src, fh_stream *stream, bool non_blocking) {
  fh_status st = check_same_shape(dst, src, "copy_");
  if (st == FH_OK) st = fh__check_writable(dst, "copy_", "self");
  if (st != FH_OK) return st;
  if (fh_dtype_is_complex(src->dtype) && !fh_dtype_is_complex(dst->dtype))
    return fh_error_set(FH_ERR_TYPE, "copy_: cannot copy complex128 into %s", fh_dtype_name(dst->dtype));
  fh_device dd = fh_tensor_device(dst), sd = fh_tensor_device(src);
  if ((st = fh_device_check(dd)) || (st = fh_device_check(sd))) return st;
  if (fh_tensor_numel(dst) == 0) return FH_OK;
  if (!fh_device_eq(dd, sd)) {
    if (dst->dtype != src->dtype) {
      /* convert on the source side first, then move */
      fh_tensor *tmp = NULL;
      if ((st = fh_tensor_to_dtype(src, (fh_dtype)dst->dtype, &tmp)) != FH_OK) return st;
      st = fh__cuda_copy_across(dst, tmp, stream, non_blocking);
      fh_tensor_release(tmp);
      return st;
    }
    return fh__cuda_copy_across(dst, src, stream, non_blocking);
  }
  fh_stream *s = NULL;
  if ((st = fh__op_stream(dd, stream, &s)) != FH_OK) return st;
  if (fh__overlap(dst, src) == FH__PARTIAL_OVERLAP) {
    /* dst and src share memory but not element for element: copy from a
     * snapshot of src, so the result is as if src was read first */
    fh_tensor *snap = NULL; /* made on the copy's stream, so the copy is ordered after it */
    if ((st = fh_tensor_to(src, dd, false, stream, true, &snap)) != FH_OK) return st;
    st = fh_tensor_copy_(dst, snap, stream, non_blocking);
    fh_tensor_release(snap);
    return st;
  }
  st = fh__copy_submit(dst, src, s);
  /* no wait while this thread records launches (a host tape or a CUDA capture) */
  if (st == FH_OK && !non_blocking && s != NULL && !fh_launch_capturing(fh_cpu()) && !fh_launch_capturing(dd))
    st = fh_stream_synchronize(s);
  return st;
}

/* A new contiguous tensor of t's shape with options `o`, filled by copy_. */
static fh_status copy_to_new(fh_tensor *t, const fh_tensor_options *o, fh_stream *stream, bool non_blocking,
                             fh_tensor **out) {
  fh_tensor *r = NULL;
  fh_status st = fh_tensor_empty(t->ndim, t->shape, o, &r);
  if (st != FH_OK) return st;
  return fh__deliver(fh_tensor_copy_(r, t, stream, non_blocking), r, out);
}

fh_status fh_tensor_to(fh_tensor *t, fh_device dev, bool pin, fh_stream *stream, bool non_blocking, fh_tensor **out) {
  fh_tensor_options o = {(fh_dtype)t->dtype, dev, pin && dev.type == FH_DEVICE_CPU, t->requires_grad};
  return copy_to_new(t, &o, stream, non_blocking, out);
}

fh_status fh_tensor_to_dtype(fh_tensor *t, fh_dtype dtype, fh_tensor **out) {
  if (fh_dtype_is_complex(t->dtype) && !fh_dtype_is_complex(dtype))
    return fh_error_set(FH_ERR_TYPE, "cannot convert complex128 to %s", fh_dtype_name(dtype));
  fh_tensor_options o = {dtype, fh_tensor_device(t), false, t->requires_grad};
  return copy_to_new(t, &o, NULL, true, out);
}

fh_status fh_tensor_clone(fh_tensor *t, fh_tensor **out) {
  return fh_tensor_to(t, fh_tensor_device(t), fh_tensor_is_pinned(t), NULL, true, out);
}

fh_status fh_tensor_contiguous(fh_tensor *t, fh_tensor **out) {
  if (fh_tensor_is_contiguous(t)) {
    fh_tensor_retain(t);
    *out = t;
    return FH_OK;
  }
  return fh_tensor_clone(t, out);
}

fh_status fh_tensor_fill_(fh_tensor *t, const fh_scalar *value) {
  fh_fill_args a;
  memset(&a, 0, sizeof a);
  fh_status st = fh_scalar_to_dtype(value, (fh_dtype)t->dtype, a.value);
  if (st == FH_OK) st = fh__check_writable(t, "fill_", "self");
  if (st != FH_OK) return st;
  fh_device dev = fh_tensor_device(t);
  fh_stream *s = NULL;
  if ((st = fh_device_check(dev)) || (st = fh__op_stream(dev, NULL, &s))) return st;
  if (fh_tensor_numel(t) == 0) return FH_OK;
  iter_init(&a.it, t);
  a.dtype = t->dtype;
  fh__operand_from(&a.out, t);
  fh_iter_collapse(&a.it, a.out.stride, NULL, NULL, NULL);
  fh_storage *uses[1] = {t->storage};
  return fh__submit(FH_K_FILL, dev, s, &a, sizeof a, uses, 1);
}

fh_status fh_tensor_read(fh_tensor *t, void *dst) {
  fh_device dev = fh_tensor_device(t);
  fh_status st = fh_check_host_read(dev, "reading tensor data");
  if (st != FH_OK) return st;
  size_t nb = fh_tensor_nbytes(t);
  if (nb == 0) return FH_OK;
  if (dev.type == FH_DEVICE_CPU && fh_tensor_is_contiguous(t)) {
    /* pinned storage may still be the target of an async copy: order it */
    if (fh_tensor_is_pinned(t) && fh_cuda_is_available()) {
      if ((st = fh_cuda_synchronize(-1)) != FH_OK) return st;
    }
    memcpy(dst, fh_tensor_data(t), nb);
    return FH_OK;
  }
  /* gather into a contiguous host tensor, then copy out */
  fh_tensor_options o = {(fh_dtype)t->dtype, fh_cpu(), false, false};
  fh_tensor *h = NULL;
  if ((st = fh_tensor_empty(t->ndim, t->shape, &o, &h)) != FH_OK) return st;
  st = fh_tensor_copy_(h, t, NULL, false);
  if (st == FH_OK) memcpy(dst, fh_tensor_data(h), nb);
  fh_tensor_release(h);
  return st;
}
