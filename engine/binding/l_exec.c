/* Execution objects for Lua: ReusableValueBuffer, CopyHandle and programs
 * (CudaGraphProgram / HostGraphProgram), thin over fh/buffer.h and
 * fh/program.h. The capture orchestration (warmup, running the function,
 * error stages) lives in lua/fhelium/programs.lua; replays run here, in C,
 * because they are the hot path.
 *
 * Lua-side lifetimes (luv style). A CopyHandle of a pending CUDA copy keeps
 * the exact Lua source leaves (tensor and value userdata) in its environment
 * table, and sits in a registry table of pending handles, so the source
 * objects survive even when the caller drops the tree, empties it, drops
 * the handle and runs the GC. Completion checks (done(), synchronize(), the
 * sweep run by every copy and replay) release them. The engine handle keeps
 * its own references to the source tensors and target storages, so memory
 * safety never depends on the Lua side.
 *
 * Program userdata keep the output tree (returned as the borrowed output,
 * the same object on every replay) in their environment table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "binding.h"
#include "fh/buffer.h"
#include "fh/program.h"
#include "fh/trace.h"

#define FH_BUFFER_MT "fhelium.ReusableValueBuffer"
#define FH_HANDLE_MT "fhelium.CopyHandle"
#define FH_PROGRAM_MT "fhelium.Program"
#define PENDING_KEY "fhelium.exec.pending"
#define LEAFGUARD_MT "fhelium.exec.LeafGuard"

typedef struct buffer_box { fh_buffer *b; } buffer_box;
typedef struct handle_box { fh_copy_handle *h; } handle_box;
typedef struct program_box {
  fh_program *p;
  fh_tree_sig *out_sig; /* NULL: no output tree (nil) */
  int64_t nout;
  fh_tensor **out_leaves; /* nout references */
  int kind;               /* fh_program_kind */
} program_box;

/* ---- scratch and guards --------------------------------------------------------- */
/* Borrowed-pointer scratch for validated leaves (never holds references;
 * reused, so a Lua error cannot leak it). */
static fh_tensor **scratch(lua_State *L, int64_t n) {
  static _Thread_local fh_tensor **buf;
  static _Thread_local int64_t cap;
  if (n > cap) {
    int64_t c = cap ? cap : 16;
    while (c < n) c *= 2;
    fh_tensor **b = fh_realloc(buf, sizeof *b * (size_t)c);
    if (b == NULL) fh__lua_raise(L, FH_ERR_MEMORY, "out of memory (leaf scratch)");
    buf = b;
    cap = c;
  }
  return buf;
}

/* A userdata owning `n` tensor references until released (so a Lua error
 * between acquiring them and handing them over cannot leak them). */
typedef struct leaf_guard {
  int64_t n;
  fh_tensor *t[1];
} leaf_guard;

static int guard_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  leaf_guard *g = lua_touserdata(L, 1);
  for (int64_t i = 0; g && i < g->n; ++i)
    if (g->t[i]) fh_tensor_release(g->t[i]);
  if (g) g->n = 0;
  FH_LUA_GC_END;
  return 0;
}

static leaf_guard *push_guard(lua_State *L, int64_t n) {
  leaf_guard *g = lua_newuserdata(L, sizeof *g + sizeof(fh_tensor *) * (size_t)(n > 0 ? n : 1));
  g->n = n;
  memset(g->t, 0, sizeof(fh_tensor *) * (size_t)(n > 0 ? n : 1));
  luaL_getmetatable(L, LEAFGUARD_MT);
  lua_setmetatable(L, -2);
  return g;
}

static void guard_release(leaf_guard *g) {
  for (int64_t i = 0; i < g->n; ++i)
    if (g->t[i]) fh_tensor_release(g->t[i]);
  g->n = 0;
}

/* Push the tree of `sig` around the guard's tensors, then drop the guard's
 * references (the tree holds its own). The guard stays on the stack below. */
static void push_tree_from_guard_named(lua_State *L, const fh_tree_sig *sig, leaf_guard *g, const char *name) {
  fh__lua_tree_push_named(L, sig, g->t, name);
  guard_release(g);
}
static void push_tree_from_guard(lua_State *L, const fh_tree_sig *sig, leaf_guard *g) {
  fh__lua_tree_push(L, sig, g->t);
  guard_release(g);
}

/* ---- option helpers ------------------------------------------------------------- */
static bool opt_given(lua_State *L, int idx, const char *key) {
  if (!lua_istable(L, idx)) return false;
  lua_getfield(L, idx, key);
  bool r = !lua_isnil(L, -1);
  lua_pop(L, 1);
  return r;
}

/* wait_for: an Event, a list of Events, or nil. Returns the count; events
 * are borrowed (the options table keeps the boxes alive). */
static int opt_events(lua_State *L, int idx, const char *fn, fh_event **out, int cap) {
  if (!lua_istable(L, idx)) return 0;
  lua_getfield(L, idx, "wait_for");
  int top = lua_gettop(L), n = 0;
  if (lua_isnil(L, top)) {
    lua_pop(L, 1);
    return 0;
  }
  fh_event_box *eb = fh__lua_testudata(L, top, FH_EVENT_MT);
  if (eb != NULL) {
    out[n++] = eb->e;
  } else if (lua_istable(L, top) && fh__lua_totensor(L, top) == NULL) {
    int len = (int)lua_objlen(L, top);
    if (len > cap) fh__lua_raise(L, FH_ERR_VALUE, "%s: wait_for holds %d events (at most %d)", fn, len, cap);
    for (int i = 1; i <= len; ++i) {
      lua_rawgeti(L, top, i);
      eb = fh__lua_testudata(L, -1, FH_EVENT_MT);
      if (eb == NULL)
        fh__lua_raise(L, FH_ERR_TYPE, "%s: wait_for[%d] expected an Event, got %s", fn, i, fh__lua_typename(L, -1));
      out[n++] = eb->e;
      lua_pop(L, 1);
    }
  } else {
    fh__lua_raise(L, FH_ERR_TYPE, "%s: option 'wait_for' expected an Event or a list of Events, got %s", fn,
                  fh__lua_typename(L, top));
  }
  lua_pop(L, 1);
  return n;
}

#define MAX_WAIT 64

/* ---- pending handles (luv-style registry) ------------------------------------------ */
static void push_pending(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, PENDING_KEY);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, PENDING_KEY);
  }
}

