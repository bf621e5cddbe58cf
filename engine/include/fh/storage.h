/* fhelium storage: a reference-counted block of bytes on one device.
 *
 * Allocation. CPU pageable storage comes from the C heap (64-byte aligned);
 * CPU pinned storage from the pinned caching allocator; CUDA storage from the
 * device's caching allocator, on the current stream of its device at
 * allocation time (its "home" stream).
 *
 * Release. When the last reference is dropped, the block goes back to its
 * allocator, never straight to cudaFree: a CUDA block that was used on
 * streams other than its home stream (fh_storage_record_stream, done
 * automatically by the launch boundary) is reused only after events recorded
 * on those streams at release time have completed. Pinned blocks are guarded
 * the same way. Lua's GC therefore only drops references; memory the GPU may
 * still read is never handed out early.
 *
 * Ownership: fh_storage_new and fh_storage_wrap return a new reference. */
#ifndef FH_STORAGE_H
#define FH_STORAGE_H

#include "fh/core.h"
#include "fh/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  FH_STORAGE_PINNED = 1u << 0, /* CPU storage in page-locked memory */
  FH_STORAGE_ZERO = 1u << 1,   /* request zero-filled memory (CPU only) */
};

typedef struct fh_storage fh_storage;
struct fh_storage {
  fh_refcount rc;
  void *data;
  size_t nbytes;
  fh_device device;
  uint32_t flags;
  /* Returns the block to its allocator; called once, on the last release. */
  void (*free_fn)(fh_storage *s);
  void *block; /* allocator's record for the block (NULL for CPU heap) */
};

/* New storage of `nbytes` (0 allowed) on `dev`. CUDA storage is allocated
 * for the current stream of `dev`. */
fh_status fh_storage_new(fh_device dev, size_t nbytes, uint32_t flags, fh_storage **out);
static inline void fh_storage_retain(fh_storage *s) { fh_rc_retain(&s->rc); }
void fh_storage_release(fh_storage *s);
/* Note that `stream` uses `s`, so the block is not reused before the work
 * submitted to `stream` so far completes. No-op for pageable CPU storage and
 * for the block's home stream. */
fh_status fh_storage_record_stream(fh_storage *s, fh_stream *stream);

/* Use observer (capture bookkeeping, engine/exec/program.c): while one is set
 * on the calling thread, every fh_storage_record_stream call with a stream
 * first passes the storage and the stream to `fn` (the observer retains what
 * it keeps). NULL clears it. */
typedef void (*fh_storage_use_fn)(void *ctx, fh_storage *s, fh_stream *stream);
void fh__storage_observe_uses(fh_storage_use_fn fn, void *ctx);

/* Bytes of pageable CPU memory currently held by storages (statistics). */
size_t fh_cpu_allocated_bytes(void);

/* ---- allocator back ends (implemented by the CUDA layer) ------------- */
/* Allocate `nbytes` on CUDA device `dev` for use on `stream` (borrowed);
 * fills s->data, s->block, s->free_fn. */
fh_status fh__cuda_storage_alloc(fh_storage *s, fh_stream *stream);
fh_status fh__pinned_storage_alloc(fh_storage *s);
fh_status fh__cuda_storage_record_stream(fh_storage *s, fh_stream *stream);

#ifdef __cplusplus
}
#endif
#endif
