/* Value files: trees of tensors and values <-> safetensors (fh/value_io.h). */
#include "fh/value_io.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fh/safetensors.h"
#include "value_io_030.h"

#define FORMAT_NAME "fhelium"
#define KEY_FORMAT "format"
#define KEY_SCHEMA "fhelium.schema_version"
#define KEY_TREE "fhelium.tree"
#define KEY_CONTEXTS "fhelium.contexts"

/* ---- small helpers ---------------------------------------------------------- */
/* The string of a JSON string without embedded NUL bytes, else NULL. */
static const char *jstr(const json_t *j) {
  if (!json_is_string(j)) return NULL;
  const char *s = json_string_value(j);
  return strlen(s) == json_string_length(j) ? s : NULL;
}

static char *str_concat(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *s = fh_malloc(la + lb + 1);
  if (s) {
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
  }
  return s;
}

/* "[i]" or "[\"key\"]" appended to prefix; never truncated (names must be
 * unique). */
static char *child_name(const char *prefix, const fh_tree_sig *parent, int64_t i) {
  if (parent->kind == FH_TREE_DICT) {
    size_t n = parent->key_lens[i], cap = 6 * n + 8;
    char *q = fh_malloc(cap);
    if (q == NULL) return NULL;
    q[0] = '[';
    size_t l = fh_json_quote(q, 1, cap, parent->keys[i], n, 0);
    q[l++] = ']';
    q[l] = '\0';
    char *r = str_concat(prefix, q);
    fh_free(q);
    return r;
  }
  char seg[32];
  snprintf(seg, sizeof seg, "[%lld]", (long long)i + 1);
  return str_concat(prefix, seg);
}

/* ---- encoding ------------------------------------------------------------------ */
/* The entries to write, grown together. Nothing points into these arrays
 * while they grow: an entry holds its shape by value (fh_st_entry) and its
 * name points at its own strdup'ed block (names[i]). */
typedef struct enc {
  json_t *contexts;
  fh_st_entry *entries;
  fh_tensor **tensors;
  char **names;
  int64_t n, cap;
  bool allow_secret;
} enc;

static void enc_free(enc *e) {
  for (int64_t i = 0; i < e->n; ++i) fh_free(e->names[i]);
  fh_free(e->names);
  fh_free(e->entries);
  fh_free(e->tensors);
  json_decref(e->contexts);
}

static fh_status enc_tensor(enc *e, const char *name, fh_tensor *t, json_t **out) {
  if (e->n == e->cap) {
    int64_t cap = e->cap ? 2 * e->cap : 16;
    fh_st_entry *en = fh_realloc(e->entries, sizeof *en * (size_t)cap);
    if (en) e->entries = en;
    fh_tensor **ts = fh_realloc(e->tensors, sizeof *ts * (size_t)cap);
    if (ts) e->tensors = ts;
    char **nm = fh_realloc(e->names, sizeof *nm * (size_t)cap);
    if (nm) e->names = nm;
    if (!en || !ts || !nm) return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
    e->cap = cap;
  }
  int64_t i = e->n;
  e->names[i] = fh_strdup(name);
  if (e->names[i] == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
  e->n++;
  fh_dtype d = (fh_dtype)t->dtype;
  int nd = t->ndim;
  fh_st_entry *en = &e->entries[i];
  memcpy(en->shape, t->shape, sizeof(int64_t) * (size_t)nd);
  if (d == FH_COMPLEX128) {
    en->shape[nd++] = 2;
    d = FH_FLOAT64;
  }
  en->name = e->names[i];
  en->dtype = d;
  en->ndim = nd;
  en->nbytes = fh_tensor_nbytes(t);
  e->tensors[i] = t;
  json_t *j = json_pack("{s:s, s:s, s:b}", "tensor", name, "dtype", fh_dtype_name((fh_dtype)t->dtype),
                        "requires_grad", t->requires_grad);
  if (j == NULL) {
    if (fh_st_utf8_valid(name, strlen(name))) return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
    return fh_error_set(FH_ERR_VALUE, "tensor name %.80s is not valid UTF-8", name);
  }
  *out = j;
  return FH_OK;
}

/* json_array_append_new that also fails for a NULL value (a failed
 * json_integer...): 0 on success. Takes v's reference either way. */
static int append_new(json_t *a, json_t *v) { return v == NULL ? -1 : json_array_append_new(a, v); }

static json_t *meta_json(const fh_value_state *st) {
  fh_meta_entry m[FH_META_MAX];
  int n = fh_value_state_metadata(st, m);
  json_t *o = json_object();
  for (int i = 0; o && i < n; ++i) {
    json_t *v = NULL;
    switch (m[i].kind) {
      case FH_META_INT: v = json_integer(m[i].i); break;
      case FH_META_REAL: v = json_real(m[i].r); break;
      case FH_META_STRING: v = json_string(m[i].s); break;
      default:
        v = json_array();
        for (int k = 0; v && k < m[i].nlist; ++k)
          if (append_new(v, json_integer(m[i].list[k])) != 0) {
            json_decref(v);
            v = NULL;
          }
    }
    if (v == NULL || json_object_set_new(o, m[i].key, v) != 0) {
      json_decref(o);
      return NULL;
    }
  }
  return o;
}

static fh_status enc_context(enc *e, const fh_ckks_context *c) {
  if (json_object_get(e->contexts, c->id)) return FH_OK;
  json_t *q = json_array(), *p = json_array();
  int bad = q == NULL || p == NULL;
  for (int i = 0; !bad && i < c->num_q; ++i) bad |= append_new(q, json_integer((json_int_t)c->primes[i]));
  for (int i = 0; !bad && i < c->num_p; ++i) bad |= append_new(p, json_integer((json_int_t)c->primes[c->num_q + i]));
  if (bad) {
    json_decref(q);
    json_decref(p);
    return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
  }
  json_t *o = json_pack("{s:I, s:f, s:o, s:o}", "ring_degree", (json_int_t)c->ring_degree, "default_scale",
                        c->default_scale, "q_primes", q, "p_primes", p);
  /* the non-default layout fields (their absence means the default) */
  if (o && c->galois_generator != 5)
    bad |= json_object_set_new(o, "galois_generator", json_integer(c->galois_generator));
  if (o && c->max_level != c->num_q - 2) bad |= json_object_set_new(o, "max_level", json_integer(c->max_level));
  if (o && c->key_digits != FH_DIGITS_P_COUNT)
    bad |= json_object_set_new(o, "key_digits", json_string(fh_key_digits_name((fh_key_digits)c->key_digits)));
  if (bad) {
    json_decref(o);
    o = NULL;
  }
  if (o == NULL || json_object_set_new(e->contexts, c->id, o) != 0)
    return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
  return FH_OK;
}

static fh_status enc_node(enc *e, const fh_tree_sig *s, fh_tensor *const *leaves, int64_t *li, const char *name,
                          json_t **out) {
  fh_status st;
  switch (s->kind) {
    case FH_TREE_TENSOR: {
      fh_tensor *t = leaves[(*li)++];
      if ((st = fh_tensor_sig_check(&s->tensor, t, FH_ERR_VALUE, "leaf tensor ")) != FH_OK) return st;
      json_t *j = NULL;
      if ((st = enc_tensor(e, *name ? name : "tensor", t, &j)) != FH_OK) return st;
      if (json_object_set_new(j, "kind", json_string("tensor")) != 0) {
        json_decref(j);
        return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
      }
      *out = j;
      return FH_OK;
    }
    case FH_TREE_VALUE: {
      const fh_value_sig *v = &s->value;
      if (v->state.type == FH_SECRET_KEY && !e->allow_secret)
        return fh_error_set(FH_ERR_VALUE,
                            "refusing to save a SecretKey at %s%s without allow_secret=true (anyone who reads the file "
                            "can decrypt)",
                            "value", name);
      if (v->ctx && (st = enc_context(e, v->ctx)) != FH_OK) return st;
      json_t *ts = json_object();
      json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:o, s:o}", "kind", "value", "value_type",
                            fh_value_type_name((fh_value_type)v->state.type), "schema_version",
                            FH_VALUE_SCHEMA_VERSION, "context_id", v->ctx ? v->ctx->id : "", "metadata",
                            meta_json(&v->state), "tensors", ts);
      if (j == NULL || ts == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
      bool slots = v->state.type == FH_PLAINTEXT && v->state.representation == FH_REPR_SLOTS;
      const char *tname = slots ? "message" : "data";
      for (int i = 0; i < v->ntensors; ++i) {
        fh_tensor *t = leaves[(*li)++];
        char what[64];
        snprintf(what, sizeof what, "tensor '%s' ", tname);
        if ((st = fh_tensor_sig_check(&v->tensors[i], t, FH_ERR_VALUE, what)) != FH_OK) {
          json_decref(j);
          return st;
        }
        char *full = *name ? str_concat(name, slots ? ".message" : ".data") : fh_strdup(tname);
        json_t *tj = NULL;
        st = full ? enc_tensor(e, full, t, &tj) : fh_error_set(FH_ERR_MEMORY, "out of memory");
        fh_free(full);
        if (st != FH_OK || json_object_set_new(ts, tname, tj) != 0) {
          json_decref(j);
          return st != FH_OK ? st : fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
        }
      }
      *out = j;
      return FH_OK;
    }
    default: {
      json_t *items = json_array(), *keys = s->kind == FH_TREE_DICT ? json_array() : NULL;
      json_t *j = json_pack("{s:s, s:o}", "kind", fh_tree_kind_name((fh_tree_kind)s->kind), "items", items);
      if (j == NULL || (s->kind == FH_TREE_DICT && (keys == NULL || json_object_set_new(j, "keys", keys) != 0))) {
        json_decref(j);
        return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
      }
      for (int64_t i = 0; i < s->nchildren; ++i) {
        if (keys) {
          json_t *k = json_stringn(s->keys[i], s->key_lens[i]);
          if (k == NULL && fh_st_utf8_valid(s->keys[i], s->key_lens[i])) {
            json_decref(j);
            return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
          }
          if (k == NULL) {
            json_decref(j);
            char q[160];
            fh_json_quote(q, 0, sizeof q, s->keys[i], s->key_lens[i], 64);
            return fh_error_set(FH_ERR_VALUE, "dict key %s at value%s is not valid UTF-8 and cannot be saved", q,
                                name);
          }
          if (json_array_append_new(keys, k) != 0) {
            json_decref(j);
            return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
          }
        }
        char *cn = child_name(name, s, i);
        json_t *c = NULL;
        st = cn ? enc_node(e, s->children[i], leaves, li, cn, &c) : fh_error_set(FH_ERR_MEMORY, "out of memory");
        fh_free(cn);
        if (st != FH_OK) {
          json_decref(j);
          return st;
        }
        if (json_array_append_new(items, c) != 0) {
          json_decref(j);
          return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
        }
      }
      *out = j;
      return FH_OK;
    }
  }
}