/* Forget the Lua sources of the handle at idx (its copy completed). */
static void drop_sources(lua_State *L, int idx) {
  lua_getfenv(L, idx);
  if (lua_istable(L, -1)) {
    lua_pushnil(L);
    lua_setfield(L, -2, "sources");
  }
  lua_pop(L, 1);
  push_pending(L);
  lua_pushvalue(L, idx);
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

/* Release the sources of every pending handle whose copy has completed, and
 * finish parked programs. Never blocks; nothing happens during a capture. */
static void sweep(lua_State *L) {
  if (fh_exec_capturing()) return;
  fh_exec_sweep();
  push_pending(L);
  int t = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    handle_box *hb = lua_touserdata(L, -1);
    bool done = true;
    if (hb && hb->h && fh_copy_handle_done(hb->h, &done) != FH_OK) {
      fh_error_clear();
      done = false;
    }
    if (done) drop_sources(L, lua_gettop(L)); /* removing the current key is allowed */
  }
  lua_pop(L, 1);
}

/* Collect the Lua leaf objects (tensor and value userdata) of the validated
 * tree at idx into the table at tidx, guided by the signature. */
static void collect_leaves(lua_State *L, const fh_tree_sig *s, int idx, int tidx, int *n,
                           const fh_copy_handle *h) {
  if (s->kind == FH_TREE_TENSOR || s->kind == FH_TREE_VALUE) {
    /* only the leaves the handle holds (a pageable host leaf is staged already) */
    if (fh_copy_handle_holds_source(h, *n)) {
      lua_pushvalue(L, idx);
      lua_rawseti(L, tidx, *n + 1);
    }
    ++*n;
    return;
  }
  luaL_checkstack(L, 4, "fhelium tree");
  for (int32_t i = 0; i < s->nchildren; ++i) {
    if (s->kind == FH_TREE_DICT) {
      lua_pushlstring(L, s->keys[i], s->key_lens[i]);
      lua_rawget(L, idx);
    } else {
      lua_rawgeti(L, idx, i + 1);
    }
    collect_leaves(L, s->children[i], lua_gettop(L), tidx, n, h);
    lua_pop(L, 1);
  }
}

/* Push a CopyHandle for `h` (a new reference taken over). When its copy is
 * pending, its environment keeps the source leaves of the tree at src_idx
 * and the registry keeps the handle. */
static void push_handle(lua_State *L, fh_copy_handle *h, const fh_tree_sig *sig, int src_idx) {
  handle_box *hb = lua_newuserdata(L, sizeof *hb);
  hb->h = h;
  luaL_getmetatable(L, FH_HANDLE_MT);
  lua_setmetatable(L, -2);
  int hidx = lua_gettop(L);
  lua_createtable(L, 0, 2);
  if (!fh_copy_handle_released(h)) {
    lua_createtable(L, (int)sig->nleaves, 0);
    int n = 0;
    collect_leaves(L, sig, src_idx, lua_gettop(L), &n, h);
    lua_setfield(L, -2, "sources");
  }
  lua_setfenv(L, hidx);
  if (!fh_copy_handle_released(h)) {
    push_pending(L);
    lua_pushvalue(L, hidx);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
  }
}

/* ---- ReusableValueBuffer -------------------------------------------------------- */
static fh_buffer *checkbuffer(lua_State *L, int idx, const char *fn) {
  buffer_box *b = fh__lua_testudata(L, idx, FH_BUFFER_MT);
  if (b == NULL || b->b == NULL)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: expected a ReusableValueBuffer, got %s", fn, fh__lua_typename(L, idx));
  return b->b;
}

static fh_buffer *openbuffer(lua_State *L, int idx, const char *fn) {
  fh_buffer *b = checkbuffer(L, idx, fn);
  fh__lua_check(L, fh_buffer_check_open(b, fn));
  return b;
}

static const char *const like_opts[] = {"device", "pin_memory", NULL};

