/* CKKS binding. `core._ckks` holds INTERNAL, TEST-ONLY functions that reach
 * the polynomial layer (fh/ckks_poly.h) on raw uint64 tensors, so the specs
 * can check the arithmetic core (modular arithmetic, NTT, encoding,
 * automorphisms, sampling) independently of the engine. They are not part
 * of the public API (docs/api.md) and may change at any time. Prime ids there
 * are 0-based indices into a tables object's prime chain. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "fh/ckks_engine.h"
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
  FH_LUA_GC_BEGIN;
  tables_box *b = lua_touserdata(L, 1);
  if (b && b->t) {
    fh_ckks_tables_release(b->t);
    b->t = NULL;
  }
  FH_LUA_GC_END;
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
  uint64_t *v = fh_calloc((size_t)count + 1, sizeof *v);
  if (v == NULL) return fh__lua_raise(L, FH_ERR_MEMORY, "%s: out of memory", fn);
  fh_status st = fh_ckks_find_primes(bits, log_n, count, NULL, 0, v);
  if (st != FH_OK) {
    fh_free(v);
    fh__lua_error(L);
  }
  /* the box is created first; copy out of v before raising anything */
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh_tensor_options o = {FH_UINT64, fh_cpu(), false, false};
  int64_t n = count;
  st = fh_tensor_from_host(v, 1, &n, &o, &b->t);
  fh_free(v);
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
  tables_box *b = fh__lua_newbox(L, sizeof *b, FH_CKKS_TABLES_MT);
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

/* _ckks.ntt_fp(tables, t, ids, forward[, quotients]): the CUDA NTT's FP64 arithmetic run
 * on the CPU (fh_ckks_ntt_row_fp, the twin the specs compare with the integer NTT); tables
 * and t on the CPU, t a contiguous uint64 [#ids, N] of standard residues (forward: or a
 * float64 [#ids, N] of integers below 4q in size, as a conversion in doubles gives), every
 * prime FP64-eligible; quotients "stored" (the default: the tables' w / q) or "formed"
 * (w qinv at every stage, as the CUDA chunk stages form them) */
static int l_ntt_fp(lua_State *L) {
  const char *fn = "_ckks.ntt_fp";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  fh_tensor *t = fh__lua_checktensor(L, 2, fn, "t");
  int ids[FH_CKKS_MAX_PRIMES];
  int nids = check_ids(L, 3, ids, fn);
  bool forward = lua_toboolean(L, 4);
  if (lua_type(L, 5) != LUA_TSTRING && !lua_isnoneornil(L, 5))
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 5 (quotients) expected \"stored\" or \"formed\", got %s", fn,
                         fh__lua_typename(L, 5));
  const char *quot = lua_isnoneornil(L, 5) ? "stored" : lua_tostring(L, 5);
  if (strcmp(quot, "stored") != 0 && strcmp(quot, "formed") != 0)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 5 (quotients) expected \"stored\" or \"formed\", got \"%s\"",
                         fn, quot);
  const bool formed = quot[0] == 'f';
  if (tb->device.type != FH_DEVICE_CPU)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 1 (tables) expected tables on the CPU, got tables on a GPU", fn);
  /* words, or (forward) integer-valued doubles below 4q in size */
  const bool doubles = forward && t->dtype == FH_FLOAT64;
  if (fh_tensor_device(t).type != FH_DEVICE_CPU || (t->dtype != FH_UINT64 && !doubles) || t->ndim != 2 ||
      t->shape[0] != nids || t->shape[1] != tb->n || !fh_tensor_is_contiguous(t))
    return fh__lua_raise(L, FH_ERR_VALUE,
                         "%s: argument 2 (t) expected a contiguous uint64 CPU tensor [%d, %lld] (float64 too when "
                         "forward)",
                         fn, nids, (long long)tb->n);
  for (int i = 0; i < nids; ++i) {
    if (ids[i] >= tb->nq + tb->np)
      return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 3 (ids) expected prime ids below %d, got %d", fn,
                           tb->nq + tb->np, ids[i]);
    if (!fh_fp_eligible(tb->host[ids[i]].q))
      return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 3 (ids) expected primes below 2^%d, got %llu (id %d)", fn,
                           FH_FP_MAX_BITS, (unsigned long long)tb->host[ids[i]].q, ids[i]);
    if (doubles) {
      const double *d = (const double *)fh_tensor_data(t) + (int64_t)i * tb->n, lim = 4 * (double)tb->host[ids[i]].q;
      for (int64_t j = 0; j < tb->n; ++j)
        if (d[j] != floor(d[j]) || fabs(d[j]) >= lim)
          return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 2 (t) expected integers below 4q in size, got %.17g (row %d)",
                               fn, d[j], i + 1);
    }
  }
  const int64_t n = tb->n, total = (int64_t)nids * n;
  uint64_t *w = fh_malloc(sizeof(uint64_t) * (size_t)total);
  double *v = fh_malloc(sizeof(double) * (size_t)n);
  if (w == NULL || v == NULL) {
    fh_free(w);
    fh_free(v);
    return fh__lua_raise(L, FH_ERR_MEMORY, "%s: out of memory", fn);
  }
  const uint64_t *in = doubles ? NULL : (const uint64_t *)fh_tensor_data(t);
  const double *din = doubles ? (const double *)fh_tensor_data(t) : NULL;
  for (int i = 0; i < nids; ++i)
    fh_ckks_ntt_row_fp(w + i * n, in ? in + i * n : NULL, din ? din + i * n : NULL, tb->log_n, &tb->host[ids[i]],
                       tb->ntt + (int64_t)ids[i] * 4 * n, forward, formed, v);
  fh_free(v);
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh_tensor_options o = {FH_UINT64, fh_cpu(), false, false};
  int64_t shape[2] = {nids, n};
  fh_status st = fh_tensor_from_host(w, 2, shape, &o, &b->t);
  fh_free(w);
  fh__lua_check(L, st);
  return 1;
}

/* _ckks.fp_mul(x, w, q) -> fh_fp_mul(x, w, w / q, q): x an integer-valued number
 * (|x| < 2^50), w < q < 2^FH_FP_MAX_BITS */
static int l_fp_mul(lua_State *L) {
  const char *fn = "_ckks.fp_mul";
  double x = luaL_checknumber(L, 1);
  uint64_t w = check_u64(L, 2, fn, "w"), q = check_u64(L, 3, fn, "q");
  if (x != floor(x) || fabs(x) >= 1125899906842624.0)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 1 (x) expected an integer below 2^50 in size, got %.17g", fn, x);
  if (q < 2 || !fh_fp_eligible(q))
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 3 (q) expected 2 <= q < 2^%d, got %llu", fn, FH_FP_MAX_BITS,
                         (unsigned long long)q);
  if (w >= q)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 2 (w) expected w < q, got %llu", fn, (unsigned long long)w);
  lua_pushnumber(L, fh_fp_mul(x, (double)w, fh_fp_twiddle(w, q), (double)q));
  return 1;
}

