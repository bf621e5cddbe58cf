/* Trees of tensors and values, execution signatures (TensorSignature,
 * ValueSignature, ValueTreeSignature) and ex.tuple: Lua side.
 *
 * The walkers return a status instead of raising so callers can release
 * what they hold first; the tree walk itself allocates nothing during
 * validation (the path is a fixed array of segments, formatted only when a
 * mismatch is reported). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

/* ---- classification ------------------------------------------------------------ */
typedef struct walk {
  lua_State *L;
  const char *root;
  fh_path path;
  const void *seen[FH_TREE_MAX_DEPTH + 2]; /* tables on the current path (cycle check) */
} walk;

static const char *wpath(walk *w, char *buf, size_t n) { return fh_path_format(&w->path, w->root, buf, n); }

static fh_status werr(walk *w, fh_status kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static fh_status werr(walk *w, fh_status kind, const char *fmt, ...) {
  char msg[FH_ERROR_MESSAGE_MAX], p[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  wpath(w, p, sizeof p);
  fh_error_set(kind, "%s: %s", p, msg);
  fh_error_set_path(p);
  return kind;
}

/* Prefix the current engine error with the path (and record it). */
static fh_status wprefix(walk *w, fh_status st) {
  char p[600];
  wpath(w, p, sizeof p);
  fh_error_prefix("%s", p);
  fh_error_set_path(p);
  return st;
}

static bool is_tuple(lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx)) return false;
  lua_getfield(L, LUA_REGISTRYINDEX, FH_TUPLE_MT);
  bool r = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return r;
}

static const char *what_of(lua_State *L, int idx) {
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER: return "a number";
    case LUA_TSTRING: return "a string";
    case LUA_TBOOLEAN: return "a boolean";
    case LUA_TFUNCTION: return "a function";
    case LUA_TNIL: return "nil";
    case LUA_TTHREAD: return "a coroutine";
    case LUA_TLIGHTUSERDATA: return "a light userdata";
    case 10: return "a cdata"; /* LuaJIT's FFI objects */
    default: return NULL;
  }
}

typedef struct tinfo {
  int kind; /* fh_tree_kind */
  fh_tensor *t;
  fh_value *v;
  int64_t n; /* container size */
} tinfo;

/* Classify the Lua value at idx. Tables: keys exactly 1..n -> list (or
 * tuple with the tuple metatable), all strings -> dict, empty -> list. */
static fh_status classify(walk *w, int idx, tinfo *ti) {
  lua_State *L = w->L;
  memset(ti, 0, sizeof *ti);
  int type = lua_type(L, idx);
  if (type == LUA_TUSERDATA) {
    if ((ti->t = fh__lua_totensor(L, idx)) != NULL) {
      ti->kind = FH_TREE_TENSOR;
      return FH_OK;
    }
    if ((ti->v = fh__lua_tovalue(L, idx)) != NULL) {
      ti->kind = FH_TREE_VALUE;
      if (ti->v->ntensors < 1)
        return werr(w, FH_ERR_TYPE, "a %s with no tensors is not a tree leaf", fh__lua_typename(L, idx));
      return FH_OK;
    }
    if (fh__lua_tocontext(L, idx))
      return werr(w, FH_ERR_TYPE, "unsupported leaf: a CkksContext has no tensors (tree leaves are tensors and CKKS values)");
    return werr(w, FH_ERR_TYPE, "unsupported leaf: a %s userdata (tree leaves are tensors and CKKS values)",
                fh__lua_typename(L, idx));
  }
  if (type != LUA_TTABLE) {
    const char *wh = what_of(L, idx);
    return werr(w, FH_ERR_TYPE, "unsupported leaf: %s (tree leaves are tensors and CKKS values)",
                wh ? wh : fh__lua_typename(L, idx));
  }
  bool tuple = is_tuple(L, idx);
  int64_t nint = 0, nstr = 0;
  double maxk = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    int kt = lua_type(L, -1);
    if (kt == LUA_TNUMBER) {
      double k = lua_tonumber(L, -1);
      if (k != floor(k) || k < 1) {
        lua_pop(L, 1);
        return werr(w, FH_ERR_TYPE, "ambiguous table: key %.17g is neither a list index (1..n) nor a string", k);
      }
      ++nint;
      if (k > maxk) maxk = k;
    } else if (kt == LUA_TSTRING) {
      ++nstr;
    } else {
      const char *wh = what_of(L, -1);
      char tn[64];
      snprintf(tn, sizeof tn, "%s", wh ? wh : fh__lua_typename(L, -1));
      lua_pop(L, 1);
      return werr(w, FH_ERR_TYPE, "ambiguous table: a key is %s (lists use keys 1..n, dicts string keys)", tn);
    }
  }
  if (tuple && nstr) return werr(w, FH_ERR_TYPE, "a tuple holds only positional elements");
  if (nint && nstr)
    return werr(w, FH_ERR_TYPE, "ambiguous table: it mixes list indices and string keys");
  if (nint && maxk != (double)nint)
    return werr(w, FH_ERR_TYPE, "ambiguous table: its integer keys are not exactly 1..n (holes)");
  ti->kind = tuple ? FH_TREE_TUPLE : nstr ? FH_TREE_DICT : FH_TREE_LIST;
  ti->n = nint + nstr;
  return FH_OK;
}

