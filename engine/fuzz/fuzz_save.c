/* libFuzzer target: the value-file writer. The input drives a generator of
 * trees: 0 to 5,000 leaves; lists, tuples and dicts nested up to 12 deep;
 * tensors of every dtype and shape (0 to 3 dimensions, empty ones too),
 * contiguous or strided views, with or without requires_grad; CKKS values
 * of every type over two contexts (and context-free slots plaintexts). A
 * few bytes make a large tree: a container's child count takes one or two
 * bytes, and the input reads as zeros once it runs out.
 *
 * Every tree is serialized; the only error allowed is the writer's
 * ValueError for a dict key that is not valid UTF-8. What is written must
 * deserialize to the same tree: the same structure, dict keys, shapes,
 * dtypes, requires_grad and exact value states, and the same bytes in every
 * leaf (saved copies are contiguous, so strides are not compared). It is
 * then saved to a file (on /dev/shm when there is one, where fsync is
 * cheap), which must hold exactly the serialized bytes and load back equal
 * too. Built with -DFHELIUM_FUZZ=ON and clang (scripts/fuzz). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fh/value_io.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

#define MAX_LEAVES 5000
#define MAX_DEPTH 12
#define MAX_NODES 20000

/* ---- input ---------------------------------------------------------------------- */
typedef struct gen {
  const unsigned char *p;
  size_t n, i;
  int64_t leaves_left;
  int64_t nodes_left; /* containers too: empty ones must not multiply without bound */
  /* the leaves in leaf order, one reference each; indices only (the array grows) */
  fh_tensor **leaves;
  int64_t nleaves, cap;
  bool failed; /* out of memory in the generator itself */
} gen;

static unsigned next(gen *g) { return g->i < g->n ? g->p[g->i++] : 0; }

static bool push_leaf(gen *g, fh_tensor *t) {
  if (g->nleaves == g->cap) {
    int64_t cap = g->cap ? 2 * g->cap : 64;
    fh_tensor **l = realloc(g->leaves, sizeof *l * (size_t)cap);
    if (l == NULL) return false;
    g->leaves = l;
    g->cap = cap;
  }
  fh_tensor_retain(t);
  g->leaves[g->nleaves++] = t;
  return true;
}

/* ---- contexts ---------------------------------------------------------------------- */
static fh_ckks_context *g_ctx[2];

/* `count` primes = 1 (mod 2n) below 2^bits, descending, after skipping `skip` */
static void primes(int64_t n, int bits, int count, int skip, uint64_t *out) {
  uint64_t c = ((uint64_t)1 << bits) + 1;
  int k = 0;
  while (k < count) {
    c -= 2 * (uint64_t)n;
    if (fh_is_prime_u64(c)) {
      if (skip > 0) --skip;
      else out[k++] = c;
    }
  }
}

static void init_contexts(void) {
  if (g_ctx[0]) return;
  for (int i = 0; i < 2; ++i) {
    uint64_t q[3], p[1];
    primes(16, 30, 3, i * 7, q);
    primes(16, 31, 1, 0, p);
    fh_ckks_context_spec s = {16, (double)(1 << 20), 3, 1, q, p, false, 0, false, 0};
    if (fh_ckks_context_new(&s, &g_ctx[i]) != FH_OK) abort();
  }
}

/* ---- tensors and values ---------------------------------------------------------------- */
/* A tensor of the given shape whose bytes come from the input. */
static fh_tensor *bytes_tensor(gen *g, fh_dtype dt, int nd, const int64_t *shape) {
  fh_tensor_options o = fh_tensor_options_default();
  o.dtype = dt;
  fh_tensor *t = NULL;
  if (fh_tensor_empty(nd, shape, &o, &t) != FH_OK) return NULL;
  unsigned char *b = t->storage->data;
  size_t nb = fh_tensor_nbytes(t);
  for (size_t i = 0; i < nb; ++i) b[i] = (unsigned char)next(g);
  return t;
}