static fh_status encode_into(const fh_tree_sig *sig, fh_tensor *const *leaves, bool allow_secret, enc *e,
                             char **header, size_t *hlen) {
  memset(e, 0, sizeof *e);
  e->allow_secret = allow_secret;
  e->contexts = json_object();
  if (e->contexts == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
  if (sig == NULL || (sig->nleaves > 0 && leaves == NULL))
    return fh_error_set(FH_ERR_VALUE, "value file: nothing to write");
  int64_t li = 0;
  json_t *tree = NULL;
  fh_status st = enc_node(e, sig, leaves, &li, "", &tree);
  if (st != FH_OK) return st;
  char *tree_s = json_dumps(tree, JSON_COMPACT);
  char *ctx_s = json_dumps(e->contexts, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(tree);
  char schema[16];
  snprintf(schema, sizeof schema, "%d", FH_FILE_SCHEMA_VERSION);
  const char *mk[] = {KEY_FORMAT, KEY_SCHEMA, KEY_TREE, KEY_CONTEXTS};
  const char *mv[] = {FORMAT_NAME, schema, tree_s, ctx_s};
  if (tree_s == NULL || ctx_s == NULL) st = fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
  char *h = NULL;
  size_t l = 0;
  if (st == FH_OK) st = fh_st_build_header(e->entries, e->n, mk, mv, 4, &h, &l);
  fh_free(tree_s);
  fh_free(ctx_s);
  if (st != FH_OK) return st;
  char *full = fh_malloc(l + 8);
  if (full == NULL) {
    fh_free(h);
    return fh_error_set(FH_ERR_MEMORY, "out of memory encoding a value file");
  }
  for (int i = 0; i < 8; ++i) full[i] = (char)((uint64_t)l >> (8 * i));
  memcpy(full + 8, h, l);
  fh_free(h);
  *header = full;
  *hlen = l + 8;
  return FH_OK;
}

/* The header (prefix included) for a tree; e->tensors lists the leaves to
 * write after it, in order. On success the caller owns *header (free) and
 * e (enc_free); on failure nothing is left to free. */
static fh_status encode(const fh_tree_sig *sig, fh_tensor *const *leaves, bool allow_secret, enc *e, char **header,
                        size_t *hlen) {
  fh_status st = encode_into(sig, leaves, allow_secret, e, header, hlen);
  if (st != FH_OK) enc_free(e);
  return st;
}

/* The single value of a tree for format fhelium-0.30 (a new reference). */
static fh_status single_value(const fh_tree_sig *sig, fh_tensor *const *leaves, fh_value **out) {
  if (sig == NULL) return fh_error_set(FH_ERR_VALUE, "value file: nothing to write");
  if (sig->kind != FH_TREE_VALUE)
    return fh_error_set(FH_ERR_VALUE,
                        "format fhelium-0.30 holds exactly one value (a Plaintext, Ciphertext or key), got a %s",
                        fh_tree_kind_name((fh_tree_kind)sig->kind));
  return fh_value_sig_build(&sig->value, leaves, out);
}

static fh_status encode_030(const fh_tree_sig *sig, fh_tensor *const *leaves, bool allow_secret, fh__v030_file *f) {
  fh_value *v = NULL;
  fh_status st = single_value(sig, leaves, &v);
  if (st != FH_OK) return st;
  st = fh__v030_encode(v, allow_secret, f);
  fh_value_release(v);
  return st;
}

fh_status fh_tree_serialize_as(const fh_tree_sig *sig, fh_tensor *const *leaves, bool allow_secret,
                               fh_file_format format, unsigned char **bytes, size_t *nbytes) {
  if (format == FH_FORMAT_FHELIUM) return fh_tree_serialize(sig, leaves, allow_secret, bytes, nbytes);
  if (format != FH_FORMAT_FHELIUM_030) return fh_error_set(FH_ERR_VALUE, "unknown value file format %d", (int)format);
  fh__v030_file f;
  fh_status st = encode_030(sig, leaves, allow_secret, &f);
  if (st != FH_OK) return st;
  size_t total = f.hlen;
  for (int i = 0; i < f.npayloads; ++i) total += f.nbytes[i];
  unsigned char *buf = fh_malloc(total);
  if (buf == NULL) {
    fh__v030_file_free(&f);
    return fh_error_set(FH_ERR_MEMORY, "out of memory serializing %zu bytes", total);
  }
  memcpy(buf, f.header, f.hlen);
  size_t off = f.hlen;
  for (int i = 0; i < f.npayloads; ++i) {
    memcpy(buf + off, f.payload[i], f.nbytes[i]);
    off += f.nbytes[i];
  }
  fh__v030_file_free(&f);
  *bytes = buf;
  *nbytes = total;
  return FH_OK;
}

fh_status fh_tree_serialize(const fh_tree_sig *sig, fh_tensor *const *leaves, bool allow_secret, unsigned char **bytes,
                            size_t *nbytes) {
  enc e;
  char *h = NULL;
  size_t hl = 0;
  fh_status st = encode(sig, leaves, allow_secret, &e, &h, &hl);
  if (st != FH_OK) return st;
  size_t total = hl;
  for (int64_t i = 0; i < e.n; ++i) total += e.entries[i].nbytes;
  unsigned char *buf = fh_malloc(total ? total : 1);
  if (buf == NULL) {
    fh_free(h);
    enc_free(&e);
    return fh_error_set(FH_ERR_MEMORY, "out of memory serializing %zu bytes", total);
  }
  memcpy(buf, h, hl);
  fh_free(h);
  size_t off = hl;
  for (int64_t i = 0; i < e.n && st == FH_OK; ++i) {
    st = fh_tensor_read(e.tensors[i], buf + off);
    off += e.entries[i].nbytes;
  }
  enc_free(&e);
  if (st != FH_OK) {
    fh_free(buf);
    return st;
  }
  *bytes = buf;
  *nbytes = total;
  return FH_OK;
}

/* ---- files ----------------------------------------------------------------------- */
/* Every failure of the operating system while opening, reading, writing,
 * syncing or renaming a file is an IOError naming the path and giving
 * strerror; the binding puts the name of the function the user called
 * (fh.save, fh.load) in front. */
#define IOERR(...) fh_error_set(FH_ERR_IO, __VA_ARGS__)

/* What a file that is not a regular file is, for messages. */
static const char *file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISLNK(m)) return "a symbolic link";
  return "a special file";
}

