/* The CUDA layer of a build without CUDA: every query reports no device and
 * every CUDA use fails with CudaError. Compiled only when nvcc is absent. */
#include <stdlib.h>

#include "fh/cuda_alloc.h"
#include "fh/launch.h"
#include "fh/runtime.h"
#include "fh/storage.h"
#include "fh/trace.h"

#define NO_CUDA "no CUDA device is present (fhelium was built without CUDA)"

int fh_cuda_device_count(void) { return 0; }
bool fh_cuda_is_available(void) { return false; }
const char *fh_cuda_unavailable_reason(void) { return NO_CUDA; }
int fh_cuda_current_device(void) { return 0; }
static fh_status no_cuda(void) { return fh_error_set(FH_ERR_CUDA, "%s", NO_CUDA); }
fh_status fh_cuda_set_device(int index) { (void)index; return no_cuda(); }
fh_status fh_cuda_get_device_properties(int index, fh_device_properties *out) {
  (void)index; (void)out;
  return no_cuda();
}
fh_status fh_cuda_synchronize(int index) { (void)index; return no_cuda(); }
fh_status fh_cuda_stream_priority_range(int index, int *least, int *greatest) {
  (void)index; (void)least; (void)greatest;
  return no_cuda();
}
bool fh__cuda_any_capture(void) { return false; }

fh_status fh_stream_new(fh_device dev, int priority, fh_stream **out) {
  (void)dev; (void)priority; (void)out;
  return no_cuda();
}
void fh_stream_retain(fh_stream *s) { (void)s; }
void fh_stream_release(fh_stream *s) { (void)s; }
fh_status fh_stream_default(fh_device dev, fh_stream **out) { (void)dev; (void)out; return no_cuda(); }
fh_status fh_stream_current(fh_device dev, fh_stream **out) { (void)dev; (void)out; return no_cuda(); }
void fh_stream_set_current(fh_stream *s) { (void)s; }
fh_device fh_stream_device(const fh_stream *s) { (void)s; return fh_cpu(); }
int fh_stream_priority(const fh_stream *s) { (void)s; return 0; }
bool fh_stream_is_default(const fh_stream *s) { (void)s; return true; }
void *fh_stream_handle(const fh_stream *s) { (void)s; return NULL; }
uint64_t fh_stream_id(const fh_stream *s) { (void)s; return 0; }
void fh_stream_set_name(fh_stream *s, const char *name) { (void)s; (void)name; }
const char *fh_stream_name(const fh_stream *s) { (void)s; return ""; }
fh_status fh_stream_synchronize(fh_stream *s) { (void)s; return no_cuda(); }
fh_status fh_stream_query(fh_stream *s, bool *done) { (void)s; (void)done; return no_cuda(); }
fh_status fh_stream_wait_stream(fh_stream *s, fh_stream *o) { (void)s; (void)o; return no_cuda(); }

fh_status fh_event_new(bool timing, fh_event **out) { (void)timing; (void)out; return no_cuda(); }
void fh_event_retain(fh_event *e) { (void)e; }
void fh_event_release(fh_event *e) { (void)e; }
fh_status fh_event_record(fh_event *e, fh_stream *s) { (void)e; (void)s; return no_cuda(); }
bool fh_event_is_recorded(const fh_event *e) { (void)e; return false; }
fh_device fh_event_device(const fh_event *e) { (void)e; return fh_cpu(); }
uint64_t fh_event_stream_id(const fh_event *e) { (void)e; return 0; }
fh_status fh_event_query(fh_event *e, bool *done) { (void)e; (void)done; return no_cuda(); }
fh_status fh_event_synchronize(fh_event *e) { (void)e; return no_cuda(); }
fh_status fh_stream_wait_event(fh_stream *s, fh_event *e) { (void)s; (void)e; return no_cuda(); }
fh_status fh_event_elapsed_ms(fh_event *a, fh_event *b, double *ms) { (void)a; (void)b; (void)ms; return no_cuda(); }

fh_status fh__cuda_storage_alloc(fh_storage *s, fh_stream *stream) { (void)s; (void)stream; return no_cuda(); }
fh_status fh__pinned_storage_alloc(fh_storage *s) { (void)s; return no_cuda(); }
fh_status fh__cuda_storage_record_stream(fh_storage *s, fh_stream *stream) { (void)s; (void)stream; return FH_OK; }
bool fh__cuda_is_capturing(fh_device dev) { (void)dev; return false; }


/* fh/cuda_alloc.h */
fh_status fh_cuda_memory_stats(int index, fh_memory_stats *out) { (void)index; (void)out; return no_cuda(); }
fh_status fh_cuda_reset_peak_memory_stats(int index) { (void)index; return no_cuda(); }
fh_status fh_pinned_memory_stats(fh_memory_stats *out) { (void)out; return no_cuda(); }
fh_status fh_cuda_empty_cache(void) { return no_cuda(); }
fh_status fh_mempool_new(fh_device dev, fh_mempool **out) { (void)dev; (void)out; return no_cuda(); }
fh_status fh_mempool_begin(fh_mempool *p) { (void)p; return no_cuda(); }
fh_status fh_mempool_end(fh_mempool *p) { (void)p; return no_cuda(); }
void fh_mempool_free(fh_mempool *p) { (void)p; }
void fh_mempool_usage(const fh_mempool *p, uint64_t *reserved, uint64_t *blocks) {
  (void)p;
  *reserved = *blocks = 0;
}
fh_status fh_cuda_spin(fh_stream *s, double ms) { (void)s; (void)ms; return no_cuda(); }
fh_status fh_cuda_profiler(bool on) { (void)on; return no_cuda(); }
fh_status fh__cuda_test_capture_begin(fh_stream *s, fh_mempool *p) { (void)s; (void)p; return no_cuda(); }
fh_status fh__cuda_test_capture_end(fh_stream *s, fh_mempool *p, int replays) {
  (void)s; (void)p; (void)replays;
  return no_cuda();
}
