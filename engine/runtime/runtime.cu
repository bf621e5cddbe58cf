/* The CUDA runtime layer: device discovery, fhelium's current device and
 * per-thread current streams, streams and events (fh/runtime.h).
 *
 * Availability is decided once (pthread_once): cudaGetDeviceCount failing
 * (no driver, no device, CUDA_VISIBLE_DEVICES="") or finding zero devices
 * makes fh_cuda_is_available() false with the reason kept, and every CUDA use
 * fails with CudaError "no CUDA device is present (...)".
 *
 * Streams created here are non-blocking (cudaStreamNonBlocking): they do not
 * synchronize implicitly with the legacy default stream, so every ordering
 * between streams is explicit (events, wait_stream), as in PyTorch. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_profiler_api.h>

#include "cuda_internal.h"
#include "fh/launch.h"
#include "fh/trace.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_count;
static char g_reason[320];
static fh_stream g_default[FH_CUDA_MAX_DEVICES];
static int g_prio_least[FH_CUDA_MAX_DEVICES], g_prio_greatest[FH_CUDA_MAX_DEVICES];
static int g_sms[FH_CUDA_MAX_DEVICES];
static atomic_uint_fast64_t g_stream_ids;

/* Per-thread state. A thread's current streams hold one reference each; a
 * thread that exits with a non-default stream current leaks that reference
 * (the stream then lives until the process ends). */
static thread_local int tl_device;         /* fhelium's current device */
static thread_local int tl_runtime = -1;   /* the runtime's current device, -1 unknown */
static thread_local fh_stream *tl_current[FH_CUDA_MAX_DEVICES]; /* NULL: the default stream */
static thread_local fh_stream *tl_launch;

/* The errors after which the context cannot be used again: the CUDA runtime
 * documents them as leaving the process in an inconsistent state ("the
 * process must be terminated and relaunched"); cudaGetLastError does not
 * clear them and every later call of the context returns them. */
bool fh__cuda_error_is_sticky(cudaError_t e) {
  switch (e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorLaunchTimeout:
  case cudaErrorAssert:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorECCUncorrectable:
    return true;
  default:
    return false;
  }
}

fh_status fh__cuda_fail(cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  if (fh__cuda_error_is_sticky(e)) {
    /* the device whose context the failing call used: the runtime's current one */
    int d = tl_runtime;
    if (cudaGetDevice(&d) != cudaSuccess) d = tl_runtime >= 0 ? tl_runtime : 0;
    (void)cudaGetLastError();
    if (!fh__cuda_mark_broken(d, cudaGetErrorName(e), what) && fh__cuda_is_broken(d))
      return fh__cuda_broken_error(d, what); /* a later call that met the same sticky error */
    return fh_error_set(FH_ERR_CUDA,
                        "%s: %s (%s): the CUDA context of cuda:%d is unusable after this error; restart the process",
                        what, cudaGetErrorName(e), cudaGetErrorString(e), d);
  }
  fh_status kind = e == cudaErrorMemoryAllocation ? FH_ERR_MEMORY : FH_ERR_CUDA;
  return fh_error_set(kind, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static void init_once(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    void *drv = e == cudaErrorInsufficientDriver ? dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) : NULL;
    if (e == cudaErrorInsufficientDriver && drv == NULL)
      snprintf(g_reason, sizeof g_reason, "no CUDA device is present (no NVIDIA driver: libcuda.so.1 not found)");
    else
      snprintf(g_reason, sizeof g_reason, "no CUDA device is present (%s: %s)", cudaGetErrorName(e),
               cudaGetErrorString(e));
    if (drv) dlclose(drv);
    return;
  }
  if (n <= 0) {
    snprintf(g_reason, sizeof g_reason, "no CUDA device is present (cudaGetDeviceCount found none)");
    return;
  }
  if (n > FH_CUDA_MAX_DEVICES) n = FH_CUDA_MAX_DEVICES;
  for (int i = 0; i < n; ++i) {
    fh_stream *s = &g_default[i];
    fh_rc_init(&s->rc);
    s->dev.type = FH_DEVICE_CUDA;
    s->dev.index = i;
    s->h = NULL;
    s->priority = 0;
    s->is_default = true;
    s->id = atomic_fetch_add(&g_stream_ids, 1) + 1;
    int lo = 0, hi = 0, sms = 1;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, i) != cudaSuccess) sms = 1;
    g_sms[i] = sms;
    /* the priority range needs the device current; it creates no context */
    if (cudaSetDevice(i) == cudaSuccess && cudaDeviceGetStreamPriorityRange(&lo, &hi) == cudaSuccess) {
      g_prio_least[i] = lo;
      g_prio_greatest[i] = hi;
    }
    (void)cudaGetLastError();
  }
  (void)cudaSetDevice(0);
  g_count = n;
}

