/* Internal declarations shared by the CKKS engine files (ckks_engine.c,
 * ckks_eval.c). Not part of the engine API. */
#ifndef FH_CKKS_INTERNAL_H
#define FH_CKKS_INTERNAL_H

#include "fh/ckks_engine.h"
#include "fh/ckks_poly.h"
#include "fh/ckks_random.h"

struct fh_ckks_engine {
  fh_refcount rc;
  fh_ckks_context *ctx; /* one reference */
  fh_device dev;
  fh_ckks_tables *tb; /* borrowed from the context's extension slot (lives as long as ctx) */
  fh_ckks_rng *rng; /* owned; seeded or not (fh_ckks_engine_is_seeded asks it) */
  /* keys the engine created and remembers (one reference each) */
  fh_value **rot_keys;
  int nrot, caprot;
  fh_value *conj_key;
};

/* ---- validation (each raises the documented error and returns it) -------- */
fh_status fh__ckks_need_type(const char *op, const char *arg, const fh_value *v, fh_value_type t);
/* Context and device of v are the engine's. */
fh_status fh__ckks_need_engine(const fh_ckks_engine *e, const char *op, const char *arg, const fh_value *v);
/* A ciphertext of this engine in basis Q (contiguity is handled by callers). */
fh_status fh__ckks_need_ct(const fh_ckks_engine *e, const char *op, const char *arg, const fh_value *v);
/* A key of `type` made by fh_ckks_create_*: level 0, the basis given, NTT domain. */
fh_status fh__ckks_need_key(const fh_ckks_engine *e, const char *op, const char *arg, const fh_value *v,
                            fh_value_type type, fh_modulus_basis basis);
bool fh__ckks_scales_match(double a, double b);

/* ---- geometry ------------------------------------------------------------- */
typedef struct fh__ckks_geo {
  int comps;     /* ciphertexts: components; plaintexts: 1 */
  int nbatch;    /* batch axes */
  int64_t batch[FH_MAX_DIMS];
  int64_t B;     /* product of the batch extents (1 when unbatched) */
  int la;        /* active limb rows */
  int level;
} fh__ckks_geo;
/* Geometry of a ciphertext or an RNS plaintext. */
void fh__ckks_geo_of(const fh_value *v, fh__ckks_geo *g);
bool fh__ckks_same_batch(const fh__ckks_geo *a, const fh__ckks_geo *b);
/* prime ids of the active Q rows at `level` into p; returns their count. */
int fh__ckks_active_primes(const fh_ckks_engine *e, int level, int32_t *p);
/* prime ids of an RNS value's rows (its level's active Q rows, then every P row for
 * basis QP) into p; returns their count. */
int fh__ckks_value_primes(const fh_ckks_engine *e, const fh_value *v, int32_t *p);
/* New contiguous uint64 tensor [lead..., *batch, la, N] (lead: 0 or 1 extent). */
fh_status fh__ckks_alloc_poly(fh_ckks_engine *e, fh__ckks_launcher *L, int lead, const fh__ckks_geo *g, int la,
                              fh_tensor **out);

/* ---- randomness ------------------------------------------------------------- */
/* Refuse (CudaGraphCaptureError, stage "capture") while a capture is active. */
fh_status fh__ckks_no_capture(const fh_ckks_engine *e, const char *op);

/* ---- key switching ------------------------------------------------------------ */
/* The conversion sources of a key switch made by the INTT before it (tables with
 * fold_sources): ks_source_scale sets t->scale for t's first limbs, the la active Q rows at
 * `level` or with moddown a mod-down's np P rows (fh__ckks_source_scale_rows), and returns
 * whether it did (false, nothing set, where the tables do not fold). ks_intt submits the
 * INTT of the nlimbs NTT-domain rows `in` (group stride in_gs, G groups; primes prime, those
 * rows) into d (stride d_gs) so, *scaled telling whether d holds sources (pass it on as
 * d_scaled, or a mod-down's prescaled) or coefficients. */
bool fh__ckks_ks_source_scale(const fh_ckks_tables *tb, int level, bool moddown, fh_ckks_ntt_args *t);
fh_status fh__ckks_ks_intt(fh__ckks_launcher *L, int level, bool moddown, uint64_t *d, int64_t d_gs,
                           const uint64_t *in, int64_t in_gs, int64_t G, const int32_t *prime, int nlimbs,
                           bool *scaled);
/* d: coefficient-domain standard rows [G, la, N] (group stride gs_d) over the
 * active Q rows of `level`; d_ntt: the same rows in the NTT domain (same
 * stride) when the caller has them, else NULL; key: contiguous key-switching data
 * [dnum, 2, #Q + #P, N]. Writes u0 + u1 s ~ d s' into out0/out1 (rows
 * [G, la, N] with group stride out_gs), in the NTT domain (ntt_out) or the
 * coefficient domain, adding add0/add1 (same layout as out, may alias out;
 * NULL: nothing added); add_galois > 1 (ntt_out only, N > 2^FH_CKKS_CUDA_ROW_LOG): the
 * addends read through that NTT-domain automorphism (fh_ckks_moddown_args.add_galois, a
 * rotation's sigma(c0) without a launch that writes it), else 0.
 * d_scaled: d's rows are the conversion sources (fh__ckks_ks_intt wrote them with *scaled
 * true; d_ntt is then required), not the coefficients; the words out are the same. */