/* core.buffer_like(example, opts, root) */
static int l_buffer_like(lua_State *L) {
  const char *fn = "ex.ReusableValueBuffer.like";
  if (lua_isnoneornil(L, 1)) return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 1 (example) is missing", fn);
  fh__lua_checkopts(L, 2, fn, like_opts);
  const char *root = luaL_optstring(L, 3, "example");
  lua_settop(L, 3);
  sweep(L);
  bool has_dev = opt_given(L, 2, "device");
  fh_device dev = fh__lua_optdevice(L, 2, "device", fh_cpu(), fn);
  bool pin = fh__lua_optbool(L, 2, "pin_memory", 0, fn);
  buffer_box *bb = fh__lua_newbox(L, sizeof *bb, FH_BUFFER_MT);
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  fh_status st = fh__lua_tree_build(L, 1, root, &sig, &leaves);
  if (st == FH_OK) {
    st = fh_buffer_new(sig, leaves, has_dev ? &dev : NULL, pin, root, &bb->b);
    fh_tree_sig_release(sig);
    fh_free(leaves);
  }
  if (st != FH_OK) {
    /* type errors begin with the leaf's path; a refusal names `fn` */
    if (fh_error_status() != FH_ERR_TYPE && fh_error_status() != FH_ERR_CAPTURE) fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  return 1;
}

/* core.exec_refuse_in_capture(what, why): raise the CudaGraphCaptureError
 * of fh_exec_refuse_in_capture when a capture is active on this thread. */
static int l_exec_refuse_in_capture(lua_State *L) {
  const char *what = luaL_checkstring(L, 1);
  const char *why = luaL_optstring(L, 2, NULL);
  fh__lua_check(L, fh_exec_refuse_in_capture(what, why));
  return 0;
}

static int buf_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  buffer_box *b = fh__lua_testudata(L, 1, FH_BUFFER_MT);
  if (b && b->b) {
    fh_buffer_release(b->b);
    b->b = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}

/* Push buf.value: a new tree around the owned storages. */
static void push_buffer_value(lua_State *L, fh_buffer *b) {
  int64_t n = fh_buffer_nleaves(b);
  leaf_guard *g = push_guard(L, n);
  if (fh_buffer_leaves(b, g->t) != FH_OK) fh__lua_error_named(L, "ReusableValueBuffer.value");
  push_tree_from_guard_named(L, fh_buffer_signature(b), g, "ReusableValueBuffer.value");
  lua_remove(L, -2);
}

static int buf_index(lua_State *L) {
  const char *k = lua_tostring(L, 2);
  if (k) {
    lua_getfield(L, lua_upvalueindex(1), k);
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
  }
  fh_buffer *b = checkbuffer(L, 1, "ReusableValueBuffer.__index");
  if (k == NULL) return 0;
  if (strcmp(k, "value") == 0) {
    fh__lua_check(L, fh_buffer_check_open(b, "ReusableValueBuffer.value"));
    push_buffer_value(L, b);
    return 1;
  }
  static const char *const fields[] = {"signature", "device", "is_pinned", "nbytes", NULL};
  for (int i = 0; fields[i]; ++i)
    if (strcmp(k, fields[i]) == 0) {
      char what[64];
      snprintf(what, sizeof what, "ReusableValueBuffer.%s", k);
      fh__lua_check(L, fh_buffer_check_open(b, what));
      switch (i) {
        case 0: fh__lua_push_treesig(L, fh_buffer_signature(b)); break;
        case 1: fh__lua_push_device(L, fh_buffer_device(b)); break;
        case 2: lua_pushboolean(L, fh_buffer_is_pinned(b)); break;
        default: lua_pushnumber(L, (lua_Number)fh_buffer_nbytes(b)); break;
      }
      return 1;
    }
  return 0;
}

static int buf_newindex(lua_State *L) {
  return fh__lua_raise(L, FH_ERR_TYPE, "ReusableValueBuffer: cannot set field '%s' (buffers are read-only)",
                       lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}

static const char *const copy_opts[] = {"stream", "non_blocking", "wait_for", NULL};

static int buf_copy_from(lua_State *L) {
  const char *fn = "ReusableValueBuffer:copy_from";
  fh_buffer *b = openbuffer(L, 1, fn);
  if (lua_isnone(L, 2)) return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 1 (source) is missing", fn);
  fh__lua_checkopts(L, 3, fn, copy_opts);
  lua_settop(L, 3);
  fh_stream *stream = fh__lua_optstream(L, 3, "stream", fn);
  bool nb = fh__lua_optbool(L, 3, "non_blocking", 1, fn);
  fh_event *wait[MAX_WAIT];
  int nwait = opt_events(L, 3, fn, wait, MAX_WAIT);
  sweep(L);
  const fh_tree_sig *sig = fh_buffer_signature(b);
  fh_tensor **leaves = scratch(L, sig->nleaves);
  fh__lua_check(L, fh__lua_tree_validate(L, sig, 2, "source", FH_ERR_EXEC_INPUT, leaves));
  fh_copy_handle *h = NULL;
  fh__lua_check(L, fh_buffer_copy_from(b, leaves, stream, nb, wait, nwait, &h));
  push_handle(L, h, sig, 2);
  return 1;
}

static fh_copy_handle *checkhandle(lua_State *L, int idx, const char *fn, const char *arg) {
  handle_box *h = fh__lua_testudata(L, idx, FH_HANDLE_MT);
  if (h == NULL || h->h == NULL)
    fh__lua_raise(L, FH_ERR_TYPE, "%s: argument %s expected a CopyHandle, got %s", fn, arg, fh__lua_typename(L, idx));
  return h->h;
}

static int buf_wait_for(lua_State *L) {
  const char *fn = "ReusableValueBuffer:wait_for";
  fh_buffer *b = openbuffer(L, 1, fn);
  fh_copy_handle *h = checkhandle(L, 2, fn, "1 (handle)");
  fh_stream *s = lua_isnoneornil(L, 3) ? NULL : fh__lua_checkstream(L, 3, fn, "stream");
  fh__lua_check(L, fh_buffer_wait_for(b, h, s));
  lua_settop(L, 1);
  return 1;
}

static int buf_close(lua_State *L) {
  fh_buffer *b = checkbuffer(L, 1, "ReusableValueBuffer:close");
  fh__lua_check(L, fh_buffer_close(b));
  sweep(L);
  return 0;
}

static int buf_is_closed(lua_State *L) {
  lua_pushboolean(L, fh_buffer_is_closed(checkbuffer(L, 1, "ReusableValueBuffer:is_closed")));
  return 1;
}

/* "1.5 MiB" */
static const char *human_bytes(double n, char *buf, size_t size) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (n >= 1024 && u < 4) {
    n /= 1024;
    ++u;
  }
  if (u == 0) snprintf(buf, size, "%.0f B", n);
  else snprintf(buf, size, "%.1f %s", n, units[u]);
  return buf;
}

static int buf_tostring(lua_State *L) {
  fh_buffer *b = checkbuffer(L, 1, "ReusableValueBuffer.__tostring");
  char d[FH_DEVICE_NAME_MAX], nb[32], pend[48] = "";
  if (fh_buffer_is_closed(b)) {
    lua_pushliteral(L, "ReusableValueBuffer(closed)");
    return 1;
  }
  if (fh_buffer_device(b).type == FH_DEVICE_CUDA) {
    int n = fh_buffer_pending_copies(b);
    if (n < 0) snprintf(pend, sizeof pend, ", copies in flight: ?");
    else snprintf(pend, sizeof pend, ", %d cop%s in flight", n, n == 1 ? "y" : "ies");
  }
  lua_pushfstring(L, "ReusableValueBuffer(device=%s%s, leaves=%d, nbytes=%f (%s)%s)",
                  fh_device_name(fh_buffer_device(b), d), fh_buffer_is_pinned(b) ? ", pinned" : "",
                  (int)fh_buffer_nleaves(b), (lua_Number)fh_buffer_nbytes(b),
                  human_bytes((double)fh_buffer_nbytes(b), nb, sizeof nb), pend);
  return 1;
}

/* ---- CopyHandle ------------------------------------------------------------------ */
static int h_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  handle_box *h = fh__lua_testudata(L, 1, FH_HANDLE_MT);
  if (h && h->h) {
    fh_copy_handle_release(h->h);
    h->h = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}

static int h_done(lua_State *L) {
  fh_copy_handle *h = checkhandle(L, 1, "CopyHandle:done", "self");
  bool done = false;
  fh__lua_check(L, fh_copy_handle_done(h, &done));
  if (done) drop_sources(L, 1);
  lua_pushboolean(L, done);
  return 1;
}

static int h_wait_on(lua_State *L) {
  const char *fn = "CopyHandle:wait_on";
  fh_copy_handle *h = checkhandle(L, 1, fn, "self");
  fh_stream *s = fh__lua_checkstream(L, 2, fn, "stream");
  fh__lua_check(L, fh_copy_handle_wait_on(h, s));
  lua_settop(L, 1);
  return 1;
}

static int h_synchronize(lua_State *L) {
  fh_copy_handle *h = checkhandle(L, 1, "CopyHandle:synchronize", "self");
  fh__lua_check(L, fh_copy_handle_synchronize(h));
  drop_sources(L, 1);
  lua_settop(L, 1);
  return 1;
}

static int h_index(lua_State *L) {
  const char *k = lua_tostring(L, 2);
  if (k) {
    lua_getfield(L, lua_upvalueindex(1), k);
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
  }
  fh_copy_handle *h = checkhandle(L, 1, "CopyHandle.__index", "self");
  if (k == NULL) return 0;
  if (strcmp(k, "event") == 0) {
    fh_event *e = fh_copy_handle_event(h);
    if (e == NULL) return 0;
    lua_getfenv(L, 1);
    lua_getfield(L, -1, "event");
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      fh__lua_push_event(L, e);
      lua_pushvalue(L, -1);
      lua_setfield(L, -3, "event");
    }
    return 1;
  }
  if (strcmp(k, "device") == 0) {
    fh__lua_push_device(L, fh_copy_handle_device(h));
    return 1;
  }
  if (strcmp(k, "bytes_copied") == 0) {
    lua_pushnumber(L, (lua_Number)fh_copy_handle_bytes(h));
    return 1;
  }
  return 0;
}

