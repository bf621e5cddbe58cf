/* fhelium.distributed, C side (lua/fhelium/distributed.lua is the public
 * module): the job, plans of collectives on trees, agreement, and host
 * byte transfers for serialized trees.
 *
 * A collective on a tree runs in three steps, driven from Lua so that a
 * failure of any step on any rank is raised on every rank:
 *   plan = core.dist_prepare(name, op, tree, moduli, root_or_peer)
 *          walks the tree (signature and leaves), chooses the modulus list
 *          of every leaf (ciphertexts and RNS plaintexts: their primes;
 *          tensors: the moduli option), checks everything locally
 *          (fh_dist_check) and writes the description every rank must
 *          share: the operation, its parameters, the device kind and the
 *          tree signature without strides (outputs are contiguous, so
 *          strides do not matter);
 *   err  = core.dist_agree(name, ok, plan_or_error, peer)
 *          fh_dist_agree: nil when every rank agrees, else the error object
 *          for this rank (never raised here: Lua raises it);
 *   out  = core.dist_run(plan): the collective, and the output tree. */
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "fh/dist.h"

#define FH_DIST_PLAN_MT "fhelium.DistPlan"

typedef struct plan {
  fh_tree_sig *sig;  /* the input tree (reduce_scatter: the list of chunks) */
  fh_tensor **leaves; /* n, one reference each */
  int64_t n;
  fh_dist_moduli *mods; /* one per leaf (reduce_scatter: per leaf of one chunk) */
  uint64_t *modbuf;
  int op, peer;
  char *desc;
  size_t desc_len;
} plan;

static void plan_free(plan *p) {
  if (p->leaves)
    for (int64_t i = 0; i < p->n; ++i) fh_tensor_release(p->leaves[i]);
  fh_free(p->leaves);
  fh_free(p->mods);
  fh_free(p->modbuf);
  fh_free(p->desc);
  if (p->sig) fh_tree_sig_release(p->sig);
  memset(p, 0, sizeof *p);
}

static int plan_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  plan *p = luaL_checkudata(L, 1, FH_DIST_PLAN_MT);
  plan_free(p);
  FH_LUA_GC_END;
  return 0;
}

static plan *checkplan(lua_State *L, int idx) {
  plan *p = fh__lua_testudata(L, idx, FH_DIST_PLAN_MT);
  if (p == NULL) luaL_error(L, "internal error: expected a distributed plan");
  return p;
}

/* ---- descriptions ----------------------------------------------------------------- */
typedef struct sbuf {
  char *s;
  size_t n, cap;
  bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *ns = fh_realloc(b->s, cap);
    if (ns == NULL) {
      b->oom = true;
      return;
    }
    b->s = ns;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = '\0';
}
static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }
static void sb_u64(sbuf *b, uint64_t v) {
  char t[24];
  int k = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
  sb_add(b, t, (size_t)k);
}

/* A signature key without its "stride={...}," fields. */
static void sb_key_without_strides(sbuf *b, const char *key, size_t len) {
  static const char pat[] = "stride={";
  size_t i = 0;
  while (i < len) {
    const char *hit = NULL;
    for (size_t j = i; j + sizeof pat - 1 <= len; ++j)
      if (memcmp(key + j, pat, sizeof pat - 1) == 0) {
        hit = key + j;
        break;
      }
    if (hit == NULL) {
      sb_add(b, key + i, len - i);
      return;
    }
    size_t at = (size_t)(hit - key);
    sb_add(b, key + i, at - i);
    size_t e = at + sizeof pat - 1;
    while (e < len && key[e] != '}') ++e;
    if (e < len) ++e;
    if (e < len && key[e] == ',') ++e;
    i = e;
  }
}

/* ---- moduli ----------------------------------------------------------------------- */
/* Walk sig depth-first with the leaf index: every leaf of a summable value
 * gets its primes; tensors get `tmods` (may be none). */
