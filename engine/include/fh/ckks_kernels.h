/* CKKS kernels: ids, argument blocks and the per-prime constant record,
 * shared by the CPU back end (engine/ckks/ckks_kernels_cpu.c) and a CUDA back
 * end (the .cu files of engine/ckks). The evaluator (engine/ckks/ckks_*.c)
 * validates, allocates, fills one of these blocks and submits it through the
 * launch boundary (fh/launch.h); it never calls a kernel directly, so a CUDA
 * implementation of an id drops in without touching the evaluator.
 *
 * Argument blocks are plain data: device addresses (of tensors and of the
 * context's constant tables, fh/ckks_tables.h), sizes, strides and small
 * per-limb constants. They are copied into host tapes and CUDA graphs, so
 * they hold no host-only pointers and no references.
 *
 * Data layout. An RNS polynomial batch is a set of `ngroups` groups of
 * `nlimbs` contiguous rows of N = 2^log_n uint64 coefficients each: row
 * (g, l) of operand X starts at X + g * X_gs + l * N (strides in elements).
 * Row l is reduced modulo the context prime prime[l] (an index into the
 * context's prime list: Q primes first, then P primes). A ciphertext
 * [component, *batch, limb, N] is ngroups = component * batch groups with
 * group stride nlimbs * N, or one launch per component.
 *
 * Residue conventions (FHElium's invariant). Coefficient-domain rows hold
 * standard residues in [0, q). NTT-domain rows hold Montgomery residues
 * (a * 2^64 mod q) of the evaluations, in the bit-reversed order of the
 * forward transform below. The conversion happens inside the transforms:
 *   FH_K_CKKS_NTT   standard coefficients -> Montgomery evaluations (the
 *                   multiplication by R = 2^64 is fused into the first
 *                   butterfly stage: its two Shoup constants are R and
 *                   psi_rev[1] * R instead of 1 and psi_rev[1]);
 *   FH_K_CKKS_INTT  Montgomery evaluations -> standard coefficients (the
 *                   final scaling uses N^-1 * R^-1 instead of N^-1).
 * Every other kernel preserves the representation of its inputs:
 * additions are the same in both forms, products of two NTT-domain values
 * use Montgomery multiplication (MM(aR, bR) = abR), products by a known
 * constant use Shoup multiplication (representation-agnostic).
 *
 * NTT ordering. The forward transform is the iterative Cooley-Tukey
 * negacyclic NTT with twiddles psi_rev[k] = psi^bitrev(k) (psi the
 * context's primitive 2N-th root of unity); its output slot i holds
 * a(psi^(2 * bitrev(i) + 1)) (times R). The inverse is Gentleman-Sande with
 * psi^-bitrev(k). Harvey's lazy butterflies keep values in [0, 4q) inside
 * the forward and [0, 2q) inside the inverse; outputs are fully reduced. */
#ifndef FH_CKKS_KERNELS_H
#define FH_CKKS_KERNELS_H

#include <string.h>

#include "fh/ckks_context.h" /* FH_CKKS_MAX_PRIMES, FH_CKKS_MAX_LOG_N */
#include "fh/ckks_random.h"  /* fh_ckks_stream_pos, the samplers of one word */
#include "fh/kernels.h"      /* FH_K_TENSOR_END */
#include "fh/modarith.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FH_CKKS_MAX_PRIMES (fh/ckks_context.h) bounds the primes of a context and
 * the rows of one launch's limb list. */
#define FH_CKKS_MIN_LOG_N 1

/* Kernel ids (after the tensor kernels, fh/kernels.h). */
enum {
  FH_K_CKKS_NTT = FH_K_TENSOR_END, /* fh_ckks_ntt_args: forward, standard -> Montgomery */
  FH_K_CKKS_INTT,                   /* fh_ckks_ntt_args: inverse, Montgomery -> standard */
  FH_K_CKKS_EW,                     /* fh_ckks_ew_args: element-wise modular arithmetic */
  FH_K_CKKS_TENSOR,                 /* fh_ckks_tensor_args: (a0,a1) x (b0,b1) -> (d0,d1,d2) */
  FH_K_CKKS_BCONV,                  /* fh_ckks_bconv_args: fast base conversion */
  FH_K_CKKS_KS_INNER,               /* fh_ckks_ks_args: key-switching inner product */
  FH_K_CKKS_AUTOMORPH,              /* fh_ckks_automorph_args: X -> X^g */
  FH_K_CKKS_ENCODE,                 /* fh_ckks_encode_args: slots -> RNS coefficients */
  FH_K_CKKS_DECODE,                 /* fh_ckks_decode_args: RNS coefficients -> slots */
  FH_K_CKKS_MODUP,                  /* fh_ckks_modup_args: every digit's mod-up conversion at once */
  FH_K_CKKS_KS_CORE,                /* fh_ckks_ks_core_args: mod-up, NTT and key inner product fused */
  FH_K_CKKS_MODDOWN,                /* fh_ckks_moddown_args: conversion, NTT and (a - t) P^-1 fused */
  FH_K_CKKS_LT,                     /* fh_ckks_lt_args: a linear transform's sum over QP (double hoisting) */
  FH_K_CKKS_SAMPLE,                 /* fh_ckks_sample_args: ternary and Gaussian rows from a keystream run */
  FH_K_CKKS_END
};
#define FH_K_CKKS_COUNT (FH_K_CKKS_END - FH_K_CKKS_NTT)

/* The CKKS layer's kernel tables (indexed by id - FH_K_CKKS_NTT), registered
 * with the launch boundary before the layer's first submit
 * (fh__ckks_submit): names and CPU implementations in
 * engine/ckks/ckks_kernels_cpu.c, CUDA ones in the layer's .cu files (builds
 * with CUDA only). */
extern const char *const fh__ckks_kernel_names[FH_K_CKKS_COUNT];
extern const fh_cpu_kernel_fn fh__ckks_cpu_kernels[FH_K_CKKS_COUNT];
extern const fh_cuda_kernel_fn fh__ckks_cuda_kernels[FH_K_CKKS_COUNT];

