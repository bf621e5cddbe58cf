/* CKKS values: exact state validation, constructors, metadata. */
#include "fh/values.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ---------------------------------------------------------------- */
static const char *const type_names[FH_VALUE_TYPE_COUNT] = {
    "Plaintext",    "Ciphertext",         "SecretKey",   "PublicKey",
    "KeySwitchKey", "RelinearizationKey", "RotationKey", "ConjugationKey",
};
static const char *const repr_names[] = {NULL, "slots", "rns", "integer_coefficients", "approximate_coefficients"};
static const char *const domain_names[] = {NULL, "coefficient", "ntt"};
static const char *const residue_names[] = {NULL, "standard", "montgomery"};
static const char *const basis_names[] = {NULL, "Q", "QP"};

const char *fh_value_type_name(fh_value_type t) { return (unsigned)t < FH_VALUE_TYPE_COUNT ? type_names[t] : NULL; }
const char *fh_representation_name(fh_representation r) { return (unsigned)r < FH_REPR_COUNT ? repr_names[r] : NULL; }
const char *fh_domain_name(fh_polynomial_domain d) { return (unsigned)d < 3 ? domain_names[d] : NULL; }
const char *fh_residue_name(fh_residue_representation r) { return (unsigned)r < 3 ? residue_names[r] : NULL; }
const char *fh_basis_name(fh_modulus_basis b) { return (unsigned)b < 3 ? basis_names[b] : NULL; }

static fh_status parse_name(const char *field, const char *s, const char *const *names, int n, int32_t *out) {
  for (int i = 0; i < n; ++i)
    if (names[i] && s && strcmp(s, names[i]) == 0) {
      *out = i;
      return FH_OK;
    }
  char list[256];
  size_t l = 0;
  for (int i = 0; i < n; ++i)
    if (names[i]) l += (size_t)snprintf(list + l, sizeof list - l, "%s\"%s\"", l ? ", " : "", names[i]);
  return fh_error_set(FH_ERR_VALUE, "%s must be one of %s, got \"%.64s\"", field, list, s ? s : "(null)");
}

fh_status fh_value_type_parse(const char *s, fh_value_type *out) {
  int32_t v = 0;
  fh_status st = parse_name("value_type", s, type_names, FH_VALUE_TYPE_COUNT, &v);
  if (st == FH_OK) *out = (fh_value_type)v;
  return st;
}
fh_status fh_representation_parse(const char *s, fh_representation *out) {
  int32_t v = 0;
  fh_status st = parse_name("representation", s, repr_names, FH_REPR_COUNT, &v);
  if (st == FH_OK) *out = (fh_representation)v;
  return st;
}
fh_status fh_domain_parse(const char *s, fh_polynomial_domain *out) {
  int32_t v = 0;
  fh_status st = parse_name("polynomial_domain", s, domain_names, 3, &v);
  if (st == FH_OK) *out = (fh_polynomial_domain)v;
  return st;
}
fh_status fh_residue_parse(const char *s, fh_residue_representation *out) {
  int32_t v = 0;
  fh_status st = parse_name("residue_representation", s, residue_names, 3, &v);
  if (st == FH_OK) *out = (fh_residue_representation)v;
  return st;
}
fh_status fh_basis_parse(const char *s, fh_modulus_basis *out) {
  int32_t v = 0;
  fh_status st = parse_name("modulus_basis", s, basis_names, 3, &v);
  if (st == FH_OK) *out = (fh_modulus_basis)v;
  return st;
}

static bool is_key(int32_t type) { return type >= FH_SECRET_KEY && type < FH_VALUE_TYPE_COUNT; }

/* "{0,1,2}" (abbreviated past 24 entries) */
static const char *format_ids(const int32_t *ids, int n, char *buf, size_t size) {
  size_t l = 0;
  buf[l++] = '{';
  for (int i = 0; i < n && l + 24 < size; ++i) {
    if (n > 24 && i == 12) {
      l += (size_t)snprintf(buf + l, size - l, "...,");
      i = n - 12;
    }
    l += (size_t)snprintf(buf + l, size - l, "%s%d", (i && buf[l - 1] != ',') ? "," : "", ids[i]);
  }
  snprintf(buf + l, size - l, "}");
  return buf;
}

static const char *format_shape(const fh_tensor *t, char *buf, size_t size) {
  size_t l = 0;
  buf[l++] = '{';
  buf[l] = '\0';
  for (int i = 0; i < t->ndim && l + 24 < size; ++i)
    l += (size_t)snprintf(buf + l, size - l, "%s%lld", i ? "," : "", (long long)t->shape[i]);
  snprintf(buf + l, size - l, "}");
  return buf;
}

/* ---- state ---------------------------------------------------------------- */
fh_value_state fh_value_state_init(fh_value_type type) {
  fh_value_state s;
  memset(&s, 0, sizeof s);
  s.type = type;
  s.level = -1;
  return s;
}