static int h_tostring(lua_State *L) {
  fh_copy_handle *h = checkhandle(L, 1, "CopyHandle.__tostring", "self");
  char d[FH_DEVICE_NAME_MAX], nb[32];
  const char *state = "complete";
  fh_event *e = fh_copy_handle_event(h);
  if (!fh_copy_handle_released(h) && e != NULL) {
    bool done = false;
    if (fh_exec_capturing() || fh__cuda_any_capture()) state = "?";
    else if (fh_event_query(e, &done) != FH_OK) {
      fh_error_clear();
      state = "?";
    } else {
      state = done ? "complete" : "pending";
    }
  }
  lua_pushfstring(L, "CopyHandle(device=%s, bytes_copied=%f (%s), %s)", fh_device_name(fh_copy_handle_device(h), d),
                  (lua_Number)fh_copy_handle_bytes(h), human_bytes((double)fh_copy_handle_bytes(h), nb, sizeof nb),
                  state);
  return 1;
}

/* ---- tree helpers ------------------------------------------------------------------- */
static int l_pin_value_tree(lua_State *L) {
  const char *fn = "ex.pin_value_tree";
  if (lua_isnone(L, 1)) return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 1 (tree) is missing", fn);
  lua_settop(L, 1);
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  fh__lua_check(L, fh__lua_tree_build(L, 1, "tree", &sig, &leaves));
  /* sig and leaves into Lua-owned places before anything can raise */
  fh__lua_push_treesig(L, sig);
  fh_tree_sig_release(sig);
  int64_t n = sig->nleaves;
  fh_tensor **tmp = scratch(L, n);
  memcpy(tmp, leaves, sizeof *tmp * (size_t)n);
  fh_free(leaves);
  leaf_guard *g = push_guard(L, n);
  fh_status st = fh_leaves_clone(tmp, n, fh_cpu(), true, g->t);
  if (st != FH_OK) {
    fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  push_tree_from_guard(L, sig, g);
  return 1;
}

static const char *const tree_copy_opts[] = {"device", "pin_memory", "stream", NULL};

/* core.tree_copy_to(tree, {device=, pin_memory=, stream=}): a new tree like
 * `tree` on `device` (pinned when pin_memory), its copies enqueued on
 * `stream` (default: the current stream of the tree's CUDA device) without
 * waiting (fh_leaves_copy_to). The pipelines' read-back. */
static int l_tree_copy_to(lua_State *L) {
  const char *fn = "tree_copy_to";
  if (lua_isnone(L, 1)) return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 1 (tree) is missing", fn);
  fh__lua_checkopts(L, 2, fn, tree_copy_opts);
  lua_settop(L, 2);
  fh_device dev = fh__lua_optdevice(L, 2, "device", fh_cpu(), fn);
  bool pin = fh__lua_optbool(L, 2, "pin_memory", 0, fn);
  fh_stream *stream = fh__lua_optstream(L, 2, "stream", fn);
  sweep(L);
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  fh__lua_check(L, fh__lua_tree_build(L, 1, "tree", &sig, &leaves));
  fh__lua_push_treesig(L, sig); /* 3: keeps sig */
  fh_tree_sig_release(sig);
  int64_t n = sig->nleaves;
  fh_tensor **tmp = scratch(L, n);
  memcpy(tmp, leaves, sizeof *tmp * (size_t)n);
  fh_free(leaves);
  leaf_guard *g = push_guard(L, n);
  fh_status st = fh_leaves_copy_to(tmp, n, dev, pin, stream, g->t);
  if (st != FH_OK) fh__lua_error(L);
  push_tree_from_guard(L, sig, g);
  return 1;
}

static int l_value_tree_nbytes(lua_State *L) {
  if (lua_isnone(L, 1)) return fh__lua_raise(L, FH_ERR_TYPE, "ex.value_tree_nbytes: argument 1 (tree) is missing");
  lua_settop(L, 1);
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  fh__lua_check(L, fh__lua_tree_build(L, 1, "tree", &sig, &leaves));
  size_t n = fh_leaves_nbytes(leaves, sig->nleaves);
  fh_tree_sig_release(sig);
  fh_free(leaves);
  lua_pushnumber(L, (lua_Number)n);
  return 1;
}

/* core._exec_fail_next_launches(n): test aid (fh__program_fail_next_launches) */
static int l_fail_next_launches(lua_State *L) {
  fh__program_fail_next_launches((int)fh__lua_checkint(L, 1, "_exec_fail_next_launches", "n", 0, 1000));
  return 0;
}

static int l_clock(lua_State *L) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  lua_pushnumber(L, (lua_Number)t.tv_sec + (lua_Number)t.tv_nsec * 1e-9);
  return 1;
}

/* ---- programs -------------------------------------------------------------------------- */
/* The running program method's public name ("HostGraphProgram:replay"):
 * the class is the per-class closure's upvalue (p_index hands those out),
 * else self's class (common.c). */
static const char *pname(lua_State *L, char *buf, size_t n, const char *method) {
  if (!fh__lua_current_name(L, buf, n)) snprintf(buf, n, "CudaGraphProgram/HostGraphProgram:%s", method);
  return buf;
}

/* self of a program method named `fn` ("<Class>:<method>"). */
static program_box *checkprogbox(lua_State *L, int idx, const char *fn) {
  program_box *b = fh__lua_testudata(L, idx, FH_PROGRAM_MT);
  if (b == NULL || b->p == NULL) {
    const char *want = strncmp(fn, "CudaGraphProgram:", 17) == 0   ? "a CudaGraphProgram"
                       : strncmp(fn, "HostGraphProgram:", 17) == 0 ? "a HostGraphProgram"
                                                                   : "a CudaGraphProgram or HostGraphProgram";
    fh__lua_raise(L, FH_ERR_TYPE, "%s: self expected %s (call it with ':'), got %s", fn, want,
                  fh__lua_typename(L, idx));
  }
  return b;
}

static const char *prog_class(const program_box *b) {
  return b->kind == FH_PROGRAM_CUDA_GRAPH ? "CudaGraphProgram" : "HostGraphProgram";
}

static const char *prog_typename(lua_State *L, int idx) {
  program_box *b = fh__lua_testudata(L, idx, FH_PROGRAM_MT);
  return prog_class(b);
}

static program_box *openprog(lua_State *L, int idx, const char *fn) {
  program_box *b = checkprogbox(L, idx, fn);
  if (fh_program_is_closed(b->p)) fh__lua_check(L, fh_program_check_open(b->p, fn));
  return b;
}
#define PNAME(method) pname(L, fnbuf_, sizeof fnbuf_, method)