static const char *kind_desc(const tinfo *ti, lua_State *L, int idx, char *buf, size_t n) {
  switch (ti->kind) {
    case FH_TREE_TENSOR: return "a tensor";
    case FH_TREE_VALUE: snprintf(buf, n, "a %s value", fh__lua_typename(L, idx)); return buf;
    case FH_TREE_LIST: snprintf(buf, n, "a list of length %lld", (long long)ti->n); return buf;
    case FH_TREE_TUPLE: snprintf(buf, n, "a tuple of length %lld", (long long)ti->n); return buf;
    default: snprintf(buf, n, "a dict of %lld keys", (long long)ti->n); return buf;
  }
}

static const char *sig_desc(const fh_tree_sig *s, char *buf, size_t n) {
  switch (s->kind) {
    case FH_TREE_TENSOR: return "a tensor";
    case FH_TREE_VALUE:
      snprintf(buf, n, "a %s value", fh_value_type_name((fh_value_type)s->value.state.type));
      return buf;
    case FH_TREE_LIST: snprintf(buf, n, "a list of length %d", s->nchildren); return buf;
    case FH_TREE_TUPLE: snprintf(buf, n, "a tuple of length %d", s->nchildren); return buf;
    default: snprintf(buf, n, "a dict of %d keys", s->nchildren); return buf;
  }
}

/* ---- building -------------------------------------------------------------------- */
typedef struct bld {
  walk w;
  fh_tensor **leaves;
  int64_t nleaves, cap;
  bool want_leaves;
} bld;

static fh_status add_leaf(bld *b, fh_tensor *t) {
  if (!b->want_leaves) return FH_OK;
  if (b->nleaves == b->cap) {
    int64_t cap = b->cap ? 2 * b->cap : 16;
    fh_tensor **l = fh_realloc(b->leaves, sizeof *l * (size_t)cap);
    if (l == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory walking a tree");
    b->leaves = l;
    b->cap = cap;
  }
  b->leaves[b->nleaves++] = t;
  return FH_OK;
}

typedef struct skey {
  const char *s;
  size_t n;
} skey;

static int skey_cmp(const void *pa, const void *pb) {
  const skey *a = pa, *b = pb;
  size_t n = a->n < b->n ? a->n : b->n;
  int c = memcmp(a->s, b->s, n);
  if (c) return c;
  return a->n < b->n ? -1 : a->n > b->n;
}

static fh_status build_node(bld *b, int idx, int depth, fh_tree_sig **out) {
  lua_State *L = b->w.L;
  tinfo ti;
  fh_status st = classify(&b->w, idx, &ti);
  if (st != FH_OK) return st;
  if (ti.kind == FH_TREE_TENSOR) {
    if ((st = fh_tree_sig_tensor(ti.t, out)) != FH_OK) return wprefix(&b->w, st);
    if ((st = add_leaf(b, ti.t)) != FH_OK) {
      fh_tree_sig_release(*out);
      *out = NULL; /* a failed build returns no signature (the caller may release what it got) */
      return st;
    }
    return FH_OK;
  }
  if (ti.kind == FH_TREE_VALUE) {
    if ((st = fh_tree_sig_value(ti.v, out)) != FH_OK) return wprefix(&b->w, st);
    for (int i = 0; i < ti.v->ntensors; ++i)
      if ((st = add_leaf(b, ti.v->tensors[i])) != FH_OK) {
        fh_tree_sig_release(*out);
        *out = NULL;
        return st;
      }
    return FH_OK;
  }
  /* containers */
  const void *self = lua_topointer(L, idx);
  for (int d = 0; d < b->w.path.depth; ++d)
    if (b->w.seen[d] == self) {
      fh_path p = b->w.path;
      p.depth = d;
      char first[600];
      fh_path_format(&p, b->w.root, first, sizeof first);
      return werr(&b->w, FH_ERR_TYPE, "cyclic tree: this table is also %s (one of its own ancestors)", first);
    }
  if (depth >= FH_TREE_MAX_DEPTH) return werr(&b->w, FH_ERR_VALUE, "tree nesting deeper than %d levels", FH_TREE_MAX_DEPTH);
  if (!lua_checkstack(L, 8)) return werr(&b->w, FH_ERR_MEMORY, "Lua stack exhausted");
  b->w.seen[b->w.path.depth] = self;
  int64_t n = ti.n;
  fh_tree_sig **children = fh_calloc(n ? (size_t)n : 1, sizeof *children);
  skey *keys = ti.kind == FH_TREE_DICT ? fh_calloc(n ? (size_t)n : 1, sizeof *keys) : NULL;
  const char **kp = ti.kind == FH_TREE_DICT ? fh_calloc(n ? (size_t)n : 1, sizeof *kp) : NULL;
  size_t *kl = ti.kind == FH_TREE_DICT ? fh_calloc(n ? (size_t)n : 1, sizeof *kl) : NULL;
  if (children == NULL || (ti.kind == FH_TREE_DICT && (keys == NULL || kp == NULL || kl == NULL))) {
    fh_free(children);
    fh_free(keys);
    fh_free(kp);
    fh_free(kl);
    return fh_error_set(FH_ERR_MEMORY, "out of memory walking a tree");
  }
  if (ti.kind == FH_TREE_DICT) {
    int64_t k = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      lua_pop(L, 1);
      keys[k].s = lua_tolstring(L, -1, &keys[k].n); /* pinned by the table */
      ++k;
    }
    qsort(keys, (size_t)n, sizeof *keys, skey_cmp);
  }
  int64_t done = 0;
  fh_path_seg *seg = &b->w.path.seg[b->w.path.depth];
  b->w.path.depth++;
  for (int64_t i = 0; i < n; ++i) {
    if (ti.kind == FH_TREE_DICT) {
      seg->is_key = 1;
      seg->key = keys[i].s;
      seg->key_len = keys[i].n;
      lua_pushlstring(L, keys[i].s, keys[i].n);
      lua_rawget(L, idx);
      kp[i] = keys[i].s;
      kl[i] = keys[i].n;
    } else {
      seg->is_key = 0;
      seg->index = i;
      lua_rawgeti(L, idx, (int)(i + 1));
    }
    st = build_node(b, lua_gettop(L), depth + 1, &children[i]);
    lua_pop(L, 1);
    if (st != FH_OK) break;
    done = i + 1;
  }
  b->w.path.depth--;
  if (st == FH_OK) {
    st = fh_tree_sig_container((fh_tree_kind)ti.kind, n, children, kp, kl, out);
    if (st != FH_OK) wprefix(&b->w, st);
  } else {
    for (int64_t i = 0; i < done; ++i) fh_tree_sig_release(children[i]);
  }
  fh_free(children);
  fh_free(keys);
  fh_free(kp);
  fh_free(kl);
  return st;
}

