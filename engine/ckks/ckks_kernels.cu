/* CUDA implementations of the CKKS kernels (fh/ckks_kernels.h), one per id,
 * with the argument blocks of the CPU back end (ckks_kernels_cpu.c) and the
 * same results, bit for bit:
 *   - every integer kernel computes a function whose value is fixed by its
 *     definition (a canonical residue in [0, q)), so any exact evaluation
 *     order gives the CPU's words; the NTTs keep Harvey's lazy ranges
 *     ([0, 4q) forward, [0, 2q) inverse) and reduce fully at the end, or,
 *     for primes below 2^FH_FP_MAX_BITS, run their butterflies on integers
 *     held exactly in doubles (fh_fp_mul, fp_arith below) and write the
 *     same canonical words;
 *   - encode and decode run the CPU's double-precision special FFT with the
 *     same operations in the same order, each a single IEEE
 *     round-to-nearest operation (__dmul_rn, __dadd_rn, __dsub_rn: no
 *     contraction into FMA), with the same twiddle tables, so they are
 *     bit-identical too (docs/ckks.md, "CKKS on CUDA").
 *
 * Launch shapes. Rows are (group, limb): blockIdx.y is the limb (at most
 * FH_CKKS_MAX_PRIMES), blockIdx.z walks the groups (a grid-stride loop
 * beyond 65535), blockIdx.x the coefficients or tiles of a row; the chunk
 * stages' grids fold up to 32 groups into blockIdx.x too (chunk_grid), so
 * that the blocks sharing a tile's twiddles run side by side. One launch
 * covers every row of an operation. The NTT of a row of N = 2^log_n words
 * is one kernel when N <= NTT_TILE (the whole row through shared memory),
 * else two over N = N1 x N2 (N2 = 2^ceil(log_n / 2) contiguous words): a
 * "column" kernel for the stages whose butterflies span at least N2 words
 * and a "chunk" kernel for the stages inside contiguous N2-word chunks, each
 * block on NTT_TILE words; the forward transform runs columns then chunks,
 * the inverse chunks then columns. Stages go in radix-8 passes (three
 * stages on 8 words per thread in registers, one barrier per pass). The
 * special FFT of encode and decode has the same two-phase shape over N/2
 * complex values.
 *
 * Nothing here allocates, synchronises or reads device data on the host, so
 * every kernel can be captured in a CUDA graph. Launch failures are
 * CudaError naming the kernel. */
#include <math.h>
#include <stdint.h>

#include <type_traits>
#include <utility>

#include "cuda_internal.h"
#include "fh/ckks_kernels.h"

namespace {

/* ---- launch constants ------------------------------------------------------------- */
constexpr int EW_THREADS = 256;       /* element-wise kernels: one coefficient per thread */
constexpr int NTT_THREADS = 256;      /* NTT kernels: 8 words per thread */
constexpr int NTT_TILE_LOG = FH_CKKS_CUDA_ROW_LOG; /* words per NTT block (shared memory) */
constexpr int NTT_TILE = 1 << NTT_TILE_LOG;
constexpr int FFT_CHUNK_LOG = 11;     /* complex values per chunk of the special FFT */
constexpr int FFT_CHUNK = 1 << FFT_CHUNK_LOG;
constexpr int FFT_THREADS = 256;
constexpr int FFT_COLS = 8;
constexpr int MAX_GRID_Z = 65535;
static_assert(FFT_CHUNK * 16 <= 48 * 1024, "an FFT chunk fits the default shared memory");

fh_status launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fh__cuda_fail(e, what);
  return FH_OK;
}

/* A kernel switch read once from the environment (a benchmarking aid, docs/ckks.md):
 * the index in `choices` (a NULL-terminated list) of the variable's value, else -1. */
int env_switch(const char *name, const char *const *choices) {
  const char *v = getenv(name);
  if (v == NULL) return -1;
  for (int i = 0; choices[i]; ++i)
    if (strcmp(v, choices[i]) == 0) return i;
  return -1;
}

/* The SM count of the current device (the runtime's table, read at start-up): the launch
 * shapes that depend on whether a grid fills the GPU (ntt_wide, ks_split, ks1_blocks). */
unsigned sms_here() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = 0;
  return (unsigned)fh__cuda_sm_count(dev);
}

unsigned grid_z(int64_t ngroups) { return (unsigned)(ngroups < MAX_GRID_Z ? ngroups : MAX_GRID_Z); }
unsigned blocks_for(int64_t n, int per_block) { return (unsigned)((n + per_block - 1) / per_block); }

/* ==== Programmatic dependent launch ====================================================
 * Every kernel in this file begins with pdl_begin(): griddepcontrol.wait holds it until
 * the grids it depends on have completed and their memory is visible, before it reads or
 * writes anything; then griddepcontrol.launch_dependents lets the next kernel of the stream
 * start launching. pdl() launches with cudaLaunchAttributeProgrammaticStreamSerialization,
 * so that the next kernel is scheduled while this one drains (its blocks only wait): eager,
 * the host's launch latency hides behind the GPU (relinearize, rotate and hoisted rotations
 * at N = 2^14 took 4-10% less on the H200, seventh session); captured, the graph's edges
 * are programmatic, and concurrent replays on several streams fill the GPU better (the
 * pipeline's four compute streams: 4 / 1 streams 2.10-2.12x against 1.87x with plain
 * edges, eighth session, two runs each) while one replay alone moves by +-3% (relinearize
 * and rotate faster, the fused rescales and the linear transform slower). A kernel launched
 * without the attribute waits for nothing there (the instructions return at once): the
 * words are the same either way. FHELIUM_CUDA_PDL=eager keeps captures plain, 0 launches
 * everything plainly (benchmarking aids). */
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* FHELIUM_CUDA_PDL: 1 (the default) every launch programmatic, eager or captured; eager
 * the eager launches only (captures plain); 0 every launch plain */
static int pdl_mode() {
  static const char *const kinds[] = {"0", "1", "eager", NULL};
  static const int m = env_switch("FHELIUM_CUDA_PDL", kinds);
  return m;
}

/* kernel<<<grid, block, smem, h>>>(args...), with the programmatic attribute unless
 * FHELIUM_CUDA_PDL=0; launch errors are the caller's launched() to report. */
template <typename... P, typename... A>
void pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t h, A &&...args) {
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t c = {};
  c.gridDim = grid;
  c.blockDim = block;
  c.dynamicSmemBytes = smem;
  c.stream = h;
  c.attrs = at;
  int m = pdl_mode(); /* 0 plain, 1 programmatic, 2 (eager) programmatic outside captures */
  c.numAttrs = m == 1 || (m == 2 && !fh__cuda_captures_active()) ? 1 : 0;
  (void)cudaLaunchKernelEx(&c, kernel, std::forward<A>(args)...);
}

#define GROUPS(g, ngroups) for (int64_t g = blockIdx.z; g < (ngroups); g += gridDim.z)
#define COEFFS(j, n) for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < (n); j += (int64_t)gridDim.x * blockDim.x)


/* ==== NTT ============================================================================
 * Forward (Cooley-Tukey, fh/ckks_kernels.h): stage m (m = 1, 2, .., N/2) pairs
 * (x, x + t), t = N / 2m, inside groups of 2t words; group i uses psi_rev[m + i].
 * The first stage multiplies by R on the way (Shoup constants R and psi_rev[1] R).
 * Inverse (Gentleman-Sande): stage t = 1, 2, .., N/4 pairs (x, x + t) in groups of
 * 2t, group i uses ipsi_rev[N/2t + i]; the last stage (t = N/2) scales by N^-1 R^-1. */
struct ntt_prime {
  uint64_t q, q2;
  const uint64_t *w, *ws; /* forward: psi_rev and companions; inverse: ipsi_rev and companions */
  const double *fw, *fwq; /* the FP64 rows (psi_rev or ipsi_rev, and over q), NULL: integer butterflies */
};

__device__ __forceinline__ ntt_prime ntt_prime_at(const fh_ckks_prime *primes, const uint64_t *ntt, int p, int log_n,
                                                  bool forward) {
  const int64_t n = (int64_t)1 << log_n;
  const uint64_t *tw = ntt + (int64_t)p * 4 * n;
  ntt_prime r;
  r.q = primes[p].q;
  r.q2 = 2 * r.q;
  r.w = forward ? tw : tw + 2 * n;
  r.ws = forward ? tw + n : tw + 3 * n;
  const int64_t fp = primes[p].fp_tw;
  r.fw = fp ? (const double *)(ntt + fp) + (forward ? 0 : 2 * n) : NULL;
  r.fwq = fp ? r.fw + n : NULL;
  return r;
}
__device__ __forceinline__ ntt_prime ntt_prime_of(const fh_ckks_ntt_args &a, int l, bool forward) {
  return ntt_prime_at(a.primes, a.ntt, a.prime[l], a.log_n, forward);
}

/* forward butterflies: inputs in [0, 4q), outputs in [0, 4q) */
__device__ __forceinline__ void ct_bfly(uint64_t &x, uint64_t &y, uint64_t w, uint64_t ws, const ntt_prime &P) {
  uint64_t u = x;
  u -= (u >= P.q2) ? P.q2 : 0;
  uint64_t v = fh_shoup_mul_lazy(y, w, ws, P.q);
  x = u + v;
  y = u - v + P.q2;
}
/* the first forward stage: standard residues in, times R out, [0, 4q) */
__device__ __forceinline__ void ct_first(uint64_t &x, uint64_t &y, const fh_ckks_prime &c, const ntt_prime &P) {
  uint64_t u = fh_shoup_mul_lazy(x, c.r1, c.r1_shoup, P.q);
  uint64_t v = fh_shoup_mul_lazy(y, c.w1r, c.w1r_shoup, P.q);
  x = u + v;
  y = u - v + P.q2;
}
__device__ __forceinline__ uint64_t reduce4(uint64_t x, const ntt_prime &P) {
  x -= (x >= P.q2) ? P.q2 : 0;
  x -= (x >= P.q) ? P.q : 0;
  return x;
}
/* inverse butterflies: [0, 2q) in and out */
__device__ __forceinline__ void gs_bfly(uint64_t &x, uint64_t &y, uint64_t w, uint64_t ws, const ntt_prime &P) {
  uint64_t u = x, v = y;
  uint64_t s = u + v;
  s -= (s >= P.q2) ? P.q2 : 0;
  x = s;
  y = fh_shoup_mul_lazy(u - v + P.q2, w, ws, P.q);
}
__device__ __forceinline__ void gs_last(uint64_t &x, uint64_t &y, const fh_ckks_prime &c, const ntt_prime &P) {
  uint64_t u = x, v = y;
  x = fh_shoup_mul(u + v, c.ninv_rinv, c.ninv_rinv_shoup, P.q);
  y = fh_shoup_mul(u - v + P.q2, c.iw1s, c.iw1s_shoup, P.q);
}

/* ---- radix-2^r passes ----------------------------------------------------------------
 * The passes below run on `narr` logical arrays of M = 2^S words: word k of
 * array a is at p[a * astride + k * kstride] (global or shared memory). Array a's
 * word k is word (offset + a * aoff + k) of a transform of `total` logical words,
 * which fixes the twiddles: at the stage with half-size t (logical words), word x is
 * in group (offset + a * aoff + x) >> log2(2t), twiddle index total / 2t + group.
 * A pass takes r consecutive stages at once on R = 2^r words per thread held in
 * registers: for the forward stages t_hi, .., t_lo = t_hi / 2^(r-1) the words
 * x0 + j t_lo (j < R) form a closed set, and likewise for the inverse stages
 * t_lo, .., t_hi; so a chunk of 2^11 words takes 4 passes (3 + 3 + 3 + 2 stages)
 * and 3 barriers instead of 11. */
struct ntt_view {
  uint64_t *p;
  int kstride, astride;
};
struct ntt_geom {
  int64_t total, offset, aoff; /* logical length of the transform, offsets */
  int log_total;
};

/* The butterflies' arithmetic, a policy of ntt_pass:
 * int_arith: words as they are, Harvey's lazy ranges and Shoup products (above);
 * fp_arith (primes below 2^FH_FP_MAX_BITS, fh_fp_mul): values are integers held in
 *   doubles; a pass converts the words it reads from the transform's input and writes
 *   the canonical words of its output, the passes between keep doubles in shared memory
 *   (their bits in the uint64 slots). Forward: x + r, x - r with |r| <= 0.625 q, so from
 *   inputs below 4q the values stay below (4 + 0.625 k) q < 11 q after k <= 11 stages (a
 *   kernel's most); inverse: sums double per stage, so every pass ends with the centred
 *   reduction (|v| < 0.57 q; a pass's three stages reach 16 q at most). Products stay
 *   exact while their operands are below 32 q (fh_fp_mul). */
struct int_arith {
  typedef uint64_t T;
  struct TW { /* a twiddle and its Shoup companion */
    uint64_t w, ws;
  };
  ntt_prime P;
  fh_ckks_prime c;
  __device__ __forceinline__ T load(uint64_t bits, bool) const { return bits; }
  __device__ __forceinline__ uint64_t store(T v, bool, bool reduce, bool) const { return reduce ? reduce4(v, P) : v; }
  __device__ __forceinline__ TW twiddle(uint32_t gi) const { return TW{__ldg(P.w + gi), __ldg(P.ws + gi)}; }
  /* the chunk stages' twiddles (fp_arith::twiddle_formed): a Shoup companion is not formed */
  __device__ __forceinline__ TW twiddle_formed(uint32_t gi) const { return twiddle(gi); }
  __device__ __forceinline__ void fwd(T &x, T &y, const TW &t) const { ct_bfly(x, y, t.w, t.ws, P); }
  __device__ __forceinline__ void fwd_first(T &x, T &y) const { ct_first(x, y, c, P); }
  __device__ __forceinline__ void inv(T &x, T &y, const TW &t) const { gs_bfly(x, y, t.w, t.ws, P); }
  __device__ __forceinline__ void inv_last(T &x, T &y) const { gs_last(x, y, c, P); }
};
struct fp_arith {
  typedef double T;
  struct TW { /* a twiddle and its quotient by q */
    double w, wq;
  };
  double q, qinv;
  const double *w, *wq;
  double f0, f0q, f1, f1q; /* the fused stage's two constants */
  __device__ __forceinline__ T load(uint64_t bits, bool words) const {
    return words ? fh_fp_of_word(bits) : __longlong_as_double((long long)bits);
  }
  /* words: the transform's output (canonical); else doubles for the next pass */
  __device__ __forceinline__ uint64_t store(T v, bool words, bool, bool forward) const {
    if (words) return fh_fp_canon(v, q, qinv);
    return (uint64_t)__double_as_longlong(forward ? v : fh_fp_centre(v, q, qinv));
  }
  __device__ __forceinline__ TW twiddle(uint32_t gi) const { return TW{__ldg(w + gi), __ldg(wq + gi)}; }
  /* the chunk stages' twiddles, whose rows (N of each prime) come from DRAM: the quotient
   * formed as w qinv (within 2^-52 of w / q, fh_fp_mul_w), so that only the w row is read
   * (half the twiddle bytes); the products stay exact and within q (1/2 + |x| 2^-52) */
  __device__ __forceinline__ TW twiddle_formed(uint32_t gi) const {
    const double tw = __ldg(w + gi);
    return TW{tw, __dmul_rn(tw, qinv)};
  }
  __device__ __forceinline__ void fwd(T &x, T &y, const TW &t) const {
    const double r = fh_fp_mul(y, t.w, t.wq, q);
    y = __dsub_rn(x, r);
    x = __dadd_rn(x, r);
  }
  __device__ __forceinline__ void fwd_first(T &x, T &y) const {
    const double u = fh_fp_mul(x, f0, f0q, q), v = fh_fp_mul(y, f1, f1q, q);
    x = __dadd_rn(u, v);
    y = __dsub_rn(u, v);
  }
  __device__ __forceinline__ void inv(T &x, T &y, const TW &t) const {
    const double d = __dsub_rn(x, y);
    x = __dadd_rn(x, y);
    y = fh_fp_mul(d, t.w, t.wq, q);
  }
  __device__ __forceinline__ void inv_last(T &x, T &y) const {
    const double s = __dadd_rn(x, y), d = __dsub_rn(x, y);
    x = fh_fp_mul(s, f0, f0q, q);
    y = fh_fp_mul(d, f1, f1q, q);
  }
};
__device__ __forceinline__ fp_arith fp_arith_of(const fh_ckks_prime &c, const ntt_prime &P, bool forward) {
  fp_arith a;
  a.q = c.fp_q;
  a.qinv = c.fp_qinv;
  a.w = P.fw;
  a.wq = P.fwq;
  const int k = forward ? 0 : 4;
  a.f0 = c.fp_c[k];
  a.f0q = c.fp_c[k + 1];
  a.f1 = c.fp_c[k + 2];
  a.f1q = c.fp_c[k + 3];
  return a;
}

/* fp_arith whose transform leaves its output in doubles (forward, |v| < 11 q: ks2's
 * inner product takes them as they are) */
struct fp_arith_raw : fp_arith {
  __device__ __forceinline__ uint64_t store(T v, bool, bool, bool) const { return (uint64_t)__double_as_longlong(v); }
};

/* fp_arith whose transform reads doubles (their bits), not words (ks1 after conv_fill<true>:
 * inputs below 4 q in size, the forward passes' range) */
struct fp_arith_in : fp_arith {
  __device__ __forceinline__ T load(uint64_t bits, bool) const { return __longlong_as_double((long long)bits); }
};

/* where stage si's twiddles start among a pass's R - 1 (forward: stage si has 2^si
 * groups; inverse: R / 2^(si+1)) */
template <int R, bool FORWARD>
__host__ __device__ constexpr int pass_tw_offset(int si) {
  return FORWARD ? (1 << si) - 1 : R - (R >> si); /* inverse: R/2 + R/4 + .. over the stages before */
}

/* FIRST: src holds the transform's input words; LAST: dst takes its output words
 * (reduce: fully reduced; the FP64 arithmetic always reduces); FUSE: the pass holds the
 * transform's stage t = total / 2 (the first forward stage, the last inverse one), which
 * multiplies by R or scales. Compile-time flags: a runtime choice would issue both kinds
 * of butterfly, predicated, at every stage. PRE: the pass's twiddles are loaded before
 * its words, all at once, for passes whose twiddle rows are too large to stay in L1 (the
 * chunk stages): their latency then passes under the words' loads, and their FP64
 * quotients are formed from the twiddles (twiddle_formed: half the bytes). */