/* _ckks.fp_mac(xs, ks, q) -> fh_fp_mac_word(sum_j fh_fp_mul_w(xs[j], ks[j], q, 1/q)): the
 * CUDA key switch's inner product in doubles; xs integer-valued numbers (|x| <= 32 q),
 * ks words below q (as many as xs, at most 16: |sum| <= 12 q < 2^49), q < 2^FH_FP_MAX_BITS;
 * the word as a number */
static int l_fp_mac(lua_State *L) {
  const char *fn = "_ckks.fp_mac";
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  const uint64_t q = check_u64(L, 3, fn, "q");
  if (q < 3 || !(q & 1) || !fh_fp_eligible(q))
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 3 (q) expected an odd 3 <= q < 2^%d, got %llu", fn,
                         FH_FP_MAX_BITS, (unsigned long long)q);
  const int n = (int)lua_objlen(L, 1);
  if (n < 1 || n > 16 || (int)lua_objlen(L, 2) != n)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: expected 1 to 16 xs and as many ks, got %d and %d", fn, n,
                         (int)lua_objlen(L, 2));
  const double qd = (double)q, qinv = 1.0 / qd;
  double acc = 0;
  for (int j = 1; j <= n; ++j) {
    lua_rawgeti(L, 1, j);
    if (lua_type(L, -1) != LUA_TNUMBER)
      return fh__lua_raise(L, FH_ERR_TYPE, "%s: xs[%d] expected a number, got %s", fn, j, fh__lua_typename(L, -1));
    const double x = lua_tonumber(L, -1);
    if (x != floor(x) || fabs(x) > 32 * qd)
      return fh__lua_raise(L, FH_ERR_VALUE, "%s: xs[%d] expected an integer of size at most 32 q, got %.17g", fn, j, x);
    lua_pop(L, 1);
    lua_rawgeti(L, 2, j);
    const uint64_t k = check_u64(L, lua_gettop(L), fn, "ks[j]");
    lua_pop(L, 1);
    if (k >= q) return fh__lua_raise(L, FH_ERR_VALUE, "%s: ks[%d] expected a word below q, got %llu", fn, j,
                                     (unsigned long long)k);
    acc = FH_DADD(acc, fh_fp_mul_w(x, (double)k, qd, qinv));
  }
  lua_pushnumber(L, (double)fh_fp_mac_word(acc, qd, qinv, q, fh_mont_qinv(q)));
  return 1;
}

/* _ckks.fp_conv(ys, rows, smt, t) -> the word of sum_i fh_fp_conv_term(ys[i], rows[i], rows[i] / t, t)
 * - [v smt]_t (v: the ys with bit 63 set): the CUDA key switch's centred base conversion in
 * doubles; ys scaled source residues below 2^50 (bit 63 the lift's flag), rows and smt words
 * below t, 1 to 4 sources, t < 2^FH_FP_MAX_BITS; the word as a number */
static int l_fp_conv(lua_State *L) {
  const char *fn = "_ckks.fp_conv";
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  const uint64_t smt = check_u64(L, 3, fn, "smt"), t = check_u64(L, 4, fn, "t");
  if (t < 3 || !fh_fp_eligible(t))
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 4 (t) expected 3 <= t < 2^%d, got %llu", fn, FH_FP_MAX_BITS,
                         (unsigned long long)t);
  if (smt >= t) return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 3 (smt) expected a word below t, got %llu", fn,
                                     (unsigned long long)smt);
  const int n = (int)lua_objlen(L, 1);
  if (n < 1 || n > 4 || (int)lua_objlen(L, 2) != n)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: expected 1 to 4 ys and as many rows, got %d and %d", fn, n,
                         (int)lua_objlen(L, 2));
  const double td = (double)t, tinv = 1.0 / td;
  double acc = 0;
  uint64_t cnt = 0;
  for (int i = 1; i <= n; ++i) {
    lua_rawgeti(L, 1, i);
    const uint64_t y = check_u64(L, lua_gettop(L), fn, "ys[i]");
    lua_pop(L, 1);
    lua_rawgeti(L, 2, i);
    const uint64_t w = check_u64(L, lua_gettop(L), fn, "rows[i]");
    lua_pop(L, 1);
    if ((y & ~((uint64_t)1 << 63)) >= ((uint64_t)1 << 50))
      return fh__lua_raise(L, FH_ERR_VALUE, "%s: ys[%d] expected a residue below 2^50 (and bit 63), got %llu", fn, i,
                           (unsigned long long)y);
    if (w >= t) return fh__lua_raise(L, FH_ERR_VALUE, "%s: rows[%d] expected a word below t, got %llu", fn, i,
                                     (unsigned long long)w);
    cnt += y >> 63;
    acc = FH_DADD(acc, fh_fp_conv_term(y, (double)w, fh_fp_twiddle(w, t), td));
  }
  const uint64_t corr = (uint64_t)(((unsigned __int128)cnt * smt) % t);
  acc = FH_DSUB(acc, (double)corr);
  lua_pushnumber(L, (double)fh_fp_canon(acc, td, tinv));
  return 1;
}

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

/* _ckks.tensor(tables, a, b, ids) */
static int l_tensor(lua_State *L) {
  const char *fn = "_ckks.tensor";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  fh_tensor *a = fh__lua_checktensor(L, 2, fn, "a");
  fh_tensor *b = fh__lua_checktensor(L, 3, fn, "b");
  int ids[FH_CKKS_MAX_PRIMES];
  int n = check_ids(L, 4, ids, fn);
  fh_tensor_box *box = fh__lua_new_tensor_box(L);
  fh__lua_check(L, fh_ckks_poly_tensor(tb, a, b, ids, n, &box->t));
  return 1;
}

/* _ckks.bconv(tables, t, src_ids, dst_ids, center) */
static int l_bconv(lua_State *L) {
  const char *fn = "_ckks.bconv";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  fh_tensor *t = fh__lua_checktensor(L, 2, fn, "t");
  int src[FH_CKKS_MAX_PRIMES], dst[FH_CKKS_MAX_PRIMES];
  int ns = check_ids(L, 3, src, fn), nd = check_ids(L, 4, dst, fn);
  bool center = lua_toboolean(L, 5);
  fh_tensor_box *box = fh__lua_new_tensor_box(L);
  fh__lua_check(L, fh_ckks_poly_bconv(tb, t, src, ns, dst, nd, center, &box->t));
  return 1;
}

