/* Tensor operators: host-side validation and argument packing. The kernels
 * themselves live in kernels_cpu.c and engine/tensor/kernels.cu. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fh/internal.h"

static const char *const binary_names[FH_BINARY_OP_COUNT] = {"add", "sub", "mul", "div"};
const char *fh_binary_op_name(fh_binary_op op) { return (unsigned)op < FH_BINARY_OP_COUNT ? binary_names[op] : "?"; }

static fh_status same_device(const char *what, const fh_tensor *a, const fh_tensor *b) {
  if (!fh_device_eq(fh_tensor_device(a), fh_tensor_device(b))) {
    char x[FH_DEVICE_NAME_MAX], y[FH_DEVICE_NAME_MAX];
    return fh_error_set(FH_ERR_VALUE, "%s: tensors are on different devices (%s and %s)", what,
                        fh_device_name(fh_tensor_device(a), x), fh_device_name(fh_tensor_device(b), y));
  }
  return FH_OK;
}

static fh_status same_dtype(const char *what, const fh_tensor *a, const fh_tensor *b) {
  if (a->dtype != b->dtype)
    return fh_error_set(FH_ERR_TYPE, "%s: dtype mismatch (%s and %s)", what, fh_dtype_name(a->dtype),
                        fh_dtype_name(b->dtype));
  return FH_OK;
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
  size_t l = 0;
  if (ndim == 0) snprintf(buf, n, "scalar");
  for (int i = 0; i < ndim && l + 24 < n; ++i) l += (size_t)snprintf(buf + l, n - l, "%s%lld", i ? "x" : "", (long long)shape[i]);
}

static fh_status broadcast_shape(const char *what, const fh_tensor *a, const fh_tensor *b, int *ndim, int64_t *shape) {
  int n = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int i = 0; i < n; ++i) {
    int ia = a->ndim - n + i, ib = b->ndim - n + i;
    int64_t x = ia >= 0 ? a->shape[ia] : 1, y = ib >= 0 ? b->shape[ib] : 1;
    if (x != y && x != 1 && y != 1) {
      char sa[256], sb[256];
      shape_str(a->ndim, a->shape, sa, sizeof sa);
      shape_str(b->ndim, b->shape, sb, sizeof sb);
      return fh_error_set(FH_ERR_VALUE, "%s: shape mismatch: %s and %s do not broadcast (dimension %d: %lld vs %lld)",
                          what, sa, sb, i + 1, (long long)x, (long long)y);
    }
    shape[i] = x == 1 ? y : x;
  }
  *ndim = n;
  return FH_OK;
}

static fh_status check_out(const char *what, const fh_tensor *out, int ndim, const int64_t *shape, fh_dtype dtype,
                           fh_device dev) {
  char want[256], got[256];
  bool ok = out->ndim == ndim;
  for (int i = 0; ok && i < ndim; ++i) ok = out->shape[i] == shape[i];
  if (!ok) {
    shape_str(ndim, shape, want, sizeof want);
    shape_str(out->ndim, out->shape, got, sizeof got);
    return fh_error_set(FH_ERR_VALUE, "%s: out has shape %s, expected %s", what, got, want);
  }
  if (out->dtype != (int)dtype)
    return fh_error_set(FH_ERR_TYPE, "%s: out has dtype %s, expected %s", what, fh_dtype_name(out->dtype),
                        fh_dtype_name(dtype));
  if (!fh_device_eq(fh_tensor_device(out), dev)) {
    char x[FH_DEVICE_NAME_MAX], y[FH_DEVICE_NAME_MAX];
    return fh_error_set(FH_ERR_VALUE, "%s: out is on %s, expected %s", what, fh_device_name(fh_tensor_device(out), x),
                        fh_device_name(dev, y));
  }
  return FH_OK;
}

/* Allocate (or validate) the output and produce an operand view expanded to
 * the iteration shape. out == self is the in-place form ("add_"); a given
 * output must not be self-overlapping. */
