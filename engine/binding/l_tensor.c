/* Tensor userdata: creation functions, fields, methods, operators. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

/* New tensor box on the stack, filled by `expr` (an engine call writing
 * into &box->t); raises on failure (the empty box is then garbage). */
#define PUSH_NEW(L, expr_with_out)                      \
  do {                                                  \
    fh_tensor_box *box_ = fh__lua_new_tensor_box(L);    \
    fh_tensor **out_ = &box_->t;                        \
    fh__lua_check(L, (expr_with_out));                  \
    fh__lua_account(L, box_->t);                        \
  } while (0)


static const char *const create_opts[] = {"dtype", "device", "requires_grad", "pin_memory", NULL};
static const char *const random_opts[] = {"dtype", "device", "requires_grad", "pin_memory", "generator", NULL};

static fh_tensor_options opts_from_list(lua_State *L, int idx, const char *fn, fh_dtype def,
                                        const char *const *allowed) {
  fh__lua_checkopts(L, idx, fn, allowed);
  fh_tensor_options o = fh_tensor_options_default();
  o.dtype = fh__lua_optdtype(L, idx, "dtype", def, fn);
  o.device = fh__lua_optdevice(L, idx, "device", fh_cpu(), fn);
  o.requires_grad = fh__lua_optbool(L, idx, "requires_grad", 0, fn);
  o.pin_memory = fh__lua_optbool(L, idx, "pin_memory", 0, fn);
  if (o.pin_memory && o.device.type != FH_DEVICE_CPU)
    fh__lua_raise(L, FH_ERR_VALUE, "%s: pin_memory=true requires device \"cpu\"", fn);
  return o;
}
static fh_tensor_options opts_from(lua_State *L, int idx, const char *fn, fh_dtype def) {
  return opts_from_list(L, idx, fn, def, create_opts);
}

/* The shape argument of empty/zeros/ones/rand/randn: a table of sizes, or
 * sizes as varargs (Torch7 style: fh.zeros(2, 3, opts)). Returns ndim and
 * the index of the options argument. */
static int shape_args(lua_State *L, const char *fn, int64_t *shape, int *optidx) {
  if (lua_type(L, 1) == LUA_TNUMBER) {
    int n = 0, i = 1;
    for (; lua_type(L, i) == LUA_TNUMBER; ++i) {
      if (n == FH_MAX_DIMS) fh__lua_raise(L, FH_ERR_VALUE, "%s: at most %d dimensions", fn, FH_MAX_DIMS);
      shape[n++] = fh__lua_checkint(L, i, fn, "size", 0, INT64_MAX / 2);
    }
    *optidx = i;
    return n;
  }
  int n = fh__lua_checkshape(L, 1, shape, fn, 0);
  for (int i = 0; i < n; ++i)
    if (shape[i] < 0)
      fh__lua_raise(L, FH_ERR_VALUE, "%s: shape[%d] must be a non-negative integer, got %lld", fn, i + 1,
                    (long long)shape[i]);
  *optidx = 2;
  return n;
}
static int checked_shape_args(lua_State *L, const char *fn, int64_t *shape, int *optidx) {
  int n = shape_args(L, fn, shape, optidx);
  if (fh_shape_check(n, shape, NULL) != FH_OK) {
    fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  return n;
}

static fh_tensor *self(lua_State *L, const char *fn) { return fh__lua_checktensor(L, 1, fn, "self"); }

/* ---- fh.tensor ---------------------------------------------------------- */
/* fh.tensor(data, opts): data is a scalar (number, boolean, int64_t/uint64_t
 * cdata; {re, im} with dtype complex128) or nested lists of them. Every
 * table must be a proper list (keys exactly 1..n) and sibling lists must
 * have equal lengths. Without a dtype option the dtype is inferred from all
 * leaves: any Lua number -> float32 (the default dtype); else any uint64_t
 * cdata -> uint64; else any int64_t cdata -> int64; else bool (booleans
 * only); an empty list -> float32. Leaves are first collected as scalars,
 * then converted, so a bad leaf is reported with its path. */
typedef struct build_ctx {
  const char *fn;  /* for messages: the function called ("fh.tensor") */
  const char *arg; /* and the argument's name ("data") */
  int ndim;
  int64_t shape[FH_MAX_DIMS];
  int complex_pairs; /* dtype complex128 requested: {re, im} tables are leaves */
  int message;       /* a CKKS message: no boolean leaves */
  int pairs_only;    /* (complex CKKS messages) every leaf must be a {re, im} pair */
  fh_scalar *vals;
  int64_t pos;
  unsigned kinds; /* bit (1 << fh_scalar_kind) per kind seen */
  char path[256];
} build_ctx;

static int is_pair(lua_State *L, int idx) {
  if (lua_type(L, idx) != LUA_TTABLE || lua_objlen(L, idx) != 2) return 0;
  lua_rawgeti(L, idx, 1);
  lua_rawgeti(L, idx, 2);
  int pair = lua_type(L, -1) == LUA_TNUMBER && lua_type(L, -2) == LUA_TNUMBER;
  lua_pop(L, 2);
  return pair;
}

static int is_leaf(lua_State *L, int idx, const build_ctx *c) {
  if (lua_type(L, idx) != LUA_TTABLE || fh__lua_totensor(L, idx)) return 1;
  return c->complex_pairs && is_pair(L, idx);
}

/* The shape follows the first element at every level. */
static void discover_shape(lua_State *L, int idx, build_ctx *c) {
  lua_pushvalue(L, idx);
  int depth = 0;
  for (;;) {
    int top = lua_gettop(L);
    if (is_leaf(L, top, c)) break;
    if (depth == FH_MAX_DIMS)
      fh__lua_raise(L, FH_ERR_VALUE, "%s: %s is nested deeper than %d dimensions", c->fn, c->arg, FH_MAX_DIMS);
    c->shape[depth++] = (int64_t)lua_objlen(L, top);
    if (c->shape[depth - 1] == 0) break;
    lua_rawgeti(L, top, 1);
    lua_remove(L, top);
  }
  lua_pop(L, 1);
  c->ndim = depth;
}

static const char *leaf_expectation(const build_ctx *c) {
  if (c->pairs_only) return "a {re, im} pair of numbers";
  if (c->message) return "a number or int64/uint64 cdata";
  return c->complex_pairs ? "a number, boolean, int64/uint64 cdata or {re, im} pair"
                          : "a number, boolean or int64/uint64 cdata";
}

static void fill_rec(lua_State *L, int idx, build_ctx *c, int depth) {
  size_t plen = strlen(c->path);
  if (depth == c->ndim) {
    fh_scalar *s = &c->vals[c->pos];
    if (lua_type(L, idx) == LUA_TTABLE && !is_leaf(L, idx, c))
      fh__lua_raise(L, FH_ERR_VALUE, "%s: %s%s is a table but the %s has %d nested dimension%s (ragged)", c->fn,
                    c->arg, c->path, c->arg, c->ndim, c->ndim == 1 ? "" : "s");
    if ((c->pairs_only && !is_pair(L, idx)) || (c->message && lua_type(L, idx) == LUA_TBOOLEAN) ||
        !fh__lua_toscalar(L, idx, s, c->complex_pairs))
      fh__lua_raise(L, FH_ERR_TYPE, "%s: %s%s expected %s, got %s", c->fn, c->arg, c->path, leaf_expectation(c),
                    fh__lua_typename(L, idx));
    c->kinds |= 1u << s->kind;
    c->pos++;
    return;
  }
  if (is_leaf(L, idx, c))
    fh__lua_raise(L, FH_ERR_VALUE, "%s: %s%s is not a table but the %s has %d nested dimensions (ragged nested tables)",
                  c->fn, c->arg, c->path, c->arg, c->ndim);
  int64_t n = (int64_t)lua_objlen(L, idx);
  if (n != c->shape[depth])
    fh__lua_raise(L, FH_ERR_VALUE, "%s: ragged nested tables: %s%s has %lld elements, expected %lld", c->fn, c->arg,
                  c->path, (long long)n, (long long)c->shape[depth]);
  /* a proper list: exactly the keys 1..n */
  int64_t count = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    count++;
  }
  if (count != n)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: %s%s is not a list (it has keys other than 1..%lld)", c->fn, c->arg, c->path,
                  (long long)n);
  luaL_checkstack(L, 8, c->fn);
  for (int64_t i = 0; i < n; ++i) {
    lua_rawgeti(L, idx, (int)(i + 1));
    if (plen + 24 < sizeof c->path) snprintf(c->path + plen, sizeof c->path - plen, "[%lld]", (long long)i + 1);
    fill_rec(L, lua_gettop(L), c, depth + 1);
    c->path[plen] = '\0';
    lua_pop(L, 1);
  }
}

