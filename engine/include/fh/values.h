/* fhelium CKKS values: Plaintext, Ciphertext and keys with exact state.
 *
 * A value is an immutable, reference-counted record of exact CKKS state plus
 * the tensors that carry its payload (one reference each). It never owns
 * device work: moving or cloning a value makes new tensors. The state axes
 * (FHElium's value model) are independent coordinates:
 *
 *   type                    Plaintext, Ciphertext, SecretKey, PublicKey,
 *                           KeySwitchKey, RelinearizationKey, RotationKey,
 *                           ConjugationKey
 *   representation          plaintexts only: "slots" (message tensor),
 *                           "rns" (data tensor), or FHElium's coefficient
 *                           forms "integer_coefficients" (int64 data) and
 *                           "approximate_coefficients" (float64 data)
 *   level, scale            plaintexts and ciphertexts: 0 <= level <=
 *                           max_level, scale positive and finite
 *   prime_ids               RNS values: one id per limb row, in order; always
 *                           the canonical rows of (level, modulus_basis), see
 *                           fh/ckks_context.h
 *   polynomial_domain       coefficient | ntt          (RNS values)
 *   residue_representation  standard | montgomery     (RNS values)
 *   modulus_basis           Q | QP                     (RNS values)
 *   num_components          ciphertexts 2 or 3; public and key-switching
 *                           keys 2 (their key_component axis)
 *   step                    rotation keys: the canonical step, normalized
 *                           into (-num_slots/2, num_slots/2], never 0
 *   context                 every RNS value belongs to a context; a slots
 *                           plaintext may have none (context_id "")
 *
 * Allowed (domain, residue) pairs: ciphertexts and keys (coefficient,
 * standard) or (ntt, montgomery); RNS plaintexts also (coefficient,
 * montgomery). (ntt, standard) is never valid.
 *
 * Tensor layouts (uint64 for RNS data, N = ring degree, limb = #prime_ids,
 * every *batch extent >= 1):
 *   Plaintext slots   message float64/complex128: 0-dim (one value in every
 *                     slot) or [*batch, slot] with 1 <= slot <= num_slots
 *   Plaintext rns     data [*batch, limb, N]
 *   Plaintext integer_coefficients / approximate_coefficients
 *                     data int64 / float64 [*batch, N]: the polynomial's
 *                     coefficients themselves (no prime rows; level and
 *                     scale as for every plaintext, a context required)
 *   Ciphertext        data [component, *batch, limb, N], component 2 or 3
 *   SecretKey         data [limb, N]
 *   PublicKey         data [2, limb, N]
 *   KeySwitchKey, RelinearizationKey, RotationKey, ConjugationKey
 *                     data [digit, 2, limb, N], digit >= 1
 * Strides are free (views are values too). Residues are not range-checked
 * (that would read the data); every other rule above is checked by
 * fh_value_new and the constructors below, which reject impossible states:
 * ValueError for malformed fields (unknown names, wrong dtype or rank,
 * non-finite scale, negative numbers), StateError for impossible
 * combinations (ntt with standard residues, level above max_level, limb
 * count != #prime_ids, non-canonical prime_ids, wrong component count,
 * N != the context's ring degree). Messages name the field.
 *
 * Ownership: every fh_value ** out parameter receives a new reference
 * (fh_value_release). Values retain their context and tensors. Accessors
 * return borrowed pointers valid while the value lives. */
#ifndef FH_VALUES_H
#define FH_VALUES_H

#include "fh/ckks_context.h"
#include "fh/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FH_VALUE_SCHEMA_VERSION 1
#define FH_VALUE_MAX_TENSORS 4

typedef enum fh_value_type {
  FH_PLAINTEXT = 0,
  FH_CIPHERTEXT,
  FH_SECRET_KEY,
  FH_PUBLIC_KEY,
  FH_KEY_SWITCH_KEY,
  FH_RELINEARIZATION_KEY,
  FH_ROTATION_KEY,
  FH_CONJUGATION_KEY,
  FH_VALUE_TYPE_COUNT
} fh_value_type;