/* _ckks.ks_inner(tables, digits, key, ids, key_rows [, galois | {galois, ...}]): a list of
 * Galois elements runs the kernel's steps (one launch, result [steps, ...]) */
static int l_ks_inner(lua_State *L) {
  const char *fn = "_ckks.ks_inner";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  fh_tensor *d = fh__lua_checktensor(L, 2, fn, "digits");
  fh_tensor *k = fh__lua_checktensor(L, 3, fn, "key");
  int ids[FH_CKKS_MAX_PRIMES], rows[FH_CKKS_MAX_PRIMES];
  int n = check_ids(L, 4, ids, fn), nr = check_ids(L, 5, rows, fn);
  if (nr != n) return fh__lua_raise(L, FH_ERR_VALUE, "%s: %d prime ids but %d key rows", fn, n, nr);
  if (lua_istable(L, 6)) {
    uint64_t gs[FH_CKKS_KS_MAX_STEPS];
    int ns = (int)lua_objlen(L, 6);
    if (ns < 1 || ns > FH_CKKS_KS_MAX_STEPS)
      return fh__lua_raise(L, FH_ERR_VALUE, "%s: galois expected a list of 1 to %d elements, got %d", fn,
                           FH_CKKS_KS_MAX_STEPS, ns);
    for (int s = 0; s < ns; ++s) {
      lua_rawgeti(L, 6, s + 1);
      gs[s] = check_u64(L, -1, fn, "galois[i]");
      lua_pop(L, 1);
    }
    fh_tensor_box *box = fh__lua_new_tensor_box(L);
    fh__lua_check(L, fh_ckks_poly_ks_inner_steps(tb, d, k, ids, rows, n, gs, ns, &box->t));
    return 1;
  }
  uint64_t g = lua_isnoneornil(L, 6) ? 1 : check_u64(L, 6, fn, "galois");
  fh_tensor_box *box = fh__lua_new_tensor_box(L);
  fh__lua_check(L, fh_ckks_poly_ks_inner(tb, d, k, ids, rows, n, g, &box->t));
  return 1;
}

/* _ckks.modup(tables, t, level) */
static int l_modup(lua_State *L) {
  const char *fn = "_ckks.modup";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  fh_tensor *t = fh__lua_checktensor(L, 2, fn, "t");
  int level = (int)fh__lua_checkint(L, 3, fn, "level", 0, FH_CKKS_MAX_PRIMES);
  fh_tensor_box *box = fh__lua_new_tensor_box(L);
  fh__lua_check(L, fh_ckks_poly_modup(tb, t, level, &box->t));
  return 1;
}

/* _ckks.intt_sources(tables, t, level [, "modup" | "moddown"]) */
static int l_intt_sources(lua_State *L) {
  const char *fn = "_ckks.intt_sources";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  fh_tensor *t = fh__lua_checktensor(L, 2, fn, "t");
  int level = (int)fh__lua_checkint(L, 3, fn, "level", 0, FH_CKKS_MAX_PRIMES);
  static const char *const kinds[] = {"modup", "moddown", NULL};
  if (!lua_isnoneornil(L, 4) && lua_type(L, 4) != LUA_TSTRING)
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 4 (kind) expected a string, got %s", fn,
                         fh__lua_typename(L, 4));
  const char *kind = lua_isnoneornil(L, 4) ? "modup" : lua_tostring(L, 4);
  int k = 0;
  while (kinds[k] && strcmp(kinds[k], kind) != 0) ++k;
  if (!kinds[k])
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 4 (kind) expected \"modup\" or \"moddown\", got \"%s\"", fn,
                         kind);
  fh_tensor_box *box = fh__lua_new_tensor_box(L);
  fh__lua_check(L, fh_ckks_poly_intt_sources(tb, t, level, k == 1, &box->t));
  return 1;
}

/* _ckks.encode(tables, msg, scale, nlimbs [, with_p]) */
static int l_encode(lua_State *L) {
  const char *fn = "_ckks.encode";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  fh_tensor *m = fh__lua_checktensor(L, 2, fn, "msg");
  double scale = luaL_checknumber(L, 3);
  int nl = (int)fh__lua_checkint(L, 4, fn, "nlimbs", 0, FH_CKKS_MAX_PRIMES);
  bool with_p = lua_toboolean(L, 5);
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh__lua_check(L, fh_ckks_poly_encode(tb, m, scale, nl, with_p, &b->t));
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
  fh_ckks_rng *r = NULL;
  fh__lua_check(L, fh_ckks_rng_new(seeded ? &seed : NULL, &r));
  void *p = fh_tensor_data(b->t);
  if (which == 0) fh_ckks_sample_ternary(r, p, (size_t)n);
  else if (which == 1) fh_ckks_sample_gaussian(r, p, (size_t)n);
  else fh_ckks_sample_uniform(r, q, p, (size_t)n);
  fh_ckks_rng_free(r);
  return 1;
}

/* _ckks.sample_run(tables, nt, ng, {seed=, skip=0, sequential=false}) -> rows, next: a seeded
 * stream, `skip` words drawn first, then nt ternary and ng Gaussian rows of N coefficients
 * (FH_K_CKKS_SAMPLE on the tables' device, or with sequential the host samplers one after the
 * other), and the stream's next word (a uint64 tensor of one element). */
static int l_sample_run(lua_State *L) {
  const char *fn = "_ckks.sample_run";
  fh_ckks_tables *tb = check_tables(L, 1, fn);
  int nt = (int)fh__lua_checkint(L, 2, fn, "nt", 0, 1 << 16), ng = (int)fh__lua_checkint(L, 3, fn, "ng", 0, 1 << 16);
  static const char *const opts[] = {"seed", "skip", "sequential", NULL};
  fh__lua_checkopts(L, 4, fn, opts);
  uint64_t seed = 0, skip = 0;
  bool sequential = false;
  if (lua_istable(L, 4)) {
    lua_getfield(L, 4, "seed");
    if (!lua_isnil(L, -1)) seed = check_u64(L, lua_gettop(L), fn, "seed");
    lua_getfield(L, 4, "skip");
    if (!lua_isnil(L, -1)) skip = check_u64(L, lua_gettop(L), fn, "skip");
    lua_getfield(L, 4, "sequential");
    sequential = lua_toboolean(L, -1);
    lua_pop(L, 3);
  }
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh_ckks_rng *r = NULL;
  fh__lua_check(L, fh_ckks_rng_new(&seed, &r));
  for (uint64_t i = 0; i < skip; ++i) (void)fh_ckks_rng_u64(r);
  fh_status st = FH_OK;
  if (sequential) {
    int64_t shape[2] = {(int64_t)nt + ng, tb->n};
    fh_tensor_options o = {FH_INT64, fh_cpu(), false, false};
    if ((st = fh_tensor_empty(2, shape, &o, &b->t)) == FH_OK) {
      int64_t *p = (int64_t *)fh_tensor_data(b->t);
      for (int i = 0; i < nt; ++i) fh_ckks_sample_ternary(r, p + (int64_t)i * tb->n, (size_t)tb->n);
      for (int i = 0; i < ng; ++i) fh_ckks_sample_gaussian(r, p + (int64_t)(nt + i) * tb->n, (size_t)tb->n);
    }
  } else {
    st = fh_ckks_poly_sample(tb, r, nt, ng, &b->t);
  }
  uint64_t next = fh_ckks_rng_u64(r);
  fh_ckks_rng_free(r);
  fh__lua_check(L, st);
  push_u64_tensor(L, &next, 1);
  return 2;
}

