/* CKKS evaluator (fh/ckks_engine.h): every operation checks the exact state
 * of its arguments first, then allocates its result, then launches. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckks_internal.h"

/* ---- helpers ------------------------------------------------------------------------ */
static fh_status level_mismatch(const char *op, const char *a, int la, const char *b, int lb) {
  return fh_error_set(FH_ERR_STATE, "%s: level mismatch: %s is at level %d, %s at level %d", op, a, la, b, lb);
}
static fh_status scale_mismatch(const char *op, const char *a, double sa, const char *b, double sb) {
  return fh_error_set(FH_ERR_STATE, "%s: scale mismatch: %s has scale %.17g, %s has %.17g (relative tolerance %g)", op,
                      a, sa, b, sb, FH_CKKS_SCALE_RTOL);
}
static fh_status domain_mismatch(const char *op, const char *a, int da, const char *b, int db) {
  return fh_error_set(FH_ERR_STATE, "%s: polynomial_domain mismatch: %s is %s, %s is %s", op, a,
                      fh_domain_name((fh_polynomial_domain)da), b, fh_domain_name((fh_polynomial_domain)db));
}
static fh_status need_domain(const char *op, const char *arg, const fh_value *v, fh_polynomial_domain d,
                             const char *hint) {
  if (v->state.polynomial_domain == (int)d) return FH_OK;
  return fh_error_set(FH_ERR_STATE, "%s: polynomial_domain of %s is %s, expected %s%s", op, arg,
                      fh_domain_name((fh_polynomial_domain)v->state.polynomial_domain), fh_domain_name(d), hint);
}
static fh_status need_components(const char *op, const char *arg, const fh_value *v, int n) {
  if (v->state.num_components == n) return FH_OK;
  return fh_error_set(FH_ERR_STATE, "%s: num_components of %s is %d, expected %d", op, arg, v->state.num_components, n);
}
static fh_status batch_mismatch(const char *op) {
  return fh_error_set(FH_ERR_VALUE, "%s: the operands' batch shapes differ", op);
}

static void release_all(fh_tensor **ts, int n) {
  for (int i = 0; i < n; ++i)
    if (ts[i]) fh_tensor_release(ts[i]);
}

/* contiguous data of a value, added to the launcher's uses */
static fh_status data_of(fh__ckks_launcher *L, const fh_value *v, fh_tensor **out) {
  fh_status st = fh_tensor_contiguous(fh_value_data(v), out);
  if (st == FH_OK) fh__ckks_use(L, *out);
  return st;
}

static fh_status wrap_ct(fh_ckks_engine *e, fh_tensor *data, int level, double scale, int domain, fh_value **out) {
  return fh_ciphertext_new(fh_ckks_engine_context(e), data, level, scale, FH_BASIS_Q, (fh_polynomial_domain)domain,
                           out);
}

/* ---- add / sub / negate ---------------------------------------------------------------- */
static fh_status ct_binop(fh_ckks_engine *e, const char *op, int ewop, const fh_value *a, const fh_value *b,
                          fh_value **out) {
  fh_status st;
  if ((st = fh__ckks_need_ct(e, op, "a", a)) || (st = fh__ckks_need_ct(e, op, "b", b))) return st;
  if (a->state.num_components != b->state.num_components)
    return fh_error_set(FH_ERR_STATE, "%s: num_components mismatch: a has %d, b has %d", op, a->state.num_components,
                        b->state.num_components);
  if (a->state.polynomial_domain != b->state.polynomial_domain)
    return domain_mismatch(op, "a", a->state.polynomial_domain, "b", b->state.polynomial_domain);
  if (a->state.level != b->state.level) return level_mismatch(op, "a", a->state.level, "b", b->state.level);
  if (!fh__ckks_scales_match(a->state.scale, b->state.scale))
    return scale_mismatch(op, "a", a->state.scale, "b", b->state.scale);
  fh__ckks_geo ga, gb;
  fh__ckks_geo_of(a, &ga);
  fh__ckks_geo_of(b, &gb);
  if (!fh__ckks_same_batch(&ga, &gb)) return batch_mismatch(op);
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e))) != FH_OK) return st;
  fh_tensor *ts[3] = {NULL, NULL, NULL};
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, ga.level, p);
  int64_t gs = (int64_t)ga.la * fh_ckks_engine_context(e)->ring_degree;
  if ((st = data_of(&L, a, &ts[0])) == FH_OK && (st = data_of(&L, b, &ts[1])) == FH_OK &&
      (st = fh__ckks_alloc_poly(e, &L, ga.comps, &ga, ga.la, &ts[2])) == FH_OK)
    st = fh__ckks_ew(&L, ewop, ga.comps * ga.B, p, ga.la, fh__ckks_ptr(ts[2]), gs, fh__ckks_ptr(ts[0]), gs,
            fh__ckks_ptr(ts[1]), gs);
  if (st == FH_OK) st = wrap_ct(e, ts[2], ga.level, a->state.scale, a->state.polynomial_domain, out);
  release_all(ts, 3);
  return st;
}

fh_status fh_ckks_add(fh_ckks_engine *e, const fh_value *a, const fh_value *b, fh_value **out) {
  return ct_binop(e, "add", FH_CKKS_EW_ADD, a, b, out);
}
fh_status fh_ckks_sub(fh_ckks_engine *e, const fh_value *a, const fh_value *b, fh_value **out) {
  return ct_binop(e, "sub", FH_CKKS_EW_SUB, a, b, out);
}

fh_status fh_ckks_negate(fh_ckks_engine *e, const fh_value *a, fh_value **out) {
  const char *op = "negate";
  fh_status st;
  if ((st = fh__ckks_need_ct(e, op, "a", a)) != FH_OK) return st;
  fh__ckks_geo g;
  fh__ckks_geo_of(a, &g);
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e))) != FH_OK) return st;
  fh_tensor *ts[2] = {NULL, NULL};
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, g.level, p);
  int64_t gs = (int64_t)g.la * fh_ckks_engine_context(e)->ring_degree;
  if ((st = data_of(&L, a, &ts[0])) == FH_OK && (st = fh__ckks_alloc_poly(e, &L, g.comps, &g, g.la, &ts[1])) == FH_OK)
    st = fh__ckks_ew(&L, FH_CKKS_EW_NEG, g.comps * g.B, p, g.la,
                     fh__ckks_ptr(ts[1]), gs, fh__ckks_ptr(ts[0]), gs, NULL, 0);
  if (st == FH_OK) st = wrap_ct(e, ts[1], g.level, a->state.scale, a->state.polynomial_domain, out);
  release_all(ts, 2);
  return st;
}

/* ---- plaintext operands ------------------------------------------------------------------ */
/* An RNS plaintext in `domain` for ct's operation: a slots plaintext is
 * encoded at its own level and scale into that domain; an RNS plaintext is
 * checked (basis Q, residue coupled to its domain) and retained. */
static fh_status rns_operand(fh_ckks_engine *e, const char *op, const fh_value *pt, int domain, fh_value **out) {
  fh_status st;
  if ((st = fh__ckks_need_type(op, "pt", pt, FH_PLAINTEXT)) != FH_OK) return st;
  if (pt->state.representation != FH_REPR_RNS) { /* slots or coefficients: to RNS first */
    fh_value *enc = NULL;
    if ((st = fh_ckks_encode_plaintext(e, pt, &enc)) != FH_OK) return st;
    if (domain == FH_DOMAIN_NTT) {
      st = fh_ckks_to_ntt(e, enc, out);
      fh_value_release(enc);
      return st;
    }
    *out = enc;
    return FH_OK;
  }
  if ((st = fh__ckks_need_engine(e, op, "pt", pt)) != FH_OK) return st;
  if (pt->state.modulus_basis != FH_BASIS_Q)
    return fh_error_set(FH_ERR_STATE, "%s: modulus_basis of pt is %s, expected Q", op,
                        fh_basis_name((fh_modulus_basis)pt->state.modulus_basis));
  if (pt->state.polynomial_domain == FH_DOMAIN_COEFFICIENT && pt->state.residue_representation != FH_RESIDUE_STANDARD)
    return fh_error_set(FH_ERR_STATE,
                        "%s: residue_representation of the coefficient-domain pt is montgomery, expected standard", op);
  fh_value_retain((fh_value *)pt);
  *out = (fh_value *)pt;
  return FH_OK;
}

