/* The Lua binding (module `fhelium.core`): the only place that calls lua_*.
 * It turns engine status records into error objects, checks argument types
 * with messages that name the function and argument, and boxes engine
 * objects in userdata.
 *
 * Userdata boxes hold one reference to their engine object, taken when the
 * box is filled and dropped by __gc; a box is created before the engine
 * object it will hold, so a failed Lua allocation cannot leak one. Lua
 * errors are longjmps: binding functions release any temporary engine
 * reference before raising. */
#ifndef FH_BINDING_H
#define FH_BINDING_H

#include <lauxlib.h>
#include <lua.h>

#include "fh/launch.h"
#include "fh/runtime.h"
#include "fh/signature.h"
#include "fh/tensor.h"
#include "fh/values.h"

#define FH_TENSOR_MT "fhelium.Tensor"
#define FH_STREAM_MT "fhelium.Stream"
#define FH_EVENT_MT "fhelium.Event"
#define FH_GENERATOR_MT "fhelium.Generator"
#define FH_ERROR_MT "fhelium.Error"
#define FH_CONTEXT_MT "fhelium.CkksContext"
#define FH_VALUE_MT "fhelium.Value"
#define FH_SIGNATURE_MT "fhelium.Signature"
#define FH_TUPLE_MT "fhelium.Tuple" /* metatable of ex.tuple tables */

#if defined(__GNUC__)
#define FH_NORETURN __attribute__((noreturn))
#define FH_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FH_NORETURN
#define FH_PRINTF(a, b)
#endif

/* ---- errors ------------------------------------------------------------- */
/* Raise the calling thread's engine error (fh_error_*) as an error object. */
FH_NORETURN int fh__lua_error(lua_State *L);
/* fh__lua_error under an explicit public name (for internal functions that
 * a Lua-side method calls: CkksEngine:encode's _encode). */
FH_NORETURN int fh__lua_error_named(lua_State *L, const char *name);
/* Record and raise an error of `kind`. */
FH_NORETURN int fh__lua_raise(lua_State *L, fh_status kind, const char *fmt, ...) FH_PRINTF(3, 4);
/* Around the body of every __gc metamethod: a finalizer keeps the thread's
 * error record (it may run between a failed engine call and the raise of
 * its error, and a release may record and clear errors of its own). */
#define FH_LUA_GC_BEGIN     \
  fh_error_saved gc_err_; \
  fh_error_save(&gc_err_)
#define FH_LUA_GC_END fh_error_restore(&gc_err_)

/* `if (st) fh__lua_error(L)` */
static inline void fh__lua_check(lua_State *L, fh_status st) {
  if (st != FH_OK) fh__lua_error(L);
}
/* Push a new error object (kind, message, path, stage). */
void fh__lua_push_error(lua_State *L, fh_status kind, const char *message, const char *path, const char *stage);
/* "argument <n> (<argname>)" for the stack index idx of a call of `fn`,
 * counting as the user writes the call: for a method ("Class:m") self is
 * not counted, and idx 1 is "self". */
const char *fh__lua_argdesc(char *buf, size_t n, const char *fn, int idx, const char *argname);
/* Name of a Lua value's type for messages ("Tensor", "Ciphertext",
 * "HostGraphProgram", "number", ...). */
const char *fh__lua_typename(lua_State *L, int idx);
/* Classes whose type name depends on the object (one metatable for several
 * classes): fn(L, idx) names the userdata at idx. */
typedef const char *(*typename_fn)(lua_State *L, int idx);
void fh__lua_set_typename(const char *mt, typename_fn fn);

/* ---- public names (README "Errors") ------------------------------------- */
/* Record the name users call C function f by ("fh.zeros", "Tensor:expand");
 * every error raised while f runs begins with it (fh__lua_error). Idempotent. */
void fh__lua_name(lua_CFunction f, const char *name);
/* fh__lua_setfuncs, naming each function prefix .. name (internal "_x" ones
 * stay unnamed). */
void fh__lua_setfuncs_named(lua_State *L, const luaL_Reg *l, const char *prefix);
/* Methods of classes that share a metatable `mt`: the class is the
 * closure's first upvalue (a string), else self's type name, else `klass`. */
void fh__lua_name_methods_dynamic(const luaL_Reg *l, const char *mt, const char *klass);
/* For a metatable shared by several classes: pushes {[class] = {method =
 * closure of `methods` with upvalue 1 = class}} (an __index function keeps it
 * as its upvalue 2 and finds methods with fh__lua_class_method). */