static inline void ensure_init(void) { pthread_once(&g_once, init_once); }

int fh_cuda_device_count(void) {
  ensure_init();
  return g_count;
}
bool fh_cuda_is_available(void) { return fh_cuda_device_count() > 0; }
const char *fh_cuda_unavailable_reason(void) {
  ensure_init();
  return g_count > 0 ? "" : g_reason;
}
int fh_cuda_current_device(void) { return fh_cuda_is_available() ? tl_device : 0; }
int fh__cuda_sm_count(int index) { return index >= 0 && index < g_count ? g_sms[index] : 1; }

static fh_status check_index(int index) {
  fh_device d = {FH_DEVICE_CUDA, index};
  return fh_device_check(d);
}

fh_status fh__cuda_use_device(int index) {
  /* every CUDA call of the engine passes here first: a broken context fails fast */
  if (fh__cuda_is_broken(index)) return fh__cuda_broken_error(index, NULL);
  if (tl_runtime == index) return FH_OK;
  FH_CUDA_TRY(cudaSetDevice(index), "cudaSetDevice");
  tl_runtime = index;
  return FH_OK;
}

fh_status fh_cuda_set_device(int index) {
  fh_status st = check_index(index);
  if (st != FH_OK) return st;
  if ((st = fh__cuda_use_device(index)) != FH_OK) return st;
  tl_device = index;
  return FH_OK;
}