static fh_status assign_mods(const fh_tree_sig *s, int64_t *li, plan *p, uint64_t **buf, const uint64_t *tmods,
                             int ntmods, bool sum, const char *name) {
  switch (s->kind) {
    case FH_TREE_TENSOR:
      if (sum && ntmods > 0) {
        p->mods[*li].moduli = tmods;
        p->mods[*li].nmoduli = ntmods;
      }
      ++*li;
      return FH_OK;
    case FH_TREE_VALUE: {
      const fh_value_sig *v = &s->value;
      fh_value_type t = (fh_value_type)v->state.type;
      if (sum) {
        bool rns = t == FH_CIPHERTEXT || (t == FH_PLAINTEXT && v->state.representation == FH_REPR_RNS);
        if (!rns && t != FH_PLAINTEXT)
          return fh_error_set(FH_ERR_TYPE, "%s: a %s is not summed (sums are defined for ciphertexts, plaintexts "
                              "and tensors; move keys with broadcast, all_gather, send and recv)", name,
                              fh_value_type_name(t));
        if (rns) {
          uint64_t *m = *buf;
          for (int j = 0; j < v->state.num_prime_ids; ++j) m[j] = v->ctx->primes[v->state.prime_ids[j]];
          *buf += v->state.num_prime_ids;
          for (int k = 0; k < v->ntensors; ++k) {
            p->mods[*li + k].moduli = m;
            p->mods[*li + k].nmoduli = v->state.num_prime_ids;
          }
        }
      }
      *li += v->ntensors;
      return FH_OK;
    }
    default:
      for (int i = 0; i < s->nchildren; ++i) {
        fh_status st = assign_mods(s->children[i], li, p, buf, tmods, ntmods, sum, name);
        if (st != FH_OK) return st;
      }
      return FH_OK;
  }
}

static int64_t count_value_primes(const fh_tree_sig *s) {
  if (s->kind == FH_TREE_VALUE) return s->value.state.num_prime_ids;
  int64_t n = 0;
  for (int i = 0; i < s->nchildren; ++i) n += count_value_primes(s->children[i]);
  return n;
}

static int op_of(lua_State *L, const char *s) {
  for (int i = 0; i < FH_DIST_OP_COUNT; ++i)
    if (strcmp(s, fh_dist_op_name((fh_dist_op)i)) == 0) return i;
  return luaL_error(L, "internal error: unknown collective '%s'", s);
}

/* The moduli option (a list of integers below 2^62: numbers or uint64 cdata)
 * into a malloc'd array; 0 when absent. Raises (named) on a bad list. */
static int parse_moduli(lua_State *L, int idx, const char *name, uint64_t **out) {
  *out = NULL;
  if (lua_isnoneornil(L, idx)) return 0;
  if (!lua_istable(L, idx))
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: option moduli expected a list of integers, got %s", name,
                         fh__lua_typename(L, idx));
  int n = (int)lua_objlen(L, idx);
  if (n < 1 || n > FH_RNS_MAX_LIMBS)
    return fh__lua_raise(L, FH_ERR_VALUE, "%s: option moduli has %d entries (expected 1 .. %d, one per limb row)", name,
                         n, FH_RNS_MAX_LIMBS);
  uint64_t m[FH_RNS_MAX_LIMBS];
  for (int i = 0; i < n; ++i) {
    lua_rawgeti(L, idx, i + 1);
    fh_scalar s;
    bool ok = fh__lua_toscalar(L, -1, &s, 0) != 0;
    uint64_t v = 0;
    if (ok && s.kind == FH_SCALAR_UINT) v = s.v.u;
    else if (ok && s.kind == FH_SCALAR_INT && s.v.i >= 0) v = (uint64_t)s.v.i;
    else if (ok && s.kind == FH_SCALAR_FLOAT && s.v.f >= 0 && s.v.f < 9007199254740992.0 && s.v.f == (double)(uint64_t)s.v.f)
      v = (uint64_t)s.v.f;
    else ok = false;
    lua_pop(L, 1);
    if (!ok)
      return fh__lua_raise(L, FH_ERR_TYPE, "%s: option moduli[%d] expected a non-negative integer (a number or "
                           "uint64 cdata)", name, i + 1);
    m[i] = v;
  }
  uint64_t *a = fh_malloc(sizeof *a * (size_t)n);
  if (a == NULL) return fh__lua_raise(L, FH_ERR_MEMORY, "%s: out of memory", name);
  memcpy(a, m, sizeof *a * (size_t)n);
  *out = a;
  return n;
}