static void drop_output(program_box *b) {
  for (int64_t i = 0; i < b->nout; ++i) fh_tensor_release(b->out_leaves[i]);
  fh_free(b->out_leaves);
  b->out_leaves = NULL;
  b->nout = 0;
  if (b->out_sig) fh_tree_sig_release(b->out_sig);
  b->out_sig = NULL;
}

/* core.program_new(kind, buffer) */
static int l_program_new(lua_State *L) {
  const char *k = luaL_checkstring(L, 1);
  fh_program_kind kind = strcmp(k, "cuda") == 0 ? FH_PROGRAM_CUDA_GRAPH : FH_PROGRAM_HOST_GRAPH;
  fh_buffer *buf = openbuffer(L, 2, "program inputs");
  program_box *b = lua_newuserdata(L, sizeof *b);
  memset(b, 0, sizeof *b);
  b->kind = kind;
  luaL_getmetatable(L, FH_PROGRAM_MT);
  lua_setmetatable(L, -2);
  lua_createtable(L, 0, 4);
  lua_setfenv(L, -2);
  fh__lua_check(L, fh_program_new(kind, buf, &b->p));
  return 1;
}

static int p_gc(lua_State *L) {
  FH_LUA_GC_BEGIN;
  program_box *b = fh__lua_testudata(L, 1, FH_PROGRAM_MT);
  if (b && b->p) {
    drop_output(b);
    fh_program_release(b->p);
    b->p = NULL;
  }
  FH_LUA_GC_END;
  return 0;
}

/* The error LuaJIT raises when coroutine.yield runs below a C call (the
 * yield does not happen), after the caller's position; spec/program_spec.lua
 * checks that it is recognised. */
#define YIELD_ACROSS_C "attempt to yield across C-call boundary"

/* Call the function at `base` with the values above it, protected, from C:
 * a coroutine.yield inside it (or in anything it calls, other than in a
 * coroutine it resumes itself) cannot suspend the caller's coroutine, it
 * raises instead. Replaces the function and arguments by `true, results...`
 * or `false, err, yielded` (yielded: the error is that refused yield) and
 * returns how many values that is. */
static int call_unyieldable(lua_State *L, int base) {
  int nargs = lua_gettop(L) - base;
  if (lua_pcall(L, nargs, LUA_MULTRET, 0) == 0) {
    lua_pushboolean(L, 1);
    lua_insert(L, base);
    return lua_gettop(L) - base + 1;
  }
  /* the message, after the "chunk:line: " of the yield's caller */
  size_t len = 0, k = sizeof YIELD_ACROSS_C - 1;
  const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
  bool yielded = msg != NULL && len >= k && memcmp(msg + len - k, YIELD_ACROSS_C, k) == 0;
  lua_pushboolean(L, 0);
  lua_insert(L, -2);
  lua_pushboolean(L, yielded);
  return 3;
}

/* core.exec_call(fn, ...): fn(...) protected and unyieldable (the warmup
 * calls of a capture): true, results... | false, err, yielded. */
static int l_exec_call(lua_State *L) {
  if (lua_gettop(L) < 1) lua_settop(L, 1);
  return call_unyieldable(L, 1);
}

/* p:_capture_run(fn, ...): capture fn(...) on this program. Begins the
 * capture, calls fn through call_unyieldable (so fn cannot yield while the
 * capture is active: nothing outside fn is ever recorded, and no capture
 * outlives its call), and ends the capture whatever happened, keeping it
 * only when fn returned. Returns true, fn's results... or false, err,
 * yielded; raises when beginning or ending (with fn returned) fails. */
static int p_capture_run(lua_State *L) {
  char fnbuf_[96];
  program_box *b = openprog(L, 1, PNAME("_capture_run"));
  if (lua_gettop(L) < 2) lua_settop(L, 2);
  fh__lua_check(L, fh_program_capture_begin(b->p));
  int n = call_unyieldable(L, 2);
  fh__lua_check(L, fh_program_capture_end(b->p, lua_toboolean(L, 2)));
  return n;
}

static int p_instantiate(lua_State *L) {
  char fnbuf_[96];
  program_box *b = openprog(L, 1, PNAME("_instantiate"));
  fh__lua_check(L, fh_program_instantiate(b->p));
  return 0;
}

/* p:_check_output(tree_or_nil, root): the tree's signature must build and
 * every leaf must be on the program's device. Raises (TypeError, ValueError). */
static void check_output(lua_State *L, program_box *b, int idx, const char *root, fh_tree_sig **sig_out,
                         fh_tensor ***leaves_out) {
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  fh__lua_check(L, fh__lua_tree_build(L, idx, root, &sig, &leaves));
  fh_device dev = fh_program_device(b->p);
  for (int64_t i = 0; i < sig->nleaves; ++i)
    if (!fh_device_eq(fh_tensor_device(leaves[i]), dev)) {
      char a[600], d1[FH_DEVICE_NAME_MAX], d2[FH_DEVICE_NAME_MAX];
      fh_tree_sig_leaf_name(sig, i, root, a, sizeof a);
      fh_device_name(fh_tensor_device(leaves[i]), d1);
      fh_device_name(dev, d2);
      fh_tree_sig_release(sig);
      fh_free(leaves);
      fh__lua_raise(L, FH_ERR_VALUE, "%s is on %s but the program runs on %s (outputs must live on the capture device)",
                    a, d1, d2);
    }
  if (sig_out) {
    *sig_out = sig;
    *leaves_out = leaves;
  } else {
    fh_tree_sig_release(sig);
    fh_free(leaves);
  }
}

static int p_check_output(lua_State *L) {
  char fnbuf_[96];
  program_box *b = openprog(L, 1, PNAME("_check_output"));
  if (lua_isnoneornil(L, 2)) return 0;
  check_output(L, b, 2, luaL_optstring(L, 3, "output"), NULL, NULL);
  return 0;
}

/* p:_set_output(tree_or_nil): validate and keep the capture's output. */
static int p_set_output(lua_State *L) {
  char fnbuf_[96];
  program_box *b = openprog(L, 1, PNAME("_set_output"));
  lua_settop(L, 2);
  drop_output(b);
  if (!lua_isnil(L, 2)) {
    fh_tree_sig *sig = NULL;
    fh_tensor **leaves = NULL;
    check_output(L, b, 2, "output", &sig, &leaves);
    for (int64_t i = 0; i < sig->nleaves; ++i) fh_tensor_retain(leaves[i]);
    b->out_sig = sig;
    b->out_leaves = leaves;
    b->nout = sig->nleaves;
  }
  lua_getfenv(L, 1);
  lua_pushvalue(L, 2);
  lua_setfield(L, -2, "output");
  return 0;
}

/* Push the output: the borrowed tree, or with copy_output a new tree over
 * copies made on the replay stream after the launch. */
