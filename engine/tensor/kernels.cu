/* CUDA versions of the built-in tensor kernels (fh/kernels.h). They compute
 * the formulas of engine/tensor/kernels_cpu.c element for element, so results
 * are identical to the CPU backend: exact for integers and RNS arithmetic
 * (modarith.h is shared), bit-identical for float/complex elementwise
 * arithmetic and casts (every floating operation is a single IEEE
 * round-to-nearest operation, spelled with __*_rn intrinsics where a
 * compiler could otherwise fuse a multiply and an add). Two results can
 * differ in the last bits: floating sums (the GPU adds in a fixed tree order,
 * the CPU left to right) and complex comparisons (CUDA's hypot is within 2
 * ulp of the C library's).
 *
 * Every kernel function validates nothing (the host side did), launches on
 * the given stream and reports launch failures as CudaError. Contiguous
 * operands (collapsed to one dimension) take fast paths with small argument
 * lists; everything else walks strides. */
#include <math.h>
#include <string.h>

#include "cuda_internal.h"
#include "fh/elem_convert.h"
#include "fh/internal.h"
#include "fh/kernels.h"

#define THREADS 256
#define MAX_BLOCKS 4096

static inline int blocks_for(int64_t n) {
  int64_t b = (n + THREADS - 1) / THREADS;
  if (b < 1) b = 1;
  return b > MAX_BLOCKS ? MAX_BLOCKS : (int)b;
}

static fh_status launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fh__cuda_fail(e, what);
  return FH_OK;
}

