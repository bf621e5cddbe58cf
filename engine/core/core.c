/* Status kinds, the thread-local error record, devices. */
#include "fh/core.h"

#include <stdarg.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#ifndef FH_VERSION_STRING
#define FH_VERSION_STRING "0.0.0"
#endif

static const char *const kind_names[FH_STATUS_COUNT] = {
    [FH_OK] = "OK",
    [FH_ERR_GENERIC] = "FHEliumError",
    [FH_ERR_VALUE] = "ValueError",
    [FH_ERR_TYPE] = "TypeError",
    [FH_ERR_STATE] = "StateError",
    [FH_ERR_CUDA] = "CudaError",
    [FH_ERR_MEMORY] = "MemoryError",
    [FH_ERR_EXECUTION] = "ExecutionError",
    [FH_ERR_EXEC_INPUT] = "ExecutionInputError",
    [FH_ERR_GRAPH_INPUT] = "CudaGraphInputError",
    [FH_ERR_CAPTURE] = "CudaGraphCaptureError",
    [FH_ERR_IO] = "IOError",
};

const char *fh_status_kind(fh_status s) {
  if ((int)s < 0 || s >= FH_STATUS_COUNT) return "FHEliumError";
  return kind_names[s];
}

typedef fh_error_saved fh_error_record;

static _Thread_local fh_error_record err_rec;

fh_status fh_error_set(fh_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_rec.message, sizeof err_rec.message, fmt, ap);
  va_end(ap);
  err_rec.status = s;
  err_rec.path[0] = '\0';
  err_rec.stage[0] = '\0';
  return s;
}

void fh_error_set_path(const char *path) {
  snprintf(err_rec.path, sizeof err_rec.path, "%s", path ? path : "");
}

void fh_error_set_stage(const char *stage) {
  snprintf(err_rec.stage, sizeof err_rec.stage, "%s", stage ? stage : "");
}

void fh_error_prefix(const char *fmt, ...) {
  char joined[2 * FH_ERROR_MESSAGE_MAX + 4];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(joined, FH_ERROR_MESSAGE_MAX, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = strlen(joined);
  memcpy(joined + len, ": ", 2);
  memcpy(joined + len + 2, err_rec.message, strlen(err_rec.message) + 1);
  memcpy(err_rec.message, joined, FH_ERROR_MESSAGE_MAX - 1);
  err_rec.message[FH_ERROR_MESSAGE_MAX - 1] = '\0';
}

fh_status fh_error_status(void) { return err_rec.status; }
const char *fh_error_message(void) { return err_rec.message; }
const char *fh_error_path(void) { return err_rec.path; }
const char *fh_error_stage(void) { return err_rec.stage; }
void fh_error_save(fh_error_saved *out) { *out = err_rec; }
void fh_error_restore(const fh_error_saved *saved) { err_rec = *saved; }

void fh_error_clear(void) {
  err_rec.status = FH_OK;
  err_rec.message[0] = err_rec.path[0] = err_rec.stage[0] = '\0';
}

const char *fh_device_name(fh_device d, char *buf) {
  if (d.type == FH_DEVICE_CPU)
    snprintf(buf, FH_DEVICE_NAME_MAX, "cpu");
  else
    snprintf(buf, FH_DEVICE_NAME_MAX, "cuda:%d", (int)d.index);
  return buf;
}

static atomic_int num_threads; /* 0: not read yet */

int fh_num_threads(void) {
  int n = atomic_load(&num_threads);
  if (n > 0) return n;
#ifdef _OPENMP
  n = omp_get_num_procs();
  const char *env = getenv("FHELIUM_NUM_THREADS");
  if (env != NULL && *env != '\0') {
    char *end = NULL;
    long v = strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 1 && v <= 4096) n = (int)v;
  }
  if (n < 1) n = 1;
#else
  n = 1;
#endif
  atomic_store(&num_threads, n);
  return n;
}

fh_status fh_set_num_threads(int n) {
  if (n < 1 || n > 4096) return fh_error_set(FH_ERR_VALUE, "number of threads must be in [1, 4096], got %d", n);
#ifdef _OPENMP
  atomic_store(&num_threads, n);
#else
  atomic_store(&num_threads, 1);
#endif
  return FH_OK;
}

/* 1: vector kernels on, 0: off, -1: not decided yet */
static atomic_int cpu_simd = -1;

static bool cpu_has_ifma(void) {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512ifma");
#else
  return false;
#endif
}

const char *fh_cpu_simd(void) {
  int s = atomic_load(&cpu_simd);
  if (s < 0) {
    const char *env = getenv("FHELIUM_CPU_SIMD");
    s = (env != NULL && strcmp(env, "0") == 0) ? 0 : cpu_has_ifma();
    atomic_store(&cpu_simd, s);
  }
  return s ? "avx512ifma" : "none";
}

void fh_set_cpu_simd(bool on) { atomic_store(&cpu_simd, on && cpu_has_ifma() ? 1 : 0); }

bool fh_built_with_openmp(void) {
#ifdef _OPENMP
  return true;
#else
  return false;
#endif
}

const char *fh_version(void) { return FH_VERSION_STRING; }

bool fh_built_with_cuda(void) {
#ifdef FH_WITH_CUDA
  return true;
#else
  return false;
#endif
}