static int push_output(lua_State *L, program_box *b, bool copy) {
  if (b->out_sig == NULL) {
    lua_pushnil(L);
    return 1;
  }
  if (!copy) {
    lua_getfenv(L, 1);
    lua_getfield(L, -1, "output");
    return 1;
  }
  leaf_guard *g = push_guard(L, b->nout);
  fh_device dev = fh_program_device(b->p);
  fh_stream *s = NULL;
  if (dev.type == FH_DEVICE_CUDA) fh__lua_check(L, fh_stream_current(dev, &s));
  for (int64_t i = 0; i < b->nout; ++i) {
    fh__lua_check(L, fh_tensor_empty_like_layout(b->out_leaves[i], dev, false, &g->t[i]));
    fh__lua_check(L, fh_tensor_copy_(g->t[i], b->out_leaves[i], s, true));
  }
  /* the next replay (on any stream) overwrites the output after these reads */
  if (s != NULL) fh__lua_check(L, fh_program_note_reads(b->p, s));
  push_tree_from_guard(L, b->out_sig, g);
  return 1;
}

/* prog:_read_back(stream): a new host copy of the output tree (pinned for a CUDA program),
 * its copies enqueued on `stream` (default: the current stream) without waiting; the same
 * tree as core.tree_copy_to(prog.output, {device = "cpu", pin_memory = true, stream = s})
 * from the program's own output leaves and signature, so that nothing walks the Lua tree
 * (the pipelines' read-back). The caller orders the next replay after it (events); a
 * replay on `stream` itself is ordered here. */
/* The read-back of _read_back and _push: a guard over new host copies of the output's
 * leaves (pinned for a CUDA program), enqueued on s, pushed on the stack; NULL (nothing
 * pushed) when the program has no output. */
static leaf_guard *read_back(lua_State *L, program_box *b, fh_stream *s, const char *fn) {
  if (b->out_sig == NULL) return NULL;
  bool pin = fh_program_device(b->p).type == FH_DEVICE_CUDA;
  leaf_guard *g = push_guard(L, b->nout);
  if (fh_leaves_copy_to(b->out_leaves, b->nout, fh_cpu(), pin, s, g->t) != FH_OK) {
    fh_error_prefix("%s", fn);
    fh__lua_error(L);
  }
  return g;
}

static int p_read_back(lua_State *L) {
  char fnbuf_[96];
  const char *fn = PNAME("_read_back");
  program_box *b = openprog(L, 1, fn);
  fh_stream *s = lua_isnoneornil(L, 2) ? NULL : fh__lua_checkstream(L, 2, fn, "stream");
  sweep(L);
  leaf_guard *g = read_back(L, b, s, fn);
  if (g == NULL) {
    lua_pushnil(L);
    return 1;
  }
  if (s != NULL) fh__lua_check(L, fh_program_note_reads(b->p, s));
  push_tree_from_guard(L, b->out_sig, g);
  return 1;
}

/* prog:_push(inputs, copy_in, wait, compute, copy_out) -> output, event: a pipeline's
 * step in one call (lua/fhelium/pipeline.lua), a CUDA program's only. The inputs are
 * copied on copy_in after `wait` (an Event or nil: the slot's consumer event) and after
 * the program's previous replay, as copy_inputs_from does; the replay runs on compute
 * after that copy, as replay_prepared{copy_handle = h, stream = compute} does; the
 * output is read back on copy_out after the replay, as _read_back does (a new pinned
 * host tree; nil when the program has no output); the returned event is recorded on
 * copy_out after the read-back (the next copy into these inputs waits for it). No Lua
 * CopyHandle is made: the engine's handle holds the sources until the copy has run. */
static int p_push(lua_State *L) {
  char fnbuf_[96];
  const char *fn = PNAME("_push");
  program_box *b = openprog(L, 1, fn);
  if (lua_isnone(L, 2)) return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 1 (inputs) is missing", fn);
  lua_settop(L, 6);
  if (fh_program_device(b->p).type != FH_DEVICE_CUDA)
    return fh__lua_raise(L, FH_ERR_TYPE, "%s: expected a CudaGraphProgram (a HostGraphProgram runs on the host, in "
                                         "order: use copy_inputs_from and replay_prepared), got %s",
                         fn, fh__lua_typename(L, 1));
  fh_stream *cin = fh__lua_checkstream(L, 3, fn, "copy_in");
  fh_event *wait = lua_isnil(L, 4) ? NULL : fh__lua_checkevent(L, 4, fn, "wait");
  fh_stream *cs = fh__lua_checkstream(L, 5, fn, "compute");
  fh_stream *cout = fh__lua_checkstream(L, 6, fn, "copy_out");
  sweep(L);
  fh_buffer *in = fh_program_inputs(b->p);
  const fh_tree_sig *sig = fh_buffer_signature(in);
  fh_tensor **leaves = scratch(L, sig->nleaves);
  if (fh__lua_tree_validate(L, sig, 2, "inputs", FH_ERR_GRAPH_INPUT, leaves) != FH_OK) {
    fh_error_prefix("%s", fn); /* internal methods have no public name to prefix */
    fh__lua_error(L);
  }
  fh_copy_handle *h = NULL;
  fh__lua_check(L, fh_program_copy_inputs(b->p, leaves, cin, true, &wait, wait != NULL, &h, fn));
  fh_status st = fh_program_replay_prepared(b->p, h, cs, false, fn);
  fh_copy_handle_release(h); /* the program and the buffer keep their own references */
  fh__lua_check(L, st);
  fh__lua_check(L, fh_stream_wait_event(cout, fh_program_replay_event(b->p)));
  leaf_guard *g = read_back(L, b, cout, fn);
  fh_event *e = NULL;
  fh__lua_check(L, fh_event_new(false, &e));
  if ((st = fh_event_record(e, cout)) != FH_OK) fh_event_release(e);
  fh__lua_check(L, st);
  fh__lua_push_event(L, e);
  fh_event_release(e);
  if (g != NULL) push_tree_from_guard(L, b->out_sig, g);
  else lua_pushnil(L);
  lua_insert(L, -2); /* output, event */
  return 2;
}

static const char *const replay_opts[] = {"copy_output", "synchronize", NULL};
static const char *const prepared_opts[] = {"copy_handle", "copy_output", "synchronize", "stream", NULL};

