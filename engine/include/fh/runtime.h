/* fhelium runtime: CUDA devices, streams, events, and the pinned/device
 * allocators' entry points. Every function exists in every build; in a build
 * without CUDA, or on a machine without a usable GPU, the CUDA functions fail
 * with CudaError ("no CUDA device is present ...") and the queries report
 * zero devices.
 *
 * Ownership. fh_stream and fh_event are reference counted. Functions named
 * *_new or documented "new reference" return one reference the caller must
 * release; *_current / *_default return borrowed pointers that stay valid for
 * the life of the process (default streams) or until the caller's own
 * reference is dropped (the current stream keeps a reference while current).
 */
#ifndef FH_RUNTIME_H
#define FH_RUNTIME_H

#include "fh/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices ---------------------------------------------------------- */
/* Parse "cpu", "cuda" (the current CUDA device) or "cuda:N". Syntax errors
 * are ValueError. "cuda" and "cuda:N" parse even without a GPU; using such a
 * device later raises CudaError (see fh_device_check). */
fh_status fh_device_parse(const char *s, fh_device *out);
/* OK when the device can be used now: CPU always; CUDA when compiled with
 * CUDA, a device is present, the ordinal is in range and its context is not
 * broken (else CudaError; a broken context's error says to restart). */
fh_status fh_device_check(fh_device d);

/* ---- broken CUDA contexts (not API) --------------------------------------
 * A sticky CUDA error (an illegal address, a launch failure, a device-side
 * assert...: fh__cuda_fail classifies them) leaves the device's context
 * unusable until the process ends. The device is then marked broken, and
 * every later use of it (fh_device_check, the runtime's device switch that
 * each CUDA call makes first) fails at once with CudaError "the CUDA context
 * of cuda:N is unusable after an earlier error (<error>, detected by <what>);
 * restart the process". The marks live in plain C (every build has them:
 * fh.cuda._mark_broken is the test aid that sets one without a GPU); nothing
 * ever clears one. Ordinals at or above FH_BROKEN_MAX_DEVICES are never
 * marked. The strings are copied. */
#define FH_BROKEN_MAX_DEVICES 64
/* Mark cuda:`index` broken by `error_name` (e.g. "cudaErrorIllegalAddress"),
 * first detected by `what` (e.g. "kernel 'ckks_ntt'"). Returns true when
 * this call marked it, false when it was broken already (the first error is
 * kept) or the ordinal is out of range. Thread-safe. */
bool fh__cuda_mark_broken(int index, const char *error_name, const char *what);
/* True when cuda:`index` is marked broken. Thread-safe, lock-free. */
bool fh__cuda_is_broken(int index);
/* True when `d` is a CUDA device marked broken (a CPU device never is). The
 * close paths use it: on a broken device nothing queued will run again, so
 * nothing is left to wait for. */
bool fh__device_is_broken(fh_device d);
/* Record the CudaError of a broken cuda:`index` ("<what>: " first unless
 * what is NULL) and return FH_ERR_CUDA. */
fh_status fh__cuda_broken_error(int index, const char *what);
int fh_cuda_device_count(void); /* 0 without CUDA or without a device */
bool fh_cuda_is_available(void);
/* The reason CUDA is unusable ("built without CUDA", "no CUDA device is
 * present (cudaErrorNoDevice)", ...); "" when available. Borrowed. */
const char *fh_cuda_unavailable_reason(void);
int fh_cuda_current_device(void); /* 0 when none */
fh_status fh_cuda_set_device(int index);
typedef struct fh_device_properties {
  char name[256];
  size_t total_memory;
  int major, minor;
  int multi_processor_count;
} fh_device_properties;
fh_status fh_cuda_get_device_properties(int index, fh_device_properties *out);
fh_status fh_cuda_synchronize(int index); /* index < 0: current device */
/* The device's stream priority range (cudaDeviceGetStreamPriorityRange):
 * `least` is the number of the lowest priority (0), `greatest` that of the
 * highest (a negative number: lower number = higher priority). */
fh_status fh_cuda_stream_priority_range(int index, int *least, int *greatest);

/* ---- streams ---------------------------------------------------------- */
typedef struct fh_stream fh_stream;
/* New stream on a CUDA device with the given priority (lower number =
 * higher priority, clamped to the device's range). New reference. */
fh_status fh_stream_new(fh_device dev, int priority, fh_stream **out);
void fh_stream_retain(fh_stream *s);
void fh_stream_release(fh_stream *s);
/* The per-device default (legacy NULL) stream wrapper. Borrowed. */
fh_status fh_stream_default(fh_device dev, fh_stream **out);
/* The calling thread's current stream for the device (the default stream
 * until fh_stream_set_current). Borrowed. */
fh_status fh_stream_current(fh_device dev, fh_stream **out);
/* Make `s` current for its device on the calling thread (retains it). */
void fh_stream_set_current(fh_stream *s);
fh_device fh_stream_device(const fh_stream *s);
int fh_stream_priority(const fh_stream *s);
bool fh_stream_is_default(const fh_stream *s);
void *fh_stream_handle(const fh_stream *s); /* cudaStream_t */
uint64_t fh_stream_id(const fh_stream *s);  /* unique per process, for printing */
/* A label for printing and traces ("" until set; at most FH_STREAM_NAME_MAX
 * - 1 bytes are kept). The default streams keep "". Borrowed. */
#define FH_STREAM_NAME_MAX 32
void fh_stream_set_name(fh_stream *s, const char *name);
const char *fh_stream_name(const fh_stream *s);
fh_status fh_stream_synchronize(fh_stream *s);
/* *done = no pending work. */
fh_status fh_stream_query(fh_stream *s, bool *done);
/* `s` waits (on the device) for all work submitted to `other` so far. */
fh_status fh_stream_wait_stream(fh_stream *s, fh_stream *other);

/* ---- events ----------------------------------------------------------- */
typedef struct fh_event fh_event;
/* New (unrecorded) event; `timing` enables elapsed_ms. The CUDA event is
 * created on first record, on the recording stream's device. */
fh_status fh_event_new(bool timing, fh_event **out);
void fh_event_retain(fh_event *e);
void fh_event_release(fh_event *e);
fh_status fh_event_record(fh_event *e, fh_stream *s);
bool fh_event_is_recorded(const fh_event *e);
fh_device fh_event_device(const fh_event *e); /* CPU until recorded */
/* fh_stream_id of the stream of the latest record (0 until recorded). */
uint64_t fh_event_stream_id(const fh_event *e);
fh_status fh_event_query(fh_event *e, bool *done); /* unrecorded: done */
fh_status fh_event_synchronize(fh_event *e);
fh_status fh_stream_wait_event(fh_stream *s, fh_event *e);
fh_status fh_event_elapsed_ms(fh_event *start, fh_event *end, double *ms);

#ifdef __cplusplus
}
#endif
#endif
