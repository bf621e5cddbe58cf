/* The CUDA caching allocator, the pinned-host caching allocator and
 * capture-private pools. The rules are stated in fh/cuda_alloc.h; this file
 * follows them line by line.
 *
 * Structures. An arena is one allocator: one per CUDA device and one for
 * pinned host memory. It holds free lists (one doubly linked list per size
 * class; a block's `home_id` says which stream it is free for, 0 = idle),
 * the pending list (event, block) of freed blocks waiting for streams, the
 * deferred list of frees that arrived during a capture, and statistics.
 * A pool holds its own free lists of idle blocks; its blocks are counted in
 * the device arena's statistics.
 *
 * Locks: the arena mutex guards everything of the arena and of the pools of
 * its device; the event cache has its own leaf mutex. Streams are released
 * (which may destroy them and re-enter the allocator) only after the arena
 * mutex is dropped. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define NCLS 224
#define MAX_REQUEST ((size_t)1 << 60)

typedef struct fh__block fh__block;
struct fh__block {
  void *ptr;
  size_t size; /* class size */
  size_t req;  /* bytes requested by the current owner */
  int cls;
  int dev;          /* CUDA ordinal; -1 for pinned */
  fh_stream *home;  /* retained while allocated (NULL for pinned) */
  uint64_t home_id; /* free-list key: the stream the block is free for; 0 = idle */
  fh_stream **uses; /* other streams that used it (one reference each) */
  int nuses, capuses;
  int pending; /* events not yet completed */
  fh_mempool *pool;
  fh__block *next, *prev;
  bool allocated;
};

typedef struct pend {
  cudaEvent_t ev;
  int evdev;
  fh__block *b;
} pend;

typedef struct arena {
  pthread_mutex_t mu;
  bool pinned;
  int dev;
  fh__block *bins[NCLS];
  pend *pending;
  size_t npend, cappend;
  fh__block *deferred; /* linked through `next` */
  fh_mempool *active;
  fh_memory_stats st;
} arena;

struct fh_mempool {
  int dev;
  fh__block *bins[NCLS];
  uint64_t reserved, blocks; /* owned blocks: allocated, pending or idle */
  bool closed;
};

static arena g_dev[FH_CUDA_MAX_DEVICES];
static arena g_pinned;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static atomic_int g_captures;

static pthread_mutex_t g_evmu = PTHREAD_MUTEX_INITIALIZER;
static cudaEvent_t *g_evs[FH_CUDA_MAX_DEVICES];
static size_t g_nev[FH_CUDA_MAX_DEVICES], g_capev[FH_CUDA_MAX_DEVICES];

static void init_arenas(void) {
  for (int i = 0; i < FH_CUDA_MAX_DEVICES; ++i) {
    pthread_mutex_init(&g_dev[i].mu, NULL);
    g_dev[i].dev = i;
  }
  pthread_mutex_init(&g_pinned.mu, NULL);
  g_pinned.pinned = true;
  g_pinned.dev = -1;
}
static inline void ensure_arenas(void) { pthread_once(&g_once, init_arenas); }

bool fh__cuda_captures_active(void) { return atomic_load(&g_captures) > 0; }
bool fh__cuda_pool_active(int index) {
  if (index < 0 || index >= FH_CUDA_MAX_DEVICES) return false;
  ensure_arenas();
  pthread_mutex_lock(&g_dev[index].mu);
  bool r = g_dev[index].active != NULL;
  pthread_mutex_unlock(&g_dev[index].mu);
  return r;
}

/* ---- size classes ------------------------------------------------------- */
static int size_class(size_t n, size_t *size) {
  if (n <= 512) {
    *size = 512;
    return 0;
  }
  int k = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* n in (2^k, 2^(k+1)] */
  size_t step = (size_t)1 << (k - 2);
  size_t r = (n + step - 1) / step * step; /* 5..8 steps */
  *size = r;
  return 1 + (k - 9) * 4 + (int)(r / step) - 5;
}

