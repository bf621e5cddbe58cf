/* CKKS binding. `core._ckks` holds INTERNAL, TEST-ONLY functions that reach
 * the polynomial layer (fh/ckks_poly.h) on raw uint64 tensors, so the specs
 * can check the arithmetic core (modular arithmetic, NTT, encoding,
 * automorphisms, sampling) independently of the engine. They are not part
 * of the public API (API.md) and may change at any time. Prime ids there
 * are 0-based indices into a tables object's prime chain. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "fh/ckks_poly.h"
#include "fh/ckks_random.h"

#define FH_CKKS_TABLES_MT "fhelium.CkksTables"

typedef struct tables_box {
  fh_ckks_tables *t;
} tables_box;

static fh_ckks_tables *check_tables(lua_State *L, int idx, const char *fn) {
  tables_box *b = fh__lua_testudata(L, idx, FH_CKKS_TABLES_MT);
  if (b == NULL || b->t == NULL)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: argument %d expected CkksTables, got %s", fn, idx, fh__lua_typename(L, idx));
  return b->t;
}

static int tables_gc(lua_State *L) {
  tables_box *b = lua_touserdata(L, 1);
  if (b && b->t) {
    fh_ckks_tables_release(b->t);
    b->t = NULL;
  }
  return 0;
}

/* uint64 from a number (exact integer) or uint64_t/int64_t cdata */
static uint64_t check_u64(lua_State *L, int idx, const char *fn, const char *name) {
  fh_scalar s;
  if (!fh__lua_toscalar(L, idx, &s, 0) || s.kind == FH_SCALAR_BOOL)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: %s expected an integer or uint64 cdata, got %s", fn, name,
                  fh__lua_typename(L, idx));
  if (s.kind == FH_SCALAR_UINT) return s.v.u;
  if (s.kind == FH_SCALAR_INT) {
    if (s.v.i < 0) fh__lua_raise(L, FH_ERR_VALUE, "%s: %s must be non-negative", fn, name);
    return (uint64_t)s.v.i;
  }
  double x = s.v.f;
  if (x != floor(x) || x < 0 || x > 9007199254740992.0)
    fh__lua_raise(L, FH_ERR_VALUE, "%s: %s must be a non-negative integer below 2^53 (use ULL cdata above), got %.17g",
                  fn, name, x);
  return (uint64_t)x;
}

/* 0-based prime ids from a Lua list */
static int check_ids(lua_State *L, int idx, int *ids, const char *fn) {
  if (!lua_istable(L, idx) || fh__lua_totensor(L, idx))
    fh__lua_raise(L, FH_ERR_TYPE, "%s: argument %d (prime ids) expected a list of integers, got %s", fn, idx,
                  fh__lua_typename(L, idx));
  int n = (int)lua_objlen(L, idx);
  if (n > FH_CKKS_MAX_PRIMES) fh__lua_raise(L, FH_ERR_VALUE, "%s: at most %d prime ids", fn, FH_CKKS_MAX_PRIMES);
  for (int i = 0; i < n; ++i) {
    lua_rawgeti(L, idx, i + 1);
    ids[i] = (int)fh__lua_checkint(L, -1, fn, "prime id", 0, FH_CKKS_MAX_PRIMES - 1);
    lua_pop(L, 1);
  }
  return n;
}

/* a uint64 tensor from host words (new reference pushed) */
static void push_u64_tensor(lua_State *L, const uint64_t *v, int64_t n) {
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh_tensor_options o = {FH_UINT64, fh_cpu(), false, false};
  fh__lua_check(L, fh_tensor_from_host(v, 1, &n, &o, &b->t));
}

