/* fhelium execution signatures: exact descriptions of tensors, values and
 * trees of them, used to validate payloads before anything moves.
 *
 * A tree is a tensor, a value, or a container (list, tuple, dict) of trees.
 * Its signature (fh_tree_sig) records, for every node, the kind and:
 *   tensor: shape, stride, dtype, layout (always strided), requires_grad;
 *   value:  type, schema version, context, exact state (fh_value_state)
 *           and the signatures of its tensors, in the value's order;
 *   list/tuple: the children in order; dict: the keys (sorted bytewise)
 *           and the children in key order.
 * Device (and pinning) is never part of a signature: a CPU value and a CUDA
 * value with the same state and topology have equal signatures.
 *
 * Leaves. The tensors of a tree in depth-first order (children in order,
 * dict children in key order, a value's tensors in the value's order) are
 * its "leaves"; nleaves counts them. Buffers and programs copy leaf i of a
 * source into leaf i of a target.
 *
 * Keys. Every node carries a canonical string (fh_tree_sig.key): equal
 * signatures have equal keys and different ones different keys, so the key
 * is usable as a cache key. Dict keys are written JSON-escaped.
 *
 * Validation of a candidate (fh_tensor_sig_check, fh_value_sig_check) fails
 * with the error kind the caller passes (ExecutionInputError,
 * CudaGraphInputError) and a message "<field> mismatch: expected X, got Y"
 * naming the first differing field (shape, stride, dtype, requires_grad,
 * type, context_id, a metadata field such as level or prime_ids, ...). The
 * tree walk itself lives in the Lua binding (it walks Lua tables), which
 * prefixes the tree path.
 *
 * Ownership: fh_tree_sig_* constructors return a new reference
 * (fh_tree_sig_release); containers take over the references of their
 * children. A value node holds a reference to its context. */
#ifndef FH_SIGNATURE_H
#define FH_SIGNATURE_H

#include "fh/values.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fh_tree_kind { FH_TREE_TENSOR = 0, FH_TREE_VALUE, FH_TREE_LIST, FH_TREE_TUPLE, FH_TREE_DICT } fh_tree_kind;
const char *fh_tree_kind_name(fh_tree_kind k); /* "tensor", "value", "list", "tuple", "dict" */

/* Containers nest at most this deep (a tree of depth 1 is a single leaf). */
#define FH_TREE_MAX_DEPTH 64

typedef struct fh_tensor_sig {
  int32_t ndim;
  int32_t dtype; /* fh_dtype */
  bool requires_grad;
  int64_t shape[FH_MAX_DIMS];
  int64_t stride[FH_MAX_DIMS];
} fh_tensor_sig;

void fh_tensor_sig_init(fh_tensor_sig *s, const fh_tensor *t);
bool fh_tensor_sig_equal(const fh_tensor_sig *a, const fh_tensor_sig *b);
/* FH_OK when `t` matches; else an error of `kind`: "<what>shape mismatch:
 * expected {2,3}, got {3,2}" (what may be NULL or e.g. "tensor 'data' "). */
fh_status fh_tensor_sig_check(const fh_tensor_sig *expected, const fh_tensor *t, fh_status kind, const char *what);

typedef struct fh_value_sig {
  fh_value_state state;
  fh_ckks_context *ctx; /* one reference, or NULL */
  int32_t ntensors;
  fh_tensor_sig tensors[FH_VALUE_MAX_TENSORS];
} fh_value_sig;

/* FH_OK when `v` matches; else an error of `kind` naming the field. */
fh_status fh_value_sig_check(const fh_value_sig *expected, const fh_value *v, fh_status kind);

typedef struct fh_tree_sig fh_tree_sig;
struct fh_tree_sig {
  fh_refcount rc;
  int32_t kind;        /* fh_tree_kind */
  fh_tensor_sig tensor; /* FH_TREE_TENSOR */
  fh_value_sig value;   /* FH_TREE_VALUE */
  int32_t nchildren;
  fh_tree_sig **children; /* containers */
  char **keys;            /* dict: sorted, NUL-terminated copies ... */
  size_t *key_lens;       /* ... whose lengths may include embedded NULs */
  int64_t nleaves;        /* tensors in this subtree */
  int32_t depth;          /* 1 for a leaf */
  char *key;              /* canonical string */
  size_t key_len;
};

fh_status fh_tree_sig_tensor(const fh_tensor *t, fh_tree_sig **out);
fh_status fh_tree_sig_value(const fh_value *v, fh_tree_sig **out);
/* A container of `n` children (their references are taken over, also on
 * failure). Dict keys need not be sorted (they are sorted here, with the
 * children); duplicate keys are a ValueError. */
fh_status fh_tree_sig_container(fh_tree_kind kind, int64_t n, fh_tree_sig **children, const char *const *keys,
                                const size_t *key_lens, fh_tree_sig **out);
static inline void fh_tree_sig_retain(fh_tree_sig *s) { fh_rc_retain(&s->rc); }
void fh_tree_sig_release(fh_tree_sig *s);
bool fh_tree_sig_equal(const fh_tree_sig *a, const fh_tree_sig *b);

/* A value with a value node's exact state around `tensors` (the node's
 * ntensors, validated like fh_value_new and against the node's tensor
 * signatures except for device). New reference. */
fh_status fh_value_sig_build(const fh_value_sig *s, fh_tensor *const *tensors, fh_value **out);

/* ---- tree paths ------------------------------------------------------------ */
/* The path from the root to a node: list/tuple segments hold a 0-based
 * index (printed 1-based), dict segments a borrowed key. Printed as
 * root[1]["name"] (keys escaped, long keys shortened). */
typedef struct fh_path_seg {
  int32_t is_key;
  int64_t index;
  const char *key;
  size_t key_len;
} fh_path_seg;
typedef struct fh_path {
  int32_t depth;
  fh_path_seg seg[FH_TREE_MAX_DEPTH + 1];
} fh_path;
const char *fh_path_format(const fh_path *p, const char *root, char *buf, size_t size);
/* Append a JSON-escaped quoted string to buf (used by keys and paths);
 * returns the new length. */
size_t fh_json_quote(char *buf, size_t len, size_t size, const char *s, size_t n, size_t max_chars);

#ifdef __cplusplus
}
#endif
#endif