fh_status fh_value_state_canonical_prime_ids(const fh_ckks_context *ctx, fh_value_state *st) {
  if (ctx == NULL) return fh_error_set(FH_ERR_VALUE, "prime_ids need a CKKS context");
  return fh_ckks_context_prime_ids(ctx, st->level, (fh_modulus_basis)st->modulus_basis, st->prime_ids,
                                   &st->num_prime_ids);
}

bool fh_value_state_equal(const fh_value_state *a, const fh_value_state *b) {
  return a->type == b->type && a->representation == b->representation && a->level == b->level &&
         a->scale == b->scale && a->polynomial_domain == b->polynomial_domain &&
         a->residue_representation == b->residue_representation && a->modulus_basis == b->modulus_basis &&
         a->num_components == b->num_components && a->step == b->step && a->num_prime_ids == b->num_prime_ids &&
         memcmp(a->prime_ids, b->prime_ids, sizeof(int32_t) * (size_t)a->num_prime_ids) == 0;
}

/* ---- validation ------------------------------------------------------------ */
#define TN(st) type_names[(st)->type]

static fh_status check_level_scale(const fh_ckks_context *ctx, const fh_value_state *st) {
  if (st->level < 0) return fh_error_set(FH_ERR_VALUE, "%s: level must be >= 0, got %d", TN(st), st->level);
  if (ctx && st->level > ctx->max_level)
    return fh_error_set(FH_ERR_STATE, "%s: level %d is outside [0, %d] (max_level of context %.8s)", TN(st), st->level,
                        ctx->max_level, ctx->id);
  if (!(st->scale > 0) || !isfinite(st->scale))
    return fh_error_set(FH_ERR_VALUE, "%s: scale must be positive and finite, got %.17g", TN(st), st->scale);
  return FH_OK;
}

static fh_status check_rns_state(const fh_ckks_context *ctx, const fh_value_state *st, bool coupled) {
  if (st->polynomial_domain != FH_DOMAIN_COEFFICIENT && st->polynomial_domain != FH_DOMAIN_NTT)
    return fh_error_set(FH_ERR_VALUE, "%s: polynomial_domain must be \"coefficient\" or \"ntt\"", TN(st));
  if (st->residue_representation != FH_RESIDUE_STANDARD && st->residue_representation != FH_RESIDUE_MONTGOMERY)
    return fh_error_set(FH_ERR_VALUE, "%s: residue_representation must be \"standard\" or \"montgomery\"", TN(st));
  if (st->modulus_basis != FH_BASIS_Q && st->modulus_basis != FH_BASIS_QP)
    return fh_error_set(FH_ERR_VALUE, "%s: modulus_basis must be \"Q\" or \"QP\"", TN(st));
  if (st->polynomial_domain == FH_DOMAIN_NTT && st->residue_representation == FH_RESIDUE_STANDARD)
    return fh_error_set(FH_ERR_STATE,
                        "%s: polynomial_domain \"ntt\" requires residue_representation \"montgomery\", got "
                        "\"standard\" (NTT data uses Montgomery residues)",
                        TN(st));
  if (coupled && st->polynomial_domain == FH_DOMAIN_COEFFICIENT && st->residue_representation != FH_RESIDUE_STANDARD)
    return fh_error_set(FH_ERR_STATE,
                        "%s: polynomial_domain \"coefficient\" requires residue_representation \"standard\", got "
                        "\"montgomery\" (only RNS plaintexts may hold coefficient-domain Montgomery residues)",
                        TN(st));
  if (st->num_prime_ids < 1 || st->num_prime_ids > FH_CKKS_MAX_PRIMES)
    return fh_error_set(FH_ERR_STATE, "%s: prime_ids must list one id per limb row (got %d ids)", TN(st),
                        st->num_prime_ids);
  int32_t ids[FH_CKKS_MAX_PRIMES], n;
  fh_status s = fh_ckks_context_prime_ids(ctx, st->level, (fh_modulus_basis)st->modulus_basis, ids, &n);
  if (s != FH_OK) {
    fh_error_prefix("%s", TN(st));
    return s;
  }
  if (n != st->num_prime_ids || memcmp(ids, st->prime_ids, sizeof(int32_t) * (size_t)n) != 0) {
    char a[256], b[256];
    return fh_error_set(FH_ERR_STATE,
                        "%s: prime_ids %s are not the active rows of level %d with modulus_basis %s (expected %s)",
                        TN(st), format_ids(st->prime_ids, st->num_prime_ids, a, sizeof a), st->level,
                        basis_names[st->modulus_basis], format_ids(ids, n, b, sizeof b));
  }
  return FH_OK;
}

