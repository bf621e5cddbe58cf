/* Storage: reference-counted byte blocks; CPU heap back end here, CUDA and
 * pinned back ends in the runtime layer (engine/runtime/alloc.cu). */
#include "fh/storage.h"

#include <stdlib.h>
#include <string.h>

static atomic_size_t cpu_bytes;

size_t fh_cpu_allocated_bytes(void) { return atomic_load(&cpu_bytes); }

static void cpu_free(fh_storage *s) {
  atomic_fetch_sub(&cpu_bytes, s->nbytes);
  fh_free(s->data);
}

static fh_status cpu_alloc(fh_storage *s) {
  size_t n = s->nbytes == 0 ? 64 : (s->nbytes + 63) / 64 * 64;
  if (n < s->nbytes) return fh_error_set(FH_ERR_MEMORY, "out of memory: %zu bytes requested on cpu", s->nbytes);
  s->data = fh_aligned_alloc(64, n);
  if (s->data == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory: %zu bytes requested on cpu", s->nbytes);
  if (s->flags & FH_STORAGE_ZERO) memset(s->data, 0, n);
  s->free_fn = cpu_free;
  atomic_fetch_add(&cpu_bytes, s->nbytes);
  return FH_OK;
}

fh_status fh_storage_new(fh_device dev, size_t nbytes, uint32_t flags, fh_storage **out) {
  fh_status st = fh_device_check(dev);
  if (st != FH_OK) return st;
  if ((flags & FH_STORAGE_PINNED) && dev.type != FH_DEVICE_CPU)
    return fh_error_set(FH_ERR_VALUE, "pin_memory applies only to cpu tensors");
  fh_storage *s = fh_calloc(1, sizeof *s);
  if (s == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory allocating a storage record");
  fh_rc_init(&s->rc);
  s->nbytes = nbytes;
  s->device = dev;
  s->flags = flags;
  if (dev.type == FH_DEVICE_CUDA) {
    fh_stream *cur = NULL;
    st = fh_stream_current(dev, &cur);
    if (st == FH_OK) st = fh__cuda_storage_alloc(s, cur);
  } else if (flags & FH_STORAGE_PINNED) {
    st = fh__pinned_storage_alloc(s);
    if (st == FH_OK && (flags & FH_STORAGE_ZERO)) memset(s->data, 0, nbytes);
  } else {
    st = cpu_alloc(s);
  }
  if (st != FH_OK) {
    fh_free(s);
    return st;
  }
  *out = s;
  return FH_OK;
}

void fh_storage_release(fh_storage *s) {
  if (s == NULL || !fh_rc_release(&s->rc)) return;
  if (s->free_fn) s->free_fn(s);
  fh_free(s);
}

static _Thread_local fh_storage_use_fn use_fn;
static _Thread_local void *use_ctx;

void fh__storage_observe_uses(fh_storage_use_fn fn, void *ctx) {
  use_fn = fn;
  use_ctx = fn ? ctx : NULL;
}

fh_status fh_storage_record_stream(fh_storage *s, fh_stream *stream) {
  if (stream == NULL) return FH_OK;
  if (use_fn != NULL) use_fn(use_ctx, s, stream);
  if (s->device.type == FH_DEVICE_CUDA || (s->flags & FH_STORAGE_PINNED))
    return fh__cuda_storage_record_stream(s, stream);
  return FH_OK;
}
