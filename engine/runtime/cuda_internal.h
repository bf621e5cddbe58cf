/* Declarations of the runtime layer's CUDA side (the .cu files of engine/runtime), shared
 * with the CUDA sources of the layers above it. Not part of the engine API. */
#ifndef FH_CUDA_INTERNAL_H
#define FH_CUDA_INTERNAL_H

#include <cuda_runtime.h>

#include "fh/core.h"
#include "fh/cuda_alloc.h"
#include "fh/runtime.h"
#include "fh/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FH_CUDA_MAX_DEVICES 64

struct fh_stream {
  fh_refcount rc;
  fh_device dev;
  cudaStream_t h; /* NULL for the legacy default stream */
  int priority;
  bool is_default;
  uint64_t id; /* unique for the process, never reused (allocator free-list key) */
  char name[FH_STREAM_NAME_MAX]; /* fh_stream_set_name; "" when unset */
};

struct fh_event {
  fh_refcount rc;
  bool timing;
  bool recorded;
  fh_device dev; /* valid once the CUDA event exists */
  cudaEvent_t ev; /* created on first record */
  uint64_t stream_id; /* fh_stream_id of the latest record's stream */
};

/* Record a CudaError "<what>: <cudaErrorName> (<description>)" (MemoryError
 * for cudaErrorMemoryAllocation) and clear the runtime's last error. A
 * sticky error (fh__cuda_error_is_sticky) marks the runtime's current device
 * broken (fh__cuda_mark_broken, fh/runtime.h) and says so: "...: the CUDA
 * context of cuda:N is unusable after this error; restart the process"; once
 * broken, the device's error names the first one. */
fh_status fh__cuda_fail(cudaError_t e, const char *what);
/* True for the errors that leave a context unusable until the process ends. */
bool fh__cuda_error_is_sticky(cudaError_t e);
#define FH_CUDA_TRY(call, what)                         \
  do {                                                  \
    cudaError_t e_ = (call);                            \
    if (e_ != cudaSuccess) return fh__cuda_fail(e_, what); \
  } while (0)

/* Make CUDA device `index` the runtime's current device on this thread (only
 * calls cudaSetDevice when it changes). fhelium's own notion of the current
 * device (fh_cuda_current_device) is separate and never changed by this. */
fh_status fh__cuda_use_device(int index);
/* SM count of a device (cached). */
int fh__cuda_sm_count(int index);

/* The stream of the launch in progress on this thread: the launch boundary
 * records every used storage on the launch's stream right before calling the
 * kernel function, and recording remembers that stream here. Kernel
 * functions that need the fh_stream (for scratch memory) read it. */
fh_stream *fh__cuda_launch_stream(void);

/* True while some capture-private pool is active (any device): event
 * queries and synchronizing calls are then forbidden. */
bool fh__cuda_captures_active(void);
/* True while a pool is active on `index`. */
bool fh__cuda_pool_active(int index);

/* Allocator hooks for streams. */
void fh__cuda_alloc_stream_retired(fh_stream *s); /* before cudaStreamDestroy */

/* Events from a per-device cache (timing disabled); returned with
 * fh__cuda_event_put. The device must be current. */
fh_status fh__cuda_event_get(int dev, cudaEvent_t *out);
void fh__cuda_event_put(int dev, cudaEvent_t ev);

/* Streams and events released during a capture are destroyed when the last
 * capture ends (called by fh_mempool_end). */
void fh__cuda_process_deferred_destroys(void);

/* Pinned frees deferred during a capture are processed (called by
 * fh_mempool_end when no capture remains). */
void fh__pinned_process_deferred(void);

/* The staging rings of pageable host-to-device copies (copy.cu): their DMAs
 * waited for and their pinned memory given back (called by
 * fh_cuda_empty_cache outside captures; keeps the caller's error). */
void fh__copy_release_staging(void);

/* Parallel host memcpy (worker threads for large sizes). */
void fh__host_memcpy(void *dst, const void *src, size_t n);

#ifdef __cplusplus
}
#endif
#endif