/* Constants of one prime (host-computed, stored in the context tables). */
typedef struct fh_ckks_prime {
  uint64_t q;
  uint64_t qinv;                       /* q^-1 mod 2^64 (Montgomery) */
  uint64_t r1, r1_shoup;               /* R mod q (R = 2^64) and its Shoup companion */
  uint64_t r2;                         /* R^2 mod q */
  uint64_t w1r, w1r_shoup;             /* psi_rev[1] * R mod q (fused first forward stage) */
  uint64_t ninv_rinv, ninv_rinv_shoup; /* N^-1 * R^-1 mod q (last inverse stage, first output half) */
  uint64_t iw1s, iw1s_shoup;           /* psi^-bitrev(1) * N^-1 * R^-1 mod q (second output half) */
  uint64_t psi;                        /* the primitive 2N-th root of unity (the smallest) */
  uint64_t psi_inv;
  fh_modulus bar;                      /* Barrett constants */
  /* FP64 butterflies (fh_fp_mul; CUDA only): fp_tw is the offset in words from the
   * twiddle table (fh_ckks_ntt_args.ntt) of this prime's double rows [psi_rev, psi_rev / q,
   * ipsi_rev, ipsi_rev / q], each N doubles, or 0 when the integer butterflies run (the
   * prime is not below 2^FH_FP_MAX_BITS, the tables are on the CPU, or FHELIUM_CUDA_FP=0);
   * fp_c holds the fused stages' constants and their quotients by q as doubles:
   * r1, w1r (first forward stage), ninv_rinv, iw1s (last inverse stage). */
  int64_t fp_tw;
  double fp_q, fp_qinv;
  double fp_c[8];
} fh_ckks_prime;

/* The CUDA NTT's FP64 arithmetic on one row on the CPU (a test twin; the prime must
 * satisfy fh_fp_eligible): in -> a (may alias), v scratch of N doubles owned by the caller.
 * din, when not NULL, replaces in: integer-valued doubles below 4q in size (forward only:
 * the inputs a CUDA transform takes from a conversion in doubles). formed: every stage's
 * twiddle quotient is formed as w qinv (qinv = 1/q rounded), as the CUDA chunk stages form
 * it, instead of the table's w / q rounded. */
void fh_ckks_ntt_row_fp(uint64_t *a, const uint64_t *in, const double *din, int log_n, const fh_ckks_prime *p,
                        const uint64_t *tw, bool forward, bool formed, double *v);

/* ---- NTT / INTT ------------------------------------------------------------
 * Limb l of group g reads in + g * in_gs + row * N and writes out + g * out_gs + row * N
 * with row = l, or with rows set: in_row[l] and out_row[l] (rows of one operand gathered
 * from several places, e.g. a ciphertext's third component and the first row of the other
 * two, in one launch).
 * out may equal in (in place). ntt points at the context's twiddle table:
 * per prime p, 4 rows of N words at ntt + p * 4N:
 *   [0] psi_rev[k] = psi^bitrev(k)      [1] Shoup companions of [0]
 *   [2] ipsi_rev[k] = psi^-bitrev(k)    [3] Shoup companions of [2] */
typedef struct fh_ckks_ntt_args {
  uint64_t *out;
  const uint64_t *in;
  int64_t out_gs, in_gs;
  int64_t ngroups;
  int32_t nlimbs, log_n;
  const fh_ckks_prime *primes;
  const uint64_t *ntt;
  int32_t prime[FH_CKKS_MAX_PRIMES];
  int32_t rows; /* 0: row l is limb l; else in_row / out_row */
  int32_t in_row[FH_CKKS_MAX_PRIMES], out_row[FH_CKKS_MAX_PRIMES];
  /* The inverse transform's input formed from two ciphertexts' words (fh_ckks_tensor_word),
   * where in_b is not NULL (multiply fused with relinearize: the tensor product's words go
   * straight into the INTT, N > 2^FH_CKKS_CUDA_ROW_LOG): row l's input word j is
   * fh_ckks_tensor_word(prod[l], A0[j], A1[j], B0[j], B1[j]) with A0 = in + g in_gs +
   * in_off(l), A1 = A0 + in_cs, B0 = in_b + g in_b_gs + in_off(l), B1 = B0 + in_b_cs; rows
   * l < nkeep also write those words (the NTT-domain input) to keep + g keep_gs + l N. */
  const uint64_t *in_b;
  int64_t in_b_gs, in_cs, in_b_cs;
  uint64_t *keep;
  int64_t keep_gs;
  int32_t nkeep;
  int8_t prod[FH_CKKS_MAX_PRIMES];
  /* The inverse transform's output made a key switch's conversion sources (inverse only),
   * for the limbs l < nscale (0: none): output word x is written as
   * fh_ckks_ks_source_word(x, scale[2 l], scale[2 l + 1], q), scale holding each such row's
   * pair (shat_inv, Shoup companion) of its conversion constants on the tables' device
   * (fh_ckks_tables.sources, or a mod-down's fh_ckks_bconv_args.consts). The words that
   * CUDA's key switch and mod-down otherwise make in a pass of their own
   * (fh_ckks_ks_core_args.prescaled, fh_ckks_moddown_args.prescaled). */
  const uint64_t *scale;
  int32_t nscale;
} fh_ckks_ntt_args;

/* A conversion source word as the key switch's base conversion takes it: [x shat_inv]_q (a
 * Shoup product, fully reduced) with bit 63 (FH_CKKS_KS_FLAG; primes are below 2^63) set when
 * it is above q / 2, the flag of its centred lift. Both back ends' code. */
#define FH_CKKS_KS_FLAG ((uint64_t)1 << 63)
FH_HD uint64_t fh_ckks_ks_source_word(uint64_t x, uint64_t w, uint64_t ws, uint64_t q) {
  const uint64_t r = fh_shoup_mul(x, w, ws, q);
  return r | (r > (q >> 1) ? FH_CKKS_KS_FLAG : 0);
}

/* The tensor product of (a0, a1) and (b0, b1), one word (NTT domain, Montgomery products as
 * FH_K_CKKS_TENSOR writes them): kind FH_CKKS_PROD_11 a1 b1 (d2), FH_CKKS_PROD_00 a0 b0 (d0),
 * FH_CKKS_PROD_X a0 b1 + a1 b0 (d1: < 2 q^2 < q 2^64, one Montgomery reduction). */