/* core.dist_prepare(name, op, tree, moduli, root_or_peer) -> plan */
static int l_dist_prepare(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  int op = op_of(L, luaL_checkstring(L, 2));
  int peer = (int)luaL_optinteger(L, 5, 0);
  plan *p = fh__lua_newbox(L, sizeof *p, FH_DIST_PLAN_MT); /* index 6 */
  p->op = op;
  p->peer = peer;
  uint64_t *tmods = NULL;
  bool sum = op == FH_DIST_ALL_REDUCE || op == FH_DIST_REDUCE_SCATTER;
  int ntmods = parse_moduli(L, 4, name, &tmods);
  fh_tensor **leaves = NULL;
  fh_status st = fh__lua_tree_build(L, 3, "tree", &p->sig, &leaves);
  if (st != FH_OK) {
    fh_free(tmods);
    return fh__lua_error_named(L, name);
  }
  p->n = p->sig->nleaves;
  p->leaves = fh_calloc((size_t)p->n + 1, sizeof *p->leaves);
  if (p->leaves == NULL) {
    fh_free(leaves);
    fh_free(tmods);
    return fh__lua_raise(L, FH_ERR_MEMORY, "%s: out of memory", name);
  }
  for (int64_t i = 0; i < p->n; ++i) {
    p->leaves[i] = leaves[i];
    fh_tensor_retain(leaves[i]);
  }
  fh_free(leaves);
  p->modbuf = tmods;
  const fh_tree_sig *unit = p->sig; /* the tree whose leaves get moduli */
  int W = fh_dist_info_get()->world_size;
  if (op == FH_DIST_REDUCE_SCATTER) {
    if (p->sig->kind != FH_TREE_LIST && p->sig->kind != FH_TREE_TUPLE)
      st = fh_error_set(FH_ERR_VALUE, "%s: argument 1 (chunks) expected a list of %d trees (one chunk per rank), got "
                        "a %s", name, W, fh_tree_kind_name((fh_tree_kind)p->sig->kind));
    else if (p->sig->nchildren != W)
      st = fh_error_set(FH_ERR_VALUE, "%s: argument 1 (chunks) has %d chunks for %d ranks (one chunk per rank)", name,
                        (int)p->sig->nchildren, W);
    else {
      unit = p->sig->children[0];
      sbuf a = {0}, b = {0};
      sb_key_without_strides(&a, unit->key, unit->key_len);
      for (int j = 1; j < W && st == FH_OK; ++j) {
        b.n = 0;
        sb_key_without_strides(&b, p->sig->children[j]->key, p->sig->children[j]->key_len);
        if (a.oom || b.oom) st = fh_error_set(FH_ERR_MEMORY, "%s: out of memory", name);
        else if (a.n != b.n || memcmp(a.s, b.s, a.n) != 0)
          st = fh_error_set(FH_ERR_VALUE, "%s: chunk %d differs from chunk 1 (every chunk has the same signature)",
                            name, j + 1);
      }
      fh_free(a.s);
      fh_free(b.s);
    }
  }
  if (st == FH_OK) {
    int64_t nunit = unit->nleaves;
    p->mods = fh_calloc((size_t)nunit + 1, sizeof *p->mods);
    /* the value primes live after the tensor moduli in one buffer */
    size_t nt = (size_t)ntmods, nv = (size_t)count_value_primes(unit);
    uint64_t *all = p->mods ? fh_realloc(p->modbuf, sizeof(uint64_t) * (nt + nv + 1)) : NULL;
    if (all == NULL) {
      st = fh_error_set(FH_ERR_MEMORY, "%s: out of memory", name);
    } else {
      p->modbuf = all;
      uint64_t *cursor = all + nt;
      int64_t li = 0;
      st = assign_mods(unit, &li, p, &cursor, all, ntmods, sum, name);
    }
  }
  if (st == FH_OK) {
    if (ntmods > 0 && !sum)
      st = fh_error_set(FH_ERR_VALUE, "%s: option moduli applies to sums (all_reduce, reduce_scatter)", name);
  }
  if (st == FH_OK)
    st = fh_dist_check(name, (fh_dist_op)op, (int)p->n, p->leaves, p->mods, peer);
  if (st != FH_OK) return fh__lua_error_named(L, name);
  /* the description every rank shares */
  sbuf d = {0};
  const fh_dist_info *info = fh_dist_info_get();
  sb_str(&d, fh_dist_op_name((fh_dist_op)op));
  if (op == FH_DIST_BROADCAST) {
    sb_str(&d, " root=");
    sb_u64(&d, (uint64_t)peer);
  } else if (op == FH_DIST_SEND || op == FH_DIST_RECV) {
    d.n = 0;
    sb_str(&d, "transfer from=");
    sb_u64(&d, (uint64_t)(op == FH_DIST_SEND ? info->rank : peer));
    sb_str(&d, " to=");
    sb_u64(&d, (uint64_t)(op == FH_DIST_SEND ? peer : info->rank));
  }
  if (ntmods > 0) {
    sb_str(&d, " moduli={");
    for (int i = 0; i < ntmods; ++i) {
      if (i) sb_str(&d, ",");
      sb_u64(&d, p->modbuf[i]);
    }
    sb_str(&d, "}");
  }
  sb_str(&d, " device=");
  sb_str(&d, p->n == 0 ? "none" : fh_device_is_cuda(fh_tensor_device(p->leaves[0])) ? "cuda" : "cpu");
  sb_str(&d, " tree=");
  sb_key_without_strides(&d, p->sig->key, p->sig->key_len);
  if (d.oom) {
    fh_free(d.s);
    return fh__lua_raise(L, FH_ERR_MEMORY, "%s: out of memory", name);
  }
  p->desc = d.s;
  p->desc_len = d.n;
  return 1;
}