template <int R, bool FORWARD, bool FIRST, bool LAST, bool FUSE, bool PRE, class A>
__device__ __forceinline__ void ntt_pass(const ntt_view src, const ntt_view dst, int narr, int M, int log_tlo,
                                         const ntt_geom g, bool reduce, const A &ar) {
  constexpr int r = R == 8 ? 3 : R == 4 ? 2 : 1;
  const int t_lo = 1 << log_tlo;
  const int per = M / R;
  /* logical word indices fit 32 bits (N <= 2^17, offsets inside one row) */
  const uint32_t off = (uint32_t)g.offset, aoff = (uint32_t)g.aoff, total = (uint32_t)g.total;
  /* adjacent threads take adjacent words: across arrays when the arrays are
   * adjacent columns (astride 1), else along an array */
  const bool arrays_fast = src.astride == 1;
  /* narr and per are powers of two: shifts and masks, not divisions */
  const int log_narr = 31 - __clz(narr), log_per = 31 - __clz(per);
  for (int w = threadIdx.x; w < narr * per; w += blockDim.x) {
    const int a = arrays_fast ? w & (narr - 1) : w >> log_per;
    const int item = arrays_fast ? w >> log_narr : w & (per - 1);
    const int b = item >> log_tlo, q = item & (t_lo - 1);
    const int x0 = b * R * t_lo + q;
    /* base - q is a multiple of R t_lo (the offsets are multiples of the arrays' length
     * M >= R t_lo), so at a stage of half-size t = 2^log_t the words x0 + j t_lo of the
     * pass fall in groups (base >> (log_t + 1)) + (j >> (log_t + 1 - log_tlo)): one
     * twiddle per group, read once */
    const uint32_t base = off + (uint32_t)a * aoff + (uint32_t)x0;
    typename A::TW tws[R - 1];
    if constexpr (PRE) {
#pragma unroll
      for (int si = 0; si < r; ++si) {
        if (FUSE && si == (FORWARD ? 0 : r - 1)) continue;
        const int log_t = log_tlo + (FORWARD ? (r - 1 - si) : si);
        const uint32_t g0 = (total >> (log_t + 1)) + (base >> (log_t + 1));
        const int ng = FORWARD ? (1 << si) : (R >> (si + 1));
#pragma unroll
        for (int k = 0; k < ng; ++k) tws[pass_tw_offset<R, FORWARD>(si) + k] = ar.twiddle_formed(g0 + (uint32_t)k);
      }
    }
    typename A::T v[R];
#pragma unroll
    for (int j = 0; j < R; ++j) v[j] = ar.load(src.p[a * src.astride + (x0 + j * t_lo) * src.kstride], FIRST);
#pragma unroll
    for (int si = 0; si < r; ++si) {
      const int h = FORWARD ? (R >> (si + 1)) : (1 << si); /* pair distance, in j */
      const int log_t = log_tlo + (FORWARD ? (r - 1 - si) : si);
      const bool fused = FUSE && si == (FORWARD ? 0 : r - 1); /* the stage t = total / 2 */
      const uint32_t g0 = (total >> (log_t + 1)) + (base >> (log_t + 1));
      /* the 2^k groups of this stage among the R words: k = r - si (forward) or si + 1 */
      const int gshift = FORWARD ? (r - si) : (si + 1); /* j >> gshift is the group within the pass */
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (j & h) continue;
        const uint32_t gi = g0 + (uint32_t)(j >> gshift);
        if (fused) {
          if (FORWARD) ar.fwd_first(v[j], v[j + h]);
          else ar.inv_last(v[j], v[j + h]);
        } else {
          const typename A::TW t = PRE ? tws[pass_tw_offset<R, FORWARD>(si) + (j >> gshift)] : ar.twiddle(gi);
          if (FORWARD) ar.fwd(v[j], v[j + h], t);
          else ar.inv(v[j], v[j + h], t);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < R; ++j) dst.p[a * dst.astride + (x0 + j * t_lo) * dst.kstride] = ar.store(v[j], LAST, reduce, FORWARD);
  }
}

/* ntt_pass with its flags made compile-time (a fused stage is in the first forward or the
 * last inverse pass) */
template <int R, bool FORWARD, bool PRE, class A>
__device__ __forceinline__ void ntt_pass_of(const ntt_view src, const ntt_view dst, int narr, int M, int log_tlo,
                                            const ntt_geom g, bool first, bool last, bool fused, bool reduce,
                                            const A &ar) {
  constexpr bool F = FORWARD;
  if (first && last) {
    if (fused) ntt_pass<R, F, true, true, true, PRE>(src, dst, narr, M, log_tlo, g, reduce, ar);
    else ntt_pass<R, F, true, true, false, PRE>(src, dst, narr, M, log_tlo, g, reduce, ar);
  } else if (first) {
    if (F && fused) ntt_pass<R, F, true, false, F, PRE>(src, dst, narr, M, log_tlo, g, reduce, ar);
    else ntt_pass<R, F, true, false, false, PRE>(src, dst, narr, M, log_tlo, g, reduce, ar);
  } else if (last) {
    if (!F && fused) ntt_pass<R, F, false, true, !F, PRE>(src, dst, narr, M, log_tlo, g, reduce, ar);
    else ntt_pass<R, F, false, true, false, PRE>(src, dst, narr, M, log_tlo, g, reduce, ar);
  } else {
    ntt_pass<R, F, false, false, false, PRE>(src, dst, narr, M, log_tlo, g, reduce, ar);
  }
}

/* Every stage over the arrays (S = log2 M): forward t = M/2 .. 1, inverse
 * t = 1 .. M/2, in passes of up to 3 stages; the first pass reads src, the
 * last writes dst, the ones between work in place in shared memory `sm`
 * (kstride/astride of its view). fuse: the first forward stage multiplies by
 * R / the last inverse stage scales, when it is the transform's t = total/2.
 * reduce: forward outputs fully reduced. */
template <bool FORWARD, bool PRE = false, int MAX_LOG_R = 3, class A>
__device__ void ntt_stages_with(ntt_view src, ntt_view dst, ntt_view sm, int narr, int log_m, const ntt_geom g,
                                bool fuse, bool reduce, const A &ar) {
  static_assert(MAX_LOG_R == 2 || MAX_LOG_R == 3, "passes of 2 or 3 stages at most");
  const int M = 1 << log_m;
  int done = 0;
  ntt_view from = src;
  while (done < log_m) {
    const int rem = log_m - done;
    const int r = rem >= MAX_LOG_R ? MAX_LOG_R : rem;
    const bool first = done == 0, last = r == rem;
    const ntt_view to = last ? dst : sm;
    /* forward passes go down from t = M/2, inverse ones up from t = 1 */
    const int log_tlo = FORWARD ? (log_m - done - r) : done;
    /* the stage t = total / 2 is the arrays' first forward / last inverse stage when they
     * span the transform */
    const bool fused = fuse && log_m == g.log_total && (FORWARD ? first : last);
    if (MAX_LOG_R == 3 && r == 3)
      ntt_pass_of<MAX_LOG_R == 3 ? 8 : 4, FORWARD, PRE>(from, to, narr, M, log_tlo, g, first, last, fused, reduce && last, ar);
    else if (r == 2) ntt_pass_of<4, FORWARD, PRE>(from, to, narr, M, log_tlo, g, first, last, fused, reduce && last, ar);
    else ntt_pass_of<2, FORWARD, PRE>(from, to, narr, M, log_tlo, g, first, last, fused, reduce && last, ar);
    __syncthreads();
    from = sm;
    done += r;
  }
}

/* ntt_stages_with's forward passes over the column tile with the geometry known at compile
 * time: LOG_M stages over NTT_TILE >> LOG_M adjacent columns
 * (kstride NTT_TILE >> LOG_M in shared memory, astride 1, the arrays spanning the transform:
 * offsets 0, total 2^LOG_M), the first pass fused, outputs not reduced (ks1's column
 * stages), dst's kstride N2 = 2^LOG_N2. The passes are ntt_stages_with's (the same
 * ntt_pass instances, the same arithmetic in the same order: the same words), but their
 * strides, t_lo and twiddle indices are constants: shared-memory words at immediate
 * offsets from one address instead of an IMAD and a LEA (loads) or an IMAD and a wide
 * IMAD (generic stores: the runtime pass loop made `to` a generic pointer) a word, and no
 * runtime choice among the passes' variants. */
template <int LOG_M, int LOG_N2, int DONE = 0, class A>
__device__ __forceinline__ void ntt_col_fwd_fixed(uint64_t *sm, uint64_t *dst, const A &ar) {
  constexpr int REM = LOG_M - DONE, r = REM >= 3 ? 3 : REM;
  constexpr bool FIRST = DONE == 0, LAST = r == REM;
  constexpr int COLS = NTT_TILE >> LOG_M;
  const ntt_view sv = {sm, COLS, 1};
  const ntt_view dv = {dst, 1 << LOG_N2, 1};
  const ntt_geom g = {(int64_t)1 << LOG_M, 0, 0, LOG_M};
  ntt_pass<1 << r, true, FIRST, LAST, FIRST, false>(sv, LAST ? dv : sv, COLS, 1 << LOG_M, LOG_M - DONE - r, g, false, ar);
  __syncthreads();
  if constexpr (!LAST) ntt_col_fwd_fixed<LOG_M, LOG_N2, DONE + r>(sm, dst, ar);
}

/* ntt_stages_with's forward chunk stages as ks2 and md2 run them (PRE, not fused, the
 * outputs reduced: ntt_stages_with<true, true, MAX_LOG_R>(src, sm, sm, ..) with sm's view
 * {sm, 1, N2}) with the geometry known at compile time: LOG_M = log N2 stages over the
 * tile's NTT_TILE >> LOG_M chunks (kstride 1, astride N2 = 2^LOG_M) of a transform of
 * 2^LOG_N words (ntt_geom {2^LOG_N, base, N2}); the first pass reads src, the others
 * work in place in sm. The passes are ntt_stages_with's (the same ntt_pass instances with
 * the same R, flags, t_lo and reduce, in the same order: the same arithmetic, the same
 * words), but their strides, t_lo and loop shapes are constants and there is no runtime
 * choice among the passes' variants. The twiddle indices still depend on base (the tile's
 * place in the row), a runtime value. */
template <int LOG_N, int LOG_M, int MAX_LOG_R = 3, int DONE = 0, class A>
__device__ __forceinline__ void ntt_chunk_fwd_fixed(uint64_t *src, uint64_t *sm, int64_t base, const A &ar) {
  static_assert(MAX_LOG_R == 2 || MAX_LOG_R == 3, "passes of 2 or 3 stages at most");
  static_assert(LOG_M < LOG_N, "the chunk stages of a transform of more than one chunk (not fused)");
  constexpr int REM = LOG_M - DONE, r = REM >= MAX_LOG_R ? MAX_LOG_R : REM;
  constexpr bool FIRST = DONE == 0, LAST = r == REM;
  constexpr int CHUNKS = NTT_TILE >> LOG_M;
  const ntt_view from = {FIRST ? src : sm, 1, 1 << LOG_M};
  const ntt_view sv = {sm, 1, 1 << LOG_M};
  const ntt_geom g = {(int64_t)1 << LOG_N, base, (int64_t)1 << LOG_M, LOG_N};
  ntt_pass<1 << r, true, FIRST, LAST, false, true>(from, sv, CHUNKS, 1 << LOG_M, LOG_M - DONE - r, g, LAST, ar);
  __syncthreads();
  if constexpr (!LAST) ntt_chunk_fwd_fixed<LOG_N, LOG_M, MAX_LOG_R, DONE + r>(src, sm, base, ar);
}

/* The stages in the prime's arithmetic: FP64 when it has FP64 twiddle rows. */
template <bool FORWARD, bool PRE = false, int MAX_LOG_R = 3>
__device__ void ntt_stages(ntt_view src, ntt_view dst, ntt_view sm, int narr, int log_m, const ntt_geom g,
                           bool fuse, bool reduce, const fh_ckks_prime &c, const ntt_prime &P) {
  if (P.fw)
    ntt_stages_with<FORWARD, PRE, MAX_LOG_R>(src, dst, sm, narr, log_m, g, fuse, reduce, fp_arith_of(c, P, FORWARD));
  else ntt_stages_with<FORWARD, PRE, MAX_LOG_R>(src, dst, sm, narr, log_m, g, fuse, reduce, int_arith{P, c});
}

/* An arithmetic whose transform's output words (the last pass's stores to dst) are written as
 * a key switch's conversion sources (fh_ckks_ntt_args.scale: fh_ckks_ks_source_word of the
 * canonical word); the passes between are A's */
template <class A>
struct scaled_out : A {
  uint64_t sw, sws, sq;
  __device__ __forceinline__ uint64_t store(typename A::T v, bool words, bool reduce, bool forward) const {
    const uint64_t x = A::store(v, words, reduce, forward);
    return words ? fh_ckks_ks_source_word(x, sw, sws, sq) : x;
  }
};
template <class A>
__device__ __forceinline__ scaled_out<A> scaled_of(const A &ar, const uint64_t *scale, uint64_t q) {
  scaled_out<A> s;
  static_cast<A &>(s) = ar;
  s.sw = __ldg(scale);
  s.sws = __ldg(scale + 1);
  s.sq = q;
  return s;
}
/* ntt_stages of an inverse transform whose output is scaled (scale: the row's pair) */
template <int MAX_LOG_R = 3>
__device__ void intt_stages_scaled(ntt_view src, ntt_view dst, ntt_view sm, int narr, int log_m, const ntt_geom g,
                                   const fh_ckks_prime &c, const ntt_prime &P, const uint64_t *scale) {
  if (P.fw)
    ntt_stages_with<false, false, MAX_LOG_R>(src, dst, sm, narr, log_m, g, true, false,
                                             scaled_of(fp_arith_of(c, P, false), scale, c.q));
  else ntt_stages_with<false, false, MAX_LOG_R>(src, dst, sm, narr, log_m, g, true, false,
                                                scaled_of(int_arith{P, c}, scale, c.q));
}

/* N = N1 x N2 with N2 = 2^ceil(log N / 2) contiguous words per chunk and N1 rows:
 * the "column" kernel transforms the N2 columns (stride N2, the stages t >= N2),
 * the "chunk" kernel the N1 chunks (the stages t < N2). A block takes NTT_TILE words:
 * NTT_TILE / N1 adjacent columns, or NTT_TILE / N2 adjacent chunks. */
static_assert(NTT_TILE * sizeof(uint64_t) <= 48 * 1024, "an NTT tile fits the default shared memory");

struct ntt_split {
  int log_n1, log_n2;
};
__host__ __device__ __forceinline__ ntt_split ntt_split_of(int log_n) {
  ntt_split s;
  s.log_n2 = (log_n + 1) / 2;
  s.log_n1 = log_n - s.log_n2;
  return s;
}

/* Chunk grids. The chunk stages read their twiddle rows from DRAM (N per prime, too many
 * for L1), and the blocks of one tile and row in different groups (a ciphertext's two
 * components, a key switch's digits) read the same ones. Launched with the groups in z they
 * ran a whole grid apart, and each read the twiddles from DRAM again (ncu, N = 2^16: the
 * twiddles were half the bytes of the ciphertext NTT's chunk kernel and of the digits'
 * chunk stages). A chunk grid folds up to CHUNK_FOLD groups into blockIdx.x, group-minor
 * (x = tile * fold + the group's place), so that those blocks run side by side and the
 * twiddles come from DRAM once per fold; z walks the folds. */
constexpr int CHUNK_FOLD = 32;
dim3 chunk_grid(int64_t n, int rows, int64_t ngroups) {
  const int64_t fold = ngroups < CHUNK_FOLD ? ngroups : CHUNK_FOLD;
  return dim3((unsigned)(n / NTT_TILE * fold), (unsigned)rows, grid_z((ngroups + fold - 1) / fold));
}
/* a chunk-grid block's tile (its first word) and place in the fold */
struct chunk_place {
  int64_t base;
  int fold, slot;
};
__device__ __forceinline__ chunk_place chunk_place_of(int log_n) {
  const int fold = (int)(gridDim.x >> (log_n - NTT_TILE_LOG));
  const int tile = (int)(blockIdx.x / (unsigned)fold);
  return chunk_place{(int64_t)tile * NTT_TILE, fold, (int)blockIdx.x - tile * fold};
}
/* the groups of a chunk-grid block: its slot of every fold that z gives it */
#define CHUNK_GROUPS(g, ngroups, cp)                                                                                   \
  for (int64_t g = (int64_t)blockIdx.z * (cp).fold + (cp).slot; g < (ngroups); g += (int64_t)gridDim.z * (cp).fold)

/* A whole row (N <= NTT_TILE): every stage, global to global through shared memory.
 * SCALE (inverse): the rows l < a.nscale write the scaled words (scaled_out) */
template <bool FORWARD, bool SCALE = false>
__global__ void __launch_bounds__(NTT_THREADS) ntt_row_kernel(const __grid_constant__ fh_ckks_ntt_args a) {
  pdl_begin();
  __shared__ uint64_t sm[NTT_TILE];
  const int l = blockIdx.y;
  const int n = 1 << a.log_n;
  const fh_ckks_prime c = a.primes[a.prime[l]];
  const ntt_prime P = ntt_prime_of(a, l, FORWARD);
  const ntt_geom geo = {n, 0, 0, a.log_n};
  const uint64_t *scale = SCALE && l < a.nscale ? a.scale + 2 * l : NULL;
  GROUPS(g, a.ngroups) {
    const ntt_view src = {(uint64_t *)(a.in + g * a.in_gs + fh_ckks_ntt_in_off(&a, l)), 1, 0};
    const ntt_view dst = {a.out + g * a.out_gs + fh_ckks_ntt_out_off(&a, l), 1, 0};
    const ntt_view sv = {sm, 1, 0};
    if (SCALE && !FORWARD && scale) intt_stages_scaled(src, dst, sv, 1, a.log_n, geo, c, P, scale);
    else ntt_stages<FORWARD>(src, dst, sv, 1, a.log_n, geo, true, FORWARD, c, P);
  }
}

/* A key switch's digits' own rows (the split path with the input's NTT rows): row l of
 * digit digit[l] is the input's NTT row l, read from in_ntt (group stride in_ntt_gs) by
 * the inner product; ks1 and the chunk stages skip it. in_ntt NULL: no row is skipped. */
struct own_rows {
  const uint64_t *in_ntt;
  int64_t in_ntt_gs;
  int32_t ndigits;
  int32_t digit[FH_CKKS_MAX_PRIMES]; /* the digit whose own row l is, else -1 */
};
/* The generic launches' "no row skipped": an empty kernel argument, so that they do not
 * carry own_rows' ~530 bytes (the kernels take either, a template parameter) */
struct no_own_rows {};
/* the digit whose own row l is (-1: none), and that row of group g (the input's NTT row) */
__device__ __forceinline__ int own_digit_of(const own_rows &o, int l) { return o.in_ntt ? o.digit[l] : -1; }
__device__ __forceinline__ int own_digit_of(const no_own_rows &, int) { return -1; }
__device__ __forceinline__ const uint64_t *own_row_of(const own_rows &o, int64_t g, int l, int64_t n) {
  return o.in_ntt + g * o.in_ntt_gs + (int64_t)l * n;
}
__device__ __forceinline__ const uint64_t *own_row_of(const no_own_rows &, int64_t, int, int64_t) { return NULL; }
/* The inverse chunk kernel's "input formed from two ciphertexts" (fh_ckks_ntt_args.in_b:
 * multiply fused with relinearize): rows skipped none, each tile's words formed into shared
 * memory (and kept, for the rows below nkeep) before the stages */
struct tensor_in {};
__device__ __forceinline__ int own_digit_of(const tensor_in &, int) { return -1; }

/* The column kernel: NTT_TILE / N1 adjacent columns of the N1 x N2 matrix of a
 * row; forward reads in, inverse works in place on out. */
/* THREADS: NTT_THREADS (8 words a thread, passes of up to 3 stages, MINB blocks per SM) or
 * twice that (wide: 4 words a thread, passes of 2 stages, two blocks per SM: for small grids,
 * ntt_wide). MINB: blocks per SM that the registers allow at NTT_THREADS (3: 80 registers,
 * 4: 64; ntt_blocks chooses) */
/* SCALE (inverse): the rows l < a.nscale write the scaled words (scaled_out) */
template <bool FORWARD, int THREADS = NTT_THREADS, int MINB = 3, bool SCALE = false>
__global__ void __launch_bounds__(THREADS, THREADS == NTT_THREADS ? MINB : 2) ntt_col_kernel(const __grid_constant__ fh_ckks_ntt_args a) {
  pdl_begin();
  __shared__ uint64_t sm[NTT_TILE];
  const int l = blockIdx.y;
  const ntt_split sp = ntt_split_of(a.log_n);
  const int n2 = 1 << sp.log_n2, cols = NTT_TILE >> sp.log_n1;
  const int c0 = blockIdx.x * cols;
  const fh_ckks_prime c = a.primes[a.prime[l]];
  const ntt_prime P = ntt_prime_of(a, l, FORWARD);
  const ntt_geom geo = {(int64_t)1 << sp.log_n1, 0, 0, sp.log_n1};
  const uint64_t *scale = SCALE && l < a.nscale ? a.scale + 2 * l : NULL;
  GROUPS(g, a.ngroups) {
    const uint64_t *in = FORWARD ? a.in + g * a.in_gs : a.out + g * a.out_gs;
    const int64_t ioff = FORWARD ? fh_ckks_ntt_in_off(&a, l) : fh_ckks_ntt_out_off(&a, l);
    const ntt_view src = {(uint64_t *)(in + ioff + c0), n2, 1};
    const ntt_view dst = {a.out + g * a.out_gs + fh_ckks_ntt_out_off(&a, l) + c0, n2, 1};
    const ntt_view sv = {sm, cols, 1};
    if (SCALE && !FORWARD && scale)
      intt_stages_scaled<THREADS == NTT_THREADS ? 3 : 2>(src, dst, sv, cols, sp.log_n1, geo, c, P, scale);
    else ntt_stages<FORWARD, false, THREADS == NTT_THREADS ? 3 : 2>(src, dst, sv, cols, sp.log_n1, geo, true, false, c, P);
  }
}

/* The chunk kernel: NTT_TILE / N2 adjacent chunks of N2 words; forward works
 * in place on out and reduces, inverse reads in. */
/* own (in_ntt not NULL: the key switch's split path, a.ngroups = G x ndigits digits): the
 * digits' own rows are skipped */
template <bool FORWARD, int THREADS = NTT_THREADS, class OWN = no_own_rows, int MINB = 3>
__global__ void __launch_bounds__(THREADS, THREADS == NTT_THREADS ? MINB : 2) ntt_chunk_kernel(const __grid_constant__ fh_ckks_ntt_args a,
                                                                                       const __grid_constant__ OWN own) {
  pdl_begin();
  __shared__ uint64_t sm[NTT_TILE];
  const int l = blockIdx.y;
  const ntt_split sp = ntt_split_of(a.log_n);
  const int64_t n = (int64_t)1 << a.log_n;
  const int n2 = 1 << sp.log_n2, chunks = NTT_TILE >> sp.log_n2;
  const chunk_place cp = chunk_place_of(a.log_n); /* a chunk grid (chunk_grid) */
  const int64_t base = cp.base;
  const fh_ckks_prime c = a.primes[a.prime[l]];
  const ntt_prime P = ntt_prime_of(a, l, FORWARD);
  const ntt_geom geo = {n, base, n2, a.log_n};
  const int own_digit = own_digit_of(own, l);
  CHUNK_GROUPS(g, a.ngroups, cp) {
    if constexpr (std::is_same<OWN, own_rows>::value)
      if (own_digit >= 0 && g % own.ndigits == own_digit) continue;
    const uint64_t *in = FORWARD ? a.out + g * a.out_gs : a.in + g * a.in_gs;
    const int64_t ioff = FORWARD ? fh_ckks_ntt_out_off(&a, l) : fh_ckks_ntt_in_off(&a, l);
    ntt_view src = {(uint64_t *)(in + ioff + base), 1, n2};
    const ntt_view dst = {a.out + g * a.out_gs + fh_ckks_ntt_out_off(&a, l) + base, 1, n2};
    const ntt_view sv = {sm, 1, n2};
    if constexpr (std::is_same<OWN, tensor_in>::value) {
      /* the tile's input words formed from the two ciphertexts (the tensor product's words)
       * into shared memory, the same layout as the tile; kept for the rows below nkeep */
      const uint64_t *a0 = in + ioff + base, *b0 = a.in_b + g * a.in_b_gs + ioff + base;
      uint64_t *kp = l < a.nkeep ? a.keep + g * a.keep_gs + ((int64_t)l << a.log_n) + base : NULL;
      const int kind = a.prod[l];
      __syncthreads(); /* the previous group's stages are done with sm */
      for (int e = threadIdx.x; e < NTT_TILE; e += THREADS) {
        const uint64_t v = fh_ckks_tensor_word(kind, a0[e], a0[e + a.in_cs], b0[e], b0[e + a.in_b_cs], c.q, c.qinv);
        sm[e] = v;
        if (kp) kp[e] = v;
      }
      __syncthreads();
      src = sv;
    }
    ntt_stages<FORWARD, true, THREADS == NTT_THREADS ? 3 : 2>(src, dst, sv, chunks, sp.log_n2, geo, false, FORWARD, c, P);
  }
}

/* Whether an NTT of `blocks` tile blocks runs its kernels wide (twice the threads, 4 words
 * a thread, passes of 2 stages): when the grid leaves most SMs with one block or none,
 * twice the warps hide more of each pass's latency (as md1 and md2 at N <= 2^15).
 * FHELIUM_CUDA_NTTW=0 or 1 forces it off or on (a benchmarking aid). */
bool ntt_wide(unsigned blocks) {
  static const char *const kinds[] = {"0", "1", NULL};
  static const int m = env_switch("FHELIUM_CUDA_NTTW", kinds);
  if (m >= 0) return m == 1;
  return blocks < 2u * sms_here();
}

/* Blocks per SM of the NTT's column and chunk kernels and of md2 at NTT_THREADS: four (64
 * registers, at most 60 bytes of spills in the inverse column kernel), or three (80) with
 * FHELIUM_CUDA_NTTB=3 (a benchmarking aid). These kernels wait on their loads and barriers
 * (ncu at N = 2^16: 40-50% of the DRAM bandwidth at three): on an H100 (twelfth session,
 * 2026-12-07) four took the chunk stages of a ciphertext 49.8 -> 46.4 us, its column stages
 * 46.3 -> 43.5, md2 70.8 -> 66.7 and the hoisted digits' chunk stages 200 -> 185; in one run
 * the NTT of a ciphertext at 32768 slots 0.098 -> 0.093 ms, relinearize 0.786 -> 0.778, 8
 * hoisted rotations 3.312 -> 3.271, and nothing moved at 8192 slots (wide kernels there). */
int ntt_blocks() {
  static const char *const kinds[] = {"3", "4", NULL};
  static const int m = env_switch("FHELIUM_CUDA_NTTB", kinds);
  return m == 0 ? 3 : 4;
}

/* The column and chunk kernels of one transform of N > 2^NTT_TILE_LOG (forward: columns,
 * then chunks; inverse: chunks, then columns), at THREADS threads and MINB blocks per SM;
 * OWN: the chunk kernel's input (no_own_rows, or tensor_in: a tensor product's words) */
/* SCALE: the inverse's column kernel writes scaled rows (fh_ckks_ntt_args.scale) */
template <bool FORWARD, int THREADS, int MINB, class OWN, bool SCALE>
void ntt_pair(const fh_ckks_ntt_args &a, dim3 grid, dim3 cg, cudaStream_t h) {
  if (FORWARD) pdl(ntt_col_kernel<true, THREADS, MINB>, grid, THREADS, 0, h, a);
  pdl(ntt_chunk_kernel<FORWARD, THREADS, OWN, MINB>, cg, THREADS, 0, h, a, OWN{});
  if (!FORWARD) pdl(ntt_col_kernel<false, THREADS, MINB, SCALE>, grid, THREADS, 0, h, a);
}
/* ... wide (512 threads) below two blocks per SM, else at ntt_blocks() blocks per SM */
template <bool FORWARD, class OWN, bool SCALE = false>
void ntt_pair_of(const fh_ckks_ntt_args &a, dim3 grid, dim3 cg, cudaStream_t h) {
  if (ntt_wide(grid.x * grid.y * grid.z)) ntt_pair<FORWARD, 2 * NTT_THREADS, 3, OWN, SCALE>(a, grid, cg, h);
  else if (ntt_blocks() == 4) ntt_pair<FORWARD, NTT_THREADS, 4, OWN, SCALE>(a, grid, cg, h);
  else ntt_pair<FORWARD, NTT_THREADS, 3, OWN, SCALE>(a, grid, cg, h);
}

template <bool FORWARD>
fh_status run_ntt(const void *argp, void *stream) {
  const fh_ckks_ntt_args *a = (const fh_ckks_ntt_args *)argp;
  const char *why = fh_ckks_ntt_in_b_refusal(a, FORWARD);
  if (!why) why = fh_ckks_ntt_scale_refusal(a, FORWARD);
  if (why) return fh_error_set(FH_ERR_EXECUTION, "%s", why);
  if (a->ngroups <= 0 || a->nlimbs <= 0) return FH_OK;
  cudaStream_t h = (cudaStream_t)stream;
  const int64_t n = (int64_t)1 << a->log_n;
  const unsigned gz = grid_z(a->ngroups);
  /* rows with scaled outputs: the inverse's last kernel in its SCALE form */
  const bool scaled = !FORWARD && a->nscale > 0;
  if (a->log_n <= NTT_TILE_LOG) {
    const int threads = (int)(n / 8 < 32 ? 32 : n / 8);
    if (scaled) pdl(ntt_row_kernel<false, true>, dim3(1, a->nlimbs, gz), threads, 0, h, *a);
    else pdl(ntt_row_kernel<FORWARD>, dim3(1, a->nlimbs, gz), threads, 0, h, *a);
  } else {
    const dim3 grid((unsigned)(n / NTT_TILE), a->nlimbs, gz), cg = chunk_grid(n, a->nlimbs, a->ngroups);
    /* (in_b: the inverse of a tensor product's words, multiply fused with relinearize) */
    if (!FORWARD && a->in_b != NULL) {
      if (scaled) ntt_pair_of<false, tensor_in, true>(*a, grid, cg, h);
      else ntt_pair_of<false, tensor_in>(*a, grid, cg, h);
    } else if (scaled) {
      ntt_pair_of<false, no_own_rows, true>(*a, grid, cg, h);
    } else {
      ntt_pair_of<FORWARD, no_own_rows>(*a, grid, cg, h);
    }
  }
  return launched(FORWARD ? "kernel 'ckks_ntt'" : "kernel 'ckks_intt'");
}

fh_status k_ntt(const void *a, void *s) { return run_ntt<true>(a, s); }
fh_status k_intt(const void *a, void *s) { return run_ntt<false>(a, s); }

/* ==== element-wise =================================================================== */
template <int OP>
__global__ void __launch_bounds__(EW_THREADS) ew_kernel(const __grid_constant__ fh_ckks_ew_args a) {
  pdl_begin();
  const int l = blockIdx.y;
  const int64_t n = (int64_t)1 << a.log_n;
  const fh_ckks_prime &pr = a.primes[a.prime[l]];
  const uint64_t q = pr.q, qi = pr.qinv, r2 = pr.r2;
  const uint64_t k = a.k[l], c = a.c_const[l], cs = a.c_shoup[l];
  GROUPS(g, a.ngroups) {
    uint64_t *o = a.out + g * a.out_gs + (int64_t)l * n;
    const uint64_t *x = a.a + g * a.a_gs + (int64_t)l * a.a_ls;
    const uint64_t *y = a.b ? a.b + g * a.b_gs + (OP == FH_CKKS_EW_RESCALE ? 0 : (int64_t)l * n) : NULL;
    const uint64_t *z = a.c ? a.c + g * a.c_gs + (int64_t)l * n : NULL;
    COEFFS(j, n) {
      uint64_t r;
      if (OP == FH_CKKS_EW_COPY) r = x[j];
      else if (OP == FH_CKKS_EW_ADD) r = fh_mod_add(x[j], y[j], q);
      else if (OP == FH_CKKS_EW_SUB) r = fh_mod_sub(x[j], y[j], q);
      else if (OP == FH_CKKS_EW_NEG) r = fh_mod_neg(x[j], q);
      else if (OP == FH_CKKS_EW_MONT_MUL) r = fh_mont_mul(x[j], y[j], q, qi);
      else if (OP == FH_CKKS_EW_MONT_MAC) r = fh_mod_add(fh_mont_mul(x[j], y[j], q, qi), z[j], q);
      else if (OP == FH_CKKS_EW_MUL_CONST) r = fh_shoup_mul(x[j], c, cs, q);
      else if (OP == FH_CKKS_EW_ADD_CONST) r = fh_mod_add(x[j], k, q);
      else if (OP == FH_CKKS_EW_SUB_ADD_MUL) {
        r = fh_shoup_mul(x[j] + (q - y[j]) + k, c, cs, q);
        if (z) r = fh_mod_add(r, z[j], q);
      } else if (OP == FH_CKKS_EW_ADD_MUL_CONST) r = fh_mod_add(x[j], fh_shoup_mul(y[j], c, cs, q), q);
      else if (OP == FH_CKKS_EW_TO_MONT) r = fh_mont_from_std(x[j], q, qi, r2);
      else if (OP == FH_CKKS_EW_FROM_MONT) r = fh_mont_to_std(x[j], q, qi);
      else if (OP == FH_CKKS_EW_RESCALE) {
        /* v mod q: Shoup's product by 1 (floor(2^64 / q) is the Barrett ratio's high word) */
        const uint64_t v = y[j];
        uint64_t t = fh_shoup_mul(v, 1, pr.bar.ratio_hi, q);
        if (v > a.drop_half) t = fh_mod_sub(t, k, q);
        r = fh_shoup_mul(x[j] + (q - t), c, cs, q);
      } else { /* FH_CKKS_EW_SIGNED */
        const int64_t v = (int64_t)x[j];
        const uint64_t m = fh_barrett128(v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, 0, &pr.bar);
        r = v < 0 ? fh_mod_neg(m, q) : m;
      }
      o[j] = r;
    }
  }
}

template <int OP>
void launch_ew(const fh_ckks_ew_args *a, cudaStream_t h) {
  const int64_t n = (int64_t)1 << a->log_n;
  const int threads = n < EW_THREADS ? (n > 32 ? (int)n : 32) : EW_THREADS;
  pdl(ew_kernel<OP>, dim3(blocks_for(n, threads), a->nlimbs, grid_z(a->ngroups)), threads, 0, h, *a);
}

fh_status k_ew(const void *argp, void *stream) {
  const fh_ckks_ew_args *a = (const fh_ckks_ew_args *)argp;
  if (a->ngroups <= 0 || a->nlimbs <= 0) return FH_OK;
  cudaStream_t h = (cudaStream_t)stream;
  switch (a->op) {
    case FH_CKKS_EW_COPY:
      /* out == a (a row copied onto itself) is a no-op, as memmove */
      if (a->out == a->a && a->out_gs == a->a_gs && a->a_ls == ((int64_t)1 << a->log_n)) return FH_OK;
      launch_ew<FH_CKKS_EW_COPY>(a, h);
      break;
    case FH_CKKS_EW_ADD: launch_ew<FH_CKKS_EW_ADD>(a, h); break;
    case FH_CKKS_EW_SUB: launch_ew<FH_CKKS_EW_SUB>(a, h); break;
    case FH_CKKS_EW_NEG: launch_ew<FH_CKKS_EW_NEG>(a, h); break;
    case FH_CKKS_EW_MONT_MUL: launch_ew<FH_CKKS_EW_MONT_MUL>(a, h); break;
    case FH_CKKS_EW_MONT_MAC: launch_ew<FH_CKKS_EW_MONT_MAC>(a, h); break;
    case FH_CKKS_EW_MUL_CONST: launch_ew<FH_CKKS_EW_MUL_CONST>(a, h); break;
    case FH_CKKS_EW_ADD_CONST: launch_ew<FH_CKKS_EW_ADD_CONST>(a, h); break;
    case FH_CKKS_EW_SUB_ADD_MUL: launch_ew<FH_CKKS_EW_SUB_ADD_MUL>(a, h); break;
    case FH_CKKS_EW_ADD_MUL_CONST: launch_ew<FH_CKKS_EW_ADD_MUL_CONST>(a, h); break;
    case FH_CKKS_EW_TO_MONT: launch_ew<FH_CKKS_EW_TO_MONT>(a, h); break;
    case FH_CKKS_EW_FROM_MONT: launch_ew<FH_CKKS_EW_FROM_MONT>(a, h); break;
    case FH_CKKS_EW_SIGNED: launch_ew<FH_CKKS_EW_SIGNED>(a, h); break;
    case FH_CKKS_EW_RESCALE: launch_ew<FH_CKKS_EW_RESCALE>(a, h); break;
    default: return fh_error_set(FH_ERR_EXECUTION, "ckks_ew: invalid operation %d", (int)a->op);
  }
  return launched("kernel 'ckks_ew'");
}

/* ==== tensor product ================================================================= */
__global__ void __launch_bounds__(EW_THREADS) tensor_kernel(const __grid_constant__ fh_ckks_tensor_args a) {
  pdl_begin();
  const int l = blockIdx.y;
  const int64_t n = (int64_t)1 << a.log_n, off = (int64_t)l * n;
  const fh_ckks_prime &pr = a.primes[a.prime[l]];
  const uint64_t q = pr.q, qi = pr.qinv;
  GROUPS(g, a.ngroups) {
    const uint64_t *a0 = a.a + g * a.a_gs + off, *a1 = a0 + a.a_cs;
    const uint64_t *b0 = a.b + g * a.b_gs + off, *b1 = b0 + a.b_cs;
    uint64_t *d0 = a.out + g * a.out_gs + off, *d1 = d0 + a.out_cs, *d2 = d1 + a.out_cs;
    COEFFS(j, n) {
      const uint64_t x0 = a0[j], x1 = a1[j], y0 = b0[j], y1 = b1[j];
      d0[j] = fh_ckks_tensor_word(FH_CKKS_PROD_00, x0, x1, y0, y1, q, qi);
      d1[j] = fh_ckks_tensor_word(FH_CKKS_PROD_X, x0, x1, y0, y1, q, qi);
      d2[j] = fh_ckks_tensor_word(FH_CKKS_PROD_11, x0, x1, y0, y1, q, qi);
    }
  }
}

fh_status k_tensor(const void *argp, void *stream) {
  const fh_ckks_tensor_args *a = (const fh_ckks_tensor_args *)argp;
  if (a->ngroups <= 0 || a->nlimbs <= 0) return FH_OK;
  const int64_t n = (int64_t)1 << a->log_n;
  const int threads = n < EW_THREADS ? (n > 32 ? (int)n : 32) : EW_THREADS;
  pdl(tensor_kernel, dim3(blocks_for(n, threads), a->nlimbs, grid_z(a->ngroups)), threads, 0, (cudaStream_t)stream, *a);
  return launched("kernel 'ckks_tensor'");
}

/* ==== fast base conversion ===========================================================
 * One thread per coefficient; blockIdx.y takes a chunk of at most BCONV_TARGETS
 * target rows (for mod-up: a digit and a chunk of its targets), so the targets
 * of a conversion spread over blocks. The scaled source residues
 * y_i = [x_i shat_inv_i]_{s_i} go to shared memory (one column per thread);
 * each target sums y_i (Shat_i mod t) in 128 bits, reduced every 16 terms
 * (each product < 2^124). With `center`, v = #{i : y_i > s_i / 2} and the sum
 * loses v (S mod t); S mod t = Shat_0 s_0 mod t is computed once per block and
 * target (a 64-bit remainder is slow on the GPU). */
constexpr int BCONV_THREADS = 128;
constexpr int BCONV_THREADS_WIDE = 32; /* when nsrc > BCONV_WIDE_SRC */
constexpr int BCONV_WIDE_SRC = 48;
constexpr int BCONV_TARGETS = 16;      /* target rows per block */

struct bconv_src {
  const uint64_t *in;   /* the group's input */
  uint64_t *copy;       /* the group's output, when the source rows are copied (else NULL) */
  const int32_t *row, *out_row, *prime;
  int first;            /* rows and primes are first + i when row == NULL (mod-up) */
  const int32_t *prime_of_row;
};
__device__ __forceinline__ int src_row(const bconv_src &s, int i) { return s.row ? s.row[i] : s.first + i; }
__device__ __forceinline__ int src_out_row(const bconv_src &s, int i) { return s.out_row ? s.out_row[i] : s.first + i; }
__device__ __forceinline__ int src_prime(const bconv_src &s, int i) {
  return s.prime ? s.prime[i] : s.prime_of_row[s.first + i];
}

/* targets [t0, t1): row and prime of target t */
struct bconv_dst {
  uint64_t *out;
  const int32_t *row, *prime; /* row == NULL: mod-up, target t is row t (< first) or t + ns */
  int first, ns;
  const int32_t *prime_of_row;
};
__device__ __forceinline__ int dst_row(const bconv_dst &d, int t) {
  return d.row ? d.row[t] : (t < d.first ? t : t + d.ns);
}
__device__ __forceinline__ int dst_prime(const bconv_dst &d, int t) {
  return d.row ? d.prime[t] : d.prime_of_row[dst_row(d, t)];
}

/* the per-block part: S mod t for the block's targets into smt (center only) */
__device__ __forceinline__ void bconv_block_consts(const bconv_src &S, const bconv_dst &D, const uint64_t *mat,
                                                   int ns, int t0, int t1, const fh_ckks_prime *primes, bool center,
                                                   uint64_t *smt) {
  if (center && ns > 0)
    for (int t = t0 + threadIdx.x; t < t1; t += blockDim.x) {
      const fh_modulus m = primes[dst_prime(D, t)].bar;
      smt[t - t0] = fh_mod_mul(mat[(int64_t)t * ns], primes[src_prime(S, 0)].q, &m);
    }
  __syncthreads();
}

__device__ __forceinline__ void bconv_coeff(int64_t j, int64_t n, int ns, int t0, int t1, const bconv_src &S,
                                            const bconv_dst &D, const uint64_t *consts,
                                            const fh_ckks_prime *primes, bool center, uint64_t *ys,
                                            const uint64_t *smt, bool copy) {
  const uint64_t *shat_inv = consts, *mat = consts + 2 * ns;
  uint32_t v = 0;
  for (int i = 0; i < ns; ++i) {
    const uint64_t x = S.in[(int64_t)src_row(S, i) * n + j];
    if (copy) S.copy[(int64_t)src_out_row(S, i) * n + j] = x;
    const uint64_t q = primes[src_prime(S, i)].q;
    const uint64_t y = fh_shoup_mul(x, shat_inv[2 * i], shat_inv[2 * i + 1], q);
    ys[i * blockDim.x + threadIdx.x] = y;
    v += y > (q >> 1); /* (s_i - 1) / 2: s_i is odd */
  }
  for (int t = t0; t < t1; ++t) {
    const fh_modulus m = primes[dst_prime(D, t)].bar;
    const uint64_t *row = mat + (int64_t)t * ns;
    uint64_t r = 0;
    for (int i0 = 0; i0 < ns; i0 += 16) {
      unsigned __int128 acc = 0;
      const int i1 = i0 + 16 < ns ? i0 + 16 : ns;
      for (int i = i0; i < i1; ++i) acc += (unsigned __int128)ys[i * blockDim.x + threadIdx.x] * row[i];
      r = fh_mod_add(r, fh_barrett128((uint64_t)acc, (uint64_t)(acc >> 64), &m), m.q);
    }
    if (center && v) r = fh_mod_sub(r, fh_mod_mul(v, smt[t - t0], &m), m.q);
    D.out[(int64_t)dst_row(D, t) * n + j] = r;
  }
}

__global__ void bconv_kernel(const __grid_constant__ fh_ckks_bconv_args a) {
  pdl_begin();
  extern __shared__ uint64_t sh[]; /* smt[BCONV_TARGETS], then ys[nsrc][blockDim.x] */
  uint64_t *smt = sh, *ys = sh + BCONV_TARGETS;
  const int64_t n = (int64_t)1 << a.log_n;
  const int ns = a.nsrc;
  const int t0 = blockIdx.y * BCONV_TARGETS, t1 = t0 + BCONV_TARGETS < a.ndst ? t0 + BCONV_TARGETS : a.ndst;
  const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  bconv_src S = {NULL, NULL, a.src_row, a.src_out_row, a.src_prime, 0, NULL};
  bconv_dst D = {NULL, a.dst_row, a.dst_prime, 0, 0, NULL};
  bconv_block_consts(S, D, a.consts + 2 * ns, ns, t0, t1, a.primes, a.center, smt);
  /* the source rows are copied by the first target chunk only */
  const bool copy = a.copy_src && blockIdx.y == 0;
  GROUPS(g, a.ngroups) {
    S.in = a.in + g * a.in_gs;
    S.copy = a.out + g * a.out_gs;
    D.out = a.out + g * a.out_gs;
    if (j < n) bconv_coeff(j, n, ns, t0, t1, S, D, a.consts, a.primes, a.center, ys, smt, copy);
  }
}

fh_status k_bconv(const void *argp, void *stream) {
  const fh_ckks_bconv_args *a = (const fh_ckks_bconv_args *)argp;
  if (a->ngroups <= 0) return FH_OK;
  const int64_t n = (int64_t)1 << a->log_n;
  const int threads = a->nsrc > BCONV_WIDE_SRC ? BCONV_THREADS_WIDE : BCONV_THREADS;
  const int chunks = a->ndst > 0 ? (a->ndst + BCONV_TARGETS - 1) / BCONV_TARGETS : 1;
  const size_t smem = (BCONV_TARGETS + (size_t)(a->nsrc > 0 ? a->nsrc : 1) * threads) * sizeof(uint64_t);
  pdl(bconv_kernel, dim3(blocks_for(n, threads), chunks, grid_z(a->ngroups)), threads, smem, (cudaStream_t)stream, *a);
  return launched("kernel 'ckks_bconv'");
}

/* ==== mod-up of every digit ===========================================================
 * blockIdx.y is (digit, chunk of its targets): the digit's rows are copied (by
 * its first chunk) and converted to every other row. */
__global__ void modup_kernel(const __grid_constant__ fh_ckks_modup_args a, int chunks) {
  pdl_begin();
  extern __shared__ uint64_t sh[];
  uint64_t *smt = sh, *ys = sh + BCONV_TARGETS;
  const int64_t n = (int64_t)1 << a.log_n;
  const int jd = blockIdx.y / chunks, chunk = blockIdx.y - jd * chunks;
  const int ns = a.nsrc[jd], f = a.first[jd], nd = a.nrows - ns;
  const int t0 = chunk * BCONV_TARGETS, t1 = t0 + BCONV_TARGETS < nd ? t0 + BCONV_TARGETS : nd;
  if (t0 >= nd && chunk > 0) return; /* digits with fewer targets than the widest */
  const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  bconv_src S = {NULL, NULL, NULL, NULL, NULL, f, a.prime};
  bconv_dst D = {NULL, NULL, NULL, f, ns, a.prime};
  bconv_block_consts(S, D, a.consts[jd] + 2 * ns, ns, t0, t1, a.primes, a.center, smt);
  GROUPS(g, a.ngroups) {
    S.in = a.in + g * a.in_gs;
    S.copy = a.out + g * a.out_gs + (int64_t)jd * a.out_ds;
    D.out = S.copy;
    if (j < n) bconv_coeff(j, n, ns, t0, t1, S, D, a.consts[jd], a.primes, a.center, ys, smt, chunk == 0);
  }
}

fh_status k_modup(const void *argp, void *stream) {
  const fh_ckks_modup_args *a = (const fh_ckks_modup_args *)argp;
  if (a->ngroups <= 0 || a->ndigits <= 0) return FH_OK;
  const int64_t n = (int64_t)1 << a->log_n;
  int most = 1, most_dst = 1;
  for (int j = 0; j < a->ndigits; ++j) {
    most = a->nsrc[j] > most ? a->nsrc[j] : most;
    most_dst = a->nrows - a->nsrc[j] > most_dst ? a->nrows - a->nsrc[j] : most_dst;
  }
  const int threads = most > BCONV_WIDE_SRC ? BCONV_THREADS_WIDE : BCONV_THREADS;
  const int chunks = (most_dst + BCONV_TARGETS - 1) / BCONV_TARGETS;
  const size_t smem = (BCONV_TARGETS + (size_t)most * threads) * sizeof(uint64_t);
  pdl(modup_kernel, dim3(blocks_for(n, threads), a->ndigits * chunks, grid_z(a->ngroups)), threads, smem, (cudaStream_t)stream, *a, chunks);
  return launched("kernel 'ckks_modup'");
}

/* ==== the key-switch core: mod-up + NTT + inner product ================================
 * ks1: a block per (digit, row, column tile) fills the tile with the digit's row
 *      (its own rows copied, the others converted as modup_kernel does, coefficient by
 *      coefficient) and runs the NTT's column stages on it into the scratch;
 * ks2: a block per (row, chunk tile) runs, digit after digit, the chunk stages on the
 *      scratch tile and accumulates the product with the key's two rows, then writes
 *      both outputs: the transformed digits never go back to memory.
 * Small rings (N <= NTT_TILE) run the three kernels in turn. */
constexpr uint64_t KS_FLAG = FH_CKKS_KS_FLAG;

/* The centred conversion of one coefficient (ks1, md1) from the flagged scaled source
 * residues y_i = base[off[i] + j] (ks0, md0: bit 63 is the lift's flag, y_i > s_i / 2) to
 * the target prime t of c: sum_i y_i (Shat_i mod t) - v (S mod t), v the flags counted.
 * The block's constants (conv_consts) hold the row's factors in Montgomery form,
 * rowm[i] = (Shat_i mod t) R mod t, so a sum of four products (each < 2^62 t: the
 * sources are below 2^62) takes one Montgomery reduction, exact and in [0, t);
 * corr[v] = v S mod t. */
struct conv_consts {
  uint64_t rowm[FH_CKKS_MAX_PRIMES];
  int64_t off[FH_CKKS_MAX_PRIMES];
  uint64_t corr[FH_CKKS_MAX_PRIMES + 1];
  uint64_t smt;
  /* in doubles (conv_flagged_fp_n): the factors Shat_i mod t, their quotients by t, corr */
  double rowd[FH_CKKS_MAX_PRIMES], rowq[FH_CKKS_MAX_PRIMES], corrd[FH_CKKS_MAX_PRIMES + 1];
  /* raw: one source read as it is, not from ks0's or md0's scaled rows: conv_fill scales it
   * by shat_inv (rw, Shoup companion rws, modulo rq) and flags its lift on load, what ks0
   * and md0 would have written (the same words, one launch fewer) */
  uint64_t rw, rws, rq;
  /* lift (a fused rescale's md1, fh_ckks_moddown_args.rescale): P [y0]_t added to each
   * conversion, y0 the word at loff from the sources' base: y0 P (Montgomery, lpr = P R mod
   * t), minus lpq = P q_0 mod t when y0 > lhalf = q_0 / 2 */
  uint64_t lpr, lpq, lhalf;
  int64_t loff;
  /* lift computed on load (LIFT 2: one raw source, md0r skipped): y0 = (u0 - conv_0) w0 + v0
   * mod q_0 as md0r computes it, u0 the word at loff, conv_0 the source's conversion to q_0
   * (l0mat = Shat_0 mod q_0, minus l0smt = S mod q_0 for a flagged source) */
  fh_modulus l0bar;
  uint64_t l0q, l0mat, l0smt, l0w, l0ws;
};

__device__ __forceinline__ uint64_t conv_lift(uint64_t r, uint64_t y0, const conv_consts &k, const fh_ckks_prime &c) {
  uint64_t t = fh_mont_mul(y0, k.lpr, c.q, c.qinv);
  if (y0 > k.lhalf) t = fh_mod_sub(t, k.lpq, c.q);
  return fh_mod_add(r, t, c.q);
}

/* the word ks0 / md0 make of a raw source word x (conv_consts.raw) */
__device__ __forceinline__ uint64_t conv_raw(uint64_t x, const conv_consts &k) {
  return fh_ckks_ks_source_word(x, k.rw, k.rws, k.rq);
}

/* every thread of the block: row the target's factors (Shat_i mod t), s0 the first
 * source prime; source i is row src_row[i] (i when src_row is NULL) of N words; fp: the
 * doubles of conv_flagged_fp_n too */
/* raw (NULL: none): the one source's (shat_inv, Shoup companion) to apply on load (conv_raw) */
__device__ __forceinline__ void conv_consts_init(conv_consts &k, const uint64_t *row, int ns, uint64_t s0,
                                                 const int32_t *src_row, int64_t n, const fh_ckks_prime &c,
                                                 bool center, bool fp, const uint64_t *raw = NULL) {
  if (raw && threadIdx.x == 0) {
    k.rw = raw[0];
    k.rws = raw[1];
    k.rq = s0;
  }
  for (int i = threadIdx.x; i < ns; i += blockDim.x) {
    k.rowm[i] = fh_shoup_mul(row[i], c.r1, c.r1_shoup, c.q);
    k.off[i] = (int64_t)(src_row ? src_row[i] : i) * n;
    if (fp) {
      k.rowd[i] = (double)row[i];
      k.rowq[i] = fh_fp_twiddle(row[i], c.q);
    }
  }
  /* S mod t: Shat_0 s_0, s_0 >= t allowed (fh_barrett128 takes any product below 2^128: no
   * 64-bit remainder, a serial call of ~70 instructions before the block's barrier) */
  if (center && threadIdx.x == 0) k.smt = fh_mod_mul(row[0], s0, &c.bar);
  __syncthreads();
  if (center)
    for (int m = threadIdx.x; m <= ns; m += blockDim.x) k.corr[m] = fh_mod_mul((uint64_t)m, k.smt, &c.bar);
  if (fp)
    for (int m = threadIdx.x; m <= ns; m += blockDim.x) k.corrd[m] = center ? (double)k.corr[m] : 0.0;
  __syncthreads();
}

__device__ __forceinline__ uint64_t conv_flagged(const uint64_t *base, int64_t j, int ns, const conv_consts &k,
                                                 const fh_ckks_prime &c, bool center) {
  uint32_t cnt = 0;
  uint64_t r = 0;
  for (int i0 = 0; i0 < ns; i0 += 4) {
    const int i1 = i0 + 4 < ns ? i0 + 4 : ns;
    unsigned __int128 acc = 0;
    for (int i = i0; i < i1; ++i) {
      const uint64_t yv = base[k.off[i] + j];
      cnt += (uint32_t)(yv >> 63);
      acc += (unsigned __int128)(yv & ~KS_FLAG) * k.rowm[i];
    }
    r = fh_mod_add(r, fh_mont_reduce((uint64_t)acc, (uint64_t)(acc >> 64), c.q, c.qinv), c.q);
  }
  if (center && cnt) r = fh_mod_sub(r, k.corr[cnt], c.q);
  return r;
}

/* conv_flagged for NS <= 4 sources known at compile time, from the NS words y[i] of one
 * coefficient (source i's): one Montgomery reduction */
template <int NS>
__device__ __forceinline__ uint64_t conv_flagged_n(const uint64_t *y, const conv_consts &k, const fh_ckks_prime &c,
                                                   bool center) {
  uint32_t cnt = 0;
  unsigned __int128 acc = 0;
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    cnt += (uint32_t)(y[i] >> 63);
    acc += (unsigned __int128)(y[i] & ~KS_FLAG) * k.rowm[i];
  }
  uint64_t r = fh_mont_reduce((uint64_t)acc, (uint64_t)(acc >> 64), c.q, c.qinv);
  if (center && cnt) r = fh_mod_sub(r, k.corr[cnt], c.q);
  return r;
}