fh_status fh__lua_tree_build(lua_State *L, int idx, const char *root, fh_tree_sig **sig, fh_tensor ***leaves) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  bld b;
  memset(&b, 0, sizeof b);
  b.w.L = L;
  b.w.root = root ? root : "value";
  b.want_leaves = leaves != NULL;
  *sig = NULL;
  fh_status st = build_node(&b, idx, 0, sig);
  if (st != FH_OK) {
    fh_free(b.leaves);
    *sig = NULL;
    return st;
  }
  if (leaves) {
    if (b.leaves == NULL && (b.leaves = fh_malloc(sizeof(fh_tensor *))) == NULL) {
      fh_tree_sig_release(*sig);
      *sig = NULL;
      return fh_error_set(FH_ERR_MEMORY, "out of memory walking a tree");
    }
    *leaves = b.leaves;
  }
  return FH_OK;
}

/* ---- validation ---------------------------------------------------------------- */
typedef struct vld {
  walk w;
  fh_status kind;
  fh_tensor **leaves;
  int64_t li;
} vld;

static fh_status dict_mismatch(vld *v, const fh_tree_sig *s, int idx) {
  lua_State *L = v->w.L;
  /* first expected key that is missing */
  for (int32_t i = 0; i < s->nchildren; ++i) {
    lua_pushlstring(L, s->keys[i], s->key_lens[i]);
    lua_rawget(L, idx);
    bool missing = lua_isnil(L, -1);
    lua_pop(L, 1);
    if (missing) {
      char q[160];
      fh_json_quote(q, 0, sizeof q, s->keys[i], s->key_lens[i], 64);
      return werr(&v->w, v->kind, "dict keys mismatch: missing key %s (expected %d keys)", q, s->nchildren);
    }
  }
  /* else an unexpected one */
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    size_t n = 0;
    const char *k = lua_tolstring(L, -1, &n);
    skey probe = {k, n};
    bool found = false;
    for (int32_t i = 0; i < s->nchildren && !found; ++i) {
      skey have = {s->keys[i], s->key_lens[i]};
      found = skey_cmp(&probe, &have) == 0;
    }
    if (!found) {
      char q[160];
      fh_json_quote(q, 0, sizeof q, k, n, 64);
      lua_pop(L, 1);
      return werr(&v->w, v->kind, "dict keys mismatch: unexpected key %s (expected %d keys)", q, s->nchildren);
    }
  }
  return werr(&v->w, v->kind, "dict keys mismatch");
}