fh_status fh_cuda_get_device_properties(int index, fh_device_properties *out) {
  fh_status st = check_index(index);
  if (st != FH_OK) return st;
  cudaDeviceProp p;
  FH_CUDA_TRY(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", p.name);
  out->total_memory = p.totalGlobalMem;
  out->major = p.major;
  out->minor = p.minor;
  out->multi_processor_count = p.multiProcessorCount;
  return FH_OK;
}

fh_status fh_cuda_synchronize(int index) {
  if (index < 0) index = fh_cuda_current_device();
  fh_status st = check_index(index);
  if (st != FH_OK) return st;
  if ((st = fh__cuda_use_device(index)) != FH_OK) return st;
  int tr = fh__trace_on ? fh__trace_begin(FH_TRACE_SYNC, "device synchronize", fh_cpu(), NULL) : FH_TRACE_SKIP;
  cudaError_t e = cudaDeviceSynchronize();
  if (tr != FH_TRACE_SKIP) {
    char d[48];
    snprintf(d, sizeof d, "cuda:%d", index);
    fh__trace_end(tr, 0, 0, d);
  }
  FH_CUDA_TRY(e, "cudaDeviceSynchronize");
  return FH_OK;
}

fh_status fh_cuda_stream_priority_range(int index, int *least, int *greatest) {
  fh_status st = check_index(index);
  if (st != FH_OK) return st;
  *least = g_prio_least[index];
  *greatest = g_prio_greatest[index];
  return FH_OK;
}

bool fh__cuda_any_capture(void) { return fh__cuda_captures_active(); }

/* "stream 7 (copy-in)" / "the default stream" of s, for trace details */
static const char *stream_label(const fh_stream *s, char *buf, size_t size) {
  if (s->is_default) snprintf(buf, size, "the default stream");
  else if (s->name[0]) snprintf(buf, size, "stream %llu (%s)", (unsigned long long)s->id, s->name);
  else snprintf(buf, size, "stream %llu", (unsigned long long)s->id);
  return buf;
}

/* ---- streams ------------------------------------------------------------ */
fh_status fh_stream_new(fh_device dev, int priority, fh_stream **out) {
  fh_status st = fh_device_check(dev);
  if (st != FH_OK) return st;
  if (dev.type != FH_DEVICE_CUDA) return fh_error_set(FH_ERR_VALUE, "streams exist only on CUDA devices");
  if ((st = fh__cuda_use_device(dev.index)) != FH_OK) return st;
  /* lower number = higher priority; clamp into [greatest, least] */
  int p = priority;
  if (p > g_prio_least[dev.index]) p = g_prio_least[dev.index];
  if (p < g_prio_greatest[dev.index]) p = g_prio_greatest[dev.index];
  fh_stream *s = (fh_stream *)fh_calloc(1, sizeof *s);
  if (s == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory creating a stream");
  cudaError_t e = cudaStreamCreateWithPriority(&s->h, cudaStreamNonBlocking, p);
  if (e != cudaSuccess) {
    fh_free(s);
    return fh__cuda_fail(e, "cudaStreamCreateWithPriority");
  }
  fh_rc_init(&s->rc);
  s->dev = dev;
  s->priority = p;
  s->is_default = false;
  s->id = atomic_fetch_add(&g_stream_ids, 1) + 1;
  *out = s;
  return FH_OK;
}

void fh_stream_retain(fh_stream *s) {
  if (s != NULL && !s->is_default) fh_rc_retain(&s->rc);
}

/* Destroying streams and events is not allowed while a capture runs (Lua's
 * GC may drop them at any time): they wait here until the last capture ends. */
static pthread_mutex_t g_defer_mu = PTHREAD_MUTEX_INITIALIZER;
static fh_stream **g_defer_streams;
static size_t g_ndefer_streams, g_capdefer_streams;
static cudaEvent_t *g_defer_events;
static size_t g_ndefer_events, g_capdefer_events;

static bool defer_push(void ***arr, size_t *n, size_t *cap, void *p) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 16;
    void **a = (void **)fh_realloc(*arr, c * sizeof *a);
    if (a == NULL) return false;
    *arr = a;
    *cap = c;
  }
  (*arr)[(*n)++] = p;
  return true;
}

static void stream_destroy(fh_stream *s) {
  fh_error_saved keep; /* the last release may come while the caller's error is pending */
  fh_error_save(&keep);
  /* its cached blocks become idle after the work queued so far */
  fh__cuda_alloc_stream_retired(s);
  if (fh__cuda_use_device(s->dev.index) == FH_OK) (void)cudaStreamDestroy(s->h);
  (void)cudaGetLastError();
  fh_error_restore(&keep);
  fh_free(s);
}

void fh__cuda_process_deferred_destroys(void) {
  pthread_mutex_lock(&g_defer_mu);
  fh_stream **ss = g_defer_streams;
  size_t ns = g_ndefer_streams;
  cudaEvent_t *es = g_defer_events;
  size_t ne = g_ndefer_events;
  g_defer_streams = NULL;
  g_ndefer_streams = g_capdefer_streams = 0;
  g_defer_events = NULL;
  g_ndefer_events = g_capdefer_events = 0;
  pthread_mutex_unlock(&g_defer_mu);
  for (size_t i = 0; i < ns; ++i) stream_destroy(ss[i]);
  for (size_t i = 0; i < ne; ++i) (void)cudaEventDestroy(es[i]);
  (void)cudaGetLastError();
  fh_free(ss);
  fh_free(es);
}