static fh_tensor *gen_tensor(gen *g) {
  fh_dtype dt = (fh_dtype)(next(g) % FH_DTYPE_COUNT);
  int nd = (int)(next(g) % 4);
  int64_t shape[3];
  for (int d = 0; d < nd; ++d) shape[d] = next(g) % 4;
  unsigned flags = next(g);
  fh_tensor *t = bytes_tensor(g, dt, nd, shape);
  if (t == NULL) return NULL;
  if ((flags & 2) && nd >= 2) { /* a strided view */
    fh_tensor *v = NULL;
    fh_status st = fh_tensor_transpose(t, 0, nd - 1, &v);
    fh_tensor_release(t);
    if (st != FH_OK) return NULL;
    t = v;
  }
  t->requires_grad = (flags & 1) != 0;
  return t;
}

/* A value of a type the input picks, or NULL when the input asks for one
 * the constructors refuse (the caller makes a tensor instead). */
static fh_value *gen_value(gen *g) {
  unsigned kind = next(g) % 9, c = next(g);
  fh_ckks_context *ctx = g_ctx[c & 1];
  int32_t level = (int32_t)((c >> 1) % 2); /* max_level is 1 */
  fh_modulus_basis basis = (c & 8) ? FH_BASIS_QP : FH_BASIS_Q;
  fh_polynomial_domain dom = (c & 16) ? FH_DOMAIN_NTT : FH_DOMAIN_COEFFICIENT;
  static const double scales[] = {1.0, 3.0, 1048576.0, 1234.5678, 1e-300, 1e300};
  double scale = scales[(c >> 5) % 6];
  int32_t ids[FH_CKKS_MAX_PRIMES], nl = 0;
  if (fh_ckks_context_prime_ids(ctx, level, basis, ids, &nl) != FH_OK) {
    fh_error_clear();
    return NULL;
  }
  int64_t N = ctx->ring_degree, batch = 1 + next(g) % 2;
  fh_value *v = NULL;
  fh_tensor *t = NULL;
  fh_status st = FH_ERR_VALUE;
  switch (kind) {
    case 0: { /* slots plaintext: float64 or complex128, maybe context-free */
      int64_t shape[2] = {batch, 1 + next(g) % (uint64_t)ctx->num_slots};
      fh_dtype dt = (c & 64) ? FH_COMPLEX128 : FH_FLOAT64;
      int nd = (c & 128) ? 0 : 2;
      if ((t = bytes_tensor(g, dt, nd, shape)) != NULL) st = fh_plaintext_slots_new((c & 4) ? NULL : ctx, t, level, scale, &v);
      break;
    }
    case 1: { /* RNS plaintext */
      int64_t shape[3] = {batch, nl, N};
      fh_residue_representation res = (c & 4) ? FH_RESIDUE_MONTGOMERY : FH_RESIDUE_STANDARD;
      if ((t = bytes_tensor(g, FH_UINT64, 3, shape)) != NULL)
        st = fh_plaintext_rns_new(ctx, t, level, scale, basis, dom, res, &v);
      break;
    }
    case 2: { /* ciphertext of 2 or 3 components */
      int64_t shape[4] = {2 + (c & 4 ? 1 : 0), batch, nl, N};
      if ((t = bytes_tensor(g, FH_UINT64, 4, shape)) != NULL) st = fh_ciphertext_new(ctx, t, level, scale, basis, dom, &v);
      break;
    }
    case 3: { /* secret key [limb, N] */
      int64_t shape[2] = {nl, N};
      if ((t = bytes_tensor(g, FH_UINT64, 2, shape)) != NULL)
        st = fh_key_new(ctx, FH_SECRET_KEY, t, level, basis, dom, 0, &v);
      break;
    }
    case 4: { /* public key [2, limb, N] */
      int64_t shape[3] = {2, nl, N};
      if ((t = bytes_tensor(g, FH_UINT64, 3, shape)) != NULL)
        st = fh_key_new(ctx, FH_PUBLIC_KEY, t, level, basis, dom, 0, &v);
      break;
    }
    default: { /* key-switching keys [digit, 2, limb, N] */
      static const fh_value_type kt[] = {FH_KEY_SWITCH_KEY, FH_RELINEARIZATION_KEY, FH_ROTATION_KEY, FH_CONJUGATION_KEY};
      int64_t shape[4] = {batch, 2, nl, N};
      int64_t step = (int64_t)(next(g) % 15) - 7;
      if ((t = bytes_tensor(g, FH_UINT64, 4, shape)) != NULL)
        st = fh_key_new(ctx, kt[kind - 5], t, level, basis, dom, step, &v);
    }
  }
  if (t) fh_tensor_release(t);
  if (st != FH_OK) {
    fh_error_clear();
    return NULL;
  }
  return v;
}