/* per-limb constants from a uint64 tensor of nids elements (or nil) */
static const uint64_t *opt_consts(lua_State *L, int idx, const char *key, int nids, uint64_t *buf, const char *fn) {
  if (!lua_istable(L, idx)) return NULL;
  lua_getfield(L, idx, key);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return NULL;
  }
  fh_tensor *t = fh__lua_checktensor(L, lua_gettop(L), fn, key);
  if (t->dtype != FH_UINT64 || fh_tensor_numel(t) != nids)
    fh__lua_raise(L, FH_ERR_VALUE, "%s: option '%s' must be a uint64 tensor of %d elements", fn, key, nids);
  fh__lua_check(L, fh_tensor_read(t, buf));
  lua_pop(L, 1);
  return buf;
}

/* _ckks.find_primes(bits, log_n, count) -> uint64 tensor */
static int l_find_primes(lua_State *L) {
  const char *fn = "_ckks.find_primes";
  int bits = (int)fh__lua_checkint(L, 1, fn, "bits", 0, 64);
  int log_n = (int)fh__lua_checkint(L, 2, fn, "log_n", 0, 64);
  int count = (int)fh__lua_checkint(L, 3, fn, "count", 0, 4096);
  uint64_t *v = calloc((size_t)count + 1, sizeof *v);
  if (v == NULL) return fh__lua_raise(L, FH_ERR_MEMORY, "%s: out of memory", fn);
  fh_status st = fh_ckks_find_primes(bits, log_n, count, NULL, 0, v);
  if (st != FH_OK) {
    free(v);
    fh__lua_error(L);
  }
  /* the box is created first; copy out of v before raising anything */
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh_tensor_options o = {FH_UINT64, fh_cpu(), false, false};
  int64_t n = count;
  st = fh_tensor_from_host(v, 1, &n, &o, &b->t);
  free(v);
  fh__lua_check(L, st);
  return 1;
}

static int l_is_prime(lua_State *L) {
  lua_pushboolean(L, fh_is_prime_u64(check_u64(L, 1, "_ckks.is_prime", "n")));
  return 1;
}

/* _ckks.tables(log_n, primes (uint64 tensor), nq, {device=}) */
static int l_tables(lua_State *L) {
  const char *fn = "_ckks.tables";
  int log_n = (int)fh__lua_checkint(L, 1, fn, "log_n", 0, 64);
  fh_tensor *pt = fh__lua_checktensor(L, 2, fn, "primes");
  if (pt->dtype != FH_UINT64 || pt->ndim != 1 || pt->shape[0] > FH_CKKS_MAX_PRIMES)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: primes must be a 1-d uint64 tensor of at most %d primes", fn,
                         FH_CKKS_MAX_PRIMES);
  int nq = (int)fh__lua_checkint(L, 3, fn, "nq", 0, pt->shape[0]);
  static const char *const opts[] = {"device", NULL};
  fh__lua_checkopts(L, 4, fn, opts);
  fh_device dev = fh__lua_optdevice(L, 4, "device", fh_cpu(), fn);
  uint64_t primes[FH_CKKS_MAX_PRIMES];
  fh__lua_check(L, fh_tensor_read(pt, primes));
  tables_box *b = lua_newuserdata(L, sizeof *b);
  b->t = NULL;
  luaL_getmetatable(L, FH_CKKS_TABLES_MT);
  lua_setmetatable(L, -2);
  fh__lua_check(L, fh_ckks_tables_new(log_n, primes, nq, (int)pt->shape[0] - nq, dev, &b->t));
  return 1;
}

/* tables:prime(id) -> uint64 tensor {q, psi, qinv, r1, r2, psi_inv} */
static int t_prime(lua_State *L) {
  fh_ckks_tables *t = check_tables(L, 1, "CkksTables:prime");
  int id = (int)fh__lua_checkint(L, 2, "CkksTables:prime", "id", 0, t->nq + t->np - 1);
  const fh_ckks_prime *p = &t->host[id];
  uint64_t v[6] = {p->q, p->psi, p->qinv, p->r1, p->r2, p->psi_inv};
  push_u64_tensor(L, v, 6);
  return 1;
}