void fh_stream_release(fh_stream *s) {
  if (s == NULL || s->is_default || !fh_rc_release(&s->rc)) return;
  if (fh__cuda_captures_active()) {
    pthread_mutex_lock(&g_defer_mu);
    /* if even the list cannot grow, the stream leaks: destroying it now could break the capture */
    (void)defer_push((void ***)&g_defer_streams, &g_ndefer_streams, &g_capdefer_streams, s);
    pthread_mutex_unlock(&g_defer_mu);
    return;
  }
  stream_destroy(s);
}


fh_status fh_stream_default(fh_device dev, fh_stream **out) {
  fh_status st = fh_device_check(dev);
  if (st != FH_OK) return st;
  if (dev.type != FH_DEVICE_CUDA) return fh_error_set(FH_ERR_VALUE, "streams exist only on CUDA devices");
  *out = &g_default[dev.index];
  return FH_OK;
}

fh_status fh_stream_current(fh_device dev, fh_stream **out) {
  if (dev.type != FH_DEVICE_CUDA || dev.index < 0 || dev.index >= fh_cuda_device_count()) {
    fh_status st = fh_device_check(dev);
    if (st != FH_OK) return st;
    return fh_error_set(FH_ERR_VALUE, "streams exist only on CUDA devices");
  }
  fh_stream *s = tl_current[dev.index];
  *out = s != NULL ? s : &g_default[dev.index];
  return FH_OK;
}

void fh_stream_set_current(fh_stream *s) {
  int i = s->dev.index;
  fh_stream *old = tl_current[i];
  if (old == s) return;
  fh_stream_retain(s);
  tl_current[i] = s->is_default ? NULL : s;
  if (s->is_default) fh_stream_release(s);
  fh_stream_release(old);
}

fh_device fh_stream_device(const fh_stream *s) { return s->dev; }
int fh_stream_priority(const fh_stream *s) { return s->priority; }
bool fh_stream_is_default(const fh_stream *s) { return s->is_default; }
void *fh_stream_handle(const fh_stream *s) { return (void *)s->h; }
uint64_t fh_stream_id(const fh_stream *s) { return s->id; }
const char *fh_stream_name(const fh_stream *s) { return s->name; }
void fh_stream_set_name(fh_stream *s, const char *name) {
  if (s->is_default) return; /* shared by every user of the device */
  snprintf(s->name, sizeof s->name, "%s", name ? name : "");
}

fh_status fh_stream_synchronize(fh_stream *s) {
  fh_status st = fh__cuda_use_device(s->dev.index);
  if (st != FH_OK) return st;
  int tr = fh__trace_on ? fh__trace_begin(FH_TRACE_SYNC, "stream synchronize", fh_cpu(), NULL) : FH_TRACE_SKIP;
  cudaError_t e = cudaStreamSynchronize(s->h);
  if (tr != FH_TRACE_SKIP) {
    char d[96];
    fh__trace_end(tr, 0, 0, stream_label(s, d, sizeof d));
  }
  FH_CUDA_TRY(e, "cudaStreamSynchronize");
  return FH_OK;
}

fh_status fh_stream_query(fh_stream *s, bool *done) {
  fh_status st = fh__cuda_use_device(s->dev.index);
  if (st != FH_OK) return st;
  cudaError_t e = cudaStreamQuery(s->h);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    *done = false;
    return FH_OK;
  }
  FH_CUDA_TRY(e, "cudaStreamQuery");
  *done = true;
  return FH_OK;
}