/* core.dist_agree(name, ok, plan_or_error, peer) -> nil | error object for this rank */
static int l_dist_agree(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  int ok = lua_toboolean(L, 2);
  int peer = lua_isnoneornil(L, 4) ? -1 : (int)luaL_checkinteger(L, 4);
  fh_status local = FH_OK;
  const char *desc = "";
  size_t dlen = 0;
  if (ok) {
    if (lua_type(L, 3) == LUA_TSTRING) {
      desc = lua_tolstring(L, 3, &dlen);
    } else {
      plan *p = checkplan(L, 3);
      desc = p->desc ? p->desc : "";
      dlen = p->desc_len;
    }
  } else {
    /* the error object (or any value) this rank raised */
    const char *kind = NULL, *msg = NULL;
    if (lua_istable(L, 3)) {
      lua_getfield(L, 3, "kind");
      lua_getfield(L, 3, "message");
      kind = lua_tostring(L, -2);
      msg = lua_tostring(L, -1);
    }
    if (msg == NULL) msg = lua_tostring(L, 3) ? lua_tostring(L, 3) : "(a non-string error)";
    local = FH_ERR_GENERIC;
    for (int i = 1; kind && i < FH_STATUS_COUNT; ++i)
      if (strcmp(fh_status_kind((fh_status)i), kind) == 0) local = (fh_status)i;
    fh_error_set(local, "%s", msg);
  }
  fh_status st = fh_dist_agree(name, local, desc, dlen, peer);
  if (st == FH_OK) return 0;
  fh__lua_push_error(L, fh_error_status(), fh_error_message(), NULL, NULL);
  return 1;
}

/* ---- outputs ----------------------------------------------------------------------- */
/* Push a tree shaped like `s` around leaves[*li..] (taking over their
 * references one by one as they are pushed): values are rebuilt with their
 * exact state (fh_value_new: strides may differ from the input's). */
