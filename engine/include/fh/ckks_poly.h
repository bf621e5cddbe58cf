/* Polynomial-level CKKS operators over raw uint64 tensors with explicit
 * prime lists: the layer between the kernels and the evaluator. Each
 * validates on the host (dtype, shape [*, limb, N], device, prime ids),
 * allocates its result, then submits launches through the launch boundary
 * on the current stream of the tables' device.
 *
 * prime ids are 0-based indices into the tables' chain (Q primes, then P
 * primes); row l of the limb dimension is reduced modulo prime ids[l].
 *
 * Ownership: every fh_tensor ** result receives a new reference; on failure
 * it is untouched and nothing was written.
 *
 * The launcher (fh__ckks_launcher) is the evaluator's internal helper: it
 * carries the tables, device and stream of one operation and the storages
 * the operation touches, which every launch lists as its uses (so host
 * tapes retain them and CUDA record-stream protects them). */
#ifndef FH_CKKS_POLY_H
#define FH_CKKS_POLY_H

#include "fh/ckks_kernels.h" /* fh_ckks_ntt_args */
#include "fh/ckks_random.h"
#include "fh/ckks_tables.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Inputs whose coefficient and limb dimensions are contiguous and whose
 * leading dimensions collapse to one stride (views such as a narrowed batch)
 * reach the kernels directly as strided groups; other layouts are copied
 * first. Results are contiguous. */

/* Forward (standard -> Montgomery evaluations) or inverse NTT. */
fh_status fh_ckks_poly_ntt(fh_ckks_tables *tb, fh_tensor *t, const int *ids, int nids, bool forward,
                           fh_tensor **result);
/* Element-wise op (fh_ckks_ew_op) on same-shape operands; b / c may be NULL
 * when the op does not use them; k / cst are per-limb constants (NULL =
 * zeros), reduced modulo their row's prime. FH_CKKS_EW_SIGNED takes an int64
 * `a` of shape [*, N] or [*, limb, N] (broadcast over the limbs when the
 * limb dimension is absent: a [*, N] gives [*, nids, N]). */
fh_status fh_ckks_poly_ew(fh_ckks_tables *tb, int op, fh_tensor *a, fh_tensor *b, fh_tensor *c, const int *ids,
                          int nids, const uint64_t *k, const uint64_t *cst, fh_tensor **result);
/* X -> X^galois (odd galois < 2N) in the coefficient or the NTT domain. */
fh_status fh_ckks_poly_automorph(fh_ckks_tables *tb, fh_tensor *t, const int *ids, int nids, uint64_t galois,
                                 bool ntt_domain, fh_tensor **result);
/* Encode messages msg [*, s] (float64 or complex128, s <= N/2, missing
 * slots zero) at `scale` into coefficient-domain rows over the last nlimbs
 * Q primes (the active rows of level nq - nlimbs), then, with_p, every P
 * prime: result [*, nlimbs (+ np), N].
 * ValueError for non-finite values or a scaled magnitude that does not fit
 * the modulus (|x| * scale >= Q/2); the values are checked on the host when
 * they are CPU data and no host capture is active (the kernel maps
 * non-finite values to 0). */
fh_status fh_ckks_poly_encode(fh_ckks_tables *tb, fh_tensor *msg, double scale, int nlimbs, bool with_p,
                              fh_tensor **result);
/* The host check of the above on a CPU message (any layout): ValueError for
 * a non-finite value or a magnitude that would wrap around. Callers that
 * move a CPU message to a device run it first. */
fh_status fh_ckks_check_message(const fh_ckks_tables *tb, const fh_tensor *msg, double scale, int nlimbs);
/* Decode coefficient-domain rows [*, nlimbs, N] over the last nlimbs Q primes:
 * result [*, N/2] complex128 (or float64 real parts). */
fh_status fh_ckks_poly_decode(fh_ckks_tables *tb, fh_tensor *coeffs, double scale, bool complex_out,
                              fh_tensor **result);
/* Decode float64 coefficients [*, N] (the polynomial itself, e.g. an
 * approximate_coefficients plaintext): result [*, N/2] as above. */
fh_status fh_ckks_poly_decode_real(fh_ckks_tables *tb, fh_tensor *coeffs, double scale, bool complex_out,
                                   fh_tensor **result);