/* "[i][j]..." (1-based) of the element at row-major position pos. */
static void element_path(const build_ctx *c, int64_t pos, char *buf, size_t n) {
  int64_t idx[FH_MAX_DIMS];
  for (int d = c->ndim - 1; d >= 0; --d) {
    idx[d] = pos % c->shape[d];
    pos /= c->shape[d];
  }
  size_t l = 0;
  buf[0] = '\0';
  for (int d = 0; d < c->ndim && l + 24 < n; ++d) l += (size_t)snprintf(buf + l, n - l, "[%lld]", (long long)idx[d] + 1);
}

static fh_dtype inferred_dtype(unsigned kinds) {
  if (kinds & (1u << FH_SCALAR_FLOAT)) return FH_FLOAT32;
  if (kinds & (1u << FH_SCALAR_COMPLEX)) return FH_COMPLEX128;
  if (kinds & (1u << FH_SCALAR_UINT)) return FH_UINT64;
  if (kinds & (1u << FH_SCALAR_INT)) return FH_INT64;
  if (kinds & (1u << FH_SCALAR_BOOL)) return FH_BOOL;
  return FH_FLOAT32;
}

static int build_from_table(lua_State *L, int idx, build_ctx *c, fh_tensor_options *o, int has_dtype);

static int l_tensor(lua_State *L) {
  if (lua_isnoneornil(L, 1)) return fh__lua_raise(L, FH_ERR_TYPE, "fh.tensor: argument 1 (data) is missing");
  fh_tensor *src = fh__lua_totensor(L, 1);
  if (src != NULL) {
    fh_tensor_options o = opts_from(L, 2, "fh.tensor", (fh_dtype)src->dtype);
    fh_tensor *tmp = NULL;
    fh__lua_check(L, fh_tensor_to_dtype(src, o.dtype, &tmp));
    fh_tensor_box *b = fh__lua_new_tensor_box(L);
    fh_status st = fh_tensor_to(tmp, o.device, o.pin_memory, NULL, false, &b->t);
    fh_tensor_release(tmp);
    fh__lua_check(L, st);
    b->t->requires_grad = o.requires_grad;
    fh__lua_account(L, b->t);
    return 1;
  }
  int has_dtype = 0;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "dtype");
    has_dtype = !lua_isnil(L, -1);
    lua_pop(L, 1);
  }
  fh_tensor_options o = opts_from(L, 2, "fh.tensor", FH_FLOAT32);
  build_ctx c;
  memset(&c, 0, sizeof c);
  c.fn = "fh.tensor";
  c.arg = "data";
  c.complex_pairs = has_dtype && o.dtype == FH_COMPLEX128;
  return build_from_table(L, 1, &c, &o, has_dtype);
}

/* Pushes a new tensor built from the nested table at idx (see fh.tensor);
 * o->dtype is inferred from the leaves unless has_dtype. */
static int build_from_table(lua_State *L, int idx, build_ctx *c, fh_tensor_options *o, int has_dtype) {
  discover_shape(L, idx, c);
  int64_t numel = 0;
  if (fh_shape_check(c->ndim, c->shape, &numel) != FH_OK) {
    fh_error_prefix("%s", c->fn);
    fh__lua_error(L);
  }
  /* userdata buffers: collected by the GC even when an element raises */
  c->vals = lua_newuserdata(L, (size_t)numel * sizeof(fh_scalar) + 1);
  int valsidx = lua_gettop(L);
  fill_rec(L, idx, c, 0);
  if (!has_dtype) o->dtype = inferred_dtype(c->kinds);
  size_t es = fh_dtype_size(o->dtype);
  unsigned char *buf = lua_newuserdata(L, (size_t)numel * es + 1);
  int bufidx = lua_gettop(L);
  for (int64_t i = 0; i < numel; ++i)
    if (fh_scalar_to_dtype(&c->vals[i], o->dtype, buf + (size_t)i * es) != FH_OK) {
      char path[256];
      element_path(c, i, path, sizeof path);
      fh_error_prefix("%s: %s%s", c->fn, c->arg, path);
      fh__lua_error(L);
    }
  /* named by c->fn: core._message_tensor runs for CkksEngine:encode and friends */
  fh_tensor_box *box = fh__lua_new_tensor_box(L);
  if (fh_tensor_from_host(buf, c->ndim, c->shape, o, &box->t) != FH_OK) fh__lua_error_named(L, c->fn);
  fh__lua_account(L, box->t);
  lua_remove(L, bufidx);
  lua_remove(L, valsidx);
  return 1;
}