static void push_tree(lua_State *L, const fh_tree_sig *s, fh_tensor **leaves, int64_t *li, const char *name) {
  luaL_checkstack(L, 8, "fhelium tree");
  switch (s->kind) {
    case FH_TREE_TENSOR: {
      fh_tensor *t = leaves[*li];
      leaves[(*li)++] = NULL;
      fh__lua_push_tensor(L, t);
      return;
    }
    case FH_TREE_VALUE: {
      fh_value_box *b = fh__lua_newbox(L, sizeof *b, FH_VALUE_MT);
      fh_status st = fh_value_new(s->value.ctx, &s->value.state, leaves + *li, s->value.ntensors, &b->v);
      for (int k = 0; k < s->value.ntensors; ++k) {
        fh_tensor_release(leaves[*li + k]);
        leaves[*li + k] = NULL;
      }
      *li += s->value.ntensors;
      if (st != FH_OK) fh__lua_error_named(L, name);
      return;
    }
    default: break;
  }
  lua_createtable(L, s->kind == FH_TREE_DICT ? 0 : s->nchildren, s->kind == FH_TREE_DICT ? s->nchildren : 0);
  for (int32_t i = 0; i < s->nchildren; ++i) {
    if (s->kind == FH_TREE_DICT) lua_pushlstring(L, s->keys[i], s->key_lens[i]);
    push_tree(L, s->children[i], leaves, li, name);
    if (s->kind == FH_TREE_DICT) lua_rawset(L, -3);
    else lua_rawseti(L, -2, i + 1);
  }
  if (s->kind == FH_TREE_TUPLE) {
    lua_getfield(L, LUA_REGISTRYINDEX, FH_TUPLE_MT);
    lua_setmetatable(L, -2);
  }
}

/* Leaves still held (a failed push) go on release. */
typedef struct leaf_box {
  fh_tensor **t;
  int64_t n;
} leaf_box;
#define FH_DIST_LEAVES_MT "fhelium.DistLeaves"
static int leaves_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  leaf_box *b = luaL_checkudata(L, 1, FH_DIST_LEAVES_MT);
  if (b->t)
    for (int64_t i = 0; i < b->n; ++i) fh_tensor_release(b->t[i]);
  fh_free(b->t);
  b->t = NULL;
  FH_LUA_GC_END;
  return 0;
}

/* core.dist_run(name, plan) -> the output tree (nothing for send) */
static int l_dist_run(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  plan *p = checkplan(L, 2);
  int W = fh_dist_info_get()->world_size;
  const fh_tree_sig *osig = p->op == FH_DIST_REDUCE_SCATTER ? p->sig->children[0] : p->sig;
  int64_t nout = osig->nleaves;
  leaf_box *box = fh__lua_newbox(L, sizeof *box, FH_DIST_LEAVES_MT); /* index 3 */
  box->t = fh_calloc((size_t)nout + 1, sizeof *box->t);
  if (box->t == NULL) return fh__lua_raise(L, FH_ERR_MEMORY, "%s: out of memory", name);
  fh_status st;
  int n = (int)p->n;
  switch (p->op) {
    case FH_DIST_ALL_REDUCE: st = fh_dist_all_reduce(n, p->leaves, p->mods, box->t); break;
    case FH_DIST_ALL_GATHER: st = fh_dist_all_gather(n, p->leaves, box->t); break;
    case FH_DIST_BROADCAST: st = fh_dist_broadcast(n, p->leaves, p->peer, box->t); break;
    case FH_DIST_REDUCE_SCATTER: st = fh_dist_reduce_scatter((int)nout, p->leaves, p->mods, box->t); break;
    case FH_DIST_SEND: st = fh_dist_send(n, p->leaves, p->peer); nout = 0; break;
    default: st = fh_dist_recv(n, p->leaves, p->peer, box->t); break;
  }
  if (st != FH_OK) return fh__lua_error_named(L, name);
  box->n = nout;
  if (p->op == FH_DIST_SEND) return 0;
  if (p->op == FH_DIST_ALL_GATHER) {
    /* a list of W trees: rank r's leaves are the views [r] of the gathered tensors */
    lua_createtable(L, W, 0);
    /* the box owns the views until push_tree takes each one over */
    leaf_box *vb = fh__lua_newbox(L, sizeof *vb, FH_DIST_LEAVES_MT);
    vb->t = fh_calloc((size_t)nout + 1, sizeof *vb->t);
    if (vb->t == NULL) return fh__lua_raise(L, FH_ERR_MEMORY, "%s: out of memory", name);
    vb->n = nout;
    for (int r = 0; r < W; ++r) {
      for (int64_t i = 0; i < nout; ++i)
        if (fh_tensor_select(box->t[i], 0, r, &vb->t[i]) != FH_OK) return fh__lua_error_named(L, name);
      int64_t li = 0;
      push_tree(L, osig, vb->t, &li, name);
      lua_rawseti(L, -3, r + 1);
    }
    lua_pop(L, 1); /* the views box */
    return 1;
  }
  int64_t li = 0;
  push_tree(L, osig, box->t, &li, name);
  return 1;
}