/* _ckks.capture(fn) -> tape: runs fn() with a host tape active on this
 * thread (CPU launches are recorded, not run) and returns the tape;
 * tape:replay() runs the recorded launches, #tape / tape:length() counts
 * them. Test-only: the execution layer's HostGraphProgram is the public
 * form of this. */
#define FH_CKKS_TAPE_MT "fhelium._CkksTape"
typedef struct tape_box {
  fh_tape *t;
} tape_box;

static int tape_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  tape_box *b = lua_touserdata(L, 1);
  if (b && b->t) {
    fh_tape_free(b->t);
    b->t = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}

static fh_tape *check_tape(lua_State *L, const char *fn) {
  tape_box *b = fh__lua_testudata(L, 1, FH_CKKS_TAPE_MT);
  if (b == NULL || b->t == NULL) fh__lua_raise(L, FH_ERR_TYPE, "%s: expected a tape", fn);
  return b->t;
}

static int tape_replay(lua_State *L) {
  fh__lua_check(L, fh_tape_replay(check_tape(L, "tape:replay")));
  return 0;
}

static int tape_length(lua_State *L) {
  lua_pushnumber(L, (lua_Number)fh_tape_length(check_tape(L, "tape:length")));
  return 1;
}

static int l_capture(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  tape_box *b = fh__lua_newbox(L, sizeof *b, FH_CKKS_TAPE_MT);
  fh__lua_check(L, fh_tape_new(&b->t));
  fh__lua_check(L, fh_tape_begin(b->t));
  lua_pushvalue(L, 1);
  int rc = lua_pcall(L, 0, 0, 0);
  fh_tape_end(b->t);
  if (rc != 0) return lua_error(L); /* the tape box is garbage and frees the tape */
  return 1;
}

static void fh__lua_open_ckks_engine(lua_State *L);

void fh__lua_open_ckks(lua_State *L) {
  static const luaL_Reg tape_methods[] = {{"replay", tape_replay}, {"length", tape_length}, {NULL, NULL}};
  static const luaL_Reg tape_meta[] = {{"__gc", tape_gc}, {"__len", tape_length}, {NULL, NULL}};
  fh__lua_newclass(L, FH_CKKS_TAPE_MT, tape_methods, tape_meta);
  lua_pop(L, 1);
  static const luaL_Reg meta[] = {{"__gc", tables_gc}, {"__index", t_index}, {NULL, NULL}};
  luaL_newmetatable(L, FH_CKKS_TABLES_MT);
  lua_pushstring(L, "CkksTables");
  lua_setfield(L, -2, "__name");
  fh__lua_setfuncs(L, meta);
  lua_pop(L, 1);
  static const luaL_Reg internal[] = {
      {"find_primes", l_find_primes}, {"is_prime", l_is_prime}, {"tables", l_tables}, {"ntt", l_ntt},
      {"intt", l_intt},               {"ntt_fp", l_ntt_fp},     {"fp_mul", l_fp_mul},
      {"fp_mac", l_fp_mac},           {"fp_conv", l_fp_conv},
      {"ew", l_ew},                   {"automorph", l_automorph},
      {"encode", l_encode},           {"decode", l_decode},     {"sample", l_sample}, {"sample_run", l_sample_run},
      {"capture", l_capture},         {"tensor", l_tensor},     {"bconv", l_bconv},
      {"ks_inner", l_ks_inner},       {"modup", l_modup},       {"intt_sources", l_intt_sources},
      {NULL, NULL}};
  lua_newtable(L);
  fh__lua_setfuncs(L, internal);
  lua_setfield(L, -2, "_ckks");
  fh__lua_open_ckks_engine(L);
}

/* ======================================================================================
 * fh.CkksEngine: the public engine binding (docs/api.md "CKKS values and engine").
 * The Lua layer (lua/fhelium/ckks.lua) converts messages (tables, numbers) to
 * tensors and installs fh.CkksEngine; these methods take tensors and values.
 * ====================================================================================== */
#define FH_CKKS_ENGINE_MT "fhelium.CkksEngine"

typedef struct engine_box {
  fh_ckks_engine *e;
} engine_box;

static fh_ckks_engine *check_engine(lua_State *L, const char *fn) {
  engine_box *b = fh__lua_testudata(L, 1, FH_CKKS_ENGINE_MT);
  if (b == NULL || b->e == NULL)
    fh__lua_raise(L, FH_ERR_TYPE, "CkksEngine:%s: expected a CkksEngine as self (call it with ':'), got %s", fn,
                  fh__lua_typename(L, 1));
  return b->e;
}

static int engine_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  engine_box *b = lua_touserdata(L, 1);
  if (b && b->e) {
    fh_ckks_engine_release(b->e);
    b->e = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}

/* A value argument (NULL allowed when `optional` and the argument is nil). */
static fh_value *arg_value(lua_State *L, int idx, const char *fn, const char *name, bool optional) {
  if (optional && lua_isnoneornil(L, idx)) return NULL;
  fh_value *v = fh__lua_tovalue(L, idx);
  if (v == NULL)
    fh__lua_raise(L, FH_ERR_TYPE, "CkksEngine:%s: argument %d (%s) expected a CKKS value, got %s", fn, idx - 1, name,
                  fh__lua_typename(L, idx));
  return v;
}

static int push_result(lua_State *L, fh_status st, fh_value *v, const char *fn) {
  if (st != FH_OK) {
    char name[96];
    snprintf(name, sizeof name, "CkksEngine:%s", fn);
    fh__lua_error_named(L, name);
  }
  fh__lua_push_value(L, v);
  /* count the value's fresh storage toward the GC soft limit: a loop of
   * evaluator calls would otherwise grow C memory that Lua cannot see */
  fh__lua_account(L, fh_value_data(v));
  return 1;
}

