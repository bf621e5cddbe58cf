/* FHElium 0.30's value files: reader and writer (value_io_030.h). */
#include "value_io_030.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fh/ckks_tables.h"

#define KEY_FORMAT "fhelium.format"
#define KEY_SCHEMA "fhelium.schema_version"
#define KEY_MANIFEST "fhelium.manifest"
#define FORMAT "fhelium-value"
#define FILE_SCHEMA 2
#define VALUE_SCHEMA 4

#define UNSUPPORTED(...) unsupported(__VA_ARGS__)
#define CORRUPT(...) corrupt(__VA_ARGS__)

static fh_status unsupported(const char *fmt, ...) {
  char m[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  return fh_error_set(FH_ERR_VALUE, "unsupported FHElium value file: %s", m);
}
static fh_status corrupt(const char *fmt, ...) {
  char m[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  return fh_error_set(FH_ERR_VALUE, "corrupt FHElium value file: %s", m);
}

bool fh__v030_is(const fh_st_header *h) { return fh_st_header_meta(h, KEY_FORMAT) != NULL; }

/* ---- dtypes ------------------------------------------------------------------- */
/* The torch dtypes this reader knows (the logical dtype of a tensor entry). */
static const struct {
  const char *torch;
  int32_t dtype; /* fh_dtype of the logical tensor */
  int32_t stored; /* fh_dtype of its safetensors payloads */
} dtypes[] = {
    {"torch.int64", FH_INT64, FH_INT64},
    {"torch.int32", FH_INT32, FH_INT32},
    {"torch.float64", FH_FLOAT64, FH_FLOAT64},
    {"torch.complex128", FH_COMPLEX128, FH_FLOAT64},
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

static const char *torch_name(int32_t d) {
  for (int i = 0; i < NDTYPES; ++i)
    if (dtypes[i].dtype == d) return dtypes[i].torch;
  return NULL;
}

/* ---- the description of a file -------------------------------------------- */
typedef struct desc {
  fh_value_type type;
  int32_t representation; /* plaintexts */
  int64_t depth;          /* plaintexts, ciphertexts */
  double scale;
  int32_t domain, basis, residue;
  int32_t nids;
  int32_t ids[FH_CKKS_MAX_PRIMES];
  int64_t step; /* rotation keys */
  /* the one tensor */
  char tname[8]; /* "data" / "message" */
  int32_t dtype;  /* logical */
  int32_t ndim;
  int64_t shape[FH_MAX_DIMS];
  int32_t npayloads;
  const char *payload[2]; /* real, imag for complex_split */
} desc;

static const char *const value_types[] = {"Plaintext",    "Ciphertext",         "SecretKey",   "PublicKey",
                                          "KeySwitchKey", "RelinearizationKey", "RotationKey", "ConjugationKey"};

/* exactly the keys `want` (n of them) in object o, else an error naming the first missing or unexpected one */
static fh_status exact_keys(json_t *o, const char *what, const char *const *want, int n) {
  for (int i = 0; i < n; ++i)
    if (json_object_get(o, want[i]) == NULL) return CORRUPT("%s is missing field '%s'", what, want[i]);
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    bool known = false;
    for (int i = 0; i < n && !known; ++i) known = strcmp(k, want[i]) == 0;
    if (!known) return UNSUPPORTED("%s has an unknown field '%.64s'", what, k);
  }
  return FH_OK;
}

/* a string without embedded NUL bytes, or NULL */
static const char *jstr(const json_t *j) {
  if (!json_is_string(j)) return NULL;
  const char *s = json_string_value(j);
  return strlen(s) == json_string_length(j) ? s : NULL;
}

/* value_metadata.<name> as a string or null (*out NULL for null) */
static fh_status meta_opt_string(json_t *m, const char *name, const char **out) {
  json_t *v = json_object_get(m, name);
  if (json_is_null(v)) {
    *out = NULL;
    return FH_OK;
  }
  if ((*out = jstr(v)) == NULL) return CORRUPT("value_metadata.%s must be a string or null", name);
  return FH_OK;
}

static fh_status meta_int(json_t *m, const char *name, int64_t lo, int64_t hi, int64_t *out) {
  json_t *v = json_object_get(m, name);
  if (!json_is_integer(v)) return CORRUPT("value_metadata.%s must be an integer", name);
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi) return CORRUPT("value_metadata.%s = %" PRId64 " is out of range", name, (int64_t)x);
  *out = (int64_t)x;
  return FH_OK;
}

static fh_status meta_bool(json_t *m, const char *name, bool *out) {
  json_t *v = json_object_get(m, name);
  if (!json_is_boolean(v)) return CORRUPT("value_metadata.%s must be a boolean", name);
  *out = json_is_true(v);
  return FH_OK;
}

/* domain / basis / residue names; NULL (JSON null) is NONE */
static fh_status parse_domain(const char *s, int32_t *out) {
  if (s == NULL) *out = FH_DOMAIN_NONE;
  else if (strcmp(s, "coefficient") == 0) *out = FH_DOMAIN_COEFFICIENT;
  else if (strcmp(s, "ntt") == 0) *out = FH_DOMAIN_NTT;
  else return UNSUPPORTED("value_metadata.polynomial_domain \"%.32s\" (expected \"coefficient\" or \"ntt\")", s);
  return FH_OK;
}
static fh_status parse_basis(const char *s, int32_t *out) {
  if (s == NULL) *out = FH_BASIS_NONE;
  else if (strcmp(s, "Q") == 0) *out = FH_BASIS_Q;
  else if (strcmp(s, "QP") == 0) *out = FH_BASIS_QP;
  else return UNSUPPORTED("value_metadata.modulus_basis \"%.32s\" (expected \"Q\" or \"QP\")", s);
  return FH_OK;
}
static fh_status parse_residue(const char *s, int32_t *out) {
  if (s == NULL) *out = FH_RESIDUE_NONE;
  else if (strcmp(s, "standard") == 0) *out = FH_RESIDUE_STANDARD;
  else if (strcmp(s, "montgomery") == 0) *out = FH_RESIDUE_MONTGOMERY;
  else return UNSUPPORTED("value_metadata.residue_representation \"%.32s\" (expected \"standard\" or \"montgomery\")", s);
  return FH_OK;
}

/* the RNS fields of value_metadata (required non-null, FHElium's rules) */
static fh_status rns_fields(json_t *m, desc *d) {
  const char *dom = NULL, *bas = NULL, *res = NULL;
  fh_status st;
  if ((st = meta_opt_string(m, "polynomial_domain", &dom)) || (st = meta_opt_string(m, "modulus_basis", &bas)) ||
      (st = meta_opt_string(m, "residue_representation", &res)))
    return st;
  if (dom == NULL) return CORRUPT("value_metadata.polynomial_domain of an RNS value must not be null");
  if (bas == NULL) return CORRUPT("value_metadata.modulus_basis of an RNS value must not be null");
  if (res == NULL) return CORRUPT("value_metadata.residue_representation of an RNS value must not be null");
  if ((st = parse_domain(dom, &d->domain)) || (st = parse_basis(bas, &d->basis)) || (st = parse_residue(res, &d->residue)))
    return st;
  if (d->domain == FH_DOMAIN_NTT && d->residue != FH_RESIDUE_MONTGOMERY)
    return CORRUPT("value_metadata: an NTT-domain value must have residue_representation \"montgomery\"");
  if (d->nids < 1) return CORRUPT("value_metadata.prime_ids of an RNS value cannot be empty");
  return FH_OK;
}

static fh_status parse_prime_ids(json_t *m, desc *d) {
  json_t *v = json_object_get(m, "prime_ids");
  if (!json_is_array(v)) return CORRUPT("value_metadata.prime_ids must be a list of integers");
  size_t n = json_array_size(v);
  if (n > FH_CKKS_MAX_PRIMES) return UNSUPPORTED("value_metadata.prime_ids lists %zu primes (at most %d)", n, FH_CKKS_MAX_PRIMES);
  for (size_t i = 0; i < n; ++i) {
    json_t *x = json_array_get(v, i);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= FH_CKKS_MAX_PRIMES)
      return CORRUPT("value_metadata.prime_ids[%zu] must be a prime id in [0, %d)", i, FH_CKKS_MAX_PRIMES);
    d->ids[i] = (int32_t)json_integer_value(x);
    if (i > 0 && d->ids[i] <= d->ids[i - 1]) return CORRUPT("value_metadata.prime_ids must be strictly increasing");
  }
  d->nids = (int32_t)n;
  return FH_OK;
}

