/* Binding helpers: errors, type checks, options, classes. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

/* ---- errors ------------------------------------------------------------- */
static int error_tostring(lua_State *L) {
  lua_getfield(L, 1, "kind");
  lua_getfield(L, 1, "message");
  lua_pushfstring(L, "%s: %s", lua_tostring(L, -2) ? lua_tostring(L, -2) : "FHEliumError",
                  lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
  return 1;
}

void fh__lua_push_error(lua_State *L, fh_status kind, const char *message, const char *path, const char *stage) {
  lua_createtable(L, 0, 4);
  lua_pushstring(L, fh_status_kind(kind));
  lua_setfield(L, -2, "kind");
  lua_pushstring(L, message);
  lua_setfield(L, -2, "message");
  if (path && *path) {
    lua_pushstring(L, path);
    lua_setfield(L, -2, "path");
  }
  if (stage && *stage) {
    lua_pushstring(L, stage);
    lua_setfield(L, -2, "stage");
  }
  luaL_getmetatable(L, FH_ERROR_MT);
  lua_setmetatable(L, -2);
}

/* ---- public names -------------------------------------------------------
 * README "Errors": every message begins with the name of the function the
 * user called. The binding records, for every C function it exports, that
 * name (fh.zeros, fh.cuda.synchronize, Tensor:expand, CkksEngine:add,
 * ex.tuple, ...), and fh__lua_error, the one exit of every binding error,
 * names the running function: when the message does not begin with the
 * name it is prefixed, and an engine operation's own prefix ("select: ",
 * "add: ") or a stale qualified one ending in the same method is replaced,
 * so a name is never doubled. Methods of classes that share one metatable
 * (CKKS values, programs, signatures) take the class from the closure's
 * first upvalue (their __index hands out per-class closures) or from self. */
#define FH_MAX_NAMED 512
typedef struct fname_entry {
  lua_CFunction f;
  char name[80];     /* full name; for dynamic entries the method ("replay") */
  const char *mt;    /* dynamic entries: the metatable self must have */
  const char *klass; /* dynamic entries: the class when it cannot be told */
  int dynamic;
} fname_entry;
static fname_entry fnames[FH_MAX_NAMED];
static int nfnames;

static fname_entry *fname_slot(lua_CFunction f) {
  for (int i = 0; i < nfnames; ++i)
    if (fnames[i].f == f) return &fnames[i];
  if (nfnames == FH_MAX_NAMED) return NULL;
  fnames[nfnames].f = f;
  return &fnames[nfnames++];
}

void fh__lua_name(lua_CFunction f, const char *name) {
  fname_entry *e = fname_slot(f);
  if (e == NULL) return;
  snprintf(e->name, sizeof e->name, "%s", name);
  e->dynamic = 0;
}

void fh__lua_name_methods_dynamic(const luaL_Reg *l, const char *mt, const char *klass) {
  for (; l->name; ++l) {
    if (l->name[0] == '_' && l->name[1] != '_') continue;
    fname_entry *e = fname_slot(l->func);
    if (e == NULL) return;
    snprintf(e->name, sizeof e->name, "%s", l->name);
    e->mt = mt;
    e->klass = klass;
    e->dynamic = 1;
  }
}

void fh__lua_name_closure(lua_CFunction f) {
  fname_entry *e = fname_slot(f);
  if (e == NULL) return;
  e->name[0] = '\0';
  e->dynamic = 2;
}

void fh__lua_push_class_methods(lua_State *L, const luaL_Reg *methods, const char *const *classes) {
  lua_newtable(L);
  for (int c = 0; classes[c]; ++c) {
    lua_newtable(L);
    for (const luaL_Reg *r = methods; r->name; ++r) {
      lua_pushstring(L, classes[c]);
      lua_pushcclosure(L, r->func, 1);
      lua_setfield(L, -2, r->name);
    }
    lua_setfield(L, -2, classes[c]);
  }
}

int fh__lua_class_method(lua_State *L, int key, const char *klass) {
  lua_getfield(L, lua_upvalueindex(2), klass);
  if (lua_istable(L, -1)) {
    lua_pushvalue(L, key);
    lua_rawget(L, -2);
    if (!lua_isnil(L, -1)) {
      lua_remove(L, -2);
      return 1;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return 0;
}

void fh__lua_setfuncs_named(lua_State *L, const luaL_Reg *l, const char *prefix) {
  for (const luaL_Reg *r = l; r->name; ++r) {
    if (r->name[0] == '_') continue; /* internal (test aids, Lua-side helpers) */
    char n[80];
    snprintf(n, sizeof n, "%s%s", prefix, r->name);
    fh__lua_name(r->func, n);
  }
  fh__lua_setfuncs(L, l);
}

static typename_fn typename_hooks_fn[8];
static const char *typename_hooks_mt[8];
static int ntypename_hooks;

void fh__lua_set_typename(const char *mt, typename_fn fn) {
  for (int i = 0; i < ntypename_hooks; ++i)
    if (strcmp(typename_hooks_mt[i], mt) == 0) {
      typename_hooks_fn[i] = fn;
      return;
    }
  if (ntypename_hooks == 8) return;
  typename_hooks_mt[ntypename_hooks] = mt;
  typename_hooks_fn[ntypename_hooks++] = fn;
}

int fh__lua_current_name(lua_State *L, char *buf, size_t n) {
  lua_Debug ar;
  if (!lua_getstack(L, 0, &ar) || !lua_getinfo(L, "f", &ar)) return 0;
  lua_CFunction f = lua_iscfunction(L, -1) ? lua_tocfunction(L, -1) : NULL;
  const char *up = NULL;
  if (f != NULL && lua_getupvalue(L, -1, 1) != NULL) {
    up = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1); /* the string stays alive: the closure (below) holds it */
  }
  int found = 0;
  for (int i = 0; f != NULL && i < nfnames && !found; ++i) {
    const fname_entry *e = &fnames[i];
    if (e->f != f) continue;
    found = 1;
    if (!e->dynamic) {
      snprintf(buf, n, "%s", e->name);
    } else if (e->dynamic == 2) {
      found = up != NULL;
      if (found) snprintf(buf, n, "%s", up);
    } else {
      const char *klass = up;
      if (klass == NULL && lua_gettop(L) >= 2 && fh__lua_testudata(L, 1, e->mt)) klass = fh__lua_typename(L, 1);
      snprintf(buf, n, "%s%s%s", klass ? klass : e->klass, e->name[0] == '_' ? "." : ":", e->name);
    }
  }
  lua_pop(L, 1);
  return found;
}

/* `msg` named by `name`: msg itself when it begins with "<name> ", else
 * "<name>: <rest>", where rest is msg without a
 * leading "<name>: " and then without one leading token (no spaces or
 * brackets) that is the short name (the part after the last ':' or '.') or
 * a qualified name ending in ":<short>" / ".<short>". */
static void name_message(const char *msg, const char *name, char *out, size_t n) {
  size_t nl = strlen(name);
  /* a sentence that already begins with the name ("X:m cannot run inside ...") */
  if (strncmp(msg, name, nl) == 0 && msg[nl] == ' ') {
    snprintf(out, n, "%s", msg);
    return;
  }
  const char *rest = msg;
  if (strncmp(rest, name, nl) == 0 && rest[nl] == ':' && rest[nl + 1] == ' ') rest += nl + 2;
  const char *shortn = name;
  for (const char *p = name; *p; ++p)
    if (*p == ':' || *p == '.') shortn = p + 1;
  size_t sl = strlen(shortn);
  size_t tl = strspn(rest, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:");
  /* the token ends at the first ": " */
  const char *colon = strstr(rest, ": ");
  if (colon != NULL && (size_t)(colon - rest) <= tl) {
    size_t len = (size_t)(colon - rest);
    if (sl > 0 && len >= sl && strncmp(colon - sl, shortn, sl) == 0 &&
        (len == sl || colon[-(ptrdiff_t)sl - 1] == ':' || colon[-(ptrdiff_t)sl - 1] == '.'))
      rest = colon + 2;
  }
  snprintf(out, n, "%s: %s", name, rest);
}

static FH_NORETURN void raise_named(lua_State *L, const char *name) {
  fh_status st = fh_error_status();
  if (st == FH_OK) st = FH_ERR_GENERIC;
  char named[FH_ERROR_MESSAGE_MAX + 160];
  const char *msg = fh_error_message();
  if (name != NULL) {
    name_message(msg, name, named, sizeof named);
    msg = named;
  }
  fh__lua_push_error(L, st, msg, fh_error_path(), fh_error_stage());
  fh_error_clear();
  lua_error(L);
  abort(); /* not reached */
}

int fh__lua_error(lua_State *L) {
  char name[128];
  raise_named(L, fh__lua_current_name(L, name, sizeof name) ? name : NULL);
}

int fh__lua_error_named(lua_State *L, const char *name) { raise_named(L, name); }

int fh__lua_raise(lua_State *L, fh_status kind, const char *fmt, ...) {
  char buf[FH_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fh_error_set(kind, "%s", buf);
  fh__lua_error(L);
}

static int l_error_new(lua_State *L) {
  const char *kind = luaL_checkstring(L, 1);
  const char *msg = luaL_checkstring(L, 2);
  fh_status st = FH_ERR_GENERIC;
  for (int i = 1; i < FH_STATUS_COUNT; ++i)
    if (strcmp(fh_status_kind((fh_status)i), kind) == 0) st = (fh_status)i;
  if (st == FH_ERR_GENERIC && strcmp(kind, "FHEliumError") != 0)
    return fh__lua_raise(L, FH_ERR_VALUE, "unknown error kind '%s'", kind);
  const char *path = NULL, *stage = NULL;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "path");
    path = lua_tostring(L, -1);
    lua_getfield(L, 3, "stage");
    stage = lua_tostring(L, -1);
  }
  fh__lua_push_error(L, st, msg, path, stage);
  return 1;
}

static int l_error_kinds(lua_State *L) {
  lua_createtable(L, FH_STATUS_COUNT - 1, 0);
  for (int i = 1; i < FH_STATUS_COUNT; ++i) {
    lua_pushstring(L, fh_status_kind((fh_status)i));
    lua_rawseti(L, -2, i);
  }
  return 1;
}

/* core.typename(v): the name fh__lua_typename gives (for Lua-side messages). */
static int l_typename(lua_State *L) {
  luaL_checkany(L, 1);
  lua_pushstring(L, fh__lua_typename(L, 1));
  return 1;
}

void fh__lua_open_errors(lua_State *L) {
  if (luaL_newmetatable(L, FH_ERROR_MT)) {
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "fhelium.Error");
    lua_setfield(L, -2, "__name");
  }
  lua_setfield(L, -2, "error_metatable");
  static const luaL_Reg fns[] = {{"error_new", l_error_new}, {"error_kinds", l_error_kinds}, {"typename", l_typename}, {NULL, NULL}};
  fh__lua_setfuncs(L, fns);
}

/* ---- type names and userdata -------------------------------------------- */
/* The metatables of the first Lua state that asks, by address, so the hot
 * path compares pointers instead of looking names up in the registry (every
 * operator checks its operands). Other states take the registry path. */
static struct {
  const void *registry;
  const char *name[8];
  const void *mt[8];
  int n;
} mt_cache;

void *fh__lua_testudata(lua_State *L, int idx, const char *mt) {
  void *p = lua_touserdata(L, idx);
  if (p == NULL || !lua_getmetatable(L, idx)) return NULL;
  const void *have = lua_topointer(L, -1);
  const void *reg = lua_topointer(L, LUA_REGISTRYINDEX);
  if (reg == mt_cache.registry)
    for (int i = 0; i < mt_cache.n; ++i)
      if (mt_cache.name[i] == mt || strcmp(mt_cache.name[i], mt) == 0) {
        lua_pop(L, 1);
        return have == mt_cache.mt[i] ? p : NULL;
      }
  luaL_getmetatable(L, mt);
  const void *want = lua_topointer(L, -1);
  lua_pop(L, 2);
  if (want != NULL && (mt_cache.registry == NULL || mt_cache.registry == reg) && mt_cache.n < 8) {
    mt_cache.registry = reg;
    mt_cache.name[mt_cache.n] = mt;
    mt_cache.mt[mt_cache.n++] = want;
  }
  return have == want ? p : NULL;
}

const char *fh__lua_typename(lua_State *L, int idx) {
  static const char *const known[][2] = {{FH_TENSOR_MT, "Tensor"},
                                         {FH_STREAM_MT, "Stream"},
                                         {FH_EVENT_MT, "Event"},
                                         {FH_GENERATOR_MT, "Generator"},
                                         {FH_CONTEXT_MT, "CkksContext"},
                                         {FH_SIGNATURE_MT, "Signature"}};
  if (lua_type(L, idx) == LUA_TUSERDATA) {
    fh_value *v = fh__lua_tovalue(L, idx);
    if (v) return fh_value_type_name(fh_value_get_type(v));
    for (int i = 0; i < ntypename_hooks; ++i)
      if (fh__lua_testudata(L, idx, typename_hooks_mt[i])) return typename_hooks_fn[i](L, idx);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; ++i)
      if (fh__lua_testudata(L, idx, known[i][0])) return known[i][1];
    if (lua_getmetatable(L, idx)) {
      lua_getfield(L, -1, "__name");
      const char *n = lua_tostring(L, -1);
      lua_pop(L, 2); /* the name stays alive: the metatable holds it */
      if (n) return strncmp(n, "fhelium.", 8) == 0 ? n + 8 : n;
    }
  }
  if (lua_type(L, idx) == 10) return "cdata";
  return luaL_typename(L, idx);
}

