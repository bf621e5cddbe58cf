/* Argument blocks of the built-in tensor kernels, shared by the CPU
 * (engine/tensor/kernels_cpu.c) and CUDA (engine/tensor/kernels.cu) back ends.
 * Plain data only: they are copied into host tapes and CUDA graphs. Strides
 * are in elements; the host side has already collapsed dimensions, so
 * contiguous operands arrive as ndim == 1 with stride 1. */
#ifndef FH_KERNELS_H
#define FH_KERNELS_H

#include "fh/launch.h"
#include "fh/modarith.h"
#include "fh/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel ids of the tensor layer (fh/launch.h: ids are allocated by layers;
 * the CKKS kernels follow from FH_K_TENSOR_END, fh/ckks_kernels.h). */
typedef enum fh_kernel_id {
  FH_K_FILL = 0,   /* fh_fill_args */
  FH_K_COPY,       /* fh_copy_args: same-device strided copy with cast */
  FH_K_UNARY,      /* fh_ew_args */
  FH_K_BINARY,     /* fh_ew_args */
  FH_K_RNS,        /* fh_rns_args */
  FH_K_SUM,        /* fh_reduce_args */
  FH_K_COMPARE,    /* fh_compare_args */
  FH_K_COPY_BATCH, /* fh_copy_batch_args: small byte copies, sources device-accessible (CUDA only) */
  FH_K_TENSOR_END
} fh_kernel_id;

/* The tensor layer's kernel tables (indexed by id, FH_K_TENSOR_END entries),
 * registered with the launch boundary by fh__submit's first call: the CPU
 * table in engine/tensor/kernels_cpu.c (with the names), the CUDA one in
 * engine/tensor/kernels.cu (builds with CUDA only). */
extern const char *const fh__tensor_kernel_names[FH_K_TENSOR_END];
extern const fh_cpu_kernel_fn fh__tensor_cpu_kernels[FH_K_TENSOR_END];
extern const fh_cuda_kernel_fn fh__tensor_cuda_kernels[FH_K_TENSOR_END];

typedef struct fh_operand {
  char *data; /* element 0 */
  int64_t stride[FH_MAX_DIMS];
} fh_operand;

typedef struct fh_iter_shape {
  int32_t ndim; /* >= 1 */
  int64_t numel;
  int64_t shape[FH_MAX_DIMS];
} fh_iter_shape;

typedef struct fh_fill_args {
  fh_iter_shape it;
  int32_t dtype;
  fh_operand out;
  unsigned char value[16]; /* one element of dtype */
} fh_fill_args;

typedef struct fh_copy_args {
  fh_iter_shape it;
  int32_t dst_dtype, src_dtype;
  fh_operand dst, src;
} fh_copy_args;

typedef struct fh_ew_args {
  fh_iter_shape it;
  int32_t op;    /* fh_binary_op or fh_unary_op */
  int32_t dtype; /* of every operand */
  int32_t has_scalar, scalar_first;
  unsigned char scalar[16]; /* one element of dtype */
  fh_operand out, a, b;
} fh_ew_args;


typedef struct fh_rns_args {
  fh_iter_shape it;   /* not collapsed across the limb dimension */
  int32_t op;         /* fh_rns_op */
  int32_t limb_dim;   /* index into it.shape of the limb dimension */
  fh_operand out, a, b;
  int32_t nmoduli;
  fh_modulus mod[FH_RNS_MAX_LIMBS];
} fh_rns_args;

typedef struct fh_reduce_args {
  fh_iter_shape it;
  int32_t dtype;     /* input dtype */
  int32_t out_dtype; /* output dtype (0-dim) */
  fh_operand in;
  char *out;
} fh_reduce_args;

typedef enum fh_compare_mode { FH_CMP_EQUAL = 0, FH_CMP_CLOSE, FH_CMP_MAXDIFF } fh_compare_mode;
typedef struct fh_compare_args {
  fh_iter_shape it;
  int32_t mode;
  int32_t dtype;
  double rtol, atol;
  fh_operand a, b;
  /* FH_CMP_EQUAL / FH_CMP_CLOSE: out is int64 (count of mismatches);
   * FH_CMP_MAXDIFF: out is double (max |a-b|, NaN if any NaN). */
  char *out;
} fh_compare_args;

/* A batch of small contiguous byte copies into device memory, in one
 * kernel launch (the input copies of CudaGraphProgram:replay, engine/exec/
 * buffer.c): every source is device-accessible (device memory, or pinned
 * host memory, which unified addressing maps at the same address) and no
 * source overlaps a destination. Each segment moves in the widest unit (16,
 * 8, 4, 2 or 1 bytes) that divides its addresses and length. CUDA only:
 * the CPU table has no entry (host copies are plain memcpy). */
#define FH_COPY_BATCH_MAX 32
typedef struct fh_copy_seg {
  char *dst;
  const char *src;
  int64_t nbytes; /* > 0 */
} fh_copy_seg;
typedef struct fh_copy_batch_args {
  int32_t n; /* 1..FH_COPY_BATCH_MAX */
  int32_t unused;
  fh_copy_seg seg[FH_COPY_BATCH_MAX];
} fh_copy_batch_args;

/* Host helpers shared by the back ends. */
/* Collapse the iteration space for up to 3 operands (stride arrays may be
 * NULL for unused operands); keeps `keep_dim` (>= 0) separate, updating it. */
void fh_iter_collapse(fh_iter_shape *it, int64_t *s0, int64_t *s1, int64_t *s2, int *keep_dim);
/* Element offset of linear index `i` for an operand. */
static inline int64_t fh_iter_offset(const fh_iter_shape *it, const int64_t *stride, int64_t i) {
  int64_t off = 0;
  for (int d = it->ndim - 1; d >= 0; --d) {
    int64_t n = it->shape[d];
    off += (i % n) * stride[d];
    i /= n;
  }
  return off;
}

#ifdef __cplusplus
}
#endif
#endif