/* ---- index helpers ---------------------------------------------------------- */
__device__ __forceinline__ int64_t off_of(const fh_iter_shape &it, const int64_t *stride, int64_t i) {
  int64_t off = 0;
  for (int d = it.ndim - 1; d >= 0; --d) {
    int64_t n = it.shape[d];
    off += (i % n) * stride[d];
    i /= n;
  }
  return off;
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Elements moved as raw bytes by size. */
struct e16 {
  uint64_t a, b;
};
template <int S> struct elem_of;
template <> struct elem_of<1> { typedef uint8_t T; };
template <> struct elem_of<4> { typedef uint32_t T; };
template <> struct elem_of<8> { typedef uint64_t T; };
template <> struct elem_of<16> { typedef e16 T; };

/* ---- scratch memory for multi-pass kernels ---------------------------------- */
/* A device buffer used on the launch's stream; released (stream-ordered,
 * guarded by record-stream) by the caller after the launches. */
static fh_status scratch_new(cudaStream_t h, size_t n, fh_storage **out) {
  fh_stream *ls = fh__cuda_launch_stream();
  if (ls == NULL || ls->h != h)
    return fh_error_set(FH_ERR_EXECUTION, "internal error: a kernel needing scratch memory ran outside the launch boundary");
  fh_storage *s = NULL;
  fh_status st = fh_storage_new(ls->dev, n, 0, &s);
  if (st != FH_OK) return st;
  if ((st = fh_storage_record_stream(s, ls)) != FH_OK) {
    fh_storage_release(s);
    return st;
  }
  *out = s;
  return FH_OK;
}

/* ---- fill ------------------------------------------------------------------------- */
template <typename E>
__global__ void fill_1d(E *out, int64_t n, int64_t stride, E v) {
  GRID_STRIDE(i, n) out[i * stride] = v;
}
template <typename E>
__global__ void fill_nd(__grid_constant__ const fh_fill_args a, E v) {
  E *out = (E *)a.out.data;
  GRID_STRIDE(i, a.it.numel) out[off_of(a.it, a.out.stride, i)] = v;
}

template <int S>
static void launch_fill(const fh_fill_args *a, cudaStream_t h) {
  typedef typename elem_of<S>::T E;
  E v;
  memcpy(&v, a->value, S);
  int64_t n = a->it.numel;
  if (a->it.ndim == 1) fill_1d<E><<<blocks_for(n), THREADS, 0, h>>>((E *)a->out.data, n, a->out.stride[0], v);
  else fill_nd<E><<<blocks_for(n), THREADS, 0, h>>>(*a, v);
}

static fh_status k_fill(const void *argp, void *stream) {
  const fh_fill_args *a = (const fh_fill_args *)argp;
  cudaStream_t h = (cudaStream_t)stream;
  size_t es = fh_dtype_size((fh_dtype)a->dtype);
  bool same_bytes = true;
  for (size_t i = 1; i < es; ++i) same_bytes = same_bytes && a->value[i] == a->value[0];
  if (a->it.ndim == 1 && a->out.stride[0] == 1 && same_bytes) {
    FH_CUDA_TRY(cudaMemsetAsync(a->out.data, a->value[0], (size_t)a->it.numel * es, h), "fill (cudaMemsetAsync)");
    return FH_OK;
  }
  switch (es) {
    case 1: launch_fill<1>(a, h); break;
    case 4: launch_fill<4>(a, h); break;
    case 8: launch_fill<8>(a, h); break;
    default: launch_fill<16>(a, h); break;
  }
  return launched("kernel 'fill'");
}

/* ---- copy --------------------------------------------------------------------------- */
template <typename E>
__global__ void copy_1d(E *d, const E *s, int64_t n, int64_t ds, int64_t ss) {
  GRID_STRIDE(i, n) d[i * ds] = s[i * ss];
}
template <typename E>
__global__ void copy_nd(__grid_constant__ const fh_copy_args a) {
  E *d = (E *)a.dst.data;
  const E *s = (const E *)a.src.data;
  GRID_STRIDE(i, a.it.numel) d[off_of(a.it, a.dst.stride, i)] = s[off_of(a.it, a.src.stride, i)];
}
__global__ void cast_1d(char *d, const char *s, int64_t n, int64_t ds, int64_t ss, int dt, int st) {
  GRID_STRIDE(i, n) fh_wide_store(dt, d + i * ds, fh_wide_load(st, s + i * ss));
}
__global__ void cast_nd(__grid_constant__ const fh_copy_args a, int64_t des, int64_t ses) {
  GRID_STRIDE(i, a.it.numel) {
    fh_wide_store(a.dst_dtype, a.dst.data + off_of(a.it, a.dst.stride, i) * des,
                  fh_wide_load(a.src_dtype, a.src.data + off_of(a.it, a.src.stride, i) * ses));
  }
}

template <int S>
static void launch_copy(const fh_copy_args *a, cudaStream_t h) {
  typedef typename elem_of<S>::T E;
  int64_t n = a->it.numel;
  if (a->it.ndim == 1)
    copy_1d<E><<<blocks_for(n), THREADS, 0, h>>>((E *)a->dst.data, (const E *)a->src.data, n, a->dst.stride[0],
                                                  a->src.stride[0]);
  else
    copy_nd<E><<<blocks_for(n), THREADS, 0, h>>>(*a);
}

/* byte range [lo, hi) an operand reaches */
static void extent(const fh_iter_shape *it, const fh_operand *op, size_t es, uintptr_t *lo, uintptr_t *hi) {
  int64_t a = 0, b = 0;
  for (int d = 0; d < it->ndim; ++d) {
    int64_t span = (it->shape[d] - 1) * op->stride[d];
    if (span < 0) a += span;
    else b += span;
  }
  *lo = (uintptr_t)(op->data + a * (int64_t)es);
  *hi = (uintptr_t)(op->data + (b + 1) * (int64_t)es);
}

static fh_status copy_direct(const fh_copy_args *a, cudaStream_t h) {
  size_t des = fh_dtype_size((fh_dtype)a->dst_dtype), ses = fh_dtype_size((fh_dtype)a->src_dtype);
  int64_t n = a->it.numel;
  if (a->dst_dtype == a->src_dtype) {
    if (a->it.ndim == 1 && a->dst.stride[0] == 1 && a->src.stride[0] == 1) {
      FH_CUDA_TRY(cudaMemcpyAsync(a->dst.data, a->src.data, (size_t)n * des, cudaMemcpyDeviceToDevice, h),
                  "copy (cudaMemcpyAsync)");
      return FH_OK;
    }
    switch (des) {
      case 1: launch_copy<1>(a, h); break;
      case 4: launch_copy<4>(a, h); break;
      case 8: launch_copy<8>(a, h); break;
      default: launch_copy<16>(a, h); break;
    }
  } else if (a->it.ndim == 1) {
    cast_1d<<<blocks_for(n), THREADS, 0, h>>>(a->dst.data, a->src.data, n, a->dst.stride[0] * (int64_t)des,
                                              a->src.stride[0] * (int64_t)ses, a->dst_dtype, a->src_dtype);
  } else {
    cast_nd<<<blocks_for(n), THREADS, 0, h>>>(*a, (int64_t)des, (int64_t)ses);
  }
  return launched("kernel 'copy'");
}

static fh_status k_copy(const void *argp, void *stream) {
  const fh_copy_args *a = (const fh_copy_args *)argp;
  cudaStream_t h = (cudaStream_t)stream;
  size_t des = fh_dtype_size((fh_dtype)a->dst_dtype), ses = fh_dtype_size((fh_dtype)a->src_dtype);
  uintptr_t dlo = 0, dhi = 0, slo = 0, shi = 0;
  extent(&a->it, &a->dst, des, &dlo, &dhi);
  extent(&a->it, &a->src, ses, &slo, &shi);
  bool identical = a->dst.data == a->src.data && a->dst_dtype == a->src_dtype &&
                   memcmp(a->dst.stride, a->src.stride, sizeof(int64_t) * (size_t)a->it.ndim) == 0;
  if (identical) return FH_OK;
  if (dlo < shi && slo < dhi) {
    /* overlapping: as memmove, through a contiguous copy of the source */
    fh_storage *tmp = NULL;
    fh_status st = scratch_new(h, (size_t)a->it.numel * ses, &tmp);
    if (st != FH_OK) return st;
    fh_copy_args one = *a, two = *a;
    one.dst.data = (char *)tmp->data;
    one.dst_dtype = a->src_dtype;
    fh_contiguous_strides(a->it.ndim, a->it.shape, one.dst.stride);
    two.src.data = (char *)tmp->data;
    memcpy(two.src.stride, one.dst.stride, sizeof one.dst.stride);
    if ((st = copy_direct(&one, h)) == FH_OK) st = copy_direct(&two, h);
    fh_storage_release(tmp);
    return st;
  }
  return copy_direct(a, h);
}

/* ---- elementwise arithmetic -------------------------------------------------------- */
struct c128 {
  double re, im;
};

template <typename T, typename UT> struct IntArith {
  static __device__ __forceinline__ T add(T u, T v) { return (T)((UT)u + (UT)v); }
  static __device__ __forceinline__ T sub(T u, T v) { return (T)((UT)u - (UT)v); }
  static __device__ __forceinline__ T mul(T u, T v) { return (T)((UT)u * (UT)v); }
  static __device__ __forceinline__ T div(T u, T v) { return mul(u, v); } /* unreachable: refused on the host */
};
template <typename T> struct Arith;
template <> struct Arith<uint8_t> : IntArith<uint8_t, uint32_t> {};
template <> struct Arith<int32_t> : IntArith<int32_t, uint32_t> {};
template <> struct Arith<uint32_t> : IntArith<uint32_t, uint32_t> {};
template <> struct Arith<int64_t> : IntArith<int64_t, uint64_t> {};
template <> struct Arith<uint64_t> : IntArith<uint64_t, uint64_t> {};
template <> struct Arith<float> {
  static __device__ __forceinline__ float add(float u, float v) { return __fadd_rn(u, v); }
  static __device__ __forceinline__ float sub(float u, float v) { return __fsub_rn(u, v); }
  static __device__ __forceinline__ float mul(float u, float v) { return __fmul_rn(u, v); }
  static __device__ __forceinline__ float div(float u, float v) { return __fdiv_rn(u, v); }
};
template <> struct Arith<double> {
  static __device__ __forceinline__ double add(double u, double v) { return __dadd_rn(u, v); }
  static __device__ __forceinline__ double sub(double u, double v) { return __dsub_rn(u, v); }
  static __device__ __forceinline__ double mul(double u, double v) { return __dmul_rn(u, v); }
  static __device__ __forceinline__ double div(double u, double v) { return __ddiv_rn(u, v); }
};
template <> struct Arith<c128> {
  static __device__ __forceinline__ c128 add(c128 u, c128 v) { return {__dadd_rn(u.re, v.re), __dadd_rn(u.im, v.im)}; }
  static __device__ __forceinline__ c128 sub(c128 u, c128 v) { return {__dsub_rn(u.re, v.re), __dsub_rn(u.im, v.im)}; }
  static __device__ __forceinline__ c128 mul(c128 u, c128 v) {
    return {__dsub_rn(__dmul_rn(u.re, v.re), __dmul_rn(u.im, v.im)),
            __dadd_rn(__dmul_rn(u.re, v.im), __dmul_rn(u.im, v.re))};
  }
  static __device__ __forceinline__ c128 div(c128 u, c128 v) {
    double d = __dadd_rn(__dmul_rn(v.re, v.re), __dmul_rn(v.im, v.im));
    return {__ddiv_rn(__dadd_rn(__dmul_rn(u.re, v.re), __dmul_rn(u.im, v.im)), d),
            __ddiv_rn(__dsub_rn(__dmul_rn(u.im, v.re), __dmul_rn(u.re, v.im)), d)};
  }
};

template <typename T, int OP> __device__ __forceinline__ T apply(T u, T v) {
  if (OP == FH_OP_ADD) return Arith<T>::add(u, v);
  if (OP == FH_OP_SUB) return Arith<T>::sub(u, v);
  if (OP == FH_OP_MUL) return Arith<T>::mul(u, v);
  return Arith<T>::div(u, v);
}

/* mode 0: a op b; 1: a op scalar; 2: scalar op a */
template <typename T, int OP>
__global__ void ew_1d(T *o, const T *x, const T *y, T sc, int64_t n, int64_t so, int64_t sx, int64_t sy, int mode) {
  GRID_STRIDE(i, n) {
    T u = x[i * sx];
    T v = mode == 0 ? y[i * sy] : sc;
    o[i * so] = mode == 2 ? apply<T, OP>(v, u) : apply<T, OP>(u, v);
  }
}
template <typename T, int OP>
__global__ void ew_nd(__grid_constant__ const fh_ew_args a, T sc, int mode) {
  T *o = (T *)a.out.data;
  const T *x = (const T *)a.a.data, *y = (const T *)a.b.data;
  GRID_STRIDE(i, a.it.numel) {
    T u = x[off_of(a.it, a.a.stride, i)];
    T v = mode == 0 ? y[off_of(a.it, a.b.stride, i)] : sc;
    o[off_of(a.it, a.out.stride, i)] = mode == 2 ? apply<T, OP>(v, u) : apply<T, OP>(u, v);
  }
}

template <typename T, int OP>
static void launch_ew(const fh_ew_args *a, cudaStream_t h) {
  T sc;
  memcpy(&sc, a->scalar, sizeof sc);
  int mode = !a->has_scalar ? 0 : a->scalar_first ? 2 : 1;
  int64_t n = a->it.numel;
  if (a->it.ndim == 1)
    ew_1d<T, OP><<<blocks_for(n), THREADS, 0, h>>>((T *)a->out.data, (const T *)a->a.data, (const T *)a->b.data, sc,
                                                   n, a->out.stride[0], a->a.stride[0], a->b.stride[0], mode);
  else
    ew_nd<T, OP><<<blocks_for(n), THREADS, 0, h>>>(*a, sc, mode);
}

template <typename T>
static void launch_ew_op(const fh_ew_args *a, cudaStream_t h) {
  switch (a->op) {
    case FH_OP_ADD: launch_ew<T, FH_OP_ADD>(a, h); break;
    case FH_OP_SUB: launch_ew<T, FH_OP_SUB>(a, h); break;
    case FH_OP_MUL: launch_ew<T, FH_OP_MUL>(a, h); break;
    default: launch_ew<T, FH_OP_DIV>(a, h); break;
  }
}

static fh_status k_binary(const void *argp, void *stream) {
  const fh_ew_args *a = (const fh_ew_args *)argp;
  cudaStream_t h = (cudaStream_t)stream;
  switch (a->dtype) {
    case FH_UINT8: launch_ew_op<uint8_t>(a, h); break;
    case FH_INT32: launch_ew_op<int32_t>(a, h); break;
    case FH_UINT32: launch_ew_op<uint32_t>(a, h); break;
    case FH_INT64: launch_ew_op<int64_t>(a, h); break;
    case FH_UINT64: launch_ew_op<uint64_t>(a, h); break;
    case FH_FLOAT32: launch_ew_op<float>(a, h); break;
    case FH_FLOAT64: launch_ew_op<double>(a, h); break;
    case FH_COMPLEX128: launch_ew_op<c128>(a, h); break;
    default: return fh_error_set(FH_ERR_TYPE, "binary kernel: unsupported dtype %s", fh_dtype_name((fh_dtype)a->dtype));
  }
  return launched("kernel 'binary'");
}

/* neg = 0 - a through the binary kernels, as on the CPU */
static fh_status k_unary(const void *argp, void *stream) {
  fh_ew_args b = *(const fh_ew_args *)argp;
  b.op = FH_OP_SUB;
  b.has_scalar = 1;
  b.scalar_first = 1;
  memset(b.scalar, 0, sizeof b.scalar);
  return k_binary(&b, stream);
}

/* ---- RNS -------------------------------------------------------------------------------- */
/* Rows are all dimensions but the last; the limb index is constant along a
 * row. blockIdx.y walks rows, x walks the row's elements. A row's offsets
 * and modulus are computed once per block (64-bit divisions are slow on the
 * GPU) and shared. */
template <int OP>
__global__ void rns_rows(__grid_constant__ const fh_rns_args a, int64_t rows, int64_t lstride_inner) {
  const int last = a.it.ndim - 1;
  const int64_t ncols = a.it.shape[last];
  const int64_t so = a.out.stride[last], sx = a.a.stride[last], sy = a.b.stride[last];
  __shared__ int64_t row_off[3];
  __shared__ fh_modulus row_mod;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    if (threadIdx.x == 0) {
      int64_t rem = r, o0 = 0, o1 = 0, o2 = 0;
      for (int d = last - 1; d >= 0; --d) {
        int64_t n = a.it.shape[d], idx = rem % n;
        rem /= n;
        o0 += idx * a.out.stride[d];
        o1 += idx * a.a.stride[d];
        o2 += idx * a.b.stride[d];
      }
      row_off[0] = o0;
      row_off[1] = o1;
      row_off[2] = o2;
      row_mod = a.mod[(r / lstride_inner) % a.it.shape[a.limb_dim]];
    }
    __syncthreads();
    const fh_modulus m = row_mod;
    uint64_t *o = (uint64_t *)a.out.data + row_off[0];
    const uint64_t *x = (const uint64_t *)a.a.data + row_off[1];
    const uint64_t *y = (const uint64_t *)a.b.data + row_off[2];
    __syncthreads(); /* everyone has read the row before thread 0 writes the next */
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < ncols; j += (int64_t)gridDim.x * blockDim.x) {
      uint64_t u = x[j * sx], res;
      if (OP == FH_RNS_ADD) res = fh_mod_add(u, y[j * sy], m.q);
      else if (OP == FH_RNS_SUB) res = fh_mod_sub(u, y[j * sy], m.q);
      else if (OP == FH_RNS_MUL) res = fh_mod_mul(u, y[j * sy], &m);
      else res = fh_mod_neg(u, m.q);
      o[j * so] = res;
    }
  }
}