static fh_status validate_node(vld *v, const fh_tree_sig *s, int idx) {
  lua_State *L = v->w.L;
  tinfo ti;
  fh_status st = classify(&v->w, idx, &ti);
  if (st != FH_OK) return st;
  if (ti.kind != s->kind) {
    char a[96], b[96];
    return werr(&v->w, v->kind, "kind mismatch: expected %s, got %s", sig_desc(s, a, sizeof a),
                kind_desc(&ti, L, idx, b, sizeof b));
  }
  switch (s->kind) {
    case FH_TREE_TENSOR:
      if ((st = fh_tensor_sig_check(&s->tensor, ti.t, v->kind, "tensor ")) != FH_OK) return wprefix(&v->w, st);
      if (v->leaves) v->leaves[v->li] = ti.t;
      v->li++;
      return FH_OK;
    case FH_TREE_VALUE:
      if ((st = fh_value_sig_check(&s->value, ti.v, v->kind)) != FH_OK) return wprefix(&v->w, st);
      for (int i = 0; i < ti.v->ntensors; ++i) {
        if (v->leaves) v->leaves[v->li] = ti.v->tensors[i];
        v->li++;
      }
      return FH_OK;
    default: break;
  }
  if (ti.n != s->nchildren) {
    if (s->kind == FH_TREE_DICT) return dict_mismatch(v, s, idx);
    return werr(&v->w, v->kind, "length mismatch: expected a %s of length %d, got length %lld",
                fh_tree_kind_name((fh_tree_kind)s->kind), s->nchildren, (long long)ti.n);
  }
  if (!lua_checkstack(L, 8)) return werr(&v->w, FH_ERR_MEMORY, "Lua stack exhausted");
  fh_path_seg *seg = &v->w.path.seg[v->w.path.depth];
  v->w.path.depth++;
  for (int32_t i = 0; i < s->nchildren; ++i) {
    if (s->kind == FH_TREE_DICT) {
      seg->is_key = 1;
      seg->key = s->keys[i];
      seg->key_len = s->key_lens[i];
      lua_pushlstring(L, s->keys[i], s->key_lens[i]);
      lua_rawget(L, idx);
      if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        v->w.path.depth--;
        return dict_mismatch(v, s, idx);
      }
    } else {
      seg->is_key = 0;
      seg->index = i;
      lua_rawgeti(L, idx, i + 1);
    }
    st = validate_node(v, s->children[i], lua_gettop(L));
    lua_pop(L, 1);
    if (st != FH_OK) break;
  }
  v->w.path.depth--;
  return st;
}

fh_status fh__lua_tree_validate(lua_State *L, const fh_tree_sig *sig, int idx, const char *root, fh_status kind,
                                fh_tensor **leaves) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  vld v;
  v.w.L = L;
  v.w.root = root ? root : "value";
  v.w.path.depth = 0;
  v.kind = kind;
  v.leaves = leaves;
  v.li = 0;
  return validate_node(&v, sig, idx);
}

/* ---- rebuilding ----------------------------------------------------------------- */
/* the public name errors of fh__lua_tree_push_named carry (NULL: the running function's) */
static _Thread_local const char *push_name;

static void push_node(lua_State *L, const fh_tree_sig *s, fh_tensor *const *leaves, int64_t *li) {
  luaL_checkstack(L, 8, "fhelium tree");
  switch (s->kind) {
    case FH_TREE_TENSOR: {
      fh_tensor *t = leaves[(*li)++];
      fh_tensor_retain(t);
      fh__lua_push_tensor(L, t);
      return;
    }
    case FH_TREE_VALUE: {
      fh_value_box *b = fh__lua_newbox(L, sizeof *b, FH_VALUE_MT);
      if (fh_value_sig_build(&s->value, leaves + *li, &b->v) != FH_OK) {
        if (push_name != NULL) fh__lua_error_named(L, push_name);
        fh__lua_error(L);
      }
      *li += s->value.ntensors;
      return;
    }
    default: break;
  }
  lua_createtable(L, s->kind == FH_TREE_DICT ? 0 : s->nchildren, s->kind == FH_TREE_DICT ? s->nchildren : 0);
  for (int32_t i = 0; i < s->nchildren; ++i) {
    if (s->kind == FH_TREE_DICT) lua_pushlstring(L, s->keys[i], s->key_lens[i]);
    push_node(L, s->children[i], leaves, li);
    if (s->kind == FH_TREE_DICT) lua_rawset(L, -3);
    else lua_rawseti(L, -2, i + 1);
  }
  if (s->kind == FH_TREE_TUPLE) {
    lua_getfield(L, LUA_REGISTRYINDEX, FH_TUPLE_MT);
    lua_setmetatable(L, -2);
  }
}