typedef enum fh_representation {
  FH_REPR_NONE = 0,
  FH_REPR_SLOTS,
  FH_REPR_RNS,
  FH_REPR_INTEGER_COEFFICIENTS,    /* FHElium's: int64 round(scale * m) coefficients */
  FH_REPR_APPROXIMATE_COEFFICIENTS /* FHElium's: float64 coefficients (e.g. a decrypted phase) */
} fh_representation;
#define FH_REPR_COUNT 5
typedef enum fh_polynomial_domain { FH_DOMAIN_NONE = 0, FH_DOMAIN_COEFFICIENT, FH_DOMAIN_NTT } fh_polynomial_domain;
typedef enum fh_residue_representation {
  FH_RESIDUE_NONE = 0,
  FH_RESIDUE_STANDARD,
  FH_RESIDUE_MONTGOMERY
} fh_residue_representation;

/* Names as the Lua API spells them ("Ciphertext", "ntt", "montgomery",
 * "QP", "slots"); NONE gives NULL. Parsers raise ValueError listing the
 * accepted names. */
const char *fh_value_type_name(fh_value_type t);
fh_status fh_value_type_parse(const char *s, fh_value_type *out);
const char *fh_representation_name(fh_representation r);
fh_status fh_representation_parse(const char *s, fh_representation *out);
const char *fh_domain_name(fh_polynomial_domain d);
fh_status fh_domain_parse(const char *s, fh_polynomial_domain *out);
const char *fh_residue_name(fh_residue_representation r);
fh_status fh_residue_parse(const char *s, fh_residue_representation *out);
const char *fh_basis_name(fh_modulus_basis b);
fh_status fh_basis_parse(const char *s, fh_modulus_basis *out);

/* An RNS value (prime rows: every value but slots and coefficient plaintexts). */
static inline bool fh_state_has_rows(int32_t type, int32_t representation) {
  return type != 0 /* FH_PLAINTEXT */ || representation == FH_REPR_RNS;
}

/* Exact state. Fields that do not apply to a type hold their NONE / 0
 * value (level -1 and scale 0 for keys; a key's level is recorded
 * internally as its first Q prime id but is not part of its identity). */
typedef struct fh_value_state {
  int32_t type;                   /* fh_value_type */
  int32_t representation;         /* fh_representation (plaintexts) */
  int32_t level;                  /* plaintexts, ciphertexts; keys: first Q id */
  double scale;                   /* plaintexts, ciphertexts */
  int32_t polynomial_domain;      /* fh_polynomial_domain */
  int32_t residue_representation; /* fh_residue_representation */
  int32_t modulus_basis;          /* fh_modulus_basis */
  int32_t num_components;         /* ciphertext 2|3, public/key-switch keys 2 */
  int64_t step;                   /* rotation keys */
  int32_t num_prime_ids;
  int32_t prime_ids[FH_CKKS_MAX_PRIMES];
} fh_value_state;

typedef struct fh_value {
  fh_refcount rc;
  fh_value_state state;
  fh_ckks_context *ctx; /* one reference; NULL only for a context-free slots plaintext */
  int32_t ntensors;
  fh_tensor *tensors[FH_VALUE_MAX_TENSORS]; /* one reference each */
} fh_value;

static inline void fh_value_retain(fh_value *v) { fh_rc_retain(&v->rc); }
void fh_value_release(fh_value *v);

/* ---- construction ------------------------------------------------------- */
/* A zeroed state of `type` (all axes NONE, level -1). */
fh_value_state fh_value_state_init(fh_value_type type);
/* Fill st->prime_ids with the canonical ids of (st->level, st->modulus_basis). */
fh_status fh_value_state_canonical_prime_ids(const fh_ckks_context *ctx, fh_value_state *st);

/* The general constructor: validates `st` against `ctx` and the tensors
 * (count and names per type: one tensor, "message" for slots plaintexts,
 * "data" otherwise). A rotation key's step is normalized here. */
fh_status fh_value_new(fh_ckks_context *ctx, const fh_value_state *st, fh_tensor *const *tensors, int ntensors,
                       fh_value **out);

/* Convenience constructors for the evaluator: prime ids canonical,
 * residue representation coupled to the domain for ciphertexts and keys
 * (coefficient -> standard, ntt -> montgomery), components from the shape. */
fh_status fh_ciphertext_new(fh_ckks_context *ctx, fh_tensor *data, int32_t level, double scale, fh_modulus_basis basis,
                            fh_polynomial_domain domain, fh_value **out);
fh_status fh_plaintext_rns_new(fh_ckks_context *ctx, fh_tensor *data, int32_t level, double scale,
                               fh_modulus_basis basis, fh_polynomial_domain domain,
                               fh_residue_representation residue, fh_value **out);
/* ctx may be NULL (no level range or slot count check then). */
fh_status fh_plaintext_slots_new(fh_ckks_context *ctx, fh_tensor *message, int32_t level, double scale,
                                 fh_value **out);