/* Contiguous operands: a flat grid, one element per thread, the moduli in
 * shared memory; limb of element i = (i / n) % limbs. IDX is uint32_t when
 * every index fits (32-bit division is much cheaper). */
template <int OP, typename IDX>
__global__ void rns_flat(uint64_t *o, const uint64_t *x, const uint64_t *y,
                         __grid_constant__ const fh_rns_args a, IDX total, IDX ncols, IDX limbs) {
  __shared__ fh_modulus mods[FH_RNS_MAX_LIMBS];
  for (int k = threadIdx.x; k < a.nmoduli; k += blockDim.x) mods[k] = a.mod[k];
  __syncthreads();
  for (IDX i = (IDX)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (IDX)gridDim.x * blockDim.x) {
    const fh_modulus *m = &mods[(i / ncols) % limbs];
    uint64_t u = x[i], res;
    if (OP == FH_RNS_ADD) res = fh_mod_add(u, y[i], m->q);
    else if (OP == FH_RNS_SUB) res = fh_mod_sub(u, y[i], m->q);
    else if (OP == FH_RNS_MUL) res = fh_mod_mul(u, y[i], m);
    else res = fh_mod_neg(u, m->q);
    o[i] = res;
  }
}

static bool rns_contiguous(const fh_rns_args *a, bool binary) {
  /* after collapsing, the limb dimension and the last one remain; dims
   * between them were merged into the last */
  int last = a->it.ndim - 1;
  if (a->limb_dim != last - 1) return false;
  const fh_operand *ops[3] = {&a->out, &a->a, &a->b};
  for (int k = 0; k < (binary ? 3 : 2); ++k) {
    int64_t expect = 1;
    for (int d = last; d >= 0; --d) {
      if (a->it.shape[d] != 1 && ops[k]->stride[d] != expect) return false;
      expect *= a->it.shape[d];
    }
  }
  return true;
}