/* Tensor product of a and b [2, *, nids, N] (NTT domain, Montgomery):
 * result [3, *, nids, N] = (a0 b0, a0 b1 + a1 b0, a1 b1). */
fh_status fh_ckks_poly_tensor(fh_ckks_tables *tb, fh_tensor *a, fh_tensor *b, const int *ids, int nids,
                              fh_tensor **result);
/* Fast base conversion of t [*, nsrc, N] (standard residues modulo the
 * distinct prime ids src) to the prime ids dst: result [*, ndst, N]
 * (fh_ckks_bconv_args; `center` lifts the scaled residues to (-s/2, s/2]).
 * The constants are computed on the host for this pair of bases. */
fh_status fh_ckks_poly_bconv(fh_ckks_tables *tb, fh_tensor *t, const int *src, int nsrc, const int *dst, int ndst,
                             bool center, fh_tensor **result);
/* Key-switching inner product: digits [*, D, nids, N], key [D, 2, R, N]:
 * result [*, 2, nids, N], out[c][l] = sum_d sigma(digits[d][l]) key[d][c][key_rows[l]]
 * (Montgomery products, modulo prime ids[l]); sigma is the NTT-domain automorphism
 * X -> X^galois (odd, below 2N; 1: none) read in place (FH_K_CKKS_KS_INNER). */
fh_status fh_ckks_poly_ks_inner(fh_ckks_tables *tb, fh_tensor *digits, fh_tensor *key, const int *ids,
                                const int *key_rows, int nids, uint64_t galois, fh_tensor **result);
/* The same for nsteps (1 to FH_CKKS_KS_MAX_STEPS) automorphisms galois[s] in one launch (the
 * kernel's steps, as rotate_many's hoisted steps), each with `key`: result [nsteps, *, 2,
 * nids, N], slice s the product of galois[s]. A new tensor, the caller's to release. */
fh_status fh_ckks_poly_ks_inner_steps(fh_ckks_tables *tb, fh_tensor *digits, fh_tensor *key, const int *ids,
                                      const int *key_rows, int nids, const uint64_t *galois, int nsteps,
                                      fh_tensor **result);

/* Key-switching mod-up of t [*, la, N], the la = nq - level active Q rows of
 * `level` (coefficient domain): result [*, ndigits, la + np, N], digit j's rows
 * copied and extended to the other active Q rows and the P rows with the
 * tables' digit constants (fh_ckks_modup_args; centered). */
fh_status fh_ckks_poly_modup(fh_ckks_tables *tb, fh_tensor *t, int level, fh_tensor **result);

/* The inverse NTT of t [*, rows, N] with its output words made the conversion sources of a
 * key switch (fh_ckks_ntt_args.scale, fh_ckks_ks_source_word: [x shat_inv]_q, bit 63 the
 * centred lift's flag), whatever the tables fold: without moddown the rows are the la =
 * nq - level active Q rows of `level` (shat_inv of each row's digit, as the mod-up's
 * constants), with moddown the np P rows of a mod-down (shat_inv over P). */
fh_status fh_ckks_poly_intt_sources(fh_ckks_tables *tb, fh_tensor *t, int level, bool moddown, fh_tensor **result);

/* nt ternary rows, then ng Gaussian rows, of N int64 coefficients on the tables' device, from
 * the next run of r's stream (FH_K_CKKS_SAMPLE; r continues after it): result [nt + ng, N]. */
fh_status fh_ckks_poly_sample(fh_ckks_tables *tb, fh_ckks_rng *r, int nt, int ng, fh_tensor **result);

/* ---- internal: launch helper for the evaluator ----------------------------- */
#define FH_CKKS_MAX_USES 48
typedef struct fh__ckks_launcher {
  fh_ckks_tables *tb; /* borrowed */
  fh_device dev;
  fh_stream *stream; /* borrowed; NULL on the CPU */
  fh_storage *uses[FH_CKKS_MAX_USES];
  int nuses;
  bool overflow; /* more storages than FH_CKKS_MAX_USES: submits fail (an engine bug) */
} fh__ckks_launcher;
fh_status fh__ckks_launcher_init(fh__ckks_launcher *L, fh_ckks_tables *tb);
/* Add a tensor's storage to the uses (ignored when already there). */
void fh__ckks_use(fh__ckks_launcher *L, const fh_tensor *t);
fh_status fh__ckks_submit(fh__ckks_launcher *L, int kernel, const void *args, size_t size);
/* NTT / INTT of ngroups x nlimbs rows. */
fh_status fh__ckks_ntt(fh__ckks_launcher *L, bool forward, uint64_t *out, int64_t out_gs, const uint64_t *in,
                       int64_t in_gs, int64_t ngroups, const int32_t *prime, int nlimbs);
