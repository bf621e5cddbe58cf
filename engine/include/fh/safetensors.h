/* The safetensors container (https://github.com/huggingface/safetensors):
 *
 *   u64 little-endian N | N bytes of JSON header | tensor bytes
 *
 * The header maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets relative to the first byte after the header) and
 * may hold "__metadata__", an object of string values. Tensor bytes are
 * raw little-endian, row-major.
 *
 * The parser treats its input as hostile and enforces what the reference
 * implementation enforces: 2 <= N <= FH_ST_MAX_HEADER and N <= size - 8; the
 * header is a JSON object (no duplicate keys), read in one pass by a strict
 * reader that accepts what Jansson accepts with JSON_REJECT_DUPLICATES, less
 * a stray NUL byte Jansson skips (safetensors.c says how; the fuzzer checks
 * it);
 * every entry has exactly
 * dtype, shape and data_offsets; dtype is a name this engine stores (BOOL,
 * U8, I32, I64, U32, U64, F32, F64); shape has at most FH_MAX_DIMS + 1
 * non-negative extents whose product times the element size does not
 * overflow and equals end - begin; the byte ranges, sorted, tile the data
 * section exactly (no gap, no overlap, nothing past its end);
 * "__metadata__" maps strings to strings. Every failure is a ValueError
 * "corrupt safetensors header: ..." and nothing is allocated beyond a size
 * the input itself proves (the header length is checked against the input
 * size before the header is read).
 *
 * Lookups by name are binary searches over `by_name` (the entries sorted
 * bytewise by name, built once by the parser), so parsing and finding every
 * entry of an n-entry header costs O(n log n).
 *
 * Ownership: fh_st_parse_header fills `out` with owned arrays released by
 * fh_st_header_free; fh_st_build_header returns a malloc'd header (free). */
#ifndef FH_SAFETENSORS_H
#define FH_SAFETENSORS_H

#include "fh/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FH_ST_MAX_HEADER ((uint64_t)100000000) /* as the reference implementation */

typedef struct fh_st_tensor {
  char *name;
  int32_t dtype; /* fh_dtype */
  int32_t ndim;  /* <= FH_MAX_DIMS + 1 */
  int64_t shape[FH_MAX_DIMS + 1];
  uint64_t begin, end; /* relative to the data section */
} fh_st_tensor;

typedef struct fh_st_header {
  int64_t ntensors;
  fh_st_tensor *tensors; /* in header order */
  int64_t *by_name;      /* indices into tensors, sorted bytewise by name */
  int64_t nmeta;
  char **meta_keys;
  char **meta_values;
  uint64_t data_start; /* 8 + N */
  uint64_t data_size;  /* size - data_start */
} fh_st_header;

/* The header length N from the 8-byte prefix, checked against the input
 * size (ValueError when the input is truncated or N is out of range). */
fh_status fh_st_header_length(const unsigned char prefix[8], uint64_t input_size, uint64_t *n);
/* Parse `len` header bytes of an input of `input_size` bytes. */
fh_status fh_st_parse_header(const char *json, size_t len, uint64_t input_size, fh_st_header *out);
void fh_st_header_free(fh_st_header *h);
/* Whether s[0..n) is valid UTF-8 (RFC 3629): tells a name Jansson refuses
 * from one it could not allocate (a MemoryError). */
bool fh_st_utf8_valid(const char *s, size_t n);
/* Borrowed; NULL when absent. fh_st_header_find is O(log n). */
const char *fh_st_header_meta(const fh_st_header *h, const char *key);
const fh_st_tensor *fh_st_header_find(const fh_st_header *h, const char *name);

/* Safetensors dtype names ("F64") <-> dtypes; complex128 has none (value
 * files store it as F64 with a trailing dimension of 2). */
const char *fh_st_dtype_name(fh_dtype d); /* NULL when not storable */

/* An entry to write. The shape is held by value: a writer collecting
 * entries in a growable array must never point into another growable
 * array (a realloc would leave the pointer dangling); `name` is borrowed
 * and must stay valid until fh_st_build_header returns. */
typedef struct fh_st_entry {
  const char *name;
  int32_t dtype; /* storable dtype */
  int32_t ndim;  /* <= FH_MAX_DIMS + 1 */
  int64_t shape[FH_MAX_DIMS + 1];
  uint64_t nbytes;
} fh_st_entry;
/* The JSON header for tensors laid out back to back in entry order, plus
 * string metadata; padded with spaces to a multiple of 8 bytes. */
fh_status fh_st_build_header(const fh_st_entry *entries, int64_t n, const char *const *meta_keys,
                             const char *const *meta_values, int64_t nmeta, char **header, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