/* conv_flagged_n in doubles (fh_fp_conv_term) for a target below 2^45 and sources below
 * 2^50: the bits of a double below (0.63 NS + 1) t in size, for the NTT's first pass to
 * read as it is (fp_arith_in). The same doubles as fh_fp_conv_term, in fewer instructions:
 * - a word's double: b = y | 2^52's bits keeps the flag in bit 63 (the sign), and |b| (a
 *   free operand modifier of DADD) has the bits (y & ~flag) | 2^52's bits that
 *   fh_fp_of_word forms (there: two LOP3s and a register-pair move a term); x - 2^52 is
 *   x + (-2^52) exactly. The flags are counted from b, so that y is dead after the OR;
 * - the sum starts from the first term, not from 0 + term: a term is never -0 (x, w, wq
 *   >= 0, so t and h are +0 or positive, and the exact zeros of l = x w - h and of
 *   h - t q, and their sum's, are +0 in round-to-nearest), and 0 + r == r for every
 *   other r, so the DADD dropped changes no bit. */
__device__ __forceinline__ double conv_term_fp(uint64_t b, double w, double wq, double t) {
  const double x = __dadd_rn(fabs(__longlong_as_double((long long)b)), -FH_FP_TWO52);
  return fh_fp_mul(x, w, wq, t);
}
template <int NS>
__device__ __forceinline__ uint64_t conv_flagged_fp_n(const uint64_t *y, const conv_consts &k,
                                                      const fh_ckks_prime &c) {
  static_assert(NS >= 1, "one source at least");
  uint64_t b[NS];
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    /* opaque to the compiler: else it counts the flag from y (b >> 63 == y >> 63), y stays
     * live, and b's high word takes another register, which costs a move a term to pair
     * it with the low word for the DADD */
    b[i] = y[i];
    asm("or.b64 %0, %0, 0x4330000000000000;" : "+l"(b[i]));
  }
  uint32_t cnt = (uint32_t)(b[0] >> 63);
  double acc = conv_term_fp(b[0], k.rowd[0], k.rowq[0], c.fp_q);
