/* fhelium tensors: dtype, shape/stride/offset views over a storage, creation,
 * views, copies, arithmetic and reductions.
 *
 * A tensor is a reference-counted view: it holds one reference to its
 * storage and never owns device work itself. Views share the storage.
 * Dimensions are 0-based here; the Lua binding converts from 1-based.
 * Strides and offsets are in elements.
 *
 * Every operator validates on the host (dtypes, shapes, devices, streams),
 * allocates its outputs, then submits launches through the launch boundary
 * (fh/launch.h) on the current stream of its tensors' device; none of them
 * blocks except the host reads (fh_tensor_read, fh_equal, fh_allclose,
 * fh_max_abs_diff), which synchronize the stream they read on.
 *
 * Ownership: every fh_tensor ** out parameter receives a new reference. On
 * failure *out is left untouched and nothing was written. */
#ifndef FH_TENSOR_H
#define FH_TENSOR_H

#include "fh/core.h"
#include "fh/runtime.h"
#include "fh/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FH_MAX_DIMS 16

typedef enum fh_dtype {
  FH_BOOL = 0,
  FH_UINT8,
  FH_INT32,
  FH_INT64,
  FH_UINT32,
  FH_UINT64,
  FH_FLOAT32,
  FH_FLOAT64,
  FH_COMPLEX128,
  FH_DTYPE_COUNT
} fh_dtype;

const char *fh_dtype_name(fh_dtype d);
fh_status fh_dtype_parse(const char *s, fh_dtype *out); /* ValueError on unknown names */
size_t fh_dtype_size(fh_dtype d);
bool fh_dtype_is_floating(fh_dtype d); /* float32, float64 */
bool fh_dtype_is_complex(fh_dtype d);
bool fh_dtype_is_integer(fh_dtype d); /* not bool */

/* A host scalar of any dtype (used by fill, full and scalar operands). */
typedef enum fh_scalar_kind { FH_SCALAR_INT, FH_SCALAR_UINT, FH_SCALAR_FLOAT, FH_SCALAR_COMPLEX, FH_SCALAR_BOOL } fh_scalar_kind;
typedef struct fh_scalar {
  int32_t kind; /* fh_scalar_kind */
  union {
    int64_t i;
    uint64_t u;
    double f;
    double c[2];
    bool b;
  } v;
} fh_scalar;
fh_scalar fh_scalar_float(double x);
fh_scalar fh_scalar_int(int64_t x);
fh_scalar fh_scalar_uint(uint64_t x);
/* Converts a scalar to `d`'s element representation into `dst` (one
 * element). TypeError for complex -> real, ValueError for a non-integral
 * float into an integer dtype or a value out of the dtype's range. */
fh_status fh_scalar_to_dtype(const fh_scalar *s, fh_dtype d, void *dst);

typedef struct fh_tensor {
  fh_refcount rc;
  fh_storage *storage; /* one reference held */
  int64_t offset;      /* elements from storage->data */
  int32_t ndim;
  int32_t dtype; /* fh_dtype */
  bool requires_grad;
  int64_t shape[FH_MAX_DIMS];
  int64_t stride[FH_MAX_DIMS];
} fh_tensor;

typedef struct fh_tensor_options {
  fh_dtype dtype;
  fh_device device;
  bool pin_memory; /* CPU only */
  bool requires_grad;
} fh_tensor_options;
fh_tensor_options fh_tensor_options_default(void); /* float32 on cpu */

void fh_tensor_retain(fh_tensor *t);
void fh_tensor_release(fh_tensor *t);

/* ---- queries ---------------------------------------------------------- */
int64_t fh_tensor_numel(const fh_tensor *t);
size_t fh_tensor_element_size(const fh_tensor *t);
size_t fh_tensor_nbytes(const fh_tensor *t); /* numel * element size */
bool fh_tensor_is_contiguous(const fh_tensor *t);
/* True when two distinct indices of t address one memory location (an
 * expanded / stride-0 view, or any layout whose strides do not separate its
 * elements). Such a tensor can be read but never written (in-place ops,
 * copy_, fill_, out= refuse it with a ValueError). */