const char *fh__lua_argdesc(char *buf, size_t n, const char *fn, int idx, const char *argname) {
  /* a method (Class:m) is called as obj:m(a, b): self is not counted */
  int method = fn != NULL && strchr(fn, ':') != NULL;
  if (method && idx == 1) snprintf(buf, n, "self");
  else if (argname && strcmp(argname, "self") != 0) snprintf(buf, n, "argument %d (%s)", idx - method, argname);
  else snprintf(buf, n, "argument %d", idx - method);
  return buf;
}

static FH_NORETURN void type_error(lua_State *L, int idx, const char *fn, const char *argname, const char *what) {
  char a[96];
  fh__lua_raise(L, FH_ERR_TYPE, "%s: %s expected %s, got %s", fn, fh__lua_argdesc(a, sizeof a, fn, idx, argname), what,
                fh__lua_typename(L, idx));
}

fh_tensor *fh__lua_totensor(lua_State *L, int idx) {
  fh_tensor_box *b = fh__lua_testudata(L, idx, FH_TENSOR_MT);
  return b ? b->t : NULL;
}

fh_tensor *fh__lua_checktensor(lua_State *L, int idx, const char *fn, const char *argname) {
  fh_tensor *t = fh__lua_totensor(L, idx);
  if (t == NULL) type_error(L, idx, fn, argname, "a Tensor");
  return t;
}