static int bits_list(lua_State *L, int tidx, const char *key, int *out, const char *fn) {
  lua_getfield(L, tidx, key);
  if (!lua_istable(L, -1))
    fh__lua_raise(L, FH_ERR_TYPE, "%s: %s expected a list of prime bit sizes, got %s", fn, key, fh__lua_typename(L, -1));
  int n = (int)lua_objlen(L, -1);
  if (n > FH_CKKS_MAX_PRIMES) fh__lua_raise(L, FH_ERR_VALUE, "%s: %s lists more than %d sizes", fn, key, FH_CKKS_MAX_PRIMES);
  for (int i = 0; i < n; ++i) {
    lua_rawgeti(L, -1, i + 1);
    out[i] = (int)fh__lua_checkint(L, lua_gettop(L), fn, key, 0, 1024); /* the engine checks the range */
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return n;
}

static const char *const param_keys[] = {"log_n", "q_bits", "p_bits", "scale", "allow_insecure", NULL};
static const char *const engine_opts[] = {"device", "seed", NULL};

/* fh.CkksEngine(preset_name | CkksContext | {log_n=, q_bits=, p_bits=, scale=, allow_insecure=}, {device=, seed=}) */
static int l_engine(lua_State *L) {
  const char *fn = "fh.CkksEngine";
  fh__lua_checkopts(L, 2, fn, engine_opts);
  fh_device dev = fh__lua_optdevice(L, 2, "device", fh_cpu(), fn);
  uint64_t seed = 0;
  bool seeded = false;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "seed");
    if (!lua_isnil(L, -1)) {
      seed = check_u64(L, lua_gettop(L), fn, "seed");
      seeded = true;
    }
    lua_pop(L, 1);
  }
  fh_ckks_context *ctx = fh__lua_tocontext(L, 1);
  bool own = false;
  if (ctx == NULL && lua_type(L, 1) == LUA_TSTRING) {
    fh__lua_check(L, fh_ckks_context_from_preset(lua_tostring(L, 1), &ctx));
    own = true;
  } else if (ctx == NULL && lua_istable(L, 1) && fh__lua_totensor(L, 1) == NULL) {
    fh__lua_checkopts(L, 1, fn, param_keys);
    lua_getfield(L, 1, "log_n");
    if (lua_isnil(L, -1)) return fh__lua_raise(L, FH_ERR_VALUE, "%s: log_n is required", fn);
    int log_n = (int)fh__lua_checkint(L, lua_gettop(L), fn, "log_n", 0, 64);
    lua_pop(L, 1);
    int qb[FH_CKKS_MAX_PRIMES], pb[FH_CKKS_MAX_PRIMES];
    int nq = bits_list(L, 1, "q_bits", qb, fn), np = bits_list(L, 1, "p_bits", pb, fn);
    lua_getfield(L, 1, "scale");
    double scale = 0;
    if (lua_isnil(L, -1)) scale = nq > 0 ? ldexp(1.0, qb[0]) : 1.0;
    else if (lua_type(L, -1) == LUA_TNUMBER) scale = lua_tonumber(L, -1);
    else return fh__lua_raise(L, FH_ERR_TYPE, "%s: scale expected a number, got %s", fn, fh__lua_typename(L, -1));
    lua_pop(L, 1);
    bool insecure = fh__lua_optbool(L, 1, "allow_insecure", 0, fn);
    fh_status st = fh_ckks_context_from_bits(log_n, qb, nq, pb, np, scale, !insecure, &ctx);
    if (st != FH_OK) {
      fh_error_prefix("%s", fn);
      fh__lua_error(L);
    }
    own = true;
  } else if (ctx == NULL) {
    return fh__lua_raise(L, FH_ERR_TYPE,
                         "%s: argument 1 expected a preset name (fh.Preset.*), a CkksContext or a parameter table, got %s",
                         fn, fh__lua_typename(L, 1));
  }
  engine_box *b = fh__lua_newbox(L, sizeof *b, FH_CKKS_ENGINE_MT);
  fh_status st = fh_ckks_engine_new(ctx, dev, seeded ? &seed : NULL, &b->e);
  if (own) fh_ckks_context_release(ctx);
  if (st != FH_OK) {
    fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  return 1;
}

static int e_index(lua_State *L) {
  if (lua_type(L, 2) == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
  }
  engine_box *b = fh__lua_testudata(L, 1, FH_CKKS_ENGINE_MT);
  const char *k = lua_tostring(L, 2);
  if (b == NULL || b->e == NULL || k == NULL) return 0;
  if (strcmp(k, "context") == 0) fh__lua_push_context(L, fh_ckks_engine_context(b->e));
  else if (strcmp(k, "device") == 0) fh__lua_push_device(L, fh_ckks_engine_device(b->e));
  else if (strcmp(k, "seeded") == 0) lua_pushboolean(L, fh_ckks_engine_is_seeded(b->e));
  else if (strcmp(k, "dnum") == 0) lua_pushinteger(L, fh_ckks_engine_dnum(b->e));
  else if (strcmp(k, "num_slots") == 0) lua_pushnumber(L, (lua_Number)fh_ckks_engine_context(b->e)->num_slots);
  else if (strcmp(k, "max_level") == 0) lua_pushinteger(L, fh_ckks_engine_context(b->e)->max_level);
  else lua_pushnil(L);
  return 1;
}

static int e_tostring(lua_State *L) {
  engine_box *b = fh__lua_testudata(L, 1, FH_CKKS_ENGINE_MT);
  if (b == NULL || b->e == NULL) {
    lua_pushliteral(L, "CkksEngine(released)");
    return 1;
  }
  const fh_ckks_context *c = fh_ckks_engine_context(b->e);
  char dev[FH_DEVICE_NAME_MAX];
  lua_pushfstring(L, "CkksEngine(%s, N=%d, slots=%d, max_level=%d, dnum=%d, device=%s%s)",
                  c->preset[0] ? c->preset : "custom", (int)c->ring_degree, (int)c->num_slots, c->max_level,
                  fh_ckks_engine_dnum(b->e), fh_device_name(fh_ckks_engine_device(b->e), dev),
                  fh_ckks_engine_is_seeded(b->e) ? ", SEEDED: insecure" : "");
  return 1;
}