enum { FH_CKKS_PROD_11 = 1, FH_CKKS_PROD_00 = 2, FH_CKKS_PROD_X = 3 };
FH_HD uint64_t fh_ckks_tensor_word(int kind, uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1, uint64_t q,
                                   uint64_t qinv) {
  if (kind == FH_CKKS_PROD_11) return fh_mont_mul(a1, b1, q, qinv);
  if (kind == FH_CKKS_PROD_00) return fh_mont_mul(a0, b0, q, qinv);
  const unsigned __int128 mid = (unsigned __int128)a0 * b1 + (unsigned __int128)a1 * b0;
  return fh_mont_reduce((uint64_t)mid, (uint64_t)(mid >> 64), q, qinv);
}

/* limb l's row offsets in words (fh_ckks_ntt_args) */
FH_HD int64_t fh_ckks_ntt_in_off(const fh_ckks_ntt_args *a, int l) {
  return (int64_t)(a->rows ? a->in_row[l] : l) << a->log_n;
}
FH_HD int64_t fh_ckks_ntt_out_off(const fh_ckks_ntt_args *a, int l) {
  return (int64_t)(a->rows ? a->out_row[l] : l) << a->log_n;
}

/* ---- element-wise ------------------------------------------------------------
 * Per row l with modulus q = primes[prime[l]].q; k[l], c[l] are per-limb
 * constants (< q) with Shoup companions k_shoup[l], c_shoup[l]; a broadcast
 * operand has group stride 0. Inputs are reduced (< q). */
typedef enum fh_ckks_ew_op {
  FH_CKKS_EW_COPY = 0,      /* out = a */
  FH_CKKS_EW_ADD,           /* out = a + b */
  FH_CKKS_EW_SUB,           /* out = a - b */
  FH_CKKS_EW_NEG,           /* out = -a */
  FH_CKKS_EW_MONT_MUL,      /* out = MM(a, b) = a b R^-1 */
  FH_CKKS_EW_MONT_MAC,      /* out = MM(a, b) + c_operand */
  FH_CKKS_EW_MUL_CONST,     /* out = a * c[l] (Shoup) */
  FH_CKKS_EW_ADD_CONST,     /* out = a + k[l] */
  FH_CKKS_EW_SUB_ADD_MUL,   /* out = (a - b + k[l]) * c[l] (+ c operand when given): rescale / mod-down */
  FH_CKKS_EW_ADD_MUL_CONST, /* out = a + b * c[l] (Shoup) */
  FH_CKKS_EW_TO_MONT,       /* out = a R mod q */
  FH_CKKS_EW_FROM_MONT,     /* out = a R^-1 mod q */
  FH_CKKS_EW_SIGNED,        /* out = int64 a reduced into [0, q) (a is int64 data, |a| < 2^63) */
  FH_CKKS_EW_RESCALE,       /* out = (a - [b]_q) * c[l] (Shoup): the coefficient-domain rescale in one pass.
                             * b is the dropped row (one row for every limb: b + g * b_gs), modulo q_d;
                             * [b]_q is its centred lift (b - q_d when b > drop_half = floor(q_d / 2))
                             * reduced modulo q; k[l] = q_d mod q */
  FH_CKKS_EW_OP_COUNT
} fh_ckks_ew_op;

typedef struct fh_ckks_ew_args {
  int32_t op; /* fh_ckks_ew_op */
  int32_t nlimbs, log_n;
  int64_t ngroups;
  uint64_t *out;
  const uint64_t *a, *b, *c; /* b, c NULL when unused */
  int64_t out_gs, a_gs, b_gs, c_gs;
  int64_t a_ls; /* a's limb stride (N normally; 0 broadcasts one row over the limbs) */
  const fh_ckks_prime *primes;
  int32_t prime[FH_CKKS_MAX_PRIMES];
  uint64_t k[FH_CKKS_MAX_PRIMES];
  uint64_t c_const[FH_CKKS_MAX_PRIMES], c_shoup[FH_CKKS_MAX_PRIMES];
  uint64_t drop_half; /* FH_CKKS_EW_RESCALE: floor(q_d / 2) */
} fh_ckks_ew_args;

/* ---- ciphertext tensor product (NTT domain) ----------------------------------
 * d0 = a0 b0, d1 = a0 b1 + a1 b0, d2 = a1 b1 (Montgomery products). Component
 * c of X is at X + c * X_cs; groups as above. */
typedef struct fh_ckks_tensor_args {
  uint64_t *out;
  const uint64_t *a, *b;
  int64_t out_cs, a_cs, b_cs;
  int64_t out_gs, a_gs, b_gs;
  int64_t ngroups;
  int32_t nlimbs, log_n;
  const fh_ckks_prime *primes;
  int32_t prime[FH_CKKS_MAX_PRIMES];
} fh_ckks_tensor_args;

/* ---- fast base conversion (coefficient domain, standard residues) -------------
 * From source primes S = (s_0..s_{ns-1}) (rows in + src_row[i] * N) to target
 * primes T (rows out + dst_row[j] * N):
 *   y_j = sum_i [x_i * shat_inv_i]_{s_i} * (Shat_i mod t_j)  mod t_j,
 * Shat_i = prod_{k != i} s_k. The result is x + u * S for some integer
 * 0 <= u < ns (no correction). With `center`, each [x_i * shat_inv_i]_{s_i}
 * is lifted to (-s_i/2, s_i/2] instead of [0, s_i): the result is then
 * sum_i y'_i * Shat_i = x + u * S with x in [0, S) and u = sum_i y'_i / s_i - x / S,
 * in (-ns/2 - 1, ns/2], distributed symmetrically about -x/S (for one source prime: the
 * centered residue of x exactly). Key switching converts centered, so that neither the
 * extended digits nor the mod-down rounding carry an input-independent offset (an
 * offset c in every coefficient of a polynomial multiplied by the key's error or by s
 * is a bias of c * (1 + X + ... + X^{N-1}) * e, about c * 2N/pi * |e(zeta)| in slot 1).
 * `consts` points at the table entry for this
 * (S, T) pair: ns pairs (shat_inv_i, Shoup companion), then the ndst x ns
 * matrix (Shat_i mod t_j) row by row (j major). With copy_src, source row i
 * is also copied to out + src_out_row[i] * N (mod-up writes the digit's own
 * rows and the converted rows in one pass). */