fh_stream *fh__lua_checkstream(lua_State *L, int idx, const char *fn, const char *argname) {
  fh_stream_box *b = fh__lua_testudata(L, idx, FH_STREAM_MT);
  if (b == NULL) type_error(L, idx, fn, argname, "a Stream");
  return b->s;
}

fh_event *fh__lua_checkevent(lua_State *L, int idx, const char *fn, const char *argname) {
  fh_event_box *b = fh__lua_testudata(L, idx, FH_EVENT_MT);
  if (b == NULL) type_error(L, idx, fn, argname, "an Event");
  return b->e;
}

/* GC pressure from memory Lua cannot see: after every 256 MiB of new
 * tensor storage, run a full collection so dropped tensors give their
 * memory back to the allocators. */
static size_t external_bytes;
#define FH_GC_SOFT_LIMIT ((size_t)256 << 20)

void fh__lua_account(lua_State *L, fh_tensor *t) {
  if (t == NULL || atomic_load(&t->storage->rc.n) != 1) return;
  external_bytes += t->storage->nbytes;
  if (external_bytes > FH_GC_SOFT_LIMIT) {
    external_bytes = 0;
    lua_gc(L, LUA_GCCOLLECT, 0);
  }
}

void *fh__lua_newbox(lua_State *L, size_t size, const char *mt) {
  void *b = lua_newuserdata(L, size);
  memset(b, 0, size);
  luaL_getmetatable(L, mt);
  lua_setmetatable(L, -2);
  return b;
}