/* fh__ckks_ntt_rows's arguments, filled into *a (for a caller that sets more fields, such as
 * fh_ckks_ntt_args.in_b, before it submits them) */
void fh__ckks_ntt_rows_args(const fh__ckks_launcher *L, fh_ckks_ntt_args *a, uint64_t *out, int64_t out_gs,
                            const uint64_t *in, int64_t in_gs, int64_t ngroups, const int32_t *prime, int nlimbs,
                            const int32_t *in_row, const int32_t *out_row);
/* a->scale and a->nscale (fh_ckks_ntt_args) for a key switch's conversion sources: the la
 * active Q rows at `level` (limb r: the (shat_inv, Shoup companion) pair of its digit's
 * constants, fh_ckks_tables.sources), or with moddown the np P rows of a mod-down (limb i:
 * the pair i of tb->moddown[level]); the tables must have P primes */
void fh__ckks_source_scale_rows(const fh_ckks_tables *tb, int level, bool moddown, fh_ckks_ntt_args *a);
/* The same with limb l at row in_row[l] of each input group and out_row[l] of each output
 * group (fh_ckks_ntt_args.rows). */
fh_status fh__ckks_ntt_rows(fh__ckks_launcher *L, bool forward, uint64_t *out, int64_t out_gs, const uint64_t *in,
                            int64_t in_gs, int64_t ngroups, const int32_t *prime, int nlimbs, const int32_t *in_row,
                            const int32_t *out_row);
/* The automorphism X -> X^galois of ngroups x nlimbs rows, in the NTT or the
 * coefficient domain. Nothing is launched when ngroups or nlimbs is 0. */
fh_status fh__ckks_automorph(fh__ckks_launcher *L, bool ntt_domain, uint64_t galois, uint64_t *out, int64_t out_gs,
                             const uint64_t *in, int64_t in_gs, int64_t ngroups, const int32_t *prime, int nlimbs);
/* One element-wise launch (no constants) over ngroups x nlimbs rows:
 * out = op(x, y), each operand with its group stride (y may be NULL for
 * unary ops). Nothing is launched when ngroups is 0. */
fh_status fh__ckks_ew(fh__ckks_launcher *L, int op, int64_t ngroups, const int32_t *prime, int nlimbs, uint64_t *out,
                     int64_t out_gs, const uint64_t *x, int64_t x_gs, const uint64_t *y, int64_t y_gs);
/* Fill the common fields of an element-wise block (constants zero). */
void fh__ckks_ew_init(fh__ckks_launcher *L, fh_ckks_ew_args *a, int op, int64_t ngroups, const int32_t *prime,
                      int nlimbs);
/* Shoup companion helper: a->c_const[l] = c, a->c_shoup[l] = shoup(c). */
void fh__ckks_ew_set_const(fh__ckks_launcher *L, fh_ckks_ew_args *a, int l, uint64_t c);
/* nt ternary rows, then ng Gaussian rows, of n int64 coefficients at out (the launcher's device,
 * already in its uses) from the next run of r's stream (FH_K_CKKS_SAMPLE). */
fh_status fh__ckks_sample(fh__ckks_launcher *L, fh_ckks_rng *r, int64_t *out, int64_t n, int64_t nt, int64_t ng);
/* Allocate an uninitialised uint64 tensor on the launcher's device and add it to the uses. */
fh_status fh__ckks_temp(fh__ckks_launcher *L, int ndim, const int64_t *shape, fh_tensor **out);
static inline uint64_t *fh__ckks_ptr(const fh_tensor *t) { return (uint64_t *)fh_tensor_data(t); }

#ifdef __cplusplus
}
#endif
#endif