bool fh_tensor_is_self_overlapping(const fh_tensor *t);
static inline fh_device fh_tensor_device(const fh_tensor *t) { return t->storage->device; }
static inline bool fh_tensor_is_pinned(const fh_tensor *t) { return (t->storage->flags & FH_STORAGE_PINNED) != 0; }
/* Address of element 0 (borrowed; valid while the storage lives). */
static inline char *fh_tensor_data(const fh_tensor *t) {
  return (char *)t->storage->data + t->offset * (int64_t)fh_dtype_size((fh_dtype)t->dtype);
}
/* Checks shape values (non-negative, numel fits) */
fh_status fh_shape_check(int ndim, const int64_t *shape, int64_t *numel);
/* Contiguous strides for a shape. */
void fh_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);

/* ---- creation ----------------------------------------------------------- */
/* Uninitialised contents. */
fh_status fh_tensor_empty(int ndim, const int64_t *shape, const fh_tensor_options *o, fh_tensor **out);
fh_status fh_tensor_full(int ndim, const int64_t *shape, const fh_scalar *value, const fh_tensor_options *o, fh_tensor **out);
/* A view over an existing storage; ValueError if it would reach outside. */
fh_status fh_tensor_from_storage(fh_storage *s, int64_t offset, int ndim, const int64_t *shape, const int64_t *stride,
                                 fh_dtype dtype, fh_tensor **out);
/* A new CPU tensor (pageable) holding `numel` elements copied from `src`
 * (host memory in the dtype's representation), then moved to o->device. */
fh_status fh_tensor_from_host(const void *src, int ndim, const int64_t *shape, const fh_tensor_options *o, fh_tensor **out);
/* start, start+step, ... while < end (> end for negative step). */
fh_status fh_tensor_arange(double start, double end, double step, const fh_tensor_options *o, fh_tensor **out);

/* Seeded generator (xoshiro256**, seeded by splitmix64). Random creation
 * runs on the host at call time, then moves the result to the device, so a
 * seed gives the same values on every device. */
typedef struct fh_generator fh_generator;
fh_status fh_generator_new(uint64_t seed, fh_generator **out);
void fh_generator_free(fh_generator *g);
uint64_t fh_generator_seed(const fh_generator *g);
uint64_t fh_generator_next(fh_generator *g);
double fh_generator_uniform(fh_generator *g); /* [0, 1) with 53 random bits */
double fh_generator_normal(fh_generator *g);
/* g may be NULL: a per-thread generator seeded from the OS. rand draws
 * uniform values in [0, 1) (24 random bits per float32 element, 53 per
 * float64 element or complex128 component); randn draws standard normal
 * values (Box-Muller). Other dtypes are a TypeError. */
fh_status fh_tensor_rand(int ndim, const int64_t *shape, fh_generator *g, const fh_tensor_options *o, fh_tensor **out);
fh_status fh_tensor_randn(int ndim, const int64_t *shape, fh_generator *g, const fh_tensor_options *o, fh_tensor **out);

/* ---- views (share storage) -------------------------------------------- */
/* `shape` may hold one -1. ValueError when the strides cannot express it. */
fh_status fh_tensor_view(fh_tensor *t, int ndim, const int64_t *shape, fh_tensor **out);
/* A view when possible, else a contiguous copy. */
fh_status fh_tensor_reshape(fh_tensor *t, int ndim, const int64_t *shape, fh_tensor **out);
fh_status fh_tensor_transpose(fh_tensor *t, int d1, int d2, fh_tensor **out);
fh_status fh_tensor_permute(fh_tensor *t, int ndim, const int *perm, fh_tensor **out);
fh_status fh_tensor_narrow(fh_tensor *t, int dim, int64_t start, int64_t length, fh_tensor **out);
fh_status fh_tensor_select(fh_tensor *t, int dim, int64_t index, fh_tensor **out);
/* Broadcast to `shape` with stride-0 dimensions (read-only use). */
fh_status fh_tensor_expand(fh_tensor *t, int ndim, const int64_t *shape, fh_tensor **out);

/* ---- copies ------------------------------------------------------------- */
/* Copy src into dst (same shape, any strides, any devices). Dtypes convert
 * like C casts, made total: integer -> integer wraps modulo 2^bits,
 * float -> integer truncates toward zero and saturates (NaN -> 0),
 * anything -> bool is "!= 0", real -> complex has imaginary part 0;
 * complex -> real is refused (TypeError). When dst and src share memory
 * other than element for element, the copy reads a snapshot of src (as if
 * src was read completely first). `stream` may be NULL (the current stream
 * of the CUDA side). With non_blocking false the call returns once dst
 * holds the data. */
fh_status fh_tensor_copy_(fh_tensor *dst, fh_tensor *src, fh_stream *stream, bool non_blocking);
/* A new contiguous tensor with the same values on `dev` (pinned when
 * `pin` and dev is CPU). */