/* ---- keys ------------------------------------------------------------------------------ */
static int e_create_secret_key(lua_State *L) {
  fh_ckks_engine *e = check_engine(L, "create_secret_key");
  fh_value *v = NULL;
  fh_status st_ = fh_ckks_create_secret_key(e, &v);
  return push_result(L, st_, v, "create_secret_key");
}
static int e_create_public_key(lua_State *L) {
  const char *fn = "create_public_key";
  fh_ckks_engine *e = check_engine(L, fn);
  fh_value *v = NULL;
  fh_status st_ = fh_ckks_create_public_key(e, arg_value(L, 2, fn, "sk", false), &v);
  return push_result(L, st_, v, fn);
}
static int e_create_relinearization_key(lua_State *L) {
  const char *fn = "create_relinearization_key";
  fh_ckks_engine *e = check_engine(L, fn);
  fh_value *v = NULL;
  fh_status st_ = fh_ckks_create_relinearization_key(e, arg_value(L, 2, fn, "sk", false), &v);
  return push_result(L, st_, v, fn);
}
static int e_create_rotation_key(lua_State *L) {
  const char *fn = "create_rotation_key";
  fh_ckks_engine *e = check_engine(L, fn);
  fh_value *sk = arg_value(L, 2, fn, "sk", false);
  int64_t step = fh__lua_checkint(L, 3, "CkksEngine:create_rotation_key", "step", -((int64_t)1 << 40), (int64_t)1 << 40);
  fh_value *v = NULL;
  fh_status st_ = fh_ckks_create_rotation_key(e, sk, step, &v);
  return push_result(L, st_, v, fn);
}
static int e_create_conjugation_key(lua_State *L) {
  const char *fn = "create_conjugation_key";
  fh_ckks_engine *e = check_engine(L, fn);
  fh_value *v = NULL;
  fh_status st_ = fh_ckks_create_conjugation_key(e, arg_value(L, 2, fn, "sk", false), &v);
  return push_result(L, st_, v, fn);
}

/* ---- encoding: engine:_encode(tensor, level, scale, method [, basis]) (the Lua
 * layer handles options; method: the public method that encodes, "encode" or
 * "encrypt_message", which names the errors; basis "Q" or "QP") ----- */
static int e_encode(lua_State *L) {
  const char *fn = luaL_optstring(L, 5, "encode");
  char name[96];
  snprintf(name, sizeof name, "CkksEngine:%s", fn);
  fh_ckks_engine *e = check_engine(L, fn);
  fh_tensor *m = fh__lua_checktensor(L, 2, name, "msg");
  int level = (int)fh__lua_checkint(L, 3, name, "level", INT32_MIN, INT32_MAX);
  if (lua_type(L, 4) != LUA_TNUMBER)
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: scale expected a number, got %s", name, fh__lua_typename(L, 4));
  fh_modulus_basis basis = FH_BASIS_Q;
  if (!lua_isnoneornil(L, 6) && fh_basis_parse(luaL_checkstring(L, 6), &basis) != FH_OK)
    return fh__lua_error_named(L, name);
  fh_value *v = NULL;
  fh_status st_ = fh_ckks_encode_basis(e, m, level, lua_tonumber(L, 4), basis, &v);
  return push_result(L, st_, v, fn);
}

static int e_decode(lua_State *L) {
  const char *fn = luaL_optstring(L, 4, "decode"); /* or "decrypt_message" */
  fh_ckks_engine *e = check_engine(L, fn);
  fh_value *pt = arg_value(L, 2, fn, "pt", false);
  bool is_real = lua_toboolean(L, 3);
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  fh_status st = fh_ckks_decode(e, pt, is_real, &b->t);
  if (st != FH_OK) {
    char name[96];
    snprintf(name, sizeof name, "CkksEngine:%s", fn);
    fh__lua_error_named(L, name);
  }
  fh__lua_account(L, b->t);
  return 1;
}

/* ---- generic value operations ---------------------------------------------------------------- */
typedef fh_status (*op1_fn)(fh_ckks_engine *, const fh_value *, fh_value **);
typedef fh_status (*op2_fn)(fh_ckks_engine *, const fh_value *, const fh_value *, fh_value **);

static int op1(lua_State *L, const char *fn, const char *a, op1_fn f) {
  fh_ckks_engine *e = check_engine(L, fn);
  fh_value *x = arg_value(L, 2, fn, a, false), *v = NULL;
  fh_status st_ = f(e, x, &v);
  return push_result(L, st_, v, fn);
}
static int op2(lua_State *L, const char *fn, const char *a, const char *b, op2_fn f) {
  fh_ckks_engine *e = check_engine(L, fn);
  fh_value *x = arg_value(L, 2, fn, a, false), *y = arg_value(L, 3, fn, b, false), *v = NULL;
  fh_status st_ = f(e, x, y, &v);
  return push_result(L, st_, v, fn);
}

static int e_encode_plaintext(lua_State *L) { return op1(L, "encode_plaintext", "pt", fh_ckks_encode_plaintext); }
static int e_encrypt(lua_State *L) { return op2(L, "encrypt", "pt", "pk", fh_ckks_encrypt); }
static int e_encrypt_zero_like(lua_State *L) { return op2(L, "encrypt_zero_like", "like", "pk", fh_ckks_encrypt_zero_like); }
static int e_decrypt(lua_State *L) { return op2(L, "decrypt", "ct", "sk", fh_ckks_decrypt); }
static int e_add(lua_State *L) { return op2(L, "add", "a", "b", fh_ckks_add); }
static int e_sub(lua_State *L) { return op2(L, "sub", "a", "b", fh_ckks_sub); }
static int e_negate(lua_State *L) { return op1(L, "negate", "a", fh_ckks_negate); }
static int e_add_plaintext(lua_State *L) { return op2(L, "add_plaintext", "ct", "pt", fh_ckks_add_plaintext); }
static int e_sub_plaintext(lua_State *L) { return op2(L, "sub_plaintext", "ct", "pt", fh_ckks_sub_plaintext); }
/* engine:multiply(a, b[, {relinearize = rlk, rescale = true}]): with relinearize, multiply
 * fused with relinearize (fh_ckks_multiply_relinearize) */