static fh_status pt_binop(fh_ckks_engine *e, const char *op, int ewop, const fh_value *ct, const fh_value *pt,
                          fh_value **out) {
  fh_status st;
  if ((st = fh__ckks_need_ct(e, op, "ct", ct)) != FH_OK) return st;
  fh_value *rp = NULL;
  if ((st = rns_operand(e, op, pt, ct->state.polynomial_domain, &rp)) != FH_OK) return st;
  fh__ckks_geo gc, gp;
  fh__ckks_geo_of(ct, &gc);
  fh__ckks_geo_of(rp, &gp);
  if (rp->state.level != ct->state.level) st = level_mismatch(op, "ct", ct->state.level, "pt", rp->state.level);
  else if (!fh__ckks_scales_match(ct->state.scale, rp->state.scale))
    st = scale_mismatch(op, "ct", ct->state.scale, "pt", rp->state.scale);
  else if (rp->state.polynomial_domain != ct->state.polynomial_domain)
    st = domain_mismatch(op, "ct", ct->state.polynomial_domain, "pt", rp->state.polynomial_domain);
  else if (gp.nbatch != 0 && !fh__ckks_same_batch(&gc, &gp))
    st = batch_mismatch(op);
  fh__ckks_launcher L;
  if (st == FH_OK) st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e));
  fh_tensor *ts[3] = {NULL, NULL, NULL};
  if (st == FH_OK) {
    int32_t p[FH_CKKS_MAX_PRIMES];
    fh__ckks_active_primes(e, gc.level, p);
    int64_t gs = (int64_t)gc.la * fh_ckks_engine_context(e)->ring_degree;
    if ((st = data_of(&L, ct, &ts[0])) == FH_OK && (st = data_of(&L, rp, &ts[1])) == FH_OK &&
        (st = fh__ckks_alloc_poly(e, &L, gc.comps, &gc, gc.la, &ts[2])) == FH_OK) {
      uint64_t *o = fh__ckks_ptr(ts[2]);
      const uint64_t *c = fh__ckks_ptr(ts[0]);
      st = fh__ckks_ew(&L, ewop, gc.B, p, gc.la, o, gs, c, gs, fh__ckks_ptr(ts[1]), gp.nbatch ? gs : 0);
      if (st == FH_OK)
        st = fh__ckks_ew(&L, FH_CKKS_EW_COPY, (gc.comps - 1) * gc.B, p, gc.la,
                         o + gc.B * gs, gs, c + gc.B * gs, gs, NULL, 0);
    }
  }
  if (st == FH_OK) st = wrap_ct(e, ts[2], gc.level, ct->state.scale, ct->state.polynomial_domain, out);
  release_all(ts, 3);
  fh_value_release(rp);
  return st;
}

fh_status fh_ckks_add_plaintext(fh_ckks_engine *e, const fh_value *ct, const fh_value *pt, fh_value **out) {
  return pt_binop(e, "add_plaintext", FH_CKKS_EW_ADD, ct, pt, out);
}
fh_status fh_ckks_sub_plaintext(fh_ckks_engine *e, const fh_value *ct, const fh_value *pt, fh_value **out) {
  return pt_binop(e, "sub_plaintext", FH_CKKS_EW_SUB, ct, pt, out);
}

/* ---- multiplication ------------------------------------------------------------------------ */
/* multiply's operands: NTT-domain two-component ciphertexts of e at one level and batch
 * whose product's scale is finite; *ga their geometry, *scale the product's */
static fh_status multiply_check(fh_ckks_engine *e, const char *op, const fh_value *a, const fh_value *b,
                                fh__ckks_geo *ga, double *scale) {
  const char *hint = " (convert with coefficient_domain_to_ntt_domain first)";
  fh_status st;
  if ((st = fh__ckks_need_ct(e, op, "a", a)) || (st = fh__ckks_need_ct(e, op, "b", b)) ||
      (st = need_domain(op, "a", a, FH_DOMAIN_NTT, hint)) || (st = need_domain(op, "b", b, FH_DOMAIN_NTT, hint)) ||
      (st = need_components(op, "a", a, 2)) || (st = need_components(op, "b", b, 2)))
    return st;
  if (a->state.level != b->state.level) return level_mismatch(op, "a", a->state.level, "b", b->state.level);
  fh__ckks_geo gb;
  fh__ckks_geo_of(a, ga);
  fh__ckks_geo_of(b, &gb);
  if (!fh__ckks_same_batch(ga, &gb)) return batch_mismatch(op);
  *scale = a->state.scale * b->state.scale;
  if (!isfinite(*scale))
    return fh_error_set(FH_ERR_STATE, "%s: scale of the product overflows (%.17g x %.17g)", op, a->state.scale,
                        b->state.scale);
  return FH_OK;
}

fh_status fh_ckks_multiply(fh_ckks_engine *e, const fh_value *a, const fh_value *b, fh_value **out) {
  const char *op = "multiply";
  fh_status st;
  fh__ckks_geo ga;
  double scale = 0.0;
  if ((st = multiply_check(e, op, a, b, &ga, &scale))) return st;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e))) != FH_OK) return st;
  fh_tensor *ts[3] = {NULL, NULL, NULL};
  int64_t gs = (int64_t)ga.la * fh_ckks_engine_context(e)->ring_degree, cs = ga.B * gs;
  if ((st = data_of(&L, a, &ts[0])) == FH_OK && (st = data_of(&L, b, &ts[1])) == FH_OK &&
      (st = fh__ckks_alloc_poly(e, &L, 3, &ga, ga.la, &ts[2])) == FH_OK) {
    fh_ckks_tensor_args t;
    memset(&t, 0, sizeof t);
    t.out = fh__ckks_ptr(ts[2]);
    t.a = fh__ckks_ptr(ts[0]);
    t.b = fh__ckks_ptr(ts[1]);
    t.out_cs = t.a_cs = t.b_cs = cs;
    t.out_gs = t.a_gs = t.b_gs = gs;
    t.ngroups = ga.B;
    t.nlimbs = ga.la;
    t.log_n = fh_ckks_engine_context(e)->log_n;
    t.primes = fh_ckks_engine_tables(e)->primes_dev;
    fh__ckks_active_primes(e, ga.level, t.prime);
    st = fh__ckks_submit(&L, FH_K_CKKS_TENSOR, &t, sizeof t);
  }
  if (st == FH_OK) st = wrap_ct(e, ts[2], ga.level, scale, FH_DOMAIN_NTT, out);
  release_all(ts, 3);
  return st;
}

static fh_status rescale_room(fh_ckks_engine *e, const char *op, const char *arg, const fh_value *ct);

/* multiply fused with relinearize (and the rescale): for N > 2^FH_CKKS_CUDA_ROW_LOG the tensor
 * product is never written. One INTT launch forms a1 b1's rows (and with the rescale a0 b0's
 * and a0 b1 + a1 b0's row 0) from the operands' words (fh_ckks_ntt_args.in_b) and keeps a1
 * b1's NTT-domain rows (the key switch's own digit rows); the mod-down adds a0 b0 and a0 b1
 * + a1 b0 formed from the operands' words (fh_ckks_moddown_args.add_b). The same words as
 * multiply, then relinearize (with rescale = true). Smaller rings: the calls in turn. */