/* ---- trees ------------------------------------------------------------------------- */
typedef struct child {
  fh_tree_sig *sig;
  char key[8];
  size_t key_len;
  int64_t first, count; /* its leaves in g->leaves */
} child;

static int child_cmp(const void *pa, const void *pb) {
  const child *a = pa, *b = pb;
  size_t m = a->key_len < b->key_len ? a->key_len : b->key_len;
  int c = memcmp(a->key, b->key, m);
  if (c) return c;
  return a->key_len < b->key_len ? -1 : a->key_len > b->key_len;
}

static const char key_chars[] = "ab z0_.[]\"\\\n";

static fh_tree_sig *gen_node(gen *g, int depth);

static fh_tree_sig *gen_leaf(gen *g) {
  fh_tree_sig *s = NULL;
  if (next(g) % 5 == 0) {
    fh_value *v = gen_value(g);
    if (v) {
      bool ok = fh_tree_sig_value(v, &s) == FH_OK;
      for (int i = 0; ok && i < v->ntensors; ++i) ok = push_leaf(g, v->tensors[i]);
      fh_value_release(v);
      if (!ok) g->failed = true;
      g->leaves_left--;
      return s;
    }
  }
  fh_tensor *t = gen_tensor(g);
  if (t == NULL) {
    g->failed = true;
    return NULL;
  }
  if (fh_tree_sig_tensor(t, &s) != FH_OK || !push_leaf(g, t)) g->failed = true;
  fh_tensor_release(t);
  g->leaves_left--;
  return s;
}