/* ---- the job ------------------------------------------------------------------------- */
static int l_dist_init(lua_State *L) {
  const char *k = luaL_optstring(L, 1, "auto");
  fh_dist_kind kind;
  if (strcmp(k, "auto") == 0) kind = FH_DIST_AUTO;
  else if (strcmp(k, "cpu") == 0) kind = FH_DIST_CPU;
  else if (strcmp(k, "cuda") == 0) kind = FH_DIST_CUDA;
  else
    return fh__lua_raise(L, FH_ERR_VALUE, "fh.distributed.init: option device is '%s' (expected \"auto\", \"cpu\" or "
                         "\"cuda\")", k);
  fh__lua_check(L, fh_dist_init(kind));
  return 0;
}

static int l_dist_info(lua_State *L) {
  const fh_dist_info *i = fh_dist_info_get();
  lua_createtable(L, 0, 14);
  lua_pushboolean(L, fh_dist_initialized());
  lua_setfield(L, -2, "initialized");
  lua_pushinteger(L, i->rank);
  lua_setfield(L, -2, "rank");
  lua_pushinteger(L, i->world_size);
  lua_setfield(L, -2, "world_size");
  lua_pushinteger(L, i->local_rank);
  lua_setfield(L, -2, "local_rank");
  lua_pushinteger(L, i->local_size);
  lua_setfield(L, -2, "local_size");
  fh__lua_push_device(L, i->device);
  lua_setfield(L, -2, "device");
  lua_pushstring(L, i->kind == FH_DIST_CUDA ? "cuda" : "cpu");
  lua_setfield(L, -2, "kind");
  lua_pushboolean(L, i->launched);
  lua_setfield(L, -2, "launched");
  lua_pushstring(L, i->host);
  lua_setfield(L, -2, "host");
  lua_pushboolean(L, fh_dist_launched_env());
  lua_setfield(L, -2, "launcher");
  lua_pushboolean(L, fh_dist_built_with_mpi());
  lua_setfield(L, -2, "built_with_mpi");
  lua_pushboolean(L, fh_dist_built_with_nccl());
  lua_setfield(L, -2, "built_with_nccl");
  lua_pushstring(L, fh_dist_mpi_version());
  lua_setfield(L, -2, "mpi_version");
  lua_pushstring(L, fh_dist_nccl_version());
  lua_setfield(L, -2, "nccl_version");
  return 1;
}

static int l_dist_barrier(lua_State *L) {
  fh__lua_check(L, fh_dist_barrier());
  return 0;
}

static int l_dist_abort(lua_State *L) {
  int code = (int)luaL_optinteger(L, 1, 1);
  lua_settop(L, 0);
  fh_dist_abort(code);
  return 0;
}

/* core.dist_allgather_flag(name, n) -> {n of rank 0, ...}; with a peer:
 * core.dist_exchange_flag(name, peer, n) -> the peer's n */
