/* Device strings and availability (fh/runtime.h): the part of the device
 * value type that needs the runtime's facts (the current CUDA device, how
 * many devices are present). fh/core.h keeps the value type itself. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fh/runtime.h"

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

/* ---- broken CUDA contexts ------------------------------------------------
 * The strings are written under g_broken_mu before the flag is set (release);
 * readers load the flag (acquire) and then read the strings, which never
 * change again. */
static pthread_mutex_t g_broken_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool g_broken[FH_BROKEN_MAX_DEVICES];
static char g_broken_error[FH_BROKEN_MAX_DEVICES][64];
static char g_broken_what[FH_BROKEN_MAX_DEVICES][128];

bool fh__cuda_mark_broken(int index, const char *error_name, const char *what) {
  if (index < 0 || index >= FH_BROKEN_MAX_DEVICES) return false;
  bool marked = false;
  pthread_mutex_lock(&g_broken_mu);
  if (!atomic_load_explicit(&g_broken[index], memory_order_relaxed)) {
    snprintf(g_broken_error[index], sizeof g_broken_error[index], "%s", error_name ? error_name : "a sticky error");
    snprintf(g_broken_what[index], sizeof g_broken_what[index], "%s", what ? what : "a CUDA call");
    atomic_store_explicit(&g_broken[index], true, memory_order_release);
    marked = true;
  }
  pthread_mutex_unlock(&g_broken_mu);
  return marked;
}

bool fh__cuda_is_broken(int index) {
  return index >= 0 && index < FH_BROKEN_MAX_DEVICES && atomic_load_explicit(&g_broken[index], memory_order_acquire);
}

bool fh__device_is_broken(fh_device d) { return d.type == FH_DEVICE_CUDA && fh__cuda_is_broken(d.index); }

fh_status fh__cuda_broken_error(int index, const char *what) {
  const char *err = "a sticky error", *by = "a CUDA call";
  if (fh__cuda_is_broken(index)) {
    err = g_broken_error[index];
    by = g_broken_what[index];
  }
  return fh_error_set(FH_ERR_CUDA,
                      "%s%sthe CUDA context of cuda:%d is unusable after an earlier error (%s, detected by %s); "
                      "restart the process",
                      what ? what : "", what ? ": " : "", index, err, by);
}

fh_status fh_device_check(fh_device d) {
  if (d.type == FH_DEVICE_CPU) return FH_OK;
  if (fh__cuda_is_broken(d.index)) return fh__cuda_broken_error(d.index, NULL);
  if (!fh_cuda_is_available())
    return fh_error_set(FH_ERR_CUDA, "cuda:%d requested but CUDA is not available: %s", (int)d.index,
                        fh_cuda_unavailable_reason());
  int n = fh_cuda_device_count();
  if (d.index < 0 || d.index >= n)
    return fh_error_set(FH_ERR_CUDA, "invalid CUDA device cuda:%d (%d device%s present)", (int)d.index, n,
                        n == 1 ? "" : "s");
  return FH_OK;
}