/* core._message_tensor(data, complex, fn): a CKKS message from nested Lua
 * lists (lua/fhelium/ckks.lua), errors named "<fn>: msg...". Real
 * (complex false): numbers only, float64 [*batch, slot]. Complex: every
 * leaf a {re, im} pair, complex128 [*batch, slot], at least one list level
 * (a lone pair is not a list of slots). The shape never depends on the
 * lengths: a table of numbers is always a list of real slots. */
static int l_message_tensor(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int complex = lua_toboolean(L, 2);
  const char *fn = luaL_checkstring(L, 3);
  build_ctx c;
  memset(&c, 0, sizeof c);
  c.fn = fn;
  c.arg = "msg";
  c.message = 1;
  c.complex_pairs = complex;
  c.pairs_only = complex;
  if (complex && is_pair(L, 1))
    return fh__lua_raise(L, FH_ERR_TYPE,
                         "%s: msg with complex = true expected a list of {re, im} pairs, got a single pair "
                         "(write {{re, im}} for one slot, or give a 0-dim complex128 tensor for every slot)",
                         fn);
  fh_tensor_options o = fh_tensor_options_default();
  o.dtype = complex ? FH_COMPLEX128 : FH_FLOAT64;
  return build_from_table(L, 1, &c, &o, 1);
}

/* ---- other creation ----------------------------------------------------- */
static int create_shaped(lua_State *L, const char *fn, int kind) {
  int64_t shape[FH_MAX_DIMS];
  int ndim, optidx = 0;
  fh_scalar value = fh_scalar_float(kind == 1 ? 1.0 : 0.0);
  if (kind == 2) { /* full(shape, x, opts): shape is a table or one size */
    if (lua_type(L, 1) == LUA_TNUMBER) {
      ndim = 1;
      shape[0] = fh__lua_checkint(L, 1, fn, "size", 0, INT64_MAX / 2);
    } else {
      ndim = checked_shape_args(L, fn, shape, &optidx);
    }
    if (!fh__lua_toscalar(L, 2, &value, 1))
      return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 2 (value) expected a number, boolean, int64/uint64 cdata or {re, im} pair, got %s", fn,
                           fh__lua_typename(L, 2));
    optidx = 3;
  } else {
    ndim = checked_shape_args(L, fn, shape, &optidx);
  }
  fh_tensor_options o = opts_from(L, optidx, fn, FH_FLOAT32);
  if (kind < 0) PUSH_NEW(L, fh_tensor_empty(ndim, shape, &o, out_));
  else PUSH_NEW(L, fh_tensor_full(ndim, shape, &value, &o, out_));
  return 1;
}
static int l_empty(lua_State *L) { return create_shaped(L, "fh.empty", -1); }
static int l_zeros(lua_State *L) { return create_shaped(L, "fh.zeros", 0); }
static int l_ones(lua_State *L) { return create_shaped(L, "fh.ones", 1); }
static int l_full(lua_State *L) { return create_shaped(L, "fh.full", 2); }

static double checknum(lua_State *L, int idx, const char *fn, const char *name) {
  if (lua_type(L, idx) != LUA_TNUMBER)
  {
    char a[96];
    fh__lua_raise(L, FH_ERR_TYPE, "%s: %s expected a number, got %s", fn, fh__lua_argdesc(a, sizeof a, fn, idx, name),
                  fh__lua_typename(L, idx));
  }
  return lua_tonumber(L, idx);
}

static int l_arange(lua_State *L) {
  double a = 0, b, step = 1;
  int optidx;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    a = checknum(L, 1, "fh.arange", "start");
    b = checknum(L, 2, "fh.arange", "end");
    optidx = 3;
    if (lua_type(L, 3) == LUA_TNUMBER) {
      step = checknum(L, 3, "fh.arange", "step");
      optidx = 4;
    }
  } else {
    b = checknum(L, 1, "fh.arange", "n");
    optidx = 2;
  }
  fh_tensor_options o = opts_from(L, optidx, "fh.arange", FH_FLOAT32);
  PUSH_NEW(L, fh_tensor_arange(a, b, step, &o, out_));
  return 1;
}

typedef struct gen_box { fh_generator *g; } gen_box;

static int l_generator(lua_State *L) {
  uint64_t seed = 0;
  if (!lua_isnoneornil(L, 1)) {
    fh_scalar s;
    if (!fh__lua_toscalar(L, 1, &s, 0) || s.kind == FH_SCALAR_BOOL)
      return fh__lua_raise(L, FH_ERR_TYPE, "fh.Generator: seed expected an integer, got %s", fh__lua_typename(L, 1));
    if (fh_scalar_to_dtype(&s, FH_UINT64, &seed) != FH_OK) {
      fh_error_prefix("fh.Generator: seed");
      return fh__lua_error(L);
    }
  }
  gen_box *b = fh__lua_newbox(L, sizeof *b, FH_GENERATOR_MT);
  fh__lua_check(L, fh_generator_new(seed, &b->g));
  return 1;
}
static int gen_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  gen_box *b = fh__lua_testudata(L, 1, FH_GENERATOR_MT);
  if (b && b->g) fh_generator_free(b->g), b->g = NULL;
  FH_LUA_GC_END;
  return 0;
}
static int gen_seed(lua_State *L) {
  gen_box *b = fh__lua_testudata(L, 1, FH_GENERATOR_MT);
  if (!b) return fh__lua_raise(L, FH_ERR_TYPE, "Generator:seed: expected a Generator");
  lua_pushnumber(L, (lua_Number)fh_generator_seed(b->g));
  return 1;
}
static int gen_tostring(lua_State *L) {
  gen_box *b = fh__lua_testudata(L, 1, FH_GENERATOR_MT);
  char buf[64] = "fhelium.Generator";
  if (b && b->g) snprintf(buf, sizeof buf, "fhelium.Generator(seed=%llu)", (unsigned long long)fh_generator_seed(b->g));
  lua_pushstring(L, buf);
  return 1;
}

static int random_create(lua_State *L, const char *fn, int normal) {
  int64_t shape[FH_MAX_DIMS];
  int optidx = 0;
  int ndim = checked_shape_args(L, fn, shape, &optidx);
  fh_tensor_options o = opts_from_list(L, optidx, fn, FH_FLOAT32, random_opts);
  fh_generator *g = NULL;
  if (lua_istable(L, optidx)) {
    lua_getfield(L, optidx, "generator");
    if (!lua_isnil(L, -1)) {
      gen_box *b = fh__lua_testudata(L, -1, FH_GENERATOR_MT);
      if (!b) return fh__lua_raise(L, FH_ERR_TYPE, "%s: option 'generator' expected a Generator, got %s", fn, fh__lua_typename(L, -1));
      g = b->g;
    }
    lua_pop(L, 1);
  }
  if (normal) PUSH_NEW(L, fh_tensor_randn(ndim, shape, g, &o, out_));
  else PUSH_NEW(L, fh_tensor_rand(ndim, shape, g, &o, out_));
  return 1;
}
static int l_rand(lua_State *L) { return random_create(L, "fh.rand", 0); }
static int l_randn(lua_State *L) { return random_create(L, "fh.randn", 1); }