fh_status fh__ckks_keyswitch(fh_ckks_engine *e, fh__ckks_launcher *L, int level, int64_t G, const uint64_t *d,
                             int64_t gs_d, const uint64_t *d_ntt, bool d_scaled, const fh_tensor *key, bool ntt_out, uint64_t *out0, uint64_t *out1,
                             int64_t out_gs, const uint64_t *add0, const uint64_t *add1, int64_t add_gs,
                             uint64_t add_galois);

/* fh__ckks_keyswitch (NTT-domain result) and a rescale by the first active Q prime in one
 * mod-down (fh_ckks_moddown_args.rescale; N > 2^FH_CKKS_CUDA_ROW_LOG): the la - 1 rows of
 * level + 1 into out0/out1 (group stride out_gs), the same words as fh__ckks_keyswitch then
 * fh_ckks_rescale_to_next_level. d_ntt has its own group stride d_ntt_gs; add0/add1 are
 * required; v0 holds the INTT of their row 0 (component c of group g at v0 + g * v0_gs +
 * c * v0_cs). d_scaled as fh__ckks_keyswitch. */
fh_status fh__ckks_keyswitch_rescale(fh_ckks_engine *e, fh__ckks_launcher *L, int level, int64_t G,
                                     const uint64_t *d, int64_t gs_d, const uint64_t *d_ntt, int64_t d_ntt_gs,
                                     bool d_scaled, const fh_tensor *key, uint64_t *out0, uint64_t *out1, int64_t out_gs,
                                     const uint64_t *add0, const uint64_t *add1, int64_t add_gs, const uint64_t *v0,
                                     int64_t v0_gs, int64_t v0_cs);

/* fh__ckks_keyswitch of d = a1 b1 (the tensor product's third component; NTT-domain rows at
 * d_ntt) with a0 b0 and a0 b1 + a1 b0 added, formed by the mod-down from the operands' words
 * (fh_ckks_moddown_args.add_b; N > 2^FH_CKKS_CUDA_ROW_LOG): multiply fused with relinearize.
 * a0/a1 and b0/b1 are the two ciphertexts' components (group stride ab_gs). v0 not NULL:
 * with the rescale, as fh__ckks_keyswitch_rescale (v0: the INTT of a0 b0's and
 * a0 b1 + a1 b0's row 0). d_scaled as fh__ckks_keyswitch. */
fh_status fh__ckks_keyswitch_tensor(fh_ckks_engine *e, fh__ckks_launcher *L, int level, int64_t G, const uint64_t *d,
                                    int64_t gs_d, const uint64_t *d_ntt, int64_t d_ntt_gs, bool d_scaled,
                                    const fh_tensor *key,
                                    uint64_t *out0, uint64_t *out1, int64_t out_gs, const uint64_t *a0,
                                    const uint64_t *a1, const uint64_t *b0, const uint64_t *b1, int64_t ab_gs,
                                    const uint64_t *v0, int64_t v0_gs, int64_t v0_cs);

/* Hoisted key switches of automorphisms of one polynomial d (as above): begin runs the
 * mod-up and the NTT of the extended digits once and keeps them (h->D, [G][ndig][lk][N])
 * with the scratch of a mod-down (h->W, h->T), without `steps` an accumulator (h->acc
 * [G][2][lk][N], for a caller's own inner products), with `steps` the CPU's permuted copy
 * (h->Dr) in h (new references, in L's uses); steps (fh__ckks_hoist_inner_steps into the
 * caller's accumulators, then fh__ckks_hoist_moddown_of each) switch the automorphism
 * X -> X^galois of d with a key into out0, out1 (+ add0 on the first component), the same
 * words as fh__ckks_keyswitch of that automorphism of d; end releases h. A caller adds
 * the steps' own tensors (keys, accumulators, outputs, add0) to L's uses around them.
 * d_ntt (NULL: none): d's rows in the NTT domain (stride gs_d), taken for the digits' own
 * rows where the tables fold (fh_ckks_tables.fold_sources); d_scaled: d holds the
 * conversion sources (fh__ckks_ks_intt with *scaled true; d_ntt then required). */
typedef struct fh__ckks_ks_geo {
  int nq, np, dnum, la, lk, j0, ndig;
  int64_t n;
  int32_t qp[FH_CKKS_MAX_PRIMES]; /* active Q rows, then the P rows */
} fh__ckks_ks_geo;
typedef struct fh__ckks_hoist {
  fh__ckks_ks_geo k;
  int level;
  int64_t G;
  fh_tensor *D, *Dr, *acc, *W, *T; /* Dr: the CPU's permuted copy of D (NULL on CUDA); acc: NULL with steps */
  fh_tensor *S;                     /* the mod-up's scaled sources (CUDA, N > 2^11), else NULL */
  bool in_place;                    /* steps read D through their automorphism (CUDA) */
} fh__ckks_hoist;
fh_status fh__ckks_hoist_begin(fh_ckks_engine *e, fh__ckks_launcher *L, int level, int64_t G, const uint64_t *d,
                               int64_t gs_d, const uint64_t *d_ntt, bool d_scaled, bool steps, fh__ckks_hoist *h);