fh_tensor_box *fh__lua_new_tensor_box(lua_State *L) { return fh__lua_newbox(L, sizeof(fh_tensor_box), FH_TENSOR_MT); }

void fh__lua_push_tensor(lua_State *L, fh_tensor *t) {
  /* the box allocation is the only failure point: on a Lua memory error
   * the caller's reference leaks (callers that can, use the box-first
   * order of fh__lua_new_tensor_box instead) */
  fh_tensor_box *b = fh__lua_new_tensor_box(L);
  b->t = t;
  fh__lua_account(L, t);
}

void fh__lua_push_stream(lua_State *L, fh_stream *s) {
  fh_stream_box *b = fh__lua_newbox(L, sizeof *b, FH_STREAM_MT);
  fh_stream_retain(s);
  b->s = s;
}

void fh__lua_push_event(lua_State *L, fh_event *e) {
  fh_event_box *b = fh__lua_newbox(L, sizeof *b, FH_EVENT_MT);
  fh_event_retain(e);
  b->e = e;
}

void fh__lua_push_device(lua_State *L, fh_device d) {
  char n[FH_DEVICE_NAME_MAX];
  lua_pushstring(L, fh_device_name(d, n));
}

/* ---- numbers and scalars ------------------------------------------------ */
int64_t fh__lua_checkint(lua_State *L, int idx, const char *fn, const char *argname, int64_t lo, int64_t hi) {
  if (lua_type(L, idx) != LUA_TNUMBER) type_error(L, idx, fn, argname, "an integer");
  double x = lua_tonumber(L, idx);
  if (x != floor(x))
    fh__lua_raise(L, FH_ERR_VALUE, "%s: %s must be an integer, got %.17g", fn, argname ? argname : "argument", x);
  if (!(x >= (double)lo && x <= (double)hi))
    fh__lua_raise(L, FH_ERR_VALUE, "%s: %s must be an integer in [%" PRId64 ", %" PRId64 "], got %.17g", fn,
                  argname ? argname : "argument", lo, hi, x);
  return (int64_t)x;
}