static int e_multiply(lua_State *L) {
  static const char *const allowed[] = {"relinearize", "rescale", NULL};
  const char *fn = "CkksEngine:multiply";
  fh__lua_checkopts(L, 4, fn, allowed);
  const bool rescale = fh__lua_optbool(L, 4, "rescale", 0, fn);
  fh_value *rlk = NULL;
  if (lua_istable(L, 4)) {
    lua_getfield(L, 4, "relinearize");
    if (!lua_isnil(L, -1) && (rlk = fh__lua_tovalue(L, -1)) == NULL)
      fh__lua_raise(L, FH_ERR_TYPE, "%s: option 'relinearize' expected a CKKS value (a RelinearizationKey), got %s", fn,
                    fh__lua_typename(L, -1));
    lua_pop(L, 1); /* (the options table keeps the key alive) */
  }
  if (rlk == NULL) {
    if (rescale)
      fh__lua_raise(L, FH_ERR_VALUE, "%s: option 'rescale' needs option 'relinearize' (the product has three components)",
                    fn);
    return op2(L, "multiply", "a", "b", fh_ckks_multiply);
  }
  fh_ckks_engine *e = check_engine(L, "multiply");
  fh_value *x = arg_value(L, 2, "multiply", "a", false), *y = arg_value(L, 3, "multiply", "b", false), *v = NULL;
  fh_status st_ = fh_ckks_multiply_relinearize(e, x, y, rlk, rescale, &v);
  return push_result(L, st_, v, "multiply");
}
/* engine:relinearize(ct, rlk[, {rescale = true}]) */
static int e_relinearize(lua_State *L) {
  static const char *const allowed[] = {"rescale", NULL};
  fh__lua_checkopts(L, 4, "CkksEngine:relinearize", allowed);
  const bool rescale = fh__lua_optbool(L, 4, "rescale", 0, "CkksEngine:relinearize");
  return op2(L, "relinearize", "ct", "rlk", rescale ? fh_ckks_relinearize_rescale : fh_ckks_relinearize);
}
static int e_rescale(lua_State *L) { return op1(L, "rescale_to_next_level", "ct", fh_ckks_rescale_to_next_level); }
static int e_multiply_plaintext(lua_State *L) {
  return op2(L, "multiply_plaintext", "ct", "pt", fh_ckks_multiply_plaintext);
}
static int e_prepare(lua_State *L) {
  return op1(L, "prepare_plaintext_for_multiplication", "pt", fh_ckks_prepare_plaintext_for_multiplication);
}
static int e_to_ntt(lua_State *L) { return op1(L, "coefficient_domain_to_ntt_domain", "value", fh_ckks_to_ntt); }
static int e_to_coeff(lua_State *L) { return op1(L, "ntt_domain_to_coefficient_domain", "value", fh_ckks_to_coefficient); }
static int e_rotate_with_key(lua_State *L) { return op2(L, "rotate_with_key", "ct", "rk", fh_ckks_rotate_with_key); }
static int e_sum_batch(lua_State *L) { return op1(L, "sum_ciphertext_batch", "ct", fh_ckks_sum_ciphertext_batch); }

static int e_rotate_by_step(lua_State *L) {
  const char *fn = "rotate_by_step";
  fh_ckks_engine *e = check_engine(L, fn);
  fh_value *ct = arg_value(L, 2, fn, "ct", false);
  int64_t r = fh__lua_checkint(L, 3, "CkksEngine:rotate_by_step", "r", -((int64_t)1 << 40), (int64_t)1 << 40);
  fh_value *rk = arg_value(L, 4, fn, "rk", true), *v = NULL;
  fh_status st_ = fh_ckks_rotate_by_step(e, ct, r, rk, &v);
  return push_result(L, st_, v, fn);
}

static int e_conjugate(lua_State *L) {
  const char *fn = "conjugate";
  fh_ckks_engine *e = check_engine(L, fn);
  fh_value *ct = arg_value(L, 2, fn, "ct", false), *ck = arg_value(L, 3, fn, "ck", true), *v = NULL;
  fh_status st_ = fh_ckks_conjugate(e, ct, ck, &v);
  return push_result(L, st_, v, fn);
}

/* Entry i (0-based) of the list at `list` as a value (borrowed: the list keeps it alive), or a
 * TypeError "<name>: <what>[i+1] expected a <expected>, got ...". With or_false, an entry false
 * is NULL (a keys list's "the engine's key"). */
static const fh_value *list_value(lua_State *L, int list, int i, const char *name, const char *what,
                                  const char *expected, bool or_false) {
  lua_rawgeti(L, list, i + 1);
  const fh_value *v = fh__lua_tovalue(L, -1);
  if (v == NULL && !(or_false && lua_isboolean(L, -1) && !lua_toboolean(L, -1)))
    fh__lua_raise(L, FH_ERR_TYPE, "%s: %s[%d] expected a %s%s, got %s", name, what, i + 1, expected,
                  or_false ? " or false" : "", fh__lua_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

/* engine:rotate_many(ct, steps [, keys]) -> {ct rotated by steps[1], ...} */
static int e_rotate_many(lua_State *L) {
  const char *fn = "rotate_many";
  fh_ckks_engine *e = check_engine(L, fn);
  fh_value *ct = arg_value(L, 2, fn, "ct", false);
  if (!lua_istable(L, 3) || fh__lua_totensor(L, 3))
    return fh__lua_raise(L, FH_ERR_TYPE, "CkksEngine:rotate_many: argument 2 (steps) expected a list of integers, got %s",
                         fh__lua_typename(L, 3));
  int n = (int)lua_objlen(L, 3);
  if (n < 1) return fh__lua_raise(L, FH_ERR_VALUE, "CkksEngine:rotate_many: steps is empty");
  if (n > 1 << 16) return fh__lua_raise(L, FH_ERR_VALUE, "CkksEngine:rotate_many: at most 65536 steps, got %d", n);
  bool with_keys = !lua_isnoneornil(L, 4);
  if (with_keys && (!lua_istable(L, 4) || (int)lua_objlen(L, 4) != n))
    return fh__lua_raise(L, FH_ERR_VALUE, "CkksEngine:rotate_many: argument 3 (keys) expected a list of %d rotation keys",
                         n);
  /* scratch owned by Lua (freed by the GC), then the result boxes before anything is made */
  int64_t *steps = lua_newuserdata(L, sizeof *steps * (size_t)n);
  const fh_value **keys = lua_newuserdata(L, sizeof *keys * (size_t)n);
  fh_value **outs = lua_newuserdata(L, sizeof *outs * (size_t)n);
  for (int i = 0; i < n; ++i) {
    lua_rawgeti(L, 3, i + 1);
    char what[32];
    snprintf(what, sizeof what, "steps[%d]", i + 1);
    steps[i] = fh__lua_checkint(L, lua_gettop(L), "CkksEngine:rotate_many", what, -((int64_t)1 << 40), (int64_t)1 << 40);
    lua_pop(L, 1);
    keys[i] = with_keys ? list_value(L, 4, i, "CkksEngine:rotate_many", "keys", "RotationKey", true) : NULL;
  }
  lua_createtable(L, n, 0);
  int list = lua_gettop(L);
  for (int i = 0; i < n; ++i) {
    fh__lua_newbox(L, sizeof(fh_value_box), FH_VALUE_MT); /* v = NULL until filled */
    lua_rawseti(L, list, i + 1);
  }
  fh_status st = fh_ckks_rotate_many(e, ct, steps, n, with_keys ? keys : NULL, outs);
  if (st != FH_OK) return fh__lua_error_named(L, "CkksEngine:rotate_many");
  for (int i = 0; i < n; ++i) {
    lua_rawgeti(L, list, i + 1);
    fh_value_box *b = lua_touserdata(L, -1);
    b->v = outs[i];
    fh__lua_account(L, fh_value_data(outs[i]));
    lua_pop(L, 1);
  }
  return 1;
}

/* engine:linear_transform(ct, steps, plaintexts [, keys] [, {rescale = true}]) -> sum of
 * plaintexts[i] * (ct rotated by steps[i]) (rescaled). The options table comes last: argument 5
 * when it is not a list (keys has one entry per step), else argument 6. */
static int e_linear_transform(lua_State *L) {
  const char *fn = "linear_transform", *name = "CkksEngine:linear_transform";
  fh_ckks_engine *e = check_engine(L, fn);
  static const char *const allowed[] = {"rescale", NULL};
  const int opt_at = lua_istable(L, 5) && !fh__lua_totensor(L, 5) && lua_objlen(L, 5) == 0 && lua_isnoneornil(L, 6) ? 5 : 6;
  fh__lua_checkopts(L, opt_at, name, allowed);
  const bool rescale = fh__lua_optbool(L, opt_at, "rescale", 0, name);
  fh_value *ct = arg_value(L, 2, fn, "ct", false);
  if (!lua_istable(L, 3) || fh__lua_totensor(L, 3))
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 2 (steps) expected a list of integers, got %s", name,
                         fh__lua_typename(L, 3));
  int n = (int)lua_objlen(L, 3);
  if (n < 1) return fh__lua_raise(L, FH_ERR_VALUE, "%s: steps is empty", name);
  if (n > 1 << 16) return fh__lua_raise(L, FH_ERR_VALUE, "%s: at most 65536 steps, got %d", name, n);
  if (!lua_istable(L, 4) || fh__lua_totensor(L, 4) || (int)lua_objlen(L, 4) != n)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 3 (plaintexts) expected a list of %d plaintexts (one per step), got %s",
                         name, n, lua_istable(L, 4) && !fh__lua_totensor(L, 4) ? "a list of another length" : fh__lua_typename(L, 4));
  bool with_keys = opt_at == 6 && !lua_isnoneornil(L, 5);
  if (with_keys && (!lua_istable(L, 5) || (int)lua_objlen(L, 5) != n))
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: argument 4 (keys) expected a list of %d rotation keys", name, n);
  /* scratch owned by Lua (freed by the GC); the values stay alive in the argument lists */
  int64_t *steps = lua_newuserdata(L, sizeof *steps * (size_t)n);
  const fh_value **pts = lua_newuserdata(L, sizeof *pts * (size_t)n);
  const fh_value **keys = lua_newuserdata(L, sizeof *keys * (size_t)n);
  for (int i = 0; i < n; ++i) {
    char what[32];
    lua_rawgeti(L, 3, i + 1);
    snprintf(what, sizeof what, "steps[%d]", i + 1);
    steps[i] = fh__lua_checkint(L, lua_gettop(L), name, what, -((int64_t)1 << 40), (int64_t)1 << 40);
    lua_pop(L, 1);
    pts[i] = list_value(L, 4, i, name, "plaintexts", "Plaintext", false);
    keys[i] = with_keys ? list_value(L, 5, i, name, "keys", "RotationKey", true) : NULL;
  }
  fh_value *v = NULL;
  fh_status st_ = (rescale ? fh_ckks_linear_transform_rescale : fh_ckks_linear_transform)(e, ct, steps, n, pts,
                                                                                         with_keys ? keys : NULL, &v);
  return push_result(L, st_, v, fn);
}

