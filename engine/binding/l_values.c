/* CKKS contexts, values, envelopes and value files: Lua userdata. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "fh/value_io.h"

/* ---- contexts --------------------------------------------------------------- */
fh_ckks_context *fh__lua_tocontext(lua_State *L, int idx) {
  fh_context_box *b = fh__lua_testudata(L, idx, FH_CONTEXT_MT);
  return b ? b->c : NULL;
}

static fh_context_box *new_context_box(lua_State *L) {
  fh_context_box *b = fh__lua_newbox(L, sizeof *b, FH_CONTEXT_MT);
  return b;
}

void fh__lua_push_context(lua_State *L, fh_ckks_context *c) {
  fh_context_box *b = new_context_box(L);
  fh_ckks_context_retain(c);
  b->c = c;
}

static fh_ckks_context *checkcontext(lua_State *L, int idx, const char *fn) {
  fh_ckks_context *c = fh__lua_tocontext(L, idx);
  if (c == NULL)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: expected a CkksContext, got %s", fn, fh__lua_typename(L, idx));
  return c;
}

/* A prime from a number (< 2^53) or a uint64_t/int64_t cdata: field[i] of a
 * table, or (i == 0) the argument `field` itself. */
static uint64_t checkprime(lua_State *L, int idx, const char *fn, const char *field, int i) {
  char what[64];
  if (i > 0) snprintf(what, sizeof what, "%s[%d]", field, i);
  else snprintf(what, sizeof what, "argument 1 (%s)", field);
  fh_scalar s;
  if (!fh__lua_toscalar(L, idx, &s, 0) || s.kind == FH_SCALAR_BOOL)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: %s expected an integer (a number or a ULL literal), got %s", fn, what,
                  fh__lua_typename(L, idx));
  if (s.kind == FH_SCALAR_FLOAT && fabs(s.v.f) > 9007199254740992.0)
    fh__lua_raise(L, FH_ERR_VALUE,
                  "%s: %s = %.17g is a Lua number above 2^53, where numbers skip integers (it may not be the "
                  "prime written in the source); give primes above 2^53 as ULL literals",
                  fn, what, s.v.f);
  uint64_t v = 0;
  if (fh_scalar_to_dtype(&s, FH_UINT64, &v) != FH_OK) {
    fh_error_prefix("%s: %s", fn, what);
    fh__lua_error(L);
  }
  return v;
}

static int read_primes(lua_State *L, int tidx, const char *key, uint64_t *out, const char *fn) {
  lua_getfield(L, tidx, key);
  if (!lua_istable(L, -1))
    fh__lua_raise(L, FH_ERR_TYPE, "%s: %s expected a list of primes, got %s", fn, key, fh__lua_typename(L, -1));
  int n = (int)lua_objlen(L, -1);
  if (n > FH_CKKS_MAX_PRIMES)
    fh__lua_raise(L, FH_ERR_VALUE, "%s: %s lists %d primes (at most %d in all)", fn, key, n, FH_CKKS_MAX_PRIMES);
  for (int i = 1; i <= n; ++i) {
    lua_rawgeti(L, -1, i);
    out[i - 1] = checkprime(L, lua_gettop(L), fn, key, i);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return n;
}

static const char *const spec_keys[] = {"ring_degree", "default_scale", "q_primes", "p_primes",
                                        "enforce_security_budget", "galois_generator", "max_level", "key_digits",
                                        NULL};

static int l_context(lua_State *L) {
  const char *fn = "fh.CkksContext";
  if (fh__lua_tocontext(L, 1)) {
    lua_settop(L, 1);
    return 1;
  }
  if (lua_type(L, 1) == LUA_TSTRING) {
    const char *name = lua_tostring(L, 1);
    fh_context_box *b = new_context_box(L);
    fh__lua_check(L, fh_ckks_context_from_preset(name, &b->c));
    return 1;
  }
  if (!lua_istable(L, 1))
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: expected a preset name or a parameter table, got %s", fn,
                         fh__lua_typename(L, 1));
  fh__lua_checkopts(L, 1, fn, spec_keys);
  lua_getfield(L, 1, "ring_degree");
  if (lua_isnil(L, -1)) return fh__lua_raise(L, FH_ERR_VALUE, "%s: ring_degree is required", fn);
  int64_t n = fh__lua_checkint(L, lua_gettop(L), fn, "ring_degree", 0, (int64_t)1 << 40);
  lua_getfield(L, 1, "default_scale");
  if (lua_type(L, -1) != LUA_TNUMBER)
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: default_scale expected a number, got %s", fn, fh__lua_typename(L, -1));
  double scale = lua_tonumber(L, -1);
  lua_pop(L, 2);
  uint64_t q[FH_CKKS_MAX_PRIMES], p[FH_CKKS_MAX_PRIMES];
  int nq = read_primes(L, 1, "q_primes", q, fn), np = read_primes(L, 1, "p_primes", p, fn);
  int enforce = fh__lua_optbool(L, 1, "enforce_security_budget", 1, fn);
  /* the layout: slot-order generator, max_level (#Q - 2 or #Q - 1), digit split */
  lua_getfield(L, 1, "galois_generator");
  int32_t gen = lua_isnil(L, -1) ? 5 : (int32_t)fh__lua_checkint(L, lua_gettop(L), fn, "galois_generator", 0, 1 << 20);
  if (gen != 5 && gen != 3)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: galois_generator must be 5 or 3 (the slot order's generator), got %d",
                         fn, gen);
  lua_getfield(L, 1, "max_level");
  bool all_levels = false;
  if (!lua_isnil(L, -1)) {
    int64_t ml = fh__lua_checkint(L, lua_gettop(L), fn, "max_level", INT32_MIN, INT32_MAX);
    if (ml != nq - 2 && ml != nq - 1)
      return fh__lua_raise(L, FH_ERR_VALUE,
                           "%s: max_level must be #q_primes - 2 = %d (a base prime stays) or #q_primes - 1 = %d (every "
                           "Q prime can be dropped), got %lld",
                           fn, nq - 2, nq - 1, (long long)ml);
    all_levels = ml == nq - 1;
  }
  lua_getfield(L, 1, "key_digits");
  fh_key_digits kd = FH_DIGITS_DEFAULT;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      return fh__lua_raise(L, FH_ERR_TYPE, "%s: key_digits expected a string, got %s", fn, fh__lua_typename(L, -1));
    if (fh_key_digits_parse(lua_tostring(L, -1), &kd) != FH_OK) {
      fh_error_prefix("%s", fn);
      return fh__lua_error(L);
    }
  }
  lua_pop(L, 3);
  fh_ckks_context_spec s = {n, scale, nq, np, q, p, enforce != 0, gen, all_levels, kd};
  fh_context_box *b = new_context_box(L);
  fh_status st = fh_ckks_context_new(&s, &b->c);
  if (st != FH_OK) {
    fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  return 1;
}