template <int OP>
static void launch_rns_flat(const fh_rns_args *a, cudaStream_t h) {
  int last = a->it.ndim - 1;
  int64_t n = a->it.numel, ncols = a->it.shape[last], limbs = a->it.shape[a->limb_dim];
  int blocks = (int)((n + THREADS - 1) / THREADS > 65535 * 8 ? 65535 * 8 : (n + THREADS - 1) / THREADS);
  uint64_t *o = (uint64_t *)a->out.data;
  const uint64_t *x = (const uint64_t *)a->a.data, *y = (const uint64_t *)a->b.data;
  if (n + (int64_t)blocks * THREADS < ((int64_t)1 << 32))
    rns_flat<OP, uint32_t><<<blocks, THREADS, 0, h>>>(o, x, y, *a, (uint32_t)n, (uint32_t)ncols, (uint32_t)limbs);
  else
    rns_flat<OP, uint64_t><<<blocks, THREADS, 0, h>>>(o, x, y, *a, (uint64_t)n, (uint64_t)ncols, (uint64_t)limbs);
}

static fh_status k_rns(const void *argp, void *stream) {
  const fh_rns_args *a = (const fh_rns_args *)argp;
  cudaStream_t h = (cudaStream_t)stream;
  int last = a->it.ndim - 1;
  int64_t ncols = a->it.shape[last];
  int64_t rows = ncols ? a->it.numel / ncols : 0;
  if (rows == 0) return FH_OK;
  if (rns_contiguous(a, a->op != FH_RNS_NEG)) {
    switch (a->op) {
      case FH_RNS_ADD: launch_rns_flat<FH_RNS_ADD>(a, h); break;
      case FH_RNS_SUB: launch_rns_flat<FH_RNS_SUB>(a, h); break;
      case FH_RNS_MUL: launch_rns_flat<FH_RNS_MUL>(a, h); break;
      default: launch_rns_flat<FH_RNS_NEG>(a, h); break;
    }
    return launched("kernel 'rns'");
  }
  int64_t lstride_inner = 1; /* rows per step of the limb index */
  for (int d = last - 1; d > a->limb_dim; --d) lstride_inner *= a->it.shape[d];
  /* about 2048 blocks in all; each thread takes several elements of a row */
  int64_t by = rows > 65535 ? 65535 : rows;
  int64_t bx = (ncols + THREADS - 1) / THREADS, cap = 2048 / by;
  if (cap < 1) cap = 1;
  if (bx > cap) bx = cap;
  dim3 grid((unsigned)bx, (unsigned)by);
  switch (a->op) {
    case FH_RNS_ADD: rns_rows<FH_RNS_ADD><<<grid, THREADS, 0, h>>>(*a, rows, lstride_inner); break;
    case FH_RNS_SUB: rns_rows<FH_RNS_SUB><<<grid, THREADS, 0, h>>>(*a, rows, lstride_inner); break;
    case FH_RNS_MUL: rns_rows<FH_RNS_MUL><<<grid, THREADS, 0, h>>>(*a, rows, lstride_inner); break;
    default: rns_rows<FH_RNS_NEG><<<grid, THREADS, 0, h>>>(*a, rows, lstride_inner); break;
  }
  return launched("kernel 'rns'");
}