fh_status fh_ckks_multiply_relinearize(fh_ckks_engine *e, const fh_value *a, const fh_value *b, const fh_value *rlk,
                                       bool rescale, fh_value **out) {
  const char *op = "multiply";
  fh_status st;
  fh__ckks_geo g;
  double scale = 0.0;
  if ((st = multiply_check(e, op, a, b, &g, &scale)) ||
      (st = fh__ckks_need_key(e, op, "relinearize", rlk, FH_RELINEARIZATION_KEY, FH_BASIS_QP)) ||
      (rescale && (st = rescale_room(e, op, "a", a))))
    return st;
  fh_ckks_context *ctx = fh_ckks_engine_context(e);
  const fh_ckks_tables *tb = fh_ckks_engine_tables(e);
  if (tb->log_n <= FH_CKKS_CUDA_ROW_LOG) {
    fh_value *m = NULL;
    st = fh_ckks_multiply(e, a, b, &m);
    if (st == FH_OK) st = rescale ? fh_ckks_relinearize_rescale(e, m, rlk, out) : fh_ckks_relinearize(e, m, rlk, out);
    if (m) fh_value_release(m);
    return st;
  }
  const int la = g.la, lo = rescale ? la - 1 : la, nr = rescale ? la + 2 : la;
  const int64_t n = ctx->ring_degree, gs = (int64_t)la * n, cs = g.B * gs, dgs = (int64_t)nr * n;
  const int64_t ogs = (int64_t)lo * n, ocs = g.B * ogs;
  if (rescale) scale /= (double)ctx->primes[g.level];
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e))) != FH_OK) return st;
  fh_tensor *ts[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, g.level, p);
  int64_t dshape[3] = {g.B, nr, n}, kshape[3] = {g.B, la, n};
  if ((st = data_of(&L, a, &ts[0])) == FH_OK && (st = data_of(&L, b, &ts[1])) == FH_OK &&
      (st = data_of(&L, rlk, &ts[2])) == FH_OK && (st = fh__ckks_alloc_poly(e, &L, 2, &g, lo, &ts[3])) == FH_OK &&
      (st = fh__ckks_temp(&L, 3, dshape, &ts[4])) == FH_OK && (st = fh__ckks_temp(&L, 3, kshape, &ts[5])) == FH_OK) {
    const uint64_t *A = fh__ckks_ptr(ts[0]), *B = fh__ckks_ptr(ts[1]);
    uint64_t *d = fh__ckks_ptr(ts[4]), *keep = fh__ckks_ptr(ts[5]), *o = fh__ckks_ptr(ts[3]);
    /* one INTT: a1 b1's rows, then (rescale) row 0 of a0 b0 and of a0 b1 + a1 b0 */
    int32_t prime[FH_CKKS_MAX_PRIMES], in_row[FH_CKKS_MAX_PRIMES], out_row[FH_CKKS_MAX_PRIMES];
    for (int r = 0; r < nr; ++r) {
      prime[r] = r < la ? p[r] : p[0];
      in_row[r] = r < la ? r : 0;
      out_row[r] = r;
    }
    fh_ckks_ntt_args t;
    fh__ckks_ntt_rows_args(&L, &t, d, dgs, A, gs, g.B, prime, nr, in_row, out_row);
    t.in_cs = cs;
    t.in_b = B;
    t.in_b_gs = gs;
    t.in_b_cs = cs;
    t.keep = keep;
    t.keep_gs = gs;
    t.nkeep = la;
    for (int r = 0; r < nr; ++r)
      t.prod[r] = (int8_t)(r < la ? FH_CKKS_PROD_11 : r == la ? FH_CKKS_PROD_00 : FH_CKKS_PROD_X);
    /* a1 b1's rows as the key switch's conversion sources where the tables fold them (v0's
     * rows stay coefficients) */
    const bool scaled = fh__ckks_ks_source_scale(tb, g.level, false, &t);
    st = fh__ckks_submit(&L, FH_K_CKKS_INTT, &t, sizeof t);
    if (st == FH_OK)
      st = fh__ckks_keyswitch_tensor(e, &L, g.level, g.B, d, dgs, keep, gs, scaled, ts[2], o, o + ocs, ogs, A,
                                     A + cs, B, B + cs, gs, rescale ? d + (int64_t)la * n : NULL, dgs, n);
  }
  if (st == FH_OK) st = wrap_ct(e, ts[3], rescale ? g.level + 1 : g.level, scale, FH_DOMAIN_NTT, out);
  release_all(ts, 6);
  return st;
}

/* relinearize's operands: a three-component ciphertext of the engine and its relinearization key */
static fh_status relin_check(fh_ckks_engine *e, const char *op, const fh_value *ct, const fh_value *rlk) {
  fh_status st;
  if ((st = fh__ckks_need_ct(e, op, "ct", ct)) || (st = need_components(op, "ct", ct, 3)) ||
      (st = fh__ckks_need_key(e, op, "rlk", rlk, FH_RELINEARIZATION_KEY, FH_BASIS_QP)))
    return st;
  return FH_OK;
}

fh_status fh_ckks_relinearize(fh_ckks_engine *e, const fh_value *ct, const fh_value *rlk, fh_value **out) {
  const char *op = "relinearize";
  fh_status st;
  if ((st = relin_check(e, op, ct, rlk))) return st;
  fh__ckks_geo g;
  fh__ckks_geo_of(ct, &g);
  bool ntt = ct->state.polynomial_domain == FH_DOMAIN_NTT;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e))) != FH_OK) return st;
  fh_tensor *ts[4] = {NULL, NULL, NULL, NULL};
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, g.level, p);
  int64_t gs = (int64_t)g.la * fh_ckks_engine_context(e)->ring_degree, cs = g.B * gs;
  if ((st = data_of(&L, ct, &ts[0])) == FH_OK && (st = data_of(&L, rlk, &ts[1])) == FH_OK &&
      (st = fh__ckks_alloc_poly(e, &L, 2, &g, g.la, &ts[2])) == FH_OK) {
    const uint64_t *c = fh__ckks_ptr(ts[0]), *d = c + 2 * cs, *d_ntt = NULL;
    bool scaled = false;
    if (ntt && (st = fh__ckks_alloc_poly(e, &L, 0, &g, g.la, &ts[3])) == FH_OK) {
      st = fh__ckks_ks_intt(&L, g.level, false, fh__ckks_ptr(ts[3]), gs, d, gs, g.B, p, g.la, &scaled);
      d_ntt = d;
      d = fh__ckks_ptr(ts[3]);
    }
    uint64_t *o = fh__ckks_ptr(ts[2]);
    if (st == FH_OK)
      st = fh__ckks_keyswitch(e, &L, g.level, g.B, d, gs, d_ntt, scaled, ts[1], ntt, o, o + cs, gs, c, c + cs, gs, 0);
  }
  if (st == FH_OK) st = wrap_ct(e, ts[2], g.level, ct->state.scale, ct->state.polynomial_domain, out);
  release_all(ts, 4);
  return st;
}

/* The check of an operation's {rescale = true}: ct (argument arg, checked as a ciphertext of
 * e) has a prime to drop, else a StateError naming op. */
static fh_status rescale_room(fh_ckks_engine *e, const char *op, const char *arg, const fh_value *ct) {
  const fh_ckks_context *ctx = fh_ckks_engine_context(e);
  if (ct->state.level < ctx->max_level) return FH_OK;
  return fh_error_set(FH_ERR_STATE,
                      "%s: rescale = true needs a prime to drop, but the level of %s is %d, already max_level %d", op,
                      arg, ct->state.level, ctx->max_level);
}

/* The unfused form of an operation with {rescale = true}: *r (made with status st) rescaled to
 * the next level into *out, then released; the same words as the fused mod-down. (r by
 * address: a call's arguments are evaluated in no set order, so *r is read only here.) */
static fh_status then_rescale(fh_ckks_engine *e, fh_status st, fh_value **r, fh_value **out) {
  if (st != FH_OK) return st;
  st = fh_ckks_rescale_to_next_level(e, *r, out);
  fh_value_release(*r);
  return st;
}

fh_status fh_ckks_relinearize_rescale(fh_ckks_engine *e, const fh_value *ct, const fh_value *rlk, fh_value **out) {
  const char *op = "relinearize";
  fh_status st;
  if ((st = relin_check(e, op, ct, rlk)) || (st = rescale_room(e, op, "ct", ct))) return st;
  fh_ckks_context *ctx = fh_ckks_engine_context(e);
  const fh_ckks_tables *tb = fh_ckks_engine_tables(e);
  if (ct->state.polynomial_domain != FH_DOMAIN_NTT || tb->log_n <= FH_CKKS_CUDA_ROW_LOG) {
    fh_value *r = NULL;
    return then_rescale(e, fh_ckks_relinearize(e, ct, rlk, &r), &r, out);
  }
  fh__ckks_geo g;
  fh__ckks_geo_of(ct, &g);
  const int la = g.la, lo = la - 1;
  const int64_t n = ctx->ring_degree, gs = (int64_t)la * n, cs = g.B * gs, dgs = (int64_t)(la + 2) * n;
  const double scale = ct->state.scale / (double)ctx->primes[g.level];
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e))) != FH_OK) return st;
  fh_tensor *ts[4] = {NULL, NULL, NULL, NULL};
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, g.level, p);
  int64_t dshape[3] = {g.B, la + 2, n};
  if ((st = data_of(&L, ct, &ts[0])) == FH_OK && (st = data_of(&L, rlk, &ts[1])) == FH_OK &&
      (st = fh__ckks_alloc_poly(e, &L, 2, &g, lo, &ts[2])) == FH_OK && (st = fh__ckks_temp(&L, 3, dshape, &ts[3])) == FH_OK) {
    const uint64_t *c = fh__ckks_ptr(ts[0]);
    uint64_t *d = fh__ckks_ptr(ts[3]), *o = fh__ckks_ptr(ts[2]);
    /* one INTT: c2's rows (the key switch's input) and row 0 of c0 and c1 (v0) */
    int32_t prime[FH_CKKS_MAX_PRIMES], in_row[FH_CKKS_MAX_PRIMES], out_row[FH_CKKS_MAX_PRIMES];
    for (int r = 0; r < la + 2; ++r) {
      prime[r] = r < la ? p[r] : p[0];
      in_row[r] = r < la ? (int32_t)(2 * cs / n + r) : r == la ? 0 : (int32_t)(cs / n);
      out_row[r] = r;
    }
    /* c2's rows as the key switch's conversion sources where the tables fold them */
    fh_ckks_ntt_args t;
    fh__ckks_ntt_rows_args(&L, &t, d, dgs, c, gs, g.B, prime, la + 2, in_row, out_row);
    const bool scaled = fh__ckks_ks_source_scale(tb, g.level, false, &t);
    st = fh__ckks_submit(&L, FH_K_CKKS_INTT, &t, sizeof t);
    const int64_t ogs = (int64_t)lo * n, ocs = g.B * ogs;
    if (st == FH_OK)
      st = fh__ckks_keyswitch_rescale(e, &L, g.level, g.B, d, dgs, c + 2 * cs, gs, scaled, ts[1], o, o + ocs, ogs, c,
                                      c + cs, gs, d + (int64_t)la * n, dgs, n);
  }
  if (st == FH_OK) st = wrap_ct(e, ts[2], g.level + 1, scale, FH_DOMAIN_NTT, out);
  release_all(ts, 4);
  return st;
}