#pragma unroll
  for (int i = 1; i < NS; ++i) {
    cnt += (uint32_t)(b[i] >> 63);
    acc = __dadd_rn(acc, conv_term_fp(b[i], k.rowd[i], k.rowq[i], c.fp_q));
  }
  return (uint64_t)__double_as_longlong(__dsub_rn(acc, k.corrd[cnt]));
}

/* ks1 / md1: fill the column tile sm (NTT_TILE words: cols adjacent columns of the
 * N1 x N2 row, column-major in sm) with the row's conversion from ns sources at base
 * (their words at base + off[i]); a block of NTT_THREADS threads. With NS known, a thread
 * loads the words of CONV_LOADS / NS of its coefficients (at least one) before any product (the loads are
 * L2 hits whose latency one coefficient's products cannot cover), and the sources'
 * pointers to column c0 are formed once, so a word costs one 32-bit offset (its row in
 * the tile times N2 plus its column) and a wide add. FP: the conversion in doubles
 * (conv_flagged_fp_n; NS from 1 to 4 only). */
/* LIFT (md1 of a fused rescale): 1, y0 read at k.loff (md0r's row); 2, y0 computed on load
 * from u0 at k.loff and v0 (NULL: zero; RAW with one source only) */
template <bool FP, int NS, int CONV_LOADS, int THREADS, bool RAW = false, int LIFT = 0>
__device__ __forceinline__ void conv_fill_n(uint64_t *sm, const uint64_t *base, int ns, const conv_consts &k,
                                            const fh_ckks_prime &c, bool center, int log_cols, int n2, int c0,
                                            const uint64_t *v0 = NULL) {
  static_assert(LIFT != 2 || (RAW && NS == 1 && !FP), "the lift on load takes one raw source");
  const int cols = 1 << log_cols;
  if constexpr (NS > 0) {
    constexpr int E = CONV_LOADS / NS > 0 ? CONV_LOADS / NS : 1; /* coefficients per round */
    constexpr int PER = NTT_TILE / THREADS;
    static_assert(THREADS % 32 == 0, "a round of the block spans whole rows of the tile");
    /* coefficient e = tid + it THREADS of the tile is row e >> log_cols, column
     * e & (cols - 1); cols divides THREADS, so round it is the thread's first word
     * plus it (THREADS / cols) rows: a pointer per source and one 32-bit step */
    const uint32_t j0 = (uint32_t)((threadIdx.x >> log_cols) * n2 + (threadIdx.x & (cols - 1)));
    const uint32_t step = (uint32_t)(THREADS >> log_cols) * (uint32_t)n2;
    const uint64_t *src[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      src[i] = base + k.off[i] + c0 + j0;
      /* an opaque pointer: else the compiler rebuilds every address from base in 64-bit
       * integer steps (four instructions a word instead of one) */
      asm("mov.b64 %0, %0;" : "+l"(src[i]));
    }
    const uint64_t *lsrc = LIFT ? base + k.loff + c0 + j0 : NULL;
    const uint64_t *vsrc = LIFT == 2 && v0 ? v0 + c0 + j0 : NULL;
    for (int it0 = 0; it0 < PER; it0 += E) {
      uint64_t y[E][NS];
#pragma unroll
      for (int m = 0; m < E; ++m) {
        const uint32_t j = (uint32_t)(it0 + m) * step;
#pragma unroll
        for (int i = 0; i < NS; ++i) y[m][i] = (it0 + m < PER) ? src[i][j] : 0;
      }
      if constexpr (RAW && NS == 1) {
#pragma unroll
        for (int m = 0; m < E; ++m) y[m][0] = conv_raw(y[m][0], k);
      }
      uint64_t y0[LIFT ? E : 1];
      if constexpr (LIFT) {
#pragma unroll
        for (int m = 0; m < E; ++m) y0[m] = (it0 + m < PER) ? lsrc[(uint32_t)(it0 + m) * step] : 0;
      }
      if constexpr (LIFT == 2) {
        /* y0[m] holds u0: md0r's y0 from it, the scaled source and v0 */
        uint64_t vv[E];
#pragma unroll
        for (int m = 0; m < E; ++m) vv[m] = (vsrc && it0 + m < PER) ? vsrc[(uint32_t)(it0 + m) * step] : 0;
#pragma unroll
        for (int m = 0; m < E; ++m) {
          const uint64_t ys = y[m][0] & ~KS_FLAG;
          uint64_t cv = fh_mod_mul(ys, k.l0mat, &k.l0bar);
          if (center && (y[m][0] & KS_FLAG)) cv = fh_mod_sub(cv, k.l0smt, k.l0q);
          y0[m] = fh_ckks_rescale_y0(y0[m], cv, vv[m], k.l0w, k.l0ws, k.l0q);
        }
      }
#pragma unroll
      for (int m = 0; m < E; ++m)
        if (it0 + m < PER) {
          uint64_t r = FP ? conv_flagged_fp_n<NS>(y[m], k, c) : conv_flagged_n<NS>(y[m], k, c, center);
          if constexpr (LIFT) r = conv_lift(r, y0[m], k, c);
          sm[threadIdx.x + (it0 + m) * THREADS] = r;
        }
    }
  } else {
    for (int it = 0; it < NTT_TILE / THREADS; ++it) {
      const int e = threadIdx.x + it * THREADS;
      const int64_t j = (int64_t)(e >> log_cols) * n2 + c0 + (e & (cols - 1));
      uint64_t r = conv_flagged(base, j, ns, k, c, center);
      if constexpr (LIFT) r = conv_lift(r, base[k.loff + j], k, c);
      sm[e] = r;
    }
  }
}
/* FP needs 1 to 4 sources (ks1 checks); the integer conversion takes any number; a
 * block of THREADS threads */
/* RAW: one source, scaled on load (conv_raw; the caller has checked ns == 1) */
template <bool FP, int LOADS, int THREADS = NTT_THREADS, bool RAW = false, int LIFT = 0>
__device__ __forceinline__ void conv_fill(uint64_t *sm, const uint64_t *base, int ns, const conv_consts &k,
                                          const fh_ckks_prime &c, bool center, int log_cols, int n2, int c0,
                                          const uint64_t *v0 = NULL) {
  if constexpr (RAW) {
    conv_fill_n<FP, 1, LOADS, THREADS, true, LIFT>(sm, base, 1, k, c, center, log_cols, n2, c0, v0);
  } else {
    static_assert(LIFT != 2, "the lift on load takes one raw source");
    switch (ns) {
    case 1: conv_fill_n<FP, 1, LOADS, THREADS, false, LIFT>(sm, base, ns, k, c, center, log_cols, n2, c0); break;
    case 2: conv_fill_n<FP, 2, LOADS, THREADS, false, LIFT>(sm, base, ns, k, c, center, log_cols, n2, c0); break;
    case 3: conv_fill_n<FP, 3, LOADS, THREADS, false, LIFT>(sm, base, ns, k, c, center, log_cols, n2, c0); break;
    case 4: conv_fill_n<FP, 4, LOADS, THREADS, false, LIFT>(sm, base, ns, k, c, center, log_cols, n2, c0); break;
    default:
      if constexpr (!FP) conv_fill_n<false, 0, LOADS, THREADS, false, LIFT>(sm, base, ns, k, c, center, log_cols, n2, c0);
    }
  }
}

constexpr int KS0_WORDS = 4;
/* ks0: a block per (source row, coefficient range): [x * shat_inv]_{s} of the row's digit,
 * once, with KS_FLAG set when it is above s / 2 (primes are below 2^63, so bit 63 is free) */
__global__ void __launch_bounds__(EW_THREADS) ks0_kernel(const __grid_constant__ fh_ckks_ks_core_args a) {
  pdl_begin();
  const fh_ckks_modup_args &u = a.up;
  const int row = blockIdx.y;
  int jd = 0;
  while (jd + 1 < u.ndigits && u.first[jd + 1] <= row) ++jd;
  const int i = row - u.first[jd];
  const uint64_t q = u.primes[u.prime[row]].q;
  const uint64_t w = u.consts[jd][2 * i], ws = u.consts[jd][2 * i + 1];
  const int64_t n = (int64_t)1 << u.log_n;
  GROUPS(g, u.ngroups) {
    const uint64_t *x = u.in + g * u.in_gs + (int64_t)row * n;
    uint64_t *y = a.scaled + g * a.scaled_gs + (int64_t)row * n;
    /* KS0_WORDS words a thread, loaded together: one word each left too few bytes in
     * flight to cover the latency of the reads */
    const int64_t j0 = (int64_t)blockIdx.x * (EW_THREADS * KS0_WORDS) + threadIdx.x;
    uint64_t v[KS0_WORDS];
#pragma unroll
    for (int k = 0; k < KS0_WORDS; ++k) {
      const int64_t j = j0 + k * EW_THREADS;
      v[k] = j < n ? x[j] : 0;
    }
#pragma unroll
    for (int k = 0; k < KS0_WORDS; ++k) {
      const int64_t j = j0 + k * EW_THREADS;
      const uint64_t r = fh_ckks_ks_source_word(v[k], w, ws, q);
      if (j < n) y[j] = r;
    }
  }
}

/* MIN_BLOCKS: blocks per SM the registers must allow (3: 80 registers, 2: 128) */
/* FP_CONV: the conversion in doubles where it applies (conv_fill<true>) */
/* NTT_THREADS threads, 8 words a thread (a wide variant as ks2's lost at every size:
 * WIDE_MAX_LOG_N) */
/* RAW: every digit has one source row, read from up.in and scaled on load (ks0 skipped) */
/* T: column tiles a block (blockIdx.x * T + t, t < T, those past the row's last skipped),
 * so that the block's setup per (digit, row) (the prime, the source check, conv_consts_init
 * and its two barriers) is paid once per T tiles; the same arithmetic per tile, the same
 * words (ks1_tiles; T = 1 is the kernel of one tile a block) */
template <int MIN_BLOCKS, int LOADS, bool FP_CONV, bool RAW = false, int T = 1>
__global__ void __launch_bounds__(NTT_THREADS, MIN_BLOCKS) ks1_kernel(const __grid_constant__ fh_ckks_ks_core_args a) {
  static_assert(T >= 1, "a tile a block at least");
  pdl_begin();
  __shared__ uint64_t sm[NTT_TILE];
  __shared__ conv_consts kc;
  const fh_ckks_modup_args &u = a.up;
  const int jd = blockIdx.y / u.nrows, r = blockIdx.y - jd * u.nrows;
  const int ns = u.nsrc[jd], f = u.first[jd];
  const bool own = r >= f && r < f + ns;
  if (own && a.in_ntt && a.key) return; /* ks2 reads the input's NTT rows */
  const int t = r < f ? r : r - ns; /* target index when !own */
  const ntt_split sp = ntt_split_of(u.log_n);
  const int64_t n = (int64_t)1 << u.log_n;
  const int n2 = 1 << sp.log_n2, cols = NTT_TILE >> sp.log_n1, tile = NTT_TILE, log_cols = NTT_TILE_LOG - sp.log_n1;
  if (own && a.in_ntt) {
    /* without a key (a hoisted mod-up): the digit's own row is the input's NTT row, copied
     * into the digits at the block's column tiles (the chunk stages skip it) */
    GROUPS(g, u.ngroups) {
      const uint64_t *src = a.in_ntt + g * a.in_ntt_gs + (int64_t)r * n;
      uint64_t *dst = u.out + g * u.out_gs + (int64_t)jd * u.out_ds + (int64_t)r * n;
      for (int tt = 0; tt < T; ++tt) {
        const int ti = (int)blockIdx.x * T + tt;
        if (ti >= (int)(n >> NTT_TILE_LOG)) break;
        const int c0 = ti * cols;
        for (int e = threadIdx.x; e < tile; e += blockDim.x) {
          const int64_t at = (int64_t)(e >> log_cols) * n2 + c0 + (e & (cols - 1));
          dst[at] = src[at];
        }
      }
    }
    return;
  }
  const int p = u.prime[r];
  const fh_ckks_prime c = u.primes[p];
  const ntt_prime P = ntt_prime_at(u.primes, a.ntt, p, u.log_n, true);
  /* the conversion in doubles when the target takes FP64 products and every source is
   * below 2^50 (FP_CONV) */
  bool fpc = FP_CONV && !own && P.fw != NULL && ns <= 4;
  for (int i = 0; i < ns && fpc; ++i) fpc = u.primes[u.prime[f + i]].q < ((uint64_t)1 << 50);
  if (!own) /* from ks0's scaled rows of the digit */
    conv_consts_init(kc, u.consts[jd] + 2 * ns + (int64_t)t * ns, ns, u.primes[u.prime[f]].q, NULL, n, c, u.center,
                     fpc, RAW ? u.consts[jd] : NULL);
  const ntt_geom geo = {(int64_t)1 << sp.log_n1, 0, 0, sp.log_n1};
  GROUPS(g, u.ngroups) {
    const uint64_t *in = u.in + g * u.in_gs;
    const uint64_t *ys = RAW ? in + (int64_t)f * n : a.scaled + g * a.scaled_gs + (int64_t)f * n;
    /* the block's tiles. sm is rewritten by the next tile's fill only after the barrier
     * that ends every NTT pass (ntt_col_fwd_fixed, ntt_stages_with), the last one's
     * included: every thread has then read the previous tile's words from sm */
#pragma unroll 1
    for (int tt = 0; tt < T; ++tt) {
      const int ti = (int)blockIdx.x * T + tt;
      if constexpr (T > 1)
        if (ti >= (int)(n >> NTT_TILE_LOG)) break; /* past the row's last tile: uniform in the block */
      const int c0 = ti * cols;
      /* T > 1: the fill's geometry opaque per tile, so that its per-thread offsets and step
       * are formed again each tile, not kept in registers across the tiles (ptxas, 80
       * registers: else two values spilled and reloaded in the FP conversion's loops) */
      int lc = log_cols, m2 = n2;
      if constexpr (T > 1) asm volatile("" : "+r"(lc), "+r"(m2));
      if (own) {
        for (int e = threadIdx.x; e < tile; e += blockDim.x)
          sm[e] = in[(int64_t)r * n + (int64_t)(e >> log_cols) * n2 + c0 + (e & (cols - 1))];
      } else if (fpc) {
        conv_fill<true, LOADS, NTT_THREADS, RAW>(sm, ys, ns, kc, c, u.center, lc, m2, c0);
      } else {
        conv_fill<false, LOADS, NTT_THREADS, RAW>(sm, ys, ns, kc, c, u.center, lc, m2, c0);
      }
      __syncthreads();
      const ntt_view src = {sm, cols, 1};
      const ntt_view dst = {u.out + g * u.out_gs + (int64_t)jd * u.out_ds + (int64_t)r * n + c0, n2, 1};
      /* the usual rings' column stages with their geometry at compile time (ntt_col_fwd_fixed) */
      if (fpc && u.log_n == 16)
        ntt_col_fwd_fixed<8, 8>(sm, dst.p, fp_arith_in{fp_arith_of(c, P, true)});
      else if (fpc && u.log_n == 15)
        ntt_col_fwd_fixed<7, 8>(sm, dst.p, fp_arith_in{fp_arith_of(c, P, true)});
      else if (fpc)
        ntt_stages_with<true, false>(src, dst, src, cols, sp.log_n1, geo, true, false,
                                     fp_arith_in{fp_arith_of(c, P, true)});
      else ntt_stages<true, false>(src, dst, src, cols, sp.log_n1, geo, true, false, c, P);
    }
  }
}

/* ---- ks2 ------------------------------------------------------------------------------
 * A block per (row r, chunk tile): for every digit, the chunk stages of the digit's scratch
 * tile (ks1's output) or, for the digit's own rows, the input's NTT tile, then the product
 * with the key's two tiles, accumulated in registers; both outputs written once.
 * The tiles come by the copy engine of the SM (cp.async.bulk, Hopper's TMA) into shared
 * memory, completing on mbarriers: while digit j's stages run, digit j's key tiles and
 * digit j+1's scratch tile are on their way, and no thread holds registers for them.
 * Shared memory: two tiles for the digits (double buffered), two for the key: 64 KiB, so
 * three blocks per SM fit. */
constexpr int KS2_TILE_BYTES = NTT_TILE * (int)sizeof(uint64_t);
constexpr size_t KS2_SMEM = 4 * (size_t)KS2_TILE_BYTES;

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)));
}
/* the calling thread arrives, announcing `bytes` of copies to complete the phase */
__device__ __forceinline__ void mbar_expect(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
/* wait for the phase of the given parity to complete */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
  asm volatile("{\n"
               ".reg .pred done;\n"
               "wait_%=:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra wait_%=;\n"
               "}" ::"r"(smem_addr(bar)),
               "r"(parity)
               : "memory");
}
/* one tile, global to shared, completing on bar */
__device__ __forceinline__ void tile_load(uint64_t *dst, const uint64_t *src, uint64_t *bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"((uint32_t)KS2_TILE_BYTES), "r"(smem_addr(bar))
               : "memory");
}

