/* The safetensors container: a hostile-input header parser and a header
 * writer (fh/safetensors.h). */
#include "fh/safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fhelium value files assume a little-endian host"
#endif

static const struct {
  const char *name;
  fh_dtype dtype;
} st_dtypes[] = {
    {"BOOL", FH_BOOL}, {"U8", FH_UINT8},   {"I32", FH_INT32},   {"I64", FH_INT64},
    {"U32", FH_UINT32}, {"U64", FH_UINT64}, {"F32", FH_FLOAT32}, {"F64", FH_FLOAT64},
};
#define NST ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

const char *fh_st_dtype_name(fh_dtype d) {
  for (int i = 0; i < NST; ++i)
    if (st_dtypes[i].dtype == d) return st_dtypes[i].name;
  return NULL;
}

#define CORRUPT(...) fh_error_set(FH_ERR_VALUE, "corrupt safetensors header: " __VA_ARGS__)

fh_status fh_st_header_length(const unsigned char prefix[8], uint64_t input_size, uint64_t *n) {
  if (input_size < 8)
    return fh_error_set(FH_ERR_VALUE, "truncated safetensors data: %llu bytes, the 8-byte header length is missing",
                        (unsigned long long)input_size);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)prefix[i] << (8 * i);
  if (v < 2) return CORRUPT("header length %llu is too small", (unsigned long long)v);
  if (v > FH_ST_MAX_HEADER)
    return CORRUPT("header length %llu exceeds the limit of %llu bytes", (unsigned long long)v,
                   (unsigned long long)FH_ST_MAX_HEADER);
  if (v > input_size - 8)
    return fh_error_set(FH_ERR_VALUE, "truncated safetensors data: the header needs %llu bytes but only %llu follow",
                        (unsigned long long)v, (unsigned long long)(input_size - 8));
  *n = v;
  return FH_OK;
}

void fh_st_header_free(fh_st_header *h) {
  if (h == NULL) return;
  for (int64_t i = 0; i < h->ntensors; ++i) free(h->tensors[i].name);
  free(h->tensors);
  free(h->by_name);
  for (int64_t i = 0; i < h->nmeta; ++i) {
    free(h->meta_keys[i]);
    free(h->meta_values[i]);
  }
  free(h->meta_keys);
  free(h->meta_values);
  memset(h, 0, sizeof *h);
}

static int by_offset(const void *pa, const void *pb) {
  const fh_st_tensor *a = *(const fh_st_tensor *const *)pa, *b = *(const fh_st_tensor *const *)pb;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  if (a->end != b->end) return a->end < b->end ? -1 : 1;
  return 0;
}

/* qsort has no context argument: by_name sorts pointers to the entries,
 * turned into indices afterwards. */
static int by_name_ptr(const void *pa, const void *pb) {
  const fh_st_tensor *a = *(const fh_st_tensor *const *)pa, *b = *(const fh_st_tensor *const *)pb;
  return strcmp(a->name, b->name);
}

static fh_status parse_entry(const char *name, json_t *v, fh_st_tensor *t) {
  if (!json_is_object(v)) return CORRUPT("entry '%.64s' is not an object", name);
  if (json_object_size(v) != 3)
    return CORRUPT("entry '%.64s' must have exactly the keys dtype, shape and data_offsets", name);
  json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"), *of = json_object_get(v, "data_offsets");
  if (!dt || !sh || !of) return CORRUPT("entry '%.64s' must have exactly the keys dtype, shape and data_offsets", name);
  if (!json_is_string(dt)) return CORRUPT("entry '%.64s': dtype is not a string", name);
  const char *dn = json_string_value(dt);
  int found = -1;
  for (int i = 0; i < NST; ++i)
    if (strcmp(dn, st_dtypes[i].name) == 0) found = i;
  if (found < 0) return CORRUPT("entry '%.64s': unsupported dtype '%.32s'", name, dn);
  t->dtype = st_dtypes[found].dtype;
  if (!json_is_array(sh)) return CORRUPT("entry '%.64s': shape is not an array", name);
  size_t nd = json_array_size(sh);
  if (nd > FH_MAX_DIMS + 1) return CORRUPT("entry '%.64s': %zu dimensions (at most %d)", name, nd, FH_MAX_DIMS + 1);
  t->ndim = (int32_t)nd;
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < nd; ++i) {
    json_t *e = json_array_get(sh, i);
    if (!json_is_integer(e) || json_integer_value(e) < 0)
      return CORRUPT("entry '%.64s': shape[%zu] is not a non-negative integer", name, i + 1);
    t->shape[i] = (int64_t)json_integer_value(e);
    if (__builtin_mul_overflow(numel, (uint64_t)t->shape[i], &numel)) overflow = true;
  }
  uint64_t nbytes = 0;
  if (overflow || numel > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, (uint64_t)fh_dtype_size((fh_dtype)t->dtype), &nbytes))
    return CORRUPT("entry '%.64s': shape overflows", name);
  if (!json_is_array(of) || json_array_size(of) != 2) return CORRUPT("entry '%.64s': data_offsets is not [begin, end]", name);
  json_t *b = json_array_get(of, 0), *e = json_array_get(of, 1);
  if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 || json_integer_value(e) < 0)
    return CORRUPT("entry '%.64s': data_offsets must be non-negative integers", name);
  t->begin = (uint64_t)json_integer_value(b);
  t->end = (uint64_t)json_integer_value(e);
  if (t->end < t->begin) return CORRUPT("entry '%.64s': data_offsets end before they begin", name);
  if (t->end - t->begin != nbytes)
    return CORRUPT("entry '%.64s': data_offsets span %llu bytes but dtype %s and the shape need %llu", name,
                   (unsigned long long)(t->end - t->begin), dn, (unsigned long long)nbytes);
  return FH_OK;
}