/* int64_t/uint64_t cdata: parse tostring(), which LuaJIT prints exactly as
 * "<digits>LL" / "<digits>ULL". */
static int cdata_scalar(lua_State *L, int idx, fh_scalar *out) {
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1; /* stays valid after the pushes */
  lua_getglobal(L, "tostring");
  lua_pushvalue(L, idx);
  lua_call(L, 1, 1);
  const char *s = lua_tostring(L, -1);
  int ok = 0;
  if (s != NULL) {
    size_t n = strlen(s);
    char *end = NULL;
    if (n > 3 && strcmp(s + n - 3, "ULL") == 0) {
      unsigned long long v = strtoull(s, &end, 10);
      if (end == s + n - 3) {
        out->kind = FH_SCALAR_UINT;
        out->v.u = v;
        ok = 1;
      }
    } else if (n > 2 && strcmp(s + n - 2, "LL") == 0) {
      long long v = strtoll(s, &end, 10);
      if (end == s + n - 2) {
        out->kind = FH_SCALAR_INT;
        out->v.i = v;
        ok = 1;
      }
    }
  }
  lua_pop(L, 1);
  return ok;
}

int fh__lua_toscalar(lua_State *L, int idx, fh_scalar *out, int allow_complex) {
  /* cdata_scalar pushes values: make a relative index absolute first */
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER: out->kind = FH_SCALAR_FLOAT; out->v.f = lua_tonumber(L, idx); return 1;
    case LUA_TBOOLEAN: out->kind = FH_SCALAR_BOOL; out->v.b = lua_toboolean(L, idx); return 1;
    case 10: return cdata_scalar(L, idx, out);
    case LUA_TTABLE:
      if (!allow_complex || lua_objlen(L, idx) != 2) return 0;
      lua_rawgeti(L, idx, 1);
      lua_rawgeti(L, idx, 2);
      if (lua_type(L, -1) != LUA_TNUMBER || lua_type(L, -2) != LUA_TNUMBER) {
        lua_pop(L, 2);
        return 0;
      }
      out->kind = FH_SCALAR_COMPLEX;
      out->v.c[0] = lua_tonumber(L, -2);
      out->v.c[1] = lua_tonumber(L, -1);
      lua_pop(L, 2);
      return 1;
    default: return 0;
  }
}