static fh_status check_no_rns_state(const fh_value_state *st) {
  const char *r = repr_names[st->representation];
  if (st->polynomial_domain != FH_DOMAIN_NONE)
    return fh_error_set(FH_ERR_STATE, "%s: a %s plaintext has no polynomial_domain", TN(st), r);
  if (st->residue_representation != FH_RESIDUE_NONE)
    return fh_error_set(FH_ERR_STATE, "%s: a %s plaintext has no residue_representation", TN(st), r);
  if (st->modulus_basis != FH_BASIS_NONE)
    return fh_error_set(FH_ERR_STATE, "%s: a %s plaintext has no modulus_basis", TN(st), r);
  if (st->num_prime_ids != 0) return fh_error_set(FH_ERR_STATE, "%s: a %s plaintext has no prime_ids", TN(st), r);
  return FH_OK;
}

/* data [lead..., *batch, limb, N]: `lead` leading structural axes. */
static fh_status check_rns_tensor(const fh_ckks_context *ctx, const fh_value_state *st, const fh_tensor *t, int lead,
                                  int min_batch, int max_batch, const char *layout) {
  char sh[160];
  if (t->dtype != FH_UINT64)
    return fh_error_set(FH_ERR_VALUE, "%s: data must be a uint64 tensor, got %s", TN(st),
                        fh_dtype_name((fh_dtype)t->dtype));
  int nb = t->ndim - lead - 2;
  if (nb < min_batch || nb > max_batch)
    return fh_error_set(FH_ERR_VALUE, "%s: data must have layout %s, got shape %s", TN(st), layout,
                        format_shape(t, sh, sizeof sh));
  for (int i = lead; i < lead + nb; ++i)
    if (t->shape[i] < 1)
      return fh_error_set(FH_ERR_VALUE, "%s: batch extent %d of data is %lld; batch extents must be >= 1 (shape %s)",
                          TN(st), i - lead + 1, (long long)t->shape[i], format_shape(t, sh, sizeof sh));
  if (t->shape[t->ndim - 1] != ctx->ring_degree)
    return fh_error_set(FH_ERR_STATE, "%s: data has %lld coefficients per row but the context's ring_degree is %lld",
                        TN(st), (long long)t->shape[t->ndim - 1], (long long)ctx->ring_degree);
  if (t->shape[t->ndim - 2] != st->num_prime_ids)
    return fh_error_set(FH_ERR_STATE, "%s: data has %lld limb rows but prime_ids lists %d primes", TN(st),
                        (long long)t->shape[t->ndim - 2], st->num_prime_ids);
  return FH_OK;
}