typedef struct fh_ckks_bconv_args {
  uint64_t *out;
  const uint64_t *in;
  int64_t out_gs, in_gs;
  int64_t ngroups;
  int32_t nsrc, ndst, log_n;
  const fh_ckks_prime *primes;
  const uint64_t *consts;
  int32_t src_prime[FH_CKKS_MAX_PRIMES], src_row[FH_CKKS_MAX_PRIMES];
  int32_t dst_prime[FH_CKKS_MAX_PRIMES], dst_row[FH_CKKS_MAX_PRIMES];
  int32_t copy_src;
  int32_t src_out_row[FH_CKKS_MAX_PRIMES];
  int32_t center; /* lift the scaled source residues to (-s_i/2, s_i/2] */
} fh_ckks_bconv_args;

/* ---- key-switching mod-up: all digits in one launch ---------------------------
 * `in` holds the nrows_in active Q rows of a polynomial (coefficient domain,
 * standard residues; group stride in_gs); the output of digit j (j < ndigits)
 * has nrows rows (the same Q rows, then the P rows; prime[r] is row r's prime
 * id) at out + g * out_gs + j * out_ds. Digit j's own rows are
 * [first[j], first[j] + nsrc[j]): they are copied, and every other row r is
 * their fast base conversion (fh_ckks_bconv_args, `center` as there) with the
 * constants consts[j] for the targets in row order. One launch replaces ndigits
 * copy_src base conversions. */
#define FH_CKKS_MAX_DIGITS FH_CKKS_MAX_PRIMES
typedef struct fh_ckks_modup_args {
  uint64_t *out;
  const uint64_t *in;
  int64_t out_gs, out_ds, in_gs;
  int64_t ngroups;
  int32_t ndigits, nrows, log_n, center;
  const fh_ckks_prime *primes;
  const uint64_t *consts[FH_CKKS_MAX_DIGITS];
  int32_t first[FH_CKKS_MAX_DIGITS], nsrc[FH_CKKS_MAX_DIGITS];
  int32_t prime[FH_CKKS_MAX_PRIMES];
} fh_ckks_modup_args;

/* ---- the core of a key switch: mod-up, NTT, inner product with the key ----------
 * For a polynomial d (`up.in`, its active Q rows in the coefficient domain):
 *   out[c][r] = sum_j NTT(modup_j(d))[r] * key[j][c][key_row[r]]   (Montgomery products)
 * for c = 0, 1 and the up.nrows rows r (prime up.prime[r]), out row (g, c, r) at
 * out + g * out_gs + c * out_cs + r * N; digit j of the key at key + j * key_ds (+ c * key_cs
 * + row * N). up.out is scratch of the extended digits ([G][ndigits][nrows][N] as in
 * fh_ckks_modup_args); its contents afterwards are unspecified (the CUDA version keeps
 * a half-transformed state there and never writes the rest). One launch for what
 * FH_K_CKKS_MODUP, FH_K_CKKS_NTT and FH_K_CKKS_KS_INNER do in turn, with the same result:
 * on CUDA the conversion is fused into the NTT's first kernel and the inner product
 * into its second, so the digits cross memory twice instead of six times.
 * Without a key (key NULL): the mod-up and the NTT only, what FH_K_CKKS_MODUP and
 * FH_K_CKKS_NTT do in turn: up.out then holds the transformed digits, every row of every
 * digit, and out is not written (hoisted rotations and linear transforms; on CUDA the
 * conversion is fused into the NTT's first kernel). */
/* On CUDA a ring of N <= 2^FH_CKKS_CUDA_ROW_LOG words takes whole rows through one
 * block's shared memory; larger rings run the fused two-kernel shapes. */
#define FH_CKKS_CUDA_ROW_LOG 11
typedef struct fh_ckks_ks_core_args {
  fh_ckks_modup_args up;
  const uint64_t *ntt; /* the twiddle table (fh_ckks_ntt_args.ntt) */
  uint64_t *out;
  int64_t out_gs, out_cs;
  const uint64_t *key;
  int64_t key_ds, key_cs;
  int32_t key_row[FH_CKKS_MAX_PRIMES];
  /* scratch of the digits' source rows ([G][rows of all digits][N], group stride
   * scaled_gs): on CUDA with N > 2^FH_CKKS_CUDA_ROW_LOG each source residue is scaled
   * by its digit's shat_inv once here (bit 63 flags the centred lift) instead of once
   * per target row; unused (may be NULL) on the CPU and for smaller rings, contents
   * afterwards unspecified */
  uint64_t *scaled;
  int64_t scaled_gs;
  /* optional (NULL: none): up.in's rows in the NTT domain, group stride in_ntt_gs; a
   * digit's own rows of the extended digits are then these words, copied rather than
   * transformed again (the same result: the NTT of up.in's rows): with a key CUDA's inner
   * product reads them where they are, without one they are copied into up.out */
  const uint64_t *in_ntt;
  int64_t in_ntt_gs;
  /* not 0: `scaled` already holds the scaled sources (an INTT with fh_ckks_ntt_args.scale
   * wrote them: fh_ckks_ks_source_word of up.in's words), and CUDA's pass that makes them
   * does not run; up.in is then not read. With in_ntt only, and on CUDA with N >
   * 2^FH_CKKS_CUDA_ROW_LOG (fh_ckks_ks_core_prescaled_refusal): the digits' own rows come
   * from in_ntt, the converted ones from `scaled` (the CPU converts from them too) */
  int32_t prescaled;
} fh_ckks_ks_core_args;


/* ---- the mod-down of a key switch, NTT-domain result ------------------------------
 * conv converts the P rows of each group gg (coefficient domain, centred) to its Q rows
 * l < conv.ndst (prime conv.dst_prime[l]) into scratch conv.out; then, with g = gg / 2 and
 * c = gg % 2 (groups are (g, c) pairs: a key switch's two components):
 *   out[c] row (g, l) = (a row (gg, l) - NTT(conv(gg))[l]) * c_const[l]  (+ add[c] row (g, l))
 * (Shoup products by c_const[l] = P^-1 mod q_l). a row (gg, l) at a + gg * a_gs + l * N (NTT
 * domain), out[c] / add[c] rows at + g * out_gs / add_gs + l * N; add[c] may be NULL. The
 * scratch's contents afterwards are unspecified, and so are conv.in's (CUDA scales the P
 * rows there in place, once, instead of once per target row). What FH_K_CKKS_BCONV, FH_K_CKKS_NTT and
 * two FH_K_CKKS_EW (SUB_ADD_MUL) do in turn, with the same result; on CUDA the conversion
 * is fused into the NTT's first kernel and the subtraction into its second. */
