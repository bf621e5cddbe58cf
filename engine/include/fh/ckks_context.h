/* fhelium CKKS context: the exact parameter set every CKKS value belongs to.
 *
 * A context fixes the ring degree N (a power of two), the default scale,
 * the ordered Q primes and P primes, the slot-order generator, the maximum
 * level and the key-switching digits (the last three default as below).
 * Nothing else (device, dtype, NTT implementation, error distribution) is
 * part of it. Its `id` is the
 * lower-case hex SHA-256 (libsodium crypto_hash_sha256) of a canonical byte
 * encoding of exactly those parameters:
 *
 *     "fhelium.ckks_context.v1\n"
 *     u32 log2(N) | f64 default_scale (IEEE-754 bits) | u32 #Q | u64 q_0 .. |
 *     u32 #P | u64 p_0 ..                       (all little-endian)
 *
 * so equal parameters give equal ids and any difference (a prime, the
 * order of the primes, N, the scale) changes the id. A context that departs
 * from the defaults below (slot-order generator 5, max_level #Q - 2, digits
 * of #P primes) hashes "fhelium.ckks_context.v2\n", the same fields, then
 * u32 galois_generator | u32 max_level | u32 key_digits (fh_key_digits);
 * the ids of default contexts are unchanged.
 *
 * Prime order and levels (FHElium's layout). The Q primes are
 * [scale primes ..., structural base prime]; a "prime id" is an index into
 * the combined list primes[] = [Q primes ..., P primes ...]. `max_level` is
 * #Q - 2 by default (the last Q prime stays as a base); with
 * all_q_levels (FHElium 0.30's chains, whose "depth" runs to #Q - 1) it is
 * #Q - 1. At level l (0 <= l <= max_level) the active Q rows are the suffix
 * q_l .. q_{#Q-1}; rescaling drops the leading active row and increments the
 * level. The prime ids of a value at level l are
 *     basis Q : l, l+1, ..., #Q-1
 *     basis QP: l, l+1, ..., #Q-1, #Q, ..., #Q+#P-1
 * (fh_ckks_context_prime_ids computes them).
 *
 * Every prime q satisfies 2 <= q < 2^62, q = 1 (mod 2N) (NTT-friendly) and is
 * prime (deterministic Miller-Rabin, exact for 64-bit integers); the primes
 * are pairwise distinct; there are at least 2 Q primes and 1 P prime, and
 * at most FH_CKKS_MAX_PRIMES in all.
 *
 * Slot order. `galois_generator` g (5, or 3 for FHElium 0.30's presets)
 * fixes what slot j of a message is: z_j = m(zeta^(e_j)), zeta = exp(i pi /
 * N), with e_j = 5^j mod 2N for g = 5 and e_j = 3^-j mod 2N for g = 3
 * (FHElium's order); rotating by r (torch.roll of the slots by r) is the
 * automorphism X -> X^(5^-r), resp. X^(3^r), so a rotation key for step r
 * means the same in both libraries. Conjugation is X -> X^-1 for both.
 *
 * Key-switching digits. The Q primes split into consecutive digits:
 * key_digits FH_DIGITS_P_COUNT (the default) takes #P primes per digit;
 * FH_DIGITS_BELOW_P (FHElium 0.30) takes, greedily from q_0, as many primes
 * as keep the digit's product below P (at least one). num_digits and
 * digit_start[0..num_digits] (digit j holds q_digit_start[j] ..
 * q_digit_start[j+1]-1) record the split.
 *
 * Security. With enforce_security_budget (the default, always on for
 * presets) the bit length of Q*P must not exceed the 128-bit classical
 * budget for a uniform ternary secret and error sigma 3.19 (see
 * fh_ckks_security_budget_bits for the table and its source); N without a
 * table row is then refused.
 *
 * Interning and lifetime. Contexts are immutable, reference counted and
 * shared: creating a context whose id equals that of a live context returns
 * the live one (so two contexts with the same parameters are the same
 * object, and pointer equality is id equality). A process-wide registry
 * holds weak entries, so fh_ckks_context_lookup finds any live context by
 * id (used to rebuild values from envelopes and files).
 *
 * Extensions. The CKKS evaluator attaches per-context data (NTT tables,
 * device copies) through fh_ckks_context_ext: built once on first use,
 * freed by its destructor when the context is destroyed.
 *
 * Ownership: _new, _from_preset and _lookup return a new reference
 * (fh_ckks_context_release). Fields are read-only after creation. */