/* ks2's work on one digit tile db (NTT_TILE words in shared memory): the
 * forward chunk stages in place (the usual rings' with their geometry at compile time, log
 * N2 = 8: ntt_chunk_fwd_fixed, the same passes, the same words); with fp the outputs stay
 * doubles for ks2_mac */
template <int THREADS>
__device__ __forceinline__ void ks2_chunk_stages(uint64_t *db, int log_n, int64_t base, bool fp,
                                                 const fh_ckks_prime &c, const ntt_prime &P) {
  constexpr int MAX_LOG_R = THREADS == NTT_THREADS ? 3 : 2;
  const ntt_split sp = ntt_split_of(log_n);
  const int n2 = 1 << sp.log_n2, chunks = NTT_TILE >> sp.log_n2;
  const ntt_geom geo = {(int64_t)1 << log_n, base, n2, log_n};
  const ntt_view sv = {db, 1, n2};
  if (THREADS == NTT_THREADS && fp && log_n == 16)
    ntt_chunk_fwd_fixed<16, 8, MAX_LOG_R>(db, db, base, fp_arith_raw{fp_arith_of(c, P, true)});
  else if (THREADS == NTT_THREADS && fp && log_n == 15)
    ntt_chunk_fwd_fixed<15, 8, MAX_LOG_R>(db, db, base, fp_arith_raw{fp_arith_of(c, P, true)});
  else if (fp)
    ntt_stages_with<true, true, MAX_LOG_R>(sv, sv, sv, chunks, sp.log_n2, geo, false, true,
                                           fp_arith_raw{fp_arith_of(c, P, true)});
  else ntt_stages_with<true, true, MAX_LOG_R>(sv, sv, sv, chunks, sp.log_n2, geo, false, true, int_arith{P, c});
}

/* The inner product's terms of one digit tile db with its key tiles kb0, kb1 into a thread's
 * accumulators (PER words: threadIdx.x + k THREADS). fp: doubles (fh_fp_mac_word): the
 * digits' values as the stages leave them (|x| < 7 q from ks1's words: at most nine stages
 * of at most 0.625 q each; words: the input's NTT words), terms within q (1/2 + 7 q 2^-52)
 * < 0.55 q (fh_fp_mul_w), sums exact; else Montgomery products added mod q */
template <int THREADS, int PER>
__device__ __forceinline__ void ks2_mac(const uint64_t *db, const uint64_t *kb0, const uint64_t *kb1, bool words,
                                        bool fp, const fh_ckks_prime &c, uint64_t (&acc0)[PER],
                                        uint64_t (&acc1)[PER]) {
  if (fp) {
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const int e = threadIdx.x + k * THREADS;
      const double x = words ? fh_fp_of_word(db[e]) : __longlong_as_double((long long)db[e]);
      const double s0 = __longlong_as_double((long long)acc0[k]), s1 = __longlong_as_double((long long)acc1[k]);
      acc0[k] = (uint64_t)__double_as_longlong(__dadd_rn(s0, fh_fp_mul_w(x, fh_fp_of_word(kb0[e]), c.fp_q, c.fp_qinv)));
      acc1[k] = (uint64_t)__double_as_longlong(__dadd_rn(s1, fh_fp_mul_w(x, fh_fp_of_word(kb1[e]), c.fp_q, c.fp_qinv)));
    }
  } else {
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const int e = threadIdx.x + k * THREADS;
      const uint64_t x = db[e];
      acc0[k] = fh_mod_add(acc0[k], fh_mont_mul(x, kb0[e], c.q, c.qinv), c.q);
      acc1[k] = fh_mod_add(acc1[k], fh_mont_mul(x, kb1[e], c.q, c.qinv), c.q);
    }
  }
}

/* MIN_BLOCKS: blocks per SM the registers must allow (3: 80 registers, 2: 128); FP_MAC:
 * the inner product in doubles for primes below 2^45 (else Montgomery products);
 * THREADS: NTT_THREADS (8 words a thread, passes of up to 3 stages) or twice that (4 words a
 * thread, passes of 2 stages: half the accumulators and butterfly words per thread, for
 * twice the warps per SM) */
template <int MIN_BLOCKS, bool FP_MAC, int THREADS>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) ks2_kernel(const __grid_constant__ fh_ckks_ks_core_args a) {
  pdl_begin();
  constexpr int KS2_PER_THREAD = NTT_TILE / THREADS;
  static_assert(THREADS == NTT_THREADS || THREADS == 2 * NTT_THREADS, "ks2: 4 or 8 words a thread");
  extern __shared__ __align__(128) uint64_t ks2_sm[];
  __shared__ __align__(8) uint64_t bars[3]; /* the two digit buffers', the key's */
  uint64_t *kb0 = ks2_sm + 2 * NTT_TILE, *kb1 = ks2_sm + 3 * NTT_TILE;
  const fh_ckks_modup_args &u = a.up;
  /* the rows in reverse: the P rows (the last ones, 60-bit primes: the integer products and
   * butterflies, two to two and a half times a Q row's time) start in the first wave instead
   * of forming the grid's tail. The same words: a block's row only changes its position. */
  const int r = (int)gridDim.y - 1 - (int)blockIdx.y;
  const int64_t n = (int64_t)1 << u.log_n;
  const int64_t base = (int64_t)blockIdx.x * NTT_TILE;
  const int p = u.prime[r];
  const fh_ckks_prime c = u.primes[p];
  const ntt_prime P = ntt_prime_at(u.primes, a.ntt, p, u.log_n, true);
  const uint64_t *key = a.key + (int64_t)a.key_row[r] * n + base;
  const int nd = u.ndigits;
  /* FP64 products for primes below 2^45 (the accumulators then hold doubles' bits), for
   * up to 16 digits as the CPU twin (_ckks.fp_mac) covers: |sum| <= 16 (0.55 q) < 2^49 */
  const bool fp = FP_MAC && P.fw != NULL && nd <= 16;
  /* digit jd's rows are its own when the input's NTT rows are given (ks1 skipped them) */
  auto own = [&](int jd) { return a.in_ntt && r >= u.first[jd] && r < u.first[jd] + u.nsrc[jd]; };
  auto digit_tile = [&](int64_t g, int jd) -> const uint64_t * {
    if (own(jd)) return a.in_ntt + g * a.in_ntt_gs + (int64_t)r * n + base;
    return u.out + g * u.out_gs + (int64_t)jd * u.out_ds + (int64_t)r * n + base;
  };
  if (threadIdx.x == 0) {
    mbar_init(&bars[0]);
    mbar_init(&bars[1]);
    mbar_init(&bars[2]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    if ((int64_t)blockIdx.z < u.ngroups && nd > 0) {
      mbar_expect(&bars[0], KS2_TILE_BYTES);
      tile_load(ks2_sm, digit_tile(blockIdx.z, 0), &bars[0]);
    }
  }
  __syncthreads();
  uint64_t acc0[KS2_PER_THREAD], acc1[KS2_PER_THREAD];
  /* the block's groups g = blockIdx.z, blockIdx.z + gridDim.z, .. and each group's digits in
   * turn, a step each, counted by (g, jd): no 64-bit division or remainder a step (their
   * 32-bit fast paths alone were about 60 instructions a thread a step) */
  uint32_t s = 0; /* steps done: the digit buffer's parity and the barriers' phases */
  for (int64_t g = blockIdx.z; g < u.ngroups; g += gridDim.z)
    for (int jd = 0; jd < nd; ++jd, ++s) {
    const int b = (int)(s & 1);
    uint64_t *db = ks2_sm + b * NTT_TILE; /* this step's digit buffer */
    /* the other digit buffer and the key buffers are free (the barrier that ended the
     * previous step): this digit's key tiles and the next step's digit tile */
    if (threadIdx.x == 0) {
      const uint64_t *k0 = key + (int64_t)jd * a.key_ds;
      mbar_expect(&bars[2], 2 * KS2_TILE_BYTES);
      tile_load(kb0, k0, &bars[2]);
      tile_load(kb1, k0 + a.key_cs, &bars[2]);
      /* the next step: the group's next digit, or the next group's first */
      const int64_t gn = jd + 1 < nd ? g : g + gridDim.z;
      if (gn < u.ngroups) {
        mbar_expect(&bars[b ^ 1], KS2_TILE_BYTES);
        tile_load(ks2_sm + (b ^ 1) * NTT_TILE, digit_tile(gn, jd + 1 < nd ? jd + 1 : 0), &bars[b ^ 1]);
      }
    }
    if (jd == 0) {
#pragma unroll
      for (int k = 0; k < KS2_PER_THREAD; ++k) acc0[k] = acc1[k] = 0;
    }
    mbar_wait(&bars[b], (s >> 1) & 1u);
    const bool words = own(jd); /* the input's NTT words, else the stages' output */
    if (!words) ks2_chunk_stages<THREADS>(db, u.log_n, base, fp, c, P);
    mbar_wait(&bars[2], s & 1u);
    ks2_mac<THREADS>(db, kb0, kb1, words, fp, c, acc0, acc1);
    if (jd == nd - 1) {
      uint64_t *o0 = a.out + g * a.out_gs + (int64_t)r * n + base, *o1 = o0 + a.out_cs;
#pragma unroll
      for (int k = 0; k < KS2_PER_THREAD; ++k) {
        const int e = threadIdx.x + k * THREADS;
        o0[e] = fp ? fh_fp_mac_word(__longlong_as_double((long long)acc0[k]), c.fp_q, c.fp_qinv, c.q, c.qinv) : acc0[k];
        o1[e] = fp ? fh_fp_mac_word(__longlong_as_double((long long)acc1[k]), c.fp_q, c.fp_qinv, c.q, c.qinv) : acc1[k];
      }
    }
    /* this step's shared-memory writes and reads before the copies that reuse the buffers */
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
  }
}

/* Whether ks2's tiles can be bulk copies: every tile address a multiple of 16 bytes. */
bool ks2_aligned(const fh_ckks_ks_core_args *a) {
  const fh_ckks_modup_args *u = &a->up;
  uintptr_t m = (uintptr_t)a->key | (uintptr_t)u->out | (uintptr_t)a->in_ntt;
  m |= (uintptr_t)(a->key_ds | a->key_cs | u->out_gs | u->out_ds | a->in_ntt_gs) * sizeof(uint64_t);
  return (m & 15u) == 0;
}

fh_status k_ntt(const void *a, void *s);
fh_status ks_inner_own(const fh_ckks_ks_args *a, const own_rows &own, void *stream);

/* The inner product of a key-switch core's transformed digits (up.out) with its key; the
 * digits' own rows from own.in_ntt when it is not NULL. */
fh_status ks_inner_of_core(const fh_ckks_ks_core_args *a, const own_rows &own, void *stream) {
  fh_ckks_ks_args k;
  fh_ckks_ks_args_of_core(a, &k);
  return ks_inner_own(&k, own, stream);
}

/* The conversions' source words loaded before their products, per thread (ks1, md1):
 * FHELIUM_CUDA_CONV=1 (one coefficient's), 8 or 16 (a benchmarking aid), else
 * CONV_LOADS_DEFAULT */
constexpr int CONV_LOADS_DEFAULT = 8;
int conv_loads() {
  static const char *const loads_of[] = {"1", "8", "16", NULL};
  static const int i = env_switch("FHELIUM_CUDA_CONV", loads_of);
  return i == 0 ? 1 : i == 1 ? 8 : i == 2 ? 16 : CONV_LOADS_DEFAULT;
}

/* Whether a key switch whose fused second kernel (ks2) would run `blocks` blocks splits it
 * instead: ks2 walks every digit in one block, so a grid of fewer blocks than twice the SMs
 * leaves SMs idle (N = 2^14: 72 blocks on 132 SMs); split, the digits' chunk stages run in
 * parallel and the inner product reads them back (the digits cross memory twice more).
 * FHELIUM_CUDA_KS=fused or split overrides the choice (a benchmarking aid). */
bool ks_split(unsigned blocks) {
  static const char *const modes[] = {"fused", "split", NULL};
  static const int mode = env_switch("FHELIUM_CUDA_KS", modes); /* -1 auto, 0 fused, 1 split */
  if (mode >= 0) return mode == 1;
  return blocks < 2u * sms_here();
}

/* Blocks of twice NTT_THREADS threads, 4 words a thread and passes of at most 2 stages (32
 * warps per SM against 24 or 16): the default of ks2, md1 and md2 for N <= 2^WIDE_MAX_LOG_N,
 * where the grids are small and twice the warps hide the latency. Under ncu on the H200
 * (2026-12-04): md1 + md2 31 -> 20 us at N = 2^14, 48 -> 47 at 2^15, 140 -> 156 at 2^16;
 * ks2 114 -> 102 us at 2^15, 280 -> 293 at 2^16. (ks1 lost at every size: 24 -> 25, 62 -> 78,
 * 269 -> 347 us, so it has no wide variant.) */
constexpr int WIDE_MAX_LOG_N = 15;

/* ks1's and ks2's register budgets, in blocks per SM: FHELIUM_CUDA_KS1=2, 3 or 4 and
 * FHELIUM_CUDA_KS2=2, 3 or w (KS_WIDE; benchmarking aids), else the defaults: ks1 at
 * KS1_BLOCKS_DEFAULT or four (ks1_blocks), ks2 wide for N <= 2^WIDE_MAX_LOG_N and at
 * KS2_BLOCKS_DEFAULT above */
constexpr int KS1_BLOCKS_DEFAULT = 3, KS2_BLOCKS_DEFAULT = 2;
constexpr int KS_WIDE = 0;
int ks1_forced() {
  static const char *const kinds[] = {"2", "3", "4", NULL};
  static const int b = env_switch("FHELIUM_CUDA_KS1", kinds);
  return b < 0 ? -1 : b + 2;
}
/* ks1's blocks per SM for `live` blocks that do work (a digit's own rows return at once when
 * the input's NTT rows are given): four (64 registers, a few spills) when they then fit in
 * one wave and three do not, as at N = 2^14 (512 blocks on 132 SMs: 1.3 waves at three),
 * else three. Under ncu on the H200 (2026-12-04, sixth session) ks1 took 19.1 us at four
 * against 22.3 at three in multiply-relinearize-rescale at 8192 slots. */
int ks1_blocks(unsigned live) {
  const int f = ks1_forced();
  if (f > 0) return f;
  const unsigned sms = sms_here();
  return live > 3u * sms && live <= 4u * sms ? 4 : KS1_BLOCKS_DEFAULT;
}
int ks2_blocks(int log_n) {
  static const char *const kinds[] = {"2", "3", "w", NULL};
  static const int b = env_switch("FHELIUM_CUDA_KS2", kinds);
  if (b < 0) return log_n <= WIDE_MAX_LOG_N ? KS_WIDE : KS2_BLOCKS_DEFAULT;
  return b == 2 ? KS_WIDE : b + 2;
}
/* The key switch's products in doubles where they apply (ks1's conversion, ks2's inner
 * product: rows of primes below 2^45), the default; FHELIUM_CUDA_KSFP=int keeps the
 * integer products everywhere (a benchmarking aid; docs/ckks.md). */
bool ks_fp_products() {
  static const char *const kinds[] = {"fp", "int", NULL};
  static const int m = env_switch("FHELIUM_CUDA_KSFP", kinds);
  return m != 1;
}

/* ks1's column tiles a block (ks1_kernel's T): FHELIUM_CUDA_KS1T=1, 2 or 4 (a benchmarking
 * aid), else KS1T_DEFAULT. More than one only where ks1 runs at three blocks per SM with the
 * default loads and the FP64 conversion (ks1_launch_with: the instances compiled); elsewhere
 * one. On the H100 (2026-12-07) relinearize at N = 2^16 took 0.706 ms at one tile a block,
 * 0.689 at two, 0.688 at four; N = 2^14 the same at each (ks1 at four blocks per SM there);
 * the matrix-vector program at 8192 slots 0.150 / 0.151 / 0.164 ms: two. */
constexpr int KS1T_DEFAULT = 2;
int ks1_tiles() {
  static const char *const kinds[] = {"1", "2", "4", NULL};
  static const int i = env_switch("FHELIUM_CUDA_KS1T", kinds);
  return i < 0 ? KS1T_DEFAULT : 1 << i;
}
/* ks1 with T tiles a block: the grid's x over ceil(tiles / T) */
template <int MIN_BLOCKS, int LOADS, bool FP_CONV, bool RAW>
void ks1_launch_tiles(const fh_ckks_ks_core_args &a, dim3 grid, cudaStream_t h, int tiles) {
  if (tiles == 4) pdl(ks1_kernel<MIN_BLOCKS, LOADS, FP_CONV, RAW, 4>, dim3((grid.x + 3) / 4, grid.y, grid.z), NTT_THREADS, 0, h, a);
  else if (tiles == 2) pdl(ks1_kernel<MIN_BLOCKS, LOADS, FP_CONV, RAW, 2>, dim3((grid.x + 1) / 2, grid.y, grid.z), NTT_THREADS, 0, h, a);
  else pdl(ks1_kernel<MIN_BLOCKS, LOADS, FP_CONV, RAW>, grid, NTT_THREADS, 0, h, a);
}

template <bool FP_CONV>
void ks1_launch_with(const fh_ckks_ks_core_args &a, dim3 grid, cudaStream_t h, int raw) {
  int own = 0; /* the rows that return at once (or, without a key, copy the input's NTT words) */
  if (a.in_ntt)
    for (int j = 0; j < a.up.ndigits; ++j) own += a.up.nsrc[j];
  /* the variant is chosen on the grid of one tile a block, whatever ks1_tiles says */
  const int loads = conv_loads(), kb = ks1_blocks(grid.x * (grid.y - (unsigned)own) * grid.z);
  /* raw only with the default loads and three or four blocks per SM (ks_raw); at four, four
   * coefficients a round, the variant measured (ptxas: 64 registers and about 250 bytes of
   * spills with the FP64 conversion, either way) */
  if (raw && kb == 4) pdl(ks1_kernel<4, 4, FP_CONV, true>, grid, NTT_THREADS, 0, h, a);
  else if (raw) {
    if constexpr (FP_CONV) ks1_launch_tiles<3, 8, FP_CONV, true>(a, grid, h, ks1_tiles());
    else pdl(ks1_kernel<3, 8, FP_CONV, true>, grid, NTT_THREADS, 0, h, a);
  } else if (kb == 4) pdl(ks1_kernel<4, CONV_LOADS_DEFAULT, FP_CONV>, grid, NTT_THREADS, 0, h, a);
  else if (kb == 2) pdl(ks1_kernel<2, CONV_LOADS_DEFAULT, FP_CONV>, grid, NTT_THREADS, 0, h, a);
  else if (loads == 1) pdl(ks1_kernel<3, 1, FP_CONV>, grid, NTT_THREADS, 0, h, a);
  else if (loads == 16) pdl(ks1_kernel<3, 16, FP_CONV>, grid, NTT_THREADS, 0, h, a);
  else if constexpr (FP_CONV) ks1_launch_tiles<3, 8, FP_CONV, false>(a, grid, h, ks1_tiles());
  else pdl(ks1_kernel<3, 8, FP_CONV>, grid, NTT_THREADS, 0, h, a);
}
void ks1_launch(const fh_ckks_ks_core_args &a, dim3 grid, cudaStream_t h, int raw) {
  if (ks_fp_products()) ks1_launch_with<true>(a, grid, h, raw);
  else ks1_launch_with<false>(a, grid, h, raw);
}

/* Whether every digit of a mod-up has one source row: ks1 then scales each source word on
 * load (conv_raw), once per target row, and ks0 does not run (one launch fewer; at N = 2^14
 * with 8 digits a word is read by 8 blocks instead of written once and read by 8). The
 * same words either way. FHELIUM_CUDA_RAW=0 keeps ks0 and md0 (a benchmarking aid). */
bool raw_sources() {
  static const char *const kinds[] = {"1", "0", NULL};
  static const int m = env_switch("FHELIUM_CUDA_RAW", kinds);
  return m != 1;
}
int ks_raw(const fh_ckks_modup_args *u) {
  if (!raw_sources() || conv_loads() != CONV_LOADS_DEFAULT || ks1_forced() == 2) return 0;
  for (int j = 0; j < u->ndigits; ++j)
    if (u->nsrc[j] != 1) return 0;
  return 1;
}

/* ks2 needs KS2_SMEM bytes of dynamic shared memory, above the default 48 KiB: allowed
 * once per device (a function attribute, not stream work, so a capture may do it) */
template <int MIN_BLOCKS, bool FP_MAC, int THREADS = NTT_THREADS>
fh_status ks2_launch(const fh_ckks_ks_core_args *a, dim3 grid, cudaStream_t h) {
  static bool ready[64];
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return fh__cuda_fail(e, "kernel 'ckks_ks_core' (device)");
  if (dev < 0 || dev >= 64 || !ready[dev]) {
    e = cudaFuncSetAttribute(ks2_kernel<MIN_BLOCKS, FP_MAC, THREADS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)KS2_SMEM);
    if (e != cudaSuccess) return fh__cuda_fail(e, "kernel 'ckks_ks_core' (shared memory)");
    if (dev >= 0 && dev < 64) ready[dev] = true;
  }
  pdl(ks2_kernel<MIN_BLOCKS, FP_MAC, THREADS>, grid, THREADS, KS2_SMEM, h, *a);
  return FH_OK;
}