static fh_status parse_value_metadata(json_t *m, desc *d) {
  fh_status st;
  if (!json_is_object(m)) return CORRUPT("value_metadata must be an object");
  if (d->type == FH_PLAINTEXT) {
    static const char *const f[] = {"depth",  "scale",      "representation",  "polynomial_domain", "modulus_basis",
                                    "residue_representation", "prime_ids", "has_message", "has_data"};
    if ((st = exact_keys(m, "value_metadata of a Plaintext", f, 9))) return st;
  } else if (d->type == FH_CIPHERTEXT) {
    static const char *const f[] = {"depth",         "scale", "prime_ids", "polynomial_domain",
                                    "modulus_basis", "residue_representation"};
    if ((st = exact_keys(m, "value_metadata of a Ciphertext", f, 6))) return st;
  } else {
    static const char *const f[] = {"prime_ids", "polynomial_domain", "modulus_basis", "residue_representation",
                                    "rotation_step"};
    char what[64];
    snprintf(what, sizeof what, "value_metadata of a %s", value_types[d->type]);
    if ((st = exact_keys(m, what, f, d->type == FH_ROTATION_KEY ? 5 : 4))) return st;
  }
  if ((st = parse_prime_ids(m, d))) return st;
  if (d->type == FH_PLAINTEXT || d->type == FH_CIPHERTEXT) {
    if ((st = meta_int(m, "depth", 0, FH_CKKS_MAX_PRIMES, &d->depth))) return st;
    json_t *s = json_object_get(m, "scale");
    if (!json_is_number(s)) return CORRUPT("value_metadata.scale must be a number");
    d->scale = json_number_value(s);
    if (!(d->scale > 0) || !isfinite(d->scale)) return CORRUPT("value_metadata.scale must be finite and positive");
  }
  if (d->type == FH_CIPHERTEXT || d->type >= FH_SECRET_KEY) {
    if ((st = rns_fields(m, d))) return st;
    if (d->type == FH_CIPHERTEXT && d->domain == FH_DOMAIN_COEFFICIENT && d->residue != FH_RESIDUE_STANDARD)
      return CORRUPT("value_metadata: a coefficient-domain Ciphertext must have standard residues");
    if (d->type == FH_ROTATION_KEY && (st = meta_int(m, "rotation_step", INT64_MIN / 2, INT64_MAX / 2, &d->step)))
      return st;
    snprintf(d->tname, sizeof d->tname, "data");
    return FH_OK;
  }
  /* Plaintext */
  bool has_message = false, has_data = false;
  if ((st = meta_bool(m, "has_message", &has_message)) || (st = meta_bool(m, "has_data", &has_data))) return st;
  if (has_message == has_data) return CORRUPT("value_metadata: a Plaintext must have exactly one of has_message, has_data");
  const char *rep = jstr(json_object_get(m, "representation"));
  if (rep == NULL) return CORRUPT("value_metadata.representation must be a string");
  if (strcmp(rep, "slots") == 0) d->representation = FH_REPR_SLOTS;
  else if (strcmp(rep, "rns") == 0) d->representation = FH_REPR_RNS;
  else if (strcmp(rep, "integer_coefficients") == 0) d->representation = FH_REPR_INTEGER_COEFFICIENTS;
  else if (strcmp(rep, "approximate_coefficients") == 0) d->representation = FH_REPR_APPROXIMATE_COEFFICIENTS;
  else
    return UNSUPPORTED("value_metadata.representation \"%.40s\" (expected \"slots\", \"rns\", \"integer_coefficients\" "
                       "or \"approximate_coefficients\")",
                       rep);
  if ((d->representation == FH_REPR_SLOTS) != has_message)
    return CORRUPT("value_metadata: representation \"%s\" does not match has_message", rep);
  snprintf(d->tname, sizeof d->tname, "%s", has_message ? "message" : "data");
  if (d->representation == FH_REPR_RNS) return rns_fields(m, d);
  const char *dom = NULL, *bas = NULL, *res = NULL;
  if ((st = meta_opt_string(m, "polynomial_domain", &dom)) || (st = meta_opt_string(m, "modulus_basis", &bas)) ||
      (st = meta_opt_string(m, "residue_representation", &res)))
    return st;
  if (bas != NULL || res != NULL || d->nids != 0)
    return CORRUPT("value_metadata: a %s Plaintext cannot have modulus_basis, residue_representation or prime_ids", rep);
  if (d->representation == FH_REPR_SLOTS && dom != NULL)
    return CORRUPT("value_metadata: a slots Plaintext cannot have a polynomial_domain");
  if (d->representation != FH_REPR_SLOTS && (dom == NULL || strcmp(dom, "coefficient") != 0))
    return CORRUPT("value_metadata: a %s Plaintext must have polynomial_domain \"coefficient\"", rep);
  return FH_OK;
}