void fh__lua_tree_push(lua_State *L, const fh_tree_sig *sig, fh_tensor *const *leaves) {
  fh__lua_tree_push_named(L, sig, leaves, NULL);
}

void fh__lua_tree_push_named(lua_State *L, const fh_tree_sig *sig, fh_tensor *const *leaves, const char *name) {
  int64_t li = 0;
  push_name = name;
  push_node(L, sig, leaves, &li); /* an error longjmps out: push_name is reset by the next push */
  push_name = NULL;
}

/* ---- signature userdata --------------------------------------------------------- */
enum { CLS_TENSOR = 0, CLS_VALUE = 1, CLS_TREE = 2 };
static const char *const cls_names[] = {"TensorSignature", "ValueSignature", "ValueTreeSignature"};

typedef struct sig_box {
  fh_tree_sig *s;
  int32_t cls;
  int32_t tindex; /* TensorSignature of a value's tensor: its index, else -1 */
} sig_box;

static const char *sig_typename(lua_State *L, int idx) {
  sig_box *b = fh__lua_testudata(L, idx, FH_SIGNATURE_MT);
  return cls_names[b->cls];
}

static sig_box *push_box(lua_State *L, fh_tree_sig *s, int cls, int tindex) {
  sig_box *b = fh__lua_newbox(L, sizeof *b, FH_SIGNATURE_MT);
  b->cls = cls;
  b->tindex = tindex;
  if (s) {
    fh_tree_sig_retain(s);
    b->s = s;
  }
  return b;
}

void fh__lua_push_treesig(lua_State *L, fh_tree_sig *s) { push_box(L, s, CLS_TREE, -1); }

static sig_box *checkbox(lua_State *L, int idx, const char *fn) {
  sig_box *b = fh__lua_testudata(L, idx, FH_SIGNATURE_MT);
  if (b == NULL || b->s == NULL)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: expected a signature, got %s", fn, fh__lua_typename(L, idx));
  return b;
}

fh_tree_sig *fh__lua_checktreesig(lua_State *L, int idx, const char *fn, const char *argname) {
  sig_box *b = fh__lua_testudata(L, idx, FH_SIGNATURE_MT);
  if (b == NULL || b->s == NULL || b->tindex >= 0)
  {
    char a[96];
    fh__lua_raise(L, FH_ERR_TYPE, "%s: %s expected a ValueTreeSignature, got %s", fn,
                  fh__lua_argdesc(a, sizeof a, fn, idx, argname), fh__lua_typename(L, idx));
  }
  return b->s;
}

static const fh_tensor_sig *box_tsig(const sig_box *b) {
  return b->tindex >= 0 ? &b->s->value.tensors[b->tindex] : &b->s->tensor;
}

static int l_tensor_signature(lua_State *L) {
  fh_tensor *t = fh__lua_checktensor(L, 1, "TensorSignature.from_tensor", "t");
  sig_box *b = push_box(L, NULL, CLS_TENSOR, -1);
  fh__lua_check(L, fh_tree_sig_tensor(t, &b->s));
  return 1;
}

static int l_value_signature(lua_State *L) {
  fh_value *v = fh__lua_tovalue(L, 1);
  if (v == NULL)
    return fh__lua_raise(L, FH_ERR_TYPE, "ValueSignature.from_value: expected a CKKS value, got %s", fh__lua_typename(L, 1));
  sig_box *b = push_box(L, NULL, CLS_VALUE, -1);
  fh__lua_check(L, fh_tree_sig_value(v, &b->s));
  return 1;
}

static int l_tree_signature(lua_State *L) {
  if (lua_isnone(L, 1)) return fh__lua_raise(L, FH_ERR_TYPE, "ValueTreeSignature.from_value: argument 1 (tree) is missing");
  sig_box *b = push_box(L, NULL, CLS_TREE, -1);
  fh__lua_check(L, fh__lua_tree_build(L, 1, "value", &b->s, NULL));
  return 1;
}

static int s_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  sig_box *b = fh__lua_testudata(L, 1, FH_SIGNATURE_MT);
  if (b && b->s) {
    fh_tree_sig_release(b->s);
    b->s = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}

static void push_key(lua_State *L, const sig_box *b) {
  if (b->cls == CLS_TENSOR && b->tindex >= 0) {
    fh_tree_sig *tmp = NULL;
    /* a value's tensor: format like a standalone tensor signature */
    fh_tensor t;
    memset(&t, 0, sizeof t);
    const fh_tensor_sig *ts = box_tsig(b);
    t.ndim = ts->ndim;
    t.dtype = ts->dtype;
    t.requires_grad = ts->requires_grad;
    memcpy(t.shape, ts->shape, sizeof t.shape);
    memcpy(t.stride, ts->stride, sizeof t.stride);
    fh__lua_check(L, fh_tree_sig_tensor(&t, &tmp));
    lua_pushlstring(L, tmp->key, tmp->key_len);
    fh_tree_sig_release(tmp);
    return;
  }
  lua_pushlstring(L, b->s->key, b->s->key_len);
}