static fh_tree_sig *gen_node(gen *g, int depth) {
  unsigned b = next(g);
  bool last = depth >= MAX_DEPTH || --g->nodes_left <= 0;
  if (g->leaves_left > 0 && (last || b % 8 < 5)) return gen_leaf(g);
  fh_tree_kind kind = b % 8 == 5 ? FH_TREE_LIST : b % 8 == 6 ? FH_TREE_TUPLE : FH_TREE_DICT;
  if (last) kind = FH_TREE_LIST; /* and empty: no leaves are left */
  unsigned c = next(g);
  int64_t n = (c & 0x80) ? (int64_t)(((c & 0x7f) << 8) | next(g)) : (int64_t)(c % 8);
  if (n > g->leaves_left + 2) n = g->leaves_left + 2; /* room for empty containers */
  if (last) n = 0;
  child *ch = calloc((size_t)(n ? n : 1), sizeof *ch);
  if (ch == NULL) {
    g->failed = true;
    return NULL;
  }
  int64_t k = 0;
  for (int64_t i = 0; i < n && !g->failed; ++i) {
    child *x = &ch[k];
    if (kind == FH_TREE_DICT) {
      unsigned kl = next(g);
      x->key_len = kl % 8;
      for (size_t j = 0; j < x->key_len; ++j) {
        unsigned kc = next(g);
        /* mostly readable keys; 0x80 lets a raw byte through (maybe not UTF-8) */
        x->key[j] = (kl & 0x80) ? (char)kc : key_chars[kc % (sizeof key_chars - 1)];
      }
    }
    x->first = g->nleaves;
    x->sig = gen_node(g, depth + 1);
    x->count = g->nleaves - x->first;
    if (x->sig) ++k;
  }
  fh_tree_sig *s = NULL;
  if (!g->failed && kind == FH_TREE_DICT && k > 0) {
    /* keys sorted as the signature sorts them, duplicates dropped, and the
     * leaves reordered to match (leaf order follows the sorted keys) */
    qsort(ch, (size_t)k, sizeof *ch, child_cmp);
    fh_tensor **seg = NULL;
    int64_t lo = INT64_MAX, hi = 0;
    for (int64_t i = 0; i < k; ++i) {
      if (ch[i].first < lo) lo = ch[i].first;
      if (ch[i].first + ch[i].count > hi) hi = ch[i].first + ch[i].count;
    }
    if (hi > lo && (seg = malloc(sizeof *seg * (size_t)(hi - lo))) == NULL) g->failed = true;
    int64_t w = 0, pos = lo;
    for (int64_t i = 0; i < k && !g->failed; ++i) {
      if (w > 0 && child_cmp(&ch[w - 1], &ch[i]) == 0) { /* a duplicate key */
        for (int64_t j = 0; j < ch[i].count; ++j) fh_tensor_release(g->leaves[ch[i].first + j]);
        fh_tree_sig_release(ch[i].sig);
        continue;
      }
      memcpy(seg + (pos - lo), g->leaves + ch[i].first, sizeof *seg * (size_t)ch[i].count);
      pos += ch[i].count;
      ch[w++] = ch[i];
    }
    if (!g->failed) {
      if (pos > lo) memcpy(g->leaves + lo, seg, sizeof *seg * (size_t)(pos - lo));
      g->nleaves = pos;
      k = w;
    }
    free(seg);
  }
  if (!g->failed) {
    fh_tree_sig **cs = calloc((size_t)(k ? k : 1), sizeof *cs);
    const char **keys = calloc((size_t)(k ? k : 1), sizeof *keys);
    size_t *lens = calloc((size_t)(k ? k : 1), sizeof *lens);
    if (cs && keys && lens) {
      for (int64_t i = 0; i < k; ++i) {
        cs[i] = ch[i].sig;
        keys[i] = ch[i].key;
        lens[i] = ch[i].key_len;
      }
      int64_t nk = k;
      k = 0; /* the container takes the children over, also on failure */
      if (fh_tree_sig_container(kind, nk, cs, kind == FH_TREE_DICT ? keys : NULL, kind == FH_TREE_DICT ? lens : NULL,
                                &s) != FH_OK)
        g->failed = true;
    } else {
      g->failed = true;
    }
    free(cs);
    free(keys);
    free(lens);
  }
  for (int64_t i = 0; i < k; ++i) fh_tree_sig_release(ch[i].sig);
  free(ch);
  return s;
}

