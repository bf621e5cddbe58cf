/* Execution signatures: tensor / value / tree descriptions, canonical keys,
 * field-by-field checks. */
#include "fh/signature.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"tensor", "value", "list", "tuple", "dict"};
const char *fh_tree_kind_name(fh_tree_kind k) { return (unsigned)k < 5 ? kind_names[k] : "?"; }

/* ---- growable strings ----------------------------------------------------- */
typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool oom;
} sbuf;

static void sb_reserve(sbuf *b, size_t extra) {
  if (b->oom || b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 128;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = fh_realloc(b->p, cap);
  if (p == NULL) {
    b->oom = true;
    return;
  }
  b->p = p;
  b->cap = cap;
}
static void sb_put(sbuf *b, const char *s, size_t n) {
  sb_reserve(b, n);
  if (b->oom) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}
static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof tmp) {
    sb_put(b, tmp, (size_t)n);
    return;
  }
  sb_reserve(b, (size_t)n);
  if (b->oom) return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

size_t fh_json_quote(char *buf, size_t len, size_t size, const char *s, size_t n, size_t max_chars) {
  if (size == 0) return len;
#define PUT(c)                          \
  do {                                  \
    if (len + 1 < size) buf[len++] = (c); \
  } while (0)
  PUT('"');
  size_t lim = (max_chars && n > max_chars) ? max_chars : n;
  for (size_t i = 0; i < lim; ++i) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      PUT('\\');
      PUT((char)c);
    } else if (c == '\n') {
      PUT('\\');
      PUT('n');
    } else if (c == '\t') {
      PUT('\\');
      PUT('t');
    } else if (c < 0x20 || c == 0x7f) {
      char u[8];
      snprintf(u, sizeof u, "\\u%04x", c);
      for (int k = 0; u[k]; ++k) PUT(u[k]);
    } else {
      PUT((char)c);
    }
  }
  if (lim < n) {
    PUT('.');
    PUT('.');
    PUT('.');
  }
  PUT('"');
#undef PUT
  buf[len < size ? len : size - 1] = '\0';
  return len;
}

static void sb_quote(sbuf *b, const char *s, size_t n) {
  /* worst case 6 bytes per input byte */
  size_t need = 6 * n + 3;
  sb_reserve(b, need);
  if (b->oom) return;
  b->len = fh_json_quote(b->p, b->len, b->cap, s, n, 0);
}