fh_status fh_stream_wait_stream(fh_stream *s, fh_stream *other) {
  if (s == other) return FH_OK;
  fh_status st = fh__cuda_use_device(other->dev.index);
  if (st != FH_OK) return st;
  cudaEvent_t ev = NULL;
  if ((st = fh__cuda_event_get(other->dev.index, &ev)) != FH_OK) return st;
  cudaError_t e = cudaEventRecord(ev, other->h);
  if (e == cudaSuccess) {
    if ((st = fh__cuda_use_device(s->dev.index)) != FH_OK) {
      fh__cuda_event_put(other->dev.index, ev);
      return st;
    }
    e = cudaStreamWaitEvent(s->h, ev, 0);
  }
  /* back to the pool at once: the wait took the record it needs, and a later record
   * of the event does not change it */
  fh__cuda_event_put(other->dev.index, ev);
  if (e != cudaSuccess) return fh__cuda_fail(e, "Stream:wait_stream");
  if (fh__trace_on) {
    char a[96], d[128];
    snprintf(d, sizeof d, "for %s", stream_label(other, a, sizeof a));
    fh__trace_wait(s, d);
  }
  return FH_OK;
}

/* ---- events ------------------------------------------------------------- */
fh_status fh_event_new(bool timing, fh_event **out) {
  if (!fh_cuda_is_available())
    return fh_error_set(FH_ERR_CUDA, "CUDA is not available: %s", fh_cuda_unavailable_reason());
  fh_event *e = (fh_event *)fh_calloc(1, sizeof *e);
  if (e == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory creating an event");
  fh_rc_init(&e->rc);
  e->timing = timing;
  e->dev = fh_cpu();
  *out = e;
  return FH_OK;
}

void fh_event_retain(fh_event *e) {
  if (e != NULL) fh_rc_retain(&e->rc);
}

void fh_event_release(fh_event *e) {
  if (e == NULL || !fh_rc_release(&e->rc)) return;
  if (e->ev != NULL) {
    bool deferred = false;
    if (fh__cuda_captures_active()) {
      pthread_mutex_lock(&g_defer_mu);
      deferred = defer_push((void ***)&g_defer_events, &g_ndefer_events, &g_capdefer_events, (void *)e->ev);
      pthread_mutex_unlock(&g_defer_mu);
    }
    /* safe while pending: a pooled event is recorded again only by its next owner (waits
     * already enqueued keep the record they took), a destroyed one lets its resources go
     * when it completes */
    if (!deferred) {
      if (e->timing) (void)cudaEventDestroy(e->ev);
      else fh__cuda_event_put(e->dev.index, e->ev);
    }
    (void)cudaGetLastError();
  }
  fh_free(e);
}

fh_status fh_event_record(fh_event *e, fh_stream *s) {
  char a[FH_DEVICE_NAME_MAX], b[FH_DEVICE_NAME_MAX];
  if (e->ev != NULL && !fh_device_eq(e->dev, s->dev))
    return fh_error_set(FH_ERR_VALUE, "Event:record: the event belongs to %s but the stream to %s",
                        fh_device_name(e->dev, a), fh_device_name(s->dev, b));
  fh_status st = fh__cuda_use_device(s->dev.index);
  if (st != FH_OK) return st;
  if (e->ev == NULL) {
    /* events without timing come from the device's pool (fh__cuda_event_get) and go back
     * to it on release: a copy handle's event per copy_from costs no driver object */
    if (e->timing) {
      FH_CUDA_TRY(cudaEventCreateWithFlags(&e->ev, cudaEventDefault), "cudaEventCreate");
    } else if ((st = fh__cuda_event_get(s->dev.index, &e->ev)) != FH_OK) {
      return st;
    }
    e->dev = s->dev;
  }
  FH_CUDA_TRY(cudaEventRecord(e->ev, s->h), "cudaEventRecord");
  e->recorded = true;
  e->stream_id = s->id;
  return FH_OK;
}

bool fh_event_is_recorded(const fh_event *e) { return e->recorded; }
fh_device fh_event_device(const fh_event *e) { return e->recorded ? e->dev : fh_cpu(); }
uint64_t fh_event_stream_id(const fh_event *e) { return e->recorded ? e->stream_id : 0; }

fh_status fh_event_query(fh_event *e, bool *done) {
  if (!e->recorded) {
    *done = true;
    return FH_OK;
  }
  if (fh__cuda_is_broken(e->dev.index)) return fh__cuda_broken_error(e->dev.index, NULL);
  cudaError_t r = cudaEventQuery(e->ev);
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError();
    *done = false;
    return FH_OK;
  }
  FH_CUDA_TRY(r, "cudaEventQuery");
  *done = true;
  return FH_OK;
}