fh_status k_ks_core(const void *argp, void *stream) {
  const fh_ckks_ks_core_args *a = (const fh_ckks_ks_core_args *)argp;
  const fh_ckks_modup_args *u = &a->up;
  const char *why = fh_ckks_ks_core_prescaled_refusal(a, true);
  if (why) return fh_error_set(FH_ERR_EXECUTION, "%s", why);
  if (u->ngroups <= 0 || u->ndigits <= 0 || u->nrows <= 0) return FH_OK;
  if (u->log_n <= NTT_TILE_LOG) {
    /* small rings: the three kernels in turn */
    fh_status st = k_modup(u, stream);
    fh_ckks_ntt_args t;
    memset(&t, 0, sizeof t);
    t.in_gs = t.out_gs = u->out_ds;
    t.ngroups = u->ndigits;
    t.nlimbs = u->nrows;
    t.log_n = u->log_n;
    t.primes = u->primes;
    t.ntt = a->ntt;
    memcpy(t.prime, u->prime, sizeof(int32_t) * (size_t)u->nrows);
    for (int64_t g = 0; g < u->ngroups && st == FH_OK; ++g) {
      t.out = u->out + g * u->out_gs;
      t.in = t.out;
      st = k_ntt(&t, stream);
    }
    if (st != FH_OK || a->key == NULL) return st;
    return ks_inner_of_core(a, own_rows{}, stream);
  }
  cudaStream_t h = (cudaStream_t)stream;
  const int64_t n = (int64_t)1 << u->log_n;
  const unsigned tiles = (unsigned)(n / NTT_TILE), gz = grid_z(u->ngroups);
  const int nsrc_rows = u->first[u->ndigits - 1] + u->nsrc[u->ndigits - 1];
  /* prescaled: the INTT before wrote the scaled rows (ks0's words); ks1 reads them */
  const int raw = a->prescaled ? 0 : ks_raw(u);
  if (!raw && !a->prescaled) {
    if (a->scaled == NULL) return fh_error_set(FH_ERR_EXECUTION, "ckks_ks_core: no scratch for the scaled sources");
    pdl(ks0_kernel, dim3(blocks_for(n, EW_THREADS * KS0_WORDS), nsrc_rows, gz), EW_THREADS, 0, h, *a);
  }
  if (a->key != NULL && !ks_split(tiles * (unsigned)u->nrows * gz) && ks2_aligned(a)) {
    ks1_launch(*a, dim3(tiles, u->ndigits * u->nrows, gz), h, raw);
    const dim3 grid(tiles, u->nrows, gz);
    const bool fpm = ks_fp_products();
    const int kb = ks2_blocks(u->log_n);
    fh_status st;
    if (kb == KS_WIDE) st = fpm ? ks2_launch<2, true, 2 * NTT_THREADS>(a, grid, h) : ks2_launch<2, false, 2 * NTT_THREADS>(a, grid, h);
    else if (kb == 3) st = fpm ? ks2_launch<3, true>(a, grid, h) : ks2_launch<3, false>(a, grid, h);
    else st = fpm ? ks2_launch<2, true>(a, grid, h) : ks2_launch<2, false>(a, grid, h);
    if (st != FH_OK) return st;
    return launched("kernel 'ckks_ks_core'");
  }
  /* split: ks1, the chunk stages of every digit in parallel into the scratch, then the
   * inner product with the key. With a key and the input's NTT rows, a digit's own rows are
   * skipped by ks1 and the chunk stages, and the inner product reads the input's NTT rows
   * for them; without a key the scratch holds every transformed row of every digit (with the
   * input's NTT rows ks1 copies them into the digits' own rows, the chunk stages skip
   * those). */
  fh_ckks_ks_core_args b = *a;
  own_rows own{};
  if (b.in_ntt != NULL) {
    own.in_ntt = b.in_ntt;
    own.in_ntt_gs = b.in_ntt_gs;
    own.ndigits = u->ndigits;
    for (int r = 0; r < u->nrows; ++r) own.digit[r] = -1;
    for (int j = 0; j < u->ndigits; ++j)
      for (int r = u->first[j]; r < u->first[j] + u->nsrc[j]; ++r) own.digit[r] = j;
  }
  ks1_launch(b, dim3(tiles, u->ndigits * u->nrows, gz), h, raw);
  fh_ckks_ntt_args t;
  memset(&t, 0, sizeof t);
  t.out = u->out;
  t.in = u->out;
  t.out_gs = t.in_gs = u->out_ds; /* [G][ndigits][nrows][N]: G * ndigits groups of nrows rows */
  t.ngroups = u->ngroups * u->ndigits;
  t.nlimbs = u->nrows;
  t.log_n = u->log_n;
  t.primes = u->primes;
  t.ntt = a->ntt;
  memcpy(t.prime, u->prime, sizeof(int32_t) * (size_t)u->nrows);
  const dim3 cg = chunk_grid(n, u->nrows, t.ngroups);
  if (own.in_ntt) pdl(ntt_chunk_kernel<true, NTT_THREADS, own_rows>, cg, NTT_THREADS, 0, h, t, own);
  else if (ntt_blocks() == 4) pdl(ntt_chunk_kernel<true, NTT_THREADS, no_own_rows, 4>, cg, NTT_THREADS, 0, h, t, no_own_rows{});
  else pdl(ntt_chunk_kernel<true>, cg, NTT_THREADS, 0, h, t, no_own_rows{});
  fh_status st = launched("kernel 'ckks_ks_core'");
  return st == FH_OK && a->key != NULL ? ks_inner_of_core(a, own, stream) : st;
}

/* ==== mod-down to the NTT domain ========================================================
 * md1: a block per (Q row, column tile, group) converts the group's P rows to the row's
 *      prime coefficient by coefficient and runs the NTT's column stages into the scratch;
 * md2: a block per (Q row, chunk tile, group) runs the chunk stages and writes
 *      (a - t) P^-1 (+ add) straight from shared memory. */
/* md0: the P rows scaled by their shat_inv in place, once (KS_FLAG as in ks0) */
__global__ void __launch_bounds__(EW_THREADS) md0_kernel(const __grid_constant__ fh_ckks_moddown_args a) {
  pdl_begin();
  const fh_ckks_bconv_args &b = a.conv;
  const int i = blockIdx.y;
  const uint64_t q = b.primes[b.src_prime[i]].q;
  const uint64_t w = b.consts[2 * i], ws = b.consts[2 * i + 1];
  const int64_t n = (int64_t)1 << b.log_n;
  GROUPS(g, b.ngroups) {
    uint64_t *x = (uint64_t *)b.in + g * b.in_gs + (int64_t)b.src_row[i] * n;
    COEFFS(j, n) x[j] = fh_ckks_ks_source_word(x[j], w, ws, q);
  }
}

/* md0r (a fused rescale, fh_ckks_moddown_args.rescale): md0's scaling of the P rows, and per
 * coefficient the conversion to q_0 and y0 = (u0 - conv) P^-1 + v0 mod q_0 into row nsrc + 1 */
__global__ void __launch_bounds__(EW_THREADS) md0r_kernel(const __grid_constant__ fh_ckks_moddown_args a) {
  pdl_begin();
  const fh_ckks_bconv_args &b = a.conv;
  const int ns = b.nsrc;
  const fh_ckks_prime &p0 = b.primes[b.dst_prime[0]];
  const uint64_t q0 = p0.q, w0 = a.c_const[0], ws0 = a.c_shoup[0];
  const uint64_t *mat = b.consts + 2 * ns; /* row 0: Shat_i mod q_0 */
  /* S mod q_0 = (Shat_0 mod q_0)(s_0 mod q_0), the centred lift's correction per flag */
  const uint64_t smt = ns > 0 ? fh_mod_mul(mat[0], b.primes[b.src_prime[0]].q, &p0.bar) : 0;
  const int64_t n = (int64_t)1 << b.log_n;
  GROUPS(gg, b.ngroups) {
    uint64_t *w = (uint64_t *)b.in + gg * b.in_gs;
    const uint64_t *v0 = a.v0 ? a.v0 + (gg / 2) * a.v0_gs + (gg % 2) * a.v0_cs : NULL;
    COEFFS(j, n) {
      uint64_t conv = 0;
      uint32_t cnt = 0;
      for (int i = 0; i < ns; ++i) {
        const fh_ckks_prime &ps = b.primes[b.src_prime[i]];
        uint64_t *x = w + (int64_t)b.src_row[i] * n;
        const uint64_t y = fh_shoup_mul(x[j], b.consts[2 * i], b.consts[2 * i + 1], ps.q);
        const bool neg = y > (ps.q >> 1);
        x[j] = y | (neg ? KS_FLAG : 0);
        cnt += neg;
        conv = fh_mod_add(conv, fh_mod_mul(y, mat[i], &p0.bar), q0);
      }
      if (b.center && cnt) conv = fh_mod_sub(conv, fh_mod_mul(cnt, smt, &p0.bar), q0);
      const uint64_t u0 = w[(int64_t)ns * n + j];
      w[(int64_t)(ns + 1) * n + j] = fh_ckks_rescale_y0(u0, conv, v0 ? v0[j] : 0, w0, ws0, q0);
    }
  }
}

/* THREADS: NTT_THREADS at three blocks per SM, or twice that at two (4 words a thread, passes
 * of at most two stages: 32 warps per SM; FHELIUM_CUDA_MD=w). RESC: a fused rescale's rows
 * 1.. (blockIdx.y + 1), each conversion plus P [y0] (conv_lift) */
/* RAW: one P row, read as it is and scaled on load (md0 skipped) */
template <int LOADS, int THREADS = NTT_THREADS, bool RAW = false, bool RESC = false>
__global__ void __launch_bounds__(THREADS, THREADS == NTT_THREADS ? 3 : 2) md1_kernel(const __grid_constant__ fh_ckks_moddown_args a) {
  pdl_begin();
  constexpr int MAX_LOG_R = THREADS == NTT_THREADS ? 3 : 2;
  __shared__ uint64_t sm[NTT_TILE];
  __shared__ conv_consts kc;
  const fh_ckks_bconv_args &b = a.conv;
  const int l = blockIdx.y + (RESC ? 1 : 0), ns = b.nsrc;
  const ntt_split sp = ntt_split_of(b.log_n);
  const int64_t n = (int64_t)1 << b.log_n;
  const int n2 = 1 << sp.log_n2, cols = NTT_TILE >> sp.log_n1, log_cols = NTT_TILE_LOG - sp.log_n1;
  const int c0 = blockIdx.x * cols;
  const int p = b.dst_prime[l];
  const fh_ckks_prime c = b.primes[p];
  const ntt_prime P = ntt_prime_at(b.primes, a.ntt, p, b.log_n, true);
  const bool center = b.center && ns > 0;
  if (RESC && threadIdx.x == 0) {
    const fh_ckks_prime &p0 = b.primes[b.dst_prime[0]];
    kc.lpr = a.pr[l];
    kc.lpq = a.pq[l];
    kc.lhalf = p0.q >> 1;
    /* RAW: y0 from u0 (row ns) on load, as md0r computes it (its row 0 of the conversion
     * matrix, S mod q_0 for the flag, the constant P^-1 mod q_0); else md0r's row ns + 1 */
    kc.loff = (int64_t)(RAW ? ns : ns + 1) * n;
    if (RAW) {
      kc.l0bar = p0.bar;
      kc.l0q = p0.q;
      kc.l0mat = b.consts[2 * ns];
      kc.l0smt = fh_mod_mul(kc.l0mat, b.primes[b.src_prime[0]].q, &p0.bar);
      kc.l0w = a.c_const[0];
      kc.l0ws = a.c_shoup[0];
    }
  }
  conv_consts_init(kc, b.consts + 2 * ns + (int64_t)l * ns, ns, ns > 0 ? b.primes[b.src_prime[0]].q : 1, b.src_row,
                   n, c, center, false, RAW ? b.consts : NULL); /* from md0's scaled rows, or raw */
  const ntt_geom geo = {(int64_t)1 << sp.log_n1, 0, 0, sp.log_n1};
  GROUPS(g, b.ngroups) {
    const uint64_t *in = b.in + g * b.in_gs;
    const uint64_t *v0 = RESC && RAW && a.v0 ? a.v0 + (g / 2) * a.v0_gs + (g % 2) * a.v0_cs : NULL;
    conv_fill<false, LOADS, THREADS, RAW, RESC ? (RAW ? 2 : 1) : 0>(sm, in, ns, kc, c, center, log_cols, n2, c0, v0);
    __syncthreads();
    const ntt_view src = {sm, cols, 1};
    const ntt_view dst = {b.out + g * b.out_gs + (int64_t)b.dst_row[l] * n + c0, n2, 1};
    /* the usual rings' column stages with their geometry at compile time, as ks1's
     * (ntt_col_fwd_fixed: the same passes, the same words) */
    if (THREADS == NTT_THREADS && P.fw && b.log_n == 16)
      ntt_col_fwd_fixed<8, 8>(sm, dst.p, fp_arith_of(c, P, true));
    else if (THREADS == NTT_THREADS && P.fw && b.log_n == 15)
      ntt_col_fwd_fixed<7, 8>(sm, dst.p, fp_arith_of(c, P, true));
    else ntt_stages<true, false, MAX_LOG_R>(src, dst, src, cols, sp.log_n1, geo, true, false, c, P);
  }
}

/* one word, global to shared, by the SM's asynchronous copy (no register holds it);
 * cp_async_wait: the calling thread's copies have landed */
__device__ __forceinline__ void cp_async_word(uint64_t *dst, const uint64_t *src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }

/* THREADS, RESC as md1's (RESC: out row l - 1, times q_0^-1) */
/* MINB: blocks per SM at NTT_THREADS (3: 80 registers; 4: 64; ntt_blocks chooses) */
template <int THREADS = NTT_THREADS, bool RESC = false, int MINB = 3>
__global__ void __launch_bounds__(THREADS, THREADS == NTT_THREADS ? MINB : 2) md2_kernel(const __grid_constant__ fh_ckks_moddown_args a) {
  pdl_begin();
  constexpr int MD2_PER_THREAD = NTT_TILE / THREADS;
  constexpr int MAX_LOG_R = THREADS == NTT_THREADS ? 3 : 2;
  __shared__ uint64_t sm[NTT_TILE];
  /* the tile's words of a and of add: copied while the stages run, each by the thread
   * that reads it */
  __shared__ uint64_t xs[NTT_TILE], zs[NTT_TILE];
  const fh_ckks_bconv_args &b = a.conv;
  const int l = blockIdx.y + (RESC ? 1 : 0);
  const ntt_split sp = ntt_split_of(b.log_n);
  const int64_t n = (int64_t)1 << b.log_n;
  const int n2 = 1 << sp.log_n2, chunks = NTT_TILE >> sp.log_n2;
  const chunk_place cp = chunk_place_of(b.log_n); /* a chunk grid: the components side by side */
  const int64_t base = cp.base;
  const int p = b.dst_prime[l];
  const fh_ckks_prime c = b.primes[p];
  const ntt_prime P = ntt_prime_at(b.primes, a.ntt, p, b.log_n, true);
  const ntt_geom geo = {n, base, n2, b.log_n};
  const ntt_view sv = {sm, 1, n2};
  const uint64_t w = a.c_const[l], ws = a.c_shoup[l];
  CHUNK_GROUPS(gg, b.ngroups, cp) {
    const int64_t g = gg / 2;
    const int comp = (int)(gg % 2);
    const uint64_t *x = a.a + gg * a.a_gs + (int64_t)l * n + base;
    const uint64_t *z = a.add[comp] ? a.add[comp] + g * a.add_gs + (int64_t)l * n + base : NULL;
    const ntt_view src = {b.out + gg * b.out_gs + (int64_t)b.dst_row[l] * n + base, 1, n2};
    /* add through an automorphism (add_galois): word e of the tile from the row's source slot */
    const uint64_t zg = a.add_galois;
    /* add as a tensor product (add_b): formed from the operands' words after the stages */
    const bool zp = a.add_b[0] != NULL;
#pragma unroll
    for (int k = 0; k < MD2_PER_THREAD; ++k) {
      const int e = threadIdx.x + k * THREADS;
      cp_async_word(xs + e, x + e);
      if (z && !zp)
        cp_async_word(zs + e, zg > 1 ? z - base + fh_ckks_automorph_src((uint32_t)(base + e), zg, b.log_n) : z + e);
    }
    cp_async_commit();
    /* the usual rings' chunk stages with their geometry at compile time (log N2 = 8:
     * ntt_chunk_fwd_fixed, the same passes, the same words) */
    if (THREADS == NTT_THREADS && P.fw && b.log_n == 16)
      ntt_chunk_fwd_fixed<16, 8, MAX_LOG_R>(src.p, sm, base, fp_arith_of(c, P, true));
    else if (THREADS == NTT_THREADS && P.fw && b.log_n == 15)
      ntt_chunk_fwd_fixed<15, 8, MAX_LOG_R>(src.p, sm, base, fp_arith_of(c, P, true));
    else ntt_stages<true, true, MAX_LOG_R>(src, sv, sv, chunks, sp.log_n2, geo, false, true, c, P);
    cp_async_wait();
    uint64_t *o = a.out[comp] + g * a.out_gs + (int64_t)(l - (RESC ? 1 : 0)) * n + base;
    const int64_t zo = g * a.add_gs + (int64_t)l * n + base;
#pragma unroll
    for (int k = 0; k < MD2_PER_THREAD; ++k) {
      const int e = threadIdx.x + k * THREADS;
      uint64_t r = fh_shoup_mul(xs[e] + (c.q - sm[e]), w, ws, c.q);
      if (zp)
        r = fh_mod_add(r,
                       fh_ckks_tensor_word(comp == 0 ? FH_CKKS_PROD_00 : FH_CKKS_PROD_X, a.add[0][zo + e],
                                           a.add[1][zo + e], a.add_b[0][zo + e], a.add_b[1][zo + e], c.q, c.qinv),
                       c.q);
      else r = z ? fh_mod_add(r, zs[e], c.q) : r;
      o[e] = RESC ? fh_shoup_mul(r, a.d_const[l], a.d_shoup[l], c.q) : r;
    }
    __syncthreads();
  }
}

fh_status k_ew(const void *argp, void *stream);

/* md1 and md2 wide (blocks of twice NTT_THREADS threads): for N <= 2^WIDE_MAX_LOG_N, or as
 * FHELIUM_CUDA_MD says (3: blocks of NTT_THREADS, md1 at three per SM and md2 at ntt_blocks;
 * w: wide; benchmarking aids) */
bool md_wide(int log_n) {
  static const char *const kinds[] = {"3", "w", NULL};
  static const int m = env_switch("FHELIUM_CUDA_MD", kinds);
  return m < 0 ? log_n <= WIDE_MAX_LOG_N : m == 1;
}

fh_status k_moddown(const void *argp, void *stream) {
  const fh_ckks_moddown_args *a = (const fh_ckks_moddown_args *)argp;
  const fh_ckks_bconv_args *b = &a->conv;
  const char *why = fh_ckks_moddown_add_b_refusal(a);
  if (!why) why = fh_ckks_moddown_prescaled_refusal(a, true);
  if (why) return fh_error_set(FH_ERR_EXECUTION, "%s", why);
  if (b->ngroups <= 0 || b->ndst <= 0) return FH_OK;
  const int64_t n = (int64_t)1 << b->log_n;
  if (b->log_n <= NTT_TILE_LOG) {
    if (a->rescale) /* the evaluator rescales in turn at these sizes */
      return fh_error_set(FH_ERR_EXECUTION, "ckks_moddown: no fused rescale for N <= 2^%d", NTT_TILE_LOG);
    if (a->add_galois > 1) /* the evaluator adds the automorphism's output at these sizes */
      return fh_error_set(FH_ERR_EXECUTION, "ckks_moddown: no automorphism of add for N <= 2^%d", NTT_TILE_LOG);
    /* small rings: conversion, NTT, then the subtraction per component */
    fh_status st = k_bconv(b, stream);
    fh_ckks_ntt_args t;
    memset(&t, 0, sizeof t);
    t.out = b->out;
    t.in = b->out;
    t.out_gs = t.in_gs = b->out_gs;
    t.ngroups = b->ngroups;
    t.nlimbs = b->ndst;
    t.log_n = b->log_n;
    t.primes = b->primes;
    t.ntt = a->ntt;
    for (int l = 0; l < b->ndst; ++l) t.prime[l] = b->dst_prime[l];
    if (st == FH_OK) st = k_ntt(&t, stream);
    for (int comp = 0; comp < 2 && st == FH_OK; ++comp) {
      fh_ckks_ew_args f;
      memset(&f, 0, sizeof f);
      f.op = FH_CKKS_EW_SUB_ADD_MUL;
      f.nlimbs = b->ndst;
      f.log_n = b->log_n;
      f.ngroups = (b->ngroups - comp + 1) / 2;
      f.out = a->out[comp];
      f.out_gs = a->out_gs;
      f.a = a->a + comp * a->a_gs;
      f.a_gs = 2 * a->a_gs;
      f.a_ls = n;
      /* the ew kernel reads row l of b at b + l * N: the scratch rows are dst_row-ordered 0..ndst-1 */
      f.b = b->out + comp * b->out_gs;
      f.b_gs = 2 * b->out_gs;
      f.c = a->add[comp];
      f.c_gs = a->add_gs;
      f.primes = b->primes;
      for (int l = 0; l < b->ndst; ++l) {
        f.prime[l] = b->dst_prime[l];
        f.c_const[l] = a->c_const[l];
        f.c_shoup[l] = a->c_shoup[l];
      }
      st = k_ew(&f, stream);
    }
    return st;
  }
  cudaStream_t h = (cudaStream_t)stream;
  const unsigned tiles = (unsigned)(n / NTT_TILE), gz = grid_z(b->ngroups);
  /* one P row (or the dropped row of a rescale): md1 scales it on load, md0 and md0r do not
   * run; prescaled: the INTT before wrote md0's words, md1 reads them */
  const bool raw = !a->prescaled && b->nsrc == 1 && raw_sources() && conv_loads() == CONV_LOADS_DEFAULT;
  if (a->rescale) {
    /* md0r: the P rows scaled, y0; md1 and md2 over rows 1.. */
    if (b->ndst < 2 || (a->add[0] == NULL) != (a->v0 == NULL) || (a->add[1] == NULL) != (a->v0 == NULL))
      return fh_error_set(FH_ERR_EXECUTION, "ckks_moddown: a fused rescale needs two Q rows, and add with v0 or neither");
    /* raw: md1 also computes y0 on load */
    if (!raw) pdl(md0r_kernel, dim3(blocks_for(n, EW_THREADS), 1, gz), EW_THREADS, 0, h, *a);
    const dim3 rg(tiles, b->ndst - 1, gz), rcg = chunk_grid(n, b->ndst - 1, b->ngroups);
    if (md_wide(b->log_n)) {
      if (raw) pdl(md1_kernel<CONV_LOADS_DEFAULT, 2 * NTT_THREADS, true, true>, rg, 2 * NTT_THREADS, 0, h, *a);
      else pdl(md1_kernel<CONV_LOADS_DEFAULT, 2 * NTT_THREADS, false, true>, rg, 2 * NTT_THREADS, 0, h, *a);
      pdl(md2_kernel<2 * NTT_THREADS, true>, rcg, 2 * NTT_THREADS, 0, h, *a);
    } else {
      if (raw) pdl(md1_kernel<CONV_LOADS_DEFAULT, NTT_THREADS, true, true>, rg, NTT_THREADS, 0, h, *a);
      else pdl(md1_kernel<CONV_LOADS_DEFAULT, NTT_THREADS, false, true>, rg, NTT_THREADS, 0, h, *a);
      if (ntt_blocks() == 4) pdl(md2_kernel<NTT_THREADS, true, 4>, rcg, NTT_THREADS, 0, h, *a);
      else pdl(md2_kernel<NTT_THREADS, true>, rcg, NTT_THREADS, 0, h, *a);
    }
    return launched("kernel 'ckks_moddown'");
  }
  if (b->nsrc > 0 && !raw && !a->prescaled) pdl(md0_kernel, dim3(blocks_for(n, EW_THREADS), b->nsrc, gz), EW_THREADS, 0, h, *a);
  const dim3 grid(tiles, b->ndst, gz);
  const int loads = conv_loads();
  if (md_wide(b->log_n)) {
    if (raw) pdl(md1_kernel<CONV_LOADS_DEFAULT, 2 * NTT_THREADS, true>, grid, 2 * NTT_THREADS, 0, h, *a);
    else pdl(md1_kernel<CONV_LOADS_DEFAULT, 2 * NTT_THREADS>, grid, 2 * NTT_THREADS, 0, h, *a);
    pdl(md2_kernel<2 * NTT_THREADS>, chunk_grid(n, b->ndst, b->ngroups), 2 * NTT_THREADS, 0, h, *a);
    return launched("kernel 'ckks_moddown'");
  }
  if (raw) pdl(md1_kernel<CONV_LOADS_DEFAULT, NTT_THREADS, true>, grid, NTT_THREADS, 0, h, *a);
  else if (loads == 1) pdl(md1_kernel<1>, grid, NTT_THREADS, 0, h, *a);
  else if (loads == 16) pdl(md1_kernel<16>, grid, NTT_THREADS, 0, h, *a);
  else pdl(md1_kernel<8>, grid, NTT_THREADS, 0, h, *a);
  if (ntt_blocks() == 4) pdl(md2_kernel<NTT_THREADS, false, 4>, chunk_grid(n, b->ndst, b->ngroups), NTT_THREADS, 0, h, *a);
  else pdl(md2_kernel<>, chunk_grid(n, b->ndst, b->ngroups), NTT_THREADS, 0, h, *a);
  return launched("kernel 'ckks_moddown'");
}