static int p_replay(lua_State *L) {
  char fnbuf_[96];
  const char *fn = PNAME("replay");
  program_box *b = openprog(L, 1, fn);
  if (lua_isnone(L, 2)) return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 1 (inputs) is missing", fn);
  fh__lua_checkopts(L, 3, fn, replay_opts);
  lua_settop(L, 3);
  bool copy = fh__lua_optbool(L, 3, "copy_output", 0, fn);
  bool sync = fh__lua_optbool(L, 3, "synchronize", 0, fn);
  sweep(L);
  fh_buffer *in = fh_program_inputs(b->p);
  const fh_tree_sig *sig = fh_buffer_signature(in);
  fh_tensor **leaves = scratch(L, sig->nleaves);
  fh__lua_check(L, fh__lua_tree_validate(L, sig, 2, "inputs", FH_ERR_GRAPH_INPUT, leaves));
  fh__lua_check(L, fh_program_replay(b->p, leaves, false, fn));
  push_output(L, b, copy);
  if (sync) fh__lua_check(L, fh_program_synchronize(b->p));
  return 1;
}

static int p_copy_inputs_from(lua_State *L) {
  char fnbuf_[96];
  const char *fn = PNAME("copy_inputs_from");
  program_box *b = openprog(L, 1, fn);
  if (lua_isnone(L, 2)) return fh__lua_raise(L, FH_ERR_TYPE, "%s: argument 1 (inputs) is missing", fn);
  fh__lua_checkopts(L, 3, fn, copy_opts);
  lua_settop(L, 3);
  fh_stream *stream = fh__lua_optstream(L, 3, "stream", fn);
  bool nb = fh__lua_optbool(L, 3, "non_blocking", 1, fn);
  fh_event *wait[MAX_WAIT];
  int nwait = opt_events(L, 3, fn, wait, MAX_WAIT);
  sweep(L);
  fh_buffer *in = fh_program_inputs(b->p);
  const fh_tree_sig *sig = fh_buffer_signature(in);
  fh_tensor **leaves = scratch(L, sig->nleaves);
  fh__lua_check(L, fh__lua_tree_validate(L, sig, 2, "inputs", FH_ERR_GRAPH_INPUT, leaves));
  fh_copy_handle *h = NULL;
  fh__lua_check(L, fh_program_copy_inputs(b->p, leaves, stream, nb, wait, nwait, &h, fn));
  push_handle(L, h, sig, 2);
  return 1;
}

static int p_replay_prepared(lua_State *L) {
  char fnbuf_[96];
  const char *fn = PNAME("replay_prepared");
  program_box *b = openprog(L, 1, fn);
  fh__lua_checkopts(L, 2, fn, prepared_opts);
  lua_settop(L, 2);
  fh_copy_handle *h = NULL;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "copy_handle");
    if (!lua_isnil(L, -1)) {
      handle_box *hb = fh__lua_testudata(L, -1, FH_HANDLE_MT);
      if (hb == NULL || hb->h == NULL)
        return fh__lua_raise(L, FH_ERR_TYPE, "%s: option 'copy_handle' expected a CopyHandle, got %s", fn,
                             fh__lua_typename(L, -1));
      h = hb->h;
    }
    lua_pop(L, 1);
  }
  bool copy = fh__lua_optbool(L, 2, "copy_output", 0, fn);
  bool sync = fh__lua_optbool(L, 2, "synchronize", 0, fn);
  fh_stream *stream = fh__lua_optstream(L, 2, "stream", fn);
  sweep(L);
  fh__lua_check(L, fh_program_replay_prepared(b->p, h, stream, false, fn));
  push_output(L, b, copy);
  if (sync) fh__lua_check(L, fh_program_synchronize(b->p));
  return 1;
}

/* p:_launch(synchronize): the first replay, with the current inputs. */
static int p_launch(lua_State *L) {
  char fnbuf_[96];
  program_box *b = openprog(L, 1, PNAME("_launch"));
  fh__lua_check(L, fh_program_launch(b->p, lua_toboolean(L, 2)));
  return 0;
}

static int p_synchronize(lua_State *L) {
  char fnbuf_[96];
  program_box *b = openprog(L, 1, PNAME("synchronize"));
  fh__lua_check(L, fh_program_synchronize(b->p));
  return 0;
}

static int p_close(lua_State *L) {
  char fnbuf_[96];
  program_box *b = checkprogbox(L, 1, PNAME("close"));
  fh__lua_check(L, fh_program_close(b->p));
  drop_output(b);
  lua_getfenv(L, 1);
  lua_pushnil(L);
  lua_setfield(L, -2, "output");
  sweep(L);
  return 0;
}

static int p_is_closed(lua_State *L) {
  char fnbuf_[96];
  lua_pushboolean(L, fh_program_is_closed(checkprogbox(L, 1, PNAME("is_closed"))->p));
  return 1;
}

/* p:_input_value(): the input buffer's value tree (what fn is captured on). */
static int p_input_value(lua_State *L) {
  char fnbuf_[96];
  program_box *b = openprog(L, 1, PNAME("_input_value"));
  push_buffer_value(L, fh_program_inputs(b->p));
  return 1;
}