fh_status fh_event_synchronize(fh_event *e) {
  if (!e->recorded) return FH_OK;
  /* an event of a broken context may have completed before the error: waiting says nothing */
  if (fh__cuda_is_broken(e->dev.index)) return fh__cuda_broken_error(e->dev.index, NULL);
  int tr = fh__trace_on ? fh__trace_begin(FH_TRACE_SYNC, "event synchronize", fh_cpu(), NULL) : FH_TRACE_SKIP;
  cudaError_t r = cudaEventSynchronize(e->ev);
  if (tr != FH_TRACE_SKIP) {
    char d[96];
    snprintf(d, sizeof d, "an event of stream %llu (cuda:%d)", (unsigned long long)e->stream_id, (int)e->dev.index);
    fh__trace_end(tr, 0, 0, d);
  }
  FH_CUDA_TRY(r, "cudaEventSynchronize");
  return FH_OK;
}

fh_status fh_stream_wait_event(fh_stream *s, fh_event *e) {
  if (!e->recorded) return FH_OK; /* waiting for an unrecorded event waits for nothing */
  fh_status st = fh__cuda_use_device(s->dev.index);
  if (st != FH_OK) return st;
  FH_CUDA_TRY(cudaStreamWaitEvent(s->h, e->ev, 0), "cudaStreamWaitEvent");
  if (fh__trace_on) {
    char d[96];
    snprintf(d, sizeof d, "for an event of stream %llu", (unsigned long long)e->stream_id);
    fh__trace_wait(s, d);
  }
  return FH_OK;
}

fh_status fh_event_elapsed_ms(fh_event *start, fh_event *end, double *ms) {
  if (!start->timing || !end->timing)
    return fh_error_set(FH_ERR_VALUE, "Event:elapsed_ms: both events must be created with timing=true");
  if (!start->recorded || !end->recorded)
    return fh_error_set(FH_ERR_VALUE, "Event:elapsed_ms: both events must be recorded first (%s is not)",
                        start->recorded ? "the end event" : "the start event");
  if (!fh_device_eq(start->dev, end->dev)) {
    char a[FH_DEVICE_NAME_MAX], b[FH_DEVICE_NAME_MAX];
    return fh_error_set(FH_ERR_VALUE, "Event:elapsed_ms: the events were recorded on different devices (%s and %s)",
                        fh_device_name(start->dev, a), fh_device_name(end->dev, b));
  }
  /* wait for both, so the result is always defined */
  FH_CUDA_TRY(cudaEventSynchronize(end->ev), "cudaEventSynchronize");
  FH_CUDA_TRY(cudaEventSynchronize(start->ev), "cudaEventSynchronize");
  float f = 0;
  FH_CUDA_TRY(cudaEventElapsedTime(&f, start->ev, end->ev), "cudaEventElapsedTime");
  *ms = f;
  return FH_OK;
}

/* ---- capture state -------------------------------------------------------- */
bool fh__cuda_is_capturing(fh_device dev) {
  if (dev.type != FH_DEVICE_CUDA || dev.index < 0 || dev.index >= fh_cuda_device_count()) return false;
  if (fh__cuda_pool_active(dev.index)) return true;
  fh_stream *s = NULL;
  if (fh_stream_current(dev, &s) != FH_OK) {
    fh_error_clear();
    return false;
  }
  if (fh__cuda_use_device(dev.index) != FH_OK) {
    fh_error_clear();
    return false;
  }
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(s->h, &cs);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    /* the legacy stream queried while another stream captures */
    return e == cudaErrorStreamCaptureImplicit;
  }
  return cs != cudaStreamCaptureStatusNone;
}