fh_status fh_tensor_to(fh_tensor *t, fh_device dev, bool pin, fh_stream *stream, bool non_blocking, fh_tensor **out);
fh_status fh_tensor_to_dtype(fh_tensor *t, fh_dtype dtype, fh_tensor **out);
fh_status fh_tensor_clone(fh_tensor *t, fh_tensor **out); /* contiguous, same device */
/* t itself (retained) when contiguous, else a contiguous clone. */
fh_status fh_tensor_contiguous(fh_tensor *t, fh_tensor **out);
fh_status fh_tensor_fill_(fh_tensor *t, const fh_scalar *value);
/* Read the elements of t, in row-major order, into host memory `dst`
 * (numel * element size bytes). Synchronizes. A host read: fails with
 * CudaGraphCaptureError while capturing. */
fh_status fh_tensor_read(fh_tensor *t, void *dst);

/* ---- arithmetic --------------------------------------------------------- */
typedef enum fh_binary_op { FH_OP_ADD = 0, FH_OP_SUB, FH_OP_MUL, FH_OP_DIV, FH_BINARY_OP_COUNT } fh_binary_op;
typedef enum fh_unary_op { FH_OP_NEG = 0, FH_UNARY_OP_COUNT } fh_unary_op;
typedef enum fh_rns_op { FH_RNS_ADD = 0, FH_RNS_SUB, FH_RNS_MUL, FH_RNS_NEG, FH_RNS_OP_COUNT } fh_rns_op;
const char *fh_binary_op_name(fh_binary_op op);

/* out = a (op) b. Exactly one of b / scalar is given; `scalar_first`
 * computes scalar (op) a. Shapes broadcast (trailing alignment, size-1
 * dimensions stretch). Tensors must share dtype and device; a scalar must
 * be representable in the dtype (ValueError otherwise). When `out` is
 * given it must have the broadcast shape, the dtype and the device; it may
 * alias an operand: element for element (in place) directly, otherwise the
 * operand is read from a snapshot. Bool arithmetic and integer division are
 * TypeErrors; integer arithmetic (negation included) wraps modulo 2^bits.
 * On any error nothing is written. */
fh_status fh_binary(fh_binary_op op, fh_tensor *a, fh_tensor *b, const fh_scalar *scalar, bool scalar_first,
                    fh_tensor *out, fh_tensor **result);
fh_status fh_unary(fh_unary_op op, fh_tensor *a, fh_tensor *out, fh_tensor **result);

/* Modular arithmetic on uint64 tensors [*, limb, n]: row i of the limb
 * dimension (the second-to-last) is reduced modulo moduli[i]; 2 <= q < 2^62
 * and at most FH_RNS_MAX_LIMBS rows. a and b have the same shape (no
 * broadcasting). mul is exact for any uint64 operands; add, sub and neg
 * expect operands reduced below q. Results are in [0, q). b is NULL for
 * negation. `out` as in fh_binary. */
#define FH_RNS_MAX_LIMBS 64
fh_status fh_rns(fh_rns_op op, fh_tensor *a, fh_tensor *b, const uint64_t *moduli, int nmoduli, fh_tensor *out,
                 fh_tensor **result);

/* ---- reductions and comparisons (host reads, synchronizing) ------------- */
/* A 0-dim tensor on t's device: float32 sums accumulate in double; integer
 * sums wrap; bool/uint8/int32/uint32 sum to int64. Launched, not a read. */
fh_status fh_sum(fh_tensor *t, fh_tensor **out);
/* Same shape, dtype and every element equal (NaN is never equal). Devices
 * may differ. A shape or dtype difference is a false result, not an error. */
fh_status fh_equal(fh_tensor *a, fh_tensor *b, bool *result);
/* Everywhere a == b (equal infinities included) or |a - b| is finite and
 * <= atol + rtol * |b| (NaN is never close). Same shape and dtype required
 * (ValueError / TypeError); rtol, atol >= 0. */
fh_status fh_allclose(fh_tensor *a, fh_tensor *b, double rtol, double atol, bool *result);
/* max |a - b| as a double: equal elements count 0 (also equal
 * infinities), any NaN makes it NaN, 0 for empty tensors. Same shape and
 * dtype required. Integer differences are exact before the conversion to
 * double. */
fh_status fh_max_abs_diff(fh_tensor *a, fh_tensor *b, double *result);

#ifdef __cplusplus
}
#endif
#endif
