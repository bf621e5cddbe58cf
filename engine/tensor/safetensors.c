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
  for (int64_t i = 0; i < h->ntensors; ++i) fh_free(h->tensors[i].name);
  fh_free(h->tensors);
  fh_free(h->by_name);
  for (int64_t i = 0; i < h->nmeta; ++i) {
    fh_free(h->meta_keys[i]);
    fh_free(h->meta_values[i]);
  }
  fh_free(h->meta_keys);
  fh_free(h->meta_values);
  memset(h, 0, sizeof *h);
}

static int by_offset(const void *pa, const void *pb) {
  const fh_st_tensor *a = *(const fh_st_tensor *const *)pa, *b = *(const fh_st_tensor *const *)pb;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  if (a->end != b->end) return a->end < b->end ? -1 : 1;
  return 0;
}

/* qsort has no context argument: the name index sorts pointers to the
 * entries, turned into indices afterwards. */
static int by_name_ptr(const void *pa, const void *pb) {
  const fh_st_tensor *a = *(const fh_st_tensor *const *)pa, *b = *(const fh_st_tensor *const *)pb;
  return strcmp(a->name, b->name);
}

static int by_string(const void *pa, const void *pb) {
  return strcmp(*(const char *const *)pa, *(const char *const *)pb);
}

/* ---- the header reader ----------------------------------------------------------
 * A strict, streaming JSON reader (RFC 8259) for the one shape a header
 * has: it fills the entries as it reads instead of building a document
 * (a Jansson tree of a 100,000-entry header costs ~10 allocations per
 * entry, and freeing it dominated loading). It accepts what Jansson
 * accepts with JSON_REJECT_DUPLICATES (the value-file fuzzer,
 * engine/fuzz/fuzz_load.c, checks that every header accepted here parses
 * there to the same entries, and every "invalid JSON" here is invalid
 * there), except a raw NUL byte right after a number or a literal, which
 * Jansson skips ("[2\0]" reads as [2]) and this reader refuses: whitespace is space, tab, LF and CR; strings are valid UTF-8 (no
 * overlong forms, surrogates or code points above U+10FFFF) without control
 * characters; escapes are \" \\ \/ \b \f \n \r \t and \uXXXX (surrogate
 * pairs combined; lone surrogates and \u0000 rejected); numbers follow the
 * JSON grammar and integers fit in int64; nesting is at most JP_MAX_DEPTH
 * deep; duplicate keys are rejected; only whitespace follows the root.
 * Nothing is kept of a value the schema has no use for: such a value is
 * checked for syntax and always makes the header corrupt (an unknown key, a
 * non-integer extent, ...). */
#define JP_MAX_DEPTH 2048 /* as Jansson */

typedef struct jp {
  const unsigned char *s;
  size_t n, i;
  char *buf; /* the last decoded string (NUL-terminated), reused */
  size_t blen, bcap;
  bool oom;
  bool bad;        /* a syntax error is recorded */
  size_t bad_at;   /* its byte offset */
  const char *why; /* and what it is */
} jp;

static bool jp_fail(jp *p, const char *why) {
  if (!p->bad && !p->oom) {
    p->bad = true;
    p->bad_at = p->i;
    p->why = why;
  }
  return false;
}

/* The error for a failed read: out of memory, or invalid JSON. */
static fh_status jp_error(const jp *p) {
  if (p->oom) return fh_error_set(FH_ERR_MEMORY, "out of memory parsing a safetensors header");
  return CORRUPT("invalid JSON at byte %zu: %s", p->bad_at, p->why ? p->why : "syntax error");
}