/* The element-wise arguments of the coefficient-domain rescale over the lo rows left at `level`
 * (primes p[1..lo]): b is the dropped row's coefficients (drop_half, k[i] = q_level mod q_i), the
 * constants q_level^-1 mod q_i. */
static void rescale_ew_init(fh__ckks_launcher *L, const fh_ckks_tables *tb, fh_ckks_ew_args *f, int64_t G,
                            const int32_t *p, int level, int lo, const uint64_t *b, int64_t b_gs, int nq) {
  fh__ckks_ew_init(L, f, FH_CKKS_EW_RESCALE, G, p + 1, lo);
  f->b = b;
  f->b_gs = b_gs;
  const uint64_t qd = tb->host[level].q;
  f->drop_half = qd / 2;
  for (int i = 0; i < lo; ++i) {
    f->k[i] = qd % tb->host[level + 1 + i].q;
    fh__ckks_ew_set_const(L, f, i, tb->rescale_inv[(size_t)level * nq + level + 1 + i]);
  }
}

fh_status fh_ckks_rescale_to_next_level(fh_ckks_engine *e, const fh_value *ct, fh_value **out) {
  const char *op = "rescale_to_next_level";
  fh_status st;
  if ((st = fh__ckks_need_ct(e, op, "ct", ct)) != FH_OK) return st;
  fh_ckks_context *ctx = fh_ckks_engine_context(e);
  if (ct->state.level >= ctx->max_level)
    return fh_error_set(FH_ERR_STATE, "%s: level of ct is %d, already max_level %d: no prime left to drop", op,
                        ct->state.level, ctx->max_level);
  fh__ckks_geo g;
  fh__ckks_geo_of(ct, &g);
  const fh_ckks_tables *tb = fh_ckks_engine_tables(e);
  bool ntt = ct->state.polynomial_domain == FH_DOMAIN_NTT;
  int level = g.level, la = g.la, lo = la - 1, nq = ctx->num_q;
  int64_t n = ctx->ring_degree, G = (int64_t)g.comps * g.B;
  double scale = ct->state.scale / (double)ctx->primes[level];
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e))) != FH_OK) return st;
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, level, p);
  fh_tensor *ts[4] = {NULL, NULL, NULL, NULL};
  int64_t wshape[2] = {G, n}, tshape[3] = {G, lo, n};
  if ((st = data_of(&L, ct, &ts[0])) == FH_OK && (!ntt || (st = fh__ckks_temp(&L, 2, wshape, &ts[1])) == FH_OK) &&
      (!ntt || (st = fh__ckks_temp(&L, 3, tshape, &ts[2])) == FH_OK) &&
      (st = fh__ckks_alloc_poly(e, &L, g.comps, &g, lo, &ts[3])) == FH_OK) {
    const uint64_t *c = fh__ckks_ptr(ts[0]);
    uint64_t *o = fh__ckks_ptr(ts[3]);
    const int64_t gs = (int64_t)la * n, ogs = (int64_t)lo * n;
    if (!ntt) {
      /* coefficients: one pass, out_i = (c_i - [c_level]_{q_i}) q_level^-1, the
       * dropped row centred and reduced per coefficient (no temporary) */
      fh_ckks_ew_args f;
      rescale_ew_init(&L, tb, &f, G, p, level, lo, c, gs, nq);
      f.out = o;
      f.out_gs = ogs;
      f.a = c + n;
      f.a_gs = gs;
      st = fh__ckks_submit(&L, FH_K_CKKS_EW, &f, sizeof f);
    } else {
      /* NTT domain: the dropped row in coefficients (an INTT into w), then a mod-down by
       * q_level (FH_K_CKKS_MODDOWN): its centred conversion from one prime is the dropped
       * row's centred lift t_i, fused with the NTT of the rows left and with
       * out_i = (c_i - t_i) q_level^-1. Groups pair up as (g, c) there: out[0] and out[1]
       * half a group stride apart make every group its own row of o. */
      uint64_t *w = fh__ckks_ptr(ts[1]), *t = fh__ckks_ptr(ts[2]);
      st = fh__ckks_ntt(&L, false, w, n, c, gs, G, p, 1);
      fh_ckks_moddown_args m;
      fh__ckks_moddown_args(tb, &m, w, n, G, level, 1, level + 1, lo, tb->rescale[level],
                            tb->rescale_inv + (size_t)level * nq + level + 1, t, c + n, gs);
      m.out[0] = o;
      m.out[1] = o + ogs;
      m.out_gs = 2 * ogs;
      if (st == FH_OK) st = fh__ckks_submit(&L, FH_K_CKKS_MODDOWN, &m, sizeof m);
    }
  }
  if (st == FH_OK) st = wrap_ct(e, ts[3], level + 1, scale, ct->state.polynomial_domain, out);
  release_all(ts, 4);
  return st;
}

/* ---- plaintext multiplication -------------------------------------------------------------------- */
fh_status fh_ckks_prepare_plaintext_for_multiplication(fh_ckks_engine *e, const fh_value *pt, fh_value **out) {
  const char *op = "prepare_plaintext_for_multiplication";
  fh_status st;
  if ((st = fh__ckks_need_type(op, "pt", pt, FH_PLAINTEXT)) != FH_OK) return st;
  if (pt->state.representation == FH_REPR_RNS) {
    if ((st = fh__ckks_need_engine(e, op, "pt", pt)) != FH_OK) return st;
    /* basis Q or QP (a linear transform's plaintexts): the result keeps it */
    if (pt->state.polynomial_domain == FH_DOMAIN_NTT) {
      fh_value_retain((fh_value *)pt);
      *out = (fh_value *)pt;
      return FH_OK;
    }
    return fh_ckks_to_ntt(e, pt, out);
  }
  fh_value *enc = NULL;
  if ((st = fh_ckks_encode_plaintext(e, pt, &enc)) != FH_OK) return st;
  st = fh_ckks_to_ntt(e, enc, out);
  fh_value_release(enc);
  return st;
}

fh_status fh_ckks_multiply_plaintext(fh_ckks_engine *e, const fh_value *ct, const fh_value *pt, fh_value **out) {
  const char *op = "multiply_plaintext";
  fh_status st = FH_OK;
  if ((st = fh__ckks_need_ct(e, op, "ct", ct)) ||
      (st = need_domain(op, "ct", ct, FH_DOMAIN_NTT, " (convert with coefficient_domain_to_ntt_domain first)")) ||
      (st = fh__ckks_need_type(op, "pt", pt, FH_PLAINTEXT)))
    return st;
  if (pt->state.representation != FH_REPR_RNS)
    return fh_error_set(FH_ERR_STATE,
                        "%s: representation of pt is %s, expected a prepared rns plaintext (call "
                        "prepare_plaintext_for_multiplication first)",
                        op, fh_representation_name((fh_representation)pt->state.representation));
  if ((st = fh__ckks_need_engine(e, op, "pt", pt)) ||
      (st = need_domain(op, "pt", pt, FH_DOMAIN_NTT, " (call prepare_plaintext_for_multiplication first)")))
    return st;
  if (pt->state.modulus_basis != FH_BASIS_Q)
    return fh_error_set(FH_ERR_STATE, "%s: modulus_basis of pt is %s, expected Q", op,
                        fh_basis_name((fh_modulus_basis)pt->state.modulus_basis));
  if (pt->state.level != ct->state.level) return level_mismatch(op, "ct", ct->state.level, "pt", pt->state.level);
  fh__ckks_geo gc, gp;
  fh__ckks_geo_of(ct, &gc);
  fh__ckks_geo_of(pt, &gp);
  if (gp.nbatch != 0 && !fh__ckks_same_batch(&gc, &gp)) return batch_mismatch(op);
  double scale = ct->state.scale * pt->state.scale;
  if (!isfinite(scale)) return fh_error_set(FH_ERR_STATE, "%s: scale of the product overflows", op);
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e))) != FH_OK) return st;
  fh_tensor *ts[3] = {NULL, NULL, NULL};
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, gc.level, p);
  int64_t gs = (int64_t)gc.la * fh_ckks_engine_context(e)->ring_degree, cs = gc.B * gs;
  if ((st = data_of(&L, ct, &ts[0])) == FH_OK && (st = data_of(&L, pt, &ts[1])) == FH_OK &&
      (st = fh__ckks_alloc_poly(e, &L, gc.comps, &gc, gc.la, &ts[2])) == FH_OK) {
    uint64_t *o = fh__ckks_ptr(ts[2]);
    const uint64_t *c = fh__ckks_ptr(ts[0]), *m = fh__ckks_ptr(ts[1]);
    if (gp.nbatch == 0) {
      st = fh__ckks_ew(&L, FH_CKKS_EW_MONT_MUL, gc.comps * gc.B, p, gc.la, o, gs, c, gs, m, 0);
    } else {
      for (int k = 0; k < gc.comps && st == FH_OK; ++k)
        st = fh__ckks_ew(&L, FH_CKKS_EW_MONT_MUL, gc.B, p, gc.la, o + k * cs, gs, c + k * cs, gs, m, gs);
    }
  }
  if (st == FH_OK) st = wrap_ct(e, ts[2], gc.level, scale, FH_DOMAIN_NTT, out);
  release_all(ts, 3);
  return st;
}