/* ---- reductions ---------------------------------------------------------------------------- */
/* Two passes in a fixed order (so a result depends only on the input): G
 * blocks reduce grid-strided slices to partials, one block reduces those. */
struct sum_acc {
  uint64_t u;
  double f, im;
};

__device__ __forceinline__ void sum_add(sum_acc &s, const sum_acc &o) {
  s.u += o.u;
  s.f = __dadd_rn(s.f, o.f);
  s.im = __dadd_rn(s.im, o.im);
}

template <typename A, typename F>
__device__ __forceinline__ A block_reduce(A v, F combine) {
  __shared__ A sh[THREADS];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = THREADS / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) combine(sh[threadIdx.x], sh[threadIdx.x + w]);
    __syncthreads();
  }
  return sh[0];
}

struct sum_combine {
  __device__ void operator()(sum_acc &a, const sum_acc &b) const { sum_add(a, b); }
};

__global__ void sum_stage1(__grid_constant__ const fh_reduce_args a, int64_t es, sum_acc *partials) {
  sum_acc s = {0, 0.0, 0.0};
  const bool flat = a.it.ndim == 1;
  GRID_STRIDE(i, a.it.numel) {
    int64_t off = flat ? i * a.in.stride[0] : off_of(a.it, a.in.stride, i);
    fh_wide w = fh_wide_load(a.dtype, a.in.data + off * es);
    if (w.kind == 0) s.u += (uint64_t)w.i;
    else if (w.kind == 1) s.u += w.u;
    else {
      s.f = __dadd_rn(s.f, w.f);
      s.im = __dadd_rn(s.im, w.im);
    }
  }
  sum_acc r = block_reduce(s, sum_combine());
  if (threadIdx.x == 0) partials[blockIdx.x] = r;
}