/* ==== key-switching inner product ==================================================== */
/* For up to KS_WIDE_DIGITS digits, every word of a coefficient (the digits' gathers, both
 * key rows) is loaded before any product, as the linear transform's sum does, at three
 * blocks per SM: under ncu on the H200 14.5 -> 11.5 us at N = 2^14, and 8 hoisted rotations
 * at N = 2^16 3.596 -> 3.373 ms against four digits' words at a time (which remain for more
 * digits). The same sums mod q, so the same words. */
constexpr int KS_WIDE_DIGITS = 9;
/* own (in_ntt not NULL): digit own.digit[l]'s row l is read from the input's NTT rows */
template <class OWN>
__global__ void __launch_bounds__(EW_THREADS, 3) ks_kernel(const __grid_constant__ fh_ckks_ks_args a,
                                                           const __grid_constant__ OWN own) {
  pdl_begin();
  const int l = blockIdx.y;
  const int64_t n = (int64_t)1 << a.log_n;
  const fh_ckks_prime &pr = a.primes[a.prime[l]];
  const uint64_t q = pr.q, qi = pr.qinv;
  const int od = own_digit_of(own, l);
  /* steps (a.nsteps > 0): every step of a coefficient by its thread in turn, so that the
   * steps' gathers of this row's digits (each an aligned run of the row) meet in L2 while
   * the row's blocks run: the row is read from memory once, not once a step */
  const int nst = a.nsteps > 0 ? a.nsteps : 1;
  GROUPS(g, a.ngroups) {
    const uint64_t *dig = a.digits + g * a.digits_gs + (int64_t)l * n;
    /* digit od's row l: the input's NTT row */
    const uint64_t *orow = od >= 0 ? own_row_of(own, g, l, n) : NULL;
    COEFFS(j, n) for (int st = 0; st < nst; ++st) {
      const uint64_t gal = a.nsteps > 0 ? a.step_galois[st] : a.galois;
      const uint64_t *key = (a.nsteps > 0 ? a.step_key[st] : a.key) + (int64_t)a.key_row[l] * n;
      uint64_t *o0 = (a.nsteps > 0 ? a.step_out[st] : a.out) + g * a.out_gs + (int64_t)l * n, *o1 = o0 + a.out_cs;
      uint64_t r0 = 0, r1 = 0;
      /* the digits' slot (a rotation's automorphism read in place: the gathers of a warp stay
       * in one aligned 256-byte run, see the linear transform) */
      const int64_t src = gal > 1 ? (int64_t)fh_ckks_automorph_src((uint32_t)j, gal, a.log_n) : j;
      if (a.ndigits <= KS_WIDE_DIGITS) {
        /* padded to whole groups of 4 with zeros the compiler folds away */
        constexpr int PAD = (KS_WIDE_DIGITS + 3) / 4 * 4;
        uint64_t v[PAD], k0[PAD], k1[PAD];
#pragma unroll
        for (int d = 0; d < PAD; ++d) {
          const bool on = d < KS_WIDE_DIGITS && d < a.ndigits;
          v[d] = on ? (d == od ? orow : dig + d * a.digit_stride)[src] : 0;
          k0[d] = on ? key[d * a.key_ds + j] : 0;
          k1[d] = on ? key[d * a.key_ds + a.key_cs + j] : 0;
        }
#pragma unroll
        for (int d0 = 0; d0 < PAD; d0 += 4) fh_ckks_lt_mac4(v + d0, k0 + d0, k1 + d0, q, qi, &r0, &r1);
        o0[j] = r0;
        o1[j] = r1;
        continue;
      }
      /* sums of 4 products < 4 q^2 < q 2^64 (q < 2^62): one Montgomery reduction per 4 digits */
      for (int d0 = 0; d0 < a.ndigits; d0 += 4) {
        const int d1 = d0 + 4 < a.ndigits ? d0 + 4 : a.ndigits;
        unsigned __int128 acc0 = 0, acc1 = 0;
        for (int d = d0; d < d1; ++d) {
          const uint64_t x = (d == od ? orow : dig + d * a.digit_stride)[src];
          acc0 += (unsigned __int128)x * key[d * a.key_ds + j];
          acc1 += (unsigned __int128)x * key[d * a.key_ds + a.key_cs + j];
        }
        r0 = fh_mod_add(r0, fh_mont_reduce((uint64_t)acc0, (uint64_t)(acc0 >> 64), q, qi), q);
        r1 = fh_mod_add(r1, fh_mont_reduce((uint64_t)acc1, (uint64_t)(acc1 >> 64), q, qi), q);
      }
      o0[j] = r0;
      o1[j] = r1;
    }
  }
}

template <class OWN>
fh_status ks_inner_with(const fh_ckks_ks_args *a, const OWN &own, void *stream) {
  if (a->ngroups <= 0 || a->nlimbs <= 0) return FH_OK;
  const int64_t n = (int64_t)1 << a->log_n;
  const int threads = n < EW_THREADS ? (n > 32 ? (int)n : 32) : EW_THREADS;
  const dim3 grid(blocks_for(n, threads), a->nlimbs, grid_z(a->ngroups));
  pdl(ks_kernel<OWN>, grid, threads, 0, (cudaStream_t)stream, *a, own);
  return launched("kernel 'ckks_ks_inner'");
}
/* own.in_ntt NULL: nothing to skip, the generic kernel */
fh_status ks_inner_own(const fh_ckks_ks_args *a, const own_rows &own, void *stream) {
  return own.in_ntt ? ks_inner_with(a, own, stream) : ks_inner_with(a, no_own_rows{}, stream);
}
fh_status k_ks_inner(const void *argp, void *stream) {
  return ks_inner_with((const fh_ckks_ks_args *)argp, no_own_rows{}, stream);
}

/* ==== a linear transform's sum over QP (double hoisting) ==============================
 * A thread per (row, coefficient): every step of the launch in turn, the sums in
 * registers, one store per component. The automorphism's source slot keeps each aligned
 * block of 2^b slots inside one aligned block of 2^b slots (the low b bits of the output
 * slot only reach the low b bits of the source), so a warp's gathers of D and x stay in
 * one 256-byte run: the reads coalesce like the key's. */

/* The steps shared among LANES threads per coefficient: a block of EW_THREADS threads
 * takes EW_THREADS / LANES coefficients, thread (lane, c) the steps lane, lane + LANES,
 * ..; the lanes' partial sums meet in shared memory and lane 0 adds them (sums mod q in
 * any order: the same words). LANES times the threads of one thread per coefficient,
 * each with 1/LANES of its chain of dependent loads: at N = 2^14 a thread per
 * coefficient (147k threads) is too few to hide the latency of the key reads. */
/* fh_ckks_lt_terms for up to LT_WIDE digits with every word of the step (the digits'
 * gathers, both key rows, the plaintext's word) loaded before any product: twice the
 * bytes in flight of the four-digit chunks, for a sum whose time is the key's reads.
 * The same sums mod q, so the same words. */
constexpr int LT_WIDE = 8;
__device__ __forceinline__ void lt_terms_wide(const uint64_t *dig, int64_t d_ds, const uint64_t *key, int64_t key_ds,
                                              int64_t key_cs, int nd, uint32_t src, const uint64_t *x0,
                                              const uint64_t *x1, uint64_t pm, uint64_t pms, uint64_t q, uint64_t qi,
                                              uint64_t *t0, uint64_t *t1) {
  uint64_t r0 = 0, r1 = 0;
  if (key) {
    uint64_t v[LT_WIDE], k0[LT_WIDE], k1[LT_WIDE];
#pragma unroll
    for (int k = 0; k < LT_WIDE; ++k) {
      const bool on = k < nd;
      v[k] = on ? dig[k * d_ds + src] : 0;
      k0[k] = on ? key[k * key_ds] : 0;
      k1[k] = on ? key[k * key_ds + key_cs] : 0;
    }
#pragma unroll
    for (int d0 = 0; d0 < LT_WIDE; d0 += 4) fh_ckks_lt_mac4(v + d0, k0 + d0, k1 + d0, q, qi, &r0, &r1);
  }
  fh_ckks_lt_plain(x0, x1, key != NULL, src, pm, pms, q, &r0, &r1);
  *t0 = r0;
  *t1 = r1;
}

template <int LANES>
__global__ void __launch_bounds__(EW_THREADS, 3) lt_lanes_kernel(const __grid_constant__ fh_ckks_lt_args a) {
  pdl_begin();
  constexpr int COEFFS = EW_THREADS / LANES;
  __shared__ uint64_t part[2][LANES > 1 ? LANES - 1 : 1][COEFFS];
  const int l = blockIdx.y;
  const int64_t n = (int64_t)1 << a.log_n;
  const fh_ckks_prime &pr = a.primes[a.prime[l]];
  const uint64_t q = pr.q, qi = pr.qinv;
  const bool qrow = l < a.nq_rows;
  const uint64_t pm = qrow ? a.pmod[l] : 0, pms = qrow ? a.pmod_shoup[l] : 0;
  const int nd = a.ndigits;
  const int lane = threadIdx.x / COEFFS, c = threadIdx.x % COEFFS;
  const int64_t i = (int64_t)blockIdx.x * COEFFS + c;
  const bool live = i < n; /* the grid covers n exactly when n >= COEFFS (LANES > 1) */
  GROUPS(g, a.ngroups) {
    uint64_t *o0 = a.out + g * a.out_gs + (int64_t)l * n, *o1 = o0 + a.out_cs;
    const uint64_t *dig = a.d ? a.d + g * a.d_gs + (int64_t)l * n : NULL;
    const uint64_t *x0 = a.x + g * a.x_gs + (int64_t)l * n, *x1 = x0 + a.x_cs;
    uint64_t r0 = 0, r1 = 0;
    for (int s = lane; live && s < a.nsteps; s += LANES) {
      const uint64_t *key = a.key[s];
      const uint32_t src = key ? fh_ckks_automorph_src((uint32_t)i, a.galois[s], a.log_n) : (uint32_t)i;
      const uint64_t p = a.pt[s][g * a.pt_gs[s] + (int64_t)l * n + i]; /* loaded with the key's words */
      uint64_t t0, t1;
      if (nd <= LT_WIDE)
        lt_terms_wide(dig, a.d_ds, key ? key + (int64_t)a.key_row[l] * n + i : NULL, a.key_ds, a.key_cs, nd, src,
                      qrow ? x0 : NULL, x1, pm, pms, q, qi, &t0, &t1);
      else
        fh_ckks_lt_terms(dig, a.d_ds, key ? key + (int64_t)a.key_row[l] * n + i : NULL, a.key_ds, a.key_cs, nd, src,
                         qrow ? x0 : NULL, x1, pm, pms, q, qi, &t0, &t1);
      r0 = fh_mod_add(r0, fh_mont_mul(t0, p, q, qi), q);
      r1 = fh_mod_add(r1, fh_mont_mul(t1, p, q, qi), q);
    }
    if (LANES > 1 && lane > 0) {
      part[0][lane - 1][c] = r0;
      part[1][lane - 1][c] = r1;
    }
    if (LANES > 1) __syncthreads();
    if (lane == 0 && live) {
      if (a.accumulate) {
        r0 = fh_mod_add(r0, o0[i], q);
        r1 = fh_mod_add(r1, o1[i], q);
      }
#pragma unroll
      for (int k = 0; k < LANES - 1; ++k) {
        r0 = fh_mod_add(r0, part[0][k][c], q);
        r1 = fh_mod_add(r1, part[1][k][c], q);
      }
      o0[i] = r0;
      o1[i] = r1;
    }
    if (LANES > 1) __syncthreads(); /* the next group's partial sums reuse part */
  }
}

/* Lanes per coefficient: FHELIUM_CUDA_LT=1, 2, 4 or 8 (a benchmarking aid), else
 * LT_LANES_DEFAULT, never more than the launch's steps. */
constexpr int LT_LANES_DEFAULT = 4;
int lt_lanes(int nsteps) {
  static const char *const lanes_of[] = {"1", "2", "4", "8", NULL};
  static const int forced = env_switch("FHELIUM_CUDA_LT", lanes_of); /* log2 of the lanes, or -1 */
  int lanes = forced >= 0 ? 1 << forced : LT_LANES_DEFAULT;
  while (lanes > 1 && lanes > nsteps) lanes /= 2;
  return lanes;
}

fh_status k_lt(const void *argp, void *stream) {
  const fh_ckks_lt_args *a = (const fh_ckks_lt_args *)argp;
  if (a->ngroups <= 0 || a->nrows <= 0 || a->nsteps <= 0) return FH_OK;
  const int64_t n = (int64_t)1 << a->log_n;
  cudaStream_t h = (cudaStream_t)stream;
  int lanes = lt_lanes(a->nsteps);
  if (n < EW_THREADS / lanes) lanes = 1;
  const dim3 grid(blocks_for(n, EW_THREADS / lanes), a->nrows, grid_z(a->ngroups));
  switch (lanes) {
  case 8: pdl(lt_lanes_kernel<8>, grid, EW_THREADS, 0, h, *a); break;
  case 4: pdl(lt_lanes_kernel<4>, grid, EW_THREADS, 0, h, *a); break;
  case 2: pdl(lt_lanes_kernel<2>, grid, EW_THREADS, 0, h, *a); break;
  default: pdl(lt_lanes_kernel<1>, grid, EW_THREADS, 0, h, *a);
  }
  return launched("kernel 'ckks_lt'");
}

/* ==== small random rows from a keystream run (FH_K_CKKS_SAMPLE) =========================
 * A thread per coefficient computes the ChaCha20 block of each word it needs
 * (fh_chacha20_block, the function the CPU kernel runs; a Gaussian coefficient needs two:
 * its value and its signs), so the words are the CPU's and so are the rows. */
/* word w of the run at p (little-endian: keystream bytes 8 w .. 8 w + 7 after the run's start) */
__device__ uint64_t chacha_word(const fh_ckks_stream_pos &p, uint64_t w) {
  const uint64_t at = (uint64_t)p.word + w;
  const int k = (int)(at & 7);
  uint32_t x[16];
  fh_chacha20_block(p.key, p.nonce, p.block + (uint32_t)(at >> 3), x);
  uint64_t r = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) /* a select, not a local-memory index */
    if (j == k) r = (uint64_t)x[2 * j] | (uint64_t)x[2 * j + 1] << 32;
  return r;
}

__global__ void __launch_bounds__(EW_THREADS) sample_kernel(const __grid_constant__ fh_ckks_sample_args a) {
  pdl_begin();
  const int64_t n = a.n;
  const uint64_t tw = fh_ckks_ternary_words((uint64_t)n), gw = fh_ckks_gaussian_words((uint64_t)n);
  for (int r = blockIdx.y; r < a.nt + a.ng; r += gridDim.y) {
    int64_t *o = a.out + (int64_t)r * n;
    COEFFS(i, n) {
      if (r < a.nt) {
        o[i] = fh_ckks_ternary_of(chacha_word(a.pos, (uint64_t)r * tw + (uint64_t)i));
      } else {
        const uint64_t base = (uint64_t)a.nt * tw + (uint64_t)(r - a.nt) * gw + 65 * (uint64_t)(i / 64);
        o[i] = fh_ckks_gaussian_of(chacha_word(a.pos, base + 1 + (uint64_t)(i % 64)), chacha_word(a.pos, base),
                                   (int)(i % 64), a.cdt);
      }
    }
  }
}

fh_status k_sample(const void *argp, void *stream) {
  const fh_ckks_sample_args *a = (const fh_ckks_sample_args *)argp;
  const int rows = a->nt + a->ng;
  if (rows <= 0 || a->n <= 0) return FH_OK;
  const int threads = a->n < EW_THREADS ? (a->n > 32 ? (int)a->n : 32) : EW_THREADS;
  pdl(sample_kernel, dim3(blocks_for(a->n, threads), (unsigned)(rows < MAX_GRID_Z ? rows : MAX_GRID_Z)), threads, 0, (cudaStream_t)stream, *a);
  return launched("kernel 'ckks_sample'");
}

/* ==== automorphisms ================================================================== */
__global__ void __launch_bounds__(EW_THREADS) automorph_kernel(const __grid_constant__ fh_ckks_automorph_args a) {
  pdl_begin();
  const int l = blockIdx.y;
  const int64_t n = (int64_t)1 << a.log_n;
  const uint64_t m2 = 2 * (uint64_t)n, gal = a.galois;
  const uint64_t q = a.primes[a.prime[l]].q;
  GROUPS(g, a.ngroups) {
    uint64_t *o = a.out + g * a.out_gs + (int64_t)l * n;
    const uint64_t *x = a.in + g * a.in_gs + (int64_t)l * n;
    COEFFS(s, n) {
      if (a.ntt_domain) {
        o[s] = x[fh_ckks_automorph_src((uint32_t)s, gal, a.log_n)];
      } else {
        const uint64_t e = ((uint64_t)s * gal) & (m2 - 1);
        if (e < (uint64_t)n) o[e] = x[s];
        else o[e - (uint64_t)n] = fh_mod_neg(x[s], q);
      }
    }
  }
}

fh_status k_automorph(const void *argp, void *stream) {
  const fh_ckks_automorph_args *a = (const fh_ckks_automorph_args *)argp;
  if (a->ngroups <= 0 || a->nlimbs <= 0) return FH_OK;
  const int64_t n = (int64_t)1 << a->log_n;
  const int threads = n < EW_THREADS ? (n > 32 ? (int)n : 32) : EW_THREADS;
  pdl(automorph_kernel, dim3(blocks_for(n, threads), a->nlimbs, grid_z(a->ngroups)), threads, 0, (cudaStream_t)stream, *a);
  return launched("kernel 'ckks_automorph'");
}

/* ==== special FFT (encode / decode) ===================================================
 * v: `size` = N/2 complex values. Decode evaluates (fft_special of the CPU):
 * bit-reverse, then stages len = 2, 4, .., size, butterfly (i + j, i + j + len/2)
 * with twiddle ksi[(rot[j] mod 4 len) (2N / 4 len)]. Encode interpolates
 * (fft_special_inv): stages len = size .. 2 with the conjugate twiddle, then
 * bit-reverse and scale by 1/size. Every product and sum below is one
 * correctly rounded double operation, as on the CPU. */
struct cplx {
  double re, im;
};

__device__ __forceinline__ void dit_bfly(cplx &u, cplx &t, double wr, double wi) {
  const double vr = __dsub_rn(__dmul_rn(t.re, wr), __dmul_rn(t.im, wi));
  const double vi = __dadd_rn(__dmul_rn(t.re, wi), __dmul_rn(t.im, wr));
  t.re = __dsub_rn(u.re, vr);
  t.im = __dsub_rn(u.im, vi);
  u.re = __dadd_rn(u.re, vr);
  u.im = __dadd_rn(u.im, vi);
}
__device__ __forceinline__ void dif_bfly(cplx &u, cplx &t, double wr, double wi) {
  const double sr = __dadd_rn(u.re, t.re), si = __dadd_rn(u.im, t.im);
  const double dr = __dsub_rn(u.re, t.re), di = __dsub_rn(u.im, t.im);
  u.re = sr;
  u.im = si;
  t.re = __dsub_rn(__dmul_rn(dr, wr), __dmul_rn(di, wi));
  t.im = __dadd_rn(__dmul_rn(dr, wi), __dmul_rn(di, wr));
}
/* twiddle of butterfly j in a stage of length len (m2 = 2N) */
__device__ __forceinline__ void fft_twiddle(const uint64_t *rot, const double *ksi, uint64_t m2, int64_t len,
                                            int64_t j, bool inverse, double &wr, double &wi) {
  const uint64_t lenq = (uint64_t)len << 2, gap = m2 / lenq;
  const uint64_t r = fh_ckks_fft_exponent(rot[j], m2) % lenq;
  const uint64_t idx = (inverse ? lenq - r : r) * gap;
  wr = ksi[2 * idx];
  wi = ksi[2 * idx + 1];
}

/* DIT stages len = 2 .. len_hi over a contiguous span s of `span` values (a
 * multiple of len_hi; j is the offset inside the butterfly group, so the span's
 * position in the whole vector does not matter). */
__device__ void fft_dit_span(cplx *s, int span, int len_hi, const uint64_t *rot, const double *ksi, uint64_t m2) {
  for (int len = 2; len <= len_hi; len <<= 1) {
    const int lenh = len >> 1;
    for (int b = threadIdx.x; b < span / 2; b += blockDim.x) {
      const int i = b / lenh, j = b - i * lenh;
      const int x = i * len + j;
      double wr, wi;
      fft_twiddle(rot, ksi, m2, len, j, false, wr, wi);
      dit_bfly(s[x], s[x + lenh], wr, wi);
    }
    __syncthreads();
  }
}
/* DIF stages len = len_hi .. 2 over a contiguous span */
__device__ void fft_dif_span(cplx *s, int span, int len_hi, const uint64_t *rot, const double *ksi, uint64_t m2) {
  for (int len = len_hi; len >= 2; len >>= 1) {
    const int lenh = len >> 1;
    for (int b = threadIdx.x; b < span / 2; b += blockDim.x) {
      const int i = b / lenh, j = b - i * lenh;
      const int x = i * len + j;
      double wr, wi;
      fft_twiddle(rot, ksi, m2, len, j, true, wr, wi);
      dif_bfly(s[x], s[x + lenh], wr, wi);
    }
    __syncthreads();
  }
}
/* Stages with len > FFT_CHUNK on a tile of FFT_COLS adjacent columns of the
 * vector seen as (size / FFT_CHUNK) x FFT_CHUNK (value k * FFT_CHUNK + c),
 * in shared memory as [k][col]. */
__device__ void fft_col_stages(cplx *s, int rows, int c0, bool dit, const uint64_t *rot, const double *ksi,
                               uint64_t m2) {
  const int half = rows * FFT_COLS / 2;
  for (int lk = dit ? 2 : rows; dit ? lk <= rows : lk >= 2; lk = dit ? lk << 1 : lk >> 1) {
    const int lkh = lk >> 1;
    const int64_t len = (int64_t)lk * FFT_CHUNK;
    for (int b = threadIdx.x; b < half; b += blockDim.x) {
      const int col = b % FFT_COLS, bk = b / FFT_COLS;
      const int i = bk / lkh, jk = bk - i * lkh;
      const int k = i * lk + jk;
      /* offset in the butterfly group: (k mod lk) * FFT_CHUNK + column */
      const int64_t j = (int64_t)jk * FFT_CHUNK + c0 + col;
      double wr, wi;
      fft_twiddle(rot, ksi, m2, len, j, !dit, wr, wi);
      cplx &u = s[k * FFT_COLS + col], &t = s[(k + lkh) * FFT_COLS + col];
      if (dit) dit_bfly(u, t, wr, wi);
      else dif_bfly(u, t, wr, wi);
    }
    __syncthreads();
  }
}