static void jp_ws(jp *p) {
  while (p->i < p->n) {
    unsigned char c = p->s[p->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->i++;
  }
}

static int jp_peek(const jp *p) { return p->i < p->n ? p->s[p->i] : -1; }

/* ws, then the byte `c` (consumed) */
static bool jp_expect(jp *p, char c, const char *why) {
  jp_ws(p);
  if (jp_peek(p) != (unsigned char)c) return jp_fail(p, why);
  p->i++;
  return true;
}

static bool jp_put(jp *p, const void *src, size_t k) {
  if (p->blen + k + 1 > p->bcap) {
    size_t cap = p->bcap ? p->bcap : 64;
    while (cap < p->blen + k + 1) cap *= 2;
    char *b = fh_realloc(p->buf, cap);
    if (b == NULL) {
      p->oom = true;
      return false;
    }
    p->buf = b;
    p->bcap = cap;
  }
  memcpy(p->buf + p->blen, src, k);
  p->blen += k;
  p->buf[p->blen] = '\0';
  return true;
}

/* The length of the valid UTF-8 sequence at s[0..n) (RFC 3629), else 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t k;
  unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) k = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    k = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    k = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
  } else return 0;
  if (n < k || s[1] < lo || s[1] > hi) return 0;
  for (size_t j = 2; j < k; ++j)
    if (s[j] < 0x80 || s[j] > 0xBF) return 0;
  return k;
}

bool fh_st_utf8_valid(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    if (u[i] < 0x80) {
      ++i;
      continue;
    }
    size_t k = utf8_len(u + i, n - i);
    if (k == 0) return false;
    i += k;
  }
  return true;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* \uXXXX at s[i..]: the code unit, or -1 */
static long hex4(const jp *p, size_t i) {
  if (p->n - i < 6 || p->s[i] != '\\' || p->s[i + 1] != 'u') return -1;
  long v = 0;
  for (size_t j = 2; j < 6; ++j) {
    int h = hexval(p->s[i + j]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

/* A string at p->i (the opening quote), decoded into p->buf / p->blen. */
static bool jp_string(jp *p) {
  p->i++;
  p->blen = 0;
  if (!jp_put(p, "", 0)) return false;
  for (;;) {
    size_t run = p->i; /* bytes copied as they are */
    while (p->i < p->n && p->s[p->i] >= 0x20 && p->s[p->i] < 0x80 && p->s[p->i] != '"' && p->s[p->i] != '\\') p->i++;
    if (p->i > run && !jp_put(p, p->s + run, p->i - run)) return false;
    if (p->i >= p->n) return jp_fail(p, "premature end of input in a string");
    unsigned char c = p->s[p->i];
    if (c == '"') {
      p->i++;
      return true;
    }
    if (c < 0x20) return jp_fail(p, "control character in a string");
    if (c >= 0x80) {
      size_t k = utf8_len(p->s + p->i, p->n - p->i);
      if (k == 0) return jp_fail(p, "invalid UTF-8 in a string");
      if (!jp_put(p, p->s + p->i, k)) return false;
      p->i += k;
      continue;
    }
    /* an escape */
    if (p->i + 1 >= p->n) return jp_fail(p, "premature end of input in a string");
    char e = (char)p->s[p->i + 1], o;
    switch (e) {
      case '"': o = '"'; break;
      case '\\': o = '\\'; break;
      case '/': o = '/'; break;
      case 'b': o = '\b'; break;
      case 'f': o = '\f'; break;
      case 'n': o = '\n'; break;
      case 'r': o = '\r'; break;
      case 't': o = '\t'; break;
      case 'u': {
        long u = hex4(p, p->i);
        if (u < 0) return jp_fail(p, "invalid \\u escape");
        size_t used = 6;
        if (u >= 0xD800 && u <= 0xDBFF) {
          long lo = hex4(p, p->i + 6);
          if (lo < 0xDC00 || lo > 0xDFFF) return jp_fail(p, "invalid Unicode surrogate pair");
          u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
          used = 12;
        } else if (u >= 0xDC00 && u <= 0xDFFF) {
          return jp_fail(p, "invalid Unicode surrogate");
        } else if (u == 0) {
          return jp_fail(p, "\\u0000 is not allowed");
        }
        unsigned char b[4];
        size_t k;
        if (u < 0x80) b[0] = (unsigned char)u, k = 1;
        else if (u < 0x800) b[0] = (unsigned char)(0xC0 | (u >> 6)), b[1] = (unsigned char)(0x80 | (u & 0x3F)), k = 2;
        else if (u < 0x10000)
          b[0] = (unsigned char)(0xE0 | (u >> 12)), b[1] = (unsigned char)(0x80 | ((u >> 6) & 0x3F)),
          b[2] = (unsigned char)(0x80 | (u & 0x3F)), k = 3;
        else
          b[0] = (unsigned char)(0xF0 | (u >> 18)), b[1] = (unsigned char)(0x80 | ((u >> 12) & 0x3F)),
          b[2] = (unsigned char)(0x80 | ((u >> 6) & 0x3F)), b[3] = (unsigned char)(0x80 | (u & 0x3F)), k = 4;
        if (!jp_put(p, b, k)) return false;
        p->i += used;
        continue;
      }
      default: return jp_fail(p, "invalid escape");
    }
    if (!jp_put(p, &o, 1)) return false;
    p->i += 2;
  }
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

/* A number at p->i: *is_int and, for an integer, *v. */
static bool jp_number(jp *p, bool *is_int, int64_t *v) {
  bool neg = false;
  if (jp_peek(p) == '-') {
    neg = true;
    p->i++;
  }
  size_t d0 = p->i;
  if (jp_peek(p) == '0') p->i++;
  else if (is_digit(jp_peek(p)))
    while (is_digit(jp_peek(p))) p->i++;
  else return jp_fail(p, "invalid number");
  size_t d1 = p->i;
  bool integer = true;
  if (jp_peek(p) == '.') {
    p->i++;
    if (!is_digit(jp_peek(p))) return jp_fail(p, "invalid number");
    while (is_digit(jp_peek(p))) p->i++;
    integer = false;
  }
  if (jp_peek(p) == 'e' || jp_peek(p) == 'E') {
    p->i++;
    if (jp_peek(p) == '+' || jp_peek(p) == '-') p->i++;
    if (!is_digit(jp_peek(p))) return jp_fail(p, "invalid number");
    while (is_digit(jp_peek(p))) p->i++;
    integer = false;
  }
  *is_int = integer;
  if (!integer) return true; /* a real: no use in a header */
  uint64_t m = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (size_t j = d0; j < d1; ++j) {
    uint64_t dgt = (uint64_t)(p->s[j] - '0');
    if (m > (limit - dgt) / 10) return jp_fail(p, neg ? "too big negative integer" : "too big integer");
    m = m * 10 + dgt;
  }
  *v = neg ? (m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m) : (int64_t)m;
  return true;
}

static bool jp_skip(jp *p, int depth);

/* The members of an object or the elements of an array, after the opening
 * bracket: calls each(p, depth) for every member value / element (for an
 * object with the key decoded in p->buf). */
typedef bool (*jp_each_fn)(jp *p, int depth, void *ctx);
static bool jp_members(jp *p, bool object, int depth, jp_each_fn each, void *ctx) {
  if (depth > JP_MAX_DEPTH) return jp_fail(p, "maximum parsing depth reached");
  char close = object ? '}' : ']';
  jp_ws(p);
  if (jp_peek(p) == (unsigned char)close) {
    p->i++;
    return true;
  }
  for (;;) {
    jp_ws(p);
    if (object) {
      if (jp_peek(p) != '"') return jp_fail(p, "string or '}' expected");
      if (!jp_string(p)) return false;
      if (!jp_expect(p, ':', "':' expected")) return false;
    }
    jp_ws(p);
    if (!each(p, depth, ctx)) return false;
    jp_ws(p);
    int c = jp_peek(p);
    if (c == ',') {
      p->i++;
      continue;
    }
    if (c == (unsigned char)close) {
      p->i++;
      return true;
    }
    return jp_fail(p, object ? "',' or '}' expected" : "',' or ']' expected");
  }
}

static bool skip_each(jp *p, int depth, void *ctx) {
  (void)ctx;
  return jp_skip(p, depth + 1);
}

/* Any value at p->i, checked and dropped. */
static bool jp_skip(jp *p, int depth) {
  int c = jp_peek(p);
  if (c == '{' || c == '[') {
    p->i++;
    return jp_members(p, c == '{', depth, skip_each, NULL);
  }
  if (c == '"') return jp_string(p);
  if (c == '-' || is_digit(c)) {
    bool is_int;
    int64_t v;
    return jp_number(p, &is_int, &v);
  }
  static const char *const lits[] = {"true", "false", "null"};
  for (int k = 0; k < 3; ++k) {
    size_t l = strlen(lits[k]);
    if (p->n - p->i >= l && memcmp(p->s + p->i, lits[k], l) == 0) {
      p->i += l;
      return true;
    }
  }
  return jp_fail(p, c < 0 ? "premature end of input" : "invalid token");
}

/* ---- entries ---------------------------------------------------------------------- */
/* What an entry object held, checked once it is read (in the order of the
 * messages below). */
typedef struct raw_entry {
  int nkeys, ndtype, nshape, noffsets;
  bool dtype_is_string;
  char dtype[40]; /* the first 39 bytes */
  bool dtype_long;
  bool shape_is_array;
  size_t nd;         /* elements of shape */
  size_t first_bad;  /* 1-based index of the first non-integer or negative extent, 0: none */
  int64_t shape[FH_MAX_DIMS + 1];
  bool offsets_is_array;
  size_t noff;
  bool off_int[2];
  int64_t off[2];
} raw_entry;

/* one integer-or-anything element */
static bool read_int(jp *p, int depth, bool *ok, int64_t *v) {
  *ok = false;
  int c = jp_peek(p);
  if (c == '-' || is_digit(c)) {
    bool is_int;
    if (!jp_number(p, &is_int, v)) return false;
    *ok = is_int;
    return true;
  }
  return jp_skip(p, depth + 1);
}

static bool shape_each(jp *p, int depth, void *ctx) {
  raw_entry *r = ctx;
  bool ok;
  int64_t v = 0;
  if (!read_int(p, depth, &ok, &v)) return false;
  if ((!ok || v < 0) && r->first_bad == 0) r->first_bad = r->nd + 1;
  if (ok && v >= 0 && r->nd < FH_MAX_DIMS + 1) r->shape[r->nd] = v;
  r->nd++;
  return true;
}

static bool offsets_each(jp *p, int depth, void *ctx) {
  raw_entry *r = ctx;
  bool ok;
  int64_t v = 0;
  if (!read_int(p, depth, &ok, &v)) return false;
  if (r->noff < 2) {
    r->off_int[r->noff] = ok;
    r->off[r->noff] = v;
  }
  r->noff++;
  return true;
}

static bool entry_each(jp *p, int depth, void *ctx) {
  raw_entry *r = ctx;
  r->nkeys++;
  int c = jp_peek(p);
  if (strcmp(p->buf, "dtype") == 0) {
    if (r->ndtype++) return jp_fail(p, "duplicate object key");
    if (c != '"') return jp_skip(p, depth + 1);
    if (!jp_string(p)) return false;
    r->dtype_is_string = true;
    r->dtype_long = p->blen >= sizeof r->dtype;
    memcpy(r->dtype, p->buf, r->dtype_long ? sizeof r->dtype - 1 : p->blen);
    r->dtype[r->dtype_long ? sizeof r->dtype - 1 : p->blen] = '\0';
    return true;
  }
  bool shape = strcmp(p->buf, "shape") == 0, offs = !shape && strcmp(p->buf, "data_offsets") == 0;
  if (shape || offs) {
    if ((shape ? r->nshape++ : r->noffsets++) > 0) return jp_fail(p, "duplicate object key");
    if (c != '[') return jp_skip(p, depth + 1);
    p->i++;
    if (shape) r->shape_is_array = true;
    else r->offsets_is_array = true;
    return jp_members(p, false, depth + 1, shape ? shape_each : offsets_each, r);
  }
  return jp_skip(p, depth + 1); /* an unknown key: counted, then refused */
}

/* The entry `name` from its raw fields (parse_entry's rules). */
static fh_status check_entry(const char *name, const raw_entry *r, fh_st_tensor *t) {
  if (r->nkeys != 3 || !r->ndtype || !r->nshape || !r->noffsets)
    return CORRUPT("entry '%.64s' must have exactly the keys dtype, shape and data_offsets", name);
  if (!r->dtype_is_string) return CORRUPT("entry '%.64s': dtype is not a string", name);
  int found = -1;
  for (int i = 0; i < NST && !r->dtype_long; ++i)
    if (strcmp(r->dtype, st_dtypes[i].name) == 0) found = i;
  if (found < 0) return CORRUPT("entry '%.64s': unsupported dtype '%.32s'", name, r->dtype);
  t->dtype = st_dtypes[found].dtype;
  if (!r->shape_is_array) return CORRUPT("entry '%.64s': shape is not an array", name);
  if (r->nd > FH_MAX_DIMS + 1)
    return CORRUPT("entry '%.64s': %zu dimensions (at most %d)", name, r->nd, FH_MAX_DIMS + 1);
  if (r->first_bad) return CORRUPT("entry '%.64s': shape[%zu] is not a non-negative integer", name, r->first_bad);
  t->ndim = (int32_t)r->nd;
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < r->nd; ++i) {
    t->shape[i] = r->shape[i];
    if (__builtin_mul_overflow(numel, (uint64_t)t->shape[i], &numel)) overflow = true;
  }
  uint64_t nbytes = 0;
  if (overflow || numel > (uint64_t)INT64_MAX ||
      __builtin_mul_overflow(numel, (uint64_t)fh_dtype_size((fh_dtype)t->dtype), &nbytes))
    return CORRUPT("entry '%.64s': shape overflows", name);
  if (!r->offsets_is_array || r->noff != 2) return CORRUPT("entry '%.64s': data_offsets is not [begin, end]", name);
  if (!r->off_int[0] || !r->off_int[1] || r->off[0] < 0 || r->off[1] < 0)
    return CORRUPT("entry '%.64s': data_offsets must be non-negative integers", name);
  t->begin = (uint64_t)r->off[0];
  t->end = (uint64_t)r->off[1];
  if (t->end < t->begin) return CORRUPT("entry '%.64s': data_offsets end before they begin", name);
  if (t->end - t->begin != nbytes)
    return CORRUPT("entry '%.64s': data_offsets span %llu bytes but dtype %s and the shape need %llu", name,
                   (unsigned long long)(t->end - t->begin), r->dtype, (unsigned long long)nbytes);
  return FH_OK;
}

/* ---- the header ------------------------------------------------------------------- */
/* Syntax comes first, as with a parser that reads the whole document before
 * anything is checked: the first schema error is recorded (c->st, and the
 * error record, which nothing else writes until the end) and reading goes
 * on; a syntax error or a duplicate key anywhere replaces it. */
typedef struct hdr_ctx {
  fh_st_header *h;
  int64_t tcap, mcap;
  int nmeta_objects;
  fh_status st; /* the first schema error */
} hdr_ctx;

#define SCHEMA(c, ...)                          \
  do {                                          \
    if ((c)->st == FH_OK) (c)->st = CORRUPT(__VA_ARGS__); \
  } while (0)

static bool meta_each(jp *p, int depth, void *ctx) {
  hdr_ctx *c = ctx;
  fh_st_header *h = c->h;
  if (h->nmeta == c->mcap) {
    int64_t cap = c->mcap ? 2 * c->mcap : 8;
    char **k = fh_realloc(h->meta_keys, sizeof *k * (size_t)cap);
    if (k) h->meta_keys = k;
    char **v = fh_realloc(h->meta_values, sizeof *v * (size_t)cap);
    if (v) h->meta_values = v;
    if (!k || !v) {
      p->oom = true;
      return false;
    }
    c->mcap = cap;
  }
  char *key = fh_strdup(p->buf);
  if (key == NULL) {
    p->oom = true;
    return false;
  }
  if (jp_peek(p) != '"') {
    SCHEMA(c, "__metadata__ value of '%.64s' is not a string", key);
    fh_free(key);
    return jp_skip(p, depth + 1);
  }
  if (!jp_string(p)) {
    fh_free(key);
    return false;
  }
  char *val = fh_malloc(p->blen + 1);
  if (val == NULL) {
    fh_free(key);
    p->oom = true;
    return false;
  }
  memcpy(val, p->buf, p->blen + 1); /* no NUL inside: \u0000 is refused */
  h->meta_keys[h->nmeta] = key;
  h->meta_values[h->nmeta] = val;
  h->nmeta++;
  return true;
}

static bool top_each(jp *p, int depth, void *ctx) {
  hdr_ctx *c = ctx;
  fh_st_header *h = c->h;
  if (strcmp(p->buf, "__metadata__") == 0) {
    if (c->nmeta_objects++) return jp_fail(p, "duplicate object key");
    if (jp_peek(p) != '{') {
      SCHEMA(c, "__metadata__ is not an object");
      return jp_skip(p, depth + 1);
    }
    p->i++;
    return jp_members(p, true, depth + 1, meta_each, c);
  }
  if (p->buf[0] == '\0') SCHEMA(c, "empty tensor name");
  /* every name is kept (duplicates are found among them) */
  if (h->ntensors == c->tcap) {
    int64_t cap = c->tcap ? 2 * c->tcap : 16;
    fh_st_tensor *t = fh_realloc(h->tensors, sizeof *t * (size_t)cap);
    if (t == NULL) {
      p->oom = true;
      return false;
    }
    h->tensors = t;
    c->tcap = cap;
  }
  int64_t idx = h->ntensors;
  fh_st_tensor *t = &h->tensors[idx];
  memset(t, 0, sizeof *t);
  if ((t->name = fh_strdup(p->buf)) == NULL) {
    p->oom = true;
    return false;
  }
  h->ntensors++; /* owned by h from here (freed with it) */
  if (jp_peek(p) != '{') {
    SCHEMA(c, "entry '%.64s' is not an object", t->name);
    return jp_skip(p, depth + 1);
  }
  p->i++;
  raw_entry r;
  memset(&r, 0, sizeof r);
  if (!jp_members(p, true, depth + 1, entry_each, &r)) return false;
  if (c->st == FH_OK) c->st = check_entry(h->tensors[idx].name, &r, &h->tensors[idx]);
  return true;
}

fh_status fh_st_parse_header(const char *json, size_t len, uint64_t input_size, fh_st_header *out) {
  memset(out, 0, sizeof *out);
  if (len < 2 || len > FH_ST_MAX_HEADER || len > input_size - 8) return CORRUPT("bad header length %zu", len);
  fh_st_header h;
  memset(&h, 0, sizeof h);
  h.data_start = 8 + (uint64_t)len;
  h.data_size = input_size - h.data_start;
  jp p = {(const unsigned char *)json, len, 0, NULL, 0, 0, false, false, 0, NULL};
  hdr_ctx c = {&h, 0, 0, 0, FH_OK};
  fh_st_tensor **order = NULL;
  fh_status st = FH_OK;
  jp_ws(&p);
  bool ok;
  if (jp_peek(&p) != '{') {
    /* as Jansson without JSON_DECODE_ANY: an array is valid JSON, a scalar is not */
    ok = jp_peek(&p) == '[' ? jp_skip(&p, 1) : jp_fail(&p, "'[' or '{' expected");
    if (ok) {
      jp_ws(&p);
      if (p.i == p.n) SCHEMA(&c, "the header is not a JSON object");
      else ok = jp_fail(&p, "end of file expected");
    }
  } else {
    p.i++;
    ok = jp_members(&p, true, 1, top_each, &c);
    if (ok) {
      jp_ws(&p);
      if (p.i != p.n) ok = jp_fail(&p, "end of file expected");
    }
  }
  fh_free(p.buf);
  if (!ok) { /* a syntax error (or out of memory) takes precedence */
    st = jp_error(&p);
    goto done;
  }
  /* the arrays are complete: only now may anything point into them */
  int64_t nt = h.ntensors;
  order = fh_malloc(sizeof *order * (size_t)(nt ? nt : 1));
  h.by_name = fh_malloc(sizeof *h.by_name * (size_t)(nt ? nt : 1));
  if (order == NULL || h.by_name == NULL) {
    st = fh_error_set(FH_ERR_MEMORY, "out of memory parsing a safetensors header");
    goto done;
  }
  /* duplicate keys, found by sorting (tensor names, then metadata keys) */
  for (int64_t i = 0; i < nt; ++i) order[i] = &h.tensors[i];
  qsort(order, (size_t)nt, sizeof *order, by_name_ptr);
  for (int64_t i = 1; i < nt; ++i)
    if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
      st = CORRUPT("invalid JSON: duplicate object key '%.64s'", order[i]->name);
      goto done;
    }
  for (int64_t i = 0; i < nt; ++i) h.by_name[i] = order[i] - h.tensors;
  if (h.nmeta > 1) {
    char **mk = fh_malloc(sizeof *mk * (size_t)h.nmeta);
    if (mk == NULL) {
      st = fh_error_set(FH_ERR_MEMORY, "out of memory parsing a safetensors header");
      goto done;
    }
    memcpy(mk, h.meta_keys, sizeof *mk * (size_t)h.nmeta);
    qsort(mk, (size_t)h.nmeta, sizeof *mk, by_string);
    for (int64_t i = 1; i < h.nmeta && st == FH_OK; ++i)
      if (strcmp(mk[i - 1], mk[i]) == 0) st = CORRUPT("invalid JSON: duplicate object key '%.64s' in __metadata__", mk[i]);
    fh_free(mk);
    if (st != FH_OK) goto done;
  }
  /* then the first schema error (its message is still the error record) */
  if ((st = c.st) != FH_OK) goto done;
  /* the byte ranges must tile [0, data_size) exactly */
  qsort(order, (size_t)nt, sizeof *order, by_offset);
  uint64_t pos = 0;
  for (int64_t i = 0; i < nt; ++i) {
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
done:
  fh_free(order);
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
        if (fh_st_utf8_valid(meta_values[i], strlen(meta_values[i]))) goto oom;
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
    /* every append and set is checked: a header missing a field is a corrupt file
     * (json_*_new take the new value's reference even when they fail) */
    int bad = 0;
    for (int d = 0; d < entries[i].ndim; ++d) bad |= json_array_append_new(shape, json_integer(entries[i].shape[d]));
    bad |= json_array_append_new(offs, json_integer((json_int_t)off));
    bad |= json_array_append_new(offs, json_integer((json_int_t)(off + entries[i].nbytes)));
    off += entries[i].nbytes;
    bad |= json_object_set_new(e, "dtype", json_string(dn));
    bad |= json_object_set_new(e, "shape", shape);
    bad |= json_object_set_new(e, "data_offsets", offs);
    if (bad) {
      json_decref(e);
      goto oom;
    }
    if (json_object_get(root, entries[i].name) != NULL) {
      json_decref(e);
      st = fh_error_set(FH_ERR_VALUE, "duplicate tensor name '%s'", entries[i].name);
      goto fail;
    }
    if (json_object_set_new(root, entries[i].name, e) != 0) {
      if (fh_st_utf8_valid(entries[i].name, strlen(entries[i].name))) goto oom;
      st = fh_error_set(FH_ERR_VALUE, "tensor name '%s' is not valid UTF-8", entries[i].name);
      goto fail;
    }
  }
  char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
  if (s == NULL) goto oom;
  size_t l = strlen(s), padded = (l + 7) & ~(size_t)7;
  char *p = fh_realloc(s, padded + 1);
  if (p == NULL) {
    fh_free(s);
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