static fh_status write_all(int fd, const void *p, size_t n, const char *path) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = fh_write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return IOERR("cannot write '%s': %s", path, w < 0 ? strerror(errno) : "the write made no progress");
    c += w;
    n -= (size_t)w;
  }
  return FH_OK;
}

/* The target of a save may be missing, a regular file or a symbolic link
 * (replaced, never followed); a directory, a FIFO, a socket or a device is
 * refused before anything is written (a FIFO would otherwise be replaced,
 * and `rename` cannot replace a directory). */
static fh_status check_target(const char *path, bool overwrite) {
  struct stat sb;
  if (lstat(path, &sb) != 0) {
    if (errno == ENOENT) return FH_OK;
    return IOERR("cannot write '%s': %s", path, strerror(errno));
  }
  if (S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode)) {
    if (!overwrite) return fh_error_set(FH_ERR_VALUE, "'%s' exists (pass overwrite=true to replace it)", path);
    return FH_OK;
  }
  if (S_ISDIR(sb.st_mode)) {
    /* with overwrite=true the rename reports it (EISDIR) after the write */
    if (!overwrite) return IOERR("cannot write '%s': %s", path, strerror(EISDIR));
    return FH_OK;
  }
  return IOERR("cannot replace '%s': it is %s, not a regular file", path, file_kind(sb.st_mode));
}

/* What a save writes after the header: the tensors of an encoding (read
 * one at a time) or buffers. */
typedef struct parts {
  int64_t n;
  fh_tensor *const *tensors; /* or NULL */
  const fh_st_entry *entries;
  unsigned char *const *bufs;
  const size_t *sizes;
} parts;