static int t_index(lua_State *L) {
  fh_ckks_tables *t = check_tables(L, 1, "CkksTables");
  const char *k = luaL_checkstring(L, 2);
  if (strcmp(k, "log_n") == 0) lua_pushinteger(L, t->log_n);
  else if (strcmp(k, "n") == 0) lua_pushnumber(L, (lua_Number)t->n);
  else if (strcmp(k, "nq") == 0) lua_pushinteger(L, t->nq);
  else if (strcmp(k, "np") == 0) lua_pushinteger(L, t->np);
  else if (strcmp(k, "dnum") == 0) lua_pushinteger(L, t->dnum);
  else if (strcmp(k, "prime") == 0) lua_pushcfunction(L, t_prime);
  else lua_pushnil(L);
  return 1;
}

/* _ckks.ntt(tables, t, ids) / _ckks.intt(tables, t, ids) */
static int ntt_common(lua_State *L, bool forward) {
  const char *fn = forward ? "_ckks.ntt" : "_ckks.intt";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  fh_tensor *t = fh__lua_checktensor(L, 2, fn, "t");
  int ids[FH_CKKS_MAX_PRIMES];
  int n = check_ids(L, 3, ids, fn);
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh__lua_check(L, fh_ckks_poly_ntt(tb, t, ids, n, forward, &b->t));
  return 1;
}
static int l_ntt(lua_State *L) { return ntt_common(L, true); }
static int l_intt(lua_State *L) { return ntt_common(L, false); }

static const char *const ew_ops[] = {"copy",      "add",       "sub",         "neg",           "mont_mul",
                                     "mont_mac",  "mul_const", "add_const",   "sub_add_mul",   "add_mul_const",
                                     "to_mont",   "from_mont", "signed",      NULL};

/* _ckks.ew(tables, op, ids, a, b, c, {k=, c=}) */
static int l_ew(lua_State *L) {
  const char *fn = "_ckks.ew";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  const char *name = luaL_checkstring(L, 2);
  int op = -1;
  for (int i = 0; ew_ops[i]; ++i)
    if (strcmp(name, ew_ops[i]) == 0) op = i;
  if (op < 0) return fh__lua_raise(L, FH_ERR_VALUE, "%s: unknown operation '%s'", fn, name);
  int ids[FH_CKKS_MAX_PRIMES];
  int n = check_ids(L, 3, ids, fn);
  fh_tensor *a = fh__lua_checktensor(L, 4, fn, "a");
  fh_tensor *b = lua_isnoneornil(L, 5) ? NULL : fh__lua_checktensor(L, 5, fn, "b");
  fh_tensor *c = lua_isnoneornil(L, 6) ? NULL : fh__lua_checktensor(L, 6, fn, "c");
  static const char *const opts[] = {"k", "c", NULL};
  fh__lua_checkopts(L, 7, fn, opts);
  uint64_t kb[FH_CKKS_MAX_PRIMES], cb[FH_CKKS_MAX_PRIMES];
  const uint64_t *k = opt_consts(L, 7, "k", n, kb, fn);
  const uint64_t *cst = opt_consts(L, 7, "c", n, cb, fn);
  fh_tensor_box *box = fh__lua_new_tensor_box(L);
  fh__lua_check(L, fh_ckks_poly_ew(tb, op, a, b, c, ids, n, k, cst, &box->t));
  return 1;
}

/* _ckks.automorph(tables, t, ids, galois, ntt_domain) */
static int l_automorph(lua_State *L) {
  const char *fn = "_ckks.automorph";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  fh_tensor *t = fh__lua_checktensor(L, 2, fn, "t");
  int ids[FH_CKKS_MAX_PRIMES];
  int n = check_ids(L, 3, ids, fn);
  uint64_t g = check_u64(L, 4, fn, "galois");
  bool ntt = lua_toboolean(L, 5);
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh__lua_check(L, fh_ckks_poly_automorph(tb, t, ids, n, g, ntt, &b->t));
  return 1;
}

