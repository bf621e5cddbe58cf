/* fhelium CKKS engine: key generation, encoding, encryption and the
 * evaluator, on one device, over one context (fh/ckks_context.h) and its
 * values (fh/values.h).
 *
 * Every operation validates its arguments and their exact state first
 * (types, context, device, level, scale, domain, basis, component count,
 * key step), then allocates its results, then submits launches through
 * the launch boundary (fh/ckks_kernels.h) on the current stream of the
 * engine's device. A violated precondition is a StateError naming the
 * field ("level", "scale", "polynomial_domain", "residue_representation",
 * "modulus_basis", "num_components", "context_id", "step",
 * "representation"); a wrong value type is a TypeError; a value on another
 * device a ValueError. Nothing is launched or changed before every check
 * has passed. No operation relinearizes, rescales or changes a value's
 * domain unless that is its purpose; results are new values.
 *
 * Conventions (FHElium's). Level l uses the Q rows q_l..q_{L-1}; a rescale
 * at level l divides by q_l (rounding), records the exact new scale
 * scale / q_l and moves to level l + 1, up to max_level. Fresh encryptions
 * are coefficient-domain values (standard residues); NTT-domain values hold
 * Montgomery residues. Scales match when |a - b| <= FH_CKKS_SCALE_RTOL *
 * max(a, b); results keep the first operand's scale. Slot rotation by r
 * moves slot j - r to slot j (torch.roll): the automorphism X -> X^(5^-r),
 * or X -> X^(3^r) in a context with the generator-3 slot order (FHElium
 * 0.30's, fh/ckks_context.h).
 *
 * Keys. The secret key is a uniform ternary polynomial s stored in the NTT
 * domain over every Q and P prime. The public key is (b, a) = (-a s + e, a)
 * over Q. Key-switching keys (relinearization: s^2 -> s; rotation by r:
 * s(X^(5^-r)) -> s; conjugation: s(X^-1) -> s) use hybrid key switching
 * with the context's digits (by default dnum = ceil(#Q / #P) digits of #P
 * consecutive Q primes; FHElium 0.30's: products below P); digit j holds
 * (-a_j s + e_j + [q in digit j] P s', a_j) over Q*P, data
 * [dnum, 2, #Q + #P, N] in the NTT domain. Switching decomposes the input
 * by digit, extends each digit to the other active primes and P (fast base
 * conversion), multiplies by the key, and divides by P with rounding.
 * The engine remembers the rotation and conjugation keys it creates (by
 * canonical step), so rotate_by_step and conjugate can find them.
 *
 * Randomness comes from the engine's ChaCha20 stream (fh/ckks_random.h):
 * OS-keyed, or derived from `seed` for reproducible tests (INSECURE for real
 * data). Operations that draw randomness (key creation, encryption) refuse
 * to run during a host or CUDA capture: a replay would reuse the same
 * masks.
 *
 * Ownership: fh_ckks_engine_new returns a new reference
 * (fh_ckks_engine_release); every fh_value ** / fh_tensor ** result is a new
 * reference; on failure results are untouched. */
#ifndef FH_CKKS_ENGINE_H
#define FH_CKKS_ENGINE_H

#include "fh/ckks_tables.h"
#include "fh/values.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FH_CKKS_SCALE_RTOL 1e-6

typedef struct fh_ckks_engine fh_ckks_engine;

/* seed NULL: OS-keyed randomness. The context must be usable on `dev`. */
fh_status fh_ckks_engine_new(fh_ckks_context *ctx, fh_device dev, const uint64_t *seed, fh_ckks_engine **out);
void fh_ckks_engine_retain(fh_ckks_engine *e);
void fh_ckks_engine_release(fh_ckks_engine *e);
fh_ckks_context *fh_ckks_engine_context(const fh_ckks_engine *e); /* borrowed */
fh_device fh_ckks_engine_device(const fh_ckks_engine *e);
bool fh_ckks_engine_is_seeded(const fh_ckks_engine *e);
int fh_ckks_engine_dnum(const fh_ckks_engine *e);
/* The context's constant tables on the engine's device (borrowed). */
fh_ckks_tables *fh_ckks_engine_tables(const fh_ckks_engine *e);
/* Tables of a context on a device, built on first use and cached in the
 * context (freed with it). Borrowed: valid while `ctx` lives. */
fh_status fh_ckks_context_tables(fh_ckks_context *ctx, fh_device dev, fh_ckks_tables **out);

/* A context from explicit bit sizes: Q primes in chain order (scale primes,
 * then the base prime, last) and P primes, N = 2^log_n. Scale primes are
 * the NTT-friendly primes nearest to 2^b, alternating above and below
 * (their product tracks the scale over many rescales); the base prime and
 * the P primes are the largest NTT-friendly primes below 2^b. All distinct.
 * Bit sizes in [20, 60]. With `enforce_security` the context must fit the
 * 128-bit budget of the HE standard for N (fh_ckks_security_budget_bits);
 * ValueError otherwise. New reference. */