static fh_status parse_tensor_metadata(json_t *tm, desc *d) {
  if (!json_is_object(tm) || json_object_size(tm) == 0) return CORRUPT("tensor_metadata must be a non-empty object");
  const char *k;
  json_t *e;
  json_object_foreach(tm, k, e) {
    if (strcmp(k, d->tname) != 0)
      return CORRUPT("tensor_metadata names tensor '%.64s'; a %s has exactly one tensor, '%s'", k, value_types[d->type],
                     d->tname);
  }
  e = json_object_get(tm, d->tname);
  char what[80];
  snprintf(what, sizeof what, "tensor_metadata.%s", d->tname);
  static const char *const f[] = {"shape", "dtype", "encoding", "payloads"};
  fh_status st = exact_keys(e, what, f, 4);
  if (st) return st;
  json_t *sh = json_object_get(e, "shape");
  if (!json_is_array(sh)) return CORRUPT("%s.shape must be a list of integers", what);
  if (json_array_size(sh) > FH_MAX_DIMS) return UNSUPPORTED("%s.shape has more than %d dimensions", what, FH_MAX_DIMS);
  d->ndim = (int32_t)json_array_size(sh);
  for (int i = 0; i < d->ndim; ++i) {
    json_t *x = json_array_get(sh, (size_t)i);
    if (!json_is_integer(x) || json_integer_value(x) < 0) return CORRUPT("%s.shape must list non-negative integers", what);
    d->shape[i] = (int64_t)json_integer_value(x);
  }
  const char *dt = jstr(json_object_get(e, "dtype"));
  if (dt == NULL) return CORRUPT("%s.dtype must be a string", what);
  int di = -1;
  for (int i = 0; i < NDTYPES; ++i)
    if (strcmp(dt, dtypes[i].torch) == 0) di = i;
  if (di < 0)
    return UNSUPPORTED("%s.dtype \"%.32s\" (this fhelium reads torch.int64, torch.int32, torch.float64 and "
                       "torch.complex128)",
                       what, dt);
  d->dtype = dtypes[di].dtype;
  const char *enc = jstr(json_object_get(e, "encoding"));
  if (enc == NULL) return CORRUPT("%s.encoding must be a string", what);
  bool split = strcmp(enc, "complex_split") == 0;
  if (!split && strcmp(enc, "direct") != 0)
    return UNSUPPORTED("%s.encoding \"%.32s\" (expected \"direct\" or \"complex_split\")", what, enc);
  if (split != (d->dtype == FH_COMPLEX128))
    return CORRUPT("%s.encoding must be \"%s\" for dtype %s", what, split ? "direct" : "complex_split", dt);
  json_t *pl = json_object_get(e, "payloads");
  size_t np = split ? 2 : 1;
  if (!json_is_array(pl) || json_array_size(pl) != np)
    return CORRUPT("%s.payloads must list %zu payload name%s", what, np, np > 1 ? "s" : "");
  for (size_t i = 0; i < np; ++i) {
    if ((d->payload[i] = jstr(json_array_get(pl, i))) == NULL || d->payload[i][0] == '\0')
      return CORRUPT("%s.payloads must be non-empty strings", what);
  }
  if (np == 2 && strcmp(d->payload[0], d->payload[1]) == 0) return CORRUPT("%s.payloads must be distinct", what);
  d->npayloads = (int32_t)np;
  return FH_OK;
}

/* The manifest and the header's entries, checked against each other. `root`
 * keeps the strings of d alive. */
static fh_status describe(const fh_st_header *h, desc *d, json_t **root) {
  memset(d, 0, sizeof *d);
  for (int64_t i = 0; i < h->nmeta; ++i)
    if (strcmp(h->meta_keys[i], KEY_FORMAT) != 0 && strcmp(h->meta_keys[i], KEY_SCHEMA) != 0 &&
        strcmp(h->meta_keys[i], KEY_MANIFEST) != 0)
      return UNSUPPORTED("__metadata__ has an unknown key '%.64s'", h->meta_keys[i]);
  const char *fmt = fh_st_header_meta(h, KEY_FORMAT), *schema = fh_st_header_meta(h, KEY_SCHEMA);
  const char *man = fh_st_header_meta(h, KEY_MANIFEST);
  if (strcmp(fmt, FORMAT) != 0) return UNSUPPORTED("fhelium.format is \"%.40s\" (this fhelium reads \"" FORMAT "\")", fmt);
  if (schema == NULL) return CORRUPT("__metadata__ has no fhelium.schema_version");
  if (strcmp(schema, "2") != 0)
    return UNSUPPORTED("fhelium.schema_version is \"%.16s\" (this fhelium reads FHElium 0.30's \"2\")", schema);
  if (man == NULL) return CORRUPT("__metadata__ has no fhelium.manifest");
  json_error_t jerr;
  json_t *m = json_loads(man, JSON_REJECT_DUPLICATES, &jerr);
  if (m == NULL) return CORRUPT("fhelium.manifest is not valid JSON (%.120s)", jerr.text);
  *root = m;
  if (!json_is_object(m)) return CORRUPT("fhelium.manifest must be a JSON object");
  static const char *const f[] = {"file_schema_version", "value_schema_version", "value_type",
                                  "nbytes",              "tensor_metadata",      "value_metadata"};
  fh_status st = exact_keys(m, "fhelium.manifest", f, 6);
  if (st) return st;
  json_t *fv = json_object_get(m, "file_schema_version"), *vv = json_object_get(m, "value_schema_version");
  if (!json_is_integer(fv)) return CORRUPT("fhelium.manifest.file_schema_version must be an integer");
  if (json_integer_value(fv) != FILE_SCHEMA)
    return UNSUPPORTED("file_schema_version %" PRId64 " (this fhelium reads FHElium 0.30's %d)",
                       (int64_t)json_integer_value(fv), FILE_SCHEMA);
  if (!json_is_integer(vv)) return CORRUPT("fhelium.manifest.value_schema_version must be an integer");
  if (json_integer_value(vv) != VALUE_SCHEMA)
    return UNSUPPORTED("value_schema_version %" PRId64 " (this fhelium reads FHElium 0.30's %d)",
                       (int64_t)json_integer_value(vv), VALUE_SCHEMA);
  const char *vt = jstr(json_object_get(m, "value_type"));
  if (vt == NULL) return CORRUPT("fhelium.manifest.value_type must be a string");
  int t = -1;
  for (int i = 0; i < 8; ++i)
    if (strcmp(vt, value_types[i]) == 0) t = i;
  if (t < 0)
    return UNSUPPORTED("value_type \"%.40s\" (this fhelium reads Plaintext, Ciphertext, SecretKey, PublicKey, "
                       "KeySwitchKey, RelinearizationKey, RotationKey and ConjugationKey)",
                       vt);
  d->type = (fh_value_type)t;
  json_t *nb = json_object_get(m, "nbytes");
  if (!json_is_integer(nb) || json_integer_value(nb) < 0)
    return CORRUPT("fhelium.manifest.nbytes must be a non-negative integer");
  if ((st = parse_value_metadata(json_object_get(m, "value_metadata"), d))) return st;
  if ((st = parse_tensor_metadata(json_object_get(m, "tensor_metadata"), d))) return st;
  /* the payloads are exactly the file's entries, each with the logical shape */
  if (h->ntensors != d->npayloads)
    return CORRUPT("the file holds %" PRId64 " tensor entries, the manifest's payloads are %d", h->ntensors, d->npayloads);
  int di = 0;
  for (int i = 0; i < NDTYPES; ++i)
    if (dtypes[i].dtype == d->dtype) di = i;
  uint64_t logical = (uint64_t)fh_dtype_size((fh_dtype)d->dtype);
  for (int i = 0; i < d->ndim; ++i) {
    if (d->shape[i] > 0 && logical > UINT64_MAX / (uint64_t)d->shape[i])
      return CORRUPT("tensor_metadata.%s.shape is too large", d->tname);
    logical *= (uint64_t)d->shape[i];
  }
  if ((uint64_t)json_integer_value(nb) != logical)
    return CORRUPT("fhelium.manifest.nbytes is %" PRId64 " but tensor '%s' holds %" PRIu64 " bytes",
                   (int64_t)json_integer_value(nb), d->tname, logical);
  for (int p = 0; p < d->npayloads; ++p) {
    const fh_st_tensor *e = fh_st_header_find(h, d->payload[p]);
    if (e == NULL) return CORRUPT("payload '%.64s' of tensor '%s' is not in the file", d->payload[p], d->tname);
    if (e->dtype != dtypes[di].stored)
      return CORRUPT("payload '%.64s' is stored as %s, tensor_metadata.%s.dtype is %s", d->payload[p],
                     fh_st_dtype_name((fh_dtype)e->dtype), d->tname, dtypes[di].torch);
    if (e->ndim != d->ndim || memcmp(e->shape, d->shape, sizeof(int64_t) * (size_t)d->ndim) != 0)
      return CORRUPT("payload '%.64s' has another shape than tensor_metadata.%s.shape", d->payload[p], d->tname);
  }
  return FH_OK;
}