fh_status fh_st_parse_header(const char *json, size_t len, uint64_t input_size, fh_st_header *out) {
  memset(out, 0, sizeof *out);
  if (len < 2 || len > FH_ST_MAX_HEADER || len > input_size - 8) return CORRUPT("bad header length %zu", len);
  json_error_t jerr;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL) return CORRUPT("invalid JSON at byte %d: %.120s", jerr.position, jerr.text);
  fh_status st = FH_OK;
  fh_st_header h;
  memset(&h, 0, sizeof h);
  h.data_start = 8 + (uint64_t)len;
  h.data_size = input_size - h.data_start;
  fh_st_tensor **order = NULL;
  if (!json_is_object(root)) {
    st = CORRUPT("the header is not a JSON object");
    goto done;
  }
  size_t total = json_object_size(root);
  json_t *meta = json_object_get(root, "__metadata__");
  size_t nt = total - (meta ? 1 : 0);
  h.tensors = calloc(nt ? nt : 1, sizeof *h.tensors);
  order = calloc(nt ? nt : 1, sizeof *order);
  if (h.tensors == NULL || order == NULL) {
    st = fh_error_set(FH_ERR_MEMORY, "out of memory parsing a safetensors header");
    goto done;
  }
  if (meta) {
    if (!json_is_object(meta)) {
      st = CORRUPT("__metadata__ is not an object");
      goto done;
    }
    size_t nm = json_object_size(meta);
    h.meta_keys = calloc(nm ? nm : 1, sizeof(char *));
    h.meta_values = calloc(nm ? nm : 1, sizeof(char *));
    if (h.meta_keys == NULL || h.meta_values == NULL) {
      st = fh_error_set(FH_ERR_MEMORY, "out of memory parsing a safetensors header");
      goto done;
    }
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
      if (!json_is_string(v)) {
        st = CORRUPT("__metadata__ value of '%.64s' is not a string", k);
        goto done;
      }
      h.meta_keys[h.nmeta] = strdup(k);
      h.meta_values[h.nmeta] = malloc(json_string_length(v) + 1);
      if (h.meta_keys[h.nmeta] == NULL || h.meta_values[h.nmeta] == NULL) {
        free(h.meta_keys[h.nmeta]);
        free(h.meta_values[h.nmeta]);
        st = fh_error_set(FH_ERR_MEMORY, "out of memory parsing a safetensors header");
        goto done;
      }
      memcpy(h.meta_values[h.nmeta], json_string_value(v), json_string_length(v) + 1);
      if (strlen(h.meta_values[h.nmeta]) != json_string_length(v)) {
        ++h.nmeta;
        st = CORRUPT("__metadata__ value of '%.64s' contains a NUL byte", k);
        goto done;
      }
      ++h.nmeta;
    }
  }
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (strcmp(k, "__metadata__") == 0) continue;
    if (*k == '\0') {
      st = CORRUPT("empty tensor name");
      goto done;
    }
    fh_st_tensor *t = &h.tensors[h.ntensors];
    if ((st = parse_entry(k, v, t)) != FH_OK) goto done;
    if ((t->name = strdup(k)) == NULL) {
      st = fh_error_set(FH_ERR_MEMORY, "out of memory parsing a safetensors header");
      goto done;
    }
    order[h.ntensors] = t;
    ++h.ntensors;
  }
  /* the byte ranges must tile [0, data_size) exactly */
  qsort(order, (size_t)h.ntensors, sizeof *order, by_offset);
  uint64_t pos = 0;
  for (int64_t i = 0; i < h.ntensors; ++i) {
    if (order[i]->begin < pos) {
      st = CORRUPT("tensors '%.64s' and '%.64s' overlap", order[i - 1]->name, order[i]->name);
      goto done;
    }
    if (order[i]->begin > pos) {
      st = CORRUPT("%llu bytes before tensor '%.64s' belong to no tensor", (unsigned long long)(order[i]->begin - pos),
                   order[i]->name);
      goto done;
    }
    pos = order[i]->end;
  }
  if (pos > h.data_size) {
    st = fh_error_set(FH_ERR_VALUE,
                      "truncated safetensors data: the tensors need %llu data bytes but only %llu are present",
                      (unsigned long long)pos, (unsigned long long)h.data_size);
    goto done;
  }
  if (pos < h.data_size) {
    st = CORRUPT("%llu trailing bytes belong to no tensor", (unsigned long long)(h.data_size - pos));
    goto done;
  }
  /* the name index (names are unique: the parser rejects duplicate keys) */
  h.by_name = malloc(sizeof *h.by_name * (nt ? nt : 1));
  if (h.by_name == NULL) {
    st = fh_error_set(FH_ERR_MEMORY, "out of memory parsing a safetensors header");
    goto done;
  }
  qsort(order, (size_t)h.ntensors, sizeof *order, by_name_ptr);
  for (int64_t i = 0; i < h.ntensors; ++i) h.by_name[i] = order[i] - h.tensors;