static const char *human(double b, char *buf, size_t n) {
  const char *u[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, ++i;
  snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", b, u[i]);
  return buf;
}

/* ---- events --------------------------------------------------------------- */
fh_status fh__cuda_event_get(int dev, cudaEvent_t *out) {
  pthread_mutex_lock(&g_evmu);
  if (g_nev[dev] > 0) {
    *out = g_evs[dev][--g_nev[dev]];
    pthread_mutex_unlock(&g_evmu);
    return FH_OK;
  }
  pthread_mutex_unlock(&g_evmu);
  fh_status st = fh__cuda_use_device(dev);
  if (st != FH_OK) return st;
  FH_CUDA_TRY(cudaEventCreateWithFlags(out, cudaEventDisableTiming), "cudaEventCreate");
  return FH_OK;
}

void fh__cuda_event_put(int dev, cudaEvent_t ev) {
  pthread_mutex_lock(&g_evmu);
  if (g_nev[dev] == g_capev[dev]) {
    size_t cap = g_capev[dev] ? 2 * g_capev[dev] : 64;
    cudaEvent_t *n = (cudaEvent_t *)fh_realloc(g_evs[dev], cap * sizeof *n);
    if (n == NULL) {
      pthread_mutex_unlock(&g_evmu);
      (void)cudaEventDestroy(ev);
      return;
    }
    g_evs[dev] = n;
    g_capev[dev] = cap;
  }
  g_evs[dev][g_nev[dev]++] = ev;
  pthread_mutex_unlock(&g_evmu);
}

/* ---- free lists ------------------------------------------------------------ */
static void bin_push(fh__block **bins, fh__block *b) {
  b->prev = NULL;
  b->next = bins[b->cls];
  if (b->next) b->next->prev = b;
  bins[b->cls] = b;
}

static void bin_remove(fh__block **bins, fh__block *b) {
  if (b->prev) b->prev->next = b->next;
  else bins[b->cls] = b->next;
  if (b->next) b->next->prev = b->prev;
  b->next = b->prev = NULL;
}

/* A block of class `cls` free for `stream_id`, else an idle one. */
static fh__block *bin_take(fh__block **bins, int cls, uint64_t stream_id) {
  fh__block *idle = NULL;
  for (fh__block *b = bins[cls]; b; b = b->next) {
    if (b->home_id == stream_id) {
      bin_remove(bins, b);
      return b;
    }
    if (b->home_id == 0 && idle == NULL) idle = b;
  }
  if (idle) bin_remove(bins, idle);
  return idle;
}

static arena *arena_of(const fh__block *b) { return b->dev < 0 ? &g_pinned : &g_dev[b->dev]; }

/* a block finished all its events (or needed none): make it reusable */
static void make_free_locked(arena *a, fh__block *b) {
  fh_mempool *p = b->pool;
  if (p != NULL && p->closed) { /* the pool is gone: the block joins the device cache */
    b->pool = NULL;
    p->reserved -= b->size;
    a->st.pool_reserved -= b->size;
    if (--p->blocks == 0) fh_free(p);
    p = NULL;
    b->home_id = 0;
  }
  bin_push(p ? p->bins : a->bins, b);
  a->st.cached_blocks++;
}

static fh_status pend_push(arena *a, cudaEvent_t ev, int evdev, fh__block *b) {
  if (a->npend == a->cappend) {
    size_t cap = a->cappend ? 2 * a->cappend : 64;
    pend *n = (pend *)fh_realloc(a->pending, cap * sizeof *n);
    if (n == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory in the caching allocator");
    a->pending = n;
    a->cappend = cap;
  }
  a->pending[a->npend].ev = ev;
  a->pending[a->npend].evdev = evdev;
  a->pending[a->npend].b = b;
  a->npend++;
  return FH_OK;
}

/* Record an event on `s` guarding `b`; on any failure, wait for the stream
 * instead (slow but safe). */
static void guard_with_event(arena *a, fh__block *b, fh_stream *s) {
  fh_error_saved keep; /* a release may run while the caller's error is pending */
  fh_error_save(&keep);
  cudaEvent_t ev = NULL;
  int d = s->dev.index;
  if (fh__cuda_use_device(d) == FH_OK && fh__cuda_event_get(d, &ev) == FH_OK) {
    if (cudaEventRecord(ev, s->h) == cudaSuccess && pend_push(a, ev, d, b) == FH_OK) {
      b->pending++;
      a->st.stream_events++;
      return;
    }
    (void)cudaEventDestroy(ev);
  }
  (void)cudaGetLastError();
  fh_error_restore(&keep);
  (void)cudaStreamSynchronize(s->h);
  (void)cudaGetLastError();
}

static void process_events_locked(arena *a) {
  size_t w = 0;
  for (size_t r = 0; r < a->npend; ++r) {
    pend e = a->pending[r];
    cudaError_t q = cudaEventQuery(e.ev);
    if (q == cudaSuccess) {
      fh__cuda_event_put(e.evdev, e.ev);
      if (--e.b->pending == 0) {
        a->st.pending_blocks--;
        make_free_locked(a, e.b);
      }
    } else {
      (void)cudaGetLastError();
      a->pending[w++] = e;
    }
  }
  a->npend = w;
}

/* wait for every pending event (out-of-memory path; not during capture) */
static void drain_events_locked(arena *a) {
  for (size_t i = 0; i < a->npend; ++i) (void)cudaEventSynchronize(a->pending[i].ev);
  (void)cudaGetLastError();
  process_events_locked(a);
}

/* give the arena's cached blocks back to CUDA */
static void release_cached_locked(arena *a) {
  fh_error_saved keep;
  fh_error_save(&keep);
  if (!a->pinned) (void)fh__cuda_use_device(a->dev);
  for (int c = 0; c < NCLS; ++c) {
    while (a->bins[c]) {
      fh__block *b = a->bins[c];
      bin_remove(a->bins, b);
      if (a->pinned) (void)cudaFreeHost(b->ptr);
      else (void)cudaFree(b->ptr);
      a->st.cached_blocks--;
      a->st.reserved -= b->size;
      a->st.cuda_frees++;
      fh_free(b->uses);
      fh_free(b);
    }
  }
  (void)cudaGetLastError();
  fh_error_restore(&keep);
}

/* Is any stream of the block capturing now (a capture begun outside the
 * pools)? Then a free must not touch it. */
static bool streams_capturing(const fh__block *b) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  for (int i = -1; i < b->nuses; ++i) {
    const fh_stream *s = i < 0 ? b->home : b->uses[i];
    if (s == NULL || s->h == NULL) continue;
    if (cudaStreamIsCapturing(s->h, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone) return true;
    (void)cudaGetLastError();
  }
  return false;
}

typedef struct rel_list {
  fh_stream *s[8];
  fh_stream **more;
  int n, nmore;
} rel_list;

/* Freed block -> pending or free lists (rules 3, 5, 7). Moves the stream
 * references the block held into `rel`, to be released after unlocking. */
static void retire_block_locked(arena *a, fh__block *b, fh_stream **rel, int *nrel) {
  fh_mempool *p = b->pool;
  if (p != NULL && p->closed) {
    b->pool = NULL;
    p->reserved -= b->size;
    a->st.pool_reserved -= b->size;
    if (--p->blocks == 0) fh_free(p);
    p = NULL;
  }
  if (p != NULL && b->home != NULL) guard_with_event(a, b, b->home);
  for (int i = 0; i < b->nuses; ++i) guard_with_event(a, b, b->uses[i]);
  b->home_id = p != NULL || b->home == NULL ? 0 : b->home->id;
  int n = 0;
  if (b->home) rel[n++] = b->home;
  for (int i = 0; i < b->nuses; ++i) rel[n++] = b->uses[i];
  *nrel = n;
  b->home = NULL;
  b->nuses = 0;
  if (b->pending > 0) a->st.pending_blocks++;
  else make_free_locked(a, b);
}

static void release_streams(fh_stream **rel, int n) {
  for (int i = 0; i < n; ++i) fh_stream_release(rel[i]);
}

/* Process deferred frees whose streams are no longer capturing. Called with
 * the lock held; streams to release are collected in *relbuf (grown). */
static void process_deferred_locked(arena *a, fh_stream ***relbuf, int *nrel, int *caprel) {
  fh__block **pp = &a->deferred;
  while (*pp) {
    fh__block *b = *pp;
    if (streams_capturing(b)) {
      pp = &b->next;
      continue;
    }
    *pp = b->next;
    b->next = NULL;
    a->st.deferred_frees--;
    int need = *nrel + b->nuses + 1;
    if (need > *caprel) {
      int cap = *caprel ? *caprel : 16;
      while (cap < need) cap *= 2;
      fh_stream **n = (fh_stream **)fh_realloc(*relbuf, (size_t)cap * sizeof *n);
      if (n == NULL) { /* keep it deferred; try again later */
        b->next = *pp;
        *pp = b;
        a->st.deferred_frees++;
        return;
      }
      *relbuf = n;
      *caprel = cap;
    }
    int k = 0;
    retire_block_locked(a, b, *relbuf + *nrel, &k);
    *nrel += k;
  }
}

static void run_deferred(arena *a) {
  fh_stream **rel = NULL;
  int nrel = 0, cap = 0;
  pthread_mutex_lock(&a->mu);
  if (a->deferred) process_deferred_locked(a, &rel, &nrel, &cap);
  pthread_mutex_unlock(&a->mu);
  release_streams(rel, nrel);
  fh_free(rel);
}

/* The common free path of both allocators. */
static void block_free(fh__block *b) {
  arena *a = arena_of(b);
  fh_stream *small[16];
  fh_stream **rel = small;
  int nrel = 0;
  pthread_mutex_lock(&a->mu);
  a->st.allocated -= b->size;
  a->st.requested -= b->req;
  a->st.active_blocks--;
  a->st.frees++;
  b->allocated = false;
  if (fh__cuda_captures_active() || streams_capturing(b)) {
    b->next = a->deferred;
    a->deferred = b;
    a->st.deferred_frees++;
    pthread_mutex_unlock(&a->mu);
    return;
  }
  if (b->nuses + 1 > 16) {
    rel = (fh_stream **)fh_malloc((size_t)(b->nuses + 1) * sizeof *rel);
    if (rel == NULL) { /* cannot even list them: keep it for later */
      b->next = a->deferred;
      a->deferred = b;
      a->st.deferred_frees++;
      pthread_mutex_unlock(&a->mu);
      return;
    }
  }
  retire_block_locked(a, b, rel, &nrel);
  pthread_mutex_unlock(&a->mu);
  release_streams(rel, nrel);
  if (rel != small) fh_free(rel);
}

static void cuda_storage_free(fh_storage *s) {
  if (s->block) block_free((fh__block *)s->block);
}

/* ---- record-stream ----------------------------------------------------------- */
fh_status fh__cuda_block_record_stream(fh_storage *s, fh_stream *stream) {
  fh__block *b = (fh__block *)s->block;
  if (b == NULL || b->home == stream) return FH_OK;
  arena *a = arena_of(b);
  fh_status st = FH_OK;
  pthread_mutex_lock(&a->mu);
  bool seen = false;
  for (int i = 0; i < b->nuses && !seen; ++i) seen = b->uses[i] == stream;
  if (!seen) {
    if (b->nuses == b->capuses) {
      int cap = b->capuses ? 2 * b->capuses : 4;
      fh_stream **n = (fh_stream **)fh_realloc(b->uses, (size_t)cap * sizeof *n);
      if (n == NULL) st = fh_error_set(FH_ERR_MEMORY, "out of memory recording a stream use");
      else b->uses = n, b->capuses = cap;
    }
    if (st == FH_OK) {
      fh_stream_retain(stream);
      b->uses[b->nuses++] = stream;
    }
  }
  pthread_mutex_unlock(&a->mu);
  return st;
}

/* ---- device allocation ---------------------------------------------------- */
static void stats_on_alloc(arena *a, fh__block *b) {
  a->st.allocated += b->size;
  a->st.requested += b->req;
  a->st.active_blocks++;
  a->st.allocations++;
  if (a->st.allocated > a->st.peak_allocated) a->st.peak_allocated = a->st.allocated;
}

static fh_status oom_error(arena *a, size_t n, size_t size) {
  char h1[32], h2[32], h3[32], h4[32], h5[32], h6[32];
  a->st.ooms++;
  if (a->pinned)
    return fh_error_set(FH_ERR_MEMORY,
                        "out of pinned host memory: tried to allocate %s (class %s); %s allocated, %s reserved by "
                        "fhelium (cudaErrorMemoryAllocation)",
                        human((double)n, h1, 32), human((double)size, h2, 32), human((double)a->st.allocated, h3, 32),
                        human((double)a->st.reserved, h4, 32));
  size_t fr = 0, tot = 0;
  (void)cudaMemGetInfo(&fr, &tot);
  (void)cudaGetLastError();
  return fh_error_set(FH_ERR_MEMORY,
                      "CUDA out of memory on cuda:%d: tried to allocate %s (class %s); %s allocated and %s reserved by "
                      "fhelium, %s free of the device's %s (cudaErrorMemoryAllocation)%s",
                      a->dev, human((double)n, h1, 32), human((double)size, h2, 32),
                      human((double)a->st.allocated, h3, 32), human((double)a->st.reserved, h4, 32),
                      human((double)fr, h5, 32), human((double)tot, h6, 32),
                      fh__cuda_captures_active() && a->st.reserved > a->st.allocated
                          ? "; cached memory cannot be given back to CUDA during a capture: close the programs "
                            "you no longer need, or call fh.cuda.empty_cache(), before capturing"
                          : "");
}

/* cudaMalloc / cudaHostAlloc with one retry after emptying the arena's
 * cache (never during a capture). */
static fh_status raw_alloc_locked(arena *a, size_t n, size_t size, void **ptr) {
  /* fault builds (fh/fault.h): an injected fault is the out-of-memory error after the retry */
  if (fh__fault_hit(FH_FAULT_ALLOC)) return oom_error(a, n, size);
  for (int attempt = 0;; ++attempt) {
    /* A capture in global or thread-local mode forbids cudaMalloc on this
     * thread; allocating is safe here (the memory is never freed before the
     * graph's replays: rule 5), so allow it for this call, as PyTorch does. */
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = a->pinned ? cudaHostAlloc(ptr, size, cudaHostAllocPortable) : cudaMalloc(ptr, size);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (e == cudaSuccess) return FH_OK;
    (void)cudaGetLastError();
    if (e != cudaErrorMemoryAllocation) return fh__cuda_fail(e, a->pinned ? "cudaHostAlloc" : "cudaMalloc");
    if (attempt == 1 || fh__cuda_captures_active()) return oom_error(a, n, size);
    drain_events_locked(a);
    release_cached_locked(a);
  }
}

/* A capture-private pool takes an idle block of the device cache (rule 5):
 * home_id 0 means every event recorded on it has completed and no stream
 * may still use it, so the pool may own it from now on. The cache cannot be
 * released during a capture (cudaFree is forbidden there), so without this
 * a capture after a closed program would find the device full of its idle
 * blocks. */
static void adopt_idle_locked(arena *a, fh_mempool *p, int cls, fh__block **out) {
  for (fh__block *b = a->bins[cls]; b; b = b->next) {
    if (b->home_id != 0) continue;
    bin_remove(a->bins, b);
    b->pool = p;
    p->reserved += b->size;
    p->blocks++;
    a->st.pool_reserved += b->size;
    *out = b;
    return;
  }
}

static fh_status arena_alloc(arena *a, size_t n, fh_stream *stream, fh__block **out) {
  if (n > MAX_REQUEST) {
    pthread_mutex_lock(&a->mu);
    fh_status st = oom_error(a, n, n);
    pthread_mutex_unlock(&a->mu);
    return st;
  }
  size_t size = 0;
  int cls = size_class(n, &size);
  fh_stream **rel = NULL;
  int nrel = 0, caprel = 0;
  pthread_mutex_lock(&a->mu);
  if (!fh__cuda_captures_active()) {
    process_events_locked(a);
    if (a->deferred) process_deferred_locked(a, &rel, &nrel, &caprel);
  }
  fh_mempool *p = a->active;
  fh__block *b = p ? bin_take(p->bins, cls, 0) : bin_take(a->bins, cls, stream ? stream->id : 0);
  if (b == NULL && p != NULL) adopt_idle_locked(a, p, cls, &b);
  if (b != NULL) {
    a->st.cached_blocks--;
    a->st.reuses++;
  } else {
    void *ptr = NULL;
    fh_status st = FH_OK;
    if (!a->pinned) st = fh__cuda_use_device(a->dev);
    if (st == FH_OK) st = raw_alloc_locked(a, n, size, &ptr);
    if (st == FH_OK && (b = (fh__block *)fh_calloc(1, sizeof *b)) == NULL) {
      if (a->pinned) (void)cudaFreeHost(ptr);
      else (void)cudaFree(ptr);
      st = fh_error_set(FH_ERR_MEMORY, "out of memory allocating a block record");
    }
    if (st != FH_OK) {
      pthread_mutex_unlock(&a->mu);
      release_streams(rel, nrel);
      fh_free(rel);
      return st;
    }
    b->ptr = ptr;
    b->size = size;
    b->cls = cls;
    b->dev = a->pinned ? -1 : a->dev;
    a->st.reserved += size;
    a->st.cuda_allocs++;
    if (a->st.reserved > a->st.peak_reserved) a->st.peak_reserved = a->st.reserved;
    if (p) {
      b->pool = p;
      p->reserved += size;
      p->blocks++;
      a->st.pool_reserved += size;
    }
  }
  b->allocated = true;
  b->req = n;
  b->home = stream;
  fh_stream_retain(stream);
  b->home_id = 0;
  b->nuses = 0;
  stats_on_alloc(a, b);
  pthread_mutex_unlock(&a->mu);
  release_streams(rel, nrel);
  fh_free(rel);
  *out = b;
  return FH_OK;
}

fh_status fh__cuda_storage_alloc(fh_storage *s, fh_stream *stream) {
  ensure_arenas();
  s->free_fn = NULL;
  s->block = NULL;
  s->data = NULL;
  if (s->nbytes == 0) return FH_OK; /* no memory, nothing to free */
  fh__block *b = NULL;
  fh_status st = arena_alloc(&g_dev[s->device.index], s->nbytes, stream, &b);
  if (st != FH_OK) return st;
  s->data = b->ptr;
  s->block = b;
  s->free_fn = cuda_storage_free;
  return FH_OK;
}

fh_status fh__pinned_storage_alloc(fh_storage *s) {
  ensure_arenas();
  if (!fh_cuda_is_available())
    return fh_error_set(FH_ERR_CUDA, "pinned memory needs CUDA, which is not available: %s",
                        fh_cuda_unavailable_reason());
  /* cudaHostAlloc needs a context: the current device's */
  fh_status st = fh__cuda_use_device(fh_cuda_current_device());
  if (st != FH_OK) return st;
  fh__block *b = NULL;
  if ((st = arena_alloc(&g_pinned, s->nbytes, NULL, &b)) != FH_OK) return st;
  s->data = b->ptr;
  s->block = b;
  s->free_fn = cuda_storage_free;
  return FH_OK;
}

/* ---- streams die ------------------------------------------------------------ */
void fh__cuda_alloc_stream_retired(fh_stream *s) {
  ensure_arenas();
  if (fh__cuda_captures_active()) return; /* no event may be recorded: the blocks wait for empty_cache */
  arena *a = &g_dev[s->dev.index];
  pthread_mutex_lock(&a->mu);
  for (int c = 0; c < NCLS; ++c) {
    fh__block *b = a->bins[c];
    while (b) {
      fh__block *next = b->next;
      if (b->home_id == s->id) {
        bin_remove(a->bins, b);
        a->st.cached_blocks--;
        b->home_id = 0;
        guard_with_event(a, b, s);
        if (b->pending > 0) a->st.pending_blocks++;
        else make_free_locked(a, b);
      }
      b = next;
    }
  }
  size_t n = a->npend; /* pending blocks bound for this stream's list */
  for (size_t i = 0; i < n; ++i) {
    fh__block *b = a->pending[i].b;
    if (b->home_id == s->id && !b->allocated) {
      b->home_id = 0;
      guard_with_event(a, b, s);
    }
  }
  pthread_mutex_unlock(&a->mu);
}

/* ---- statistics and cache ----------------------------------------------------- */
fh_status fh_cuda_memory_stats(int index, fh_memory_stats *out) {
  if (index < 0) index = fh_cuda_current_device();
  fh_device d = {FH_DEVICE_CUDA, index};
  fh_status st = fh_device_check(d);
  if (st != FH_OK) return st;
  ensure_arenas();
  arena *a = &g_dev[index];
  pthread_mutex_lock(&a->mu);
  if (!fh__cuda_captures_active()) process_events_locked(a);
  *out = a->st;
  pthread_mutex_unlock(&a->mu);
  return FH_OK;
}

fh_status fh_cuda_reset_peak_memory_stats(int index) {
  if (index < 0) index = fh_cuda_current_device();
  fh_device d = {FH_DEVICE_CUDA, index};
  fh_status st = fh_device_check(d);
  if (st != FH_OK) return st;
  ensure_arenas();
  arena *a = &g_dev[index];
  pthread_mutex_lock(&a->mu);
  a->st.peak_allocated = a->st.allocated;
  a->st.peak_reserved = a->st.reserved;
  pthread_mutex_unlock(&a->mu);
  return FH_OK;
}

fh_status fh_pinned_memory_stats(fh_memory_stats *out) {
  if (!fh_cuda_is_available())
    return fh_error_set(FH_ERR_CUDA, "CUDA is not available: %s", fh_cuda_unavailable_reason());
  ensure_arenas();
  pthread_mutex_lock(&g_pinned.mu);
  if (!fh__cuda_captures_active()) process_events_locked(&g_pinned);
  *out = g_pinned.st;
  pthread_mutex_unlock(&g_pinned.mu);
  return FH_OK;
}

fh_status fh_cuda_empty_cache(void) {
  if (!fh_cuda_is_available())
    return fh_error_set(FH_ERR_CUDA, "CUDA is not available: %s", fh_cuda_unavailable_reason());
  ensure_arenas();
  if (fh__cuda_captures_active()) return FH_OK; /* cudaFree is forbidden during capture */
  fh__copy_release_staging();
  int n = fh_cuda_device_count();
  for (int i = 0; i < n; ++i) {
    arena *a = &g_dev[i];
    run_deferred(a);
    pthread_mutex_lock(&a->mu);
    process_events_locked(a);
    release_cached_locked(a);
    pthread_mutex_unlock(&a->mu);
  }
  run_deferred(&g_pinned);
  pthread_mutex_lock(&g_pinned.mu);
  process_events_locked(&g_pinned);
  release_cached_locked(&g_pinned);
  pthread_mutex_unlock(&g_pinned.mu);
  return FH_OK;
}

/* ---- pools -------------------------------------------------------------------- */
fh_status fh_mempool_new(fh_device dev, fh_mempool **out) {
  fh_status st = fh_device_check(dev);
  if (st != FH_OK) return st;
  if (dev.type != FH_DEVICE_CUDA) return fh_error_set(FH_ERR_VALUE, "memory pools exist only on CUDA devices");
  ensure_arenas();
  fh_mempool *p = (fh_mempool *)fh_calloc(1, sizeof *p);
  if (p == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory creating a memory pool");
  p->dev = dev.index;
  *out = p;
  return FH_OK;
}

fh_status fh_mempool_begin(fh_mempool *p) {
  arena *a = &g_dev[p->dev];
  pthread_mutex_lock(&a->mu);
  if (a->active != NULL) {
    pthread_mutex_unlock(&a->mu);
    return fh_error_set(FH_ERR_EXECUTION, "a capture memory pool is already active on cuda:%d", p->dev);
  }
  a->active = p;
  atomic_fetch_add(&g_captures, 1);
  pthread_mutex_unlock(&a->mu);
  return FH_OK;
}

fh_status fh_mempool_end(fh_mempool *p) {
  arena *a = &g_dev[p->dev];
  pthread_mutex_lock(&a->mu);
  if (a->active != p) {
    pthread_mutex_unlock(&a->mu);
    return fh_error_set(FH_ERR_EXECUTION, "fh_mempool_end: the pool is not active on cuda:%d", p->dev);
  }
  a->active = NULL;
  int left = atomic_fetch_sub(&g_captures, 1) - 1;
  pthread_mutex_unlock(&a->mu);
  if (left == 0) {
    int n = fh_cuda_device_count();
    for (int i = 0; i < n; ++i) run_deferred(&g_dev[i]);
    fh__pinned_process_deferred();
    fh__cuda_process_deferred_destroys();
  }
  return FH_OK;
}

void fh__pinned_process_deferred(void) { run_deferred(&g_pinned); }

void fh_mempool_free(fh_mempool *p) {
  if (p == NULL) return;
  arena *a = &g_dev[p->dev];
  pthread_mutex_lock(&a->mu);
  bool active = a->active == p;
  pthread_mutex_unlock(&a->mu);
  if (active) (void)fh_mempool_end(p);
  pthread_mutex_lock(&a->mu);
  p->closed = true;
  for (int c = 0; c < NCLS; ++c) {
    while (p->bins[c]) {
      fh__block *b = p->bins[c];
      bin_remove(p->bins, b);
      b->pool = NULL;
      b->home_id = 0;
      p->reserved -= b->size;
      a->st.pool_reserved -= b->size;
      p->blocks--;
      bin_push(a->bins, b); /* still counted as cached */
    }
  }
  bool gone = p->blocks == 0;
  pthread_mutex_unlock(&a->mu);
  if (gone) fh_free(p);
}

void fh_mempool_usage(const fh_mempool *p, uint64_t *reserved, uint64_t *blocks) {
  arena *a = &g_dev[p->dev];
  pthread_mutex_lock(&a->mu);
  *reserved = p->reserved;
  *blocks = p->blocks;
  pthread_mutex_unlock(&a->mu);
}