/* Fused rescale (rescale != 0; N > 2^FH_CKKS_CUDA_ROW_LOG; add and v0 both given or all three
 * NULL, a mod-down without addend, as a linear transform's): the result is also
 * rescaled by the first Q row's prime q_0 = conv.dst_prime[0], word for word what a rescale
 * (FH_CKKS_EW_RESCALE's centred lift, NTT-domain form) of the result above gives: for
 * l = 1 .. conv.ndst - 1, out[c] row (g, l - 1) =
 *   ((a row (gg, l) - NTT(conv(gg) + P [y0]_{q_l})[l]) c_const[l] + add[c] row (g, l)) d_const[l]
 * with y0 the coefficients of the unrescaled result's row 0,
 *   y0 = (u0 - conv(gg)[0]) c_const[0] + v0  (mod q_0),
 * u0 the INTT of a's row 0 (conv.in row nsrc of each group; conv.in has nsrc + 2 rows a
 * group, row nsrc + 1 scratch) and v0 the INTT of add[c]'s row 0 (v0 + g * v0_gs + c * v0_cs;
 * zero when v0 is NULL).
 * The three are linear in the words mod q_l, so the words are exactly those of the mod-down
 * and then the rescale, for one mod-down pass over the rows instead of two. Constants for
 * l >= 1: pr[l] = P R mod q_l, pq[l] = P q_0 mod q_l, d_const[l] = q_0^-1 mod q_l (Shoup
 * companion d_shoup[l]); out_gs is the group stride of the ndst - 1 output rows. */
typedef struct fh_ckks_moddown_args {
  fh_ckks_bconv_args conv;
  const uint64_t *ntt;
  const uint64_t *a;
  int64_t a_gs;
  uint64_t *out[2];
  const uint64_t *add[2];
  int64_t out_gs, add_gs;
  uint64_t c_const[FH_CKKS_MAX_PRIMES], c_shoup[FH_CKKS_MAX_PRIMES];
  int32_t rescale;
  const uint64_t *v0;
  int64_t v0_gs, v0_cs;
  uint64_t pr[FH_CKKS_MAX_PRIMES], pq[FH_CKKS_MAX_PRIMES];
  uint64_t d_const[FH_CKKS_MAX_PRIMES], d_shoup[FH_CKKS_MAX_PRIMES];
  /* 0 or 1: add[c] as stored; else add[c] read through the NTT-domain automorphism
   * X -> X^add_galois (odd, below 2N: word j at fh_ckks_automorph_src(j)), so that a hoisted
   * rotation adds the rotation of c0 without a launch that writes it (N > 2^FH_CKKS_CUDA_ROW_LOG
   * on CUDA) */
  uint64_t add_galois;
  /* add as a tensor product (multiply fused with relinearize), where add_b[0] is not NULL:
   * component 0 adds fh_ckks_tensor_word(FH_CKKS_PROD_00, ..) and component 1
   * fh_ckks_tensor_word(FH_CKKS_PROD_X, ..) of A0 = add[0], A1 = add[1], B0 = add_b[0],
   * B1 = add_b[1] (group stride add_gs for both; add_galois 0 or 1) */
  const uint64_t *add_b[2];
  /* not 0: conv.in's P rows are already the conversion's sources (an INTT with
   * fh_ckks_ntt_args.scale wrote them), and CUDA's pass that makes them in place does not
   * run (the CPU converts from them). Without a fused rescale, and on CUDA with N >
   * 2^FH_CKKS_CUDA_ROW_LOG only (fh_ckks_moddown_prescaled_refusal) */
  int32_t prescaled;
} fh_ckks_moddown_args;

/* Why a kernel refuses the tensor-product form of its input (fh_ckks_ntt_args.in_b) or of
 * its addend (fh_ckks_moddown_args.add_b), or NULL where it takes it: only the inverse
 * transform and the NTT-domain mod-down of N > 2^FH_CKKS_CUDA_ROW_LOG (below, the evaluator
 * runs multiply and relinearize in turn), with both components of both operands and no
 * automorphism. Both back ends refuse alike (FH_ERR_EXECUTION: an internal error). */
#define FH__CKKS_STR(x) #x
#define FH__CKKS_XSTR(x) FH__CKKS_STR(x)
static inline const char *fh_ckks_ntt_in_b_refusal(const fh_ckks_ntt_args *a, bool forward) {
  if (a->in_b == NULL) return NULL;
  if (forward || a->log_n <= FH_CKKS_CUDA_ROW_LOG)
    return "ckks_ntt: a tensor-product input only for the inverse with N > 2^" FH__CKKS_XSTR(FH_CKKS_CUDA_ROW_LOG);
  return NULL;
}
/* Why a kernel refuses fh_ckks_ntt_args.scale (NULL where it takes it): the inverse only */
static inline const char *fh_ckks_ntt_scale_refusal(const fh_ckks_ntt_args *a, bool forward) {
  if (a->nscale <= 0) return NULL;
  if (forward) return "ckks_ntt: scaled outputs only for the inverse";
  if (a->scale == NULL || a->nscale > a->nlimbs) return "ckks_ntt: scaled outputs need a pair for each of nscale limbs";
  return NULL;
}
static inline const char *fh_ckks_moddown_add_b_refusal(const fh_ckks_moddown_args *a) {
  if (a->add_b[0] == NULL) return NULL;
  if (!a->add[0] || !a->add[1] || !a->add_b[1] || a->add_galois > 1)
    return "ckks_moddown: a tensor-product add needs both components of both operands and no automorphism";
  if (a->conv.log_n <= FH_CKKS_CUDA_ROW_LOG)
    return "ckks_moddown: no tensor-product add for N <= 2^" FH__CKKS_XSTR(FH_CKKS_CUDA_ROW_LOG);
  return NULL;
}

/* Why a back end refuses fh_ckks_ks_core_args.prescaled (NULL where it takes it; cuda: the
 * CUDA back end, whose small rings run the unfused kernels, else the CPU) */