static int s_key(lua_State *L) {
  push_key(L, checkbox(L, 1, "Signature:key"));
  return 1;
}

static int s_tostring(lua_State *L) {
  sig_box *b = checkbox(L, 1, "Signature.__tostring");
  lua_pushstring(L, cls_names[b->cls]);
  lua_pushliteral(L, "(");
  push_key(L, b);
  lua_pushliteral(L, ")");
  lua_concat(L, 4);
  return 1;
}

static int s_eq(lua_State *L) {
  sig_box *a = fh__lua_testudata(L, 1, FH_SIGNATURE_MT), *b = fh__lua_testudata(L, 2, FH_SIGNATURE_MT);
  bool eq = false;
  if (a && b && a->s && b->s && a->cls == b->cls) {
    if (a->cls == CLS_TENSOR) eq = fh_tensor_sig_equal(box_tsig(a), box_tsig(b));
    else eq = fh_tree_sig_equal(a->s, b->s);
  }
  lua_pushboolean(L, eq);
  return 1;
}

static const char *const validate_opts[] = {"path", NULL};

static const char *opt_root(lua_State *L, int idx, const char *fn) {
  fh__lua_checkopts(L, idx, fn, validate_opts);
  const char *root = "value";
  if (lua_istable(L, idx)) {
    lua_getfield(L, idx, "path");
    if (!lua_isnil(L, -1)) {
      if (lua_type(L, -1) != LUA_TSTRING)
        fh__lua_raise(L, FH_ERR_TYPE, "%s: option 'path' expected a string, got %s", fn, fh__lua_typename(L, -1));
      root = lua_tostring(L, -1); /* pinned by the options table */
    }
    lua_pop(L, 1);
  }
  return root;
}

static int s_validate(lua_State *L) {
  const char *fn = "Signature:validate";
  sig_box *b = checkbox(L, 1, fn);
  const char *root = opt_root(L, 3, fn);
  lua_settop(L, 3);
  fh_status st;
  if (b->cls == CLS_TENSOR && b->tindex >= 0) {
    /* a value's tensor signature, used standalone */
    walk w;
    memset(&w, 0, sizeof w);
    w.L = L;
    w.root = root;
    fh_tensor *t = fh__lua_totensor(L, 2);
    if (t == NULL) {
      tinfo ti;
      st = classify(&w, 2, &ti);
      if (st == FH_OK) {
        char d[96];
        st = werr(&w, FH_ERR_EXEC_INPUT, "kind mismatch: expected a tensor, got %s", kind_desc(&ti, L, 2, d, sizeof d));
      }
    } else {
      st = fh_tensor_sig_check(box_tsig(b), t, FH_ERR_EXEC_INPUT, "tensor ");
      if (st != FH_OK) wprefix(&w, st);
    }
  } else {
    st = fh__lua_tree_validate(L, b->s, 2, root, FH_ERR_EXEC_INPUT, NULL);
  }
  fh__lua_check(L, st);
  lua_pushboolean(L, 1);
  return 1;
}

/* sig:flatten(tree) -> list of the tree's leaf tensors (validated first) */
static int s_flatten(lua_State *L) {
  const char *fn = "ValueTreeSignature:flatten";
  sig_box *b = checkbox(L, 1, fn);
  if (b->tindex >= 0) return fh__lua_raise(L, FH_ERR_TYPE, "%s: not a tree signature", fn);
  const char *root = opt_root(L, 3, fn);
  lua_settop(L, 3);
  int64_t n = b->s->nleaves;
  fh_tensor **leaves = lua_newuserdata(L, sizeof(fh_tensor *) * (size_t)(n ? n : 1));
  fh__lua_check(L, fh__lua_tree_validate(L, b->s, 2, root, FH_ERR_EXEC_INPUT, leaves));
  lua_createtable(L, (int)n, 0);
  for (int64_t i = 0; i < n; ++i) {
    fh_tensor_retain(leaves[i]);
    fh__lua_push_tensor(L, leaves[i]);
    lua_rawseti(L, -2, (int)(i + 1));
  }
  return 1;
}