static void setnum(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

static int p_index(lua_State *L) {
  char fnbuf_[96];
  const char *k = lua_tostring(L, 2);
  program_box *self_ = fh__lua_testudata(L, 1, FH_PROGRAM_MT);
  if (k && self_ && fh__lua_class_method(L, 2, prog_class(self_))) return 1;
  if (k) {
    lua_getfield(L, lua_upvalueindex(1), k);
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
  }
  program_box *b = checkprogbox(L, 1, PNAME("__index"));
  if (k == NULL) return 0;
  if (strcmp(k, "device") == 0) {
    fh__lua_push_device(L, fh_program_device(b->p));
    return 1;
  }
  if (strcmp(k, "kind") == 0) {
    lua_pushstring(L, prog_class(b));
    return 1;
  }
  if (strcmp(k, "side_stream") == 0) {
    fh_stream *s = fh_program_side_stream(b->p);
    if (s == NULL || fh_program_is_closed(b->p)) return 0;
    fh__lua_push_stream(L, s);
    return 1;
  }
  static const char *const fields[] = {"output", "stats", "input_signature", "input_nbytes", "replay_event", NULL};
  int f = -1;
  for (int i = 0; fields[i]; ++i)
    if (strcmp(k, fields[i]) == 0) f = i;
  if (f < 0) return 0;
  char what[96];
  snprintf(what, sizeof what, "%s.%s", prog_class(b), k);
  openprog(L, 1, what);
  switch (f) {
    case 0: return push_output(L, b, false);
    case 1: {
      fh_program_stats s;
      fh_program_get_stats(b->p, &s);
      lua_createtable(L, 0, 8);
      lua_getfenv(L, 1);
      lua_getfield(L, -1, "timing");
      if (lua_istable(L, -1)) {
        int t = lua_gettop(L);
        lua_pushnil(L);
        while (lua_next(L, t)) {
          lua_pushvalue(L, -2);
          lua_insert(L, -2);
          lua_settable(L, t - 2);
        }
      }
      lua_pop(L, 2);
      setnum(L, "replays", (double)s.replays);
      setnum(L, "node_count", (double)s.node_count);
      setnum(L, "memory_allocated_bytes", (double)s.memory_allocated);
      setnum(L, "memory_reserved_bytes", (double)s.memory_reserved);
      return 1;
    }
    case 2: fh__lua_push_treesig(L, fh_buffer_signature(fh_program_inputs(b->p))); return 1;
    case 3: lua_pushnumber(L, (lua_Number)fh_buffer_nbytes(fh_program_inputs(b->p))); return 1;
    default: {
      fh_event *e = fh_program_replay_event(b->p);
      if (e == NULL) return 0;
      fh__lua_push_event(L, e);
      return 1;
    }
  }
}

static int p_newindex(lua_State *L) {
  return fh__lua_raise(L, FH_ERR_TYPE, "programs are read-only (cannot set field '%s')",
                       lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}

/* p:_set_timing(tbl): the stage timings measured by the Lua orchestration */
static int p_set_timing(lua_State *L) {
  char fnbuf_[96];
  checkprogbox(L, 1, PNAME("_set_timing"));
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_getfenv(L, 1);
  lua_pushvalue(L, 2);
  lua_setfield(L, -2, "timing");
  return 0;
}

static int p_tostring(lua_State *L) {
  char fnbuf_[96];
  program_box *b = checkprogbox(L, 1, PNAME("__tostring"));
  char d[FH_DEVICE_NAME_MAX], nb[32];
  if (fh_program_is_closed(b->p)) {
    lua_pushfstring(L, "%s(closed)", prog_class(b));
    return 1;
  }
  fh_program_stats s;
  fh_program_get_stats(b->p, &s);
  const char *state = "";
  if (b->kind == FH_PROGRAM_CUDA_GRAPH)
    state = fh_exec_capturing() || fh__cuda_any_capture() ? ", ?" : fh_program_pending(b->p) ? ", busy" : ", idle";
  lua_pushfstring(L, "%s(id=%d, device=%s, nodes=%d, replays=%d, inputs %s%s)", prog_class(b),
                  (int)fh_program_id(b->p), fh_device_name(fh_program_device(b->p), d), (int)s.node_count,
                  (int)s.replays, human_bytes((double)fh_buffer_nbytes(fh_program_inputs(b->p)), nb, sizeof nb), state);
  return 1;
}

/* ---- registration ------------------------------------------------------------------------ */
void fh__lua_open_exec(lua_State *L) {
  if (luaL_newmetatable(L, LEAFGUARD_MT)) {
    lua_pushcfunction(L, guard_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);

  static const luaL_Reg bmethods[] = {{"copy_from", buf_copy_from}, {"wait_for", buf_wait_for},
                                      {"close", buf_close},         {"is_closed", buf_is_closed},
                                      {NULL, NULL}};
  static const luaL_Reg bmeta[] = {{"__gc", buf_gc}, {"__tostring", buf_tostring}, {"__newindex", buf_newindex},
                                   {NULL, NULL}};
  fh__lua_newclass_indexed(L, FH_BUFFER_MT, bmethods, bmeta, buf_index);
  {
    static const char *const fields[] = {"value", "signature", "device", "is_pinned", "nbytes", NULL};
    fh__lua_setfields(L, fields);
  }
  lua_setfield(L, -2, "ReusableValueBuffer_metatable");

  static const luaL_Reg hmethods[] = {{"done", h_done}, {"wait_on", h_wait_on}, {"synchronize", h_synchronize},
                                      {NULL, NULL}};
  static const luaL_Reg hmeta[] = {{"__gc", h_gc}, {"__tostring", h_tostring}, {NULL, NULL}};
  fh__lua_newclass_indexed(L, FH_HANDLE_MT, hmethods, hmeta, h_index);
  {
    static const char *const fields[] = {"event", "device", "bytes_copied", NULL};
    fh__lua_setfields(L, fields);
  }
  lua_setfield(L, -2, "CopyHandle_metatable");

  static const luaL_Reg pmethods[] = {{"replay", p_replay},
                                      {"copy_inputs_from", p_copy_inputs_from},
                                      {"replay_prepared", p_replay_prepared},
                                      {"_read_back", p_read_back},
                                      {"_push", p_push},
                                      {"synchronize", p_synchronize},
                                      {"close", p_close},
                                      {"is_closed", p_is_closed},
                                      {"_capture_run", p_capture_run},
                                      {"_instantiate", p_instantiate},
                                      {"_check_output", p_check_output},
                                      {"_set_output", p_set_output},
                                      {"_launch", p_launch},
                                      {"_input_value", p_input_value},
                                      {"_set_timing", p_set_timing},
                                      {NULL, NULL}};
  static const luaL_Reg pmeta[] = {{"__gc", p_gc}, {"__tostring", p_tostring}, {"__newindex", p_newindex},
                                   {NULL, NULL}};
  fh__lua_newclass_indexed(L, FH_PROGRAM_MT, pmethods, pmeta, p_index);
  {
    /* per-class closures (upvalue: the class), so that prog.replay names
     * the program's class even when called on something else */
    static const char *const classes[] = {"CudaGraphProgram", "HostGraphProgram", NULL};
    fh__lua_name_methods_dynamic(pmethods, FH_PROGRAM_MT, "CudaGraphProgram/HostGraphProgram");
    fh__lua_name_methods_dynamic(pmeta, FH_PROGRAM_MT, "CudaGraphProgram/HostGraphProgram");
    fh__lua_set_typename(FH_PROGRAM_MT, prog_typename);
    lua_getfield(L, -1, "methods");
    fh__lua_push_class_methods(L, pmethods, classes);
    lua_pushcclosure(L, p_index, 2);
    lua_setfield(L, -2, "__index");
  }
  {
    static const char *const fields[] = {"device", "output", "stats", "input_signature", "input_nbytes", NULL};
    fh__lua_setfields(L, fields);
  }
  lua_setfield(L, -2, "Program_metatable");

  static const luaL_Reg fns[] = {{"buffer_like", l_buffer_like},
                                 {"pin_value_tree", l_pin_value_tree},
                                 {"value_tree_nbytes", l_value_tree_nbytes},
                                 {"tree_copy_to", l_tree_copy_to},
                                 {"program_new", l_program_new},
                                 {"exec_clock", l_clock},
                                 {"exec_call", l_exec_call},
                                 {"exec_refuse_in_capture", l_exec_refuse_in_capture},
                                 {"_exec_fail_next_launches", l_fail_next_launches},
                                 {NULL, NULL}};
  fh__lua_setfuncs(L, fns);
  /* program_new and exec_clock are the capture's (lua/fhelium/programs.lua),
   * which names their errors */
  fh__lua_name(l_buffer_like, "ex.ReusableValueBuffer.like");
  fh__lua_name(l_pin_value_tree, "ex.pin_value_tree");
  fh__lua_name(l_value_tree_nbytes, "ex.value_tree_nbytes");
}