static inline const char *fh_ckks_ks_core_prescaled_refusal(const fh_ckks_ks_core_args *a, bool cuda) {
  if (!a->prescaled) return NULL;
  if (cuda && a->up.log_n <= FH_CKKS_CUDA_ROW_LOG)
    return "ckks_ks_core: prescaled sources on CUDA only with N > 2^" FH__CKKS_XSTR(FH_CKKS_CUDA_ROW_LOG);
  if (a->scaled == NULL || a->in_ntt == NULL)
    return "ckks_ks_core: prescaled sources need the scaled rows and the input's NTT rows";
  return NULL;
}
/* Why a back end refuses fh_ckks_moddown_args.prescaled (NULL where it takes it) */
static inline const char *fh_ckks_moddown_prescaled_refusal(const fh_ckks_moddown_args *a, bool cuda) {
  if (!a->prescaled) return NULL;
  if (a->rescale) return "ckks_moddown: prescaled sources and a fused rescale";
  if (cuda && a->conv.log_n <= FH_CKKS_CUDA_ROW_LOG)
    return "ckks_moddown: prescaled sources on CUDA only with N > 2^" FH__CKKS_XSTR(FH_CKKS_CUDA_ROW_LOG);
  return NULL;
}

/* A fused rescale's y0 = (u0 - conv_0) c_const[0] + v0 mod q_0 (above; w0, ws0: c_const[0]
 * and its Shoup companion), both back ends' code: the CPU twin and CUDA's md0r write it,
 * CUDA's md1 computes it on load when md0r does not run. */
FH_HD uint64_t fh_ckks_rescale_y0(uint64_t u0, uint64_t conv0, uint64_t v0, uint64_t w0, uint64_t ws0, uint64_t q0) {
  return fh_mod_add(fh_shoup_mul(u0 + (q0 - conv0), w0, ws0, q0), v0, q0);
}

/* ---- the NTT-domain automorphism's permutation, both back ends' code ------------
 * X -> X^gal (gal odd, < 2N) permutes the evaluations: output slot s (the point
 * psi^(2k+1), k = bitrev(s)) takes the input slot of psi^(gal (2k+1)). This is
 * FH_K_CKKS_AUTOMORPH's NTT-domain rule, which the key-switching inner product
 * (galois) and the linear transform also read through. */
FH_HD uint32_t fh_ckks_bitrev(uint32_t x, int bits) {
#if defined(__CUDA_ARCH__)
  return bits == 0 ? 0 : __brev(x) >> (32 - bits);
#else
  x = ((x & 0x55555555u) << 1) | ((x >> 1) & 0x55555555u);
  x = ((x & 0x33333333u) << 2) | ((x >> 2) & 0x33333333u);
  x = ((x & 0x0F0F0F0Fu) << 4) | ((x >> 4) & 0x0F0F0F0Fu);
  x = ((x & 0x00FF00FFu) << 8) | ((x >> 8) & 0x00FF00FFu);
  x = (x << 16) | (x >> 16);
  return bits == 0 ? 0 : x >> (32 - bits);
#endif
}
FH_HD uint32_t fh_ckks_automorph_src(uint32_t s, uint64_t gal, int log_n) {
  const uint64_t k = fh_ckks_bitrev(s, log_n), e = ((2 * k + 1) * gal) & ((2 * ((uint64_t)1 << log_n)) - 1);
  return fh_ckks_bitrev((uint32_t)((e - 1) >> 1), log_n);
}

/* ---- key-switching inner product (NTT domain, Montgomery) ---------------------
 * out[c][l] = sum_{j < ndigits} sigma(digits[j][l]) * key[j][c][key_row[l]] for c = 0, 1,
 * over nlimbs rows per group, where sigma is the identity when galois is 0 or 1, else
 * the NTT-domain automorphism X -> X^galois (galois odd, < 2N): slot i of a digit row is
 * read at fh_ckks_automorph_src(i) (the hoisted rotations of rotate_many on CUDA read the
 * shared digits so, instead of permuting a copy for each step). digits: row (g, j, l) at
 * digits + g * digits_gs + j * digit_stride + l * N; key row (j, c, r) at
 * key + j * key_ds + c * key_cs + r * N (shared by every group); out row
 * (g, c, l) at out + g * out_gs + c * out_cs + l * N. out must not alias digits.
 * Steps (nsteps > 0, at most FH_CKKS_KS_MAX_STEPS): nsteps such products of the same digits,
 * product s with sigma of step_galois[s] and key step_key[s] into step_out[s] (the strides
 * above apply to each; out, key and galois are unused): rotate_many's hoisted steps in one
 * launch, so that on CUDA the steps' gathers of a digit row meet in L2 and each row comes
 * from memory once, not once a step. The words are those of nsteps launches of one product. */
#define FH_CKKS_KS_MAX_STEPS 8
typedef struct fh_ckks_ks_args {
  uint64_t *out;
  const uint64_t *digits;
  const uint64_t *key;
  int64_t out_gs, out_cs;
  int64_t digits_gs, digit_stride;
  int64_t key_ds, key_cs;
  int64_t ngroups;
  int32_t ndigits, nlimbs, log_n;
  uint64_t galois; /* 0 or 1: the digits as stored */
  const fh_ckks_prime *primes;
  int32_t prime[FH_CKKS_MAX_PRIMES];
  int32_t key_row[FH_CKKS_MAX_PRIMES];
  int32_t nsteps; /* 0: the one product above */
  uint64_t *step_out[FH_CKKS_KS_MAX_STEPS];
  const uint64_t *step_key[FH_CKKS_KS_MAX_STEPS];
  uint64_t step_galois[FH_CKKS_KS_MAX_STEPS];
} fh_ckks_ks_args;
/* The inner product a key-switch core runs last (fh_ckks_ks_core_args): its transformed digits
 * (a->up.out) with its key, into a->out; both back ends fill k with it. */
static inline void fh_ckks_ks_args_of_core(const fh_ckks_ks_core_args *a, fh_ckks_ks_args *k) {
  const fh_ckks_modup_args *u = &a->up;
  memset(k, 0, sizeof *k);
  k->out = a->out;
  k->digits = u->out;
  k->key = a->key;
  k->out_gs = a->out_gs;
  k->out_cs = a->out_cs;
  k->digits_gs = u->out_gs;
  k->digit_stride = u->out_ds;
  k->key_ds = a->key_ds;
  k->key_cs = a->key_cs;
  k->ngroups = u->ngroups;
  k->ndigits = u->ndigits;
  k->nlimbs = u->nrows;
  k->log_n = u->log_n;
  k->primes = u->primes;
  memcpy(k->prime, u->prime, sizeof(int32_t) * (size_t)u->nrows);
  memcpy(k->key_row, a->key_row, sizeof(int32_t) * (size_t)u->nrows);
}