/* ---- domain conversion ------------------------------------------------------------------------------ */
static fh_status convert_domain(fh_ckks_engine *e, const fh_value *v, bool to_ntt, fh_value **out) {
  const char *op = to_ntt ? "coefficient_domain_to_ntt_domain" : "ntt_domain_to_coefficient_domain";
  fh_status st;
  if (v == NULL) return fh_error_set(FH_ERR_TYPE, "%s: expected a Ciphertext or an RNS Plaintext", op);
  fh_value_type t = fh_value_get_type(v);
  bool is_pt = t == FH_PLAINTEXT;
  if (!(t == FH_CIPHERTEXT || (is_pt && v->state.representation == FH_REPR_RNS))) {
    if (is_pt)
      return fh_error_set(FH_ERR_STATE, "%s: representation of the plaintext is slots, expected rns (encode it first)",
                          op);
    return fh_error_set(FH_ERR_TYPE, "%s: expected a Ciphertext or an RNS Plaintext, got a %s", op,
                        fh_value_type_name(t));
  }
  if ((st = fh__ckks_need_engine(e, op, "the value", v)) != FH_OK) return st;
  /* plaintexts over QP too (a linear transform's): their P rows transform like the Q rows */
  if (v->state.modulus_basis != FH_BASIS_Q && !(is_pt && v->state.modulus_basis == FH_BASIS_QP))
    return fh_error_set(FH_ERR_STATE, "%s: modulus_basis is %s, expected Q", op,
                        fh_basis_name((fh_modulus_basis)v->state.modulus_basis));
  if ((st = need_domain(op, "the value", v, to_ntt ? FH_DOMAIN_COEFFICIENT : FH_DOMAIN_NTT, "")) != FH_OK) return st;
  fh__ckks_geo g;
  fh__ckks_geo_of(v, &g);
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e))) != FH_OK) return st;
  fh_tensor *ts[2] = {NULL, NULL};
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_value_primes(e, v, p);
  int64_t gs = (int64_t)g.la * fh_ckks_engine_context(e)->ring_degree;
  int lead = is_pt ? 0 : g.comps;
  if ((st = data_of(&L, v, &ts[0])) == FH_OK && (st = fh__ckks_alloc_poly(e, &L, lead, &g, g.la, &ts[1])) == FH_OK) {
    uint64_t *o = fh__ckks_ptr(ts[1]);
    const uint64_t *in = fh__ckks_ptr(ts[0]);
    if (to_ntt && is_pt && v->state.residue_representation == FH_RESIDUE_MONTGOMERY) {
      /* coefficient-domain Montgomery plaintext: to standard first */
      st = fh__ckks_ew(&L, FH_CKKS_EW_FROM_MONT, g.B, p, g.la, o, gs, in, gs, NULL, 0);
      in = o;
    }
    if (st == FH_OK) st = fh__ckks_ntt(&L, to_ntt, o, gs, in, gs, g.comps * g.B, p, g.la);
  }
  if (st == FH_OK) {
    fh_polynomial_domain d = to_ntt ? FH_DOMAIN_NTT : FH_DOMAIN_COEFFICIENT;
    if (is_pt)
      st = fh_plaintext_rns_new(fh_ckks_engine_context(e), ts[1], g.level, v->state.scale,
                                (fh_modulus_basis)v->state.modulus_basis, d,
                                to_ntt ? FH_RESIDUE_MONTGOMERY : FH_RESIDUE_STANDARD, out);
    else
      st = wrap_ct(e, ts[1], g.level, v->state.scale, d, out);
  }
  release_all(ts, 2);
  return st;
}

fh_status fh_ckks_to_ntt(fh_ckks_engine *e, const fh_value *v, fh_value **out) { return convert_domain(e, v, true, out); }
fh_status fh_ckks_to_coefficient(fh_ckks_engine *e, const fh_value *v, fh_value **out) {
  return convert_domain(e, v, false, out);
}

/* ---- rotations and conjugation ------------------------------------------------------------------------ */
static fh_status apply_galois(fh_ckks_engine *e, const char *op, const fh_value *ct, uint64_t galois,
                              const fh_value *key, fh_value **out) {
  fh__ckks_geo g;
  fh__ckks_geo_of(ct, &g);
  bool ntt = ct->state.polynomial_domain == FH_DOMAIN_NTT;
  fh__ckks_launcher L;
  fh_status st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e));
  if (st != FH_OK) return st;
  (void)op;
  fh_tensor *ts[5] = {NULL, NULL, NULL, NULL, NULL};
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, g.level, p);
  int64_t gs = (int64_t)g.la * fh_ckks_engine_context(e)->ring_degree, cs = g.B * gs;
  /* NTT-domain rows of N > 2^FH_CKKS_CUDA_ROW_LOG: the mod-down reads c0 through the
   * automorphism (fh_ckks_moddown_args.add_galois), so only c1's is written; else both */
  const bool fused_c0 = ntt && fh_ckks_engine_tables(e)->log_n > FH_CKKS_CUDA_ROW_LOG;
  if ((st = data_of(&L, ct, &ts[0])) == FH_OK && (st = data_of(&L, key, &ts[1])) == FH_OK &&
      (st = fh__ckks_alloc_poly(e, &L, 2, &g, g.la, &ts[2])) == FH_OK &&
      (st = fh__ckks_alloc_poly(e, &L, fused_c0 ? 0 : 2, &g, g.la, &ts[3])) == FH_OK) {
    const uint64_t *c = fh__ckks_ptr(ts[0]);
    uint64_t *sig = fh__ckks_ptr(ts[3]); /* sigma(c1), after sigma(c0) when not fused */
    st = fh__ckks_automorph(&L, ntt, galois, sig, gs, fused_c0 ? c + cs : c, gs, fused_c0 ? g.B : 2 * g.B, p, g.la);
    const uint64_t *A = fused_c0 ? c : sig, *d = fused_c0 ? sig : sig + cs, *d_ntt = NULL;
    bool scaled = false;
    if (st == FH_OK && ntt && (st = fh__ckks_alloc_poly(e, &L, 0, &g, g.la, &ts[4])) == FH_OK) {
      st = fh__ckks_ks_intt(&L, g.level, false, fh__ckks_ptr(ts[4]), gs, d, gs, g.B, p, g.la, &scaled);
      d_ntt = d;
      d = fh__ckks_ptr(ts[4]);
    }
    uint64_t *o = fh__ckks_ptr(ts[2]);
    if (st == FH_OK)
      st = fh__ckks_keyswitch(e, &L, g.level, g.B, d, gs, d_ntt, scaled, ts[1], ntt, o, o + cs, gs, A, NULL, gs,
                              fused_c0 ? galois : 0);
  }
  if (st == FH_OK) st = wrap_ct(e, ts[2], g.level, ct->state.scale, ct->state.polynomial_domain, out);
  release_all(ts, 5);
  return st;
}

static fh_status rotate_check(fh_ckks_engine *e, const char *op, const fh_value *ct) {
  fh_status st;
  if ((st = fh__ckks_need_ct(e, op, "ct", ct)) || (st = need_components(op, "ct", ct, 2))) return st;
  return FH_OK;
}