int fh__lua_checkshape(lua_State *L, int idx, int64_t *shape, const char *fn, int allow_varargs) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    if (!allow_varargs) type_error(L, idx, fn, "shape", "a table of sizes");
    int top = lua_gettop(L), n = 0;
    for (int i = idx; i <= top && lua_type(L, i) == LUA_TNUMBER; ++i) {
      if (n == FH_MAX_DIMS) fh__lua_raise(L, FH_ERR_VALUE, "%s: at most %d dimensions", fn, FH_MAX_DIMS);
      shape[n++] = fh__lua_checkint(L, i, fn, "size", -1, INT64_MAX / 2);
    }
    return n;
  }
  if (fh__lua_totensor(L, idx) == NULL && lua_istable(L, idx)) {
    int n = (int)lua_objlen(L, idx);
    if (n > FH_MAX_DIMS) fh__lua_raise(L, FH_ERR_VALUE, "%s: at most %d dimensions, got %d", fn, FH_MAX_DIMS, n);
    for (int i = 0; i < n; ++i) {
      lua_rawgeti(L, idx, i + 1);
      if (lua_type(L, -1) != LUA_TNUMBER)
        fh__lua_raise(L, FH_ERR_TYPE, "%s: shape[%d] expected an integer, got %s", fn, i + 1, luaL_typename(L, -1));
      double x = lua_tonumber(L, -1);
      if (x != floor(x) || x < -1)
        fh__lua_raise(L, FH_ERR_VALUE, "%s: shape[%d] must be a non-negative integer, got %.17g", fn, i + 1, x);
      if (x > 9.0e15)
        fh__lua_raise(L, FH_ERR_VALUE, "%s: shape[%d] = %.17g is too large (sizes must be below 9e15)", fn, i + 1, x);
      shape[i] = (int64_t)x;
      lua_pop(L, 1);
    }
    return n;
  }
  type_error(L, idx, fn, "shape", "a table of sizes");
}

/* ---- options ------------------------------------------------------------ */
void fh__lua_checkopts(lua_State *L, int idx, const char *fn, const char *const *allowed) {
  if (lua_isnoneornil(L, idx)) return;
  if (!lua_istable(L, idx) || fh__lua_totensor(L, idx)) type_error(L, idx, fn, "options", "an options table");
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    int ok = 0;
    if (lua_type(L, -1) == LUA_TSTRING) {
      const char *k = lua_tostring(L, -1);
      for (int i = 0; allowed[i]; ++i)
        if (strcmp(k, allowed[i]) == 0) ok = 1;
      if (!ok) {
        char list[512] = "";
        size_t l = 0;
        for (int i = 0; allowed[i] && l < 400; ++i)
          l += (size_t)snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", allowed[i]);
        fh__lua_raise(L, FH_ERR_VALUE, "%s: unknown option '%s' (expected %s)", fn, k, list);
      }
    } else {
      fh__lua_raise(L, FH_ERR_VALUE, "%s: option keys must be strings, got %s", fn, luaL_typename(L, -1));
    }
  }
}

int fh__lua_optbool(lua_State *L, int idx, const char *key, int def, const char *fn) {
  if (!lua_istable(L, idx)) return def;
  lua_getfield(L, idx, key);
  int r = def;
  if (lua_isboolean(L, -1)) r = lua_toboolean(L, -1);
  else if (!lua_isnil(L, -1))
    fh__lua_raise(L, FH_ERR_TYPE, "%s: option '%s' expected a boolean, got %s", fn, key, luaL_typename(L, -1));
  lua_pop(L, 1);
  return r;
}

fh_stream *fh__lua_optstream(lua_State *L, int idx, const char *key, const char *fn) {
  if (!lua_istable(L, idx)) return NULL;
  lua_getfield(L, idx, key);
  fh_stream *s = NULL;
  if (!lua_isnil(L, -1)) {
    fh_stream_box *b = fh__lua_testudata(L, -1, FH_STREAM_MT);
    if (b == NULL)
      fh__lua_raise(L, FH_ERR_TYPE, "%s: option '%s' expected a Stream, got %s", fn, key, fh__lua_typename(L, -1));
    s = b->s;
  }
  lua_pop(L, 1); /* the box stays referenced by the options table */
  return s;
}

fh_device fh__lua_checkdevice(lua_State *L, int idx, const char *fn) {
  if (lua_type(L, idx) != LUA_TSTRING) type_error(L, idx, fn, "device", "a device string");
  fh_device d = fh_cpu();
  if (fh_device_parse(lua_tostring(L, idx), &d) != FH_OK) {
    fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  return d;
}

fh_device fh__lua_optdevice(lua_State *L, int idx, const char *key, fh_device def, const char *fn) {
  if (!lua_istable(L, idx)) return def;
  lua_getfield(L, idx, key);
  fh_device d = def;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      fh__lua_raise(L, FH_ERR_TYPE, "%s: option '%s' expected a device string, got %s", fn, key, luaL_typename(L, -1));
    if (fh_device_parse(lua_tostring(L, -1), &d) != FH_OK) {
      fh_error_prefix("%s", fn);
      fh__lua_error(L);
    }
  }
  lua_pop(L, 1);
  return d;
}

