/* Device strings and availability (fh/runtime.h): the part of the device
 * value type that needs the runtime's facts (the current CUDA device, how
 * many devices are present). fh/core.h keeps the value type itself. */
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