fh_status fh_ckks_rotate_by_step(fh_ckks_engine *e, const fh_value *ct, int64_t r, const fh_value *rk,
                                 fh_value **out) {
  const char *op = "rotate_by_step";
  fh_status st;
  if ((st = rotate_check(e, op, ct)) != FH_OK) return st;
  int64_t c = fh_ckks_canonical_step(e, r);
  if (rk != NULL) {
    if ((st = fh__ckks_need_key(e, op, "rk", rk, FH_ROTATION_KEY, FH_BASIS_QP)) != FH_OK) return st;
    if (rk->state.step != c)
      return fh_error_set(FH_ERR_STATE, "%s: step of rk is %lld but the rotation by %lld needs step %lld", op,
                          (long long)rk->state.step, (long long)r, (long long)c);
  }
  if (c == 0) return fh_value_clone(ct, out);
  if (rk == NULL) {
    for (int i = 0; i < e->nrot && rk == NULL; ++i)
      if (e->rot_keys[i]->state.step == c) rk = e->rot_keys[i];
    if (rk == NULL)
      return fh_error_set(FH_ERR_STATE,
                          "%s: step %lld: the engine has no rotation key for step %lld (create one with "
                          "create_rotation_key(sk, %lld), or use rotate_with_key)",
                          op, (long long)r, (long long)c, (long long)c);
    if ((st = fh__ckks_need_key(e, op, "the rotation key", rk, FH_ROTATION_KEY, FH_BASIS_QP)) != FH_OK) return st;
  }
  return apply_galois(e, op, ct, fh__ckks_galois_of_step(e, c), rk, out);
}

fh_status fh_ckks_rotate_with_key(fh_ckks_engine *e, const fh_value *ct, const fh_value *rk, fh_value **out) {
  const char *op = "rotate_with_key";
  fh_status st;
  if ((st = rotate_check(e, op, ct)) || (st = fh__ckks_need_key(e, op, "rk", rk, FH_ROTATION_KEY, FH_BASIS_QP)))
    return st;
  return apply_galois(e, op, ct, fh__ckks_galois_of_step(e, rk->state.step), rk, out);
}

/* The rotation key of each step (canonical[r], rk[r]; rk NULL for a step of 0): keys[r] when
 * given (checked: a rotation key of this engine for that step), else the engine's. Names
 * steps[i] and keys[i] in its errors. */
static fh_status step_keys(fh_ckks_engine *e, const char *op, const int64_t *steps, int nsteps,
                           const fh_value *const *keys, int64_t *canon, const fh_value **rk) {
  fh_status st = FH_OK;
  for (int r = 0; r < nsteps && st == FH_OK; ++r) {
    int64_t c = canon[r] = fh_ckks_canonical_step(e, steps[r]);
    const fh_value *k = keys ? keys[r] : NULL;
    if (k != NULL) {
      char arg[32];
      snprintf(arg, sizeof arg, "keys[%d]", r + 1);
      if ((st = fh__ckks_need_key(e, op, arg, k, FH_ROTATION_KEY, FH_BASIS_QP)) != FH_OK) break;
      if (k->state.step != c) {
        st = fh_error_set(FH_ERR_STATE, "%s: step of keys[%d] is %lld but steps[%d] = %lld needs step %lld", op, r + 1,
                          (long long)k->state.step, r + 1, (long long)steps[r], (long long)c);
        break;
      }
    } else if (c != 0) {
      for (int i = 0; i < e->nrot && k == NULL; ++i)
        if (e->rot_keys[i]->state.step == c) k = e->rot_keys[i];
      if (k == NULL) {
        st = fh_error_set(FH_ERR_STATE,
                          "%s: steps[%d] = %lld: the engine has no rotation key for step %lld (create one with "
                          "create_rotation_key(sk, %lld), or pass keys)",
                          op, r + 1, (long long)steps[r], (long long)c, (long long)c);
        break;
      }
      if ((st = fh__ckks_need_key(e, op, "a rotation key", k, FH_ROTATION_KEY, FH_BASIS_QP)) != FH_OK) break;
    }
    rk[r] = c != 0 ? k : NULL;
  }
  return st;
}

fh_status fh_ckks_rotate_many(fh_ckks_engine *e, const fh_value *ct, const int64_t *steps, int nsteps,
                              const fh_value *const *keys, fh_value **outs) {
  const char *op = "rotate_many";
  fh_status st;
  if ((st = rotate_check(e, op, ct)) != FH_OK) return st;
  if (nsteps < 0) return fh_error_set(FH_ERR_VALUE, "%s: %d steps", op, nsteps);
  if (nsteps == 0) return FH_OK;
  /* every step's key first: nothing is launched unless all are there */
  const fh_value **rk = fh_calloc((size_t)nsteps, sizeof *rk);
  int64_t *canon = fh_calloc((size_t)nsteps, sizeof *canon);
  fh_value **res = fh_calloc((size_t)nsteps, sizeof *res);
  fh_tensor **data = fh_calloc((size_t)nsteps, sizeof *data);
  if (!rk || !canon || !res || !data) {
    fh_free(rk);
    fh_free(canon);
    fh_free(res);
    fh_free(data);
    return fh_error_set(FH_ERR_MEMORY, "%s: out of memory", op);
  }
  st = step_keys(e, op, steps, nsteps, keys, canon, rk);
  fh__ckks_geo g;
  fh__ckks_geo_of(ct, &g);
  const bool ntt = ct->state.polynomial_domain == FH_DOMAIN_NTT;
  const int64_t n = fh_ckks_engine_context(e)->ring_degree, gs = (int64_t)g.la * n, cs = g.B * gs;
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, g.level, p);
  fh__ckks_launcher L;
  fh_tensor *cd = NULL, *dt = NULL, *a0 = NULL;
  fh__ckks_hoist h;
  bool hoisted = false;
  if (st == FH_OK) st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e));
  if (st == FH_OK) st = data_of(&L, ct, &cd);
  /* the results, allocated up front (they join the uses only for their own step) */
  int64_t shape[FH_MAX_DIMS];
  int nd = 0;
  shape[nd++] = 2;
  for (int i = 0; i < g.nbatch; ++i) shape[nd++] = g.batch[i];
  shape[nd++] = g.la;
  shape[nd++] = n;
  fh_tensor_options o = {FH_UINT64, fh_ckks_engine_device(e), false, false};
  for (int r = 0; r < nsteps && st == FH_OK; ++r)
    if (canon[r] != 0) st = fh_tensor_empty(nd, shape, &o, &data[r]);
  bool any = false;
  for (int r = 0; r < nsteps; ++r) any = any || canon[r] != 0;
  if (st == FH_OK && any) {
    const uint64_t *c = fh__ckks_ptr(cd), *d = c + cs, *d_ntt = NULL;
    bool scaled = false;
    if (ntt && (st = fh__ckks_alloc_poly(e, &L, 0, &g, g.la, &dt)) == FH_OK) { /* c1 in coefficients */
      st = fh__ckks_ks_intt(&L, g.level, false, fh__ckks_ptr(dt), gs, d, gs, g.B, p, g.la, &scaled);
      d_ntt = d;
      d = fh__ckks_ptr(dt);
    }
    const bool fused_c0 = ntt && fh_ckks_engine_tables(e)->log_n > FH_CKKS_CUDA_ROW_LOG;
    if (st == FH_OK && !fused_c0) st = fh__ckks_alloc_poly(e, &L, 0, &g, g.la, &a0);
    if (st == FH_OK && (st = fh__ckks_hoist_begin(e, &L, g.level, g.B, d, gs, d_ntt, scaled, true, &h)) == FH_OK)
      hoisted = true;
    /* the steps in batches of up to FH_CKKS_KS_MAX_STEPS: their inner products (one launch on
     * CUDA, each digit row read once for the batch), then each step's mod-down */
    int64_t ashape[4] = {g.B, 2, h.k.lk, n};
    for (int r0 = 0; r0 < nsteps && st == FH_OK;) {
      int idx[FH_CKKS_KS_MAX_STEPS], cnt = 0;
      uint64_t gal[FH_CKKS_KS_MAX_STEPS];
      const fh_tensor *kt[FH_CKKS_KS_MAX_STEPS];
      fh_tensor *acc[FH_CKKS_KS_MAX_STEPS] = {NULL};
      uint64_t *accp[FH_CKKS_KS_MAX_STEPS];
      int saved = L.nuses;
      for (; r0 < nsteps && cnt < FH_CKKS_KS_MAX_STEPS; ++r0) {
        if (canon[r0] == 0) continue;
        idx[cnt] = r0;
        gal[cnt] = fh__ckks_galois_of_step(e, canon[r0]);
        kt[cnt] = fh_value_data(rk[r0]);
        fh__ckks_use(&L, kt[cnt]);
        fh__ckks_use(&L, data[r0]);
        ++cnt;
      }
      /* the batch's accumulators in one tensor [cnt][G][2][lk][N] (fh__ckks_hoist_moddown_steps) */
      int64_t bshape[5] = {cnt, ashape[0], ashape[1], ashape[2], ashape[3]};
      if (cnt > 0 && (st = fh__ckks_temp(&L, 5, bshape, &acc[0])) == FH_OK)
        for (int i = 0; i < cnt; ++i) accp[i] = fh__ckks_ptr(acc[0]) + (int64_t)i * 2 * g.B * h.k.lk * n;
      if (st == FH_OK && cnt > 0) st = fh__ckks_hoist_inner_steps(e, &L, &h, cnt, gal, kt, accp);
      if (st == FH_OK && cnt > 0 && fused_c0) {
        /* the steps' mod-downs: their P rows' INTT in one launch, c0 read through each step's
         * automorphism */
        uint64_t *outs[FH_CKKS_KS_MAX_STEPS];
        for (int i = 0; i < cnt; ++i) outs[i] = fh__ckks_ptr(data[idx[i]]);
        st = fh__ckks_hoist_moddown_steps(e, &L, &h, cnt, accp[0], outs, cs, gs, c, gs, gal);
      }
      for (int i = 0; i < cnt && st == FH_OK && !fused_c0; ++i) {
        uint64_t *out = fh__ckks_ptr(data[idx[i]]);
        /* (smaller rings and the coefficient domain) the first component's automorphism
         * written, then added by the mod-down */
        if ((st = fh__ckks_automorph(&L, ntt, gal[i], fh__ckks_ptr(a0), gs, c, gs, g.B, p, g.la)) == FH_OK)
          st = fh__ckks_hoist_moddown_of(e, &L, &h, accp[i], ntt, out, out + cs, gs, fh__ckks_ptr(a0), gs, 0);
      }
      L.nuses = saved;
      /* (released after their last launch: the device's allocator orders their reuse after it) */
      for (int i = 0; i < cnt; ++i)
        if (acc[i]) fh_tensor_release(acc[i]);
    }
  }
  for (int r = 0; r < nsteps && st == FH_OK; ++r)
    st = canon[r] == 0 ? fh_value_clone(ct, &res[r])
                       : wrap_ct(e, data[r], g.level, ct->state.scale, ct->state.polynomial_domain, &res[r]);
  if (hoisted) fh__ckks_hoist_end(&h);
  fh_tensor *ts[3] = {cd, dt, a0};
  release_all(ts, 3);
  for (int r = 0; r < nsteps; ++r) {
    if (data[r]) fh_tensor_release(data[r]);
    if (st != FH_OK && res[r]) fh_value_release(res[r]);
  }
  if (st == FH_OK) memcpy(outs, res, sizeof *res * (size_t)nsteps);
  fh_free(rk);
  fh_free(canon);
  fh_free(res);
  fh_free(data);
  return st;
}