static int e_stack_batch(lua_State *L) {
  const char *fn = "stack_batch";
  fh_ckks_engine *e = check_engine(L, fn);
  if (!lua_istable(L, 2) || fh__lua_totensor(L, 2))
    return fh__lua_raise(L, FH_ERR_TYPE, "CkksEngine:stack_batch: argument 1 expected a list of ciphertexts, got %s",
                         fh__lua_typename(L, 2));
  int n = (int)lua_objlen(L, 2);
  if (n < 1) return fh__lua_raise(L, FH_ERR_VALUE, "CkksEngine:stack_batch: the list is empty");
  if (n > 1 << 20) return fh__lua_raise(L, FH_ERR_VALUE, "CkksEngine:stack_batch: too many ciphertexts");
  const fh_value **cts = lua_newuserdata(L, sizeof *cts * (size_t)n); /* freed by the GC */
  for (int i = 0; i < n; ++i) {
    lua_rawgeti(L, 2, i + 1);
    fh_value *v = fh__lua_tovalue(L, -1);
    if (v == NULL)
      return fh__lua_raise(L, FH_ERR_TYPE, "CkksEngine:stack_batch: element %d expected a Ciphertext, got %s", i + 1,
                           fh__lua_typename(L, -1));
    cts[i] = v; /* kept alive by the list */
    lua_pop(L, 1);
  }
  fh_value *v = NULL;
  fh_status st_ = fh_ckks_stack_batch(e, (const fh_value *const *)cts, n, &v);
  return push_result(L, st_, v, fn);
}

static void fh__lua_open_ckks_engine(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"create_secret_key", e_create_secret_key},
      {"create_public_key", e_create_public_key},
      {"create_relinearization_key", e_create_relinearization_key},
      {"create_rotation_key", e_create_rotation_key},
      {"create_conjugation_key", e_create_conjugation_key},
      {"_encode", e_encode},
      {"_decode", e_decode},
      {"encode_plaintext", e_encode_plaintext},
      {"encrypt", e_encrypt},
      {"encrypt_zero_like", e_encrypt_zero_like},
      {"decrypt", e_decrypt},
      {"add", e_add},
      {"sub", e_sub},
      {"negate", e_negate},
      {"add_plaintext", e_add_plaintext},
      {"sub_plaintext", e_sub_plaintext},
      {"multiply", e_multiply},
      {"relinearize", e_relinearize},
      {"rescale_to_next_level", e_rescale},
      {"multiply_plaintext", e_multiply_plaintext},
      {"prepare_plaintext_for_multiplication", e_prepare},
      {"coefficient_domain_to_ntt_domain", e_to_ntt},
      {"ntt_domain_to_coefficient_domain", e_to_coeff},
      {"rotate_by_step", e_rotate_by_step},
      {"rotate_with_key", e_rotate_with_key},
      {"rotate_many", e_rotate_many},
      {"linear_transform", e_linear_transform},
      {"conjugate", e_conjugate},
      {"stack_batch", e_stack_batch},
      {"sum_ciphertext_batch", e_sum_batch},
      {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", engine_gc}, {"__tostring", e_tostring}, {NULL, NULL}};
  fh__lua_newclass_indexed(L, FH_CKKS_ENGINE_MT, methods, meta, e_index);
  {
    static const char *const fields[] = {"context", "device", "seeded", "dnum", "num_slots", "max_level", NULL};
    fh__lua_setfields(L, fields);
  }
  lua_getfield(L, -1, "methods");
  lua_setfield(L, -3, "CkksEngine_methods");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_engine);
  lua_setfield(L, -2, "CkksEngine");
  fh__lua_name(l_engine, "fh.CkksEngine");
}