/* sig:unflatten(list_of_tensors) -> a new tree around those tensors */
static int s_unflatten(lua_State *L) {
  const char *fn = "ValueTreeSignature:unflatten";
  sig_box *b = checkbox(L, 1, fn);
  if (b->tindex >= 0) return fh__lua_raise(L, FH_ERR_TYPE, "%s: not a tree signature", fn);
  if (!lua_istable(L, 2)) return fh__lua_raise(L, FH_ERR_TYPE, "%s: expected a list of tensors, got %s", fn, fh__lua_typename(L, 2));
  int64_t n = b->s->nleaves;
  if ((int64_t)lua_objlen(L, 2) != n)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: expected %lld tensors, got %lld", fn, (long long)n, (long long)lua_objlen(L, 2));
  fh_tensor **leaves = lua_newuserdata(L, sizeof(fh_tensor *) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; ++i) {
    lua_rawgeti(L, 2, (int)(i + 1));
    leaves[i] = fh__lua_totensor(L, -1);
    if (leaves[i] == NULL)
      return fh__lua_raise(L, FH_ERR_TYPE, "%s: element %lld expected a Tensor, got %s", fn, (long long)i + 1,
                           fh__lua_typename(L, -1));
    lua_pop(L, 1);
  }
  /* tensor leaves must match their signatures exactly (values are checked
   * by fh_value_sig_build) */
  fh__lua_tree_push(L, b->s, leaves);
  if (b->s->nleaves > 0) {
    /* validate the rebuilt tree: catches topology differences of plain
     * tensor leaves */
    fh_status st = fh__lua_tree_validate(L, b->s, lua_gettop(L), "value", FH_ERR_VALUE, NULL);
    if (st != FH_OK) {
      fh_error_prefix("%s", fn);
      fh__lua_error(L);
    }
  }
  return 1;
}

static void push_tsig_fields(lua_State *L, const fh_tensor_sig *t, const char *k) {
  if (strcmp(k, "shape") == 0 || strcmp(k, "stride") == 0) {
    const int64_t *d = k[1] == 'h' ? t->shape : t->stride;
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; ++i) {
      lua_pushnumber(L, (lua_Number)d[i]);
      lua_rawseti(L, -2, i + 1);
    }
  } else if (strcmp(k, "dtype") == 0) lua_pushstring(L, fh_dtype_name((fh_dtype)t->dtype));
  else if (strcmp(k, "layout") == 0) lua_pushliteral(L, "strided");
  else if (strcmp(k, "requires_grad") == 0) lua_pushboolean(L, t->requires_grad);
  else lua_pushnil(L);
}

static int s_index(lua_State *L) {
  if (lua_type(L, 2) == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
  }
  sig_box *b = fh__lua_testudata(L, 1, FH_SIGNATURE_MT);
  const char *k = lua_tostring(L, 2);
  if (b == NULL || b->s == NULL || k == NULL) return 0;
  const fh_tree_sig *s = b->s;
  if (strcmp(k, "class") == 0) {
    lua_pushstring(L, cls_names[b->cls]);
    return 1;
  }
  if (b->cls == CLS_TENSOR) {
    push_tsig_fields(L, box_tsig(b), k);
    return 1;
  }
  if (b->cls == CLS_VALUE) {
    const fh_value_sig *v = &s->value;
    if (strcmp(k, "type_name") == 0) lua_pushstring(L, fh_value_type_name((fh_value_type)v->state.type));
    else if (strcmp(k, "schema_version") == 0) lua_pushinteger(L, FH_VALUE_SCHEMA_VERSION);
    else if (strcmp(k, "context_id") == 0) lua_pushstring(L, v->ctx ? v->ctx->id : "");
    else if (strcmp(k, "metadata") == 0 || strcmp(k, "metadata_keys") == 0) {
      fh_meta_entry m[FH_META_MAX];
      int n = fh_value_state_metadata(&v->state, m);
      lua_createtable(L, k[8] ? n : 0, k[8] ? 0 : n);
      for (int i = 0; i < n; ++i) {
        if (k[8]) { /* metadata_keys: sorted names */
          lua_pushstring(L, m[i].key);
          lua_rawseti(L, -2, i + 1);
          continue;
        }
        switch (m[i].kind) {
          case FH_META_INT: lua_pushnumber(L, (lua_Number)m[i].i); break;
          case FH_META_REAL: lua_pushnumber(L, m[i].r); break;
          case FH_META_STRING: lua_pushstring(L, m[i].s); break;
          default:
            lua_createtable(L, m[i].nlist, 0);
            for (int j = 0; j < m[i].nlist; ++j) {
              lua_pushinteger(L, m[i].list[j]);
              lua_rawseti(L, -2, j + 1);
            }
        }
        lua_setfield(L, -2, m[i].key);
      }
    } else if (strcmp(k, "tensors") == 0) {
      lua_createtable(L, v->ntensors, 0);
      bool slots = v->state.type == FH_PLAINTEXT && v->state.representation == FH_REPR_SLOTS;
      for (int i = 0; i < v->ntensors; ++i) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, slots ? "message" : "data");
        lua_setfield(L, -2, "name");
        push_box(L, b->s, CLS_TENSOR, i);
        lua_setfield(L, -2, "signature");
        lua_rawseti(L, -2, i + 1);
      }
    } else lua_pushnil(L);
    return 1;
  }
  /* tree */
  if (strcmp(k, "kind") == 0) lua_pushstring(L, fh_tree_kind_name((fh_tree_kind)s->kind));
  else if (strcmp(k, "leaf") == 0) {
    if (s->kind == FH_TREE_TENSOR) push_box(L, b->s, CLS_TENSOR, -1);
    else if (s->kind == FH_TREE_VALUE) push_box(L, b->s, CLS_VALUE, -1);
    else lua_pushnil(L);
  } else if (strcmp(k, "children") == 0) {
    if (s->kind == FH_TREE_TENSOR || s->kind == FH_TREE_VALUE) {
      lua_pushnil(L);
      return 1;
    }
    lua_createtable(L, s->nchildren, 0);
    for (int32_t i = 0; i < s->nchildren; ++i) {
      push_box(L, s->children[i], CLS_TREE, -1);
      lua_rawseti(L, -2, i + 1);
    }
  } else if (strcmp(k, "keys") == 0) {
    if (s->kind != FH_TREE_DICT) {
      lua_pushnil(L);
      return 1;
    }
    lua_createtable(L, s->nchildren, 0);
    for (int32_t i = 0; i < s->nchildren; ++i) {
      lua_pushlstring(L, s->keys[i], s->key_lens[i]);
      lua_rawseti(L, -2, i + 1);
    }
  } else if (strcmp(k, "nleaves") == 0) lua_pushnumber(L, (lua_Number)s->nleaves);
  else if (strcmp(k, "depth") == 0) lua_pushinteger(L, s->depth);
  else lua_pushnil(L);
  return 1;
}