/* ---- linear transforms (double hoisting) ------------------------------------------------------
 * sum_i pts[i] * rotate(ct, steps[i]) with one mod-up and one mod-down (FH_K_CKKS_LT): every
 * rotation and plaintext product runs over QP, before the mod-down, so the plaintexts carry the
 * P rows too (basis QP). */
/* rescale: the mod-down fused with the rescale by the level's first prime (N > 2^11; the
 * caller runs the two in turn below that) */
static fh_status linear_transform(fh_ckks_engine *e, const fh_value *ct, const int64_t *steps, int nsteps,
                                  const fh_value *const *pts, const fh_value *const *keys, bool rescale,
                                  fh_value **out) {
  const char *op = "linear_transform";
  fh_status st;
  if ((st = rotate_check(e, op, ct)) ||
      (st = need_domain(op, "ct", ct, FH_DOMAIN_NTT, " (convert with coefficient_domain_to_ntt_domain first)")))
    return st;
  if (nsteps < 1) return fh_error_set(FH_ERR_VALUE, "%s: %d steps (expected at least one)", op, nsteps);
  const fh_ckks_tables *tb = fh_ckks_engine_tables(e);
  fh__ckks_geo gc;
  fh__ckks_geo_of(ct, &gc);
  for (int i = 0; i < nsteps; ++i) {
    const fh_value *pt = pts[i];
    char arg[40];
    snprintf(arg, sizeof arg, "plaintexts[%d]", i + 1);
    if ((st = fh__ckks_need_type(op, arg, pt, FH_PLAINTEXT)) != FH_OK) return st;
    if (pt->state.representation != FH_REPR_RNS)
      return fh_error_set(FH_ERR_STATE,
                          "%s: representation of %s is %s, expected a prepared rns plaintext over QP (encode with "
                          "{basis = \"QP\"}, then prepare_plaintext_for_multiplication)",
                          op, arg, fh_representation_name((fh_representation)pt->state.representation));
    if ((st = fh__ckks_need_engine(e, op, arg, pt)) != FH_OK) return st;
    if (pt->state.modulus_basis != FH_BASIS_QP)
      return fh_error_set(FH_ERR_STATE, "%s: modulus_basis of %s is %s, expected QP (encode with {basis = \"QP\"})", op,
                          arg, fh_basis_name((fh_modulus_basis)pt->state.modulus_basis));
    if ((st = need_domain(op, arg, pt, FH_DOMAIN_NTT, " (call prepare_plaintext_for_multiplication first)")) != FH_OK)
      return st;
    if (pt->state.level != ct->state.level) return level_mismatch(op, "ct", ct->state.level, arg, pt->state.level);
    if (!fh__ckks_scales_match(pts[0]->state.scale, pt->state.scale))
      return scale_mismatch(op, "plaintexts[1]", pts[0]->state.scale, arg, pt->state.scale);
    fh__ckks_geo gp;
    fh__ckks_geo_of(pt, &gp);
    if (gp.nbatch != 0 && !fh__ckks_same_batch(&gc, &gp)) return batch_mismatch(op);
  }
  double scale = ct->state.scale * pts[0]->state.scale;
  if (!isfinite(scale)) return fh_error_set(FH_ERR_STATE, "%s: scale of the product overflows", op);
  if (rescale) scale /= (double)fh_ckks_engine_context(e)->primes[ct->state.level];
  /* every step's key before anything is launched */
  const fh_value **rk = fh_calloc((size_t)nsteps, sizeof *rk);
  int64_t *canon = fh_calloc((size_t)nsteps, sizeof *canon);
  fh_tensor **ptd = fh_calloc((size_t)nsteps, sizeof *ptd);
  if (!rk || !canon || !ptd) {
    st = fh_error_set(FH_ERR_MEMORY, "%s: out of memory", op);
  } else {
    st = step_keys(e, op, steps, nsteps, keys, canon, rk);
  }
  const int64_t n = fh_ckks_engine_context(e)->ring_degree, gs = (int64_t)gc.la * n, cs = gc.B * gs;
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, gc.level, p);
  fh__ckks_launcher L;
  fh_tensor *cd = NULL, *dt = NULL, *res = NULL;
  fh__ckks_hoist h;
  memset(&h, 0, sizeof h);
  bool hoisted = false;
  if (st == FH_OK) st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e));
  for (int i = 0; i < nsteps && st == FH_OK; ++i) st = fh_tensor_contiguous(fh_value_data(pts[i]), &ptd[i]);
  const int lo = rescale ? gc.la - 1 : gc.la; /* the result's rows */
  const int64_t ogs = (int64_t)lo * n, ocs = gc.B * ogs;
  if (st == FH_OK) st = data_of(&L, ct, &cd);
  if (st == FH_OK) st = fh__ckks_alloc_poly(e, &L, 2, &gc, lo, &res);
  /* c1 in the coefficient domain (or the conversion sources where the tables fold), its
   * extended digits in the NTT domain (h.D) */
  bool scaled = false;
  if (st == FH_OK && (st = fh__ckks_alloc_poly(e, &L, 0, &gc, gc.la, &dt)) == FH_OK)
    st = fh__ckks_ks_intt(&L, gc.level, false, fh__ckks_ptr(dt), gs, fh__ckks_ptr(cd) + cs, gs, gc.B, p, gc.la,
                          &scaled);
  if (st == FH_OK && (st = fh__ckks_hoist_begin(e, &L, gc.level, gc.B, fh__ckks_ptr(dt), gs, fh__ckks_ptr(cd) + cs,
                                                scaled, false, &h)) == FH_OK)
    hoisted = true;
  /* the launches' common part once; each takes up to FH_CKKS_LT_STEPS steps */
  const fh__ckks_ks_geo *k = &h.k;
  const int64_t rs = (int64_t)k->lk * n;
  fh_ckks_lt_args a;
  memset(&a, 0, sizeof a);
  if (hoisted) {
    a.out = fh__ckks_ptr(h.acc);
    a.out_gs = 2 * rs;
    a.out_cs = rs;
    a.d = fh__ckks_ptr(h.D);
    a.d_gs = (int64_t)k->ndig * rs;
    a.d_ds = rs;
    a.x = fh__ckks_ptr(cd);
    a.x_gs = gs;
    a.x_cs = cs;
    a.ngroups = gc.B;
    a.ndigits = k->ndig;
    a.nrows = k->lk;
    a.nq_rows = k->la;
    a.log_n = tb->log_n;
    a.primes = tb->primes_dev;
    memcpy(a.prime, k->qp, sizeof(int32_t) * (size_t)k->lk);
    memcpy(a.key_row, k->qp, sizeof(int32_t) * (size_t)k->lk);
    for (int r = 0; r < k->la; ++r) {
      a.pmod[r] = tb->p_mod[gc.level + r];
      a.pmod_shoup[r] = fh_shoup_precompute(a.pmod[r], tb->primes[gc.level + r]);
    }
  }
  for (int i0 = 0; i0 < nsteps && st == FH_OK; i0 += FH_CKKS_LT_STEPS) {
    a.nsteps = nsteps - i0 < FH_CKKS_LT_STEPS ? nsteps - i0 : FH_CKKS_LT_STEPS;
    a.accumulate = i0 > 0;
    int saved = L.nuses;
    for (int s = 0; s < a.nsteps; ++s) {
      const int i = i0 + s;
      a.pt[s] = fh__ckks_ptr(ptd[i]);
      a.pt_gs[s] = ptd[i]->ndim > 2 ? rs : 0;
      fh__ckks_use(&L, ptd[i]);
      a.galois[s] = rk[i] ? fh__ckks_galois_of_step(e, canon[i]) : 1;
      a.key[s] = rk[i] ? fh__ckks_key_digits(k, fh_value_data(rk[i]), &a.key_ds, &a.key_cs) : NULL;
      if (rk[i]) fh__ckks_use(&L, fh_value_data(rk[i]));
    }
    st = fh__ckks_submit(&L, FH_K_CKKS_LT, &a, sizeof a);
    L.nuses = saved;
  }
  if (st == FH_OK) {
    uint64_t *o = fh__ckks_ptr(res);
    st = rescale ? fh__ckks_hoist_moddown_rescale(e, &L, &h, o, o + ocs, ogs)
                 : fh__ckks_hoist_moddown(e, &L, &h, o, o + ocs, ogs);
  }
  if (st == FH_OK) st = wrap_ct(e, res, gc.level + (rescale ? 1 : 0), scale, FH_DOMAIN_NTT, out);
  if (hoisted) fh__ckks_hoist_end(&h);
  fh_tensor *ts[3] = {cd, dt, res};
  release_all(ts, 3);
  if (ptd)
    for (int i = 0; i < nsteps; ++i)
      if (ptd[i]) fh_tensor_release(ptd[i]);
  fh_free(rk);
  fh_free(canon);
  fh_free(ptd);
  return st;
}