/* ---- the property ------------------------------------------------------------------ */
static bool tsig_same(const fh_tensor_sig *a, const fh_tensor_sig *b) {
  if (a->ndim != b->ndim || a->dtype != b->dtype || a->requires_grad != b->requires_grad) return false;
  return memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* Equal but for strides (what is saved is a contiguous copy). */
static bool sig_same(const fh_tree_sig *a, const fh_tree_sig *b) {
  if (a->kind != b->kind || a->nleaves != b->nleaves) return false;
  switch (a->kind) {
    case FH_TREE_TENSOR: return tsig_same(&a->tensor, &b->tensor);
    case FH_TREE_VALUE: {
      const fh_value_sig *x = &a->value, *y = &b->value;
      if (!fh_value_state_equal(&x->state, &y->state) || x->ntensors != y->ntensors) return false;
      if ((x->ctx == NULL) != (y->ctx == NULL) || (x->ctx && strcmp(x->ctx->id, y->ctx->id) != 0)) return false;
      for (int i = 0; i < x->ntensors; ++i)
        if (!tsig_same(&x->tensors[i], &y->tensors[i])) return false;
      return true;
    }
    default:
      if (a->nchildren != b->nchildren) return false;
      for (int32_t i = 0; i < a->nchildren; ++i) {
        if (a->kind == FH_TREE_DICT &&
            (a->key_lens[i] != b->key_lens[i] || memcmp(a->keys[i], b->keys[i], a->key_lens[i]) != 0))
          return false;
        if (!sig_same(a->children[i], b->children[i])) return false;
      }
      return true;
  }
}

static void check_loaded(const fh_tree_sig *sig, fh_tensor *const *leaves, const fh_tree_sig *sig2,
                         fh_tensor *const *leaves2) {
  if (!sig_same(sig, sig2)) abort(); /* the tree written is the tree read */
  for (int64_t i = 0; i < sig->nleaves; ++i) {
    size_t nb = fh_tensor_nbytes(leaves[i]);
    if (nb != fh_tensor_nbytes(leaves2[i]) || leaves[i]->dtype != leaves2[i]->dtype) abort();
    if (!fh_tensor_is_contiguous(leaves2[i])) abort();
    unsigned char *a = malloc(nb + 1), *b = malloc(nb + 1);
    if (a == NULL || b == NULL) abort();
    if (fh_tensor_read(leaves[i], a) != FH_OK || fh_tensor_read(leaves2[i], b) != FH_OK) abort();
    if (memcmp(a, b, nb) != 0) abort(); /* bytes, so NaN payloads compare too */
    free(a);
    free(b);
  }
}

static char g_path[256];

static const char *file_path(void) {
  if (g_path[0] == '\0') {
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_path, sizeof g_path, "%s/fhelium-fuzz-save-%d.safetensors", dir, (int)getpid());
  }
  return g_path;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  init_contexts();
  gen g = {data, size, 0, MAX_LEAVES, MAX_NODES, NULL, 0, 0, false};
  fh_tree_sig *sig = gen_node(&g, 1);
  if (sig == NULL || g.failed) {
    if (fh_error_status() != FH_OK && fh_error_status() != FH_ERR_MEMORY) abort(); /* the generator's own calls */
    if (sig) fh_tree_sig_release(sig);
    fh_value_io_free_leaves(g.leaves, g.nleaves);
    fh_error_clear();
    return 0;
  }
  if (sig->nleaves != g.nleaves || sig->nleaves > MAX_LEAVES) abort();
  unsigned char *bytes = NULL;
  size_t n = 0;
  fh_status st = fh_tree_serialize(sig, g.leaves, true, &bytes, &n);
  if (st != FH_OK) {
    /* the one refusal a generated tree can meet: a dict key that is not UTF-8 */
    if (st != FH_ERR_VALUE || strstr(fh_error_message(), "is not valid UTF-8") == NULL) abort();
  } else {
    fh_tree_sig *sig2 = NULL;
    fh_tensor **leaves2 = NULL;
    if (fh_tree_deserialize(bytes, n, fh_cpu(), &sig2, &leaves2) != FH_OK) abort(); /* what is written loads */
    check_loaded(sig, g.leaves, sig2, leaves2);
    fh_value_io_free_leaves(leaves2, sig2->nleaves);
    fh_tree_sig_release(sig2);
    /* the file holds exactly the serialized bytes, and loads back equal
     * (for every other input, by the byte after the tree: files are slower) */
    const char *path = file_path();
    if (next(&g) & 1) path = NULL;
    if (path) {
      if (fh_tree_save(sig, g.leaves, path, true, true) != FH_OK) abort();
      FILE *f = fopen(path, "rb");
      if (f == NULL) abort();
      unsigned char *fb = malloc(n + 1);
      if (fb == NULL || fread(fb, 1, n + 1, f) != n || memcmp(fb, bytes, n) != 0) abort();
      fclose(f);
      free(fb);
      if (fh_tree_load(path, fh_cpu(), &sig2, &leaves2) != FH_OK) abort();
      check_loaded(sig, g.leaves, sig2, leaves2);
      fh_value_io_free_leaves(leaves2, sig2->nleaves);
      fh_tree_sig_release(sig2);
      unlink(path);
    }
    free(bytes);
  }
  fh_tree_sig_release(sig);
  fh_value_io_free_leaves(g.leaves, g.nleaves);
  fh_error_clear();
  return 0;
}