static fh_status prepare_out(const char *what, fh_tensor *out, const fh_tensor *self, int ndim, const int64_t *shape,
                             fh_dtype dtype, fh_device dev, fh_tensor **result) {
  if (out != NULL) {
    fh_status st = check_out(what, out, ndim, shape, dtype, dev);
    if (st == FH_OK && out == self) { /* in place: add_, neg_, ... */
      char fn[32];
      snprintf(fn, sizeof fn, "%s_", what);
      st = fh__check_writable(out, fn, "self");
    } else if (st == FH_OK) {
      st = fh__check_writable(out, what, "out");
    }
    if (st != FH_OK) return st;
    fh_tensor_retain(out);
    *result = out;
    return FH_OK;
  }
  fh_tensor_options o = {dtype, dev, false, false};
  return fh_tensor_empty(ndim, shape, &o, result);
}

/* When `*in` partially aliases `out`, replace it by a snapshot (a clone,
 * whose reference goes to *owned), so that the operator reads every input
 * element before any output element is written over it. */
static fh_status unalias(const fh_tensor *out, fh_tensor **in, fh_tensor **owned) {
  *owned = NULL;
  if (*in == NULL || fh__overlap(out, *in) != FH__PARTIAL_OVERLAP) return FH_OK;
  fh_status st = fh_tensor_clone(*in, owned);
  if (st == FH_OK) *in = *owned;
  return st;
}

static void ew_operand(fh_operand *op, const fh_tensor *t, int ndim) {
  /* right-align t's dims in an ndim iteration space; broadcast dims: 0 */
  op->data = fh_tensor_data(t);
  memset(op->stride, 0, sizeof op->stride);
  int lead = ndim - t->ndim;
  for (int i = 0; i < t->ndim; ++i) op->stride[lead + i] = t->shape[i] == 1 ? 0 : t->stride[i];
}

static fh_status arith_dtype_ok(const char *what, fh_dtype d, int op, bool binary) {
  if (d == FH_BOOL) return fh_error_set(FH_ERR_TYPE, "%s: arithmetic is not defined for bool tensors", what);
  if (binary && op == FH_OP_DIV && !fh_dtype_is_floating(d) && !fh_dtype_is_complex(d))
    return fh_error_set(FH_ERR_TYPE, "div: integer division is not supported for %s tensors (convert to float64, or use fh.rns for modular arithmetic)",
                        fh_dtype_name(d));
  return FH_OK;
}

fh_status fh_binary(fh_binary_op op, fh_tensor *a, fh_tensor *b, const fh_scalar *scalar, bool scalar_first,
                    fh_tensor *out, fh_tensor **result) {
  if ((unsigned)op >= FH_BINARY_OP_COUNT) return fh_error_set(FH_ERR_VALUE, "invalid binary operator");
  const char *what = binary_names[op];
  fh_status st;
  fh_device dev = fh_tensor_device(a);
  if ((st = arith_dtype_ok(what, (fh_dtype)a->dtype, op, true)) != FH_OK) return st;
  fh_ew_args args;
  memset(&args, 0, sizeof args);
  int ndim = 0;
  int64_t shape[FH_MAX_DIMS];
  if (b != NULL) {
    if ((st = same_dtype(what, a, b)) || (st = same_device(what, a, b))) return st;
    if ((st = broadcast_shape(what, a, b, &ndim, shape)) != FH_OK) return st;
  } else {
    if (scalar == NULL) return fh_error_set(FH_ERR_VALUE, "%s: missing second operand", what);
    if ((st = fh_scalar_to_dtype(scalar, (fh_dtype)a->dtype, args.scalar)) != FH_OK) {
      fh_error_prefix("%s: scalar operand", what);
      return st;
    }
    args.has_scalar = 1;
    args.scalar_first = scalar_first;
    ndim = a->ndim;
    memcpy(shape, a->shape, sizeof(int64_t) * (size_t)ndim);
  }
  fh_stream *s = NULL;
  if ((st = fh_device_check(dev)) || (st = fh__op_stream(dev, NULL, &s))) return st;
  fh_tensor *r = NULL, *snap_a = NULL, *snap_b = NULL;
  if ((st = prepare_out(what, out, scalar_first ? NULL : a, ndim, shape, (fh_dtype)a->dtype, dev, &r)) != FH_OK) return st;
  if ((st = unalias(r, &a, &snap_a)) != FH_OK || (st = unalias(r, &b, &snap_b)) != FH_OK) {
    fh_tensor_release(snap_a);
    fh_tensor_release(r);
    return st;
  }
  args.op = op;
  args.dtype = a->dtype;
  args.it.ndim = ndim;
  args.it.numel = fh_tensor_numel(r);
  memcpy(args.it.shape, shape, sizeof(int64_t) * (size_t)ndim);
  fh__operand_from(&args.out, r);
  ew_operand(&args.a, a, ndim);
  if (b) ew_operand(&args.b, b, ndim);
  if (args.it.numel > 0) {
    fh_iter_collapse(&args.it, args.out.stride, args.a.stride, b ? args.b.stride : NULL, NULL);
    fh_storage *uses[3] = {r->storage, a->storage, b ? b->storage : NULL};
    st = fh__submit(FH_K_BINARY, dev, s, &args, sizeof args, uses, b ? 3 : 2);
  }
  fh_tensor_release(snap_a);
  fh_tensor_release(snap_b);
  return fh__deliver(st, r, result);
}