/* ---- contexts ------------------------------------------------------------------ */
/* n: ring degree; word: 32/64 for int32/int64 residues, 0 when not RNS data */
static bool fits(const fh_ckks_preset *p, const desc *d, int64_t n, int word, int64_t level) {
  if (p->family != FH_PRESET_FHELIUM_030 || ((int64_t)1 << p->log_n) != n) return false;
  if (word && p->word_bits != word) return false;
  if (level < 0 || level > p->max_level) return false;
  if (d->nids == 0) return true;
  int k = 0;
  if (d->basis != FH_BASIS_Q && d->basis != FH_BASIS_QP) return false;
  for (int i = (int)level; i < p->num_q; ++i)
    if (k >= d->nids || d->ids[k++] != i) return false;
  if (d->basis == FH_BASIS_QP)
    for (int i = 0; i < p->num_p_primes; ++i)
      if (k >= d->nids || d->ids[k++] != p->num_q + i) return false;
  return k == d->nids;
}

static fh_status find_context(const desc *d, int64_t n, int word, fh_ckks_context **out) {
  int64_t level = d->type >= FH_SECRET_KEY ? (d->nids ? d->ids[0] : 0) : d->depth;
  const fh_ckks_preset *cand[64];
  int nc = 0;
  for (int i = 0; i < fh_ckks_preset_count() && nc < 64; ++i)
    if (fits(fh_ckks_preset_at(i), d, n, word, level)) cand[nc++] = fh_ckks_preset_at(i);
  if (nc > 1 && d->type <= FH_CIPHERTEXT && level == 0) { /* a fresh value: its scale is the default */
    int k = 0;
    for (int i = 0; i < nc; ++i)
      if (ldexp(1.0, cand[i]->scale_bits) == d->scale) cand[k++] = cand[i];
    if (k > 0) nc = k;
  }
  if (nc == 1) return fh_ckks_context_from_preset(cand[0]->name, out);
  char ids[64];
  if (d->nids) snprintf(ids, sizeof ids, ", prime_ids %d..%d", d->ids[0], d->ids[d->nids - 1]);
  else ids[0] = '\0';
  if (nc == 0)
    return fh_error_set(FH_ERR_VALUE,
                        "context: the %s (ring degree %" PRId64 "%s%s) matches no FHElium 0.30 preset and the file "
                        "carries no chain; pass context= (a CkksContext with its primes, or a preset name)",
                        value_types[d->type], n, ids, word == 32 ? ", int32 residues" : "");
  char list[600];
  size_t l = 0;
  for (int i = 0; i < nc && l < sizeof list - 80; ++i)
    l += (size_t)snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", cand[i]->name);
  return fh_error_set(FH_ERR_VALUE,
                      "context: the %s (ring degree %" PRId64 "%s) fits several FHElium 0.30 presets (%s); pass "
                      "context= (a CkksContext or a preset name)",
                      value_types[d->type], n, ids, list);
}

/* FH_OK when c has FHElium 0.30's layout, else a ValueError beginning with `what` */
static fh_status check_layout(const fh_ckks_context *c, const char *what) {
  if (c->galois_generator != 3)
    return fh_error_set(FH_ERR_VALUE,
                        "%s: the context has galois_generator %d; FHElium 0.30's values belong to contexts of its slot "
                        "order (galois_generator 3), such as its presets' (fh.Preset.slots*_depth*)",
                        what, c->galois_generator);
  if (c->max_level != c->num_q - 1)
    return fh_error_set(FH_ERR_VALUE,
                        "%s: the context has max_level %d = #q_primes - 2; FHElium 0.30's chains run to depth "
                        "#q_primes - 1",
                        what, c->max_level);
  if (c->key_digits != FH_DIGITS_BELOW_P)
    return fh_error_set(FH_ERR_VALUE,
                        "%s: the context has key_digits \"%s\"; FHElium 0.30 switches keys with key_digits "
                        "\"below_p\"",
                        what, fh_key_digits_name((fh_key_digits)c->key_digits));
  return FH_OK;
}