done:
  free(order);
  json_decref(root);
  if (st != FH_OK) {
    fh_st_header_free(&h);
    return st;
  }
  *out = h;
  return FH_OK;
}

const char *fh_st_header_meta(const fh_st_header *h, const char *key) {
  for (int64_t i = 0; i < h->nmeta; ++i)
    if (strcmp(h->meta_keys[i], key) == 0) return h->meta_values[i];
  return NULL;
}

const fh_st_tensor *fh_st_header_find(const fh_st_header *h, const char *name) {
  int64_t lo = 0, hi = h->ntensors; /* binary search over by_name */
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    const fh_st_tensor *t = &h->tensors[h->by_name[mid]];
    int c = strcmp(t->name, name);
    if (c == 0) return t;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

fh_status fh_st_build_header(const fh_st_entry *entries, int64_t n, const char *const *meta_keys,
                             const char *const *meta_values, int64_t nmeta, char **header, size_t *len) {
  json_t *root = json_object();
  if (root == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory writing a safetensors header");
  fh_status st = FH_OK;
  if (nmeta > 0) {
    json_t *m = json_object();
    if (m == NULL || json_object_set_new(root, "__metadata__", m) != 0) goto oom;
    for (int64_t i = 0; i < nmeta; ++i) {
      json_t *s = json_string(meta_values[i]);
      if (s == NULL) {
        st = fh_error_set(FH_ERR_VALUE, "metadata value of '%s' is not valid UTF-8", meta_keys[i]);
        goto fail;
      }
      if (json_object_set_new(m, meta_keys[i], s) != 0) goto oom;
    }
  }
  uint64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    const char *dn = fh_st_dtype_name((fh_dtype)entries[i].dtype);
    if (dn == NULL) {
      st = fh_error_set(FH_ERR_VALUE, "dtype %s cannot be stored in safetensors", fh_dtype_name((fh_dtype)entries[i].dtype));
      goto fail;
    }
    json_t *e = json_object(), *shape = json_array(), *offs = json_array();
    if (e == NULL || shape == NULL || offs == NULL) {
      json_decref(e);
      json_decref(shape);
      json_decref(offs);
      goto oom;
    }
    for (int d = 0; d < entries[i].ndim; ++d) json_array_append_new(shape, json_integer(entries[i].shape[d]));
    json_array_append_new(offs, json_integer((json_int_t)off));
    json_array_append_new(offs, json_integer((json_int_t)(off + entries[i].nbytes)));
    off += entries[i].nbytes;
    json_object_set_new(e, "dtype", json_string(dn));
    json_object_set_new(e, "shape", shape);
    json_object_set_new(e, "data_offsets", offs);
    if (json_object_get(root, entries[i].name) != NULL) {
      json_decref(e);
      st = fh_error_set(FH_ERR_VALUE, "duplicate tensor name '%s'", entries[i].name);
      goto fail;
    }
    if (json_object_set_new(root, entries[i].name, e) != 0) {
      st = fh_error_set(FH_ERR_VALUE, "tensor name '%s' is not valid UTF-8", entries[i].name);
      goto fail;
    }
  }
  char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
  if (s == NULL) goto oom;
  size_t l = strlen(s), padded = (l + 7) & ~(size_t)7;
  char *p = realloc(s, padded + 1);
  if (p == NULL) {
    free(s);
    goto oom;
  }
  memset(p + l, ' ', padded - l);
  p[padded] = '\0';
  json_decref(root);
  *header = p;
  *len = padded;
  return FH_OK;
oom:
  st = fh_error_set(FH_ERR_MEMORY, "out of memory writing a safetensors header");
fail:
  json_decref(root);
  return st;
}
