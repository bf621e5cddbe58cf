/* Engine-internal declarations shared between the generic C layer and the
 * CUDA layer. Not part of the public engine API. */
#ifndef FH_INTERNAL_H
#define FH_INTERNAL_H

#include "fh/kernels.h"
#include "fh/launch.h"
#include "fh/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copy between tensors on different devices (at least one CUDA), same shape
 * and dtype; `stream` NULL means the current stream of the CUDA side (of
 * dst when both are CUDA). Implemented by the CUDA layer. */
fh_status fh__cuda_copy_across(fh_tensor *dst, fh_tensor *src, fh_stream *stream, bool non_blocking);

/* Resolve the stream an operator on `dev` runs on: `s` when given (ValueError
 * if it belongs to another device), else the current stream of `dev`; NULL
 * for the CPU. Borrowed. */
fh_status fh__op_stream(fh_device dev, fh_stream *s, fh_stream **out);

/* Fill an fh_operand's data pointer and strides from a tensor whose shape
 * equals it->shape (before collapsing). */
void fh__operand_from(fh_operand *op, const fh_tensor *t);

/* FH_OK when t may be written (not self-overlapping); otherwise a
 * ValueError "<what>: unsupported operation: more than one element of the
 * written-to tensor refers to a single memory location (<arg> is ...)".
 * Every write into a caller's tensor (copy_, fill_, in-place and out=
 * operators) checks its target with this before touching anything. */
fh_status fh__check_writable(const fh_tensor *t, const char *what, const char *arg);

/* How `in`, read as an operand of an elementwise operator that writes
 * `out` (iteration shape = out's shape, `in` right-aligned and broadcast),
 * aliases out's memory: not at all, element for element (safe: each output
 * element only reads its own input element), or partially (the operator
 * must read a snapshot of `in`). */
typedef enum fh__overlap_kind { FH__NO_OVERLAP = 0, FH__SAME_ELEMENTS, FH__PARTIAL_OVERLAP } fh__overlap_kind;
fh__overlap_kind fh__overlap(const fh_tensor *out, const fh_tensor *in);

/* The last step of an engine function that makes a tensor: on FH_OK hand
 * `t` over to *result (the caller owns that reference) and return FH_OK;
 * otherwise release `t` (NULL allowed) and return st. */
static inline fh_status fh__deliver(fh_status st, fh_tensor *t, fh_tensor **result) {
  if (st != FH_OK) {
    fh_tensor_release(t);
    return st;
  }
  *result = t;
  return FH_OK;
}

/* The strided copy kernel (dtype conversion included) from src to dst, both
 * on dst's device, same shape, submitted on `s` (NULL on the CPU) through
 * the launch boundary. Validates nothing: callers have. */
fh_status fh__copy_submit(fh_tensor *dst, fh_tensor *src, fh_stream *s);

/* Submit a kernel over `dev` with the given uses (convenience). */
fh_status fh__submit(int kernel, fh_device dev, fh_stream *stream, const void *args, size_t size,
                     fh_storage *const *uses, int nuses);

#ifdef __cplusplus
}
#endif
#endif