static int l_dist_allgather_flag(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  int32_t v = (int32_t)luaL_checkinteger(L, 2);
  int W = fh_dist_info_get()->world_size;
  int32_t *all = fh_calloc((size_t)W + 1, sizeof *all);
  if (all == NULL) return fh__lua_raise(L, FH_ERR_MEMORY, "%s: out of memory", name);
  fh_status st = fh_dist_allgather_bytes(&v, sizeof v, all);
  if (st != FH_OK) {
    fh_free(all);
    return fh__lua_error_named(L, name);
  }
  lua_createtable(L, W, 0);
  for (int r = 0; r < W; ++r) {
    lua_pushinteger(L, all[r]);
    lua_rawseti(L, -2, r + 1);
  }
  fh_free(all);
  return 1;
}

static int l_dist_exchange_flag(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  int peer = (int)luaL_checkinteger(L, 2);
  int32_t v = (int32_t)luaL_checkinteger(L, 3), theirs = 0;
  if (fh_dist_exchange_bytes(peer, &v, sizeof v, &theirs) != FH_OK) return fh__lua_error_named(L, name);
  lua_pushinteger(L, theirs);
  return 1;
}

/* core.dist_broadcast_bytes(name, root, bytes_or_nil) -> bytes */
static int l_dist_broadcast_bytes(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  int root = (int)luaL_checkinteger(L, 2);
  size_t len = 0;
  void *data = NULL;
  bool mine = fh_dist_info_get()->rank == root;
  if (mine) data = (void *)luaL_checklstring(L, 3, &len);
  if (fh_dist_broadcast_bytes(root, &data, &len) != FH_OK) return fh__lua_error_named(L, name);
  if (mine) {
    lua_pushvalue(L, 3);
  } else {
    lua_pushlstring(L, data, len);
    fh_free(data);
  }
  return 1;
}

static int l_dist_send_bytes(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  int peer = (int)luaL_checkinteger(L, 2);
  size_t len = 0;
  const char *s = luaL_checklstring(L, 3, &len);
  if (fh_dist_send_bytes(peer, s, len) != FH_OK) return fh__lua_error_named(L, name);
  return 0;
}

static int l_dist_recv_bytes(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  int peer = (int)luaL_checkinteger(L, 2);
  void *data = NULL;
  size_t len = 0;
  if (fh_dist_recv_bytes(peer, &data, &len) != FH_OK) return fh__lua_error_named(L, name);
  lua_pushlstring(L, data, len);
  fh_free(data);
  return 1;
}

/* core._dist_force_split(on): test aid (fh__dist_force_split) */
static int l_dist_force_split(lua_State *L) {
  fh__dist_force_split(lua_toboolean(L, 1));
  return 0;
}

void fh__lua_open_dist(lua_State *L) {
  static const luaL_Reg pmeta[] = {{"__gc", plan_gc}, {NULL, NULL}};
  fh__lua_newclass(L, FH_DIST_PLAN_MT, NULL, pmeta);
  lua_pop(L, 1);
  static const luaL_Reg lmeta[] = {{"__gc", leaves_gc}, {NULL, NULL}};
  fh__lua_newclass(L, FH_DIST_LEAVES_MT, NULL, lmeta);
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {{"dist_init", l_dist_init},
                                 {"dist_info", l_dist_info},
                                 {"dist_barrier", l_dist_barrier},
                                 {"dist_abort", l_dist_abort},
                                 {"dist_prepare", l_dist_prepare},
                                 {"dist_agree", l_dist_agree},
                                 {"dist_run", l_dist_run},
                                 {"dist_allgather_flag", l_dist_allgather_flag},
                                 {"dist_exchange_flag", l_dist_exchange_flag},
                                 {"dist_broadcast_bytes", l_dist_broadcast_bytes},
                                 {"dist_send_bytes", l_dist_send_bytes},
                                 {"dist_recv_bytes", l_dist_recv_bytes},
                                 {"_dist_force_split", l_dist_force_split},
                                 {NULL, NULL}};
  fh__lua_setfuncs(L, fns);
  fh__lua_name(l_dist_init, "fh.distributed.init");
  fh__lua_name(l_dist_barrier, "fh.distributed.barrier");
  fh__lua_name(l_dist_abort, "fh.distributed.abort");
}