/* Write h then the parts atomically to path (see fh/value_io.h). Frees h. */
static fh_status save_parts(const char *path, bool overwrite, char *h, size_t hl, const parts *pp) {
  fh_status st;
  if ((st = check_target(path, overwrite)) != FH_OK) {
    fh_free(h);
    return st;
  }
  char *tmp = str_concat(path, ".tmp-XXXXXX");
  if (tmp == NULL) {
    fh_free(h);
    return fh_error_set(FH_ERR_MEMORY, "out of memory");
  }
  int fd = fh_mkstemp(tmp); /* mode 0600 */
  if (fd < 0) {
    st = IOERR("cannot create a temporary file next to '%s': %s", path, strerror(errno));
    fh_free(tmp);
    fh_free(h);
    return st;
  }
  if (fchmod(fd, 0600) != 0) st = IOERR("cannot chmod the temporary file '%s': %s", tmp, strerror(errno));
  if (st == FH_OK) st = write_all(fd, h, hl, path);
  fh_free(h);
  for (int64_t i = 0; i < pp->n && st == FH_OK; ++i) {
    if (pp->tensors == NULL) {
      st = write_all(fd, pp->bufs[i], pp->sizes[i], path);
      continue;
    }
    size_t nb = pp->entries[i].nbytes;
    if (nb == 0) continue;
    void *buf = fh_malloc(nb);
    if (buf == NULL) {
      st = fh_error_set(FH_ERR_MEMORY, "out of memory writing '%s'", path);
      break;
    }
    st = fh_tensor_read(pp->tensors[i], buf);
    if (st == FH_OK) st = write_all(fd, buf, nb, path);
    fh_free(buf);
  }
  if (st == FH_OK && fh_fsync(fd) != 0) st = IOERR("cannot fsync '%s': %s", path, strerror(errno));
  if (fh_close_written(fd) != 0 && st == FH_OK) st = IOERR("cannot close '%s': %s", path, strerror(errno));
  if (st == FH_OK) {
    if (overwrite) {
      if (fh_rename(tmp, path) != 0)
        st = IOERR("cannot rename the temporary file onto '%s': %s", path, strerror(errno));
    } else {
      if (fh_link(tmp, path) != 0)
        st = errno == EEXIST ? fh_error_set(FH_ERR_VALUE, "'%s' exists (pass overwrite=true to replace it)", path)
                             : IOERR("cannot create '%s': %s", path, strerror(errno));
    }
  }
  unlink(tmp); /* after link or on failure; a no-op after rename */
  fh_free(tmp);
  if (st != FH_OK) return st;
  /* the new directory entry must be durable too; a directory that cannot
   * be opened for reading (mode -wx) is left to the file system */
  char *dcopy = fh_strdup(path);
  if (dcopy == NULL) return FH_OK; /* the file is in place; its directory entry is left to the file system */
  int dfd = fh_open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    if (fh_fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP)
      st = IOERR("'%s' is written but its directory cannot be fsync'ed: %s", path, strerror(errno));
    close(dfd);
  }
  fh_free(dcopy);
  return st;
}

fh_status fh_tree_save(const fh_tree_sig *sig, fh_tensor *const *leaves, const char *path, bool overwrite,
                       bool allow_secret) {
  return fh_tree_save_as(sig, leaves, path, overwrite, allow_secret, FH_FORMAT_FHELIUM);
}

fh_status fh_tree_save_as(const fh_tree_sig *sig, fh_tensor *const *leaves, const char *path, bool overwrite,
                          bool allow_secret, fh_file_format format) {
  if (path == NULL || *path == '\0') return fh_error_set(FH_ERR_VALUE, "save: empty path");
  fh_status st;
  if (format == FH_FORMAT_FHELIUM_030) {
    fh__v030_file f;
    if ((st = encode_030(sig, leaves, allow_secret, &f)) != FH_OK) return st;
    parts pp = {f.npayloads, NULL, NULL, f.payload, f.nbytes};
    char *h = f.header;
    f.header = NULL; /* save_parts frees it */
    st = save_parts(path, overwrite, h, f.hlen, &pp);
    fh__v030_file_free(&f);
    return st;
  }
  if (format != FH_FORMAT_FHELIUM) return fh_error_set(FH_ERR_VALUE, "unknown value file format %d", (int)format);
  enc e;
  char *h = NULL;
  size_t hl = 0;
  if ((st = encode(sig, leaves, allow_secret, &e, &h, &hl)) != FH_OK) return st;
  parts pp = {e.n, e.tensors, e.entries, NULL, NULL};
  st = save_parts(path, overwrite, h, hl, &pp);
  enc_free(&e);
  return st;
}

/* ---- decoding ----------------------------------------------------------------- */
typedef struct dec {
  const fh_st_header *h;
  const unsigned char *mem; /* whole input, or NULL for a file */
  int fd;
  const char *what; /* for messages: the path of a file */
  uint64_t size;    /* of the file, as fstat said */
  fh_device dev;
  json_t *contexts; /* borrowed from the parsed metadata */
  fh_ckks_context *ctxs[FH_CKKS_MAX_PRIMES]; /* contexts built so far (owned) */
  int nctx;
  bool *used;
  fh_tensor **leaves;
  int64_t nleaves, cap;
  fh_path path;
  fh_ckks_context *hint; /* context= for FHElium 0.30 files (borrowed), or NULL */
} dec;

static const char *dpath(const dec *d, char *buf, size_t n) { return fh_path_format(&d->path, "value", buf, n); }

#define BAD(d, ...)                                                                     \
  do {                                                                                  \
    char p_[600];                                                                       \
    char m_[700];                                                                       \
    snprintf(m_, sizeof m_, __VA_ARGS__);                                              \
    return fh_error_set(FH_ERR_VALUE, "corrupt value file at %s: %s", dpath(d, p_, sizeof p_), m_); \
  } while (0)