/* ---- residues -------------------------------------------------------------------- */
/* 2^e mod q */
static uint64_t pow2_mod(int e, const fh_modulus *m) { return fh_mod_pow(2 % m->q, (uint64_t)e, m); }

/* the NTT orders of the rows' primes (ids[0..nids)), N entries each; malloc'd */
static fh_status ntt_orders(const fh_ckks_context *ctx, const int32_t *ids, int nids, uint32_t **out) {
  int64_t n = ctx->ring_degree;
  uint32_t *perm = fh_malloc(sizeof(uint32_t) * (size_t)n * (size_t)nids);
  if (perm == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory converting an FHElium value");
  for (int l = 0; l < nids; ++l) {
    uint64_t q = ctx->primes[ids[l]], psi = 0;
    fh_status st = fh_ckks_min_root(q, ctx->log_n, &psi);
    if (st == FH_OK) st = fh_ckks_fhelium_ntt_order(q, ctx->log_n, psi, perm + (size_t)l * (size_t)n);
    if (st != FH_OK) {
      fh_free(perm);
      return st;
    }
  }
  *out = perm;
  return FH_OK;
}

/* FHElium residues (int64 or int32 `src`, rows of N, row r modulo
 * ctx->primes[ids[r % nids]]) -> ours (uint64 dst). */
static fh_status residues_in(const fh_ckks_context *ctx, const desc *d, const void *src, uint64_t *dst) {
  int64_t n = ctx->ring_degree, rows = 1;
  for (int i = 0; i < d->ndim - 1; ++i) rows *= d->shape[i];
  int radix = d->dtype == FH_INT32 ? 30 : 62;
  uint32_t *perm = NULL;
  fh_status st = FH_OK;
  if (d->domain == FH_DOMAIN_NTT && (st = ntt_orders(ctx, d->ids, d->nids, &perm)) != FH_OK) return st;
  fh_modulus mods[FH_CKKS_MAX_PRIMES];
  uint64_t to_ours[FH_CKKS_MAX_PRIMES];
  for (int l = 0; l < d->nids; ++l) {
    fh_modulus_init(&mods[l], ctx->primes[d->ids[l]]);
    to_ours[l] = pow2_mod(64 - radix, &mods[l]); /* x 2^radix -> x 2^64 */
  }
  for (int64_t r = 0; r < rows && st == FH_OK; ++r) {
    int l = (int)(r % d->nids);
    const fh_modulus *m = &mods[l];
    uint64_t q = m->q, *o = dst + r * n;
    for (int64_t i = 0; i < n; ++i) {
      int64_t x = d->dtype == FH_INT32 ? (int64_t)((const int32_t *)src)[r * n + i] : ((const int64_t *)src)[r * n + i];
      if (x < 0 || (uint64_t)x >= 2 * q) {
        st = CORRUPT("tensor '%s': residue %" PRId64 " of row %" PRId64 " is outside [0, 2q) for q = %" PRIu64
                     " (prime id %d)",
                     d->tname, x, r, q, d->ids[l]);
        break;
      }
      uint64_t y = (uint64_t)x >= q ? (uint64_t)x - q : (uint64_t)x;
      if (d->residue == FH_RESIDUE_MONTGOMERY) y = fh_mod_mul(y, to_ours[l], m);
      o[perm ? perm[(size_t)l * (size_t)n + (size_t)i] : (size_t)i] = y;
    }
  }
  fh_free(perm);
  return st;
}

/* ---- decoding ------------------------------------------------------------------------ */
fh_status fh__v030_decode(const fh_st_header *h, fh__v030_read_fn rd, const void *rctx, fh_device dev,
                          fh_ckks_context *hint, fh_value **out) {
  desc d;
  json_t *root = NULL;
  fh_status st = describe(h, &d, &root);
  fh_ckks_context *ctx = NULL;
  fh_tensor *stored[2] = {NULL, NULL}, *t = NULL;
  fh_value *v = NULL;
  bool rns = fh_state_has_rows(d.type, d.representation);
  /* the tensor's dtype for the value type */
  if (st == FH_OK) {
    bool ok;
    if (d.type == FH_PLAINTEXT && d.representation == FH_REPR_SLOTS)
      ok = d.dtype == FH_FLOAT64 || d.dtype == FH_COMPLEX128;
    else if (d.type == FH_PLAINTEXT && d.representation == FH_REPR_INTEGER_COEFFICIENTS)
      ok = d.dtype == FH_INT64;
    else if (d.type == FH_PLAINTEXT && d.representation == FH_REPR_APPROXIMATE_COEFFICIENTS)
      ok = d.dtype == FH_FLOAT64;
    else
      ok = d.dtype == FH_INT64 || d.dtype == FH_INT32;
    if (!ok)
      st = UNSUPPORTED("tensor '%s' of this %s has dtype %s", d.tname, value_types[d.type], torch_name(d.dtype));
    else if (d.ndim == 0) /* FHElium's tensors have a coefficient (or slot) axis */
      st = CORRUPT("tensor_metadata.%s.shape is [] (a %s needs at least its %s axis)", d.tname, value_types[d.type],
                   d.type == FH_PLAINTEXT && d.representation == FH_REPR_SLOTS ? "slot" : "coefficient");
  }
  /* the context */
  bool slots = d.type == FH_PLAINTEXT && d.representation == FH_REPR_SLOTS;
  if (st == FH_OK) {
    int64_t n = d.ndim > 0 ? d.shape[d.ndim - 1] : 0;
    if (hint) {
      if (!slots) st = check_layout(hint, "context");
      if (st == FH_OK && !slots && n != hint->ring_degree)
        st = fh_error_set(FH_ERR_STATE,
                          "context: the given context has ring_degree %lld but tensor '%s' has %" PRId64
                          " coefficients per row",
                          (long long)hint->ring_degree, d.tname, n);
      if (st == FH_OK) {
        ctx = hint;
        fh_ckks_context_retain(ctx);
      }
    } else if (!slots) {
      st = find_context(&d, n, rns ? (d.dtype == FH_INT32 ? 32 : 64) : 0, &ctx);
    }
  }
  if (st == FH_OK && rns) { /* the rows of (depth, basis) in this context */
    int32_t want[FH_CKKS_MAX_PRIMES], nw = 0;
    int32_t level = d.type >= FH_SECRET_KEY ? d.ids[0] : (int32_t)d.depth;
    st = fh_ckks_context_prime_ids(ctx, level, (fh_modulus_basis)d.basis, want, &nw);
    if (st == FH_OK && (nw != d.nids || memcmp(want, d.ids, sizeof(int32_t) * (size_t)nw) != 0))
      st = fh_error_set(FH_ERR_STATE,
                        "value_metadata.prime_ids (%d ids from %d) are not the rows of depth %d with modulus_basis %s "
                        "in context %.16s... (%d ids from %d)",
                        d.nids, d.ids[0], level, fh_basis_name((fh_modulus_basis)d.basis), ctx->id, nw, want[0]);
  }
  if (st == FH_OK && rns && (d.ndim < 2 || d.shape[d.ndim - 2] != d.nids))
    st = fh_error_set(FH_ERR_STATE, "tensor '%s' has %" PRId64 " limb rows but value_metadata.prime_ids lists %d",
                      d.tname, d.ndim >= 2 ? d.shape[d.ndim - 2] : 0, d.nids);
  /* the payloads */
  fh_tensor_options o = fh_tensor_options_default();
  o.device = fh_cpu();
  for (int p = 0; st == FH_OK && p < d.npayloads; ++p) {
    const fh_st_tensor *e = fh_st_header_find(h, d.payload[p]);
    o.dtype = (fh_dtype)e->dtype;
    if ((st = fh_tensor_empty(d.ndim, d.shape, &o, &stored[p])) == FH_OK)
      st = rd(rctx, h->data_start + e->begin, fh_tensor_data(stored[p]), fh_tensor_nbytes(stored[p]));
  }
  /* the value's tensor */
  if (st == FH_OK) {
    o.dtype = rns ? FH_UINT64 : (fh_dtype)d.dtype;
    st = fh_tensor_empty(d.ndim, d.shape, &o, &t);
  }
  if (st == FH_OK) {
    if (rns) {
      st = residues_in(ctx, &d, fh_tensor_data(stored[0]), (uint64_t *)fh_tensor_data(t));
    } else if (d.dtype == FH_COMPLEX128) {
      const double *re = (const double *)fh_tensor_data(stored[0]), *im = (const double *)fh_tensor_data(stored[1]);
      double *c = (double *)fh_tensor_data(t);
      int64_t k = fh_tensor_numel(t);
      for (int64_t i = 0; i < k; ++i) {
        c[2 * i] = re[i];
        c[2 * i + 1] = im[i];
      }
    } else {
      memcpy(fh_tensor_data(t), fh_tensor_data(stored[0]), fh_tensor_nbytes(t));
    }
  }
  if (st == FH_OK) {
    fh_value_state s = fh_value_state_init(d.type);
    s.representation = d.type == FH_PLAINTEXT ? d.representation : FH_REPR_NONE;
    if (d.type <= FH_CIPHERTEXT) {
      s.level = (int32_t)d.depth;
      s.scale = d.scale;
    } else {
      s.level = d.ids[0];
    }
    s.polynomial_domain = d.domain;
    s.residue_representation = d.residue;
    s.modulus_basis = d.basis;
    s.num_prime_ids = d.nids;
    memcpy(s.prime_ids, d.ids, sizeof(int32_t) * (size_t)d.nids);
    if (d.type == FH_CIPHERTEXT) s.num_components = d.ndim > 0 ? (int32_t)d.shape[0] : 0;
    if (d.type >= FH_PUBLIC_KEY) s.num_components = 2;
    if (d.type == FH_ROTATION_KEY) s.step = d.step;
    fh_value *cpu = NULL;
    st = fh_value_new(ctx, &s, &t, 1, &cpu);
    if (st == FH_OK && dev.type != FH_DEVICE_CPU) {
      st = fh_value_to(cpu, dev, false, &v);
      fh_value_release(cpu);
    } else {
      v = cpu;
    }
  }
  for (int p = 0; p < 2; ++p)
    if (stored[p]) fh_tensor_release(stored[p]);
  if (t) fh_tensor_release(t);
  if (ctx) fh_ckks_context_release(ctx);
  json_decref(root);
  if (st != FH_OK) return st;
  *out = v;
  return FH_OK;
}

/* ---- encoding -------------------------------------------------------------------------- */
typedef struct sbuf {
  char *p;
  size_t n, cap;
  bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t len) {
  if (b->oom) return;
  if (b->n + len + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + len + 1) cap *= 2;
    char *q = fh_realloc(b->p, cap);
    if (q == NULL) {
      b->oom = true;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, len);
  b->n += len;
  b->p[b->n] = '\0';
}
static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  sb_put(b, tmp, (size_t)k);
}
/* a JSON string of an ASCII string, escaped as Python's json and Rust's
 * serde_json both do for ASCII ('"', '\\' and control characters) */