fh_dtype fh__lua_optdtype(lua_State *L, int idx, const char *key, fh_dtype def, const char *fn) {
  if (!lua_istable(L, idx)) return def;
  lua_getfield(L, idx, key);
  fh_dtype d = def;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      fh__lua_raise(L, FH_ERR_TYPE, "%s: option '%s' expected a dtype name, got %s", fn, key, luaL_typename(L, -1));
    if (fh_dtype_parse(lua_tostring(L, -1), &d) != FH_OK) {
      fh_error_prefix("%s", fn);
      fh__lua_error(L);
    }
  }
  lua_pop(L, 1);
  return d;
}

/* ---- classes ------------------------------------------------------------ */
void fh__lua_setfuncs(lua_State *L, const luaL_Reg *l) {
  for (; l->name; ++l) {
    lua_pushcfunction(L, l->func);
    lua_setfield(L, -2, l->name);
  }
}

/* Names "<Class>:<method>" and "<Class>.<metamethod>" (Class: the metatable
 * name without "fhelium."); internal methods (_x) stay unnamed. */
static void name_class(const char *mt, const luaL_Reg *l, const char *sep) {
  const char *klass = strncmp(mt, "fhelium.", 8) == 0 ? mt + 8 : mt;
  for (; l && l->name; ++l) {
    if (l->name[0] == '_' && l->name[1] != '_') continue;
    char n[80];
    snprintf(n, sizeof n, "%s%s%s", klass, sep, l->name);
    fh__lua_name(l->func, n);
  }
}

void fh__lua_newclass(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta) {
  name_class(name, methods, ":");
  name_class(name, meta, ".");
  luaL_newmetatable(L, name); /* existing one when loaded twice: refill */
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__name");
  if (meta) fh__lua_setfuncs(L, meta);
  lua_getfield(L, -1, "methods");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "methods");
  }
  if (methods) fh__lua_setfuncs(L, methods);
  lua_getfield(L, -2, "__index");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_setfield(L, -2, "__index");
  } else {
    lua_pop(L, 2);
  }
}

void fh__lua_newclass_indexed(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta,
                              lua_CFunction index) {
  fh__lua_newclass(L, name, methods, meta);
  lua_getfield(L, -1, "methods");
  lua_pushcclosure(L, index, 1);
  lua_setfield(L, -2, "__index");
}