/* Any key type; `level` selects the prime-row suffix (0: every Q row);
 * `step` is used by rotation keys only. */
fh_status fh_key_new(fh_ckks_context *ctx, fh_value_type type, fh_tensor *data, int32_t level, fh_modulus_basis basis,
                     fh_polynomial_domain domain, int64_t step, fh_value **out);

/* Contiguous copies of every tensor on `dev` (pinned when `pin` and dev is
 * the CPU) / on the same device. */
fh_status fh_value_to(const fh_value *v, fh_device dev, bool pin, fh_value **out);
fh_status fh_value_clone(const fh_value *v, fh_value **out);

/* ---- queries ------------------------------------------------------------ */
static inline fh_value_type fh_value_get_type(const fh_value *v) { return (fh_value_type)v->state.type; }
/* The payload tensor ("data", or "message" for a slots plaintext). Borrowed. */
static inline fh_tensor *fh_value_data(const fh_value *v) { return v->tensors[0]; }
static inline fh_device fh_value_device(const fh_value *v) { return fh_tensor_device(v->tensors[0]); }
/* Name of tensor i ("data" / "message"). */
const char *fh_value_tensor_name(const fh_value *v, int i);
/* "" for a context-free value. Borrowed. */
const char *fh_value_context_id(const fh_value *v);
bool fh_value_is_secret(const fh_value *v); /* SecretKey */
/* Ciphertexts: data.shape[1 : ndim-2]; RNS plaintexts: [0 : ndim-2];
 * slots and coefficient plaintexts: [0 : ndim-1] (empty for a scalar).
 * Returns the count. */
int fh_value_batch_shape(const fh_value *v, int64_t *shape);
/* Same type, context, state, tensor shapes, dtypes and elements (devices
 * and strides may differ). Reads the data (synchronizes). */
fh_status fh_value_equal(const fh_value *a, const fh_value *b, bool *result);
/* State equality (no tensors, no device). */
bool fh_value_state_equal(const fh_value_state *a, const fh_value_state *b);

/* ---- metadata: the envelope's exact-state fields ----------------------- */
/* A metadata field. Lists are prime ids. Strings are borrowed. */
typedef enum fh_meta_kind { FH_META_INT = 0, FH_META_REAL, FH_META_STRING, FH_META_INT_LIST } fh_meta_kind;
typedef struct fh_meta_entry {
  const char *key;
  int32_t kind; /* fh_meta_kind */
  int64_t i;
  double r;
  const char *s;
  const int32_t *list;
  int32_t nlist;
} fh_meta_entry;
#define FH_META_MAX 12

/* The metadata of a value's type, sorted by key (the deterministic order of
 * envelopes and signatures). Strings and lists borrow from `st`. Returns
 * the count (<= FH_META_MAX). Fields per type:
 *   Plaintext slots, integer_coefficients, approximate_coefficients:
 *                    level, representation, scale
 *   Plaintext rns:   level, modulus_basis, polynomial_domain, prime_ids,
 *                    representation, residue_representation, scale
 *   Ciphertext:      level, modulus_basis, num_components, polynomial_domain,
 *                    prime_ids, residue_representation, scale
 *   keys:            modulus_basis, polynomial_domain, prime_ids,
 *                    residue_representation (+ step for RotationKey) */
int fh_value_state_metadata(const fh_value_state *st, fh_meta_entry *out);
/* Formats one entry's value for messages and signature keys: integers in
 * decimal, reals with %.17g (exact round trip), strings as is, lists as
 * "{0,1,2}". Returns buf. */
const char *fh_meta_format(const fh_meta_entry *e, char *buf, size_t size);

/* Build a value from metadata fields (an envelope, or a constructor's
 * options). With `defaults` false every field of the type is required;
 * with it true, absent fields take their defaults (level 0, the context's
 * default scale, modulus_basis Q (keys: QP), polynomial_domain coefficient,
 * residue coupled to the domain, prime_ids canonical, num_components from
 * the data). Unknown or duplicated fields and fields of the wrong kind are
 * ValueError naming the field. `ctx` may be NULL only for a slots
 * plaintext. */
fh_status fh_value_from_metadata(fh_ckks_context *ctx, fh_value_type type, const fh_meta_entry *entries, int n,
                                 bool defaults, fh_tensor *const *tensors, const char *const *tensor_names,
                                 int ntensors, fh_value **out);

#ifdef __cplusplus
}
#endif
#endif