static void sb_jstr(sbuf *b, const char *s) {
  sb_puts(b, "\"");
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"') sb_puts(b, "\\\"");
    else if (c == '\\') sb_puts(b, "\\\\");
    else if (c == '\n') sb_puts(b, "\\n");
    else if (c == '\r') sb_puts(b, "\\r");
    else if (c == '\t') sb_puts(b, "\\t");
    else if (c < 0x20) sb_printf(b, "\\u%04x", c);
    else sb_put(b, (const char *)&c, 1);
  }
  sb_puts(b, "\"");
}

/* Python's repr of a finite double: the shortest digits that read back to
 * x, in fixed notation for 1e-4 <= |x| < 1e16 (with ".0" when integral),
 * else d[.ddd]e+XX. json.dumps writes floats so. */
static void sb_pyfloat(sbuf *b, double x) {
  if (x == 0) {
    sb_puts(b, signbit(x) ? "-0.0" : "0.0");
    return;
  }
  char e[40];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    snprintf(e, sizeof e, "%.*e", prec - 1, x);
    if (strtod(e, NULL) == x) break;
  }
  /* e: [-]d[.ddd]e[+-]XX -> digits and decimal exponent */
  const char *p = e;
  bool neg = *p == '-';
  if (neg) ++p;
  char digits[24];
  int nd = 0;
  for (; *p && *p != 'e'; ++p)
    if (*p >= '0' && *p <= '9') digits[nd++] = *p;
  int exp10 = atoi(p + 1); /* x = d.ddd * 10^exp10 */
  while (nd > 1 && digits[nd - 1] == '0') --nd;
  digits[nd] = '\0';
  int decpt = exp10 + 1; /* x = 0.ddd * 10^decpt */
  if (neg) sb_puts(b, "-");
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      sb_puts(b, "0.");
      for (int i = 0; i < -decpt; ++i) sb_puts(b, "0");
      sb_puts(b, digits);
    } else if (decpt >= nd) {
      sb_puts(b, digits);
      for (int i = nd; i < decpt; ++i) sb_puts(b, "0");
      sb_puts(b, ".0");
    } else {
      sb_put(b, digits, (size_t)decpt);
      sb_puts(b, ".");
      sb_puts(b, digits + decpt);
    }
  } else {
    sb_put(b, digits, 1);
    if (nd > 1) {
      sb_puts(b, ".");
      sb_puts(b, digits + 1);
    }
    sb_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  }
}