#ifndef FH_CKKS_CONTEXT_H
#define FH_CKKS_CONTEXT_H

#include "fh/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FH_CKKS_MAX_PRIMES 128
#define FH_CKKS_MAX_LOG_N 17                        /* N <= 131072 */
#define FH_CKKS_PRIME_BOUND ((uint64_t)1 << 62)     /* every prime < 2^62 */
#define FH_CKKS_CONTEXT_ID_LEN 64                   /* hex characters */
#define FH_CKKS_EXT_SLOTS 8

/* Modulus basis of an RNS value: the active Q rows, or those plus every P row. */
typedef enum fh_modulus_basis { FH_BASIS_NONE = 0, FH_BASIS_Q, FH_BASIS_QP } fh_modulus_basis;

/* How the Q primes split into key-switching digits (see above). 0 in a spec
 * means the default, FH_DIGITS_P_COUNT. */
typedef enum fh_key_digits { FH_DIGITS_DEFAULT = 0, FH_DIGITS_P_COUNT, FH_DIGITS_BELOW_P } fh_key_digits;
/* "p_count", "below_p"; NULL for others. */
const char *fh_key_digits_name(fh_key_digits d);
/* ValueError listing the names. */
fh_status fh_key_digits_parse(const char *s, fh_key_digits *out);

/* Well-known extension slots (fh_ckks_context_ext). */
enum {
  FH_CKKS_EXT_HOST_TABLES = 0,   /* CPU NTT / conversion tables */
  FH_CKKS_EXT_DEVICE_TABLES = 1, /* CUDA copies of the tables */
  FH_CKKS_EXT_USER = 2           /* first free slot */
};

typedef struct fh_ckks_context fh_ckks_context;
typedef fh_status (*fh_ckks_ext_build_fn)(const fh_ckks_context *ctx, void *arg, void **out);
typedef void (*fh_ckks_ext_free_fn)(void *ext);

struct fh_ckks_context {
  fh_refcount rc;
  int32_t log_n;
  int64_t ring_degree; /* N */
  int64_t num_slots;   /* N / 2 */
  double default_scale;
  int32_t num_q, num_p, num_primes;
  int32_t max_level;                     /* num_q - 2, or num_q - 1 with all_q_levels */
  int32_t galois_generator;              /* 5 or 3: the slot order (see above) */
  int32_t key_digits;                    /* fh_key_digits (never DEFAULT) */
  int32_t num_digits;                    /* key-switching digits */
  int32_t digit_start[FH_CKKS_MAX_PRIMES + 1]; /* digit j: Q rows [digit_start[j], digit_start[j+1]) */
  uint64_t primes[FH_CKKS_MAX_PRIMES];   /* Q primes, then P primes; indexed by prime id */
  int32_t modulus_bits;                  /* bit length of Q*P (exact) */
  int32_t security_budget_bits;          /* 128-bit budget for N, 0 when N has no table row */
  char id[FH_CKKS_CONTEXT_ID_LEN + 1];   /* hex SHA-256 */
  char preset[48];                       /* preset name ("slots8192-scale40-levels7-int64") or "" */
  /* extension slots: owned by the context, see fh_ckks_context_ext */
  void *ext[FH_CKKS_EXT_SLOTS];
  fh_ckks_ext_free_fn ext_free[FH_CKKS_EXT_SLOTS];
};

/* Explicit parameters. The prime arrays are copied. */
typedef struct fh_ckks_context_spec {
  int64_t ring_degree;
  double default_scale;
  int32_t num_q, num_p;
  const uint64_t *q_primes;
  const uint64_t *p_primes;
  bool enforce_security_budget;
  /* zero means the default: */
  int32_t galois_generator; /* 5 (default) or 3 */
  bool all_q_levels;        /* max_level = #Q - 1 instead of #Q - 2 */
  int32_t key_digits;       /* fh_key_digits */
} fh_ckks_context_spec;

/* Validate a spec and return the (possibly shared) context. ValueError names
 * the offending field (ring_degree, default_scale, q_primes[i], p_primes[i],
 * galois_generator, key_digits);
 * a budget violation is a ValueError with both bit counts. */
fh_status fh_ckks_context_new(const fh_ckks_context_spec *spec, fh_ckks_context **out);
static inline void fh_ckks_context_retain(fh_ckks_context *c) { fh_rc_retain(&c->rc); }
void fh_ckks_context_release(fh_ckks_context *c);
/* The live context with this id, or ValueError ("unknown context_id"). */
fh_status fh_ckks_context_lookup(const char *id, fh_ckks_context **out);