__global__ void sum_stage2(const sum_acc *partials, int nparts, char *out, int in_dtype, int out_dtype) {
  sum_acc s = {0, 0.0, 0.0};
  for (int i = threadIdx.x; i < nparts; i += blockDim.x) sum_add(s, partials[i]);
  sum_acc r = block_reduce(s, sum_combine());
  if (threadIdx.x == 0) {
    fh_wide w = {0, 0, 0, 0, 0};
    if (in_dtype == FH_FLOAT32 || in_dtype == FH_FLOAT64 || in_dtype == FH_COMPLEX128) {
      w.kind = in_dtype == FH_COMPLEX128 ? 3 : 2;
      w.f = r.f;
      w.im = r.im;
    } else {
      w.kind = 1;
      w.u = r.u;
    }
    fh_wide_store(out_dtype, out, w);
  }
}

static int reduce_blocks(int64_t n) {
  int64_t g = (n + THREADS * 4 - 1) / (THREADS * 4);
  if (g < 1) g = 1;
  return g > 1024 ? 1024 : (int)g;
}

static fh_status k_sum(const void *argp, void *stream) {
  const fh_reduce_args *a = (const fh_reduce_args *)argp;
  cudaStream_t h = (cudaStream_t)stream;
  int g = reduce_blocks(a->it.numel);
  fh_storage *tmp = NULL;
  fh_status st = scratch_new(h, (size_t)g * sizeof(sum_acc), &tmp);
  if (st != FH_OK) return st;
  sum_acc *parts = (sum_acc *)tmp->data;
  if (a->it.numel > 0)
    sum_stage1<<<g, THREADS, 0, h>>>(*a, (int64_t)fh_dtype_size((fh_dtype)a->dtype), parts);
  sum_stage2<<<1, THREADS, 0, h>>>(parts, a->it.numel > 0 ? g : 0, a->out, a->dtype, a->out_dtype);
  st = launched("kernel 'sum'");
  fh_storage_release(tmp);
  return st;
}