static void sb_name_or_null(sbuf *b, const char *s) {
  if (s) sb_jstr(b, s);
  else sb_puts(b, "null");
}

void fh__v030_file_free(fh__v030_file *f) {
  if (f == NULL) return;
  fh_free(f->header);
  for (int i = 0; i < 2; ++i) fh_free(f->payload[i]);
  memset(f, 0, sizeof *f);
}

/* ours -> FHElium's residues (into dst, int64 or int32 by word) */
static fh_status residues_out(const fh_value *v, const uint64_t *src, int word, void *dst) {
  const fh_ckks_context *ctx = v->ctx;
  const fh_value_state *s = &v->state;
  const fh_tensor *t = v->tensors[0];
  int64_t n = ctx->ring_degree, rows = fh_tensor_numel(t) / n;
  int radix = word == 32 ? 30 : 62;
  uint32_t *perm = NULL;
  fh_status st = FH_OK;
  if (s->polynomial_domain == FH_DOMAIN_NTT && (st = ntt_orders(ctx, s->prime_ids, s->num_prime_ids, &perm)) != FH_OK)
    return st;
  fh_modulus mods[FH_CKKS_MAX_PRIMES];
  uint64_t to_theirs[FH_CKKS_MAX_PRIMES];
  for (int l = 0; l < s->num_prime_ids; ++l) {
    fh_modulus_init(&mods[l], ctx->primes[s->prime_ids[l]]);
    to_theirs[l] = fh_mod_inv_prime(pow2_mod(64 - radix, &mods[l]), &mods[l]); /* x 2^64 -> x 2^radix */
  }
  for (int64_t r = 0; r < rows; ++r) {
    int l = (int)(r % s->num_prime_ids);
    const fh_modulus *m = &mods[l];
    const uint64_t *in = src + r * n;
    for (int64_t i = 0; i < n; ++i) {
      uint64_t y = in[perm ? perm[(size_t)l * (size_t)n + (size_t)i] : (size_t)i] % m->q;
      if (s->residue_representation == FH_RESIDUE_MONTGOMERY) y = fh_mod_mul(y, to_theirs[l], m);
      if (word == 32) ((int32_t *)dst)[r * n + i] = (int32_t)y;
      else ((int64_t *)dst)[r * n + i] = (int64_t)y;
    }
  }
  fh_free(perm);
  return st;
}

/* the reasons FHElium 0.30 could not read a value of this context (NULL if none) */
static fh_status check_writable(const fh_value *v, int *word) {
  const fh_ckks_context *c = v->ctx;
  *word = 64;
  bool slots = v->state.type == FH_PLAINTEXT && v->state.representation == FH_REPR_SLOTS;
  if (slots && v->tensors[0]->ndim == 0)
    return fh_error_set(FH_ERR_VALUE,
                        "format fhelium-0.30: a 0-dim message (one value in every slot) has no FHElium form; give it "
                        "as [*batch, slot]");
  if (c == NULL || slots) return FH_OK; /* slot values do not depend on the context */
  fh_status st = check_layout(c, "format fhelium-0.30");
  if (st != FH_OK) return st;
  const fh_ckks_preset *p = fh_ckks_preset_of_context(c);
  *word = p && p->word_bits == 32 ? 32 : 64;
  uint64_t bound = *word == 32 ? (1ULL << 30) : (1ULL << 60);
  for (int i = 0; i < c->num_primes; ++i)
    if (c->primes[i] >= bound)
      return fh_error_set(FH_ERR_VALUE,
                          "format fhelium-0.30: prime id %d (%llu) is not below 2^%d, FHElium 0.30's bound for %s "
                          "residues",
                          i, (unsigned long long)c->primes[i], *word == 32 ? 30 : 60, *word == 32 ? "int32" : "int64");
  return FH_OK;
}