static fh_status validate(const fh_ckks_context *ctx, fh_value_state *st, fh_tensor *const *tensors, int ntensors) {
  if ((unsigned)st->type >= FH_VALUE_TYPE_COUNT) return fh_error_set(FH_ERR_VALUE, "unknown value type %d", st->type);
  if (ntensors != 1 || tensors == NULL || tensors[0] == NULL)
    return fh_error_set(FH_ERR_VALUE, "%s: expected exactly one tensor, got %d", TN(st), ntensors);
  const fh_tensor *t = tensors[0];
  bool slots = st->type == FH_PLAINTEXT && st->representation == FH_REPR_SLOTS;
  if (ctx == NULL && !slots)
    return fh_error_set(FH_ERR_VALUE, "%s: a CKKS context is required (context= or a known context_id)", TN(st));
  if (st->type != FH_ROTATION_KEY && st->step != 0)
    return fh_error_set(FH_ERR_STATE, "%s: only a RotationKey has a step", TN(st));
  if (st->type != FH_CIPHERTEXT && st->type != FH_PUBLIC_KEY && st->type != FH_KEY_SWITCH_KEY &&
      st->type != FH_RELINEARIZATION_KEY && st->type != FH_ROTATION_KEY && st->type != FH_CONJUGATION_KEY &&
      st->num_components != 0)
    return fh_error_set(FH_ERR_STATE, "%s has no num_components", TN(st));
  if (st->type != FH_PLAINTEXT && st->representation != FH_REPR_NONE)
    return fh_error_set(FH_ERR_STATE, "%s: only a Plaintext has a representation", TN(st));
  fh_status s;
  char sh[160];
  switch (st->type) {
    case FH_PLAINTEXT:
      if (st->representation <= FH_REPR_NONE || st->representation >= FH_REPR_COUNT)
        return fh_error_set(FH_ERR_VALUE,
                            "Plaintext: representation must be \"slots\", \"rns\", \"integer_coefficients\" or "
                            "\"approximate_coefficients\"");
      if ((s = check_level_scale(ctx, st))) return s;
      if (st->representation == FH_REPR_INTEGER_COEFFICIENTS || st->representation == FH_REPR_APPROXIMATE_COEFFICIENTS) {
        bool integer = st->representation == FH_REPR_INTEGER_COEFFICIENTS;
        if ((s = check_no_rns_state(st))) return s;
        if (t->dtype != (integer ? FH_INT64 : FH_FLOAT64))
          return fh_error_set(FH_ERR_VALUE, "Plaintext (%s): data must be %s tensor, got %s", repr_names[st->representation],
                              integer ? "an int64" : "a float64", fh_dtype_name((fh_dtype)t->dtype));
        if (t->ndim < 1)
          return fh_error_set(FH_ERR_VALUE, "Plaintext (%s): data must have layout [*batch, N], got a 0-dim tensor",
                              repr_names[st->representation]);
        for (int i = 0; i < t->ndim; ++i)
          if (t->shape[i] < 1)
            return fh_error_set(FH_ERR_VALUE, "Plaintext (%s): data extents must be >= 1 ([*batch, N]), got shape %s",
                                repr_names[st->representation], format_shape(t, sh, sizeof sh));
        if (t->shape[t->ndim - 1] != ctx->ring_degree)
          return fh_error_set(FH_ERR_STATE,
                              "Plaintext (%s): data has %lld coefficients but the context's ring_degree is %lld",
                              repr_names[st->representation], (long long)t->shape[t->ndim - 1],
                              (long long)ctx->ring_degree);
        return FH_OK;
      }
      if (slots) {
        if ((s = check_no_rns_state(st))) return s;
        if (t->dtype != FH_FLOAT64 && t->dtype != FH_COMPLEX128)
          return fh_error_set(FH_ERR_VALUE, "Plaintext: message must be a float64 or complex128 tensor, got %s",
                              fh_dtype_name((fh_dtype)t->dtype));
        for (int i = 0; i < t->ndim; ++i)
          if (t->shape[i] < 1)
            return fh_error_set(FH_ERR_VALUE,
                                "Plaintext: message extents must be >= 1 ([*batch, slot] or a 0-dim scalar), got "
                                "shape %s",
                                format_shape(t, sh, sizeof sh));
        if (ctx && t->ndim > 0 && t->shape[t->ndim - 1] > ctx->num_slots)
          return fh_error_set(FH_ERR_STATE, "Plaintext: message has %lld slots but the context has %lld",
                              (long long)t->shape[t->ndim - 1], (long long)ctx->num_slots);
        return FH_OK;
      }
      if ((s = check_rns_state(ctx, st, false))) return s;
      return check_rns_tensor(ctx, st, t, 0, 0, FH_MAX_DIMS, "[*batch, limb, N]");
    case FH_CIPHERTEXT:
      if ((s = check_level_scale(ctx, st))) return s;
      if ((s = check_rns_state(ctx, st, true))) return s;
      if (t->ndim < 3)
        return fh_error_set(FH_ERR_VALUE, "Ciphertext: data must have layout [component, *batch, limb, N], got shape %s",
                            format_shape(t, sh, sizeof sh));
      if (t->shape[0] != 2 && t->shape[0] != 3)
        return fh_error_set(FH_ERR_STATE, "Ciphertext: num_components must be 2 or 3, data has %lld components",
                            (long long)t->shape[0]);
      if (st->num_components != t->shape[0])
        return fh_error_set(FH_ERR_STATE, "Ciphertext: num_components %d does not match the data's %lld components",
                            st->num_components, (long long)t->shape[0]);
      return check_rns_tensor(ctx, st, t, 1, 0, FH_MAX_DIMS, "[component, *batch, limb, N]");
    default: /* keys */
      if (st->scale != 0) return fh_error_set(FH_ERR_STATE, "%s: keys have no scale", TN(st));
      if (st->level < 0 || st->level > ctx->max_level)
        return fh_error_set(FH_ERR_STATE, "%s: prime rows start at level %d, outside [0, %d]", TN(st), st->level,
                            ctx->max_level);
      if ((s = check_rns_state(ctx, st, true))) return s;
      if (st->type == FH_SECRET_KEY) return check_rns_tensor(ctx, st, t, 0, 0, 0, "[limb, N]");
      if (st->num_components != 2)
        return fh_error_set(FH_ERR_STATE, "%s: num_components must be 2, got %d", TN(st), st->num_components);
      if (st->type == FH_PUBLIC_KEY) {
        if (t->ndim != 3 || t->shape[0] != 2)
          return fh_error_set(FH_ERR_VALUE, "PublicKey: data must have layout [2, limb, N], got shape %s",
                              format_shape(t, sh, sizeof sh));
        return check_rns_tensor(ctx, st, t, 1, 0, 0, "[2, limb, N]");
      }
      if (t->ndim != 4 || t->shape[0] < 1 || t->shape[1] != 2)
        return fh_error_set(FH_ERR_VALUE, "%s: data must have layout [digit, 2, limb, N] (digit >= 1), got shape %s",
                            TN(st), format_shape(t, sh, sizeof sh));
      if ((s = check_rns_tensor(ctx, st, t, 2, 0, 0, "[digit, 2, limb, N]"))) return s;
      if (st->type == FH_ROTATION_KEY) {
        int64_t S = ctx->num_slots;
        int64_t r = st->step % S;
        if (r < 0) r += S;
        if (r > S / 2) r -= S;
        if (r == 0)
          return fh_error_set(FH_ERR_VALUE, "RotationKey: step %" PRId64 " is 0 modulo num_slots %" PRId64
                                            " (not a rotation)", st->step, S);
        st->step = r; /* canonical */
      }
      return FH_OK;
  }
}