void fh__lua_push_class_methods(lua_State *L, const luaL_Reg *methods, const char *const *classes);
/* In such an __index: pushes the method named by the key at `key` of class
 * `klass` and returns 1, or pushes nothing and returns 0. */
int fh__lua_class_method(lua_State *L, int key, const char *klass);
/* A C function exported as closures whose first upvalue is the name. */
void fh__lua_name_closure(lua_CFunction f);
/* The public name of the running C function into buf; 0 when it has none. */
int fh__lua_current_name(lua_State *L, char *buf, size_t n);

/* ---- userdata boxes ----------------------------------------------------- */
typedef struct fh_tensor_box { fh_tensor *t; } fh_tensor_box;
typedef struct fh_stream_box { fh_stream *s; } fh_stream_box;
typedef struct fh_event_box { fh_event *e; } fh_event_box;

/* A new zero-filled userdata of `size` bytes with the registry metatable
 * `mt`, left on the stack (the box a constructor creates before the engine
 * object it will hold). Owned by Lua. */
void *fh__lua_newbox(lua_State *L, size_t size, const char *mt);
/* Userdata of metatable `mt` at idx, or NULL. */
void *fh__lua_testudata(lua_State *L, int idx, const char *mt);
/* Checked access; raises TypeError "<fn>: argument <n> (<name>) expected
 * <what>, got <type>". */
fh_tensor *fh__lua_checktensor(lua_State *L, int idx, const char *fn, const char *argname);
fh_tensor *fh__lua_totensor(lua_State *L, int idx); /* NULL if not a tensor */
fh_stream *fh__lua_checkstream(lua_State *L, int idx, const char *fn, const char *argname);
fh_event *fh__lua_checkevent(lua_State *L, int idx, const char *fn, const char *argname);
/* Push a tensor, taking over the caller's reference (`t` must be a new
 * reference). Counts its bytes for GC pressure. */
void fh__lua_push_tensor(lua_State *L, fh_tensor *t);
/* An empty tensor box on the stack: create it first, then let the engine
 * fill box->t, so a failed allocation cannot leak (the safe order). */
fh_tensor_box *fh__lua_new_tensor_box(lua_State *L);
/* Count a new tensor's storage toward the GC soft limit. */
void fh__lua_account(lua_State *L, fh_tensor *t);
void fh__lua_push_stream(lua_State *L, fh_stream *s); /* retains */
void fh__lua_push_event(lua_State *L, fh_event *e);   /* retains */
void fh__lua_push_device(lua_State *L, fh_device d);  /* its name: "cpu", "cuda:0" */

/* ---- argument helpers --------------------------------------------------- */
/* Integral number check (LuaJIT numbers are doubles): raises ValueError
 * naming fn and argname when not an integer in [lo, hi]. */
int64_t fh__lua_checkint(lua_State *L, int idx, const char *fn, const char *argname, int64_t lo, int64_t hi);
/* Scalar from a number, boolean, int64_t/uint64_t cdata, or (when
 * allow_complex) a {re, im} table. Returns 0 and leaves *out untouched when
 * the value is none of these. */
int fh__lua_toscalar(lua_State *L, int idx, fh_scalar *out, int allow_complex);
/* A shape from a table of integers or from integer varargs starting at idx
 * (`allow_varargs`). Returns ndim. */
int fh__lua_checkshape(lua_State *L, int idx, int64_t *shape, const char *fn, int allow_varargs);
/* Options table helpers: raise ValueError on keys not in `allowed` (NULL
 * terminated) so typos are caught. idx may be none/nil. */
void fh__lua_checkopts(lua_State *L, int idx, const char *fn, const char *const *allowed);
/* Field getters on an options table at idx (absent -> default). */
int fh__lua_optbool(lua_State *L, int idx, const char *key, int def, const char *fn);
fh_stream *fh__lua_optstream(lua_State *L, int idx, const char *key, const char *fn);
fh_device fh__lua_optdevice(lua_State *L, int idx, const char *key, fh_device def, const char *fn);
fh_dtype fh__lua_optdtype(lua_State *L, int idx, const char *key, fh_dtype def, const char *fn);
/* Device from a string argument. */
fh_device fh__lua_checkdevice(lua_State *L, int idx, const char *fn);

/* ---- CKKS contexts and values (l_values.c) ------------------------------ */
typedef struct fh_context_box { fh_ckks_context *c; } fh_context_box;
typedef struct fh_value_box { fh_value *v; } fh_value_box;
fh_ckks_context *fh__lua_tocontext(lua_State *L, int idx); /* NULL if not a context */
void fh__lua_push_context(lua_State *L, fh_ckks_context *c); /* retains */
fh_value *fh__lua_tovalue(lua_State *L, int idx);           /* NULL if not a value */
/* Push a value, taking over the caller's reference. */
void fh__lua_push_value(lua_State *L, fh_value *v);