static fh_status read_at(const dec *d, uint64_t off, void *dst, size_t n) {
  if (n == 0) return FH_OK;
  if (d->mem) {
    memcpy(dst, d->mem + off, n);
    return FH_OK;
  }
  char *c = dst;
  while (n > 0) {
    ssize_t r = fh_pread(d->fd, c, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return IOERR("cannot read '%s': %s", d->what, strerror(errno));
    if (r == 0)
      return IOERR("cannot read '%s': unexpected end of file at byte %llu (the file is shorter than its size, %llu "
                   "bytes, said)",
                   d->what, (unsigned long long)off, (unsigned long long)d->size);
    c += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return FH_OK;
}

static fh_status push_leaf(dec *d, fh_tensor *t) {
  if (d->nleaves == d->cap) {
    int64_t cap = d->cap ? 2 * d->cap : 16;
    fh_tensor **l = fh_realloc(d->leaves, sizeof *l * (size_t)cap);
    if (l == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory loading a value file");
    d->leaves = l;
    d->cap = cap;
  }
  fh_tensor_retain(t);
  d->leaves[d->nleaves++] = t;
  return FH_OK;
}

/* A new tensor from {"tensor": NAME, "dtype": D, "requires_grad": B}. */
static fh_status dec_tensor(dec *d, json_t *j, const char *role, fh_tensor **out) {
  if (!json_is_object(j)) BAD(d, "%s is not an object", role);
  json_t *jn = json_object_get(j, "tensor"), *jd = json_object_get(j, "dtype"), *jg = json_object_get(j, "requires_grad");
  size_t expect = 2 + (json_object_get(j, "kind") ? 1 : 0) + (jg ? 1 : 0);
  if (!jstr(jn) || !jstr(jd) || (jg && !json_is_boolean(jg)) || json_object_size(j) != expect)
    BAD(d, "%s must be {\"tensor\": name, \"dtype\": dtype, \"requires_grad\": flag}", role);
  const char *name = json_string_value(jn);
  const fh_st_tensor *e = fh_st_header_find(d->h, name);
  if (e == NULL) BAD(d, "tensor '%.80s' is not in the file", name);
  int64_t idx = e - d->h->tensors;
  if (d->used[idx]) BAD(d, "tensor '%.80s' is used twice", name);
  fh_dtype dt = FH_BOOL;
  if (fh_dtype_parse(json_string_value(jd), &dt) != FH_OK) BAD(d, "unknown dtype '%.32s'", json_string_value(jd));
  int64_t shape[FH_MAX_DIMS + 1];
  int nd = e->ndim;
  memcpy(shape, e->shape, sizeof(int64_t) * (size_t)nd);
  if (dt == FH_COMPLEX128) {
    if (e->dtype != FH_FLOAT64 || nd < 1 || shape[nd - 1] != 2)
      BAD(d, "tensor '%.80s' should hold complex128 as F64 with a trailing dimension of 2", name);
    --nd;
  } else if (e->dtype != (int32_t)dt) {
    BAD(d, "tensor '%.80s' is stored as %s but recorded as %s", name, fh_st_dtype_name((fh_dtype)e->dtype),
        fh_dtype_name(dt));
  }
  if (nd > FH_MAX_DIMS) BAD(d, "tensor '%.80s' has more than %d dimensions", name, FH_MAX_DIMS);
  d->used[idx] = true;
  fh_tensor_options o = fh_tensor_options_default();
  o.dtype = dt;
  o.device = fh_cpu();
  fh_tensor *t = NULL;
  fh_status st = fh_tensor_empty(nd, shape, &o, &t);
  if (st != FH_OK) return st;
  if (fh_tensor_nbytes(t) != e->end - e->begin) {
    fh_tensor_release(t);
    BAD(d, "tensor '%.80s' has an inconsistent size", name);
  }
  st = read_at(d, d->h->data_start + e->begin, t->storage->data, fh_tensor_nbytes(t));
  if (st == FH_OK && d->dev.type != FH_DEVICE_CPU) {
    fh_tensor *m = NULL;
    st = fh_tensor_to(t, d->dev, false, NULL, false, &m);
    fh_tensor_release(t);
    t = m;
  }
  if (st != FH_OK) {
    if (t) fh_tensor_release(t);
    return st;
  }
  t->requires_grad = jg ? json_is_true(jg) : false;
  *out = t;
  return FH_OK;
}

static fh_status dec_context(dec *d, const char *id, fh_ckks_context **out) {
  for (int i = 0; i < d->nctx; ++i)
    if (strcmp(d->ctxs[i]->id, id) == 0) {
      *out = d->ctxs[i];
      return FH_OK;
    }
  if (d->nctx == FH_CKKS_MAX_PRIMES) BAD(d, "too many contexts");
  json_t *c = d->contexts ? json_object_get(d->contexts, id) : NULL;
  fh_ckks_context *ctx = NULL;
  if (c == NULL) {
    /* not described in the file: a live one will do */
    if (fh_ckks_context_lookup(id, &ctx) != FH_OK) BAD(d, "context_id '%.80s' is neither in the file nor live", id);
  } else {
    json_t *jn = json_object_get(c, "ring_degree"), *js = json_object_get(c, "default_scale");
    json_t *jq = json_object_get(c, "q_primes"), *jp = json_object_get(c, "p_primes");
    /* optional, present when not the default (fh_ckks_context_spec) */
    json_t *jg = json_object_get(c, "galois_generator"), *jl = json_object_get(c, "max_level");
    json_t *jk = json_object_get(c, "key_digits");
    size_t nkeys = 4 + (jg != NULL) + (jl != NULL) + (jk != NULL);
    if (!json_is_object(c) || json_object_size(c) != nkeys || !json_is_integer(jn) || !json_is_number(js) ||
        !json_is_array(jq) || !json_is_array(jp) || (jg && !json_is_integer(jg)) || (jl && !json_is_integer(jl)) ||
        (jk && !jstr(jk)))
      BAD(d,
          "context '%.80s' must be {ring_degree, default_scale, q_primes, p_primes} and optionally galois_generator, "
          "max_level, key_digits",
          id);
    size_t nq = json_array_size(jq), np = json_array_size(jp);
    if (nq + np > FH_CKKS_MAX_PRIMES) BAD(d, "context '%.80s' has %zu primes (at most %d)", id, nq + np, FH_CKKS_MAX_PRIMES);
    uint64_t q[FH_CKKS_MAX_PRIMES], p[FH_CKKS_MAX_PRIMES];
    for (size_t i = 0; i < nq + np; ++i) {
      json_t *v = i < nq ? json_array_get(jq, i) : json_array_get(jp, i - nq);
      if (!json_is_integer(v) || json_integer_value(v) < 0) BAD(d, "context '%.80s': primes must be integers", id);
      if (i < nq) q[i] = (uint64_t)json_integer_value(v);
      else p[i - nq] = (uint64_t)json_integer_value(v);
    }
    fh_key_digits kd = FH_DIGITS_DEFAULT;
    if (jk && fh_key_digits_parse(json_string_value(jk), &kd) != FH_OK) {
      fh_error_clear();
      BAD(d, "context '%.80s': key_digits must be \"p_count\" or \"below_p\"", id);
    }
    json_int_t gen = jg ? json_integer_value(jg) : 5, lvl = jl ? json_integer_value(jl) : (json_int_t)nq - 2;
    if (gen != 5 && gen != 3) BAD(d, "context '%.80s': galois_generator must be 5 or 3", id);
    if (lvl != (json_int_t)nq - 2 && lvl != (json_int_t)nq - 1)
      BAD(d, "context '%.80s': max_level must be #q_primes - 2 or #q_primes - 1", id);
    fh_ckks_context_spec s = {(int64_t)json_integer_value(jn), json_number_value(js), (int32_t)nq, (int32_t)np, q, p,
                              false, (int32_t)gen, lvl == (json_int_t)nq - 1, kd};
    if (fh_ckks_context_new(&s, &ctx) != FH_OK) {
      char p_[600];
      fh_error_prefix("corrupt value file at %s: context '%.16s'", dpath(d, p_, sizeof p_), id);
      return FH_ERR_VALUE;
    }
    if (strcmp(ctx->id, id) != 0) {
      fh_ckks_context_release(ctx);
      BAD(d, "context parameters do not hash to their id '%.80s'", id);
    }
  }
  d->ctxs[d->nctx++] = ctx;
  *out = ctx;
  return FH_OK;
}

static fh_status dec_value(dec *d, json_t *j, fh_tree_sig **out) {
  static const char *const keys[] = {"kind", "value_type", "schema_version", "context_id", "metadata", "tensors"};
  for (size_t i = 0; i < 6; ++i)
    if (json_object_get(j, keys[i]) == NULL) BAD(d, "value node has no '%s'", keys[i]);
  if (json_object_size(j) != 6) BAD(d, "value node has unknown keys");
  json_t *jt = json_object_get(j, "value_type"), *jv = json_object_get(j, "schema_version");
  json_t *jc = json_object_get(j, "context_id"), *jm = json_object_get(j, "metadata"), *js = json_object_get(j, "tensors");
  if (!jstr(jt)) BAD(d, "value_type is not a string");
  fh_value_type type = FH_PLAINTEXT;
  if (fh_value_type_parse(json_string_value(jt), &type) != FH_OK)
    BAD(d, "unknown value type '%.64s'", json_string_value(jt));
  if (!json_is_integer(jv) || json_integer_value(jv) != FH_VALUE_SCHEMA_VERSION)
    BAD(d, "unsupported value schema_version (this fhelium reads %d)", FH_VALUE_SCHEMA_VERSION);
  if (!jstr(jc)) BAD(d, "context_id is not a string");
  if (!json_is_object(jm)) BAD(d, "metadata is not an object");
  if (!json_is_object(js) || json_object_size(js) < 1 || json_object_size(js) > FH_VALUE_MAX_TENSORS)
    BAD(d, "tensors must be an object of 1 to %d tensors", FH_VALUE_MAX_TENSORS);
  if (json_object_size(jm) > FH_META_MAX) BAD(d, "metadata has too many fields");
  fh_meta_entry m[FH_META_MAX];
  int32_t lists[FH_META_MAX][FH_CKKS_MAX_PRIMES];
  int n = 0;
  const char *k;
  json_t *v;
  json_object_foreach(jm, k, v) {
    fh_meta_entry *e = &m[n];
    memset(e, 0, sizeof *e);
    e->key = k;
    if (json_is_integer(v)) {
      e->kind = FH_META_INT;
      e->i = (int64_t)json_integer_value(v);
    } else if (json_is_real(v)) {
      e->kind = FH_META_REAL;
      e->r = json_real_value(v);
    } else if (jstr(v)) {
      e->kind = FH_META_STRING;
      e->s = json_string_value(v);
    } else if (json_is_array(v)) {
      size_t len = json_array_size(v);
      if (len > FH_CKKS_MAX_PRIMES) BAD(d, "metadata field '%.64s' lists %zu entries", k, len);
      for (size_t i = 0; i < len; ++i) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < INT32_MIN || json_integer_value(x) > INT32_MAX)
          BAD(d, "metadata field '%.64s' must list 32-bit integers", k);
        lists[n][i] = (int32_t)json_integer_value(x);
      }
      e->kind = FH_META_INT_LIST;
      e->list = lists[n];
      e->nlist = (int32_t)len;
    } else {
      BAD(d, "metadata field '%.64s' has an unsupported JSON type", k);
    }
    ++n;
  }
  fh_ckks_context *ctx = NULL;
  const char *cid = json_string_value(jc);
  fh_status st;
  if (*cid && (st = dec_context(d, cid, &ctx)) != FH_OK) return st;
  fh_tensor *ts[FH_VALUE_MAX_TENSORS] = {0};
  const char *names[FH_VALUE_MAX_TENSORS];
  int nt = 0;
  st = FH_OK;
  json_object_foreach(js, k, v) {
    names[nt] = k;
    char role[96];
    snprintf(role, sizeof role, "tensor '%.64s'", k);
    if ((st = dec_tensor(d, v, role, &ts[nt])) != FH_OK) break;
    ++nt;
  }
  fh_value *val = NULL;
  if (st == FH_OK) st = fh_value_from_metadata(ctx, type, m, n, false, ts, names, nt, &val);
  if (st != FH_OK && fh_error_status() != FH_ERR_MEMORY && strncmp(fh_error_message(), "corrupt", 7) != 0) {
    char p_[600];
    fh_error_prefix("corrupt value file at %s", dpath(d, p_, sizeof p_));
  }
  for (int i = 0; i < nt; ++i) fh_tensor_release(ts[i]);
  if (st != FH_OK) return st;
  st = fh_tree_sig_value(val, out);
  bool made = st == FH_OK;
  for (int i = 0; st == FH_OK && i < val->ntensors; ++i) st = push_leaf(d, val->tensors[i]);
  fh_value_release(val);
  if (st != FH_OK && made) {
    /* a failed node returns no signature (its leaves already pushed are the decoder's) */
    fh_tree_sig_release(*out);
    *out = NULL;
  }
  return st;
}

static fh_status dec_node(dec *d, json_t *j, int depth, fh_tree_sig **out) {
  if (depth > FH_TREE_MAX_DEPTH) BAD(d, "tree nesting deeper than %d levels", FH_TREE_MAX_DEPTH);
  if (!json_is_object(j)) BAD(d, "tree node is not an object");
  json_t *jk = json_object_get(j, "kind");
  if (!jstr(jk)) BAD(d, "tree node has no kind");
  const char *kind = json_string_value(jk);
  fh_status st;
  if (strcmp(kind, "tensor") == 0) {
    fh_tensor *t = NULL;
    if ((st = dec_tensor(d, j, "tensor node", &t)) != FH_OK) return st;
    st = fh_tree_sig_tensor(t, out);
    if (st == FH_OK && (st = push_leaf(d, t)) != FH_OK) {
      fh_tree_sig_release(*out);
      *out = NULL;
    }
    fh_tensor_release(t);
    return st;
  }
  if (strcmp(kind, "value") == 0) return dec_value(d, j, out);
  fh_tree_kind k;
  if (strcmp(kind, "list") == 0) k = FH_TREE_LIST;
  else if (strcmp(kind, "tuple") == 0) k = FH_TREE_TUPLE;
  else if (strcmp(kind, "dict") == 0) k = FH_TREE_DICT;
  else BAD(d, "unknown tree node kind '%.32s'", kind);
  json_t *items = json_object_get(j, "items"), *keys = json_object_get(j, "keys");
  if (!json_is_array(items)) BAD(d, "%s node has no items", kind);
  if (json_object_size(j) != (size_t)(k == FH_TREE_DICT ? 3 : 2)) BAD(d, "%s node has unknown keys", kind);
  size_t n = json_array_size(items);
  if (k == FH_TREE_DICT && (!json_is_array(keys) || json_array_size(keys) != n))
    BAD(d, "dict node needs as many keys as items");
  fh_tree_sig **children = fh_calloc(n ? n : 1, sizeof *children);
  const char **kp = fh_calloc(n ? n : 1, sizeof *kp);
  size_t *kl = fh_calloc(n ? n : 1, sizeof *kl);
  if (children == NULL || kp == NULL || kl == NULL) {
    fh_free(children);
    fh_free(kp);
    fh_free(kl);
    return fh_error_set(FH_ERR_MEMORY, "out of memory loading a value file");
  }
  st = FH_OK;
  size_t done = 0;
  for (size_t i = 0; i < n; ++i) {
    fh_path_seg *seg = &d->path.seg[d->path.depth];
    if (k == FH_TREE_DICT) {
      json_t *key = json_array_get(keys, i);
      if (!json_is_string(key)) {
        char p_[600];
        st = fh_error_set(FH_ERR_VALUE, "corrupt value file at %s: dict keys must be strings", dpath(d, p_, sizeof p_));
        break;
      }
      kp[i] = json_string_value(key);
      kl[i] = json_string_length(key);
      if (i > 0) {
        size_t m = kl[i] < kl[i - 1] ? kl[i] : kl[i - 1];
        int c = memcmp(kp[i - 1], kp[i], m);
        if (c > 0 || (c == 0 && kl[i - 1] >= kl[i])) {
          char p_[600];
          st = fh_error_set(FH_ERR_VALUE, "corrupt value file at %s: dict keys are not sorted and unique",
                            dpath(d, p_, sizeof p_));
          break;
        }
      }
      seg->is_key = 1;
      seg->key = kp[i];
      seg->key_len = kl[i];
    } else {
      seg->is_key = 0;
      seg->index = (int64_t)i;
    }
    d->path.depth++;
    st = dec_node(d, json_array_get(items, i), depth + 1, &children[i]);
    d->path.depth--;
    if (st != FH_OK) break;
    done = i + 1;
  }
  if (st != FH_OK) {
    for (size_t i = 0; i < done; ++i) fh_tree_sig_release(children[i]);
    fh_free(children);
    fh_free(kp);
    fh_free(kl);
    return st;
  }
  st = fh_tree_sig_container(k, (int64_t)n, children, k == FH_TREE_DICT ? kp : NULL, k == FH_TREE_DICT ? kl : NULL, out);
  fh_free(children);
  fh_free(kp);
  fh_free(kl);
  return st;
}

/* A plain safetensors file: a dict of its tensors. */
static fh_status dec_plain(dec *d, fh_tree_sig **out) {
  int64_t n = d->h->ntensors;
  fh_tree_sig **children = fh_calloc(n ? (size_t)n : 1, sizeof *children);
  const char **kp = fh_calloc(n ? (size_t)n : 1, sizeof *kp);
  if (children == NULL || kp == NULL) {
    fh_free(children);
    fh_free(kp);
    return fh_error_set(FH_ERR_MEMORY, "out of memory loading a value file");
  }
  /* leaf order follows the sorted keys: the header's name index (bytewise,
   * as dict keys sort) */
  const int64_t *idx = d->h->by_name;
  fh_status st = FH_OK;
  int64_t done = 0;
  for (int64_t i = 0; st == FH_OK && i < n; ++i) {
    const fh_st_tensor *e = &d->h->tensors[idx[i]];
    json_t *j = json_pack("{s:s, s:s}", "tensor", e->name, "dtype", fh_dtype_name((fh_dtype)e->dtype));
    fh_tensor *t = NULL;
    st = j ? dec_tensor(d, j, "tensor", &t) : fh_error_set(FH_ERR_MEMORY, "out of memory");
    json_decref(j);
    if (st == FH_OK) st = fh_tree_sig_tensor(t, &children[i]);
    if (st == FH_OK) {
      st = push_leaf(d, t);
      if (st == FH_OK) done = i + 1;
      else fh_tree_sig_release(children[i]);
    }
    if (t) fh_tensor_release(t);
    kp[i] = e->name;
  }
  if (st == FH_OK) {
    st = fh_tree_sig_container(FH_TREE_DICT, n, children, kp, NULL, out);
  } else {
    for (int64_t i = 0; i < done; ++i) fh_tree_sig_release(children[i]);
  }
  fh_free(children);
  fh_free(kp);
  return st;
}

static fh_status read_030(const void *rctx, uint64_t off, void *dst, size_t n) { return read_at(rctx, off, dst, n); }

/* An FHElium 0.30 file: one value. */
static fh_status decode_030(dec *d, fh_tree_sig **sig, fh_tensor ***leaves) {
  fh_value *v = NULL;
  fh_status st = fh__v030_decode(d->h, read_030, d, d->dev, d->hint, &v);
  if (st != FH_OK) return st;
  fh_tree_sig *root = NULL;
  st = fh_tree_sig_value(v, &root);
  for (int i = 0; st == FH_OK && i < v->ntensors; ++i) st = push_leaf(d, v->tensors[i]);
  fh_value_release(v);
  if (st != FH_OK) {
    if (root) fh_tree_sig_release(root);
    fh_value_io_free_leaves(d->leaves, d->nleaves);
    return st;
  }
  *sig = root;
  *leaves = d->leaves;
  return FH_OK;
}

static fh_status decode(dec *d, fh_tree_sig **sig, fh_tensor ***leaves) {
  if (fh__v030_is(d->h)) return decode_030(d, sig, leaves);
  fh_status st = FH_OK;
  json_t *tree = NULL;
  const char *fmt = fh_st_header_meta(d->h, KEY_FORMAT);
  const char *schema = fh_st_header_meta(d->h, KEY_SCHEMA);
  const char *tree_s = fh_st_header_meta(d->h, KEY_TREE);
  const char *ctx_s = fh_st_header_meta(d->h, KEY_CONTEXTS);
  d->used = fh_calloc(d->h->ntensors ? (size_t)d->h->ntensors : 1, sizeof *d->used);
  if (d->used == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory loading a value file");
  fh_tree_sig *root = NULL;
  if (tree_s == NULL && schema == NULL && ctx_s == NULL && (fmt == NULL || strcmp(fmt, FORMAT_NAME) != 0)) {
    st = dec_plain(d, &root);
    goto done;
  }
  char expect[16];
  snprintf(expect, sizeof expect, "%d", FH_FILE_SCHEMA_VERSION);
  if (schema == NULL || strcmp(schema, expect) != 0) {
    st = fh_error_set(FH_ERR_VALUE,
                      "unsupported value file: fhelium.schema_version is %.16s%s%s (this fhelium reads %s, and "
                      "FHElium 0.30's schema 2 with fhelium.format \"fhelium-value\")",
                      schema ? "\"" : "", schema ? schema : "missing", schema ? "\"" : "", expect);
    goto done;
  }
  if (d->hint) {
    st = fh_error_set(FH_ERR_VALUE,
                      "context: this is an fhelium value file (schema %s), which records its contexts; context= is "
                      "for FHElium 0.30 files",
                      expect);
    goto done;
  }
  if (tree_s == NULL) {
    st = fh_error_set(FH_ERR_VALUE, "corrupt value file: __metadata__ has no %s", KEY_TREE);
    goto done;
  }
  json_error_t jerr;
  json_t *ctxs = NULL;
  if (ctx_s) {
    ctxs = json_loads(ctx_s, JSON_REJECT_DUPLICATES, &jerr);
    if (ctxs == NULL && json_error_code(&jerr) == json_error_out_of_memory) {
      st = fh_error_set(FH_ERR_MEMORY, "out of memory reading a value file's %s", KEY_CONTEXTS);
      goto done;
    }
    if (ctxs == NULL || !json_is_object(ctxs)) {
      json_decref(ctxs);
      st = fh_error_set(FH_ERR_VALUE, "corrupt value file: %s is not a JSON object", KEY_CONTEXTS);
      goto done;
    }
  }
  d->contexts = ctxs;
  /* dict keys may hold NUL bytes (Lua strings do); every other string is
   * checked with jstr */
  tree = json_loads(tree_s, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
  if (tree == NULL && json_error_code(&jerr) == json_error_out_of_memory) {
    st = fh_error_set(FH_ERR_MEMORY, "out of memory reading a value file's %s", KEY_TREE);
    goto done;
  }
  if (tree == NULL) {
    st = fh_error_set(FH_ERR_VALUE, "corrupt value file: %s is not valid JSON (%.120s)", KEY_TREE, jerr.text);
    goto done;
  }
  st = dec_node(d, tree, 1, &root);
  if (st == FH_OK)
    for (int64_t i = 0; i < d->h->ntensors; ++i)
      if (!d->used[i]) {
        st = fh_error_set(FH_ERR_VALUE, "corrupt value file: tensor '%.80s' is not part of the value tree",
                          d->h->tensors[i].name);
        break;
      }
done:
  json_decref(tree);
  json_decref(d->contexts);
  for (int i = 0; i < d->nctx; ++i) fh_ckks_context_release(d->ctxs[i]);
  fh_free(d->used);
  if (st == FH_OK && root->nleaves != d->nleaves)
    st = fh_error_set(FH_ERR_VALUE, "corrupt value file: leaf count mismatch");
  if (st != FH_OK) {
    if (root) fh_tree_sig_release(root);
    fh_value_io_free_leaves(d->leaves, d->nleaves);
    return st;
  }
  if (d->leaves == NULL) d->leaves = fh_malloc(sizeof(fh_tensor *));
  *sig = root;
  *leaves = d->leaves;
  return FH_OK;
}

void fh_value_io_free_leaves(fh_tensor **leaves, int64_t n) {
  if (leaves == NULL) return;
  for (int64_t i = 0; i < n; ++i) fh_tensor_release(leaves[i]);
  fh_free(leaves);
}

fh_status fh_tree_deserialize(const void *bytes, size_t nbytes, fh_device dev, fh_tree_sig **sig, fh_tensor ***leaves) {
  return fh_tree_deserialize_with(bytes, nbytes, dev, NULL, sig, leaves);
}

fh_status fh_tree_deserialize_with(const void *bytes, size_t nbytes, fh_device dev, fh_ckks_context *context,
                                   fh_tree_sig **sig, fh_tensor ***leaves) {
  if (bytes == NULL && nbytes > 0) return fh_error_set(FH_ERR_VALUE, "deserialize: no input");
  uint64_t hl = 0;
  fh_status st = fh_st_header_length(bytes, nbytes, &hl);
  if (st != FH_OK) return st;
  fh_st_header h;
  if ((st = fh_st_parse_header((const char *)bytes + 8, (size_t)hl, nbytes, &h)) != FH_OK) return st;
  dec d;
  memset(&d, 0, sizeof d);
  d.h = &h;
  d.mem = bytes;
  d.fd = -1;
  d.what = "the serialized bytes";
  d.dev = dev;
  d.hint = context;
  st = decode(&d, sig, leaves);
  fh_st_header_free(&h);
  return st;
}

fh_status fh_tree_load(const char *path, fh_device dev, fh_tree_sig **sig, fh_tensor ***leaves) {
  return fh_tree_load_with(path, dev, NULL, sig, leaves);
}

fh_status fh_tree_load_with(const char *path, fh_device dev, fh_ckks_context *context, fh_tree_sig **sig,
                            fh_tensor ***leaves) {
  if (path == NULL) return fh_error_set(FH_ERR_VALUE, "load: no path");
  /* O_NONBLOCK: opening a FIFO must not wait for a writer (and O_NOCTTY: a
   * terminal never becomes ours); the type is checked before any read */
  int fd = fh_open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return IOERR("cannot open '%s': %s", path, strerror(errno));
  struct stat sb;
  fh_status st = FH_OK;
  int fl;
  if (fstat(fd, &sb) != 0) st = IOERR("cannot stat '%s': %s", path, strerror(errno));
  else if (S_ISDIR(sb.st_mode)) st = IOERR("cannot read '%s': %s", path, strerror(EISDIR));
  else if (!S_ISREG(sb.st_mode))
    st = IOERR("cannot read '%s': it is %s, not a regular file", path, file_kind(sb.st_mode));
  else if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
    st = IOERR("cannot read '%s': %s", path, strerror(errno));
  dec d;
  memset(&d, 0, sizeof d);
  d.fd = fd;
  d.what = path;
  d.dev = dev;
  d.hint = context;
  unsigned char prefix[8] = {0};
  uint64_t size = st == FH_OK ? (uint64_t)sb.st_size : 0, hl = 0;
  d.size = size;
  if (st == FH_OK && size >= 8) st = read_at(&d, 0, prefix, 8);
  if (st == FH_OK) st = fh_st_header_length(prefix, size, &hl);
  char *hbuf = NULL;
  if (st == FH_OK && (hbuf = fh_malloc((size_t)hl)) == NULL)
    st = fh_error_set(FH_ERR_MEMORY, "out of memory reading a %llu-byte header", (unsigned long long)hl);
  if (st == FH_OK) st = read_at(&d, 8, hbuf, (size_t)hl);
  fh_st_header h;
  memset(&h, 0, sizeof h);
  if (st == FH_OK) st = fh_st_parse_header(hbuf, (size_t)hl, size, &h);
  fh_free(hbuf);
  if (st == FH_OK) {
    d.h = &h;
    st = decode(&d, sig, leaves);
  }
  fh_st_header_free(&h);
  close(fd); /* read-only: nothing to report */
  if (st != FH_OK && strstr(fh_error_message(), path) == NULL) fh_error_prefix("load '%s'", path);
  return st;
}
