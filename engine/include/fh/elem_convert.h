/* Element conversion between dtypes, shared by the CPU kernels
 * (engine/tensor/kernels_cpu.c) and the CUDA kernels (engine/tensor/kernels.cu),
 * so that casts, reductions and comparisons convert identically on both:
 * fh_wide_load widens an element to int64, uint64, double or complex;
 * fh_wide_store narrows it back, integer to integer by wrapping (two's
 * complement), float to integer saturating with NaN -> 0 (as CUDA's
 * cvt.sat), anything to bool as "non-zero". Pure inlines (FH_HD, from
 * modarith.h); nothing here allocates. */
#ifndef FH_ELEM_CONVERT_H
#define FH_ELEM_CONVERT_H

#include <stdint.h>

#include "fh/tensor.h" /* the dtype enum */
#include "fh/modarith.h"

typedef struct fh_wide {
  int kind; /* 0 int64, 1 uint64, 2 double, 3 complex */
  int64_t i;
  uint64_t u;
  double f, im;
} fh_wide;

FH_HD fh_wide fh_wide_load(int dtype, const char *p) {
  fh_wide w = {0, 0, 0, 0, 0};
  switch (dtype) {
    case FH_BOOL: w.kind = 1; w.u = *(const uint8_t *)p != 0; break;
    case FH_UINT8: w.kind = 1; w.u = *(const uint8_t *)p; break;
    case FH_INT32: w.kind = 0; w.i = *(const int32_t *)p; break;
    case FH_INT64: w.kind = 0; w.i = *(const int64_t *)p; break;
    case FH_UINT32: w.kind = 1; w.u = *(const uint32_t *)p; break;
    case FH_UINT64: w.kind = 1; w.u = *(const uint64_t *)p; break;
    case FH_FLOAT32: w.kind = 2; w.f = *(const float *)p; break;
    case FH_FLOAT64: w.kind = 2; w.f = *(const double *)p; break;
    case FH_COMPLEX128: w.kind = 3; w.f = ((const double *)p)[0]; w.im = ((const double *)p)[1]; break;
  }
  return w;
}

/* Saturating float -> integer conversion (NaN -> 0), as CUDA's cvt.sat. */
FH_HD int64_t fh_f2i(double x, double lo, double hi) {
  if (x != x) return 0;
  if (x <= lo) return (int64_t)lo;
  if (x >= hi) return x >= 9223372036854775807.0 ? INT64_MAX : (int64_t)hi;
  return (int64_t)x;
}
FH_HD uint64_t fh_f2u(double x, double hi) {
  if (x != x || x <= 0) return 0;
  if (x >= hi) return hi >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)hi;
  return (uint64_t)x;
}

FH_HD void fh_wide_store(int dtype, char *p, fh_wide w) {
  double f = w.kind == 0 ? (double)w.i : w.kind == 1 ? (double)w.u : w.f;
  uint64_t bits = w.kind == 0 ? (uint64_t)w.i : w.u;
  switch (dtype) {
    case FH_BOOL: *(uint8_t *)p = w.kind >= 2 ? (w.f != 0 || w.im != 0) : bits != 0; break;
    case FH_UINT8: *(uint8_t *)p = w.kind >= 2 ? (uint8_t)fh_f2u(f, 255.0) : (uint8_t)bits; break;
    case FH_INT32:
      *(int32_t *)p = w.kind >= 2 ? (int32_t)fh_f2i(f, -2147483648.0, 2147483647.0) : (int32_t)(uint32_t)bits;
      break;
    case FH_INT64:
      *(int64_t *)p = w.kind >= 2 ? fh_f2i(f, -9223372036854775808.0, 9223372036854775807.0) : (int64_t)bits;
      break;
    case FH_UINT32: *(uint32_t *)p = w.kind >= 2 ? (uint32_t)fh_f2u(f, 4294967295.0) : (uint32_t)bits; break;
    case FH_UINT64: *(uint64_t *)p = w.kind >= 2 ? fh_f2u(f, 18446744073709551615.0) : bits; break;
    case FH_FLOAT32: *(float *)p = (float)f; break;
    case FH_FLOAT64: *(double *)p = f; break;
    case FH_COMPLEX128:
      ((double *)p)[0] = f;
      ((double *)p)[1] = w.kind == 3 ? w.im : 0.0;
      break;
  }
}

#endif
