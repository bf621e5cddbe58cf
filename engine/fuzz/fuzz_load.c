/* libFuzzer target: the value-file loader (safetensors header reader,
 * fhelium metadata, contexts, value reconstruction) on arbitrary bytes.
 * Every input must either load or fail with an error; a loaded tree must
 * serialize again and load back to an equal signature.
 *
 * The header reader (engine/tensor/safetensors.c) is checked against Jansson
 * with JSON_REJECT_DUPLICATES: a header it accepts must parse there to the
 * same entries and metadata, and a header it calls invalid JSON must be
 * invalid there too, unless it holds a NUL byte (Jansson skips one that
 * follows a number or a literal, "[2\0]" is [2] there; RFC 8259 and this
 * reader refuse it). Built with -DFHELIUM_FUZZ=ON and clang (scripts/fuzz). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fh/safetensors.h"
#include "fh/value_io.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

#define INVALID "corrupt safetensors header: invalid JSON"

static void check_header(const unsigned char *data, size_t size) {
  uint64_t hl;
  if (fh_st_header_length(data, size, &hl) != FH_OK) {
    fh_error_clear();
    return;
  }
  fh_st_header h;
  fh_status st = fh_st_parse_header((const char *)data + 8, (size_t)hl, size, &h);
  json_error_t jerr;
  json_t *root = json_loadb((const char *)data + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &jerr);
  if (st == FH_OK) {
    if (root == NULL || !json_is_object(root)) abort();
    json_t *meta = json_object_get(root, "__metadata__");
    if ((int64_t)json_object_size(root) != h.ntensors + (meta ? 1 : 0)) abort();
    for (int64_t i = 0; i < h.ntensors; ++i) {
      const fh_st_tensor *t = &h.tensors[i];
      if (fh_st_header_find(&h, t->name) != t) abort();
      json_t *e = json_object_get(root, t->name);
      if (e == NULL || json_object_size(e) != 3) abort();
      const char *dn = json_string_value(json_object_get(e, "dtype"));
      if (dn == NULL || strcmp(dn, fh_st_dtype_name((fh_dtype)t->dtype)) != 0) abort();
      json_t *sh = json_object_get(e, "shape"), *of = json_object_get(e, "data_offsets");
      if (json_array_size(sh) != (size_t)t->ndim || json_array_size(of) != 2) abort();
      for (int d = 0; d < t->ndim; ++d)
        if (json_integer_value(json_array_get(sh, (size_t)d)) != t->shape[d]) abort();
      if ((uint64_t)json_integer_value(json_array_get(of, 0)) != t->begin ||
          (uint64_t)json_integer_value(json_array_get(of, 1)) != t->end)
        abort();
    }
    for (int64_t i = 1; i < h.ntensors; ++i) /* the name index is sorted */
      if (strcmp(h.tensors[h.by_name[i - 1]].name, h.tensors[h.by_name[i]].name) >= 0) abort();
    if ((int64_t)(meta ? json_object_size(meta) : 0) != h.nmeta) abort();
    for (int64_t i = 0; i < h.nmeta; ++i) {
      json_t *v = json_object_get(meta, h.meta_keys[i]);
      if (!json_is_string(v) || json_string_length(v) != strlen(h.meta_values[i]) ||
          memcmp(json_string_value(v), h.meta_values[i], json_string_length(v)) != 0)
        abort();
    }
    fh_st_header_free(&h);
  } else if (st == FH_ERR_VALUE && strncmp(fh_error_message(), INVALID, strlen(INVALID)) == 0 && root != NULL &&
             memchr(data + 8, 0, (size_t)hl) == NULL) {
    abort(); /* called invalid here, valid there (Jansson drops a NUL byte that follows a number or a literal) */
  }
  json_decref(root);
  fh_error_clear();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  check_header(data, size);
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  if (fh_tree_deserialize(data, size, fh_cpu(), &sig, &leaves) == FH_OK) {
    unsigned char *bytes = NULL;
    size_t n = 0;
    if (fh_tree_serialize(sig, leaves, true, &bytes, &n) != FH_OK) abort(); /* what loads must save */
    fh_tree_sig *sig2 = NULL;
    fh_tensor **leaves2 = NULL;
    if (fh_tree_deserialize(bytes, n, fh_cpu(), &sig2, &leaves2) != FH_OK) abort(); /* and load back */
    /* strides may differ (saved copies are contiguous); the structure,
     * shapes, dtypes and exact state may not */
    if (sig2->nleaves != sig->nleaves || sig2->kind != sig->kind) abort();
    for (int64_t i = 0; i < sig->nleaves; ++i) {
      size_t nb = fh_tensor_nbytes(leaves[i]);
      if (nb != fh_tensor_nbytes(leaves2[i]) || leaves[i]->dtype != leaves2[i]->dtype) abort();
      unsigned char *a = malloc(nb + 1), *b = malloc(nb + 1);
      if (a == NULL || b == NULL) abort();
      if (fh_tensor_read(leaves[i], a) != FH_OK || fh_tensor_read(leaves2[i], b) != FH_OK) abort();
      if (memcmp(a, b, nb) != 0) abort(); /* bytes, so NaN payloads compare too */
      free(a);
      free(b);
    }
    free(bytes);
    fh_value_io_free_leaves(leaves2, sig2->nleaves);
    fh_tree_sig_release(sig2);
    fh_value_io_free_leaves(leaves, sig->nleaves);
    fh_tree_sig_release(sig);
  }
  fh_error_clear();
  return 0;
}