void fh__lua_setfields(lua_State *L, const char *const *names) {
  lua_newtable(L);
  for (int i = 0; names[i]; ++i) {
    lua_pushstring(L, names[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "fields");
}

/* ---- module ------------------------------------------------------------- */
static int l_info(lua_State *L) {
  lua_createtable(L, 0, 6);
  lua_pushstring(L, fh_version());
  lua_setfield(L, -2, "version");
  lua_pushboolean(L, fh_built_with_cuda());
  lua_setfield(L, -2, "built_with_cuda");
  lua_pushboolean(L, fh_cuda_is_available());
  lua_setfield(L, -2, "cuda_available");
  lua_pushstring(L, fh_cuda_unavailable_reason());
  lua_setfield(L, -2, "cuda_unavailable_reason");
  lua_pushinteger(L, fh_cuda_device_count());
  lua_setfield(L, -2, "device_count");
#ifdef FH_BUILD_TYPE
  lua_pushstring(L, FH_BUILD_TYPE);
  lua_setfield(L, -2, "build_type");
#endif
#ifdef FH_SANITIZE
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "sanitize");
#endif
  lua_pushnumber(L, (lua_Number)fh_launch_count());
  lua_setfield(L, -2, "launches");
  lua_pushboolean(L, fh_built_with_openmp());
  lua_setfield(L, -2, "openmp");
  lua_pushinteger(L, fh_num_threads());
  lua_setfield(L, -2, "num_threads");
  lua_pushstring(L, fh_cpu_simd());
  lua_setfield(L, -2, "cpu_simd");
  lua_pushnumber(L, (lua_Number)fh_cpu_allocated_bytes());
  lua_setfield(L, -2, "cpu_allocated_bytes");
  return 1;
}

/* fh.num_threads() / fh.set_num_threads(n): the CPU kernels' host threads (fh/core.h). */
static int l_num_threads(lua_State *L) {
  lua_pushinteger(L, fh_num_threads());
  return 1;
}
/* fh.cpu_simd(): the CPU kernels' vector instructions (fh/core.h); fh._set_cpu_simd(on), for
 * the specs that compare the vector kernels with the scalar ones (not API) */
static int l_cpu_simd(lua_State *L) {
  lua_pushstring(L, fh_cpu_simd());
  return 1;
}
static int l_set_cpu_simd(lua_State *L) {
  if (lua_type(L, 1) != LUA_TBOOLEAN)
    return fh__lua_raise(L, FH_ERR_TYPE, "fh._set_cpu_simd: argument 1 (on) expected a boolean, got %s",
                         fh__lua_typename(L, 1));
  fh_set_cpu_simd(lua_toboolean(L, 1));
  lua_pushstring(L, fh_cpu_simd());
  return 1;
}
static int l_set_num_threads(lua_State *L) {
  int n = (int)fh__lua_checkint(L, 1, "fh.set_num_threads", "n", 1, 4096);
  fh__lua_check(L, fh_set_num_threads(n));
  return 0;
}

#ifdef FH_FAULTS
/* Fault builds only (fh/fault.h; not API): fh._faults() -> {enabled=true, alloc=, io=,
 * alloc_at=, io_at=, alloc_injected=, io_injected=}; fh._faults_arm(site, n): count the
 * site ("alloc" or "io") from 0 again and fail its n-th call from now (0 disarms). */
static int l_faults(lua_State *L) {
  fh_fault_counts c;
  fh_fault_counts_get(&c);
  lua_createtable(L, 0, 7);
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "enabled");
  const struct {
    const char *name;
    uint64_t v;
  } f[] = {{"alloc", c.alloc}, {"io", c.io}, {"alloc_at", c.alloc_at}, {"io_at", c.io_at},
           {"alloc_injected", c.alloc_injected}, {"io_injected", c.io_injected}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; ++i) {
    lua_pushnumber(L, (lua_Number)f[i].v);
    lua_setfield(L, -2, f[i].name);
  }
  return 1;
}
static int l_faults_arm(lua_State *L) {
  const char *site = lua_tostring(L, 1);
  if (lua_type(L, 1) != LUA_TSTRING || (strcmp(site, "alloc") != 0 && strcmp(site, "io") != 0))
    return fh__lua_raise(L, FH_ERR_VALUE, "fh._faults_arm: argument 1 (site) expected \"alloc\" or \"io\", got %s",
                         lua_type(L, 1) == LUA_TSTRING ? site : fh__lua_typename(L, 1));
  int64_t n = fh__lua_checkint(L, 2, "fh._faults_arm", "n", 0, INT64_C(1) << 53);
  fh_fault_arm(strcmp(site, "alloc") == 0 ? FH_FAULT_ALLOC : FH_FAULT_IO, (uint64_t)n);
  return 0;
}
#endif

__attribute__((visibility("default"))) int luaopen_fhelium_core(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "fhelium.core.module");
  if (lua_istable(L, -1)) return 1; /* already open in this state */
  lua_pop(L, 1);
  lua_newtable(L);
  fh__lua_open_errors(L);
  fh__lua_open_tensor(L);
  fh__lua_open_cuda(L);
  fh__lua_open_values(L);
  fh__lua_open_signature(L);
  fh__lua_open_exec(L);
  fh__lua_open_ckks(L);
  fh__lua_open_dist(L);
  fh__lua_open_trace(L);
  static const luaL_Reg fns[] = {
      {"info", l_info}, {"num_threads", l_num_threads}, {"set_num_threads", l_set_num_threads},
      {"cpu_simd", l_cpu_simd},   {"_set_cpu_simd", l_set_cpu_simd}, {NULL, NULL}};
  fh__lua_setfuncs_named(L, fns, "fh.");
#ifdef FH_FAULTS
  static const luaL_Reg fault_fns[] = {{"_faults", l_faults}, {"_faults_arm", l_faults_arm}, {NULL, NULL}};
  fh__lua_setfuncs_named(L, fault_fns, "fh.");
#endif
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, "fhelium.core.module");
  return 1;
}