fh_status fh__v030_encode(const fh_value *value, bool allow_secret, fh__v030_file *out) {
  memset(out, 0, sizeof *out);
  const fh_value_state *s = &value->state;
  if (s->type == FH_SECRET_KEY && !allow_secret)
    return fh_error_set(FH_ERR_VALUE,
                        "refusing to save a SecretKey without allow_secret=true (anyone who reads the file can "
                        "decrypt)");
  int word = 64;
  fh_status st = check_writable(value, &word);
  if (st != FH_OK) return st;
  fh_value *v = NULL;
  if ((st = fh_value_to(value, fh_cpu(), false, &v)) != FH_OK) return st; /* contiguous CPU copies */
  const fh_tensor *t = v->tensors[0];
  bool rns = fh_state_has_rows(s->type, s->representation);
  bool slots = s->type == FH_PLAINTEXT && s->representation == FH_REPR_SLOTS;
  const char *tname = slots ? "message" : "data";
  int32_t ldtype = rns ? (word == 32 ? FH_INT32 : FH_INT64) : t->dtype;
  /* payloads */
  size_t numel = (size_t)fh_tensor_numel(t);
  bool split = ldtype == FH_COMPLEX128;
  out->npayloads = split ? 2 : 1;
  size_t elem = split ? 8 : (size_t)fh_dtype_size((fh_dtype)ldtype);
  for (int i = 0; i < out->npayloads; ++i) {
    out->nbytes[i] = numel * elem;
    out->payload[i] = fh_malloc(out->nbytes[i] ? out->nbytes[i] : 1);
    if (out->payload[i] == NULL) st = fh_error_set(FH_ERR_MEMORY, "out of memory writing an FHElium value file");
  }
  if (st == FH_OK) {
    if (rns) {
      st = residues_out(v, (const uint64_t *)fh_tensor_data(t), word, out->payload[0]);
    } else if (split) { /* payload 0 = NAME.imag, 1 = NAME.real (the file's order, below) */
      const double *c = (const double *)fh_tensor_data(t);
      for (size_t i = 0; i < numel; ++i) {
        ((double *)out->payload[1])[i] = c[2 * i];
        ((double *)out->payload[0])[i] = c[2 * i + 1];
      }
    } else {
      memcpy(out->payload[0], fh_tensor_data(t), out->nbytes[0]);
    }
  }
  /* the manifest (Python's json.dumps(sort_keys=True, separators=(",", ":"))) */
  sbuf m = {0}, sh = {0}, hd = {0};
  for (int i = 0; i < t->ndim; ++i) sb_printf(&sh, "%s%lld", i ? "," : "", (long long)t->shape[i]);
  sb_puts(&sh, "");
  sb_printf(&m, "{\"file_schema_version\":%d,\"nbytes\":%llu,\"tensor_metadata\":{", FILE_SCHEMA,
            (unsigned long long)(numel * (size_t)fh_dtype_size((fh_dtype)ldtype)));
  sb_jstr(&m, tname);
  sb_printf(&m, ":{\"dtype\":\"%s\",\"encoding\":\"%s\",\"payloads\":[", torch_name(ldtype),
            split ? "complex_split" : "direct");
  if (split) sb_printf(&m, "\"%s.real\",\"%s.imag\"", tname, tname);
  else sb_printf(&m, "\"%s\"", tname);
  sb_puts(&m, "],\"shape\":[");
  sb_puts(&m, sh.p ? sh.p : "");
  sb_puts(&m, "]}},\"value_metadata\":{");
  const char *dom = fh_domain_name((fh_polynomial_domain)s->polynomial_domain);
  const char *bas = fh_basis_name((fh_modulus_basis)s->modulus_basis);
  const char *res = fh_residue_name((fh_residue_representation)s->residue_representation);
  sbuf ids = {0};
  sb_puts(&ids, "[");
  for (int i = 0; i < s->num_prime_ids; ++i) sb_printf(&ids, "%s%d", i ? "," : "", s->prime_ids[i]);
  sb_puts(&ids, "]");
  if (s->type == FH_PLAINTEXT) {
    if (s->representation == FH_REPR_INTEGER_COEFFICIENTS || s->representation == FH_REPR_APPROXIMATE_COEFFICIENTS)
      dom = "coefficient";
    sb_printf(&m, "\"depth\":%d,\"has_data\":%s,\"has_message\":%s,\"modulus_basis\":", s->level,
              slots ? "false" : "true", slots ? "true" : "false");
    sb_name_or_null(&m, bas);
    sb_puts(&m, ",\"polynomial_domain\":");
    sb_name_or_null(&m, dom);
    sb_puts(&m, ",\"prime_ids\":");
    sb_puts(&m, ids.p);
    sb_puts(&m, ",\"representation\":");
    sb_jstr(&m, fh_representation_name((fh_representation)s->representation));
    sb_puts(&m, ",\"residue_representation\":");
    sb_name_or_null(&m, res);
    sb_puts(&m, ",\"scale\":");
    sb_pyfloat(&m, s->scale);
  } else if (s->type == FH_CIPHERTEXT) {
    sb_printf(&m, "\"depth\":%d,\"modulus_basis\":", s->level);
    sb_jstr(&m, bas);
    sb_puts(&m, ",\"polynomial_domain\":");
    sb_jstr(&m, dom);
    sb_puts(&m, ",\"prime_ids\":");
    sb_puts(&m, ids.p);
    sb_puts(&m, ",\"residue_representation\":");
    sb_jstr(&m, res);
    sb_puts(&m, ",\"scale\":");
    sb_pyfloat(&m, s->scale);
  } else {
    sb_puts(&m, "\"modulus_basis\":");
    sb_jstr(&m, bas);
    sb_puts(&m, ",\"polynomial_domain\":");
    sb_jstr(&m, dom);
    sb_puts(&m, ",\"prime_ids\":");
    sb_puts(&m, ids.p);
    sb_puts(&m, ",\"residue_representation\":");
    sb_jstr(&m, res);
    if (s->type == FH_ROTATION_KEY) {
      /* ours is in (-S/2, S/2], FHElium's in [-S/2, S/2) */
      int64_t S = v->ctx->num_slots, step = s->step == S / 2 ? -S / 2 : s->step;
      sb_printf(&m, ",\"rotation_step\":%lld", (long long)step);
    }
  }
  sb_printf(&m, "},\"value_schema_version\":%d,\"value_type\":", VALUE_SCHEMA);
  sb_jstr(&m, fh_value_type_name((fh_value_type)s->type));
  sb_puts(&m, "}");
  /* the safetensors header, as FHElium's writer (Rust safetensors) lays it
   * out: "__metadata__" first (keys sorted here; FHElium's order varies),
   * then the entries by dtype and name, each {"dtype","shape","data_offsets"},
   * padded with spaces to a multiple of 8 */
  sb_puts(&hd, "{\"__metadata__\":{\"" KEY_FORMAT "\":\"" FORMAT "\",\"" KEY_MANIFEST "\":");
  sb_jstr(&hd, m.p ? m.p : "");
  sb_puts(&hd, ",\"" KEY_SCHEMA "\":\"2\"}");
  const char *stn = fh_st_dtype_name((fh_dtype)(split ? FH_FLOAT64 : ldtype));
  uint64_t off = 0;
  for (int i = 0; i < out->npayloads; ++i) {
    sb_puts(&hd, ",");
    if (split) sb_printf(&hd, "\"%s.%s\"", tname, i == 0 ? "imag" : "real");
    else sb_jstr(&hd, tname);
    sb_printf(&hd, ":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%llu,%llu]}", stn, sh.p ? sh.p : "",
              (unsigned long long)off, (unsigned long long)(off + out->nbytes[i]));
    off += out->nbytes[i];
  }
  sb_puts(&hd, "}");
  while (hd.n % 8 != 0) sb_puts(&hd, " ");
  if (st == FH_OK && (m.oom || sh.oom || hd.oom || ids.oom))
    st = fh_error_set(FH_ERR_MEMORY, "out of memory writing an FHElium value file");
  if (st == FH_OK) {
    out->hlen = hd.n + 8;
    out->header = fh_malloc(out->hlen);
    if (out->header == NULL) {
      st = fh_error_set(FH_ERR_MEMORY, "out of memory writing an FHElium value file");
    } else {
      for (int i = 0; i < 8; ++i) out->header[i] = (char)((uint64_t)hd.n >> (8 * i));
      memcpy(out->header + 8, hd.p, hd.n);
    }
  }
  fh_free(m.p);
  fh_free(sh.p);
  fh_free(hd.p);
  fh_free(ids.p);
  fh_value_release(v);
  if (st != FH_OK) fh__v030_file_free(out);
  return st;
}