fh_status fh_unary(fh_unary_op op, fh_tensor *a, fh_tensor *out, fh_tensor **result) {
  if ((unsigned)op >= FH_UNARY_OP_COUNT) return fh_error_set(FH_ERR_VALUE, "invalid unary operator");
  fh_status st;
  fh_device dev = fh_tensor_device(a);
  if ((st = arith_dtype_ok("neg", (fh_dtype)a->dtype, op, false)) != FH_OK) return st;
  fh_stream *s = NULL;
  if ((st = fh_device_check(dev)) || (st = fh__op_stream(dev, NULL, &s))) return st;
  fh_tensor *r = NULL, *snap_a = NULL;
  if ((st = prepare_out("neg", out, a, a->ndim, a->shape, (fh_dtype)a->dtype, dev, &r)) != FH_OK) return st;
  if ((st = unalias(r, &a, &snap_a)) != FH_OK) {
    fh_tensor_release(r);
    return st;
  }
  fh_ew_args args;
  memset(&args, 0, sizeof args);
  args.op = op;
  args.dtype = a->dtype;
  args.it.ndim = a->ndim;
  args.it.numel = fh_tensor_numel(a);
  memcpy(args.it.shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  fh__operand_from(&args.out, r);
  fh__operand_from(&args.a, a);
  if (args.it.numel > 0) {
    fh_iter_collapse(&args.it, args.out.stride, args.a.stride, NULL, NULL);
    fh_storage *uses[2] = {r->storage, a->storage};
    st = fh__submit(FH_K_UNARY, dev, s, &args, sizeof args, uses, 2);
  }
  fh_tensor_release(snap_a);
  return fh__deliver(st, r, result);
}

fh_status fh_rns(fh_rns_op op, fh_tensor *a, fh_tensor *b, const uint64_t *moduli, int nmoduli, fh_tensor *out,
                 fh_tensor **result) {
  static const char *const names[FH_RNS_OP_COUNT] = {"rns.add", "rns.sub", "rns.mul", "rns.neg"};
  if ((unsigned)op >= FH_RNS_OP_COUNT) return fh_error_set(FH_ERR_VALUE, "invalid RNS operator");
  const char *what = names[op];
  fh_status st;
  bool binary = op != FH_RNS_NEG;
  if (a->dtype != FH_UINT64)
    return fh_error_set(FH_ERR_TYPE, "%s: expected uint64 tensors, got %s", what, fh_dtype_name(a->dtype));
  if (a->ndim < 2)
    return fh_error_set(FH_ERR_VALUE, "%s: expected a tensor of shape [*, limb, n], got %d dimension%s", what, a->ndim,
                        a->ndim == 1 ? "" : "s");
  if (binary) {
    if (b == NULL) return fh_error_set(FH_ERR_VALUE, "%s: missing second operand", what);
    if ((st = same_dtype(what, a, b)) || (st = same_device(what, a, b))) return st;
    bool same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; ++i) same = a->shape[i] == b->shape[i];
    if (!same) {
      char sa[256], sb[256];
      shape_str(a->ndim, a->shape, sa, sizeof sa);
      shape_str(b->ndim, b->shape, sb, sizeof sb);
      return fh_error_set(FH_ERR_VALUE, "%s: shape mismatch: %s vs %s", what, sa, sb);
    }
  }
  int limb_dim = a->ndim - 2;
  if (nmoduli != a->shape[limb_dim])
    return fh_error_set(FH_ERR_VALUE, "%s: %d moduli given for %lld limb rows (one modulus per row of dimension %d)",
                        what, nmoduli, (long long)a->shape[limb_dim], limb_dim + 1);
  if (nmoduli > FH_RNS_MAX_LIMBS)
    return fh_error_set(FH_ERR_VALUE, "%s: at most %d limb rows are supported, got %d", what, FH_RNS_MAX_LIMBS, nmoduli);
  fh_rns_args args;
  memset(&args, 0, sizeof args);
  for (int i = 0; i < nmoduli; ++i) {
    if (moduli[i] < 2 || moduli[i] >= (1ULL << 62))
      return fh_error_set(FH_ERR_VALUE, "%s: modulus %d is %llu; moduli must satisfy 2 <= q < 2^62", what, i + 1,
                          (unsigned long long)moduli[i]);
    fh_modulus_init(&args.mod[i], moduli[i]);
  }
  fh_device dev = fh_tensor_device(a);
  fh_stream *s = NULL;
  if ((st = fh_device_check(dev)) || (st = fh__op_stream(dev, NULL, &s))) return st;
  fh_tensor *r = NULL, *snap_a = NULL, *snap_b = NULL;
  if ((st = prepare_out(what, out, NULL, a->ndim, a->shape, FH_UINT64, dev, &r)) != FH_OK) return st;
  if ((st = unalias(r, &a, &snap_a)) != FH_OK || (st = unalias(r, &b, &snap_b)) != FH_OK) {
    fh_tensor_release(snap_a);
    fh_tensor_release(r);
    return st;
  }
  args.op = op;
  args.nmoduli = nmoduli;
  args.it.ndim = a->ndim;
  args.it.numel = fh_tensor_numel(a);
  memcpy(args.it.shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  fh__operand_from(&args.out, r);
  fh__operand_from(&args.a, a);
  if (binary) fh__operand_from(&args.b, b);
  if (args.it.numel > 0) {
    int keep = limb_dim;
    fh_iter_collapse(&args.it, args.out.stride, args.a.stride, binary ? args.b.stride : NULL, &keep);
    if (keep == args.it.ndim - 1) { /* keep the limb dimension off the inner loop */
      int d = args.it.ndim++;
      args.it.shape[d] = 1;
      args.out.stride[d] = args.a.stride[d] = args.b.stride[d] = 1;
    }
    args.limb_dim = keep;
    fh_storage *uses[3] = {r->storage, a->storage, binary ? b->storage : NULL};
    st = fh__submit(FH_K_RNS, dev, s, &args, sizeof args, uses, binary ? 3 : 2);
  }
  fh_tensor_release(snap_a);
  fh_tensor_release(snap_b);
  return fh__deliver(st, r, result);
}

static fh_dtype sum_dtype(fh_dtype d) {
  switch (d) {
    case FH_BOOL: case FH_UINT8: case FH_INT32: case FH_UINT32: case FH_INT64: return FH_INT64;
    default: return d;
  }
}

fh_status fh_sum(fh_tensor *t, fh_tensor **out) {
  fh_device dev = fh_tensor_device(t);
  fh_stream *s = NULL;
  fh_status st;
  if ((st = fh_device_check(dev)) || (st = fh__op_stream(dev, NULL, &s))) return st;
  fh_tensor_options o = {sum_dtype((fh_dtype)t->dtype), dev, false, false};
  fh_tensor *r = NULL;
  if ((st = fh_tensor_empty(0, NULL, &o, &r)) != FH_OK) return st;
  fh_reduce_args a;
  memset(&a, 0, sizeof a);
  a.it.ndim = t->ndim;
  a.it.numel = fh_tensor_numel(t);
  memcpy(a.it.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  a.dtype = t->dtype;
  a.out_dtype = o.dtype;
  fh__operand_from(&a.in, t);
  a.out = fh_tensor_data(r);
  if (a.it.numel > 0) fh_iter_collapse(&a.it, a.in.stride, NULL, NULL, NULL);
  fh_storage *uses[2] = {r->storage, t->storage};
  if ((st = fh__submit(FH_K_SUM, dev, s, &a, sizeof a, uses, 2)) != FH_OK) {
    fh_tensor_release(r);
    return st;
  }
  *out = r;
  return FH_OK;
}

/* Runs a compare kernel on a's device (b moved there if needed) and reads
 * the scalar result back. */
static fh_status compare(const char *what, int mode, fh_tensor *a, fh_tensor *b, double rtol, double atol, void *res,
                         bool *shape_ok) {
  fh_status st;
  *shape_ok = a->ndim == b->ndim;
  for (int i = 0; *shape_ok && i < a->ndim; ++i) *shape_ok = a->shape[i] == b->shape[i];
  if (mode != FH_CMP_EQUAL && !*shape_ok) {
    char sa[256], sb[256];
    shape_str(a->ndim, a->shape, sa, sizeof sa);
    shape_str(b->ndim, b->shape, sb, sizeof sb);
    return fh_error_set(FH_ERR_VALUE, "%s: shape mismatch: %s vs %s", what, sa, sb);
  }
  if (mode != FH_CMP_EQUAL && (st = same_dtype(what, a, b)) != FH_OK) return st;
  if (!*shape_ok || a->dtype != b->dtype) return FH_OK;
  fh_device dev = fh_tensor_device(a);
  if ((st = fh_check_host_read(dev, what)) != FH_OK) return st;
  fh_tensor *bb = b;
  if (!fh_device_eq(dev, fh_tensor_device(b))) {
    if ((st = fh_tensor_to(b, dev, false, NULL, false, &bb)) != FH_OK) return st;
  } else {
    fh_tensor_retain(bb);
  }
  fh_stream *s = NULL;
  fh_tensor *r = NULL;
  fh_tensor_options o = {mode == FH_CMP_MAXDIFF ? FH_FLOAT64 : FH_INT64, dev, false, false};
  if ((st = fh_device_check(dev)) || (st = fh__op_stream(dev, NULL, &s)) ||
      (st = fh_tensor_empty(0, NULL, &o, &r))) {
    fh_tensor_release(bb);
    return st;
  }
  fh_compare_args c;
  memset(&c, 0, sizeof c);
  c.it.ndim = a->ndim;
  c.it.numel = fh_tensor_numel(a);
  memcpy(c.it.shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  c.mode = mode;
  c.dtype = a->dtype;
  c.rtol = rtol;
  c.atol = atol;
  fh__operand_from(&c.a, a);
  fh__operand_from(&c.b, bb);
  c.out = fh_tensor_data(r);
  if (c.it.numel > 0) fh_iter_collapse(&c.it, c.a.stride, c.b.stride, NULL, NULL);
  fh_storage *uses[3] = {r->storage, a->storage, bb->storage};
  st = fh__submit(FH_K_COMPARE, dev, s, &c, sizeof c, uses, 3);
  if (st == FH_OK) st = fh_tensor_read(r, res);
  fh_tensor_release(r);
  fh_tensor_release(bb);
  return st;
}

fh_status fh_equal(fh_tensor *a, fh_tensor *b, bool *result) {
  int64_t mismatches = 1;
  bool shape_ok = false;
  fh_status st = compare("equal", FH_CMP_EQUAL, a, b, 0, 0, &mismatches, &shape_ok);
  if (st != FH_OK) return st;
  *result = shape_ok && a->dtype == b->dtype && mismatches == 0;
  return FH_OK;
}

fh_status fh_allclose(fh_tensor *a, fh_tensor *b, double rtol, double atol, bool *result) {
  if (!(rtol >= 0) || !(atol >= 0)) return fh_error_set(FH_ERR_VALUE, "allclose: rtol and atol must be >= 0");
  int64_t bad = 1;
  bool shape_ok = false;
  fh_status st = compare("allclose", FH_CMP_CLOSE, a, b, rtol, atol, &bad, &shape_ok);
  if (st != FH_OK) return st;
  *result = bad == 0;
  return FH_OK;
}

fh_status fh_max_abs_diff(fh_tensor *a, fh_tensor *b, double *result) {
  double m = 0;
  bool shape_ok = false;
  fh_status st = compare("max_abs_diff", FH_CMP_MAXDIFF, a, b, 0, 0, &m, &shape_ok);
  if (st != FH_OK) return st;
  *result = m;
  return FH_OK;
}