/* ---- the sum of a linear transform over QP (double hoisting) -------------------
 * A linear transform sum_s pt_s * rotate(x, step_s) of a ciphertext x = (x_0, x_1) (NTT
 * domain) is computed before any mod-down: with the extended digits D of x_1 (the
 * mod-up of every digit and its NTT, [G][ndigits][nrows][N] as FH_K_CKKS_MODUP then
 * FH_K_CKKS_NTT write them), the rotation by a step with automorphism sigma and key k is
 * (P sigma(x_0) + sum_j sigma(D_j) k_j[0], sum_j sigma(D_j) k_j[1]) over QP, and a step
 * of 0 is (P x_0, P x_1). So, for the rows r < nrows (prime prime[r]: the nq_rows active
 * Q rows, then the P rows) and the components c = 0, 1:
 *   out[c][r] (+)= sum_s pt_s[r] * ( sum_j sigma_s(D_j)[r] * key_s[j][c][key_row[r]]
 *                                    + [r < nq_rows] pmod[r] * sigma_s(x_{c'})[r] )
 * where the second term is present for c = 0 (c' = 0) when the step has a key, and for
 * both components (c' = c) when it has none (key[s] == NULL: the step 0, galois[s] = 1,
 * no digits read). sigma_s(v) at slot i is v at the slot of point psi^(galois[s] (2k + 1)),
 * k = bitrev(i) (FH_K_CKKS_AUTOMORPH's NTT-domain permutation). Products of two NTT-domain
 * values are Montgomery products; pmod[r] = P mod q_r multiplies by Shoup (pmod_shoup).
 * Every result is the canonical residue in [0, q). A mod-down of out then gives the
 * transform at the ciphertext's level: one mod-down for every step instead of one each.
 * accumulate = 0 writes out, 1 adds to it (a transform of more than FH_CKKS_LT_STEPS
 * steps takes several launches). Rows: D row (g, j, r) at D + g * d_gs + j * d_ds + r * N;
 * x_c row (g, r) at x + g * x_gs + c * x_cs + r * N; key_s row (j, c, row) at
 * key[s] + j * key_ds + c * key_cs + row * N; pt_s row (g, r) at pt[s] + g * pt_gs[s] + r * N
 * (pt_gs 0: one plaintext for every group); out row (g, c, r) at
 * out + g * out_gs + c * out_cs + r * N. out must not alias the inputs. */
#define FH_CKKS_LT_STEPS 16
typedef struct fh_ckks_lt_args {
  uint64_t *out;
  const uint64_t *d, *x;
  int64_t out_gs, out_cs, d_gs, d_ds, x_gs, x_cs;
  int64_t key_ds, key_cs;
  int64_t ngroups;
  int32_t ndigits, nrows, nq_rows, log_n, nsteps, accumulate;
  const fh_ckks_prime *primes;
  uint64_t galois[FH_CKKS_LT_STEPS];
  const uint64_t *key[FH_CKKS_LT_STEPS];
  const uint64_t *pt[FH_CKKS_LT_STEPS];
  int64_t pt_gs[FH_CKKS_LT_STEPS];
  int32_t prime[FH_CKKS_MAX_PRIMES];
  int32_t key_row[FH_CKKS_MAX_PRIMES];
  uint64_t pmod[FH_CKKS_MAX_PRIMES], pmod_shoup[FH_CKKS_MAX_PRIMES];
} fh_ckks_lt_args;

/* fh_ckks_lt_terms' pieces, which the CUDA sum also uses for its wider loads: four digits'
 * words v (times key words k0, k1) added to r0, r1 with one Montgomery reduction each */
FH_HD void fh_ckks_lt_mac4(const uint64_t *v, const uint64_t *k0, const uint64_t *k1, uint64_t q, uint64_t qi,
                           uint64_t *r0, uint64_t *r1) {
  unsigned __int128 acc0 = 0, acc1 = 0;
  for (int k = 0; k < 4; ++k) {
    acc0 += (unsigned __int128)v[k] * k0[k];
    acc1 += (unsigned __int128)v[k] * k1[k];
  }
  *r0 = fh_mod_add(*r0, fh_mont_reduce((uint64_t)acc0, (uint64_t)(acc0 >> 64), q, qi), q);
  *r1 = fh_mod_add(*r1, fh_mont_reduce((uint64_t)acc1, (uint64_t)(acc1 >> 64), q, qi), q);
}
/* the ciphertext's part of a step's terms: pmod x0[src] to t0 (and x1[src] to t1 for a step
 * without key); x0 NULL: a P row, nothing */
FH_HD void fh_ckks_lt_plain(const uint64_t *x0, const uint64_t *x1, int keyed, uint32_t src, uint64_t pm, uint64_t pms,
                            uint64_t q, uint64_t *t0, uint64_t *t1) {
  if (!x0) return;
  *t0 = fh_mod_add(*t0, fh_shoup_mul(x0[src], pm, pms, q), q);
  if (!keyed) *t1 = fh_mod_add(*t1, fh_shoup_mul(x1[src], pm, pms, q), q);
}
/* One coefficient i of one row of a linear-transform step, both back ends' code: dig points at
 * the row of digit 0 (digit j at dig + j d_ds), key at the row and coefficient of digit 0's
 * first component (NULL: a step without key), x0/x1 at the ciphertext's rows (NULL: a P row),
 * src the automorphism's source slot. t0, t1 receive the step's two terms before the
 * plaintext product: the digits' inner products with the key (Montgomery, reduced per 4
 * digits: 4 products < 4 q^2 < q 2^64) plus pmod x_c'[src] (shoup pair pm, pms). */
FH_HD void fh_ckks_lt_terms(const uint64_t *dig, int64_t d_ds, const uint64_t *key, int64_t key_ds, int64_t key_cs,
                            int nd, uint32_t src, const uint64_t *x0, const uint64_t *x1, uint64_t pm, uint64_t pms,
                            uint64_t q, uint64_t qi, uint64_t *t0, uint64_t *t1) {
  uint64_t r0 = 0, r1 = 0;
  if (key) {
    for (int d0 = 0; d0 < nd; d0 += 4) {
      /* the chunk's 12 words loaded before any product (a fixed count that the compilers
       * unroll: on CUDA the loads are in flight together, not one digit's after another's) */
      uint64_t v[4], k0[4], k1[4];
      for (int k = 0; k < 4; ++k) {
        const int d = d0 + k < nd ? d0 + k : d0; /* past the last digit: digit d0 again, times 0 */
        v[k] = d0 + k < nd ? dig[d * d_ds + src] : 0;
        k0[k] = key[d * key_ds];
        k1[k] = key[d * key_ds + key_cs];
      }
      fh_ckks_lt_mac4(v, k0, k1, q, qi, &r0, &r1);
    }
  }
  fh_ckks_lt_plain(x0, x1, key != NULL, src, pm, pms, q, &r0, &r1);
  *t0 = r0;
  *t1 = r1;
}