/* Round x to the nearest integer (ties to even) and reduce it mod q exactly
 * (the CPU's round_mod). */
__device__ uint64_t mod_pow2(uint64_t e, const fh_modulus &m) {
  uint64_t r = 1 % m.q, b = 2 % m.q;
  while (e) {
    if (e & 1) r = fh_mod_mul(r, b, &m);
    b = fh_mod_mul(b, b, &m);
    e >>= 1;
  }
  return r;
}
__device__ uint64_t round_mod(double x, const fh_modulus &m) {
  if (!isfinite(x)) return 0;
  const double r = rint(x);
  const double ax = fabs(r);
  uint64_t res;
  if (ax < 0x1p63) {
    res = fh_barrett128((uint64_t)ax, 0, &m);
  } else {
    int e;
    const double f = frexp(ax, &e);
    const uint64_t mant = (uint64_t)ldexp(f, 53);
    res = fh_mod_mul(fh_barrett128(mant, 0, &m), mod_pow2((uint64_t)(e - 53), m), &m);
  }
  return r < 0 ? fh_mod_neg(res, m.q) : res;
}

/* Encode output: value e of the interpolated vector (before the bit
 * reversal), its final position p = bitrev(e): rows get round(re * scale)
 * at p and round(im * scale) at p + size. */
__device__ __forceinline__ void encode_store(const fh_ckks_encode_args &a, int64_t g, cplx v, int64_t e, int size_log,
                                             double inv) {
  const int64_t n = (int64_t)1 << a.log_n, size = n >> 1;
  const int64_t p = fh_ckks_bitrev((uint32_t)e, size_log);
  const double re = __dmul_rn(__dmul_rn(v.re, inv), a.scale), im = __dmul_rn(__dmul_rn(v.im, inv), a.scale);
  uint64_t *o = a.out + g * a.out_gs;
  for (int l = 0; l < a.nlimbs; ++l) {
    const fh_modulus &m = a.primes[a.prime[l]].bar;
    o[(int64_t)l * n + p] = round_mod(re, m);
    o[(int64_t)l * n + p + size] = round_mod(im, m);
  }
}
__device__ __forceinline__ cplx encode_load(const fh_ckks_encode_args &a, int64_t g, int64_t j) {
  const double *in = a.in + g * a.in_gs;
  cplx v = {0.0, 0.0};
  if (j < a.nslots_in) {
    v.re = a.in_complex ? in[2 * j] : in[j];
    v.im = a.in_complex ? in[2 * j + 1] : 0.0;
    if (fh_ckks_slot_conjugated(a.rot_group[j])) v.im = -v.im;
  }
  return v;
}

/* Encode of a whole vector in shared memory (size <= FFT_CHUNK). */
__global__ void __launch_bounds__(FFT_THREADS) encode_row_kernel(const __grid_constant__ fh_ckks_encode_args a) {
  pdl_begin();
  extern __shared__ cplx fs[];
  const int size_log = a.log_n - 1, size = 1 << size_log;
  const uint64_t m2 = 2 * ((uint64_t)1 << a.log_n);
  const double inv = 1.0 / (double)size;
  for (int64_t g = blockIdx.x; g < a.ngroups; g += gridDim.x) {
    for (int k = threadIdx.x; k < size; k += blockDim.x) fs[k] = encode_load(a, g, k);
    __syncthreads();
    fft_dif_span(fs, size, size, a.rot_group, a.ksi, m2);
    for (int k = threadIdx.x; k < size; k += blockDim.x) encode_store(a, g, fs[k], k, size_log, inv);
    __syncthreads();
  }
}
/* Encode, large vectors, phase 1: load and the stages len > FFT_CHUNK on column tiles, into work. */
__global__ void __launch_bounds__(FFT_THREADS) encode_col_kernel(const __grid_constant__ fh_ckks_encode_args a) {
  pdl_begin();
  extern __shared__ cplx fs[];
  const int64_t size = (int64_t)1 << (a.log_n - 1);
  const int rows = (int)(size >> FFT_CHUNK_LOG);
  const int c0 = blockIdx.x * FFT_COLS, tile = rows * FFT_COLS;
  const uint64_t m2 = 2 * ((uint64_t)1 << a.log_n);
  for (int64_t g = blockIdx.y; g < a.ngroups; g += gridDim.y) {
    cplx *w = (cplx *)(a.work + g * a.work_gs);
    for (int e = threadIdx.x; e < tile; e += blockDim.x) {
      const int k = e / FFT_COLS, col = e - k * FFT_COLS;
      fs[e] = encode_load(a, g, (int64_t)k * FFT_CHUNK + c0 + col);
    }
    __syncthreads();
    fft_col_stages(fs, rows, c0, false, a.rot_group, a.ksi, m2);
    for (int e = threadIdx.x; e < tile; e += blockDim.x) {
      const int k = e / FFT_COLS, col = e - k * FFT_COLS;
      w[(int64_t)k * FFT_CHUNK + c0 + col] = fs[e];
    }
    __syncthreads();
  }
}
/* Encode, phase 2: the stages len <= FFT_CHUNK on contiguous chunks, then the outputs. */
__global__ void __launch_bounds__(FFT_THREADS) encode_chunk_kernel(const __grid_constant__ fh_ckks_encode_args a) {
  pdl_begin();
  __shared__ cplx fs[FFT_CHUNK];
  const int size_log = a.log_n - 1;
  const int64_t size = (int64_t)1 << size_log, base = (int64_t)blockIdx.x * FFT_CHUNK;
  const uint64_t m2 = 2 * ((uint64_t)1 << a.log_n);
  const double inv = 1.0 / (double)size;
  for (int64_t g = blockIdx.y; g < a.ngroups; g += gridDim.y) {
    const cplx *w = (const cplx *)(a.work + g * a.work_gs) + base;
    for (int k = threadIdx.x; k < FFT_CHUNK; k += blockDim.x) fs[k] = w[k];
    __syncthreads();
    fft_dif_span(fs, FFT_CHUNK, FFT_CHUNK, a.rot_group, a.ksi, m2);
    for (int k = threadIdx.x; k < FFT_CHUNK; k += blockDim.x) encode_store(a, g, fs[k], base + k, size_log, inv);
    __syncthreads();
  }
}

fh_status k_encode(const void *argp, void *stream) {
  const fh_ckks_encode_args *a = (const fh_ckks_encode_args *)argp;
  if (a->ngroups <= 0) return FH_OK;
  cudaStream_t h = (cudaStream_t)stream;
  const int64_t size = (int64_t)1 << (a->log_n - 1);
  const unsigned gy = grid_z(a->ngroups);
  if (size <= FFT_CHUNK) {
    const int threads = size / 2 < FFT_THREADS ? (size / 2 > 32 ? (int)(size / 2) : 32) : FFT_THREADS;
    pdl(encode_row_kernel, gy, threads, (size_t)size * sizeof(cplx), h, *a);
  } else {
    const int rows = (int)(size >> FFT_CHUNK_LOG);
    pdl(encode_col_kernel, dim3(FFT_CHUNK / FFT_COLS, gy), FFT_THREADS, (size_t)rows * FFT_COLS * sizeof(cplx), h, *a);
    pdl(encode_chunk_kernel, dim3((unsigned)(size / FFT_CHUNK), gy), FFT_THREADS, 0, h, *a);
  }
  return launched("kernel 'ckks_encode'");
}

/* ==== decode ===========================================================================
 * Step 1 (decode_crt_kernel): each coefficient's residues to the centred
 * integer in (-Q/2, Q/2], as a double divided by the scale, into work[0, N):
 * coefficient i < N/2 is the real part of value i, i >= N/2 the imaginary part
 * of value i - N/2. The CPU's fast path (Garner over the last r_fast <= 8 primes
 * in 128 bits, checked against the other residues) runs here; a coefficient it
 * cannot settle is marked NaN and step 2 (decode_crt_wide_kernel, the CPU's
 * multi-word reconstruction, in shared memory) fills it in.
 * Step 3: the evaluation FFT (bit reversal fused into the load) into the output. */

/* Correctly rounded u128 -> double (round to nearest, ties to even), as the
 * C compiler's conversion on the CPU. */
__device__ double u128_to_double(unsigned __int128 x) {
  const uint64_t hi = (uint64_t)(x >> 64);
  if (hi == 0) return __ull2double_rn((uint64_t)x);
  const int shift = 128 - __clzll((long long)hi) - 53; /* bits below the 53 kept, >= 12 */
  uint64_t mant = (uint64_t)(x >> shift);
  const unsigned __int128 below = x & ((((unsigned __int128)1) << shift) - 1);
  const unsigned __int128 half = ((unsigned __int128)1) << (shift - 1);
  if (below > half || (below == half && (mant & 1))) ++mant; /* 2^53 at most: exact */
  return ldexp((double)mant, shift);
}

/* big integers of `len` 64-bit words, little-endian (the CPU's helpers) */
__device__ int big_muladd(uint64_t *x, int len, uint64_t m, uint64_t add) {
  unsigned __int128 carry = add;
  for (int i = 0; i < len; ++i) {
    const unsigned __int128 t = (unsigned __int128)x[i] * m + carry;
    x[i] = (uint64_t)t;
    carry = t >> 64;
  }
  if (carry) x[len++] = (uint64_t)carry;
  return len;
}
__device__ int big_cmp(const uint64_t *a, int la, const uint64_t *b, int lb) {
  while (la > 0 && a[la - 1] == 0) --la;
  while (lb > 0 && b[lb - 1] == 0) --lb;
  if (la != lb) return la < lb ? -1 : 1;
  for (int i = la - 1; i >= 0; --i)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}
/* r = a - b (a >= b), la words; r may alias b */
__device__ void big_sub(uint64_t *r, const uint64_t *a, int la, const uint64_t *b, int lb) {
  uint64_t borrow = 0;
  for (int i = 0; i < la; ++i) {
    const uint64_t bi = i < lb ? b[i] : 0;
    const uint64_t d = a[i] - bi - borrow;
    borrow = (a[i] < bi) || (a[i] - bi < borrow);
    r[i] = d;
  }
}
__device__ double big_to_double(const uint64_t *x, int len) {
  while (len > 0 && x[len - 1] == 0) --len;
  if (len == 0) return 0.0;
  double r = 0;
  for (int i = len - 1; i >= 0 && i >= len - 3; --i) r = __dadd_rn(r, ldexp(__ull2double_rn(x[i]), 64 * i));
  return r;
}

/* how many of the last primes the 128-bit fast path uses (the CPU's r_fast) */
__device__ int fast_primes(const fh_ckks_decode_args &a, unsigned __int128 *qf_out) {
  const int k = a.nlimbs;
  int r = 0;
  unsigned __int128 qf = 1;
  while (r < k && r < 8) {
    const uint64_t q = a.primes[a.nq - 1 - r].q;
    /* the CPU stops when qf > floor(2^126 / q), i.e. when qf q > 2^126 (192-bit product) */
    const unsigned __int128 p_lo = (unsigned __int128)(uint64_t)qf * q;
    const unsigned __int128 p_hi = (unsigned __int128)(uint64_t)(qf >> 64) * q + (uint64_t)(p_lo >> 64);
    const unsigned __int128 lim = ((unsigned __int128)1) << 62; /* 2^126 / 2^64 */
    const bool over = p_hi > lim || (p_hi == lim && (uint64_t)p_lo != 0);
    if (over) break;
    qf *= q;
    ++r;
  }
  *qf_out = qf;
  return r;
}

__global__ void __launch_bounds__(EW_THREADS) decode_crt_kernel(const __grid_constant__ fh_ckks_decode_args a) {
  pdl_begin();
  const int64_t n = (int64_t)1 << a.log_n, slots = n >> 1;
  const int k = a.nlimbs, nq = a.nq, first = nq - k;
  unsigned __int128 qf;
  const int r_fast = fast_primes(a, &qf);
  const double inv_scale = 1.0 / a.scale;
  GROUPS(g, a.ngroups) {
    const uint64_t *in = a.in_real ? nullptr : a.in + g * a.in_gs;
    const double *in_real = a.in_real ? a.in_real + g * a.in_gs : nullptr;
    double *w = a.work + g * a.work_gs;
    COEFFS(i, n) {
      double val = 0;
      bool done = false;
      if (in_real) {
        val = in_real[i];
        done = true;
      } else if (k == 1) {
        const uint64_t x = in[i], q = a.primes[first].q;
        val = x > q / 2 ? -__ull2double_rn(q - x) : __ull2double_rn(x);
        done = true;
      } else if (r_fast >= 2) {
        uint64_t v[8];
        unsigned __int128 x = in[(int64_t)(k - 1) * n + i], prod = a.primes[nq - 1].q;
        v[0] = (uint64_t)x;
        for (int r = 1; r < r_fast; ++r) {
          const fh_modulus &m = a.primes[nq - 1 - r].bar;
          const uint64_t *gr = a.garner + (int64_t)r * nq;
          uint64_t s = 0;
          for (int j = 0; j < r; ++j) s = fh_mod_add(s, fh_mod_mul(v[j], gr[j], &m), m.q);
          v[r] = fh_mod_mul(fh_mod_sub(in[(int64_t)(k - 1 - r) * n + i], s, m.q), gr[r], &m);
          x += (unsigned __int128)v[r] * prod;
          prod *= m.q;
        }
        const bool neg = x > qf / 2;
        const unsigned __int128 mag = neg ? qf - x : x;
        bool ok = true;
        for (int r = r_fast; r < k && ok; ++r) {
          const fh_modulus &m = a.primes[nq - 1 - r].bar;
          uint64_t res = fh_barrett128((uint64_t)mag, (uint64_t)(mag >> 64), &m);
          if (neg) res = fh_mod_neg(res, m.q);
          ok = res == in[(int64_t)(k - 1 - r) * n + i];
        }
        if (ok) {
          val = neg ? -u128_to_double(mag) : u128_to_double(mag);
          done = true;
        }
      }
      const double out = done ? __dmul_rn(val, inv_scale) : __longlong_as_double(0x7ff8000000000000LL);
      if (i < slots) w[2 * i] = out;
      else w[2 * (i - slots) + 1] = out;
    }
  }
}

constexpr int DECODE_WIDE_THREADS = 8;
constexpr unsigned DECODE_WIDE_BLOCKS = 512; /* each block rebuilds Q and Q/2 once */
/* The multi-word reconstruction for the coefficients step 1 marked; shared
 * memory holds Q and floor(Q/2) once and each thread's Garner digits and
 * accumulator. */
__global__ void decode_crt_wide_kernel(const __grid_constant__ fh_ckks_decode_args a) {
  pdl_begin();
  extern __shared__ uint64_t sw[];
  const int64_t n = (int64_t)1 << a.log_n, slots = n >> 1;
  const int k = a.nlimbs, nq = a.nq, first = nq - k, W = k + 1;
  uint64_t *Q = sw, *H = sw + W, *v = sw + 2 * W + threadIdx.x * 2 * W, *X = v + W;
  if (threadIdx.x == 0) {
    for (int i = 0; i < W; ++i) Q[i] = 0;
    Q[0] = 1;
    int lq = 1;
    for (int l = 0; l < k; ++l) lq = big_muladd(Q, lq, a.primes[first + l].q, 0);
    uint64_t carry = 0;
    for (int i = W - 1; i >= 0; --i) {
      H[i] = (Q[i] >> 1) | (carry << 63);
      carry = Q[i] & 1;
    }
  }
  __syncthreads();
  int lq = W;
  while (lq > 1 && Q[lq - 1] == 0) --lq;
  const double inv_scale = 1.0 / a.scale;
  GROUPS(g, a.ngroups) {
    const uint64_t *in = a.in + g * a.in_gs;
    double *w = a.work + g * a.work_gs;
    COEFFS(i, n) {
      double *slot = i < slots ? &w[2 * i] : &w[2 * (i - slots) + 1];
      if (!isnan(*slot)) continue;
      v[0] = in[(int64_t)(k - 1) * n + i];
      for (int r = 1; r < k; ++r) {
        const fh_modulus &m = a.primes[nq - 1 - r].bar;
        const uint64_t *gr = a.garner + (int64_t)r * nq;
        uint64_t s = 0;
        for (int j = 0; j < r; ++j) s = fh_mod_add(s, fh_mod_mul(v[j], gr[j], &m), m.q);
        v[r] = fh_mod_mul(fh_mod_sub(in[(int64_t)(k - 1 - r) * n + i], s, m.q), gr[r], &m);
      }
      for (int j = 0; j < W; ++j) X[j] = 0;
      X[0] = v[k - 1];
      int lx = 1;
      for (int r = k - 2; r >= 0; --r) lx = big_muladd(X, lx, a.primes[nq - 1 - r].q, v[r]);
      double val;
      if (big_cmp(X, lx, H, lq) > 0) {
        big_sub(X, Q, lq, X, lx);
        val = -big_to_double(X, lq);
      } else {
        val = big_to_double(X, lx);
      }
      *slot = __dmul_rn(val, inv_scale);
    }
  }
}

__device__ __forceinline__ void decode_store(const fh_ckks_decode_args &a, int64_t g, int64_t j, cplx v) {
  double *o = a.out + g * a.out_gs;
  if (a.out_complex) {
    o[2 * j] = v.re;
    o[2 * j + 1] = fh_ckks_slot_conjugated(a.rot_group[j]) ? -v.im : v.im;
  } else {
    o[j] = v.re;
  }
}

/* Evaluation of a whole vector in shared memory (size <= FFT_CHUNK). */
__global__ void __launch_bounds__(FFT_THREADS) decode_row_kernel(const __grid_constant__ fh_ckks_decode_args a) {
  pdl_begin();
  extern __shared__ cplx fs[];
  const int size_log = a.log_n - 1, size = 1 << size_log;
  const uint64_t m2 = 2 * ((uint64_t)1 << a.log_n);
  for (int64_t g = blockIdx.x; g < a.ngroups; g += gridDim.x) {
    const cplx *w = (const cplx *)(a.work + g * a.work_gs);
    for (int k = threadIdx.x; k < size; k += blockDim.x) fs[k] = w[fh_ckks_bitrev((uint32_t)k, size_log)];
    __syncthreads();
    fft_dit_span(fs, size, size, a.rot_group, a.ksi, m2);
    for (int k = threadIdx.x; k < size; k += blockDim.x) decode_store(a, g, k, fs[k]);
    __syncthreads();
  }
}
/* Evaluation, large vectors, phase 1: the bit-reversed gather from work[0, N)
 * and the stages len <= FFT_CHUNK on contiguous chunks, into work[N, 2N). */
__global__ void __launch_bounds__(FFT_THREADS) decode_chunk_kernel(const __grid_constant__ fh_ckks_decode_args a) {
  pdl_begin();
  __shared__ cplx fs[FFT_CHUNK];
  const int size_log = a.log_n - 1;
  const int64_t size = (int64_t)1 << size_log, base = (int64_t)blockIdx.x * FFT_CHUNK;
  const uint64_t m2 = 2 * ((uint64_t)1 << a.log_n);
  for (int64_t g = blockIdx.y; g < a.ngroups; g += gridDim.y) {
    const cplx *w = (const cplx *)(a.work + g * a.work_gs);
    cplx *w2 = (cplx *)(a.work + g * a.work_gs) + size;
    for (int k = threadIdx.x; k < FFT_CHUNK; k += blockDim.x) fs[k] = w[fh_ckks_bitrev((uint32_t)(base + k), size_log)];
    __syncthreads();
    fft_dit_span(fs, FFT_CHUNK, FFT_CHUNK, a.rot_group, a.ksi, m2);
    for (int k = threadIdx.x; k < FFT_CHUNK; k += blockDim.x) w2[base + k] = fs[k];
    __syncthreads();
  }
}
/* Evaluation, phase 2: the stages len > FFT_CHUNK on column tiles of
 * work[N, 2N), into the output. */
__global__ void __launch_bounds__(FFT_THREADS) decode_col_kernel(const __grid_constant__ fh_ckks_decode_args a) {
  pdl_begin();
  extern __shared__ cplx fs[];
  const int64_t size = (int64_t)1 << (a.log_n - 1);
  const int rows = (int)(size >> FFT_CHUNK_LOG);
  const int c0 = blockIdx.x * FFT_COLS, tile = rows * FFT_COLS;
  const uint64_t m2 = 2 * ((uint64_t)1 << a.log_n);
  for (int64_t g = blockIdx.y; g < a.ngroups; g += gridDim.y) {
    const cplx *w2 = (const cplx *)(a.work + g * a.work_gs) + size;
    for (int e = threadIdx.x; e < tile; e += blockDim.x) {
      const int k = e / FFT_COLS, col = e - k * FFT_COLS;
      fs[e] = w2[(int64_t)k * FFT_CHUNK + c0 + col];
    }
    __syncthreads();
    fft_col_stages(fs, rows, c0, true, a.rot_group, a.ksi, m2);
    for (int e = threadIdx.x; e < tile; e += blockDim.x) {
      const int k = e / FFT_COLS, col = e - k * FFT_COLS;
      decode_store(a, g, (int64_t)k * FFT_CHUNK + c0 + col, fs[e]);
    }
    __syncthreads();
  }
}

fh_status k_decode(const void *argp, void *stream) {
  const fh_ckks_decode_args *a = (const fh_ckks_decode_args *)argp;
  if (a->ngroups <= 0) return FH_OK;
  cudaStream_t h = (cudaStream_t)stream;
  const int64_t n = (int64_t)1 << a->log_n, size = n >> 1;
  const int threads = n < EW_THREADS ? (n > 32 ? (int)n : 32) : EW_THREADS;
  const unsigned gz = grid_z(a->ngroups);
  pdl(decode_crt_kernel, dim3(blocks_for(n, threads), 1, gz), threads, 0, h, *a);
  if (a->in_real == NULL && a->nlimbs > 1) {
    const size_t smem = (size_t)(2 + 2 * DECODE_WIDE_THREADS) * (a->nlimbs + 1) * sizeof(uint64_t);
    const unsigned nb = blocks_for(n, DECODE_WIDE_THREADS);
    pdl(decode_crt_wide_kernel, dim3(nb < DECODE_WIDE_BLOCKS ? nb : DECODE_WIDE_BLOCKS, 1, gz), DECODE_WIDE_THREADS, smem, h, *a);
  }
  if (size <= FFT_CHUNK) {
    const int ft = size / 2 < FFT_THREADS ? (size / 2 > 32 ? (int)(size / 2) : 32) : FFT_THREADS;
    pdl(decode_row_kernel, gz, ft, (size_t)size * sizeof(cplx), h, *a);
  } else {
    const int rows = (int)(size >> FFT_CHUNK_LOG);
    pdl(decode_chunk_kernel, dim3((unsigned)(size / FFT_CHUNK), gz), FFT_THREADS, 0, h, *a);
    pdl(decode_col_kernel, dim3(FFT_CHUNK / FFT_COLS, gz), FFT_THREADS, (size_t)rows * FFT_COLS * sizeof(cplx), h, *a);
  }
  return launched("kernel 'ckks_decode'");
}

} // namespace

const fh_cuda_kernel_fn fh__ckks_cuda_kernels[FH_K_CKKS_COUNT] = {
    k_ntt, k_intt, k_ew, k_tensor, k_bconv, k_ks_inner, k_automorph, k_encode, k_decode, k_modup, k_ks_core,
    k_moddown, k_lt, k_sample,
};