fh_status fh_ckks_context_from_bits(int log_n, const int *q_bits, int nq, const int *p_bits, int np, double scale,
                                    bool enforce_security, fh_ckks_context **out);

/* ---- keys ------------------------------------------------------------------ */
fh_status fh_ckks_create_secret_key(fh_ckks_engine *e, fh_value **out);
fh_status fh_ckks_create_public_key(fh_ckks_engine *e, const fh_value *sk, fh_value **out);
fh_status fh_ckks_create_relinearization_key(fh_ckks_engine *e, const fh_value *sk, fh_value **out);
/* `step` any integer not 0 modulo num_slots; the key's step is canonical. */
fh_status fh_ckks_create_rotation_key(fh_ckks_engine *e, const fh_value *sk, int64_t step, fh_value **out);
fh_status fh_ckks_create_conjugation_key(fh_ckks_engine *e, const fh_value *sk, fh_value **out);
/* The canonical rotation step of r: r mod num_slots in (-num_slots/2, num_slots/2]. */
int64_t fh_ckks_canonical_step(const fh_ckks_engine *e, int64_t r);

/* ---- encoding ---------------------------------------------------------------- */
/* msg: float64 or complex128, [*batch, slot] (slot <= num_slots, missing
 * slots are zero) or 0-dim (the value in every slot). The result is an RNS
 * plaintext at `level` and `scale` in the coefficient domain. */
fh_status fh_ckks_encode(fh_ckks_engine *e, fh_tensor *msg, int32_t level, double scale, fh_value **out);
/* The same over the basis Q (as fh_ckks_encode) or QP: the rows of every P prime follow the
 * active Q rows (the plaintexts of fh_ckks_linear_transform; every context has P primes). */
fh_status fh_ckks_encode_basis(fh_ckks_engine *e, fh_tensor *msg, int32_t level, double scale, fh_modulus_basis basis,
                               fh_value **out);
/* A slots plaintext -> RNS at its level and scale; an RNS plaintext is
 * returned as is (a new reference). */
fh_status fh_ckks_encode_plaintext(fh_ckks_engine *e, const fh_value *pt, fh_value **out);
/* An RNS plaintext (basis Q, either domain) -> its message [*batch,
 * num_slots], complex128 or (is_real) float64. */
fh_status fh_ckks_decode(fh_ckks_engine *e, const fh_value *pt, bool is_real, fh_tensor **out);

/* ---- encryption ------------------------------------------------------------- */
/* pt: slots (encoded first) or RNS, basis Q, (coefficient, standard) or
 * (ntt, montgomery); the ciphertext has pt's level, scale, domain and batch. */
fh_status fh_ckks_encrypt(fh_ckks_engine *e, const fh_value *pt, const fh_value *pk, fh_value **out);
/* An encryption of zero with like's level, scale, domain and batch shape
 * (like: a ciphertext or an RNS plaintext). */
fh_status fh_ckks_encrypt_zero_like(fh_ckks_engine *e, const fh_value *like, const fh_value *pk, fh_value **out);
/* The RNS plaintext c0 + c1 s (+ c2 s^2), in ct's domain. */
fh_status fh_ckks_decrypt(fh_ckks_engine *e, const fh_value *ct, const fh_value *sk, fh_value **out);

/* ---- evaluator ---------------------------------------------------------------- */
fh_status fh_ckks_add(fh_ckks_engine *e, const fh_value *a, const fh_value *b, fh_value **out);
fh_status fh_ckks_sub(fh_ckks_engine *e, const fh_value *a, const fh_value *b, fh_value **out);
fh_status fh_ckks_negate(fh_ckks_engine *e, const fh_value *a, fh_value **out);
/* ct + pt / ct - pt: pt RNS (or slots, encoded at its own level and scale)
 * in ct's domain at ct's level and scale; pt unbatched or with ct's batch. */
fh_status fh_ckks_add_plaintext(fh_ckks_engine *e, const fh_value *ct, const fh_value *pt, fh_value **out);
fh_status fh_ckks_sub_plaintext(fh_ckks_engine *e, const fh_value *ct, const fh_value *pt, fh_value **out);
/* NTT-domain 2-component ciphertexts at one level -> 3 components, scale a*b. */
fh_status fh_ckks_multiply(fh_ckks_engine *e, const fh_value *a, const fh_value *b, fh_value **out);
/* 3 components -> 2 (either domain, kept). */
fh_status fh_ckks_relinearize(fh_ckks_engine *e, const fh_value *ct, const fh_value *rlk, fh_value **out);
/* relinearize, then rescale_to_next_level, the same words: for NTT-domain ciphertexts and
 * N > 2^11 in one mod-down (the rescale fused into the key switch's), else the two in turn.
 * StateError when ct is at max_level. *out: a new reference. */