/* ---- tuples ------------------------------------------------------------------------ */
static int l_tuple(lua_State *L) {
  int n = lua_gettop(L);
  for (int i = 1; i <= n; ++i)
    if (lua_isnil(L, i)) return fh__lua_raise(L, FH_ERR_VALUE, "ex.tuple: element %d is nil (tuples cannot hold nil)", i);
  lua_createtable(L, n, 0);
  for (int i = 1; i <= n; ++i) {
    lua_pushvalue(L, i);
    lua_rawseti(L, -2, i);
  }
  lua_getfield(L, LUA_REGISTRYINDEX, FH_TUPLE_MT);
  lua_setmetatable(L, -2);
  return 1;
}

static int l_is_tuple(lua_State *L) {
  lua_pushboolean(L, lua_istable(L, 1) && is_tuple(L, 1));
  return 1;
}

static int tuple_newindex(lua_State *L) {
  return fh__lua_raise(L, FH_ERR_TYPE, "tuples are immutable (cannot set element %s)",
                       lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}

void fh__lua_open_signature(lua_State *L) {
  luaL_newmetatable(L, FH_TUPLE_MT);
  lua_pushcfunction(L, tuple_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_pushliteral(L, "fhelium.Tuple");
  lua_setfield(L, -2, "__name");
  lua_setfield(L, -2, "tuple_metatable");

  static const luaL_Reg methods[] = {{"key", s_key}, {"validate", s_validate}, {"flatten", s_flatten},
                                     {"unflatten", s_unflatten}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", s_gc}, {"__eq", s_eq}, {"__tostring", s_tostring}, {NULL, NULL}};
  fh__lua_newclass_indexed(L, FH_SIGNATURE_MT, methods, meta, s_index);
  fh__lua_name_methods_dynamic(methods, FH_SIGNATURE_MT, "ValueTreeSignature");
  fh__lua_name_methods_dynamic(meta, FH_SIGNATURE_MT, "ValueTreeSignature");
  fh__lua_set_typename(FH_SIGNATURE_MT, sig_typename);
  {
    static const char *const fields[] = {"class", "kind", "leaf", "children", "keys", "nleaves", "depth", "type_name", "schema_version", "context_id", "metadata", "metadata_keys", "tensors", "shape", "stride", "dtype", "layout", "requires_grad", NULL};
    fh__lua_setfields(L, fields);
  }
  lua_setfield(L, -2, "Signature_metatable");

  static const luaL_Reg fns[] = {{"tensor_signature", l_tensor_signature},
                                 {"value_signature", l_value_signature},
                                 {"tree_signature", l_tree_signature},
                                 {"tuple", l_tuple},
                                 {"is_tuple", l_is_tuple},
                                 {NULL, NULL}};
  fh__lua_setfuncs(L, fns);
  fh__lua_name(l_tensor_signature, "ex.TensorSignature.from_tensor");
  fh__lua_name(l_value_signature, "ex.ValueSignature.from_value");
  fh__lua_name(l_tree_signature, "ex.ValueTreeSignature.from_value");
  fh__lua_name(l_tuple, "ex.tuple");
  fh__lua_name(l_is_tuple, "ex.is_tuple");
}