/* ---- trees and signatures (l_signature.c) -------------------------------- */
/* Trees (docs/api.md "Execution: signatures"): tensors and values are leaves; a
 * table with the tuple metatable is a tuple; a table whose keys are exactly
 * 1..n a list (an empty table is an empty list); a table of string keys a
 * dict; anything else a TypeError naming the path, cycles a TypeError and
 * nesting deeper than FH_TREE_MAX_DEPTH a ValueError. None of these
 * functions raises: they return a status (error recorded with its path). */

/* Signature of the tree at idx (new reference) and, when `leaves` is not
 * NULL, a malloc'd array of its sig->nleaves leaf tensors (borrowed from the
 * tree, valid while the tree is alive; fh_free() the array). On failure
 * *sig is NULL and nothing is owned. */
fh_status fh__lua_tree_build(lua_State *L, int idx, const char *root, fh_tree_sig **sig, fh_tensor ***leaves);
/* Validate the tree at idx against `sig`: structure, tensor topology and
 * exact state; the first mismatch is an error of `kind` (e.g.
 * FH_ERR_EXEC_INPUT, FH_ERR_GRAPH_INPUT) whose message starts with the path
 * and whose path field is set. Unsupported leaves and ambiguous tables are
 * TypeErrors. `leaves` (capacity sig->nleaves, may be NULL) receives the
 * candidate's leaf tensors (borrowed). Allocates nothing. */
fh_status fh__lua_tree_validate(lua_State *L, const fh_tree_sig *sig, int idx, const char *root, fh_status kind,
                                fh_tensor **leaves);
/* Push a new tree with sig's structure around `leaves` (values rebuilt with
 * fh_value_sig_build; tensors pushed as they are). Raises on failure. */
void fh__lua_tree_push(lua_State *L, const fh_tree_sig *sig, fh_tensor *const *leaves);
/* The same, its errors (a MemoryError building a value) named `name`: for
 * pushes from __index (buf.value, prog.output), which has no public name. */
void fh__lua_tree_push_named(lua_State *L, const fh_tree_sig *sig, fh_tensor *const *leaves, const char *name);
/* Signature userdata: push (retains) / check (any of the three classes
 * that wraps a tree node; raises TypeError otherwise). */
void fh__lua_push_treesig(lua_State *L, fh_tree_sig *s);
fh_tree_sig *fh__lua_checktreesig(lua_State *L, int idx, const char *fn, const char *argname);

/* ---- registration ------------------------------------------------------- */
/* Each area registers its functions into the module table at -1 and its
 * metatables in the registry. Idempotent (busted may load twice). */
void fh__lua_open_errors(lua_State *L);
void fh__lua_open_tensor(lua_State *L);
void fh__lua_open_cuda(lua_State *L);
void fh__lua_open_values(lua_State *L);
void fh__lua_open_signature(lua_State *L);
void fh__lua_open_exec(lua_State *L); /* l_exec.c: buffers, copy handles, programs */
void fh__lua_open_ckks(lua_State *L); /* l_ckks.c */
void fh__lua_open_trace(lua_State *L); /* l_trace.c: fh.trace's engine side */
void fh__lua_open_dist(lua_State *L); /* l_dist.c: fhelium.distributed */
/* Set the functions of `l` into the table at -1 (LuaJIT's luaL_register
 * with a NULL name, spelled out); names nothing. */
void fh__lua_setfuncs(lua_State *L, const luaL_Reg *l);
/* Get or create a metatable with __index = methods table; leaves the
 * metatable on the stack. methods and meta may be NULL. Names the methods
 * "<Class>:<m>" and the metamethods "<Class>.<mm>" (Class: `name` without
 * "fhelium."). */
void fh__lua_newclass(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta);
/* fh__lua_newclass, then __index = `index` with the methods table as its
 * upvalue (index looks there first, then answers fields); leaves the
 * metatable on the stack. */
/* metatable.fields = {names...} for the metatable at -1: the computed
 * fields its __index function answers, listed for the REPL's completion
 * (which never runs metamethods). `names` is NULL-terminated. */
void fh__lua_setfields(lua_State *L, const char *const *names);
void fh__lua_newclass_indexed(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta,
                              lua_CFunction index);

int luaopen_fhelium_core(lua_State *L);

#endif