struct cmp_acc {
  long long bad;
  double maxd;
  int nan;
};
struct cmp_combine {
  __device__ void operator()(cmp_acc &a, const cmp_acc &b) const {
    a.bad += b.bad;
    if (b.maxd > a.maxd) a.maxd = b.maxd;
    a.nan |= b.nan;
  }
};

__global__ void compare_stage1(__grid_constant__ const fh_compare_args a, int64_t es, cmp_acc *partials) {
  cmp_acc c = {0, 0.0, 0};
  const bool flat = a.it.ndim == 1;
  const bool cplx = a.dtype == FH_COMPLEX128;
  GRID_STRIDE(i, a.it.numel) {
    int64_t op = flat ? i * a.a.stride[0] : off_of(a.it, a.a.stride, i);
    int64_t oq = flat ? i * a.b.stride[0] : off_of(a.it, a.b.stride, i);
    fh_wide x = fh_wide_load(a.dtype, a.a.data + op * es), y = fh_wide_load(a.dtype, a.b.data + oq * es);
    double d, ay;
    if (x.kind == 0) {
      if (a.mode == FH_CMP_EQUAL) { c.bad += x.i != y.i; continue; }
      d = x.i > y.i ? (double)((uint64_t)x.i - (uint64_t)y.i) : (double)((uint64_t)y.i - (uint64_t)x.i);
      ay = fabs((double)y.i);
    } else if (x.kind == 1) {
      if (a.mode == FH_CMP_EQUAL) { c.bad += x.u != y.u; continue; }
      d = x.u > y.u ? (double)(x.u - y.u) : (double)(y.u - x.u);
      ay = (double)y.u;
    } else {
      if (a.mode == FH_CMP_EQUAL) { c.bad += !(x.f == y.f && x.im == y.im); continue; }
      /* hypot(t, 0) is |t| exactly (C Annex F), as on the CPU */
      if (cplx) {
        d = hypot(__dsub_rn(x.f, y.f), __dsub_rn(x.im, y.im));
        ay = hypot(y.f, y.im);
      } else {
        d = fabs(__dsub_rn(x.f, y.f));
        ay = fabs(y.f);
      }
    }
    if (a.mode == FH_CMP_CLOSE) c.bad += !(d <= __dadd_rn(a.atol, __dmul_rn(a.rtol, ay)));
    else if (d != d) c.nan = 1;
    else if (d > c.maxd) c.maxd = d;
  }
  cmp_acc r = block_reduce(c, cmp_combine());
  if (threadIdx.x == 0) partials[blockIdx.x] = r;
}