/* ---- launch guard --------------------------------------------------------- */
fh_stream *fh__cuda_launch_stream(void) { return tl_launch; }

/* Called (through fh_storage_record_stream) for every storage a launch uses,
 * right before the kernel function runs: makes the stream's device current
 * for the runtime, remembers the launch's stream, and records the use. */
fh_status fh__cuda_block_record_stream(fh_storage *s, fh_stream *stream);

fh_status fh__cuda_storage_record_stream(fh_storage *s, fh_stream *stream) {
  if (stream == NULL) return FH_OK;
  fh_status st = fh__cuda_use_device(stream->dev.index);
  if (st != FH_OK) return st;
  tl_launch = stream;
  return fh__cuda_block_record_stream(s, stream);
}

/* ---- test capture ---------------------------------------------------------- */
fh_status fh__cuda_test_capture_begin(fh_stream *s, fh_mempool *p) {
  if (s->is_default) return fh_error_set(FH_ERR_VALUE, "the legacy default stream cannot capture");
  fh_status st = fh__cuda_use_device(s->dev.index);
  if (st != FH_OK) return st;
  if ((st = fh_mempool_begin(p)) != FH_OK) return st;
  cudaError_t e = cudaStreamBeginCapture(s->h, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    (void)fh_mempool_end(p);
    return fh__cuda_fail(e, "cudaStreamBeginCapture");
  }
  return FH_OK;
}

fh_status fh__cuda_test_capture_end(fh_stream *s, fh_mempool *p, int replays) {
  cudaGraph_t g = NULL;
  (void)fh__cuda_use_device(s->dev.index);
  cudaError_t e = cudaStreamEndCapture(s->h, &g);
  fh_status st = fh_mempool_end(p);
  if (e != cudaSuccess) {
    if (g) (void)cudaGraphDestroy(g);
    return fh__cuda_fail(e, "cudaStreamEndCapture");
  }
  if (st != FH_OK) {
    (void)cudaGraphDestroy(g);
    return st;
  }
  if (replays > 0) {
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    for (int i = 0; e == cudaSuccess && i < replays; ++i) e = cudaGraphLaunch(x, s->h);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->h);
    if (x) (void)cudaGraphExecDestroy(x);
  }
  (void)cudaGraphDestroy(g);
  if (e != cudaSuccess) return fh__cuda_fail(e, "graph replay");
  return FH_OK;
}

/* ---- test aid: a kernel that spins ---------------------------------------------------------- */
__device__ __forceinline__ uint64_t globaltimer(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__global__ void spin_kernel(uint64_t ns) {
  uint64_t t0 = globaltimer();
  while (globaltimer() - t0 < ns) __nanosleep(1000);
}

fh_status fh_cuda_spin(fh_stream *s, double ms) {
  if (!(ms >= 0 && ms <= 60000)) return fh_error_set(FH_ERR_VALUE, "spin: ms must be in [0, 60000], got %g", ms);
  fh_status st = fh__cuda_use_device(s->dev.index);
  if (st != FH_OK) return st;
  spin_kernel<<<1, 1, 0, s->h>>>((uint64_t)(ms * 1e6));
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fh__cuda_fail(e, "kernel 'spin'");
  return FH_OK;
}

fh_status fh_cuda_profiler(bool on) {
  fh_device d = {FH_DEVICE_CUDA, fh_cuda_current_device()};
  fh_status st = fh_device_check(d);
  if (st == FH_OK) st = fh__cuda_use_device(d.index);
  if (st != FH_OK) return st;
  FH_CUDA_TRY(on ? cudaProfilerStart() : cudaProfilerStop(), on ? "cudaProfilerStart" : "cudaProfilerStop");
  return FH_OK;
}