/* ---- tensors ---------------------------------------------------------------- */
void fh_tensor_sig_init(fh_tensor_sig *s, const fh_tensor *t) {
  memset(s, 0, sizeof *s);
  s->ndim = t->ndim;
  s->dtype = t->dtype;
  s->requires_grad = t->requires_grad;
  memcpy(s->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  memcpy(s->stride, t->stride, sizeof(int64_t) * (size_t)t->ndim);
}

bool fh_tensor_sig_equal(const fh_tensor_sig *a, const fh_tensor_sig *b) {
  return a->ndim == b->ndim && a->dtype == b->dtype && a->requires_grad == b->requires_grad &&
         memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0 &&
         memcmp(a->stride, b->stride, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

static const char *fmt_dims(const int64_t *d, int n, char *buf, size_t size) {
  size_t l = 0;
  buf[l++] = '{';
  buf[l] = '\0';
  for (int i = 0; i < n && l + 24 < size; ++i) l += (size_t)snprintf(buf + l, size - l, "%s%lld", i ? "," : "", (long long)d[i]);
  snprintf(buf + l, size - l, "}");
  return buf;
}

fh_status fh_tensor_sig_check(const fh_tensor_sig *e, const fh_tensor *t, fh_status kind, const char *what) {
  const char *w = what ? what : "";
  char a[512], b[512];
  if (e->ndim != t->ndim || memcmp(e->shape, t->shape, sizeof(int64_t) * (size_t)e->ndim) != 0)
    return fh_error_set(kind, "%sshape mismatch: expected %s, got %s", w, fmt_dims(e->shape, e->ndim, a, sizeof a),
                        fmt_dims(t->shape, t->ndim, b, sizeof b));
  if (memcmp(e->stride, t->stride, sizeof(int64_t) * (size_t)e->ndim) != 0)
    return fh_error_set(kind, "%sstride mismatch: expected %s, got %s", w, fmt_dims(e->stride, e->ndim, a, sizeof a),
                        fmt_dims(t->stride, t->ndim, b, sizeof b));
  if (e->dtype != t->dtype)
    return fh_error_set(kind, "%sdtype mismatch: expected %s, got %s", w, fh_dtype_name((fh_dtype)e->dtype),
                        fh_dtype_name((fh_dtype)t->dtype));
  if (e->requires_grad != t->requires_grad)
    return fh_error_set(kind, "%srequires_grad mismatch: expected %s, got %s", w, e->requires_grad ? "true" : "false",
                        t->requires_grad ? "true" : "false");
  return FH_OK;
}

static void tensor_key(sbuf *b, const fh_tensor_sig *s) {
  char d[40 * FH_MAX_DIMS];
  sb_printf(b, "tensor(%s,shape=", fh_dtype_name((fh_dtype)s->dtype));
  sb_puts(b, fmt_dims(s->shape, s->ndim, d, sizeof d));
  sb_puts(b, ",stride=");
  sb_puts(b, fmt_dims(s->stride, s->ndim, d, sizeof d));
  sb_printf(b, ",strided,requires_grad=%s)", s->requires_grad ? "true" : "false");
}

/* ---- values ----------------------------------------------------------------- */
static const char *ctx_name(const fh_ckks_context *c) { return c ? c->id : "(none)"; }

static bool meta_equal(const fh_meta_entry *a, const fh_meta_entry *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case FH_META_INT: return a->i == b->i;
    case FH_META_REAL: return a->r == b->r;
    case FH_META_STRING: return strcmp(a->s ? a->s : "", b->s ? b->s : "") == 0;
    default: return a->nlist == b->nlist && memcmp(a->list, b->list, sizeof(int32_t) * (size_t)a->nlist) == 0;
  }
}

fh_status fh_value_sig_check(const fh_value_sig *e, const fh_value *v, fh_status kind) {
  const fh_value_state *x = &e->state, *y = &v->state;
  const char *tn = fh_value_type_name((fh_value_type)x->type);
  if (v->ctx != e->ctx || !fh_value_state_equal(x, y)) {
    if (x->type != y->type)
      return fh_error_set(kind, "type mismatch: expected %s, got %s", tn, fh_value_type_name((fh_value_type)y->type));
    if (e->ctx != v->ctx)
      return fh_error_set(kind, "%s context_id mismatch: expected %s, got %s", tn, ctx_name(e->ctx), ctx_name(v->ctx));
    if (x->representation != y->representation)
      return fh_error_set(kind, "%s representation mismatch: expected %s, got %s", tn,
                          fh_representation_name((fh_representation)x->representation),
                          fh_representation_name((fh_representation)y->representation));
    fh_meta_entry me[FH_META_MAX], ma[FH_META_MAX];
    int ne = fh_value_state_metadata(x, me), na = fh_value_state_metadata(y, ma);
    for (int i = 0; i < ne && i < na; ++i)
      if (!meta_equal(&me[i], &ma[i])) {
        char a[512], b[512];
        return fh_error_set(kind, "%s %s mismatch: expected %s, got %s", tn, me[i].key, fh_meta_format(&me[i], a, sizeof a),
                            fh_meta_format(&ma[i], b, sizeof b));
      }
    return fh_error_set(kind, "%s state mismatch", tn); /* not reached: every axis is a metadata field */
  }
  if (e->ntensors != v->ntensors)
    return fh_error_set(kind, "%s tensor count mismatch: expected %d, got %d", tn, e->ntensors, v->ntensors);
  for (int i = 0; i < e->ntensors; ++i) {
    const fh_tensor_sig *ts = &e->tensors[i];
    const fh_tensor *t = v->tensors[i];
    if (ts->ndim == t->ndim && ts->dtype == t->dtype && ts->requires_grad == t->requires_grad &&
        memcmp(ts->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) == 0 &&
        memcmp(ts->stride, t->stride, sizeof(int64_t) * (size_t)t->ndim) == 0)
      continue;
    char what[96];
    snprintf(what, sizeof what, "%s tensor '%s' ", tn, fh_value_tensor_name(v, i));
    return fh_tensor_sig_check(ts, t, kind, what);
  }
  return FH_OK;
}

static void value_key(sbuf *b, const fh_value_sig *s) {
  sb_printf(b, "value(%s,schema=%d,context=%s", fh_value_type_name((fh_value_type)s->state.type),
            FH_VALUE_SCHEMA_VERSION, s->ctx ? s->ctx->id : "");
  fh_meta_entry m[FH_META_MAX];
  int n = fh_value_state_metadata(&s->state, m);
  for (int i = 0; i < n; ++i) {
    sb_printf(b, ",%s=", m[i].key);
    if (m[i].kind == FH_META_INT_LIST) {
      sb_puts(b, "{");
      for (int k = 0; k < m[i].nlist; ++k) sb_printf(b, "%s%d", k ? "," : "", m[i].list[k]);
      sb_puts(b, "}");
    } else {
      char tmp[64];
      sb_puts(b, fh_meta_format(&m[i], tmp, sizeof tmp));
    }
  }
  sb_puts(b, ",tensors={");
  fh_value_state st = s->state;
  for (int i = 0; i < s->ntensors; ++i) {
    bool slots = st.type == FH_PLAINTEXT && st.representation == FH_REPR_SLOTS;
    sb_printf(b, "%s%s:", i ? "," : "", slots ? "message" : "data");
    tensor_key(b, &s->tensors[i]);
  }
  sb_puts(b, "})");
}

/* ---- tree nodes ------------------------------------------------------------- */
static fh_tree_sig *node_alloc(int kind) {
  fh_tree_sig *s = fh_calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  fh_rc_init(&s->rc);
  s->kind = kind;
  s->depth = 1;
  return s;
}

void fh_tree_sig_release(fh_tree_sig *s) {
  if (s == NULL || !fh_rc_release(&s->rc)) return;
  for (int64_t i = 0; i < s->nchildren; ++i) fh_tree_sig_release(s->children[i]);
  if (s->keys)
    for (int64_t i = 0; i < s->nchildren; ++i) fh_free(s->keys[i]);
  fh_free(s->keys);
  fh_free(s->key_lens);
  fh_free(s->children);
  if (s->value.ctx) fh_ckks_context_release(s->value.ctx);
  fh_free(s->key);
  fh_free(s);
}

static fh_status finish_key(fh_tree_sig *s, sbuf *b) {
  if (b->oom || b->p == NULL) {
    fh_free(b->p);
    fh_tree_sig_release(s);
    return fh_error_set(FH_ERR_MEMORY, "out of memory building a signature key");
  }
  s->key = b->p;
  s->key_len = b->len;
  return FH_OK;
}

fh_status fh_tree_sig_tensor(const fh_tensor *t, fh_tree_sig **out) {
  fh_tree_sig *s = node_alloc(FH_TREE_TENSOR);
  if (s == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory building a signature");
  fh_tensor_sig_init(&s->tensor, t);
  s->nleaves = 1;
  sbuf b = {0};
  tensor_key(&b, &s->tensor);
  fh_status st = finish_key(s, &b);
  if (st == FH_OK) *out = s;
  return st;
}

fh_status fh_tree_sig_value(const fh_value *v, fh_tree_sig **out) {
  if (v->ntensors < 1)
    return fh_error_set(FH_ERR_TYPE, "a %s with no tensors cannot be part of a signature",
                        fh_value_type_name(fh_value_get_type(v)));
  fh_tree_sig *s = node_alloc(FH_TREE_VALUE);
  if (s == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory building a signature");
  s->value.state = v->state;
  s->value.ctx = v->ctx;
  if (v->ctx) fh_ckks_context_retain(v->ctx);
  s->value.ntensors = v->ntensors;
  for (int i = 0; i < v->ntensors; ++i) fh_tensor_sig_init(&s->value.tensors[i], v->tensors[i]);
  s->nleaves = v->ntensors;
  sbuf b = {0};
  value_key(&b, &s->value);
  fh_status st = finish_key(s, &b);
  if (st == FH_OK) *out = s;
  return st;
}

typedef struct keyed {
  const char *key;
  size_t len;
  fh_tree_sig *child;
} keyed;

static int key_cmp(const void *pa, const void *pb) {
  const keyed *a = pa, *b = pb;
  size_t n = a->len < b->len ? a->len : b->len;
  int c = memcmp(a->key, b->key, n);
  if (c) return c;
  return a->len < b->len ? -1 : a->len > b->len;
}

fh_status fh_tree_sig_container(fh_tree_kind kind, int64_t n, fh_tree_sig **children, const char *const *keys,
                                const size_t *key_lens, fh_tree_sig **out) {
  fh_status st = FH_OK;
  fh_tree_sig *s = NULL;
  keyed *kv = NULL;
  if (kind != FH_TREE_LIST && kind != FH_TREE_TUPLE && kind != FH_TREE_DICT) {
    st = fh_error_set(FH_ERR_VALUE, "fh_tree_sig_container: %s is not a container kind", fh_tree_kind_name(kind));
    goto fail;
  }
  if (n < 0 || n > INT32_MAX || (n > 0 && children == NULL) || (kind == FH_TREE_DICT && n > 0 && keys == NULL)) {
    st = fh_error_set(FH_ERR_VALUE, "fh_tree_sig_container: bad arguments");
    goto fail;
  }
  if ((s = node_alloc(kind)) == NULL) goto oom;
  if (n > 0) {
    s->children = fh_calloc((size_t)n, sizeof *s->children);
    if (s->children == NULL) goto oom;
  }
  if (kind == FH_TREE_DICT) {
    kv = fh_calloc((size_t)(n ? n : 1), sizeof *kv);
    s->keys = fh_calloc((size_t)(n ? n : 1), sizeof *s->keys);
    s->key_lens = fh_calloc((size_t)(n ? n : 1), sizeof *s->key_lens);
    if (kv == NULL || s->keys == NULL || s->key_lens == NULL) goto oom;
    for (int64_t i = 0; i < n; ++i) {
      kv[i].key = keys[i];
      kv[i].len = key_lens ? key_lens[i] : strlen(keys[i]);
      kv[i].child = children[i];
    }
    qsort(kv, (size_t)n, sizeof *kv, key_cmp);
    for (int64_t i = 1; i < n; ++i)
      if (key_cmp(&kv[i - 1], &kv[i]) == 0) {
        char q[160];
        fh_json_quote(q, 0, sizeof q, kv[i].key, kv[i].len, 64);
        st = fh_error_set(FH_ERR_VALUE, "duplicate dict key %s", q);
        goto fail;
      }
  }
  /* take the children (from here on the node owns them) */
  int32_t depth = 0;
  int64_t leaves = 0;
  for (int64_t i = 0; i < n; ++i) {
    fh_tree_sig *c = kind == FH_TREE_DICT ? kv[i].child : children[i];
    s->children[i] = c;
    s->nchildren = (int32_t)(i + 1);
    if (c->depth > depth) depth = c->depth;
    leaves += c->nleaves;
    if (kind == FH_TREE_DICT) {
      s->keys[i] = fh_malloc(kv[i].len + 1);
      if (s->keys[i] == NULL) {
        for (int64_t j = i + 1; j < n; ++j) fh_tree_sig_release(kv[j].child);
        n = 0;
        fh_free(kv);
        kv = NULL;
        fh_tree_sig_release(s);
        return fh_error_set(FH_ERR_MEMORY, "out of memory building a signature");
      }
      memcpy(s->keys[i], kv[i].key, kv[i].len);
      s->keys[i][kv[i].len] = '\0';
      s->key_lens[i] = kv[i].len;
    }
  }
  s->nchildren = (int32_t)n;
  fh_free(kv);
  kv = NULL;
  s->depth = depth + 1;
  s->nleaves = leaves;
  if (s->depth > FH_TREE_MAX_DEPTH + 1) {
    fh_tree_sig_release(s);
    return fh_error_set(FH_ERR_VALUE, "tree nesting deeper than %d levels", FH_TREE_MAX_DEPTH);
  }
  sbuf b = {0};
  sb_puts(&b, kind == FH_TREE_LIST ? "list[" : kind == FH_TREE_TUPLE ? "tuple(" : "dict{");
  for (int64_t i = 0; i < n && !b.oom; ++i) {
    if (i) sb_puts(&b, ",");
    if (kind == FH_TREE_DICT) {
      sb_quote(&b, s->keys[i], s->key_lens[i]);
      sb_puts(&b, ":");
    }
    sb_put(&b, s->children[i]->key, s->children[i]->key_len);
  }
  sb_puts(&b, kind == FH_TREE_LIST ? "]" : kind == FH_TREE_TUPLE ? ")" : "}");
  st = finish_key(s, &b);
  if (st == FH_OK) *out = s;
  return st;
oom:
  st = fh_error_set(FH_ERR_MEMORY, "out of memory building a signature");
fail:
  fh_free(kv);
  if (s) {
    s->nchildren = 0; /* children not taken yet */
    fh_tree_sig_release(s);
  }
  for (int64_t i = 0; i < n; ++i)
    if (children && children[i]) fh_tree_sig_release(children[i]);
  return st;
}

bool fh_tree_sig_equal(const fh_tree_sig *a, const fh_tree_sig *b) {
  return a == b || (a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0);
}

fh_status fh_value_sig_build(const fh_value_sig *s, fh_tensor *const *tensors, fh_value **out) {
  for (int i = 0; i < s->ntensors; ++i) {
    fh_status st = tensors && tensors[i] ? fh_tensor_sig_check(&s->tensors[i], tensors[i], FH_ERR_VALUE, NULL)
                                         : fh_error_set(FH_ERR_VALUE, "missing tensor %d", i + 1);
    if (st != FH_OK) {
      fh_error_prefix("%s tensor %d", fh_value_type_name((fh_value_type)s->state.type), i + 1);
      return st;
    }
  }
  return fh_value_new(s->ctx, &s->state, tensors, s->ntensors, out);
}

/* ---- paths ------------------------------------------------------------------- */
const char *fh_path_format(const fh_path *p, const char *root, char *buf, size_t size) {
  size_t l = (size_t)snprintf(buf, size, "%s", root ? root : "value");
  if (l >= size) l = size - 1;
  for (int i = 0; p && i < p->depth && l + 8 < size; ++i) {
    if (p->seg[i].is_key) {
      buf[l++] = '[';
      l = fh_json_quote(buf, l, size, p->seg[i].key, p->seg[i].key_len, 64);
      if (l + 2 < size) buf[l++] = ']';
      buf[l] = '\0';
    } else {
      l += (size_t)snprintf(buf + l, size - l, "[%lld]", (long long)p->seg[i].index + 1);
      if (l >= size) l = size - 1;
    }
  }
  return buf;
}