static int l_context_lookup(lua_State *L) {
  if (lua_type(L, 1) != LUA_TSTRING)
    return fh__lua_raise(L, FH_ERR_TYPE, "fh.context_lookup: argument 1 (id) expected a string, got %s",
                         fh__lua_typename(L, 1));
  const char *id = lua_tostring(L, 1);
  fh_context_box *b = new_context_box(L);
  fh__lua_check(L, fh_ckks_context_lookup(id, &b->c));
  return 1;
}

static int l_presets(lua_State *L) {
  int n = fh_ckks_preset_count();
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; ++i) {
    const fh_ckks_preset *p = fh_ckks_preset_at(i);
    lua_createtable(L, 0, 11);
    lua_pushstring(L, p->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, p->member);
    lua_setfield(L, -2, "member");
    lua_pushinteger(L, 1 << p->log_n);
    lua_setfield(L, -2, "ring_degree");
    lua_pushinteger(L, p->scale_bits);
    lua_setfield(L, -2, "scale_bits");
    lua_pushinteger(L, p->num_scale_primes);
    lua_setfield(L, -2, "levels");
    lua_pushinteger(L, p->num_q);
    lua_setfield(L, -2, "num_q_primes");
    lua_pushinteger(L, p->num_p_primes);
    lua_setfield(L, -2, "num_p_primes");
    lua_pushinteger(L, p->max_level);
    lua_setfield(L, -2, "max_level");
    lua_pushinteger(L, p->galois_generator);
    lua_setfield(L, -2, "galois_generator");
    lua_pushstring(L, p->family == FH_PRESET_FHELIUM_030 ? "fhelium-0.30" : "levels");
    lua_setfield(L, -2, "family");
    lua_pushstring(L, p->word_bits == 32 ? "int32" : "int64");
    lua_setfield(L, -2, "dtype");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_security_budget(lua_State *L) {
  int64_t n = fh__lua_checkint(L, 1, "fh.ckks_security_budget_bits", "ring_degree", 0, (int64_t)1 << 40);
  int32_t b = fh_ckks_security_budget_bits(n);
  if (b) lua_pushinteger(L, b);
  else lua_pushnil(L);
  return 1;
}

static int l_is_prime(lua_State *L) {
  uint64_t v = checkprime(L, 1, "fh.is_prime", "n", 0);
  lua_pushboolean(L, fh_is_prime_u64(v));
  return 1;
}

static int ctx_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  fh_context_box *b = fh__lua_testudata(L, 1, FH_CONTEXT_MT);
  if (b && b->c) {
    fh_ckks_context_release(b->c);
    b->c = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}

static int ctx_eq(lua_State *L) {
  lua_pushboolean(L, fh__lua_tocontext(L, 1) == fh__lua_tocontext(L, 2));
  return 1;
}

static int ctx_tostring(lua_State *L) {
  fh_ckks_context *c = checkcontext(L, 1, "CkksContext.__tostring");
  char buf[512];
  int e = 0;
  double m = frexp(c->default_scale, &e);
  char scale[64];
  if (m == 0.5) snprintf(scale, sizeof scale, "2^%d", e - 1);
  else snprintf(scale, sizeof scale, "%.17g", c->default_scale);
  snprintf(buf, sizeof buf,
           "fhelium.CkksContext(id=%.16s..., ring_degree=%lld, num_slots=%lld, max_level=%d, default_scale=%s, "
           "q_primes=%d, p_primes=%d, log2(QP)=%d bits, galois_generator=%d, key_digits=%s%s%s)",
           c->id, (long long)c->ring_degree, (long long)c->num_slots, c->max_level, scale, c->num_q, c->num_p,
           c->modulus_bits, c->galois_generator, fh_key_digits_name((fh_key_digits)c->key_digits),
           c->preset[0] ? ", preset=" : "", c->preset);
  lua_pushstring(L, buf);
  return 1;
}

/* the primes as raw little-endian uint64 bytes; lua/fhelium/values.lua
 * turns them into uint64_t cdata lists (q_primes, p_primes, primes) */
static int ctx_primes_bytes(lua_State *L) {
  fh_ckks_context *c = checkcontext(L, 1, "CkksContext:_primes_bytes");
  const char *which = luaL_checkstring(L, 2);
  int lo = 0, n = c->num_primes;
  if (strcmp(which, "q") == 0) n = c->num_q;
  else if (strcmp(which, "p") == 0) lo = c->num_q, n = c->num_p;
  lua_pushlstring(L, (const char *)(c->primes + lo), sizeof(uint64_t) * (size_t)n);
  return 1;
}

static fh_modulus_basis checkbasis(lua_State *L, int idx, const char *fn, fh_modulus_basis def) {
  if (lua_isnoneornil(L, idx)) return def;
  if (lua_type(L, idx) != LUA_TSTRING)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: modulus_basis expected a string, got %s", fn, fh__lua_typename(L, idx));
  fh_modulus_basis b = FH_BASIS_NONE;
  if (fh_basis_parse(lua_tostring(L, idx), &b) != FH_OK) {
    fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  return b;
}

static void push_ids(lua_State *L, const int32_t *ids, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; ++i) {
    lua_pushinteger(L, ids[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

static int ctx_prime_ids(lua_State *L) {
  const char *fn = "CkksContext:prime_ids";
  fh_ckks_context *c = checkcontext(L, 1, fn);
  int32_t level = (int32_t)fh__lua_checkint(L, 2, fn, "level", INT32_MIN, INT32_MAX);
  fh_modulus_basis b = checkbasis(L, 3, fn, FH_BASIS_Q);
  int32_t ids[FH_CKKS_MAX_PRIMES], n;
  fh_status st = fh_ckks_context_prime_ids(c, level, b, ids, &n);
  if (st != FH_OK) {
    fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  push_ids(L, ids, n);
  return 1;
}

static int ctx_index(lua_State *L) {
  if (lua_type(L, 2) == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
  }
  fh_ckks_context *c = fh__lua_tocontext(L, 1);
  const char *k = lua_tostring(L, 2);
  if (c == NULL || k == NULL) return 0;
  if (strcmp(k, "id") == 0) lua_pushstring(L, c->id);
  else if (strcmp(k, "ring_degree") == 0) lua_pushnumber(L, (lua_Number)c->ring_degree);
  else if (strcmp(k, "num_slots") == 0) lua_pushnumber(L, (lua_Number)c->num_slots);
  else if (strcmp(k, "log_n") == 0) lua_pushinteger(L, c->log_n);
  else if (strcmp(k, "max_level") == 0) lua_pushinteger(L, c->max_level);
  else if (strcmp(k, "galois_generator") == 0) lua_pushinteger(L, c->galois_generator);
  else if (strcmp(k, "key_digits") == 0) lua_pushstring(L, fh_key_digits_name((fh_key_digits)c->key_digits));
  else if (strcmp(k, "num_key_digits") == 0) lua_pushinteger(L, c->num_digits);
  else if (strcmp(k, "default_scale") == 0) lua_pushnumber(L, c->default_scale);
  else if (strcmp(k, "num_q_primes") == 0) lua_pushinteger(L, c->num_q);
  else if (strcmp(k, "num_p_primes") == 0) lua_pushinteger(L, c->num_p);
  else if (strcmp(k, "modulus_bits") == 0) lua_pushinteger(L, c->modulus_bits);
  else if (strcmp(k, "security_budget_bits") == 0) {
    if (c->security_budget_bits) lua_pushinteger(L, c->security_budget_bits);
    else lua_pushnil(L);
  } else if (strcmp(k, "preset") == 0) {
    if (c->preset[0]) lua_pushstring(L, c->preset);
    else lua_pushnil(L);
  } else {
    /* q_primes / p_primes / primes: the Lua layer (fhelium.values) */
    lua_getfield(L, lua_upvalueindex(1), "_lua_field");
    if (lua_isfunction(L, -1)) {
      lua_pushvalue(L, 1);
      lua_pushvalue(L, 2);
      lua_call(L, 2, 1);
      return 1;
    }
    lua_pushnil(L);
  }
  return 1;
}

static int ctx_newindex(lua_State *L) {
  return fh__lua_raise(L, FH_ERR_TYPE, "a CkksContext is immutable (cannot assign field '%s')",
                       lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}

/* core._ext_probe(ctx): exercises fh_ckks_context_ext for the specs. The
 * builder for the last slot nests a build of the slot before it (the lock
 * is recursive); each built object counts its builds and, when the context
 * dies, its frees. Returns (builds, frees, same_pointer_as_last_call). */
static int probe_builds, probe_frees;
static void *probe_last;
static void probe_free(void *p) {
  ++probe_frees;
  fh_free(p);
}
static fh_status probe_build_inner(const fh_ckks_context *c, void *arg, void **out) {
  (void)c;
  (void)arg;
  ++probe_builds;
  *out = fh_malloc(1);
  return *out ? FH_OK : fh_error_set(FH_ERR_MEMORY, "out of memory");
}
static fh_status probe_build_outer(const fh_ckks_context *c, void *arg, void **out) {
  void *inner = NULL;
  fh_status st = fh_ckks_context_ext((fh_ckks_context *)c, FH_CKKS_EXT_SLOTS - 2, probe_build_inner, probe_free, arg,
                                     &inner);
  if (st != FH_OK) return st;
  return probe_build_inner(c, arg, out);
}
static int l_ext_probe(lua_State *L) {
  fh_ckks_context *c = checkcontext(L, 1, "core._ext_probe");
  void *p = NULL;
  if (!lua_isnoneornil(L, 2)) /* look up a slot without a builder */
    fh__lua_check(L, fh_ckks_context_ext(c, (int)lua_tointeger(L, 2), NULL, NULL, NULL, &p));
  fh__lua_check(L, fh_ckks_context_ext(c, FH_CKKS_EXT_SLOTS - 1, probe_build_outer, probe_free, NULL, &p));
  lua_pushinteger(L, probe_builds);
  lua_pushinteger(L, probe_frees);
  lua_pushboolean(L, p == probe_last);
  probe_last = p;
  return 3;
}

/* ---- values ------------------------------------------------------------------ */
fh_value *fh__lua_tovalue(lua_State *L, int idx) {
  fh_value_box *b = fh__lua_testudata(L, idx, FH_VALUE_MT);
  return b ? b->v : NULL;
}

static fh_value_box *new_value_box(lua_State *L) {
  fh_value_box *b = fh__lua_newbox(L, sizeof *b, FH_VALUE_MT);
  return b;
}

void fh__lua_push_value(lua_State *L, fh_value *v) {
  fh_value_box *b = new_value_box(L);
  b->v = v;
}

/* The running value method's public name ("Ciphertext:to"): the class is the
 * per-class closure's upvalue, else self's type (common.c). */
static const char *mname(lua_State *L, char *buf, size_t n, const char *method) {
  if (!fh__lua_current_name(L, buf, n)) snprintf(buf, n, "Value:%s", method);
  return buf;
}
#define MNAME(method) mname(L, fnbuf_, sizeof fnbuf_, method)

static fh_value *checkvalue(lua_State *L, int idx, const char *fn) {
  fh_value *v = fh__lua_tovalue(L, idx);
  if (v == NULL)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: expected a CKKS value (Plaintext, Ciphertext or a key), got %s", fn,
                  fh__lua_typename(L, idx));
  return v;
}

/* Metadata fields from a Lua table (options or an envelope's metadata):
 * numbers become integers when integral, tables lists of 32-bit integers.
 * `skip` names keys that are not metadata. Strings stay owned by the table
 * (it stays on the stack). */
typedef struct meta_buf {
  fh_meta_entry e[FH_META_MAX + 4];
  int32_t lists[2][FH_CKKS_MAX_PRIMES];
  int n, nlists;
} meta_buf;

static void read_meta(lua_State *L, int tidx, const char *const *skip, meta_buf *m, const char *fn) {
  m->n = 0;
  m->nlists = 0;
  lua_pushnil(L);
  while (lua_next(L, tidx)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      fh__lua_raise(L, FH_ERR_VALUE, "%s: field names must be strings, got %s", fn, fh__lua_typename(L, -2));
    const char *k = lua_tostring(L, -2);
    bool skipped = false;
    for (int i = 0; skip && skip[i]; ++i) skipped |= strcmp(k, skip[i]) == 0;
    if (skipped) {
      lua_pop(L, 1);
      continue;
    }
    if (m->n == (int)(sizeof m->e / sizeof m->e[0]))
      fh__lua_raise(L, FH_ERR_VALUE, "%s: too many fields (unknown field '%s'?)", fn, k);
    fh_meta_entry *e = &m->e[m->n];
    memset(e, 0, sizeof *e);
    e->key = k;
    switch (lua_type(L, -1)) {
      case LUA_TNUMBER: {
        double x = lua_tonumber(L, -1);
        if (x == floor(x) && fabs(x) <= 9007199254740992.0) {
          e->kind = FH_META_INT;
          e->i = (int64_t)x;
          e->r = x;
        } else {
          e->kind = FH_META_REAL;
          e->r = x;
        }
        if (strcmp(k, "scale") == 0) {
          e->kind = FH_META_REAL;
          e->r = x;
        }
        break;
      }
      case LUA_TSTRING: e->kind = FH_META_STRING; e->s = lua_tostring(L, -1); break;
      case LUA_TTABLE: {
        if (fh__lua_totensor(L, -1) || m->nlists == 2)
          fh__lua_raise(L, FH_ERR_TYPE, "%s: field '%s' expected a list of integers, got %s", fn, k,
                        fh__lua_typename(L, -1));
        int len = (int)lua_objlen(L, -1);
        if (len > FH_CKKS_MAX_PRIMES)
          fh__lua_raise(L, FH_ERR_STATE, "%s: field '%s' lists %d entries, more than the %d primes a context can have",
                        fn, k, len, FH_CKKS_MAX_PRIMES);
        int32_t *list = m->lists[m->nlists++];
        for (int i = 1; i <= len; ++i) {
          lua_rawgeti(L, -1, i);
          if (lua_type(L, -1) != LUA_TNUMBER)
            fh__lua_raise(L, FH_ERR_TYPE, "%s: %s[%d] expected an integer, got %s", fn, k, i, fh__lua_typename(L, -1));
          double x = lua_tonumber(L, -1);
          if (x != floor(x) || x < INT32_MIN || x > INT32_MAX)
            fh__lua_raise(L, FH_ERR_VALUE, "%s: %s[%d] must be an integer, got %.17g", fn, k, i, x);
          list[i - 1] = (int32_t)x;
          lua_pop(L, 1);
        }
        e->kind = FH_META_INT_LIST;
        e->list = list;
        e->nlist = len;
        break;
      }
      default:
        fh__lua_raise(L, FH_ERR_TYPE, "%s: field '%s' has unsupported type %s", fn, k, fh__lua_typename(L, -1));
    }
    m->n++;
    lua_pop(L, 1);
  }
}

/* The context for a value: `given` (borrowed, may be NULL) and/or the id
 * `id` (may be NULL or ""). With only an id, the live context with that id
 * is looked up and pinned by a box left on the stack. */
static fh_ckks_context *resolve_context(lua_State *L, fh_ckks_context *given, const char *id, const char *fn,
                                        const char *id_field) {
  if (given) {
    if (id && *id && strcmp(given->id, id) != 0)
      fh__lua_raise(L, FH_ERR_VALUE, "%s: context and %s disagree (%.16s... vs %.16s...)", fn, id_field, given->id, id);
    return given;
  }
  if (id == NULL || *id == '\0') return NULL;
  fh_context_box *b = new_context_box(L);
  fh_status st = fh_ckks_context_lookup(id, &b->c);
  if (st != FH_OK) {
    fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  return b->c;
}

/* context= (a CkksContext) and context_id= (a string) of table tidx;
 * strings stay owned by the table. */
static fh_ckks_context *opt_context(lua_State *L, int tidx, const char *fn) {
  fh_ckks_context *c = NULL;
  lua_getfield(L, tidx, "context");
  if (!lua_isnil(L, -1)) {
    c = fh__lua_tocontext(L, -1);
    if (c == NULL) fh__lua_raise(L, FH_ERR_TYPE, "%s: context expected a CkksContext, got %s", fn, fh__lua_typename(L, -1));
  }
  lua_pop(L, 1);
  lua_getfield(L, tidx, "context_id");
  const char *id = NULL;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      fh__lua_raise(L, FH_ERR_TYPE, "%s: context_id expected a string, got %s", fn, fh__lua_typename(L, -1));
    id = lua_tostring(L, -1);
  }
  lua_pop(L, 1);
  return resolve_context(L, c, id, fn, "context_id");
}

static const char *const ctor_skip[] = {"context", "context_id", "data", "message", NULL};

/* fh.Plaintext{...}, fh.Ciphertext{...}, fh.SecretKey{...}, ... */
static int l_value_ctor(lua_State *L) {
  fh_value_type type = (fh_value_type)lua_tointeger(L, lua_upvalueindex(2));
  const char *fn = lua_tostring(L, lua_upvalueindex(1)); /* "fh.Ciphertext" */
  if (!lua_istable(L, 1) || fh__lua_totensor(L, 1))
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: expected a table of fields, got %s", fn, fh__lua_typename(L, 1));
  lua_settop(L, 1);
  fh_ckks_context *ctx = opt_context(L, 1, fn);
  lua_getfield(L, 1, "data");
  lua_getfield(L, 1, "message");
  int di = lua_gettop(L) - 1, mi = lua_gettop(L);
  bool has_data = !lua_isnil(L, di), has_msg = !lua_isnil(L, mi);
  const char *tname = NULL;
  int ti;
  if (type == FH_PLAINTEXT) {
    if (has_data == has_msg)
      return fh__lua_raise(L, FH_ERR_VALUE, "%s: give exactly one of message (slots) or data (rns)", fn);
    tname = has_msg ? "message" : "data";
    ti = has_msg ? mi : di;
  } else {
    if (has_msg) return fh__lua_raise(L, FH_ERR_VALUE, "%s: only a Plaintext has a message (use data)", fn);
    if (!has_data) return fh__lua_raise(L, FH_ERR_VALUE, "%s: data is required", fn);
    tname = "data";
    ti = di;
  }
  fh_tensor *t = fh__lua_totensor(L, ti);
  if (t == NULL && strcmp(tname, "message") == 0 && lua_type(L, ti) == LUA_TNUMBER) {
    /* a scalar message: a 0-dim float64 tensor */
    double x = lua_tonumber(L, ti);
    fh_tensor_options o = fh_tensor_options_default();
    o.dtype = FH_FLOAT64;
    fh_tensor_box *tb = fh__lua_new_tensor_box(L);
    int64_t no_dims[1] = {0};
    fh__lua_check(L, fh_tensor_from_host(&x, 0, no_dims, &o, &tb->t));
    t = tb->t;
  }
  if (t == NULL)
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: %s expected a Tensor%s, got %s", fn, tname,
                         strcmp(tname, "message") == 0 ? " or a number" : "", fh__lua_typename(L, ti));
  meta_buf m;
  read_meta(L, 1, ctor_skip, &m, fn);
  fh_value_box *b = new_value_box(L);
  fh__lua_check(L, fh_value_from_metadata(ctx, type, m.e, m.n, true, &t, &tname, 1, &b->v));
  return 1;
}

static int v_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  fh_value_box *b = fh__lua_testudata(L, 1, FH_VALUE_MT);
  if (b && b->v) {
    fh_value_release(b->v);
    b->v = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}

static void push_shape(lua_State *L, const int64_t *s, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; ++i) {
    lua_pushnumber(L, (lua_Number)s[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

static void push_tensor_ref(lua_State *L, fh_tensor *t) {
  fh_tensor_retain(t);
  fh__lua_push_tensor(L, t);
}

static void push_meta_value(lua_State *L, const fh_meta_entry *e) {
  switch (e->kind) {
    case FH_META_INT: lua_pushnumber(L, (lua_Number)e->i); break;
    case FH_META_REAL: lua_pushnumber(L, e->r); break;
    case FH_META_STRING: lua_pushstring(L, e->s); break;
    default: push_ids(L, e->list, e->nlist); break;
  }
}

static int v_index(lua_State *L) {
  fh_value *v = fh__lua_tovalue(L, 1);
  if (lua_type(L, 2) == LUA_TSTRING) {
    if (v != NULL && fh__lua_class_method(L, 2, fh_value_type_name((fh_value_type)v->state.type))) return 1;
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
  }
  const char *k = lua_tostring(L, 2);
  if (v == NULL || k == NULL) return 0;
  const fh_value_state *s = &v->state;
  bool rns = fh_state_has_rows(s->type, s->representation);
  bool slots = s->type == FH_PLAINTEXT && s->representation == FH_REPR_SLOTS;
  bool leveled = s->type == FH_PLAINTEXT || s->type == FH_CIPHERTEXT;
  if (strcmp(k, "type") == 0 || strcmp(k, "value_type") == 0) lua_pushstring(L, fh_value_type_name((fh_value_type)s->type));
  else if (strcmp(k, "level") == 0 && leveled) lua_pushinteger(L, s->level);
  else if (strcmp(k, "scale") == 0 && leveled) lua_pushnumber(L, s->scale);
  else if (strcmp(k, "representation") == 0 && s->type == FH_PLAINTEXT)
    lua_pushstring(L, fh_representation_name((fh_representation)s->representation));
  else if (strcmp(k, "prime_ids") == 0 && rns) push_ids(L, s->prime_ids, s->num_prime_ids);
  else if (strcmp(k, "polynomial_domain") == 0 && rns)
    lua_pushstring(L, fh_domain_name((fh_polynomial_domain)s->polynomial_domain));
  else if (strcmp(k, "residue_representation") == 0 && rns)
    lua_pushstring(L, fh_residue_name((fh_residue_representation)s->residue_representation));
  else if (strcmp(k, "modulus_basis") == 0 && rns) lua_pushstring(L, fh_basis_name((fh_modulus_basis)s->modulus_basis));
  else if (strcmp(k, "num_components") == 0 && s->num_components) lua_pushinteger(L, s->num_components);
  else if (strcmp(k, "num_digits") == 0 && s->type >= FH_KEY_SWITCH_KEY)
    lua_pushnumber(L, (lua_Number)fh_value_data(v)->shape[0]);
  else if (strcmp(k, "step") == 0 && s->type == FH_ROTATION_KEY) lua_pushnumber(L, (lua_Number)s->step);
  else if (strcmp(k, "context_id") == 0) lua_pushstring(L, fh_value_context_id(v));
  else if (strcmp(k, "context") == 0) {
    if (v->ctx) fh__lua_push_context(L, v->ctx);
    else lua_pushnil(L);
  } else if (strcmp(k, "data") == 0 && !slots) push_tensor_ref(L, fh_value_data(v));
  else if (strcmp(k, "message") == 0 && slots) push_tensor_ref(L, fh_value_data(v));
  else if (strcmp(k, "device") == 0) fh__lua_push_device(L, fh_value_device(v));
  else if (strcmp(k, "batch_shape") == 0 && leveled) {
    int64_t b[FH_MAX_DIMS];
    int n = fh_value_batch_shape(v, b);
    push_shape(L, b, n);
  } else if (strcmp(k, "schema_version") == 0) lua_pushinteger(L, FH_VALUE_SCHEMA_VERSION);
  else if (strcmp(k, "is_secret") == 0) lua_pushboolean(L, fh_value_is_secret(v));
  else if (strcmp(k, "nbytes") == 0) {
    size_t nb = 0;
    for (int i = 0; i < v->ntensors; ++i) nb += fh_tensor_nbytes(v->tensors[i]);
    lua_pushnumber(L, (lua_Number)nb);
  } else lua_pushnil(L);
  return 1;
}

static int v_newindex(lua_State *L) {
  char fnbuf_[96];
  const char *fn = MNAME("__newindex");
  return fh__lua_raise(L, FH_ERR_TYPE, "%s: %s values are immutable: cannot assign field '%s' (construct a new value)",
                       fn, fh__lua_typename(L, 1), lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}

static int v_metadata(lua_State *L) {
  char fnbuf_[96];
  const char *fn = MNAME("metadata");
  fh_value *v = checkvalue(L, 1, fn);
  fh_meta_entry m[FH_META_MAX];
  int n = fh_value_state_metadata(&v->state, m);
  lua_createtable(L, 0, n);
  for (int i = 0; i < n; ++i) {
    push_meta_value(L, &m[i]);
    lua_setfield(L, -2, m[i].key);
  }
  return 1;
}

static int v_tensors(lua_State *L) {
  char fnbuf_[96];
  const char *fn = MNAME("tensors");
  fh_value *v = checkvalue(L, 1, fn);
  lua_createtable(L, 0, v->ntensors);
  for (int i = 0; i < v->ntensors; ++i) {
    push_tensor_ref(L, v->tensors[i]);
    lua_setfield(L, -2, fh_value_tensor_name(v, i));
  }
  return 1;
}

static const char *const to_opts[] = {"pin_memory", NULL};

static int v_to(lua_State *L) {
  char fnbuf_[96];
  const char *fn = MNAME("to");
  fh_value *v = checkvalue(L, 1, fn);
  fh_device d = fh__lua_checkdevice(L, 2, fn);
  fh__lua_checkopts(L, 3, fn, to_opts);
  int pin = fh__lua_optbool(L, 3, "pin_memory", 0, fn);
  if (pin && d.type != FH_DEVICE_CPU)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: option pin_memory=true requires device \"cpu\", got %s", fn,
                         lua_tostring(L, 2));
  fh_value_box *b = new_value_box(L);
  fh__lua_check(L, fh_value_to(v, d, pin != 0, &b->v));
  return 1;
}

static int v_cpu(lua_State *L) {
  char fnbuf_[96];
  const char *fn = MNAME("cpu");
  fh_value *v = checkvalue(L, 1, fn);
  fh_value_box *b = new_value_box(L);
  fh__lua_check(L, fh_value_to(v, fh_cpu(), false, &b->v));
  return 1;
}

static int v_cuda(lua_State *L) {
  char fnbuf_[96];
  const char *fn = MNAME("cuda");
  fh_value *v = checkvalue(L, 1, fn);
  fh_device d = {FH_DEVICE_CUDA, lua_isnoneornil(L, 2) ? fh_cuda_current_device()
                                                         : (int32_t)fh__lua_checkint(L, 2, fn, "device", 0, 1 << 20)};
  fh_value_box *b = new_value_box(L);
  fh__lua_check(L, fh_value_to(v, d, false, &b->v));
  return 1;
}

static int v_clone(lua_State *L) {
  char fnbuf_[96];
  const char *fn = MNAME("clone");
  fh_value *v = checkvalue(L, 1, fn);
  fh_value_box *b = new_value_box(L);
  fh__lua_check(L, fh_value_clone(v, &b->v));
  return 1;
}

static int v_equal(lua_State *L) {
  char fnbuf_[96];
  const char *fn = MNAME("equal");
  fh_value *a = checkvalue(L, 1, fn);
  fh_value *b = fh__lua_tovalue(L, 2);
  if (b == NULL) {
    lua_pushboolean(L, 0);
    return 1;
  }
  bool r = false;
  fh__lua_check(L, fh_value_equal(a, b, &r));
  lua_pushboolean(L, r);
  return 1;
}

static int v_tostring(lua_State *L) {
  fh_value *v = checkvalue(L, 1, "Value.__tostring");
  const fh_value_state *s = &v->state;
  char buf[1400];
  size_t l = (size_t)snprintf(buf, sizeof buf, "fhelium.%s(", fh_value_type_name((fh_value_type)s->type));
  fh_meta_entry m[FH_META_MAX];
  int n = fh_value_state_metadata(s, m);
  for (int i = 0; i < n && l < sizeof buf - 64; ++i) {
    char tmp[512];
    l += (size_t)snprintf(buf + l, sizeof buf - l, "%s%s=%s", i ? ", " : "", m[i].key, fh_meta_format(&m[i], tmp, sizeof tmp));
  }
  const fh_tensor *t = fh_value_data(v);
  char dev[FH_DEVICE_NAME_MAX];
  l += (size_t)snprintf(buf + l, sizeof buf - l, "%s%s={", n ? ", " : "", fh_value_tensor_name(v, 0));
  for (int i = 0; i < t->ndim && l < sizeof buf - 64; ++i)
    l += (size_t)snprintf(buf + l, sizeof buf - l, "%s%lld", i ? "," : "", (long long)t->shape[i]);
  snprintf(buf + l, sizeof buf - l, "} %s, context=%.16s, device=%s)", fh_dtype_name((fh_dtype)t->dtype),
           v->ctx ? v->ctx->id : "(none)", fh_device_name(fh_value_device(v), dev));
  lua_pushstring(L, buf);
  return 1;
}

static int l_is_value(lua_State *L) {
  lua_pushboolean(L, fh__lua_tovalue(L, 1) != NULL);
  return 1;
}

/* ---- envelopes --------------------------------------------------------------- */
static int l_envelope(lua_State *L) {
  fh_value *v = checkvalue(L, 1, "fh.envelope");
  lua_createtable(L, 0, 5);
  lua_pushstring(L, fh_value_type_name(fh_value_get_type(v)));
  lua_setfield(L, -2, "value_type");
  lua_pushinteger(L, FH_VALUE_SCHEMA_VERSION);
  lua_setfield(L, -2, "schema_version");
  lua_pushstring(L, fh_value_context_id(v));
  lua_setfield(L, -2, "context_id");
  v_metadata(L);
  lua_setfield(L, -2, "metadata");
  v_tensors(L);
  lua_setfield(L, -2, "tensors");
  return 1;
}

static const char *const env_keys[] = {"value_type", "schema_version", "context_id", "metadata", "tensors", NULL};
static const char *const from_env_opts[] = {"context", NULL};

static int l_from_envelope(lua_State *L) {
  const char *fn = "fh.from_envelope";
  if (!lua_istable(L, 1) || fh__lua_totensor(L, 1))
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: expected an envelope table, got %s", fn, fh__lua_typename(L, 1));
  fh__lua_checkopts(L, 1, fn, env_keys);
  fh__lua_checkopts(L, 2, fn, from_env_opts);
  lua_settop(L, 2);
  if (lua_isnil(L, 2)) {
    lua_newtable(L);
    lua_replace(L, 2);
  }
  lua_getfield(L, 1, "value_type");
  if (lua_type(L, -1) != LUA_TSTRING)
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: value_type expected a string, got %s", fn, fh__lua_typename(L, -1));
  fh_value_type type = FH_PLAINTEXT;
  if (fh_value_type_parse(lua_tostring(L, -1), &type) != FH_OK) {
    fh_error_prefix("%s", fn);
    return fh__lua_error(L);
  }
  lua_pop(L, 1);
  lua_getfield(L, 1, "schema_version");
  if (lua_type(L, -1) != LUA_TNUMBER)
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: schema_version expected a number, got %s", fn, fh__lua_typename(L, -1));
  if (lua_tonumber(L, -1) != FH_VALUE_SCHEMA_VERSION)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: unsupported schema_version %.17g (this fhelium reads %d)", fn,
                         lua_tonumber(L, -1), FH_VALUE_SCHEMA_VERSION);
  lua_pop(L, 1);
  lua_getfield(L, 1, "context_id");
  if (lua_type(L, -1) != LUA_TSTRING)
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: context_id expected a string, got %s", fn, fh__lua_typename(L, -1));
  lua_pop(L, 1);
  /* context: opts.context (must match the id) or the live one with the id */
  fh_ckks_context *given = NULL;
  lua_getfield(L, 2, "context");
  if (!lua_isnil(L, -1) && (given = fh__lua_tocontext(L, -1)) == NULL)
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: option 'context' expected a CkksContext, got %s", fn, fh__lua_typename(L, -1));
  lua_pop(L, 1);
  lua_getfield(L, 1, "context_id");
  const char *cid = lua_tostring(L, -1); /* pinned by the envelope */
  lua_pop(L, 1);
  fh_ckks_context *ctx = resolve_context(L, given, cid, fn, "context_id");
  lua_getfield(L, 1, "metadata");
  if (!lua_istable(L, -1) || fh__lua_totensor(L, -1))
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: metadata expected a table, got %s", fn, fh__lua_typename(L, -1));
  int mi = lua_gettop(L);
  lua_getfield(L, 1, "tensors");
  if (!lua_istable(L, -1) || fh__lua_totensor(L, -1))
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: tensors expected a table of named tensors, got %s", fn,
                         fh__lua_typename(L, -1));
  int ti = lua_gettop(L);
  fh_tensor *ts[FH_VALUE_MAX_TENSORS];
  const char *names[FH_VALUE_MAX_TENSORS];
  int nt = 0;
  lua_pushnil(L);
  while (lua_next(L, ti)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      return fh__lua_raise(L, FH_ERR_VALUE, "%s: tensor names must be strings", fn);
    if (nt == FH_VALUE_MAX_TENSORS)
      return fh__lua_raise(L, FH_ERR_VALUE, "%s: more than %d tensors", fn, FH_VALUE_MAX_TENSORS);
    fh_tensor *t = fh__lua_totensor(L, -1);
    if (t == NULL)
      return fh__lua_raise(L, FH_ERR_TYPE, "%s: tensors[\"%s\"] expected a Tensor, got %s", fn, lua_tostring(L, -2),
                           fh__lua_typename(L, -1));
    names[nt] = lua_tostring(L, -2);
    ts[nt++] = t;
    lua_pop(L, 1);
  }
  meta_buf m;
  read_meta(L, mi, NULL, &m, fn);
  fh_value_box *b = new_value_box(L);
  fh__lua_check(L, fh_value_from_metadata(ctx, type, m.e, m.n, false, ts, names, nt, &b->v));
  return 1;
}

/* ---- files ---------------------------------------------------------------------- */
static const char *const save_opts[] = {"overwrite", "allow_secret", "format", NULL};
static const char *const ser_opts[] = {"allow_secret", "format", NULL};
static const char *const load_opts[] = {"device", "context", NULL};

/* option `format` of table idx: "fhelium" (the default) or "fhelium-0.30" */
static fh_file_format opt_format(lua_State *L, int idx, const char *fn) {
  if (lua_isnoneornil(L, idx)) return FH_FORMAT_FHELIUM;
  lua_getfield(L, idx, "format");
  fh_file_format f = FH_FORMAT_FHELIUM;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      fh__lua_raise(L, FH_ERR_TYPE, "%s: option 'format' expected a string, got %s", fn, fh__lua_typename(L, -1));
    const char *s = lua_tostring(L, -1);
    if (strcmp(s, "fhelium-0.30") == 0) f = FH_FORMAT_FHELIUM_030;
    else if (strcmp(s, "fhelium") != 0)
      fh__lua_raise(L, FH_ERR_VALUE, "%s: option 'format' must be \"fhelium\" or \"fhelium-0.30\", got \"%.64s\"", fn,
                    s);
  }
  lua_pop(L, 1);
  return f;
}

/* option `context` of table idx: a CkksContext or a preset name (a box
 * pinning it is left on the stack), or NULL */
static fh_ckks_context *opt_load_context(lua_State *L, int idx, const char *fn) {
  if (lua_isnoneornil(L, idx)) return NULL;
  lua_getfield(L, idx, "context");
  fh_ckks_context *c = NULL;
  if (lua_type(L, -1) == LUA_TSTRING) {
    fh_context_box *b = new_context_box(L);
    fh_status st = fh_ckks_context_from_preset(lua_tostring(L, -2), &b->c);
    if (st != FH_OK) {
      fh_error_prefix("%s: option 'context'", fn);
      fh__lua_error(L);
    }
    c = b->c;
  } else if (!lua_isnil(L, -1) && (c = fh__lua_tocontext(L, -1)) == NULL) {
    fh__lua_raise(L, FH_ERR_TYPE, "%s: option 'context' expected a CkksContext or a preset name, got %s", fn,
                  fh__lua_typename(L, -1));
  }
  return c; /* the option (and the box) stay on the stack */
}

/* A path argument: a string without NUL bytes (the C library would stop at
 * the first one and open another file). */
static const char *check_path(lua_State *L, int idx, const char *fn, const char *arg) {
  if (lua_type(L, idx) != LUA_TSTRING)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: argument %s expected a string, got %s", fn, arg, fh__lua_typename(L, idx));
  size_t n;
  const char *p = lua_tolstring(L, idx, &n);
  if (strlen(p) != n)
    fh__lua_raise(L, FH_ERR_VALUE, "%s: argument %s must not contain a NUL byte (at byte %zu of %zu)", fn, arg,
                  strlen(p) + 1, n);
  return p;
}

static int l_save(lua_State *L) {
  const char *fn = "fh.save";
  if (lua_isnoneornil(L, 1)) return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 1 (value) is missing", fn);
  const char *path = check_path(L, 2, fn, "2 (path)");
  fh__lua_checkopts(L, 3, fn, save_opts);
  int overwrite = fh__lua_optbool(L, 3, "overwrite", 0, fn);
  int allow = fh__lua_optbool(L, 3, "allow_secret", 0, fn);
  fh_file_format format = opt_format(L, 3, fn);
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  fh_status st = fh__lua_tree_build(L, 1, "value", &sig, &leaves);
  if (st == FH_OK) st = fh_tree_save_as(sig, leaves, path, overwrite != 0, allow != 0, format);
  if (sig) fh_tree_sig_release(sig);
  fh_free(leaves);
  if (st != FH_OK) {
    if (strncmp(fh_error_message(), "fh.", 3) != 0) fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  return 0;
}

static int l_serialize(lua_State *L) {
  const char *fn = "fh.serialize";
  if (lua_isnoneornil(L, 1)) return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 1 (value) is missing", fn);
  fh__lua_checkopts(L, 2, fn, ser_opts);
  int allow = fh__lua_optbool(L, 2, "allow_secret", 0, fn);
  fh_file_format format = opt_format(L, 2, fn);
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  unsigned char *bytes = NULL;
  size_t n = 0;
  fh_status st = fh__lua_tree_build(L, 1, "value", &sig, &leaves);
  if (st == FH_OK) st = fh_tree_serialize_as(sig, leaves, allow != 0, format, &bytes, &n);
  if (sig) fh_tree_sig_release(sig);
  fh_free(leaves);
  if (st != FH_OK) {
    fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  /* a userdata guard frees `bytes` if pushing the string fails */
  lua_pushlstring(L, (const char *)bytes, n);
  fh_free(bytes);
  return 1;
}

/* Owns a loaded tree until it is pushed, so a Lua error while building the
 * Lua tree cannot leak it. */
#define FH_LOAD_GUARD_MT "fhelium.LoadGuard"
typedef struct load_guard {
  fh_tree_sig *sig;
  fh_tensor **leaves;
  int64_t n;
} load_guard;

static void guard_clear(load_guard *g) {
  if (g->sig) fh_tree_sig_release(g->sig);
  fh_value_io_free_leaves(g->leaves, g->n);
  g->sig = NULL;
  g->leaves = NULL;
  g->n = 0;
}

static int guard_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  load_guard *g = fh__lua_testudata(L, 1, FH_LOAD_GUARD_MT);
  if (g) guard_clear(g);
  FH_LUA_GC_END;
  return 0;
}

/* Push the loaded tree; frees sig and leaves on every path. */
static int push_loaded(lua_State *L, fh_status st, fh_tree_sig *sig, fh_tensor **leaves, const char *fn) {
  if (st != FH_OK) {
    if (strncmp(fh_error_message(), "fh.", 3) != 0) fh_error_prefix("%s", fn);
    return fh__lua_error(L);
  }
  load_guard *g = fh__lua_newbox(L, sizeof *g, FH_LOAD_GUARD_MT);
  g->sig = sig;
  g->leaves = leaves;
  g->n = sig->nleaves;
  fh__lua_tree_push(L, sig, leaves);
  guard_clear(g);
  return 1;
}

static int l_load(lua_State *L) {
  const char *fn = "fh.load";
  const char *path = check_path(L, 1, fn, "1 (path)");
  fh__lua_checkopts(L, 2, fn, load_opts);
  fh_device dev = fh__lua_optdevice(L, 2, "device", fh_cpu(), fn);
  fh_ckks_context *ctx = opt_load_context(L, 2, fn);
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  fh_status st = fh_device_check(dev);
  if (st == FH_OK) st = fh_tree_load_with(path, dev, ctx, &sig, &leaves);
  return push_loaded(L, st, sig, leaves, fn);
}

static int l_deserialize(lua_State *L) {
  const char *fn = "fh.deserialize";
  if (lua_type(L, 1) != LUA_TSTRING)
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 1 (bytes) expected a string, got %s", fn, fh__lua_typename(L, 1));
  fh__lua_checkopts(L, 2, fn, load_opts);
  fh_device dev = fh__lua_optdevice(L, 2, "device", fh_cpu(), fn);
  fh_ckks_context *ctx = opt_load_context(L, 2, fn);
  size_t n = 0;
  const char *bytes = lua_tolstring(L, 1, &n);
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  fh_status st = fh_device_check(dev);
  if (st == FH_OK) st = fh_tree_deserialize_with(bytes, n, dev, ctx, &sig, &leaves);
  return push_loaded(L, st, sig, leaves, fn);
}

/* ---- registration ---------------------------------------------------------------- */
void fh__lua_open_values(lua_State *L) {
  static const luaL_Reg ctx_methods[] = {{"prime_ids", ctx_prime_ids}, {"_primes_bytes", ctx_primes_bytes}, {NULL, NULL}};
  static const luaL_Reg ctx_meta[] = {{"__gc", ctx_gc}, {"__eq", ctx_eq}, {"__tostring", ctx_tostring},
                                      {"__newindex", ctx_newindex}, {NULL, NULL}};
  luaL_newmetatable(L, FH_LOAD_GUARD_MT);
  lua_pushcfunction(L, guard_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  fh__lua_newclass_indexed(L, FH_CONTEXT_MT, ctx_methods, ctx_meta, ctx_index);
  {
    static const char *const fields[] = {"id", "ring_degree", "num_slots", "log_n", "max_level", "galois_generator", "key_digits", "num_key_digits", "default_scale", "num_q_primes", "num_p_primes", "modulus_bits", "security_budget_bits", "preset", NULL};
    fh__lua_setfields(L, fields);
  }
  lua_getfield(L, -1, "methods");
  lua_setfield(L, -3, "CkksContext_methods");
  lua_setfield(L, -2, "CkksContext_metatable");

  static const luaL_Reg v_methods[] = {{"to", v_to},         {"cpu", v_cpu},       {"cuda", v_cuda},
                                       {"clone", v_clone},   {"equal", v_equal},   {"metadata", v_metadata},
                                       {"tensors", v_tensors}, {NULL, NULL}};
  static const luaL_Reg v_meta[] = {{"__gc", v_gc}, {"__tostring", v_tostring}, {"__newindex", v_newindex}, {NULL, NULL}};
  fh__lua_newclass_indexed(L, FH_VALUE_MT, v_methods, v_meta, v_index);
  {
    /* __index hands out per-class closures (upvalue: the class name), so a
     * method named through a Ciphertext says "Ciphertext:to" even when it is
     * then called on something else */
    const char *classes[FH_VALUE_TYPE_COUNT + 1];
    for (int t = 0; t < FH_VALUE_TYPE_COUNT; ++t) classes[t] = fh_value_type_name((fh_value_type)t);
    classes[FH_VALUE_TYPE_COUNT] = NULL;
    fh__lua_name_methods_dynamic(v_methods, FH_VALUE_MT, "Value");
    fh__lua_name_methods_dynamic(v_meta, FH_VALUE_MT, "Value");
    lua_getfield(L, -1, "methods");
    fh__lua_push_class_methods(L, v_methods, classes);
    lua_pushcclosure(L, v_index, 2);
    lua_setfield(L, -2, "__index");
  }
  {
    static const char *const fields[] = {"type", "value_type", "level", "scale", "representation", "prime_ids", "polynomial_domain", "residue_representation", "modulus_basis", "num_components", "num_digits", "step", "context_id", "context", "data", "message", "device", "batch_shape", "schema_version", "is_secret", "nbytes", NULL};
    fh__lua_setfields(L, fields);
  }
  lua_getfield(L, -1, "methods");
  lua_setfield(L, -3, "Value_methods");
  lua_setfield(L, -2, "Value_metatable");

  fh__lua_name_closure(l_value_ctor);
  for (int t = 0; t < FH_VALUE_TYPE_COUNT; ++t) {
    lua_pushfstring(L, "fh.%s", fh_value_type_name((fh_value_type)t));
    lua_pushinteger(L, t);
    lua_pushcclosure(L, l_value_ctor, 2);
    lua_setfield(L, -2, fh_value_type_name((fh_value_type)t));
  }
  static const luaL_Reg fns[] = {{"CkksContext", l_context},
                                 {"context_lookup", l_context_lookup},
                                 {"ckks_presets", l_presets},
                                 {"ckks_security_budget_bits", l_security_budget},
                                 {"is_prime", l_is_prime},
                                 {"is_value", l_is_value},
                                 {"_ext_probe", l_ext_probe},
                                 {"envelope", l_envelope},
                                 {"from_envelope", l_from_envelope},
                                 {"save", l_save},
                                 {"load", l_load},
                                 {"serialize", l_serialize},
                                 {"deserialize", l_deserialize},
                                 {NULL, NULL}};
  fh__lua_setfuncs_named(L, fns, "fh.");
}