/* The mod-down of h->acc (NTT domain, [G][2][lk][N]) into out0, out1 (NTT domain, group
 * stride out_gs) at h's level. */
fh_status fh__ckks_hoist_moddown(fh_ckks_engine *e, fh__ckks_launcher *L, fh__ckks_hoist *h, uint64_t *out0,
                                 uint64_t *out1, int64_t out_gs);
/* The same mod-down fused with a rescale by the level's first prime (FH_K_CKKS_MODDOWN's
 * rescale, no addend; N > 2^FH_CKKS_CUDA_ROW_LOG): out0, out1 get the la - 1 rows of the
 * next level, word for word the rescale of fh__ckks_hoist_moddown's result. */
fh_status fh__ckks_hoist_moddown_rescale(fh_ckks_engine *e, fh__ckks_launcher *L, fh__ckks_hoist *h, uint64_t *out0,
                                         uint64_t *out1, int64_t out_gs);
/* The inner products of nsteps (1 to FH_CKKS_KS_MAX_STEPS) hoisted steps of a hoist begun with
 * steps: step s's automorphism (galois[s]) of the extended digits with key[s] (a rotation key's
 * data) into acc[s] (NTT domain, [G][2][lk][N], the caller's; in L's uses, as the keys): on
 * CUDA one launch (FH_K_CKKS_KS_INNER's steps: each digit row read from memory once for all
 * steps), on the CPU a permuted copy and a launch a step. The same words either way. */
fh_status fh__ckks_hoist_inner_steps(fh_ckks_engine *e, fh__ckks_launcher *L, fh__ckks_hoist *h, int nsteps,
                                     const uint64_t *galois, const fh_tensor *const *key, uint64_t *const *acc);
/* The mod-down of one step's inner product acc (fh__ckks_hoist_inner_steps) into out0, out1
 * (NTT domain when ntt_out, else coefficients; group stride out_gs), add0 (same domain, group
 * stride add_gs; NULL: none) added to the first component; add_galois > 1 (ntt_out only, N >
 * 2^FH_CKKS_CUDA_ROW_LOG): add0 read through that NTT-domain automorphism
 * (fh_ckks_moddown_args.add_galois), else 0. */
fh_status fh__ckks_hoist_moddown_of(fh_ckks_engine *e, fh__ckks_launcher *L, fh__ckks_hoist *h, uint64_t *acc,
                                    bool ntt_out, uint64_t *out0, uint64_t *out1, int64_t out_gs,
                                    const uint64_t *add0, int64_t add_gs, uint64_t add_galois);
/* The NTT-domain mod-downs of nsteps steps' inner products at once, acc [nsteps][G][2][lk][N]
 * (contiguous, the steps' accumulators in turn): the INTT of every step's P rows in one
 * launch, then each step's mod-down into out[s] (components out[s] and out[s] + out_cs, group
 * stride out_gs) with add0 read through add_galois[s] (as fh__ckks_hoist_moddown_of; N >
 * 2^FH_CKKS_CUDA_ROW_LOG). The same words as a fh__ckks_hoist_moddown_of a step. */
fh_status fh__ckks_hoist_moddown_steps(fh_ckks_engine *e, fh__ckks_launcher *L, fh__ckks_hoist *h, int nsteps,
                                       uint64_t *acc, uint64_t *const *out, int64_t out_cs, int64_t out_gs,
                                       const uint64_t *add0, int64_t add_gs, const uint64_t *add_galois);
void fh__ckks_hoist_end(fh__ckks_hoist *h);

/* The arguments of a mod-down (fh_ckks_moddown_args) from the nsrc coefficient-domain rows of
 * each of the ngroups groups of w (primes src0.., group stride w_gs; centred conversion with the
 * table `consts`, scratch t of ndst rows a group) to the ndst Q rows from prime dst0 on, scaled by
 * c_const[i]: (a - conv) c_const, a with group stride a_gs. The outputs (out, add) are the
 * caller's to set. */
void fh__ckks_moddown_args(const fh_ckks_tables *tb, fh_ckks_moddown_args *m, uint64_t *w, int64_t w_gs,
                           int64_t ngroups, int src0, int nsrc, int dst0, int ndst, const uint64_t *consts,
                           const uint64_t *c_const, uint64_t *t, const uint64_t *a, int64_t a_gs);

/* A key-switching key's digits from k->j0 on (the key's data, contiguous): the first digit's
 * address, the digit stride (ds) and the component stride (cs), in words. */
const uint64_t *fh__ckks_key_digits(const fh__ckks_ks_geo *k, const fh_tensor *key, int64_t *ds, int64_t *cs);

/* Galois element of a rotation by r (X -> X^(5^-r mod num_slots)). */
uint64_t fh__ckks_galois_of_step(const fh_ckks_engine *e, int64_t r);

#endif