/* ---- small random rows from a reserved keystream run ---------------------------------
 * out: nt ternary rows, then ng Gaussian rows, of n int64 coefficients each (row r at
 * out + r * n), from the run at pos (fh/ckks_random.h): ternary row r takes words
 * [r n, (r + 1) n), Gaussian row k the next fh_ckks_gaussian_words(n) words after the
 * ternary rows and the Gaussian rows before it (its sign word of coefficients 64 b ..
 * 64 b + 63 first, then their value words), exactly as fh_ckks_sample_ternary and
 * fh_ckks_sample_gaussian read a stream. Both back ends compute the words with
 * fh_chacha20_block (fh/ckks_random.h; the CPU block after block, CUDA the block of each word
 * a thread needs), the specs check them against libsodium's stream: the same words, so the
 * same rows. cdt: the Gaussian table (fh_ckks_gaussian_table). The block holds the
 * stream's key: the caller zeroes its copy after the submit. */
typedef struct fh_ckks_sample_args {
  int64_t *out;
  int64_t n;
  int32_t nt, ng;
  fh_ckks_stream_pos pos;
  uint64_t cdt[FH_CKKS_GAUSS_BOUND];
} fh_ckks_sample_args;

/* ---- automorphism X -> X^g (g odd, taken mod 2N) ------------------------------
 * Coefficient domain: out[(i g) mod N] = (-1)^floor(i g / N mod 2) in[i].
 * NTT domain: a permutation of the evaluations: out slot of point
 * psi^(2k+1) takes the input slot of point psi^(g(2k+1)) (bit-reversed
 * slots). out must not alias in. */
typedef struct fh_ckks_automorph_args {
  uint64_t *out;
  const uint64_t *in;
  int64_t out_gs, in_gs;
  int64_t ngroups;
  int32_t nlimbs, log_n;
  int32_t ntt_domain;
  uint64_t galois; /* g, odd, < 2N */
  const fh_ckks_prime *primes;
  int32_t prime[FH_CKKS_MAX_PRIMES];
} fh_ckks_automorph_args;

/* ---- encoding and decoding (canonical embedding) -------------------------------
 * Slots: num_slots = N/2 complex values z_j = m(zeta^(e_j)), zeta =
 * exp(i pi / N), e_j = rot_group[j] (5^j mod 2N, or 3^-j mod 2N for the
 * generator-3 slot order; fh/ckks_tables.h). The special FFT evaluates at
 * fh_ckks_fft_exponent(e_j) (= e_j when e_j = 1 mod 4, else 2N - e_j) and
 * slots with e_j = 3 mod 4 are conjugated (fh_ckks_slot_conjugated) after
 * the evaluation and before the interpolation, so that every e_j is served.
 * Encoding takes `nslots_in` <= N/2 input values per group
 * (complex pairs of doubles, or reals when !in_complex; missing slots are
 * zero), computes the real polynomial m with m(zeta^(5^j)) = z_j by the
 * inverse special FFT, multiplies by `scale`, rounds to the nearest integer
 * and reduces into each row's prime (exactly, for any finite magnitude).
 * Coefficient i of m is Re(w_i) and coefficient i + N/2 is Im(w_i), where
 * w is the special-FFT vector. `work` is scratch of N doubles per group.
 * rot_group[j] = e_j (N/2 entries); ksi[2k], ksi[2k+1] = cos, sin of
 * 2 pi k / 2N for k <= 2N. */
typedef struct fh_ckks_encode_args {
  uint64_t *out;
  const double *in;
  double *work;
  int64_t out_gs, in_gs, work_gs;
  int64_t ngroups;
  int64_t nslots_in;
  int32_t in_complex;
  int32_t nlimbs, log_n;
  double scale;
  const fh_ckks_prime *primes;
  const uint64_t *rot_group;
  const double *ksi;
  int32_t prime[FH_CKKS_MAX_PRIMES];
} fh_ckks_encode_args;

/* The special FFT's evaluation exponent for slot exponent e (m2 = 2N), and
 * whether that slot is the conjugate of the FFT's value (see above). */
FH_HD uint64_t fh_ckks_fft_exponent(uint64_t e, uint64_t m2) { return (e & 3) == 3 ? m2 - e : e; }
FH_HD int fh_ckks_slot_conjugated(uint64_t e) { return (e & 3) == 3; }

/* Decoding: the rows of each group must be the context's last nlimbs Q
 * primes in order (prime[l] == nq - nlimbs + l, the active rows of a level):
 * each coefficient is reconstructed exactly by Garner's mixed-radix CRT
 * (taking the primes from the last one down, so that every level's rows
 * are a prefix of that order) into a big integer, lifted to the centered
 * range (-Q/2, Q/2], converted to double and divided by `scale`; the special
 * FFT then evaluates the slots. Output: complex pairs (out_complex) or the
 * real parts. `garner` is the context's Garner table (fh/ckks_tables.h);
 * `work` is scratch of 2N doubles per group (the CPU uses the first N, the
 * CUDA kernels both halves). */
typedef struct fh_ckks_decode_args {
  double *out;
  const uint64_t *in;
  double *work;
  int64_t out_gs, in_gs, work_gs;
  int64_t ngroups;
  int32_t out_complex;
  int32_t nlimbs, log_n;
  int32_t nq; /* number of Q primes in the context (row length of the Garner table) */
  double scale;
  /* non-NULL: the coefficients are given as N float64 values per group
   * (group stride in_gs) instead of residues (`in`, nlimbs, prime and garner
   * unused), e.g. an approximate_coefficients plaintext */
  const double *in_real;
  const fh_ckks_prime *primes;
  const uint64_t *rot_group;
  const double *ksi;
  const uint64_t *garner;
  int32_t prime[FH_CKKS_MAX_PRIMES];
} fh_ckks_decode_args;

#ifdef __cplusplus
}
#endif
#endif