/* ---- fields ------------------------------------------------------------- */
static void push_int64_array(lua_State *L, const int64_t *v, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; ++i) {
    lua_pushnumber(L, (lua_Number)v[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

/* t[i] (Torch7 indexing): the view t:select(1, i), pushed on the stack. */
static fh_tensor *push_index_view(lua_State *L, fh_tensor *t, const char *fn) {
  double x = lua_tonumber(L, 2);
  if (t->ndim == 0) fh__lua_raise(L, FH_ERR_VALUE, "%s: a 0-dimensional tensor cannot be indexed", fn);
  if (x != floor(x)) fh__lua_raise(L, FH_ERR_VALUE, "%s: index must be an integer, got %.17g", fn, x);
  if (x < 1 || x > (double)t->shape[0])
    fh__lua_raise(L, FH_ERR_VALUE, "%s: index %.17g out of range for dimension 1 of size %lld (indices are 1-based)",
                  fn, x, (long long)t->shape[0]);
  fh_tensor_box *b;
  PUSH_NEW(L, fh_tensor_select(t, 0, (int64_t)x - 1, out_));
  b = lua_touserdata(L, -1);
  return b->t;
}

static int t_index(lua_State *L) {
  /* numbers: Torch7 indexing along dimension 1; a 1-d tensor gives the
   * element itself (as item() does) */
  if (lua_type(L, 2) == LUA_TNUMBER) {
    fh_tensor *t = fh__lua_checktensor(L, 1, "Tensor.__index", "self");
    fh_tensor *v = push_index_view(L, t, "Tensor.__index");
    if (v->ndim > 0) return 1;
    lua_getfield(L, lua_upvalueindex(1), "item");
    lua_insert(L, -2);
    lua_call(L, 1, 1);
    return 1;
  }
  /* methods first (upvalue 1), then fields */
  if (lua_type(L, 2) == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
    fh_tensor *t = fh__lua_totensor(L, 1);
    if (t == NULL) return 0;
    const char *k = lua_tostring(L, 2);
    if (strcmp(k, "shape") == 0) push_int64_array(L, t->shape, t->ndim);
    else if (strcmp(k, "dtype") == 0) lua_pushstring(L, fh_dtype_name((fh_dtype)t->dtype));
    else if (strcmp(k, "device") == 0) fh__lua_push_device(L, fh_tensor_device(t));
    else if (strcmp(k, "layout") == 0) lua_pushliteral(L, "strided");
    else if (strcmp(k, "requires_grad") == 0) lua_pushboolean(L, t->requires_grad);
    else if (strcmp(k, "nbytes") == 0) lua_pushnumber(L, (lua_Number)fh_tensor_nbytes(t));
    else if (strcmp(k, "ndim") == 0) lua_pushinteger(L, t->ndim);
    else lua_pushnil(L);
    return 1;
  }
  return 0;
}

static int t_newindex(lua_State *L) {
  fh_tensor *t = self(L, "Tensor.__newindex");
  if (lua_type(L, 2) == LUA_TNUMBER) { /* t[i] = tensor (copy) or value (fill) */
    fh_tensor *v = push_index_view(L, t, "Tensor.__newindex");
    fh_tensor *src = fh__lua_totensor(L, 3);
    fh_status st;
    if (src != NULL) {
      st = fh_tensor_copy_(v, src, NULL, false);
    } else {
      fh_scalar x;
      if (!fh__lua_toscalar(L, 3, &x, 1))
        return fh__lua_raise(L, FH_ERR_TYPE, "Tensor.__newindex: expected a Tensor or a number, got %s",
                             fh__lua_typename(L, 3));
      st = fh_tensor_fill_(v, &x);
    }
    if (st != FH_OK) fh__lua_error(L); /* named Tensor.__newindex by the binding */
    return 0;
  }
  const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
  if (k && strcmp(k, "requires_grad") == 0) {
    if (!lua_isboolean(L, 3))
      return fh__lua_raise(L, FH_ERR_TYPE, "requires_grad expected a boolean, got %s", fh__lua_typename(L, 3));
    t->requires_grad = lua_toboolean(L, 3);
    return 0;
  }
  return fh__lua_raise(L, FH_ERR_TYPE, "cannot assign field '%s' of a Tensor (tensor fields are read-only)",
                       k ? k : luaL_typename(L, 2));
}

static int t_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  fh_tensor_box *b = fh__lua_testudata(L, 1, FH_TENSOR_MT);
  if (b && b->t) {
    fh_tensor_release(b->t);
    b->t = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}

/* ---- simple methods ----------------------------------------------------- */
static int t_stride(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:stride");
  if (lua_isnoneornil(L, 2)) {
    push_int64_array(L, t->stride, t->ndim);
    return 1;
  }
  int64_t d = fh__lua_checkint(L, 2, "Tensor:stride", "dim", 1, t->ndim > 0 ? t->ndim : 1);
  if (t->ndim == 0) return fh__lua_raise(L, FH_ERR_VALUE, "Tensor:stride: a 0-dimensional tensor has no dimension 1");
  lua_pushnumber(L, (lua_Number)t->stride[d - 1]);
  return 1;
}
static int t_size(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:size");
  if (lua_isnoneornil(L, 2)) {
    push_int64_array(L, t->shape, t->ndim);
    return 1;
  }
  int64_t d = fh__lua_checkint(L, 2, "Tensor:size", "dim", 1, t->ndim > 0 ? t->ndim : 1);
  if (t->ndim == 0) return fh__lua_raise(L, FH_ERR_VALUE, "Tensor:size: a 0-dimensional tensor has no dimension 1");
  lua_pushnumber(L, (lua_Number)t->shape[d - 1]);
  return 1;
}
static int t_numel(lua_State *L) { lua_pushnumber(L, (lua_Number)fh_tensor_numel(self(L, "Tensor:numel"))); return 1; }
static int t_dim(lua_State *L) { lua_pushinteger(L, self(L, "Tensor:dim")->ndim); return 1; }
static int t_element_size(lua_State *L) { lua_pushinteger(L, (lua_Integer)fh_tensor_element_size(self(L, "Tensor:element_size"))); return 1; }
static int t_data_ptr(lua_State *L) { lua_pushnumber(L, (lua_Number)(uintptr_t)fh_tensor_data(self(L, "Tensor:data_ptr"))); return 1; }
static int t_storage_ptr(lua_State *L) { lua_pushnumber(L, (lua_Number)(uintptr_t)self(L, "Tensor:storage_ptr")->storage->data); return 1; }
static int t_storage_offset(lua_State *L) { lua_pushnumber(L, (lua_Number)self(L, "Tensor:storage_offset")->offset); return 1; }
static int t_is_pinned(lua_State *L) { lua_pushboolean(L, fh_tensor_is_pinned(self(L, "Tensor:is_pinned"))); return 1; }
static int t_is_contiguous(lua_State *L) { lua_pushboolean(L, fh_tensor_is_contiguous(self(L, "Tensor:is_contiguous"))); return 1; }
static int t_requires_grad_(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:requires_grad_");
  if (!lua_isnoneornil(L, 2) && !lua_isboolean(L, 2))
    return fh__lua_raise(L, FH_ERR_TYPE, "Tensor:requires_grad_: argument 1 (flag) expected a boolean, got %s", fh__lua_typename(L, 2));
  t->requires_grad = lua_isnoneornil(L, 2) ? true : lua_toboolean(L, 2);
  lua_settop(L, 1);
  return 1;
}

/* ---- device movement ---------------------------------------------------- */
static const char *const copy_opts[] = {"non_blocking", "stream", NULL};

static int t_to(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:to");
  if (lua_type(L, 2) != LUA_TSTRING)
    return fh__lua_raise(L, FH_ERR_TYPE, "Tensor:to: argument 1 (device or dtype) expected a device or dtype string, got %s", fh__lua_typename(L, 2));
  fh__lua_checkopts(L, 3, "Tensor:to", copy_opts);
  fh_dtype dt = FH_BOOL;
  if (fh_dtype_parse(lua_tostring(L, 2), &dt) == FH_OK) {
    fh_error_clear();
    if ((int)dt == t->dtype) {
      lua_settop(L, 1);
      return 1;
    }
    PUSH_NEW(L, fh_tensor_to_dtype(t, dt, out_));
    return 1;
  }
  fh_error_clear();
  fh_device d = fh__lua_checkdevice(L, 2, "Tensor:to");
  int nb = fh__lua_optbool(L, 3, "non_blocking", 0, "Tensor:to");
  fh_stream *s = fh__lua_optstream(L, 3, "stream", "Tensor:to");
  if (fh_device_eq(d, fh_tensor_device(t))) {
    lua_settop(L, 1);
    return 1;
  }
  PUSH_NEW(L, fh_tensor_to(t, d, false, s, nb, out_));
  return 1;
}

static int t_cpu(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:cpu");
  if (fh_tensor_device(t).type == FH_DEVICE_CPU) {
    lua_settop(L, 1);
    return 1;
  }
  PUSH_NEW(L, fh_tensor_to(t, fh_cpu(), false, NULL, false, out_));
  return 1;
}

static int t_cuda(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:cuda");
  fh_device d = {FH_DEVICE_CUDA, fh_cuda_current_device()};
  if (!lua_isnoneornil(L, 2)) d.index = (int32_t)fh__lua_checkint(L, 2, "Tensor:cuda", "device", 0, 1023);
  if (fh_device_eq(d, fh_tensor_device(t))) {
    lua_settop(L, 1);
    return 1;
  }
  PUSH_NEW(L, fh_tensor_to(t, d, false, NULL, false, out_));
  return 1;
}

static int t_pin_memory(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:pin_memory");
  if (fh_tensor_device(t).type != FH_DEVICE_CPU)
    return fh__lua_raise(L, FH_ERR_VALUE, "Tensor:pin_memory: only cpu tensors can be pinned");
  if (fh_tensor_is_pinned(t)) {
    lua_settop(L, 1);
    return 1;
  }
  PUSH_NEW(L, fh_tensor_to(t, fh_cpu(), true, NULL, false, out_));
  return 1;
}

static int t_clone(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:clone");
  PUSH_NEW(L, fh_tensor_clone(t, out_));
  return 1;
}
static int t_contiguous(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:contiguous");
  if (fh_tensor_is_contiguous(t)) {
    lua_settop(L, 1);
    return 1;
  }
  PUSH_NEW(L, fh_tensor_clone(t, out_));
  return 1;
}

static int t_copy_(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:copy_");
  fh_tensor *src = fh__lua_checktensor(L, 2, "Tensor:copy_", "src");
  fh__lua_checkopts(L, 3, "Tensor:copy_", copy_opts);
  int nb = fh__lua_optbool(L, 3, "non_blocking", 0, "Tensor:copy_");
  fh_stream *s = fh__lua_optstream(L, 3, "stream", "Tensor:copy_");
  fh__lua_check(L, fh_tensor_copy_(t, src, s, nb));
  lua_settop(L, 1);
  return 1;
}

static int t_fill_(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:fill_");
  fh_scalar v;
  if (!fh__lua_toscalar(L, 2, &v, 1))
    return fh__lua_raise(L, FH_ERR_TYPE, "Tensor:fill_: argument 1 (value) expected a number, got %s", fh__lua_typename(L, 2));
  fh__lua_check(L, fh_tensor_fill_(t, &v));
  lua_settop(L, 1);
  return 1;
}

/* ---- views -------------------------------------------------------------- */
static int t_view(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:view");
  int64_t shape[FH_MAX_DIMS];
  int n = fh__lua_checkshape(L, 2, shape, "Tensor:view", 1);
  PUSH_NEW(L, fh_tensor_view(t, n, shape, out_));
  return 1;
}
static int t_reshape(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:reshape");
  int64_t shape[FH_MAX_DIMS];
  int n = fh__lua_checkshape(L, 2, shape, "Tensor:reshape", 1);
  PUSH_NEW(L, fh_tensor_reshape(t, n, shape, out_));
  return 1;
}

/* t:expand(shape): a read-only broadcast view (size-1 dimensions stretch with
 * stride 0, new leading dimensions are added); -1 keeps a size. */
static int t_expand(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:expand");
  int64_t shape[FH_MAX_DIMS];
  int n = fh__lua_checkshape(L, 2, shape, "Tensor:expand", 1);
  if (n < t->ndim)
    return fh__lua_raise(L, FH_ERR_VALUE, "Tensor:expand: %d sizes given for a %d-dimensional tensor (need at least %d)",
                         n, t->ndim, t->ndim);
  for (int i = 0; i < n; ++i) {
    int src = i - (n - t->ndim);
    if (shape[i] == -1) {
      if (src < 0) return fh__lua_raise(L, FH_ERR_VALUE, "Tensor:expand: -1 is not allowed for new leading dimension %d", i + 1);
      shape[i] = t->shape[src];
    } else if (shape[i] < 0) {
      return fh__lua_raise(L, FH_ERR_VALUE, "Tensor:expand: invalid size %lld at dimension %d", (long long)shape[i], i + 1);
    }
  }
  PUSH_NEW(L, fh_tensor_expand(t, n, shape, out_));
  return 1;
}

static int checkdim(lua_State *L, int idx, const fh_tensor *t, const char *fn) {
  if (lua_type(L, idx) != LUA_TNUMBER)
  {
    char a[96];
    fh__lua_raise(L, FH_ERR_TYPE, "%s: %s expected an integer, got %s", fn, fh__lua_argdesc(a, sizeof a, fn, idx, "dim"),
                  fh__lua_typename(L, idx));
  }
  double x = lua_tonumber(L, idx);
  if (x != floor(x))
    fh__lua_raise(L, FH_ERR_VALUE, "%s: dimension must be an integer, got %.17g", fn, x);
  if (x < 1 || x > t->ndim)
    fh__lua_raise(L, FH_ERR_VALUE, "%s: dimension %.17g out of range for a %d-dimensional tensor (expected 1..%d)", fn,
                  x, t->ndim, t->ndim);
  return (int)x - 1;
}

static int t_transpose(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:transpose");
  int a = checkdim(L, 2, t, "Tensor:transpose"), b = checkdim(L, 3, t, "Tensor:transpose");
  PUSH_NEW(L, fh_tensor_transpose(t, a, b, out_));
  return 1;
}
static int t_permute(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:permute");
  int perm[FH_MAX_DIMS];
  int n;
  if (lua_istable(L, 2)) {
    n = (int)lua_objlen(L, 2);
    if (n > FH_MAX_DIMS) return fh__lua_raise(L, FH_ERR_VALUE, "Tensor:permute: too many dimensions");
    for (int i = 0; i < n; ++i) {
      lua_rawgeti(L, 2, i + 1);
      perm[i] = checkdim(L, lua_gettop(L), t, "Tensor:permute");
      lua_pop(L, 1);
    }
  } else {
    n = lua_gettop(L) - 1;
    if (n > FH_MAX_DIMS) return fh__lua_raise(L, FH_ERR_VALUE, "Tensor:permute: too many dimensions");
    for (int i = 0; i < n; ++i) perm[i] = checkdim(L, i + 2, t, "Tensor:permute");
  }
  PUSH_NEW(L, fh_tensor_permute(t, n, perm, out_));
  return 1;
}
static int t_narrow(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:narrow");
  int d = checkdim(L, 2, t, "Tensor:narrow");
  int64_t start = fh__lua_checkint(L, 3, "Tensor:narrow", "start", INT64_MIN / 2, INT64_MAX / 2);
  int64_t len = fh__lua_checkint(L, 4, "Tensor:narrow", "length", INT64_MIN / 2, INT64_MAX / 2);
  if (start < 1) return fh__lua_raise(L, FH_ERR_VALUE, "Tensor:narrow: start %lld out of range (indices are 1-based)", (long long)start);
  PUSH_NEW(L, fh_tensor_narrow(t, d, start - 1, len, out_));
  return 1;
}
static int t_select(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:select");
  int d = checkdim(L, 2, t, "Tensor:select");
  int64_t i = fh__lua_checkint(L, 3, "Tensor:select", "index", INT64_MIN / 2, INT64_MAX / 2);
  if (i < 1) return fh__lua_raise(L, FH_ERR_VALUE, "Tensor:select: index %lld out of range for dimension %d of size %lld (indices are 1-based)", (long long)i, d + 1, (long long)t->shape[d]);
  PUSH_NEW(L, fh_tensor_select(t, d, i - 1, out_));
  return 1;
}

/* ---- reading data ------------------------------------------------------- */
/* Raw element bytes in row-major order (used by tolist/item in Lua). */
static int t_bytes(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:_bytes");
  size_t nb = fh_tensor_nbytes(t);
  void *buf = lua_newuserdata(L, nb + 1);
  fh__lua_check(L, fh_tensor_read(t, buf));
  lua_pushlstring(L, buf, nb);
  return 1;
}

static void push_element(lua_State *L, fh_dtype d, const unsigned char *p) {
  switch (d) {
    case FH_BOOL: lua_pushboolean(L, *p != 0); break;
    case FH_UINT8: lua_pushnumber(L, *p); break;
    case FH_INT32: { int32_t v; memcpy(&v, p, 4); lua_pushnumber(L, v); break; }
    case FH_UINT32: { uint32_t v; memcpy(&v, p, 4); lua_pushnumber(L, v); break; }
    case FH_FLOAT32: { float v; memcpy(&v, p, 4); lua_pushnumber(L, v); break; }
    case FH_FLOAT64: { double v; memcpy(&v, p, 8); lua_pushnumber(L, v); break; }
    default: lua_pushnil(L); break; /* 64-bit ints and complex: Lua side */
  }
}

/* item() for dtypes representable as Lua numbers; others return nil and
 * the Lua layer converts the bytes. */
static int t_item_number(lua_State *L) {
  fh_tensor *t = self(L, "Tensor:item");
  if (fh_tensor_numel(t) != 1)
    return fh__lua_raise(L, FH_ERR_VALUE, "Tensor:item: expected a tensor with one element, got %lld elements", (long long)fh_tensor_numel(t));
  unsigned char buf[16];
  fh__lua_check(L, fh_tensor_read(t, buf));
  push_element(L, (fh_dtype)t->dtype, buf);
  lua_pushlstring(L, (const char *)buf, fh_tensor_element_size(t));
  return 2;
}

/* ---- arithmetic --------------------------------------------------------- */
static const char *const out_opts[] = {"out", NULL};

static fh_tensor *optout(lua_State *L, int idx, const char *fn) {
  fh__lua_checkopts(L, idx, fn, out_opts);
  if (!lua_istable(L, idx)) return NULL;
  lua_getfield(L, idx, "out");
  fh_tensor *o = NULL;
  if (!lua_isnil(L, -1)) {
    o = fh__lua_totensor(L, -1);
    if (!o) fh__lua_raise(L, FH_ERR_TYPE, "%s: option 'out' expected a Tensor, got %s", fn, fh__lua_typename(L, -1));
  }
  lua_pop(L, 1);
  return o;
}

/* a (op) b where either may be a scalar; out may be given */
static int binary(lua_State *L, fh_binary_op op, const char *fn, fh_tensor *out, int inplace) {
  fh_tensor *a = fh__lua_totensor(L, 1), *b = fh__lua_totensor(L, 2);
  fh_scalar s;
  int first = 0;
  if (a == NULL && b == NULL)
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: expected a Tensor operand, got %s and %s", fn, fh__lua_typename(L, 1), fh__lua_typename(L, 2));
  if (a == NULL || b == NULL) {
    int sidx = a == NULL ? 1 : 2;
    if (!fh__lua_toscalar(L, sidx, &s, 1))
      return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument %d expected a Tensor or a number, got %s", fn, sidx, fh__lua_typename(L, sidx));
    if (a == NULL) {
      if (inplace) return fh__lua_raise(L, FH_ERR_TYPE, "%s: self must be a Tensor", fn);
      a = b;
      first = 1;
    }
    b = NULL;
  }
  if (inplace) out = a;
  if (out != NULL) {
    fh_tensor *r = NULL;
    fh__lua_check(L, fh_binary(op, a, b, b ? NULL : &s, first, out, &r));
    fh_tensor_release(r);
    return -1; /* the caller pushes `out` */
  }
  PUSH_NEW(L, fh_binary(op, a, b, b ? NULL : &s, first, NULL, out_));
  return 1;
}

#define BINARY_FNS(name, OP)                                                     \
  static int mt_##name(lua_State *L) { return binary(L, OP, "Tensor.__" #name, NULL, 0); } \
  static int l_##name(lua_State *L) {                                            \
    fh_tensor *o = optout(L, 3, "fh." #name);                                    \
    int r = binary(L, OP, "fh." #name, o, 0);                                    \
    if (r < 0) {                                                                 \
      lua_getfield(L, 3, "out");                                                 \
      return 1;                                                                  \
    }                                                                            \
    return r;                                                                    \
  }                                                                              \
  static int t_##name##_(lua_State *L) {                                         \
    self(L, "Tensor:" #name "_");                                                \
    binary(L, OP, "Tensor:" #name "_", NULL, 1);                                 \
    lua_settop(L, 1);                                                            \
    return 1;                                                                    \
  }
BINARY_FNS(add, FH_OP_ADD)
BINARY_FNS(sub, FH_OP_SUB)
BINARY_FNS(mul, FH_OP_MUL)
BINARY_FNS(div, FH_OP_DIV)

static int mt_unm(lua_State *L) {
  fh_tensor *a = fh__lua_checktensor(L, 1, "Tensor.__unm", "self");
  PUSH_NEW(L, fh_unary(FH_OP_NEG, a, NULL, out_));
  return 1;
}
static int l_neg(lua_State *L) {
  fh_tensor *a = fh__lua_checktensor(L, 1, "fh.neg", "a");
  fh_tensor *o = optout(L, 2, "fh.neg");
  if (o) {
    fh_tensor *r = NULL;
    fh__lua_check(L, fh_unary(FH_OP_NEG, a, o, &r));
    fh_tensor_release(r);
    lua_getfield(L, 2, "out");
    return 1;
  }
  PUSH_NEW(L, fh_unary(FH_OP_NEG, a, NULL, out_));
  return 1;
}
static int t_neg_(lua_State *L) {
  fh_tensor *a = self(L, "Tensor:neg_");
  fh_tensor *r = NULL;
  fh__lua_check(L, fh_unary(FH_OP_NEG, a, a, &r));
  fh_tensor_release(r);
  lua_settop(L, 1);
  return 1;
}

/* fh.rns.<op>(a, b, moduli, {out=}) ; moduli: table of integers / uint64
 * cdata, or a uint64 tensor */
static int rns(lua_State *L, fh_rns_op op, const char *fn) {
  int binary_op = op != FH_RNS_NEG;
  fh_tensor *a = fh__lua_checktensor(L, 1, fn, "a");
  fh_tensor *b = binary_op ? fh__lua_checktensor(L, 2, fn, "b") : NULL;
  int midx = binary_op ? 3 : 2;
  fh_tensor *o = optout(L, midx + 1, fn);
  uint64_t moduli[FH_RNS_MAX_LIMBS];
  int n = 0;
  fh_tensor *mt = fh__lua_totensor(L, midx);
  if (mt != NULL) {
    if (mt->dtype != FH_UINT64 || mt->ndim != 1)
      return fh__lua_raise(L, FH_ERR_TYPE, "%s: moduli tensor must be a 1-dimensional uint64 tensor", fn);
    if (mt->shape[0] > FH_RNS_MAX_LIMBS)
      return fh__lua_raise(L, FH_ERR_VALUE, "%s: at most %d moduli are supported, got %lld", fn, FH_RNS_MAX_LIMBS, (long long)mt->shape[0]);
    n = (int)mt->shape[0];
    fh__lua_check(L, fh_tensor_read(mt, moduli));
  } else if (lua_istable(L, midx)) {
    n = (int)lua_objlen(L, midx);
    if (n > FH_RNS_MAX_LIMBS)
      return fh__lua_raise(L, FH_ERR_VALUE, "%s: at most %d moduli are supported, got %d", fn, FH_RNS_MAX_LIMBS, n);
    for (int i = 0; i < n; ++i) {
      lua_rawgeti(L, midx, i + 1);
      fh_scalar s;
      if (!fh__lua_toscalar(L, -1, &s, 0) || s.kind == FH_SCALAR_BOOL)
        return fh__lua_raise(L, FH_ERR_TYPE, "%s: moduli[%d] expected an integer, got %s", fn, i + 1, fh__lua_typename(L, -1));
      if (s.kind == FH_SCALAR_FLOAT && s.v.f > 9007199254740992.0)
        return fh__lua_raise(L, FH_ERR_VALUE,
                             "%s: moduli[%d] = %.17g is a Lua number above 2^53, where numbers skip integers (it may "
                             "not be the modulus written in the source); give moduli above 2^53 as ULL literals",
                             fn, i + 1, s.v.f);
      if (fh_scalar_to_dtype(&s, FH_UINT64, &moduli[i]) != FH_OK) {
        fh_error_prefix("%s: moduli[%d]", fn, i + 1);
        return fh__lua_error(L);
      }
      lua_pop(L, 1);
    }
  } else {
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument %d (moduli) expected a table of moduli or a uint64 tensor, got %s", fn, midx, fh__lua_typename(L, midx));
  }
  if (o) {
    fh_tensor *r = NULL;
    fh__lua_check(L, fh_rns(op, a, b, moduli, n, o, &r));
    fh_tensor_release(r);
    lua_getfield(L, midx + 1, "out");
    return 1;
  }
  PUSH_NEW(L, fh_rns(op, a, b, moduli, n, NULL, out_));
  return 1;
}
static int l_rns_add(lua_State *L) { return rns(L, FH_RNS_ADD, "fh.rns.add"); }
static int l_rns_sub(lua_State *L) { return rns(L, FH_RNS_SUB, "fh.rns.sub"); }
static int l_rns_mul(lua_State *L) { return rns(L, FH_RNS_MUL, "fh.rns.mul"); }
static int l_rns_neg(lua_State *L) { return rns(L, FH_RNS_NEG, "fh.rns.neg"); }

/* ---- reductions --------------------------------------------------------- */
static int l_sum(lua_State *L) {
  fh_tensor *t = fh__lua_checktensor(L, 1, "fh.sum", "t");
  PUSH_NEW(L, fh_sum(t, out_));
  return 1;
}
static int l_equal(lua_State *L) {
  fh_tensor *a = fh__lua_checktensor(L, 1, "fh.equal", "a"), *b = fh__lua_checktensor(L, 2, "fh.equal", "b");
  bool r = false;
  fh__lua_check(L, fh_equal(a, b, &r));
  lua_pushboolean(L, r);
  return 1;
}
static const char *const close_opts[] = {"rtol", "atol", NULL};
static int l_allclose(lua_State *L) {
  fh_tensor *a = fh__lua_checktensor(L, 1, "fh.allclose", "a"), *b = fh__lua_checktensor(L, 2, "fh.allclose", "b");
  fh__lua_checkopts(L, 3, "fh.allclose", close_opts);
  double rtol = 1e-5, atol = 1e-8;
  if (lua_istable(L, 3)) {
    const char *keys[2] = {"rtol", "atol"};
    double *vals[2] = {&rtol, &atol};
    for (int k = 0; k < 2; ++k) {
      lua_getfield(L, 3, keys[k]);
      if (lua_type(L, -1) == LUA_TNUMBER) *vals[k] = lua_tonumber(L, -1);
      else if (!lua_isnil(L, -1))
        return fh__lua_raise(L, FH_ERR_TYPE, "fh.allclose: option '%s' expected a number, got %s", keys[k],
                             fh__lua_typename(L, -1));
      lua_pop(L, 1);
    }
  }
  bool r = false;
  fh__lua_check(L, fh_allclose(a, b, rtol, atol, &r));
  lua_pushboolean(L, r);
  return 1;
}
static int l_max_abs_diff(lua_State *L) {
  fh_tensor *a = fh__lua_checktensor(L, 1, "fh.max_abs_diff", "a"), *b = fh__lua_checktensor(L, 2, "fh.max_abs_diff", "b");
  double r = 0;
  fh__lua_check(L, fh_max_abs_diff(a, b, &r));
  lua_pushnumber(L, r);
  return 1;
}
static int l_is_tensor(lua_State *L) {
  lua_pushboolean(L, fh__lua_totensor(L, 1) != NULL);
  return 1;
}

void fh__lua_open_tensor(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"stride", t_stride}, {"size", t_size}, {"numel", t_numel}, {"dim", t_dim},
      {"element_size", t_element_size}, {"data_ptr", t_data_ptr}, {"storage_ptr", t_storage_ptr},
      {"storage_offset", t_storage_offset}, {"is_pinned", t_is_pinned}, {"is_contiguous", t_is_contiguous},
      {"requires_grad_", t_requires_grad_}, {"to", t_to}, {"cpu", t_cpu}, {"cuda", t_cuda},
      {"pin_memory", t_pin_memory}, {"clone", t_clone}, {"contiguous", t_contiguous}, {"copy_", t_copy_},
      {"fill_", t_fill_}, {"view", t_view}, {"reshape", t_reshape}, {"expand", t_expand}, {"transpose", t_transpose},
      {"permute", t_permute}, {"narrow", t_narrow}, {"select", t_select}, {"_bytes", t_bytes},
      {"_item", t_item_number}, {"add_", t_add_}, {"sub_", t_sub_}, {"mul_", t_mul_}, {"div_", t_div_},
      {"neg_", t_neg_}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", t_gc}, {"__newindex", t_newindex}, {"__add", mt_add},
                                  {"__sub", mt_sub}, {"__mul", mt_mul}, {"__div", mt_div},
                                  {"__unm", mt_unm}, {NULL, NULL}};
  fh__lua_newclass_indexed(L, FH_TENSOR_MT, methods, meta, t_index);
  fh__lua_name(t_index, "Tensor.__index");
  /* the Lua side's t:tolist() and t:item() (lua/fhelium/tensor.lua) */
  fh__lua_name(t_bytes, "Tensor:tolist");
  fh__lua_name(t_item_number, "Tensor:item");
  {
    static const char *const fields[] = {"shape", "dtype", "device", "layout", "requires_grad", "nbytes", "ndim", NULL};
    fh__lua_setfields(L, fields);
  }
  lua_getfield(L, -1, "methods");
  lua_setfield(L, -3, "Tensor_methods");
  lua_setfield(L, -2, "Tensor_metatable");

  luaL_newmetatable(L, FH_GENERATOR_MT);
  lua_pushcfunction(L, gen_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, gen_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_newtable(L);
  lua_pushcfunction(L, gen_seed);
  lua_setfield(L, -2, "seed");
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);

  static const luaL_Reg fns[] = {
      {"tensor", l_tensor}, {"_message_tensor", l_message_tensor}, {"empty", l_empty}, {"zeros", l_zeros}, {"ones", l_ones}, {"full", l_full},
      {"arange", l_arange}, {"rand", l_rand}, {"randn", l_randn}, {"Generator", l_generator},
      {"add", l_add}, {"sub", l_sub}, {"mul", l_mul}, {"div", l_div}, {"neg", l_neg},
      {"rns_add", l_rns_add}, {"rns_sub", l_rns_sub}, {"rns_mul", l_rns_mul}, {"rns_neg", l_rns_neg},
      {"sum", l_sum}, {"equal", l_equal}, {"allclose", l_allclose}, {"max_abs_diff", l_max_abs_diff},
      {"is_tensor", l_is_tensor}, {NULL, NULL}};
  fh__lua_setfuncs_named(L, fns, "fh.");
  fh__lua_name(l_rns_add, "fh.rns.add");
  fh__lua_name(l_rns_sub, "fh.rns.sub");
  fh__lua_name(l_rns_mul, "fh.rns.mul");
  fh__lua_name(l_rns_neg, "fh.rns.neg");
}