/* The canonical prime ids at `level` for `basis` into ids (capacity
 * FH_CKKS_MAX_PRIMES); *n receives the count. StateError when the level is
 * outside [0, max_level]; ValueError for FH_BASIS_NONE. */
fh_status fh_ckks_context_prime_ids(const fh_ckks_context *c, int32_t level, fh_modulus_basis basis, int32_t *ids,
                                    int32_t *n);

/* Per-context extension data in `slot`: the existing pointer, or the one
 * `build(ctx, arg, &p)` creates (called at most once per slot, under a
 * process-wide recursive lock, so a builder may use other slots);
 * `free_fn` (may be NULL) releases it when the context is destroyed.
 * Borrowed: valid while the caller holds a reference to the context. */
fh_status fh_ckks_context_ext(fh_ckks_context *c, int slot, fh_ckks_ext_build_fn build, fh_ckks_ext_free_fn free_fn,
                              void *arg, void **out);

/* ---- presets ------------------------------------------------------------ */
/* Two families, each under its FHElium name (member name: '_' for '-'):
 *
 * FH_PRESET_LEVELS: "slots<S>-scale<b>-levels<L>-int64", S = 8192 ..
 * 65536, b = 30/40/50. N = 2S; #Q = L + 1 (L scale primes + a 60-bit base);
 * max_level = L-1; generator 5. Deterministic prime rule
 * (fh_ckks_preset_primes), for M = 2N:
 *  - 60-bit primes: the candidates 2^60 - k*M + 1, k = 1, 2, ... (descending,
 *    all < 2^60 so 4q < 2^62); the first prime found is the base Q prime,
 *    the next #P primes are the P primes, in that order;
 *  - scale primes: candidates 2^b + 1 + k*M (above 2^b, k = 0, 1, ...) and
 *    2^b + 1 - k*M (below, k = 1, 2, ...); the chain takes the nearest prime
 *    above, then the nearest below, alternating, each search continuing from
 *    where the previous one on that side stopped. Q = [s_0, s_1, ..., base].
 *
 * FH_PRESET_FHELIUM_030: FHElium 0.30.0's presets,
 * "slots<S>-scale<b>-depth<D>-int64|int32", with exactly its prime chains
 * (engine/ckks/ckks_presets_030.h, as FHElium dumped them), default scale
 * 2^b, slot-order generator 3, max_level = D = #Q - 1 (all_q_levels) and
 * FHElium's digits (FH_DIGITS_BELOW_P). word_bits 32 marks the int32
 * presets (FHElium stores their residues as int32, Montgomery radix 2^30).
 *
 * Every preset fits its 128-bit budget (checked when built). */
typedef enum fh_preset_family { FH_PRESET_LEVELS = 0, FH_PRESET_FHELIUM_030 } fh_preset_family;
typedef struct fh_ckks_preset {
  const char *name;   /* "slots8192-scale40-levels7-int64" */
  const char *member; /* "slots8192_scale40_levels7_int64" */
  int32_t log_n, scale_bits, num_scale_primes, num_p_primes;
  int32_t family;     /* fh_preset_family */
  int32_t num_q;      /* Q primes */
  int32_t max_level;
  int32_t galois_generator;
  int32_t word_bits;  /* 64, or 32 (FHElium's int32 presets) */
  const uint64_t *primes; /* FHELIUM_030: the Q then the P primes; NULL for LEVELS (computed) */
} fh_ckks_preset;
int fh_ckks_preset_count(void);
const fh_ckks_preset *fh_ckks_preset_at(int i); /* NULL when out of range */
/* By name or member name; NULL when unknown. */
const fh_ckks_preset *fh_ckks_preset_find(const char *name);
/* The preset's context (ValueError naming the known presets when unknown). */
fh_status fh_ckks_context_from_preset(const char *name, fh_ckks_context **out);
/* The preset whose context has c's id, or NULL (builds the preset contexts
 * of c's ring degree on first use). */
const fh_ckks_preset *fh_ckks_preset_of_context(const fh_ckks_context *c);

/* ---- number theory (used by the presets; exposed for the evaluator) ----- */
/* Deterministic Miller-Rabin, exact for every 64-bit n. */
bool fh_is_prime_u64(uint64_t n);
/* The 128-bit classical budget (max bit length of Q*P) for ring degree N,
 * uniform ternary secret, sigma 3.19; 0 when N has no row. */
int32_t fh_ckks_security_budget_bits(int64_t ring_degree);

#ifdef __cplusplus
}
#endif
#endif