fh_status fh_ckks_relinearize_rescale(fh_ckks_engine *e, const fh_value *ct, const fh_value *rlk, fh_value **out);
fh_status fh_ckks_rescale_to_next_level(fh_ckks_engine *e, const fh_value *ct, fh_value **out);
/* multiply, then relinearize (and with `rescale` rescale_to_next_level), the same words: for
 * N > 2^11 fused (the tensor product's words formed where the key switch reads them, never
 * written), else the calls in turn. Errors name "multiply" and the argument (a, b,
 * relinearize). *out: a new reference. */
fh_status fh_ckks_multiply_relinearize(fh_ckks_engine *e, const fh_value *a, const fh_value *b, const fh_value *rlk,
                                       bool rescale, fh_value **out);
/* NTT-domain ciphertext x prepared (NTT, Montgomery) plaintext at the same level. */
fh_status fh_ckks_multiply_plaintext(fh_ckks_engine *e, const fh_value *ct, const fh_value *pt, fh_value **out);
/* slots or RNS plaintext -> RNS, NTT domain, Montgomery residues. */
fh_status fh_ckks_prepare_plaintext_for_multiplication(fh_ckks_engine *e, const fh_value *pt, fh_value **out);
/* Ciphertexts and RNS plaintexts. */
fh_status fh_ckks_to_ntt(fh_ckks_engine *e, const fh_value *v, fh_value **out);
fh_status fh_ckks_to_coefficient(fh_ckks_engine *e, const fh_value *v, fh_value **out);
/* Slot j <- slot (j - r) mod num_slots. rk NULL: the engine's key for the
 * canonical step (StateError "step" when it has none, or when rk's step
 * differs). r = 0 mod num_slots gives a copy. */
fh_status fh_ckks_rotate_by_step(fh_ckks_engine *e, const fh_value *ct, int64_t r, const fh_value *rk,
                                 fh_value **out);
fh_status fh_ckks_rotate_with_key(fh_ckks_engine *e, const fh_value *ct, const fh_value *rk, fh_value **out);
/* Hoisted rotations of one ciphertext by steps[0..nsteps): the mod-up of its key switch runs
 * once, then per step the automorphism of the extended digits, the inner product with that
 * step's key and the mod-down. outs[r] receives a new reference to a ciphertext equal, word
 * for word, to rotate_by_step(ct, steps[r]). keys: NULL, or nsteps entries, each a rotation
 * key for canonical step r or NULL (the engine's remembered key). Every key is checked
 * before anything is launched; on failure outs is untouched. */
fh_status fh_ckks_rotate_many(fh_ckks_engine *e, const fh_value *ct, const int64_t *steps, int nsteps,
                              const fh_value *const *keys, fh_value **outs);
/* The linear transform sum_i pts[i] * rotate_by_step(ct, steps[i]) (i < nsteps) of an NTT-domain
 * ciphertext, by double hoisting: one mod-up of ct's key switch, every rotation and plaintext
 * product over QP, one mod-down (FH_K_CKKS_LT). pts[i]: prepared plaintexts over QP (encoded
 * with basis QP, NTT domain, Montgomery residues) at ct's level, one scale for all, unbatched
 * or with ct's batch; steps may repeat and may be 0. The result has ct's level, scale
 * ct.scale * pts[0].scale and the NTT domain; it decrypts to the sum (its rounding error
 * is that of one key switch, not multiplied by the plaintexts), but its words differ from
 * those of separate rotations, products and additions. keys as for fh_ckks_rotate_many.
 * Everything is checked before anything is launched. New reference in *out. */
fh_status fh_ckks_linear_transform(fh_ckks_engine *e, const fh_value *ct, const int64_t *steps, int nsteps,
                                   const fh_value *const *pts, const fh_value *const *keys, fh_value **out);
/* fh_ckks_linear_transform, then rescale_to_next_level, the same words: for N > 2^11 in one
 * mod-down (the rescale fused into the transform's), else the two in turn. StateError when
 * ct is at max_level (checked first). *out: a new reference. */
fh_status fh_ckks_linear_transform_rescale(fh_ckks_engine *e, const fh_value *ct, const int64_t *steps, int nsteps,
                                           const fh_value *const *pts, const fh_value *const *keys, fh_value **out);
/* Complex conjugation of every slot; ck NULL: the engine's conjugation key. */
fh_status fh_ckks_conjugate(fh_ckks_engine *e, const fh_value *ct, const fh_value *ck, fh_value **out);
/* Stack n ciphertexts with equal state and batch shape along a new leading
 * batch axis. */
fh_status fh_ckks_stack_batch(fh_ckks_engine *e, const fh_value *const *cts, int n, fh_value **out);
/* Sum a ciphertext over all its batch axes (an unbatched ciphertext). */
fh_status fh_ckks_sum_ciphertext_batch(fh_ckks_engine *e, const fh_value *ct, fh_value **out);

#ifdef __cplusplus
}
#endif
#endif