fh_status fh_ckks_linear_transform(fh_ckks_engine *e, const fh_value *ct, const int64_t *steps, int nsteps,
                                   const fh_value *const *pts, const fh_value *const *keys, fh_value **out) {
  return linear_transform(e, ct, steps, nsteps, pts, keys, false, out);
}

fh_status fh_ckks_linear_transform_rescale(fh_ckks_engine *e, const fh_value *ct, const int64_t *steps, int nsteps,
                                           const fh_value *const *pts, const fh_value *const *keys, fh_value **out) {
  const char *op = "linear_transform";
  fh_status st;
  if ((st = fh__ckks_need_ct(e, op, "ct", ct)) || (st = rescale_room(e, op, "ct", ct))) return st;
  if (fh_ckks_engine_tables(e)->log_n > FH_CKKS_CUDA_ROW_LOG)
    return linear_transform(e, ct, steps, nsteps, pts, keys, true, out);
  fh_value *r = NULL; /* small rings: the two operations in turn */
  return then_rescale(e, linear_transform(e, ct, steps, nsteps, pts, keys, false, &r), &r, out);
}

fh_status fh_ckks_conjugate(fh_ckks_engine *e, const fh_value *ct, const fh_value *ck, fh_value **out) {
  const char *op = "conjugate";
  fh_status st;
  if ((st = rotate_check(e, op, ct)) != FH_OK) return st;
  if (ck == NULL) {
    ck = e->conj_key;
    if (ck == NULL)
      return fh_error_set(FH_ERR_STATE,
                          "%s: the engine has no conjugation key (create one with create_conjugation_key(sk), or pass "
                          "it)",
                          op);
  }
  if ((st = fh__ckks_need_key(e, op, "ck", ck, FH_CONJUGATION_KEY, FH_BASIS_QP)) != FH_OK) return st;
  return apply_galois(e, op, ct, 2 * (uint64_t)e->ctx->ring_degree - 1, ck, out);
}

/* ---- batches ------------------------------------------------------------------------------------------- */
fh_status fh_ckks_stack_batch(fh_ckks_engine *e, const fh_value *const *cts, int n, fh_value **out) {
  const char *op = "stack_batch";
  fh_status st = FH_OK;
  if (n < 1) return fh_error_set(FH_ERR_VALUE, "%s: needs at least one ciphertext", op);
  if ((st = fh__ckks_need_ct(e, op, "ciphertext 1", cts[0])) != FH_OK) return st;
  fh__ckks_geo g0;
  fh__ckks_geo_of(cts[0], &g0);
  if (g0.nbatch + 1 > FH_MAX_DIMS - 3) return fh_error_set(FH_ERR_VALUE, "%s: too many batch axes", op);
  for (int i = 1; i < n; ++i) {
    const fh_value *c = cts[i];
    char name[32];
    snprintf(name, sizeof name, "ciphertext %d", i + 1);
    if ((st = fh__ckks_need_ct(e, op, name, c)) != FH_OK) return st;
    if (c->state.level != g0.level) return level_mismatch(op, "ciphertext 1", g0.level, name, c->state.level);
    if (!fh__ckks_scales_match(c->state.scale, cts[0]->state.scale))
      return scale_mismatch(op, "ciphertext 1", cts[0]->state.scale, name, c->state.scale);
    if (c->state.polynomial_domain != cts[0]->state.polynomial_domain)
      return domain_mismatch(op, "ciphertext 1", cts[0]->state.polynomial_domain, name, c->state.polynomial_domain);
    if (c->state.num_components != g0.comps)
      return fh_error_set(FH_ERR_STATE, "%s: num_components mismatch: ciphertext 1 has %d, %s has %d", op, g0.comps,
                          name, c->state.num_components);
    fh__ckks_geo gi;
    fh__ckks_geo_of(c, &gi);
    if (!fh__ckks_same_batch(&g0, &gi)) return batch_mismatch(op);
  }
  fh__ckks_geo g = g0;
  memmove(g.batch + 1, g.batch, sizeof(int64_t) * (size_t)g.nbatch);
  g.batch[0] = n;
  g.nbatch++;
  g.B *= n;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e))) != FH_OK) return st;
  fh_tensor *data = NULL;
  if ((st = fh__ckks_alloc_poly(e, &L, g.comps, &g, g.la, &data)) != FH_OK) return st;
  for (int i = 0; i < n && st == FH_OK; ++i) {
    fh_tensor *view = NULL;
    if ((st = fh_tensor_select(data, 1, i, &view)) == FH_OK) {
      st = fh_tensor_copy_(view, fh_value_data(cts[i]), NULL, false);
      fh_tensor_release(view);
    }
  }
  if (st == FH_OK) st = wrap_ct(e, data, g.level, cts[0]->state.scale, cts[0]->state.polynomial_domain, out);
  fh_tensor_release(data);
  return st;
}

fh_status fh_ckks_sum_ciphertext_batch(fh_ckks_engine *e, const fh_value *ct, fh_value **out) {
  const char *op = "sum_ciphertext_batch";
  fh_status st = FH_OK;
  if ((st = fh__ckks_need_ct(e, op, "ct", ct)) != FH_OK) return st;
  fh__ckks_geo g;
  fh__ckks_geo_of(ct, &g);
  fh__ckks_geo r = g;
  r.nbatch = 0;
  r.B = 1;
  fh__ckks_launcher L;
  if ((st = fh__ckks_launcher_init(&L, fh_ckks_engine_tables(e))) != FH_OK) return st;
  fh_tensor *ts[2] = {NULL, NULL};
  int32_t p[FH_CKKS_MAX_PRIMES];
  fh__ckks_active_primes(e, g.level, p);
  int64_t gs = (int64_t)g.la * fh_ckks_engine_context(e)->ring_degree, cs = g.B * gs;
  if ((st = data_of(&L, ct, &ts[0])) == FH_OK && (st = fh__ckks_alloc_poly(e, &L, g.comps, &r, g.la, &ts[1])) == FH_OK) {
    uint64_t *o = fh__ckks_ptr(ts[1]);
    const uint64_t *c = fh__ckks_ptr(ts[0]);
    st = fh__ckks_ew(&L, FH_CKKS_EW_COPY, g.comps, p, g.la, o, gs, c, cs, NULL, 0);
    for (int64_t b = 1; b < g.B && st == FH_OK; ++b)
      st = fh__ckks_ew(&L, FH_CKKS_EW_ADD, g.comps, p, g.la, o, gs, o, gs, c + b * gs, cs);
  }
  if (st == FH_OK) st = wrap_ct(e, ts[1], g.level, ct->state.scale, ct->state.polynomial_domain, out);
  release_all(ts, 2);
  return st;
}