__global__ void compare_stage2(const cmp_acc *partials, int nparts, char *out, int mode) {
  cmp_acc c = {0, 0.0, 0};
  cmp_combine comb;
  for (int i = threadIdx.x; i < nparts; i += blockDim.x) comb(c, partials[i]);
  cmp_acc r = block_reduce(c, cmp_combine());
  if (threadIdx.x == 0) {
    if (mode == FH_CMP_MAXDIFF) *(double *)out = r.nan ? __longlong_as_double(0x7ff8000000000000LL) : r.maxd;
    else *(long long *)out = r.bad;
  }
}

static fh_status k_compare(const void *argp, void *stream) {
  const fh_compare_args *a = (const fh_compare_args *)argp;
  cudaStream_t h = (cudaStream_t)stream;
  int g = reduce_blocks(a->it.numel);
  fh_storage *tmp = NULL;
  fh_status st = scratch_new(h, (size_t)g * sizeof(cmp_acc), &tmp);
  if (st != FH_OK) return st;
  cmp_acc *parts = (cmp_acc *)tmp->data;
  if (a->it.numel > 0)
    compare_stage1<<<g, THREADS, 0, h>>>(*a, (int64_t)fh_dtype_size((fh_dtype)a->dtype), parts);
  compare_stage2<<<1, THREADS, 0, h>>>(parts, a->it.numel > 0 ? g : 0, a->out, a->mode);
  st = launched("kernel 'compare'");
  fh_storage_release(tmp);
  return st;
}

/* ---- copy batch ----------------------------------------------------------------------------- */
/* One block row (blockIdx.y) per segment; the blocks of a row stride over
 * the segment in units of the widest power of two (<= 16 bytes) dividing
 * its addresses and length. Sources in pinned host memory are read over the
 * bus by the SMs: for a few KiB this costs far less GPU time than a
 * copy-engine transfer and the cross-engine dependency after it. */
template <typename U>
__device__ __forceinline__ void copy_units(char *d, const char *s, int64_t n) {
  GRID_STRIDE(i, n) reinterpret_cast<U *>(d)[i] = reinterpret_cast<const U *>(s)[i];
}

__global__ void copy_batch_kernel(__grid_constant__ const fh_copy_batch_args a) {
  const fh_copy_seg &g = a.seg[blockIdx.y];
  uint64_t m = (uint64_t)(uintptr_t)g.dst | (uint64_t)(uintptr_t)g.src | (uint64_t)g.nbytes;
  if ((m & 15) == 0) copy_units<uint4>(g.dst, g.src, g.nbytes / 16);
  else if ((m & 7) == 0) copy_units<uint2>(g.dst, g.src, g.nbytes / 8);
  else if ((m & 3) == 0) copy_units<unsigned>(g.dst, g.src, g.nbytes / 4);
  else if ((m & 1) == 0) copy_units<unsigned short>(g.dst, g.src, g.nbytes / 2);
  else copy_units<unsigned char>(g.dst, g.src, g.nbytes);
}

static fh_status k_copy_batch(const void *argp, void *stream) {
  const fh_copy_batch_args *a = (const fh_copy_batch_args *)argp;
  if (a->n <= 0) return FH_OK;
  int64_t most = 0;
  for (int i = 0; i < a->n; ++i) most = a->seg[i].nbytes > most ? a->seg[i].nbytes : most;
  /* enough blocks for 16-byte units of the longest segment */
  int bx = blocks_for((most + 15) / 16);
  copy_batch_kernel<<<dim3((unsigned)bx, (unsigned)a->n), THREADS, 0, (cudaStream_t)stream>>>(*a);
  return launched("kernel 'copy_batch'");
}

const fh_cuda_kernel_fn fh__tensor_cuda_kernels[FH_K_TENSOR_END] = {
    k_fill, k_copy, k_unary, k_binary, k_rns, k_sum, k_compare, k_copy_batch};