/* ---- construction ------------------------------------------------------------ */
void fh_value_release(fh_value *v) {
  if (v == NULL || !fh_rc_release(&v->rc)) return;
  for (int i = 0; i < v->ntensors; ++i) fh_tensor_release(v->tensors[i]);
  fh_ckks_context_release(v->ctx);
  fh_free(v);
}

fh_status fh_value_new(fh_ckks_context *ctx, const fh_value_state *state, fh_tensor *const *tensors, int ntensors,
                       fh_value **out) {
  if (state == NULL) return fh_error_set(FH_ERR_VALUE, "fh_value_new: no state");
  fh_value_state st = *state;
  fh_status s = validate(ctx, &st, tensors, ntensors);
  if (s != FH_OK) return s;
  fh_device d0 = fh_tensor_device(tensors[0]);
  for (int i = 1; i < ntensors; ++i)
    if (!fh_device_eq(d0, fh_tensor_device(tensors[i])))
      return fh_error_set(FH_ERR_VALUE, "%s: every tensor of a value must be on one device", TN(&st));
  fh_value *v = fh_calloc(1, sizeof *v);
  if (v == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory creating a %s", TN(&st));
  fh_rc_init(&v->rc);
  v->state = st;
  v->ctx = ctx;
  if (ctx) fh_ckks_context_retain(ctx);
  v->ntensors = ntensors;
  for (int i = 0; i < ntensors; ++i) {
    fh_tensor_retain(tensors[i]);
    v->tensors[i] = tensors[i];
  }
  *out = v;
  return FH_OK;
}

static fh_residue_representation coupled(fh_polynomial_domain d) {
  return d == FH_DOMAIN_NTT ? FH_RESIDUE_MONTGOMERY : d == FH_DOMAIN_COEFFICIENT ? FH_RESIDUE_STANDARD : FH_RESIDUE_NONE;
}

fh_status fh_ciphertext_new(fh_ckks_context *ctx, fh_tensor *data, int32_t level, double scale, fh_modulus_basis basis,
                            fh_polynomial_domain domain, fh_value **out) {
  if (ctx == NULL) return fh_error_set(FH_ERR_VALUE, "Ciphertext: a CKKS context is required");
  fh_value_state st = fh_value_state_init(FH_CIPHERTEXT);
  st.level = level;
  st.scale = scale;
  st.modulus_basis = basis;
  st.polynomial_domain = domain;
  st.residue_representation = coupled(domain);
  st.num_components = data && data->ndim > 0 ? (int32_t)data->shape[0] : 0;
  fh_status s = fh_value_state_canonical_prime_ids(ctx, &st);
  if (s != FH_OK) {
    fh_error_prefix("Ciphertext");
    return s;
  }
  return fh_value_new(ctx, &st, &data, 1, out);
}

fh_status fh_plaintext_rns_new(fh_ckks_context *ctx, fh_tensor *data, int32_t level, double scale,
                               fh_modulus_basis basis, fh_polynomial_domain domain,
                               fh_residue_representation residue, fh_value **out) {
  if (ctx == NULL) return fh_error_set(FH_ERR_VALUE, "Plaintext: a CKKS context is required");
  fh_value_state st = fh_value_state_init(FH_PLAINTEXT);
  st.representation = FH_REPR_RNS;
  st.level = level;
  st.scale = scale;
  st.modulus_basis = basis;
  st.polynomial_domain = domain;
  st.residue_representation = residue;
  fh_status s = fh_value_state_canonical_prime_ids(ctx, &st);
  if (s != FH_OK) {
    fh_error_prefix("Plaintext");
    return s;
  }
  return fh_value_new(ctx, &st, &data, 1, out);
}

fh_status fh_plaintext_slots_new(fh_ckks_context *ctx, fh_tensor *message, int32_t level, double scale,
                                 fh_value **out) {
  fh_value_state st = fh_value_state_init(FH_PLAINTEXT);
  st.representation = FH_REPR_SLOTS;
  st.level = level;
  st.scale = scale;
  return fh_value_new(ctx, &st, &message, 1, out);
}

fh_status fh_key_new(fh_ckks_context *ctx, fh_value_type type, fh_tensor *data, int32_t level, fh_modulus_basis basis,
                     fh_polynomial_domain domain, int64_t step, fh_value **out) {
  if (!is_key(type)) return fh_error_set(FH_ERR_VALUE, "fh_key_new: %s is not a key type", fh_value_type_name(type));
  if (ctx == NULL) return fh_error_set(FH_ERR_VALUE, "%s: a CKKS context is required", type_names[type]);
  fh_value_state st = fh_value_state_init(type);
  st.level = level;
  st.modulus_basis = basis;
  st.polynomial_domain = domain;
  st.residue_representation = coupled(domain);
  st.num_components = type == FH_SECRET_KEY ? 0 : 2;
  st.step = type == FH_ROTATION_KEY ? step : 0;
  fh_status s = fh_value_state_canonical_prime_ids(ctx, &st);
  if (s != FH_OK) {
    fh_error_prefix("%s", type_names[type]);
    return s;
  }
  return fh_value_new(ctx, &st, &data, 1, out);
}

static fh_status map_tensors(const fh_value *v, fh_device dev, bool pin, bool clone, fh_value **out) {
  fh_tensor *ts[FH_VALUE_MAX_TENSORS] = {0};
  fh_status s = FH_OK;
  for (int i = 0; i < v->ntensors && s == FH_OK; ++i)
    s = clone ? fh_tensor_clone(v->tensors[i], &ts[i]) : fh_tensor_to(v->tensors[i], dev, pin, NULL, false, &ts[i]);
  if (s == FH_OK) s = fh_value_new(v->ctx, &v->state, ts, v->ntensors, out);
  for (int i = 0; i < v->ntensors; ++i)
    if (ts[i]) fh_tensor_release(ts[i]);
  return s;
}

fh_status fh_value_to(const fh_value *v, fh_device dev, bool pin, fh_value **out) {
  return map_tensors(v, dev, pin, false, out);
}
fh_status fh_value_clone(const fh_value *v, fh_value **out) { return map_tensors(v, fh_value_device(v), false, true, out); }

/* ---- queries ---------------------------------------------------------------- */
const char *fh_value_tensor_name(const fh_value *v, int i) {
  if (i < 0 || i >= v->ntensors) return NULL;
  return (v->state.type == FH_PLAINTEXT && v->state.representation == FH_REPR_SLOTS) ? "message" : "data";
}

const char *fh_value_context_id(const fh_value *v) { return v->ctx ? v->ctx->id : ""; }
bool fh_value_is_secret(const fh_value *v) { return v->state.type == FH_SECRET_KEY; }

int fh_value_batch_shape(const fh_value *v, int64_t *shape) {
  const fh_tensor *t = v->tensors[0];
  int lo = 0, hi = 0;
  switch (v->state.type) {
    case FH_PLAINTEXT:
      lo = 0;
      hi = v->state.representation == FH_REPR_RNS ? t->ndim - 2 : t->ndim - 1;
      break;
    case FH_CIPHERTEXT: lo = 1; hi = t->ndim - 2; break;
    default: break;
  }
  int n = 0;
  for (int i = lo; i < hi; ++i) shape[n++] = t->shape[i];
  return n;
}

fh_status fh_value_equal(const fh_value *a, const fh_value *b, bool *result) {
  *result = false;
  if (a->ctx != b->ctx || !fh_value_state_equal(&a->state, &b->state) || a->ntensors != b->ntensors) return FH_OK;
  for (int i = 0; i < a->ntensors; ++i) {
    bool eq = false;
    fh_status s = fh_equal(a->tensors[i], b->tensors[i], &eq);
    if (s != FH_OK) return s;
    if (!eq) return FH_OK;
  }
  *result = true;
  return FH_OK;
}

/* ---- metadata ----------------------------------------------------------------- */
static fh_meta_entry m_int(const char *k, int64_t v) {
  fh_meta_entry e = {k, FH_META_INT, v, 0, NULL, NULL, 0};
  return e;
}
static fh_meta_entry m_real(const char *k, double v) {
  fh_meta_entry e = {k, FH_META_REAL, 0, v, NULL, NULL, 0};
  return e;
}
static fh_meta_entry m_str(const char *k, const char *v) {
  fh_meta_entry e = {k, FH_META_STRING, 0, 0, v, NULL, 0};
  return e;
}

/* entries are pushed in sorted key order */
int fh_value_state_metadata(const fh_value_state *st, fh_meta_entry *out) {
  int n = 0;
  bool pt = st->type == FH_PLAINTEXT, ct = st->type == FH_CIPHERTEXT;
  bool rns = fh_state_has_rows(st->type, st->representation);
  fh_meta_entry ids = {"prime_ids", FH_META_INT_LIST, 0, 0, NULL, st->prime_ids, st->num_prime_ids};
  if (pt || ct) out[n++] = m_int("level", st->level);
  if (rns) out[n++] = m_str("modulus_basis", fh_basis_name((fh_modulus_basis)st->modulus_basis));
  if (ct) out[n++] = m_int("num_components", st->num_components);
  if (rns) out[n++] = m_str("polynomial_domain", fh_domain_name((fh_polynomial_domain)st->polynomial_domain));
  if (rns) out[n++] = ids;
  if (pt) out[n++] = m_str("representation", fh_representation_name((fh_representation)st->representation));
  if (rns)
    out[n++] =
        m_str("residue_representation", fh_residue_name((fh_residue_representation)st->residue_representation));
  if (pt || ct) out[n++] = m_real("scale", st->scale);
  if (st->type == FH_ROTATION_KEY) out[n++] = m_int("step", st->step);
  return n;
}

const char *fh_meta_format(const fh_meta_entry *e, char *buf, size_t size) {
  switch (e->kind) {
    case FH_META_INT: snprintf(buf, size, "%" PRId64, e->i); break;
    case FH_META_REAL: snprintf(buf, size, "%.17g", e->r); break;
    case FH_META_STRING: snprintf(buf, size, "%s", e->s ? e->s : "nil"); break;
    default: format_ids(e->list, e->nlist, buf, size); break;
  }
  return buf;
}

static const char *const all_fields[] = {"level", "modulus_basis", "num_components", "polynomial_domain", "prime_ids",
                                         "representation", "residue_representation", "scale", "step"};
#define NFIELDS 9

static const fh_meta_entry *find_entry(const fh_meta_entry *e, int n, const char *key) {
  for (int i = 0; i < n; ++i)
    if (strcmp(e[i].key, key) == 0) return &e[i];
  return NULL;
}

static fh_status entry_int(const fh_meta_entry *e, const char *tn, int64_t lo, int64_t hi, int64_t *out) {
  if (e->kind != FH_META_INT) return fh_error_set(FH_ERR_VALUE, "%s: metadata field '%s' must be an integer", tn, e->key);
  if (e->i < lo || e->i > hi)
    return fh_error_set(FH_ERR_VALUE, "%s: metadata field '%s' = %" PRId64 " is out of range", tn, e->key, e->i);
  *out = e->i;
  return FH_OK;
}

static fh_status entry_str(const fh_meta_entry *e, const char *tn, const char **out) {
  if (e->kind != FH_META_STRING || e->s == NULL)
    return fh_error_set(FH_ERR_VALUE, "%s: metadata field '%s' must be a string", tn, e->key);
  *out = e->s;
  return FH_OK;
}

fh_status fh_value_from_metadata(fh_ckks_context *ctx, fh_value_type type, const fh_meta_entry *entries, int n,
                                 bool defaults, fh_tensor *const *tensors, const char *const *tensor_names,
                                 int ntensors, fh_value **out) {
  if ((unsigned)type >= FH_VALUE_TYPE_COUNT) return fh_error_set(FH_ERR_VALUE, "unknown value type %d", (int)type);
  const char *tn = type_names[type];
  if (n < 0 || (n > 0 && entries == NULL)) return fh_error_set(FH_ERR_VALUE, "%s: bad metadata", tn);
  /* field names: known, not repeated */
  for (int i = 0; i < n; ++i) {
    if (entries[i].key == NULL) return fh_error_set(FH_ERR_VALUE, "%s: metadata field without a name", tn);
    bool known = false;
    for (int k = 0; k < NFIELDS; ++k) known |= strcmp(entries[i].key, all_fields[k]) == 0;
    for (int j = 0; j < i; ++j)
      if (strcmp(entries[i].key, entries[j].key) == 0)
        return fh_error_set(FH_ERR_VALUE, "%s: metadata field '%.64s' appears twice", tn, entries[i].key);
    if (!known) return fh_error_set(FH_ERR_VALUE, "%s: unknown metadata field '%.64s'", tn, entries[i].key);
  }
  fh_value_state st = fh_value_state_init(type);
  fh_status s;
  /* representation (plaintexts) decides the rest */
  const fh_meta_entry *e = find_entry(entries, n, "representation");
  if (type == FH_PLAINTEXT) {
    if (e) {
      const char *r = NULL;
      fh_representation rep = FH_REPR_NONE;
      if ((s = entry_str(e, tn, &r)) || (s = fh_representation_parse(r, &rep))) return s;
      st.representation = rep;
    } else if (defaults && ntensors == 1 && tensor_names && tensor_names[0]) {
      st.representation = strcmp(tensor_names[0], "message") == 0 ? FH_REPR_SLOTS : FH_REPR_RNS;
    } else {
      return fh_error_set(FH_ERR_VALUE, "Plaintext: metadata field 'representation' is missing");
    }
  }
  /* the type's field set */
  fh_meta_entry want[FH_META_MAX];
  int nwant = fh_value_state_metadata(&st, want);
  for (int i = 0; i < n; ++i)
    if (!find_entry(want, nwant, entries[i].key))
    {
      char rep[48] = "";
      if (type == FH_PLAINTEXT) snprintf(rep, sizeof rep, " (%s)", repr_names[st.representation]);
      return fh_error_set(FH_ERR_VALUE, "%s%s has no metadata field '%s'", tn, rep, entries[i].key);
    }
  if (!defaults)
    for (int i = 0; i < nwant; ++i)
      if (!find_entry(entries, n, want[i].key))
        return fh_error_set(FH_ERR_VALUE, "%s: metadata field '%s' is missing", tn, want[i].key);
  /* tensor names */
  const char *tname = (type == FH_PLAINTEXT && st.representation == FH_REPR_SLOTS) ? "message" : "data";
  if (ntensors != 1) return fh_error_set(FH_ERR_VALUE, "%s: expected one tensor '%s', got %d", tn, tname, ntensors);
  if (tensor_names && (tensor_names[0] == NULL || strcmp(tensor_names[0], tname) != 0))
    return fh_error_set(FH_ERR_VALUE, "%s: expected a tensor named '%s', got '%.64s'", tn, tname,
                        tensor_names[0] ? tensor_names[0] : "(null)");
  const fh_tensor *t = tensors ? tensors[0] : NULL;
  if (t == NULL) return fh_error_set(FH_ERR_VALUE, "%s: tensor '%s' is missing", tn, tname);
  bool rns = fh_state_has_rows(type, st.representation);
  if (!(type == FH_PLAINTEXT && st.representation == FH_REPR_SLOTS) && ctx == NULL) return fh_error_set(FH_ERR_VALUE, "%s: a CKKS context is required (context= or a known context_id)", tn);
  int64_t iv = 0;
  const char *sv = NULL;
  /* level */
  if ((e = find_entry(entries, n, "level"))) {
    if ((s = entry_int(e, tn, INT32_MIN, INT32_MAX, &iv))) return s;
    st.level = (int32_t)iv;
    if (st.level < 0) return fh_error_set(FH_ERR_VALUE, "%s: level must be >= 0, got %d", tn, st.level);
  } else if (type == FH_PLAINTEXT || type == FH_CIPHERTEXT) {
    st.level = 0;
  }
  /* scale */
  if ((e = find_entry(entries, n, "scale"))) {
    if (e->kind == FH_META_REAL) st.scale = e->r;
    else if (e->kind == FH_META_INT) st.scale = (double)e->i;
    else return fh_error_set(FH_ERR_VALUE, "%s: metadata field 'scale' must be a number", tn);
  } else if (type == FH_PLAINTEXT || type == FH_CIPHERTEXT) {
    if (ctx == NULL) return fh_error_set(FH_ERR_VALUE, "%s: scale is required without a context", tn);
    st.scale = ctx->default_scale;
  }
  if (rns) {
    st.modulus_basis = is_key(type) ? FH_BASIS_QP : FH_BASIS_Q;
    if ((e = find_entry(entries, n, "modulus_basis"))) {
      fh_modulus_basis b = FH_BASIS_NONE;
      if ((s = entry_str(e, tn, &sv)) || (s = fh_basis_parse(sv, &b))) return s;
      st.modulus_basis = b;
    }
    st.polynomial_domain = FH_DOMAIN_COEFFICIENT;
    if ((e = find_entry(entries, n, "polynomial_domain"))) {
      fh_polynomial_domain d = FH_DOMAIN_NONE;
      if ((s = entry_str(e, tn, &sv)) || (s = fh_domain_parse(sv, &d))) return s;
      st.polynomial_domain = d;
    }
    st.residue_representation = coupled((fh_polynomial_domain)st.polynomial_domain);
    if ((e = find_entry(entries, n, "residue_representation"))) {
      fh_residue_representation r = FH_RESIDUE_NONE;
      if ((s = entry_str(e, tn, &sv)) || (s = fh_residue_parse(sv, &r))) return s;
      st.residue_representation = r;
    }
    if ((e = find_entry(entries, n, "prime_ids"))) {
      if (e->kind != FH_META_INT_LIST || (e->nlist > 0 && e->list == NULL))
        return fh_error_set(FH_ERR_VALUE, "%s: metadata field 'prime_ids' must be a list of integers", tn);
      if (e->nlist > FH_CKKS_MAX_PRIMES)
        return fh_error_set(FH_ERR_STATE, "%s: prime_ids lists %d ids, more than the %d primes a context can have", tn,
                            e->nlist, FH_CKKS_MAX_PRIMES);
      st.num_prime_ids = e->nlist;
      memcpy(st.prime_ids, e->list, sizeof(int32_t) * (size_t)e->nlist);
      if (is_key(type)) st.level = e->nlist > 0 ? e->list[0] : -1;
    } else {
      if (is_key(type)) st.level = 0;
      if ((s = fh_value_state_canonical_prime_ids(ctx, &st))) {
        fh_error_prefix("%s", tn);
        return s;
      }
    }
  }
  if (type == FH_CIPHERTEXT) {
    if ((e = find_entry(entries, n, "num_components"))) {
      if ((s = entry_int(e, tn, 0, 1000, &iv))) return s;
      st.num_components = (int32_t)iv;
    } else {
      st.num_components = t->ndim > 0 ? (int32_t)t->shape[0] : 0;
    }
  } else if (is_key(type) && type != FH_SECRET_KEY) {
    st.num_components = 2;
  }
  if (type == FH_ROTATION_KEY) {
    if ((e = find_entry(entries, n, "step"))) {
      if ((s = entry_int(e, tn, INT64_MIN / 2, INT64_MAX / 2, &iv))) return s;
      st.step = iv;
    } else {
      return fh_error_set(FH_ERR_VALUE, "RotationKey: step is required");
    }
  }
  return fh_value_new(ctx, &st, tensors, ntensors, out);
}
