/* Status kinds, the thread-local error record, devices. */
#include "fh/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fh/runtime.h"

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

typedef struct fh_error_record {
  fh_status status;
  char message[FH_ERROR_MESSAGE_MAX];
  char path[512];
  char stage[32];
} fh_error_record;

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
void fh_error_clear(void) {
  err_rec.status = FH_OK;
  err_rec.message[0] = err_rec.path[0] = err_rec.stage[0] = '\0';
}

fh_status fh_device_parse(const char *s, fh_device *out) {
  if (s == NULL) return fh_error_set(FH_ERR_VALUE, "device must be a string");
  if (strcmp(s, "cpu") == 0) {
    *out = fh_cpu();
    return FH_OK;
  }
  if (strcmp(s, "cuda") == 0) {
    out->type = FH_DEVICE_CUDA;
    out->index = fh_cuda_current_device();
    return FH_OK;
  }
  if (strncmp(s, "cuda:", 5) == 0 && s[5] >= '0' && s[5] <= '9') {
    char *end = NULL;
    long n = strtol(s + 5, &end, 10);
    if (*end == '\0' && n >= 0 && n < 1024 && !(s[5] == '0' && s[6] != '\0')) {
      out->type = FH_DEVICE_CUDA;
      out->index = (int32_t)n;
      return FH_OK;
    }
  }
  return fh_error_set(FH_ERR_VALUE, "invalid device string '%s' (expected \"cpu\", \"cuda\" or \"cuda:N\")", s);
}

const char *fh_device_name(fh_device d, char *buf) {
  if (d.type == FH_DEVICE_CPU)
    snprintf(buf, FH_DEVICE_NAME_MAX, "cpu");
  else
    snprintf(buf, FH_DEVICE_NAME_MAX, "cuda:%d", (int)d.index);
  return buf;
}

fh_status fh_device_check(fh_device d) {
  if (d.type == FH_DEVICE_CPU) return FH_OK;
  if (!fh_cuda_is_available())
    return fh_error_set(FH_ERR_CUDA, "cuda:%d requested but CUDA is not available: %s", (int)d.index,
                        fh_cuda_unavailable_reason());
  int n = fh_cuda_device_count();
  if (d.index < 0 || d.index >= n)
    return fh_error_set(FH_ERR_CUDA, "invalid CUDA device cuda:%d (%d device%s present)", (int)d.index, n,
                        n == 1 ? "" : "s");
  return FH_OK;
}

const char *fh_version(void) { return FH_VERSION_STRING; }

bool fh_built_with_cuda(void) {
#ifdef FH_WITH_CUDA
  return true;
#else
  return false;
#endif
}
