/* libFuzzer target: the value-file loader (safetensors header reader,
 * fhelium metadata, contexts, value reconstruction, and the reader of
 * FHElium 0.30's files with its residue conversions) on arbitrary bytes.
 * Every input must either load or fail with an error; a loaded tree must
 * serialize again and load back to an equal signature. Each input is also
 * loaded with context= a small context in FHElium 0.30's layout (the one of
 * spec/fixtures/small_context.lua's context030, whose seeds
 * make_fuzz_seeds.lua writes): an FHElium file that loads so must save in
 * FHElium's format and load back bit-identical.
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
#include "fh/values.h"

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

/* count primes = 1 mod 2n below 2^bits, descending (small_context.lua's M.primes) */
static void small_primes(int64_t n, int bits, int count, uint64_t *out) {
  uint64_t c = (1ULL << bits) + 1;
  for (int k = 0; k < count;) {
    c -= 2 * (uint64_t)n;
    if (fh_is_prime_u64(c)) out[k++] = c;
  }
}

static fh_ckks_context *context030(void) {
  static fh_ckks_context *ctx;
  if (ctx == NULL) {
    uint64_t q[3], p[1];
    small_primes(16, 30, 3, q);
    small_primes(16, 31, 1, p);
    fh_ckks_context_spec s = {16, (double)(1 << 20), 3, 1, q, p, false, 3, true, FH_DIGITS_BELOW_P};
    if (fh_ckks_context_new(&s, &ctx) != FH_OK) abort();
  }
  return ctx;
}

static bool same_leaves(fh_tensor **a, fh_tensor **b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    size_t nb = fh_tensor_nbytes(a[i]);
    if (nb != fh_tensor_nbytes(b[i]) || a[i]->dtype != b[i]->dtype) return false;
    unsigned char *x = malloc(nb + 1), *y = malloc(nb + 1);
    if (x == NULL || y == NULL) abort();
    if (fh_tensor_read(a[i], x) != FH_OK || fh_tensor_read(b[i], y) != FH_OK) abort();
    bool eq = memcmp(x, y, nb) == 0; /* bytes, so NaN payloads compare too */
    free(x);
    free(y);
    if (!eq) return false;
  }
  return true;
}

/* With context= FHElium's layout: what loads as one value saves in FHElium's
 * format (allow_secret) and loads back to the same value, bit for bit. */
static void check_030(const unsigned char *data, size_t size) {
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  if (fh_tree_deserialize_with(data, size, fh_cpu(), context030(), &sig, &leaves) != FH_OK) {
    fh_error_clear();
    return;
  }
  if (sig->kind == FH_TREE_VALUE) {
    unsigned char *bytes = NULL;
    size_t n = 0;
    if (fh_tree_serialize_as(sig, leaves, true, FH_FORMAT_FHELIUM_030, &bytes, &n) != FH_OK) abort();
    fh_tree_sig *sig2 = NULL;
    fh_tensor **leaves2 = NULL;
    if (fh_tree_deserialize_with(bytes, n, fh_cpu(), context030(), &sig2, &leaves2) != FH_OK) abort();
    if (!fh_tree_sig_equal(sig, sig2) || !same_leaves(leaves, leaves2, sig->nleaves)) abort();
    free(bytes);
    fh_value_io_free_leaves(leaves2, sig2->nleaves);
    fh_tree_sig_release(sig2);
  }
  fh_value_io_free_leaves(leaves, sig->nleaves);
  fh_tree_sig_release(sig);
  fh_error_clear();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  check_header(data, size);
  check_030(data, size);
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