/* _ckks.encode(tables, msg, scale, nlimbs) */
static int l_encode(lua_State *L) {
  const char *fn = "_ckks.encode";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  fh_tensor *m = fh__lua_checktensor(L, 2, fn, "msg");
  double scale = luaL_checknumber(L, 3);
  int nl = (int)fh__lua_checkint(L, 4, fn, "nlimbs", 0, FH_CKKS_MAX_PRIMES);
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh__lua_check(L, fh_ckks_poly_encode(tb, m, scale, nl, &b->t));
  return 1;
}

/* _ckks.decode(tables, coeffs, scale, complex) */
static int l_decode(lua_State *L) {
  const char *fn = "_ckks.decode";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  fh_tensor *c = fh__lua_checktensor(L, 2, fn, "coeffs");
  double scale = luaL_checknumber(L, 3);
  bool cx = lua_isnoneornil(L, 4) ? true : lua_toboolean(L, 4);
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh__lua_check(L, fh_ckks_poly_decode(tb, c, scale, cx, &b->t));
  return 1;
}

/* _ckks.sample(kind, n, {seed=, q=}) -> int64 (ternary, gaussian) or uint64 (uniform) tensor [n] */
static int l_sample(lua_State *L) {
  const char *fn = "_ckks.sample";
  const char *kind = luaL_checkstring(L, 1);
  int64_t n = fh__lua_checkint(L, 2, fn, "n", 0, (int64_t)1 << 30);
  static const char *const opts[] = {"seed", "q", NULL};
  fh__lua_checkopts(L, 3, fn, opts);
  uint64_t seed = 0, q = 0;
  bool seeded = false;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "seed");
    if (!lua_isnil(L, -1)) {
      seed = check_u64(L, lua_gettop(L), fn, "seed");
      seeded = true;
    }
    lua_getfield(L, 3, "q");
    if (!lua_isnil(L, -1)) q = check_u64(L, lua_gettop(L), fn, "q");
    lua_pop(L, 2);
  }
  int which = strcmp(kind, "ternary") == 0 ? 0 : strcmp(kind, "gaussian") == 0 ? 1 : strcmp(kind, "uniform") == 0 ? 2 : -1;
  if (which < 0) return fh__lua_raise(L, FH_ERR_VALUE, "%s: unknown distribution '%s'", fn, kind);
  if (which == 2 && q < 2) return fh__lua_raise(L, FH_ERR_VALUE, "%s: uniform needs q >= 2", fn);
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh_tensor_options o = {which == 2 ? FH_UINT64 : FH_INT64, fh_cpu(), false, false};
  fh__lua_check(L, fh_tensor_empty(1, &n, &o, &b->t));
  fh_ckks_rng *r;
  fh__lua_check(L, fh_ckks_rng_new(seeded ? &seed : NULL, &r));
  void *p = fh_tensor_data(b->t);
  if (which == 0) fh_ckks_sample_ternary(r, p, (size_t)n);
  else if (which == 1) fh_ckks_sample_gaussian(r, p, (size_t)n);
  else fh_ckks_sample_uniform(r, q, p, (size_t)n);
  fh_ckks_rng_free(r);
  return 1;
}

void fh__lua_open_ckks(lua_State *L) {
  static const luaL_Reg meta[] = {{"__gc", tables_gc}, {"__index", t_index}, {NULL, NULL}};
  luaL_newmetatable(L, FH_CKKS_TABLES_MT);
  lua_pushstring(L, "CkksTables");
  lua_setfield(L, -2, "__name");
  fh__lua_setfuncs(L, meta);
  lua_pop(L, 1);
  static const luaL_Reg internal[] = {
      {"find_primes", l_find_primes}, {"is_prime", l_is_prime}, {"tables", l_tables}, {"ntt", l_ntt},
      {"intt", l_intt},               {"ew", l_ew},             {"automorph", l_automorph},
      {"encode", l_encode},           {"decode", l_decode},     {"sample", l_sample}, {NULL, NULL}};
  lua_newtable(L);
  fh__lua_setfuncs(L, internal);
  lua_setfield(L, -2, "_ckks");
}
